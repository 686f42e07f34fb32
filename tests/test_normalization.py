"""BATCH_NORMALIZATION(_TRAINING), MEAN_VARIANCE_NORMALIZATION(1, 2), LOCAL_RESPONSE_NORMALIZATION
and LP_NORMALIZATION: hand-worked examples (the pages give none), properties against
tests/reference/normalization.py over types, ranks, axes, optional tensors and fused activations,
one row per rule (the feature-level-dependent ones at their levels), jit / vmap / gradients."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import reference
import strategies as S
from hypothesis import given, settings
from hypothesis import strategies as st

import dml_jax as dml
from dml_jax import catalog, registry
from dml_jax.fused import fusable_names

T = dml.TensorDesc
BN, BNT = dml.BatchNormalizationOperatorDesc, dml.BatchNormalizationTrainingOperatorDesc
MVN, MVN1, MVN2 = (
    dml.MeanVarianceNormalizationOperatorDesc,
    dml.MeanVarianceNormalization1OperatorDesc,
    dml.MeanVarianceNormalization2OperatorDesc,
)
LRN, LP = dml.LocalResponseNormalizationOperatorDesc, dml.LpNormalizationOperatorDesc
CLASSES = (BN, BNT, MVN, MVN1, MVN2, LRN, LP)
FUSABLE = (BN, BNT, MVN, MVN1, MVN2)
FUSED = [None] + [
    dataclasses.replace(
        catalog.example_desc(registry.lookup(n)), input_tensor=None, output_tensor=None
    )
    for n in fusable_names()
]
RELU = dml.ActivationReluOperatorDesc()


def _f32(*values, shape=None):
    a = np.array(values, np.float32)
    return a.reshape(shape) if shape else a


def _t(shape, type_name="FLOAT32"):
    return T(type_name, list(shape))


# --- worked examples ------------------------------------------------------------------------

_X4 = _t((1, 4, 1, 1))
_ROWS = _t((2, 4))
_ROW = _t((1, 4))

SEEDS = [
    # BATCH_NORMALIZATION with {1, C, 1, 1} statistics: channel 0 (x - 2) / 1 * 1 + 0, channel 1
    # (x - 10) / 2 * 3 + 1.
    (
        BN(_t((1, 2, 1, 2)), *[_t((1, 2, 1, 1))] * 4, _t((1, 2, 1, 2)), spatial=True, epsilon=0),
        (
            _f32(1, 3, 10, 20, shape=(1, 2, 1, 2)),
            *(_f32(*v, shape=(1, 2, 1, 1)) for v in ((2, 10), (1, 4), (1, 3), (0, 1))),
        ),
        (_f32(-1, 1, 1, 16, shape=(1, 2, 1, 2)),),
    ),
    # ... with a fused RELU and Epsilon inside the root: (x - 0) / sqrt(3 + 1) = x / 2.
    (
        BN(_t((4,)), *[_t((1,))] * 4, _t((4,)), spatial=False, epsilon=1, fused_activation=RELU),
        (_f32(-2, 2, 4, 6), _f32(0), _f32(3), _f32(1), _f32(0)),
        (_f32(0, 1, 2, 3),),
    ),
    # BATCH_NORMALIZATION_TRAINING over the batch: columns [1, 3] (mean 2, variance 1) and
    # [10, 30] (mean 20, variance 100); column 1 scaled by 2 and shifted by 5.
    (
        BNT(_t((2, 2)), _t((1, 2)), _t((1, 2)), None, _t((2, 2)), _t((1, 2)), _t((1, 2)), 0.0),
        (_f32(1, 10, 3, 30, shape=(2, 2)), _f32(1, 2, shape=(1, 2)), _f32(0, 5, shape=(1, 2))),
        (
            _f32(-1, 3, 1, 7, shape=(2, 2)),
            _f32(2, 20, shape=(1, 2)),
            _f32(1, 100, shape=(1, 2)),
        ),
    ),
    # ... FusedAdd before a fused RELU: [-1, 1] + [4, -4] -> [3, -3] -> [3, 0].
    (
        BNT(_t((2,)), _t((1,)), _t((1,)), _t((2,)), _t((2,)), _t((1,)), _t((1,)), 0.0, RELU),
        (_f32(0, 2), _f32(1), _f32(0), _f32(4, -4)),
        (_f32(3, 0), _f32(1), _f32(1)),
    ),
    # MVN CrossChannel over {C, H, W}: [0, 0, 4, 4] has mean 2, variance 4.
    (
        MVN(_X4, None, None, _X4, cross_channel=True, normalize_variance=True, epsilon=0),
        (_f32(0, 0, 4, 4, shape=(1, 4, 1, 1)),),
        (_f32(-1, -1, 1, 1, shape=(1, 4, 1, 1)),),
    ),
    # ... without NormalizeVariance only the mean is removed.
    (
        MVN(_X4, None, None, _X4, cross_channel=True, normalize_variance=False, epsilon=0),
        (_f32(0, 0, 4, 4, shape=(1, 4, 1, 1)),),
        (_f32(-2, -2, 2, 2, shape=(1, 4, 1, 1)),),
    ),
    # ... per channel over a 1x1 image each element is its own mean: 0 / sqrt(0 + 1) = 0.
    (
        MVN(_X4, None, None, _X4, cross_channel=False, normalize_variance=True, epsilon=1),
        (_f32(0, 0, 4, 4, shape=(1, 4, 1, 1)),),
        (_f32(0, 0, 0, 0, shape=(1, 4, 1, 1)),),
    ),
    # MVN1 as layer normalization over axis 1 with per-column scale and bias: rows [0, 0, 4, 4]
    # and [1, 3, 1, 3] normalize to [-1, -1, 1, 1] and [-1, 1, -1, 1].
    (
        MVN1(_ROWS, _ROW, _ROW, _ROWS, axes=[1], normalize_variance=True, epsilon=0),
        (
            _f32(0, 0, 4, 4, 1, 3, 1, 3, shape=(2, 4)),
            _f32(1, 2, 3, 4, shape=(1, 4)),
            _f32(0, 0, 0, 1, shape=(1, 4)),
        ),
        (_f32(-1, -2, 3, 5, -1, 2, -3, 5, shape=(2, 4)),),
    ),
    # MVN1 over axis 0 (the batch): columns [0, 2] -> [-1, 1].
    (
        MVN1(_t((2, 2)), None, None, _t((2, 2)), axes=[0], normalize_variance=True, epsilon=0),
        (_f32(0, 10, 2, 12, shape=(2, 2)),),
        (_f32(-1, -1, 1, 1, shape=(2, 2)),),
    ),
    # MVN2 without the mean: RMS normalization, [3, -3, 3, -3] has mean square 9.
    (
        MVN2(_ROW, _ROW, None, _ROW, axes=[1], use_mean=False, use_variance=True, epsilon=0),
        (_f32(3, -3, 3, -3, shape=(1, 4)), _f32(1, 2, 3, 4, shape=(1, 4))),
        (_f32(1, -2, 3, -4, shape=(1, 4)),),
    ),
    # ... mean only, then a bias (no scale: allowed from 5_2).
    (
        MVN2(_ROW, None, _ROW, _ROW, axes=[1], use_mean=True, use_variance=False, epsilon=0),
        (_f32(1, 3, 1, 3, shape=(1, 4)), _f32(0, 0, 0, 10, shape=(1, 4))),
        (_f32(-1, 1, -1, 11, shape=(1, 4)),),
    ),
    # ... both: the ordinary normalization.
    (
        MVN2(_ROW, None, None, _ROW, axes=[1], use_mean=True, use_variance=True, epsilon=0),
        (_f32(1, 3, 1, 3, shape=(1, 4)),),
        (_f32(-1, 1, -1, 1, shape=(1, 4)),),
    ),
    # LRN across channels, LocalSize 2: the window of c is [c, c + 1] (floor(1/2) = 0 before,
    # ceil(1/2) = 1 after), clipped: sums 8, 8, 4; Alpha / LocalSize = 1, Bias 0, Beta 1.
    (
        LRN(_t((1, 3, 1, 1)), _t((1, 3, 1, 1)), True, 2, 2.0, 1.0, 0.0),
        (_f32(2, 2, 2, shape=(1, 3, 1, 1)),),
        (_f32(0.25, 0.25, 0.5, shape=(1, 3, 1, 1)),),
    ),
    # LRN within a channel, a 2x2 window at (h..h+1, w..w+1), clipped: sums 4, 2, 2, 1.
    (
        LRN(_t((1, 1, 2, 2)), _t((1, 1, 2, 2)), False, 2, 2.0, 1.0, 0.0),
        (_f32(1, 1, 1, 1, shape=(1, 1, 2, 2)),),
        (_f32(0.25, 0.5, 0.5, 1, shape=(1, 1, 2, 2)),),
    ),
    # LRN LocalSize 3 centred: windows {0, 1}, {0, 1, 2}, {1, 2}; Alpha 3, Bias 1, Beta 1:
    # 1 / (1 + 5), 2 / (1 + 14), 3 / (1 + 13) (float32-rounded quotients).
    (
        LRN(_t((1, 3, 1, 1)), _t((1, 3, 1, 1)), True, 3, 3.0, 1.0, 1.0),
        (_f32(1, 2, 3, shape=(1, 3, 1, 1)),),
        (np.array([1 / 6, 2 / 15, 3 / 14], np.float32).reshape(1, 3, 1, 1),),
    ),
    # LP: L2 along the last axis (3/5, 4/5; a zero row stays zero since max(0, eps) divides).
    (
        LP(_t((1, 1, 2, 2)), _t((1, 1, 2, 2)), axis=3, epsilon=1e-5, p=2),
        (_f32(3, 4, 0, 0, shape=(1, 1, 2, 2)),),
        (np.array([0.6, 0.8, 0, 0], np.float32).reshape(1, 1, 2, 2),),
    ),
    # ... L1 along axis 0: columns [1, -3] and [2, 2].
    (
        LP(_t((2, 2)), _t((2, 2)), axis=0, epsilon=1e-5, p=1),
        (_f32(1, 2, -3, 2, shape=(2, 2)),),
        (_f32(0.25, 0.5, -0.75, 0.5, shape=(2, 2)),),
    ),
    # ... a norm below Epsilon is replaced by Epsilon: [0.25, 0] / max(0.25, 0.5).
    (
        LP(_t((2,)), _t((2,)), axis=0, epsilon=0.5, p=2),
        (_f32(0.25, 0),),
        (_f32(0.5, 0),),
    ),
]


@pytest.mark.parametrize("desc, inputs, expected", SEEDS)
def test_worked_examples(desc, inputs, expected):
    # XLA's GPU division and square root are within an ulp, not correctly rounded (semantics.md).
    S.assert_same(S.run(S.Case(desc, inputs)), expected, exact=S.ON_CPU, rtol=2.5e-7, atol=0)
    S.assert_same(reference.reference(desc, *inputs), expected, exact=False, rtol=1e-6)


def test_float16_rounds_once():
    """FLOAT16 computes in float32: [0, 0, 4, 4] + 2048 (exact in float16) still normalizes
    to +-1, and a scale of 1/3 is applied before the single rounding."""
    x = (np.array([0, 0, 4, 4], np.float16) + 2048).reshape(1, 4)
    t = _t((1, 4), "FLOAT16")
    d = MVN1(t, t, None, t, axes=[1], normalize_variance=True, epsilon=0)
    scale = np.full((1, 4), 1 / 3, np.float16)
    got = S.run(S.Case(d, (x, scale)))[0]
    want = (np.array([-1, -1, 1, 1], np.float32) * np.float32(scale[0, 0])).astype(np.float16)
    np.testing.assert_array_equal(got[0], want)


def test_variance_is_two_pass():
    """A large mean with a small spread: one pass (E[x^2] - E[x]^2) loses it in float32."""
    x = (np.array([0, 0, 2, 2], np.float32) + 1e4).reshape(1, 4)
    d = MVN1(_ROW, None, None, _ROW, axes=[1], normalize_variance=True, epsilon=0)
    np.testing.assert_array_equal(S.run(S.Case(d, (x,)))[0], [[-1, -1, 1, 1]])
    t = _t((4, 1))
    bnt = BNT(t, _t((1, 1)), _t((1, 1)), None, t, _t((1, 1)), _t((1, 1)), 0.0)
    one, zero = np.ones((1, 1), np.float32), np.zeros((1, 1), np.float32)
    _, mean, var = S.run(S.Case(bnt, (x.reshape(4, 1), one, zero)))
    assert mean[0, 0] == 10001 and var[0, 0] == 1


def test_mvn1_axes_order_does_not_matter():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    t = _t(x.shape)
    a = S.run(
        S.Case(MVN1(t, None, None, t, axes=[0, 2], normalize_variance=True, epsilon=1e-5), (x,))
    )
    b = S.run(
        S.Case(MVN1(t, None, None, t, axes=[2, 0], normalize_variance=True, epsilon=1e-5), (x,))
    )
    S.assert_same(a, b)


def test_mvn1_is_mvn_with_the_remark_axes():
    """MVN1's remark: Axes {2, 3} is CrossChannel FALSE, {1, 2, 3} is TRUE."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 2, 2)).astype(np.float32)
    t = _t(x.shape)
    for cross, axes in ((False, [2, 3]), (True, [1, 2, 3])):
        a = S.run(S.Case(MVN(t, None, None, t, cross, True, 1e-5), (x,)))
        b = S.run(
            S.Case(MVN1(t, None, None, t, axes=axes, normalize_variance=True, epsilon=1e-5), (x,))
        )
        S.assert_same(a, b)


# --- properties against the reference --------------------------------------------------------

_RANKS = {MVN: (4,), LRN: (4,)}


def _params_sizes(draw, shape):
    return tuple(draw(st.sampled_from([1, n])) for n in shape)


@st.composite
def norm_cases(draw, cls=None, type_name=None, fused=True, grads=False):
    cls = cls or draw(st.sampled_from(CLASSES))
    type_name = type_name or draw(st.sampled_from(["FLOAT32", "FLOAT16"]))
    shape = draw(S.shapes(_RANKS.get(cls, tuple(range(1, 9))), max_elements=96, max_dim=4))
    rank = len(shape)
    x = T(type_name, shape)
    eps = draw(st.sampled_from([0.1, 1.0] if grads else [1e-5, 1e-3, 0.1, 1.0]))
    act = draw(st.sampled_from(FUSED)) if fused and cls in FUSABLE else None
    rng = draw(S.seeds())
    style = "small" if grads else draw(st.sampled_from(["small", "full", "ties"]))

    def params(n):
        sizes = _params_sizes(draw, shape)
        return [x.like(sizes=sizes)] * n

    if cls is BN:
        m, var, s, b = (x.like(sizes=_params_sizes(draw, shape)) for _ in range(4))
        desc = BN(
            x, m, var, s, b, x, spatial=draw(st.booleans()), epsilon=eps, fused_activation=act
        )
        inputs = [
            S.values(rng, type_name, shape, style),
            S.values(rng, type_name, m.sizes, "small"),
        ]
        inputs.append(S.values(rng, type_name, var.sizes, "positive"))
        inputs += [S.values(rng, type_name, t.sizes, "small") for t in (s, b)]
    elif cls is BNT:
        (s,) = params(1)
        add = x if draw(st.booleans()) else None
        desc = BNT(x, s, s, add, x, s, s, epsilon=eps, fused_activation=act)
        inputs = [S.values(rng, type_name, t.sizes, style if i == 0 else "small")
                  for i, (_, t) in enumerate(desc.input_slots())]  # fmt: skip
    elif cls in (MVN, MVN1, MVN2):
        scale = x.like(sizes=_params_sizes(draw, shape)) if draw(st.booleans()) else None
        bias = x.like(sizes=_params_sizes(draw, shape)) if draw(st.booleans()) else None
        if cls is MVN:
            extra = {
                "cross_channel": draw(st.booleans()),
                "normalize_variance": draw(st.booleans()),
            }
        else:
            axes = draw(st.lists(st.integers(0, rank - 1), min_size=1, max_size=rank, unique=True))
            extra = {"axes": axes}
            if cls is MVN1:
                extra["normalize_variance"] = draw(st.booleans())
            else:
                extra["use_mean"] = draw(st.booleans())
                extra["use_variance"] = draw(st.booleans())
        desc = cls(x, scale, bias, x, epsilon=eps, fused_activation=act, **extra)
        inputs = [S.values(rng, type_name, t.sizes, style if i == 0 else "small")
                  for i, (_, t) in enumerate(desc.input_slots())]  # fmt: skip
    elif cls is LRN:
        desc = LRN(
            x, x,
            cross_channel=draw(st.booleans()),
            local_size=draw(st.integers(1, 5)),
            alpha=draw(st.sampled_from([1e-4, 0.5, 2.0])),
            beta=draw(st.sampled_from([0.5, 0.75, 1.0, 2.0])),
            bias=draw(st.sampled_from([1.0, 2.0] if grads else [0.5, 1.0, 2.0])),
        )  # fmt: skip
        inputs = [S.values(rng, type_name, shape, style)]
    else:
        desc = LP(
            x,
            x,
            axis=draw(st.integers(0, rank - 1)),
            epsilon=eps / 10,
            p=draw(st.sampled_from([1, 2])),
        )
        # Gradients: elements away from 0 (|x| has a kink there) and norms away from Epsilon
        # (max(norm, Epsilon) has one there), beyond the finite differences' step.
        inputs = [S.values(rng, type_name, shape, "near_one" if grads else style)]
    return S.Case(desc, tuple(inputs))


def _tolerance(case) -> dict:
    if case.inputs[0].dtype == np.float16:
        return {"rtol": 8e-3, "atol": 8e-3}
    return {"rtol": 2e-4, "atol": 2e-5}


@S.HALF
@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.operator_type[13:])
@given(data=st.data())
def test_matches_reference(cls, data):
    case = data.draw(norm_cases(cls))
    want = reference.reference(case.desc, *case.inputs)
    S.assert_same(S.run(case), want, exact=False, **_tolerance(case))


@S.FEW
@given(case=norm_cases())
def test_jit_equals_eager(case):
    S.check_jit(
        case, exact=False, rtol=2e-3 if case.inputs[0].dtype == np.float16 else 1e-5, atol=1e-5
    )


@S.FEW
@given(case=norm_cases())
def test_vmap_equals_loop(case):
    S.check_vmap(
        case, exact=False, rtol=2e-3 if case.inputs[0].dtype == np.float16 else 1e-5, atol=1e-5
    )


# Gradients per operator, a few examples each (every check_grads compiles several programs).
_GRAD_EXAMPLES = settings(max_examples=max(2, settings.default.max_examples // 8))


@_GRAD_EXAMPLES
@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.operator_type[13:])
@given(data=st.data())
def test_gradients(cls, data):
    case = data.draw(norm_cases(cls, type_name="FLOAT32", fused=False, grads=True))
    S.check_grads(case, atol=5e-2, rtol=5e-2)


def test_lp_gradient_is_finite_at_a_zero_vector():
    d = LP(_t((3,)), _t((3,)), axis=0, epsilon=1e-3, p=2)
    op = dml.compile_operator(d)
    g = jax.grad(lambda x: op.fn(x).sum())(jnp.zeros(3, jnp.float32))
    assert np.all(np.isfinite(np.asarray(g)))


# --- rules ------------------------------------------------------------------------------------

_N = _t((2, 3, 4, 5))
_C = _t((1, 3, 1, 1))
_NW = _t((1, 1, 1, 5))


def _bn(**change):
    args = {"input_tensor": _N, "mean_tensor": _C, "variance_tensor": _C, "scale_tensor": _C,
                "bias_tensor": _C, "output_tensor": _N, "spatial": True, "epsilon": 1e-5}  # fmt: skip
    args.update(change)
    return lambda: BN(**args)


def _bnt(**change):
    args = {"input_tensor": _N, "scale_tensor": _C, "bias_tensor": _C, "fused_add_tensor": None,
                "output_tensor": _N, "output_mean_tensor": _C, "output_variance_tensor": _C, "epsilon": 1e-5}  # fmt: skip
    args.update(change)
    return lambda: BNT(**args)


def _mvn(cls=MVN, **change):
    args = {
        "input_tensor": _N,
        "scale_tensor": _C,
        "bias_tensor": _C,
        "output_tensor": _N,
        "epsilon": 1e-5,
    }
    if cls is MVN:
        args.update(cross_channel=False, normalize_variance=True)
    elif cls is MVN1:
        args.update(axes=[2, 3], normalize_variance=True)
    else:
        args.update(axes=[2, 3], use_mean=True, use_variance=True)
    args.update(change)
    return lambda: cls(**args)


def _lrn(**change):
    args = {"input_tensor": _N, "output_tensor": _N, "cross_channel": True, "local_size": 3,
                "alpha": 1e-4, "beta": 0.75, "bias": 1.0}  # fmt: skip
    args.update(change)
    return lambda: LRN(**args)


def _lp(**change):
    args = {"input_tensor": _N, "output_tensor": _N, "axis": 1, "epsilon": 1e-5, "p": 2}
    args.update(change)
    return lambda: LP(**args)


_BN = r"^DML_OPERATOR_BATCH_NORMALIZATION: "
_BNT = r"^DML_OPERATOR_BATCH_NORMALIZATION_TRAINING: "
_MVN = r"^DML_OPERATOR_MEAN_VARIANCE_NORMALIZATION: "
_MVN1 = r"^DML_OPERATOR_MEAN_VARIANCE_NORMALIZATION1: "
_MVN2 = r"^DML_OPERATOR_MEAN_VARIANCE_NORMALIZATION2: "
_SOFTMAX = dml.ActivationSoftmaxOperatorDesc()

INVALID_ROWS = [
    # BATCH_NORMALIZATION
    (
        _bn(mean_tensor=_C.like(data_type="FLOAT16")),
        _BN + r"MeanTensor\.DataType must equal InputTensor\.DataType \(FLOAT32\), got FLOAT16",
    ),
    (
        _bn(scale_tensor=_t((3,))),
        _BN + r"ScaleTensor\.DimensionCount must equal InputTensor\.DimensionCount \(4\), got 1",
    ),
    (
        _bn(variance_tensor=_t((1, 2, 1, 1))),
        _BN + r"VarianceTensor\.Sizes\[1\] must be 1 or InputTensor\.Sizes\[1\] \(3\), got 2",
    ),
    (
        _bn(bias_tensor=_t((1, 3, 1, 3))),
        _BN + r"BiasTensor\.Sizes\[3\] must be 1 or InputTensor\.Sizes\[3\] \(5\), got 3",
    ),
    (_bn(output_tensor=_t((2, 3, 4, 6))), _BN + r"OutputTensor\.Sizes\[3\] must equal 5, got 6"),
    (
        _bn(spatial=False),
        _BN
        + r"MeanTensor\.Sizes\[2\] must equal InputTensor\.Sizes\[2\] \(4\) with Spatial FALSE below feature level 4_0",
        "3_1",
    ),
    (
        _bn(fused_activation=_SOFTMAX),
        _BN + r"FusedActivation must be an activation DirectML can fuse",
    ),
    (
        _bn(
            **{
                k: _t(s.sizes, "INT32")
                for k, s in (
                    ("input_tensor", _N),
                    ("mean_tensor", _C),
                    ("variance_tensor", _C),
                    ("scale_tensor", _C),
                    ("bias_tensor", _C),
                    ("output_tensor", _N),
                )
            }
        ),
        _BN + r"InputTensor with data type INT32 .* no feature level supports it",
    ),
    (
        _bn(
            input_tensor=_t((2, 3, 4)),
            output_tensor=_t((2, 3, 4)),
            **{
                k: _t((1, 3, 1))
                for k in ("mean_tensor", "variance_tensor", "scale_tensor", "bias_tensor")
            },
        ),
        _BN
        + r"InputTensor with data type FLOAT32 and DimensionCount 3 is not supported at feature level 3_0; the lowest feature level that supports it is 3_1",
        "3_0",
    ),
    # BATCH_NORMALIZATION_TRAINING
    (
        _bnt(bias_tensor=_t((1, 1, 1, 1))),
        _BNT
        + r"BiasTensor\.Sizes must equal ScaleTensor\.Sizes \(\{1, 3, 1, 1\}\), got \{1, 1, 1, 1\}",
    ),
    (
        _bnt(fused_add_tensor=_t((2, 3, 4, 1))),
        _BNT + r"FusedAddTensor\.Sizes must equal InputTensor\.Sizes",
    ),
    (
        _bnt(fused_add_tensor=_N.like(data_type="FLOAT16")),
        _BNT + r"FusedAddTensor\.DataType must equal InputTensor\.DataType",
    ),
    (
        _bnt(scale_tensor=_t((1, 2, 1, 1))),
        _BNT + r"ScaleTensor\.Sizes\[1\] must be 1 or InputTensor\.Sizes\[1\] \(3\), got 2",
    ),
    (
        _bnt(output_mean_tensor=_t((1, 1, 1, 1))),
        _BNT + r"OutputMeanTensor\.Sizes\[1\] must equal 3, got 1",
    ),
    (
        _bnt(output_variance_tensor=_t((1, 3, 1))),
        _BNT
        + r"OutputVarianceTensor\.DimensionCount must equal InputTensor\.DimensionCount \(4\), got 3",
    ),
    (
        _bnt(fused_activation=_SOFTMAX),
        _BNT + r"FusedActivation must be an activation DirectML can fuse",
    ),
    (
        _bnt(),
        _BNT.rstrip(": ") + r"[: ]+.*requires feature level 4_1 or later; the target is 4_0",
        "4_0",
    ),
    # MEAN_VARIANCE_NORMALIZATION
    (
        _mvn(bias_tensor=None),
        _MVN
        + r"BiasTensor is required when ScaleTensor is given below feature level 5_2 \(target 5_1\)",
        "5_1",
    ),
    (
        _mvn(scale_tensor=None),
        _MVN + r"ScaleTensor is required when BiasTensor is given below feature level 5_2",
        "5_1",
    ),
    (
        _mvn(scale_tensor=_t((1, 3, 2, 1))),
        _MVN + r"ScaleTensor\.Sizes\[2\] must be 1 or InputTensor\.Sizes\[2\] \(4\), got 2",
    ),
    (
        _mvn(bias_tensor=_C.like(data_type="FLOAT16")),
        _MVN + r"BiasTensor\.DataType must equal InputTensor\.DataType",
    ),
    (
        _mvn(scale_tensor=_t((3, 1, 1))),
        _MVN + r"ScaleTensor\.DimensionCount must equal InputTensor\.DimensionCount \(4\), got 3",
    ),
    (
        _mvn(output_tensor=_N.like(data_type="FLOAT16")),
        _MVN + r"OutputTensor\.DataType must equal InputTensor\.DataType",
    ),
    (
        _mvn(fused_activation=_SOFTMAX),
        _MVN + r"FusedActivation must be an activation DirectML can fuse",
    ),
    (
        _mvn(
            input_tensor=_t((2, 3, 4, 5, 1)),
            output_tensor=_t((2, 3, 4, 5, 1)),
            scale_tensor=None,
            bias_tensor=None,
        ),
        _MVN
        + r"InputTensor with data type FLOAT32 and DimensionCount 5 .* no feature level supports it",
    ),
    # MEAN_VARIANCE_NORMALIZATION1
    (_mvn(MVN1, axes=[]), _MVN1 + r"Axes must not be empty"),
    (_mvn(MVN1, axes=[1, 4]), _MVN1 + r"Axes\[1\] must be in \[0, 3\]"),
    (_mvn(MVN1, axes=[2, 2]), _MVN1 + r"Axes\[1\] repeats axis 2"),
    (_mvn(MVN1, axis_count=3), _MVN1 + r"AxisCount must equal the length of Axes \(2\), got 3"),
    (
        _mvn(MVN1, scale_tensor=_NW, bias_tensor=_NW),
        _MVN1
        + r"ScaleTensor\.Sizes\[1\] must equal InputTensor\.Sizes\[1\] \(3\) below feature level 4_0",
        "3_1",
    ),
    (
        _mvn(MVN1, bias_tensor=_t((2, 3, 1, 1)), scale_tensor=_NW),
        _MVN1 + r"ScaleTensor\.Sizes\[1\] must equal InputTensor\.Sizes\[1\]",
        "3_0",
    ),
    (
        _mvn(MVN1, bias_tensor=_t((1, 3, 1, 2))),
        _MVN1 + r"BiasTensor\.Sizes\[3\] must be 1 or InputTensor\.Sizes\[3\] \(5\), got 2",
    ),
    (
        _mvn(MVN1, scale_tensor=None),
        _MVN1 + r"ScaleTensor is required when BiasTensor is given below feature level 5_2",
        "4_1",
    ),
    (_mvn(MVN1, fused_activation=_SOFTMAX), _MVN1 + r"FusedActivation must be an activation"),
    (
        _mvn(MVN1, scale_tensor=None, bias_tensor=None),
        _MVN1.rstrip(": ") + r"[: ]+.*requires feature level 2_1 or later",
        "2_0",
    ),
    # MEAN_VARIANCE_NORMALIZATION2
    (_mvn(MVN2, axes=[0, 5]), _MVN2 + r"Axes\[1\] must be in \[0, 3\]"),
    (_mvn(MVN2, bias_tensor=_t((1, 3, 1))), _MVN2 + r"BiasTensor\.DimensionCount must equal"),
    (_mvn(MVN2, scale_tensor=_t((1, 3, 4, 4))), _MVN2 + r"ScaleTensor\.Sizes\[3\] must be 1 or"),
    (_mvn(MVN2, fused_activation=_SOFTMAX), _MVN2 + r"FusedActivation must be an activation"),
    (_mvn(MVN2), _MVN2.rstrip(": ") + r"[: ]+.*requires feature level 6_3 or later", "6_2"),
    # LOCAL_RESPONSE_NORMALIZATION
    (
        _lrn(local_size=0),
        r"^DML_OPERATOR_LOCAL_RESPONSE_NORMALIZATION: LocalSize must be >= 1, got 0",
    ),
    (
        _lrn(output_tensor=_N.like(data_type="FLOAT16")),
        r"LOCAL_RESPONSE_NORMALIZATION: OutputTensor\.DataType must equal FLOAT32",
    ),
    (
        _lrn(output_tensor=_t((2, 3, 4, 4))),
        r"LOCAL_RESPONSE_NORMALIZATION: OutputTensor\.Sizes\[3\] must equal 5",
    ),
    (
        _lrn(input_tensor=_t((3, 4, 5)), output_tensor=_t((3, 4, 5))),
        r"LOCAL_RESPONSE_NORMALIZATION: InputTensor with data type FLOAT32 and DimensionCount 3",
    ),
    # LP_NORMALIZATION
    (_lp(axis=4), r"^DML_OPERATOR_LP_NORMALIZATION: Axis must be in \[0, 3\] .*, got 4"),
    (_lp(p=3), r"^DML_OPERATOR_LP_NORMALIZATION: P must be 1 or 2, got 3"),
    (_lp(p=0), r"^DML_OPERATOR_LP_NORMALIZATION: P must be 1 or 2, got 0"),
    (
        _lp(output_tensor=_t((2, 3, 4, 4))),
        r"LP_NORMALIZATION: OutputTensor\.Sizes\[3\] must equal 5",
    ),
    (
        _lp(input_tensor=_t((20, 3)), output_tensor=_t((20, 3)), axis=0),
        r"LP_NORMALIZATION: InputTensor .* DimensionCount 2 .* lowest feature level that supports it is 3_1",
        "3_0",
    ),
]


@pytest.mark.parametrize("row", INVALID_ROWS, ids=range(len(INVALID_ROWS)))
def test_invalid_descriptions_are_rejected(row):
    factory, pattern, *level = row
    with pytest.raises(dml.ValidationError, match=pattern):
        dml.validate(factory(), level[0] if level else None)


@pytest.mark.parametrize(
    "factory, ok_from",
    [
        (_bn(spatial=False), "4_0"),  # Spatial has no effect from 4_0
        (_mvn(bias_tensor=None), "5_2"),  # Scale without Bias from 5_2
        (_mvn(MVN1, scale_tensor=None), "5_2"),  # Bias without Scale from 5_2
        (_mvn(MVN1, scale_tensor=_NW, bias_tensor=_NW), "4_0"),  # channels broadcast from 4_0
    ],
)
def test_feature_level_rules_lift(factory, ok_from):
    dml.validate(factory(), ok_from)
    dml.validate(factory())
    earlier = [lv for lv in dml.FeatureLevel if lv < dml.FeatureLevel.parse(ok_from)][-1]
    with pytest.raises(dml.ValidationError):
        dml.validate(factory(), earlier)


def test_spatial_true_allows_broadcast_statistics_before_4_0():
    dml.validate(_bn()(), "1_0")


@pytest.mark.parametrize("act", FUSED[1:], ids=lambda a: a.operator_type[13:])
def test_every_fusable_activation_is_accepted(act):
    dml.validate(_mvn(MVN1, fused_activation=act)())
