"""Reductions and arg-reductions: REDUCE with each of DirectML's functions, ARGMAX / ARGMIN.

As ONNX Runtime's DirectML provider maps them (``shared/spec/ONNX.md``, "Reductions"): every
``Reduce*`` op is one REDUCE node over the axes, which are an attribute until ReduceSum-13 and
the other reductions' version 18, and a constant input from then on (``ctx.const``). No axes
reduces every axis, unless ``noop_with_empty_axes`` (13 / 18 on) makes the op an identity.
``keepdims`` = 0 is a view of REDUCE's rank-keeping output without the reduced axes.

ArgMax / ArgMin are DirectML's ARGMAX / ARGMIN over the one axis, ``select_last_index`` (12 on)
choosing the last of equal extremes (AxisDirection DECREASING). Their ONNX INT64 output is INT32
in the graph (``elements.data_type_of``), a type both operators write.
"""

from __future__ import annotations

from dataclasses import replace

from ..elements import data_type_of
from ..importer import packed
from . import register
from ._common import axis_of, const_ints, op, reduce_value, view

# ONNX op type -> DML ReduceFunction.
FUNCTIONS = {
    "ReduceSum": "SUM",
    "ReduceMean": "AVERAGE",
    "ReduceMax": "MAX",
    "ReduceMin": "MIN",
    "ReduceProd": "MULTIPLY",
    "ReduceLogSum": "LOG_SUM",
    "ReduceLogSumExp": "LOG_SUM_EXP",
    "ReduceSumSquare": "SUM_SQUARE",
    "ReduceL1": "L1",
    "ReduceL2": "L2",
}


def _reduce(function: str):
    def convert(ctx, node, inputs):
        x, axes_in = (list(inputs) + [None])[:2]
        axes = ctx.attr("axes")
        if axes_in is not None:
            axes = const_ints(ctx, axes_in, "axes")
        if not axes:
            if int(ctx.attr("noop_with_empty_axes", 0)):
                return [x]
            axes = list(range(x.rank))
        keepdims = bool(ctx.attr("keepdims", 1))
        y = reduce_value(ctx, x, function, axes, keepdims=keepdims)
        # MAX / MIN of ONNX BOOL (ReduceMax-20, ReduceMin-20) stay BOOL: the UINT8 maximum of
        # zeros and ones is their logical or.
        return [replace(y, is_bool=x.is_bool and function in ("MAX", "MIN"))]

    return convert


for _onnx, _dml in FUNCTIONS.items():
    register(_onnx, _reduce(_dml))


def _arg(name: str):
    def convert(ctx, node, inputs):
        (x,) = inputs
        if x.rank == 0:
            raise ctx.fail("the input must have at least one dimension")
        axis = axis_of(ctx, ctx.attr("axis", 0), x.rank)
        kept = tuple(1 if i == axis else d for i, d in enumerate(x.shape))
        last = bool(int(ctx.attr("select_last_index", 0)))
        desc = op(name)(
            packed(x.data_type, x.shape),
            packed(data_type_of(7, ctx.where), kept),
            axes=[axis],
            axis_direction="DECREASING" if last else "INCREASING",
        )
        y = ctx.out(ctx.node(desc, [x]), kept)
        if int(ctx.attr("keepdims", 1)):
            return [y]
        return [view(y, x.shape[:axis] + x.shape[axis + 1 :])]

    return convert


register("ArgMax", _arg("ARGMAX"))
register("ArgMin", _arg("ARGMIN"))
