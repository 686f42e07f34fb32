"""The import walk: every node of an ONNX graph, in order, schema-checked, then folded,
converted, or expanded as its function body (``importer``'s docstring describes the steps);
then the DML graph is numbered and pruned into an ``ImportedGraph``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..errors import ValidationError
from ..graph import FunctionNode, GraphDesc, InputGraphEdge, IntermediateGraphEdge, OutputGraphEdge
from . import fold, functions, schema
from .importer import (
    BOOL,
    ONNX,
    Builder,
    Context,
    Converter,
    ImportedGraph,
    NeedsSizes,
    NeedsValues,
    Value,
    array_of,
    const_value,
    data_type_of,
    numpy_dtype_of,
    opsets_of,
    shape_of,
    where_of,
)


@dataclass
class Walk:
    """State of one import: the builder, the values by name, how each ONNX node went."""

    builder: Builder
    opsets: dict[str, int]
    converters: Any
    values: dict[str, Value] = field(default_factory=dict)
    report: list[tuple[str, str]] = field(default_factory=list)


def import_graph(
    model: Any,
    converters: Any = None,
    free_dimensions: Mapping[str, int] | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    input_values: Mapping[str, np.ndarray] | None = None,
    base_dir: str | None = None,
    sizes: Mapping[str, Sequence[int]] | None = None,
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
    walk = Walk(Builder(), opsets, converters)
    walk.builder.sizes = {k: tuple(int(n) for n in v) for k, v in (sizes or {}).items()}
    builder, values = walk.builder, walk.values
    for init in graph.initializer:
        where = f"initializer '{init.name}'"
        try:
            array = array_of(init, base_dir)
        except ValidationError:
            raise
        except Exception as e:  # noqa: BLE001 - protobuf and numpy raise many kinds
            raise ValidationError(f"{ONNX}: {where}: cannot be read: {e}") from None
        param = init.name if array.dtype.kind == "f" else None
        values[init.name] = const_value(array, where, param=param)
    for sparse in graph.sparse_initializer:
        raise ValidationError(f"{ONNX}: sparse initializer '{sparse.values.name}' is not supported")

    input_names, input_shapes_, input_types, input_dtypes = [], [], [], []
    for inp in graph.input:
        if inp.name in values and inp.name not in shapes and inp.name not in fixed:
            continue  # an initializer listed as an input (IR < 4): its default value
        where = f"input '{inp.name}'"
        if not inp.type.HasField("tensor_type"):
            raise ValidationError(f"{ONNX}: {where}: only tensor inputs are supported")
        elem = inp.type.tensor_type.elem_type
        t = data_type_of(elem, where)
        shape = shape_of(inp.type, inp.name, free, shapes.pop(inp.name, None))
        index = len(input_names)
        input_names.append(inp.name)
        input_shapes_.append(shape)
        input_types.append(t)
        input_dtypes.append(numpy_dtype_of(elem, where))
        if inp.name in fixed or 0 in shape:
            if inp.name in fixed:
                array = np.asarray(fixed.pop(inp.name)).astype(input_dtypes[-1]).reshape(shape)
            else:  # an empty tensor: its value is known (DML tensors have no empty sizes)
                array = np.zeros(shape, input_dtypes[-1])
            values[inp.name] = const_value(array, where)
            continue
        n = builder.graph_input(index, shape, t)
        values[inp.name] = Value(shape, t, ("node", n, 0), None, elem == BOOL, None,
                                 frozenset([inp.name]))  # fmt: skip
    if shapes:
        raise ValidationError(
            f"{ONNX}: input shapes given for names the model has no input of: {sorted(shapes)}"
        )
    if fixed:
        raise ValidationError(f"{ONNX}: values given for unknown inputs {sorted(fixed)}")

    walk_nodes(walk, list(graph.node), "")

    output_names, output_shapes, output_types, output_bool = [], [], [], []
    output_dtypes, out_values, output_consts = [], [], []
    for out in graph.output:
        if out.name not in values:
            raise ValidationError(f"{ONNX}: output '{out.name}' is not produced by any node")
        builder.where = f"output '{out.name}'"
        v = values[out.name]
        elem = out.type.tensor_type.elem_type if out.type.HasField("tensor_type") else 0
        if elem:
            dtype = numpy_dtype_of(elem, f"output '{out.name}'")
        elif v.const is not None:
            dtype = v.const.dtype
        else:
            dtype = np.dtype(bool) if v.is_bool else v.data_type.numpy_dtype
        if v.const is not None and v.param is None:
            # Known at import: returned as it is, without a DML node.
            output_consts.append(np.asarray(v.const).astype(dtype))
        else:
            output_consts.append(None)
            v = builder.materialize(v)
            out_values.append(v)
        output_names.append(out.name)
        output_shapes.append(v.shape)
        output_types.append(v.data_type)
        output_bool.append(v.is_bool)
        output_dtypes.append(np.dtype(dtype))
    return _graph_desc(
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
        },
        out_values,
    )


def walk_nodes(walk: Walk, nodes: Sequence[Any], prefix: str) -> None:
    """Imports ``nodes`` in order into ``walk`` (``prefix`` names an expanded function)."""
    builder, values = walk.builder, walk.values
    for i, node in enumerate(nodes):
        where = prefix + where_of(i, node)
        builder.where = where
        builder.top_level = not prefix
        if not prefix:
            builder.onnx_index = len(walk.report)
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
        outputs, folded = None, None
        if node.op_type == "If" and not domain and convert is None:
            outputs, how = functions.inline_if(walk, node, inputs, where, walk_nodes), "branch"
        elif fold.foldable(node, domain, inputs, onnx_schema):
            try:
                folded = fold.evaluate(node, domain, opset, inputs, where)
            except fold.NotEvaluated:
                if convert is None:
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
                outputs = _convert(convert, ctx, node, inputs)
                outputs = [v if v is None or f is None else replace(v, shadow=f.const)
                           for v, f in zip(outputs, folded)]  # fmt: skip
                how = _how(builder, before)
            except (NeedsValues, NeedsSizes):
                raise
            except ValidationError:
                outputs, how = folded, "folded"
        elif convert is not None:
            before = len(builder.nodes)
            outputs = _convert(convert, ctx, node, inputs)
            how = _how(builder, before)
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


def _how(builder: Builder, before: int) -> str:
    """How a converted node ran: ``dml`` (DML operators only), ``jax`` (a JAX lowering only),
    ``dml+jax``, or ``view`` (no node at all)."""
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
    except (ValueError, TypeError, IndexError, KeyError, ZeroDivisionError, OverflowError) as e:
        raise ctx.fail(f"{type(e).__name__}: {e}") from e


def _graph_desc(walk: Walk, names: dict, out_values: list[Value]) -> ImportedGraph:
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
    constants, params = [], []
    count = len(names["input_names"])
    for (kind, j), n in builder._graph_inputs:
        if kind == "input":
            if n in used:
                input_edges.append(InputGraphEdge(j, index[n], 0))
        elif n in used:
            input_edges.append(InputGraphEdge(count + len(constants), index[n], 0))
            constants.append(builder.constants[j].array)
            params.append(builder.constants[j].param)
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
    )
