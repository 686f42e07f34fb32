"""NumPy references of the scans and generators, from DirectML's pages for
DML_CUMULATIVE_SUMMATION_OPERATOR_DESC, DML_CUMULATIVE_PRODUCT_OPERATOR_DESC,
DML_FILL_VALUE_CONSTANT_OPERATOR_DESC, DML_FILL_VALUE_SEQUENCE_OPERATOR_DESC,
DML_DIAGONAL_MATRIX_OPERATOR_DESC and DML_DIAGONAL_MATRIX1_OPERATOR_DESC (paraphrased).

- CUMULATIVE_*: each line along Axis is walked in AxisDirection's order (INCREASING: index 0 up;
  DECREASING: last index down) keeping a running tally (0 for sums, 1 for products); an
  inclusive scan takes the element in and then writes the tally, an exclusive one writes the
  tally first. Here the tally of a float line is kept in float64 and each output rounded once
  (the device sums in another order: tests compare floats with a tolerance); an integer tally is
  a Python int reduced modulo 2**bits (two's complement wrap), exact.
- FILL_VALUE_CONSTANT: every element is Value. FILL_VALUE_SEQUENCE: the element at flat
  (row-major) position i is ValueStart + i * ValueDelta; for integers modulo 2**bits (the
  page's UINT8 example steps 10 by -2 to 8, 6, 4); for floats computed in float64, rounded once.
- DIAGONAL_MATRIX: Value where column == row + Offset, else 0; an integer output takes Value
  truncated toward zero (the page: 10.6 becomes 10).
- DIAGONAL_MATRIX1: with topX = column - row, Value where
  (End >= Begin) xor (topX >= Begin) xor (topX < End), else the input element (or 0).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np


def _name(member: Any) -> str:
    return getattr(member, "name", member)


def _wrap(n: int, dtype: np.dtype) -> Any:
    bits = dtype.itemsize * 8
    n %= 2**bits
    if dtype.kind == "i" and n >= 2 ** (bits - 1):
        n -= 2**bits
    return dtype.type(n)


def _scan(desc: Any, x: np.ndarray, product: bool, exclusive: bool) -> tuple[np.ndarray, ...]:
    out = np.empty_like(x)
    axis = desc.axis
    n = x.shape[axis]
    order = range(n) if _name(desc.axis_direction) == "INCREASING" else range(n - 1, -1, -1)
    rest = [range(s) for i, s in enumerate(x.shape) if i != axis]
    for index in itertools.product(*rest):
        tally: Any = 1 if product else 0
        for k in order:
            at = index[:axis] + (k,) + index[axis:]
            value = int(x[at]) if x.dtype.kind in "iu" else float(x[at])
            if not exclusive:
                tally = tally * value if product else tally + value
            out[at] = _wrap(tally, x.dtype) if x.dtype.kind in "iu" else x.dtype.type(tally)
            if exclusive:
                tally = tally * value if product else tally + value
    return (out,)


def cumulative_summation(desc: Any, x: np.ndarray) -> tuple[np.ndarray, ...]:
    return _scan(desc, x, product=False, exclusive=bool(desc.has_exclusive_sum))


def cumulative_product(desc: Any, x: np.ndarray) -> tuple[np.ndarray, ...]:
    return _scan(desc, x, product=True, exclusive=bool(desc.has_exclusive_product))


def _dtype(desc: Any) -> np.dtype:
    return np.dtype(_name(desc.output_tensor.data_type).lower())


def fill_value_constant(desc: Any) -> tuple[np.ndarray, ...]:
    dtype = _dtype(desc)
    return (np.full(desc.output_tensor.sizes, dtype.type(desc.value), dtype),)


def fill_value_sequence(desc: Any) -> tuple[np.ndarray, ...]:
    dtype = _dtype(desc)
    count = math.prod(desc.output_tensor.sizes)
    if dtype.kind == "f":
        start = float(dtype.type(desc.value_start))
        delta = float(dtype.type(desc.value_delta))
        flat = [dtype.type(start + i * delta) for i in range(count)]
    else:
        flat = [
            _wrap(int(desc.value_start) + i * int(desc.value_delta), dtype) for i in range(count)
        ]
    return (np.array(flat, dtype).reshape(desc.output_tensor.sizes),)


def _matrix_coordinates(shape: tuple[int, ...]):
    for index in itertools.product(*(range(s) for s in shape)):
        yield index, index[-1], index[-2]  # (coordinate, x = column, y = row)


def diagonal_matrix(desc: Any) -> tuple[np.ndarray, ...]:
    dtype = _dtype(desc)
    value = np.float32(desc.value)
    if dtype.kind != "f":
        info = np.iinfo(dtype)
        value = min(max(math.trunc(float(value)), int(info.min)), int(info.max))
    out = np.zeros(desc.output_tensor.sizes, dtype)
    for index, x, y in _matrix_coordinates(out.shape):
        if y + desc.offset == x:
            out[index] = value
    return (out,)


def diagonal_matrix1(desc: Any, *inputs: np.ndarray) -> tuple[np.ndarray, ...]:
    dtype = _dtype(desc)
    begin, end = desc.diagonal_fill_begin, desc.diagonal_fill_end
    out = inputs[0].copy() if inputs else np.zeros(desc.output_tensor.sizes, dtype)
    for index, x, y in _matrix_coordinates(out.shape):
        top_x = x - y
        if (end >= begin) ^ (top_x >= begin) ^ (top_x < end):
            out[index] = dtype.type(desc.value)
    return (out,)


REFERENCES = {
    "DML_OPERATOR_CUMULATIVE_SUMMATION": cumulative_summation,
    "DML_OPERATOR_CUMULATIVE_PRODUCT": cumulative_product,
    "DML_OPERATOR_FILL_VALUE_CONSTANT": fill_value_constant,
    "DML_OPERATOR_FILL_VALUE_SEQUENCE": fill_value_sequence,
    "DML_OPERATOR_DIAGONAL_MATRIX": diagonal_matrix,
    "DML_OPERATOR_DIAGONAL_MATRIX1": diagonal_matrix1,
}
