"""The write-only kernels (dml_jax.kernels.generate: FILL_VALUE_CONSTANT, minor-axis ONE_HOT)
against the lax lowerings, bit for bit: in Pallas interpret mode (any machine) and, on a CUDA
machine, through the operators' fast paths, alone and in a graph."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dml_jax as dml
from dml_jax import fastpath
from dml_jax.kernels import generate as K

pytestmark = pytest.mark.kernel_matrix

T = dml.TensorDesc


def _bits(a) -> np.ndarray:
    return np.asarray(a).view(np.uint8)


@pytest.mark.parametrize(
    "dtype, value",
    [
        (np.float32, -0.0),
        (np.float32, np.float32(np.nan)),
        (np.float16, 65504.0),
        (np.int8, -128),
        (np.uint16, 65535),
        (np.uint32, 2**32 - 1),
    ],
)
def test_fill_kernel_interpret_writes_the_bits_of_value(dtype, value):
    shape = (3, 5, 1001)  # not a multiple of the block
    got = K.fill_kernel(shape, dtype, value, interpret=True)
    want = np.full(shape, value, dtype)
    assert got.shape == shape and got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(_bits(got), _bits(want))


def test_fill_kernel_keeps_a_nan_payload():
    payload = np.array([0x7FC00123], np.uint32).view(np.float32)[0]
    got = K.fill_kernel((4, 4096), np.float32, payload, interpret=True)
    assert set(np.asarray(got).view(np.uint32).ravel().tolist()) == {0x7FC00123}


def _one_hot_reference(index, width, on, off, dtype):
    """ONE_HOT from the page: OnValue where the (end-counted) index names the position."""
    i = np.where(index < 0, index + width, index)
    out = np.full((index.size, width), off, dtype)
    for r, k in enumerate(i.ravel()):
        if 0 <= k < width:
            out[r, k] = on
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8, np.uint32])
@pytest.mark.parametrize("width, tile_bytes", [(1000, 16384), (37, 64), (4096, 1024)])
def test_one_hot_kernel_interpret_matches_reference(dtype, width, tile_bytes, monkeypatch):
    monkeypatch.setattr(K, "ONE_HOT_TILE_BYTES", tile_bytes)  # column tiles, partial row tiles
    monkeypatch.setattr(K, "MIN_ELEMENTS", 1)
    rows = 23
    v = K.one_hot_plan((rows, width), 1, dtype)
    assert v is not None and v.cols * v.rows * np.dtype(dtype).itemsize <= max(tile_bytes, 4096)
    rng = np.random.default_rng(1)
    raw = rng.integers(-width - 3, width + 3, rows).astype(np.int32)
    index = np.where((raw >= -width) & (raw < width), np.where(raw < 0, raw + width, raw), -1)
    on, off = np.asarray(3, dtype), np.asarray(-0.0 if dtype != np.uint32 else 9, dtype)
    got = K.one_hot_kernel(jnp.asarray(index), jnp.asarray(on), jnp.asarray(off), v, dtype, True)
    want = _one_hot_reference(raw, width, on, off, dtype)
    np.testing.assert_array_equal(_bits(got), _bits(want))


def test_plans_decline_what_lax_keeps():
    assert K.one_hot_plan((1024, 1024), 0, np.float32) is None  # not the minor axis
    assert K.one_hot_plan((1024, 1024), 1, np.int64) is None  # 8-byte type
    assert K.one_hot_plan((4, 1024), 1, np.float32) is None  # too small to matter
    assert K.one_hot_plan((2048, 1024), 1, np.float16) is not None
    fill = dml.FillValueConstantOperatorDesc(T("FLOAT64", (2048, 1024)), "FLOAT64", 1.0)
    assert not K._fill_applies(fill)
    fill = dml.FillValueConstantOperatorDesc(T("INT16", (2048, 1024)), "INT16", 7)
    assert K._fill_applies(fill)


def test_kernels_are_registered():
    for op in ("FILL_VALUE_CONSTANT", "ONE_HOT"):
        (path,) = fastpath.fast_paths(f"DML_OPERATOR_{op}")
        assert path.name == "kernel" and path.standalone  # in a graph the lax form fuses


needs_cuda = pytest.mark.skipif(not fastpath.cuda_present(), reason="needs a CUDA GPU")


@needs_cuda
@pytest.mark.parametrize("type_name, value", [("FLOAT32", -0.0), ("FLOAT16", 1.5), ("INT8", -7)])
def test_gpu_fill_fast_path_matches_lax(type_name, value):
    desc = dml.FillValueConstantOperatorDesc(T(type_name, (64, 1024, 33)), type_name, value)
    assert fastpath.select(desc) is not None
    got = jax.jit(dml.compile_operator(desc).fn)()
    want = jax.jit(dml.compile_operator(desc, fast_paths=False).fn)()
    np.testing.assert_array_equal(_bits(got), _bits(want))


@needs_cuda
@pytest.mark.parametrize("type_name", ["FLOAT32", "FLOAT16", "UINT8"])
def test_gpu_one_hot_fast_path_matches_lax(type_name):
    out = T(type_name, (8, 256, 1000))
    desc = dml.OneHotOperatorDesc(T("INT32", (8, 256, 1)), T(type_name, (1, 1, 2)), out, axis=2)
    assert fastpath.select(desc) is not None
    rng = np.random.default_rng(2)
    index = rng.integers(-1003, 1003, (8, 256, 1)).astype(np.int32)
    values = np.array([0, 5], out.dtype).reshape(1, 1, 2)
    got = jax.jit(dml.compile_operator(desc).fn)(index, values)
    want = jax.jit(dml.compile_operator(desc, fast_paths=False).fn)(index, values)
    np.testing.assert_array_equal(_bits(got), _bits(want))


@needs_cuda
def test_gpu_fill_in_a_graph():
    """An operator without inputs feeding another inside one program: there the kernel stands
    aside (standalone) and XLA folds the constant into the addition."""
    t = T("FLOAT32", (2048, 1024))
    fill = dml.FillValueConstantOperatorDesc(t, "FLOAT32", 2.0)
    add = dml.ElementWiseAddOperatorDesc(t, t, t)
    graph = dml.GraphDesc(
        input_count=1,
        output_count=1,
        nodes=(fill, add),
        input_edges=(dml.InputGraphEdge(0, 1, 0),),
        output_edges=(dml.OutputGraphEdge(1, 0, 0),),
        intermediate_edges=(dml.IntermediateGraphEdge(0, 0, 1, 1),),
    )
    assert fastpath.select(fill, fusible=True) is None
    x = np.arange(2048 * 1024, dtype=np.float32).reshape(2048, 1024)
    np.testing.assert_array_equal(np.asarray(dml.compile_graph(graph)(x)), x + 2)
