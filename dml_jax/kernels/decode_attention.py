"""MULTIHEAD_ATTENTION and MULTIHEAD_ATTENTION1 for one query position (a decoder's step) as
one Pallas (Triton) kernel: each program takes one query head of one sequence, reads its key
and value head's past and new positions in blocks, and keeps the softmax's running maximum and
sum (the online softmax of flash attention), so the logits, their exponentials and the
weighted values never leave the multiprocessor.

The lax lowering of such a step is some six kernels a layer on a GPU (the logits' product, the
mask and scale, the row's maximum, the exponentials' sum, the weights and the second product),
and its present keys and values are the past joined to the new ones, two more kernels: a
1B-class decoder's step launches about 320 small kernels (benchmarks/experiments/README.md,
``decode_step_gpu.py --dump-hlo``). Here the past and the new positions are read where they
are, so a reader of the presents that wants only the new positions (a ``Generator``'s cache
write) leaves the join to be removed by XLA.

The sums are the lax lowering's (``ops/attention_parts.py``) to float32 rounding: the logits
``Scale * q . k`` in float32 (float16 products are exact in float32), rounded to float16 first
where half precision is allowed, as ``scaled_logits``; the mask as the lax lowering applies it
(a BOOLEAN mask adds MaskFilterValue, the sequence-length masks replace the logit with it);
``exp(logit - maximum)`` times the values, divided by their sum, with the weights rounded to
float16 where half precision is allowed and the values are float16, as ``product_operands``; a
row whose maximum is not finite gives NaN. The running maximum rescales the partial sums as it
grows (another order of the same float32 sums). The output is rounded once to its type.

It applies to one query position (S = 1), with head sizes that are powers of two up to
``MAX_HEAD``. With MULTIHEAD_ATTENTION1's PastSequenceLengthsTensor (a model-builder
GroupQueryAttention step's cache: each sequence's L_b positions first in a buffer of capacity
C) and neither a mask nor a relative position bias (``PAST_LENGTHS``), a program reads its
sequence's length and takes the past's positions [0, min(L_b, C)) and the new ones at [L_b,
L_b + Skv) that fall inside [0, C), as the lax lowering attends them; a sequence left with no
position gives 0 there. Rows of more than ``SPLIT_KEYS`` keys are split among
programs (flash decoding: each split's running maximum, sum and weighted values, combined after
the call).

A decoder reaches it where the ONNX import makes its attention one node
(``onnx/optimize/attention.py``): the tiny LLaMA of tests/data/decoders, in float32 or converted
to float16, and the 1B-class float16 export (whose float16 probabilities pass through float32
and back, removed by ``optimize/casts.py``), at every past length (``MIN_KEYS_ONE_QUERY``),
the run-time mask as a RelativePositionBias shared by the heads (read once a sequence here).
Timed in that 1B-class decoder on an H200 (benchmarks/experiments/README.md, ``decode_step_gpu.py
--attention``): on, ahead of cuDNN's path.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..enums import MultiheadAttentionMaskType as M
from ..errors import Validator
from ..fastpath import register_fast_path
from ..ops import attention as A
from ..ops import attention_parts as P
from ..ops._common import wide
from ..precision import half_precision_allowed
from .pallas_helpers import load_pallas

# One H200, 2026-11-28, the 1B-class decoder (prompt 140, 64 new tokens: 257 keys with the
# bucket's padding), tokens/s in the generator's loop: float16 with cuDNN's path 867, this kernel
# 888 (SPLIT_KEYS 256) and 904 (64), the lax lowering 852 (an earlier process); its int4 export
# 1,039 / 1,140 / 1,144. On.
ON = True
BLOCK_KEYS = 64  # key positions a step of a program's loop
# Long rows of keys are split among programs (flash decoding), each over at least SPLIT_KEYS
# positions, at most MAX_SPLITS a query head: one program a query head alone is a few dozen
# programs for a batch of one, each a long serial loop. The splits' running maxima, sums and
# weighted values are combined after the call (lax, ``_combined``). In that decoder the kernel
# took 73 us a token at 256 (2 splits) and 44 at 64 (5 splits), with the combine's kernels
# besides.
SPLIT_KEYS = 64
MAX_SPLITS = 16
# Whether ``_combined`` merges the splits one after the other in elementwise operations on static
# slices, which XLA can take with the division by the sums in one loop fusion, rather than in
# one variadic reduction, which the 1B-class decoders' HLO on an H200 showed as two kernels a
# layer (the reduction, then the division and the select of NaN rows in a fusion of their own;
# benchmarks/experiments/README.md, 2026-11-30). Timed with ``int4_gemm.SPLIT_ADDS`` (one H200,
# 2026-11-30): fewer kernels (the float16 decoder 267 -> 253 a token) and no slower (float16
# 988 -> 1,001 tokens/s in the loop): on.
FOLD_SPLITS = True
MAX_HEAD = 256  # head sizes (a power of two) a program holds in registers
# Whether the kernel takes steps with past sequence lengths (the module docstring), which on a
# GPU go to cuDNN's attention otherwise (FLOAT16; FLOAT32 ones to the lax lowering). Timed in
# the 4-bit 1B-class decoder of the model-builder form on an H200 (``decode_step_gpu.py
# --builder --int4 --int4-only --set "" "...PAST_LENGTHS=True"``, three runs of 2026-11-29),
# tokens/s off / on: a dispatch a token (``generate_next_token``) 819 / 1,106, 829 / 977 and
# 783 / 1,123; in the generator's loop 1,114 / 1,107, 1,177 / 1,168 and 1,271 / 1,253. cuDNN's
# call costs the host more to issue (1,286 against 856 us a token in the last run): it wins the
# loop by 1-2% and loses the step a dispatch by a quarter to a third. On.
PAST_LENGTHS = True
NUM_WARPS = 4


def expressible(d: Any) -> bool:
    """Whether the kernel computes ``d``: one query position, FLOAT16 or FLOAT32, head sizes
    powers of two up to MAX_HEAD; past sequence lengths only where ``PAST_LENGTHS`` is on,
    with a past and neither a mask nor a relative position bias."""
    if d.output_tensor.data_type.name not in ("FLOAT16", "FLOAT32"):
        return False
    g = A.analyze(d, Validator(d.operator_type))
    if g.seq != 1 or g.total < 1:
        return False
    if g.lengths and not (
        PAST_LENGTHS
        and g.past > 0
        and d.mask_type is M.NONE
        and d.relative_position_bias_tensor is None
    ):
        return False
    return all(h & (h - 1) == 0 and 1 <= h <= MAX_HEAD for h in (g.head, g.v_head))


def applies(d: Any) -> bool:
    return ON and expressible(d)


def _rows(a, size: int):
    """{..., size} (or None) -> {rows, size}: a past {B, Hkv, P, D} a row a head and position,
    new keys {B, Skv, Hkv, D} a row a position (``size`` Hkv * D)."""
    return None if a is None else a.reshape(-1, size)


def decode_attention(
    d: Any, q, past_k, past_v, new_k, new_v, flags, bias=None, lengths=None, *,
    interpret: bool = False,
):  # fmt: skip
    """The attention of queries ``q`` {B * Hq, D} over, for each query head's key and value
    head, ``past_k`` / ``past_v`` {B * Hkv * P, D or Dv} (None where P is 0) and then
    ``new_k`` / ``new_v`` {B * Skv, Hkv * D or Hkv * Dv} (as the heads were split from them:
    no copy; None where Skv is 0). ``flags`` {B * Hq * T} int8 (or None: no mask) marks the
    positions the mask acts on: for a BOOLEAN mask those whose MaskFilterValue is added, for
    the others those kept. ``bias`` (or None): the RelativePositionBias in float32, {B * Hq *
    T} or, shared by the heads, {B * T}. ``lengths`` (or None): the past sequence lengths {B}
    int32, clamped (``attention_parts.clamped_lengths``); the positions [0, T) are then the
    cache's (T = P), the past's first L_b and the new ones from L_b. Returns {B * Hq, Dv} in
    the output's type (NaN for a sequence with no position; ``lower`` makes those 0)."""
    pl, pltriton = load_pallas()
    g = A.analyze(d, Validator(d.operator_type))
    group = g.q_heads // g.kv_heads
    past, new, total = g.past, g.kv_seq, g.total
    dv = g.v_head
    out_type = d.output_tensor.dtype
    half = P.narrow_products(d) and half_precision_allowed()
    weights16 = half and (past_v if past_v is not None else new_v).dtype == jnp.float16
    scale = np.float32(d.scale)
    filter_value = np.float32(d.mask_filter_value)
    boolean = d.mask_type is M.BOOLEAN
    block = BLOCK_KEYS
    new_block = min(block, max(16, 1 << max(0, (new - 1).bit_length())))
    splits = max(1, min(MAX_SPLITS, -(-total // SPLIT_KEYS)))
    per = -(-total // splits)
    chunk = -(-per // block) * block  # positions a split, in whole blocks
    splits = -(-total // chunk)
    args = [a for a in (q, past_k, past_v, new_k, new_v, flags, bias, lengths) if a is not None]
    bias_rows = 0 if bias is None else bias.size // total

    def kernel(*refs):
        refs = list(refs)
        q_ref = refs.pop(0)
        pk_ref, pv_ref = (refs.pop(0), refs.pop(0)) if past else (None, None)
        nk_ref, nv_ref = (refs.pop(0), refs.pop(0)) if new else (None, None)
        f_ref = refs.pop(0) if flags is not None else None
        b_ref = refs.pop(0) if bias is not None else None
        l_ref = refs.pop(0) if lengths is not None else None
        o_refs = refs
        i, split = pl.program_id(0), pl.program_id(1)
        c0 = split * chunk  # this program's positions: [c0, c1) of the T
        c1 = jnp.minimum(c0 + chunk, total)
        sequence, kv_head = i // g.q_heads, (i % g.q_heads) // group  # its key / value head
        # where the new positions start among the T: after the past, or at the sequence's length
        start_new = past if l_ref is None else jnp.max(l_ref[pl.ds(sequence, 1)])
        query = q_ref[pl.ds(i, 1), :].astype(jnp.float32)  # {1, D}

        def read(k_ref, v_ref, first, columns, start, count, size):
            """Positions [start, start + size) of a segment of ``count`` positions whose first
            row is ``first``, the head's values from column ``columns`` times the head sizes:
            (their scaled logits, values, which of them are in the segment)."""
            inside = start + jnp.arange(size, dtype=jnp.int32) < count
            rows = pl.ds(first + start, size)
            keys = pltriton.load(k_ref.at[rows, pl.ds(columns * g.head, g.head)],
                                 mask=inside[:, None], other=0)  # fmt: skip
            values = pltriton.load(v_ref.at[rows, pl.ds(columns * dv, dv)],
                                   mask=inside[:, None], other=0)  # fmt: skip
            logits = jnp.sum(keys.astype(jnp.float32) * query, axis=1)  # {size}
            if half:  # scaled_logits: the product rounded to float16 first
                logits = logits.astype(jnp.float16).astype(jnp.float32)
            return logits * scale, values, inside

        def fold(state, logits, values, inside):
            """The running (maximum, sum of exponentials, weighted values) with these
            positions added; the partial sums rescaled where the maximum grows."""
            top, total_, acc = state
            logits = jnp.where(inside, logits, -jnp.inf)
            new_top = jnp.maximum(top, jnp.max(logits))
            shift = jnp.where(new_top > -jnp.inf, new_top, 0.0)
            alpha = jnp.exp(top - shift)
            e = jnp.exp(logits - shift)
            w = e.astype(jnp.float16).astype(jnp.float32) if weights16 else e
            acc = acc * alpha + jnp.sum(w[:, None] * values.astype(jnp.float32), axis=0)
            return new_top, total_ * alpha + jnp.sum(e), acc

        def masked(logits, at, inside):
            """The bias and the mask on logits of the positions from ``at``."""
            if b_ref is not None:  # attend: the bias added to the scaled logits first
                row = i if bias_rows == g.batch * g.q_heads else i // g.q_heads
                at_bias = pl.ds(row * total + at, logits.shape[0])
                logits = logits + pltriton.load(b_ref.at[at_bias], mask=inside, other=0)
            if f_ref is None:
                return logits
            flag = pltriton.load(f_ref.at[pl.ds(i * total + at, logits.shape[0])], mask=inside,
                                 other=0) != 0  # fmt: skip
            if boolean:
                return jnp.where(flag, logits + filter_value, logits)
            return jnp.where(flag, logits, filter_value)

        state = (jnp.float32(-jnp.inf), jnp.float32(0), jnp.zeros((dv,), jnp.float32))
        if past:  # {B * Hkv * P, size}: the head's P rows, those of [c0, c1) before the new
            p0, p1 = jnp.minimum(c0, past), jnp.minimum(c1, jnp.clip(start_new, 0, past))

            def body(j, state):
                start = p0 + j * block
                first = (sequence * g.kv_heads + kv_head) * past
                logits, values, inside = read(pk_ref, pv_ref, first, 0, start, p1, block)
                return fold(state, masked(logits, start, inside), values, inside)

            # a static trip count (Triton pipelines it); the steps past p1 load nothing
            state = lax.fori_loop(0, -(-min(chunk, past) // block), body, state)
        if new:  # {B * Skv, Hkv * size}: the sequence's Skv rows, the head's columns
            n0 = jnp.clip(c0 - start_new, 0, new)
            n1 = jnp.clip(jnp.minimum(c1, total) - start_new, 0, new)

            def body_new(j, state):
                start = n0 + j * new_block
                logits, values, inside = read(nk_ref, nv_ref, sequence * new, kv_head, start,
                                              n1, new_block)  # fmt: skip
                return fold(state, masked(logits, start_new + start, inside), values, inside)

            state = lax.fori_loop(0, -(-min(chunk, new) // new_block), body_new, state)
        top, total_, acc = state
        if splits == 1:
            out = acc / jnp.where(jnp.isfinite(top), total_, jnp.float32(jnp.nan))
            pltriton.store(o_refs[0].at[pl.ds(i, 1), :], out[None, :].astype(out_type))
            return
        at = pl.ds(i * splits + split, 1)  # this split's running values, for the combine
        pltriton.store(o_refs[0].at[at], top[None])
        pltriton.store(o_refs[1].at[at], total_[None])
        pltriton.store(o_refs[2].at[at, :], acc[None, :])

    rows = g.batch * g.q_heads
    if splits == 1:
        out_shape = jax.ShapeDtypeStruct((rows, dv), out_type)
    else:
        f32 = jnp.float32
        out_shape = (jax.ShapeDtypeStruct((rows * splits,), f32),
                     jax.ShapeDtypeStruct((rows * splits,), f32),
                     jax.ShapeDtypeStruct((rows * splits, dv), f32))  # fmt: skip
    out = pl.pallas_call(
        kernel,
        out_shape=out_shape,
        grid=(rows, splits),
        interpret=interpret,
        compiler_params=pltriton.CompilerParams(num_warps=NUM_WARPS, num_stages=2),
    )(*args)
    if splits == 1:
        return out
    tops, totals, accs = (a.reshape((rows, splits) + a.shape[1:]) for a in out)
    return _combined(tops, totals, accs).astype(out_type)


def _combined(tops, totals, accs):
    """The splits' running maxima {R, S}, sums {R, S} and weighted values {R, S, Dv} as one
    softmax's weighted values {R, Dv}: the splits merged pairwise as the kernel's blocks are
    (``_merge``: each side rescaled to the larger maximum; a split without a position has
    maximum -inf and weighs 0), one after the other (``FOLD_SPLITS``) or in one variadic
    reduction (its maxima and sums taken per value column, where a maximum, then the
    scaled sums, were three small kernels a layer); NaN where the row's maximum is not
    finite."""
    f32 = jnp.float32
    if FOLD_SPLITS:  # elementwise: S - 1 merges of static slices
        top, total, acc = tops[:, :1], totals[:, :1], accs[:, 0]
        for s in range(1, tops.shape[1]):
            split = (tops[:, s : s + 1], totals[:, s : s + 1], accs[:, s])
            top, total, acc = _merge((top, total, acc), split)
    else:
        shape = accs.shape
        parts = (jnp.broadcast_to(tops[:, :, None], shape),
                 jnp.broadcast_to(totals[:, :, None], shape))  # fmt: skip
        top, total, acc = lax.reduce(
            (*parts, accs), (f32(-jnp.inf), f32(0), f32(0)), _merge, (1,)
        )  # fmt: skip
    return acc / jnp.where(jnp.isfinite(top), total, f32(jnp.nan))


def _merge(x, y):
    """Two running (maximum, sum of exponentials, weighted values) as one: each rescaled to the
    larger maximum (by 0 where a side's maximum is -inf; (-inf, 0, 0) is the identity)."""
    (m1, l1, a1), (m2, l2, a2) = x, y
    m = jnp.maximum(m1, m2)
    shift = jnp.where(m > -jnp.inf, m, jnp.float32(0))
    e1, e2 = jnp.exp(m1 - shift), jnp.exp(m2 - shift)
    return m, l1 * e1 + l2 * e2, a1 * e1 + a2 * e2


def lower(d: Any, *arrays, interpret: bool = False) -> tuple:
    """The kernel's lowering of an ``expressible`` description: the lax lowering's outputs (the
    presents, where described, joined as it joins them)."""
    g = A.analyze(d, Validator(d.operator_type))
    x = dict(zip((p for p, _ in d.input_slots()), arrays))
    q, k, v = P.split_heads(d, g, x)
    narrow = P.narrow_products(d)

    def past(name, size):
        a = x.get(name)
        if a is None or g.past == 0:
            return None
        return (a if narrow else wide(a)).reshape(g.batch, g.kv_heads, g.past, size)

    def heads_first(a):  # {B, seq, H, size} -> {B, H, seq, size}
        return None if a is None else jnp.transpose(a, (0, 2, 1, 3))

    pk, pv = past("PastKeyTensor", g.head), past("PastValueTensor", g.v_head)
    if g.kv_seq == 0:
        k = v = None
    flags = None
    shape = (g.batch, g.q_heads, 1, g.total)
    if d.mask_type is M.BOOLEAN:
        flags = jnp.broadcast_to(x["MaskTensor"].reshape(shape) == 0, shape)
    elif d.mask_type is not M.NONE:
        flags = jnp.broadcast_to(P.keep_mask(d, g, x["MaskTensor"]), shape)
    if flags is not None:
        flags = flags.reshape(-1).astype(jnp.int8)
    bias = x.get("RelativePositionBiasTensor")
    if bias is not None:
        bias = wide(bias).reshape(g.batch, g.q_heads, g.total)
        strides = d.relative_position_bias_tensor.strides
        if g.q_heads == 1 or (strides is not None and strides[-3] == 0):
            bias = bias[:, 0]  # shared by the heads: read once a sequence, not materialized
        bias = bias.reshape(-1)
    lengths = x.get("PastSequenceLengthsTensor")
    lengths = None if lengths is None else P.clamped_lengths(g, lengths)
    out = decode_attention(
        d, q.reshape(g.batch * g.q_heads, g.head), _rows(pk, g.head), _rows(pv, g.v_head),
        _rows(k, g.kv_heads * g.head), _rows(v, g.kv_heads * g.v_head), flags, bias, lengths,
        interpret=interpret,
    )  # fmt: skip
    if lengths is not None:  # a sequence with no position attended gives 0 (the lax lowering)
        empty = lengths + g.kv_seq <= 0
        out = jnp.where(jnp.repeat(empty, g.q_heads)[:, None], jnp.zeros((), out.dtype), out)
    results = [out.reshape(d.output_tensor.sizes)]
    keys = values = None
    if d.output_present_key_tensor is not None or d.output_present_value_tensor is not None:
        keys = P.with_past(g, heads_first(k), pk, lengths)
        values = P.with_past(g, heads_first(v), pv, lengths)
    dtype = d.output_tensor.dtype
    if d.output_present_key_tensor is not None:
        results.append(keys.reshape(d.output_present_key_tensor.sizes).astype(dtype))
    if d.output_present_value_tensor is not None:
        results.append(values.reshape(d.output_present_value_tensor.sizes).astype(dtype))
    return tuple(results)


for _name in ("MULTIHEAD_ATTENTION", "MULTIHEAD_ATTENTION1"):
    register_fast_path(f"DML_OPERATOR_{_name}", "decode", applies, lower)
