"""``dmlSerializedGraph`` dispatchables: a DirectML serialized graph file
(``dml_jax.formats.dml_serialized`` reads it into a ``GraphDesc``), compiled and bound by the names
of its graph inputs and outputs; its constants feed themselves."""

from __future__ import annotations

import os
from typing import Any

import jax.numpy as jnp
import numpy as np

from ..errors import ValidationError
from ..formats.dml_serialized import load_serialized_graph
from ..graph import compile_graph
from ..tensor import unpack_4bit
from .context import LoadContext, member
from .dispatchables import BindPoint, Dispatchable
from .resources import find_file

SERIALIZED_GRAPH_KIND = "dmlserializedgraph"


class _BoundConstants:
    """A compiled graph seen through its named inputs: constants are fed from their bytes."""

    def __init__(self, compiled: Any, named: int, constants: dict[int, np.ndarray]):
        from ..buffers import read_tensor

        self.name = compiled.name
        self.input_paths = compiled.input_paths[:named]
        self.input_descs = compiled.input_descs[:named]
        self.output_paths, self.output_descs = compiled.output_paths, compiled.output_descs
        self._buffer_fn = None
        count = len(compiled.input_descs)

        def fn(*arrays):
            full = list(arrays) + [None] * (count - named)
            for i, buf in constants.items():
                desc = compiled.input_descs[i]
                full[i] = None if desc is None else read_tensor(jnp.asarray(buf), desc)
            return compiled.fn(*full)

        self.fn = fn


def parse_serialized_graph_dispatchable(
    ctx: LoadContext, name: str, obj: dict, path: str, feature_level: Any
) -> Dispatchable:
    """One ``dmlSerializedGraph`` dispatchable: the .bin file read, converted and compiled."""
    src_path = member(path, "sourcePath")
    source = ctx.string(ctx.require(obj, "sourcePath", path), src_path)
    file = find_file(ctx, source, ctx.model_dir, src_path)
    if obj.get("bindings"):
        raise ctx.fail(
            member(path, "bindings"),
            "serialized graphs take no initialization bindings (their constants come from files)",
        )

    def read(path: str) -> bytes:
        ctx.reserve(os.path.getsize(path), src_path, "files")
        with open(path, "rb") as f:
            return f.read()

    def check(path: str) -> str:
        return ctx.inside_model_dir(path, src_path, "constant file")

    try:
        loaded = load_serialized_graph(file, read=read, check_constant_path=check)
        converted = loaded.converted
        compiled = compile_graph(converted.graph, feature_level)
    except ValidationError as e:
        raise ctx.fail(src_path, str(e)) from None
    named = len(converted.input_names)
    buffers: dict[int, np.ndarray] = {}
    for index, inline in loaded.constants.items():
        desc = compiled.input_descs[index]
        if desc is None:
            continue
        size = desc.data_type.size
        if desc.data_type.bits == 4:  # two a byte, element 0 in the low nibble
            values = unpack_4bit(np.frombuffer(inline, np.uint8), 2 * len(inline), desc.data_type)
        else:
            values = np.frombuffer(
                inline[: len(inline) // size * size], desc.dtype.newbyteorder("<")
            )
        if values.size < desc.addressed_elements:
            node_name = converted.constants[index][0]
            raise ctx.fail(
                src_path,
                f"constant '{node_name}' holds {len(inline)} bytes; its tensor needs "
                f"{-(-desc.addressed_elements * desc.data_type.bits // 8)}",
            )
        buffers[index] = values.astype(desc.dtype)
    op = _BoundConstants(compiled, named, buffers)
    points = tuple(
        BindPoint(n, "input", (i,), (op.input_descs[i],))
        for i, n in enumerate(converted.input_names)
        if n
    ) + tuple(
        BindPoint(n, "output", (i,), (op.output_descs[i],))
        for i, n in enumerate(converted.output_names)
        if n
    )
    # ``op`` takes the named graph inputs only; the constants are its own.
    return Dispatchable(name, path, op, "dmlSerializedGraph", points)
