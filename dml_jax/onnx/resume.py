"""Segments that hand their values on: where ``InferenceSession.run`` computes run-time sizes
(``NeedsSizes``: a NonZero's count, NonMaxSuppression's selections, a run-time If's branch) by
the device program of the import up to the node that needs them (a segment), that program also
returns the values it computed that the rest of the model reads (its *frontier*), left on the
device; the next segment and the final program take them as inputs (``resumed``) instead of
computing them again from the model's inputs. A detector's backbone then runs once an image,
not once per segment and again in the final program.

Only the top level of the graph is cut: values inside subgraphs are never handed on (a
subgraph's nodes run where its node does), and values known at import (shapes, constants,
values of the parameters alone) are recomputed by each import, as they cost nothing at run
time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .importer import Value, elem_of


@dataclass(frozen=True)
class Resumed:
    """A value a segment computed, as a later import takes it: an input of that shape and ONNX
    element type (``importer.elem_of``: the graph holds it as it held the value), computed from
    the model inputs ``deps``. The segment's program returns it as it returns any output; the
    next program takes it as it takes a model input."""

    shape: tuple[int, ...]
    elem: int
    deps: frozenset


def free_names(graph: Any) -> list[str]:
    """The names ``graph`` (and the subgraphs of its nodes) reads from the enclosing scope, in
    the order they are first read."""
    found: list[str] = []

    def visit(g: Any, defined: set) -> None:
        defined = set(defined) | {i.name for i in g.input} | {i.name for i in g.initializer}
        for node in g.node:
            for name in node.input:
                if name and name not in defined and name not in found:
                    found.append(name)
            for a in node.attribute:
                for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                    visit(sub, defined)
            defined |= set(node.output)

    visit(graph, set())
    return found


def live_after(graph: Any, start: int) -> set[str]:
    """The names read by the graph's nodes from ``start`` on (and by their subgraphs, from the
    enclosing scope) and its outputs: what the rest of the model needs from before ``start``."""
    live = {o.name for o in graph.output}
    for node in graph.node[start:]:
        live.update(n for n in node.input if n)
        for a in node.attribute:
            for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                live.update(free_names(sub))
    return live


def frontier(
    values: Mapping[str, Any],
    graph: Any,
    start: int,
    model_inputs: Iterable[str],
    resumed: Mapping[str, Resumed],
) -> list[tuple[str, Value]]:
    """The values computed before node ``start`` that the rest of the model reads, by name
    (sorted): tensors computed on the device from the model's inputs, which are not model
    inputs themselves nor handed on by an earlier segment."""
    skip = set(model_inputs) | set(resumed)
    out = []
    for name in sorted(live_after(graph, start)):
        v = values.get(name)
        if name in skip or not isinstance(v, Value) or v.const is not None or not v.deps:
            continue
        out.append((name, v))
    return out


def spec(v: Value) -> Resumed:
    return Resumed(tuple(v.shape), elem_of(v), v.deps)


def merged(
    given: Sequence[tuple[str, Resumed]], new: Sequence[tuple[str, Resumed]]
) -> tuple[tuple[str, Resumed], ...]:
    """The resumed values of a run so far, sorted by name (part of its programs' keys)."""
    return tuple(sorted({**dict(given), **dict(new)}.items()))


__all__ = ["Resumed", "free_names", "frontier", "live_after", "merged", "spec"]
