"""REDUCE (all twelve functions), ARGMIN and ARGMAX: seeds, reference, conventions, transforms."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import reference
import seed_cases
import strategies as S
from hypothesis import given
from hypothesis import strategies as st
from jax import lax

import dml_jax as dml

EXACT = ("ARGMAX", "ARGMIN", "MAX", "MIN")
DIFFERENTIABLE = tuple(f for f in S.REDUCE_FUNCTIONS if f not in ("ARGMAX", "ARGMIN"))


def _t(type_name, sizes):
    return dml.TensorDesc(type_name, list(sizes))


def _reduce(function, x, axes, out_type=None):
    """A compiled REDUCE of NumPy array ``x``'s shape and type over ``axes``."""
    type_name = dml.DataType.from_dtype(x.dtype).name
    out = tuple(1 if d in axes else s for d, s in enumerate(x.shape))
    return dml.compile_operator(
        dml.ReduceOperatorDesc(
            function, _t(type_name, x.shape), _t(out_type or type_name, out), axes=list(axes)
        )
    )


@pytest.mark.parametrize("case", seed_cases.cases("reduce"), ids=repr)
def test_reduce_seed_examples(case):
    seed_cases.check(case)


# --- properties against the reference ------------------------------------------------------


def _tolerance(function: str, x: np.ndarray, axes, out_dtype) -> dict:
    """Float tolerance: output rounding plus accumulation error growing with N and magnitude."""
    acc = np.float32 if x.dtype == np.float16 else x.dtype
    eps_acc, eps_out = float(np.finfo(acc).eps), float(np.finfo(out_dtype).eps)
    n = math.prod(x.shape[a] for a in axes)
    wide = np.abs(x.astype(np.float64))
    magnitude = {
        "SUM": wide.sum(axis=tuple(axes), keepdims=True),
        "L1": wide.sum(axis=tuple(axes), keepdims=True),
        "AVERAGE": wide.mean(axis=tuple(axes), keepdims=True),
        "SUM_SQUARE": (wide * wide).sum(axis=tuple(axes), keepdims=True),
    }.get(function, 1.0)
    atol = 4 * n * eps_acc * magnitude + 4 * float(np.finfo(out_dtype).smallest_subnormal)
    return {"rtol": 4 * eps_out + 2 * n * eps_acc, "atol": np.max(atol)}


def _assert_matches_reference(case):
    got = S.run(case)
    want = reference.reference(case.desc, *case.inputs)
    d = case.desc
    if d.function.name in EXACT or not d.input_tensor.data_type.is_float:
        S.assert_same(got, want)
    else:
        S.assert_same(
            got,
            want,
            exact=False,
            **_tolerance(d.function.name, case.inputs[0], d.axes, want[0].dtype),
        )


@pytest.mark.parametrize("function", S.REDUCE_FUNCTIONS)
@S.HALF
@given(data=st.data())
def test_reduce_matches_reference(function, data):
    _assert_matches_reference(data.draw(S.reduce_cases([function])))


@pytest.mark.parametrize(
    "cls", [dml.ArgMinOperatorDesc, dml.ArgMaxOperatorDesc], ids=lambda c: c.operator_type
)
@given(data=st.data())
def test_arg_matches_reference(cls, data):
    case = data.draw(S.arg_cases(cls))
    S.assert_same(S.run(case), reference.reference(case.desc, *case.inputs))


@given(st.one_of(S.arg_cases(), S.reduce_cases(["ARGMAX", "ARGMIN", "SUM", "MAX"])))
def test_reduce_axis_order_does_not_matter(case):
    flipped = dataclasses.replace(case.desc, axes=tuple(reversed(case.desc.axes)), axis_count=None)
    S.assert_same(S.run(case), S.run(S.Case(flipped, case.inputs)))


# --- documented conventions ----------------------------------------------------------------


@pytest.mark.parametrize("cls", [dml.ArgMinOperatorDesc, dml.ArgMaxOperatorDesc])
def test_arg_nan_is_the_extreme(cls):
    x = np.array([1.0, np.nan, 5.0, np.nan, -3.0], np.float32)
    for direction, index in (("INCREASING", 1), ("DECREASING", 3)):
        d = cls(_t("FLOAT32", [5]), _t("UINT32", [1]), axes=[0], axis_direction=direction)
        np.testing.assert_array_equal(dml.compile_operator(d)(x), [index])
        np.testing.assert_array_equal(reference.reference(d, x)[0], [index])
    for function in ("ARGMAX", "ARGMIN"):
        np.testing.assert_array_equal(_reduce(function, x, [0], "UINT32")(x), [1])


def _arg_op(cls, x, axes, direction):
    """The compiled operator; FLOAT64 (no DML ARGMIN/ARGMAX type) runs the lax lowering itself."""
    if x.dtype == np.float64:
        from dml_jax.ops.reduce import arg_reduce

        largest, last = cls is dml.ArgMaxOperatorDesc, direction == "DECREASING"
        return jax.jit(lambda y: arg_reduce(y, tuple(axes), largest, last, jnp.uint32))
    type_name = dml.DataType.from_dtype(x.dtype).name
    out = tuple(1 if d in axes else s for d, s in enumerate(x.shape))
    return dml.compile_operator(
        cls(_t(type_name, x.shape), _t("UINT32", out), axes=list(axes), axis_direction=direction)
    )


_ARG_CLASSES = [dml.ArgMinOperatorDesc, dml.ArgMaxOperatorDesc]


def _arg_reference(x, axes, largest: bool, direction: str):
    """The spec reference's ARGMIN/ARGMAX (a scan in row-major order over the reduced axes)."""
    return reference.arg_extreme(x, tuple(axes), largest, direction == "DECREASING", np.int64)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_arg_signed_zeros_tie(dtype):
    # -0.0 == +0.0 in IEEE: they tie, so INCREASING reports the first and DECREASING the last.
    cases = [
        (dml.ArgMaxOperatorDesc, [-0.0, 0.0, -1.0, -0.0, -2.0], 0, 3),
        (dml.ArgMaxOperatorDesc, [0.0, -0.0, -np.inf], 0, 1),
        (dml.ArgMinOperatorDesc, [1.0, 0.0, -0.0, 2.0, 0.0], 1, 4),
        (dml.ArgMinOperatorDesc, [np.inf, -0.0, 0.0], 1, 2),
    ]
    with jax.enable_x64(dtype == "float64"):
        for cls, values, first, last in cases:
            x = np.array(values, dtype)
            for direction, index in (("INCREASING", first), ("DECREASING", last)):
                got = _arg_op(cls, x, [0], direction)(x)
                np.testing.assert_array_equal(got, [index], err_msg=f"{cls.__name__} {values}")
                assert _arg_reference(x, [0], cls is dml.ArgMaxOperatorDesc, direction)[0] == index


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_arg_many_nans_first_or_last(dtype):
    # Rows with several NaNs (either sign, any payload) among +-inf, signed zeros and ties: the
    # first NaN (INCREASING) or the last (DECREASING) wins, for adjacent, non-adjacent and
    # whole-tensor reductions.
    rng = np.random.default_rng(7)
    x = rng.integers(-2, 3, size=(3, 6, 5, 4)).astype(dtype)
    flat = x.reshape(-1)
    specials = np.array([np.inf, -np.inf, -0.0, 0.0], dtype)
    flat[rng.integers(0, flat.size, 40)] = specials[rng.integers(0, 4, 40)]
    nan_at = rng.integers(0, flat.size, 60)
    flat[nan_at] = np.nan
    bits = flat.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[flat.itemsize])
    sign = np.array(1, bits.dtype) << np.array(8 * flat.itemsize - 1, bits.dtype)
    bits[nan_at[::3]] |= sign  # negative NaNs
    bits[nan_at[1::3]] |= np.array(1, bits.dtype)  # another payload
    assert np.isnan(flat[nan_at]).all()
    with jax.enable_x64(dtype == "float64"):
        xd = jnp.asarray(x)
        for axes in [(1,), (3,), (1, 2), (0, 2), (1, 3), (0, 1, 2, 3)]:
            for cls in _ARG_CLASSES:
                for direction in ("INCREASING", "DECREASING"):
                    want = _arg_reference(x, axes, cls is dml.ArgMaxOperatorDesc, direction)
                    got = _arg_op(cls, x, axes, direction)(xd)
                    np.testing.assert_array_equal(
                        got, want, err_msg=f"{cls.__name__} {direction} {axes}"
                    )
        if dtype == "float32":
            # REDUCE's ARGMAX/ARGMIN functions share the lowering (INCREASING).
            for function in ("ARGMAX", "ARGMIN"):
                want = _arg_reference(x, (0, 2), function == "ARGMAX", "INCREASING")
                np.testing.assert_array_equal(_reduce(function, x, [0, 2], "UINT32")(xd), want)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_arg_order_keys_follow_float_order(dtype):
    # Keys of sorted values never decrease, equal values (-0.0, +0.0) share a key, and every NaN
    # maps beyond +inf (ARGMAX) or below -inf (ARGMIN).
    from dml_jax.ops.reduce import order_keys

    finfo = np.finfo(dtype)
    values = np.array(
        [
            -np.inf,
            finfo.min,
            -1.5,
            -finfo.tiny,
            -finfo.smallest_subnormal,
            -0.0,
            0.0,
            finfo.smallest_subnormal,
            finfo.tiny,
            1.0,
            finfo.max,
            np.inf,
        ],
        dtype,
    )
    with jax.enable_x64(dtype == "float64"):
        for largest in (True, False):
            k = np.asarray(order_keys(jnp.asarray(values), largest)).astype(np.int64)
            assert np.all(np.diff(k[:6]) > 0) and np.all(np.diff(k[6:]) > 0)
            assert k[5] == k[6]
            nans = np.array([np.nan, -np.nan], dtype)
            kn = np.asarray(order_keys(jnp.asarray(nans), largest)).astype(np.int64)
            assert (kn > k.max()).all() if largest else (kn < k.min()).all()


@pytest.mark.parametrize("function", ["MAX", "MIN"])
def test_reduce_max_min_propagate_nan(function):
    x = np.array([[1.0, np.nan], [2.0, 3.0]], np.float32)
    np.testing.assert_array_equal(
        _reduce(function, x, [1])(x), [[np.nan], [3.0 if function == "MAX" else 2.0]]
    )


@pytest.mark.parametrize(
    "function, type_name, values, expected",
    [
        ("SUM", "INT32", [2**31 - 1, 1], -(2**31)),
        ("SUM", "UINT32", [2**32 - 1, 2], 1),
        ("MULTIPLY", "INT32", [65536, 65536], 0),
        ("MULTIPLY", "UINT32", [65537, 65537], 131073),
        ("SUM_SQUARE", "INT32", [65536, 1], 1),
        ("L1", "INT32", [-(2**31), 0], -(2**31)),
        ("SUM", "INT64", [2**63 - 1, 1], -(2**63)),
        ("SUM", "UINT64", [2**64 - 1, 1], 0),
        ("MULTIPLY", "INT64", [2**32, 2**32], 0),
    ],
)
def test_reduce_integer_overflow_wraps_in_the_tensor_type(function, type_name, values, expected):
    with jax.enable_x64(type_name.endswith("64")):
        x = np.array(values, dtype=type_name.lower())
        np.testing.assert_array_equal(_reduce(function, x, [0])(x), [expected])
        np.testing.assert_array_equal(
            reference.reference(_reduce(function, x, [0]).desc, x)[0], [expected]
        )


def test_reduce_float16_accumulates_in_float32():
    # In float16 2048 + 1 rounds back to 2048; a float32 accumulator keeps 2050 (exact in fp16).
    x = np.array([2048, 1, 1], np.float16)
    np.testing.assert_array_equal(_reduce("SUM", x, [0])(x), np.array([2050], np.float16))
    # 60000 + 60000 overflows float16 but not the float32 accumulator.
    y = np.array([60000, 60000], np.float16)
    np.testing.assert_array_equal(_reduce("AVERAGE", y, [0])(y), np.array([60000], np.float16))
    z = np.array([200, 200], np.float16)  # 200² = 40000 fits; the sum 80000 only in float32
    assert np.isinf(_reduce("SUM_SQUARE", z, [0])(z)[0])
    np.testing.assert_allclose(_reduce("L2", z, [0])(z), [282.75], rtol=1e-3)


def test_log_sum_exp_is_stable():
    x = np.full(4, 1000.0, np.float32)
    op = _reduce("LOG_SUM_EXP", x, [0])
    np.testing.assert_allclose(op(x), [1000 + math.log(4)], rtol=1e-6)
    np.testing.assert_allclose(jax.grad(lambda a: op.fn(a).sum())(jnp.asarray(x)), [0.25] * 4)
    h = np.full(3, 20.0, np.float16)  # exp(20) overflows float16
    np.testing.assert_allclose(_reduce("LOG_SUM_EXP", h, [0])(h), [20 + math.log(3)], rtol=1e-3)


def test_log_sum_exp_of_equal_large_values_from_a_fused_product():
    """1000 equal values near 9.5e9, each a product fused into the lowering's loops: XLA's CPU
    backend contracted the product into an FMA with the subtraction of the maximum, every
    exponential came out 0 and the result -inf. The float64 value of the rounded products:
    x + log 1000, and the gradient (the softmax) 1/1000 each."""
    scale = np.float32(1 / 169)
    v = np.full(1000, 9.475692e9 / scale, np.float32)
    x = v * scale
    op = _reduce("LOG_SUM_EXP", x, [0])
    got = jax.jit(lambda a: op.fn(a * scale))(v)
    want = np.float32(np.float64(x[0]) + math.log(1000))
    np.testing.assert_allclose(np.asarray(got), [want], rtol=1e-7)
    grad = jax.jit(jax.grad(lambda a: op.fn(a * scale).sum()))(v)
    np.testing.assert_allclose(np.asarray(grad) / scale, np.full(1000, 1e-3), rtol=1e-4)


# --- gradient conventions ------------------------------------------------------------------


def _grad(function, values):
    x = np.array(values, np.float32)
    op = _reduce(function, x, [0])
    return np.asarray(jax.grad(lambda a: op.fn(a).sum())(jnp.asarray(x)))


@pytest.mark.parametrize(
    "function, values, expected",
    [
        ("SUM", [1, -2, 3], [1, 1, 1]),
        ("AVERAGE", [1, -2, 3, 4], [0.25] * 4),
        ("MAX", [1, 3, 3, 2], [0, 0.5, 0.5, 0]),  # tied maxima share the cotangent equally
        ("MIN", [1, 3, 1, 1], [1 / 3, 0, 1 / 3, 1 / 3]),
        ("MAX", [1, 5, 3, 2], [0, 1, 0, 0]),
        ("MULTIPLY", [2, 3, 4], [12, 8, 6]),
        ("MULTIPLY", [0, 1, 2, 3], [6, 0, 0, 0]),  # exactly one zero: only its partial survives
        ("MULTIPLY", [0, 0, 2], [0, 0, 0]),
        ("L1", [-2, 3, -0.5], [-1, 1, -1]),
        ("L2", [3, 4], [0.6, 0.8]),
        ("L2", [0, 0, 0], [0, 0, 0]),  # defined as 0 at the zero vector, not NaN
        ("SUM_SQUARE", [1, -2, 3], [2, -4, 6]),
        ("LOG_SUM", [1, 2, 5], [0.125] * 3),
        ("LOG_SUM_EXP", [0, 0, math.log(2)], [0.25, 0.25, 0.5]),  # the softmax
    ],
)
def test_reduce_gradient_conventions(function, values, expected):
    np.testing.assert_allclose(_grad(function, values), expected, rtol=1e-6, atol=1e-7)


def test_reduce_l1_gradient_at_zero_is_jax_abs_gradient():
    ours = _grad("L1", [0.0, 2.0])
    jax_abs = jax.grad(lambda a: lax.abs(a).sum())(jnp.zeros(2, jnp.float32))
    assert ours[0] == jax_abs[0] == 1.0  # lax.abs differentiates to +1 at 0
    assert ours[1] == 1.0


def _kink_free(case):
    """Replaces inputs of MAX/MIN by well-separated distinct values, of L1 and L2 away from 0,
    of MULTIPLY by magnitudes near 1."""
    d, (x,) = case.desc, case.inputs
    rng = np.random.default_rng(x.size)
    if d.function.name in ("MAX", "MIN"):
        x = (rng.permutation(x.size).reshape(x.shape) * 0.5 - x.size / 4).astype(x.dtype)
    elif d.function.name == "L1":
        x = np.where(np.abs(x) < 0.1, x + 0.5, x).astype(x.dtype)
    elif d.function.name == "L2":
        x = np.where(np.abs(x) < 0.1, 0.5, x).astype(x.dtype)
    elif d.function.name == "MULTIPLY":
        # Magnitudes near 1 (signs kept): the product of up to 48 factors of 2 or 3 bends so
        # much that central differences miss its slope (found by the thorough profile: 0.46%
        # off at 12 factors, the analytic slope exact).
        x = ((np.sign(x) + (x == 0)) * rng.uniform(0.8, 1.25, x.shape)).astype(x.dtype)
    return S.Case(d, (x,))


@S.FEW
@given(S.reduce_cases(DIFFERENTIABLE, types=["FLOAT32"], max_elements=48))
def test_reduce_check_grads(case):
    # MULTIPLY: a product of up to 48 factors bends enough that a central difference over the
    # float32 step of 1e-2 misses its slope (0.3% at 48 factors near 1); 1e-3 does not, and
    # factors near 1 keep float32's rounding of the difference far below the tolerance.
    step = {"eps": 1e-3} if case.desc.function.name == "MULTIPLY" else {}
    S.check_grads(_kink_free(case), **step)


# --- transforms ----------------------------------------------------------------------------


@S.FEW
@given(st.one_of(S.reduce_cases(), S.arg_cases()))
def test_reduce_jit_equals_eager(case):
    if case.desc.function.name in EXACT or not case.desc.input_tensor.data_type.is_float:
        S.check_jit(case)
    else:
        S.check_jit(
            case, exact=False, rtol=2e-3 if case.inputs[0].dtype == np.float16 else 1e-5, atol=1e-6
        )


@S.FEW
@given(st.one_of(S.reduce_cases(), S.arg_cases()))
def test_reduce_vmap_equals_loop(case):
    S.check_vmap(case)


@pytest.mark.parametrize("function", S.REDUCE_FUNCTIONS)
def test_reduce_differentiable_flag(function):
    x = np.ones((2, 2), np.float32)
    out_type = "UINT32" if function in ("ARGMAX", "ARGMIN") else None
    assert _reduce(function, x, [1], out_type).differentiable is (function in DIFFERENTIABLE)
    if function in ("SUM", "MAX", "ARGMAX"):
        i = np.ones((2, 2), np.int32)
        assert _reduce(function, i, [1], out_type).differentiable is False


@pytest.mark.parametrize("cls", [dml.ArgMinOperatorDesc, dml.ArgMaxOperatorDesc])
def test_arg_operators_are_not_differentiable(cls):
    d = cls(_t("FLOAT32", [3]), _t("INT32", [1]), axes=[0])
    assert dml.compile_operator(d).differentiable is False
