"""Ops whose output shape depends on values computed at run time (NonZero, Compress, Unique,
NonMaxSuppression): the session computes that size before the run with a program of the model
cut at the node, then runs the program for that size (cached per size). Expected values come
from ONNX's reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import dml_jax
from dml_jax.onnx import InferenceSession

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _model(nodes, inputs, outputs, opset=13):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _same(model, feed, session=None):
    session = session or InferenceSession(model)
    got = session.run(None, feed)
    want = ReferenceEvaluator(model).run(None, feed)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_allclose(g, w, rtol=1e-6)
    return session


def test_nonzero_of_a_computed_value_per_count():
    # NonZero(Relu(x) > 0.5) then Gather: the count changes from run to run.
    model = _model(
        [
            helper.make_node("Relu", ["x"], ["r"]),
            helper.make_node("Greater", ["r", "half"], ["mask"]),
            helper.make_node("NonZero", ["mask"], ["idx"]),
            helper.make_node("Transpose", ["idx"], ["idx_t"]),
            helper.make_node("GatherND", ["x", "idx_t"], ["y"]),
        ],
        [helper.make_tensor_value_info("x", F, [3, 4])],
        [
            helper.make_tensor_value_info("y", F, None),
            helper.make_tensor_value_info("idx", I64, None),
        ],
    )
    model.graph.initializer.append(helper.make_tensor("half", F, [], [0.5]))
    rng = np.random.default_rng(0)
    session = None
    counts = set()
    for _ in range(4):
        x = rng.uniform(-1, 1, (3, 4)).astype(np.float32)
        counts.add(int((x > 0.5).sum()))
        session = _same(model, {"x": x}, session)
    # The same count again reuses its program: no new import.
    before = len(session._programs)
    x = np.full((3, 4), 0.75, np.float32)
    x[0, 0] = -1
    _same(model, {"x": x}, session)
    _same(model, {"x": x * 2}, session)
    assert len(session._programs) == before + 1
    assert "NonZero" in session.explain() and "jax: JAX:NonZero" in session.explain()


def test_nonzero_with_no_true_element_is_an_empty_result():
    model = _model(
        [helper.make_node("NonZero", ["x"], ["idx"])],
        [helper.make_tensor_value_info("x", F, [2, 3])],
        [helper.make_tensor_value_info("idx", I64, None)],
    )
    (got,) = InferenceSession(model).run(None, {"x": np.zeros((2, 3), np.float32)})
    assert got.shape == (2, 0) and got.dtype == np.int64


def test_compress_and_unique_of_computed_values():
    model = _model(
        [
            helper.make_node("Greater", ["x", "zero"], ["keep"]),
            helper.make_node("Compress", ["x", "keep"], ["kept"], axis=0),
            helper.make_node("Floor", ["kept"], ["f"]),
            helper.make_node("Unique", ["f"], ["u", "first", "inverse", "counts"], sorted=0),
        ],
        [helper.make_tensor_value_info("x", F, [12])],
        [helper.make_tensor_value_info(n, t, None) for n, t in
         (("kept", F), ("u", F), ("first", I64), ("inverse", I64), ("counts", I64))],
    )  # fmt: skip
    model.graph.initializer.append(helper.make_tensor("zero", F, [], [0.0]))
    rng = np.random.default_rng(1)
    session = None
    for _ in range(3):
        x = rng.uniform(-3, 3, 12).astype(np.float32)
        session = _same(model, {"x": x}, session)


def test_unique_along_an_axis_sorted_and_not():
    x = np.array([[1, 0, 0], [1, 0, 0], [2, 3, 4], [0, 1, 2], [2, 3, 4]], np.float32)
    for sort in (0, 1):
        model = _model(
            [helper.make_node("Unique", ["x"], ["u", "i", "v", "c"], axis=0, sorted=sort)],
            [helper.make_tensor_value_info("x", F, [5, 3])],
            [helper.make_tensor_value_info(n, t, None)
             for n, t in (("u", F), ("i", I64), ("v", I64), ("c", I64))],
        )  # fmt: skip
        _same(model, {"x": x})


@pytest.mark.parametrize("center", [0, 1])
def test_non_max_suppression_of_computed_boxes(center):
    # Boxes that come out of an Add (not graph inputs): the size comes from the cut model.
    model = _model(
        [
            helper.make_node("Add", ["boxes_in", "shift"], ["boxes"]),
            helper.make_node(
                "NonMaxSuppression",
                ["boxes", "scores", "max_out", "iou", "score_min"],
                ["selected"],
                center_point_box=center,
            ),
        ],
        [
            helper.make_tensor_value_info("boxes_in", F, [2, 16, 4]),
            helper.make_tensor_value_info("scores", F, [2, 3, 16]),
        ],
        [helper.make_tensor_value_info("selected", I64, None)],
        opset=11,
    )
    model.graph.initializer.extend([
        helper.make_tensor("shift", F, [], [0.25]),
        helper.make_tensor("max_out", I64, [1], [4]),
        helper.make_tensor("iou", F, [1], [0.4]),
        helper.make_tensor("score_min", F, [1], [0.2]),
    ])  # fmt: skip
    rng = np.random.default_rng(2)
    session = None
    for _ in range(3):
        corners = rng.uniform(0, 4, (2, 16, 2))
        sizes = rng.uniform(0.5, 2, (2, 16, 2))
        boxes = np.concatenate([corners, corners + sizes], axis=2).astype(np.float32)
        if center:
            boxes = np.concatenate([corners + sizes / 2, sizes], axis=2).astype(np.float32)
        scores = rng.uniform(0, 1, (2, 3, 16)).astype(np.float32)
        session = _same(model, {"boxes_in": boxes, "scores": scores}, session)


def test_traced_functions_say_why_they_cannot_run():
    import jax

    model = _model(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("NonZero", ["r"], ["idx"])],
        [helper.make_tensor_value_info("x", F, [4])],
        [helper.make_tensor_value_info("idx", I64, None)],
    )
    session = InferenceSession(model)
    x = np.array([1, -1, 2, 0], np.float32)
    (eager,) = session.fn(x)  # concrete inputs: the size is computed first
    np.testing.assert_array_equal(eager, [[0, 2]])
    with pytest.raises(dml_jax.ValidationError, match=r"node 1 \(NonZero\).*run time"):
        jax.jit(session.fn)(x)
