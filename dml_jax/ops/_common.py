"""Rules and helpers shared by the element-wise families (each exists once, here)."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
from jax import lax

from ..errors import Validator
from ..tensor import ScaleBias, TensorDesc


def scale_bias_rule(v: Validator, scale_bias: ScaleBias | None, x: TensorDesc) -> None:
    # DirectML does not support ScaleBias on 64-bit integers and leaves other integer types
    # unspecified; dml_jax rejects it on every integer type rather than guess a rounding.
    v.check(
        "ScaleBias",
        scale_bias is None or x.data_type.is_float,
        f"is supported only for float tensors in dml_jax, not {x.data_type.name}",
    )


def apply_scale_bias(x, scale_bias: ScaleBias | None):
    if scale_bias is None:
        return x
    # Computed in float32 (DML's FLOAT) and rounded once to the tensor type.
    w = wide(x)
    y = w * jnp.asarray(scale_bias.scale, w.dtype) + jnp.asarray(scale_bias.bias, w.dtype)
    return y.astype(x.dtype)


def same_tensors(d: Any, v: Validator) -> None:
    """Every tensor has InputTensor's DataType, DimensionCount and Sizes."""
    tensors = d.input_slots() + d.output_slots()
    for attr in ("data_type", "rank", "sizes"):
        v.same(attr, list(tensors[1:]), tensors[0])


def infer_same(d: Any) -> tuple[TensorDesc, ...]:
    """One output like the first input tensor."""
    return (d.input_slots()[0][1].like(),)


def float_input(d: Any) -> bool:
    """``differentiable`` of an operator whose first input carries the values: a float input has
    derivatives; the integer outputs beside them (indices, counts) take none."""
    return d.input_slots()[0][1].data_type.is_float


def wide(x):
    """The compute type of a float tensor: FLOAT16 in float32 (DML's FLOAT math), wider types
    unchanged."""
    return x.astype(jnp.float32) if x.dtype == jnp.float16 else x


def in_float32(fn, x):
    """``fn`` computed in float32 for a float16 ``x`` and rounded once (DML's FLOAT math)."""
    if x.dtype == jnp.float16:
        return fn(x.astype(jnp.float32)).astype(jnp.float16)
    return fn(x)


def below_maximum(x, m):
    """``x - m`` for ``m`` a maximum of ``x`` over some axes (broadcast to ``x``'s shape): where
    ``m`` is finite, exactly 0 for an element not below it and never above 0, with the
    difference's own derivative; elsewhere the plain difference.

    The maximum's own difference must be 0 (its exponential 1), but XLA may compute ``x``
    again in the loop of the subtraction and round it otherwise than in the maximum's loop: its
    CPU backend contracts a fused product into an FMA with the subtraction, and logits of 9.5e9
    (a constant-weight classifier's) came out 149 below their own maximum, every exponential 0.
    The comparisons read ``x`` as rounded, so they find the maximum's elements; NaN stays NaN.
    """
    d = x - m
    fix = jnp.isfinite(m) & ((x >= m) | (d > 0))
    return jnp.where(fix, d - lax.stop_gradient(d), d)
