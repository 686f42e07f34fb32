"""Resize and Upsample through ``InferenceSession``: what ONNX's node tests (all Resize-19 and
Upsample-9) do not reach.

- every nearest_mode at exact halves, where the rounding direction and the half-element shift of
  DirectML's input offset decide;
- the versions before coordinate_transformation_mode (Upsample-7's scales attribute, Upsample-9,
  Resize-10): asymmetric coordinates, nearest flooring on enlarged axes and taking the ceiling on
  shrunk ones, which one node doing both splits into two RESAMPLE2 nodes;
- Resize-11 and -13 inputs (sizes with an empty scales, no roi), a 5-D tensor (DirectML resamples
  at most 4 dimensions: untouched leading axes are merged), tf_crop_and_resize from scales with
  extrapolation, integer data;
- what DirectML cannot express, rejected with the reason instead of computed differently.

Expected values come from ONNX's reference evaluator where it implements the version, else from
the definition written out in NumPy.
"""

from __future__ import annotations

import numpy as np
import pytest

import dml_jax as dml

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from dml_jax.onnx import InferenceSession


def _model(node, x_shape, opset, inits=(), elem=TensorProto.FLOAT):
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("X", elem, x_shape)],
        [helper.make_tensor_value_info("Y", elem, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _run(model, x):
    session = InferenceSession(model)
    (y,) = session.run(None, {"X": x})
    return y, session


def _operators(session, x) -> list[str]:
    nodes = session.program([x.shape]).imported.graph.nodes
    return [n.operator_type.removeprefix("DML_OPERATOR_") for n in nodes]


def _resize(opset=19, inputs=("X", "", "scales"), **attrs):
    return helper.make_node("Resize", list(inputs), ["Y"], **attrs)


def test_nearest_modes_round_exact_halves_as_onnx_defines_them():
    """asymmetric, scale 2: x = o / 2 = 0, 0.5, 1, ..., 3.5."""
    x = np.arange(4, dtype=np.float32).reshape(1, 1, 1, 4)
    scales = np.array([1, 1, 1, 2], np.float32)
    want = {
        "round_prefer_floor": [0, 0, 1, 1, 2, 2, 3, 3],
        "round_prefer_ceil": [0, 1, 1, 2, 2, 3, 3, 3],
        "floor": [0, 0, 1, 1, 2, 2, 3, 3],
        "ceil": [0, 1, 1, 2, 2, 3, 3, 3],
    }
    for nearest_mode, expected in want.items():
        node = _resize(
            mode="nearest", nearest_mode=nearest_mode, coordinate_transformation_mode="asymmetric"
        )
        y, _ = _run(_model(node, x.shape, 19, [("scales", scales)]), x)
        np.testing.assert_array_equal(y.ravel(), expected, err_msg=nearest_mode)


def _asymmetric_nearest(x, scales):
    """Upsample / Resize-10 nearest: x = o / scale, floored when enlarging, ceiling when
    shrinking, clamped to the axis."""
    for axis, s in enumerate(scales):
        n = x.shape[axis]
        o = np.arange(int(np.floor(n * s)))
        src = np.floor(o / s) if s >= 1 else np.ceil(o / s)
        x = np.take(x, np.clip(src, 0, n - 1).astype(int), axis=axis)
    return x


def _asymmetric_linear(x, scales):
    for axis, s in enumerate(scales):
        n = x.shape[axis]
        c = np.arange(int(np.floor(n * s))) / s
        lo = np.floor(c)
        frac = (c - lo).reshape([-1 if i == axis else 1 for i in range(x.ndim)])
        a = np.take(x, np.clip(lo, 0, n - 1).astype(int), axis=axis)
        b = np.take(x, np.clip(lo + 1, 0, n - 1).astype(int), axis=axis)
        x = a * (1 - frac) + b * frac
    return x


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample_7_scales_attribute(mode, rng):
    x = rng.normal(size=(1, 2, 3, 4)).astype(np.float32)
    scales = [1.0, 1.0, 2.0, 1.5]
    node = helper.make_node("Upsample", ["X"], ["Y"], mode=mode, scales=scales)
    y, _ = _run(_model(node, x.shape, 7), x)
    ref = _asymmetric_nearest if mode == "nearest" else _asymmetric_linear
    np.testing.assert_allclose(y, ref(x, scales), rtol=1e-6, atol=1e-6)


def test_upsample_9_linear_is_asymmetric(rng):
    """Before Resize-11 the coordinates are x = o / scale (not half_pixel)."""
    x = rng.normal(size=(2, 5)).astype(np.float32)
    scales = np.array([1.0, 3.0], np.float32)
    node = helper.make_node("Upsample", ["X", "scales"], ["Y"], mode="linear")
    y, session = _run(_model(node, x.shape, 9, [("scales", scales)]), x)
    np.testing.assert_allclose(y, _asymmetric_linear(x, scales), rtol=1e-6, atol=1e-6)
    assert _operators(session, x) == ["ELEMENT_WISE_IDENTITY", "RESAMPLE2"]


def test_resize_10_nearest_enlarging_and_shrinking_takes_two_nodes():
    """Floor on the enlarged axis, ceiling on the shrunk one: DirectML has one rounding
    direction per operator, so each direction is its own RESAMPLE2."""
    x = np.arange(30, dtype=np.float32).reshape(1, 1, 5, 6)
    scales = np.array([1, 1, 0.6, 1.5], np.float32)
    node = helper.make_node("Resize", ["X", "scales"], ["Y"], mode="nearest")
    y, session = _run(_model(node, x.shape, 10, [("scales", scales)]), x)
    np.testing.assert_array_equal(y, _asymmetric_nearest(x, scales.astype(np.float64)))
    assert _operators(session, x).count("RESAMPLE2") == 2


def _check_reference(model, x, **tolerance):
    y, session = _run(model, x)
    (want,) = ReferenceEvaluator(model).run(None, {"X": x})
    assert y.shape == want.shape
    np.testing.assert_allclose(y, want, **(tolerance or {"rtol": 1e-5, "atol": 1e-5}))
    return session


def test_resize_11_sizes_with_an_empty_scales(rng):
    x = rng.normal(size=(1, 2, 4, 6)).astype(np.float32)
    node = _resize(11, ["X", "roi", "scales", "sizes"], mode="linear")
    inits = [
        ("roi", np.zeros(0, np.float32)),
        ("scales", np.zeros(0, np.float32)),
        ("sizes", np.array([1, 2, 7, 3], np.int64)),
    ]
    _check_reference(_model(node, x.shape, 11, inits), x)


def test_resize_13_scales_without_roi(rng):
    x = rng.normal(size=(1, 1, 5, 5)).astype(np.float32)
    node = _resize(13, mode="nearest", coordinate_transformation_mode="align_corners")
    _check_reference(_model(node, x.shape, 13, [("scales", np.float32([1, 1, 1.6, 0.8]))]), x)


def test_five_dimensions_merge_untouched_axes(rng):
    """{N, C, D, H, W} resized on D, H, W: N and C become one axis of a 4-D RESAMPLE2."""
    x = rng.normal(size=(2, 3, 3, 4, 5)).astype(np.float32)
    node = _resize(mode="linear")
    session = _check_reference(
        _model(node, x.shape, 19, [("scales", np.float32([1, 1, 2, 0.5, 1.4]))]), x
    )
    nodes = session.program([x.shape]).imported.graph.nodes
    (resample,) = [n for n in nodes if "RESAMPLE" in n.operator_type]
    assert resample.input_tensor.sizes == (6, 3, 4, 5)


def test_crop_and_resize_from_scales_writes_the_extrapolation_value(rng):
    """Output length floor(length * roi extent * scale); outside the input: the value."""
    x = rng.normal(size=(1, 1, 4, 4)).astype(np.float32)
    roi = np.float32([0, 0, -0.25, 0.5, 1, 1, 0.75, 1.25])
    node = _resize(
        inputs=["X", "roi", "scales"],
        mode="linear",
        coordinate_transformation_mode="tf_crop_and_resize",
        extrapolation_value=-7.0,
    )
    model = _model(node, x.shape, 19, [("roi", roi), ("scales", np.float32([1, 1, 2, 2]))])
    y, session = _run(model, x)
    assert y.shape == (1, 1, 8, 6)
    # The ONNX definition along each axis, -7 where either coordinate leaves [0, 3].
    want = np.empty_like(y)
    for i in range(8):
        for j in range(6):
            r = i * (1.0 * 3) / (8 - 1) - 0.25 * 3
            c = j * (0.75 * 3) / (6 - 1) + 0.5 * 3
            if not (0 <= r <= 3 and 0 <= c <= 3):
                want[0, 0, i, j] = -7
                continue
            r0, c0 = int(np.floor(r)), int(np.floor(c))
            fr, fc = r - r0, c - c0
            r1, c1 = min(r0 + 1, 3), min(c0 + 1, 3)
            top = x[0, 0, r0, c0] * (1 - fc) + x[0, 0, r0, c1] * fc
            bottom = x[0, 0, r1, c0] * (1 - fc) + x[0, 0, r1, c1] * fc
            want[0, 0, i, j] = top * (1 - fr) + bottom * fr
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    assert _operators(session, x)[-1] == "ELEMENT_WISE_IF"


def test_uint8_linear_rounds_to_nearest(rng):
    x = rng.integers(0, 256, size=(1, 1, 3, 3), dtype=np.uint8)
    node = _resize(mode="linear")
    model = _model(node, x.shape, 19, [("scales", np.float32([1, 1, 1.5, 2]))], TensorProto.UINT8)
    y, _ = _run(model, x)
    (want,) = ReferenceEvaluator(model).run(None, {"X": x})
    assert y.dtype == np.uint8
    assert np.abs(y.astype(int) - want.astype(int)).max() <= 1  # halves may round either way


@pytest.mark.parametrize(
    ("attrs", "message"),
    [
        (
            {"mode": "linear", "antialias": 1, "coordinate_transformation_mode": "align_corners"},
            "antialias",
        ),
        ({"mode": "linear", "antialias": 1, "exclude_outside": 1}, "exclude_outside"),
    ],
)
def test_what_directml_cannot_express_is_rejected(attrs, message):
    x = np.ones((1, 1, 4, 4), np.float32)
    model = _model(_resize(**attrs), x.shape, 19, [("scales", np.float32([1, 1, 0.5, 0.5]))])
    with pytest.raises(dml.ValidationError, match=message):
        _run(model, x)


def test_a_flipped_crop_is_rejected():
    x = np.ones((1, 4), np.float32)
    node = _resize(
        inputs=["X", "roi", "", "sizes"], coordinate_transformation_mode="tf_crop_and_resize"
    )
    inits = [("roi", np.float32([0, 0.8, 1, 0.2])), ("sizes", np.int64([1, 3]))]
    with pytest.raises(dml.ValidationError, match="precedes its start"):
        _run(_model(node, x.shape, 19, inits), x)


def test_an_empty_input_resized_by_sizes_is_refused():
    """No scale makes elements of none: a ValidationError naming the node and the axis (it was
    a ZeroDivisionError passed on; a mutated Faster R-CNN export found it), as onnxruntime
    refuses it."""
    x = np.zeros((1, 1, 0, 4), np.float32)
    node = _resize(inputs=["X", "", "", "sizes"])
    model = _model(node, x.shape, 19, [("sizes", np.int64([1, 1, 3, 3]))])
    with pytest.raises(dml.ValidationError, match=r"node 0 \(Resize\).*empty on axis 2") as e:
        _run(model, x)
    assert "ZeroDivisionError" not in str(e.value)
