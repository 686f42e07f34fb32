"""The overlapping pooling kernel (dml_jax.kernels.pooling) against the lax lowering, bit for bit.

In Pallas interpret mode (any machine) with tiny tiles, so a plane's columns span several tiles,
its rows several bands, and the last block of planes is partial; NaN, -inf and -0.0 inputs; both
IncludePadding values; float16. On a CUDA machine also the compiled Triton kernel through the
operator's fast path (XLA's IEEE maximum there, PTX ``max.NaN``), against the lax lowering.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

import dml_jax as dml
from dml_jax import fastpath
from dml_jax.kernels import pooling as K
from dml_jax.ops import pooling as P

pytestmark = pytest.mark.kernel_matrix


def _desc(cls, shape, type_name, window, strides, start, end, dilations=None, **extra):
    x = dml.TensorDesc(type_name, shape)
    geometry = {"strides": strides, "window_size": window, "start_padding": start}
    geometry["end_padding"] = end
    if dilations is not None:
        geometry["dilations"] = dilations
    plan = P.WindowPlan(window, strides, dilations or (1, 1), start, end, shape[2:])
    out = x.like(sizes=tuple(shape[:2]) + plan.outputs)
    return cls(x, out, **geometry, **extra)


def _input(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.integers(-3, 4, shape).astype(dtype)  # many ties, and zeros of both signs:
    x[x == 0] = np.where(rng.random(np.count_nonzero(x == 0)) < 0.5, -0.0, 0.0)
    flat = x.reshape(-1)
    flat[rng.choice(flat.size, 6, replace=False)] = np.nan
    flat[rng.choice(flat.size, 6, replace=False)] = -np.inf
    x[0, 0, :2] = np.nan  # a NaN on the top rows of one plane (the first band's halo)
    x[-1, -1] = -0.0  # a plane of -0.0 only
    return (x * (1 + rng.random(shape))).astype(dtype) if dtype == np.float32 else x


def _same(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)  # NaN where NaN
    number = ~np.isnan(want)
    np.testing.assert_array_equal(np.signbit(got[number]), np.signbit(want[number]))


# (operator, data type, input shape, window, strides, start, end, dilations, extra fields)
CASES = [
    ("MaxPooling", np.float32, (2, 3, 9, 11), (3, 3), (1, 1), (1, 1), (1, 1), None, {}),
    ("MaxPooling", np.float16, (2, 3, 9, 11), (3, 3), (1, 1), (1, 1), (1, 1), None, {}),
    ("MaxPooling2", np.float16, (3, 1, 10, 13), (3, 2), (2, 1), (1, 0), (2, 1), (2, 2), {}),
    ("AveragePooling", np.float32, (2, 3, 9, 11), (3, 3), (1, 1), (1, 1), (1, 1), None,
     {"include_padding": False}),
    ("AveragePooling1", np.float16, (3, 1, 10, 13), (3, 3), (2, 2), (1, 2), (1, 0), (1, 2),
     {"include_padding": True}),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{np.dtype(c[1]).name}" for c in CASES])
def test_kernel_interpret_matches_lax(monkeypatch, case):
    name, dtype, shape, window, strides, start, end, dilations, extra = case
    cls = getattr(dml, f"{name}OperatorDesc")
    type_name = np.dtype(dtype).name.upper()
    d = _desc(cls, shape, type_name, window, strides, start, end, dilations, **extra)
    monkeypatch.setattr(K, "TILE_ELEMENTS", 8)  # 2 planes x 4 columns: several column tiles
    monkeypatch.setattr(K, "TILE_ELEMENTS_16", 8)
    monkeypatch.setattr(K, "MAX_COLS", 4)
    monkeypatch.setattr(K, "BAND_ROWS", 3)  # several bands, the last one partial
    # Both layouts of the columns, and steps with and without the next step's loads ahead.
    monkeypatch.setattr(K, "SPREAD", dtype == np.float32)
    monkeypatch.setattr(K, "PREFETCH", dtype == np.float16)
    plan = P.window_plan(d)
    average = "include_padding" in extra
    v = K.plan(shape, dtype, plan, average)
    assert v is not None and v.cols == 4 and v.grid[1] > 1 and v.grid[2] > 1
    x = _input(shape, dtype)
    include = extra.get("include_padding", True)
    got = K.pool_kernel(jax.numpy.asarray(x), v, average, include, interpret=True)
    want = dml.compile_operator(d, fast_paths=False).fn(x)  # the lax lowering
    _same(got, want)


def test_plan_declines_what_lax_keeps():
    def view(window, strides, average=False, dtype=np.float32, shape=(2, 4, 16, 16)):
        plan = P.WindowPlan(window, strides, (1, 1), (1, 1), (1, 1), shape[2:])
        return K.plan(shape, dtype, plan, average)

    assert view((3, 3), (1, 1)) is not None and view((3, 3), (2, 2), True) is not None
    assert view((3, 3), (2, 2)).spread and not view((3, 3), (1, 1)).spread  # by column stride
    assert view((2, 2), (2, 2)) is None  # disjoint windows: reduce_window is at the copy
    assert view((3, 3), (1, 1), dtype=np.float64) is None
    assert view((7, 7), (1, 1)) is not None and view((7, 7), (1, 1), True) is None  # > 32 points
    assert view((9, 9), (1, 1)) is None
    three_d = P.WindowPlan((3, 3, 3), (1, 1, 1), (1, 1, 1), (1,) * 3, (1,) * 3, (8, 8, 8))
    assert K.plan((2, 2, 8, 8, 8), np.float32, three_d, False) is None


def test_fast_path_registration():
    d = _desc(
        dml.MaxPooling1OperatorDesc, (2, 4, 16, 16), "FLOAT32", (3, 3), (2, 2), (1, 1), (1, 1)
    )
    path = fastpath.select(d)
    assert path is not None and path.standalone  # a fusion barrier: graphs keep lax
    assert fastpath.select(d, fusible=True) is None
    indices = dml.TensorDesc("UINT32", d.output_tensor.sizes)
    assert fastpath.select(dataclasses.replace(d, output_indices_tensor=indices)) is None


@pytest.mark.skipif(not fastpath.cuda_present(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("type_name", ["FLOAT32", "FLOAT16"])
@pytest.mark.parametrize(
    "name, window, strides, pad, extra",
    [
        ("MaxPooling", (3, 3), (1, 1), 1, {}),
        ("MaxPooling2", (3, 3), (2, 2), 1, {"dilations": (1, 1)}),  # ResNet's
        ("MaxPooling", (7, 7), (1, 1), 3, {}),
        ("AveragePooling", (3, 3), (1, 1), 1, {"include_padding": False}),
        ("AveragePooling", (3, 3), (1, 1), 1, {"include_padding": True}),
        ("AveragePooling1", (5, 5), (2, 2), 2, {"include_padding": False, "dilations": (1, 1)}),
    ],
)
def test_gpu_fast_path_matches_lax(type_name, name, window, strides, pad, extra):
    extra = dict(extra)
    dilations = extra.pop("dilations", None)
    shape = (4, 24, 75, 133)
    cls = getattr(dml, f"{name}OperatorDesc")
    d = _desc(cls, shape, type_name, window, strides, (pad, pad), (pad, pad), dilations, **extra)
    assert fastpath.select(d) is not None
    x = _input(shape, d.input_tensor.dtype, seed=3)
    got = jax.jit(dml.compile_operator(d).fn)(x)
    want = jax.jit(dml.compile_operator(d, fast_paths=False).fn)(x)
    _same(got, want)


@pytest.mark.skipif(not fastpath.cuda_present(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("type_name", ["FLOAT32", "FLOAT16"])
def test_gpu_comparison_fails_on_a_planted_kernel_fault(monkeypatch, type_name):
    """The GPU comparison above can fail: the kernel's output with one element moved by one
    unit in the last place (a planted fault) no longer passes ``_same`` against the lax
    lowering, while the kernel as it is does."""
    from dml_jax import compile as compiled

    shape = (4, 24, 75, 133)
    d = _desc(dml.MaxPoolingOperatorDesc, shape, type_name, (3, 3), (1, 1), (1, 1), (1, 1), None)
    x = _input(shape, d.input_tensor.dtype, seed=5)
    want = jax.jit(dml.compile_operator(d, fast_paths=False).fn)(x)
    original = K.pool_kernel

    def faulty(*args, **kwargs):
        y = original(*args, **kwargs)
        corner = (1, 5, 7, 11)
        return y.at[corner].set(jax.numpy.nextafter(y[corner], jax.numpy.inf).astype(y.dtype))

    compiled._compile_cached.cache_clear()
    try:
        _same(jax.jit(dml.compile_operator(d).fn)(x), want)  # the kernel as it is
        monkeypatch.setattr(K, "pool_kernel", faulty)
        compiled._compile_cached.cache_clear()
        got = jax.jit(dml.compile_operator(d).fn)(x)
        with pytest.raises(AssertionError):
            _same(got, want)
    finally:
        compiled._compile_cached.cache_clear()


@pytest.mark.parametrize(
    "window, strides, start, end, dilations, size",
    [((3, 3), (1, 1), (1, 1), (1, 1), (1, 1), (9, 11)), ((3, 2), (2, 1), (1, 0), (2, 1), (2, 2), (10, 13)),
     ((5, 5), (1, 3), (2, 4), (2, 0), (1, 1), (8, 7)), ((2, 4), (1, 1), (0, 3), (1, 3), (3, 1), (6, 6))],
)  # fmt: skip
def test_window_counts_give_the_lax_divisor(window, strides, start, end, dilations, size):
    """The kernel's in-kernel divisor (window rows on the input x window columns on it, at
    least 1) is the lax lowering's ``average_divisor`` for IncludePadding FALSE."""
    plan = P.WindowPlan(window, strides, dilations, start, end, size)
    v = K.plan((1, 1, *size), np.float32, plan, True)
    rows, cols = K.window_counts(v)
    want = np.broadcast_to(P.average_divisor(plan, False), plan.outputs)
    np.testing.assert_array_equal(np.maximum(np.outer(rows, cols), 1), want)
