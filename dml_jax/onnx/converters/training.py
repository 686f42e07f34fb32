"""ai.onnx.preview.training: the optimizers Adagrad, Adam and Momentum, and Gradient.

The optimizers are element-wise updates, composed of DirectML's element-wise operators (the
ONNX pseudo code, one operator per step; ONNX Runtime's DirectML provider has no kernel for
them). DML_OPERATOR_ADAM_OPTIMIZER is not ONNX's Adam: its learning rate is an attribute where
ONNX's R is a run-time tensor, it has no weight decay (``norm_coefficient``,
``norm_coefficient_post``), and its bias correction at T = 0 is 0 / 0 where ONNX skips the
correction; so Adam is composed too. The branches on T (``T > 0 ? ... : ...``) are
ELEMENT_WISE_IF on a scalar condition; T (int64, INT32 in the graph) is cast to the tensors'
float type where it is an exponent or a factor.

Several tensors: the inputs are R, T, then the X_i, then the G_i, and so on (the outputs the
X_i_new, then the next state, ...); each tensor's update is the one-tensor pseudo code.

Gradient has no DML form: its outputs are ``jax.vjp`` of the DML graph that computes ``y`` from
the tensors ``xs`` and ``zs`` (``_gradient``).
"""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np

from ...enums import DataType
from ...graph import GraphDesc, InputGraphEdge, IntermediateGraphEdge, OutputGraphEdge
from ..importer import Value, identity, packed
from . import converter
from ._common import binary_value, cast_value, op, select_value

_FLOATS = (DataType.FLOAT32, DataType.FLOAT64)


# ---------------------------------------------------------------------------------------------
# Element-wise steps


def _const(ctx, value: float, t: DataType) -> Value:
    return ctx.constant(np.asarray(value, t.numpy_dtype))


def _add(ctx, a, b):
    return binary_value(ctx, "ELEMENT_WISE_ADD", a, b)


def _sub(ctx, a, b):
    return binary_value(ctx, "ELEMENT_WISE_SUBTRACT", a, b)


def _mul(ctx, a, b):
    return binary_value(ctx, "ELEMENT_WISE_MULTIPLY", a, b)


def _div(ctx, a, b):
    return binary_value(ctx, "ELEMENT_WISE_DIVIDE", a, b)


def _scale(ctx, c: float, x: Value) -> Value:
    """c * x (x itself when c is 1)."""
    return x if c == 1.0 else _mul(ctx, _const(ctx, c, x.data_type), x)


def _sqrt(ctx, x: Value) -> Value:
    t = packed(x.data_type, x.shape)
    return ctx.out(ctx.node(op("ELEMENT_WISE_SQRT")(t, t), [x]), x.shape)


def _regularized(ctx, norm: float, x: Value, g: Value) -> Value:
    """G_regularized = norm_coefficient * X + G (G itself when the coefficient is 0)."""
    return g if norm == 0.0 else _add(ctx, _scale(ctx, norm, x), g)


def _optimizer_inputs(ctx, inputs, per_tensor: int, names: str):
    """R, T and the groups of ``per_tensor`` lists (X_i, G_i, ...), each tensor checked to be
    float; R cast to the tensors' type, T checked to be a scalar."""
    r, t, rest = inputs[0], inputs[1], inputs[2:]
    if not rest or len(rest) % per_tensor:
        raise ctx.fail(
            f"after R and T the inputs must be {per_tensor} lists of equal length ({names}), "
            f"got {len(rest)} tensors"
        )
    if any(v is None for v in rest):
        raise ctx.fail("every optimized tensor and its state must be given")
    n = len(rest) // per_tensor
    groups = [rest[k * n : (k + 1) * n] for k in range(per_tensor)]
    x_type = rest[0].data_type
    for v in (r, *rest):
        if v.data_type not in _FLOATS:
            raise ctx.fail(f"R and the tensors must be float or double, got {v.data_type.name}")
    if any(v.data_type != x_type for v in rest):
        raise ctx.fail("the optimized tensors and their states must have one data type")
    for v, what in ((r, "R"), (t, "T")):
        if int(np.prod(v.shape)) != 1:
            raise ctx.fail(f"input '{what}' must be a scalar, got shape {list(v.shape)}")
    if t.data_type not in (DataType.INT32, DataType.UINT32):
        raise ctx.fail(f"input 'T' must be int64, got {t.data_type.name}")
    r = cast_value(ctx, r.view(()), x_type)
    t = t.view(())
    return r, t, x_type, groups


def _step_positive(ctx, t: Value) -> Value:
    """T > 0 as a UINT8 scalar."""
    zero = ctx.constant(np.zeros((), t.data_type.numpy_dtype))
    return binary_value(ctx, "ELEMENT_WISE_LOGICAL_GREATER_THAN", t, zero, is_bool=True)


def _outputs(ctx, results: list[Value]) -> list[Value | None]:
    if len(ctx.onnx_node.output) > len(results):
        raise ctx.fail(f"{len(ctx.onnx_node.output)} outputs; this node has {len(results)}")
    return results[: len(ctx.onnx_node.output)]


@converter("Adagrad", domain="ai.onnx.preview.training")
def _adagrad(ctx, node, inputs):
    """r = R / (1 + T * decay_factor); G' = norm * X + G; H_new = H + G' * G';
    X_new = X - r * G' / (sqrt(H_new) + epsilon)."""
    r, t, x_type, (xs, gs, hs) = _optimizer_inputs(ctx, inputs, 3, "X, G, H")
    decay = float(ctx.attr("decay_factor", 0.0))
    epsilon = float(ctx.attr("epsilon", 1e-6))
    norm = float(ctx.attr("norm_coefficient", 0.0))
    if decay != 0.0:
        tf = cast_value(ctx, t, x_type)
        one = _const(ctx, 1.0, x_type)
        r = _div(ctx, r, _add(ctx, one, _scale(ctx, decay, tf)))
    x_new, h_new = [], []
    for x, g, h in zip(xs, gs, hs):
        g = _regularized(ctx, norm, x, g)
        h2 = _add(ctx, h, _mul(ctx, g, g))
        adaptive = _add(ctx, _sqrt(ctx, h2), _const(ctx, epsilon, x_type))
        x_new.append(_sub(ctx, x, _div(ctx, _mul(ctx, r, g), adaptive)))
        h_new.append(h2)
    return _outputs(ctx, x_new + h_new)


@converter("Adam", domain="ai.onnx.preview.training")
def _adam(ctx, node, inputs):
    """G' = norm * X + G; V_new = alpha V + (1 - alpha) G'; H_new = beta H + (1 - beta) G'^2;
    R' = T > 0 ? R sqrt(1 - beta^T) / (1 - alpha^T) : R;
    X_new = (1 - norm_post) (X - R' V_new / (sqrt(H_new) + epsilon))."""
    r, t, x_type, (xs, gs, vs, hs) = _optimizer_inputs(ctx, inputs, 4, "X, G, V, H")
    alpha = float(ctx.attr("alpha", 0.9))
    beta = float(ctx.attr("beta", 0.999))
    epsilon = float(ctx.attr("epsilon", 1e-6))
    norm = float(ctx.attr("norm_coefficient", 0.0))
    post = float(ctx.attr("norm_coefficient_post", 0.0))
    # The bias-corrected rate; at T = 0 its quotient is 0 / 0, which the select discards.
    tf = cast_value(ctx, t, x_type)
    one = _const(ctx, 1.0, x_type)

    def power(base: float) -> Value:
        b = _const(ctx, base, x_type)
        desc = op("ELEMENT_WISE_POW")(packed(x_type, ()), packed(x_type, ()), packed(x_type, ()))
        return ctx.out(ctx.node(desc, [b, tf]), ())

    corrected = _div(
        ctx, _mul(ctx, r, _sqrt(ctx, _sub(ctx, one, power(beta)))), _sub(ctx, one, power(alpha))
    )
    r = select_value(ctx, _step_positive(ctx, t), corrected, r)
    x_new, v_new, h_new = [], [], []
    for x, g, v, h in zip(xs, gs, vs, hs):
        g = _regularized(ctx, norm, x, g)
        v2 = _add(ctx, _scale(ctx, alpha, v), _scale(ctx, 1.0 - alpha, g))
        h2 = _add(ctx, _scale(ctx, beta, h), _scale(ctx, 1.0 - beta, _mul(ctx, g, g)))
        root = _add(ctx, _sqrt(ctx, h2), _const(ctx, epsilon, x_type))
        x2 = _sub(ctx, x, _mul(ctx, r, _div(ctx, v2, root)))
        if post != 0.0:
            x2 = _scale(ctx, 1.0 - post, x2)
        x_new.append(x2)
        v_new.append(v2)
        h_new.append(h2)
    return _outputs(ctx, x_new + v_new + h_new)


@converter("Momentum", domain="ai.onnx.preview.training")
def _momentum(ctx, node, inputs):
    """G' = norm * X + G; V_new = alpha V + (T > 0 ? beta : 1) G'; X_new = X - R V_new
    (standard) or X - R (G' + alpha V_new) (nesterov)."""
    r, t, x_type, (xs, gs, vs) = _optimizer_inputs(ctx, inputs, 3, "X, G, V")
    alpha = float(ctx.attr("alpha"))
    beta = float(ctx.attr("beta"))
    norm = float(ctx.attr("norm_coefficient"))
    mode = ctx.attr("mode")
    if mode not in ("standard", "nesterov"):
        raise ctx.fail(f"attribute 'mode' must be 'standard' or 'nesterov', got '{mode}'")
    beta_t = None
    if beta != 1.0:
        beta_t = select_value(
            ctx, _step_positive(ctx, t), _const(ctx, beta, x_type), _const(ctx, 1.0, x_type)
        )
    x_new, v_new = [], []
    for x, g, v in zip(xs, gs, vs):
        g = _regularized(ctx, norm, x, g)
        step = g if beta_t is None else _mul(ctx, beta_t, g)
        v2 = _add(ctx, _scale(ctx, alpha, v), step)
        direction = v2 if mode == "standard" else _add(ctx, g, _scale(ctx, alpha, v2))
        x_new.append(_sub(ctx, x, _mul(ctx, r, direction)))
        v_new.append(v2)
    return _outputs(ctx, x_new + v_new)


# ---------------------------------------------------------------------------------------------
# Gradient


def _source(builder, v: Value) -> tuple[int, int] | None:
    """The (node, output) of the DML graph holding ``v``'s data (a constant's entry node once
    a node reads it), or None when no node holds it."""
    if v.source[0] == "node":
        return (v.source[1], v.source[2])
    entry = builder._const_nodes.get(id(v.const))
    return None if entry is None else (entry.source[1], entry.source[2])


@converter("Gradient", domain="ai.onnx.preview.training", kind="jax")
def _gradient(ctx, node, inputs):
    """The gradient of ``y`` with respect to each tensor of ``xs``, at the values given as the
    node's inputs (the tensors of ``xs`` then those of ``zs``).

    The differentiated computation is the part of the DML graph built so far that computes
    ``y`` from ``xs`` and ``zs``: the nodes between them, found by following the graph's edges
    back from ``y`` to the outputs that hold the tensors of ``xs`` and ``zs``. Those nodes are
    compiled into a graph of their own (each tensor of ``xs`` and ``zs``, and each other tensor
    they read, one of its inputs), and the node is one JAX node computing ``jax.vjp`` of that
    graph's function at the node's inputs, with a cotangent of ones: the gradient of the sum of
    ``y``'s elements where ``y`` is not a scalar (docs/semantics.md, "ONNX")."""
    xs = list(ctx.attr("xs") or [])
    zs = list(ctx.attr("zs") or [])
    y_name = ctx.attr("y")
    if not xs:
        raise ctx.fail("attribute 'xs' must name at least one tensor")
    if len(inputs) != len(xs) + len(zs):
        raise ctx.fail(
            f"{len(inputs)} inputs; the node takes one per tensor of 'xs' and 'zs' "
            f"({len(xs) + len(zs)})"
        )
    if len(node.output) > len(xs):
        raise ctx.fail(f"{len(node.output)} outputs; 'xs' names {len(xs)} tensors")
    values, builder = ctx.walk.values, ctx.builder
    for name, what in [(n, "xs") for n in xs] + [(n, "zs") for n in zs] + [(y_name, "y")]:
        if name not in values or not hasattr(values[name], "shape"):
            raise ctx.fail(f"attribute '{what}': '{name}' is not a tensor computed before")
    given = {}  # (node, output) of a tensor of xs / zs -> its position among the inputs
    for k, name in enumerate(xs + zs):
        v, fed = values[name], inputs[k]
        if fed is None:
            raise ctx.fail(f"input {k} (the value of '{name}') is required")
        if fed.shape != v.shape or fed.data_type != v.data_type:
            raise ctx.fail(
                f"input {k} must have the shape and type of '{name}' ({list(v.shape)}, "
                f"{v.data_type.name}), got {list(fed.shape)}, {fed.data_type.name}"
            )
        if k < len(xs) and v.data_type not in (*_FLOATS, DataType.FLOAT16):
            raise ctx.fail(f"'{name}' (in 'xs') must be a float tensor, got {v.data_type.name}")
        src = _source(builder, v)
        if src is not None:
            given.setdefault(src, k)
    y = values[y_name]
    if y.data_type not in (*_FLOATS, DataType.FLOAT16):
        raise ctx.fail(f"'y' must be a float tensor, got {y.data_type.name}")
    y_src = _source(builder, y)
    if y_src is None:
        raise ctx.fail(
            f"'{y_name}' was computed at import from constants only (folded); its gradient "
            "is not computed"
        )

    feeds_of: dict[int, list[tuple[int, Value]]] = {}
    for n, k, v in builder.feeds:
        feeds_of.setdefault(n, []).append((k, v))
    entries = {n for _, n in builder._graph_inputs}  # where graph inputs and constants enter
    depends: dict[int, bool] = {}

    def reaches(n: int) -> bool:
        """Whether node n's outputs are computed from a tensor of xs / zs (iteratively: the
        graph can be deep)."""
        stack = [n]
        while stack:
            m = stack[-1]
            if m in depends:
                stack.pop()
                continue
            pending = [
                v.source[1]
                for _, v in feeds_of.get(m, ())
                if (v.source[1], v.source[2]) not in given and v.source[1] not in depends
            ]
            if pending and m not in entries:
                stack.extend(pending)
                continue
            depends[m] = m not in entries and any(
                (v.source[1], v.source[2]) in given or depends[v.source[1]]
                for _, v in feeds_of.get(m, ())
            )
            stack.pop()
        return depends[n]

    inside = [] if y_src in given else sorted(n for n in _ancestors(y_src[0], feeds_of, given)
                                              if reaches(n))  # fmt: skip
    # The subgraph's inputs: the tensors of xs and zs (by input position), then the other
    # tensors its nodes read, each entering through an identity node, as in the model's graph.
    leaves: list[tuple[int, int]] = []
    for n in inside:
        for _, v in sorted(feeds_of.get(n, ()), key=lambda kv: kv[0]):
            src = (v.source[1], v.source[2])
            if src[0] not in inside and src not in leaves:
                leaves.append(src)
    if (y_src in given or y_src[0] not in inside) and y_src not in leaves:
        leaves.append(y_src)  # y is itself a leaf (a tensor of xs / zs, or read from none)
    leaves.sort(key=lambda s: (s not in given, given.get(s, 0)))
    out_desc = {s: builder.nodes[s[0]].edge_slots("output")[s[1]][1] for s in leaves}
    nodes, index = [], {}
    input_edges, intermediate = [], []
    for i, s in enumerate(leaves):
        desc = out_desc[s]
        index[("leaf", s)] = len(nodes)
        nodes.append(identity(packed(desc.data_type, desc.sizes)))
        input_edges.append(InputGraphEdge(i, len(nodes) - 1, 0))
    for n in inside:
        index[("node", n)] = len(nodes)
        nodes.append(builder.nodes[n])
    for n in inside:
        for k, v in feeds_of.get(n, ()):
            src = (v.source[1], v.source[2])
            if src[0] in inside:
                intermediate.append(IntermediateGraphEdge(index[("node", src[0])], src[1],
                                                          index[("node", n)], k))  # fmt: skip
            else:
                intermediate.append(IntermediateGraphEdge(index[("leaf", src)], 0,
                                                          index[("node", n)], k))  # fmt: skip
    if y_src[0] in inside:
        out = OutputGraphEdge(index[("node", y_src[0])], y_src[1], 0)
    else:
        out = OutputGraphEdge(index[("leaf", y_src)], 0, 0)
    sub = GraphDesc(len(leaves), 1, tuple(nodes), tuple(input_edges), (out,),
                    tuple(intermediate))  # fmt: skip
    graph = _compile(sub)

    # The JAX node's inputs: the node's own inputs for the leaves that are tensors of xs / zs,
    # the DML graph's tensors for the others.
    operands, shapes = [], []
    for s in leaves:
        desc = out_desc[s]
        shapes.append(desc.sizes)
        if s in given:
            operands.append(inputs[given[s]])
        else:
            operands.append(Value(tuple(desc.sizes), desc.data_type, ("node", s[0], s[1])))
    # Each x's leaf (None: y does not read it); two names of one tensor share one leaf.
    wrt = [leaves.index(s) if s in leaves else None for s in _sources_of(builder, values, xs)]
    diff = sorted({k for k in wrt if k is not None})
    x_shapes = [values[name].shape for name in xs]

    def fn(*arrays):
        arrays = [a.reshape(shape) for a, shape in zip(arrays, shapes)]

        def f(*ws):
            full = list(arrays)
            for k, w in zip(diff, ws):
                full[k] = w
            return graph.fn(*full)

        y_value, vjp = jax.vjp(f, *(arrays[k] for k in diff))
        grads = dict(zip(diff, vjp(jnp.ones_like(y_value))))
        return tuple(jnp.zeros(shape) if k is None else grads[k] for k, shape in zip(wrt, x_shapes))

    specs = [(values[name].shape, values[name].data_type) for name in xs]
    results = ctx.jax("Gradient", fn, operands, specs)
    return [r if ctx.wants(k) else None for k, r in enumerate(results[: len(node.output)])]


def _sources_of(builder, values, names) -> list[tuple[int, int] | None]:
    return [_source(builder, values[name]) for name in names]


def _ancestors(start: int, feeds_of, given) -> set[int]:
    """Node ``start`` and every node it reads from, up to the outputs in ``given``."""
    seen, stack = set(), [start]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        for _, v in feeds_of.get(n, ()):
            if (v.source[1], v.source[2]) not in given:
                stack.append(v.source[1])
    return seen


def _compile(graph: GraphDesc):
    """The subgraph compiled as the model's graph is (``program.compile_imported``): edges may
    reinterpret, float64 is allowed; the lax lowerings only (JAX differentiates them)."""
    from ...graph import compile_graph
    from ...support import beyond_tables

    wide = any(d is not None and d.data_type.is_64bit
               for n in graph.nodes for _, d in n.input_slots() + n.output_slots())  # fmt: skip
    with (
        jax.enable_x64(True) if wide else contextlib.nullcontext(),
        beyond_tables({DataType.FLOAT64}),
    ):
        return compile_graph(graph, reinterpret_edges=True, fast_paths=False)
