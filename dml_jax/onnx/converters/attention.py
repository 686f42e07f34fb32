"""ONNX's Attention (opsets 23 to 25) onto DirectML's MULTIHEAD_ATTENTION (equal query and
key/value head counts) or MULTIHEAD_ATTENTION1 (grouped heads, or an external key/value cache
with per-batch lengths).

Layouts: DirectML takes Q / K / V as {B, S, N * H}; ONNX's 4-D {B, N, S, H} tensors are
transposed to it (an identity reading permuted strides) and Y back; 3-D inputs pass as they are,
with q_num_heads / kv_num_heads as the head counts. past_key / past_value {B, Nkv, P, H} and
present_key / present_value are DirectML's PastKey / PastValue and OutputPresentKey / Value
unchanged. ``scale`` is Scale (default 1 / sqrt(H)); MaskFilterValue is -inf.

Masks, over {B, Nq, S, T} (T = P + the new keys):

- A float attn_mask (its last dimension padded with -inf to T, as ONNX pads it) is the
  RelativePositionBiasTensor, read through stride-0 broadcasting.
- What a boolean attn_mask, is_causal (aligned at the end: key j is allowed for query i iff
  j <= i + offset, the offset being P, or nonpad_kv_seqlen[b] - S with an external cache) and a
  local window (opset 25) allow is one BOOLEAN mask (0 = masked), folded at import where it
  depends on shapes only and built from LOGICAL_LESS_THAN / LOGICAL_AND nodes where it depends
  on nonpad_kv_seqlen's values.
- nonpad_kv_seqlen (opset 24, an external cache K / V {B, Nkv, T, H}): with is_causal and no
  other mask, K and V are MULTIHEAD_ATTENTION1's PastKey / PastValue with
  PastSequenceLengthsTensor = nonpad_kv_seqlen and no new key or value, whose causal frontier
  ``j <= L_b - S + i`` is ONNX's (ONNX Runtime's DirectML GroupQueryAttention binds its cache
  so); without is_causal, a boolean mask or a window it is the KEY_SEQUENCE_LENGTH mask {1, B};
  otherwise ``j < nonpad_kv_seqlen[b]`` joins the BOOLEAN mask.

A query row whose keys are all masked is a zero row in ONNX; DirectML's softmax over -inf gives
NaN there (docs/semantics.md, "Multi-head attention"). Where such a row can occur (a mask known
only at run time, or one known at import that has one), the output rows are selected by
ELEMENT_WISE_IF from "the row has a key": REDUCE MAX over the allowed positions.

softcap and the qk_matmul_output output have no MULTIHEAD_ATTENTION member: such nodes are
computed by the operators of ONNX's own decomposition (GEMM for both products, grouped heads as
one GEMM batch over the key/value heads, ACTIVATION_SCALED_TANH for the soft cap,
ELEMENT_WISE_ADD for the masks as one additive bias, ACTIVATION_SOFTMAX1, the same zero-row
guard).

RotaryEmbedding (opset 23) has no DirectML operator; it is built from the operators ONNX
Runtime's DirectML provider builds its com.microsoft RotaryEmbedding from (``rotate``): GATHER of
the cos / sin caches at position_ids, SPLIT of each head's rotated part into its two halves (or
its even and odd entries when interleaved), JOIN of the halves swapped, ELEMENT_WISE_MULTIPLY by
the signs {-1, 1} (FILL_VALUE_SEQUENCE), by cos and by sin, and ELEMENT_WISE_ADD: ``x * cos +
swap(x) * sign * sin``. The part of a head beyond rotary_embedding_dim is split off first and
joined back unchanged.
"""

from __future__ import annotations

import math

import numpy as np

from ...tensor import TensorDesc, packed_strides
from ..importer import Value, broadcast, packed
from . import converter
from ._common import DataType, binary_value, cast_value, op, reduce_value, select_value, view
from .movement import typed_scalar


def transposed(ctx, value: Value, perm: tuple[int, ...]) -> Value:
    """``value`` transposed by ``perm``: an identity reading permuted strides."""
    strides = packed_strides(value.shape)
    shape = tuple(value.shape[p] for p in perm)
    source = TensorDesc(value.data_type, shape, strides=tuple(strides[p] for p in perm))
    desc = op("ELEMENT_WISE_IDENTITY")(source, packed(value.data_type, shape))
    return ctx.out(ctx.node(desc, [value]), shape, is_bool=value.is_bool)


def _read(value: Value, shape: tuple[int, ...], perm: tuple[int, ...]) -> TensorDesc:
    """A desc of ``shape`` reading ``value``'s packed data with its axes in ``perm`` order,
    stride 0 where ``value`` has 1 and ``shape`` more (a transposed broadcast)."""
    own = packed_strides(value.shape)
    strides = tuple(0 if value.shape[p] == 1 and n != 1 else own[p] for p, n in zip(perm, shape))
    return TensorDesc(value.data_type, shape, strides=strides)


def _heads_first(ctx, x: Value, heads: int) -> Value:
    """{B, S, N * H} -> {B, N, S, H}."""
    b, s, hidden = x.shape
    return transposed(ctx, x.view((b, s, heads, hidden // heads)), (0, 2, 1, 3))


def _heads_last(ctx, x: Value) -> Value:
    """{B, N, S, H} -> {B, S, N * H}."""
    b, n, s, h = x.shape
    return transposed(ctx, x, (0, 2, 1, 3)).view((b, s, n * h))


def _rank4(shape) -> tuple[int, ...]:
    return (1,) * (4 - len(shape)) + tuple(shape)


class _Allowed:
    """The positions a query may attend, as a conjunction of terms over {B, Nq, S, T}: NumPy
    booleans known at import (folded together) and UINT8 values of the graph."""

    def __init__(self):
        self.const: np.ndarray | None = None
        self.values: list[Value] = []

    def add(self, term) -> None:
        if isinstance(term, Value):
            if term.const is None:
                self.values.append(term.view(_rank4(term.shape)))
                return
            term = term.const.astype(bool)
        term = np.asarray(term, bool)
        term = term.reshape(_rank4(term.shape))
        self.const = term if self.const is None else self.const & term

    @property
    def empty(self) -> bool:
        return not self.values and (self.const is None or bool(np.all(self.const)))

    def value(self, ctx) -> Value | None:
        """The conjunction as one UINT8 value (None when everything is allowed)."""
        if self.empty:
            return None
        terms = list(self.values)
        if self.const is not None and not np.all(self.const):
            terms.append(ctx.constant(self.const.astype(np.uint8)).view(self.const.shape))
        out = terms[0]
        for t in terms[1:]:
            out = binary_value(ctx, "ELEMENT_WISE_LOGICAL_AND", out, t, is_bool=True)
        return out


def _pad_last(ctx, mask: Value, total: int, fill) -> Value:
    """``mask`` with its last dimension padded with ``fill`` to ``total`` (JOIN)."""
    short = mask.shape[-1]
    if short == total:
        return mask
    if short > total:
        raise ctx.fail(f"attn_mask's last dimension {short} exceeds the {total} keys")
    dtype = np.bool_ if mask.is_bool else mask.data_type.numpy_dtype
    if mask.const is not None:
        pad = [(0, 0)] * (mask.rank - 1) + [(0, total - short)]
        return ctx.constant(np.pad(mask.const, pad, constant_values=fill))
    shape = mask.shape[:-1] + (total - short,)
    block = ctx.constant(np.full(shape, fill, dtype))
    out = mask.shape[:-1] + (total,)
    t = mask.data_type
    desc = op("JOIN")([packed(t, mask.shape), packed(t, shape)], packed(t, out), axis=mask.rank - 1)
    return ctx.out(ctx.node(desc, [mask, block]), out, is_bool=mask.is_bool)


def _less(ctx, a, b):
    """``a < b`` for INT32 operands, one of them an array known at import: a UINT8 (ONNX BOOL)
    value, or a NumPy array when both are known."""
    known = [x if isinstance(x, np.ndarray) else x.const for x in (a, b)]
    if all(x is not None for x in known):
        return np.less(*(x.reshape(_rank4(x.shape)) for x in known))
    a = ctx.constant(np.asarray(a, np.int32)) if isinstance(a, np.ndarray) else a
    b = ctx.constant(np.asarray(b, np.int32)) if isinstance(b, np.ndarray) else b
    return binary_value(ctx, "ELEMENT_WISE_LOGICAL_LESS_THAN", a, b, is_bool=True)


def _row_has_key(ctx, allowed: _Allowed, additive: Value | None):
    """Whether each query row keeps a key, {b, n, S, 1}: a NumPy array when known at import,
    else a UINT8 value."""
    if not allowed.values and (additive is None or additive.const is not None):
        keep = np.ones((1, 1, 1, 1), bool) if allowed.const is None else allowed.const
        if additive is not None:
            keep = keep & (additive.const.reshape(_rank4(additive.shape)) > -np.inf)
        return np.any(keep, axis=-1, keepdims=True)
    terms = _Allowed()
    terms.const, terms.values = allowed.const, list(allowed.values)
    if additive is not None:
        finite = binary_value(
            ctx,
            "ELEMENT_WISE_LOGICAL_GREATER_THAN",
            additive.view(_rank4(additive.shape)),
            ctx.constant(np.full((1, 1, 1, 1), -np.inf, additive.data_type.numpy_dtype)),
            is_bool=True,
        )
        terms.add(finite)
    keep = terms.value(ctx)
    return reduce_value(ctx, keep, "MAX", [3], keepdims=True)


def _guard(ctx, y: Value, rows, perm: tuple[int, ...]) -> Value:
    """Zero rows of ``y`` whose query has no key. ``rows`` {b, n, S, 1} (``_row_has_key``) is
    read with its axes in ``perm`` order to match ``y``'s 4-D layout."""
    if isinstance(rows, np.ndarray):
        if np.all(rows):
            return y
        rows = ctx.constant(rows.astype(np.uint8)).view(rows.shape)
    t = y.data_type
    zero = ctx.constant(np.zeros((1,), t.numpy_dtype))
    desc = op("ELEMENT_WISE_IF")(
        _read(rows, y.shape, perm),
        packed(t, y.shape),
        broadcast(zero, y.shape),
        packed(t, y.shape),
    )
    return ctx.out(ctx.node(desc, [rows, y, zero]), y.shape)


@converter("Attention")
def _attention(ctx, node, inputs):
    q, k, v, mask, past_k, past_v, nonpad = (list(inputs) + [None] * 7)[:7]
    if q.rank not in (3, 4) or k.rank != q.rank or v.rank != q.rank:
        raise ctx.fail(
            f"Q, K and V must all be 3-D or 4-D, got ranks {q.rank}, {k.rank} and {v.rank}"
        )
    if (past_k is None) != (past_v is None):
        raise ctx.fail("past_key and past_value come together")
    if nonpad is not None and past_k is not None:
        raise ctx.fail("nonpad_kv_seqlen cannot be used with past_key and past_value")
    if q.rank == 4:
        b, hq, s, d = q.shape
        hkv, kv_len, dv = k.shape[1], k.shape[2], v.shape[3]
    else:
        hq, hkv = int(ctx.attr("q_num_heads", 0)), int(ctx.attr("kv_num_heads", 0))
        if hq < 1 or hkv < 1:
            raise ctx.fail("3-D inputs need the q_num_heads and kv_num_heads attributes")
        b, s = q.shape[:2]
        d, kv_len, dv = q.shape[2] // hq, k.shape[1], v.shape[2] // hkv
    if hkv < 1 or hq % hkv:
        raise ctx.fail(f"{hq} query heads are not a multiple of {hkv} key/value heads")
    past = 0 if past_k is None else past_k.shape[2]
    total = past + kv_len
    t = q.data_type
    scale = float(ctx.attr("scale", 1.0 / math.sqrt(d)))
    softcap = float(ctx.attr("softcap", 0.0))
    causal = bool(int(ctx.attr("is_causal", 0)))
    left = int(ctx.attr("left_window_size", -1))
    right = int(ctx.attr("right_window_size", -1))
    window = left >= 0 or right >= 0
    bool_mask = mask is not None and mask.is_bool
    external = nonpad is not None
    if external:
        nonpad = nonpad.view((b, 1, 1, 1))
    decomposed = softcap > 0 or ctx.wants(3)

    # The routes DirectML's own masks give (module docstring).
    cache = external and causal and mask is None and not window and not decomposed
    key_lengths = external and not (causal or bool_mask or window or decomposed)

    i = np.arange(s).reshape(1, 1, s, 1)
    j = np.arange(total).reshape(1, 1, 1, total)
    allowed, additive = _Allowed(), None
    if mask is not None:
        mask = _pad_last(ctx, mask, total, False if bool_mask else -np.inf)
        full = (b, hq, s, total)
        try:
            fits = mask.rank <= 4 and np.broadcast_shapes(_rank4(mask.shape), full) == full
        except ValueError:
            fits = False
        if not fits:
            raise ctx.fail(f"attn_mask of shape {list(mask.shape)} does not broadcast to {full}")
        if bool_mask:
            allowed.add(mask)
        else:
            additive = mask
    if external and not cache:
        # nonpad_kv_seqlen's values: the offset is L_b - S, and keys from L_b on are padding.
        allowed.add(_less(ctx, np.broadcast_to(j, (1, 1, 1, total)), nonpad))
        if causal:  # j <= i + L_b - S
            allowed.add(_less(ctx, j - i + s - 1, nonpad))
        if left >= 0:  # i + L_b - S - j <= left
            allowed.add(_less(ctx, nonpad, left + s + j - i + 1))
        if right >= 0:  # j - (i + L_b - S) <= right
            allowed.add(_less(ctx, j - i + s - right - 1, nonpad))
    elif not external:
        if causal:
            allowed.add(j <= i + past)
        if left >= 0:
            allowed.add(i + past - j <= left)
        if right >= 0:
            allowed.add(j - (i + past) <= right)
    rows = None if cache else _row_has_key(ctx, allowed, additive)

    if decomposed:
        dims = (b, hq, hkv, s, d, dv, total)
        masks = (allowed, additive, rows)
        return _decomposed(ctx, q, k, v, past_k, past_v, masks, scale, softcap, dims)

    # MULTIHEAD_ATTENTION(1).
    q3 = _heads_last(ctx, q) if q.rank == 4 else q
    fields, feeds = {"query_tensor": packed(t, q3.shape)}, {"query_tensor": q3}
    if cache:
        k4 = k if k.rank == 4 else _heads_first(ctx, k, hkv)
        v4 = v if v.rank == 4 else _heads_first(ctx, v, hkv)
        lengths = nonpad.view((b,))
        feeds.update(past_key_tensor=k4, past_value_tensor=v4, past_sequence_lengths_tensor=lengths)
    else:
        k3 = _heads_last(ctx, k) if k.rank == 4 else k
        v3 = _heads_last(ctx, v) if v.rank == 4 else v
        feeds.update(key_tensor=k3, value_tensor=v3)
        if past_k is not None:
            feeds.update(past_key_tensor=past_k, past_value_tensor=past_v)
    for name, value in feeds.items():
        fields[name] = packed(value.data_type, value.shape)
    full = (b, hq, s, total)
    mask_type = "NONE"
    if key_lengths:
        mask_type = "KEY_SEQUENCE_LENGTH"
        feeds["mask_tensor"] = nonpad.view((1, b))
        fields["mask_tensor"] = packed(DataType.INT32, (1, b))
    else:
        keep = allowed.value(ctx)
        if keep is not None:
            mask_type = "BOOLEAN"
            feeds["mask_tensor"] = cast_value(ctx, keep, DataType.INT32)
            fields["mask_tensor"] = broadcast(feeds["mask_tensor"], full)
    if additive is not None:
        feeds["relative_position_bias_tensor"] = additive
        fields["relative_position_bias_tensor"] = broadcast(additive, full)
    fields["output_tensor"] = packed(t, (b, s, hq * dv))
    if ctx.wants(1):
        fields["output_present_key_tensor"] = packed(t, (b, hkv, total, d))
    if ctx.wants(2):
        fields["output_present_value_tensor"] = packed(t, (b, hkv, total, dv))
    common = {"scale": scale, "mask_filter_value": -math.inf, "mask_type": mask_type}
    if hq == hkv and not cache:
        desc = op("MULTIHEAD_ATTENTION")(**fields, head_count=hq, **common)
    else:
        desc = op("MULTIHEAD_ATTENTION1")(
            **fields, query_head_count=hq, key_value_head_count=hkv, **common
        )
    slots = [name for name, _ in desc.edge_slots("input")]
    by_slot = {_member(name): value for name, value in feeds.items()}
    n = ctx.node(desc, [by_slot.get(slot) for slot in slots])
    y = ctx.out(n, (b, s, hq, dv), 0)
    if rows is not None:
        y = _guard(ctx, y, rows, (0, 2, 1, 3))
    y = transposed(ctx, y, (0, 2, 1, 3)) if q.rank == 4 else view(y, (b, s, hq * dv))
    outputs = [y, None, None]
    if ctx.wants(1):
        outputs[1] = ctx.out(n, (b, hkv, total, d), 1)
    if ctx.wants(2):
        outputs[2] = ctx.out(n, (b, hkv, total, dv), 2)
    return outputs


def _member(field: str) -> str:
    """A descriptor field's DML member name (``query_tensor`` -> ``QueryTensor``)."""
    return "".join(part.capitalize() for part in field.split("_"))


def grouped_logits(ctx, q4: Value, k4: Value, scale: float) -> Value:
    """Q K^T * scale, {B, Nq, S, T}, of query heads q4 {B, Nq, S, H} over the key heads k4
    {B, Nkv, T, H} (query head n reads key head n // (Nq / Nkv)): one GEMM of the query heads
    viewed as {B, Nkv, g * S, H}."""
    (b, hq, s, d), (hkv, total), t = q4.shape, k4.shape[1:3], q4.data_type
    rows = (b, hkv, hq // hkv * s)
    desc = op("GEMM")(
        packed(t, rows + (d,)),
        packed(t, k4.shape),
        None,
        packed(t, rows + (total,)),
        trans_b="TRANSPOSE",
        alpha=scale,
    )
    return ctx.out(ctx.node(desc, [q4.view(rows + (d,)), k4, None]), (b, hq, s, total))


def soft_capped(ctx, logits: Value, softcap: float) -> Value:
    """``softcap * tanh(logits / softcap)`` (ACTIVATION_SCALED_TANH)."""
    t, shape = logits.data_type, logits.shape
    desc = op("ACTIVATION_SCALED_TANH")(
        packed(t, shape), packed(t, shape), alpha=softcap, beta=1.0 / softcap
    )
    return ctx.out(ctx.node(desc, [logits]), shape)


def grouped_values(ctx, probs: Value, v4: Value) -> Value:
    """Probabilities {B, Nq, S, T} times the value heads v4 {B, Nkv, T, Dv}: {B, Nq, S, Dv}, one
    GEMM as ``grouped_logits``."""
    (b, hq, s, total), (hkv, dv), t = probs.shape, (v4.shape[1], v4.shape[3]), probs.data_type
    rows = (b, hkv, hq // hkv * s)
    desc = op("GEMM")(
        packed(t, rows + (total,)), packed(t, v4.shape), None, packed(t, rows + (dv,))
    )
    return ctx.out(ctx.node(desc, [probs.view(rows + (total,)), v4, None]), (b, hq, s, dv))


def _decomposed(ctx, q, k, v, past_k, past_v, masks, scale, softcap, dims):
    """softcap / qk_matmul_output: ONNX's decomposition on DirectML operators."""
    allowed, additive, rows = masks
    b, hq, hkv, s, _, dv, total = dims
    t = q.data_type
    q4 = q if q.rank == 4 else _heads_first(ctx, q, hq)
    k4 = k if k.rank == 4 else _heads_first(ctx, k, hkv)
    v4 = v if v.rank == 4 else _heads_first(ctx, v, hkv)
    if past_k is not None:
        k4, v4 = _join(ctx, past_k, k4), _join(ctx, past_v, v4)
    full = (b, hq, s, total)
    logits = grouped_logits(ctx, q4, k4, scale)
    mode = int(ctx.attr("qk_matmul_output_mode", 0))
    recorded = logits
    if softcap > 0:
        logits = soft_capped(ctx, logits, softcap)
        if mode == 1:
            recorded = logits
    bias = _bias(ctx, allowed, additive, t)
    if bias is not None:
        logits = binary_value(ctx, "ELEMENT_WISE_ADD", logits, bias)
    if mode == 2:
        recorded = logits
    softmax = op("ACTIVATION_SOFTMAX1")(packed(t, full), packed(t, full), axes=[3])
    probs = ctx.out(ctx.node(softmax, [logits]), full)
    probs = _guard(ctx, probs, rows, (0, 1, 2, 3))
    if mode == 3:
        recorded = probs
    y = grouped_values(ctx, probs, v4)
    if q.rank == 3:
        y = transposed(ctx, y, (0, 2, 1, 3)).view((b, s, hq * dv))
    present_k = k4 if ctx.wants(1) else None
    present_v = v4 if ctx.wants(2) else None
    return [y, present_k, present_v, recorded if ctx.wants(3) else None]


def _join(ctx, past: Value, new: Value) -> Value:
    """The present cache: ``past`` then ``new`` along the sequence (JOIN)."""
    shape = past.shape[:2] + (past.shape[2] + new.shape[2],) + past.shape[3:]
    t = past.data_type
    desc = op("JOIN")([packed(t, past.shape), packed(t, new.shape)], packed(t, shape), axis=2)
    return ctx.out(ctx.node(desc, [past, new]), shape)


def _bias(ctx, allowed: _Allowed, additive: Value | None, t: DataType) -> Value | None:
    """The masks as one additive bias: the float mask where allowed, -inf elsewhere."""
    keep = allowed.value(ctx)
    if keep is None:
        return additive
    base = additive if additive is not None else ctx.constant(np.zeros((1,), t.numpy_dtype))
    minus = ctx.constant(np.full((1,), -np.inf, t.numpy_dtype))
    shape = tuple(np.broadcast_shapes(_rank4(keep.shape), _rank4(base.shape)))
    return select_value(ctx, keep, base, minus, shape)


# --- rotary embedding -------------------------------------------------------------------------


def split_value(ctx, x: Value, sizes, axis: int) -> list[Value]:
    """``x`` cut along ``axis`` into pieces of ``sizes`` (SPLIT)."""
    t = x.data_type
    shapes = [x.shape[:axis] + (n,) + x.shape[axis + 1 :] for n in sizes]
    desc = op("SPLIT")(packed(t, x.shape), [packed(t, shape) for shape in shapes], axis=axis)
    n = ctx.node(desc, [x])
    return [ctx.out(n, shape, k, is_bool=x.is_bool) for k, shape in enumerate(shapes)]


def join_values(ctx, values: list[Value], axis: int) -> Value:
    """``values`` concatenated along ``axis`` (JOIN)."""
    t = values[0].data_type
    first = values[0].shape
    shape = first[:axis] + (sum(v.shape[axis] for v in values),) + first[axis + 1 :]
    desc = op("JOIN")([packed(t, v.shape) for v in values], packed(t, shape), axis=axis)
    return ctx.out(ctx.node(desc, values), shape, is_bool=values[0].is_bool)


def gather_rows(ctx, table: Value, positions: Value) -> Value:
    """``table[positions]``: rows of a 2-D cache at INT32 positions of any shape (GATHER over
    axis 0; negative positions count from the end, as NumPy's indexing does)."""
    rank = positions.rank + 1
    out = positions.shape + table.shape[1:]
    desc = op("GATHER")(
        packed(table.data_type, table.shape, rank),
        packed(positions.data_type, positions.shape, rank),
        packed(table.data_type, out, rank),
        axis=rank - 2,
        index_dimensions=positions.rank,
    )
    return ctx.out(ctx.node(desc, [table, positions]), out)


def rotate(ctx, x: Value, cos: Value, sin: Value, *, interleaved: bool, dim: int) -> Value:
    """Rotary embedding of ``x``'s last axis (a head): its first ``dim`` entries are rotated by
    the angles whose cosines / sines ``cos`` / ``sin`` hold (``dim / 2`` per position, their
    leading axes broadcasting against ``x``'s), the rest passes unchanged."""
    head, lead, t = x.shape[-1], x.shape[:-1], x.data_type
    rest = None
    if dim < head:
        x, rest = split_value(ctx, x, [dim, head - dim], x.rank - 1)
    half = dim // 2
    # The two members of each rotated pair side by side on one axis of two.
    pairs = lead + ((half, 2) if interleaved else (2, half))
    axis = len(pairs) - 1 if interleaved else len(pairs) - 2
    angles = (half, 1) if interleaved else (1, half)
    cos = cos.view(cos.shape[:-1] + angles)
    sin = sin.view(sin.shape[:-1] + angles)
    xp = x.view(pairs)
    # Each pair swapped: the pair axis read backwards (SLICE1 of stride -1, an index map that
    # fuses into its consumer, where two slices and a JOIN left XLA's GPU backend two slice
    # kernels a rotation).
    desc = op("SLICE1")(
        packed(t, pairs),
        packed(t, pairs),
        input_window_offsets=[0] * len(pairs),
        input_window_sizes=list(pairs),
        input_window_strides=[-1 if i == axis else 1 for i in range(len(pairs))],
    )
    swapped = ctx.out(ctx.node(desc, [xp]), pairs)
    signs = op("FILL_VALUE_SEQUENCE")(packed(t, (2,)), t, typed_scalar(t, -1), typed_scalar(t, 2))
    sign = ctx.out(ctx.node(signs, []), (2,)).view((2,) + (1,) * (len(pairs) - 1 - axis))
    rotated = binary_value(ctx, "ELEMENT_WISE_MULTIPLY", swapped, sign)
    y = binary_value(
        ctx,
        "ELEMENT_WISE_ADD",
        binary_value(ctx, "ELEMENT_WISE_MULTIPLY", xp, cos),
        binary_value(ctx, "ELEMENT_WISE_MULTIPLY", rotated, sin),
    )
    y = y.view(lead + (dim,))
    return y if rest is None else join_values(ctx, [y, rest], y.rank - 1)


def rotary_dim(ctx, head: int, half: int, attribute: int) -> int:
    """The rotated part of a head: ``rotary_embedding_dim`` (0: the whole head), checked
    against the head size and the caches' ``half`` values per position."""
    dim = attribute or head
    if dim % 2 or dim > head:
        raise ctx.fail(f"rotary_embedding_dim {dim} must be even and at most the head size {head}")
    if half != dim // 2:
        raise ctx.fail(
            f"cos_cache / sin_cache hold {half} values per position; the rotation needs {dim // 2}"
        )
    return dim


@converter("RotaryEmbedding")
def _rotary_embedding(ctx, node, inputs):
    x, cos, sin, positions = (list(inputs) + [None])[:4]
    if cos.shape != sin.shape:
        raise ctx.fail(f"cos_cache {list(cos.shape)} and sin_cache {list(sin.shape)} differ")
    if x.rank == 4:
        b, heads, s, head = x.shape
    elif x.rank == 3:
        b, s, hidden = x.shape
        heads = int(ctx.attr("num_heads", 0))
        if heads < 1 or hidden % heads:
            raise ctx.fail(f"a 3-D input needs num_heads dividing its hidden size {hidden}")
        head = hidden // heads
    else:
        raise ctx.fail(f"X must be 3-D or 4-D, got shape {list(x.shape)}")
    if positions is not None:
        if cos.rank != 2 or positions.shape != (b, s):
            raise ctx.fail(
                f"with position_ids {list(positions.shape)} the caches must be 2-D and "
                f"position_ids {[b, s]}, got cos_cache {list(cos.shape)}"
            )
        cos, sin = gather_rows(ctx, cos, positions), gather_rows(ctx, sin, positions)
    elif cos.shape[:2] != (b, s) or cos.rank != 3:
        raise ctx.fail(f"without position_ids the caches must be {[b, s]} + [half], got "
                       f"{list(cos.shape)}")  # fmt: skip
    dim = rotary_dim(ctx, head, cos.shape[-1], int(ctx.attr("rotary_embedding_dim", 0)))
    interleaved = bool(int(ctx.attr("interleaved", 0)))
    if x.rank == 4:  # {B, N, S, H}: the angles of (b, s) serve every head
        angles = (b, 1, s, dim // 2)
        y = rotate(ctx, x, cos.view(angles), sin.view(angles), interleaved=interleaved, dim=dim)
        return [y]
    angles = (b, s, 1, dim // 2)
    y = rotate(ctx, x.view((b, s, heads, head)), cos.view(angles), sin.view(angles),
               interleaved=interleaved, dim=dim)  # fmt: skip
    return [y.view(x.shape)]
