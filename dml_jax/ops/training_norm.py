"""Training, normalization: LOCAL_RESPONSE_NORMALIZATION_GRAD, BATCH_NORMALIZATION_GRAD and
BATCH_NORMALIZATION_TRAINING_GRAD, each the backward pass of its forward operator
(``normalization.py``) as ``training.py`` describes, except BATCH_NORMALIZATION_TRAINING_GRAD:
the page's formula with the given MeanTensor and VarianceTensor (the forward recomputes them
from the input; the two agree when they are the forward's outputs)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import jax.numpy as jnp
from jax import lax

from ..enums import FeatureLevel as L
from ..errors import Validator
from ..fields import (
    BOOL,
    FLOAT,
    UINT,
    OperatorDesc,
    attribute,
    input_field,
    output_field,
)
from ..registry import Example, register
from ..support import DIMS1_8, DIMS4, F2, rows
from ..tensor import TensorDesc
from ._common import same_tensors, wide
from ._training import (
    dml_float,
    forward_rules,
    infer_like_gradient,
    vjp_of,
)
from .normalization import (
    BatchNormalizationOperatorDesc,
    LocalResponseNormalizationOperatorDesc,
    lower_batch_norm,
    lower_lrn,
    validate_batch_norm,
    validate_lrn,
)

# ---------------------------------------------------------------------------------------------
# LOCAL_RESPONSE_NORMALIZATION_GRAD


@dataclass(frozen=True)
class LocalResponseNormalizationGradOperatorDesc(OperatorDesc):
    """DML_LOCAL_RESPONSE_NORMALIZATION_GRAD_OPERATOR_DESC: LRN's backward pass (FL 3_1).

    With ``y_i = x_i * B_i^-Beta``, ``B_i = Bias + Alpha / LocalSize * sum of x_j^2`` over i's
    window: ``dx_k = dy_k * B_k^-Beta - 2 * Alpha * Beta / LocalSize * x_k * sum over the
    windows i holding k of dy_i * x_i * B_i^(-Beta - 1)``. The window is LOCAL_RESPONSE_NORMALIZATION's
    (channels with CrossChannel, else a LocalSize x LocalSize square of height and width; the
    gradient page describes LocalSize the other way round, dml_jax follows the forward page).

    Fields:
        input_tensor: the forward input, {N, C, H, W}.
        input_gradient_tensor, output_gradient_tensor: InputTensor's data type and sizes.
        cross_channel, local_size, alpha, beta, bias: LOCAL_RESPONSE_NORMALIZATION's.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_LOCAL_RESPONSE_NORMALIZATION_GRAD"
    input_tensor: TensorDesc = input_field()
    input_gradient_tensor: TensorDesc = input_field()
    output_gradient_tensor: TensorDesc = output_field()
    cross_channel: bool = attribute(BOOL)
    local_size: int = attribute(UINT)
    alpha: float = attribute(FLOAT)
    beta: float = attribute(FLOAT)
    bias: float = attribute(FLOAT)


def lrn_forward(d: LocalResponseNormalizationGradOperatorDesc):
    """The LOCAL_RESPONSE_NORMALIZATION that LRN_GRAD differentiates."""
    return LocalResponseNormalizationOperatorDesc(
        d.input_tensor,
        d.input_gradient_tensor,
        cross_channel=d.cross_channel,
        local_size=d.local_size,
        alpha=d.alpha,
        beta=d.beta,
        bias=d.bias,
    )


def validate_lrn_grad(d: LocalResponseNormalizationGradOperatorDesc, v: Validator) -> None:
    same_tensors(d, v)
    validate_lrn(lrn_forward(d), v)


def lower_lrn_grad(d: LocalResponseNormalizationGradOperatorDesc, x, g):
    forward = lrn_forward(d)
    return vjp_of(lambda a: lower_lrn(forward, a)[0], (x,), g)


register(
    LocalResponseNormalizationGradOperatorDesc,
    infer=infer_like_gradient,
    validate=validate_lrn_grad,
    lower=lower_lrn_grad,
    support=rows((L.FL_3_1, DIMS4, F2)),
    example=Example(
        {
            "type": "DML_OPERATOR_LOCAL_RESPONSE_NORMALIZATION_GRAD",
            "desc": {
                "InputTensor": {"DataType": "FLOAT32", "Sizes": [1, 3, 1, 1]},
                "InputGradientTensor": {"DataType": "FLOAT32", "Sizes": [1, 3, 1, 1]},
                "OutputGradientTensor": {"DataType": "FLOAT32", "Sizes": [1, 3, 1, 1]},
                "CrossChannel": True,
                "LocalSize": 3,
                "Alpha": 3.0,
                "Beta": 1.0,
                "Bias": 1.0,
            },
        },
        {"InputTensor": [1, 2, 3], "InputGradientTensor": [1, 1, 1]},
        "LOCAL_RESPONSE_NORMALIZATION's example differentiated, all gradients 1",
    ),
)


# ---------------------------------------------------------------------------------------------
# BATCH_NORMALIZATION_GRAD / BATCH_NORMALIZATION_TRAINING_GRAD


@dataclass(frozen=True)
class BatchNormalizationGradOperatorDesc(OperatorDesc):
    """DML_BATCH_NORMALIZATION_GRAD_OPERATOR_DESC: BATCH_NORMALIZATION's backward pass with
    the statistics held fixed (FL 3_1).

    ``OutputGradient = InputGradient * Scale / sqrt(Variance + Epsilon)``;
    ``OutputScaleGradient = sum(InputGradient * (Input - Mean) / sqrt(Variance + Epsilon))``;
    ``OutputBiasGradient = sum(InputGradient)``; the sums run over the dimensions in which
    MeanTensor (and Scale, Variance) have size 1.

    Fields:
        input_tensor, input_gradient_tensor: the forward input and the incoming gradient.
        mean_tensor, variance_tensor, scale_tensor: equal sizes, each 1 or the input's.
        output_gradient_tensor: the input's sizes.
        output_scale_gradient_tensor, output_bias_gradient_tensor: MeanTensor's sizes.
        epsilon: added to the variance; optional (DirectML's schema makes it so), None is 0.
    Every tensor has the input's data type and DimensionCount.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_BATCH_NORMALIZATION_GRAD"
    input_tensor: TensorDesc = input_field()
    input_gradient_tensor: TensorDesc = input_field()
    mean_tensor: TensorDesc = input_field()
    variance_tensor: TensorDesc = input_field()
    scale_tensor: TensorDesc = input_field()
    output_gradient_tensor: TensorDesc = output_field()
    output_scale_gradient_tensor: TensorDesc = output_field()
    output_bias_gradient_tensor: TensorDesc = output_field()
    epsilon: float | None = attribute(FLOAT, default=None)


@dataclass(frozen=True)
class BatchNormalizationTrainingGradOperatorDesc(OperatorDesc):
    """DML_BATCH_NORMALIZATION_TRAINING_GRAD_OPERATOR_DESC: BATCH_NORMALIZATION_TRAINING's
    backward pass, the statistics depending on the input (FL 4_1).

    With ``c = Input - Mean``, ``k = 1 / sqrt(Variance + Epsilon)`` and means over the
    dimensions in which MeanTensor has size 1: ``OutputGradient = Scale * k * (InputGradient -
    mean(InputGradient) - c * mean(InputGradient * c) / (Variance + Epsilon))``; the scale and
    bias gradients are BATCH_NORMALIZATION_GRAD's. Mean and Variance are the given tensors
    (the page writes mean(Input); they are the same when MeanTensor is the forward's output).

    Fields: as ``BatchNormalizationGradOperatorDesc``'s; ``epsilon`` is required.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_BATCH_NORMALIZATION_TRAINING_GRAD"
    input_tensor: TensorDesc = input_field()
    input_gradient_tensor: TensorDesc = input_field()
    mean_tensor: TensorDesc = input_field()
    variance_tensor: TensorDesc = input_field()
    scale_tensor: TensorDesc = input_field()
    output_gradient_tensor: TensorDesc = output_field()
    output_scale_gradient_tensor: TensorDesc = output_field()
    output_bias_gradient_tensor: TensorDesc = output_field()
    epsilon: float = attribute(FLOAT)


def _epsilon(d: Any) -> float:
    return 0.0 if d.epsilon is None else d.epsilon


def batch_norm_forward(d: BatchNormalizationGradOperatorDesc) -> BatchNormalizationOperatorDesc:
    """The BATCH_NORMALIZATION that BATCH_NORMALIZATION_GRAD differentiates (a zero bias of
    Scale's sizes; the gradient does not depend on it)."""
    return BatchNormalizationOperatorDesc(
        d.input_tensor,
        d.mean_tensor,
        d.variance_tensor,
        d.scale_tensor,
        d.scale_tensor,
        d.input_gradient_tensor,
        spatial=True,
        epsilon=_epsilon(d),
    )


def infer_batch_norm_grad(d: Any) -> tuple[TensorDesc, ...]:
    stats = d.input_tensor.like(sizes=d.mean_tensor.sizes)
    return (d.input_tensor.like(), stats, stats)


def validate_batch_norm_grad(d: Any, v: Validator) -> None:
    # BATCH_NORMALIZATION's rules: one data type and DimensionCount, statistics of size 1 or
    # the input's in each dimension.
    forward_rules(
        v, validate_batch_norm, batch_norm_forward(d), {"OutputTensor": "InputGradientTensor"}
    )
    x = ("InputTensor", d.input_tensor)
    v.same("sizes", [("InputGradientTensor", d.input_gradient_tensor)], x)
    statistics = [("VarianceTensor", d.variance_tensor), ("ScaleTensor", d.scale_tensor)]
    v.same("sizes", statistics, ("MeanTensor", d.mean_tensor))


def lower_batch_norm_grad(d: BatchNormalizationGradOperatorDesc, x, g, mean, variance, scale):
    forward = batch_norm_forward(d)

    def batch_norm(a, s, b):
        return lower_batch_norm(forward, a, mean, variance, s, b)[0]

    return vjp_of(batch_norm, (x, scale, jnp.zeros_like(scale)), g)


def lower_batch_norm_training_grad(
    d: BatchNormalizationTrainingGradOperatorDesc, x, g, mean, variance, scale
):
    axes = tuple(i for i, s in enumerate(d.mean_tensor.sizes) if s == 1)
    w, dy, m, var, s = (wide(a) for a in (x, g, mean, variance, scale))
    shifted = var + dml_float(d.epsilon, w)
    k = lax.rsqrt(shifted)
    c = w - m
    dx = (
        s
        * k
        * (
            dy
            - jnp.mean(dy, axes, keepdims=True)
            - c * jnp.mean(dy * c, axes, keepdims=True) / shifted
        )
    )
    dscale = jnp.sum(dy * c * k, axes, keepdims=True)
    dbias = jnp.sum(dy, axes, keepdims=True)
    return tuple(a.astype(x.dtype) for a in (dx, dscale, dbias))


def _batch_norm_example(operator_type: str) -> Example:
    x = {"DataType": "FLOAT32", "Sizes": [4, 1, 1, 2]}
    p = {"DataType": "FLOAT32", "Sizes": [1, 1, 1, 2]}
    desc = {
        "InputTensor": x,
        "InputGradientTensor": x,
        "MeanTensor": p,
        "VarianceTensor": p,
        "ScaleTensor": p,
        "OutputGradientTensor": x,
        "OutputScaleGradientTensor": p,
        "OutputBiasGradientTensor": p,
        "Epsilon": 0.0,
    }
    return Example(
        {"type": operator_type, "desc": desc},
        {
            "InputTensor": [1, 0, 3, 0, 5, 4, 7, 4],
            "InputGradientTensor": [1, 2, 0, 1, 2, 0, 1, 1],
            "MeanTensor": [4, 2],
            "VarianceTensor": [5, 4],
            "ScaleTensor": [2, 3],
        },
        "two columns over a batch of 4, the statistics being the batch's mean and variance",
    )


register(
    BatchNormalizationGradOperatorDesc,
    infer=infer_batch_norm_grad,
    validate=validate_batch_norm_grad,
    lower=lower_batch_norm_grad,
    support=rows((L.FL_3_1, DIMS1_8, F2)),
    example=_batch_norm_example("DML_OPERATOR_BATCH_NORMALIZATION_GRAD"),
)
register(
    BatchNormalizationTrainingGradOperatorDesc,
    infer=infer_batch_norm_grad,
    validate=validate_batch_norm_grad,
    lower=lower_batch_norm_training_grad,
    support=rows((L.FL_4_1, DIMS1_8, F2)),
    example=_batch_norm_example("DML_OPERATOR_BATCH_NORMALIZATION_TRAINING_GRAD"),
)
