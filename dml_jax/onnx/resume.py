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

import numpy as np

from ..enums import DataType
from .importer import Value


@dataclass(frozen=True)
class Resumed:
    """A value a segment computed, as a later import takes it: an input of its graph type
    (``data_type``: INT64 as INT32, BOOL as UINT8), with the flags its ``Value`` had."""

    shape: tuple[int, ...]
    data_type: DataType
    is_bool: bool
    carried: int
    deps: frozenset

    @property
    def dtype(self) -> np.dtype:
        """The input's dtype: the graph type's, as the segment's program returned it."""
        return np.dtype(self.data_type.numpy_dtype)


def _subgraph_reads(node: Any) -> Iterable[str]:
    """Every name the subgraphs of ``node`` (If branches, Loop and Scan bodies) read, at any
    depth: those of the outer scope among them are captured from it."""
    for attr in node.attribute:
        graphs = list(attr.graphs) + ([attr.g] if attr.HasField("g") else [])
        for g in graphs:
            for inner in g.node:
                yield from (n for n in inner.input if n)
                yield from _subgraph_reads(inner)


def live_after(graph: Any, start: int) -> set[str]:
    """The names read by the graph's nodes from ``start`` on (subgraphs' captures too) and its
    outputs: what the rest of the model needs from before ``start``."""
    live = {o.name for o in graph.output}
    for node in graph.node[start:]:
        live.update(n for n in node.input if n)
        live.update(_subgraph_reads(node))
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
    return Resumed(tuple(v.shape), v.data_type, v.is_bool, v.carried, v.deps)


def merged(
    given: Sequence[tuple[str, Resumed]], new: Sequence[tuple[str, Resumed]]
) -> tuple[tuple[str, Resumed], ...]:
    """The resumed values of a run so far, sorted by name (part of its programs' keys)."""
    return tuple(sorted({**dict(given), **dict(new)}.items()))


__all__ = ["Resumed", "frontier", "live_after", "merged", "spec"]
