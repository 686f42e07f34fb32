"""The operator registry: one OperatorSpec per DML_OPERATOR_* name.

Operator knowledge lives in the family modules under ``ops/``; compile, graph, JSON and the CLI
reach it only through ``lookup``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import ValidationError
from .fields import OperatorDesc


@dataclass(frozen=True)
class OperatorSpec:
    """How dml_jax handles one operator.

    Attributes:
        desc_class: the ``<Name>OperatorDesc`` dataclass.
        infer: ``infer(desc) -> tuple[TensorDesc, ...]``, the expected output descs.
        validate: ``validate(desc, v)`` with a ``Validator``; raises at the first broken rule.
        lower: ``lower(desc, *arrays) -> tuple[jax.Array, ...]``, logical mode, jax.lax only.
        support_key: ``support_key(desc)`` -> the key of ``support.SUPPORT`` (default: the name).
        in_place: DML allows the first output to alias the first input.
        differentiable: ``differentiable(desc) -> bool``; default: every tensor is a float type.
    """

    desc_class: type
    infer: Callable[[Any], tuple]
    validate: Callable[[Any, Any], None]
    lower: Callable[..., tuple]
    support_key: Callable[[Any], Any] | None = None
    in_place: bool = False
    differentiable: Callable[[Any], bool] | None = None

    @property
    def name(self) -> str:
        return self.desc_class.operator_type

    def key(self, desc: Any) -> Any:
        return self.support_key(desc) if self.support_key else self.name

    def is_differentiable(self, desc: Any) -> bool:
        if self.differentiable is not None:
            return self.differentiable(desc)
        tensors = desc.input_slots() + desc.output_slots()
        return all(t.data_type.is_float for _, t in tensors)


_REGISTRY: dict[str, OperatorSpec] = {}


def register(desc_class: type, **spec: Any) -> OperatorSpec:
    """Registers an operator; registering the same DML name twice raises."""
    if not (isinstance(desc_class, type) and issubclass(desc_class, OperatorDesc)):
        raise TypeError(f"{desc_class!r} is not an OperatorDesc subclass")
    name = desc_class.operator_type
    if not name.startswith("DML_OPERATOR_"):
        raise TypeError(f"{desc_class.__name__}.operator_type must be a DML_OPERATOR_* name")
    if name in _REGISTRY:
        raise ValueError(f"{name} is already registered")
    _REGISTRY[name] = OperatorSpec(desc_class, **spec)
    return _REGISTRY[name]


def lookup(name: str) -> OperatorSpec:
    """The spec of an exact ``DML_OPERATOR_*`` name; ``ValidationError`` lists the known ones."""
    spec = _REGISTRY.get(name)
    if spec is None:
        raise ValidationError(
            f"unknown operator type {name!r}; supported: {', '.join(sorted(_REGISTRY))}"
        )
    return spec


def parse_operator_type(value: Any) -> OperatorSpec:
    """Looks up a DML operator type given in full (``DML_OPERATOR_SPLIT``) or short (``SPLIT``)."""
    if isinstance(value, str) and not value.startswith("DML_OPERATOR_"):
        value = "DML_OPERATOR_" + value
    if not isinstance(value, str):
        raise ValidationError(f"operator type must be a string, got {value!r}")
    return lookup(value)


def operators() -> tuple[OperatorSpec, ...]:
    """Every registered operator, in registration order."""
    return tuple(_REGISTRY.values())
