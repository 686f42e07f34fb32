"""Control flow: If on a condition computed at run time, Loop and Scan.

ONNX Runtime's DirectML provider runs these beside its DML graphs: the framework evaluates the
condition or the loop on the CPU and runs each branch or iteration's body as a subgraph whose
nodes the provider compiled onto DML operators. Here a node stays in one XLA program where it
can: a body is imported as its own DML graph (``subgraph.import_body``), compiled, and called inside
``lax.cond`` / ``lax.scan`` / ``lax.while_loop`` by one JAX node of the outer graph
(``Context.jax``). The body reads values of the enclosing scope by name: those known at import
stay constants of the body (they fold there), those computed at run time become extra inputs of
the JAX node.

Static shapes throughout. Where they cannot hold, the node runs as segments, as the provider's
CPU kernels do: the value it needs (an If's condition whose branches give different shapes, the
iteration count of a Loop whose scan outputs' length is known only at run time, each condition
of an unrolled Loop) is computed at run time by the program up to the node and read on the host
(``Context.sizes``, ``NeedsSizes``), and the session imports the rest for that value: the taken
branch in the If's place, a ``lax.scan`` of that many iterations. A condition or trip count that
is a model input itself is specialised on instead (``NeedsValues``: no segment). A Loop whose
loop-carried values change shape per iteration (a growing sequence), or whose body needs the
iteration number as a constant (a Slice at the iteration number), is unrolled at import up to
``UNROLL_LIMIT`` iterations; anything else is rejected naming the node.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from ...enums import DataType
from ...errors import ValidationError
from .. import functions
from ..elements import ONNX
from ..importer import (
    STRUCTURES,
    NeedsHost,
    NeedsSizes,
    NeedsValues,
    Value,
    const_value,
    leaves,
    rebuild,
    structure_of,
)
from . import converter
from ._common import const_ints
from .subgraph import Body, describe, graph_attr, import_body, jax_node, run_op, spec_of

# A Loop whose body cannot be one compiled function is unrolled at import up to this many
# iterations (each iteration's nodes join the program).
UNROLL_LIMIT = 64
_INT32_MAX = 2**31 - 1


# --- If --------------------------------------------------------------------------------------------


@converter("If", kind="jax")
def _if(ctx, node, inputs):
    """Both branches imported as sub-programs and compiled; ``lax.cond`` picks one at run
    time. Branches whose outputs differ in shape or type (or that hold a node needing a value
    on the host) cannot be one XLA program: the If runs as segments, its condition computed by
    the program up to it and read on the host (``Context.sizes``), the taken branch imported
    in its place. (A condition known at import never reaches here: the walk imports the chosen
    branch in place.)"""
    cond = inputs[0]
    if isinstance(cond, STRUCTURES):
        raise ctx.fail("the condition must be a tensor")
    if cond.known is not None:
        return functions.inline_if(ctx.walk, node, inputs, ctx.where, _walk_nodes())
    if int(np.prod(cond.shape)) != 1:
        raise ctx.fail(f"the condition must hold one value, got shape {list(cond.shape)}")
    key = f"{ctx.where}: condition"
    if key in ctx.builder.sizes:  # segments, the condition read on the host
        return _taken(ctx, bool(ctx.builder.sizes[key][0]))
    try:
        then_b = import_body(ctx, graph_attr(ctx, "then_branch"), [], "then_branch")
        else_b = import_body(ctx, graph_attr(ctx, "else_branch"), [], "else_branch")
    except (NeedsValues, NeedsHost) as e:
        if ctx.builder.subgraph is not None:
            raise
        detail = str(e).removeprefix(f"{ONNX}: ")
        return _segments(ctx, cond, key, f"a branch cannot be compiled as one function ({detail})")
    if [structure_of(v) for v in then_b.outputs] != [structure_of(v) for v in else_b.outputs]:
        message = (
            f"its branches give values of different shapes or types (then: "
            f"{describe(then_b.outputs)}; else: {describe(else_b.outputs)}), and its condition "
            "is computed at run time"
        )
        if ctx.builder.subgraph is not None or _is_graph_input(ctx, cond):
            # Inside a body (a Loop unrolls on its state), or the condition is a model input
            # itself: the session specialises on the input's value, a program per value, with
            # no segment before it (a merged decoder's use_cache_branch).
            if cond.deps:
                raise NeedsValues(
                    f"{ONNX}: {ctx.where}: {message}; one XLA program has static shapes; the "
                    f"condition is computed from graph inputs {sorted(cond.deps)}",
                    cond.deps,
                )
            raise ctx.fail(f"{message}; one XLA program has static shapes")
        return _segments(ctx, cond, key, message)
    shared: list[Value] = []
    position: dict[int, int] = {}
    for t in then_b.captured + else_b.captured:
        if id(t) not in position:
            position[id(t)] = len(shared)
            shared.append(t)
    then_at = [position[id(t)] for t in then_b.captured]
    else_at = [position[id(t)] for t in else_b.captured]
    specs = [spec_of(t) for o in then_b.outputs for t in leaves(o)]

    def fn(c, *caps):
        return lax.cond(
            jnp.reshape(c, ()) != 0,
            lambda: tuple(then_b([], [caps[k] for k in then_at])),
            lambda: tuple(else_b([], [caps[k] for k in else_at])),
        )

    name = f"If(lax.cond; then: {then_b.operators()}; else: {else_b.operators()})"
    made = iter(jax_node(ctx, name, fn, [cond, *shared], specs))
    return [rebuild(o, made) for o in then_b.outputs]


def _segments(ctx, cond: Value, key: str, why: str) -> list:
    """The If as segments: the condition computed at run time by the program up to the If and
    read on the host (the session imports the rest once per condition value)."""
    (taken,) = ctx.sizes(
        lambda c: (int(bool(np.asarray(c).reshape(-1)[0])),),
        [cond],
        key=key,
        what=f"{why}; the condition is read on the host and the taken branch imported",
    )
    return _taken(ctx, bool(taken))


def _taken(ctx, value: bool) -> list:
    """The branch the condition (read at run time) takes, imported in the If's place."""
    name = "then_branch" if value else "else_branch"
    where = ctx.builder.where
    outputs = functions.inline_graph(
        ctx.walk, graph_attr(ctx, name), {}, f"{ctx.where} > {name}", _walk_nodes()
    )
    ctx.builder.where = where
    ctx.note = f"segments: {name} taken, the condition read on the host first"
    return outputs


def _is_graph_input(ctx, v: Value) -> bool:
    """Whether ``v`` is a model input's value as it enters (the session can specialise on
    it); never inside a body compiled as one function."""
    if ctx.builder.subgraph is not None or v.source[0] != "node":
        return False
    walk = getattr(ctx, "walk", None)
    if walk is not None and any(r.source == v.source for r in walk.resumed.values()):
        return False  # a value an earlier segment computed: no model input to specialise on
    return any(k == "input" and n == v.source[1] for (k, _), n in ctx.builder._graph_inputs)


def _walk_nodes():
    from ..walk import walk_nodes

    return walk_nodes


# --- Loop ------------------------------------------------------------------------------------------


class _Unroll(Exception):
    """The Loop's body cannot be one function of its loop state; why."""


class _NotUnrolled(Exception):
    """Unrolling (tried first where a rolled form also exists) meets a condition computed at
    run time, or passes the limit."""


@converter("Loop", kind="jax")
def _loop(ctx, node, inputs):
    """``lax.scan`` for an iteration count known before the program runs (scan outputs
    stacked), ``lax.while_loop`` when a condition or trip count computed at run time can stop
    it (no scan outputs then); scan outputs of a run-time length are counted first by a
    program of their own (segments); unrolled at import when the body is no function of a
    static loop state."""
    body = graph_attr(ctx, "body")
    inputs = list(inputs) + [None] * (2 - len(inputs))
    m, cond, carried = inputs[0], inputs[1], inputs[2:]
    nc = len(carried)
    n_scan = len(body.output) - 1 - nc
    if len(body.input) != 2 + nc or n_scan < 0:
        raise ctx.fail(
            f"the body has {len(body.input)} inputs and {len(body.output)} outputs; with {nc} "
            f"loop-carried values it must have {2 + nc} inputs and at least {1 + nc} outputs"
        )
    if any(v is None for v in carried):
        raise ctx.fail("a loop-carried value has no initial value")
    for v, what in ((m, "M"), (cond, "cond")):
        if v is not None and (isinstance(v, STRUCTURES) or int(np.prod(v.shape)) != 1):
            raise ctx.fail(f"input {what} must hold one value")
    marker = f"<the loop state of {ctx.where}>"
    iteration = Value((), DataType.INT32, ("stand-in",))
    flag = Value((), DataType.UINT8, ("stand-in",), is_bool=True)
    try:
        b = import_body(ctx, body, [iteration, flag, *carried], "body", marker)
        for k, (before, after) in enumerate(zip(carried, b.outputs[1 : 1 + nc])):
            if structure_of(before) != structure_of(after):
                raise _Unroll(
                    f"loop-carried value {k} changes from {describe([before])} to "
                    f"{describe([after])} in an iteration"
                )
        for k, v in enumerate(b.outputs[1 + nc :]):
            if isinstance(v, STRUCTURES):
                raise _Unroll(f"scan output {k} is not a tensor")
    except NeedsValues as e:
        if marker not in e.names:
            raise
        return _unrolled_or_host(ctx, body, m, cond, carried, n_scan, f"{e}")
    except NeedsHost as e:
        if ctx.builder.subgraph is not None:
            raise
        # Its nodes join the program's own graph, where values are read on the host.
        return _unrolled_or_host(ctx, body, m, cond, carried, n_scan, f"{e}")
    except _Unroll as e:
        return _unroll(ctx, body, m, cond, carried, n_scan, str(e))
    cond_out = b.outputs[0]
    if isinstance(cond_out, STRUCTURES) or int(np.prod(cond_out.shape)) != 1:
        raise ctx.fail("the body's condition output must hold one value")
    # Whether the body's condition stays true: passed through, or a true constant.
    stays = cond_out.source == b.formal[1].source or (
        cond_out.known is not None and bool(np.asarray(cond_out.known).reshape(-1)[0])
    )
    known_start = (m is None or m.known is not None) and (cond is None or cond.known is not None)
    counted = f"{ctx.where}: iterations" in ctx.builder.sizes  # tried before: rolled
    if n_scan and not stays and known_start and not counted and marker in cond_out.deps:
        # Scan outputs whose length depends on the loop state: unrolled, the condition of each
        # iteration may be known at import (one computed from the iteration number); one
        # computed from data is counted at run time instead (segments, below).
        reason = "its scan outputs' length depends on a condition computed from the loop state"
        try:
            return _unroll(ctx, body, m, cond, carried, n_scan, reason, rolled=True)
        except _NotUnrolled:
            pass
    return _rolled(ctx, b, m, cond, carried, n_scan, stays)


def _unrolled_or_host(ctx, body, m, cond, carried, n_scan, reason: str) -> list:
    """``_unroll``; where an iteration needs, as a constant, a value computed from model
    inputs too large to specialise on (a size read from an image's detections), the Loop runs
    on the host instead (``host_loop``)."""
    from ..cache import STATIC_INPUT_LIMIT
    from .host_loop import host_loop

    reason = reason.removeprefix(f"{ONNX}: ")
    try:
        return _unroll(ctx, body, m, cond, carried, n_scan, reason)
    except NeedsValues as e:
        large = [n for n in e.names if isinstance(ctx.walk.values.get(n), Value)
                 and int(np.prod(ctx.walk.values[n].shape)) > STATIC_INPUT_LIMIT]  # fmt: skip
        if not large or ctx.builder.subgraph is not None:
            raise
        why = f"{e}".removeprefix(f"{ONNX}: ")
        return jax_node(ctx, *host_loop(ctx, body, m, cond, carried, n_scan, why))


def _trip_count(trip: int | None) -> int | None:
    """The iteration bound M (None: absent, or too large to bound a loop of int32 iteration
    numbers, as an unbounded loop)."""
    if trip is None:
        return None
    return None if trip > _INT32_MAX else max(trip, 0)


def _host_int(ctx, v: Value, what: str, why: str) -> int:
    """A one-value input of the Loop that its import needs as a number: its value at import;
    for a model input (or inside a body) the session specialises on it (``Context.const``);
    else it is computed at run time by the program up to the Loop and read on the host
    (segments, ``Context.sizes``)."""
    if v.known is not None or ctx.builder.subgraph is not None or _is_graph_input(ctx, v):
        return const_ints(ctx, v, what)[0]
    (n,) = ctx.sizes(_first, [v], key=f"{ctx.where}: {what}", what=f"input '{what}' {why}")
    return n


def _first(a: np.ndarray) -> tuple[int]:
    return (int(np.asarray(a).reshape(-1)[0]),)


def _rolled(ctx, b: Body, m, cond, carried, n_scan, stays: bool):
    """The Loop as one JAX node around the compiled body."""
    nc = len(carried)
    state_specs = [spec_of(t) for v in carried for t in leaves(v)]
    n_state = len(state_specs)
    scan_shapes = [tuple(v.shape) for v in b.outputs[1 + nc :]]
    fixed = None  # the iteration count when it is known before the program runs
    if stays and m is not None and (m.known is not None or (n_scan and _is_graph_input(ctx, m))):
        # M known at import, or a model input the session specialises on (scan outputs)
        fixed = _trip_count(const_ints(ctx, m, "M")[0])
        if fixed is None and n_scan:
            raise ctx.fail("a Loop with scan outputs needs a trip count M below 2**31")
    if fixed is not None and cond is not None:
        if cond.known is not None and not bool(np.asarray(cond.known).reshape(-1)[0]):
            fixed = 0
        elif cond.known is None:
            fixed = None  # a condition at run time: it may skip the loop
    has_m, has_cond = m is not None, cond is not None
    state_leaves = [t for v in carried for t in leaves(v)]
    captured = b.captured
    loop_values = [v for v in (m, cond) if v is not None] + [*state_leaves, *captured]
    if m is not None and m.known is not None and _trip_count(int(m.known.reshape(-1)[0])) is None:
        loop_values[0] = const_value(np.int32(_INT32_MAX))  # "no bound": the largest int32
    if n_scan and fixed is None:
        if m is None and stays:
            raise ctx.fail(
                "a Loop with scan outputs needs a trip count M or a condition computed in its "
                "body: without either it never stops"
            )
        fixed = _iterations(ctx, b, n_state, has_m, has_cond, loop_values)
    if fixed == 0:
        scans = [const_value(np.zeros((0, *s), t.numpy_dtype)) for s, t in
                 zip(scan_shapes, (v.data_type for v in b.outputs[1 + nc :]))]  # fmt: skip
        return [*carried, *scans]
    scan_specs = [((fixed, *s), t.data_type, t.is_bool) for s, t in
                  zip(scan_shapes, b.outputs[1 + nc :])]  # fmt: skip

    if fixed is not None:

        def fn(*arrays):
            state, caps = arrays[:n_state], arrays[n_state:]

            def step(carry, _):
                i, values = carry
                outs = b([i, jnp.ones((), jnp.uint8), *values], caps)
                return (i + 1, tuple(outs[1 : 1 + n_state])), tuple(outs[1 + n_state :])

            (_, final), ys = lax.scan(step, (jnp.int32(0), tuple(state)), None, length=fixed)
            return [*final, *ys]

        name = (
            f"Loop(lax.scan, {fixed} iteration{'' if fixed == 1 else 's'}; body: {b.operators()})"
        )
        values = [*state_leaves, *captured]
    else:
        loop = _while(b, n_state, has_m, has_cond)
        fn = lambda *arrays: loop(*arrays)[1]
        name = f"Loop(lax.while_loop; body: {b.operators()})"
        values = loop_values
    made = iter(jax_node(ctx, name, fn, values, state_specs + scan_specs))
    return [rebuild(v, made) for v in carried] + [next(made) for _ in range(n_scan)]


def _while(b: Body, n_state: int, has_m: bool, has_cond: bool):
    """The Loop as ``lax.while_loop`` over (M, cond present, state, captured arrays): a
    function returning the iteration count and the final state."""

    def loop(*arrays):
        arrays = list(arrays)
        limit = arrays.pop(0).reshape(()) if has_m else None
        c0 = arrays.pop(0).reshape(()) != 0 if has_cond else jnp.bool_(True)
        state, caps = arrays[:n_state], arrays[n_state:]

        def keep_going(s):
            i, c, _ = s
            return c & (i < limit) if has_m else c

        def step(s):
            i, c, values = s
            outs = b([i, c.astype(jnp.uint8), *values], caps)
            return i + 1, jnp.reshape(outs[0], ()) != 0, tuple(outs[1 : 1 + n_state])

        count, _, final = lax.while_loop(keep_going, step, (jnp.int32(0), c0, tuple(state)))
        return count, list(final)

    return loop


def _iterations(ctx, b: Body, n_state: int, has_m: bool, has_cond: bool, values: list) -> int:
    """How many iterations a Loop with scan outputs runs, where that is known only at run time
    (a trip count or condition computed at run time, a condition computed in its body): the
    loop runs first without its scan outputs, as ``lax.while_loop`` in the program up to it,
    and its count is read on the host (segments); the session then imports the Loop as a
    ``lax.scan`` of that many iterations (a program per count)."""
    key = f"{ctx.where}: iterations"  # (``_loop`` reads it too)
    if key in ctx.builder.sizes:
        return ctx.builder.sizes[key][0]
    loop = _while(b, n_state, has_m, has_cond)
    (count,) = jax_node(
        ctx,
        f"Loop(lax.while_loop, its iterations; body: {b.operators()})",
        lambda *arrays: [loop(*arrays)[0]],
        values,
        [((), DataType.INT32)],
    )
    why = "its scan outputs' length (its iteration count) is computed at run time"
    return ctx.sizes(_first, [count], key=key, what=why)[0]


def _unroll(ctx, body, m, cond, carried, n_scan, reason: str, rolled: bool = False):
    """The body's nodes imported once per iteration, with the iteration number and the
    condition as constants. A trip count or condition computed at run time is read on the
    host first (segments: ``_host_int``), one program per value; with ``rolled`` (a rolled
    form exists) such a condition, or passing the limit, raises ``_NotUnrolled`` instead."""
    from ..walk import walk_nodes

    why = f"is computed at run time, and the Loop must be unrolled ({reason})"
    try:
        trip = None if m is None else _trip_count(_host_int(ctx, m, "M", why))
        going = True if cond is None else bool(_host_int(ctx, cond, "cond", why))
    except (NeedsValues, NeedsSizes):
        raise
    except ValidationError as e:
        raise ctx.fail(f"the Loop must be unrolled ({reason}), but {e}") from None
    # A trip count over the limit may still stop early through its condition: unrolling finds
    # out, up to the limit.
    trip_text = "no trip count" if trip is None else f"trip count {trip}"
    names = [i.name for i in body.input]
    values = list(carried)
    scans: list[list] = [[] for _ in range(n_scan)]
    i = 0
    while going and (trip is None or i < trip):
        if i >= UNROLL_LIMIT:
            if rolled:
                raise _NotUnrolled
            raise ctx.fail(
                f"the Loop must be unrolled ({reason}), but it runs more than {UNROLL_LIMIT} "
                f"iterations ({trip_text})"
            )
        bindings = {names[0]: const_value(np.int64(i)), names[1]: const_value(np.bool_(True))}
        bindings.update(zip(names[2:], values))
        outs = functions.inline_graph(
            ctx.walk, body, bindings, f"{ctx.where} > iteration {i}", walk_nodes
        )
        c = outs[0]
        if isinstance(c, STRUCTURES):
            raise ctx.fail("the body's condition output must be a tensor")
        if trip is not None and i + 1 >= trip:
            going = False  # the last iteration: its condition stops nothing
        elif c.known is None and rolled:
            raise _NotUnrolled
        elif c.known is None:
            # Read on the host after the iterations before (segments: a program per count).
            (flag,) = ctx.sizes(
                _first, [c], key=f"{ctx.where}: iteration {i}: condition",
                what=f"the body's condition {why}",
            )  # fmt: skip
            going = bool(flag)
        else:
            going = bool(np.asarray(c.known).reshape(-1)[0])
        values = outs[1 : 1 + len(carried)]
        for k, v in enumerate(outs[1 + len(carried) :]):
            if isinstance(v, STRUCTURES):
                raise ctx.fail(f"scan output {k} is not a tensor")
            scans[k].append(v)
        i += 1
    stacked = []
    for k, items in enumerate(scans):
        if not items:
            raise ctx.fail(
                f"scan output {k}: the loop runs no iteration, and its body (which must be "
                f"unrolled: {reason}) gives no shape for it"
            )
        if len({tuple(v.shape) for v in items}) > 1:
            raise ctx.fail(
                f"scan output {k} has different shapes in different iterations "
                f"({sorted({tuple(v.shape) for v in items})})"
            )
        views = [v.view((1, *v.shape)) for v in items]
        stacked.append(views[0] if len(views) == 1 else run_op(ctx, "Concat", views, axis=0)[0])
    ctx.note = f"unrolled at import: {i} iteration{'' if i == 1 else 's'}"
    return [*values, *stacked]


# --- Scan ------------------------------------------------------------------------------------------


@converter("Scan", kind="jax")
def _scan(ctx, node, inputs):
    """``lax.scan`` over the scan inputs' axis (Scan-8: per batch entry, each with its
    sequence length)."""
    body = graph_attr(ctx, "body")
    n_in = int(ctx.attr("num_scan_inputs"))
    v8 = ctx.opset < 9
    lens, rest = (inputs[0], list(inputs[1:])) if v8 else (None, list(inputs))
    n_state = len(rest) - n_in
    if n_state < 0 or n_in < 1:
        raise ctx.fail(f"num_scan_inputs {n_in} does not fit {len(rest)} inputs")
    if any(v is None or isinstance(v, STRUCTURES) for v in rest):
        raise ctx.fail("every state and scan input must be a tensor")
    states, xs = rest[:n_state], rest[n_state:]
    n_out = len(body.output) - n_state
    if len(body.input) != len(rest) or n_out < 0:
        raise ctx.fail(
            f"the body has {len(body.input)} inputs and {len(body.output)} outputs; {len(rest)} "
            f"inputs and at least {n_state} outputs are expected"
        )
    batch = 0
    if v8:
        in_axes, out_axes = [1] * n_in, [1] * n_out
        in_dirs = list(ctx.attr("directions") or [0] * n_in)
        out_dirs = [0] * n_out
        batches = {v.shape[0] for v in rest if v.rank >= 1}
        if any(v.rank < 1 for v in states) or any(v.rank < 2 for v in xs) or len(batches) != 1:
            raise ctx.fail("Scan-8 inputs must share a leading batch axis (scan inputs: then a "
                           "sequence axis)")  # fmt: skip
        batch = batches.pop()
    else:
        in_axes = list(ctx.attr("scan_input_axes") or [0] * n_in)
        in_dirs = list(ctx.attr("scan_input_directions") or [0] * n_in)
        out_axes = list(ctx.attr("scan_output_axes") or [0] * n_out)
        out_dirs = list(ctx.attr("scan_output_directions") or [0] * n_out)
    for what, got, want in (("scan input axes", in_axes, n_in), ("scan input directions",
                            in_dirs, n_in), ("scan output axes", out_axes, n_out),
                            ("scan output directions", out_dirs, n_out)):  # fmt: skip
        if len(got) != want:
            raise ctx.fail(f"{len(got)} {what} for {want} values")
    for k, (x, a) in enumerate(zip(xs, in_axes)):
        if not -x.rank <= a < x.rank:
            raise ctx.fail(f"scan input {k}: axis {a} is out of range for rank {x.rank}")
    in_axes = [a % x.rank for a, x in zip(in_axes, xs)]
    lengths = {x.shape[a] for x, a in zip(xs, in_axes)}
    if len(lengths) != 1:
        raise ctx.fail(f"the scan inputs' scanned axes differ in length ({sorted(lengths)})")
    length = lengths.pop()
    skip = 1 if v8 else 0  # Scan-8's batch axis: the body sees one batch entry
    state_tpl = [s.view(s.shape[skip:]) if v8 else s for s in states]
    slice_tpl = [x.view(tuple(d for j, d in enumerate(x.shape) if j != a and j >= skip))
                 for x, a in zip(xs, in_axes)]  # fmt: skip
    marker = f"<the scanned values of {ctx.where}>"
    try:
        b = import_body(ctx, body, [*state_tpl, *slice_tpl], "body", marker)
    except NeedsValues as e:
        if marker not in e.names:
            raise
        raise ctx.fail(
            f"its body needs as a constant a value computed from the scan state or inputs "
            f"({str(e).removeprefix(f'{ONNX}: ')})"
        ) from None
    for k, (before, after) in enumerate(zip(state_tpl, b.outputs[:n_state])):
        if isinstance(after, STRUCTURES) or spec_of(before) != spec_of(after):
            raise ctx.fail(
                f"state {k} changes from {describe([before])} to {describe([after])} in an "
                "iteration; a Scan's state keeps its shape"
            )
    ys = b.outputs[n_state:]
    if any(isinstance(y, STRUCTURES) for y in ys):
        raise ctx.fail("a scan output of the body is not a tensor")
    out_shapes = []
    for k, (y, a) in enumerate(zip(ys, out_axes)):
        if v8:  # [batch, sequence, ...]
            out_shapes.append((batch, length, *y.shape))
            continue
        rank = y.rank + 1
        if not -rank <= a < rank:
            raise ctx.fail(f"scan output {k}: axis {a} is out of range for rank {rank}")
        out_axes[k] = a % rank
        shape = list(y.shape)
        shape.insert(out_axes[k], length)
        out_shapes.append(tuple(shape))
    specs = [spec_of(s) for s in states] + [(s, y.data_type, y.is_bool, y.carried) for s, y in
                                          zip(out_shapes, ys)]  # fmt: skip

    def one(state, seqs, caps, count=None):
        """One scan: ``seqs`` with the scanned axis first, in iteration order."""

        def step(carry, sl):
            t, values = carry
            outs = b([*values, *sl], caps)
            new, out = outs[:n_state], outs[n_state:]
            if count is not None:  # Scan-8's sequence length: the state stops, outputs are 0
                on = t < count
                new = [jnp.where(on, y, x) for x, y in zip(values, new)]
                out = [jnp.where(on, y, jnp.zeros_like(y)) for y in out]
            return (t + 1, tuple(new)), tuple(out)

        (_, final), stacked = lax.scan(step, (jnp.int32(0), tuple(state)), tuple(seqs),
                                       length=length)  # fmt: skip
        return list(final), list(stacked)

    def fn(*arrays):
        arrays = list(arrays)
        seq_lens = arrays.pop(0) if lens is not None else None
        state, xs_a, caps = arrays[:n_state], arrays[n_state : n_state + n_in], arrays[
            n_state + n_in :]  # fmt: skip
        if not v8:
            seqs = [jnp.moveaxis(x, a, 0) for x, a in zip(xs_a, in_axes)]
            seqs = [jnp.flip(s, 0) if d else s for s, d in zip(seqs, in_dirs)]
            final, stacked = one(state, seqs, caps)
            outs = [jnp.flip(y, 0) if d else y for y, d in zip(stacked, out_dirs)]
            return [*final, *(jnp.moveaxis(y, 0, a) for y, a in zip(outs, out_axes))]
        finals, outs = [[] for _ in range(n_state)], [[] for _ in range(n_out)]
        for e in range(batch):  # each batch entry its own scan of its own length
            count = None if seq_lens is None else jnp.reshape(seq_lens, (-1,))[e]
            seqs = []
            for x, d in zip(xs_a, in_dirs):
                s = x[e]
                if d:  # reversed: from the last element of this entry's sequence
                    n = length if count is None else count
                    s = jnp.take(s, jnp.clip(n - 1 - jnp.arange(length), 0, length - 1), axis=0)
                seqs.append(s)
            final, stacked = one([s[e] for s in state], seqs, caps, count)
            for k, y in enumerate(final):
                finals[k].append(y)
            for k, y in enumerate(stacked):
                outs[k].append(y)
        return [jnp.stack(f) for f in finals] + [jnp.stack(o) for o in outs]

    if length == 0:
        zeros = [const_value(np.zeros(s, y.data_type.numpy_dtype)) for s, y in zip(out_shapes, ys)]
        return [*states, *zeros]
    values = ([lens] if lens is not None else []) + [*states, *xs, *b.captured]
    return jax_node(ctx, f"Scan(body: {b.operators()})", fn, values, specs)
