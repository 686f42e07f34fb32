"""RoiAlign and MaxRoiPool through ``dml_jax.onnx.InferenceSession``, for what ONNX's node tests
(``test_onnx_backend.py``) leave out: adaptive sampling (sampling_ratio 0), max mode where
DirectML's MAX and ONNX's agree (every sample on a pixel centre, data >= 0), output_half_pixel's
one-pixel minimum region (rois given at run time and as an initializer), opset 10 (whose only
behaviour is output_half_pixel), and MaxRoiPool, which has no node test. Expected values come
from ONNX's reference evaluator or ONNX Runtime's CPU provider.
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from dml_jax.onnx import InferenceSession, import_graph


def _fixed_image() -> np.ndarray:
    """The image every RoiAlign case samples: the same array in every test and every run."""
    return np.random.default_rng(7).uniform(0.0, 1.0, (2, 3, 7, 6)).astype(np.float32)


X = _fixed_image()


def _roi_align(rois, batch, opset=16, constant_rois=False, **attributes):
    """A RoiAlign model over X's shape and its feeds (rois an initializer when constant)."""
    rois = np.asarray(rois, np.float32)
    batch = np.asarray(batch, np.int64)
    node = helper.make_node("RoiAlign", ["X", "rois", "batch_indices"], ["Y"], **attributes)
    inputs = [
        helper.make_tensor_value_info("X", TensorProto.FLOAT, X.shape),
        helper.make_tensor_value_info("batch_indices", TensorProto.INT64, batch.shape),
    ]
    inits = []
    feeds = {"X": X, "batch_indices": batch}
    if constant_rois:
        inits.append(numpy_helper.from_array(rois, "rois"))
    else:
        inputs.append(helper.make_tensor_value_info("rois", TensorProto.FLOAT, rois.shape))
        feeds["rois"] = rois
    graph = helper.make_graph(
        [node], "roialign", inputs, [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
        inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10  # what onnxruntime 1.30 (the GPU machine) reads
    return model, feeds


def _check(model, feeds, want=None):
    (got,) = InferenceSession(model).run(None, feeds)
    if want is None:
        (want,) = ReferenceEvaluator(model).run(None, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_adaptive_sampling_half_pixel():
    rois = [[0.5, 1.0, 5.5, 6.0], [2.0, 0.25, 4.0, 3.5], [-1.0, -1.0, 7.0, 8.0]]
    model, feeds = _roi_align(rois, [0, 1, 1], output_height=3, output_width=2, sampling_ratio=0)
    _check(model, feeds)


def test_max_mode_on_pixel_centres():
    # Regions 2 * output wide with 2 samples: every sample lands on a pixel centre, where
    # DirectML's largest sample and ONNX's largest weighted corner agree.
    rois = [[0.0, 0.0, 6.0, 4.0], [0.0, 2.0, 6.0, 6.0]]
    model, feeds = _roi_align(
        rois,
        [1, 0],
        mode="max",
        output_height=2,
        output_width=3,
        sampling_ratio=2,
        coordinate_transformation_mode="half_pixel",
    )
    _check(model, feeds)


# Regions narrower than a pixel after spatial_scale: output_half_pixel widens them to one.
SMALL = [[1.0, 1.0, 1.5, 4.0], [2.0, 3.0, 2.25, 3.1], [0.0, 0.0, 6.0, 5.0]]


@pytest.mark.parametrize("constant_rois", [False, True])
def test_output_half_pixel_widens_small_regions(constant_rois):
    model, feeds = _roi_align(
        SMALL,
        [0, 1, 0],
        constant_rois=constant_rois,
        output_height=2,
        output_width=2,
        sampling_ratio=2,
        spatial_scale=1.5,
        coordinate_transformation_mode="output_half_pixel",
    )
    _check(model, feeds)
    shapes = {"X": X.shape, "batch_indices": (3,)} | ({} if constant_rois else {"rois": (3, 4)})
    graph = import_graph(model, input_shapes=shapes).graph
    ops = {n.operator_type for n in graph.nodes}
    assert ("DML_OPERATOR_JOIN" in ops) != constant_rois  # constants are widened at import


def test_opset_10_is_output_half_pixel():
    ort = pytest.importorskip("onnxruntime")
    model, feeds = _roi_align(SMALL, [1, 0, 1], opset=10, output_height=3, output_width=2,
                              sampling_ratio=0, spatial_scale=0.75)  # fmt: skip
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    _check(model, feeds, session.run(None, feeds)[0])


def test_max_roi_pool(rng):
    ort = pytest.importorskip("onnxruntime")
    x = rng.normal(size=(2, 3, 8, 9)).astype(np.float32)
    rois = np.array(
        [[0, 0, 0, 8, 7], [1, 2.4, 1.6, 6.5, 5.2], [1, 3, 3, 3, 3], [0, 10, 2, 30, 12]],
        np.float32,
    )
    node = helper.make_node("MaxRoiPool", ["x", "rois"], ["y"], pooled_shape=[3, 2],
                            spatial_scale=0.5)  # fmt: skip
    graph = helper.make_graph(
        [node],
        "maxroipool",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape),
            helper.make_tensor_value_info("rois", TensorProto.FLOAT, rois.shape),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    feeds = {"x": x, "rois": rois}
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    _check(model, feeds, session.run(None, feeds)[0])
