"""NumPy references of 56 element-wise math, logical and bitwise operators, from their pages.

Each function takes ``(desc, *arrays)`` (arrays in schema order) and returns a one-tuple in
``desc.output_tensor.dtype``. Shared rules:

* ScaleBias (where the operator has one) maps every InputTensor element to x * Scale + Bias first,
  Scale and Bias read as float32; float tensors keep it in float64 for the function (one rounding
  at the end), integer tensors truncate toward zero and saturate (integer rounding is UNDOCUMENTED).
* Float types (FLOAT16 too) are computed in float64 and rounded once to the output type.
* Integer arithmetic is exact (Python ints), then wrapped two's complement.
* Integer division by zero (DIVIDE, MODULUS_*) returns 0: UNDOCUMENTED, our choice.
* MIN/MAX/THRESHOLD propagate NaN; comparisons follow IEEE (anything with NaN is false).
* Logical and comparison results are 1/0 in the output type.
* Bitwise operators act on the raw encoding (floats are bit patterns); a shift count at least the
  element width gives 0 (UNDOCUMENTED, our choice); the right shift is logical, as the page says.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

# ---------------------------------------------------------------------------------------------
# Helpers


def _out(desc: Any, y: Any) -> tuple[np.ndarray]:
    return (np.asarray(y).astype(desc.output_tensor.dtype),)


def _is_int(dtype: Any) -> bool:
    return np.dtype(dtype).kind in "iu"


def _wrap(values: Any, dtype: Any) -> np.ndarray:
    """Python-integer (exact) results wrapped into ``dtype`` two's complement."""
    dtype = np.dtype(dtype)
    mod = np.asarray(np.asarray(values, dtype=object) % (1 << (8 * dtype.itemsize)), dtype=object)
    return mod.astype(np.uint64).astype(f"u{dtype.itemsize}").view(dtype)


def _exact(x: np.ndarray) -> np.ndarray:
    return np.asarray(x).astype(object)


def _to_int(y: np.ndarray, dtype: Any) -> np.ndarray:
    """Float64 values to an integer type: truncate toward zero, NaN -> 0, saturate (our choice)."""
    info = np.iinfo(dtype)
    y = np.trunc(np.nan_to_num(np.asarray(y, dtype=np.float64), nan=0.0))
    exact = [min(max(int(v), int(info.min)), int(info.max)) for v in y.ravel()]
    return np.array(exact, dtype=dtype).reshape(y.shape)


def _scale_bias(x: np.ndarray, sb: Any) -> np.ndarray:
    # g(x) = x * Scale + Bias. Float tensors keep the exact value (float64) for the function:
    # one rounding at the end (docs/semantics.md); integer tensors truncate and saturate.
    if sb is None:
        return x
    w = x.astype(np.float64) * float(np.float32(sb.scale)) + float(np.float32(sb.bias))
    return _to_int(w, x.dtype) if _is_int(x.dtype) else w


def _g(desc: Any, x: np.ndarray) -> np.ndarray:
    return _scale_bias(np.asarray(x), getattr(desc, "scale_bias", None))


def _float_unary(desc: Any, x: np.ndarray, fn: Any) -> tuple[np.ndarray]:
    with np.errstate(all="ignore"):
        return _out(desc, fn(_g(desc, x).astype(np.float64)))


def _mode(value: Any, prefix: str) -> str:
    name = getattr(value, "name", value)
    return str(name).removeprefix(prefix)


def _tdiv(p: int, q: int) -> int:
    """p / q truncated toward zero; 0 when q == 0 (our choice)."""
    if q == 0:
        return 0
    quotient = abs(p) // abs(q)
    return -quotient if (p < 0) != (q < 0) else quotient


def _fmod(p: int, q: int) -> int:
    """Python's p % q (sign of the divisor); 0 when q == 0 (our choice)."""
    return 0 if q == 0 else p % q


def _tmod(p: int, q: int) -> int:
    """C's p % q (sign of the dividend); 0 when q == 0 (our choice)."""
    return 0 if q == 0 else p - q * _tdiv(p, q)


_trunc_div = np.frompyfunc(_tdiv, 2, 1)
_floor_mod = np.frompyfunc(_fmod, 2, 1)
_trunc_mod = np.frompyfunc(_tmod, 2, 1)


def _int_pow(p: int, q: int, bits: int) -> int:
    if q >= 0:
        return pow(p, q, 1 << bits)  # exact result modulo 2**bits
    # 1 / p**|q| truncated toward zero: only |p| == 1 survives; 0 ** negative gives 0 (our choice).
    return p ** (-q) if p in (1, -1) else 0


_int_pow_v = np.frompyfunc(_int_pow, 3, 1)

# ---------------------------------------------------------------------------------------------
# Unary float functions (ScaleBias first). FLOAT32/FLOAT16 only, except ABS.


def abs_(desc: Any, x: np.ndarray):
    # f(x) = |x|; integers wrap (|INT_MIN| stays INT_MIN).
    g = _g(desc, x)
    if _is_int(g.dtype):
        return (_wrap(np.abs(_exact(g)), desc.output_tensor.dtype),)
    return _out(desc, np.abs(g))


def acos(desc: Any, x: np.ndarray):
    # f(x) = arccos(x); NaN outside [-1, 1].
    return _float_unary(desc, x, np.arccos)


def acosh(desc: Any, x: np.ndarray):
    # f(x) = ln(x + sqrt(x*x - 1)); NaN below 1.
    return _float_unary(desc, x, np.arccosh)


def asin(desc: Any, x: np.ndarray):
    # f(x) = arcsin(x)
    return _float_unary(desc, x, np.arcsin)


def asinh(desc: Any, x: np.ndarray):
    # f(x) = ln(x + sqrt(x*x + 1))
    return _float_unary(desc, x, np.arcsinh)


def atan(desc: Any, x: np.ndarray):
    # f(x) = arctan(x)
    return _float_unary(desc, x, np.arctan)


def atanh(desc: Any, x: np.ndarray):
    # f(x) = ln((1 + x) / (1 - x)) / 2
    return _float_unary(desc, x, np.arctanh)


def ceil(desc: Any, x: np.ndarray):
    # f(x) = the smallest integer not below x
    return _float_unary(desc, x, np.ceil)


def constant_pow(desc: Any, x: np.ndarray):
    # f(x) = x ** Exponent (a float32 attribute); negative base with a fractional exponent -> NaN.
    e = float(np.float32(desc.exponent))
    return _float_unary(desc, x, lambda w: np.power(w, e))


def cos(desc: Any, x: np.ndarray):
    # f(x) = cos(x)
    return _float_unary(desc, x, np.cos)


def cosh(desc: Any, x: np.ndarray):
    # f(x) = cosh(x)
    return _float_unary(desc, x, np.cosh)


def erf(desc: Any, x: np.ndarray):
    # f(x) = 2 / sqrt(pi) * integral of exp(-t*t) for t from 0 to x
    return _float_unary(desc, x, np.vectorize(math.erf, otypes=[np.float64]))


def exp(desc: Any, x: np.ndarray):
    # f(x) = e ** x
    return _float_unary(desc, x, np.exp)


def floor(desc: Any, x: np.ndarray):
    # f(x) = the largest integer not above x
    return _float_unary(desc, x, np.floor)


def log(desc: Any, x: np.ndarray):
    # f(x) = ln(x); negative x -> NaN ("indefinite"), 0 -> -INF (both stated on the page).
    return _float_unary(desc, x, np.log)


def recip(desc: Any, x: np.ndarray):
    # f(x) = 1 / x
    return _float_unary(desc, x, lambda w: 1.0 / w)


def sin(desc: Any, x: np.ndarray):
    # f(x) = sin(x)
    return _float_unary(desc, x, np.sin)


def sinh(desc: Any, x: np.ndarray):
    # f(x) = sinh(x)
    return _float_unary(desc, x, np.sinh)


def sqrt(desc: Any, x: np.ndarray):
    # f(x) = sqrt(x)
    return _float_unary(desc, x, np.sqrt)


def tan(desc: Any, x: np.ndarray):
    # f(x) = tan(x)
    return _float_unary(desc, x, np.tan)


def tanh(desc: Any, x: np.ndarray):
    # f(x) = tanh(x)
    return _float_unary(desc, x, np.tanh)


# ---------------------------------------------------------------------------------------------
# Other unary operators


def negate(desc: Any, x: np.ndarray):
    # f(x) = -x; integers wrap (-INT_MIN stays INT_MIN).
    if _is_int(x.dtype):
        return (_wrap(-_exact(x), desc.output_tensor.dtype),)
    return _out(desc, -x)


def sign(desc: Any, x: np.ndarray):
    # f(x) = -1 if x < 0, 1 if x > 0, else 0 (-0 -> 0; NaN falls to "else" -> 0, UNDOCUMENTED).
    return _out(desc, np.where(x > 0, 1, np.where(x < 0, -1, 0)))


_ROUNDERS = {
    # nearest, ties to even
    "HALVES_TO_NEAREST_EVEN": np.rint,
    # drop the fraction
    "TOWARD_ZERO": np.trunc,
    # nearest, ties away from zero (the page's TOWARD_INFINITY is not ceil)
    "TOWARD_INFINITY": lambda w: np.where(
        np.abs(w - np.trunc(w)) >= 0.5, np.trunc(w) + np.sign(w), np.trunc(w)
    ),
}


def round_(desc: Any, x: np.ndarray):
    # f(x) = x rounded to an integer value by RoundingMode; NaN and INF pass through.
    fn = _ROUNDERS[_mode(desc.rounding_mode, "DML_ROUNDING_MODE_")]
    return _float_unary(desc, x, fn)


def _float_bound(value: float, dtype: Any) -> np.generic:
    """A FLOAT attribute in the tensor type: CLIP's rule (NOTES 4.5), UNDOCUMENTED for THRESHOLD."""
    dtype = np.dtype(dtype)
    v = float(np.float32(value))
    if _is_int(dtype):
        return _to_int(np.array(v), dtype)[()]
    if math.isfinite(v):
        biggest = float(np.finfo(dtype).max)
        v = max(-biggest, min(biggest, v))
    return dtype.type(v)


def threshold(desc: Any, x: np.ndarray):
    # f(x) = max(x, Min): values below Min become Min; NaN stays NaN (our choice).
    g = _g(desc, x)
    return _out(desc, np.maximum(g, _float_bound(desc.min, np.asarray(x).dtype)))


def value_scale_2d(desc: Any, x: np.ndarray):
    # y[n, c, h, w] = Scale * x[n, c, h, w] + Bias[c], on NCHW with C == ChannelCount (1 or 3).
    bias = np.asarray(desc.bias, dtype=np.float32).astype(np.float64).reshape(1, -1, 1, 1)
    y = float(np.float32(desc.scale)) * x.astype(np.float64) + bias
    return _out(desc, y)


# ---------------------------------------------------------------------------------------------
# Binary arithmetic (no ScaleBias; A, B and the output share one type)


def _binary(desc: Any, a: np.ndarray, b: np.ndarray, int_fn: Any, float_fn: Any):
    if _is_int(a.dtype):
        return (_wrap(int_fn(_exact(a), _exact(b)), desc.output_tensor.dtype),)
    with np.errstate(all="ignore"):
        return _out(desc, float_fn(a.astype(np.float64), b.astype(np.float64)))


def atan_yx(desc: Any, a: np.ndarray, b: np.ndarray):
    # f(y, x) = atan2(y, x) with A as y and B as x; the origin is undefined on the page.
    return _binary(desc, a, b, None, np.arctan2)


def difference_square(desc: Any, a: np.ndarray, b: np.ndarray):
    # f(a, b) = (a - b) * (a - b)
    return _binary(desc, a, b, lambda p, q: (p - q) * (p - q), lambda p, q: (p - q) * (p - q))


def divide(desc: Any, a: np.ndarray, b: np.ndarray):
    # f(a, b) = a / b; integers truncate toward zero (page), integer b == 0 gives 0 (our choice).
    return _binary(desc, a, b, _trunc_div, np.divide)


def max_(desc: Any, a: np.ndarray, b: np.ndarray):
    # f(a, b) = the larger of a and b; NaN propagates (our choice).
    return _out(desc, np.maximum(a, b))


def mean(desc: Any, a: np.ndarray, b: np.ndarray):
    # f(a, b) = (a + b) / 2; integers: exact sum, halved toward zero (UNDOCUMENTED, our choice).
    return _binary(desc, a, b, lambda p, q: _trunc_div(p + q, 2), lambda p, q: (p + q) / 2)


def min_(desc: Any, a: np.ndarray, b: np.ndarray):
    # f(a, b) = the smaller of a and b; NaN propagates (our choice).
    return _out(desc, np.minimum(a, b))


def modulus_floor(desc: Any, a: np.ndarray, b: np.ndarray):
    # f(a, b) = a - b * floor(a / b): Python's %, sign of the divisor; integer b == 0 gives 0.
    return _binary(desc, a, b, _floor_mod, np.mod)


def modulus_truncate(desc: Any, a: np.ndarray, b: np.ndarray):
    # f(a, b) = a - b * trunc(a / b): C's %, sign of the dividend; integer b == 0 gives 0.
    return _binary(desc, a, b, _trunc_mod, np.fmod)


def multiply(desc: Any, a: np.ndarray, b: np.ndarray):
    # f(a, b) = a * b
    return _binary(desc, a, b, lambda p, q: p * q, np.multiply)


def subtract(desc: Any, a: np.ndarray, b: np.ndarray):
    # f(a, b) = a - b
    return _binary(desc, a, b, lambda p, q: p - q, np.subtract)


def pow_(desc: Any, x: np.ndarray, e: np.ndarray):
    # f(x, e) = x ** e, ScaleBias on InputTensor only. Both integral: exact (page), wrapped;
    # otherwise float64 pow (negative base, fractional exponent -> NaN), then the output type.
    g, out = _g(desc, x), desc.output_tensor.dtype
    if _is_int(g.dtype) and _is_int(e.dtype):
        return (_wrap(_int_pow_v(_exact(g), _exact(e), 8 * np.dtype(out).itemsize), out),)
    with np.errstate(all="ignore"):
        y = np.power(g.astype(np.float64), e.astype(np.float64))
    return (_to_int(y, out),) if _is_int(out) else _out(desc, y)


# ---------------------------------------------------------------------------------------------
# Logical, comparison and selection: results are 1 (true) or 0 (false) in the output type


def logical_and(desc: Any, a: np.ndarray, b: np.ndarray):
    # f(a, b) = a && b (non-zero is true)
    return _out(desc, (a != 0) & (b != 0))


def logical_or(desc: Any, a: np.ndarray, b: np.ndarray):
    # f(a, b) = a || b
    return _out(desc, (a != 0) | (b != 0))


def logical_xor(desc: Any, a: np.ndarray, b: np.ndarray):
    # f(a, b) = (!!a) != (!!b)
    return _out(desc, (a != 0) != (b != 0))


def logical_not(desc: Any, x: np.ndarray):
    # f(x) = !x
    return _out(desc, x == 0)


def logical_equals(desc: Any, a: np.ndarray, b: np.ndarray):
    # f(a, b) = a == b (IEEE: NaN never equal, -0 == +0)
    return _out(desc, a == b)


def logical_greater_than(desc: Any, a: np.ndarray, b: np.ndarray):
    # f(a, b) = a > b
    return _out(desc, a > b)


def logical_greater_than_or_equal(desc: Any, a: np.ndarray, b: np.ndarray):
    # f(a, b) = a >= b
    return _out(desc, a >= b)


def logical_less_than(desc: Any, a: np.ndarray, b: np.ndarray):
    # f(a, b) = a < b
    return _out(desc, a < b)


def logical_less_than_or_equal(desc: Any, a: np.ndarray, b: np.ndarray):
    # f(a, b) = a <= b
    return _out(desc, a <= b)


def is_nan(desc: Any, x: np.ndarray):
    # f(x) = 1 if x is an IEEE NaN
    return _out(desc, np.isnan(x))


def is_infinity(desc: Any, x: np.ndarray):
    # f(x) = 1 if x is an infinity of the sign InfinityMode selects (EITHER, POSITIVE, NEGATIVE)
    mode = _mode(desc.infinity_mode, "DML_IS_INFINITY_MODE_")
    sign_ok = {"EITHER": True, "POSITIVE": x > 0, "NEGATIVE": x < 0}[mode]
    return _out(desc, np.isinf(x) & sign_ok)


def if_(desc: Any, cond: np.ndarray, a: np.ndarray, b: np.ndarray):
    # f(cond, a, b) = a where cond != 0, else b
    return _out(desc, np.where(cond != 0, a, b))


# ---------------------------------------------------------------------------------------------
# Bitwise: the raw encoding, the data type only sets the element width


def _bits(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    return x.view(f"u{x.dtype.itemsize}")


def _as_out(desc: Any, bits: Any) -> tuple[np.ndarray]:
    return (np.asarray(bits).view(desc.output_tensor.dtype),)


def bit_and(desc: Any, a: np.ndarray, b: np.ndarray):
    # f(a, b) = a & b
    return _as_out(desc, _bits(a) & _bits(b))


def bit_or(desc: Any, a: np.ndarray, b: np.ndarray):
    # f(a, b) = a | b
    return _as_out(desc, _bits(a) | _bits(b))


def bit_xor(desc: Any, a: np.ndarray, b: np.ndarray):
    # f(a, b) = a ^ b
    return _as_out(desc, _bits(a) ^ _bits(b))


def bit_not(desc: Any, x: np.ndarray):
    # f(x) = ~x
    return _as_out(desc, ~_bits(x))


def bit_count(desc: Any, x: np.ndarray):
    # f(x) = the number of 1 bits of x's encoding (output UINT32 or UINT8)
    x = np.asarray(x)
    flat = np.array(x).reshape(-1)
    octets = flat.view(np.uint8).reshape(flat.size, x.dtype.itemsize)
    return _out(desc, np.unpackbits(octets, axis=1).sum(axis=1).reshape(x.shape))


def _shift(desc: Any, a: np.ndarray, b: np.ndarray, fn: Any):
    ua, ub = _bits(a), _bits(b).astype(np.uint64)
    width = 8 * ua.dtype.itemsize
    shifted = fn(ua, np.minimum(ub, width - 1).astype(ua.dtype))
    return _as_out(desc, np.where(ub >= width, 0, shifted).astype(ua.dtype))


def bit_shift_left(desc: Any, a: np.ndarray, b: np.ndarray):
    # f(a, b) = a << b; bits shifted out are lost, b >= width gives 0 (our choice).
    return _shift(desc, a, b, np.left_shift)


def bit_shift_right(desc: Any, a: np.ndarray, b: np.ndarray):
    # f(a, b) = a >> b, logical (zeros enter from the top); b >= width gives 0 (our choice).
    return _shift(desc, a, b, np.right_shift)


_E = "DML_OPERATOR_ELEMENT_WISE_"

REFERENCES = {
    _E + "ABS": abs_,
    _E + "ACOS": acos,
    _E + "ACOSH": acosh,
    _E + "ASIN": asin,
    _E + "ASINH": asinh,
    _E + "ATAN": atan,
    _E + "ATANH": atanh,
    _E + "ATAN_YX": atan_yx,
    _E + "CEIL": ceil,
    _E + "CONSTANT_POW": constant_pow,
    _E + "COS": cos,
    _E + "COSH": cosh,
    _E + "DIFFERENCE_SQUARE": difference_square,
    _E + "DIVIDE": divide,
    _E + "ERF": erf,
    _E + "EXP": exp,
    _E + "FLOOR": floor,
    _E + "LOG": log,
    _E + "MAX": max_,
    _E + "MEAN": mean,
    _E + "MIN": min_,
    _E + "MODULUS_FLOOR": modulus_floor,
    _E + "MODULUS_TRUNCATE": modulus_truncate,
    _E + "MULTIPLY": multiply,
    _E + "NEGATE": negate,
    _E + "POW": pow_,
    _E + "RECIP": recip,
    _E + "ROUND": round_,
    _E + "SIGN": sign,
    _E + "SIN": sin,
    _E + "SINH": sinh,
    _E + "SQRT": sqrt,
    _E + "SUBTRACT": subtract,
    _E + "TAN": tan,
    _E + "TANH": tanh,
    _E + "THRESHOLD": threshold,
    "DML_OPERATOR_VALUE_SCALE_2D": value_scale_2d,
    _E + "LOGICAL_AND": logical_and,
    _E + "LOGICAL_OR": logical_or,
    _E + "LOGICAL_XOR": logical_xor,
    _E + "LOGICAL_NOT": logical_not,
    _E + "LOGICAL_EQUALS": logical_equals,
    _E + "LOGICAL_GREATER_THAN": logical_greater_than,
    _E + "LOGICAL_GREATER_THAN_OR_EQUAL": logical_greater_than_or_equal,
    _E + "LOGICAL_LESS_THAN": logical_less_than,
    _E + "LOGICAL_LESS_THAN_OR_EQUAL": logical_less_than_or_equal,
    _E + "IS_NAN": is_nan,
    _E + "IS_INFINITY": is_infinity,
    _E + "IF": if_,
    _E + "BIT_AND": bit_and,
    _E + "BIT_OR": bit_or,
    _E + "BIT_XOR": bit_xor,
    _E + "BIT_NOT": bit_not,
    _E + "BIT_COUNT": bit_count,
    _E + "BIT_SHIFT_LEFT": bit_shift_left,
    _E + "BIT_SHIFT_RIGHT": bit_shift_right,
}
