"""A BERT-like encoder put through onnxruntime's ``quantize_dynamic`` (DynamicQuantizeLinear +
MatMulInteger + Cast / Mul, per tensor and per channel) against onnxruntime's CPU provider, and
what its program costs to compile.

The integer products' zero-point terms over a constant weight (its column sums) are taken at
trace time (``_quant.signed_known``): left to XLA, its constant folding evaluated every weight's
column sums at each compile, one element at a time (a 4-layer BERT-base encoder compiled in
49 s on the CPU against 1.3 s for its float32 export;
benchmarks/experiments/int8_first_call.py). ``test_no_integer_reductions`` holds the lowered
program to that without timing it: no reduction of an integer tensor is left in it.
"""

from __future__ import annotations

import re

import jax
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
quantization = pytest.importorskip("onnxruntime.quantization")
from onnx import TensorProto, helper, numpy_helper

from dml_jax.onnx import InferenceSession

HIDDEN, HEADS, FFN, SEQ, VOCAB, LAYERS = 64, 4, 128, 16, 50, 2


def _encoder(seed: int = 0) -> onnx.ModelProto:
    """Embeddings, LAYERS blocks of self-attention (MatMul + Add projections, heads by Reshape /
    Transpose, masked Softmax), LayerNormalization and an Erf-form Gelu feed-forward."""
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def const(name, array):
        inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(op, ins, out, **attrs):
        nodes.append(helper.make_node(op, ins, [out], **attrs))
        return out

    def linear(x, p, n_in, n_out):
        w = const(f"{p}.w", (rng.standard_normal((n_in, n_out)) * 0.1).astype(np.float32))
        b = const(f"{p}.b", (rng.standard_normal(n_out) * 0.1).astype(np.float32))
        return node("Add", [node("MatMul", [x, w], f"{p}.mm"), b], f"{p}.out")

    def norm(x, p):
        g = const(f"{p}.g", (1 + 0.1 * rng.standard_normal(HIDDEN)).astype(np.float32))
        b = const(f"{p}.b", (0.1 * rng.standard_normal(HIDDEN)).astype(np.float32))
        return node("LayerNormalization", [x, g, b], f"{p}.out", axis=-1, epsilon=1e-12)

    const("heads", np.array([0, 0, HEADS, HIDDEN // HEADS], np.int64))
    const("hidden", np.array([0, 0, HIDDEN], np.int64))
    const("root", np.array(np.sqrt(HIDDEN // HEADS), np.float32))
    const("one", np.array(1.0, np.float32))
    const("half", np.array(0.5, np.float32))
    const("sqrt2", np.array(np.sqrt(2.0), np.float32))
    const("big", np.array(-10000.0, np.float32))
    const("positions", np.arange(SEQ, dtype=np.int64)[None])
    const("axes", np.array([1, 2], np.int64))
    emb = const("word", rng.standard_normal((VOCAB, HIDDEN)).astype(np.float32))
    pos = const("pos", rng.standard_normal((SEQ, HIDDEN)).astype(np.float32))
    x = node(
        "Add", [node("Gather", [emb, "ids"], "tok"), node("Gather", [pos, "positions"], "p")], "e"
    )
    x = norm(x, "emb")
    mask = node("Cast", [node("Unsqueeze", ["mask", "axes"], "m4")], "mf", to=TensorProto.FLOAT)
    mask = node("Mul", [node("Sub", ["one", mask], "mi"), "big"], "madd")
    for i in range(LAYERS):

        def heads(v, name, perm):
            return node(
                "Transpose", [node("Reshape", [v, "heads"], f"{name}.r")], f"{name}.t", perm=perm
            )

        q = heads(linear(x, f"{i}.q", HIDDEN, HIDDEN), f"{i}.q", [0, 2, 1, 3])
        k = heads(linear(x, f"{i}.k", HIDDEN, HIDDEN), f"{i}.k", [0, 2, 3, 1])
        v = heads(linear(x, f"{i}.v", HIDDEN, HIDDEN), f"{i}.v", [0, 2, 1, 3])
        s = node("Div", [node("MatMul", [q, k], f"{i}.s"), "root"], f"{i}.sd")
        s = node("Softmax", [node("Add", [s, mask], f"{i}.sm")], f"{i}.p", axis=-1)
        c = node("Transpose", [node("MatMul", [s, v], f"{i}.c")], f"{i}.ct", perm=[0, 2, 1, 3])
        c = node("Reshape", [c, "hidden"], f"{i}.cr")
        x = norm(node("Add", [linear(c, f"{i}.o", HIDDEN, HIDDEN), x], f"{i}.r1"), f"{i}.n1")
        h = linear(x, f"{i}.f1", HIDDEN, FFN)
        e = node(
            "Add",
            [node("Erf", [node("Div", [h, "sqrt2"], f"{i}.gd")], f"{i}.ge"), "one"],
            f"{i}.ga",
        )
        h = node("Mul", [node("Mul", [h, e], f"{i}.gm"), "half"], f"{i}.g")
        x = norm(node("Add", [linear(h, f"{i}.f2", FFN, HIDDEN), x], f"{i}.r2"), f"{i}.n2")
    nodes.append(helper.make_node("Identity", [x], ["y"]))
    ints = [
        helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", SEQ]) for n in ("ids", "mask")
    ]
    out = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", SEQ, HIDDEN])]
    graph = helper.make_graph(nodes, "encoder", ints, out, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def quantized_models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("int8")
    src = folder / "float32.onnx"
    onnx.save(_encoder(), src)
    out = {}
    for per_channel in (False, True):
        dst = folder / f"int8_{per_channel}.onnx"
        quantization.quantize_dynamic(
            str(src), str(dst), per_channel=per_channel, weight_type=quantization.QuantType.QInt8
        )
        out[per_channel] = str(dst)
    return out


def _feeds(batch: int = 2) -> dict:
    rng = np.random.default_rng(1)
    mask = np.ones((batch, SEQ), np.int64)
    mask[:, SEQ * 3 // 4 :] = 0
    return {"ids": rng.integers(0, VOCAB, (batch, SEQ)).astype(np.int64), "mask": mask}


def _onnxruntime(path: str, feeds: dict, optimized: bool) -> np.ndarray:
    options = ort.SessionOptions()
    if not optimized:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
def test_quantized_encoder_matches_onnxruntime(quantized_models, per_channel):
    """The integer products are exact on both sides: against onnxruntime's unoptimized graph
    only the float layers' roundings differ (1e-5 of the output range). Optimized, onnxruntime
    fuses DynamicQuantizeLinear + MatMulInteger into its own kernels, which round otherwise
    (per channel its results move by about 1e-3): no further from that than it is from itself."""
    path, feeds = quantized_models[per_channel], _feeds()
    session = InferenceSession(path)
    assert "MATRIX_MULTIPLY_INTEGER" in session.explain([(2, SEQ), (2, SEQ)])
    ours = np.asarray(session.run(None, feeds)[0])
    plain = _onnxruntime(path, feeds, optimized=False)
    fused = _onnxruntime(path, feeds, optimized=True)
    span = float(np.abs(plain).max())
    np.testing.assert_allclose(ours, plain, rtol=0, atol=1e-5 * span)
    assert np.abs(ours - fused).max() <= np.abs(plain - fused).max() + 1e-5 * span


def _integer_reductions(text: str) -> list[str]:
    return [
        line.strip()
        for line in text.splitlines()
        if "stablehlo.reduce" in line and re.search(r"tensor<[0-9x]*[iu](8|16|32)>", line)
    ]


@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
def test_no_integer_reductions(quantized_models, per_channel):
    """The weights' column sums are constants of the program and their zero points (0, the
    symmetric INT8 weights) drop their terms: the lowered program reduces only float tensors
    (LayerNormalization, Softmax, DynamicQuantizeLinear's range), so that XLA folds no
    reduction of a weight at compile time."""
    session = InferenceSession(quantized_models[per_channel])
    ids = np.zeros((1, SEQ), np.int64)
    text = jax.jit(session.fn_on()).trace(ids, ids).lower().as_text()
    assert _integer_reductions(text) == []
    # DynamicQuantizeLinear's min and max, 2 per layer norm, 2 per softmax, 1 for the mask.
    layers = 4 * 2 + 2 * 2 + 2
    assert text.count("stablehlo.reduce") == 1 + 2 + LAYERS * layers


def _matmul_integer(a_type, b_type, a_zero, b_zero, a_const: bool | None):
    """MatMulInteger with one operand an initializer, the zero points initializers too, or with
    ``a_const`` None A and its zero point inputs (a zero point known only at run time)."""
    rng = np.random.default_rng(3)
    lo = {TensorProto.UINT8: (0, 256, np.uint8), TensorProto.INT8: (-128, 128, np.int8)}
    a = rng.integers(*lo[a_type][:2], (2, 3, 32)).astype(lo[a_type][2])
    b = rng.integers(*lo[b_type][:2], (32, 8)).astype(lo[b_type][2])
    az = np.asarray(a_zero, lo[a_type][2])
    bz = np.asarray(b_zero, lo[b_type][2])
    inits = [numpy_helper.from_array(bz, "bz")]
    inputs = []
    if a_const is None:
        inputs.append(helper.make_tensor_value_info("az", a_type, list(az.shape)))
    else:
        inits.append(numpy_helper.from_array(az, "az"))
    if a_const:
        inits.append(numpy_helper.from_array(a, "a"))
        inputs.append(helper.make_tensor_value_info("b", b_type, list(b.shape)))
        feeds = {"b": b}
    else:
        inits.append(numpy_helper.from_array(b, "b"))
        inputs.append(helper.make_tensor_value_info("a", a_type, list(a.shape)))
        feeds = {"a": a} if a_const is not None else {"a": a, "az": az}
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])],
        "g",
        inputs,
        [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    return model.SerializeToString(), feeds


@pytest.mark.parametrize(
    "a_type, b_type, a_zero, b_zero, a_const",
    [
        (TensorProto.UINT8, TensorProto.INT8, 131, 0, False),
        (TensorProto.UINT8, TensorProto.INT8, 131, [0] * 8, False),
        (TensorProto.UINT8, TensorProto.UINT8, 7, 128, False),
        (TensorProto.UINT8, TensorProto.UINT8, 7, list(range(120, 136, 2)), False),
        (TensorProto.INT8, TensorProto.INT8, -5, [0, 1, -1, 3, 0, 0, 2, -7], False),
        (TensorProto.UINT8, TensorProto.UINT8, 200, 128, True),
        (TensorProto.INT8, TensorProto.UINT8, 0, 3, True),
        (TensorProto.INT8, TensorProto.INT8, -9, 0, None),
        (TensorProto.UINT8, TensorProto.UINT8, 77, [5] * 8, None),
    ],
    ids=[
        "s8_zero",
        "s8_zero_columns",
        "u8_128",
        "u8_columns",
        "s8_columns",
        "a_const",
        "a_const_s8",
        "s8_run_time_zero",
        "u8_run_time_zero",
    ],
)
def test_known_operand_matches_onnxruntime(a_type, b_type, a_zero, b_zero, a_const):
    """Known operands' sums and zero points (taken at trace time), beside zero points known
    only at run time, against onnxruntime's integer result, exactly."""
    model, feeds = _matmul_integer(a_type, b_type, a_zero, b_zero, a_const)
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    ours = InferenceSession(model).run(None, feeds)[0]
    np.testing.assert_array_equal(np.asarray(ours), ref)
