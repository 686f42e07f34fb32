"""What the training modules share (``training.py``, ``training_norm.py``, ``training_roi.py``,
``optimizer.py``): the forward description a gradient operator stands for, validated by the
forward operator's rules in the gradient's member names, and ``jax.vjp`` of a forward
lowering."""

from __future__ import annotations

import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..errors import Validator
from ..tensor import TensorDesc


class AsForward(Validator):
    """A validator for the forward description of a gradient operator: the forward operator's
    rules, failing with the gradient operator's prefix and member names (``names`` maps the
    forward tensor members, InputTensor and OutputTensor, to the gradient's)."""

    def __init__(self, v: Validator, names: dict[str, str]):
        super().__init__(v.prefix, v.level)
        self.path_prefix = v.path_prefix
        self._names = names
        self._pattern = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")

    def _rename(self, text: str) -> str:
        return self._pattern.sub(lambda m: self._names[m.group(1)], text)

    def fail(self, path: str, message: str):
        super().fail(self._rename(path), self._rename(message))


def forward_rules(v: Validator, validate, forward: Any, names: dict[str, str]) -> None:
    """Runs the forward operator's ``validate`` on ``forward`` in the gradient's names."""
    validate(forward, AsForward(v, names))


# What the forward InputTensor / OutputTensor are called in most gradient operators.
GRAD_NAMES = {"InputTensor": "OutputGradientTensor", "OutputTensor": "InputGradientTensor"}


def input_gradient_like(d: Any, t: TensorDesc) -> tuple[TensorDesc, ...]:
    """One output gradient: ``t``'s sizes in InputGradientTensor's data type."""
    return (t.like(data_type=d.input_gradient_tensor.data_type),)


def zeros_of(t: TensorDesc, dtype):
    return jnp.zeros(t.sizes, dtype)


def vjp_of(f, primals: tuple, cotangent) -> tuple:
    """The cotangents of ``f``'s inputs for ``cotangent`` on its output."""
    return jax.vjp(f, *primals)[1](cotangent)


def dml_float(value: float, like):
    """A DML FLOAT member as a constant of the compute type."""
    return jnp.asarray(np.float32(value), like.dtype)


def infer_like_gradient(d: Any) -> tuple[TensorDesc, ...]:
    """One output gradient: InputGradientTensor's sizes and type."""
    return (d.input_gradient_tensor.like(),)
