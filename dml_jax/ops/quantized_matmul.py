"""Integer and quantized matrix multiplies: MATRIX_MULTIPLY_INTEGER,
MATRIX_MULTIPLY_INTEGER_TO_FLOAT and QUANTIZED_LINEAR_MATRIX_MULTIPLY.

Every one sums ``(q - ZeroPoint)`` products exactly in int32 (sums past int32 wrap, as int32
accumulators do; they need K > 33,000 terms of 255 * 255). The products are int8 x int8 matrix
products with an int32 result (tensor cores on GPUs; 16-bit operands for small or unaligned
sizes, ``_quant.INT8_MIN``): UINT8 operands are shifted by -128 into int8 and the zero points
applied outside the product, ``(A - a)(B - b) = AB - a * colsum(B) - b * rowsum(A) + K * a * b``,
exact in int32's wrap-around arithmetic (``_quant.zero_point_product``). The quantized one then
applies DirectML's "dequantize, compute, quantize" in float32: ``real = float32(sum) * (AScale *
BScale)``, quantized with the output scale and zero point (``_quant.quantize``: round half to
even, saturate). MATRIX_MULTIPLY_INTEGER_TO_FLOAT adds the bias to the float result; its 16- and
32-bit inputs, whose products overflow int32, are dequantized to float32 and multiplied in
float32 instead. Scale and zero point tensors hold one value or one per row of A
(``{1, 1, M, 1}``) or column of B (``{1, 1, 1, N}``); ``_quant.check_parameter`` states the
accepted shapes. The convolutions and pooling of the same arithmetic: ``quantized_conv``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import jax.numpy as jnp
from jax import lax

from ..enums import DataType
from ..enums import FeatureLevel as L
from ..errors import Validator
from ..fields import (
    OperatorDesc,
    input_field,
    output_field,
)
from ..registry import Example, register
from ..support import DIMS4, rows
from ..tensor import TensorDesc
from ._quant import (
    F16_32,
    F32,
    I32,
    INTEGERS,
    Q8,
    OperandMembers,
    QuantizedPairMembers,
    as_float32,
    check_parameter,
    dequantize,
    known_inputs,
    named_inputs,
    parameter,
    quantize,
    rounded,
    same_parameter_ranks,
    signed,
    signed_known,
    tensor_json,
    zero_point_product,
)

_DIMS2_4 = (2, 3, 4)
_DIMS1_4 = (1, 2, 3, 4)


def _integer_product(d, a, a_type, a_zero, b, b_type, b_zero, product=None):
    """``sum_k (A - AZeroPoint)[.., m, k] * (B - BZeroPoint)[.., k, n]`` in int32.

    Zero points are 1-D-or-padded parameters (``_quant.parameter``): A's per row, B's per
    column. ``product`` computes ``zero_point_product``'s result from the same arguments
    (None: that function; the CUDA fast path passes its int8 GEMM kernel). Operands and zero
    points that ``d``'s program holds as constants (``known_inputs``: a model's weights) enter
    as such: a zero point of 0 drops its terms, and the lax product takes a known operand's sums
    from NumPy (``signed_known``)."""
    rank = a.ndim
    known = known_inputs(d)
    sides = []
    for q, q_type, zero, name, axis in (
        (a, a_type, a_zero, "a", rank - 2),
        (b, b_type, b_zero, "b", rank - 1),
    ):
        values, zero_known = signed_known(
            known[f"{name}_tensor"], q_type, zero is not None,
            None if zero is None else known[f"{name}_zero_point_tensor"],
        )  # fmt: skip
        if zero_known is None:  # known only at run time
            q, zero = signed(q, q_type, None if zero is None else parameter(zero, rank, axis))
        else:
            q, _ = signed(q, q_type, None)
            zero = None if zero_known is False else parameter(jnp.asarray(zero_known), rank, axis)
        sides.append((q, zero, values))
    (x, x_zero, x_known), (y, y_zero, y_known) = sides
    if product is not None:
        return product(x, x_zero, y, y_zero)
    return zero_point_product(x, x_zero, y, y_zero, x_known, y_known)


def _matrix_sizes(d: Any) -> tuple[int, int, int, int]:
    """(M, K of A, K of B, N)."""
    a, b = d.a_tensor.sizes, d.b_tensor.sizes
    return a[-2], a[-1], b[-2], b[-1]


def _infer_matrix(d: Any, data_type: DataType) -> tuple[TensorDesc, ...]:
    m, _, _, n = _matrix_sizes(d)
    return (d.a_tensor.like(data_type=data_type, sizes=d.a_tensor.sizes[:-2] + (m, n)),)


def _validate_matrices(d: Any, v: Validator, outputs: list) -> None:
    """A {.., M, K}, B {.., K, N}, the output (and bias) of A's rank; equal leading sizes."""
    a, b = d.a_tensor, d.b_tensor
    v.check("ATensor.DimensionCount", a.rank >= 2, f"must be at least 2, got {a.rank}")
    v.same("rank", [("BTensor", b)] + outputs, ("ATensor", a))
    v.equal("BTensor.Sizes", b.sizes[:-2], a.sizes[:-2], "ATensor.Sizes (leading dimensions)")
    _, ka, kb, _ = _matrix_sizes(d)
    v.check("BTensor.Sizes", ka == kb, f"must have K = {ka} (ATensor's last dimension), got {kb}")


def _matrix_parameters(d: Any, v: Validator, sides: tuple[str, ...]) -> None:
    """Scale / zero point tensors of A (per row), B (per column) and the output (per row)."""
    rank = d.a_tensor.rank
    m, _, _, n = _matrix_sizes(d)
    where = {"a": (rank - 2, m, "per row of A"), "b": (rank - 1, n, "per column of B")}
    where["output"] = (rank - 2, m, "per row of the output")
    for side in sides:
        axis, count, what = where[side]
        owner = "OutputTensor" if side == "output" else f"{side.upper()}Tensor"
        for kind, member in (("scale", "Scale"), ("zero_point", "ZeroPoint")):
            t = getattr(d, f"{side}_{kind}_tensor", None)
            if t is None:
                continue
            path = f"{owner[:-6]}{member}Tensor"
            check_parameter(v, path, t, rank, axis, count, what)
            if kind == "zero_point":
                v.same("data_type", [(path, t)], (owner, getattr(d, f"{side}_tensor")))


# ---------------------------------------------------------------------------------------------
# MATRIX_MULTIPLY_INTEGER


@dataclass(frozen=True)
class MatrixMultiplyIntegerOperatorDesc(OperatorDesc):
    """DML_MATRIX_MULTIPLY_INTEGER_OPERATOR_DESC: ``(A - AZeroPoint) x (B - BZeroPoint)``
    summed exactly in INT32, one product per leading index (FL 2_1).

    Fields:
        a_tensor: {.., M, K}, INT8 or UINT8 (4-D before 4_0, 2 to 4 dimensions from 4_0).
        a_zero_point_tensor: optional (absent: 0), ATensor's type: one value, or one per row
            (``{1, 1, M, 1}``; 1-D ``{M}``).
        b_tensor: {.., K, N}, INT8 or UINT8, ATensor's rank and leading sizes.
        b_zero_point_tensor: optional, BTensor's type: one value or one per column
            (``{1, 1, 1, N}``).
        output_tensor: {.., M, N}, INT32.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_MATRIX_MULTIPLY_INTEGER"
    a_tensor: TensorDesc = input_field()
    a_zero_point_tensor: TensorDesc | None = input_field(optional=True)
    b_tensor: TensorDesc = input_field()
    b_zero_point_tensor: TensorDesc | None = input_field(optional=True)
    output_tensor: TensorDesc = output_field()


def validate_matrix_multiply_integer(d: MatrixMultiplyIntegerOperatorDesc, v: Validator) -> None:
    _validate_matrices(d, v, [("OutputTensor", d.output_tensor)])
    _matrix_parameters(d, v, ("a", "b"))


def lower_matrix_multiply_integer(d: MatrixMultiplyIntegerOperatorDesc, *arrays, product=None):
    x = named_inputs(d, arrays)
    acc = _integer_product(
        d, x["a_tensor"], d.a_tensor.data_type, x["a_zero_point_tensor"],
        x["b_tensor"], d.b_tensor.data_type, x["b_zero_point_tensor"], product,
    )  # fmt: skip
    return (acc,)


register(
    MatrixMultiplyIntegerOperatorDesc,
    infer=lambda d: _infer_matrix(d, DataType.INT32),
    validate=validate_matrix_multiply_integer,
    lower=lower_matrix_multiply_integer,
    support=rows(
        (L.FL_2_1, DIMS4, Q8, I32),
        (
            L.FL_4_0,
            _DIMS2_4,
            Q8,
            I32,
            {"AZeroPointTensor": (Q8, _DIMS1_4), "BZeroPointTensor": (Q8, _DIMS2_4)},
        ),
        (
            L.FL_5_2,
            _DIMS2_4,
            Q8,
            I32,
            {"AZeroPointTensor": (Q8, _DIMS1_4), "BZeroPointTensor": (Q8, _DIMS1_4)},
        ),
    ),
    example=Example(
        {
            "type": "DML_OPERATOR_MATRIX_MULTIPLY_INTEGER",
            "desc": {
                "ATensor": tensor_json("UINT8", [1, 1, 2, 3]),
                "AZeroPointTensor": tensor_json("UINT8", [1, 1, 2, 1]),
                "BTensor": tensor_json("INT8", [1, 1, 3, 2]),
                "BZeroPointTensor": tensor_json("INT8", [1, 1, 1, 1]),
                "OutputTensor": tensor_json("INT32", [1, 1, 2, 2]),
            },
        },
        {
            "ATensor": [11, 12, 13, 255, 0, 128],
            "AZeroPointTensor": [10, 128],
            "BTensor": [1, -128, 2, 127, 3, 0],
            "BZeroPointTensor": [1],
        },
        "(A - per-row zero point) x (B - 1), summed in INT32",
    ),
)


# ---------------------------------------------------------------------------------------------
# MATRIX_MULTIPLY_INTEGER_TO_FLOAT


@dataclass(frozen=True)
class MatrixMultiplyIntegerToFloatOperatorDesc(OperandMembers):
    """DML_MATRIX_MULTIPLY_INTEGER_TO_FLOAT_OPERATOR_DESC:
    ``((A - AZeroPoint) * AScale) x ((B - BZeroPoint) * BScale) + Bias`` as floats (FL 6_2).

    8-bit inputs sum ``(A - AZeroPoint)(B - BZeroPoint)`` exactly in int32 and scale the sum by
    ``AScale * BScale``; 16- and 32-bit inputs are dequantized to float32 and multiplied in
    float32. The float result is computed in float32 and rounded once to OutputTensor's type.

    Fields:
        a_tensor: {.., M, K}; a_scale_tensor / a_zero_point_tensor (optional): one value or
            one per row (``{1, 1, M, 1}``).
        b_tensor: {.., K, N}; b_scale_tensor / b_zero_point_tensor (optional): one value or one
            per column (``{1, 1, 1, N}``).
        bias_tensor: optional, OutputTensor's sizes.
        output_tensor: {.., M, N}.
    A, B and their zero points share one integer type (8, 16 or 32 bits); the scales, bias and
    output one float type (FLOAT32 or FLOAT16); A, B, bias and output one rank (2 to 4), the
    scale and zero point tensors another (1 to 4).
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_MATRIX_MULTIPLY_INTEGER_TO_FLOAT"
    bias_tensor: TensorDesc | None = input_field(optional=True)
    output_tensor: TensorDesc = output_field()


def validate_matrix_multiply_integer_to_float(
    d: MatrixMultiplyIntegerToFloatOperatorDesc, v: Validator
) -> None:
    outputs = [("OutputTensor", d.output_tensor)]
    if d.bias_tensor is not None:
        outputs.insert(0, ("BiasTensor", d.bias_tensor))
    _validate_matrices(d, v, outputs)
    ints = [("BTensor", d.b_tensor)] + [
        (p, t) for p, t in (("AZeroPointTensor", d.a_zero_point_tensor),
                            ("BZeroPointTensor", d.b_zero_point_tensor)) if t is not None
    ]  # fmt: skip
    v.same("data_type", ints, ("ATensor", d.a_tensor))
    floats = [("AScaleTensor", d.a_scale_tensor), ("BScaleTensor", d.b_scale_tensor)]
    v.same("data_type", floats + outputs[:-1], ("OutputTensor", d.output_tensor))
    same_parameter_ranks(
        d, v, ("AScaleTensor", "AZeroPointTensor", "BScaleTensor", "BZeroPointTensor")
    )
    _matrix_parameters(d, v, ("a", "b"))
    if d.bias_tensor is not None:
        v.equal(
            "BiasTensor.Sizes", d.bias_tensor.sizes, d.output_tensor.sizes, "OutputTensor.Sizes"
        )


def lower_matrix_multiply_integer_to_float(
    d: MatrixMultiplyIntegerToFloatOperatorDesc, *arrays, product=None
):
    x = named_inputs(d, arrays)
    t = d.a_tensor.data_type
    rank = d.a_tensor.rank
    a_scale = as_float32(parameter(x["a_scale_tensor"], rank, rank - 2))
    b_scale = as_float32(parameter(x["b_scale_tensor"], rank, rank - 1))
    if t.bits <= 8:
        acc = _integer_product(
            d, x["a_tensor"], t, x["a_zero_point_tensor"], x["b_tensor"], t,
            x["b_zero_point_tensor"], product,
        )  # fmt: skip
        # Rounded before the bias is added (as the eager program does, and the formula says),
        # not contracted with it into one fused multiply-add where a compiler would.
        y = rounded(acc.astype(jnp.float32) * (a_scale * b_scale))
    else:
        a_zero, b_zero = x["a_zero_point_tensor"], x["b_zero_point_tensor"]
        a = dequantize(
            x["a_tensor"], t, None if a_zero is None else parameter(a_zero, rank, rank - 2), t,
            a_scale,
        )  # fmt: skip
        b = dequantize(
            x["b_tensor"], t, None if b_zero is None else parameter(b_zero, rank, rank - 1), t,
            b_scale,
        )  # fmt: skip
        batch = tuple(range(rank - 2))
        y = lax.dot_general(
            a, b, (((rank - 1,), (rank - 2,)), (batch, batch)), precision=lax.Precision.HIGHEST
        )
    if x["bias_tensor"] is not None:
        y = y + as_float32(x["bias_tensor"])
    return (y.astype(d.output_tensor.dtype),)


register(
    MatrixMultiplyIntegerToFloatOperatorDesc,
    infer=lambda d: _infer_matrix(d, d.output_tensor.data_type),
    validate=validate_matrix_multiply_integer_to_float,
    lower=lower_matrix_multiply_integer_to_float,
    support=rows(
        (
            L.FL_6_2,
            _DIMS2_4,
            INTEGERS,
            F16_32,
            {
                "AScaleTensor": (F16_32, _DIMS1_4),
                "BScaleTensor": (F16_32, _DIMS1_4),
                "AZeroPointTensor": (INTEGERS, _DIMS1_4),
                "BZeroPointTensor": (INTEGERS, _DIMS1_4),
                "BiasTensor": F16_32,
            },
        ),
    ),
    example=Example(
        {
            "type": "DML_OPERATOR_MATRIX_MULTIPLY_INTEGER_TO_FLOAT",
            "desc": {
                "ATensor": tensor_json("INT8", [2, 2]),
                "AScaleTensor": tensor_json("FLOAT32", [1, 1]),
                "AZeroPointTensor": tensor_json("INT8", [1, 1]),
                "BTensor": tensor_json("INT8", [2, 3]),
                "BScaleTensor": tensor_json("FLOAT32", [1, 3]),
                "BiasTensor": tensor_json("FLOAT32", [2, 3]),
                "OutputTensor": tensor_json("FLOAT32", [2, 3]),
            },
        },
        {
            "ATensor": [3, 5, -1, 2],
            "AScaleTensor": [0.5],
            "AZeroPointTensor": [1],
            "BTensor": [1, 2, 3, -4, 0, 4],
            "BScaleTensor": [1.0, 0.25, 2.0],
            "BiasTensor": [0.5, 0.5, 0.5, -1.0, -1.0, -1.0],
        },
        "((A - 1) * 0.5) x (B * per-column scale) + bias",
    ),
)


# ---------------------------------------------------------------------------------------------
# QUANTIZED_LINEAR_MATRIX_MULTIPLY


@dataclass(frozen=True)
class QuantizedLinearMatrixMultiplyOperatorDesc(QuantizedPairMembers):
    """DML_QUANTIZED_LINEAR_MATRIX_MULTIPLY_OPERATOR_DESC: dequantize A and B, multiply,
    quantize with the output's scale and zero point (FL 2_1).

    ``real = float32(sum_k (A - AZeroPoint)(B - BZeroPoint)) * (AScale * BScale)``, then
    ``clamp(round(real / OutputScale) + OutputZeroPoint, Min, Max)``.

    Fields:
        a_tensor: {.., M, K}, INT8 or UINT8; a_scale_tensor (FLOAT32) and a_zero_point_tensor
            (optional, ATensor's type): one value or one per row (``{1, 1, M, 1}``).
        b_tensor: {.., K, N}, INT8 or UINT8; b_scale_tensor / b_zero_point_tensor: one value or
            one per column (``{1, 1, 1, N}``).
        output_scale_tensor (FLOAT32) / output_zero_point_tensor (optional, OutputTensor's
            type): one value or one per row.
        output_tensor: {.., M, N}, INT8 or UINT8.
    A, B and the output share a rank (4 before 4_0, 2 to 4 from 4_0), the six scale and zero
    point tensors another.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_QUANTIZED_LINEAR_MATRIX_MULTIPLY"


_QLMM_PARAMETERS = (
    "AScaleTensor",
    "AZeroPointTensor",
    "BScaleTensor",
    "BZeroPointTensor",
    "OutputScaleTensor",
    "OutputZeroPointTensor",
)


def validate_quantized_matrix_multiply(
    d: QuantizedLinearMatrixMultiplyOperatorDesc, v: Validator
) -> None:
    _validate_matrices(d, v, [("OutputTensor", d.output_tensor)])
    same_parameter_ranks(d, v, _QLMM_PARAMETERS)
    _matrix_parameters(d, v, ("a", "b", "output"))


def lower_quantized_matrix_multiply(
    d: QuantizedLinearMatrixMultiplyOperatorDesc, *arrays, product=None
):
    x = named_inputs(d, arrays)
    rank = d.a_tensor.rank
    acc = _integer_product(
        d, x["a_tensor"], d.a_tensor.data_type, x["a_zero_point_tensor"],
        x["b_tensor"], d.b_tensor.data_type, x["b_zero_point_tensor"], product,
    )  # fmt: skip
    scale = parameter(x["a_scale_tensor"], rank, rank - 2) * parameter(
        x["b_scale_tensor"], rank, rank - 1
    )
    out = d.output_tensor.data_type
    zero = x["output_zero_point_tensor"]
    return (
        quantize(
            acc.astype(jnp.float32) * scale,
            parameter(x["output_scale_tensor"], rank, rank - 2),
            None if zero is None else parameter(zero, rank, rank - 2),
            out,
            out,
        ),
    )


register(
    QuantizedLinearMatrixMultiplyOperatorDesc,
    infer=lambda d: _infer_matrix(d, d.output_tensor.data_type),
    validate=validate_quantized_matrix_multiply,
    lower=lower_quantized_matrix_multiply,
    support=rows(
        (
            L.FL_2_1,
            DIMS4,
            Q8,
            Q8,
            {"AScaleTensor": F32, "BScaleTensor": F32, "OutputScaleTensor": F32},
        ),
        (
            L.FL_4_0,
            _DIMS2_4,
            Q8,
            Q8,
            {
                **{n: (F32, _DIMS1_4) for n in _QLMM_PARAMETERS if "Scale" in n},
                **{n: (Q8, _DIMS1_4) for n in _QLMM_PARAMETERS if "Zero" in n},
            },
        ),
    ),
    example=Example(
        {
            "type": "DML_OPERATOR_QUANTIZED_LINEAR_MATRIX_MULTIPLY",
            "desc": {
                "ATensor": tensor_json("UINT8", [1, 1, 2, 2]),
                "AScaleTensor": tensor_json("FLOAT32", [1, 1, 1, 1]),
                "AZeroPointTensor": tensor_json("UINT8", [1, 1, 1, 1]),
                "BTensor": tensor_json("INT8", [1, 1, 2, 2]),
                "BScaleTensor": tensor_json("FLOAT32", [1, 1, 1, 2]),
                "OutputScaleTensor": tensor_json("FLOAT32", [1, 1, 1, 1]),
                "OutputZeroPointTensor": tensor_json("UINT8", [1, 1, 1, 1]),
                "OutputTensor": tensor_json("UINT8", [1, 1, 2, 2]),
            },
        },
        {
            "ATensor": [130, 126, 140, 100],
            "AScaleTensor": [0.5],
            "AZeroPointTensor": [128],
            "BTensor": [3, -2, 1, 4],
            "BScaleTensor": [1.0, 0.5],
            "OutputScaleTensor": [0.25],
            "OutputZeroPointTensor": [100],
        },
        "dequantize, multiply, requantize with scale 0.25 and zero point 100",
    ),
)
