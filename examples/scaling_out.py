"""Scaling out: the same DirectML descriptors on arrays sharded across devices.

Run it anywhere::

    python examples/scaling_out.py

Without accelerators it asks XLA for 8 simulated CPU devices (the flag must be set before JAX
starts; on a GPU or TPU machine JAX's default backend is the accelerators and the flag only adds
unused CPU devices). Every sharded result is checked against the unsharded run.
"""

from __future__ import annotations

import os

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    ).strip()

import re

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import dml_jax as dml

# An HLO instruction that moves data between devices (async forms end in -start).
COLLECTIVE = re.compile(
    r"\s(all-gather|all-to-all|collective-permute|all-reduce|reduce-scatter)(?:-start)?\("
)


def main() -> None:
    devices = jax.devices()
    n = len(devices)
    print(f"{n} {jax.default_backend()} device(s)")
    mesh = jax.make_mesh((n,), ("x",))  # 1-D mesh over every device
    rows = NamedSharding(mesh, P("x"))  # dimension 0 split across devices
    replicated = NamedSharding(mesh, P())

    # The descriptors say nothing about devices: logical sizes only.
    x = dml.TensorDesc("FLOAT32", (16 * n, 64))
    total = dml.ReduceOperatorDesc("SUM", x, x.like(sizes=(1, 64)), axes=[0])
    host = np.random.default_rng(0).standard_normal((16 * n, 64), dtype=np.float32)
    expected = dml.compile_operator(total)(host)  # unsharded

    # 1. compile_operator with shardings: op(...) places its inputs and runs one GSPMD program.
    op = dml.compile_operator(total, in_shardings=rows, out_shardings=replicated)
    got = op(host)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    print("REDUCE SUM over the sharded axis, result sharding:", got.sharding.spec)

    # 2. No shardings given: already-sharded arrays just work under jax.jit(op.fn).
    xs = jax.device_put(host, rows)
    got = jax.jit(dml.compile_operator(total).fn)(xs)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)

    # 3. ARGMAX over the sharded axis: ties across shard boundaries still give the first index.
    ties = np.zeros((16 * n, 4), np.float32)
    ties[[3, 16 * n - 1], :] = 7.0  # equal maxima on the first and the last device
    arg = dml.compile_operator(
        dml.ArgMaxOperatorDesc(
            dml.TensorDesc("FLOAT32", ties.shape), dml.TensorDesc("UINT32", (1, 4)), axes=[0]
        )
    )
    first = jax.jit(arg.fn)(jax.device_put(ties, rows))
    assert np.asarray(first).tolist() == [[3, 3, 3, 3]], first
    print("ARGMAX with ties on different devices:", np.asarray(first).tolist())

    # 4. A graph (CLIP -> REDUCE) compiled with shardings: one program, rows stay local.
    clip = dml.ElementWiseClipOperatorDesc(x, x, min=-1.0, max=1.0)
    row_sum = dml.ReduceOperatorDesc("SUM", x, x.like(sizes=(16 * n, 1)), axes=[1])
    graph = dml.GraphDesc(
        input_count=1,
        output_count=1,
        nodes=[clip, row_sum],
        input_edges=[dml.InputGraphEdge(0, 0, 0)],
        intermediate_edges=[dml.IntermediateGraphEdge(0, 0, 1, 0)],
        output_edges=[dml.OutputGraphEdge(1, 0, 0)],
    )
    g = dml.compile_graph(graph, in_shardings=rows, out_shardings=rows)
    np.testing.assert_allclose(
        g(host), np.clip(host, -1, 1).sum(1, keepdims=True), rtol=1e-5, atol=1e-5
    )
    print("graph CLIP -> REDUCE, result sharding:", g(host).sharding.spec)

    # 5. shard_map: an element-wise operator described for ONE device's block runs on every
    # block; the result equals the whole-tensor operator because CLIP looks at one element.
    block = dml.TensorDesc("FLOAT32", (16, 64))
    local_clip = dml.compile_operator(dml.ElementWiseClipOperatorDesc(block, block, -1.0, 1.0))
    per_block = jax.jit(jax.shard_map(local_clip.fn, mesh=mesh, in_specs=P("x"), out_specs=P("x")))
    np.testing.assert_array_equal(per_block(xs), dml.compile_operator(clip)(host))

    # 6. What XLA inserts when SPLIT cuts across the sharded axis (read from the program).
    split = dml.compile_operator(
        dml.SplitOperatorDesc(x, [x.like(sizes=(3, 64)), x.like(sizes=(16 * n - 3, 64))], axis=0)
    )
    text = (
        jax.jit(split.fn, in_shardings=rows)
        .lower(jax.ShapeDtypeStruct(x.sizes, np.float32))
        .compile()
        .as_text()
    )
    found = sorted(set(re.findall(COLLECTIVE, text)))
    print("SPLIT across the sharded axis, collectives:", found or "none")


if __name__ == "__main__":
    main()
