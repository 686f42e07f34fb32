"""QDQ products (``optimize/quantized.py``): DequantizeLinear -> MatMul <- DequantizeLinear
becomes MATRIX_MULTIPLY_INTEGER_TO_FLOAT over the 8-bit values; its value against the product
written from the definitions (integer sums, scales applied once), against the session without
the rewrite and against onnxruntime; and the forms it leaves alone."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper

from dml_jax.onnx import InferenceSession

M, K, N = 8, 64, 48


def _model(rng, per_channel: bool, act_type=np.int8, bias: bool = True, trans: bool = False):
    """x (float32) -> QuantizeLinear -> DequantizeLinear -> MatMul (or Gemm with transB) by
    int8 weights through DequantizeLinear (one scale, or one per column), plus a bias."""
    sx, zx = np.float32(0.05), act_type(3)
    wq = rng.integers(-127, 128, (N, K) if trans else (K, N)).astype(np.int8)
    sw = (rng.uniform(0.002, 0.01, N) if per_channel else np.float32(0.004)).astype(np.float32)
    zw = np.zeros(N if per_channel else (), np.int8)
    b = (rng.standard_normal(N) * 0.1).astype(np.float32)
    inits = [
        numpy_helper.from_array(np.array(sx), "sx"), numpy_helper.from_array(np.array(zx), "zx"),
        numpy_helper.from_array(wq, "wq"), numpy_helper.from_array(np.array(sw), "sw"),
        numpy_helper.from_array(np.array(zw), "zw"), numpy_helper.from_array(b, "b"),
    ]  # fmt: skip
    axis = {"axis": 0 if trans else 1} if per_channel else {}
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
        helper.make_node("DequantizeLinear", ["wq", "sw", "zw"], ["wd"], **axis),
    ]
    if trans:
        nodes.append(helper.make_node("Gemm", ["xd", "wd"], ["h"], transB=1))
    else:
        nodes.append(helper.make_node("MatMul", ["xd", "wd"], ["h"]))
    out = "h"
    if bias:
        nodes.append(helper.make_node("Add", ["h", "b"], ["y"]))
        out = "y"
    graph = helper.make_graph(
        nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [M, K])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, [M, N])], inits,
    )  # fmt: skip
    # IR 10: the GPU machine's onnxruntime reads no newer
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    params = {"sx": sx, "zx": zx, "wq": wq.T if trans else wq, "sw": sw, "b": b if bias else 0 * b}
    return model.SerializeToString(), params


def _reference(x, p):
    """The definitions: x quantized (round half to even, saturated), the integer sums of the
    zero-point-free operands, the scales applied once, then the bias (float64)."""
    info = np.iinfo(np.asarray(p["zx"]).dtype)
    xq = np.clip(np.rint(x / p["sx"]) + int(p["zx"]), info.min, info.max).astype(np.int64)
    acc = (xq - int(p["zx"])) @ p["wq"].astype(np.int64)
    return acc * (np.float64(p["sx"]) * p["sw"].astype(np.float64)) + p["b"]


@pytest.mark.parametrize("per_channel", [False, True])
def test_qdq_matmul_runs_as_an_integer_product(rng, per_channel):
    data, p = _model(rng, per_channel)
    x = (rng.standard_normal((M, K)) * 2).astype(np.float32)
    s = InferenceSession(data)
    (got,) = s.run(None, {"x": x})
    (program,) = s._programs.values()
    ops = program.operators()
    assert "MATRIX_MULTIPLY_INTEGER_TO_FLOAT" in ops and "GEMM" not in ops, ops
    want = _reference(x, p)
    scale = np.abs(want).max()
    assert scale > 0.1 and want.std() > 0.05 * scale  # a reference that can tell values apart
    _agrees(data, x, got, want, "QDQMatMulFusion")


def _agrees(data, x, got, want, rewrite):
    """``got`` (the rewritten session's) against the definition to 1e-6 of the largest value,
    and to 1e-5 against the session without ``rewrite`` (the float operator of the dequantized
    values: the same up to rounding) and onnxruntime's CPU provider."""
    scale = np.abs(want).max()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * scale)
    (plain,) = InferenceSession(data, disabled_optimizers=[rewrite]).run(None, {"x": x})
    np.testing.assert_allclose(got, plain, rtol=1e-5, atol=1e-5 * scale)
    ort = pytest.importorskip("onnxruntime")
    (theirs,) = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(got, theirs, rtol=1e-5, atol=1e-5 * scale)


@pytest.mark.parametrize(
    "why, kw", [("uint8 activations, int8 weights", {"act_type": np.uint8}),
                ("Gemm with transB", {"trans": True})],
)  # fmt: skip
def test_forms_left_as_float_products(rng, why, kw):
    data, p = _model(rng, True, **kw)
    x = (rng.standard_normal((M, K)) * 2).astype(np.float32)
    s = InferenceSession(data)
    (got,) = s.run(None, {"x": x})
    (program,) = s._programs.values()
    assert "GEMM" in program.operators(), why
    want = _reference(x, p)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


# ---------------------------------------------------------------------------------------------
# QDQ convolutions (QDQConvFusion): CONVOLUTION_INTEGER, then to float32, times the scales


def conv_model(
    rng, c=8, k=16, zx=0, act_type=np.int8, per_channel=True, bias=True, zw=False, **attrs
):
    """x {2, C, 10, 10} (float32) -> QuantizeLinear -> DequantizeLinear -> Conv (3x3, pads 1,
    ``attrs``) by int8 weights through DequantizeLinear (one scale a channel, or one), plus an
    int32 bias through its DequantizeLinear (scale sx * sw, as onnxruntime's quantizer writes
    it), then Relu. Returns the model's bytes and its values."""
    group = attrs.get("group", 1)
    sx = np.float32(0.05)
    wq = rng.integers(-127, 128, (k, c // group, 3, 3)).astype(np.int8)
    sw = (rng.uniform(0.002, 0.01, k) if per_channel else np.full(k, 0.004)).astype(np.float32)
    bq = rng.integers(-1000, 1000, k).astype(np.int32)
    values = {"sx": np.array(sx), "zx": np.array(act_type(zx)), "wq": wq,
              "sw": sw if per_channel else np.array(sw[0]),
              "zw": (rng.integers(-3, 4, k) if zw else np.zeros(k)).astype(np.int8)
              if per_channel else np.array(np.int8(2 if zw else 0)),
              "bq": bq, "sb": sw * sx}  # fmt: skip
    axis = {"axis": 0} if per_channel else {}
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
        helper.make_node("DequantizeLinear", ["wq", "sw", "zw"], ["wd"], **axis),
        helper.make_node("DequantizeLinear", ["bq", "sb"], ["bd"], axis=0),
        helper.make_node(
            "Conv", ["xd", "wd"] + (["bd"] if bias else []), ["h"], pads=[1, 1, 1, 1], **attrs
        ),
        helper.make_node("Relu", ["h"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "qdq_conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, c, 10, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, name) for name, v in values.items()],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    return model.SerializeToString(), dict(values, bias=bias, **attrs)


def conv_reference(x, p):
    """The definitions in float64: x quantized (half to even, saturated), the exact integer
    sums of (xq - zx) with the weights over the zero-padded window, times sx * sw once, plus
    the dequantized bias, then Relu."""
    info = np.iinfo(p["zx"].dtype)
    xq = np.clip(np.rint(x / p["sx"]) + int(p["zx"]), info.min, info.max) - int(p["zx"])
    xq = np.pad(xq.astype(np.int64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    (s,), group = p.get("strides", [1])[:1], p.get("group", 1)
    wq = p["wq"].astype(np.int64) - np.reshape(p["zw"], (-1, 1, 1, 1)).astype(np.int64)
    k, cg = wq.shape[:2]
    size = (xq.shape[2] - 3) // s + 1
    acc = np.zeros((x.shape[0], k, size, size), np.int64)
    for o in range(k):
        g = o // (k // group)
        for i in range(3):
            for j in range(3):
                window = xq[:, g * cg : (g + 1) * cg, i : i + s * size : s, j : j + s * size : s]
                acc[:, o] += np.einsum("nchw,c->nhw", window, wq[o, :, i, j])
    y = (
        acc
        * (np.float64(p["sx"]) * np.broadcast_to(p["sw"], (k,)).astype(np.float64))[:, None, None]
    )
    if p["bias"]:
        y = (
            y
            + (p["bq"] * (p["sx"] * np.broadcast_to(p["sw"], (k,))).astype(np.float32))[
                :, None, None
            ]
        )
    return np.maximum(y, 0)


@pytest.mark.parametrize(
    "kw",
    [{}, {"per_channel": False}, {"zx": 5}, {"act_type": np.uint8, "zx": 128},
     {"bias": False}, {"strides": [2, 2]}, {"group": 2}, {"zw": True},
     {"zw": True, "per_channel": False}],
    ids=["symmetric", "one-scale", "zero-point", "uint8", "no-bias", "stride-2", "groups",
         "filter-zero-points", "filter-zero-point"],
)  # fmt: skip
def test_qdq_conv_runs_as_an_integer_convolution(rng, kw):
    data, p = conv_model(rng, **kw)
    x = (rng.standard_normal((2, 8, 10, 10)) * 3).astype(np.float32)
    s = InferenceSession(data)
    (got,) = s.run(None, {"x": x})
    (program,) = s._programs.values()
    ops = program.operators()
    assert "CONVOLUTION_INTEGER" in ops and "CONVOLUTION" not in ops, ops
    # zero points of 0 are left out (no term to subtract), others kept
    (conv,) = [n for n in program.imported.graph.nodes
               if getattr(n, "operator_type", "") == "DML_OPERATOR_CONVOLUTION_INTEGER"]  # fmt: skip
    assert (conv.input_zero_point_tensor is None) == (kw.get("zx", 0) == 0)
    assert (conv.filter_zero_point_tensor is None) == (not kw.get("zw"))
    want = conv_reference(x, p)
    scale = np.abs(want).max()
    assert scale > 1 and (want > 0).mean() > 0.2  # values that can be told apart
    _agrees(data, x, got, want, "QDQConvFusion")


def test_qdq_conv_with_a_run_time_filter_stays_a_float_convolution(rng):
    """A filter that is no DequantizeLinear output (a float initializer) leaves the
    convolution as it is."""
    data, _ = conv_model(rng)
    model = onnx.load_from_string(data)
    conv = next(n for n in model.graph.node if n.op_type == "Conv")
    model.graph.initializer.append(
        numpy_helper.from_array(rng.standard_normal((16, 8, 3, 3)).astype(np.float32), "wf")
    )
    conv.input[1] = "wf"
    s = InferenceSession(model.SerializeToString())
    s.run(None, {"x": rng.standard_normal((2, 8, 10, 10)).astype(np.float32)})
    (program,) = s._programs.values()
    assert "CONVOLUTION" in program.operators()
    assert "CONVOLUTION_INTEGER" not in program.operators()


def test_qdq_network_on_cuda_equals_the_cpu_bit_for_bit(tmp_path):
    """The quantizers round on CUDA by one exact residual (``_quant.round_quotient``) and on
    the CPU by an exact division: the same values. The quantized_models suite's small network
    (three convolutions, a residual addition, global pooling, a product), quantized by
    onnxruntime's ``quantize_static`` (QDQ, per-channel weights), gives equal outputs on both,
    its every quantizer's rounding included (a rounding one step off moves the logits)."""
    from dml_jax import fastpath
    from dml_jax.bench.suites.quantized_models import _cnn, quantize

    if not fastpath.cuda_present():
        pytest.skip("needs a CUDA GPU")
    src, path = str(tmp_path / "cnn.onnx"), str(tmp_path / "cnn_int8.onnx")
    (x,) = _cnn(src, 8)
    quantize("QDQ int8", src, path, [x])
    (gpu,) = InferenceSession(path, device="gpu").run(None, {"input_0": x})
    (cpu,) = InferenceSession(path, device="cpu").run(None, {"input_0": x})
    assert np.abs(cpu).max() > 0 and np.ptp(cpu, axis=1).min() > 0  # logits that differ
    np.testing.assert_array_equal(gpu, cpu)
