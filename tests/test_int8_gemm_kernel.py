"""The int8 GEMM kernel (dml_jax.kernels.int8_gemm) against the lax lowering's integer product,
bit for bit.

In Pallas interpret mode (any machine): plain products, zero points per tensor, per row and per
column on either side, batched and shared operands, values at the ends of int8 (so the zero-point
terms wrap as int32 does). On a CUDA machine also the three operators through their fast path,
against the same operators with the GPU paths off.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import dml_jax as dml
from dml_jax import fastpath
from dml_jax.kernels import int8_gemm as K
from dml_jax.ops._quant import zero_point_product as _zero_point_product

pytestmark = pytest.mark.kernel_matrix


def _int8(rng, shape):
    x = rng.integers(-128, 128, shape).astype(np.int8)
    x.reshape(-1)[:3] = [-128, 127, -128]  # the ends of the type
    return x


def _zero(rng, shape):
    return None if shape is None else rng.integers(-300, 300, shape).astype(np.int32)


# (x shape, y shape, x zero point shape, y zero point shape)
CASES = [
    ((128, 256), (256, 128), None, None),
    ((256, 128), (128, 256), (1, 1), (1, 1)),  # per tensor
    ((128, 384), (384, 256), (128, 1), None),  # per row of A only
    ((128, 256), (256, 128), None, (1, 128)),  # per column of B only
    ((2, 128, 256), (2, 256, 128), (2, 128, 1), (1, 1, 128)),  # batched, both
    ((3, 128, 128), (1, 128, 256), (1, 1, 1), (1, 1, 256)),  # B shared by the batch
    ((1, 128, 128), (2, 128, 128), (1, 128, 1), None),  # A shared by the batch
]


@pytest.mark.parametrize("x_shape, y_shape, xz_shape, yz_shape", CASES)
def test_interpret_matches_lax(x_shape, y_shape, xz_shape, yz_shape):
    rng = np.random.default_rng(len(x_shape) * 7 + x_shape[-1])
    x, y = _int8(rng, x_shape), _int8(rng, y_shape)
    xz, yz = _zero(rng, xz_shape), _zero(rng, yz_shape)
    assert K.plan(x.shape, y.shape) is not None
    got = K.int8_product(jnp.asarray(x), xz, jnp.asarray(y), yz, interpret=True)
    batch = np.broadcast_shapes(x_shape[:-2], y_shape[:-2])  # lax's dot wants equal batches
    xb, yb = np.broadcast_to(x, batch + x_shape[-2:]), np.broadcast_to(y, batch + y_shape[-2:])
    want = _zero_point_product(jnp.asarray(xb), xz, jnp.asarray(yb), yz)
    assert got.dtype == jnp.int32 and got.shape == want.shape
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    # and the exact integers (no sum here leaves int32)
    a = x.astype(np.int64) - (0 if xz is None else xz)
    b = y.astype(np.int64) - (0 if yz is None else yz)
    np.testing.assert_array_equal(np.asarray(got), a @ b)


def test_plan_declines_what_lax_keeps():
    assert K.plan((128, 128), (128, 128)) is not None
    assert K.plan((100, 128), (128, 128)) is None  # M not a multiple of the block
    assert K.plan((128, 128), (128, 200)) is None  # N
    assert K.plan((128, 192), (192, 128)) is None  # K
    assert K.plan((128, 128), (256, 128)) is None  # K differs
    assert K.plan((128, K.MAX_K * 2), (K.MAX_K * 2, 128)) is None  # partial sums could overflow
    assert K.plan((2, 1, 128, 128), (1, 3, 128, 128)) is None  # broadcast in part on each side
    assert K.plan((2, 3, 128, 128), (1, 1, 128, 128)) is not None


def _desc(name, m=256, k=256, n=128, zero=True):
    T = dml.TensorDesc
    # INTEGER_TO_FLOAT takes one type for both operands; the others mix INT8 and UINT8.
    b_type = "INT8" if name == "MatrixMultiplyIntegerToFloat" else "UINT8"
    fields = {"a_tensor": T("INT8", (1, 1, m, k)), "b_tensor": T(b_type, (1, 1, k, n))}
    if zero:
        fields["a_zero_point_tensor"] = T("INT8", (1, 1, m, 1))
        fields["b_zero_point_tensor"] = T(b_type, (1, 1, 1, n))
    if name == "MatrixMultiplyInteger":
        return dml.MatrixMultiplyIntegerOperatorDesc(
            output_tensor=T("INT32", (1, 1, m, n)), **fields
        )
    s = T("FLOAT32", (1, 1, 1, 1))
    fields.update(a_scale_tensor=s, b_scale_tensor=s)
    if name == "MatrixMultiplyIntegerToFloat":
        return dml.MatrixMultiplyIntegerToFloatOperatorDesc(
            output_tensor=T("FLOAT32", (1, 1, m, n)), **fields
        )
    return dml.QuantizedLinearMatrixMultiplyOperatorDesc(
        output_scale_tensor=s, output_tensor=T("UINT8", (1, 1, m, n)), **fields
    )


NAMES = ["MatrixMultiplyInteger", "MatrixMultiplyIntegerToFloat", "QuantizedLinearMatrixMultiply"]


@pytest.mark.parametrize("name", NAMES)
def test_fast_path_registration(name):
    d = _desc(name)
    assert fastpath.select(d) is not None
    assert fastpath.select(_desc(name, m=100)) is None  # M off the blocks: lax


def _inputs(d, rng):
    arrays = []
    for _, t in d.input_slots():
        if np.dtype(t.dtype).kind == "f":
            arrays.append(rng.uniform(0.01, 0.05, t.sizes).astype(t.dtype))
        else:
            info = np.iinfo(t.dtype)
            arrays.append(rng.integers(info.min, int(info.max) + 1, t.sizes).astype(t.dtype))
    return arrays


@pytest.mark.skipif(not fastpath.cuda_present(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("zero", [False, True], ids=["plain", "zero-points"])
@pytest.mark.parametrize("name", NAMES)
def test_gpu_fast_path_matches_lax(name, zero):
    d = _desc(name, zero=zero, m=512, k=1024, n=384)
    rng = np.random.default_rng(3)
    arrays = _inputs(d, rng)
    got = dml.compile_operator(d).fn(*arrays)
    want = dml.compile_operator(d, fast_paths=False).fn(*arrays)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


@pytest.mark.parametrize("xz_shape, yz_shape", [(None, None), ((3, 128, 1), (1, 1, 256))])
def test_a_shared_b_folds_the_batch_into_m(xz_shape, yz_shape):
    """B read by every batch index of A (a weight under a batched A, its desc broadcast): one
    product of {B * M, K} by the one {K, N} instead of a B per batch index; the same result."""
    import jax

    rng = np.random.default_rng(11)
    x, w = _int8(rng, (3, 128, 128)), _int8(rng, (128, 256))
    y = np.broadcast_to(w, (3, 128, 256))
    xz, yz = _zero(rng, xz_shape), _zero(rng, yz_shape)

    def kernel_operands(fn):
        eqns = jax.make_jaxpr(fn)(jnp.asarray(x), jnp.asarray(y)).eqns
        (call,) = [e for e in eqns if e.primitive.name == "pallas_call"]
        return [v.aval.shape for v in call.invars[:2]]

    def product(shared):
        return lambda a, b: K.int8_product(a, xz, b, yz, interpret=True, shared_b=shared)

    assert kernel_operands(product(True)) == [(1, 384, 128), (1, 256, 128)]
    assert kernel_operands(product(False)) == [(3, 128, 128), (3, 256, 128)]
    got = product(True)(jnp.asarray(x), jnp.asarray(y))
    want = _zero_point_product(jnp.asarray(x), xz, jnp.asarray(y), yz)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_shared_b_reads_the_descriptor():
    t = dml.TensorDesc
    a, y = t("INT8", (1, 3, 128, 128)), t("INT32", (1, 3, 128, 256))
    shared = t("INT8", (1, 3, 128, 256), strides=(0, 0, 256, 1))
    own = t("INT8", (1, 3, 128, 256))
    make = dml.MatrixMultiplyIntegerOperatorDesc
    assert K.shared_b(make(a, None, shared, None, y))
    assert not K.shared_b(make(a, None, own, None, y))
    single = t("INT8", (1, 1, 128, 128))
    assert not K.shared_b(make(single, None, t("INT8", (1, 1, 128, 256)), None,
                               t("INT32", (1, 1, 128, 256))))  # fmt: skip
