"""NumPy references of the activation operators, from each DML_ACTIVATION_*_OPERATOR_DESC page.

FLOAT16 inputs are computed in float64 and rounded once to the output type (dml_jax computes them
in float32: the comparison tolerances allow for that). Each function returns a one-tuple.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _wide(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64) if x.dtype.kind == "f" else x


def _out(desc: Any, y: np.ndarray) -> tuple[np.ndarray]:
    return (np.asarray(y).astype(desc.output_tensor.dtype),)


def relu(desc: Any, x: np.ndarray):
    # f(x) = max(0, x); NaN stays NaN (dml_jax's documented choice).
    w = _wide(x)
    return _out(desc, np.where(np.isnan(w) if w.dtype.kind == "f" else False, w, np.maximum(w, 0)))


def elu(desc: Any, x: np.ndarray):
    # f(x) = x if x >= 0 else Alpha * (exp(x) - 1)
    w = _wide(x)
    with np.errstate(over="ignore"):
        return _out(desc, np.where(w >= 0, w, np.float64(np.float32(desc.alpha)) * (np.exp(w) - 1)))


def linear(desc: Any, x: np.ndarray):
    # f(x) = Alpha * x + Beta
    w = _wide(x)
    return _out(desc, np.float32(desc.alpha) * w + np.float32(desc.beta))


def sigmoid(desc: Any, x: np.ndarray):
    # f(x) = 1 / (1 + exp(-x))
    w = _wide(x)
    with np.errstate(over="ignore"):
        return _out(desc, 1.0 / (1.0 + np.exp(-w)))


REFERENCES = {
    "DML_OPERATOR_ACTIVATION_ELU": elu,
    "DML_OPERATOR_ACTIVATION_LINEAR": linear,
    "DML_OPERATOR_ACTIVATION_RELU": relu,
    "DML_OPERATOR_ACTIVATION_SIGMOID": sigmoid,
}


def activation(act: Any, y: np.ndarray) -> np.ndarray:
    """A fused activation applied to ``y`` (the op's result, already in the output type)."""
    if act is None:
        return y
    tensor = type("Tensor", (), {"dtype": y.dtype})()
    return REFERENCES[act.operator_type](_Filled(act, tensor), y)[0]


class _Filled:
    """A fused activation's desc with its output tensor's dtype (its tensors are None)."""

    def __init__(self, desc: Any, tensor: Any):
        self._desc, self.output_tensor, self.input_tensor = desc, tensor, tensor

    def __getattr__(self, name: str) -> Any:
        return getattr(self._desc, name)
