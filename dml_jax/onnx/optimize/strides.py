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
