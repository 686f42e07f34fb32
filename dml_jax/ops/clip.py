"""ELEMENT_WISE_CLIP(1) and ELEMENT_WISE_CLIP_GRAD(1).

CLIP computes ``max(Min, min(g(x), Max))`` in exactly that order (so Min > Max gives Min
everywhere, where XLA's clamp would give Max), after the optional ScaleBias ``g(x) = x*s + b``.
Its gradient follows CLIP_GRAD: the incoming gradient passes only where ``Min < g(x) < Max``
(strictly) and is zero at and beyond the bounds; autodiff of max/min would give 0.5 at a tie.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import jax.numpy as jnp
import numpy as np
from jax import lax

from ..enums import DataType
from ..enums import FeatureLevel as L
from ..errors import ValidationError, Validator, brief
from ..fields import (
    FLOAT,
    SCALE_BIAS,
    OperatorDesc,
    ScalarUnion,
    attribute,
    enum_type,
    input_field,
    output_field,
)
from ..registry import Example, register
from ..support import DIMS1_8, DIMS4, F2, T8, T10, rows
from ..tensor import ScaleBias, TensorDesc
from ._common import apply_scale_bias, infer_same, same_tensors, scale_bias_rule


def convert_float_bound(value: float, data_type: DataType) -> np.generic:
    """CLIP's rule for its FLOAT Min/Max on a tensor of ``data_type``.

    The value is a float32 (DML's FLOAT). For other types it is cast to the tensor type first:
    FLOAT16 by round-to-nearest-even, integers by truncation toward zero. A value outside the
    type's finite range saturates to the nearest finite extreme (infinities stay infinite for
    float types).
    """
    with np.errstate(over="ignore"):
        f32 = np.float32(value)
    if data_type is DataType.FLOAT32:
        return f32
    if data_type.is_float:
        info = np.finfo(data_type.numpy_dtype)
        if math.isfinite(f32) and abs(float(f32)) > float(info.max):
            return data_type.numpy_dtype.type(math.copysign(float(info.max), float(f32)))
        return f32.astype(data_type.numpy_dtype)
    lo, hi = data_type.integer_range  # (np.iinfo knows no 4-bit type)
    if not math.isfinite(f32):
        whole = hi if f32 > 0 else lo
    else:
        whole = min(max(math.trunc(float(f32)), lo), hi)
    return data_type.numpy_dtype.type(whole)


def convert_typed_bound(
    value: int | float,  # noqa: PYI041 (an int is kept exact, not read as a float)
    data_type: DataType,
    where: str,
) -> np.generic:
    """CLIP1's rule: Min/Max are read exactly in MinMaxDataType (no truncation, no saturation).

    An integer type accepts integers and integral floats in its range; a float type accepts any
    number within its finite range, or an infinity, rounded to nearest even.
    """
    dtype = data_type.numpy_dtype
    if data_type.is_float:
        info = np.finfo(dtype)
        # An int may exceed a double (10**400); comparing it with a float is still exact.
        finite = isinstance(value, int) or math.isfinite(value)
        if finite and abs(value) > float(info.max):
            raise ValidationError(
                f"{where} ({brief(value)}) is outside the range of {data_type.name} "
                f"(±{float(info.max)})"
            )
        return dtype.type(value)
    if isinstance(value, float) and (not math.isfinite(value) or value != math.floor(value)):
        raise ValidationError(f"{where} must be an integer for {data_type.name}, got {value}")
    lo, hi = data_type.integer_range  # (np.iinfo knows no 4-bit type)
    whole = int(value)
    if not lo <= whole <= hi:
        raise ValidationError(
            f"{where} ({brief(whole)}) is outside the range of {data_type.name} [{lo}, {hi}]"
        )
    return dtype.type(whole)


def _clip(x, lo: np.generic, hi: np.generic):
    """max(lo, min(x, hi)) with CLIP_GRAD's strict-interior derivative: ``x`` itself strictly
    inside the bounds (where the two are equal), the clipped value under stop_gradient elsewhere
    (at and beyond the bounds, NaN included), so that autodiff of it as written is
    ``_clip_grad``'s rule. (A custom_jvp made per call gave the same derivative at several times
    the cost to trace.)"""
    low, high = jnp.asarray(lo, x.dtype), jnp.asarray(hi, x.dtype)
    clipped = lax.stop_gradient(lax.max(low, lax.min(x, high)))
    return jnp.where((x > low) & (x < high), x, clipped)


def _clip_grad(x, g, lo: np.generic, hi: np.generic):
    """CLIP_GRAD: g where lo < x < hi (strict), 0 at and beyond the bounds."""
    inside = (x > jnp.asarray(lo, x.dtype)) & (x < jnp.asarray(hi, x.dtype))
    return jnp.where(inside, g, jnp.zeros_like(g))


@dataclass(frozen=True)
class ElementWiseClipOperatorDesc(OperatorDesc):
    """DML_ELEMENT_WISE_CLIP_OPERATOR_DESC: ``max(Min, min(g(x), Max))`` (FL 1_0).

    Fields:
        input_tensor, output_tensor: same data type, rank and sizes (the output may alias the
            input in buffer mode).
        min, max: DML FLOATs (not NaN). For non-FLOAT32 tensors they are first cast to the
            tensor type (integers: truncation toward zero; FLOAT16: round to nearest even); values
            outside the type's range saturate to it.
        scale_bias: optional ``ScaleBias`` applied to the input first (float tensors only).
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_ELEMENT_WISE_CLIP"
    input_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    min: float = attribute(FLOAT)
    max: float = attribute(FLOAT)
    scale_bias: ScaleBias | None = attribute(SCALE_BIAS, default=None)

    def bounds(self) -> tuple[np.generic, np.generic]:
        t = self.output_tensor.data_type
        return convert_float_bound(self.min, t), convert_float_bound(self.max, t)


@dataclass(frozen=True)
class ElementWiseClip1OperatorDesc(OperatorDesc):
    """DML_ELEMENT_WISE_CLIP1_OPERATOR_DESC: CLIP with Min/Max typed exactly (FL 5_0).

    Fields:
        input_tensor, output_tensor: same data type, rank and sizes.
        min, max: numbers read in ``min_max_data_type`` (an integral float such as 5.0 is
            accepted for an integer type; 5.5 or an out-of-range value is rejected).
        min_max_data_type: must equal OutputTensor.DataType; ``None`` means that type.
        scale_bias: optional ``ScaleBias`` applied to the input first (float tensors only).
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_ELEMENT_WISE_CLIP1"
    input_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    min: int | float = attribute(ScalarUnion("min_max_data_type"))
    max: int | float = attribute(ScalarUnion("min_max_data_type"))
    min_max_data_type: DataType | None = attribute(enum_type(DataType), default=None)
    scale_bias: ScaleBias | None = attribute(SCALE_BIAS, default=None)

    def bounds(self) -> tuple[np.generic, np.generic]:
        t = self.min_max_data_type or self.output_tensor.data_type
        return (
            convert_typed_bound(self.min, t, f"{self.operator_type}: Min"),
            convert_typed_bound(self.max, t, f"{self.operator_type}: Max"),
        )


def _validate_typed(d: Any, v: Validator, tensor_path: str, tensor: TensorDesc) -> None:
    if d.min_max_data_type is not None:
        v.equal("MinMaxDataType", d.min_max_data_type, tensor.data_type, f"{tensor_path}.DataType")
    d.bounds()  # raises for a value that the type cannot hold exactly


def validate_clip(d: Any, v: Validator) -> None:
    same_tensors(d, v)
    scale_bias_rule(v, d.scale_bias, d.input_tensor)
    if isinstance(d, ElementWiseClip1OperatorDesc):
        _validate_typed(d, v, "OutputTensor", d.output_tensor)


def lower_clip(d: Any, x):
    lo, hi = d.bounds()
    return (_clip(apply_scale_bias(x, d.scale_bias), lo, hi),)


def _example(operator_type: str, data_type: str, bounds: dict) -> Example:
    t = {"DataType": data_type, "Sizes": [9]}
    desc = {"InputTensor": t, "OutputTensor": t, **bounds}
    return Example(
        {"type": operator_type, "desc": desc},
        {"InputTensor": list(range(-4, 5))},
        f"-4..4 clipped to [{bounds['Min']}, {bounds['Max']}]",
    )


register(
    ElementWiseClipOperatorDesc,
    infer=infer_same,
    validate=validate_clip,
    lower=lower_clip,
    in_place=True,
    support=rows(
        (L.FL_1_0, DIMS4, F2),
        (L.FL_2_1, DIMS4, T8),
        (L.FL_3_0, DIMS1_8, T8),
        (L.FL_5_0, DIMS1_8, T10),
    ),
    example=_example("DML_OPERATOR_ELEMENT_WISE_CLIP", "FLOAT32", {"Min": -2.5, "Max": 2.5}),
)
register(
    ElementWiseClip1OperatorDesc,
    infer=infer_same,
    validate=validate_clip,
    lower=lower_clip,
    in_place=True,
    support=rows((L.FL_5_0, DIMS1_8, T10)),
    example=_example(
        "DML_OPERATOR_ELEMENT_WISE_CLIP1",
        "INT16",
        {"MinMaxDataType": "INT16", "Min": -3, "Max": 2},
    ),
)


@dataclass(frozen=True)
class ElementWiseClipGradOperatorDesc(OperatorDesc):
    """DML_ELEMENT_WISE_CLIP_GRAD_OPERATOR_DESC: CLIP's backward pass (FL 3_1).

    ``OutputGradient = InputGradient where Min < Input < Max (strictly), else 0``.

    Fields:
        input_tensor: CLIP's forward input x.
        input_gradient_tensor: the incoming gradient.
        output_gradient_tensor: the result (may alias InputTensor in buffer mode).
        min, max: DML FLOATs, converted to the tensor type as CLIP converts them.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_ELEMENT_WISE_CLIP_GRAD"
    input_tensor: TensorDesc = input_field()
    input_gradient_tensor: TensorDesc = input_field()
    output_gradient_tensor: TensorDesc = output_field()
    min: float = attribute(FLOAT)
    max: float = attribute(FLOAT)

    def bounds(self) -> tuple[np.generic, np.generic]:
        t = self.output_gradient_tensor.data_type
        return convert_float_bound(self.min, t), convert_float_bound(self.max, t)


@dataclass(frozen=True)
class ElementWiseClipGrad1OperatorDesc(OperatorDesc):
    """DML_ELEMENT_WISE_CLIP_GRAD1_OPERATOR_DESC: CLIP_GRAD with typed Min/Max (FL 5_0).

    Fields:
        input_tensor, input_gradient_tensor, output_gradient_tensor: as CLIP_GRAD.
        min, max: numbers read exactly in ``min_max_data_type`` (see CLIP1).
        min_max_data_type: must equal OutputGradientTensor.DataType; ``None`` means that type.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_ELEMENT_WISE_CLIP_GRAD1"
    input_tensor: TensorDesc = input_field()
    input_gradient_tensor: TensorDesc = input_field()
    output_gradient_tensor: TensorDesc = output_field()
    min: int | float = attribute(ScalarUnion("min_max_data_type"))
    max: int | float = attribute(ScalarUnion("min_max_data_type"))
    min_max_data_type: DataType | None = attribute(enum_type(DataType), default=None)

    def bounds(self) -> tuple[np.generic, np.generic]:
        t = self.min_max_data_type or self.output_gradient_tensor.data_type
        return (
            convert_typed_bound(self.min, t, f"{self.operator_type}: Min"),
            convert_typed_bound(self.max, t, f"{self.operator_type}: Max"),
        )


def _infer_grad(d: Any) -> tuple[TensorDesc, ...]:
    return (d.input_gradient_tensor.like(),)


def validate_clip_grad(d: Any, v: Validator) -> None:
    same_tensors(d, v)
    if isinstance(d, ElementWiseClipGrad1OperatorDesc):
        _validate_typed(d, v, "OutputGradientTensor", d.output_gradient_tensor)


def lower_clip_grad(d: Any, x, g):
    lo, hi = d.bounds()
    return (_clip_grad(x, g, lo, hi),)


def _grad_example(operator_type: str, bounds: dict) -> Example:
    t = {"DataType": "FLOAT16", "Sizes": [2, 3]}
    desc = {"InputTensor": t, "InputGradientTensor": t, "OutputGradientTensor": t, **bounds}
    return Example(
        {"type": operator_type, "desc": desc},
        {"InputTensor": [-2, -1, 0, 1, 2, 3], "InputGradientTensor": [1, 2, 3, 4, 5, 6]},
        "the gradient passes strictly inside (-1, 2)",
    )


register(
    ElementWiseClipGradOperatorDesc,
    infer=_infer_grad,
    validate=validate_clip_grad,
    lower=lower_clip_grad,
    in_place=True,
    support=rows((L.FL_3_1, DIMS1_8, T8), (L.FL_5_0, DIMS1_8, T10)),
    example=_grad_example("DML_OPERATOR_ELEMENT_WISE_CLIP_GRAD", {"Min": -1, "Max": 2}),
)
register(
    ElementWiseClipGrad1OperatorDesc,
    infer=_infer_grad,
    validate=validate_clip_grad,
    lower=lower_clip_grad,
    in_place=True,
    support=rows((L.FL_5_0, DIMS1_8, T10)),
    example=_grad_example(
        "DML_OPERATOR_ELEMENT_WISE_CLIP_GRAD1",
        {"MinMaxDataType": "FLOAT16", "Min": -1, "Max": 2},
    ),
)
