"""The int8 QDQ convolution chain (dml_jax.kernels.int8_qdq_conv): CONVOLUTION_INTEGER ->
CAST -> MULTIPLY -> [ADD1] -> [ACTIVATION_RELU] -> [CLIP] -> QUANTIZE_LINEAR as one kernel.

Which runs it applies to (on descriptors); the kernel in Pallas's interpreter against the
definitions written in NumPy (exact integer sums, float32 steps, the quotient rounded half to
even, saturation); a QDQ network traced for CUDA on this machine (the kernel interpreted)
against the session without fast paths, bit for bit, with the graph's runs recorded. On a CUDA
machine, natively, the same network at ResNet-50's widths against the lax lowering.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
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


def _run(c=64, k=32, window=1, zero=False, bias=True, relu=True, pad=0, act=None, quant=None,
         stride=1, dilation=1, xt="INT8", wt="INT8", filter_zero=False, clip=None,
         clip_first=False):  # fmt: skip
    """The descriptors of a run as QDQConvFusion writes it, and its slots."""
    n, h = 2, 6
    out = (h + 2 * pad - dilation * (window - 1) - 1) // stride + 1
    x, w = T(xt, (n, c, h, h)), T(wt, (k, c, window, window))
    ints = T("INT32", (n, k, out, out))
    wz = T(wt, (1, 1, 1, 1)) if filter_zero else None
    conv = dml.ConvolutionIntegerOperatorDesc(
        x, T(xt, (1, 1, 1, 1)) if zero else None, w, wz, ints, strides=(stride, stride),
        dilations=(dilation, dilation), start_padding=(pad, pad), end_padding=(pad, pad),
        group_count=1,
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
    if clip is not None:
        lo, hi, *scale_bias = clip
        c = dml.ElementWiseClipOperatorDesc(f, f, lo, hi, *scale_bias)
        descs.insert(3 if clip_first else len(descs), c)
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
     ({"bias": False, "relu": False}, True), ({"zero": True}, True),
     ({"xt": "UINT8", "zero": True}, True), ({"xt": "UINT8"}, True), ({"wt": "UINT8"}, False),
     ({"filter_zero": True}, False),
     ({"c": 48}, True), ({"c": 144}, True), ({"c": 16}, True), ({"c": 3}, True),
     ({"k": 40}, True), ({"k": 24}, True), ({"k": 96}, True), ({"clip": (0.0, 6.0)}, True),
     ({"clip": (0.0, 6.0), "relu": False, "bias": False}, True),
     ({"clip": (0.0, 6.0, dml.ScaleBias(2.0, 0.0))}, False),
     ({"clip": (0.0, 6.0), "clip_first": True}, False),
     ({"pad": 1}, False), ({"act": dml.ActivationReluOperatorDesc(None, None)}, True),
     ({"act": dml.ActivationSigmoidOperatorDesc(None, None)}, False),
     ({"quant": {"scale_tensor": T("FLOAT32", (2, 32, 6, 6), strides=(0, 1, 0, 0))}}, False)],
)  # fmt: skip
def test_chain_applies(change, applies):
    assert _applies(*_run(**change)) == applies


@pytest.mark.parametrize(
    "change, applies",
    [({"window": 3, "pad": 1}, True), ({"window": 3}, True), ({"window": 5, "pad": 2}, True),
     ({"window": 3, "pad": 3}, False), ({"window": 3, "pad": 1, "stride": 2}, True),
     ({"window": 3, "pad": 2, "dilation": 2}, False), ({"window": 3, "pad": 1, "c": 8192}, False),
     ({"window": 1, "stride": 2}, True), ({"window": 7, "pad": 3, "stride": 2, "c": 3}, True),
     ({"window": 7, "pad": 3, "stride": 2, "c": 32}, True),
     ({"window": 7, "pad": 3, "stride": 2, "c": 3, "max_window": 5}, False),
     ({"window": 9, "pad": 4}, False), ({"window": 3, "pad": 1, "max_window": 1}, False),
     ({"window": 3, "pad": 1, "xt": "UINT8", "zero": True}, True),
     ({"window": 3, "pad": 1, "filter_zero": True}, False)],
)  # fmt: skip
def test_windows_apply_up_to_max_window(change, applies, monkeypatch):
    """Windows up to ``MAX_WINDOW`` (7 by default: a stem's 7x7 at strides 2, 3x3 and 5x5
    over many channels, whatever the input type), undilated, padded by less than the window,
    of at most ``MAX_C`` products a sum (8192 channels by 9 taps are more). (A filter zero point
    the chain never takes.)"""
    monkeypatch.setattr(K, "MAX_WINDOW", change.pop("max_window", K.MAX_WINDOW))
    assert _applies(*_run(**change)) == applies


def test_chain_needs_its_whole_run():
    """Without its quantizer, or read through the other operand of MULTIPLY, no run."""
    descs, slots = _run()
    assert not _applies(descs[:-1], slots[:-1])
    assert not _applies(descs, (0, 1) + slots[2:])  # the scales' slot: the channel operand
    mul = descs[2]
    swapped = dataclasses.replace(mul, a_tensor=mul.b_tensor, b_tensor=mul.a_tensor)
    assert _applies(descs[:2] + (swapped,) + descs[3:], (0, 1) + slots[2:])


def _reference(
    x, w, scale, bias, out_scale, zero, strides, lo, hi, relu, padding=((0, 0),) * 2, x_zero=None,
    clip=None,
):  # fmt: skip
    """The run's definition in NumPy: int64 sums of (x - x_zero) * w (padding 0 after the zero
    point, a tap at a time) rounded once to float32, the float32 steps (CLIP as DirectML
    defines it, max(Min, min(v, Max)), NaN propagated), the correctly rounded quotient (NumPy's
    float32 division) rounded half to even, plus the zero point, saturated; NaN gives the zero
    point."""
    x = x.astype(np.int64) - (0 if x_zero is None else int(x_zero))
    x = np.pad(x, ((0, 0), (0, 0), *padding))
    kh, kw = w.shape[2:]
    oh = (x.shape[2] - kh) // strides[0] + 1
    ow = (x.shape[3] - kw) // strides[1] + 1
    sums = np.zeros((x.shape[0], w.shape[0], oh, ow), np.int64)
    for i in range(kh):
        for j in range(kw):
            taps = x[
                :, :, i : i + strides[0] * oh : strides[0], j : j + strides[1] * ow : strides[1]
            ]
            sums += np.einsum("nchw,kc->nkhw", taps, w[:, :, i, j].astype(np.int64))
    sums = sums.astype(np.float32)
    v = sums * scale[None, :, None, None]
    if bias is not None:
        v = v + bias[None, :, None, None]
    if relu:
        v = np.where(v > 0, v, np.float32(0))
    if clip is not None:
        v = np.maximum(np.float32(clip[0]), np.minimum(v, np.float32(clip[1])))
    with np.errstate(all="ignore"):
        q = np.round(v / out_scale[0])
    return np.where(np.isnan(q), zero[0], np.clip(q + zero[0], lo, hi))


@pytest.mark.parametrize("x_zero", [None, "INT8", "UINT8"])
@pytest.mark.parametrize(
    "c, k, strides, relu, out, window, padding",
    [(64, 32, (1, 1), True, "INT8", 1, ((0, 0), (0, 0))),
     (256, 96, (2, 2), False, "INT8", 1, ((0, 0), (0, 0))),
     (32, 64, (1, 2), True, "UINT8", 1, ((0, 0), (0, 0))),
     (64, 32, (1, 1), True, "INT8", 3, ((1, 1), (1, 1))),
     (256, 64, (1, 1), False, "INT8", 3, ((1, 0), (0, 2))),
     (32, 32, (1, 1), True, "UINT8", 5, ((2, 2), (2, 2))),
     (64, 32, (2, 2), True, "INT8", 3, ((1, 1), (1, 1))),
     (32, 64, (2, 1), False, "INT8", 3, ((0, 1), (1, 0))),
     (32, 32, (2, 2), True, "UINT8", 7, ((3, 3), (3, 3))),
     (3, 64, (2, 2), True, "INT8", 7, ((3, 3), (3, 3))),
     (3, 32, (1, 1), False, "INT8", 3, ((1, 1), (1, 1))),
     (16, 32, (1, 1), True, "INT8", 1, ((0, 0), (0, 0)))],
)  # fmt: skip
def test_interpreted_kernel_is_the_definition(
    rng, c, k, strides, relu, out, window, padding, x_zero
):
    """Channels past one block of the product (256 in), a partial last block of rows (2 x 7 x 7
    or 2 x 7 x 4 rows), output scales that put sums beside halfway points, a NaN and an
    infinite channel scale, UINT8 with a zero point; 3x3, 5x5 and 7x7 windows, padded evenly
    and not (taps past the padded grid's rows read the next image's rows or zeros, dropped),
    at strides 1 and 2 (a 7x7 at 2 on 13 x 13: cells past the input's edge); 3 and 16 channels
    in, padded with zeros (a network's stem); inputs INT8 without a zero point, INT8 with one
    and UINT8 with one (its padding reads as the zero point)."""
    _check_definition(rng, c, k, strides, relu, out, window, padding, x_zero)


def _check_definition(
    rng, c, k, strides, relu, out, window, padding, x_zero, clip=None, diverse=True,
    interpret=True,
):  # fmt: skip
    x = rng.integers(-128, 128, (2, c, 13, 13)).astype(np.int8)
    zp = None
    if x_zero == "INT8":
        zp = np.int8(-7)
    elif x_zero == "UINT8":
        x, zp = (x.astype(np.int16) + 128).astype(np.uint8), np.uint8(131)
    w = rng.integers(-128, 128, (k, c, window, window)).astype(np.int8)
    scale = rng.uniform(1e-4, 1e-3, k).astype(np.float32)
    scale[:2] = [np.nan, np.inf]
    bias = (rng.standard_normal(k) * 3).astype(np.float32)
    out_scale = np.float32([0.0173 * max(1, window * window // 3)])  # wider sums, wider steps
    if clip is not None:  # values of a few units, steps that put the bounds in range
        scale, out_scale = scale * np.float32(0.02), np.float32([0.05])
    out_type = dml.DataType[out]
    zero = np.float32([0 if out == "INT8" else 128])
    lo, hi = out_type.integer_range

    def kernel(x, w):
        return K.qdq_convolution(
            x, w, scale, bias, out_scale, zero, strides, out_type, relu, interpret=interpret,
            padding=padding, x_zero=zp, clip=clip,
        )  # fmt: skip

    got = kernel(x, w)
    want = _reference(x, w, scale, bias, out_scale, zero, strides, lo, hi, relu, padding, zp, clip)
    assert got.dtype == out_type.numpy_dtype
    np.testing.assert_array_equal(np.asarray(got), want)
    assert len(np.unique(want)) > (50 if diverse else 1)  # values that can differ
    # the filter's sums only where a zero point's share comes off them (UINT8, a zero point):
    # a reduction a call otherwise, which XLA cannot drop (the kernel takes it as an operand)
    jaxpr = str(jax.make_jaxpr(kernel)(x, w))
    assert ("reduce_sum" in jaxpr) == (x_zero is not None)
    return want


@pytest.mark.parametrize(
    "c, k, strides, relu, out, window, padding, x_zero, clip",
    [(48, 40, (1, 1), True, "INT8", 1, ((0, 0), (0, 0)), None, (0.0, 6.0)),
     (144, 24, (1, 1), False, "INT8", 3, ((1, 1), (1, 1)), "INT8", (-2.5, 1.75)),
     (96, 16, (2, 2), True, "UINT8", 3, ((1, 1), (1, 1)), "UINT8", (0.0, 6.0)),
     (160, 144, (2, 2), False, "INT8", 1, ((0, 0), (0, 0)), None, None)],
)  # fmt: skip
def test_interpreted_kernel_pads_channels_and_clips(
    rng, c, k, strides, relu, out, window, padding, x_zero, clip
):
    """Channels in that are no power of two (48, 96, 144 and 160: zeros to a multiple of 32,
    blocks of 32 or more) and channels out that are no multiple of 32 (40, 24, 16, 144: zero
    filters, dropped after), with CLIP after the bias (ReLU6 as MobileNet's, bounds that cut
    both sides, the NaN and infinite channels' values through it); UINT8 with a zero point at
    strides 2 among them. Where a clip is present, values at both bounds."""
    want = _check_definition(rng, c, k, strides, relu, out, window, padding, x_zero, clip)
    if clip is not None:
        zero = 0 if out == "INT8" else 128
        bounds = [zero + np.round(np.float32(b) / np.float32(0.05)) for b in clip]
        assert np.isin(bounds, want).all()


def test_interpreted_kernel_clips_as_defined_when_min_exceeds_max(rng):
    """CLIP is max(Min, min(v, Max)): with Min above Max every value but NaN's is Min (the two
    NaN and infinite channels aside), as the kernel gives it."""
    want = _check_definition(
        rng, 64, 32, (1, 1), False, "INT8", 1, ((0, 0), (0, 0)), None, (1.5, -1.0), diverse=False
    )
    assert set(np.unique(want)) == {0, 30}  # NaN's zero point, then Min's 1.5 / 0.05


def _network(rng, c=64, k=128, size=7, zero_point=None, relu6=False):
    """x -> Q -> DQ -> Conv 1x1 (per-channel int8 weights, int32 bias) -> Relu -> Q -> DQ ->
    Conv 1x1 stride 2 (one weight scale, no bias) -> Q -> DQ -> y, and beside the first a 3x3
    convolution (pads 1) -> Relu -> Q -> DQ -> yc: QDQ as onnxruntime's quantizer writes it,
    symmetric (``zero_point`` 0) or with UINT8 activations and a zero point, as onnxruntime's
    quantizer writes them by default. ``relu6``: the first convolution's Relu a Clip to [0, 6]
    (MobileNet's ReLU6)."""
    zero_point = np.int8(0) if zero_point is None else zero_point
    values = {"sx": np.array(np.float32(0.05)), "z": np.array(zero_point),
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
    if relu6:
        values["lo"], values["hi"] = np.array(np.float32(0)), np.array(np.float32(6))
    nodes += [helper.make_node("Clip", ["ha", "lo", "hi"], ["ra"]) if relu6
              else helper.make_node("Relu", ["ha"], ["ra"]),
              helper.make_node("QuantizeLinear", ["ra", "sa", "z"], ["aq"]),
              helper.make_node("DequantizeLinear", ["aq", "sa", "z"], ["ad"])]  # fmt: skip
    conv("b", "ad", 0.11, k, 64, 1, False, False, strides=[2, 2])
    conv("c", "xd", 0.05, c, 32, 3, True, True, pads=[1, 1, 1, 1])
    nodes += [helper.make_node("QuantizeLinear", ["hb", "sb", "z"], ["bq"]),
              helper.make_node("DequantizeLinear", ["bq", "sb", "z"], ["y"]),
              helper.make_node("Relu", ["hc"], ["rc"]),
              helper.make_node("QuantizeLinear", ["rc", "sa", "z"], ["cq"]),
              helper.make_node("DequantizeLinear", ["cq", "sa", "z"], ["yc"])]  # fmt: skip
    graph = helper.make_graph(
        nodes, "qdq_1x1", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, c, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("yc", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, name) for name, v in values.items()],
    )  # fmt: skip
    opsets = [helper.make_opsetid("", 17)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10).SerializeToString()


@pytest.fixture
def forced_cuda(monkeypatch):
    """CUDA's choice on this machine, the kernel interpreted; records its input's shapes."""
    with forced_cuda_kernel(monkeypatch, K, "qdq_convolution", lambda *a: a[0].shape) as calls:
        yield calls


@pytest.mark.parametrize("zero_point", [np.int8(0), np.uint8(120)], ids=["int8", "uint8"])
@pytest.mark.parametrize("window", [1, 3])
def test_network_traced_for_cuda_is_the_sessions_without_fast_paths(
    rng, forced_cuda, window, zero_point, monkeypatch
):
    """Both 1x1 runs take the kernel (the second through its stride), the 3x3 one where
    ``MAX_WINDOW`` takes it, symmetric INT8 activations or UINT8 ones with a zero point; every
    output equal to the session's without fast paths."""
    monkeypatch.setattr(K, "MAX_WINDOW", window)
    data = _network(rng, zero_point=zero_point)
    x = (rng.standard_normal((2, 64, 7, 7)) * 3).astype(np.float32)
    want = InferenceSession(data, fast_paths=False).run(None, {"x": x})
    s = InferenceSession(data)
    with fastpath.target_platform("cuda"):
        got = jax.jit(s.fn)(x)
    windows = window == 3
    assert sorted(forced_cuda) == [(2, 64, 7, 7)] * (1 + windows) + [(2, 128, 7, 7)]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), w)
    assert len(np.unique(want[0])) > 20  # values that can differ


@pytest.mark.parametrize("zero_point", [np.int8(0), np.uint8(120)], ids=["int8", "uint8"])
def test_mobilenet_widths_traced_for_cuda(rng, forced_cuda, zero_point):
    """MobileNet-v2's widths (144 channels in, 24 out) and its ReLU6 (a Clip after the bias):
    every convolution takes the kernel, each output the session's without fast paths."""
    data = _network(rng, c=144, k=24, zero_point=zero_point, relu6=True)
    x = (rng.standard_normal((2, 144, 7, 7)) * 3).astype(np.float32)
    want = InferenceSession(data, fast_paths=False).run(None, {"x": x})
    s = InferenceSession(data)
    with fastpath.target_platform("cuda"):
        got = jax.jit(lambda x: s.fn(x))(x)
    assert sorted(forced_cuda) == [(2, 24, 7, 7)] + [(2, 144, 7, 7)] * 2
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), w)
    assert len(np.unique(want[0])) > 20 and want[1].max() > 0  # values that can differ


@pytest.mark.skipif(not fastpath.cuda_present(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("fma", [True, False], ids=["fma-quotient", "residual-quotient"])
@pytest.mark.parametrize(
    "c, k, strides, relu, out, window, padding, x_zero, clip",
    [(64, 32, (1, 1), True, "INT8", 1, ((0, 0), (0, 0)), None, None),
     (256, 96, (2, 2), False, "UINT8", 1, ((0, 0), (0, 0)), "UINT8", None),
     (64, 32, (1, 1), False, "INT8", 3, ((1, 1), (1, 1)), "INT8", (-2.5, 1.75))],
)  # fmt: skip
def test_gpu_kernel_is_the_definition(
    rng, c, k, strides, relu, out, window, padding, x_zero, clip, fma, monkeypatch
):
    """Natively, each way of rounding the quotient (``FMA_QUOTIENT``): the definition's sums
    beside halfway points, NaN and infinite channel scales, bit for bit."""
    monkeypatch.setattr(K, "FMA_QUOTIENT", fma)
    _check_definition(rng, c, k, strides, relu, out, window, padding, x_zero, clip,
                      interpret=False)  # fmt: skip


@pytest.mark.skipif(not fastpath.cuda_present(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("zero_point", [np.int8(0), np.uint8(120)], ids=["int8", "uint8"])
@pytest.mark.parametrize("window", [1, 3])
@pytest.mark.parametrize("c, k, size", [(256, 64, 56), (1024, 256, 14), (64, 256, 28)])
def test_gpu_network_matches_lax(rng, c, k, size, window, zero_point, monkeypatch):
    from dml_jax.graph import tracing

    monkeypatch.setattr(K, "MAX_WINDOW", window)
    data = _network(rng, c=c, k=k, size=size, zero_point=zero_point)
    x = (rng.standard_normal((2, c, size, size)) * 3).astype(np.float32)
    tracing._compile_graph_cached.cache_clear()  # graphs compiled under the other setting
    try:
        got = InferenceSession(data).run(None, {"x": x})
    finally:
        tracing._compile_graph_cached.cache_clear()
    want = InferenceSession(data, fast_paths=False).run(None, {"x": x})
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.skipif(not fastpath.cuda_present(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("zero_point", [np.int8(0), np.uint8(120)], ids=["int8", "uint8"])
@pytest.mark.parametrize("c, k, size", [(144, 24, 56), (96, 576, 14), (960, 160, 7)])
def test_gpu_mobilenet_widths_match_lax(rng, c, k, size, zero_point):
    """Natively: MobileNet-v2's widths (channels in and out no multiples of 32 or powers of
    two) with its ReLU6, against the lax lowering bit for bit."""
    data = _network(rng, c=c, k=k, size=size, zero_point=zero_point, relu6=True)
    x = (rng.standard_normal((2, c, size, size)) * 3).astype(np.float32)
    got = InferenceSession(data).run(None, {"x": x})
    want = InferenceSession(data, fast_paths=False).run(None, {"x": x})
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize(
    "x_shape, x_type, x_zero, w_shape, strides, padding",
    [((2, 64, 7, 7), np.int8, None, (32, 64, 1, 1), (1, 1), ((0, 0), (0, 0))),
     ((2, 64, 7, 7), np.uint8, 131, (32, 64, 1, 1), (2, 2), ((0, 0), (0, 0))),
     ((2, 64, 14, 14), np.int8, None, (64, 64, 3, 3), (1, 1), ((1, 1), (1, 1))),
     ((2, 64, 14, 14), np.uint8, 120, (64, 64, 3, 3), (2, 2), ((1, 1), (1, 1))),
     ((2, 3, 32, 32), np.int8, None, (64, 3, 7, 7), (2, 2), ((3, 3), (3, 3))),
     ((2, 144, 7, 7), np.int8, None, (24, 144, 1, 1), (1, 1), ((0, 0), (0, 0))),
     ((2, 96, 14, 14), np.uint8, 120, (16, 96, 3, 3), (2, 2), ((1, 1), (1, 1)))],
    ids=["1x1", "1x1-uint8-strided", "3x3", "3x3-uint8-strided", "stem", "1x1-144-24",
         "3x3-96-16-uint8-strided"],
)  # fmt: skip
def test_kernel_lowers_for_cuda(x_shape, x_type, x_zero, w_shape, strides, padding):
    """The kernel as Triton compiles it (not interpreted), lowered for CUDA on any machine:
    Pallas's Triton lowering takes every form, an integer bias (QLinearConv's) with the zero
    points (a remainder by the constant 1 once failed it, which interpret mode never sees),
    MobileNet's widths (channels padded to multiples of 32) with a clip."""
    from jax import export

    k = w_shape[0]

    def conv(x, w, scale, bias, out_scale):
        zero = None if x_zero is None else jnp.asarray(x_zero, x_type)
        return K.qdq_convolution(
            x, w, scale, bias, out_scale, jnp.zeros((1,), jnp.float32), strides,
            dml.DataType.INT8, True, channels_last=True, padding=padding, x_zero=zero,
            int_bias=jnp.arange(k, dtype=jnp.int32) if x_zero else None,
            clip=None if k % 32 == 0 else (0.0, 6.0),
        )  # fmt: skip

    args = [jax.ShapeDtypeStruct(x_shape, x_type), jax.ShapeDtypeStruct(w_shape, np.int8),
            *(jax.ShapeDtypeStruct(s, np.float32) for s in ((k,), (k,), (1,)))]  # fmt: skip
    checks = [export.DisabledSafetyCheck.custom_call("__gpu$xla.gpu.triton")]
    exported = export.export(jax.jit(conv), platforms=["cuda"], disabled_checks=checks)(*args)
    assert "__gpu$xla.gpu.triton" in exported.mlir_module()


def _qlinear(c=64, k=32, window=1, stride=1, pad=0, xt="UINT8", per_channel=True, bias=True,
             filter_zero=False, out="INT8"):  # fmt: skip
    """A QUANTIZED_LINEAR_CONVOLUTION (QLinearConv) on {2, C, 9, 9}: input scale and zero point
    one value, the filter's scales one a channel (or one), an INT32 bias, an output zero point."""
    h = 9
    size = (h + 2 * pad - window) // stride + 1
    one = T("FLOAT32", (1, 1, 1, 1))
    d = dml.QuantizedLinearConvolutionOperatorDesc(
        input_tensor=T(xt, (2, c, h, h)), input_scale_tensor=one,
        input_zero_point_tensor=T(xt, (1, 1, 1, 1)), filter_tensor=T("INT8", (k, c, window, window)),
        filter_scale_tensor=T("FLOAT32", (1, k, 1, 1) if per_channel else (1, 1, 1, 1)),
        filter_zero_point_tensor=T("INT8", (1, 1, 1, 1)) if filter_zero else None,
        bias_tensor=T("INT32", (1, k, 1, 1)) if bias else None, output_scale_tensor=one,
        output_zero_point_tensor=T(out, (1, 1, 1, 1)), output_tensor=T(out, (2, k, size, size)),
        strides=(stride, stride), dilations=(1, 1), start_padding=(pad, pad),
        end_padding=(pad, pad), group_count=1,
    )  # fmt: skip
    dml.validate(d)
    return d


@pytest.mark.parametrize(
    "change, applies",
    [({}, True), ({"window": 3, "pad": 1}, True), ({"window": 3, "pad": 1, "stride": 2}, True),
     ({"xt": "INT8"}, True), ({"per_channel": False}, True), ({"filter_zero": True}, True),
     ({"c": 48}, True), ({"window": 5, "pad": 2}, True), ({"window": 9, "pad": 4}, False)],
)  # fmt: skip
def test_quantized_convolution_applies(change, applies, monkeypatch):
    """QLinearConv takes the kernel as the chain does: windows up to ``MAX_WINDOW`` (7)."""
    found = fastpath.select(_qlinear(**change))
    assert (found is not None and found.lower is K._quantized_lower) == applies


@pytest.mark.parametrize(
    "change, filter_zero",
    [({}, 0), ({"window": 3, "pad": 1}, 0),
     ({"window": 3, "pad": 1, "stride": 2, "out": "UINT8"}, 0),
     ({"xt": "INT8", "per_channel": False, "bias": False}, 0), ({"filter_zero": True}, 0),
     ({"filter_zero": True}, 3)],
)  # fmt: skip
def test_quantized_convolution_kernel_is_the_lax_lowering(rng, change, filter_zero, monkeypatch):
    """The fast path (the kernel interpreted) against the operator's lax lowering, bit for bit:
    UINT8 and INT8 inputs with zero points, per-channel and one filter scale, the bias, 1x1 and
    3x3 windows at strides 1 and 2; a filter zero point the program knows to be 0 takes the
    kernel, another one leaves the lax lowering to compute it."""
    from dml_jax.ops.quantized_conv import lower_quantized_convolution

    monkeypatch.setattr(K, "MAX_WINDOW", 3)
    taken = filter_zero == 0
    d = _qlinear(**change)
    lo = -128 if d.input_tensor.data_type.name == "INT8" else 0
    x = rng.integers(lo, lo + 256, d.input_tensor.sizes).astype(
        d.input_tensor.data_type.numpy_dtype
    )
    arrays = {
        "input_tensor": x, "input_scale_tensor": np.float32([[[[0.031]]]]),
        "input_zero_point_tensor": np.asarray(lo + 131, x.dtype).reshape(1, 1, 1, 1),
        "filter_tensor": rng.integers(-128, 128, d.filter_tensor.sizes).astype(np.int8),
        "filter_scale_tensor": rng.uniform(1e-3, 1e-2, d.filter_scale_tensor.sizes).astype("f4"),
        "filter_zero_point_tensor": np.int8([[[[filter_zero]]]]),
        "bias_tensor": rng.integers(-5000, 5000, (1, d.filter_tensor.sizes[0], 1, 1)).astype("i4"),
        "output_scale_tensor": np.float32([[[[0.07]]]]),
        "output_zero_point_tensor": np.asarray(7, d.output_tensor.data_type.numpy_dtype).reshape(
            1, 1, 1, 1
        ),
    }  # fmt: skip
    present = [name for name, _ in d.input_slots()]
    fields = [f.name for f in d.declared("input") if getattr(d, f.name) is not None]
    args = [arrays[f] for f in fields]
    assert len(args) == len(present)
    want = np.asarray(lower_quantized_convolution(d, *args)[0])
    calls = []
    original = K.qdq_convolution
    monkeypatch.setattr(
        K, "qdq_convolution", lambda *a, **kw: calls.append(1) or original(*a, interpret=True, **kw)
    )
    known = {i: args[i] for i, f in enumerate(fields) if f == "filter_zero_point_tensor"}
    with fastpath.known_inputs(known):
        got = np.asarray(K._quantized_lower(d, *args)[0])
    assert bool(calls) == taken
    np.testing.assert_array_equal(got, want)
    assert len(np.unique(want)) > 20  # values that can differ


@pytest.mark.parametrize("window", [1, 3])
def test_qlinearconv_model_traced_for_cuda(rng, forced_cuda, window, monkeypatch):
    """An ONNX QLinearConv (UINT8 activations with zero points, per-channel INT8 weights whose
    zero points are initializers of 0, an INT32 bias) takes the kernel in a session traced for
    CUDA, its output the session's without fast paths."""
    monkeypatch.setattr(K, "MAX_WINDOW", 3)
    c, k = 64, 32
    values = {
        "xs": np.array(np.float32(0.03)), "xz": np.array(np.uint8(128)),
        "w": rng.integers(-127, 128, (k, c, window, window)).astype(np.int8),
        "ws": rng.uniform(1e-3, 1e-2, k).astype(np.float32), "wz": np.zeros(k, np.int8),
        "ys": np.array(np.float32(0.2)), "yz": np.array(np.uint8(100)),
        "b": rng.integers(-3000, 3000, k).astype(np.int32),
    }  # fmt: skip
    pads = [window // 2] * 4
    node = helper.make_node(
        "QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"], pads=pads
    )
    graph = helper.make_graph(
        [node], "qlinearconv", [helper.make_tensor_value_info("x", TensorProto.UINT8, [2, c, 9, 9])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, None)],
        [numpy_helper.from_array(v, name) for name, v in values.items()],
    )  # fmt: skip
    opsets = [helper.make_opsetid("", 13)]
    data = helper.make_model(graph, opset_imports=opsets, ir_version=10).SerializeToString()
    x = rng.integers(0, 256, (2, c, 9, 9)).astype(np.uint8)
    want = InferenceSession(data, fast_paths=False).run(None, {"x": x})[0]
    s = InferenceSession(data)
    with fastpath.target_platform("cuda"):
        got = np.asarray(jax.jit(s.fn)(x)[0])
    assert forced_cuda == [(2, c, 9, 9)]
    np.testing.assert_array_equal(got, want)
    assert len(np.unique(want)) > 20  # values that can differ
