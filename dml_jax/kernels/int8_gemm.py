"""An int8 x int8 -> int32 GEMM (Pallas, Triton) with the zero-point terms in its epilogue: the
CUDA fast path of MATRIX_MULTIPLY_INTEGER, MATRIX_MULTIPLY_INTEGER_TO_FLOAT (8-bit operands) and
QUANTIZED_LINEAR_MATRIX_MULTIPLY.

The lax lowering (``ops._quant.zero_point_product``) is one int8 dot with an int32 result, which XLA
hands to cuBLAS, and the zero points applied outside it (``(x - a)(y - b) = xy - a * colsum(y) - b *
rowsum(x) + K * a * b``). On an H200 (jax 0.11.2) XLA's int8 dot runs 636 TOPS at M = N = K = 4096,
below its own float16 dot (772 TFLOP/s), and the zero-point terms are a further pass over the int32
result. Here (benchmarks/int8_gemm_probe.py (git history), benchmarks/RESULTS.md#quantized) Triton's
warpgroup int8 MMA (IGMMA) with 128 x 128 x 128 blocks on 8 warps and 3 pipeline stages runs 1088
TOPS at 4096^3 and 1182 at 8192^3 (XLA int8: 972), provided B is K-major: B is transposed to {N, K}
first (with {K, N} blocks Triton moves every B tile through registers to transpose it, 52-240 TOPS).
The zero-point terms are outer products of a vector over M and one over N (the row and column sums
come from XLA, one read of A and B), added to the accumulator before it is stored.

Exact: the products and sums are int32, and K is at most ``MAX_K`` (2^17), so that no partial
sum of 8-bit products can leave int32 (|sum| <= 2^14 * K); the epilogue's int32 arithmetic
wraps as the lax lowering's does (modulo 2^32). The result equals the lax lowering's bit for
bit (tests/test_int8_gemm_kernel.py).

``plan`` takes M, N and K that are multiples of the blocks (128), batch dimensions that are
either all 1 or the broadcast batch shape on each side, and K <= MAX_K; anything else stays with
lax.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..fastpath import register_fast_path
from .pallas_helpers import load_pallas

# Tunables, chosen by benchmarks/int8_gemm_probe.py (git history) on an H200
# (benchmarks/RESULTS.md#quantized): 128 x 128 x 128 on 8 warps, 3 stages: 1088 / 1182 TOPS at
# 4096^3 / 8192^3; 128 x 128 x 64 on 4 warps 927 / 980; 8 warps 844 / 942; 128 x 256 and 256 x 128
# blocks spilled (675-771).
BLOCK_M = 128
BLOCK_N = 128
BLOCK_K = 128
WARPS = 8
STAGES = 3
MAX_K = 1 << 17  # |partial sums| <= 2^14 * K < 2^31


@dataclass(frozen=True)
class View:
    """``batch`` products (``a_batch`` and ``b_batch`` of them distinct on each side: 1 or
    ``batch``) of {M, K} by {K, N}, in blocks of ``bm`` x ``bn`` x ``bk``."""

    batch: int
    a_batch: int
    b_batch: int
    m: int
    n: int
    k: int
    bm: int
    bn: int
    bk: int
    warps: int
    stages: int


def plan(a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> View | None:
    """The kernel's view of ``a_shape`` {B.., M, K} times ``b_shape`` {B.., K, N}, or None."""
    if len(a_shape) < 2 or len(b_shape) != len(a_shape):
        return None
    (m, k), (k2, n) = a_shape[-2:], b_shape[-2:]
    if k != k2 or k > MAX_K or m % BLOCK_M or n % BLOCK_N or k % BLOCK_K or 0 in (m, n, k):
        return None
    try:
        batch_shape = np.broadcast_shapes(a_shape[:-2], b_shape[:-2])
    except ValueError:
        return None
    sides = []
    for shape in (a_shape[:-2], b_shape[:-2]):
        if all(s == 1 for s in shape):
            sides.append(1)
        elif tuple(shape) == tuple(batch_shape):
            sides.append(math.prod(shape))
        else:
            return None  # broadcast in some batch dimensions only: lax
    batch = math.prod(batch_shape)
    return View(batch, *sides, m, n, k, BLOCK_M, BLOCK_N, BLOCK_K, WARPS, STAGES)


def _vector(v, batch_shape: tuple[int, ...], size: int, axis: int):
    """A zero point or a sum broadcasting to {B.., size, 1} (``axis`` -2) or {B.., 1, size}
    (``axis`` -1) as {1 or batch, size} int32."""
    v = jnp.asarray(v, jnp.int32)
    lead = v.shape[:-2]
    target = (size, 1) if axis == -2 else (1, size)
    if all(s == 1 for s in lead):
        return jnp.broadcast_to(v.reshape(v.shape[-2:]), target).reshape(1, size)
    full = tuple(batch_shape) + target
    return jnp.broadcast_to(v, full).reshape(math.prod(batch_shape), size)


def int8_product(x, x_zero, y, y_zero, interpret: bool = False, shared_b: bool = False):
    """``_zero_point_product``'s result (int32, {B.., M, N}) for int8 ``x`` {B.., M, K} and
    ``y`` {B.., K, N}, ``x_zero`` broadcasting to {.., M, 1} and ``y_zero`` to {.., 1, N}
    (int32 arrays, or None for 0), on the kernel ``plan`` gives.

    ``shared_b``: every batch index of ``y`` (and of ``y_zero``) holds the same matrix (its
    desc broadcasts it with stride 0: a model's weight read by a batched A). The batch then
    folds into M, one product of {B * M, K} by one {K, N}: the kernel does not take ``y``
    materialized once a batch index (a dynamically quantized BERT-base's projections at 32
    sequences read 32 copies of each weight, 3.3 ms of broadcasts a call on an H200)."""
    if shared_b and x.ndim > 2 and (y_zero is None or y_zero.size == y_zero.shape[-1]):
        lead, (m, k) = x.shape[:-2], x.shape[-2:]
        flat = (math.prod(lead) * m,)
        if plan(flat + (k,), y.shape[-2:]) is not None:
            xz = None
            if x_zero is not None:
                xz = jnp.broadcast_to(x_zero, lead + (m, 1)).reshape(flat + (1,))
            yz = None if y_zero is None else y_zero.reshape(1, y_zero.shape[-1])
            y1 = y[(0,) * (y.ndim - 2)]
            out = int8_product(x.reshape(flat + (k,)), xz, y1, yz, interpret)
            return out.reshape(lead + (m, out.shape[-1]))
    pl, pltriton = load_pallas()
    v = plan(x.shape, y.shape)
    batch_shape = tuple(np.broadcast_shapes(x.shape[:-2], y.shape[:-2]))
    m, n, k, bm, bn, bk = v.m, v.n, v.k, v.bm, v.bn, v.bk
    x3 = lax.reshape(x, (v.a_batch, m, k))
    yt = jnp.swapaxes(lax.reshape(y, (v.b_batch, k, n)), 1, 2)  # {B, N, K}: K-major for IGMMA
    # The zero-point terms as outer products u (over M) x w (over N), added in int32.
    terms = []
    if x_zero is not None:
        # B's column sums as row sums of the transposed B, behind a barrier so that XLA does not
        # fold the transpose back into a column reduction (int8 into int32 over 4096 x 4096: 45 us
        # as a column reduction, about 4 us along rows; H200, benchmarks/RESULTS.md#quantized).
        yt = lax.optimization_barrier(yt)
        cs = jnp.sum(yt, axis=-1, dtype=jnp.int32)  # {B, N}
        cs = cs.reshape(y.shape[:-2] + (1, n))
        terms.append((-_vector(x_zero, batch_shape, m, -2), _vector(cs, batch_shape, n, -1)))
    if y_zero is not None:
        rs = jnp.sum(x, axis=-1, keepdims=True, dtype=jnp.int32)  # {B.., M, 1}
        terms.append((_vector(rs, batch_shape, m, -2), -_vector(y_zero, batch_shape, n, -1)))
    if x_zero is not None and y_zero is not None:
        kx = jnp.int32(k) * _vector(x_zero, batch_shape, m, -2)
        terms.append((kx, _vector(y_zero, batch_shape, n, -1)))

    def kernel(x_ref, y_ref, *refs):
        *vector_refs, o_ref = refs

        def body(i, acc):
            a = x_ref[:, pl.ds(i * bk, bk)]
            b = y_ref[:, pl.ds(i * bk, bk)].T
            return acc + jnp.dot(a, b, preferred_element_type=jnp.int32)

        acc = lax.fori_loop(0, k // bk, body, jnp.zeros((bm, bn), jnp.int32))
        for u_ref, w_ref in zip(vector_refs[0::2], vector_refs[1::2]):
            acc = acc + u_ref[...][:, None] * w_ref[...][None, :]
        o_ref[...] = acc

    def pick(count: int):
        return (lambda b: b) if count > 1 else (lambda b: 0)

    xa, ya = pick(v.a_batch), pick(v.b_batch)
    specs = [
        pl.BlockSpec((None, bm, k), lambda b, i, j: (xa(b), i, 0)),
        pl.BlockSpec((None, bn, k), lambda b, i, j: (ya(b), j, 0)),
    ]
    args = [x3, yt]
    for u, w in terms:
        ua, wa = pick(u.shape[0]), pick(w.shape[0])
        specs.append(pl.BlockSpec((None, bm), lambda b, i, j, f=ua: (f(b), i)))
        specs.append(pl.BlockSpec((None, bn), lambda b, i, j, f=wa: (f(b), j)))
        args += [u, w]
    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((v.batch, m, n), jnp.int32),
        grid=(v.batch, m // bm, n // bn),
        in_specs=specs,
        out_specs=pl.BlockSpec((None, bm, bn), lambda b, i, j: (b, i, j)),
        interpret=interpret,
        compiler_params=pltriton.CompilerParams(num_warps=v.warps, num_stages=v.stages),
    )(*args)
    return lax.reshape(out, batch_shape + (m, n))


def _applies(d: Any) -> bool:
    a, b = d.a_tensor, d.b_tensor
    if max(a.data_type.bits, b.data_type.bits) > 8:
        return False  # INTEGER_TO_FLOAT's 16- and 32-bit operands: a float dot, not this
    return plan(a.sizes, b.sizes) is not None


def _register() -> None:
    from ..ops import quantized_matmul as Q

    for name, lower in (
        ("MATRIX_MULTIPLY_INTEGER", Q.lower_matrix_multiply_integer),
        ("MATRIX_MULTIPLY_INTEGER_TO_FLOAT", Q.lower_matrix_multiply_integer_to_float),
        ("QUANTIZED_LINEAR_MATRIX_MULTIPLY", Q.lower_quantized_matrix_multiply),
    ):
        register_fast_path(
            f"DML_OPERATOR_{name}",
            "kernel",
            _applies,
            lambda d, *arrays, lower=lower: lower(
                d, *arrays, product=functools.partial(int8_product, shared_b=shared_b(d))
            ),
        )


def shared_b(d: Any) -> bool:
    """Whether ``d``'s B (and its zero point) is one matrix read by every batch index of A:
    stride 0 (or size 1) on each batch dimension, where A has batch dimensions."""
    a, b = d.a_tensor, d.b_tensor
    if all(s == 1 for s in a.sizes[:-2]):
        return False
    tensors = [b] + [t for t in (getattr(d, "b_zero_point_tensor", None),) if t is not None]
    return all(
        all(n == 1 or st == 0 for n, st in zip(t.sizes[:-2], t.layout_strides[:-2]))
        for t in tensors
    )


_register()
