"""DML_OPERATOR_UNFOLD (im2col) and DML_OPERATOR_FOLD (col2im), feature level 6_4.

The image tensor is {N, C, spatial...} with DimensionCount (1 to 6) spatial dimensions; the
column tensor is {N, C * prod(WindowSizes), BlockCount}: row c * prod(WindowSizes) + w holds
channel c at window point w, column b the window at block b (both row-major over their
dimensions), as PyTorch's nn.Unfold / nn.Fold and ONNX's Col2Im lay them out.

Conventions (docs/semantics.md, "FOLD / UNFOLD"):
- The pages' "InputTensor and OutputTensor must have the same DimensionCount" contradicts every
  example on them (a 4-D image and a 3-D column tensor); dml_jax follows the examples.
- The pages list no data types; dml_jax accepts those of the other data-movement operators at
  6_4 (FLOAT32, FLOAT16 and the 8 to 64-bit integers). FOLD's integer sums wrap around in the
  tensor type; FLOAT16 sums accumulate in float32 and round once.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, ClassVar

import jax.numpy as jnp
from jax import lax

from ..enums import FeatureLevel as L
from ..errors import UINT32_MAX, Validator
from ..fields import UINT_ARRAY, OperatorDesc, attribute, count_of, input_field, output_field
from ..registry import Example, register
from ..support import T10, rows
from ..tensor import TensorDesc

_ARRAYS = ("WindowSizes", "Strides", "Dilations", "StartPadding", "EndPadding")


@dataclass(frozen=True)
class UnfoldOperatorDesc(OperatorDesc):
    """DML_UNFOLD_OPERATOR_DESC: copies every sliding window of an {N, C, spatial...} image into
    a column of an {N, C * prod(WindowSizes), BlockCount} tensor (im2col; FL 6_4).

    Fields:
        input_tensor: the image, {N, C, spatial...}, rank DimensionCount + 2.
        output_tensor: {N, C * prod(WindowSizes), BlockCount}, InputTensor's data type.
        window_sizes: the window's extent per spatial dimension (>= 1).
        strides: the window's step per spatial dimension (>= 1); not the tensor strides.
        dilations: the spacing of the window's points per spatial dimension (>= 1).
        start_padding, end_padding: zeros added before / after each spatial dimension of the
            image; the padded extent must hold at least one dilated window.
        dimension_count: optional; the spatial dimension count (1 to 6), the length of the five
            arrays.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_UNFOLD"
    input_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    window_sizes: tuple[int, ...] = attribute(UINT_ARRAY)
    strides: tuple[int, ...] = attribute(UINT_ARRAY)
    dilations: tuple[int, ...] = attribute(UINT_ARRAY)
    start_padding: tuple[int, ...] = attribute(UINT_ARRAY)
    end_padding: tuple[int, ...] = attribute(UINT_ARRAY)
    dimension_count: int | None = count_of("window_sizes")


@dataclass(frozen=True)
class FoldOperatorDesc(OperatorDesc):
    """DML_FOLD_OPERATOR_DESC: adds the columns of an {N, C * prod(WindowSizes), BlockCount}
    tensor onto the windows of an {N, C, spatial...} image, summing overlaps (col2im; FL 6_4).

    Fields:
        input_tensor: {N, C * prod(WindowSizes), BlockCount}; BlockCount must be the window
            count of the output image.
        output_tensor: the image, {N, C, spatial...}, rank DimensionCount + 2, InputTensor's
            data type; its spatial sizes are the caller's choice.
        window_sizes, strides, dilations, start_padding, end_padding, dimension_count: as
            ``UnfoldOperatorDesc``'s, applied to the output image.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_FOLD"
    input_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    window_sizes: tuple[int, ...] = attribute(UINT_ARRAY)
    strides: tuple[int, ...] = attribute(UINT_ARRAY)
    dilations: tuple[int, ...] = attribute(UINT_ARRAY)
    start_padding: tuple[int, ...] = attribute(UINT_ARRAY)
    end_padding: tuple[int, ...] = attribute(UINT_ARRAY)
    dimension_count: int | None = count_of("window_sizes")


def _image(d: Any) -> TensorDesc:
    return d.input_tensor if isinstance(d, UnfoldOperatorDesc) else d.output_tensor


def _image_path(d: Any) -> str:
    return "InputTensor" if isinstance(d, UnfoldOperatorDesc) else "OutputTensor"


def _extent(d: Any, i: int) -> int:
    """The span of the dilated window along spatial dimension ``i``."""
    return d.dilations[i] * (d.window_sizes[i] - 1) + 1


def blocks_per_dimension(d: Any) -> tuple[int, ...]:
    """The pages' BlocksPerDimension over the image's spatial sizes."""
    spatial = _image(d).sizes[2:]
    return tuple(
        (size + d.start_padding[i] + d.end_padding[i] - _extent(d, i)) // d.strides[i] + 1
        for i, size in enumerate(spatial)
    )


def infer_fold(d: Any) -> tuple[TensorDesc, ...]:
    window = math.prod(d.window_sizes)
    if isinstance(d, UnfoldOperatorDesc):
        n, c = d.input_tensor.sizes[:2]
        sizes = (n, c * window, math.prod(blocks_per_dimension(d)))
    else:
        n, rows_ = d.input_tensor.sizes[:2]
        sizes = (n, rows_ // window) + tuple(d.output_tensor.sizes[2:])
    return (d.input_tensor.like(sizes=sizes),)


def validate_fold(d: Any, v: Validator) -> None:
    n = len(d.window_sizes)
    v.check("DimensionCount", 1 <= n <= 6, f"must be in [1, 6], got {n}")
    for name in _ARRAYS[1:]:
        values = getattr(d, _snake(name))
        v.check(name, len(values) == n, f"must hold DimensionCount ({n}) values, got {len(values)}")
    for name in _ARRAYS[:3]:
        for i, value in enumerate(getattr(d, _snake(name))):
            v.check(f"{name}[{i}]", value >= 1, f"must be >= 1, got {value}")
    image, path = _image(d), _image_path(d)
    v.check(
        f"{path}.DimensionCount",
        image.rank == n + 2,
        f"must be DimensionCount + 2 = {n + 2} ({{N, C, spatial...}}), got {image.rank}",
    )
    for i, size in enumerate(image.sizes[2:]):
        padded = size + d.start_padding[i] + d.end_padding[i]
        v.check(
            f"{path}.Sizes[{i + 2}]",
            padded >= _extent(d, i),
            f"plus StartPadding[{i}] and EndPadding[{i}] ({padded}) must hold the dilated window "
            f"(Dilations[{i}] * (WindowSizes[{i}] - 1) + 1 = {_extent(d, i)})",
        )
    window = math.prod(d.window_sizes)
    if isinstance(d, UnfoldOperatorDesc):
        x = d.input_tensor
        total = x.sizes[0] * x.sizes[1] * window * math.prod(blocks_per_dimension(d))
        v.check(
            "OutputTensor",
            total <= UINT32_MAX,
            f"would hold {total} elements; a buffer tensor holds at most {UINT32_MAX}",
        )
    else:
        x = d.input_tensor
        v.check("InputTensor.DimensionCount", x.rank == 3, f"must be 3, got {x.rank}")
        v.check(
            "InputTensor.Sizes[1]",
            x.sizes[1] % window == 0,
            f"({x.sizes[1]}) must be a multiple of prod(WindowSizes) ({window})",
        )
        blocks = math.prod(blocks_per_dimension(d))
        v.equal("InputTensor.Sizes[2]", x.sizes[2], blocks, "BlockCount of OutputTensor")
    v.outputs_match(d.output_slots(), infer_fold(d))


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name).lstrip("_")


def _window_points(d: Any):
    return itertools.product(*(range(w) for w in d.window_sizes))


def unfold(d: Any, x):
    """One strided slice of the zero-padded image per window point, stacked after the channel
    axis and merged with it; slices and pads only, so every type is exact."""
    n, c, *spatial = x.shape
    blocks = blocks_per_dimension(d)
    config = [(0, 0, 0)] * 2 + list(zip(d.start_padding, d.end_padding, [0] * len(spatial)))
    padded = lax.pad(x, jnp.zeros((), x.dtype), config)
    pieces = []
    for point in _window_points(d):
        start = [p * dil for p, dil in zip(point, d.dilations)]
        limit = [s + (b - 1) * step + 1 for s, b, step in zip(start, blocks, d.strides)]
        pieces.append(lax.slice(padded, (0, 0, *start), (n, c, *limit), (1, 1, *d.strides)))
    y = jnp.stack(pieces, axis=2)
    return lax.reshape(y, (n, c * len(pieces), math.prod(blocks)))


def fold(d: Any, y):
    """Each window point's blocks placed on the image by one lax.pad (interior padding spaces
    them by the stride, negative edge padding drops what falls in the image padding), summed.
    XLA fuses the pads and adds into one pass over the image."""
    n, c, *spatial = d.output_tensor.sizes
    blocks = blocks_per_dimension(d)
    points = list(_window_points(d))
    y = lax.reshape(y, (n, c, len(points), *blocks))
    wide = jnp.float32 if y.dtype == jnp.float16 else y.dtype
    total = None
    for index, point in enumerate(points):
        block = lax.index_in_dim(y, index, axis=2, keepdims=False).astype(wide)
        config = [(0, 0, 0)] * 2
        for i, size in enumerate(spatial):
            low = point[i] * d.dilations[i] - d.start_padding[i]
            high = size - (low + (blocks[i] - 1) * d.strides[i] + 1)
            config.append((low, high, d.strides[i] - 1))
        placed = lax.pad(block, jnp.zeros((), wide), config)
        total = placed if total is None else total + placed
    return total.astype(y.dtype)


def lower_unfold(d: UnfoldOperatorDesc, x):
    return (unfold(d, x),)


def lower_fold(d: FoldOperatorDesc, y):
    return (fold(d, y),)


_SUPPORT = rows((L.FL_6_4, tuple(range(3, 9)), T10))


def _example(operator_type: str) -> Example:
    """The pages' example 1 of each operator: a 3 x 3 window over a 5 x 5 (UNFOLD) or 4 x 4
    (FOLD) single-channel image."""
    unfolding = operator_type == "DML_OPERATOR_UNFOLD"
    image = {"DataType": "FLOAT32", "Sizes": [1, 1, 5, 5] if unfolding else [1, 1, 4, 4]}
    columns = {"DataType": "FLOAT32", "Sizes": [1, 9, 9] if unfolding else [1, 9, 4]}
    desc = {
        "InputTensor": image if unfolding else columns,
        "OutputTensor": columns if unfolding else image,
        "DimensionCount": 2,
        "WindowSizes": [3, 3],
        "Strides": [1, 1],
        "Dilations": [1, 1],
        "StartPadding": [0, 0],
        "EndPadding": [0, 0],
    }
    note = (
        "the nine 3x3 windows of a 5x5 image as columns"
        if unfolding
        else "four 3x3 windows summed onto a 4x4 image"
    )
    count = 25 if unfolding else 36
    return Example({"type": operator_type, "desc": desc}, {"InputTensor": list(range(count))}, note)


register(
    UnfoldOperatorDesc,
    infer=infer_fold,
    validate=validate_fold,
    lower=lower_unfold,
    support=_SUPPORT,
    example=_example("DML_OPERATOR_UNFOLD"),
)
register(
    FoldOperatorDesc,
    infer=infer_fold,
    validate=validate_fold,
    lower=lower_fold,
    support=_SUPPORT,
    example=_example("DML_OPERATOR_FOLD"),
)
