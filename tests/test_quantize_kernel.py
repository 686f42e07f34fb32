"""The quantization kernel (dml_jax.kernels.quantize): in Pallas interpret mode (any machine)
against the lax lowering bit for bit, with halfway quotients, NaN, infinities, signed zeros, a
zero and a negative scale, both 8-bit types and float16 input; on a CUDA machine the compiled
kernel (PTX ``div.rn.f32`` and ``cvt.rni``) through the operators' fast paths against NumPy.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import dml_jax as dml
from dml_jax import fastpath
from dml_jax.enums import DataType
from dml_jax.kernels import quantize as K
from dml_jax.ops._quant import quantize

pytestmark = pytest.mark.kernel_matrix


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
                            None if zp is None else jnp.asarray(zp), v, t,
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
    bigger = (32, 64, 32, 32)  # per tensor: one channel of 2M elements, 512 programs
    assert fastpath.select(_linear(bigger, strides=(0, 0, 0, 0))) is not None
    assert fastpath.select(_blocked(bigger, (1, 1, 1, 1))) is not None
    assert fastpath.select(_blocked(big, (1, 64, 1, 16))) is None  # blocks: lax
    assert fastpath.select(_linear((1, 4, 2, 2))) is None  # too few programs


def _numpy_quantize(x, scale, zero, out_type):
    """The documented formula in NumPy: float32 division (correctly rounded), half to even."""
    info = np.iinfo(np.dtype(out_type.lower()))
    q = np.round(x.astype(np.float32) / scale) + zero.astype(np.float32)
    q = np.clip(q, info.min, info.max)
    q = np.where(np.isnan(x), zero.astype(np.float32), q)
    return q.astype(out_type.lower())


@pytest.mark.skipif(not fastpath.cuda_present(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("out_type", ["UINT8", "INT8"])
@pytest.mark.parametrize("which", ["linear", "quantize", "linear-per-tensor"])
def test_gpu_fast_path_matches_numpy(which, out_type):
    """On the GPU the kernel is compared with NumPy: XLA's own float32 division there is not
    always correctly rounded (module docstring), so the lax program may differ at a few
    halfway-adjacent quotients."""
    shape = (32, 64, 32, 32)
    view = (1, 64, 1, 1)
    if which == "linear-per-tensor":
        d = _linear(shape, out_type, strides=(0, 0, 0, 0))
        view = (1, 1, 1, 1)
    elif which == "linear":
        d = _linear(shape, out_type)
    else:
        d = _blocked(shape, view, out_type)
    assert fastpath.select(d) is not None
    rng = np.random.default_rng(2)
    scale = rng.uniform(0.01, 0.1, view).astype(np.float32)
    x = _data(rng, shape, scale, np.float32)
    info = np.iinfo(np.dtype(out_type.lower()))
    zp = rng.integers(info.min, int(info.max) + 1, view).astype(out_type.lower())
    if which.startswith("linear"):  # logical arrays of the stride-0 descs: broadcast
        args = (x, np.broadcast_to(scale, shape), np.broadcast_to(zp, shape))
    else:
        args = (x, scale, zp)
    got = dml.compile_operator(d).fn(*args)
    np.testing.assert_array_equal(np.asarray(got), _numpy_quantize(x, scale, zp, out_type))


@pytest.mark.parametrize(
    "which", ["linear", "quantize", "linear-per-tensor", "quantize-per-tensor"]
)
def test_interpret_through_the_descriptors(monkeypatch, which):
    """The fast path's own reading of each descriptor (the axis, the parameter vectors taken
    from the logical arrays) in interpret mode, against the operator's lax lowering."""
    from dml_jax.ops import quantize as Q

    monkeypatch.setattr(K, "MIN_PROGRAMS", 1)
    monkeypatch.setattr(K, "TILE_ELEMENTS", 64)
    shape = (2, 6, 8, 32)
    view = (1, 1, 1, 1) if which.endswith("per-tensor") else (1, 6, 1, 1)
    if which.startswith("linear"):
        d = _linear(shape, strides=(0, 1, 0, 0) if view[1] > 1 else (0, 0, 0, 0))
    else:
        d = _blocked(shape, view)
    rng = np.random.default_rng(5)
    scale = rng.uniform(0.01, 0.1, view).astype(np.float32)
    x = _data(rng, shape, scale, np.float32)
    zp = rng.integers(0, 256, view).astype(np.uint8)
    if which.startswith("linear"):
        args = (x, np.broadcast_to(scale, shape), np.broadcast_to(zp, shape))
        lower = Q.lower_quantize_linear
    else:
        args = (x, scale, zp)
        lower = Q.lower_quantize
    v, axis = K._view(d)
    assert (axis is None) == which.endswith("per-tensor")
    arrays = [jnp.asarray(a) for a in args]
    got = K.quantize_kernel(arrays[0], K._vector(arrays[1], axis), K._vector(arrays[2], axis), v,
                            d.output_tensor.data_type, interpret=True)  # fmt: skip
    (want,) = lower(d, *arrays)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


@pytest.mark.parametrize("out_type", ["INT4", "UINT4"])
def test_four_bit_outputs_clamp_to_their_own_range(monkeypatch, out_type):
    """INT4 / UINT4 are computed in a byte (int8 / uint8) and returned as jnp.int4 / jnp.uint4:
    the kernel clamps to the 4-bit range, as the lax lowering does, not to the byte's."""
    from dml_jax.ops import quantize as Q

    monkeypatch.setattr(K, "MIN_PROGRAMS", 1)
    shape = (2, 6, 8, 32)
    x = dml.TensorDesc("FLOAT32", shape)
    q = x.like(data_type=out_type)
    view = (1, 6, 1, 1)
    d = dml.QuantizeOperatorDesc(x, "SCALE_ZERO_POINT", [x.like(sizes=view), q.like(sizes=view)], q)
    dml.validate(d)
    rng = np.random.default_rng(7)
    scale = rng.uniform(0.01, 0.1, view).astype(np.float32)
    data = (rng.standard_normal(shape) * 3).astype(np.float32)  # quotients far past 4 bits
    lo, hi = DataType[out_type].integer_range
    zp = rng.integers(lo, hi + 1, view).astype(np.dtype(x.like(data_type=out_type).dtype))
    v, axis = K._view(d)
    got = K.quantize_kernel(jnp.asarray(data), K._vector(jnp.asarray(scale), axis),
                            K._vector(jnp.asarray(zp), axis), v, d.output_tensor.data_type,
                            interpret=True)  # fmt: skip
    (want,) = Q.lower_quantize(d, jnp.asarray(data), jnp.asarray(scale), jnp.asarray(zp))
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert got.dtype == q.dtype == want.dtype  # jnp.int4 / jnp.uint4
    assert int(np.max(np.asarray(got))) == hi and int(np.min(np.asarray(got))) == lo


def test_kernel_is_standalone():
    """In a graph the lax lowering fuses into the quantize's producer (the QDQ ResNet-50 on an
    H200: 9.23 ms a call with this kernel in its graph, 6.20 without), so the kernel is only
    for nodes without neighbours."""
    for op in ("ELEMENT_WISE_QUANTIZE_LINEAR", "QUANTIZE"):
        (path,) = fastpath.fast_paths(f"DML_OPERATOR_{op}")
        assert path.name == "kernel" and path.standalone
