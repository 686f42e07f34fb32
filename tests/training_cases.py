"""Forward operators and their DirectML gradient operators, as pairs of random cases.

Each ``Pair`` draws a case of a forward operator (with the strategies of the forward operator's
own tests where they exist) and derives from it the gradient operator's description and inputs
for a random incoming gradient: ``pair.backward(forward_case, dy)`` returns the gradient case
and ``wrt``, the forward inputs whose gradients the gradient operator's outputs are, in order.
tests/test_training.py checks the gradient operators against tests/reference/training.py on
these cases; tests/test_training_agreement.py checks them against ``jax.vjp`` of the forward.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import strategies as S
from hypothesis import assume
from hypothesis import strategies as st
from test_gemm_conv import conv_cases
from test_movement import slice_cases
from test_pooling import pooling_cases
from test_resample import resample_cases
from test_roi import align_cases

import dml_jax as dml
from dml_jax.ops.gemm_conv import conv_output_sizes

T = dml.TensorDesc
F2 = ["FLOAT32", "FLOAT16"]


@dataclass(frozen=True)
class Pair:
    """A forward operator and the DirectML operator that computes its gradient."""

    name: str  # the pair's id in test names and in docs/training.md
    forward: Callable[..., Any]  # () -> strategy of forward S.Case
    backward: Callable[[S.Case, np.ndarray], tuple[S.Case, tuple[int, ...]]]
    tolerance: dict  # between the gradient operator and jax.vjp of the forward (float32)


def incoming(case: S.Case, rng: np.random.Generator, style: str = "small") -> np.ndarray:
    """A random gradient for the forward case's first output."""
    out = case.desc.output_slots()[0][1]
    return S.values(rng, out.data_type.name, out.sizes, style)


# --- derivations: forward description -> gradient description -------------------------------


def _relu_backward(case, dy):
    (x,) = case.inputs
    t = case.desc.input_tensor
    return S.Case(dml.ActivationReluGradOperatorDesc(t, t, t), (x, dy)), (0,)


def _clip_backward(case, dy):
    d = case.desc
    t = d.input_tensor
    if isinstance(d, dml.ElementWiseClip1OperatorDesc):
        grad = dml.ElementWiseClipGrad1OperatorDesc(
            t, t, t, d.min, d.max, min_max_data_type=d.min_max_data_type
        )
    else:
        grad = dml.ElementWiseClipGradOperatorDesc(t, t, t, d.min, d.max)
    return S.Case(grad, (case.inputs[0], dy)), (0,)


def _window(d) -> dict:
    return {
        "strides": d.strides,
        "window_size": d.window_size,
        "start_padding": d.start_padding,
        "end_padding": d.end_padding,
    }


def _average_pooling_backward(case, dy):
    d = case.desc
    grad = dml.AveragePoolingGradOperatorDesc(
        d.output_tensor, d.input_tensor, **_window(d), include_padding=d.include_padding
    )
    return S.Case(grad, (dy,)), (0,)


def _max_pooling_backward(case, dy):
    d = case.desc
    dilations = getattr(d, "dilations", (1,) * len(d.strides))
    grad = dml.MaxPoolingGradOperatorDesc(
        d.input_tensor, d.output_tensor, d.input_tensor, **_window(d), dilations=dilations
    )
    return S.Case(grad, (case.inputs[0], dy)), (0,)


def _slice_backward(case, dy):
    d = case.desc
    grad = dml.SliceGradOperatorDesc(
        d.output_tensor,
        d.input_tensor,
        d.input_window_offsets,
        d.input_window_sizes,
        d.input_window_strides,
    )
    return S.Case(grad, (dy,)), (0,)


def _resample_backward(case, dy):
    d = case.desc
    members = {
        "interpolation_mode": d.interpolation_mode,
        "scales": d.scales,
        "input_pixel_offsets": d.input_pixel_offsets,
        "output_pixel_offsets": d.output_pixel_offsets,
    }
    if isinstance(d, dml.Resample2OperatorDesc):
        grad = dml.ResampleGrad1OperatorDesc(
            d.output_tensor, d.input_tensor, rounding_direction=d.rounding_direction, **members
        )
    else:
        grad = dml.ResampleGradOperatorDesc(d.output_tensor, d.input_tensor, **members)
    return S.Case(grad, (dy,)), (0,)


def _lrn_backward(case, dy):
    d = case.desc
    grad = dml.LocalResponseNormalizationGradOperatorDesc(
        d.input_tensor,
        d.output_tensor,
        d.input_tensor,
        d.cross_channel,
        d.local_size,
        d.alpha,
        d.beta,
        d.bias,
    )
    return S.Case(grad, (case.inputs[0], dy)), (0,)


def _batch_norm_backward(case, dy):
    d = case.desc
    x, mean, var, scale, _ = case.inputs
    p = d.mean_tensor
    grad = dml.BatchNormalizationGradOperatorDesc(
        d.input_tensor, d.input_tensor, p, p, p, d.input_tensor, p, p, epsilon=d.epsilon
    )
    # BATCH_NORMALIZATION's inputs: x 0, mean 1, variance 2, scale 3, bias 4.
    return S.Case(grad, (x, dy, mean, var, scale)), (0, 3, 4)


def _batch_norm_training_backward(case, dy):
    d = case.desc
    x, scale, _bias = case.inputs
    _, mean, var = S.run(case)  # the forward's own statistics
    p = d.scale_tensor
    grad = dml.BatchNormalizationTrainingGradOperatorDesc(
        d.input_tensor, d.input_tensor, p, p, p, d.input_tensor, p, p, epsilon=d.epsilon
    )
    return S.Case(grad, (x, dy, mean, var, scale)), (0, 1, 2)


def _roi_align_backward(case, dy, coordinates: bool = True, image: bool = True):
    d = case.desc
    x, rois, batch = case.inputs
    with_input = coordinates or d.reduction_function.name == "MAX" or image
    grad = dml.RoiAlignGradOperatorDesc(
        d.input_tensor if with_input else None,
        d.output_tensor,
        d.roi_tensor,
        d.batch_indices_tensor,
        d.input_tensor if image else None,
        d.roi_tensor if coordinates else None,
        reduction_function=d.reduction_function,
        interpolation_mode=d.interpolation_mode,
        spatial_scale_x=d.spatial_scale_x,
        spatial_scale_y=d.spatial_scale_y,
        input_pixel_offset=d.input_pixel_offset,
        output_pixel_offset=d.output_pixel_offset,
        minimum_samples_per_output=d.minimum_samples_per_output,
        maximum_samples_per_output=d.maximum_samples_per_output,
        align_regions_to_corners=d.align_regions_to_corners,
    )
    inputs = ((x,) if with_input else ()) + (dy, rois, batch)
    wrt = ((0,) if image else ()) + ((1,) if coordinates else ())
    return S.Case(grad, inputs), wrt


def _convolution_backward(case, dy):
    d = case.desc
    _x, w = case.inputs[:2]
    pads = [s + e for s, e in zip(d.start_padding, d.end_padding)]
    extents = [(k - 1) * r + 1 for k, r in zip(d.filter_tensor.sizes[2:], d.dilations)]
    out_pad = [
        n - ((o - 1) * s + e - p)
        for n, o, s, e, p in zip(
            d.input_tensor.sizes[2:], d.output_tensor.sizes[2:], d.strides, extents, pads
        )
    ]
    grad = dataclasses.replace(
        d,
        input_tensor=d.output_tensor,
        output_tensor=d.input_tensor,
        bias_tensor=None,
        direction="BACKWARD",
        output_padding=out_pad,
    )
    return S.Case(grad, (dy, w)), (0,)


# --- forward strategies where the forward operator's tests have none that fits ---------------


@st.composite
def relu_cases(draw):
    type_name = draw(st.sampled_from(F2))
    shape = draw(S.shapes(max_elements=64, max_dim=4))
    rng = draw(S.seeds())
    x = S.values(rng, type_name, shape, draw(st.sampled_from(["ties", "small"])))
    t = T(type_name, shape)
    return S.Case(dml.ActivationReluOperatorDesc(t, t), (x,))


@st.composite
def lrn_cases(draw, types=F2):
    type_name = draw(st.sampled_from(types))
    shape = tuple(draw(st.integers(1, k)) for k in (2, 4, 3, 3))
    rng = draw(S.seeds())
    t = T(type_name, shape)
    desc = dml.LocalResponseNormalizationOperatorDesc(
        t,
        t,
        cross_channel=draw(st.booleans()),
        local_size=draw(st.integers(1, 4)),
        alpha=draw(st.sampled_from([1e-4, 0.5, 2.0])),
        beta=draw(st.sampled_from([0.75, 1.0, 0.5])),
        bias=draw(st.sampled_from([1.0, 2.0])),
    )
    return S.Case(desc, (S.values(rng, type_name, shape, "small"),))


def _statistics_sizes(draw, shape) -> tuple[int, ...]:
    sizes = tuple(draw(st.sampled_from([1, n])) for n in shape)
    assume(any(s == 1 for s in sizes))
    return sizes


@st.composite
def batch_norm_cases(draw, types=F2):
    type_name = draw(st.sampled_from(types))
    shape = draw(S.shapes(ranks=(1, 2, 3, 4), max_elements=48, max_dim=4))
    assume(math.prod(shape) > 1)
    x = T(type_name, shape)
    p = x.like(sizes=_statistics_sizes(draw, shape))
    rng = draw(S.seeds())
    desc = dml.BatchNormalizationOperatorDesc(
        x, p, p, p, p, x, spatial=True, epsilon=draw(st.sampled_from([1e-3, 0.1, 1.0]))
    )
    inputs = (
        S.values(rng, type_name, shape, "small"),
        S.values(rng, type_name, p.sizes, "small"),
        S.values(rng, type_name, p.sizes, "positive"),
        S.values(rng, type_name, p.sizes, "small"),
        S.values(rng, type_name, p.sizes, "small"),
    )
    return S.Case(desc, inputs)


@st.composite
def batch_norm_training_cases(draw, types=F2):
    type_name = draw(st.sampled_from(types))
    shape = draw(S.shapes(ranks=(1, 2, 3, 4), max_elements=48, max_dim=4))
    x = T(type_name, shape)
    p = x.like(sizes=_statistics_sizes(draw, shape))
    # Several elements per statistic, spread: the variance stays away from 0 (its root is not
    # differentiable there, and float16 cancels).
    assume(math.prod(shape) // math.prod(p.sizes) >= 2)
    rng = draw(S.seeds())
    desc = dml.BatchNormalizationTrainingOperatorDesc(
        x, p, p, None, x, p, p, epsilon=draw(st.sampled_from([1e-3, 0.1, 1.0]))
    )
    inputs = (
        S.values(rng, type_name, shape, "small"),
        S.values(rng, type_name, p.sizes, "small"),
        S.values(rng, type_name, p.sizes, "small"),
    )
    return S.Case(desc, inputs)


def _max_pooling_2d(types=F2, style=None):
    classes = (dml.MaxPoolingOperatorDesc, dml.MaxPooling1OperatorDesc, dml.MaxPooling2OperatorDesc)
    return pooling_cases(classes=classes, types=types, max_elements=96, style=style).filter(
        lambda c: c.desc.input_tensor.rank == 4
    )


def _as_4d(case: S.Case) -> S.Case:
    """A RESAMPLE1 case of rank < 4 with leading dimensions of 1, scale 1 and offsets 0 (which
    copy): RESAMPLE_GRAD takes 4-D tensors only."""
    d = case.desc
    extra = 4 - d.input_tensor.rank
    if extra == 0:
        return case

    def grow(t):
        return t.like(sizes=(1,) * extra + tuple(t.sizes))

    desc = dataclasses.replace(
        d,
        input_tensor=grow(d.input_tensor),
        output_tensor=grow(d.output_tensor),
        scales=(1.0,) * extra + tuple(d.scales),
        input_pixel_offsets=(0.0,) * extra + tuple(d.input_pixel_offsets),
        output_pixel_offsets=(0.0,) * extra + tuple(d.output_pixel_offsets),
        dimension_count=None,
    )
    return S.Case(desc, (case.inputs[0].reshape(desc.input_tensor.sizes),))


def _align_for_gradients(case: S.Case) -> S.Case:
    """An ROI_ALIGN1 case in ROI_ALIGN_GRAD's terms: UINT32 batch indices, and for MAX an
    OutOfBoundsInputValue of -inf (samples off the input never win)."""
    d = case.desc
    x, rois, batch = case.inputs
    oob = -np.inf if d.reduction_function.name == "MAX" else d.out_of_bounds_input_value
    desc = dataclasses.replace(
        d,
        batch_indices_tensor=d.batch_indices_tensor.like(data_type="UINT32"),
        out_of_bounds_input_value=oob,
    )
    return S.Case(desc, (x, rois, batch.astype(np.uint32)))


def _forward_convolution(types=F2):
    def fits(case):
        return all(s >= 1 for s in conv_output_sizes(case.desc))

    strategy = st.sampled_from(types).flatmap(
        lambda t: conv_cases(type_name=t, fused=False, direction="FORWARD")
    )
    return strategy.filter(fits)


def _pooling(cls, types=F2, style=None):
    return pooling_cases(classes=(cls,), types=types, max_elements=96, style=style)


PAIRS = (
    Pair("ACTIVATION_RELU", relu_cases, _relu_backward, {"exact": True}),
    Pair(
        "ELEMENT_WISE_CLIP",
        lambda: S.clip_cases(dml.ElementWiseClipOperatorDesc, types=F2, scale_bias=False),
        _clip_backward,
        {"exact": True},
    ),
    Pair(
        "ELEMENT_WISE_CLIP1",
        lambda: S.clip_cases(dml.ElementWiseClip1OperatorDesc, types=F2, scale_bias=False),
        _clip_backward,
        {"exact": True},
    ),
    Pair(
        "AVERAGE_POOLING",
        lambda: _pooling(dml.AveragePoolingOperatorDesc),
        _average_pooling_backward,
        {"exact": False, "rtol": 1e-6, "atol": 1e-6},
    ),
    Pair(
        "MAX_POOLING",
        _max_pooling_2d,
        _max_pooling_backward,
        # Where windows overlap, an element sums the gradients of every window whose maximum it
        # is; the CPU adds them in one fixed order in both, a GPU scatter-add in any order.
        {"exact": True} if S.ON_CPU else {"exact": False, "rtol": 1e-6, "atol": 1e-6},
    ),
    Pair(
        "SLICE1",
        lambda: slice_cases(cls=dml.Slice1OperatorDesc, types=F2),
        _slice_backward,
        {"exact": True},
    ),
    Pair(
        "RESAMPLE1",
        lambda: resample_cases(cls=dml.Resample1OperatorDesc, types=F2, max_elements=96).map(
            _as_4d
        ),
        _resample_backward,
        {"exact": False, "rtol": 1e-6, "atol": 1e-6},
    ),
    Pair(
        "RESAMPLE2",
        lambda: resample_cases(cls=dml.Resample2OperatorDesc, types=F2, max_elements=96),
        _resample_backward,
        {"exact": False, "rtol": 1e-6, "atol": 1e-6},
    ),
    Pair(
        "LOCAL_RESPONSE_NORMALIZATION",
        lrn_cases,
        _lrn_backward,
        {"exact": False, "rtol": 1e-6, "atol": 1e-6},
    ),
    Pair(
        "BATCH_NORMALIZATION",
        batch_norm_cases,
        _batch_norm_backward,
        {"exact": False, "rtol": 1e-6, "atol": 1e-6},
    ),
    Pair(
        "BATCH_NORMALIZATION_TRAINING",
        batch_norm_training_cases,
        _batch_norm_training_backward,
        {"exact": False, "rtol": 2e-4, "atol": 2e-5},
    ),
    Pair(
        "ROI_ALIGN1",
        lambda: align_cases(cls=dml.RoiAlign1OperatorDesc, types=F2).map(_align_for_gradients),
        _roi_align_backward,
        {"exact": False, "rtol": 1e-6, "atol": 1e-6},
    ),
    Pair(
        "CONVOLUTION",
        _forward_convolution,
        _convolution_backward,
        {"exact": False, "rtol": 1e-5, "atol": 1e-5},
    ),
)
PAIR_IDS = [p.name for p in PAIRS]
