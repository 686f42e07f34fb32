"""The one-pass softmax kernel (dml_jax.kernels.softmax) against the lax lowering.

In Pallas interpret mode (any machine) for both layouts, one-tile and looped slices, -inf
entries, all -inf slices and float16; on a CUDA machine also the compiled Triton kernel through
the operator's fast path, which computes ``exp`` its own way: the stated tolerance is 8 float32
ulps of the larger magnitude (absolute 1e-6 near zero) for float32 and one float16 ulp.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dml_jax as dml
from dml_jax import fastpath
from dml_jax.kernels import softmax as K
from dml_jax.ops.softmax import hardmax, log_softmax, softmax

pytestmark = pytest.mark.kernel_matrix

# (shape, axes, tile bytes, loop rows, loop columns): small tiles make the CPU cases loop.
CASES = [
    ((30, 1000), (1,), 8192, 4096, 64),  # minor, one tile
    ((6, 5000), (1,), 1024, 256, 64),  # minor, looped
    ((4, 37, 50), (1,), 8192, 4096, 64),  # inner, one tile
    ((3, 300, 40), (1,), 256, 4096, 8),  # inner, looped
    ((3, 5, 7, 9), (1, 2), 8192, 4096, 64),  # two adjacent axes
    ((2, 1, 9, 1, 300), (2, 4), 8192, 4096, 64),  # size-1 axes between
]


def _input(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 6).astype(dtype)
    x.reshape(-1)[:5] = -np.inf  # some -inf entries, and
    x.reshape(shape[0], -1)[-1] = -np.inf  # a block of all -inf slices
    return x


def _close(got, want, dtype):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(got)
    np.testing.assert_array_equal(np.isinf(got[ok]), np.isinf(want[ok]))
    finite = ok & ~np.isinf(got)
    eps = np.finfo(dtype).eps
    tol = (8 * eps if dtype == np.float32 else eps) * np.abs(want[finite]) + (
        1e-6 if dtype == np.float32 else 1e-3
    )
    assert np.all(np.abs(got[finite] - want[finite]) <= tol), np.max(
        np.abs(got[finite] - want[finite])
    )


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shape, axes, tile, loop_rows, loop_cols", CASES)
def test_kernel_interpret_matches_lax(
    monkeypatch, shape, axes, tile, loop_rows, loop_cols, dtype, log
):
    monkeypatch.setattr(K, "TILE_BYTES", tile)
    monkeypatch.setattr(K, "LOOP_ROWS", loop_rows)
    monkeypatch.setattr(K, "LOOP_COLS", loop_cols)
    monkeypatch.setattr(K, "MIN_PROGRAMS", 1)
    v = K.plan(shape, axes, dtype)
    assert v is not None
    x = jnp.asarray(_input(shape, dtype))
    got = K.softmax_kernel(x, v, log, interpret=True)
    fn = log_softmax if log else softmax
    want = fn(x.astype(jnp.float32), tuple(sorted(axes))).astype(dtype)
    assert got.dtype == want.dtype and got.shape == want.shape
    _close(got, want, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize(
    "shape, axes, tile, loop_rows, loop_cols", [CASES[i] for i in (0, 2, 4, 5)]
)
def test_hardmax_kernel_interpret_is_exact(
    monkeypatch, shape, axes, tile, loop_rows, loop_cols, dtype
):
    """Ties, NaN (the first NaN wins), -inf and all -inf slices: the lax lowering bit for bit."""
    monkeypatch.setattr(K, "MIN_PROGRAMS", 1)
    v = K.plan(shape, axes, dtype)
    assert v is not None and v.tiles == 1
    rng = np.random.default_rng(5)
    x = rng.integers(-2, 3, shape).astype(dtype)  # many ties
    flat = x.reshape(-1)
    flat[:3], flat[50:53] = -np.inf, np.nan
    x.reshape(shape[0], -1)[-1] = -np.inf
    got = K.softmax_kernel(jnp.asarray(x), v, False, interpret=True, hard=True)
    want = hardmax(jnp.asarray(x), tuple(sorted(axes)))
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_plan_declines_what_lax_keeps():
    assert K.plan((64, 1024), (1,), np.float64) is None  # 64-bit: lax
    assert K.plan((64, 8, 1024), (0, 2), np.float32) is None  # axes not adjacent
    assert K.plan((4, 1024), (1,), np.float32) is None  # too few programs to fill a GPU
    assert K.plan((1, 4096, 1), (1,), np.float32) is None
    v = K.plan((4096, 1024), (1,), np.float32)
    assert v is not None and (v.a, v.r, v.b) == (4096, 1024, 1)


@pytest.mark.skipif(not fastpath.cuda_present(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", ["SOFTMAX1", "LOG_SOFTMAX1", "HARDMAX1"])
@pytest.mark.parametrize(
    "shape, axes", [((2048, 1000), (1,)), ((512, 20000), (1,)), ((8, 32, 64, 65), (1,))]
)
@pytest.mark.parametrize("type_name", ["FLOAT32", "FLOAT16"])
def test_gpu_fast_path_matches_lax(name, shape, axes, type_name):
    t = dml.TensorDesc(type_name, shape)
    cls = getattr(dml, f"Activation{''.join(w.capitalize() for w in name.split('_'))}OperatorDesc")
    desc = cls(t, t, axes=axes)
    looped = K.plan(shape, axes, t.dtype).tiles > 1
    if name == "HARDMAX1" and looped:
        assert fastpath.select(desc) is None  # HARDMAX takes one-tile slices only
        return
    assert fastpath.select(desc) is not None
    x = _input(shape, t.dtype, seed=3)
    got = jax.jit(dml.compile_operator(desc).fn)(x)
    want = jax.jit(dml.compile_operator(desc, fast_paths=False).fn)(x)
    if name == "HARDMAX1":
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    else:
        _close(got, want, t.dtype)
