"""A graph checked as DirectML's CompileGraph checks it, in plain Python (nothing traced): every
node as an operator at the feature level, then every edge rule; the result is the ``GraphPlan``
that ``tracing`` lowers without further checks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..checks import feature_level_of
from ..compile import validate
from ..enums import FeatureLevel, TensorFlags
from ..errors import ValidationError, show
from ..fields import INPUT, OUTPUT
from ..registry import OperatorSpec, lookup
from ..tensor import TensorDesc, host_view, packed_strides, unpack_4bit
from .records import GRAPH, ConstantDataNode, FunctionNode, GraphDesc


@dataclass(frozen=True)
class GraphPlan:
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


def validated_plan(graph: GraphDesc, level: FeatureLevel, reinterpret: bool = False) -> GraphPlan:
    """``validate_graph``'s checks at ``level``, returning what they learned for ``tracing``
    (``reinterpret``: a consumer may read its producer's packed buffer through its own sizes
    and strides, ``_check_connection``)."""
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
    return GraphPlan(
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


def constant_elements(constant: ConstantDataNode, data_type: Any, count: int | None = None):
    """The first ``count`` elements (all the bytes hold when None) of a constant's bytes read
    as ``data_type`` (a ``DataType``), flat NumPy."""
    bits = data_type.bits
    if count is None:
        count = constant.data_size * 8 // bits
    if bits == 4:  # two a byte, element 0 in the low nibble
        return unpack_4bit(np.frombuffer(constant.data, np.uint8), count, data_type)
    return np.frombuffer(constant.data, data_type.numpy_dtype, count=count)


def constant_value(constant: ConstantDataNode, desc: TensorDesc) -> np.ndarray:
    """The logical tensor (NumPy, shape ``desc.sizes``) that ``desc`` reads from a constant's
    bytes: a strided view, so a broadcast (stride 0) copies nothing."""
    return host_view(constant_elements(constant, desc.data_type, desc.addressed_elements), desc)


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


def topological_order(graph: GraphDesc) -> list[int]:
    """The node indices of ``graph`` with every node after the nodes it reads (the smallest
    ready index first: index order where that already is one); a cycle is a
    ``ValidationError``."""
    successors: list[list[tuple[int, int]]] = [[] for _ in graph.nodes]
    for i, e in enumerate(graph.intermediate_edges):
        successors[e.from_node_index].append((e.to_node_index, i))
    return _topological_order(successors)


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
    validated_plan(graph, feature_level_of(feature_level), reinterpret_edges)
