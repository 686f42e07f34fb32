"""Reductions: REDUCE with each of DirectML's functions."""

from __future__ import annotations

from . import register
from ._common import reduce_value


def _reduce(function: str):
    def convert(ctx, node, inputs):
        x, axes_in = (list(inputs) + [None])[:2]
        axes = ctx.attr("axes")
        if axes_in is not None:
            axes = [int(a) for a in ctx.const(axes_in, "axes").reshape(-1)]
        if not axes:
            if int(ctx.attr("noop_with_empty_axes", 0)):
                return [x]
            axes = list(range(x.rank))
        return [reduce_value(ctx, x, function, axes, keepdims=bool(ctx.attr("keepdims", 1)))]

    return convert


for _onnx, _dml in (
    ("ReduceMean", "AVERAGE"),
    ("ReduceSum", "SUM"),
    ("ReduceMax", "MAX"),
    ("ReduceMin", "MIN"),
):
    register(_onnx, _reduce(_dml))
