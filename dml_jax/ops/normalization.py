"""Normalizations: BATCH_NORMALIZATION, BATCH_NORMALIZATION_TRAINING, MEAN_VARIANCE_NORMALIZATION
(and versions 1 and 2), LOCAL_RESPONSE_NORMALIZATION and LP_NORMALIZATION.

Numerics (docs/semantics.md, "Normalization"):
- FLOAT16 tensors are computed in float32 and rounded once to FLOAT16 at the end (a fused
  activation runs on the float32 value before that rounding, as for GEMM).
- Mean and variance are two passes: the mean, then the mean of squared deviations from it (the
  population variance, divisor N). One pass (E[x^2] - E[x]^2) cancels catastrophically when
  the mean is large against the spread; the second pass is fused by XLA into the same loop.
- Epsilon is added to the variance inside the square root, ``(x - mean) * rsqrt(var + eps)``.
- LP_NORMALIZATION divides by ``max(norm, Epsilon)`` (the page gives no formula): a zero vector
  gives zeros, and a norm above Epsilon is used unchanged.
- LOCAL_RESPONSE_NORMALIZATION follows the page's formula literally: the sum of squares over the
  clipped window is scaled by ``Alpha / LocalSize`` (channels, or a LocalSize x LocalSize window
  over the last two dimensions without CrossChannel).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import jax.numpy as jnp
import numpy as np
from jax import lax

from ..enums import FeatureLevel as L
from ..errors import Validator
from ..fields import (
    BOOL,
    FLOAT,
    OPERATOR_DESC,
    UINT,
    UINT_ARRAY,
    OperatorDesc,
    attribute,
    count_of,
    input_field,
    output_field,
)
from ..fused import apply_fused, validate_fused
from ..registry import Example, register
from ..support import DIMS1_8, DIMS4, F2, rows
from ..tensor import TensorDesc
from ._common import wide

# ---------------------------------------------------------------------------------------------
# Shared helpers


def _f32(value: float, like):
    """A DML FLOAT attribute as a constant of the compute type."""
    return jnp.asarray(np.float32(value), like.dtype)


def _mean(x, axes: tuple[int, ...]):
    """Mean over ``axes`` with the rank kept (reduced axes of size 1)."""
    n = math.prod(x.shape[a] for a in axes)
    total = jnp.sum(x, axis=axes, keepdims=True)
    return total / jnp.asarray(n, x.dtype) if n != 1 else total


def _moments(x, axes: tuple[int, ...]):
    """(mean, variance) over ``axes``, rank kept: two passes (see the module docstring)."""
    mean = _mean(x, axes)
    d = x - mean
    return mean, _mean(d * d, axes)


def _finish(d: Any, y, out: TensorDesc):
    """The fused activation on the float32 result, then the one rounding to the output type."""
    return apply_fused(d.fused_activation, y, out).astype(out.dtype)


def _level_below(v: Validator, level: L) -> bool:
    """The target feature level is known and older than ``level`` (None means the newest)."""
    return v.level is not None and v.level < level


def _same_type_and_rank(v: Validator, d: Any) -> None:
    """Every present tensor has InputTensor's DataType and DimensionCount."""
    tensors = [t for t in d.input_slots() + d.output_slots() if t[0] != "InputTensor"]
    v.same("data_type", tensors, ("InputTensor", d.input_tensor))
    v.same("rank", tensors, ("InputTensor", d.input_tensor))


def _broadcastable(v: Validator, path: str, t: TensorDesc, x: TensorDesc) -> None:
    """Each of ``t``'s sizes is 1 (broadcast) or InputTensor's size (same rank checked first)."""
    for i, (s, n) in enumerate(zip(t.sizes, x.sizes)):
        v.check(
            f"{path}.Sizes[{i}]",
            s in (1, n),
            f"must be 1 or InputTensor.Sizes[{i}] ({n}), got {s}",
        )


def _scale_bias_rules(v: Validator, d: Any, channel_from: L | None) -> None:
    """The optional Scale/Bias pair of the MVN family.

    Below 5_2 ScaleTensor and BiasTensor come together or not at all. Each dimension is 1 or the
    input's; below ``channel_from`` (4_0 for MVN1 and MVN2) dimension 1 (channels) must equal
    the input's, only the others may broadcast.
    """
    x = d.input_tensor
    if _level_below(v, L.FL_5_2):
        for path, present, other in (
            ("ScaleTensor", d.scale_tensor, d.bias_tensor),
            ("BiasTensor", d.bias_tensor, d.scale_tensor),
        ):
            v.check(
                path,
                present is not None or other is None,
                f"is required when {'BiasTensor' if path == 'ScaleTensor' else 'ScaleTensor'} "
                f"is given below feature level 5_2 (target {v.level.label})",
            )
    for path, t in (("ScaleTensor", d.scale_tensor), ("BiasTensor", d.bias_tensor)):
        if t is None:
            continue
        if channel_from is not None and _level_below(v, channel_from) and x.rank >= 2:
            v.check(
                f"{path}.Sizes[1]",
                t.sizes[1] == x.sizes[1],
                f"must equal InputTensor.Sizes[1] ({x.sizes[1]}) below feature level "
                f"{channel_from.label} (channels do not broadcast there), got {t.sizes[1]}",
            )
        _broadcastable(v, path, t, x)


def _normalize(d: Any, x, scale, bias, axes, use_mean: bool, use_variance: bool):
    """``Scale * (x - Mean) / sqrt(Variance + Epsilon) + Bias`` over ``axes``, then the fused
    activation and the rounding. Without ``use_mean`` the mean is 0 (the variance is then the
    mean square, RMS normalization); without ``use_variance`` nothing is divided."""
    w = wide(x)
    y = w - _mean(w, axes) if use_mean else w
    if use_variance:
        y = y * lax.rsqrt(_mean(y * y, axes) + _f32(d.epsilon, w))
    if scale is not None:
        y = y * wide(scale)
    if bias is not None:
        y = y + wide(bias)
    return (_finish(d, y, d.output_tensor),)


def optional_pair(d: Any, rest: tuple) -> tuple[Any, Any]:
    """The (scale, bias) arrays from the arrays after InputTensor (absent ones take no array)."""
    rest = list(rest)
    scale = rest.pop(0) if d.scale_tensor is not None else None
    bias = rest.pop(0) if d.bias_tensor is not None else None
    return scale, bias


# ---------------------------------------------------------------------------------------------
# BATCH_NORMALIZATION


@dataclass(frozen=True)
class BatchNormalizationOperatorDesc(OperatorDesc):
    """DML_BATCH_NORMALIZATION_OPERATOR_DESC: ``FusedActivation(Scale * (Input - Mean) /
    sqrt(Variance + Epsilon) + Bias)`` with given statistics (inference; FL 1_0).

    Fields:
        input_tensor: the data.
        mean_tensor, variance_tensor, scale_tensor, bias_tensor: the input's rank; each size 1
            (broadcast) or the input's size.
        output_tensor: the input's sizes; every tensor has the input's data type and rank.
        spatial: before 4_0, FALSE requires Mean and Variance not to broadcast the spatial
            dimensions (2 and later); deprecated from 4_0 and without effect on the result.
        epsilon: added to the variance inside the square root.
        fused_activation: optional activation DirectML can fuse.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_BATCH_NORMALIZATION"
    input_tensor: TensorDesc = input_field()
    mean_tensor: TensorDesc = input_field()
    variance_tensor: TensorDesc = input_field()
    scale_tensor: TensorDesc = input_field()
    bias_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    spatial: bool = attribute(BOOL)
    epsilon: float = attribute(FLOAT)
    fused_activation: OperatorDesc | None = attribute(OPERATOR_DESC, default=None)


def infer_same(d: Any) -> tuple[TensorDesc, ...]:
    return (d.input_tensor.like(),)


def validate_batch_norm(d: BatchNormalizationOperatorDesc, v: Validator) -> None:
    _same_type_and_rank(v, d)
    x = d.input_tensor
    for path, t in d.input_slots()[1:]:
        _broadcastable(v, path, t, x)
    if not d.spatial and _level_below(v, L.FL_4_0):
        for path, t in (("MeanTensor", d.mean_tensor), ("VarianceTensor", d.variance_tensor)):
            for i in range(2, x.rank):
                v.check(
                    f"{path}.Sizes[{i}]",
                    t.sizes[i] == x.sizes[i],
                    f"must equal InputTensor.Sizes[{i}] ({x.sizes[i]}) with Spatial FALSE below "
                    f"feature level 4_0, got {t.sizes[i]}",
                )
    validate_fused(v, d.fused_activation, d.output_tensor)


def lower_batch_norm(d: BatchNormalizationOperatorDesc, x, mean, variance, scale, bias):
    w = wide(x)
    # The per-channel factor Scale / sqrt(Variance + Epsilon) is computed once on the small
    # tensor; (x - Mean) is kept as a difference so that x near a large mean does not cancel.
    factor = wide(scale) * lax.rsqrt(wide(variance) + _f32(d.epsilon, w))
    y = (w - wide(mean)) * factor + wide(bias)
    return (_finish(d, y, d.output_tensor),)


register(
    BatchNormalizationOperatorDesc,
    infer=infer_same,
    validate=validate_batch_norm,
    lower=lower_batch_norm,
    support=rows((L.FL_1_0, DIMS4, F2), (L.FL_3_1, DIMS1_8, F2)),
    example=Example(
        {
            "type": "DML_OPERATOR_BATCH_NORMALIZATION",
            "desc": {
                "InputTensor": {"DataType": "FLOAT32", "Sizes": [1, 2, 1, 2]},
                "MeanTensor": {"DataType": "FLOAT32", "Sizes": [1, 2, 1, 1]},
                "VarianceTensor": {"DataType": "FLOAT32", "Sizes": [1, 2, 1, 1]},
                "ScaleTensor": {"DataType": "FLOAT32", "Sizes": [1, 2, 1, 1]},
                "BiasTensor": {"DataType": "FLOAT32", "Sizes": [1, 2, 1, 1]},
                "OutputTensor": {"DataType": "FLOAT32", "Sizes": [1, 2, 1, 2]},
                "Spatial": True,
                "Epsilon": 0.0,
            },
        },
        {
            "InputTensor": [1, 3, 10, 20],
            "MeanTensor": [2, 10],
            "VarianceTensor": [1, 4],
            "ScaleTensor": [1, 3],
            "BiasTensor": [0, 1],
        },
        "per-channel statistics: channel 0 gives -1, 1; channel 1 (x - 10) / 2 * 3 + 1",
    ),
)


# ---------------------------------------------------------------------------------------------
# BATCH_NORMALIZATION_TRAINING


@dataclass(frozen=True)
class BatchNormalizationTrainingOperatorDesc(OperatorDesc):
    """DML_BATCH_NORMALIZATION_TRAINING_OPERATOR_DESC: batch normalization with the statistics
    computed from the input, written as outputs (FL 4_1).

    ``Output = FusedActivation(Scale * (Input - Mean) / sqrt(Variance + Epsilon) + Bias +
    FusedAdd)``, where Mean and Variance (population variance, no Epsilon) are taken over the
    dimensions in which ScaleTensor has size 1.

    Fields:
        input_tensor: the data.
        scale_tensor, bias_tensor: equal sizes, each 1 or the input's size.
        fused_add_tensor: optional, the input's sizes; added before the activation.
        output_tensor: the input's sizes.
        output_mean_tensor, output_variance_tensor: ScaleTensor's sizes.
        epsilon: added to the variance inside the square root (not to the output variance).
        fused_activation: optional activation DirectML can fuse.
    Every tensor has the input's data type and rank.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_BATCH_NORMALIZATION_TRAINING"
    input_tensor: TensorDesc = input_field()
    scale_tensor: TensorDesc = input_field()
    bias_tensor: TensorDesc = input_field()
    fused_add_tensor: TensorDesc | None = input_field(optional=True)
    output_tensor: TensorDesc = output_field()
    output_mean_tensor: TensorDesc = output_field()
    output_variance_tensor: TensorDesc = output_field()
    epsilon: float = attribute(FLOAT)
    fused_activation: OperatorDesc | None = attribute(OPERATOR_DESC, default=None)


def _training_axes(d: BatchNormalizationTrainingOperatorDesc) -> tuple[int, ...]:
    return tuple(i for i, s in enumerate(d.scale_tensor.sizes) if s == 1)


def infer_batch_norm_training(d: BatchNormalizationTrainingOperatorDesc):
    stats = d.input_tensor.like(sizes=d.scale_tensor.sizes)
    return (d.input_tensor.like(), stats, stats)


def validate_batch_norm_training(d: BatchNormalizationTrainingOperatorDesc, v: Validator) -> None:
    _same_type_and_rank(v, d)
    x, s = d.input_tensor, d.scale_tensor
    _broadcastable(v, "ScaleTensor", s, x)
    v.equal("BiasTensor.Sizes", d.bias_tensor.sizes, s.sizes, "ScaleTensor.Sizes")
    if d.fused_add_tensor is not None:
        v.equal("FusedAddTensor.Sizes", d.fused_add_tensor.sizes, x.sizes, "InputTensor.Sizes")
    validate_fused(v, d.fused_activation, d.output_tensor)


def lower_batch_norm_training(d: BatchNormalizationTrainingOperatorDesc, x, scale, bias, *add):
    w = wide(x)
    mean, var = _moments(w, _training_axes(d))
    y = (w - mean) * (wide(scale) * lax.rsqrt(var + _f32(d.epsilon, w))) + wide(bias)
    if add:
        y = y + wide(add[0])
    stats = d.output_mean_tensor.dtype
    return (_finish(d, y, d.output_tensor), mean.astype(stats), var.astype(stats))


register(
    BatchNormalizationTrainingOperatorDesc,
    infer=infer_batch_norm_training,
    validate=validate_batch_norm_training,
    lower=lower_batch_norm_training,
    support=rows((L.FL_4_1, DIMS1_8, F2)),
    example=Example(
        {
            "type": "DML_OPERATOR_BATCH_NORMALIZATION_TRAINING",
            "desc": {
                "InputTensor": {"DataType": "FLOAT32", "Sizes": [2, 2]},
                "ScaleTensor": {"DataType": "FLOAT32", "Sizes": [1, 2]},
                "BiasTensor": {"DataType": "FLOAT32", "Sizes": [1, 2]},
                "OutputTensor": {"DataType": "FLOAT32", "Sizes": [2, 2]},
                "OutputMeanTensor": {"DataType": "FLOAT32", "Sizes": [1, 2]},
                "OutputVarianceTensor": {"DataType": "FLOAT32", "Sizes": [1, 2]},
                "Epsilon": 0.0,
            },
        },
        {"InputTensor": [1, 10, 3, 30], "ScaleTensor": [1, 2], "BiasTensor": [0, 5]},
        "statistics over the batch: means 2, 20, variances 1, 100",
    ),
)


# ---------------------------------------------------------------------------------------------
# MEAN_VARIANCE_NORMALIZATION (0, 1, 2)


@dataclass(frozen=True)
class MeanVarianceNormalizationOperatorDesc(OperatorDesc):
    """DML_MEAN_VARIANCE_NORMALIZATION_OPERATOR_DESC: ``FusedActivation(Scale * (Input - Mean) /
    sqrt(Variance + Epsilon) + Bias)`` with Mean and Variance of the input itself (FL 1_0).

    Fields:
        input_tensor: {N, C, H, W}.
        scale_tensor, bias_tensor: optional, 4-D, each size 1 or the input's; below 5_2 both
            or neither.
        output_tensor: the input's sizes; every tensor has the input's data type.
        cross_channel: TRUE reduces over {C, H, W}, FALSE over {H, W} per channel.
        normalize_variance: FALSE skips the division (``Scale * (Input - Mean) + Bias``).
        epsilon: added to the variance inside the square root.
        fused_activation: optional activation DirectML can fuse.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_MEAN_VARIANCE_NORMALIZATION"
    input_tensor: TensorDesc = input_field()
    scale_tensor: TensorDesc | None = input_field(optional=True)
    bias_tensor: TensorDesc | None = input_field(optional=True)
    output_tensor: TensorDesc = output_field()
    cross_channel: bool = attribute(BOOL)
    normalize_variance: bool = attribute(BOOL)
    epsilon: float = attribute(FLOAT)
    fused_activation: OperatorDesc | None = attribute(OPERATOR_DESC, default=None)


@dataclass(frozen=True)
class MeanVarianceNormalization1OperatorDesc(OperatorDesc):
    """DML_MEAN_VARIANCE_NORMALIZATION1_OPERATOR_DESC: mean-variance normalization over any set
    of Axes (FL 2_1). Axes {2, 3} is MVN with CrossChannel FALSE, {1, 2, 3} with TRUE.

    Fields:
        input_tensor: the data.
        scale_tensor, bias_tensor: optional, the input's rank; from 4_0 each size 1 or the
            input's; below 4_0 dimension 1 must equal the input's (only the others broadcast);
            below 5_2 both or neither.
        output_tensor: the input's sizes; every tensor has the input's data type and rank.
        axes: non-empty, unique, each in [0, InputTensor.DimensionCount - 1]; order irrelevant.
        normalize_variance: FALSE skips the division.
        epsilon: added to the variance inside the square root.
        fused_activation: optional activation DirectML can fuse.
        axis_count: optional; must equal ``len(axes)``.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_MEAN_VARIANCE_NORMALIZATION1"
    input_tensor: TensorDesc = input_field()
    scale_tensor: TensorDesc | None = input_field(optional=True)
    bias_tensor: TensorDesc | None = input_field(optional=True)
    output_tensor: TensorDesc = output_field()
    axes: tuple[int, ...] = attribute(UINT_ARRAY)
    normalize_variance: bool = attribute(BOOL)
    epsilon: float = attribute(FLOAT)
    fused_activation: OperatorDesc | None = attribute(OPERATOR_DESC, default=None)
    axis_count: int | None = count_of("axes")


@dataclass(frozen=True)
class MeanVarianceNormalization2OperatorDesc(OperatorDesc):
    """DML_MEAN_VARIANCE_NORMALIZATION2_OPERATOR_DESC: MVN1 with the mean and the variance each
    optional (FL 6_3).

    ``UseMean`` FALSE takes the mean as 0 (so the variance is the mean square: RMS
    normalization, as ONNX Runtime's SimplifiedLayerNormalization uses it); ``UseVariance``
    FALSE skips the division.

    Fields: as ``MeanVarianceNormalization1OperatorDesc``, with ``use_mean`` and
    ``use_variance`` in place of ``normalize_variance``.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_MEAN_VARIANCE_NORMALIZATION2"
    input_tensor: TensorDesc = input_field()
    scale_tensor: TensorDesc | None = input_field(optional=True)
    bias_tensor: TensorDesc | None = input_field(optional=True)
    output_tensor: TensorDesc = output_field()
    axes: tuple[int, ...] = attribute(UINT_ARRAY)
    use_mean: bool = attribute(BOOL)
    use_variance: bool = attribute(BOOL)
    epsilon: float = attribute(FLOAT)
    fused_activation: OperatorDesc | None = attribute(OPERATOR_DESC, default=None)
    axis_count: int | None = count_of("axes")


def mvn_axes(d: Any) -> tuple[int, ...]:
    """The reduced axes of any MVN version, sorted."""
    if isinstance(d, MeanVarianceNormalizationOperatorDesc):
        return (1, 2, 3) if d.cross_channel else (2, 3)
    return tuple(sorted(d.axes))


def mvn_flags(d: Any) -> tuple[bool, bool]:
    """``(use_mean, use_variance)`` of any MVN version (only MVN2 may drop the mean)."""
    if isinstance(d, MeanVarianceNormalization2OperatorDesc):
        return d.use_mean, d.use_variance
    return True, d.normalize_variance


def validate_mvn(d: Any, v: Validator) -> None:
    _same_type_and_rank(v, d)
    versioned = not isinstance(d, MeanVarianceNormalizationOperatorDesc)
    if versioned:
        v.axes("Axes", d.axes, d.input_tensor.rank)
    _scale_bias_rules(v, d, L.FL_4_0 if versioned else None)
    validate_fused(v, d.fused_activation, d.output_tensor)


def lower_mvn(d: Any, x, *rest):
    scale, bias = optional_pair(d, rest)
    return _normalize(d, x, scale, bias, mvn_axes(d), *mvn_flags(d))


def _mvn_example(version: str) -> Example:
    t = {"DataType": "FLOAT32", "Sizes": [1, 1, 2, 3]}
    p = {"DataType": "FLOAT32", "Sizes": [1, 1, 1, 3]}
    desc: dict = {"InputTensor": t, "ScaleTensor": p, "BiasTensor": p, "OutputTensor": t}
    if version == "":
        desc.update(CrossChannel=False, NormalizeVariance=True)
    elif version == "1":
        desc.update(AxisCount=2, Axes=[2, 3], NormalizeVariance=True)
    else:
        desc.update(AxisCount=2, Axes=[2, 3], UseMean=True, UseVariance=True)
    desc["Epsilon"] = 0.0
    return Example(
        {"type": f"DML_OPERATOR_MEAN_VARIANCE_NORMALIZATION{version}", "desc": desc},
        {"InputTensor": [1, 2, 3, 5, 6, 7], "ScaleTensor": [1, 2, 4], "BiasTensor": [0, 0, 1]},
        "mean 4, variance 14/3 over H and W, then a scale and bias per column",
    )


for _cls, _version, _rows in (
    (MeanVarianceNormalizationOperatorDesc, "", rows((L.FL_1_0, DIMS4, F2))),
    (
        MeanVarianceNormalization1OperatorDesc,
        "1",
        rows((L.FL_2_1, DIMS4, F2), (L.FL_3_1, DIMS1_8, F2)),
    ),
    (MeanVarianceNormalization2OperatorDesc, "2", rows((L.FL_6_3, DIMS1_8, F2))),
):
    register(
        _cls,
        infer=infer_same,
        validate=validate_mvn,
        lower=lower_mvn,
        support=_rows,
        example=_mvn_example(_version),
    )


# ---------------------------------------------------------------------------------------------
# LOCAL_RESPONSE_NORMALIZATION


@dataclass(frozen=True)
class LocalResponseNormalizationOperatorDesc(OperatorDesc):
    """DML_LOCAL_RESPONSE_NORMALIZATION_OPERATOR_DESC: ``Input / (Bias + Alpha / LocalSize *
    sum of squares over the local region) ^ Beta`` (FL 1_0).

    The region of element c along a windowed dimension is [c - floor((LocalSize - 1) / 2),
    c + ceil((LocalSize - 1) / 2)], clipped to the tensor; the divisor stays LocalSize.

    Fields:
        input_tensor: {N, C, H, W}.
        output_tensor: the input's data type and sizes.
        cross_channel: TRUE windows the channels (dimension 1); FALSE windows height and width
            (a LocalSize x LocalSize square per channel).
        local_size: the window length, >= 1.
        alpha, beta, bias: DML FLOATs of the formula.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_LOCAL_RESPONSE_NORMALIZATION"
    input_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    cross_channel: bool = attribute(BOOL)
    local_size: int = attribute(UINT)
    alpha: float = attribute(FLOAT)
    beta: float = attribute(FLOAT)
    bias: float = attribute(FLOAT)


def validate_lrn(d: LocalResponseNormalizationOperatorDesc, v: Validator) -> None:
    v.check("LocalSize", d.local_size >= 1, f"must be >= 1, got {d.local_size}")


def lrn_axes(d: LocalResponseNormalizationOperatorDesc, rank: int) -> tuple[int, ...]:
    return (1,) if d.cross_channel else (rank - 2, rank - 1)


def lower_lrn(d: LocalResponseNormalizationOperatorDesc, x):
    w = wide(x)
    n = d.local_size
    axes = lrn_axes(d, x.ndim)
    before, after = (n - 1) // 2, n // 2  # floor and ceil of (n - 1) / 2
    window = tuple(n if i in axes else 1 for i in range(x.ndim))
    padding = tuple((before, after) if i in axes else (0, 0) for i in range(x.ndim))
    # A windowed sum over zero padding: the clipped region of the formula.
    squares = lax.reduce_window(w * w, 0.0, lax.add, window, (1,) * x.ndim, padding)
    base = _f32(d.bias, w) + _f32(d.alpha, w) / jnp.asarray(n, w.dtype) * squares
    y = w / lax.pow(base, _f32(d.beta, w))
    return (y.astype(x.dtype),)


register(
    LocalResponseNormalizationOperatorDesc,
    infer=infer_same,
    validate=validate_lrn,
    lower=lower_lrn,
    support=rows((L.FL_1_0, DIMS4, F2)),
    example=Example(
        {
            "type": "DML_OPERATOR_LOCAL_RESPONSE_NORMALIZATION",
            "desc": {
                "InputTensor": {"DataType": "FLOAT32", "Sizes": [1, 3, 1, 1]},
                "OutputTensor": {"DataType": "FLOAT32", "Sizes": [1, 3, 1, 1]},
                "CrossChannel": True,
                "LocalSize": 3,
                "Alpha": 3.0,
                "Beta": 1.0,
                "Bias": 1.0,
            },
        },
        {"InputTensor": [1, 2, 3]},
        "channel windows {0, 1}, {0, 1, 2}, {1, 2}: 1 / 6, 2 / 15, 3 / 14",
    ),
)


# ---------------------------------------------------------------------------------------------
# LP_NORMALIZATION


@dataclass(frozen=True)
class LpNormalizationOperatorDesc(OperatorDesc):
    """DML_LP_NORMALIZATION_OPERATOR_DESC: the input divided by its L1 or L2 norm along Axis
    (FL 1_0).

    dml_jax divides by ``max(norm, Epsilon)`` (the page gives no formula; a zero vector gives
    zeros).

    Fields:
        input_tensor: the data.
        output_tensor: the input's data type, rank and sizes.
        axis: in [0, InputTensor.DimensionCount - 1].
        epsilon: the smallest divisor.
        p: 1 (sum of magnitudes) or 2 (Euclidean norm).
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_LP_NORMALIZATION"
    input_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    axis: int = attribute(UINT)
    epsilon: float = attribute(FLOAT)
    p: int = attribute(UINT)


def validate_lp(d: LpNormalizationOperatorDesc, v: Validator) -> None:
    v.axis("Axis", d.axis, d.input_tensor.rank)
    v.check("P", d.p in (1, 2), f"must be 1 or 2, got {d.p}")


def lower_lp(d: LpNormalizationOperatorDesc, x):
    w = wide(x)
    axes = (d.axis,)
    if d.p == 1:
        norm = jnp.sum(jnp.abs(w), axis=axes, keepdims=True)
    else:
        s = jnp.sum(w * w, axis=axes, keepdims=True)
        # sqrt's derivative is infinite at 0; the inner where keeps the gradient finite there.
        positive = s > 0
        norm = jnp.where(positive, lax.sqrt(jnp.where(positive, s, 1.0)), 0.0)
    y = w / jnp.maximum(norm, _f32(d.epsilon, w))
    return (y.astype(x.dtype),)


register(
    LpNormalizationOperatorDesc,
    infer=infer_same,
    validate=validate_lp,
    lower=lower_lp,
    support=rows((L.FL_1_0, DIMS4, F2), (L.FL_3_1, DIMS1_8, F2)),
    example=Example(
        {
            "type": "DML_OPERATOR_LP_NORMALIZATION",
            "desc": {
                "InputTensor": {"DataType": "FLOAT32", "Sizes": [1, 1, 2, 2]},
                "OutputTensor": {"DataType": "FLOAT32", "Sizes": [1, 1, 2, 2]},
                "Axis": 3,
                "Epsilon": 1e-5,
                "P": 2,
            },
        },
        {"InputTensor": [3, 4, 0, 0]},
        "rows divided by their Euclidean norm: 0.6, 0.8; a zero row stays zero",
    ),
)
