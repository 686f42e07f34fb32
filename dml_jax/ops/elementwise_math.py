"""DML_OPERATOR_ELEMENT_WISE_* math: one table row per operator (see ``_rows.py``).

Rules every row follows (docs/semantics.md, "Element-wise math"): equal sizes, no broadcasting
except through stride-0 input descs in buffer mode; ScaleBias first, on float tensors only;
FLOAT16 computed in float32 and rounded once; integer arithmetic wraps (two's complement); integer
division and modulus by zero give 0; MIN/MAX/THRESHOLD propagate NaN.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import jax.numpy as jnp
import numpy as np
from jax import lax

from ..enums import FeatureLevel as L
from ..enums import RoundingMode
from ..errors import Validator
from ..fields import (
    FLOAT,
    FLOAT_ARRAY,
    OperatorDesc,
    attribute,
    count_of,
    enum_type,
    input_field,
    output_field,
)
from ..registry import Example, register
from ..support import DIMS1_8, DIMS4, DIMS4_5, F2, rows, types
from ..tensor import TensorDesc
from ._common import in_float32, infer_same, same_tensors
from ._rows import BINARY, Row, class_name, define
from .clip import convert_float_bound

_I = types("INT32", "INT16", "INT8")
_U = types("UINT32", "UINT16", "UINT8")
_S4 = F2 | types("INT32", "UINT32")
_S6 = _S4 | types("INT64", "UINT64")
_T8 = F2 | _I | _U
_T10 = _T8 | types("INT64", "UINT64")
_FLOAT_TABLE = rows((L.FL_1_0, DIMS4, F2), (L.FL_3_0, DIMS1_8, F2))
_FLOAT_TABLE_2_0 = rows((L.FL_2_0, DIMS4, F2), (L.FL_3_0, DIMS1_8, F2))
_MIN_MAX_TABLE = rows(
    (L.FL_1_0, DIMS4, F2),
    (L.FL_2_1, DIMS4, _T8),
    (L.FL_3_0, DIMS1_8, _T8),
    (L.FL_5_0, DIMS1_8, _T10),
)
_MODULUS_TABLE = rows((L.FL_2_1, DIMS4, _T8), (L.FL_3_0, DIMS1_8, _T8), (L.FL_6_0, DIMS1_8, _T10))
_X = {"InputTensor": [-1.5, -0.25, 0.0, 0.5, 2.0]}
_AB = {"ATensor": [7, -7, 7, -7, 6], "BTensor": [2, 2, -2, -2, 4]}


def _int(x) -> bool:
    return jnp.issubdtype(x.dtype, jnp.integer)


def _safe(b):
    """b with 0 replaced by 1: integer division by 0 is then masked to 0 (our choice)."""
    return jnp.where(b == 0, jnp.ones_like(b), b)


def _divide(d, a, b):
    if _int(a):
        return jnp.where(b == 0, jnp.zeros_like(a), lax.div(a, _safe(b)))  # toward zero
    # XLA turns a division by a value it knows when compiling (a constant, a compiled-in
    # parameter) into a multiplication by its reciprocal, an ulp off at times; a divisor that
    # depends on the dividend element by element (1 where it is NaN, whose quotient is NaN
    # either way) is none, so the CPU's quotient stays correctly rounded (XLA's division on
    # NVIDIA GPUs is approximate itself: docs/semantics.md). No platform choice: kernels
    # (``kernels/elementwise_map.py``) trace this lowering inside Triton programs too.
    return a / jnp.where(jnp.isnan(a), jnp.ones((), b.dtype), b)


def _mod_truncate(d, a, b):
    if _int(a):
        return jnp.where(b == 0, jnp.zeros_like(a), lax.rem(a, _safe(b)))
    return lax.rem(a, b)  # C's fmod: the sign of the dividend


def _mod_floor(d, a, b):
    r = _mod_truncate(d, a, b)
    # Python's %: the sign of the divisor. A non-zero remainder of the other sign moves by b.
    if jnp.issubdtype(a.dtype, jnp.unsignedinteger):
        return r
    fix = (r != 0) & ((r < 0) != (b < 0))
    return jnp.where(fix, r + b, r)


def _mean(d, a, b):
    if not _int(a):
        return (a + b) / 2
    # (a + b) / 2 truncated toward zero, without the overflow of a + b: floor halves plus the
    # carry of the low bits, then +1 where the sum is odd and negative.
    one = jnp.ones_like(a)
    low = (a & one) + (b & one)
    floor = (a >> one) + (b >> one) + (low >> one)
    if jnp.issubdtype(a.dtype, jnp.unsignedinteger):
        return floor
    return floor + jnp.where((low == one) & (floor < 0), one, jnp.zeros_like(a))


def _sign(d, x):
    one = jnp.ones_like(x)
    return jnp.where(x > 0, one, jnp.where(x < 0, -one, jnp.zeros_like(x)))  # NaN -> 0


def _round(d, x):
    mode = d.rounding_mode
    if mode is RoundingMode.TOWARD_ZERO:
        return jnp.trunc(x)
    if mode is RoundingMode.TOWARD_INFINITY:
        return lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO)
    return lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN)


def _threshold(d, x):
    bound = convert_float_bound(d.min, d.input_tensor.data_type)
    return lax.max(x, jnp.asarray(bound, x.dtype))  # NaN propagates


def _int_pow(base, exponent):
    """base ** exponent for integers: exact modulo 2**bits; a negative exponent truncates the
    rational result toward zero (only |base| == 1 survives; 0 ** negative gives 0)."""
    bits = 8 * base.dtype.itemsize
    e = exponent.astype(base.dtype)
    magnitude = jnp.where(e < 0, -e, e) if jnp.issubdtype(e.dtype, jnp.signedinteger) else e
    result, square = jnp.ones_like(base), base
    for _ in range(bits):  # square-and-multiply over every exponent bit, unrolled
        result = jnp.where((magnitude & 1) == 1, result * square, result)
        square = square * square
        magnitude = lax.shift_right_logical(magnitude, jnp.ones_like(magnitude))
    if not jnp.issubdtype(exponent.dtype, jnp.signedinteger):
        return result
    odd = (exponent & 1) == 1
    negative = jnp.where(
        base == 1,
        jnp.ones_like(base),
        jnp.where((base == -1) & odd, -jnp.ones_like(base), jnp.where(base == -1, 1, 0)),
    ).astype(base.dtype)
    return jnp.where(exponent < 0, negative, result)


def _to_int(y, dtype):
    """Float results in an integer type: truncated toward zero, NaN -> 0, saturated."""
    info = jnp.iinfo(dtype)
    y = jnp.trunc(jnp.nan_to_num(y, nan=0.0))
    y = jnp.clip(y, float(info.min), float(info.max))
    return jnp.where(y >= float(info.max), info.max, y.astype(dtype)).astype(dtype)


def _pow(d, x, e):
    if _int(x) and _int(e):
        return _int_pow(x, e)
    if _int(x):
        return _to_int(jnp.power(x.astype(jnp.float32), e.astype(jnp.float32)), x.dtype)
    return jnp.power(x, e.astype(x.dtype))


def _sqrt_pow(x):
    # pow(x, 0.5) by IEEE 754: sqrt, except pow(-0, 0.5) = +0 and pow(-inf, 0.5) = +inf.
    root = jnp.sqrt(jnp.abs(x))  # |x|: sqrt(-0) is -0; a negative x is NaN below
    return jnp.where(x == -jnp.inf, jnp.inf, jnp.where(x < 0, jnp.nan, root))


# Exponents whose power is one operation with pow's IEEE special values: x * x is correctly
# rounded everywhere, sqrt and 1 / x where the backend's are (CPU; within 2 ulps on GPUs), at the
# cost of a multiply instead of a log and an exp.
_EXACT_POWERS = {1.0: lambda x: x, 2.0: lambda x: x * x, 0.5: _sqrt_pow, -1.0: lambda x: 1 / x}


def _constant_pow(d, x):
    exponent = float(np.float32(d.exponent))
    if exponent in _EXACT_POWERS:
        return _EXACT_POWERS[exponent](x)
    return jnp.power(x, jnp.asarray(exponent, x.dtype))


def _unary(name, level, summary, fn, support, **kw) -> Row:
    return Row(
        name=f"ELEMENT_WISE_{name}",
        level=level,
        summary=summary,
        fn=lambda d, x: fn(x),
        support=support,
        example=({}, dict(_X)),
        scale_bias=True,
        **kw,
    )


def _binary(name, level, summary, fn, support, **kw) -> Row:
    return Row(
        name=f"ELEMENT_WISE_{name}",
        level=level,
        summary=summary,
        fn=fn,
        support=support,
        example=({}, dict(_AB)),
        inputs=BINARY,
        **kw,
    )


ROWS = (
    _unary(
        "ABS",
        "1_0",
        "|x|",
        jnp.abs,
        rows(
            (L.FL_1_0, DIMS4, F2),
            (L.FL_2_1, DIMS4, F2 | _I),
            (L.FL_3_0, DIMS1_8, F2 | _I),
            (L.FL_4_1, DIMS1_8, F2 | _I | types("INT64")),
        ),
    ),
    _unary("ACOS", "1_0", "arccos(x)", jnp.arccos, _FLOAT_TABLE),
    _unary("ACOSH", "2_0", "arccosh(x)", jnp.arccosh, _FLOAT_TABLE_2_0),
    _unary("ASIN", "1_0", "arcsin(x)", jnp.arcsin, _FLOAT_TABLE),
    _unary("ASINH", "2_0", "arcsinh(x)", jnp.arcsinh, _FLOAT_TABLE_2_0),
    _unary("ATAN", "1_0", "arctan(x)", jnp.arctan, _FLOAT_TABLE),
    _unary("ATANH", "2_0", "arctanh(x)", jnp.arctanh, _FLOAT_TABLE_2_0),
    _unary("CEIL", "1_0", "the smallest integer >= x", jnp.ceil, _FLOAT_TABLE),
    _unary("COS", "1_0", "cos(x)", jnp.cos, _FLOAT_TABLE),
    _unary("COSH", "2_0", "cosh(x)", jnp.cosh, _FLOAT_TABLE_2_0),
    _unary(
        "ERF",
        "2_0",
        "the Gauss error function of x",
        lambda x: lax.erf(x),
        _FLOAT_TABLE_2_0,
    ),
    _unary(
        "EXP",
        "1_0",
        "e ** x",
        jnp.exp,
        _FLOAT_TABLE,
    ),
    _unary("FLOOR", "1_0", "the largest integer <= x", jnp.floor, _FLOAT_TABLE),
    _unary("LOG", "1_0", "ln(x)", jnp.log, _FLOAT_TABLE),
    _unary("RECIP", "1_0", "1 / x", lambda x: 1 / x, _FLOAT_TABLE),
    _unary("SIN", "1_0", "sin(x)", jnp.sin, _FLOAT_TABLE),
    _unary("SINH", "2_0", "sinh(x)", jnp.sinh, _FLOAT_TABLE_2_0),
    _unary(
        "SQRT",
        "1_0",
        "sqrt(x)",
        jnp.sqrt,
        _FLOAT_TABLE,
    ),
    _unary("TAN", "1_0", "tan(x)", jnp.tan, _FLOAT_TABLE),
    _unary(
        "TANH",
        "2_0",
        "tanh(x)",
        jnp.tanh,
        _FLOAT_TABLE_2_0,
    ),
    Row(
        "ELEMENT_WISE_CONSTANT_POW",
        "1_0",
        "x ** Exponent",
        _constant_pow,
        _FLOAT_TABLE,
        ({"Exponent": 2.0}, dict(_X)),
        scale_bias=True,
        attrs=(("exponent", FLOAT),),
    ),
    Row(
        "ELEMENT_WISE_THRESHOLD",
        "1_0",
        "max(x, Min)",
        _threshold,
        rows((L.FL_1_0, DIMS4, F2), (L.FL_2_1, DIMS4, _T8), (L.FL_3_0, DIMS1_8, _T8)),
        ({"Min": 0.25}, dict(_X)),
        scale_bias=True,
        attrs=(("min", FLOAT),),
    ),
    Row(
        "ELEMENT_WISE_NEGATE",
        "5_0",
        "-x",
        lambda d, x: -x,
        rows((L.FL_5_0, DIMS1_8, F2 | _I | types("INT64"))),
        ({}, dict(_X)),
    ),
    Row(
        "ELEMENT_WISE_SIGN",
        "2_0",
        "1 for x > 0, -1 for x < 0, else 0",
        _sign,
        rows(
            (L.FL_2_0, DIMS4, F2),
            (L.FL_2_1, DIMS4, _T8),
            (L.FL_3_0, DIMS1_8, _T8),
            (L.FL_4_1, DIMS1_8, _T10),
        ),
        ({}, dict(_X)),
    ),
    Row(
        "ELEMENT_WISE_ROUND",
        "2_1",
        "x rounded to an integer value by RoundingMode",
        _round,
        rows((L.FL_2_1, DIMS4, F2), (L.FL_3_0, DIMS1_8, F2)),
        ({"RoundingMode": "TOWARD_INFINITY"}, {"InputTensor": [-2.5, -1.5, -1.25, 1.5, 2.5]}),
        attrs=(("rounding_mode", enum_type(RoundingMode)),),
    ),
    _binary(
        "SUBTRACT",
        "1_0",
        "a - b",
        lambda d, a, b: a - b,
        rows(
            (L.FL_1_0, DIMS4, F2),
            (L.FL_2_1, DIMS4, _S4),
            (L.FL_3_0, DIMS1_8, _S4),
            (L.FL_4_1, DIMS1_8, _S6),
            (L.FL_5_1, DIMS1_8, _T10),
        ),
    ),
    _binary(
        "MULTIPLY",
        "1_0",
        "a * b",
        lambda d, a, b: a * b,
        rows(
            (L.FL_1_0, DIMS4_5, F2),
            (L.FL_2_1, DIMS4_5, _S4),
            (L.FL_3_0, DIMS1_8, _S4),
            (L.FL_4_1, DIMS1_8, _S6),
            (L.FL_5_1, DIMS1_8, _T10),
        ),
    ),
    _binary(
        "DIVIDE",
        "1_0",
        "a / b (integers toward zero)",
        _divide,
        rows(
            (L.FL_1_0, DIMS4, F2),
            (L.FL_2_1, DIMS4, _S4),
            (L.FL_3_0, DIMS1_8, _S4),
            (L.FL_5_1, DIMS1_8, _T8),
            (L.FL_6_0, DIMS1_8, _T10),
        ),
    ),
    _binary(
        "MAX",
        "1_0",
        "the larger of a and b",
        lambda d, a, b: jnp.maximum(a, b),
        _MIN_MAX_TABLE,
    ),
    _binary(
        "MIN",
        "1_0",
        "the smaller of a and b",
        lambda d, a, b: jnp.minimum(a, b),
        _MIN_MAX_TABLE,
    ),
    _binary(
        "MEAN",
        "1_0",
        "(a + b) / 2 (integers toward zero)",
        _mean,
        rows((L.FL_1_0, DIMS4, F2), (L.FL_2_1, DIMS4, _S4), (L.FL_3_0, DIMS1_8, _S4)),
    ),
    _binary(
        "MODULUS_TRUNCATE",
        "2_1",
        "a - b * trunc(a / b), the sign of a",
        _mod_truncate,
        _MODULUS_TABLE,
    ),
    _binary(
        "MODULUS_FLOOR",
        "2_1",
        "a - b * floor(a / b), the sign of b",
        _mod_floor,
        _MODULUS_TABLE,
    ),
    _binary(
        "ATAN_YX",
        "3_1",
        "atan2(a, b): the angle of the point (b, a)",
        lambda d, a, b: jnp.arctan2(a, b),
        rows((L.FL_3_1, DIMS1_8, F2)),
    ),
    _binary(
        "DIFFERENCE_SQUARE",
        "3_1",
        "(a - b) * (a - b)",
        lambda d, a, b: (a - b) * (a - b),
        rows((L.FL_3_1, DIMS1_8, _S4)),
    ),
    Row(
        "ELEMENT_WISE_POW",
        "1_0",
        "x ** e, ScaleBias on the input only",
        _pow,
        rows((L.FL_1_0, DIMS4, F2), (L.FL_3_0, DIMS1_8, _T8)),
        ({}, {"InputTensor": [-2, -1, 0, 2, 3], "ExponentTensor": [3, -1, 2, 0.5, 2]}),
        inputs=("input_tensor", "exponent_tensor"),
        scale_bias=True,
        same_type=("input_tensor", "output_tensor"),
    ),
)

for _row in ROWS:
    globals()[class_name(_row.name)] = define(_row, __name__)
del _row


@dataclass(frozen=True)
class ValueScale2DOperatorDesc(OperatorDesc):
    """DML_VALUE_SCALE_2D_OPERATOR_DESC: ``Scale * x + Bias[c]`` on NCHW (FL 1_0).

    Fields:
        input_tensor, output_tensor: 4-D {N, C, H, W}, same data type and sizes.
        scale: a DML FLOAT, for every element.
        channel_count: optional; must equal ``len(bias)`` (and C, which must be 1 or 3).
        bias: one DML FLOAT per channel.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_VALUE_SCALE_2D"
    input_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    scale: float = attribute(FLOAT)
    channel_count: int | None = count_of("bias")
    bias: tuple = attribute(FLOAT_ARRAY)


def validate_value_scale_2d(d: ValueScale2DOperatorDesc, v: Validator) -> None:
    same_tensors(d, v)
    channels = d.input_tensor.sizes[1] if d.input_tensor.rank == 4 else None
    v.check(
        "Bias", len(d.bias) in (1, 3), f"must hold 1 or 3 values (ChannelCount), got {len(d.bias)}"
    )
    v.check(
        "Bias",
        channels is None or len(d.bias) == channels,
        f"must hold one value per channel (InputTensor.Sizes[1] = {channels}), got {len(d.bias)}",
    )


def lower_value_scale_2d(d: ValueScale2DOperatorDesc, x):
    def fn(y):
        bias = jnp.asarray(d.bias, y.dtype).reshape((1, len(d.bias)) + (1,) * (y.ndim - 2))
        return jnp.asarray(d.scale, y.dtype) * y + bias

    return (in_float32(fn, x),)


register(
    ValueScale2DOperatorDesc,
    infer=infer_same,
    validate=validate_value_scale_2d,
    lower=lower_value_scale_2d,
    support=rows((L.FL_1_0, DIMS4, F2)),
    example=Example(
        {
            "type": "DML_OPERATOR_VALUE_SCALE_2D",
            "desc": {
                "InputTensor": {"DataType": "FLOAT32", "Sizes": [1, 3, 1, 2]},
                "OutputTensor": {"DataType": "FLOAT32", "Sizes": [1, 3, 1, 2]},
                "Scale": 2.0,
                "ChannelCount": 3,
                "Bias": [10.0, 20.0, 30.0],
            },
        },
        {"InputTensor": [1, 2, 3, 4, 5, 6]},
        "2 * x plus 10, 20, 30 per channel",
    ),
)
