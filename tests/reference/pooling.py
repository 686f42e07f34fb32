"""NumPy reference of the pooling operators, from DirectML's pages for
DML_{AVERAGE,LP,MAX}_POOLING*_OPERATOR_DESC and DML_MAX_UNPOOLING_OPERATOR_DESC (paraphrased):

- InputTensor is {N, C, spatial...}. A window of WindowSize points, Dilations apart (1 for the
  variants without Dilations), moves in steps of Strides over the input padded by StartPadding
  before and EndPadding after each spatial dimension; output position o of dimension i starts at
  padded coordinate o * Strides[i], i.e. input coordinate o * Strides[i] - StartPadding[i].
- AVERAGE: the window's input values summed, divided by prod(WindowSize) with IncludePadding,
  else by how many window points lie on the input (dml_jax: 0 such points give 0).
- LP: (sum over the window's input points of |x|^P)^(1/P).
- MAX: the largest input value of the window (NaN counts as the largest); OutputIndicesTensor
  gets its flat row-major index into the whole InputTensor, the first in window order among
  equal values (-0.0 equals +0.0). dml_jax: a window with no input point gives the type's lowest
  value and the index type's largest value.
- MAX_UNPOOLING: a zero OutputTensor; input element j is written at flat output index
  IndicesTensor[j] if it is in range (else nowhere); of repeated indices the last j wins.

Direct loops over every output position and window point. Sums run in float64 (an integer P
power as a Python float), rounded once to the tensor type.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np


def _geometry(desc: Any, spatial: tuple[int, ...]):
    n = len(desc.strides)
    dilations = tuple(getattr(desc, "dilations", (1,) * n))
    outputs = tuple(
        (size + s0 + s1 - d * (w - 1) - 1) // step + 1
        for size, s0, s1, d, w, step in zip(
            spatial, desc.start_padding, desc.end_padding, dilations, desc.window_size, desc.strides
        )
    )
    return dilations, outputs


def _window(desc: Any, dilations, spatial, o: tuple) -> list[tuple[int, ...] | None]:
    """The input coordinates of each window point at output position ``o``, in row-major
    window order; None for a point in the padding."""
    out = []
    for point in itertools.product(*(range(w) for w in desc.window_size)):
        at = tuple(
            o[i] * desc.strides[i] - desc.start_padding[i] + point[i] * dilations[i]
            for i in range(len(spatial))
        )
        out.append(at if all(0 <= a < s for a, s in zip(at, spatial)) else None)
    return out


def _pool(desc: Any, x: np.ndarray, per_window) -> np.ndarray:
    n, c, *spatial = x.shape
    spatial = tuple(spatial)
    dilations, outputs = _geometry(desc, spatial)
    out = np.zeros((n, c, *outputs), np.float64)
    for b, ch in itertools.product(range(n), range(c)):
        for o in itertools.product(*(range(k) for k in outputs)):
            points = _window(desc, dilations, spatial, o)
            values = [x[(b, ch, *p)] for p in points if p is not None]
            out[(b, ch, *o)] = per_window(values, len(points))
    return out


def average_pooling(desc: Any, x: np.ndarray) -> tuple[np.ndarray]:
    def mean(values, points):
        total = sum(float(v) for v in values)
        divisor = points if desc.include_padding else len(values)
        return total / divisor if divisor else 0.0

    return (_pool(desc, x, mean).astype(x.dtype),)


def lp_pooling(desc: Any, x: np.ndarray) -> tuple[np.ndarray]:
    def norm(values, points):
        return sum(abs(float(v)) ** desc.p for v in values) ** (1.0 / desc.p)

    return (_pool(desc, x, norm).astype(x.dtype),)


def _is_greater(a, b) -> bool:
    """a > b with NaN the largest (two NaNs are equal)."""
    if isinstance(a, float) or np.issubdtype(type(a), np.floating):
        if np.isnan(a):
            return not np.isnan(b)
        if np.isnan(b):
            return False
    return a > b


def max_pooling(desc: Any, x: np.ndarray) -> tuple[np.ndarray, ...]:
    n, c, *spatial = x.shape
    spatial = tuple(spatial)
    dilations, outputs = _geometry(desc, spatial)
    values = np.zeros((n, c, *outputs), x.dtype)
    indices_desc = getattr(desc, "output_indices_tensor", None)
    index_dtype = np.dtype(indices_desc.data_type.name.lower()) if indices_desc else np.uint32
    indices = np.zeros((n, c, *outputs), index_dtype)
    lowest = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    for b, ch in itertools.product(range(n), range(c)):
        for o in itertools.product(*(range(k) for k in outputs)):
            best, best_index = None, np.iinfo(index_dtype).max
            for p in _window(desc, dilations, spatial, o):
                if p is None:
                    continue
                v = x[(b, ch, *p)]
                if best is None or _is_greater(v, best):
                    best = v
                    best_index = np.ravel_multi_index((b, ch, *p), x.shape)
            values[(b, ch, *o)] = lowest if best is None else best
            indices[(b, ch, *o)] = best_index
    return (values, indices) if indices_desc is not None else (values,)


def max_unpooling(desc: Any, x: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray]:
    sizes = tuple(desc.output_tensor.sizes)
    out = np.zeros(math.prod(sizes), x.dtype)
    for value, target in zip(x.ravel(), idx.ravel()):
        if int(target) < out.size:
            out[int(target)] = value
    return (out.reshape(sizes),)


REFERENCES = {
    "DML_OPERATOR_AVERAGE_POOLING": average_pooling,
    "DML_OPERATOR_AVERAGE_POOLING1": average_pooling,
    "DML_OPERATOR_LP_POOLING": lp_pooling,
    "DML_OPERATOR_LP_POOLING1": lp_pooling,
    "DML_OPERATOR_MAX_POOLING": max_pooling,
    "DML_OPERATOR_MAX_POOLING1": max_pooling,
    "DML_OPERATOR_MAX_POOLING2": max_pooling,
    "DML_OPERATOR_MAX_UNPOOLING": max_unpooling,
}
