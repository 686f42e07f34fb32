"""ONNX op types -> DirectML operator descriptors: one converter per ONNX op, one module per op
group (mirroring ``dml_jax/ops/``), every module imported here in name order so a new group
needs no line elsewhere.

A converter takes ``(ctx, node, inputs)`` (``ctx``: ``importer.Context``; inputs: ``Value`` or
None for an absent optional one) and returns the outputs' values, adding DML operator nodes with
``ctx.node``. The mappings follow ONNX Runtime's DirectML execution provider
(``../shared/spec/ONNX.md``): broadcasting through stride-0 strides, GEMM and CONVOLUTION on 4-D
tensors, Transpose as an identity that reads permuted strides, the views (Reshape, Flatten,
Squeeze, Unsqueeze, Identity) as no node at all. Inputs DirectML needs as constants come from
``ctx.const`` (folded at import, or specialised by the session), never from a guess.

Registering: ``@converter("Clip")`` on a function, or ``register("Add", fn)``; ``domain=`` for
ops outside ai.onnx (``"com.microsoft"``); ``kind=`` says how the op runs: ``"dml"`` (DirectML
operators), ``"jax"`` (a direct lowering where DirectML has no operator).
"""

from __future__ import annotations

import importlib as _importlib
import pkgutil as _pkgutil
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

KINDS = ("dml", "jax")


@dataclass(frozen=True)
class Entry:
    """One registered converter."""

    op_type: str
    domain: str
    fn: Callable
    group: str
    kind: str


class Registry:
    """Converters by (domain, op type); registering one twice raises."""

    def __init__(self):
        self._table: dict[tuple[str, str], Entry] = {}

    def register(
        self,
        op_type: str,
        fn: Callable,
        *,
        domain: str = "",
        kind: str = "dml",
        group: str | None = None,
    ) -> Callable:
        key = (domain, op_type)
        if key in self._table:
            raise ValueError(f"ONNX op type '{op_type}' (domain '{domain}') has a converter")
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got '{kind}'")
        group = (group or getattr(fn, "__module__", "")).rsplit(".", 1)[-1]
        self._table[key] = Entry(op_type, domain, fn, group, kind)
        return fn

    def get(self, domain: str, op_type: str) -> Callable | None:
        entry = self._table.get((domain, op_type))
        return None if entry is None else entry.fn

    def entry(self, domain: str, op_type: str) -> Entry | None:
        return self._table.get((domain, op_type))

    def entries(self) -> Iterator[Entry]:
        return iter(sorted(self._table.values(), key=lambda e: (e.domain, e.group, e.op_type)))

    def op_types(self, domain: str = "") -> set[str]:
        return {op for d, op in self._table if d == domain}

    def __contains__(self, op_type: str) -> bool:
        return ("", op_type) in self._table

    def __len__(self) -> int:
        return len(self._table)


REGISTRY = Registry()


def register(op_type: str, fn: Callable, *, domain: str = "", kind: str = "dml") -> Callable:
    """Adds a converter for an ONNX op type (one not registered yet); its group is the module
    that registers it."""
    caller = sys._getframe(1).f_globals.get("__name__", "")
    return REGISTRY.register(op_type, fn, domain=domain, kind=kind, group=caller)


def converter(*op_types: str, domain: str = "", kind: str = "dml") -> Callable:
    """Decorator: registers the function for each of ``op_types``."""

    def wrap(fn: Callable) -> Callable:
        for op in op_types:
            REGISTRY.register(op, fn, domain=domain, kind=kind, group=fn.__module__)
        return fn

    return wrap


def lookup(op_type: str, domain: str = "") -> Any:
    return REGISTRY.get(domain, op_type)


for _module in sorted(m.name for m in _pkgutil.iter_modules(__path__)):
    if not _module.startswith("_"):
        _importlib.import_module(f"{__name__}.{_module}")


class _DefaultDomain(Mapping):
    """The ai.onnx converters by op type (a live view of ``REGISTRY``)."""

    def __getitem__(self, op_type: str) -> Callable:
        fn = REGISTRY.get("", op_type)
        if fn is None:
            raise KeyError(op_type)
        return fn

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(REGISTRY.op_types("")))

    def __len__(self) -> int:
        return len(REGISTRY.op_types(""))


CONVERTERS = _DefaultDomain()


def markdown_table() -> str:
    """The converter table of docs/onnx.md: one row per op group, its ONNX op types (those
    lowered without a DML operator marked ``*``)."""
    groups: dict[tuple[str, str], list[str]] = {}
    for e in REGISTRY.entries():
        mark = "*" if e.kind == "jax" else ""
        groups.setdefault((e.domain or "ai.onnx", e.group), []).append(f"{e.op_type}{mark}")
    lines = ["| domain | group | op types |", "|---|---|---|"]
    for (domain, group), ops in sorted(groups.items()):
        lines.append(f"| {domain} | {group} | {', '.join(sorted(ops))} |")
    count = len(REGISTRY)
    lines.append("")
    lines.append(f"{count} op types have a converter.")
    return "\n".join(lines)


__all__ = [
    "CONVERTERS",
    "REGISTRY",
    "Entry",
    "Registry",
    "converter",
    "lookup",
    "markdown_table",
    "register",
]
