"""Whole ONNX models mapped onto DirectML operators (``dml.compile_onnx``) against ONNX Runtime.

The models are built here with ``onnx.helper``: an MLP, a small CNN (Conv, BatchNormalization,
Relu, MaxPool, Flatten, Gemm, Softmax) and a transformer block (MatMul, LayerNormalization,
Softmax, Gelu, Transpose, Reshape). Each runs as one DML graph and matches ONNX Runtime's CPU
provider within float32 tolerance (skipped without onnxruntime). Unsupported op types name the
node and the type.
"""

from __future__ import annotations

import numpy as np
import pytest

import dml_jax as dml
from dml_jax import cli

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT


def _w(rng, name, *shape, scale=0.5):
    return numpy_helper.from_array((rng.normal(size=shape) * scale).astype(np.float32), name)


def _ints(name, values):
    return numpy_helper.from_array(np.asarray(values, np.int64), name)


def _model(nodes, inputs, outputs, initializers, opset=20):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    return model


def mlp(rng):
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Add", ["h", "b1"], ["hb"]),
        helper.make_node("Relu", ["hb"], ["r"]),
        helper.make_node("Gemm", ["r", "w2", "b2"], ["y"], transB=1, alpha=0.5, beta=2.0),
        helper.make_node("Sigmoid", ["y"], ["z"]),
    ]
    inits = [_w(rng, "w1", 6, 8), _w(rng, "b1", 8), _w(rng, "w2", 3, 8), _w(rng, "b2", 3)]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", F, [4, 6])],
        [helper.make_tensor_value_info("z", F, [4, 3])],
        inits,
    ), {"x": rng.normal(size=(4, 6)).astype(np.float32)}


def cnn(rng):
    nodes = [
        helper.make_node("Conv", ["x", "cw", "cb"], ["c"], pads=[1, 1, 1, 1], strides=[1, 1]),
        helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["bn"], epsilon=1e-3),
        helper.make_node("Relu", ["bn"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p", "gw"], ["g"], group=2, strides=[2, 2], pads=[0, 0, 1, 1]),
        helper.make_node("GlobalAveragePool", ["g"], ["ga"]),
        helper.make_node("Flatten", ["ga"], ["f"]),
        helper.make_node("Gemm", ["f", "fw", "fb"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probs"]),
    ]
    var = numpy_helper.from_array(rng.uniform(0.5, 1.5, 4).astype(np.float32), "v")
    inits = [
        _w(rng, "cw", 4, 3, 3, 3),
        _w(rng, "cb", 4),
        _w(rng, "s", 4),
        _w(rng, "b", 4),
        _w(rng, "m", 4),
        var,
        _w(rng, "gw", 6, 2, 3, 3),
        _w(rng, "fw", 6, 5),
        _w(rng, "fb", 5),
    ]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", F, [2, 3, 8, 8])],
        [helper.make_tensor_value_info("probs", F, [2, 5])],
        inits,
    ), {"x": rng.normal(size=(2, 3, 8, 8)).astype(np.float32)}


def transformer_block(rng):
    d, heads, seq = 8, 2, 5
    hd = d // heads
    nodes = [
        helper.make_node("LayerNormalization", ["x", "g1", "b1"], ["n1"], axis=-1),
        helper.make_node("MatMul", ["n1", "wq"], ["q"]),
        helper.make_node("MatMul", ["n1", "wk"], ["k"]),
        helper.make_node("MatMul", ["n1", "wv"], ["v"]),
        helper.make_node("Reshape", ["q", "heads_shape"], ["q4"]),
        helper.make_node("Reshape", ["k", "heads_shape"], ["k4"]),
        helper.make_node("Reshape", ["v", "heads_shape"], ["v4"]),
        helper.make_node("Transpose", ["q4"], ["qh"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["k4"], ["kt"], perm=[0, 2, 3, 1]),
        helper.make_node("Transpose", ["v4"], ["vh"], perm=[0, 2, 1, 3]),
        helper.make_node("MatMul", ["qh", "kt"], ["scores"]),
        helper.make_node("Div", ["scores", "scale"], ["scaled"]),
        helper.make_node("Softmax", ["scaled"], ["att"], axis=-1),
        helper.make_node("MatMul", ["att", "vh"], ["ctx"]),
        helper.make_node("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ctx_t", "model_shape"], ["merged"]),
        helper.make_node("MatMul", ["merged", "wo"], ["o"]),
        helper.make_node("Add", ["x", "o"], ["res1"]),
        helper.make_node("LayerNormalization", ["res1", "g2", "b2"], ["n2"], axis=-1),
        helper.make_node("MatMul", ["n2", "w_up"], ["up"]),
        helper.make_node("Add", ["up", "bias_up"], ["up_b"]),
        helper.make_node("Gelu", ["up_b"], ["act"]),
        helper.make_node("MatMul", ["act", "w_down"], ["down"]),
        helper.make_node("Add", ["res1", "down"], ["y"]),
    ]
    inits = [
        _w(rng, "g1", d),
        _w(rng, "b1", d),
        _w(rng, "wq", d, d),
        _w(rng, "wk", d, d),
        _w(rng, "wv", d, d),
        _w(rng, "wo", d, d),
        _w(rng, "g2", d),
        _w(rng, "b2", d),
        _w(rng, "w_up", d, 4 * d),
        _w(rng, "bias_up", 4 * d),
        _w(rng, "w_down", 4 * d, d),
        _ints("heads_shape", [0, 0, heads, hd]),
        _ints("model_shape", [0, 0, d]),
        numpy_helper.from_array(np.asarray(np.sqrt(hd), np.float32), "scale"),
    ]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", F, [2, seq, d])],
        [helper.make_tensor_value_info("y", F, [2, seq, d])],
        inits,
    ), {"x": rng.normal(size=(2, seq, d)).astype(np.float32)}


def data_movement(rng):
    """Concat, Split, Slice, Gather, Unsqueeze, Squeeze, Cast, Where, comparisons, reductions."""
    nodes = [
        helper.make_node("Concat", ["x", "x"], ["cat"], axis=1),
        helper.make_node("Split", ["cat", "split"], ["s0", "s1"], axis=1),
        helper.make_node("Slice", ["s1", "starts", "ends", "axes", "steps"], ["sl"]),
        helper.make_node("Gather", ["sl", "idx"], ["ga"], axis=1),
        helper.make_node("Unsqueeze", ["ga", "ax0"], ["un"]),
        helper.make_node("Squeeze", ["un", "ax0"], ["sq"]),
        helper.make_node("ReduceMean", ["sq", "ax1"], ["mean"], keepdims=1),
        helper.make_node("Greater", ["sq", "mean"], ["gt"]),
        helper.make_node("Where", ["gt", "sq", "zero"], ["w"]),
        helper.make_node("ReduceSum", ["w", "ax1"], ["rs"], keepdims=0),
        helper.make_node("Cast", ["rs"], ["y"], to=TensorProto.FLOAT16),
        helper.make_node("Pow", ["s0", "two"], ["p"]),
        helper.make_node("Sqrt", ["p"], ["sp"]),
        helper.make_node("Abs", ["s0"], ["ab"]),
        helper.make_node("Sub", ["sp", "ab"], ["diff"]),
        helper.make_node("LogSoftmax", ["diff"], ["ls"], axis=0),
        helper.make_node("Exp", ["ls"], ["e"]),
        helper.make_node("Erf", ["e"], ["er"]),
        helper.make_node("LeakyRelu", ["er"], ["lr"], alpha=0.2),
        helper.make_node("Tanh", ["lr"], ["z"]),
    ]
    inits = [
        _ints("split", [3, 3]),
        _ints("starts", [0, 2]),
        _ints("ends", [4, -4]),
        _ints("axes", [0, 1]),
        _ints("steps", [1, -1]),
        _ints("idx", [1, 0, 1]),
        _ints("ax0", [0]),
        _ints("ax1", [1]),
        numpy_helper.from_array(np.zeros((), np.float32), "zero"),
        numpy_helper.from_array(np.full((), 2, np.float32), "two"),
    ]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", F, [4, 3])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT16, [4]),
            helper.make_tensor_value_info("z", F, [4, 3]),
        ],
        inits,
        opset=18,
    ), {"x": rng.normal(size=(4, 3)).astype(np.float32)}


MODELS = {
    "mlp": mlp,
    "cnn": cnn,
    "transformer_block": transformer_block,
    "data_movement": data_movement,
}


def _ort(model, feeds):
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_matches_onnxruntime(name, rng):
    model, feeds = MODELS[name](rng)
    compiled = dml.compile_onnx(model)
    got = compiled(**feeds)
    got = got if isinstance(got, tuple) else (got,)
    want = _ort(model, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        tol = 2e-3 if w.dtype == np.float16 else 2e-5
        np.testing.assert_allclose(
            np.asarray(g, np.float32), w.astype(np.float32), rtol=tol, atol=tol
        )


def test_model_is_one_graph_traced_once(rng):
    model, feeds = cnn(rng)
    compiled = dml.compile_onnx(model, optimization_level="disable")  # the import's operators
    assert isinstance(compiled.imported.graph, dml.GraphDesc)
    ops = {n.operator_type for n in compiled.imported.graph.nodes}
    assert {
        "DML_OPERATOR_CONVOLUTION",
        "DML_OPERATOR_BATCH_NORMALIZATION",
        "DML_OPERATOR_MAX_POOLING2",
        "DML_OPERATOR_GEMM",
    } <= ops
    compiled(feeds["x"])
    traced = compiled.graph.traces
    compiled(feeds["x"] + 1)
    assert compiled.graph.traces == traced  # the second call reuses the XLA program


def test_unsupported_op_names_node_and_type():
    model = _model(
        [
            helper.make_node("Abs", ["x"], ["r"], name="act"),
            helper.make_node("StringNormalizer", ["r"], ["y"], name="pick"),
        ],
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [16])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, [4, 4, 3])],
        [],
    )
    with pytest.raises(
        dml.ValidationError,
        match=r"^ONNX: node 1 \('pick', StringNormalizer\): op type "
        r"'StringNormalizer' is not supported",
    ):
        dml.compile_onnx(model)


def test_free_dimension_needs_a_size():
    model = _model(
        [helper.make_node("Relu", ["x"], ["y"])],
        [helper.make_tensor_value_info("x", F, ["N", 3])],
        [helper.make_tensor_value_info("y", F, ["N", 3])],
        [],
    )
    with pytest.raises(dml.ValidationError, match="dimension 0 is 'N'"):
        dml.compile_onnx(model)
    y = dml.compile_onnx(model, free_dimensions={"N": 2})(-np.ones((2, 3), np.float32))
    np.testing.assert_array_equal(y, np.zeros((2, 3)))


def test_cli_runs_an_onnx_file(tmp_path, capsys, rng):
    model, feeds = mlp(rng)
    file = tmp_path / "mlp.onnx"
    file.write_bytes(model.SerializeToString())
    np.save(tmp_path / "x.npy", feeds["x"])
    assert (
        cli.main(["run", str(file), "--input", f"x={tmp_path / 'x.npy'}", "--allow-outside-paths"])
        == 0
    )
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("Resource 'output:z': "))
    values = np.array([float(v) for v in line.split(": ", 1)[1].split(", ")])
    want = np.asarray(dml.compile_onnx(model)(feeds["x"])).ravel()
    np.testing.assert_allclose(values, want, rtol=1e-5)
