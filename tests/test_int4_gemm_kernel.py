"""The 4-bit weight GEMM kernel (dml_jax.kernels.int4_gemm): the graph pair DEQUANTIZE (blocked
4-bit codes) -> GEMM (TransB) as one kernel for products of 1 to 16 rows.

The kernel (in Pallas interpret mode, natively on a CUDA machine) against the lax lowerings of
the two nodes (DEQUANTIZE, then GEMM) over rows, N, K, block sizes, zero points or none, float16
and float32, UINT4 and INT4 codes and the tile forms (K split among programs, steps of one or
several blocks, the dot either way round). The weights are DEQUANTIZE's bits and only the
float32 summation order differs, so each value is within one unit of T's rounding of the lax
result plus float32 sums' error (2^-20 of the sum of |a||w|). Which problems ``plan`` takes,
and which graph pairs the epilogue applies to. A MatMulNBits model traced for CUDA on this
machine (the CUDA choice forced, the kernel in interpret mode) takes the kernel for a decode
step, agrees with the CPU program, and differentiates through the lax lowering; a prompt of 32
rows stays with lax. On a CUDA machine, the same model compiled natively against the session
without fast paths.
"""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import forced_cuda_kernel

import dml_jax as dml
from dml_jax import fastpath, registry
from dml_jax.kernels import int4_gemm as K
from dml_jax.kernels import int4_pair as KP

T = dml.TensorDesc
CODES = {"UINT4": jnp.uint4, "INT4": jnp.int4}


def _descs(m, n, k, block, zero, ft="FLOAT16", qt="UINT4"):
    """DEQUANTIZE of codes {N, K} (one scale, and zero point, a block of K) and the GEMM that
    reads its output as TransB."""
    blocks = k // block
    params = [T(ft, (n, blocks))] + ([T(qt, (n, blocks))] if zero else [])
    deq = dml.DequantizeOperatorDesc(
        T(qt, (n, k)), "SCALE_ZERO_POINT" if zero else "SCALE", params, T(ft, (n, k))
    )
    gemm = dml.GemmOperatorDesc(
        T(ft, (1, 1, m, k)), T(ft, (1, 1, n, k)), None, T(ft, (1, 1, m, n)), trans_b="TRANSPOSE"
    )
    dml.validate(deq)
    dml.validate(gemm)
    return deq, gemm


def _arrays(rng, m, n, k, block, zero, dtype, qt="UINT4"):
    lo, hi = (0, 16) if qt == "UINT4" else (-8, 8)
    a = jnp.asarray(rng.standard_normal((m, k)), dtype)
    q = jnp.asarray(rng.integers(lo, hi, (n, k)).astype(np.int8)).astype(CODES[qt])
    scale = jnp.asarray(rng.uniform(0.01, 0.1, (n, k // block)), dtype)
    z = None
    if zero:
        z = jnp.asarray(rng.integers(lo, hi, (n, k // block)).astype(np.int8)).astype(CODES[qt])
    return a, q, scale, z


def _lax(deq, gemm, a, q, scale, z):
    """The two nodes' lax lowerings in sequence: DEQUANTIZE's output, then GEMM's."""
    w = registry.lookup(deq.operator_type).lower(deq, q, scale, *([] if z is None else [z]))[0]
    (m, k), n = a.shape, q.shape[0]
    gemm_lower = registry.lookup(gemm.operator_type).lower
    y = gemm_lower(gemm, a.reshape(1, 1, m, k), w.reshape(gemm.b_tensor.sizes))[0]
    return np.asarray(w, np.float64), np.asarray(y, np.float64).reshape(m, n)


def _assert_close(got, want, a, w):
    """Within one unit of T's rounding of ``want`` plus float32 sums' error."""
    t = np.asarray(got).dtype
    bound = np.abs(np.asarray(a, np.float64)) @ np.abs(w).T
    ulp = np.spacing(np.abs(want).astype(t)).astype(np.float64)
    err = np.abs(np.asarray(got, np.float64) - want)
    assert np.all(err <= ulp + 2.0**-20 * bound), float((err - ulp - 2.0**-20 * bound).max())


# (rows, N, K, block, zero point, float type, code type, tiles)
SPLIT = K.Tiles(target_programs=64, min_k=64)  # K split among programs: partial sums
ONE_BLOCK = K.Tiles(step_k=16)  # a step per block of K (no reshape)
A_FIRST = K.Tiles(weights_first=False, block_n=32)
ONE_ROW = K.Tiles(one_row=True)  # one row: sums of products, no dot
CODES_FORM = K.Tiles(bytes_form=False)  # the codes read as 4-bit values
CASES = {
    "m1-b32-zero-f16": (1, 128, 512, 32, True, "FLOAT16", "UINT4", None),
    "m3-b16-f16": (3, 64, 256, 16, False, "FLOAT16", "UINT4", None),
    "m16-b64-zero-f32": (16, 96, 384, 64, True, "FLOAT32", "UINT4", None),
    "m8-b128-zero-split": (8, 128, 1024, 128, True, "FLOAT16", "UINT4", SPLIT),
    "m2-b32-split-f32": (2, 64, 512, 32, False, "FLOAT32", "UINT4", SPLIT),
    "m5-b32-one-block": (5, 64, 256, 32, True, "FLOAT16", "UINT4", ONE_BLOCK),
    "m1-b256-a-first": (1, 64, 512, 256, True, "FLOAT16", "UINT4", A_FIRST),
    "m4-b32-int4": (4, 64, 256, 32, True, "FLOAT16", "INT4", None),
    "m1-b64-int4-f32-split": (1, 32, 512, 64, False, "FLOAT32", "INT4", SPLIT),
    "m16-b16-zero-split-a-first": (16, 64, 512, 16, True, "FLOAT16", "UINT4",
                                   K.Tiles(weights_first=False, target_programs=64, min_k=64)),
    "m1-b32-zero-one-row": (1, 128, 512, 32, True, "FLOAT16", "UINT4", ONE_ROW),
    "m1-b32-one-row-int4": (1, 64, 512, 32, True, "FLOAT16", "INT4", ONE_ROW),
    "m1-b32-zero-one-row-codes": (1, 128, 512, 32, True, "FLOAT16", "UINT4",
                                  K.Tiles(one_row=True, bytes_form=False)),
    "m1-b64-one-row-split-f32": (1, 64, 512, 64, False, "FLOAT32", "UINT4",
                                 K.Tiles(one_row=True, target_programs=64, min_k=64)),
    "m2-one-row-takes-the-dot": (2, 64, 256, 32, True, "FLOAT16", "INT4", ONE_ROW),
    "m1-b32-one-row-narrow": (1, 64, 1024, 32, True, "FLOAT16", "UINT4",
                              K.Tiles(one_row=True, row_programs=4, max_k=1024)),
    "m1-b32-zero-widen": (1, 128, 512, 32, True, "FLOAT16", "UINT4", K.Tiles(widen_row=True)),
    "m1-b64-widen-split-f32-a-first": (1, 64, 512, 64, False, "FLOAT32", "INT4",
                                       K.Tiles(widen_row=True, weights_first=False,
                                               target_programs=64, min_k=64)),
    "m3-widen-takes-the-padding": (3, 64, 256, 32, True, "FLOAT16", "UINT4",
                                   K.Tiles(widen_row=True)),
    "m1-b32-zero-ahead-2": (1, 64, 1024, 32, True, "FLOAT16", "UINT4",
                            K.Tiles(ahead=2, bytes_form=False)),
    "m1-b32-zero-padded": (1, 128, 512, 32, True, "FLOAT16", "UINT4", K.Tiles(widen_row=False)),
    # the steps as a loop, the codes read as bytes (LOOP)
    "m1-b32-zero-loop": (1, 128, 1024, 32, True, "FLOAT16", "UINT4",
                         K.Tiles(loop=True, target_programs=2, min_k=1024)),
    "m4-b16-loop-int4-f32": (4, 64, 512, 16, True, "FLOAT32", "INT4",
                             K.Tiles(loop=True, step_k=64, target_programs=1)),
    "m1-b64-loop-split-a-first": (1, 64, 2048, 64, False, "FLOAT16", "UINT4",
                                  K.Tiles(loop=True, weights_first=False, target_programs=64,
                                          min_k=512)),
    # the codes read as 4-bit values (BYTES_FORM off)
    "m1-b32-zero-codes": (1, 128, 512, 32, True, "FLOAT16", "UINT4", CODES_FORM),
    "m4-b32-int4-codes": (4, 64, 256, 32, True, "FLOAT16", "INT4", CODES_FORM),
    "m8-b128-zero-split-codes": (8, 128, 1024, 128, True, "FLOAT16", "UINT4",
                                 K.Tiles(target_programs=64, min_k=64, bytes_form=False)),
    "m16-b64-zero-f32-codes": (16, 96, 384, 64, True, "FLOAT32", "UINT4", CODES_FORM),
    # unrolled, the codes read as bytes (BYTES_FORM); at one row a dot of its own for A's even
    # and for its odd values (PAIRED_ROWS off)
    "m1-b32-zero-bytes": (1, 128, 1024, 32, True, "FLOAT16", "UINT4",
                          K.Tiles(bytes_form=True, paired_rows=False, target_programs=2,
                                  min_k=1024)),
    "m3-b32-bytes-int4-split": (3, 64, 1024, 32, True, "FLOAT16", "INT4",
                                K.Tiles(bytes_form=True, target_programs=8, min_k=256)),
    "m2-b64-bytes-f32": (2, 64, 512, 64, False, "FLOAT32", "UINT4", K.Tiles(bytes_form=True)),
    # each byte's codes joined into K's order, one dot a step (NATURAL_K)
    "m1-b32-bytes-natural-k": (1, 128, 1024, 32, True, "FLOAT16", "UINT4",
                               K.Tiles(natural_k=True, target_programs=4, min_k=256)),
    "m4-b64-bytes-natural-k-a-first-f32": (4, 64, 512, 64, False, "FLOAT32", "INT4",
                                           K.Tiles(natural_k=True, weights_first=False)),
    # A's even and odd values as one operand of both dots of a step (PAIRED_ROWS), one row
    "m1-b32-bytes-paired": (1, 128, 1024, 32, True, "FLOAT16", "UINT4",
                            K.Tiles(paired_rows=True, target_programs=4, min_k=256)),
    "m1-b64-bytes-paired-a-first-int4": (1, 64, 512, 64, False, "FLOAT16", "INT4",
                                         K.Tiles(paired_rows=True, weights_first=False)),
    "m3-b32-bytes-paired-rows": (3, 64, 512, 32, True, "FLOAT16", "UINT4",
                                 K.Tiles(paired_rows=True)),
    "m1-b32-bytes-ahead-1": (1, 64, 2048, 32, True, "FLOAT16", "UINT4",
                             K.Tiles(ahead=1, step_k=128, target_programs=2, min_k=1024)),
    # split K added atomically into one product (ATOMIC_SPLITS)
    "m1-b32-zero-atomic": (1, 128, 1024, 32, True, "FLOAT16", "UINT4",
                           K.Tiles(atomic=True, target_programs=32, min_k=128)),
    "m5-b32-int4-codes-atomic": (5, 64, 512, 32, True, "FLOAT16", "INT4",
                                 K.Tiles(atomic=True, bytes_form=False, target_programs=16,
                                         min_k=64)),
    "m16-b64-f32-atomic-loop": (16, 64, 2048, 64, False, "FLOAT32", "UINT4",
                                K.Tiles(atomic=True, loop=True, target_programs=4, min_k=512)),
    # programs of 16 columns over the whole of K, no split (int4_kernel_gpu.py's n16 tiles)
    "m1-b32-zero-n16-whole-k": (1, 64, 4096, 32, True, "FLOAT16", "UINT4",
                                K.Tiles(block_n=16, target_programs=4, max_k=8192)),
}  # fmt: skip


@pytest.mark.kernel_matrix(cpu=["m1-b32-zero-f16", "m16-b64-zero-f32", "m8-b128-zero-split",
                                "m1-b32-zero-one-row", "m1-b32-zero-codes",
                                "m3-b32-bytes-int4-split", "m1-b32-zero-atomic",
                                "m5-b32-int4-codes-atomic", "m1-b32-bytes-paired"])  # fmt: skip
@pytest.mark.parametrize("case", list(CASES))
def test_interpret_matches_lax(case):
    m, n, k, block, zero, ft, qt, tiles = CASES[case]
    rng = np.random.default_rng(sum(map(ord, case)))
    dtype = jnp.float16 if ft == "FLOAT16" else jnp.float32
    a, q, scale, z = _arrays(rng, m, n, k, block, zero, dtype, qt)
    v = K.plan(m, n, k, block, tiles)
    assert v is not None
    if tiles is SPLIT:
        assert v.splits > 1
    t = tiles or K.Tiles()
    assert v.one_row == (t.one_row and m == 1 and n * k <= t.row_max_weights)
    assert v.widen_row == (t.widen_row and m == 1 and not v.one_row)
    assert v.loop == (t.loop and v.k_per_program // v.step > 1)
    if t.loop and not t.atomic:
        assert v.loop and (v.splits > 1) == case.endswith("split-a-first")
    assert v.bytes_form == (v.loop or (t.bytes_form and v.step >= 32))
    assert v.atomic == (t.atomic and v.splits > 1)
    assert v.ahead == (0 if v.loop else t.ahead)  # a loop issues no loads ahead
    assert v.natural_k == (t.natural_k and v.bytes_form and not v.one_row)
    assert v.paired_rows == (t.paired_rows and v.widen_row and v.bytes_form and not t.natural_k)
    if "paired" in case:
        assert v.paired_rows == (m == 1)  # one row of A only
    if t.atomic:
        assert v.atomic
    codes = q
    if v.bytes_form:  # the codes given as DirectML's packed bytes, as held weights arrive
        codes = jax.lax.bitcast_convert_type(q.reshape(n, k // 2, 2), jnp.uint8)
    got = K.int4_product(a, codes, scale, z, interpret=not fastpath.cuda_present(), tiles=tiles,
                         signed=qt == "INT4")  # fmt: skip
    assert got.dtype == dtype and got.shape == (m, n)
    w, want = _lax(*_descs(m, n, k, block, zero, ft, qt), a, q, scale, z)
    _assert_close(got, want, a, w)


@pytest.mark.parametrize("adds", [True, False])
def test_split_sums_either_form(adds, monkeypatch):
    """K split among programs: their float32 partial sums added in order (``SPLIT_ADDS``) or
    by a reduction, the product the lax lowering's either way."""
    monkeypatch.setattr(K, "SPLIT_ADDS", adds)
    m, n, k, block, zero, ft, qt, tiles = CASES["m3-b32-bytes-int4-split"]
    rng = np.random.default_rng(7)
    a, q, scale, z = _arrays(rng, m, n, k, block, zero, jnp.float16, qt)
    assert K.plan(m, n, k, block, tiles).splits == 4
    codes = jax.lax.bitcast_convert_type(q.reshape(n, k // 2, 2), jnp.uint8)
    got = K.int4_product(a, codes, scale, z, interpret=not fastpath.cuda_present(), tiles=tiles,
                         signed=True)  # fmt: skip
    w, want = _lax(*_descs(m, n, k, block, zero, ft, qt), a, q, scale, z)
    _assert_close(got, want, a, w)


def test_plan():
    v = K.plan(1, 2048, 2048, 32)
    assert (v.block_n, v.k_per_program * v.splits) == (K.BLOCK_N, 2048)
    assert v.step == min(K.STEP_K, v.k_per_program)  # a step within a program's values of K
    assert (2048 // v.block_n) * v.splits >= K.TARGET_PROGRAMS  # split until the grid fills
    assert K.plan(1, 128256, 2048, 32).splits == 1  # enough programs along N alone
    assert K.plan(1, 2048, 8192, 128).k_per_program <= K.MAX_K_PER_PROGRAM
    assert K.plan(16, 96, 384, 64).block_n == 32  # the widest tile that divides N
    assert K.plan(17, 2048, 2048, 32) is None  # more rows than a decode step: lax
    assert K.plan(1, 2048, 2048, 8) is None  # blocks under Triton's dot
    assert K.plan(1, 2048, 2016, 48) is None  # blocks not a power of two
    assert K.plan(1, 2048, 2000, 32) is None  # K off the blocks
    assert K.plan(1, 40, 2048, 32) is None  # N off 16
    row = K.Tiles(one_row=True)
    v = K.plan(1, 2048, 2048, 32, row)  # a small product: one row, narrowed, K whole
    assert v.one_row and (v.block_n, v.splits) == (16, 1)
    assert not K.plan(1, 16384, 2048, 32, row).one_row  # a large one: the dot
    assert K.plan(1, 2048, 2048, 32).block_n == K.BLOCK_N  # the dot's programs stay as wide
    wide = K.Tiles(one_row=True, row_programs=16)
    assert K.plan(1, 2048, 2048, 32, wide).block_n == K.BLOCK_N  # enough programs as they are
    v = K.plan(1, 512, 2048, 32, row)  # too few programs even at 16 columns: K split too
    assert v.one_row and v.block_n == 16 and v.splits > 1
    v = K.plan(1, 64, 4864, 256)  # 19 blocks: split by a divisor of the block count
    assert v is not None and v.k % v.k_per_program == 0 and v.k_per_program <= K.MAX_K_PER_PROGRAM


@pytest.mark.parametrize(
    "change, applies",
    [
        ({}, True),
        ({"m": 17}, False),
        ({"qt": "UINT8"}, False),  # 8-bit codes: lax
        ({"block": 8}, False),
        ({"slot": 0}, False),
        ({"trans_b": "NONE"}, False),
        ({"ft": "FLOAT32"}, True),
    ],
)
def test_epilogue_applies(change, applies):
    kw = {"m": 1, "n": 64, "k": 256, "block": 32, "zero": True, "ft": "FLOAT16", "qt": "UINT4"}
    slot, trans_b = change.pop("slot", 1), change.pop("trans_b", "TRANSPOSE")
    kw.update(change)
    deq, gemm = _descs(**kw)
    if trans_b == "NONE":
        b = T(kw["ft"], (1, 1, kw["k"], kw["n"]))
        gemm = dml.GemmOperatorDesc(gemm.a_tensor, b, None, gemm.output_tensor)
    found = fastpath.epilogue(deq, gemm, slot)
    assert (found is not None and found.lower is KP._lower) == applies


# ---------------------------------------------------------------------------------------------
# A MatMulNBits model traced for CUDA


def _nbits_model(rng, rows, n=128, k=256, block=32, bias=True):
    """A float16 MatMulNBits model: A {rows, K}, packed 4-bit B, packed zero points, bias."""
    from onnx import TensorProto, helper, numpy_helper

    blocks = k // block
    codes = rng.integers(0, 16, (n, k)).astype(np.uint8)
    zeros = rng.integers(0, 16, (n, blocks)).astype(np.uint8)
    inits = [
        numpy_helper.from_array(
            (codes[:, 0::2] | codes[:, 1::2] << 4).astype(np.uint8).reshape(n, blocks, -1), "B"
        ),
        numpy_helper.from_array(rng.uniform(0.01, 0.05, (n, blocks)).astype(np.float16), "s"),
        numpy_helper.from_array((zeros[:, 0::2] | zeros[:, 1::2] << 4).astype(np.uint8), "z"),
    ]
    names = ["A", "B", "s", "z"]
    if bias:
        inits.append(numpy_helper.from_array(rng.normal(0, 1, n).astype(np.float16), "bias"))
        names += ["", "bias"]
    node = helper.make_node(
        "MatMulNBits", names, ["y"], domain="com.microsoft", K=k, N=n, bits=4, block_size=block
    )
    graph = helper.make_graph(
        [node], "nbits",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT16, [rows, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [rows, n])], inits,
    )  # fmt: skip
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10)


@pytest.fixture
def forced_cuda(monkeypatch):
    """CUDA's choice on this machine, the kernel in interpret mode; records its calls."""
    with forced_cuda_kernel(
        monkeypatch, K, "int4_product", lambda *a: tuple(x.shape for x in a)
    ) as calls:
        yield calls


@pytest.mark.parametrize("rows, taken", [(1, True), (16, True), (32, False)])
def test_matmul_nbits_traced_for_cuda(rows, taken, forced_cuda):
    from dml_jax.onnx import InferenceSession

    rng = np.random.default_rng(rows)
    model = _nbits_model(rng, rows)
    x = rng.standard_normal((rows, 256)).astype(np.float16)
    want = InferenceSession(model.SerializeToString(), fast_paths=False).run(None, {"A": x})[0]
    s = InferenceSession(model.SerializeToString())
    with fastpath.target_platform("cuda"):
        text = str(jax.make_jaxpr(s.fn)(x))
        got = np.asarray(jax.jit(s.fn)(x)[0])
    assert ("pallas_call" in text) == taken
    assert bool(forced_cuda) == taken
    assert "DEQUANTIZE" in s.explain() and "GEMM" in s.explain()
    tol = 2.0**-9 * np.abs(want).max()  # float16: a unit of the largest value, summation order
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2.0**-9,
                               atol=tol)  # fmt: skip
    if taken:  # derivatives come from the lax lowerings of the two nodes
        grad = jax.grad(lambda v: s.fn(v)[0].astype(jnp.float32).sum())
        with fastpath.target_platform("cuda"):
            g = grad(jnp.asarray(x))
        want_g = jax.grad(lambda v: s.fn(v)[0].astype(jnp.float32).sum())(jnp.asarray(x))
        np.testing.assert_allclose(np.asarray(g, np.float32), np.asarray(want_g, np.float32))


@pytest.mark.skipif(not fastpath.cuda_present(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("rows", [1, 8])
def test_gpu_matmul_nbits_matches_lax(rows):
    from dml_jax.onnx import InferenceSession

    rng = np.random.default_rng(rows)
    model = _nbits_model(rng, rows, n=2048, k=2048).SerializeToString()
    x = rng.standard_normal((rows, 2048)).astype(np.float16)
    got = InferenceSession(model).run(None, {"A": x})[0]
    want = InferenceSession(model, fast_paths=False).run(None, {"A": x})[0]
    tol = 2.0**-9 * np.abs(want).max()
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2.0**-9,
                               atol=tol)  # fmt: skip


# ---------------------------------------------------------------------------------------------
# The RMS normalization before the product (the pair's prologue)


def _product_and_bound(a, q, scale, z, sizes: tuple) -> tuple:
    """The product of float16 A ``a`` (a prologue's value, in NumPy) through DEQUANTIZE and
    GEMM's lax lowerings, and how far a kernel computing A itself may be from it: a unit of
    float16 in each value of A times its weights (it may round the other way), the kernel's
    own rounding and a unit of the result's."""
    w, want = _lax(*_descs(*sizes), jnp.asarray(a), q, scale, z)
    slack = np.spacing(np.abs(a).astype(np.float16)).astype(np.float64) @ np.abs(w).T
    bound = np.abs(a.astype(np.float64)) @ np.abs(w).T
    ulp = np.spacing(np.abs(want).astype(np.float16)).astype(np.float64)
    return want, ulp + 2.0**-20 * bound + slack


def _normed_reference(x, gamma, eps, once=False):
    """A LLaMA export's RMSNorm of float16 rows as its nodes compute it, in NumPy: float32
    ``x / sqrt(mean(x^2) + eps)`` rounded to float16, times gamma, rounded again; ``once``:
    times gamma in float32, rounded once (the model builder's SimplifiedLayerNormalization)."""
    w = np.asarray(x, np.float32)
    r = np.float32(1) / np.sqrt(np.mean(w * w, axis=-1, keepdims=True) + np.float32(eps))
    if once:
        return (w * r * np.asarray(gamma, np.float32)).astype(np.float16)
    y = (w * r).astype(np.float16).astype(np.float32)
    return (np.asarray(gamma, np.float32) * y).astype(np.float16)


@pytest.mark.parametrize("k, zero, split, once", [
    (512, True, False, False), (1024, False, True, False), (512, True, True, True),
])  # fmt: skip
def test_interpret_normalized_a(k, zero, split, once, rng):
    """The kernel that normalizes A as it reads it, against the product of the normalized A
    (NumPy) through DEQUANTIZE and GEMM's lax lowerings: each normalized value may round the
    other way at most (a sum of squares in another order, another rsqrt), so the bound is a
    unit of float16 in each value of A times its weights, beside the kernel's own."""
    n, block, eps = 64, 32, 1e-6
    tiles = K.Tiles(target_programs=8, min_k=128) if split else K.Tiles(target_programs=1)
    x, q, scale, z = _arrays(rng, 1, n, k, block, zero, jnp.float16)
    x = x * 3.0
    gamma = jnp.asarray(rng.uniform(0.5, 1.5, (1, k)), jnp.float16)
    v = K.plan(1, n, k, block, tiles)
    assert v.widen_row and v.bytes_form and (v.splits > 1) == split
    codes = jax.lax.bitcast_convert_type(q.reshape(n, k // 2, 2), jnp.uint8)
    got = K.int4_product(x, codes, scale, z, interpret=not fastpath.cuda_present(), tiles=tiles,
                         norm=(gamma, eps, once))  # fmt: skip
    a = _normed_reference(x, gamma, eps, once)
    want, within = _product_and_bound(a, q, scale, z, (1, n, k, block, zero))
    assert np.all(np.abs(np.asarray(got, np.float64) - want) <= within)
    # and a wrong factor is seen: A not normalized at all
    plain = K.int4_product(x, codes, scale, z, interpret=not fastpath.cuda_present(), tiles=tiles)
    assert np.abs(np.asarray(plain, np.float64) - want).max() > 10 * within.max()


def _scalars() -> list:
    """The RMSNorm's scalars as Constant nodes, as the exporter writes them."""
    from onnx import helper, numpy_helper

    return [
        helper.make_node("Constant", [], [name], value=numpy_helper.from_array(
            np.asarray(value, np.float32), name))
        for name, value in (("two", 2.0), ("eps", 1e-6), ("one", 1.0))
    ]  # fmt: skip


def _rms_run_nodes(x: str, out: str, p: str = "", mean: bool = False, gamma: bool = True) -> list:
    """A LLaMA export's RMSNorm of ``x`` into ``out`` (names prefixed ``p``): Cast, Pow,
    ReduceMean, Add, Sqrt, Div, Mul, Cast, Mul by ``p + "gamma"``; ``mean``: the mean taken
    out first (a layer norm, not an RMS normalization); without ``gamma`` the last Mul left
    out."""
    from onnx import TensorProto, helper

    f32, f16 = TensorProto.FLOAT, TensorProto.FLOAT16
    nodes = [helper.make_node("Cast", [x], [p + "x32"], to=f32)]
    src = p + "x32"
    if mean:
        nodes += [helper.make_node("ReduceMean", [src], [p + "mu"], axes=[-1], keepdims=1),
                  helper.make_node("Sub", [src, p + "mu"], [p + "xc"])]  # fmt: skip
        src = p + "xc"
    nodes += [
        helper.make_node("Pow", [src, "two"], [p + "sq"]),
        helper.make_node("ReduceMean", [p + "sq"], [p + "ms"], axes=[-1], keepdims=1),
        helper.make_node("Add", [p + "ms", "eps"], [p + "mse"]),
        helper.make_node("Sqrt", [p + "mse"], [p + "rms"]),
        helper.make_node("Div", ["one", p + "rms"], [p + "inv"]),
        helper.make_node("Mul", [src, p + "inv"], [p + "y32"]),
        helper.make_node("Cast", [p + "y32"], [p + "y16" if gamma else out], to=f16),
    ]
    if gamma:
        nodes.append(helper.make_node("Mul", [p + "gamma", p + "y16"], [out]))
    return nodes


def _rms_nbits_model(rng, rows, k=256, n=128, block=32, layer_norm=False, gamma=True,
                     builder=None):  # fmt: skip
    """x float16 {1, rows, K} -> a LLaMA export's RMSNorm (Cast, Pow, ReduceMean, Add, Sqrt, Div,
    Mul, Cast, Mul by gamma) -> MatMulNBits; ``layer_norm``: the mean taken out too (not an RMS
    normalization); without ``gamma`` the last Mul left out; ``builder``: one normalization
    node of that op type by gamma instead (the model builder's SimplifiedLayerNormalization,
    or a SkipLayerNormalization of x and x: its mean taken out)."""
    from onnx import TensorProto, helper, numpy_helper

    base = _nbits_model(rng, rows, n=n, k=k, block=block, bias=False)
    f16 = TensorProto.FLOAT16
    scale = numpy_helper.from_array(rng.uniform(0.5, 1.5, k).astype(np.float16), "gamma")
    inits = list(base.graph.initializer) + [scale]
    if builder:
        if builder.startswith("Skip"):  # com.microsoft's: x + x normalized
            nodes = [helper.make_node(builder, ["x", "x", "gamma"], ["A"], epsilon=1e-6,
                                      domain="com.microsoft")]  # fmt: skip
        else:
            nodes = [helper.make_node(builder, ["x", "gamma"], ["A"], axis=-1, epsilon=1e-6)]
    else:
        nodes = _scalars() + _rms_run_nodes("x", "A", mean=layer_norm, gamma=gamma)
    # two products of the normalized A, as a decoder's q, k and v (ParallelQuantizedGemms
    # joins them: one GEMM, whose SPLIT reads it in the GEMM's own sizes)
    (product,) = base.graph.node
    for i in (0, 1):
        nodes.append(helper.make_node(
            "MatMulNBits", ["A", "B", "s", "z"], [f"y{i}"], domain="com.microsoft",
            **{a.name: helper.get_attribute_value(a) for a in product.attribute},
        ))  # fmt: skip
    halves = [helper.make_tensor_value_info(f"y{i}", f16, [1, rows, n]) for i in (0, 1)]
    graph = helper.make_graph(  # {batch, sequence, hidden}, as a decoder's step
        nodes, "rms_nbits", [helper.make_tensor_value_info("x", f16, [1, rows, k])], halves, inits
    )
    return helper.make_model(graph, opset_imports=list(base.opset_import), ir_version=10)


@contextlib.contextmanager
def _prologues_recorded(monkeypatch):
    """CUDA's choice on this machine, the kernel in interpret mode; records whether each call
    normalized A ("norm") or not ("plain")."""
    with forced_cuda_kernel(monkeypatch, K, "int4_product", lambda *a: None) as calls:
        original = K.int4_product

        def recorded(*args, **kw):
            calls.append("norm" if kw.get("norm") is not None else "plain")
            return original(*args, **kw)

        monkeypatch.setattr(K, "int4_product", recorded)
        yield calls


@pytest.fixture
def forced_cuda_norm(monkeypatch):
    """``_prologues_recorded`` with the exporter's RMS prologue on."""
    monkeypatch.setattr(KP, "RMS_PROLOGUE", True)
    with _prologues_recorded(monkeypatch) as calls:
        yield calls


def _gradients_agree(s, x) -> None:
    """The derivatives of session ``s``'s first output's sum at ``x`` traced for CUDA (the
    prologue's run and pair differentiated through their lax lowerings) equal those traced
    for this platform."""
    grad = jax.grad(lambda v: s.fn(v)[0].astype(jnp.float32).sum())
    with fastpath.target_platform("cuda"):
        g = grad(jnp.asarray(x))
    want_g = jax.grad(lambda v: s.fn(v)[0].astype(jnp.float32).sum())(jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(g, np.float32), np.asarray(want_g, np.float32))


@pytest.mark.parametrize("rows, form, normed", [
    (1, "rms", True), (1, "layer_norm", False), (1, "no_gamma", False), (2, "rms", False),
    (1, "switched_off", False), (1, "builder", True), (2, "builder", False),
    (1, "builder_layer_norm", False), (1, "builder_switched_off", False),
])  # fmt: skip
def test_rms_norm_run_into_the_kernel(rows, form, normed, forced_cuda_norm, rng, monkeypatch):
    """A decode step's RMSNorm before a MatMulNBits becomes the kernel's prologue (one row, the
    whole run: CAST, the normalization, CAST, the gamma MULTIPLY) where ``RMS_PROLOGUE`` is on:
    the output agrees with the session without fast paths; the model builder's
    SimplifiedLayerNormalization (one MEAN_VARIANCE_NORMALIZATION2 by gamma) too, where
    ``RMS_SCALED_PROLOGUE`` is on; a LayerNorm (mean taken out, as nodes or one
    SkipLayerNormalization), a run without gamma, two rows and either switch off keep the
    plain kernel. Each form runs with the other form's switch off: neither depends on it."""
    from dml_jax.onnx import InferenceSession

    builder = form.startswith("builder")
    monkeypatch.setattr(KP, "RMS_PROLOGUE", not builder and form != "switched_off")
    monkeypatch.setattr(KP, "RMS_SCALED_PROLOGUE", builder and form != "builder_switched_off")

    model = _rms_nbits_model(rng, rows, layer_norm=form == "layer_norm", gamma=form != "no_gamma",
                             builder={"builder": "SimplifiedLayerNormalization",
                                      "builder_switched_off": "SimplifiedLayerNormalization",
                                      "builder_layer_norm": "SkipLayerNormalization"}.get(form))  # fmt: skip
    x = (rng.standard_normal((1, rows, 256)) * 4).astype(np.float16)
    data = model.SerializeToString()
    want = np.concatenate(InferenceSession(data, fast_paths=False).run(None, {"x": x}), -1)
    s = InferenceSession(data)
    with fastpath.target_platform("cuda"):
        got = np.concatenate([np.asarray(y) for y in jax.jit(s.fn)(x)], -1)
    calls = [c for c in forced_cuda_norm if c is not None]
    assert calls == ["norm" if normed else "plain"]
    tol = 2.0**-8 * np.abs(want).max()  # float16: a unit of A's values and of the sums
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2.0**-8,
                               atol=tol)  # fmt: skip
    if normed:
        _gradients_agree(s, x)


def test_the_prologue_is_registered_once(monkeypatch):
    """The RMS runs are the 4-bit pair's prologues, the exporter's four nodes first and the
    model builder's one after (docs/fast-paths.md's table derives from the registry);
    registering a name twice is refused."""
    (pair,) = [e for e in fastpath.epilogues() if e.lower is KP._lower]
    found, scaled = fastpath.prologues(pair)
    assert (found.name, found.slot, found.longest) == ("rms", 0, 4)
    assert (scaled.name, scaled.slot, scaled.longest) == ("rms_scaled", 0, 1)
    assert found in fastpath.prologues()
    monkeypatch.setitem(
        fastpath._PROLOGUES, found.epilogue, dict(fastpath._PROLOGUES[found.epilogue])
    )
    with pytest.raises(ValueError, match="already registered"):
        fastpath.register_prologue(pair, 0, "rms", KP._rms_run, KP._lower_rms_run, 4)


def test_repeated_blocks_rolled_keep_their_prologue(forced_cuda_norm, rng):
    """Four blocks of a residual stream (RMSNorm, MatMulNBits, the addition back) with
    ``roll_repeats``: the blocks after the first run as one loop whose step is the prologue's
    kernel (traced twice: the first block, the loop's body), the output that of the session
    without fast paths."""
    from onnx import TensorProto, helper, numpy_helper

    from dml_jax.onnx import InferenceSession

    k, block = 128, 32
    f16 = TensorProto.FLOAT16
    nodes, inits, x = _scalars(), [], "x"
    for b in range(4):
        p = f"b{b}_"
        product = _nbits_model(rng, 1, n=k, k=k, block=block, bias=False)
        for init in product.graph.initializer:
            inits.append(numpy_helper.from_array(numpy_helper.to_array(init), p + init.name))
        gamma = rng.uniform(0.5, 1.5, k).astype(np.float16)
        inits.append(numpy_helper.from_array(gamma, p + "gamma"))
        nodes += _rms_run_nodes(x, p + "a", p)
        nodes.append(helper.make_node(
            "MatMulNBits", [p + "a", p + "B", p + "s", p + "z"], [p + "y"],
            domain="com.microsoft", K=k, N=k, bits=4, block_size=block,
        ))  # fmt: skip
        nodes.append(helper.make_node("Add", [x, p + "y"], [p + "out"]))
        x = p + "out"
    io = [helper.make_tensor_value_info(name, f16, [1, 1, k]) for name in ("x", x)]
    graph = helper.make_graph(nodes, "blocks", io[:1], io[1:], inits)
    data = helper.make_model(graph, opset_imports=list(product.opset_import), ir_version=10)
    data = data.SerializeToString()
    v = (rng.standard_normal((1, 1, k)) * 4).astype(np.float16)
    want = InferenceSession(data, fast_paths=False).run(None, {"x": v})[0]
    s = InferenceSession(data, roll_repeats=True)
    with fastpath.target_platform("cuda"):
        got = np.asarray(jax.jit(s.fn)(v)[0])
        rolled = s.program([(1, 1, k)]).graph.rolled
    assert [c for c in forced_cuda_norm if c is not None] == ["norm", "norm"]
    assert len(rolled) == 1 and rolled[0].repeats == 4
    tol = 2.0**-8 * np.abs(want).max()
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2.0**-8,
                               atol=tol)  # fmt: skip
