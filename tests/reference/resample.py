"""NumPy reference of UPSAMPLE_2D, RESAMPLE, RESAMPLE1, RESAMPLE2 and RESAMPLE3, from DirectML's
pages (paraphrased):

- RESAMPLE1/2/3 relate coordinates by output = (input + InputPixelOffset) * Scale +
  OutputPixelOffset per dimension; RESAMPLE is RESAMPLE1 with input offsets 0.5 and output
  offsets -0.5 (pixel centres); UPSAMPLE_2D scales only the last two dimensions (height, width)
  by the integer ScaleSize, at pixel centres.
- NEAREST_NEIGHBOR picks the input nearest to the mapped coordinate: halves round up
  (floor(x + 0.5), as ONNX Runtime's DirectML Resize documents it) for UPSAMPLE_2D, RESAMPLE and
  RESAMPLE1; RESAMPLE2/3 round toward decreasing (floor) or increasing (ceil) coordinates by
  RoundingDirection.
- LINEAR takes the weighted average of the two neighbours per dimension (2^rank inputs in
  all); coordinates past an edge read the edge element.
- RESAMPLE3's Antialiased (LINEAR, Scale < 1): every input i within 1 / Scale of x contributes
  max(0, 1 - |i - x| * Scale), normalised to sum 1 (ONNX Resize's antialias), edges repeated.

Each output element is computed on its own: its coordinate per dimension, the contributing
(index, weight) pairs per dimension, and the sum over their Cartesian product in float64; floats
round once to the tensor type, INT8/UINT8 round to nearest even.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np


def _parameters(desc: Any, rank: int):
    """(scales, input offsets, output offsets, rounding or None, antialiased, linear)."""
    kind = desc.operator_type
    linear = desc.interpolation_mode.name == "LINEAR"
    if kind == "DML_OPERATOR_UPSAMPLE_2D":
        scales = [1.0] * (rank - 2) + [desc.scale_size.height, desc.scale_size.width]
        return scales, [0.5] * rank, [-0.5] * rank, None, False, linear
    if kind == "DML_OPERATOR_RESAMPLE":
        return list(desc.scales), [0.5] * rank, [-0.5] * rank, None, False, linear
    rounding = getattr(desc, "rounding_direction", None)
    return (
        list(desc.scales),
        list(desc.input_pixel_offsets),
        list(desc.output_pixel_offsets),
        None if rounding is None else rounding.name,
        bool(getattr(desc, "antialiased", False)),
        linear,
    )


def _clamp(i: int, size: int) -> int:
    return min(max(i, 0), size - 1)


def _contributions(
    o: int, size: int, scale: float, in_off: float, out_off: float, rounding, antialiased, linear
):
    """[(input index, weight)] for output coordinate ``o`` along one dimension."""
    x = (o - out_off) / scale - in_off
    if not linear:
        if rounding is None:
            i = math.floor(x + 0.5)
        elif rounding == "DECREASING":
            i = math.floor(x)
        else:
            i = math.ceil(x)
        return [(_clamp(i, size), 1.0)]
    if antialiased and scale < 1:
        reach = 1.0 / scale
        pairs = []
        for i in range(math.floor(x - reach), math.ceil(x + reach) + 1):
            w = 1.0 - abs(i - x) * scale
            if w > 0:
                pairs.append((_clamp(i, size), w))
        total = sum(w for _, w in pairs)
        return [(i, w / total) for i, w in pairs]
    left = math.floor(x)
    frac = x - left
    return [(_clamp(left, size), 1.0 - frac), (_clamp(left + 1, size), frac)]


def resample(desc: Any, x: np.ndarray) -> tuple[np.ndarray]:
    rank = x.ndim
    scales, in_offs, out_offs, rounding, antialiased, linear = _parameters(desc, rank)
    out_shape = tuple(desc.output_tensor.sizes)
    data = x.astype(np.float64)
    out = np.empty(out_shape, np.float64)
    for index in itertools.product(*(range(n) for n in out_shape)):
        per_dim = [
            _contributions(
                index[d],
                x.shape[d],
                scales[d],
                in_offs[d],
                out_offs[d],
                rounding,
                antialiased,
                linear,
            )
            for d in range(rank)
        ]
        total = 0.0
        for combo in itertools.product(*per_dim):
            weight = 1.0
            for _, w in combo:
                weight *= w
            total += weight * data[tuple(i for i, _ in combo)]
        out[index] = total
    if np.issubdtype(x.dtype, np.integer):
        info = np.iinfo(x.dtype)
        out = np.clip(np.round(out), info.min, info.max)
    return (out.astype(x.dtype),)


REFERENCES = {
    "DML_OPERATOR_UPSAMPLE_2D": resample,
    "DML_OPERATOR_RESAMPLE": resample,
    "DML_OPERATOR_RESAMPLE1": resample,
    "DML_OPERATOR_RESAMPLE2": resample,
    "DML_OPERATOR_RESAMPLE3": resample,
}
