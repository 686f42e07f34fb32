"""NumPy reference of TOP_K and TOP_K1, from DirectML's pages for DML_TOP_K_OPERATOR_DESC and
DML_TOP_K1_OPERATOR_DESC (paraphrased):

- A sequence is the set of elements along Axis for one position of every other dimension. From
  each, the K largest (TOP_K, TOP_K1 DECREASING; listed largest first) or the K smallest (TOP_K1
  INCREASING; smallest first) are written, with their positions in the sequence (0 = its first
  element). Equal values are listed by ascending position, in either direction.
- What the pages leave open, as docs/semantics.md fixes it: -0.0 equals +0.0 (Python's float
  comparison), and NaN is the extreme of the search (above +inf for the largest, below -inf for
  the smallest), NaNs among themselves by position.

Each sequence is sorted here with Python's stable ``sorted`` on a key built from the element's
value and position; nothing is shared with the lowering.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np


def _direction(desc: Any) -> str:
    direction = getattr(desc, "axis_direction", "DECREASING")
    return getattr(direction, "name", direction)


def _key(value: Any, position: int, largest: bool) -> tuple:
    if isinstance(value, float) and math.isnan(value):
        return (0, 0, position)  # NaN first in either direction
    return (1, -value if largest else value, position)


def top_k(desc: Any, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    axis, k = desc.axis, desc.k
    largest = _direction(desc) == "DECREASING"
    out_shape = x.shape[:axis] + (k,) + x.shape[axis + 1 :]
    values = np.empty(out_shape, x.dtype)
    index_dtype = np.dtype(desc.output_index_tensor.data_type.name.lower())
    indices = np.empty(out_shape, index_dtype)
    others = [range(s) for d, s in enumerate(x.shape) if d != axis]
    for rest in itertools.product(*others):

        def at(i: int, rest: tuple = rest) -> tuple:
            return rest[:axis] + (i,) + rest[axis:]

        sequence = [(x[at(i)].item(), i) for i in range(x.shape[axis])]
        chosen = sorted(sequence, key=lambda e: _key(e[0], e[1], largest))[:k]
        for j, (_, i) in enumerate(chosen):
            values[at(j)] = x[at(i)]
            indices[at(j)] = i
    return values, indices


REFERENCES = {"DML_OPERATOR_TOP_K": top_k, "DML_OPERATOR_TOP_K1": top_k}
