"""Gathers, scatters and one-hot, as ONNX Runtime's DirectML provider maps them: Gather
(GATHER), GatherElements (GATHER_ELEMENTS), GatherND (GATHER_ND1), Scatter and
ScatterElements (SCATTER), ScatterND (SCATTER_ND), OneHot (ONE_HOT).

Every tensor of these operators has one DimensionCount, the meaningful dimensions trailing.
Signed indices (ONNX's INT64 is INT32 in the graph) may be negative: DirectML counts them from
the end, as ONNX does, so they need no wrapping here.

DirectML's scatters have no reduction. ScatterElements and ScatterND with ``reduction`` add /
mul / max / min are built from DML operators: ONE_HOT marks, for each update, the output
position it lands on; ELEMENT_WISE_IF keeps the update there and the reduction's neutral value
elsewhere; REDUCE folds the updates of each position together (every duplicate counts, in any
order), and one element-wise ADD / MULTIPLY / MAX / MIN combines the result with the data.

NonZero, Unique and Compress have output shapes that depend on their input's values: they run
only when those values are known at import (they are folded then); otherwise the import stops
with a ValidationError naming the node."""

from __future__ import annotations

import math

import numpy as np

from ...enums import DataType
from ..importer import Value, broadcast, packed
from . import converter
from ._common import axis_of, cast_value, op, view
from .movement import empty

# --- gathers ----------------------------------------------------------------------------------


@converter("Gather")
def _gather(ctx, node, inputs):
    data, indices = inputs
    r, q = data.rank, indices.rank
    if r == 0:
        raise ctx.fail("data must have at least one dimension")
    axis = axis_of(ctx, ctx.attr("axis", 0), r)
    out_shape = data.shape[:axis] + indices.shape + data.shape[axis + 1 :]
    if 0 in out_shape:
        return [empty(ctx, data, out_shape)]
    indices = _index_value(ctx, indices)
    rank = max(r, q + r - 1, 1)
    desc = op("GATHER")(
        packed(data.data_type, data.shape, rank),
        packed(indices.data_type, indices.shape, rank),
        packed(data.data_type, out_shape, rank),
        axis=axis + rank - r,
        index_dimensions=q,
    )
    return [ctx.out(ctx.node(desc, [data, indices]), out_shape, is_bool=data.is_bool)]


def _index_value(ctx, indices: Value) -> Value:
    """Indices in an index type of the DML tables (INT32 / UINT32; ONNX allows only int32 and
    int64, but a narrower integer coming from a function body is widened)."""
    if indices.data_type in (DataType.INT32, DataType.UINT32):
        return indices
    return cast_value(ctx, indices, DataType.INT32)


@converter("GatherElements")
def _gather_elements(ctx, node, inputs):
    data, indices = inputs
    r = data.rank
    if r == 0 or indices.rank != r:
        raise ctx.fail(f"data and indices must have one rank >= 1, got {r} and {indices.rank}")
    axis = axis_of(ctx, ctx.attr("axis", 0), r)
    if 0 in indices.shape:
        return [empty(ctx, data, indices.shape)]
    indices = _index_value(ctx, indices)
    desc = op("GATHER_ELEMENTS")(
        packed(data.data_type, data.shape),
        packed(indices.data_type, indices.shape),
        packed(data.data_type, indices.shape),
        axis=axis,
    )
    return [ctx.out(ctx.node(desc, [data, indices]), indices.shape, is_bool=data.is_bool)]


@converter("GatherND")
def _gather_nd(ctx, node, inputs):
    data, indices = inputs
    b = int(ctx.attr("batch_dims", 0))
    r, q = data.rank, indices.rank
    if r < 1 or q < 1 or not 0 <= b < min(r, q):
        raise ctx.fail(f"batch_dims {b} needs data and indices of rank > {b}, got {r} and {q}")
    k = indices.shape[-1]
    if k > r - b or indices.shape[:b] != data.shape[:b]:
        raise ctx.fail(
            f"indices {list(indices.shape)} do not address data {list(data.shape)} with "
            f"batch_dims {b}"
        )
    out_shape = indices.shape[:-1] + data.shape[b + k :]
    if 0 in out_shape:
        return [empty(ctx, data, out_shape)]
    indices = _index_value(ctx, indices)
    rank = max(r, q, len(out_shape))
    desc = op("GATHER_ND1")(
        packed(data.data_type, data.shape, rank),
        packed(indices.data_type, indices.shape, rank),
        packed(data.data_type, out_shape, rank),
        input_dimension_count=r,
        indices_dimension_count=q,
        batch_dimension_count=b,
    )
    return [ctx.out(ctx.node(desc, [data, indices]), out_shape, is_bool=data.is_bool)]


# --- scatters ---------------------------------------------------------------------------------

# ONNX reduction -> (REDUCE function, the element-wise operator that joins data and the reduced
# updates). The neutral value of each is in ``_neutral``.
_REDUCTIONS = {
    "add": ("SUM", "ELEMENT_WISE_ADD"),
    "mul": ("MULTIPLY", "ELEMENT_WISE_MULTIPLY"),
    "max": ("MAX", "ELEMENT_WISE_MAX"),
    "min": ("MIN", "ELEMENT_WISE_MIN"),
}


def _neutral(reduction: str, t: DataType) -> np.ndarray:
    """The value a reduction leaves everything unchanged with, as a 0-d array of type ``t``."""
    dtype = t.numpy_dtype
    if reduction in ("add", "mul"):
        return np.asarray(0 if reduction == "add" else 1, dtype)
    info = np.finfo(dtype) if t.is_float else np.iinfo(dtype)
    if t.is_float:
        return np.asarray(-np.inf if reduction == "max" else np.inf, dtype)
    return np.asarray(info.min if reduction == "max" else info.max, dtype)


def _reduction(ctx) -> str:
    reduction = ctx.attr("reduction", "none")
    if reduction != "none" and reduction not in _REDUCTIONS:
        raise ctx.fail(f"reduction '{reduction}' is not one of none, {', '.join(_REDUCTIONS)}")
    return reduction


def _one_hot_mask(ctx, at: Value, axis: int, depth: int) -> Value:
    """UINT8 ONE_HOT of ``at`` (which has size 1 along ``axis``): 1 where the position along
    ``axis`` is the index (a negative index counts from the end), 0 elsewhere."""
    shape = at.shape[:axis] + (depth,) + at.shape[axis + 1 :]
    values = ctx.constant(np.asarray([0, 1], np.uint8))
    rank = len(shape)
    desc = op("ONE_HOT")(
        packed(at.data_type, at.shape),
        packed(DataType.UINT8, (2,), rank),
        packed(DataType.UINT8, shape),
        axis=axis,
    )
    return ctx.out(ctx.node(desc, [at, values]), shape, is_bool=True)


def _reduce_into(ctx, data: Value, mask: Value, updates: Value, reduction: str, axis: int,
                 reduced: tuple[int, ...]) -> Value:  # fmt: skip
    """data combined with the updates that ``mask`` (broadcast against ``updates``) assigns to
    each position, reduced over ``axis``; the reduced shape is ``reduced`` (data's shape, or a
    leading part of each dimension, padded with the neutral value)."""
    function, combine = _REDUCTIONS[reduction]
    t = data.data_type
    shape = tuple(np.broadcast_shapes(mask.shape, updates.shape))
    neutral = ctx.constant(_neutral(reduction, t))
    picked_desc = op("ELEMENT_WISE_IF")(
        broadcast(mask, shape, DataType.UINT8),
        broadcast(updates, shape),
        broadcast(neutral, shape),
        packed(t, shape),
    )
    picked = ctx.out(ctx.node(picked_desc, [mask, updates, neutral]), shape)
    kept = tuple(1 if i == axis else d for i, d in enumerate(shape))
    desc = op("REDUCE")(function, packed(t, shape), packed(t, kept), axes=[axis])
    summed = view(ctx.out(ctx.node(desc, [picked]), kept), reduced)
    if reduced != data.shape:
        # Updates reach only a leading block of each dimension: the rest gets the neutral value.
        pad = op("PADDING1")(
            packed(t, reduced),
            packed(t, data.shape),
            padding_mode="CONSTANT",
            padding_value_data_type=t,
            padding_value=_neutral(reduction, t).item(),
            start_padding=[0] * len(reduced),
            end_padding=[d - e for d, e in zip(data.shape, reduced)],
        )
        summed = ctx.out(ctx.node(pad, [summed]), data.shape)
    both = op(combine)(packed(t, data.shape), packed(t, data.shape), packed(t, data.shape))
    return ctx.out(ctx.node(both, [data, summed]), data.shape, is_bool=data.is_bool)


@converter("Scatter", "ScatterElements")
def _scatter_elements(ctx, node, inputs):
    data, indices, updates = inputs
    r = data.rank
    if r == 0 or indices.rank != r or updates.shape != indices.shape:
        raise ctx.fail(
            f"data {list(data.shape)}, indices {list(indices.shape)} and updates "
            f"{list(updates.shape)} must have one rank, indices and updates one shape"
        )
    axis = axis_of(ctx, ctx.attr("axis", 0), r)
    if any(i > d for k, (i, d) in enumerate(zip(indices.shape, data.shape)) if k != axis):
        raise ctx.fail(f"indices {list(indices.shape)} exceed data {list(data.shape)}")
    reduction = _reduction(ctx)
    if 0 in indices.shape:
        return [data]  # nothing is scattered
    indices = _index_value(ctx, indices)
    if reduction != "none":
        # The mask has a new axis after ``axis``: update t (along axis) lands on position j.
        at = view(indices, indices.shape[: axis + 1] + (1,) + indices.shape[axis + 1 :])
        mask = _one_hot_mask(ctx, at, axis + 1, data.shape[axis])
        lifted = view(updates, at.shape)
        reduced = indices.shape[:axis] + (data.shape[axis],) + indices.shape[axis + 1 :]
        out = _reduce_into(ctx, data, mask, lifted, reduction, axis, reduced)
        return [out]
    t = data.data_type
    desc = op("SCATTER")(
        packed(t, data.shape),
        packed(indices.data_type, indices.shape),
        packed(t, updates.shape),
        packed(t, data.shape),
        axis=axis,
    )
    return [ctx.out(ctx.node(desc, [data, indices, updates]), data.shape, is_bool=data.is_bool)]


@converter("ScatterND")
def _scatter_nd(ctx, node, inputs):
    data, indices, updates = inputs
    r, q = data.rank, indices.rank
    if r < 1 or q < 1:
        raise ctx.fail(f"data and indices must have rank >= 1, got {r} and {q}")
    k = indices.shape[-1]
    want = indices.shape[:-1] + data.shape[k:]
    if k > r or updates.shape != want:
        raise ctx.fail(
            f"updates must have shape {list(want)} for indices {list(indices.shape)} into data "
            f"{list(data.shape)}, got {list(updates.shape)}"
        )
    reduction = _reduction(ctx)
    if 0 in indices.shape:
        return [data]
    indices = _index_value(ctx, indices)
    t = data.data_type
    if reduction != "none":
        # Each index tuple becomes its row-major position among data's first k dimensions: a
        # GATHER_ND1 of those positions (a FILL_VALUE_SEQUENCE), which also counts negative
        # coordinates from the end.
        lead, rows = data.shape[:k], math.prod(data.shape[:k])
        count, tail = math.prod(indices.shape[:-1]), math.prod(data.shape[k:])
        seq = op("FILL_VALUE_SEQUENCE")(packed(DataType.INT32, lead), DataType.INT32, 0, 1)
        positions = ctx.out(ctx.node(seq, []), lead)
        rank = max(k, q, q - 1)
        gather = op("GATHER_ND1")(
            packed(DataType.INT32, lead, rank),
            packed(indices.data_type, indices.shape, rank),
            packed(DataType.INT32, indices.shape[:-1], rank),
            input_dimension_count=k,
            indices_dimension_count=q,
            batch_dimension_count=0,
        )
        at = ctx.out(ctx.node(gather, [positions, indices]), (count, 1))
        mask = view(_one_hot_mask(ctx, at, 1, rows), (count, rows, 1))
        out = _reduce_into(
            ctx, view(data, (1, rows, tail)), mask, view(updates, (count, 1, tail)),
            reduction, 0, (1, rows, tail),
        )  # fmt: skip
        return [view(out, data.shape)]
    rank = max(r, q, updates.rank)
    desc = op("SCATTER_ND")(
        packed(t, data.shape, rank),
        packed(indices.data_type, indices.shape, rank),
        packed(t, updates.shape, rank),
        packed(t, data.shape, rank),
        input_dimension_count=r,
        indices_dimension_count=q,
    )
    return [ctx.out(ctx.node(desc, [data, indices, updates]), data.shape, is_bool=data.is_bool)]


# --- one-hot ----------------------------------------------------------------------------------


@converter("OneHot")
def _one_hot(ctx, node, inputs):
    indices, depth_in, values = inputs
    depth_array = np.asarray(ctx.const(depth_in, "depth")).reshape(-1)
    if depth_array.size != 1:
        raise ctx.fail(f"depth must hold one value, got {depth_array.size}")
    depth = int(depth_array[0])  # a float depth is truncated, as ONNX says
    if values.shape != (2,):
        raise ctx.fail(f"values must be [off_value, on_value], got shape {list(values.shape)}")
    r = indices.rank + 1
    axis = axis_of(ctx, ctx.attr("axis", -1), r)
    at_shape = indices.shape[:axis] + (1,) + indices.shape[axis:]
    shape = indices.shape[:axis] + (depth,) + indices.shape[axis:]
    if depth < 1 or 0 in shape:
        if depth < 0:
            raise ctx.fail(f"depth must be >= 0, got {depth}")
        return [empty(ctx, values, shape)]
    # ONNX casts non-integer indices to integers (toward zero); ONE_HOT reads index types only.
    indices = _index_value(ctx, indices)
    t = values.data_type
    desc = op("ONE_HOT")(
        packed(indices.data_type, at_shape),
        packed(t, (2,), r),
        packed(t, shape),
        axis=axis,
    )
    return [ctx.out(ctx.node(desc, [indices, values]), shape, is_bool=values.is_bool)]


# --- data-dependent shapes --------------------------------------------------------------------


def _value_dependent(ctx, node, inputs):
    raise ctx.fail(
        f"{node.op_type}'s output shape depends on its input values, which are not known at "
        "import; a DML graph has static shapes, so it runs only when those values are known "
        "(initializers, Constants or folded values)"
    )


converter("NonZero", "Unique", "Compress")(_value_dependent)
