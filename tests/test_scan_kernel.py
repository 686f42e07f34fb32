"""The scan kernel (dml_jax.kernels.scan) against the lax lowering of CUMULATIVE_SUMMATION /
CUMULATIVE_PRODUCT.

In Pallas interpret mode (any machine) for both layouts, one tile and looped rows, every
direction, exclusivity and operation, float and integer types; on a CUDA machine also the
compiled Triton kernel through the operators' fast path. Integers must be equal (both wrap);
floats are summed in another order than XLA's: the tolerance is 64 ulps of the largest partial
magnitude of the line (float32; float16 one ulp of the result plus that; products also the
length of the line in ulps of the result), NaN and infinity positions equal.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dml_jax as dml
from dml_jax import fastpath
from dml_jax.kernels import scan as K
from dml_jax.ops.scan_generate import scan

pytestmark = pytest.mark.kernel_matrix

# (shape, axis, minor-axis tile elements, dtype, reverse, exclusive, product): each layout, each
# scan variant and each kind of type at least once; small tiles make the CPU cases loop.
CASES = [
    ((3, 300), 1, 128, np.float32, False, False, False),  # minor axis, three tiles per row
    ((3, 300), 1, 128, np.float32, True, True, False),
    ((3, 300), 1, 128, np.float32, False, True, True),
    ((3, 300), 1, 128, np.int32, True, False, True),
    ((20, 37), 1, 2048, np.float16, True, True, False),  # one tile, several rows per program
    ((20, 37), 1, 2048, np.uint32, False, True, False),
    ((3, 13, 70), 1, 2048, np.float32, True, True, True),  # outer axis, partial column block
    ((3, 13, 70), 1, 2048, np.int32, False, False, False),
    ((3, 13, 70), 1, 2048, np.float16, False, True, True),
    ((2, 3, 130), 1, 2048, np.float16, True, False, False),  # fewer rows than one loop step
    ((2, 20, 64), 0, 2048, np.uint32, False, True, True),  # the leading axis
    ((2, 20, 64), 0, 2048, np.float32, True, False, False),
]
SCANS = [(r, e, p) for r in (False, True) for e in (False, True) for p in (False, True)]
IDS = [
    f"{'rev' if r else 'fwd'}-{'excl' if e else 'incl'}-{'prod' if p else 'sum'}"
    for r, e, p in SCANS
]


def _input(shape, dtype, product: bool, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        return rng.integers(0, np.iinfo(dtype).max, shape, endpoint=True).astype(dtype)
    if product:
        x = rng.uniform(0.8, 1.25, shape) * rng.choice([-1.0, 1.0], shape)
    else:
        x = rng.standard_normal(shape) * 8
    x = x.astype(dtype)
    x.reshape(-1)[3] = np.inf
    x.reshape(-1)[-2] = np.nan
    return x


def _close(got, want, x, axis, product=False):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    if got.dtype.kind in "iu":
        np.testing.assert_array_equal(got, want)
        return
    g, w = got.astype(np.float64), want.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
    ok = ~np.isnan(g)
    np.testing.assert_array_equal(g[ok & np.isinf(g)], w[ok & np.isinf(g)])
    finite = ok & np.isfinite(g) & np.isfinite(w)
    scale = np.nanmax(np.where(np.isfinite(w), np.abs(w), 0), axis=axis, keepdims=True)
    scale = np.broadcast_to(scale, w.shape)
    eps = np.finfo(got.dtype).eps
    tol = 64 * np.finfo(np.float32).eps * scale + (
        eps * np.abs(w) if got.dtype == np.float16 else 0
    )
    if product:
        # a running product's rounding error is relative to itself and grows with the number
        # of factors (up to one half ulp each), whichever order the two multiply in
        tol = tol + x.shape[axis] * np.finfo(np.float32).eps * np.abs(w)
    diff = np.abs(g[finite] - w[finite])
    assert np.all(diff <= tol[finite] + 1e-30), diff.max()


@pytest.mark.parametrize("shape, axis, tile, dtype, reverse, exclusive, product", CASES)
def test_kernel_interpret_matches_lax(
    monkeypatch, shape, axis, tile, dtype, reverse, exclusive, product
):
    monkeypatch.setattr(K, "TILE_ELEMENTS", tile)
    v = K.plan(shape, axis, dtype, reverse, product, min_programs=1)
    assert v is not None
    x = jnp.asarray(_input(shape, dtype, product))
    got = K.scan_kernel(x, v, reverse, exclusive, product, interpret=True)
    want = scan(x, axis, reverse, exclusive, product)
    _close(got, want, np.asarray(x), axis, product)


def test_plan_declines_what_lax_keeps():
    assert K.plan((4096, 1024), 1, np.int8, False, False) is None  # type
    assert K.plan((4096, 1, 1024), 1, np.float32, False, False) is None  # nothing to scan
    assert K.plan((64, 1024, 8), 1, np.float32, False, False) is None  # narrow columns
    assert K.plan((4, 1024), 1, np.float32, False, False) is None  # too few programs
    v = K.plan((4096, 1024), 1, np.float32, True, False)
    assert v is not None and (v.a, v.r, v.b) == (4096, 1024, 1)
    v = K.plan((128, 32, 256, 256), 1, np.float16, False, True)
    assert v is not None and (v.a, v.r, v.b) == (128, 32, 65536)


@pytest.mark.skipif(not fastpath.cuda_present(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("reverse, exclusive, product", SCANS, ids=IDS)
@pytest.mark.parametrize(
    "shape, axis", [((2048, 1000), 1), ((512, 5000), 1), ((64, 32, 64, 65), 1)]
)
@pytest.mark.parametrize("type_name", ["FLOAT32", "FLOAT16", "UINT32"])
def test_gpu_fast_path_matches_lax(shape, axis, type_name, reverse, exclusive, product):
    t = dml.TensorDesc(type_name, shape)
    cls = dml.CumulativeProductOperatorDesc if product else dml.CumulativeSummationOperatorDesc
    flag = "has_exclusive_product" if product else "has_exclusive_sum"
    direction = "DECREASING" if reverse else "INCREASING"
    desc = cls(t, t, axis=axis, axis_direction=direction, **{flag: exclusive})
    assert fastpath.select(desc) is not None
    x = _input(shape, t.dtype, product, seed=3)
    got = jax.jit(dml.compile_operator(desc).fn)(x)
    want = jax.jit(dml.compile_operator(desc, fast_paths=False).fn)(x)
    _close(got, want, x, axis, product)
