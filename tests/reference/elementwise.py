"""NumPy references of the element-wise math operators, from their DML_ELEMENT_WISE_* pages.

Integer results wrap around (two's complement); FLOAT16 is computed in float64 and rounded once.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .activation import activation


def _scale_bias(x: np.ndarray, sb: Any) -> np.ndarray:
    if sb is None:
        return x
    # g(x) = x * Scale + Bias, the FLOAT members read as float32.
    w = x.astype(np.float64)
    return (w * np.float64(np.float32(sb.scale)) + np.float64(np.float32(sb.bias))).astype(x.dtype)


def identity(desc: Any, x: np.ndarray):
    return (_scale_bias(x, desc.scale_bias).astype(desc.output_tensor.dtype),)


def _wrap(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Python-integer (exact) results wrapped into ``dtype`` two's complement."""
    dtype = np.dtype(dtype)
    bits = 8 * dtype.itemsize
    wrapped = [int(v) % (1 << bits) for v in values.ravel()]
    if dtype.kind == "i":
        wrapped = [v - (1 << bits) if v >= 1 << (bits - 1) else v for v in wrapped]
    return np.array(wrapped, dtype=dtype).reshape(values.shape)


def add(desc: Any, a: np.ndarray, b: np.ndarray):
    # f(a, b) = a + b
    out = desc.output_tensor.dtype
    if a.dtype.kind in "iu":
        return (_wrap(a.astype(object) + b.astype(object), out),)
    return ((a.astype(np.float64) + b.astype(np.float64)).astype(out),)


def add1(desc: Any, a: np.ndarray, b: np.ndarray):
    # f(a, b) = FusedActivation(a + b)
    (y,) = add(desc, a, b)
    return (activation(desc.fused_activation, y),)


REFERENCES = {
    "DML_OPERATOR_ELEMENT_WISE_ADD1": add1,
    "DML_OPERATOR_ELEMENT_WISE_ADD": add,
    "DML_OPERATOR_ELEMENT_WISE_IDENTITY": identity,
}
