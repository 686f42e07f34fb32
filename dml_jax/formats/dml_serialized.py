"""DirectML's serialized graphs: flatbuffer graph files read into a ``GraphDesc``.

A ``.bin`` file holds a ``dml.ir.DmlGraphDesc`` flatbuffer (the schema of DirectML's
``DmlGraphDesc.fbs`` / ``OperatorFieldTypes.fbs``, as generated into ``DmlGraphDesc_generated.h``
and ``OperatorFieldTypes_generated.h``; ONNX Runtime's DML execution provider writes these when
it serializes a partition). It is read here without a flatbuffers dependency and turned into a
``GraphDesc`` the way DxDispatch does it (``DmlGraphDeserialization.cpp``, ``DmlGraphHelper.h``
``ConvertGraphDesc``, ``DmlDispatchable.cpp``):

* Edges are derived from names: a node input named like a graph input is an input edge, one
  named like an earlier node's output an intermediate edge; a node output named like a graph
  output is an output edge. An empty name is an absent optional tensor.
* An operator node's tensors and attributes fill the operator's DML schema fields in struct
  order: each single tensor field takes the next name (and, unless the name is empty, the next
  tensor desc), a tensor array takes all remaining descs, each attribute the next attribute.
* A constant node named by ``ConstantName`` reads ``<folder of the .bin>/<name>.bin`` (raw bytes,
  as the consuming tensor's data type); the tensor it feeds is flagged OWNED_BY_DML. A
  ``ConstantRawData`` node carries its bytes inline. Both become graph inputs that no dispatch
  binds.
* Bind points are the graph inputs' and outputs' names.

``load_serialized_graph`` reads a file and its constant files; DxDispatch's
``dmlSerializedGraph`` dispatchables (``dml_jax.dxdispatch.serialized_graph``) run what it gives.
"""

from __future__ import annotations

import dataclasses
import os
import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import registry
from ..enums import DataType, TensorFlags
from ..errors import ValidationError
from ..fields import ATTRIBUTE, COUNT, INPUT, OUTPUT, OperatorDesc, ScalarUnion, dml_member_name
from ..graph import GraphDesc, InputGraphEdge, IntermediateGraphEdge, OutputGraphEdge
from ..tensor import ScaleBias, Size2D, TensorDesc

# ---------------------------------------------------------------------------------------------
# A minimal flatbuffer reader (little-endian tables, vectors, strings and unions)


class _Reader:
    def __init__(self, data: bytes):
        self.data = data

    def unpack(self, fmt: str, pos: int) -> Any:
        size = struct.calcsize(fmt)
        if pos < 0 or pos + size > len(self.data):
            raise ValueError(f"the file is truncated or corrupt (read at byte {pos})")
        return struct.unpack_from("<" + fmt, self.data, pos)[0]

    def table(self, pos: int) -> _Table:
        return _Table(self, pos)


class _Table:
    """A flatbuffer table: field ``slot`` is its vtable offset (4, 6, 8, ... as in the headers)."""

    def __init__(self, reader: _Reader, pos: int):
        self.r, self.pos = reader, pos
        self.vtable = pos - reader.unpack("i", pos)
        self.vtable_size = reader.unpack("H", self.vtable)

    def _offset(self, slot: int) -> int:
        if slot >= self.vtable_size:
            return 0
        return self.r.unpack("H", self.vtable + slot)

    def scalar(self, slot: int, fmt: str, default: Any = 0) -> Any:
        off = self._offset(slot)
        return self.r.unpack(fmt, self.pos + off) if off else default

    def _target(self, slot: int) -> int | None:
        off = self._offset(slot)
        if not off:
            return None
        at = self.pos + off
        return at + self.r.unpack("I", at)

    def table(self, slot: int) -> _Table | None:
        at = self._target(slot)
        return None if at is None else _Table(self.r, at)

    def struct_at(self, slot: int) -> int | None:
        """A union member that is a struct: the position of its bytes."""
        return self._target(slot)

    def string(self, slot: int) -> str | None:
        at = self._target(slot)
        return None if at is None else _string(self.r, at)

    def _vector(self, slot: int) -> tuple[int, int] | None:
        at = self._target(slot)
        return None if at is None else (at + 4, self.r.unpack("I", at))

    def scalars(self, slot: int, fmt: str) -> list | None:
        vec = self._vector(slot)
        if vec is None:
            return None
        start, n = vec
        size = struct.calcsize(fmt)
        return [self.r.unpack(fmt, start + i * size) for i in range(n)]

    def _offsets(self, slot: int) -> list[int] | None:
        vec = self._vector(slot)
        if vec is None:
            return None
        start, n = vec
        return [start + 4 * i + self.r.unpack("I", start + 4 * i) for i in range(n)]

    def tables(self, slot: int) -> list[_Table]:
        return [_Table(self.r, p) for p in self._offsets(slot) or ()]

    def strings(self, slot: int) -> list[str]:
        return [_string(self.r, p) for p in self._offsets(slot) or ()]

    def raw_bytes(self, slot: int) -> bytes:
        vec = self._vector(slot)
        if vec is None:
            return b""
        start, n = vec
        if start + n > len(self.r.data):
            raise ValueError("the file is truncated or corrupt (a byte vector runs past its end)")
        return self.r.data[start : start + n]


def _string(r: _Reader, at: int) -> str:
    n = r.unpack("I", at)
    if at + 4 + n > len(r.data):
        raise ValueError("the file is truncated or corrupt (a string runs past its end)")
    return r.data[at + 4 : at + 4 + n].decode("utf-8")


# ---------------------------------------------------------------------------------------------
# The dml.ir schema


@dataclass(frozen=True)
class SerializedTensor:
    """``dml.ir.DmlBufferTensorDesc``."""

    data_type: str
    sizes: tuple[int, ...]
    strides: tuple[int, ...] | None
    total_tensor_size_in_bytes: int


@dataclass(frozen=True)
class SerializedAttribute:
    """``dml.ir.operatorFieldTypes.AttributeDesc``: its name, union member and value."""

    name: str | None
    kind: str
    value: Any


@dataclass
class SerializedNode:
    """``dml.ir.DmlGraphNode``: an operator (``operator_type`` set) or a constant."""

    name: str
    input_names: list[str]
    output_names: list[str]
    operator_type: str | None = None
    inputs: list[SerializedTensor] = field(default_factory=list)
    outputs: list[SerializedTensor] = field(default_factory=list)
    attributes: list[SerializedAttribute] = field(default_factory=list)
    constant_name: str | None = None
    constant_data: bytes | None = None


@dataclass
class SerializedGraph:
    """``dml.ir.DmlGraphDesc``."""

    nodes: list[SerializedNode]
    input_names: list[str]
    output_names: list[str]


# AttributeFieldVariant, in the schema's order (ONNX Runtime's OperatorFieldTypes_generated.h
# since ActivationArray was added; the file written by DxDispatch's serializer uses these values).
_ATTRIBUTE_KINDS = (
    "NONE", "Activation", "ActivationArray", "UInt32", "UInt64", "Int32", "Float32", "UIntArray",
    "IntArray", "FloatArray", "ScaleBias", "Size2D", "ScalarUnionData", "Bool",
)  # fmt: skip
_STRUCT_FORMATS = {"UInt32": "I", "UInt64": "Q", "Int32": "i", "Float32": "f", "Bool": "B"}
_ARRAY_FORMATS = {"UIntArray": "I", "IntArray": "i", "FloatArray": "f"}
_NODE_OPERATOR, _NODE_CONSTANT = 1, 2  # NodeDesc
_CONSTANT_NAME, _CONSTANT_RAW = 1, 2  # ConstantNodeDescDetail
_SCALAR_BYTE_ARRAY = 1  # ScalarVariant_ByteArray


def _tensor(t: _Table) -> SerializedTensor:
    strides = t.scalars(8, "I")
    return SerializedTensor(
        t.string(4) or "",
        tuple(t.scalars(6, "I") or ()),
        None if strides is None else tuple(strides),
        t.scalar(10, "Q"),
    )


def _activation_value(act: _Table) -> tuple[str, list]:
    return (act.string(4) or "", [_attribute(a) for a in act.tables(6)])


def _attribute(t: _Table) -> SerializedAttribute:
    code = t.scalar(6, "B")
    if code >= len(_ATTRIBUTE_KINDS):
        raise ValueError(f"attribute {t.string(4)!r} has an unknown value type ({code})")
    kind = _ATTRIBUTE_KINDS[code]
    value: Any = None
    if kind in _STRUCT_FORMATS:
        at = t.struct_at(8)
        value = None if at is None else t.r.unpack(_STRUCT_FORMATS[kind], at)
    elif kind in _ARRAY_FORMATS:
        array = t.table(8)
        value = None if array is None else tuple(array.scalars(4, _ARRAY_FORMATS[kind]) or ())
    elif kind in ("ScaleBias", "Size2D"):
        at = t.struct_at(8)
        fmt = "f" if kind == "ScaleBias" else "I"
        value = None if at is None else (t.r.unpack(fmt, at), t.r.unpack(fmt, at + 4))
    elif kind == "ScalarUnionData":
        data = t.table(8)
        if data is not None:
            if data.scalar(4, "B") != _SCALAR_BYTE_ARRAY:
                raise ValueError(
                    f"attribute {t.string(4)!r}: only ByteArray scalar unions are read"
                )
            at = data.struct_at(6)
            value = None if at is None else t.r.data[at : at + 8]
    elif kind == "Activation":
        act = t.table(8)
        if act is not None:
            value = _activation_value(act)
    elif kind == "ActivationArray":
        array = t.table(8)
        value = None if array is None else [_activation_value(a) for a in array.tables(4)]
    return SerializedAttribute(t.string(4), kind, value)


def read_serialized_graph(data: bytes) -> SerializedGraph:
    """Parses a ``dml.ir.DmlGraphDesc`` flatbuffer.

    Raises:
        ValueError: a truncated or corrupt file.
    """
    r = _Reader(data)
    root = r.table(r.unpack("I", 0))
    nodes = []
    for i, n in enumerate(root.tables(4)):
        node = SerializedNode(n.string(8) or "", n.strings(10), n.strings(12))
        desc = n.table(6)
        kind = n.scalar(4, "B")
        if desc is None:
            raise ValueError(f"node {i} ({node.name!r}) has no description")
        if kind == _NODE_OPERATOR:
            node.operator_type = desc.string(4) or ""
            node.inputs = [_tensor(t) for t in desc.tables(6)]
            node.outputs = [_tensor(t) for t in desc.tables(8)]
            node.attributes = [_attribute(a) for a in desc.tables(10)]
        elif kind == _NODE_CONSTANT:
            detail, body = desc.scalar(4, "B"), desc.table(6)
            if body is None or detail not in (_CONSTANT_NAME, _CONSTANT_RAW):
                raise ValueError(f"constant node {i} ({node.name!r}) has no data")
            if detail == _CONSTANT_NAME:
                node.constant_name = body.string(4) or ""
            else:
                node.constant_data = body.raw_bytes(4)
        else:
            raise ValueError(f"node {i} ({node.name!r}) has an unknown kind ({kind})")
        nodes.append(node)
    return SerializedGraph(nodes, root.strings(6), root.strings(8))


# ---------------------------------------------------------------------------------------------
# Operator descriptions from serialized nodes


# The CLIP family declares its optional members in API.md's order, not the struct's.
_STRUCT_ORDER = {
    "DML_OPERATOR_ELEMENT_WISE_CLIP": ("InputTensor", "OutputTensor", "ScaleBias", "Min", "Max"),
    "DML_OPERATOR_ELEMENT_WISE_CLIP1": (
        "InputTensor", "OutputTensor", "ScaleBias", "MinMaxDataType", "Min", "Max",
    ),
    "DML_OPERATOR_ELEMENT_WISE_CLIP_GRAD1": (
        "InputTensor", "InputGradientTensor", "OutputGradientTensor", "MinMaxDataType", "Min",
        "Max",
    ),
}  # fmt: skip


def schema_fields(cls: type) -> list[dataclasses.Field]:
    """A descriptor class's fields in DirectML's struct (schema) order.

    dml_jax declares members in struct order except that count members come last (API.md);
    in the struct each count member comes right before the array it counts.
    """
    declared = list(dataclasses.fields(cls))
    order = _STRUCT_ORDER.get(cls.operator_type)
    if order is not None:
        by_name = {dml_member_name(f.name): f for f in declared}
        return [by_name[n] for n in order]
    counts = {f.metadata["of"]: f for f in declared if f.metadata.get("kind") == COUNT}
    out = []
    for f in declared:
        if f.metadata.get("kind") == COUNT:
            continue
        if f.name in counts:
            out.append(counts[f.name])
        out.append(f)
    return out


def _tensor_desc(t: SerializedTensor, constant: bool, where: str) -> TensorDesc:
    try:
        data_type = DataType.parse(t.data_type, f"{where}.DataType")
    except ValidationError:
        raise ValidationError(f"{where}.DataType: unknown data type {t.data_type!r}") from None
    return TensorDesc(
        data_type,
        t.sizes,
        t.strides,
        t.total_tensor_size_in_bytes or None,
        flags=TensorFlags.OWNED_BY_DML if constant else TensorFlags.NONE,
    )


def _attribute_value(f: dataclasses.Field, attr: SerializedAttribute | None, where: str) -> Any:
    """A serialized attribute as the constructor argument of field ``f``."""
    if attr is None or attr.kind == "NONE" or attr.value is None:
        return None
    ftype = f.metadata.get("type")
    dml = getattr(ftype, "dml", "UINT") if ftype is not None else "UINT"
    value = attr.value
    if attr.kind == "Activation":
        return _activation(value, where)
    if attr.kind == "ActivationArray":
        return [_activation(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if dml.startswith("UINT (") and isinstance(value, int):  # an enum, stored as its value
        enum_cls = ftype.enum_cls
        try:
            return enum_cls(value)
        except ValueError:
            raise ValidationError(f"{where}: {value} is not a {enum_cls.__name__}") from None
    if attr.kind == "ScaleBias":
        return ScaleBias(*value)
    if attr.kind == "Size2D":
        return Size2D(*value)
    return value  # ScalarUnionData: the 8 union bytes, read in their data type by _scalar_unions


def _activation(value: tuple[str, list], where: str) -> OperatorDesc:
    op_type, attributes = value
    spec = registry.parse_operator_type(op_type)
    kwargs = {}
    fields = [
        f for f in schema_fields(spec.desc_class) if f.metadata.get("kind") in (ATTRIBUTE, COUNT)
    ]
    for k, f in enumerate(fields):
        attr = attributes[k] if k < len(attributes) else None
        kwargs[f.name] = _attribute_value(f, attr, f"{where}.{dml_member_name(f.name)}")
    return spec.desc_class(**{k: v for k, v in kwargs.items() if v is not None})


def _scalar_unions(cls: type, kwargs: dict) -> None:
    """DML_SCALAR_UNION bytes -> the number they hold in the companion data type."""
    for f in dataclasses.fields(cls):
        ftype = f.metadata.get("type")
        if isinstance(ftype, ScalarUnion) and isinstance(kwargs.get(f.name), bytes):
            data_type = ftype.data_type(kwargs, cls)
            raw = kwargs[f.name][: data_type.size]
            kwargs[f.name] = np.frombuffer(raw, data_type.numpy_dtype.newbyteorder("<"))[0].item()


def operator_desc_from_node(
    node: SerializedNode, index: int, constant_inputs: set[str]
) -> OperatorDesc:
    """An operator node as its ``<Name>OperatorDesc`` (fields filled in schema order)."""
    where = f"node {index} ({node.name})"
    try:
        spec = registry.parse_operator_type(node.operator_type)
    except ValidationError:
        raise ValidationError(
            f"{where}: operator type {node.operator_type!r} is empty, invalid or not in dml_jax"
        ) from None
    cls = spec.desc_class
    names = {"input": list(node.input_names), "output": list(node.output_names)}
    descs = {"input": list(node.inputs), "output": list(node.outputs)}
    attrs = list(node.attributes)
    kwargs: dict[str, Any] = {}
    for f in schema_fields(cls):
        kind = f.metadata.get("kind")
        member_path = f"{where}: {spec.name}.{dml_member_name(f.name)}"
        if kind in (INPUT, OUTPUT):
            role = "input" if kind == INPUT else "output"
            if f.metadata["array"]:
                tensors = []
                while descs[role]:
                    name = names[role].pop(0) if names[role] else ""
                    t = descs[role].pop(0)
                    tensors.append(_tensor_desc(t, name in constant_inputs, member_path))
                kwargs[f.name] = tensors
                continue
            if not names[role]:
                raise ValidationError(f"{where}: missing {role} names")
            name = names[role].pop(0)
            if not name:
                kwargs[f.name] = None
                continue
            if not descs[role]:
                raise ValidationError(f"{where}: too few {role} tensor descs for {member_path}")
            t = descs[role].pop(0)
            constant = role == "input" and name in constant_inputs
            kwargs[f.name] = _tensor_desc(t, constant, member_path)
        else:
            if not attrs:
                raise ValidationError(f"{where}: too few attributes for {member_path}")
            kwargs[f.name] = _attribute_value(f, attrs.pop(0), member_path)
    _scalar_unions(cls, kwargs)
    return cls(**{k: v for k, v in kwargs.items() if v is not None or k in _nullable(cls)})


def _nullable(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls) if f.default is None}


# ---------------------------------------------------------------------------------------------
# The graph


@dataclass
class ConvertedGraph:
    """A serialized graph as a ``GraphDesc`` plus what binds its inputs.

    Attributes:
        graph: the DML graph; inputs are the named graph inputs, then one per constant.
        input_names: graph input index -> bind point name (the named inputs only).
        output_names: graph output index -> bind point name.
        constants: graph input index -> (node name, ConstantName or None, inline bytes or None).
    """

    graph: GraphDesc
    input_names: list[str]
    output_names: list[str]
    constants: dict[int, tuple[str, str | None, bytes | None]]


def convert_graph(g: SerializedGraph) -> ConvertedGraph:
    """The ``GraphDesc`` of a parsed serialized graph (DxDispatch's deserialization and
    ``ConvertGraphDesc``, with constants as extra graph inputs).

    Raises:
        ValidationError: an unknown edge name, a nameless node, or a node that does not fill its
            operator's fields.
    """
    graph_inputs = {n: i for i, n in enumerate(g.input_names) if n}
    graph_outputs = {n: i for i, n in enumerate(g.output_names) if n}
    producers: dict[str, tuple[int, int]] = {}
    constant_inputs: set[str] = set()
    operator_index: dict[int, int] = {}
    nodes: list[OperatorDesc] = []
    input_edges: list[InputGraphEdge] = []
    output_edges: list[OutputGraphEdge] = []
    intermediate: list[tuple[int, int, int, int]] = []
    for n, node in enumerate(g.nodes):
        if not node.name:
            raise ValidationError(f"graph node {n} has no name")
        for k, name in enumerate(node.input_names):
            if not name:
                continue
            if name in graph_inputs:
                input_edges.append(InputGraphEdge(graph_inputs[name], n, k))
            elif name in producers:
                intermediate.append((*producers[name], n, k))
            else:
                raise ValidationError(
                    f"node {n} ({node.name}): input '{name}' is neither a graph input nor an "
                    "output of an earlier node"
                )
        for k, name in enumerate(node.output_names):
            if not name:
                continue
            if name in graph_outputs:
                output_edges.append(OutputGraphEdge(n, k, graph_outputs[name]))
            producers[name] = (n, k)
        if node.operator_type is None:
            if node.constant_name is not None:
                if not node.constant_name:
                    raise ValidationError(f"constant node {n} ({node.name}) has no data name")
                constant_inputs.update(node.output_names)
            continue
        operator_index[n] = len(nodes)
        nodes.append(operator_desc_from_node(node, n, constant_inputs))

    def op(n: int, what: str) -> int:
        if n not in operator_index:
            raise ValidationError(f"{what}: node {n} ({g.nodes[n].name}) is not an operator")
        return operator_index[n]

    # Constants become graph inputs after the named ones, one per constant node.
    constants: dict[int, tuple[str, str | None, bytes | None]] = {}
    constant_index: dict[int, int] = {}
    edges_in = [
        InputGraphEdge(
            e.graph_input_index, op(e.to_node_index, "input edge"), e.to_node_input_index
        )
        for e in input_edges
    ]
    edges_mid = []
    for src, k_out, dst, k_in in intermediate:
        source = g.nodes[src]
        if source.operator_type is None:
            if src not in constant_index:
                constant_index[src] = len(g.input_names) + len(constant_index)
                constants[constant_index[src]] = (
                    source.name,
                    source.constant_name,
                    source.constant_data,
                )
            edges_in.append(InputGraphEdge(constant_index[src], op(dst, "constant"), k_in))
        else:
            edges_mid.append(
                IntermediateGraphEdge(operator_index[src], k_out, op(dst, "edge"), k_in)
            )
    edges_out = [
        OutputGraphEdge(
            op(e.from_node_index, "output edge"), e.from_node_output_index, e.graph_output_index
        )
        for e in output_edges
    ]
    graph = GraphDesc(
        len(g.input_names) + len(constants),
        len(g.output_names),
        tuple(nodes),
        tuple(edges_in),
        tuple(edges_out),
        tuple(edges_mid),
    )
    return ConvertedGraph(graph, list(g.input_names), list(g.output_names), constants)


@dataclass
class LoadedGraph:
    """A serialized graph file as a ``GraphDesc`` with the values of its constants.

    Attributes:
        converted: the ``ConvertedGraph`` (the graph and its bind point names).
        constants: graph input index -> the constant's raw bytes (from its file or inline).
    """

    converted: ConvertedGraph
    constants: dict[int, bytes]


def load_serialized_graph(
    file: str, *, read: Any = None, check_constant_path: Any = None
) -> LoadedGraph:
    """Reads a serialized graph file and the constant files next to it.

    Args:
        file: the ``.bin`` path.
        read: ``read(path) -> bytes`` for every file read (a runner's budget checks); default:
            the file's bytes.
        check_constant_path: ``check(path) -> path`` for each constant file before it is read
            (a runner's folder policy); default: none.

    Raises:
        ValidationError: a file that cannot be read or parsed, a node DirectML rejects, or a
            constant with fewer bytes than the tensor it feeds (naming the constant).
    """

    def default_read(path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    read = read or default_read
    try:
        converted = convert_graph(read_serialized_graph(read(file)))
    except OSError as e:
        raise ValidationError(f"cannot read '{file}': {e}") from None
    except (ValueError, UnicodeDecodeError) as e:  # ValidationError is a ValueError
        raise ValidationError(f"'{os.path.basename(file)}': {e}") from None
    folder = os.path.dirname(file)
    constants: dict[int, bytes] = {}
    for index, (node_name, constant_name, inline) in converted.constants.items():
        if inline is None:
            const_file = os.path.join(folder, constant_name + ".bin")
            if check_constant_path is not None:
                const_file = check_constant_path(const_file)
            try:
                inline = read(const_file)
            except OSError as e:
                raise ValidationError(
                    f"constant '{node_name}': cannot read '{const_file}': {e}"
                ) from None
        constants[index] = inline
    return LoadedGraph(converted, constants)
