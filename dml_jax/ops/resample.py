"""Resampling: DML_OPERATOR_UPSAMPLE_2D, RESAMPLE, RESAMPLE1, RESAMPLE2 and RESAMPLE3.

Every variant maps an output coordinate o along dimension i to an input coordinate by the pages'
relation ``output = (input + InputPixelOffsets[i]) * Scales[i] + OutputPixelOffsets[i]``, read
backwards: ``x = (o - OutputPixelOffsets[i]) / Scales[i] - InputPixelOffsets[i]``. RESAMPLE uses
the pixel centres (offsets 0.5 and -0.5); UPSAMPLE_2D is RESAMPLE with integer scales on the
last two dimensions.

- NEAREST_NEIGHBOR reads input ``floor(x + 0.5)`` (halves round up) for UPSAMPLE_2D, RESAMPLE
  and RESAMPLE1; RESAMPLE2/3 round by RoundingDirection: DECREASING ``floor(x)``, INCREASING
  ``ceil(x)``. The index is clamped to the dimension.
- LINEAR weighs inputs ``floor(x)`` and ``floor(x) + 1`` by ``1 - frac`` and ``frac``; indices
  past an edge read the edge element ("the output edges are clamped"). RESAMPLE3's Antialiased
  widens the triangle filter by 1 / Scale where Scale < 1 (weights ``max(0, 1 - |i - x| *
  Scale)`` normalised to sum 1, ONNX Resize's antialias), so every input contributes.

The coordinates depend only on the descriptor, so ``plan_axis`` turns each dimension into a
static table of input indices and weights in NumPy (float64) at trace time. The lowering applies
the tables dimension by dimension: one static gather for nearest neighbour (a broadcast and a
reshape when it merely repeats each element), gathers and a weighted sum for linear. FLOAT16 is
weighted in float32 and rounded once at the end; INT8/UINT8 likewise, rounded to nearest even.
See docs/semantics.md, "Resampling".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import jax.numpy as jnp
import numpy as np
from jax import lax

from ..enums import AxisDirection, InterpolationMode
from ..enums import FeatureLevel as L
from ..errors import UINT32_MAX, Validator
from ..fields import (
    BOOL,
    FLOAT_ARRAY,
    SIZE_2D,
    OperatorDesc,
    attribute,
    count_of,
    enum_type,
    input_field,
    output_field,
)
from ..registry import Example, register
from ..support import DIMS4, DIMS4_5, F2, rows, types
from ..tensor import Size2D, TensorDesc

NEAREST, LINEAR = InterpolationMode.NEAREST_NEIGHBOR, InterpolationMode.LINEAR
F2_I8 = F2 | types("INT8", "UINT8")
DIMS1_4 = (1, 2, 3, 4)


@dataclass(frozen=True)
class Upsample2DOperatorDesc(OperatorDesc):
    """DML_UPSAMPLE_2D_OPERATOR_DESC: enlarges the last two dimensions (height, width) of a 4-D
    {N, C, H, W} or 5-D {N, C, D, H, W} tensor by integer factors (FL 1_0).

    Fields:
        input_tensor: the image, 4 or 5 dimensions.
        output_tensor: InputTensor's data type and rank, sizes equal except
            ``H * ScaleSize.Height`` and ``W * ScaleSize.Width``.
        scale_size: ``Size2D(width, height)``, each > 0 and its product with the input extent
            within UINT32.
        interpolation_mode: NEAREST_NEIGHBOR (each input repeated) or LINEAR (bilinear over
            pixel centres, edges clamped; never across N, C or D).
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_UPSAMPLE_2D"
    input_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    scale_size: Size2D = attribute(SIZE_2D)
    interpolation_mode: InterpolationMode = attribute(enum_type(InterpolationMode))


@dataclass(frozen=True)
class ResampleOperatorDesc(OperatorDesc):
    """DML_RESAMPLE_OPERATOR_DESC: resamples every dimension by a float scale, sampling at pixel
    centres (FL 2_0).

    Fields:
        input_tensor: the tensor to resample.
        output_tensor: InputTensor's data type and rank; any sizes (the scales need not equal
            OutputSize / InputSize: what falls outside is cropped, edges are clamped).
        interpolation_mode: NEAREST_NEIGHBOR (halves round up) or LINEAR.
        scales: one finite scale > 0 per dimension (> 1 enlarges).
        scale_count: optional; must equal ``len(scales)``.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_RESAMPLE"
    input_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    interpolation_mode: InterpolationMode = attribute(enum_type(InterpolationMode))
    scales: tuple[float, ...] = attribute(FLOAT_ARRAY)
    scale_count: int | None = count_of("scales")


@dataclass(frozen=True)
class Resample1OperatorDesc(OperatorDesc):
    """DML_RESAMPLE1_OPERATOR_DESC: RESAMPLE with per-dimension pixel offsets (FL 2_1).

    ``output = (input + InputPixelOffsets[i]) * Scales[i] + OutputPixelOffsets[i]``; offsets 0.5
    and -0.5 give RESAMPLE.

    Fields:
        input_tensor, output_tensor, interpolation_mode: as ``ResampleOperatorDesc``'s.
        scales: one finite scale > 0 per dimension.
        input_pixel_offsets, output_pixel_offsets: one finite offset per dimension.
        dimension_count: optional; must equal ``len(scales)``.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_RESAMPLE1"
    input_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    interpolation_mode: InterpolationMode = attribute(enum_type(InterpolationMode))
    scales: tuple[float, ...] = attribute(FLOAT_ARRAY)
    input_pixel_offsets: tuple[float, ...] = attribute(FLOAT_ARRAY)
    output_pixel_offsets: tuple[float, ...] = attribute(FLOAT_ARRAY)
    dimension_count: int | None = count_of("scales")


@dataclass(frozen=True)
class Resample2OperatorDesc(OperatorDesc):
    """DML_RESAMPLE2_OPERATOR_DESC: RESAMPLE1 with a rounding direction for nearest neighbour
    (FL 5_1).

    Fields:
        input_tensor, output_tensor, interpolation_mode, scales, input_pixel_offsets,
            output_pixel_offsets, dimension_count: as ``Resample1OperatorDesc``'s.
        rounding_direction: how NEAREST_NEIGHBOR rounds a fractional input coordinate:
            DECREASING floor, INCREASING ceil (LINEAR ignores it).
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_RESAMPLE2"
    input_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    interpolation_mode: InterpolationMode = attribute(enum_type(InterpolationMode))
    rounding_direction: AxisDirection = attribute(enum_type(AxisDirection))
    scales: tuple[float, ...] = attribute(FLOAT_ARRAY)
    input_pixel_offsets: tuple[float, ...] = attribute(FLOAT_ARRAY)
    output_pixel_offsets: tuple[float, ...] = attribute(FLOAT_ARRAY)
    dimension_count: int | None = count_of("scales")


@dataclass(frozen=True)
class Resample3OperatorDesc(OperatorDesc):
    """DML_RESAMPLE3_OPERATOR_DESC: RESAMPLE2 with antialiasing when shrinking (FL 6_4).

    Fields:
        input_tensor, output_tensor, interpolation_mode, rounding_direction, scales,
            input_pixel_offsets, output_pixel_offsets, dimension_count: as
            ``Resample2OperatorDesc``'s.
        antialiased: with LINEAR, dimensions with Scale < 1 use a triangle filter 1 / Scale
            input elements wide on each side, weights normalised to sum 1 (ONNX Resize's
            antialias); NEAREST_NEIGHBOR and Scale >= 1 are unaffected.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_RESAMPLE3"
    input_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    interpolation_mode: InterpolationMode = attribute(enum_type(InterpolationMode))
    rounding_direction: AxisDirection = attribute(enum_type(AxisDirection))
    scales: tuple[float, ...] = attribute(FLOAT_ARRAY)
    input_pixel_offsets: tuple[float, ...] = attribute(FLOAT_ARRAY)
    output_pixel_offsets: tuple[float, ...] = attribute(FLOAT_ARRAY)
    antialiased: bool = attribute(BOOL)
    dimension_count: int | None = count_of("scales")


# --- the shared geometry ------------------------------------------------------------------------


class Geometry(NamedTuple):
    """What every variant reduces to: per-dimension scales and offsets and the sampling rule.

    ``rounding`` is None for the round-halves-up rule of UPSAMPLE_2D, RESAMPLE and RESAMPLE1.
    """

    mode: InterpolationMode
    scales: tuple[float, ...]
    input_offsets: tuple[float, ...]
    output_offsets: tuple[float, ...]
    rounding: AxisDirection | None = None
    antialiased: bool = False


def geometry(d: Any) -> Geometry:
    """The coordinate mapping of any of the five descriptors."""
    rank = d.input_tensor.rank
    if isinstance(d, Upsample2DOperatorDesc):
        scales = (1.0,) * (rank - 2) + (float(d.scale_size.height), float(d.scale_size.width))
        return Geometry(d.interpolation_mode, scales, (0.5,) * rank, (-0.5,) * rank)
    if isinstance(d, ResampleOperatorDesc):
        n = len(d.scales)
        return Geometry(d.interpolation_mode, d.scales, (0.5,) * n, (-0.5,) * n)
    return Geometry(
        d.interpolation_mode,
        d.scales,
        d.input_pixel_offsets,
        d.output_pixel_offsets,
        getattr(d, "rounding_direction", None),
        bool(getattr(d, "antialiased", False)),
    )


def plan_axis(
    in_size: int,
    out_size: int,
    scale: float,
    input_offset: float,
    output_offset: float,
    mode: InterpolationMode,
    rounding: AxisDirection | None = None,
    antialiased: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """The static sampling table of one dimension.

    Returns:
        ``(indices, weights)``, both ``(out_size, taps)``: output element o is the sum over k of
        ``weights[o, k] * input[indices[o, k]]``; indices are clamped into ``[0, in_size)``,
        nearest neighbour has one tap of weight 1.
    """
    x = (np.arange(out_size, dtype=np.float64) - output_offset) / scale - input_offset
    if mode is NEAREST:
        if rounding is None:
            index = np.floor(x + 0.5)
        elif rounding is AxisDirection.DECREASING:
            index = np.floor(x)
        else:
            index = np.ceil(x)
        index = np.clip(index, 0, in_size - 1).astype(np.int64)[:, None]
        return index, np.ones(index.shape)
    if antialiased and scale < 1:
        # The triangle filter stretched by 1 / scale: nonzero on (x - 1/scale, x + 1/scale).
        radius = 1.0 / scale
        taps = math.ceil(2 * radius) + 1
        first = np.floor(x - radius)[:, None] + np.arange(taps)[None, :]
        weights = np.maximum(0.0, 1.0 - np.abs(first - x[:, None]) * scale)
        weights /= weights.sum(axis=1, keepdims=True)
    else:
        lower = np.floor(x)
        frac = x - lower
        first = lower[:, None] + np.arange(2)[None, :]
        weights = np.stack([1.0 - frac, frac], axis=1)
    keep = np.any(weights != 0, axis=0)  # drop taps that never contribute
    first, weights = first[:, keep], weights[:, keep]
    return np.clip(first, 0, in_size - 1).astype(np.int64), weights


def plan(d: Any) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """``(axis, indices, weights)`` for every dimension that is not an exact copy."""
    g = geometry(d)
    out = []
    for axis, (n_in, n_out) in enumerate(zip(d.input_tensor.sizes, d.output_tensor.sizes)):
        indices, weights = plan_axis(
            n_in,
            n_out,
            g.scales[axis],
            g.input_offsets[axis],
            g.output_offsets[axis],
            g.mode,
            g.rounding,
            g.antialiased,
        )
        identity = (
            n_in == n_out
            and indices.shape[1] == 1
            and np.array_equal(indices[:, 0], np.arange(n_in))
            and np.all(weights == 1)
        )
        if not identity:
            out.append((axis, indices, weights))
    return out


# --- infer / validate ---------------------------------------------------------------------------


def infer_resample(d: Any) -> tuple[TensorDesc, ...]:
    x = d.input_tensor
    if isinstance(d, Upsample2DOperatorDesc):
        if x.rank < 2:
            return (x,)
        h, w = x.sizes[-2:]
        sizes = x.sizes[:-2] + (h * d.scale_size.height, w * d.scale_size.width)
        return (x.like(sizes=sizes),)
    return (x.like(sizes=d.output_tensor.sizes),)


def validate_upsample_2d(d: Upsample2DOperatorDesc, v: Validator) -> None:
    x = d.input_tensor
    v.check(
        "InputTensor.DimensionCount",
        x.rank in (4, 5),
        f"must be 4 {{N, C, H, W}} or 5 {{N, C, D, H, W}}, got {x.rank}",
    )
    for name, scale, size in (
        ("Height", d.scale_size.height, x.sizes[-2]),
        ("Width", d.scale_size.width, x.sizes[-1]),
    ):
        v.check(f"ScaleSize.{name}", scale > 0, f"must be > 0, got {scale}")
        limit = UINT32_MAX // size
        v.check(
            f"ScaleSize.{name}",
            scale <= limit,
            f"must be <= UINT_MAX / Input{name} ({limit}), got {scale}",
        )
    total = x.element_count * d.scale_size.height * d.scale_size.width
    v.check(
        "ScaleSize",
        total <= UINT32_MAX,
        f"makes the output {total} elements; a buffer tensor holds at most {UINT32_MAX}",
    )
    v.same("data_type", [("OutputTensor", d.output_tensor)], ("InputTensor", x))
    v.same("rank", [("OutputTensor", d.output_tensor)], ("InputTensor", x))


def validate_resample(d: Any, v: Validator) -> None:
    x = d.input_tensor
    v.same("data_type", [("OutputTensor", d.output_tensor)], ("InputTensor", x))
    v.same("rank", [("OutputTensor", d.output_tensor)], ("InputTensor", x))
    count = "ScaleCount" if isinstance(d, ResampleOperatorDesc) else "DimensionCount"
    v.check(
        "Scales",
        len(d.scales) == x.rank,
        f"must hold one value per InputTensor dimension ({count} = InputTensor.DimensionCount "
        f"= {x.rank}), got {len(d.scales)}",
    )
    for i, s in enumerate(d.scales):
        v.check(f"Scales[{i}]", math.isfinite(s) and s > 0, f"must be finite and > 0, got {s}")
    if isinstance(d, ResampleOperatorDesc):
        return
    for name, values in (
        ("InputPixelOffsets", d.input_pixel_offsets),
        ("OutputPixelOffsets", d.output_pixel_offsets),
    ):
        v.check(
            name,
            len(values) == len(d.scales),
            f"must hold DimensionCount ({len(d.scales)}) values, got {len(values)}",
        )
        for i, value in enumerate(values):
            v.check(f"{name}[{i}]", math.isfinite(value), f"must be finite, got {value}")


# --- lowering -----------------------------------------------------------------------------------


def repeats(indices: np.ndarray, n_in: int) -> int | None:
    """r when a nearest-neighbour table repeats each input r times in order (integer upscaling
    at pixel centres), else None."""
    n_out = indices.shape[0]
    if indices.shape[1] != 1 or n_out % n_in:
        return None
    r = n_out // n_in
    return r if np.array_equal(indices[:, 0], np.arange(n_out) // r) else None


def _repeat(x, axis: int, r: int):
    """Each element along ``axis`` r times: broadcast into a new axis and merge (no gather)."""
    shape = x.shape[: axis + 1] + (r,) + x.shape[axis + 1 :]
    dims = tuple(i for i in range(x.ndim + 1) if i != axis + 1)
    y = lax.broadcast_in_dim(x, shape, dims)
    return lax.reshape(y, x.shape[:axis] + (x.shape[axis] * r,) + x.shape[axis + 1 :])


def _weighted(x, axis: int, indices: np.ndarray, weights: np.ndarray):
    """sum_k weights[:, k] * take(x, indices[:, k]) along ``axis`` (x already the wide type)."""
    total = None
    for k in range(indices.shape[1]):
        shape = [1] * x.ndim
        shape[axis] = indices.shape[0]
        term = jnp.take(x, indices[:, k], axis=axis, mode="clip")
        if np.any(weights[:, k] != 1):
            term = term * jnp.asarray(weights[:, k].reshape(shape), x.dtype)
        total = term if total is None else total + term
    return total


def _apply(x, steps: list):
    """Each dimension's table in turn: a broadcast where it only repeats elements, else static
    gathers and their weighted sum. XLA fuses the chain (gathers with constant indices and
    element-wise math) into one pass over the output."""
    for axis, indices, weights in steps:
        r = repeats(indices, x.shape[axis])
        x = _repeat(x, axis, r) if r is not None else _weighted(x, axis, indices, weights)
    return x


def resample(d: Any, x):
    """Applies ``plan(d)``; linear tables weigh in float32 and round once."""
    steps = plan(d)
    linear = any(w.shape[1] > 1 or np.any(w != 1) for _, _, w in steps)
    if not linear:  # copies in the tensor's own type: exact for every type
        return _apply(x, steps)
    out_dtype = x.dtype
    y = _apply(x.astype(jnp.float32), steps)
    if jnp.issubdtype(out_dtype, jnp.integer):
        info = jnp.iinfo(out_dtype)
        y = jnp.clip(jnp.round(y), info.min, info.max)
    return y.astype(out_dtype)


def lower_resample(d: Any, x):
    return (resample(d, x),)


# --- registration -------------------------------------------------------------------------------


def _example(operator_type: str) -> Example:
    """Microsoft's dml_upsample_2d model for UPSAMPLE_2D; the same 2x bilinear enlargement of
    {1, 1, 2, 2} at pixel centres for the others."""
    desc: dict[str, Any] = {
        "InputTensor": {"DataType": "FLOAT32", "Sizes": [1, 1, 2, 2]},
        "OutputTensor": {"DataType": "FLOAT32", "Sizes": [1, 1, 4, 4]},
        "InterpolationMode": "DML_INTERPOLATION_MODE_LINEAR",
    }
    scales = [1.0, 1.0, 2.0, 2.0]
    if operator_type == "DML_OPERATOR_UPSAMPLE_2D":
        desc["ScaleSize"] = {"Width": 2, "Height": 2}
    elif operator_type == "DML_OPERATOR_RESAMPLE":
        desc["ScaleCount"] = 4
        desc["Scales"] = scales
    else:
        if operator_type != "DML_OPERATOR_RESAMPLE1":
            desc["RoundingDirection"] = "DML_AXIS_DIRECTION_DECREASING"
        desc["DimensionCount"] = 4
        desc["Scales"] = scales
        desc["InputPixelOffsets"] = [0.5] * 4
        desc["OutputPixelOffsets"] = [-0.5] * 4
        if operator_type == "DML_OPERATOR_RESAMPLE3":
            desc["Antialiased"] = False
    return Example(
        {"type": operator_type, "desc": desc},
        {"InputTensor": [1, 2, 3, 4]},
        "{1, 1, 2, 2} enlarged 2x bilinearly at pixel centres, edges clamped",
    )


_COMMON = {"infer": infer_resample, "lower": lower_resample}

register(
    Upsample2DOperatorDesc,
    **_COMMON,
    validate=validate_upsample_2d,
    support=rows((L.FL_1_0, DIMS4_5, F2)),
    example=_example("DML_OPERATOR_UPSAMPLE_2D"),
)
register(
    ResampleOperatorDesc,
    **_COMMON,
    validate=validate_resample,
    support=rows((L.FL_2_0, DIMS4, F2), (L.FL_5_1, DIMS1_4, F2), (L.FL_6_2, DIMS1_4, F2_I8)),
    example=_example("DML_OPERATOR_RESAMPLE"),
)
register(
    Resample1OperatorDesc,
    **_COMMON,
    validate=validate_resample,
    support=rows((L.FL_2_1, DIMS4, F2), (L.FL_5_1, DIMS1_4, F2), (L.FL_6_2, DIMS1_4, F2_I8)),
    example=_example("DML_OPERATOR_RESAMPLE1"),
)
register(
    Resample2OperatorDesc,
    **_COMMON,
    validate=validate_resample,
    support=rows((L.FL_5_1, DIMS1_4, F2), (L.FL_6_2, DIMS1_4, F2_I8)),
    example=_example("DML_OPERATOR_RESAMPLE2"),
)
register(
    Resample3OperatorDesc,
    **_COMMON,
    validate=validate_resample,
    support=rows((L.FL_6_4, DIMS1_4, F2_I8)),
    example=_example("DML_OPERATOR_RESAMPLE3"),
)
