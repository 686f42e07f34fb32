"""``load_model``: a model file read, checked and compiled, before anything runs."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ..enums import TensorFlags
from .bindings import resolve_bindings
from .commands import DispatchCommand, WriteFileCommand, parse_command
from .context import LoadContext, json_kind, member
from .dispatchables import Dispatchable, parse_dispatchable
from .jsonc import parse_json_text
from .onnx_dispatch import ONNX_KIND, parse_onnx_dispatchable
from .resources import Resource, parse_resource
from .serialized_graph import SERIALIZED_GRAPH_KIND, parse_serialized_graph_dispatchable


@dataclass
class Model:
    """A parsed, checked model: resources, compiled dispatchables, resolved commands."""

    file: str
    resources: dict[str, Resource]
    dispatchables: dict[str, Dispatchable]
    commands: list


def load_model(
    file: str,
    *,
    feature_level: Any = None,
    text: str | None = None,
    max_memory: int | None = None,
    allow_outside_paths: bool = False,
    overwrite: bool = False,
) -> Model:
    """Reads, checks and compiles a model file.

    Args:
        file: the model path (also used in error messages).
        feature_level: the DML feature level operators are validated at (None: newest).
        text: the JSON text, when already read.
        max_memory: bytes the resources (and each dispatch's tensors next to them) may use;
            checked before anything is allocated. None: no limit.
        allow_outside_paths: let ``sourcePath`` and ``targetPath`` resolve outside the model's
            folder.
        overwrite: let ``writeFile`` replace existing files.

    Raises:
        ModelError: for any problem, naming ``file`` and the JSON path.
    """
    model_dir = os.path.dirname(os.path.abspath(file))
    ctx = LoadContext(file, max_memory, allow_outside_paths, model_dir)
    if text is None:
        try:
            if max_memory is not None and os.path.getsize(file) > max_memory:
                raise ctx.fail(
                    "",
                    f"the model file is {os.path.getsize(file)} bytes, more than "
                    f"the memory budget of {max_memory} bytes (--max-memory)",
                )
            with open(file, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise ctx.fail("", f"cannot read the model: {e}") from None
    root = ctx.object(parse_json_text(text, file), "")
    for key in ("resources", "dispatchables", "commands"):
        ctx.require(root, key, "")

    resources = {}
    for name, obj in ctx.object(root["resources"], "resources").items():
        resources[name] = parse_resource(ctx, name, obj, model_dir)

    dispatchables = {}
    for name, obj in ctx.object(root["dispatchables"], "dispatchables").items():
        path = member("dispatchables", name)
        kind = ctx.object(obj, path).get("type")
        if isinstance(kind, str) and kind.lower() == ONNX_KIND:
            dispatchables[name] = parse_onnx_dispatchable(ctx, name, obj, path, feature_level)
            continue
        if isinstance(kind, str) and kind.lower() == SERIALIZED_GRAPH_KIND:
            dispatchables[name] = parse_serialized_graph_dispatchable(
                ctx, name, obj, path, feature_level
            )
            continue
        d = parse_dispatchable(ctx, name, obj, feature_level)
        path = d.path
        if "bindings" in obj:
            d.init_bindings = resolve_bindings(
                ctx, d, obj["bindings"], member(path, "bindings"), resources, initialization=True
            )
        for point in d.bind_points:
            owned = [
                desc
                for desc in point.descs
                if desc is not None and desc.flags is TensorFlags.OWNED_BY_DML
            ]
            if owned and point.name not in d.init_bindings:
                raise ctx.fail(
                    member(path, "bindings"),
                    f"'{point.name}' is flagged OWNED_BY_DML and must be bound here "
                    "(at initialization)",
                )
        dispatchables[name] = d

    commands_json = root["commands"]
    if not isinstance(commands_json, list):
        raise ctx.fail("commands", f"must be a JSON array, got {json_kind(commands_json)}")
    commands = [
        parse_command(ctx, i, c, resources, dispatchables) for i, c in enumerate(commands_json)
    ]
    _check_commands(ctx, commands, dispatchables, overwrite)
    return Model(file, resources, dispatchables, commands)


def _check_commands(ctx: LoadContext, commands: list, dispatchables: dict, overwrite: bool) -> None:
    """Limits checked before anything runs: each dispatch's tensors fit the memory budget
    next to the resources, and writeFile targets stay in the model's folder and overwrite
    nothing (unless allowed)."""
    targets: set[str] = set()
    for command in commands:
        if isinstance(command, DispatchCommand) and ctx.max_memory is not None:
            op = (command.target or dispatchables[command.dispatchable]).op
            tensors = tuple(getattr(op, "input_descs", ())) + tuple(getattr(op, "output_descs", ()))
            # Logical sizes: a broadcast (stride 0) input may be far larger than its buffer.
            working = sum(t.element_count * t.data_type.size for t in tensors if t is not None)
            if ctx.allocated + working > ctx.max_memory:
                raise ctx.fail(
                    command.path,
                    f"the dispatch works on {working} bytes of tensors "
                    f"next to {ctx.allocated} bytes of resources, more "
                    f"than the memory budget of {ctx.max_memory} bytes "
                    "(--max-memory)",
                )
        if isinstance(command, WriteFileCommand):
            where = member(command.path, "targetPath")
            ctx.inside_model_dir(command.target, where, "targetPath")
            real = os.path.realpath(command.target)
            if os.path.isdir(real):
                raise ctx.fail(where, f"'{command.target}' is a directory")
            if not overwrite and (os.path.lexists(command.target) or real in targets):
                raise ctx.fail(
                    where,
                    f"'{command.target}' already exists or is written by an "
                    "earlier command; it is not overwritten without "
                    "--overwrite",
                )
            targets.add(real)
