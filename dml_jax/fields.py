"""The OperatorDesc base class and its field declarations.

Every operator descriptor is a frozen dataclass whose fields are declared as an input tensor, an
output tensor (single or array), an attribute (with a converter) or a count member. Argument
order, JSON member names, graph edge indices and binding order all derive from these declarations.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import MISSING, field
from typing import Any, ClassVar

import numpy as np

from .errors import ValidationError, as_int, brief
from .tensor import ScaleBias, TensorDesc

INPUT, OUTPUT, ATTRIBUTE, COUNT = "input", "output", "attribute", "count"


def dml_member_name(name: str) -> str:
    """``min_max_data_type`` -> ``MinMaxDataType`` (DML member spelling)."""
    return "".join(part.capitalize() for part in name.split("_"))


def input_field(*, array: bool = False) -> Any:
    """An input tensor (``array=True``: a tensor array such as JOIN's InputTensors)."""
    return field(metadata={"kind": INPUT, "array": array})


def output_field(*, array: bool = False) -> Any:
    """An output tensor (``array=True``: a tensor array such as SPLIT's OutputTensors)."""
    return field(metadata={"kind": OUTPUT, "array": array})


def attribute(convert: Callable[[Any, str], Any], *, default: Any = MISSING) -> Any:
    """A non-tensor member. ``convert(value, where)`` returns the stored value or raises.

    A default of ``None`` makes the member optional (a null pointer in DML); ``None`` is then
    stored as is without calling ``convert``.
    """
    return field(default=default, metadata={"kind": ATTRIBUTE, "convert": convert})


def count_of(array: str) -> Any:
    """An optional count member (OutputCount, AxisCount, ...) that must equal ``len(array)``."""
    return field(default=None, metadata={"kind": COUNT, "of": array})


class OperatorDesc:
    """Base of every ``<Name>OperatorDesc``: converts fields at construction, then stays frozen.

    Subclasses are ``@dataclass(frozen=True)`` and set the class attribute ``operator_type`` to
    their exact ``DML_OPERATOR_*`` name.
    """

    operator_type: ClassVar[str] = ""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            meta = f.metadata
            value = getattr(self, f.name)
            where = f"{self.operator_type}: {dml_member_name(f.name)}"
            kind = meta.get("kind")
            if kind in (INPUT, OUTPUT):
                value = _convert_tensors(value, where, meta["array"])
            elif kind == COUNT:
                value = None if value is None else as_int(value, where)
            elif kind == ATTRIBUTE and value is not None:
                value = meta["convert"](value, where)
            elif kind == ATTRIBUTE and f.default is not None:
                # Only members declared optional (default None) may be null.
                raise ValidationError(f"{where} is required, got None")
            object.__setattr__(self, f.name, value)

    @classmethod
    def declared(cls, kind: str) -> list[dataclasses.Field]:
        """The dataclass fields of one kind (INPUT, OUTPUT, ATTRIBUTE, COUNT), in struct order."""
        return [f for f in dataclasses.fields(cls) if f.metadata.get("kind") == kind]

    def _tensors(self, kind: str) -> Iterator[tuple[str, TensorDesc]]:
        for f in self.declared(kind):
            name, value = dml_member_name(f.name), getattr(self, f.name)
            if f.metadata["array"]:
                for i, t in enumerate(value):
                    yield f"{name}[{i}]", t
            elif value is not None:
                yield name, value

    def input_slots(self) -> tuple[tuple[str, TensorDesc], ...]:
        """(DML path, TensorDesc) of every input tensor in schema order, arrays expanded."""
        return tuple(self._tensors(INPUT))

    def output_slots(self) -> tuple[tuple[str, TensorDesc], ...]:
        """(DML path, TensorDesc) of every output tensor in schema order, arrays expanded."""
        return tuple(self._tensors(OUTPUT))

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


# Converters for attributes: each takes (value, where) and returns the stored value.


def to_uint(value: Any, where: str) -> int:
    return as_int(value, where)


def to_uint_tuple(value: Any, where: str) -> tuple[int, ...]:
    if isinstance(value, np.ndarray) and value.ndim == 1:
        value = value.tolist()
    if not isinstance(value, (list, tuple)):
        raise ValidationError(f"{where} must be a sequence of integers, got {brief(value)}")
    return tuple(as_int(v, f"{where}[{i}]") for i, v in enumerate(value))


def to_enum(enum_cls: type) -> Callable[[Any, str], Any]:
    def convert(value: Any, where: str) -> Any:
        return enum_cls.parse(value, where)

    convert.__name__ = f"to_{enum_cls.__name__}"
    return convert


def to_scale_bias(value: Any, where: str) -> ScaleBias:
    if not isinstance(value, ScaleBias):
        raise ValidationError(f"{where} must be a ScaleBias or None, got {brief(value)}")
    return value
