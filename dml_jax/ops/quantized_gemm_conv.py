"""Integer and quantized matrix multiplies, convolutions and average pooling:
MATRIX_MULTIPLY_INTEGER, MATRIX_MULTIPLY_INTEGER_TO_FLOAT, QUANTIZED_LINEAR_MATRIX_MULTIPLY,
CONVOLUTION_INTEGER, QUANTIZED_LINEAR_CONVOLUTION and QUANTIZED_LINEAR_AVERAGE_POOLING.

Every one sums ``(q - ZeroPoint)`` products (or window elements) exactly in int32 (sums past
int32 wrap, as int32 accumulators do; they need K > 33,000 terms of 255 * 255). The products are
int8 x int8 matrix products with an int32 result (tensor cores on GPUs; 16-bit operands for
small or unaligned sizes, ``INT8_MIN``): UINT8 operands are
shifted by -128 into int8 and the zero points applied outside the product,
``(A - a)(B - b) = AB - a * colsum(B) - b * rowsum(A) + K * a * b``, exact in int32's
wrap-around arithmetic (``_zero_point_product``). The quantized ones then apply DirectML's
"dequantize, compute, quantize" in float32: ``real = float32(sum) * (InputScale * FilterScale)``
(matrix: ``AScale * BScale``; pooling: ``float32(window sum) * InputScale / divisor``), quantized
with the output scale and zero point (``_quant.quantize``: round half to even, saturate).
MATRIX_MULTIPLY_INTEGER_TO_FLOAT adds the bias to the float result; its 16- and 32-bit inputs,
whose products overflow int32, are dequantized to float32 and multiplied in float32 instead.

Geometry is shared, not copied: the convolutions use ``gemm_conv``'s output-size and window
rules and ``pooling``'s window slices for their cross-correlation (FORWARD, no filter flip,
padding holding the input zero point, so it reads as the zero point as in ONNX's ConvInteger);
the pooling uses ``pooling``'s window plan, rules, window sum and divisor. Scale and zero point
tensors hold one value or one per row of A (``{1, 1, M, 1}``), column of B (``{1, 1, 1, N}``)
or channel (``{1, C, 1, 1}``); ``_quant.check_parameter`` states the accepted shapes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import jax.numpy as jnp
from jax import lax

from ..enums import DataType
from ..enums import FeatureLevel as L
from ..errors import Validator
from ..fields import (
    BOOL,
    UINT,
    UINT_ARRAY,
    OperatorDesc,
    attribute,
    count_of,
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
    divide,
    held,
    named_inputs,
    parameter,
    quantize,
    rounded,
)
from .gemm_conv import check_conv_dimension_count, check_conv_window, conv_output_sizes
from .pooling import (
    WindowPlan,
    average_divisor,
    validate_window,
    window_plan,
    window_points,
    window_sum,
)

_DIMS2_4 = (2, 3, 4)
INT8_MIN = 128  # M, K and N at least this, and multiples of 4, take the int8 dot
_DIMS1_4 = (1, 2, 3, 4)
_DIMS3_4 = (3, 4)


# ---------------------------------------------------------------------------------------------
# Shared pieces


def _signed(q, q_type: DataType, zero_point):
    """8-bit values as int8 and their zero point in the same frame, so that ``q - zero_point``
    equals ``q' - zero_point'`` exactly: UINT8 shifts by -128 (its top bit flipped), INT8 stays.

    Tensor cores multiply int8 by int8 (XLA's int8 dot with an int32 result, cuBLASLt's IMMA
    on GPUs); 16-bit operands fall back to a slow untiled dot there. ``zero_point`` is an array
    broadcasting over ``q`` or None (0); the shifted zero point is int32, or None where it is
    statically 0 (an INT8 tensor without one)."""
    q = held(q, q_type)
    shift = 0 if q_type.is_signed else 128
    if shift:
        q = lax.bitcast_convert_type(lax.bitwise_xor(q, jnp.uint8(0x80)), jnp.int8)
    if zero_point is None:
        return q, (None if shift == 0 else jnp.full((1,) * q.ndim, -shift, jnp.int32))
    zero_point = held(zero_point, q_type).astype(jnp.int32)
    return q, (zero_point - jnp.int32(shift) if shift else zero_point)


def _zero_point_product(x, x_zero, y, y_zero):
    """``sum_k (x - x_zero)[.., m, k] * (y - y_zero)[.., k, n]`` in int32 (wrapping as int32
    accumulators do), for int8 ``x`` {B.., M, K} and ``y`` {B.., K, N}; ``x_zero`` broadcasts
    to {.., M, 1} and ``y_zero`` to {.., 1, N} (int32; None: 0).

    The int8 product is one dot; the zero points enter outside it:
    ``(x - a)(y - b) = xy - a * colsum(y) - b * rowsum(x) + K * a * b``. int32 arithmetic is
    exact modulo 2**32, so this equals the sum of the differences' products wrapped to int32,
    bit for bit, on every backend."""
    rank = x.ndim
    batch = tuple(range(rank - 2))
    if not all(n >= INT8_MIN and n % 4 == 0 for n in (x.shape[-2], x.shape[-1], y.shape[-1])):
        # XLA's GPU backend computed small int8 dots wrongly (M, K, N of 2 and 3 on an H200,
        # jax 0.11.2). int16 operands hold every product of two 8-bit values, so they are exact
        # whichever code XLA emits; the int8 dot is kept for cuBLAS's aligned int8 GEMMs (checked
        # exact on the GPU from 512 up, benchmarks/results/round9/quantized.log).
        x, y = x.astype(jnp.int16), y.astype(jnp.int16)
    acc = lax.dot_general(
        x, y, (((rank - 1,), (rank - 2,)), (batch, batch)), preferred_element_type=jnp.int32
    )
    if x_zero is not None:
        acc = acc - x_zero * jnp.sum(y, axis=rank - 2, keepdims=True, dtype=jnp.int32)
    if y_zero is not None:
        acc = acc - y_zero * jnp.sum(x, axis=rank - 1, keepdims=True, dtype=jnp.int32)
    if x_zero is not None and y_zero is not None:
        acc = acc + jnp.int32(x.shape[-1]) * x_zero * y_zero
    return acc


def _integer_product(a, a_type, a_zero, b, b_type, b_zero, product=None):
    """``sum_k (A - AZeroPoint)[.., m, k] * (B - BZeroPoint)[.., k, n]`` in int32.

    Zero points are 1-D-or-padded parameters (``_quant.parameter``): A's per row, B's per
    column. ``product`` computes ``_zero_point_product``'s result from the same arguments
    (None: that function; the CUDA fast path passes its int8 GEMM kernel)."""
    rank = a.ndim
    x, x_zero = _signed(a, a_type, None if a_zero is None else parameter(a_zero, rank, rank - 2))
    y, y_zero = _signed(b, b_type, None if b_zero is None else parameter(b_zero, rank, rank - 1))
    return (product or _zero_point_product)(x, x_zero, y, y_zero)


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


def _same_parameter_ranks(d: Any, v: Validator, names: tuple[str, ...]) -> None:
    """The pages' rule: these scale / zero point tensors share one DimensionCount."""
    present = [(n, getattr(d, _snake(n))) for n in names if getattr(d, _snake(n)) is not None]
    if present:
        v.same("rank", present[1:], present[0])


def _snake(member: str) -> str:
    return "".join("_" + ch.lower() if ch.isupper() else ch for ch in member).lstrip("_")


def _tensor(data_type: str, sizes: list) -> dict:
    return {"DataType": data_type, "Sizes": sizes}


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
        x["a_tensor"], d.a_tensor.data_type, x["a_zero_point_tensor"],
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
                "ATensor": _tensor("UINT8", [1, 1, 2, 3]),
                "AZeroPointTensor": _tensor("UINT8", [1, 1, 2, 1]),
                "BTensor": _tensor("INT8", [1, 1, 3, 2]),
                "BZeroPointTensor": _tensor("INT8", [1, 1, 1, 1]),
                "OutputTensor": _tensor("INT32", [1, 1, 2, 2]),
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
    _same_parameter_ranks(
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
            x["a_tensor"], t, x["a_zero_point_tensor"], x["b_tensor"], t,
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
                "ATensor": _tensor("INT8", [2, 2]),
                "AScaleTensor": _tensor("FLOAT32", [1, 1]),
                "AZeroPointTensor": _tensor("INT8", [1, 1]),
                "BTensor": _tensor("INT8", [2, 3]),
                "BScaleTensor": _tensor("FLOAT32", [1, 3]),
                "BiasTensor": _tensor("FLOAT32", [2, 3]),
                "OutputTensor": _tensor("FLOAT32", [2, 3]),
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
    _same_parameter_ranks(d, v, _QLMM_PARAMETERS)
    _matrix_parameters(d, v, ("a", "b", "output"))


def lower_quantized_matrix_multiply(
    d: QuantizedLinearMatrixMultiplyOperatorDesc, *arrays, product=None
):
    x = named_inputs(d, arrays)
    rank = d.a_tensor.rank
    acc = _integer_product(
        x["a_tensor"], d.a_tensor.data_type, x["a_zero_point_tensor"],
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
                "ATensor": _tensor("UINT8", [1, 1, 2, 2]),
                "AScaleTensor": _tensor("FLOAT32", [1, 1, 1, 1]),
                "AZeroPointTensor": _tensor("UINT8", [1, 1, 1, 1]),
                "BTensor": _tensor("INT8", [1, 1, 2, 2]),
                "BScaleTensor": _tensor("FLOAT32", [1, 1, 1, 2]),
                "OutputScaleTensor": _tensor("FLOAT32", [1, 1, 1, 1]),
                "OutputZeroPointTensor": _tensor("UINT8", [1, 1, 1, 1]),
                "OutputTensor": _tensor("UINT8", [1, 1, 2, 2]),
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


# ---------------------------------------------------------------------------------------------
# CONVOLUTION_INTEGER and QUANTIZED_LINEAR_CONVOLUTION


@dataclass(frozen=True)
class ConvolutionIntegerOperatorDesc(OperatorDesc):
    """DML_CONVOLUTION_INTEGER_OPERATOR_DESC: the FORWARD cross-correlation of
    ``Input - InputZeroPoint`` with ``Filter - FilterZeroPoint``, summed exactly in INT32
    (FL 2_1).

    Fields:
        input_tensor: {N, C, [H], W}, INT8 or UINT8 (4-D before 4_0; 3-D or 4-D from 4_0).
        input_zero_point_tensor: optional (absent: 0), InputTensor's type, one value.
        filter_tensor: {K, C / GroupCount, [kH], kW}, INT8 or UINT8.
        filter_zero_point_tensor: optional, FilterTensor's type: one value or one per output
            channel (``{1, K, 1, 1}``; 1-D ``{K}``).
        output_tensor: {N, K, outputs...}, INT32, CONVOLUTION's FORWARD output sizes.
        strides, dilations, start_padding, end_padding: one value per spatial dimension
            (DimensionCount 1 or 2, InputTensor's rank - 2); padding is zero after the zero
            point is subtracted (it reads as the zero point).
        group_count: >= 1, divides C and K.
        dimension_count: optional; the length of the four arrays.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_CONVOLUTION_INTEGER"
    input_tensor: TensorDesc = input_field()
    input_zero_point_tensor: TensorDesc | None = input_field(optional=True)
    filter_tensor: TensorDesc = input_field()
    filter_zero_point_tensor: TensorDesc | None = input_field(optional=True)
    output_tensor: TensorDesc = output_field()
    strides: tuple[int, ...] = attribute(UINT_ARRAY)
    dilations: tuple[int, ...] = attribute(UINT_ARRAY)
    start_padding: tuple[int, ...] = attribute(UINT_ARRAY)
    end_padding: tuple[int, ...] = attribute(UINT_ARRAY)
    group_count: int = attribute(UINT, default=1)
    dimension_count: int | None = count_of("strides")


@dataclass(frozen=True)
class QuantizedLinearConvolutionOperatorDesc(OperatorDesc):
    """DML_QUANTIZED_LINEAR_CONVOLUTION_OPERATOR_DESC: CONVOLUTION_INTEGER's sum plus an INT32
    bias, dequantized and requantized with the output's scale and zero point (FL 2_1).

    ``real = float32(sum + Bias) * (InputScale * FilterScale)``, then
    ``clamp(round(real / OutputScale) + OutputZeroPoint, Min, Max)``.

    Fields:
        input_tensor, filter_tensor, the arrays, group_count, dimension_count: as
            ``ConvolutionIntegerOperatorDesc``.
        input_scale_tensor (FLOAT32) / input_zero_point_tensor (optional): one value.
        filter_scale_tensor (FLOAT32) / filter_zero_point_tensor (optional): one value or one
            per output channel (``{1, K, 1, 1}``).
        bias_tensor: optional, INT32 ``{1, K, 1, 1}``, added to the integer sum.
        output_scale_tensor (FLOAT32) / output_zero_point_tensor (optional): one value.
        output_tensor: INT8 or UINT8.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_QUANTIZED_LINEAR_CONVOLUTION"
    input_tensor: TensorDesc = input_field()
    input_scale_tensor: TensorDesc = input_field()
    input_zero_point_tensor: TensorDesc | None = input_field(optional=True)
    filter_tensor: TensorDesc = input_field()
    filter_scale_tensor: TensorDesc = input_field()
    filter_zero_point_tensor: TensorDesc | None = input_field(optional=True)
    bias_tensor: TensorDesc | None = input_field(optional=True)
    output_scale_tensor: TensorDesc = input_field()
    output_zero_point_tensor: TensorDesc | None = input_field(optional=True)
    output_tensor: TensorDesc = output_field()
    strides: tuple[int, ...] = attribute(UINT_ARRAY)
    dilations: tuple[int, ...] = attribute(UINT_ARRAY)
    start_padding: tuple[int, ...] = attribute(UINT_ARRAY)
    end_padding: tuple[int, ...] = attribute(UINT_ARRAY)
    group_count: int = attribute(UINT, default=1)
    dimension_count: int | None = count_of("strides")


def _infer_conv(d: Any) -> tuple[TensorDesc, ...]:
    """The output sizes of CONVOLUTION's FORWARD rule; CONVOLUTION_INTEGER writes INT32."""
    data_type = (
        DataType.INT32
        if isinstance(d, ConvolutionIntegerOperatorDesc)
        else d.output_tensor.data_type
    )
    return (d.input_tensor.like(data_type=data_type, sizes=conv_output_sizes(d)),)


_CONV_PARAMETERS = {
    # member: (owner, per output channel)
    "InputScaleTensor": ("InputTensor", False),
    "InputZeroPointTensor": ("InputTensor", False),
    "FilterScaleTensor": ("FilterTensor", True),
    "FilterZeroPointTensor": ("FilterTensor", True),
    "OutputScaleTensor": ("OutputTensor", False),
    "OutputZeroPointTensor": ("OutputTensor", False),
}


def validate_integer_conv(d: Any, v: Validator) -> None:
    x = d.input_tensor
    check_conv_dimension_count(d, v, (1, 2))
    tensors = [("FilterTensor", d.filter_tensor), ("OutputTensor", d.output_tensor)]
    bias = getattr(d, "bias_tensor", None)
    if bias is not None:
        tensors.insert(1, ("BiasTensor", bias))
    v.same("rank", tensors, ("InputTensor", x))
    if isinstance(d, ConvolutionIntegerOperatorDesc):  # its page's rule
        _same_parameter_ranks(d, v, ("InputZeroPointTensor", "FilterZeroPointTensor"))
    want = check_conv_window(d, v)
    k = d.filter_tensor.sizes[0]
    for member, (owner, per_channel) in _CONV_PARAMETERS.items():
        t = getattr(d, _snake(member), None)
        if t is None:
            continue
        what = "per output channel" if per_channel else "per tensor"
        check_parameter(v, member, t, x.rank, 1, k if per_channel else 1, what)
        if "Zero" in member:
            v.same("data_type", [(member, t)], (owner, getattr(d, _snake(owner))))
    if bias is not None:
        v.equal(
            "BiasTensor.Sizes", bias.sizes, (1, want[1]) + (1,) * (x.rank - 2), "{1, K, 1, ...}"
        )


def _filter_zero(z, rank: int):
    """A per-output-channel zero point as a {K, 1, 1, ..} array for the filter {K, C, k..}."""
    values = lax.reshape(z, (z.size,))
    return lax.reshape(values, (z.size,) + (1,) * (rank - 1))


def _conv_sum(d: Any, x: dict) -> Any:
    """The FORWARD cross-correlation of ``Input - InputZeroPoint`` and ``Filter -
    FilterZeroPoint`` with ``d``'s Strides, Dilations, padding and GroupCount, in int32.

    Written as one strided slice of the padded input per kernel point and, per group, an int8
    matrix product over (channel, kernel point) (``_zero_point_product``): XLA's GPU backend
    compiles integer convolutions only in cuDNN's int8 forms, integer matrix products on every
    backend. Padding holds the (shifted) input zero point, so its differences are 0: it reads as
    the zero point."""
    rank = d.input_tensor.rank
    zero = x["input_zero_point_tensor"]
    xs, x_zero = _signed(
        x["input_tensor"],
        d.input_tensor.data_type,
        None if zero is None else parameter(zero, rank, 1),
    )
    zero = x["filter_zero_point_tensor"]
    ws, w_zero = _signed(
        x["filter_tensor"],
        d.filter_tensor.data_type,
        None if zero is None else _filter_zero(zero, rank),
    )
    n, k, cg, g = xs.shape[0], ws.shape[0], ws.shape[1], d.group_count
    plan = WindowPlan(
        tuple(ws.shape[2:]),
        tuple(d.strides),
        tuple(d.dilations),
        tuple(d.start_padding),
        tuple(d.end_padding),
        tuple(xs.shape[2:]),
    )
    pad = jnp.int8(0) if x_zero is None else lax.reshape(x_zero, ()).astype(jnp.int8)
    points = list(window_points(plan, xs, pad))
    count, outs, flat = len(points), plan.outputs, math.prod(plan.outputs)
    # {N, C, P, O..} -> {G, C/G * P, N * O}: channel-major as the filter's {C/G, kernel...}
    patches = lax.reshape(jnp.stack(points, axis=2), (n, g, cg * count, flat))
    patches = lax.reshape(lax.transpose(patches, (1, 2, 0, 3)), (g, cg * count, n * flat))
    filters = lax.reshape(ws, (g, k // g, cg * count))
    if w_zero is not None:  # one value, or one per output channel: per row of the filters
        w_zero = lax.reshape(w_zero, (g, k // g, 1) if w_zero.size == k else (1, 1, 1))
    if x_zero is not None:
        x_zero = lax.reshape(x_zero, (1, 1, 1))
    y = _zero_point_product(filters, w_zero, patches, x_zero)  # {G, K/G, N * O}
    y = lax.transpose(lax.reshape(y, (g, k // g, n, flat)), (2, 0, 1, 3))
    return lax.reshape(y, (n, k) + outs)


def lower_convolution_integer(d: ConvolutionIntegerOperatorDesc, *arrays):
    return (_conv_sum(d, named_inputs(d, arrays)),)


def lower_quantized_convolution(d: QuantizedLinearConvolutionOperatorDesc, *arrays):
    x = named_inputs(d, arrays)
    rank = d.input_tensor.rank
    acc = _conv_sum(d, x)
    if x["bias_tensor"] is not None:
        acc = acc + x["bias_tensor"]
    scale = parameter(x["input_scale_tensor"], rank, 1) * parameter(
        x["filter_scale_tensor"], rank, 1
    )
    out = d.output_tensor.data_type
    zero = x["output_zero_point_tensor"]
    return (
        quantize(
            acc.astype(jnp.float32) * scale,
            parameter(x["output_scale_tensor"], rank, 1),
            None if zero is None else parameter(zero, rank, 1),
            out,
            out,
        ),
    )


def _conv_example(cls: type) -> Example:
    desc: dict[str, Any] = {"InputTensor": _tensor("UINT8", [1, 1, 3, 3])}
    inputs: dict[str, Any] = {"InputTensor": [1, 2, 3, 4, 5, 6, 7, 8, 9]}
    quantized = cls is QuantizedLinearConvolutionOperatorDesc
    if quantized:
        desc["InputScaleTensor"] = _tensor("FLOAT32", [1, 1, 1, 1])
        inputs["InputScaleTensor"] = [0.5]
    desc["InputZeroPointTensor"] = _tensor("UINT8", [1, 1, 1, 1])
    desc["FilterTensor"] = _tensor("INT8", [2, 1, 2, 2])
    inputs.update({"InputZeroPointTensor": [5], "FilterTensor": [1, 0, 0, 1, -1, 2, 3, 0]})
    if quantized:
        desc["FilterScaleTensor"] = _tensor("FLOAT32", [1, 2, 1, 1])
        desc["BiasTensor"] = _tensor("INT32", [1, 2, 1, 1])
        desc["OutputScaleTensor"] = _tensor("FLOAT32", [1, 1, 1, 1])
        desc["OutputZeroPointTensor"] = _tensor("INT8", [1, 1, 1, 1])
        desc["OutputTensor"] = _tensor("INT8", [1, 2, 2, 2])
        inputs.update(
            {
                "FilterScaleTensor": [1.0, 0.25],
                "BiasTensor": [4, -8],
                "OutputScaleTensor": [0.5],
                "OutputZeroPointTensor": [-3],
            }
        )
        note = "(x - 5) correlated with two 2x2 filters, plus bias, requantized"
    else:
        desc["OutputTensor"] = _tensor("INT32", [1, 2, 2, 2])
        note = "(x - 5) correlated with two 2x2 filters, summed in INT32"
    desc.update(
        {
            "DimensionCount": 2,
            "Strides": [1, 1],
            "Dilations": [1, 1],
            "StartPadding": [0, 0],
            "EndPadding": [0, 0],
            "GroupCount": 1,
        }
    )
    return Example({"type": cls.operator_type, "desc": desc}, inputs, note)


register(
    ConvolutionIntegerOperatorDesc,
    infer=_infer_conv,
    validate=validate_integer_conv,
    lower=lower_convolution_integer,
    support=rows(
        (L.FL_2_1, DIMS4, Q8, I32),
        (
            L.FL_4_0,
            _DIMS3_4,
            Q8,
            I32,
            {"InputZeroPointTensor": (Q8, _DIMS1_4), "FilterZeroPointTensor": (Q8, _DIMS1_4)},
        ),
    ),
    example=_conv_example(ConvolutionIntegerOperatorDesc),
)


def _qconv_columns(filter_scale_ranks: tuple[int, ...]) -> dict:
    return {
        "InputScaleTensor": (F32, _DIMS1_4),
        "InputZeroPointTensor": (Q8, _DIMS1_4),
        "FilterScaleTensor": (F32, filter_scale_ranks),
        "FilterZeroPointTensor": (Q8, _DIMS1_4),
        "BiasTensor": I32,
        "OutputScaleTensor": (F32, _DIMS1_4),
        "OutputZeroPointTensor": (Q8, _DIMS1_4),
    }


register(
    QuantizedLinearConvolutionOperatorDesc,
    infer=_infer_conv,
    validate=validate_integer_conv,
    lower=lower_quantized_convolution,
    support=rows(
        (
            L.FL_2_1,
            DIMS4,
            Q8,
            Q8,
            {
                "InputScaleTensor": F32,
                "FilterScaleTensor": F32,
                "OutputScaleTensor": F32,
                "BiasTensor": I32,
            },
        ),
        (L.FL_4_0, _DIMS3_4, Q8, Q8, _qconv_columns(_DIMS3_4)),
        (L.FL_5_2, _DIMS3_4, Q8, Q8, _qconv_columns(_DIMS1_4)),
    ),
    example=_conv_example(QuantizedLinearConvolutionOperatorDesc),
)


# ---------------------------------------------------------------------------------------------
# QUANTIZED_LINEAR_AVERAGE_POOLING


@dataclass(frozen=True)
class QuantizedLinearAveragePoolingOperatorDesc(OperatorDesc):
    """DML_QUANTIZED_LINEAR_AVERAGE_POOLING_OPERATOR_DESC: AVERAGE_POOLING1 of the dequantized
    input, quantized with the output's scale and zero point (FL 6_2).

    ``real = float32(sum over the window of (Input - InputZeroPoint)) * InputScale / divisor``
    (the sum exact in int32; padding contributes 0, i.e. reads as the zero point; the divisor
    is AVERAGE_POOLING1's: prod(WindowSize), or the window points on the input), then
    ``clamp(round(real / OutputScale) + OutputZeroPoint, Min, Max)``.

    Fields:
        input_tensor: {N, C, spatial...} (4-D or 5-D), INT8 or UINT8.
        input_scale_tensor (FLOAT32) / input_zero_point_tensor (optional, InputTensor's type),
        output_scale_tensor (FLOAT32) / output_zero_point_tensor (optional, OutputTensor's
            type): one value or one per channel (``{1, C, 1, 1}``; 1-D ``{C}``).
        output_tensor: INT8 or UINT8, AVERAGE_POOLING1's output sizes.
        strides, window_size, start_padding, end_padding, dilations, include_padding,
            dimension_count: as ``AveragePooling1OperatorDesc``.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_QUANTIZED_LINEAR_AVERAGE_POOLING"
    input_tensor: TensorDesc = input_field()
    input_scale_tensor: TensorDesc = input_field()
    input_zero_point_tensor: TensorDesc | None = input_field(optional=True)
    output_scale_tensor: TensorDesc = input_field()
    output_zero_point_tensor: TensorDesc | None = input_field(optional=True)
    output_tensor: TensorDesc = output_field()
    strides: tuple[int, ...] = attribute(UINT_ARRAY)
    window_size: tuple[int, ...] = attribute(UINT_ARRAY)
    start_padding: tuple[int, ...] = attribute(UINT_ARRAY)
    end_padding: tuple[int, ...] = attribute(UINT_ARRAY)
    dilations: tuple[int, ...] = attribute(UINT_ARRAY)
    include_padding: bool = attribute(BOOL)
    dimension_count: int | None = count_of("strides")


def infer_quantized_average_pooling(d: QuantizedLinearAveragePoolingOperatorDesc):
    x = d.input_tensor
    sizes = tuple(x.sizes[:2]) + window_plan(d).outputs
    return (x.like(data_type=d.output_tensor.data_type, sizes=sizes),)


def validate_quantized_average_pooling(
    d: QuantizedLinearAveragePoolingOperatorDesc, v: Validator
) -> None:
    validate_window(d, v, "InputTensor", d.input_tensor)
    x = d.input_tensor
    v.same("rank", [("OutputTensor", d.output_tensor)], ("InputTensor", x))
    for member in ("InputScaleTensor", "InputZeroPointTensor", "OutputScaleTensor",
                   "OutputZeroPointTensor"):  # fmt: skip
        t = getattr(d, _snake(member))
        if t is None:
            continue
        check_parameter(v, member, t, x.rank, 1, x.sizes[1], "per channel")
        if "Zero" in member:
            owner = member.split("Zero")[0] + "Tensor"
            v.same("data_type", [(member, t)], (owner, getattr(d, _snake(owner))))


def lower_quantized_average_pooling(d: QuantizedLinearAveragePoolingOperatorDesc, *arrays):
    x = named_inputs(d, arrays)
    rank = d.input_tensor.rank
    plan = window_plan(d)
    zero = x["input_zero_point_tensor"]
    diff = held(x["input_tensor"], d.input_tensor.data_type).astype(jnp.int32)
    if zero is not None:
        zero = held(parameter(zero, rank, 1), d.input_tensor.data_type)
        diff = diff - zero.astype(jnp.int32)
    total = window_sum(plan, diff)  # zeros pad the differences
    divisor = jnp.asarray(average_divisor(plan, d.include_padding), jnp.float32)
    real = divide(total.astype(jnp.float32) * parameter(x["input_scale_tensor"], rank, 1), divisor)
    out = d.output_tensor.data_type
    out_zero = x["output_zero_point_tensor"]
    return (
        quantize(
            real,
            parameter(x["output_scale_tensor"], rank, 1),
            None if out_zero is None else parameter(out_zero, rank, 1),
            out,
            out,
        ),
    )


register(
    QuantizedLinearAveragePoolingOperatorDesc,
    infer=infer_quantized_average_pooling,
    validate=validate_quantized_average_pooling,
    lower=lower_quantized_average_pooling,
    support=rows(
        (
            L.FL_6_2,
            (4, 5),
            Q8,
            Q8,
            {
                "InputScaleTensor": (F32, (1, 2, 3, 4, 5)),
                "InputZeroPointTensor": (Q8, (1, 2, 3, 4, 5)),
                "OutputScaleTensor": (F32, (1, 2, 3, 4, 5)),
                "OutputZeroPointTensor": (Q8, (1, 2, 3, 4, 5)),
            },
        ),
    ),
    example=Example(
        {
            "type": "DML_OPERATOR_QUANTIZED_LINEAR_AVERAGE_POOLING",
            "desc": {
                "InputTensor": _tensor("UINT8", [1, 2, 2, 2]),
                "InputScaleTensor": _tensor("FLOAT32", [1, 2, 1, 1]),
                "InputZeroPointTensor": _tensor("UINT8", [1, 1, 1, 1]),
                "OutputScaleTensor": _tensor("FLOAT32", [1, 1, 1, 1]),
                "OutputZeroPointTensor": _tensor("INT8", [1, 1, 1, 1]),
                "OutputTensor": _tensor("INT8", [1, 2, 2, 2]),
                "DimensionCount": 2,
                "Strides": [1, 1],
                "WindowSize": [2, 2],
                "StartPadding": [1, 1],
                "EndPadding": [0, 0],
                "Dilations": [1, 1],
                "IncludePadding": False,
            },
        },
        {
            "InputTensor": [10, 20, 30, 41, 0, 4, 8, 12],
            "InputScaleTensor": [1.0, 0.5],
            "InputZeroPointTensor": [10],
            "OutputScaleTensor": [0.5],
            "OutputZeroPointTensor": [0],
        },
        "2x2 means of the dequantized input (one scale per channel), padding not counted",
    ),
)
