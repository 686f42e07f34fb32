"""DML_OPERATOR_REDUCE (twelve functions) and the standalone ARGMIN / ARGMAX operators.

Conventions (documented in the README's semantics section and tested):
- Rank is kept: reduced axes become size 1.
- FLOAT16 inputs accumulate in float32 and round once at the end; integer SUM, MULTIPLY, L1 and
  SUM_SQUARE wrap around in the tensor type (modular arithmetic, independent of order).
- LOG_SUM_EXP subtracts the maximum before exponentiating, so large inputs do not overflow.
- ARGMIN/ARGMAX return one row-major linear index over the reduced axes taken in increasing
  dimension order; INCREASING reports the first of equal extremes, DECREASING the last. NaN
  counts as the extreme for both (as in NumPy), so the first (or last) NaN is reported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..enums import AxisDirection, ReduceFunction
from ..enums import FeatureLevel as L
from ..errors import Validator
from ..fields import (
    UINT_ARRAY,
    OperatorDesc,
    attribute,
    count_of,
    enum_type,
    input_field,
    output_field,
)
from ..registry import Example, register
from ..support import DIMS1_8, DIMS4, F2, IDX, S4, S6, T8, T10, U32, rows
from ..tensor import TensorDesc
from ._common import below_maximum, wide

F = ReduceFunction
ARG_FUNCTIONS = (F.ARGMAX, F.ARGMIN)


@dataclass(frozen=True)
class ReduceOperatorDesc(OperatorDesc):
    """DML_REDUCE_OPERATOR_DESC: reduces InputTensor over Axes with Function (FL 1_0).

    Fields:
        function: a ``ReduceFunction`` (note: the first member, as in the DML struct).
        input_tensor: the tensor to reduce.
        output_tensor: input sizes with 1 on every reduced axis; same data type, except for
            ARGMIN/ARGMAX, whose output is an index type (UINT32; INT32/INT64/UINT64 from 3_0).
        axes: non-empty, unique, each in [0, InputTensor.DimensionCount - 1]; order is irrelevant.
        axis_count: optional; must equal ``len(axes)``.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_REDUCE"
    function: ReduceFunction = attribute(enum_type(ReduceFunction))
    input_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    axes: tuple[int, ...] = attribute(UINT_ARRAY)
    axis_count: int | None = count_of("axes")

    @property
    def axis_direction(self) -> AxisDirection:
        return AxisDirection.INCREASING


@dataclass(frozen=True)
class ArgMinOperatorDesc(OperatorDesc):
    """DML_ARGMIN_OPERATOR_DESC: index of the minimum over Axes (FL 3_0).

    Fields:
        input_tensor: the tensor searched.
        output_tensor: input sizes with 1 on reduced axes; INT32, INT64, UINT32 or UINT64.
        axes: non-empty, unique, in range; the index is row-major over them in increasing order.
        axis_direction: INCREASING (first of equal minima) or DECREASING (last).
        axis_count: optional; must equal ``len(axes)``.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_ARGMIN"
    input_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    axes: tuple[int, ...] = attribute(UINT_ARRAY)
    axis_direction: AxisDirection = attribute(enum_type(AxisDirection), default="INCREASING")
    axis_count: int | None = count_of("axes")

    function: ClassVar[ReduceFunction] = F.ARGMIN


@dataclass(frozen=True)
class ArgMaxOperatorDesc(OperatorDesc):
    """DML_ARGMAX_OPERATOR_DESC: index of the maximum over Axes (FL 3_0).

    Fields as ``ArgMinOperatorDesc``.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_ARGMAX"
    input_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    axes: tuple[int, ...] = attribute(UINT_ARRAY)
    axis_direction: AxisDirection = attribute(enum_type(AxisDirection), default="INCREASING")
    axis_count: int | None = count_of("axes")

    function: ClassVar[ReduceFunction] = F.ARGMAX


def reduced_sizes(sizes: tuple[int, ...], axes: tuple[int, ...]) -> tuple[int, ...]:
    """Sizes with 1 on every reduced axis (rank kept)."""
    return tuple(1 if i in axes else s for i, s in enumerate(sizes))


def infer_reduce(d: Any) -> tuple[TensorDesc, ...]:
    out_type = d.output_tensor.data_type if d.function in ARG_FUNCTIONS else None
    x = d.input_tensor
    return (x.like(sizes=reduced_sizes(x.sizes, d.axes), data_type=out_type or x.data_type),)


def validate_reduce(d: Any, v: Validator) -> None:
    v.axes("Axes", d.axes, d.input_tensor.rank)
    v.outputs_match(d.output_slots(), infer_reduce(d))


@partial(jax.custom_jvp, nondiff_argnums=(1,))
def _l2(x, axes):
    return lax.sqrt(lax.reduce_sum(x * x, axes))


@_l2.defjvp
def _l2_jvp(axes, primals, tangents):
    # d||x|| = <x, dx> / ||x||; at ||x|| = 0 we take the zero subgradient instead of NaN.
    (x,), (t,) = primals, tangents
    y = _l2(x, axes)
    nonzero = y > 0
    return y, jnp.where(nonzero, lax.reduce_sum(x * t, axes) / jnp.where(nonzero, y, 1), 0)


def _log_sum_exp(x, axes):
    # Shift by the maximum so exp never overflows (all 1000.0 -> 1000 + log N, not inf). The
    # shift is held constant for differentiation, giving the softmax as gradient; a non-finite
    # maximum (all -inf, or +inf present) is replaced by 0 so the result is -inf / +inf. Where
    # it is finite, its own difference is exactly 0 (``below_maximum``: XLA may round a fused
    # producer differently in the loop of the maximum and that of the exponentials), so the
    # sum is at least 1.
    m = lax.stop_gradient(lax.reduce_max(x, axes))
    finite = jnp.isfinite(m)
    m = jnp.where(finite, m, jnp.zeros_like(m))
    kept = tuple(i for i in range(x.ndim) if i not in axes)
    m_b = lax.broadcast_in_dim(m, x.shape, kept)
    d = jnp.where(lax.broadcast_in_dim(finite, x.shape, kept), below_maximum(x, m_b), x - m_b)
    return lax.log(lax.reduce_sum(lax.exp(d), axes)) + m


def _reduce_value(function: ReduceFunction, x, axes: tuple[int, ...]):
    """The non-index reductions; ``axes`` sorted, result without the reduced dimensions."""
    if function is F.MAX:
        return lax.reduce_max(x, axes)
    if function is F.MIN:
        return lax.reduce_min(x, axes)
    a = wide(x)  # FLOAT16 accumulates in float32; every other type in itself
    if function is F.SUM:
        r = lax.reduce_sum(a, axes)
    elif function is F.MULTIPLY:
        r = lax.reduce_prod(a, axes)
    elif function is F.SUM_SQUARE:
        r = lax.reduce_sum(a * a, axes)
    elif function is F.L1:
        r = lax.reduce_sum(_abs(a), axes)
    elif function is F.L2:
        r = _l2(a, axes)
    elif function is F.AVERAGE:
        n = math.prod(x.shape[i] for i in axes)
        r = lax.reduce_sum(a, axes) / jnp.asarray(n, a.dtype)
    elif function is F.LOG_SUM:
        r = lax.log(lax.reduce_sum(a, axes))
    elif function is F.LOG_SUM_EXP:
        r = _log_sum_exp(a, axes)
    else:  # pragma: no cover - ReduceFunction is closed
        raise AssertionError(function)
    return r.astype(x.dtype)


def _abs(x):
    return x if jnp.issubdtype(x.dtype, jnp.unsignedinteger) else lax.abs(x)


def order_keys(x, largest: bool):
    """Integer keys whose order is the search order of float ``x``: NaN the extreme.

    Floats become signed integers of their width with the same order (bits of a negative
    float flipped below the sign, the usual sign-magnitude to two's-complement map), with -0.0
    mapped onto +0.0 so that the two tie as IEEE says, and every NaN mapped to the one key
    beyond +inf (ARGMAX) or below -inf (ARGMIN). lax.argmax/argmin of the keys then finds the
    first extreme on every backend: XLA's GPU float argmax reports an arbitrary one of several
    NaNs, while integer ties resolve to the first index. Integers are returned unchanged.
    """
    if not jnp.issubdtype(x.dtype, jnp.floating):
        return x
    bits = 8 * x.dtype.itemsize
    itype = {16: jnp.int16, 32: jnp.int32, 64: jnp.int64}[bits]
    info = np.iinfo(itype)
    k = lax.bitcast_convert_type(x, itype)
    magnitude = k & info.max
    key = k ^ (lax.shift_right_arithmetic(k, jnp.asarray(bits - 1, itype)) & info.max)
    key = jnp.where(magnitude == 0, jnp.zeros_like(key), key)
    inf_bits = int(np.array(np.inf, x.dtype).view(itype))
    nan_key = jnp.asarray(info.max if largest else info.min, itype)
    return jnp.where(magnitude > inf_bits, nan_key, key)


def arg_reduce(x, axes: tuple[int, ...], largest: bool, last: bool, out_dtype):
    """Index of the extreme over ``axes`` as one row-major linear index, keepdims shape.

    The reduced axes (ascending) are merged into one axis of length L (in place when adjacent,
    else after moving them to the end); floats are replaced by their ``order_keys`` (so NaN and
    signed zeros behave alike on every backend); on that axis lax.argmax/argmin report the first
    extreme. For the last extreme (DECREASING) the axis is reversed and the index k maps back to
    L - 1 - k.
    """
    keep = tuple(i for i in range(x.ndim) if i not in axes)
    out_shape = reduced_sizes(x.shape, axes)
    n_red = math.prod(x.shape[i] for i in axes)
    x = order_keys(x, largest)
    if axes == tuple(range(axes[0], axes[-1] + 1)):
        # Adjacent axes merge in place: a transpose would cost a full extra pass on GPU.
        last_axis = axes[0]
        x = lax.reshape(x, x.shape[:last_axis] + (n_red,) + x.shape[axes[-1] + 1 :])
    else:
        x = lax.transpose(x, keep + axes)
        x = lax.reshape(x, tuple(x.shape[: len(keep)]) + (n_red,))
        last_axis = x.ndim - 1
    index_dtype = jnp.int32 if n_red <= np.iinfo(np.int32).max else jnp.int64
    if last:
        x = lax.rev(x, (last_axis,))
    k = (lax.argmax if largest else lax.argmin)(x, last_axis, index_dtype)
    if last:
        k = jnp.asarray(n_red - 1, index_dtype) - k
    return lax.reshape(k.astype(out_dtype), out_shape)


def lower_reduce(d: Any, x):
    axes = tuple(sorted(d.axes))
    out = d.output_tensor
    if d.function in ARG_FUNCTIONS:
        last = d.axis_direction is AxisDirection.DECREASING
        return (arg_reduce(x, axes, d.function is F.ARGMAX, last, out.dtype),)
    return (lax.reshape(_reduce_value(d.function, x, axes), out.sizes),)


def _reduce_key(d: ReduceOperatorDesc) -> str:
    return d.function.name


def _differentiable(d: Any) -> bool:
    return d.function not in ARG_FUNCTIONS and d.input_tensor.data_type.is_float


_ARG_IN_REDUCE = rows(
    (L.FL_1_0, DIMS4, F2, U32),
    (L.FL_2_1, DIMS4, T8, U32),
    (L.FL_3_0, DIMS1_8, T8, IDX),
    (L.FL_4_1, DIMS1_8, T10, IDX),
)
_FLOAT_ONLY = rows((L.FL_1_0, DIMS4, F2), (L.FL_3_0, DIMS1_8, F2))
_L1 = rows((L.FL_1_0, DIMS4, F2), (L.FL_3_0, DIMS1_8, F2), (L.FL_5_0, DIMS1_8, S6))
_MIN_MAX = rows(
    (L.FL_1_0, DIMS4, F2),
    (L.FL_2_1, DIMS4, S4),
    (L.FL_3_0, DIMS1_8, T8),
    (L.FL_5_0, DIMS1_8, T10),
)
_SUM = rows(
    (L.FL_1_0, DIMS4, F2),
    (L.FL_2_1, DIMS4, S4),
    (L.FL_3_0, DIMS1_8, S4),
    (L.FL_5_0, DIMS1_8, S6),
)
_REDUCE_SUPPORT = {
    "ARGMAX": _ARG_IN_REDUCE,
    "ARGMIN": _ARG_IN_REDUCE,
    "AVERAGE": _FLOAT_ONLY,
    "L1": _L1,
    "L2": _FLOAT_ONLY,
    "LOG_SUM": _FLOAT_ONLY,
    "LOG_SUM_EXP": _FLOAT_ONLY,
    "MAX": _MIN_MAX,
    "MIN": _MIN_MAX,
    "MULTIPLY": _SUM,
    "SUM": _SUM,
    "SUM_SQUARE": _L1,
}
_ARG = rows((L.FL_3_0, DIMS1_8, T8, IDX), (L.FL_4_1, DIMS1_8, T10, IDX))


def _example(operator_type: str, function: str | None) -> Example:
    """A {2, 3} tensor reduced over its rows (axis 1)."""
    desc = {
        "InputTensor": {"DataType": "FLOAT32", "Sizes": [2, 3]},
        "OutputTensor": {"DataType": "UINT32" if function is None else "FLOAT32", "Sizes": [2, 1]},
        "AxisCount": 1,
        "Axes": [1],
    }
    if function is not None:
        desc = {"Function": function, **desc}
    else:
        desc["AxisDirection"] = "DECREASING"
    note = "the last index of the extreme of each row" if function is None else "row sums"
    return Example({"type": operator_type, "desc": desc}, {"InputTensor": [1, 7, 7, 4, 0, 4]}, note)


register(
    ReduceOperatorDesc,
    infer=infer_reduce,
    validate=validate_reduce,
    lower=lower_reduce,
    support=_REDUCE_SUPPORT,
    support_key=_reduce_key,
    differentiable=_differentiable,
    example=_example("DML_OPERATOR_REDUCE", "SUM"),
)
for _cls in (ArgMinOperatorDesc, ArgMaxOperatorDesc):
    register(
        _cls,
        infer=infer_reduce,
        validate=validate_reduce,
        lower=lower_reduce,
        support=_ARG,
        differentiable=_differentiable,
        example=_example(_cls.operator_type, None),
    )
