"""torchvision's detectors exported by PyTorch (tests/data/detection, written by its
make_detectors.py: Faster R-CNN, RetinaNet, SSD and Mask R-CNN heads and a YOLO-style head with
its NMS in the graph, over a small random backbone, one 96 x 96 image): their run-time control
flow (Loop, and If on a run-time condition: ``batched_nms``'s test for no boxes), data-dependent
sizes (NonZero, TopK over a changing count, NonMaxSuppression, RoiAlign over the proposals each
pyramid level gets, possibly none) run through ``InferenceSession`` and give onnxruntime's
boxes, scores and labels, row for row (the weights are scaled so that no two scores tie), and
Mask R-CNN's masks, pasted into the image by a Loop that runs on the host
(``converters/host_loop.py``: each iteration resizes a mask to its detection's box)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")

from dml_jax.onnx import InferenceSession

HERE = Path(__file__).resolve().parent / "data" / "detection"
MODELS = ("faster_rcnn", "retinanet", "ssd", "yolo", "mask_rcnn")


@pytest.mark.parametrize("name", MODELS)
def test_detector_matches_onnxruntime(name):
    path = str(HERE / f"{name}.onnx")
    image = np.random.default_rng(0).random((3, 96, 96), dtype=np.float32)
    s = InferenceSession(path)
    feed = {s.get_inputs()[0].name: image}
    names = [o.name for o in s.get_outputs()]
    got = dict(zip(names, s.run(None, feed)))
    want = dict(zip(names, ort.InferenceSession(path, providers=["CPUExecutionProvider"])
                    .run(None, feed)))  # fmt: skip
    scores = want["scores"]
    assert len(scores) >= 10 and len(np.unique(scores)) == len(scores)  # detections, no ties
    for key in ("boxes", "scores", "labels"):
        assert got[key].shape == want[key].shape and got[key].dtype == want[key].dtype, key
    np.testing.assert_array_equal(got["labels"], want["labels"])
    np.testing.assert_allclose(got["scores"], want["scores"], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(got["boxes"], want["boxes"], rtol=1e-4, atol=1e-3)
    if "masks" in want:
        assert got["masks"].shape == want["masks"].shape == (len(scores), 1, 96, 96)
        assert np.abs(want["masks"]).max() > 0.1  # masks pasted, not zeros
        np.testing.assert_allclose(got["masks"], want["masks"], rtol=1e-4, atol=1e-4)
        assert "Loop(on the host" in s.explain()


def test_a_second_image_reuses_or_respecialises():
    """Another image of the same size: new proposal counts per level, the same agreement."""
    path = str(HERE / "faster_rcnn.onnx")
    image = np.random.default_rng(7).random((3, 96, 96), dtype=np.float32)
    s = InferenceSession(path)
    feed = {s.get_inputs()[0].name: image}
    got = s.run(None, feed)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feed)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-3)


def test_roi_align_over_no_regions():
    """RoiAlign over zero regions (a pyramid level none of a detector's proposals fell on):
    an empty result of the right shape, as onnxruntime gives, not a DirectML size error."""
    from onnx import TensorProto, helper

    node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], output_height=3,
                            output_width=2, sampling_ratio=2, spatial_scale=0.5)  # fmt: skip
    graph = helper.make_graph(
        [node], "roi",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8]),
         helper.make_tensor_value_info("rois", TensorProto.FLOAT, ["n", 4]),
         helper.make_tensor_value_info("batch", TensorProto.INT64, ["n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )  # fmt: skip
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)]).SerializeToString()
    feed = {"x": np.random.default_rng(0).random((1, 4, 8, 8), dtype=np.float32),
            "rois": np.zeros((0, 4), np.float32), "batch": np.zeros((0,), np.int64)}  # fmt: skip
    (got,) = InferenceSession(data).run(None, feed)
    (want,) = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feed)
    assert got.shape == want.shape == (0, 4, 3, 2) and got.dtype == want.dtype
    feed["rois"], feed["batch"] = np.array([[0, 0, 6, 6]], np.float32), np.zeros(1, np.int64)
    (got,) = InferenceSession(data).run(None, feed)
    (want,) = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feed)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_the_same_image_again_compiles_nothing():
    """A second run with the counts of the first (the same image) looks every program up: the
    size probes too (NonMaxSuppression's count was compiled again at every run)."""
    import io
    import logging

    import jax

    s = InferenceSession(str(HERE / "yolo.onnx"))
    feed = {s.get_inputs()[0].name: np.random.default_rng(0).random((3, 96, 96), np.float32)}
    first = s.run(None, feed)
    log = io.StringIO()
    handler = logging.StreamHandler(log)
    logging.getLogger("jax").addHandler(handler)
    try:
        with jax.log_compiles():
            again = s.run(None, feed)

            def probe(a):  # the log sees compiles: this one
                return a + 1

            jax.jit(probe)(np.ones(3))
    finally:
        logging.getLogger("jax").removeHandler(handler)
    compiles = [line for line in log.getvalue().splitlines() if "ompil" in line]
    assert compiles and all("probe" in line for line in compiles), compiles
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
