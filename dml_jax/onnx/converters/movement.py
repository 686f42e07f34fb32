"""Data movement, as ONNX Runtime's DirectML provider maps it: the views (Reshape, Flatten,
Squeeze, Unsqueeze, Identity: no node), Transpose and Expand (an ELEMENT_WISE_IDENTITY reading
permuted or stride-0 strides), Concat (JOIN), Split (SPLIT), Slice (SLICE1), Pad (PADDING1),
Tile (TILE), DepthToSpace / SpaceToDepth, ReverseSequence (REVERSE_SUBSEQUENCES) and Col2Im
(FOLD).

Shapes, axes, pads, repeats and sizes are inputs DirectML needs as constants (``ctx.const``).
DML tensors have no empty sizes, so a result with a zero-sized dimension is a value known at
import (an empty constant), never a node."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ...enums import DataType
from ...tensor import TensorDesc
from ..importer import Context, Value, broadcast, packed, permuted
from . import converter
from ._common import axis_of, broadcast_shape, cast_value, const_ints, op, view

# --- helpers shared by this group's modules ---------------------------------------------------


def onnx_dtype(x: Value) -> np.dtype:
    """The NumPy dtype of ``x`` as ONNX has it (bool for BOOL; a constant keeps its own)."""
    if x.const is not None:
        return x.const.dtype
    return np.dtype(np.bool_) if x.is_bool else x.data_type.numpy_dtype


def empty(ctx: Context, x: Value, shape: Sequence[int]) -> Value:
    """A result with a zero-sized dimension: known at import (DML tensors are never empty)."""
    return ctx.constant(np.zeros(tuple(int(d) for d in shape), onnx_dtype(x)))


def typed_scalar(t: DataType, value) -> int | float:
    """``value`` as a number of the graph type ``t`` (a DML_SCALAR_UNION member)."""
    value = np.asarray(value).reshape(-1)[0].item() if np.ndim(value) else value
    if t.is_float:
        return float(value)
    return int(value)


# --- views ------------------------------------------------------------------------------------


@converter("Reshape")
def _reshape(ctx, node, inputs):
    x, shape_in = inputs
    target = const_ints(ctx, shape_in, "shape")
    allow_zero = int(ctx.attr("allowzero", 0))
    if any(d < -1 for d in target):
        raise ctx.fail(f"shape {target} has a dimension below -1")
    if allow_zero and 0 in target and -1 in target:
        raise ctx.fail(f"shape {target} has both 0 and -1 with allowzero")
    # Without allowzero a 0 copies the input's dimension at that position.
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
    """Squeeze / Unsqueeze axes: an attribute before opset 13, an input from 13."""
    if len(inputs) > 1 and inputs[1] is not None:
        return const_ints(ctx, inputs[1], name)
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


# --- strided copies ---------------------------------------------------------------------------


@converter("Transpose")
def _transpose(ctx, node, inputs):
    (x,) = inputs
    perm = [int(p) for p in ctx.attr("perm", list(reversed(range(x.rank))))]
    if sorted(perm) != list(range(x.rank)):
        raise ctx.fail(f"perm {perm} is not a permutation of {x.rank} axes")
    shape = tuple(x.shape[p] for p in perm)
    if [p for p in perm if x.shape[p] != 1] == sorted(p for p in perm if x.shape[p] != 1):
        return [view(x, shape)]  # only size-1 axes move: the same data
    desc = op("ELEMENT_WISE_IDENTITY")(permuted(x, perm), packed(x.data_type, shape))
    return [ctx.out(ctx.node(desc, [x]), shape, is_bool=x.is_bool)]


@converter("Expand")
def _expand(ctx, node, inputs):
    x, shape_in = inputs
    shape = broadcast_shape(ctx, x.shape, const_ints(ctx, shape_in, "shape"))
    if 0 in shape:
        return [empty(ctx, x, shape)]
    if shape == x.shape:
        return [x]
    # An identity that reads x through stride-0 strides along the repeated dimensions.
    desc = op("ELEMENT_WISE_IDENTITY")(broadcast(x, shape), packed(x.data_type, shape))
    return [ctx.out(ctx.node(desc, [x]), shape, is_bool=x.is_bool)]


# --- join, split, slice -----------------------------------------------------------------------


@converter("Concat")
def _concat(ctx, node, inputs):
    present = [v for v in inputs if v is not None]
    if any(v.rank == 0 for v in present):
        raise ctx.fail("the inputs must have at least one dimension (a scalar has no axis to join)")
    axis = axis_of(ctx, ctx.attr("axis"), present[0].rank)
    for v in present:
        if v.rank != present[0].rank or any(
            d != e for i, (d, e) in enumerate(zip(v.shape, present[0].shape)) if i != axis
        ):
            raise ctx.fail(f"shapes {[list(v.shape) for v in present]} do not join on {axis}")
    shape = list(present[0].shape)
    shape[axis] = sum(v.shape[axis] for v in present)
    xs = [v for v in present if 0 not in v.shape]  # empty inputs add nothing
    if not xs or 0 in shape:
        return [empty(ctx, present[0], shape)]
    if len(xs) == 1:
        return [xs[0]]
    t = xs[0].data_type
    desc = op("JOIN")([packed(t, v.shape) for v in xs], packed(t, shape), axis=axis)
    return [ctx.out(ctx.node(desc, xs), shape, is_bool=xs[0].is_bool)]


@converter("Split")
def _split(ctx, node, inputs):
    x = inputs[0]
    if x.rank == 0:
        raise ctx.fail("the input must have at least one dimension (a scalar has no axis to split)")
    axis = axis_of(ctx, ctx.attr("axis", 0), x.rank)
    count = len(node.output)
    sizes = None
    if len(inputs) > 1 and inputs[1] is not None:  # opset 13: an input
        sizes = const_ints(ctx, inputs[1], "split")
    elif ctx.attr("split") is not None:  # before 13: an attribute
        sizes = [int(s) for s in ctx.attr("split")]
    n = x.shape[axis]
    if sizes is None:
        # Equal parts; from opset 18 ``num_outputs`` parts of ceil(n / parts), the last smaller.
        pieces = int(ctx.attr("num_outputs", count))
        piece = -(-n // pieces)
        sizes = [piece] * (pieces - 1) + [n - piece * (pieces - 1)]
    if sum(sizes) != n or len(sizes) != count or min(sizes) < 0:
        raise ctx.fail(f"split sizes {sizes} do not cut dimension {axis} ({n})")
    shapes = [x.shape[:axis] + (s,) + x.shape[axis + 1 :] for s in sizes]
    outputs: list[Value | None] = [empty(ctx, x, s) if 0 in s else None for s in shapes]
    cut = [k for k, s in enumerate(shapes) if 0 not in s]
    if len(cut) == 1:
        outputs[cut[0]] = x
    elif cut:
        t = x.data_type
        desc = op("SPLIT")(packed(t, x.shape), [packed(t, shapes[k]) for k in cut], axis=axis)
        n_ = ctx.node(desc, [x])
        for j, k in enumerate(cut):
            outputs[k] = ctx.builder.output(n_, j, shapes[k], is_bool=x.is_bool)
    return outputs


@converter("Slice")
def _slice(ctx, node, inputs):
    x = inputs[0]
    if ctx.opset < 10:  # attributes before opset 10
        starts, ends = ctx.attr("starts"), ctx.attr("ends")
        axes, steps = ctx.attr("axes"), None
    else:
        get = [None if i >= len(inputs) else inputs[i] for i in range(1, 5)]
        starts, ends, axes, steps = (
            const_ints(ctx, v, name) for v, name in zip(get, ("starts", "ends", "axes", "steps"))
        )
    starts, ends = [int(s) for s in starts], [int(e) for e in ends]
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
        # Python's slices clamp exactly as ONNX says: a negative start or end counts from the
        # end, then both are clamped to [0, n] (step > 0) or to [-1, n - 1] (step < 0); ends
        # like INT64_MAX mean "to the end".
        idx = range(x.shape[a])[slice(s, e, st)]
        sizes[a] = len(idx)
        if not idx:
            continue
        # The window holds every element read; a negative stride walks it from its end.
        offsets[a] = min(idx[0], idx[-1])
        windows[a] = abs(idx[-1] - idx[0]) + 1
        strides[a] = st
    if 0 in sizes:
        return [empty(ctx, x, sizes)]
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


# --- padding and tiling -----------------------------------------------------------------------

PAD_MODES = {"constant": "CONSTANT", "edge": "EDGE", "reflect": "REFLECTION", "wrap": "WRAP"}


@converter("Pad")
def _pad(ctx, node, inputs):
    x = inputs[0]
    mode = ctx.attr("mode", "constant")
    if mode not in PAD_MODES:
        raise ctx.fail(f"mode '{mode}' is not one of {sorted(PAD_MODES)}")
    if ctx.opset < 11:  # Pad-2: pads and value are attributes
        pads = [int(p) for p in ctx.attr("pads")]
        value, axes = ctx.attr("value", 0.0), None
    else:
        pads = const_ints(ctx, inputs[1], "pads")
        value = 0
        if len(inputs) > 2 and inputs[2] is not None:
            array = np.asarray(ctx.const(inputs[2], "constant_value")).reshape(-1)
            value = array[0].item() if array.size else 0
        axes = const_ints(ctx, inputs[3] if len(inputs) > 3 else None, "axes")
    axes = list(range(x.rank)) if axes is None else [axis_of(ctx, a, x.rank, "axes") for a in axes]
    if len(pads) != 2 * len(axes):
        raise ctx.fail(f"pads {pads} must hold two values per padded axis ({len(axes)})")
    if len(set(axes)) != len(axes):
        raise ctx.fail(f"axes {axes} repeat an axis")
    start, end = [0] * x.rank, [0] * x.rank
    for i, a in enumerate(axes):
        start[a], end[a] = pads[i], pads[len(axes) + i]
    shape = [n + a + b for n, a, b in zip(x.shape, start, end)]
    if any(d < 0 for d in shape):
        raise ctx.fail(f"pads {pads} remove more than the {list(x.shape)} input holds")
    if 0 in shape:
        return [empty(ctx, x, shape)]
    # Negative pads crop (PADDING1's paddings are unsigned): a SLICE1 first, then the padding
    # of what is left, as ONNX Runtime crops before it pads.
    kept = [n + min(a, 0) + min(b, 0) for n, a, b in zip(x.shape, start, end)]
    if any(k <= 0 for k in kept):
        raise ctx.fail(f"pads {pads} crop an axis of {list(x.shape)} away before padding it")
    t = x.data_type
    if kept != list(x.shape):
        desc = op("SLICE1")(
            packed(t, x.shape),
            packed(t, kept),
            input_window_offsets=[-min(a, 0) for a in start],
            input_window_sizes=kept,
            input_window_strides=[1] * x.rank,
        )
        x = ctx.out(ctx.node(desc, [x]), kept, is_bool=x.is_bool)
    start, end = [max(a, 0) for a in start], [max(b, 0) for b in end]
    if not any(start) and not any(end):
        return [x]
    desc = op("PADDING1")(
        packed(t, x.shape),
        packed(t, shape),
        padding_mode=PAD_MODES[mode],
        padding_value_data_type=t,
        padding_value=typed_scalar(t, value),
        start_padding=start,
        end_padding=end,
    )
    return [ctx.out(ctx.node(desc, [x]), shape, is_bool=x.is_bool)]


@converter("Tile")
def _tile(ctx, node, inputs):
    x, repeats_in = inputs
    repeats = const_ints(ctx, repeats_in, "repeats")
    if len(repeats) != x.rank or any(r < 0 for r in repeats):
        raise ctx.fail(f"repeats {repeats} must hold one count >= 0 per dimension ({x.rank})")
    shape = [n * r for n, r in zip(x.shape, repeats)]
    if 0 in shape:
        return [empty(ctx, x, shape)]
    if shape == list(x.shape):
        return [x]
    t = x.data_type
    desc = op("TILE")(packed(t, x.shape), packed(t, shape), repeats=repeats)
    return [ctx.out(ctx.node(desc, [x]), shape, is_bool=x.is_bool)]


# --- depth and space --------------------------------------------------------------------------


def _nchw(ctx, x: Value) -> tuple[int, int, int, int]:
    if x.rank != 4:
        raise ctx.fail(f"input must be 4-D (N, C, H, W), got shape {list(x.shape)}")
    return x.shape


_ORDERS = {"DCR": "DEPTH_COLUMN_ROW", "CRD": "COLUMN_ROW_DEPTH"}


def _order(ctx) -> str:
    """DepthToSpace's mode (from opset 11) and SpaceToDepth's (newer opsets): DCR by default."""
    mode = ctx.attr("mode", "DCR")
    if mode not in _ORDERS:
        raise ctx.fail(f"mode '{mode}' is not DCR or CRD")
    return _ORDERS[mode]


@converter("DepthToSpace")
def _depth_to_space(ctx, node, inputs):
    (x,) = inputs
    n, c, h, w = _nchw(ctx, x)
    b = int(ctx.attr("blocksize"))
    if b < 1 or c % (b * b):
        raise ctx.fail(f"channels ({c}) must be divisible by blocksize² ({b}²)")
    shape = (n, c // (b * b), h * b, w * b)
    t = x.data_type
    desc = op("DEPTH_TO_SPACE1")(
        packed(t, x.shape), packed(t, shape), block_size=b, order=_order(ctx)
    )
    return [ctx.out(ctx.node(desc, [x]), shape, is_bool=x.is_bool)]


@converter("SpaceToDepth")
def _space_to_depth(ctx, node, inputs):
    (x,) = inputs
    n, c, h, w = _nchw(ctx, x)
    b = int(ctx.attr("blocksize"))
    if b < 1 or h % b or w % b:
        raise ctx.fail(f"height and width ({h}, {w}) must be divisible by blocksize ({b})")
    shape = (n, c * b * b, h // b, w // b)
    t = x.data_type
    desc = op("SPACE_TO_DEPTH1")(
        packed(t, x.shape), packed(t, shape), block_size=b, order=_order(ctx)
    )
    return [ctx.out(ctx.node(desc, [x]), shape, is_bool=x.is_bool)]


# --- sequences and columns --------------------------------------------------------------------


@converter("ReverseSequence")
def _reverse_sequence(ctx, node, inputs):
    x, lengths = inputs
    batch = axis_of(ctx, ctx.attr("batch_axis", 1), x.rank, "batch_axis")
    time = axis_of(ctx, ctx.attr("time_axis", 0), x.rank, "time_axis")
    if x.rank < 2 or {batch, time} != {0, 1}:
        raise ctx.fail("batch_axis and time_axis must be 0 and 1, in either order")
    if lengths.shape != (x.shape[batch],):
        raise ctx.fail(
            f"sequence_lens must have shape [{x.shape[batch]}], got {list(lengths.shape)}"
        )
    # REVERSE_SUBSEQUENCES reads UINT32 lengths of x's sizes with 1 along the time axis: the
    # [batch] lengths, repeated through stride 0 along every other dimension.
    lengths = cast_value(ctx, lengths, DataType.UINT32)
    sizes = tuple(1 if i == time else d for i, d in enumerate(x.shape))
    strides = tuple(1 if i == batch else 0 for i in range(x.rank))
    t = x.data_type
    desc = op("REVERSE_SUBSEQUENCES")(
        packed(t, x.shape),
        TensorDesc(DataType.UINT32, sizes, strides=strides),
        packed(t, x.shape),
        axis=time,
    )
    return [ctx.out(ctx.node(desc, [x, lengths]), x.shape, is_bool=x.is_bool)]


@converter("Col2Im")
def _col2im(ctx, node, inputs):
    x, image_in, block_in = inputs
    image = const_ints(ctx, image_in, "image_shape")
    block = const_ints(ctx, block_in, "block_shape")
    nd = len(block)
    if len(image) != nd or x.rank != 3:
        raise ctx.fail(
            f"input {list(x.shape)} must be (N, C * prod(block_shape), L) with image_shape "
            f"{image} and block_shape {block} of one length"
        )
    window = math.prod(block)
    if window < 1 or x.shape[1] % window:
        raise ctx.fail(f"input dimension 1 ({x.shape[1]}) is not a multiple of {window}")
    pads = [int(p) for p in ctx.attr("pads", [0] * 2 * nd)]
    shape = (x.shape[0], x.shape[1] // window, *image)
    t = x.data_type
    desc = op("FOLD")(
        packed(t, x.shape),
        packed(t, shape),
        window_sizes=block,
        strides=[int(s) for s in ctx.attr("strides", [1] * nd)],
        dilations=[int(d) for d in ctx.attr("dilations", [1] * nd)],
        start_padding=pads[:nd],
        end_padding=pads[nd:],
    )
    return [ctx.out(ctx.node(desc, [x]), shape)]


__all__ = ["const_ints", "empty", "onnx_dtype", "typed_scalar"]
