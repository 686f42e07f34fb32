"""Activation operators: worked values, properties against tests/reference/activation.py, rules,
jit / vmap / gradients, and their use as a FusedActivation."""

from __future__ import annotations

import dataclasses
import math

import jax.numpy as jnp
import numpy as np
import pytest
import reference
import strategies as S
from hypothesis import given
from hypothesis import strategies as st

import dml_jax as dml
from dml_jax import catalog, registry
from dml_jax.fields import FLOAT

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


# Every registered activation (RELU_GRAD, a training operator, has its own tests).
ALL = sorted(
    n
    for n in dml.registered_operators()
    if n.startswith("DML_OPERATOR_ACTIVATION_") and not n.endswith("_GRAD")
)
_NORMALIZING = ("SOFTMAX", "LOG_SOFTMAX", "HARDMAX")


def _kind(name: str) -> str:
    """ "v0" (last axis, effective rank <= 2), "v1" (Axes) or "map" (element by element)."""
    short = name.removeprefix("DML_OPERATOR_ACTIVATION_")
    if short in _NORMALIZING:
        return "v0"
    return "v1" if short.removesuffix("1") in _NORMALIZING and short.endswith("1") else "map"


def from_registry(name: str, type_name: str, sizes, **attrs):
    """The registry example of ``name`` retyped to ``type_name`` and ``sizes``, ``attrs`` set."""
    desc = catalog.retyped(catalog.example_desc(registry.lookup(name)), type_name, tuple(sizes))
    if "axes" in attrs:
        attrs = {"axis_count": None, **attrs}
    return dataclasses.replace(desc, **attrs)


# Attribute ranges: away from DirectML's undefined or degenerate values (Alpha = 0 in CELU
# divides by 0, Steepness near 0); SOFTPLUS's Steepness < 1 is valid at the newest level.
_RANGES = {"steepness": (0.25, 4.0)}


@st.composite
def activation_cases(draw, name=None):
    name = name or draw(st.sampled_from(ALL))
    type_name = draw(st.sampled_from(S.types_at_newest(name)))
    kind = _kind(name)
    if kind == "v0":
        rank = draw(st.sampled_from(S.ranks_at_newest(name)))
        core = draw(st.lists(st.integers(1, 12), min_size=min(rank, 2), max_size=min(rank, 2)))
        shape = (1,) * (rank - len(core)) + tuple(core)
    else:
        shape = draw(S.shapes(ranks=S.ranks_at_newest(name)))
    example = catalog.example_desc(registry.lookup(name))
    attrs = {}
    for f in example.declared("attribute"):
        if f.metadata["type"] is FLOAT:
            lo, hi = _RANGES.get(f.name, (-3.0, 3.0))
            value = draw(st.floats(lo, hi, width=32))
            if name.endswith("_CELU") and abs(value) < 0.1:
                value = 0.5
            attrs[f.name] = value
    if kind == "v1":
        k = draw(st.integers(1, len(shape)))
        attrs["axes"] = tuple(draw(st.permutations(range(len(shape))))[:k])
    rng = draw(S.seeds())
    style = (
        "ties"
        if type_name.startswith(("INT", "UINT"))
        else draw(st.sampled_from(("full", "small", "ties")))
    )
    inputs = tuple(S.values(rng, type_name, shape, style) for _ in example.input_slots())
    return S.Case(from_registry(name, type_name, shape, **attrs), inputs)


def _tolerance(case: S.Case) -> dict:
    if case.inputs[0].dtype == np.float16:
        return {"rtol": 2e-3, "atol": 2e-3}
    return {"rtol": 2e-6, "atol": 1e-6}


@S.HALF
@pytest.mark.parametrize("name", ALL)
@given(data=st.data())
def test_activation_matches_reference(name, data):
    case = data.draw(activation_cases(name))
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


GRADIENT_NAMES = [n for n in ALL if not n.endswith(("_HARDMAX", "_HARDMAX1"))]


@pytest.mark.parametrize("name", GRADIENT_NAMES)
def test_activation_gradients(name):
    rng = np.random.default_rng(0)
    # Away from every kink of the examples' attributes (0, THRESHOLDED_RELU's 0.25, SHRINK's
    # 0.5, HARD_SIGMOID's +-2.5, HARD_SWISH's +-3), where finite differences straddle branches.
    example = catalog.example_desc(registry.lookup(name))
    xs = tuple(
        (rng.uniform(0.6, 2.0, (3, 4)) * rng.choice([-1.0, 1.0], (3, 4))).astype(np.float32)
        for _ in example.input_slots()
    )
    case = S.Case(from_registry(name, "FLOAT32", (3, 4)), xs)
    S.check_grads(case, atol=2e-2, rtol=2e-2)


def test_hardmax_has_zero_gradient():
    import jax

    desc = from_registry("DML_OPERATOR_ACTIVATION_HARDMAX1", "FLOAT32", (3, 4), axes=(1,))
    op = dml.compile_operator(desc)
    g = jax.grad(lambda x: (op.fn(x) * jnp.arange(12.0).reshape(3, 4)).sum())(jnp.ones((3, 4)))
    np.testing.assert_array_equal(np.asarray(g), np.zeros((3, 4)))


def test_softmax_is_stable_for_large_magnitudes_and_minus_infinity():
    desc = from_registry("DML_OPERATOR_ACTIVATION_SOFTMAX1", "FLOAT32", (3, 3), axes=(1,))
    x = np.array([[1e4, 1e4 - 1, -np.inf], [-1e4, -1e4, -1e4], [-np.inf] * 3], np.float32)
    y = np.asarray(dml.compile_operator(desc)(x))
    e = 1 / (1 + math.exp(-1))
    np.testing.assert_allclose(y[0], [e, 1 - e, 0], rtol=1e-6)
    np.testing.assert_allclose(y[1], [1 / 3] * 3, rtol=1e-6)
    assert np.all(np.isnan(y[2]))  # an all -inf row has no normalization (docs/semantics.md)
    log = from_registry("DML_OPERATOR_ACTIVATION_LOG_SOFTMAX1", "FLOAT32", (3, 3), axes=(1,))
    z = np.asarray(dml.compile_operator(log)(x))
    np.testing.assert_allclose(z[0, :2], [math.log(e), math.log(1 - e)], rtol=1e-6)
    assert z[0, 2] == -np.inf and np.all(np.isnan(z[2]))


def test_gelu_swish_hard_swish_at_infinities_are_their_limits():
    x = np.array([-np.inf, np.inf, np.nan], np.float32)
    for name, attrs in [("GELU", {}), ("SWISH", {}), ("HARD_SWISH", {})]:
        desc = from_registry(f"DML_OPERATOR_ACTIVATION_{name}", "FLOAT32", (3,), **attrs)
        y = np.asarray(dml.compile_operator(desc)(x))
        assert y[0] == 0 and y[1] == np.inf and np.isnan(y[2]), (name, y)


_GATED = [
    ("SWISH", {"sigmoid_input_scale": 2.5}),
    ("SWISH", {"sigmoid_input_scale": -1.0}),
    ("SWISH", {"sigmoid_input_scale": 1e6}),
    ("HARD_SWISH", {"alpha": -0.25, "beta": 0.5}),
    ("HARD_SWISH", {"alpha": 0.0, "beta": 0.5}),
]


@pytest.mark.parametrize("type_name", ["FLOAT32", "FLOAT16"])
@pytest.mark.parametrize("name, attrs", _GATED)
def test_gated_activations_take_their_limits_for_any_scale(name, type_name, attrs):
    """x * gate(x) is 0 where x is infinite and its gate 0 and x * gate elsewhere, whichever
    form the lowering takes for the attributes (1e6 is infinite where float16 is the compute
    type; HARD_SWISH's Alpha 0 makes the gate of an infinite x NaN)."""
    dtype = np.float16 if type_name == "FLOAT16" else np.float32
    x = np.array([-np.inf, np.inf, np.nan, -3.0, -0.5, 0.25, 2.0, -20.0], dtype)
    desc = from_registry(f"DML_OPERATOR_ACTIVATION_{name}", type_name, (8,), **attrs)
    y = np.asarray(dml.compile_operator(desc)(x), np.float64)
    v = x.astype(np.float64)
    with np.errstate(all="ignore"):
        if name == "SWISH":
            scale = np.float64(dtype(np.float32(attrs["sigmoid_input_scale"])))
            gate = 1 / (1 + np.exp(-scale * v))
        else:
            gate = np.clip(attrs["alpha"] * v + attrs["beta"], 0, 1)
        want = np.where(np.isinf(v) & (gate == 0), 0.0, v * gate)
    finite = np.isfinite(v)
    half = dtype == np.float16  # float16 results below its smallest subnormal are 0
    np.testing.assert_allclose(
        y[finite], want[finite], rtol=2e-3 if half else 1e-6, atol=6e-8 if half else 0
    )
    np.testing.assert_array_equal(y[~finite], want[~finite])


def test_relu_gradient_at_zero_is_zero_and_nan_propagates():
    op = dml.compile_operator(make("DML_OPERATOR_ACTIVATION_RELU", sizes=(4,)))
    import jax

    g = jax.grad(lambda x: op.fn(x).sum())(jnp.array([-1.0, 0.0, -0.0, 1.0]))
    np.testing.assert_array_equal(np.asarray(g), [0, 0, 0, 1])
    y = np.asarray(op(jnp.array([np.nan, -0.0, -3.0, 3.0], jnp.float32)))
    assert np.isnan(y[0]) and y[1] == 0 and not np.signbit(y[1]) and y[2] == 0 and y[3] == 3


@pytest.mark.parametrize("alpha", [1.5, -0.5])
def test_celu_derivative_at_zero_is_one(alpha):
    # CELU is continuously differentiable at 0 (slope 1 on both sides); autodiff of the
    # documented max/min form would split the ties there and give 0.75 (found by the thorough
    # profile through ADD1's fused CELU). Both signs of Alpha; large inputs keep finite slopes.
    import jax

    t = dml.TensorDesc("FLOAT32", [5])
    op = dml.compile_operator(dml.ActivationCeluOperatorDesc(t, t, alpha=alpha))
    x = jnp.array([0.0, -0.0, 1e-3, -1e-3, 100.0])
    g = np.asarray(jax.grad(lambda v: op.fn(v).sum())(x))
    np.testing.assert_allclose(g[:4], 1.0, rtol=3e-3)
    assert g[4] == 1.0
    y = np.asarray(op(x))
    want = np.where(x > 0, x, alpha * np.expm1(np.asarray(x) / alpha))
    np.testing.assert_allclose(y, want, rtol=1e-6)


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


_T = dml.TensorDesc


def _one(cls_name: str, type_name: str = "FLOAT32", sizes=(2, 3), **attrs):
    t = _T(type_name, list(sizes))
    return lambda: getattr(dml, cls_name)(t, t, **attrs)


_NEW_ROWS = [
    # one row per activation: a data type outside its table
    (
        _one(f"Activation{n}OperatorDesc", "INT32", **a),
        rf"^DML_OPERATOR_ACTIVATION_{u}: InputTensor with data type INT32",
    )
    for n, u, a in [
        ("Celu", "CELU", {"alpha": 1.0}),
        ("Gelu", "GELU", {}),
        ("HardSigmoid", "HARD_SIGMOID", {"alpha": 0.2, "beta": 0.5}),
        ("HardSwish", "HARD_SWISH", {"alpha": 0.2, "beta": 0.5}),
        ("Identity", "IDENTITY", {}),
        ("LeakyRelu", "LEAKY_RELU", {"alpha": 0.1}),
        ("ParametricSoftplus", "PARAMETRIC_SOFTPLUS", {"alpha": 1.0, "beta": 1.0}),
        ("ScaledElu", "SCALED_ELU", {"alpha": 1.0, "gamma": 1.0}),
        ("ScaledTanh", "SCALED_TANH", {"alpha": 1.0, "beta": 1.0}),
        ("Softplus", "SOFTPLUS", {"steepness": 1.0}),
        ("Softsign", "SOFTSIGN", {}),
        ("Swish", "SWISH", {"sigmoid_input_scale": 1.0}),
        ("Tanh", "TANH", {}),
        ("ThresholdedRelu", "THRESHOLDED_RELU", {"alpha": 1.0}),
        ("Softmax", "SOFTMAX", {}),
        ("LogSoftmax", "LOG_SOFTMAX", {}),
        ("Hardmax", "HARDMAX", {}),
        ("Softmax1", "SOFTMAX1", {"axes": [1]}),
        ("LogSoftmax1", "LOG_SOFTMAX1", {"axes": [1]}),
        ("Hardmax1", "HARDMAX1", {"axes": [1]}),
    ]
] + [
    (
        lambda: dml.ActivationShrinkOperatorDesc(
            _T("FLOAT32", [2]), _T("FLOAT32", [2]), bias=0.0, threshold=0.5
        ).__class__(_T("INT64", [2]), _T("INT64", [2]), bias=0.0, threshold=0.5),
        r"^DML_OPERATOR_ACTIVATION_SHRINK: InputTensor with data type INT64",
    ),
    (
        lambda: dml.ActivationParameterizedReluOperatorDesc(
            _T("FLOAT32", [2, 3]), _T("FLOAT32", [1, 3]), _T("FLOAT32", [2, 3])
        ),
        (
            r"^DML_OPERATOR_ACTIVATION_PARAMETERIZED_RELU: SlopeTensor\.Sizes must equal "
            r"InputTensor\.Sizes"
        ),
    ),
    (
        lambda: dml.ActivationParameterizedReluOperatorDesc(
            _T("FLOAT32", [2, 3]), _T("FLOAT16", [2, 3]), _T("FLOAT32", [2, 3])
        ),
        r"^DML_OPERATOR_ACTIVATION_PARAMETERIZED_RELU: SlopeTensor\.DataType must equal",
    ),
    (
        _one("ActivationSoftmaxOperatorDesc", sizes=(1, 2, 3, 4)),
        (
            r"^DML_OPERATOR_ACTIVATION_SOFTMAX: InputTensor\.Sizes must have an effective rank of "
            r"at most 2 .*got 3"
        ),
    ),
    (
        _one("ActivationHardmaxOperatorDesc", sizes=(2, 1, 3)),
        r"^DML_OPERATOR_ACTIVATION_HARDMAX: InputTensor\.Sizes must have an effective rank",
    ),
    (
        _one("ActivationLogSoftmaxOperatorDesc", sizes=(2, 2, 3)),
        r"^DML_OPERATOR_ACTIVATION_LOG_SOFTMAX: InputTensor\.Sizes must have an effective rank",
    ),
    (
        _one("ActivationSoftmax1OperatorDesc", axes=[2]),
        r"^DML_OPERATOR_ACTIVATION_SOFTMAX1: Axes\[0\] must be in \[0, 1\]",
    ),
    (
        _one("ActivationLogSoftmax1OperatorDesc", axes=[0, 0]),
        r"^DML_OPERATOR_ACTIVATION_LOG_SOFTMAX1: Axes\[1\] repeats axis 0",
    ),
    (
        _one("ActivationHardmax1OperatorDesc", axes=[]),
        r"^DML_OPERATOR_ACTIVATION_HARDMAX1: Axes must not be empty",
    ),
    (
        _one("ActivationSoftmax1OperatorDesc", axes=[0, 1], axis_count=1),
        r"^DML_OPERATOR_ACTIVATION_SOFTMAX1: AxisCount",
    ),
    (
        lambda: dml.ActivationTanhOperatorDesc(_T("FLOAT32", [2, 3]), _T("FLOAT32", [2, 4])),
        r"^DML_OPERATOR_ACTIVATION_TANH: OutputTensor\.Sizes must equal InputTensor\.Sizes",
    ),
    (
        lambda: dml.ActivationSoftmax1OperatorDesc(
            _T("FLOAT32", [2, 3]), _T("FLOAT16", [2, 3]), axes=[1]
        ),
        r"^DML_OPERATOR_ACTIVATION_SOFTMAX1: OutputTensor\.DataType must equal",
    ),
]
INVALID_ROWS += _NEW_ROWS


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


# --- rules that depend on the feature level, and fusion ---------------------------------------


@pytest.mark.parametrize(
    "factory, level, pattern",
    [
        (
            _one("ActivationSoftplusOperatorDesc", steepness=0.5),
            "6_3",
            (
                r"^DML_OPERATOR_ACTIVATION_SOFTPLUS: Steepness must be >= 1 below feature level 6_4, "
                r"got 0\.5"
            ),
        ),
        (
            _one("ActivationShrinkOperatorDesc", "INT8", bias=1.0, threshold=0.5),
            "5_0",
            r"lowest feature level that supports it is 5_1",
        ),
        (
            _one("ActivationHardSwishOperatorDesc", alpha=0.2, beta=0.5),
            "6_1",
            r"^DML_OPERATOR_ACTIVATION_HARD_SWISH requires feature level 6_2 or later; the target is 6_1",
        ),
        (
            _one("ActivationSoftmaxOperatorDesc", sizes=(2, 3)),
            "2_0",
            r"DimensionCount 2 is not supported at feature level 2_0",
        ),
    ],
)
def test_activation_rules_by_feature_level(factory, level, pattern):
    desc = factory()
    dml.validate(desc)  # valid at the newest level
    with pytest.raises(dml.ValidationError, match=pattern):
        dml.validate(desc, level)


NOT_FUSABLE = [
    "Gelu", "HardSwish", "Swish", "Softmax", "Softmax1", "LogSoftmax", "LogSoftmax1", "Hardmax",
    "Hardmax1", "ParameterizedRelu",
]  # fmt: skip


@pytest.mark.parametrize("name", NOT_FUSABLE)
def test_activations_directml_cannot_fuse_are_rejected_by_fused_activation(name):
    t = _T("FLOAT32", [2, 3])
    attrs = {"axes": [1]} if name.endswith("1") else {}
    if name == "Swish":
        attrs = {"sigmoid_input_scale": 1.0}
    if name == "HardSwish":
        attrs = {"alpha": 0.2, "beta": 0.5}
    act = getattr(dml, f"Activation{name}OperatorDesc")(**attrs)
    desc = dml.ElementWiseAdd1OperatorDesc(t, t, t, fused_activation=act)
    with pytest.raises(
        dml.ValidationError,
        match=r"^DML_OPERATOR_ELEMENT_WISE_ADD1: FusedActivation must be an activation DirectML "
        r"can fuse \(.*\), got DML_OPERATOR_ACTIVATION_",
    ):
        dml.validate(desc)


def test_fusable_list_is_directml_s():
    """The sixteen activations DirectML's fused-activation page lists, and no others."""
    from dml_jax import fused

    expected = {
        "CELU", "ELU", "HARD_SIGMOID", "IDENTITY", "LEAKY_RELU", "LINEAR", "PARAMETRIC_SOFTPLUS",
        "RELU", "SCALED_ELU", "SCALED_TANH", "SHRINK", "SIGMOID", "SOFTPLUS", "SOFTSIGN", "TANH",
        "THRESHOLDED_RELU",
    }  # fmt: skip
    assert set(fused.fusable_names()) == {f"DML_OPERATOR_ACTIVATION_{n}" for n in expected}
