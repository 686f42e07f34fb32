"""TopK, the arg-reductions and the reductions through ``InferenceSession``: the opsets and
inputs ONNX's node tests (TopK-24, ArgMax/ArgMin-13, Reduce*-13/18/20) do not reach.

- TopK-1's ``k`` attribute, TopK-10's K input, TopK-11's ``largest`` = 0 with ``sorted`` = 0, K
  fed as a graph input (the session specialises on it: DirectML needs K at import), and the
  tie rule (ascending index in both directions, as ONNX asks);
- ArgMax-1 / ArgMin-11 and their INT64 output (INT32 in the graph);
- every Reduce* op with the ``axes`` attribute (opset 11) and with the axes input (opset 18),
  ``noop_with_empty_axes``, axes fed as a graph input, integer data, and a type DirectML's REDUCE
  does not take rejected by name.
"""

from __future__ import annotations

import numpy as np
import pytest

import dml_jax as dml

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper

from dml_jax.onnx import InferenceSession

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _model(node, inputs, outputs, opset, inits=()):
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, None) for n, t in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _top_k_numpy(x, k, axis, largest):
    """ONNX's TopK: the k largest (smallest), equal values by ascending index."""
    order = np.argsort(-x if largest else x, axis=axis, kind="stable")
    index = np.take(order, np.arange(k), axis=axis)
    return np.take_along_axis(x, index, axis=axis), index.astype(np.int64)


def _check_top_k(model, feed, x, k, axis, largest):
    values, indices = InferenceSession(model).run(None, feed)
    want_values, want_indices = _top_k_numpy(x, k, axis, largest)
    assert indices.dtype == np.int64
    np.testing.assert_array_equal(values, want_values)
    np.testing.assert_array_equal(indices, want_indices)


def test_top_k_1_k_attribute(rng):
    x = rng.normal(size=(3, 5)).astype(np.float32)
    node = helper.make_node("TopK", ["X"], ["V", "I"], k=2, axis=0)
    model = _model(node, [("X", F, x.shape)], [("V", F), ("I", I64)], 1)
    _check_top_k(model, {"X": x}, x, 2, 0, True)


def test_top_k_10_k_input(rng):
    x = rng.normal(size=(2, 3, 6)).astype(np.float32)
    node = helper.make_node("TopK", ["X", "K"], ["V", "I"])
    model = _model(node, [("X", F, x.shape)], [("V", F), ("I", I64)], 10, [("K", np.int64([4]))])
    _check_top_k(model, {"X": x}, x, 4, 2, True)


def test_top_k_11_smallest_unsorted_negative_axis_with_ties(rng):
    """sorted = 0 allows any order; DirectML sorts, ascending here, ties by ascending index."""
    x = rng.integers(0, 3, size=(4, 6, 2)).astype(np.float32)
    node = helper.make_node("TopK", ["X", "K"], ["V", "I"], axis=-2, largest=0, sorted=0)
    model = _model(node, [("X", F, x.shape)], [("V", F), ("I", I64)], 11, [("K", np.int64([5]))])
    _check_top_k(model, {"X": x}, x, 5, 1, False)


def test_top_k_with_k_a_graph_input_specialises(rng):
    x = rng.normal(size=(2, 7)).astype(np.float32)
    node = helper.make_node("TopK", ["X", "K"], ["V", "I"])
    model = _model(node, [("X", F, x.shape), ("K", I64, [1])], [("V", F), ("I", I64)], 11)
    session = InferenceSession(model)
    for k in (3, 7):
        values, indices = session.run(None, {"X": x, "K": np.int64([k])})
        want_values, want_indices = _top_k_numpy(x, k, 1, True)
        np.testing.assert_array_equal(values, want_values)
        np.testing.assert_array_equal(indices, want_indices)
    assert session.static_inputs == ("K",)


def test_top_k_indices_alone_and_k_out_of_range(rng):
    x = rng.normal(size=(3, 4)).astype(np.float32)
    node = helper.make_node("TopK", ["X", "K"], ["", "I"])
    model = _model(node, [("X", F, x.shape)], [("I", I64)], 11, [("K", np.int64([2]))])
    (indices,) = InferenceSession(model).run(None, {"X": x})
    np.testing.assert_array_equal(indices, _top_k_numpy(x, 2, 1, True)[1])
    model = _model(node, [("X", F, x.shape)], [("I", I64)], 11, [("K", np.int64([5]))])
    with pytest.raises(dml.ValidationError, match="K = 5"):
        InferenceSession(model).run(None, {"X": x})


@pytest.mark.parametrize(("op", "opset"), [("ArgMax", 1), ("ArgMin", 11)])
def test_arg_reductions_before_select_last_index(op, opset, rng):
    x = rng.integers(0, 4, size=(3, 4, 5)).astype(np.float32)
    axis = 1 if opset == 1 else -1
    node = helper.make_node(op, ["X"], ["Y"], axis=axis, keepdims=0)
    model = _model(node, [("X", F, x.shape)], [("Y", I64)], opset)
    (y,) = InferenceSession(model).run(None, {"X": x})
    want = (np.argmax if op == "ArgMax" else np.argmin)(x, axis=axis)
    assert y.dtype == np.int64
    np.testing.assert_array_equal(y, want)


NUMPY = {
    "ReduceSum": lambda x, a, k: np.sum(x, axis=a, keepdims=k),
    "ReduceMean": lambda x, a, k: np.mean(x, axis=a, keepdims=k),
    "ReduceMax": lambda x, a, k: np.max(x, axis=a, keepdims=k),
    "ReduceMin": lambda x, a, k: np.min(x, axis=a, keepdims=k),
    "ReduceProd": lambda x, a, k: np.prod(x, axis=a, keepdims=k),
    "ReduceLogSum": lambda x, a, k: np.log(np.sum(x, axis=a, keepdims=k)),
    "ReduceLogSumExp": lambda x, a, k: np.log(np.sum(np.exp(x), axis=a, keepdims=k)),
    "ReduceSumSquare": lambda x, a, k: np.sum(x * x, axis=a, keepdims=k),
    "ReduceL1": lambda x, a, k: np.sum(np.abs(x), axis=a, keepdims=k),
    "ReduceL2": lambda x, a, k: np.sqrt(np.sum(x * x, axis=a, keepdims=k)),
}


@pytest.mark.parametrize("op", sorted(NUMPY))
def test_reductions_axes_attribute_then_input(op, rng):
    """Opset 11: axes attribute (ReduceSum's input from 13, the others' from 18)."""
    x = rng.uniform(0.5, 2.0, size=(2, 3, 4)).astype(np.float32)
    want = NUMPY[op](x.astype(np.float64), (0, 2), False)
    node = helper.make_node(op, ["X"], ["Y"], axes=[0, -1], keepdims=0)
    model = _model(node, [("X", F, x.shape)], [("Y", F)], 11)
    (y,) = InferenceSession(model).run(None, {"X": x})
    np.testing.assert_allclose(y, want, rtol=1e-5)
    node = helper.make_node(op, ["X", "axes"], ["Y"], keepdims=0)
    model = _model(node, [("X", F, x.shape)], [("Y", F)], 18, [("axes", np.int64([0, -1]))])
    (y,) = InferenceSession(model).run(None, {"X": x})
    np.testing.assert_allclose(y, want, rtol=1e-5)


def test_reduce_without_axes_reduces_all_or_nothing(rng):
    x = rng.normal(size=(2, 3)).astype(np.float32)
    node = helper.make_node("ReduceMax", ["X"], ["Y"], noop_with_empty_axes=1)
    model = _model(node, [("X", F, x.shape)], [("Y", F)], 18)
    (y,) = InferenceSession(model).run(None, {"X": x})
    np.testing.assert_array_equal(y, x)
    node = helper.make_node("ReduceMax", ["X"], ["Y"])
    model = _model(node, [("X", F, x.shape)], [("Y", F)], 18)
    (y,) = InferenceSession(model).run(None, {"X": x})
    np.testing.assert_array_equal(y, x.max(keepdims=True))


def test_reduce_axes_a_graph_input_specialises(rng):
    x = rng.integers(-50, 50, size=(3, 4)).astype(np.int32)
    node = helper.make_node("ReduceSum", ["X", "axes"], ["Y"])
    model = _model(
        node,
        [("X", TensorProto.INT32, x.shape), ("axes", I64, [1])],
        [("Y", TensorProto.INT32)],
        13,
    )
    session = InferenceSession(model)
    for axis in (0, 1):
        (y,) = session.run(None, {"X": x, "axes": np.int64([axis])})
        np.testing.assert_array_equal(y, x.sum(axis=axis, keepdims=True))


def test_reduce_type_directml_does_not_take_is_rejected():
    x = np.ones((2, 3), np.int32)
    node = helper.make_node("ReduceLogSum", ["X"], ["Y"], axes=[1])
    model = _model(node, [("X", TensorProto.INT32, x.shape)], [("Y", TensorProto.INT32)], 13)
    with pytest.raises(dml.ValidationError, match="REDUCE with Function LOG_SUM"):
        InferenceSession(model).run(None, {"X": x})
