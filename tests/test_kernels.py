"""dml_jax.kernels: kernel logic (Pallas interpreter) against the lax lowering, and the
programs their fast paths give.

The Triton kernels only compile on CUDA; here Pallas's interpreter runs the same kernel bodies on
small shapes that exercise masking (sizes that do not divide the tile), ties, NaN and infinities.
The dispatch tests check that a CPU-only process traces exactly the lax lowering, and that with a
CUDA backend present the program carries both branches and still computes the lax result on CPU.
test_kernels_gpu.py runs the compiled kernels on a GPU; benchmarks/kernel_variants.py (git history)
holds the alternatives the kernels were chosen from. The registry itself: test_fastpath.py.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import reference

import dml_jax as dml
from dml_jax import fastpath, registry
from dml_jax.kernels import elementwise as E
from dml_jax.kernels import movement as M
from dml_jax.kernels import reduce as K
from dml_jax.kernels import reduce_plan as P
from dml_jax.ops.reduce import F, _reduce_value

pytestmark = pytest.mark.kernel_matrix


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
LAYOUTS = [
    ((3, 7, 5), (1,), K.Tiling(rows=4, cols=4)),
    ((6, 9), (1,), K.Tiling(rows=4, cols=4)),
    ((2, 3, 5, 4), (1, 2), K.Tiling(rows=4, cols=2)),
]


def _plan(shape, axes, tiling):
    a = int(np.prod(shape[: axes[0]]))
    r = int(np.prod([shape[i] for i in axes]))
    b = int(np.prod(shape[axes[-1] + 1 :]))
    return K.Plan(a, r, b, tiling)


def _assert_arg_kernel(run, x, axes, p, **kw):
    """``run(x, p, largest, last, interpret=True, **kw)`` equals the spec reference's scan
    (tests/reference.py) for ARGMAX and ARGMIN, first and last extreme."""
    for largest in (True, False):
        for last in (True, False):
            want = reference.arg_extreme(np.asarray(x), axes, largest, last, np.int32)
            got = np.asarray(run(x, p, largest, last, interpret=True, **kw))
            np.testing.assert_array_equal(got, want.reshape(-1), err_msg=f"{largest=} {last=} {p}")


@pytest.mark.parametrize("shape, axes, tiling", LAYOUTS)
@pytest.mark.parametrize("dtype", ["float32", "int8", "uint32"])
def test_arg_kernel_interpret_matches_lax(shape, axes, tiling, dtype):
    x = jnp.asarray(_data(shape, dtype))
    p = _plan(shape, axes, tiling)
    _assert_arg_kernel(K.arg_reduce_kernel, x, axes, p)


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
    got = np.asarray(
        K.log_sum_exp_kernel(
            jnp.asarray(x), K.Plan(4, 5, 1, K.Tiling(rows=2, cols=2)), interpret=True
        )
    )
    assert got[0] == -np.inf and got[1] == np.inf and np.isnan(got[2])
    np.testing.assert_allclose(got[3], 1000 + np.log(5), rtol=1e-6)


def test_plan_layouts_and_coverage(monkeypatch):
    monkeypatch.setattr(P, "MIN_PROGRAMS", 1)
    p = K.plan((4, 6, 8, 10), (1, 2), np.float32, "arg")
    assert (p.a, p.r, p.b) == (4, 48, 10)
    # size-1 axes between reduced axes do not break adjacency
    p = K.plan((4, 6, 1, 8, 10), (1, 3), np.float32, "arg")
    assert (p.a, p.r, p.b) == (4, 48, 10)
    assert K.plan((4, 6, 8), (2,), np.float16, "lse").b == 1
    assert K.plan((4, 6, 8, 10), (0, 2), np.float32, "arg") is None  # not adjacent
    assert K.plan((4, 6), (1,), np.float64, "arg") is None  # 64-bit: lax
    assert K.plan((4, 6), (1,), np.int32, "lse") is None  # not a float
    for tiling in (
        K.plan((4096, 300), (1,), np.float32, "arg").tiling,
        K.plan((64, 300, 5000), (1,), np.int8, "arg").tiling,
    ):
        assert tiling.rows & (tiling.rows - 1) == 0 and tiling.cols & (tiling.cols - 1) == 0
    monkeypatch.setattr(P, "MIN_PROGRAMS", 264)
    assert K.plan((2, 100000), (1,), np.float32, "arg") is None  # too few programs


def _argmax_op(shape, axes):
    td = dml.TensorDesc("FLOAT32", shape)
    out = td.like(
        sizes=tuple(1 if i in axes else s for i, s in enumerate(shape)), data_type="UINT32"
    )
    return dml.compile_operator(dml.ArgMaxOperatorDesc(td, out, axes=list(axes)))


def _lse_op(shape, axes):
    td = dml.TensorDesc("FLOAT32", shape)
    out = td.like(sizes=tuple(1 if i in axes else s for i, s in enumerate(shape)))
    return dml.compile_operator(dml.ReduceOperatorDesc("LOG_SUM_EXP", td, out, axes=list(axes)))


def _lowered(desc, fast_paths=True):
    return fastpath.lowering(registry.lookup(desc.operator_type), desc, fast_paths)


def _on_cpu(*xs):
    """Inputs committed to the CPU, so a program runs there on any machine."""
    cpu = jax.devices("cpu")[0]
    return [jax.device_put(jnp.asarray(x), cpu) for x in xs]


def _assert_same_bits(got, want):
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        assert np.asarray(g).tobytes() == np.asarray(w).tobytes()


@pytest.fixture
def cuda_present(monkeypatch):
    """As on a machine with a GPU (on one, nothing changes); every plan allowed."""
    monkeypatch.setattr(fastpath, "cuda_present", lambda: True)
    monkeypatch.setattr(P, "MIN_PROGRAMS", 1)


def test_cpu_traces_only_lax():
    if fastpath.cuda_present():
        pytest.skip("this process has a CUDA backend")
    x = jnp.asarray(_data((3, 7, 5), "float32"))
    for op in (_argmax_op((3, 7, 5), (1,)), _lse_op((3, 7, 5), (1,))):
        text = str(jax.make_jaxpr(lambda y, fn=op.fn: fn(y))(x))
        assert "pallas" not in text and "platform_index" not in text


def test_dispatch_with_cuda_present_lowers_lax_on_cpu(cuda_present):
    # The program holds the kernel for CUDA and lax for the rest; run on the CPU (on any
    # machine) it computes exactly the lax lowering's result.
    shape = (3, 7, 5)
    (x,) = _on_cpu(_data(shape, "float32"))
    arg = dml.ArgMaxOperatorDesc(
        dml.TensorDesc("FLOAT32", shape), dml.TensorDesc("UINT32", (3, 1, 5)), axes=[1]
    )
    lse = _lse_op(shape, (1,)).desc
    for desc in (arg, lse):
        fn = _lowered(desc)
        text = str(jax.make_jaxpr(fn)(x))
        assert "pallas_call" in text and "platform_index" in text
        lax_fn = _lowered(desc, fast_paths=False)
        assert "platform_index" not in str(jax.make_jaxpr(lax_fn)(x))
        _assert_same_bits(jax.jit(fn)(x), jax.jit(lax_fn)(x))
    # autodiff goes through lax (softmax); vmap folds the batch into the kernel's A.
    lse_fn = _lowered(lse)
    (y,) = _on_cpu(np.asarray(_data(shape, "int8"), np.float32))
    g = jax.grad(lambda y: lse_fn(y)[0].sum())(y)
    np.testing.assert_allclose(np.asarray(g.sum(axis=1)), np.ones((3, 5)), rtol=1e-5)
    (xs,) = _on_cpu(jnp.stack([x, x + 1]))
    arg_fn = _lowered(arg)
    np.testing.assert_array_equal(np.asarray(jax.vmap(arg_fn)(xs)[0][1]), np.asarray(arg_fn(x)[0]))
    assert "pallas_call" in str(jax.make_jaxpr(jax.vmap(arg_fn))(xs))
    # no fast path applies (axes not adjacent): the lax lowering itself, CUDA or not
    desc = dml.ArgMaxOperatorDesc(
        dml.TensorDesc("FLOAT32", shape), dml.TensorDesc("UINT32", (1, 7, 1)), axes=[0, 2]
    )
    assert fastpath.select(desc) is None
    assert "platform_index" not in str(jax.make_jaxpr(_lowered(desc))(x))


def test_plan_prefers_lax_where_measured_faster():
    # 1 GiB float32 ARGMAX along axis 2 (B = 256): lax's order keys beat the kernel on an H200;
    # narrow types and full-width tiles keep the kernel.
    assert K.plan((16, 256, 256, 256), (2,), np.float32, "arg") is None
    assert K.plan((16, 256, 256, 256), (2,), np.int32, "arg") is None
    assert K.plan((32, 256, 256, 256), (2,), np.float16, "arg") is not None
    assert K.plan((16, 256, 256, 256), (1,), np.float32, "arg") is not None
    assert K.plan((16, 256, 256, 256), (2,), np.float32, "lse").tiling.num_warps == 2
    assert K.plan((16, 256, 256, 256), (1,), np.float32, "lse").tiling.num_warps == 4


def test_lse_kernel_interpret_single_tile():
    # The reduced extent in one tile takes the no-rescale path; both paths agree with lax.
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((6, 5)) * 3).astype(np.float32)
    x[0] = -np.inf
    x[1, 2] = np.inf
    x[2] += 1000.0
    x = jnp.asarray(x)
    want = np.asarray(_reduce_value(F.LOG_SUM_EXP, x, (1,))).reshape(-1)
    for rows in (8, 2):  # one tile; three tiles
        p = K.Plan(6, 5, 1, K.Tiling(rows=rows, cols=4))
        got = np.asarray(K.log_sum_exp_kernel(x, p, interpret=True))
        np.testing.assert_allclose(got, want, rtol=1e-6)


# --- narrow-type movement and CLIP (dml_jax.kernels.movement / elementwise) ------------------

NARROW = ["float16", "int8", "uint8", "int16", "uint16"]


@pytest.mark.parametrize("dtype", NARROW)
def test_words_round_trip_and_moves(dtype):
    x = _data((2, 3, 4, 8), dtype)
    w = M.to_words(jnp.asarray(x))
    assert w.dtype == jnp.uint32 and w.shape == (2, 3, 4, 8 * x.itemsize // 4)
    assert np.asarray(M.from_words(w, x.dtype)).tobytes() == x.tobytes()
    assert M.packable(x.shape, x.dtype) and not M.packable((3, 3), dtype)
    assert not M.packable((4, 8), np.float32)  # 32-bit types move as they are

    def split(y):
        return y[:, :, :1], y[:, :, 1:]

    for got, want in zip(M.on_words(split, [jnp.asarray(x)], x.dtype), split(x)):
        assert np.asarray(got).tobytes() == want.tobytes()


@pytest.mark.parametrize("dtype", ["float16", "int8", "uint16"])
@pytest.mark.parametrize("block, c, w", [(2, 8, 4), (2, 4, 12), (3, 9, 8)])
@pytest.mark.parametrize("order", ["DEPTH_COLUMN_ROW", "COLUMN_ROW_DEPTH"])
def test_d2s_words_matches_operator(dtype, block, c, w, order):
    x = _data((2, c, 3, w), dtype)
    td = dml.TensorDesc(dtype.upper(), x.shape)
    out = td.like(sizes=(2, c // block**2, 3 * block, w * block))
    op = dml.compile_operator(dml.DepthToSpace1OperatorDesc(td, out, block_size=block, order=order))
    got = np.asarray(M.d2s_words(jnp.asarray(x), block, order == "DEPTH_COLUMN_ROW"))
    want = np.asarray(op(x))
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


def _same_or_both_nan(got, want):
    got, want = np.asarray(got), np.asarray(want)
    if got.dtype.kind == "f":
        nan = np.isnan(want)
        np.testing.assert_array_equal(np.isnan(got), nan)
        got, want = got[~nan], want[~nan]
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("dtype", ["float16", "int8", "uint16"])
def test_clip_kernel_interpret_matches_lax(dtype, monkeypatch):
    monkeypatch.setattr(E, "BLOCK_BYTES", 64)  # several programs and a masked last block
    # Bound pairs: ordered, reversed (Min > Max), equal, signed zeros both ways, infinite.
    if dtype == "float16":
        vals = [np.nan, -np.nan, -0.0, 0.0, 1, -1, 5, -5, np.inf, -np.inf, 0.5, -0.5, 2]
        pairs = [(-0.5, 1.0), (1.0, -0.5), (-0.0, 0.0), (0.0, -0.0), (-0.0, -0.0), (-np.inf, np.inf),
                 (np.inf, -np.inf), (-np.inf, 1.0), (-0.5, np.inf)]  # fmt: skip
    else:
        info = np.iinfo(dtype)
        vals = [info.min, info.max, 0, 1, 2, 5, 7]
        pairs = [(1, 6), (6, 1), (0, 0), (0, info.max), (info.max, 0)]
    x = jnp.asarray(np.array(vals * 11, dtype).reshape(11, len(vals)))
    for lo, hi in pairs:
        a, b = np.asarray(lo, dtype), np.asarray(hi, dtype)
        want = jax.lax.max(jnp.asarray(a), jax.lax.min(x, jnp.asarray(b)))
        _same_or_both_nan(E.clip_kernel(x, a, b, interpret=True), want)


def test_narrow_dispatch_with_cuda_present_lowers_plain_on_cpu(cuda_present):
    # SPLIT, TILE, DEPTH_TO_SPACE, SPACE_TO_DEPTH and CLIP on narrow types carry a CUDA branch
    # (words, slices or the CLIP kernel), while the CPU still computes the plain lowering.
    (x,) = _on_cpu(_data((2, 8, 4, 8), "int8"))
    td = dml.TensorDesc("INT8", x.shape)
    descs = [
        dml.SplitOperatorDesc(
            td, [td.like(sizes=(2, 8, 1, 8)), td.like(sizes=(2, 8, 3, 8))], axis=2
        ),
        dml.TileOperatorDesc(td, td.like(sizes=(2, 8, 8, 24)), repeats=[1, 1, 2, 3]),
        dml.DepthToSpace1OperatorDesc(
            td, td.like(sizes=(2, 2, 8, 16)), block_size=2, order="DEPTH_COLUMN_ROW"
        ),
        dml.SpaceToDepth1OperatorDesc(
            td, td.like(sizes=(2, 32, 2, 4)), block_size=2, order="COLUMN_ROW_DEPTH"
        ),
        dml.ElementWiseClip1OperatorDesc(td, td, min=-1, max=2),
    ]
    for desc in descs:
        fn, plain = _lowered(desc), _lowered(desc, fast_paths=False)
        assert "platform_index" in str(jax.make_jaxpr(fn)(x)), desc.operator_type
        assert "platform_index" not in str(jax.make_jaxpr(plain)(x))
        _assert_same_bits(jax.jit(fn)(x), jax.jit(plain)(x))
    # the lax lowering decides derivatives: float16 CLIP passes the gradient strictly inside
    th = dml.TensorDesc("FLOAT16", (2, 8))
    clip = _lowered(dml.ElementWiseClip1OperatorDesc(th, th, min=-1, max=2))
    (h,) = _on_cpu(np.linspace(-3, 3, 16).astype(np.float16).reshape(2, 8))
    g = jax.grad(lambda y: clip(y)[0].astype(jnp.float32).sum())(h)
    np.testing.assert_array_equal(np.asarray(g), (np.asarray(h) > -1) & (np.asarray(h) < 2))


def test_cpu_traces_no_narrow_branch():
    if fastpath.cuda_present():
        pytest.skip("this process has a CUDA backend")
    x = _data((2, 4, 4, 8), "float16")
    td = dml.TensorDesc("FLOAT16", x.shape)
    fn = dml.compile_operator(dml.ElementWiseClip1OperatorDesc(td, td, min=-1, max=1)).fn
    assert "platform_index" not in str(jax.make_jaxpr(fn)(x))


# The lanes kernel (long 1-byte ARGMIN/ARGMAX, integer MAX/MIN), the JOIN copy kernel and flat
# words, the DEPTH_TO_SPACE packing kernel.
@pytest.mark.parametrize("shape, axes, tiling", LAYOUTS)
@pytest.mark.parametrize("dtype", ["float16", "int8", "uint32"])
def test_lanes_kernel_interpret_matches_lax(shape, axes, tiling, dtype):
    x = jnp.asarray(_data(shape, dtype))
    p = _plan(shape, axes, tiling)
    _assert_arg_kernel(K.lanes_kernel, x, axes, p)


def test_lanes_kernel_interpret_signed_zero_and_type_minimum():
    x = jnp.asarray(np.array([[-0.0, 0.0, 1.0, -np.inf, -0.0, np.nan, 1.0]] * 2, np.float16))
    p = K.Plan(2, 7, 1, K.Tiling(rows=2, cols=2))
    _assert_arg_kernel(K.lanes_kernel, x, (1,), p)
    # every element the identity of ARGMAX (the type's minimum): first and last index
    y = jnp.asarray(np.full((3, 8), -128, np.int8))
    p = K.Plan(3, 8, 1, K.Tiling(rows=4, cols=2))
    assert np.asarray(K.lanes_kernel(y, p, True, False, interpret=True)).tolist() == [0] * 3
    assert np.asarray(K.lanes_kernel(y, p, True, True, interpret=True)).tolist() == [7] * 3


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_extreme_kernel_interpret_matches_numpy(dtype):
    x = _data((3, 7, 5), dtype)
    p = _plan((3, 7, 5), (1,), K.Tiling(rows=4, cols=4))
    for largest in (True, False):
        want = (np.max if largest else np.min)(x, axis=1).reshape(-1)
        got = K.lanes_kernel(jnp.asarray(x), p, largest, index=False, interpret=True)
        np.testing.assert_array_equal(np.asarray(got), want)
        assert got.dtype == x.dtype


def test_plan_ext_and_lanes_choice(monkeypatch):
    monkeypatch.setattr(P, "MIN_PROGRAMS", 1)
    assert K.plan((4, 6, 8), (1,), np.int8, "ext") is not None
    assert K.plan((4, 6, 8), (2,), np.int8, "ext") is None  # minor axis: lax reaches the copy
    assert K.plan((4, 6, 8), (1,), np.int32, "ext") is None
    assert K.arg_kernel(np.int8, 300) == "packed" and K.arg_kernel(np.float16, 300) == "packed"
    assert K.arg_kernel(np.float32, 300) == "tile"
    # the packed index has 16 bits: longer reductions run the other kernels
    assert K.arg_kernel(np.int8, 2**16 + 1) == "lanes"
    assert K.arg_kernel(np.float16, 2**16 + 1) == "tile"


@pytest.mark.parametrize("dtype", ["int8", "float16"])
def test_join_flat_and_kernel_match_concatenate(dtype):
    rng = np.random.default_rng(4)
    shapes = [(2, 2, 16, 16), (2, 2, 32, 16)]
    xs = [jnp.asarray(rng.integers(-100, 100, s).astype(dtype)) for s in shapes]
    want = np.asarray(jax.lax.concatenate(xs, 2))
    assert M.join_covered(shapes, 2, dtype) and M.join_kernel_covered(shapes, 2, dtype)
    for got in (M.join_flat(xs, 2), M.join_kernel(xs, 2, interpret=True)):
        assert np.asarray(got).tobytes() == want.tobytes()
    assert not M.join_covered([(2, 3), (2, 5)], 1, "int8")  # rows not whole words
    assert not M.join_kernel_covered([(2, 2, 3, 4), (2, 2, 5, 4)], 2, "int8")  # blocks < 32


@pytest.mark.parametrize("dtype, block", [("int8", 2), ("int8", 4), ("float16", 2)])
@pytest.mark.parametrize("order", ["DEPTH_COLUMN_ROW", "COLUMN_ROW_DEPTH"])
def test_d2s_kernel_interpret_matches_operator(dtype, block, order):
    shape = (2, 2 * block * block, 4, 64)
    assert M.d2s_kernel_covered(shape, dtype, block)
    x = _data(shape, dtype)
    td = dml.TensorDesc(dtype.upper(), shape)
    out = td.like(sizes=(2, 2, 4 * block, 64 * block))
    op = dml.compile_operator(dml.DepthToSpace1OperatorDesc(td, out, block_size=block, order=order))
    got = M.d2s_kernel(jnp.asarray(x), block, order == "DEPTH_COLUMN_ROW", interpret=True)
    assert np.asarray(got).tobytes() == np.asarray(op(jnp.asarray(x))).tobytes()
    assert not M.d2s_kernel_covered(shape, "float16", 4)  # 4 * 2 bytes exceed a word


def test_join_d2s_max_dispatch_with_cuda_present_lowers_plain_on_cpu(cuda_present):
    # JOIN (int8), DEPTH_TO_SPACE (float16) and int8 REDUCE MAX carry a CUDA branch; the CPU
    # computes the plain lowering.
    xi, xh = _on_cpu(_data((2, 8, 4, 64), "int8"), _data((2, 8, 4, 64), "float16"))
    ti, th = dml.TensorDesc("INT8", xi.shape), dml.TensorDesc("FLOAT16", xh.shape)
    cases = [
        (dml.JoinOperatorDesc([ti.like(sizes=(2, 8, 2, 64))] * 2, ti, axis=2), xi),
        (
            dml.DepthToSpace1OperatorDesc(
                th, th.like(sizes=(2, 2, 8, 128)), block_size=2, order="DEPTH_COLUMN_ROW"
            ),
            xh,
        ),
        (dml.ReduceOperatorDesc("MAX", ti, ti.like(sizes=(2, 1, 4, 64)), axes=[1]), xi),
    ]
    for desc, x in cases:
        args = (x[:, :, :2], x[:, :, 2:]) if desc.operator_type == "DML_OPERATOR_JOIN" else (x,)
        fn, plain = _lowered(desc), _lowered(desc, fast_paths=False)
        assert "platform_index" in str(jax.make_jaxpr(fn)(*args)), desc.operator_type
        assert "platform_index" not in str(jax.make_jaxpr(plain)(*args))
        _assert_same_bits(jax.jit(fn)(*args), jax.jit(plain)(*args))


# The packed ARGMIN/ARGMAX kernel (1- and 2-byte types), unmasked loads.
PACKED_LAYOUTS = LAYOUTS + [
    ((4, 8, 6), (1,), K.Tiling(rows=4, cols=2)),  # inner, tiles divide exactly: unmasked
    ((8, 12), (1,), K.Tiling(rows=4, cols=4)),  # minor, exact
    ((2, 16, 3), (1,), K.Tiling(rows=16, cols=4)),  # one tile along R, overhanging columns
]


@pytest.mark.parametrize("shape, axes, tiling", PACKED_LAYOUTS)
@pytest.mark.parametrize("dtype", ["float16", "int8", "uint8", "int16", "uint16"])
def test_packed_kernel_interpret_matches_lax(shape, axes, tiling, dtype):
    x = jnp.asarray(_data(shape, dtype))
    p = _plan(shape, axes, tiling)
    _assert_arg_kernel(K.packed_kernel, x, axes, p)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16"])
def test_packed_kernel_interpret_type_extremes(dtype):
    info = np.iinfo(dtype)
    p = K.Plan(3, 8, 1, K.Tiling(rows=4, cols=2))
    for fill in (info.min, info.max):
        y = jnp.asarray(np.full((3, 8), fill, dtype))
        for largest in (True, False):
            assert (
                np.asarray(K.packed_kernel(y, p, largest, False, interpret=True)).tolist()
                == [0] * 3
            )
            assert (
                np.asarray(K.packed_kernel(y, p, largest, True, interpret=True)).tolist() == [7] * 3
            )
    z = np.full((3, 8), info.min, dtype)
    z[:, 5] = info.max
    z[1, 2] = info.max
    z[2, 6] = info.min + 1
    for largest, last, want in (
        (True, False, [5, 2, 5]),
        (True, True, [5, 5, 5]),
        (False, False, [0, 0, 0]),
        (False, True, [7, 7, 7]),
    ):
        got = np.asarray(K.packed_kernel(jnp.asarray(z), p, largest, last, interpret=True))
        assert got.tolist() == want, (largest, last)


def test_packed_kernel_interpret_float16_specials():
    # signed zeros tie; every NaN (both signs, any payload) is the extreme; infinities order
    row = np.array([-0.0, 0.0, np.inf, -np.inf, 1.0, -1.0, 0.0, -0.0], np.float16)
    nan_neg = np.frombuffer(np.array([0xFE01], np.uint16).tobytes(), np.float16)[0]
    nan_big = np.frombuffer(np.array([0x7FFF], np.uint16).tobytes(), np.float16)[0]
    rows = [row.copy() for _ in range(4)]
    rows[1][3], rows[1][6] = nan_neg, nan_big  # a negative NaN first, then another payload
    rows[2][:] = -0.0
    rows[2][4] = 0.0
    rows[3][:] = -np.inf
    rows.append(np.array([1.0, 2.0, 0.0, 0.0, np.nan, np.nan, np.nan, np.nan], np.float16))
    x = jnp.asarray(np.stack(rows))  # the last row: a whole tile of NaN after numbers
    run = K.packed_kernel
    for tiling in (K.Tiling(rows=4, cols=2), K.Tiling(rows=2, cols=8), K.Tiling(rows=8, cols=4)):
        p = K.Plan(5, 8, 1, tiling)
        _assert_arg_kernel(run, x, (1,), p)
        assert np.asarray(run(x, p, True, False, interpret=True)).tolist() == [2, 3, 0, 0, 4]
        assert np.asarray(run(x, p, False, True, interpret=True)).tolist() == [3, 6, 7, 7, 7]


def test_packed_kernel_rejects_long_reductions():
    p = K.Plan(1, 2**16 + 1, 1, K.Tiling(rows=1024, cols=1))
    with pytest.raises(ValueError, match="R <= 65536"):
        K.packed_kernel(jnp.zeros((1, 2**16 + 1), jnp.int8), p, True, False, interpret=True)


def test_unmasked_loads_need_exact_tiles():
    assert K.exact(K.Plan(4, 8, 6, K.Tiling(rows=4, cols=2)))
    assert not K.exact(K.Plan(4, 8, 6, K.Tiling(rows=4, cols=4)))
    assert not K.exact(K.Plan(6, 9, 1, K.Tiling(rows=4, cols=2)))
    with pytest.raises(ValueError, match="divide"):
        K._tile_loader(K.Plan(6, 9, 1, K.Tiling(rows=4, cols=2)), None, None, unmasked=True)


def test_lse_kernel_interpret_exact_tiles():
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((8, 16)) * 3).astype(np.float32)
    x[0, 3] = 1000.0
    x[1, :] = -np.inf
    want = np.asarray(_reduce_value(F.LOG_SUM_EXP, jnp.asarray(x), (1,))).reshape(-1)
    for tiling in (K.Tiling(rows=4, cols=2), K.Tiling(rows=16, cols=4)):
        p = K.Plan(8, 16, 1, tiling)
        assert K.exact(p)
        got = np.asarray(K.log_sum_exp_kernel(jnp.asarray(x), p, interpret=True))
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_packed_float16_keys_exhaustive():
    # every float16 bit pattern: keys order as the values, ties exactly where IEEE says equal
    # (+0 == -0), every NaN the single largest key (or, for ARGMIN's complemented word, the
    # single lowest, whose complement is the best), and all within 16 signed bits
    v = np.arange(65536, dtype=np.uint16).view(np.float16)
    nan = np.isnan(v)
    order = np.argsort(v[~nan].astype(np.float64), kind="stable")
    num = v[~nan].astype(np.float64)[order]
    for nan_lowest in (False, True):
        key = np.asarray(K._packed_keys(jnp.asarray(v), np.float16, nan_lowest)).astype(np.int64)
        assert key.min() >= -(2**15) and key.max() < 2**15
        best = key[nan]
        assert (best == best[0]).all()
        assert best[0] < key[~nan].min() if nan_lowest else best[0] > key[~nan].max()
        k = key[~nan][order]
        assert (np.diff(k) >= 0).all()
        assert np.array_equal(np.diff(k) == 0, np.diff(num) == 0)


def test_float16_lse_and_packed_tilings_follow_the_layout_tables(monkeypatch):
    monkeypatch.setattr(P, "MIN_PROGRAMS", 1)
    shape = (4, 256, 256, 256)
    for ax, lay in ((3, "minor"), (2, "narrow"), (1, "inner")):
        assert P.layout(int(np.prod(shape[ax + 1 :]))) == lay
        t = K.plan(shape, (ax,), np.float16, "lse").tiling
        assert t.num_warps == P.F16_LSE_WARPS[lay]
        assert t.rows * t.cols == P.F16_LSE_ELEMENTS[lay]
        for dtype in (np.float16, np.int8):
            elems, _, warps, stages = P.PACKED_TILING[(np.dtype(dtype).itemsize, lay)]
            t = K.plan(shape, (ax,), dtype, "arg").tiling
            assert (t.rows * t.cols, t.num_warps, t.num_stages) == (elems, warps, stages)
