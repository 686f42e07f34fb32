"""The mirrored-padding kernel (dml_jax.kernels.padding) against the lax lowering, bit for bit.

The index maps on their own against ``source_index`` (the lax lowering's map) for every mode:
folding once, many times, one-element axes. The kernel in Pallas interpret mode (any machine)
against that map applied in NumPy, and once against the lax lowering itself: ranks 1 and 8,
float32, float16, int8 and int64, ragged tiles, column blocks, merged trailing blocks and vmap.
On a CUDA machine, the compiled kernel through the operator's fast path against the lax
lowering for every mode.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dml_jax as dml
from dml_jax import fastpath
from dml_jax.enums import PaddingMode
from dml_jax.kernels import padding as K
from dml_jax.ops.movement import lower_padding, source_index

pytestmark = pytest.mark.kernel_matrix

MODES = [PaddingMode.EDGE, PaddingMode.REFLECTION, PaddingMode.SYMMETRIC, PaddingMode.WRAP]


def _desc(shape, start, end, mode, dtype, cls=dml.Padding1OperatorDesc):
    t = dml.TensorDesc(np.dtype(dtype).name.upper(), shape)
    out = t.like(sizes=tuple(n + a + b for n, a, b in zip(shape, start, end)))
    if cls is dml.PaddingOperatorDesc:
        return cls(t, out, mode.name, 0.0, start, end)
    return cls(t, out, mode.name, np.dtype(dtype).name.upper(), 0, start, end)


def _input(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        x = (rng.standard_normal(shape) * 100).astype(dtype)
        x.reshape(-1)[:2] = [np.nan, -0.0]  # bits, not values, are compared
        return x
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


def _same_bits(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_index_maps_match_source_index(mode):
    positions = jnp.arange(32, dtype=jnp.int32)  # one shape: each operation compiles once
    for n, a, b in [(1, 3, 2), (2, 1, 1), (5, 4, 4), (5, 5, 5), (5, 0, 3), (4, 13, 9), (3, 20, 0)]:
        ax = K.Axis(n, a, b)
        got = np.asarray(K._fold(jnp.minimum(positions, ax.out - 1), ax, mode))[: ax.out]
        want = [source_index(mode, n, i) for i in range(-a, n + b)]
        np.testing.assert_array_equal(got, want, err_msg=f"{mode.name} n={n} pads=({a}, {b})")


def test_plan_views_and_declines():
    f32, m = np.float32, PaddingMode.REFLECTION
    v = K.plan((16, 256, 254, 254), (0, 0, 1, 1), (0, 0, 1, 1), m, f32)
    assert [(a.n, a.start, a.end) for a in v.row_axes] == [(4096, 0, 0), (254, 1, 1)]
    assert (v.col, v.inner, v.cols) == (K.Axis(254, 1, 1), 1, 256)
    # pads on C only: the H x W block is the columns; a short trailing block joins the axis
    v = K.plan((2, 1, 8, 40, 40), (0, 0, 2, 0, 0), (0, 0, 2, 0, 0), m, f32)
    assert (v.col, v.inner) == (K.Axis(1600, 0, 0), 1) and len(v.row_axes) == 2
    v = K.plan((64, 9, 3), (0, 2, 0), (0, 1, 0), m, f32)
    assert (v.col, v.inner) == (K.Axis(9, 2, 1), 3)
    v = K.plan((64, 9), (0, 2), (0, 1), m, np.int64)  # 64-bit: pairs of words
    assert (v.col, v.inner) == (K.Axis(9, 2, 1), 2)
    assert K.plan((4, 5), (1, 1), (1, 1), PaddingMode.CONSTANT, f32) is None
    assert K.plan((4, 5), (0, 0), (0, 0), m, f32) is None  # nothing padded
    assert K.plan((1 << 16, 1 << 15), (0, 1), (0, 1), m, f32) is None  # beyond int32 offsets


def _reference(x, mode, start, end):
    """The lax lowering's index map (``source_index``) applied in NumPy, axis by axis."""
    for axis, (n, a, b) in enumerate(zip(x.shape, start, end)):
        x = np.take(x, [source_index(mode, n, i) for i in range(-a, n + b)], axis=axis)
    return x


# (shape, start, end, mode, dtype, tile bytes): small tiles make several programs, ragged rows
# and columns and column blocks.
CASES = [
    ((7,), (3,), (12,), PaddingMode.REFLECTION, np.float32, 16),  # rank 1, folding, col blocks
    ((2, 1, 3, 1, 4, 5, 1, 3), (0, 0, 1, 1, 0, 2, 0, 1), (0, 0, 2, 0, 0, 1, 0, 1),
     PaddingMode.SYMMETRIC, np.float16, 256),  # rank 8: size-1 axes dropped, merged, ragged rows
    ((3, 1, 5, 3), (0, 2, 9, 0), (1, 1, 0, 0), PaddingMode.WRAP, np.int8, 64),  # inner block of 3
]  # fmt: skip


@pytest.mark.parametrize("shape, start, end, mode, dtype, tile", CASES)
def test_kernel_interpret_is_exact(monkeypatch, shape, start, end, mode, dtype, tile):
    monkeypatch.setattr(K, "TILE_BYTES", dict.fromkeys((1, 2, 4), tile))
    assert K.plan(shape, start, end, mode, dtype).programs > 1
    x = _input(shape, dtype)
    got = K.pad(jnp.asarray(x), mode, start, end, interpret=True)
    _same_bits(got, _reference(x, mode, start, end))
    if len(shape) == 8:
        lax_fn = jax.jit(lambda y: lower_padding(_desc(shape, start, end, mode, dtype), y)[0])
        _same_bits(got, lax_fn(x))


def test_kernel_interpret_vmap_int64(monkeypatch):
    """vmap folds the batch into the kernel as an unpadded axis; 64-bit moves as word pairs."""
    monkeypatch.setattr(K, "TILE_BYTES", dict.fromkeys((1, 2, 4), 64))
    shape, start, end, mode = (2, 3, 4), (0, 2, 1), (0, 1, 3), PaddingMode.EDGE
    with jax.enable_x64(True):
        x = _input(shape, np.int64)
        got = jax.vmap(lambda y: K.pad(y, mode, start[1:], end[1:], interpret=True))(x)
        _same_bits(got, _reference(x, mode, start, end))


@pytest.mark.skipif(not fastpath.cuda_present(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
@pytest.mark.parametrize(
    "shape, start, end, type_name",
    [
        ((8, 64, 126, 126), (0, 0, 1, 1), (0, 0, 1, 1), "float32"),
        ((8, 64, 120, 122), (0, 0, 3, 2), (0, 0, 3, 4), "float16"),
        ((4, 30, 50, 70), (0, 2, 0, 0), (0, 1, 0, 0), "int8"),
        ((3000, 5, 7), (0, 9, 1), (0, 12, 20), "float16"),
        ((123457,), (1000,), (77,), "int64"),
    ],
)
def test_gpu_fast_path_matches_lax(mode, shape, start, end, type_name):
    classes = [dml.Padding1OperatorDesc]
    if mode is PaddingMode.REFLECTION:
        classes.append(dml.PaddingOperatorDesc)
    with jax.enable_x64(type_name == "int64"):
        for cls in classes:
            desc = _desc(shape, start, end, mode, type_name, cls)
            path = fastpath.select(desc)
            assert path is not None and path.lower.__module__ == K.__name__
            x = _input(shape, type_name, seed=3)
            got = jax.jit(dml.compile_operator(desc).fn)(x)
            want = jax.jit(dml.compile_operator(desc, fast_paths=False).fn)(x)
            _same_bits(got, want)
