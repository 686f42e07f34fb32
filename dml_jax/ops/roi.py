"""Regions of interest: DML_OPERATOR_ROI_POOLING, ROI_ALIGN and ROI_ALIGN1.

ROI_POOLING max-pools integer bins of each region (the pages' rounded corners and integer bin
bounds). ROI_ALIGN1 resamples each region to the output's height and width: every output element
reduces (AVERAGE or MAX) a grid of ``Sy x Sx`` samples, ``S = clamp(ceil(|region| / output),
MinimumSamplesPerOutput, MaximumSamplesPerOutput)`` per region and dimension, sample ``s`` of the
region's ``n = output * S`` sitting at ``(s - OutputPixelOffset) * region / n + x1 -
InputPixelOffset`` (AlignRegionsToCorners: ``region / (n - 1)``, the region's centre when
``n == 1``). ROI_ALIGN is ROI_ALIGN1 with offsets 0.5 and -0.5 and no corner alignment.

Sampling (dml_jax's reading where the pages are silent, docs/semantics.md "Regions of interest"):
a sample outside ``[-1, size]`` on either axis reads OutOfBoundsInputValue; otherwise its
coordinate is clamped into ``[0, size - 1]`` and read by LINEAR (the two neighbours ``floor`` and
``floor + 1``, clamped) or NEAREST_NEIGHBOR (rounded, halves to even); a batch index outside
``[0, BatchCount)`` reads OutOfBoundsInputValue everywhere. MAX is the largest sample (not 0).

The coordinates depend on the ROI values, so the lowering computes them as arrays: per region a
static grid of ``K`` candidate samples per output element and dimension, masked to the region's
``S``. ``K = min(MaximumSamplesPerOutput, max(MinimumSamplesPerOutput, ceil(2 * input /
output)))`` is exact for every region up to twice the input's extent (after SpatialScale); a
larger region uses K samples, as if MaximumSamplesPerOutput were K. Rows are gathered first and
blended, then columns, all in float32 (FLOAT16 rounded once at the end).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import jax.numpy as jnp
from jax import lax

from ..enums import FeatureLevel as L
from ..enums import InterpolationMode, ReduceFunction
from ..errors import Validator
from ..fields import (
    BOOL,
    FLOAT,
    SIZE_2D,
    UINT,
    OperatorDesc,
    attribute,
    enum_type,
    input_field,
    output_field,
)
from ..registry import Example, register
from ..support import DIMS4, F2, U32, rows, types
from ..tensor import Size2D, TensorDesc

NEAREST, LINEAR = InterpolationMode.NEAREST_NEIGHBOR, InterpolationMode.LINEAR
AVERAGE, MAX = ReduceFunction.AVERAGE, ReduceFunction.MAX
# ROI_POOLING's rounded corners are clamped here before integer math (int32 bin bounds).
_POOL_LIMIT = 2**29


@dataclass(frozen=True)
class RoiPoolingOperatorDesc(OperatorDesc):
    """DML_ROI_POOLING_OPERATOR_DESC: max-pools each region of interest into a fixed grid
    (FL 1_0).

    Per region, ``x1 = round(RoiX1 * SpatialScale)`` (halves away from zero), likewise x2, y1,
    y2; ``RegionWidth = max(x2 - x1 + 1, 1)``; bin ``X`` spans ``[X * RegionWidth // PooledWidth
    + x1, ceil((X + 1) * RegionWidth / PooledWidth) + x1)``, clamped into the input. An empty
    bin, or a BatchID outside ``[0, BatchCount)`` (truncated toward zero), gives 0.

    Fields:
        input_tensor: ``{BatchCount, ChannelCount, Height, Width}``.
        roi_tensor: ``{1, 1, NumROIs, 5}``, rows ``[BatchID, x1, y1, x2, y2]`` (inclusive
            corners, x2 >= x1 and y2 >= y1), InputTensor's data type.
        output_tensor: ``{NumROIs, ChannelCount, PooledSize.Height, PooledSize.Width}``,
            InputTensor's data type.
        spatial_scale: multiplies the ROI coordinates.
        pooled_size: ``Size2D(width, height)``, the output's last two sizes.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_ROI_POOLING"
    input_tensor: TensorDesc = input_field()
    roi_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    spatial_scale: float = attribute(FLOAT)
    pooled_size: Size2D = attribute(SIZE_2D)


@dataclass(frozen=True)
class RoiAlignOperatorDesc(OperatorDesc):
    """DML_ROI_ALIGN_OPERATOR_DESC: crops regions of interest and resamples each to the output's
    height and width, reducing several samples per output element (FL 3_0).

    ROI_ALIGN1 with InputPixelOffset 0.5, OutputPixelOffset -0.5 (pixel centres) and
    AlignRegionsToCorners FALSE; see the module docstring for the sampling rules.

    Fields:
        input_tensor: ``{BatchCount, ChannelCount, InputHeight, InputWidth}``.
        roi_tensor: ``{NumROIs, 4}``, ``{1, NumROIs, 4}`` or ``{1, 1, NumROIs, 4}``, rows
            ``[x1, y1, x2, y2]``; empty and inverted regions allowed. InputTensor's data type.
        batch_indices_tensor: ``{NumROIs}`` with up to three leading 1s: each region's batch.
        output_tensor: ``{NumROIs, ChannelCount, OutputHeight, OutputWidth}``, InputTensor's
            data type.
        reduction_function: AVERAGE or MAX over an output element's samples.
        interpolation_mode: NEAREST_NEIGHBOR or LINEAR.
        spatial_scale_x, spatial_scale_y: multiply the ROI's x and y coordinates.
        out_of_bounds_input_value: what a sample outside the input (or its batch) reads.
        minimum_samples_per_output: >= 1, the fewest samples per output element and dimension.
        maximum_samples_per_output: >= MinimumSamplesPerOutput, the most.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_ROI_ALIGN"
    input_tensor: TensorDesc = input_field()
    roi_tensor: TensorDesc = input_field()
    batch_indices_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    reduction_function: ReduceFunction = attribute(enum_type(ReduceFunction))
    interpolation_mode: InterpolationMode = attribute(enum_type(InterpolationMode))
    spatial_scale_x: float = attribute(FLOAT)
    spatial_scale_y: float = attribute(FLOAT)
    out_of_bounds_input_value: float = attribute(FLOAT)
    minimum_samples_per_output: int = attribute(UINT)
    maximum_samples_per_output: int = attribute(UINT)


@dataclass(frozen=True)
class RoiAlign1OperatorDesc(OperatorDesc):
    """DML_ROI_ALIGN1_OPERATOR_DESC: ROI_ALIGN with pixel offsets and corner alignment (FL 4_0).

    Sample ``s`` of a region's ``n = OutputSize * S`` along a dimension reads input coordinate
    ``(s - OutputPixelOffset) * RegionSize / n + x1 - InputPixelOffset``.

    Fields:
        input_tensor, roi_tensor, batch_indices_tensor, output_tensor, reduction_function,
            interpolation_mode, spatial_scale_x, spatial_scale_y, out_of_bounds_input_value,
            minimum_samples_per_output, maximum_samples_per_output: as
            ``RoiAlignOperatorDesc``'s.
        input_pixel_offset: subtracted from input coordinates (0.5: pixel centres).
        output_pixel_offset: subtracted from sample positions (-0.5: pixel centres).
        align_regions_to_corners: TRUE spreads the samples from x1 to x2 inclusive
            (``RegionSize / (n - 1)``; a single sample sits at the region's centre).
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_ROI_ALIGN1"
    input_tensor: TensorDesc = input_field()
    roi_tensor: TensorDesc = input_field()
    batch_indices_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    reduction_function: ReduceFunction = attribute(enum_type(ReduceFunction))
    interpolation_mode: InterpolationMode = attribute(enum_type(InterpolationMode))
    spatial_scale_x: float = attribute(FLOAT)
    spatial_scale_y: float = attribute(FLOAT)
    input_pixel_offset: float = attribute(FLOAT)
    output_pixel_offset: float = attribute(FLOAT)
    out_of_bounds_input_value: float = attribute(FLOAT)
    minimum_samples_per_output: int = attribute(UINT)
    maximum_samples_per_output: int = attribute(UINT)
    align_regions_to_corners: bool = attribute(BOOL)


# --- shared rules -------------------------------------------------------------------------------


def _rank(v: Validator, path: str, t: TensorDesc, ranks: tuple[int, ...]) -> None:
    allowed = " or ".join(str(r) for r in ranks)
    v.check(f"{path}.DimensionCount", t.rank in ranks, f"must be {allowed}, got {t.rank}")


def _leading_ones(v: Validator, path: str, t: TensorDesc, keep: int) -> None:
    """All but the last ``keep`` sizes are 1 (the pages' ``{1, 1, NumROIs, 4}`` forms)."""
    for i, size in enumerate(t.sizes[: t.rank - keep]):
        v.equal(f"{path}.Sizes[{i}]", size, 1)


def _same_types(d: Any, v: Validator) -> None:
    v.same("data_type", [("ROITensor", d.roi_tensor)], ("InputTensor", d.input_tensor))


# --- ROI_POOLING --------------------------------------------------------------------------------


def infer_roi_pooling(d: RoiPoolingOperatorDesc) -> tuple[TensorDesc, ...]:
    x, r = d.input_tensor, d.roi_tensor
    sizes = (r.sizes[-2], x.sizes[1], d.pooled_size.height, d.pooled_size.width)
    return (x.like(sizes=sizes),)


def validate_roi_pooling(d: RoiPoolingOperatorDesc, v: Validator) -> None:
    _rank(v, "InputTensor", d.input_tensor, (4,))
    _rank(v, "ROITensor", d.roi_tensor, (4,))
    _leading_ones(v, "ROITensor", d.roi_tensor, 2)
    v.equal("ROITensor.Sizes[3]", d.roi_tensor.sizes[3], 5, "5 ([BatchID, x1, y1, x2, y2])")
    _same_types(d, v)
    v.check("PooledSize.Width", d.pooled_size.width > 0, "must be > 0, got 0")
    v.check("PooledSize.Height", d.pooled_size.height > 0, "must be > 0, got 0")
    v.outputs_match(d.output_slots(), infer_roi_pooling(d))


def _pool_bounds(first, last, pooled: int, size: int):
    """Per region and bin, the clamped ``[start, end)`` of one dimension (int32).

    ``k * extent // pooled`` is computed as ``k * q + k * rem // pooled`` (extent = q * pooled +
    rem) so that no product leaves int32 for extents up to 2**30 and pooled sizes up to 46340.
    """
    extent = jnp.maximum(last - first + 1, 1)[:, None]
    q, rem = extent // pooled, extent % pooled
    k = jnp.arange(pooled, dtype=jnp.int32)[None, :]
    start = k * q + (k * rem) // pooled + first[:, None]
    end = (k + 1) * q + ((k + 1) * rem + pooled - 1) // pooled + first[:, None]
    return jnp.clip(start, 0, size), jnp.clip(end, 0, size)


def lower_roi_pooling(d: RoiPoolingOperatorDesc, x, rois):
    n, _, h, w = x.shape
    ph, pw = d.pooled_size.height, d.pooled_size.width
    r = jnp.reshape(rois, (-1, 5)).astype(jnp.float32)
    corners = lax.round(r[:, 1:] * jnp.float32(d.spatial_scale), lax.RoundingMethod.AWAY_FROM_ZERO)
    bad = jnp.isnan(corners).any(axis=1)
    corners = jnp.clip(jnp.nan_to_num(corners), -_POOL_LIMIT, _POOL_LIMIT).astype(jnp.int32)
    x1, y1, x2, y2 = (corners[:, i] for i in range(4))
    batch = jnp.trunc(r[:, 0])
    bad |= ~((batch >= 0) & (batch < n))  # NaN fails both comparisons
    batch = jnp.clip(jnp.nan_to_num(batch), 0, n - 1).astype(jnp.int32)
    ys, ye = _pool_bounds(y1, y2, ph, h)
    xs, xe = _pool_bounds(x1, x2, pw, w)
    hh = jnp.arange(h, dtype=jnp.int32)
    ww = jnp.arange(w, dtype=jnp.int32)
    in_h = (hh >= ys[..., None]) & (hh < ye[..., None])  # (R, PH, H)
    in_w = (ww >= xs[..., None]) & (ww < xe[..., None])  # (R, PW, W)
    low = jnp.array(-jnp.inf, x.dtype)
    # Separable max: over each bin's columns first, then its rows.
    cols = jnp.max(jnp.where(in_w[:, None, None], x[batch][:, :, :, None, :], low), axis=-1)
    out = jnp.max(jnp.where(in_h[:, None, :, None, :], cols[:, :, None].swapaxes(-1, -2), low), -1)
    empty = (ye <= ys)[:, :, None] | (xe <= xs)[:, None, :]  # (R, PH, PW)
    empty = empty | bad[:, None, None]
    return (jnp.where(empty[:, None], jnp.zeros((), x.dtype), out),)


# --- ROI_ALIGN / ROI_ALIGN1 ---------------------------------------------------------------------


def _align_geometry(d: Any) -> tuple[float, float, bool]:
    """(InputPixelOffset, OutputPixelOffset, AlignRegionsToCorners); ROI_ALIGN's are fixed."""
    if isinstance(d, RoiAlign1OperatorDesc):
        return d.input_pixel_offset, d.output_pixel_offset, d.align_regions_to_corners
    return 0.5, -0.5, False


def sample_cap(d: Any, input_size: int, output_size: int) -> int:
    """K, the static number of candidate samples per output element along one dimension."""
    wide = math.ceil(2 * input_size / output_size)
    return min(d.maximum_samples_per_output, max(d.minimum_samples_per_output, wide))


def infer_roi_align(d: Any) -> tuple[TensorDesc, ...]:
    x, out = d.input_tensor, d.output_tensor
    sizes = (d.roi_tensor.sizes[-2], x.sizes[1]) + tuple(out.sizes[2:4])
    return (x.like(sizes=sizes),)


def validate_roi_align(d: Any, v: Validator) -> None:
    _rank(v, "InputTensor", d.input_tensor, (4,))
    validate_regions(d, v)
    _rank(v, "OutputTensor", d.output_tensor, (4,))
    _same_types(d, v)
    v.outputs_match(d.output_slots(), infer_roi_align(d))


def validate_regions(d: Any, v: Validator) -> None:
    """The members ROI_ALIGN, ROI_ALIGN1 and ROI_ALIGN_GRAD share: ROITensor's and
    BatchIndicesTensor's shapes, the reduction function and the sample counts."""
    _rank(v, "ROITensor", d.roi_tensor, (2, 3, 4))
    _leading_ones(v, "ROITensor", d.roi_tensor, 2)
    v.equal("ROITensor.Sizes", d.roi_tensor.sizes[-1], 4, "4 in the last dimension")
    b = d.batch_indices_tensor
    _rank(v, "BatchIndicesTensor", b, (1, 2, 3, 4))
    _leading_ones(v, "BatchIndicesTensor", b, 1)
    rois = d.roi_tensor.sizes[-2]
    v.equal(f"BatchIndicesTensor.Sizes[{b.rank - 1}]", b.sizes[-1], rois, "NumROIs")
    v.check(
        "ReductionFunction",
        d.reduction_function in (AVERAGE, MAX),
        f"must be AVERAGE or MAX, got {d.reduction_function.name}",
    )
    low, high = d.minimum_samples_per_output, d.maximum_samples_per_output
    v.check("MinimumSamplesPerOutput", low >= 1, f"must be >= 1, got {low}")
    v.check(
        "MaximumSamplesPerOutput",
        high >= low,
        f"must be >= MinimumSamplesPerOutput ({low}), got {high}",
    )


def _axis_samples(d, first, extent, out_size: int, in_size: int, cap: int):
    """One dimension's samples for every region.

    Returns ``(coordinate, valid, count)``: the input coordinates ``(R, out_size * cap)`` (sample
    k of output element o at column ``o * cap + k``), whether ``k`` is below the region's count,
    and the count ``(R,)`` as float32.
    """
    in_off, out_off, corners = _align_geometry(d)
    low = d.minimum_samples_per_output
    per = jnp.ceil(jnp.abs(extent) / jnp.float32(out_size))
    per = jnp.where(jnp.isnan(per), low, jnp.clip(per, low, cap))  # (R,) integral float32
    o = jnp.arange(out_size, dtype=jnp.float32)[:, None]
    k = jnp.arange(cap, dtype=jnp.float32)[None, :]
    s = (o[None] * per[:, None, None] + k[None]).reshape(-1, out_size * cap)  # sample index
    total = jnp.float32(out_size) * per
    if corners:
        step = extent / jnp.maximum(total - 1, 1)
        centre = first + extent * jnp.float32(0.5) - jnp.float32(in_off)
    else:
        step = extent / total
    coord = (s - jnp.float32(out_off)) * step[:, None] + first[:, None] - jnp.float32(in_off)
    if corners:
        coord = jnp.where((total == 1)[:, None], centre[:, None], coord)
    valid = jnp.broadcast_to(k < per[:, None, None], (per.shape[0], out_size, cap))
    return coord, valid.reshape(-1, out_size * cap), per


def _taps(d, coord, size: int):
    """Indices and weights of the samples along one dimension, and which are inside the input.

    A coordinate outside ``[-1, size]`` is out of bounds; the rest are clamped into
    ``[0, size - 1]``. LINEAR: indices ``floor`` and ``floor + 1`` (clamped), weights
    ``1 - frac`` and ``frac``; NEAREST_NEIGHBOR: the coordinate rounded, halves to even.
    """
    inside = (coord >= -1) & (coord <= size)
    c = jnp.where(inside, coord, 0)
    # The clamp as two selects rather than clip: the derivative with respect to the coordinate
    # is 1 on all of [0, size - 1], ends included (clip's max/min would halve it there), and 0
    # where the clamp holds the coordinate (ROI_ALIGN_GRAD's OutputROIGradientTensor).
    c = jnp.where(c < 0, jnp.zeros_like(c), jnp.where(c > size - 1, jnp.full_like(c, size - 1), c))
    if d.interpolation_mode is NEAREST:
        index = lax.round(c, lax.RoundingMethod.TO_NEAREST_EVEN).astype(jnp.int32)
        return [(index, None)], inside
    lower = jnp.floor(c)
    frac = c - lower
    lower = lower.astype(jnp.int32)
    upper = jnp.minimum(lower + 1, size - 1)
    return [(lower, 1 - frac), (upper, frac)], inside


def _blend(taps, pick):
    """``sum(weight * pick(index))`` over the taps (one tap: ``pick(index)``)."""
    if len(taps) == 1:
        return pick(taps[0][0])
    (i0, w0), (i1, w1) = taps
    return pick(i0) * w0 + pick(i1) * w1


def first_max(v, axes: tuple[int, int]):
    """The maximum over two axes, read at the first maximal sample in row-major order over them
    (jnp.argmax: the first of equal values, NaN the maximum). The value is jnp.max's; its
    derivative goes whole to that one sample (ROI_ALIGN_GRAD's MAX rule), where jnp.max's
    would be split between equal samples."""
    a, b = axes
    moved = jnp.moveaxis(v, (a, b), (-2, -1))
    flat = moved.reshape(moved.shape[:-2] + (-1,))
    first = jnp.argmax(flat, axis=-1, keepdims=True)
    return jnp.take_along_axis(flat, first, axis=-1)[..., 0]


def lower_roi_align(d: Any, x, rois, batch):
    n, _, h, w = x.shape
    oh, ow = d.output_tensor.sizes[2:4]
    ky, kx = sample_cap(d, h, oh), sample_cap(d, w, ow)
    r = jnp.reshape(rois, (-1, 4)).astype(jnp.float32)
    num = r.shape[0]
    b = jnp.reshape(batch, (-1,))
    ok_batch = b < n  # unsigned: never below 0
    b = jnp.minimum(b, n - 1).astype(jnp.int32)
    x1 = r[:, 0] * jnp.float32(d.spatial_scale_x)
    y1 = r[:, 1] * jnp.float32(d.spatial_scale_y)
    x2 = r[:, 2] * jnp.float32(d.spatial_scale_x)
    y2 = r[:, 3] * jnp.float32(d.spatial_scale_y)
    ycoord, yvalid, ycount = _axis_samples(d, y1, y2 - y1, oh, h, ky)
    xcoord, xvalid, xcount = _axis_samples(d, x1, x2 - x1, ow, w, kx)
    ytaps, yin = _taps(d, ycoord, h)
    xtaps, xin = _taps(d, xcoord, w)
    xf = x.astype(jnp.float32)
    # Rows: (R, M, C, W) with M = OH * Ky, weights broadcast over C and W.
    rows_ = _blend(
        [(i, None if wt is None else wt[:, :, None, None]) for i, wt in ytaps],
        lambda i: xf[b[:, None], :, i],
    )
    # Columns: (R, M, C, N) with N = OW * Kx.
    v = _blend(
        [(i, None if wt is None else wt[:, None, None, :]) for i, wt in xtaps],
        lambda i: jnp.take_along_axis(rows_, i[:, None, None, :], axis=3),
    )
    inside = yin[:, :, None, None] & xin[:, None, None, :] & ok_batch[:, None, None, None]
    v = jnp.where(inside, v, jnp.float32(d.out_of_bounds_input_value))
    valid = yvalid[:, :, None, None] & xvalid[:, None, None, :]
    c = x.shape[1]
    shape6 = (num, oh, ky, c, ow, kx)
    v, valid = v.reshape(shape6), jnp.broadcast_to(valid, v.shape).reshape(shape6)
    if d.reduction_function is MAX:
        out = first_max(jnp.where(valid, v, -jnp.inf), (2, 5))
    else:
        total = jnp.sum(jnp.where(valid, v, 0), axis=(2, 5))
        out = total / (ycount * xcount)[:, None, None, None]
    return (jnp.transpose(out, (0, 2, 1, 3)).astype(x.dtype),)


# --- examples, registration ---------------------------------------------------------------------


_ALIGN_DESC = {
    "InputTensor": {"DataType": "FLOAT32", "Sizes": [1, 1, 4, 4]},
    "ROITensor": {"DataType": "FLOAT32", "Sizes": [4, 4]},
    "BatchIndicesTensor": {"DataType": "UINT32", "Sizes": [4]},
    "OutputTensor": {"DataType": "FLOAT32", "Sizes": [4, 1, 1, 3]},
    "ReductionFunction": "DML_REDUCE_FUNCTION_AVERAGE",
    "InterpolationMode": "DML_INTERPOLATION_MODE_NEAREST_NEIGHBOR",
    "SpatialScaleX": 1.0,
    "SpatialScaleY": 1.0,
}
_ALIGN_INPUTS = {
    "InputTensor": list(range(1, 17)),
    "ROITensor": [0, 0, 2, 2, 2, 0, 4, 2, 0, 2, 2, 4, 2, 2, 4, 4],
    "BatchIndicesTensor": [0, 0, 0, 0],
}
_ALIGN_ROWS = {
    "ROITensor": (F2, (2, 3, 4)),
    "BatchIndicesTensor": (U32, (1, 2, 3, 4)),
}
_ALIGN_ROWS_5_0 = {
    "ROITensor": (F2, (2, 3, 4)),
    "BatchIndicesTensor": (U32 | types("UINT64"), (1, 2, 3, 4)),
}

register(
    RoiPoolingOperatorDesc,
    infer=infer_roi_pooling,
    validate=validate_roi_pooling,
    lower=lower_roi_pooling,
    support=rows((L.FL_1_0, DIMS4, F2)),
    differentiable=lambda d: True,
    example=Example(
        {
            "type": "DML_OPERATOR_ROI_POOLING",
            "desc": {
                "InputTensor": {"DataType": "FLOAT32", "Sizes": [1, 1, 4, 4]},
                "ROITensor": {"DataType": "FLOAT32", "Sizes": [1, 1, 2, 5]},
                "OutputTensor": {"DataType": "FLOAT32", "Sizes": [2, 1, 2, 2]},
                "SpatialScale": 1.0,
                "PooledSize": {"Width": 2, "Height": 2},
            },
        },
        {
            "InputTensor": list(range(1, 17)),
            "ROITensor": [0, 0, 0, 3, 3, 0, 1, 1, 2, 2],
        },
        "the maxima of 2x2 bins of the whole image and of its centre 2x2 block",
    ),
)

register(
    RoiAlignOperatorDesc,
    infer=infer_roi_align,
    validate=validate_roi_align,
    lower=lower_roi_align,
    support=rows(
        (L.FL_3_0, DIMS4, F2, F2, _ALIGN_ROWS),
        (L.FL_5_0, DIMS4, F2, F2, _ALIGN_ROWS_5_0),
    ),
    differentiable=lambda d: True,
    example=Example(
        {
            "type": "DML_OPERATOR_ROI_ALIGN",
            "desc": dict(
                _ALIGN_DESC,
                OutOfBoundsInputValue=0.0,
                MinimumSamplesPerOutput=1,
                MaximumSamplesPerOutput=1,
            ),
        },
        _ALIGN_INPUTS,
        "four 2x2 crops of a 4x4 image, nearest neighbour, 1x3 each (ROI_ALIGN_GRAD's example)",
    ),
)

register(
    RoiAlign1OperatorDesc,
    infer=infer_roi_align,
    validate=validate_roi_align,
    lower=lower_roi_align,
    support=rows(
        (L.FL_4_0, DIMS4, F2, F2, _ALIGN_ROWS),
        (L.FL_5_0, DIMS4, F2, F2, _ALIGN_ROWS_5_0),
    ),
    differentiable=lambda d: True,
    example=Example(
        {
            "type": "DML_OPERATOR_ROI_ALIGN1",
            "desc": dict(
                _ALIGN_DESC,
                InputPixelOffset=0.5,
                OutputPixelOffset=-0.5,
                OutOfBoundsInputValue=0.0,
                MinimumSamplesPerOutput=1,
                MaximumSamplesPerOutput=1,
                AlignRegionsToCorners=False,
            ),
        },
        _ALIGN_INPUTS,
        "ROI_ALIGN_GRAD's forward example: 2x2 crops of a 4x4 image scaled 1.5x across, 0.5x down",
    ),
)
