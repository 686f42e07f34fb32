"""Data movement: SLICE, SLICE1, PADDING, PADDING1, CAST and REVERSE_SUBSEQUENCES.

SLICE and SLICE1 share one plan: per dimension a start, a step and a count with
``Output[c] = Input[start + step * c]``. Both lower to one ``lax.slice`` (positive steps), a
``lax.rev`` of the dimensions walked backwards and a broadcast for SLICE's step 0, which XLA
emits as one fused copy. PADDING and PADDING1 share one lowering: CONSTANT is ``lax.pad``; the
mirrored modes concatenate a few blocks, each a forward, reversed or repeated slice of the input
(found from the mode's index map), so the result is again one fused pass. CAST is one
``convert_element_type`` with DirectML's conversion rules made explicit (docs/semantics.md).
REVERSE_SUBSEQUENCES, whose lengths are data, is the one gather.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import jax.numpy as jnp
import numpy as np
from jax import lax

from ..enums import DataType, PaddingMode
from ..enums import FeatureLevel as L
from ..errors import Validator
from ..fields import (
    FLOAT,
    INT_ARRAY,
    UINT,
    UINT_ARRAY,
    OperatorDesc,
    ScalarUnion,
    attribute,
    count_of,
    enum_type,
    input_field,
    output_field,
)
from ..registry import Example, register
from ..support import DIMS1_8, DIMS4, F2, T8, T10, rows, types
from ..tensor import TensorDesc
from ._common import float_input
from .clip import convert_float_bound, convert_typed_bound

T11 = T10 | types("FLOAT64")
DIMS4_5 = (4, 5)


def _arrays_match_rank(v: Validator, d: Any, arrays: dict[str, tuple]) -> None:
    """Each per-dimension array (DML name -> values) holds one value per InputTensor dimension
    (DimensionCount), and the output has the input's DataType and DimensionCount."""
    x, y = d.input_tensor, d.output_tensor
    v.equal("OutputTensor.DataType", y.data_type, x.data_type, "InputTensor.DataType")
    v.equal("OutputTensor.DimensionCount", y.rank, x.rank, "InputTensor.DimensionCount")
    for name, values in arrays.items():
        v.check(
            name,
            len(values) == x.rank,
            f"must hold DimensionCount = InputTensor.DimensionCount ({x.rank}) values, "
            f"got {len(values)}",
        )


# --- SLICE / SLICE1 ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SliceOperatorDesc(OperatorDesc):
    """DML_SLICE_OPERATOR_DESC: ``Output[c] = Input[Offsets + Strides * c]`` (FL 1_0).

    Fields:
        input_tensor: the tensor sliced.
        output_tensor: same DataType and DimensionCount; its Sizes equal ``Sizes``.
        offsets: the first element read in each dimension.
        sizes: the count of elements copied per dimension (the output's Sizes).
        strides: the step between copied elements per dimension; 0 repeats the element at the
            offset (the formula read literally; docs/semantics.md).
        dimension_count: optional; the length of the three arrays and of both tensors' Sizes.

    Every element read lies inside the input: ``Offsets[i] + Strides[i] * (Sizes[i] - 1) <
    InputTensor.Sizes[i]``.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_SLICE"
    input_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    offsets: tuple[int, ...] = attribute(UINT_ARRAY)
    sizes: tuple[int, ...] = attribute(UINT_ARRAY)
    strides: tuple[int, ...] = attribute(UINT_ARRAY)
    dimension_count: int | None = count_of("offsets")

    def plan(self) -> tuple[tuple[int, int, int], ...]:
        """(start, step, count) per dimension."""
        return tuple(zip(self.offsets, self.strides, self.sizes))


@dataclass(frozen=True)
class Slice1OperatorDesc(OperatorDesc):
    """DML_SLICE1_OPERATOR_DESC: a strided copy out of an input window (FL 2_1).

    A negative stride walks its window from the end: the copy starts at
    ``InputWindowOffsets[i] + InputWindowSizes[i] - 1`` for a negative stride and at the offset
    otherwise, and ``Output[c] = Input[CopyStart + InputWindowStrides * c]``.

    Fields:
        input_tensor: the tensor sliced.
        output_tensor: same DataType and DimensionCount; each size in
            ``[1, 1 + (InputWindowSizes[i] - 1) // |InputWindowStrides[i]|]`` (it need not copy
            every element the window reaches).
        input_window_offsets: the window's first element per dimension.
        input_window_sizes: the window's extent per dimension (>= 1, and the window lies inside
            the input: ``offset + size <= InputTensor.Sizes[i]``).
        input_window_strides: nonzero steps; the sign picks the direction.
        dimension_count: optional; the length of the three arrays and of both tensors' Sizes.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_SLICE1"
    input_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    input_window_offsets: tuple[int, ...] = attribute(UINT_ARRAY)
    input_window_sizes: tuple[int, ...] = attribute(UINT_ARRAY)
    input_window_strides: tuple[int, ...] = attribute(INT_ARRAY)
    dimension_count: int | None = count_of("input_window_offsets")

    def plan(self) -> tuple[tuple[int, int, int], ...]:
        out = []
        for off, size, step, n in zip(
            self.input_window_offsets,
            self.input_window_sizes,
            self.input_window_strides,
            self.output_tensor.sizes,
        ):
            out.append((off + size - 1 if step < 0 else off, step, n))
        return tuple(out)


def infer_slice(d: Any) -> tuple[TensorDesc, ...]:
    if isinstance(d, SliceOperatorDesc):
        return (d.input_tensor.like(sizes=d.sizes),)
    return (d.input_tensor.like(sizes=d.output_tensor.sizes),)


def validate_slice(d: Any, v: Validator) -> None:
    x = d.input_tensor
    if isinstance(d, Slice1OperatorDesc):
        _arrays_match_rank(
            v,
            d,
            {
                "InputWindowOffsets": d.input_window_offsets,
                "InputWindowSizes": d.input_window_sizes,
                "InputWindowStrides": d.input_window_strides,
            },
        )
        for i, (off, size, step, n) in enumerate(
            zip(
                d.input_window_offsets,
                d.input_window_sizes,
                d.input_window_strides,
                d.output_tensor.sizes,
            )
        ):
            v.check(
                f"InputWindowSizes[{i}]",
                size >= 1,
                f"must be >= 1 (a window is never empty), got {size}",
            )
            v.check(
                f"InputWindowOffsets[{i}]",
                off + size <= x.sizes[i],
                f"+ InputWindowSizes[{i}] ({off} + {size}) must be <= InputTensor.Sizes[{i}] "
                f"({x.sizes[i]})",
            )
            v.check(f"InputWindowStrides[{i}]", step != 0, "must not be 0")
            most = 1 + (size - 1) // abs(step)
            v.check(
                f"OutputTensor.Sizes[{i}]",
                n <= most,
                f"must be <= 1 + (InputWindowSizes[{i}] - 1) / |InputWindowStrides[{i}]| = "
                f"{most} (the elements the window reaches), got {n}",
            )
        return
    _arrays_match_rank(v, d, {"Offsets": d.offsets, "Sizes": d.sizes, "Strides": d.strides})
    for i, (off, step, n) in enumerate(d.plan()):
        v.check(f"Sizes[{i}]", n >= 1, f"must be >= 1, got {n}")
        last = off + step * (n - 1)
        v.check(
            f"Offsets[{i}]",
            last < x.sizes[i],
            f"+ Strides[{i}] * (Sizes[{i}] - 1) = {last} reads past InputTensor.Sizes[{i}] "
            f"({x.sizes[i]})",
        )


def strided_take(x, plan: tuple[tuple[int, int, int], ...]):
    """``out[c] = x[start + step * c]`` per dimension for (start, step, count) in ``plan``.

    One static slice over the elements read, a reversal of the dimensions walked backwards and a
    broadcast of step-0 dimensions: XLA fuses the three into a single copy."""
    lo, hi, steps, backward, repeated = [], [], [], [], []
    for axis, (start, step, n) in enumerate(plan):
        first = start + min(step, 0) * (n - 1)  # the lowest index read
        lo.append(first)
        hi.append(first + abs(step) * (n - 1) + 1)
        steps.append(max(abs(step), 1))
        if step < 0:
            backward.append(axis)
        elif step == 0:
            repeated.append(axis)
    y = lax.slice(x, lo, hi, steps)
    if backward:
        y = lax.rev(y, backward)
    if repeated:
        shape = tuple(n for _, _, n in plan)
        y = lax.broadcast_in_dim(y, shape, tuple(range(x.ndim)))
    return y


def lower_slice(d: Any, x):
    return (strided_take(x, d.plan()),)


_PAGE_4X4 = list(range(1, 17))

register(
    SliceOperatorDesc,
    infer=infer_slice,
    validate=validate_slice,
    lower=lower_slice,
    support=rows(
        (L.FL_1_0, DIMS4_5, F2 | types("INT32", "INT16", "UINT32", "UINT16")),
        (L.FL_2_1, DIMS4_5, T8),
        (L.FL_3_0, DIMS1_8, T8),
        (L.FL_4_1, DIMS1_8, T11),
    ),
    example=Example(
        {
            "type": "DML_OPERATOR_SLICE",
            "desc": {
                "InputTensor": {"DataType": "FLOAT32", "Sizes": [1, 1, 4, 4]},
                "OutputTensor": {"DataType": "FLOAT32", "Sizes": [1, 1, 2, 2]},
                "DimensionCount": 4,
                "Offsets": [0, 0, 1, 0],
                "Sizes": [1, 1, 2, 2],
                "Strides": [1, 1, 2, 3],
            },
        },
        {"InputTensor": _PAGE_4X4},
        "every second row from row 1, every third column (5, 8, 13, 16)",
    ),
)
register(
    Slice1OperatorDesc,
    infer=infer_slice,
    validate=validate_slice,
    lower=lower_slice,
    support=rows(
        (L.FL_2_1, DIMS4_5, T8),
        (L.FL_3_0, DIMS1_8, T8),
        (L.FL_4_1, DIMS1_8, T11),
    ),
    example=Example(
        {
            "type": "DML_OPERATOR_SLICE1",
            "desc": {
                "InputTensor": {"DataType": "FLOAT32", "Sizes": [1, 1, 4, 4]},
                "OutputTensor": {"DataType": "FLOAT32", "Sizes": [1, 1, 2, 2]},
                "DimensionCount": 4,
                "InputWindowOffsets": [0, 0, 0, 1],
                "InputWindowSizes": [1, 1, 4, 3],
                "InputWindowStrides": [1, 1, -2, 2],
            },
        },
        {"InputTensor": _PAGE_4X4},
        "a window walked upwards by 2 rows and right by 2 columns (14, 16, 6, 8)",
    ),
)


# --- PADDING / PADDING1 -----------------------------------------------------------------------


@dataclass(frozen=True)
class PaddingOperatorDesc(OperatorDesc):
    """DML_PADDING_OPERATOR_DESC: the input surrounded by constant or mirrored values (FL 1_0).

    Fields:
        input_tensor: the tensor padded.
        output_tensor: same DataType and DimensionCount; Sizes[i] = InputTensor.Sizes[i] +
            StartPadding[i] + EndPadding[i].
        padding_mode: ``PaddingMode``: CONSTANT (PaddingValue), EDGE (the edge element),
            REFLECTION (mirrored about the edge element, which is not repeated), SYMMETRIC
            (mirrored including the edge; FL 3_0) or WRAP (periodic; FL 6_4). The mirrored modes
            fold again over earlier padding, so padding may exceed the input's size.
        padding_value: a DML FLOAT for CONSTANT, converted to the tensor type (integers truncate
            toward zero: 10.6 becomes 10; values beyond the type saturate); ignored otherwise.
        start_padding, end_padding: elements added before and after each dimension.
        dimension_count: optional; the length of both arrays and of both tensors' Sizes.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_PADDING"
    input_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    padding_mode: PaddingMode = attribute(enum_type(PaddingMode))
    padding_value: float = attribute(FLOAT)
    start_padding: tuple[int, ...] = attribute(UINT_ARRAY)
    end_padding: tuple[int, ...] = attribute(UINT_ARRAY)
    dimension_count: int | None = count_of("start_padding")

    def value(self) -> np.generic:
        return convert_float_bound(self.padding_value, self.output_tensor.data_type)


@dataclass(frozen=True)
class Padding1OperatorDesc(OperatorDesc):
    """DML_PADDING1_OPERATOR_DESC: PADDING with a typed PaddingValue (FL 5_0).

    Fields:
        input_tensor, output_tensor, padding_mode, start_padding, end_padding,
            dimension_count: as PADDING.
        padding_value_data_type: the type PaddingValue is read in; must equal
            OutputTensor.DataType.
        padding_value: a number read exactly in PaddingValueDataType (a DML_SCALAR_UNION; an
            integer type takes integers in its range); used by CONSTANT only.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_PADDING1"
    input_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    padding_mode: PaddingMode = attribute(enum_type(PaddingMode))
    padding_value_data_type: DataType = attribute(enum_type(DataType))
    padding_value: int | float = attribute(ScalarUnion("padding_value_data_type"))
    start_padding: tuple[int, ...] = attribute(UINT_ARRAY)
    end_padding: tuple[int, ...] = attribute(UINT_ARRAY)
    dimension_count: int | None = count_of("start_padding")

    def value(self) -> np.generic:
        return convert_typed_bound(
            self.padding_value,
            self.padding_value_data_type,
            f"{self.operator_type}: PaddingValue",
        )


# The feature level each mode needs (DirectML.h guards SYMMETRIC by 3_0 and WRAP by 6_4; the
# DirectML 1.15.0 release notes list PADDING and PADDING1 as accepting WRAP).
_MODE_LEVEL = {PaddingMode.SYMMETRIC: L.FL_3_0, PaddingMode.WRAP: L.FL_6_4}


def infer_padding(d: Any) -> tuple[TensorDesc, ...]:
    x = d.input_tensor
    sizes = tuple(s + a + b for s, a, b in zip(x.sizes, d.start_padding, d.end_padding))
    return (x.like(sizes=sizes),)


def validate_padding(d: Any, v: Validator) -> None:
    _arrays_match_rank(v, d, {"StartPadding": d.start_padding, "EndPadding": d.end_padding})
    needed = _MODE_LEVEL.get(d.padding_mode)
    if needed is not None and v.level is not None:
        v.check(
            "PaddingMode",
            v.level >= needed,
            f"{d.padding_mode.name} needs feature level {needed.label} or later; the target is "
            f"{v.level.label}",
        )
    if isinstance(d, Padding1OperatorDesc):
        v.equal(
            "PaddingValueDataType",
            d.padding_value_data_type,
            d.output_tensor.data_type,
            "OutputTensor.DataType",
        )
    d.value()  # a typed value the type cannot hold raises here


def source_index(mode: PaddingMode, n: int, i: int) -> int:
    """The input index (in [0, n)) that output position ``i`` (relative to the input's first
    element, negative in the start padding) copies, for the mirrored and periodic modes."""
    if mode is PaddingMode.EDGE:
        return min(max(i, 0), n - 1)
    if mode is PaddingMode.WRAP:
        return i % n
    if mode is PaddingMode.REFLECTION:
        if n == 1:
            return 0  # nothing to fold over: the one element repeats (docs/semantics.md)
        period = 2 * (n - 1)
        m = i % period
        return m if m < n else period - m
    period = 2 * n  # SYMMETRIC
    m = i % period
    return m if m < n else period - 1 - m


# More blocks than this (padding many times the input's size) pad one dimension at a time,
# each by one static gather.
_MAX_BLOCKS = 64


def _runs(index: list[int]) -> list[tuple[int, int, int]]:
    """``index`` cut into runs (first, step, count) with step +1, -1 or 0."""
    runs, j = [], 0
    while j < len(index):
        if j + 1 < len(index) and abs(index[j + 1] - index[j]) <= 1:
            step = index[j + 1] - index[j]
            k = j + 1
            while k + 1 < len(index) and index[k + 1] - index[k] == step:
                k += 1
            runs.append((index[j], step, k - j + 1))
            j = k + 1
        else:
            runs.append((index[j], 1, 1))
            j += 1
    return runs


def _mirrored(x, mode: PaddingMode, start: tuple[int, ...], end: tuple[int, ...]):
    """EDGE / REFLECTION / SYMMETRIC / WRAP padding.

    Along each dimension the output is a few runs of input indices, each ascending, descending
    or constant. The result is the nested concatenation of one block per combination of runs,
    each block a strided take straight from ``x``: no block reads another's result, so XLA
    fuses the whole into one pass."""
    index = [
        [source_index(mode, n, i) for i in range(-a, n + b)] for n, a, b in zip(x.shape, start, end)
    ]
    runs = [_runs(ix) for ix in index]
    if math.prod(len(r) for r in runs) > _MAX_BLOCKS:
        for axis, ix in enumerate(index):
            if len(runs[axis]) > 1:
                x = jnp.take(x, np.asarray(ix, np.int32), axis=axis)
        return x

    def block(axis: int, plan: tuple):
        if axis == x.ndim:
            return strided_take(x, plan)
        pieces = [block(axis + 1, (*plan, run)) for run in runs[axis]]
        return pieces[0] if len(pieces) == 1 else lax.concatenate(pieces, axis)

    return block(0, ())


def _border_runs(mode: PaddingMode, shape, start, end) -> list[tuple[int, int, tuple]]:
    """Per (dimension, first border position) the runs of padded-result indices it copies from:
    the start border, then the end border, of each dimension in turn."""
    out = []
    for axis, (n, a, b) in enumerate(zip(shape, start, end)):
        for first, positions in ((0, range(-a, 0)), (a + n, range(n, n + b))):
            runs = _runs([a + source_index(mode, n, i) for i in positions])
            if runs:
                out.append((axis, first, tuple(runs)))
    return out


def _border_copies(x, start: tuple[int, ...], end: tuple[int, ...], borders: list):
    """EDGE / REFLECTION / SYMMETRIC / WRAP padding as a constant pad whose borders are then
    overwritten, one dimension after another, by copies of whole hyperplanes of the result
    (one in-place update per run of ``_border_runs``). A border element lying in the padding of
    several dimensions is last written by the last of them, from a plane whose other borders are
    already final. The pad streams the input once at the copy's speed; the updates touch only
    the borders (the nested concatenation of ``_mirrored`` runs at 0.39 of the copy on the H200,
    benchmarks/RESULTS.md#operators)."""
    y = lax.pad(x, lax.full((), 0, x.dtype), [(a, b, 0) for a, b in zip(start, end)])
    for axis, at, runs in borders:
        for src, step, count in runs:
            plan = [(0, 1, size) for size in y.shape]
            plan[axis] = (src, step, count)
            y = lax.dynamic_update_slice_in_dim(y, strided_take(y, tuple(plan)), at, axis)
            at += count
    return y


# Border copies while the padding is at most this many runs of planes; the concatenation else.
_MAX_BORDER_RUNS = 16


def lower_padding(d: Any, x):
    if d.padding_mode is PaddingMode.CONSTANT:
        value = jnp.asarray(d.value(), x.dtype)
        config = [(a, b, 0) for a, b in zip(d.start_padding, d.end_padding)]
        return (lax.pad(x, value, config),)
    mode, start, end = d.padding_mode, d.start_padding, d.end_padding
    borders = _border_runs(mode, x.shape, start, end)
    if sum(len(runs) for _, _, runs in borders) <= _MAX_BORDER_RUNS:
        return (_border_copies(x, start, end, borders),)
    return (_mirrored(x, mode, start, end),)


def _padding_example(cls_name: str, extra: dict) -> Example:
    return Example(
        {
            "type": cls_name,
            "desc": {
                "InputTensor": {"DataType": "FLOAT32", "Sizes": [1, 1, 4, 4]},
                "OutputTensor": {"DataType": "FLOAT32", "Sizes": [1, 1, 8, 10]},
                **extra,
                "DimensionCount": 4,
                "StartPadding": [0, 0, 1, 2],
                "EndPadding": [0, 0, 3, 4],
            },
        },
        {"InputTensor": [1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6, 7, 8]},
        "a {1, 1, 4, 4} tensor padded with 9s: 1 row and 2 columns before, 3 and 4 after",
    )


_PAD_1_0 = rows(
    (L.FL_1_0, DIMS4_5, F2),
    (L.FL_2_1, DIMS4_5, T8),
    (L.FL_3_1, DIMS1_8, T8),
    (L.FL_5_0, DIMS1_8, T11),
)
register(
    PaddingOperatorDesc,
    infer=infer_padding,
    validate=validate_padding,
    lower=lower_padding,
    support=_PAD_1_0,
    example=_padding_example(
        "DML_OPERATOR_PADDING", {"PaddingMode": "DML_PADDING_MODE_CONSTANT", "PaddingValue": 9}
    ),
)
register(
    Padding1OperatorDesc,
    infer=infer_padding,
    validate=validate_padding,
    lower=lower_padding,
    support=rows((L.FL_5_0, DIMS1_8, T11)),
    example=_padding_example(
        "DML_OPERATOR_PADDING1",
        {"PaddingMode": "CONSTANT", "PaddingValueDataType": "FLOAT32", "PaddingValue": 9},
    ),
)


# --- CAST -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CastOperatorDesc(OperatorDesc):
    """DML_CAST_OPERATOR_DESC: each element converted to OutputTensor's data type (FL 1_0).

    Fields:
        input_tensor: any supported type.
        output_tensor: same DimensionCount and Sizes; any supported type.

    Conversions (the page is silent; docs/semantics.md): float to integer truncates toward zero
    and saturates at the type's range, NaN gives 0; integer to integer keeps the low bits (two's
    complement wrap, as C and ONNX); to a float type rounds to nearest even in one step,
    overflowing to infinity.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_CAST"
    input_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()


def infer_cast(d: CastOperatorDesc) -> tuple[TensorDesc, ...]:
    return (d.input_tensor.like(data_type=d.output_tensor.data_type),)


def validate_cast(d: CastOperatorDesc, v: Validator) -> None:
    x, y = d.input_tensor, d.output_tensor
    v.equal("OutputTensor.DimensionCount", y.rank, x.rank, "InputTensor.DimensionCount")
    v.equal("OutputTensor.Sizes", y.sizes, x.sizes, "InputTensor.Sizes")


def _float64_to_float16(x):
    """float64 -> float16 rounded once to nearest even.

    A plain conversion may go through float32 and round twice (XLA's CPU backend does). Rounding
    to float32 *to odd* first (truncate, then set the last bit when inexact) keeps the sticky
    information, and float32's 24 bits are enough (>= 2 * 11 + 2) for the second rounding to
    give the correctly rounded float16. The truncation is integer work on the bits: a float
    round trip to test exactness was optimised away on the GPU (found by the GPU test run).
    Outside float32's normal range the float16 result is 0, infinity or NaN whatever the
    rounding, so a plain conversion serves there."""
    bits = lax.bitcast_convert_type(x, jnp.uint64)
    exponent = (bits >> jnp.uint64(52)) & jnp.uint64(0x7FF)
    sticky = (bits & jnp.uint64((1 << 29) - 1)) != 0
    odd = (
        ((bits >> jnp.uint64(63)) << jnp.uint64(31))
        | ((exponent - jnp.uint64(1023 - 127)) << jnp.uint64(23))
        | ((bits >> jnp.uint64(29)) & jnp.uint64(0x7FFFFF))
        | sticky.astype(jnp.uint64)
    )
    normal = (exponent >= 1023 - 126) & (exponent <= 1023 + 127)
    r = jnp.where(
        normal,
        lax.bitcast_convert_type(odd.astype(jnp.uint32), jnp.float32),
        x.astype(jnp.float32),
    )
    return _rounded_to(r, np.dtype(jnp.float16)).astype(jnp.float16)


def _float_to_int(x, dtype: np.dtype):
    """Truncation toward zero, saturating at the type's range; NaN gives 0.

    The thresholds are powers of two (exact in every float type, or infinity in float16 where
    the type's range exceeds float16's), compared in the input's type."""
    info = np.iinfo(dtype)
    y = lax.convert_element_type(x, dtype)
    signed = info.min < 0
    with np.errstate(over="ignore"):
        top = np.asarray(2.0 ** (info.bits - signed)).astype(x.dtype)
        bottom = np.asarray(float(info.min) if signed else -1.0).astype(x.dtype)
    y = jnp.where(x >= top, jnp.asarray(info.max, dtype), y)
    y = jnp.where(x <= bottom, jnp.asarray(info.min, dtype), y)
    return jnp.where(jnp.isnan(x), jnp.zeros((), dtype), y)


def cast(x, dtype: np.dtype):
    """DirectML CAST of ``x`` to ``dtype`` (the rules in CastOperatorDesc's docstring)."""
    dtype = np.dtype(dtype)
    if x.dtype == dtype:
        return x
    if jnp.issubdtype(x.dtype, jnp.floating) and dtype.kind in "iu":
        return _float_to_int(x, dtype)
    if x.dtype == jnp.float64 and dtype == np.float16:
        return _float64_to_float16(x)
    if jnp.issubdtype(x.dtype, jnp.floating) and dtype in _NARROWER_FLOATS.get(x.dtype, ()):
        x = _rounded_to(x, dtype)
    # Integer to integer keeps the low bits; to float (and between floats) XLA rounds to
    # nearest even once. An integer bigger than float32 holds exactly is beyond float16's range
    # either way, so no double rounding reaches a float16 result.
    return lax.convert_element_type(x, dtype)


# The float conversions that round (to a type of fewer bits); ``_rounded_to`` rounds first.
_NARROWER_FLOATS = {
    np.dtype(jnp.float64): (np.dtype(jnp.float32),),
    np.dtype(jnp.float32): (np.dtype(jnp.float16),),
}


def _rounded_to(x, dtype):
    """``x`` (a float type) rounded to the values of the narrower float ``dtype``, still in
    ``x``'s type: nearest even, overflow to infinity, ``dtype``'s subnormals kept.

    A conversion to ``dtype`` then rounds nothing more; this is done first because XLA's GPU
    compiler drops a narrowing conversion that a widening one back reads (a float32 -> float16
    -> float32 round trip becomes the float32 value, unrounded and never overflowing: found by
    the GPU test run), and it leaves these operations be. ``reduce_precision`` flushes the
    narrower type's subnormals to zero, so below its smallest normal the value is rounded to a
    multiple of the subnormals' step instead (a scaling by powers of two, exact; those
    subnormals are normals of ``x``'s type where its exponent is wider)."""
    info = jnp.finfo(dtype)
    rounded = lax.reduce_precision(x, exponent_bits=info.nexp, mantissa_bits=info.nmant)
    if info.nexp == jnp.finfo(x.dtype).nexp:  # the same exponents: nothing flushed
        return rounded
    step = float(info.smallest_subnormal)
    steps = lax.round(x * (1 / step), lax.RoundingMethod.TO_NEAREST_EVEN) * step
    return jnp.where(jnp.abs(x) < float(info.smallest_normal), steps.astype(x.dtype), rounded)


def lower_cast(d: CastOperatorDesc, x):
    return (cast(x, d.output_tensor.dtype),)


_CAST_1_0 = types("FLOAT32", "FLOAT16", "INT16", "INT8", "UINT16", "UINT8")
_CAST_3_0 = T10
register(
    CastOperatorDesc,
    infer=infer_cast,
    validate=validate_cast,
    lower=lower_cast,
    support=rows(
        (L.FL_1_0, DIMS4, _CAST_1_0),
        (L.FL_3_0, DIMS4, _CAST_3_0),
        (L.FL_3_1, DIMS1_8, _CAST_3_0),
        (L.FL_4_1, DIMS1_8, T11),
    ),
    example=Example(
        {
            "type": "DML_OPERATOR_CAST",
            "desc": {
                "InputTensor": {"DataType": "FLOAT32", "Sizes": [6]},
                "OutputTensor": {"DataType": "INT8", "Sizes": [6]},
            },
        },
        {"InputTensor": [-2.7, -0.5, 0.5, 2.7, 300, -300]},
        "floats truncated toward zero into INT8, saturating at 127 and -128",
    ),
)


# --- REVERSE_SUBSEQUENCES ---------------------------------------------------------------------


@dataclass(frozen=True)
class ReverseSubsequencesOperatorDesc(OperatorDesc):
    """DML_REVERSE_SUBSEQUENCES_OPERATOR_DESC: reverses the first L elements of each line along
    Axis, L read per line from SequenceLengthsTensor (FL 2_1).

    Fields:
        input_tensor: the tensor whose lines are reversed.
        sequence_lengths_tensor: InputTensor's Sizes with 1 at Axis (UINT32; UINT64 from 5_0);
            a length above the axis size acts as the axis size (the page); 0 and 1 leave the
            line unchanged.
        output_tensor: InputTensor's DataType and Sizes.
        axis: the dimension reversed along, < InputTensor.DimensionCount.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_REVERSE_SUBSEQUENCES"
    input_tensor: TensorDesc = input_field()
    sequence_lengths_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    axis: int = attribute(UINT)


def infer_reverse(d: ReverseSubsequencesOperatorDesc) -> tuple[TensorDesc, ...]:
    return (d.input_tensor.like(),)


def validate_reverse(d: ReverseSubsequencesOperatorDesc, v: Validator) -> None:
    x, lengths = d.input_tensor, d.sequence_lengths_tensor
    v.axis("Axis", d.axis, x.rank)
    v.equal(
        "SequenceLengthsTensor.DimensionCount",
        lengths.rank,
        x.rank,
        "InputTensor.DimensionCount",
    )
    want = tuple(1 if i == d.axis else s for i, s in enumerate(x.sizes))
    v.equal("SequenceLengthsTensor.Sizes", lengths.sizes, want, "InputTensor.Sizes with 1 at Axis")


def lower_reverse(d: ReverseSubsequencesOperatorDesc, x, lengths):
    n = x.shape[d.axis]
    # Clamped in the lengths' own (unsigned) type first, so a huge UINT64 cannot wrap.
    count = jnp.minimum(lengths, jnp.asarray(n, lengths.dtype)).astype(jnp.int32)
    count = jnp.broadcast_to(count, x.shape)
    k = lax.broadcasted_iota(jnp.int32, x.shape, d.axis)
    source = jnp.where(k < count, count - 1 - k, k)
    return (jnp.take_along_axis(x, source, axis=d.axis),)


register(
    ReverseSubsequencesOperatorDesc,
    infer=infer_reverse,
    validate=validate_reverse,
    lower=lower_reverse,
    differentiable=float_input,
    support=rows(
        (L.FL_2_1, DIMS4, T8, T8, {"SequenceLengthsTensor": types("UINT32")}),
        (L.FL_3_0, DIMS4_5, T8, T8, {"SequenceLengthsTensor": types("UINT32")}),
        (L.FL_4_0, DIMS1_8, T8, T8, {"SequenceLengthsTensor": types("UINT32")}),
        (L.FL_5_0, DIMS1_8, T11, T11, {"SequenceLengthsTensor": types("UINT32", "UINT64")}),
    ),
    example=Example(
        {
            "type": "DML_OPERATOR_REVERSE_SUBSEQUENCES",
            "desc": {
                "InputTensor": {"DataType": "FLOAT32", "Sizes": [1, 1, 3, 4]},
                "SequenceLengthsTensor": {"DataType": "UINT32", "Sizes": [1, 1, 3, 1]},
                "OutputTensor": {"DataType": "FLOAT32", "Sizes": [1, 1, 3, 4]},
                "Axis": 3,
            },
        },
        {"InputTensor": list(range(1, 13)), "SequenceLengthsTensor": [2, 4, 3]},
        "rows of a 3x4 matrix reversed over their first 2, 4 and 3 elements",
    ),
)
