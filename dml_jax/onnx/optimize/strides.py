"""Copies into strides: an ELEMENT_WISE_IDENTITY that only copies a strided view of a node's
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
