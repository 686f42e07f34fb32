"""Dispatchables: DML operators and graphs, validated and compiled, with their bind points."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..compile import compile_operator
from ..errors import ValidationError
from ..graph import compile_graph
from ..graph_json import graph_desc_from_json
from ..jsonforms import (
    COMPILE_GRAPH,
    COMPILE_TYPES,
    EXECUTION_FLAGS,
    GRAPH_TYPES,
    OTHER_DISPATCHABLE_TYPES,
    compile_type_of,
)
from ..jsonmodel import execution_flags_from_json, operator_desc_from_json
from ..tensor import TensorDesc
from .context import LoadContext, member


@dataclass(frozen=True)
class BindPoint:
    """A named group of tensors (a DML tensor field, or a graph's Inputs/Outputs).

    Attributes:
        name: e.g. ``InputTensor``, ``OutputTensors``.
        role: "input" or "output".
        slots: indices into the operator's input (or output) tensors, in order.
        descs: the tensors' descs (None: a graph input that feeds nothing).
    """

    name: str
    role: str
    slots: tuple[int, ...]
    descs: tuple[TensorDesc | None, ...]


@dataclass
class Dispatchable:
    """A compiled DML dispatchable.

    Attributes:
        name, path: its name and JSON path.
        op: the ``CompiledOperator`` (or compiled graph).
        compile_type: "DmlCompileOp" or "DmlCompileGraph".
        bind_points: inputs first, then outputs, in schema order.
        init_bindings: bind point name -> sources bound at initialization (OWNED_BY_DML inputs).
    """

    name: str
    path: str
    op: Any
    compile_type: str
    bind_points: tuple[BindPoint, ...]
    init_bindings: dict = field(default_factory=dict)


def _bind_points(op: Any) -> tuple[BindPoint, ...]:
    """Groups the compiled operator's tensor paths (``OutputTensors[1]``) by field name."""
    points: list[BindPoint] = []
    for role, paths, descs in (
        ("input", op.input_paths, op.input_descs),
        ("output", op.output_paths, op.output_descs),
    ):
        groups: dict[str, list[int]] = {}
        for i, p in enumerate(paths):
            groups.setdefault(p.split("[", 1)[0], []).append(i)
        for name, slots in groups.items():
            points.append(BindPoint(name, role, tuple(slots), tuple(descs[i] for i in slots)))
    return tuple(points)


class _GraphBindPoints:
    """A one-node graph (DmlCompileGraph) keeps its operator's bind point names."""

    def __init__(self, desc: Any, graph_op: Any):
        self.input_paths = tuple(p for p, _ in desc.input_slots())
        self.output_paths = tuple(p for p, _ in desc.output_slots())
        self.input_descs = graph_op.input_descs
        self.output_descs = graph_op.output_descs


def parse_dispatchable(ctx: LoadContext, name: str, obj: Any, feature_level: Any) -> Dispatchable:
    """One entry of ``dispatchables``: validates and compiles the DML operator (or graph).

    ``"type": "DML_GRAPH"`` is a multi-node graph whose bind points are ``Inputs`` and
    ``Outputs``; ``"dmlCompileType": "DmlCompileGraph"`` compiles one operator as a one-node
    graph that keeps the operator's bind points.
    """
    path = member("dispatchables", name)
    obj = ctx.object(obj, path)
    kind = ctx.string(ctx.require(obj, "type", path), member(path, "type"))
    if kind.lower() in OTHER_DISPATCHABLE_TYPES:
        raise ctx.fail(
            member(path, "type"),
            f"'{kind}' dispatchables are not supported by dml_jax (only DML operators and graphs)",
        )
    compile_type = compile_type_of(obj)
    if compile_type is None:
        allowed = " or ".join(json.dumps(t) for t in COMPILE_TYPES)
        raise ctx.fail(
            member(path, "dmlCompileType"),
            f"must be {allowed}, got {json.dumps(obj['dmlCompileType'])}",
        )
    try:
        flags = execution_flags_from_json(obj.get("executionFlags"), member(path, "executionFlags"))
        half = bool(flags & EXECUTION_FLAGS["ALLOW_HALF_PRECISION_COMPUTATION"])
        if kind in GRAPH_TYPES:
            # Intermediate edges may join different descs: DirectML reinterprets the bytes.
            op = compile_graph(
                graph_desc_from_json(obj),
                feature_level,
                allow_half_precision=half,
                reinterpret_edges=True,
            )
            compile_type, bind_source = COMPILE_GRAPH, op
        elif compile_type == COMPILE_GRAPH:
            graph = graph_desc_from_json(obj)
            op = compile_graph(graph, feature_level, allow_half_precision=half)
            bind_source = _GraphBindPoints(graph.nodes[0], op)
        else:
            desc = operator_desc_from_json(obj)
            op = compile_operator(desc, feature_level, allow_half_precision=half)
            bind_source = op
    except ValidationError as e:
        raise ctx.fail(path, str(e)) from None
    return Dispatchable(name, path, op, compile_type, _bind_points(bind_source))
