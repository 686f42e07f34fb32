"""Subgraphs as compiled functions, for the control-flow and sequence converters: a body (an
If branch, a Loop or Scan body, a SequenceMap's) imported as a DML graph of its own
(``import_body``), reading the enclosing scope's values by name (those known at import stay
constants of the body, those computed at run time become extra inputs), and called inside the
outer graph by one JAX node (``jax_node``); ``run_op`` imports one ONNX op as such a
subgraph."""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp
import numpy as np

from ...errors import ValidationError
from ..elements import ONNX, TYPE_NAMES, to_graph_array
from ..importer import (
    Builder,
    NeedsHost,
    NeedsValues,
    Value,
    const_value,
    leaves,
    rebuild,
    structure_of,
)
from ..protos import array_of

_counter = itertools.count()


class _Scope(dict):
    """The values of a subgraph's import: its own names, and on the first read of a name it
    does not hold, the enclosing scope's value passed through ``capture``."""

    def __init__(self, outer: Any, capture: Any):
        super().__init__()
        self.outer = outer
        self.capture = capture

    def __contains__(self, name: object) -> bool:
        return dict.__contains__(self, name) or name in self.outer

    def __missing__(self, name: str) -> Any:
        value = self.capture(self.outer[name])
        self[name] = value
        return value

    def get(self, name: str, default: Any = None) -> Any:
        # dict.get would not read the enclosing scope
        return self[name] if name in self else default  # noqa: SIM401


@dataclass
class Body:
    """A subgraph imported as its own DML graph and compiled.

    Attributes:
        imported: the ``ImportedGraph`` (its inputs: the formal inputs' tensors that are not
            empty, then the captured run-time values).
        compiled: its ``CompiledGraph`` (None when every output is known at import).
        formal: the values the subgraph's inputs had in the import (run-time stand-ins).
        outputs: the values of its outputs as imported (their structure, shapes and types).
        captured: the enclosing scope's run-time tensors it reads, in input order.
        runtime: for each formal tensor, whether it is an input of the graph (empty tensors are
            not: their value is known).
        consts: for each output tensor, its value in its graph dtype when known at import.
    """

    imported: Any
    compiled: Any
    formal: list
    outputs: list
    captured: list
    runtime: list
    consts: list

    def operators(self) -> str:
        """The DML operators of the body, each with its count (for reports)."""
        graph = self.imported.graph
        if graph is None:
            return "no DML operator"
        entries = {e.to_node_index for e in graph.input_edges}
        names = [
            n.operator_type.removeprefix("DML_OPERATOR_")
            for k, n in enumerate(graph.nodes)
            if k not in entries or n.operator_type != "DML_OPERATOR_ELEMENT_WISE_IDENTITY"
        ]
        if not names:
            return "no DML operator"
        return ", ".join(f"{n} x{c}" if c > 1 else n for n, c in Counter(names).items())

    def __call__(self, formal: list, captured: list) -> list:
        """The output tensors (graph dtypes, ONNX shapes) for the formal input tensors and the
        captured tensors (as arrays, in the orders of ``formal`` leaves and ``captured``)."""
        outs: tuple = ()
        if self.compiled is not None:
            args = [x for x, r in zip(formal, self.runtime) if r] + list(captured)
            descs = self.compiled.input_descs
            graph_args = [None if d is None else jnp.reshape(x, d.sizes)
                          for x, d in zip(args, descs)]  # fmt: skip
            graph_args += [jnp.asarray(c) for c in self.imported.constants]
            outs = self.compiled.fn(*graph_args)
            outs = outs if isinstance(outs, tuple) else (outs,)
        computed = iter(outs)
        result = []
        for c, v in zip(self.consts, (t for o in self.outputs for t in leaves(o))):
            y = next(computed) if c is None else jnp.asarray(c)
            result.append(jnp.reshape(y, v.shape))
        return result


def import_body(ctx: Any, graph: Any, formal: list, label: str, marker: str | None = None) -> Body:
    """Imports ``graph`` (a Loop or Scan body, an If branch) as its own DML graph and compiles
    it. ``formal`` holds a value per subgraph input whose shapes and types the inputs take
    (their data is the function's argument); a formal tensor's ``deps`` is ``{marker}``, so a
    converter that needs one as a constant raises ``NeedsValues`` naming ``marker``."""
    from ..program import compile_imported
    from ..walk import Walk, graph_desc, walk_nodes

    outer = ctx.walk
    builder = Builder()
    builder.subgraph = label
    captured: list[Value] = []
    entered: dict[int, Value] = {}
    formal_leaves = [t for f in formal for t in leaves(f)]
    runtime = [0 not in t.shape for t in formal_leaves]
    count = sum(runtime)
    names: dict[str, list] = {k: [] for k in ("input_names", "input_shapes", "input_types")}

    def enter(t: Value, index: int, deps: frozenset, shadow: Any = None) -> Value:
        n = builder.graph_input(index, t.shape, t.data_type)
        names["input_names"].append(f"input {index}")
        names["input_shapes"].append(tuple(t.shape))
        names["input_types"].append(t.data_type)
        return Value(tuple(t.shape), t.data_type, ("node", n, 0), None, t.is_bool, None, deps,
                     shadow, t.carried)  # fmt: skip

    def capture_leaf(t: Value) -> Value:
        if t.const is not None and t.param is None:
            return t  # known at import: a constant of the body too
        if id(t) not in entered:
            captured.append(t)
            entered[id(t)] = enter(t, count + len(captured) - 1, t.deps, t.known)
        return entered[id(t)]

    def capture(value: Any) -> Any:
        return rebuild(value, iter([capture_leaf(t) for t in leaves(value)]))

    deps = frozenset([marker]) if marker else frozenset()
    stand_ins, index = [], 0
    for t, r in zip(formal_leaves, runtime):
        if r:
            stand_ins.append(enter(t, index, deps))
            index += 1
        else:
            empty = np.zeros(t.shape, bool if t.is_bool else t.data_type.numpy_dtype)
            stand_ins.append(const_value(empty, ctx.where))
    it = iter(stand_ins)
    bound = [rebuild(f, it) for f in formal]

    walk = Walk(builder, dict(outer.opsets), outer.converters, base_dir=outer.base_dir)
    walk.values = _Scope(outer.values, capture)
    if len(graph.input) != len(formal):
        raise ctx.fail(f"{label} has {len(graph.input)} inputs; {len(formal)} are expected")
    for formal_input, value in zip(graph.input, bound):
        walk.values[formal_input.name] = value
    for init in graph.initializer:
        where = f"{ctx.where} > {label}: initializer '{init.name}'"
        walk.values[init.name] = const_value(array_of(init, outer.base_dir, where), where)
    try:
        walk_nodes(walk, list(graph.node), "")
        outputs = []
        for out in graph.output:
            if out.name not in walk.values:
                raise ValidationError(f"{ONNX}: output '{out.name}' is not produced")
            outputs.append(walk.values[out.name])
    except NeedsValues as e:
        raise NeedsValues(_inside(ctx, label, str(e)), e.names) from None
    except NeedsHost as e:
        raise NeedsHost(_inside(ctx, label, str(e))) from None
    except ValidationError as e:
        raise ValidationError(_inside(ctx, label, str(e))) from None

    out_values, consts = [], []
    for t in (t for o in outputs for t in leaves(o)):
        if t.const is not None and t.param is None:
            consts.append(to_graph_array(t.const, ctx.where))
        else:
            consts.append(None)
            out_values.append(builder.materialize(t))
    count_out = len(out_values)
    imported = graph_desc(
        walk,
        {
            "input_names": tuple(names["input_names"]),
            "input_shapes": tuple(names["input_shapes"]),
            "input_types": tuple(names["input_types"]),
            "input_dtypes": tuple(t.numpy_dtype for t in names["input_types"]),
            "output_names": tuple(f"output {k}" for k in range(count_out)),
            "output_shapes": tuple(v.shape for v in out_values),
            "output_types": tuple(v.data_type for v in out_values),
            "output_bool": tuple(v.is_bool for v in out_values),
            "output_dtypes": tuple(v.data_type.numpy_dtype for v in out_values),
            "output_consts": tuple([None] * count_out),
        },
        out_values,
    )
    try:
        compiled = compile_imported(imported)
    except ValidationError as e:
        raise ValidationError(_inside(ctx, label, str(e))) from None
    return Body(imported, compiled, bound, outputs, captured, runtime, consts)


def _inside(ctx: Any, label: str, message: str) -> str:
    """An error of a subgraph's import, placed inside the node that holds the subgraph."""
    head = f"{ONNX}: "
    return f"{head}{ctx.where} > {label} > {message.removeprefix(head)}"


def jax_node(ctx: Any, name: str, fn: Any, values: list, outputs: list) -> list[Value]:
    """``Context.jax`` for control flow: inputs known at import are closed over instead of
    entering the graph (DML tensors have no empty sizes; a parameter still enters, so
    ``InferenceSession.apply`` can replace it), and empty outputs are constants (zeros)."""
    keep = [v.const is None or v.param is not None for v in values]
    if not any(keep):
        keep = [v.const is not None and v.const.size > 0 for v in values]
    consts = {k: to_graph_array(v.const, ctx.where) for k, v in enumerate(values) if not keep[k]}
    nonempty = [0 not in o[0] for o in outputs]

    def lowered(*arrays):
        it = iter(arrays)
        full = [next(it) if keep[k] else jnp.asarray(consts[k]) for k in range(len(values))]
        results = fn(*full)
        return [y for y, n in zip(results, nonempty) if n]

    specs = [o for o, n in zip(outputs, nonempty) if n]
    made = iter(ctx.jax(name, lowered, [v for v, k in zip(values, keep) if k], specs) if specs
                else ())  # fmt: skip
    result = []
    for o, n in zip(outputs, nonempty):
        if n:
            result.append(next(made))
        else:
            is_bool = len(o) > 2 and o[2]
            result.append(const_value(np.zeros(o[0], bool if is_bool else o[1].numpy_dtype)))
    return result


def run_op(ctx: Any, op_type: str, inputs: list, outputs: int = 1, **attrs: Any) -> list:
    """Imports one ai.onnx node of ``op_type`` on ``inputs`` in the place of the node being
    converted (its converter, or folding when its inputs are known), as a part of this op's
    mapping: a sequence's Concat, a Loop's stacked scan outputs."""
    from onnx import helper

    from ..walk import walk_nodes

    tag = f"__op{next(_counter)}_"
    names = []
    for k, v in enumerate(inputs):
        if v is None:
            names.append("")
        else:
            names.append(f"{tag}i{k}")
            ctx.walk.values[names[-1]] = v
    outs = [f"{tag}o{k}" for k in range(outputs)]
    where = ctx.builder.where
    walk_nodes(ctx.walk, [helper.make_node(op_type, names, outs, **attrs)], f"{ctx.where} > ")
    ctx.builder.where = where
    return [ctx.walk.values[o] for o in outs]


def spec_of(v: Value) -> tuple:
    return (tuple(v.shape), v.data_type, v.is_bool, v.carried)


def describe(values: list) -> str:
    def one(s: Any) -> str:
        if s[0] == "seq":
            return "sequence[" + ", ".join(one(x) for x in s[1]) + "]"
        if s[0] == "opt":
            return "optional(" + ("empty" if s[1] is None else one(s[1])) + ")"
        shape, t, b, carried = s
        name = TYPE_NAMES[carried].upper() if carried else "BOOL" if b else t.name
        return f"{name}{list(shape)}"

    return ", ".join(one(structure_of(v)) for v in values)


def graph_attr(ctx: Any, name: str) -> Any:
    g = ctx.attrs.get(name)
    if g is None:
        raise ctx.fail(f"attribute '{name}' is required")
    return g
