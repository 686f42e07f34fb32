"""Grouped-query attention's products over the key-value heads (the ``all`` level, after
``StridedCopyElimination`` has turned the transposes of the keys into views).

A decoder whose query heads share key and value heads (LLaMA-style grouped-query attention,
exported by PyTorch) repeats each key-value head for its group before the attention products
(``repeat_kv``: Unsqueeze, Expand, Reshape). Imported, the Expand is an ELEMENT_WISE_IDENTITY
that copies a stride-0 view of the cache into a tensor of every query head, at every decode
step: a copy of the keys and of the values a layer, which the products then read again (on an
H100 the 1B-class LLaMA's two such copies a layer took about 4% of a float16 decode step;
``decode_step_gpu.py``).

``GroupedQueryGemms`` computes such a GEMM over the key-value heads instead: a GEMM of A {B,
H, S, K} by B read from the copy {B, H, ...} becomes one of A viewed as {B, Hkv, G * S, K} (a
head's group of G query heads as rows; the same bytes, where each query head's rows follow
the previous head's) by B read from the copy's source through the view's strides without the
group's stride-0 dimension; its output {B, Hkv, G * S, N} is the same packed bytes as {B, H,
S, N}, which its readers keep reading through their own descs. The products are the same ones,
each row of A by the same column of keys or values: the values are those of the GEMM of the
copy. Taken where A is not transposed, the GEMM has no C, its output is packed, and the view
of the copy is one a stride-0 group dimension makes; any other GEMM keeps its B.
"""

from __future__ import annotations

from dataclasses import replace

from ...tensor import packed_strides
from . import GRAPH_INPUT, Editor, rewrite


def _grouped_view(g: Editor, n: int) -> tuple | None:
    """GEMM ``n``'s B as a view of the source of a grouped copy: (the copy's source, B's new
    desc, the group size), or None."""
    d = g.nodes[n]
    src = g.source(n, 1)
    if src is None or src[0] == GRAPH_INPUT or g.op(src[0]) != "ELEMENT_WISE_IDENTITY":
        return None
    m = src[0]
    copy = g.nodes[m]
    if copy.scale_bias is not None or src[1] != 0:
        return None
    view, out = copy.input_tensor, copy.output_tensor
    source = g.source(m, 0)
    if source is None or not out.is_packed or view.data_type != out.data_type:
        return None
    sizes, strides = view.sizes, view.layout_strides
    # one stride-0 dimension of several elements: the group, repeated
    zero = [i for i, (k, s) in enumerate(zip(sizes, strides)) if s == 0 and k > 1]
    if len(zero) != 1 or zero[0] == 0:
        return None
    gdim = zero[0]
    group = sizes[gdim]
    packed = packed_strides(sizes)
    b = d.b_tensor
    if b.rank != 4 or b.sizes[1] % group:
        return None
    bs = b.layout_strides

    # B's dimensions over the copy's packed bytes: each must step along one of the copy's
    # dimensions (B's heads along the group's, so that its heads run group-major)
    def axis_of(stride: int, count: int) -> int | None:
        if count == 1:
            return -1  # addresses nothing
        hits = [i for i, p in enumerate(packed) if p == stride and sizes[i] > 1]
        return hits[0] if len(hits) == 1 else None

    heads_axis = axis_of(bs[1], b.sizes[1])
    if heads_axis != gdim or sizes[gdim - 1] * group != b.sizes[1]:
        return None
    if bs[1] * group != packed[gdim - 1]:
        return None  # the heads must run across the group and on into the key-value heads
    new_strides = [0, strides[gdim - 1], 0, 0]
    taken = {gdim, gdim - 1}  # each axis of the copy read by one of B's dimensions at most
    for k in (0, 2, 3):
        axis = axis_of(bs[k], b.sizes[k])
        if axis is None or axis in taken:
            return None
        if axis >= 0:
            taken.add(axis)
        if axis >= 0 and sizes[axis] != b.sizes[k]:
            return None
        new_strides[k] = 0 if axis < 0 else strides[axis]
    new_b = b.like(sizes=(b.sizes[0], b.sizes[1] // group, b.sizes[2], b.sizes[3]),
                   strides=tuple(new_strides))  # fmt: skip
    return source, new_b, group


@rewrite("GroupedQueryGemms", "all", order=1)
def grouped_query_gemms(g: Editor) -> int:
    """A GEMM reading a grouped-query attention's repeated keys or values: over the key-value
    heads, the group's query heads as rows, reading the cache itself."""
    count = 0
    for n in g.live():
        if g.op(n) != "GEMM":
            continue
        d = g.nodes[n]
        if d.trans_a.name != "NONE" or d.c_tensor is not None or not d.output_tensor.is_packed:
            continue
        found = _grouped_view(g, n)
        if found is None:
            continue
        source, new_b, group = found
        a, y = d.a_tensor, d.output_tensor
        if a.rank != 4 or y.rank != 4 or a.sizes[1] != y.sizes[1] or a.sizes[1] % group:
            continue
        heads, rows = a.sizes[1], a.sizes[2]
        sa = a.layout_strides
        if rows > 1 and sa[1] != rows * sa[2]:
            continue  # a head's rows must follow the previous head's
        row_stride = sa[2] if rows > 1 else sa[1]
        new_a = a.like(sizes=(a.sizes[0], heads // group, group * rows, a.sizes[3]),
                       strides=(sa[0], sa[1] * group, row_stride, sa[3]))  # fmt: skip
        new_y = y.like(sizes=(y.sizes[0], heads // group, group * rows, y.sizes[3]), strides=None)
        new = replace(d, a_tensor=new_a, b_tensor=new_b, output_tensor=new_y)
        if not g.valid(new):
            continue
        g.set_node(n, new)
        g.set_input(n, 1, source)
        count += 1
    if count:
        g.prune()
    return count
