"""Pooling: AVERAGE_POOLING(1), LP_POOLING(1), MAX_POOLING(1, 2) and MAX_UNPOOLING.

Every pooling variant is one window plan (``window_plan``): WindowSize points spaced Dilations
apart (1 for the variants without Dilations) slide in steps of Strides over the {N, C, spatial...}
input padded by StartPadding / EndPadding; the output has
``(size + start + end - extent) // stride + 1`` positions per spatial dimension, extent being the
dilated window span ``Dilations * (WindowSize - 1) + 1``. DirectML has no ceil mode: OutputTensor
must have exactly these sizes (a caller wanting ceil-mode sizes adds end padding).

Conventions (docs/semantics.md, "Pooling"):
- MAX pooling pads with the type's lowest value (-inf for floats), so padding never wins; NaN
  propagates to the maximum. AVERAGE with IncludePadding FALSE divides by the number of window
  points on the input (0 such points give 0), with TRUE by prod(WindowSize). LP pooling is
  ``(sum |x|^P)^(1/P)`` over the window's input points. FLOAT16 sums run in float32, rounded once.
- MAX_POOLING1/2's OutputIndicesTensor holds the flat row-major index into the whole InputTensor
  (batch and channel included) of the first maximum in window order (equal values keep the
  first, -0.0 ties +0.0, NaN is the maximum and the first NaN wins), found by one reduce over
  (order key, index) pairs; a window with no input point (possible with padding and dilation)
  reports the index type's largest value, which MAX_UNPOOLING ignores as out of range.
- MAX pooling's derivative is MAX_POOLING_GRAD's rule in every lowering (``window_max``): each
  output's derivative goes to the element OutputIndicesTensor reports, whole, never split
  between equal values, and a window of padding only passes nothing back.
- MAX_UNPOOLING writes each input value at the flat output index it is given; out-of-range
  indices write nothing (the page's rule) and repeated ones keep the last input element in
  row-major order, deterministically (positions scattered with max, then gathered).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..enums import FeatureLevel as L
from ..errors import Validator
from ..fastpath import platform_choice
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
from ..support import F2, T10, rows, types
from ..tensor import TensorDesc
from ._common import float_input, in_float32, wide
from .reduce import order_keys

_DIMS = (4, 5)
_F2_I8 = F2 | types("INT8", "UINT8")
_INDEX32 = types("UINT32")
_INDEX = types("UINT32", "UINT64")


# ---------------------------------------------------------------------------------------------
# Descriptors


@dataclass(frozen=True)
class AveragePoolingOperatorDesc(OperatorDesc):
    """DML_AVERAGE_POOLING_OPERATOR_DESC: the mean over each sliding window (FL 1_0).

    Fields:
        input_tensor: {N, C, H, W} or {N, C, D, H, W}.
        output_tensor: {N, C, outputs...} with ``(size + start + end - window) // stride + 1``
            positions per spatial dimension; InputTensor's data type.
        strides, window_size: one value >= 1 per spatial dimension.
        start_padding, end_padding: padding elements before / after each spatial dimension.
        include_padding: TRUE divides by prod(WindowSize); FALSE by the window points that lie
            on the input (a window with none gives 0).
        dimension_count: optional; 2 or 3, the length of every array (InputTensor's rank - 2).
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_AVERAGE_POOLING"
    input_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    strides: tuple[int, ...] = attribute(UINT_ARRAY)
    window_size: tuple[int, ...] = attribute(UINT_ARRAY)
    start_padding: tuple[int, ...] = attribute(UINT_ARRAY)
    end_padding: tuple[int, ...] = attribute(UINT_ARRAY)
    include_padding: bool = attribute(BOOL)
    dimension_count: int | None = count_of("strides")


@dataclass(frozen=True)
class AveragePooling1OperatorDesc(OperatorDesc):
    """DML_AVERAGE_POOLING1_OPERATOR_DESC: AVERAGE_POOLING with window Dilations (FL 6_2).

    Fields as ``AveragePoolingOperatorDesc``, plus ``dilations`` (one value >= 1 per spatial
    dimension: the spacing of the window's points). The output sizes use the dilated window span
    ``Dilations * (WindowSize - 1) + 1``; IncludePadding TRUE still divides by prod(WindowSize).
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_AVERAGE_POOLING1"
    input_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    strides: tuple[int, ...] = attribute(UINT_ARRAY)
    window_size: tuple[int, ...] = attribute(UINT_ARRAY)
    start_padding: tuple[int, ...] = attribute(UINT_ARRAY)
    end_padding: tuple[int, ...] = attribute(UINT_ARRAY)
    dilations: tuple[int, ...] = attribute(UINT_ARRAY)
    include_padding: bool = attribute(BOOL)
    dimension_count: int | None = count_of("strides")


@dataclass(frozen=True)
class LpPoolingOperatorDesc(OperatorDesc):
    """DML_LP_POOLING_OPERATOR_DESC: ``(sum |x|^P)^(1/P)`` over each sliding window (FL 1_0).

    Fields as ``AveragePoolingOperatorDesc`` without IncludePadding (padding adds nothing), plus
    ``p``: the norm's order, >= 1 (1 and 2 are the L1 and L2 norms).
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_LP_POOLING"
    input_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    strides: tuple[int, ...] = attribute(UINT_ARRAY)
    window_size: tuple[int, ...] = attribute(UINT_ARRAY)
    start_padding: tuple[int, ...] = attribute(UINT_ARRAY)
    end_padding: tuple[int, ...] = attribute(UINT_ARRAY)
    p: int = attribute(UINT)
    dimension_count: int | None = count_of("strides")


@dataclass(frozen=True)
class LpPooling1OperatorDesc(OperatorDesc):
    """DML_LP_POOLING1_OPERATOR_DESC: LP_POOLING with window Dilations (FL 6_2).

    Fields as ``LpPoolingOperatorDesc``, plus ``dilations`` (one value >= 1 per spatial
    dimension), before P as in the struct.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_LP_POOLING1"
    input_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    strides: tuple[int, ...] = attribute(UINT_ARRAY)
    window_size: tuple[int, ...] = attribute(UINT_ARRAY)
    start_padding: tuple[int, ...] = attribute(UINT_ARRAY)
    end_padding: tuple[int, ...] = attribute(UINT_ARRAY)
    dilations: tuple[int, ...] = attribute(UINT_ARRAY)
    p: int = attribute(UINT)
    dimension_count: int | None = count_of("strides")


@dataclass(frozen=True)
class MaxPoolingOperatorDesc(OperatorDesc):
    """DML_MAX_POOLING_OPERATOR_DESC: the maximum over each sliding window (FL 1_0).

    Fields as ``AveragePoolingOperatorDesc`` without IncludePadding; padding never wins (it
    holds the type's lowest value) and NaN is the maximum.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_MAX_POOLING"
    input_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    strides: tuple[int, ...] = attribute(UINT_ARRAY)
    window_size: tuple[int, ...] = attribute(UINT_ARRAY)
    start_padding: tuple[int, ...] = attribute(UINT_ARRAY)
    end_padding: tuple[int, ...] = attribute(UINT_ARRAY)
    dimension_count: int | None = count_of("strides")


@dataclass(frozen=True)
class MaxPooling1OperatorDesc(OperatorDesc):
    """DML_MAX_POOLING1_OPERATOR_DESC: MAX_POOLING that can also write where each maximum came
    from (FL 2_0).

    Fields as ``MaxPoolingOperatorDesc``, plus ``output_indices_tensor``: optional, OutputTensor's
    sizes, UINT32 (UINT64 from 5_0): the flat row-major index into the whole InputTensor of the
    first maximum of each window (ties keep the first in window order; NaN is the maximum).
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_MAX_POOLING1"
    input_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    output_indices_tensor: TensorDesc | None = output_field(optional=True)
    strides: tuple[int, ...] = attribute(UINT_ARRAY)
    window_size: tuple[int, ...] = attribute(UINT_ARRAY)
    start_padding: tuple[int, ...] = attribute(UINT_ARRAY)
    end_padding: tuple[int, ...] = attribute(UINT_ARRAY)
    dimension_count: int | None = count_of("strides")


@dataclass(frozen=True)
class MaxPooling2OperatorDesc(OperatorDesc):
    """DML_MAX_POOLING2_OPERATOR_DESC: MAX_POOLING1 with window Dilations (FL 2_1).

    Fields as ``MaxPooling1OperatorDesc``, plus ``dilations`` (one value >= 1 per spatial
    dimension; the output sizes use the dilated window span).
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_MAX_POOLING2"
    input_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    output_indices_tensor: TensorDesc | None = output_field(optional=True)
    strides: tuple[int, ...] = attribute(UINT_ARRAY)
    window_size: tuple[int, ...] = attribute(UINT_ARRAY)
    start_padding: tuple[int, ...] = attribute(UINT_ARRAY)
    end_padding: tuple[int, ...] = attribute(UINT_ARRAY)
    dilations: tuple[int, ...] = attribute(UINT_ARRAY)
    dimension_count: int | None = count_of("strides")


@dataclass(frozen=True)
class MaxUnpoolingOperatorDesc(OperatorDesc):
    """DML_MAX_UNPOOLING_OPERATOR_DESC: zeros, then each input value written at the flat output
    index IndicesTensor gives it: the inverse of MAX_POOLING1's indices (FL 2_0, the level of
    directml.h; the page's tables start at 3_0 with the same contents).

    Fields:
        input_tensor: 4-D values (the OutputTensor of a max pooling).
        indices_tensor: InputTensor's sizes, UINT32 (UINT64 from 5_0): flat row-major indices
            into the whole OutputTensor. Out-of-range ones write nothing; of repeated ones the
            last input element in row-major order wins.
        output_tensor: 4-D, InputTensor's data type; its sizes are the caller's choice.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_MAX_UNPOOLING"
    input_tensor: TensorDesc = input_field()
    indices_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()


_WINDOWED = (
    AveragePoolingOperatorDesc,
    AveragePooling1OperatorDesc,
    LpPoolingOperatorDesc,
    LpPooling1OperatorDesc,
    MaxPoolingOperatorDesc,
    MaxPooling1OperatorDesc,
    MaxPooling2OperatorDesc,
)


# ---------------------------------------------------------------------------------------------
# The window plan, shared by every variant


class WindowPlan(NamedTuple):
    """A pooling window over the spatial dimensions (static; all tuples of ints)."""

    window: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    start: tuple[int, ...]
    end: tuple[int, ...]
    spatial: tuple[int, ...]  # the input's spatial sizes

    @property
    def extents(self) -> tuple[int, ...]:
        """The dilated window span per dimension."""
        return tuple(d * (w - 1) + 1 for w, d in zip(self.window, self.dilations))

    @property
    def outputs(self) -> tuple[int, ...]:
        """Output positions per dimension (DirectML's floor rule; < 1 for an invalid desc)."""
        return tuple(
            (size + s + e - x) // step + 1
            for size, s, e, x, step in zip(
                self.spatial, self.start, self.end, self.extents, self.strides
            )
        )

    def counts(self, i: int) -> np.ndarray:
        """Per output position of dimension ``i``: how many window points lie on the input."""
        o = np.arange(self.outputs[i])[:, None]
        k = np.arange(self.window[i])[None, :]
        p = o * self.strides[i] - self.start[i] + k * self.dilations[i]
        return ((p >= 0) & (p < self.spatial[i])).sum(axis=1)

    def lax_args(self) -> dict:
        """reduce_window's window arguments over {N, C, spatial...}."""
        return {
            "window_dimensions": (1, 1) + self.window,
            "window_strides": (1, 1) + self.strides,
            "padding": ((0, 0), (0, 0)) + tuple(zip(self.start, self.end)),
            "window_dilation": (1, 1) + self.dilations,
        }


def window_plan(d: Any, pooled: TensorDesc | None = None) -> WindowPlan:
    """The window of any pooling description over ``pooled``, the {N, C, spatial...} tensor
    being pooled (InputTensor by default; the gradient operators pass the tensor that stands
    for the forward input)."""
    n = len(d.strides)
    pooled = d.input_tensor if pooled is None else pooled
    return WindowPlan(
        tuple(d.window_size),
        tuple(d.strides),
        tuple(getattr(d, "dilations", (1,) * n)),
        tuple(d.start_padding),
        tuple(d.end_padding),
        tuple(pooled.sizes[2:]),
    )


def _arrays(d: Any) -> tuple[str, ...]:
    names = ("Strides", "WindowSize", "StartPadding", "EndPadding")
    return names + (("Dilations",) if hasattr(d, "dilations") else ())


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name).lstrip("_")


def _indices(d: Any) -> TensorDesc | None:
    return getattr(d, "output_indices_tensor", None)


def infer_pooling(d: Any) -> tuple[TensorDesc, ...]:
    x = d.input_tensor
    sizes = tuple(x.sizes[:2]) + window_plan(d).outputs
    out = (x.like(sizes=sizes),)
    indices = _indices(d)
    if indices is not None:
        out += (indices.like(sizes=sizes),)
    return out


def validate_window(d: Any, v: Validator, path: str, pooled: TensorDesc) -> None:
    """The window members of any pooling description (forward or gradient) over ``pooled``,
    the {N, C, spatial...} tensor at DML path ``path`` that the window slides over."""
    n = len(d.strides)
    v.check("DimensionCount", n in (2, 3), f"must be 2 or 3 (spatial dimensions), got {n}")
    for name in _arrays(d)[1:]:
        values = getattr(d, _snake(name))
        v.check(name, len(values) == n, f"must hold DimensionCount ({n}) values, got {len(values)}")
    for name in ("Strides", "WindowSize", "Dilations"):
        for i, value in enumerate(getattr(d, _snake(name), ())):
            v.check(f"{name}[{i}]", value >= 1, f"must be >= 1, got {value}")
    v.check(
        f"{path}.DimensionCount",
        pooled.rank == n + 2,
        f"must be DimensionCount + 2 = {n + 2} ({{N, C, spatial...}}), got {pooled.rank}",
    )
    plan = window_plan(d, pooled)
    for i, (size, extent) in enumerate(zip(plan.spatial, plan.extents)):
        padded = size + plan.start[i] + plan.end[i]
        span = (
            f"Dilations[{i}] * (WindowSize[{i}] - 1) + 1 = {extent}"
            if hasattr(d, "dilations")
            else f"WindowSize[{i}] = {extent}"
        )
        v.check(
            f"{path}.Sizes[{i + 2}]",
            padded >= extent,
            f"plus StartPadding[{i}] and EndPadding[{i}] ({padded}) must hold the window ({span})",
        )


def validate_pooling(d: Any, v: Validator) -> None:
    validate_window(d, v, "InputTensor", d.input_tensor)
    if hasattr(d, "p"):
        v.check("P", d.p >= 1, f"must be >= 1, got {d.p}")
    v.outputs_match(d.output_slots(), infer_pooling(d))


# ---------------------------------------------------------------------------------------------
# Lowerings


def _lowest(dtype) -> Any:
    if jnp.issubdtype(dtype, jnp.floating):
        return -np.inf
    return np.iinfo(dtype).min


# Windows of at most this many points that overlap (or are dilated) are lowered as one
# element-wise pass over strided slices of the padded input instead of reduce_window: XLA's GPU
# reduce_window reads an overlapping window slowly (3x3 stride 1 max: 0.39 of the copy on the
# H200, benchmarks/RESULTS.md#operators), while the slices fuse into one loop over the output.
# (MAX pooling on the CPU takes reduce_window whatever the window: ``window_max``.)
SLICE_WINDOW_POINTS = 32


def _by_slices(plan: WindowPlan) -> bool:
    overlapping = any(s < x for s, x in zip(plan.strides, plan.extents))
    dilated = any(d > 1 for d in plan.dilations)
    return (overlapping or dilated) and math.prod(plan.window) <= SLICE_WINDOW_POINTS


def nested_sum(terms: list, window: tuple[int, ...]):
    """The sum of a window's row-major ``terms``, one dimension at a time: each row of the last
    window dimension summed left to right, then those sums along the next dimension, and so on
    (3x3: ``((p00 + p01) + p02) + ((p10 + p11) + p12) + ...``, the row sums added in order).
    The CUDA pooling kernel keeps the row sums that consecutive output rows share and adds
    them in this order, so both lowerings agree bit for bit."""
    level = list(terms)
    for w in reversed(window):
        sums = []
        for i in range(0, len(level), w):
            total = level[i]
            for t in level[i + 1 : i + w]:
                total = total + t
            sums.append(total)
        level = sums
    (total,) = level
    return total


def window_sum(plan: WindowPlan, a):
    if _by_slices(plan):
        return nested_sum(list(window_points(plan, a, 0)), plan.window)
    # A NumPy init value (concrete under jit) lets jax recognise its summing window reducer,
    # which has a transpose (a traced one would give the generic, non-differentiable one).
    return lax.reduce_window(a, np.zeros((), a.dtype), lax.add, **plan.lax_args())


def average_divisor(plan: WindowPlan, include_padding: bool) -> np.ndarray | float:
    """prod(WindowSize), or the count of window points on the input per output position: the
    product of per-dimension counts (static, broadcast over N and C); 0 counts become 1 (their
    sums are 0)."""
    full = math.prod(plan.window)
    counts = [plan.counts(i) for i in range(len(plan.window))]
    if include_padding or all((c == w).all() for c, w in zip(counts, plan.window)):
        return float(full)
    total = counts[0].reshape((-1,) + (1,) * (len(counts) - 1))
    for i, c in enumerate(counts[1:], 1):
        total = total * c.reshape((1,) * i + (-1,) + (1,) * (len(counts) - 1 - i))
    return np.maximum(total, 1).astype(np.float64)


def average_pool(plan: WindowPlan, x, include_padding: bool):
    """AVERAGE pooling's values (FLOAT16 summed in float32 and rounded once)."""
    divisor = average_divisor(plan, include_padding)
    return in_float32(lambda w: window_sum(plan, w) / jnp.asarray(divisor, w.dtype), x)


def lower_average_pooling(d: Any, x):
    return (average_pool(window_plan(d), x, d.include_padding),)


def lower_lp_pooling(d: Any, x):
    plan = window_plan(d)
    a = lax.abs(wide(x))
    if d.p == 1:
        y = window_sum(plan, a)
    elif d.p == 2:
        y = lax.sqrt(window_sum(plan, a * a))
    else:
        y = lax.pow(window_sum(plan, lax.integer_pow(a, d.p)), jnp.asarray(1 / d.p, a.dtype))
    return (y.astype(x.dtype),)


def window_max(plan: WindowPlan, x):
    """MAX pooling's values: off the CPU one element-wise maximum over strided slices of the
    padded input for small overlapping or dilated windows (``_by_slices``), else (and on the
    CPU always) one reduce_window (lax.max from the type's lowest value, so padding never wins;
    NaN propagates, XLA's max; the maxima are the same either way). On the CPU XLA fused the
    producers of a padded input into the pad, evaluating them element by element: a static QDQ
    ResNet-50's stem quantizers in front of its 3x3/2 max pooling took 7 of the network's 55 ms
    at batch 1 on two cores, 48 with reduce_window; ONNX's Inception v1 37 -> 31-36 ms, the
    other light models within the spread (benchmarks/experiments/README.md).

    The derivative follows MAX_POOLING_GRAD in both forms: each output's tangent is the input
    tangent at the first maximum of its window in window order (the element
    OutputIndicesTensor reports: -0.0 ties +0.0, NaN is the maximum and the first NaN wins),
    never split between equal values (jax's own rules split ties, or pick any of them); a
    window of padding only has tangent 0."""
    lowest = np.array(_lowest(x.dtype), x.dtype)

    def forward(x):
        def whole(x):
            return lax.reduce_window(x, lowest, lax.max, **plan.lax_args())

        if not _by_slices(plan):
            return whole(x)

        def slices(x):
            out = None
            for slice_ in window_points(plan, x, lowest):
                out = slice_ if out is None else lax.max(out, slice_)
            return out

        return platform_choice(x, cpu=whole, default=slices)

    @jax.custom_jvp
    def pooled_max(x):
        return forward(x)

    @pooled_max.defjvp
    def pooled_max_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        count = math.prod(x.shape)
        index_type = jnp.int32 if count < np.iinfo(np.int32).max else jnp.int64
        # A window of padding only reports the index type's largest value: out of range, so the
        # gather fills 0 there (and its transpose, the VJP, drops it).
        found = _first_max_indices(plan, x, index_type)
        flat = lax.reshape(t, (count,))
        return forward(x), jnp.take(flat, found, mode="fill", fill_value=0)

    return pooled_max(x)


def window_points(plan: WindowPlan, x, value):
    """Per window point (row-major), the strided slice of ``x`` padded with ``value`` (a number
    or a traced scalar) that the point reads for every output position: {N, C, outputs...}
    each. Sliding-window operators written as element-wise work over these (pooling, integer
    convolution) fuse into one pass."""
    config = [(0, 0, 0)] * 2 + [(s, e, 0) for s, e in zip(plan.start, plan.end)]
    padded = lax.pad(x, jnp.asarray(value, x.dtype), config)
    n, c = padded.shape[:2]
    for point in itertools.product(*(range(w) for w in plan.window)):
        start = [k * d for k, d in zip(point, plan.dilations)]
        limit = [s + (o - 1) * step + 1 for s, o, step in zip(start, plan.outputs, plan.strides)]
        yield lax.slice(padded, (0, 0, *start), (n, c, *limit), (1, 1, *plan.strides))


def _first_max_indices(plan: WindowPlan, x, index_dtype):
    """The flat input index of each window's first maximum: one variadic reduce_window over
    (key, index) pairs that keeps the larger key, and of equal keys the smaller index. Keys are
    ``order_keys`` (floats as ordered integers: -0.0 == +0.0, NaN above +inf), so the pick does
    not depend on the reduction order. Padding holds the lowest key and the largest index, so an
    input element always beats it, and a window of padding only reports that largest index."""
    keys = order_keys(x, largest=True)
    count = math.prod(x.shape)
    index = lax.reshape(lax.iota(index_dtype, count), x.shape)
    key_init = jnp.asarray(np.iinfo(keys.dtype).min, keys.dtype)
    none = jnp.asarray(np.iinfo(index_dtype).max, index_dtype)

    def pick(a, b):
        (ka, ia), (kb, ib) = a, b
        take_b = (kb > ka) | ((kb == ka) & (ib < ia))
        return lax.select(take_b, kb, ka), lax.select(take_b, ib, ia)

    _, found = lax.reduce_window((keys, index), (key_init, none), pick, **plan.lax_args())
    return found


def lower_max_pooling(d: Any, x):
    plan = window_plan(d)
    out = (window_max(plan, x),)
    indices = _indices(d)
    if indices is not None:
        out += (_first_max_indices(plan, x, indices.dtype),)
    return out


# ---------------------------------------------------------------------------------------------
# MAX_UNPOOLING


def infer_max_unpooling(d: MaxUnpoolingOperatorDesc) -> tuple[TensorDesc, ...]:
    return (d.output_tensor.like(data_type=d.input_tensor.data_type),)


def validate_max_unpooling(d: MaxUnpoolingOperatorDesc, v: Validator) -> None:
    v.same("sizes", [("IndicesTensor", d.indices_tensor)], ("InputTensor", d.input_tensor))
    v.same("rank", [("OutputTensor", d.output_tensor)], ("InputTensor", d.input_tensor))
    v.same("data_type", [("OutputTensor", d.output_tensor)], ("InputTensor", d.input_tensor))


def lower_max_unpooling(d: MaxUnpoolingOperatorDesc, x, idx):
    sizes = d.output_tensor.sizes
    size, count = math.prod(sizes), math.prod(x.shape)
    flat_idx = lax.reshape(idx, (count,))
    # Range judged in the index type (a UINT64 2**32 is out of range, not 0); out-of-range
    # indices go to ``size``, which the scatter drops.
    target_type = jnp.int32 if size < 2**31 - 1 else jnp.int64
    in_range = flat_idx < jnp.asarray(size, flat_idx.dtype)
    target = jnp.where(in_range, flat_idx, jnp.asarray(size, flat_idx.dtype)).astype(target_type)
    # Repeated indices: the last input element (largest 1-based position) wins on every backend.
    pos_type = jnp.int32 if count < 2**31 - 1 else jnp.int64
    positions = lax.iota(pos_type, count) + jnp.asarray(1, pos_type)
    winner = jnp.zeros((size,), pos_type).at[target].max(positions, mode="drop")
    taken = jnp.take(lax.reshape(x, (count,)), jnp.maximum(winner - 1, 0), axis=0)
    out = jnp.where(winner > 0, taken, jnp.zeros((), x.dtype))
    return (lax.reshape(out, tuple(sizes)),)


# ---------------------------------------------------------------------------------------------
# Examples, registration


def _window_json(dilations: bool, **extra) -> dict:
    desc = {
        "DimensionCount": 2,
        "Strides": [1, 1],
        "WindowSize": [2, 2],
        "StartPadding": [0, 0],
        "EndPadding": [0, 0],
    }
    if dilations:
        desc["Dilations"] = [1, 1]
    return {**desc, **extra}


def _example(cls: type) -> Example:
    """A 2x2 window at stride 1 over a 3x3 image (MAX_UNPOOLING: the indices of the maxima)."""
    name = cls.operator_type
    tensor = {"DataType": "FLOAT32", "Sizes": [1, 1, 3, 3]}
    pooled = {"DataType": "FLOAT32", "Sizes": [1, 1, 2, 2]}
    image = [1, 5, 2, 4, 3, 9, 8, 6, 7]
    if cls is MaxUnpoolingOperatorDesc:
        desc = {
            "InputTensor": pooled,
            "IndicesTensor": {"DataType": "UINT32", "Sizes": [1, 1, 2, 2]},
            "OutputTensor": tensor,
        }
        inputs = {"InputTensor": [5, 9, 8, 9], "IndicesTensor": [1, 5, 6, 5]}
        note = "the maxima of a 2x2 max pooling put back at their indices, zeros elsewhere"
        return Example({"type": name, "desc": desc}, inputs, note)
    desc = {"InputTensor": tensor, "OutputTensor": pooled}
    if cls in (MaxPooling1OperatorDesc, MaxPooling2OperatorDesc):
        desc["OutputIndicesTensor"] = {"DataType": "UINT32", "Sizes": [1, 1, 2, 2]}
    desc.update(_window_json(hasattr(cls, "dilations")))
    if cls in (AveragePoolingOperatorDesc, AveragePooling1OperatorDesc):
        desc.update({"StartPadding": [1, 1], "IncludePadding": False})
        desc["OutputTensor"] = tensor
        note = "2x2 means over a 3x3 image padded by 1 in front, padding not counted"
    elif cls in (LpPoolingOperatorDesc, LpPooling1OperatorDesc):
        desc["P"] = 2
        note = "the L2 norm of each 2x2 window"
    else:
        note = "the maximum of each 2x2 window" + (
            " and its flat index" if "OutputIndicesTensor" in desc else ""
        )
    return Example({"type": name, "desc": desc}, {"InputTensor": image}, note)


_MAX_ROWS = rows(
    (L.FL_1_0, _DIMS, F2),
    (L.FL_3_0, _DIMS, _F2_I8),
    (L.FL_5_0, _DIMS, T10),
)


def _max_rows_with_indices(first: L):
    return rows(
        (first, _DIMS, F2, F2, {"OutputIndicesTensor": _INDEX32}),
        (L.FL_3_0, _DIMS, _F2_I8, _F2_I8, {"OutputIndicesTensor": _INDEX32}),
        (L.FL_5_0, _DIMS, T10, T10, {"OutputIndicesTensor": _INDEX}),
    )


for _cls, _lower, _support in (
    (AveragePoolingOperatorDesc, lower_average_pooling, rows((L.FL_1_0, _DIMS, F2))),
    (AveragePooling1OperatorDesc, lower_average_pooling, rows((L.FL_6_2, _DIMS, F2))),
    (LpPoolingOperatorDesc, lower_lp_pooling, rows((L.FL_1_0, _DIMS, F2))),
    (LpPooling1OperatorDesc, lower_lp_pooling, rows((L.FL_6_2, _DIMS, F2))),
    (MaxPoolingOperatorDesc, lower_max_pooling, _MAX_ROWS),
    (MaxPooling1OperatorDesc, lower_max_pooling, _max_rows_with_indices(L.FL_2_0)),
    (MaxPooling2OperatorDesc, lower_max_pooling, _max_rows_with_indices(L.FL_2_1)),
):
    register(
        _cls,
        infer=infer_pooling,
        validate=validate_pooling,
        lower=_lower,
        support=_support,
        differentiable=float_input,
        example=_example(_cls),
    )

register(
    MaxUnpoolingOperatorDesc,
    infer=infer_max_unpooling,
    validate=validate_max_unpooling,
    lower=lower_max_unpooling,
    support=rows(
        (L.FL_2_0, (4,), F2, F2, {"IndicesTensor": _INDEX32}),
        (L.FL_5_0, (4,), T10, T10, {"IndicesTensor": _INDEX}),
    ),
    differentiable=float_input,
    example=_example(MaxUnpoolingOperatorDesc),
)
