"""Training, ROI_ALIGN_GRAD: the backward pass of ROI_ALIGN1 (``roi.py``) as ``training.py``
describes: ``jax.vjp`` of the forward lowering, its MAX sending a gradient to the first
maximum only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..enums import FeatureLevel as L
from ..enums import InterpolationMode, ReduceFunction
from ..errors import Validator
from ..fields import (
    BOOL,
    FLOAT,
    UINT,
    OperatorDesc,
    attribute,
    enum_type,
    input_field,
    output_field,
)
from ..registry import Example, register
from ..support import DIMS4, F2, U32, rows
from ..tensor import TensorDesc
from ._training import (
    forward_rules,
    input_gradient_like,
    vjp_of,
    zeros_of,
)
from .roi import RoiAlign1OperatorDesc, lower_roi_align, validate_roi_align

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
        out += input_gradient_like(d, _image(d)[1])
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
    forward_rules(v, validate_roi_align, roi_align_forward(d), names)


def lower_roi_align_grad(d: RoiAlignGradOperatorDesc, *arrays):
    arrays = list(arrays)
    forward = roi_align_forward(d)
    g, rois, batch = arrays[-3:]
    # Without InputTensor (AVERAGE, no coordinate gradient) the image gradient does not depend
    # on the image's values.
    x = arrays[0] if d.input_tensor is not None else zeros_of(_image(d)[1], g.dtype)
    dx, drois = vjp_of(lambda a, r: lower_roi_align(forward, a, r, batch)[0], (x, rois), g)
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
