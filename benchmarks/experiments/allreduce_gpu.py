"""One all-reduce of the GPT stack's size (issue 65): the 16.7 MB float16 sum that Megatron's
split of the networks suite's GPT stack runs twice a layer ({8192, 1024}, batch 8 x 1,024
tokens, d_model 1,024), alone, through ``shard_map``'s ``psum`` on every GPU of the machine;
microseconds a call (many calls, one sync) and the bus bandwidth they imply. Run it once per
NCCL setting to compare them (``NCCL_PROTO``, ``NCCL_MIN_NCHANNELS``...: NCCL reads its
environment once, when XLA creates its communicators).

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
    sum_ = jax.jit(
        jax.shard_map(lambda v: jax.lax.psum(v, "x"), mesh=mesh, in_specs=P("x"), out_specs=P("x"))
    )
    x = jax.device_put(jnp.ones((n * a.rows, a.cols), jnp.float16), NamedSharding(mesh, P("x")))
    jax.block_until_ready(sum_(x))
    t = time.perf_counter()
    for _ in range(a.calls):
        out = sum_(x)
    jax.block_until_ready(out)
    us = (time.perf_counter() - t) / a.calls * 1e6
    nbytes = a.rows * a.cols * 2
    env = {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}
    print(json.dumps({"devices": n, "bytes": nbytes, "us": round(us, 1),
                      "bus_GBps": round(nbytes * 2 * (n - 1) / n / us / 1e3, 1), "env": env}))  # fmt: skip


if __name__ == "__main__":
    main()
