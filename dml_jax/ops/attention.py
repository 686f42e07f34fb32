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
float32 (``attention_parts.weighted_values``; on CUDA GPUs on TF32 tensor cores as three
products, float32-accurate for FLOAT16 values: ``weights_product``) and divides the product by the row's
sum: the softmax's division after the product, the same sums up to float32 rounding, without
another pass over the S x T weights. The half-precision flag rounds FLOAT16 logits and the
exponentials to float16, the precision plain JAX and PyTorch compute float16 attention at.

A causal BOOLEAN mask that the program holds as a constant (a decoder's, MaskFilterValue -inf)
is recognized while tracing (``causal_blocks``): the sequence is cut into blocks and only the
tiles of query block i and key block j <= i are computed (``_causal_tiles``), leaving out the
masked logits (whose weights are exactly 0) instead of computing and masking them.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from typing import Any, ClassVar

import jax.numpy as jnp
import numpy as np
from jax import lax

from ..enums import FeatureLevel as L
from ..enums import MultiheadAttentionMaskType as M
from ..errors import Validator
from ..fastpath import known_input
from ..fields import (
    FLOAT,
    UINT,
    OperatorDesc,
    attribute,
    enum_type,
    input_field,
    output_field,
)
from ..registry import Example, register
from ..support import F2, rows, types
from ..tensor import TensorDesc
from ._common import wide
from .attention_parts import (
    Geometry,
    attend,
    attended_rows,
    clamped_lengths,
    exponentials,
    keep_mask,
    narrow_products,
    scaled_logits,
    split_heads,
    weights_product,
    with_past,
)

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
# Lowering (its pieces: ``attention_parts.py``)


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

        valid, attended = None, values
        if lengths is not None:
            # Positions past L_b + Skv, or after query i's causal frontier, are not part of
            # the sequence: they take no weight at all (not MaskFilterValue), and their values
            # are read as 0 (``attended_rows``).
            i = lax.broadcasted_iota(jnp.int32, (1, 1, g.seq, g.total), 2)
            j = lax.broadcasted_iota(jnp.int32, (1, 1, g.seq, g.total), 3)
            end = lengths.reshape(g.batch, 1, 1, 1) + g.kv_seq
            valid = (j < end) & (j <= end - g.seq + i)
            attended = attended_rows(g, values, lengths)
        out = attend(d, qg, keys, attended, rpb, masked, valid)
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
    in float32, as ``attend`` computes it with the keys after each query masked by -inf.

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
    logits = scaled_logits(d, qt, kt, 3)  # {B, Hkv, P, G * bs, bs}
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

    e, divisor = exponentials(logits, rows=(per_block, lambda a: a[:, :, qi]))
    dims = (((4,), (3,)), ((0, 1, 2), (0, 1, 2)))
    weighted = weights_product(e, vt, dims)  # {B, Hkv, P, G * bs, Dv}
    out = per_block(weighted, jnp.sum) / divisor  # {B, Hkv, n, G * bs, Dv}
    out = jnp.transpose(out.reshape(b, hkv, n, group, bs, dv), (0, 2, 4, 1, 3, 5))
    return out.reshape(b, n * bs, hkv, group, dv)[:, :s]


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
