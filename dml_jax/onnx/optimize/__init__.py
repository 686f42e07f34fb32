"""Graph optimizations on an imported DML graph, as ONNX Runtime's graph transformers and its
DirectML provider's fusions make them before a model runs.

A rewrite is a function ``fn(g: Editor) -> int`` (how many places it rewrote) registered with
``@rewrite(name, level)`` in a module of this package; ``optimize`` runs every rewrite of the
session's level and below, in registration order, over the ``ImportedGraph`` that
``walk.import_graph`` made, and returns a new one. Rewrites see the graph after import: every
shape is concrete, ONNX's reshapes and transposes are views (a consumer's tensor desc reading
its producer's bytes), and constants enter through IDENTITY nodes that read constant graph
inputs (``Editor.constant`` sees through them).

Levels are onnxruntime's ``GraphOptimizationLevel`` names: ``disable``, ``basic``,
``extended``, ``all`` (each includes the ones before it).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ...errors import ValidationError
from ...graph import (
    ConstantDataNode,
    GraphDesc,
    InputGraphEdge,
    IntermediateGraphEdge,
    OutputGraphEdge,
)
from ..importer import ImportedGraph

ONNX = "ONNX"
LEVELS = ("disable", "basic", "extended", "all")
# onnxruntime's GraphOptimizationLevel values (ORT_DISABLE_ALL ... ORT_ENABLE_ALL).
_ORT_VALUES = {0: "disable", 1: "basic", 2: "extended", 99: "all"}

# A value in the graph: (node index, output slot), or (GRAPH_INPUT, graph input index).
Source = tuple[int, int]
GRAPH_INPUT = -1


@dataclass(frozen=True)
class Rewrite:
    """One registered rewrite: its switch name, the lowest level that runs it, the function."""

    name: str
    level: str
    fn: Callable[[Editor], int]
    doc: str = ""


REWRITES: dict[str, Rewrite] = {}


def rewrite(name: str, level: str) -> Callable:
    """Registers ``fn(g: Editor) -> int`` as the rewrite ``name``, run from ``level`` up."""
    if level not in LEVELS[1:]:
        raise ValueError(f"rewrite {name}: level must be one of {LEVELS[1:]}, got {level!r}")

    def register(fn: Callable[[Editor], int]) -> Callable[[Editor], int]:
        if name in REWRITES:
            raise ValueError(f"rewrite {name} is registered twice")
        REWRITES[name] = Rewrite(name, level, fn, (fn.__doc__ or "").strip().split("\n")[0])
        return fn

    return register


def level_name(level: Any) -> str:
    """The level's name from a name, onnxruntime's enum or its integer value (None: ``all``,
    onnxruntime's default)."""
    if level is None:
        return "all"
    value = getattr(level, "value", level)
    if isinstance(value, str):
        name = value.lower().removeprefix("ort_").removeprefix("enable_")
        name = {"disable_all": "disable"}.get(name, name)
        if name in LEVELS:
            return name
    elif isinstance(value, int | np.integer) and int(value) in _ORT_VALUES:
        return _ORT_VALUES[int(value)]
    raise ValidationError(
        f"{ONNX}: graph_optimization_level must be one of {', '.join(LEVELS)} (or onnxruntime's "
        f"GraphOptimizationLevel), got {level!r}"
    )


class Editor:
    """A mutable view of an imported DML graph for rewrites.

    Nodes keep their indices while a rewrite runs (a removed node becomes None, an added one is
    appended); ``finish`` drops removed and unused nodes and renumbers.
    """

    def __init__(self, imported: ImportedGraph):
        g = imported.graph
        self.imported = imported
        self.nodes: list[Any] = list(g.nodes)
        self.origin: list[int] = list(imported.origin)
        self.model_inputs = len(imported.input_names)
        self.constants: list[np.ndarray] = list(imported.constants)
        self.params: list[str | None] = list(imported.params) or [None] * len(self.constants)
        # (node, input slot) -> the value it reads
        self.reads: dict[tuple[int, int], Source] = {}
        for e in g.input_edges:
            self.reads[(e.to_node_index, e.to_node_input_index)] = (
                GRAPH_INPUT,
                e.graph_input_index,
            )
        for e in g.intermediate_edges:
            self.reads[(e.to_node_index, e.to_node_input_index)] = (
                e.from_node_index,
                e.from_node_output_index,
            )
        self.outputs: list[Source] = [(0, 0)] * g.output_count
        for e in g.output_edges:
            self.outputs[e.graph_output_index] = (e.from_node_index, e.from_node_output_index)

    # -- reading ---------------------------------------------------------------------------------

    def live(self) -> list[int]:
        """The indices of the nodes not removed."""
        return [n for n, d in enumerate(self.nodes) if d is not None]

    def source(self, n: int, slot: int) -> Source | None:
        """What input ``slot`` (an edge index: absent optional tensors counted) of node ``n``
        reads; None for an absent tensor."""
        return self.reads.get((n, slot))

    def users(self, src: Source) -> list[tuple[int, int]]:
        """The (node, input slot) pairs that read ``src``."""
        return [k for k, v in self.reads.items() if v == src and self.nodes[k[0]] is not None]

    def is_output(self, src: Source) -> bool:
        return src in self.outputs

    def only_user(self, src: Source) -> tuple[int, int] | None:
        """The one (node, slot) reading ``src`` when it has exactly one reader and is not a
        graph output (so a rewrite may fold it away)."""
        users = self.users(src)
        return users[0] if len(users) == 1 and not self.is_output(src) else None

    def input_desc(self, n: int, slot: int) -> Any:
        return self.nodes[n].edge_slots("input")[slot][1]

    def output_desc(self, src: Source) -> Any:
        if src[0] == GRAPH_INPUT:
            raise ValueError("a graph input has no output desc")
        return self.nodes[src[0]].edge_slots("output")[src[1]][1]

    def constant_index(self, src: Source) -> int | None:
        """The index into ``constants`` of the constant graph input ``src`` is (directly or
        through the IDENTITY node that reads it), else None."""
        if src[0] != GRAPH_INPUT:
            node = self.nodes[src[0]]
            if getattr(node, "operator_type", "") != "DML_OPERATOR_ELEMENT_WISE_IDENTITY":
                return None
            if node.scale_bias is not None or src[1] != 0:
                return None
            inner = self.reads.get((src[0], 0))
            if inner is None or inner[0] != GRAPH_INPUT:
                return None
            src = inner
        k = src[1] - self.model_inputs
        return k if k >= 0 else None

    def constant(self, src: Source) -> np.ndarray | None:
        """The value of ``src`` when it is a constant (a constant graph input, directly or
        through its IDENTITY node, or a ConstantDataNode read by its packed desc is not
        covered: None), in the graph's dtype and the desc's sizes."""
        k = self.constant_index(src)
        return None if k is None else self.constants[k]

    def param(self, src: Source) -> str | None:
        """The initializer name when ``src`` is a constant that is a parameter (``apply``
        may replace it), else None."""
        k = self.constant_index(src)
        return None if k is None else self.params[k]

    # -- writing ---------------------------------------------------------------------------------

    def add(self, desc: Any, inputs: Sequence[Source | None], origin: int) -> int:
        """Appends a node whose input slots (edge indices) read ``inputs``; returns its index.
        ``origin`` is the ONNX node it is reported under (that of a node it replaces)."""
        slots = desc.edge_slots("input")
        if len(slots) != len(inputs):
            raise AssertionError(f"{desc.operator_type}: {len(slots)} input slots, {len(inputs)}")
        n = len(self.nodes)
        self.nodes.append(desc)
        self.origin.append(origin)
        for k, ((_, d), src) in enumerate(zip(slots, inputs)):
            if (d is None) != (src is None):
                raise AssertionError(f"{desc.operator_type}: input slot {k} and its source")
            if src is not None:
                self.reads[(n, k)] = src
        return n

    def add_constant(self, array: np.ndarray, param: str | None = None) -> Source:
        """A new constant graph input holding ``array`` (graph dtype)."""
        self.constants.append(np.ascontiguousarray(array))
        self.params.append(param)
        return (GRAPH_INPUT, self.model_inputs + len(self.constants) - 1)

    def set_node(self, n: int, desc: Any) -> None:
        """Replaces node ``n``'s desc by one with the same input and output slots."""
        self.nodes[n] = desc

    def reroute(self, old: Source, new: Source) -> None:
        """Every reader of ``old`` (nodes and graph outputs) reads ``new`` instead."""
        for k, v in list(self.reads.items()):
            if v == old:
                self.reads[k] = new
        self.outputs = [new if o == old else o for o in self.outputs]

    def remove(self, *nodes: int) -> None:
        """Removes nodes (their readers must have been rerouted)."""
        for n in nodes:
            self.nodes[n] = None
            for k in [k for k in self.reads if k[0] == n]:
                del self.reads[k]

    # -- result ----------------------------------------------------------------------------------

    def finish(self) -> ImportedGraph:
        """The rewritten ``ImportedGraph``: removed nodes and nodes nothing reads dropped,
        indices renumbered, unused constants kept as inputs (a graph input may feed nothing)."""
        needed: set[int] = set()
        stack = [o[0] for o in self.outputs if o[0] != GRAPH_INPUT]
        while stack:
            n = stack.pop()
            if n in needed:
                continue
            needed.add(n)
            stack += [
                src[0] for (m, _), src in self.reads.items() if m == n and src[0] != GRAPH_INPUT
            ]
        keep = sorted(needed)
        index = {n: i for i, n in enumerate(keep)}
        input_edges, intermediate = [], []
        for (m, slot), src in sorted(self.reads.items()):
            if m not in index:
                continue
            if src[0] == GRAPH_INPUT:
                input_edges.append(InputGraphEdge(src[1], index[m], slot))
            else:
                intermediate.append(IntermediateGraphEdge(index[src[0]], src[1], index[m], slot))
        output_edges = []
        for j, o in enumerate(self.outputs):
            if o[0] == GRAPH_INPUT:
                raise AssertionError("a rewrite made a graph output read a graph input directly")
            output_edges.append(OutputGraphEdge(index[o[0]], o[1], j))
        graph = GraphDesc(
            input_count=self.model_inputs + len(self.constants),
            output_count=len(self.outputs),
            nodes=tuple(self.nodes[n] for n in keep),
            input_edges=tuple(input_edges),
            output_edges=tuple(output_edges),
            intermediate_edges=tuple(intermediate),
        )
        return replace(
            self.imported,
            graph=graph,
            constants=tuple(self.constants),
            params=tuple(self.params),
            origin=tuple(self.origin[n] for n in keep),
        )


def _load_rewrites() -> None:
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")


def optimize(
    imported: ImportedGraph, level: Any = "all", disabled: Iterable[str] = ()
) -> tuple[ImportedGraph, dict[str, int]]:
    """``imported`` with every rewrite of ``level`` and below applied, except those named in
    ``disabled``; also how many places each rewrite changed."""
    name = level_name(level)
    _load_rewrites()
    disabled = set(disabled)
    unknown = disabled - set(REWRITES)
    if unknown:
        raise ValidationError(
            f"{ONNX}: disabled optimizers: unknown name(s) {', '.join(sorted(unknown))}; known: "
            f"{', '.join(REWRITES)}"
        )
    counts: dict[str, int] = {}
    if imported.graph is None or name == "disable":
        return imported, counts
    rank = LEVELS.index(name)
    for r in REWRITES.values():
        if LEVELS.index(r.level) > rank or r.name in disabled:
            continue
        editor = Editor(imported)
        count = int(r.fn(editor))
        if count:
            imported = editor.finish()
            counts[r.name] = count
    return imported, counts


__all__ = [
    "GRAPH_INPUT",
    "LEVELS",
    "REWRITES",
    "ConstantDataNode",
    "Editor",
    "Rewrite",
    "Source",
    "level_name",
    "optimize",
    "rewrite",
]
