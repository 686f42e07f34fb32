"""The records of a DML_GRAPH_DESC: the graph, its edges, constant data nodes and JAX function
nodes. Constructing one converts and checks each member on its own; the rules that join them
(edges to existing slots, one writer per input, no cycles, no unused nodes) are ``validation``'s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from ..errors import ValidationError, as_int
from ..fields import INPUT, OUTPUT, OperatorDesc, dml_member_name
from ..tensor import TensorDesc

GRAPH = "DML_GRAPH"


def _edge_post_init(edge: Any) -> None:
    for f in fields(edge):
        where = f"{edge.struct_name}: {dml_member_name(f.name)}"
        object.__setattr__(edge, f.name, as_int(getattr(edge, f.name), where))


@dataclass(frozen=True)
class InputGraphEdge:
    """DML_INPUT_GRAPH_EDGE_DESC: graph input ``graph_input_index`` feeds a node input.

    Args:
        graph_input_index: the graph input, in [0, InputCount).
        to_node_index: the node, an index into ``GraphDesc.nodes``.
        to_node_input_index: the node's input tensor, in schema order (arrays expanded).
    """

    struct_name = "DML_INPUT_GRAPH_EDGE_DESC"
    graph_input_index: int
    to_node_index: int
    to_node_input_index: int

    __post_init__ = _edge_post_init


@dataclass(frozen=True)
class OutputGraphEdge:
    """DML_OUTPUT_GRAPH_EDGE_DESC: a node output becomes graph output ``graph_output_index``.

    Args:
        from_node_index: the node, an index into ``GraphDesc.nodes``.
        from_node_output_index: the node's output tensor, in schema order (arrays expanded).
        graph_output_index: the graph output, in [0, OutputCount).
    """

    struct_name = "DML_OUTPUT_GRAPH_EDGE_DESC"
    from_node_index: int
    from_node_output_index: int
    graph_output_index: int

    __post_init__ = _edge_post_init


@dataclass(frozen=True)
class IntermediateGraphEdge:
    """DML_INTERMEDIATE_GRAPH_EDGE_DESC: a node output feeds another node's input.

    Both ends must have the same data type, sizes and memory layout (strides and
    TotalTensorSizeInBytes): DirectML would reinterpret the bytes between different descs, which
    dml_jax does not emulate between nodes.
    """

    struct_name = "DML_INTERMEDIATE_GRAPH_EDGE_DESC"
    from_node_index: int
    from_node_output_index: int
    to_node_index: int
    to_node_input_index: int

    __post_init__ = _edge_post_init


class ConstantDataNode:
    """DML_CONSTANT_DATA_GRAPH_NODE_DESC (feature level 6_2): bytes held by the graph itself.

    A constant node has no inputs and one output (index 0), which feeds node inputs through
    intermediate edges; each consumer reads the bytes through its own tensor desc (data type,
    sizes, strides), so ``data`` must hold every element that desc addresses. The program holds
    the values as constants, and a fast path may decide at trace time what it would otherwise
    test at run time (``fastpath.known_input``): a MULTIHEAD_ATTENTION mask given as a constant
    is recognized as causal when the graph is compiled, with no run-time test.

    Args:
        data: the bytes (``bytes``, ``bytearray``, ``memoryview`` or a NumPy array, whose
            C-order bytes are taken), DataSize > 0 of them.
    """

    struct_name = "DML_CONSTANT_DATA_GRAPH_NODE_DESC"
    operator_type = "CONSTANT"  # how node messages name it (a DML_GRAPH_NODE_TYPE)
    __slots__ = ("data",)

    def __init__(self, data: Any) -> None:
        if isinstance(data, np.ndarray):
            data = np.ascontiguousarray(data).tobytes()
        elif isinstance(data, (bytearray, memoryview)):
            data = bytes(data)
        if not isinstance(data, bytes):
            raise ValidationError(
                f"{self.struct_name}: Data must be bytes or a NumPy array, got "
                f"{type(data).__name__}"
            )
        if not data:
            raise ValidationError(f"{self.struct_name}: DataSize must be > 0")
        object.__setattr__(self, "data", data)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{self.struct_name} is immutable")

    @property
    def data_size(self) -> int:
        """DataSize: the number of bytes."""
        return len(self.data)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ConstantDataNode) and other.data == self.data

    def __hash__(self) -> int:
        return hash((self.struct_name, self.data))

    def __repr__(self) -> str:
        return f"ConstantDataNode({self.data_size} bytes)"


_EDGE_FIELDS = (
    ("input_edges", "InputEdges", InputGraphEdge),
    ("output_edges", "OutputEdges", OutputGraphEdge),
    ("intermediate_edges", "IntermediateEdges", IntermediateGraphEdge),
)


@dataclass(frozen=True, eq=False)
class FunctionNode:
    """A graph node computed by a JAX function where DirectML has no operator.

    Not a DirectML node: the ONNX importer adds one for an op that ONNX Runtime runs beside its
    DirectML graphs (a CPU kernel or a shader of its own: Loop, Scan, DFT, cubic Resize...), so
    that the whole model stays one XLA program. A graph that holds one has no DML_GRAPH_DESC
    form (``graph_json`` and ``dml-jax convert`` refuse it). Compared and hashed by identity.

    Args:
        name: what the node computes, for reports (``operator_type`` is ``JAX:<name>``).
        inputs: the TensorDesc of each input (None for an absent one, which takes no edge).
        outputs: the TensorDesc of each output.
        fn: ``(*arrays) -> tuple`` of one array per output, each of its desc's sizes and data
            type; it receives one array per present input, in its desc's sizes.
    """

    name: str
    inputs: tuple[TensorDesc | None, ...]
    outputs: tuple[TensorDesc, ...]
    fn: Callable[..., tuple]

    struct_name = "FunctionNode"

    @property
    def operator_type(self) -> str:
        return f"JAX:{self.name}"

    def edge_slots(self, kind: str) -> tuple[tuple[str, TensorDesc | None], ...]:
        descs = self.inputs if kind == INPUT else self.outputs
        name = "Inputs" if kind == INPUT else "Outputs"
        return tuple((f"{name}[{k}]", d) for k, d in enumerate(descs))

    def input_slots(self) -> tuple[tuple[str, TensorDesc], ...]:
        return tuple(s for s in self.edge_slots(INPUT) if s[1] is not None)

    def output_slots(self) -> tuple[tuple[str, TensorDesc], ...]:
        return tuple(s for s in self.edge_slots(OUTPUT) if s[1] is not None)

    def __repr__(self) -> str:
        return (
            f"FunctionNode({self.name!r}, {len(self.inputs)} inputs, {len(self.outputs)} outputs)"
        )


@dataclass(frozen=True)
class GraphDesc:
    """DML_GRAPH_DESC: operator nodes and the edges between them (IDMLDevice1::CompileGraph).

    Immutable and hashable; the node and edge counts of the DML struct are the tuples' lengths.

    Args:
        input_count: InputCount, the number of graph inputs (one array each when called). A graph
            input may feed several node inputs, or none at all.
        output_count: OutputCount (>= 1); each graph output is written by exactly one output edge.
        nodes: operator descriptions (``OperatorDesc`` instances) and constant data nodes
            (``ConstantDataNode``, feature level 6_2), at least one.
        input_edges: ``InputGraphEdge`` sequence.
        output_edges: ``OutputGraphEdge`` sequence.
        intermediate_edges: ``IntermediateGraphEdge`` sequence (optional in DML).
    """

    input_count: int
    output_count: int
    nodes: tuple[OperatorDesc | ConstantDataNode | FunctionNode, ...]
    input_edges: tuple[InputGraphEdge, ...]
    output_edges: tuple[OutputGraphEdge, ...]
    intermediate_edges: tuple[IntermediateGraphEdge, ...] = ()

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "input_count", as_int(self.input_count, f"{GRAPH}: InputCount"))
        set_(self, "output_count", as_int(self.output_count, f"{GRAPH}: OutputCount", minimum=1))
        set_(
            self,
            "nodes",
            _as_tuple(
                self.nodes,
                "Nodes",
                (OperatorDesc, ConstantDataNode, FunctionNode),
                "an operator description, a ConstantDataNode or a FunctionNode",
            ),
        )
        if not self.nodes:
            raise ValidationError(f"{GRAPH}: Nodes must not be empty (NodeCount must be > 0)")
        for name, member, cls in _EDGE_FIELDS:
            article = "an" if cls.__name__[0] in "AEIOU" else "a"
            set_(
                self, name, _as_tuple(getattr(self, name), member, cls, f"{article} {cls.__name__}")
            )

    @property
    def constant_nodes(self) -> tuple[int, ...]:
        """The indices of the ``ConstantDataNode`` nodes."""
        return tuple(n for n, node in enumerate(self.nodes) if isinstance(node, ConstantDataNode))


def _as_tuple(value: Any, member: str, cls: Any, what: str) -> tuple:
    if not isinstance(value, (list, tuple)):
        raise ValidationError(f"{GRAPH}: {member} must be a sequence, got {type(value).__name__}")
    for i, item in enumerate(value):
        if not isinstance(item, cls):
            raise ValidationError(
                f"{GRAPH}: {member}[{i}] must be {what}, got {type(item).__name__}"
            )
    return tuple(value)
