"""The per-axis quantization kernel (dml_jax.kernels.quantize) against the lax lowering, bit for
bit: in Pallas interpret mode (any machine) with halfway quotients, NaN, infinities, signed
zeros, a zero and a negative scale, both 8-bit types and float16 input; on a CUDA machine also
the compiled kernel (PTX ``div.rn.f32`` and ``cvt.rni``) through the operators' fast paths.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import dml_jax as dml
from dml_jax import fastpath
from dml_jax.kernels import quantize as K
from dml_jax.ops._quant import quantize
from dml_jax.enums import DataType


def _data(rng, shape, scale, dtype):
    """Values whose quotients by ``scale`` (per channel, axis 1) are often exactly halfway
    between integers, plus NaN, +-inf, +-0 and values far past the type's range."""
    steps = rng.integers(-300, 300, shape) + rng.choice([0.0, 0.5, 0.25], shape)
    x = (steps * scale).astype(np.float32)
    flat = x.reshape(-1)
    flat[:6] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 6e4]
    return x.astype(dtype)


@pytest.mark.parametrize("out_type", ["UINT8", "INT8"])
@pytest.mark.parametrize("in_dtype", [np.float32, np.float16])
@pytest.mark.parametrize("zero", [True, False], ids=["zero-point", "no-zero-point"])
def test_interpret_matches_lax(monkeypatch, out_type, in_dtype, zero):
    monkeypatch.setattr(K, "TILE_ELEMENTS", 16)  # several tiles a channel, the last partial
    monkeypatch.setattr(K, "MIN_PROGRAMS", 1)
    monkeypatch.setattr(K, "MIN_RUN", 1)
    shape = (2, 5, 3, 7)
    rng = np.random.default_rng(1)
    t = DataType[out_type]
    scale = np.array([0.5, 0.03, 0.0, -2.0, 1.7], np.float32)  # 0 and a negative scale
    x = _data(rng, shape, scale.reshape(1, 5, 1, 1), in_dtype)
    info = np.iinfo(t.numpy_dtype)
    zp = rng.integers(info.min, int(info.max) + 1, 5).astype(t.numpy_dtype) if zero else None
    v = K.plan(shape, 1, in_dtype, t.numpy_dtype)
    assert v is not None and v.tiles == 2
    got = K.quantize_kernel(jnp.asarray(x), jnp.asarray(scale),
                            None if zp is None else jnp.asarray(zp), v, t.numpy_dtype,
                            interpret=True)  # fmt: skip
    bshape = (1, 5, 1, 1)
    want = quantize(
        jnp.asarray(x).astype(jnp.float32),
        jnp.asarray(scale).reshape(bshape),
        None if zp is None else jnp.asarray(zp).reshape(bshape),
        t,
        t,
    )
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def _linear(shape, out_type="UINT8", strides=(0, 1, 0, 0)):
    x = dml.TensorDesc("FLOAT32", shape)
    q = x.like(data_type=out_type)
    return dml.ElementWiseQuantizeLinearOperatorDesc(
        x, x.like(strides=strides), q.like(strides=strides), q
    )


def _blocked(shape, sizes, out_type="UINT8"):
    x = dml.TensorDesc("FLOAT32", shape)
    q = x.like(data_type=out_type)
    params = [x.like(sizes=sizes), q.like(sizes=sizes)]
    return dml.QuantizeOperatorDesc(x, "SCALE_ZERO_POINT", params, q)


def test_fast_path_takes_per_axis_parameters_only():
    big = (8, 64, 32, 32)
    assert fastpath.select(_linear(big)) is not None
    assert fastpath.select(_blocked(big, (1, 64, 1, 1))) is not None
    assert fastpath.select(_blocked(big, (1, 1, 1, 32))) is None  # the last axis: short runs
    assert fastpath.select(_linear(big, strides=(0, 0, 0, 0))) is None  # per tensor: lax
    assert fastpath.select(_blocked(big, (1, 1, 1, 1))) is None
    assert fastpath.select(_blocked(big, (1, 64, 1, 16))) is None  # blocks: lax
    assert fastpath.select(_linear((1, 4, 2, 2))) is None  # too few programs


@pytest.mark.skipif(not fastpath.cuda_present(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("out_type", ["UINT8", "INT8"])
@pytest.mark.parametrize("which", ["linear", "quantize"])
def test_gpu_fast_path_matches_lax(which, out_type):
    shape = (8, 64, 32, 32)
    d = _linear(shape, out_type) if which == "linear" else _blocked(shape, (1, 64, 1, 1), out_type)
    rng = np.random.default_rng(2)
    scale = rng.uniform(0.01, 0.1, 64).astype(np.float32)
    x = _data(rng, shape, scale.reshape(1, 64, 1, 1), np.float32)
    info = np.iinfo(np.dtype(out_type.lower()))
    zp = rng.integers(info.min, int(info.max) + 1, 64).astype(out_type.lower())
    if which == "linear":  # logical arrays of the stride-0 descs: broadcast
        args = (x, np.broadcast_to(scale.reshape(1, 64, 1, 1), shape),
                np.broadcast_to(zp.reshape(1, 64, 1, 1), shape))  # fmt: skip
    else:
        args = (x, scale.reshape(1, 64, 1, 1), zp.reshape(1, 64, 1, 1))
    got = dml.compile_operator(d).fn(*args)[0]
    want = dml.compile_operator(d, fast_paths=False).fn(*args)[0]
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
