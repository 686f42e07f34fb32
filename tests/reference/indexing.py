"""NumPy references of the gathers, scatters, ONE_HOT and NONZERO_COORDINATES, from DirectML's
pages for DML_GATHER_OPERATOR_DESC, DML_GATHER_ELEMENTS_OPERATOR_DESC,
DML_GATHER_ND(1)_OPERATOR_DESC, DML_SCATTER_OPERATOR_DESC, DML_SCATTER_ND_OPERATOR_DESC,
DML_ONE_HOT_OPERATOR_DESC and DML_NONZERO_COORDINATES_OPERATOR_DESC (paraphrased), element by
element with plain loops.

- Every tensor has the same DimensionCount; meaningful dimensions are the trailing ones, and a
  derived coordinate list is right-aligned with the output's (leading positions dropped or
  taken as 0).
- An index of a signed type below 0 counts from the end of its dimension (FL 3_0 and later).
- dml_jax's choices where DirectML leaves the result undefined (docs/semantics.md): an index
  still out of range selects nothing (a gather reads 0, a scatter skips the update, ONE_HOT keeps
  OffValue, as its page says); repeated scatter indices: updates are applied in row-major order,
  so the last one wins; NONZERO_COORDINATES rows past the count are 0.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np


def _resolve(index: int, size: int) -> int | None:
    """The position an index names in a dimension of ``size``, or None when out of range."""
    index = int(index)
    if index < 0:
        index += size  # only signed index types hold negative values
    return index if 0 <= index < size else None


def _all_coordinates(shape):
    return itertools.product(*(range(s) for s in shape))


def _align(coords: tuple[int, ...], length: int) -> tuple[int, ...]:
    """An output coordinate right-aligned into a list of ``length`` positions."""
    extra = length - len(coords)
    return (0,) * extra + coords if extra >= 0 else coords[-extra:]


def gather(desc: Any, x: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, ...]:
    rank, axis, k = x.ndim, desc.axis, desc.index_dimensions
    out = np.zeros(desc.output_tensor.sizes, x.dtype)
    for o in _all_coordinates(out.shape):
        # Output coordinates: input dims before Axis, the k index dims, input dims after Axis.
        f = _align(o, rank + k - 1)
        at = _align(f[axis : axis + k], rank)  # the index tensor's leading dims are 1
        position = _resolve(indices[at], x.shape[axis])
        if position is not None:
            out[o] = x[f[:axis] + (position,) + f[axis + k :]]
    return (out,)


def gather_elements(desc: Any, x: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, ...]:
    out = np.zeros(indices.shape, x.dtype)
    for o in _all_coordinates(out.shape):
        position = _resolve(indices[o], x.shape[desc.axis])
        if position is not None:
            source = list(o)
            source[desc.axis] = position
            out[o] = x[tuple(source)]
    return (out,)


def _meaningful(a: np.ndarray, count: int) -> np.ndarray:
    return a.reshape(a.shape[a.ndim - count :])


def _nd_source(x: np.ndarray, tuple_: np.ndarray, batch: tuple[int, ...]) -> tuple | None:
    """The leading input coordinates an index tuple selects (after the batch ones)."""
    coords = []
    for axis_offset, value in enumerate(tuple_):
        position = _resolve(value, x.shape[len(batch) + axis_offset])
        if position is None:
            return None
        coords.append(position)
    return batch + tuple(coords)


def gather_nd(desc: Any, x: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, ...]:
    xm = _meaningful(x, desc.input_dimension_count)
    im = _meaningful(indices, desc.indices_dimension_count)
    b = getattr(desc, "batch_dimension_count", 0)
    k = im.shape[-1]
    rest = xm.shape[b + k :]
    full = np.zeros(im.shape[:-1] + rest, x.dtype)
    for j in _all_coordinates(im.shape[:-1]):
        source = _nd_source(xm, im[j], j[:b])
        if source is not None:
            full[j] = xm[source]
    return (full.reshape(desc.output_tensor.sizes),)


def scatter(desc: Any, x: np.ndarray, indices: np.ndarray, updates: np.ndarray):
    out = x.copy()
    for u in _all_coordinates(updates.shape):  # row-major: a later update overwrites
        position = _resolve(indices[u], x.shape[desc.axis])
        if position is not None:
            target = list(u)
            target[desc.axis] = position
            out[tuple(target)] = updates[u]
    return (out,)


def scatter_nd(desc: Any, x: np.ndarray, indices: np.ndarray, updates: np.ndarray):
    xm = _meaningful(x, desc.input_dimension_count).copy()
    im = _meaningful(indices, desc.indices_dimension_count)
    k = im.shape[-1]
    blocks = updates.reshape(im.shape[:-1] + xm.shape[k:])
    for j in _all_coordinates(im.shape[:-1]):
        target = _nd_source(xm, im[j], ())
        if target is not None:
            xm[target] = blocks[j]
    return (xm.reshape(x.shape),)


def one_hot(desc: Any, indices: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, ...]:
    off = values.flat[0]
    # OnValue: element 1 along the fastest-changing dimension of size > 1.
    fastest = [d for d, s in enumerate(values.shape) if s > 1][-1]
    on = values[tuple(1 if d == fastest else 0 for d in range(values.ndim))]
    out = np.full(desc.output_tensor.sizes, off, values.dtype)
    depth = out.shape[desc.axis]
    for o in _all_coordinates(indices.shape):
        position = _resolve(indices[o], depth)
        if position is not None:
            target = list(o)
            target[desc.axis] = position
            out[tuple(target)] = on
    return (out,)


def nonzero_coordinates(desc: Any, x: np.ndarray) -> tuple[np.ndarray, ...]:
    coords_sizes = desc.output_coordinates_tensor.sizes
    n = coords_sizes[-1]
    table = np.zeros((x.size, n), np.uint32)
    count = 0
    for c in _all_coordinates(x.shape):  # increasing element order
        if x[c] != 0:  # -0.0 == 0; NaN != 0
            table[count] = c[x.ndim - n :]
            count += 1
    count_out = np.full(desc.output_count_tensor.sizes, count, np.uint32)
    return count_out, table.reshape(coords_sizes)


REFERENCES = {
    "DML_OPERATOR_GATHER": gather,
    "DML_OPERATOR_GATHER_ELEMENTS": gather_elements,
    "DML_OPERATOR_GATHER_ND": gather_nd,
    "DML_OPERATOR_GATHER_ND1": gather_nd,
    "DML_OPERATOR_SCATTER": scatter,
    "DML_OPERATOR_SCATTER_ND": scatter_nd,
    "DML_OPERATOR_ONE_HOT": one_hot,
    "DML_OPERATOR_NONZERO_COORDINATES": nonzero_coordinates,
}
