"""Where a dynamically quantized (int8) BERT-like encoder's first call goes, against its float32
export: session construction (import, folding, graph optimizations), trace, lowering, XLA
compile, first run, call time; DML node count, StableHLO size and constants.

The encoder is built with ``onnx.helper`` (no PyTorch): token and position embeddings (Gather),
``layers`` blocks of self-attention (q / k / v / out MatMul + Add bias, Reshape / Transpose to
heads, scores MatMul, Div by sqrt(head), Add mask, Softmax, MatMul), LayerNormalization, and the
feed-forward (MatMul, Gelu in its Erf form, MatMul); batch dynamic, sequence fixed. The int8
files are onnxruntime's ``quantize_dynamic`` of it, per tensor and per channel
(DynamicQuantizeLinear + MatMulInteger + Cast / Mul).

Usage: ``JAX_PLATFORMS=cpu PYTHONPATH=. python benchmarks/experiments/int8_first_call.py
[--layers 4] [--hidden 768] [--heads 12] [--ffn 3072] [--seq 128] [--batch 1] [--only
float32 int8 int8_channel] [--calls 10]``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def encoder(
    layers: int = 4,
    hidden: int = 768,
    heads: int = 12,
    ffn: int = 3072,
    seq: int = 128,
    vocab: int = 1000,
    seed: int = 0,
) -> onnx.ModelProto:
    """A BERT-like float32 encoder: input_ids / attention_mask [batch, seq] (INT64) -> the last
    hidden state [batch, seq, hidden]."""
    rng = np.random.default_rng(seed)
    inits, nodes = [], []
    head = hidden // heads

    def const(name, array):
        inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def weight(name, *shape, scale=0.02):
        return const(name, (rng.standard_normal(shape) * scale).astype(np.float32))

    def node(op, ins, out, **attrs):
        nodes.append(helper.make_node(op, ins, [out], name=out, **attrs))
        return out

    def linear(x, prefix, n_in, n_out):
        y = node("MatMul", [x, weight(f"{prefix}.w", n_in, n_out)], f"{prefix}.mm")
        return node("Add", [y, weight(f"{prefix}.b", n_out)], f"{prefix}.out")

    def layer_norm(x, prefix):
        g = const(f"{prefix}.g", np.ones(hidden, np.float32))
        b = const(f"{prefix}.beta", np.zeros(hidden, np.float32))
        return node("LayerNormalization", [x, g, b], f"{prefix}.out", axis=-1, epsilon=1e-12)

    const("heads_shape", np.array([0, 0, heads, head], np.int64))
    const("hidden_shape", np.array([0, 0, hidden], np.int64))
    const("sqrt_head", np.array(np.sqrt(head), np.float32))
    const("one", np.array(1.0, np.float32))
    const("big", np.array(-10000.0, np.float32))
    const("half", np.array(0.5, np.float32))
    const("sqrt2", np.array(np.sqrt(2.0), np.float32))
    const("positions", np.arange(seq, dtype=np.int64)[None])
    tok = node("Gather", [weight("word_emb", vocab, hidden), "input_ids"], "tok")
    pos = node("Gather", [weight("pos_emb", seq, hidden), "positions"], "pos")
    x = layer_norm(node("Add", [tok, pos], "emb"), "emb_ln")
    mask = node("Unsqueeze", ["attention_mask", const("mask_axes", [1, 2])], "mask4")
    mask = node("Cast", [mask], "mask_f", to=TensorProto.FLOAT)
    mask = node("Sub", ["one", mask], "mask_inv")
    mask = node("Mul", [mask, "big"], "mask_add")
    for i in range(layers):
        p = f"l{i}"

        def heads_of(v, name, perm):
            r = node("Reshape", [v, "heads_shape"], f"{name}.r")
            return node("Transpose", [r], f"{name}.t", perm=perm)

        q = heads_of(linear(x, f"{p}.q", hidden, hidden), f"{p}.q", [0, 2, 1, 3])
        k = heads_of(linear(x, f"{p}.k", hidden, hidden), f"{p}.k", [0, 2, 3, 1])
        v = heads_of(linear(x, f"{p}.v", hidden, hidden), f"{p}.v", [0, 2, 1, 3])
        s = node("MatMul", [q, k], f"{p}.scores")
        s = node("Div", [s, "sqrt_head"], f"{p}.scaled")
        s = node("Add", [s, mask], f"{p}.masked")
        s = node("Softmax", [s], f"{p}.probs", axis=-1)
        c = node("MatMul", [s, v], f"{p}.ctx")
        c = node("Transpose", [c], f"{p}.ctx.t", perm=[0, 2, 1, 3])
        c = node("Reshape", [c, "hidden_shape"], f"{p}.ctx.r")
        a = linear(c, f"{p}.o", hidden, hidden)
        x = layer_norm(node("Add", [a, x], f"{p}.res1"), f"{p}.ln1")
        h = linear(x, f"{p}.f1", hidden, ffn)
        e = node("Erf", [node("Div", [h, "sqrt2"], f"{p}.g.d")], f"{p}.g.erf")
        e = node("Add", [e, "one"], f"{p}.g.a")
        h = node("Mul", [node("Mul", [f"{p}.f1.out", e], f"{p}.g.m"), "half"], f"{p}.g.out")
        h = linear(h, f"{p}.f2", ffn, hidden)
        x = layer_norm(node("Add", [h, x], f"{p}.res2"), f"{p}.ln2")
    nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"]))
    graph = helper.make_graph(
        nodes,
        "encoder",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", seq]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", seq]),
        ],
        [
            helper.make_tensor_value_info(
                "last_hidden_state", TensorProto.FLOAT, ["batch", seq, hidden]
            )
        ],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def quantized(model: onnx.ModelProto, folder: str, name: str, per_channel: bool) -> str:
    """onnxruntime's ``quantize_dynamic`` of ``model`` (weights INT8), written to ``folder``."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    src = os.path.join(folder, f"{name}_src.onnx")
    dst = os.path.join(folder, f"{name}.onnx")
    onnx.save(model, src)
    quantize_dynamic(src, dst, per_channel=per_channel, weight_type=QuantType.QInt8)
    return dst


def _timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def measure(path: str, feeds: dict, calls: int) -> dict:
    """Each phase of ``path``'s first call, timed apart, and the program's sizes."""
    import jax

    from dml_jax.onnx import InferenceSession

    shapes = [feeds[k].shape for k in ("input_ids", "attention_mask")]
    t_session, session = _timed(lambda: InferenceSession(path))
    t_import, _ = _timed(lambda: session.program(shapes))
    explained = session.explain(shapes)
    fn = jax.jit(session.fn_on(), compiler_options=session.compiler_options or None)
    args = [jax.device_put(feeds[k]) for k in ("input_ids", "attention_mask")]
    t_trace, traced = _timed(lambda: fn.trace(*args))
    t_lower, lowered = _timed(traced.lower)
    t_compile, compiled = _timed(lowered.compile)
    t_run, out = _timed(lambda: jax.block_until_ready(compiled(*args)))
    text = lowered.as_text()
    ops = sum(1 for line in text.splitlines() if " = " in line)
    consts = sum(1 for line in text.splitlines() if "stablehlo.constant" in line)
    hot = []
    for _ in range(calls):
        t = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        hot.append(time.perf_counter() - t)
    nodes = sum(
        len(line.split("dml: ")[1].split(", "))
        for line in explained.splitlines()
        if "dml: " in line
    )
    return dict(
        session=t_session, program=t_import, trace=t_trace, lower=t_lower,
        compile=t_compile, first=t_run, nodes=nodes, hlo=ops, consts=consts,
        hlo_chars=len(text), hot_ms=1e3 * float(np.median(hot)), out=np.asarray(out[0]),
    )  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--ffn", type=int, default=3072)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--calls", type=int, default=10)
    p.add_argument("--only", nargs="*", default=["float32", "int8", "int8_channel"])
    p.add_argument("--ort", action="store_true", help="compare with onnxruntime's CPU provider")
    args = p.parse_args()
    import jax

    model = encoder(args.layers, args.hidden, args.heads, args.ffn, args.seq)
    rng = np.random.default_rng(1)
    feeds = {
        "input_ids": rng.integers(0, 1000, (args.batch, args.seq)).astype(np.int64),
        "attention_mask": np.ones((args.batch, args.seq), np.int64),
    }
    feeds["attention_mask"][:, args.seq * 3 // 4 :] = 0
    print(f"jax {jax.__version__}, {jax.devices()[0].device_kind}, {args.layers} layers, "
          f"hidden {args.hidden}, seq {args.seq}, batch {args.batch}")  # fmt: skip
    print("model | session s | program s | trace s | lower s | compile s | first run s | total s "
          "| DML nodes | HLO ops | HLO consts | HLO MB | hot ms | vs ort")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only:
            if name == "float32":
                path = os.path.join(tmp, "float32.onnx")
                onnx.save(model, path)
            else:
                path = quantized(model, tmp, name, per_channel=name.endswith("channel"))
            r = measure(path, feeds, args.calls)
            total = sum(r[k] for k in ("session", "program", "trace", "lower", "compile", "first"))
            diff = ""
            if args.ort:
                import onnxruntime as ort

                ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
                diff = f"{np.abs(ref.run(None, feeds)[0] - r['out']).max():.2e}"
            print(f"{name} | {r['session']:.2f} | {r['program']:.2f} | {r['trace']:.2f} | "
                  f"{r['lower']:.2f} | {r['compile']:.2f} | {r['first']:.2f} | {total:.2f} | "
                  f"{r['nodes']} | {r['hlo']} | {r['consts']} | {r['hlo_chars'] / 1e6:.1f} | "
                  f"{r['hot_ms']:.2f} | {diff}", flush=True)  # fmt: skip
            jax.clear_caches()


if __name__ == "__main__":
    main()
