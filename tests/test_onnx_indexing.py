"""The gather, scatter and one-hot converters (``dml_jax/onnx/converters/indexing.py``) through
``InferenceSession``, where ONNX's node tests leave gaps: negative indices read by DirectML
itself (no wrapping node), scatters with ``reduction`` (built from ONE_HOT, ELEMENT_WISE_IF and
REDUCE, as DirectML's scatters have none) with repeated and negative indices, OneHot with an
integer depth (the node tests feed a float one as a graph input), older opsets, and the ops
whose output shapes depend on values (folded when known, a named error otherwise).

Each model is built with ``onnx.helper`` and compared with ONNX Runtime's CPU provider (skipped
without onnxruntime).
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper

from dml_jax.onnx import InferenceSession

TYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int32): TensorProto.INT32,
         np.dtype(np.int64): TensorProto.INT64, np.dtype(np.bool_): TensorProto.BOOL,
         np.dtype(np.float16): TensorProto.FLOAT16}  # fmt: skip


def _model(node, feeds, opset, inits=(), outputs=("y",)):
    inputs = [helper.make_tensor_value_info(k, TYPES[v.dtype], v.shape) for k, v in feeds.items()]
    outs = [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs]
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in dict(inits).items()]
    graph = helper.make_graph([node], "g", inputs, outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def _ops(session, feeds) -> list[str]:
    """The DML operators of the session's program, without the identities inputs enter by."""
    program = session.program([np.shape(feeds[i.name]) for i in session.get_inputs()], feeds)
    return program.operators()


def _check(node, feeds, opset, inits=(), outputs=("y",)) -> list[str]:
    ort = pytest.importorskip("onnxruntime")
    model = _model(node, feeds, opset, inits, outputs)
    session = InferenceSession(model)
    got = session.run(None, feeds)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for g, w in zip(got, ref.run(None, feeds), strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)  # reductions sum in another order
    return _ops(session, feeds)


# --- gathers --------------------------------------------------------------------------------


@pytest.mark.parametrize("opset", [7, 11, 13])
def test_gather_negative_indices_need_no_wrapping_node(opset, rng):
    """DirectML's GATHER counts a negative signed index from the end, as ONNX does."""
    x = rng.normal(size=(4, 5, 3)).astype(np.float32)
    idx = np.asarray([[-1, 0], [-5, 4]], np.int64) if opset >= 11 else np.asarray([[3, 0]])
    node = helper.make_node("Gather", ["x", "i"], ["y"], axis=1)
    assert _check(node, {"x": x, "i": idx}, opset) == ["GATHER"]


def test_gather_scalar_index_and_int32_indices(rng):
    x = rng.integers(-5, 5, size=(6, 2)).astype(np.int64)
    node = helper.make_node("Gather", ["x", "i"], ["y"], axis=0)
    assert _check(node, {"x": x}, 13, {"i": np.asarray(-2, np.int32)}) == ["GATHER"]


def test_gather_elements_and_nd_with_batch_dims(rng):
    x = rng.normal(size=(2, 3, 4)).astype(np.float32)
    idx = np.asarray([[[0, -1], [2, 1], [-3, 0]], [[1, 1], [0, 2], [2, -1]]], np.int64)
    node = helper.make_node("GatherElements", ["x", "i"], ["y"], axis=-1)
    assert _check(node, {"x": x, "i": idx}, 13) == ["GATHER_ELEMENTS"]
    nd = np.asarray([[[1, 3], [-1, 0]], [[0, 0], [2, -4]]], np.int64)  # batch 2, pairs
    node = helper.make_node("GatherND", ["x", "i"], ["y"], batch_dims=1)
    assert _check(node, {"x": x, "i": nd}, 12) == ["GATHER_ND1"]


# --- scatters -------------------------------------------------------------------------------


@pytest.mark.parametrize("op_type, opset", [("Scatter", 9), ("ScatterElements", 11)])
def test_scatter_without_reduction(op_type, opset, rng):
    x = rng.normal(size=(3, 4)).astype(np.float32)
    idx = np.asarray([[2, 0, 1, 1]], np.int64)
    node = helper.make_node(op_type, ["x", "i", "u"], ["y"], axis=0)
    u = rng.normal(size=(1, 4)).astype(np.float32)
    assert _check(node, {"x": x, "i": idx, "u": u}, opset) == ["SCATTER"]


@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
def test_scatter_elements_reductions_with_repeats(reduction, rng):
    """Repeated and negative indices, and indices that cover only part of the data's other
    dimensions (the reduced updates are padded with the reduction's neutral value)."""
    x = rng.normal(size=(3, 4, 2)).astype(np.float32)
    idx = np.asarray([[[0], [3]], [[-1], [0]], [[3], [-4]]], np.int64)  # (3, 2, 1) along axis 1
    u = rng.normal(size=idx.shape).astype(np.float32)
    node = helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=1, reduction=reduction)
    ops = _check(node, {"x": x, "i": idx, "u": u}, 18)
    assert "ONE_HOT" in ops and "REDUCE" in ops and "SCATTER" not in ops


def test_scatter_elements_int_max_reduction(rng):
    x = rng.integers(-9, 9, size=(5,)).astype(np.int32)
    node = helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], reduction="max")
    inits = {"i": np.asarray([1, 1, -1, 2], np.int64), "u": np.asarray([7, -20, 3, 0], np.int32)}
    _check(node, {"x": x}, 18, inits)


@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
def test_scatter_nd_reductions_of_slices(reduction, rng):
    """Index tuples address rows of a 3-D tensor (k = 2 < rank): duplicates combine."""
    x = rng.normal(size=(3, 4, 5)).astype(np.float32)
    idx = np.asarray([[[0, 1], [2, -1]], [[0, 1], [-3, 1]]], np.int64)  # (2, 2, 2) tuples
    u = rng.normal(size=(2, 2, 5)).astype(np.float32)
    node = helper.make_node("ScatterND", ["x", "i", "u"], ["y"], reduction=reduction)
    ops = _check(node, {"x": x, "i": idx, "u": u}, 18)
    assert ops[:2] == ["FILL_VALUE_SEQUENCE", "GATHER_ND1"] and "SCATTER_ND" not in ops


def test_scatter_nd_without_reduction_and_with_empty_indices(rng):
    x = rng.normal(size=(4, 3)).astype(np.float32)
    node = helper.make_node("ScatterND", ["x", "i", "u"], ["y"])
    idx, u = np.asarray([[-1], [1]], np.int64), rng.normal(size=(2, 3)).astype(np.float32)
    assert _check(node, {"x": x, "i": idx, "u": u}, 11) == ["SCATTER_ND"]
    empty = {"i": np.zeros((0, 1), np.int64), "u": np.zeros((0, 3), np.float32)}
    assert _check(node, {"x": x}, 16, empty) == []  # nothing scattered: the data itself


# --- one-hot --------------------------------------------------------------------------------


def _one_hot(idx, depth: int, values, axis: int) -> np.ndarray:
    """NumPy's one-hot: a negative index counts from the end, one out of range is all off."""
    idx = np.trunc(np.asarray(idx)).astype(np.int64)
    idx = np.where(idx < 0, idx + depth, idx)
    hot = np.expand_dims(idx, axis) == np.arange(depth).reshape([-1] + [1] * (idx.ndim - axis))
    return np.where(hot, values[1], values[0]).astype(values.dtype)


@pytest.mark.parametrize("opset", [9, 11])
def test_one_hot_with_a_constant_depth(opset):
    idx = np.asarray([[0, 3], [-1, 7]], np.int64)
    if opset < 11:
        idx = np.abs(idx)  # OneHot-9 gives negative indices no meaning
    values = np.asarray([-2.0, 5.0], np.float32)
    node = helper.make_node("OneHot", ["i", "depth", "v"], ["y"], axis=1)
    model = _model(node, {"i": idx}, opset, {"depth": np.asarray(4, np.int64), "v": values})
    session = InferenceSession(model)
    (got,) = session.run(None, {"i": idx})
    np.testing.assert_array_equal(got, _one_hot(idx, 4, values, 1))
    assert _ops(session, {"i": idx}) == ["ONE_HOT"]


def test_one_hot_float_indices_and_depth_from_a_graph_input():
    """Float indices are cast to integers (CAST, toward zero); an integer depth fed as a graph
    input is specialised on."""
    idx = np.asarray([0.7, 2.2, -1.5], np.float32)
    feeds = {"i": idx, "depth": np.asarray([3], np.int64)}
    values = np.asarray([0, 1], np.int32)
    node = helper.make_node("OneHot", ["i", "depth", "v"], ["y"], axis=0)
    session = InferenceSession(_model(node, feeds, 11, {"v": values}))
    (got,) = session.run(None, feeds)
    np.testing.assert_array_equal(got, _one_hot(idx, 3, values, 0))
    assert _ops(session, feeds) == ["CAST", "ONE_HOT"]


# --- data-dependent shapes ------------------------------------------------------------------


def test_value_dependent_ops_fold_when_their_inputs_are_known(rng):
    """NonZero of a constant folds at import; the graph then only adds to it."""
    x = rng.normal(size=(2,)).astype(np.float32)
    nodes = [
        helper.make_node("NonZero", ["c"], ["nz"]),
        helper.make_node("Cast", ["nz"], ["nzf"], to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", ["nzf"], ["s"], keepdims=0),
        helper.make_node("Add", ["x", "s"], ["y"]),
    ]
    c = numpy_helper.from_array(np.asarray([[0, 2, 0], [1, 0, 3]], np.int32), "c")
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], [c],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    (y,) = InferenceSession(model).run(None, {"x": x})
    np.testing.assert_allclose(y, x + (0 + 1 + 1) + (1 + 0 + 2), rtol=1e-6)  # rows, columns
