"""Helpers the converter modules share: DML descriptor classes by name, axes, broadcasting,
the element-wise and reduction patterns, casts, window padding."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...enums import DataType
from ...ops.pooling import WindowPlan
from ...registry import lookup
from ..importer import Context, Converter, Value, broadcast, packed

__all__ = [
    "DataType",
    "axis_of",
    "binary",
    "broadcast_shape",
    "cast_value",
    "matmul_operands",
    "op",
    "pads_of",
    "reduce_value",
    "spatial_out",
    "unary",
    "view",
]


def op(name: str) -> type:
    """The descriptor class of ``DML_OPERATOR_<name>``."""
    return lookup(f"DML_OPERATOR_{name}").desc_class


def axis_of(ctx: Context, axis: Any, rank: int, what: str = "axis") -> int:
    """``axis`` in [-rank, rank) as a non-negative index (a scalar's only axis is 0)."""
    axis = int(axis)
    if not -rank <= axis < max(rank, 1):
        raise ctx.fail(f"{what} {axis} is out of range for rank {rank}")
    return axis % max(rank, 1)


def broadcast_shape(ctx: Context, *shapes: Sequence[int]) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError:
        raise ctx.fail(f"shapes {[list(s) for s in shapes]} do not broadcast") from None


def unary(name: str, **fixed: Any) -> Converter:
    """A DML operator with one input and one output of the same shape and type."""

    def convert(ctx: Context, node, inputs):
        x = inputs[0]
        t = packed(x.data_type, x.shape)
        return [ctx.out(ctx.node(op(name)(t, t, **fixed), [x]), x.shape)]

    return convert


def binary(name: str, *, is_bool: bool = False) -> Converter:
    """A broadcasting element-wise operator; comparisons write UINT8 (ONNX BOOL)."""

    def convert(ctx: Context, node, inputs):
        a, b = inputs[:2]
        return [binary_value(ctx, name, a, b, is_bool=is_bool)]

    return convert


def select_value(ctx: Context, cond: Value, a: Value, b: Value, shape=None) -> Value:
    """``cond ? a : b`` (ELEMENT_WISE_IF) at ``shape`` (default: the three broadcast), each
    operand read through a broadcast desc: ``cond`` as UINT8, ``b`` in ``a``'s type."""
    if shape is None:
        shape = tuple(np.broadcast_shapes(cond.shape, a.shape, b.shape))
    t = a.data_type
    desc = op("ELEMENT_WISE_IF")(
        broadcast(cond, shape, DataType.UINT8),
        broadcast(a, shape),
        broadcast(b, shape, t),
        packed(t, shape),
    )
    return ctx.out(ctx.node(desc, [cond, a, b]), shape, is_bool=a.is_bool and b.is_bool)


def binary_value(ctx: Context, name: str, a: Value, b: Value, *, is_bool: bool = False) -> Value:
    shape = broadcast_shape(ctx, a.shape, b.shape)
    out_type = DataType.UINT8 if is_bool else a.data_type
    desc = op(name)(broadcast(a, shape), broadcast(b, shape), packed(out_type, shape))
    return ctx.out(ctx.node(desc, [a, b]), shape, is_bool=is_bool or (a.is_bool and b.is_bool))


def const_ints(ctx: Context, v: Value | None, what: str) -> list[int] | None:
    """An input DirectML needs as a constant, as a list of ints (None when absent); one of a
    floating type (a shape or axes that ONNX types as integers) is refused naming it."""
    if v is None:
        return None
    values = np.asarray(ctx.const(v, what))
    if values.dtype.kind not in "iub":
        raise ctx.fail(f"input '{what}' must hold integers, got {values.dtype} values")
    return [int(a) for a in values.reshape(-1)]


def view(value: Value, shape: Sequence[int]) -> Value:
    return value.view(tuple(int(d) for d in shape))


def cast_value(ctx: Context, x: Value, to: DataType, *, is_bool: bool = False) -> Value:
    """``x`` in the graph type ``to`` (a CAST node; a constant is cast at import)."""
    if x.data_type == to and x.is_bool == is_bool:
        return x
    if x.const is not None:
        return ctx.constant(x.const.astype(np.bool_ if is_bool else to.numpy_dtype))
    n = ctx.node(op("CAST")(packed(x.data_type, x.shape), packed(to, x.shape)), [x])
    return ctx.out(n, x.shape, is_bool=is_bool)


def pads_of(ctx: Context, x_spatial, kernel, strides, dilations, *, ceil: bool = False):
    """ONNX's pads (explicit or auto_pad) as (start, end) lists over the spatial axes; the
    window (kernel, strides, dilations) checked first, one size >= 1 per spatial axis."""
    nd = len(x_spatial)
    for name, values in (("kernel_shape", kernel), ("strides", strides), ("dilations", dilations)):
        if len(values) != nd or min(values, default=1) < 1:
            raise ctx.fail(f"{name} must hold {nd} values >= 1, got {[int(v) for v in values]}")
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    pads = [int(p) for p in ctx.attr("pads", [0] * (2 * nd))]
    if len(pads) != 2 * nd:
        raise ctx.fail(f"pads must hold {2 * nd} values, got {len(pads)}")
    start, end = pads[:nd], pads[nd:]
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        start, end = [], []
        for size, kk, s, d in zip(x_spatial, kernel, strides, dilations):
            out = -(-size // s)
            total = max(0, (out - 1) * s + (kk - 1) * d + 1 - size)
            small, big = total // 2, total - total // 2
            start.append(small if auto_pad == "SAME_UPPER" else big)
            end.append(big if auto_pad == "SAME_UPPER" else small)
    elif auto_pad == "VALID":
        start, end = [0] * nd, [0] * nd
    elif auto_pad != "NOTSET":
        raise ctx.fail(f"auto_pad '{auto_pad}' is not supported")
    if ceil:
        # ceil_mode: extend the end padding so the last, partial window is produced.
        for i, (size, kk, s, d) in enumerate(zip(x_spatial, kernel, strides, dilations)):
            span = size + start[i] + end[i] - ((kk - 1) * d + 1)
            out = -(-span // s) + 1
            if (out - 1) * s >= size + start[i]:  # a window may not start in the end padding
                out -= 1
            end[i] = max(end[i], (out - 1) * s + (kk - 1) * d + 1 - size - start[i])
    return start, end


def spatial_out(sizes, kernel, strides, dilations, start, end) -> tuple[int, ...]:
    """Output sizes of a sliding window: DirectML's rule, shared with pooling and convolution."""
    plan = WindowPlan(*(tuple(a) for a in (kernel, strides, dilations, start, end, sizes)))
    return plan.outputs


def reduce_value(ctx: Context, x: Value, function: str, axes, *, keepdims: bool) -> Value:
    """REDUCE of ``x`` over ``axes`` with DML's ``function``."""
    axes = sorted({axis_of(ctx, a, x.rank, "axes") for a in axes})
    kept = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    if not x.shape:
        kept, axes = (), [0]
    desc = op("REDUCE")(
        function, packed(x.data_type, x.shape), packed(x.data_type, kept), axes=axes
    )
    y = ctx.out(ctx.node(desc, [x]), kept)
    if keepdims:
        return y
    return view(y, [d for i, d in enumerate(x.shape) if i not in axes])


def matmul_operands(ctx: Context, a: Value, b: Value):
    """NumPy's matmul rule, shared by MatMul and the integer / quantized products: ``a`` and
    ``b`` as matrices (a 1-D operand gets a unit row or column), the sizes ``m, k, n``, the
    broadcast batch shape and the ONNX result shape. Returns ``(a2, b2, m, k, n, batch,
    result)``."""
    if a.rank == 0 or b.rank == 0:
        raise ctx.fail("the inputs must have at least one dimension")
    a2 = a.view((1, a.shape[0])) if a.rank == 1 else a
    b2 = b.view((b.shape[0], 1)) if b.rank == 1 else b
    m, k = a2.shape[-2:]
    k2, n = b2.shape[-2:]
    if k != k2:
        raise ctx.fail(f"inner dimensions differ: {list(a.shape)} x {list(b.shape)}")
    batch = broadcast_shape(ctx, a2.shape[:-2], b2.shape[:-2])
    result = batch + ((m,) if a.rank > 1 else ()) + ((n,) if b.rank > 1 else ())
    return a2, b2, m, k, n, batch, result
