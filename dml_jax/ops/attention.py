"""DML_OPERATOR_MULTIHEAD_ATTENTION (FL 6_1) and DML_OPERATOR_MULTIHEAD_ATTENTION1 (FL 6_3).

``Output = softmax(mask(Scale * Q K^T + RelativePositionBias)) V`` per batch and head, after
adding BiasTensor to Q, K and V and concatenating PastKey / PastValue in front of K and V
(DirectML's decomposition on its MULTIHEAD_ATTENTION page). MULTIHEAD_ATTENTION1 lets the query
have more heads than the keys and values (grouped-query attention: query head n reads key/value
head ``n // (QueryHeadCount / KeyValueHeadCount)``) and takes per-batch past sequence lengths.

Layouts (trailing dimensions; Q/K/V/Output may have 4 or 5 dimensions whose leading ones are 1):
Query {B, S, Hq * D}, Key {B, Skv, Hkv * D}, Value {B, Skv, Hkv * Dv}; the stacked tensors
{B, S, H, 2, D} (query and key), {B, Skv, Hkv, 2, D} (key and value), {B, S, H, 3, D} (all
three); Bias {Hq*D + Hkv*D + Hkv*Dv}; RelativePositionBias {B, Hq, S, T}; PastKey {B, Hkv, P, D},
PastValue {B, Hkv, P, Dv}; Output {B, S, Hq * Dv}; OutputPresentKey / Value {B, Hkv, T, D / Dv}
with T = P + Skv (the past concatenated with the new keys / values).

Masks (MaskType; INT32 MaskTensor): BOOLEAN {B, Hq, S, T}, a 0 adds MaskFilterValue to the logit
(any other value adds nothing); KEY_SEQUENCE_LENGTH {1, B}: keys at and after the length are set
to MaskFilterValue; KEY_SEQUENCE_END_START {2, B}: end (exclusive) then start (inclusive), keys
outside are set to MaskFilterValue; KEY_QUERY_SEQUENCE_LENGTH_START_END {3B + 2}: key lengths,
query start offsets and the query end, key start offsets and the key end over the tokens
flattened across the batch (docs/semantics.md, "Multi-head attention", says how dml_jax reads it).

MULTIHEAD_ATTENTION1's PastSequenceLengthsTensor {B} (INT32) makes PastKey / PastValue a cache
of capacity C = their sequence size: batch b's new keys / values are written at positions
[L_b, L_b + Skv) of the present tensors {B, Hkv, C, D / Dv} (positions outside [0, C) are
dropped), and query i of batch b attends positions p < L_b + Skv with p <= L_b + Skv - S + i
(causal, aligned at the end). Positions outside take no weight; a row left with none gives 0.

Precision: FLOAT16 tensors are computed in float32 (Q/K/V plus bias, both products with float32
accumulation, Scale, the bias and mask, the softmax's exponentials and sums as float32) and the
output is rounded once; the present tensors hold the biased keys / values rounded to the tensor
type. FLOAT32 products are float32 (``lax.Precision.HIGHEST``) unless the half-precision flag is
given, as for GEMM. Without BiasTensor, the first FLOAT16 product runs on float16 arithmetic with
the same float32 results (Q and K stay float16: their products are exact in float32); the second
multiplies the float32 exponentials (``exp(logit - row maximum)``) by the values widened to
float32 (``_weighted_values``; on CUDA GPUs on TF32 tensor cores as three products,
float32-accurate for FLOAT16 values: ``_weights_product``) and divides the product by the row's
sum: the softmax's division after the product, the same sums up to float32 rounding, without
another pass over the S x T weights. The half-precision flag rounds FLOAT16 logits and the
exponentials to float16, the precision plain JAX and PyTorch compute float16 attention at.

A causal BOOLEAN mask that the program holds as a constant (a decoder's, MaskFilterValue -inf)
is recognized while tracing (``causal_blocks``): the sequence is cut into blocks and only the
tiles of query block i and key block j <= i are computed (``_causal_tiles``), leaving out the
masked logits (whose weights are exactly 0) instead of computing and masking them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..enums import FeatureLevel as L
from ..enums import MultiheadAttentionMaskType as M
from ..errors import Validator
from ..fastpath import known_input, platform_choice
from ..fields import (
    FLOAT,
    UINT,
    OperatorDesc,
    attribute,
    enum_type,
    input_field,
    output_field,
)
from ..precision import half_precision_allowed, matmul_precision
from ..registry import Example, register
from ..support import F2, rows, types
from ..tensor import TensorDesc
from ._common import wide

# ---------------------------------------------------------------------------------------------
# Descriptors


@dataclass(frozen=True)
class _AttentionInputs(OperatorDesc):
    """The eleven optional inputs both versions begin with, in struct order (not an operator)."""

    query_tensor: TensorDesc | None = input_field(optional=True)
    key_tensor: TensorDesc | None = input_field(optional=True)
    value_tensor: TensorDesc | None = input_field(optional=True)
    stacked_query_key_tensor: TensorDesc | None = input_field(optional=True)
    stacked_key_value_tensor: TensorDesc | None = input_field(optional=True)
    stacked_query_key_value_tensor: TensorDesc | None = input_field(optional=True)
    bias_tensor: TensorDesc | None = input_field(optional=True)
    mask_tensor: TensorDesc | None = input_field(optional=True)
    relative_position_bias_tensor: TensorDesc | None = input_field(optional=True)
    past_key_tensor: TensorDesc | None = input_field(optional=True)
    past_value_tensor: TensorDesc | None = input_field(optional=True)


@dataclass(frozen=True)
class MultiheadAttentionOperatorDesc(_AttentionInputs):
    """DML_MULTIHEAD_ATTENTION_OPERATOR_DESC: multi-head scaled dot-product attention (FL 6_1).

    Fields:
        query_tensor, key_tensor, value_tensor: optional; {B, S, HeadCount * D}, {B, Skv,
            HeadCount * D}, {B, Skv, HeadCount * Dv} (4 or 5 dimensions with leading 1s allowed).
        stacked_query_key_tensor: optional {B, S, HeadCount, 2, D}: query and key.
        stacked_key_value_tensor: optional {B, Skv, HeadCount, 2, D}: key and value.
        stacked_query_key_value_tensor: optional {B, S, HeadCount, 3, D}: all three.
            Exactly one tensor holds each of the query, the key and the value; the key and the
            value may both be absent when PastKeyTensor and PastValueTensor hold them.
        bias_tensor: optional {HeadCount * (2D + Dv)}, added to Q, K and V (not to the past).
        mask_tensor: optional INT32; its shape and meaning follow ``mask_type``; null for NONE.
        relative_position_bias_tensor: optional {B, HeadCount, S, T}, added after Scale.
        past_key_tensor, past_value_tensor: optional, together; {B, HeadCount, P, D / Dv},
            concatenated in front of the keys / values (T = P + Skv).
        output_tensor: {B, S, HeadCount * Dv}.
        output_present_key_tensor, output_present_value_tensor: optional {B, HeadCount, T, D /
            Dv}: the past and the new (biased) keys / values.
        scale: multiplies Q K^T (usually ``1 / sqrt(D)``).
        mask_filter_value: what the mask adds (BOOLEAN) or sets (the sequence-length types).
        head_count: >= 1, divides the query's hidden size.
        mask_type: ``MultiheadAttentionMaskType``, default NONE.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_MULTIHEAD_ATTENTION"
    output_tensor: TensorDesc = output_field()
    output_present_key_tensor: TensorDesc | None = output_field(optional=True)
    output_present_value_tensor: TensorDesc | None = output_field(optional=True)
    scale: float = attribute(FLOAT)
    mask_filter_value: float = attribute(FLOAT)
    head_count: int = attribute(UINT)
    mask_type: M = attribute(enum_type(M), default=M.NONE)


@dataclass(frozen=True)
class MultiheadAttention1OperatorDesc(_AttentionInputs):
    """DML_MULTIHEAD_ATTENTION1_OPERATOR_DESC: MULTIHEAD_ATTENTION with grouped-query heads and
    per-batch past sequence lengths (FL 6_3).

    Fields are MULTIHEAD_ATTENTION's, with HeadCount split in two and one more input:
        query_head_count: the query's heads (Hq >= 1), a multiple of ``key_value_head_count``.
        key_value_head_count: the key's and value's heads (Hkv >= 1); query head n reads
            key/value head ``n // (Hq / Hkv)``. Key, value, past and present tensors have Hkv
            heads; the query, output, mask and relative position bias Hq. StackedQueryKey and
            StackedQueryKeyValue need Hq == Hkv.
        past_sequence_lengths_tensor: optional INT32 {B}, with PastKeyTensor and
            PastValueTensor: the past is a cache of capacity C (their sequence size), batch b's
            first L_b positions are valid, the new keys / values are written at [L_b, L_b + Skv)
            of the present tensors {B, Hkv, C, D / Dv}, and attention is causal over the
            positions before L_b + Skv (T = C).
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_MULTIHEAD_ATTENTION1"
    past_sequence_lengths_tensor: TensorDesc | None = input_field(optional=True)
    output_tensor: TensorDesc = output_field()
    output_present_key_tensor: TensorDesc | None = output_field(optional=True)
    output_present_value_tensor: TensorDesc | None = output_field(optional=True)
    scale: float = attribute(FLOAT)
    mask_filter_value: float = attribute(FLOAT)
    query_head_count: int = attribute(UINT)
    key_value_head_count: int = attribute(UINT)
    mask_type: M = attribute(enum_type(M), default=M.NONE)


# ---------------------------------------------------------------------------------------------
# Geometry and rules (one pass: infer, validate and lower all read the same analysis)


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


_QUERY = ("QueryTensor", "StackedQueryKeyTensor", "StackedQueryKeyValueTensor")
_KEY = ("KeyTensor", "StackedQueryKeyTensor", "StackedKeyValueTensor", "StackedQueryKeyValueTensor")
_VALUE = ("ValueTensor", "StackedKeyValueTensor", "StackedQueryKeyValueTensor")
_STACKED = {"StackedQueryKeyTensor": 2, "StackedKeyValueTensor": 2, "StackedQueryKeyValueTensor": 3}
_MASK_SHAPES = {
    M.KEY_SEQUENCE_LENGTH: "{1, batchSize}",
    M.KEY_SEQUENCE_END_START: "{2, batchSize}",
    M.KEY_QUERY_SEQUENCE_LENGTH_START_END: "{batchSize * 3 + 2}",
    M.BOOLEAN: "{batchSize, headCount, sequenceLength, totalSequenceLength}",
}


def _v1(d: Any) -> bool:
    return d.operator_type.endswith("1")


def _head_counts(d: Any) -> tuple[int, int, str]:
    """(Hq, Hkv, the member that names the query's heads)."""
    if _v1(d):
        return d.query_head_count, d.key_value_head_count, "QueryHeadCount"
    return d.head_count, d.head_count, "HeadCount"


def _tensors(d: Any) -> dict[str, TensorDesc]:
    return dict(d.input_slots())


def _trailing(v: Validator, path: str, t: TensorDesc, n: int, what: str) -> tuple[int, ...]:
    """The last ``n`` sizes of ``t``; the dimensions before them must be 1 (DirectML lets these
    tensors carry leading 1s)."""
    v.check(f"{path}.DimensionCount", t.rank >= n, f"must be at least {n} ({what}), got {t.rank}")
    for i, s in enumerate(t.sizes[: t.rank - n]):
        v.check(
            f"{path}.Sizes[{i}]",
            s == 1,
            f"must be 1: the dimensions before {what} are leading 1s, got {s}",
        )
    return t.sizes[t.rank - n :]


def _stacked(v: Validator, path: str, t: TensorDesc) -> tuple[int, ...]:
    count = _STACKED[path]
    v.check(
        f"{path}.DimensionCount",
        t.rank == 5,
        f"must be 5 ({{batch, sequence, heads, {count}, headSize}}), got {t.rank}",
    )
    v.equal(f"{path}.Sizes[3]", t.sizes[3], count, "the number of stacked tensors")
    return t.sizes


def _one_source(v: Validator, role: str, given: dict, names: tuple[str, ...]) -> str | None:
    """The one tensor that holds ``role`` (query, key, value), or None when none does."""
    present = [n for n in names if n in given]
    if len(present) > 1:
        v.fail(
            present[1],
            f"must be null when {present[0]} is given: exactly one tensor holds the {role}",
        )
    return present[0] if present else None


def analyze(d: Any, v: Validator) -> Geometry:
    """Checks every shape rule of MULTIHEAD_ATTENTION(1) and returns the geometry."""
    hq, hkv, hq_name = _head_counts(d)
    v.check(hq_name, hq >= 1, f"must be >= 1, got {hq}")
    if _v1(d):
        v.check("KeyValueHeadCount", hkv >= 1, f"must be >= 1, got {hkv}")
        v.check(
            "QueryHeadCount",
            hq % hkv == 0,
            f"must be a multiple of KeyValueHeadCount ({hkv}), got {hq}",
        )
    given = _tensors(d)
    q_src = _one_source(v, "query", given, _QUERY)
    k_src = _one_source(v, "key", given, _KEY)
    v_src = _one_source(v, "value", given, _VALUE)
    past_k, past_v = given.get("PastKeyTensor"), given.get("PastValueTensor")
    if q_src is None:
        v.fail(
            "QueryTensor",
            "is required: one of QueryTensor, StackedQueryKeyTensor and "
            "StackedQueryKeyValueTensor must hold the query",
        )
    v.check(
        "PastValueTensor" if past_k is not None else "PastKeyTensor",
        (past_k is None) == (past_v is None),
        "must be given together with "
        + ("PastKeyTensor" if past_k is not None else "PastValueTensor")
        + " (or neither)",
    )
    if k_src is None and v_src is None:
        v.check(
            "KeyTensor",
            past_k is not None,
            "is required unless PastKeyTensor and PastValueTensor hold the keys and values: "
            "one of KeyTensor, StackedQueryKeyTensor, StackedKeyValueTensor and "
            "StackedQueryKeyValueTensor must hold the key",
        )
    elif k_src is None:
        v.fail("KeyTensor", f"is required: {v_src} holds the value but no tensor holds the key")
    elif v_src is None:
        v.fail("ValueTensor", f"is required: {k_src} holds the key but no tensor holds the value")
    for path in ("StackedQueryKeyTensor", "StackedQueryKeyValueTensor"):
        if path in given:
            v.check(
                path,
                hq == hkv,
                f"needs QueryHeadCount == KeyValueHeadCount (query and key heads are stacked "
                f"together), got {hq} and {hkv}",
            )

    # The query: batch, sequence length and head size.
    if q_src == "QueryTensor":
        batch, seq, hidden = _trailing(v, q_src, given[q_src], 3, "{batch, sequence, hidden}")
        v.check(
            f"{q_src}.Sizes[{given[q_src].rank - 1}]",
            hidden % hq == 0,
            f"(hidden size {hidden}) must be a multiple of {hq_name} ({hq})",
        )
        head = hidden // hq
    else:
        batch, seq, heads, _, head = _stacked(v, q_src, given[q_src])
        v.equal(f"{q_src}.Sizes[2]", heads, hq, hq_name)

    def same_batch(path: str, size: int, index: int) -> None:
        v.equal(f"{path}.Sizes[{index}]", size, batch, f"the batch size of {q_src}")

    # The key and the value.
    v_head = head
    kv_seq = 0
    if k_src == "KeyTensor":
        t = given[k_src]
        b, kv_seq, hidden = _trailing(v, k_src, t, 3, "{batch, sequence, hidden}")
        same_batch(k_src, b, t.rank - 3)
        v.equal(
            f"{k_src}.Sizes[{t.rank - 1}]",
            hidden,
            hkv * head,
            f"{'KeyValueHeadCount' if _v1(d) else 'HeadCount'} * the query's head size "
            f"{hkv} * {head}",
        )
    elif k_src == "StackedKeyValueTensor":
        b, kv_seq, heads, _, kh = _stacked(v, k_src, given[k_src])
        same_batch(k_src, b, 0)
        v.equal(f"{k_src}.Sizes[2]", heads, hkv, "KeyValueHeadCount" if _v1(d) else "HeadCount")
        v.equal(f"{k_src}.Sizes[4]", kh, head, "the query's head size")
    elif k_src is not None:  # stacked with the query
        kv_seq = seq
    if v_src == "ValueTensor":
        t = given[v_src]
        b, vs, hidden = _trailing(v, v_src, t, 3, "{batch, sequence, hidden}")
        same_batch(v_src, b, t.rank - 3)
        v.equal(f"{v_src}.Sizes[{t.rank - 2}]", vs, kv_seq, f"the key sequence length of {k_src}")
        v.check(
            f"{v_src}.Sizes[{t.rank - 1}]",
            hidden % hkv == 0,
            f"(value hidden size {hidden}) must be a multiple of "
            f"{'KeyValueHeadCount' if _v1(d) else 'HeadCount'} ({hkv})",
        )
        v_head = hidden // hkv

    # The past, and MULTIHEAD_ATTENTION1's past sequence lengths.
    past = 0
    if past_k is not None:
        b, h, past, ph = _trailing(v, "PastKeyTensor", past_k, 4, "{batch, heads, sequence, size}")
        r = past_k.rank - 4
        same_batch("PastKeyTensor", b, r)
        v.equal(f"PastKeyTensor.Sizes[{r + 1}]", h, hkv, "the key's head count")
        v.equal(f"PastKeyTensor.Sizes[{r + 3}]", ph, head, "the query's head size")
        b, h, pv_seq, pvh = _trailing(
            v, "PastValueTensor", past_v, 4, "{batch, heads, sequence, size}"
        )
        r = past_v.rank - 4
        same_batch("PastValueTensor", b, r)
        v.equal(f"PastValueTensor.Sizes[{r + 1}]", h, hkv, "the value's head count")
        v.equal(f"PastValueTensor.Sizes[{r + 2}]", pv_seq, past, "PastKeyTensor's sequence length")
        if v_src is None:
            v_head = pvh
        else:
            v.equal(f"PastValueTensor.Sizes[{r + 3}]", pvh, v_head, "the value's head size")
    lengths = given.get("PastSequenceLengthsTensor")
    if lengths is not None:
        v.check(
            "PastSequenceLengthsTensor",
            past_k is not None,
            "needs PastKeyTensor and PastValueTensor: the past sequence lengths index into them",
        )
        (b,) = _trailing(v, "PastSequenceLengthsTensor", lengths, 1, "{batch}")
        same_batch("PastSequenceLengthsTensor", b, lengths.rank - 1)
    total = past if lengths is not None else past + kv_seq

    # Bias, relative position bias, mask.
    bias = given.get("BiasTensor")
    if bias is not None:
        (n,) = _trailing(v, "BiasTensor", bias, 1, "{hidden + hidden + valueHidden}")
        want = hq * head + hkv * head + hkv * v_head
        v.equal(
            f"BiasTensor.Sizes[{bias.rank - 1}]",
            n,
            want,
            f"the query, key and value hidden sizes {hq * head} + {hkv * head} + {hkv * v_head}",
        )
    rpb = given.get("RelativePositionBiasTensor")
    if rpb is not None:
        sizes = _trailing(v, "RelativePositionBiasTensor", rpb, 4, "{batch, heads, S, T}")
        v.equal(
            "RelativePositionBiasTensor.Sizes",
            tuple(sizes),
            (batch, hq, seq, total),
            "{batchSize, headCount, sequenceLength, totalSequenceLength}",
        )
    mask = given.get("MaskTensor")
    mt = d.mask_type
    if mt is M.NONE:
        v.check("MaskTensor", mask is None, "must be null when MaskType is NONE")
    else:
        v.check("MaskTensor", mask is not None, f"is required with MaskType {mt.name}")
        want = {
            M.KEY_SEQUENCE_LENGTH: (1, batch),
            M.KEY_SEQUENCE_END_START: (2, batch),
            M.KEY_QUERY_SEQUENCE_LENGTH_START_END: (3 * batch + 2,),
            M.BOOLEAN: (batch, hq, seq, total),
        }[mt]
        sizes = _trailing(v, "MaskTensor", mask, len(want), _MASK_SHAPES[mt])
        v.equal("MaskTensor.Sizes", tuple(sizes), want, f"{_MASK_SHAPES[mt]} for {mt.name}")

    # Every float tensor has the query's data type.
    floats = [
        (p, t) for p, t in d.input_slots() + d.output_slots()
        if p not in ("MaskTensor", "PastSequenceLengthsTensor")
    ]  # fmt: skip
    v.same("data_type", [pt for pt in floats if pt[0] != q_src], (q_src, given[q_src]))
    return Geometry(batch, seq, kv_seq, past, total, hq, hkv, head, v_head, lengths is not None)


def infer_attention(d: Any) -> tuple[TensorDesc, ...]:
    g = analyze(d, Validator(d.operator_type))
    given = _tensors(d)
    like = next(given[p] for p in _QUERY if p in given)

    def shaped(t: TensorDesc | None, core: tuple[int, ...]) -> TensorDesc:
        rank = max(len(core), t.rank if t is not None else 0)
        return like.like(sizes=(1,) * (rank - len(core)) + core)

    out = [shaped(d.output_tensor, (g.batch, g.seq, g.q_heads * g.v_head))]
    if d.output_present_key_tensor is not None:
        core = (g.batch, g.kv_heads, g.total, g.head)
        out.append(shaped(d.output_present_key_tensor, core))
    if d.output_present_value_tensor is not None:
        core = (g.batch, g.kv_heads, g.total, g.v_head)
        out.append(shaped(d.output_present_value_tensor, core))
    return tuple(out)


def validate_attention(d: Any, v: Validator) -> None:
    analyze(d, v)


# ---------------------------------------------------------------------------------------------
# Lowering


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


def _exponentials(logits, valid=None, rows=None):
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


def _scaled_logits(d: Any, q, k, batch: int):
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


def _product_operands(w, values):
    """The second product's operands: the float32 weights and the values widened to float32,
    or, where half precision is allowed, FLOAT16 values and the weights rounded to float16."""
    if values.dtype == jnp.float16 and half_precision_allowed():
        return w.astype(jnp.float16), values
    return w, values.astype(jnp.float32)


def _weighted_values(w, values):
    """Weights {B, Hkv, G, S, T} (float32: the softmax's exponentials, in [0, 1]) times values
    {B, Hkv, T, Dv}: {B, S, Hkv, G, Dv} in float32 (``_weights_product``)."""
    # {B, Hkv, G, S, Dv}: the S x T operand on the left, in its own layout (an einsum puts
    # the values first and transposes the product), then the small result moved.
    out = _weights_product(w, values, (((4,), (2,)), ((0, 1), (0, 1))))
    return jnp.transpose(out, (0, 3, 1, 2, 4))


@functools.cache
def _tf32_tensor_cores() -> bool:
    """No CUDA device of this process lacks TF32 tensor cores (compute capability 8.0 on,
    Ampere's); true where it has no CUDA device, so that a program lowered for CUDA elsewhere
    keeps the TF32 form."""
    try:
        devices = jax.devices("cuda")
    except RuntimeError:
        return True
    return all(float(getattr(d, "compute_capability", "0") or 0) >= 8.0 for d in devices)


def _weights_product(w, values, dims):
    """The float32 weights ``w`` times ``values`` (``lax.dot_general``'s ``dims``), in
    float32 at the lowering's precision (``matmul_precision``): FLOAT16 values widened
    (exactly) to float32; where half precision is allowed, FLOAT16 values meet the weights
    rounded to float16 (float32 accumulation).

    On CUDA GPUs with TF32 tensor cores (``_tf32_tensor_cores``) the float32 product of
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
    w, wide = _product_operands(w, values)

    def product(algorithm):
        return lambda a, b: lax.dot_general(
            a, b, dims, precision=algorithm, preferred_element_type=jnp.float32
        )

    exact = product(matmul_precision())
    if values.dtype != jnp.float16 or half_precision_allowed() or not _tf32_tensor_cores():
        return exact(w, wide)
    tensor_cores = product(lax.DotAlgorithmPreset.TF32_TF32_F32_X3)
    return platform_choice(w, wide, cuda=tensor_cores, default=exact)


# The causal lowering (``causal_blocks``) splits the sequence into at most CAUSAL_BLOCKS
# blocks of at least CAUSAL_MIN_ROWS rows and computes the tiles of query block i and key block
# j <= i only: n (n + 1) / 2 of the n^2 tiles, so the S x T float32 tensors the softmax writes
# and reads shrink to (n + 1) / 2n of the square. Four blocks were the fastest on an H200 and
# an H100 at 1024 tokens (benchmarks/experiments/causal_blocks.py).
CAUSAL_BLOCKS = 4
CAUSAL_MIN_ROWS = 128
# A block longer than CAUSAL_ALIGN rows is rounded up to a multiple of it (the sequence padded):
# on an H100 three, five and six blocks of 1024 tokens (342, 205 and 171 rows) ran 10-15% slower
# than four of 256.
CAUSAL_ALIGN = 64


def known_causal_mask(d: Any, g: Geometry) -> bool | None:
    """Whether the BOOLEAN MaskTensor keeps key j for query i exactly when j <= i, with S == T:
    a decoder's causal mask. Answered at trace time where the mask is a constant of
    the program (``fastpath.known_input``); None where it is known only at run time (or there
    is no BOOLEAN mask of S == T)."""
    if d.mask_type is not M.BOOLEAN or g.seq != g.total:
        return None
    known = known_input([p for p, _ in d.input_slots()].index("MaskTensor"))
    if known is None:
        return None
    kept = np.asarray(known)
    # Broadcast batch and head axes (stride 0, as a constant's tensor desc reads them) are
    # checked once; the {S, T} axes are read whole, broadcast or not (a mask of all ones is
    # broadcast along every axis: one value read as S x T).
    lead = tuple(slice(0, 1) if st == 0 else slice(None) for st in kept.strides[:-2])
    kept = kept[lead].reshape(-1, g.seq, g.total) != 0
    causal = np.tril(np.ones((g.seq, g.total), bool))
    return bool(np.array_equal(kept, np.broadcast_to(causal, kept.shape)))


def causal_blocks(d: Any, g: Geometry) -> int | None:
    """How many blocks the causal lowering (``_causal_tiles``) splits the sequence into, or
    None where it does not apply.

    It applies to a known causal mask (``known_causal_mask``) whose MaskFilterValue is -inf,
    with no past sequence lengths, where two blocks of ``CAUSAL_MIN_ROWS`` fit. The keys after
    a query are masked for it, and with -inf added their weights are exactly 0, so leaving the
    tiles above the diagonal out changes no sum. A NaN or +inf logit at a masked position is
    left out with them (docs/semantics.md, "Multi-head attention": a causal mask's masked
    positions are not computed)."""
    n = min(CAUSAL_BLOCKS, g.seq // CAUSAL_MIN_ROWS)
    if g.lengths or d.mask_filter_value != -np.inf or n < 2:
        return None
    if not known_causal_mask(d, g):  # False, or not known
        return None
    return n


def lower_attention(d: Any, *arrays):
    g = analyze(d, Validator(d.operator_type))
    x = dict(zip((p for p, _ in d.input_slots()), arrays))
    dtype = d.output_tensor.dtype
    q, k, val = split_heads(d, g, x)
    lengths = x.get("PastSequenceLengthsTensor")
    lengths = None if lengths is None else clamped_lengths(g, lengths)

    def heads_first(a):  # {B, seq, H, size} -> {B, H, seq, size}
        return None if a is None else jnp.transpose(a, (0, 2, 1, 3))

    def past(name, size):
        a = x.get(name)
        if a is None:
            return None
        return (a if narrow_products(d) else wide(a)).reshape(g.batch, g.kv_heads, g.past, size)

    keys = with_past(g, heads_first(k), past("PastKeyTensor", g.head), lengths)
    values = with_past(g, heads_first(val), past("PastValueTensor", g.v_head), lengths)
    rpb = x.get("RelativePositionBiasTensor")
    rpb = None if rpb is None else wide(rpb).reshape(g.batch, g.q_heads, g.seq, g.total)

    # Query head n = kv head * group + r reads kv head n // group. The queries are moved to
    # {B, Hkv, G, S, D} (S x D values) so that the logits come out as {B, Hkv, G, S, T}
    # directly: written as an einsum, jax puts the keys first and the S x T product is
    # transposed afterwards, a pass over it that XLA's CPU backend runs as a strided copy.
    group = g.q_heads // g.kv_heads
    qg = jnp.transpose(q.reshape(g.batch, g.seq, g.kv_heads, group, g.head), (0, 2, 3, 1, 4))
    blocks = causal_blocks(d, g)
    if blocks is not None:
        out = _causal_tiles(d, blocks, qg, keys, values, rpb)
    else:
        filter_value = jnp.float32(d.mask_filter_value)
        shape = (g.batch, g.q_heads, g.seq, g.total)
        if d.mask_type is M.BOOLEAN:
            zero = x["MaskTensor"].reshape(shape) == 0

            def masked(logits):
                return jnp.where(zero, logits + filter_value, logits)
        elif d.mask_type is not M.NONE:
            keep = keep_mask(d, g, x["MaskTensor"])

            def masked(logits):
                return jnp.where(keep, logits, filter_value)
        else:

            def masked(logits):
                return logits

        valid = None
        if lengths is not None:
            # Positions past L_b + Skv, or after query i's causal frontier, are not part of
            # the sequence: they take no weight at all (not MaskFilterValue).
            i = lax.broadcasted_iota(jnp.int32, (1, 1, g.seq, g.total), 2)
            j = lax.broadcasted_iota(jnp.int32, (1, 1, g.seq, g.total), 3)
            end = lengths.reshape(g.batch, 1, 1, 1) + g.kv_seq
            valid = (j < end) & (j <= end - g.seq + i)
        out = _attend(d, qg, keys, values, rpb, masked, valid)
    results = [out.reshape(d.output_tensor.sizes).astype(dtype)]
    if d.output_present_key_tensor is not None:
        results.append(keys.reshape(d.output_present_key_tensor.sizes).astype(dtype))
    if d.output_present_value_tensor is not None:
        results.append(values.reshape(d.output_present_value_tensor.sizes).astype(dtype))
    return tuple(results)


def _causal_tiles(d: Any, n: int, qg, keys, values, rpb):
    """Causal attention over the tiles on and below the diagonal: the sequence (padded to n
    blocks of ``bs``) in query blocks i and key blocks j <= i, the P = n (n + 1) / 2 tiles one
    batch of products of a single shape. Queries {B, Hkv, G, S, D}, keys {B, Hkv, S, D},
    values {B, Hkv, S, Dv}, ``rpb`` {B, Hq, S, S} or None: the attention's {B, S, Hkv, G, Dv}
    in float32, as ``_attend`` computes it with the keys after each query masked by -inf.

    A row's softmax spans the tiles of its block (tile i (i + 1) / 2 + j holds key block j):
    its maximum, its sum and its weighted values are the tiles' ones combined. Padded keys
    come after every real query (masked); padded queries are computed and dropped."""
    b, hkv, group, s, dh = qg.shape
    dv = values.shape[-1]
    bs = -(-s // n)
    if bs > CAUSAL_ALIGN:
        bs = -(-bs // CAUSAL_ALIGN) * CAUSAL_ALIGN
        n = -(-s // bs)
    pad = bs * n - s
    if pad:
        qg = jnp.pad(qg, [(0, 0)] * 3 + [(0, pad), (0, 0)])
        keys = jnp.pad(keys, [(0, 0), (0, 0), (0, pad), (0, 0)])
        values = jnp.pad(values, [(0, 0), (0, 0), (0, pad), (0, 0)])
        rpb = None if rpb is None else jnp.pad(rpb, [(0, 0), (0, 0), (0, pad), (0, pad)])
    qi, kj = np.tril_indices(n)  # tile t: query block qi[t], key block kj[t]; rows in order
    p, rows = len(qi), group * bs
    # {B, Hkv, P, G * bs, D}: a tile's rows are its query block's rows of every head of the group.
    qt = jnp.transpose(qg.reshape(b, hkv, group, n, bs, dh), (0, 1, 3, 2, 4, 5))[:, :, qi]
    qt = qt.reshape(b, hkv, p, rows, dh)
    kt = keys.reshape(b, hkv, n, bs, dh)[:, :, kj]
    vt = values.reshape(b, hkv, n, bs, dv)[:, :, kj]
    logits = _scaled_logits(d, qt, kt, 3)  # {B, Hkv, P, G * bs, bs}
    if rpb is not None:
        r = jnp.transpose(rpb.reshape(b, hkv, group, n, bs, n, bs), (0, 1, 3, 5, 2, 4, 6))
        logits = logits + r[:, :, qi, kj].reshape(b, hkv, p, rows, bs)
    # On a diagonal tile key c is kept for row r when c <= r (positions within the block).
    row = lax.broadcasted_iota(jnp.int32, (p, rows, bs), 1) % bs
    above = lax.broadcasted_iota(jnp.int32, (p, rows, bs), 2) > row
    logits = jnp.where(jnp.asarray((qi == kj).reshape(p, 1, 1)) & above, -jnp.inf, logits)

    first = [i * (i + 1) // 2 for i in range(n + 1)]

    def per_block(a, reduce):  # {B, Hkv, P, ...} -> {B, Hkv, n, ...}: a row's tiles combined
        return jnp.stack([reduce(a[:, :, lo:hi], axis=2) for lo, hi in pairwise(first)], axis=2)

    e, divisor = _exponentials(logits, rows=(per_block, lambda a: a[:, :, qi]))
    dims = (((4,), (3,)), ((0, 1, 2), (0, 1, 2)))
    weighted = _weights_product(e, vt, dims)  # {B, Hkv, P, G * bs, Dv}
    out = per_block(weighted, jnp.sum) / divisor  # {B, Hkv, n, G * bs, Dv}
    out = jnp.transpose(out.reshape(b, hkv, n, group, bs, dv), (0, 2, 4, 1, 3, 5))
    return out.reshape(b, n * bs, hkv, group, dv)[:, :s]


def _attend(d: Any, qg, keys, values, rpb, masked, valid):
    """Queries {B, Hkv, G, s, D} against keys {B, Hkv, t, D} and values {B, Hkv, t, Dv}: the
    attention's {B, s, Hkv, G, Dv} in float32. ``rpb``: the relative position bias {B, Hq, s,
    t} or None; ``masked``: the mask applied to the scaled logits {B, Hq, s, t}; ``valid``:
    positions that take a weight at all (``_exponentials``), or None."""
    b, hkv, group, s = qg.shape[:4]
    t = keys.shape[2]
    logits = _scaled_logits(d, qg, keys, 2).reshape(b, hkv * group, s, t)
    if rpb is not None:
        logits = logits + rpb
    e, divisor = _exponentials(masked(logits), valid)

    # The exponentials times the values, then divided by the row's sum: {B, s, Hkv, G, Dv}.
    eg = e.reshape(b, hkv, group, s, t)
    divisor = jnp.transpose(divisor.reshape(eg.shape[:-1] + (1,)), (0, 3, 1, 2, 4))
    return _weighted_values(eg, values) / divisor


# ---------------------------------------------------------------------------------------------
# Support and registration

_INT32 = types("INT32")
_DIMS1_5 = (1, 2, 3, 4, 5)
_COLUMNS = {
    "StackedQueryKeyTensor": (F2, (5,)),
    "StackedKeyValueTensor": (F2, (5,)),
    "StackedQueryKeyValueTensor": (F2, (5,)),
    "BiasTensor": (F2, _DIMS1_5),
    "MaskTensor": (_INT32, _DIMS1_5),
    "RelativePositionBiasTensor": (F2, (4, 5)),
    "PastKeyTensor": (F2, (4, 5)),
    "PastValueTensor": (F2, (4, 5)),
    "OutputPresentKeyTensor": (F2, (4, 5)),
    "OutputPresentValueTensor": (F2, (4, 5)),
}
_DIMS3_5 = (3, 4, 5)
_LENGTHS = (_INT32, _DIMS1_5)  # MULTIHEAD_ATTENTION1 PastSequenceLengthsTensor


def _tensor(sizes: list[int], data_type: str = "FLOAT32") -> dict:
    return {"DataType": data_type, "Sizes": sizes}


def _register(cls: type, support: tuple, example: Example) -> None:
    register(
        cls,
        infer=infer_attention,
        validate=validate_attention,
        lower=lower_attention,
        support=support,
        differentiable=lambda d: True,  # the float tensors; mask and length values are indices
        example=example,
    )


_register(
    MultiheadAttentionOperatorDesc,
    rows((L.FL_6_1, _DIMS3_5, F2, F2, _COLUMNS)),
    Example(
        {
            "type": "DML_OPERATOR_MULTIHEAD_ATTENTION",
            "desc": {
                "QueryTensor": _tensor([1, 2, 4]),
                "KeyTensor": _tensor([1, 3, 4]),
                "ValueTensor": _tensor([1, 3, 4]),
                "MaskTensor": _tensor([1, 1], "INT32"),
                "OutputTensor": _tensor([1, 2, 4]),
                "Scale": 0.5,
                "MaskFilterValue": -10000.0,
                "HeadCount": 2,
                "MaskType": "DML_MULTIHEAD_ATTENTION_MASK_TYPE_KEY_SEQUENCE_LENGTH",
            },
        },
        {
            "QueryTensor": [1, 0, 0, 1, 0, 1, 1, 0],
            "KeyTensor": [1, 0, 1, 1, 0, 1, 0, 0, 2, 2, 2, 2],
            "ValueTensor": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12],
            "MaskTensor": [2],
        },
        "two heads, the third key masked by a key length of 2",
    ),
)

_register(
    MultiheadAttention1OperatorDesc,
    rows((L.FL_6_3, _DIMS3_5, F2, F2, {**_COLUMNS, "PastSequenceLengthsTensor": _LENGTHS})),
    Example(
        {
            "type": "DML_OPERATOR_MULTIHEAD_ATTENTION1",
            "desc": {
                "QueryTensor": _tensor([1, 1, 4]),
                "KeyTensor": _tensor([1, 1, 2]),
                "ValueTensor": _tensor([1, 1, 2]),
                "PastKeyTensor": _tensor([1, 1, 2, 2]),
                "PastValueTensor": _tensor([1, 1, 2, 2]),
                "OutputTensor": _tensor([1, 1, 4]),
                "OutputPresentKeyTensor": _tensor([1, 1, 3, 2]),
                "OutputPresentValueTensor": _tensor([1, 1, 3, 2]),
                "Scale": 1.0,
                "MaskFilterValue": -10000.0,
                "QueryHeadCount": 2,
                "KeyValueHeadCount": 1,
                "MaskType": "DML_MULTIHEAD_ATTENTION_MASK_TYPE_NONE",
            },
        },
        {
            "QueryTensor": [1, 0, 0, 1],
            "KeyTensor": [1, 1],
            "ValueTensor": [5, 6],
            "PastKeyTensor": [1, 0, 0, 1],
            "PastValueTensor": [1, 2, 3, 4],
        },
        "two query heads sharing one key/value head, one new key after two past ones",
    ),
)
