"""The OperatorDesc base class, its field declarations and the field types of every schema.

Every operator descriptor is a frozen dataclass whose fields are declared as an input tensor, an
output tensor (single or array, optional or not), an attribute of a ``FieldType`` or a count
member. Argument order, JSON member names, graph edge indices, binding order, JSON parsing and
writing, and fuzz strategies all derive from these declarations.

The field types cover every attribute type of DirectML's schemas: UINT, UINT64, INT, FLOAT,
BOOL, enums, UINT/INT/FLOAT arrays, DML_SCALE_BIAS, DML_SIZE_2D, DML_SCALAR_UNION (read in a
companion data-type field), a nested operator desc (``FusedActivation``) and arrays of them.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Iterator
from dataclasses import field
from typing import Any, ClassVar

import numpy as np

from . import jsonvalues
from .enums import DataType
from .errors import UINT32_MAX, UINT64_MAX, ValidationError, as_int, brief, to_python_float
from .tensor import ScaleBias, Size2D, TensorDesc

INPUT, OUTPUT, ATTRIBUTE, COUNT = "input", "output", "attribute", "count"


class _Required:
    """Default of required members: DML structs put optional members (default None) before
    required ones (GEMM's CTensor before OutputTensor), which a dataclass allows only when every
    member has a default. A member left at REQUIRED is a ValidationError, not a TypeError."""

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


# Words DirectML's member names keep in capitals (``ROITensor``, ``OutputROIGradientTensor``).
_ACRONYMS = {"roi": "ROI"}


@functools.cache
def dml_member_name(name: str) -> str:
    """``min_max_data_type`` -> ``MinMaxDataType`` (DML member spelling)."""
    return "".join(_ACRONYMS.get(part, part.capitalize()) for part in name.split("_"))


# --- Field types --------------------------------------------------------------------------------


class FieldType:
    """How one kind of DML attribute is converted, read from and written to DxDispatch JSON.

    Attributes:
        dml: the schema type (``UINT``, ``FLOAT_ARRAY``, ``OPERATOR_DESC`` ...).
    """

    dml: str = ""

    def convert(self, value: Any, where: str) -> Any:
        """The stored value of a constructor argument; raises ``ValidationError``."""
        raise NotImplementedError

    def from_json(self, value: Any, where: str, nested: Callable | None = None) -> Any:
        """The constructor argument for a JSON value (``nested`` builds nested operator descs)."""
        return value

    def to_json(self, value: Any, nested: Callable | None = None) -> Any:
        """The DxDispatch JSON spelling of a stored value (``nested`` writes nested descs)."""
        return value

    def __repr__(self) -> str:
        return f"<{self.dml}>"


class _Uint(FieldType):
    def __init__(self, maximum: int = UINT32_MAX, dml: str = "UINT"):
        self.maximum, self.dml = maximum, dml

    def convert(self, value: Any, where: str) -> int:
        return as_int(value, where, maximum=self.maximum)


class _Int(FieldType):
    dml = "INT"

    def convert(self, value: Any, where: str) -> int:
        return as_int(value, where, minimum=INT32_MIN, maximum=INT32_MAX)


class _Bool(FieldType):
    """A DML BOOL: ``True``/``False`` (0 and 1 accepted, as the C struct holds an integer)."""

    dml = "BOOL"

    def convert(self, value: Any, where: str) -> bool:
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        if isinstance(value, (int, np.integer)) and int(value) in (0, 1):
            return bool(value)
        raise ValidationError(f"{where} must be a bool (true or false), got {brief(value)}")


class _Float(FieldType):
    """A DML FLOAT: a real number, not NaN."""

    dml = "FLOAT"

    def convert(self, value: Any, where: str) -> float:
        if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, (int, float, np.integer, np.floating)
        ):
            raise ValidationError(f"{where} must be a number, got {brief(value)}")
        value = to_python_float(value, where)
        if math.isnan(value):
            raise ValidationError(f"{where} must not be NaN")
        return value

    def from_json(self, value: Any, where: str, nested: Callable | None = None) -> Any:
        return jsonvalues.json_float(value, where)

    def to_json(self, value: float, nested: Callable | None = None) -> Any:
        return value if math.isfinite(value) else str(value)


class _Array(FieldType):
    """A DML array member (UINT[], INT[], FLOAT[]): a sequence stored as a tuple."""

    def __init__(self, item: FieldType, dml: str):
        self.item, self.dml = item, dml

    def convert(self, value: Any, where: str) -> tuple:
        if isinstance(value, np.ndarray) and value.ndim == 1:
            value = value.tolist()
        if not isinstance(value, (list, tuple)):
            what = "numbers" if self.item.dml == "FLOAT" else "integers"
            raise ValidationError(f"{where} must be a sequence of {what}, got {brief(value)}")
        return tuple(self.item.convert(v, f"{where}[{i}]") for i, v in enumerate(value))

    def from_json(self, value: Any, where: str, nested: Callable | None = None) -> Any:
        if not isinstance(value, list):
            return value  # convert() names the problem
        return [self.item.from_json(v, f"{where}[{i}]") for i, v in enumerate(value)]

    def to_json(self, value: tuple, nested: Callable | None = None) -> Any:
        return [self.item.to_json(v) for v in value]


class _Enum(FieldType):
    def __init__(self, enum_cls: type):
        self.enum_cls, self.dml = enum_cls, f"UINT ({enum_cls.__name__})"

    def convert(self, value: Any, where: str) -> Any:
        return self.enum_cls.parse(value, where)

    def to_json(self, value: Any, nested: Callable | None = None) -> Any:
        return value.dml_name


class _ScaleBias(FieldType):
    dml = "SCALE_BIAS"

    def convert(self, value: Any, where: str) -> ScaleBias:
        if not isinstance(value, ScaleBias):
            raise ValidationError(f"{where} must be a ScaleBias or None, got {brief(value)}")
        return value

    def from_json(self, value: Any, where: str, nested: Callable | None = None) -> Any:
        return jsonvalues.scale_bias_from_json(value, where)

    def to_json(self, value: ScaleBias, nested: Callable | None = None) -> Any:
        return {"Scale": value.scale, "Bias": value.bias}


class _Size2D(FieldType):
    """DML_SIZE_2D: ``Size2D(width, height)`` or a (width, height) pair."""

    dml = "SIZE_2D"

    def convert(self, value: Any, where: str) -> Size2D:
        if isinstance(value, Size2D):
            return value
        if isinstance(value, (list, tuple)) and len(value) == 2:
            return Size2D(as_int(value[0], f"{where}.Width"), as_int(value[1], f"{where}.Height"))
        raise ValidationError(
            f"{where} must be a Size2D or a (width, height) pair, got {brief(value)}"
        )

    def from_json(self, value: Any, where: str, nested: Callable | None = None) -> Any:
        if not isinstance(value, dict):
            raise ValidationError(
                f"{where} must be a JSON object {{Width, Height}}, got {jsonvalues.show(value)}"
            )
        jsonvalues.no_extra(value, ("Width", "Height"), where, "DML_SIZE_2D")
        for key in ("Width", "Height"):
            if key not in value:
                raise ValidationError(f"{where}.{key} is required")
        return Size2D(
            as_int(value["Width"], f"{where}.Width"), as_int(value["Height"], f"{where}.Height")
        )

    def to_json(self, value: Size2D, nested: Callable | None = None) -> Any:
        return {"Width": value.width, "Height": value.height}


class ScalarUnion(FieldType):
    """DML_SCALAR_UNION: a Python number read in the data type named by ``type_field``.

    ``type_field`` is the snake_case name of the companion DML_TENSOR_DATA_TYPE attribute; when
    that is ``None`` (optional, as CLIP1's MinMaxDataType), the first output tensor's type.
    Integers stay exact Python ints; the descriptor's validation checks the value fits the type.
    """

    dml = "SCALAR_UNION"

    def __init__(self, type_field: str):
        self.type_field = type_field

    def convert(self, value: Any, where: str) -> int | float:
        if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, (int, float, np.integer, np.floating)
        ):
            raise ValidationError(f"{where} must be a number, got {brief(value)}")
        if isinstance(value, (int, np.integer)):
            return int(value)
        value = float(value)
        if math.isnan(value):
            raise ValidationError(f"{where} must not be NaN")
        return value

    def data_type(self, desc_or_values: Any, cls: type) -> DataType:
        """The type the union is read in, from a descriptor or a dict of field values."""
        get = (
            desc_or_values.get
            if isinstance(desc_or_values, dict)
            else lambda name: getattr(desc_or_values, name, None)
        )
        data_type = get(self.type_field)
        if data_type is not None:
            return data_type
        return get(cls.declared(OUTPUT)[0].name).data_type

    def to_json(self, value: float, nested: Callable | None = None) -> Any:
        return value if not isinstance(value, float) or math.isfinite(value) else str(value)


class _OperatorDescField(FieldType):
    """A nested operator desc (``FusedActivation``): an ``OperatorDesc`` instance."""

    dml = "OPERATOR_DESC"

    def convert(self, value: Any, where: str) -> OperatorDesc:
        if not isinstance(value, OperatorDesc):
            raise ValidationError(
                f"{where} must be an operator description (such as ActivationReluOperatorDesc) "
                f"or None, got {brief(value)}"
            )
        return value

    def from_json(self, value: Any, where: str, nested: Callable | None = None) -> Any:
        return nested(value, where)

    def to_json(self, value: OperatorDesc, nested: Callable | None = None) -> Any:
        return nested(value)


class _OperatorDescArray(_OperatorDescField):
    dml = "OPERATOR_DESC_ARRAY"

    def convert(self, value: Any, where: str) -> tuple:
        if isinstance(value, OperatorDesc) or not isinstance(value, (list, tuple)):
            raise ValidationError(
                f"{where} must be a sequence of operator descriptions, got {brief(value)}"
            )
        return tuple(OPERATOR_DESC.convert(v, f"{where}[{i}]") for i, v in enumerate(value))

    def from_json(self, value: Any, where: str, nested: Callable | None = None) -> Any:
        if not isinstance(value, list):
            raise ValidationError(
                f"{where} must be a JSON array of operator descs, got {jsonvalues.show(value)}"
            )
        return [nested(v, f"{where}[{i}]") for i, v in enumerate(value)]

    def to_json(self, value: tuple, nested: Callable | None = None) -> Any:
        return [nested(v) for v in value]


UINT = _Uint()
UINT64 = _Uint(UINT64_MAX, "UINT64")
INT = _Int()
BOOL = _Bool()
FLOAT = _Float()
UINT_ARRAY = _Array(UINT, "UINT_ARRAY")
INT_ARRAY = _Array(INT, "INT_ARRAY")
FLOAT_ARRAY = _Array(FLOAT, "FLOAT_ARRAY")
SCALE_BIAS = _ScaleBias()
SIZE_2D = _Size2D()
OPERATOR_DESC = _OperatorDescField()
OPERATOR_DESC_ARRAY = _OperatorDescArray()


def enum_type(enum_cls: type) -> FieldType:
    """The field type of a DML enum: a member, its full DML name or its suffix."""
    return _Enum(enum_cls)


# --- Declarations -------------------------------------------------------------------------------


def input_field(*, array: bool = False, optional: bool = False) -> Any:
    """An input tensor (``array``: a tensor array such as JOIN's InputTensors; ``optional``: a
    maybe-null tensor such as GEMM's CTensor, default ``None``)."""
    meta = {"kind": INPUT, "array": array, "optional": optional}
    return field(default=None if optional else REQUIRED, metadata=meta)


def output_field(*, array: bool = False, optional: bool = False) -> Any:
    """An output tensor (``array``: a tensor array such as SPLIT's OutputTensors)."""
    meta = {"kind": OUTPUT, "array": array, "optional": optional}
    return field(default=None if optional else REQUIRED, metadata=meta)


def attribute(ftype: FieldType, *, default: Any = REQUIRED) -> Any:
    """A non-tensor member of a ``FieldType``.

    A default of ``None`` makes the member optional (a null pointer in DML); ``None`` is then
    stored as is without conversion.
    """
    if not isinstance(ftype, FieldType):
        raise TypeError(f"attribute() takes a FieldType, got {ftype!r}")
    return field(default=default, metadata={"kind": ATTRIBUTE, "type": ftype})


def count_of(array: str) -> Any:
    """An optional count member (OutputCount, AxisCount, ...) that must equal ``len(array)``."""
    return field(default=None, metadata={"kind": COUNT, "of": array})


@functools.cache
def _fields_of(cls: type) -> tuple[dataclasses.Field, ...]:
    """A descriptor class's dataclass fields (fixed once the class is made), read once: a
    model's import makes thousands of descriptors."""
    return dataclasses.fields(cls)


@functools.cache
def _declared_of(cls: type, kind: str) -> tuple[dataclasses.Field, ...]:
    return tuple(f for f in _fields_of(cls) if f.metadata.get("kind") == kind)


class OperatorDesc:
    """Base of every ``<Name>OperatorDesc``: converts fields at construction, then stays frozen.

    Subclasses are ``@dataclass(frozen=True)`` and set the class attribute ``operator_type`` to
    their exact ``DML_OPERATOR_*`` name. ``activation`` classes (``fusable`` ones among them:
    activations that DirectML can fuse into another operator) may leave their tensors ``None``:
    a fused activation's tensors are ignored, a standalone one without them fails validation, and
    a non-fusable one in a ``FusedActivation`` is rejected there, by that member's name.
    """

    operator_type: ClassVar[str] = ""
    fusable: ClassVar[bool] = False
    activation: ClassVar[bool] = False

    def __post_init__(self) -> None:
        for f in _fields_of(type(self)):
            meta = f.metadata
            value = getattr(self, f.name)
            where = f"{self.operator_type}: {dml_member_name(f.name)}"
            kind = meta.get("kind")
            if value is REQUIRED:
                if kind in (INPUT, OUTPUT) and (self.fusable or self.activation):
                    object.__setattr__(self, f.name, None)
                    continue
                raise ValidationError(f"{where} is required")
            if kind in (INPUT, OUTPUT):
                if value is None and (meta["optional"] or self.fusable or self.activation):
                    continue
                value = _convert_tensors(value, where, meta["array"])
            elif kind == COUNT:
                value = None if value is None else as_int(value, where)
            elif kind == ATTRIBUTE and value is not None:
                value = meta["type"].convert(value, where)
            elif kind == ATTRIBUTE and f.default is not None:
                # Only members declared optional (default None) may be null.
                raise ValidationError(f"{where} is required, got None")
            object.__setattr__(self, f.name, value)

    @classmethod
    def declared(cls, kind: str) -> list[dataclasses.Field]:
        """The dataclass fields of one kind (INPUT, OUTPUT, ATTRIBUTE, COUNT), in struct order."""
        return list(_declared_of(cls, kind))

    def _tensors(self, kind: str) -> Iterator[tuple[str, TensorDesc]]:
        for f in self.declared(kind):
            name, value = dml_member_name(f.name), getattr(self, f.name)
            if f.metadata["array"]:
                for i, t in enumerate(value or ()):
                    yield f"{name}[{i}]", t
            elif value is not None:
                yield name, value

    def input_slots(self) -> tuple[tuple[str, TensorDesc], ...]:
        """(DML path, TensorDesc) of every present input tensor in schema order, arrays expanded."""
        return tuple(self._tensors(INPUT))

    def output_slots(self) -> tuple[tuple[str, TensorDesc], ...]:
        """(DML path, TensorDesc) of every present output tensor in schema order."""
        return tuple(self._tensors(OUTPUT))

    def edge_slots(self, kind: str) -> tuple[tuple[str, TensorDesc | None], ...]:
        """Like ``input_slots``/``output_slots`` but absent optional tensors included as None:
        DirectML's graph edge indices count them."""
        out = []
        for f in self.declared(kind):
            name, value = dml_member_name(f.name), getattr(self, f.name)
            if f.metadata["array"]:
                out += [(f"{name}[{i}]", t) for i, t in enumerate(value or ())]
            else:
                out.append((name, value))
        return tuple(out)

    def missing_tensors(self) -> list[str]:
        """DML names of required tensors left ``None`` (only activation classes allow that)."""
        return [
            dml_member_name(f.name)
            for f in self.declared(INPUT) + self.declared(OUTPUT)
            if getattr(self, f.name) is None and not f.metadata["optional"]
        ]

    @classmethod
    def has_output_array(cls) -> bool:
        return any(f.metadata["array"] for f in cls.declared(OUTPUT))


def _convert_tensors(value: Any, where: str, array: bool) -> Any:
    if not array:
        if not isinstance(value, TensorDesc):
            raise ValidationError(f"{where} must be a TensorDesc, got {type(value).__name__}")
        return value
    if isinstance(value, TensorDesc) or not isinstance(value, (list, tuple)):
        raise ValidationError(f"{where} must be a sequence of TensorDesc, got {brief(value)}")
    for i, t in enumerate(value):
        if not isinstance(t, TensorDesc):
            raise ValidationError(f"{where}[{i}] must be a TensorDesc, got {type(t).__name__}")
    return tuple(value)
