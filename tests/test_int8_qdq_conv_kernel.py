"""The int8 QDQ convolution chain (dml_jax.kernels.int8_qdq_conv): CONVOLUTION_INTEGER (1x1) ->
CAST -> MULTIPLY -> [ADD1] -> [ACTIVATION_RELU] -> QUANTIZE_LINEAR as one kernel.

Which runs it applies to (on descriptors); the kernel in Pallas's interpreter against the
definitions written in NumPy (exact integer sums, float32 steps, the quotient rounded half to
even, saturation); a QDQ network traced for CUDA on this machine (the kernel interpreted)
against the session without fast paths, bit for bit, with the graph's runs recorded. On a CUDA
machine, natively, the same network at ResNet-50's widths against the lax lowering.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest
from conftest import forced_cuda_kernel

import dml_jax as dml
from dml_jax import fastpath
from dml_jax.kernels import int8_qdq_conv as K

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper

from dml_jax.onnx import InferenceSession

T = dml.TensorDesc


def _run(c=64, k=32, window=1, zero=False, bias=True, relu=True, pad=0, act=None, quant=None):
    """The descriptors of a run as QDQConvFusion writes it, and its slots."""
    n, h = 2, 6
    out = h + 2 * pad - window + 1
    x, w = T("INT8", (n, c, h, h)), T("INT8", (k, c, window, window))
    ints = T("INT32", (n, k, out, out))
    conv = dml.ConvolutionIntegerOperatorDesc(
        x, T("INT8", (1, 1, 1, 1)) if zero else None, w, None, ints, strides=(1, 1),
        dilations=(1, 1), start_padding=(pad, pad), end_padding=(pad, pad), group_count=1,
    )  # fmt: skip
    f = T("FLOAT32", ints.sizes)
    channel = T("FLOAT32", ints.sizes, strides=(0, 1, 0, 0))
    descs = [
        conv,
        dml.CastOperatorDesc(ints, f),
        dml.ElementWiseMultiplyOperatorDesc(f, channel, f),
    ]
    if bias:
        descs.append(dml.ElementWiseAdd1OperatorDesc(f, channel, f, fused_activation=act))
    if relu:
        descs.append(dml.ActivationReluOperatorDesc(f, f))
    one = T("FLOAT32", ints.sizes, strides=(0, 0, 0, 0))
    q = dml.ElementWiseQuantizeLinearOperatorDesc(
        f, one, T("INT8", ints.sizes, strides=(0, 0, 0, 0)), T("INT8", ints.sizes)
    )
    descs.append(dataclasses.replace(q, **(quant or {})))
    for d in descs:
        dml.validate(d)
    return tuple(descs), (0,) * (len(descs) - 1)


def _applies(descs, slots):
    found = fastpath.chain(descs, slots)
    return found is not None and found.lower is K._lower


@pytest.mark.parametrize(
    "change, applies",
    [({}, True), ({"bias": False}, True), ({"relu": False}, True),
     ({"bias": False, "relu": False}, True), ({"window": 3}, False), ({"zero": True}, False),
     ({"c": 48}, False), ({"c": 16}, False), ({"k": 40}, False), ({"k": 96}, True),
     ({"pad": 1}, False), ({"act": dml.ActivationReluOperatorDesc(None, None)}, True),
     ({"act": dml.ActivationSigmoidOperatorDesc(None, None)}, False),
     ({"quant": {"scale_tensor": T("FLOAT32", (2, 32, 6, 6), strides=(0, 1, 0, 0))}}, False)],
)  # fmt: skip
def test_chain_applies(change, applies):
    assert _applies(*_run(**change)) == applies


def test_chain_needs_its_whole_run():
    """Without its quantizer, or read through the other operand of MULTIPLY, no run."""
    descs, slots = _run()
    assert not _applies(descs[:-1], slots[:-1])
    assert not _applies(descs, (0, 1) + slots[2:])  # the scales' slot: the channel operand
    mul = descs[2]
    swapped = dataclasses.replace(mul, a_tensor=mul.b_tensor, b_tensor=mul.a_tensor)
    assert _applies(descs[:2] + (swapped,) + descs[3:], (0, 1) + slots[2:])


def _reference(x, w, scale, bias, out_scale, zero, strides, lo, hi, relu):
    """The run's definition in NumPy: int64 sums rounded once to float32, the float32 steps,
    the correctly rounded quotient (NumPy's float32 division) rounded half to even, plus the
    zero point, saturated; NaN gives the zero point."""
    x = x[:, :, :: strides[0], :: strides[1]].astype(np.int64)
    sums = np.einsum("nchw,kc->nkhw", x, w[:, :, 0, 0].astype(np.int64)).astype(np.float32)
    v = sums * scale[None, :, None, None]
    if bias is not None:
        v = v + bias[None, :, None, None]
    if relu:
        v = np.where(v > 0, v, np.float32(0))
    with np.errstate(all="ignore"):
        q = np.round(v / out_scale[0])
    return np.where(np.isnan(q), zero[0], np.clip(q + zero[0], lo, hi))


@pytest.mark.parametrize(
    "c, k, strides, relu, out", [(64, 32, (1, 1), True, "INT8"), (256, 96, (2, 2), False, "INT8"),
                                 (32, 64, (1, 2), True, "UINT8")],
)  # fmt: skip
def test_interpreted_kernel_is_the_definition(rng, c, k, strides, relu, out):
    """Channels past one block of the product (256 in), a partial last block of rows (2 x 7 x 7
    or 2 x 7 x 4 rows), output scales that put sums beside halfway points, a NaN and an
    infinite channel scale, UINT8 with a zero point."""
    x = rng.integers(-128, 128, (2, c, 13, 13)).astype(np.int8)
    w = rng.integers(-128, 128, (k, c, 1, 1)).astype(np.int8)
    scale = rng.uniform(1e-4, 1e-3, k).astype(np.float32)
    scale[:2] = [np.nan, np.inf]
    bias = (rng.standard_normal(k) * 3).astype(np.float32)
    out_scale = np.float32([0.0173])
    out_type = dml.DataType[out]
    zero = np.float32([0 if out == "INT8" else 128])
    lo, hi = out_type.integer_range
    got = K.qdq_convolution(
        x, w, scale, bias, out_scale, zero, strides, out_type, relu, interpret=True
    )
    want = _reference(x, w, scale, bias, out_scale, zero, strides, lo, hi, relu)
    assert got.dtype == out_type.numpy_dtype
    np.testing.assert_array_equal(np.asarray(got), want)
    assert len(np.unique(want)) > 50  # values that can differ


def _network(rng, c=64, k=128, size=7):
    """x -> Q -> DQ -> Conv 1x1 (per-channel int8 weights, int32 bias) -> Relu -> Q -> DQ ->
    Conv 1x1 stride 2 (one weight scale, no bias) -> Q -> DQ -> y, plus a 3x3 convolution beside
    the first (its run is no 1x1 run): QDQ as onnxruntime's quantizer writes it, symmetric."""
    values = {"sx": np.array(np.float32(0.05)), "z": np.array(np.int8(0)),
              "sa": np.array(np.float32(0.11)), "sb": np.array(np.float32(0.37))}  # fmt: skip
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "z"], ["xd"])]  # fmt: skip

    def conv(name, src, s_in, cin, cout, window, per_channel, bias, **attrs):
        shape = (cout, cin, window, window)
        values[f"w{name}"] = rng.integers(-127, 128, shape).astype(np.int8)
        sw = rng.uniform(0.002, 0.01, cout if per_channel else 1).astype(np.float32)
        values[f"s{name}w"] = sw if per_channel else np.array(sw[0])
        values[f"z{name}w"] = np.zeros(cout, np.int8) if per_channel else np.array(np.int8(0))
        nodes.append(helper.make_node("DequantizeLinear", [f"w{name}", f"s{name}w", f"z{name}w"],
                                      [f"wd{name}"], **({"axis": 0} if per_channel else {})))  # fmt: skip
        inputs = [src, f"wd{name}"]
        if bias:
            values[f"q{name}"] = rng.integers(-3000, 3000, cout).astype(np.int32)
            values[f"t{name}"] = (sw * s_in).astype(np.float32)
            nodes.append(helper.make_node("DequantizeLinear", [f"q{name}", f"t{name}"],
                                          [f"bd{name}"], axis=0))  # fmt: skip
            inputs.append(f"bd{name}")
        nodes.append(helper.make_node("Conv", inputs, [f"h{name}"], **attrs))

    conv("a", "xd", 0.05, c, k, 1, True, True)
    nodes += [helper.make_node("Relu", ["ha"], ["ra"]),
              helper.make_node("QuantizeLinear", ["ra", "sa", "z"], ["aq"]),
              helper.make_node("DequantizeLinear", ["aq", "sa", "z"], ["ad"])]  # fmt: skip
    conv("b", "ad", 0.11, k, 64, 1, False, False, strides=[2, 2])
    conv("c", "xd", 0.05, c, 32, 3, True, True, pads=[1, 1, 1, 1])
    nodes += [helper.make_node("QuantizeLinear", ["hb", "sb", "z"], ["bq"]),
              helper.make_node("DequantizeLinear", ["bq", "sb", "z"], ["y"])]  # fmt: skip
    graph = helper.make_graph(
        nodes, "qdq_1x1", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, c, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("hc", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, name) for name, v in values.items()],
    )  # fmt: skip
    opsets = [helper.make_opsetid("", 17)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10).SerializeToString()


@pytest.fixture
def forced_cuda(monkeypatch):
    """CUDA's choice on this machine, the kernel interpreted; records its input's shapes."""
    with forced_cuda_kernel(monkeypatch, K, "qdq_convolution", lambda *a: a[0].shape) as calls:
        yield calls


def test_network_traced_for_cuda_is_the_sessions_without_fast_paths(rng, forced_cuda):
    """Both 1x1 runs take the kernel (the second through its stride), the 3x3 convolution and
    the graph outputs stay with the others; every output equal to the session's without fast
    paths."""
    data = _network(rng)
    x = (rng.standard_normal((2, 64, 7, 7)) * 3).astype(np.float32)
    want = InferenceSession(data, fast_paths=False).run(None, {"x": x})
    s = InferenceSession(data)
    with fastpath.target_platform("cuda"):
        got = jax.jit(s.fn)(x)
    assert sorted(forced_cuda) == [(2, 64, 7, 7), (2, 128, 7, 7)]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), w)
    assert len(np.unique(want[0])) > 20  # values that can differ


@pytest.mark.skipif(not fastpath.cuda_present(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("c, k, size", [(256, 64, 56), (1024, 256, 14), (64, 256, 28)])
def test_gpu_network_matches_lax(rng, c, k, size):
    data = _network(rng, c=c, k=k, size=size)
    x = (rng.standard_normal((2, c, size, size)) * 3).astype(np.float32)
    got = InferenceSession(data).run(None, {"x": x})
    want = InferenceSession(data, fast_paths=False).run(None, {"x": x})
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
