"""ONNX models as one DML graph: values, the graph under construction, and the import walk.

An ONNX tensor is a ``Value``: its static shape and DML data type, and where its data lives
(a node output of the graph being built, or a constant known at import time). Converters (one
per ONNX op type, in ``ops.py``) read their inputs' shapes, add DirectML operator nodes with
``Builder.node`` and return their outputs' values. Shape-only ops (Reshape, Flatten, Squeeze,
Unsqueeze, Identity) add no node: a consumer reads the packed buffer through its own desc, as
DirectML reinterprets the bytes of an intermediate tensor (``compile_graph(...,
reinterpret_edges=True)``). Constants (initializers, Constant nodes) become graph inputs whose
values the compiled model passes itself, so XLA sees them as constants of the one program.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..enums import DataType
from ..errors import ValidationError
from ..graph import GraphDesc, InputGraphEdge, IntermediateGraphEdge, OutputGraphEdge
from ..registry import lookup
from ..tensor import TensorDesc, packed_strides

ONNX = "ONNX"


def identity(desc: TensorDesc) -> Any:
    """ELEMENT_WISE_IDENTITY from ``desc`` to itself (how a graph input or constant enters)."""
    return lookup("DML_OPERATOR_ELEMENT_WISE_IDENTITY").desc_class(desc, desc)


# ONNX TensorProto element types -> DML data types (BOOL is stored as UINT8, as ORT's DML
# provider does).
_ONNX_TYPES = {
    1: DataType.FLOAT32,
    2: DataType.UINT8,
    3: DataType.INT8,
    4: DataType.UINT16,
    5: DataType.INT16,
    6: DataType.INT32,
    7: DataType.INT64,
    9: DataType.UINT8,
    10: DataType.FLOAT16,
    11: DataType.FLOAT64,
    12: DataType.UINT32,
    13: DataType.UINT64,
}
_BOOL = 9


def data_type_of(elem_type: int, where: str) -> DataType:
    """The DML data type of an ONNX element type; others are a ``ValidationError``."""
    t = _ONNX_TYPES.get(int(elem_type))
    if t is None:
        raise ValidationError(f"{ONNX}: {where}: element type {elem_type} has no DML data type")
    return t


@dataclass(frozen=True)
class Value:
    """One ONNX tensor while importing.

    Attributes:
        shape: the ONNX shape (``()`` for a scalar).
        data_type: its DML data type.
        source: ``("node", n, k)`` (output k of node n, packed) or ``("const",)``.
        const: the value when known at import time (initializers, Constant, Shape).
        is_bool: ONNX BOOL (stored as UINT8).
    """

    shape: tuple[int, ...]
    data_type: DataType
    source: tuple
    const: np.ndarray | None = None
    is_bool: bool = False

    @property
    def rank(self) -> int:
        return len(self.shape)

    def view(self, shape: Sequence[int] | None = None) -> Value:
        """The same data under another shape of the same element count (a reshape)."""
        return Value(
            tuple(shape), self.data_type, self.source, _reshaped(self.const, shape), self.is_bool
        )


def _reshaped(const: np.ndarray | None, shape: Sequence[int] | None) -> np.ndarray | None:
    return None if const is None or shape is None else const.reshape(shape)


def dml_sizes(shape: Sequence[int]) -> tuple[int, ...]:
    """DML tensors have 1 to 8 dimensions: a scalar is ``{1}``."""
    return tuple(shape) if shape else (1,)


def packed(data_type: DataType, shape: Sequence[int], rank: int | None = None) -> TensorDesc:
    """A packed desc of ``shape``, left-padded with ones to ``rank`` dimensions."""
    sizes = dml_sizes(shape)
    if rank is not None and rank > len(sizes):
        sizes = (1,) * (rank - len(sizes)) + sizes
    return TensorDesc(data_type, sizes)


def broadcast(value: Value, shape: Sequence[int], data_type: DataType | None = None) -> TensorDesc:
    """The desc that reads ``value``'s packed data broadcast to ``shape`` (stride 0 where it
    repeats), numpy's rules: shapes aligned at the right."""
    out = dml_sizes(shape)
    src = (1,) * (len(out) - value.rank) + tuple(value.shape)
    strides = packed_strides(src)
    strides = tuple(0 if n == 1 and m != 1 else s for n, m, s in zip(src, out, strides))
    t = data_type or value.data_type
    if strides == packed_strides(out):
        return TensorDesc(t, out)
    return TensorDesc(t, out, strides=strides)


def permuted(value: Value, perm: Sequence[int]) -> TensorDesc:
    """The desc that reads ``value``'s packed data transposed by ``perm`` (strides only)."""
    strides = packed_strides(dml_sizes(value.shape))
    sizes = tuple(value.shape[p] for p in perm)
    return TensorDesc(value.data_type, dml_sizes(sizes), strides=tuple(strides[p] for p in perm))


class Builder:
    """The DML graph under construction: nodes, and for each node input the value it reads."""

    def __init__(self):
        self.nodes: list[Any] = []
        self.feeds: list[tuple[int, int, Value]] = []  # (node, input slot, value)
        self.constants: list[np.ndarray] = []  # graph inputs after the model's own inputs
        self._const_nodes: dict[int, Value] = {}
        # (("input", i) | ("const", j), the identity node that reads that graph input)
        self._graph_inputs: list[tuple[tuple[str, int], int]] = []

    def node(self, desc: Any, inputs: Sequence[Value | None]) -> int:
        """Adds an operator node whose present input tensors read ``inputs`` in slot order
        (an absent optional tensor takes ``None``); returns the node index."""
        n = len(self.nodes)
        slots = desc.edge_slots("input")
        if len(slots) != len(inputs):
            raise AssertionError(f"{desc.operator_type}: {len(slots)} input slots, {len(inputs)}")
        self.nodes.append(desc)
        for k, ((_, slot_desc), v) in enumerate(zip(slots, inputs)):
            if slot_desc is None:
                continue
            self.feeds.append((n, k, self.materialize(v)))
        return n

    def output(self, n: int, k: int, shape: Sequence[int], *, is_bool: bool = False) -> Value:
        """Output k of node n as an ONNX value of ``shape`` (the node writes it packed)."""
        desc = self.nodes[n].edge_slots("output")[k][1]
        return Value(tuple(shape), desc.data_type, ("node", n, k), None, is_bool)

    def materialize(self, v: Value) -> Value:
        """A constant becomes a graph input read once by an identity node (its consumers then
        view that node's packed output as they like)."""
        if v.source[0] == "node":
            return v
        key = id(v.const)
        if key not in self._const_nodes:
            desc = packed(v.data_type, v.shape)
            g = ("const", len(self.constants))
            self.constants.append(np.ascontiguousarray(v.const.reshape(desc.sizes)))
            n = len(self.nodes)
            self.nodes.append(identity(desc))
            self._graph_inputs.append((g, n))
            self._const_nodes[key] = Value(v.shape, v.data_type, ("node", n, 0), v.const, v.is_bool)
        return self._const_nodes[key]


@dataclass(frozen=True)
class ImportedGraph:
    """An ONNX graph as a DML graph.

    Attributes:
        graph: the ``GraphDesc`` (graph inputs: the model's inputs, then its constants).
        input_names, output_names: the ONNX names, in graph input / output order.
        input_shapes, output_shapes: their static ONNX shapes.
        input_types, output_types: their DML data types.
        output_bool: which outputs are ONNX BOOL (stored as UINT8).
        constants: the values of the constant graph inputs, in order.
    """

    graph: GraphDesc
    input_names: tuple[str, ...]
    input_shapes: tuple[tuple[int, ...], ...]
    input_types: tuple[DataType, ...]
    output_names: tuple[str, ...]
    output_shapes: tuple[tuple[int, ...], ...]
    output_types: tuple[DataType, ...]
    output_bool: tuple[bool, ...]
    constants: tuple[np.ndarray, ...]


Converter = Callable[["Context", Any, list], list]


class Context:
    """What a converter sees: the builder, the node's attributes, the model's opset."""

    def __init__(self, builder: Builder, node: Any, opset: int, where: str):
        import onnx

        self.builder = builder
        self.onnx_node = node
        self.opset = opset
        self.where = where
        self.attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}

    def attr(self, name: str, default: Any = None) -> Any:
        v = self.attrs.get(name, default)
        return v.decode() if isinstance(v, bytes) else v

    def fail(self, message: str) -> ValidationError:
        return ValidationError(f"{ONNX}: {self.where}: {message}")

    def const(self, v: Value | None, what: str) -> np.ndarray | None:
        """An input that must be known at import time (a shape, axes, pads)."""
        if v is None:
            return None
        if v.const is None:
            raise self.fail(f"input '{what}' must be a constant (an initializer or Constant)")
        return v.const

    def node(self, desc: Any, inputs: Sequence[Value | None]) -> int:
        return self.builder.node(desc, inputs)

    def out(self, n: int, shape: Sequence[int], k: int = 0, *, is_bool: bool = False) -> Value:
        return self.builder.output(n, k, shape, is_bool=is_bool)


def _shape_of(type_proto: Any, name: str, free: Mapping[str, int], given: Sequence[int] | None):
    tensor = type_proto.tensor_type
    if given is not None:
        return tuple(int(d) for d in given)
    dims = []
    for i, d in enumerate(tensor.shape.dim):
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        elif d.dim_param and d.dim_param in free:
            dims.append(int(free[d.dim_param]))
        else:
            label = f"'{d.dim_param}'" if d.dim_param else "an unnamed dimension"
            raise ValidationError(
                f"{ONNX}: input '{name}': dimension {i} is {label}; give its size "
                "(free dimension overrides or an input shape)"
            )
    return tuple(dims)


def array_of(tensor: Any) -> np.ndarray:
    from onnx import numpy_helper

    return numpy_helper.to_array(tensor)


def const_value(array: np.ndarray, where: str) -> Value:
    array = np.asarray(array)
    is_bool = array.dtype == np.bool_
    if is_bool:
        array = array.astype(np.uint8)
    t = _dtype_to_data_type(array.dtype, where)
    return Value(tuple(array.shape), t, ("const",), array, is_bool)


def _dtype_to_data_type(dtype: np.dtype, where: str) -> DataType:
    for t in DataType:
        if t.name != "UNKNOWN" and t.size * 8 >= 8 and _np(t) == dtype:
            return t
    raise ValidationError(f"{ONNX}: {where}: data type {dtype} has no DML data type")


def _np(t: DataType) -> np.dtype | None:
    try:
        return np.dtype(t.numpy_dtype)
    except (TypeError, AttributeError, ValueError):
        return None


def import_graph(
    model: Any,
    converters: Mapping[str, Converter],
    free_dimensions: Mapping[str, int] | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
) -> ImportedGraph:
    """Maps every node of ``model`` (an ``onnx.ModelProto``) through ``converters``.

    Raises:
        ValidationError: for an unsupported op type (naming the node and the type), a free
            dimension without a size, or anything a converter rejects.
    """
    free = dict(free_dimensions or {})
    shapes = dict(input_shapes or {})
    graph = model.graph
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=1)
    builder = Builder()
    values: dict[str, Value] = {}
    for init in graph.initializer:
        values[init.name] = const_value(array_of(init), f"initializer '{init.name}'")

    input_names, input_shapes_, input_types = [], [], []
    for inp in graph.input:
        if inp.name in values:  # an initializer listed as an input (older exporters)
            continue
        t = data_type_of(inp.type.tensor_type.elem_type, f"input '{inp.name}'")
        shape = _shape_of(inp.type, inp.name, free, shapes.pop(inp.name, None))
        desc = packed(t, shape)
        n = len(builder.nodes)
        builder.nodes.append(identity(desc))
        builder._graph_inputs.append((("input", len(input_names)), n))
        is_bool = inp.type.tensor_type.elem_type == _BOOL
        values[inp.name] = Value(shape, t, ("node", n, 0), None, is_bool)
        input_names.append(inp.name)
        input_shapes_.append(shape)
        input_types.append(t)
    if shapes:
        raise ValidationError(
            f"{ONNX}: input shapes given for names the model has no input of: {sorted(shapes)}"
        )

    for i, node in enumerate(graph.node):
        where = (
            f"node {i} ('{node.name}', {node.op_type})"
            if node.name
            else (f"node {i} ({node.op_type})")
        )
        if node.domain not in ("", "ai.onnx"):
            raise ValidationError(
                f"{ONNX}: {where}: op type '{node.domain}.{node.op_type}' is not supported "
                f"(domain '{node.domain}')"
            )
        convert = converters.get(node.op_type)
        if convert is None:
            raise ValidationError(
                f"{ONNX}: {where}: op type '{node.op_type}' is not supported; supported: "
                + ", ".join(sorted(converters))
            )
        inputs = []
        for name in node.input:
            if not name:
                inputs.append(None)
            elif name not in values:
                raise ValidationError(f"{ONNX}: {where}: input '{name}' is not produced before")
            else:
                inputs.append(values[name])
        ctx = Context(builder, node, opset, where)
        outputs = convert(ctx, node, inputs)
        for name, v in zip(node.output, outputs):
            if name and v is not None:
                values[name] = v
        for name in node.output[len(outputs) :]:
            if name:
                raise ctx.fail(f"output '{name}' is not supported")

    output_names, output_shapes, output_types, output_bool, out_values = [], [], [], [], []
    for out in graph.output:
        if out.name not in values:
            raise ValidationError(f"{ONNX}: output '{out.name}' is not produced by any node")
        v = builder.materialize(values[out.name])
        output_names.append(out.name)
        output_shapes.append(v.shape)
        output_types.append(v.data_type)
        output_bool.append(v.is_bool)
        out_values.append(v)
    return _graph_desc(
        builder,
        input_names,
        input_shapes_,
        input_types,
        output_names,
        output_shapes,
        output_types,
        output_bool,
        out_values,
    )


def _graph_desc(
    builder,
    input_names,
    input_shapes,
    input_types,
    output_names,
    output_shapes,
    output_types,
    output_bool,
    out_values,
) -> ImportedGraph:
    """Prunes nodes that reach no output, then numbers graph inputs, nodes and edges."""
    feeds_of: dict[int, list[tuple[int, Value]]] = {}
    for n, k, v in builder.feeds:
        feeds_of.setdefault(n, []).append((k, v))
    used: set[int] = set()
    stack = [v.source[1] for v in out_values]
    while stack:
        n = stack.pop()
        if n in used:
            continue
        used.add(n)
        stack.extend(v.source[1] for _, v in feeds_of.get(n, ()))
    index = {n: i for i, n in enumerate(sorted(used))}
    nodes = tuple(builder.nodes[n] for n in sorted(used))

    input_edges = []
    constants = []
    count = len(input_names)
    for (kind, j), n in builder._graph_inputs:
        if kind == "input":
            if n in used:
                input_edges.append(InputGraphEdge(j, index[n], 0))
        elif n in used:
            input_edges.append(InputGraphEdge(count + len(constants), index[n], 0))
            constants.append(builder.constants[j])
    intermediate = tuple(
        IntermediateGraphEdge(index[v.source[1]], v.source[2], index[n], k)
        for n, k, v in builder.feeds
        if n in used
    )
    output_edges = tuple(
        OutputGraphEdge(index[v.source[1]], v.source[2], j) for j, v in enumerate(out_values)
    )
    graph = GraphDesc(
        input_count=count + len(constants),
        output_count=len(out_values),
        nodes=nodes,
        input_edges=tuple(input_edges),
        output_edges=output_edges,
        intermediate_edges=intermediate,
    )
    return ImportedGraph(
        graph,
        tuple(input_names),
        tuple(input_shapes),
        tuple(input_types),
        tuple(output_names),
        tuple(output_shapes),
        tuple(output_types),
        tuple(output_bool),
        tuple(constants),
    )


def element_count(shape: Sequence[int]) -> int:
    return math.prod(shape)
