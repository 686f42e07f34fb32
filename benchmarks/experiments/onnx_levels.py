"""ONNX models at each graph optimization level (``dml_jax.onnx.optimize``): which rewrites fire,
the DML node count, agreement with the ``disable`` level, and the time of one call, the levels
timed alternately in one process (median of ``--samples`` samples of ``--iters`` calls, one sync
a sample, each level's samples interleaved with the others').

The models need no downloads: the ``onnx`` package's light networks (ResNet-50, DenseNet-121,
Inception v2, ...; batch 1, their declared shapes), the ORT-optimized BERT and GPT-2 of
``tests/data/onnx`` (batch ``--batch``, sequence 128), and two blocks written here in the
spellings exporters use for what the rewrites fuse (a transformer MLP with decomposed layer norm
and erf GELU; a conv-BN-ReLU stack), with random weights.

Usage: ``PYTHONPATH=. python benchmarks/experiments/onnx_levels.py [--only NAME ...] [--levels disable all]
[--json OUT.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np


def _light(name):
    import onnx

    root = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    return lambda batch: (os.path.join(root, f"light_{name}.onnx"), {})


def _tests_model(name):
    here = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "onnx")
    return lambda batch: (os.path.join(here, f"{name}.onnx"),
                          {"batch_size": batch, "batch": batch, "sequence_length": 128,
                           "seq_len": 128, "sequence": 128})  # fmt: skip


def _mlp_block(batch):
    """x -> LayerNorm (decomposed) -> MatMul + bias -> GELU (erf spelling) -> MatMul + bias +
    residual, 4 times, hidden 768 / 3072, sequence 128."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    h, f, nodes, inits = 768, 3072, [], []

    def const(name, v):
        nodes.append(helper.make_node("Constant", [], [name], value=numpy_helper.from_array(
            np.asarray(v, np.float32), name)))  # fmt: skip

    def init(name, shape, scale=0.02):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(
            np.float32), name))  # fmt: skip

    for c, v in (("two", 2.0), ("eps", 1e-5), ("sq2", np.sqrt(2)), ("one", 1.0), ("half", 0.5)):
        const(c, v)
    x = "x"
    for i in range(4):
        p = f"l{i}_"
        init(p + "g", (h,), 1.0)
        init(p + "b", (h,))
        init(p + "w1", (h, f))
        init(p + "b1", (f,))
        init(p + "w2", (f, h))
        init(p + "b2", (h,))
        mk = lambda op, ins, out, **kw: nodes.append(
            helper.make_node(op, [a if a in ("two", "eps", "sq2", "one", "half") or a == x
                                  else p + a for a in ins], [p + out], **kw))  # fmt: skip
        mk("ReduceMean", [x], "m", axes=[-1])
        mk("Sub", [x, "m"], "d")
        mk("Pow", ["d", "two"], "d2")
        mk("ReduceMean", ["d2"], "v", axes=[-1])
        mk("Add", ["v", "eps"], "ve")
        mk("Sqrt", ["ve"], "s")
        mk("Div", ["d", "s"], "n")
        mk("Mul", ["n", "g"], "ng")
        mk("Add", ["ng", "b"], "ln")
        mk("MatMul", ["ln", "w1"], "h1")
        mk("Add", ["h1", "b1"], "h2")
        mk("Div", ["h2", "sq2"], "ga")
        mk("Erf", ["ga"], "gb")
        mk("Add", ["gb", "one"], "gc")
        mk("Mul", ["h2", "gc"], "gd")
        mk("Mul", ["gd", "half"], "ge")
        mk("MatMul", ["ge", "w2"], "o1")
        mk("Add", ["o1", "b2"], "o2")
        mk("Add", [x, "o2"], "y")
        x = p + "y"
    nodes.append(helper.make_node("Identity", [x], ["y"]))
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 128, h])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), {}


def _conv_block(batch):
    """Conv 3x3 -> BatchNormalization -> Relu, 6 times at 64 channels on 56 x 56."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits, x, c = [], [], "x", 64
    for i in range(6):
        p = f"c{i}_"
        for name, v in (("w", rng.standard_normal((c, c, 3, 3)) * 0.05),
                        ("s", rng.random(c) + 0.5), ("b", rng.standard_normal(c) * 0.1),
                        ("m", rng.standard_normal(c) * 0.1), ("v", rng.random(c) + 0.5)):  # fmt: skip
            inits.append(numpy_helper.from_array(np.asarray(v, np.float32), p + name))
        nodes += [
            helper.make_node("Conv", [x, p + "w"], [p + "c"], pads=[1, 1, 1, 1]),
            helper.make_node(
                "BatchNormalization", [p + "c", p + "s", p + "b", p + "m", p + "v"], [p + "bn"]
            ),
            helper.make_node("Relu", [p + "bn"], [p + "y"]),
        ]
        x = p + "y"
    nodes.append(helper.make_node("Identity", [x], ["y"]))
    graph = helper.make_graph(
        nodes, "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, c, 56, 56])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), {}


MODELS = {
    "resnet50": _light("resnet50"),
    "densenet121": _light("densenet121"),
    "inception_v2": _light("inception_v2"),
    "shufflenet": _light("shufflenet"),
    "bert_optimized": _tests_model("bert_optimized"),
    "gpt2_optimized": _tests_model("gpt2_optimized"),
    "mlp_block": _mlp_block,
    "conv_block": _conv_block,
}


def _inputs(compiled, rng):
    out = []
    for shape, dtype in zip(compiled.input_shapes, compiled.input_dtypes):
        if np.dtype(dtype).kind == "f":
            out.append(rng.standard_normal(shape).astype(dtype))
        else:
            out.append(rng.integers(0, 2, shape).astype(dtype))
    return out


def run(name, opts):
    import jax

    from dml_jax.onnx import compile_onnx

    model, free = MODELS[name](opts.batch)
    row = {"model": name}
    compiled = {}
    for level in opts.levels:
        t = time.perf_counter()
        c = compile_onnx(model, free_dimensions=free or None, optimization_level=level)
        row[f"import_s_{level}"] = round(time.perf_counter() - t, 2)
        row[f"dml_nodes_{level}"] = len(c.imported.graph.nodes)
        row[f"rewrites_{level}"] = dict(c.imported.optimizations)
        compiled[level] = c
    args = [jax.device_put(a) for a in _inputs(compiled[opts.levels[0]], np.random.default_rng(0))]
    fns = {level: jax.jit(c.fn) for level, c in compiled.items()}
    outs = {}
    for level, fn in fns.items():
        t = time.perf_counter()
        outs[level] = [np.asarray(y, np.float64) for y in jax.block_until_ready(fn(*args))]
        row[f"first_call_s_{level}"] = round(time.perf_counter() - t, 2)
    base = outs[opts.levels[0]]
    for level in opts.levels[1:]:
        scale = max(max(float(np.abs(b).max()) for b in base), 1e-6)
        diff = max(float(np.abs(a - b).max()) for a, b in zip(outs[level], base))
        row[f"rel_diff_{level}"] = diff / scale
    samples: dict[str, list[float]] = {level: [] for level in fns}
    for _ in range(opts.samples):
        for level, fn in fns.items():  # interleaved: each sample of each level in turn
            jax.block_until_ready(fn(*args))
            t = time.perf_counter()
            for _ in range(opts.iters):
                y = fn(*args)
            jax.block_until_ready(y)
            samples[level].append((time.perf_counter() - t) / opts.iters)
    for level, s in samples.items():
        row[f"ms_{level}"] = round(statistics.median(s) * 1e3, 3)
    first = row[f"ms_{opts.levels[0]}"]
    for level in opts.levels[1:]:
        row[f"speedup_{level}"] = round(first / row[f"ms_{level}"], 3)
    return row


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", nargs="*", default=None, help="model names (default: all)")
    p.add_argument("--levels", nargs="*", default=["disable", "basic", "extended", "all"])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--samples", type=int, default=7)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--json", default=None, help="write the rows here")
    opts = p.parse_args(argv)
    import jax

    header = {"jax": jax.__version__, "device": str(jax.devices()[0].device_kind),
              "date": time.strftime("%Y-%m-%d"), "levels": opts.levels}  # fmt: skip
    print(json.dumps(header), flush=True)
    rows = []
    for name in opts.only or list(MODELS):
        try:
            rows.append(run(name, opts))
        except Exception as e:
            rows.append({"model": name, "error": f"{type(e).__name__}: {str(e)[:300]}"})
        print(json.dumps(rows[-1]), flush=True)
        if opts.json:
            with open(opts.json, "w") as f:
                json.dump({"header": header, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
