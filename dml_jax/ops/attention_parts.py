"""The pieces of MULTIHEAD_ATTENTION(1)'s lax lowering (``attention.py``): the sizes a valid
description implies (``Geometry``), the heads split out of Q, K and V, the past joined in front
of the new keys and values, the masks, the scaled logits, their exponentials and the weighted
values. ``kernels/attention.py`` builds on the same pieces."""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from ..enums import MultiheadAttentionMaskType as M
from ..fastpath import platform_choice
from ..precision import half_precision_allowed, matmul_precision
from ._common import wide


class Geometry(NamedTuple):
    """The sizes a valid description implies."""

    batch: int  # B
    seq: int  # S, query sequence length
    kv_seq: int  # Skv, new keys / values (0 when only the past holds them)
    past: int  # P, past sequence length (the cache capacity C with past lengths)
    total: int  # T, key positions attended: P + Skv, or C with past lengths
    q_heads: int  # Hq
    kv_heads: int  # Hkv
    head: int  # D, query / key head size
    v_head: int  # Dv, value head size
    lengths: bool  # PastSequenceLengthsTensor given


def narrow_products(d: Any) -> bool:
    """Whether Q, K and V enter the products as FLOAT16: FLOAT16 without BiasTensor. Widening
    them first would give the same float32 products (float16 times float16 is exact in float32)
    on float32 arithmetic instead of float16's."""
    return d.output_tensor.data_type.name == "FLOAT16" and d.bias_tensor is None


def split_heads(d: Any, g: Geometry, x: dict) -> tuple[Any, Any, Any]:
    """Q {B, S, Hq, D}, K {B, Skv, Hkv, D}, V {B, Skv, Hkv, Dv} (None when absent), widened
    unless ``narrow_products``."""
    b, s, skv, hq, hkv, dh, dv = g.batch, g.seq, g.kv_seq, g.q_heads, g.kv_heads, g.head, g.v_head
    widen = (lambda a: a) if narrow_products(d) else wide
    q = k = val = None
    if "QueryTensor" in x:
        q = widen(x["QueryTensor"]).reshape(b, s, hq, dh)
    if "StackedQueryKeyTensor" in x:
        qk = widen(x["StackedQueryKeyTensor"])
        q, k = qk[:, :, :, 0], qk[:, :, :, 1]
    if "StackedQueryKeyValueTensor" in x:
        qkv = widen(x["StackedQueryKeyValueTensor"])
        q, k, val = qkv[:, :, :, 0], qkv[:, :, :, 1], qkv[:, :, :, 2]
    if "KeyTensor" in x:
        k = widen(x["KeyTensor"]).reshape(b, skv, hkv, dh)
    if "StackedKeyValueTensor" in x:
        kv = widen(x["StackedKeyValueTensor"])
        k, val = kv[:, :, :, 0], kv[:, :, :, 1]
    if "ValueTensor" in x:
        val = widen(x["ValueTensor"]).reshape(b, skv, hkv, dv)
    if "BiasTensor" in x:
        bias = widen(x["BiasTensor"]).reshape(-1)
        nq, nk = hq * dh, hkv * dh
        q = q + bias[:nq].reshape(hq, dh)
        if k is not None:
            k = k + bias[nq : nq + nk].reshape(hkv, dh)
            val = val + bias[nq + nk :].reshape(hkv, dv)
    return q, k, val


def clamped_lengths(g: Geometry, lengths):
    # Values beyond these bounds act like the bounds (no position is valid / every one is); the
    # clamp keeps the position arithmetic below inside int32.
    reach = g.past + g.kv_seq + g.seq + 1
    return jnp.clip(lengths.reshape(g.batch).astype(jnp.int32), -reach, reach)


def with_past(g: Geometry, new, past, lengths):
    """The present {B, Hkv, T, size}: ``new`` {B, Hkv, Skv, size} after ``past``, or (with
    lengths) written into the cache ``past`` at [L_b, L_b + Skv), dropping what falls outside."""
    if past is None:
        return new
    if lengths is None:
        return past if new is None else jnp.concatenate([past, new], axis=2)
    if new is None:
        return past
    b, h, c, size = past.shape
    pos = lax.broadcasted_iota(jnp.int32, (b, 1, c, 1), 2)
    offset = pos - lengths.reshape(b, 1, 1, 1)
    take = (offset >= 0) & (offset < g.kv_seq)
    index = jnp.broadcast_to(jnp.clip(offset, 0, g.kv_seq - 1), (b, h, c, size))
    return jnp.where(take, jnp.take_along_axis(new, index, axis=2), past)


def attended_rows(g: Geometry, present, lengths):
    """The present {B, Hkv, T, size} as the attention reads it with lengths: its rows from
    each sequence's end ``L_b + Skv`` on set to 0, rows no query attends (a NaN or an infinity
    the cache holds there would otherwise reach the output through a weight of 0)."""
    row = lax.broadcasted_iota(jnp.int32, (1, 1, g.total, 1), 2)
    end = lengths.reshape(g.batch, 1, 1, 1) + g.kv_seq
    return jnp.where(row < end, present, jnp.zeros((), present.dtype))


def keep_mask(d: Any, g: Geometry, mask):
    """(keep {B, 1 or Hq, S, T} bool, additive) for the sequence-length mask types: positions
    where keep is False are set to MaskFilterValue."""
    b, s, t = g.batch, g.seq, g.total
    j = lax.broadcasted_iota(jnp.int32, (b, 1, s, t), 3)
    m = mask.reshape(-1).astype(jnp.int32)
    if d.mask_type is M.KEY_SEQUENCE_LENGTH:
        return j < m.reshape(b, 1, 1, 1)
    if d.mask_type is M.KEY_SEQUENCE_END_START:
        end, start = m[:b].reshape(b, 1, 1, 1), m[b:].reshape(b, 1, 1, 1)
        return (j >= start) & (j < end)
    # KEY_QUERY_SEQUENCE_LENGTH_START_END: query token (b, i) is flattened to b * S + i and key
    # position (b, j) to b * T + j; they meet when some batch c's query range [qs[c], qs[c+1])
    # holds the first and its key range [ks[c], ks[c] + keyLength[c]) the second.
    length, qs, ks = m[:b], m[b : 2 * b + 1], m[2 * b + 1 :]
    bi = lax.broadcasted_iota(jnp.int32, (1, b, 1, s, t), 1)
    query = bi * s + lax.broadcasted_iota(jnp.int32, (1, b, 1, s, t), 3)
    key = bi * t + lax.broadcasted_iota(jnp.int32, (1, b, 1, s, t), 4)

    def per_c(a):
        return a.reshape(b, 1, 1, 1, 1)

    inside_q = (query >= per_c(qs[:b])) & (query < per_c(qs[1:]))
    inside_k = (key >= per_c(ks[:b])) & (key < per_c(ks[:b]) + per_c(length))
    return jnp.any(inside_q & inside_k, axis=0)


def exponentials(logits, valid=None, rows=None):
    """softmax over the key positions (the last axis of {B, Hq, S, T}), in float32, with its
    division left to the caller: (the exponentials ``exp(logit - row maximum)``, the row's
    divisor {..., 1}). ``lower_attention`` multiplies the exponentials by the values and divides
    the {S, Dv} product by the divisor, the same sums as normalizing the S x T weights first
    (float32 roundings apart) without writing and reading them once more.

    ``rows``: where a row spans several tiles (``_causal_tiles``), ``(combine, spread)``:
    ``combine(a, reduce)`` reduces the tiles' values {..., tiles, rows, 1} to the rows', and
    ``spread(a)`` takes the rows' back to the tiles; the divisor is then the rows'.

    A row whose maximum is not finite (all -inf, or a +inf or NaN logit) has no normalization
    and gives NaN (SOFTMAX's rule). Positions outside ``valid`` take no weight; a row with no
    valid position gives 0.

    Every case is settled on the divisor: NaN where the maximum is not finite, 1 where no
    position is valid (its exponentials are all exp(-inf) = 0). No select touches the S x T
    tensor: the selects this replaced on the exponent and on the quotient were each a pass of
    their own over it in XLA's CPU program. The exponent never sees ``-inf - -inf``: a row
    whose maximum is not finite subtracts 0 (XLA's CPU code for ``exp`` of that NaN gave
    arbitrary numbers). The divisor is never NaN for a row that gives 0, so its gradient is 0
    there, not NaN.
    """
    combine, spread = rows or (lambda a, reduce: a, lambda a: a)
    if valid is not None:
        logits = jnp.where(valid, logits, -jnp.inf)
    top = lax.stop_gradient(combine(jnp.max(logits, axis=-1, keepdims=True), jnp.max))
    finite = jnp.isfinite(top)
    e = jnp.exp(logits - spread(jnp.where(finite, top, 0.0)))
    total = combine(jnp.sum(e, axis=-1, keepdims=True), jnp.sum)
    fallback = jnp.float32(jnp.nan)
    if valid is not None:
        fallback = jnp.where(jnp.any(valid, axis=-1, keepdims=True), fallback, 1.0)
    return e, jnp.where(finite, total, fallback)


def scaled_logits(d: Any, q, k, batch: int):
    """``Scale * Q K^T`` in float32: queries {..., s, D} against keys {..., t, D}, the first
    ``batch`` axes of both batched, {..., s, t}. Where half precision is allowed, FLOAT16
    logits are rounded to float16 (the product still accumulates in float32 where the backend
    does): the S x T tensor the softmax then reads twice is half as many bytes, most of the lax
    lowering's time at long sequences."""
    dims = tuple(range(batch))
    half = narrow_products(d) and half_precision_allowed()
    logits = lax.dot_general(
        q,
        k,
        (((q.ndim - 1,), (k.ndim - 1,)), (dims, dims)),
        precision=matmul_precision(),
        preferred_element_type=jnp.float16 if half else jnp.float32,
    )
    return logits.astype(jnp.float32) * jnp.float32(d.scale)


def product_operands(w, values):
    """The second product's operands: the float32 weights and the values widened to float32,
    or, where half precision is allowed, FLOAT16 values and the weights rounded to float16."""
    if values.dtype == jnp.float16 and half_precision_allowed():
        return w.astype(jnp.float16), values
    return w, values.astype(jnp.float32)


def weighted_values(w, values):
    """Weights {B, Hkv, G, S, T} (float32: the softmax's exponentials, in [0, 1]) times values
    {B, Hkv, T, Dv}: {B, S, Hkv, G, Dv} in float32 (``weights_product``)."""
    # {B, Hkv, G, S, Dv}: the S x T operand on the left, in its own layout (an einsum puts
    # the values first and transposes the product), then the small result moved.
    out = weights_product(w, values, (((4,), (2,)), ((0, 1), (0, 1))))
    return jnp.transpose(out, (0, 3, 1, 2, 4))


@functools.cache
def tf32_tensor_cores() -> bool:
    """No CUDA device of this process lacks TF32 tensor cores (compute capability 8.0 on,
    Ampere's); true where it has no CUDA device, so that a program lowered for CUDA elsewhere
    keeps the TF32 form."""
    try:
        devices = jax.devices("cuda")
    except RuntimeError:
        return True
    return all(float(getattr(d, "compute_capability", "0") or 0) >= 8.0 for d in devices)


def weights_product(w, values, dims):
    """The float32 weights ``w`` times ``values`` (``lax.dot_general``'s ``dims``), in
    float32 at the lowering's precision (``matmul_precision``): FLOAT16 values widened
    (exactly) to float32; where half precision is allowed, FLOAT16 values meet the weights
    rounded to float16 (float32 accumulation).

    On CUDA GPUs with TF32 tensor cores (``tf32_tensor_cores``) the float32 product of
    FLOAT16 values runs on them as three products (``DotAlgorithmPreset.TF32_TF32_F32_X3``:
    each operand split into a TF32 head and a TF32 remainder, the remainders' product left
    out). A FLOAT16 value is a TF32 number (11 significant bits, a narrower exponent range), so
    its remainder is 0 and the one term left out is 0: the weights enter to 22 bits, within
    float32 rounding of the float32 product (on an H100 its error against float64 was no larger
    than ``HIGHEST``'s), on arithmetic several times faster than float32's (the GPT stack of
    ``examples/networks.py``, 8 x 1024 tokens on an H100: 16.5 -> 15.9 ms; docs/semantics.md).
    Other backends multiply in float32 (``lax.Precision.HIGHEST``).

    The weights do not enter as scaled float16 pieces (``precision.pieces_product``): a piece
    is a weight times 2**14, and a value above 4 in magnitude makes their product overflow
    float16, which XLA's GPU compiler lets happen where it fuses the product (an infinite
    output where one key takes all the weight; found on an H100). TF32 has float32's exponent
    range.
    """
    w, wide = product_operands(w, values)

    def product(algorithm):
        return lambda a, b: lax.dot_general(
            a, b, dims, precision=algorithm, preferred_element_type=jnp.float32
        )

    exact = product(matmul_precision())
    if values.dtype != jnp.float16 or half_precision_allowed() or not tf32_tensor_cores():
        return exact(w, wide)
    tensor_cores = product(lax.DotAlgorithmPreset.TF32_TF32_F32_X3)
    return platform_choice(w, wide, cuda=tensor_cores, default=exact)


def attend(d: Any, qg, keys, values, rpb, masked, valid):
    """Queries {B, Hkv, G, s, D} against keys {B, Hkv, t, D} and values {B, Hkv, t, Dv}: the
    attention's {B, s, Hkv, G, Dv} in float32. ``rpb``: the relative position bias {B, Hq, s,
    t} or None; ``masked``: the mask applied to the scaled logits {B, Hq, s, t}; ``valid``:
    positions that take a weight at all (``exponentials``), or None."""
    b, hkv, group, s = qg.shape[:4]
    t = keys.shape[2]
    logits = scaled_logits(d, qg, keys, 2).reshape(b, hkv * group, s, t)
    if rpb is not None:
        logits = logits + rpb
    e, divisor = exponentials(masked(logits), valid)

    # The exponentials times the values, then divided by the row's sum: {B, s, Hkv, G, Dv}.
    eg = e.reshape(b, hkv, group, s, t)
    divisor = jnp.transpose(divisor.reshape(eg.shape[:-1] + (1,)), (0, 3, 1, 2, 4))
    return weighted_values(eg, values) / divisor
