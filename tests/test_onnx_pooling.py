"""The pooling converters through ``dml_jax.onnx.InferenceSession``, for what ONNX's node tests
(``test_onnx_backend.py``) leave out: MaxPool's Indices in column-major storage order and in
1-D and 3-D, AveragePool's ceil_mode with count_include_pad and pads, LpPool's ceil_mode and p,
the global pools of ranks DirectML's pooling does not take as they are (GlobalLpPool has no node
test), and MaxUnpool in 1-D and 3-D and with output_shape (ONNX Runtime's reading of the indices:
flat into the output_shape tensor). Models are built with ``onnx.helper``; expected values come
from ONNX's reference evaluator, NumPy or ONNX Runtime.
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from dml_jax.onnx import InferenceSession

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _model(op_type, inputs, outputs, opset=22, **attributes):
    """A one-node model: ``inputs`` and ``outputs`` are (name, elem type, shape) triples."""
    node = helper.make_node(op_type, [n for n, _, _ in inputs], [n for n, _, _ in outputs],
                            **attributes)  # fmt: skip
    graph = helper.make_graph(
        [node],
        op_type.lower(),
        [helper.make_tensor_value_info(*i) for i in inputs],
        [helper.make_tensor_value_info(*o) for o in outputs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10  # what onnxruntime 1.30 (the GPU machine) reads
    return model


def _run(model, feeds):
    return InferenceSession(model).run(None, feeds)


def _reference(model, feeds):
    return ReferenceEvaluator(model).run(None, feeds)


def _onnxruntime(model, feeds):
    """ONNX Runtime's CPU provider (where ONNX's reference evaluator falls short: 3-D MaxPool
    with pads, LpPool's partial windows, which it weighs as whole ones)."""
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _pool_model(op_type, shape, indices=False, opset=22, **attributes):
    outputs = [("y", F, None)] + ([("i", I64, None)] if indices else [])
    return _model(op_type, [("x", F, shape)], outputs, opset=opset, **attributes)


@pytest.mark.parametrize(
    "shape, attributes",
    [
        ((1, 2, 5, 6), {"kernel_shape": [2, 3], "strides": [2, 1], "storage_order": 1}),
        (
            (2, 1, 4, 5, 3),
            {"kernel_shape": [2, 2, 2], "storage_order": 1, "pads": [0, 1, 0, 1, 0, 1]},
        ),
        ((2, 3, 4, 5, 3), {"kernel_shape": [3, 2, 2], "dilations": [1, 2, 1], "ceil_mode": 1}),
        ((2, 3, 9), {"kernel_shape": [3], "strides": [2], "storage_order": 1}),
    ],
)
def test_maxpool_indices(shape, attributes, rng):
    x = rng.permutation(np.prod(shape)).astype(np.float32).reshape(shape)  # no ties
    model = _pool_model("MaxPool", shape, indices=True, **attributes)
    (y, i), (want_y, want_i) = _run(model, {"x": x}), _onnxruntime(model, {"x": x})
    np.testing.assert_array_equal(y, want_y)
    assert i.dtype == np.int64
    np.testing.assert_array_equal(i, want_i)


def test_maxpool_indices_opset_8(rng):
    x = rng.normal(size=(1, 2, 4, 4)).astype(np.float32)
    model = _pool_model("MaxPool", x.shape, indices=True, opset=8, kernel_shape=[2, 2],
                        strides=[2, 2])  # fmt: skip
    for got, want in zip(_run(model, {"x": x}), _reference(model, {"x": x})):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "shape, attributes",
    [
        # ceil_mode's last window runs past the pads: ONNX counts the pads, not the overhang
        ((1, 2, 6, 7), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
        (
            (1, 1, 7, 8),
            {"kernel_shape": [2, 3], "strides": [3, 2], "pads": [0, 1, 1, 0], "dilations": [2, 1]},
        ),
        ((1, 2, 8), {"kernel_shape": [3], "strides": [2], "pads": [2, 1]}),
    ],
)
@pytest.mark.parametrize("include", [0, 1])
def test_averagepool_ceil_mode_with_pads(shape, attributes, include, rng):
    x = rng.normal(size=shape).astype(np.float32)
    model = _pool_model("AveragePool", shape, ceil_mode=1, count_include_pad=include, **attributes)
    (got,), (want,) = _run(model, {"x": x}), _reference(model, {"x": x})
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("p", [1, 3])
def test_lppool_ceil_mode_and_p(p, rng):
    x = rng.normal(size=(1, 2, 7, 6)).astype(np.float32)
    attributes = {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 0, 1], "p": p}
    model = _pool_model("LpPool", x.shape, opset=18, ceil_mode=1, **attributes)
    (got,), (want,) = _run(model, {"x": x}), _onnxruntime(model, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(2, 3, 5), (1, 2, 3, 4), (2, 1, 2, 3, 2), (1, 2, 2, 3, 2, 2)])
@pytest.mark.parametrize("op_type", ["GlobalMaxPool", "GlobalAveragePool", "GlobalLpPool"])
def test_global_pools(op_type, shape, rng):
    x = rng.normal(size=shape).astype(np.float32)
    axes = tuple(range(2, len(shape)))
    want = {
        "GlobalMaxPool": lambda: x.max(axis=axes, keepdims=True),
        "GlobalAveragePool": lambda: x.mean(axis=axes, keepdims=True),
        "GlobalLpPool": lambda: np.sqrt((x * x).sum(axis=axes, keepdims=True)),
    }[op_type]()
    (got,) = _run(_model(op_type, [("x", F, shape)], [("y", F, None)]), {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_global_lp_pool_p_3_and_opset_1(rng):
    x = rng.normal(size=(1, 3, 4, 5)).astype(np.float32)
    want = (np.abs(x) ** 3).sum(axis=(2, 3), keepdims=True) ** (1 / 3)
    model = _model("GlobalLpPool", [("x", F, x.shape)], [("y", F, None)], opset=2, p=3)
    np.testing.assert_allclose(_run(model, {"x": x})[0], want, rtol=1e-5)
    model = _model("GlobalLpPool", [("x", F, x.shape)], [("y", F, None)], opset=1, p=3.0)
    np.testing.assert_allclose(_run(model, {"x": x})[0], want, rtol=1e-5)


def _pool_then_unpool(shape, kernel, strides, output_shape):
    """MaxPool's values and indices of an input of ``shape``, unpooled (with ``output_shape``
    as an initializer when given)."""
    nodes = [
        helper.make_node("MaxPool", ["x"], ["v", "i"], kernel_shape=kernel, strides=strides),
        helper.make_node(
            "MaxUnpool",
            ["v", "i"] + (["shape"] if output_shape else []),
            ["y"],
            kernel_shape=kernel,
            strides=strides,
        ),
    ]
    inits = []
    if output_shape:
        inits = [onnx.numpy_helper.from_array(np.asarray(output_shape, np.int64), "shape")]
    graph = helper.make_graph(
        nodes,
        "unpool",
        [helper.make_tensor_value_info("x", F, shape)],
        [helper.make_tensor_value_info("y", F, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    model.ir_version = 10  # what onnxruntime 1.30 (the GPU machine) reads
    return model


@pytest.mark.parametrize(
    "shape, kernel, strides",
    [
        ((2, 3, 8), [2], [2]),
        ((1, 2, 4, 6, 4), [2, 3, 2], [2, 3, 2]),
        ((1, 2, 4, 6), [2, 2], [2, 2]),
    ],
)
def test_maxunpool_inverts_maxpool(shape, kernel, strides, rng):
    x = rng.permutation(np.prod(shape)).astype(np.float32).reshape(shape)
    model = _pool_then_unpool(shape, kernel, strides, None)
    (got,), (want,) = _run(model, {"x": x}), _reference(model, {"x": x})
    np.testing.assert_array_equal(got, want)


def test_maxunpool_output_shape_reads_indices_in_that_shape(rng):
    """An odd-sized input pooled and unpooled with its own shape as output_shape: every
    maximum returns to where it was (ONNX Runtime's reading; ONNX's reference reads the indices
    in the smaller inferred shape and pads)."""
    ort = pytest.importorskip("onnxruntime")
    shape = (1, 2, 5, 7)
    x = rng.permutation(np.prod(shape)).astype(np.float32).reshape(shape)
    model = _pool_then_unpool(shape, [2, 2], [2, 2], list(shape))
    (got,) = _run(model, {"x": x})
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(got, session.run(None, {"x": x})[0])
    kept = got != 0
    np.testing.assert_array_equal(got[kept], x[kept])
    assert kept.sum() == 2 * 2 * 3
