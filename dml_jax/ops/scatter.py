"""SCATTER (alias SCATTER_ELEMENTS), SCATTER_ND and ONE_HOT, on the conventions and rules of
the gather family (``indexing.py``'s docstring: indices counted from the end, out-of-range
indices dropped, the last of repeated indices winning; ONE_HOT writing OffValue along a sequence
whose index is out of range).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import jax.numpy as jnp
import numpy as np
from jax import lax

from ..enums import FeatureLevel as L
from ..errors import Validator
from ..fields import UINT, OperatorDesc, attribute, input_field, output_field
from ..registry import Example, register
from ..support import DIMS4, F2, T8, U32, rows
from ..tensor import TensorDesc
from ._common import float_input
from .indexing import (
    FILL_OR_DROP,
    GATHER_ROWS,
    IN_BOUNDS,
    ND_ROWS,
    elements_numbers,
    except_axis,
    fit_rank,
    is_signed,
    nd_parts,
    nd_rules,
    normalized_indices,
    row_major_positions,
    same_rank,
    select_winners,
    sizes_rule,
)

# --- SCATTER (SCATTER_ELEMENTS) ---------------------------------------------------------------


@dataclass(frozen=True)
class ScatterOperatorDesc(OperatorDesc):
    """DML_SCATTER_OPERATOR_DESC (alias DML_SCATTER_ELEMENTS_OPERATOR_DESC,
    DML_OPERATOR_SCATTER_ELEMENTS): ``output = input`` then ``output[i with i[Axis] =
    indices[i]] = updates[i]`` (FL 1_0).

    Fields:
        input_tensor: the values kept where no update lands.
        indices_tensor: same DimensionCount; Sizes equal InputTensor's except along Axis.
            INT32/INT64 indices may be negative (from the end); an update whose index is out of
            range is dropped. Where indices repeat, the last update (row-major) wins.
        updates_tensor: IndicesTensor's Sizes, InputTensor's data type.
        output_tensor: InputTensor's Sizes and data type.
        axis: the dimension scattered along, < DimensionCount.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_SCATTER"
    input_tensor: TensorDesc = input_field()
    indices_tensor: TensorDesc = input_field()
    updates_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    axis: int = attribute(UINT)


def _infer_like_input(d: Any) -> tuple[TensorDesc, ...]:
    return (TensorDesc(d.input_tensor.data_type, d.input_tensor.sizes),)


def _updates_type(d: Any, v: Validator) -> None:
    v.equal(
        "UpdatesTensor.DataType",
        d.updates_tensor.data_type,
        d.input_tensor.data_type,
        "InputTensor.DataType",
    )


def validate_scatter(d: ScatterOperatorDesc, v: Validator) -> None:
    same_rank(d, v)
    v.axis("Axis", d.axis, d.input_tensor.rank)
    except_axis(v, "IndicesTensor", d.indices_tensor, "InputTensor", d.input_tensor, d.axis)
    _updates_type(d, v)
    for i, (s, want) in enumerate(zip(d.updates_tensor.sizes, d.indices_tensor.sizes)):
        v.equal(f"UpdatesTensor.Sizes[{i}]", s, want, f"IndicesTensor.Sizes[{i}]")


def _position_dtype(count: int):
    """The narrowest unsigned type holding 0 (no update) and positions 1 to ``count``."""
    for dtype in (jnp.uint8, jnp.uint16):
        if count <= np.iinfo(dtype).max:
            return dtype
    return jnp.uint32


def lower_scatter(d: ScatterOperatorDesc, x, idx, updates):
    a = d.axis
    i = normalized_indices(idx, x.shape[a], is_signed(d.indices_tensor))
    # Each line along Axis only receives its own line's updates, so the winner is a position
    # along Axis (1-based, 0 = none): a narrow type keeps the winner array small next to the
    # output (uint8 up to 255 updates per line).
    pos_type = _position_dtype(updates.shape[a])
    at = lax.broadcasted_iota(pos_type, updates.shape, a) + jnp.asarray(1, pos_type)
    dn = elements_numbers(x.ndim, a, scatter=True)
    winner = lax.scatter_max(jnp.zeros(x.shape, pos_type), i[..., None], at, dn, mode=FILL_OR_DROP)
    # The winners read back along Axis (GATHER_ELEMENTS on the updates), selected over x.
    back = jnp.maximum(winner, jnp.asarray(1, pos_type)) - jnp.asarray(1, pos_type)
    gn = elements_numbers(x.ndim, a, scatter=False)
    taken = lax.gather(updates, back[..., None], gn, (1,) * x.ndim, mode=IN_BOUNDS)
    return (jnp.where(winner > 0, taken, x),)


_SCATTER_EXAMPLE = Example(
    {
        "type": "DML_OPERATOR_SCATTER",
        "desc": {
            "InputTensor": {"DataType": "FLOAT32", "Sizes": [3, 3]},
            "IndicesTensor": {"DataType": "UINT32", "Sizes": [2, 3]},
            "UpdatesTensor": {"DataType": "FLOAT32", "Sizes": [2, 3]},
            "OutputTensor": {"DataType": "FLOAT32", "Sizes": [3, 3]},
            "Axis": 0,
        },
    },
    {
        "InputTensor": [0] * 9,
        "IndicesTensor": [1, 0, 2, 0, 2, 1],
        "UpdatesTensor": [10, 11, 12, 20, 21, 22],
    },
    "two rows of updates scattered down the columns of a 3x3 matrix (the page's example 2)",
)

register(
    ScatterOperatorDesc,
    aliases=("DML_OPERATOR_SCATTER_ELEMENTS",),
    infer=_infer_like_input,
    validate=validate_scatter,
    lower=lower_scatter,
    differentiable=float_input,
    support=rows(
        (L.FL_1_0, DIMS4, F2, F2, {"IndicesTensor": U32}),
        *ND_ROWS,
    ),
    example=_SCATTER_EXAMPLE,
)


# --- SCATTER_ND -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScatterNdOperatorDesc(OperatorDesc):
    """DML_SCATTER_ND_OPERATOR_DESC: ``output = input`` then ``output[indices[j, :], ...] =
    updates[j, ...]``: each index tuple replaces a sub-block (FL 2_1).

    Fields:
        input_tensor: the values kept where no update lands; dimensions before its last
            InputDimensionCount are 1.
        indices_tensor: same DimensionCount; dimensions before its last IndicesDimensionCount
            are 1, its last dimension is the tuple size k <= InputDimensionCount. INT32/INT64
            coordinates may be negative (from the end); a tuple out of range is dropped; where
            tuples repeat, the last (row-major) wins.
        updates_tensor: InputTensor's data type; Sizes are the meaningful IndicesTensor.Sizes
            without the last, then the input's meaningful sizes after the first k,
            right-aligned.
        output_tensor: InputTensor's Sizes and data type.
        input_dimension_count, indices_dimension_count: the meaningful trailing dimensions,
            each in [1, DimensionCount].
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_SCATTER_ND"
    input_tensor: TensorDesc = input_field()
    indices_tensor: TensorDesc = input_field()
    updates_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    input_dimension_count: int = attribute(UINT)
    indices_dimension_count: int = attribute(UINT)

    batch_dimension_count: ClassVar[int] = 0


def validate_scatter_nd(d: ScatterNdOperatorDesc, v: Validator) -> None:
    full = nd_rules(d, v)
    _updates_type(d, v)
    sizes_rule(v, "UpdatesTensor", d.updates_tensor.sizes, fit_rank(full, d.input_tensor.rank))


def lower_scatter_nd(d: ScatterNdOperatorDesc, x, idx, updates):
    xs, is_, k, _ = nd_parts(d)
    xm, im = x.reshape(xs), idx.reshape(is_)
    i = normalized_indices(im, tuple(xs[:k]), is_signed(d.indices_tensor))
    at = row_major_positions(is_[:-1])
    dn = lax.ScatterDimensionNumbers(
        update_window_dims=(),
        inserted_window_dims=tuple(range(k)),
        scatter_dims_to_operand_dims=tuple(range(k)),
    )
    empty = jnp.full(xs[:k], -1, at.dtype)
    winner = lax.scatter_max(empty, i, at, dn, mode=FILL_OR_DROP)
    table = updates.reshape((math.prod(is_[:-1]),) + tuple(xs[k:]))
    return (select_winners(xm, winner, table).reshape(x.shape),)


register(
    ScatterNdOperatorDesc,
    infer=_infer_like_input,
    validate=validate_scatter_nd,
    lower=lower_scatter_nd,
    differentiable=float_input,
    support=rows(*ND_ROWS),
    example=Example(
        {
            "type": "DML_OPERATOR_SCATTER_ND",
            "desc": {
                "InputTensor": {"DataType": "FLOAT32", "Sizes": [1, 8]},
                "IndicesTensor": {"DataType": "UINT32", "Sizes": [4, 1]},
                "UpdatesTensor": {"DataType": "FLOAT32", "Sizes": [1, 4]},
                "OutputTensor": {"DataType": "FLOAT32", "Sizes": [1, 8]},
                "InputDimensionCount": 1,
                "IndicesDimensionCount": 2,
            },
        },
        {
            "InputTensor": [1, 2, 3, 4, 5, 6, 7, 8],
            "IndicesTensor": [4, 3, 1, 7],
            "UpdatesTensor": [9, 10, 11, 12],
        },
        "four elements of an 8-vector replaced (the page's example, tensors of equal rank)",
    ),
)


# --- ONE_HOT ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class OneHotOperatorDesc(OperatorDesc):
    """DML_ONE_HOT_OPERATOR_DESC: along Axis, every sequence is OffValue except OnValue at the
    position IndicesTensor gives (FL 2_0).

    Fields:
        indices_tensor: OutputTensor's Sizes with 1 along Axis: the on position of each
            sequence. INT32/INT64 indices may be negative (from the end); an index out of range
            leaves its whole sequence OffValue (the page's rule).
        values_tensor: at least two elements, OutputTensor's data type: element 0 is OffValue,
            element 1 along the last dimension of size > 1 is OnValue.
        output_tensor: same DimensionCount as the others; any size along Axis.
        axis: the dimension of the sequences, < DimensionCount.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_ONE_HOT"
    indices_tensor: TensorDesc = input_field()
    values_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    axis: int = attribute(UINT)


def _one_hot_sizes(d: OneHotOperatorDesc) -> tuple[int, ...]:
    depth = d.output_tensor.sizes[d.axis]
    return tuple(depth if k == d.axis else s for k, s in enumerate(d.indices_tensor.sizes))


def infer_one_hot(d: OneHotOperatorDesc) -> tuple[TensorDesc, ...]:
    return (TensorDesc(d.values_tensor.data_type, _one_hot_sizes(d)),)


def validate_one_hot(d: OneHotOperatorDesc, v: Validator) -> None:
    same_rank(d, v)
    v.axis("Axis", d.axis, d.indices_tensor.rank, "IndicesTensor")
    v.equal(f"IndicesTensor.Sizes[{d.axis}]", d.indices_tensor.sizes[d.axis], 1, "1 (along Axis)")
    v.check(
        "ValuesTensor",
        d.values_tensor.element_count >= 2,
        f"must hold at least two elements (OffValue, OnValue), got {d.values_tensor.element_count}",
    )
    sizes_rule(v, "OutputTensor", d.output_tensor.sizes, _one_hot_sizes(d))


def _on_position(sizes: tuple[int, ...]) -> tuple[int, ...]:
    """OnValue's coordinates: 1 along the last dimension of size > 1, 0 elsewhere."""
    last = max(k for k, s in enumerate(sizes) if s > 1)
    return tuple(1 if k == last else 0 for k in range(len(sizes)))


def one_hot_parts(d: OneHotOperatorDesc, idx, values):
    """``(i, on, off)``: the indices in ``[0, size)`` or -1 (out of range), OnValue, OffValue."""
    i = normalized_indices(idx, d.output_tensor.sizes[d.axis], is_signed(d.indices_tensor))
    return i, values[_on_position(values.shape)], values[(0,) * values.ndim]


def lower_one_hot(d: OneHotOperatorDesc, idx, values):
    shape = d.output_tensor.sizes
    i, on, off = one_hot_parts(d, idx, values)
    # One compare per output element, written straight into the output: no one-hot matrix is
    # built and multiplied. An out-of-range index is -1 and matches no position.
    hot = lax.broadcasted_iota(i.dtype, shape, d.axis) == i
    return (jnp.where(hot, on, off),)


register(
    OneHotOperatorDesc,
    infer=infer_one_hot,
    validate=validate_one_hot,
    lower=lower_one_hot,
    differentiable=lambda d: d.values_tensor.data_type.is_float,
    support=rows(
        (L.FL_2_0, DIMS4, F2, F2, {"IndicesTensor": U32}),
        (L.FL_2_1, DIMS4, T8, T8, {"IndicesTensor": U32}),
        *GATHER_ROWS,
    ),
    example=Example(
        {
            "type": "DML_OPERATOR_ONE_HOT",
            "desc": {
                "IndicesTensor": {"DataType": "INT32", "Sizes": [1, 1, 3, 1]},
                "ValuesTensor": {"DataType": "FLOAT32", "Sizes": [1, 1, 1, 2]},
                "OutputTensor": {"DataType": "FLOAT32", "Sizes": [1, 1, 3, 4]},
                "Axis": 3,
            },
        },
        {"IndicesTensor": [-3, 100, 3], "ValuesTensor": [0, 1]},
        "a negative index from the end and an ignored out-of-range one (the page's example 4)",
    ),
)
