"""Layouts (the ``all`` level, as onnxruntime's layout optimizations): copies into strides, and
the sizes of a GEMM's element-wise reader.

Copies into strides: an ELEMENT_WISE_IDENTITY that only copies a strided view of a node's
output into a packed tensor (a Transpose, a broadcast, a slice with steps) is removed, and its
readers read the view's strides directly, as the DirectML provider's graph reads a transpose
through strides instead of copying it.

The bytes must stay the same ones: a reader reads the identity's packed output through its
own desc; without the copy it reads the identity's producer (a node's packed output, the
only kind of intermediate edge a graph may reinterpret) through the view's strides re-expressed
under the reader's sizes (``reshape_strides``). Where that has no strides (a transpose read
back as one flat matrix, which needs the copy) the identity stays for that reader. Identities
that bring graph inputs and constants in stay (every graph input enters through one), as do
identities that are graph outputs or have ScaleBias.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from . import GRAPH_INPUT, Editor, is_dense, reshape_strides, rewrite, with_input_desc


@rewrite("StridedCopyElimination", "all")
def strided_copies(g: Editor) -> int:
    """An ELEMENT_WISE_IDENTITY copying a strided view of a node's output: its readers read the
    view directly."""
    count = 0
    for n in g.live():
        d = g.nodes[n]
        if g.op(n) != "ELEMENT_WISE_IDENTITY" or d.scale_bias is not None:
            continue
        src = g.source(n, 0)
        if src is None or src[0] == GRAPH_INPUT or g.op(src[0]) is None:
            continue
        view, out = d.input_tensor, d.output_tensor
        if not out.is_packed or view.data_type != out.data_type or g.is_output((n, 0)):
            continue
        if not g.output_desc(src).is_packed:
            continue
        users = g.users((n, 0))
        if not users:
            continue
        moved = []
        for m, slot in users:
            if g.op(m) is None:
                continue  # a JAX node reads arrays of its own shapes
            mine = g.input_desc(m, slot)
            if not is_dense(mine) or mine.element_count != out.element_count:
                continue  # a view of the copy: its strides are over the copy's layout
            strides = reshape_strides(view.sizes, view.layout_strides, mine.sizes)
            if strides is None:
                continue
            moved.append((m, slot, mine.like(sizes=mine.sizes, strides=strides)))
        if len(moved) != len(users):
            continue  # the copy stays for some reader: removing it for the others saves nothing
        # every reader's new desc checked before any changes (a reader left half-changed
        # would read the copy through the view's strides)
        new: dict = {}
        for m, slot, desc in moved:
            new[m] = with_input_desc(new.get(m, g.nodes[m]), slot, desc)
        if not all(g.valid(desc) for desc in new.values()):
            continue
        for m, desc in new.items():
            g.set_node(m, desc)
        for m, slot, _ in moved:
            g.set_input(m, slot, src)
        g.remove(n)
        count += 1
    return count


# The nodes a GEMM's GPU epilogues take (kernels/gemm.py): element-wise, so their tensors may
# take any sizes of the same elements.
_EPILOGUE_READERS = ("ACTIVATION_GELU", "ELEMENT_WISE_ADD", "ELEMENT_WISE_ADD1")


@rewrite("GemmEpilogueLayout", "all")
def gemm_epilogue_layout(g: Editor) -> int:
    """An ACTIVATION_GELU or an addition that alone reads a GEMM's output under other sizes (an
    ONNX reshape: a linear layer's GEMM is one {rows, N} matrix, its reader {batch, seq, N}):
    the reader takes the GEMM's sizes, so the GPU's GEMM epilogues (a GELU, a residual) can
    compute it with the product (docs/fast-paths.md)."""
    import dataclasses

    count = 0
    for n in g.live():
        if g.op(n) != "GEMM":
            continue
        user = g.reader((n, 0), *_EPILOGUE_READERS)
        if user is None or g.reads_as_written(*user) or not g.reads_packed(*user):
            continue
        q, slot = user
        d = g.nodes[q]
        if getattr(d, "fused_activation", None) is not None or not d.output_tensor.is_packed:
            continue
        out = g.nodes[n].output_tensor
        sizes = out.sizes
        new = with_input_desc(d, slot, out.like(sizes=sizes))
        if len(d.edge_slots("input")) == 2:
            other = d.edge_slots("input")[1 - slot][1]
            strides = reshape_strides(other.sizes, other.layout_strides, sizes)
            if strides is None:
                continue
            new = with_input_desc(new, 1 - slot, other.like(sizes=sizes, strides=strides))
        new = dataclasses.replace(new, output_tensor=d.output_tensor.like(sizes=sizes))
        if not g.valid(new):
            continue
        g.set_node(q, new)
        count += 1
    return count


# NCHW -> NHWC: the order in which a channels-last node lists a 4-D tensor's dimensions.
_LAST = (0, 2, 3, 1)
# Element-wise operators whose fields name no dimension (SOFTMAX and HARDMAX do: left out).
_AXIS_FREE = ("ELEMENT_WISE_", "ACTIVATION_")


def _channels_free(g: Editor, n: int) -> bool:
    """Node ``n`` computes each output element from the inputs' elements at its own index
    (broadcast through strides), whatever order the dimensions are listed in: an element-wise
    or activation operator, or BATCH_NORMALIZATION with Spatial.

    JOIN along the channels would qualify (its axis listed last), but XLA's CPU backend joins
    along the minor dimension element by element where it copies NCHW blocks whole:
    DenseNet-121, two cores, 1.05x the time with its joins channels-last (2026-11-27)."""
    op, d = g.op(n), g.nodes[n]
    if op is None:
        return False
    if op.startswith(_AXIS_FREE):
        return "SOFTMAX" not in op and "HARDMAX" not in op
    return op == "BATCH_NORMALIZATION" and bool(d.spatial)


def _dense_convolution(g: Editor, n: int) -> bool:
    """An ungrouped convolution, float or integer, or a depthwise one (its taps run
    channels-last on the CPU: ``conv_forms.depthwise_taps``); other grouped ones are lowered
    per group, NCHW."""
    from ...ops.conv_forms import is_depthwise

    if g.op(n) not in ("CONVOLUTION", "CONVOLUTION_INTEGER"):
        return False
    d = g.nodes[n]
    x, groups = d.input_tensor, d.group_count
    return groups == 1 or (
        x.rank == 4 and is_depthwise(x.sizes[1], groups, d.filter_tensor.sizes[2:])
    )


def _convolution_output(g: Editor, n: int) -> bool:
    """Node ``n`` writes a dense convolution's result: the convolution, or the CAST to float
    that alone reads an integer one (the pair QDQConvFusion makes, one kernel on a GPU: the
    CAST stays as it is, its readers are taken)."""
    if _dense_convolution(g, n):
        return True
    if g.op(n) != "CAST":
        return False
    src = g.source(n, 0)
    return (
        src is not None
        and src[0] != GRAPH_INPUT
        and g.op(src[0]) == "CONVOLUTION_INTEGER"
        and _dense_convolution(g, src[0])
        and len(g.users((src[0], 0))) == 1
    )


def _nchw_image(desc) -> bool:
    """A 4-D tensor of several channels and several positions (not a per-channel vector)."""
    return desc.rank == 4 and desc.sizes[1] > 1 and desc.sizes[2] * desc.sizes[3] > 1


def _permuted(desc):
    """The same elements of the same bytes, the dimensions listed NHWC."""
    strides = desc.layout_strides
    return desc.like(sizes=tuple(desc.sizes[i] for i in _LAST),
                     strides=tuple(strides[i] for i in _LAST))  # fmt: skip


@rewrite("ChannelsLast", "all", order=2)
def channels_last(g: Editor) -> int:
    """Element-wise nodes next to convolutions compute their 4-D tensors channels-last: their
    tensors list the dimensions NHWC, each input a view of its source's bytes, the output
    written packed NHWC, and every reader reads it through NHWC strides, as onnxruntime's layout
    transformers hand a CNN's activations from convolution to convolution in the convolution
    kernels' own order.

    XLA keeps a convolution's or 1x1 product's activations channels-last on the CPU, but laid
    an element-wise node of NCHW tensors between them (a residual addition and its ReLU) out
    NCHW, with a transposing copy on each side of it (ResNet-50 at batch 1: about a quarter of
    the kernels' time). Listed NHWC, those nodes are plain passes over the products' own layout.

    A node is taken when it reads an ungrouped or depthwise convolution or a node already
    taken, or such a convolution reads it as its input; not when it is a graph output, brings a
    graph input in, or has a reader that would need a copy to read the new layout (a flatten to
    a GEMM's rows) or already reads it through a view of its own other than the NHWC listing
    (a node taken before it, which then reads it packed). Depthwise convolutions count since
    their lowerings run channels-last (the CPU's taps, CUDA's kernel): on two CPU cores
    EfficientNet-B0 at batch 1 ran 31.1 -> 17.9 ms so, its Swish and squeeze-excitation after
    each depthwise convolution no longer NCHW between channels-last neighbours
    (benchmarks/experiments/README.md)."""
    count = 0
    taken: set[int] = set()
    changed = True
    while changed:
        changed = False
        for n in g.live():
            if n in taken or not _channels_free(g, n):
                continue
            d = g.nodes[n]
            out = d.edge_slots("output")
            if len(out) != 1 or out[0][1] is None or g.is_output((n, 0)):
                continue
            o = out[0][1]
            if not _nchw_image(o) or not o.is_packed:
                continue
            inputs = d.edge_slots("input")
            if any(t is not None and t.rank != 4 for _, t in inputs):
                continue
            sources = [g.source(n, k) for k in range(len(inputs))]
            if any(s is not None and s[0] == GRAPH_INPUT for s in sources):
                continue  # the identity bringing a graph input (or a constant) in
            producers = [s[0] for s in sources if s is not None]
            users = g.users((n, 0))
            near = any(m in taken or _convolution_output(g, m) for m in producers) or any(
                _dense_convolution(g, m) and k == 0 for m, k in users
            )
            if not near:
                continue
            new = d
            for k, (_, t) in enumerate(inputs):
                if t is not None:
                    new = with_input_desc(new, k, _permuted(t))
            field = d.declared("output")[0].name
            nhwc = o.like(sizes=tuple(o.sizes[i] for i in _LAST), strides=None)
            new = replace(new, **{field: nhwc})
            # the NHWC bytes, addressed in the old NCHW order
            c, h, w = o.sizes[1], o.sizes[2], o.sizes[3]
            old_order = (h * w * c, 1, w * c, c)
            readers: dict[int, Any] = {}
            ok = True
            for m, slot in g.users((n, 0)):
                if g.op(m) is None:
                    ok = False
                    break
                mine = g.input_desc(m, slot)
                view = _permuted(o)
                listed = (mine.data_type, mine.sizes, mine.layout_strides)
                if listed == (view.data_type, view.sizes, view.layout_strides):
                    # a reader listing it NHWC already (taken before it): now packed
                    readers[m] = with_input_desc(readers.get(m, g.nodes[m]), slot, nhwc)
                    continue
                if not is_dense(mine) or mine.element_count != o.element_count:
                    ok = False  # a view of the old layout (a slice, a broadcast)
                    break
                strides = reshape_strides(o.sizes, old_order, mine.sizes)
                if strides is None:
                    ok = False  # a reshape the new layout cannot be read as without a copy
                    break
                readers[m] = with_input_desc(
                    readers.get(m, g.nodes[m]), slot, mine.like(sizes=mine.sizes, strides=strides)
                )
            if not ok or not g.valid(new) or not all(g.valid(r) for r in readers.values()):
                continue
            g.set_node(n, new)
            for m, r in readers.items():
                g.set_node(m, r)
            taken.add(n)
            changed = True
            count += 1
    return count
