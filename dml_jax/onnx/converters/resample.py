"""Resize and Upsample: DirectML's RESAMPLE2 (RESAMPLE3 when antialiasing), as ONNX Runtime's
DirectML provider maps them (its ``DmlOperatorResize``); cubic Resize, which no DirectML
operator interpolates, as a JAX node (GridSample and DeformConv, which sample at computed
positions, are ``sampling``'s).

ONNX maps each output coordinate ``o`` of an axis back to an input coordinate ``x = f(o)``;
DirectML's resampling operators compute ``x = (o - OutputPixelOffset) / Scale -
InputPixelOffset``. Each coordinate_transformation_mode is one choice of the three per axis:

- half_pixel: (scale, 0.5, -0.5); asymmetric: (scale, 0, 0); tf_half_pixel_for_nn: (scale, 0,
  -0.5);
- half_pixel_symmetric: (scale, -(length_original - 1) / 2, (length_resized_int - 1) / 2), the
  centres of input and output aligned (ONNX's formula rearranged; its offsets are exact halves);
- pytorch_half_pixel: half_pixel, or x = 0 when the target length is 1;
- align_corners: Scale = (length_resized - 1) / (length_original - 1), offsets 0, or x = 0 when
  either length, or the output, is 1;
- tf_crop_and_resize: the ROI's start in the input offset and its extent in the scale (its centre
  when the target length is 1). Where x falls outside the input, ONNX writes
  ``extrapolation_value`` while DirectML clamps to the edge: an ELEMENT_WISE_IF with a constant
  mask (known at import) writes the value there.

``length_resized`` is the target length ``scale * length_original``, fractional when it comes
from a scale (as ONNX's reference computes it); "x = 0" is a scale too large to move x
(FLT_MAX, as ONNX Runtime does). nearest_mode becomes RoundingDirection with a half-element
shift of the input offset, as ONNX Runtime sets them: round_prefer_floor is ceil(x - 0.5)
(INCREASING, +0.5), round_prefer_ceil floor(x + 0.5) (DECREASING, -0.5), floor DECREASING, ceil
INCREASING.

Before Resize-11 (Upsample-7/9/10, Resize-10) there is no coordinate_transformation_mode: the
coordinates are asymmetric, and nearest takes the floor of x on an enlarged axis and its ceiling
on a shrunk one (ONNX Runtime's CPU kernels for these versions; its DirectML provider applies
Resize-11's defaults instead, which differ for linear). DirectML's one RoundingDirection per
operator then takes two RESAMPLE2 nodes when one node both enlarges and shrinks.

Scales, sizes and roi are inputs DirectML needs at import (``ctx.const``): the output shape
and the descriptor's scales come from them. ``axes`` (18 on) restricts them to some axes;
``keep_aspect_ratio_policy`` (18 on) turns sizes into one common scale. Under
tf_crop_and_resize, an output length from a scale is floor(length * ROI extent * scale), ONNX's
rule (its reference evaluator leaves the extent out). DirectML resamples
1 to 4 dimensions: a tensor of more is viewed with its runs of untouched axes merged.

mode 'cubic' (Resize-11 on), which DirectML's RESAMPLE operators do not interpolate (nor does ONNX
Runtime's DirectML provider), is a direct JAX lowering (``cubic``) on the same output shape and
scales: ONNX's coordinates, Keys' kernel with cubic_coeff_a, exclude_outside and antialias as
ONNX's reference computes them.

Not expressible on RESAMPLE, and rejected with the reason: exclude_outside with antialiased
linear shrinking, antialias where DirectML's Scale is not ONNX's scale (align_corners,
tf_crop_and_resize, one-element outputs: RESAMPLE3 widens its filter by its own Scale), and a
tf_crop_and_resize ROI whose end precedes its start (DirectML's scales are positive).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from ...enums import AxisDirection, InterpolationMode
from ...ops.resample import plan_axis
from ..importer import packed
from . import register
from ._common import DataType, axis_of, op, select_value, view

FLT_MAX = float(np.finfo(np.float32).max)
DECREASING, INCREASING = "DECREASING", "INCREASING"
# nearest_mode -> (RoundingDirection, shift added to InputPixelOffsets)
NEAREST_MODES = {
    "round_prefer_floor": (INCREASING, 0.5),
    "round_prefer_ceil": (DECREASING, -0.5),
    "floor": (DECREASING, 0.0),
    "ceil": (INCREASING, 0.0),
}
MODES = {"nearest": "NEAREST_NEIGHBOR", "linear": "LINEAR"}


class Axis(NamedTuple):
    """One axis of a resampling: DirectML's scale and offsets, and the rounding direction."""

    n_in: int
    n_out: int
    scale: float
    input_offset: float
    output_offset: float
    rounding: str = DECREASING


def _fixed(n_in: int, n_out: int, c: float, rounding: str) -> Axis:
    """Every output reads input coordinate ``c``: a scale too large to move it, and the output
    offset on the side that keeps the rounding of an integer ``c`` exact (the leftover
    ``(o - OutputPixelOffset) / FLT_MAX`` is never positive under ceil, never negative under
    floor)."""
    return Axis(
        n_in, n_out, FLT_MAX, -c, float(n_out - 1) if rounding == INCREASING else 0.0, rounding
    )


def _mode(ctx) -> str:
    mode = ctx.attr("mode", "nearest")
    if mode not in MODES:
        valid = "'nearest', 'linear'" + (
            ", 'cubic'" if ctx.onnx_node.op_type == "Resize" and ctx.opset >= 11 else ""
        )
        raise ctx.fail(f"mode '{mode}' is not one of {valid}")
    return mode


def _scales_of(ctx, x, scales) -> list[float]:
    """The per-axis scales of Upsample / Resize-10, each > 0."""
    scales = [float(s) for s in np.asarray(scales, np.float64).reshape(-1)]
    if len(scales) != x.rank:
        raise ctx.fail(f"scales must hold {x.rank} values (one per dimension), got {len(scales)}")
    if not all(math.isfinite(s) and s > 0 for s in scales):
        raise ctx.fail(f"scales must be finite and > 0, got {scales}")
    return scales


def _legacy(ctx, x, scales, mode: str) -> list:
    """Upsample and Resize-10: asymmetric coordinates; nearest floors on enlarged axes and
    takes the ceiling on shrunk ones (ONNX Runtime's rule for these versions)."""
    axes = []
    for n_in, s in zip(x.shape, scales):
        n_out = math.floor(n_in * s)
        rounding = INCREASING if s < 1 else DECREASING
        axes.append(Axis(n_in, n_out, s, 0.0, 0.0, rounding))
    if any(a.n_out <= 0 for a in axes):
        raise ctx.fail(f"the output shape {[a.n_out for a in axes]} has an empty dimension")
    return [_resample(ctx, x, axes, MODES[mode], antialias=False)]


def _upsample(ctx, node, inputs):
    x = inputs[0]
    if ctx.opset < 9:
        scales = ctx.attr("scales")
        if scales is None:
            raise ctx.fail("the 'scales' attribute is required")
    else:
        scales = ctx.const(inputs[1], "scales")
    scales = _scales_of(ctx, x, scales)
    if any(s < 1 for s in scales):
        raise ctx.fail(f"Upsample's scales must be >= 1, got {scales}")
    return _legacy(ctx, x, scales, _mode(ctx))


class Geometry(NamedTuple):
    """What Resize-11 and later computes before interpolating, per dimension: the resized
    dimensions (``axes``), the coordinate transformation, the ROI's start and end (0 and 1
    outside tf_crop_and_resize), ONNX's scale, the output length and the fractional target
    length ``length_resized``."""

    axes: list[int]
    transform: str
    start: list[float]
    end: list[float]
    scale: list[float]
    out: list[int]
    target: list[float]


def _geometry(ctx, x, inputs) -> Geometry:
    """Resize-11 on: the output shape and per-axis scales from scales or sizes (with ``axes``
    and ``keep_aspect_ratio_policy``), and the ROI; shared by every interpolation mode."""
    roi_in, scales_in, sizes_in = (list(inputs[1:]) + [None] * 3)[:3]
    rank = x.rank
    axes = [axis_of(ctx, a, rank, "axes") for a in ctx.attr("axes", range(rank))]
    if len(set(axes)) != len(axes):
        raise ctx.fail(f"axes {ctx.attr('axes')} repeat an axis")
    transform = ctx.attr("coordinate_transformation_mode", "half_pixel")

    def per_axis(values, what, default):
        """``values`` (one per entry of ``axes``) spread over every dimension."""
        values = [float(v) for v in np.asarray(values, np.float64).reshape(-1)]
        if len(values) != len(axes):
            raise ctx.fail(f"{what} must hold {len(axes)} values, got {len(values)}")
        out = [default] * rank
        for a, v in zip(axes, values):
            out[a] = v
        return out

    start, end = [0.0] * rank, [1.0] * rank
    if transform == "tf_crop_and_resize":
        roi = ctx.const(roi_in, "roi")
        if roi is None or roi.size == 0:
            raise ctx.fail("coordinate_transformation_mode 'tf_crop_and_resize' needs roi")
        roi = np.asarray(roi, np.float64).reshape(-1)
        if roi.size != 2 * len(axes):
            raise ctx.fail(f"roi must hold {2 * len(axes)} values, got {roi.size}")
        start = per_axis(roi[: len(axes)], "roi", 0.0)
        end = per_axis(roi[len(axes) :], "roi", 1.0)
    scales = ctx.const(scales_in, "scales")
    sizes = ctx.const(sizes_in, "sizes")
    has_scales = scales is not None and scales.size > 0
    has_sizes = sizes is not None and sizes.size > 0
    if has_scales == has_sizes:
        raise ctx.fail("exactly one of 'scales' and 'sizes' must be given")

    if has_scales:
        scale = per_axis(scales, "scales", 1.0)
        if not all(math.isfinite(s) and s > 0 for s in scale):
            raise ctx.fail(f"scales must be finite and > 0, got {scales.tolist()}")
        # The target length, fractional as ONNX's reference keeps it; the ROI's extent scales it
        # under tf_crop_and_resize (ONNX's output size rule).
        target = [n * s * (e - b) for n, s, b, e in zip(x.shape, scale, start, end)]
        out = [math.floor(t) for t in target]
    else:
        wanted = per_axis(sizes, "sizes", 0.0)
        out = [int(w) if i in axes else n for i, (w, n) in enumerate(zip(wanted, x.shape))]
        empty = [i for i in axes if x.shape[i] == 0]
        if empty:  # no scale turns 0 elements into others (onnxruntime refuses it too)
            raise ctx.fail(
                f"input X of shape {list(x.shape)} is empty on axis {empty[0]}: sizes "
                f"{[int(w) for w in np.asarray(sizes).reshape(-1)]} cannot come of it"
            )
        scale = [o / n for o, n in zip(out, x.shape)]
        policy = ctx.attr("keep_aspect_ratio_policy", "stretch")
        if policy in ("not_larger", "not_smaller"):
            pick = min if policy == "not_larger" else max
            common = pick(scale[a] for a in axes)
            scale = [common if i in axes else 1.0 for i in range(rank)]
            out = [int(common * n + 0.5) if i in axes else n for i, n in enumerate(x.shape)]
        elif policy != "stretch":
            raise ctx.fail(f"keep_aspect_ratio_policy '{policy}' is not supported")
        target = [s * n for s, n in zip(scale, x.shape)]
    if any(o <= 0 for o in out):
        raise ctx.fail(f"the output shape {out} has an empty dimension")
    return Geometry(axes, transform, start, end, scale, out, target)


def _resize(ctx, node, inputs):
    x = inputs[0]
    if ctx.opset < 11:
        return _legacy(ctx, x, _scales_of(ctx, x, ctx.const(inputs[1], "scales")), _mode(ctx))
    if ctx.attr("mode", "nearest") == "cubic":
        return [cubic(ctx, x, _geometry(ctx, x, inputs))]
    mode = _mode(ctx)
    geometry = _geometry(ctx, x, inputs)
    transform, start, end = geometry.transform, geometry.start, geometry.end
    scale, out, target = geometry.scale, geometry.out, geometry.target
    antialias = bool(int(ctx.attr("antialias", 0))) and mode == "linear"
    antialias = antialias and any(s < 1 for s in scale)  # it only widens shrinking filters
    if antialias and int(ctx.attr("exclude_outside", 0)):
        raise ctx.fail(
            "exclude_outside with antialiased shrinking: DirectML's RESAMPLE3 repeats the edge "
            "elements instead of dropping the filter taps outside the input"
        )

    rounding, shift = (DECREASING, 0.0)
    if mode == "nearest":
        nearest_mode = ctx.attr("nearest_mode", "round_prefer_floor")
        if nearest_mode not in NEAREST_MODES:
            raise ctx.fail(f"nearest_mode '{nearest_mode}' is not supported")
        rounding, shift = NEAREST_MODES[nearest_mode]

    plan, outside = [], []
    for i, (n_in, n_out) in enumerate(zip(x.shape, out)):
        g, mask = _transform(
            ctx, transform, n_in, n_out, scale[i], target[i], start[i], end[i], rounding
        )
        if antialias and min(g.scale, 1.0) != min(scale[i], 1.0):
            raise ctx.fail(
                f"antialias under coordinate_transformation_mode '{transform}': DirectML's "
                f"RESAMPLE3 widens its filter by its own Scale ({g.scale}) on axis {i}, not by "
                f"ONNX's scale ({scale[i]})"
            )
        plan.append(g._replace(input_offset=g.input_offset + shift))
        outside.append(mask)
    y = _resample(ctx, x, plan, MODES[mode], antialias=antialias)
    if any(m is not None and m.any() for m in outside):
        y = _extrapolate(ctx, y, outside, float(ctx.attr("extrapolation_value", 0.0)))
    return [y]


def _transform(ctx, transform, n_in, n_out, s, target, start, end, rounding):
    """One axis under ``transform``: its ``Axis`` (before the nearest_mode shift) and, for
    tf_crop_and_resize, which outputs read outside the input (None otherwise)."""
    if transform == "half_pixel":
        return Axis(n_in, n_out, s, 0.5, -0.5, rounding), None
    if transform == "half_pixel_symmetric":
        # ONNX's offset + (o + 0.5) / s - 0.5, with offset = (n_in / 2) * (1 - n_out / (s *
        # n_in)), is (o - (n_out - 1) / 2) / s + (n_in - 1) / 2: the two centres aligned. In that
        # form both offsets are exact halves, so exact-half coordinates stay exact for rounding.
        return Axis(n_in, n_out, s, -(n_in - 1) / 2, (n_out - 1) / 2, rounding), None
    if transform == "pytorch_half_pixel":
        if target == 1:
            return _fixed(n_in, n_out, 0.0, rounding), None
        return Axis(n_in, n_out, s, 0.5, -0.5, rounding), None
    if transform == "align_corners":
        if target == 1 or n_in == 1 or n_out == 1:
            return _fixed(n_in, n_out, 0.0, rounding), None
        return Axis(n_in, n_out, (target - 1) / (n_in - 1), 0.0, 0.0, rounding), None
    if transform == "asymmetric":
        return Axis(n_in, n_out, s, 0.0, 0.0, rounding), None
    if transform == "tf_half_pixel_for_nn":
        return Axis(n_in, n_out, s, 0.0, -0.5, rounding), None
    if transform == "tf_crop_and_resize":
        extent = (end - start) * (n_in - 1)
        o = np.arange(n_out, dtype=np.float64)
        if target == 1:
            c = 0.5 * (start + end) * (n_in - 1)
            g, x = _fixed(n_in, n_out, c, rounding), np.full(n_out, c)
        elif extent == 0 or n_out == 1:  # only o = 0, or every o, reads the ROI's start
            c = start * (n_in - 1)
            g, x = _fixed(n_in, n_out, c, rounding), np.full(n_out, c)
        elif extent < 0:
            raise ctx.fail(
                f"roi end {end} precedes its start {start}: DirectML's resampling scales are "
                "positive, so a flipped crop has no mapping"
            )
        else:
            g = Axis(n_in, n_out, (target - 1) / extent, -start * (n_in - 1), 0.0, rounding)
            x = o * extent / (target - 1) + start * (n_in - 1)
        return g, (x < 0) | (x > n_in - 1)
    raise ctx.fail(f"coordinate_transformation_mode '{transform}' is not supported")


def _identity(a: Axis, mode: str) -> bool:
    """Whether DirectML's mapping of axis ``a`` copies the input unchanged."""
    if a.n_in != a.n_out:
        return False
    indices, _weights = plan_axis(
        a.n_in,
        a.n_out,
        a.scale,
        a.input_offset,
        a.output_offset,
        InterpolationMode[mode],
        AxisDirection[a.rounding],
    )
    return indices.shape[1] == 1 and np.array_equal(indices[:, 0], np.arange(a.n_in))


def _resample(ctx, x, axes: list[Axis], mode: str, *, antialias: bool):
    """RESAMPLE2 / RESAMPLE3 nodes applying ``axes`` to ``x``: one node, or, for nearest
    neighbour with both rounding directions among the moving axes, one per direction (each
    axis is sampled independently, so the order does not matter)."""
    moving = [a for a in axes if not _identity(a, mode)]
    if not moving:
        return x
    directions = {a.rounding for a in moving} if mode == "NEAREST_NEIGHBOR" else {DECREASING}
    if len(directions) == 1:
        return _resample_node(ctx, x, axes, mode, directions.pop(), antialias)
    for direction in (INCREASING, DECREASING):
        step = [
            a if a.rounding == direction and not _identity(a, mode) else _copy(a.n_in) for a in axes
        ]
        x = _resample_node(ctx, x, step, mode, direction, antialias)
        axes = [_copy(s.n_out) if s is a else a for a, s in zip(axes, step)]
    return x


def _copy(n: int) -> Axis:
    """An axis of length ``n`` left as it is."""
    return Axis(n, n, 1.0, 0.0, 0.0)


def _resample_node(ctx, x, axes: list[Axis], mode: str, rounding: str, antialias: bool):
    """One RESAMPLE2 (RESAMPLE3 with ``antialias``) node. DirectML resamples 1 to 4 dimensions:
    a tensor of more is viewed with each run of adjacent untouched axes merged into one."""
    out_shape = tuple(a.n_out for a in axes)
    groups = [[a] for a in axes]
    if len(axes) > 4:
        groups = []
        for a in axes:
            if groups and _identity(a, mode) and all(_identity(b, mode) for b in groups[-1]):
                groups[-1].append(a)
            else:
                groups.append([a])
        if len(groups) > 4:
            raise ctx.fail(
                f"resizing {len(groups)} dimensions of a {len(axes)}-D tensor: DirectML's "
                "RESAMPLE operators take at most 4"
            )
    merged = [g[0] if len(g) == 1 else _copy(math.prod(a.n_in for a in g)) for g in groups]
    t = x.data_type
    fields = {
        "interpolation_mode": mode,
        "rounding_direction": rounding,
        "scales": [a.scale for a in merged],
        "input_pixel_offsets": [a.input_offset for a in merged],
        "output_pixel_offsets": [a.output_offset for a in merged],
    }
    in_desc = packed(t, [a.n_in for a in merged])
    out_desc = packed(t, [a.n_out for a in merged])
    if antialias:
        desc = op("RESAMPLE3")(in_desc, out_desc, antialiased=True, **fields)
    else:
        desc = op("RESAMPLE2")(in_desc, out_desc, **fields)
    xv = view(x, [a.n_in for a in merged])
    y = ctx.out(ctx.node(desc, [xv]), [a.n_out for a in merged])
    return view(y, out_shape)


def _extrapolate(ctx, y, outside: list, value: float):
    """``value`` where any axis reads outside the input (tf_crop_and_resize), ``y`` elsewhere:
    ELEMENT_WISE_IF on a constant mask."""
    mask = np.zeros([1] * y.rank, bool)
    for i, m in enumerate(outside):
        if m is not None and m.any():
            shape = [1] * y.rank
            shape[i] = m.size
            mask = mask | m.reshape(shape)
    cond = ctx.constant(mask)
    fill = ctx.constant(np.asarray(value).astype(y.data_type.numpy_dtype))
    return select_value(ctx, cond, fill, y, y.shape)


register("Resize", _resize)
register("Upsample", _upsample)


# --- cubic: a direct JAX lowering -------------------------------------------------------------


def _source(transform: str, n_in: int, n_out: int, s: float, target: float, start, end):
    """ONNX's input coordinate of every output index of one axis (float64), and which of them
    read outside the input under tf_crop_and_resize (None otherwise). ``target`` is
    length_resized, fractional when it comes from a scale. pytorch_half_pixel onto one element
    reads x = 0 as ONNX's definition and ONNX Runtime say (the reference evaluator reads -0.5),
    as the linear and nearest modes do."""
    o = np.arange(n_out, dtype=np.float64)
    if transform == "half_pixel":
        return (o + 0.5) / s - 0.5, None
    if transform == "half_pixel_symmetric":
        offset = n_in / 2 * (1 - n_out / target)
        return offset + (o + 0.5) / s - 0.5, None
    if transform == "pytorch_half_pixel":
        return ((o + 0.5) / s - 0.5 if target > 1 else np.zeros(n_out)), None
    if transform == "align_corners":
        return (o * (n_in - 1) / (target - 1) if target != 1 else np.zeros(n_out)), None
    if transform == "asymmetric":
        return o / s, None
    if transform == "tf_half_pixel_for_nn":
        return (o + 0.5) / s, None
    if transform == "tf_crop_and_resize":
        if target > 1:
            x = start * (n_in - 1) + o * (end - start) * (n_in - 1) / (target - 1)
        else:
            x = np.full(n_out, 0.5 * (start + end) * (n_in - 1))
        return x, (x < 0) | (x > n_in - 1)
    return None, None


def _cubic_kernel(t: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution kernel with coefficient ``a`` (cubic_coeff_a)."""
    t = np.abs(t)
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return np.where(t <= 1, near, np.where(t < 2, far, 0.0))


def _cubic_taps(x: np.ndarray, n_in: int, s: float, a: float, antialias: bool, exclude: bool):
    """The input indices (clamped into the input, ONNX's edge padding) and weights each output
    reads: four taps around ``x``, or with antialias a kernel stretched by 1 / scale when
    shrinking (its weights normalized to sum 1); exclude_outside drops the taps outside the
    input and renormalizes. Follows ONNX's reference: an integer ``x`` counts as the ratio 1 of
    the element before it (the same weights)."""
    support = min(s, 1.0) if antialias else 1.0
    first = math.floor(-2 / support) + 1
    offsets = np.arange(first, 2 - first, dtype=np.float64)
    base = np.floor(x)
    ratio = x - base
    whole = ratio == 0
    base = np.where(whole, base - 1, base)
    ratio = np.where(whole, 1.0, ratio)
    index = base[:, None] + offsets[None, :]
    weight = _cubic_kernel(support * (offsets[None, :] - ratio[:, None]), a)
    if antialias:
        weight = weight / weight.sum(axis=1, keepdims=True)
    if exclude:
        weight = np.where((index < 0) | (index >= n_in), 0.0, weight)
        total = weight.sum(axis=1, keepdims=True)
        weight = weight / np.where(total == 0, 1.0, total)
    return np.clip(index, 0, n_in - 1).astype(np.int32), weight


def cubic(ctx, x, g: Geometry):
    """mode 'cubic' (Resize-11 on), which DirectML's RESAMPLE operators do not interpolate (ONNX
    Runtime's DirectML provider rejects it too): a JAX node. The coordinates are ONNX's, one axis
    after another in ``axes`` order as ONNX's reference resizes: each output a weighted sum of
    input elements gathered at indices known at import, tf_crop_and_resize's outside outputs
    replaced by extrapolation_value. Computed in float32 (float64 for a double tensor); an integer
    result is rounded to nearest even and saturated, as ONNX's reference casts."""
    a = float(ctx.attr("cubic_coeff_a", -0.75))
    antialias = bool(int(ctx.attr("antialias", 0)))
    exclude = bool(int(ctx.attr("exclude_outside", 0)))
    fill = float(ctx.attr("extrapolation_value", 0.0))
    steps = []
    for i in g.axes:
        n_in, n_out = x.shape[i], g.out[i]
        src, outside = _source(g.transform, n_in, n_out, g.scale[i], g.target[i], g.start[i],
                               g.end[i])  # fmt: skip
        if src is None:
            raise ctx.fail(
                f"attribute 'coordinate_transformation_mode': '{g.transform}' is not supported"
            )
        index, weight = _cubic_taps(src, n_in, g.scale[i], a, antialias, exclude)
        if outside is not None and not outside.any():
            outside = None
        picks = (weight == 1) | (weight == 0)
        exact = picks.all() and np.array_equal(
            index[np.arange(n_out), weight.argmax(axis=1)], np.arange(n_in)
        )
        if n_out == n_in and exact and outside is None:
            continue  # this axis reads each element as it is
        steps.append((i, index, weight, outside))
    if not steps:
        return x
    t = x.data_type
    compute = np.float64 if t is DataType.FLOAT64 else np.float32
    integer = not t.is_float

    def resize(data):
        y = data.astype(compute)
        for axis, index, weight, outside in steps:
            taps = jnp.take(y, jnp.asarray(index), axis=axis)
            shape = (1,) * axis + weight.shape + (1,) * (y.ndim - axis - 1)
            y = jnp.sum(taps * jnp.asarray(weight.reshape(shape), compute), axis=axis + 1)
            if outside is not None:
                mask = outside.reshape((1,) * axis + (-1,) + (1,) * (y.ndim - axis - 1))
                y = jnp.where(jnp.asarray(mask), jnp.asarray(fill, compute), y)
        if integer:
            info = np.iinfo(t.numpy_dtype)
            y = jnp.clip(jnp.round(y), info.min, info.max)
        return (y.astype(t.numpy_dtype),)

    (y,) = ctx.jax("Resize.cubic", resize, [x], [(tuple(g.out), t)])
    return y
