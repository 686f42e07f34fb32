"""Ops with no converter run as their ONNX function body, as ONNX Runtime inlines the bodies
of ops no provider claims (HardSwish's in ONNX Runtime; here the ops with no DML mapping yet,
such as Mish, Swish, SwiGLU, GroupNormalization, CenterCropPad and the losses): the body's
nodes are imported in the op's place, each through its own converter (or folded)."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from ..errors import ValidationError
from .elements import ONNX
from .importer import Value

_counter = itertools.count()


def has_body(schema: Any, opset: int) -> bool:
    return bool(schema.has_function or schema.has_context_dependent_function)


def _body(node: Any, schema: Any, opset: int, inputs: list[Value | None]) -> Any:
    import onnx
    from onnx import helper

    from .importer import elem_of

    if schema.has_function:
        versions = [v for v in schema.function_opset_versions if v <= opset]
        raw = schema.get_function_with_opset_version(max(versions)) if versions else None
        body = schema.function_body if raw is None else onnx.FunctionProto.FromString(raw)
        return body
    types = []
    for v in inputs:
        if v is None:
            types.append(onnx.TypeProto().SerializeToString())
            continue
        types.append(helper.make_tensor_type_proto(elem_of(v), list(v.shape)).SerializeToString())
    versions = [v for v in schema.context_dependent_function_opset_versions if v <= opset]
    if versions:
        raw = schema.get_context_dependent_function_with_opset_version(
            max(versions), node.SerializeToString(), types
        )
    else:
        raw = schema.get_context_dependent_function(node.SerializeToString(), types)
    return onnx.FunctionProto.FromString(raw) if isinstance(raw, bytes) else raw


def expand(walk, node, domain, opset, inputs, where, schema, walk_nodes) -> list[Value | None]:
    """Imports ``node`` as its function body into ``walk``; returns the node's outputs."""
    import onnx

    try:
        body = _body(node, schema, opset, inputs)
    except Exception as e:  # noqa: BLE001 - the schema's builder rejects odd nodes its own way
        raise ValidationError(f"{ONNX}: {where}: its function body cannot be built: {e}") from None
    if body is None or not body.node:
        raise ValidationError(f"{ONNX}: {where}: op '{node.op_type}' has no function body")
    tag = f"__fn{next(_counter)}_"
    names = {"": ""}
    for formal, actual in zip(body.input, node.input):
        names[formal] = actual
    for formal in body.input[len(node.input) :]:
        names[formal] = ""
    for formal, actual in zip(body.output, node.output):
        names[formal] = actual or tag + formal
    caller = {a.name: a for a in node.attribute}
    defaults = {k: v.default_value for k, v in schema.attributes.items()
                if v.default_value.type}  # fmt: skip
    nodes = []
    for inner in body.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(inner)
        del copy.input[:]
        del copy.output[:]
        copy.input.extend(names.get(n, tag + n) if n else "" for n in inner.input)
        copy.output.extend(names.get(n, tag + n) for n in inner.output)
        del copy.attribute[:]
        for a in inner.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                b = onnx.AttributeProto()
                b.CopyFrom(a)
                _rename_outer(b.g, lambda n: names.get(n, tag + n))
                copy.attribute.append(b)
            elif a.ref_attr_name:
                src = caller.get(a.ref_attr_name) or defaults.get(a.ref_attr_name)
                if src is None:
                    continue
                b = onnx.AttributeProto()
                b.CopyFrom(src)
                b.name = a.name
                copy.attribute.append(b)
            else:
                copy.attribute.append(a)
        nodes.append(copy)
    saved = walk.opsets
    inner_opsets = dict(saved)
    for o in body.opset_import:
        inner_opsets["" if o.domain in ("", "ai.onnx") else o.domain] = int(o.version)
    walk.opsets = inner_opsets
    try:
        walk_nodes(walk, nodes, f"{where} > ")
    finally:
        walk.opsets = saved
    return [walk.values.get(n) if n else None for n in node.output]


def _rename_outer(graph: Any, rename: Any) -> None:
    """Renames, in place, the names a subgraph reads from its enclosing scope."""
    inner = {o for n in graph.node for o in n.output} | {i.name for i in graph.initializer}
    inner |= {i.name for i in graph.input}
    for n in graph.node:
        for k, name in enumerate(n.input):
            if name and name not in inner:
                n.input[k] = rename(name)
        for a in n.attribute:
            if a.type == 5:  # a nested subgraph
                _rename_outer(a.g, lambda x, inner=inner: x if x in inner else rename(x))
    for out in graph.output:
        if out.name not in inner:
            out.name = rename(out.name)


def inline_if(walk, node, inputs, where, walk_nodes) -> list[Value | None]:
    """An ``If`` whose condition is known at import (shape conditions in exported models):
    the chosen branch's nodes are imported in its place. (One whose condition is computed at
    run time is the If converter's: both branches, ``lax.cond``.)"""
    cond = inputs[0].known if inputs and inputs[0] is not None else None
    if cond is None:
        raise ValidationError(
            f"{ONNX}: {where}: an If whose condition is computed at run time is not supported"
        )
    flat = np.asarray(cond).reshape(-1)
    if flat.size != 1:
        raise ValidationError(f"{ONNX}: {where}: the condition must hold one value")
    name = "then_branch" if bool(flat[0]) else "else_branch"
    branch = next((a.g for a in node.attribute if a.name == name), None)
    if branch is None:
        raise ValidationError(f"{ONNX}: {where}: attribute '{name}' is required")
    return inline_graph(walk, branch, {}, f"{where} > {name}", walk_nodes)


def inline_graph(walk, graph, bindings, where, walk_nodes) -> list:
    """Imports the nodes of a subgraph (an If branch, a Loop body unrolled, a SequenceMap body)
    into ``walk`` in place of the node that holds it: ``bindings`` gives the value of each of
    the subgraph's inputs by name; the names the subgraph reads from its enclosing scope are
    read from ``walk``. Its own names are renamed apart, so one body can be imported many
    times. Returns the values of the subgraph's outputs."""
    import onnx

    from .importer import const_value
    from .protos import array_of

    tag = f"__sub{next(_counter)}_"
    produced = {o for n in graph.node for o in n.output if o}
    produced |= {i.name for i in graph.initializer} | set(bindings)
    produced |= {i.name for i in graph.input}

    def rename(n: str) -> str:
        return tag + n if n in produced else n

    for formal in graph.input:
        if formal.name not in bindings:
            raise ValidationError(f"{ONNX}: {where}: subgraph input '{formal.name}' has no value")
    for name, v in bindings.items():
        walk.values[tag + name] = v
    for init in graph.initializer:
        label = f"{where}: initializer '{init.name}'"
        walk.values[tag + init.name] = const_value(array_of(init, walk.base_dir, label), label)
    nodes = []
    for inner in graph.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(inner)
        del copy.input[:]
        del copy.output[:]
        copy.input.extend(rename(n) if n else "" for n in inner.input)
        copy.output.extend(rename(n) if n else "" for n in inner.output)
        for a in copy.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                _rename_outer(a.g, rename)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    _rename_outer(g, rename)
        nodes.append(copy)
    walk_nodes(walk, nodes, f"{where} > ")
    outputs = []
    for out in graph.output:
        name = rename(out.name)
        if name not in walk.values:
            raise ValidationError(f"{ONNX}: {where}: output '{out.name}' is not produced")
        outputs.append(walk.values[name])
    return outputs
