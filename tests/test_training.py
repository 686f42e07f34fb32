"""The gradient operators and ADAM_OPTIMIZER: the pages' examples and hand-worked values exactly,
properties against tests/reference/training.py on gradient cases derived from random forward
cases (tests/training_cases.py), one row per rule, feature levels, jit / vmap / gradients.
Agreement with jax.vjp of the forward operators is tests/test_training_agreement.py's."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import reference
import strategies as S
from hypothesis import given, settings
from hypothesis import strategies as st
from training_cases import PAIRS, incoming

import dml_jax as dml
from dml_jax import catalog, registry

T = dml.TensorDesc
RELU_GRAD = dml.ActivationReluGradOperatorDesc
AVG_GRAD, MAX_GRAD = dml.AveragePoolingGradOperatorDesc, dml.MaxPoolingGradOperatorDesc
SLICE_GRAD = dml.SliceGradOperatorDesc
RESAMPLE_GRAD, RESAMPLE_GRAD1 = dml.ResampleGradOperatorDesc, dml.ResampleGrad1OperatorDesc
LRN_GRAD = dml.LocalResponseNormalizationGradOperatorDesc
BN_GRAD = dml.BatchNormalizationGradOperatorDesc
BNT_GRAD = dml.BatchNormalizationTrainingGradOperatorDesc
ROI_GRAD = dml.RoiAlignGradOperatorDesc
ADAM = dml.AdamOptimizerOperatorDesc


def _a(values, shape=None, dtype=np.float32):
    a = np.array(values, dtype)
    return a.reshape(shape) if shape is not None else a


def _t(shape, type_name="FLOAT32"):
    return T(type_name, list(shape))


def _window(n=2, window=(2, 2), strides=None, start=None, end=None):
    return {
        "strides": list(strides or [1] * n),
        "window_size": list(window),
        "start_padding": list(start or [0] * n),
        "end_padding": list(end or [0] * n),
    }


def _max_grad(x, dy, window=(2, 2), dilations=(1, 1), **geometry):
    return MAX_GRAD(_t(x), _t(dy), _t(x), **_window(2, window, **geometry), dilations=dilations)


def _roi_grad(
    x=(1, 1, 4, 4),
    dy=(1, 1, 1, 1),
    rois=(1, 4),
    image=True,
    coordinates=False,
    with_input=True,
    function="AVERAGE",
    mode="LINEAR",
    samples=(1, 1),
    offsets=(0.5, -0.5),
    type_name="FLOAT32",
    batch=None,
    corners=False,
):
    return ROI_GRAD(
        _t(x, type_name) if with_input else None,
        _t(dy, type_name),
        _t(rois, type_name),
        _t(batch or (rois[-2],), "UINT32"),
        _t(x, type_name) if image else None,
        _t(rois, type_name) if coordinates else None,
        reduction_function=function,
        interpolation_mode=mode,
        spatial_scale_x=1.0,
        spatial_scale_y=1.0,
        input_pixel_offset=offsets[0],
        output_pixel_offset=offsets[1],
        minimum_samples_per_output=samples[0],
        maximum_samples_per_output=samples[1],
        align_regions_to_corners=corners,
    )


def _adam(shape=(1, 1, 1, 2), step="UINT32", step_sizes=(1, 1, 1, 1), type_name="FLOAT32", **kw):
    p = _t(shape, type_name)
    members = {"learning_rate": 0.1, "beta1": 0.9, "beta2": 0.999, "epsilon": 0.0, **kw}
    return ADAM(p, p, p, p, _t(step_sizes, step), p, p, p, **members)


def _bn(cls, x=(4, 1, 1, 2), p=(1, 1, 1, 2), type_name="FLOAT32", epsilon=0.0, **sizes):
    t = {"x": _t(x, type_name), "p": _t(p, type_name)}
    named = {k: _t(v, type_name) for k, v in sizes.items()}
    xs, ps = t["x"], t["p"]
    return cls(
        xs,
        named.get("dy", xs),
        named.get("mean", ps),
        named.get("var", ps),
        named.get("scale", ps),
        named.get("out", xs),
        named.get("dscale", ps),
        named.get("dbias", ps),
        epsilon=epsilon,
    )


# Column 0 of the batch-norm seeds: x = 1, 1, 5, 5 (mean 3, variance 4, so 1 / sqrt(4) = 0.5),
# scale 2, dy = 1, 0, 2, 1, c = x - mean = -2, -2, 2, 2. Column 1: x = 0 (all), mean 0,
# variance 1, scale 1, dy = 1 (all).
_BN_X = _a([1, 0, 1, 0, 5, 0, 5, 0], (4, 1, 1, 2))
_BN_DY = _a([1, 1, 0, 1, 2, 1, 1, 1], (4, 1, 1, 2))
_BN_STATS = (_a([3, 0], (1, 1, 1, 2)), _a([4, 1], (1, 1, 1, 2)), _a([2, 1], (1, 1, 1, 2)))

SEEDS = [
    # DML_ACTIVATION_RELU_GRAD_OPERATOR_DESC's formula: dY where X > 0 (0 at X == 0, -0.0, NaN).
    (
        RELU_GRAD(_t([6]), _t([6]), _t([6])),
        (_a([-2, -0.0, 0, 1, np.nan, 3]), _a([1, 2, 3, 4, 5, 6])),
        (_a([0, 0, 0, 4, 0, 6]),),
    ),
    (
        RELU_GRAD(_t([2, 2], "FLOAT16"), _t([2, 2], "FLOAT16"), _t([2, 2], "FLOAT16")),
        (_a([[-1, 0], [2, 3]], dtype=np.float16), _a([[1, 2], [3, 4]], dtype=np.float16)),
        (_a([[0, 0], [3, 4]], dtype=np.float16),),
    ),
    # DML_AVERAGE_POOLING_GRAD_OPERATOR_DESC's example: 2x2 windows at stride 1 over 3x3.
    (
        AVG_GRAD(_t([1, 1, 2, 2]), _t([1, 1, 3, 3]), **_window(), include_padding=False),
        (_a([1, 2, 3, 4], (1, 1, 2, 2)),),
        (_a([0.25, 0.75, 0.5, 1, 2.5, 1.5, 0.75, 1.75, 1], (1, 1, 3, 3)),),
    ),
    # A 1x2 window over two elements with one padding element in front: windows {pad, x0} and
    # {x0, x1}. Without IncludePadding the first divides by 1: x0 = 2 / 1 + 4 / 2, x1 = 4 / 2;
    # with it by 2: x0 = 2 / 2 + 4 / 2, x1 = 4 / 2.
    (
        AVG_GRAD(
            _t([1, 1, 1, 2]),
            _t([1, 1, 1, 2]),
            **_window(2, (1, 2), start=(0, 1)),
            include_padding=False,
        ),
        (_a([2, 4], (1, 1, 1, 2)),),
        (_a([4, 2], (1, 1, 1, 2)),),
    ),
    (
        AVG_GRAD(
            _t([1, 1, 1, 2]),
            _t([1, 1, 1, 2]),
            **_window(2, (1, 2), start=(0, 1)),
            include_padding=True,
        ),
        (_a([2, 4], (1, 1, 1, 2)),),
        (_a([3, 2], (1, 1, 1, 2)),),
    ),
    # DML_MAX_POOLING_GRAD_OPERATOR_DESC's example: 4 is the maximum of two windows (1 + 2).
    (
        _max_grad((1, 1, 3, 3), (1, 1, 2, 2)),
        (_a([1, 2, 3, 2, 4, 2, 5, 6, 7], (1, 1, 3, 3)), _a([1, 2, 4, 5], (1, 1, 2, 2))),
        (_a([0, 0, 0, 0, 3, 0, 0, 4, 5], (1, 1, 3, 3)),),
    ),
    # Ties: every element equal, so each window's gradient goes to its first element (the
    # lowest logical index), whole.
    (
        _max_grad((1, 1, 3, 3), (1, 1, 2, 2)),
        (np.ones((1, 1, 3, 3), np.float32), _a([1, 2, 3, 4], (1, 1, 2, 2))),
        (_a([1, 2, 0, 3, 4, 0, 0, 0, 0], (1, 1, 3, 3)),),
    ),
    # Disjoint 2x2 windows of equal values, and a window of padding only (nothing passed back).
    (
        _max_grad((1, 1, 2, 4), (1, 1, 1, 3), strides=(2, 2), end=(0, 2)),
        (np.ones((1, 1, 2, 4), np.float32), _a([1, 2, 3], (1, 1, 1, 3))),
        (_a([1, 0, 2, 0, 0, 0, 0, 0], (1, 1, 2, 4)),),
    ),
    # DML_SLICE_GRAD_OPERATOR_DESC's example: every other row and column of a 4x4 zero tensor.
    (
        SLICE_GRAD(_t([2, 2]), _t([4, 4]), [0, 0], [4, 4], [2, 2]),
        (_a([[1, 2], [3, 4]]),),
        (_a([[1, 0, 2, 0], [0, 0, 0, 0], [3, 0, 4, 0], [0, 0, 0, 0]]),),
    ),
    # A negative stride walks the window [1, 5) backwards: SLICE1 read elements 4 and 2.
    (
        SLICE_GRAD(_t([2], "INT16"), _t([5], "INT16"), [1], [4], [-2]),
        (_a([7, 8], dtype=np.int16),),
        (_a([0, 0, 8, 0, 7], dtype=np.int16),),
    ),
    # DML_RESAMPLE_GRAD_OPERATOR_DESC's example: input columns 0, 0, 1 of row 0 were read.
    (
        RESAMPLE_GRAD(
            _t([1, 1, 1, 3]),
            _t([1, 1, 2, 2]),
            "NEAREST_NEIGHBOR",
            [1, 1, 0.5, 1.5],
            [0, 0, 0.25, 0.25],
            [0, 0, 0, 0],
        ),
        (_a([4, 5, 6], (1, 1, 1, 3)),),
        (_a([9, 6, 0, 0], (1, 1, 2, 2)),),
    ),
    # LINEAR 2x at pixel centres over two elements: the outputs read coordinates -0.25 (clamped
    # to element 0), 0.25, 0.75 and 1.25 (clamped to element 1), so element 0 gets 1 + 2 * 0.75
    # + 3 * 0.25 and element 1 gets 2 * 0.25 + 3 * 0.75 + 4.
    (
        RESAMPLE_GRAD1(_t([1, 4]), _t([1, 2]), "LINEAR", "DECREASING", [1, 2], [0, 0.5], [0, -0.5]),
        (_a([[1, 2, 3, 4]]),),
        (_a([[3.25, 6.75]]),),
    ),
    # RESAMPLE_GRAD1's example: DECREASING rounds o / 1.5 = 0, 0.67, 1.33 down.
    (
        RESAMPLE_GRAD1(
            _t([1, 1, 1, 3]),
            _t([1, 1, 2, 2]),
            "NEAREST_NEIGHBOR",
            "DECREASING",
            [1, 1, 0.5, 1.5],
            [0, 0, 0, 0],
            [0, 0, 0, 0],
        ),
        (_a([4, 5, 6], (1, 1, 1, 3)),),
        (_a([9, 6, 0, 0], (1, 1, 2, 2)),),
    ),
    # LRN of one element, LocalSize 1, Alpha 1, Beta 1, Bias 1: y = x / (1 + x^2), so
    # dy/dx = (1 - x^2) / (1 + x^2)^2 = -3 / 25 at x = 2.
    (
        LRN_GRAD(_t([1, 1, 1, 1]), _t([1, 1, 1, 1]), _t([1, 1, 1, 1]), True, 1, 1.0, 1.0, 1.0),
        (_a([2], (1, 1, 1, 1)), _a([1], (1, 1, 1, 1))),
        (_a([-0.12], (1, 1, 1, 1)),),
    ),
    # BATCH_NORMALIZATION_GRAD: dx = dy * 2 * 0.5; scale gradient 0.5 * sum(dy * c) =
    # 0.5 * (-2 + 0 + 4 + 2) = 2, then 0 (c = 0); bias gradient sum(dy) = 4, 4.
    (
        _bn(BN_GRAD),
        (_BN_X, _BN_DY, *_BN_STATS),
        (_BN_DY, _a([2, 0], (1, 1, 1, 2)), _a([4, 4], (1, 1, 1, 2))),
    ),
    # BATCH_NORMALIZATION_TRAINING_GRAD: mean(dy) = 1, mean(dy * c) = 1, so column 0 is
    # 2 * 0.5 * (dy - 1 - c * 1 / 4) = 0.5, -0.5, 0.5, -0.5; column 1 (dy constant) is 0.
    (
        _bn(BNT_GRAD),
        (_BN_X, _BN_DY, *_BN_STATS),
        (
            _a([0.5, 0, -0.5, 0, 0.5, 0, -0.5, 0], (4, 1, 1, 2)),
            _a([2, 0], (1, 1, 1, 2)),
            _a([4, 4], (1, 1, 1, 2)),
        ),
    ),
    # DML_ROI_ALIGN_GRAD_OPERATOR_DESC's example: four 2x2 crops read nearest neighbours.
    (
        _roi_grad((1, 1, 4, 4), (4, 1, 1, 3), (4, 4), mode="NEAREST_NEIGHBOR", with_input=False),
        (
            _a(range(1, 13), (4, 1, 1, 3)),
            _a([0, 0, 2, 2, 2, 0, 4, 2, 0, 2, 2, 4, 2, 2, 4, 4], (4, 4)),
            np.zeros(4, np.uint32),
        ),
        (_a([3, 3, 9, 6, 0, 0, 0, 0, 15, 9, 21, 12, 0, 0, 0, 0], (1, 1, 4, 4)),),
    ),
    # An image whose value is its column: region [0.5, 0, 3.5, 2], one sample at x = (0 + 0.5)
    # * 3 + 0.5 - 0.5 = 1.5, y = (0 + 0.5) * 2 - 0.5 = 0.5. The image gradient 2 splits over columns 1, 2 and rows
    # 0, 1; the value's slope along x is 1 and the coordinate moves by 1 - 0.5 and 0.5 with x1
    # and x2, so the coordinate gradient is 2 * [0.5, 0, 0.5, 0] (no slope along y).
    (
        _roi_grad(coordinates=True),
        (
            np.tile(_a([0, 1, 2, 3]), (4, 1)).reshape(1, 1, 4, 4),
            _a([2], (1, 1, 1, 1)),
            _a([[0.5, 0, 3.5, 2]]),
            np.zeros(1, np.uint32),
        ),
        (
            _a([0, 0.5, 0.5, 0, 0, 0.5, 0.5, 0, 0, 0, 0, 0, 0, 0, 0, 0], (1, 1, 4, 4)),
            _a([[1, 0, 1, 0]]),
        ),
    ),
    # MAX over two equal samples (x = 0.5 and 2.5 round to 0 and 2): the first takes it all.
    (
        _roi_grad(
            (1, 1, 1, 4), (1, 1, 1, 1), function="MAX", mode="NEAREST_NEIGHBOR", samples=(2, 2)
        ),
        (
            np.ones((1, 1, 1, 4), np.float32),
            _a([3], (1, 1, 1, 1)),
            _a([[0, 0, 4, 1]]),
            np.zeros(1, np.uint32),
        ),
        (_a([3, 0, 0, 0], (1, 1, 1, 4)),),
    ),
    # DML_ADAM_OPTIMIZER_OPERATOR_DESC's update at T = 1 from zero moments with Beta1 0.5 and
    # Beta2 0.75 (exact in float32): M = 0.5 * G, V = 0.25 * G^2, Alpha = sqrt(0.25) / 0.5 = 1,
    # so X moves by LearningRate * M / sqrt(V) = LearningRate * sign(G).
    (
        _adam(beta1=0.5, beta2=0.75),
        (
            _a([1, -1], (1, 1, 1, 2)),
            np.zeros((1, 1, 1, 2), np.float32),
            np.zeros((1, 1, 1, 2), np.float32),
            _a([0.5, -4], (1, 1, 1, 2)),
            np.ones((1, 1, 1, 1), np.uint32),
        ),
        (
            _a([0.9, -0.9], (1, 1, 1, 2)),
            _a([0.25, -2], (1, 1, 1, 2)),
            _a([0.0625, 4], (1, 1, 1, 2)),
        ),
    ),
]


@pytest.mark.parametrize("desc, inputs, expected", SEEDS)
def test_documented_and_worked_examples(desc, inputs, expected):
    # Exact up to the rounding of the float32 arithmetic (the expected values are decimals).
    for got, ref in (
        (S.run(S.Case(desc, inputs)), "lowering"),
        (reference.reference(desc, *inputs), "reference"),
    ):
        for g, w in zip(got, expected, strict=True):
            assert g.dtype == w.dtype and g.shape == w.shape, ref
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7, err_msg=ref)


def test_adam_training_step_zero_divides_zero_by_zero():
    """The page's formula read literally: at T = 0, Alpha = sqrt(1 - 1) / (1 - 1) is NaN."""
    op = dml.compile_operator(_adam())
    x, m, v = op(
        _a([1, 2], (1, 1, 1, 2)),
        *(np.zeros((1, 1, 1, 2), np.float32),) * 2,
        _a([1, 1], (1, 1, 1, 2)),
        np.zeros((1, 1, 1, 1), np.uint32),
    )
    assert np.isnan(x).all()
    np.testing.assert_allclose(m, [[[[0.1, 0.1]]]], rtol=1e-6)
    np.testing.assert_allclose(v, [[[[0.001, 0.001]]]], rtol=2e-5)


def test_adam_step_may_be_a_float_of_the_parameters_type():
    args = (
        _a([1, -1], (1, 1, 1, 2)),
        np.zeros((1, 1, 1, 2), np.float32),
        np.zeros((1, 1, 1, 2), np.float32),
        _a([0.5, -4], (1, 1, 1, 2)),
    )
    by_uint = dml.compile_operator(_adam())(*args, np.full((1, 1, 1, 1), 3, np.uint32))
    by_float = dml.compile_operator(_adam(step="FLOAT32"))(
        *args, np.full((1, 1, 1, 1), 3, np.float32)
    )
    for a, b in zip(by_uint, by_float):
        np.testing.assert_array_equal(a, b)


# --- properties against the reference ------------------------------------------------------


def _gradient_cases(pair):
    """The gradient operator's cases derived from the pair's random forward cases."""

    @st.composite
    def cases(draw):
        forward = draw(pair.forward())
        rng = draw(S.seeds())
        case, _ = pair.backward(forward, incoming(forward, rng))
        return case

    return cases()


def _tolerance(case) -> dict:
    dtype = next(a.dtype for a in case.inputs if a.dtype.kind == "f")
    if dtype == np.float16:
        return {"exact": False, "rtol": 5e-3, "atol": 5e-3}
    return {"exact": False, "rtol": 2e-5, "atol": 2e-5}


# Pairs whose gradient operator is DirectML's (CLIP_GRAD and CONVOLUTION's BACKWARD direction
# are tested against their references in test_clip.py and test_gemm_conv.py).
REFERENCE_PAIRS = [
    p for p in PAIRS if p.name not in ("ELEMENT_WISE_CLIP", "ELEMENT_WISE_CLIP1", "CONVOLUTION")
]


# An eighth of the profile's examples per pair: each is a compile on CPU (and ROI_ALIGN_GRAD's
# reference loops over every sample); "thorough" scales it up.
@settings(max_examples=max(3, settings.default.max_examples // 8))
@pytest.mark.parametrize("pair", REFERENCE_PAIRS, ids=[p.name for p in REFERENCE_PAIRS])
@given(data=st.data())
def test_gradient_operator_matches_reference(pair, data):
    case = data.draw(_gradient_cases(pair))
    want = reference.reference(case.desc, *case.inputs)
    S.assert_same(S.run(case), want, **_tolerance(case))


@st.composite
def adam_cases(draw):
    type_name = draw(st.sampled_from(["FLOAT32", "FLOAT16"]))
    shape = draw(S.shapes(ranks=(4,), max_elements=24, max_dim=3))
    step_type = draw(st.sampled_from(["UINT32", type_name]))
    desc = _adam(
        shape,
        step_type,
        type_name=type_name,
        learning_rate=draw(st.sampled_from([1e-3, 0.01, 0.5])),
        beta1=draw(st.sampled_from([0.0, 0.5, 0.9])),
        beta2=draw(st.sampled_from([0.9, 0.99, 0.999])),
        epsilon=draw(st.sampled_from([1e-8, 1e-4, 0.1])),
    )
    rng = draw(S.seeds())
    step = np.full((1, 1, 1, 1), draw(st.integers(1, 20)), step_type.lower())
    inputs = (
        S.values(rng, type_name, shape, "small"),
        S.values(rng, type_name, shape, "small"),
        S.values(rng, type_name, shape, "positive"),
        S.values(rng, type_name, shape, "small"),
        step,
    )
    return S.Case(desc, inputs)


@given(adam_cases())
def test_adam_matches_reference(case):
    S.assert_same(S.run(case), reference.reference(case.desc, *case.inputs), **_tolerance(case))


# --- transforms ----------------------------------------------------------------------------

# Every operator of the module once, on its registry example (fixed inputs, one compile each),
# then random cases of all of them (a few examples: each is several compiles).
TRAINING_MODULES = {
    f"dml_jax.ops.{m}" for m in ("training", "training_norm", "training_roi", "optimizer")
}
TRAINING_SPECS = [
    spec for spec in registry.operators() if spec.desc_class.__module__ in TRAINING_MODULES
]
RARE = settings(max_examples=max(3, settings.default.max_examples // 8))


def _grad_argnums(case) -> tuple[int, ...]:
    """Every gradient operator is linear in its incoming gradient (ROI_ALIGN_GRAD's coordinate
    and image inputs are not smooth everywhere); ADAM_OPTIMIZER is smooth in its parameters,
    moments and gradient (not in the integer step), the second moment where a finite difference
    step keeps it >= 0 (its square root)."""
    if case.desc.operator_type.endswith("ADAM_OPTIMIZER"):
        return (0, 1, 2, 3) if case.inputs[2].min() >= 0.1 else (0, 1, 3)
    return ([p for p, _ in case.desc.input_slots()].index("InputGradientTensor"),)


@pytest.mark.parametrize("spec", TRAINING_SPECS, ids=lambda s: s.name[len("DML_OPERATOR_") :])
def test_example_jit_vmap_and_gradients(spec):
    case = S.Case(catalog.example_desc(spec), catalog.example_inputs(spec))
    S.check_jit(case, **_tolerance(case))
    S.check_vmap(case, **_tolerance(case))
    S.check_grads(case, argnums=_grad_argnums(case), atol=2e-2, rtol=2e-2)


ALL_CASES = st.one_of(*(_gradient_cases(p) for p in REFERENCE_PAIRS), adam_cases())


@RARE
@given(ALL_CASES)
def test_training_jit_and_vmap(case):
    S.check_jit(case, **_tolerance(case))
    S.check_vmap(case, **_tolerance(case))


def _float32(case) -> bool:
    return all(a.dtype != np.float16 for a in case.inputs)


@RARE
@given(ALL_CASES.filter(_float32))
def test_training_check_grads(case):
    S.check_grads(case, argnums=_grad_argnums(case), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize(
    "desc, expected",
    [
        (RELU_GRAD(_t([2]), _t([2]), _t([2])), True),
        (SLICE_GRAD(_t([2], "INT8"), _t([4], "INT8"), [0], [4], [2]), False),
        (_roi_grad(), True),
        (_adam(), True),
    ],
)
def test_training_differentiable_flag(desc, expected):
    assert dml.compile_operator(desc).differentiable is expected


# --- rules ---------------------------------------------------------------------------------


def _replace(factory, **changes):
    return lambda: dataclasses.replace(factory(), **changes)


INVALID_ROWS = [
    (
        lambda: RELU_GRAD(_t([2, 3]), _t([3, 2]), _t([2, 3])),
        (
            r"^DML_OPERATOR_ACTIVATION_RELU_GRAD: InputGradientTensor\.Sizes must equal "
            r"InputTensor\.Sizes"
        ),
    ),
    (
        lambda: RELU_GRAD(_t([2]), _t([2], "FLOAT16"), _t([2])),
        r"^DML_OPERATOR_ACTIVATION_RELU_GRAD: InputGradientTensor\.DataType must equal",
    ),
    (
        lambda: RELU_GRAD(_t([2], "INT32"), _t([2], "INT32"), _t([2], "INT32")),
        r"^DML_OPERATOR_ACTIVATION_RELU_GRAD: InputTensor with data type INT32 .* not supported",
    ),
    (
        lambda: AVG_GRAD(_t([1, 1, 2, 3]), _t([1, 1, 3, 3]), **_window(), include_padding=False),
        r"^DML_OPERATOR_AVERAGE_POOLING_GRAD: InputGradientTensor\.Sizes\[3\] must equal 2, got 3",
    ),
    (
        lambda: AVG_GRAD(_t([1, 1, 1, 1]), _t([1, 1, 1, 1]), **_window(), include_padding=False),
        (
            r"^DML_OPERATOR_AVERAGE_POOLING_GRAD: OutputGradientTensor\.Sizes\[2\] plus "
            r"StartPadding\[0\] and EndPadding\[0\] \(1\) must hold the window"
        ),
    ),
    (
        lambda: AVG_GRAD(
            _t([1, 1, 2, 2]), _t([1, 1, 3, 3]), **_window(strides=(0, 1)), include_padding=False
        ),
        r"^DML_OPERATOR_AVERAGE_POOLING_GRAD: Strides\[0\] must be >= 1, got 0",
    ),
    (
        lambda: AVG_GRAD(
            _t([1, 1, 2, 2]), _t([1, 1, 3, 3]), [1, 1], [2, 2, 2], [0, 0], [0, 0], False
        ),
        r"^DML_OPERATOR_AVERAGE_POOLING_GRAD: WindowSize must hold DimensionCount \(2\) values",
    ),
    (
        lambda: AVG_GRAD(_t([1, 2, 2]), _t([1, 1, 3, 3]), **_window(), include_padding=False),
        r"^DML_OPERATOR_AVERAGE_POOLING_GRAD: InputGradientTensor\.DimensionCount must equal 4",
    ),
    (
        lambda: AVG_GRAD(_t([1, 1, 2, 2]), _t([1, 3, 3]), **_window(), include_padding=False),
        (
            r"^DML_OPERATOR_AVERAGE_POOLING_GRAD: OutputGradientTensor\.DimensionCount must be "
            r"DimensionCount \+ 2 = 4"
        ),
    ),
    (
        _replace(
            lambda: AVG_GRAD(
                _t([1, 1, 2, 2]), _t([1, 1, 3, 3]), **_window(), include_padding=False
            ),
            dimension_count=3,
        ),
        r"^DML_OPERATOR_AVERAGE_POOLING_GRAD: DimensionCount must equal the length of Strides",
    ),
    (
        lambda: _max_grad((1, 1, 3, 3), (1, 1, 2, 3)),
        r"^DML_OPERATOR_MAX_POOLING_GRAD: InputGradientTensor\.Sizes\[3\] must equal 2, got 3",
    ),
    (
        lambda: _max_grad((1, 1, 3, 3), (1, 1, 2, 2), dilations=(0, 1)),
        r"^DML_OPERATOR_MAX_POOLING_GRAD: Dilations\[0\] must be >= 1, got 0",
    ),
    (
        _replace(
            lambda: _max_grad((1, 1, 3, 3), (1, 1, 2, 2)), output_gradient_tensor=_t([1, 1, 3, 4])
        ),
        r"^DML_OPERATOR_MAX_POOLING_GRAD: OutputGradientTensor\.Sizes\[3\] must equal 3, got 4",
    ),
    (
        _replace(
            lambda: _max_grad((1, 1, 3, 3), (1, 1, 2, 2)),
            input_gradient_tensor=_t([1, 1, 2, 2], "FLOAT16"),
        ),
        r"^DML_OPERATOR_MAX_POOLING_GRAD: InputGradientTensor\.DataType must equal FLOAT32",
    ),
    (
        lambda: MAX_GRAD(
            _t([1, 1, 2, 2, 2]),
            _t([1, 1, 1, 1, 1]),
            _t([1, 1, 2, 2, 2]),
            **_window(3, (2, 2, 2)),
            dilations=[1, 1, 1],
        ),
        (
            r"^DML_OPERATOR_MAX_POOLING_GRAD: InputTensor with data type FLOAT32 and "
            r"DimensionCount 5 is not supported"
        ),
    ),
    (
        lambda: SLICE_GRAD(_t([2]), _t([4]), [0], [4], [0]),
        r"^DML_OPERATOR_SLICE_GRAD: InputWindowStrides\[0\] must not be 0",
    ),
    (
        lambda: SLICE_GRAD(_t([2]), _t([4]), [3], [2], [1]),
        (
            r"^DML_OPERATOR_SLICE_GRAD: InputWindowOffsets\[0\] \+ InputWindowSizes\[0\] \(3 \+ 2\) "
            r"must be <= OutputGradientTensor\.Sizes\[0\] \(4\)"
        ),
    ),
    (
        lambda: SLICE_GRAD(_t([3]), _t([4]), [0], [4], [2]),
        (
            r"^DML_OPERATOR_SLICE_GRAD: InputGradientTensor\.Sizes\[0\] must be <= 1 \+ "
            r"\(InputWindowSizes\[0\] - 1\) / \|InputWindowStrides\[0\]\| = 2"
        ),
    ),
    (
        lambda: SLICE_GRAD(_t([2, 1]), _t([4, 1]), [0], [4], [2]),
        (
            r"^DML_OPERATOR_SLICE_GRAD: InputWindowOffsets must hold DimensionCount = "
            r"OutputGradientTensor\.DimensionCount \(2\) values, got 1"
        ),
    ),
    (
        lambda: SLICE_GRAD(_t([2], "INT8"), _t([4]), [0], [4], [2]),
        (
            r"^DML_OPERATOR_SLICE_GRAD: InputGradientTensor\.DataType must equal "
            r"OutputGradientTensor\.DataType \(FLOAT32\), got INT8"
        ),
    ),
    (
        lambda: SLICE_GRAD(_t([2], "INT64"), _t([4], "INT64"), [0], [4], [2]),
        r"^DML_OPERATOR_SLICE_GRAD: InputGradientTensor with data type INT64",
    ),
    (
        lambda: RESAMPLE_GRAD(
            _t([1, 1, 2, 2]), _t([1, 1, 1, 1]), "LINEAR", [1, 1, 0, 2], [0] * 4, [0] * 4
        ),
        r"^DML_OPERATOR_RESAMPLE_GRAD: Scales\[2\] must be finite and > 0, got 0",
    ),
    (
        lambda: RESAMPLE_GRAD(
            _t([1, 1, 2, 2]), _t([1, 1, 1, 1]), "LINEAR", [1, 1, 2], [0] * 3, [0] * 3
        ),
        (
            r"^DML_OPERATOR_RESAMPLE_GRAD: Scales must hold one value per OutputGradientTensor "
            r"dimension"
        ),
    ),
    (
        lambda: RESAMPLE_GRAD(
            _t([1, 1, 2, 2]),
            _t([1, 1, 1, 1]),
            "LINEAR",
            [1, 1, 2, 2],
            [0] * 4,
            [0, 0, 0, np.inf],
        ),
        r"^DML_OPERATOR_RESAMPLE_GRAD: OutputPixelOffsets\[3\] must be finite, got inf",
    ),
    (
        lambda: RESAMPLE_GRAD(
            _t([1, 1, 2, 2], "FLOAT16"), _t([1, 1, 1, 1]), "LINEAR", [1] * 4, [0] * 4, [0] * 4
        ),
        (
            r"^DML_OPERATOR_RESAMPLE_GRAD: InputGradientTensor\.DataType must equal "
            r"OutputGradientTensor\.DataType \(FLOAT32\), got FLOAT16"
        ),
    ),
    (
        lambda: RESAMPLE_GRAD(_t([1, 2]), _t([1, 1]), "LINEAR", [1, 2], [0] * 2, [0] * 2),
        (
            r"^DML_OPERATOR_RESAMPLE_GRAD: InputGradientTensor with data type FLOAT32 and "
            r"DimensionCount 2 is not supported"
        ),
    ),
    (
        lambda: RESAMPLE_GRAD1(
            _t([1, 2, 2]), _t([1, 1]), "LINEAR", "DECREASING", [1, 2], [0] * 2, [0] * 2
        ),
        (
            r"^DML_OPERATOR_RESAMPLE_GRAD1: InputGradientTensor\.DimensionCount must equal "
            r"OutputGradientTensor\.DimensionCount \(2\), got 3"
        ),
    ),
    (
        lambda: LRN_GRAD(
            _t([1, 2, 1, 1]), _t([1, 2, 1, 1]), _t([1, 2, 1, 1]), True, 0, 1.0, 1.0, 1.0
        ),
        r"^DML_OPERATOR_LOCAL_RESPONSE_NORMALIZATION_GRAD: LocalSize must be >= 1, got 0",
    ),
    (
        lambda: LRN_GRAD(
            _t([1, 2, 1, 1]), _t([1, 1, 1, 2]), _t([1, 2, 1, 1]), True, 1, 1.0, 1.0, 1.0
        ),
        r"^DML_OPERATOR_LOCAL_RESPONSE_NORMALIZATION_GRAD: InputGradientTensor\.Sizes must equal",
    ),
    (
        lambda: _bn(
            BN_GRAD,
            mean=(1, 1, 1, 3),
            var=(1, 1, 1, 3),
            scale=(1, 1, 1, 3),
            dscale=(1, 1, 1, 3),
            dbias=(1, 1, 1, 3),
        ),
        (
            r"^DML_OPERATOR_BATCH_NORMALIZATION_GRAD: MeanTensor\.Sizes\[3\] must be 1 or "
            r"InputTensor\.Sizes\[3\] \(2\), got 3"
        ),
    ),
    (
        lambda: _bn(BN_GRAD, var=(1, 1, 1, 1)),
        (
            r"^DML_OPERATOR_BATCH_NORMALIZATION_GRAD: VarianceTensor\.Sizes must equal "
            r"MeanTensor\.Sizes"
        ),
    ),
    (
        lambda: _bn(BN_GRAD, dy=(4, 1, 2, 1)),
        (
            r"^DML_OPERATOR_BATCH_NORMALIZATION_GRAD: InputGradientTensor\.Sizes must equal "
            r"InputTensor\.Sizes"
        ),
    ),
    (
        lambda: _bn(BN_GRAD, dscale=(1, 1, 1, 1)),
        (
            r"^DML_OPERATOR_BATCH_NORMALIZATION_GRAD: OutputScaleGradientTensor\.Sizes\[3\] must "
            r"equal 2, got 1"
        ),
    ),
    (
        lambda: BN_GRAD(_t([2]), _t([2], "FLOAT16"), *(_t([2]),) * 6),
        (
            r"^DML_OPERATOR_BATCH_NORMALIZATION_GRAD: InputGradientTensor\.DataType must equal "
            r"InputTensor\.DataType"
        ),
    ),
    (
        lambda: BNT_GRAD(*(_t([2]),) * 8),
        r"^DML_OPERATOR_BATCH_NORMALIZATION_TRAINING_GRAD: Epsilon is required",
    ),
    (
        lambda: _bn(BNT_GRAD, scale=(1, 1, 2, 2)),
        r"^DML_OPERATOR_BATCH_NORMALIZATION_TRAINING_GRAD: ScaleTensor\.Sizes\[2\] must be 1",
    ),
    (
        lambda: _roi_grad(image=False),
        (
            r"^DML_OPERATOR_ROI_ALIGN_GRAD: OutputGradientTensor and OutputROIGradientTensor are "
            r"both null"
        ),
    ),
    (
        lambda: _roi_grad(with_input=False, function="MAX"),
        r"^DML_OPERATOR_ROI_ALIGN_GRAD: InputTensor is required when ReductionFunction is MAX",
    ),
    (
        lambda: _roi_grad(with_input=False, coordinates=True),
        (
            r"^DML_OPERATOR_ROI_ALIGN_GRAD: InputTensor is required when OutputROIGradientTensor "
            r"is given"
        ),
    ),
    (
        lambda: _roi_grad(function="SUM"),
        r"^DML_OPERATOR_ROI_ALIGN_GRAD: ReductionFunction must be AVERAGE or MAX, got SUM",
    ),
    (
        lambda: _roi_grad(samples=(2, 1)),
        (
            r"^DML_OPERATOR_ROI_ALIGN_GRAD: MaximumSamplesPerOutput must be >= "
            r"MinimumSamplesPerOutput \(2\), got 1"
        ),
    ),
    (
        lambda: _roi_grad(dy=(2, 1, 1, 1)),
        r"^DML_OPERATOR_ROI_ALIGN_GRAD: InputGradientTensor\.Sizes\[0\] must equal 1, got 2",
    ),
    (
        lambda: _roi_grad(dy=(1, 2, 1, 1)),
        r"^DML_OPERATOR_ROI_ALIGN_GRAD: InputGradientTensor\.Sizes\[1\] must equal 1, got 2",
    ),
    (
        lambda: _roi_grad(batch=(2,)),
        r"^DML_OPERATOR_ROI_ALIGN_GRAD: BatchIndicesTensor\.Sizes\[0\] must equal NumROIs",
    ),
    (
        _replace(lambda: _roi_grad(), output_gradient_tensor=_t([1, 1, 4, 5])),
        r"^DML_OPERATOR_ROI_ALIGN_GRAD: OutputGradientTensor\.Sizes\[3\] must equal 4, got 5",
    ),
    (
        _replace(lambda: _roi_grad(coordinates=True), output_roi_gradient_tensor=_t([1, 1, 4])),
        r"^DML_OPERATOR_ROI_ALIGN_GRAD: OutputROIGradientTensor\.DimensionCount must equal 2",
    ),
    (
        _replace(lambda: _roi_grad(), roi_tensor=_t([1, 4], "FLOAT16")),
        r"^DML_OPERATOR_ROI_ALIGN_GRAD: ROITensor\.DataType must equal InputTensor\.DataType",
    ),
    (
        lambda: _roi_grad(with_input=False, x=(1, 1, 4)),
        r"^DML_OPERATOR_ROI_ALIGN_GRAD: OutputGradientTensor\.DimensionCount must be 4, got 3",
    ),
    (
        lambda: _adam(step="INT32"),
        (
            r"^DML_OPERATOR_ADAM_OPTIMIZER: TrainingStepTensor\.DataType must be UINT32 or "
            r"InputParametersTensor\.DataType \(FLOAT32\), got INT32"
        ),
    ),
    (
        lambda: _adam(step_sizes=(1, 1, 1, 2)),
        r"^DML_OPERATOR_ADAM_OPTIMIZER: TrainingStepTensor\.Sizes must all be 1",
    ),
    (
        _replace(lambda: _adam(), gradient_tensor=_t([1, 1, 2, 1])),
        (
            r"^DML_OPERATOR_ADAM_OPTIMIZER: GradientTensor\.Sizes must equal "
            r"InputParametersTensor\.Sizes"
        ),
    ),
    (
        _replace(lambda: _adam(), input_second_moment_tensor=_t([1, 1, 1, 2], "FLOAT16")),
        r"^DML_OPERATOR_ADAM_OPTIMIZER: InputSecondMomentTensor\.DataType must equal",
    ),
    (
        _replace(lambda: _adam(), output_first_moment_tensor=_t([1, 1, 1, 3])),
        r"^DML_OPERATOR_ADAM_OPTIMIZER: OutputFirstMomentTensor\.Sizes\[3\] must equal 2",
    ),
    (
        lambda: _adam(shape=(2, 2), step_sizes=(1, 1)),
        (
            r"^DML_OPERATOR_ADAM_OPTIMIZER: InputParametersTensor with data type FLOAT32 and "
            r"DimensionCount 2 is not supported"
        ),
    ),
]


@pytest.mark.parametrize("factory, pattern", INVALID_ROWS)
def test_invalid_descriptions_are_rejected(factory, pattern):
    with pytest.raises(dml.ValidationError, match=pattern):
        dml.validate(factory())


@pytest.mark.parametrize(
    "desc, lowest",
    [
        (RELU_GRAD(_t([2]), _t([2]), _t([2])), "3_0"),
        (_adam(), "3_0"),
        (LRN_GRAD(*(_t([1, 1, 1, 1]),) * 3, True, 1, 1.0, 1.0, 1.0), "3_1"),
        (_bn(BN_GRAD), "3_1"),
        (_bn(BNT_GRAD), "4_1"),
        (_roi_grad(), "4_1"),
        (
            RESAMPLE_GRAD1(
                _t([1, 2]), _t([1, 1]), "LINEAR", "DECREASING", [1, 2], [0] * 2, [0] * 2
            ),
            "5_1",
        ),
    ],
)
def test_introduction_levels(desc, lowest):
    level = dml.FeatureLevel.parse(lowest)
    dml.validate(desc, level)
    earlier = max(f for f in dml.FeatureLevel if f < level)
    with pytest.raises(dml.ValidationError, match=rf"requires feature level {lowest} or later"):
        dml.validate(desc, earlier)


def test_every_pair_is_exercised():
    """Every gradient operator of the registry (and CONVOLUTION's BACKWARD direction) has a
    forward pair here, which the agreement tests walk."""
    names = {"DML_OPERATOR_" + p.name for p in PAIRS}
    grads = {n for n in dml.registered_operators() if n.endswith(("_GRAD", "_GRAD1"))}
    backward_of = {
        "DML_OPERATOR_ACTIVATION_RELU_GRAD": "ACTIVATION_RELU",
        "DML_OPERATOR_AVERAGE_POOLING_GRAD": "AVERAGE_POOLING",
        "DML_OPERATOR_MAX_POOLING_GRAD": "MAX_POOLING",
        "DML_OPERATOR_SLICE_GRAD": "SLICE1",
        "DML_OPERATOR_RESAMPLE_GRAD": "RESAMPLE1",
        "DML_OPERATOR_RESAMPLE_GRAD1": "RESAMPLE2",
        "DML_OPERATOR_LOCAL_RESPONSE_NORMALIZATION_GRAD": "LOCAL_RESPONSE_NORMALIZATION",
        "DML_OPERATOR_BATCH_NORMALIZATION_GRAD": "BATCH_NORMALIZATION",
        "DML_OPERATOR_BATCH_NORMALIZATION_TRAINING_GRAD": "BATCH_NORMALIZATION_TRAINING",
        "DML_OPERATOR_ROI_ALIGN_GRAD": "ROI_ALIGN1",
        "DML_OPERATOR_ELEMENT_WISE_CLIP_GRAD": "ELEMENT_WISE_CLIP",
        "DML_OPERATOR_ELEMENT_WISE_CLIP_GRAD1": "ELEMENT_WISE_CLIP1",
    }
    assert set(backward_of) == grads
    assert {"DML_OPERATOR_" + f for f in backward_of.values()} | {
        "DML_OPERATOR_CONVOLUTION"
    } == names
