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

NonZero, Unique and Compress have output shapes that depend on their input's values: the session
computes that size before the run (``Context.sizes``) and the node is a JAX lowering of it."""

from __future__ import annotations

import math

import jax.numpy as jnp
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
# A DML graph has static shapes. ONNX Runtime's DirectML provider runs these ops outside its DML
# graphs (CPU kernels, with copies at the partition edges); here the session computes the one
# size that depends on values (``ctx.sizes``: at import when the inputs are known, else by a
# program of the model cut at the node's inputs, before the run) and the node becomes a JAX
# lowering of that static size inside the one program.


def _as_bool(x):
    return x != 0


@converter("NonZero", kind="jax")
def _non_zero(ctx, node, inputs):
    (x,) = inputs
    rank = max(x.rank, 1)  # a scalar counts as one element of one dimension (NumPy's rule)
    (count,) = ctx.sizes(lambda a: (np.count_nonzero(a),), [x])
    t = DataType.INT32  # ONNX's INT64 indices, 32-bit in the graph
    if count == 0:
        return [ctx.constant(np.zeros((rank, 0), np.int64))]

    def fn(a):
        a = jnp.reshape(a, a.shape or (1,))
        return (jnp.stack(jnp.nonzero(a, size=count)).astype(jnp.int32),)

    return ctx.jax("NonZero", fn, [x], [((rank, count), t)])


@converter("Compress", kind="jax")
def _compress(ctx, node, inputs):
    x, condition = inputs
    axis = ctx.attr("axis")
    if condition.rank != 1:
        raise ctx.fail(f"input condition must be 1-D, got shape {list(condition.shape)}")
    if axis is None:
        length = math.prod(x.shape)
    else:
        if x.rank == 0:
            raise ctx.fail("input must have at least one dimension where axis is given")
        axis = axis_of(ctx, axis, x.rank)
        length = x.shape[axis]
    if condition.shape[0] > length:
        raise ctx.fail(
            f"condition has {condition.shape[0]} entries, more than the {length} it selects from"
        )
    (count,) = ctx.sizes(lambda c: (np.count_nonzero(c),), [condition])
    shape = (count,) if axis is None else x.shape[:axis] + (count,) + x.shape[axis + 1 :]
    if count == 0:
        return [empty(ctx, x, shape)]

    def fn(a, c):
        (picked,) = jnp.nonzero(c, size=count)
        if axis is None:
            return (jnp.take(a.reshape(-1), picked),)
        return (jnp.take(a, picked, axis=axis),)

    return ctx.jax("Compress", fn, [x, condition], [(shape, x.data_type, x.is_bool)])


def _unique_numpy(a, axis, sort):
    """ONNX's Unique of a NumPy array: (Y, indices, inverse_indices, counts); unsorted keeps the
    order of first occurrence."""
    y, first, inverse, counts = np.unique(
        a, return_index=True, return_inverse=True, return_counts=True, axis=axis
    )
    inverse = inverse.reshape(-1)
    if not sort:
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        y = np.take(y, order, axis=0 if axis is None else axis)
        first, counts, inverse = first[order], counts[order], rank[inverse]
    return y, first, inverse, counts


@converter("Unique", kind="jax")
def _unique(ctx, node, inputs):
    (x,) = inputs
    axis = ctx.attr("axis")
    sort = bool(ctx.attr("sorted", 1))
    if axis is not None:
        axis = axis_of(ctx, axis, x.rank)
    if x.rank == 0:
        raise ctx.fail("input X must have at least one dimension")

    def count_of(a):
        return (len(_unique_numpy(a, axis, sort)[1]),)

    (count,) = ctx.sizes(count_of, [x])
    along = x.shape[axis] if axis is not None else math.prod(x.shape)
    y_shape = (count,) if axis is None else x.shape[:axis] + (count,) + x.shape[axis + 1 :]
    t = DataType.INT32

    def fn(a):
        if axis is None:
            rows = a.reshape(-1, 1)
        else:
            rows = jnp.moveaxis(a, axis, 0).reshape(along, -1)
        # Sort the rows lexicographically (stable, so equal rows keep their first position).
        keys = [rows[:, k] for k in range(rows.shape[1] - 1, -1, -1)]
        order = jnp.lexsort(keys) if keys else jnp.arange(along)
        srt = rows[order]
        starts = jnp.concatenate([jnp.ones((1,), bool), jnp.any(srt[1:] != srt[:-1], axis=1)])
        group = jnp.cumsum(starts) - 1  # the group of each sorted row
        first_sorted = jnp.nonzero(starts, size=count)[0]
        first = order[first_sorted]  # the first occurrence of each group (stable sort)
        counts = jnp.diff(jnp.append(first_sorted, along))
        inverse = jnp.zeros(along, jnp.int32).at[order].set(group.astype(jnp.int32))
        if not sort:  # groups in the order of their first occurrence
            perm = jnp.argsort(first, stable=True)
            rank = jnp.zeros(count, jnp.int32).at[perm].set(jnp.arange(count, dtype=jnp.int32))
            first, counts, inverse = first[perm], counts[perm], rank[inverse]
        values = rows[first]
        if axis is None:
            y = values.reshape(count)
        else:
            rest = tuple(np.delete(x.shape, axis))
            y = jnp.moveaxis(values.reshape((count,) + rest), 0, axis)
        return y, first.astype(jnp.int32), inverse, counts.astype(jnp.int32)

    outs = [(y_shape, x.data_type, x.is_bool), ((count,), t), ((along,), t), ((count,), t)]
    return ctx.jax("Unique", fn, [x], outs)
