"""DML_GRAPH_DESC: operator graphs validated like DirectML's CompileGraph, lowered to one program.

A ``GraphDesc`` holds operator descriptions (its nodes) and the edges that route tensors between
the graph's inputs, the nodes and the graph's outputs. ``compile_graph`` validates the whole
graph in plain Python, then builds a single function that evaluates every node's lowering in
topological order; under ``jax.jit`` that is one XLA program, so XLA fuses across operator
boundaries (a CLIP feeding a REDUCE reads its input once).

Node input and output indices count tensors in schema order, each element of a tensor array
(JOIN's InputTensors, SPLIT's OutputTensors) counting once and absent optional tensors (GEMM's
CTensor) counting too, as DirectML numbers them: exactly ``desc.edge_slots(INPUT)`` and
``desc.edge_slots(OUTPUT)``; an edge to an absent one is an error.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from . import fastpath
from .checks import check_x64, feature_level_of
from .compile import CompiledOperator, validate, with_shardings
from .enums import FeatureLevel, TensorFlags
from .errors import ValidationError, as_int, show
from .fields import INPUT, OUTPUT, OperatorDesc, dml_member_name
from .hlo import HloInstruction, entry_instructions, optimized_hlo  # noqa: F401 (README)
from .precision import with_half_precision
from .registry import OperatorSpec, lookup
from .tensor import TensorDesc, packed_strides, unpack_4bit

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


# ---------------------------------------------------------------------------------------------
# Validation


@dataclass(frozen=True)
class _Plan:
    """What validation learned: everything lowering needs, with no further checks."""

    order: tuple[int, ...]  # nodes in topological order
    specs: tuple[OperatorSpec, ...]
    # sources[n][k]: where node n's input k comes from: ("input", graph input) or ("node", n, out)
    sources: tuple[tuple[tuple, ...], ...]
    outputs: tuple[tuple[int, int], ...]  # graph output j <- (node, output index)
    input_descs: tuple[tuple[str, TensorDesc | None], ...]
    output_descs: tuple[tuple[str, TensorDesc], ...]
    # present_outputs[n]: the edge indices of node n's outputs that exist, in lowering order
    present_outputs: tuple[tuple[int, ...], ...] = ()


def _fail(path: str, message: str) -> None:
    where = f"{path} " if path else ""
    raise ValidationError(f"{GRAPH}: {where}{message}")


def _slot_name(graph: GraphDesc, node: int, slots: tuple, k: int, kind: str) -> str:
    return f"Nodes[{node}].{slots[k][0]} ({kind} {k} of {graph.nodes[node].operator_type})"


def _check_index(path: str, value: int, limit: int, what: str) -> None:
    if value >= limit:
        _fail(path, f"must be < {what} ({limit}), got {value}")


def _layout(t: TensorDesc) -> dict[str, Any]:
    """A desc's members as DML means them (null Strides read as the packed strides)."""
    return {
        "DataType": t.data_type,
        "Sizes": t.sizes,
        "Strides": t.layout_strides,
        "TotalTensorSizeInBytes": t.total_tensor_size_in_bytes,
        "GuaranteedBaseOffsetAlignment": t.guaranteed_base_offset_alignment,
        "Flags": t.flags,
    }


def _first_difference(a: TensorDesc, b: TensorDesc) -> tuple[str, Any, Any] | None:
    left, right = _layout(a), _layout(b)
    for member in left:
        if left[member] != right[member]:
            return member, left[member], right[member]
    return None


def _validate_graph(graph: GraphDesc, level: FeatureLevel, reinterpret: bool = False) -> _Plan:
    if not isinstance(graph, GraphDesc):
        raise ValidationError(f"{GRAPH}: expected a GraphDesc, got {type(graph).__name__}")
    node_count = len(graph.nodes)
    specs, ins, outs = [], [], []
    for n, node in enumerate(graph.nodes):
        if isinstance(node, ConstantDataNode):
            if level < FeatureLevel.FL_6_2:
                _fail(
                    f"Nodes[{n}]",
                    f"is a {node.struct_name}, which needs feature level 6_2 or later "
                    f"(the graph is compiled for {level.label})",
                )
            specs.append(None)
            ins.append(())
            outs.append((("Data", _CONSTANT),))
            continue
        if isinstance(node, FunctionNode):
            specs.append(None)
            ins.append(node.edge_slots(INPUT))
            outs.append(node.edge_slots(OUTPUT))
            continue
        try:
            validate(node, level)
            specs.append(lookup(node.operator_type))
        except ValidationError as e:
            raise ValidationError(f"{GRAPH}: Nodes[{n}]: {e}") from None
        # Edge indices count every tensor member, absent optional ones included (DirectML's
        # numbering); an absent one has desc None and can take no edge.
        ins.append(node.edge_slots(INPUT))
        outs.append(node.edge_slots(OUTPUT))

    # fed[(node, input)] = (edge path, source); a node input takes exactly one edge.
    fed: dict[tuple[int, int], tuple[str, tuple]] = {}

    def feed(path: str, to_node: int, to_input: int, source: tuple) -> None:
        _check_index(f"{path}.ToNodeIndex", to_node, node_count, "NodeCount")
        if isinstance(graph.nodes[to_node], ConstantDataNode):
            _fail(
                f"{path}.ToNodeIndex", f"names Nodes[{to_node}], a constant, which takes no input"
            )
        _check_index(
            f"{path}.ToNodeInputIndex",
            to_input,
            len(ins[to_node]),
            f"the input tensor count of Nodes[{to_node}] ({graph.nodes[to_node].operator_type})",
        )
        slot_path, slot = ins[to_node][to_input]
        if slot is None:
            _fail(
                f"{path}.ToNodeInputIndex",
                f"feeds Nodes[{to_node}].{slot_path}, which the node leaves null (an absent "
                "optional tensor takes no edge)",
            )
        previous = fed.get((to_node, to_input))
        if previous is not None:
            _fail(
                f"{path}.ToNodeInputIndex",
                f"feeds {_slot_name(graph, to_node, ins[to_node], to_input, 'input')}, "
                f"which {previous[0]} already feeds",
            )
        fed[(to_node, to_input)] = (path, source)

    def check_from(path: str, from_node: int, from_output: int) -> None:
        _check_index(f"{path}.FromNodeIndex", from_node, node_count, "NodeCount")
        _check_index(
            f"{path}.FromNodeOutputIndex",
            from_output,
            len(outs[from_node]),
            f"the output tensor count of Nodes[{from_node}] "
            f"({graph.nodes[from_node].operator_type})",
        )
        slot_path, slot = outs[from_node][from_output]
        if slot is None:
            _fail(
                f"{path}.FromNodeOutputIndex",
                f"reads Nodes[{from_node}].{slot_path}, which the node leaves null",
            )

    graph_input_desc: dict[int, tuple[str, str, TensorDesc]] = {}
    for i, e in enumerate(graph.input_edges):
        path = f"InputEdges[{i}]"
        _check_index(
            f"{path}.GraphInputIndex", e.graph_input_index, graph.input_count, "InputCount"
        )
        feed(path, e.to_node_index, e.to_node_input_index, ("input", e.graph_input_index))
        slot_path, desc = ins[e.to_node_index][e.to_node_input_index]
        where = f"Nodes[{e.to_node_index}].{slot_path}"
        first = graph_input_desc.setdefault(e.graph_input_index, (path, where, desc))
        differs = _first_difference(desc, first[2])
        if differs is not None:
            member, mine, theirs = differs
            _fail(
                path,
                f"feeds Inputs[{e.graph_input_index}] to {where}: {where}.{member} "
                f"must equal {first[1]}.{member} ({show(theirs)}), which {first[0]} "
                f"feeds from the same graph input, got {show(mine)}",
            )

    successors: list[list[tuple[int, int]]] = [[] for _ in range(node_count)]
    for i, e in enumerate(graph.intermediate_edges):
        path = f"IntermediateEdges[{i}]"
        check_from(path, e.from_node_index, e.from_node_output_index)
        source = ("node", e.from_node_index, e.from_node_output_index)
        feed(path, e.to_node_index, e.to_node_input_index, source)
        successors[e.from_node_index].append((e.to_node_index, i))
        constant = graph.nodes[e.from_node_index]
        if isinstance(constant, ConstantDataNode):
            slot_path, desc = ins[e.to_node_index][e.to_node_input_index]
            _check_constant(
                path, constant, e.from_node_index, f"Nodes[{e.to_node_index}].{slot_path}", desc
            )
            fed[(e.to_node_index, e.to_node_input_index)] = (
                path,
                ("constant", e.from_node_index, desc),
            )
            continue
        view = _check_connection(
            path,
            graph,
            outs[e.from_node_index][e.from_node_output_index],
            e.from_node_index,
            ins[e.to_node_index][e.to_node_input_index],
            e.to_node_index,
            reinterpret,
        )
        if view:  # read through the consumer's own desc
            fed[(e.to_node_index, e.to_node_input_index)] = (path, source + view)

    written: dict[int, tuple[str, tuple[int, int]]] = {}
    for i, e in enumerate(graph.output_edges):
        path = f"OutputEdges[{i}]"
        check_from(path, e.from_node_index, e.from_node_output_index)
        if isinstance(graph.nodes[e.from_node_index], ConstantDataNode):
            _fail(
                f"{path}.FromNodeIndex",
                f"names Nodes[{e.from_node_index}], a constant: a graph output comes from an "
                "operator node (a constant feeds node inputs through IntermediateEdges)",
            )
        _check_index(
            f"{path}.GraphOutputIndex", e.graph_output_index, graph.output_count, "OutputCount"
        )
        previous = written.get(e.graph_output_index)
        if previous is not None:
            _fail(
                f"{path}.GraphOutputIndex",
                f"writes Outputs[{e.graph_output_index}], which {previous[0]} already writes",
            )
        written[e.graph_output_index] = (path, (e.from_node_index, e.from_node_output_index))
    for j in range(graph.output_count):
        if j not in written:
            _fail(
                "",
                f"Outputs[{j}] is not written by any OutputEdges entry "
                f"(OutputCount is {graph.output_count})",
            )

    for n in range(node_count):
        for k in range(len(ins[n])):
            if (n, k) not in fed and ins[n][k][1] is not None:
                _fail(
                    "",
                    f"{_slot_name(graph, n, ins[n], k, 'input')} is not fed by any "
                    "InputEdges or IntermediateEdges entry",
                )

    order = _topological_order(successors)
    _check_all_used(graph, [src for _, src in written.values()])

    input_descs = []
    for g in range(graph.input_count):
        desc = graph_input_desc.get(g)
        input_descs.append((f"Inputs[{g}]", None if desc is None else desc[2]))
    output_descs = []
    for j in range(graph.output_count):
        n, k = written[j][1]
        output_descs.append((f"Outputs[{j}]", outs[n][k][1]))
    sources = tuple(
        tuple(fed[(n, k)][1] for k in range(len(ins[n])) if ins[n][k][1] is not None)
        for n in range(node_count)
    )
    present_outputs = tuple(
        tuple(k for k in range(len(outs[n])) if outs[n][k][1] is not None)
        for n in range(node_count)
    )
    return _Plan(
        tuple(order),
        tuple(specs),
        sources,
        tuple(written[j][1] for j in range(graph.output_count)),
        tuple(input_descs),
        tuple(output_descs),
        present_outputs,
    )


_CONSTANT = object()  # the desc slot of a constant's output: each consumer's desc reads it


def _check_constant(
    path: str, constant: ConstantDataNode, node: int, where: str, desc: TensorDesc
) -> None:
    """A constant feeds ``desc`` (at ``where``): its bytes must hold what ``desc`` addresses."""
    needed = -(-desc.addressed_elements * desc.data_type.bits // 8)
    if constant.data_size < needed:
        _fail(
            path,
            f"joins Nodes[{node}] ({constant.struct_name}, DataSize {constant.data_size}) to "
            f"{where}, which addresses {desc.addressed_elements} {desc.data_type.name} elements "
            f"({needed} bytes); DataSize must be >= {needed}",
        )


def constant_value(constant: ConstantDataNode, desc: TensorDesc) -> np.ndarray:
    """The logical tensor (NumPy, shape ``desc.sizes``) that ``desc`` reads from a constant's
    bytes: a strided view, so a broadcast (stride 0) copies nothing."""
    count = desc.addressed_elements
    if desc.data_type.bits == 4:  # two a byte, element 0 in the low nibble
        flat = unpack_4bit(np.frombuffer(constant.data, np.uint8), count, desc.data_type)
    else:
        flat = np.frombuffer(constant.data, desc.dtype, count=count)
    strides = tuple(s * flat.itemsize for s in desc.layout_strides)
    return np.lib.stride_tricks.as_strided(flat, desc.sizes, strides, writeable=False)


def _check_connection(
    path: str,
    graph: GraphDesc,
    produced: tuple,
    from_node: int,
    consumed: tuple,
    to_node: int,
    reinterpret: bool = False,
) -> tuple:
    """An intermediate edge joins two tensors with one data type, one set of sizes, one layout.

    With ``reinterpret`` the consumer may instead read the producer's packed buffer through its
    own sizes and strides (a reshape, a stride-0 broadcast), as DirectML reinterprets the bytes
    of an intermediate tensor; the data type must still match. Returns ``(consumer desc,)`` for
    such an edge, ``()`` for an exact one.
    """
    (out_path, out), (in_path, inp) = produced, consumed
    src, dst = f"Nodes[{from_node}].{out_path}", f"Nodes[{to_node}].{in_path}"
    if inp.flags is TensorFlags.OWNED_BY_DML:
        _fail(
            path,
            f"feeds {dst}, which is flagged OWNED_BY_DML; such inputs must come "
            "directly from a graph input",
        )
    consumer, producer = _layout(inp), _layout(out)
    if reinterpret and consumer != producer and consumer["DataType"] == producer["DataType"]:
        if out.layout_strides != packed_strides(out.sizes):
            _fail(path, f"joins {src} to {dst}: a reinterpreted tensor must be packed at {src}")
        if inp.addressed_elements > out.element_count:
            _fail(
                path,
                f"joins {src} to {dst}: {dst} addresses {inp.addressed_elements} elements, "
                f"more than the {out.element_count} of {src}",
            )
        return (inp,)
    for member in ("DataType", "Sizes", "Strides", "TotalTensorSizeInBytes"):
        b, a = producer[member], consumer[member]
        if a != b:
            _fail(
                path,
                f"joins {src} to {dst}: {dst}.{member} must equal {src}.{member} "
                f"({show(b)}), got {show(a)}; an intermediate edge needs one data type, "
                "one set of sizes and one layout at both ends",
            )
    return ()


def _topological_order(successors: list[list[tuple[int, int]]]) -> list[int]:
    """Kahn's algorithm, smallest ready index first; a cycle is reported with its edges."""
    import heapq

    count = len(successors)
    indegree = [0] * count
    for targets in successors:
        for to, _ in targets:
            indegree[to] += 1
    ready = [n for n in range(count) if indegree[n] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        n = heapq.heappop(ready)
        order.append(n)
        for to, _ in successors[n]:
            indegree[to] -= 1
            if indegree[to] == 0:
                heapq.heappush(ready, to)
    if len(order) == count:
        return order
    # Every node left has a predecessor that is also left: walk forward until a node repeats.
    left = {n for n in range(count) if indegree[n] > 0}
    node, path, seen = min(left), [], {}
    while node not in seen:
        seen[node] = len(path)
        to, edge = next((t, e) for t, e in successors[node] if t in left)
        path.append((node, edge))
        node = to
    cycle = path[seen[node] :]
    steps = " -> ".join(f"Nodes[{n}] (IntermediateEdges[{e}])" for n, e in cycle)
    _fail("", f"IntermediateEdges form a cycle: {steps} -> Nodes[{node}]; a graph must be acyclic")
    raise AssertionError("unreachable")


def _check_all_used(graph: GraphDesc, written: list[tuple[int, int]]) -> None:
    """DirectML rejects nodes that contribute to no graph output."""
    feeders: list[list[int]] = [[] for _ in graph.nodes]
    for e in graph.intermediate_edges:
        feeders[e.to_node_index].append(e.from_node_index)
    used, stack = set(), [n for n, _ in written]
    while stack:
        n = stack.pop()
        if n not in used:
            used.add(n)
            stack.extend(feeders[n])
    for n, node in enumerate(graph.nodes):
        if n not in used:
            _fail(
                f"Nodes[{n}]",
                f"({node.operator_type}) contributes to no graph output; "
                "DirectML rejects unused nodes",
            )


def validate_graph(
    graph: GraphDesc, feature_level: Any = None, *, reinterpret_edges: bool = False
) -> None:
    """Checks a graph: every node as an operator at the feature level, then every edge rule.

    Pure Python on the descriptions: nothing is traced or compiled.

    Raises:
        ValidationError: at the first broken rule; the message starts with ``DML_GRAPH`` and names
            the node or edge (``Nodes[3]``, ``IntermediateEdges[2].ToNodeInputIndex``).
    """
    _validate_graph(graph, feature_level_of(feature_level), reinterpret_edges)


# ---------------------------------------------------------------------------------------------
# Compiling


class CompiledGraph(CompiledOperator):
    """A validated graph as one pure JAX function; called exactly like a ``CompiledOperator``.

    Inputs are the graph inputs (``Inputs[i]``) and outputs the graph outputs (``Outputs[j]``).
    A graph input that feeds no node has ``None`` as its desc and accepts any array, which is
    ignored (DirectML tolerates unused graph inputs).

    Attributes:
        traces: how many times the graph's Python function has run, i.e. been traced by
            ``jax.jit`` (or evaluated eagerly through ``fn``). Calling the compiled graph again
            with the same inputs reuses the jitted program and leaves it unchanged.
        order: node indices in the order they are evaluated.
    """

    def __init__(
        self,
        graph: GraphDesc,
        level: FeatureLevel,
        plan: _Plan,
        counter: list,
        half: bool = False,
        fast_paths: bool = True,
        epilogues: bool = True,
    ):
        differentiable = all(
            spec.is_differentiable(node)
            for spec, node in zip(plan.specs, graph.nodes)
            if spec is not None
        )
        super().__init__(
            graph,
            level,
            plan.input_descs,
            plan.output_descs,
            with_half_precision(_graph_function(graph, plan, counter, fast_paths, epilogues), half),
            tuple_result=False,
            differentiable=differentiable,
            name=GRAPH,
        )
        self.order = plan.order
        self._counter = counter
        self._used_view: _UsedInputs | None = None

    @property
    def traces(self) -> int:
        return self._counter[0]

    def run_buffers(self, inputs: Sequence[Any], outputs: Sequence[Any]) -> tuple:
        """Buffer mode, as for an operator: one 1-D buffer per graph input, one per output.

        The buffer of a graph input that feeds no node is ignored (it may be ``None``, like an
        unbound DML binding).
        """
        from .buffers import run_buffers

        used = [i for i, t in enumerate(self.input_descs) if t is not None]
        if len(used) == len(self.input_descs):
            return run_buffers(self, inputs, outputs)
        if not isinstance(inputs, (list, tuple)) or len(inputs) != len(self.input_descs):
            got = len(inputs) if isinstance(inputs, (list, tuple)) else type(inputs).__name__
            raise ValidationError(
                f"{self.name}: expected {len(self.input_descs)} input buffers "
                f"({', '.join(self.input_paths)}), got {got}"
            )
        if self._used_view is None:
            self._used_view = _UsedInputs(self, used)
        return run_buffers(self._used_view, [inputs[i] for i in used], outputs)

    def __repr__(self) -> str:
        return (
            f"CompiledGraph({len(self.desc.nodes)} nodes, {len(self.input_descs)} inputs, "
            f"{len(self.output_descs)} outputs, feature_level={self.feature_level.label})"
        )


class _UsedInputs:
    """A compiled graph seen through its used inputs only, for buffer mode."""

    def __init__(self, graph: CompiledGraph, used: list[int]):
        count = len(graph.input_descs)
        self.name = graph.name
        self.input_paths = tuple(graph.input_paths[i] for i in used)
        self.input_descs = tuple(graph.input_descs[i] for i in used)
        self.output_paths, self.output_descs = graph.output_paths, graph.output_descs
        self._buffer_fn = None

        def fn(*arrays):
            full = [None] * count
            for i, x in zip(used, arrays):
                full[i] = x
            return graph.fn(*full)

        self.fn = fn


def _graph_function(
    graph: GraphDesc, plan: _Plan, counter: list, fast_paths: bool = True, epilogues: bool = True
) -> Callable[..., tuple]:
    from .buffers import read_tensor

    constants = set(graph.constant_nodes)
    # A node fed only by constants still fuses with nothing: it keeps standalone fast paths.
    linked = {
        n
        for e in graph.intermediate_edges
        if e.from_node_index not in constants
        for n in (e.from_node_index, e.to_node_index)
    }
    on = fast_paths and epilogues and fastpath.cuda_present()
    pairs = _epilogue_pairs(graph, plan) if on else {}
    fused_into = {p for p, _, _ in pairs.values()}

    def known(n):
        # Values of node n's constant-fed inputs (its argument positions), as NumPy arrays, for
        # the fast paths that decide at trace time what they would otherwise test at run time.
        return {
            i: constant_value(graph.nodes[s[1]], s[2])
            for i, s in enumerate(plan.sources[n])
            if s[0] == "constant"
        }

    steps = []
    for n in plan.order:
        if n in constants or n in fused_into:
            continue
        if n in pairs:  # this node and its producer as one step, the producer's inputs first
            p, slot, found = pairs[n]
            sources = plan.sources[p] + tuple(s for j, s in enumerate(plan.sources[n]) if j != slot)
            edge = plan.sources[n][slot]
            lower = fastpath.fused_lowering(
                plan.specs[p], graph.nodes[p], plan.specs[n], graph.nodes[n], slot, found,
                len(plan.sources[p]), read_as=edge[3] if len(edge) == 4 else None,
                consumer_known=known(n),
            )  # fmt: skip
            steps.append((n, lower, sources, plan.present_outputs[n], {}))
            continue
        if isinstance(graph.nodes[n], FunctionNode):
            lower = graph.nodes[n].fn
        else:
            lower = fastpath.lowering(plan.specs[n], graph.nodes[n], fast_paths, n in linked)
        steps.append((n, lower, plan.sources[n], plan.present_outputs[n], known(n)))

    def source_value(values, arrays, s):
        if s[0] == "input":
            return arrays[s[1]]
        if s[0] == "constant":  # the bytes as the consumer's elements, read through its desc
            data = constant_value(graph.nodes[s[1]], s[2].like(sizes=(s[2].addressed_elements,)))
            return read_tensor(jnp.asarray(data), s[2])
        if len(s) == 3:
            return values[(s[1], s[2])]
        return read_tensor(values[(s[1], s[2])].reshape(-1), s[3])

    def lowered(*arrays):
        counter[0] += 1
        values: dict[tuple[int, int], Any] = {}
        for n, lower, sources, present, known in steps:
            args = [source_value(values, arrays, s) for s in sources]
            with fastpath.known_inputs(known):
                results = lower(*args)
            for k, y in zip(present, results):
                values[(n, k)] = y
        return tuple(values[src] for src in plan.outputs)

    return lowered


def _epilogue_pairs(graph: GraphDesc, plan: _Plan) -> dict[int, tuple[int, int, Any]]:
    """Consumer node -> (producer node, input slot, ``fastpath.Epilogue``) for every pair that a
    registered epilogue computes as one: the producer has one output, not a graph output, read
    by that one consumer input alone, in the desc it was written with or as a packed reshape of
    it (a reinterpreting edge)."""
    readers: dict[tuple[int, int], list[tuple[int, int, tuple]]] = {}
    for q, sources in enumerate(plan.sources):
        for j, s in enumerate(sources):
            if s[0] == "node":
                readers.setdefault((s[1], s[2]), []).append((q, j, s))
    outputs = set(plan.outputs)
    pairs: dict[int, tuple[int, int, Any]] = {}
    taken: set[int] = set()  # nodes in a pair already: a node joins one pair at most
    for (p, k), found in readers.items():
        if len(found) != 1 or (p, k) in outputs or plan.present_outputs[p] != (k,):
            continue
        q, j, s = found[0]
        if p in taken or q in taken:
            continue
        if len(s) == 4 and s[3].layout_strides != packed_strides(s[3].sizes):
            continue  # read through strides: not the producer's packed output as it is
        match = fastpath.epilogue(graph.nodes[p], graph.nodes[q], j)
        if match is not None:
            pairs[q] = (p, j, match)
            taken |= {p, q}
    return pairs


@functools.lru_cache(maxsize=1024)
def _compile_graph_cached(
    graph: GraphDesc,
    level: FeatureLevel,
    half: bool,
    reinterpret: bool = False,
    fast_paths: bool = True,
    epilogues: bool = True,
) -> CompiledGraph:
    plan = _validate_graph(graph, level, reinterpret)
    return CompiledGraph(graph, level, plan, [0], half, fast_paths, epilogues)


def _several_devices(shardings: Any) -> bool:
    """Whether shardings (as ``compile_graph`` takes them) may place data on more than one
    device: a sharding over several devices, or a bare PartitionSpec (devices unknown)."""
    for leaf in jax.tree.leaves(shardings, is_leaf=lambda x: isinstance(x, P)):
        devices = getattr(leaf, "device_set", None)
        if devices is None or len(devices) > 1:
            return True
    return False


def compile_graph(
    graph: GraphDesc,
    feature_level: Any = None,
    in_shardings: Any = None,
    out_shardings: Any = None,
    *,
    allow_half_precision: bool = False,
    reinterpret_edges: bool = False,
    fast_paths: bool = True,
) -> CompiledGraph:
    """Validates a graph and compiles it into one function (one XLA program under jit).

    Compiling an equal graph again at the same feature level returns the same object.

    Args:
        graph: a ``GraphDesc``.
        feature_level: a ``FeatureLevel`` (or its name); ``None`` means the newest.
        in_shardings, out_shardings: as for ``compile_operator``, one per graph input/output.
        allow_half_precision: DirectML's ALLOW_HALF_PRECISION_COMPUTATION execution flag, as
            for ``compile_operator``.
        reinterpret_edges: let an intermediate edge join tensors of one data type whose sizes
            or strides differ: the consumer reads the producer's packed buffer through its own
            desc (a reshape or a stride-0 broadcast), as DirectML reinterprets the bytes. Off by
            default (edges must match exactly); the ONNX importer turns it on.
        fast_paths: as for ``compile_operator``: ``True`` lets each node's registered GPU fast
            path (``dml_jax.fastpath``) compute it when the program is lowered for CUDA;
            ``False`` lowers every node with its lax lowering. Fast paths registered as
            standalone (the element-wise kernels, fusion barriers) are used only for nodes
            without intermediate edges: elsewhere their lax form fuses into its neighbours.
            Graph epilogues (``fastpath.register_epilogue``: a GEMM node and the node that
            alone reads it as one kernel) apply on one device; with shardings over several
            devices those nodes stay apart.

    Returns:
        A ``CompiledGraph`` (a ``CompiledOperator``): ``g(*inputs)`` takes one array per graph
        input and returns one array, or a tuple when OutputCount > 1; ``g.fn`` is the pure
        function for jit/grad/vmap; ``g.run_buffers`` is buffer mode.

    Raises:
        ValidationError: if a node or an edge breaks a rule (before anything is traced), or a
            tensor uses a 64-bit type without ``jax_enable_x64``.
    """
    level = feature_level_of(feature_level)
    if not isinstance(graph, GraphDesc):
        raise ValidationError(f"{GRAPH}: expected a GraphDesc, got {type(graph).__name__}")
    try:
        hash(graph)
    except TypeError:
        raise ValidationError(f"{GRAPH}: description is not hashable") from None
    # Graph epilogues (one kernel for two nodes) are single-device: over several devices the
    # nodes stay apart, so that XLA partitions a sharded GEMM as it partitions any dot.
    several = _several_devices(in_shardings) or _several_devices(out_shardings)
    compiled = _compile_graph_cached(
        graph, level, bool(allow_half_precision), bool(reinterpret_edges), bool(fast_paths),
        not several,
    )  # fmt: skip
    for n, node in enumerate(graph.nodes):
        if isinstance(node, ConstantDataNode):
            continue
        check_x64(
            [(f"Nodes[{n}].{p}", t) for p, t in node.input_slots() + node.output_slots()], GRAPH
        )
    return with_shardings(compiled, in_shardings, out_shardings)
