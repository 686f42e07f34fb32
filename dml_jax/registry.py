"""The operator registry: one OperatorSpec per DML_OPERATOR_* name.

An operator's whole knowledge is its entry in a family module under ``ops/``: the descriptor
class, ``infer``, ``validate``, ``lower`` (jax.lax only), its support table and one example.
Compile, graphs, JSON, the CLI, the benchmarks and the test suite reach it only through this
registry, so adding an operator touches nothing else (a benchmark case is an optional entry of
``dml_jax.bench.catalog``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import ValidationError
from .fields import OperatorDesc
from .support import SupportRow


@dataclass(frozen=True)
class Example:
    """One runnable example of an operator, as DxDispatch writes it.

    Attributes:
        dispatchable: the DML dispatchable, ``{"type": "DML_OPERATOR_...", "desc": {...}}``.
        inputs: initial values per input bind point (DML member name), flat lists in row-major
            order of the tensor's Sizes; a tensor array takes a list of such lists.
        note: one line on what the example shows (``dml-jax list-operators --support``).
    """

    dispatchable: Mapping[str, Any]
    inputs: Mapping[str, Any]
    note: str = ""


@dataclass(frozen=True)
class OperatorSpec:
    """How dml_jax handles one operator.

    Attributes:
        desc_class: the ``<Name>OperatorDesc`` dataclass.
        infer: ``infer(desc) -> tuple[TensorDesc, ...]``, the expected output descs.
        validate: ``validate(desc, v)`` with a ``Validator``; raises at the first broken rule.
        lower: ``lower(desc, *arrays) -> tuple[jax.Array, ...]``, logical mode, jax.lax only.
        support: the support table, rows of ``support.rows``; or, for operators whose table
            depends on a field (REDUCE's Function), a dict from ``support_key(desc)`` to rows.
        example: one ``Example``.
        support_key: ``support_key(desc)`` -> the key of a dict ``support``.
        in_place: DirectML lets an output alias an input (in-place execution); model bindings
            that alias an output with an input are rejected for other operators.
        fusable: an activation DirectML can fuse into another operator's ``FusedActivation``.
        differentiable: ``differentiable(desc) -> bool``; default: every tensor is a float type.
    """

    desc_class: type
    infer: Callable[[Any], tuple]
    validate: Callable[[Any, Any], None]
    lower: Callable[..., tuple]
    support: tuple[SupportRow, ...] | Mapping[str, tuple[SupportRow, ...]]
    example: Example
    support_key: Callable[[Any], str] | None = None
    in_place: bool = False
    fusable: bool = False
    differentiable: Callable[[Any], bool] | None = None

    @functools.cached_property
    def tables(self) -> dict[Any, tuple[SupportRow, ...]]:
        """Every support table by key: the name, or (name, sub-key) per ``support_key`` value."""
        if isinstance(self.support, Mapping):
            return {(self.name, k): tuple(rows) for k, rows in self.support.items()}
        return {self.name: tuple(self.support)}

    @property
    def name(self) -> str:
        return self.desc_class.operator_type

    def key(self, desc: Any) -> Any:
        """The support key of a description: the name, or (name, sub-key)."""
        return (self.name, self.support_key(desc)) if self.support_key else self.name

    def support_rows(self, desc: Any) -> tuple[SupportRow, ...]:
        """The support table in force for ``desc``."""
        return self.tables[self.key(desc)]

    def what(self, desc: Any) -> str:
        """How support errors name the operator (REDUCE names its function)."""
        key = self.key(desc)
        return key if isinstance(key, str) else f"{key[0]} with Function {key[1]}"

    def is_differentiable(self, desc: Any) -> bool:
        if self.differentiable is not None:
            return self.differentiable(desc)
        tensors = desc.input_slots() + desc.output_slots()
        return all(t.data_type.is_float for _, t in tensors)


_REGISTRY: dict[str, OperatorSpec] = {}
# DirectML's other names of a registered type (DML_OPERATOR_SCATTER_ELEMENTS is
# DML_OPERATOR_SCATTER): lookups and JSON accept them and give the same spec.
_ALIASES: dict[str, str] = {}


def register(desc_class: type, *, aliases: tuple[str, ...] = (), **spec: Any) -> OperatorSpec:
    """Registers an operator; registering the same DML name twice raises.

    ``aliases`` are other ``DML_OPERATOR_*`` names DirectML gives the same operator type."""
    if not (isinstance(desc_class, type) and issubclass(desc_class, OperatorDesc)):
        raise TypeError(f"{desc_class!r} is not an OperatorDesc subclass")
    name = desc_class.operator_type
    if not name.startswith("DML_OPERATOR_"):
        raise TypeError(f"{desc_class.__name__}.operator_type must be a DML_OPERATOR_* name")
    if name in _REGISTRY:
        raise ValueError(f"{name} is already registered")
    if isinstance(spec["support"], Mapping) and spec.get("support_key") is None:
        raise TypeError(f"{name}: a support table per key needs support_key")
    entry = OperatorSpec(desc_class, **spec)
    for key, rows in entry.tables.items():
        levels = [r.level for r in rows]
        if not rows or levels != sorted(levels):
            raise TypeError(f"{key}: support rows must be non-empty and in level order")
    if not isinstance(spec.get("example"), Example):
        raise TypeError(f"{name}: register needs example=Example(...)")
    if spec.get("fusable") and not desc_class.fusable:
        raise TypeError(f"{name}: fusable operators set the class attribute fusable = True")
    for alias in aliases:
        if alias in _REGISTRY or alias in _ALIASES or not alias.startswith("DML_OPERATOR_"):
            raise ValueError(f"{name}: alias {alias!r} is taken or not a DML_OPERATOR_* name")
    _REGISTRY[name] = entry
    _ALIASES.update(dict.fromkeys(aliases, name))
    return entry


def lookup(name: str) -> OperatorSpec:
    """The spec of an exact ``DML_OPERATOR_*`` name or alias; ``ValidationError`` lists the
    known ones."""
    spec = _REGISTRY.get(name) or _REGISTRY.get(_ALIASES.get(name, ""))
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


def aliases() -> dict[str, str]:
    """DirectML's alias operator types, each to the registered name it stands for."""
    return dict(_ALIASES)


def operators() -> tuple[OperatorSpec, ...]:
    """Every registered operator, in registration order."""
    return tuple(_REGISTRY.values())


def registered_operators() -> list[str]:
    """The supported ``DML_OPERATOR_*`` names, sorted."""
    return sorted(_REGISTRY)


def support_tables() -> dict[Any, tuple[SupportRow, ...]]:
    """Every support table by key (name, or (name, sub-key) for REDUCE's functions)."""
    return {k: rows for spec in _REGISTRY.values() for k, rows in spec.tables.items()}
