"""Element-wise math, comparisons, logic, selection and casts.

Each ONNX op becomes the DML operator ONNX Runtime's DirectML provider uses for it
(``DmlOperatorElementWise.cpp``); broadcasting is DirectML's: every input reads its data at the
output's sizes through stride-0 strides. ONNX BOOL is UINT8 (0 or 1) in the graph.
"""

from __future__ import annotations

from dataclasses import replace

import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax

from ...tensor import ScaleBias
from ..elements import CARRIED, data_type_of
from ..importer import broadcast, packed
from . import converter, register
from ._common import (
    DataType,
    binary,
    binary_value,
    broadcast_shape,
    cast_value,
    op,
    select_value,
    unary,
)

_FLOATS = (DataType.FLOAT32, DataType.FLOAT16, DataType.FLOAT64)

for _onnx, _dml in (
    ("Add", "ADD"),
    ("Sub", "SUBTRACT"),
    ("Mul", "MULTIPLY"),
    ("Div", "DIVIDE"),
    ("BitwiseAnd", "BIT_AND"),
    ("BitwiseOr", "BIT_OR"),
    ("BitwiseXor", "BIT_XOR"),
):
    register(_onnx, binary(f"ELEMENT_WISE_{_dml}"))
for _onnx, _dml in (
    ("Sqrt", "SQRT"),
    ("Exp", "EXP"),
    ("Log", "LOG"),
    ("Neg", "NEGATE"),
    ("Erf", "ERF"),
    ("Reciprocal", "RECIP"),
    ("Sign", "SIGN"),
    ("Ceil", "CEIL"),
    ("Floor", "FLOOR"),
    ("Sin", "SIN"),
    ("Cos", "COS"),
    ("Tan", "TAN"),
    ("Asin", "ASIN"),
    ("Acos", "ACOS"),
    ("Atan", "ATAN"),
    ("Sinh", "SINH"),
    ("Cosh", "COSH"),
    ("Asinh", "ASINH"),
    ("Acosh", "ACOSH"),
    ("Atanh", "ATANH"),
    ("BitwiseNot", "BIT_NOT"),
):
    register(_onnx, unary(f"ELEMENT_WISE_{_dml}"))
# Comparisons and logic write UINT8 0/1: ONNX BOOL.
for _onnx, _dml in (
    ("Equal", "EQUALS"),
    ("Less", "LESS_THAN"),
    ("Greater", "GREATER_THAN"),
    ("GreaterOrEqual", "GREATER_THAN_OR_EQUAL"),
    ("LessOrEqual", "LESS_THAN_OR_EQUAL"),
    ("And", "AND"),
    ("Or", "OR"),
    ("Xor", "XOR"),
):
    register(_onnx, binary(f"ELEMENT_WISE_LOGICAL_{_dml}", is_bool=True))


def _to_bool(name: str, **fixed):
    """A one-input DML operator whose UINT8 output is ONNX BOOL (IsNaN, IsInf, Not)."""

    def convert(ctx, node, inputs):
        (x,) = inputs
        desc = op(name)(packed(x.data_type, x.shape), packed(DataType.UINT8, x.shape), **fixed)
        return [ctx.out(ctx.node(desc, [x]), x.shape, is_bool=True)]

    return convert


register("IsNaN", _to_bool("ELEMENT_WISE_IS_NAN"))
register("Not", _to_bool("ELEMENT_WISE_LOGICAL_NOT"))


@converter("IsInf")
def _is_inf(ctx, node, inputs):
    positive = bool(ctx.attr("detect_positive", 1))
    negative = bool(ctx.attr("detect_negative", 1))
    if not (positive or negative):
        # No DML mode finds nothing (ONNX Runtime's provider maps this case to EITHER, which
        # contradicts ONNX): the answer is all false whatever the input, known at import.
        return [ctx.constant(np.zeros(inputs[0].shape, np.bool_))]
    mode = "EITHER" if positive and negative else ("POSITIVE" if positive else "NEGATIVE")
    return _to_bool("ELEMENT_WISE_IS_INFINITY", infinity_mode=mode)(ctx, node, inputs)


@converter("Abs")
def _abs(ctx, node, inputs):
    # ABS takes signed types only; |x| of an unsigned x is x (the provider's IDENTITY).
    (x,) = inputs
    name = "ELEMENT_WISE_ABS"
    if x.data_type in (DataType.UINT8, DataType.UINT16, DataType.UINT32, DataType.UINT64):
        name = "ELEMENT_WISE_IDENTITY"
    return unary(name)(ctx, node, inputs)


@converter("Round")
def _round(ctx, node, inputs):
    return unary("ELEMENT_WISE_ROUND", rounding_mode="HALVES_TO_NEAREST_EVEN")(ctx, node, inputs)


@converter("Mod")
def _mod(ctx, node, inputs):
    # fmod=1: C's fmod (the dividend's sign); fmod=0: the divisor's sign, as Python's %.
    name = "TRUNCATE" if int(ctx.attr("fmod", 0)) else "FLOOR"
    return binary(f"ELEMENT_WISE_MODULUS_{name}")(ctx, node, inputs)


_UNSIGNED = {
    DataType.INT8: DataType.UINT8,
    DataType.INT16: DataType.UINT16,
    DataType.INT32: DataType.UINT32,
}


@converter("BitShift")
def _bit_shift(ctx, node, inputs):
    direction = ctx.attr("direction")
    if direction not in ("LEFT", "RIGHT"):
        raise ctx.fail(f"direction must be 'LEFT' or 'RIGHT', got '{direction}'")
    name = f"ELEMENT_WISE_BIT_SHIFT_{direction}"
    x, y = inputs
    unsigned = _UNSIGNED.get(x.data_type)
    if unsigned is None:  # BitShift-11's unsigned types: the provider's one operator
        return binary(name)(ctx, node, inputs)
    # BitShift-28's signed types: DirectML shifts unsigned types only, so the bits are shifted
    # as the unsigned type of the same width (CAST keeps the low bits both ways). A negative
    # amount reads as one of at least the width, which shifts everything out, as ONNX says.
    # The right shift is arithmetic: a negative x is shifted as ~x and complemented back, so
    # the vacated bits are ones.
    shape = broadcast_shape(ctx, x.shape, y.shape)
    ux = cast_value(ctx, x, unsigned)
    uy = cast_value(ctx, y, unsigned)
    shifted = binary_value(ctx, name, ux, uy)
    if direction == "RIGHT":
        flipped = _unary_value(ctx, "ELEMENT_WISE_BIT_NOT", ux)
        filled = _unary_value(ctx, "ELEMENT_WISE_BIT_NOT", binary_value(ctx, name, flipped, uy))
        zero = ctx.constant(np.zeros((), np.dtype(x.data_type.numpy_dtype)))
        negative = binary_value(ctx, "ELEMENT_WISE_LOGICAL_LESS_THAN", x, zero, is_bool=True)
        shifted = select_value(ctx, negative, filled, shifted, shape)
    return [cast_value(ctx, shifted, x.data_type)]


def _unary_value(ctx, name: str, x):
    t = packed(x.data_type, x.shape)
    return ctx.out(ctx.node(op(name)(t, t), [x]), x.shape)


def _variadic(name: str):
    """Sum, Max, Min: the provider's pairwise loop, every input read at the output's shape."""

    def convert(ctx, node, inputs):
        return [_fold_pairwise(ctx, name, inputs)]

    return convert


def _fold_pairwise(ctx, name, inputs):
    if len(inputs) == 1:
        return inputs[0]
    shape = broadcast_shape(ctx, *(v.shape for v in inputs))
    acc = inputs[0]
    for v in inputs[1:]:
        t = acc.data_type
        desc = op(name)(broadcast(acc, shape), broadcast(v, shape), packed(t, shape))
        acc = ctx.out(ctx.node(desc, [acc, v]), shape)
    return acc


register("Sum", _variadic("ELEMENT_WISE_ADD"))
register("Max", _variadic("ELEMENT_WISE_MAX"))
register("Min", _variadic("ELEMENT_WISE_MIN"))


@converter("Mean")
def _mean(ctx, node, inputs):
    # Two inputs: MEAN; more: the ADD loop, then an IDENTITY scaled by 1 / count (the provider's).
    if len(inputs) == 2:
        return binary("ELEMENT_WISE_MEAN")(ctx, node, inputs)
    total = _fold_pairwise(ctx, "ELEMENT_WISE_ADD", inputs)
    if len(inputs) == 1:
        return [total]
    t = packed(total.data_type, total.shape)
    scale = ScaleBias(1.0 / len(inputs), 0.0)
    desc = op("ELEMENT_WISE_IDENTITY")(t, t, scale_bias=scale)
    return [ctx.out(ctx.node(desc, [total]), total.shape)]


@converter("Clip")
def _clip(ctx, node, inputs):
    x = inputs[0]
    if ctx.opset < 11:  # Clip-6: FLOAT attributes (float tensors only)
        lo = float(ctx.attr("min", float(np.finfo(np.float32).min)))
        hi = float(ctx.attr("max", float(np.finfo(np.float32).max)))
        return [_clip_value(ctx, x, lo, hi)]
    # Clip-11+: optional scalar inputs, which the provider reads on the CPU; absent means the
    # type's limits (ONNX's numeric_limits lowest and max).
    bounds = list(inputs[1:3]) + [None] * (3 - len(inputs))
    if all(b is None or b.const is not None for b in bounds):
        lo, hi = _type_limits(x.data_type)
        if bounds[0] is not None:
            lo = _scalar(ctx, bounds[0], "min")
        if bounds[1] is not None:
            hi = _scalar(ctx, bounds[1], "max")
        return [_clip_value(ctx, x, lo, hi)]
    # A bound computed at run time: ONNX's own formula Min(max, Max(x, min)) with DirectML's
    # MAX and MIN reading the bound broadcast (exact, and no specialisation on its value).
    y = x
    for bound, name, what in ((bounds[0], "MAX", "min"), (bounds[1], "MIN", "max")):
        if bound is not None:
            if int(np.prod(bound.shape)) != 1:
                raise ctx.fail(f"input '{what}' must be a scalar, got shape {list(bound.shape)}")
            desc = op(f"ELEMENT_WISE_{name}")(
                packed(x.data_type, x.shape),
                broadcast(bound, x.shape),
                packed(x.data_type, x.shape),
            )
            y = ctx.out(ctx.node(desc, [y, bound]), x.shape)
    return [y]


def _scalar(ctx, v, what: str):
    value = np.asarray(ctx.const(v, what))
    if value.size != 1:
        raise ctx.fail(f"input '{what}' must be a scalar, got shape {list(value.shape)}")
    return value.reshape(()).item()


def _type_limits(data_type: DataType) -> tuple:
    dtype = np.dtype(data_type.numpy_dtype)
    if dtype.kind == "f":
        return float(np.finfo(dtype).min), float(np.finfo(dtype).max)
    return int(np.iinfo(dtype).min), int(np.iinfo(dtype).max)


def _clip_value(ctx, x, lo, hi):
    """CLIP (float tensors: FLOAT bounds) or CLIP1 (integers: bounds typed exactly, which a
    FLOAT cannot do for every int32). DirectML computes max(Min, min(x, Max)), which is Min
    where Min > Max; ONNX gives Max there, so Min is lowered to Max first."""
    lo = min(lo, hi)
    t = packed(x.data_type, x.shape)
    if x.data_type in _FLOATS:
        desc = op("ELEMENT_WISE_CLIP")(t, t, min=float(lo), max=float(hi))
    else:
        desc = op("ELEMENT_WISE_CLIP1")(
            t, t, min=int(lo), max=int(hi), min_max_data_type=x.data_type
        )
    return ctx.out(ctx.node(desc, [x]), x.shape)


@converter("Pow")
def _pow(ctx, node, inputs):
    x, y = inputs
    if (
        y.const is not None
        and y.const.size == 1
        and x.data_type in (DataType.FLOAT32, DataType.FLOAT16)
        and broadcast_shape(ctx, x.shape, y.shape) == x.shape
    ):
        # A constant scalar exponent: CONSTANT_POW with a FLOAT exponent (float tensors only,
        # the operator's support table; an integer base keeps POW).
        t = packed(x.data_type, x.shape)
        exponent = float(np.asarray(y.const, np.float64).reshape(()))
        return [ctx.out(ctx.node(op("ELEMENT_WISE_CONSTANT_POW")(t, t, exponent=exponent), [x]),
                        x.shape)]  # fmt: skip
    shape = broadcast_shape(ctx, x.shape, y.shape)
    desc = op("ELEMENT_WISE_POW")(
        broadcast(x, shape), broadcast(y, shape), packed(x.data_type, shape)
    )
    return [ctx.out(ctx.node(desc, [x, y]), shape)]


@converter("Where")
def _where(ctx, node, inputs):
    cond, a, b = inputs
    return [select_value(ctx, cond, a, b, broadcast_shape(ctx, cond.shape, a.shape, b.shape))]


_FLOAT8 = (17, 18, 19, 20)  # FLOAT8E4M3FN, FLOAT8E4M3FNUZ, FLOAT8E5M2, FLOAT8E5M2FNUZ
_E8M0 = 24


def carried_convert(x, elem: int, saturate: bool = True, round_mode: str = "up"):
    """The JAX array ``x`` converted to the ONNX type ``elem`` that no DML tensor holds
    (``elements.CARRIED``), by ONNX's Cast rules:

    - float8 with ``saturate``: values beyond the largest finite one (infinities too) become it,
      NaN stays NaN; without: the plain conversion (NaN, or infinity for FLOAT8E5M2);
    - FLOAT8E8M0: the exponent of x, rounded as ``round_mode`` says ('up' when any fraction
      bit is set, 'nearest' on the guard, round and sticky bits, 'down' not at all); NaN and
      infinities are NaN; ``saturate`` keeps the largest exponent from rounding into NaN;
    - the 4- and 2-bit integers: a float is truncated toward zero and, like an integer, wraps
      to the type's bits (its value modulo 16 or 4, two's complement), as ONNX's expected
      values do; NaN and infinities become 0;
    - bfloat16 and FLOAT4E2M1: nearest, ties to even (FLOAT4E2M1 saturates; NaN becomes -0).
    """
    dtype = CARRIED[elem][1]
    if elem in _FLOAT8 and saturate:
        big = float(jnp.finfo(dtype).max)
        x = x.astype(jnp.promote_types(x.dtype, jnp.float32))
        return jnp.clip(x, -big, big).astype(dtype)
    if elem == _E8M0:
        return _to_e8m0(x, saturate, round_mode)
    if jnp.issubdtype(dtype, jnp.integer):
        bits = ml_dtypes.iinfo(dtype).bits
        if jnp.issubdtype(x.dtype, jnp.floating):
            f = x.astype(jnp.float32)
            f = jnp.where(jnp.isfinite(f), jnp.fmod(jnp.trunc(f), 2.0**bits), 0.0)
            x = f.astype(jnp.int32)
        low = x.astype(jnp.int32) & (2**bits - 1)
        if jnp.issubdtype(dtype, jnp.signedinteger):
            low = (low ^ 2 ** (bits - 1)) - 2 ** (bits - 1)
        return low.astype(dtype)
    return x.astype(dtype)


def _to_e8m0(x, saturate: bool, round_mode: str):
    bits = lax.bitcast_convert_type(x.astype(jnp.float32), jnp.uint32)
    exponent = ((bits >> 23) & 0xFF).astype(jnp.int32)
    special = exponent == 0xFF
    if round_mode == "nearest":
        guard = (bits & 0x400000) != 0
        rest = (bits & 0x3FFFFF) != 0
        up = guard & (rest | (exponent > 0))
    elif round_mode == "up":
        up = (bits & 0x7FFFFF) != 0
    else:
        up = jnp.zeros(x.shape, bool)
    up = up & ~special
    if saturate:
        up = up & (exponent != 0xFE)
    byte = jnp.where(special, 0xFF, exponent + up.astype(jnp.int32)) & 0xFF
    return lax.bitcast_convert_type(byte.astype(jnp.uint8), jnp.float8_e8m0fnu)


def _cast_carried(ctx, x, elem: int):
    """Cast / CastLike to a type no DML tensor holds: a JAX node (``carried_convert``) writing
    the type's carrier."""
    if x.carried == elem:
        return x
    saturate = bool(ctx.attr("saturate", 1)) if ctx.opset >= 19 else True
    round_mode = ctx.attr("round_mode", "up") if ctx.opset >= 24 else "up"
    if round_mode not in ("up", "down", "nearest"):
        raise ctx.fail(f"attribute 'round_mode' must be up, down or nearest, got '{round_mode}'")
    if x.is_bool:
        x = cast_value(ctx, x, DataType.UINT8)
    return ctx.carry(x, elem, lambda a: carried_convert(a, elem, saturate, round_mode))


def _cast_to(ctx, x, target: DataType, to_bool: bool, elem: int = 0):
    if elem in CARRIED:
        return _cast_carried(ctx, x, elem)
    if x.carried:  # a carried value's carrier holds it exactly: cast from there, untagged
        x = replace(x, carried=0)
    if to_bool and x.is_bool:
        return x
    if to_bool:
        # BOOL is x != 0: 1 - (x == 0), so 0.5 and NaN are true (a CAST to UINT8 would
        # truncate 0.5 to 0).
        zero = ctx.constant(np.zeros((), np.dtype(x.data_type.numpy_dtype)))
        eq = binary_value(ctx, "ELEMENT_WISE_LOGICAL_EQUALS", x, zero, is_bool=True)
        one = ctx.constant(np.ones((), np.uint8))
        shape = eq.shape
        desc = op("ELEMENT_WISE_SUBTRACT")(
            broadcast(one, shape), broadcast(eq, shape), packed(DataType.UINT8, shape)
        )
        return ctx.out(ctx.node(desc, [one, eq]), shape, is_bool=True)
    return cast_value(ctx, x, target)


@converter("Cast")
def _cast(ctx, node, inputs):
    (x,) = inputs
    to = int(ctx.attr("to"))
    return [_cast_to(ctx, x, data_type_of(to, ctx.where), to == 9, to)]


@converter("CastLike")
def _cast_like(ctx, node, inputs):
    x, like = inputs
    return [_cast_to(ctx, x, like.data_type, like.is_bool, like.carried)]
