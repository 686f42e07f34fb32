"""Element-wise math, logical and bitwise operators (the table rows of ops/elementwise_math.py and
ops/logical.py): worked values, properties against tests/reference/math_ops.py over every data type
of each support table and ranks 1-8, one rule row per operator and per shared rule, jit, vmap and
gradients."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import reference
import strategies as S
from hypothesis import given
from hypothesis import strategies as st

import dml_jax as dml
from dml_jax import catalog, registry
from dml_jax.ops import elementwise_math, logical

ROWS = {f"DML_OPERATOR_{r.name}": r for r in elementwise_math.ROWS + logical.ROWS}
NAMES = sorted(ROWS)
SPECS = {name: registry.lookup(name) for name in NAMES}
FLOAT_NAMES = [n for n in NAMES if dml.DataType.FLOAT32 in SPECS[n].tables[n][-1].inputs]


def retyped(name: str, type_name: str, shape, **attrs):
    """The operator's example in ``type_name`` and ``shape`` (catalog.retyped), ``attrs`` set."""
    desc = catalog.retyped(catalog.example_desc(SPECS[name]), type_name, tuple(shape))
    return dataclasses.replace(desc, **attrs)


# --- worked values --------------------------------------------------------------------------

X = [-1.5, -0.25, 0.0, 0.5, 2.0]
A = [7, -7, 7, -7, 6]
B = [2, 2, -2, -2, 4]


def _f(values):
    return np.array(values, np.float32)


def _unary_seed(name, fn):
    desc = retyped(name, "FLOAT32", (5,))
    return (desc, (_f(X),), (_f([fn(v) for v in X]),))


def _binary_seed(name, type_name, a, b, expected):
    desc = retyped(name, type_name, (len(a),))
    dt = desc.input_slots()[0][1].dtype
    out = desc.output_tensor.dtype
    return (desc, (np.array(a, dt), np.array(b, dt)), (np.array(expected, out),))


def _nan(fn):
    def safe(v):
        try:
            return fn(v)
        except (ValueError, ZeroDivisionError):
            return math.nan

    return safe


E = "DML_OPERATOR_ELEMENT_WISE_"
SEEDS = [
    _unary_seed(E + "ABS", abs),
    _unary_seed(E + "ACOS", _nan(math.acos)),
    _unary_seed(E + "ACOSH", _nan(math.acosh)),
    _unary_seed(E + "ASIN", _nan(math.asin)),
    _unary_seed(E + "ASINH", math.asinh),
    _unary_seed(E + "ATAN", math.atan),
    _unary_seed(E + "ATANH", _nan(math.atanh)),
    _unary_seed(E + "CEIL", math.ceil),
    _unary_seed(E + "COS", math.cos),
    _unary_seed(E + "COSH", math.cosh),
    _unary_seed(E + "ERF", math.erf),
    _unary_seed(E + "EXP", math.exp),
    _unary_seed(E + "FLOOR", math.floor),
    _unary_seed(E + "LOG", lambda v: -math.inf if v == 0 else _nan(math.log)(v)),
    _unary_seed(E + "RECIP", lambda v: math.inf if v == 0 else 1 / v),
    _unary_seed(E + "SIN", math.sin),
    _unary_seed(E + "SINH", math.sinh),
    _unary_seed(E + "SQRT", _nan(math.sqrt)),
    _unary_seed(E + "TAN", math.tan),
    _unary_seed(E + "TANH", math.tanh),
    _unary_seed(E + "CONSTANT_POW", lambda v: v * v),  # Exponent 2
    _unary_seed(E + "THRESHOLD", lambda v: max(v, 0.25)),  # Min 0.25
    _unary_seed(E + "NEGATE", lambda v: -v),
    _unary_seed(E + "SIGN", lambda v: (v > 0) - (v < 0)),
    # DirectML's DML_ROUNDING_MODE table: -2.5 -1.75 -1.5 -1.25 0 1.25 1.5 1.75 2.5
    *[
        (
            retyped(E + "ROUND", "FLOAT32", (9,), rounding_mode=mode),
            (_f([-2.5, -1.75, -1.5, -1.25, 0, 1.25, 1.5, 1.75, 2.5]),),
            (_f(want),),
        )
        for mode, want in (
            ("HALVES_TO_NEAREST_EVEN", [-2, -2, -2, -1, 0, 1, 2, 2, 2]),
            ("TOWARD_ZERO", [-2, -1, -1, -1, 0, 1, 1, 1, 2]),
            ("TOWARD_INFINITY", [-3, -2, -2, -1, 0, 1, 2, 2, 3]),
        )
    ],
    _binary_seed(E + "SUBTRACT", "INT8", [-128, 127, 5], [1, -1, 7], [127, -128, -2]),
    _binary_seed(E + "MULTIPLY", "INT32", A, B, [14, -14, -14, 14, 24]),
    _binary_seed(E + "DIVIDE", "INT32", A + [5], B + [0], [3, -3, -3, 3, 1, 0]),
    _binary_seed(E + "DIVIDE", "FLOAT32", [7, -1, 0], [2, 0, 4], [3.5, -math.inf, 0]),
    _binary_seed(E + "MAX", "FLOAT32", [1, math.nan, -0.5], [2, 3, -1], [2, math.nan, -0.5]),
    _binary_seed(E + "MIN", "INT16", A, B, [2, -7, -2, -7, 4]),
    _binary_seed(
        E + "MEAN", "INT32", A + [2**31 - 1], B + [2**31 - 1], [4, -2, 2, -4, 5, 2**31 - 1]
    ),
    _binary_seed(E + "MODULUS_TRUNCATE", "INT32", A + [5], B + [0], [1, -1, 1, -1, 2, 0]),
    _binary_seed(E + "MODULUS_FLOOR", "INT32", A + [5], B + [0], [1, 1, -1, -1, 2, 0]),
    _binary_seed(E + "MODULUS_FLOOR", "FLOAT32", [7.5, -7.5], [2, 2], [1.5, 0.5]),
    _binary_seed(
        E + "ATAN_YX",
        "FLOAT32",
        [1, 1, -1],
        [1, -1, 0],
        [math.pi / 4, 3 * math.pi / 4, -math.pi / 2],
    ),
    _binary_seed(E + "DIFFERENCE_SQUARE", "INT32", A, B, [25, 81, 81, 25, 4]),
    _binary_seed(
        E + "POW", "INT32", [2, -2, 3, 1, -1, 2], [10, 3, 0, -5, -3, -1], [1024, -8, 1, 1, -1, 0]
    ),
    _binary_seed(E + "POW", "FLOAT32", [-2, 4, -8], [3, 0.5, 1 / 3], [-8, 2, math.nan]),
    _binary_seed(E + "LOGICAL_AND", "UINT8", [0, 1, 2, 0], [0, 0, 3, 7], [0, 0, 1, 0]),
    _binary_seed(E + "LOGICAL_OR", "UINT32", [0, 1, 2, 0], [0, 0, 3, 7], [0, 1, 1, 1]),
    _binary_seed(E + "LOGICAL_XOR", "UINT32", [0, 1, 2, 0], [0, 0, 3, 7], [0, 1, 0, 1]),
    (
        retyped(E + "LOGICAL_NOT", "UINT8", (3,)),
        (np.array([0, 1, 9], np.uint8),),
        (np.array([1, 0, 0], np.uint8),),
    ),
    _binary_seed(
        E + "LOGICAL_EQUALS", "FLOAT32", [1, math.nan, 0.0], [1, math.nan, -0.0], [1, 0, 1]
    ),
    _binary_seed(E + "LOGICAL_GREATER_THAN", "INT8", [1, -2, 3], [1, -3, 4], [0, 1, 0]),
    _binary_seed(E + "LOGICAL_GREATER_THAN_OR_EQUAL", "INT8", [1, -2, 3], [1, -3, 4], [1, 1, 0]),
    _binary_seed(E + "LOGICAL_LESS_THAN", "FLOAT16", [1, math.nan, 3], [2, 1, 3], [1, 0, 0]),
    _binary_seed(
        E + "LOGICAL_LESS_THAN_OR_EQUAL", "FLOAT16", [1, math.nan, 3], [2, 1, 3], [1, 0, 1]
    ),
    (
        retyped(E + "IS_NAN", "FLOAT32", (3,)),
        (_f([math.nan, math.inf, 0]),),
        (np.array([1, 0, 0], np.uint8),),
    ),
    (
        retyped(E + "IS_INFINITY", "FLOAT32", (4,)),
        (_f([math.inf, -math.inf, math.nan, 1]),),
        (np.array([1, 0, 0, 0], np.uint8),),
    ),
    # The IF page's example.
    (
        retyped(E + "IF", "FLOAT32", (2, 2)),
        (np.array([[1, 0], [1, 1]], np.uint8), _f([[1, 2], [3, 4]]), _f([[9, 8], [7, 6]])),
        (_f([[1, 8], [3, 4]]),),
    ),
    _binary_seed(E + "BIT_AND", "UINT8", [0b1100, 255], [0b1010, 15], [0b1000, 15]),
    _binary_seed(E + "BIT_OR", "UINT16", [0b1100, 256], [0b1010, 1], [0b1110, 257]),
    _binary_seed(E + "BIT_XOR", "UINT32", [0b1100, 7], [0b1010, 7], [0b0110, 0]),
    (
        retyped(E + "BIT_NOT", "UINT8", (2,)),
        (np.array([0, 0b1010], np.uint8),),
        (np.array([255, 0b11110101], np.uint8),),
    ),
    # The BIT_COUNT page's example.
    (
        retyped(E + "BIT_COUNT", "UINT32", (4,)),
        (np.array([0, 123, 456, 789], np.uint32),),
        (np.array([0, 6, 4, 5], np.uint8),),
    ),
    _binary_seed(E + "BIT_SHIFT_LEFT", "UINT8", [1, 255, 1], [3, 1, 8], [8, 254, 0]),
    _binary_seed(E + "BIT_SHIFT_RIGHT", "UINT16", [256, 65535, 7], [4, 15, 16], [16, 1, 0]),
    (
        dml.ValueScale2DOperatorDesc(
            dml.TensorDesc("FLOAT32", [1, 3, 1, 2]),
            dml.TensorDesc("FLOAT32", [1, 3, 1, 2]),
            2.0,
            bias=[10, 20, 30],
        ),
        (_f([1, 2, 3, 4, 5, 6]).reshape(1, 3, 1, 2),),
        (_f([12, 14, 26, 28, 40, 42]).reshape(1, 3, 1, 2),),
    ),
]


def _seed_id(seed):
    return seed[0].operator_type.removeprefix(E).removeprefix("DML_OPERATOR_")


@pytest.mark.parametrize("desc, inputs, expected", SEEDS, ids=[_seed_id(s) for s in SEEDS])
def test_worked_values(desc, inputs, expected):
    got = dml.compile_operator(desc)(*inputs)
    for want, check in (
        (expected[0], np.asarray(got)),
        (expected[0], reference.reference(desc, *inputs)[0]),
    ):
        assert check.dtype == want.dtype
        if want.dtype.kind == "f":
            np.testing.assert_allclose(check, want, rtol=2e-6, atol=1e-6)
        else:
            np.testing.assert_array_equal(check, want)


# --- properties against the reference ------------------------------------------------------


def _types(name: str) -> list[str]:
    return S.types_at_newest(name)


@st.composite
def cases(draw, names=NAMES, types=None):
    name = draw(st.sampled_from(names))
    type_name = draw(st.sampled_from(types or _types(name)))
    shape = draw(S.shapes(ranks=S.ranks_at_newest(name), max_elements=128))
    attrs = {}
    row = ROWS[name]
    if row.scale_bias and type_name.startswith("FLOAT") and draw(st.booleans()):
        attrs["scale_bias"] = dml.ScaleBias(draw(st.sampled_from([0.5, 2.0, -1.0])), 0.25)
    desc = retyped(name, type_name, shape, **attrs)
    rng = draw(S.seeds())
    style = draw(st.sampled_from(("full", "ties", "small")))
    inputs = []
    for _, t in desc.input_slots():
        if t is desc.input_slots()[0][1] or t.data_type.name == type_name:
            inputs.append(S.values(rng, t.data_type.name, t.sizes, style))
        else:
            inputs.append(S.values(rng, t.data_type.name, t.sizes, "ties"))
    return S.Case(desc, tuple(inputs))


def _close(case: S.Case, got, want) -> None:
    out = want[0].dtype
    if out.kind != "f":
        S.assert_same(got, want, exact=True)
        return
    tol = {"rtol": 2e-3, "atol": 2e-3} if out == np.float16 else {"rtol": 3e-5, "atol": 1e-5}
    S.assert_same(got, want, exact=False, **tol)


@pytest.mark.parametrize("name", NAMES)
@S.FEW
@given(data=st.data())
def test_matches_reference(name, data):
    case = data.draw(cases(names=[name]))
    with S.x64(case.desc):
        got = S.run(case)
        want = reference.reference(case.desc, *case.inputs)
    _close(case, got, want)


@S.FEW
@given(case=cases())
def test_jit_equals_eager(case):
    with S.x64(case.desc):
        S.check_jit(case, **S.same_program_tolerance(case))


@S.FEW
@given(case=cases())
def test_vmap_equals_loop(case):
    with S.x64(case.desc):
        S.check_vmap(case, **S.same_program_tolerance(case))


@pytest.mark.parametrize(
    "name",
    [
        n
        for n in FLOAT_NAMES
        if ROWS[n].output_type == "same" and ROWS[n].differentiable is not False and n != E + "IF"
    ],
)
def test_gradients(name):
    # Away from kinks and domain edges: x in [0.3, 0.7] (ACOSH: 1.3-1.7), b the same.
    desc = retyped(name, "FLOAT32", (2, 3))
    rng = np.random.default_rng(3)
    base = 1.0 if name.endswith("ACOSH") else 0.0
    inputs = tuple(
        (base + rng.uniform(0.3, 0.7, (2, 3))).astype(t.dtype) for _, t in desc.input_slots()
    )
    S.check_grads(S.Case(desc, inputs), atol=2e-2, rtol=2e-2)


# --- rules ----------------------------------------------------------------------------------


def _mismatched_sizes(name):
    def factory():
        desc = retyped(name, _types(name)[0], (2, 3))
        return dataclasses.replace(desc, output_tensor=desc.output_tensor.like(sizes=(3, 2)))

    return factory


INVALID_ROWS = [(_mismatched_sizes(name), r"OutputTensor\.Sizes must equal") for name in NAMES] + [
    (
        lambda: retyped(E + "SQRT", "INT32", (3,)),
        r"^DML_OPERATOR_ELEMENT_WISE_SQRT: InputTensor with data type INT32",
    ),
    (
        lambda: dataclasses.replace(
            retyped(E + "ADD", "FLOAT32", (3,))
            if False
            else retyped(E + "SUBTRACT", "FLOAT32", (3,)),
            b_tensor=dml.TensorDesc("FLOAT16", [3]),
        ),
        r"^DML_OPERATOR_ELEMENT_WISE_SUBTRACT: BTensor\.DataType must equal ATensor\.DataType",
    ),
    (
        lambda: retyped(E + "ABS", "INT32", (3,), scale_bias=dml.ScaleBias(2, 0)),
        r"ScaleBias is supported only for float tensors",
    ),
    (
        lambda: dataclasses.replace(
            retyped(E + "IF", "FLOAT32", (3,)), condition_tensor=dml.TensorDesc("FLOAT32", [3])
        ),
        r"^DML_OPERATOR_ELEMENT_WISE_IF: ConditionTensor\.DataType must be UINT8, got FLOAT32",
    ),
    (
        lambda: dataclasses.replace(
            retyped(E + "LOGICAL_EQUALS", "FLOAT32", (3,)),
            output_tensor=dml.TensorDesc("INT8", [3]),
        ),
        r"^DML_OPERATOR_ELEMENT_WISE_LOGICAL_EQUALS: OutputTensor with data type INT8",
    ),
    (
        lambda: dml.ValueScale2DOperatorDesc(
            dml.TensorDesc("FLOAT32", [1, 3, 1, 2]),
            dml.TensorDesc("FLOAT32", [1, 3, 1, 2]),
            2.0,
            bias=[1, 2],
        ),
        r"^DML_OPERATOR_VALUE_SCALE_2D: Bias must hold 1 or 3 values",
    ),
    (
        lambda: dml.ValueScale2DOperatorDesc(
            dml.TensorDesc("FLOAT32", [1, 1, 1, 2]),
            dml.TensorDesc("FLOAT32", [1, 1, 1, 2]),
            2.0,
            bias=[1, 2, 3],
        ),
        r"^DML_OPERATOR_VALUE_SCALE_2D: Bias must hold one value per channel",
    ),
    (
        lambda: retyped(E + "ROUND", "FLOAT32", (3,), rounding_mode="UP"),
        r"^DML_OPERATOR_ELEMENT_WISE_ROUND: RoundingMode must be a RoundingMode",
    ),
]


@pytest.mark.parametrize("factory, pattern", INVALID_ROWS)
def test_rules(factory, pattern):
    with pytest.raises(dml.ValidationError, match=pattern):
        dml.validate(factory())


def test_value_scale_2d_not_in_place_and_comparisons_not_in_place():
    assert not registry.lookup("DML_OPERATOR_VALUE_SCALE_2D").in_place
    assert not registry.lookup(E + "LOGICAL_EQUALS").in_place
    assert registry.lookup(E + "SUBTRACT").in_place


def test_bitwise_on_float_bits_from_4_1():
    desc = retyped(E + "BIT_XOR", "FLOAT32", (2,))
    with pytest.raises(dml.ValidationError, match="lowest feature level that supports it is 4_1"):
        dml.validate(desc, "4_0")
    a = _f([1.0, -2.0])
    got = np.asarray(dml.compile_operator(desc)(a, _f([-0.0, -0.0])))
    np.testing.assert_array_equal(got, _f([-1.0, 2.0]))  # the sign bit flipped


def test_division_by_a_compiled_in_scalar_is_correctly_rounded():
    """A divisor the program knows when compiled (a constant, a weight compiled in) still gives
    the correctly rounded quotient on the CPU, where XLA would multiply by its reciprocal
    (docs/semantics.md); NaN and infinite dividends keep IEEE's quotients."""
    import jax

    if jax.default_backend() != "cpu":
        pytest.skip("on NVIDIA GPUs XLA's division is itself within 2 ulps")
    rng = np.random.default_rng(11)
    a = np.concatenate([rng.standard_normal(4096), [np.nan, np.inf, -np.inf, 0.0]]).astype("f4")
    desc = retyped(E + "DIVIDE", "FLOAT32", a.shape)
    run = dml.compile_operator(desc)
    for b in (0.37, 3.0, 1e-3):
        divisor = np.full(a.shape, b, np.float32)
        got = np.asarray(jax.jit(lambda a, divisor=divisor: run(a, divisor))(a))
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(got, a / np.float32(b))


# --- every 8-bit pair, and the exponents CONSTANT_POW computes without pow ---------------------


@pytest.mark.parametrize("type_name", ["INT8", "UINT8"])
@pytest.mark.parametrize("op", ["DIVIDE", "MODULUS_TRUNCATE", "MODULUS_FLOOR"])
def test_8_bit_division_every_pair(op, type_name):
    """Every pair of 8-bit values (zero divisors, INT8_MIN / -1 included) agrees with the
    integer reference."""
    name = "DML_OPERATOR_ELEMENT_WISE_" + op
    dt = np.dtype(type_name.lower())
    values = np.arange(np.iinfo(dt).min, np.iinfo(dt).max + 1)
    a, b = (g.astype(dt).ravel() for g in np.meshgrid(values, values))
    desc = retyped(name, type_name, a.shape)
    y = dml.compile_operator(desc)(a, b)
    (expected,) = reference.reference(desc, a, b)
    np.testing.assert_array_equal(np.asarray(y), expected)


@pytest.mark.parametrize("exponent", [1.0, 2.0, 0.5, -1.0])
@pytest.mark.parametrize("type_name", ["FLOAT32", "FLOAT16"])
def test_constant_pow_exact_exponents_keep_ieee_pow(exponent, type_name):
    """Exponents 1, 2, 0.5 and -1 are one multiply, square root or division, with pow's special
    values (IEEE 754 / C99): pow(-0, 0.5) = +0, pow(-inf, 0.5) = +inf, pow(-0, -1) = -inf."""
    x = np.array([-np.inf, -3.0, -0.0, 0.0, 1e-3, 0.7, 3.0, 300.0, np.inf, np.nan])
    desc = retyped("DML_OPERATOR_ELEMENT_WISE_CONSTANT_POW", type_name, x.shape, exponent=exponent)
    dt = desc.input_tensor.dtype
    y = dml.compile_operator(desc)(x.astype(dt))
    with np.errstate(over="ignore"):  # 300 ** 2 overflows float16: inf, as expected
        wide = _ieee_pow(x.astype(dt).astype(np.float64), exponent).astype(dt)  # rounded once
    y = np.asarray(y)
    # Special values (zeros and their signs, infinities, NaN) exactly; other values within 2
    # ulps (XLA's GPU code divides and takes square roots approximately).
    np.testing.assert_array_equal(np.signbit(y), np.signbit(wide))
    special = ~np.isfinite(wide) | (wide == 0)
    np.testing.assert_array_equal(y[special], wide[special])
    ulp = np.spacing(np.abs(wide[~special]).astype(dt))
    assert np.all(np.abs(y[~special].astype(np.float64) - wide[~special]) <= 2 * ulp)


def _ieee_pow(x: np.ndarray, exponent: float) -> np.ndarray:
    """C99 pow (Annex F) in float64, one element at a time: Python's math.pow, NaN where it
    raises for a negative base and a non-integer exponent, inf where it overflows."""
    out = []
    for v in x.tolist():
        if v == 0 and exponent < 0:  # a pole: +-inf, the sign of zero kept by an odd exponent
            out.append(math.copysign(math.inf, v) if exponent == -1.0 else math.inf)
            continue
        try:
            out.append(math.pow(v, exponent))
        except ValueError:
            out.append(math.nan)
        except (OverflowError, ZeroDivisionError):
            out.append(math.copysign(math.inf, v) if exponent == -1.0 else math.inf)
    return np.array(out)
