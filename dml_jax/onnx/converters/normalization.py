"""Normalization: BATCH_NORMALIZATION and MEAN_VARIANCE_NORMALIZATION1."""

from __future__ import annotations

from ...tensor import TensorDesc
from ..importer import broadcast, packed
from . import converter
from ._common import axis_of, op


@converter("BatchNormalization")
def _batch_norm(ctx, node, inputs):
    x, scale, bias, mean, var = inputs[:5]
    if int(ctx.attr("training_mode", 0)) or ctx.output_count > 1:
        raise ctx.fail("training mode (more than one output) is not supported")
    if x.rank < 2:
        raise ctx.fail(f"the input must have 2 or more dimensions, got {x.rank}")
    sizes = x.shape + (1,) * max(0, 4 - x.rank)
    per_channel = (1, x.shape[1]) + (1,) * (len(sizes) - 2)
    t = x.data_type
    pt = TensorDesc(t, per_channel)
    desc = op("BATCH_NORMALIZATION")(
        TensorDesc(t, sizes),
        pt,
        pt,
        pt,
        pt,
        TensorDesc(t, sizes),
        spatial=True,
        epsilon=float(ctx.attr("epsilon", 1e-5)),
    )
    return [ctx.out(ctx.node(desc, [x, mean, var, scale, bias]), x.shape)]


@converter("LayerNormalization")
def _layer_norm(ctx, node, inputs):
    x, scale, bias = (list(inputs) + [None])[:3]
    if ctx.output_count > 1:
        raise ctx.fail("the Mean and InvStdDev outputs are not supported")
    axis = axis_of(ctx, ctx.attr("axis", -1), x.rank)
    axes = list(range(axis, x.rank))
    t = x.data_type

    def param(v):
        return None if v is None else broadcast(v, x.shape)

    desc = op("MEAN_VARIANCE_NORMALIZATION1")(
        packed(t, x.shape),
        param(scale),
        param(bias),
        packed(t, x.shape),
        axes=axes,
        normalize_variance=True,
        epsilon=float(ctx.attr("epsilon", 1e-5)),
    )
    return [ctx.out(ctx.node(desc, [x, scale, bias]), x.shape)]
