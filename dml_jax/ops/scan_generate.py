"""Scans and generators: CUMULATIVE_SUMMATION, CUMULATIVE_PRODUCT, FILL_VALUE_CONSTANT,
FILL_VALUE_SEQUENCE, DIAGONAL_MATRIX and DIAGONAL_MATRIX1.

The generators have no input tensor (DIAGONAL_MATRIX1's is optional): their lowering builds the
output from iotas, so XLA writes it in one pass and a graph or model may start from them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import jax.numpy as jnp
import numpy as np
from jax import lax

from ..enums import AxisDirection, DataType
from ..enums import FeatureLevel as L
from ..errors import ValidationError, Validator, brief
from ..fields import (
    BOOL,
    FLOAT,
    INT,
    UINT,
    OperatorDesc,
    ScalarUnion,
    attribute,
    enum_type,
    input_field,
    output_field,
)
from ..registry import Example, register
from ..support import DIMS1_8, DIMS4, F2, rows, types
from ..tensor import TensorDesc
from ._common import in_float32, infer_same, same_tensors
from .clip import convert_float_bound, convert_typed_bound

# --- CUMULATIVE_SUMMATION / CUMULATIVE_PRODUCT ------------------------------------------------


@dataclass(frozen=True)
class CumulativeSummationOperatorDesc(OperatorDesc):
    """DML_CUMULATIVE_SUMMATION_OPERATOR_DESC: running sums along Axis (FL 2_1).

    Fields:
        input_tensor, output_tensor: same data type, rank and sizes.
        axis: the dimension summed along, < DimensionCount.
        axis_direction: INCREASING sums from index 0 up, DECREASING from the last index down.
        has_exclusive_sum: True writes each running sum before adding the current element (the
            first output of each line is 0 and the last element is never added).
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_CUMULATIVE_SUMMATION"
    input_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    axis: int = attribute(UINT)
    axis_direction: AxisDirection = attribute(enum_type(AxisDirection))
    has_exclusive_sum: bool = attribute(BOOL)

    @property
    def exclusive(self) -> bool:
        return self.has_exclusive_sum


@dataclass(frozen=True)
class CumulativeProductOperatorDesc(OperatorDesc):
    """DML_CUMULATIVE_PRODUCT_OPERATOR_DESC: running products along Axis (FL 3_1).

    Fields:
        input_tensor, output_tensor: same data type, rank and sizes.
        axis: the dimension multiplied along, < DimensionCount.
        axis_direction: INCREASING from index 0 up, DECREASING from the last index down.
        has_exclusive_product: True writes each running product before multiplying in the
            current element (the first output of each line is 1).
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_CUMULATIVE_PRODUCT"
    input_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    axis: int = attribute(UINT)
    axis_direction: AxisDirection = attribute(enum_type(AxisDirection))
    has_exclusive_product: bool = attribute(BOOL)

    @property
    def exclusive(self) -> bool:
        return self.has_exclusive_product


def validate_scan(d: Any, v: Validator) -> None:
    same_tensors(d, v)
    v.axis("Axis", d.axis, d.input_tensor.rank)


def _exclusive(y, axis: int, reverse: bool, identity):
    """Shifts an inclusive scan one place in the scan direction, the identity entering first."""
    n = y.shape[axis]
    pad = [(0, 0, 0)] * y.ndim
    if reverse:
        kept = lax.slice_in_dim(y, 1, n, axis=axis)
        pad[axis] = (0, 1, 0)
    else:
        kept = lax.slice_in_dim(y, 0, n - 1, axis=axis)
        pad[axis] = (1, 0, 0)
    return lax.pad(kept, jnp.asarray(identity, y.dtype), pad)


def scan(x, axis: int, reverse: bool, exclusive: bool, product: bool):
    """The running sum or product of ``x`` along ``axis``.

    Integers wrap in their own type. float16 accumulates in float32 and each output is rounded
    once (DirectML's FLOAT math for half tensors)."""
    op = lax.cumprod if product else lax.cumsum

    def running(w):
        y = op(w, axis=axis, reverse=reverse)
        return _exclusive(y, axis, reverse, 1 if product else 0) if exclusive else y

    return in_float32(running, x)


def lower_scan(d: Any, x):
    product = isinstance(d, CumulativeProductOperatorDesc)
    reverse = d.axis_direction is AxisDirection.DECREASING
    return (scan(x, d.axis, reverse, d.exclusive, product),)


def _scan_example(name: str, flag: str, note: str) -> Example:
    return Example(
        {
            "type": f"DML_OPERATOR_{name}",
            "desc": {
                "InputTensor": {"DataType": "FLOAT32", "Sizes": [1, 1, 3, 4]},
                "OutputTensor": {"DataType": "FLOAT32", "Sizes": [1, 1, 3, 4]},
                "Axis": 3,
                "AxisDirection": "DML_AXIS_DIRECTION_INCREASING",
                flag: False,
            },
        },
        {"InputTensor": [2, 1, 3, 5, 3, 8, 7, 3, 9, 6, 2, 4]},
        note,
    )


_CUMSUM_TYPES = types("FLOAT32", "FLOAT16", "INT32", "UINT32")
register(
    CumulativeSummationOperatorDesc,
    infer=infer_same,
    validate=validate_scan,
    lower=lower_scan,
    in_place=True,
    support=rows(
        (L.FL_2_1, DIMS4, _CUMSUM_TYPES),
        (L.FL_4_0, DIMS1_8, _CUMSUM_TYPES),
        (L.FL_5_0, DIMS1_8, _CUMSUM_TYPES | types("INT64", "UINT64")),
    ),
    example=_scan_example(
        "CUMULATIVE_SUMMATION", "HasExclusiveSum", "running sums along the rows of a 3x4 matrix"
    ),
)

_CUMPROD_TYPES = F2 | types("UINT32", "UINT16")
register(
    CumulativeProductOperatorDesc,
    infer=infer_same,
    validate=validate_scan,
    lower=lower_scan,
    in_place=True,
    support=rows((L.FL_3_1, DIMS4, _CUMPROD_TYPES), (L.FL_4_0, DIMS1_8, _CUMPROD_TYPES)),
    example=_scan_example(
        "CUMULATIVE_PRODUCT",
        "HasExclusiveProduct",
        "running products along the rows of a 3x4 matrix",
    ),
)


# --- typed scalar values ------------------------------------------------------------------------


def _typed_value(d: Any, member: str, value: int | float) -> np.generic:  # noqa: PYI041 (an int is kept exact)
    """A DML_SCALAR_UNION member read exactly in ``ValueDataType`` (CLIP1's rule)."""
    return convert_typed_bound(value, d.value_data_type, f"{d.operator_type}: {member}")


def _wrapped_delta(d: Any, value: int | float) -> np.generic:  # noqa: PYI041 (an int is kept exact)
    """FILL_VALUE_SEQUENCE's ValueDelta: an integer type takes any number of its width, signed
    or unsigned (DirectML's own example steps a UINT8 sequence by -2), read as those bits in the
    type, so that the sum wraps (10 + 254 = 8 in UINT8)."""
    t = d.value_data_type
    where = f"{d.operator_type}: ValueDelta"
    if t.is_float:
        return convert_typed_bound(value, t, where)
    bits = t.bits
    if isinstance(value, float) and (not math.isfinite(value) or value != math.floor(value)):
        raise ValidationError(f"{where} must be an integer for {t.name}, got {value}")
    whole = int(value)
    if not -(2 ** (bits - 1)) <= whole < 2**bits:
        raise ValidationError(
            f"{where} ({brief(whole)}) does not fit {bits} bits: it must be in "
            f"[{-(2 ** (bits - 1))}, {2**bits - 1}]"
        )
    bits_value = whole % 2**bits  # the union's bits, read back in the type
    if t.numpy_dtype.kind == "i" and bits_value >= 2 ** (bits - 1):
        bits_value -= 2**bits
    return t.numpy_dtype.type(bits_value)


def _value_type_rule(d: Any, v: Validator) -> None:
    v.equal("ValueDataType", d.value_data_type, d.output_tensor.data_type, "OutputTensor.DataType")


def _flat_index(shape: tuple[int, ...], dtype):
    """Each element's row-major position, as the integer ``dtype``, modulo 2**bits (a sequence of
    more elements than a narrow type holds wraps, as its arithmetic does).

    Positions are computed in an unsigned type of at least 32 bits with the strides taken
    modulo its width (exact modulo 2**32 or 2**64), then narrowed by truncation or, at the same
    width, reinterpreted."""
    dtype = np.dtype(dtype)
    wide = np.dtype(np.uint64 if dtype.itemsize == 8 or math.prod(shape) >= 2**32 else np.uint32)
    modulus = 2 ** (8 * wide.itemsize)
    position = jnp.zeros(shape, wide)
    stride = 1
    for axis in reversed(range(len(shape))):
        step = jnp.asarray(stride % modulus, wide)
        position = position + lax.broadcasted_iota(wide, shape, axis) * step
        stride *= shape[axis]
    if dtype.itemsize == wide.itemsize:
        return lax.bitcast_convert_type(position, dtype)
    return position.astype(dtype)


# --- FILL_VALUE_CONSTANT ---------------------------------------------------------------------


@dataclass(frozen=True)
class FillValueConstantOperatorDesc(OperatorDesc):
    """DML_FILL_VALUE_CONSTANT_OPERATOR_DESC: every output element is Value (FL 2_1).

    Fields:
        output_tensor: any sizes; its data type is ValueDataType.
        value_data_type: the type Value is read in; must equal OutputTensor.DataType.
        value: a number read exactly in ValueDataType (an integer type takes integers in its
            range, a float type any number in its finite range or an infinity).
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_FILL_VALUE_CONSTANT"
    output_tensor: TensorDesc = output_field()
    value_data_type: DataType = attribute(enum_type(DataType))
    value: int | float = attribute(ScalarUnion("value_data_type"))


def _infer_output(d: Any) -> tuple[TensorDesc, ...]:
    return (d.output_tensor.like(),)


def validate_fill_constant(d: FillValueConstantOperatorDesc, v: Validator) -> None:
    _value_type_rule(d, v)
    _typed_value(d, "Value", d.value)


def fill_constant_value(d: FillValueConstantOperatorDesc) -> np.ndarray:
    """Value in the output's type (a 0-d array)."""
    return np.asarray(_typed_value(d, "Value", d.value)).astype(d.output_tensor.dtype)


def lower_fill_constant(d: FillValueConstantOperatorDesc):
    return (jnp.full(d.output_tensor.sizes, fill_constant_value(d)),)


_FILL_TYPES_2_1 = types("FLOAT32", "FLOAT16", "INT32", "INT16", "INT8", "UINT32", "UINT16", "UINT8")
_WIDE_INTS = types("INT64", "UINT64")


register(
    FillValueConstantOperatorDesc,
    infer=_infer_output,
    validate=validate_fill_constant,
    lower=lower_fill_constant,
    in_place=True,
    support=rows(
        (L.FL_2_1, DIMS4, _FILL_TYPES_2_1),
        (L.FL_4_0, DIMS1_8, _FILL_TYPES_2_1),
        (L.FL_4_1, DIMS1_8, _FILL_TYPES_2_1 | _WIDE_INTS | types("FLOAT64")),
    ),
    example=Example(
        {
            "type": "DML_OPERATOR_FILL_VALUE_CONSTANT",
            "desc": {
                "OutputTensor": {"DataType": "FLOAT32", "Sizes": [1, 1, 2, 4]},
                "ValueDataType": "FLOAT32",
                "Value": 13.0,
            },
        },
        {},
        "a {1, 1, 2, 4} tensor of 13s, from no input",
    ),
)


# --- FILL_VALUE_SEQUENCE ---------------------------------------------------------------------


@dataclass(frozen=True)
class FillValueSequenceOperatorDesc(OperatorDesc):
    """DML_FILL_VALUE_SEQUENCE_OPERATOR_DESC: element i (row-major) is
    ValueStart + i * ValueDelta (FL 2_1).

    Fields:
        output_tensor: any sizes; its data type is ValueDataType.
        value_data_type: the type of ValueStart and ValueDelta; must equal OutputTensor.DataType.
        value_start: read exactly in ValueDataType.
        value_delta: read in ValueDataType; for an integer type also a negative step of the
            type's width (-2 for UINT8 steps down, the sum wrapping as DirectML's example shows).

    Integer sequences wrap modulo 2**bits. Float sequences are computed in float32 as
    ``start + i * delta`` (float16: rounded once to half); see docs/semantics.md.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_FILL_VALUE_SEQUENCE"
    output_tensor: TensorDesc = output_field()
    value_data_type: DataType = attribute(enum_type(DataType))
    value_start: int | float = attribute(ScalarUnion("value_data_type"))
    value_delta: int | float = attribute(ScalarUnion("value_data_type"))


def validate_fill_sequence(d: FillValueSequenceOperatorDesc, v: Validator) -> None:
    _value_type_rule(d, v)
    _typed_value(d, "ValueStart", d.value_start)
    _wrapped_delta(d, d.value_delta)


def lower_fill_sequence(d: FillValueSequenceOperatorDesc):
    t = d.output_tensor.data_type
    shape = d.output_tensor.sizes
    start = _typed_value(d, "ValueStart", d.value_start)
    delta = _wrapped_delta(d, d.value_delta)
    if t.is_float:
        # float32 arithmetic for FLOAT16/FLOAT32 (DML's FLOAT): one product and one sum, each
        # rounded; the index itself is exact in float32 up to 2**24 elements and rounded to
        # nearest beyond (FLOAT64 computes in float64).
        wide = jnp.float64 if t is DataType.FLOAT64 else jnp.float32
        i = _flat_index(shape, jnp.int32 if math.prod(shape) < 2**31 else jnp.int64).astype(wide)
        y = jnp.asarray(start, wide) + i * jnp.asarray(delta, wide)
        return (y.astype(t.numpy_dtype),)
    # Integers: the product and sum wrap in the output type (two's complement), exactly.
    dtype = t.numpy_dtype
    i = _flat_index(shape, dtype)
    return (jnp.asarray(start, dtype) + i * jnp.asarray(delta, dtype),)


register(
    FillValueSequenceOperatorDesc,
    infer=_infer_output,
    validate=validate_fill_sequence,
    lower=lower_fill_sequence,
    in_place=True,
    support=rows(
        (L.FL_2_1, DIMS4, _FILL_TYPES_2_1),
        (L.FL_4_0, DIMS1_8, _FILL_TYPES_2_1),
        (L.FL_5_0, DIMS1_8, _FILL_TYPES_2_1 | _WIDE_INTS),
    ),
    example=Example(
        {
            "type": "DML_OPERATOR_FILL_VALUE_SEQUENCE",
            "desc": {
                "OutputTensor": {"DataType": "UINT8", "Sizes": [1, 1, 2, 2]},
                "ValueDataType": "UINT8",
                "ValueStart": 10,
                "ValueDelta": -2,
            },
        },
        {},
        "10, 8, 6, 4 in UINT8: a negative step wraps as DirectML's example shows",
    ),
)


# --- DIAGONAL_MATRIX / DIAGONAL_MATRIX1 ------------------------------------------------------


@dataclass(frozen=True)
class DiagonalMatrixOperatorDesc(OperatorDesc):
    """DML_DIAGONAL_MATRIX_OPERATOR_DESC: Value where column == row + Offset, 0 elsewhere, in
    each matrix of the last two dimensions (FL 2_0).

    Fields:
        output_tensor: { Batch1, Batch2, Height, Width }, not necessarily square.
        offset: shifts the diagonal right (> 0) or left (< 0).
        value: a FLOAT; for an integer output it is truncated toward zero and saturated to the
            type's range (CLIP's rule for FLOAT bounds: 10.6 becomes 10).
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_DIAGONAL_MATRIX"
    output_tensor: TensorDesc = output_field()
    offset: int = attribute(INT)
    value: float = attribute(FLOAT)


@dataclass(frozen=True)
class DiagonalMatrix1OperatorDesc(OperatorDesc):
    """DML_DIAGONAL_MATRIX1_OPERATOR_DESC: Value on a band of diagonals, the input (or 0)
    elsewhere (FL 5_1).

    With topX = column - row, an element takes Value when
    ``(End >= Begin) ^ (topX >= Begin) ^ (topX < End)``: the diagonals Begin <= topX < End for
    End >= Begin, and everything outside End <= topX < Begin for End < Begin.

    Fields:
        input_tensor: optional; when present the elements off the band are its values, and it
            has the output's data type and sizes.
        output_tensor: 2 to 4 dimensions, the last two a matrix (not necessarily square).
        value_data_type: the type of Value; must equal OutputTensor.DataType.
        value: read exactly in ValueDataType.
        diagonal_fill_begin, diagonal_fill_end: the band's bounds (INT).
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_DIAGONAL_MATRIX1"
    input_tensor: TensorDesc | None = input_field(optional=True)
    output_tensor: TensorDesc = output_field()
    value_data_type: DataType = attribute(enum_type(DataType))
    value: int | float = attribute(ScalarUnion("value_data_type"))
    diagonal_fill_begin: int = attribute(INT)
    diagonal_fill_end: int = attribute(INT)


def _top_x(shape: tuple[int, ...]):
    """column - row of every element (int32; matrix sides are below 2**31)."""
    rank = len(shape)
    return lax.broadcasted_iota(jnp.int32, shape, rank - 1) - lax.broadcasted_iota(
        jnp.int32, shape, rank - 2
    )


def validate_diagonal(d: DiagonalMatrixOperatorDesc, v: Validator) -> None:
    pass  # every Offset and Value is valid; the support table checks the output


def lower_diagonal(d: DiagonalMatrixOperatorDesc):
    t = d.output_tensor.data_type
    shape = d.output_tensor.sizes
    value = convert_float_bound(d.value, t)
    on = _top_x(shape) == _clamp_int32(d.offset)
    return (jnp.where(on, jnp.asarray(value), jnp.zeros((), t.numpy_dtype)),)


def _clamp_int32(n: int) -> int:
    # Offsets beyond any matrix side select nothing either way; keep them int32-sized.
    return max(min(n, 2**31 - 1), -(2**31) + 1)


def validate_diagonal1(d: DiagonalMatrix1OperatorDesc, v: Validator) -> None:
    _value_type_rule(d, v)
    v.check(
        "OutputTensor.DimensionCount",
        d.output_tensor.rank >= 2,
        f"must be at least 2 (a matrix), got {d.output_tensor.rank}",
    )
    if d.input_tensor is not None:
        same_tensors(d, v)
    _typed_value(d, "Value", d.value)


def diagonal_band(shape: tuple[int, ...], begin: int, end: int):
    """DIAGONAL_MATRIX1's useValue mask for ``shape``."""
    top_x = _top_x(shape)
    begin, end = _clamp_int32(begin), _clamp_int32(end)
    return (end >= begin) ^ (top_x >= begin) ^ (top_x < end)


def lower_diagonal1(d: DiagonalMatrix1OperatorDesc, x=None):
    t = d.output_tensor.data_type
    shape = d.output_tensor.sizes
    value = jnp.asarray(_typed_value(d, "Value", d.value))
    rest = jnp.zeros((), t.numpy_dtype) if x is None else x
    return (
        jnp.where(diagonal_band(shape, d.diagonal_fill_begin, d.diagonal_fill_end), value, rest),
    )


_DIAG_TYPES = _FILL_TYPES_2_1
register(
    DiagonalMatrixOperatorDesc,
    infer=_infer_output,
    validate=validate_diagonal,
    lower=lower_diagonal,
    support=rows((L.FL_2_0, DIMS4, F2), (L.FL_2_1, DIMS4, _DIAG_TYPES)),
    example=Example(
        {
            "type": "DML_OPERATOR_DIAGONAL_MATRIX",
            "desc": {
                "OutputTensor": {"DataType": "FLOAT32", "Sizes": [1, 1, 3, 2]},
                "Offset": -1,
                "Value": 1.0,
            },
        },
        {},
        "ones one diagonal below the main one in a 3x2 matrix",
    ),
)

register(
    DiagonalMatrix1OperatorDesc,
    infer=_infer_output,
    validate=validate_diagonal1,
    lower=lower_diagonal1,
    support=rows(
        (L.FL_5_1, (2, 3, 4), _DIAG_TYPES | _WIDE_INTS | types("FLOAT64")),
    ),
    example=Example(
        {
            "type": "DML_OPERATOR_DIAGONAL_MATRIX1",
            "desc": {
                "InputTensor": {"DataType": "INT32", "Sizes": [3, 4]},
                "OutputTensor": {"DataType": "INT32", "Sizes": [3, 4]},
                "ValueDataType": "INT32",
                "Value": 0,
                "DiagonalFillBegin": -2147483648,
                "DiagonalFillEnd": 0,
            },
        },
        {"InputTensor": list(range(1, 13))},
        "upper triangle kept (ONNX Trilu upper): the band below the diagonal set to 0",
    ),
)
