"""Readers for the DxDispatch JSON spelling of DML values: tensor descs, flags, FLOATs, scalar
unions and DML_SCALE_BIAS. Every error is a ``ValidationError`` that names the JSON member path.
Operator-level parsing (which members a dispatchable has) lives in ``jsonmodel``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .enums import DataType, TensorFlags
from .errors import UINT64_MAX, ValidationError, as_int, as_int_tuple, to_python_float
from .tensor import ScaleBias, TensorDesc, calc_buffer_tensor_size

_TENSOR_TYPE_PREFIX = "DML_TENSOR_TYPE_"
_BUFFER_KEYS = (
    "DataType",
    "Flags",
    "DimensionCount",
    "Sizes",
    "Strides",
    "TotalTensorSizeInBytes",
    "GuaranteedBaseOffsetAlignment",
)

# DML_SCALAR_UNION members, and the member that holds each data type. DirectML has no float16
# member: a FLOAT16 scalar is its binary16 bit pattern, written through UInt16.
_UNION_MEMBER = {
    DataType.FLOAT32: "Float32",
    DataType.FLOAT64: "Float64",
    DataType.FLOAT16: "UInt16",
    DataType.INT8: "Int8",
    DataType.UINT8: "UInt8",
    DataType.INT16: "Int16",
    DataType.UINT16: "UInt16",
    DataType.INT32: "Int32",
    DataType.UINT32: "UInt32",
    DataType.INT64: "Int64",
    DataType.UINT64: "UInt64",
}
_UNION_MEMBERS = (
    "Bytes",
    "Int8",
    "UInt8",
    "Int16",
    "UInt16",
    "Int32",
    "UInt32",
    "Int64",
    "UInt64",
    "Float32",
    "Float64",
)
_UNION_INT_DTYPES = {
    "Int8": np.int8,
    "UInt8": np.uint8,
    "Int16": np.int16,
    "UInt16": np.uint16,
    "Int32": np.int32,
    "UInt32": np.uint32,
    "Int64": np.int64,
    "UInt64": np.uint64,
}


def tensor_desc_from_json(obj: Any, where: str) -> TensorDesc:
    """Builds a ``TensorDesc`` from a DxDispatch DML_TENSOR_DESC object.

    Nested ``{"Type": "DML_TENSOR_TYPE_BUFFER" | "BUFFER", "Desc": {...}}`` or flat (the buffer
    members directly; a ``Desc`` key switches to nested). Defaults: Type BUFFER, Flags NONE
    (a name or an array of names, OR'ed), DimensionCount the length of Sizes (must equal it
    when given), Strides null (omitted, null or ``[]``), TotalTensorSizeInBytes derived (omitted,
    null or 0), GuaranteedBaseOffsetAlignment 0.

    Args:
        obj: the JSON value.
        where: the location used in messages, e.g. ``"DML_OPERATOR_SPLIT: desc.InputTensor"``.

    Raises:
        ValidationError: ``<where>.<member> ...`` for any malformed or inconsistent member.
    """
    if not isinstance(obj, dict):
        raise ValidationError(f"{where} must be a JSON object (a DML_TENSOR_DESC), got {show(obj)}")
    if "Type" in obj:
        _tensor_type(obj["Type"], f"{where}.Type")
    if "Desc" in obj:
        extra = [k for k in obj if k not in ("Type", "Desc")]
        if extra:
            raise ValidationError(
                f"{where} has unknown member {extra[0]!r}; a nested DML_TENSOR_DESC holds only "
                "Type and Desc"
            )
        where, obj = f"{where}.Desc", obj["Desc"]
        if not isinstance(obj, dict):
            raise ValidationError(f"{where} must be a JSON object, got {show(obj)}")
        allowed = _BUFFER_KEYS
    else:
        allowed = ("Type",) + _BUFFER_KEYS
    no_extra(obj, allowed, where, "DML_BUFFER_TENSOR_DESC")
    for key in ("DataType", "Sizes"):
        if obj.get(key) is None:
            raise ValidationError(f"{where}.{key} is required")
    data_type = DataType.parse(obj["DataType"], f"{where}.DataType")
    sizes = as_int_tuple(obj["Sizes"], f"{where}.Sizes", minimum=1)
    count = obj.get("DimensionCount")
    if count is not None:
        count = as_int(count, f"{where}.DimensionCount")
        if count != len(sizes):
            raise ValidationError(
                f"{where}.DimensionCount must equal the length of Sizes ({len(sizes)}), got {count}"
            )
    strides = obj.get("Strides")
    # DxDispatch treats an empty Strides array like an absent one: packed row-major.
    if strides is not None and not (isinstance(strides, list) and not strides):
        strides = as_int_tuple(strides, f"{where}.Strides")
    else:
        strides = None
    total = obj.get("TotalTensorSizeInBytes")
    if total is not None:
        # 0 asks for DMLCalcBufferTensorSize, as DxDispatch does.
        total = as_int(total, f"{where}.TotalTensorSizeInBytes", maximum=UINT64_MAX) or None
    align = obj.get("GuaranteedBaseOffsetAlignment", 0)
    align = as_int(0 if align is None else align, f"{where}.GuaranteedBaseOffsetAlignment")
    flags = tensor_flags_from_json(obj.get("Flags", "NONE"), f"{where}.Flags")
    return _located(TensorDesc, "TensorDesc", where, data_type, sizes, strides, total, align, flags)


def tensor_flags_from_json(value: Any, where: str) -> TensorFlags:
    """DML_TENSOR_FLAGS: a flag name or an array of names (full or abbreviated), OR'ed."""
    if value is None:
        return TensorFlags.NONE
    names = value if isinstance(value, list) else [value]
    bits = 0
    for i, name in enumerate(names):
        path = f"{where}[{i}]" if isinstance(value, list) else where
        if not isinstance(name, str):
            raise ValidationError(f"{path} must be a DML_TENSOR_FLAGS name, got {show(name)}")
        bits |= TensorFlags.parse(name, path).value
    return TensorFlags(bits)


def json_float(value: Any, where: str) -> float:
    """A DML FLOAT from JSON: a number, or "nan", "inf", "-inf" in any case."""
    if isinstance(value, str) and value.lower() in ("nan", "inf", "-inf"):
        return float(value.lower())
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValidationError(
            f"{where} must be a number (or 'nan', 'inf', '-inf'), got {show(value)}"
        )
    return to_python_float(value, where)


def scalar_union_from_json(value: Any, data_type: DataType, where: str) -> int | float:
    """A DML_SCALAR_UNION read in ``data_type``, as the Python number the descriptors store.

    A plain number (or a "nan"/"inf"/"-inf" string for float types) is taken as is; the
    descriptor's validation checks it fits ``data_type``. An object names exactly one union
    member, which must be the one ``data_type`` uses (``UInt16`` holds FLOAT16 as its raw
    binary16 bits); ``{"Bytes": [8 bytes]}`` gives the union's little-endian bytes.
    """
    if data_type.bits < 8:
        raise ValidationError(
            f"{where} cannot be read in {data_type.name}: DML_SCALAR_UNION has no 4-bit member"
        )
    if not isinstance(value, dict):
        if data_type.is_float:
            return json_float(value, where)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValidationError(f"{where} must be a number, got {show(value)}")
        return value
    if len(value) != 1:
        raise ValidationError(
            f"{where} must name exactly one DML_SCALAR_UNION member ({', '.join(_UNION_MEMBERS)}), "
            f"got {sorted(value)}"
        )
    ((member, raw),) = value.items()
    path = f"{where}.{member}"
    expected = _UNION_MEMBER[data_type]
    if member == "Bytes":
        return _union_from_bytes(raw, data_type, path)
    if member not in _UNION_MEMBERS:
        raise ValidationError(
            f"{where} has unknown DML_SCALAR_UNION member {member!r}; members: "
            f"{', '.join(_UNION_MEMBERS)}"
        )
    if member != expected:
        raise ValidationError(
            f"{where} gives union member {member} but the data type is {data_type.name}, which is "
            f"read from {expected}"
        )
    if member in ("Float32", "Float64"):
        return json_float(raw, path)
    info = np.iinfo(_UNION_INT_DTYPES[member])
    whole = as_int(raw, path, minimum=int(info.min), maximum=int(info.max))
    if data_type is DataType.FLOAT16:
        return float(np.array(whole, np.uint16).view(np.float16))
    return whole


def _union_from_bytes(raw: Any, data_type: DataType, where: str) -> int | float:
    data = as_int_tuple(raw, where, maximum=255)
    if len(data) != 8:
        raise ValidationError(f"{where} must hold the union's 8 bytes, got {len(data)}")
    value = np.frombuffer(bytes(data[: data_type.size]), data_type.numpy_dtype)[0]
    return float(value) if data_type.is_float else int(value)


def scale_bias_from_json(value: Any, where: str) -> ScaleBias:
    if not isinstance(value, dict):
        raise ValidationError(f"{where} must be a JSON object {{Scale, Bias}}, got {show(value)}")
    no_extra(value, ("Scale", "Bias"), where, "DML_SCALE_BIAS")
    args = []
    for key in ("Scale", "Bias"):
        if key not in value:
            raise ValidationError(f"{where}.{key} is required")
        args.append(json_float(value[key], f"{where}.{key}"))
    return _located(ScaleBias, "ScaleBias", where, *args)


def _located(cls: type, struct: str, where: str, *args: Any) -> Any:
    """``cls(*args)``; its errors name its own fields (``TensorDesc.Sizes[1] ...``), so they
    are said again at their place in the JSON."""
    try:
        return cls(*args)
    except ValidationError as e:
        message = str(e)
        if message.startswith(f"{struct}."):
            message = f"{where}.{message[len(struct) + 1 :]}"
        raise ValidationError(message) from None


def _tensor_type(value: Any, where: str) -> None:
    name = (
        value[len(_TENSOR_TYPE_PREFIX) :]
        if isinstance(value, str) and value.startswith(_TENSOR_TYPE_PREFIX)
        else value
    )
    if name != "BUFFER":
        raise ValidationError(
            f"{where} must be DML_TENSOR_TYPE_BUFFER (or BUFFER), the only tensor type, got "
            f"{show(value)}"
        )


def no_extra(obj: dict, allowed: tuple, where: str, struct: str) -> None:
    for key in obj:
        if key not in allowed:
            raise ValidationError(
                f"{where} has unknown member {key!r}; {struct} members: {', '.join(allowed)}"
            )


def show(value: Any) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return repr(value)


def tensor_desc_to_json(t: TensorDesc) -> dict:
    """The flat DxDispatch JSON form of a ``TensorDesc`` (defaults left out)."""
    out: dict[str, Any] = {"DataType": t.data_type.name, "Sizes": list(t.sizes)}
    if t.strides is not None:
        out["Strides"] = list(t.strides)
    if t.flags is not TensorFlags.NONE:
        out["Flags"] = t.flags.name
    if t.total_tensor_size_in_bytes != calc_buffer_tensor_size(t.data_type, t.sizes, t.strides):
        out["TotalTensorSizeInBytes"] = t.total_tensor_size_in_bytes
    if t.guaranteed_base_offset_alignment:
        out["GuaranteedBaseOffsetAlignment"] = t.guaranteed_base_offset_alignment
    return out
