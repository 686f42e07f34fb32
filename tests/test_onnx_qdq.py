"""QDQ products (``optimize/quantized.py``): DequantizeLinear -> MatMul <- DequantizeLinear
becomes MATRIX_MULTIPLY_INTEGER_TO_FLOAT over the 8-bit values; its value against the product
written from the definitions (integer sums, scales applied once), against the session without
the rewrite and against onnxruntime; and the forms it leaves alone."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper

from dml_jax.onnx import InferenceSession

M, K, N = 8, 64, 48


def _model(rng, per_channel: bool, act_type=np.int8, bias: bool = True, trans: bool = False):
    """x (float32) -> QuantizeLinear -> DequantizeLinear -> MatMul (or Gemm with transB) by
    int8 weights through DequantizeLinear (one scale, or one per column), plus a bias."""
    sx, zx = np.float32(0.05), act_type(3)
    wq = rng.integers(-127, 128, (N, K) if trans else (K, N)).astype(np.int8)
    sw = (rng.uniform(0.002, 0.01, N) if per_channel else np.float32(0.004)).astype(np.float32)
    zw = np.zeros(N if per_channel else (), np.int8)
    b = (rng.standard_normal(N) * 0.1).astype(np.float32)
    inits = [
        numpy_helper.from_array(np.array(sx), "sx"), numpy_helper.from_array(np.array(zx), "zx"),
        numpy_helper.from_array(wq, "wq"), numpy_helper.from_array(np.array(sw), "sw"),
        numpy_helper.from_array(np.array(zw), "zw"), numpy_helper.from_array(b, "b"),
    ]  # fmt: skip
    axis = {"axis": 0 if trans else 1} if per_channel else {}
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
        helper.make_node("DequantizeLinear", ["wq", "sw", "zw"], ["wd"], **axis),
    ]
    if trans:
        nodes.append(helper.make_node("Gemm", ["xd", "wd"], ["h"], transB=1))
    else:
        nodes.append(helper.make_node("MatMul", ["xd", "wd"], ["h"]))
    out = "h"
    if bias:
        nodes.append(helper.make_node("Add", ["h", "b"], ["y"]))
        out = "y"
    graph = helper.make_graph(
        nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [M, K])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, [M, N])], inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    params = {"sx": sx, "zx": zx, "wq": wq.T if trans else wq, "sw": sw, "b": b if bias else 0 * b}
    return model.SerializeToString(), params


def _reference(x, p):
    """The definitions: x quantized (round half to even, saturated), the integer sums of the
    zero-point-free operands, the scales applied once, then the bias (float64)."""
    info = np.iinfo(np.asarray(p["zx"]).dtype)
    xq = np.clip(np.rint(x / p["sx"]) + int(p["zx"]), info.min, info.max).astype(np.int64)
    acc = (xq - int(p["zx"])) @ p["wq"].astype(np.int64)
    return acc * (np.float64(p["sx"]) * p["sw"].astype(np.float64)) + p["b"]


@pytest.mark.parametrize("per_channel", [False, True])
def test_qdq_matmul_runs_as_an_integer_product(rng, per_channel):
    data, p = _model(rng, per_channel)
    x = (rng.standard_normal((M, K)) * 2).astype(np.float32)
    s = InferenceSession(data)
    (got,) = s.run(None, {"x": x})
    (program,) = s._programs.values()
    ops = program.operators()
    assert "MATRIX_MULTIPLY_INTEGER_TO_FLOAT" in ops and "GEMM" not in ops, ops
    want = _reference(x, p)
    scale = np.abs(want).max()
    assert scale > 0.1 and want.std() > 0.05 * scale  # a reference that can tell values apart
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * scale)
    # the float GEMM of the dequantized operands: the same up to rounding
    (plain,) = InferenceSession(data, disabled_optimizers=["QDQMatMulFusion"]).run(None, {"x": x})
    np.testing.assert_allclose(got, plain, rtol=1e-5, atol=1e-5 * scale)
    ort = pytest.importorskip("onnxruntime")
    (theirs,) = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(got, theirs, rtol=1e-5, atol=1e-5 * scale)


@pytest.mark.parametrize(
    "why, kw", [("uint8 activations, int8 weights", {"act_type": np.uint8}),
                ("Gemm with transB", {"trans": True})],
)  # fmt: skip
def test_forms_left_as_float_products(rng, why, kw):
    data, p = _model(rng, True, **kw)
    x = (rng.standard_normal((M, K)) * 2).astype(np.float32)
    s = InferenceSession(data)
    (got,) = s.run(None, {"x": x})
    (program,) = s._programs.values()
    assert "GEMM" in program.operators(), why
    want = _reference(x, p)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
