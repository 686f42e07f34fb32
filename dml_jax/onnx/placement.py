"""Where an ``InferenceSession``'s arrays live on a device mesh (``InferenceSession(mesh=...)``).

The model stays one program; only the layout of its arguments and results is decided here, and
GSPMD (``jax.jit`` over the mesh) partitions everything in between and inserts the
communication. Three sources of layout, in order of precedence:

1. **Explicit shardings** (``shardings={name: PartitionSpec or NamedSharding}``) for model
   inputs and floating-point initializers (the session's parameters), checked when the session
   is made (names, mesh axes, rank) and against each program's shapes (divisibility).
2. **Tensor parallelism** on a mesh axis named ``"model"``: the weights of the GEMMs that read a
   constant graph input as their B matrix (a parameter, or the integer weight of a quantized
   model's integer product) are split Megatron-style, decided once per imported DML graph by
   ``tensor_parallel_specs``; every other parameter is replicated.
3. **Data parallelism** on the mesh's first axis not named ``"model"``: each model input's batch
   dimension (``batch_dim``) is split over it, and each output's batch dimension the same way.

Arrays are placed shard by shard (``place``: each device receives only its block of the host
array, in one process or several), and results read back whole (``fetch``: gathered across
processes through JAX when the mesh spans several).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from ..errors import ValidationError
from ..graph import ConstantDataNode
from ..graph.validation import topological_order
from ..sharding import mesh_axes, ways
from ..tensor import packed_strides
from .elements import ONNX, to_graph_array
from .importer import ImportedGraph

MODEL_AXIS = "model"
# The initializers ``InferenceSession.params`` holds (float, float16, double): the parameters.
PARAM_TYPES = (1, 10, 11)


def auto_mesh(mesh: Mesh) -> Mesh:
    """``mesh`` with every axis of type Auto: GSPMD then propagates the given layouts through
    the program (on explicit axes every reshape of a sharded dimension would need one)."""
    if all(t == AxisType.Auto for t in mesh.axis_types):
        return mesh
    return Mesh(mesh.devices, mesh.axis_names, axis_types=(AxisType.Auto,) * len(mesh.axis_names))


def batch_dim(dims: Sequence[Any], denotations: Sequence[str] = ()) -> int | None:
    """The batch dimension of a declared shape: the one denoted ``DATA_BATCH``, else the first
    whose symbolic name contains "batch" (any case), else dimension 0; None for a scalar."""
    if not dims:
        return None
    for k, d in enumerate(denotations):
        if d.upper() == "DATA_BATCH":
            return k
    for k, d in enumerate(dims):
        if isinstance(d, str) and "batch" in d.lower():
            return k
    return 0


def place(array: Any, sharding: NamedSharding) -> jax.Array:
    """A host array as a global array of ``sharding``: each addressable device receives only its
    own block (no device ever holds the whole array unless the sharding replicates it), which
    also works when the mesh spans several processes (each places its own devices' blocks)."""
    if isinstance(array, jax.Array) and not isinstance(array, jax.core.Tracer):
        if array.sharding.is_equivalent_to(sharding, array.ndim):
            return array
        if array.is_fully_addressable and sharding.is_fully_addressable:
            return jax.device_put(array, sharding)
        array = fetch(array)
    host = np.asarray(array)
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


def fetch(array: jax.Array) -> np.ndarray:
    """A global array as one host array on every process (an all-gather through JAX when some
    of its blocks live on another process's devices)."""
    if not isinstance(array, jax.Array) or array.is_fully_addressable:
        return np.asarray(array)
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(array, tiled=True))


def program_params(
    program: Any, params: Mapping[str, Any], mesh: Mesh, cache: dict
) -> dict[str, Any]:
    """A session program's arguments on ``mesh``: its parameters (``params`` by initializer
    name) placed as its layout says, each device receiving only its block, and its large
    constants that are no parameter (``Program.held``: 4-bit codes, integer weights) as
    arguments rather than compiled in, as on one device: placed as the layout splits them (a
    constant graph input, or a column-parallel product's 4-bit codes), else whole on every
    device. ``cache`` keeps each placed value by value and sharding (and x64 mode), so that
    programs for other shapes share them."""
    x64 = bool(jax.config.read("jax_enable_x64"))
    layout = program.layout
    out = {}
    for p, s in zip(program.imported.params, layout.constants):
        if p is None or p not in params:
            continue
        key = (p, s, x64)
        if key not in cache:
            cache[key] = place(to_graph_array(params[p], f"initializer '{p}'"), s)
        out[p] = cache[key]
    whole = NamedSharding(mesh, PartitionSpec())
    nodes = dict(layout.nodes)
    for key, h in program.held.items():
        t = h.target  # a constant graph input's index, or a data node's (index, type)
        split = layout.constants[t] if isinstance(t, int) else nodes.get(t[0])
        s = split if split is not None else whole
        if (h.same, s) not in cache:
            cache[h.same, s] = place(h.value(), s)
        out[key] = cache[h.same, s]
    return out


@dataclass(frozen=True)
class ProgramLayout:
    """The layout of one program's arguments and results.

    Attributes:
        inputs: one sharding per graph input that is a model input (``ImportedGraph.input_names``).
        constants: one per constant graph input: a sharding for a parameter and for a constant
            the tensor-parallel rule splits (an integer weight of a quantized model); None for
            other constants the program embeds (folded values, integer tensors).
        outputs: one per program output (``ImportedGraph.output_names``).
    """

    inputs: tuple[NamedSharding, ...]
    constants: tuple[NamedSharding | None, ...]
    outputs: tuple[NamedSharding, ...]
    # (node index, sharding) of the constant data nodes the tensor-parallel rule splits (the
    # 4-bit codes of a column-parallel product, held as their packed bytes)
    nodes: tuple[tuple[int, NamedSharding], ...] = ()

    @property
    def graph_inputs(self) -> tuple[NamedSharding | None, ...]:
        return self.inputs + self.constants


class MeshLayout:
    """A session's mesh and explicit shardings, checked once; ``for_program`` lays out each
    program on it.

    Args:
        mesh: a ``jax.sharding.Mesh`` (None: the mesh of the ``NamedSharding`` entries).
        shardings: ``{name: PartitionSpec or NamedSharding}`` for model inputs and parameters.
        inputs: ``(name, declared dims, denotations)`` per model input.
        initializers: ``{name: (dims, ONNX data type)}`` per initializer.
    """

    def __init__(
        self,
        mesh: Mesh | None,
        shardings: Mapping[str, Any] | None,
        inputs: Sequence[tuple[str, Sequence[Any], Sequence[str]]],
        initializers: Mapping[str, tuple[Sequence[int], int]],
    ):
        shardings = dict(shardings or {})
        if mesh is None:
            meshes = [s.mesh for s in shardings.values() if isinstance(s, NamedSharding)]
            if not meshes:
                raise ValidationError(
                    f"{ONNX}: shardings of PartitionSpecs need a mesh: pass mesh=jax.make_mesh(...)"
                )
            mesh = meshes[0]
        if not isinstance(mesh, Mesh):
            raise ValidationError(
                f"{ONNX}: mesh must be a jax.sharding.Mesh, got {type(mesh).__name__}"
            )
        self.mesh = auto_mesh(mesh)
        names = tuple(self.mesh.axis_names)
        self.model_axis = MODEL_AXIS if MODEL_AXIS in names else None
        self.data_axis = next((a for a in names if a != MODEL_AXIS), None)
        self._inputs = {name: (list(dims), list(den)) for name, dims, den in inputs}
        self._initializers = dict(initializers)
        self.specs: dict[str, PartitionSpec] = {}
        for name, s in shardings.items():
            self.specs[name] = self._checked(name, s)

    def _checked(self, name: str, s: Any) -> PartitionSpec:
        """The spec of one explicit sharding, after checking it names something that takes one
        and fits the session's mesh and the tensor's rank."""
        if name in self._inputs:
            where = f"input '{name}'"
            dims = self._inputs[name][0]
        elif name in self._initializers:
            where = f"initializer '{name}'"
            dims, data_type = self._initializers[name]
            if data_type not in PARAM_TYPES:
                raise ValidationError(
                    f"{ONNX}: shardings: {where} is not a floating-point parameter: the program "
                    "embeds it as a constant (replicated on every device)"
                )
        else:
            raise ValidationError(
                f"{ONNX}: shardings: '{name}' is neither an input nor an initializer of the "
                f"model; inputs: {sorted(self._inputs)}"
            )
        if isinstance(s, NamedSharding):
            same = s.mesh.axis_names == self.mesh.axis_names and np.array_equal(
                s.mesh.devices, self.mesh.devices
            )
            if not same:
                raise ValidationError(
                    f"{ONNX}: shardings: {where}: its NamedSharding is over another mesh "
                    f"(axes {s.mesh.axis_names}) than the session's (axes {self.mesh.axis_names})"
                )
            spec = s.spec
        elif isinstance(s, PartitionSpec):
            spec = s
        else:
            raise ValidationError(
                f"{ONNX}: shardings: {where} must be a PartitionSpec or a NamedSharding, got "
                f"{type(s).__name__}"
            )
        used: list[str] = []
        for entry in spec:
            for axis in mesh_axes(entry):
                if axis not in self.mesh.axis_names:
                    raise ValidationError(
                        f"{ONNX}: shardings: {where}: {spec} names mesh axis '{axis}'; the mesh "
                        f"has {tuple(self.mesh.axis_names)}"
                    )
                if axis in used:
                    raise ValidationError(
                        f"{ONNX}: shardings: {where}: {spec} uses mesh axis '{axis}' twice"
                    )
                used.append(axis)
        if dims is not None and len(spec) > len(dims):  # None: an input with no declared shape
            raise ValidationError(
                f"{ONNX}: shardings: {where} has rank {len(dims)} (shape {list(dims)}), but its "
                f"PartitionSpec {spec} has {len(spec)} entries"
            )
        return spec

    def sharding(self, spec: PartitionSpec) -> NamedSharding:
        return NamedSharding(self.mesh, spec)

    def _fitted(self, where: str, spec: PartitionSpec, shape: Sequence[int], why: str) -> None:
        """Checks that each sharded dimension of ``shape`` divides evenly over its mesh axes;
        ``why`` says which rule asked for the split, and ends the message with a way out."""
        if len(spec) > len(shape):
            raise ValidationError(
                f"{ONNX}: shardings: {where} has shape {list(shape)}, but its PartitionSpec "
                f"{spec} has {len(spec)} entries"
            )
        for k, entry in enumerate(spec):
            axes = mesh_axes(entry)
            parts = ways(self.mesh, entry)
            if axes and shape[k] % parts:
                raise ValidationError(
                    f"{ONNX}: {where}: {why} splits dimension {k} (size {shape[k]}, shape "
                    f"{list(shape)}) over the {parts} devices of mesh axes {axes}, which do not "
                    "divide it" + self._way_out(where, why)
                )

    @staticmethod
    def _way_out(where: str, why: str) -> str:
        if why != "data parallelism":
            return ""
        name = where.split("'")[1]
        return f"; give a batch they divide, or shardings={{'{name}': PartitionSpec()}}"

    def for_program(
        self,
        imported: ImportedGraph,
        static: set[str],
        output_dims: Mapping[str, Sequence[Any]],
        heads: Mapping[str, int] | None = None,
    ) -> ProgramLayout:
        """The shardings of one program: see the module docstring for the rules. ``heads``:
        a decoder's cache inputs and outputs by name, each with its heads dimension, which the
        model axis splits as the attention heads of the tensor-parallel projections are split
        (where it divides the heads; an explicit sharding of an input takes precedence)."""
        data = self.data_axis
        heads = heads or {}
        inputs, batch_names, batch_size = [], set(), None
        for name, shape in zip(imported.input_names, imported.input_shapes):
            where = f"input '{name}'"
            if name in self.specs:
                spec = self.specs[name]
                self._fitted(where, spec, shape, "its sharding")
            elif name in self._inputs and name not in static and data is not None:
                dims, den = self._inputs[name]
                k = batch_dim(dims or [None] * len(shape), den)
                spec = PartitionSpec()
                if k is not None and k < len(shape):
                    spec = PartitionSpec(*([None] * k + [data]))
                    self._fitted(where, spec, shape, "data parallelism")
                    if dims and k < len(dims) and isinstance(dims[k], str):
                        batch_names.add(dims[k])
                    batch_size = shape[k] if batch_size is None else batch_size
            else:
                spec = PartitionSpec()  # static, sequence pieces, overridden initializers
            if name in heads and name not in self.specs:
                spec = self._with_heads(spec, heads[name], shape)
            inputs.append(self.sharding(spec))
        planned = {}
        if self.model_axis is not None and imported.graph is not None:
            fixed = {j: self.specs[p] for j, p in enumerate(imported.params) if p in self.specs}
            ways = self.mesh.shape[self.model_axis]
            # a decoder's key and value projections, where the axis does not divide its heads
            whole = frozenset(
                shape[dim] * shape[-1]
                for name, shape in zip(imported.input_names, imported.input_shapes)
                if (dim := heads.get(name)) is not None and dim < len(shape)
                and shape[dim] % ways
            )  # fmt: skip
            planned = tensor_parallel_specs(imported, self.model_axis, ways, fixed, whole)
        nodes = tuple(
            (key[1], self.sharding(spec)) for key, spec in planned.items() if isinstance(key, tuple)
        )
        constants = []
        for j, (c, p) in enumerate(zip(imported.constants, imported.params)):
            if p is None:  # a constant that is no parameter: split only where the rule says
                constants.append(self.sharding(planned[j]) if j in planned else None)
                continue
            if p in self.specs:
                spec = self.specs[p]
                if tuple(self._initializers[p][0]) != tuple(c.shape) and any(spec):
                    raise ValidationError(
                        f"{ONNX}: shardings: initializer '{p}' enters the program with shape "
                        f"{list(c.shape)}, not its own {list(self._initializers[p][0])}: its "
                        "PartitionSpec cannot be applied"
                    )
                self._fitted(f"initializer '{p}'", spec, c.shape, "its sharding")
            else:
                spec = planned.get(j, PartitionSpec())
            constants.append(self.sharding(spec))
        outputs = []
        for name, shape in zip(imported.output_names, imported.output_shapes):
            spec = PartitionSpec()
            dims = list(output_dims.get(name) or [])
            k = next((i for i, d in enumerate(dims) if d in batch_names), None)
            if k is None and shape:
                k = batch_dim(dims or [None] * len(shape))
            if batch_size is not None and k is not None and k < len(shape):
                ways = self.mesh.shape[data]
                if shape[k] == batch_size and shape[k] % ways == 0:
                    spec = PartitionSpec(*([None] * k + [data]))
            if name in heads:
                spec = self._with_heads(spec, heads[name], shape)
            outputs.append(self.sharding(spec))
        return ProgramLayout(tuple(inputs), tuple(constants), tuple(outputs), nodes)

    @property
    def disabled_rewrites(self) -> frozenset:
        """Graph rewrites a session on this mesh leaves out: with a model axis, the join of a
        layer's quantized products that read one input (ParallelQuantizedGemms: Q, K and V;
        gate and up), whose columns the split would cut into blocks that do not follow the
        attention's heads (GSPMD then moves the attention's inputs between devices: the tiny
        4-bit LLaMA decoder's step over two CPU devices, 10 collective-permutes beside its 4
        all-reduces joined; apart, Megatron's two all-reduces a layer alone)."""
        return frozenset({"ParallelQuantizedGemms"}) if self.model_axis else frozenset()

    def _with_heads(self, spec: PartitionSpec, dim: int, shape: Sequence[int]) -> PartitionSpec:
        """``spec`` with dimension ``dim`` (a cache's heads) split over the model axis, where
        there is one and it divides that dimension."""
        model = self.model_axis
        if model is None or dim >= len(shape) or shape[dim] % self.mesh.shape[model]:
            return spec
        entries = list(spec) + [None] * (dim + 1 - len(spec))
        if entries[dim] is not None:
            return spec
        entries[dim] = model
        return PartitionSpec(*entries)


def tensor_parallel_specs(
    imported: ImportedGraph,
    axis: str,
    ways: int,
    fixed: Mapping[int, PartitionSpec] | None = None,
    whole: frozenset = frozenset(),
) -> dict[Any, Any]:
    """Megatron tensor parallelism decided on the imported DML graph: for each constant graph
    input read as the B matrix of a GEMM (a parameter, or a constant: the integer weight of a
    quantized model, read by the integer products of ``_PRODUCTS`` or through its
    dequantization), the ``PartitionSpec`` that splits it over mesh axis ``axis`` (``ways``
    devices), by constant index; and for each constant data node so read (MatMulNBits's 4-bit
    codes, held as packed bytes {N, K / 2}, N first) that a column split divides, the split of
    its bytes, under the key ``("node", node index)``. A row split of such codes (along K) has
    no view of the packed bytes: they stay whole, the product's partial sums all-reduced as
    for the others.

    The rule pairs the GEMMs of each block without knowing layer names. Walking the graph with
    each node after its sources, a parameter GEMM whose A operand is computed (through any
    nodes but other parameter GEMMs) from the output of a column-split GEMM is split by rows
    (its K dimension: each device multiplies its slice of the activations, and the partial sums
    are all-reduced); every other parameter GEMM is split by columns (its N dimension: each
    device computes its slice of the outputs, no communication). So attention's Q, K and V
    projections split by columns (and the heads with them, when the head count divides), the
    output projection by rows; an MLP's first matrix by columns and its second by rows; two
    all-reduces per transformer layer. A column split reaches a node only through inputs of
    more than one value: a dynamically quantized product's scale, computed from its row-split
    input, does not carry it past the product (which then adds one small all-reduce of that
    input's range). Norms, biases, embeddings and everything else stay replicated. A weight
    whose dimension does not divide stays replicated (and counts as not split), and so does a
    product of ``whole`` output columns that would be split by them (a decoder's key and value
    projections where the axis does not divide its key-value heads: each device's block would
    cut a head, and the attention's inputs would move between devices), and one placed
    explicitly (``fixed``, by constant index) unless its spec splits the N dimension over
    ``axis``. Results never depend on this choice: GSPMD inserts whatever communication the
    layout needs.
    """
    graph = imported.graph
    fixed = fixed or {}
    count = len(imported.input_names)
    sources: dict[int, dict[int, int]] = {}  # node -> input slot -> producing node
    const_of: dict[int, int] = {}  # identity node -> constant index
    for e in graph.input_edges:
        if e.graph_input_index >= count:
            const_of[e.to_node_index] = e.graph_input_index - count
    for e in graph.intermediate_edges:
        sources.setdefault(e.to_node_index, {})[e.to_node_input_index] = e.from_node_index
    specs: dict[int, Any] = {}
    reaches_column = [False] * len(graph.nodes)
    # in an order where every node follows its sources (rewrites append the nodes they make)
    for n in topological_order(graph):
        node = graph.nodes[n]
        srcs = sources.get(n, {})
        # A column split reaches a node through its inputs that hold the split dimension; a
        # single value does not carry it (a dynamically quantized product's scale, computed
        # from its split input, flows on past the row-parallel product that gathers the split).
        inputs = node.edge_slots("input") if hasattr(node, "edge_slots") else ()
        upstream = any(
            reaches_column[m]
            for slot, m in srcs.items()
            if not (slot < len(inputs) and _single(inputs[slot][1]))
        )
        slots = _product_slots(node)
        if slots is None or slots[1] not in srcs:
            reaches_column[n] = upstream
            continue
        a_slot, b_slot, transposed = slots
        source = srcs[b_slot]
        if graph.nodes[source].operator_type in _DEQUANTIZE and 0 in sources.get(source, {}):
            # a quantized weight (QDQ, MatMulNBits): the codes its dequantization reads
            source = sources[source][0]
        a = srcs.get(a_slot)
        row = a is not None and reaches_column[a]
        if not row and node.output_tensor.sizes[-1] in whole:
            continue  # replicated: its columns' blocks would cut the heads
        if isinstance(graph.nodes[source], ConstantDataNode):
            # 4-bit codes {N, K} held as their packed bytes, N first (read with TransB): a column
            # split is a split of the bytes into N's blocks; a row split (of K) has no such view
            # and stays whole, as do codes held K first
            rows_n = node.b_tensor.sizes[-2]
            size = graph.nodes[source].data_size
            if transposed and not row and rows_n % ways == 0 and size % ways == 0:
                specs[("node", source)] = PartitionSpec(axis)
                reaches_column[n] = True
            continue
        j = const_of.get(source)
        if j is None:
            reaches_column[n] = upstream  # a product of two activations (attention scores)
            continue
        b = node.b_tensor
        shape = imported.constants[j].shape
        if j in fixed:
            k = _constant_axis(b.sizes, b.strides, b.rank - (2 if transposed else 1), shape)
            spec = tuple(fixed[j])
            reaches_column[n] = k is not None and k < len(spec) and axis in mesh_axes(spec[k])
            continue
        dim = b.rank - (2 if row != transposed else 1)  # K: -2 (-1 transposed); N: -1 (-2)
        k = _constant_axis(b.sizes, b.strides, dim, shape)
        if k is None or shape[k] % ways:
            continue  # replicated, and not split for what follows
        specs[j] = PartitionSpec(*([None] * k + [axis]))
        reaches_column[n] = not row
    return specs


def _single(desc: Any) -> bool:
    """Whether a tensor desc holds one value (or is absent)."""
    return desc is None or desc.element_count <= 1


# A weight read through its dequantization (a QDQ model's DequantizeLinear, element-wise, of
# the same sizes; MatMulNBits's DEQUANTIZE, one scale a block of K): the rule splits the
# quantized constant.
_DEQUANTIZE = frozenset({
    "DML_OPERATOR_ELEMENT_WISE_DEQUANTIZE_LINEAR",
    "DML_OPERATOR_DEQUANTIZE",
})  # fmt: skip

# The matrix products whose B the rule splits: GEMM, and the integer ones of quantized models
# (MatMulInteger, QDQ pairs fused to MatMulIntegerToFloat, QLinearMatMul), whose B is {K, N}.
_PRODUCTS = frozenset({
    "DML_OPERATOR_GEMM",
    "DML_OPERATOR_MATRIX_MULTIPLY_INTEGER",
    "DML_OPERATOR_MATRIX_MULTIPLY_INTEGER_TO_FLOAT",
    "DML_OPERATOR_QUANTIZED_LINEAR_MATRIX_MULTIPLY",
})  # fmt: skip


def _product_slots(node: Any) -> tuple[int, int, bool] | None:
    """For a matrix product of ``_PRODUCTS``: the graph-edge input indices of its A and B and
    whether B is read transposed (GEMM's TransB); else None."""
    if node.operator_type not in _PRODUCTS:
        return None
    names = [name for name, _ in node.edge_slots("input")]
    trans_b = getattr(node, "trans_b", None)
    return (
        names.index("ATensor"),
        names.index("BTensor"),
        getattr(trans_b, "name", "") == "TRANSPOSE",
    )


def _constant_axis(sizes, strides, dim: int, shape: Sequence[int]) -> int | None:
    """The axis of a packed constant of ``shape`` that dimension ``dim`` of a desc reading it
    (``sizes``, ``strides``: a view) walks along; None when it is not one axis."""
    strides = tuple(strides) if strides is not None else packed_strides(tuple(sizes))
    own = packed_strides(tuple(shape))
    hits = [k for k in range(len(shape)) if shape[k] == sizes[dim] and own[k] == strides[dim]]
    return hits[0] if len(hits) == 1 and sizes[dim] > 1 else None
