"""Operator descriptions from (and to) DxDispatch JSON.

``operator_desc_from_json`` reads one DxDispatch DML dispatchable object, either with the
operator's fields under ``desc``/``Desc`` or inline next to ``type``, and returns the matching
``<Name>OperatorDesc``. The JSON member names are the DML struct member names; the mapping to
dataclass fields and each member's JSON form come from the field declarations and field types
(``fields.py``), never from a per-operator table. Every error is a ``ValidationError`` that starts
with the operator type (when known) and gives the JSON member path, e.g. ``DML_OPERATOR_SPLIT:
desc.OutputTensors[1].Sizes[0] must be an integer, got 'x'``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .errors import UINT32_MAX, ValidationError, as_int
from .fields import (
    ATTRIBUTE,
    COUNT,
    INPUT,
    OUTPUT,
    REQUIRED,
    OperatorDesc,
    ScalarUnion,
    dml_member_name,
)
from .jsonforms import DISPATCHABLE_KEYS, EXECUTION_FLAGS, OTHER_DISPATCHABLE_TYPES
from .jsonvalues import (
    json_float,
    scalar_union_from_json,
    show,
    tensor_desc_from_json,
    tensor_desc_to_json,
    tensor_flags_from_json,
)
from .registry import OperatorSpec, parse_operator_type

__all__ = [
    "execution_flags_from_json",
    "json_float",
    "operator_desc_from_json",
    "operator_desc_to_json",
    "scalar_union_from_json",
    "tensor_desc_from_json",
    "tensor_flags_from_json",
]

_EXECUTION_FLAG_PREFIX = "DML_EXECUTION_FLAG_"


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
        raise ValidationError(f"dispatchable must be a JSON object, got {show(obj)}")
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
                raise ValidationError(f"{op}: {key} must be a JSON object, got {show(members)}")
            return _build(spec, members, f"{key}.")
    members = {k: v for k, v in obj.items() if k not in DISPATCHABLE_KEYS}
    return _build(spec, members, "")


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
                f"got {show(name)}"
            )
        bits |= EXECUTION_FLAGS[name]
    return bits


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


def _build(spec: OperatorSpec, members: dict, prefix: str, fused: bool = False) -> OperatorDesc:
    """Converts the JSON members of one operator into its descriptor.

    ``fused``: a nested desc (``FusedActivation``), whose tensor members are absent.
    """
    cls = spec.desc_class
    op = spec.name
    by_name = {
        dml_member_name(f.name): f for f in dataclasses.fields(cls) if f.metadata.get("kind")
    }
    if fused:
        by_name = {k: f for k, f in by_name.items() if f.metadata["kind"] not in (INPUT, OUTPUT)}
    for key in members:
        if key not in by_name:
            place = f"{op}: {prefix[:-1]} has unknown member" if prefix else f"{op}: unknown member"
            raise ValidationError(f"{place} {key!r}; members: {', '.join(by_name)}")

    def where(name: str) -> str:
        return f"{op}: {prefix}{name}"

    def nested(value: Any, path: str) -> OperatorDesc:
        return _nested_from_json(value, path)

    values: dict[str, Any] = {}
    unions = []
    for name, f in by_name.items():
        kind = f.metadata["kind"]
        value = members.get(name)
        if value is None:
            if f.default is REQUIRED:
                raise ValidationError(f"{where(name)} is required")
            continue
        if kind in (INPUT, OUTPUT):
            values[f.name] = _tensors_from_json(value, where(name), f.metadata["array"])
        elif kind == COUNT:
            values[f.name] = as_int(value, where(name), maximum=UINT32_MAX)
        elif kind == ATTRIBUTE:
            ftype = f.metadata["type"]
            if isinstance(ftype, ScalarUnion):  # needs its data type: read last
                unions.append((f, value))
                continue
            values[f.name] = ftype.convert(ftype.from_json(value, where(name), nested), where(name))
    for f in cls.declared(COUNT):
        items = values.get(f.metadata["of"])
        count = values.get(f.name)
        if count is not None and items is not None and count != len(items):
            of = dml_member_name(f.metadata["of"])
            raise ValidationError(
                f"{where(dml_member_name(f.name))} must equal the length of {of} ({len(items)}), "
                f"got {count}"
            )
    for f, value in unions:
        ftype = f.metadata["type"]
        path = where(dml_member_name(f.name))
        try:
            data_type = ftype.data_type(values, cls)
        except (KeyError, AttributeError):
            raise ValidationError(
                f"{path} needs {dml_member_name(ftype.type_field)} to say its data type"
            ) from None
        values[f.name] = ftype.convert(scalar_union_from_json(value, data_type, path), path)
    return cls(**values)


def _nested_from_json(obj: Any, where: str) -> OperatorDesc:
    """A nested operator desc: ``{"Type": ..., <members>}`` or ``{"Type": ..., "Desc": {...}}``."""
    if not isinstance(obj, dict):
        raise ValidationError(
            f"{where} must be a JSON object naming an operator (Type), got {show(obj)}"
        )
    if "Type" not in obj:
        raise ValidationError(f"{where}.Type is required (a DML_OPERATOR_* name)")
    try:
        spec = parse_operator_type(obj["Type"])
    except ValidationError as e:
        raise ValidationError(f"{where}.Type: {e}") from None
    if "Desc" in obj:
        extra = [k for k in obj if k not in ("Type", "Desc")]
        if extra:
            raise ValidationError(
                f"{where} has unknown member {extra[0]!r}; with Desc it holds only Type and Desc"
            )
        members = obj["Desc"]
        if not isinstance(members, dict):
            raise ValidationError(f"{where}.Desc must be a JSON object, got {show(members)}")
        prefix = f"{where.split(': ', 1)[-1]}.Desc."
    else:
        members = {k: v for k, v in obj.items() if k != "Type"}
        prefix = f"{where.split(': ', 1)[-1]}."
    owner = where.split(": ", 1)[0] if ": " in where else ""
    if not spec.desc_class.activation:
        # Every nested desc is an activation (FusedActivation, ActivationDescs): another type
        # would only fail later on members that the owner does not have (its tensors).
        raise ValidationError(
            f"{where} is not an activation: got {spec.name} (a nested operator desc must be a "
            "DML_OPERATOR_ACTIVATION_* type)"
        )
    try:
        return _build(spec, members, prefix, fused=True)
    except ValidationError as e:
        message = str(e).removeprefix(f"{spec.name}: ")
        if not message.startswith(prefix[:-1]):  # raised by the desc's own checks: name the path
            message = f"{prefix}{message}"
        raise ValidationError(f"{owner}: {message}" if owner else message) from None


def operator_desc_to_json(desc: OperatorDesc, fused: bool = False) -> dict:
    """The DxDispatch JSON of an operator description: ``{"type": ..., "desc": {...}}``.

    Absent optional members are left out, and so are count members left ``None`` (DxDispatch
    itself needs them: give them in the description to write a file for it). ``fused`` writes the nested form ``{"Type": ..., "Desc": {...}}`` of
    a ``FusedActivation``, without tensors. ``operator_desc_from_json`` reads both back.
    """
    members: dict[str, Any] = {}
    for f in dataclasses.fields(desc):
        kind = f.metadata.get("kind")
        value = getattr(desc, f.name)
        name = dml_member_name(f.name)
        if kind in (INPUT, OUTPUT):
            if fused or value is None:
                continue
            members[name] = (
                [tensor_desc_to_json(t) for t in value]
                if f.metadata["array"]
                else tensor_desc_to_json(value)
            )
        elif kind == COUNT and value is not None:
            members[name] = value  # validated against its array; None stays absent
        elif kind == ATTRIBUTE and value is not None:
            ftype = f.metadata["type"]
            members[name] = ftype.to_json(value, lambda d: operator_desc_to_json(d, fused=True))
    if fused:
        return {"Type": desc.operator_type, "Desc": members}
    return {"type": desc.operator_type, "desc": members}


def _tensors_from_json(value: Any, where: str, array: bool) -> Any:
    if not array:
        return tensor_desc_from_json(value, where)
    if not isinstance(value, list):
        raise ValidationError(f"{where} must be a JSON array of tensor descs, got {show(value)}")
    return tuple(tensor_desc_from_json(t, f"{where}[{i}]") for i, t in enumerate(value))
