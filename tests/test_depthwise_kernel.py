"""The depthwise convolution kernel (dml_jax.kernels.depthwise) against the lax lowering.

In Pallas interpret mode (any machine) with tiny tiles, so the channels span several blocks (the
last one partial), the columns several tiles and the rows several bands; strides of 1, 2 and 3
(one to three output rows pending at once), 7x7 windows (their rows looped), asymmetric
padding, CONVOLUTION mode's flip, the bias and fused activations. On a CUDA machine also the compiled Triton kernel through the
operator's fast path, against the lax lowering (cuDNN's grouped convolution). Both sum the same
float32 products, so results agree to float32 rounding (float16: to one rounding of the output).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dml_jax as dml
from dml_jax import fastpath
from dml_jax.enums import ConvolutionDirection, ConvolutionMode
from dml_jax.kernels import depthwise as K

pytestmark = pytest.mark.kernel_matrix


def _desc(shape, type_name, window, strides, start, end, *, bias=False, mode="CROSS_CORRELATION",
          act=None, multiplier=1, dilations=(1, 1), direction="FORWARD", groups=None):  # fmt: skip
    n, c, h, w = shape
    out = [
        (size + s + e - d * (k - 1) - 1) // st + 1
        for size, s, e, k, st, d in zip((h, w), start, end, window, strides, dilations)
    ]
    groups = c if groups is None else groups
    fields = {
        "input_tensor": dml.TensorDesc(type_name, shape),
        "filter_tensor": dml.TensorDesc(type_name, (c * multiplier, c // groups, *window)),
        "output_tensor": dml.TensorDesc(type_name, (n, c * multiplier, *out)),
        "mode": getattr(ConvolutionMode, mode),
        "direction": getattr(ConvolutionDirection, direction),
        "strides": strides,
        "dilations": dilations,
        "start_padding": start,
        "end_padding": end,
        "output_padding": (0, 0),
        "group_count": groups,
    }
    if bias:
        fields["bias_tensor"] = dml.TensorDesc(type_name, (1, c * multiplier, 1, 1))
    if act is not None:
        fields["fused_activation"] = act
    return dml.ConvolutionOperatorDesc(**fields)


def _arrays(d, seed=0):
    rng = np.random.default_rng(seed)
    dtype = d.input_tensor.dtype
    out = [rng.standard_normal(d.input_tensor.sizes).astype(dtype)]
    k = np.prod(d.filter_tensor.sizes[2:])
    out.append((rng.standard_normal(d.filter_tensor.sizes) / np.sqrt(k)).astype(dtype))
    if d.bias_tensor is not None:
        out.append(rng.standard_normal(d.bias_tensor.sizes).astype(dtype))
    return out


def _close(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    scale = float(np.abs(want.astype(np.float32)).max())
    # float32: the same products summed in another order; float16: one output rounding apart.
    tol = 2e-6 if want.dtype == np.float32 else 1e-3
    np.testing.assert_allclose(
        got.astype(np.float32), want.astype(np.float32), rtol=tol, atol=tol * scale
    )


# (data type, input shape, window, strides, start, end, extra _desc fields)
CASES = [
    ("FLOAT32", (2, 5, 9, 11), (3, 3), (1, 1), (1, 1), (1, 1), {}),
    ("FLOAT32", (2, 5, 9, 11), (3, 3), (1, 1), (1, 1), (1, 1), {"bias": True, "mode": "CONVOLUTION"}),
    ("FLOAT16", (1, 6, 10, 13), (3, 3), (2, 2), (1, 1), (1, 1),
     {"bias": True, "act": dml.ActivationReluOperatorDesc()}),
    ("FLOAT32", (1, 3, 12, 10), (5, 5), (2, 2), (2, 2), (1, 2),
     {"act": dml.ActivationSigmoidOperatorDesc()}),
    ("FLOAT32", (2, 4, 14, 9), (3, 2), (3, 1), (0, 1), (2, 0),
     {"bias": True, "act": dml.ActivationLeakyReluOperatorDesc(alpha=0.1)}),
    ("FLOAT16", (1, 9, 7, 7), (5, 5), (1, 1), (2, 2), (2, 2),
     {"mode": "CONVOLUTION", "act": dml.ActivationTanhOperatorDesc()}),
    # 7x7: the window's rows in a loop (View.looped)
    ("FLOAT32", (2, 5, 10, 9), (7, 7), (1, 1), (3, 3), (3, 3), {"bias": True}),
    ("FLOAT16", (1, 3, 13, 12), (7, 6), (2, 3), (3, 1), (2, 2),
     {"mode": "CONVOLUTION", "act": dml.ActivationReluOperatorDesc()}),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[2]}-s{c[3][0]}" for c in CASES])
def test_kernel_interpret_matches_lax(monkeypatch, case):
    type_name, shape, window, strides, start, end, extra = case
    d = _desc(shape, type_name, window, strides, start, end, **extra)
    monkeypatch.setattr(K, "TILE_ELEMENTS", 8)  # 2 channels x 4 columns: several column tiles
    monkeypatch.setattr(K, "MAX_BLOCK_CHANNELS", 2)  # channel blocks; odd C: the last partial
    monkeypatch.setattr(K, "MAX_COLS", 4)
    monkeypatch.setattr(K, "BAND_ROWS", 3)  # several bands, the last one partial
    v = K._view(d)
    assert v is not None and v.grid[1] > 1 and v.grid[3] > 1
    assert v.grid[2] > 1 or v.out_w <= v.cols
    arrays = _arrays(d)
    x, w = (jnp.asarray(a) for a in arrays[:2])
    if d.mode is ConvolutionMode.CONVOLUTION:
        w = jnp.flip(w, (2, 3))
    bias = jnp.asarray(arrays[2]) if d.bias_tensor is not None else None
    finish = None if d.fused_activation is None else K._finish(d.fused_activation, d.output_tensor)
    got = K.depthwise_kernel(x, w, bias, v, finish, interpret=True)
    want = dml.compile_operator(d, fast_paths=False).fn(*arrays)
    _close(got, want)


def test_kernel_under_vmap(monkeypatch):
    """``jax.vmap`` over the kernel (what ``fastpath.lowering`` batches on CUDA): Pallas's
    batching rule adds the batch to the grid; inputs and weights both batched."""
    monkeypatch.setattr(K, "TILE_ELEMENTS", 8)
    monkeypatch.setattr(K, "MAX_BLOCK_CHANNELS", 2)
    monkeypatch.setattr(K, "BAND_ROWS", 3)
    d = _desc((2, 5, 9, 11), "FLOAT32", (3, 3), (2, 1), (1, 1), (1, 1), bias=True)
    v = K._view(d)
    rng = np.random.default_rng(2)
    xs = jnp.asarray(rng.standard_normal((3, 2, 5, 9, 11)).astype(np.float32))
    ws = jnp.asarray(rng.standard_normal((3, 5, 1, 3, 3)).astype(np.float32))
    b = jnp.asarray(rng.standard_normal((1, 5, 1, 1)).astype(np.float32))
    got = jax.vmap(lambda x, w: K.depthwise_kernel(x, w, b, v, interpret=True))(xs, ws)
    lax_fn = dml.compile_operator(d, fast_paths=False).fn
    want = np.stack([np.asarray(lax_fn(x, w, b)) for x, w in zip(xs, ws)])
    _close(got, want)


def test_plan_declines_what_lax_keeps():
    def view(window=(3, 3), strides=(1, 1), type_name="FLOAT32", **extra):
        pad = tuple(k // 2 for k in window)
        return K._view(_desc((2, 8, 16, 16), type_name, window, strides, pad, pad, **extra))

    assert view() is not None and view((5, 5), (2, 2)) is not None
    assert not view((5, 5)).looped and view((7, 7)).looped  # past 25 taps the rows loop
    assert view((9, 9)) is None and view((7, 8)) is None  # past 49 taps: cuDNN's
    assert view((1, 3), (2, 1)) is None  # a window shorter than its row stride
    assert view(dilations=(2, 2)) is None  # dilated windows: taps in lax
    assert view(multiplier=2) is None  # several output channels per input channel
    assert view(groups=4) is None  # grouped, not depthwise
    assert view(direction="BACKWARD") is None
    assert view(act=dml.ActivationSoftmaxOperatorDesc()) is None  # not computed in the kernel
    assert view(act=dml.ActivationReluOperatorDesc()) is not None
    with jax.enable_x64(True):
        assert view(type_name="FLOAT64") is None


def test_fast_path_registration():
    d = _desc((2, 8, 16, 16), "FLOAT16", (3, 3), (1, 1), (1, 1), (1, 1), bias=True)
    path = fastpath.select(d)
    assert path is not None and path.name == "depthwise" and not path.standalone
    assert fastpath.select(d, fusible=True) is path  # in graphs too: cuDNN's fuses nothing


@pytest.mark.skipif(not fastpath.cuda_present(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("type_name", ["FLOAT32", "FLOAT16"])
@pytest.mark.parametrize(
    "shape, window, strides, pad, extra",
    [
        ((4, 144, 56, 56), (3, 3), (1, 1), 1, {"bias": True}),  # MobileNetV2's
        ((4, 144, 56, 56), (3, 3), (2, 2), 1, {"act": dml.ActivationReluOperatorDesc()}),
        ((4, 672, 14, 14), (5, 5), (1, 1), 2, {"bias": True, "mode": "CONVOLUTION"}),
        ((3, 40, 29, 31), (5, 5), (2, 2), 2, {"bias": True, "act": dml.ActivationSigmoidOperatorDesc()}),
        ((2, 30, 17, 300), (3, 3), (1, 1), 1, {"act": dml.ActivationTanhOperatorDesc()}),
        ((1, 24, 9, 9), (3, 3), (1, 1), 0,
         {"bias": True, "act": dml.ActivationLeakyReluOperatorDesc(alpha=0.2)}),
        ((4, 96, 56, 56), (7, 7), (1, 1), 3, {"bias": True}),  # ConvNeXt-T's (looped)
        ((3, 100, 13, 11), (7, 7), (2, 2), 3, {"mode": "CONVOLUTION", "act": dml.ActivationReluOperatorDesc()}),
    ],
)  # fmt: skip
def test_gpu_fast_path_matches_lax(type_name, shape, window, strides, pad, extra):
    d = _desc(shape, type_name, window, strides, (pad, pad), (pad, pad), **extra)
    assert fastpath.select(d) is not None
    arrays = [jax.device_put(a) for a in _arrays(d, seed=3)]
    got = jax.jit(dml.compile_operator(d).fn)(*arrays)
    want = jax.jit(dml.compile_operator(d, fast_paths=False).fn)(*arrays)
    _close(got, want)
