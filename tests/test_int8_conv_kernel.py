"""The int8 convolution fast path (dml_jax.kernels.int8_conv): the graph pair
CONVOLUTION_INTEGER -> CAST to FLOAT32 as one cuDNN int8 convolution with a float32 output.

Which pairs it applies to (on descriptors). A QDQ convolution model traced for CUDA on this
machine (the CUDA choice forced; XLA's CPU backend computes the int8 convolution in float32,
exact while the sums stay under 2^24, as they do here) takes it and agrees with the session
without fast paths bit for bit. On a CUDA machine, natively, the same against the lax
lowering with sums past 2^24 (channels of 512: where only an exact int32 sum rounded once to
float32 agrees), and a ResNet-like stack of them.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest
from conftest import forced_cuda_kernel

import dml_jax as dml
from dml_jax import fastpath
from dml_jax.kernels import int8_conv as K

onnx = pytest.importorskip("onnx")
from test_onnx_qdq import conv_model

from dml_jax.onnx import InferenceSession

T = dml.TensorDesc


def _pair(c=8, k=16, xt="INT8", wt="INT8", zero=False, group=1, dilation=1, out="FLOAT32"):
    x, w = T(xt, (2, c, 10, 10)), T(wt, (k, c // group, 3, 3))
    y = T("INT32", (2, k, 10 - 2 * dilation + 2, 10 - 2 * dilation + 2))
    conv = dml.ConvolutionIntegerOperatorDesc(
        x, T(xt, (1, 1, 1, 1)) if zero else None, w, None, y, strides=(1, 1),
        dilations=(dilation, dilation), start_padding=(1, 1), end_padding=(1, 1),
        group_count=group,
    )  # fmt: skip
    dml.validate(conv)
    return conv, dml.CastOperatorDesc(y, T(out, y.sizes))


@pytest.mark.parametrize(
    "change, applies",
    [({}, True), ({"xt": "UINT8", "wt": "UINT8"}, False), ({"zero": True}, False),
     ({"group": 2}, False), ({"dilation": 2}, False), ({"c": 3}, True), ({"k": 6}, True),
     ({"out": "FLOAT16"}, False), ({"slot": 1}, False)],
)  # fmt: skip
def test_epilogue_applies(change, applies):
    slot = change.pop("slot", 0)
    conv, cast = _pair(**change)
    found = fastpath.epilogue(conv, cast, slot)
    assert (found is not None and found.lower is K._lower) == applies


def test_a_strided_view_of_the_input_is_taken():
    """The graph hands the pair the input's logical tensor whatever its strides (ChannelsLast
    reads a quantized activation's NHWC bytes so); the filter and the result stay packed."""
    conv, cast = _pair()
    x = conv.input_tensor
    for strides in ((1000, 100, 10, 1), (800, 1, 80, 8)):  # a padded batch; channels-last
        view = T(x.data_type, x.sizes, strides=strides)
        found = fastpath.epilogue(dataclasses.replace(conv, input_tensor=view), cast, 0)
        assert found is not None and found.lower is K._lower
    w = conv.filter_tensor
    view = T(w.data_type, w.sizes, strides=(1, 128, 24, 8))
    assert fastpath.epilogue(dataclasses.replace(conv, filter_tensor=view), cast, 0) is None


def _stacked_model(rng, c=8):
    """x -> QuantizeLinear -> DequantizeLinear -> Conv a (QDQ: int8 weights per channel, an
    int32 bias) -> Relu -> QuantizeLinear -> DequantizeLinear (d) -> Conv b (QDQ) -> + d -> Relu:
    the quantize, dequantize and residual addition between two integer convolutions."""
    sx, sd = np.float32(0.05), np.float32(0.04)
    values = {"sx": np.array(sx), "sd": np.array(sd), "z": np.array(np.int8(0))}
    nodes = [onnx.helper.make_node("QuantizeLinear", ["x", "sx", "z"], ["xq"]),
             onnx.helper.make_node("DequantizeLinear", ["xq", "sx", "z"], ["xd"])]  # fmt: skip
    for name, src, s_in in (("a", "xd", sx), ("b", "d", sd)):
        values[f"w{name}"] = rng.integers(-127, 128, (c, c, 3, 3)).astype(np.int8)
        values[f"s{name}"] = rng.uniform(0.002, 0.01, c).astype(np.float32)
        values[f"z{name}"] = np.zeros(c, np.int8)
        values[f"q{name}"] = rng.integers(-1000, 1000, c).astype(np.int32)
        values[f"t{name}"] = values[f"s{name}"] * s_in
        nodes += [
            onnx.helper.make_node("DequantizeLinear", [f"w{name}", f"s{name}", f"z{name}"],
                                  [f"wd{name}"], axis=0),
            onnx.helper.make_node("DequantizeLinear", [f"q{name}", f"t{name}"], [f"bd{name}"],
                                  axis=0),
            onnx.helper.make_node("Conv", [src, f"wd{name}", f"bd{name}"], [f"h{name}"],
                                  pads=[1, 1, 1, 1]),
        ]  # fmt: skip
        if name == "a":
            nodes += [onnx.helper.make_node("Relu", ["ha"], ["ra"]),
                      onnx.helper.make_node("QuantizeLinear", ["ra", "sd", "z"], ["dq"]),
                      onnx.helper.make_node("DequantizeLinear", ["dq", "sd", "z"], ["d"])]  # fmt: skip
    nodes += [onnx.helper.make_node("Add", ["hb", "d"], ["s"]),
              onnx.helper.make_node("Relu", ["s"], ["y"])]  # fmt: skip
    f32 = onnx.TensorProto.FLOAT
    graph = onnx.helper.make_graph(
        nodes, "qdq_stack", [onnx.helper.make_tensor_value_info("x", f32, [2, c, 10, 10])],
        [onnx.helper.make_tensor_value_info("y", f32, None)],
        [onnx.numpy_helper.from_array(v, k) for k, v in values.items()],
    )  # fmt: skip
    opsets = [onnx.helper.make_opsetid("", 17)]
    return onnx.helper.make_model(graph, opset_imports=opsets, ir_version=10).SerializeToString()


def test_integer_convolutions_hand_channels_last_activations_on(rng, forced_cuda, monkeypatch):
    """Between two QDQ convolutions the scaling, ReLU, quantize, dequantize and residual
    addition run channels-last (ChannelsLast takes them after QDQConvFusion's pairs); the
    first convolution and its quantizer take the int8 QDQ kernel (``int8_qdq_conv``,
    interpreted), the second, whose sums meet the residual addition, this pair's int8 path,
    reading the first one's NHWC bytes; the values are the session's without the rewrite and
    without fast paths (to a float32 rounding: where a scaling and its bias addition share a
    kernel XLA may contract them into one fused multiply-add, docs/semantics.md; a misread
    layout moves values, not last bits)."""
    from dml_jax.kernels import int8_qdq_conv
    from dml_jax.onnx import SessionOptions

    data = _stacked_model(rng)
    x = (rng.standard_normal((2, 8, 10, 10)) * 3).astype(np.float32)
    options = SessionOptions()
    options.graph_optimization_level = "extended"
    want = InferenceSession(data, options, fast_paths=False).run(None, {"x": x})[0]
    s = InferenceSession(data)
    tol = {"rtol": 3e-7, "atol": 1e-6 * float(np.abs(want).max())}
    np.testing.assert_allclose(s.run(None, {"x": x})[0], want, **tol)
    last = s.explain().splitlines()[-1]
    assert "QDQConvFusion x2" in last and "ChannelsLast x" in last
    record = lambda x, *rest: x.shape
    with forced_cuda_kernel(monkeypatch, int8_qdq_conv, "qdq_convolution", record) as chains:
        forced_cuda.clear()  # (a CUDA machine's run above traced the kernels too)
        with fastpath.target_platform("cuda"):
            got = np.asarray(jax.jit(lambda x: s.fn(x))(x)[0])
    assert chains == [(2, 8, 10, 10)] and forced_cuda == [(2, 8, 10, 10)]
    np.testing.assert_allclose(got, want, **tol)


@pytest.fixture
def forced_cuda(monkeypatch):
    """CUDA's choice on this machine; records the fast path's calls."""
    record = lambda x, *rest: x.shape
    with forced_cuda_kernel(monkeypatch, K, "int8_convolution", record, interpret=False) as calls:
        yield calls


@pytest.mark.parametrize(
    "kw, taken", [({}, True), ({"zx": 5}, False), ({"c": 3, "k": 6}, True)]
)  # channels padded to multiples of 4 (a network's first convolution reads three)
def test_qdq_conv_traced_for_cuda(rng, kw, taken, forced_cuda):
    data, _ = conv_model(rng, **kw)
    c = kw.get("c", 8)
    x = (rng.standard_normal((2, c, 10, 10)) * 3).astype(np.float32)
    want = InferenceSession(data, fast_paths=False).run(None, {"x": x})[0]
    s = InferenceSession(data)
    with fastpath.target_platform("cuda"):
        got = np.asarray(jax.jit(s.fn)(x)[0])
    assert bool(forced_cuda) == taken
    np.testing.assert_array_equal(got, want)


@pytest.mark.skipif(not fastpath.cuda_present(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("c, k, strides", [(512, 64, [1, 1]), (64, 256, [2, 2]), (3, 64, [2, 2])])
def test_gpu_qdq_conv_matches_lax(rng, c, k, strides):
    data, _ = conv_model(rng, c=c, k=k, strides=strides)
    # inputs at the quantizer's extremes: sums of 512 x 9 products of up to 127 x 127, past
    # 2^24, where only the exact sum rounded once to float32 agrees
    x = np.where(rng.random((2, c, 10, 10)) < 0.5, -7.0, 7.0).astype(np.float32)
    got = InferenceSession(data).run(None, {"x": x})[0]
    want = InferenceSession(data, fast_paths=False).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "c, k, window, stride, pads",
    [(3, 64, 7, 2, ((3, 3), (3, 3))), (3, 8, 3, 1, ((1, 0), (0, 2))), (1, 4, 5, 3, ((2, 2), (0, 0)))],
)  # fmt: skip
def test_few_channel_convolutions_are_the_exact_sums(rng, c, k, window, stride, pads):
    """A few-channel convolution (a network's first) on float16 operands with float32 sums:
    the exact integer sums, at the int8 extremes, asymmetric padding and strides included."""
    extremes = np.array([-128, 127, -7, 3], np.int8)
    x = rng.choice(extremes, (2, c, 23, 19))
    w = rng.choice(extremes, (k, c, window, window))
    got = np.asarray(K.int8_convolution(x, w, (stride, stride), list(pads)))
    np.testing.assert_array_equal(got, _integer_convolution(x, w, stride, pads))


def _integer_convolution(x, w, stride, pads):
    """The convolution's exact sums in NumPy (int64, a window tap at a time), as float32."""
    (top, bottom), (left, right) = pads
    x = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (top, bottom), (left, right)))
    k, _, kh, kw = w.shape
    oh = (x.shape[2] - kh) // stride + 1
    ow = (x.shape[3] - kw) // stride + 1
    out = np.zeros((x.shape[0], k, oh, ow), np.int64)
    for i in range(kh):
        for j in range(kw):
            taps = x[:, :, i : i + stride * oh : stride, j : j + stride * ow : stride]
            out += np.einsum("nchw,kc->nkhw", taps, w[:, :, i, j].astype(np.int64))
    return out.astype(np.float32)
