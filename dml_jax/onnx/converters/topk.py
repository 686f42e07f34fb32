"""TopK: DirectML's TOP_K1, as ONNX Runtime's DirectML provider maps it.

K is the ``k`` attribute in TopK-1 and the one-element ``K`` input from TopK-10 on, which
DirectML needs at import (``ctx.const``). ``largest`` (11 on; 1 before) picks the direction:
DECREASING lists the K largest in descending order, INCREASING the K smallest in ascending order.
``sorted`` = 0 allows any order, so DirectML's sorted output serves it too. Equal values come out
by ascending index, which is what ONNX asks for.

TOP_K1 writes its indices as UINT32 (DirectML's index type); ONNX's INT64 Indices output is INT32
in the graph, so a CAST follows (the indices are below the axis length, which fits in either).
"""

from __future__ import annotations

from ..elements import data_type_of
from ..importer import packed
from . import converter
from ._common import DataType, axis_of, cast_value, op


@converter("TopK")
def _top_k(ctx, node, inputs):
    x = inputs[0]
    if x.rank == 0:
        raise ctx.fail("the input must have at least one dimension")
    if len(inputs) > 1:
        k_values = ctx.const(inputs[1], "K").reshape(-1)
        if k_values.size != 1:
            raise ctx.fail(f"K must hold one value, got {k_values.size}")
        k = int(k_values[0])
    else:
        k = int(ctx.attr("k"))
    axis = axis_of(ctx, ctx.attr("axis", -1), x.rank)
    if not 1 <= k <= x.shape[axis]:
        raise ctx.fail(
            f"K = {k} must be in [1, {x.shape[axis]}] (the length of axis {axis}); DirectML's "
            "TOP_K1 selects at least one element"
        )
    largest = bool(int(ctx.attr("largest", 1)))
    sizes = tuple(k if i == axis else d for i, d in enumerate(x.shape))
    desc = op("TOP_K1")(
        packed(x.data_type, x.shape),
        packed(x.data_type, sizes),
        packed(DataType.UINT32, sizes),
        axis=axis,
        k=k,
        axis_direction="DECREASING" if largest else "INCREASING",
    )
    n = ctx.node(desc, [x])
    values = ctx.out(n, sizes, 0)
    indices = None
    if ctx.wants(1):
        indices = cast_value(ctx, ctx.out(n, sizes, 1), data_type_of(7, ctx.where))
    return [values, indices]
