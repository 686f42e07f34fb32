"""Models put through onnxruntime's quantization tools run through
``dml_jax.onnx.InferenceSession`` and match onnxruntime's CPU provider.

Two float models are built with ``onnx.helper``: a small CNN (Conv, Relu, MaxPool, LeakyRelu,
Sigmoid, Add, Mul, Concat, AveragePool, GlobalAveragePool, Flatten, Gemm, Softmax) and a
transformer-like block (MatMul projections, a transposed-key MatMul, Mul, Softmax, a residual
Add gated by Where, an MLP with Relu). Each is quantized by ``quantize_dynamic`` (QInt8 and
QUInt8 weights), ``quantize_static`` with a four-sample CalibrationDataReader in the QOperator
and QDQ formats, per tensor and per channel, 8-bit and (QDQ, com.microsoft Q/DQ) 16-bit
activations, and by ``MatMulNBitsQuantizer`` (4-bit blockwise weights, when its dependencies
are installed). Every quantized model runs here and under onnxruntime's CPU provider on the same
input; the test also asserts which DML operators each quantized ONNX node became
(``session.explain()``).

Tolerances, by what each side computes:

- quantize_dynamic (float outputs): the integer products are exact on both sides and the
  dequantizing multipliers are the same float32 products; only the float layers' roundings
  (bias and residual additions, a fused multiply-add on one side) differ: ``1e-5`` of the output
  range.
- QOperator (DequantizeLinear of a quantized output): at most one step of the output's scale.
  Each quantized op rounds an intermediate once; where onnxruntime's kernel orders that
  arithmetic otherwise (its MLAS scale ratios, lookup tables, integer pool sums; see
  ``test_onnx_ms_quantized.py``) a value on a rounding boundary may land one step away.
- QDQ: the graph says DequantizeLinear, the float op, QuantizeLinear, which is what this import
  (and ONNX Runtime's DirectML provider) runs. onnxruntime's CPU provider without graph
  optimizations runs the same: at most one step of the output's scale (a float op's sum order
  may move an intermediate across a rounding boundary). With its default optimizations
  onnxruntime fuses each DQ-op-Q group into an integer kernel (QLinearConv, QLinearMatMul,
  QLinearAdd, ...) that rounds in its own way, so its own result moves by several steps; against
  that, each element may differ by no more than onnxruntime's optimized and unoptimized results
  differ from each other, plus that one step.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
quantization = pytest.importorskip("onnxruntime.quantization")
from onnx import TensorProto, helper, numpy_helper

from dml_jax.onnx import InferenceSession

QuantType, QuantFormat = quantization.QuantType, quantization.QuantFormat
F = TensorProto.FLOAT
SHAPES = {"cnn": (2, 3, 8, 8), "block": (2, 4, 16)}

# The DML operator each quantized ONNX op must have become.
EXPECTED = {
    "QLinearConv": "QUANTIZED_LINEAR_CONVOLUTION",
    "QLinearMatMul": "QUANTIZED_LINEAR_MATRIX_MULTIPLY",
    "QGemm": "MATRIX_MULTIPLY_INTEGER",
    "QLinearAdd": "ELEMENT_WISE_QUANTIZED_LINEAR_ADD",
    "QLinearMul": "ELEMENT_WISE_MULTIPLY",
    "QLinearSigmoid": "ACTIVATION_SIGMOID",
    "QLinearLeakyRelu": "ACTIVATION_LEAKY_RELU",
    "QLinearConcat": "JOIN",
    "QLinearAveragePool": "QUANTIZED_LINEAR_AVERAGE_POOLING",
    "QLinearGlobalAveragePool": "QUANTIZED_LINEAR_AVERAGE_POOLING",
    "QLinearSoftmax": "ACTIVATION_SOFTMAX1",
    "QLinearWhere": "ELEMENT_WISE_IF",
    "DequantizeLinear": "ELEMENT_WISE_DEQUANTIZE_LINEAR",
    "DynamicQuantizeLinear": "DYNAMIC_QUANTIZE_LINEAR",
    "MatMulInteger": "MATRIX_MULTIPLY_INTEGER",
    "ConvInteger": "CONVOLUTION_INTEGER",
    "MatMulNBits": "DEQUANTIZE",
}


def _weight(rng, name, shape, scale=0.3):
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def _graph_model(nodes, name, inits, x_shape, y_shape):
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("x", F, x_shape)],
        [helper.make_tensor_value_info("y", F, y_shape)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10  # what onnxruntime 1.30 (the GPU machine) reads
    return model


def _cnn(rng):
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        n("Relu", ["c1"], ["r1"]),
        n("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        n("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        n("LeakyRelu", ["c2"], ["l2"], alpha=0.1),
        n("Conv", ["p1", "w3", "b3"], ["c3"], pads=[1, 1, 1, 1]),
        n("Sigmoid", ["c3"], ["s3"]),
        n("Add", ["l2", "s3"], ["a"]),
        n("Mul", ["a", "s3"], ["m"]),
        n("Concat", ["a", "m"], ["cat"], axis=1),
        n("AveragePool", ["cat"], ["ap"], kernel_shape=[2, 2], strides=[1, 1]),
        n("GlobalAveragePool", ["ap"], ["g"]),
        n("Flatten", ["g"], ["f"]),
        n("Gemm", ["f", "wf", "bf"], ["logits"], transB=1),
        n("Softmax", ["logits"], ["y"], axis=-1),
    ]
    inits = [
        _weight(rng, "w1", (4, 3, 3, 3)),
        _weight(rng, "b1", (4,), 0.1),
        _weight(rng, "w2", (6, 4, 3, 3)),
        _weight(rng, "b2", (6,), 0.1),
        _weight(rng, "w3", (6, 4, 3, 3)),
        _weight(rng, "b3", (6,), 0.1),
        _weight(rng, "wf", (5, 12)),
        _weight(rng, "bf", (5,), 0.1),
    ]
    return _graph_model(nodes, "cnn", inits, SHAPES["cnn"], (2, 5))


def _block(rng):
    n = helper.make_node
    nodes = [
        n("MatMul", ["x", "wq"], ["q"]),
        n("MatMul", ["x", "wk"], ["k"]),
        n("MatMul", ["x", "wv"], ["v"]),
        n("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        n("MatMul", ["q", "kt"], ["s"]),
        n("Mul", ["s", "c"], ["s2"]),
        n("Softmax", ["s2"], ["a"], axis=-1),
        n("MatMul", ["a", "v"], ["h"]),
        n("Add", ["h", "x"], ["hx"]),
        n("Greater", ["h", "zero"], ["positive"]),
        n("Where", ["positive", "hx", "h"], ["r"]),
        n("MatMul", ["r", "w1"], ["f1"]),
        n("Add", ["f1", "b1"], ["f1b"]),
        n("Relu", ["f1b"], ["g"]),
        n("MatMul", ["g", "w2"], ["f2"]),
        n("Add", ["f2", "b2"], ["f2b"]),
        n("Add", ["f2b", "r"], ["y"]),
    ]
    inits = [
        _weight(rng, "wq", (16, 16)),
        _weight(rng, "wk", (16, 16)),
        _weight(rng, "wv", (16, 16)),
        numpy_helper.from_array(np.array(0.25, np.float32), "c"),
        numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
        _weight(rng, "w1", (16, 32)),
        _weight(rng, "b1", (32,), 0.1),
        _weight(rng, "w2", (32, 16)),
        _weight(rng, "b2", (16,), 0.1),
    ]
    return _graph_model(nodes, "block", inits, SHAPES["block"], SHAPES["block"])


class _Reader(quantization.CalibrationDataReader):
    """Four calibration samples."""

    def __init__(self, samples):
        self._it = iter({"x": s} for s in samples)

    def get_next(self):
        return next(self._it, None)


@pytest.fixture(scope="module")
def float_models(tmp_path_factory):
    """The float models on disk, with their calibration samples and test input."""
    rng = np.random.default_rng(2024)
    root = tmp_path_factory.mktemp("float")
    out = {}
    for name, build in (("cnn", _cnn), ("block", _block)):
        path = root / f"{name}.onnx"
        onnx.save(build(rng), path)
        calibration = [rng.standard_normal(SHAPES[name]).astype(np.float32) for _ in range(4)]
        test_input = (rng.standard_normal(SHAPES[name]) * 1.2).astype(np.float32)
        out[name] = (path, calibration, test_input)
    return out


def _static(fmt, per_channel, activations, weights, **extra):
    def quantize(src, dst, calibration):
        quantization.quantize_static(
            str(src),
            str(dst),
            _Reader(calibration),
            quant_format=fmt,
            per_channel=per_channel,
            activation_type=activations,
            weight_type=weights,
            extra_options=extra or None,
        )

    return quantize


def _dynamic(weights):
    def quantize(src, dst, calibration):
        quantization.quantize_dynamic(str(src), str(dst), weight_type=weights)

    return quantize


def _nbits(src, dst, calibration):
    module = pytest.importorskip("onnxruntime.quantization.matmul_nbits_quantizer")
    quantizer = module.MatMulNBitsQuantizer(onnx.load(src), block_size=16, is_symmetric=False)
    quantizer.process()
    quantizer.model.save_model_to_file(str(dst))


S8, U8, S16 = QuantType.QInt8, QuantType.QUInt8, QuantType.QInt16
QOP, QDQ = QuantFormat.QOperator, QuantFormat.QDQ
MS = "com.microsoft."
CNN_QOPS = {"QLinearConv"} | {
    MS + op
    for op in (
        "QGemm",
        "QLinearAdd",
        "QLinearMul",
        "QLinearSigmoid",
        "QLinearLeakyRelu",
        "QLinearConcat",
        "QLinearAveragePool",
        "QLinearGlobalAveragePool",
        "QLinearSoftmax",
    )
}
BLOCK_QOPS = {"QLinearMatMul"} | {
    MS + op for op in ("QLinearAdd", "QLinearMul", "QLinearSoftmax", "QLinearWhere")
}
DYNAMIC = {"DynamicQuantizeLinear", "MatMulInteger"}
FORCE = {"ForceQuantizeNoInputCheck": True}

# (model, tool, kind, op types the quantized model must hold)
CASES = {
    "cnn-dynamic-s8": ("cnn", _dynamic(S8), "dynamic", DYNAMIC | {"ConvInteger"}),
    "cnn-dynamic-u8": ("cnn", _dynamic(U8), "dynamic", DYNAMIC | {"ConvInteger"}),
    "cnn-qop-tensor-u8s8": ("cnn", _static(QOP, False, U8, S8), "qop", CNN_QOPS),
    "cnn-qop-channel-s8s8": ("cnn", _static(QOP, True, S8, S8), "qop", CNN_QOPS),
    "cnn-qdq-tensor-u8u8": ("cnn", _static(QDQ, False, U8, U8), "qdq", {"DequantizeLinear"}),
    "cnn-qdq-channel-u8s8": ("cnn", _static(QDQ, True, U8, S8), "qdq", {"DequantizeLinear"}),
    "block-dynamic-u8": ("block", _dynamic(U8), "dynamic", DYNAMIC),
    # ForceQuantizeNoInputCheck: the tool quantizes Where (QLinearWhere) only with it.
    "block-qop-tensor-u8u8": ("block", _static(QOP, False, U8, U8, **FORCE), "qop", BLOCK_QOPS),
    "block-qop-channel-u8s8": ("block", _static(QOP, True, U8, S8, **FORCE), "qop", BLOCK_QOPS),
    "block-qdq-tensor-s8s8": ("block", _static(QDQ, False, S8, S8), "qdq", {"DequantizeLinear"}),
    "block-qdq-channel-u8s8": ("block", _static(QDQ, True, U8, S8), "qdq", {"DequantizeLinear"}),
    # 16-bit activations: com.microsoft QuantizeLinear / DequantizeLinear (INT16).
    "block-qdq-s16s8": (
        "block",
        _static(QDQ, False, S16, S8, UseQDQContribOps=True),
        "qdq",
        {MS + "QuantizeLinear", MS + "DequantizeLinear"},
    ),
    "block-nbits": ("block", _nbits, "nbits", {MS + "MatMulNBits"}),
}


def _op_types(model):
    return {(f"{n.domain}." if n.domain else "") + n.op_type for n in model.graph.node}


def _output_scale(model) -> float:
    """The scale of the DequantizeLinear that writes the graph's output."""
    params = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    for node in model.graph.node:
        if node.output[0] == model.graph.output[0].name:
            assert node.op_type == "DequantizeLinear", node.op_type
            return float(params[node.input[1]])
    raise AssertionError("no node writes the output")


def _onnxruntime(path, feeds, optimized=True):
    options = ort.SessionOptions()
    if not optimized:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def _check_explain(session, model):
    """Every node ran on DML operators (or was a view / folded; a 16-bit QuantizeLinear is a JAX
    node, no DirectML quantizer writing 16 bits); each quantized op type became its expected
    operator."""
    lines = session.explain().splitlines()
    fired = ""
    if lines[-1].startswith("optimizations: "):  # the graph rewrites that fired
        fired = lines.pop()
    assert len(lines) == len(model.graph.node)
    for line, node in zip(lines, model.graph.node):
        how = re.search(r"\): (\w[\w+]*)", line).group(1)
        sixteen = "JAX:QuantizeLinear.16bit" in line
        assert how in ("dml", "view", "folded") or (sixteen and how == "jax"), line
        want = EXPECTED.get(node.op_type)
        if node.op_type == "QuantizeLinear":
            want = "ELEMENT_WISE_QUANTIZE_LINEAR|JAX:QuantizeLinear\\.16bit"
        if node.op_type == "DequantizeLinear" and re.search("QDQ(MatMul|Conv)Fusion", fired):
            # taken into a product's MATRIX_MULTIPLY_INTEGER_TO_FLOAT or a CONVOLUTION_INTEGER
            # (its constants' entry nodes may remain under its name)
            want += "|ELEMENT_WISE_IDENTITY|rewritten"
        if node.op_type == "Conv" and "QDQConvFusion" in fired:
            want = "CONVOLUTION_INTEGER"
        if node.op_type == "MatMulNBits" and "ParallelQuantizedGemms" in fired:
            # products of one input joined into the first one's GEMM (its DEQUANTIZE, GEMM and
            # SPLIT); the others keep only their constants' entry nodes
            want += "|ELEMENT_WISE_IDENTITY"
        if want:
            assert re.search(rf"\b({want})\b", line), line
    nbits = [line for line, node in zip(lines, model.graph.node) if node.op_type == "MatMulNBits"]
    if nbits:  # joined or not, the 4-bit products are DEQUANTIZE -> GEMM somewhere
        assert any("DEQUANTIZE" in line and "GEMM" in line for line in nbits), nbits


@pytest.mark.parametrize("case", list(CASES))
def test_quantized_model_matches_onnxruntime(case, float_models, tmp_path):
    name, quantize, kind, op_types = CASES[case]
    src, calibration, x = float_models[name]
    path = tmp_path / f"{case}.onnx"
    quantize(src, path, calibration)
    model = onnx.load(path)
    assert op_types <= _op_types(model), sorted(_op_types(model))
    feeds = {"x": x}
    session = InferenceSession(model)
    got = session.run(None, feeds)[0]
    want = _onnxruntime(path, feeds)
    assert got.shape == want.shape and got.dtype == want.dtype
    _check_explain(session, model)
    if kind in ("dynamic", "nbits"):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max())
        return
    step = _output_scale(model)
    if kind == "qop":
        assert np.abs(got - want).max() <= step * 1.001
        return
    as_written = _onnxruntime(path, feeds, optimized=False)
    assert np.abs(got - as_written).max() <= step * 1.001
    fused_moves = np.abs(as_written - want)
    assert np.all(np.abs(got - want) <= fused_moves + step * 1.001)
