"""Gather and scatter: GATHER."""

from __future__ import annotations

from ..importer import packed
from . import converter
from ._common import axis_of, op


@converter("Gather")
def _gather(ctx, node, inputs):
    data, indices = inputs
    r, q = data.rank, indices.rank
    if r == 0:
        raise ctx.fail("data must have at least one dimension")
    axis = axis_of(ctx, ctx.attr("axis", 0), r)
    out_shape = data.shape[:axis] + indices.shape + data.shape[axis + 1 :]
    rank = max(r, q + r - 1, 1)
    desc = op("GATHER")(
        packed(data.data_type, data.shape, rank),
        packed(indices.data_type, indices.shape, rank),
        packed(data.data_type, out_shape, rank),
        axis=axis + rank - r,
        index_dimensions=q,
    )
    return [ctx.out(ctx.node(desc, [data, indices]), out_shape, is_bool=data.is_bool)]
