"""The DxDispatch JSON vocabulary that dml_jax reads, in one place.

Member names and the values they take, shared by the operator reader (``jsonmodel``), the graph
reader (``graph_json``) and the model runner (``dxdispatch``). It imports nothing from dml_jax;
the rules that use these names live with their readers.
"""

from __future__ import annotations

from typing import Any

# Members of a DML dispatchable that belong to DxDispatch, not to the operator's desc.
DISPATCHABLE_KEYS = ("type", "desc", "Desc", "executionFlags", "dmlCompileType", "bindings")

# Dispatchable kinds other than DML operators (matched case-insensitively, as DxDispatch does).
OTHER_DISPATCHABLE_TYPES = ("hlsl", "onnx", "dmlserializedgraph")

# ``type`` of a multi-node graph dispatchable (a DML_GRAPH_DESC), and the members it takes.
GRAPH_TYPES = ("DML_GRAPH", "GRAPH")
GRAPH_KEYS = (
    "type",
    "InputCount",
    "OutputCount",
    "Nodes",
    "InputEdges",
    "OutputEdges",
    "IntermediateEdges",
    "executionFlags",
    "dmlCompileType",
)

# ``dmlCompileType``: one operator (IDMLDevice::CompileOperator, the default) or a graph
# (IDMLDevice1::CompileGraph; an operator dispatchable becomes a one-node graph).
COMPILE_OP = "DmlCompileOp"
COMPILE_GRAPH = "DmlCompileGraph"
COMPILE_TYPES = (COMPILE_OP, COMPILE_GRAPH)

# DML_EXECUTION_FLAGS names (``executionFlags``), without their DML_EXECUTION_FLAG_ prefix.
EXECUTION_FLAGS = {
    "NONE": 0x0,
    "ALLOW_HALF_PRECISION_COMPUTATION": 0x1,
    "DISABLE_META_COMMANDS": 0x2,
    "DESCRIPTORS_VOLATILE": 0x4,
}


def compile_type_of(dispatchable: dict) -> str | None:
    """A dispatchable's ``dmlCompileType`` (``DmlCompileOp`` when absent), or None when the
    member holds anything but one of ``COMPILE_TYPES``; the caller words the error for its path.
    """
    value: Any = dispatchable.get("dmlCompileType", COMPILE_OP)
    return value if isinstance(value, str) and value in COMPILE_TYPES else None
