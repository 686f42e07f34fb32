"""NumPy reference of UNFOLD (im2col) and FOLD (col2im), from DirectML's pages for
DML_UNFOLD_OPERATOR_DESC and DML_FOLD_OPERATOR_DESC (paraphrased):

- The image tensor is {N, C, spatial...} with DimensionCount spatial dimensions; the column
  tensor is {N, C * prod(WindowSizes), BlockCount}. The image is padded with StartPadding zeros
  before and EndPadding zeros after each spatial dimension; a window of WindowSizes points spaced
  Dilations apart slides over it in steps of Strides, BlocksPerDimension[d] =
  (size + start + end - Dilations[d] * (WindowSizes[d] - 1) - 1) // Strides[d] + 1 positions per
  dimension, BlockCount their product.
- Column row c * prod(WindowSizes) + w holds channel c at window point w, column b the window at
  block b (w and b row-major over their dimensions, as the pages' examples list them).
- UNFOLD copies every window point (0 where it falls in the padding); FOLD adds every column
  element onto the image element its window point covers (points in the padding are dropped),
  summing where windows overlap.

Loops over every (batch, channel, window point, block); FOLD sums a float in float64 and rounds
once (the device adds in another order: tests compare floats with a tolerance), an integer as a
Python int wrapped to the type's width (two's complement).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np


def _geometry(desc: Any, spatial: tuple[int, ...]):
    blocks = tuple(
        (size + s0 + s1 - dil * (w - 1) - 1) // step + 1
        for size, s0, s1, dil, w, step in zip(
            spatial,
            desc.start_padding,
            desc.end_padding,
            desc.dilations,
            desc.window_sizes,
            desc.strides,
        )
    )
    points = list(itertools.product(*(range(w) for w in desc.window_sizes)))
    positions = list(itertools.product(*(range(b) for b in blocks)))
    return points, positions


def _image_index(desc: Any, point: tuple, block: tuple, spatial: tuple) -> tuple | None:
    """The image element window point ``point`` of block ``block`` covers, None in padding."""
    at = []
    for d, size in enumerate(spatial):
        i = block[d] * desc.strides[d] + point[d] * desc.dilations[d] - desc.start_padding[d]
        if not 0 <= i < size:
            return None
        at.append(i)
    return tuple(at)


def unfold(desc: Any, x: np.ndarray) -> tuple[np.ndarray]:
    n, c, *spatial = x.shape
    spatial = tuple(spatial)
    points, positions = _geometry(desc, spatial)
    out = np.zeros((n, c * len(points), len(positions)), x.dtype)
    for b in range(n):
        for ch in range(c):
            for w, point in enumerate(points):
                for col, block in enumerate(positions):
                    at = _image_index(desc, point, block, spatial)
                    if at is not None:
                        out[b, ch * len(points) + w, col] = x[(b, ch) + at]
    return (out,)


def _wrap(total: int, dtype: np.dtype) -> Any:
    bits = dtype.itemsize * 8
    total %= 2**bits
    if dtype.kind == "i" and total >= 2 ** (bits - 1):
        total -= 2**bits
    return total


def fold(desc: Any, x: np.ndarray) -> tuple[np.ndarray]:
    spatial = tuple(desc.output_tensor.sizes[2:])
    points, positions = _geometry(desc, spatial)
    n, rows, _ = x.shape
    c = rows // math.prod(desc.window_sizes)
    integer = x.dtype.kind in "iu"
    totals = np.zeros((n, c) + spatial, dtype=object)
    totals[...] = 0 if integer else 0.0
    for b in range(n):
        for ch in range(c):
            for w, point in enumerate(points):
                for col, block in enumerate(positions):
                    at = _image_index(desc, point, block, spatial)
                    if at is not None:
                        value = x[b, ch * len(points) + w, col].item()
                        totals[(b, ch) + at] += int(value) if integer else float(value)
    if integer:
        return (np.vectorize(lambda t: _wrap(t, x.dtype), otypes=[object])(totals).astype(x.dtype),)
    return (totals.astype(np.float64).astype(x.dtype),)


REFERENCES = {"DML_OPERATOR_UNFOLD": unfold, "DML_OPERATOR_FOLD": fold}
