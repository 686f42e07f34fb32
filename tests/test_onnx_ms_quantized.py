"""ONNX Runtime's com.microsoft quantized contrib ops through ``dml_jax.onnx.InferenceSession``,
each against onnxruntime's CPU provider (the contrib ops' reference implementation) on one-node
models built with ``onnx.helper``: attributes and optional inputs, INT8 and UINT8, and the forms
the converters reject (a ``ValidationError`` naming the node).

Tolerance: float results to float32 rounding (the products sum in another order). Quantized
results are exact where onnxruntime computes the same float32 steps (QLinearLeakyRelu's,
QLinearConcat's and QLinearWhere's lookup tables, QGemm's requantization), and within one step
(one unit of the integer result) where it orders or rounds an intermediate otherwise, so a value
near a rounding boundary may land on the other side: QLinearAdd / QLinearMul (MLAS scales by the
ratios ``A_scale / C_scale``; DirectML dequantizes, computes, then divides by C's scale), the
pools (MLAS's integer sums and multipliers against DirectML's float32 divisor), Sigmoid and
Softmax (float32 results an ulp apart between implementations). Each test asserts which DML
operators the node became.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import helper, numpy_helper

from dml_jax.errors import ValidationError
from dml_jax.onnx import InferenceSession

MS = "com.microsoft"
Q8 = [np.uint8, np.int8]


def _model(op, inputs, *, constants=(), out_dtype=None, onnx_opset=17, **attrs):
    """A one-node com.microsoft model. ``inputs``: name -> array (None: an absent optional
    input); names in ``constants`` are initializers. The output is 'y' of ``out_dtype``."""
    names = [n if a is not None else "" for n, a in inputs.items()]
    while names and not names[-1]:
        names.pop()
    node = helper.make_node(op, names, ["y"], domain=MS, name="n0", **attrs)
    elem = helper.np_dtype_to_tensor_dtype
    present = {n: a for n, a in inputs.items() if a is not None}
    graph = helper.make_graph(
        [node],
        op.lower(),
        [
            helper.make_tensor_value_info(n, elem(a.dtype), a.shape)
            for n, a in present.items()
            if n not in constants
        ],
        [helper.make_tensor_value_info("y", elem(np.dtype(out_dtype)), None)],
        [numpy_helper.from_array(present[n], n) for n in constants if n in present],
    )
    opsets = [helper.make_opsetid("", onnx_opset), helper.make_opsetid(MS, 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 10  # what onnxruntime 1.30 (the GPU machine) reads
    feeds = {n: a for n, a in present.items() if n not in constants}
    return model, feeds


def _onnxruntime(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def _run(model, feeds, ops=(), steps=0, rtol=1e-5, atol=1e-6, reference=None):
    """The session's output against onnxruntime's: integers within ``steps``, floats within
    rtol / atol; ``ops``: DML operators the node must have become. ``reference``: the model
    onnxruntime runs instead (where it cannot run ``model`` itself)."""
    want = _onnxruntime(reference or model, feeds)
    session = InferenceSession(model)
    got = session.run(None, feeds)[0]
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape, got.dtype)
    if want.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    else:
        diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
        assert diff.max(initial=0) <= steps, f"{diff.max()} steps at {np.argmax(diff)}"
    line = session.explain()
    for name in ops:
        assert re.search(rf"\b{name}\b", line), line
    return got, want


def _q(rng, dtype, shape, lo=None, hi=None):
    info = np.iinfo(dtype)
    return rng.integers(
        info.min if lo is None else lo, (info.max if hi is None else hi) + 1, shape
    ).astype(dtype)


def _zp(dtype, value=None):
    if value is None:
        value = 118 if dtype == np.uint8 else -7
    return np.array(value, dtype)


def _s(value):
    return np.array(value, np.float32)


def _rejects(model, feeds, pattern):
    with pytest.raises(ValidationError, match=pattern) as e:
        InferenceSession(model).run(None, feeds)
    assert "node 0 ('n0'" in str(e.value)


# ---------------------------------------------------------------------------------------------
# Element-wise QLinear ops


@pytest.mark.parametrize("dtype", Q8)
@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
def test_qlinear_binary(op, dtype, rng):
    a, b = _q(rng, dtype, (2, 3, 4)), _q(rng, dtype, (3, 1))
    inputs = {
        "A": a,
        "A_scale": _s(0.05),
        "A_zero_point": _zp(dtype),
        "B": b,
        "B_scale": _s(0.03),
        "B_zero_point": _zp(dtype, 3),
        "C_scale": _s(0.11 if op == "QLinearAdd" else 0.4),
        "C_zero_point": _zp(dtype, 9),
    }
    model, feeds = _model(op, inputs, constants=("A_scale", "B_scale"), out_dtype=dtype)
    dml = "ELEMENT_WISE_QUANTIZED_LINEAR_ADD" if op == "QLinearAdd" else "ELEMENT_WISE_MULTIPLY"
    _run(model, feeds, [dml], steps=1)


def _absent(inputs, *names):
    """``inputs`` with the zero points ``names`` absent, and with them 0 (what absent means):
    onnxruntime's type inference fails on a QLinear node whose zero points are absent before its
    last input, so it runs the explicit form."""
    zeros = {n: np.zeros((), inputs[n].dtype) for n in names}
    return {**inputs, **dict.fromkeys(names)}, {**inputs, **zeros}


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
def test_qlinear_binary_without_zero_points(op, rng):
    a, b = _q(rng, np.int8, (5, 6)), _q(rng, np.int8, (6,))
    inputs = {
        "A": a,
        "A_scale": _s(0.05),
        "A_zero_point": _zp(np.int8),
        "B": b,
        "B_scale": _s(0.02),
        "B_zero_point": _zp(np.int8),
        "C_scale": _s(0.07),
        "C_zero_point": _zp(np.int8),
    }
    absent, explicit = _absent(inputs, "A_zero_point", "B_zero_point")
    zeros = ("A_zero_point", "B_zero_point")
    model, feeds = _model(op, absent, constants=zeros, out_dtype=np.int8)
    reference = _model(op, explicit, constants=zeros, out_dtype=np.int8)[0]
    _run(model, feeds, steps=1, reference=reference)


@pytest.mark.parametrize("dtype", Q8)
@pytest.mark.parametrize(
    "op, attrs",
    [
        ("QLinearSigmoid", {}),
        ("QLinearLeakyRelu", {}),
        ("QLinearLeakyRelu", {"alpha": 0.3}),
    ],
)
def test_qlinear_activation(op, attrs, dtype):
    x = np.arange(256).astype(np.int64) + np.iinfo(dtype).min  # every input value
    inputs = {
        "X": x.astype(dtype).reshape(4, 64),
        "X_scale": _s(0.043),
        "X_zero_point": _zp(dtype),
        "Y_scale": _s(0.0041 if op == "QLinearSigmoid" else 0.03),
        "Y_zero_point": _zp(dtype, np.iinfo(dtype).min if op == "QLinearSigmoid" else 5),
    }
    model, feeds = _model(op, inputs, out_dtype=dtype, **attrs)
    act = "ACTIVATION_SIGMOID" if op == "QLinearSigmoid" else "ACTIVATION_LEAKY_RELU"
    # LeakyRelu: onnxruntime's lookup table holds the same float32 steps (exact); Sigmoid's
    # float32 values may differ by an ulp between implementations (one step at a tie).
    steps = 1 if op == "QLinearSigmoid" else 0
    _run(
        model, feeds, ["ELEMENT_WISE_DEQUANTIZE_LINEAR", act, "ELEMENT_WISE_QUANTIZE_LINEAR"], steps
    )


def test_qlinear_activation_without_zero_points(rng):
    inputs = {
        "X": _q(rng, np.uint8, (3, 7)),
        "X_scale": _s(0.05),
        "X_zero_point": _zp(np.uint8),
        "Y_scale": _s(0.004),
        "Y_zero_point": _zp(np.uint8),
    }
    absent, explicit = _absent(inputs, "X_zero_point", "Y_zero_point")
    zeros = ("X_zero_point", "Y_zero_point")
    model, feeds = _model("QLinearSigmoid", absent, constants=zeros, out_dtype=np.uint8)
    reference = _model("QLinearSigmoid", explicit, constants=zeros, out_dtype=np.uint8)[0]
    _run(model, feeds, steps=1, reference=reference)


@pytest.mark.parametrize("dtype", Q8)
@pytest.mark.parametrize("opset, axis", [(13, -1), (13, 1), (12, 1), (12, -1)])
def test_qlinear_softmax(opset, axis, dtype, rng):
    # onnxruntime requires the output zero point to be the type's lowest value (0 or -128).
    inputs = {
        "X": _q(rng, dtype, (2, 3, 5)),
        "X_scale": _s(0.06),
        "x_zero_point": _zp(dtype),
        "y_scale": _s(1 / 256),
        "y_zero_point": _zp(dtype, np.iinfo(dtype).min),
    }
    model, feeds = _model(
        "QLinearSoftmax", inputs, out_dtype=dtype, onnx_opset=opset, opset=opset, axis=axis
    )
    softmax = "ACTIVATION_SOFTMAX1" if opset >= 13 else "ACTIVATION_SOFTMAX"
    _run(model, feeds, [softmax], steps=1)


@pytest.mark.parametrize("dtype", Q8)
@pytest.mark.parametrize("axis", [1, -1])
def test_qlinear_concat(axis, dtype, rng):
    shapes = [(2, 3, 4), (2, 5, 4), (2, 1, 4)] if axis == 1 else [(2, 3, 4), (2, 3, 2), (2, 3, 1)]
    inputs = {"Y_scale": _s(0.05), "Y_zero_point": _zp(dtype)}
    for i, (shape, scale) in enumerate(zip(shapes, [0.05, 0.02, 0.13])):
        inputs |= {
            f"x{i}": _q(rng, dtype, shape),
            f"s{i}": _s(scale),
            f"z{i}": _zp(dtype, i * 5 + 4),
        }
    # The first input has the output's scale and zero point (onnxruntime copies it as it is).
    inputs["z0"] = _zp(dtype)
    model, feeds = _model("QLinearConcat", inputs, out_dtype=dtype, axis=axis)
    # onnxruntime requantizes through the same float32 dequantize and quantize: exact.
    _run(model, feeds, ["JOIN", "ELEMENT_WISE_QUANTIZE_LINEAR"])


@pytest.mark.parametrize("dtype", Q8)
def test_qlinear_where(dtype, rng):
    cond = rng.integers(0, 2, (3, 4)).astype(bool)
    inputs = {
        "condition": cond,
        "X": _q(rng, dtype, (3, 4)),
        "x_scale": _s(0.05),
        "x_zero_point": _zp(dtype),
        "Y": _q(rng, dtype, (4,)),
        "y_scale": _s(0.02),
        "y_zero_point": _zp(dtype, 3),
        "z_scale": _s(0.04),
        "z_zero_point": _zp(dtype, 1),
    }
    _run(*_model("QLinearWhere", inputs, out_dtype=dtype), ["ELEMENT_WISE_IF"])


# ---------------------------------------------------------------------------------------------
# Pooling


def _pool_inputs(rng, dtype, shape, zero=True):
    return {
        "X": _q(rng, dtype, shape),
        "x_scale": _s(0.07),
        "x_zero_point": _zp(dtype) if zero else None,
        "y_scale": _s(0.05),
        "y_zero_point": _zp(dtype, 4) if zero else None,
    }


@pytest.mark.parametrize("dtype", Q8)
@pytest.mark.parametrize(
    "shape, attrs",
    [
        ((1, 3, 7, 6), {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 1]}),
        (
            (2, 2, 7, 7),
            {
                "kernel_shape": [3, 3],
                "strides": [2, 2],
                "pads": [1, 1, 1, 1],
                "count_include_pad": 1,
            },
        ),
        ((1, 2, 6, 7), {"kernel_shape": [2, 3], "strides": [2, 2], "ceil_mode": 1}),
        ((1, 2, 6, 7), {"kernel_shape": [2, 2], "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
        ((2, 3, 9), {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
        ((1, 2, 4, 5, 6), {"kernel_shape": [2, 2, 3]}),
        # ceil_mode's extra end padding with count_include_pad: onnxruntime divides by the whole
        # window (as DirectML's IncludePadding does), not by ONNX's AveragePool count.
        (
            (1, 2, 6, 7),
            {
                "kernel_shape": [3, 3],
                "strides": [2, 2],
                "pads": [1, 1, 1, 1],
                "ceil_mode": 1,
                "count_include_pad": 1,
            },
        ),
    ],
)
def test_qlinear_average_pool(shape, attrs, dtype, rng):
    model, feeds = _model(
        "QLinearAveragePool", _pool_inputs(rng, dtype, shape), out_dtype=dtype, **attrs
    )
    _run(model, feeds, ["QUANTIZED_LINEAR_AVERAGE_POOLING"], steps=1)


@pytest.mark.parametrize("shape", [(1, 6, 7, 3), (2, 9, 3)])
def test_qlinear_average_pool_channels_last(shape, rng):
    nd = len(shape) - 2
    attrs = {"kernel_shape": [2] * nd, "strides": [1] * nd, "pads": [1] * (2 * nd)}
    model, feeds = _model(
        "QLinearAveragePool",
        _pool_inputs(rng, np.uint8, shape),
        out_dtype=np.uint8,
        channels_last=1,
        **attrs,
    )
    _run(model, feeds, ["QUANTIZED_LINEAR_AVERAGE_POOLING", "ELEMENT_WISE_IDENTITY"], steps=1)


@pytest.mark.parametrize("dtype", Q8)
@pytest.mark.parametrize(
    "shape, channels_last",
    [
        ((2, 3, 5, 4), 0),
        ((2, 5, 4, 3), 1),
        ((2, 3, 7), 0),
        ((1, 3, 2, 2, 2, 2), 0),
        ((2, 7, 3), 1),
        ((1, 2, 3, 4, 5), 1),
    ],
)
def test_qlinear_global_average_pool(shape, channels_last, dtype, rng):
    inputs = _pool_inputs(rng, dtype, shape)
    model, feeds = _model(
        "QLinearGlobalAveragePool", inputs, out_dtype=dtype, channels_last=channels_last
    )
    _run(model, feeds, ["QUANTIZED_LINEAR_AVERAGE_POOLING"], steps=1)


@pytest.mark.parametrize("tw", Q8)
@pytest.mark.parametrize("channels_last", [0, 1])
def test_qlinear_conv(channels_last, tw, rng):
    """com.microsoft QLinearConv (onnxruntime's NHWC form): ai.onnx QLinearConv's mapping."""
    x = _q(rng, np.uint8, (1, 6, 7, 4) if channels_last else (1, 4, 6, 7))
    inputs = {
        "x": x,
        "x_scale": _s(0.02),
        "x_zero_point": _zp(np.uint8),
        "w": _q(rng, tw, (6, 2, 3, 3)),
        "w_scale": rng.uniform(0.005, 0.02, 6).astype(np.float32),
        "w_zero_point": np.zeros(6, tw),
        "y_scale": _s(0.3),
        "y_zero_point": _zp(np.uint8, 100),
        "B": rng.integers(-2000, 2000, 6).astype(np.int32),
    }
    model, feeds = _model(
        "QLinearConv",
        inputs,
        out_dtype=np.uint8,
        channels_last=channels_last,
        group=2,
        pads=[1, 0, 1, 2],
        strides=[2, 1],
    )
    ops = ["QUANTIZED_LINEAR_CONVOLUTION"] + (["ELEMENT_WISE_IDENTITY"] if channels_last else [])
    # onnxruntime requantizes the INT32 sums by one float32 multiplier per channel; DirectML
    # scales by x_scale * w_scale, then divides by y_scale: one step where they round apart.
    _run(model, feeds, ops, steps=1)


# ---------------------------------------------------------------------------------------------
# Integer matrix products


@pytest.mark.parametrize(
    "ta, tb, bias, zero_points, per_column",
    [
        (np.uint8, np.int8, True, True, False),
        (np.uint8, np.int8, False, False, True),
        (np.uint8, np.uint8, True, True, True),
        (np.int8, np.int8, True, False, False),
    ],
)
def test_matmul_integer_to_float(ta, tb, bias, zero_points, per_column, rng):
    n = 5
    inputs = {
        "A": _q(rng, ta, (2, 3, 8)),
        "B": _q(rng, tb, (8, n)),
        "a_scale": _s(0.02),
        "b_scale": rng.uniform(0.01, 0.05, n).astype(np.float32) if per_column else _s(0.03),
        "a_zero_point": _zp(ta) if zero_points else None,
        "b_zero_point": (np.arange(n).astype(tb) if per_column else _zp(tb, 2))
        if zero_points
        else None,
        "bias": rng.normal(0, 1, n).astype(np.float32) if bias else None,
    }
    model, feeds = _model(
        "MatMulIntegerToFloat", inputs, constants=("B", "b_scale"), out_dtype=np.float32
    )
    op = "MATRIX_MULTIPLY_INTEGER_TO_FLOAT" if ta == tb else "MATRIX_MULTIPLY_INTEGER"
    _run(model, feeds, [op])


@pytest.mark.parametrize("tb", Q8)
def test_matmul_integer_to_float16(tb, rng):
    inputs = {
        "A": _q(rng, np.uint8, (3, 8)),
        "B": _q(rng, tb, (8, 5)),
        "a_scale": np.array(0.02, np.float16),
        "b_scale": np.array(0.03, np.float16),
        "a_zero_point": _zp(np.uint8),
        "b_zero_point": None,
        "bias": rng.normal(0, 1, 5).astype(np.float16),
    }
    model, feeds = _model("MatMulIntegerToFloat", inputs, constants=("B",), out_dtype=np.float16)
    op = "MATRIX_MULTIPLY_INTEGER_TO_FLOAT" if tb == np.uint8 else "MATRIX_MULTIPLY_INTEGER"
    # Against the contrib formula in float64. MATRIX_MULTIPLY_INTEGER_TO_FLOAT rounds its float32
    # result once to float16; the INT8-B path rounds three times in float16 (the scales'
    # ELEMENT_WISE_MULTIPLY, DEQUANTIZE_LINEAR of the product, the bias's ADD): within two
    # float16 units of the product and one of the result, plus float32's rounding of the terms
    # where they cancel.
    # onnxruntime's CPU kernel is no reference here: it differs by up to 9 float16 units of the
    # result (by more than one in a quarter of seeded cases).
    a = inputs["A"].astype(np.float64) - float(inputs["a_zero_point"])
    scale = float(inputs["a_scale"]) * float(inputs["b_scale"])
    product = a @ inputs["B"].astype(np.float64) * scale
    exact = product + inputs["bias"]
    session = InferenceSession(model)
    (got,) = session.run(None, feeds)
    assert got.dtype == np.float16 and got.shape == exact.shape
    units = [np.spacing(np.abs(v).astype(np.float16)) for v in (product, exact)]
    bound = (
        2 * units[0]
        + units[1]
        + 2.0**-22 * (np.abs(product) + np.abs(inputs["bias"].astype(np.float64)))
    )
    assert (np.abs(got - exact) <= bound).all(), np.abs(got - exact) / bound
    assert re.search(rf"\b{op}\b", session.explain())


@pytest.mark.parametrize("tb", Q8)
@pytest.mark.parametrize(
    "bias, zero_point, per_column", [(True, True, False), (False, False, False), (True, True, True)]
)
def test_dynamic_quantize_matmul(tb, bias, zero_point, per_column, rng):
    n = 6
    inputs = {
        "A": rng.normal(0, 2, (3, 4, 16)).astype(np.float32),
        "B": _q(rng, tb, (16, n)),
        "b_scale": rng.uniform(0.01, 0.03, n).astype(np.float32) if per_column else _s(0.02),
        "b_zero_point": (np.arange(n).astype(tb) if per_column else _zp(tb, 3))
        if zero_point
        else None,
        "bias": rng.normal(0, 1, n).astype(np.float32) if bias else None,
    }
    model, feeds = _model(
        "DynamicQuantizeMatMul",
        inputs,
        constants=("B", "b_scale", "b_zero_point", "bias"),
        out_dtype=np.float32,
    )
    # onnxruntime quantizes A to UINT8, DirectML's provider to B's type: the dequantized values
    # are the same, so the results agree to float32 rounding.
    _run(
        model,
        feeds,
        ["DYNAMIC_QUANTIZE_LINEAR", "MATRIX_MULTIPLY_INTEGER_TO_FLOAT"],
        rtol=1e-4,
        atol=1e-4,
    )


@pytest.mark.parametrize(
    "ta, tb, attrs, c_shape, quantized, per_column",
    [
        (np.uint8, np.int8, {}, None, True, False),
        (np.uint8, np.uint8, {"transA": 1}, (5,), True, True),
        (np.int8, np.int8, {"transB": 1, "alpha": 0.5}, (4, 5), True, False),
        (np.uint8, np.int8, {"transA": 1, "transB": 1}, (4, 1), False, True),
        (np.int8, np.int8, {"alpha": 2.0}, (), False, False),
    ],
)
def test_qgemm(ta, tb, attrs, c_shape, quantized, per_column, rng):
    m, k, n = 4, 9, 5
    a = _q(rng, ta, (k, m) if attrs.get("transA") else (m, k))
    b = _q(rng, tb, (n, k) if attrs.get("transB") else (k, n))
    inputs = {
        "A": a,
        "a_scale": _s(0.03),
        "a_zero_point": _zp(ta),
        "B": b,
        "b_scale": rng.uniform(0.01, 0.04, n).astype(np.float32) if per_column else _s(0.02),
        "b_zero_point": np.arange(n).astype(tb)
        if per_column
        else _zp(tb, -3 if tb == np.int8 else 3),
        "C": None if c_shape is None else rng.integers(-500, 500, c_shape).astype(np.int32),
        "y_scale": _s(0.09) if quantized else None,
        "y_zero_point": _zp(ta, 10) if quantized else None,
    }
    model, feeds = _model(
        "QGemm",
        inputs,
        constants=("B", "b_scale", "b_zero_point"),
        out_dtype=ta if quantized else np.float32,
        **attrs,
    )
    # The same float32 multiplier and rounding as onnxruntime's requantization: exact.
    _run(model, feeds, ["MATRIX_MULTIPLY_INTEGER", "ELEMENT_WISE_DEQUANTIZE_LINEAR"])


# ---------------------------------------------------------------------------------------------
# MatMulNBits


def _nbits(rng, a, n, k, bits, block, *, zero="packed", bias=False, g_idx=None, dtype=np.float32):
    """A MatMulNBits model: random B codes packed low bits first, per-block scales, zero points
    packed (``zero``: "packed", "float" or None)."""
    blocks = -(-k // block)
    codes = rng.integers(0, 1 << bits, (n, blocks * block)).astype(np.uint8)
    per = 8 // bits

    def pack(values, width):
        values = values.reshape(values.shape[0], -1, per).astype(np.uint16)
        shifts = (np.arange(per) * bits).astype(np.uint16)
        return (values << shifts).sum(-1).astype(np.uint8).reshape(values.shape[0], width)

    b = pack(codes, blocks * block // per).reshape(n, blocks, block * bits // 8)
    scales = rng.uniform(0.01, 0.1, (n, blocks)).astype(dtype)
    zeros = None
    if zero == "packed":
        width = -(-blocks * bits // 8)
        z = rng.integers(0, 1 << bits, (n, width * per)).astype(np.uint8)
        zeros = pack(z, width)
    elif zero == "float":
        zeros = rng.uniform(0, (1 << bits) - 1, (n, blocks)).astype(dtype)
    inputs = {
        "A": a.astype(dtype),
        "B": b,
        "scales": scales,
        "zero_points": zeros,
        "g_idx": g_idx,
        "bias": rng.normal(0, 1, n).astype(dtype) if bias else None,
    }
    return _model(
        "MatMulNBits",
        inputs,
        constants=("B", "scales", "zero_points", "g_idx"),
        out_dtype=dtype,
        K=k,
        N=n,
        bits=bits,
        block_size=block,
    )


@pytest.mark.parametrize(
    "shape, n, bits, block, zero, bias",
    [
        ((3, 64), 8, 4, 32, "packed", False),
        ((2, 3, 48), 5, 4, 16, None, True),  # K: three blocks of 16; an odd count of zero points
        ((4, 40), 6, 4, 16, "packed", True),  # K does not fill the last block
        ((2, 64), 3, 4, 32, "float", False),
        ((5, 32), 4, 8, 16, "packed", True),
        ((64,), 4, 8, 32, None, False),
        ((3, 64), 5, 2, 16, "packed", False),
    ],
)
def test_matmul_nbits(shape, n, bits, block, zero, bias, rng):
    """The float32 sums of 8-bit weights run to ~30 while an output may cancel to ~0.06, so
    the tolerance is a few float32 steps of the running sum (2e-6 each at 32), not of the
    output: two summation orders differ by that much (onnxruntime's and XLA's)."""
    a = rng.normal(0, 1, shape)
    model, feeds = _nbits(rng, a, n, shape[-1], bits, block, zero=zero, bias=bias)
    _run(model, feeds, ["DEQUANTIZE", "GEMM"], rtol=1e-5, atol=1e-4)


def test_matmul_nbits_float16(rng):
    model, feeds = _nbits(rng, rng.normal(0, 1, (3, 64)), 6, 64, 4, 32, bias=True, dtype=np.float16)
    _run(model, feeds, ["DEQUANTIZE", "GEMM"], rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("zero", [None, "float"])
def test_matmul_nbits_g_idx(zero, rng):
    k, block = 64, 16
    g_idx = (rng.permutation(k) // block).astype(np.int32)
    model, feeds = _nbits(rng, rng.normal(0, 1, (3, k)), 5, k, 4, block, zero=zero, g_idx=g_idx)
    _run(model, feeds, ["DEQUANTIZE", "GATHER", "GEMM"], rtol=1e-5, atol=1e-5)


def test_matmul_nbits_g_idx_packed_zero_points(rng):
    """Column k of B reads block g_idx[k]'s scale and zero point (the op's documentation).
    onnxruntime 1.32's CPU kernel drops packed zero points when g_idx is given (it dequantizes
    with 8), so the expected values are NumPy's."""
    k, block, n = 64, 16, 5
    g_idx = (rng.permutation(k) // block).astype(np.int32)
    model, feeds = _nbits(rng, rng.normal(0, 1, (3, k)), n, k, 4, block, g_idx=g_idx)
    params = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    codes = _nibbles(params["B"].reshape(n, -1))
    zeros = _nibbles(params["zero_points"])[:, g_idx]
    weights = (codes - zeros) * params["scales"][:, g_idx].astype(np.float64)
    got = InferenceSession(model).run(None, feeds)[0]
    np.testing.assert_allclose(got, feeds["A"] @ weights.T, rtol=1e-5, atol=1e-5)


def _nibbles(packed):
    return np.stack([packed & 15, packed >> 4], -1).reshape(packed.shape[0], -1).astype(np.float64)


def test_matmul_nbits_run_time_weights(rng):
    """B from a graph input: the session specialises on its value (DirectML's DEQUANTIZE reads
    it unpacked, one element per byte, so it is unpacked at import)."""
    model, feeds = _nbits(rng, rng.normal(0, 1, (2, 32)), 4, 32, 4, 32)
    b = model.graph.initializer[0]
    model.graph.input.append(helper.make_tensor_value_info("B", b.data_type, list(b.dims)))
    feeds["B"] = numpy_helper.to_array(b)
    del model.graph.initializer[0]
    _run(model, feeds, ["DEQUANTIZE", "GEMM"], rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# QuantizeLinear / DequantizeLinear


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint16, np.int16])
@pytest.mark.parametrize("axis", [None, 1])
def test_quantize_dequantize_linear(dtype, axis, rng):
    x = rng.normal(0, 40, (2, 3, 4)).astype(np.float32)
    x.flat[:4] = [0.5, 1.5, -2.5, 1e9]  # ties round to even; out of range saturates
    count = 3 if axis is not None else None
    scale = rng.uniform(0.01, 0.5, count).astype(np.float32) if count else _s(0.3)
    wide = np.iinfo(dtype).bits == 16
    zero = (np.arange(count) * (300 if wide else 3)).astype(dtype) if count else _zp(dtype, 7)
    attrs = {} if axis is None else {"axis": axis}
    quantize = "JAX:QuantizeLinear.16bit" if wide else "ELEMENT_WISE_QUANTIZE_LINEAR"
    inputs = {"x": x, "y_scale": scale, "y_zero_point": zero}
    q, _ = _run(*_model("QuantizeLinear", inputs, out_dtype=dtype, **attrs), [quantize])
    inputs = {"x": q, "x_scale": scale, "x_zero_point": zero}
    model, feeds = _model("DequantizeLinear", inputs, out_dtype=np.float32, **attrs)
    _run(model, feeds, ["ELEMENT_WISE_DEQUANTIZE_LINEAR"], rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.uint16])
def test_quantize_linear_nan_and_infinities(dtype):
    """DirectML's quantization (docs/semantics.md, "Quantization"): NaN becomes the zero point,
    infinities saturate; the 16-bit types' JAX lowering keeps that rule. (onnxruntime
    casts NaN to an integer, which C++ leaves undefined: NumPy gives the expected values.)"""
    x = np.array([np.nan, np.inf, -np.inf, 3.0], np.float32)
    zero = np.array(5, dtype)
    inputs = {"x": x, "y_scale": _s(0.5), "y_zero_point": zero}
    model, feeds = _model(
        "QuantizeLinear", inputs, constants=("y_scale", "y_zero_point"), out_dtype=dtype
    )
    got = InferenceSession(model).run(None, feeds)[0]
    info = np.iinfo(dtype)
    np.testing.assert_array_equal(got, np.array([5, info.max, info.min, 11], dtype))


def test_dequantize_linear_int32(rng):
    inputs = {"x": rng.integers(-(2**20), 2**20, (3, 5)).astype(np.int32), "x_scale": _s(0.001)}
    _run(*_model("DequantizeLinear", inputs, out_dtype=np.float32), rtol=0, atol=0)


# ---------------------------------------------------------------------------------------------
# Rejected forms


def test_rejects_per_channel_qlinear_scale(rng):
    inputs = {
        "A": _q(rng, np.uint8, (2, 3)),
        "A_scale": np.full(3, 0.1, np.float32),
        "A_zero_point": None,
        "B": _q(rng, np.uint8, (2, 3)),
        "B_scale": _s(0.1),
        "B_zero_point": None,
        "C_scale": _s(0.1),
    }
    _rejects(*_model("QLinearAdd", inputs, out_dtype=np.uint8), "A's scale must hold one value")


def test_rejects_a_missing_required_input(rng):
    inputs = {
        "X": _q(rng, np.uint8, (1, 2, 3, 3)),
        "x_scale": _s(0.1),
        "x_zero_point": None,
        "y_scale": _s(0.1),
        "y_zero_point": _zp(np.uint8),
    }
    model, feeds = _model("QLinearGlobalAveragePool", inputs, out_dtype=np.uint8)
    _rejects(model, feeds, "input 2 \\('x_zero_point'\\) is required")


def test_rejects_an_unknown_attribute(rng):
    inputs = {
        "X": _q(rng, np.uint8, (3,)),
        "X_scale": _s(0.1),
        "X_zero_point": None,
        "Y_scale": _s(0.1),
    }
    model, feeds = _model("QLinearSigmoid", inputs, out_dtype=np.uint8, alpha=0.5)
    _rejects(model, feeds, "attribute 'alpha' is not an attribute")


def test_rejects_qgemm_y_scale_without_zero_point(rng):
    inputs = {
        "A": _q(rng, np.uint8, (2, 3)),
        "a_scale": _s(0.1),
        "a_zero_point": _zp(np.uint8),
        "B": _q(rng, np.int8, (3, 2)),
        "b_scale": _s(0.1),
        "b_zero_point": _zp(np.int8),
        "C": None,
        "y_scale": _s(0.1),
    }
    _rejects(*_model("QGemm", inputs, out_dtype=np.uint8), "y_scale and y_zero_point")


def _rejected_cases():
    """(op, inputs, attributes, error pattern) cases; random inputs from a fixed generator."""
    rng = np.random.default_rng(0)
    return [
        ("QLinearConcat", {"Y_scale": _s(0.1), "Y_zero_point": _zp(np.uint8),
                           "x0": _q(rng, np.uint8, (2, 2)), "s0": _s(0.1)}, {"axis": 0},
         "the op takes Y_scale, Y_zero_point, then"),
        ("QLinearSoftmax", {"X": _q(rng, np.uint8, (2, 3)), "X_scale": _s(0.1),
                            "x_zero_point": _zp(np.uint8), "y_scale": _s(1 / 256),
                            "y_zero_point": _zp(np.uint8, 0)}, {},
         "attribute 'opset' is required"),
        ("DynamicQuantizeMatMul", {"A": _q(rng, np.uint8, (2, 3)),
                                   "B": _q(rng, np.int8, (3, 2)), "b_scale": _s(0.1)}, {},
         "A must be FLOAT32"),
        ("MatMulIntegerToFloat", {"A": _q(rng, np.uint8, (2, 3)),
                                  "B": _q(rng, np.int8, (3, 2)),
                                  "a_scale": np.full(2, 0.1, np.float32), "b_scale": _s(0.1)},
         {}, "a_scale must hold one value"),
        ("QGemm", {"A": _q(rng, np.uint8, (2, 3)), "a_scale": _s(0.1),
                   "a_zero_point": _zp(np.uint8), "B": _q(rng, np.int8, (3, 4)),
                   "b_scale": np.full(3, 0.1, np.float32), "b_zero_point": np.zeros(3, np.int8)},
         {}, "one value or one per column \\(4\\)"),
        ("MatMulNBits", {"A": rng.normal(0, 1, (2, 32)).astype(np.float32),
                         "B": np.zeros((4, 1, 8), np.uint8), "scales": np.ones(4, np.float32)},
         {"K": 32, "N": 4, "block_size": 32}, "B must be UINT8 of"),
    ]  # fmt: skip


@pytest.mark.parametrize("op, inputs, attrs, pattern", _rejected_cases())
def test_rejects(op, inputs, attrs, pattern):
    constants = [n for n in inputs if n not in ("A", "X", "x0")]
    model, feeds = _model(op, inputs, constants=constants, out_dtype=np.float32, **attrs)
    _rejects(model, feeds, pattern)


def test_rejects_matmul_nbits_prepacked(rng):
    model, feeds = _nbits(rng, rng.normal(0, 1, (2, 32)), 4, 32, 4, 32)
    model.graph.node[0].attribute.append(helper.make_attribute("weight_prepacked", 1))
    with pytest.raises(ValidationError, match="weight_prepacked"):
        InferenceSession(model).run(None, feeds)
