"""The minor-axis SCATTER kernel (dml_jax.kernels.scatter) against the lax lowering, bit for bit.

In Pallas interpret mode (any machine): negative, out-of-range and heavily repeated indices
(the last update wins), INT32 and UINT32 indices, 4-, 2- and 1-byte data, with tile sizes
monkeypatched down so lines, copy tiles and update steps end inside their tiles. On a CUDA
machine also the compiled Triton kernel through the operator's fast path.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

import dml_jax as dml
from dml_jax import fastpath
from dml_jax.kernels import mosaic
from dml_jax.kernels import scatter as K
from dml_jax.ops.scatter import ScatterOperatorDesc, lower_scatter

pytestmark = pytest.mark.kernel_matrix


def _desc(shape, length, dtype, index_type):
    name = np.dtype(dtype).name.upper()
    ushape = tuple(shape[:-1]) + (length,)
    x, u = dml.TensorDesc(name, shape), dml.TensorDesc(name, ushape)
    return ScatterOperatorDesc(x, dml.TensorDesc(index_type, ushape), u, x, axis=len(shape) - 1)


def _inputs(d, low, high, seed=0):
    """Input, indices in [low, high) and updates for ``d``; floats include NaN and -0.0."""
    rng = np.random.default_rng(seed)
    x_t, i_t, u_t = d.input_tensor, d.indices_tensor, d.updates_tensor
    x = rng.integers(-100, 100, x_t.sizes).astype(x_t.dtype)
    u = rng.integers(-100, 100, u_t.sizes).astype(u_t.dtype)
    if np.dtype(x_t.dtype).kind == "f":
        u.reshape(-1)[:3] = [np.nan, -0.0, np.inf]
    i = rng.integers(low, high, i_t.sizes).astype(i_t.dtype)
    return x, i, u


def _bits(a):
    return np.asarray(a).view(f"u{np.asarray(a).dtype.itemsize}")


# (shape, updates per line, data type, index type, index range, warps, owners, step, vec, copy
# elements): lines per program 32 * warps / owners, the last program's partly past the end;
# copy tiles of 8 columns end inside w = 37, steps end inside the updates (50 in steps of 4,
# 20 in steps of 4 loaded as two vectors of 2).
CASES = [
    ((19, 37), 50, "float32", "INT32", (-40, 40), 1, 4, 4, 4, 64),
    ((3, 11, 9), 20, "float16", "UINT32", (0, 12), 1, 2, 4, 2, 64),
    ((70, 3), 7, "int8", "INT32", (-4, 3), 1, 1, 2, 1, 32),
]


@pytest.mark.parametrize(
    "shape, length, dtype, index_type, bounds, warps, owners, step, vec, copy", CASES
)
def test_kernel_interpret_matches_lax(
    monkeypatch, shape, length, dtype, index_type, bounds, warps, owners, step, vec, copy
):
    for name, value in (("WARPS", warps), ("OWNERS", owners), ("STEP", step), ("VEC", vec)):
        monkeypatch.setattr(K, name, value)
    monkeypatch.setattr(K, "COPY_ELEMENTS", copy)
    monkeypatch.setattr(K, "MIN_PROGRAMS", 1)
    d = _desc(shape, length, dtype, index_type)
    v = K.plan(shape, d.updates_tensor.sizes, len(shape) - 1, dtype, d.indices_tensor.dtype)
    assert v is not None and v.programs > 1 and v.owners == owners
    x, i, u = _inputs(d, *bounds)
    got = jax.jit(lambda x, i, u: K.scatter_kernel(x, i, u, v, interpret=True))(x, i, u)
    (want,) = jax.jit(lambda x, i, u: lower_scatter(d, x, i, u))(x, i, u)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(_bits(got), _bits(want))


def test_plan_declines_what_lax_keeps():
    big, ups = (16, 64, 64, 256), (16, 64, 64, 128)
    assert K.plan(big, ups, 3, np.float32, np.int32) is not None
    assert K.plan(big, ups, 2, np.float32, np.int32) is None  # not the minor axis
    assert K.plan(big, ups, 3, np.float64, np.int32) is None  # 8-byte data
    assert K.plan(big, ups, 3, np.float32, np.int64) is None  # 8-byte indices
    assert K.plan((4, 256), (4, 128), 1, np.float32, np.int32) is None  # too few programs
    assert K.plan(big, big[:3] + (0,), 3, np.float32, np.int32) is None  # no updates


@pytest.mark.skipif(not fastpath.cuda_present(), reason="needs a CUDA GPU")
@pytest.mark.parametrize(
    "shape, length, dtype, index_type, bounds",
    [  # 73728 lines: enough programs for any tile the plan picks
        ((4, 96, 192, 256), 128, "float32", "INT32", (-100, 100)),  # the bench's indices
        ((4, 96, 192, 40), 200, "float32", "INT32", (-44, 44)),  # more updates than positions
        ((73728, 77), 300, "float16", "UINT32", (0, 80)),
        ((3, 24576, 40), 64, "int8", "INT32", (-3, 3)),  # a few positions, many repeats
    ],
)
def test_gpu_fast_path_matches_lax(shape, length, dtype, index_type, bounds):
    d = _desc(shape, length, dtype, index_type)
    assert fastpath.select(d) is not None
    x, i, u = _inputs(d, *bounds, seed=3)
    got = jax.jit(dml.compile_operator(d).fn)(x, i, u)
    want = jax.jit(dml.compile_operator(d, fast_paths=False).fn)(x, i, u)
    np.testing.assert_array_equal(_bits(got), _bits(want))


# The shared-memory form (Mosaic GPU, Hopper): the plan on any machine, the kernel on a Hopper
# GPU, bit for bit against the lax lowering.

BENCH, BENCH_UPDATES = (16, 256, 256, 256), (16, 256, 256, 128)


def test_smem_plan_blocks_and_refusals(monkeypatch):
    monkeypatch.setattr(mosaic, "hopper", lambda: True)
    v = K.smem_plan(BENCH, BENCH_UPDATES, 3, np.float32, np.int32)
    assert (v.lines, v.owners, v.steps) == (32, 4, K.SMEM_STEPS)
    assert v.programs * v.steps * v.lines == v.a == 16 * 256 * 256
    # Lines a multiple of 16, not 32: blocks of 16 lines, 8 threads a line.
    assert K.smem_plan((3, 258, 120, 256), (3, 258, 120, 128), 3, np.float16, np.uint32).lines == 16
    # Blocks that do not fit the shared memory at 32 lines take fewer.
    assert (
        K.smem_plan((16, 256, 256, 1024), (16, 256, 256, 256), 3, np.float32, np.int32).lines < 32
    )
    refused = [
        (BENCH, BENCH_UPDATES, 2, np.float32, np.int32),  # not the minor axis
        (BENCH, BENCH_UPDATES, 3, np.int8, np.int32),  # 1-byte data
        (BENCH, BENCH_UPDATES, 3, np.float64, np.int32),  # 8-byte data
        (BENCH, BENCH_UPDATES, 3, np.float32, np.int64),  # 8-byte indices
        (BENCH, BENCH[:3] + (126,), 3, np.float32, np.int32),  # updates not a multiple of 4
        (BENCH, BENCH[:3] + (12,), 3, np.float16, np.int32),  # 2-byte rows not 16-byte units
        (BENCH[:3] + (250,), BENCH_UPDATES, 3, np.float32, np.int32),  # input rows neither
        ((4, 256), (4, 128), 1, np.float32, np.int32),  # too few programs
        ((33795, 256), (33795, 128), 1, np.float32, np.int32),  # lines odd
    ]
    for case in refused:
        assert K.smem_plan(*case) is None, case
    monkeypatch.setattr(mosaic, "hopper", lambda: False)
    assert K.smem_plan(BENCH, BENCH_UPDATES, 3, np.float32, np.int32) is None


def test_smem_form_is_chosen_first_on_hopper(monkeypatch):
    d = _desc((16, 256, 256, 256), 128, "float32", "INT32")
    monkeypatch.setattr(mosaic, "hopper", lambda: True)
    assert fastpath.select(d).name == "smem"
    monkeypatch.setattr(mosaic, "hopper", lambda: False)
    assert fastpath.select(d).name == "kernel"  # the Triton kernel elsewhere


@pytest.mark.skipif(not mosaic.hopper(), reason="needs a Hopper GPU (TMA) and jax 0.11")
@pytest.mark.parametrize(
    "shape, length, dtype, index_type, bounds, lines",
    [
        ((4, 96, 96, 256), 128, "float32", "INT32", (-100, 100), 32),  # the bench's indices
        ((4, 96, 96, 256), 128, "float32", "INT32", (-6, 6), 32),  # many repeats
        ((4, 96, 96, 64), 200, "float32", "INT32", (-80, 80), 32),  # out of range both sides
        ((4, 96, 96, 64), 200, "int32", "UINT32", (0, 70), 16),
        ((8, 96, 96, 128), 64, "float16", "INT32", (-140, 140), 32),
        ((8, 96, 96, 128), 64, "uint16", "UINT32", (0, 130), 8),
    ],
)
def test_smem_kernel_matches_lax(monkeypatch, shape, length, dtype, index_type, bounds, lines):
    monkeypatch.setattr(K, "SMEM_LINES", lines)
    d = _desc(shape, length, dtype, index_type)
    v = K._smem_plan_of(d)
    assert v is not None and v.lines == lines and fastpath.select(d).name == "smem"
    x, i, u = _inputs(d, *bounds, seed=5)
    got = jax.jit(dml.compile_operator(d).fn)(x, i, u)
    want = jax.jit(dml.compile_operator(d, fast_paths=False).fn)(x, i, u)
    np.testing.assert_array_equal(_bits(got), _bits(want))


@pytest.mark.skipif(not mosaic.hopper(), reason="needs a Hopper GPU (TMA) and jax 0.11")
def test_smem_kernel_under_vmap():
    # vmap batches the shared-memory form itself (Mosaic GPU's rule adds a grid axis)
    d = _desc((4, 96, 96, 256), 128, "float32", "INT32")
    assert fastpath.select(d).name == "smem"
    fn = dml.compile_operator(d).fn
    x, i, u = _inputs(d, -100, 100, seed=6)
    xs, us = np.stack([x, -x]), np.stack([u, u * 2])
    batched = jax.jit(jax.vmap(fn, in_axes=(0, None, 0)))(xs, i, us)
    for k in range(2):
        np.testing.assert_array_equal(_bits(batched[k]), _bits(jax.jit(fn)(xs[k], i, us[k])))
