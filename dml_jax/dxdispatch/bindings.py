"""Bindings: which bytes of which resource each bind point's tensors read or write.

DML's buffer binding rules: the byte offset is aligned, and the bytes from it to the end of the
resource hold the tensor's TotalTensorSizeInBytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import registry
from ..enums import TensorFlags
from ..fields import OperatorDesc
from ..tensor import TensorDesc
from .context import LoadContext, json_kind, member
from .dispatchables import Dispatchable
from .resources import Resource

MINIMUM_BUFFER_TENSOR_ALIGNMENT = 16  # DML_MINIMUM_BUFFER_TENSOR_ALIGNMENT


@dataclass(frozen=True)
class BoundTensor:
    """One tensor's view of a resource: bytes ``[offset, size)`` read as the tensor's type.

    Attributes:
        resource: the resource name.
        offset: the byte offset (elementOffset x element size).
        length: entries of the view, ``(resource size - offset) // entry size``; an entry is
            an element, or a byte of two packed elements for UINT4 / INT4 tensors.
        desc: the bind point tensor's desc.
        path: the JSON path of the binding.
    """

    resource: str
    offset: int
    length: int
    desc: TensorDesc
    path: str


def _binding_sources(ctx: LoadContext, value: Any, path: str) -> list[tuple[str, dict, str]]:
    """A binding value -> [(resource name, binding object, path)]."""
    items = value if isinstance(value, list) else [value]
    out = []
    for i, item in enumerate(items):
        where = member(path, i) if isinstance(value, list) else path
        if isinstance(item, str):
            out.append((item, {}, where))
        elif isinstance(item, dict):
            res = ctx.string(ctx.require(item, "name", where), member(where, "name"))
            out.append((res, item, where))
        else:
            raise ctx.fail(
                where,
                'must be a resource name, a binding object {"name": ...} or '
                f"an array of those, got {json_kind(item)}",
            )
    return out


def resolve_bindings(
    ctx: LoadContext,
    dispatchable: Dispatchable,
    bindings: Any,
    path: str,
    resources: dict[str, Resource],
    *,
    initialization: bool = False,
) -> dict[str, list[BoundTensor]]:
    """Checks a ``bindings`` object against the bind points and DML's buffer binding rules.

    Returns:
        bind point name -> one ``BoundTensor`` per tensor; bind points absent from ``bindings``
        are left out (DxDispatch binds them as "no binding"; names it does not know are
        ignored, as DxDispatch does).
    """
    bindings = ctx.object(bindings, path)
    resolved: dict[str, list[BoundTensor]] = {}
    for point in dispatchable.bind_points:
        if point.name not in bindings:
            continue
        where = member(path, point.name)
        sources = _binding_sources(ctx, bindings[point.name], where)
        if len(sources) != len(point.slots):
            raise ctx.fail(
                where,
                f"Bind point '{point.name}' requires {len(point.slots)} "
                f"resources, but {len(sources)} were bound.",
            )
        if initialization and point.role != "input":
            raise ctx.fail(
                where, "only input tensors flagged OWNED_BY_DML are bound at initialization"
            )
        tensors = []
        for (res_name, obj, src_path), desc in zip(sources, point.descs):
            name_path = member(src_path, "name") if obj else src_path
            if res_name not in resources:
                raise ctx.fail(name_path, f"unknown resource '{res_name}'")
            resource = resources[res_name]
            owned = desc is not None and desc.flags is TensorFlags.OWNED_BY_DML
            if owned != initialization and desc is not None:
                raise ctx.fail(
                    src_path,
                    (
                        "this tensor is not flagged OWNED_BY_DML; bind it in the dispatch command"
                        if initialization
                        else "this tensor is flagged OWNED_BY_DML; bind it in the dispatchable's own "
                        "'bindings' (initialization), not in a dispatch command"
                    ),
                )
            tensors.append(_bind_one(ctx, resource, obj, desc, src_path))
        resolved[point.name] = tensors
    if not initialization:
        _check_in_place(ctx, dispatchable, resolved)
    return resolved


def _byte_range(t: BoundTensor) -> tuple[int, int]:
    desc = t.desc
    return t.offset, t.offset + desc.buffer_elements * desc.buffer_dtype.itemsize


def _check_in_place(ctx: LoadContext, dispatchable: Dispatchable, resolved: dict) -> None:
    """An output bound over bytes an input reads needs an operator that executes in place.

    DirectML lets only operators with in-place support (the registry's ``in_place``, from the
    schema) alias an output with an input; for others the result is undefined, so it is an error
    here. Graphs are not checked: DirectML's graph compiler plans their memory itself.
    """
    desc = getattr(dispatchable.op, "desc", None)
    spec = registry.lookup(desc.operator_type) if isinstance(desc, OperatorDesc) else None
    if spec is None or spec.in_place:
        return
    points = {p.name: p.role for p in dispatchable.bind_points}
    inputs = [t for n, ts in resolved.items() if points.get(n) == "input" for t in ts]
    for name, tensors in resolved.items():
        if points.get(name) != "output":
            continue
        for out in tensors:
            lo, hi = _byte_range(out)
            for inp in inputs:
                a, b = _byte_range(inp)
                if inp.resource == out.resource and a < hi and lo < b:
                    raise ctx.fail(
                        out.path,
                        f"binds resource '{out.resource}' over bytes that {inp.path} also reads; "
                        f"{spec.name} does not support in-place execution",
                    )


def _bind_one(
    ctx: LoadContext, resource: Resource, obj: dict, desc: TensorDesc | None, path: str
) -> BoundTensor:
    element_offset = ctx.uint(obj.get("elementOffset", 0), member(path, "elementOffset"))
    if "elementCount" in obj:  # parsed for HLSL; DML bindings ignore it (as DxDispatch does)
        ctx.uint(obj["elementCount"], member(path, "elementCount"))
    if "elementSizeInBytes" in obj:
        element_size = ctx.uint(obj["elementSizeInBytes"], member(path, "elementSizeInBytes"))
    elif resource.data_type is not None:
        element_size = resource.data_type.size
    else:
        element_size = 0
    if element_offset and not element_size:
        raise ctx.fail(
            member(path, "elementOffset"),
            f"resource '{resource.name}' has no data type; give 'elementSizeInBytes' "
            "to use an element offset",
        )
    offset = element_offset * element_size
    if desc is None:  # a graph input that feeds nothing: nothing is read
        return BoundTensor(resource.name, offset, 0, None, path)
    alignment = max(MINIMUM_BUFFER_TENSOR_ALIGNMENT, desc.guaranteed_base_offset_alignment)
    if offset % alignment:
        raise ctx.fail(
            path,
            f"byte offset {offset} (elementOffset {element_offset} x "
            f"{element_size} bytes) into '{resource.name}' must be a multiple "
            f"of {alignment}",
        )
    available = resource.size_in_bytes - offset
    if available < desc.total_tensor_size_in_bytes:
        raise ctx.fail(
            path,
            (
                f"binding out of range: the tensor needs {desc.total_tensor_size_in_bytes} bytes "
                f"(TotalTensorSizeInBytes) but resource '{resource.name}' has "
                f"{max(available, 0)} bytes from byte offset {offset} "
                f"(sizeInBytes {resource.size_in_bytes})"
            ),
        )
    # A 4-bit tensor views the bytes themselves (two elements a byte, buffers.py unpacks them).
    return BoundTensor(resource.name, offset, available // desc.buffer_dtype.itemsize, desc, path)
