"""Generators and scans, as ONNX Runtime's DirectML provider maps them: ConstantOfShape
(FILL_VALUE_CONSTANT), Range (FILL_VALUE_SEQUENCE), EyeLike (DIAGONAL_MATRIX), Trilu
(DIAGONAL_MATRIX1 over the input), CumSum (CUMULATIVE_SUMMATION), CumProd (CUMULATIVE_PRODUCT,
which the provider has no kernel for); and the values known at import: Constant, and the shape
queries Shape and Size (every shape is static at import, so they never reach the DML graph).

A generator's output size comes from input values (ConstantOfShape's shape, Range's bounds):
DirectML needs those as constants (``ctx.const``); so are Trilu's k and CumSum's and CumProd's
axis. When all
of a node's inputs are known it is folded before reaching these converters."""

from __future__ import annotations

import math

import numpy as np

from ...enums import DataType
from ..elements import check_dml_shape, data_type_of, to_graph_array
from ..importer import packed
from . import converter
from ._common import axis_of, cast_value, const_ints, op, view
from .movement import empty, typed_scalar


@converter("Constant")
def _constant(ctx, node, inputs):
    if "value" in ctx.attrs:
        return [ctx.constant(ctx.tensor_attr("value"))]
    for name, dtype in (("value_float", np.float32), ("value_int", np.int64)):
        if name in ctx.attrs:
            return [ctx.constant(np.asarray(ctx.attrs[name], dtype))]
    for name, dtype in (("value_floats", np.float32), ("value_ints", np.int64)):
        if name in ctx.attrs:
            return [ctx.constant(np.asarray(list(ctx.attrs[name]), dtype))]
    raise ctx.fail(f"attributes {sorted(ctx.attrs)} are not supported")


@converter("Shape")
def _shape(ctx, node, inputs):
    (x,) = inputs
    dims = np.asarray(x.shape, np.int64)
    start, end = ctx.attr("start", 0), ctx.attr("end", None)  # opset 15; clamped as slices are
    return [ctx.constant(dims[slice(start, end)])]


@converter("Size")
def _size(ctx, node, inputs):
    return [ctx.constant(np.asarray(math.prod(inputs[0].shape), np.int64))]


# --- generators -------------------------------------------------------------------------------


@converter("ConstantOfShape")
def _constant_of_shape(ctx, node, inputs):
    shape = const_ints(ctx, inputs[0], "input")
    if any(d < 0 for d in shape):
        raise ctx.fail(f"shape {shape} has a negative dimension")
    check_dml_shape(shape, ctx.where, "its output")  # an empty one too: a DML tensor's rank
    value = ctx.tensor_attr("value")
    value = np.zeros(1, np.float32) if value is None else value.reshape(-1)
    if value.size != 1:
        raise ctx.fail(f"value must hold one element, got {value.size}")
    if 0 in shape:
        return [ctx.constant(np.zeros(shape, value.dtype))]
    # The value in the graph's type (an int64 that does not fit in 32 bits is an error).
    graph_value = to_graph_array(value, ctx.where)
    t = DataType.from_dtype(graph_value.dtype)
    desc = op("FILL_VALUE_CONSTANT")(packed(t, shape), t, graph_value[0].item())
    return [ctx.out(ctx.node(desc, []), shape, is_bool=value.dtype == np.bool_)]


@converter("Range")
def _range(ctx, node, inputs):
    start, limit, delta = (
        np.asarray(ctx.const(v, name)).reshape(-1)
        for v, name in zip(inputs, ("start", "limit", "delta"))
    )
    if not start.size == limit.size == delta.size == 1:
        raise ctx.fail("start, limit and delta must be scalars")
    start, limit, delta = start[0], limit[0], delta[0]
    if delta == 0:
        raise ctx.fail("delta must not be 0")
    dtype = start.dtype
    if dtype.kind in "iu":
        # Exact integer arithmetic: ceil((limit - start) / delta).
        s, lim, d = int(start), int(limit), int(delta)
        count = max(-((s - lim) // d), 0)
    else:
        # In the inputs' own precision, as ONNX Runtime computes the count.
        with np.errstate(all="ignore"):
            count = max(int(np.ceil((limit - start) / delta)), 0)
    if count == 0:
        return [ctx.constant(np.zeros(0, dtype))]
    # Both ends of the sequence must fit the graph's type (64-bit integers are 32-bit there).
    ends = to_graph_array(np.asarray([start, start + (count - 1) * delta], dtype), ctx.where)
    t = DataType.from_dtype(ends.dtype)
    step = typed_scalar(t, delta) if count > 1 else typed_scalar(t, 0)  # one element: no step
    desc = op("FILL_VALUE_SEQUENCE")(packed(t, (count,)), t, typed_scalar(t, ends[0]), step)
    return [ctx.out(ctx.node(desc, []), (count,))]


@converter("EyeLike")
def _eye_like(ctx, node, inputs):
    (x,) = inputs
    if x.rank != 2:
        raise ctx.fail(f"input must be 2-D, got shape {list(x.shape)}")
    elem = ctx.attr("dtype")
    t = x.data_type if elem is None else data_type_of(elem, ctx.where)
    is_bool = x.is_bool if elem is None else int(elem) == 9
    if 0 in x.shape:
        dtype = np.bool_ if is_bool else t.numpy_dtype
        return [ctx.constant(np.zeros(x.shape, dtype))]
    k = int(ctx.attr("k", 0))
    if t is DataType.FLOAT64:
        # DIAGONAL_MATRIX has no FLOAT64; DIAGONAL_MATRIX1 (FL 5_1) writes 1 on [k, k + 1).
        h, w = x.shape
        k = min(max(k, -h - 1), w + 1)
        desc = op("DIAGONAL_MATRIX1")(None, packed(t, x.shape), t, 1.0, k, k + 1)
        return [ctx.out(ctx.node(desc, [None]), x.shape)]
    # DIAGONAL_MATRIX is 4-D: the matrix with two leading 1s.
    desc = op("DIAGONAL_MATRIX")(packed(t, x.shape, 4), offset=k, value=1.0)
    return [view(ctx.out(ctx.node(desc, []), (1, 1, *x.shape), is_bool=is_bool), x.shape)]


# The band bounds of DIAGONAL_MATRIX1 are 32-bit: k beyond the matrix is clamped to a value
# with the same meaning.
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1


@converter("Trilu")
def _trilu(ctx, node, inputs):
    x = inputs[0]
    if x.rank < 2:
        raise ctx.fail(f"input must have rank >= 2, got shape {list(x.shape)}")
    k = 0
    if len(inputs) > 1 and inputs[1] is not None:
        ks = np.asarray(ctx.const(inputs[1], "k")).reshape(-1)
        if ks.size != 1:
            raise ctx.fail(f"k must be a scalar, got {ks.size} values")
        k = int(ks[0])
    if 0 in x.shape:
        return [x]
    h, w = x.shape[-2:]
    k = min(max(k, -h - 1), w + 1)
    # The band zeroed, in topX = column - row: upper keeps topX >= k, lower keeps topX <= k.
    begin, end = (_INT_MIN, k) if int(ctx.attr("upper", 1)) else (k + 1, _INT_MAX)
    # DIAGONAL_MATRIX1 takes 2 to 4 dimensions: batch dimensions are folded into one.
    shape = (math.prod(x.shape[:-2]), h, w) if x.rank > 2 else (h, w)
    t = x.data_type
    desc = op("DIAGONAL_MATRIX1")(
        packed(t, shape), packed(t, shape), t, typed_scalar(t, 0), begin, end
    )
    y = ctx.out(ctx.node(desc, [view(x, shape)]), shape, is_bool=x.is_bool)
    return [view(y, x.shape)]


# --- scans ------------------------------------------------------------------------------------


def _scan(ctx, inputs, name: str, exclusive_field: str):
    """CumSum and CumProd: one CUMULATIVE_* node along the constant ``axis``, ONNX's reverse and
    exclusive attributes as its direction and exclusive flag."""
    x, axis_in = inputs
    axes = np.asarray(ctx.const(axis_in, "axis")).reshape(-1)
    if axes.size != 1:
        raise ctx.fail(f"axis must be a scalar, got {axes.size} values")
    if x.rank == 0:
        raise ctx.fail("input must have at least one dimension")
    axis = axis_of(ctx, axes[0], x.rank)
    if 0 in x.shape:
        return [empty(ctx, x, x.shape)]
    t = x.data_type
    desc = op(name)(
        packed(t, x.shape),
        packed(t, x.shape),
        axis=axis,
        axis_direction="DECREASING" if int(ctx.attr("reverse", 0)) else "INCREASING",
        **{exclusive_field: bool(int(ctx.attr("exclusive", 0)))},
    )
    return [ctx.out(ctx.node(desc, [x]), x.shape)]


@converter("CumSum")
def _cumsum(ctx, node, inputs):
    return _scan(ctx, inputs, "CUMULATIVE_SUMMATION", "has_exclusive_sum")


@converter("CumProd")
def _cumprod(ctx, node, inputs):
    """CumProd (opset 26): CUMULATIVE_PRODUCT, as CumSum maps onto CUMULATIVE_SUMMATION.
    CUMULATIVE_PRODUCT takes FLOAT32, FLOAT16, UINT32 and UINT16: an INT32 tensor (ONNX's
    int32, and int64 as its low 32 bits) runs as UINT32 between two CASTs, which keep the low
    bits both ways. Products modulo 2**32 do not depend on the signedness, so the bits are those
    of the signed running product wrapped to 32 bits, exactly."""
    x = inputs[0]
    if x.data_type is not DataType.INT32 or 0 in x.shape:
        return _scan(ctx, inputs, "CUMULATIVE_PRODUCT", "has_exclusive_product")
    u = cast_value(ctx, x, DataType.UINT32)
    (y,) = _scan(ctx, [u, inputs[1]], "CUMULATIVE_PRODUCT", "has_exclusive_product")
    return [cast_value(ctx, y, DataType.INT32)]
