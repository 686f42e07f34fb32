"""Commands: ``dispatch`` (with its bindings resolved), ``print``, ``writeFile``, and the
``printInitTemporary`` / ``printExecTemporary`` of a DxDispatch feature branch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..enums import DataType
from . import images
from .bindings import BoundTensor, resolve_bindings
from .context import LoadContext, json_kind, member
from .onnx_dispatch import OnnxDispatchable, onnx_target
from .scalars import parse_data_type


@dataclass
class DispatchCommand:
    path: str
    dispatchable: str
    bindings: dict[str, list[BoundTensor]]
    # What this command runs when it is not the named dispatchable itself (an ONNX model
    # compiled for this command's shapes).
    target: Any = None


@dataclass
class PrintCommand:
    path: str
    resource: str
    verbose: bool


@dataclass
class WriteFileCommand:
    path: str
    resource: str
    target: str
    dimensions: tuple[int, ...] | None


def _check_image_target(ctx: LoadContext, resource: Any, dims: Any, path: str) -> None:
    """What an image ``writeFile`` needs, checked before anything runs (DxDispatch finds out
    when it writes): Pillow, a FLOAT32/FLOAT16 resource and 1, 3 or 4 channels that fit."""
    try:
        images.pillow()
        t = images.check_data_type(resource.data_type)
    except ImportError as e:
        raise ctx.fail(member(path, "targetPath"), str(e)) from None
    except ValueError as e:
        raise ctx.fail(member(path, "resource"), str(e)) from None
    try:
        c, h, w = images.write_size(dims)
    except ValueError as e:
        raise ctx.fail(member(path, "dimensions"), str(e)) from None
    need = images.image_bytes(c, h, w, t)
    if resource.deferred_bytes is None and need > resource.size_in_bytes:
        raise ctx.fail(
            member(path, "dimensions"),
            f"C x H x W = {c} x {h} x {w} needs {need} bytes; '{resource.name}' has "
            f"{resource.size_in_bytes}",
        )


@dataclass
class PrintTemporaryCommand:
    """``printInitTemporary`` / ``printExecTemporary`` (DxDispatch's MHA feature branch): print
    the DirectML temporary buffer of the dispatchables' initialization / of the last dispatch,
    when one exists. A dml-jax dispatchable has none (XLA allocates its own scratch memory), so
    the command prints nothing, as DxDispatch does for an operator that needs no temporary
    buffer. ``dataType`` and ``offset`` are checked and kept."""

    path: str
    which: str  # "init" or "exec"
    data_type: DataType | None
    offset: int


def parse_command(
    ctx: LoadContext,
    i: int,
    obj: Any,
    model_resources: dict,
    dispatchables: dict,
) -> Any:
    path = member("commands", i)
    obj = ctx.object(obj, path)
    kind = ctx.string(ctx.require(obj, "type", path), member(path, "type"))

    def resource_member(key: str) -> str:
        name = ctx.string(ctx.require(obj, key, path), member(path, key))
        if name not in model_resources:
            raise ctx.fail(member(path, key), f"unknown resource '{name}'")
        return name

    if kind.lower() == "dispatch":
        name = ctx.string(ctx.require(obj, "dispatchable", path), member(path, "dispatchable"))
        if name not in dispatchables:
            raise ctx.fail(member(path, "dispatchable"), f"unknown dispatchable '{name}'")
        d = target = dispatchables[name]
        bindings_json = ctx.require(obj, "bindings", path)
        if isinstance(d, OnnxDispatchable):
            d = onnx_target(
                ctx,
                target,
                bindings_json,
                member(path, "bindings"),
                model_resources,
            )
        bindings = resolve_bindings(
            ctx, d, bindings_json, member(path, "bindings"), model_resources
        )
        for point in d.bind_points:
            if point.name in bindings or point.name in d.init_bindings:
                continue
            if all(desc is None for desc in point.descs):
                continue
            raise ctx.fail(
                member(path, "bindings"), f"Nothing bound for required tensor '{point.name}'."
            )
        return DispatchCommand(path, name, bindings, None if d is target else d)
    if kind.lower() == "print":
        verbose = obj.get("verbose", False)
        if not isinstance(verbose, bool):
            raise ctx.fail(
                member(path, "verbose"), f"must be true or false, got {json_kind(verbose)}"
            )
        return PrintCommand(path, resource_member("resource"), verbose)
    if kind.lower() == "writefile":
        res = resource_member("resource")
        target = ctx.string(ctx.require(obj, "targetPath", path), member(path, "targetPath"))
        dims = None
        if "dimensions" in obj:
            dpath = member(path, "dimensions")
            if not isinstance(obj["dimensions"], list):
                raise ctx.fail(
                    dpath, f"must be an array of integers, got {json_kind(obj['dimensions'])}"
                )
            dims = tuple(ctx.uint(v, member(dpath, k)) for k, v in enumerate(obj["dimensions"]))
        if images.is_image(target):
            _check_image_target(ctx, model_resources[res], dims, path)
        return WriteFileCommand(path, res, target, dims)
    if kind.lower() in ("printinittemporary", "printexectemporary"):
        data_type = None
        if "dataType" in obj:
            data_type = parse_data_type(ctx, obj["dataType"], member(path, "dataType"))
        offset = ctx.uint(obj.get("offset", 0), member(path, "offset"))
        return PrintTemporaryCommand(path, kind.lower()[5:9], data_type, offset)
    raise ctx.fail(
        member(path, "type"),
        f"Unrecognized command '{kind}' (expected dispatch, print, writeFile, "
        "printInitTemporary or printExecTemporary)",
    )
