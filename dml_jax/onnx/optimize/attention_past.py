"""AttentionPastSplit: a decode step's MULTIHEAD_ATTENTION(1) whose keys and values are a copy of a
decoder's ``present = Concat(past, new)`` reads the past where it lies, as the node's
PastKeyTensor / PastValueTensor, and the new position as its keys and values.

AttentionFusion (``attention.py``) gives MULTIHEAD_ATTENTION its keys and values {B, T, H * D}.
A decoder's present keys are {B, Hkv, T, D}: the JOIN of the past input and the new position on
the positions axis, which the fusion lays out for the node by an identity copy of the whole
joined cache at every step. DirectML's node also takes the past apart from the new keys ({B,
Hkv, P, D}, the past inputs' own layout; the keys and values then follow it, T = P + S), so that
copy goes: the node reads the past input and the new position (one position of {B, Hkv, 1, D}
is already {B, 1, Hkv * D} packed), and the JOIN stays only for the present outputs. On a GPU
the decode-step kernel (``kernels/decode_attention.py``) reads the past in place; the lax
lowering joins them as the copy did. The values are the same: the node's keys are the past's
followed by the new ones, as the JOIN put them.

The pattern: MULTIHEAD_ATTENTION(1) of one query position, no past, no stacked or biased
inputs, whose KeyTensor and ValueTensor (packed) are each read from an ELEMENT_WISE_IDENTITY copy
of a packed JOIN {B, Hkv, T, D} of two packed inputs on axis 2, the second of one position, the
copy reading the join as {B, T, Hkv, D} (its heads next to the columns), or from the JOIN itself
where Hkv is 1 (no copy then, but the node still read the whole joined cache). A session on a
model axis leaves the rewrite out (``placement.MeshLayout.disabled_rewrites``: GSPMD joined the
past and the new position once for the split attention and the whole present, and gathered it).
"""

from __future__ import annotations

import dataclasses

from ...tensor import TensorDesc, packed_strides
from . import GRAPH_INPUT, Editor, Source, rewrite
from .attention import pure_identity

_MHA = ("DML_OPERATOR_MULTIHEAD_ATTENTION", "DML_OPERATOR_MULTIHEAD_ATTENTION1")
_ABSENT = ("stacked_query_key_tensor", "stacked_key_value_tensor",
           "stacked_query_key_value_tensor", "bias_tensor", "past_key_tensor",
           "past_value_tensor")  # fmt: skip


def _slot(desc, member: str) -> int:
    """The edge index of input ``member`` (DML's name) of ``desc``."""
    return [name for name, _ in desc.edge_slots("input")].index(member)


def _joined(g: Editor, src: Source | None, heads: int) -> tuple[Source, TensorDesc, Source] | None:
    """(the past's source, its desc, the new position's source) where ``src`` is a JOIN of a
    past and one new position laid out {B, T, heads, D}: an identity copy of it, or the JOIN
    itself where there is one head (its {B, 1, T, D} is {B, T, D}); else None."""
    if src is None or src[0] == GRAPH_INPUT or src[1] != 0:
        return None
    copy = None
    if pure_identity(g, src[0]):
        copy, inner = g.nodes[src[0]], g.source(src[0], 0)
    elif heads == 1:
        inner = src
    else:
        return None
    if inner is None or inner[0] == GRAPH_INPUT:
        return None
    join = g.nodes[inner[0]]
    if join.operator_type != "DML_OPERATOR_JOIN" or join.axis != 2 or len(join.input_tensors) != 2:
        return None
    whole = g.output_desc(inner)
    if whole.rank != 4 or not whole.is_packed or whole.sizes[1] != heads:
        return None
    b, h, t, d = whole.sizes
    if copy is not None:
        view, out = copy.input_tensor, copy.output_tensor
        strides = packed_strides(whole.sizes)
        want = (strides[0], strides[2], strides[1], strides[3])
        if view.sizes != (b, t, h, d) or not out.is_packed:
            return None
        if any(n > 1 and a != w for n, a, w in zip(view.sizes, view.layout_strides, want)):
            return None  # not the joined buffer with its heads next to the columns
        if view.data_type != whole.data_type or out.data_type != whole.data_type:
            return None
    past, new = g.input_desc(inner[0], 0), g.input_desc(inner[0], 1)
    if not (past.is_packed and new.is_packed) or new.sizes != (b, h, 1, d) or past.sizes[2] < 1:
        return None
    return g.source(inner[0], 0), TensorDesc(past.data_type, past.sizes), g.source(inner[0], 1)


@rewrite("AttentionPastSplit", "extended", order=1)
def split_past(g: Editor) -> int:
    """A decode step's attention reads the past where it lies, not a copy of the joined cache."""
    count = 0
    for n in g.live():
        d = g.nodes[n]
        if d is None or d.operator_type not in _MHA or d.query_tensor is None:
            continue
        if any(getattr(d, f) is not None for f in _ABSENT if hasattr(d, f)):
            continue
        if d.query_tensor.rank != 3 or d.query_tensor.sizes[1] != 1:
            continue
        if not (d.key_tensor.is_packed and d.value_tensor.is_packed):
            continue
        hkv = d.key_value_head_count if hasattr(d, "key_value_head_count") else d.head_count
        k = _joined(g, g.source(n, _slot(d, "KeyTensor")), hkv)
        v = _joined(g, g.source(n, _slot(d, "ValueTensor")), hkv)
        if k is None or v is None or k[1].sizes[2] != v[1].sizes[2]:
            continue
        b = d.query_tensor.sizes[0]
        key = TensorDesc(d.key_tensor.data_type, (b, 1, d.key_tensor.sizes[2]))
        value = TensorDesc(d.value_tensor.data_type, (b, 1, d.value_tensor.sizes[2]))
        new = dataclasses.replace(d, key_tensor=key, value_tensor=value, past_key_tensor=k[1],
                                  past_value_tensor=v[1])  # fmt: skip
        if not g.valid(new):
            continue
        g.set_node(n, new)
        for member, src in (("KeyTensor", k[2]), ("ValueTensor", v[2]),
                            ("PastKeyTensor", k[0]), ("PastValueTensor", v[0])):  # fmt: skip
            g.set_input(n, _slot(new, member), src)
        count += 1
    return count
