"""A tiny pre-norm transformer as an ONNX model, for the sharded-session checks
(tests/_session_mesh_worker.py, tests/_distributed_worker.py): plain ONNX ops only
(LayerNormalization, MatMul + Add projections, heads by Reshape + Transpose, Softmax, Gelu),
random weights from a fixed seed, inputs ``x`` {batch, seq, d} and output ``y`` of the same
shape. Shared by the worker scripts and the pytest process, which import it by path."""

from __future__ import annotations

import numpy as np


def tiny_transformer(d: int = 16, heads: int = 4, ffn: int = 32, layers: int = 2, seed: int = 0):
    """The model (an ``onnx.ModelProto``); weights are named ``l{i}.{q,k,v,o,fc1,fc2}.w``."""
    import onnx
    from onnx import TensorProto, numpy_helper
    from onnx import helper as h

    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def init(name, array):
        inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def w(name, shape):
        return init(name, (rng.standard_normal(shape) * 0.2).astype(np.float32))

    def node(op, ins, out, **attrs):
        nodes.append(h.make_node(op, ins, [out], **attrs))
        return out

    dh = d // heads
    init("split_heads", np.array([0, 0, heads, dh], np.int64))
    init("merge_heads", np.array([0, 0, d], np.int64))
    init("scale", np.array(1 / np.sqrt(dh), np.float32))
    x = "x"
    for i in range(layers):
        p = f"l{i}."
        hid = node("LayerNormalization", [x, w(p + "ln1.g", (d,)), w(p + "ln1.b", (d,))], p + "h")
        qkv = []
        for t in "qkv":
            y = node("MatMul", [hid, w(p + t + ".w", (d, d))], p + t + "0")
            y = node("Add", [y, w(p + t + ".b", (d,))], p + t + "1")
            y = node("Reshape", [y, "split_heads"], p + t + "2")
            perm = (0, 2, 3, 1) if t == "k" else (0, 2, 1, 3)  # K transposed for Q @ K^T
            qkv.append(node("Transpose", [y], p + t, perm=perm))
        s = node("MatMul", qkv[:2], p + "s0")
        s = node("Softmax", [node("Mul", [s, "scale"], p + "s1")], p + "a", axis=-1)
        o = node("MatMul", [s, qkv[2]], p + "o0")
        o = node("Transpose", [o], p + "o1", perm=(0, 2, 1, 3))
        o = node("Reshape", [o, "merge_heads"], p + "o2")
        o = node("MatMul", [o, w(p + "o.w", (d, d))], p + "o3")
        o = node("Add", [o, w(p + "o.b", (d,))], p + "o4")
        r = node("Add", [x, o], p + "r1")
        hid = node("LayerNormalization", [r, w(p + "ln2.g", (d,)), w(p + "ln2.b", (d,))], p + "h2")
        f = node("MatMul", [hid, w(p + "fc1.w", (d, ffn))], p + "f0")
        f = node("Gelu", [node("Add", [f, w(p + "fc1.b", (ffn,))], p + "f1")], p + "f2")
        f = node("MatMul", [f, w(p + "fc2.w", (ffn, d))], p + "f3")
        f = node("Add", [f, w(p + "fc2.b", (d,))], p + "f4")
        x = node("Add", [r, f], p + "y")
    node("Identity", [x], "y")
    shape = ["batch", "seq", d]
    graph = h.make_graph(
        nodes,
        "tiny_transformer",
        [h.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [h.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        inits,
    )
    return h.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 20)])


def example_input(batch: int, seq: int = 8, d: int = 16, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, seq, d)).astype(np.float32)
