"""A Loop run on the host (``converters/host_loop.py``): its body needs, at every iteration, a
size read from that iteration's values, computed from a model input too large to specialise on.
A Loop of three iterations over a 5,000-element input: iteration ``i`` resizes a 4 x 4 image
held by the input to ``data[i]`` x ``data[i]`` (as Mask R-CNN resizes a mask to a box),
appends its pixels to a loop-carried tensor that grows from empty, and sums them as a scan
output. Against onnxruntime, for two inputs giving different sizes; the
program holds the Loop as one JAX node on the host. (Mask R-CNN's mask pasting takes this form:
tests/test_onnx_detection.py.)"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper

from dml_jax.onnx import InferenceSession

LENGTH = 5000  # over the session's limit for inputs it specialises on


def _model(scan: str = "total") -> bytes:
    F, I64 = TensorProto.FLOAT, TensorProto.INT64
    body = helper.make_graph(
        [
            helper.make_node("Unsqueeze", ["i", "zero_axis"], ["at"]),
            helper.make_node("Gather", ["data", "at"], ["size_f"]),
            helper.make_node("Cast", ["size_f"], ["size"], to=I64),
            helper.make_node("Concat", ["ones", "size", "size"], ["sizes"], axis=0),
            helper.make_node("Slice", ["data", "sixteen_from", "sixteen_to"], ["first"]),
            helper.make_node("Reshape", ["first", "image_shape"], ["image"]),
            helper.make_node("Resize", ["image", "", "", "sizes"], ["resized"], mode="linear"),
            helper.make_node("Reshape", ["resized", "flat"], ["part"]),
            helper.make_node("Concat", ["grown", "part"], ["grown_out"], axis=0),
            helper.make_node("ReduceSum", ["part"], ["total"], keepdims=0),
            helper.make_node("Identity", ["cond"], ["cond_out"]),
        ],
        "body",
        [helper.make_tensor_value_info("i", I64, []),
         helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
         helper.make_tensor_value_info("grown", F, [0])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("grown_out", F, None),
         helper.make_tensor_value_info(scan, F, None)],
    )  # fmt: skip
    inits = [
        numpy_helper.from_array(np.array(3, np.int64), "trip"),
        numpy_helper.from_array(np.array(True), "go"),
        numpy_helper.from_array(np.zeros(0, np.float32), "empty"),
        numpy_helper.from_array(np.array([0], np.int64), "zero_axis"),
        numpy_helper.from_array(np.array([1, 1], np.int64), "ones"),
        numpy_helper.from_array(np.array([8], np.int64), "sixteen_from"),
        numpy_helper.from_array(np.array([24], np.int64), "sixteen_to"),
        numpy_helper.from_array(np.array([1, 1, 4, 4], np.int64), "image_shape"),
        numpy_helper.from_array(np.array([-1], np.int64), "flat"),
    ]
    loop = helper.make_node("Loop", ["trip", "go", "empty"], ["grown", "totals"], body=body)
    graph = helper.make_graph(
        [loop], "host_loop", [helper.make_tensor_value_info("data", F, [LENGTH])],
        [helper.make_tensor_value_info("grown", F, None),
         helper.make_tensor_value_info("totals", F, None)], inits,
    )  # fmt: skip
    opsets = [helper.make_opsetid("", 17)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=9).SerializeToString()


@pytest.mark.parametrize("sizes", [(3, 7, 2), (5, 1, 9)])
def test_loop_on_the_host_matches_onnxruntime(sizes):
    data = _model()
    x = np.random.default_rng(sum(sizes)).standard_normal(LENGTH).astype(np.float32)
    x[:3] = sizes
    s = InferenceSession(data)
    got = s.run(None, {"data": x})
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"data": x})
    assert got[0].shape == (sum(n * n for n in sizes),) and got[1].shape == (3,)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
    assert "Loop(on the host" in s.explain()


def test_scan_outputs_of_changing_shapes_are_refused():
    """The Loop on the host with each iteration's resized pixels as its scan output: their
    shapes differ from iteration to iteration, which no stacked output holds."""
    from dml_jax import ValidationError

    x = np.zeros(LENGTH, np.float32)
    x[:3] = (2, 3, 2)
    s = InferenceSession(_model(scan="part"))
    with pytest.raises(ValidationError, match="scan output 0 .* different shapes"):
        s.run(None, {"data": x})
