"""ONNX models as one DML graph: values, the graph under construction, and the import walk
(which ONNX element type each value has in the graph: ``elements.py``; what is read from the
model's protos, shapes and tensors: ``protos.py``).

An ONNX tensor is a ``Value``: its static shape, the DML data type it has in the graph, and
where its data lives (a node output of the graph being built, or a constant known at import
time). The walk visits the nodes in order; for each one it

1. checks the node against its op's schema (input and output counts, attribute types), so a
   converter only ever sees a well-formed node;
2. folds it when every input is known at import (initializers, Constants, shapes, results of
   earlier folds): the node is evaluated on the host by ``fold.evaluate`` and its outputs are
   constants, as ONNX Runtime's constant folding does;
3. otherwise hands it to its converter (``converters.lookup``), which adds DirectML operator
   nodes through ``Context.node``; an op with no converter whose ONNX schema has a function
   body is expanded and its body walked in its place (``functions.expand``).

Every shape is static: the session fixes free dimensions from the inputs of each run before
importing (one import per input-shape set), so ``Shape`` always folds. Converters ask for the
inputs DirectML needs as constants with ``Context.const``; one that depends on a graph input's
values raises ``NeedsValues``, and the session then specialises on those values.

64-bit integers: ONNX INT64 / UINT64 tensors are INT32 / UINT32 tensors of the DML graph (the
low 32 bits, as ONNX Runtime's DirectML provider reads them through strides). Values known at
import keep their 64-bit type (folding is exact); a constant or graph input that does not fit in
32 bits is a ``ValidationError``, never a truncated value (docs/semantics.md, "ONNX").
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from ..enums import DataType
from ..errors import ValidationError
from ..graph import ConstantDataNode, FunctionNode, GraphDesc
from ..registry import lookup
from ..tensor import TensorDesc, packed_strides
from .elements import (
    BFLOAT16,
    BOOL,
    CARRIED,
    ONNX,
    TYPE_NAMES,
    check_dml_shape,
    elem_type_of,
    graph_dtype,
    round_to_bfloat16,
    to_graph_array,
)
from .protos import array_of


def elem_of(v: Value) -> int:
    """The ONNX element type of a tensor value: its constant's, a carried type's own, BOOL,
    else its graph type's."""
    if v.const is not None:
        return elem_type_of(v.const.dtype)
    if v.carried:
        return v.carried
    return BOOL if v.is_bool else elem_type_of(v.data_type.numpy_dtype)


def identity(desc: TensorDesc) -> Any:
    """ELEMENT_WISE_IDENTITY from ``desc`` to itself (how a graph input or constant enters)."""
    return lookup("DML_OPERATOR_ELEMENT_WISE_IDENTITY").desc_class(desc, desc)


@dataclass(frozen=True, eq=False)
class Value:
    """One ONNX tensor while importing.

    Attributes:
        shape: the ONNX shape (``()`` for a scalar).
        data_type: its DML data type in the graph (INT64 -> INT32, BOOL -> UINT8).
        source: ``("node", n, k)`` (output k of node n, packed) or ``("const",)``.
        const: the value when known at import time, in its ONNX dtype (int64, bool, ...).
        is_bool: ONNX BOOL (stored as UINT8).
        param: the initializer's name when this is a floating-point initializer (a parameter:
            never folded into other constants, so ``InferenceSession.apply`` can replace it).
        deps: the graph inputs whose values this value depends on.
        shadow: for a value computed in the graph from parameters and constants only, its value
            at the parameters' initializer values (what ``Context.const`` reads).
        carried: the ONNX element type of a tensor whose type no DML tensor holds (bfloat16,
            float8, 4-bit...), held in ``data_type``, its carrier (``CARRIED``); else 0.
    """

    shape: tuple[int, ...]
    data_type: DataType
    source: tuple
    const: np.ndarray | None = None
    is_bool: bool = False
    param: str | None = None
    deps: frozenset = frozenset()
    shadow: np.ndarray | None = None
    carried: int = 0

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_const(self) -> bool:
        return self.const is not None

    @property
    def known(self) -> np.ndarray | None:
        """The value when it is known at import: the constant, else the shadow."""
        return self.const if self.const is not None else self.shadow

    def view(self, shape: Sequence[int] | None = None) -> Value:
        """The same data under another shape of the same element count (a reshape)."""
        shape = tuple(int(d) for d in shape)
        const = None if self.const is None else self.const.reshape(shape)
        shadow = None if self.shadow is None else self.shadow.reshape(shape)
        return replace(self, shape=shape, const=const, shadow=shadow)


@dataclass(frozen=True, eq=False)
class SequenceValue:
    """An ONNX sequence while importing: its tensors, each a ``Value``. Its length and every
    tensor's shape are known at import (the session imports once per input structure), so the
    sequence ops only rearrange this tuple; only its tensors' data may be computed at run time.

    Attributes:
        items: the tensors, in order.
        elem_type: the ONNX element type of its tensors (0 when unknown: an empty sequence with
            no declared type).
        deps: the graph inputs whose values its structure was computed from.
    """

    items: tuple[Value, ...]
    elem_type: int = 0
    deps: frozenset = frozenset()
    # Not a tensor: never folded, never a constant or a parameter itself (the import walk reads
    # these of every input).
    const = None
    known = None
    param = None
    shadow = None


@dataclass(frozen=True, eq=False)
class OptionalValue:
    """An ONNX optional while importing: a ``Value`` or ``SequenceValue``, or None when empty.
    Whether it holds an element is known at import.

    Attributes:
        value: the element, or None.
        deps: the graph inputs whose values its structure was computed from.
    """

    value: Value | SequenceValue | None
    deps: frozenset = frozenset()
    const = None
    known = None
    param = None
    shadow = None


STRUCTURES = (SequenceValue, OptionalValue)


def leaves(value: Any) -> list[Value]:
    """The tensors of a value, a sequence or an optional, in order."""
    if isinstance(value, SequenceValue):
        return list(value.items)
    if isinstance(value, OptionalValue):
        return [] if value.value is None else leaves(value.value)
    return [value]


def rebuild(template: Any, tensors: Any) -> Any:
    """A value of ``template``'s structure whose tensors are the next ones of the iterator
    ``tensors`` (the inverse of ``leaves``)."""
    if isinstance(template, SequenceValue):
        items = tuple(next(tensors) for _ in template.items)
        return SequenceValue(items, template.elem_type, template.deps)
    if isinstance(template, OptionalValue):
        inner = None if template.value is None else rebuild(template.value, tensors)
        return OptionalValue(inner, template.deps)
    return next(tensors)


def structure_of(value: Any) -> Any:
    """What must agree between two values for one to stand for the other in a compiled
    program: their structure, and each tensor's shape and data type."""
    if isinstance(value, SequenceValue):
        return ("seq", tuple(structure_of(v) for v in value.items))
    if isinstance(value, OptionalValue):
        return ("opt", None if value.value is None else structure_of(value.value))
    return (tuple(value.shape), value.data_type, bool(value.is_bool), value.carried)


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
    if len(src) > len(out) or any(n not in (1, m) for n, m in zip(src, out)):
        # Read past its end or not as numpy would: the operands of the node disagree.
        raise ValidationError(
            f"an operand of shape {list(value.shape)} does not broadcast to {list(shape)}"
        )
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


def const_value(array: Any, where: str = "", *, param: str | None = None) -> Value:
    """A value known at import time (``array`` keeps its dtype: int64 stays int64)."""
    array = np.asarray(array)
    elem = elem_type_of(array.dtype)
    if not elem:
        raise ValidationError(f"{ONNX}: {where}: data type {array.dtype} has no DML data type")
    data_type = DataType.from_dtype(graph_dtype(array.dtype))
    carried = elem if elem in CARRIED else 0
    is_bool = array.dtype == np.bool_
    return Value(tuple(array.shape), data_type, ("const",), array, is_bool, param, carried=carried)


class NeedsValues(ValidationError):
    """A converter needs, as a constant, a value computed from graph inputs' values (``names``).
    ``InferenceSession`` specialises on those inputs and imports again."""

    def __init__(self, message: str, names: frozenset):
        super().__init__(message)
        self.names = names


class NeedsSizes(ValidationError):
    """Values the import needs as constants are computed at run time: a node's output shape
    (NonZero, Unique, Compress, NonMaxSuppression), the condition of an If whose branches give
    different shapes, the iteration count of a Loop with scan outputs. ``InferenceSession.run``
    computes ``fn(*arrays)`` (a tuple of ints) from the values of ``values`` with the device
    program of the import up to that node (``probe``, set by the import walk: a segment of its
    own, read on the host), then imports again with ``sizes[key]`` set; the program is cached
    per sizes."""

    def __init__(self, message: str, key: str, values: tuple, fn: Callable):
        super().__init__(message)
        self.key = key
        self.values = values
        self.fn = fn
        self.probe: ImportedGraph | None = None
        # the values the probe also returns, for later imports (``resume``): (name, Resumed)
        self.frontier: tuple = ()


class NeedsHost(ValidationError):
    """A node inside a subgraph compiled as one function (a Loop or Scan body, an If branch
    under ``lax.cond``) needs a value computed at run time on the host (``Context.sizes``),
    which no value of such a function can be. An If on a run-time condition then runs as
    segments instead (its branch imported in its place)."""


@dataclass
class GraphConstant:
    """A constant graph input: its value in the graph's dtype, the initializer it is when it is
    a parameter, and the initializer it is unchanged, parameter or not (an integer weight)."""

    array: np.ndarray
    param: str | None = None
    name: str | None = None


class Builder:
    """The DML graph under construction: nodes, and for each node input the value it reads."""

    def __init__(self):
        self.nodes: list[Any] = []
        self.origin: list[int] = []  # for each node, the index of the ONNX node it came from
        self.feeds: list[tuple[int, int, Value]] = []  # (node, input slot, value)
        self.constants: list[GraphConstant] = []  # graph inputs after the model's own inputs
        self.where = ""  # the ONNX node being converted (for error messages)
        self.sizes: dict[str, tuple[int, ...]] = {}  # run-time sizes, by ``NeedsSizes.key``
        # The label of the subgraph (a Loop or Scan body, a branch under lax.cond) when this
        # builds its own graph, compiled as one function: no value of it is read on the host.
        self.subgraph: str | None = None
        self.onnx_index = -1
        self._const_nodes: dict[int, Value] = {}
        # the initializers' values (``Value.const``, alive while the graph is walked) by id:
        # their names, for the constants that are initializers unchanged
        self.initializers: dict[int, str] = {}
        self.node_names: dict[int, str] = {}  # constant data nodes made of an initializer's bytes
        # (("input", i) | ("const", j), the identity node that reads that graph input)
        self._graph_inputs: list[tuple[tuple[str, int], int]] = []

    def _append(self, desc: Any) -> int:
        self.nodes.append(desc)
        self.origin.append(self.onnx_index)
        return len(self.nodes) - 1

    def node(self, desc: Any, inputs: Sequence[Value | None]) -> int:
        """Adds an operator node whose present input tensors read ``inputs`` in slot order
        (an absent optional tensor takes ``None``); returns the node index."""
        slots = desc.edge_slots("input")
        if len(slots) != len(inputs):
            raise AssertionError(f"{desc.operator_type}: {len(slots)} input slots, {len(inputs)}")
        materialized = [
            None if slot_desc is None else self.materialize(v)
            for (_, slot_desc), v in zip(slots, inputs)
        ]
        n = self._append(desc)
        for k, ((_, slot_desc), v) in enumerate(zip(slots, materialized)):
            if slot_desc is not None:
                self.feeds.append((n, k, v))
        return n

    def output(self, n: int, k: int, shape: Sequence[int], *, is_bool: bool = False) -> Value:
        """Output k of node n as an ONNX value of ``shape`` (the node writes it packed)."""
        desc = self.nodes[n].edge_slots("output")[k][1]
        return Value(tuple(shape), desc.data_type, ("node", n, k), None, is_bool)

    def graph_input(self, index: int, value_shape: Sequence[int], data_type: DataType) -> int:
        """The identity node through which model input ``index`` enters."""
        n = self._append(identity(packed(data_type, value_shape)))
        self._graph_inputs.append((("input", index), n))
        return n

    def constant_data(
        self, data: np.ndarray, data_type: DataType, shape: Sequence[int], of: Value | None = None
    ) -> Value:
        """A constant the graph holds itself (a ``ConstantDataNode``: DirectML's constant data
        node), for a type no ELEMENT_WISE_IDENTITY takes, so that no graph input can enter
        through one: UINT4 / INT4, whose ``data`` are DirectML's packed bytes (two elements a
        byte, element 0 in the low nibble). Each reader reads the bytes through its own desc;
        the value is ``shape`` elements of ``data_type``. No parameter can replace it. ``of``:
        the value whose bytes these are, named after it where it is an initializer."""
        n = self._append(ConstantDataNode(np.ascontiguousarray(data)))
        name = None if of is None else self.initializers.get(id(of.const))
        if name is not None:
            self.node_names[n] = name
        return Value(tuple(int(d) for d in shape), data_type, ("node", n, 0))

    def materialize(self, v: Value) -> Value:
        """A constant becomes a graph input read once by an identity node (its consumers then
        view that node's packed output as they like)."""
        if v.source[0] == "node":
            return v
        key = id(v.const)
        if key not in self._const_nodes:
            if v.const.size == 0:
                raise ValidationError(
                    f"{ONNX}: {self.where}: an empty tensor (shape {list(v.shape)}) cannot be "
                    "an operand of a DML operator"
                )
            check_dml_shape(v.shape, self.where, "the constant")
            desc = packed(v.data_type, v.shape)
            array = to_graph_array(v.const, self.where).reshape(desc.sizes)
            g = ("const", len(self.constants))
            name = self.initializers.get(key)
            self.constants.append(GraphConstant(np.ascontiguousarray(array), v.param, name))
            n = self._append(identity(desc))
            self._graph_inputs.append((g, n))
            self._const_nodes[key] = replace(v, source=("node", n, 0))
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
        params: for each constant, the initializer it is when it is a parameter, else None.
        constant_names: for each constant, the initializer it is unchanged (a parameter or an
            integer weight), else None (a folded value).
        node_names: ``(ConstantDataNode, initializer)`` for the constant data nodes that hold
            an initializer's bytes (MatMulNBits's 4-bit codes): by node, not index, which the
            graph optimizations change.
        input_dtypes, output_dtypes: the ONNX NumPy dtypes (int64, bool, ...).
        origin: for each DML node, the index of the ONNX node it came from.
        onnx_nodes: a line per ONNX node, ``(where, how)``: how it was imported ("dml",
            "folded", "function", "view"; "from a segment": its outputs are inputs, computed
            by a segment before the program, ``resume``).
        output_consts: for each output, its value when it is known at import (it then has no
            DML graph output; ``graph`` is None when no output has one).
        layouts: for each model input or output that is a sequence or an optional, ``("input"
            | "output", name, layout)``: the names its tensors have among the inputs / outputs
            above, as a list (a sequence), a name (an optional's tensor) or None (an empty
            optional).
        optimizations: ``(rewrite name, places rewritten)`` for each graph optimization that
            changed the graph (``optimize.optimize``), in the order they ran.
    """

    graph: GraphDesc | None
    input_names: tuple[str, ...]
    input_shapes: tuple[tuple[int, ...], ...]
    input_types: tuple[DataType, ...]
    output_names: tuple[str, ...]
    output_shapes: tuple[tuple[int, ...], ...]
    output_types: tuple[DataType, ...]
    output_bool: tuple[bool, ...]
    constants: tuple[np.ndarray, ...]
    params: tuple[str | None, ...] = ()
    input_dtypes: tuple[np.dtype, ...] = ()
    output_dtypes: tuple[np.dtype, ...] = ()
    origin: tuple[int, ...] = ()
    onnx_nodes: tuple[tuple[str, str], ...] = ()
    output_consts: tuple[np.ndarray | None, ...] = ()
    layouts: tuple[tuple[str, str, Any], ...] = ()
    optimizations: tuple[tuple[str, int], ...] = ()
    constant_names: tuple[str | None, ...] = ()
    node_names: tuple[tuple[Any, str], ...] = ()

    @functools.cached_property
    def constant_bytes(self) -> int:
        """The bytes of the constants (the weights and folded constants): the constant graph
        inputs and the graph's constant data nodes (``Builder.constant_data``); computed once
        (``run`` asks at every call on a CPU)."""
        held = () if self.graph is None else self.graph.nodes
        nodes = sum(d.data_size for d in held if isinstance(d, ConstantDataNode))
        return nodes + sum(int(np.asarray(c).nbytes) for c in self.constants)


Converter = Callable[["Context", Any, list], list]


class Context:
    """What a converter sees: the builder, the node's attributes, the model's opsets."""

    def __init__(
        self,
        builder: Builder,
        node: Any,
        opsets: Mapping[str, int],
        where: str,
        inputs: Sequence[Value | None] = (),
    ):
        import onnx

        self._inputs = list(inputs)
        self.builder = builder
        self.onnx_node = node
        self.opsets = opsets
        self.opset = opsets.get(node.domain or "", opsets.get("", 1))
        self.where = where
        self.attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}

    @property
    def output_count(self) -> int:
        """How many outputs the node asks for (trailing unnamed ones not counted)."""
        names = list(self.onnx_node.output)
        while names and not names[-1]:
            names.pop()
        return len(names)

    def wants(self, k: int) -> bool:
        """Whether output ``k`` is asked for (named)."""
        return k < len(self.onnx_node.output) and bool(self.onnx_node.output[k])

    def attr(self, name: str, default: Any = None) -> Any:
        """Attribute ``name``'s value (strings decoded: ONNX's are UTF-8 text)."""
        v = self.attrs.get(name, default)
        if isinstance(v, bytes):
            return self._text(name, v)
        if isinstance(v, list | tuple) and v and isinstance(v[0], bytes):
            return [self._text(name, s) for s in v]
        return v

    def _text(self, name: str, value: bytes) -> str:
        try:
            return value.decode()
        except UnicodeDecodeError:
            raise self.fail(f"attribute '{name}' holds {value[:16]!r}, which is not UTF-8 text")

    def tensor_attr(self, name: str) -> np.ndarray | None:
        """The value of the tensor attribute ``name`` (None when absent), checked as an
        initializer is (``check_tensor``), external data read from the model's folder."""
        tensor = self.attrs.get(name)
        if tensor is None:
            return None
        walk = getattr(self, "walk", None)
        base_dir = getattr(walk, "base_dir", None)
        return array_of(tensor, base_dir, f"{self.where}: attribute '{name}'")

    def fail(self, message: str) -> ValidationError:
        return ValidationError(f"{ONNX}: {self.where}: {message}")

    def const(self, v: Value | None, what: str) -> np.ndarray | None:
        """An input that must be known at import time (a shape, axes, pads): its value."""
        if v is None:
            return None
        if v.known is None:
            message = f"{ONNX}: {self.where}: input '{what}' must be known before the run"
            if v.deps:
                raise NeedsValues(
                    f"{message}; it is computed from the values of graph inputs {sorted(v.deps)}",
                    v.deps,
                )
            raise ValidationError(f"{message} (an initializer, a Constant or a folded value)")
        return v.known

    def sizes(
        self,
        fn: Callable[..., Sequence[int]],
        inputs: Sequence[Value],
        key: str | None = None,
        what: str | None = None,
    ) -> tuple[int, ...]:
        """Sizes (or other integers: a branch taken, an iteration count) the node's import
        depends on: ``fn`` computes them from NumPy arrays of the values ``inputs``. Computed
        here when the inputs are known at import; otherwise the session computes them at run
        time with the device program up to this node (``NeedsSizes``) and imports once per
        distinct result. ``key`` names the need (default: the node's place, ``where``);
        ``what`` says what depends on the values (default: the node's output shape)."""
        known = [v.known for v in inputs]
        if all(k is not None for k in known):
            return tuple(int(n) for n in fn(*known))
        key = self.where if key is None else key
        if key in self.builder.sizes:
            return self.builder.sizes[key]
        if what is None:
            what = f"{self.onnx_node.op_type}'s output shape depends on values computed at run time"
        if self.builder.subgraph is not None:
            raise NeedsHost(
                f"{ONNX}: {self.where}: {what}, inside a subgraph compiled as one function (a "
                "Loop or Scan body, an If branch under lax.cond), where no value is read on the "
                "host"
            )
        raise NeedsSizes(
            f"{ONNX}: {self.where}: {what}: run() computes them first, with the program up to "
            "this node, then runs the program imported for them (jit/apply/fn cannot trace such "
            "a model)",
            key,
            tuple(inputs),
            fn,
        )

    def constant(self, array: Any) -> Value:
        """A value known at import time."""
        return const_value(array, self.where)

    def node(self, desc: Any, inputs: Sequence[Value | None]) -> int:
        return self.builder.node(desc, inputs)

    def jax(
        self,
        name: str,
        fn: Callable[..., Sequence[Any]],
        inputs: Sequence[Value | None],
        outputs: Sequence[tuple],
    ) -> list[Value]:
        """Adds a node computed by ``fn`` with JAX where DirectML has no operator (a
        ``graph.FunctionNode``, reported as ``jax``): ``fn`` takes one array per present input in
        its ONNX shape and graph dtype (BOOL as UINT8) and returns one array per output of
        ``outputs`` (``(shape, data_type[, is_bool[, carried]])``, ``carried`` the ONNX type a
        carrier holds, ``Value.carried``), which it may return in any dtype and a shape of the
        same element count."""
        shapes = [tuple(v.shape) for v in inputs if v is not None]
        specs = [(tuple(o[0]), o[1], bool(o[2]) if len(o) > 2 else False) for o in outputs]
        carried = [int(o[3]) if len(o) > 3 else 0 for o in outputs]
        descs = tuple(packed(t, shape) for shape, t, _ in specs)

        def lowered(*arrays):
            results = fn(*(x.reshape(shape) for x, shape in zip(arrays, shapes)))
            return tuple(
                jnp.asarray(y).reshape(d.sizes).astype(d.data_type.numpy_dtype)
                for y, d in zip(results, descs)
            )

        node = FunctionNode(
            name,
            tuple(None if v is None else packed(v.data_type, v.shape) for v in inputs),
            descs,
            lowered,
        )
        n = self.builder.node(node, inputs)
        return [replace(self.out(n, shape, k, is_bool=b), carried=c)
                for k, ((shape, _, b), c) in enumerate(zip(specs, carried))]  # fmt: skip

    def carry(self, v: Value, elem: int, fn: Callable | None = None) -> Value:
        """``v`` (a value in the carrier of the ONNX type ``elem``, ``CARRIED``) rounded to
        ``elem`` and held in the carrier again, a JAX node (no DML tensor holds these types);
        ``fn`` maps v's array to the rounded one in ``elem``'s dtype (default: a plain
        conversion, nearest, ties to even)."""
        carrier, dtype = CARRIED[elem]
        if fn is None and elem == BFLOAT16:
            convert = round_to_bfloat16
        else:
            # XLA may drop a narrowing conversion followed by a widening one where it allows
            # excess precision (its GPU compiler's default): the barrier keeps the rounding.
            convert = lambda x: lax.optimization_barrier((fn or (lambda a: a.astype(dtype)))(x))
        (y,) = self.jax(f"Round.{TYPE_NAMES[elem]}", lambda x: (convert(x),), [v],
                        [(v.shape, carrier)])  # fmt: skip
        return replace(y, carried=elem)

    def out(self, n: int, shape: Sequence[int], k: int = 0, *, is_bool: bool = False) -> Value:
        return self.builder.output(n, k, shape, is_bool=is_bool)
