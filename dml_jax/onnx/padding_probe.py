"""Whether a decoder step computes the same from a past padded to a bucket as from the past
alone: the index arithmetic a step derives from its shapes and its token, mask and position
inputs, evaluated at both sizes on the host (``padding_moves``).

A bucketed past (``buckets``) holds the real positions first, then zeros up to the bucket's
length, the attention mask zero over them, and the new tokens after the bucket. The mask hides
the padded keys; what it cannot hide is arithmetic on the past's size: a step that numbers the
new token from the past's size and compares key positions with it keeps exactly the keys it
should under a causal mask (every real key lies before the new token either way), but under a
sliding window (Mistral's, Gemma's local layers: a key is kept while it lies fewer than W
positions before the query) the padded size moves the window over the real keys. Structure
alone does not show which: ``find_roles`` sees a Concat of the past and the new keys in both.

So the step is evaluated twice as far as its index inputs reach, on one row with one real past
position: at the exact size (past 1) and padded to ``length`` (the largest bucket it will run
at). Every node whose inputs are known is evaluated (the ``onnx`` package's reference
implementation, as import-time folding does: ``fold.evaluate``); the past's values and the
weights are unknown, but their shapes are (ONNX shape inference at the probe's input shapes),
so a Shape node of them is known; an If on a known condition is the branch it takes (Optimum's
merged decoder: the step with its past lies inside one). The known values that unknown nodes
read (the mask's additive bias, the rotary angles, the positions) are compared between the two,
at the real positions of each axis that the padding lengthened. Any difference, or a value
that is known in one and not the other, means the padding moves something. A step whose probe
cannot be evaluated is treated as moving (exact lengths: slower, never wrong).

With the padding in front of the real positions instead (the past right-aligned in its bucket,
as a left-padded prompt is: ``front``) the new token and the real keys keep their distances, so
a window stays where it was; ``padded_side`` says which side a length may take: the end where
nothing moves there (the cache's own layout, padded in place), else the front, else neither.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ValidationError
from .fold import NONDETERMINISTIC, evaluate
from .importer import const_value
from .protos import opsets_of

# floating-point initializers of at most this many elements take part with their values
# (rotary frequencies, norms' scales); larger ones (weights) are unknown values of known shape.
# Integer and boolean ones (a causal mask's table, GPT-2's of old) take part up to
# EVALUATE_MAX_ELEMENTS.
KNOWN_MAX_ELEMENTS = 1 << 16
_FLOATS = frozenset({1, 10, 11, 16})  # FLOAT, FLOAT16, DOUBLE, BFLOAT16
# known values over this many elements are not evaluated further (unknown from there)
EVALUATE_MAX_ELEMENTS = 1 << 22
_DTYPES = {1: np.float32, 6: np.int32, 7: np.int64, 9: np.bool_, 10: np.float16}
# the inputs that only give a result's shape (a Reshape's target shape, an Expand's or a Tile's,
# a ConstantOfShape's): a past padded to another size rightly gives them other values, and what
# they shape is compared where it is known
SHAPE_SLOTS = {"Reshape": 1, "Expand": 1, "Tile": 1, "ConstantOfShape": 0}


def padding_moves(session: Any, roles: Any, length: int, front: bool = False) -> str | None:
    """Why ``roles``' step (``find_roles``) would compute otherwise from a past padded to
    ``length`` positions than from the past alone, or None; found once per session, length
    and side (the module's docstring). ``front``: the padding before the real positions (the
    past right-aligned in its bucket, as a left-padded prompt is), where a window counts the
    same distances as at the exact size."""
    return _found(session, roles, "past", int(length), bool(front))


def prompt_padding_moves(session: Any, roles: Any, length: int) -> str | None:
    """Why a prompt left-padded to ``length`` tokens (mask zeros over the padding, no past)
    would compute otherwise at its real token than the token alone, or None: for a step
    without ``position_ids``, whether it numbers its tokens from the mask (BLOOM's ALiBi)
    rather than from the sizes (GPT-2's positions); found once per session and length."""
    return _found(session, roles, "prompt", int(length), False)


def _found(session: Any, roles: Any, kind: str, length: int, front: bool) -> str | None:
    found = session.__dict__.setdefault("_padding_moves", {})
    key = (kind, length, front)
    if key not in found:
        try:
            if kind == "past":
                found[key] = _moves(session.model, roles, length, front)
            else:
                found[key] = _prompt_moves(session.model, roles, length)
        except Exception as e:  # noqa: BLE001 (shape inference's own errors among them: the
            # probe only ever withholds buckets, so any failure of it is "moved", never raised)
            found[key] = (
                f"its index arithmetic could not be evaluated at a padded size "
                f"({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''})"
            )
    return found[key]


def padded_side(session: Any, roles: Any, length: int) -> str | None:
    """Where a past padded to ``length`` positions may hold its padding: "end" (after the real
    positions: the cache's own layout, padded in place), "front" (before them: the past
    right-aligned in its bucket, for a step whose sliding window the end would move), or None
    (neither: exact lengths)."""
    if padding_moves(session, roles, length) is None:
        return "end"
    return "front" if padding_moves(session, roles, length, front=True) is None else None


def _moves(model: Any, roles: Any, length: int, front: bool) -> str | None:
    """The past probe: one real past position and the new token, exact and padded."""
    real = length - 1 if front else 0

    def keep(m: int, n: int) -> list[int] | None:
        # an axis over the past (1 -> length) or over the past and the new token
        # (2 -> length + 1): its real positions are the first (the last past one with the
        # padding in front) and, with the new token, the last
        return {(1, length): [real], (2, length + 1): [real, n - 1]}.get((m, n))

    exact = _frontier(model, roles, 1, 1, [0, 1])
    padded = _frontier(model, roles, length, 1, [real, length])
    what = f"the exact past and one padded to {length} (the step computes from the past's size"
    return _difference(exact, padded, keep, what + ", as a sliding window does)")


def _prompt_moves(model: Any, roles: Any, length: int) -> str | None:
    """The prompt probe: one real token, alone and left-padded, no past."""
    exact = _frontier(model, roles, 0, 1, [0])
    padded = _frontier(model, roles, 0, length, [length - 1])
    what = f"one token and the same left-padded to {length} (the step numbers tokens by sizes)"
    return _difference(exact, padded, lambda m, n: [n - 1] if (m, n) == (1, length) else None, what)


def _difference(exact: dict, padded: dict, keep: Any, what: str) -> str | None:
    """Why the two frontiers differ at the real positions (``keep(m, n)``: the real indices of
    an axis of ``m`` elements exact and ``n`` padded, None where no such axis is known)."""
    if exact.keys() != padded.keys():
        name = min(exact.keys() ^ padded.keys())
        return f"'{name}' is known from the index inputs at one size and not at the other"
    for name in sorted(exact):
        a, b = exact[name], padded[name]
        if a.ndim != b.ndim:
            return f"'{name}' has rank {a.ndim} at the exact size, {b.ndim} padded"
        for axis, (m, n) in enumerate(zip(a.shape, b.shape)):
            if m == n:
                continue
            indices = keep(m, n)
            if indices is None:
                return f"'{name}' has {m} elements on axis {axis} at the exact size, {n} padded"
            b = np.take(b, indices, axis=axis)
        if a.dtype != b.dtype or not _same(a, b):
            return f"'{name}' differs at the real positions between {what}"
    return None


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal, floating-point values up to the rounding of products of other shapes (the
    reference's matrix products of one row and of many round apart, where small weights take
    part): a moved window or position differs by far more."""
    if a.dtype.kind != "f":
        return bool(np.array_equal(a, b))
    finite = np.isfinite(a) & np.isfinite(b)
    if not np.array_equal(np.where(finite, 0, a), np.where(finite, 0, b), equal_nan=True):
        return False  # the infinities (a mask's) and NaNs where they were
    scale = float(np.max(np.abs(a[finite]), initial=0.0))
    return bool(np.allclose(a[finite], b[finite], rtol=1e-5, atol=1e-6 * max(scale, 1.0)))


def _frontier(
    model: Any, roles: Any, past: int, seq: int, ones: list[int]
) -> dict[str, np.ndarray]:
    """The values known from the probe's inputs (one row, ``past`` past positions, ``seq``
    new tokens, the mask's ones at ``ones``) that nodes of unknown values read, by name."""
    import onnx
    from onnx import helper, numpy_helper

    graph = model.graph
    _, heads, _, size = roles.cache_shape
    heads, size = int(heads), int(size)  # (a symbolic one: a TypeError, the probe refused)
    feeds: dict[str, np.ndarray] = {}
    declared = {i.name: i for i in graph.input}

    def typed(name: str, array: np.ndarray) -> np.ndarray:
        elem = declared[name].type.tensor_type.elem_type
        return array.astype(_DTYPES[elem])

    feeds[roles.input_ids] = typed(roles.input_ids, np.ones((1, seq), np.int64))
    mask = np.zeros((1, past + seq), np.int64)
    mask[0, ones] = 1
    feeds[roles.attention_mask] = typed(roles.attention_mask, mask)
    if roles.position_ids is not None:  # the new tokens' own positions, as at the exact size
        feeds[roles.position_ids] = typed(roles.position_ids, np.full((1, seq), past and 1))
    if roles.use_cache_branch is not None:  # the branch with the past, where there is one
        feeds[roles.use_cache_branch] = np.full((), past > 0, np.bool_)
    cache = (1, heads, past, size)
    shapes = {n: cache for pair in roles.past for n in pair}

    # the model at the probe's shapes, its weights as inputs of known shape and no data
    inputs = []
    for i in graph.input:
        shape = feeds[i.name].shape if i.name in feeds else shapes.get(i.name)
        if shape is None:
            raise ValidationError(f"input '{i.name}' has no role in the probe")
        inputs.append(helper.make_tensor_value_info(i.name, i.type.tensor_type.elem_type, shape))
    small, known = [], {}
    for init in graph.initializer:
        if _takes_part(init):
            small.append(init)
            known[init.name] = numpy_helper.to_array(init)
        else:
            inputs.append(helper.make_tensor_value_info(init.name, init.data_type, init.dims))
    light = helper.make_graph(list(graph.node), "probe", inputs, list(graph.output), small)
    light_model = helper.make_model(light, opset_imports=list(model.opset_import))
    light_model.ir_version = model.ir_version
    inferred = onnx.shape_inference.infer_shapes(light_model, data_prop=True).graph
    static = _static_shapes(inferred)
    known.update(feeds)
    opsets = opsets_of(model)
    frontier: set[str] = set()
    _walk(list(graph.node), known, static, opsets, frontier)
    frontier.update(o.name for o in graph.output if o.name in known)
    frontier -= {init.name for init in small}  # the model's own constants: equal by definition
    return {name: known[name] for name in frontier}


def _takes_part(init: Any) -> bool:
    """Whether an initializer takes part in the probe with its values (``KNOWN_MAX_ELEMENTS``;
    one in an external file never does)."""
    count = int(np.prod(init.dims, dtype=np.int64))
    limit = KNOWN_MAX_ELEMENTS if init.data_type in _FLOATS else EVALUATE_MAX_ELEMENTS
    return count <= limit and init.data_location != 1  # 1: TensorProto.EXTERNAL


def _static_shapes(graph: Any) -> dict[str, tuple[int, ...]]:
    """The fully known shapes shape inference gave ``graph``'s values, its subgraphs' too."""
    static: dict[str, tuple[int, ...]] = {}
    for info in list(graph.value_info) + list(graph.input) + list(graph.output):
        dims = info.type.tensor_type.shape.dim
        if info.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in dims):
            static[info.name] = tuple(d.dim_value for d in dims)
    for node in graph.node:
        for a in node.attribute:
            for g in [a.g] if a.type == 5 else list(a.graphs) if a.type == 10 else []:
                static.update(_static_shapes(g))
    return static


def _walk(nodes: list, known: dict, static: dict, opsets: dict, frontier: set) -> None:
    """Evaluates the nodes whose inputs ``known`` holds, in order, into it; adds to
    ``frontier`` the known values the others read. An If whose condition is known is the
    branch it takes (Optimum's merged decoder: the step with its past inside one)."""
    from onnx import numpy_helper

    for node in nodes:
        names = [n for n in node.input if n]
        subgraph = any(a.type in (5, 10) for a in node.attribute)
        if node.op_type == "If" and names and names[0] in known:
            taken = "then_branch" if bool(np.asarray(known[names[0]]).all()) else "else_branch"
            branch = next(a.g for a in node.attribute if a.name == taken)
            for init in branch.initializer:
                if _takes_part(init):
                    known[init.name] = numpy_helper.to_array(init)
            _walk(list(branch.node), known, static, opsets, frontier)
            for name, out in zip(node.output, branch.output):
                if name and out.name in known:
                    known[name] = known[out.name]
            continue
        if node.op_type in ("Shape", "Size") and names and not subgraph:
            shape = known[names[0]].shape if names[0] in known else static.get(names[0])
            if shape is not None:
                array = np.broadcast_to(np.int8(0), shape)  # its shape is all the node reads
                out = evaluate(node, node.domain, opsets.get(node.domain, 1),
                               [const_value(array)], node.op_type)  # fmt: skip
                known[node.output[0]] = np.asarray(out[0].known)
                continue
        ready = (
            not subgraph
            and node.op_type not in NONDETERMINISTIC
            and node.domain in ("", "ai.onnx")
            and all(n in known for n in names)
            and all(known[n].size <= EVALUATE_MAX_ELEMENTS for n in names)
        )
        if ready:
            values = [None if not n else const_value(known[n]) for n in node.input]
            try:
                outs = evaluate(node, node.domain, opsets.get("", 1), values, node.op_type)
            except ValidationError:  # the reference cannot evaluate it: its outputs unknown
                outs = None
            if outs is not None:
                for name, v in zip(node.output, outs):
                    if name and v is not None:
                        known[name] = np.asarray(v.known)
                continue
        shaping = SHAPE_SLOTS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        reads = [n for k, n in enumerate(node.input) if n and k != shaping]
        frontier.update(n for n in reads + _outer_names(node) if n in known)


def _outer_names(node: Any) -> list[str]:
    """The names a node's subgraphs read from outside them."""
    out = []
    for a in node.attribute:
        for g in [a.g] if a.type == 5 else list(a.graphs) if a.type == 10 else []:
            inner = {o for n in g.node for o in n.output} | {i.name for i in g.input}
            inner |= {i.name for i in g.initializer}
            for n in g.node:
                out += [x for x in n.input if x and x not in inner]
                out += [x for x in _outer_names(n) if x not in inner]
    return out
