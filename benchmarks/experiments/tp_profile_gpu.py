"""Where the time of a program split over two GPUs goes (issue 65): the GPT stack of the
networks suite tensor-parallel and the scaling suite's REDUCE over the sharded axis and CLIP ->
REDUCE graph, each on one device and on a mesh of ``--devices``, with the same descriptors.

For each program and device count:

- milliseconds a call (many dispatches, one sync) and a call with a sync after it;
- the compiled program's collectives (count, and the bytes of their results) and its custom
  calls (cuDNN, Triton kernels), from the optimized HLO;
- from a ``jax.profiler`` trace of a few calls, on the first device: the summed kernel time a
  call, the span from its first kernel to its last, and the largest kernels by total time.

A split program whose kernels sum to half the one-device time but whose span is longer waits
on collectives or the host; one whose kernels sum to more does more work per device.

``gpt-sp`` is the same stack with its tokens split over the devices between the layers as
well (the input and output rows over the mesh): GSPMD then gathers the tokens before the
products that read them whole and scatters the sums after the split ones, the form in which
XLA's windowed einsums (``--xla_gpu_threshold_for_windowed_einsum_mib=0``,
``--xla_gpu_multi_streamed_windowed_einsum=true`` in ``XLA_FLAGS``) can overlap the
collectives with the products.

Usage (a machine of two GPUs, repository root): ``PYTHONPATH=. python3
benchmarks/experiments/tp_profile_gpu.py [--only gpt reduce0 graph] [--layers 12]
[--no-per-shard] [--split-only]``; writes ``$OUT/tp_profile.json`` when ``OUT`` is set.
``--no-per-shard``: the GEMM kernel gives way to lax in the split programs, as before it ran on
each device's shards (``fastpath.PER_SHARD``); ``--split-only`` leaves out the one-GPU run. (The
sums as pair permutes in blocks of rows, ``--sum-forms``, timed no faster on two H200s and went
with ``gemm_shards``' switches: git history, benchmarks/experiments/README.md.)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections import Counter

import gpu_trace  # this folder's
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples"))


def hlo_summary(text: str) -> dict:
    """Collectives (``dml_jax.hlo.collectives``: count and the bytes of their results, and here
    also how many XLA left synchronous) and custom-call targets of optimized HLO text."""
    from dml_jax import hlo

    out: dict = hlo.collectives(text)
    for kind, entry in out.items():
        starts = re.findall(rf"\s{kind}-start\((.*)", text)
        plain = len(re.findall(rf"\s{kind}\(", text))
        entry["sync"] = plain + sum('"is_sync":true' in rest for rest in starts)
    targets = Counter(re.findall(r'custom_call_target="([^"]+)"', text))
    out["custom_calls"] = dict(targets)
    return out


def profile(fn, calls: int = 5) -> dict:
    """Per GPU (the first two), kernels a call from a trace of ``calls`` calls."""
    folder = gpu_trace.record(fn, calls)
    return {plane: gpu_trace.kernels(folder, calls, plane, top=12)
            for plane in gpu_trace.planes(folder)[:2]}  # fmt: skip


def timed(fn, sync, seconds: float = 1.0) -> dict:
    import jax

    sync(fn())
    t = time.perf_counter()
    sync(fn())
    one = time.perf_counter() - t
    reps = int(np.clip(seconds / max(one, 1e-6), 5, 500))
    # (on simulated CPU devices, calls in flight together can deadlock in their collectives)
    cpu = jax.default_backend() == "cpu"
    t = time.perf_counter()
    for _ in range(reps):
        out = fn()
        if cpu:
            sync(out)
    sync(out)
    many = (time.perf_counter() - t) / reps
    lat = []
    for _ in range(min(reps, 50)):
        t = time.perf_counter()
        sync(fn())
        lat.append(time.perf_counter() - t)
    return {"ms_throughput": many * 1e3, "ms_latency_median": float(np.median(lat)) * 1e3}


def programs(args):
    """(name, count) -> (call, sync, compiled HLO text)."""
    import jax
    import networks
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    import dml_jax as dml
    from dml_jax.bench.suites import scaling

    def sync(out):
        jax.block_until_ready(out)

    devices = jax.devices()
    for count in (1, args.devices)[1 if args.split_only else 0 :]:
        mesh = jax.make_mesh((count,), ("x",), devices=devices[:count])
        for name, data_axis, out in (("gpt", None, P()), ("gpt-sp", "x", P("x", None))):
            if name not in args.only:
                continue
            net = (
                networks.gpt_stack(8, 1024, 1024, 16, args.layers, "FLOAT16")
                if args.full
                else networks.gpt_stack(2, 64, 64, 4, 2, "FLOAT16")
            )
            ins = networks.shardings(net, mesh, data_axis, "x")
            g = net.compile(in_shardings=ins, out_shardings=NamedSharding(mesh, out))
            values = [
                jax.device_put(a, s) for a, s in zip(net.arguments(x=net.example_data()["x"]), ins)
            ]
            text = g._jitted.lower(*values).compile().as_text()
            yield (name, count), (lambda g=g, v=values: g(*v)), sync, text
            del net, g, values
        for name in [n for n in args.only if n.startswith("gpt-mb") or n == "gpt-lax"]:
            call, sync, text = _microbatched(args, name, mesh, count)
            yield (name, count), call, sync, text
        rows, cols = (16384, 16384) if args.full else (1024, 512)
        rs, rep = NamedSharding(mesh, P("x")), NamedSharding(mesh, P())
        host = np.random.default_rng(0).standard_normal((rows, cols), dtype=np.float32)
        x = jax.device_put(host, rs)
        # the scaling suite's REDUCE over the sharded axis and CLIP -> REDUCE graph
        _, reduce0, graph = (desc for _, desc, _ in scaling.suite_cases(rows, cols))
        for name, desc, out in (("reduce0", reduce0, rep), ("graph", graph, rs)):
            if name in args.only:
                compile_fn = dml.compile_graph if name == "graph" else dml.compile_operator
                op = compile_fn(desc, in_shardings=rs, out_shardings=out)
                text = op._jitted.lower(x).compile().as_text()
                yield (name, count), (lambda op=op: op(x)), sync, text
        del x


def _microbatched(args, name: str, mesh, count: int):
    """``gpt-mbN``: the tensor-parallel GPT stack as N graphs of batch / N (one graph compiled
    at the smaller batch, called on each slice of the tokens in one program), so that each
    slice's all-reduces can overlap the other slices' products; ``gpt-lax``: the stack on
    every node's lax lowering (on one device the fast paths' baseline)."""
    import jax
    import jax.numpy as jnp
    import networks
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    parts = int(name[6:]) if name.startswith("gpt-mb") else 1
    batch, seq, d = (8, 1024, 1024) if args.full else (2, 64, 64)
    heads, layers = (16, args.layers) if args.full else (4, 2)
    net = networks.gpt_stack(batch // parts, seq, d, heads, layers, "FLOAT16")
    ins = networks.shardings(net, mesh, None, "x")
    whole = NamedSharding(mesh, P())
    # (compiled with its shardings and called inside the program: the graph compiled without
    # them and traced there made XLA split the residual stream's rows between the products,
    # an all-gather more a layer)
    g = net.compile(ins, whole, fast_paths=name != "gpt-lax")
    x = np.random.default_rng(0).standard_normal((batch * seq, d), np.float32).astype(np.float16)
    rows = batch // parts * seq

    def program(x, *weights):
        outs = [g(x[i * rows : (i + 1) * rows], *weights) for i in range(parts)]
        return jnp.concatenate(outs, axis=0)

    f = jax.jit(program, in_shardings=tuple(ins), out_shardings=whole)
    values = [jax.device_put(a, s) for a, s in zip(net.arguments(x=x), ins)]
    text = f.lower(*values).compile().as_text()
    return (lambda: f(*values)), (lambda out: jax.block_until_ready(out)), text


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--devices", type=int, default=2)
    p.add_argument("--only", nargs="*", default=["gpt", "reduce0", "graph"],
                   help="of gpt, gpt-sp, gpt-mbN, gpt-lax, reduce0, graph")  # fmt: skip
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--small", dest="full", action="store_false", help="tiny sizes (a CPU check)")
    p.add_argument("--no-per-shard", action="store_true",
                   help="kernels give way to lax in the split programs (fastpath.PER_SHARD off)")  # fmt: skip
    p.add_argument("--split-only", action="store_true", help="the split programs alone")
    args = p.parse_args()
    import jax

    from dml_jax import fastpath

    fastpath.PER_SHARD = not args.no_per_shard

    print(jax.devices()[0].device_kind, len(jax.devices()), jax.__version__, flush=True)
    results = {}
    for (name, count), fn, sync, text in programs(args):
        key = f"{name} x{count}"
        try:
            r = timed(fn, sync)
            r["hlo"] = hlo_summary(text)
            r["profile"] = profile(fn)
        except Exception as e:  # recorded, the next program runs
            r = {"error": f"{type(e).__name__}: {e}"[:500]}
        results[key] = r
        print(key, json.dumps(r), flush=True)
        if os.environ.get("OUT"):
            with open(os.path.join(os.environ["OUT"], "tp_profile.json"), "w") as f:
                json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
