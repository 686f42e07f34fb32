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
import math
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
# onnxruntime's GraphOptimizationLevel values (ORT_DISABLE_ALL ... ORT_ENABLE_ALL). Its
# ORT_ENABLE_LAYOUT (3: basic, extended and layout rewrites) is ``all`` here, whose rewrites are
# the layout ones.
_ORT_VALUES = {0: "disable", 1: "basic", 2: "extended", 3: "all", 99: "all"}

# A value in the graph: (node index, output slot), or (GRAPH_INPUT, graph input index).
Source = tuple[int, int]
GRAPH_INPUT = -1


@dataclass(frozen=True)
class Rewrite:
    """One registered rewrite: its switch name, the lowest level that runs it, the function;
    ``order`` places it among the rewrites of its level (lower first; then registration)."""

    name: str
    level: str
    fn: Callable[[Editor], int]
    doc: str = ""
    order: int = 0


REWRITES: dict[str, Rewrite] = {}


def rewrite(name: str, level: str, order: int = 0) -> Callable:
    """Registers ``fn(g: Editor) -> int`` as the rewrite ``name``, run from ``level`` up.

    Rewrites run level by level (every ``basic`` one before the ``extended`` ones, as
    onnxruntime runs its levels), within a level by ``order`` and then registration order: a
    rewrite that consumes what others make (the fused activations) takes a higher ``order``."""
    if level not in LEVELS[1:]:
        raise ValueError(f"rewrite {name}: level must be one of {LEVELS[1:]}, got {level!r}")

    def register(fn: Callable[[Editor], int]) -> Callable[[Editor], int]:
        if name in REWRITES:
            raise ValueError(f"rewrite {name} is registered twice")
        doc = (fn.__doc__ or "").strip().split("\n")[0]
        REWRITES[name] = Rewrite(name, level, fn, doc, order)
        return fn

    return register


def reshape_strides(
    sizes: Sequence[int], strides: Sequence[int], new_sizes: Sequence[int]
) -> tuple[int, ...] | None:
    """Strides that read the elements a (``sizes``, ``strides``) view reads, in the same
    row-major order, under ``new_sizes`` (same element count); None when no strides can
    (a reshape that would need a copy). Size-1 dimensions are dropped first; then each run of
    old dimensions whose product is that of a run of new ones must be contiguous among
    themselves (``stride[i] == stride[i + 1] * size[i + 1]``; stride 0 runs qualify), and the
    new run takes strides nested inside the run's innermost stride."""
    if math.prod(sizes) != math.prod(new_sizes):
        return None
    old = [(n, s) for n, s in zip(sizes, strides) if n != 1]
    result = [0] * len(new_sizes)
    i = j = 0
    new = list(new_sizes)
    while i < len(old) or j < len(new):
        # the next run: old dims [i, i2) and new dims [j, j2) of equal product
        if i >= len(old):  # trailing new size-1 dims
            if new[j] != 1:
                return None
            result[j] = 1
            j += 1
            continue
        if j < len(new) and new[j] == 1:
            result[j] = 1
            j += 1
            continue
        if j >= len(new):
            return None
        i2, j2 = i + 1, j + 1
        po, pn = old[i][0], new[j]
        while po != pn:
            if po < pn:
                if i2 >= len(old):
                    return None
                po *= old[i2][0]
                i2 += 1
            else:
                if j2 >= len(new):
                    return None
                pn *= new[j2]
                j2 += 1
        for k in range(i, i2 - 1):
            if old[k][1] != old[k + 1][1] * old[k + 1][0]:
                return None
        stride = old[i2 - 1][1]
        for k in range(j2 - 1, j - 1, -1):
            result[k] = stride
            stride *= new[k]
        i, j = i2, j2
    return tuple(result)


def level_name(level: Any, field: str = "graph_optimization_level") -> str:
    """The level's name from a name, onnxruntime's enum or its integer value (None: ``all``,
    onnxruntime's default); anything else is a ValidationError naming ``field``."""
    if level is None:
        return "all"
    value = getattr(level, "value", level)
    if isinstance(value, str):
        name = value.lower().removeprefix("ort_").removeprefix("enable_")
        name = {"disable_all": "disable", "layout": "all"}.get(name, name)
        if name in LEVELS:
            return name
    elif isinstance(value, int | np.integer) and int(value) in _ORT_VALUES:
        return _ORT_VALUES[int(value)]
    raise ValidationError(
        f"{ONNX}: {field} must be one of {', '.join(LEVELS)} (or onnxruntime's "
        f"GraphOptimizationLevel), got {level!r}"
    )


def op_class(name: str) -> type:
    """The descriptor class of the DML operator ``name`` (without ``DML_OPERATOR_``), for the
    rewrites' new nodes."""
    from ...registry import lookup

    return lookup(f"DML_OPERATOR_{name}").desc_class


class Editor:
    """A mutable view of an imported DML graph for rewrites.

    Nodes keep their indices while a rewrite runs (a removed node becomes None, an added one is
    appended); ``finish`` drops removed and unused nodes and renumbers.
    """

    def __init__(self, imported: ImportedGraph, feature_level: Any = None):
        g = imported.graph
        self.imported = imported
        self.feature_level = feature_level
        self.nodes: list[Any] = list(g.nodes)
        self.origin: list[int] = list(imported.origin)
        self.model_inputs = len(imported.input_names)
        self.constants: list[np.ndarray] = list(imported.constants)
        self.params: list[str | None] = list(imported.params) or [None] * len(self.constants)
        # (node, input slot) -> the value it reads, and its inverse (kept in step by ``_read``)
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
        self._readers: dict[Source, set[tuple[int, int]]] = {}
        for key, src in self.reads.items():
            self._readers.setdefault(src, set()).add(key)
        self.outputs: list[Source] = [(0, 0)] * g.output_count
        for e in g.output_edges:
            self.outputs[e.graph_output_index] = (e.from_node_index, e.from_node_output_index)

    def _read(self, key: tuple[int, int], src: Source | None) -> None:
        """Input ``key`` reads ``src`` (None: nothing)."""
        old = self.reads.pop(key, None)
        if old is not None:
            self._readers[old].discard(key)
        if src is not None:
            self.reads[key] = src
            self._readers.setdefault(src, set()).add(key)

    # -- reading ---------------------------------------------------------------------------------

    def op(self, n: int) -> str | None:
        """Node ``n``'s DML operator type without ``DML_OPERATOR_`` (None: removed, or a JAX
        function node)."""
        node = self.nodes[n] if 0 <= n < len(self.nodes) else None
        name = getattr(node, "operator_type", None)
        if node is None or not isinstance(name, str) or not name.startswith("DML_OPERATOR_"):
            return None
        return name.removeprefix("DML_OPERATOR_")

    def live(self) -> list[int]:
        """The indices of the nodes not removed."""
        return [n for n, d in enumerate(self.nodes) if d is not None]

    def source(self, n: int, slot: int) -> Source | None:
        """What input ``slot`` (an edge index: absent optional tensors counted) of node ``n``
        reads; None for an absent tensor."""
        return self.reads.get((n, slot))

    def users(self, src: Source) -> list[tuple[int, int]]:
        """The (node, input slot) pairs that read ``src``."""
        return sorted(k for k in self._readers.get(src, ()) if self.nodes[k[0]] is not None)

    def is_output(self, src: Source) -> bool:
        return src in self.outputs

    def only_user(self, src: Source) -> tuple[int, int] | None:
        """The one (node, slot) reading ``src`` when it has exactly one reader and is not a
        graph output (so a rewrite may fold it away)."""
        users = self.users(src)
        return users[0] if len(users) == 1 and not self.is_output(src) else None

    def reader(self, src: Source, *types: str) -> tuple[int, int] | None:
        """The one reader of ``src`` (as ``only_user``) when its operator type is one of
        ``types`` (none given: any DML operator)."""
        user = self.only_user(src)
        if user is None or self.op(user[0]) is None:
            return None
        return user if not types or self.op(user[0]) in types else None

    def producer(self, n: int, slot: int, *types: str) -> Source | None:
        """The node output input ``slot`` of node ``n`` reads, when it is a node's (not a graph
        input) of one of ``types`` (none given: any DML operator)."""
        src = self.source(n, slot)
        if src is None or src[0] == GRAPH_INPUT or self.op(src[0]) is None:
            return None
        return src if not types or self.op(src[0]) in types else None

    def input_desc(self, n: int, slot: int) -> Any:
        return self.nodes[n].edge_slots("input")[slot][1]

    def reads_as_written(self, n: int, slot: int) -> bool:
        """Input ``slot`` of node ``n`` reads its source exactly as it was written: the same
        sizes and a packed layout at both ends (no view, broadcast or reinterpretation)."""
        src = self.source(n, slot)
        if src is None or src[0] == GRAPH_INPUT:
            return False
        mine, theirs = self.input_desc(n, slot), self.output_desc(src)
        return (
            mine.sizes == theirs.sizes
            and mine.data_type == theirs.data_type
            and mine.is_packed
            and theirs.is_packed
        )

    def reads_packed(self, n: int, slot: int) -> bool:
        """Input ``slot`` of node ``n`` reads all of its source's packed elements in order,
        under any sizes (a reshape, no broadcast): element-wise, the same values."""
        src = self.source(n, slot)
        if src is None or src[0] == GRAPH_INPUT:
            return False
        mine, theirs = self.input_desc(n, slot), self.output_desc(src)
        return (
            mine.element_count == theirs.element_count
            and mine.data_type == theirs.data_type
            and is_dense(mine)
            and theirs.is_packed
        )

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

    def scalar(self, src: Source) -> float | None:
        """The value of ``src`` when it is a constant that is not a parameter and all of whose
        elements are equal (a scalar however it is broadcast), else None."""
        if self.param(src) is not None:
            return None
        value = self.constant(src)
        if value is None or value.size == 0:
            return None
        flat = np.asarray(value).reshape(-1)
        first = flat[0]
        if not np.all(flat == first):
            return None
        return float(first)

    def is_scalar(self, src: Source, value: float, rtol: float | None = None) -> bool:
        """``src`` is a non-parameter constant scalar equal to ``value`` within ``rtol``
        (default: the constant's own type rounds ``value`` to it: its machine epsilon, so
        float16's sqrt(2) is sqrt(2); 0 for integers)."""
        got = self.scalar(src)
        if got is None:
            return False
        if rtol is None:
            dtype = np.asarray(self.constant(src)).dtype
            rtol = float(np.finfo(dtype).eps) if dtype.kind == "f" else 0.0
        return abs(got - value) <= rtol * abs(value)

    def param(self, src: Source) -> str | None:
        """The initializer name when ``src`` is a constant that is a parameter (``apply``
        may replace it), else None."""
        k = self.constant_index(src)
        return None if k is None else self.params[k]

    def valid(self, desc: Any) -> bool:
        """Whether DirectML accepts ``desc`` at the session's feature level (a rewrite makes
        only nodes that pass, so a model that compiled unoptimized still compiles)."""
        from ...compile import validate
        from ...enums import DataType
        from ...support import beyond_tables

        try:
            # as the session compiles: FLOAT64 beyond the support tables (program.py)
            with beyond_tables({DataType.FLOAT64}):
                validate(desc, self.feature_level)
        except ValidationError:
            return False
        return True

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
                self._read((n, k), src)
        return n

    def add_constant(self, array: np.ndarray, param: str | None = None) -> Source:
        """A new constant graph input holding ``array`` (graph dtype)."""
        self.constants.append(np.ascontiguousarray(array))
        self.params.append(param)
        return (GRAPH_INPUT, self.model_inputs + len(self.constants) - 1)

    def add_constant_node(
        self, array: np.ndarray, data_type: Any, param: str | None = None
    ) -> Source:
        """A new constant entering as the importer makes them: a graph input read once by an
        IDENTITY node writing it packed (readers view that output as they like); its source."""
        from ...tensor import TensorDesc

        array = np.ascontiguousarray(np.asarray(array).astype(data_type.numpy_dtype))
        sizes = tuple(array.shape) or (1,)
        desc = TensorDesc(data_type, sizes)
        identity = op_class("ELEMENT_WISE_IDENTITY")(desc, desc)
        src = self.add_constant(array.reshape(sizes), param)
        return (self.add(identity, [src], -1), 0)

    def add_data(self, data: bytes) -> Source:
        """A new constant data node (``ConstantDataNode``) holding ``data``; its source."""
        from ...graph import ConstantDataNode

        self.nodes.append(ConstantDataNode(data))
        self.origin.append(-1)
        return (len(self.nodes) - 1, 0)

    def set_node(self, n: int, desc: Any) -> None:
        """Replaces node ``n``'s desc by one with the same input and output slots."""
        self.nodes[n] = desc

    def reroute(self, old: Source, new: Source) -> None:
        """Every reader of ``old`` (nodes and graph outputs) reads ``new`` instead."""
        for k in list(self._readers.get(old, ())):
            self._read(k, new)
        self.outputs = [new if o == old else o for o in self.outputs]

    def set_input(self, n: int, slot: int, src: Source | None) -> None:
        """Input ``slot`` of node ``n`` reads ``src`` (None: nothing, for a slot the node's new
        desc leaves absent)."""
        self._read((n, slot), src)

    def remove(self, *nodes: int) -> None:
        """Removes nodes (their readers must have been rerouted)."""
        for n in nodes:
            node = self.nodes[n]
            slots = len(node.edge_slots("input")) if hasattr(node, "edge_slots") else 0
            self.nodes[n] = None
            for k in range(slots):
                self._read((n, k), None)

    def prune(self) -> None:
        """Removes the nodes that no longer reach a graph output (what a rewrite left behind:
        the IDENTITY of a constant it folded), so later rewrites count only real readers."""
        needed = self._needed()
        for n, node in enumerate(self.nodes):
            if node is not None and n not in needed:
                self.remove(n)

    def _needed(self) -> set[int]:
        feeders: dict[int, list[int]] = {}
        for (m, _), src in self.reads.items():
            if src[0] != GRAPH_INPUT:
                feeders.setdefault(m, []).append(src[0])
        needed: set[int] = set()
        stack = [o[0] for o in self.outputs if o[0] != GRAPH_INPUT]
        while stack:
            n = stack.pop()
            if n in needed:
                continue
            needed.add(n)
            stack += feeders.get(n, [])
        return needed

    # -- result ----------------------------------------------------------------------------------

    def finish(self) -> ImportedGraph:
        """The rewritten ``ImportedGraph``: removed nodes, nodes nothing reads and constants
        nothing reads dropped, indices renumbered."""
        keep = sorted(self._needed())
        index = {n: i for i, n in enumerate(keep)}
        # constants nothing reads any more are dropped (a DML graph input with no edge has no
        # desc to bind it by); the model's own inputs keep their indices
        used = sorted({src[1] for (m, _), src in self.reads.items()
                       if m in index and src[0] == GRAPH_INPUT and src[1] >= self.model_inputs})  # fmt: skip
        renumber = {i: i for i in range(self.model_inputs)}
        renumber.update({k: self.model_inputs + j for j, k in enumerate(used)})
        constants = [self.constants[k - self.model_inputs] for k in used]
        params = [self.params[k - self.model_inputs] for k in used]
        input_edges, intermediate = [], []
        for (m, slot), src in sorted(self.reads.items()):
            if m not in index:
                continue
            if src[0] == GRAPH_INPUT:
                input_edges.append(InputGraphEdge(renumber[src[1]], index[m], slot))
            else:
                intermediate.append(IntermediateGraphEdge(index[src[0]], src[1], index[m], slot))
        output_edges = []
        for j, o in enumerate(self.outputs):
            if o[0] == GRAPH_INPUT:
                raise AssertionError("a rewrite made a graph output read a graph input directly")
            output_edges.append(OutputGraphEdge(index[o[0]], o[1], j))
        graph = GraphDesc(
            input_count=self.model_inputs + len(constants),
            output_count=len(self.outputs),
            nodes=tuple(self.nodes[n] for n in keep),
            input_edges=tuple(input_edges),
            output_edges=tuple(output_edges),
            intermediate_edges=tuple(intermediate),
        )
        return replace(
            self.imported,
            graph=graph,
            constants=tuple(constants),
            params=tuple(params),
            origin=tuple(self.origin[n] for n in keep),
        )


def is_dense(desc: Any) -> bool:
    """``desc`` reads its elements packed in row-major order (strides of size-1 dimensions,
    which address nothing, ignored)."""
    from ...tensor import packed_strides

    if desc.strides is None:
        return True
    return all(n == 1 or s == p for n, s, p in
               zip(desc.sizes, desc.strides, packed_strides(desc.sizes)))  # fmt: skip


def with_input_desc(desc: Any, slot: int, tensor: Any) -> Any:
    """``desc`` with the tensor of input edge ``slot`` (DirectML's edge numbering: absent
    optional tensors and each element of a tensor array counted) replaced by ``tensor``."""
    k = 0
    for f in desc.declared("input"):
        value = getattr(desc, f.name)
        if f.metadata["array"]:
            items = list(value or ())
            if slot < k + len(items):
                items[slot - k] = tensor
                return replace(desc, **{f.name: tuple(items)})
            k += len(items)
        else:
            if slot == k:
                return replace(desc, **{f.name: tensor})
            k += 1
    raise IndexError(f"{desc.operator_type} has no input edge {slot}")


def _load_rewrites() -> None:
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")


def disabled_names(disabled: Iterable[str] | None, field: str = "disabled_optimizers") -> frozenset:
    """The rewrite names of ``disabled`` (a name or an iterable of names), each one known."""
    _load_rewrites()
    if disabled is None:
        return frozenset()
    names = frozenset([disabled] if isinstance(disabled, str) else disabled)
    unknown = sorted(str(n) for n in names - set(REWRITES))
    if unknown:
        raise ValidationError(
            f"{ONNX}: {field}: unknown optimizer name(s) {', '.join(unknown)}; known: "
            f"{', '.join(REWRITES)}"
        )
    return names


def optimize(
    imported: ImportedGraph,
    level: Any = "all",
    disabled: Iterable[str] = (),
    feature_level: Any = None,
) -> tuple[ImportedGraph, dict[str, int]]:
    """``imported`` with every rewrite of ``level`` and below applied, except those named in
    ``disabled``; also how many places each rewrite changed (also kept in the result's
    ``optimizations``). ``feature_level``: the level the graph will be compiled at (new nodes
    must validate there; None: the newest)."""
    name = level_name(level)
    disabled = disabled_names(disabled)
    counts: dict[str, int] = {}
    if imported.graph is None or name == "disable":
        return imported, counts
    rank = LEVELS.index(name)
    ordered = sorted(REWRITES.values(), key=lambda r: (LEVELS.index(r.level), r.order))
    # one editor for every rewrite (built and finished once: the graph's records are costly
    # to make), pruned after each rewrite that changed something
    editor = Editor(imported, feature_level)
    for r in ordered:
        if LEVELS.index(r.level) > rank or r.name in disabled:
            continue
        count = int(r.fn(editor))
        if count:
            editor.prune()
            counts[r.name] = counts.get(r.name, 0) + count
    if counts:
        imported = replace(editor.finish(), optimizations=tuple(counts.items()))
    return imported, counts


__all__ = [
    "GRAPH_INPUT",
    "LEVELS",
    "REWRITES",
    "ConstantDataNode",
    "Editor",
    "Rewrite",
    "Source",
    "disabled_names",
    "is_dense",
    "level_name",
    "optimize",
    "reshape_strides",
    "rewrite",
    "with_input_desc",
]
