"""Gathers, scatters, one-hot and nonzero coordinates: GATHER, GATHER_ELEMENTS, GATHER_ND,
GATHER_ND1 and NONZERO_COORDINATES here, SCATTER (alias SCATTER_ELEMENTS), SCATTER_ND and
ONE_HOT in ``scatter.py`` (on the family's rules here).

Conventions shared by the family (docs/semantics.md, "Gather, scatter, one-hot"):

- Every tensor has the same DimensionCount; the meaningful dimensions are the trailing ones
  (IndexDimensions, InputDimensionCount, IndicesDimensionCount) and the ones before them are 1.
  A derived shape is right-aligned into DimensionCount: leading 1s are added, or dropped where
  the derived shape is longer (only 1s may be dropped).
- Signed index types (INT32, INT64) count a negative index from the end of its dimension.
- An index still outside its dimension selects nothing: a gather reads 0 for it, a scatter
  drops its update, ONE_HOT writes OffValue along its sequence (the one case DirectML
  documents). An index tuple with one coordinate out of range is out of range as a whole.
- Scatters with repeated indices: the last update in row-major order of UpdatesTensor wins.

Lowering: ``lax.gather``/``lax.scatter`` with ``mode=FILL_OR_DROP`` after one element-wise pass
over the (small) index tensor that wraps negative indices and marks the rest invalid. Scatters
are made deterministic without sorting: the row-major position of each update is scattered with
``max`` (commutative, so the order of colliding writes does not matter), then the winning
updates are gathered and selected over the input in one fused pass.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import jax.numpy as jnp
import numpy as np
from jax import lax

from ..enums import DataType
from ..enums import FeatureLevel as L
from ..errors import Validator, show
from ..fields import UINT, OperatorDesc, attribute, input_field, output_field
from ..registry import Example, register
from ..support import DIMS1_8, DIMS4, DIMS4_5, F2, IDX, T8, T11, U32, rows
from ..tensor import TensorDesc
from ._common import float_input

FILL_OR_DROP = lax.GatherScatterMode.FILL_OR_DROP
IN_BOUNDS = lax.GatherScatterMode.PROMISE_IN_BOUNDS


# --- shared rules -----------------------------------------------------------------------------


def _fits(sizes: tuple[int, ...], rank: int) -> bool:
    """``sizes`` right-aligned into ``rank`` dimensions drops only leading 1s."""
    return all(s == 1 for s in sizes[: max(0, len(sizes) - rank)])


def fit_rank(sizes: tuple[int, ...], rank: int) -> tuple[int, ...]:
    """``sizes`` right-aligned into ``rank`` dimensions (leading 1s added or dropped)."""
    extra = len(sizes) - rank
    return (1,) * -extra + tuple(sizes) if extra <= 0 else tuple(sizes[extra:])


def same_rank(d: Any, v: Validator) -> None:
    """Every tensor has the first tensor's DimensionCount (each page's tensor constraint)."""
    tensors = d.input_slots() + d.output_slots()
    v.same("rank", list(tensors[1:]), tensors[0])


def _leading_ones(v: Validator, path: str, t: TensorDesc, count: int, field: str) -> None:
    """The dimensions of ``t`` before its ``count`` meaningful ones are 1."""
    for i, s in enumerate(t.sizes[: t.rank - count]):
        v.check(f"{path}.Sizes[{i}]", s == 1, f"must be 1 (before the {field} = {count}), got {s}")


def sizes_rule(v: Validator, path: str, got: tuple[int, ...], want: tuple[int, ...]) -> None:
    """``path.Sizes`` equals ``want`` (checked here, before an output desc is inferred)."""
    for i, (g, w) in enumerate(zip(got, want)):
        v.equal(f"{path}.Sizes[{i}]", g, w)


def _count_rule(v: Validator, path: str, value: int, rank: int, low: int = 1) -> None:
    v.check(path, low <= value <= rank, f"must be in [{low}, {rank}] (DimensionCount), got {value}")


def is_signed(t: TensorDesc) -> bool:
    return t.data_type in (DataType.INT32, DataType.INT64)


def _index_dtype(limit: int):
    return jnp.int32 if limit < 2**31 else jnp.int64


def normalized_indices(idx, sizes, signed: bool):
    """Indices as int32 in [0, size), or -1 where out of range (FILL_OR_DROP then skips them).

    ``sizes`` is one size, or a tuple broadcast along the last axis (one per tuple coordinate).
    A signed index below 0 counts from the end first. Comparisons run in the index type, so
    UINT64/INT64 values beyond int32 are judged before the narrowing cast."""
    sizes_t = tuple(sizes) if isinstance(sizes, tuple) else (sizes,)
    info = np.iinfo(idx.dtype)
    size = jnp.asarray([min(s, int(info.max)) for s in sizes_t], idx.dtype)
    if not isinstance(sizes, tuple):
        size = size[0]
    if signed:
        idx = jnp.where(idx < 0, idx + size, idx)
        ok = (idx >= 0) & (idx < size)
    else:
        ok = idx < size
    out = _index_dtype(max(sizes_t))
    return jnp.where(ok, idx.astype(out), jnp.asarray(-1, out))


def row_major_positions(shape: tuple[int, ...]):
    """Each element's row-major position (int32 below 2**31 elements)."""
    n = math.prod(shape)
    return lax.iota(_index_dtype(n), n).reshape(shape)


def _take_rows(table, at):
    """``table[at]`` along axis 0 for in-range ``at`` (any shape)."""
    dn = lax.GatherDimensionNumbers(
        offset_dims=tuple(range(at.ndim, at.ndim + table.ndim - 1)),
        collapsed_slice_dims=(0,),
        start_index_map=(0,),
    )
    return lax.gather(table, at[..., None], dn, (1,) + table.shape[1:], mode=IN_BOUNDS)


def select_winners(x, winner, table):
    """Where ``winner`` >= 0 (broadcast over the trailing dims of ``x``), the row
    ``table[winner]``; elsewhere ``x``: one fused gather-and-select pass."""
    taken = _take_rows(table, jnp.maximum(winner, 0))
    mask = (winner >= 0).reshape(winner.shape + (1,) * (x.ndim - winner.ndim))
    return jnp.where(mask, taken, x)


# --- GATHER -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class GatherOperatorDesc(OperatorDesc):
    """DML_GATHER_OPERATOR_DESC: ``output[..., j, ...] = input[..., indices[j], ...]`` along
    Axis (FL 1_0).

    Fields:
        input_tensor: the tensor read from.
        indices_tensor: same DimensionCount; its last IndexDimensions dimensions hold the
            indices, the ones before them are 1. INT32/INT64 indices may be negative (from the
            end); an index out of range reads 0.
        output_tensor: InputTensor's data type and DimensionCount; Sizes are
            ``InputTensor.Sizes[:Axis] + IndicesTensor.Sizes[-IndexDimensions:] +
            InputTensor.Sizes[Axis + 1:]`` right-aligned (leading 1s dropped or added).
        axis: the dimension gathered along, < DimensionCount.
        index_dimensions: the meaningful index dimensions, in [0, DimensionCount]; 0 is one
            scalar index (the Axis dimension disappears).
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_GATHER"
    input_tensor: TensorDesc = input_field()
    indices_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    axis: int = attribute(UINT)
    index_dimensions: int = attribute(UINT)


def _gather_full(d: GatherOperatorDesc) -> tuple[int, ...]:
    x, i, k = d.input_tensor.sizes, d.indices_tensor.sizes, d.index_dimensions
    return x[: d.axis] + i[len(i) - k :] + x[d.axis + 1 :]


def infer_gather(d: GatherOperatorDesc) -> tuple[TensorDesc, ...]:
    return (TensorDesc(d.input_tensor.data_type, fit_rank(_gather_full(d), d.input_tensor.rank)),)


def validate_gather(d: GatherOperatorDesc, v: Validator) -> None:
    rank = d.input_tensor.rank
    same_rank(d, v)
    v.axis("Axis", d.axis, rank)
    _count_rule(v, "IndexDimensions", d.index_dimensions, rank, low=0)
    _leading_ones(v, "IndicesTensor", d.indices_tensor, d.index_dimensions, "IndexDimensions")
    full = _gather_full(d)
    v.check(
        "IndexDimensions",
        _fits(full, rank),
        f"= {d.index_dimensions} gives {len(full)} output dimensions {show(full)}, more than "
        f"DimensionCount {rank} with only leading 1s dropped",
    )
    sizes_rule(v, "OutputTensor", d.output_tensor.sizes, fit_rank(full, rank))


def lower_gather(d: GatherOperatorDesc, x, idx):
    rank, k, a = x.ndim, d.index_dimensions, d.axis
    i = normalized_indices(
        idx.reshape(idx.shape[rank - k :]), x.shape[a], is_signed(d.indices_tensor)
    )
    dn = lax.GatherDimensionNumbers(
        offset_dims=tuple(range(a)) + tuple(range(a + k, rank + k - 1)),
        collapsed_slice_dims=(a,),
        start_index_map=(a,),
    )
    slice_sizes = x.shape[:a] + (1,) + x.shape[a + 1 :]
    y = lax.gather(x, i[..., None], dn, slice_sizes, mode=FILL_OR_DROP, fill_value=0)
    return (y.reshape(d.output_tensor.sizes),)


GATHER_ROWS = (
    (L.FL_3_0, DIMS1_8, T8, T8, {"IndicesTensor": IDX}),
    (L.FL_4_1, DIMS1_8, T11, T11, {"IndicesTensor": IDX}),
)

register(
    GatherOperatorDesc,
    infer=infer_gather,
    validate=validate_gather,
    lower=lower_gather,
    differentiable=float_input,
    support=rows(
        (L.FL_1_0, DIMS4, F2, F2, {"IndicesTensor": U32}),
        (L.FL_2_1, DIMS4, T8, T8, {"IndicesTensor": U32}),
        *GATHER_ROWS,
    ),
    example=Example(
        {
            "type": "DML_OPERATOR_GATHER",
            "desc": {
                "InputTensor": {"DataType": "FLOAT32", "Sizes": [3, 2]},
                "IndicesTensor": {"DataType": "UINT32", "Sizes": [1, 4]},
                "OutputTensor": {"DataType": "FLOAT32", "Sizes": [4, 2]},
                "Axis": 0,
                "IndexDimensions": 1,
            },
        },
        {"InputTensor": [1, 2, 3, 4, 5, 6], "IndicesTensor": [0, 1, 1, 2]},
        "rows 0, 1, 1, 2 of a 3x2 matrix (the page's example 2)",
    ),
)


# --- GATHER_ELEMENTS --------------------------------------------------------------------------


@dataclass(frozen=True)
class GatherElementsOperatorDesc(OperatorDesc):
    """DML_GATHER_ELEMENTS_OPERATOR_DESC: ``output[i] = input[i with i[Axis] = indices[i]]``
    (FL 2_1).

    Fields:
        input_tensor: the tensor read from.
        indices_tensor: same DimensionCount; its Sizes equal InputTensor's except along Axis.
            INT32/INT64 indices may be negative (from the end); out of range reads 0.
        output_tensor: IndicesTensor's Sizes, InputTensor's data type.
        axis: the dimension gathered along, < DimensionCount.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_GATHER_ELEMENTS"
    input_tensor: TensorDesc = input_field()
    indices_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    axis: int = attribute(UINT)


def except_axis(v: Validator, path: str, t: TensorDesc, ref: str, r: TensorDesc, axis: int):
    """``t.Sizes`` equals ``r.Sizes`` in every dimension but ``axis``."""
    for i, (s, want) in enumerate(zip(t.sizes, r.sizes)):
        if i != axis:
            v.equal(f"{path}.Sizes[{i}]", s, want, f"{ref}.Sizes[{i}]")


def infer_gather_elements(d: GatherElementsOperatorDesc) -> tuple[TensorDesc, ...]:
    return (TensorDesc(d.input_tensor.data_type, d.indices_tensor.sizes),)


def validate_gather_elements(d: GatherElementsOperatorDesc, v: Validator) -> None:
    same_rank(d, v)
    v.axis("Axis", d.axis, d.input_tensor.rank)
    except_axis(v, "IndicesTensor", d.indices_tensor, "InputTensor", d.input_tensor, d.axis)


def elements_numbers(rank: int, axis: int, scatter: bool):
    others = tuple(i for i in range(rank) if i != axis)
    if scatter:
        return lax.ScatterDimensionNumbers(
            update_window_dims=(),
            inserted_window_dims=(axis,),
            scatter_dims_to_operand_dims=(axis,),
            operand_batching_dims=others,
            scatter_indices_batching_dims=others,
        )
    return lax.GatherDimensionNumbers(
        offset_dims=(),
        collapsed_slice_dims=(axis,),
        start_index_map=(axis,),
        operand_batching_dims=others,
        start_indices_batching_dims=others,
    )


def lower_gather_elements(d: GatherElementsOperatorDesc, x, idx):
    i = normalized_indices(idx, x.shape[d.axis], is_signed(d.indices_tensor))
    dn = elements_numbers(x.ndim, d.axis, scatter=False)
    y = lax.gather(x, i[..., None], dn, (1,) * x.ndim, mode=FILL_OR_DROP, fill_value=0)
    return (y,)


ND_ROWS = (
    (L.FL_2_1, DIMS4, T8, T8, {"IndicesTensor": U32}),
    *GATHER_ROWS,
)

register(
    GatherElementsOperatorDesc,
    infer=infer_gather_elements,
    validate=validate_gather_elements,
    lower=lower_gather_elements,
    differentiable=float_input,
    support=rows(*ND_ROWS),
    example=Example(
        {
            "type": "DML_OPERATOR_GATHER_ELEMENTS",
            "desc": {
                "InputTensor": {"DataType": "FLOAT32", "Sizes": [3, 3]},
                "IndicesTensor": {"DataType": "UINT32", "Sizes": [2, 3]},
                "OutputTensor": {"DataType": "FLOAT32", "Sizes": [2, 3]},
                "Axis": 0,
            },
        },
        {"InputTensor": list(range(1, 10)), "IndicesTensor": [1, 2, 0, 2, 0, 0]},
        "elements picked down the columns of a 3x3 matrix (the page's example)",
    ),
)


# --- GATHER_ND / GATHER_ND1 -------------------------------------------------------------------


@dataclass(frozen=True)
class GatherNdOperatorDesc(OperatorDesc):
    """DML_GATHER_ND_OPERATOR_DESC: ``output[j, ...] = input[indices[j, :], ...]``: each index
    tuple selects a sub-block of the input (FL 2_1).

    Fields:
        input_tensor: the tensor read from; dimensions before its last InputDimensionCount are 1.
        indices_tensor: same DimensionCount; dimensions before its last IndicesDimensionCount
            are 1, and its last dimension is the tuple size k, 1 <= k <= InputDimensionCount.
            INT32/INT64 coordinates may be negative (from the end); a tuple with a coordinate
            out of range reads a block of 0s.
        output_tensor: InputTensor's data type; Sizes are the meaningful IndicesTensor.Sizes
            without the last, then the input's meaningful sizes after the first k,
            right-aligned.
        input_dimension_count, indices_dimension_count: the meaningful trailing dimensions,
            each in [1, DimensionCount].
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_GATHER_ND"
    input_tensor: TensorDesc = input_field()
    indices_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    input_dimension_count: int = attribute(UINT)
    indices_dimension_count: int = attribute(UINT)

    batch_dimension_count: ClassVar[int] = 0


@dataclass(frozen=True)
class GatherNd1OperatorDesc(OperatorDesc):
    """DML_GATHER_ND1_OPERATOR_DESC: GATHER_ND with leading batch dimensions shared by input
    and indices: ``output[b, j, ...] = input[b, indices[b, j, :], ...]`` (FL 3_0).

    Fields:
        input_tensor, indices_tensor, output_tensor, input_dimension_count,
        indices_dimension_count: as GATHER_ND.
        batch_dimension_count: the first BatchDimensionCount meaningful dimensions of InputTensor
            and IndicesTensor are batches (equal sizes); it is below both
            IndicesDimensionCount and InputDimensionCount, and the tuple size k is at most
            InputDimensionCount - BatchDimensionCount.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_GATHER_ND1"
    input_tensor: TensorDesc = input_field()
    indices_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    input_dimension_count: int = attribute(UINT)
    indices_dimension_count: int = attribute(UINT)
    batch_dimension_count: int = attribute(UINT)


def nd_parts(d: Any):
    """(input meaningful sizes, indices meaningful sizes, tuple size k, batch count b)."""
    x = d.input_tensor.sizes[d.input_tensor.rank - d.input_dimension_count :]
    i = d.indices_tensor.sizes[d.indices_tensor.rank - d.indices_dimension_count :]
    return x, i, i[-1], d.batch_dimension_count


def nd_rules(d: Any, v: Validator) -> tuple[int, ...]:
    """GATHER_ND(1)'s and SCATTER_ND's shared rules; returns the derived (gathered or
    updates) sizes before right-alignment."""
    rank = d.input_tensor.rank
    same_rank(d, v)
    _count_rule(v, "InputDimensionCount", d.input_dimension_count, rank)
    _count_rule(v, "IndicesDimensionCount", d.indices_dimension_count, rank)
    _leading_ones(v, "InputTensor", d.input_tensor, d.input_dimension_count, "InputDimensionCount")
    _leading_ones(
        v, "IndicesTensor", d.indices_tensor, d.indices_dimension_count, "IndicesDimensionCount"
    )
    x, i, k, b = nd_parts(d)
    v.check(
        "BatchDimensionCount",
        b < len(i) and b < len(x),
        f"must be below IndicesDimensionCount ({len(i)}) and InputDimensionCount ({len(x)}), "
        f"got {b}",
    )
    v.check(
        f"IndicesTensor.Sizes[{rank - 1}]",
        1 <= k <= len(x) - b,
        f"is the index tuple size; it must be in [1, {len(x) - b}] (InputDimensionCount"
        + (" - BatchDimensionCount" if b else "")
        + f"), got {k}",
    )
    offset_i, offset_x = rank - len(i), rank - len(x)
    for j in range(b):
        v.equal(
            f"IndicesTensor.Sizes[{offset_i + j}]",
            i[j],
            x[j],
            f"InputTensor.Sizes[{offset_x + j}] (a batch dimension)",
        )
    full = i[:-1] + x[b + k :]
    v.check(
        "IndicesDimensionCount",
        _fits(full, rank),
        f"and InputDimensionCount give {len(full)} meaningful dimensions {show(full)}, more "
        f"than DimensionCount {rank}",
    )
    return full


def infer_gather_nd(d: Any) -> tuple[TensorDesc, ...]:
    x, i, k, b = nd_parts(d)
    return (
        TensorDesc(d.input_tensor.data_type, fit_rank(i[:-1] + x[b + k :], d.input_tensor.rank)),
    )


def validate_gather_nd(d: Any, v: Validator) -> None:
    full = nd_rules(d, v)
    sizes_rule(v, "OutputTensor", d.output_tensor.sizes, fit_rank(full, d.input_tensor.rank))


def lower_gather_nd(d: Any, x, idx):
    xs, is_, k, b = nd_parts(d)
    xm, im = x.reshape(xs), idx.reshape(is_)
    i = normalized_indices(im, tuple(xs[b : b + k]), is_signed(d.indices_tensor))
    q = len(is_)
    dn = lax.GatherDimensionNumbers(
        offset_dims=tuple(range(q - 1, q - 1 + len(xs) - b - k)),
        collapsed_slice_dims=tuple(range(b, b + k)),
        start_index_map=tuple(range(b, b + k)),
        operand_batching_dims=tuple(range(b)),
        start_indices_batching_dims=tuple(range(b)),
    )
    slice_sizes = (1,) * (b + k) + tuple(xs[b + k :])
    y = lax.gather(xm, i, dn, slice_sizes, mode=FILL_OR_DROP, fill_value=0)
    return (y.reshape(d.output_tensor.sizes),)


register(
    GatherNdOperatorDesc,
    infer=infer_gather_nd,
    validate=validate_gather_nd,
    lower=lower_gather_nd,
    differentiable=float_input,
    support=rows(*ND_ROWS),
    example=Example(
        {
            "type": "DML_OPERATOR_GATHER_ND",
            "desc": {
                "InputTensor": {"DataType": "FLOAT32", "Sizes": [1, 2, 2, 2]},
                "IndicesTensor": {"DataType": "UINT32", "Sizes": [1, 1, 2, 2]},
                "OutputTensor": {"DataType": "FLOAT32", "Sizes": [1, 1, 2, 2]},
                "InputDimensionCount": 3,
                "IndicesDimensionCount": 2,
            },
        },
        {"InputTensor": list(range(8)), "IndicesTensor": [0, 1, 1, 0]},
        "rows picked by 2-coordinate tuples (the page's example 2)",
    ),
)

register(
    GatherNd1OperatorDesc,
    infer=infer_gather_nd,
    validate=validate_gather_nd,
    lower=lower_gather_nd,
    differentiable=float_input,
    support=rows(*GATHER_ROWS),
    example=Example(
        {
            "type": "DML_OPERATOR_GATHER_ND1",
            "desc": {
                "InputTensor": {"DataType": "FLOAT32", "Sizes": [1, 3, 2, 2]},
                "IndicesTensor": {"DataType": "UINT32", "Sizes": [1, 3, 2, 2]},
                "OutputTensor": {"DataType": "FLOAT32", "Sizes": [1, 1, 3, 2]},
                "InputDimensionCount": 3,
                "IndicesDimensionCount": 3,
                "BatchDimensionCount": 1,
            },
        },
        {"InputTensor": list(range(12)), "IndicesTensor": [0, 0, 1, 1, 1, 1, 0, 0, 0, 1, 1, 0]},
        "2-coordinate tuples within each of 3 batches (the page's example 2)",
    ),
)


# --- NONZERO_COORDINATES ----------------------------------------------------------------------


@dataclass(frozen=True)
class NonzeroCoordinatesOperatorDesc(OperatorDesc):
    """DML_NONZERO_COORDINATES_OPERATOR_DESC: the count and the coordinates of the nonzero
    input elements, in increasing element order (FL 3_0).

    Fields:
        input_tensor: the tensor scanned; -0.0 counts as zero, NaN as nonzero.
        output_count_tensor: UINT32, every size 1: the number of nonzero elements.
        output_coordinates_tensor: UINT32 {1, ..., M, N}: M = InputTensor's element count
            rows, N coordinates each (the last N input dimensions), N from the input's
            effective rank (leading 1s ignored) up to its DimensionCount. Rows from the count
            on are 0 (DirectML leaves them undefined).
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_NONZERO_COORDINATES"
    input_tensor: TensorDesc = input_field()
    output_count_tensor: TensorDesc = output_field()
    output_coordinates_tensor: TensorDesc = output_field()


def _effective_rank(sizes: tuple[int, ...]) -> int:
    lead = next((k for k, s in enumerate(sizes) if s != 1), len(sizes))
    return len(sizes) - lead


def _coordinates_sizes(d: NonzeroCoordinatesOperatorDesc) -> tuple[int, ...]:
    c = d.output_coordinates_tensor
    return (1,) * (c.rank - 2) + (d.input_tensor.element_count, c.sizes[-1])


def infer_nonzero(d: NonzeroCoordinatesOperatorDesc) -> tuple[TensorDesc, ...]:
    count = TensorDesc("UINT32", (1,) * d.output_count_tensor.rank)
    return count, TensorDesc("UINT32", _coordinates_sizes(d))


def validate_nonzero(d: NonzeroCoordinatesOperatorDesc, v: Validator) -> None:
    c = d.output_coordinates_tensor
    v.check(
        "OutputCoordinatesTensor.DimensionCount",
        c.rank >= 2,
        f"must be at least 2 ({{..., M, N}}), got {c.rank}",
    )
    n, low, high = c.sizes[-1], _effective_rank(d.input_tensor.sizes), d.input_tensor.rank
    v.check(
        f"OutputCoordinatesTensor.Sizes[{c.rank - 1}]",
        low <= n <= high,
        f"(N, coordinates per row) must be in [{low}, {high}] (InputTensor's effective rank to "
        f"its DimensionCount), got {n}",
    )
    sizes_rule(v, "OutputCoordinatesTensor", c.sizes, _coordinates_sizes(d))


def lower_nonzero(d: NonzeroCoordinatesOperatorDesc, x):
    count_desc, coords_desc = d.output_count_tensor, d.output_coordinates_tensor
    m, n = x.size, coords_desc.sizes[-1]
    nonzero = (x != 0).reshape(-1)
    count = jnp.sum(nonzero, dtype=jnp.uint32)
    # Row of each nonzero element: the running count before it; the others go to row M, which
    # FILL_OR_DROP discards. Rows are unique, so the scatter is deterministic.
    row_type = _index_dtype(m + 1)
    rows_ = jnp.where(nonzero, jnp.cumsum(nonzero, dtype=row_type) - 1, jnp.asarray(m, row_type))
    coords = jnp.stack(
        [
            lax.broadcasted_iota(jnp.uint32, x.shape, axis).reshape(-1)
            for axis in range(x.ndim - n, x.ndim)
        ],
        axis=1,
    )
    dn = lax.ScatterDimensionNumbers(
        update_window_dims=(1,), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,)
    )
    table = lax.scatter(
        jnp.zeros((m, n), jnp.uint32), rows_[:, None], coords, dn, mode=FILL_OR_DROP
    )
    return count.reshape(count_desc.sizes), table.reshape(coords_desc.sizes)


register(
    NonzeroCoordinatesOperatorDesc,
    infer=infer_nonzero,
    validate=validate_nonzero,
    lower=lower_nonzero,
    differentiable=lambda d: False,
    support=rows(
        (L.FL_3_0, DIMS4_5, T8, U32),
        (L.FL_4_0, DIMS1_8, T8, U32, {"OutputCoordinatesTensor": (U32, tuple(range(2, 9)))}),
    ),
    example=Example(
        {
            "type": "DML_OPERATOR_NONZERO_COORDINATES",
            "desc": {
                "InputTensor": {"DataType": "FLOAT32", "Sizes": [1, 1, 2, 4]},
                "OutputCountTensor": {"DataType": "UINT32", "Sizes": [1, 1, 1, 1]},
                "OutputCoordinatesTensor": {"DataType": "UINT32", "Sizes": [1, 1, 8, 3]},
            },
        },
        {"InputTensor": [1.0, 0.0, 0.0, 2.0, -0.0, 3.5, 0.0, -5.2]},
        "four nonzeros of a 2x4 matrix, 3 coordinates each, rows past the count 0 (the page's)",
    ),
)
