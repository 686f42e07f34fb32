"""Data movement: views (Reshape, Flatten, Squeeze, Unsqueeze, Identity: no node), Transpose
(an identity reading permuted strides), JOIN, SPLIT and SLICE1."""

from __future__ import annotations

import math

from ..importer import packed, permuted
from . import converter
from ._common import axis_of, op, view


@converter("Reshape")
def _reshape(ctx, node, inputs):
    x, shape_in = inputs
    target = [int(d) for d in ctx.const(shape_in, "shape").reshape(-1)]
    allow_zero = int(ctx.attr("allowzero", 0))
    if any(d < -1 for d in target):
        raise ctx.fail(f"shape {target} has a dimension below -1")
    if allow_zero and 0 in target and -1 in target:
        raise ctx.fail(f"shape {target} has both 0 and -1 with allowzero")
    out = [x.shape[i] if d == 0 and not allow_zero and i < x.rank else d
           for i, d in enumerate(target)]  # fmt: skip
    if out.count(-1) > 1:
        raise ctx.fail(f"shape {target} has more than one -1")
    if -1 in out:
        known = math.prod(d for d in out if d != -1)
        if known == 0 or math.prod(x.shape) % known:
            raise ctx.fail(f"cannot reshape {list(x.shape)} to {target}")
        out[out.index(-1)] = math.prod(x.shape) // known
    if math.prod(out) != math.prod(x.shape):
        raise ctx.fail(f"cannot reshape {list(x.shape)} to {target}")
    return [view(x, out)]


@converter("Flatten")
def _flatten(ctx, node, inputs):
    (x,) = inputs
    axis = int(ctx.attr("axis", 1))
    if not -x.rank <= axis <= x.rank:
        raise ctx.fail(f"axis {axis} is out of range for rank {x.rank}")
    axis = axis + x.rank if axis < 0 else axis
    return [view(x, (math.prod(x.shape[:axis]), math.prod(x.shape[axis:])))]


def _axes_input(ctx, inputs, name="axes"):
    if len(inputs) > 1 and inputs[1] is not None:
        return [int(a) for a in ctx.const(inputs[1], name).reshape(-1)]
    axes = ctx.attr(name)
    return None if axes is None else [int(a) for a in axes]


@converter("Squeeze")
def _squeeze(ctx, node, inputs):
    x = inputs[0]
    axes = _axes_input(ctx, inputs)
    if axes is None:
        return [view(x, [d for d in x.shape if d != 1])]
    axes = {axis_of(ctx, a, x.rank, "axes") for a in axes}
    if any(x.shape[a] != 1 for a in axes):
        raise ctx.fail(f"axes {sorted(axes)} of shape {list(x.shape)} are not all 1")
    return [view(x, [d for i, d in enumerate(x.shape) if i not in axes])]


@converter("Unsqueeze")
def _unsqueeze(ctx, node, inputs):
    x = inputs[0]
    axes = _axes_input(ctx, inputs)
    if axes is None:
        raise ctx.fail("axes are required")
    rank = x.rank + len(axes)
    norm = [axis_of(ctx, a, rank, "axes") for a in axes]
    if len(set(norm)) != len(norm):
        raise ctx.fail(f"axes {axes} repeat an axis")
    it = iter(x.shape)
    return [view(x, [1 if i in norm else next(it) for i in range(rank)])]


@converter("Identity")
def _identity(ctx, node, inputs):
    return [inputs[0]]


@converter("Transpose")
def _transpose(ctx, node, inputs):
    (x,) = inputs
    perm = [int(p) for p in ctx.attr("perm", list(reversed(range(x.rank))))]
    if sorted(perm) != list(range(x.rank)):
        raise ctx.fail(f"perm {perm} is not a permutation of {x.rank} axes")
    shape = tuple(x.shape[p] for p in perm)
    if perm == sorted(perm):
        return [x]
    desc = op("ELEMENT_WISE_IDENTITY")(permuted(x, perm), packed(x.data_type, shape))
    return [ctx.out(ctx.node(desc, [x]), shape, is_bool=x.is_bool)]


@converter("Concat")
def _concat(ctx, node, inputs):
    present = [v for v in inputs if v is not None]
    axis = axis_of(ctx, ctx.attr("axis"), present[0].rank)
    for v in present:
        if v.rank != present[0].rank or any(
            d != e for i, (d, e) in enumerate(zip(v.shape, present[0].shape)) if i != axis
        ):
            raise ctx.fail(f"shapes {[list(v.shape) for v in present]} do not join on {axis}")
    xs = [v for v in present if 0 not in v.shape]
    shape = list(present[0].shape)
    shape[axis] = sum(v.shape[axis] for v in present)
    if len(xs) == 1:
        return [xs[0]]
    t = xs[0].data_type
    desc = op("JOIN")([packed(t, v.shape) for v in xs], packed(t, shape), axis=axis)
    return [ctx.out(ctx.node(desc, xs), shape, is_bool=xs[0].is_bool)]


@converter("Split")
def _split(ctx, node, inputs):
    x = inputs[0]
    axis = axis_of(ctx, ctx.attr("axis", 0), x.rank)
    count = len(node.output)
    sizes = None
    if len(inputs) > 1 and inputs[1] is not None:
        sizes = [int(s) for s in ctx.const(inputs[1], "split").reshape(-1)]
    elif ctx.attr("split") is not None:
        sizes = [int(s) for s in ctx.attr("split")]
    if sizes is None:
        n = x.shape[axis]
        pieces = int(ctx.attr("num_outputs", count))
        piece = -(-n // pieces)
        sizes = [piece] * (pieces - 1) + [n - piece * (pieces - 1)]
    if sum(sizes) != x.shape[axis] or len(sizes) != count or min(sizes) < 1:
        raise ctx.fail(f"split sizes {sizes} do not cut dimension {axis} ({x.shape[axis]})")
    shapes = [x.shape[:axis] + (s,) + x.shape[axis + 1 :] for s in sizes]
    if count == 1:
        return [x]
    t = x.data_type
    desc = op("SPLIT")(packed(t, x.shape), [packed(t, s) for s in shapes], axis=axis)
    n = ctx.node(desc, [x])
    return [ctx.builder.output(n, k, s, is_bool=x.is_bool) for k, s in enumerate(shapes)]


@converter("Slice")
def _slice(ctx, node, inputs):
    x = inputs[0]
    if ctx.opset < 10:
        starts, ends = ctx.attr("starts"), ctx.attr("ends")
        axes, steps = ctx.attr("axes"), None
    else:
        get = [None if i >= len(inputs) else inputs[i] for i in range(1, 5)]
        starts, ends, axes, steps = (
            None if v is None else [int(a) for a in ctx.const(v, name).reshape(-1)]
            for v, name in zip(get, ("starts", "ends", "axes", "steps"))
        )
    axes = list(range(len(starts))) if axes is None else [int(a) for a in axes]
    steps = [1] * len(starts) if steps is None else steps
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ctx.fail("starts, ends, axes and steps must have one value per sliced axis")
    offsets, windows, strides = [0] * x.rank, list(x.shape), [1] * x.rank
    sizes = list(x.shape)
    seen = set()
    for a, s, e, st in zip(axes, starts, ends, steps):
        a = axis_of(ctx, a, x.rank, "axes")
        if a in seen:
            raise ctx.fail(f"axis {a} is sliced twice")
        seen.add(a)
        if st == 0:
            raise ctx.fail(f"the step of axis {a} is 0")
        idx = range(x.shape[a])[slice(int(s), int(e), int(st))]
        if len(idx) == 0:
            raise ctx.fail(f"the slice of axis {a} is empty")
        # The window holds every element read; a negative stride walks it from its end.
        offsets[a] = min(idx[0], idx[-1])
        windows[a] = abs(idx[-1] - idx[0]) + 1
        strides[a], sizes[a] = int(st), len(idx)
    if sizes == list(x.shape) and all(s == 1 for s in strides):
        return [x]
    t = x.data_type
    desc = op("SLICE1")(
        packed(t, x.shape),
        packed(t, sizes),
        input_window_offsets=offsets,
        input_window_sizes=windows,
        input_window_strides=strides,
    )
    return [ctx.out(ctx.node(desc, [x]), sizes, is_bool=x.is_bool)]
