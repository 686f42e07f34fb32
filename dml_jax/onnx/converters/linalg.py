"""Ops of no other group: Det, as a direct JAX lowering (ONNX Runtime runs it on its CPU
provider); BitCast (opset 26), a reinterpretation of bits, which DirectML expresses between
integer types (CAST keeps the low bits) and not between float and integer types (a JAX node);
TensorScatter (opset 24), the KV-cache update, as SCATTER at indices computed by element-wise
operators."""

from __future__ import annotations

from dataclasses import replace

import jax.numpy as jnp
import numpy as np
from jax import lax

from ...enums import DataType
from ..elements import BOOL, data_type_of
from ..importer import broadcast, packed
from . import converter
from ._common import axis_of, binary_value, cast_value, op, view


@converter("Det", kind="jax")
def _det(ctx, node, inputs):
    (x,) = inputs
    if x.rank < 2 or x.shape[-1] != x.shape[-2]:
        raise ctx.fail(f"input X must end in a square matrix, got shape {list(x.shape)}")
    if not x.data_type.is_float:
        raise ctx.fail(f"input X must be a float tensor, got {x.data_type.name}")
    # LAPACK has no float16: a float16 matrix is widened to float32 and its determinant rounded.
    wide = jnp.float32 if x.data_type is DataType.FLOAT16 else None
    return ctx.jax(
        "Det",
        lambda a: (jnp.linalg.det(a if wide is None else a.astype(wide)),),
        [x],
        [(x.shape[:-2], x.data_type)],
    )


@converter("BitCast")
def _bitcast(ctx, node, inputs):
    """The same bits read as type ``to``: nothing at all between types that are one graph type
    (bool and uint8), CAST between integer types (it keeps the low bits, which are all the bits
    at one width), and a JAX node between float and integer types, which no DirectML operator
    reinterprets. ONNX's 64-bit integers are their low 32 bits in the graph (docs/semantics.md):
    int64 and uint64 reinterpret each other's low halves, and their bits cannot be a double's."""
    (x,) = inputs
    to = ctx.attr("to")
    if to is None:
        raise ctx.fail("attribute 'to' is required")
    t = data_type_of(int(to), f"{ctx.where}: attribute 'to'")
    is_bool = int(to) == BOOL
    if t.bits != x.data_type.bits:
        why = ""
        if DataType.FLOAT64 in (t, x.data_type):
            why = "; ONNX's 64-bit integers are computed in 32 bits (docs/semantics.md)"
        raise ctx.fail(
            f"attribute 'to': {t.name} has {t.bits} bits in the graph, the input "
            f"({x.data_type.name}) {x.data_type.bits}{why}"
        )
    if t == x.data_type:
        return [replace(x, is_bool=is_bool)]
    if not t.is_float and not x.data_type.is_float:
        return [cast_value(ctx, x, t, is_bool=is_bool)]
    dtype = t.numpy_dtype
    return ctx.jax(
        "BitCast", lambda a: (lax.bitcast_convert_type(a, dtype),), [x], [(x.shape, t, is_bool)]
    )


@converter("TensorScatter")
def _tensor_scatter(ctx, node, inputs):
    """The cache with ``update`` written along ``axis`` from each batch entry's write index
    (0 when write_indices is absent; modulo the cache's length in circular mode): SCATTER
    (ScatterElements) at the indices write_indices[b] + s, an ELEMENT_WISE_ADD of the write
    indices broadcast along the batch and a constant 0, 1, ... along ``axis`` (MODULUS_FLOOR
    by the length in circular mode); computed at import when the write indices are known.
    Linear mode with a write index past the cache's end is undefined in ONNX."""
    past, update = inputs[:2]
    writes = inputs[2] if len(inputs) > 2 else None
    r = past.rank
    if r < 2 or update.rank != r:
        raise ctx.fail(
            f"past_cache and update must have one rank >= 2, got shapes {list(past.shape)} and "
            f"{list(update.shape)}"
        )
    axis = axis_of(ctx, ctx.attr("axis", -2), r)
    if axis == 0:
        raise ctx.fail("attribute 'axis' cannot be 0 (the batch dimension)")
    mode = ctx.attr("mode", "linear")
    if mode not in ("linear", "circular"):
        raise ctx.fail(f"attribute 'mode': '{mode}' is not 'linear' or 'circular'")
    if any(p != u for k, (p, u) in enumerate(zip(past.shape, update.shape)) if k != axis) or (
        update.shape[axis] > past.shape[axis]
    ):
        raise ctx.fail(
            f"update {list(update.shape)} must have past_cache's shape {list(past.shape)} except "
            f"a length along axis {axis} of at most {past.shape[axis]}"
        )
    batch, length = past.shape[0], past.shape[axis]
    if writes is not None and tuple(writes.shape) != (batch,):
        raise ctx.fail(f"write_indices must have shape [{batch}], got {list(writes.shape)}")
    if 0 in update.shape:
        return [past]
    along = [1] * r
    along[axis] = update.shape[axis]
    steps = np.arange(update.shape[axis], dtype=np.int64).reshape(along)
    if writes is None or writes.const is not None:
        start = np.zeros(batch, np.int64) if writes is None else writes.const.astype(np.int64)
        index = start.reshape((batch,) + (1,) * (r - 1)) + steps
        if mode == "circular":
            index = index % length
        indices = ctx.constant(np.broadcast_to(index, update.shape).astype(np.int32))
    else:
        start = view(writes, (batch,) + (1,) * (r - 1))  # int64: INT32 in the graph
        t = start.data_type
        shape = update.shape
        step_const = ctx.constant(steps.astype(t.numpy_dtype))
        desc = op("ELEMENT_WISE_ADD")(
            broadcast(start, shape), broadcast(step_const, shape), packed(t, shape)
        )
        indices = ctx.out(ctx.node(desc, [start, step_const]), shape)
        if mode == "circular":
            modulus = ctx.constant(np.asarray(length, t.numpy_dtype))
            indices = binary_value(ctx, "ELEMENT_WISE_MODULUS_FLOOR", indices, modulus)
    data_t = past.data_type
    desc = op("SCATTER")(
        packed(data_t, past.shape),
        packed(indices.data_type, update.shape),
        packed(data_t, update.shape),
        packed(data_t, past.shape),
        axis=axis,
    )
    return [ctx.out(ctx.node(desc, [past, indices, update]), past.shape, is_bool=past.is_bool)]
