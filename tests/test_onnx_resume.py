"""Segments that hand their values on (``dml_jax/onnx/resume.py``): where ``run`` computes a
run-time size with the program up to the node that needs it, the values that program computed
and the rest of the model reads are inputs of the next segment and of the final program,
which do not compute them again; the programs ``apply`` and the converters use stay whole."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from dml_jax.onnx import InferenceSession

F = TensorProto.FLOAT


def _model():
    """h = x W (the costly part); the rows of h with a positive first column (NonZero: a
    run-time count), summed; then the positive entries of that sum (a second count)."""
    w = np.random.default_rng(1).standard_normal((8, 6)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Gather", ["h", "zero"], ["first"], axis=1),
        helper.make_node("Greater", ["first", "zerof"], ["positive"]),
        helper.make_node("NonZero", ["positive"], ["rows2"]),
        helper.make_node("Squeeze", ["rows2", "zero1"], ["rows"]),
        helper.make_node("Gather", ["h", "rows"], ["picked"], axis=0),
        helper.make_node("ReduceSum", ["picked", "zero1"], ["total"], keepdims=0),
        helper.make_node("Greater", ["total", "zerof"], ["pos2"]),
        helper.make_node("NonZero", ["pos2"], ["cols2"]),
        helper.make_node("Squeeze", ["cols2", "zero1"], ["cols"]),
        helper.make_node("Gather", ["h", "cols"], ["out"], axis=1),
    ]
    inits = [
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array([0], np.int64), "zero1"),
        numpy_helper.from_array(np.array(0, np.float32), "zerof"),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", F, ["n", 8])],
        [helper.make_tensor_value_info("out", F, None),
         helper.make_tensor_value_info("total", F, None)], inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), w


def _want(x, w):
    h = x @ w
    total = h[h[:, 0] > 0].sum(axis=0)
    return h[:, total > 0], total


def test_segments_hand_their_values_on():
    model, w = _model()
    s = InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(0)
    for n in (5, 9, 9):
        x = rng.standard_normal((n, 8)).astype(np.float32)
        out, total = s.run(None, {"x": x})
        want_out, want_total = _want(x, w)
        np.testing.assert_allclose(out, want_out, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(total, want_total, rtol=1e-5, atol=1e-5)
    program, resumed = s._program_and_resumed([x])
    # the final program takes h (and the sums) from the segments and has no product of its own
    assert "h" in resumed and "h" in program.imported.input_names
    assert "GEMM" not in program.operators()
    assert dict(program.imported.onnx_nodes)["node 0 (MatMul)"] == "from a segment"
    # each segment computes what the one before it handed on no more: the product is in the
    # first segment's program alone
    segments = [need for need in s._size_needs.values() if need.program is not None]
    products = [("GEMM" in need.program.operators()) for need in segments]
    assert products.count(True) >= 1 and len(segments) >= 2
    second = [need for need in segments if "h" in need.program.imported.input_names]
    assert second and all("GEMM" not in need.program.operators() for need in second)
    # the same counts again: nothing compiled
    before = (len(s._programs), len(s._size_needs))
    s.run(None, {"x": x})
    assert (len(s._programs), len(s._size_needs)) == before


def test_whole_programs_where_nothing_is_handed_on():
    """``_program_for`` (``apply``, the model writer) gives a program of the model's inputs
    alone, computing every value itself, with the same outputs."""
    model, w = _model()
    s = InferenceSession(model.SerializeToString())
    x = np.random.default_rng(3).standard_normal((7, 8)).astype(np.float32)
    program = s._program_for([x])
    assert program.imported.input_names == ("x",)
    assert "GEMM" in program.operators()
    out = program.apply(s.params, x)
    want_out, want_total = _want(x, w)
    np.testing.assert_allclose(np.asarray(out[0]), want_out, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(out[1]), want_total, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(s.run(None, {"x": x})[0], want_out, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["yolo", "faster_rcnn"])
def test_detectors_compute_their_backbone_once(name):
    """A detector's segments (its NonZero, TopK counts and NonMaxSuppression selections): the
    final program takes the backbone's features from them and runs no convolution."""
    from pathlib import Path

    path = Path(__file__).resolve().parent / "data" / "detection" / f"{name}.onnx"
    s = InferenceSession(str(path))
    image = np.random.default_rng(0).random((3, 96, 96), dtype=np.float32)
    s.run(None, {s.get_inputs()[0].name: image})
    program, resumed = s._program_and_resumed([image])
    assert resumed
    assert "CONVOLUTION" not in program.operators()
    assert "CONVOLUTION" in s._program_for([image]).operators()
