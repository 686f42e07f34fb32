"""Transformer attention blocks in the exporters' spellings at each graph optimization level:
what AttentionFusion (``dml_jax.onnx.optimize.attention``) makes of them and the time of one
call, through ``benchmarks/experiments/onnx_levels.py``'s harness (the levels timed alternately in one
process; its columns).

The blocks (random weights, no downloads), each ``--layers`` layers of projections, attention,
output projection and residual, in float16 (cuDNN's fused attention applies) and float32:

- ``bert_ts``: torch.onnx.export's TorchScript spelling of BERT-base self-attention (12 heads of
  64, sequence ``--seq``): Div by a Constant, the keys transposed by Transpose(0, 2, 3, 1), an
  additive padding mask computed from an int64 mask input (a RelativePositionBias);
- ``gpt2_ts``: GPT-2's causal Where(tril, w, lowest) (a BOOLEAN mask; cuDNN's causal mode);
- ``llama_dynamo``: the dynamo exporter's scaled_dot_product_attention decomposition with
  grouped key/value heads (32 query heads, 8 key/value heads of 128) repeated by Unsqueeze /
  Expand / Reshape, sqrt(scale) initializers on Q and K, a causal initializer added, the IsNaN
  guard.

Usage: ``PYTHONPATH=. python benchmarks/experiments/onnx_attention.py [--only NAME ...] [--levels disable
all] [--batch 8] [--seq 512] [--layers 4] [--json OUT.json]``; ``--models-dir DIR`` adds the
``*.onnx`` files of DIR (with their declared shapes).
"""

from __future__ import annotations

import glob
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import onnx_levels

OPTS = {"seq": 512, "layers": 4}


def _block(style: str, dtype, batch: int, heads: int, head: int, kv_heads: int):
    """One model of ``OPTS['layers']`` attention layers in ``style``'s spelling."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    s, e = OPTS["seq"], heads * head
    nodes, inits, count = [], [], [0]

    def name(base):
        count[0] += 1
        return f"{base}{count[0]}"

    def node(op, inputs, **attrs):
        out = name(op.lower())
        nodes.append(helper.make_node(op, list(inputs), [out], **attrs))
        return out

    def init(value, kind=None):
        n = name("w")
        inits.append(numpy_helper.from_array(np.asarray(value, kind or dtype), n))
        return n

    def const(value, kind=None):
        n = name("c")
        array = np.asarray(value, kind or dtype)
        nodes.append(helper.make_node("Constant", [], [n], value=numpy_helper.from_array(array, n)))
        return n

    def shape(*dims):
        return const(np.array(dims, np.int64), np.int64)

    def project(x, n_heads):
        w = init(rng.standard_normal((e, n_heads * head)) / math.sqrt(e))
        y = node("Add", [node("MatMul", [x, w]), init(rng.standard_normal(n_heads * head) * 0.1)])
        return node("Reshape", [y, shape(batch, s, n_heads, head)])

    def heads_first(t):
        return node("Transpose", [t], perm=[0, 2, 1, 3])

    x = "x"
    padding = None
    if style == "bert_ts":
        m = node("Unsqueeze", ["mask", const(np.array([1, 2], np.int64), np.int64)])
        m = node("Cast", [m], to=helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))
        m = node("Sub", [const(1.0), m])
        padding = node("Mul", [m, const(np.finfo(dtype).min)])
    tril = np.tril(np.ones((1, 1, s, s), bool))
    causal_add = np.triu(np.full((1, 1, s, s), np.finfo(dtype).min, dtype), 1)
    for _ in range(OPTS["layers"]):
        q = heads_first(project(x, heads))
        if style == "llama_dynamo":
            k, v = (heads_first(project(x, kv_heads)) for _ in range(2))
            group = heads // kv_heads

            def repeat(t, group=group):
                t = node("Unsqueeze", [t, const(np.array([2], np.int64), np.int64)])
                t = node("Expand", [t, shape(batch, kv_heads, group, s, head)])
                return node("Reshape", [t, shape(batch, heads, s, head)])

            k, v = repeat(k), repeat(v)
            root = init(math.sqrt(1 / math.sqrt(head)))
            q = node("Mul", [q, root])
            k = node("Mul", [node("Transpose", [k], perm=[0, 1, 3, 2]), root])
            w = node("Add", [node("MatMul", [q, k]), init(causal_add)])
        else:
            k = node("Transpose", [project(x, heads)], perm=[0, 2, 3, 1])
            v = heads_first(project(x, heads))
            w = node("Div", [node("MatMul", [q, k]), const(math.sqrt(head))])
            if style == "gpt2_ts":
                w = node("Where", [init(tril, np.bool_), w, const(np.finfo(dtype).min)])
            else:
                w = node("Add", [w, padding])
        p = node("Softmax", [w], axis=-1)
        if style == "llama_dynamo":
            p = node("Where", [node("IsNaN", [p]), init(0.0), p])
        o = node("Transpose", [node("MatMul", [p, v])], perm=[0, 2, 1, 3])
        o = node("Reshape", [o, shape(batch, s, e)])
        o = node("MatMul", [o, init(rng.standard_normal((e, e)) / math.sqrt(e))])
        x = node("Add", [x, o])
    nodes.append(helper.make_node("Identity", [x], ["y"]))
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    inputs = [helper.make_tensor_value_info("x", elem, [batch, s, e])]
    if padding is not None:
        inputs.append(helper.make_tensor_value_info("mask", TensorProto.INT64, [batch, s]))
    graph = helper.make_graph(
        nodes, style, inputs, [helper.make_tensor_value_info("y", elem, None)], inits
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), {}


def _register() -> None:
    for dtype, tag in ((np.float16, "fp16"), (np.float32, "fp32")):
        for style, heads, head, kv in (
            ("bert_ts", 12, 64, 12),
            ("gpt2_ts", 12, 64, 12),
            ("llama_dynamo", 32, 128, 8),
        ):
            onnx_levels.MODELS[f"{style}_{tag}"] = lambda batch, a=(style, dtype, heads, head, kv): (
                _block(a[0], a[1], batch, *a[2:])
            )


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    for flag in ("--seq", "--layers"):
        if flag in argv:
            k = argv.index(flag)
            OPTS[flag[2:]] = int(argv[k + 1])
            del argv[k : k + 2]
    directory = None
    if "--models-dir" in argv:
        k = argv.index("--models-dir")
        directory = argv[k + 1]
        del argv[k : k + 2]
    onnx_levels.MODELS.clear()
    _register()
    if directory:
        for path in sorted(glob.glob(os.path.join(directory, "*.onnx"))):
            name = os.path.splitext(os.path.basename(path))[0]
            onnx_levels.MODELS[name] = lambda batch, path=path: (path, {})
    if "--levels" not in argv:
        argv += ["--levels", "disable", "all"]
    return onnx_levels.main(argv)


if __name__ == "__main__":
    sys.exit(main())
