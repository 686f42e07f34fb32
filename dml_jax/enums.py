"""DirectML enumerations, with parsing of members, full DML names and suffixes.

Every enum here is an ``enum.Enum`` whose members carry DirectML's numeric values. ``parse``
accepts the member itself, the full DML name (``"DML_REDUCE_FUNCTION_SUM"``) or the suffix
(``"SUM"``), in exact case, as DxDispatch's JSON does; anything else is a ``ValidationError``.
"""

from __future__ import annotations

import enum
import functools
from typing import Any

import ml_dtypes
import numpy as np

from .errors import ValidationError, brief


class _DmlEnum(enum.Enum):
    """Base for DML enums: a ``_prefix`` for full names and a ``parse`` that takes all spellings."""

    @classmethod
    def parse(cls, value: Any, path: str | None = None):
        """Returns the member named by ``value`` (member, full DML name or suffix).

        Args:
            value: the member, ``"<PREFIX><SUFFIX>"`` or ``"<SUFFIX>"``.
            path: the field path used in the error message (default: the enum's name).

        Raises:
            ValidationError: for any other value.
        """
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            prefix = cls._prefix_value()
            name = value.removeprefix(prefix)
            member = cls._by_suffix().get(name)
            if member is not None:
                return member
        where = path or cls.__name__
        choices = ", ".join(m._suffix for m in cls)
        raise ValidationError(
            f"{where} must be a {cls.__name__} (a member, its full DML name such as "
            f"'{next(iter(cls)).dml_name}', or one of: {choices}), "
            f"got {brief(value)}"
        )

    @classmethod
    def _prefix_value(cls) -> str:
        return _PREFIXES.get(cls, "")

    @classmethod
    def _by_suffix(cls) -> dict:
        return {m.name: m for m in cls}

    @property
    def _suffix(self) -> str:
        """The short spelling error messages list (``SUM``; FeatureLevel: ``5_0``)."""
        return self.name

    @property
    def dml_name(self) -> str:
        """The full DML spelling, e.g. ``DML_TENSOR_DATA_TYPE_FLOAT32``."""
        return f"{type(self)._prefix_value()}{self.name}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}.{self.name}"


class DataType(_DmlEnum):
    """DML_TENSOR_DATA_TYPE: the thirteen element types dml_jax operators use.

    UINT4 and INT4 (feature level 6_3) are packed two per byte in DirectML's memory (element 0
    in the low nibble). Logical-mode arrays of them have JAX's 4-bit dtypes (``jnp.int4`` /
    ``jnp.uint4``, ml_dtypes' ``int4`` / ``uint4``); buffer mode binds DirectML's packed bytes
    (uint8 buffers, docs/semantics.md, "Quantization"). ``bits`` is the size in DirectML's
    memory; ``size`` the bytes a NumPy array spends on one element (1 for the 4-bit types).
    """

    FLOAT32 = 1
    FLOAT16 = 2
    UINT32 = 3
    UINT16 = 4
    UINT8 = 5
    INT32 = 6
    INT16 = 7
    INT8 = 8
    FLOAT64 = 9
    UINT64 = 10
    INT64 = 11
    UINT4 = 12
    INT4 = 13

    @property
    def size(self) -> int:
        """Bytes of one element of a NumPy array of ``numpy_dtype`` (1 for the 4-bit types,
        which NumPy holds a byte an element; DirectML's memory packs them: see ``bits``)."""
        return self.numpy_dtype.itemsize

    @property
    def bits(self) -> int:
        """Bits of one element in DirectML's memory (4 for UINT4 / INT4, packed two per byte)."""
        return 4 if self in _FOUR_BIT else 8 * self.size

    @property
    def numpy_dtype(self) -> np.dtype:
        """The NumPy dtype (also the JAX dtype) of this element type; for UINT4 / INT4
        ml_dtypes' ``uint4`` / ``int4`` (``jnp.uint4`` / ``jnp.int4``)."""
        return _FOUR_BIT.get(self) or np.dtype(self.name.lower())

    @property
    def jax_dtype(self) -> np.dtype:
        """The JAX dtype; equal to ``numpy_dtype`` (JAX uses NumPy dtypes)."""
        return self.numpy_dtype

    @property
    def is_float(self) -> bool:
        return self.name.startswith("FLOAT")

    @property
    def is_signed(self) -> bool:
        return not self.name.startswith("UINT")

    @property
    def is_64bit(self) -> bool:
        return self.size == 8

    @property
    def integer_range(self) -> tuple[int, int]:
        """(lowest, highest) value of an integer type (UINT4: (0, 15), INT4: (-8, 7))."""
        if self.is_float:
            raise ValueError(f"{self.name} is not an integer type")
        if self in _FOUR_BIT:
            return (-8, 7) if self.is_signed else (0, 15)
        info = np.iinfo(self.numpy_dtype)
        return int(info.min), int(info.max)

    @classmethod
    def from_dtype(cls, dtype: Any) -> DataType:
        """The DataType of a NumPy/JAX dtype; ``ValidationError`` when DML has none.

        ``jnp.int4`` / ``jnp.uint4`` give INT4 / UINT4."""
        dt = np.dtype(dtype)
        try:
            return cls[dt.name.upper()]
        except KeyError:
            raise ValidationError(f"no DML_TENSOR_DATA_TYPE for dtype {dt.name}") from None


_FOUR_BIT = {DataType.UINT4: np.dtype(ml_dtypes.uint4), DataType.INT4: np.dtype(ml_dtypes.int4)}


class TensorFlags(_DmlEnum):
    """DML_TENSOR_FLAGS. OWNED_BY_DML (0x1) is the only defined bit."""

    NONE = 0
    OWNED_BY_DML = 1


@functools.total_ordering
class FeatureLevel(_DmlEnum):
    """DML_FEATURE_LEVEL, ordered: ``FeatureLevel.FL_3_0 < FeatureLevel.FL_5_0``.

    Parses ``FeatureLevel.FL_5_0``, ``"DML_FEATURE_LEVEL_5_0"``, ``"5_0"`` and ``"FL_5_0"``.
    """

    FL_1_0 = 0x1000
    FL_2_0 = 0x2000
    FL_2_1 = 0x2100
    FL_3_0 = 0x3000
    FL_3_1 = 0x3100
    FL_4_0 = 0x4000
    FL_4_1 = 0x4100
    FL_5_0 = 0x5000
    FL_5_1 = 0x5100
    FL_5_2 = 0x5200
    FL_6_0 = 0x6000
    FL_6_1 = 0x6100
    FL_6_2 = 0x6200
    FL_6_3 = 0x6300
    FL_6_4 = 0x6400

    @classmethod
    def _by_suffix(cls) -> dict:
        table = {m.name: m for m in cls}
        table.update({m.name[3:]: m for m in cls})
        return table

    @property
    def dml_name(self) -> str:
        return f"DML_FEATURE_LEVEL_{self.name[3:]}"

    @property
    def label(self) -> str:
        """``5_0`` for FL_5_0."""
        return self.name[3:]

    @property
    def _suffix(self) -> str:
        return self.label

    @classmethod
    def newest(cls) -> FeatureLevel:
        return max(cls)

    def __lt__(self, other):
        if not isinstance(other, FeatureLevel):
            return NotImplemented
        return self.value < other.value


class ReduceFunction(_DmlEnum):
    """DML_REDUCE_FUNCTION: the twelve reductions of DML_OPERATOR_REDUCE."""

    ARGMAX = 0
    ARGMIN = 1
    AVERAGE = 2
    L1 = 3
    L2 = 4
    LOG_SUM = 5
    LOG_SUM_EXP = 6
    MAX = 7
    MIN = 8
    MULTIPLY = 9
    SUM = 10
    SUM_SQUARE = 11


class DepthSpaceOrder(_DmlEnum):
    """DML_DEPTH_SPACE_ORDER (feature level 2_1): DCR and CRD channel layouts."""

    DEPTH_COLUMN_ROW = 0
    COLUMN_ROW_DEPTH = 1


class AxisDirection(_DmlEnum):
    """DML_AXIS_DIRECTION: which of equal extremes ARGMIN/ARGMAX report (first or last)."""

    INCREASING = 0
    DECREASING = 1


class RoundingMode(_DmlEnum):
    """DML_ROUNDING_MODE (feature level 2_1): ELEMENT_WISE_ROUND's rule.

    HALVES_TO_NEAREST_EVEN: nearest, ties to even; TOWARD_ZERO: drop the fraction;
    TOWARD_INFINITY: nearest, ties away from zero (DirectML's table: 2.5 -> 3, -2.5 -> -3).
    """

    HALVES_TO_NEAREST_EVEN = 0
    TOWARD_ZERO = 1
    TOWARD_INFINITY = 2


class IsInfinityMode(_DmlEnum):
    """DML_IS_INFINITY_MODE (feature level 2_1): which infinities ELEMENT_WISE_IS_INFINITY finds."""

    EITHER = 0
    POSITIVE = 1
    NEGATIVE = 2


class MatrixTransform(_DmlEnum):
    """DML_MATRIX_TRANSFORM: GEMM's TransA / TransB (NONE, or TRANSPOSE of the last two dims)."""

    NONE = 0
    TRANSPOSE = 1


class ConvolutionMode(_DmlEnum):
    """DML_CONVOLUTION_MODE: CONVOLUTION flips the filter's spatial dimensions,
    CROSS_CORRELATION does not."""

    CONVOLUTION = 0
    CROSS_CORRELATION = 1


class ConvolutionDirection(_DmlEnum):
    """DML_CONVOLUTION_DIRECTION: FORWARD, or BACKWARD (the transposed convolution)."""

    FORWARD = 0
    BACKWARD = 1


class PaddingMode(_DmlEnum):
    """DML_PADDING_MODE: how PADDING / PADDING1 fill the border (each operator's rules say which
    modes it accepts)."""

    CONSTANT = 0
    EDGE = 1
    REFLECTION = 2
    SYMMETRIC = 3
    WRAP = 4


class RandomGeneratorType(_DmlEnum):
    """DML_RANDOM_GENERATOR_TYPE: RANDOM_GENERATOR's algorithm (Philox 4x32 with 10 rounds)."""

    PHILOX_4X32_10 = 0


class QuantizationType(_DmlEnum):
    """DML_QUANTIZATION_TYPE (feature level 6_3): what QUANTIZE / DEQUANTIZE's
    QuantizationTensors hold: SCALE (one tensor) or SCALE_ZERO_POINT (scale, then zero point).
    NONE is the enum's "not quantized" marker, which those operators reject."""

    NONE = 0
    SCALE = 1
    SCALE_ZERO_POINT = 2


class InterpolationMode(_DmlEnum):
    """DML_INTERPOLATION_MODE: how resampling and ROI_ALIGN read between elements."""

    NEAREST_NEIGHBOR = 0
    LINEAR = 1


class RecurrentNetworkDirection(_DmlEnum):
    """DML_RECURRENT_NETWORK_DIRECTION: the order RNN, LSTM and GRU walk the sequence in
    (BIDIRECTIONAL: both, each with its own weights)."""

    FORWARD = 0
    BACKWARD = 1
    BIDIRECTIONAL = 2


class MultiheadAttentionMaskType(_DmlEnum):
    """DML_MULTIHEAD_ATTENTION_MASK_TYPE (feature level 6_1): how MULTIHEAD_ATTENTION(1) reads
    its MaskTensor (none, key lengths, key end/start, key lengths with query/key offsets, or
    0/1 values)."""

    NONE = 0
    KEY_SEQUENCE_LENGTH = 1
    KEY_SEQUENCE_END_START = 2
    KEY_QUERY_SEQUENCE_LENGTH_START_END = 3
    BOOLEAN = 4


_PREFIXES = {
    DataType: "DML_TENSOR_DATA_TYPE_",
    TensorFlags: "DML_TENSOR_FLAG_",
    FeatureLevel: "DML_FEATURE_LEVEL_",
    ReduceFunction: "DML_REDUCE_FUNCTION_",
    DepthSpaceOrder: "DML_DEPTH_SPACE_ORDER_",
    AxisDirection: "DML_AXIS_DIRECTION_",
    RoundingMode: "DML_ROUNDING_MODE_",
    IsInfinityMode: "DML_IS_INFINITY_MODE_",
    MatrixTransform: "DML_MATRIX_TRANSFORM_",
    ConvolutionMode: "DML_CONVOLUTION_MODE_",
    ConvolutionDirection: "DML_CONVOLUTION_DIRECTION_",
    PaddingMode: "DML_PADDING_MODE_",
    RandomGeneratorType: "DML_RANDOM_GENERATOR_TYPE_",
    InterpolationMode: "DML_INTERPOLATION_MODE_",
    RecurrentNetworkDirection: "DML_RECURRENT_NETWORK_DIRECTION_",
    QuantizationType: "DML_QUANTIZATION_TYPE_",
    MultiheadAttentionMaskType: "DML_MULTIHEAD_ATTENTION_MASK_TYPE_",
}

NEWEST_FEATURE_LEVEL = FeatureLevel.newest()


# Every DML enum above, in definition order: ``dml_jax`` exports each under its own name, so a new
# enum needs no line elsewhere.
ENUMS: tuple[type[_DmlEnum], ...] = tuple(_DmlEnum.__subclasses__())
