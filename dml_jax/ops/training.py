"""Training: DirectML's gradient operators and ADAM_OPTIMIZER.

Here ACTIVATION_RELU_GRAD, AVERAGE_POOLING_GRAD, MAX_POOLING_GRAD, SLICE_GRAD and
RESAMPLE_GRAD(1); LOCAL_RESPONSE_NORMALIZATION_GRAD, BATCH_NORMALIZATION_GRAD and
BATCH_NORMALIZATION_TRAINING_GRAD in ``training_norm.py``, ROI_ALIGN_GRAD in
``training_roi.py``, ADAM_OPTIMIZER in ``optimizer.py``, what they share in ``_training.py``
(ELEMENT_WISE_CLIP_GRAD(1) live beside CLIP in ``clip.py``).

A gradient operator takes the gradient of a forward operator's output (InputGradientTensor)
and returns the gradient of its input (OutputGradientTensor). Most of them are exactly the
backward pass of a forward operator that dml_jax already lowers, so each of those stands for a
*forward description*: its OutputGradientTensor plays the forward InputTensor and its
InputGradientTensor the forward OutputTensor (MAX_POOLING_GRAD and LRN_GRAD also have the
forward InputTensor itself). Validation runs the forward operator's own rules on that
description, reporting them in the gradient operator's member names (``AsForward``), and the
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

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from jax import lax

from ..enums import AxisDirection, InterpolationMode
from ..enums import FeatureLevel as L
from ..errors import Validator
from ..fields import (
    BOOL,
    FLOAT_ARRAY,
    INT_ARRAY,
    UINT_ARRAY,
    OperatorDesc,
    attribute,
    count_of,
    enum_type,
    input_field,
    output_field,
)
from ..registry import Example, register
from ..support import DIMS1_8, DIMS4, DIMS4_5, F2, T8, rows
from ..tensor import TensorDesc
from ._common import same_tensors
from ._training import (
    GRAD_NAMES,
    forward_rules,
    infer_like_gradient,
    input_gradient_like,
    vjp_of,
    zeros_of,
)
from .activation import relu_grad
from .movement import Slice1OperatorDesc, validate_slice
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
    return input_gradient_like(d, d.output_gradient_tensor)


def validate_average_pooling_grad(d: AveragePoolingGradOperatorDesc, v: Validator) -> None:
    forward_rules(v, validate_pooling, average_pooling_forward(d), GRAD_NAMES)


def lower_average_pooling_grad(d: AveragePoolingGradOperatorDesc, g):
    plan = window_plan(d, d.output_gradient_tensor)
    zeros = zeros_of(d.output_gradient_tensor, g.dtype)  # the pooling is linear: any point
    return vjp_of(lambda x: average_pool(plan, x, d.include_padding), (zeros,), g)


def infer_max_pooling_grad(d: MaxPoolingGradOperatorDesc) -> tuple[TensorDesc, ...]:
    return input_gradient_like(d, d.input_tensor)


def validate_max_pooling_grad(d: MaxPoolingGradOperatorDesc, v: Validator) -> None:
    forward_rules(
        v, validate_pooling, max_pooling_forward(d), {"OutputTensor": "InputGradientTensor"}
    )


def lower_max_pooling_grad(d: MaxPoolingGradOperatorDesc, x, g):
    plan = window_plan(d)
    return vjp_of(lambda a: window_max(plan, a), (x,), g)


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
    return input_gradient_like(d, d.output_gradient_tensor)


def validate_slice_grad(d: SliceGradOperatorDesc, v: Validator) -> None:
    forward_rules(v, validate_slice, slice_forward(d), GRAD_NAMES)


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
    return input_gradient_like(d, d.output_gradient_tensor)


def validate_resample_grad(d: Any, v: Validator) -> None:
    forward_rules(v, validate_resample, resample_forward(d), GRAD_NAMES)


def lower_resample_grad(d: Any, g):
    forward = resample_forward(d)
    zeros = zeros_of(d.output_gradient_tensor, g.dtype)  # resampling is linear: any point
    return vjp_of(lambda x: lower_resample(forward, x)[0], (zeros,), g)


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
