"""One all-reduce of the GPT stack's size (issue 65): the 16.7 MB float16 sum that Megatron's
split of the networks suite's GPT stack runs twice a layer ({8192, 1024}, batch 8 x 1,024
tokens, d_model 1,024), alone, through ``shard_map``'s ``psum`` on every GPU of the machine;
microseconds a call (many calls, one sync) and the bus bandwidth they imply. Run it once per
NCCL setting to compare them (``NCCL_PROTO``, ``NCCL_MIN_NCHANNELS``...: NCCL reads its
environment once, when XLA creates its communicators).

On two devices it also times the same sum as each device adding what the other sends it
(``x + ppermute(x)``, the form a split product's partial sums would take; the same bits as
``psum``): XLA's collective-permute runs on NCCL's send and receive
kernels, or with ``--xla_gpu_use_memcpy_local_p2p=true`` in ``XLA_FLAGS`` as a copy between
the GPUs (the copy engines, no multiprocessor), which could run beside a product. And both
forms beside a float16 product of the stack's first MLP shape ({8192, 1024} x {1024, 2048}),
independent of the sum, in one program: microseconds for the product alone, the sum alone and
the two together (no overlap: their sum; full overlap: the longer).

Usage: ``NCCL_...=... PYTHONPATH=. python3 benchmarks/experiments/allreduce_gpu.py [--rows
8192] [--cols 1024]``.
"""

from __future__ import annotations

import argparse
import json
import os
import time


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=8192)
    p.add_argument("--cols", type=int, default=1024)
    p.add_argument("--calls", type=int, default=200)
    a = p.parse_args()
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    n = len(jax.devices())
    mesh = jax.make_mesh((n,), ("x",))

    def mapped(fn, ins=1):
        return jax.jit(
            jax.shard_map(fn, mesh=mesh, in_specs=(P("x"),) * ins, out_specs=P("x"))
        )  # fmt: skip

    def timed(fn, *args) -> float:
        jax.block_until_ready(fn(*args))
        t = time.perf_counter()
        for _ in range(a.calls):
            out = fn(*args)
        jax.block_until_ready(out)
        return (time.perf_counter() - t) / a.calls * 1e6

    def pair(v):
        return v + jax.lax.ppermute(v, "x", [(0, 1), (1, 0)])

    def product(u):
        return u @ w

    sums = {"psum": lambda v: jax.lax.psum(v, "x")}
    if n == 2:
        sums["pair_permute"] = pair
    values = jax.random.normal(jax.random.key(0), (n * a.rows, a.cols), jnp.float16)
    x = jax.device_put(values, NamedSharding(mesh, P("x")))
    u = jax.device_put(jnp.ones((n * a.rows, a.cols), jnp.float16), NamedSharding(mesh, P("x")))
    w = jnp.full((a.cols, 2 * a.cols), 0.01, jnp.float16)
    nbytes = a.rows * a.cols * 2
    env = {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}
    report = {
        "devices": n,
        "bytes": nbytes,
        "env": env,
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
    }
    report["product_us"] = round(timed(mapped(product), u), 1)
    for name, fn in sums.items():
        us = timed(mapped(fn), x)
        both = timed(mapped(lambda v, z, fn=fn: (fn(v), product(z)), 2), x, u)
        report[name] = {"us": round(us, 1), "bus_GBps": round(nbytes * 2 * (n - 1) / n / us / 1e3, 1),
                        "with_product_us": round(both, 1)}  # fmt: skip
        same = mapped(lambda v, fn=fn: fn(v) - jax.lax.psum(v, "x"))(x)
        report[name]["max_diff_from_psum"] = float(jnp.abs(same).max())
    print(json.dumps(report))


if __name__ == "__main__":
    main()
