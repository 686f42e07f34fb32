"""``run``'s outputs copied to the host (``on_host``; sequences and optionals nested as
onnxruntime gives them, ``nested_result``): from an accelerator, all of them in one copy.

A copy from a GPU to the host costs far more than its bytes: on an H200 host a small array's
copy back took some 150-300 us (an event and a host callback each; the copies of a run's
outputs are all started before any is waited for, and still each pays its own), and a decoder
step has dozens of outputs (its logits and each layer's present keys and values: 33 for a
16-layer model), so ``run`` on a 1B-class LLaMA's step spent milliseconds a token on them
(``benchmarks/experiments/decode_loops_gpu.py``). Where a program runs on an accelerator and
has at least ``PACKED_MIN_OUTPUTS`` outputs, ``run`` calls it through a jitted wrapper that also
packs every output's bytes into one flat buffer (those of larger elements first, so each starts
at a multiple of its element size); the host takes the buffer in one copy and views each output
in it (``Program.jitted_for(platform, packed=True)`` traces ``pack`` after the program's
own outputs; ``host_outputs`` unpacks). The packing is one more pass over the outputs' bytes
on the device (a decoder step's few megabytes: microseconds); on the host the buffer lives as
long as any output viewing it. On the CPU a program's outputs are host memory already.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

# The fewest outputs ``run`` fetches as one packed buffer (fewer: each by its own copy).
PACKED_MIN_OUTPUTS = 2


def packs(platform: str, outputs: int) -> bool:
    """Whether ``run`` fetches a program's ``outputs`` outputs on ``platform`` packed."""
    return platform != "cpu" and outputs >= PACKED_MIN_OUTPUTS


def packs_for(program: Any, platform: str) -> bool:
    """Whether ``run`` fetches ``program``'s outputs on ``platform`` packed (a program on a
    mesh: never; its outputs are gathered from their shards)."""
    return program.layout is None and packs(platform, len(program.imported.output_names))


def on_host(program: Any, outs: Sequence[Any], fetched: bool = False) -> dict[str, Any]:
    """``program``'s outputs ``outs`` as NumPy arrays of their ONNX types, by name: gathered
    from a mesh's shards, or copied from the device (every copy started before any is waited
    for), or as they are where ``fetched`` (``host_outputs``)."""
    imported = program.imported
    if program.layout is not None:
        from .placement import fetch as gathered

        outs = [gathered(y) for y in outs]
    elif not fetched:
        for y in outs:
            y.copy_to_host_async()
        outs = [np.asarray(y) for y in outs]
    typed = zip(imported.output_names, outs, imported.output_dtypes)
    return {name: np.asarray(y).astype(dtype, copy=False) for name, y, dtype in typed}


def nested_result(result: dict, imported: Any) -> dict:
    """The results with each sequence output as a list of arrays and each optional output as
    its value or None, as onnxruntime returns them."""
    for kind, name, layout in imported.layouts:
        if kind != "output":
            continue
        if isinstance(layout, list):
            result[name] = [result.pop(n) for n in layout]
        else:
            result[name] = None if layout is None else result.pop(layout)
    return result


def _signature(args: Sequence[Any]) -> tuple:
    """The arguments' shapes and types as a trace sees them."""
    canonical = jax.dtypes.canonicalize_dtype
    return (bool(jax.config.read("jax_enable_x64")),) + tuple(
        None if a is None else (tuple(a.shape), np.dtype(canonical(a.dtype))) for a in args
    )


def _stored(dtype: Any) -> np.dtype:
    """The type whose bytes hold a ``dtype`` element in the packed buffer: ``dtype`` itself, or
    for elements narrower than a byte (int4, uint4, float4) one that holds each exactly."""
    dtype = np.dtype(dtype)
    if jax.dtypes.itemsize_bits(dtype) >= 8:
        return dtype
    if jnp.issubdtype(dtype, jnp.signedinteger):
        return np.dtype(np.int8)
    return np.dtype(np.uint8 if jnp.issubdtype(dtype, jnp.unsignedinteger) else np.float16)


def _as_bytes(y: Any) -> Any:
    """``y``'s elements as a flat array of bytes (booleans as 0 and 1)."""
    if y.dtype == jnp.bool_:
        y = y.astype(jnp.uint8)
    elif _stored(y.dtype) != y.dtype:
        y = y.astype(_stored(y.dtype))
    if y.dtype != jnp.uint8:
        y = lax.bitcast_convert_type(y, jnp.uint8)
    return y.reshape(-1)


def pack(outs: Sequence[Any], inputs: Sequence[Any], layouts: dict) -> Any:
    """Inside a trace: ``outs``' bytes as one flat uint8 buffer, those of larger elements
    first; records in ``layouts``, by the inputs' signature, where each output is in it."""
    present = [k for k, y in enumerate(outs) if y is not None]
    order = sorted(present, key=lambda k: -_stored(outs[k].dtype).itemsize)
    layouts[_signature(inputs)] = (
        len(outs),
        [(k, tuple(outs[k].shape), np.dtype(outs[k].dtype)) for k in order],
    )
    if not order:
        return jnp.zeros((0,), jnp.uint8)
    return jnp.concatenate([_as_bytes(outs[k]) for k in order])


def host_outputs(packed: Any, layouts: dict, params: Any, args: Sequence[Any]) -> list:
    """The outputs of ``packed(params, *args)`` (a jitted function whose trace calls ``pack``
    with ``layouts``) on the host, in one copy: a list of NumPy arrays, each a view of the
    buffer (None where an output is None)."""
    buffer = np.asarray(packed(params, *args))
    key = _signature(args)
    if key not in layouts:  # a trace JAX found by a key of its own: traced again
        jax.eval_shape(packed, params, *args)
    count, layout = layouts[key]
    outs: list = [None] * count
    offset = 0
    for k, shape, dtype in layout:
        stored = _stored(dtype)
        size = int(np.prod(shape, dtype=np.int64)) * stored.itemsize
        outs[k] = buffer[offset : offset + size].view(stored).reshape(shape)
        if stored != dtype:
            outs[k] = outs[k].astype(dtype)
        offset += size
    return outs


__all__ = ["PACKED_MIN_OUTPUTS", "host_outputs", "nested_result", "on_host", "pack", "packs",
           "packs_for"]  # fmt: skip
