"""The standard ops without a DirectML operator (JAX nodes) and the new DML mappings, through
``InferenceSession``: what ONNX's node tests do not reach.

- cubic Resize under the coordinate modes, ROI, axes and aspect-ratio policies the node tests
  leave out; DFT and STFT at every opset, direction, length and data type, on both of DFT's
  algorithms; GridSample-16's mode names, 1-D and far reflections; DeformConv in 1-D and 3-D
  and with groups; BitCast, TensorScatter with known write indices, MelWeightMatrix with a
  parameter; CumProd's types; the random ops and training-mode Dropout by their statistics;
  QuantizeLinear into 16-bit integers;
- every JAX node under ``jax.jit`` and ``jax.vmap`` in float16, float32 and float64;
- what cannot be computed, rejected with the node and the attribute named.

Expected values come from ONNX's reference evaluator, NumPy written from the op's definition, or
onnxruntime's CPU provider, never from the converters' own code.
"""

from __future__ import annotations

import numpy as np
import pytest

import dml_jax as dml

onnx = pytest.importorskip("onnx")
jax = pytest.importorskip("jax")
from onnx import TensorProto as TP
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from dml_jax.onnx import InferenceSession

ELEM = {
    np.dtype("float32"): TP.FLOAT,
    np.dtype("float16"): TP.FLOAT16,
    np.dtype("float64"): TP.DOUBLE,
    np.dtype("int32"): TP.INT32,
    np.dtype("int64"): TP.INT64,
    np.dtype("uint8"): TP.UINT8,
    np.dtype("int8"): TP.INT8,
    np.dtype("uint32"): TP.UINT32,
    np.dtype("int16"): TP.INT16,
    np.dtype("uint16"): TP.UINT16,
}


def _model(nodes, feeds, outputs=("y",), opset=22, inits=(), out_type=0):
    """A model of ``nodes`` whose graph inputs are ``feeds`` (name -> array) and initializers
    ``inits`` (name -> array); its outputs of element type ``out_type`` (0: unknown)."""
    if not isinstance(nodes, list):
        nodes = [nodes]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(k, ELEM[v.dtype], v.shape) for k, v in feeds.items()],
        [helper.make_tensor_value_info(o, out_type, None) for o in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in dict(inits).items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def _run(model, feeds):
    return InferenceSession(model).run(None, feeds)


def _reference(model, feeds):
    return ReferenceEvaluator(model).run(None, feeds)


def _close(got, want, dtype):
    tol = {np.float16: 2e-3, np.float32: 2e-5, np.float64: 1e-10}.get(np.dtype(dtype).type, 0)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol,
                               atol=tol)  # fmt: skip


# --- cubic Resize ---------------------------------------------------------------------------


def _resize(inputs, **attrs):
    return helper.make_node("Resize", inputs, ["y"], mode="cubic", **attrs)


@pytest.mark.parametrize(
    ("attrs", "inits"),
    [
        ({"coordinate_transformation_mode": "half_pixel_symmetric"}, {"scales": [1, 1, 1.7, 0.6]}),
        ({"coordinate_transformation_mode": "pytorch_half_pixel"}, {"scales": [1, 1, 0.7, 1.5]}),
        ({"coordinate_transformation_mode": "align_corners"}, {"sizes": [1, 1, 7, 3]}),
        (
            {"coordinate_transformation_mode": "tf_crop_and_resize", "extrapolation_value": 9.0},
            {"roi": [0, 0, -0.2, 0.3, 1, 1, 0.9, 1.4], "sizes": [1, 2, 7, 8]},
        ),
        ({"keep_aspect_ratio_policy": "not_larger", "axes": [2, 3]}, {"sizes": [7, 9]}),
        ({"keep_aspect_ratio_policy": "not_smaller", "axes": [3, 2]}, {"sizes": [9, 3]}),
        ({"antialias": 1, "exclude_outside": 1}, {"scales": [1, 1, 0.45, 1.6]}),
        ({"antialias": 1, "cubic_coeff_a": -0.5}, {"sizes": [1, 1, 2, 3]}),
        ({"axes": [1], "exclude_outside": 1}, {"scales": [2.5]}),
    ],
)
def test_cubic_resize_matches_onnx_reference(attrs, inits, rng):
    x = rng.standard_normal((1, 2, 5, 6)).astype(np.float32)
    names = ["x", "roi" if "roi" in inits else "", "scales" if "scales" in inits else ""]
    names += ["sizes"] if "sizes" in inits else []
    arrays = {k: np.asarray(v, np.int64 if k == "sizes" else np.float32) for k, v in inits.items()}
    model = _model(_resize(names, **attrs), {"x": x}, inits=arrays)
    (got,) = _run(model, {"x": x})
    (want,) = _reference(model, {"x": x})
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_cubic_resize_to_one_element_reads_zero_as_onnx_defines_it(rng):
    """pytorch_half_pixel onto one element: x = 0 (ONNX's formula, onnxruntime), which ONNX's
    reference evaluator reads as -0.5."""
    ort = pytest.importorskip("onnxruntime")
    x = rng.standard_normal((1, 1, 4, 5)).astype(np.float32)
    node = _resize(["x", "", "", "sizes"], coordinate_transformation_mode="pytorch_half_pixel")
    inits = {"sizes": np.int64([1, 1, 1, 3])}
    model = _model(node, {"x": x}, opset=19, inits=inits, out_type=TP.FLOAT)
    (got,) = _run(model, {"x": x})
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    # atol on the inputs' scale (the matmul of the test above's): onnxruntime's float32 cubic
    # weights put an output near 0 of O(1) inputs up to 2e-6 from the exact (float64) value
    # (one draw: -0.0101607 for -0.0101589, where this one was 3e-8 off), beyond 1e-6.
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.uint8, np.float16, np.float64])
def test_cubic_resize_types(dtype):
    # Its own generator: the values must not depend on which tests ran before on this worker.
    x = (np.random.default_rng(3).random((1, 1, 4, 4)) * 200).astype(dtype)
    model = _model(
        _resize(["x", "", "scales"]), {"x": x}, inits={"scales": np.float32([1, 1, 1.5, 2])}
    )
    (got,) = _run(model, {"x": x})
    (want,) = _reference(model, {"x": x})
    assert got.dtype == dtype
    if dtype == np.uint8:  # rounded half to even and saturated, as the reference casts
        assert np.abs(got.astype(int) - want.astype(int)).max() <= 1
    else:  # the reference's cubic weights are float32 (its cubic_coeff_a is): errors of about
        # 1e-7 of the values' range (200), so an absolute floor where a result is near 0
        tol = {"rtol": 2e-3, "atol": 0.2} if dtype == np.float16 else {"rtol": 1e-5, "atol": 1e-4}
        np.testing.assert_allclose(got, want, **tol)


# --- DFT and STFT ---------------------------------------------------------------------------


def _dft_numpy(x, axis, length, inverse, onesided):
    c = x[..., 0] if x.shape[-1] == 1 else x[..., 0] + 1j * x[..., 1]
    c = c.astype(np.complex128)
    if inverse and onesided:
        return np.fft.irfft(c, n=length, axis=axis)[..., None]
    y = (np.fft.ifft if inverse else np.fft.fft)(c, n=length, axis=axis)
    if onesided:
        y = np.take(y, np.arange(length // 2 + 1), axis=axis)
    return np.stack([y.real, y.imag], -1)


DFT_CASES = [
    # (shape, axis, dft_length, inverse, onesided)
    ((2, 6, 3, 1), 1, None, 0, 0),
    ((2, 6, 3, 2), 2, 5, 0, 0),
    ((2, 6, 3, 2), -3, 9, 1, 0),
    ((2, 7, 1), 1, None, 0, 1),
    ((3, 5, 2), 1, 8, 1, 1),
    ((3, 5, 2), 1, 7, 1, 1),
    ((4, 1), 0, 6, 0, 0),
]


@pytest.mark.parametrize(("opset", "fft"), [(17, False), (20, True)])
def test_dft_matches_numpy(opset, fft, monkeypatch, rng):
    """Both algorithms: twiddle-factor products, and FFTs (``MATRIX_LIMIT`` 0)."""
    from dml_jax.onnx.converters import signal

    if fft:
        monkeypatch.setattr(signal, "MATRIX_LIMIT", 0)
    for shape, axis, length, inverse, onesided in DFT_CASES:
        x = rng.standard_normal(shape).astype(np.float32)
        inits = {} if length is None else {"n": np.int64(length)}
        attrs = {"inverse": inverse, "onesided": onesided}
        if opset >= 20:
            inits["axis"] = np.int64(axis)
            node = helper.make_node("DFT", ["x", "n" if length else "", "axis"], ["y"], **attrs)
        else:
            node = helper.make_node("DFT", ["x", "n" if length else ""], ["y"], axis=axis, **attrs)
        (got,) = _run(_model(node, {"x": x}, opset=opset, inits=inits), {"x": x})
        n = shape[axis] if length is None else length
        if length is None and inverse and onesided:
            n = 2 * (shape[axis] - 1)
        want = _dft_numpy(x, axis % len(shape), n, inverse, onesided)
        assert got.shape == want.shape, (shape, axis, length, inverse, onesided)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_dft_types(dtype, rng):
    x = rng.standard_normal((2, 8, 2)).astype(dtype)
    (got,) = _run(_model(helper.make_node("DFT", ["x"], ["y"], axis=1), {"x": x}, opset=17),
                  {"x": x})  # fmt: skip
    assert got.dtype == dtype
    want = _dft_numpy(x.astype(np.float64), 1, 8, 0, 0)
    np.testing.assert_allclose(got, want, rtol=1e-2 if dtype == np.float16 else 1e-12,
                               atol=1e-2 if dtype == np.float16 else 1e-12)  # fmt: skip


def _stft_numpy(x, step, window, length, onesided):
    c = x[..., 0] if x.shape[-1] == 1 else x[..., 0] + 1j * x[..., 1]
    frames = (x.shape[1] - length) // step + 1
    out = []
    for f in range(frames):
        seg = c[:, f * step : f * step + length] * window
        y = np.fft.fft(seg, axis=-1)
        out.append(y[:, : length // 2 + 1] if onesided else y)
    y = np.stack(out, 1)
    return np.stack([y.real, y.imag], -1)


@pytest.mark.parametrize(
    ("channels", "onesided", "with_window", "with_length"),
    [(1, 1, True, False), (2, 0, True, True), (1, 0, False, True), (1, 1, False, False)],
)
def test_stft_matches_numpy(channels, onesided, with_window, with_length, rng):
    x = rng.standard_normal((2, 20, channels)).astype(np.float32)
    length = 8 if (with_window or with_length) else 20
    window = np.hanning(length).astype(np.float32) if with_window else np.ones(length, np.float32)
    inits = {"step": np.int64(3)}
    names = ["x", "step", "", ""]
    if with_window:
        inits["w"] = window
        names[2] = "w"
    if with_length:
        inits["len"] = np.int64(length)
        names[3] = "len"
    node = helper.make_node("STFT", names, ["y"], onesided=onesided)
    (got,) = _run(_model(node, {"x": x}, opset=17, inits=inits), {"x": x})
    want = _stft_numpy(x, 3, window, length, onesided)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_mel_weight_matrix_with_a_parameter():
    """A float initializer (a parameter) is never folded away: the converter evaluates the
    table from the values known at import."""
    inits = {
        "bins": np.int64(8),
        "n": np.int64(64),
        "rate": np.int64(8000),
        "low": np.float32(100),
        "high": np.float32(3500),
    }
    node = helper.make_node("MelWeightMatrix", list(inits), ["y"])
    model = _model(node, {}, opset=17, inits=inits)
    (got,) = _run(model, {})
    (want,) = _reference(model, {})
    np.testing.assert_array_equal(got, want)


# --- GridSample -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "padding"), [("bilinear", "zeros"), ("bicubic", "border"), ("nearest", "reflection"),
                          ("bicubic", "reflection")]
)  # fmt: skip
def test_gridsample_16_names_its_modes_differently(mode, padding, rng):
    """GridSample-16's bilinear / bicubic are 20's linear / cubic; the grid reaches far beyond
    the borders (reflections several times over)."""
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    grid = (rng.random((2, 3, 6, 2)) * 7 - 3.5).astype(np.float32)
    feeds = {"x": x, "g": grid}
    node = helper.make_node("GridSample", ["x", "g"], ["y"], mode=mode, padding_mode=padding)
    (got,) = _run(_model(node, feeds, opset=16), feeds)
    new = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    node = helper.make_node("GridSample", ["x", "g"], ["y"], mode=new, padding_mode=padding)
    (want,) = _reference(_model(node, feeds, opset=22), feeds)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("align", [0, 1])
def test_gridsample_1d_and_integer_nearest(align, rng):
    x = rng.standard_normal((1, 2, 7)).astype(np.float32)
    grid = (rng.random((1, 5, 1)) * 5 - 2.5).astype(np.float32)
    feeds = {"x": x, "g": grid}
    node = helper.make_node("GridSample", ["x", "g"], ["y"], align_corners=align,
                            padding_mode="reflection")  # fmt: skip
    model = _model(node, feeds, opset=22)
    np.testing.assert_allclose(_run(model, feeds)[0], _reference(model, feeds)[0], rtol=1e-5,
                               atol=1e-5)  # fmt: skip
    xi = rng.integers(-100, 100, (1, 2, 3, 4)).astype(np.int32)
    grid = (rng.random((1, 3, 3, 2)) * 2.4 - 1.2).astype(np.float32)
    feeds = {"x": xi, "g": grid}
    node = helper.make_node("GridSample", ["x", "g"], ["y"], mode="nearest", align_corners=align)
    model = _model(node, feeds, opset=22)
    np.testing.assert_array_equal(_run(model, feeds)[0], _reference(model, feeds)[0])


# --- DeformConv -----------------------------------------------------------------------------


def _deform_numpy(x, w, offset, bias, mask, strides, pads, dilations, group, offset_group):
    """DeformConv from its definition: each tap at its position plus its offset, N-linear with
    0 outside the input, times the mask, summed with the weights."""
    n, c = x.shape[:2]
    dims = x.shape[2:]
    r = len(dims)
    oc, cg = w.shape[:2]
    kernel = w.shape[2:]
    out = offset.shape[2:]
    taps = int(np.prod(kernel))
    offset = offset.reshape(n, offset_group, taps, r, *out)
    mask = (
        np.ones((n, offset_group, taps, *out))
        if mask is None
        else mask.reshape(n, offset_group, taps, *out)
    )
    y = np.zeros((n, oc, *out))
    for b in range(n):
        for o in np.ndindex(*out):
            for t, k in enumerate(np.ndindex(*kernel)):
                for ch in range(c):
                    og = ch // (c // offset_group)
                    p = [
                        -pads[a] + strides[a] * o[a] + dilations[a] * k[a]
                        + offset[(b, og, t, a, *o)]
                        for a in range(r)
                    ]  # fmt: skip
                    value = 0.0
                    lows = [int(np.floor(v)) for v in p]
                    for corner in np.ndindex(*([2] * r)):
                        at = [lo + cc for lo, cc in zip(lows, corner)]
                        if all(0 <= i < d for i, d in zip(at, dims)):
                            wt = np.prod([1 - abs(v - i) for v, i in zip(p, at)])
                            value += wt * x[(b, ch, *at)]
                    value *= mask[(b, og, t, *o)]
                    g = ch // cg
                    for m in range(g * (oc // group), (g + 1) * (oc // group)):
                        y[(b, m, *o)] += w[(m, ch % cg, *k)] * value
    if bias is not None:
        y += bias.reshape((1, oc) + (1,) * r)
    return y


@pytest.mark.parametrize(
    ("dims", "kernel", "attrs"),
    [
        ((6,), (3,), {"strides": [2], "pads": [1, 2], "group": 2}),
        ((3, 4, 3), (2, 2, 1), {"dilations": [1, 2, 1], "offset_group": 2}),
        ((4, 5), (3, 2), {"pads": [1, 0, 1, 1], "strides": [1, 2], "group": 2, "offset_group": 2}),
    ],
)
def test_deform_conv_nd_matches_its_definition(dims, kernel, attrs, rng):
    r = len(dims)
    c, oc = 4, 4
    group = attrs.get("group", 1)
    og = attrs.get("offset_group", 1)
    strides = attrs.get("strides", [1] * r)
    pads = attrs.get("pads", [0] * 2 * r)
    dil = attrs.get("dilations", [1] * r)
    out = tuple(
        (d + pads[a] + pads[a + r] - (kernel[a] - 1) * dil[a] - 1) // strides[a] + 1
        for a, d in enumerate(dims)
    )
    taps = int(np.prod(kernel))
    x = rng.standard_normal((2, c, *dims))
    w = rng.standard_normal((oc, c // group, *kernel))
    offset = rng.standard_normal((2, og * taps * r, *out)) * 1.5
    mask = rng.random((2, og * taps, *out))
    bias = rng.standard_normal(oc)
    feeds = {"x": x, "w": w, "off": offset, "b": bias, "m": mask}
    node = helper.make_node("DeformConv", ["x", "w", "off", "b", "m"], ["y"], **attrs)
    (got,) = _run(_model(node, feeds, opset=22), feeds)
    want = _deform_numpy(x, w, offset, bias, mask, strides, pads, dil, group, og)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)


# --- the DML mappings: CumProd, Swish, BitCast, TensorScatter --------------------------------


def _operators(model, feeds) -> list[str]:
    session = InferenceSession(model)
    session.run(None, feeds)
    return session.explain()


@pytest.mark.parametrize("dtype", [np.float16, np.int64, np.uint32])
def test_cumprod_types(dtype, rng):
    x = rng.integers(-3 if dtype != np.uint32 else 0, 4, (3, 5, 2)).astype(dtype)
    if dtype == np.int64:
        x[0, :, 0] = [40000, 50000, -3, 7, 1]  # the product wraps in 32 bits
    node = helper.make_node("CumProd", ["x", "axis"], ["y"], reverse=1, exclusive=1)
    model = _model(node, {"x": x}, opset=26, inits={"axis": np.int64(1)})
    (got,) = _run(model, {"x": x})
    want = np.flip(np.cumprod(np.flip(x, 1), axis=1, dtype=x.dtype), 1)
    want = np.concatenate([want[:, 1:], np.ones_like(want[:, :1])], axis=1)
    if dtype == np.int64:  # 64-bit integers are their low 32 bits in the graph
        want = want.astype(np.int32).astype(np.int64)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=2e-3)
    assert "CUMULATIVE_PRODUCT" in _operators(model, {"x": x})


def test_swish_alpha(rng):
    x = rng.standard_normal(20).astype(np.float32)
    model = _model(helper.make_node("Swish", ["x"], ["y"], alpha=0.3), {"x": x}, opset=24)
    (got,) = _run(model, {"x": x})
    np.testing.assert_allclose(got, x / (1 + np.exp(-0.3 * x)), rtol=1e-5, atol=1e-6)
    assert "ACTIVATION_SWISH" in _operators(model, {"x": x})


@pytest.mark.parametrize(
    ("src", "to", "how"),
    [
        (np.float16, TP.INT16, "jax"),
        (np.uint32, TP.FLOAT, "jax"),
        (np.int8, TP.UINT8, "CAST"),
        (np.uint16, TP.FLOAT16, "jax"),
    ],
)
def test_bitcast_reinterprets_bits(src, to, how, rng):
    x = rng.standard_normal(12).astype(np.float32)
    x = x.astype(src) if np.dtype(src).kind == "f" else rng.integers(0, 120, 12).astype(src)
    model = _model(helper.make_node("BitCast", ["x"], ["y"], to=to), {"x": x}, opset=26)
    (got,) = _run(model, {"x": x})
    want = x.view(helper.tensor_dtype_to_np_dtype(to))
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    assert how in _operators(model, {"x": x})


@pytest.mark.parametrize("writes", [None, [1, 3]])
@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_tensorscatter_with_known_write_indices(writes, mode, rng):
    past = rng.standard_normal((2, 3, 5, 4)).astype(np.float16)
    update = rng.standard_normal((2, 3, 2, 4)).astype(np.float16)
    inits = {} if writes is None else {"w": np.int64(writes)}
    node = helper.make_node("TensorScatter", ["past", "up"] + (["w"] if inits else []), ["y"],
                            mode=mode, axis=2)  # fmt: skip
    feeds = {"past": past, "up": update}
    model = _model(node, feeds, opset=24, inits=inits)
    (got,) = _run(model, feeds)
    (want,) = _reference(model, feeds)
    np.testing.assert_array_equal(got, want)
    assert "jax" not in _operators(model, feeds)


# --- random ops and training-mode Dropout ---------------------------------------------------


def _random_model(op, inputs=(), out_type=0, **attrs):
    feeds = {k: v for k, v in inputs}
    node = helper.make_node(op, list(feeds), ["y"], **attrs)
    return _model(node, feeds, opset=22, out_type=out_type), feeds


def test_random_normal_and_uniform_statistics():
    model, _ = _random_model("RandomNormal", shape=[200, 100], mean=2.0, scale=3.0, dtype=11)
    (y,) = _run(model, {})
    assert y.shape == (200, 100) and y.dtype == np.float64
    assert abs(y.mean() - 2) < 0.1 and abs(y.std() - 3) < 0.1
    model, _ = _random_model("RandomUniform", shape=[300, 100], low=-1.0, high=3.0)
    (y,) = _run(model, {})
    assert y.dtype == np.float32 and y.min() >= -1 and y.max() < 3
    assert abs(y.mean() - 1) < 0.05 and abs(y.var() - 16 / 12) < 0.05
    x = np.zeros((100, 100), np.int32)
    model, feeds = _random_model("RandomUniformLike", [("x", x)], dtype=TP.FLOAT16, high=2.0)
    (y,) = _run(model, feeds)
    assert y.dtype == np.float16 and y.shape == x.shape and y.min() >= 0 and y.max() < 2
    model, feeds = _random_model("RandomNormalLike", [("x", x.astype(np.float16))])
    (y,) = _run(model, feeds)
    assert y.dtype == np.float16 and abs(float(y.astype(np.float32).std()) - 1) < 0.05


def test_random_seeds():
    """A seed fixes the values (one session or another); unseeded nodes draw independently."""
    a = _run(_random_model("RandomUniform", shape=[64], seed=3.0)[0], {})[0]
    b = _run(_random_model("RandomUniform", shape=[64], seed=3.0)[0], {})[0]
    c = _run(_random_model("RandomUniform", shape=[64], seed=4.0)[0], {})[0]
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    nodes = [helper.make_node("RandomNormal", [], [k], shape=[64]) for k in ("p", "q")]
    p, q = _run(_model(nodes, {}, outputs=("p", "q")), {})
    assert not np.array_equal(p, q)


def test_multinomial_and_bernoulli_frequencies():
    probs = np.array([[0.1, 0.6, 0.3], [0.5, 0.25, 0.25]], np.float32)
    model, feeds = _random_model(
        "Multinomial", [("x", np.log(probs))], TP.INT64, sample_size=4000, dtype=7
    )
    (y,) = _run(model, feeds)
    assert y.shape == (2, 4000) and y.dtype == np.int64
    for row, p in zip(y, probs):
        np.testing.assert_allclose(np.bincount(row, minlength=3) / 4000, p, atol=0.03)
    p = np.linspace(0, 1, 40000).astype(np.float32).reshape(200, 200)
    model, feeds = _random_model("Bernoulli", [("x", p)], dtype=TP.DOUBLE, seed=5.0)
    (y,) = _run(model, feeds)
    assert y.dtype == np.float64 and set(np.unique(y)) <= {0.0, 1.0}
    assert abs(y.mean() - 0.5) < 0.02
    assert y.ravel()[:400].mean() < 0.1 and y.ravel()[-400:].mean() > 0.9  # follows p


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_training_dropout_keeps_one_minus_ratio_scaled(dtype, rng):
    x = (rng.random((100, 100)) + 0.5).astype(dtype)
    node = helper.make_node("Dropout", ["x", "r", "t"], ["y", "mask"], seed=2)
    feeds = {"x": x, "r": np.array(0.3, dtype)}
    model = _model(node, feeds, outputs=("y", "mask"), inits={"t": np.array(True)})
    y, mask = _run(model, feeds)
    assert mask.dtype == np.bool_ and y.dtype == dtype
    assert abs(mask.mean() - 0.7) < 0.02
    np.testing.assert_allclose(y[mask], (x[mask].astype(np.float32) / 0.7).astype(dtype),
                               rtol=2e-3)  # fmt: skip
    assert not y[~mask].any()


# --- QuantizeLinear into 16-bit integers ----------------------------------------------------


@pytest.mark.parametrize(("dtype", "zero"), [(np.float16, np.int16), (np.float32, np.uint16)])
def test_quantize_linear_16_bit(dtype, zero, rng):
    # (float16 divides in float16: its inputs stay where the quotient is finite, since ONNX's
    # reference casts an infinite quotient to int32 as an undefined value)
    x = (rng.standard_normal((3, 4)) * (1e4 if dtype == np.float16 else 3e4)).astype(dtype)
    x[0, :3] = [0.5, 1.5, -2.5]  # halves round to even
    scale = np.array([1.0, 2.0, 0.5], dtype)
    zp = np.array([0, 100, 30000] if zero == np.uint16 else [0, -100, 20000], zero)
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], axis=0)
    model = _model(node, {"x": x}, opset=21, inits={"s": scale, "z": zp})
    (got,) = _run(model, {"x": x})
    (want,) = _reference(model, {"x": x})
    assert got.dtype == zero
    np.testing.assert_array_equal(got, want)


# --- jit, vmap and data types of every JAX node ---------------------------------------------


def _jax_cases(rng, dtype):
    x4 = rng.standard_normal((1, 2, 4, 5)).astype(dtype)
    grid = (rng.random((1, 3, 3, 2)) * 2.2 - 1.1).astype(dtype)
    sig = rng.standard_normal((1, 16, 1)).astype(dtype)
    cases = [
        (_resize(["x", "", "scales"]), {"x": x4}, {"scales": np.float32([1, 1, 1.5, 0.8])}, 19),
        (helper.make_node("DFT", ["x"], ["y"], axis=1, onesided=1), {"x": sig}, {}, 17),
        (helper.make_node("DFT", ["x"], ["y"], axis=1, inverse=1), {"x": sig}, {}, 17),
        (helper.make_node("STFT", ["x", "s", "", "n"], ["y"]), {"x": sig},
         {"s": np.int64(4), "n": np.int64(8)}, 17),
        (helper.make_node("GridSample", ["x", "g"], ["y"], mode="cubic"), {"x": x4, "g": grid},
         {}, 22),
        (helper.make_node("GridSample", ["x", "g"], ["y"], mode="nearest",
                          padding_mode="reflection"), {"x": x4, "g": grid}, {}, 22),
        (helper.make_node("DeformConv", ["x", "w", "o"], ["y"], kernel_shape=[2, 2]),
         {"x": x4, "w": rng.standard_normal((3, 2, 2, 2)).astype(dtype),
          "o": rng.standard_normal((1, 8, 3, 4)).astype(dtype)}, {}, 22),
        (helper.make_node("Det", ["x"], ["y"]), {"x": x4[:, :, :4, :4]}, {}, 22),
    ]  # fmt: skip
    if dtype != np.float64:  # (jax.random compiles slowly: two types are enough)
        cases.append(
            (helper.make_node("Dropout", ["x", "r", "t"], ["y"]), {"x": x4},
             {"r": np.array(0.4, dtype), "t": np.array(True)}, 22)
        )  # fmt: skip
        cases.append(
            (helper.make_node("BitCast", ["x"], ["y"], to=TP.INT16 if dtype == np.float16
                              else TP.INT32), {"x": x4}, {}, 26)
        )  # fmt: skip
    return cases


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_jax_nodes_under_jit_and_vmap(dtype, rng):
    """Each JAX node run (a jitted program) and vmapped under jit, in each float type."""
    for node, feeds, inits, opset in _jax_cases(rng, dtype):
        session = InferenceSession(_model(node, feeds, opset=opset, inits=inits))
        args = list(feeds.values())
        (want,) = session.run(None, feeds)
        assert want.dtype == (np.int16 if dtype == np.float16 else np.int32) or want.dtype == dtype
        assert "jax" in session.explain()
        with jax.enable_x64(dtype == np.float64):  # (run itself is jitted)
            (mapped,) = jax.jit(jax.vmap(session.fn))(*[np.stack([a, a]) for a in args])
        for k in range(2):
            np.testing.assert_allclose(np.asarray(mapped[k], np.float64),
                                       want.astype(np.float64), rtol=1e-3, atol=1e-3,
                                       err_msg=node.op_type)  # fmt: skip


# --- what is rejected -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("node", "feeds", "inits", "opset", "message"),
    [
        (
            _resize(["x", "", "scales"], coordinate_transformation_mode="sideways"),
            {"x": np.ones((1, 1, 2, 2), np.float32)},
            {"scales": np.float32([1, 1, 2, 2])},
            19,
            "attribute 'coordinate_transformation_mode': 'sideways'",
        ),
        (
            helper.make_node("DFT", ["x", "", "a"], ["y"]),
            {"x": np.ones((2, 4, 1), np.float32)},
            {"a": np.int64(-1)},
            20,
            "input 'axis': -1 is out of range",
        ),
        (
            helper.make_node("GridSample", ["x", "g"], ["y"], mode="linear"),
            {"x": np.ones((1, 1, 2, 2), np.float32), "g": np.zeros((1, 1, 1, 2), np.float32)},
            {},
            16,
            "attribute 'mode': 'linear'",
        ),
        (
            helper.make_node("GridSample", ["x", "g"], ["y"]),
            {"x": np.ones((1, 1, 2, 2), np.int32), "g": np.zeros((1, 1, 1, 2), np.float32)},
            {},
            22,
            "attribute 'mode': 'linear' on INT32",
        ),
        (
            helper.make_node("DeformConv", ["x", "w", "o"], ["y"]),
            {
                "x": np.ones((1, 1, 3, 3), np.float32),
                "w": np.ones((1, 1, 2, 2), np.float32),
                "o": np.ones((1, 4, 2, 2), np.float32),
            },
            {},
            22,
            "input 'offset' must have shape",
        ),
        (
            helper.make_node("BitCast", ["x"], ["y"], to=TP.DOUBLE),
            {"x": np.ones(2, np.int64)},
            {},
            26,
            "attribute 'to'",
        ),
        (
            helper.make_node("TensorScatter", ["p", "u"], ["y"], axis=0),
            {"p": np.ones((2, 3), np.float32), "u": np.ones((2, 1), np.float32)},
            {},
            24,
            "attribute 'axis'",
        ),
        (
            helper.make_node("Multinomial", ["x"], ["y"], dtype=TP.FLOAT),
            {"x": np.ones((2, 3), np.float32)},
            {},
            22,
            "attribute 'dtype'",
        ),
    ],
)
def test_rejected_with_the_node_and_attribute(node, feeds, inits, opset, message):
    with pytest.raises(dml.ValidationError, match=rf"node 0 \({node.op_type}\).*{message}"):
        _run(_model(node, feeds, opset=opset, inits=inits), feeds)
