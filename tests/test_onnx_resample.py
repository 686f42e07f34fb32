"""ONNX's own backend node tests of Resize and Upsample, mapped onto DirectML's resampling
operators the way ONNX-on-DirectML does:

- Resize -> RESAMPLE2 (RESAMPLE3 with ``antialias``). ONNX maps output coordinates back,
  ``x = f(o)``; each coordinate_transformation_mode is one choice of Scales and pixel offsets in
  DirectML's ``x = (o - OutputPixelOffset) / Scale - InputPixelOffset``:
  half_pixel (Scale, 0.5, -0.5); half_pixel_symmetric (its centring shift folded into the input
  offset); pytorch_half_pixel (half_pixel, or x = 0 for an output of one element); align_corners
  (Scale (Scale * in - 1) / (in - 1), ONNX's unrounded output length, offsets 0; x = 0 for one
  element); asymmetric (Scale, 0, 0);
  tf_half_pixel_for_nn (Scale, 0, -0.5); tf_crop_and_resize (the ROI start in the input offset,
  the ROI extent in the scale) when no output reads outside the input (DirectML clamps instead of
  writing extrapolation_value).
- nearest_mode -> RoundingDirection with a half-element shift of the input offset:
  round_prefer_floor is ceil(x - 0.5) (INCREASING, +0.5), round_prefer_ceil floor(x + 0.5)
  (DECREASING, -0.5), floor DECREASING, ceil INCREASING.
- Scales come from ``scales`` (or ``sizes`` / input sizes, with keep_aspect_ratio_policy), on
  ``axes`` or every dimension; OutputTensor takes the expected output's shape.
- Upsample (opset 9, asymmetric) -> UPSAMPLE_2D for integer scales of the last two dimensions
  of a 4-D nearest case, else RESAMPLE1 with offsets 0 (floor for nearest: input offset +0.5
  under RESAMPLE1's halves-round-up rule).

Skipped with the reason: cubic interpolation and exclude_outside (DirectML has neither) and
crop-and-resize cases that read outside the input. The data comes from the ``onnx`` package's
test-case generators (skipped without it); every mapped ONNX operator passes at least one case.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from onnx_cases import (
    assert_every_op_type_passes,
    assert_outputs,
    case_ids,
    dml_type,
    node_cases,
    run_or_skip,
)
from onnx_cases import attrs as onnx_attrs

import dml_jax as dml

onnx = pytest.importorskip("onnx")

MAPPED = {"Resize", "Upsample"}
CASES = node_cases({"Resize": "resize", "Upsample": "upsample"})
ROUNDING = {  # nearest_mode -> (RoundingDirection, shift of InputPixelOffsets)
    "round_prefer_floor": ("INCREASING", 0.5),
    "round_prefer_ceil": ("DECREASING", -0.5),
    "floor": ("DECREASING", 0.0),
    "ceil": ("INCREASING", 0.0),
}


def _attrs(node) -> dict:
    return {k: v.decode() if isinstance(v, bytes) else v for k, v in onnx_attrs(node).items()}


def _named_inputs(node, inputs) -> dict:
    """ONNX input name -> array; an empty name is an absent optional input."""
    slots = ["X", "roi", "scales", "sizes"] if node.op_type == "Resize" else ["X", "scales"]
    arrays = iter(inputs)
    return {slot: next(arrays) for slot, name in zip(slots, node.input) if name}


def _scales(attrs: dict, named: dict, in_shape: tuple) -> list[float]:
    rank = len(in_shape)
    axes = [a % rank for a in attrs.get("axes", range(rank))]
    scales = [1.0] * rank
    given = named.get("scales")
    if given is not None and given.size:
        for a, s in zip(axes, given.tolist()):
            scales[a] = float(s)
        return scales
    sizes = [int(s) for s in named["sizes"]]
    ratios = [sizes[i] / in_shape[a] for i, a in enumerate(axes)]
    policy = attrs.get("keep_aspect_ratio_policy", "stretch")
    if policy != "stretch":
        common = min(ratios) if policy == "not_larger" else max(ratios)
        ratios = [common] * len(axes)
    for a, r in zip(axes, ratios):
        scales[a] = float(r)
    return scales


def _geometry(attrs: dict, named: dict, in_shape: tuple, out_shape: tuple):
    """(Scales, InputPixelOffsets, OutputPixelOffsets) for the coordinate mode."""
    mode = attrs.get("coordinate_transformation_mode", "half_pixel")
    scales = _scales(attrs, named, in_shape)
    rank = len(in_shape)
    axes = [a % rank for a in attrs.get("axes", range(rank))]
    roi = named.get("roi")
    s_out, i_off, o_off = [], [], []
    for d, (n_in, n_out, s) in enumerate(zip(in_shape, out_shape, scales)):
        if mode == "half_pixel":
            scale, a, b = s, 0.5, -0.5
        elif mode == "half_pixel_symmetric":
            shift = (n_in / 2) * (1 - n_out / (s * n_in))
            scale, a, b = s, 0.5 - shift, -0.5
        elif mode == "pytorch_half_pixel":
            scale, a, b = (s, 0.0, 0.0) if n_out == 1 else (s, 0.5, -0.5)
        elif mode == "align_corners":
            # ONNX divides by the unrounded output length, Scale * InputSize.
            width = s * n_in
            if width == 1 or n_in == 1:
                scale, a, b = 1.0, 0.0, 0.0
            else:
                scale, a, b = (width - 1) / (n_in - 1), 0.0, 0.0
        elif mode == "asymmetric":
            scale, a, b = s, 0.0, 0.0
        elif mode == "tf_half_pixel_for_nn":
            scale, a, b = s, 0.0, -0.5
        elif mode == "tf_crop_and_resize":
            k = len(axes)
            start, end = 0.0, 1.0
            if d in axes:
                j = axes.index(d)
                start, end = float(roi[j]), float(roi[j + k])
            if n_in == 1 or n_out == 1:
                centre = 0.5 * (start + end) * (n_in - 1)
                scale, a, b = 1.0, -centre, 0.0
            else:
                scale, a, b = (n_out - 1) / ((end - start) * (n_in - 1)), -start * (n_in - 1), 0.0
            x = (np.arange(n_out) - b) / scale - a
            if x.min() < 0 or x.max() > n_in - 1:
                pytest.skip(
                    "tf_crop_and_resize reads outside the input, where ONNX writes "
                    "extrapolation_value and DirectML clamps to the edge"
                )
        else:
            pytest.skip(f"coordinate_transformation_mode {mode!r} has no DirectML mapping")
        s_out.append(scale)
        i_off.append(a)
        o_off.append(b)
    return s_out, i_off, o_off


def _desc(node, inputs, out_shape):
    named = _named_inputs(node, inputs)
    x = named["X"]
    name = dml_type(x.dtype)
    attrs = _attrs(node)
    mode = attrs.get("mode", "nearest")
    if mode == "cubic":
        pytest.skip("DirectML has no cubic interpolation (nearest neighbour and linear only)")
    if attrs.get("exclude_outside", 0):
        pytest.skip("DirectML repeats the edge elements; exclude_outside has no equivalent")
    in_desc, out_desc = dml.TensorDesc(name, list(x.shape)), dml.TensorDesc(name, list(out_shape))
    interpolation = "NEAREST_NEIGHBOR" if mode == "nearest" else "LINEAR"
    if node.op_type == "Upsample":
        scales = [float(s) for s in named["scales"].tolist()]
        integral = all(s == int(s) for s in scales[-2:])
        if mode == "nearest" and x.ndim == 4 and scales[:2] == [1.0, 1.0] and integral:
            size = dml.Size2D(int(scales[3]), int(scales[2]))
            return dml.Upsample2DOperatorDesc(in_desc, out_desc, size, interpolation)
        shift = 0.5 if mode == "nearest" else 0.0  # floor(x) under floor(x + 0.5)
        return dml.Resample1OperatorDesc(
            in_desc, out_desc, interpolation, scales, [shift] * x.ndim, [0.0] * x.ndim
        )
    scales, in_offsets, out_offsets = _geometry(attrs, named, x.shape, out_shape)
    rounding, shift = ROUNDING[attrs.get("nearest_mode", "round_prefer_floor")]
    if interpolation == "LINEAR":
        rounding, shift = "DECREASING", 0.0
    in_offsets = [o + shift for o in in_offsets]
    if attrs.get("antialias", 0):
        return dml.Resample3OperatorDesc(
            in_desc, out_desc, interpolation, rounding, scales, in_offsets, out_offsets, True
        )
    return dml.Resample2OperatorDesc(
        in_desc, out_desc, interpolation, rounding, scales, in_offsets, out_offsets
    )


def _resize(node, inputs, out_shape):
    return run_or_skip(_desc(node, inputs, out_shape), inputs[0])


@functools.cache
def _result(index: int) -> np.ndarray:
    case = CASES[index]
    return _resize(case.node, list(case.inputs), case.outputs[0].shape)


def _check(index: int) -> None:
    assert_outputs(_result(index), CASES[index].outputs[:1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("index", range(len(CASES)), ids=case_ids(CASES))
def test_onnx_node(index):
    _check(index)


def test_every_mapped_operator_has_a_passing_case():
    assert_every_op_type_passes(CASES, _check, MAPPED)


def test_nearest_modes_round_as_onnx_defines_them():
    """Each nearest_mode on coordinates with exact halves (asymmetric, scale 2: x = o / 2)."""
    x = np.arange(4, dtype=np.float32).reshape(1, 1, 1, 4)
    node = onnx.helper.make_node("Resize", ["X", "", "scales"], ["Y"], mode="nearest")
    want = {  # x = 0, 0.5, 1, ..., 3.5
        "round_prefer_floor": [0, 0, 1, 1, 2, 2, 3, 3],
        "round_prefer_ceil": [0, 1, 1, 2, 2, 3, 3, 3],
        "floor": [0, 0, 1, 1, 2, 2, 3, 3],
        "ceil": [0, 1, 1, 2, 2, 3, 3, 3],
    }
    for nearest_mode, expected in want.items():
        node.ClearField("attribute")
        node.attribute.extend(
            [
                onnx.helper.make_attribute("mode", "nearest"),
                onnx.helper.make_attribute("nearest_mode", nearest_mode),
                onnx.helper.make_attribute("coordinate_transformation_mode", "asymmetric"),
            ]
        )
        got = _resize(node, [x, np.array([1, 1, 1, 2], np.float32)], (1, 1, 1, 8))
        np.testing.assert_array_equal(got.ravel(), expected, err_msg=nearest_mode)
