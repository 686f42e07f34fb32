"""Checks of the NumPy references in reference/math_ops.py against documented and hand-worked values.

The descs are stand-ins (SimpleNamespace), so nothing here needs dml_jax.
"""

from __future__ import annotations

import enum
import math
from types import SimpleNamespace as NS

import numpy as np
import pytest
from reference.math_ops import REFERENCES

E = "DML_OPERATOR_ELEMENT_WISE_"


class RoundingMode(enum.Enum):
    HALVES_TO_NEAREST_EVEN = 0
    TOWARD_ZERO = 1
    TOWARD_INFINITY = 2


class InfinityMode(enum.Enum):
    EITHER = 0
    POSITIVE = 1
    NEGATIVE = 2


def run(op: str, out_dtype, *arrays, **fields):
    desc = NS(output_tensor=NS(dtype=np.dtype(out_dtype)), **fields)
    (y,) = REFERENCES[op if op.startswith("DML_") else E + op](desc, *arrays)
    assert y.dtype == np.dtype(out_dtype)
    return y


def arr(values, dtype):
    return np.array(values, dtype=dtype)


def test_all_56_operators_have_a_reference():
    assert len(REFERENCES) == 56
    assert all(name.startswith("DML_OPERATOR_") for name in REFERENCES)


# --- Examples printed on the pages -------------------------------------------------------------


def test_if_page_example():
    cond = arr([[1, 0], [1, 1]], np.uint8)
    a, b = arr([[1, 2], [3, 4]], np.float16), arr([[9, 8], [7, 6]], np.float16)
    np.testing.assert_array_equal(run("IF", np.float16, cond, a, b), [[1, 8], [3, 4]])


def test_bit_not_page_example():
    x = arr([[0, 128], [42, 255]], np.uint8)
    np.testing.assert_array_equal(run("BIT_NOT", np.uint8, x), [[255, 127], [213, 0]])


@pytest.mark.parametrize("out", [np.uint32, np.uint8])
def test_bit_count_page_example(out):
    x = arr([[0, 123], [456, 789]], np.uint32)
    np.testing.assert_array_equal(run("BIT_COUNT", out, x), [[0, 6], [4, 5]])


ROUNDING_TABLE = [-2.5, -1.75, -1.5, -1.25, 0, 1.25, 1.5, 1.75, 2.5]
ROUNDED = {
    "HALVES_TO_NEAREST_EVEN": [-2, -2, -2, -1, 0, 1, 2, 2, 2],
    "TOWARD_ZERO": [-2, -1, -1, -1, 0, 1, 1, 1, 2],
    "TOWARD_INFINITY": [-3, -2, -2, -1, 0, 1, 2, 2, 3],
}


@pytest.mark.parametrize("mode", list(RoundingMode))
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_round_matches_the_rounding_mode_table(mode, dtype):
    y = run("ROUND", dtype, arr(ROUNDING_TABLE, dtype), rounding_mode=mode)
    np.testing.assert_array_equal(y, ROUNDED[mode.name])


def test_round_accepts_full_enum_names_and_passes_nan_inf():
    x = arr([0.5, -0.5, np.inf, np.nan], np.float32)
    y = run("ROUND", np.float32, x, rounding_mode="DML_ROUNDING_MODE_TOWARD_INFINITY")
    np.testing.assert_array_equal(y, [1, -1, np.inf, np.nan])


def test_log_page_special_values():
    y = run("LOG", np.float32, arr([-1, 0, 1], np.float32), scale_bias=None)
    assert np.isnan(y[0]) and y[1] == -np.inf and y[2] == 0


def test_sign_formula_including_negative_zero():
    x = arr([-3.5, -0.0, 0.0, 2.0, np.nan], np.float32)
    y = run("SIGN", np.float32, x)
    np.testing.assert_array_equal(y, [-1, 0, 0, 1, 0])
    assert not np.signbit(y[1])
    np.testing.assert_array_equal(run("SIGN", np.uint8, arr([0, 7], np.uint8)), [0, 1])


# --- Hand-worked values ------------------------------------------------------------------------


def test_integer_divide_truncates_and_zero_divisor_gives_zero():
    a, b = arr([7, -7, 7, -7, 5, -(2**31)], np.int32), arr([2, 2, -2, -2, 0, -1], np.int32)
    np.testing.assert_array_equal(run("DIVIDE", np.int32, a, b), [3, -3, -3, 3, 0, -(2**31)])


def test_float_divide_rounds_once():
    y = run("DIVIDE", np.float16, arr([1, 1], np.float16), arr([3, 0], np.float16))
    assert y[0] == np.float16(1 / 3) and y[1] == np.inf


def test_modulus_signs():
    a, b = arr([7, -7, 7, -7, 7], np.int8), arr([3, 3, -3, -3, 0], np.int8)
    np.testing.assert_array_equal(run("MODULUS_FLOOR", np.int8, a, b), [1, 2, -2, -1, 0])
    np.testing.assert_array_equal(run("MODULUS_TRUNCATE", np.int8, a, b), [1, -1, 1, -1, 0])
    fa, fb = arr([-7.5, 7.5], np.float32), arr([2, -2], np.float32)
    np.testing.assert_array_equal(run("MODULUS_FLOOR", np.float32, fa, fb), [0.5, -0.5])
    np.testing.assert_array_equal(run("MODULUS_TRUNCATE", np.float32, fa, fb), [-1.5, 1.5])


def test_mean_integers_halve_toward_zero_without_overflow():
    big = 2**31 - 1
    a, b = arr([3, -3, big], np.int32), arr([4, -4, big], np.int32)
    np.testing.assert_array_equal(run("MEAN", np.int32, a, b), [3, -3, big])


def test_min_max_propagate_nan():
    a, b = arr([1, np.nan, 3], np.float32), arr([2, 5, np.nan], np.float32)
    np.testing.assert_array_equal(run("MIN", np.float32, a, b), [1, np.nan, np.nan])
    np.testing.assert_array_equal(run("MAX", np.float32, a, b), [2, np.nan, np.nan])


def test_integer_wraparound():
    np.testing.assert_array_equal(
        run("MULTIPLY", np.uint8, arr([16, 3], np.uint8), arr([16, 5], np.uint8)), [0, 15]
    )
    np.testing.assert_array_equal(
        run("SUBTRACT", np.uint32, arr([1], np.uint32), arr([2], np.uint32)), [2**32 - 1]
    )
    np.testing.assert_array_equal(
        run("DIFFERENCE_SQUARE", np.uint32, arr([1], np.uint32), arr([3], np.uint32)), [4]
    )
    np.testing.assert_array_equal(run("NEGATE", np.int8, arr([-128, 5], np.int8)), [-128, -5])
    y = run("ABS", np.int8, arr([-128, -5], np.int8), scale_bias=None)
    np.testing.assert_array_equal(y, [-128, 5])


def test_scale_bias_is_applied_first():
    sb = NS(scale=2.0, bias=-1.0)
    y = run("ABS", np.float32, arr([0.25, 3], np.float32), scale_bias=sb)
    np.testing.assert_array_equal(y, [0.5, 5])
    # Integer tensors: 3 * 0.5 = 1.5 truncates to 1 (our choice).
    y = run("ABS", np.int32, arr([3, -3], np.int32), scale_bias=NS(scale=0.5, bias=0.0))
    np.testing.assert_array_equal(y, [1, 1])
    y = run("EXP", np.float32, arr([1], np.float32), scale_bias=NS(scale=0.0, bias=0.0))
    np.testing.assert_array_equal(y, [1])


def test_threshold_min_conversion():
    x = arr([-2, 0.5, 3, np.nan], np.float32)
    np.testing.assert_array_equal(
        run("THRESHOLD", np.float32, x, scale_bias=None, min=1.0), [1, 1, 3, np.nan]
    )
    xi = arr([-5, -2, 0], np.int32)
    np.testing.assert_array_equal(
        run("THRESHOLD", np.int32, xi, scale_bias=None, min=-2.5), [-2, -2, 0]
    )
    xu = arr([0, 7], np.uint8)
    np.testing.assert_array_equal(run("THRESHOLD", np.uint8, xu, scale_bias=None, min=-1.0), [0, 7])


def test_pow_and_constant_pow():
    y = run("CONSTANT_POW", np.float32, arr([-2, -2, 4], np.float32), scale_bias=None, exponent=3.0)
    np.testing.assert_array_equal(y, [-8, -8, 64])
    y = run("CONSTANT_POW", np.float32, arr([-2, 4], np.float32), scale_bias=None, exponent=0.5)
    assert np.isnan(y[0]) and y[1] == 2
    base, expo = arr([3, 2, 2, -1, 0], np.int32), arr([4, 31, -1, -3, -2], np.int32)
    y = run("POW", np.int32, base, expo, scale_bias=None)
    np.testing.assert_array_equal(y, [81, -(2**31), 0, -1, 0])
    y = run(
        "POW", np.float32, arr([-2, -2], np.float32), arr([2, 0.5], np.float32), scale_bias=None
    )
    assert y[0] == 4 and np.isnan(y[1])


def test_unary_float_values():
    np.testing.assert_allclose(
        run("ERF", np.float32, arr([0, 1, np.inf], np.float32)), [0, math.erf(1), 1]
    )
    y = run("ATAN_YX", np.float32, arr([1, 1], np.float32), arr([-1, 0], np.float32))
    np.testing.assert_allclose(y, [3 * math.pi / 4, math.pi / 2], rtol=1e-7)
    y = run("ACOSH", np.float16, arr([1, 0.5], np.float16), scale_bias=None)
    assert y[0] == 0 and np.isnan(y[1])


def test_value_scale_2d_per_channel_bias():
    x = np.arange(6, dtype=np.float32).reshape(1, 3, 1, 2)
    y = run(
        "DML_OPERATOR_VALUE_SCALE_2D", np.float32, x, scale=2.0, channel_count=3, bias=[1, 2, 3]
    )
    np.testing.assert_array_equal(y.reshape(3, 2), [[1, 3], [6, 8], [11, 13]])


def test_logical_and_comparisons():
    a, b = arr([0, 2, 0, 7], np.uint8), arr([0, 0, 5, 1], np.uint8)
    np.testing.assert_array_equal(run("LOGICAL_AND", np.uint8, a, b), [0, 0, 0, 1])
    np.testing.assert_array_equal(run("LOGICAL_OR", np.uint8, a, b), [0, 1, 1, 1])
    np.testing.assert_array_equal(run("LOGICAL_XOR", np.uint8, a, b), [0, 1, 1, 0])
    np.testing.assert_array_equal(run("LOGICAL_NOT", np.uint32, a.astype(np.uint32)), [1, 0, 1, 0])
    fa, fb = arr([np.nan, 1, -0.0, 2], np.float16), arr([np.nan, 1, 0.0, 1], np.float16)
    np.testing.assert_array_equal(run("LOGICAL_EQUALS", np.uint32, fa, fb), [0, 1, 1, 0])
    np.testing.assert_array_equal(run("LOGICAL_GREATER_THAN", np.uint8, fa, fb), [0, 0, 0, 1])
    np.testing.assert_array_equal(
        run("LOGICAL_GREATER_THAN_OR_EQUAL", np.uint8, fa, fb), [0, 1, 1, 1]
    )
    np.testing.assert_array_equal(run("LOGICAL_LESS_THAN", np.uint8, fa, fb), [0, 0, 0, 0])
    np.testing.assert_array_equal(run("LOGICAL_LESS_THAN_OR_EQUAL", np.uint8, fa, fb), [0, 1, 1, 0])


@pytest.mark.parametrize(
    ("mode", "expected"),
    [("EITHER", [1, 1, 0, 0]), ("POSITIVE", [1, 0, 0, 0]), ("NEGATIVE", [0, 1, 0, 0])],
)
def test_is_infinity_modes_and_is_nan(mode, expected):
    x = arr([np.inf, -np.inf, np.nan, 1e4], np.float16)
    y = run("IS_INFINITY", np.uint8, x, infinity_mode=InfinityMode[mode])
    np.testing.assert_array_equal(y, expected)
    np.testing.assert_array_equal(run("IS_NAN", np.uint32, x), [0, 0, 1, 0])


def test_bitwise_on_raw_encodings():
    a, b = arr([1.5], np.float32), arr([-1.5], np.float32)
    np.testing.assert_array_equal(run("BIT_AND", np.float32, a, b), [1.5])
    np.testing.assert_array_equal(run("BIT_XOR", np.float32, a, b), [-0.0])
    np.testing.assert_array_equal(
        run("BIT_OR", np.int8, arr([-128], np.int8), arr([1], np.int8)), [-127]
    )
    # -1.0 in float16 is 0xBC00 = 0b1011_1100_0000_0000: five 1 bits.
    np.testing.assert_array_equal(run("BIT_COUNT", np.uint8, arr([-1.0], np.float16)), [5])


def test_shifts_are_logical_and_saturate_to_zero():
    a, b = arr([1, 1, 255, 255, 128], np.uint8), arr([7, 8, 7, 200, 1], np.uint8)
    np.testing.assert_array_equal(run("BIT_SHIFT_LEFT", np.uint8, a, b), [128, 0, 128, 0, 0])
    np.testing.assert_array_equal(run("BIT_SHIFT_RIGHT", np.uint8, a, b), [0, 0, 1, 0, 64])
    big = arr([2**63], np.uint64)
    np.testing.assert_array_equal(run("BIT_SHIFT_RIGHT", np.uint64, big, arr([63], np.uint64)), [1])
    np.testing.assert_array_equal(run("BIT_SHIFT_LEFT", np.uint64, big, arr([64], np.uint64)), [0])
