"""ADAM_OPTIMIZER: the page's update, in float32 (docs/training.md; docs/semantics.md,
"Training")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import jax.numpy as jnp
from jax import lax

from ..enums import FeatureLevel as L
from ..errors import Validator
from ..fields import (
    FLOAT,
    OperatorDesc,
    attribute,
    input_field,
    output_field,
)
from ..registry import Example, register
from ..support import DIMS4, F2, U32, rows
from ..tensor import TensorDesc
from ._common import wide
from ._training import (
    dml_float,
)

# ---------------------------------------------------------------------------------------------
# ADAM_OPTIMIZER


@dataclass(frozen=True)
class AdamOptimizerOperatorDesc(OperatorDesc):
    """DML_ADAM_OPTIMIZER_OPERATOR_DESC: one Adam step (FL 3_0).

    In float32, T the training step::

        M' = Beta1 * M + (1 - Beta1) * G
        V' = Beta2 * V + (1 - Beta2) * G * G
        Alpha = sqrt(1 - Beta2^T) / (1 - Beta1^T)
        X' = X - LearningRate * Alpha * M' / (sqrt(V') + Epsilon)

    The operator does not advance T. The page's formula read literally makes T = 0 give
    ``Alpha = 0 / 0`` (NaN parameters): count steps from 1 (as tensorflow-directml does).

    Fields:
        input_parameters_tensor, input_first_moment_tensor, input_second_moment_tensor,
            gradient_tensor: X, M, V and G, one data type and sizes (4-D).
        training_step_tensor: T, sizes {1, 1, 1, 1}; UINT32 (the page's member description)
            or the parameters' data type (its support table).
        output_parameters_tensor, output_first_moment_tensor, output_second_moment_tensor: X',
            M', V', the parameters' data type and sizes; each may alias its input.
        learning_rate, beta1, beta2, epsilon: DML FLOATs.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_ADAM_OPTIMIZER"
    input_parameters_tensor: TensorDesc = input_field()
    input_first_moment_tensor: TensorDesc = input_field()
    input_second_moment_tensor: TensorDesc = input_field()
    gradient_tensor: TensorDesc = input_field()
    training_step_tensor: TensorDesc = input_field()
    output_parameters_tensor: TensorDesc = output_field()
    output_first_moment_tensor: TensorDesc = output_field()
    output_second_moment_tensor: TensorDesc = output_field()
    learning_rate: float = attribute(FLOAT)
    beta1: float = attribute(FLOAT)
    beta2: float = attribute(FLOAT)
    epsilon: float = attribute(FLOAT)


def infer_adam(d: AdamOptimizerOperatorDesc) -> tuple[TensorDesc, ...]:
    return (d.input_parameters_tensor.like(),) * 3


def validate_adam(d: AdamOptimizerOperatorDesc, v: Validator) -> None:
    x = ("InputParametersTensor", d.input_parameters_tensor)
    alike = [
        ("InputFirstMomentTensor", d.input_first_moment_tensor),
        ("InputSecondMomentTensor", d.input_second_moment_tensor),
        ("GradientTensor", d.gradient_tensor),
    ]
    for attribute_ in ("data_type", "rank", "sizes"):
        v.same(attribute_, alike, x)
    t = d.training_step_tensor
    v.check(
        "TrainingStepTensor.DataType",
        t.data_type.name == "UINT32" or t.data_type is x[1].data_type,
        f"must be UINT32 or InputParametersTensor.DataType ({x[1].data_type.name}), "
        f"got {t.data_type.name}",
    )
    v.check(
        "TrainingStepTensor.Sizes",
        all(s == 1 for s in t.sizes),
        f"must all be 1 (a scalar), got {list(t.sizes)}",
    )


def lower_adam(d: AdamOptimizerOperatorDesc, x, m, v, g, step):
    w, m, v, g = (wide(a) for a in (x, m, v, g))
    one = jnp.ones((), w.dtype)
    b1, b2 = dml_float(d.beta1, w), dml_float(d.beta2, w)
    t = lax.reshape(step, ()).astype(w.dtype)
    m = b1 * m + (one - b1) * g
    v = b2 * v + (one - b2) * g * g
    alpha = lax.sqrt(one - lax.pow(b2, t)) / (one - lax.pow(b1, t))
    w = w - dml_float(d.learning_rate, w) * alpha * m / (lax.sqrt(v) + dml_float(d.epsilon, w))
    return tuple(a.astype(x.dtype) for a in (w, m, v))


_ADAM_TENSOR = {"DataType": "FLOAT32", "Sizes": [1, 1, 1, 2]}

register(
    AdamOptimizerOperatorDesc,
    infer=infer_adam,
    validate=validate_adam,
    lower=lower_adam,
    in_place=True,
    support=rows((L.FL_3_0, DIMS4, F2, F2, {"TrainingStepTensor": F2 | U32})),
    differentiable=lambda d: True,
    example=Example(
        {
            "type": "DML_OPERATOR_ADAM_OPTIMIZER",
            "desc": {
                "InputParametersTensor": _ADAM_TENSOR,
                "InputFirstMomentTensor": _ADAM_TENSOR,
                "InputSecondMomentTensor": _ADAM_TENSOR,
                "GradientTensor": _ADAM_TENSOR,
                "TrainingStepTensor": {"DataType": "UINT32", "Sizes": [1, 1, 1, 1]},
                "OutputParametersTensor": _ADAM_TENSOR,
                "OutputFirstMomentTensor": _ADAM_TENSOR,
                "OutputSecondMomentTensor": _ADAM_TENSOR,
                "LearningRate": 0.1,
                "Beta1": 0.9,
                "Beta2": 0.999,
                "Epsilon": 0.0,
            },
        },
        {
            "InputParametersTensor": [1, -1],
            "InputFirstMomentTensor": [0, 0],
            "InputSecondMomentTensor": [0, 0],
            "GradientTensor": [0.5, -4],
            "TrainingStepTensor": [1],
        },
        "the first step from zero moments moves each parameter by LearningRate against its "
        "gradient's sign",
    ),
)
