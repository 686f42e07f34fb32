"""The reduction kernels as CUDA fast paths of REDUCE, ARGMIN and ARGMAX.

ARGMIN/ARGMAX over a non-minor axis and a numerically stable LOG_SUM_EXP need two passes (or a
variadic reduce) in lax, which XLA's GPU backend runs at roughly a quarter to a half of the copy
bandwidth; 1-byte integer MAX/MIN over a non-minor axis runs at 0.67-0.79. The kernels read the
tensor once. A fast path applies where ``reduce_plan.plan`` has a plan for the descriptor's
sizes and data type; ``dml_jax.fastpath`` lowers it for CUDA only, every other platform (and
every derivative) gets the lax lowering in ``dml_jax.ops.reduce``.

The functions on arrays (``arg_reduce``, ``log_sum_exp``, ``reduce_extreme``) run the kernel
when the shape has a plan and ``fallback`` otherwise; under ``vmap`` they fold the batch axis
into ``A`` and plan again.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax import lax

from ..enums import AxisDirection, ReduceFunction
from ..fastpath import register_fast_path
from ..ops.reduce import ARG_FUNCTIONS, lower_reduce, reduced_sizes
from .reduce import arg_reduce_kernel, lanes_kernel, log_sum_exp_kernel, packed_kernel
from .reduce_plan import arg_kernel, plan

F = ReduceFunction


def _batched(fn: Callable, fallback: Callable, axes: tuple[int, ...]):
    """``fn(x, axes, fallback)`` with a vmap rule that folds the batch axis into ``A``."""

    @jax.custom_batching.custom_vmap
    def call(x):
        return fn(x, axes, fallback)

    @call.def_vmap
    def _rule(axis_size, in_batched, x):
        del axis_size, in_batched  # custom_vmap puts the batch axis first
        shifted = tuple(i + 1 for i in axes)
        return _batched(fn, jax.vmap(fallback), shifted)(x), True

    return call


def _arg_cuda(x, axes, fallback, largest, last, out_dtype):
    p = plan(x.shape, axes, x.dtype, "arg")
    if p is None:
        return fallback(x)
    name = arg_kernel(x.dtype, p.r)
    if name == "packed":
        k = packed_kernel(x, p, largest, last)
    elif name == "lanes":
        k = lanes_kernel(x, p, largest, last)
    else:
        k = arg_reduce_kernel(x, p, largest, last)
    return lax.reshape(k.astype(out_dtype), reduced_sizes(x.shape, axes))


def arg_reduce(x, axes: tuple[int, ...], largest: bool, last: bool, out_dtype, fallback: Callable):
    """ARGMIN/ARGMAX on CUDA: the kernel where ``x``'s shape has a plan, else ``fallback(x)``.

    Args:
        x: the input array.
        axes: reduced axes, sorted.
        largest: ARGMAX (True) or ARGMIN (False).
        last: DECREASING (last extreme) instead of INCREASING (first).
        out_dtype: the index dtype of the result.
        fallback: the lax lowering, ``fallback(x)`` -> indices in keepdims shape.
    """
    fn = functools.partial(_arg_cuda, largest=largest, last=last, out_dtype=out_dtype)
    return _batched(fn, fallback, axes)(x)


def _lse_cuda(x, axes, fallback):
    p = plan(x.shape, axes, x.dtype, "lse")
    if p is None:
        return fallback(x)
    return lax.reshape(log_sum_exp_kernel(x, p), reduced_sizes(x.shape, axes))


def log_sum_exp(x, axes: tuple[int, ...], fallback: Callable):
    """LOG_SUM_EXP on CUDA: the kernel where ``x``'s shape has a plan, else ``fallback(x)``.

    Args:
        x: the input array (float16 or float32 for the kernel).
        axes: reduced axes, sorted.
        fallback: the lax lowering, ``fallback(x)`` -> result in keepdims shape, x's dtype.
    """
    return _batched(_lse_cuda, fallback, axes)(x)


def _ext_cuda(x, axes, fallback, largest):
    p = plan(x.shape, axes, x.dtype, "ext")
    if p is None:
        return fallback(x)
    y = lanes_kernel(x, p, largest, index=False)
    return lax.reshape(y, reduced_sizes(x.shape, axes))


def reduce_extreme(x, axes: tuple[int, ...], largest: bool, fallback: Callable):
    """MAX/MIN of 1-byte integers on CUDA: the kernel where planned, else ``fallback(x)``.

    Args:
        x: the input array.
        axes: reduced axes, sorted.
        largest: MAX (True) or MIN (False).
        fallback: the lax lowering, ``fallback(x)`` -> result in keepdims shape, x's dtype.
    """
    return _batched(functools.partial(_ext_cuda, largest=largest), fallback, axes)(x)


# ---------------------------------------------------------------------------------------------
# Registration: predicates on the descriptor, lowerings with the contract of ``lower_reduce``


def _axes(d: Any) -> tuple[int, ...]:
    return tuple(sorted(d.axes))


def _planned(d: Any, kind: str) -> bool:
    x = d.input_tensor
    return plan(x.sizes, _axes(d), x.dtype, kind) is not None


def _lax(d: Any) -> Callable:
    return lambda y: lower_reduce(d, y)[0]


def _arg_applies(d: Any) -> bool:
    return d.function in ARG_FUNCTIONS and _planned(d, "arg")


def _arg_lower(d: Any, x) -> tuple:
    last = d.axis_direction is AxisDirection.DECREASING
    largest = d.function is F.ARGMAX
    return (arg_reduce(x, _axes(d), largest, last, d.output_tensor.dtype, fallback=_lax(d)),)


def _lse_applies(d: Any) -> bool:
    return d.function is F.LOG_SUM_EXP and _planned(d, "lse")


def _lse_lower(d: Any, x) -> tuple:
    return (log_sum_exp(x, _axes(d), fallback=_lax(d)),)


def _ext_applies(d: Any) -> bool:
    is_int = not np.issubdtype(d.input_tensor.dtype, np.floating)
    return d.function in (F.MAX, F.MIN) and is_int and _planned(d, "ext")


def _ext_lower(d: Any, x) -> tuple:
    return (reduce_extreme(x, _axes(d), d.function is F.MAX, fallback=_lax(d)),)


for _name in ("DML_OPERATOR_REDUCE", "DML_OPERATOR_ARGMIN", "DML_OPERATOR_ARGMAX"):
    register_fast_path(_name, "arg_kernel", _arg_applies, _arg_lower)
register_fast_path("DML_OPERATOR_REDUCE", "log_sum_exp_kernel", _lse_applies, _lse_lower)
register_fast_path("DML_OPERATOR_REDUCE", "max_min_kernel", _ext_applies, _ext_lower)
