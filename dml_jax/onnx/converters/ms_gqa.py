"""ONNX Runtime's com.microsoft GroupQueryAttention and RotaryEmbedding onto DirectML, with the
semantics of ONNX Runtime's CPU kernels (``ms_attention.py`` has the rest of the family, its
masks and the shared helpers).

GroupQueryAttention (``total_sequence_length`` is needed at import, as ONNX Runtime's DirectML
provider needs it on the CPU): the first prompt (S == total_sequence_length) attends its own keys
causally; a later step (S == 1, or S > 1 with batch 1) continues a cache holding
``seqlens_k[b] + 1 - S`` positions. Either way the new keys / values are written after them into
a present cache of ``max(total_sequence_length, past length)`` positions whose other rows are 0:
MULTIHEAD_ATTENTION1's past is the given past (it reads none of its rows from the valid length
on) with zero rows JOINed up to the capacity (FILL_VALUE_CONSTANT; all of it for a first prompt,
with lengths 0), its PastSequenceLengths those lengths, and its presents' rows after the new ones
are then set to 0 (LESS_THAN, ELEMENT_WISE_IF). A query at
absolute position p attends the keys up to p and, with ``local_window_size`` W, only the last W
of them (a BOOLEAN mask with a -inf filter); a right-padded first prompt's padding queries attend
like its last token. ``do_rotary`` rotates Q and K at positions ``past + s`` (or
``position_ids``; a first prompt reads only its first element, as the CPU kernel does).
``softcap`` has no MULTIHEAD_ATTENTION member: MULTIHEAD_ATTENTION1 then only builds the present
caches, and the attention over them is GEMM, ACTIVATION_SCALED_TANH, ELEMENT_WISE_ADD of the
masks, ACTIVATION_SOFTMAX1 and GEMM, in float32 as the CPU kernel computes it.

RotaryEmbedding reads ``position_ids`` of one value as the first position of every entry; its
``scale`` attribute is ignored, as the CPU kernel ignores it.

Rejected (a ValidationError naming the attribute or input): GroupQueryAttention's
``smooth_softmax``, ``head_sink``, ``qk_output`` / ``output_qk``, ``causal`` = 0,
``sliding_window_cache``, quantized caches (``k_quant_type`` / ``v_quant_type``, ``k_scale`` /
``v_scale``), ``q_norm_weight`` / ``k_norm_weight``, ``query_seqlens``, ``local_window_size`` 0,
and a key / value of another length than the query; RotaryEmbedding's ``is_packed_batching``.
"""

from __future__ import annotations

import math

import numpy as np

from ..importer import Value, broadcast, packed
from . import converter
from ._common import DataType, binary_value, cast_value, const_ints, op
from .attention import (
    gather_rows,
    grouped_logits,
    grouped_values,
    join_values,
    rotary_dim,
    rotate,
    soft_capped,
    split_value,
    transposed,
)
from .ms_attention import (
    MS,
    as_int32,
    as_value,
    attend_heads,
    attention_bias_value,
    default_scale,
    fill_value,
    less_than,
    logical_value,
    minus_inf_outside,
    padded_inputs,
    reject_unsupported,
    shaped,
)

# --- GroupQueryAttention ----------------------------------------------------------------------


def _plus(ctx, a, b):
    """``a + b`` for INT32 operands (NumPy arrays or values; NumPy when both are known)."""
    known = [x if isinstance(x, np.ndarray) else x.const for x in (a, b)]
    if all(x is not None for x in known):
        return (known[0].astype(np.int64) + known[1].astype(np.int64)).astype(np.int32)
    a = ctx.constant(a.astype(np.int32)) if isinstance(a, np.ndarray) else a
    b = ctx.constant(b.astype(np.int32)) if isinstance(b, np.ndarray) else b
    return binary_value(ctx, "ELEMENT_WISE_ADD", a, b)


def _gqa_positions(ctx, position_ids, lengths, b: int, s: int, first: bool):
    """The rotary positions {B or 1, S}: ``position_ids`` (a first prompt reads its first
    element as the offset of every batch), else ``past + s``."""
    steps = np.arange(s, dtype=np.int32).reshape(1, s)
    if position_ids is not None:
        if position_ids.shape != (b, s):
            raise ctx.fail(f"position_ids of shape {list(position_ids.shape)} must be [{b}, {s}]")
        if not first:
            return position_ids
        if position_ids.const is not None:
            return steps + np.int32(position_ids.const.reshape(-1)[0])
        t = position_ids.data_type
        desc = op("SLICE1")(
            packed(t, (b, s)),
            packed(t, (1, 1)),
            input_window_offsets=[0, 0],
            input_window_sizes=[1, 1],
            input_window_strides=[1, 1],
        )
        return _plus(ctx, ctx.out(ctx.node(desc, [position_ids]), (1, 1)), steps)
    if first:
        return steps
    return _plus(ctx, shaped(lengths, (b, 1)), steps)


def _gqa_keep(ctx, seqlens: Value, lengths, dims, window: int, first: bool):
    """What GroupQueryAttention's queries keep beyond MULTIHEAD_ATTENTION1's causal frontier
    ``j <= L_b + i``, over {B, 1, S, C} (None: nothing more). A first prompt may be right-padded
    (``seqlens_k[b] + 1`` < S): as in ONNX Runtime's CPU kernel, a padding query attends like the
    entry's last token, ``j <= min(i, seqlens_k[b])``, its window ending there."""
    b, s, capacity = dims
    i = np.arange(s).reshape(1, 1, s, 1)
    j = np.arange(capacity).reshape(1, 1, 1, capacity)
    lens = shaped(lengths, (b, 1, 1, 1))
    last = seqlens.view((b, 1, 1, 1))
    padded = first and not (seqlens.const is not None and np.all(seqlens.const >= s - 1))
    keep = None
    if padded:
        keep = less_than(ctx, (j - 1).astype(np.int32), last)  # j <= seqlens_k[b]
    if window > 0:
        # L_b + i - W < j; in a padded prompt also min(i, seqlens_k[b]) - W < j.
        inside = less_than(ctx, lens, (j - i + window).astype(np.int32))
        if padded:
            tail = less_than(ctx, last, (j + window).astype(np.int32))
            inside = logical_value(ctx, "OR", inside, tail)
        keep = inside if keep is None else logical_value(ctx, "AND", keep, inside)
    return keep


@converter("GroupQueryAttention", domain=MS)
def _group_query_attention(ctx, node, inputs):
    query, key, value, past_k, past_v, seqlens, total_in, cos, sin, position_ids, bias = (
        padded_inputs(inputs, 11)
    )
    reject_unsupported(
        ctx,
        inputs,
        {
            11: "head_sink",
            12: "k_scale",
            13: "v_scale",
            14: "q_norm_weight",
            15: "k_norm_weight",
            16: "query_seqlens",
        },
        {
            "smooth_softmax": 0,
            "qk_output": 0,
            "causal": 1,
            "sliding_window_cache": 0,
            "k_quant_type": "NONE",
            "v_quant_type": "NONE",
        },
    )
    if ctx.wants(3):
        raise ctx.fail("output 'output_qk' is not supported")
    for name, given in (
        ("query", query),
        ("seqlens_k", seqlens),
        ("total_sequence_length", total_in),
    ):
        if given is None:
            raise ctx.fail(f"input '{name}' is required")
    heads, kv_heads = int(ctx.attr("num_heads", 0)), int(ctx.attr("kv_num_heads", 0))
    if heads < 1 or kv_heads < 1 or heads % kv_heads:
        raise ctx.fail(f"num_heads {heads} must be a positive multiple of kv_num_heads {kv_heads}")
    if query.rank != 3:
        raise ctx.fail(f"query of shape {list(query.shape)} must be 3-D")
    b, s, width = query.shape
    t = query.data_type
    if key is None:  # packed QKV {B, S, (N + 2 Nkv) H}
        if value is not None or width % (heads + 2 * kv_heads):
            raise ctx.fail(
                f"packed QKV of width {width} must hold {heads} + 2 * {kv_heads} heads, "
                "without key and value"
            )
        d = width // (heads + 2 * kv_heads)
        q, k, v = split_value(ctx, query, [heads * d, kv_heads * d, kv_heads * d], 2)
    else:
        if width % heads:
            raise ctx.fail(f"the query's hidden size {width} is not a multiple of {heads} heads")
        d = width // heads
        want = (b, s, kv_heads * d)
        if value is None or key.shape != want or value.shape != want:
            raise ctx.fail(
                f"key {list(key.shape)} and value "
                f"{None if value is None else list(value.shape)} must both be {list(want)}"
            )
        q, k, v = query, key, value
    total = const_ints(ctx, total_in, "total_sequence_length")[0]
    if (past_k is None) != (past_v is None):
        raise ctx.fail("past_key and past_value come together")
    p = 0
    if past_k is not None:
        p = past_k.shape[2] if past_k.rank == 4 else -1
        want = (b, kv_heads, p, d)
        if past_k.shape != want or past_v.shape != want or past_k.data_type != t:
            raise ctx.fail(
                f"past_key {list(past_k.shape)} / past_value {list(past_v.shape)} must be "
                f"[{b}, {kv_heads}, P, {d}] of the query's type"
            )
    capacity = max(total, p)
    subsequent = s > 1 and s != total
    if subsequent and b != 1:
        raise ctx.fail("a prompt continuing a cache (1 < S != total_sequence_length) needs batch 1")
    first = not subsequent and s == total
    if not first and not subsequent and s != 1:
        raise ctx.fail(f"sequence length {s} exceeds total_sequence_length {total}")
    seqlens = as_int32(ctx, seqlens)
    if seqlens.shape not in ((b,), (b, 1)):
        raise ctx.fail(f"seqlens_k of shape {list(seqlens.shape)} must be [{b}]")
    # Positions cached before this step, per batch entry.
    if first or past_k is None:
        lengths = np.zeros((b,), np.int32)
    else:
        lengths = _plus(ctx, seqlens.view((b,)), np.full((1,), 1 - s, np.int32))

    if int(ctx.attr("do_rotary", 0)):
        if cos is None or sin is None or cos.shape != sin.shape or cos.rank != 2:
            raise ctx.fail("do_rotary needs 2-D cos_cache and sin_cache of one shape")
        dim = rotary_dim(ctx, d, cos.shape[1], 2 * cos.shape[1])
        positions = as_value(ctx, _gqa_positions(ctx, position_ids, lengths, b, s, first))
        angles = (positions.shape[0], s, 1, dim // 2)
        cos_at = gather_rows(ctx, cos, positions).view(angles)
        sin_at = gather_rows(ctx, sin, positions).view(angles)
        interleaved = bool(int(ctx.attr("rotary_interleaved", 0)))

        def rotary(x, n):
            y = rotate(ctx, x.view((b, s, n, d)), cos_at, sin_at, interleaved=interleaved, dim=dim)
            return y.view((b, s, n * d))

        q, k = rotary(q, heads), rotary(k, kv_heads)
    elif cos is not None or sin is not None or position_ids is not None:
        raise ctx.fail("cos_cache, sin_cache and position_ids need do_rotary = 1")

    # The cache MULTIHEAD_ATTENTION1 writes the new keys / values into: the past as it is
    # (MULTIHEAD_ATTENTION1 reads none of its rows from an entry's length on), then zeros up to
    # the capacity. Its presents keep those rows; ONNX Runtime's have 0 there, set after
    # (``_zeroed_after``), so that the attention reads the given past buffer itself.
    presents = (ctx.wants(1), ctx.wants(2))
    caches = []
    empty = p == 0 or (isinstance(lengths, np.ndarray) and not lengths.any())
    for past in (past_k, past_v):
        if empty:
            caches.append(fill_value(ctx, t, (b, kv_heads, capacity, d), 0))
            continue
        cache = past
        if capacity > p:
            cache = join_values(
                ctx, [cache, fill_value(ctx, t, (b, kv_heads, capacity - p, d), 0)], 2
            )
        caches.append(cache)
    if isinstance(lengths, np.ndarray) and not lengths.any():  # as ONNX Runtime's DirectML GQA
        length_value = fill_value(ctx, DataType.INT32, (b,), 0)
    else:
        length_value = as_value(ctx, lengths)

    # A local window keeps the last W keys up to the query's position: L_b + i - W < j.
    window = int(ctx.attr("local_window_size", -1))
    if window == 0 or window < -1:
        raise ctx.fail(f"local_window_size {window} must be -1 or positive")
    keep = _gqa_keep(ctx, seqlens.view((b,)), lengths, (b, s, capacity), window, first)
    additive = attention_bias_value(ctx, bias, (b, heads, s, total))
    if additive is not None and capacity > total:
        pad = np.zeros(additive.shape[:3] + (capacity - total,), t.numpy_dtype)
        additive = join_values(ctx, [additive, ctx.constant(pad)], 3)
    feeds = {
        "query_tensor": q,
        "key_tensor": k,
        "value_tensor": v,
        "past_key_tensor": caches[0],
        "past_value_tensor": caches[1],
        "past_sequence_lengths_tensor": length_value,
    }
    dims = (b, s, heads, kv_heads, d, d, capacity)
    softcap = float(ctx.attr("softcap", 0.0))
    if softcap < 0:
        raise ctx.fail(f"softcap {softcap} must not be negative")
    ends = None if empty else _plus(ctx, seqlens.view((b,)), np.ones((1,), np.int32))
    if softcap == 0:
        y, present_k, present_v = attend_heads(
            ctx,
            feeds,
            dims=dims,
            scale=default_scale(ctx, d),
            filter_value=-math.inf,
            keep=keep,
            additive=additive,
            presents=presents,
        )
        return [y, _zeroed_after(ctx, present_k, ends), _zeroed_after(ctx, present_v, ends)]
    # MULTIHEAD_ATTENTION1 has no soft cap: it builds the present caches, and the attention is
    # ONNX Runtime's decomposition over them.
    _, present_k, present_v = attend_heads(
        ctx, feeds, dims=dims, scale=1.0, filter_value=-math.inf, presents=(True, True)
    )
    present_k, present_v = (_zeroed_after(ctx, x, ends) for x in (present_k, present_v))
    masks = (lengths, keep, additive)
    y = _softcapped(ctx, q, present_k, present_v, masks, dims, default_scale(ctx, d), softcap)
    return [y, present_k if presents[0] else None, present_v if presents[1] else None]


def _zeroed_after(ctx, present, ends):
    """A present cache {B, Hkv, C, D} with its rows from each entry's end (``ends`` {B}: its
    cached positions and the new ones, ``seqlens_k + 1``) on set to 0, as ONNX Runtime's
    presents have them (ELEMENT_WISE_IF); as it is where ``ends`` is None (a cache that was
    empty: zeros there already) or the present is not wanted."""
    if present is None or ends is None:
        return present
    b, c = present.shape[0], present.shape[2]
    rows = np.arange(c, dtype=np.int32).reshape(1, 1, c, 1)
    keep = as_value(ctx, less_than(ctx, rows, as_value(ctx, ends).view((b, 1, 1, 1))))
    t, shape = present.data_type, present.shape
    zero = ctx.constant(np.zeros((1, 1, 1, 1), t.numpy_dtype))
    desc = op("ELEMENT_WISE_IF")(
        broadcast(keep, shape), packed(t, shape), broadcast(zero, shape), packed(t, shape)
    )
    return ctx.out(ctx.node(desc, [keep, present, zero]), shape)


def _softcapped(ctx, q, keys, values, masks, dims, scale: float, softcap: float) -> Value:
    """Grouped attention with a soft cap, in float32 as ONNX Runtime's CPU kernel computes it:
    GEMM (query heads as one batch over the key/value heads), ACTIVATION_SCALED_TANH
    (``softcap * tanh(x / softcap)``), ELEMENT_WISE_ADD of attention_bias and of -inf outside
    the causal window, ACTIVATION_SOFTMAX1, GEMM."""
    lengths, keep, additive = masks
    b, s, hq, _, d, _, total = dims
    t, f32 = q.data_type, DataType.FLOAT32
    q4 = cast_value(ctx, transposed(ctx, q.view((b, s, hq, d)), (0, 2, 1, 3)), f32)
    keys, values = cast_value(ctx, keys, f32), cast_value(ctx, values, f32)
    full = (b, hq, s, total)
    logits = soft_capped(ctx, grouped_logits(ctx, q4, keys, scale), softcap)
    if additive is not None:
        logits = binary_value(ctx, "ELEMENT_WISE_ADD", logits, cast_value(ctx, additive, f32))
    # Query i of entry b sees the keys up to its position L_b + i (and the window's).
    i = np.arange(s).reshape(1, 1, s, 1)
    j = np.arange(total).reshape(1, 1, 1, total)
    lens = shaped(lengths, (b, 1, 1, 1))
    allowed = less_than(ctx, (j - i - 1).astype(np.int32), lens)
    if keep is not None:
        allowed = logical_value(ctx, "AND", allowed, keep)
    logits = binary_value(ctx, "ELEMENT_WISE_ADD", logits, minus_inf_outside(ctx, allowed))
    softmax = op("ACTIVATION_SOFTMAX1")(packed(f32, full), packed(f32, full), axes=[3])
    probs = ctx.out(ctx.node(softmax, [logits]), full)
    y = grouped_values(ctx, probs, values)
    y = transposed(ctx, y, (0, 2, 1, 3)).view((b, s, hq * d))
    return cast_value(ctx, y, t)


# --- RotaryEmbedding --------------------------------------------------------------------------


@converter("RotaryEmbedding", domain=MS)
def _rotary_embedding(ctx, node, inputs):
    x, positions, cos, sin = inputs
    reject_unsupported(ctx, inputs, {}, {"is_packed_batching": 0})
    if cos.rank != 2 or cos.shape != sin.shape:
        raise ctx.fail(
            f"cos_cache {list(cos.shape)} and sin_cache {list(sin.shape)} must be 2-D, one shape"
        )
    heads = int(ctx.attr("num_heads", 0))
    attribute = int(ctx.attr("rotary_embedding_dim", 0))
    if attribute and not heads:
        raise ctx.fail("rotary_embedding_dim needs num_heads")
    if x.rank == 4:  # {B, N, S, H}
        b, heads, s, head = x.shape
    elif x.rank == 3:  # {B, S, N * H}
        b, s, hidden = x.shape
        head = hidden // heads if heads else 2 * cos.shape[1]
        if head < 1 or hidden % head:
            raise ctx.fail(f"the hidden size {hidden} is not a whole number of heads of {head}")
        heads = hidden // head
    else:
        raise ctx.fail(f"input must be 3-D or 4-D, got shape {list(x.shape)}")
    dim = rotary_dim(ctx, head, cos.shape[1], attribute)
    positions = as_int32(ctx, positions)
    if positions.rank <= 1 and positions.shape in ((), (1,)):
        # One offset: position offset + s for every batch entry.
        steps = np.arange(s, dtype=np.int32).reshape(1, s)
        positions = as_value(ctx, _plus(ctx, positions.view((1, 1)), steps))
    elif positions.shape != (b, s):
        raise ctx.fail(f"position_ids of shape {list(positions.shape)} must be [1] or [{b}, {s}]")
    cos_at, sin_at = gather_rows(ctx, cos, positions), gather_rows(ctx, sin, positions)
    interleaved = bool(int(ctx.attr("interleaved", 0)))
    if x.rank == 4:
        angles = (positions.shape[0], 1, s, dim // 2)
        y = rotate(
            ctx, x, cos_at.view(angles), sin_at.view(angles), interleaved=interleaved, dim=dim
        )
        return [y]
    angles = (positions.shape[0], s, 1, dim // 2)
    y = rotate(
        ctx,
        x.view((b, s, heads, head)),
        cos_at.view(angles),
        sin_at.view(angles),
        interleaved=interleaved,
        dim=dim,
    )
    return [y.view(x.shape)]
