"""DML_OPERATOR_TOP_K and DML_OPERATOR_TOP_K1: the K largest (or smallest) elements along an axis.

Conventions (docs/semantics.md, "TOP_K / TOP_K1"):
- Ties: equal values come out by ascending index, in either direction (the pages' rule).
- Order: the search order of ARGMAX / ARGMIN (``reduce.order_keys``): -0.0 ties with +0.0, and
  NaN is the extreme of the search, above +inf when selecting the largest and below -inf when
  selecting the smallest; so TOP_K1 with K = 1 reports what ARGMAX / ARGMIN (INCREASING) do.
- K may equal the axis size (a full sort); the pages say "less than", which would forbid
  ONNX's TopK with K equal to the axis size, a call ONNX Runtime passes on to DirectML as is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import jax.numpy as jnp
from jax import lax

from ..enums import AxisDirection
from ..enums import FeatureLevel as L
from ..errors import UINT32_MAX, Validator
from ..fields import UINT, OperatorDesc, attribute, enum_type, input_field, output_field
from ..registry import Example, register
from ..support import DIMS1_8, DIMS4, F2, T8, T10, U32, rows, types
from ..tensor import TensorDesc
from ._common import float_input
from .reduce import order_keys


@dataclass(frozen=True)
class TopKOperatorDesc(OperatorDesc):
    """DML_TOP_K_OPERATOR_DESC: the K largest elements of each sequence along Axis, sorted
    descending, with their indices (FL 1_0; its page labels its first table 2_0).

    Fields:
        input_tensor: the tensor searched.
        output_value_tensor: InputTensor's sizes with K on Axis, InputTensor's data type.
        output_index_tensor: the same sizes; the index of each value within its sequence (UINT32;
            UINT64 too from 5_0). Equal values are listed by ascending index.
        axis: the dimension searched, in [0, InputTensor.DimensionCount - 1].
        k: the count selected: >= 1 and at most InputTensor.Sizes[Axis].
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_TOP_K"
    input_tensor: TensorDesc = input_field()
    output_value_tensor: TensorDesc = output_field()
    output_index_tensor: TensorDesc = output_field()
    axis: int = attribute(UINT)
    k: int = attribute(UINT)

    @property
    def axis_direction(self) -> AxisDirection:
        return AxisDirection.DECREASING


@dataclass(frozen=True)
class TopK1OperatorDesc(OperatorDesc):
    """DML_TOP_K1_OPERATOR_DESC: TOP_K with a direction (FL 2_1).

    Fields as ``TopKOperatorDesc``, and:
        axis_direction: DECREASING selects the K largest in descending order (TOP_K),
            INCREASING the K smallest in ascending order; ties by ascending index in both.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_TOP_K1"
    input_tensor: TensorDesc = input_field()
    output_value_tensor: TensorDesc = output_field()
    output_index_tensor: TensorDesc = output_field()
    axis: int = attribute(UINT)
    k: int = attribute(UINT)
    axis_direction: AxisDirection = attribute(enum_type(AxisDirection))


def _out_sizes(d: Any) -> tuple[int, ...]:
    sizes = list(d.input_tensor.sizes)
    if 0 <= d.axis < len(sizes):
        sizes[d.axis] = d.k
    return tuple(sizes)


def infer_top_k(d: Any) -> tuple[TensorDesc, ...]:
    x = d.input_tensor
    sizes = _out_sizes(d)
    return (x.like(sizes=sizes), x.like(sizes=sizes, data_type=d.output_index_tensor.data_type))


def validate_top_k(d: Any, v: Validator) -> None:
    x = d.input_tensor
    v.axis("Axis", d.axis, x.rank)
    v.check("K", d.k >= 1, f"must be > 0, got {d.k}")
    n = x.sizes[d.axis]
    v.check("K", d.k <= n, f"must be <= InputTensor.Sizes[{d.axis}] ({n}), got {d.k}")
    total = x.element_count // n * d.k
    v.check("K", total <= UINT32_MAX, f"makes outputs of {total} elements; at most {UINT32_MAX}")
    v.outputs_match(d.output_slots(), infer_top_k(d))


def top_k(x, axis: int, k: int, largest: bool, index_dtype):
    """Values and indices of the ``k`` largest (or smallest) of ``x`` along ``axis``.

    The search runs on integer keys: ``order_keys`` (ARGMAX/ARGMIN's order: -0.0 ties +0.0, NaN
    the extreme) and, for the smallest, their bitwise complement (order reversed without
    overflow). lax.top_k lists equal keys by ascending index (its documented rule), which is
    DirectML's tie rule in both directions. The values are gathered from ``x`` at the indices,
    so -0.0 and NaN keep their bits, and the gradient flows to the selected elements only.
    """
    keys = order_keys(lax.stop_gradient(x), largest)
    if not largest:
        keys = lax.bitwise_not(keys)
    _, index = lax.top_k(keys, k, axis=axis)
    values = jnp.take_along_axis(x, index, axis=axis, mode="promise_in_bounds")
    return values, index.astype(index_dtype)


def lower_top_k(d: Any, x):
    largest = d.axis_direction is AxisDirection.DECREASING
    return top_k(x, d.axis, d.k, largest, d.output_index_tensor.dtype)


U32_64 = types("UINT32", "UINT64")
_INDEX = "OutputIndexTensor"
_TOP_K_LATER = (
    (L.FL_2_1, DIMS4, T8, T8, {_INDEX: U32}),
    (L.FL_3_1, DIMS1_8, T8, T8, {_INDEX: U32}),
    (L.FL_5_0, DIMS1_8, T10, T10, {_INDEX: U32_64}),
)


def _example(operator_type: str) -> Example:
    """The pages' example 3 (ties), as DxDispatch JSON."""
    desc = {
        "InputTensor": {"DataType": "FLOAT32", "Sizes": [1, 1, 3, 4]},
        "OutputValueTensor": {"DataType": "FLOAT32", "Sizes": [1, 1, 3, 3]},
        "OutputIndexTensor": {"DataType": "UINT32", "Sizes": [1, 1, 3, 3]},
        "Axis": 3,
        "K": 3,
    }
    if operator_type.endswith("TOP_K1"):
        desc["AxisDirection"] = "INCREASING"
    note = "the three " + ("smallest" if "AxisDirection" in desc else "largest")
    return Example(
        {"type": operator_type, "desc": desc},
        {"InputTensor": [1, 2, 2, 3, 3, 4, 5, 5, 6, 6, 6, 6]},
        note + " of each row, ties by ascending index",
    )


register(
    TopKOperatorDesc,
    infer=infer_top_k,
    validate=validate_top_k,
    lower=lower_top_k,
    support=rows((L.FL_1_0, DIMS4, F2, F2, {_INDEX: U32}), *_TOP_K_LATER),
    differentiable=float_input,
    example=_example("DML_OPERATOR_TOP_K"),
)
register(
    TopK1OperatorDesc,
    infer=infer_top_k,
    validate=validate_top_k,
    lower=lower_top_k,
    support=rows(*_TOP_K_LATER),
    differentiable=float_input,
    example=_example("DML_OPERATOR_TOP_K1"),
)
