"""Graphs in DxDispatch JSON: ``graph_from_json`` reads a DML_GRAPH dispatchable (or one
operator dispatchable as a one-node graph) into a ``GraphDesc``; ``graph_to_json`` writes one."""

from __future__ import annotations

import base64
import binascii
from dataclasses import fields
from typing import Any

from .errors import ValidationError, as_int
from .fields import INPUT, OUTPUT, dml_member_name
from .graph import (
    GRAPH,
    ConstantDataNode,
    FunctionNode,
    GraphDesc,
    InputGraphEdge,
    IntermediateGraphEdge,
    OutputGraphEdge,
)
from .jsonforms import COMPILE_TYPES, GRAPH_KEYS, GRAPH_TYPES, compile_type_of
from .jsonmodel import execution_flags_from_json, operator_desc_from_json, operator_desc_to_json

CONSTANT = "CONSTANT"  # the type of a constant data node (DML_GRAPH_NODE_TYPE_CONSTANT)

_JSON_EDGES = (
    ("InputEdges", InputGraphEdge),
    ("OutputEdges", OutputGraphEdge),
    ("IntermediateEdges", IntermediateGraphEdge),
)


def graph_from_json(obj: Any) -> GraphDesc:
    """Builds a ``GraphDesc`` from a DxDispatch-style JSON object (as returned by ``json.load``).

    Two shapes are accepted:

    * A graph, ``{"type": "DML_GRAPH", "InputCount": 1, "OutputCount": 1, "Nodes": [...],
      "InputEdges": [...], "OutputEdges": [...], "IntermediateEdges": [...]}``, with the
      DML_GRAPH_DESC member names. Each node is an operator dispatchable
      (``{"type": "ELEMENT_WISE_CLIP", "desc": {...}}``) or a constant data node
      (``{"type": "CONSTANT", "Data": "<base64>", "DataSize": N}``, DataSize optional), with
      an optional unique ``"Name"``.
      Each edge has the member names of its DML_*_GRAPH_EDGE_DESC (``GraphInputIndex``,
      ``ToNodeIndex``, ``ToNodeInputIndex``, ...) and an optional ``"Name"``; ``FromNodeIndex`` and
      ``ToNodeIndex`` take a node index or a node's ``Name``. InputEdges and IntermediateEdges
      may be omitted (empty); the counts and OutputEdges are required.
    * One operator dispatchable (typically with ``"dmlCompileType": "DmlCompileGraph"``): a
      one-node graph whose inputs and outputs are the operator's tensors in schema order.

    Raises:
        ValidationError: naming the JSON path (``DML_GRAPH: Nodes[1].desc.Axis ...``).
    """
    if not isinstance(obj, dict):
        raise ValidationError(f"{GRAPH}: a graph must be a JSON object, got {type(obj).__name__}")
    if compile_type_of(obj) is None:
        raise ValidationError(
            f"{GRAPH}: dmlCompileType must be one of "
            f"{', '.join(COMPILE_TYPES)}, got {obj['dmlCompileType']!r}"
        )
    return graph_desc_from_json(obj)


def graph_to_json(graph: GraphDesc) -> dict:
    """The DML_GRAPH dispatchable of a ``GraphDesc``, as ``graph_from_json`` reads it.

    Nodes are written by ``operator_desc_to_json`` and referred to by index; every edge list is
    written, empty ones included. ``graph_from_json(graph_to_json(g)) == g``.

    Raises:
        ValidationError: if ``graph`` is not a ``GraphDesc``.
    """
    if not isinstance(graph, GraphDesc):
        raise ValidationError(f"{GRAPH}: expected a GraphDesc, got {type(graph).__name__}")

    def edge(e: Any) -> dict:
        return {dml_member_name(f.name): getattr(e, f.name) for f in fields(e)}

    out: dict[str, Any] = {
        "type": GRAPH,
        "InputCount": graph.input_count,
        "OutputCount": graph.output_count,
        "Nodes": [_node_to_json(node) for node in graph.nodes],
    }
    out["InputEdges"] = [edge(e) for e in graph.input_edges]
    out["OutputEdges"] = [edge(e) for e in graph.output_edges]
    out["IntermediateEdges"] = [edge(e) for e in graph.intermediate_edges]
    return out


def _node_to_json(node: Any) -> dict:
    if isinstance(node, ConstantDataNode):
        data = base64.b64encode(node.data).decode("ascii")
        return {"type": CONSTANT, "DataSize": node.data_size, "Data": data}
    if isinstance(node, FunctionNode):
        raise ValidationError(
            f"{GRAPH}: node {node.operator_type} is computed by JAX, not a DML operator: the "
            "graph has no DML_GRAPH_DESC form"
        )
    return operator_desc_to_json(node)


def _constant_from_json(item: dict) -> ConstantDataNode:
    """``{"type": "CONSTANT", "Data": "<base64>", "DataSize": N}`` (DataSize optional)."""
    what = ConstantDataNode.struct_name
    for key in item:
        if key not in ("type", "Data", "DataSize"):
            raise ValidationError(
                f"{what}: unknown member {key!r}; a {CONSTANT} node takes: type, Data (base64), "
                "DataSize, Name"
            )
    data = item.get("Data")
    if not isinstance(data, str):
        raise ValidationError(f"{what}: Data must be a base64 string, got {data!r:.60}")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise ValidationError(f"{what}: Data is not valid base64") from None
    if "DataSize" in item:
        size = as_int(item["DataSize"], f"{what}: DataSize")
        if size != len(raw):
            raise ValidationError(
                f"{what}: DataSize must equal the {len(raw)} bytes of Data, got {size}"
            )
    return ConstantDataNode(raw)


def graph_desc_from_json(obj: dict) -> GraphDesc:
    """``graph_from_json`` for a dispatchable object whose ``dmlCompileType`` its caller has
    already checked (the model runner, which names the file and JSON path).

    Raises:
        ValidationError: as ``graph_from_json``.
    """
    if obj.get("type") not in GRAPH_TYPES:
        return _one_node_graph(obj)
    for key in obj:
        if key not in GRAPH_KEYS:
            raise ValidationError(
                f"{GRAPH}: unknown member {key!r}; a graph takes: {', '.join(GRAPH_KEYS)}"
            )
    if "executionFlags" in obj:
        execution_flags_from_json(obj["executionFlags"], f"{GRAPH}: executionFlags")
    for key in ("InputCount", "OutputCount", "Nodes", "OutputEdges"):
        if key not in obj:
            raise ValidationError(f"{GRAPH}: {key} is required")
    nodes, names = _nodes_from_json(obj["Nodes"])
    edges = {}
    for member, cls in _JSON_EDGES:
        items = obj.get(member, [])
        if not isinstance(items, list):
            raise ValidationError(f"{GRAPH}: {member} must be a JSON array, got {items!r}")
        edges[member] = [
            _edge_from_json(item, f"{member}[{i}]", cls, names) for i, item in enumerate(items)
        ]
    return GraphDesc(
        obj["InputCount"],
        obj["OutputCount"],
        nodes,
        edges["InputEdges"],
        edges["OutputEdges"],
        edges["IntermediateEdges"],
    )


def _one_node_graph(obj: dict) -> GraphDesc:
    node = operator_desc_from_json(obj)
    # Graph inputs/outputs number the present tensors; node edge indices count absent ones too.
    ins = [k for k, (_, t) in enumerate(node.edge_slots(INPUT)) if t is not None]
    outs = [k for k, (_, t) in enumerate(node.edge_slots(OUTPUT)) if t is not None]
    return GraphDesc(
        len(ins),
        len(outs),
        (node,),
        tuple(InputGraphEdge(g, 0, k) for g, k in enumerate(ins)),
        tuple(OutputGraphEdge(0, k, g) for g, k in enumerate(outs)),
    )


def _nodes_from_json(items: Any) -> tuple[list[Any], dict[str, int]]:
    if not isinstance(items, list):
        raise ValidationError(f"{GRAPH}: Nodes must be a JSON array, got {items!r}")
    nodes, names = [], {}
    for n, item in enumerate(items):
        if not isinstance(item, dict):
            raise ValidationError(
                f"{GRAPH}: Nodes[{n}] must be a JSON object (an operator "
                f"dispatchable), got {item!r}"
            )
        if "Name" in item:
            name = item["Name"]
            if not isinstance(name, str) or not name:
                raise ValidationError(
                    f"{GRAPH}: Nodes[{n}].Name must be a non-empty string, got {name!r}"
                )
            if name in names:
                raise ValidationError(
                    f"{GRAPH}: Nodes[{n}].Name {name!r} is already the name of "
                    f"Nodes[{names[name]}]; node names must be unique"
                )
            names[name] = n
        fields_ = {k: v for k, v in item.items() if k != "Name"}
        try:
            if fields_.get("type") == CONSTANT:
                nodes.append(_constant_from_json(fields_))
            else:
                nodes.append(operator_desc_from_json(fields_))
        except ValidationError as e:
            raise ValidationError(f"{GRAPH}: Nodes[{n}]: {e}") from None
    return nodes, names


def _edge_from_json(item: Any, path: str, cls: type, names: dict[str, int]) -> Any:
    members = {dml_member_name(f.name): f.name for f in fields(cls)}
    if not isinstance(item, dict):
        raise ValidationError(f"{GRAPH}: {path} must be a JSON object, got {item!r}")
    for key in item:
        if key not in members and key != "Name":
            raise ValidationError(
                f"{GRAPH}: {path} has unknown member {key!r}; "
                f"{cls.struct_name} members: {', '.join(members)}, Name"
            )
    if "Name" in item and not isinstance(item["Name"], str):
        raise ValidationError(f"{GRAPH}: {path}.Name must be a string, got {item['Name']!r}")
    values = {}
    for member, name in members.items():
        if member not in item:
            raise ValidationError(f"{GRAPH}: {path}.{member} is required")
        value = item[member]
        if member in ("FromNodeIndex", "ToNodeIndex") and isinstance(value, str):
            if value not in names:
                known = ", ".join(names) or "none"
                raise ValidationError(
                    f"{GRAPH}: {path}.{member} names no node: {value!r} (node names: {known})"
                )
            value = names[value]
        values[name] = as_int(value, f"{GRAPH}: {path}.{member}")
    return cls(**values)
