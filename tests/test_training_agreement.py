"""jax.vjp of each forward operator's lowering equals DirectML's gradient operator for it.

For every pair of tests/training_cases.py (ACTIVATION_RELU / RELU_GRAD, AVERAGE_POOLING and
MAX_POOLING(1, 2) / their GRADs, SLICE1 / SLICE_GRAD, RESAMPLE1 / RESAMPLE_GRAD, RESAMPLE2 /
RESAMPLE_GRAD1, LRN / LRN_GRAD, BATCH_NORMALIZATION(_TRAINING) / their GRADs, ROI_ALIGN1 /
ROI_ALIGN_GRAD, CLIP(1) / CLIP_GRAD(1), CONVOLUTION FORWARD / BACKWARD): random cases, then the
ties and boundaries where autodiff's own conventions would differ from DirectML's (and where
the forward lowerings therefore carry DirectML's rule in a custom derivative). docs/training.md
lists the pairs and these tests.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import reference
import strategies as S
from hypothesis import given, settings
from hypothesis import strategies as st
from training_cases import PAIR_IDS, PAIRS, incoming

import dml_jax as dml

T = dml.TensorDesc


def forward_vjp(case: S.Case, wrt: tuple[int, ...], dy: np.ndarray) -> tuple:
    """The cotangents of the forward inputs ``wrt`` for ``dy`` on the forward's first output."""
    with S.x64(case.desc):  # MAX_POOLING1/2's UINT64 OutputIndicesTensor
        op = dml.compile_operator(case.desc)
        args = [jnp.asarray(a) for a in case.inputs]

        def first_output(*diff):
            full = list(args)
            for i, a in zip(wrt, diff):
                full[i] = a
            out = op.fn(*full)
            return out[0] if isinstance(out, tuple) else out

        _, back = jax.vjp(jax.jit(first_output), *(args[i] for i in wrt))
        return tuple(np.asarray(g) for g in back(jnp.asarray(dy)))


def _tolerance(pair, case) -> dict:
    if pair.tolerance.get("exact") or case.inputs[0].dtype != np.float16:
        return pair.tolerance
    return {"exact": False, "rtol": 2e-3, "atol": 2e-3}


def _agree(pair, forward: S.Case, dy: np.ndarray) -> S.Case:
    grad_case, wrt = pair.backward(forward, dy)
    S.assert_same(S.run(grad_case), forward_vjp(forward, wrt, dy), **_tolerance(pair, forward))
    return grad_case


# Thirteen pairs, each example a compile or two of the forward and its gradient operator on
# CPU: an eighth of the profile's examples per pair keeps the file fast ("thorough" scales up).
@settings(max_examples=max(3, settings.default.max_examples // 8))
@pytest.mark.parametrize("pair", PAIRS, ids=PAIR_IDS)
@given(data=st.data())
def test_vjp_of_the_forward_equals_the_gradient_operator(pair, data):
    forward = data.draw(pair.forward())
    _agree(pair, forward, incoming(forward, data.draw(S.seeds())))


PAIR = {p.name: p for p in PAIRS}


# --- ties and boundaries ---------------------------------------------------------------------


def test_relu_derivative_at_zero_is_relu_grads():
    """RELU_GRAD passes the gradient where x > 0 only: 0 at +0, -0 and NaN (autodiff of a
    max would give 0.5 or 1 at 0)."""
    t = T("FLOAT32", [6])
    x = np.array([-1.0, -0.0, 0.0, 1e-30, 2.0, np.nan], np.float32)
    dy = np.arange(1, 7, dtype=np.float32)
    grad = _agree(PAIR["ACTIVATION_RELU"], S.Case(dml.ActivationReluOperatorDesc(t, t), (x,)), dy)
    np.testing.assert_array_equal(S.run(grad)[0], [0, 0, 0, 4, 5, 0])


def _max_pool(shape, window, strides, start=(0, 0), end=(0, 0), dilations=None):
    x = T("FLOAT32", shape)
    cls = dml.MaxPooling2OperatorDesc if dilations else dml.MaxPoolingOperatorDesc
    extra = {"dilations": list(dilations)} if dilations else {}
    probe = cls(
        x,
        x,
        strides=list(strides),
        window_size=list(window),
        start_padding=list(start),
        end_padding=list(end),
        **extra,
    )
    from dml_jax.ops.pooling import window_plan

    sizes = shape[:2] + window_plan(probe).outputs
    return cls(
        x,
        T("FLOAT32", sizes),
        strides=list(strides),
        window_size=list(window),
        start_padding=list(start),
        end_padding=list(end),
        **extra,
    )


@pytest.mark.parametrize(
    "window, strides, start, end, dilations, lowering",
    [
        ((3, 3), (1, 1), (1, 1), (1, 1), None, "strided slices (overlapping, <= 32 points)"),
        ((2, 3), (1, 2), (0, 1), (1, 0), (2, 1), "strided slices (dilated)"),
        ((2, 2), (2, 2), (0, 0), (1, 1), None, "reduce_window (disjoint)"),
        ((6, 6), (1, 1), (2, 2), (2, 2), None, "reduce_window (36 points)"),
    ],
)
def test_max_pooling_ties_go_to_the_first_maximum_in_every_lowering(
    window, strides, start, end, dilations, lowering
):
    """Equal maxima, NaN and the lowest float: MAX_POOLING_GRAD's lowest-index rule in both
    lowerings of the forward (jax's reduce_window derivative would pick by its own rule)."""
    rng = np.random.default_rng(3)
    x = rng.integers(0, 2, (2, 2, 7, 8)).astype(np.float32)  # mostly ties
    x[0, 0, 0, 0] = -np.inf  # equal to the padding value: still an input element
    x[1, 1, 2, 3] = x[1, 1, 3, 3] = np.nan  # the first NaN is the maximum
    desc = _max_pool(x.shape, window, strides, start, end, dilations)
    forward = S.Case(desc, (x,))
    dy = rng.standard_normal(desc.output_tensor.sizes).astype(np.float32)
    grad = _agree(PAIR["MAX_POOLING"], forward, dy)
    # Overlapping windows add up in float32 here, in float64 in the reference.
    want = reference.reference(grad.desc, *grad.inputs)[0]
    np.testing.assert_allclose(S.run(grad)[0], want, rtol=1e-6, atol=1e-6)


def test_max_pooling_window_of_padding_only_passes_nothing_back():
    x = np.full((1, 1, 2, 2), -np.inf, np.float32)  # the padding value itself
    # A 1x1 window at stride 3 over the input padded by 2: windows at padded coordinates 0 and
    # 3, i.e. input rows and columns -2 (padding) and 1; only window (1, 1) is on the input.
    desc = _max_pool(x.shape, (1, 1), (3, 3), start=(2, 2), end=(2, 2))
    dy = np.array([1, 2, 3, 4], np.float32).reshape(1, 1, 2, 2)
    grad = _agree(PAIR["MAX_POOLING"], S.Case(desc, (x,)), dy)
    np.testing.assert_array_equal(S.run(grad)[0], [[[[0, 0], [0, 4]]]])


def test_average_pooling_window_of_padding_only_passes_nothing_back():
    x = T("FLOAT32", [1, 1, 2, 2])
    geometry = {
        "strides": [3, 3],
        "window_size": [1, 1],
        "start_padding": [2, 2],
        "end_padding": [2, 2],
    }
    desc = dml.AveragePoolingOperatorDesc(
        x, T("FLOAT32", [1, 1, 2, 2]), **geometry, include_padding=False
    )
    dy = np.array([1, 2, 3, 4], np.float32).reshape(1, 1, 2, 2)
    grad = _agree(PAIR["AVERAGE_POOLING"], S.Case(desc, (np.ones((1, 1, 2, 2), np.float32),)), dy)
    np.testing.assert_array_equal(S.run(grad)[0], [[[[0, 0], [0, 4]]]])


@pytest.mark.parametrize("bound", ["min", "max"])
def test_clip_derivative_at_the_bounds_is_clip_grads(bound):
    t = T("FLOAT32", [5])
    x = np.array([-1.0, -0.5, 0.0, 0.5, 1.0], np.float32)
    desc = dml.ElementWiseClipOperatorDesc(
        t, t, min=-1.0 if bound == "min" else -2.0, max=1.0 if bound == "max" else 2.0
    )
    grad = _agree(PAIR["ELEMENT_WISE_CLIP"], S.Case(desc, (x,)), np.ones(5, np.float32))
    want = [0, 1, 1, 1, 1] if bound == "min" else [1, 1, 1, 1, 0]
    np.testing.assert_array_equal(S.run(grad)[0], want)


@pytest.mark.parametrize("mode", ["NEAREST_NEIGHBOR", "LINEAR"])
@pytest.mark.parametrize("cls", [dml.Resample1OperatorDesc, dml.Resample2OperatorDesc])
def test_resample_at_exact_halves_and_integers(cls, mode):
    """Scale 2 at pixel centres puts nearest-neighbour coordinates on exact halves (rounded by
    the forward's rule) and linear ones a quarter either side of integers; scale 1 with offset
    0.5 puts them on integers (weight 1 on one tap)."""
    x = T("FLOAT32", [1, 1, 3, 4])
    extra = {"rounding_direction": "INCREASING"} if cls is dml.Resample2OperatorDesc else {}
    desc = cls(
        x,
        T("FLOAT32", [1, 1, 6, 4]),
        interpolation_mode=mode,
        scales=[1, 1, 2, 1],
        input_pixel_offsets=[0, 0, 0.5, 0.5],
        output_pixel_offsets=[0, 0, -0.5, 0.0],
        **extra,
    )
    values = np.arange(12, dtype=np.float32).reshape(1, 1, 3, 4)
    dy = np.random.default_rng(5).standard_normal((1, 1, 6, 4)).astype(np.float32)
    grad = _agree(PAIR["RESAMPLE1" if not extra else "RESAMPLE2"], S.Case(desc, (values,)), dy)
    np.testing.assert_allclose(
        S.run(grad)[0], reference.reference(grad.desc, *grad.inputs)[0], rtol=1e-6, atol=1e-6
    )


def _align1(x_shape, rois, out, function, mode, samples=(1, 1), offsets=(0.5, -0.5), oob=None):
    x = T("FLOAT32", x_shape)
    oob = (-np.inf if function == "MAX" else 0.0) if oob is None else oob
    return dml.RoiAlign1OperatorDesc(
        x,
        T("FLOAT32", [rois, 4]),
        T("UINT32", [rois]),
        T("FLOAT32", [rois, x_shape[1], *out]),
        function,
        mode,
        spatial_scale_x=1.0,
        spatial_scale_y=1.0,
        input_pixel_offset=offsets[0],
        output_pixel_offset=offsets[1],
        out_of_bounds_input_value=oob,
        minimum_samples_per_output=samples[0],
        maximum_samples_per_output=samples[1],
        align_regions_to_corners=False,
    )


def test_roi_align_max_ties_go_to_the_first_sample():
    """Equal samples under MAX: the first (rows, then columns) takes the whole gradient, for
    the image and for the coordinates (jnp.max's derivative would share it)."""
    image = np.ones((1, 1, 4, 4), np.float32)
    image[0, 0, 2:, :] = 2.0  # rows 2, 3 tie at 2
    rois = np.array([[0.25, 0.25, 3.75, 3.75]], np.float32)
    desc = _align1(image.shape, 1, (1, 1), "MAX", "LINEAR", samples=(2, 2))
    forward = S.Case(desc, (image, rois, np.zeros(1, np.uint32)))
    grad = _agree(PAIR["ROI_ALIGN1"], forward, np.full((1, 1, 1, 1), 3, np.float32))
    dx, droi = S.run(grad)
    assert np.count_nonzero(dx) <= 4 and dx.sum() == pytest.approx(3)  # one sample's taps
    want = reference.reference(grad.desc, *grad.inputs)
    np.testing.assert_allclose(dx, want[0], rtol=1e-6)
    np.testing.assert_allclose(droi, want[1], rtol=1e-5, atol=1e-6)


# Four regions in one case (one compile): samples on exact integers (floor and floor + 1, the
# right slope), in [-1, 0) (clamped, slope 0), at size - 1 and past it, and an inverted region.
_EDGE_REGIONS = [
    [0.0, 0.0, 2.0, 2.0],
    [-1.5, -1.5, 1.5, 1.5],
    [2.0, 2.0, 5.0, 5.0],
    [3.0, 1.0, 1.0, 3.0],
]


@pytest.mark.parametrize("function", ["AVERAGE", "MAX"])
def test_roi_align_coordinate_gradient_at_integers_and_edges(function):
    rng = np.random.default_rng(11)
    image = rng.standard_normal((1, 2, 4, 4)).astype(np.float32)
    rois = np.array(_EDGE_REGIONS, np.float32)
    desc = _align1(image.shape, 4, (2, 2), function, "LINEAR", samples=(2, 2), offsets=(0, 0))
    forward = S.Case(desc, (image, rois, np.zeros(4, np.uint32)))
    dy = rng.standard_normal((4, 2, 2, 2)).astype(np.float32)
    grad = _agree(PAIR["ROI_ALIGN1"], forward, dy)
    got, want = S.run(grad), reference.reference(grad.desc, *grad.inputs)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    assert np.count_nonzero(got[1]) > 4  # the coordinates do get gradients


def test_batch_norm_training_grad_with_the_forwards_statistics_is_autodiff():
    """BATCH_NORMALIZATION_TRAINING_GRAD fed the forward's own mean and variance is the full
    derivative of the forward (its statistics depend on the input)."""
    x = T("FLOAT32", [3, 2, 2, 1])
    p = T("FLOAT32", [1, 2, 1, 1])
    desc = dml.BatchNormalizationTrainingOperatorDesc(x, p, p, None, x, p, p, epsilon=0.01)
    rng = np.random.default_rng(2)
    inputs = tuple(rng.standard_normal(t.sizes).astype(np.float32) for t in (x, p, p))
    _agree(
        PAIR["BATCH_NORMALIZATION_TRAINING"],
        S.Case(desc, inputs),
        rng.standard_normal(x.sizes).astype(np.float32),
    )
