"""The quantized ops through ``InferenceSession`` where ONNX's node tests do not reach: per-axis
parameters on other axes, absent zero points with ``output_dtype``, INT32 and FLOAT16 operands,
blocked (DE)QUANTIZE and DirectML's rule on partial blocks, broadcast batches and per-row /
per-column parameters of the integer matrix products, 1-D and grouped integer convolutions.
Results are compared with ONNX's reference evaluator; ONNX's own node tests run in
``test_onnx_backend.py``."""

from __future__ import annotations

import numpy as np
import pytest

import dml_jax as dml

onnx = pytest.importorskip("onnx")
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from dml_jax.onnx import InferenceSession


def _model(op, inputs, outputs, *, opset, constants=(), **attrs):
    """A one-node model; ``inputs`` (name -> array) are graph inputs, except the names in
    ``constants``, which are initializers. ``outputs``: name -> NumPy dtype."""
    names = list(inputs)
    node = helper.make_node(op, names, list(outputs), **attrs)
    elem = helper.np_dtype_to_tensor_dtype
    graph = helper.make_graph(
        [node],
        op.lower(),
        [
            helper.make_tensor_value_info(n, elem(a.dtype), a.shape)
            for n, a in inputs.items()
            if n not in constants
        ],
        [helper.make_tensor_value_info(n, elem(np.dtype(t)), None) for n, t in outputs.items()],
        [numpy_helper.from_array(inputs[n], n) for n in constants],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    feeds = {n: a for n, a in inputs.items() if n not in constants}
    return model, feeds


def _check(model, feeds, want=None):
    """The session's outputs equal ``want`` (default: ONNX's reference evaluator's)."""
    want = ReferenceEvaluator(model).run(None, feeds) if want is None else want
    got = InferenceSession(model).run(None, feeds)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=1e-6)
        else:
            np.testing.assert_array_equal(g, w)


def _requantize(real, scale, zero, dtype):
    """ONNX's quantization of float64 ``real`` (round half to even, saturate)."""
    info = np.iinfo(dtype)
    q = np.rint(real / np.float64(scale)) + np.int64(zero)
    return np.clip(q, info.min, info.max).astype(dtype)


def _conv(x, w, **attrs):
    """ONNX's float64 Conv of integer-valued arrays (the reference evaluator's)."""
    model, feeds = _model("Conv", {"x": x, "w": w}, {"y": np.float64}, opset=11, **attrs)
    return ReferenceEvaluator(model).run(None, feeds)[0]


def _ops(model):
    return [n.operator_type for n in dml.compile_onnx(model).imported.graph.nodes]


@pytest.mark.parametrize("axis", [0, -1])
def test_quantize_per_axis_without_zero_point(axis, rng):
    x = rng.uniform(-30, 30, (3, 4, 5)).astype(np.float32)
    scale = rng.uniform(0.1, 1, x.shape[axis]).astype(np.float32)
    model, feeds = _model(
        "QuantizeLinear", {"x": x, "s": scale}, {"y": np.uint8}, opset=13, axis=axis
    )
    _check(model, feeds)
    assert "DML_OPERATOR_ELEMENT_WISE_QUANTIZE_LINEAR" in _ops(model)


def test_quantize_to_output_dtype_int8_and_back(rng):
    x = rng.uniform(-40, 40, (2, 6)).astype(np.float32)
    model, feeds = _model(
        "QuantizeLinear",
        {"x": x, "s": np.float32(0.25)},
        {"y": np.int8},
        opset=21,
        output_dtype=onnx.TensorProto.INT8,
    )
    _check(model, feeds)


def test_mixed_float_types_compute_in_float32(rng):
    x = rng.uniform(-20, 20, (3, 4)).astype(np.float16)
    model, feeds = _model(
        "QuantizeLinear", {"x": x, "s": np.float32(0.3), "z": np.int8(2)}, {"y": np.int8}, opset=21
    )
    _check(model, feeds)
    q = rng.integers(0, 256, (3, 4)).astype(np.uint8)
    model, feeds = _model(
        "DequantizeLinear",
        {"x": q, "s": np.float16(0.1), "z": np.uint8(7)},
        {"y": np.float32},
        opset=23,
        output_dtype=onnx.TensorProto.FLOAT,
    )
    _check(model, feeds)


def test_dequantize_int32_and_float16_per_axis(rng):
    q = rng.integers(-1000, 1000, (2, 3)).astype(np.int32)
    model, feeds = _model(
        "DequantizeLinear", {"x": q, "s": np.float32(0.5)}, {"y": np.float32}, opset=19
    )
    _check(model, feeds)
    q8 = rng.integers(-128, 128, (4, 3)).astype(np.int8)
    scale = np.array([0.5, 0.25, 2.0], np.float16)
    zero = np.array([1, -3, 0], np.int8)
    model, feeds = _model(
        "DequantizeLinear", {"x": q8, "s": scale, "z": zero}, {"y": np.float16}, opset=19
    )
    _check(model, feeds)


def test_blocked_dequantize_is_dequantize_and_partial_blocks_are_refused(rng):
    q = rng.integers(-128, 128, (4, 6)).astype(np.int8)
    scale = rng.uniform(0.1, 1, (4, 3)).astype(np.float32)
    zero = rng.integers(-5, 5, (4, 3)).astype(np.int8)
    inputs = {"x": q, "s": scale, "z": zero}
    model, feeds = _model(
        "DequantizeLinear", inputs, {"y": np.float32}, opset=21, axis=1, block_size=2
    )
    _check(model, feeds)
    assert "DML_OPERATOR_DEQUANTIZE" in _ops(model)
    # 6 columns in blocks of 4: ONNX allows a partial last block, DirectML's blocks divide
    # the input (docs/semantics.md, "Quantization").
    inputs = {"x": q, "s": scale[:, :2].copy(), "z": zero[:, :2].copy()}
    model, feeds = _model(
        "DequantizeLinear", inputs, {"y": np.float32}, opset=21, axis=1, block_size=4
    )
    with pytest.raises(dml.ValidationError, match="no partial last block"):
        InferenceSession(model).run(None, feeds)


def test_matmul_integer_broadcasts_the_batch_with_per_row_and_column_zero_points(rng):
    a = rng.integers(-128, 128, (2, 3, 4)).astype(np.int8)
    b = rng.integers(0, 256, (4, 5)).astype(np.uint8)
    az = rng.integers(-5, 5, 3).astype(np.int8)
    bz = rng.integers(100, 150, 5).astype(np.uint8)
    model, feeds = _model(
        "MatMulInteger", {"a": a, "b": b, "az": az, "bz": bz}, {"y": np.int32}, opset=10
    )
    want = (a.astype(np.int32) - az[:, None]) @ (b.astype(np.int32) - bz)
    _check(model, feeds, [want])


def test_qlinear_matmul_per_row_and_per_column_scales(rng):
    a = rng.integers(0, 256, (2, 3, 4)).astype(np.uint8)
    b = rng.integers(0, 256, (4, 5)).astype(np.uint8)
    inputs = {
        "a": a,
        "sa": rng.uniform(0.01, 0.05, 3).astype(np.float32),
        "za": np.uint8(120),
        "b": b,
        "sb": rng.uniform(0.01, 0.05, 5).astype(np.float32),
        "zb": rng.integers(100, 150, 5).astype(np.uint8),
        "sy": np.float32(0.3),
        "zy": np.uint8(128),
    }
    model, feeds = _model("QLinearMatMul", inputs, {"y": np.uint8}, opset=10)
    acc = (a.astype(np.int64) - 120) @ (b.astype(np.int64) - inputs["zb"])
    # DirectML's order: float32(sum) * (AScale * BScale), then / YScale.
    real = acc.astype(np.float32) * (inputs["sa"][:, None] * inputs["sb"])
    _check(model, feeds, [_requantize(real.astype(np.float32), inputs["sy"], 128, np.uint8)])


def test_conv_integer_1d_grouped_with_auto_pad(rng):
    x = rng.integers(0, 256, (1, 4, 9)).astype(np.uint8)
    w = rng.integers(0, 256, (6, 2, 3)).astype(np.uint8)
    inputs = {"x": x, "w": w, "xz": np.uint8(128), "wz": rng.integers(0, 256, 6).astype(np.uint8)}
    model, feeds = _model(
        "ConvInteger",
        inputs,
        {"y": np.int32},
        opset=10,
        constants=("w", "wz"),
        group=2,
        strides=[2],
        auto_pad="SAME_UPPER",
    )
    dx = x.astype(np.float64) - 128
    dw = w.astype(np.float64) - inputs["wz"][:, None, None]
    want = _conv(dx, dw, group=2, strides=[2], auto_pad="SAME_UPPER").astype(np.int32)
    _check(model, feeds, [want])


def test_qlinear_conv_with_bias_and_per_channel_filter_parameters(rng):
    x = rng.integers(-128, 128, (2, 3, 6, 5)).astype(np.int8)
    w = rng.integers(-128, 128, (4, 3, 3, 2)).astype(np.int8)
    inputs = {
        "x": x,
        "sx": np.float32(0.05),
        "zx": np.int8(3),
        "w": w,
        "sw": rng.uniform(0.001, 0.01, 4).astype(np.float32),
        "zw": np.zeros(4, np.int8),
        "sy": np.float32(0.2),
        "zy": np.int8(-10),
        "bias": rng.integers(-2000, 2000, 4).astype(np.int32),
    }
    model, feeds = _model(
        "QLinearConv",
        inputs,
        {"y": np.int8},
        opset=10,
        constants=("w", "sw", "zw", "bias"),
        pads=[1, 0, 1, 1],
        dilations=[2, 1],
    )
    acc = _conv(x.astype(np.float64) - 3, w.astype(np.float64), pads=[1, 0, 1, 1], dilations=[2, 1])
    acc = acc + inputs["bias"][:, None, None]
    real = acc.astype(np.float32) * (np.float32(0.05) * inputs["sw"])[:, None, None]
    _check(model, feeds, [_requantize(real.astype(np.float32), inputs["sy"], -10, np.int8)])
