"""DML_OPERATOR_ELEMENT_WISE_* logical, comparison, selection and bitwise operators (table rows).

Logical operators read non-zero as true and write 1 or 0; comparisons follow IEEE (anything
compared with NaN is false; -0 == +0) and write 1 or 0 in their own output type (UINT32 or
UINT8). Bitwise operators act on the raw encoding: the data type only sets the element width
(float tensors are bit patterns). A shift by at least the element width gives 0 (our choice;
DirectML does not say), the right shift is logical.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from ..enums import FeatureLevel as L
from ..enums import IsInfinityMode
from ..errors import Validator
from ..fields import enum_type
from ..support import DIMS1_8, DIMS4, F2, rows, types
from ._rows import BINARY, Row, class_name, define

_U32 = types("UINT32")
_U8_32 = types("UINT32", "UINT8")
_U = types("UINT32", "UINT16", "UINT8")
_T8 = F2 | types("INT32", "INT16", "INT8") | _U
_T10 = _T8 | types("INT64", "UINT64")
_T11 = _T10 | types("FLOAT64")
_LOGICAL_TABLE = rows(
    (L.FL_1_0, DIMS4, _U32), (L.FL_2_0, DIMS4, _U8_32), (L.FL_3_0, DIMS1_8, _U8_32)
)
_COMPARE_TABLE = rows(
    (L.FL_1_0, DIMS4, F2, _U32),
    (L.FL_2_0, DIMS4, F2, _U8_32),
    (L.FL_2_1, DIMS4, _T8, _U8_32),
    (L.FL_3_0, DIMS1_8, _T8, _U8_32),
    (L.FL_4_1, DIMS1_8, _T10, _U8_32),
)
_COMPARE_TABLE_3_0 = rows((L.FL_3_0, DIMS1_8, _T8, _U8_32), (L.FL_4_1, DIMS1_8, _T10, _U8_32))
_BITWISE_TABLE = rows((L.FL_3_0, DIMS1_8, _U), (L.FL_4_1, DIMS1_8, _T11))
_SHIFT_TABLE = rows(
    (L.FL_2_1, DIMS4, _U), (L.FL_3_0, DIMS1_8, _U), (L.FL_4_1, DIMS1_8, _U | types("UINT64"))
)
_UINT_AB = {"ATensor": [0, 1, 2, 0, 5], "BTensor": [0, 0, 3, 7, 5]}
_FLOAT_AB = {"ATensor": [1.0, -2.0, 3.0, 0.0, 5.0], "BTensor": [1.0, 2.0, -3.0, -0.0, 4.0]}


def _bits(x):
    """The raw encoding of x as unsigned integers of the same width."""
    if jnp.issubdtype(x.dtype, jnp.unsignedinteger):
        return x
    return lax.bitcast_convert_type(x, jnp.dtype(f"uint{8 * x.dtype.itemsize}"))


def _from_bits(bits, dtype):
    return bits if bits.dtype == dtype else lax.bitcast_convert_type(bits, dtype)


def _bitwise(op):
    def fn(d, *xs):
        return _from_bits(op(*(_bits(x) for x in xs)), xs[0].dtype)

    return fn


def _shift(shift):
    def fn(d, a, b):
        width = 8 * a.dtype.itemsize
        count = jnp.minimum(b, width - 1).astype(a.dtype)
        return jnp.where(b >= width, jnp.zeros_like(a), shift(a, count))

    return fn


def _is_infinity(d, x):
    mode = d.infinity_mode
    found = jnp.isinf(x)
    if mode is IsInfinityMode.POSITIVE:
        return found & (x > 0)
    if mode is IsInfinityMode.NEGATIVE:
        return found & (x < 0)
    return found


def _condition_is_uint8(d, v: Validator) -> None:
    v.check(
        "ConditionTensor.DataType",
        d.condition_tensor.data_type.name == "UINT8",
        f"must be UINT8, got {d.condition_tensor.data_type.name}",
    )


def _logical(name, fn) -> Row:
    return Row(
        f"ELEMENT_WISE_LOGICAL_{name}",
        "1_0",
        f"a {name} b on truth values (non-zero is true), 1 or 0",
        lambda d, a, b: fn(a != 0, b != 0),
        _LOGICAL_TABLE,
        ({}, dict(_UINT_AB)),
        inputs=BINARY,
        example_types={"ATensor": "UINT32", "BTensor": "UINT32", "OutputTensor": "UINT32"},
    )


def _compare(name, level, symbol, fn, table) -> Row:
    return Row(
        f"ELEMENT_WISE_LOGICAL_{name}",
        level,
        f"a {symbol} b, 1 or 0 in the output type (UINT32 or UINT8)",
        lambda d, a, b: fn(a, b),
        table,
        ({}, dict(_FLOAT_AB)),
        inputs=BINARY,
        output_type="own",
        example_types={"OutputTensor": "UINT8"},
        widen=False,
    )


def _bit(name, level, summary, fn, table, n_inputs=2) -> Row:
    inputs = BINARY if n_inputs == 2 else ("input_tensor",)
    example = dict(_UINT_AB) if n_inputs == 2 else {"InputTensor": [0, 1, 6, 255, 1024]}
    return Row(
        f"ELEMENT_WISE_{name}",
        level,
        summary,
        fn,
        table,
        ({}, example),
        inputs=inputs,
        example_types={m: "UINT32" for m in ("ATensor", "BTensor", "InputTensor", "OutputTensor")},
        widen=False,
        differentiable=False,  # bit patterns: no derivative, also on float tensors
    )


ROWS = (
    _logical("AND", jnp.logical_and),
    _logical("OR", jnp.logical_or),
    _logical("XOR", jnp.logical_xor),
    Row(
        "ELEMENT_WISE_LOGICAL_NOT",
        "1_0",
        "1 where x is 0, else 0",
        lambda d, x: x == 0,
        _LOGICAL_TABLE,
        ({}, {"InputTensor": [0, 1, 2, 0, 5]}),
        example_types={"InputTensor": "UINT32", "OutputTensor": "UINT32"},
    ),
    _compare(
        "EQUALS",
        "1_0",
        "==",
        jnp.equal,
        _COMPARE_TABLE,
    ),
    _compare("GREATER_THAN", "1_0", ">", jnp.greater, _COMPARE_TABLE),
    _compare("GREATER_THAN_OR_EQUAL", "3_0", ">=", jnp.greater_equal, _COMPARE_TABLE_3_0),
    _compare(
        "LESS_THAN",
        "1_0",
        "<",
        jnp.less,
        _COMPARE_TABLE,
    ),
    _compare("LESS_THAN_OR_EQUAL", "3_0", "<=", jnp.less_equal, _COMPARE_TABLE_3_0),
    Row(
        "ELEMENT_WISE_IS_NAN",
        "2_0",
        "1 where x is NaN, else 0",
        lambda d, x: jnp.isnan(x),
        rows((L.FL_2_0, DIMS4, F2, _U8_32), (L.FL_3_0, DIMS1_8, F2, _U8_32)),
        ({}, {"InputTensor": [0.0, float("nan"), float("inf"), -1.0, float("-nan")]}),
        output_type="own",
        example_types={"OutputTensor": "UINT8"},
        widen=False,
    ),
    Row(
        "ELEMENT_WISE_IS_INFINITY",
        "2_1",
        "1 where x is an infinity of the sign InfinityMode selects, else 0",
        _is_infinity,
        rows((L.FL_2_1, DIMS4, F2, types("UINT8")), (L.FL_3_0, DIMS1_8, F2, types("UINT8"))),
        (
            {"InfinityMode": "POSITIVE"},
            {"InputTensor": [0.0, float("inf"), float("-inf"), float("nan"), 1e30]},
        ),
        attrs=(("infinity_mode", enum_type(IsInfinityMode)),),
        in_place=True,  # the schema allows the UINT8 output over the input's bytes
        output_type="own",
        example_types={"OutputTensor": "UINT8"},
        widen=False,
    ),
    Row(
        "ELEMENT_WISE_IF",
        "2_0",
        "a where the condition is non-zero, else b",
        lambda d, c, a, b: jnp.where(c != 0, a, b),
        rows(
            (L.FL_2_0, DIMS4, types("FLOAT16", "UINT8"), types("FLOAT16")),
            (L.FL_3_0, DIMS1_8, _T8, _T8),
            (L.FL_5_0, DIMS1_8, _T11, _T11),
        ),
        (
            {},
            {
                "ConditionTensor": [1, 0, 1, 1, 0],
                "ATensor": [1, 2, 3, 4, 5],
                "BTensor": [9, 8, 7, 6, 5],
            },
        ),
        inputs=("condition_tensor", "a_tensor", "b_tensor"),
        same_type=("a_tensor", "b_tensor", "output_tensor"),
        rules=_condition_is_uint8,
        in_place=False,
        example_types={"ConditionTensor": "UINT8"},
        widen=False,
    ),
    _bit("BIT_AND", "3_0", "a & b on the raw bits", _bitwise(jnp.bitwise_and), _BITWISE_TABLE),
    _bit("BIT_OR", "3_0", "a | b on the raw bits", _bitwise(jnp.bitwise_or), _BITWISE_TABLE),
    _bit(
        "BIT_XOR",
        "3_0",
        "a ^ b on the raw bits",
        _bitwise(jnp.bitwise_xor),
        _BITWISE_TABLE,
    ),
    _bit("BIT_NOT", "3_0", "~x on the raw bits", _bitwise(jnp.invert), _BITWISE_TABLE, 1),
    Row(
        "ELEMENT_WISE_BIT_COUNT",
        "3_0",
        "the number of 1 bits of x's encoding",
        lambda d, x: lax.population_count(_bits(x)),
        rows((L.FL_3_0, DIMS1_8, _U, _U8_32), (L.FL_4_1, DIMS1_8, _T11, _U8_32)),
        ({}, {"InputTensor": [0, 123, 456, 789, 4294967295]}),
        output_type="own",
        example_types={"InputTensor": "UINT32", "OutputTensor": "UINT8"},
        widen=False,
    ),
    _bit(
        "BIT_SHIFT_LEFT",
        "2_1",
        "a << b (bits shifted out are lost)",
        _shift(lax.shift_left),
        _SHIFT_TABLE,
    ),
    _bit(
        "BIT_SHIFT_RIGHT",
        "2_1",
        "a >> b, logical",
        _shift(lax.shift_right_logical),
        _SHIFT_TABLE,
    ),
)

for _row in ROWS:
    globals()[class_name(_row.name)] = define(_row, __name__)
del _row
