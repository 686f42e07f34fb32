"""NumPy references of DML_OPERATOR_ROI_POOLING, ROI_ALIGN and ROI_ALIGN1, from the pages for
DML_ROI_POOLING_OPERATOR_DESC and DML_ROI_ALIGN(1)_OPERATOR_DESC (paraphrased), one output
element at a time with plain loops.

ROI_POOLING (the page's formulas, Python integers):
    x1 = round(RoiX1 * SpatialScale) (halves away from zero), likewise x2, y1, y2
    RegionWidth = x2 - x1 + 1, at least 1; StartX = (X * RegionWidth) // PooledWidth + x1;
    EndX = ((X + 1) * RegionWidth + PooledWidth - 1) // PooledWidth + x1; both clamped into
    [0, Width]; the output is the maximum over [StartY, EndY) x [StartX, EndX).

ROI_ALIGN1 (the page's loops): per region and dimension, S = clamp(ceil(|size| / outputSize),
Minimum, Maximum) samples per output element; sample s (of outputSize * S) reads
    (s - OutputPixelOffset) * size / (outputSize * S) + x1 - InputPixelOffset
and the output element reduces its S_y * S_x samples. The scalar coordinate math is float32, as
DirectML's FLOAT fields are; interpolation and reduction are float64.

dml_jax's choices where the pages are silent (docs/semantics.md, "Regions of interest"):
- the sample loop runs S times (``outputTensorSampleX + k`` for k < S; the page's ``<=`` would
  take S + 1), the Y scale uses the Y size (the page repeats X), and the count uses |size| so
  an inverted region has as many samples as the upright one;
- a sample outside [-1, size] on either axis reads OutOfBoundsInputValue, the rest are clamped
  into [0, size - 1]; LINEAR blends floor and floor + 1 (clamped), NEAREST_NEIGHBOR rounds
  halves to even; AlignRegionsToCorners divides by n - 1 and puts a lone sample at the centre;
- MAX is the largest sample; a batch index outside [0, BatchCount) reads OutOfBoundsInputValue;
- the sample count along a dimension is at most max(Minimum, ceil(2 * input / output)) when
  Maximum is larger (the lowering's static bound);
- ROI_POOLING: an empty bin, a NaN corner or a BatchID outside [0, BatchCount) gives 0.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

f32 = np.float32


def _round_half_away(v: float) -> int:
    return int(math.copysign(math.floor(abs(v) + 0.5), v))


def roi_pooling(desc: Any, x: np.ndarray, rois: np.ndarray) -> tuple[np.ndarray, ...]:
    n, c, h, w = x.shape
    ph, pw = desc.pooled_size.height, desc.pooled_size.width
    table = rois.reshape(-1, 5)
    out = np.zeros((table.shape[0], c, ph, pw), x.dtype)
    scale = f32(desc.spatial_scale)
    for r, row in enumerate(table):
        scaled = [f32(v) * scale for v in row[1:]]
        if any(math.isnan(v) for v in scaled) or math.isnan(row[0]):
            continue
        x1, y1, x2, y2 = (_round_half_away(float(v)) for v in scaled)
        batch = math.trunc(float(row[0]))
        if not 0 <= batch < n:
            continue
        height, width = max(y2 - y1 + 1, 1), max(x2 - x1 + 1, 1)
        for oy in range(ph):
            sy = min(max((oy * height) // ph + y1, 0), h)
            ey = min(max(((oy + 1) * height + ph - 1) // ph + y1, 0), h)
            for ox in range(pw):
                sx = min(max((ox * width) // pw + x1, 0), w)
                ex = min(max(((ox + 1) * width + pw - 1) // pw + x1, 0), w)
                if ey <= sy or ex <= sx:
                    continue
                for ch in range(c):
                    out[r, ch, oy, ox] = np.max(x[batch, ch, sy:ey, sx:ex])
    return (out,)


def _offsets(desc: Any) -> tuple[float, float, bool]:
    # ROI_ALIGN_GRAD has ROI_ALIGN1's members (tests/reference/training.py samples like this).
    if desc.operator_type in ("DML_OPERATOR_ROI_ALIGN1", "DML_OPERATOR_ROI_ALIGN_GRAD"):
        return desc.input_pixel_offset, desc.output_pixel_offset, desc.align_regions_to_corners
    return 0.5, -0.5, False


def _count(desc: Any, size: np.float32, out_size: int, in_size: int) -> int:
    low, high = desc.minimum_samples_per_output, desc.maximum_samples_per_output
    high = min(high, max(low, math.ceil(2 * in_size / out_size)))
    ratio = f32(abs(size)) / f32(out_size)
    if math.isnan(ratio):
        return low
    return int(min(max(math.ceil(ratio), low), high))


def _coordinates(desc, first, size, out_size: int, count: int) -> list[list[np.float32]]:
    """coords[o][k]: the input coordinate of sample k of output element o, in float32."""
    in_off, out_off, corners = _offsets(desc)
    total = f32(out_size * count)
    if corners and total == 1:
        return [[f32(f32(first + f32(size * f32(0.5))) - f32(in_off))]]
    step = f32(size / f32(total - 1)) if corners else f32(size / total)
    coords = []
    for o in range(out_size):
        row = []
        for k in range(count):
            s = f32(o * count + k)
            row.append(f32(f32(f32(f32(s - f32(out_off)) * step) + first) - f32(in_off)))
        coords.append(row)
    return coords


def _read(desc, image: np.ndarray, y: float, xc: float) -> float:
    """interpolate2D of one channel at (y, x) in float64, or None outside the input."""
    h, w = image.shape
    if not (-1 <= y <= h and -1 <= xc <= w):
        return None
    y, xc = min(max(y, 0.0), h - 1), min(max(xc, 0.0), w - 1)
    if desc.interpolation_mode.name == "NEAREST_NEIGHBOR":
        return float(image[int(np.round(y)), int(np.round(xc))])  # np.round: halves to even
    y0, x0 = math.floor(y), math.floor(xc)
    y1, x1 = min(y0 + 1, h - 1), min(x0 + 1, w - 1)
    ly, lx = y - y0, xc - x0
    return (
        (1 - ly) * (1 - lx) * float(image[y0, x0])
        + (1 - ly) * lx * float(image[y0, x1])
        + ly * (1 - lx) * float(image[y1, x0])
        + ly * lx * float(image[y1, x1])
    )


def roi_align(
    desc: Any, x: np.ndarray, rois: np.ndarray, batch: np.ndarray
) -> tuple[np.ndarray, ...]:
    n, c, h, w = x.shape
    oh, ow = desc.output_tensor.sizes[2:4]
    table = rois.reshape(-1, 4)
    indices = batch.reshape(-1)
    out = np.zeros((table.shape[0], c, oh, ow), np.float64)
    oob = float(f32(desc.out_of_bounds_input_value))
    sx, sy = f32(desc.spatial_scale_x), f32(desc.spatial_scale_y)
    for r, (rx1, ry1, rx2, ry2) in enumerate(table):
        x1, x2 = f32(rx1) * sx, f32(rx2) * sx
        y1, y2 = f32(ry1) * sy, f32(ry2) * sy
        size_x, size_y = f32(x2 - x1), f32(y2 - y1)
        count_x = _count(desc, size_x, ow, w)
        count_y = _count(desc, size_y, oh, h)
        xs = _coordinates(desc, x1, size_x, ow, count_x)
        ys = _coordinates(desc, y1, size_y, oh, count_y)
        b = int(indices[r])
        for ch in range(c):
            image = x[b, ch].astype(np.float64) if b < n else None
            for oy in range(oh):
                for ox in range(ow):
                    samples = []
                    for yc in ys[oy]:
                        for xc in xs[ox]:
                            value = None if image is None else _read(desc, image, yc, xc)
                            samples.append(oob if value is None else value)
                    if desc.reduction_function.name == "MAX":
                        out[r, ch, oy, ox] = max(samples)
                    else:
                        out[r, ch, oy, ox] = sum(samples) / len(samples)
    return (out.astype(x.dtype),)


REFERENCES = {
    "DML_OPERATOR_ROI_POOLING": roi_pooling,
    "DML_OPERATOR_ROI_ALIGN": roi_align,
    "DML_OPERATOR_ROI_ALIGN1": roi_align,
}
