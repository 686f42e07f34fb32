"""Worked values of the activation operators added after RELU / ELU / LINEAR / SIGMOID.

Every expected value below is computed by hand from the formula on the operator's
DML_ACTIVATION_*_OPERATOR_DESC page with ``math`` (never with tests/reference), and every example
printed on those pages is reproduced: the three HARDMAX1 examples. (The LOG_SOFTMAX1 page prints
the HARDMAX1 outputs under its examples, a copy-paste slip of the page; the seeds here give the
true log-softmax of that input instead.) FLOAT members are chosen exactly representable in
float32, so the hand values need no float32 rounding of the attributes.

``SEEDS`` rows are (desc, inputs, expected outputs); test_registry.py collects them.
``INVALID_ROWS`` rows are (factory, regex); the lowering's author fills them.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import reference

import dml_jax as dml

_PREFIX = "DML_OPERATOR_ACTIVATION_"


def _t(sizes) -> dml.TensorDesc:
    return dml.TensorDesc("FLOAT32", list(sizes))


def _unary(cls, sizes=(2, 3), **attrs):
    return cls(_t(sizes), _t(sizes), **attrs)


def _f32(values, shape=None) -> np.ndarray:
    a = np.array(values, np.float32)
    return a if shape is None else a.reshape(shape)


def _softmax(v: float, row: list[float]) -> float:
    """exp(v - max) / sum(exp(r - max)) over one slice (the pages' formula, max subtracted)."""
    m = max(row)
    return math.exp(v - m) / sum(math.exp(r - m) for r in row)


def _log_softmax(v: float, row: list[float]) -> float:
    """ln(exp(v) / sum(exp(r))) = (v - max) - ln(sum(exp(r - max)))."""
    m = max(row)
    return (v - m) - math.log(sum(math.exp(r - m) for r in row))


# The shared input of the element-wise seeds, and of the pages' formulas evaluated on it.
XS = [-2.0, -1.0, -0.5, 0.0, 0.5, 2.0]
X = _f32(XS, (2, 3))


def _each(f) -> np.ndarray:
    return _f32([f(v) for v in XS], (2, 3))


# The HARDMAX1 / LOG_SOFTMAX1 pages' input, Sizes {2, 2, 2}.
PAGE = _f32([[[12, 0], [-101, 11]], [[3, 234], [0, -101]]])

SEEDS = [
    # CELU, Alpha = 2: f(x) = max(0, x) + min(0, Alpha * (exp(x / Alpha) - 1))
    (
        _unary(dml.ActivationCeluOperatorDesc, alpha=2.0),
        (X,),
        (_each(lambda v: max(0.0, v) + min(0.0, 2.0 * (math.exp(v / 2.0) - 1.0))),),
    ),
    # GELU: f(x) = 0.5 * x * (1 + erf(x / sqrt(2)))
    (
        _unary(dml.ActivationGeluOperatorDesc),
        (X,),
        (_each(lambda v: 0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0)))),),
    ),
    # HARD_SIGMOID, Alpha = 0.25, Beta = 0.5: max(0, min(0.25 x + 0.5, 1)); clamps at x = -3, 3.
    (
        _unary(dml.ActivationHardSigmoidOperatorDesc, sizes=(6,), alpha=0.25, beta=0.5),
        (_f32([-3.0, -1.0, -0.5, 0.0, 1.0, 3.0]),),
        (_f32([0.0, 0.25, 0.375, 0.5, 0.75, 1.0]),),
    ),
    # HARD_SWISH, Alpha = 0.25, Beta = 0.5: x * HardSigmoid(x, Alpha, Beta)
    (
        _unary(dml.ActivationHardSwishOperatorDesc, sizes=(6,), alpha=0.25, beta=0.5),
        (_f32([-3.0, -1.0, -0.5, 0.0, 1.0, 3.0]),),
        (_f32([-3.0 * 0.0, -1.0 * 0.25, -0.5 * 0.375, 0.0, 1.0 * 0.75, 3.0 * 1.0]),),
    ),
    # IDENTITY: f(x) = x
    (_unary(dml.ActivationIdentityOperatorDesc), (X,), (X.copy(),)),
    # LEAKY_RELU, Alpha = 0.125: x if x >= 0 else 0.125 x
    (
        _unary(dml.ActivationLeakyReluOperatorDesc, alpha=0.125),
        (X,),
        (_f32([-0.25, -0.125, -0.0625, 0.0, 0.5, 2.0], (2, 3)),),
    ),
    # PARAMETERIZED_RELU: x if x >= 0 else slope * x, the slope of the same element.
    (
        dml.ActivationParameterizedReluOperatorDesc(_t((2, 3)), _t((2, 3)), _t((2, 3))),
        (X, _f32([[0.5, -1.0, 3.0], [7.0, 7.0, 7.0]])),
        (_f32([-2.0 * 0.5, -1.0 * -1.0, -0.5 * 3.0, 0.0, 0.5, 2.0], (2, 3)),),
    ),
    # PARAMETRIC_SOFTPLUS, Alpha = 2, Beta = 0.5: Alpha * ln(1 + exp(Beta * x))
    (
        _unary(dml.ActivationParametricSoftplusOperatorDesc, alpha=2.0, beta=0.5),
        (X,),
        (_each(lambda v: 2.0 * math.log(1.0 + math.exp(0.5 * v))),),
    ),
    # SCALED_ELU, Alpha = 1.5, Gamma = 2: Gamma * x if x > 0 else Gamma * (Alpha exp(x) - Alpha)
    (
        _unary(dml.ActivationScaledEluOperatorDesc, alpha=1.5, gamma=2.0),
        (X,),
        (_each(lambda v: 2.0 * v if v > 0 else 2.0 * (1.5 * math.exp(v) - 1.5)),),
    ),
    # SCALED_TANH, Alpha = 1.5, Beta = 0.5: Alpha * tanh(Beta * x)
    (
        _unary(dml.ActivationScaledTanhOperatorDesc, alpha=1.5, beta=0.5),
        (X,),
        (_each(lambda v: 1.5 * math.tanh(0.5 * v)),),
    ),
    # SHRINK, Bias = 0.25, Threshold = 0.75: x - Bias above Threshold, x + Bias below -Threshold,
    # 0 otherwise; +-0.75 themselves are not beyond the threshold.
    (
        _unary(dml.ActivationShrinkOperatorDesc, bias=0.25, threshold=0.75),
        (_f32([[-2.0, -0.75, -0.5], [0.75, 1.0, 2.0]]),),
        (_f32([[-2.0 + 0.25, 0.0, 0.0], [0.0, 1.0 - 0.25, 2.0 - 0.25]]),),
    ),
    # SOFTPLUS, Steepness = 2: ln(1 + exp(Steepness * x)) / Steepness
    (
        _unary(dml.ActivationSoftplusOperatorDesc, steepness=2.0),
        (X,),
        (_each(lambda v: math.log(1.0 + math.exp(2.0 * v)) / 2.0),),
    ),
    # SOFTSIGN: x / (1 + |x|)
    (
        _unary(dml.ActivationSoftsignOperatorDesc),
        (X,),
        (_f32([-2 / 3, -1 / 2, -0.5 / 1.5, 0.0, 0.5 / 1.5, 2 / 3], (2, 3)),),
    ),
    # SWISH, SigmoidInputScale = 0.5: x * Sigmoid(0.5 x) = x / (1 + exp(-0.5 x))
    (
        _unary(dml.ActivationSwishOperatorDesc, sigmoid_input_scale=0.5),
        (X,),
        (_each(lambda v: v / (1.0 + math.exp(-0.5 * v))),),
    ),
    # TANH: (1 - exp(-2x)) / (1 + exp(-2x))
    (
        _unary(dml.ActivationTanhOperatorDesc),
        (X,),
        (_each(lambda v: (1.0 - math.exp(-2.0 * v)) / (1.0 + math.exp(-2.0 * v))),),
    ),
    # THRESHOLDED_RELU, Alpha = 0.5: x if x > 0.5 else 0 (0.5 itself gives 0).
    (
        _unary(dml.ActivationThresholdedReluOperatorDesc, alpha=0.5),
        (X,),
        (_f32([0.0, 0.0, 0.0, 0.0, 0.0, 2.0], (2, 3)),),
    ),
    # SOFTMAX (version 0) on Sizes {1, 1, 2, 3} (effective rank 2): each of the 2 rows alone.
    # The second row's -inf contributes exp(-inf) = 0.
    (
        _unary(dml.ActivationSoftmaxOperatorDesc, sizes=(1, 1, 2, 3)),
        (_f32([1.0, 2.0, 3.0, -np.inf, 0.0, 0.0], (1, 1, 2, 3)),),
        (
            _f32(
                [_softmax(v, [1.0, 2.0, 3.0]) for v in (1.0, 2.0, 3.0)] + [0.0, 0.5, 0.5],
                (1, 1, 2, 3),
            ),
        ),
    ),
    # SOFTMAX (version 0) on a 1-D tensor: all of it.
    (
        _unary(dml.ActivationSoftmaxOperatorDesc, sizes=(4,)),
        (_f32([0.0, 1.0, -1.0, 0.5]),),
        (_f32([_softmax(v, [0.0, 1.0, -1.0, 0.5]) for v in (0.0, 1.0, -1.0, 0.5)]),),
    ),
    # LOG_SOFTMAX (version 0), the same rows: ln(softmax); ln(0) = -inf for the -inf entry.
    (
        _unary(dml.ActivationLogSoftmaxOperatorDesc, sizes=(1, 1, 2, 3)),
        (_f32([1.0, 2.0, 3.0, -np.inf, 0.0, 0.0], (1, 1, 2, 3)),),
        (
            _f32(
                [_log_softmax(v, [1.0, 2.0, 3.0]) for v in (1.0, 2.0, 3.0)]
                + [-np.inf, math.log(0.5), math.log(0.5)],
                (1, 1, 2, 3),
            ),
        ),
    ),
    # HARDMAX (version 0), Sizes {2, 4}: 1 at the first occurrence of each row's largest value.
    (
        _unary(dml.ActivationHardmaxOperatorDesc, sizes=(2, 4)),
        (_f32([[1.0, 3.0, 3.0, 2.0], [-1.0, -1.0, -5.0, -1.0]]),),
        (_f32([[0, 1, 0, 0], [1, 0, 0, 0]]),),
    ),
    # HARDMAX1, the page's Example 1: Axes {1}.
    (
        _unary(dml.ActivationHardmax1OperatorDesc, sizes=(2, 2, 2), axes=(1,)),
        (PAGE,),
        (_f32([[[1, 0], [0, 1]], [[1, 1], [0, 0]]]),),
    ),
    # HARDMAX1, the page's Example 2: Axes {0}.
    (
        _unary(dml.ActivationHardmax1OperatorDesc, sizes=(2, 2, 2), axes=(0,)),
        (PAGE,),
        (_f32([[[1, 0], [0, 1]], [[0, 1], [1, 0]]]),),
    ),
    # HARDMAX1, the page's Example 3: Axes {0, 2}.
    (
        _unary(dml.ActivationHardmax1OperatorDesc, sizes=(2, 2, 2), axes=(0, 2)),
        (PAGE,),
        (_f32([[[0, 0], [0, 1]], [[0, 1], [0, 0]]]),),
    ),
    # HARDMAX1 with a tie over two axes, Axes {0, 2} of Sizes {2, 1, 2}: the reduced elements in
    # row-major order are [0,0,0], [0,0,1], [1,0,0], [1,0,1] = 5, 7, 7, 7: the 1 goes to [0,0,1].
    (
        _unary(dml.ActivationHardmax1OperatorDesc, sizes=(2, 1, 2), axes=(0, 2)),
        (_f32([[[5.0, 7.0]], [[7.0, 7.0]]]),),
        (_f32([[[0, 1]], [[0, 0]]]),),
    ),
    # SOFTMAX1, Axes {0, 2} of Sizes {2, 2, 2}: slice j = 0 holds [0,0,0], [0,0,1], [1,0,0],
    # [1,0,1] = 0, 1, 2, -1; slice j = 1 holds 3, 3, 0, 0.
    (
        _unary(dml.ActivationSoftmax1OperatorDesc, sizes=(2, 2, 2), axes=(0, 2)),
        (_f32([[[0.0, 1.0], [3.0, 3.0]], [[2.0, -1.0], [0.0, 0.0]]]),),
        (
            _f32(
                [
                    [
                        [_softmax(0.0, [0, 1, 2, -1]), _softmax(1.0, [0, 1, 2, -1])],
                        [_softmax(3.0, [3, 3, 0, 0]), _softmax(3.0, [3, 3, 0, 0])],
                    ],
                    [
                        [_softmax(2.0, [0, 1, 2, -1]), _softmax(-1.0, [0, 1, 2, -1])],
                        [_softmax(0.0, [3, 3, 0, 0]), _softmax(0.0, [3, 3, 0, 0])],
                    ],
                ]
            ),
        ),
    ),
    # SOFTMAX1 on the pages' input, Axes {1}: pairs {12, -101}, {0, 11}, {3, 0}, {234, -101}.
    (
        _unary(dml.ActivationSoftmax1OperatorDesc, sizes=(2, 2, 2), axes=(1,)),
        (PAGE,),
        (
            _f32(
                [
                    [
                        [_softmax(12, [12, -101]), _softmax(0, [0, 11])],
                        [_softmax(-101, [12, -101]), _softmax(11, [0, 11])],
                    ],
                    [
                        [_softmax(3, [3, 0]), _softmax(234, [234, -101])],
                        [_softmax(0, [3, 0]), _softmax(-101, [234, -101])],
                    ],
                ]
            ),
        ),
    ),
    # LOG_SOFTMAX1 on the pages' input (the true values; see the module docstring), Axes {1}.
    (
        _unary(dml.ActivationLogSoftmax1OperatorDesc, sizes=(2, 2, 2), axes=(1,)),
        (PAGE,),
        (
            _f32(
                [
                    [
                        [_log_softmax(12, [12, -101]), _log_softmax(0, [0, 11])],
                        [_log_softmax(-101, [12, -101]), _log_softmax(11, [0, 11])],
                    ],
                    [
                        [_log_softmax(3, [3, 0]), _log_softmax(234, [234, -101])],
                        [_log_softmax(0, [3, 0]), _log_softmax(-101, [234, -101])],
                    ],
                ]
            ),
        ),
    ),
    # LOG_SOFTMAX1 on the pages' input, Axes {0}: pairs {12, 3}, {0, 234}, {-101, 0}, {11, -101}.
    (
        _unary(dml.ActivationLogSoftmax1OperatorDesc, sizes=(2, 2, 2), axes=(0,)),
        (PAGE,),
        (
            _f32(
                [
                    [
                        [_log_softmax(12, [12, 3]), _log_softmax(0, [0, 234])],
                        [_log_softmax(-101, [-101, 0]), _log_softmax(11, [11, -101])],
                    ],
                    [
                        [_log_softmax(3, [12, 3]), _log_softmax(234, [0, 234])],
                        [_log_softmax(0, [-101, 0]), _log_softmax(-101, [11, -101])],
                    ],
                ]
            ),
        ),
    ),
    # LOG_SOFTMAX1 on the pages' input, Axes {0, 2}: {12, 0, 3, 234} and {-101, 11, 0, -101}.
    (
        _unary(dml.ActivationLogSoftmax1OperatorDesc, sizes=(2, 2, 2), axes=(0, 2)),
        (PAGE,),
        (
            _f32(
                [
                    [
                        [_log_softmax(12, [12, 0, 3, 234]), _log_softmax(0, [12, 0, 3, 234])],
                        [
                            _log_softmax(-101, [-101, 11, 0, -101]),
                            _log_softmax(11, [-101, 11, 0, -101]),
                        ],
                    ],
                    [
                        [_log_softmax(3, [12, 0, 3, 234]), _log_softmax(234, [12, 0, 3, 234])],
                        [
                            _log_softmax(0, [-101, 11, 0, -101]),
                            _log_softmax(-101, [-101, 11, 0, -101]),
                        ],
                    ],
                ]
            ),
        ),
    ),
]

IDS = [f"{i:02d}-{desc.operator_type[len(_PREFIX) :]}" for i, (desc, _, _) in enumerate(SEEDS)]

# (factory, regex) rows for test_registry.py: filled by the lowering's author.
INVALID_ROWS: list = []


@pytest.mark.parametrize("desc, inputs, expected", SEEDS, ids=IDS)
def test_reference_matches_worked_values(desc, inputs, expected):
    got = reference.reference(desc, *inputs)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=1e-6)


@pytest.mark.parametrize("desc, inputs, expected", SEEDS, ids=IDS)
def test_lowering_matches_worked_values(desc, inputs, expected):
    got = np.asarray(dml.compile_operator(desc)(*inputs))
    assert got.dtype == expected[0].dtype and got.shape == expected[0].shape
    np.testing.assert_allclose(got, expected[0], rtol=1e-6, atol=1e-7)
