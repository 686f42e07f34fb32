"""The generator and scan converters (``dml_jax/onnx/converters/generate.py``) through
``InferenceSession``, where ONNX's node tests leave gaps: generators whose sizes come from graph
inputs (specialised on) or from floating-point initializers (parameters, never folded), so that
FILL_VALUE_CONSTANT and FILL_VALUE_SEQUENCE run; CumSum on the types DirectML sums (the node
tests are mostly double); Trilu of more than 4 dimensions (batch folded for DIAGONAL_MATRIX1)
and with k beyond the matrix; EyeLike's types.

Each model is built with ``onnx.helper`` and compared with ONNX Runtime's CPU provider (skipped
without onnxruntime).
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper

from dml_jax.onnx import InferenceSession, fold

TYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int32): TensorProto.INT32,
         np.dtype(np.int64): TensorProto.INT64, np.dtype(np.bool_): TensorProto.BOOL,
         np.dtype(np.float16): TensorProto.FLOAT16}  # fmt: skip


def _model(node, feeds, opset, inits=()):
    inputs = [helper.make_tensor_value_info(k, TYPES[v.dtype], v.shape) for k, v in feeds.items()]
    outs = [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)]
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in dict(inits).items()]
    graph = helper.make_graph([node], "g", inputs, outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def _check(node, feeds, opset, inits=()) -> list[str]:
    """Compares the session with ONNX Runtime; returns the program's DML operators (without
    the identities that inputs enter by)."""
    ort = pytest.importorskip("onnxruntime")
    model = _model(node, feeds, opset, inits)
    session = InferenceSession(model)
    (got,) = session.run(None, feeds)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = ref.run(None, feeds)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    program = session.program([np.shape(feeds[i.name]) for i in session.get_inputs()], feeds)
    return program.operators()


@pytest.fixture
def unfolded(monkeypatch):
    """Import-time folding switched off for ConstantOfShape and Range: a session specialises
    on their integer inputs and would otherwise fold them, so their converters only run for
    results too large to fold (or bounds held in parameters)."""
    foldable = fold.foldable

    def not_generators(node, *args):
        return node.op_type not in ("ConstantOfShape", "Range") and foldable(node, *args)

    monkeypatch.setattr(fold, "foldable", not_generators)


@pytest.mark.usefixtures("unfolded")
@pytest.mark.parametrize(
    "value",
    [None, np.asarray([3], np.int64), np.asarray([True]), np.asarray([-1.5], np.float16)],
)
def test_constant_of_shape_from_a_graph_input(value):
    shape = np.asarray([2, 3], np.int64)
    attrs = {} if value is None else {"value": numpy_helper.from_array(value)}
    node = helper.make_node("ConstantOfShape", ["s"], ["y"], **attrs)
    assert _check(node, {"s": shape}, 9) == ["FILL_VALUE_CONSTANT"]


@pytest.mark.usefixtures("unfolded")
def test_range_of_int64_graph_inputs():
    feeds = {k: np.asarray(v, np.int64) for k, v in (("a", 10), ("b", -3), ("d", -4))}
    node = helper.make_node("Range", ["a", "b", "d"], ["y"])
    assert _check(node, feeds, 11) == ["FILL_VALUE_SEQUENCE"]


def test_range_of_float_initializers():
    """Floating-point initializers are parameters: the Range is not folded, its bounds are
    still known, and FILL_VALUE_SEQUENCE writes start + i * delta."""
    x = np.zeros(1, np.float32)
    node = helper.make_node("Range", ["a", "b", "d"], ["r"])
    add = helper.make_node("Add", ["x", "r"], ["y"])
    bounds = [np.asarray(v, np.float32) for v in (0.5, 3.0, 0.75)]
    graph = helper.make_graph(
        [node, add], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(v, k) for k, v in zip("abd", bounds)],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    (y,) = InferenceSession(model).run(None, {"x": x})
    np.testing.assert_allclose(y, [0.5, 1.25, 2.0, 2.75])


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_cumsum(exclusive, reverse, dtype, rng):
    x = rng.integers(-5, 5, size=(3, 4)).astype(dtype)
    node = helper.make_node("CumSum", ["x", "axis"], ["y"], exclusive=exclusive, reverse=reverse)
    inits = {"axis": np.asarray(-1, np.int32)}
    assert _check(node, {"x": x}, 14, inits) == ["CUMULATIVE_SUMMATION"]


def test_cumsum_axis_from_a_graph_input(rng):
    x = rng.normal(size=(2, 3)).astype(np.float32)
    node = helper.make_node("CumSum", ["x", "axis"], ["y"])
    assert _check(node, {"x": x, "axis": np.asarray(0, np.int64)}, 11) == ["CUMULATIVE_SUMMATION"]


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [-7, -1, 2, 9])
def test_trilu_of_5_dimensions(upper, k, rng):
    x = rng.normal(size=(2, 1, 2, 3, 4)).astype(np.float32)
    node = helper.make_node("Trilu", ["x", "k"], ["y"], upper=upper)
    assert _check(node, {"x": x}, 14, {"k": np.asarray(k, np.int64)}) == ["DIAGONAL_MATRIX1"]


def test_trilu_of_bools_without_k(rng):
    x = rng.integers(0, 2, size=(4, 3)).astype(np.bool_)
    assert _check(helper.make_node("Trilu", ["x"], ["y"], upper=0), {"x": x}, 14)


@pytest.mark.parametrize("dtype", [None, TensorProto.INT32, TensorProto.BOOL, TensorProto.FLOAT16])
def test_eye_like(dtype):
    x = np.zeros((3, 5), np.float32)
    attrs = {"k": -1} if dtype is None else {"k": 2, "dtype": dtype}
    node = helper.make_node("EyeLike", ["x"], ["y"], **attrs)
    session = InferenceSession(_model(node, {"x": x}, 9))
    (got,) = session.run(None, {"x": x})
    want = np.eye(3, 5, attrs["k"], onnx.helper.tensor_dtype_to_np_dtype(dtype or 1))
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
