"""The GPT stack's portable lowering with a known causal mask computed in blocks (issue 42,
the portable-path goal): ``ops.attention.CAUSAL_BLOCKS`` swept against the same network in
plain JAX, in one process.

The GPT stack of ``examples/networks.py`` (the networks suite's throughput size unless
``--batch`` / ``--seq`` / ``--layers`` say otherwise) compiled with ``fast_paths=False``, its
causal mask a constant data node: with n blocks the MULTIHEAD_ATTENTION lax lowering computes
the tiles of query block i and key block j <= i only (``ops.attention._causal_tiles``; blocks
of more than 64 rows rounded up to a multiple of 64); ``1`` computes the whole S x T square
(the lowering before the blocks). ``--half`` adds the same with ALLOW_HALF_PRECISION_COMPUTATION.
Every row's output is compared with the first one's and with the jax reference's.

Usage: ``PYTHONPATH=. python benchmarks/experiments/causal_blocks.py [--dtype FLOAT32 --batch 1]
[--blocks 1 2 4 8] [--half]``. Figures: the README beside this file.
"""

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

from dml_jax.bench.harness import Timer, cold_time, examples_module, jax_sync
from dml_jax.graph import tracing
from dml_jax.ops import attention as A

p = argparse.ArgumentParser()
p.add_argument("--dtype", default="FLOAT16")
p.add_argument("--batch", type=int, default=8)
p.add_argument("--seq", type=int, default=1024)
p.add_argument("--d-model", type=int, default=1024)
p.add_argument("--heads", type=int, default=16)
p.add_argument("--layers", type=int, default=12)
p.add_argument("--blocks", nargs="+", type=int, default=[1, 2, 4, 8])
p.add_argument("--half", action="store_true")
p.add_argument("--samples", type=int, default=5)
args = p.parse_args()

nets = examples_module("networks")
net = nets.gpt_stack(args.batch, args.seq, args.d_model, args.heads, args.layers, args.dtype)
x = net.example_data()["x"]
inputs = [jax.device_put(a) for a in net.arguments(x=x)]
dtype = jnp.float16 if args.dtype == "FLOAT16" else jnp.float32
timer = Timer(samples=args.samples)
tokens = args.batch * args.seq
print(f"{jax.devices()[0].device_kind}, jax {jax.__version__}, {args.dtype}, batch "
      f"{args.batch} x {args.seq} tokens, {args.layers} layers")  # fmt: skip

params = jax.device_put({k: jnp.asarray(v, dtype) for k, v in net.parameters.items()})
ref = jax.jit(lambda p, x: nets.gpt_reference(p, x, args.batch, args.heads, args.layers, dtype))
xd = jax.device_put(jnp.asarray(x, dtype))
cold, want = cold_time(lambda: ref(params, xd), jax_sync)
hot = timer.run(lambda: ref(params, xd), jax_sync)
base = hot
want = np.asarray(want, np.float32).reshape(-1)
print(f"{'jax reference':28s} {hot * 1e3:8.2f} ms {tokens / hot:12,.0f} tok/s  cold {cold:5.1f} s")

first = None
for half in (False, True) if args.half else (False,):
    for blocks in args.blocks:
        A.CAUSAL_BLOCKS, A.CAUSAL_MIN_ROWS = blocks, 1
        tracing._compile_graph_cached.cache_clear()
        fn = net.compile(fast_paths=False, allow_half_precision=half)
        t = time.perf_counter()
        cold, out = cold_time(lambda fn=fn: fn(*inputs), jax_sync)
        hot = timer.run(lambda fn=fn: fn(*inputs), jax_sync)
        out = np.asarray(out, np.float32).reshape(-1)
        first = out if first is None else first
        scale = float(np.max(np.abs(want)))
        vs_first = float(np.max(np.abs(out - first))) / scale
        vs_ref = float(np.max(np.abs(out - want))) / scale
        label = f"dml lax{' half' if half else ''} blocks {blocks}"
        print(
            f"{label:28s} {hot * 1e3:8.2f} ms {tokens / hot:12,.0f} tok/s  cold {cold:5.1f} s  "
            f"x ref {base / hot:5.2f}  rel diff first {vs_first:.1e}  ref {vs_ref:.1e}",
            flush=True,
        )
