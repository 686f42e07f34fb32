"""The import walk: every node of an ONNX graph, in order, schema-checked, then folded,
converted, or expanded as its function body (``importer``'s docstring describes the steps);
then the DML graph is numbered and pruned into an ``ImportedGraph``."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import jax.numpy as jnp
import numpy as np

from ..enums import DataType
from ..errors import ValidationError
from ..graph import FunctionNode, GraphDesc, InputGraphEdge, IntermediateGraphEdge, OutputGraphEdge
from . import fold, functions, resume, schema
from .elements import (
    BOOL,
    CARRIED,
    ONNX,
    TYPE_NAMES,
    check_dml_shape,
    data_type_of,
    elem_type_of,
    graph_dtype,
    numpy_dtype_of,
)
from .importer import (
    STRUCTURES,
    Builder,
    Context,
    Converter,
    ImportedGraph,
    NeedsSizes,
    NeedsValues,
    OptionalValue,
    SequenceValue,
    Value,
    const_value,
    elem_of,
)
from .protos import array_of, check_tensor, opsets_of, shape_of, where_of


@dataclass
class Walk:
    """State of one import: the builder, the values by name, how each ONNX node went."""

    builder: Builder
    opsets: dict[str, int]
    converters: Any
    values: dict[str, Value] = field(default_factory=dict)
    report: list[tuple[str, str]] = field(default_factory=list)
    max_memory: int | None = None
    base_dir: str | None = None  # where external data is (attribute tensors read it too)
    # values an earlier segment computed (``resume``), by name: a top-level node whose outputs
    # are all among them is not imported again
    resumed: dict[str, Value] = field(default_factory=dict)
    position: int = 0  # the top-level node being imported


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def one_line(message: str) -> str:
    """``message`` with its control characters (a newline in a model's names, say) written as
    escapes, so that an error about the model stays one line."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], message)


def import_graph(*args: Any, **kwargs: Any) -> ImportedGraph:
    """``_import_graph`` (its documentation), its ``ValidationError`` on one line: names
    from the model are written with their control characters escaped."""
    try:
        return _import_graph(*args, **kwargs)
    except ValidationError as e:
        if type(e) is ValidationError and _CONTROL.search(str(e)):
            raise ValidationError(one_line(str(e))) from None
        raise


def _import_graph(
    model: Any,
    converters: Any = None,
    free_dimensions: Mapping[str, int] | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    input_values: Mapping[str, np.ndarray] | None = None,
    base_dir: str | None = None,
    sizes: Mapping[str, Sequence[int]] | None = None,
    max_memory: int | None = None,
    arrays: dict[str, np.ndarray] | None = None,
    resumed: Mapping[str, Any] | None = None,
    frontier: bool = False,
) -> ImportedGraph:
    """Maps every node of ``model`` (an ``onnx.ModelProto``) onto DML operators.

    Args:
        model: the model.
        converters: the converter registry (default: ``converters.REGISTRY``).
        free_dimensions: sizes of symbolic dimensions by name or by denotation (upper case).
        input_shapes: full shapes of inputs by name.
        input_values: inputs whose values are fixed for this import (specialisation); they
            become constants, and stay inputs of the compiled function.
        base_dir: where external data files are.
        sizes: run-time sizes of data-dependent output shapes, by ``NeedsSizes.key``.
        max_memory: bytes that initializers together and each value folded at import may hold
            (None: only folding's own limit).
        arrays: the initializers' values by name, read once and kept across imports (a
            session's programs share them: a new input shape no longer reads the weights
            again; a 1B-parameter decoder's 2.6 GB took 2-3 s an import); None: read each time.
        resumed: values computed by earlier segments (``resume.Resumed`` by name): inputs of
            the graph after the model's, in name order; the nodes that compute them are not
            imported.
        frontier: a ``NeedsSizes``'s segment also returns the values the rest of the model
            reads (``NeedsSizes.frontier``: their names and ``resume.Resumed``), after its own.

    Raises:
        ValidationError: an unsupported op type (naming the node and the type), a free
            dimension without a size, a malformed node, or anything a converter rejects.
        NeedsValues: a converter needs values computed from graph inputs.
        NeedsSizes: a node's output shape depends on values computed at run time.
    """
    from .converters import REGISTRY

    converters = REGISTRY if converters is None else converters
    free = {k: int(v) for k, v in (free_dimensions or {}).items()}
    shapes = dict(input_shapes or {})
    fixed = dict(input_values or {})
    graph = model.graph
    opsets = opsets_of(model)
    walk = Walk(Builder(), opsets, converters, max_memory=max_memory or None, base_dir=base_dir)
    _check_graph(graph, opsets, max_memory or None)
    walk.builder.sizes = {k: tuple(int(n) for n in v) for k, v in (sizes or {}).items()}
    builder, values = walk.builder, walk.values
    for init in graph.initializer:
        where = f"initializer '{init.name}'"
        try:
            array = arrays.get(init.name) if arrays is not None else None
            if array is None:
                array = array_of(init, base_dir)
                if arrays is not None:
                    array.setflags(write=False)  # shared by every import: never changed
                    arrays[init.name] = array
        except ValidationError:
            raise
        except Exception as e:  # noqa: BLE001 - protobuf and numpy raise many kinds
            raise ValidationError(
                f"{ONNX}: {where}: cannot be read ({type(e).__name__}: {e})"
            ) from None
        param = init.name if jnp.issubdtype(array.dtype, jnp.floating) else None
        values[init.name] = const_value(array, where, param=param)
        builder.initializers[id(values[init.name].const)] = init.name
    for sparse in graph.sparse_initializer:
        raise ValidationError(f"{ONNX}: sparse initializer '{sparse.values.name}' is not supported")

    input_names, input_shapes_, input_types, input_dtypes = [], [], [], []
    layouts: list[tuple[str, str, Any]] = []

    def add_input(name: str, elem: int, shape: tuple, where: str, deps: frozenset) -> Value:
        """A model input tensor (or a tensor of a sequence input) as a graph input."""
        t = data_type_of(elem, where)
        index = len(input_names)
        input_names.append(name)
        input_shapes_.append(shape)
        input_types.append(t)
        input_dtypes.append(numpy_dtype_of(elem, where))
        if name in fixed or 0 in shape:
            if name in fixed:
                array = np.asarray(fixed.pop(name)).astype(input_dtypes[-1]).reshape(shape)
            else:  # an empty tensor: its value is known (DML tensors have no empty sizes)
                array = np.zeros(shape, input_dtypes[-1])
            return const_value(array, where)
        check_dml_shape(shape, where, "the input")
        n = builder.graph_input(index, shape, t)
        carried = elem if elem in CARRIED else 0
        return Value(shape, t, ("node", n, 0), None, elem == BOOL, None, deps, carried=carried)

    for inp in graph.input:
        if inp.name in values and inp.name not in shapes and inp.name not in fixed:
            continue  # an initializer listed as an input (IR < 4): its default value
        where = f"input '{inp.name}'"
        kind = inp.type.WhichOneof("value")
        if kind in ("sequence_type", "optional_type"):
            if inp.name not in shapes:
                raise ValidationError(
                    f"{ONNX}: {where}: a {kind.removesuffix('_type')} input; give the shapes of "
                    "its tensors (input shapes: a list of shapes, None for an empty optional)"
                )
            value, layout = _structured_input(
                inp.type, shapes.pop(inp.name), inp.name, where, add_input
            )
            values[inp.name] = value
            layouts.append(("input", inp.name, layout))
            continue
        if kind != "tensor_type":
            raise ValidationError(f"{ONNX}: {where}: only tensor inputs are supported")
        elem = inp.type.tensor_type.elem_type
        shape = shape_of(inp.type, inp.name, free, shapes.pop(inp.name, None))
        values[inp.name] = add_input(inp.name, elem, shape, where, frozenset([inp.name]))
    if shapes:
        raise ValidationError(
            f"{ONNX}: input shapes given for names the model has no input of: {sorted(shapes)}"
        )
    if fixed:
        raise ValidationError(f"{ONNX}: values given for unknown inputs {sorted(fixed)}")
    model_inputs = list(input_names)
    for name, r in sorted((resumed or {}).items()):  # inputs as the model's are
        walk.resumed[name] = add_input(name, r.elem, r.shape, f"value '{name}'", r.deps)

    try:
        walk_nodes(walk, list(graph.node), "")
    except NeedsSizes as e:
        # The program up to the node that needs the values: run() computes them with it.
        inputs = (tuple(input_names), tuple(input_shapes_), tuple(input_types),
                  tuple(input_dtypes), tuple(layouts))  # fmt: skip
        handed = []
        if frontier:
            handed = resume.frontier(walk.values, graph, walk.position, model_inputs,
                                     walk.resumed)  # fmt: skip
        e.frontier = tuple((name, resume.spec(v)) for name, v in handed)
        e.probe = probe_graph(walk, inputs, list(e.values) + [v for _, v in handed])
        raise

    output_names, output_shapes, output_types, output_bool = [], [], [], []
    output_dtypes, out_values, output_consts = [], [], []
    mistyped: list[str | None] = []

    def add_output(name: str, v: Value, elem: int) -> None:
        """A model output tensor (or a tensor of a sequence output)."""
        if elem:
            dtype = numpy_dtype_of(elem, f"output '{name}'")
            mistyped.append(_output_type_error(name, v, int(elem)))
        elif v.const is not None:
            dtype = v.const.dtype
        elif v.carried:
            dtype = CARRIED[v.carried][1]
        else:
            dtype = np.dtype(bool) if v.is_bool else v.data_type.numpy_dtype
        if v.const is not None and v.param is None:
            # Known at import: returned as it is, without a DML node.
            output_consts.append(np.asarray(v.const).astype(dtype))
        else:
            output_consts.append(None)
            v = builder.materialize(v)
            out_values.append(v)
        output_names.append(name)
        output_shapes.append(v.shape)
        output_types.append(v.data_type)
        output_bool.append(v.is_bool)
        output_dtypes.append(np.dtype(dtype))

    for out in graph.output:
        if out.name not in values:
            raise ValidationError(f"{ONNX}: output '{out.name}' is not produced by any node")
        builder.where = f"output '{out.name}'"
        v = values[out.name]
        kind = out.type.WhichOneof("value")
        if kind in ("sequence_type", "optional_type") or isinstance(v, STRUCTURES):
            layout = _structured_output(out.type, v, out.name, add_output)
            layouts.append(("output", out.name, layout))
            continue
        add_output(out.name, v, out.type.tensor_type.elem_type if kind == "tensor_type" else 0)
    imported = graph_desc(
        walk,
        {
            "input_names": tuple(input_names),
            "input_shapes": tuple(input_shapes_),
            "input_types": tuple(input_types),
            "input_dtypes": tuple(input_dtypes),
            "output_names": tuple(output_names),
            "output_shapes": tuple(output_shapes),
            "output_types": tuple(output_types),
            "output_bool": tuple(output_bool),
            "output_dtypes": tuple(output_dtypes),
            "output_consts": tuple(output_consts),
            "layouts": tuple(layouts),
        },
        out_values,
    )
    mistyped = [m for m in mistyped if m]
    if mistyped:
        # A node whose operands disagree (a FLOAT16 input, FLOAT weights) is the first fault:
        # the graph's own checks name it; else the declaration is.
        from .program import compile_imported

        compile_imported(imported)
        raise ValidationError(mistyped[0])
    return imported


def _graph_type(v: Value) -> tuple:
    """What the graph holds a tensor value as: its DML type, BOOL or not, its carried type (the
    32- and 64-bit integers share one; importer's module docstring)."""
    if v.const is not None:
        dtype = np.asarray(v.const).dtype
        elem = elem_type_of(dtype)
        carried = elem if elem in CARRIED else 0
        return (DataType.from_dtype(graph_dtype(dtype)), dtype == np.bool_, carried)
    return (v.data_type, v.is_bool, v.carried)


def _type_name(v: Value) -> str:
    name = TYPE_NAMES[elem_of(v)]
    if v.const is None:  # one graph type holds both
        name = {"int32": "int32 or int64", "uint32": "uint32 or uint64"}.get(name, name)
    return name


def _output_type_error(name: str, v: Value, elem: int) -> str | None:
    """Where a graph output's declared element type is not its value's, what to say (a model
    declaring another is refused, not its value converted)."""
    want = (data_type_of(elem, f"output '{name}'"), elem == BOOL, elem if elem in CARRIED else 0)
    if _graph_type(v) == want:
        return None
    return (
        f"{ONNX}: output '{name}' is declared {TYPE_NAMES.get(elem, elem)}, but the graph "
        f"computes {_type_name(v)}"
    )


def _check_graph(graph: Any, opsets: Mapping[str, int], max_memory: int | None) -> None:
    """The graph's structure, checked before any node is imported: every name has one producer
    (a model input, an initializer or one node's output), every node input is produced by an
    earlier node (no cycles, nothing missing), every initializer's dims are sizes and all of
    them fit ``max_memory``."""
    producer: dict[str, str] = {}
    total = 0
    for init in graph.initializer:
        where = f"initializer '{init.name}'"
        if init.name in producer:
            raise ValidationError(f"{ONNX}: {where}: a second initializer of that name")
        producer[init.name] = where
        check_tensor(init, where, values=False)  # nothing is read before the budget's check
        total += math.prod(init.dims) * np.dtype(numpy_dtype_of(init.data_type, where)).itemsize
        if max_memory and total > max_memory:
            raise ValidationError(
                f"{ONNX}: {where}: the initializers need {total} bytes, more than the memory "
                f"budget of {max_memory} bytes (max_memory, --max-memory)"
            )
        check_tensor(init, where)
    for inp in graph.input:
        if inp.name in producer and not producer[inp.name].startswith("initializer"):
            raise ValidationError(f"{ONNX}: input '{inp.name}': a second input of that name")
        producer.setdefault(inp.name, f"input '{inp.name}'")
    later = {}
    for i, node in enumerate(graph.node):
        for name in node.output:
            later.setdefault(name, (i, node))
    for i, node in enumerate(graph.node):
        where = where_of(i, node)
        for name in node.input:
            if name and name not in producer:
                if name in later:
                    j, other = later[name]
                    raise ValidationError(
                        f"{ONNX}: {where}: input '{name}' is not produced before: "
                        f"{where_of(j, other)} produces it later (nodes must be in topological "
                        "order; a cycle has none)"
                    )
                raise ValidationError(
                    f"{ONNX}: {where}: input '{name}' is not produced before (no node, input "
                    "or initializer produces it)"
                )
        for name in node.output:
            if name and name in producer:
                raise ValidationError(
                    f"{ONNX}: {where}: output '{name}' is already produced by {producer[name]}"
                )
            if name:
                producer[name] = where_of(i, node)


def walk_nodes(walk: Walk, nodes: Sequence[Any], prefix: str) -> None:
    """Imports ``nodes`` in order into ``walk`` (``prefix`` names an expanded function)."""
    builder, values = walk.builder, walk.values
    for i, node in enumerate(nodes):
        where = prefix + where_of(i, node)
        builder.where = where
        if not prefix:
            builder.onnx_index = len(walk.report)
            walk.position = i
            names = [n for n in node.output if n]
            if names and all(n in walk.resumed for n in names):
                values.update((n, walk.resumed[n]) for n in names)  # an earlier segment's
                walk.report.append((where, "from a segment"))
                continue
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        inputs: list[Value | None] = []
        for name in node.input:
            if not name:
                inputs.append(None)
            elif name not in values:
                raise ValidationError(f"{ONNX}: {where}: input '{name}' is not produced before")
            else:
                inputs.append(values[name])
        convert = walk.converters.get(domain, node.op_type)
        opset = walk.opsets.get(domain)
        if opset is None:
            raise ValidationError(
                f"{ONNX}: {where}: domain '{node.domain}' is not among the model's opsets"
            )
        onnx_schema = schema.check(node, domain, opset, where, known=convert is not None)
        ctx = Context(builder, node, walk.opsets, where, inputs)
        ctx.walk = walk  # control flow and sequence converters import subgraphs into it
        outputs, folded = None, None
        if any(isinstance(v, STRUCTURES) for v in inputs) and not _takes_structures(node, domain):
            raise ctx.fail("a sequence or optional value is not a tensor input of this op")
        if (
            node.op_type == "If"
            and not domain
            and (convert is None or (inputs[0] is not None and inputs[0].known is not None))
        ):
            # A condition known at import (shape conditions in exported models): the chosen
            # branch is imported in the If's place; one computed at run time goes to the If
            # converter (both branches, ``lax.cond``).
            outputs, how = functions.inline_if(walk, node, inputs, where, walk_nodes), "branch"
        elif (domain or node.op_type not in STRUCTURE_OPS) and fold.foldable(
            node, domain, inputs, onnx_schema
        ):
            try:
                folded = fold.evaluate(node, domain, opset, inputs, where, walk.max_memory)
            except fold.NotEvaluated:
                # The node is then converted, or expanded as its function body, whose nodes
                # say what is wrong (HannWindow of 2^40 points: its Range's size).
                has_body = onnx_schema is not None and functions.has_body(onnx_schema, opset)
                if convert is None and not has_body:
                    raise
            if folded is not None and not fold.reads_parameters(inputs):
                outputs, how = folded, "folded"
        if outputs is not None:
            pass
        elif convert is not None and folded is not None:
            # Computed from parameters: kept in the graph (so ``apply`` can replace them), its
            # value at import known as the outputs' shadows.
            before = len(builder.nodes)
            try:
                outputs = _carry(
                    ctx, node, onnx_schema, inputs, _convert(convert, ctx, node, inputs)
                )
                outputs = [v if v is None or f is None else replace(v, shadow=f.const)
                           for v, f in zip(outputs, folded)]  # fmt: skip
                how = _how(builder, before, ctx)
            except (NeedsValues, NeedsSizes):
                raise
            except ValidationError:
                outputs, how = folded, "folded"
        elif convert is not None:
            before = len(builder.nodes)
            outputs = _carry(ctx, node, onnx_schema, inputs, _convert(convert, ctx, node, inputs))
            how = _how(builder, before, ctx)
        elif folded is not None:
            outputs, how = folded, "folded"
        elif onnx_schema is not None and functions.has_body(onnx_schema, opset):
            outputs = functions.expand(
                walk, node, domain, opset, inputs, where, onnx_schema, walk_nodes
            )
            how = "function"
        else:
            raise ValidationError(
                f"{ONNX}: {where}: op type '{(node.domain + '.') if domain else ''}"
                f"{node.op_type}' is not supported (no converter and no function body)"
            )
        deps = frozenset().union(*(v.deps for v in inputs if v is not None))
        for name, v in zip(node.output, outputs):
            if name and v is not None:
                values[name] = replace(v, deps=v.deps | deps) if v.const is None else v
        for k, name in enumerate(node.output):
            if name and (k >= len(outputs) or outputs[k] is None):
                raise ctx.fail(f"output {k} ('{name}') is not supported")
        if not prefix:
            walk.report.append((where, how))


# The ai.onnx ops that read or make sequence and optional values (the other ops take tensors
# only); never folded by the reference evaluator, which would give a list for a sequence.
STRUCTURE_OPS = frozenset(
    {
        "Identity", "If", "Loop", "Scan", "Optional", "OptionalHasElement",
        "OptionalGetElement", "SequenceAt", "SequenceConstruct", "SequenceEmpty",
        "SequenceErase", "SequenceInsert", "SequenceLength", "SequenceMap",
        "ConcatFromSequence", "SplitToSequence",
    }
)  # fmt: skip


# Ops whose outputs hold only values of their inputs (moved, chosen or repeated): an output of
# a carried type (``elements.CARRIED``) needs no rounding.
MOVEMENT_OPS = frozenset(
    {
        "Compress", "Concat", "DepthToSpace", "Expand", "Flatten", "Gather", "GatherElements",
        "GatherND", "Identity", "ReverseSequence", "Reshape", "Slice", "SpaceToDepth", "Split",
        "Squeeze", "Tile", "TopK", "Transpose", "Unique", "Unsqueeze", "Where",
    }
)  # fmt: skip


def _carry(ctx: Context, node: Any, onnx_schema: Any, inputs: list, outputs: list) -> list:
    """The outputs of a converted node, each of a carried type (bfloat16, float8, 4-bit...)
    rounded to it and marked so. A converter computes such a tensor in its carrier; the op's
    schema says which outputs share a type parameter with an input of a carried type (``T`` in
    and ``T`` out), and those the converter did not mark itself are rounded here (a JAX node),
    once per node, as a kernel computing in float32 and storing bfloat16 does."""
    carried = [v.carried if isinstance(v, Value) else 0 for v in inputs]
    if not any(carried) or onnx_schema is None:
        return outputs
    from onnx.defs import OpSchema

    formal = list(onnx_schema.inputs)
    variadic = bool(formal) and formal[-1].option == OpSchema.FormalParameterOption.Variadic
    by_type: dict[str, int] = {}
    for i, elem in enumerate(carried):
        k = min(i, len(formal) - 1) if variadic else i
        if elem and k < len(formal):
            by_type.setdefault(formal[k].type_str, elem)
    results = list(outputs)
    for k, v in enumerate(results):
        if not isinstance(v, Value) or v.carried or v.const is not None:
            continue
        if k >= len(onnx_schema.outputs):
            break
        elem = by_type.get(onnx_schema.outputs[k].type_str)
        if elem and CARRIED[elem][0] == v.data_type:
            if node.op_type in MOVEMENT_OPS and node.domain in ("", "ai.onnx"):
                results[k] = replace(v, carried=elem)
            else:
                results[k] = ctx.carry(v, elem)
    return results


def _takes_structures(node: Any, domain: str) -> bool:
    return bool(domain) or node.op_type in STRUCTURE_OPS


def _how(builder: Builder, before: int, ctx: Context | None = None) -> str:
    """How a converted node ran: ``dml`` (DML operators only), ``jax`` (a JAX lowering only),
    ``dml+jax``, or ``view`` (no node at all); with the converter's ``ctx.note`` (a Loop
    unrolled at import says so)."""
    how = _kinds(builder, before)
    note = getattr(ctx, "note", None)
    return f"{how} ({note})" if note else how


def _kinds(builder: Builder, before: int) -> str:
    entries = {n for _, n in builder._graph_inputs}  # constants entering the graph
    kinds = {
        "jax" if isinstance(d, FunctionNode) else "dml"
        for n, d in enumerate(builder.nodes[before:], before)
        if n not in entries
    }
    if not kinds:
        return "view"
    return "+".join(k for k in ("dml", "jax") if k in kinds)


def _convert(convert: Converter, ctx: Context, node: Any, inputs: list) -> list:
    """Runs a converter; what escapes it without naming the node gets the node's name."""
    try:
        return list(convert(ctx, node, inputs))
    except (NeedsValues, NeedsSizes):
        raise
    except ValidationError as e:
        if str(e).startswith(f"{ONNX}: "):
            raise
        raise ctx.fail(str(e)) from None
    except (
        ValueError,
        TypeError,
        IndexError,
        KeyError,
        AttributeError,
        ZeroDivisionError,
        OverflowError,
    ) as e:
        raise ctx.fail(f"{type(e).__name__}: {e}") from e


def graph_desc(walk: Walk, names: dict, out_values: list[Value]) -> ImportedGraph:
    """Prunes nodes that reach no output, then numbers graph inputs, nodes and edges."""
    builder = walk.builder
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
    order = sorted(used)
    index = {n: i for i, n in enumerate(order)}
    nodes = tuple(builder.nodes[n] for n in order)

    input_edges = []
    constants, params, constant_names = [], [], []
    count = len(names["input_names"])
    for (kind, j), n in builder._graph_inputs:
        if kind == "input":
            if n in used:
                input_edges.append(InputGraphEdge(j, index[n], 0))
        elif n in used:
            input_edges.append(InputGraphEdge(count + len(constants), index[n], 0))
            constants.append(builder.constants[j].array)
            params.append(builder.constants[j].param)
            constant_names.append(builder.constants[j].name)
    intermediate = tuple(
        IntermediateGraphEdge(index[v.source[1]], v.source[2], index[n], k)
        for n, k, v in builder.feeds
        if n in used
    )
    output_edges = tuple(
        OutputGraphEdge(index[v.source[1]], v.source[2], j) for j, v in enumerate(out_values)
    )
    graph = None
    if out_values:
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
        names["input_names"],
        names["input_shapes"],
        names["input_types"],
        names["output_names"],
        names["output_shapes"],
        names["output_types"],
        names["output_bool"],
        tuple(constants),
        tuple(params),
        names["input_dtypes"],
        names["output_dtypes"],
        tuple(builder.origin[n] for n in order),
        tuple(walk.report),
        names["output_consts"],
        names.get("layouts", ()),
        constant_names=tuple(constant_names),
        node_names=tuple(
            (builder.nodes[n], k) for n, k in builder.node_names.items() if n in index
        ),
    )


def probe_graph(walk: Walk, inputs: tuple, values: Sequence[Value]) -> ImportedGraph:
    """The graph imported so far with ``values`` as its outputs (``NeedsSizes.probe``): the
    model's inputs ``(names, shapes, types, dtypes, layouts)``, each output in its ONNX
    dtype."""
    outs = [walk.builder.materialize(v) for v in values]
    dtypes = [CARRIED[v.carried][1] if v.carried else bool if v.is_bool else v.data_type.numpy_dtype
              for v in values]  # fmt: skip
    keys = ("input_names", "input_shapes", "input_types", "input_dtypes", "layouts")
    names = dict(zip(keys, inputs))
    names.update(
        output_names=tuple(f"value {k}" for k in range(len(outs))),
        output_shapes=tuple(tuple(v.shape) for v in outs),
        output_types=tuple(v.data_type for v in outs),
        output_bool=tuple(v.is_bool for v in outs),
        output_dtypes=tuple(np.dtype(d) for d in dtypes),
        output_consts=(None,) * len(outs),
    )
    return graph_desc(walk, names, outs)


def tensor_elem(type_proto: Any) -> int:
    """The element type of the tensors of a tensor, sequence or optional type (0: unknown)."""
    kind = type_proto.WhichOneof("value")
    if kind == "tensor_type":
        return int(type_proto.tensor_type.elem_type)
    if kind == "sequence_type":
        return tensor_elem(type_proto.sequence_type.elem_type)
    if kind == "optional_type":
        return tensor_elem(type_proto.optional_type.elem_type)
    return 0


def _structured_input(type_proto: Any, given: Any, name: str, where: str, add: Any):
    """A sequence or optional model input of the structure ``given`` (a list of shapes for a
    sequence, a shape for a tensor, None for an empty optional): its value, and its layout
    (``ImportedGraph.layouts``). Its tensors are graph inputs named ``name[k]`` (a sequence's)
    or ``name`` (an optional tensor's); the session never specialises on them."""
    kind = type_proto.WhichOneof("value")
    if kind == "optional_type":
        if given is None:
            return OptionalValue(None), None
        inner, layout = _structured_input(type_proto.optional_type.elem_type, given, name, where,
                                          add)  # fmt: skip
        return OptionalValue(inner), layout
    if kind == "sequence_type":
        elem = type_proto.sequence_type.elem_type
        if elem.WhichOneof("value") != "tensor_type":
            raise ValidationError(f"{ONNX}: {where}: only sequences of tensors are supported")
        if given is None or not isinstance(given, list | tuple):
            raise ValidationError(f"{ONNX}: {where}: a sequence input needs a list of shapes")
        elem_type = int(elem.tensor_type.elem_type)
        items, names = [], []
        for k, shape in enumerate(given):
            names.append(f"{name}[{k}]")
            shape = tuple(int(d) for d in shape)
            items.append(add(names[-1], elem_type, shape, f"{where}[{k}]", frozenset()))
        return SequenceValue(tuple(items), elem_type), names
    if kind == "tensor_type":
        shape = tuple(int(d) for d in given)
        return add(name, int(type_proto.tensor_type.elem_type), shape, where, frozenset()), name
    raise ValidationError(f"{ONNX}: {where}: a {kind} input is not supported")


def _structured_output(type_proto: Any, v: Any, name: str, add: Any) -> Any:
    """Adds the tensors of a sequence or optional model output (named as
    ``_structured_input`` names them); returns its layout."""
    elem = tensor_elem(type_proto)
    if isinstance(v, OptionalValue):
        v = v.value
        if v is None:
            return None
    if isinstance(v, SequenceValue):
        names = []
        for k, item in enumerate(v.items):
            names.append(f"{name}[{k}]")
            add(names[-1], item, elem or v.elem_type)
        return names
    kind = type_proto.WhichOneof("value")
    if kind == "sequence_type":
        raise ValidationError(f"{ONNX}: output '{name}' must be a sequence, got a tensor")
    add(name, v, elem)
    return name
