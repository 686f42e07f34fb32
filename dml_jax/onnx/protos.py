"""Reading ONNX protos: a graph input's declared shape and its free dimensions, a TensorProto's
value (external data mapped or read from the model's folder) after checking it, and a model's
opsets. What the import walk and the session read from the model file."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import ValidationError
from .elements import ONNX, TYPE_NAMES, data_type_of, numpy_dtype_of


def dims_of(type_proto: Any) -> list[int | str | None]:
    """An input's declared shape: ints, ``dim_param`` names, None for unnamed dims."""
    out: list[int | str | None] = []
    for d in type_proto.tensor_type.shape.dim:
        if d.HasField("dim_value"):
            out.append(int(d.dim_value))
        elif d.dim_param:
            out.append(d.dim_param)
        else:
            out.append(None)
    return out


def shape_of(type_proto: Any, name: str, free: Mapping[str, int], given: Sequence[int] | None):
    tensor = type_proto.tensor_type
    if given is not None:
        return tuple(int(d) for d in given)
    if not tensor.HasField("shape"):
        raise ValidationError(
            f"{ONNX}: input '{name}' has no shape in the model; give its shape (input shapes)"
        )
    dims = []
    for i, d in enumerate(tensor.shape.dim):
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        elif d.dim_param and d.dim_param in free:
            dims.append(int(free[d.dim_param]))
        elif d.denotation and d.denotation.upper() in free:
            dims.append(int(free[d.denotation.upper()]))
        else:
            label = f"'{d.dim_param}'" if d.dim_param else "an unnamed dimension"
            raise ValidationError(
                f"{ONNX}: input '{name}': dimension {i} is {label}; give its size "
                "(free dimension overrides or an input shape)"
            )
    return tuple(dims)


def array_of(tensor: Any, base_dir: str | None = None, where: str | None = None) -> np.ndarray:
    """A TensorProto's value (external data from ``base_dir``: mapped where ``mapped_external``
    can, else read), checked before it is read (``check_tensor``): what is wrong with the
    tensor is a ``ValidationError`` naming ``where`` (default: the initializer)."""
    from onnx import external_data_helper, numpy_helper

    where = where or f"initializer '{tensor.name}'"
    check_tensor(tensor, where)
    if external_data_helper.uses_external_data(tensor):
        mapped = mapped_external(tensor, base_dir)
        if mapped is not None:
            return mapped
        try:
            external_data_helper.load_external_data_for_tensor(tensor, base_dir or "")
        except Exception as e:  # noqa: BLE001 - onnx's checks and the OS raise many kinds
            reason = getattr(e, "strerror", None) or str(e).splitlines()[0]
            raise ValidationError(
                f"{ONNX}: {where}: cannot be read from its external data ({reason})"
            ) from None
        check_tensor(tensor, where)  # the bytes read against the dims
    return numpy_helper.to_array(tensor)


def _packed_count(elem: int, count: int) -> int:
    """How many stored units (bytes of raw_data, entries of a typed field) hold ``count``
    elements of ONNX type ``elem``: 4-bit types pack two to a unit, 2-bit types four."""
    if elem in (21, 22, 23):
        return (count + 1) // 2
    if elem in (25, 26):
        return (count + 3) // 4
    return count


def check_tensor(tensor: Any, where: str, values: bool = True) -> None:
    """A TensorProto's data type, dims and (with ``values``) stored values, checked before
    anything reads them: a data type ONNX defines and DML holds, dims that are sizes, and as
    many stored values (``raw_data``'s bytes, or entries of the field its type is stored in) as
    the dims hold, as ONNX Runtime requires. External data is checked once read."""
    from onnx import TensorProto, helper

    if tensor.HasField("segment"):
        raise ValidationError(f"{ONNX}: {where}: segmented tensors are not supported")
    elem = int(tensor.data_type)
    if elem == TensorProto.UNDEFINED:
        raise ValidationError(f"{ONNX}: {where}: the tensor has no data type (UNDEFINED)")
    if elem not in TensorProto.DataType.values():
        raise ValidationError(
            f"{ONNX}: {where}: the tensor has data type {elem}, which ONNX does not define"
        )
    data_type_of(elem, where)
    dims = [int(d) for d in tensor.dims]
    if any(d < 0 for d in dims):
        raise ValidationError(f"{ONNX}: {where}: dims {dims} hold a negative size")
    count = math.prod(dims)
    name = TYPE_NAMES[elem]
    if not values or tensor.data_location == TensorProto.EXTERNAL:
        return
    if tensor.HasField("raw_data"):
        need = _packed_count(elem, count) * numpy_dtype_of(elem, where).itemsize
        if len(tensor.raw_data) != need:
            raise ValidationError(
                f"{ONNX}: {where}: raw_data holds {len(tensor.raw_data)} bytes; dims {dims} of "
                f"{name} need {need}"
            )
        return
    field = helper.tensor_dtype_to_field(elem)
    have = len(getattr(tensor, field))
    need = _packed_count(elem, count)
    if have != need:
        raise ValidationError(
            f"{ONNX}: {where}: dims {dims} hold {count} {name} elements, but its {field} "
            f"holds {have} values"
        )


# Element types whose external data is the NumPy array's own bytes (little-endian, packed).
_MAPPABLE = {1: "<f4", 2: "u1", 3: "i1", 4: "<u2", 5: "<i2", 6: "<i4", 7: "<i8", 9: "?",
             10: "<f2", 11: "<f8", 12: "<u4", 13: "<u8"}  # fmt: skip


def mapped_external(tensor: Any, base_dir: str | None) -> np.ndarray | None:
    """A tensor's external data as a copy-on-write memory map, or None where it is not plainly
    one file range of the tensor's packed bytes (onnx's loader then reads it, and reports what
    is wrong). Pages are read when used: a sharded session places each device's block of a
    weight (``placement.place``), so a process reads only its own devices' parts of the file."""
    import os
    import sys

    from onnx import external_data_helper

    dtype = _MAPPABLE.get(tensor.data_type)
    shape = tuple(int(d) for d in tensor.dims)
    if dtype is None or sys.byteorder != "little" or not shape or 0 in shape:
        return None
    try:
        info = external_data_helper.ExternalDataInfo(tensor)
    except ValueError:
        return None
    location = info.location
    # Only a file inside base_dir, as onnx's own loader allows.
    if not location or os.path.isabs(location) or ".." in location.replace("\\", "/").split("/"):
        return None
    root = os.path.realpath(base_dir or ".")
    path = os.path.realpath(os.path.join(root, location))
    if os.path.commonpath([root, path]) != root or not os.path.isfile(path):
        return None
    offset = info.offset or 0
    nbytes = math.prod(shape) * np.dtype(dtype).itemsize
    if (info.length is not None and info.length != nbytes) or os.path.getsize(
        path
    ) < offset + nbytes:
        return None
    return np.memmap(path, dtype=np.dtype(dtype), mode="c", offset=offset, shape=shape)


def opsets_of(model: Any) -> dict[str, int]:
    """The model's opset per domain ("" for ai.onnx)."""
    out: dict[str, int] = {}
    for o in model.opset_import:
        domain = "" if o.domain in ("", "ai.onnx") else o.domain
        out[domain] = max(out.get(domain, 0), int(o.version))
    out.setdefault("", 1)
    return out


def where_of(i: int, node: Any) -> str:
    if node.name:
        return f"node {i} ('{node.name}', {node.op_type})"
    return f"node {i} ({node.op_type})"


def element_count(shape: Sequence[int]) -> int:
    return math.prod(shape)
