"""DML_BUFFER_TENSOR_DESC, DML_SCALE_BIAS and DML_SIZE_2D, with DirectML's size, stride and byte arithmetic."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .enums import DataType, TensorFlags
from .errors import UINT32_MAX, UINT64_MAX, ValidationError, as_float, as_int, as_int_tuple

MAX_DIMENSIONS = 8  # DML_TENSOR_DIMENSION_COUNT_MAX1 (feature level 3_0 and later)


def packed_strides(sizes: Sequence[int]) -> tuple[int, ...]:
    """Row-major strides in elements: the layout DML uses when Strides is null."""
    strides, step = [], 1
    for size in reversed(sizes):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def host_view(flat: np.ndarray, desc: TensorDesc) -> np.ndarray:
    """The logical tensor (shape ``desc.sizes``) that ``desc`` reads from the flat, contiguous
    NumPy elements ``flat`` (at least ``desc.addressed_elements`` of them): a strided view,
    read-only, so a broadcast (stride 0) copies nothing."""
    strides = tuple(t * flat.itemsize for t in desc.layout_strides)
    return np.lib.stride_tricks.as_strided(flat, desc.sizes, strides, writeable=False)


def calc_buffer_tensor_size(
    data_type: DataType, sizes: Sequence[int], strides: Sequence[int] | None
) -> int:
    """DMLCalcBufferTensorSize: the minimum TotalTensorSizeInBytes of a buffer tensor.

    (last addressed element + 1) times the element size in bits, rounded up to whole bytes and
    then to a multiple of 4 bytes (UINT4 Sizes {5}: 20 bits, 3 bytes, 4). Unlike DirectML's
    helper, the arithmetic never wraps.
    """
    if strides is None:
        elements = math.prod(sizes)
    else:
        elements = sum((n - 1) * s for n, s in zip(sizes, strides)) + 1
    nbytes = (elements * data_type.bits + 7) // 8
    return (nbytes + 3) // 4 * 4


def pack_4bit(values: Any) -> np.ndarray:
    """DirectML's memory of a UINT4 / INT4 tensor: two elements per byte, element 0 in the low
    nibble of byte 0 (an odd count leaves the last high nibble 0). ``values``: the elements
    (``int4`` / ``uint4`` arrays, or any integers, of which the low 4 bits are kept).
    ``pack_4bit([1, 2, 3, 4, 5])`` is ``[0x21, 0x43, 0x05]``."""
    nibbles = np.asarray(values).reshape(-1).astype(np.int64) & 0xF
    if nibbles.size % 2:
        nibbles = np.append(nibbles, 0)
    return (nibbles[0::2] | (nibbles[1::2] << 4)).astype(np.uint8)


def unpack_4bit(packed: Any, count: int, data_type: Any) -> np.ndarray:
    """The first ``count`` elements of packed UINT4 / INT4 bytes (``pack_4bit``'s inverse), as
    a NumPy array of ``uint4`` / ``int4`` (``DataType.numpy_dtype``)."""
    data_type = DataType.parse(data_type, "data_type")
    if data_type.bits != 4:
        raise ValidationError(f"unpack_4bit takes UINT4 or INT4, got {data_type.name}")
    raw = np.asarray(packed, np.uint8).reshape(-1)
    nibbles = np.stack([raw & 0xF, raw >> 4], axis=-1).reshape(-1)[:count].astype(np.int16)
    if data_type.is_signed:
        nibbles = np.where(nibbles >= 8, nibbles - 16, nibbles)
    return nibbles.astype(data_type.numpy_dtype)


def buffer_dtype(data_type: DataType) -> np.dtype:
    """The dtype of a buffer-mode buffer of ``data_type`` elements: the element dtype, except
    for UINT4 / INT4, whose buffers hold DirectML's packed bytes (uint8, two elements a byte)."""
    return np.dtype(np.uint8) if data_type.bits == 4 else data_type.numpy_dtype


def buffer_length(data_type: DataType, elements: int) -> int:
    """Entries of a ``buffer_dtype`` buffer that hold ``elements`` elements (bytes for UINT4 /
    INT4: ``ceil(elements / 2)``)."""
    return (elements + 1) // 2 if data_type.bits == 4 else elements


def _check_rank(count: int) -> None:
    if not 1 <= count <= MAX_DIMENSIONS:
        raise ValidationError(
            f"TensorDesc.DimensionCount must be in [1, {MAX_DIMENSIONS}], got {count}"
        )


@dataclass(frozen=True)
class TensorDesc:
    """DML_BUFFER_TENSOR_DESC: a tensor's element type, logical sizes and memory layout.

    Args:
        data_type: a ``DataType`` (member, full DML name or suffix).
        sizes: 1 to 8 extents, each >= 1 and fitting in UINT32.
        strides: ``None`` (packed row-major) or one stride in elements per dimension; 0
            broadcasts, larger strides pad, permuted strides express other layouts.
        total_tensor_size_in_bytes: at least ``calc_buffer_tensor_size`` and a multiple of 4;
            ``None`` derives that minimum.
        guaranteed_base_offset_alignment: 0, or a power of two >= the element size.
        flags: ``TensorFlags`` (``NONE`` or ``OWNED_BY_DML``).
    """

    data_type: DataType
    sizes: tuple[int, ...]
    strides: tuple[int, ...] | None = None
    total_tensor_size_in_bytes: int | None = None
    guaranteed_base_offset_alignment: int = 0
    flags: TensorFlags = TensorFlags.NONE

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        data_type = DataType.parse(self.data_type, "TensorDesc.DataType")
        set_(self, "data_type", data_type)
        set_(self, "flags", TensorFlags.parse(self.flags, "TensorDesc.Flags"))
        # The rank first: an absurdly long Sizes is rejected without converting its entries.
        if isinstance(self.sizes, (list, tuple)):
            _check_rank(len(self.sizes))
        sizes = as_int_tuple(self.sizes, "TensorDesc.Sizes", minimum=1)
        _check_rank(len(sizes))
        set_(self, "sizes", sizes)
        strides = self.strides
        if strides is not None:
            strides = as_int_tuple(strides, "TensorDesc.Strides")
            if len(strides) != len(sizes):
                raise ValidationError(
                    f"TensorDesc.Strides must have one entry per dimension ({len(sizes)}), "
                    f"got {len(strides)}"
                )
            set_(self, "strides", strides)
        if math.prod(sizes) > UINT32_MAX:
            raise ValidationError(
                f"TensorDesc.Sizes describe {math.prod(sizes)} elements; a buffer tensor holds at "
                f"most {UINT32_MAX}"
            )
        if self.addressed_elements > UINT32_MAX:
            raise ValidationError(
                f"TensorDesc.Strides address element {self.addressed_elements - 1}; a buffer "
                f"tensor addresses at most {UINT32_MAX} elements"
            )
        minimum = calc_buffer_tensor_size(data_type, sizes, strides)
        total = self.total_tensor_size_in_bytes
        if total is None:
            total = minimum
        total = as_int(total, "TensorDesc.TotalTensorSizeInBytes", maximum=UINT64_MAX)
        if total < minimum:
            raise ValidationError(
                f"TensorDesc.TotalTensorSizeInBytes must be >= {minimum} "
                f"(DMLCalcBufferTensorSize), got {total}"
            )
        if total % 4:
            raise ValidationError(
                f"TensorDesc.TotalTensorSizeInBytes must be a multiple of 4, got {total}"
            )
        set_(self, "total_tensor_size_in_bytes", total)
        align = as_int(
            self.guaranteed_base_offset_alignment, "TensorDesc.GuaranteedBaseOffsetAlignment"
        )
        if align and (align & (align - 1) or align < data_type.size):
            raise ValidationError(
                "TensorDesc.GuaranteedBaseOffsetAlignment must be 0 or a power of two >= the "
                f"element size ({data_type.size}), got {align}"
            )
        set_(self, "guaranteed_base_offset_alignment", align)

    @property
    def rank(self) -> int:
        """DimensionCount."""
        return len(self.sizes)

    dimension_count = rank

    @property
    def element_count(self) -> int:
        """Number of logical elements (product of Sizes)."""
        return math.prod(self.sizes)

    @property
    def layout_strides(self) -> tuple[int, ...]:
        """The strides in effect: the given ones, or packed row-major when Strides is null."""
        return self.strides if self.strides is not None else packed_strides(self.sizes)

    @property
    def is_packed(self) -> bool:
        """True when the layout is plain row-major (Strides null or equal to the packed ones)."""
        return self.strides is None or self.strides == packed_strides(self.sizes)

    @property
    def addressed_elements(self) -> int:
        """Index of the last element the desc addresses, plus one: the minimum buffer length."""
        return sum((n - 1) * s for n, s in zip(self.sizes, self.layout_strides)) + 1

    @property
    def dtype(self):
        """The JAX/NumPy dtype of the elements (``int4`` / ``uint4`` for INT4 / UINT4)."""
        return self.data_type.numpy_dtype

    @property
    def buffer_dtype(self) -> np.dtype:
        """The dtype of a buffer-mode buffer bound to this tensor (uint8 bytes for 4-bit
        types, packed two elements a byte; ``dtype`` otherwise)."""
        return buffer_dtype(self.data_type)

    @property
    def buffer_elements(self) -> int:
        """The minimum length of that buffer: ``addressed_elements``, or the bytes holding
        them for the 4-bit types."""
        return buffer_length(self.data_type, self.addressed_elements)

    def like(self, **changes: Any) -> TensorDesc:
        """A copy with fields replaced; the total size is derived again unless given.

        A copy of another data type keeps the base offset alignment only where it is still one
        for the new element size (an INT8 input's alignment of 1 says nothing about the INT32
        output inferred from it: the copy has none, 0)."""
        changes.setdefault("total_tensor_size_in_bytes", None)
        new_type = changes.get("data_type")
        if new_type is not None and "guaranteed_base_offset_alignment" not in changes:
            size = DataType.parse(new_type, "TensorDesc.DataType").size
            if self.guaranteed_base_offset_alignment < size:
                changes["guaranteed_base_offset_alignment"] = 0
        if "sizes" in changes:
            changes.setdefault("strides", None)
        return dataclasses.replace(self, **changes)

    def __repr__(self) -> str:
        parts = [f"{self.data_type.name}", f"sizes={self.sizes}"]
        if self.strides is not None:
            parts.append(f"strides={self.strides}")
        if self.flags is not TensorFlags.NONE:
            parts.append(f"flags={self.flags.name}")
        return f"TensorDesc({', '.join(parts)})"


@dataclass(frozen=True)
class ScaleBias:
    """DML_SCALE_BIAS: an input transform g(x) = x * scale + bias applied before an operator.

    Both members are DML FLOATs (float32); they must be finite numbers.
    """

    scale: float
    bias: float

    def __post_init__(self) -> None:
        for name in ("scale", "bias"):
            where = f"ScaleBias.{name.capitalize()}"
            value = as_float(getattr(self, name), where)
            if not math.isfinite(value):
                raise ValidationError(f"{where} must be finite, got {value}")
            object.__setattr__(self, name, value)


@dataclass(frozen=True)
class Size2D:
    """DML_SIZE_2D: a width and a height, each a DML UINT."""

    width: int
    height: int

    def __post_init__(self) -> None:
        for name in ("width", "height"):
            object.__setattr__(
                self, name, as_int(getattr(self, name), f"Size2D.{name.capitalize()}")
            )
