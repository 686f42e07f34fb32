"""AttentionFusion: the subgraph exporters write for scaled dot-product attention, rewritten into
one MULTIHEAD_ATTENTION (MULTIHEAD_ATTENTION1 where the keys and values have fewer heads), as
onnxruntime's AttentionFusion makes a com.microsoft Attention node that its DirectML provider runs
as MULTIHEAD_ATTENTION. On a GPU that node runs on cuDNN's fused attention (``kernels.attention``)
instead of materializing the logits and the probabilities of every head.

The pattern, over the imported DML graph (views are consumers' tensor descs over their
producers' packed bytes; the exporters' transposes are ELEMENT_WISE_IDENTITY copies):

- GEMM (no fused activation) of the queries {Z, S, D} by the transposed keys {Z, D, T}, Z = B * H
  flattened or not. Each operand is followed back through identity copies (transposes, the
  repeat of grouped key/value heads by Unsqueeze / Expand / Reshape, found as a head axis of
  stride 0) and scalar scales (MULTIPLY or DIVIDE by a constant, an identity's ScaleBias without
  bias: the dynamo exporter's sqrt(scale) on Q and K), composing the views (``views.compose``); the
  scales join the GEMM's Alpha as MULTIHEAD_ATTENTION's Scale. A scale that is a parameter
  (``apply`` may replace it) is not folded: it is applied again where the operand is laid out
  for MULTIHEAD_ATTENTION. Those nodes may have other readers (they stay for them).
- On the logits, in order: scalar scales (constants, not parameters), then masks: the GEMM's C
  (a mask MatMulAddFusion moved there, Beta 1) and ELEMENT_WISE_ADD of any tensor (the
  RelativePositionBias; a constant, not a parameter, of two values {0, c} is instead the
  BOOLEAN mask with MaskFilterValue c, which adds the same c), and ELEMENT_WISE_IF(keep, logits,
  c) of a constant condition and a constant c. MULTIHEAD_ATTENTION adds c where the logit was
  set to c: the same weights where c is -inf, or float32's lowest (s + c == c for |s| < 1e31),
  or float16's lowest or below where every row keeps a key (the masked weights exp(c + s - max)
  are then 0 either way). Masks met after a scale (scaled with the logits) are not matched.
- ACTIVATION_SOFTMAX(1) over the last axis (the keys), read only by the second GEMM as its A,
  or only through the dynamo exporter's Where(IsNaN(p), 0, p); in a float16 model, possibly
  between a CAST of the logits to float32 and a CAST of the probabilities back (Hugging Face's
  eager attention; masks added in float32 must then be constants).
- GEMM (Alpha 1, no C) of the probabilities by the values {Z, T, Dv}.

Only attention over at least ``MIN_KEYS`` (128) keys is fused: over fewer, the unfused program
is the faster one (the constant's comment has the measurements). A single query position (a
decode step) is fused at any length (``MIN_KEYS_ONE_QUERY``).

The logits, the probabilities and every node between them must have no other reader and not be
a graph output, and must flow through packed reshapes only. A BOOLEAN mask whose every row keeps
a key and whose c is float16's lowest or below (with no RelativePositionBias, which could take
the kept keys away) gets MaskFilterValue -inf: the same weights, and cuDNN's causal mode where
it is causal. The IsNaN guard zeroes the rows of probabilities without a key; where such a row
can occur (a RelativePositionBias, or a -inf mask with an empty row) it is computed on the output
instead (``_zero_nan_rows``), else dropped.

MULTIHEAD_ATTENTION writes {B, S, H * Dv}; the second GEMM's readers read it through an identity
that puts the heads first again, and a reader that only put them back (the head merge's
transpose) reads the output itself.

Precision: MULTIHEAD_ATTENTION computes FLOAT16 in float32 and rounds once, where the unfused
graph rounds the logits, the probabilities and each scaled operand to float16; the results agree
within float16 rounding of those intermediates (float32: within float32 rounding, the scale being
one multiplication instead of a division or two square roots). With non-finite Q, K or V the
IsNaN guard moved after the product may differ (a NaN value row is zeroed).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np

from ...enums import DataType
from ...tensor import TensorDesc, host_view, packed_strides
from . import GRAPH_INPUT, Editor, Source, op_class, rewrite
from .views import Axes, canonical, compose, reshaped_strides, view_axes

_ID = "DML_OPERATOR_ELEMENT_WISE_IDENTITY"
_SOFTMAX = ("DML_OPERATOR_ACTIVATION_SOFTMAX", "DML_OPERATOR_ACTIVATION_SOFTMAX1")
# Why a softmax's subgraph stays unfused, at DEBUG level: ``logging.getLogger(
# "dml_jax.onnx.optimize.attention").setLevel(logging.DEBUG)`` (with a handler) before a
# session imports its model.
_LOG = logging.getLogger(__name__)
_F16_LOWEST = float(np.finfo(np.float16).min)

# Attention over fewer keys than this is left unfused. Short rows of logits are cheap to
# materialize, and there the copies into MULTIHEAD_ATTENTION's layout and cuDNN's tiles (64 or
# 128 queries and keys) cost more than they save: on an H200 in float16 at batch 64, fusing
# made Swin-T (windows of 49 keys) 1.23x slower and the small T5, CLIP and Whisper encoders
# (32, 50 and 100 keys) 1.1x to 1.3x slower; BERT and GPT-2 at 512 keys ran 1.9x faster fused
# (H100, 4 layers at batch 8).
MIN_KEYS = 128
# One query position (a decode step) is fused over at least this many keys: no copies into
# cuDNN's tiles arise there (on a GPU a decode step's attention takes kernels/decode_attention.py).
# One H200, 2026-11-29, the 1B-class decoder at batch 1, prompt 16, 128 new tokens (112 of the
# steps under 128 keys; benchmarks/experiments/README.md, ``decode_step_gpu.py --set``): 128
# -> 1 took float16 from 964 to 978 tokens/s (964-967 against 971-978) and int4 from 1,237 to
# 1,258 (1,226-1,242 against 1,256-1,262), 282 -> 264 kernels a token. On this CPU the tiny
# LLaMA of tests/data/decoders generated the same tokens at the same speed either way.
MIN_KEYS_ONE_QUERY = 1
# A decode step's keys and values stay the JOIN of past and new that the exporters write: read
# apart (the past as PastKeyTensor / PastValueTensor) it ran slower in a ``Generator`` on an H200
# twice (2026-11-29 as AttentionPastSplit, 2026-11-30 inside this rewrite): the pasts are slices
# of the stacked cache, which XLA copies for the kernel anyway (benchmarks/experiments/README.md).


def _declined(reason: str, value):
    """``value`` (None or False: not fused here), ``reason`` logged (``_LOG``)."""
    _LOG.debug("AttentionFusion: not fused: %s", reason)
    return value


# --- reading through the graph ---------------------------------------------------------------


def _scalar(g: Editor, src: Source | None) -> float | None:
    """The one value of a constant that is not a parameter (``apply`` may replace a parameter,
    so it is never folded into an attribute), else None."""
    return None if src is None else g.scalar(src)


def _elementwise(node) -> bool:
    return getattr(node, "fused_activation", None) is None


def _scale_step(g: Editor, n: int, params: bool = False) -> tuple | None:
    """(the input slot carrying the tensor, the factor, None) where node ``n`` multiplies a
    tensor by a constant scalar: MULTIPLY or DIVIDE by a constant, or an identity with a
    ScaleBias whose bias is 0. With ``params``, a one-element parameter (``apply`` may replace
    it, so its value is not folded) gives (slot, 1.0, (operator, its source)): the operation is
    made again where the operand is copied. Else None."""
    node = g.nodes[n]
    kind = node.operator_type
    if kind == _ID:
        sb = node.scale_bias
        if sb is None or sb.bias != 0:
            return None
        return 0, float(sb.scale), None
    multiply = kind == "DML_OPERATOR_ELEMENT_WISE_MULTIPLY"
    if not (multiply or kind == "DML_OPERATOR_ELEMENT_WISE_DIVIDE") or not _elementwise(node):
        return None
    for slot in (0, 1) if multiply else (0,):
        other = g.source(n, 1 - slot)
        c = _scalar(g, other)
        if c is not None and (multiply or c != 0):
            return slot, c if multiply else 1.0 / c, None
        value = None if other is None else g.constant(other)
        if params and value is not None and value.size == 1 and g.param(other) is not None:
            return slot, 1.0, (kind.removeprefix("DML_OPERATOR_"), other)
    return None


def _pure_identity(g: Editor, n: int) -> bool:
    node = g.nodes[n]
    return node.operator_type == _ID and node.scale_bias is None


@dataclass
class _Operand:
    """A GEMM operand as a view over a packed buffer: ``axes`` per logical axis (batch Z,
    rows, columns), the factor scales on the way (``scale``)."""

    source: Source
    axes: list[Axes]
    data_type: DataType
    scale: float = 1.0
    # Scalar parameters the operand is multiplied or divided by, in order: (operator, source).
    factors: tuple = ()


def _operand(g: Editor, n: int, slot: int, transposed: bool, scales: bool) -> _Operand | None:
    """Input ``slot`` of GEMM ``n`` as a view {Z, rows, columns} (after its transposition) over
    the buffer it reads, seen through identity copies and (``scales``) scalar scales."""
    desc = g.input_desc(n, slot)
    src = g.source(n, slot)
    per = view_axes(desc)
    batch = [a for axis in per[:-2] for a in axis]
    rows, cols = (per[-1], per[-2]) if transposed else (per[-2], per[-1])
    view = [batch, rows, cols]
    scale, factors = 1.0, ()
    while src is not None and src[0] != GRAPH_INPUT and src[1] == 0:
        m = src[0]
        step = None
        if _pure_identity(g, m):
            step = (0, 1.0, None)
        elif scales:
            step = _scale_step(g, m, params=True)
        if step is None:
            break
        inner = g.source(m, step[0])
        if inner is None or inner[0] == GRAPH_INPUT:
            break
        out = g.output_desc(src)
        in_desc = g.input_desc(m, step[0])
        if not out.is_packed or in_desc.data_type != out.data_type or in_desc.sizes != out.sizes:
            break
        composed = compose(view, out.sizes, view_axes(in_desc))
        if composed is None:
            break
        view, src, scale = composed, inner, scale * step[1]
        if step[2] is not None:
            factors = (step[2], *factors)
    return _Operand(src, view, desc.data_type, scale, factors)


def _contiguous(desc: TensorDesc, count: int) -> bool:
    """Whether ``desc`` reads a packed buffer of ``count`` elements in order (a reshape)."""
    return desc.element_count == count and canonical(
        [a for axis in view_axes(desc) for a in axis]
    ) in ([(count, 1)], [])


# --- the match -------------------------------------------------------------------------------


@dataclass
class _Match:
    softmax: int
    qk: int
    pv: int
    chain: list[int]  # logits nodes between the first GEMM and the softmax
    scale: float
    additive: list[tuple[Source, TensorDesc, int]]  # (mask source, its desc, node)
    keep: list[tuple[Source, TensorDesc, float, int, bool]]  # IF masks: cond, desc, fill, node, inv
    guard: tuple[int, int] | None  # the IS_NAN and IF nodes zeroing NaN probabilities


def _only_reader(g: Editor, src: Source, node: int, slot: int | None = None) -> bool:
    user = g.only_user(src)
    return user is not None and user[0] == node and (slot is None or user[1] == slot)


def _match(g: Editor, sm: int) -> _Match | None:
    node = g.nodes[sm]
    if node.operator_type not in _SOFTMAX:
        return _declined("not a softmax", None)
    sm_in = g.input_desc(sm, 0)
    rank = sm_in.rank
    if node.operator_type.endswith("1") and tuple(node.axes) != (rank - 1,):
        return _declined("a softmax over another axis than the last", None)
    out = g.output_desc((sm, 0))
    count = out.element_count
    if not out.is_packed or not _contiguous(sm_in, count):
        return _declined("the softmax's input or output is not packed", None)
    # The probabilities: read only by the second GEMM, as its A, untransposed (or through a
    # CAST back from the float32 a float16 model's softmax ran in, and the dynamo exporter's
    # guard Where(IsNaN(p), 0, p), ``_nan_guard``).
    probs = (sm, 0)
    down = g.only_user(probs)
    down = down[0] if down is not None and _cast(g, down[0], "FLOAT32", "FLOAT16") else None
    if down is not None:
        probs = (down, 0)
    guard = _nan_guard(g, probs[0], count)
    probs = (guard[1], 0) if guard else probs
    user = g.only_user(probs)
    if user is None or user[1] != 0:
        return _declined("the probabilities have another reader than a second GEMM's A", None)
    pv = user[0]
    d = g.nodes[pv]
    if d.operator_type != "DML_OPERATOR_GEMM" or d.c_tensor is not None:
        return _declined("the probabilities are read by no GEMM, or by one with a C", None)
    if d.fused_activation is not None or d.alpha != 1.0 or d.trans_a.name != "NONE":
        return _declined("the second GEMM has an activation, an Alpha or a transposed A", None)
    if not _contiguous(g.input_desc(pv, 0), count):
        return _declined("the second GEMM reads the probabilities through a view", None)
    # Back from the softmax through the logits chain to the first GEMM.
    chain: list[int] = []
    additive, keep = [], []
    scale = 1.0
    up = None
    src = g.source(sm, 0)
    while True:
        if src is None or src[0] == GRAPH_INPUT or src[1] != 0:
            return _declined("the logits chain reaches a graph input", None)
        n = src[0]
        if not _only_reader(g, src, chain[-1] if chain else sm):
            return _declined("a logits node has another reader", None)
        node = g.nodes[n]
        kind = node.operator_type
        if kind == "DML_OPERATOR_GEMM":
            break
        chain.append(n)
        if kind == "DML_OPERATOR_CAST":
            # float16 logits widened for the softmax: MULTIHEAD_ATTENTION computes in float32
            if down is None or up is not None or not _cast(g, n, "FLOAT16", "FLOAT32"):
                return _declined("a cast other than float16 logits widened for the softmax", None)
            up = n
            if not _contiguous(g.input_desc(n, 0), count):
                return _declined("the widened logits are read through a view", None)
            src = g.source(n, 0)
            continue
        size = g.output_desc(src).element_count
        if size != count or not g.output_desc(src).is_packed:
            return _declined("a logits node of another size, or not packed", None)
        step = (0, 1.0, None) if _pure_identity(g, n) else _scale_step(g, n)
        if step is not None:
            scale *= step[1]
            slot = step[0]
        elif kind in ("DML_OPERATOR_ELEMENT_WISE_ADD", "DML_OPERATOR_ELEMENT_WISE_ADD1"):
            if not _elementwise(node):
                return _declined("an addition that is not element-wise", None)
            # Which input is the logits: the one whose producer leads back to a GEMM is not
            # known yet, so the chain follows the input that is not a constant or, both being
            # computed, the one read as a packed reshape of the right size (the mask is
            # broadcast or read from another node).
            slot = _logits_slot(g, n, count)
            if slot is None:
                return _declined("an addition whose logits input is not found", None)
            other = 1 - slot
            if scale != 1.0:
                return _declined("a scale after a mask", None)
            additive.append((g.source(n, other), g.input_desc(n, other), n))
        elif kind == "DML_OPERATOR_ELEMENT_WISE_IF":
            fill_slot = None
            for slot, fill in ((1, 2), (2, 1)):
                c = _scalar(g, g.source(n, fill))
                if c is not None and _contiguous(g.input_desc(n, slot), count):
                    fill_slot = fill
                    break
            if fill_slot is None:
                return _declined("a select without a scalar fill", None)
            cond = (g.source(n, 0), g.input_desc(n, 0), c, n, slot == 2)
            if scale != 1.0:
                return _declined("a select after a scale", None)
            keep.append(cond)
        else:
            return _declined("a logits node that is no scale, addition or select", None)
        if not _contiguous(g.input_desc(n, slot), count):
            return _declined("a logits node reads the logits through a view", None)
        src = g.source(n, slot)
    qk = src[0]
    d = g.nodes[qk]
    if d.fused_activation is not None:
        return _declined("the first GEMM has an activation", None)
    if d.c_tensor is not None and d.beta != 0:
        # Alpha A B + C (a mask that MatMulAddFusion moved into the GEMM): C is a mask term
        # when it is added once and nothing scales it after.
        if d.beta != 1 or scale != 1.0:
            return _declined("the first GEMM's C is not a mask added once", None)
        additive.append((g.source(qk, 2), d.c_tensor, qk))
    if not g.output_desc(src).is_packed or g.output_desc(src).element_count != count:
        return _declined("the first GEMM's output is not packed or of another size", None)
    if (up is None) != (down is None):
        return _declined("a float16 softmax widened on one side only", None)
    if down is not None:
        chain.append(down)
    return _Match(sm, qk, pv, chain, scale * float(d.alpha), additive, keep, guard)


def _cast(g: Editor, n: int, source: str, target: str) -> bool:
    """Node ``n`` is a CAST from ``source`` to ``target`` (data type names) of the same
    elements."""
    node = g.nodes[n]
    if node.operator_type != "DML_OPERATOR_CAST":
        return False
    i, o = node.input_tensor, node.output_tensor
    return i.data_type.name == source and o.data_type.name == target and i.sizes == o.sizes


def _nan_guard(g: Editor, sm: int, count: int) -> tuple[int, int] | None:
    """(IS_NAN, IF) where the probabilities (node ``sm``'s output) are read only by
    ``Where(IsNaN(p), 0, p)`` (the
    dynamo exporter's decomposition of scaled_dot_product_attention zeroes the rows without a
    key so), else None."""
    users = g.users((sm, 0))
    if len(users) != 2 or g.is_output((sm, 0)):
        return None
    nan = next(
        (n for n, k in users if g.nodes[n].operator_type.endswith("IS_NAN") and k == 0), None
    )
    sel = next((n for n, k in users if g.nodes[n].operator_type.endswith("_IF") and k == 2), None)
    if nan is None or sel is None or g.only_user((nan, 0)) != (sel, 0):
        return None
    zero = g.source(sel, 1)
    value = g.constant(zero)
    if value is None or np.any(value != 0):
        return None  # a parameter is allowed: when no row loses all its keys it is never read
    for n, slot in ((nan, 0), (sel, 0), (sel, 2)):
        if not _contiguous(g.input_desc(n, slot), count):
            return None
    return nan, sel


def _logits_slot(g: Editor, n: int, count: int) -> int | None:
    """The input of ADD ``n`` carrying the logits: the packed reshape of a computed tensor that
    the other input is not."""
    good = []
    for slot in (0, 1):
        src = g.source(n, slot)
        if src is None or src[0] == GRAPH_INPUT or g.constant(src) is not None:
            continue
        if _contiguous(g.input_desc(n, slot), count) and g.only_user(src) == (n, slot):
            good.append(slot)
    if len(good) == 1:
        return good[0]
    if len(good) == 2:  # both qualify: the one produced by a GEMM or a logits-like node
        for slot in good:
            kind = g.nodes[g.source(n, slot)[0]].operator_type
            if kind == "DML_OPERATOR_GEMM":
                return slot
        return None
    return None


# --- the rewrite -----------------------------------------------------------------------------


def _kv_split(axes: Axes, b: int, h: int) -> tuple[int, int, Axes] | None:
    """(Hkv, batch stride, the heads as (Hkv, stride), (H / Hkv, stride)) reading a key / value
    batch ``axes`` as {B, H} heads: the fewest Hkv whose heads repeat in groups of H / Hkv (the
    group axis at stride 0, as Expand repeats grouped key/value heads), H where none repeats."""
    for hkv in range(1, h + 1):
        if h % hkv:
            continue
        s = reshaped_strides(axes, (b, hkv, h // hkv))
        if s is not None and (s[2] == 0 or hkv == h):
            return hkv, s[0], [(hkv, s[1]), (h // hkv, s[2])]
    return None


def _layouts(q: _Operand, k: _Operand, v: _Operand, z: int) -> list[tuple]:
    """For each head count H (Z = B * H) for which Q, K and V read as {B, H, ...}: (H, then
    for each of Q, K and V (its head count, batch stride, its heads as (size, stride) axes)).
    K and V share their head count; where they would not, both take H (their repeat then
    copied)."""
    out = []
    for h in range(1, z + 1):
        if z % h:
            continue
        b = z // h
        qs = reshaped_strides(q.axes[0], (b, h))
        ks, vs = _kv_split(k.axes[0], b, h), _kv_split(v.axes[0], b, h)
        if qs is None or ks is None or vs is None:
            continue
        if ks[0] == vs[0]:  # MULTIHEAD_ATTENTION1 repeats the groups itself
            ks, vs = (ks[0], ks[1], ks[2][:1]), (vs[0], vs[1], vs[2][:1])
        else:
            ks, vs = (h, ks[1], ks[2]), (h, vs[1], vs[2])
        out.append((h, (h, qs[0], [(h, qs[1])]), ks, vs))
    return out


def _stride(axes: Axes) -> int:
    """The stride of a view that reads as one axis (checked by the caller)."""
    return reshaped_strides(axes, (size_of(axes),))[0]


def size_of(axes: Axes) -> int:
    return math.prod(n for n, _ in axes)


def _input(x: _Operand, b: int, heads: tuple[int, int, Axes], rows: int):
    """Q, K or V as MULTIHEAD_ATTENTION reads it, {B, rows, heads * columns}: (None, a desc over
    ``x``'s buffer) where its heads and columns are adjacent and it has no parameter factors,
    else (the descs of the nodes that compute it packed in that layout from ``x``'s buffer: an
    identity copy, or its parameter factors applied, the packed desc reading the last).
    ``heads``: (head count, batch stride, the heads' (size, stride) axes)."""
    h, sb, head_axes = heads
    cols = size_of(x.axes[2])
    sr, sc = _stride(x.axes[1]), _stride(x.axes[2])
    sizes = (b, rows, h * cols)
    t = x.data_type
    merged = reshaped_strides(head_axes + [(cols, sc)], (h * cols,))
    if merged is not None and not x.factors:
        strides = (sb, sr, merged[0])
        dense = all(n == 1 or a == p for n, a, p in zip(sizes, strides, packed_strides(sizes)))
        return None, TensorDesc(t, sizes, strides=None if dense else strides)
    # Computed packed: {B, rows, heads..., columns} from a view of x's buffer.
    full = (b, rows, *(n for n, _ in head_axes), cols)
    view = TensorDesc(t, full, strides=(sb, sr, *(s for _, s in head_axes), sc))
    out = TensorDesc(t, full)
    if not x.factors:
        return [(op_class("ELEMENT_WISE_IDENTITY")(view, out), None)], TensorDesc(t, sizes)
    nodes = []
    scalar = TensorDesc(t, full, strides=(0,) * len(full))
    for k, (kind, src) in enumerate(x.factors):
        nodes.append((op_class(kind)(view if k == 0 else out, scalar, out), src))
    return nodes, TensorDesc(t, sizes)


def _mask_view(desc: TensorDesc, full: tuple[int, int, int, int]) -> TensorDesc | None:
    """An operand desc of an elementwise node over the logits as {B, H, S, T}."""
    per = view_axes(desc)
    batch = [a for axis in per[:-2] for a in axis]
    if desc.sizes[-2:] != full[2:]:
        return None
    head = reshaped_strides(batch, full[:2])
    if head is None:
        return None
    strides = head + (per[-2][0][1], per[-1][0][1])
    return TensorDesc(desc.data_type, full, strides=strides)


def _known(g: Editor, src: Source, desc: TensorDesc) -> np.ndarray | None:
    """A constant read through ``desc`` (NumPy, desc's sizes with its broadcast dimensions,
    those of stride 0, left at 1), else None."""
    value = g.constant(src)
    if value is None or g.param(src) is not None:
        return None  # a parameter stays a tensor: ``apply`` may replace it
    flat = np.ascontiguousarray(value).reshape(-1)
    if desc.addressed_elements > flat.size:
        return None
    kept = tuple(slice(0, 1) if t == 0 else slice(None) for t in desc.layout_strides)
    return host_view(flat, desc)[kept].copy()


def _compact(keep: np.ndarray, full: tuple[int, ...]) -> tuple[np.ndarray, tuple[int, ...]]:
    """``keep`` (broadcastable to ``full``) with each axis along which it is constant reduced
    to size 1, and the strides that read it at ``full``."""
    small = keep
    for axis in range(keep.ndim):
        first = np.take(small, [0], axis=axis)
        if np.all(small == first):
            small = first
    strides = packed_strides(small.shape)
    strides = tuple(0 if n == 1 else s for n, s in zip(small.shape, strides))
    return small, strides


def _masks(g: Editor, m: _Match, full: tuple[int, ...], t: DataType):
    """(keep: a NumPy bool mask broadcastable to ``full`` or None, MaskFilterValue, the
    RelativePositionBias (source, desc) or None) that compute ``m``'s masks exactly; None
    where they do not (module docstring)."""
    lowest32 = float(np.finfo(np.float32).min)
    rpb: list[tuple[Source, TensorDesc]] = []
    terms: list[tuple[np.ndarray, float]] = []  # (kept, what a masked logit gets)
    for src, desc, _ in m.additive:
        view = _mask_view(desc, full)
        if view is None:
            return _declined("an added term that does not read as {B, H, S, T}", None)
        known = _known(g, src, view)
        if known is not None:
            values = np.unique(known)
            if len(values) == 1 and values[0] == 0:
                continue
            if len(values) == 2 and values[1] == 0 and values[0] < 0:
                terms.append((known == 0, float(values[0])))
                continue
        if view.data_type != t:
            # a bias added in float32 after a float16 model's logits widened
            return _declined("a bias added to the widened float16 logits", None)
        rpb.append((src, view))
    for cond_src, cond_desc, fill, _, inverted in m.keep:
        view = _mask_view(cond_desc, full)
        known = None if view is None else _known(g, cond_src, view)
        if known is None:
            return _declined("a select whose condition is computed at run time", None)
        kept = (known == 0) if inverted else (known != 0)
        # The logit is set to ``fill`` where MULTIHEAD_ATTENTION adds it.
        exact = fill == -math.inf or fill <= lowest32
        if not exact and (fill > _F16_LOWEST or not np.all(np.any(kept, axis=-1))):
            return _declined("a select's finite fill that adding would not reproduce", None)
        terms.append((kept, fill))
    if len(rpb) > 1:
        return _declined("more than one bias added", None)
    if not terms:
        return None, -math.inf, rpb[0] if rpb else None
    fills = {f for _, f in terms}
    if len(fills) > 1:
        return _declined("masks of different fills", None)
    fill = fills.pop()
    keep = terms[0][0]
    masked = ~keep
    for kept, _ in terms[1:]:
        if fill != -math.inf and np.any(masked & ~kept):
            return _declined("a logit masked twice (it would get the value twice)", None)
        keep = keep & kept
        masked = ~keep
    if fill <= _F16_LOWEST and not rpb and np.all(np.any(keep, axis=-1)):
        # Every query keeps a key (and no bias can take it away): a masked key's weight
        # exp(fill + s - max) is 0 as with -inf, which cuDNN's attention takes as its mask (and
        # its causal mode).
        fill = -math.inf
    return keep, fill, rpb[0] if rpb else None


def _rows_without_keys(keep: np.ndarray | None, fill: float, rpb) -> bool:
    """Whether a query row may have no key (softmax NaN): a RelativePositionBias known only at
    run time may hold -inf, a -inf mask may mask a whole row. With finite Q, K, V nothing else
    gives NaN."""
    if rpb is not None:
        return True
    return keep is not None and fill == -math.inf and not np.all(np.any(keep, axis=-1))


def _zero_nan_rows(g: Editor, m: _Match, y: Source, value: tuple, dims: tuple, origin: int):
    """The exporter's guard Where(IsNaN(p), c, p) on the probabilities, moved after the second
    product: a row of probabilities is NaN exactly where its output row is (finite values), and
    such a row of c gives c times the sum of the values over the keys (0 for c = 0; c is read
    as a tensor where it is a parameter). ``value``: MULTIHEAD_ATTENTION's value (source, desc);
    ``dims``: (B, S, H, Hkv, Dv)."""
    nan, sel = m.guard
    b, s, h, hkv, dv = dims
    t = g.output_desc(y).data_type
    flags = g.nodes[nan].output_tensor.data_type
    sizes = (b, s, hkv, h // hkv, dv)  # the output {B, S, H * Dv}, query heads grouped
    y5 = TensorDesc(t, sizes)
    is_nan = g.add(op_class("ELEMENT_WISE_IS_NAN")(y5, TensorDesc(flags, sizes)), [y], origin)
    fill = g.source(sel, 1)
    fill_desc = TensorDesc(t, sizes, strides=(0,) * len(sizes))
    if g.param(fill) is not None:
        v_src, v_desc = value
        sums = TensorDesc(t, (b, 1, hkv * dv))
        reduce = op_class("REDUCE")("SUM", v_desc, sums, axes=[1])
        total = g.add(reduce, [v_src], origin)
        scalar = TensorDesc(t, sums.sizes, strides=(0, 0, 0))
        times = g.add(
            op_class("ELEMENT_WISE_MULTIPLY")(sums, scalar, sums), [(total, 0), fill], origin
        )
        fill, fill_desc = (times, 0), TensorDesc(t, sizes, strides=(hkv * dv, 0, dv, 0, 1))
    node = op_class("ELEMENT_WISE_IF")(TensorDesc(flags, sizes), fill_desc, y5, y5)
    return (g.add(node, [(is_nan, 0), fill, y], origin), 0)


def _fuse(g: Editor, m: _Match) -> bool:
    gemm1, gemm2 = g.nodes[m.qk], g.nodes[m.pv]
    origin = g.origin[m.pv]
    q = _operand(g, m.qk, 0, gemm1.trans_a.name == "TRANSPOSE", True)
    kt = _operand(g, m.qk, 1, gemm1.trans_b.name == "TRANSPOSE", True)
    v = _operand(g, m.pv, 1, gemm2.trans_b.name == "TRANSPOSE", False)
    # Keys as {Z, T, D}: the transposed operand's rows and columns swapped.
    k = _Operand(
        kt.source, [kt.axes[0], kt.axes[2], kt.axes[1]], kt.data_type, kt.scale, kt.factors
    )
    t = gemm1.output_tensor.data_type
    if any(x.data_type != t for x in (q, k, v)) or gemm2.output_tensor.data_type != t:
        return _declined("Q, K and V not of the logits' type", False)
    if t.name not in ("FLOAT32", "FLOAT16"):
        return _declined("neither FLOAT32 nor FLOAT16", False)
    size = size_of
    z, s, dh = size(q.axes[0]), size(q.axes[1]), size(q.axes[2])
    total = size(k.axes[1])
    if total < (MIN_KEYS_ONE_QUERY if s == 1 else MIN_KEYS):
        return _declined("fewer keys than MIN_KEYS", False)
    dv = size(v.axes[2])
    if size(k.axes[0]) != z or size(v.axes[0]) != z or size(k.axes[2]) != dh:
        return _declined("Q, K and V of sizes that disagree", False)
    if size(v.axes[1]) != total:
        return _declined("values of another length than the keys", False)
    if g.input_desc(m.softmax, 0).sizes[-1] != total:
        return _declined("the softmax normalizes over another split than the keys", False)
    if any(
        reshaped_strides(x.axes[i], (size(x.axes[i]),)) is None for x in (q, k, v) for i in (1, 2)
    ):
        return _declined("Q, K or V not a reshape of whole rows", False)
    layouts = _layouts(q, k, v, z)
    if not layouts:
        return _declined("no head layout fits Q, K and V", False)
    # The head count the logits' nodes show (their last batch axis) first, then those whose
    # queries need no copy (any layout consistent with Q, K and V computes the same heads).
    hint = None
    for n in m.chain + [m.softmax]:
        sizes = g.nodes[n].edge_slots("output")[0][1].sizes
        if len(sizes) >= 4 and math.prod(sizes[:-2]) == z:
            hint = sizes[-3]
            break
    sc = _stride(q.axes[2])
    layouts.sort(key=lambda c: (c[0] != hint, c[1][2][0][1] != dh * sc))
    for h, qh, kh, vh in layouts:  # the first whose masks read as {B, H, S, T}
        b = z // h
        full = (b, h, s, total)
        masks = _masks(g, m, full, t)
        if masks is not None:
            break
    else:
        return _declined("no head layout reads the masks as {B, H, S, T}", False)
    keep, filter_value, rpb = masks
    fields: dict = {}
    mask_type = "NONE"
    if keep is not None:
        small, strides = _compact(keep.astype(np.int32), full)
        fields["mask_tensor"] = TensorDesc(DataType.INT32, full, strides=strides)
        mask_type = "BOOLEAN"
    if rpb is not None:
        fields["relative_position_bias_tensor"] = rpb[1]

    # Q, K, V.
    inputs = {"query_tensor": (q, qh, s), "key_tensor": (k, kh, total)}
    inputs["value_tensor"] = (v, vh, total)
    copies = {}
    for name, (x, heads, rows) in inputs.items():
        copies[name], fields[name] = _input(x, b, heads, rows)
    fields["output_tensor"] = TensorDesc(t, (b, s, h * dv))
    hkv = kh[0]
    scale = float(m.scale * q.scale * k.scale)
    common = {"scale": scale, "mask_filter_value": filter_value, "mask_type": mask_type}
    if hkv == h:
        desc = op_class("MULTIHEAD_ATTENTION")(**fields, head_count=h, **common)
    else:
        desc = op_class("MULTIHEAD_ATTENTION1")(
            **fields, query_head_count=h, key_value_head_count=hkv, **common
        )
    if not g.valid(desc):
        return _declined("MULTIHEAD_ATTENTION is not valid at the graph's feature level", False)
    guarded = bool(m.guard) and _rows_without_keys(keep, filter_value, rpb)
    fill = None if not m.guard else g.source(m.guard[1], 1)
    if guarded and g.param(fill) is not None and g.constant(fill).size != 1:
        return _declined("a parameter fill of more than one value", False)

    feeds: dict[str, Source] = {}
    for name, (x, _, _) in inputs.items():
        src = x.source
        for node, factor in copies[name] or ():
            src = (g.add(node, [src] if factor is None else [src, factor], origin), 0)
        feeds[name] = src
    if keep is not None:
        feeds["mask_tensor"] = g.add_constant_node(small, DataType.INT32)
    if rpb is not None:
        feeds["relative_position_bias_tensor"] = rpb[0]
    member = {"".join(p.capitalize() for p in f.split("_")): f for f in feeds}
    mha = g.add(desc, [feeds.get(member.get(slot)) for slot, _ in desc.edge_slots("input")], origin)
    y_src: Source = (mha, 0)
    if guarded:
        value = (feeds["value_tensor"], fields["value_tensor"])
        y_src = _zero_nan_rows(g, m, y_src, value, (b, s, h, hkv, dv), origin)

    # The second GEMM's output {Z, S, Dv} packed: the heads put first again.
    y = TensorDesc(t, (b, h, s, dv), strides=(s * h * dv, dv, h * dv, 1))
    back = g.add(
        op_class("ELEMENT_WISE_IDENTITY")(y, TensorDesc(t, (b, h, s, dv))), [y_src], origin
    )
    g.reroute((m.pv, 0), (back, 0))
    g.remove(m.pv, m.softmax, *m.chain, m.qk, *(m.guard or ()))
    _merge_heads(g, back, (b, h, s, dv), y)
    return True


def _merge_heads(g: Editor, back: int, sizes: tuple[int, ...], y: TensorDesc) -> None:
    """Readers of ``back`` (the output with its heads first) that are identity copies putting
    the heads back next to the columns read the attention output itself."""
    y_axes = view_axes(y)
    for n, slot in g.users((back, 0)):
        if not _pure_identity(g, n) or slot != 0:
            continue
        desc = g.input_desc(n, 0)
        out = g.output_desc((n, 0))
        composed = compose(view_axes(desc), sizes, y_axes)
        if composed is None or not out.is_packed:
            continue
        flat = canonical([a for axis in composed for a in axis])
        if flat == [(desc.element_count, 1)] and desc.element_count == math.prod(sizes):
            g.reroute((n, 0), g.source(back, 0))
            g.remove(n)


@rewrite("AttentionFusion", "extended")
def fuse_attention(g: Editor) -> int:
    """Scaled dot-product attention subgraphs into MULTIHEAD_ATTENTION(1)."""
    count = 0
    for n in g.live():
        if g.nodes[n] is None or g.nodes[n].operator_type not in _SOFTMAX:
            continue
        m = _match(g, n)
        if m is not None and _fuse(g, m):
            count += 1
    return count
