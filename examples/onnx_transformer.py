"""A pre-norm transformer as an ONNX model, run on one device and sharded over every device.

    python examples/onnx_transformer.py --mesh model     # tensor parallel over all devices
    python examples/onnx_transformer.py --mesh data      # data parallel
    python examples/onnx_transformer.py --mesh both      # 2 x (devices / 2): data x model

The model uses plain ONNX ops only (LayerNormalization, MatMul + Add projections, heads by
Reshape + Transpose, Softmax, Gelu) with random weights from a fixed seed; input ``x`` {batch,
seq, d} and output ``y`` of the same shape. The script checks the sharded session against the
one-device session, times both (``session.apply`` on inputs already placed, median of
``--runs`` calls) and lists the collectives of the sharded program. Without accelerators it
asks XLA for 4 simulated CPU devices and runs a small model (the timings then show only that it
works). The sharded
session tests (tests/_session_mesh_worker.py, tests/_distributed_worker.py) build their tiny
model with ``tiny_transformer`` from here.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__" and "xla_force_host_platform_device_count" not in os.environ.get(
    "XLA_FLAGS", ""
):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
    ).strip()

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
    # IR version 10 (opset 20's): onnxruntime releases that read fewer versions than the onnx
    # package writes still load the model (and quantize it).
    return h.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 20)], ir_version=10)


def example_input(batch: int, seq: int = 8, d: int = 16, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, seq, d)).astype(np.float32)


def main(argv: list[str] | None = None) -> None:
    import argparse
    import time

    import jax
    from jax.sharding import Mesh

    from dml_jax import hlo
    from dml_jax.onnx import InferenceSession

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mesh", choices=("data", "model", "both"), default="model")
    p.add_argument("--d-model", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--ffn", type=int, default=4096)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--runs", type=int, default=20)
    a = p.parse_args(argv)
    if jax.default_backend() == "cpu":  # a quick look, not a measurement
        a.d_model, a.heads, a.ffn, a.layers, a.batch, a.seq = 64, 4, 256, 2, 4, 32
    devices = jax.devices()
    n = len(devices)
    shape = {"data": ((n,), ("data",)), "model": ((n,), ("model",))}
    shape["both"] = ((2, n // 2), ("data", "model"))
    mesh = jax.make_mesh(*shape[a.mesh])
    model = tiny_transformer(a.d_model, a.heads, a.ffn, a.layers)
    x = example_input(a.batch, a.seq, a.d_model)
    print(f"{n} {jax.default_backend()} device(s); mesh {dict(mesh.shape)}; d_model {a.d_model}, "
          f"{a.heads} heads, ffn {a.ffn}, {a.layers} layers, batch {a.batch} x seq {a.seq}")  # fmt: skip
    # The one-device run is a session on a mesh of one device: the same code path (weights
    # placed once, one jitted program), so the two timings differ only by the sharding.
    one = InferenceSession(model, mesh=Mesh(np.array(devices[:1]), ("data",)))
    sharded = InferenceSession(model, mesh=mesh)
    (want,) = one.run(None, {"x": x})
    (got,) = sharded.run(None, {"x": x})
    err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
    print(f"sharded vs one device: max abs diff / max |y| = {err:.2e}")

    def timed(session):
        program = session.program([x.shape])
        (placed,) = session._placed(program, [x])  # inputs already on the devices
        jax.block_until_ready(session.apply(None, placed))
        samples = []
        for _ in range(a.runs):
            t = time.perf_counter()
            jax.block_until_ready(session.apply(None, placed))
            samples.append(time.perf_counter() - t)
        return float(np.median(samples)), program, placed

    t1, _, _ = timed(one)
    tn, program, placed = timed(sharded)
    print(f"one device {t1 * 1e3:.2f} ms; {n} devices {tn * 1e3:.2f} ms ({t1 / tn:.2f}x)")
    params = sharded._mesh_params(program)
    text = program.jitted.lower(params, placed).compile().as_text()
    found = hlo.collectives(text)
    counts = ", ".join(f"{v['count']} {k} ({v['bytes'] / 2**20:.1f} MiB)" for k, v in found.items())
    print(f"collectives in the sharded program: {counts or 'none'} ({a.layers} layers)")
    split = {k: str(v) for k, v in sharded.layout().items() if k.startswith("l0.") and any(v)}
    print(f"layer 0's split weights: {split}")


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    main()
