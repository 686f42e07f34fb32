"""Activation operators: worked values, properties against tests/reference/activation.py, rules,
jit / vmap / gradients, and their use as a FusedActivation."""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import pytest
import reference
import strategies as S
from hypothesis import given
from hypothesis import strategies as st

import dml_jax as dml

ACTIVATIONS = {
    "DML_OPERATOR_ACTIVATION_ELU": (dml.ActivationEluOperatorDesc, {"alpha": 0.5}),
    "DML_OPERATOR_ACTIVATION_LINEAR": (dml.ActivationLinearOperatorDesc, {"alpha": 2, "beta": -1}),
    "DML_OPERATOR_ACTIVATION_RELU": (dml.ActivationReluOperatorDesc, {}),
    "DML_OPERATOR_ACTIVATION_SIGMOID": (dml.ActivationSigmoidOperatorDesc, {}),
}
NAMES = sorted(ACTIVATIONS)


def make(name: str, type_name: str = "FLOAT32", sizes=(2, 3), **attrs):
    cls, defaults = ACTIVATIONS[name]
    t = dml.TensorDesc(type_name, list(sizes))
    return cls(t, t, **{**defaults, **attrs})


# Values worked by hand from each page's formula on x = -2, -1, -0.5, 0, 0.5, 2.
X = np.array([-2.0, -1.0, -0.5, 0.0, 0.5, 2.0], np.float32).reshape(2, 3)
SEEDS = [
    (
        make("DML_OPERATOR_ACTIVATION_ELU"),
        (X,),
        (
            np.array(
                [0.5 * (math.exp(-2) - 1), 0.5 * (math.exp(-1) - 1), 0.5 * (math.exp(-0.5) - 1)]
                + [0.0, 0.5, 2.0],
                np.float32,
            ).reshape(2, 3),
        ),
    ),
    (
        make("DML_OPERATOR_ACTIVATION_LINEAR"),
        (X,),
        (np.array([-5, -3, -2, -1, 0, 3], np.float32).reshape(2, 3),),
    ),
    (
        make("DML_OPERATOR_ACTIVATION_RELU"),
        (X,),
        (np.array([0, 0, 0, 0, 0.5, 2], np.float32).reshape(2, 3),),
    ),
    (
        make("DML_OPERATOR_ACTIVATION_SIGMOID"),
        (X,),
        (np.array([1 / (1 + math.exp(-v)) for v in X.ravel()], np.float32).reshape(2, 3),),
    ),
]


@pytest.mark.parametrize("desc, inputs, expected", SEEDS, ids=[s[0].operator_type for s in SEEDS])
def test_activation_worked_values(desc, inputs, expected):
    got = dml.compile_operator(desc)(*inputs)
    np.testing.assert_allclose(np.asarray(got), expected[0], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(reference.reference(desc, *inputs)[0], expected[0], rtol=1e-6)


@st.composite
def activation_cases(draw, name=None):
    name = name or draw(st.sampled_from(NAMES))
    key = name
    type_name = draw(st.sampled_from(S.types_at_newest(key)))
    shape = draw(S.shapes(ranks=S.ranks_at_newest(key)))
    attrs = {}
    if "alpha" in ACTIVATIONS[name][1]:
        attrs["alpha"] = draw(st.floats(-3, 3, width=32))
    if "beta" in ACTIVATIONS[name][1]:
        attrs["beta"] = draw(st.floats(-3, 3, width=32))
    rng = draw(S.seeds())
    style = "ties" if type_name.startswith("INT") else draw(st.sampled_from(("full", "small")))
    x = S.values(rng, type_name, shape, style)
    return S.Case(make(name, type_name, shape, **attrs), (x,))


def _tolerance(case: S.Case) -> dict:
    if case.inputs[0].dtype == np.float16:
        return {"rtol": 2e-3, "atol": 2e-3}
    return {"rtol": 2e-6, "atol": 1e-6}


@given(case=activation_cases())
def test_activation_matches_reference(case):
    got = S.run(case)
    want = reference.reference(case.desc, *case.inputs)
    exact = not np.issubdtype(case.inputs[0].dtype, np.floating)
    S.assert_same(got, want, exact=exact, **({} if exact else _tolerance(case)))


@S.FEW
@given(case=activation_cases())
def test_activation_jit_equals_eager(case):
    S.check_jit(case, **S.same_program_tolerance(case))


@S.FEW
@given(case=activation_cases())
def test_activation_vmap_equals_loop(case):
    S.check_vmap(case, **S.same_program_tolerance(case))


@pytest.mark.parametrize("name", NAMES)
def test_activation_gradients(name):
    rng = np.random.default_rng(0)
    # Away from the kinks (x = 0) where finite differences straddle two branches.
    x = rng.uniform(0.2, 2.0, (3, 4)) * rng.choice([-1.0, 1.0], (3, 4))
    case = S.Case(make(name, "FLOAT32", (3, 4)), (x.astype(np.float32),))
    S.check_grads(case, atol=2e-2, rtol=2e-2)


def test_relu_gradient_at_zero_is_zero_and_nan_propagates():
    op = dml.compile_operator(make("DML_OPERATOR_ACTIVATION_RELU", sizes=(4,)))
    import jax

    g = jax.grad(lambda x: op.fn(x).sum())(jnp.array([-1.0, 0.0, -0.0, 1.0]))
    np.testing.assert_array_equal(np.asarray(g), [0, 0, 0, 1])
    y = np.asarray(op(jnp.array([np.nan, -0.0, -3.0, 3.0], jnp.float32)))
    assert np.isnan(y[0]) and y[1] == 0 and not np.signbit(y[1]) and y[2] == 0 and y[3] == 3


def test_elu_gradient_finite_for_large_inputs():
    import jax

    op = dml.compile_operator(make("DML_OPERATOR_ACTIVATION_ELU", sizes=(3,)))
    g = jax.grad(lambda x: op.fn(x).sum())(jnp.array([100.0, -100.0, 0.0]))
    assert np.all(np.isfinite(np.asarray(g)))


def test_relu_integer_types_from_5_1():
    desc = make("DML_OPERATOR_ACTIVATION_RELU", "INT8", (5,))
    dml.validate(desc, "5_1")
    with pytest.raises(dml.ValidationError, match="lowest feature level that supports it is 5_1"):
        dml.validate(desc, "5_0")
    x = np.array([-128, -1, 0, 1, 127], np.int8)
    np.testing.assert_array_equal(np.asarray(dml.compile_operator(desc)(x)), [0, 0, 0, 1, 127])


INVALID_ROWS = [
    (
        lambda: dml.ActivationReluOperatorDesc(
            dml.TensorDesc("FLOAT32", [2, 3]), dml.TensorDesc("FLOAT32", [3, 2])
        ),
        r"^DML_OPERATOR_ACTIVATION_RELU: OutputTensor\.Sizes must equal InputTensor\.Sizes",
    ),
    (
        lambda: dml.ActivationEluOperatorDesc(
            dml.TensorDesc("FLOAT32", [2]), dml.TensorDesc("FLOAT16", [2]), alpha=1.0
        ),
        r"^DML_OPERATOR_ACTIVATION_ELU: OutputTensor\.DataType must equal InputTensor\.DataType",
    ),
    (
        lambda: make("DML_OPERATOR_ACTIVATION_SIGMOID", "INT32", (2,)),
        r"^DML_OPERATOR_ACTIVATION_SIGMOID: InputTensor with data type INT32",
    ),
    (
        lambda: make("DML_OPERATOR_ACTIVATION_LINEAR", "FLOAT32", (1, 2, 3, 4, 5, 6)),
        None,  # valid at the newest level; rank 6 is rejected below 3_0
    ),
    (
        lambda: dml.ActivationLinearOperatorDesc(alpha=1.0, beta=0.0),
        r"^DML_OPERATOR_ACTIVATION_LINEAR: InputTensor is required",
    ),
]


@pytest.mark.parametrize("factory, pattern", INVALID_ROWS)
def test_activation_rules(factory, pattern):
    if pattern is None:
        desc = factory()
        dml.validate(desc)
        with pytest.raises(dml.ValidationError, match="DimensionCount 6 is not supported"):
            dml.validate(desc, "2_0")
        return
    with pytest.raises(dml.ValidationError, match=pattern):
        dml.validate(factory())


def test_activation_attributes_are_checked_at_construction():
    with pytest.raises(dml.ValidationError, match=r"^DML_OPERATOR_ACTIVATION_ELU: Alpha must be"):
        dml.ActivationEluOperatorDesc(alpha="big")
    with pytest.raises(dml.ValidationError, match=r"Alpha must not be NaN"):
        dml.ActivationEluOperatorDesc(alpha=float("nan"))
