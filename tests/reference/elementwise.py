"""NumPy references of the element-wise math operators, from their DML_ELEMENT_WISE_* pages.

Integer results wrap around (two's complement); FLOAT16 is computed in float64 and rounded once.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _scale_bias(x: np.ndarray, sb: Any) -> np.ndarray:
    if sb is None:
        return x
    # g(x) = x * Scale + Bias, the FLOAT members read as float32.
    w = x.astype(np.float64)
    return (w * np.float64(np.float32(sb.scale)) + np.float64(np.float32(sb.bias))).astype(x.dtype)


def identity(desc: Any, x: np.ndarray):
    return (_scale_bias(x, desc.scale_bias).astype(desc.output_tensor.dtype),)


REFERENCES = {
    "DML_OPERATOR_ELEMENT_WISE_IDENTITY": identity,
}
