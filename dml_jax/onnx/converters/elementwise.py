"""Element-wise math, comparisons, logic, selection and casts."""

from __future__ import annotations

import numpy as np

from ..importer import broadcast, data_type_of, packed
from . import converter, register
from ._common import DataType, binary, binary_value, broadcast_shape, cast_value, op, unary

for _onnx, _dml in (("Add", "ADD"), ("Sub", "SUBTRACT"), ("Mul", "MULTIPLY"), ("Div", "DIVIDE")):
    register(_onnx, binary(f"ELEMENT_WISE_{_dml}"))
for _onnx, _dml in (
    ("Sqrt", "SQRT"),
    ("Exp", "EXP"),
    ("Log", "LOG"),
    ("Neg", "NEGATE"),
    ("Abs", "ABS"),
    ("Erf", "ERF"),
):
    register(_onnx, unary(f"ELEMENT_WISE_{_dml}"))
for _onnx, _dml in (("Equal", "EQUALS"), ("Less", "LESS_THAN"), ("Greater", "GREATER_THAN")):
    register(_onnx, binary(f"ELEMENT_WISE_LOGICAL_{_dml}", is_bool=True))


@converter("Pow")
def _pow(ctx, node, inputs):
    x, y = inputs
    shape = broadcast_shape(ctx, x.shape, y.shape)
    if y.data_type != x.data_type:
        y = cast_value(ctx, y, x.data_type)
    desc = op("ELEMENT_WISE_POW")(
        broadcast(x, shape), broadcast(y, shape), packed(x.data_type, shape)
    )
    return [ctx.out(ctx.node(desc, [x, y]), shape)]


@converter("Where")
def _where(ctx, node, inputs):
    cond, a, b = inputs
    shape = broadcast_shape(ctx, cond.shape, a.shape, b.shape)
    desc = op("ELEMENT_WISE_IF")(
        broadcast(cond, shape, DataType.UINT8),
        broadcast(a, shape),
        broadcast(b, shape),
        packed(a.data_type, shape),
    )
    return [ctx.out(ctx.node(desc, [cond, a, b]), shape, is_bool=a.is_bool)]


@converter("Cast")
def _cast(ctx, node, inputs):
    (x,) = inputs
    to = int(ctx.attr("to"))
    target = data_type_of(to, ctx.where)
    if to == 9:  # BOOL: x != 0
        zero = ctx.constant(np.zeros((), np.dtype(x.data_type.numpy_dtype)))
        eq = binary_value(ctx, "ELEMENT_WISE_LOGICAL_EQUALS", x, zero, is_bool=True)
        one = ctx.constant(np.ones((), np.uint8))
        shape = eq.shape
        desc = op("ELEMENT_WISE_SUBTRACT")(
            broadcast(one, shape), broadcast(eq, shape), packed(DataType.UINT8, shape)
        )
        return [ctx.out(ctx.node(desc, [one, eq]), shape, is_bool=True)]
    return [cast_value(ctx, x, target)]
