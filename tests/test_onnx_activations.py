"""The activation converters through ``dml_jax.onnx.InferenceSession``, where ONNX's node tests
(``test_onnx_backend.py``) leave a mapping unexercised: Softmax, LogSoftmax and Hardmax
before opset 13 (the input coerced to 2-D at ``axis``), PRelu's slope shapes, Gelu's tanh form
composed from element-wise operators, Dropout's mask before opset 10 (its training mode:
test_onnx_jax_ops.py), and DirectML's integer Shrink. Expected values come from ONNX's reference evaluator, or
from the rule docs/semantics.md states where DirectML differs.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import dml_jax as dml

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from dml_jax.onnx import InferenceSession
from dml_jax.onnx.walk import import_graph

ELEM = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16}


def _model(node, inputs: dict, outputs: dict, opset: int):
    """A one-node model; ``inputs``/``outputs`` map names to (element type, shape)."""
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items()],
        [helper.make_tensor_value_info(n, t, s) for n, (t, s) in outputs.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _run_both(model, feeds: dict) -> tuple[list, list]:
    got = InferenceSession(model).run(None, feeds)
    with np.errstate(all="ignore"):
        want = ReferenceEvaluator(model).run(None, feeds)
    return got, want


def _operator_types(model) -> list[str]:
    graph = import_graph(model).graph
    return [n.operator_type.removeprefix("DML_OPERATOR_") for n in graph.nodes]


# Softmax / LogSoftmax / Hardmax before opset 13: every axis from ``axis`` on is normalized.
# (ONNX's reference evaluator applies opset 13's single axis to every opset: not used here.)
COERCED = [(11, 1, False), (11, 0, False), (11, 2, False), (11, -1, False), (11, 3, False),
           (9, 1, True)]  # fmt: skip


def _coerced(op_type: str, x: np.ndarray, axis: int) -> np.ndarray:
    """ONNX's definition before opset 13, in float64: rows of the {before, after} matrix."""
    axis = axis + x.ndim if axis < 0 else axis
    rows = x.astype(np.float64).reshape(math.prod(x.shape[:axis]), -1)
    if op_type == "Hardmax":
        y = np.zeros_like(rows)
        y[np.arange(len(rows)), rows.argmax(axis=1)] = 1
    else:
        d = rows - rows.max(axis=1, keepdims=True)
        log = d - np.log(np.exp(d).sum(axis=1, keepdims=True))
        y = log if op_type == "LogSoftmax" else np.exp(log)
    return y.reshape(x.shape).astype(x.dtype)


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize(
    "opset, axis, default", COERCED, ids=[f"opset{o}-axis{a}" for o, a, _ in COERCED]
)
def test_coerced_2d_before_opset_13(op_type, opset, axis, default):
    shape = (2, 3, 4)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    x[0, 2, 1] = x[0, 1:].max()  # a tie: Hardmax takes the first in row-major order
    node = helper.make_node(op_type, ["x"], ["y"], **({} if default else {"axis": axis}))
    model = _model(node, {"x": (1, shape)}, {"y": (1, shape)}, opset)
    (got,) = InferenceSession(model).run(None, {"x": x})
    np.testing.assert_allclose(got, _coerced(op_type, x, axis), rtol=1e-6, atol=1e-7)
    # The original operators on the 2-D view, as ONNX Runtime's DirectML provider does.
    name = {"Softmax": "SOFTMAX", "LogSoftmax": "LOG_SOFTMAX", "Hardmax": "HARDMAX"}[op_type]
    assert f"ACTIVATION_{name}" in _operator_types(model)


def test_opset_13_normalizes_one_axis():
    x = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
    node = helper.make_node("Softmax", ["x"], ["y"], axis=1)
    model = _model(node, {"x": (1, x.shape)}, {"y": (1, x.shape)}, 13)
    (got,), (want,) = _run_both(model, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert "ACTIVATION_SOFTMAX1" in _operator_types(model)


SLOPES = [(4, 5), (5,), (1,), (4, 1), (3, 4, 5), ()]


@pytest.mark.parametrize("slope_shape", SLOPES, ids=[str(s) for s in SLOPES])
def test_prelu_slope_broadcasts(slope_shape):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    slope = rng.standard_normal(slope_shape).astype(np.float32)
    node = helper.make_node("PRelu", ["x", "slope"], ["y"])
    model = _model(node, {"x": (1, x.shape), "slope": (1, slope.shape)}, {"y": (1, x.shape)}, 16)
    (got,), (want,) = _run_both(model, {"x": x, "slope": slope})
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_prelu_slope_wider_than_x_is_rejected():
    node = helper.make_node("PRelu", ["x", "slope"], ["y"])
    model = _model(node, {"x": (1, (4,)), "slope": (1, (3, 4))}, {"y": (1, (3, 4))}, 16)
    with pytest.raises(dml.ValidationError, match="does not broadcast"):
        InferenceSession(model).run(
            None, {"x": np.ones(4, np.float32), "slope": np.ones((3, 4), np.float32)}
        )


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["float32", "float16"])
def test_gelu_tanh_is_composed_from_element_wise_operators(dtype):
    x = np.concatenate([np.linspace(-8, 8, 97), [-300.0, -60.0, 60.0, 300.0]]).astype(dtype)
    node = helper.make_node("Gelu", ["x"], ["y"], approximate="tanh")
    model = _model(node, {"x": (ELEM[dtype], x.shape)}, {"y": (ELEM[dtype], x.shape)}, 20)
    (got,), _ = _run_both(model, {"x": x})
    w = x.astype(np.float64)
    want = 0.5 * w * (1 + np.tanh(math.sqrt(2 / math.pi) * (w + 0.044715 * w**3)))
    tol = 1e-6 if dtype == np.float32 else 2e-3
    np.testing.assert_allclose(got, want.astype(dtype), rtol=tol, atol=tol)
    kinds = set(_operator_types(model))
    assert "ACTIVATION_GELU" not in kinds and "ELEMENT_WISE_TANH" in kinds


def test_gelu_none_is_activation_gelu():
    node = helper.make_node("Gelu", ["x"], ["y"])
    model = _model(node, {"x": (1, (5,))}, {"y": (1, (5,))}, 20)
    assert "ACTIVATION_GELU" in _operator_types(model)


@pytest.mark.parametrize("opset", [7, 10, 13])
def test_dropout_at_inference_is_the_input_and_a_full_mask(opset):
    x = np.random.default_rng(3).standard_normal((2, 3)).astype(np.float32)
    mask_type = TensorProto.FLOAT if opset < 10 else TensorProto.BOOL
    node = (
        helper.make_node("Dropout", ["x"], ["y", "mask"], ratio=0.3)
        if opset < 12
        else (helper.make_node("Dropout", ["x"], ["y", "mask"]))
    )
    model = _model(
        node, {"x": (1, x.shape)}, {"y": (1, x.shape), "mask": (mask_type, x.shape)}, opset
    )
    y, mask = InferenceSession(model).run(None, {"x": x})
    np.testing.assert_array_equal(y, x)
    assert mask.dtype == (np.float32 if opset < 10 else np.bool_)
    assert mask.shape == x.shape and mask.all()


def test_integer_shrink_follows_directml():
    """DirectML converts Bias to the integer type toward zero (docs/semantics.md): 1.7 -> 1."""
    x = np.array([-5, -2, -1, 0, 1, 2, 5], np.int32)
    node = helper.make_node("Shrink", ["x"], ["y"], bias=1.7, lambd=1.5)
    model = _model(
        node, {"x": (TensorProto.INT32, x.shape)}, {"y": (TensorProto.INT32, x.shape)}, 9
    )
    (got,) = InferenceSession(model).run(None, {"x": x})
    np.testing.assert_array_equal(got, np.array([-4, -1, 0, 0, 0, 1, 4], np.int32))


@pytest.mark.parametrize("lambd", [-1.0, float("-inf")])
def test_shrink_of_negative_lambd_takes_onnx_first_case(lambd):
    """A negative lambd makes both of Shrink's cases hold between lambd and -lambd: ONNX takes
    ``x < -lambd`` (``x + bias``) there, DirectML's ACTIVATION_SHRINK ``x > Threshold``; the
    converter gives ONNX's values (found by the fuzzer, seed 541: lambd -inf)."""
    from onnx.reference import ReferenceEvaluator

    x = np.array([-3.0, -1.0, -0.25, 0.0, 0.25, 1.0, 3.0], np.float32)
    node = helper.make_node("Shrink", ["x"], ["y"], bias=1.5, lambd=lambd)
    model = _model(
        node, {"x": (TensorProto.FLOAT, x.shape)}, {"y": (TensorProto.FLOAT, x.shape)}, 9
    )
    (got,) = InferenceSession(model).run(None, {"x": x})
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_array_equal(got, want)
    assert got[3] == 1.5  # 0 is below -lambd: x + bias, where DirectML's order gives x - bias
