"""Quantization: ELEMENT_WISE_QUANTIZE_LINEAR, ELEMENT_WISE_DEQUANTIZE_LINEAR, QUANTIZE,
DEQUANTIZE, DYNAMIC_QUANTIZE_LINEAR and ELEMENT_WISE_QUANTIZED_LINEAR_ADD.

The arithmetic (float32, round half to even, saturation, NaN to the zero point, exact zero-point
differences, 4-bit elements as jnp.int4 / jnp.uint4) is ``_quant``'s, shared with the quantized
matrix multiplies (``quantized_matmul``), convolutions and pooling (``quantized_conv``);
docs/semantics.md, "Quantization", lists the choices DirectML leaves open.

Scale and zero point tensors:
- ELEMENT_WISE_(DE)QUANTIZE_LINEAR: every tensor has InputTensor's sizes; per-tensor and per-axis
  parameters are DirectML's broadcasting, stride-0 descs in buffer mode.
- QUANTIZE / DEQUANTIZE: QuantizationTensors (the scale, then for SCALE_ZERO_POINT the zero
  point) have InputTensor's rank and sizes that divide its sizes: along each dimension one value
  covers a block of ``InputTensor.Sizes[i] / Sizes[i]`` consecutive elements (all 1: per tensor;
  one dimension: per axis; several: blocked), the layout ONNX Runtime's DirectML provider gives
  DEQUANTIZE for blocked (MatMulNBits) weights.
- DYNAMIC_QUANTIZE_LINEAR writes one scale and one zero point; QUANTIZED_LINEAR_ADD reads one of
  each per operand.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import jax.numpy as jnp
from jax import lax

from ..enums import DataType, QuantizationType
from ..enums import FeatureLevel as L
from ..errors import Validator, show
from ..fields import OperatorDesc, attribute, count_of, enum_type, input_field, output_field
from ..registry import Example, register
from ..support import DIMS1_8, DIMS4, rows, types
from ..tensor import TensorDesc
from ._quant import (
    F16_32,
    F32,
    I32,
    INTEGERS,
    Q4,
    Q8,
    QuantizedPairMembers,
    as_float32,
    dequantize,
    divide,
    named_inputs,
    quantize,
    rounded,
)

_U8 = types("UINT8")


def _zero_point_rule(v: Validator, zero_point: TensorDesc | None) -> None:
    """ZeroPointTensor is optional from feature level 6_2 (absent: 0)."""
    v.check(
        "ZeroPointTensor",
        zero_point is not None or v.level is None or v.level >= L.FL_6_2,
        f"is required below feature level 6_2 (optional from 6_2), the target is "
        f"{v.level.label if v.level is not None else '?'}",
    )


def _same_shape(v: Validator, d: Any) -> None:
    """Every tensor has InputTensor's DimensionCount and Sizes (the pages' constraint)."""
    tensors = d.input_slots()[1:] + d.output_slots()
    v.same("rank", list(tensors), ("InputTensor", d.input_tensor))
    v.same("sizes", list(tensors), ("InputTensor", d.input_tensor))


def _infer_like_input(d: Any) -> tuple[TensorDesc, ...]:
    """OutputTensor: InputTensor's sizes in the output's own data type."""
    return (d.input_tensor.like(data_type=d.output_tensor.data_type),)


# ---------------------------------------------------------------------------------------------
# ELEMENT_WISE_QUANTIZE_LINEAR


@dataclass(frozen=True)
class _ScaleZeroPointMembers(OperatorDesc):
    """The members ELEMENT_WISE_QUANTIZE_LINEAR and ELEMENT_WISE_DEQUANTIZE_LINEAR share."""

    input_tensor: TensorDesc = input_field()
    scale_tensor: TensorDesc = input_field()
    zero_point_tensor: TensorDesc | None = input_field(optional=True)
    output_tensor: TensorDesc = output_field()


@dataclass(frozen=True)
class ElementWiseQuantizeLinearOperatorDesc(_ScaleZeroPointMembers):
    """DML_ELEMENT_WISE_QUANTIZE_LINEAR_OPERATOR_DESC:
    ``clamp(round(Input / Scale) + ZeroPoint, Min, Max)`` element by element (FL 1_0).

    Fields:
        input_tensor: FLOAT32 (FLOAT16 from 6_0; INT32, read as float32, from 2_1).
        scale_tensor: InputTensor's sizes; InputTensor's type (FLOAT32 for an INT32 input).
        zero_point_tensor: optional from 6_2 (absent: 0); OutputTensor's type.
        output_tensor: UINT8 (INT8 from 2_1), InputTensor's sizes.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_ELEMENT_WISE_QUANTIZE_LINEAR"


def validate_quantize_linear(d: ElementWiseQuantizeLinearOperatorDesc, v: Validator) -> None:
    _same_shape(v, d)
    x, scale = d.input_tensor.data_type, d.scale_tensor.data_type
    want = DataType.FLOAT32 if x is DataType.INT32 else x
    v.equal(
        "ScaleTensor.DataType",
        scale,
        want,
        "FLOAT32 for an INT32 InputTensor" if x is DataType.INT32 else "InputTensor.DataType",
    )
    if d.zero_point_tensor is not None:
        v.same(
            "data_type",
            [("ZeroPointTensor", d.zero_point_tensor)],
            ("OutputTensor", d.output_tensor),
        )
    _zero_point_rule(v, d.zero_point_tensor)


def lower_quantize_linear(d: ElementWiseQuantizeLinearOperatorDesc, *arrays):
    a = named_inputs(d, arrays)
    out = d.output_tensor.data_type
    return (
        quantize(
            as_float32(a["input_tensor"]), a["scale_tensor"], a["zero_point_tensor"], out, out
        ),
    )


register(
    ElementWiseQuantizeLinearOperatorDesc,
    infer=_infer_like_input,
    validate=validate_quantize_linear,
    lower=lower_quantize_linear,
    support=rows(
        (L.FL_1_0, DIMS4, F32, _U8, {"ZeroPointTensor": _U8}),
        (L.FL_2_1, DIMS4, F32 | I32, Q8, {"ScaleTensor": F32, "ZeroPointTensor": Q8}),
        (L.FL_3_0, DIMS1_8, F32 | I32, Q8, {"ScaleTensor": F32, "ZeroPointTensor": Q8}),
        (L.FL_6_0, DIMS1_8, F16_32 | I32, Q8, {"ScaleTensor": F16_32, "ZeroPointTensor": Q8}),
    ),
    example=Example(
        {
            "type": "DML_OPERATOR_ELEMENT_WISE_QUANTIZE_LINEAR",
            "desc": {
                "InputTensor": {"DataType": "FLOAT32", "Sizes": [1, 1, 2, 3]},
                "ScaleTensor": {"DataType": "FLOAT32", "Sizes": [1, 1, 2, 3]},
                "ZeroPointTensor": {"DataType": "UINT8", "Sizes": [1, 1, 2, 3]},
                "OutputTensor": {"DataType": "UINT8", "Sizes": [1, 1, 2, 3]},
            },
        },
        {
            "InputTensor": [-1.0, 0.25, 0.75, 1.25, 100.0, -100.0],
            "ScaleTensor": [0.5] * 6,
            "ZeroPointTensor": [128] * 6,
        },
        "x / 0.5 rounded half to even, plus 128, saturated to UINT8",
    ),
)


# ---------------------------------------------------------------------------------------------
# ELEMENT_WISE_DEQUANTIZE_LINEAR


@dataclass(frozen=True)
class ElementWiseDequantizeLinearOperatorDesc(_ScaleZeroPointMembers):
    """DML_ELEMENT_WISE_DEQUANTIZE_LINEAR_OPERATOR_DESC: ``(Input - ZeroPoint) * Scale`` element
    by element (FL 1_0).

    Fields:
        input_tensor: UINT8 (from 2_1 also INT8, INT16, INT32, UINT16, UINT32).
        scale_tensor: InputTensor's sizes; OutputTensor's type.
        zero_point_tensor: optional from 6_2 (absent: 0); InputTensor's type.
        output_tensor: FLOAT32 (FLOAT16 from 6_0), InputTensor's sizes.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_ELEMENT_WISE_DEQUANTIZE_LINEAR"


def validate_dequantize_linear(d: ElementWiseDequantizeLinearOperatorDesc, v: Validator) -> None:
    _same_shape(v, d)
    if d.zero_point_tensor is not None:
        v.same(
            "data_type", [("ZeroPointTensor", d.zero_point_tensor)], ("InputTensor", d.input_tensor)
        )
    v.same("data_type", [("ScaleTensor", d.scale_tensor)], ("OutputTensor", d.output_tensor))
    _zero_point_rule(v, d.zero_point_tensor)


def lower_dequantize_linear(d: ElementWiseDequantizeLinearOperatorDesc, *arrays):
    a = named_inputs(d, arrays)
    t = d.input_tensor.data_type
    y = dequantize(a["input_tensor"], t, a["zero_point_tensor"], t, a["scale_tensor"])
    return (y.astype(d.output_tensor.dtype),)


register(
    ElementWiseDequantizeLinearOperatorDesc,
    infer=_infer_like_input,
    validate=validate_dequantize_linear,
    lower=lower_dequantize_linear,
    support=rows(
        (L.FL_1_0, DIMS4, _U8, F32, {"ScaleTensor": F32}),
        (L.FL_2_1, DIMS4, INTEGERS, F32, {"ScaleTensor": F32}),
        (L.FL_3_0, DIMS1_8, INTEGERS, F32, {"ScaleTensor": F32}),
        (L.FL_6_0, DIMS1_8, INTEGERS, F16_32, {"ScaleTensor": F16_32}),
    ),
    example=Example(
        {
            "type": "DML_OPERATOR_ELEMENT_WISE_DEQUANTIZE_LINEAR",
            "desc": {
                "InputTensor": {"DataType": "UINT8", "Sizes": [1, 1, 2, 2]},
                "ScaleTensor": {"DataType": "FLOAT32", "Sizes": [1, 1, 2, 2]},
                "ZeroPointTensor": {"DataType": "UINT8", "Sizes": [1, 1, 2, 2]},
                "OutputTensor": {"DataType": "FLOAT32", "Sizes": [1, 1, 2, 2]},
            },
        },
        {
            "InputTensor": [0, 127, 128, 255],
            "ScaleTensor": [0.5, 0.5, 2.0, 2.0],
            "ZeroPointTensor": [128, 128, 128, 128],
        },
        "(q - 128) * scale, one scale per column",
    ),
)


# ---------------------------------------------------------------------------------------------
# QUANTIZE / DEQUANTIZE (feature level 6_3)


@dataclass(frozen=True)
class _QuantizationTensorsMembers(OperatorDesc):
    """The members QUANTIZE and DEQUANTIZE share."""

    input_tensor: TensorDesc = input_field()
    quantization_type: QuantizationType = attribute(enum_type(QuantizationType))
    quantization_tensors: tuple[TensorDesc, ...] = input_field(array=True)
    output_tensor: TensorDesc = output_field()
    quantization_tensor_count: int | None = count_of("quantization_tensors")


@dataclass(frozen=True)
class QuantizeOperatorDesc(_QuantizationTensorsMembers):
    """DML_QUANTIZE_OPERATOR_DESC: ``clamp(round(Input / Scale) + ZeroPoint, Min, Max)`` with
    per-tensor, per-axis or blocked scale and zero point tensors (FL 6_3).

    Fields:
        input_tensor: FLOAT32 or FLOAT16.
        quantization_type: ``QuantizationType`` SCALE (QuantizationTensors: the scale) or
            SCALE_ZERO_POINT (the scale, then the zero point); NONE is rejected.
        quantization_tensors: InputTensor's rank; each size divides InputTensor's (one value
            per block of ``InputTensor.Sizes[i] / Sizes[i]`` elements). The scale has
            InputTensor's type, the zero point OutputTensor's and the scale's sizes.
        output_tensor: INT8, UINT8, INT4 or UINT4 (``jnp.int4`` / ``jnp.uint4``), InputTensor's sizes.
        quantization_tensor_count: optional; the length of QuantizationTensors.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_QUANTIZE"


@dataclass(frozen=True)
class DequantizeOperatorDesc(_QuantizationTensorsMembers):
    """DML_DEQUANTIZE_OPERATOR_DESC: ``(Input - ZeroPoint) * Scale`` with per-tensor, per-axis
    or blocked scale and zero point tensors (FL 6_3).

    Fields:
        input_tensor: INT8, UINT8, INT4 or UINT4 (``jnp.int4`` / ``jnp.uint4``).
        quantization_type: as ``QuantizeOperatorDesc``.
        quantization_tensors: as ``QuantizeOperatorDesc``; the scale has OutputTensor's type,
            the zero point InputTensor's.
        output_tensor: FLOAT32 or FLOAT16, InputTensor's sizes.
        quantization_tensor_count: optional; the length of QuantizationTensors.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_DEQUANTIZE"


def _is_quantize(d: Any) -> bool:
    return d.operator_type == QuantizeOperatorDesc.operator_type


def validate_blocked(d: Any, v: Validator) -> None:
    kind = d.quantization_type
    v.check(
        "QuantizationType",
        kind is not QuantizationType.NONE,
        "must be SCALE or SCALE_ZERO_POINT, got NONE",
    )
    want = 2 if kind is QuantizationType.SCALE_ZERO_POINT else 1
    params = d.quantization_tensors
    v.check(
        "QuantizationTensors",
        len(params) == want,
        f"must hold {want} tensor{'s' if want > 1 else ''} for {kind.name} "
        f"({'the scale, then the zero point' if want > 1 else 'the scale'}), got {len(params)}",
    )
    x = d.input_tensor
    paths = [(f"QuantizationTensors[{i}]", t) for i, t in enumerate(params)]
    v.same("rank", paths + [("OutputTensor", d.output_tensor)], ("InputTensor", x))
    float_side = ("InputTensor", x) if _is_quantize(d) else ("OutputTensor", d.output_tensor)
    int_side = ("OutputTensor", d.output_tensor) if _is_quantize(d) else ("InputTensor", x)
    v.same("data_type", paths[:1], float_side)
    if len(params) == 2:
        v.same("data_type", paths[1:], int_side)
        v.same("sizes", paths[1:], paths[0])
    for path, t in paths:
        for i, (n, q) in enumerate(zip(x.sizes, t.sizes)):
            v.check(
                f"{path}.Sizes[{i}]",
                n % q == 0,
                f"({q}) must divide InputTensor.Sizes[{i}] ({n}): each value covers a block of "
                "InputTensor.Sizes[i] / Sizes[i] elements",
            )


def _blocks(p, shape: tuple[int, ...]):
    """A quantization tensor repeated over its blocks to ``shape``: {q0, q1, ..} becomes
    {q0 * b0, q1 * b1, ..} with ``b = shape / q``, each value copied over its block."""
    interleaved, dims = [], []
    for i, (n, q) in enumerate(zip(shape, p.shape)):
        dims.append(2 * i)
        interleaved += [q, n // q]
    return lax.reshape(lax.broadcast_in_dim(p, tuple(interleaved), tuple(dims)), shape)


def lower_quantize(d: QuantizeOperatorDesc, x, scale, *zero_point):
    shape = tuple(x.shape)
    out = d.output_tensor.data_type
    zp = _blocks(zero_point[0], shape) if zero_point else None
    return (quantize(as_float32(x), _blocks(as_float32(scale), shape), zp, out, out),)


def lower_dequantize(d: DequantizeOperatorDesc, q, scale, *zero_point):
    shape = tuple(q.shape)
    t = d.input_tensor.data_type
    zp = _blocks(zero_point[0], shape) if zero_point else None
    y = dequantize(q, t, zp, t, _blocks(scale, shape))
    return (y.astype(d.output_tensor.dtype),)


def _blocked_example(cls: type) -> Example:
    quantize_ = cls is QuantizeOperatorDesc
    x = {"DataType": "FLOAT32" if quantize_ else "INT8", "Sizes": [2, 4]}
    y = {"DataType": "INT8" if quantize_ else "FLOAT32", "Sizes": [2, 4]}
    desc = {
        "InputTensor": x,
        "QuantizationType": "DML_QUANTIZATION_TYPE_SCALE_ZERO_POINT",
        "QuantizationTensorCount": 2,
        "QuantizationTensors": [
            {"DataType": "FLOAT32", "Sizes": [2, 2]},
            {"DataType": "INT8", "Sizes": [2, 2]},
        ],
        "OutputTensor": y,
    }
    params = [[0.5, 2.0, 0.25, 1.0], [0, 10, -5, 0]]
    if quantize_:
        inputs = {"InputTensor": [1.0, -0.75, 4.0, 5.0, 1.0, 0.125, -3.5, 300.0]}
        note = "blocks of 1x2 elements, one scale and zero point each; saturated to INT8"
    else:
        inputs = {"InputTensor": [2, -2, 12, 13, -1, -5, -4, 127]}
        note = "blocks of 1x2 elements, one scale and zero point each"
    return Example(
        {"type": cls.operator_type, "desc": desc},
        {**inputs, "QuantizationTensors": params},
        note,
    )


for _cls, _lower, _inputs, _outputs in (
    (QuantizeOperatorDesc, lower_quantize, F16_32, Q8 | Q4),
    (DequantizeOperatorDesc, lower_dequantize, Q8 | Q4, F16_32),
):
    register(
        _cls,
        infer=_infer_like_input,
        validate=validate_blocked,
        lower=_lower,
        support=rows(
            (L.FL_6_3, DIMS1_8, _inputs, _outputs, {"QuantizationTensors": F16_32 | Q8 | Q4})
        ),
        example=_blocked_example(_cls),
    )


# ---------------------------------------------------------------------------------------------
# DYNAMIC_QUANTIZE_LINEAR


@dataclass(frozen=True)
class DynamicQuantizeLinearOperatorDesc(OperatorDesc):
    """DML_DYNAMIC_QUANTIZE_LINEAR_OPERATOR_DESC: derives a scale and zero point from the
    input's range (0 included, as ONNX's DynamicQuantizeLinear) and quantizes with them (FL 4_0).

    ``lo = min(0, min(Input))``, ``hi = max(0, max(Input))`` (NaN elements do not count);
    ``Scale = (hi - lo) / (Max - Min)`` in float32, 1 when ``hi == lo`` (an all-zero input);
    ``ZeroPoint = clamp(round(Min - lo / Scale), Min, Max)``; the output is QUANTIZE_LINEAR's.

    Fields:
        input_tensor: FLOAT32 or FLOAT16.
        output_tensor: INT8 or UINT8, InputTensor's sizes.
        output_scale_tensor: FLOAT32, InputTensor's rank, one element.
        output_zero_point_tensor: OutputTensor's type, InputTensor's rank, one element.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_DYNAMIC_QUANTIZE_LINEAR"
    input_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    output_scale_tensor: TensorDesc = output_field()
    output_zero_point_tensor: TensorDesc = output_field()


def infer_dynamic_quantize_linear(d: DynamicQuantizeLinearOperatorDesc) -> tuple[TensorDesc, ...]:
    x, q = d.input_tensor, d.output_tensor.data_type
    one = (1,) * x.rank
    return (
        x.like(data_type=q),
        x.like(data_type=DataType.FLOAT32, sizes=one),
        x.like(data_type=q, sizes=one),
    )


def validate_dynamic_quantize_linear(d: DynamicQuantizeLinearOperatorDesc, v: Validator) -> None:
    v.same("rank", list(d.output_slots()), ("InputTensor", d.input_tensor))
    v.same(
        "data_type",
        [("OutputZeroPointTensor", d.output_zero_point_tensor)],
        ("OutputTensor", d.output_tensor),
    )


def lower_dynamic_quantize_linear(d: DynamicQuantizeLinearOperatorDesc, x):
    out = d.output_tensor.data_type
    qmin, qmax = (jnp.float32(b) for b in out.integer_range)
    xf = as_float32(x)
    # NaN elements do not count; replacing them by 0 changes nothing, 0 is in the range anyway.
    finite_or_inf = jnp.where(jnp.isnan(xf), jnp.float32(0), xf)
    lo = jnp.minimum(jnp.min(finite_or_inf), jnp.float32(0))
    hi = jnp.maximum(jnp.max(finite_or_inf), jnp.float32(0))
    scale = jnp.where(hi == lo, jnp.float32(1), divide(hi - lo, qmax - qmin))
    zero = qmin - divide(lo, scale)
    # Only an infinite input makes ``lo / scale`` NaN: 0, CAST's NaN rule, then the range.
    zero = jnp.clip(jnp.round(jnp.where(jnp.isnan(zero), jnp.float32(0), zero)), qmin, qmax)
    zero = zero.astype(out.numpy_dtype)
    y = quantize(xf, scale, zero, out, out)
    one = (1,) * x.ndim
    return y, lax.reshape(scale, one), lax.reshape(zero, one)


register(
    DynamicQuantizeLinearOperatorDesc,
    infer=infer_dynamic_quantize_linear,
    validate=validate_dynamic_quantize_linear,
    lower=lower_dynamic_quantize_linear,
    support=rows((L.FL_4_0, DIMS1_8, F16_32, Q8, {"OutputScaleTensor": F32})),
    example=Example(
        {
            "type": "DML_OPERATOR_DYNAMIC_QUANTIZE_LINEAR",
            "desc": {
                "InputTensor": {"DataType": "FLOAT32", "Sizes": [2, 3]},
                "OutputTensor": {"DataType": "UINT8", "Sizes": [2, 3]},
                "OutputScaleTensor": {"DataType": "FLOAT32", "Sizes": [1, 1]},
                "OutputZeroPointTensor": {"DataType": "UINT8", "Sizes": [1, 1]},
            },
        },
        {"InputTensor": [0.0, 2.0, -3.0, -2.5, 1.25, 2.25]},
        "range [-3, 2.25]: scale 5.25 / 255, zero point 146",
    ),
)


# ---------------------------------------------------------------------------------------------
# ELEMENT_WISE_QUANTIZED_LINEAR_ADD


@dataclass(frozen=True)
class ElementWiseQuantizedLinearAddOperatorDesc(QuantizedPairMembers):
    """DML_ELEMENT_WISE_QUANTIZED_LINEAR_ADD_OPERATOR_DESC: dequantizes A and B, adds them and
    quantizes the sum with the output's scale and zero point (FL 4_0).

    ``AValue = (A - AZeroPoint) * AScale``, ``BValue`` likewise, each rounded to float32; their
    float32 sum is quantized: ``clamp(round(Sum / OutputScale) + OutputZeroPoint, Min, Max)``.

    Fields:
        a_tensor, b_tensor, output_tensor: INT8 or UINT8 (each its own), one rank and sizes.
        a_scale_tensor, b_scale_tensor, output_scale_tensor: FLOAT32, one element each.
        a_zero_point_tensor, b_zero_point_tensor, output_zero_point_tensor: optional (absent:
            0), one element each, in the type of the tensor they belong to.
    Every tensor has the same DimensionCount.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_ELEMENT_WISE_QUANTIZED_LINEAR_ADD"


_ADD_PARAMS = ("A", "B", "Output")


def validate_quantized_add(d: ElementWiseQuantizedLinearAddOperatorDesc, v: Validator) -> None:
    a = ("ATensor", d.a_tensor)
    v.same("rank", list(d.input_slots()[1:] + d.output_slots()), a)
    v.same("sizes", [("BTensor", d.b_tensor), ("OutputTensor", d.output_tensor)], a)
    for name in _ADD_PARAMS:
        owner = getattr(d, f"{name.lower()}_tensor")
        for kind in ("Scale", "ZeroPoint"):
            t = getattr(d, f"{name.lower()}_{'scale' if kind == 'Scale' else 'zero_point'}_tensor")
            if t is None:
                continue
            path = f"{name}{kind}Tensor"
            v.check(
                f"{path}.Sizes",
                t.element_count == 1,
                f"must hold one element (every size 1), got {show(t.sizes)}",
            )
            if kind == "ZeroPoint":
                v.same("data_type", [(path, t)], (f"{name}Tensor", owner))


def lower_quantized_add(d: ElementWiseQuantizedLinearAddOperatorDesc, *arrays):
    a = named_inputs(d, arrays)

    def value(name: str):
        t = getattr(d, f"{name}_tensor").data_type
        return rounded(
            dequantize(
                a[f"{name}_tensor"], t, a[f"{name}_zero_point_tensor"], t, a[f"{name}_scale_tensor"]
            )
        )

    out = d.output_tensor.data_type
    total = value("a") + value("b")
    return (quantize(total, a["output_scale_tensor"], a["output_zero_point_tensor"], out, out),)


register(
    ElementWiseQuantizedLinearAddOperatorDesc,
    infer=lambda d: (d.a_tensor.like(data_type=d.output_tensor.data_type),),
    validate=validate_quantized_add,
    lower=lower_quantized_add,
    support=rows(
        (
            L.FL_4_0,
            DIMS1_8,
            Q8,
            Q8,
            {"AScaleTensor": F32, "BScaleTensor": F32, "OutputScaleTensor": F32},
        )
    ),
    example=Example(
        {
            "type": "DML_OPERATOR_ELEMENT_WISE_QUANTIZED_LINEAR_ADD",
            "desc": {
                "ATensor": {"DataType": "UINT8", "Sizes": [4]},
                "AScaleTensor": {"DataType": "FLOAT32", "Sizes": [1]},
                "AZeroPointTensor": {"DataType": "UINT8", "Sizes": [1]},
                "BTensor": {"DataType": "INT8", "Sizes": [4]},
                "BScaleTensor": {"DataType": "FLOAT32", "Sizes": [1]},
                "OutputScaleTensor": {"DataType": "FLOAT32", "Sizes": [1]},
                "OutputZeroPointTensor": {"DataType": "INT8", "Sizes": [1]},
                "OutputTensor": {"DataType": "INT8", "Sizes": [4]},
            },
        },
        {
            "ATensor": [128, 130, 100, 255],
            "AScaleTensor": [0.5],
            "AZeroPointTensor": [128],
            "BTensor": [0, 3, -10, 127],
            "BScaleTensor": [0.25],
            "OutputScaleTensor": [0.5],
            "OutputZeroPointTensor": [-10],
        },
        "(A - 128) * 0.5 + B * 0.25, requantized with scale 0.5 and zero point -10",
    ),
)

del _cls, _lower, _inputs, _outputs
