"""DML_OPERATOR_ELEMENT_WISE_*: element-by-element math on tensors of equal sizes.

Every tensor has the same data type, rank and sizes; broadcasting is DirectML's: a stride-0
input desc in buffer mode. Outputs may alias inputs (in-place execution). Integer arithmetic
wraps around on overflow (two's complement), as GPU integer units do; FLOAT16 is computed in
float32 and rounded once. Operators with ``ScaleBias`` apply ``x * Scale + Bias`` to each input
first (float tensors only).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ..enums import FeatureLevel as L
from ..errors import Validator
from ..fields import (
    OPERATOR_DESC,
    SCALE_BIAS,
    OperatorDesc,
    attribute,
    input_field,
    output_field,
)
from ..fused import apply_fused, validate_fused
from ..registry import Example, register
from ..support import DIMS1_8, DIMS4, DIMS4_5, F2, S4, S6, T8, T10, T11, rows
from ..tensor import ScaleBias, TensorDesc
from ._common import apply_scale_bias, infer_same, same_tensors, scale_bias_rule


def _validate_same(d: Any, v: Validator) -> None:
    same_tensors(d, v)


@dataclass(frozen=True)
class ElementWiseIdentityOperatorDesc(OperatorDesc):
    """DML_ELEMENT_WISE_IDENTITY_OPERATOR_DESC: ``x * Scale + Bias``, or a copy (FL 1_0).

    With strides on either tensor it changes a tensor's memory layout (buffer mode).

    Fields:
        input_tensor, output_tensor: same data type, rank and sizes (the output may alias
            the input).
        scale_bias: optional ``ScaleBias`` (float tensors only).
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_ELEMENT_WISE_IDENTITY"
    input_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    scale_bias: ScaleBias | None = attribute(SCALE_BIAS, default=None)


def validate_identity(d: ElementWiseIdentityOperatorDesc, v: Validator) -> None:
    same_tensors(d, v)
    scale_bias_rule(v, d.scale_bias, d.input_tensor)


def lower_identity(d: ElementWiseIdentityOperatorDesc, x):
    return (apply_scale_bias(x, d.scale_bias),)


register(
    ElementWiseIdentityOperatorDesc,
    infer=infer_same,
    validate=validate_identity,
    lower=lower_identity,
    in_place=True,
    support=rows(
        (L.FL_1_0, DIMS4, F2),
        (L.FL_2_1, DIMS4_5, T8),
        (L.FL_3_0, DIMS1_8, T8),
        (L.FL_4_1, DIMS1_8, T11),
    ),
    example=Example(
        {
            "type": "DML_OPERATOR_ELEMENT_WISE_IDENTITY",
            "desc": {
                "InputTensor": {"DataType": "FLOAT32", "Sizes": [3]},
                "OutputTensor": {"DataType": "FLOAT32", "Sizes": [3]},
                "ScaleBias": {"Scale": 2, "Bias": 10},
            },
        },
        {"InputTensor": [1, 2, 3]},
        "x * 2 + 10",
    ),
)


@dataclass(frozen=True)
class ElementWiseAddOperatorDesc(OperatorDesc):
    """DML_ELEMENT_WISE_ADD_OPERATOR_DESC: ``a + b`` (FL 1_0); integers wrap around.

    Fields:
        a_tensor, b_tensor, output_tensor: same data type, rank and sizes (the output may
            alias either input; a stride-0 input desc broadcasts in buffer mode).
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_ELEMENT_WISE_ADD"
    a_tensor: TensorDesc = input_field()
    b_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()


def lower_add(d: Any, a, b):
    return (a + b,)  # lax.add: two's-complement wrap-around for integers


_ADD_EXAMPLE = Example(
    {
        "type": "DML_OPERATOR_ELEMENT_WISE_ADD",
        "desc": {
            "ATensor": {"DataType": "FLOAT32", "Sizes": [3]},
            "BTensor": {"DataType": "FLOAT32", "Sizes": [3]},
            "OutputTensor": {"DataType": "FLOAT32", "Sizes": [3]},
        },
    },
    {"ATensor": [1, 2, 3], "BTensor": [5, 8, -5]},
    "[1, 2, 3] + [5, 8, -5]",
)


register(
    ElementWiseAddOperatorDesc,
    infer=infer_same,
    validate=_validate_same,
    lower=lower_add,
    in_place=True,
    support=rows(
        (L.FL_1_0, DIMS4, F2),
        (L.FL_2_1, DIMS4_5, S4),
        (L.FL_3_0, DIMS1_8, S4),
        (L.FL_4_1, DIMS1_8, S6),
        (L.FL_5_1, DIMS1_8, T10),
    ),
    example=_ADD_EXAMPLE,
)


@dataclass(frozen=True)
class ElementWiseAdd1OperatorDesc(OperatorDesc):
    """DML_ELEMENT_WISE_ADD1_OPERATOR_DESC: ``FusedActivation(a + b)`` (FL 2_0).

    Fields:
        a_tensor, b_tensor, output_tensor: as ELEMENT_WISE_ADD.
        fused_activation: optional activation applied to the sum in the same kernel (an
            activation description whose tensors may be ``None``); FLOAT32/FLOAT16 outputs only.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_ELEMENT_WISE_ADD1"
    a_tensor: TensorDesc = input_field()
    b_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    fused_activation: OperatorDesc | None = attribute(OPERATOR_DESC, default=None)


def validate_add1(d: ElementWiseAdd1OperatorDesc, v: Validator) -> None:
    same_tensors(d, v)
    validate_fused(v, d.fused_activation, d.output_tensor)


def lower_add1(d: ElementWiseAdd1OperatorDesc, a, b):
    return (apply_fused(d.fused_activation, a + b, d.output_tensor),)


register(
    ElementWiseAdd1OperatorDesc,
    infer=infer_same,
    validate=validate_add1,
    lower=lower_add1,
    in_place=True,
    support=rows(
        (L.FL_2_0, DIMS4_5, F2),
        (L.FL_2_1, DIMS4_5, S4),
        (L.FL_3_0, DIMS1_8, T8),
    ),
    example=Example(
        {
            "type": "DML_OPERATOR_ELEMENT_WISE_ADD1",
            "desc": {
                "ATensor": {"DataType": "FLOAT32", "Sizes": [3]},
                "BTensor": {"DataType": "FLOAT32", "Sizes": [3]},
                "OutputTensor": {"DataType": "FLOAT32", "Sizes": [3]},
                "FusedActivation": {"Type": "ACTIVATION_ELU", "Alpha": 0.5},
            },
        },
        {"ATensor": [1, 2, 3], "BTensor": [5, 8, -5]},
        "ELU(a + b) with Alpha 0.5, fused",
    ),
)
