"""One dispatch command compiled into one XLA program over the bound resources' bytes.

A dispatch views each bound resource's bytes, from the binding's byte offset, as the bind point
tensor's data type (a bit-for-bit reinterpretation, as on a GPU), runs the operator in buffer
mode (strides, broadcasting, padding) and writes the output buffers back into the bytes; a
resource bound as both input and output is updated in place.
"""

from __future__ import annotations

import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..buffers import buffer_function, pack_4bit_buffer, unpack_4bit_buffer
from ..errors import ValidationError
from ..tensor import TensorDesc
from .bindings import BoundTensor
from .commands import DispatchCommand
from .context import ModelError
from .load import Model


def _view(jnp_bytes: Any, offset: int, length: int, dtype: np.dtype) -> Any:
    """Bytes ``[offset, offset + length * itemsize)`` reinterpreted as ``length`` elements."""
    size = dtype.itemsize
    seg = lax.slice(jnp_bytes, (offset,), (offset + length * size,))
    if size == 1:
        return lax.bitcast_convert_type(seg, dtype)
    return lax.bitcast_convert_type(seg.reshape(length, size), dtype)


def _to_bytes(array: Any) -> Any:
    out = lax.bitcast_convert_type(array, jnp.uint8)
    return out.reshape(-1)


def _merge(mask, new, old, desc: TensorDesc):
    """``new`` where ``mask`` (one flag per element) holds, ``old`` elsewhere; 4-bit views are
    bytes, merged nibble by nibble (two outputs may share a byte)."""
    if desc.data_type.bits != 4:
        return jnp.where(mask, new, old)
    t = desc.data_type
    merged = jnp.where(mask, unpack_4bit_buffer(new, t), unpack_4bit_buffer(old, t))
    return pack_4bit_buffer(merged)


def _addressed_mask(desc: TensorDesc, length: int) -> np.ndarray:
    """Which elements of a view the desc addresses (static: derived from sizes and strides);
    ``length`` counts a 4-bit view's bytes, the mask its elements (two a byte)."""
    if desc.data_type.bits == 4:
        length *= 2
    index = np.zeros((), np.int64)
    for n, s in zip(desc.sizes, desc.layout_strides):
        index = index[..., None] + np.arange(n, dtype=np.int64) * s
    mask = np.zeros(length, bool)
    mask[index.reshape(-1)] = True
    return mask


class DispatchPlan:
    """One dispatch command compiled into one XLA program over the bound resources' bytes."""

    def __init__(self, model: Model, command: DispatchCommand, device: Any):
        d = command.target or model.dispatchables[command.dispatchable]
        self.name = d.name
        op = d.op
        n_in, n_out = len(op.input_descs), len(op.output_descs)
        inputs: list[BoundTensor | None] = [None] * n_in
        outputs: list[BoundTensor | None] = [None] * n_out
        snapshot: dict[int, BoundTensor] = {}
        for point in d.bind_points:
            bound = command.bindings.get(point.name)
            from_init = bound is None and point.name in d.init_bindings
            if from_init:
                bound = d.init_bindings[point.name]
            if bound is None:
                continue
            for slot, b in zip(point.slots, bound):
                if point.role == "input":
                    inputs[slot] = b
                    if from_init:
                        snapshot[slot] = b
                else:
                    outputs[slot] = b
        # Resources the program reads (inputs, outputs' old contents) and the ones it returns.
        names = []
        for b in inputs + outputs:
            if b is not None and b.resource not in names:
                names.append(b.resource)
        self.resources = tuple(names)
        self.written = tuple(dict.fromkeys(b.resource for b in outputs))
        index = {n: i for i, n in enumerate(names)}
        shared = {n for n in self.written if sum(b.resource == n for b in outputs) > 1}
        masks = {
            j: _addressed_mask(b.desc, b.length)
            for j, b in enumerate(outputs)
            if b.resource in shared
        }
        fn = buffer_function(op)

        def program(*buffers):
            views_in = []
            for i, b in enumerate(inputs):
                if b is None or b.desc is None:
                    # A graph input that feeds nothing: any placeholder will do.
                    views_in.append(jnp.zeros((1,), jnp.uint8))
                else:
                    views_in.append(
                        _view(buffers[index[b.resource]], b.offset, b.length, b.desc.buffer_dtype)
                    )
            views_out = [
                _view(buffers[index[b.resource]], b.offset, b.length, b.desc.buffer_dtype)
                for b in outputs
            ]
            results = fn(*views_in, *views_out)
            state = list(buffers)
            for j, (b, new) in enumerate(zip(outputs, results)):
                k = index[b.resource]
                if j in masks:
                    # Several outputs share this resource: write only what this one addresses,
                    # so one output's untouched elements do not undo another's results.
                    old_view = _view(state[k], b.offset, b.length, b.desc.buffer_dtype)
                    new = _merge(jnp.asarray(masks[j]), new, old_view, b.desc)
                state[k] = jax.lax.dynamic_update_slice(state[k], _to_bytes(new), (b.offset,))
            return tuple(state[index[n]] for n in self.written)

        shapes = [
            jax.ShapeDtypeStruct(
                (model.resources[n].size_in_bytes,),
                jnp.uint8,
                sharding=jax.sharding.SingleDeviceSharding(device),
            )
            for n in names
        ]
        start = time.perf_counter()
        self.compiled = jax.jit(program).lower(*shapes).compile()
        self.compile_ms = (time.perf_counter() - start) * 1000
        self.snapshot_resources = {inputs[s].resource for s in snapshot}
        self.bytes_moved = sum(
            -(-b.desc.element_count * b.desc.data_type.bits // 8)
            for b in inputs + outputs
            if b is not None and b.desc is not None
        )


def compile_plan(model: Model, command: DispatchCommand, device: Any) -> DispatchPlan:
    try:
        return DispatchPlan(model, command, device)
    except ValidationError as e:
        raise ModelError(model.file, command.path, str(e)) from None
    except (RuntimeError, MemoryError) as e:  # XLA refusing to compile or to allocate
        raise ModelError(model.file, command.path, f"Dispatch cannot be compiled: {e}") from None
