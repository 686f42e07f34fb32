"""dml_jax.kernels: kernel logic (Pallas interpreter) against the lax lowering, and dispatch.

The Triton kernels only compile on CUDA; here Pallas's interpreter runs the same kernel bodies on
small shapes that exercise masking (sizes that do not divide the tile), ties, NaN and infinities.
The dispatch tests check that a CPU-only process traces exactly the lax lowering, and that with a
CUDA backend present the program carries both branches and still computes the lax result on CPU.
benchmarks/gpu_kernels.py runs the compiled kernels on a GPU.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dml_jax as dml
from dml_jax.kernels import reduce as K
from dml_jax.ops.reduce import F, _reduce_value, arg_reduce


def _data(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "u":
        x = rng.integers(0, 4, size=shape).astype(dtype)
        x.reshape(-1)[:2] = np.iinfo(dtype).max  # the type's max is also the fill of ARGMIN
        return x
    x = rng.integers(-3, 4, size=shape).astype(dtype)  # few values: many ties
    if np.dtype(dtype).kind == "f":
        flat = x.reshape(-1)
        flat[rng.integers(0, flat.size, 4)] = np.nan
        flat[rng.integers(0, flat.size, 2)] = np.inf
        flat[rng.integers(0, flat.size, 2)] = -np.inf
    return x


# (shape, axes, tiling): inner layout (B > 1) and minor layout (B == 1), tiles that overhang.
LAYOUTS = [((3, 7, 5), (1,), K.Tiling(rows=4, cols=4)),
           ((6, 9), (1,), K.Tiling(rows=4, cols=4)),
           ((2, 3, 5, 4), (1, 2), K.Tiling(rows=4, cols=2))]


def _plan(shape, axes, tiling):
    a = int(np.prod(shape[: axes[0]]))
    r = int(np.prod([shape[i] for i in axes]))
    b = int(np.prod(shape[axes[-1] + 1:]))
    return K.Plan(a, r, b, tiling)


@pytest.mark.parametrize("shape, axes, tiling", LAYOUTS)
@pytest.mark.parametrize("dtype", ["float32", "int8", "uint32"])
def test_arg_kernel_interpret_matches_lax(shape, axes, tiling, dtype):
    x = jnp.asarray(_data(shape, dtype))
    p = _plan(shape, axes, tiling)
    for largest in (True, False):
        for last in (True, False):
            want = np.asarray(arg_reduce(x, axes, largest, last, jnp.int32)).reshape(-1)
            got = np.asarray(K.arg_reduce_kernel(x, p, largest, last, interpret=True))
            np.testing.assert_array_equal(got, want, err_msg=f"largest={largest} last={last}")


def test_arg_kernel_interpret_first_and_last_nan():
    x = np.array([[1.0, np.nan, 5.0, np.nan, 2.0, 5.0]] * 3, np.float32)
    p = K.Plan(3, 6, 1, K.Tiling(rows=4, cols=2))
    first = np.asarray(K.arg_reduce_kernel(jnp.asarray(x), p, True, False, interpret=True))
    last = np.asarray(K.arg_reduce_kernel(jnp.asarray(x), p, False, True, interpret=True))
    np.testing.assert_array_equal(first, [1, 1, 1])
    np.testing.assert_array_equal(last, [3, 3, 3])


@pytest.mark.parametrize("shape, axes, tiling", LAYOUTS[:2])
def test_lse_kernel_interpret_matches_lax(shape, axes, tiling):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    x.reshape(-1)[: shape[-1]] += 1000.0  # no overflow with large inputs
    x = jnp.asarray(x)
    want = np.asarray(_reduce_value(F.LOG_SUM_EXP, x, axes)).reshape(-1)
    got = np.asarray(K.log_sum_exp_kernel(x, _plan(shape, axes, tiling), interpret=True))
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_lse_kernel_interpret_special_values():
    x = np.zeros((4, 5), np.float32)
    x[0] = -np.inf
    x[1, 3] = np.inf
    x[2, 1] = np.nan
    x[3] = 1000.0
    got = np.asarray(K.log_sum_exp_kernel(
        jnp.asarray(x), K.Plan(4, 5, 1, K.Tiling(rows=2, cols=2)), interpret=True))
    assert got[0] == -np.inf and got[1] == np.inf and np.isnan(got[2])
    np.testing.assert_allclose(got[3], 1000 + np.log(5), rtol=1e-6)


def test_plan_layouts_and_coverage(monkeypatch):
    monkeypatch.setattr(K, "MIN_PROGRAMS", 1)
    p = K.plan((4, 6, 8, 10), (1, 2), np.float32, "arg")
    assert (p.a, p.r, p.b) == (4, 48, 10)
    # size-1 axes between reduced axes do not break adjacency
    p = K.plan((4, 6, 1, 8, 10), (1, 3), np.float32, "arg")
    assert (p.a, p.r, p.b) == (4, 48, 10)
    assert K.plan((4, 6, 8), (2,), np.float16, "lse").b == 1
    assert K.plan((4, 6, 8, 10), (0, 2), np.float32, "arg") is None  # not adjacent
    assert K.plan((4, 6), (1,), np.float64, "arg") is None  # 64-bit: lax
    assert K.plan((4, 6), (1,), np.int32, "lse") is None  # not a float
    for tiling in (K.plan((4096, 300), (1,), np.float32, "arg").tiling,
                   K.plan((64, 300, 5000), (1,), np.int8, "arg").tiling):
        assert tiling.rows & (tiling.rows - 1) == 0 and tiling.cols & (tiling.cols - 1) == 0
    monkeypatch.setattr(K, "MIN_PROGRAMS", 264)
    assert K.plan((2, 100000), (1,), np.float32, "arg") is None  # too few programs


def _argmax_op(shape, axes):
    td = dml.TensorDesc("FLOAT32", shape)
    out = td.like(sizes=tuple(1 if i in axes else s for i, s in enumerate(shape)),
                  data_type="UINT32")
    return dml.compile_operator(dml.ArgMaxOperatorDesc(td, out, axes=list(axes)))


def _lse_op(shape, axes):
    td = dml.TensorDesc("FLOAT32", shape)
    out = td.like(sizes=tuple(1 if i in axes else s for i, s in enumerate(shape)))
    return dml.compile_operator(dml.ReduceOperatorDesc("LOG_SUM_EXP", td, out, axes=list(axes)))


def test_cpu_traces_only_lax():
    if K.cuda_present():
        pytest.skip("this process has a CUDA backend")
    x = jnp.asarray(_data((3, 7, 5), "float32"))
    for op in (_argmax_op((3, 7, 5), (1,)), _lse_op((3, 7, 5), (1,))):
        text = str(jax.make_jaxpr(lambda y, fn=op.fn: fn(y))(x))
        assert "pallas" not in text and "platform_index" not in text


def test_dispatch_with_cuda_present_lowers_lax_on_cpu(monkeypatch):
    # As on a machine with a GPU: the program holds the kernel for CUDA and lax for the rest.
    monkeypatch.setattr(K, "cuda_present", lambda: True)
    monkeypatch.setattr(K, "MIN_PROGRAMS", 1)
    shape = (3, 7, 5)
    x = jnp.asarray(_data(shape, "float32"))
    arg = dml.ArgMaxOperatorDesc(
        dml.TensorDesc("FLOAT32", shape), dml.TensorDesc("UINT32", (3, 1, 5)), axes=[1])
    lse = _lse_op(shape, (1,)).desc
    # Each fn is traced afresh under a new jit, so the patched dispatch applies.
    for desc in (arg, lse):
        fn = dml.compile_operator(desc).fn
        f = jax.jit(lambda y, fn=fn: fn(y))
        text = str(jax.make_jaxpr(lambda y, fn=fn: fn(y))(x))
        assert "pallas_call" in text and "platform_index" in text
        got = np.asarray(f(x))
        monkeypatch.setattr(K, "ENABLED", False)
        want = np.asarray(jax.jit(lambda y, fn=fn: fn(y))(x))
        monkeypatch.setattr(K, "ENABLED", True)
        np.testing.assert_array_equal(got, want)
    # autodiff goes through lax (softmax); vmap folds the batch into the kernel's A.
    lse_fn = dml.compile_operator(lse).fn
    g = jax.grad(lambda y: lse_fn(y).sum())(jnp.asarray(_data(shape, "int8"), jnp.float32))
    np.testing.assert_allclose(np.asarray(g.sum(axis=1)), np.ones((3, 5)), rtol=1e-5)
    xs = jnp.stack([x, x + 1])
    arg_fn = dml.compile_operator(arg).fn
    np.testing.assert_array_equal(np.asarray(jax.vmap(arg_fn)(xs))[1], np.asarray(arg_fn(x)))
    assert "pallas_call" in str(jax.make_jaxpr(jax.vmap(lambda y: arg_fn(y)))(xs))
