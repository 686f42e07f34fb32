"""Operator and tensor descriptions from DxDispatch JSON.

``operator_desc_from_json`` reads one DxDispatch DML dispatchable object, either with the
operator's fields under ``desc``/``Desc`` or inline next to ``type``, and returns the matching
``<Name>OperatorDesc``. The JSON member names are the DML struct member names; the mapping to
dataclass fields comes from the field declarations (``fields.py``), never from a per-operator
table. Every error is a ``ValidationError`` that starts with the operator type (when known) and
gives the JSON member path, e.g. ``DML_OPERATOR_SPLIT: desc.OutputTensors[1].Sizes[0] must be an
integer, got 'x'``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .enums import DataType, TensorFlags
from .errors import UINT32_MAX, UINT64_MAX, ValidationError, as_int, as_int_tuple
from .fields import ATTRIBUTE, COUNT, INPUT, OUTPUT, OperatorDesc, dml_member_name, to_scale_bias
from .jsonforms import DISPATCHABLE_KEYS, EXECUTION_FLAGS, OTHER_DISPATCHABLE_TYPES
from .ops.clip import to_float, to_number
from .registry import OperatorSpec, parse_operator_type
from .tensor import ScaleBias, TensorDesc

_EXECUTION_FLAG_PREFIX = "DML_EXECUTION_FLAG_"

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


def operator_desc_from_json(obj: Any) -> OperatorDesc:
    """Builds an operator description from a DxDispatch DML dispatchable object.

    Accepted forms: ``{"type": "DML_OPERATOR_SPLIT" | "SPLIT", "desc": {...}}`` (key ``desc`` or
    ``Desc``), or the inline form with the operator's members next to ``type``. The dispatchable
    members ``executionFlags`` (checked: NONE or DML_EXECUTION_FLAGS names), ``dmlCompileType``
    and ``bindings`` may appear at the top level and are otherwise ignored.

    Members use the DML struct spelling (``InputTensor``, ``OutputCount``, ``BlockSize`` ...).
    Count members are optional and, when given, must equal their array's length. Enums take
    full or abbreviated names. FLOAT members take numbers or ``"nan"``/``"inf"``/``"-inf"``;
    UINT members take non-negative JSON integers. DML_SCALAR_UNION members (CLIP1/CLIP_GRAD1
    ``Min``/``Max``) take a number read in ``MinMaxDataType`` or an object naming the union
    member that matches it (``{"Float32": 1.5}``, ``{"UInt16": 15360}`` for FLOAT16 bits).

    Args:
        obj: the dispatchable, as returned by ``json.load``.

    Returns:
        The ``<Name>OperatorDesc``. It is constructed (so converted and type-checked) but not
        validated against cross-field rules or a feature level; call ``validate`` for that.

    Raises:
        ValidationError: naming the operator type and the JSON member path.
    """
    if not isinstance(obj, dict):
        raise ValidationError(f"dispatchable must be a JSON object, got {_show(obj)}")
    spec = _operator_spec(obj)
    op = spec.name
    if "desc" in obj and "Desc" in obj:
        raise ValidationError(f"{op}: give the operator's members under 'desc' or 'Desc', not both")
    if "executionFlags" in obj:
        execution_flags_from_json(obj["executionFlags"], f"{op}: executionFlags")
    for key in ("desc", "Desc"):
        if key in obj:
            extra = [k for k in obj if k not in DISPATCHABLE_KEYS]
            if extra:
                allowed = ", ".join(k for k in DISPATCHABLE_KEYS if k not in ("desc", "Desc"))
                raise ValidationError(
                    f"{op}: unknown dispatchable member {extra[0]!r}; allowed next to "
                    f"'{key}': {allowed}"
                )
            members = obj[key]
            if not isinstance(members, dict):
                raise ValidationError(f"{op}: {key} must be a JSON object, got {_show(members)}")
            return _build(spec, members, f"{key}.")
    members = {k: v for k, v in obj.items() if k not in DISPATCHABLE_KEYS}
    return _build(spec, members, "")


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
        raise ValidationError(
            f"{where} must be a JSON object (a DML_TENSOR_DESC), got {_show(obj)}"
        )
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
            raise ValidationError(f"{where} must be a JSON object, got {_show(obj)}")
        allowed = _BUFFER_KEYS
    else:
        allowed = ("Type",) + _BUFFER_KEYS
    _no_extra(obj, allowed, where, "DML_BUFFER_TENSOR_DESC")
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
    try:
        return TensorDesc(data_type, sizes, strides, total, align, flags)
    except ValidationError as e:
        # TensorDesc names its own fields ("TensorDesc.Sizes[1] ..."); say where in the JSON.
        message = str(e)
        if message.startswith("TensorDesc."):
            message = f"{where}.{message[len('TensorDesc.') :]}"
        raise ValidationError(message) from None


def tensor_flags_from_json(value: Any, where: str) -> TensorFlags:
    """DML_TENSOR_FLAGS: a flag name or an array of names (full or abbreviated), OR'ed."""
    if value is None:
        return TensorFlags.NONE
    names = value if isinstance(value, list) else [value]
    bits = 0
    for i, name in enumerate(names):
        path = f"{where}[{i}]" if isinstance(value, list) else where
        if not isinstance(name, str):
            raise ValidationError(f"{path} must be a DML_TENSOR_FLAGS name, got {_show(name)}")
        bits |= TensorFlags.parse(name, path).value
    return TensorFlags(bits)


def execution_flags_from_json(value: Any, where: str) -> int:
    """DML_EXECUTION_FLAGS: a flag name or an array of names (full or abbreviated), OR'ed.

    Returns:
        The flag bits (dml_jax compiles the same way for every flag).
    """
    if value is None:
        return 0
    names = value if isinstance(value, list) else [value]
    bits = 0
    for i, name in enumerate(names):
        path = f"{where}[{i}]" if isinstance(value, list) else where
        if isinstance(name, str) and name.startswith(_EXECUTION_FLAG_PREFIX):
            name = name[len(_EXECUTION_FLAG_PREFIX) :]
        if not isinstance(name, str) or name not in EXECUTION_FLAGS:
            raise ValidationError(
                f"{path} must be a DML_EXECUTION_FLAGS name (one of: "
                f"{', '.join(EXECUTION_FLAGS)}, optionally prefixed {_EXECUTION_FLAG_PREFIX}), "
                f"got {_show(name)}"
            )
        bits |= EXECUTION_FLAGS[name]
    return bits


def json_float(value: Any, where: str) -> float:
    """A DML FLOAT from JSON: a number, or "nan", "inf", "-inf" in any case."""
    if isinstance(value, str) and value.lower() in ("nan", "inf", "-inf"):
        return float(value.lower())
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValidationError(
            f"{where} must be a number (or 'nan', 'inf', '-inf'), got {_show(value)}"
        )
    return float(value)


def scalar_union_from_json(value: Any, data_type: DataType, where: str) -> int | float:
    """A DML_SCALAR_UNION read in ``data_type``, as the Python number the descriptors store.

    A plain number (or a "nan"/"inf"/"-inf" string for float types) is taken as is; the
    descriptor's validation checks it fits ``data_type``. An object names exactly one union
    member, which must be the one ``data_type`` uses (``UInt16`` holds FLOAT16 as its raw
    binary16 bits); ``{"Bytes": [8 bytes]}`` gives the union's little-endian bytes.
    """
    if not isinstance(value, dict):
        if data_type.is_float:
            return json_float(value, where)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValidationError(f"{where} must be a number, got {_show(value)}")
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


# JSON readers for attribute converters whose JSON spelling differs from the Python one. Any
# other converter (UINT, UINT arrays, enums) reads the JSON value directly.
_JSON_READERS: dict[Callable, Callable[[Any, str], Any]] = {
    to_float: json_float,
}


def _scale_bias_from_json(value: Any, where: str) -> ScaleBias:
    if not isinstance(value, dict):
        raise ValidationError(f"{where} must be a JSON object {{Scale, Bias}}, got {_show(value)}")
    _no_extra(value, ("Scale", "Bias"), where, "DML_SCALE_BIAS")
    args = []
    for key in ("Scale", "Bias"):
        if key not in value:
            raise ValidationError(f"{where}.{key} is required")
        args.append(json_float(value[key], f"{where}.{key}"))
    try:
        return ScaleBias(*args)
    except ValidationError as e:
        message = str(e)
        if message.startswith("ScaleBias."):
            message = f"{where}.{message[len('ScaleBias.') :]}"
        raise ValidationError(message) from None


_JSON_READERS[to_scale_bias] = _scale_bias_from_json


def _operator_spec(obj: dict) -> OperatorSpec:
    if "type" not in obj:
        raise ValidationError("dispatchable: type is required (a DML_OPERATOR_* name)")
    name = obj["type"]
    if isinstance(name, str) and name.lower() in OTHER_DISPATCHABLE_TYPES:
        raise ValidationError(
            f"type {name!r} is not supported: dml_jax runs DML operator dispatchables only"
        )
    try:
        return parse_operator_type(name)
    except ValidationError as e:
        raise ValidationError(f"type: {e}") from None


def _build(spec: OperatorSpec, members: dict, prefix: str) -> OperatorDesc:
    """Converts the JSON members of one operator into its descriptor."""
    cls = spec.desc_class
    op = spec.name
    fields = dataclasses.fields(cls)
    by_name = {dml_member_name(f.name): f for f in fields if f.metadata.get("kind")}
    for key in members:
        if key not in by_name:
            place = f"{op}: {prefix[:-1]} has unknown member" if prefix else f"{op}: unknown member"
            raise ValidationError(f"{place} {key!r}; members: {', '.join(by_name)}")

    def where(name: str) -> str:
        return f"{op}: {prefix}{name}"

    values: dict[str, Any] = {}
    unions = []
    for name, f in by_name.items():
        kind = f.metadata["kind"]
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        value = members.get(name)
        if value is None:
            if required:
                raise ValidationError(f"{where(name)} is required")
            continue
        if kind in (INPUT, OUTPUT):
            values[f.name] = _tensors_from_json(value, where(name), f.metadata["array"])
        elif kind == COUNT:
            values[f.name] = as_int(value, where(name), maximum=UINT32_MAX)
        elif kind == ATTRIBUTE:
            convert = f.metadata["convert"]
            if convert is to_number:  # a DML_SCALAR_UNION: needs its data type, read last
                unions.append((f, value))
                continue
            reader = _JSON_READERS.get(convert)
            values[f.name] = convert(reader(value, where(name)) if reader else value, where(name))
    for f in cls.declared(COUNT):
        items = values.get(f.metadata["of"])
        count = values.get(f.name)
        if count is not None and items is not None and count != len(items):
            of = dml_member_name(f.metadata["of"])
            raise ValidationError(
                f"{where(dml_member_name(f.name))} must equal the length of {of} ({len(items)}), "
                f"got {count}"
            )
    if unions:
        union_type = _union_data_type(cls, values)
        for f, value in unions:
            path = where(dml_member_name(f.name))
            values[f.name] = to_number(scalar_union_from_json(value, union_type, path), path)
    return cls(**values)


def _union_data_type(cls: type, values: dict) -> DataType:
    """The type the scalar unions are read in: the DML_TENSOR_DATA_TYPE attribute if given
    (MinMaxDataType), else the first output tensor's data type, as the descriptors define."""
    for f in cls.declared(ATTRIBUTE):
        if f.metadata["convert"].__name__ == f"to_{DataType.__name__}" and f.name in values:
            return values[f.name]
    first_output = cls.declared(OUTPUT)[0]
    return values[first_output.name].data_type


def _tensors_from_json(value: Any, where: str, array: bool) -> Any:
    if not array:
        return tensor_desc_from_json(value, where)
    if not isinstance(value, list):
        raise ValidationError(f"{where} must be a JSON array of tensor descs, got {_show(value)}")
    return tuple(tensor_desc_from_json(t, f"{where}[{i}]") for i, t in enumerate(value))


def _tensor_type(value: Any, where: str) -> None:
    name = (
        value[len(_TENSOR_TYPE_PREFIX) :]
        if isinstance(value, str) and value.startswith(_TENSOR_TYPE_PREFIX)
        else value
    )
    if name != "BUFFER":
        raise ValidationError(
            f"{where} must be DML_TENSOR_TYPE_BUFFER (or BUFFER), the only tensor type, got "
            f"{_show(value)}"
        )


def _no_extra(obj: dict, allowed: tuple, where: str, struct: str) -> None:
    for key in obj:
        if key not in allowed:
            raise ValidationError(
                f"{where} has unknown member {key!r}; {struct} members: {', '.join(allowed)}"
            )


def _show(value: Any) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return repr(value)
