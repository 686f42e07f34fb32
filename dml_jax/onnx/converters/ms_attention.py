"""ONNX Runtime's com.microsoft attention family onto DirectML: Attention, MultiHeadAttention
and QAttention here, GroupQueryAttention and RotaryEmbedding in ``ms_gqa.py`` (on the masks and
the attention helpers here), with the semantics of ONNX Runtime's CPU
kernels (``onnxruntime/contrib_ops/cpu/bert``), the reference the tests compare with.

Operators (``ONNX.md``'s com.microsoft table): the projections of Attention / QAttention are one
GEMM / MATRIX_MULTIPLY_INTEGER_TO_FLOAT over the packed Q/K/V weights, read by
MULTIHEAD_ATTENTION as its StackedQueryKeyValue tensor (an ELEMENT_WISE_IDENTITY putting the
heads before the Q/K/V axis) when the three hidden sizes agree, else as three tensors of a SPLIT;
MultiHeadAttention is MULTIHEAD_ATTENTION itself (packed QKV / KV are its stacked tensors, a
key / value already in {B, N, L, H} its past with no new keys); GroupQueryAttention is
MULTIHEAD_ATTENTION1 with grouped heads and PastSequenceLengths; rotary embeddings are the
GATHER / SPLIT / JOIN / MULTIPLY / ADD building blocks of ``attention.rotate``.

Masks, as ONNX Runtime's CPU kernels apply them (``PrepareMask``):

- ``mask_index`` / ``key_padding_mask`` marks keys to filter: they get ``mask_filter_value``
  (default -10000) **added** to their logit. That is MULTIHEAD_ATTENTION's BOOLEAN mask (a 0 adds
  MaskFilterValue), built for every form (1-D key lengths ``j < len[b]``, 1-D end / start pairs,
  raw 2-D {B, T}, 3-D {B, S, T} and 4-D {B, 1, M, M} masks whose values count as kept when
  above 0; the 4-D mask's leading {S, T} block, as the DirectML provider slices it) rather than
  DirectML's KEY_SEQUENCE_LENGTH, which *replaces* the logit and so differs for a finite filter
  value. A mask known at import is folded.
- ``unidirectional`` (with more than one query) sets the keys after ``past + i`` to the lowest
  float, whatever the filter value: a -inf term of the RelativePositionBias tensor, added to
  ``attention_bias`` when both are given. As in the CPU kernels, the last query keeps all its
  keys (the same rule when the keys end at it, T = past + S).
- ``scale`` 0 (or absent) means 1 / sqrt(head size), as in the CPU kernels.

Shared past / present buffers (Attention's ``past_present_share_buffer``, MultiHeadAttention's
``past_sequence_length`` input; ONNX Runtime reads either only with a past): the past is a buffer
of max_sequence_length M positions ({B, N, M, H}, Attention's stacked {2, B, N, M, H}) whose
first ``past_sequence_length`` P (one int32 value, read at run time: no specialisation) hold the
past. The L new keys / values are written at [P, P + L), the queries attend the keys before
P + L (``unidirectional``: query i those up to P + i, the last query all of them), and the
present is the whole buffer, the other positions as they came in. MULTIHEAD_ATTENTION1 with
PastSequenceLengths (P for every entry) does the write, as for GroupQueryAttention, and the
attention too when its causal frontier is the op's (one query, or ``unidirectional``
self-attention); otherwise it only writes, and MULTIHEAD_ATTENTION attends the written buffers
as its past with the keys from P + L on (and after a query's own) at -inf. What ONNX Runtime
fails on is defined: P is clamped to [0, M - L], as ``lax.dynamic_update_slice`` clamps its
start; a 2-D / 3-D mask or an ``attention_bias`` may cover T keys, L <= T <= M (ONNX Runtime
wants T = P + L, a run-time value): the keys after the first T are kept with no bias.

Rejected (a ValidationError naming the attribute or input): Attention / QAttention's
``do_rotary`` (no CPU kernel either), QAttention's ``past_present_share_buffer``; a shared
buffer without one int32 ``past_sequence_length``, or with more new keys than M, or a mask /
bias covering more keys than M or fewer than the new ones; a 1-D ``mask_index`` /
``key_padding_mask`` of 3 * B + 2 values (the CPU kernel reads only its first B); a 4-D mask
with a past; MultiHeadAttention's ``qk`` output and ``cache_indirection``; QAttention weights
of the other 8-bit type than its input unless known at import (MATRIX_MULTIPLY_INTEGER_TO_FLOAT
takes one integer type; known weights are moved by 128). (GroupQueryAttention's and
RotaryEmbedding's: ``ms_gqa.py``.)
"""

from __future__ import annotations

import math

import numpy as np

from ..importer import Value, broadcast, packed
from . import converter
from ._common import DataType, binary_value, cast_value, op, select_value
from .attention import (
    join_values,
    split_value,
    transposed,
)
from .movement import typed_scalar

MS = "com.microsoft"
DEFAULT_FILTER = -10000.0


def padded_inputs(inputs, count: int) -> list:
    return (list(inputs) + [None] * count)[:count]


def default_scale(ctx, head: int) -> float:
    """The logit scale: the ``scale`` attribute, 0 or absent meaning 1 / sqrt(head size)."""
    scale = float(ctx.attr("scale", 0.0))
    return scale if scale != 0.0 else 1.0 / math.sqrt(head)


def reject_unsupported(ctx, inputs, names: dict[int, str], attrs: dict[str, object]) -> None:
    """Fails on an input given at one of ``names``' indices, or an attribute whose value is not
    its only supported one in ``attrs``."""
    for k, name in names.items():
        if k < len(inputs) and inputs[k] is not None:
            raise ctx.fail(f"input '{name}' is not supported")
    for name, allowed in attrs.items():
        value = ctx.attr(name, allowed)
        if value != allowed:
            raise ctx.fail(f"attribute '{name}' = {value!r} is not supported (only {allowed!r})")


def fill_value(ctx, t: DataType, shape, value) -> Value:
    """A tensor of one value (FILL_VALUE_CONSTANT)."""
    desc = op("FILL_VALUE_CONSTANT")(packed(t, shape), t, typed_scalar(t, value))
    return ctx.out(ctx.node(desc, []), tuple(shape))


def as_int32(ctx, value: Value) -> Value:
    """An ONNX int32 / int64 value as INT32 (the graph type of both)."""
    if value.data_type != DataType.INT32:
        raise ctx.fail(f"expected an int32 / int64 tensor, got {value.data_type.name}")
    return value


def less_than(ctx, a, b) -> Value | np.ndarray:
    """``a < b`` for INT32 operands (NumPy arrays or values): a NumPy bool array when both are
    known at import, else a UINT8 value (LOGICAL_LESS_THAN)."""
    known = [x if isinstance(x, np.ndarray) else x.const for x in (a, b)]
    if all(x is not None for x in known):
        return np.less(*known)
    a = ctx.constant(a.astype(np.int32)) if isinstance(a, np.ndarray) else a
    b = ctx.constant(b.astype(np.int32)) if isinstance(b, np.ndarray) else b
    return binary_value(ctx, "ELEMENT_WISE_LOGICAL_LESS_THAN", a, b, is_bool=True)


def logical_value(ctx, name: str, a, b):
    """LOGICAL_AND / _OR of two keep terms (NumPy bool arrays or UINT8 values)."""
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return (a & b) if name == "AND" else (a | b)
    a = ctx.constant(a.astype(np.uint8)) if isinstance(a, np.ndarray) else a
    b = ctx.constant(b.astype(np.uint8)) if isinstance(b, np.ndarray) else b
    return binary_value(ctx, f"ELEMENT_WISE_LOGICAL_{name}", a, b, is_bool=True)


def minus_inf_outside(ctx, keep, dtype=np.float32) -> Value:
    """A keep term (NumPy bool / UINT8 value) as an additive term of ``dtype``: 0 where kept,
    -inf elsewhere (ELEMENT_WISE_IF of two constants; folded when known at import)."""
    if isinstance(keep, np.ndarray):
        return ctx.constant(np.where(keep, 0, -np.inf).astype(dtype))
    zero = ctx.constant(np.zeros((1, 1, 1, 1), dtype))
    minus = ctx.constant(np.full((1, 1, 1, 1), -np.inf, dtype))
    return select_value(ctx, keep, zero, minus, keep.shape)


def _mask_value(ctx, keep) -> Value:
    """A keep term (NumPy bool / UINT8 value) as MULTIHEAD_ATTENTION's INT32 BOOLEAN mask."""
    if isinstance(keep, np.ndarray):
        return ctx.constant(keep.astype(np.int32))
    return cast_value(ctx, keep, DataType.INT32)


def as_value(ctx, x) -> Value:
    return ctx.constant(x) if isinstance(x, np.ndarray) else x


def shaped(x, shape):
    """A NumPy array or a value under another shape."""
    return x.reshape(shape) if isinstance(x, np.ndarray) else x.view(shape)


# --- masks ------------------------------------------------------------------------------------


def _mask_index(
    ctx,
    mask: Value | None,
    b: int,
    s: int,
    total: int,
    *,
    what: str,
    past: int,
    forms: tuple[str, ...],
):
    """The keys ``mask`` keeps, as a rank-4 term over {B, 1, S or 1, T}: a NumPy bool array
    when known at import, else an INT32 / UINT8 value (non-zero keeps). ``forms`` are the shapes
    the op allows: "lengths" (B), "ends" (2B), "2d", "3d", "4d"."""
    if mask is None:
        return None
    mask = as_int32(ctx, mask)
    j = np.arange(total).reshape(1, 1, 1, total)
    if mask.rank == 1 and mask.shape[0] == b and "lengths" in forms:
        # Right padding: the keys from len[b] on are filtered.
        return less_than(ctx, j, mask.view((b, 1, 1, 1)))
    if mask.rank == 1 and mask.shape[0] == 2 * b and "ends" in forms:
        # Left and right padding: keys in [start[b], end[b]) are kept.
        if mask.const is not None:
            end, start = mask.const.reshape(2, b, 1, 1, 1)
            return (j < end) & (j >= start)
        end, start = split_value(ctx, mask, [b, b], 0)
        return logical_value(
            ctx,
            "AND",
            less_than(ctx, j, end.view((b, 1, 1, 1))),
            less_than(ctx, start.view((b, 1, 1, 1)), j + 1),
        )
    if mask.rank == 2 and mask.shape == (b, total) and "2d" in forms:
        raw = mask.view((b, 1, 1, total))
    elif mask.rank == 3 and mask.shape == (b, s, total) and "3d" in forms:
        raw = mask.view((b, 1, s, total))
    elif (
        mask.rank == 4
        and "4d" in forms
        and mask.shape[:2] == (b, 1)
        and mask.shape[2] == mask.shape[3]
    ):
        if past:
            raise ctx.fail(f"a 4-D {what} with a past is not supported")
        if mask.shape[2] < total:
            raise ctx.fail(f"4-D {what} {list(mask.shape)} is smaller than the {total} keys")
        raw = mask
        if mask.shape[2] != total:  # the first S x T block of the max-length mask
            if mask.const is not None:
                raw = ctx.constant(mask.const[:, :, :s, :total])
            else:
                desc = op("SLICE1")(
                    packed(mask.data_type, mask.shape),
                    packed(mask.data_type, (b, 1, s, total)),
                    input_window_offsets=[0, 0, 0, 0],
                    input_window_sizes=[b, 1, s, total],
                    input_window_strides=[1, 1, 1, 1],
                )
                raw = ctx.out(ctx.node(desc, [mask]), (b, 1, s, total))
    else:
        raise ctx.fail(
            f"{what} of shape {list(mask.shape)} is not supported (batch {b}, {s} queries, "
            f"{total} keys)"
        )
    if raw.const is not None:
        return raw.const > 0
    # A raw mask keeps values above 0; DirectML's BOOLEAN mask keeps every non-zero value.
    zero = ctx.constant(np.zeros((1, 1, 1, 1), np.int32))
    return binary_value(ctx, "ELEMENT_WISE_MAX", raw, zero)


def _causal(s: int, total: int, past: int, dtype) -> np.ndarray:
    """The unidirectional mask as an additive term {1, 1, S, T}: -inf after key ``past + i``
    for every query but the last, which keeps all its keys (ONNX Runtime's CPU kernels mask
    the first S - 1 rows only: the same thing when the keys end at the last query, T = past + S,
    and their rule when they do not)."""
    i = np.arange(s).reshape(1, 1, s, 1)
    j = np.arange(total).reshape(1, 1, 1, total)
    return np.where((j <= i + past) | (i == s - 1), 0, -np.inf).astype(dtype)


def attention_bias_value(
    ctx, bias: Value | None, full, what: str = "attention_bias"
) -> Value | None:
    if bias is None:
        return None
    b, n, s, total = full
    fits = bias.rank == 4 and bias.shape[0] in (1, b) and bias.shape[1] in (1, n)
    if not fits or bias.shape[2:] != (s, total):
        raise ctx.fail(
            f"{what} of shape {list(bias.shape)} must be [{b} or 1, {n} or 1, {s}, {total}]"
        )
    return bias


def _additive(ctx, bias: Value | None, causal: np.ndarray | None) -> Value | None:
    """attention_bias and the causal term as one RelativePositionBias value."""
    if causal is None:
        return bias
    if bias is None:
        return ctx.constant(causal)
    return binary_value(ctx, "ELEMENT_WISE_ADD", bias, ctx.constant(causal))


# --- MULTIHEAD_ATTENTION(1) -------------------------------------------------------------------


def _member(field: str) -> str:
    return "".join(part.capitalize() for part in field.split("_"))


def attend_heads(
    ctx,
    feeds: dict,
    *,
    dims,
    scale: float,
    filter_value: float,
    keep=None,
    additive: Value | None = None,
    presents: tuple[bool, bool] = (False, False),
):
    """One MULTIHEAD_ATTENTION (equal head counts, no past lengths) or MULTIHEAD_ATTENTION1
    node over ``feeds`` (descriptor field -> value); ``dims`` = (B, S, Hq, Hkv, D, Dv, T).
    Returns the output {B, S, Hq * Dv} and the present key / value {B, Hkv, T, D / Dv} (None
    where not asked for)."""
    b, s, hq, hkv, d, dv, total = dims
    query = next(v for k, v in feeds.items() if "query" in k)
    t = query.data_type
    full = (b, hq, s, total)
    fields = {name: packed(v.data_type, v.shape) for name, v in feeds.items()}
    mask_type = "NONE"
    if keep is not None and not (isinstance(keep, np.ndarray) and keep.all()):
        mask = _mask_value(ctx, keep)
        feeds["mask_tensor"], fields["mask_tensor"] = mask, broadcast(mask, full)
        mask_type = "BOOLEAN"
    if additive is not None:
        feeds["relative_position_bias_tensor"] = additive
        fields["relative_position_bias_tensor"] = broadcast(additive, full, t)
    fields["output_tensor"] = packed(t, (b, s, hq * dv))
    if presents[0]:
        fields["output_present_key_tensor"] = packed(t, (b, hkv, total, d))
    if presents[1]:
        fields["output_present_value_tensor"] = packed(t, (b, hkv, total, dv))
    common = {"scale": scale, "mask_filter_value": filter_value, "mask_type": mask_type}
    if hq == hkv and "past_sequence_lengths_tensor" not in feeds:
        desc = op("MULTIHEAD_ATTENTION")(**fields, head_count=hq, **common)
    else:
        desc = op("MULTIHEAD_ATTENTION1")(
            **fields, query_head_count=hq, key_value_head_count=hkv, **common
        )
    by_slot = {_member(name): value for name, value in feeds.items()}
    n = ctx.node(desc, [by_slot.get(slot) for slot, _ in desc.edge_slots("input")])
    y = ctx.out(n, (b, s, hq * dv), 0)
    k = 1
    out_k = out_v = None
    if presents[0]:
        out_k, k = ctx.out(n, (b, hkv, total, d), k), k + 1
    if presents[1]:
        out_v = ctx.out(n, (b, hkv, total, dv), k)
    return y, out_k, out_v


def _plain_attend(ctx, feeds: dict, masks, _past_length, *, dims, what, forms, presents):
    """Attention / MultiHeadAttention over ``feeds``: the L new keys / values after the P past
    ones (the plain past / present, T = P + L keys); ``masks``: the op's mask (named ``what``,
    of the ``forms`` it allows) and attention bias; ``dims`` = (B, S, N, D, Dv, L, P). Returns
    the output and the ``presents`` wanted. (``_shared_attend``'s signature.)"""
    b, s, n, d, dv, new, past = dims
    mask, bias = masks
    total = past + new
    keep = _mask_index(ctx, mask, b, s, total, what=what, past=past, forms=forms)
    causal = None
    if int(ctx.attr("unidirectional", 0)) and s > 1:
        # Keys / values with no new ones (MultiHeadAttention's {B, N, L, H}) have no offset.
        query = next(v for k, v in feeds.items() if "query" in k)
        causal = _causal(s, total, past if new else 0, query.data_type.numpy_dtype)
    return attend_heads(
        ctx,
        feeds,
        dims=(b, s, n, n, d, dv, total),
        scale=default_scale(ctx, d),
        filter_value=float(ctx.attr("mask_filter_value", DEFAULT_FILTER)),
        keep=keep,
        additive=_additive(ctx, attention_bias_value(ctx, bias, (b, n, s, total)), causal),
        presents=presents,
    )


# --- shared past / present buffers ------------------------------------------------------------


def _past_length(ctx, value: Value | None, b: int, capacity: int, new: int):
    """``past_sequence_length`` (one INT32 element, read at run time) as MULTIHEAD_ATTENTION1's
    PastSequenceLengths {B}: a NumPy array when known at import, else a value. It is clamped to
    [0, capacity - new], as ``lax.dynamic_update_slice`` clamps its start, so that the ``new``
    keys / values always land inside the buffer (ONNX Runtime fails on a length outside it)."""
    if value is None:
        raise ctx.fail(
            "input 'past_sequence_length' is required with a shared past / present buffer"
        )
    if value.data_type != DataType.INT32 or value.shape not in ((), (1,)):
        raise ctx.fail(
            f"past_sequence_length must be one int32 value, got {value.data_type.name} of shape "
            f"{list(value.shape)}"
        )
    if new > capacity:
        raise ctx.fail(
            f"the {new} new keys / values do not fit the past buffer's {capacity} positions "
            "(max_sequence_length)"
        )
    if value.const is not None:
        start = np.clip(int(value.const.reshape(-1)[0]), 0, capacity - new)
        return np.full((b,), start, np.int32)
    low = binary_value(
        ctx, "ELEMENT_WISE_MAX", value.view((1,)), ctx.constant(np.zeros(b, np.int32))
    )
    return binary_value(
        ctx, "ELEMENT_WISE_MIN", low, ctx.constant(np.full((1,), capacity - new, np.int32))
    )


def _padded(ctx, x, capacity: int, fill):
    """A mask term or bias (a NumPy array or a value) over the first keys of a buffer, ``fill``
    appended on the last axis up to its ``capacity``."""
    covered = x.shape[-1]
    if covered == capacity:
        return x
    shape = x.shape[:-1] + (capacity - covered,)
    if isinstance(x, np.ndarray):
        return np.concatenate([x, np.full(shape, fill, x.dtype)], axis=-1)
    return join_values(
        ctx, [x, ctx.constant(np.full(shape, fill, x.data_type.numpy_dtype))], -1 % x.rank
    )


def _covered(ctx, x: Value, new: int, capacity: int, what: str) -> int:
    """How many of a shared buffer's keys the mask or bias ``x`` covers (its last size), checked
    to lie between the ``new`` keys and the buffer's ``capacity`` (past_sequence_length + new,
    which ONNX Runtime wants it to equal, is only known at run time)."""
    covered = x.shape[-1] if x.rank else 0
    if not new <= covered <= capacity:
        raise ctx.fail(
            f"{what} of shape {list(x.shape)} must cover past_sequence_length + {new} keys, "
            f"between {new} and the buffer's {capacity}"
        )
    return covered


def _shared_masks(ctx, mask, bias, dims, *, what: str, forms: tuple[str, ...]):
    """The keep term and the attention bias of an attention over a shared buffer, over its
    {B, N, S, M} keys: a 2-D / 3-D mask or a bias covers the first T of them (ONNX Runtime's
    past_sequence_length + new), the keys after them are kept with no bias."""
    b, n, s, new, capacity = dims
    keep = None
    if mask is not None:
        if mask.rank == 4:
            raise ctx.fail(f"a 4-D {what} with a shared past / present buffer is not supported")
        covered = _covered(ctx, mask, new, capacity, what) if mask.rank > 1 else capacity
        keep = _mask_index(ctx, mask, b, s, covered, what=what, past=0, forms=forms)
        keep = _padded(ctx, keep, capacity, 1)
    if bias is not None:
        covered = _covered(ctx, bias, new, capacity, "attention_bias")
        bias = _padded(ctx, attention_bias_value(ctx, bias, (b, n, s, covered)), capacity, 0)
    return keep, bias


def _shared_attend(ctx, feeds: dict, masks, past_length, *, dims, what, forms, presents):
    """Attention over a shared past / present buffer: ``feeds``' past key / value are buffers
    {B, N, M, H / Hv} whose first ``past_length`` (past_sequence_length) positions are the past;
    the new keys / values are written after them and the queries attend the positions before
    their end (with ``unidirectional``, query i only those up to past + i, the last query all of
    them, as in ONNX Runtime). ``masks``: the op's mask (named ``what``, of the ``forms`` it
    allows) and attention bias; ``dims`` = (B, S, N, D, Dv, L, M). Returns the output and the
    ``presents`` wanted (the buffers with the new positions written).

    MULTIHEAD_ATTENTION1 with PastSequenceLengths does the write, the one place it is done; its
    attention is causal, aligned at the end, which is the op's attention with one query, or
    with ``unidirectional`` self-attention. Otherwise it only writes the buffers, and
    MULTIHEAD_ATTENTION attends them as its past, the positions from past + L on (and after a
    query's own, with ``unidirectional``) set to -inf by RelativePositionBias."""
    b, s, n, d, dv, new, capacity = dims
    keep, additive = _shared_masks(ctx, *masks, (b, n, s, new, capacity), what=what, forms=forms)
    lengths = _past_length(ctx, past_length, b, capacity, new)
    causal = bool(int(ctx.attr("unidirectional", 0)))
    full = (b, s, n, n, d, dv, capacity)
    attend = {
        "scale": default_scale(ctx, d),
        "filter_value": float(ctx.attr("mask_filter_value", DEFAULT_FILTER)),
    }
    writes = {**feeds, "past_sequence_lengths_tensor": as_value(ctx, lengths)}
    if s == 1 or (causal and new == s):
        return attend_heads(
            ctx, writes, dims=full, keep=keep, additive=additive, presents=presents, **attend
        )
    _, present_k, present_v = attend_heads(ctx, writes, dims=full, presents=(True, True), **attend)
    query = feeds.get("query_tensor")
    if query is None:  # packed {B, S, N, 3, H}
        query = split_value(ctx, feeds["stacked_query_key_value_tensor"], [1, 2], 3)[0]
        query = query.view((b, s, n * d))
    reads = {"query_tensor": query, "past_key_tensor": present_k, "past_value_tensor": present_v}
    if "bias_tensor" in feeds:  # with no new keys / values, its query part alone applies
        reads["bias_tensor"] = feeds["bias_tensor"]
    # Key j is read when j < past + new, and with causal by query i when j <= past + i or i is
    # the last query.
    i = np.arange(s).reshape(1, 1, s, 1)
    j = np.arange(capacity).reshape(1, 1, 1, capacity)
    lens = shaped(lengths, (b, 1, 1, 1))
    allowed = less_than(ctx, (j - new).astype(np.int32), lens)
    if causal:
        last = np.broadcast_to(i == s - 1, (1, 1, s, capacity))
        own = logical_value(ctx, "OR", less_than(ctx, (j - i - 1).astype(np.int32), lens), last)
        allowed = logical_value(ctx, "AND", allowed, own)
    bound = minus_inf_outside(ctx, allowed, query.data_type.numpy_dtype)
    if additive is not None:
        bound = binary_value(ctx, "ELEMENT_WISE_ADD", additive, bound)
    y, _, _ = attend_heads(ctx, reads, dims=full, keep=keep, additive=bound, **attend)
    return y, present_k if presents[0] else None, present_v if presents[1] else None


# --- Attention, QAttention --------------------------------------------------------------------


def _hidden_sizes(ctx, width: int, heads: int) -> tuple[int, int, int]:
    """(Q, K, V hidden sizes) of packed weights ``width`` wide: ``qkv_hidden_sizes``, or thirds."""
    sizes = ctx.attr("qkv_hidden_sizes", None)
    if sizes is None or len(sizes) == 0:
        if width % 3:
            raise ctx.fail(f"the weights' {width} columns are not three equal hidden sizes")
        sizes = [width // 3] * 3
    sizes = [int(n) for n in sizes]
    if len(sizes) != 3 or sum(sizes) != width or sizes[0] != sizes[1]:
        raise ctx.fail(
            f"qkv_hidden_sizes {sizes} must be three sizes (Q and K equal) adding up to the "
            f"weights' {width} columns"
        )
    if any(n <= 0 or n % heads for n in sizes):
        raise ctx.fail(f"qkv_hidden_sizes {sizes} must be positive multiples of num_heads {heads}")
    return sizes[0], sizes[1], sizes[2]


def _project(ctx, x: Value, w: Value, bias: Value | None) -> Value:
    """``x @ w + bias``: {B, S, Din} x {Din, W} -> {B, S, W} as one GEMM over the B * S rows."""
    b, s, din = x.shape
    width = w.shape[1]
    t = x.data_type
    rows = (1, 1, b * s, width)
    desc = op("GEMM")(
        packed(t, (1, 1, b * s, din)),
        packed(t, (1, 1, din, width)),
        None if bias is None else broadcast(bias, rows),
        packed(t, rows),
        beta=1.0 if bias is not None else 0.0,
    )
    return ctx.out(ctx.node(desc, [x, w, bias]), (b, s, width))


def _packed_attention(ctx, proj: Value, inputs, heads: int, sizes, *, mask_forms):
    """Attention / QAttention after the projection: ``proj`` {B, S, Hq + Hk + Hv}; ``inputs``
    (mask_index, past, attention_bias, past_sequence_length) as the op numbers them."""
    mask, past, attention_bias, past_length = inputs
    # Past and present are one buffer of max_sequence_length positions. Without a past there is
    # nothing to share, and without sharing ONNX Runtime reads the past's length from its
    # shape: past_sequence_length then goes unread, as there.
    shared = past is not None and bool(int(ctx.attr("past_present_share_buffer", 0)))
    hq, hk, hv = sizes
    b, s, _ = proj.shape
    d, dv = hq // heads, hv // heads
    feeds = {}
    p = 0
    if past is not None:
        if hq != hv:
            raise ctx.fail("a past needs equal Q, K and V hidden sizes")
        if past.rank != 5 or past.shape[:3] != (2, b, heads) or past.shape[4] != d:
            raise ctx.fail(f"past of shape {list(past.shape)} must be [2, {b}, {heads}, P, {d}]")
        p = past.shape[3]
        past_k, past_v = (v.view(past.shape[1:]) for v in split_value(ctx, past, [1, 1], 0))
        feeds.update(past_key_tensor=past_k, past_value_tensor=past_v)
    if hq == hk == hv:
        # {B, S, 3, N, H} read with the heads before the Q/K/V axis: the stacked tensor.
        stacked = transposed(ctx, proj.view((b, s, 3, heads, d)), (0, 1, 3, 2, 4))
        feeds["stacked_query_key_value_tensor"] = stacked
    else:
        q, k, v = split_value(ctx, proj, [hq, hk, hv], 2)
        feeds.update(query_tensor=q, key_tensor=k, value_tensor=v)
    present = ctx.wants(1)
    y, present_k, present_v = (_shared_attend if shared else _plain_attend)(
        ctx,
        feeds,
        (mask, attention_bias),
        past_length,
        dims=(b, s, heads, d, dv, s, p),
        what="mask_index",
        forms=mask_forms,
        presents=(present, present),
    )
    total = p if shared else p + s
    if not present:
        return [y, None]
    shape = (1, b, heads, total, d)
    return [y, join_values(ctx, [present_k.view(shape), present_v.view(shape)], 0)]


@converter("Attention", domain=MS)
def _attention(ctx, node, inputs):
    x, w, bias, mask, past, attention_bias, past_length = padded_inputs(inputs, 7)
    reject_unsupported(ctx, inputs, {}, {"do_rotary": 0})
    heads = int(ctx.attr("num_heads", 0))
    if heads < 1:
        raise ctx.fail("num_heads must be positive")
    if x.rank != 3 or w.rank != 2 or w.shape[0] != x.shape[2]:
        raise ctx.fail(
            f"input {list(x.shape)} must be [B, S, Din] and weights {list(w.shape)} [Din, W]"
        )
    sizes = _hidden_sizes(ctx, w.shape[1], heads)
    if bias is not None and bias.shape != (w.shape[1],):
        raise ctx.fail(f"bias of shape {list(bias.shape)} must be [{w.shape[1]}]")
    proj = _project(ctx, x, w, bias)
    forms = ("lengths", "ends", "2d", "3d", "4d")
    return _packed_attention(
        ctx, proj, (mask, past, attention_bias, past_length), heads, sizes, mask_forms=forms
    )


# --- MultiHeadAttention -----------------------------------------------------------------------


@converter("MultiHeadAttention", domain=MS)
def _multi_head_attention(ctx, node, inputs):
    query, key, value, bias, mask, attention_bias, past_k, past_v, past_length = padded_inputs(
        inputs, 9
    )
    reject_unsupported(ctx, inputs, {9: "cache_indirection"}, {})
    if ctx.wants(3):
        raise ctx.fail("output 'qk' is not supported")
    heads = int(ctx.attr("num_heads", 0))
    if heads < 1:
        raise ctx.fail("num_heads must be positive")
    if (past_k is None) != (past_v is None):
        raise ctx.fail("past_key and past_value come together")
    feeds = {}
    if query.rank == 5:  # packed QKV {B, S, N, 3, H}
        b, s, n, three, d = query.shape
        if key is not None or value is not None or n != heads or three != 3:
            raise ctx.fail(
                f"packed QKV {list(query.shape)} must be [B, S, {heads}, 3, H], without key "
                "and value"
            )
        kv, dv = s, d
        feeds["stacked_query_key_value_tensor"] = query
    elif query.rank == 3:
        b, s, hidden = query.shape
        if hidden % heads:
            raise ctx.fail(f"the query's hidden size {hidden} is not a multiple of {heads} heads")
        d = hidden // heads
        feeds["query_tensor"] = query
        if key is None:
            raise ctx.fail("input 'key' is required with a 3-D query")
        if key.rank == 5:  # packed KV {B, L, N, 2, H}
            if value is not None or key.shape[0] != b or key.shape[2:] != (heads, 2, d):
                raise ctx.fail(
                    f"packed KV {list(key.shape)} must be [{b}, L, {heads}, 2, {d}], without value"
                )
            kv, dv = key.shape[1], d
            feeds["stacked_key_value_tensor"] = key
        elif key.rank == 3:
            fits = value is not None and value.rank == 3 and value.shape[0] == b
            if not fits or key.shape != (b, value.shape[1], hidden) or value.shape[2] % heads:
                raise ctx.fail(
                    f"key {list(key.shape)} and value "
                    f"{None if value is None else list(value.shape)} must be [{b}, L, {hidden}] "
                    f"and [{b}, L, {heads} * Hv]"
                )
            kv, dv = key.shape[1], value.shape[2] // heads
            feeds.update(key_tensor=key, value_tensor=value)
        elif key.rank == 4:
            # Keys and values already projected, {B, N, L, H}: DirectML's past with no new keys
            # (the bias applies to the query alone, as in ONNX Runtime).
            fits = value is not None and value.rank == 4 and key.shape[:3] == value.shape[:3]
            if not fits or key.shape[:2] != (b, heads) or key.shape[3] != d:
                raise ctx.fail(
                    f"key {list(key.shape)} and value must be [{b}, {heads}, L, {d}] and "
                    f"[{b}, {heads}, L, Hv]"
                )
            if past_k is not None:
                raise ctx.fail("past_key / past_value cannot follow a key in [B, N, L, H]")
            kv, dv = 0, value.shape[3]
            feeds.update(past_key_tensor=key, past_value_tensor=value)
        else:
            raise ctx.fail(f"key of shape {list(key.shape)} is not supported")
    else:
        raise ctx.fail(f"query of shape {list(query.shape)} is not supported")
    p = 0
    if past_k is not None:
        p = past_k.shape[2] if past_k.rank == 4 else -1
        if past_k.shape != (b, heads, p, d) or past_v.shape != (b, heads, p, dv):
            raise ctx.fail(
                f"past_key {list(past_k.shape)} / past_value {list(past_v.shape)} must be "
                f"[{b}, {heads}, P, {d}] / [{b}, {heads}, P, {dv}]"
            )
        feeds.update(past_key_tensor=past_k, past_value_tensor=past_v)
    elif kv == 0:
        p = key.shape[2]
    if bias is not None:
        want = heads * (2 * d + dv)
        if bias.shape != (want,):
            raise ctx.fail(f"bias of shape {list(bias.shape)} must be [{want}]")
        feeds["bias_tensor"] = bias
    # With a past, past_key / past_value are the buffers present_key / present_value share
    # (ONNX Runtime reads past_sequence_length only with a past, as here).
    shared = past_length is not None and past_k is not None
    y, present_k, present_v = (_shared_attend if shared else _plain_attend)(
        ctx,
        feeds,
        (mask, attention_bias),
        past_length,
        dims=(b, s, heads, d, dv, kv, p),
        what="key_padding_mask",
        forms=("lengths", "2d", "3d"),
        presents=(ctx.wants(1), ctx.wants(2)),
    )
    return [y, present_k, present_v]


# --- QAttention -------------------------------------------------------------------------------


def _quant_param(ctx, value: Value | None, width: int | None, what: str) -> Value | None:
    """A scale or zero point as MATRIX_MULTIPLY_INTEGER_TO_FLOAT's 4-D parameter: one value
    {1, 1, 1, 1}, or (``width`` given) one per column {1, 1, 1, W}."""
    if value is None:
        return None
    if value.shape in ((), (1,)):
        return value.view((1, 1, 1, 1))
    if width is not None and value.shape == (width,):
        return value.view((1, 1, 1, width))
    raise ctx.fail(
        f"{what} of shape {list(value.shape)} must be a scalar"
        + (f" or [{width}]" if width is not None else "")
    )


@converter("QAttention", domain=MS)
def _q_attention(ctx, node, inputs):
    x, w, bias, x_scale, w_scale, mask, x_zero, w_zero, past = padded_inputs(inputs, 9)
    reject_unsupported(ctx, inputs, {}, {"do_rotary": 0, "past_present_share_buffer": 0})
    heads = int(ctx.attr("num_heads", 0))
    if heads < 1:
        raise ctx.fail("num_heads must be positive")
    if x.rank != 3 or w.rank != 2 or w.shape[0] != x.shape[2]:
        raise ctx.fail(
            f"input {list(x.shape)} must be [B, S, Din] and weight {list(w.shape)} [Din, W]"
        )
    b, s, din = x.shape
    width = w.shape[1]
    sizes = _hidden_sizes(ctx, width, heads)
    if bias.shape != (width,):
        raise ctx.fail(f"bias of shape {list(bias.shape)} must be [{width}]")
    if w.data_type != x.data_type:
        # MATRIX_MULTIPLY_INTEGER_TO_FLOAT takes one integer type: weights of the other 8-bit
        # type are moved by 128, their zero point too, which leaves w - zero point unchanged.
        if w.known is None or (w_zero is not None and w_zero.known is None):
            raise ctx.fail(
                f"a weight of type {w.data_type.name} with an input of type "
                f"{x.data_type.name} must be known at import (with its zero point)"
            )
        shift = 128 if x.data_type == DataType.UINT8 else -128
        dtype = x.data_type.numpy_dtype
        w = ctx.constant((w.known.astype(np.int16) + shift).astype(dtype))
        zero = np.zeros((), np.int16) if w_zero is None else w_zero.known.astype(np.int16)
        w_zero = ctx.constant((zero + shift).astype(dtype))
    t = bias.data_type
    rows = (1, 1, b * s, width)
    params = [
        _quant_param(ctx, x_scale, None, "input_scale"),
        _quant_param(ctx, x_zero, None, "input_zero_point"),
        _quant_param(ctx, w_scale, width, "weight_scale"),
        _quant_param(ctx, w_zero, width, "weight_zero_point"),
    ]
    desc = op("MATRIX_MULTIPLY_INTEGER_TO_FLOAT")(
        packed(x.data_type, (1, 1, b * s, din)),
        packed(t, params[0].shape),
        None if params[1] is None else packed(x.data_type, params[1].shape),
        packed(x.data_type, (1, 1, din, width)),
        packed(t, params[2].shape),
        None if params[3] is None else packed(x.data_type, params[3].shape),
        broadcast(bias, rows),
        packed(t, rows),
    )
    n = ctx.node(desc, [x, params[0], params[1], w, params[2], params[3], bias])
    proj = ctx.out(n, (b, s, width))
    forms = ("lengths", "ends", "2d", "3d", "4d")
    return _packed_attention(ctx, proj, (mask, past, None, None), heads, sizes, mask_forms=forms)
