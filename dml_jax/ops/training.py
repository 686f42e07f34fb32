"""Training: DirectML's gradient operators and ADAM_OPTIMIZER.

ACTIVATION_RELU_GRAD, AVERAGE_POOLING_GRAD, MAX_POOLING_GRAD, SLICE_GRAD, RESAMPLE_GRAD(1),
LOCAL_RESPONSE_NORMALIZATION_GRAD, BATCH_NORMALIZATION_GRAD, BATCH_NORMALIZATION_TRAINING_GRAD,
ROI_ALIGN_GRAD and ADAM_OPTIMIZER (ELEMENT_WISE_CLIP_GRAD(1) live beside CLIP in ``clip.py``).

A gradient operator takes the gradient of a forward operator's output (InputGradientTensor)
and returns the gradient of its input (OutputGradientTensor). Most of them are exactly the
backward pass of a forward operator that dml_jax already lowers, so each of those stands for a
*forward description*: its OutputGradientTensor plays the forward InputTensor and its
InputGradientTensor the forward OutputTensor (MAX_POOLING_GRAD and LRN_GRAD also have the
forward InputTensor itself). Validation runs the forward operator's own rules on that
description, reporting them in the gradient operator's member names (``_as_forward``), and the
lowering is ``jax.vjp`` of the forward lowering. The forward lowerings carry DirectML's
conventions in their derivatives (MAX pooling and ROI_ALIGN's MAX send a gradient to the first
maximum only; RELU passes it only where x > 0), so the two directions agree by construction:
tests/test_training_agreement.py holds each pair together, ties and boundaries included, and
tests/test_training.py holds each gradient operator to an independent NumPy reference.

Exceptions, written out here:
- SLICE_GRAD takes integer types, for which JAX has no cotangents: the lowering is the
  transpose of the strided copy written directly (one ``lax.pad`` with interior padding).
- BATCH_NORMALIZATION_TRAINING_GRAD is the page's formula with the given MeanTensor and
  VarianceTensor (the forward recomputes them from the input; the two agree when they are the
  forward's outputs).
- ADAM_OPTIMIZER is the page's update, in float32.

docs/training.md lists every forward/gradient pair; docs/semantics.md ("Training") has the
choices made where the pages are silent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..enums import AxisDirection, InterpolationMode, ReduceFunction
from ..enums import FeatureLevel as L
from ..errors import Validator
from ..fields import (
    BOOL,
    FLOAT,
    FLOAT_ARRAY,
    INT_ARRAY,
    UINT,
    UINT_ARRAY,
    OperatorDesc,
    attribute,
    count_of,
    enum_type,
    input_field,
    output_field,
)
from ..registry import Example, register
from ..support import DIMS1_8, DIMS4, DIMS4_5, F2, T8, U32, rows
from ..tensor import TensorDesc
from ._common import same_tensors, wide
from .activation import relu_grad
from .movement import Slice1OperatorDesc, validate_slice
from .normalization import (
    BatchNormalizationOperatorDesc,
    LocalResponseNormalizationOperatorDesc,
    lower_batch_norm,
    lower_lrn,
    validate_batch_norm,
    validate_lrn,
)
from .pooling import (
    AveragePoolingOperatorDesc,
    MaxPooling2OperatorDesc,
    average_pool,
    validate_pooling,
    window_max,
    window_plan,
)
from .resample import (
    DIMS1_4,
    Resample1OperatorDesc,
    Resample2OperatorDesc,
    lower_resample,
    validate_resample,
)
from .roi import RoiAlign1OperatorDesc, lower_roi_align, validate_roi_align

# ---------------------------------------------------------------------------------------------
# Shared: the forward description a gradient operator stands for


class _AsForward(Validator):
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


def _forward_rules(v: Validator, validate, forward: Any, names: dict[str, str]) -> None:
    """Runs the forward operator's ``validate`` on ``forward`` in the gradient's names."""
    validate(forward, _AsForward(v, names))


# What the forward InputTensor / OutputTensor are called in most gradient operators.
_GRAD_NAMES = {"InputTensor": "OutputGradientTensor", "OutputTensor": "InputGradientTensor"}


def _input_gradient_like(d: Any, t: TensorDesc) -> tuple[TensorDesc, ...]:
    """One output gradient: ``t``'s sizes in InputGradientTensor's data type."""
    return (t.like(data_type=d.input_gradient_tensor.data_type),)


def _zeros(t: TensorDesc, dtype):
    return jnp.zeros(t.sizes, dtype)


def _vjp(f, primals: tuple, cotangent) -> tuple:
    """The cotangents of ``f``'s inputs for ``cotangent`` on its output."""
    return jax.vjp(f, *primals)[1](cotangent)


def _dml_float(value: float, like):
    """A DML FLOAT member as a constant of the compute type."""
    return jnp.asarray(np.float32(value), like.dtype)


# ---------------------------------------------------------------------------------------------
# ACTIVATION_RELU_GRAD


@dataclass(frozen=True)
class ActivationReluGradOperatorDesc(OperatorDesc):
    """DML_ACTIVATION_RELU_GRAD_OPERATOR_DESC: ReLU's backward pass (FL 3_0).

    ``OutputGradient = InputGradient where Input > 0, else 0`` (0 at exactly 0 and for NaN):
    the derivative ACTIVATION_RELU's lowering uses.

    Fields:
        input_tensor: the forward input x.
        input_gradient_tensor: the incoming gradient.
        output_gradient_tensor: the result. All three share DataType, DimensionCount and Sizes.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_ACTIVATION_RELU_GRAD"
    input_tensor: TensorDesc = input_field()
    input_gradient_tensor: TensorDesc = input_field()
    output_gradient_tensor: TensorDesc = output_field()


def infer_like_gradient(d: ActivationReluGradOperatorDesc) -> tuple[TensorDesc, ...]:
    return (d.input_gradient_tensor.like(),)


def lower_relu_grad(d: ActivationReluGradOperatorDesc, x, g):
    return (relu_grad(x, g),)


def _elementwise_example(operator_type: str, inputs: dict, note: str, **members) -> Example:
    t = {"DataType": "FLOAT32", "Sizes": [1, 1, 2, 3]}
    desc = {"InputTensor": t, "InputGradientTensor": t, "OutputGradientTensor": t, **members}
    return Example({"type": operator_type, "desc": desc}, inputs, note)


register(
    ActivationReluGradOperatorDesc,
    infer=infer_like_gradient,
    validate=same_tensors,
    lower=lower_relu_grad,
    support=rows((L.FL_3_0, DIMS1_8, F2)),
    example=_elementwise_example(
        "DML_OPERATOR_ACTIVATION_RELU_GRAD",
        {"InputTensor": [-2, -1, 0, 1, 2, 3], "InputGradientTensor": [1, 2, 3, 4, 5, 6]},
        "the gradient passes where the input is > 0 (not at 0)",
    ),
)


# ---------------------------------------------------------------------------------------------
# AVERAGE_POOLING_GRAD / MAX_POOLING_GRAD


@dataclass(frozen=True)
class AveragePoolingGradOperatorDesc(OperatorDesc):
    """DML_AVERAGE_POOLING_GRAD_OPERATOR_DESC: AVERAGE_POOLING's backward pass (FL 3_0).

    Each incoming gradient element is spread over its window: every window point on the input
    receives it divided by AVERAGE_POOLING's divisor (prod(WindowSize) with IncludePadding,
    else the window's points on the input); overlapping windows add up.

    Fields:
        input_gradient_tensor: {N, C, outputs...}, the sizes AVERAGE_POOLING would output for
            OutputGradientTensor's sizes and the window.
        output_gradient_tensor: {N, C, spatial...} (4-D or 5-D), the forward input's sizes;
            InputGradientTensor's data type.
        strides, window_size, start_padding, end_padding, include_padding: AVERAGE_POOLING's.
        dimension_count: optional; 2 or 3, the length of every array.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_AVERAGE_POOLING_GRAD"
    input_gradient_tensor: TensorDesc = input_field()
    output_gradient_tensor: TensorDesc = output_field()
    strides: tuple[int, ...] = attribute(UINT_ARRAY)
    window_size: tuple[int, ...] = attribute(UINT_ARRAY)
    start_padding: tuple[int, ...] = attribute(UINT_ARRAY)
    end_padding: tuple[int, ...] = attribute(UINT_ARRAY)
    include_padding: bool = attribute(BOOL)
    dimension_count: int | None = count_of("strides")


@dataclass(frozen=True)
class MaxPoolingGradOperatorDesc(OperatorDesc):
    """DML_MAX_POOLING_GRAD_OPERATOR_DESC: MAX_POOLING2's backward pass (FL 3_0).

    Each incoming gradient element goes whole to the maximum of its window in InputTensor: of
    equal values the one with the lowest logical index, i.e. the first in window order (the
    element MAX_POOLING2's OutputIndicesTensor reports; NaN counts as the maximum, -0.0 equals
    +0.0). Overlapping windows add up; elements no window picks get 0, and a window of padding
    only passes nothing back.

    Fields:
        input_tensor: the forward input, {N, C, H, W}.
        input_gradient_tensor: {N, C, outputs...}, MAX_POOLING2's output sizes.
        output_gradient_tensor: InputTensor's sizes. All three share one data type.
        strides, window_size, start_padding, end_padding, dilations: MAX_POOLING2's.
        dimension_count: optional; 2 (the operator takes 4-D tensors).
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_MAX_POOLING_GRAD"
    input_tensor: TensorDesc = input_field()
    input_gradient_tensor: TensorDesc = input_field()
    output_gradient_tensor: TensorDesc = output_field()
    strides: tuple[int, ...] = attribute(UINT_ARRAY)
    window_size: tuple[int, ...] = attribute(UINT_ARRAY)
    start_padding: tuple[int, ...] = attribute(UINT_ARRAY)
    end_padding: tuple[int, ...] = attribute(UINT_ARRAY)
    dilations: tuple[int, ...] = attribute(UINT_ARRAY)
    dimension_count: int | None = count_of("strides")


def _window_members(d: Any) -> dict:
    return {
        "strides": d.strides,
        "window_size": d.window_size,
        "start_padding": d.start_padding,
        "end_padding": d.end_padding,
    }


def average_pooling_forward(d: AveragePoolingGradOperatorDesc) -> AveragePoolingOperatorDesc:
    """The AVERAGE_POOLING that AVERAGE_POOLING_GRAD differentiates."""
    return AveragePoolingOperatorDesc(
        d.output_gradient_tensor,
        d.input_gradient_tensor,
        **_window_members(d),
        include_padding=d.include_padding,
    )


def max_pooling_forward(d: MaxPoolingGradOperatorDesc) -> MaxPooling2OperatorDesc:
    """The MAX_POOLING2 that MAX_POOLING_GRAD differentiates."""
    return MaxPooling2OperatorDesc(
        d.input_tensor, d.input_gradient_tensor, **_window_members(d), dilations=d.dilations
    )


def infer_average_pooling_grad(d: AveragePoolingGradOperatorDesc) -> tuple[TensorDesc, ...]:
    return _input_gradient_like(d, d.output_gradient_tensor)


def validate_average_pooling_grad(d: AveragePoolingGradOperatorDesc, v: Validator) -> None:
    _forward_rules(v, validate_pooling, average_pooling_forward(d), _GRAD_NAMES)


def lower_average_pooling_grad(d: AveragePoolingGradOperatorDesc, g):
    plan = window_plan(d, d.output_gradient_tensor)
    zeros = _zeros(d.output_gradient_tensor, g.dtype)  # the pooling is linear: any point
    return _vjp(lambda x: average_pool(plan, x, d.include_padding), (zeros,), g)


def infer_max_pooling_grad(d: MaxPoolingGradOperatorDesc) -> tuple[TensorDesc, ...]:
    return _input_gradient_like(d, d.input_tensor)


def validate_max_pooling_grad(d: MaxPoolingGradOperatorDesc, v: Validator) -> None:
    _forward_rules(
        v, validate_pooling, max_pooling_forward(d), {"OutputTensor": "InputGradientTensor"}
    )


def lower_max_pooling_grad(d: MaxPoolingGradOperatorDesc, x, g):
    plan = window_plan(d)
    return _vjp(lambda a: window_max(plan, a), (x,), g)


_POOL_WINDOW = {
    "DimensionCount": 2,
    "Strides": [1, 1],
    "WindowSize": [2, 2],
    "StartPadding": [0, 0],
    "EndPadding": [0, 0],
}
_IMAGE_3X3 = {"DataType": "FLOAT32", "Sizes": [1, 1, 3, 3]}
_POOLED_2X2 = {"DataType": "FLOAT32", "Sizes": [1, 1, 2, 2]}

register(
    AveragePoolingGradOperatorDesc,
    infer=infer_average_pooling_grad,
    validate=validate_average_pooling_grad,
    lower=lower_average_pooling_grad,
    support=rows((L.FL_3_0, DIMS4_5, F2)),
    example=Example(
        {
            "type": "DML_OPERATOR_AVERAGE_POOLING_GRAD",
            "desc": {
                "InputGradientTensor": _POOLED_2X2,
                "OutputGradientTensor": _IMAGE_3X3,
                **_POOL_WINDOW,
                "IncludePadding": False,
            },
        },
        {"InputGradientTensor": [1, 2, 3, 4]},
        "the page's example: 2x2 windows at stride 1 share each gradient four ways",
    ),
)
register(
    MaxPoolingGradOperatorDesc,
    infer=infer_max_pooling_grad,
    validate=validate_max_pooling_grad,
    lower=lower_max_pooling_grad,
    support=rows((L.FL_3_0, DIMS4, F2)),
    example=Example(
        {
            "type": "DML_OPERATOR_MAX_POOLING_GRAD",
            "desc": {
                "InputTensor": _IMAGE_3X3,
                "InputGradientTensor": _POOLED_2X2,
                "OutputGradientTensor": _IMAGE_3X3,
                **_POOL_WINDOW,
                "Dilations": [1, 1],
            },
        },
        {"InputTensor": [1, 2, 3, 2, 4, 2, 5, 6, 7], "InputGradientTensor": [1, 2, 4, 5]},
        "the page's example: each gradient goes to its window's maximum; 4 is two windows'",
    ),
)


# ---------------------------------------------------------------------------------------------
# SLICE_GRAD


@dataclass(frozen=True)
class SliceGradOperatorDesc(OperatorDesc):
    """DML_SLICE_GRAD_OPERATOR_DESC: SLICE1's backward pass (FL 3_0).

    A zero tensor of OutputGradientTensor's sizes with InputGradientTensor's elements written
    where SLICE1 would have read them (a negative stride walks its window from the end).

    Fields:
        input_gradient_tensor: SLICE1's output sizes.
        output_gradient_tensor: SLICE1's input sizes; same DataType and DimensionCount.
        input_window_offsets, input_window_sizes: SLICE1's window.
        input_window_strides: SLICE1's strides; none may be 0.
        dimension_count: optional; the arrays' length, both tensors' DimensionCount.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_SLICE_GRAD"
    input_gradient_tensor: TensorDesc = input_field()
    output_gradient_tensor: TensorDesc = output_field()
    input_window_offsets: tuple[int, ...] = attribute(UINT_ARRAY)
    input_window_sizes: tuple[int, ...] = attribute(UINT_ARRAY)
    input_window_strides: tuple[int, ...] = attribute(INT_ARRAY)
    dimension_count: int | None = count_of("input_window_offsets")


def slice_forward(d: SliceGradOperatorDesc) -> Slice1OperatorDesc:
    """The SLICE1 that SLICE_GRAD differentiates."""
    return Slice1OperatorDesc(
        d.output_gradient_tensor,
        d.input_gradient_tensor,
        d.input_window_offsets,
        d.input_window_sizes,
        d.input_window_strides,
    )


def infer_slice_grad(d: SliceGradOperatorDesc) -> tuple[TensorDesc, ...]:
    return _input_gradient_like(d, d.output_gradient_tensor)


def validate_slice_grad(d: SliceGradOperatorDesc, v: Validator) -> None:
    _forward_rules(v, validate_slice, slice_forward(d), _GRAD_NAMES)


def lower_slice_grad(d: SliceGradOperatorDesc, g):
    # The transpose of movement.strided_take, for every data type (JAX has no integer
    # cotangents): reverse the dimensions read backwards, then one pad that puts element c at
    # first + |step| * c (interior padding |step| - 1) and zeros around.
    plan = slice_forward(d).plan()
    backward = [axis for axis, (_, step, _) in enumerate(plan) if step < 0]
    if backward:
        g = lax.rev(g, backward)
    config = []
    for (start, step, n), size in zip(plan, d.output_gradient_tensor.sizes):
        first = start + min(step, 0) * (n - 1)
        last = first + abs(step) * (n - 1)
        config.append((first, size - 1 - last, abs(step) - 1))
    return (lax.pad(g, np.zeros((), g.dtype), config),)


register(
    SliceGradOperatorDesc,
    infer=infer_slice_grad,
    validate=validate_slice_grad,
    lower=lower_slice_grad,
    support=rows((L.FL_3_0, DIMS1_8, T8)),
    example=Example(
        {
            "type": "DML_OPERATOR_SLICE_GRAD",
            "desc": {
                "InputGradientTensor": {"DataType": "FLOAT32", "Sizes": [2, 2]},
                "OutputGradientTensor": {"DataType": "FLOAT32", "Sizes": [4, 4]},
                "DimensionCount": 2,
                "InputWindowOffsets": [0, 0],
                "InputWindowSizes": [4, 4],
                "InputWindowStrides": [2, 2],
            },
        },
        {"InputGradientTensor": [1, 2, 3, 4]},
        "the page's example: every other row and column of a 4x4 zero tensor",
    ),
)


# ---------------------------------------------------------------------------------------------
# RESAMPLE_GRAD / RESAMPLE_GRAD1


@dataclass(frozen=True)
class ResampleGradOperatorDesc(OperatorDesc):
    """DML_RESAMPLE_GRAD_OPERATOR_DESC: RESAMPLE1's backward pass (FL 3_0).

    Each incoming gradient element is added to the input elements RESAMPLE1 sampled for it,
    weighted as they were (nearest neighbour: the one element; linear: the interpolation
    weights, edges clamped).

    Fields:
        input_gradient_tensor: RESAMPLE1's output sizes.
        output_gradient_tensor: RESAMPLE1's input sizes; same DataType and DimensionCount.
        interpolation_mode, scales, input_pixel_offsets, output_pixel_offsets: RESAMPLE1's.
        dimension_count: optional; the arrays' length, both tensors' DimensionCount.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_RESAMPLE_GRAD"
    input_gradient_tensor: TensorDesc = input_field()
    output_gradient_tensor: TensorDesc = output_field()
    interpolation_mode: InterpolationMode = attribute(enum_type(InterpolationMode))
    scales: tuple[float, ...] = attribute(FLOAT_ARRAY)
    input_pixel_offsets: tuple[float, ...] = attribute(FLOAT_ARRAY)
    output_pixel_offsets: tuple[float, ...] = attribute(FLOAT_ARRAY)
    dimension_count: int | None = count_of("scales")


@dataclass(frozen=True)
class ResampleGrad1OperatorDesc(OperatorDesc):
    """DML_RESAMPLE_GRAD1_OPERATOR_DESC: RESAMPLE2's backward pass (FL 5_1).

    RESAMPLE_GRAD with RESAMPLE2's ``rounding_direction`` for nearest neighbour (DECREASING
    floor, INCREASING ceil). The page's support table is not published; dml_jax takes
    RESAMPLE2's at 5_1 (1 to 4 dimensions, FLOAT32 and FLOAT16).

    Fields:
        input_gradient_tensor, output_gradient_tensor, interpolation_mode, scales,
            input_pixel_offsets, output_pixel_offsets, dimension_count: as
            ``ResampleGradOperatorDesc``'s.
        rounding_direction: RESAMPLE2's.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_RESAMPLE_GRAD1"
    input_gradient_tensor: TensorDesc = input_field()
    output_gradient_tensor: TensorDesc = output_field()
    interpolation_mode: InterpolationMode = attribute(enum_type(InterpolationMode))
    rounding_direction: AxisDirection = attribute(enum_type(AxisDirection))
    scales: tuple[float, ...] = attribute(FLOAT_ARRAY)
    input_pixel_offsets: tuple[float, ...] = attribute(FLOAT_ARRAY)
    output_pixel_offsets: tuple[float, ...] = attribute(FLOAT_ARRAY)
    dimension_count: int | None = count_of("scales")


def resample_forward(d: Any) -> Resample1OperatorDesc | Resample2OperatorDesc:
    """The RESAMPLE1 (RESAMPLE_GRAD) or RESAMPLE2 (RESAMPLE_GRAD1) being differentiated."""
    members = {
        "interpolation_mode": d.interpolation_mode,
        "scales": d.scales,
        "input_pixel_offsets": d.input_pixel_offsets,
        "output_pixel_offsets": d.output_pixel_offsets,
    }
    if isinstance(d, ResampleGrad1OperatorDesc):
        members["rounding_direction"] = d.rounding_direction
        cls = Resample2OperatorDesc
    else:
        cls = Resample1OperatorDesc
    return cls(d.output_gradient_tensor, d.input_gradient_tensor, **members)


def infer_resample_grad(d: Any) -> tuple[TensorDesc, ...]:
    return _input_gradient_like(d, d.output_gradient_tensor)


def validate_resample_grad(d: Any, v: Validator) -> None:
    _forward_rules(v, validate_resample, resample_forward(d), _GRAD_NAMES)


def lower_resample_grad(d: Any, g):
    forward = resample_forward(d)
    zeros = _zeros(d.output_gradient_tensor, g.dtype)  # resampling is linear: any point
    return _vjp(lambda x: lower_resample(forward, x)[0], (zeros,), g)


def _resample_example(operator_type: str) -> Example:
    """The pages' example: a nearest-neighbour RESAMPLE of {1, 1, 2, 2} to {1, 1, 1, 3} reads
    input columns 0, 0, 1 of row 0, so the gradients [4, 5, 6] sum to [[9, 6], [0, 0]]."""
    desc: dict[str, Any] = {
        "InputGradientTensor": {"DataType": "FLOAT32", "Sizes": [1, 1, 1, 3]},
        "OutputGradientTensor": {"DataType": "FLOAT32", "Sizes": [1, 1, 2, 2]},
        "InterpolationMode": "DML_INTERPOLATION_MODE_NEAREST_NEIGHBOR",
    }
    if operator_type.endswith("GRAD1"):
        desc["RoundingDirection"] = "DML_AXIS_DIRECTION_DECREASING"  # floor(o / scale)
        offsets = [0.0, 0.0, 0.0, 0.0]
    else:
        offsets = [0.0, 0.0, 0.25, 0.25]  # floor(o / scale - 0.25 + 0.5)
    desc.update(
        DimensionCount=4,
        Scales=[1.0, 1.0, 0.5, 1.5],
        InputPixelOffsets=offsets,
        OutputPixelOffsets=[0.0, 0.0, 0.0, 0.0],
    )
    return Example(
        {"type": operator_type, "desc": desc},
        {"InputGradientTensor": [4, 5, 6]},
        "the page's example: 0.5x down, 1.5x across, nearest neighbour; [4, 5, 6] -> [9, 6; 0, 0]",
    )


for _cls, _rows in (
    (ResampleGradOperatorDesc, rows((L.FL_3_0, DIMS4, F2))),
    (ResampleGrad1OperatorDesc, rows((L.FL_5_1, DIMS1_4, F2))),
):
    register(
        _cls,
        infer=infer_resample_grad,
        validate=validate_resample_grad,
        lower=lower_resample_grad,
        support=_rows,
        example=_resample_example(_cls.operator_type),
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
    return _vjp(lambda a: lower_lrn(forward, a)[0], (x,), g)


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
    _forward_rules(
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

    return _vjp(batch_norm, (x, scale, jnp.zeros_like(scale)), g)


def lower_batch_norm_training_grad(
    d: BatchNormalizationTrainingGradOperatorDesc, x, g, mean, variance, scale
):
    axes = tuple(i for i, s in enumerate(d.mean_tensor.sizes) if s == 1)
    w, dy, m, var, s = (wide(a) for a in (x, g, mean, variance, scale))
    shifted = var + _dml_float(d.epsilon, w)
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


# ---------------------------------------------------------------------------------------------
# ROI_ALIGN_GRAD


@dataclass(frozen=True)
class RoiAlignGradOperatorDesc(OperatorDesc):
    """DML_ROI_ALIGN_GRAD_OPERATOR_DESC: ROI_ALIGN1's backward pass, for the image and, on
    request, for the region coordinates (FL 4_1).

    OutputGradientTensor: each incoming gradient element goes back to the samples ROI_ALIGN1
    read for it, through their interpolation weights (AVERAGE: divided by the sample count;
    MAX: whole to the first largest sample in sample order, rows then columns). Samples that
    read no input element (outside ``[-1, size]``, or a batch index out of range) pass nothing
    back and, for MAX, never count as the largest (ROI_ALIGN1 with OutOfBoundsInputValue -inf).

    OutputROIGradientTensor: the derivative of ROI_ALIGN1's output with respect to each region's
    ``[x1, y1, x2, y2]`` (the page's pseudo-code, with the chain rule's factors written out:
    the interpolation's slope at each sample times the sample coordinate's derivative
    ``SpatialScale * (1 - t)`` for x1 and ``SpatialScale * t`` for x2, t the sample's fraction
    of the region). The slope is that of the neighbours LINEAR reads (floor and floor + 1) and
    0 where the coordinate is clamped or for NEAREST_NEIGHBOR.

    Fields:
        input_tensor: optional, the forward input {BatchCount, ChannelCount, Height, Width};
            required for OutputROIGradientTensor and for MAX.
        input_gradient_tensor: ROI_ALIGN1's output sizes {NumROIs, ChannelCount, OH, OW}.
        roi_tensor, batch_indices_tensor: ROI_ALIGN1's.
        output_gradient_tensor: optional, the image's sizes (InputTensor's when given).
        output_roi_gradient_tensor: optional, ROITensor's sizes. At least one output is given.
        reduction_function, interpolation_mode, spatial_scale_x, spatial_scale_y,
            input_pixel_offset, output_pixel_offset, minimum_samples_per_output,
            maximum_samples_per_output, align_regions_to_corners: ROI_ALIGN1's.
    Every tensor but BatchIndicesTensor has one float data type.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_ROI_ALIGN_GRAD"
    input_tensor: TensorDesc | None = input_field(optional=True)
    input_gradient_tensor: TensorDesc = input_field()
    roi_tensor: TensorDesc = input_field()
    batch_indices_tensor: TensorDesc = input_field()
    output_gradient_tensor: TensorDesc | None = output_field(optional=True)
    output_roi_gradient_tensor: TensorDesc | None = output_field(optional=True)
    reduction_function: ReduceFunction = attribute(enum_type(ReduceFunction))
    interpolation_mode: InterpolationMode = attribute(enum_type(InterpolationMode))
    spatial_scale_x: float = attribute(FLOAT)
    spatial_scale_y: float = attribute(FLOAT)
    input_pixel_offset: float = attribute(FLOAT)
    output_pixel_offset: float = attribute(FLOAT)
    minimum_samples_per_output: int = attribute(UINT)
    maximum_samples_per_output: int = attribute(UINT)
    align_regions_to_corners: bool = attribute(BOOL)


def _image(d: RoiAlignGradOperatorDesc) -> tuple[str, TensorDesc]:
    """The forward input's desc: InputTensor, or OutputGradientTensor when it is absent."""
    if d.input_tensor is not None:
        return "InputTensor", d.input_tensor
    return "OutputGradientTensor", d.output_gradient_tensor


def roi_align_forward(d: RoiAlignGradOperatorDesc) -> RoiAlign1OperatorDesc:
    """The ROI_ALIGN1 that ROI_ALIGN_GRAD differentiates."""
    outside = -np.inf if d.reduction_function is ReduceFunction.MAX else 0.0
    return RoiAlign1OperatorDesc(
        _image(d)[1],
        d.roi_tensor,
        d.batch_indices_tensor,
        d.input_gradient_tensor,
        d.reduction_function,
        d.interpolation_mode,
        spatial_scale_x=d.spatial_scale_x,
        spatial_scale_y=d.spatial_scale_y,
        input_pixel_offset=d.input_pixel_offset,
        output_pixel_offset=d.output_pixel_offset,
        out_of_bounds_input_value=outside,
        minimum_samples_per_output=d.minimum_samples_per_output,
        maximum_samples_per_output=d.maximum_samples_per_output,
        align_regions_to_corners=d.align_regions_to_corners,
    )


def infer_roi_align_grad(d: RoiAlignGradOperatorDesc) -> tuple[TensorDesc, ...]:
    out = ()
    if d.output_gradient_tensor is not None:
        out += _input_gradient_like(d, _image(d)[1])
    if d.output_roi_gradient_tensor is not None:
        out += (d.roi_tensor.like(),)
    return out


def validate_roi_align_grad(d: RoiAlignGradOperatorDesc, v: Validator) -> None:
    v.check(
        "OutputGradientTensor",
        d.output_gradient_tensor is not None or d.output_roi_gradient_tensor is not None,
        "and OutputROIGradientTensor are both null; at least one must be given",
    )
    for needed, why in (
        (d.output_roi_gradient_tensor is not None, "OutputROIGradientTensor is given"),
        (d.reduction_function is ReduceFunction.MAX, "ReductionFunction is MAX"),
    ):
        v.check("InputTensor", d.input_tensor is not None or not needed, f"is required when {why}")
    path, _ = _image(d)
    names = {"OutputTensor": "InputGradientTensor", "InputTensor": path}
    _forward_rules(v, validate_roi_align, roi_align_forward(d), names)


def lower_roi_align_grad(d: RoiAlignGradOperatorDesc, *arrays):
    arrays = list(arrays)
    forward = roi_align_forward(d)
    g, rois, batch = arrays[-3:]
    # Without InputTensor (AVERAGE, no coordinate gradient) the image gradient does not depend
    # on the image's values.
    x = arrays[0] if d.input_tensor is not None else _zeros(_image(d)[1], g.dtype)
    dx, drois = _vjp(lambda a, r: lower_roi_align(forward, a, r, batch)[0], (x, rois), g)
    out = ()
    if d.output_gradient_tensor is not None:
        out += (dx,)
    if d.output_roi_gradient_tensor is not None:
        out += (drois,)
    return out


register(
    RoiAlignGradOperatorDesc,
    infer=infer_roi_align_grad,
    validate=validate_roi_align_grad,
    lower=lower_roi_align_grad,
    support=rows(
        (
            L.FL_4_1,
            DIMS4,
            F2,
            F2,
            {
                "ROITensor": (F2, (2, 3, 4)),
                "BatchIndicesTensor": (U32, (1, 2, 3, 4)),
                "OutputROIGradientTensor": (F2, (2, 3, 4)),
            },
        ),
    ),
    differentiable=lambda d: True,
    example=Example(
        {
            "type": "DML_OPERATOR_ROI_ALIGN_GRAD",
            "desc": {
                "InputGradientTensor": {"DataType": "FLOAT32", "Sizes": [4, 1, 1, 3]},
                "ROITensor": {"DataType": "FLOAT32", "Sizes": [4, 4]},
                "BatchIndicesTensor": {"DataType": "UINT32", "Sizes": [4]},
                "OutputGradientTensor": {"DataType": "FLOAT32", "Sizes": [1, 1, 4, 4]},
                "ReductionFunction": "DML_REDUCE_FUNCTION_AVERAGE",
                "InterpolationMode": "DML_INTERPOLATION_MODE_NEAREST_NEIGHBOR",
                "SpatialScaleX": 1.0,
                "SpatialScaleY": 1.0,
                "InputPixelOffset": 0.5,
                "OutputPixelOffset": -0.5,
                "MinimumSamplesPerOutput": 1,
                "MaximumSamplesPerOutput": 1,
                "AlignRegionsToCorners": False,
            },
        },
        {
            "InputGradientTensor": list(range(1, 13)),
            "ROITensor": [0, 0, 2, 2, 2, 0, 4, 2, 0, 2, 2, 4, 2, 2, 4, 4],
            "BatchIndicesTensor": [0, 0, 0, 0],
        },
        "the page's example: four 2x2 crops' gradients back onto a 4x4 image (no InputTensor)",
    ),
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
    b1, b2 = _dml_float(d.beta1, w), _dml_float(d.beta2, w)
    t = lax.reshape(step, ()).astype(w.dtype)
    m = b1 * m + (one - b1) * g
    v = b2 * v + (one - b2) * g * g
    alpha = lax.sqrt(one - lax.pow(b2, t)) / (one - lax.pow(b1, t))
    w = w - _dml_float(d.learning_rate, w) * alpha * m / (lax.sqrt(v) + _dml_float(d.epsilon, w))
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
