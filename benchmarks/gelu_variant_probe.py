"""Experiment: the GELU epilogue's reciprocal as a division (current) or as rsqrt squared
(P^-16 = rsqrt(P)^32, MUFU.RSQ): fc1 of the GPT (M 8192, K 1024, N 4096, float16) with each
schedule, and the error against XLA's erf GELU of the same float16 GEMM node."""

from __future__ import annotations

import math
import sys

import jax
import jax.numpy as jnp
import numpy as np
from timing import timeit

from dml_jax.kernels import gemm as G


def gelu_rsqrt(y):
    a = jnp.abs(y) * np.float32(1 / math.sqrt(2))
    p = 1.0 + a * (
        0.0705230784
        + a
        * (
            0.0422820123
            + a * (0.0092705272 + a * (0.0001520143 + a * (0.0002765672 + a * 0.0000430638)))
        )
    )
    r = jax.lax.rsqrt(p)
    for _ in range(5):
        r = r * r
    return 0.5 * y * jnp.where(y < 0, r, 2.0 - r)


def main() -> int:
    m, k, n = 8192, 1024, 4096
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    a = jax.random.normal(keys[0], (m, k), jnp.float32).astype(jnp.float16)
    b = (jax.random.normal(keys[1], (k, n), jnp.float32) / 32).astype(jnp.float16)
    c = jax.random.normal(keys[2], (1, n), jnp.float32).astype(jnp.float16)
    v = G.View(m, n, k, False)
    node = jax.jit(lambda a, b, c: G.fused_gemm(a, b, v, c=c, c_row=True))(a, b, c)
    want = np.asarray(jax.nn.gelu(node.astype(jnp.float32), approximate=False), np.float32)
    base = G._gelu
    for name, fn in (("division", base), ("rsqrt", gelu_rsqrt)):
        G._gelu = fn
        for sched in ("pingpong", "cooperative"):
            jax.clear_caches()
            f = jax.jit(
                lambda a, b, c, s=sched: G.fused_gemm(
                    a, b, v, c=c, c_row=True, gelu=True, schedule=s
                )
            )
            got = np.asarray(f(a, b, c), np.float32)
            t = min(timeit(f, a, b, c, reps=30) for _ in range(3))
            err = np.abs(got - want)
            ulps = err / np.maximum(np.abs(want), 2**-14) * 2**10
            print(f"{name:9s} {sched:12s} {t * 1e6:7.1f} us  max abs err {err.max():.2e}  "
                  f"max err in float16 units {ulps.max():.2f}", flush=True)  # fmt: skip
    G._gelu = base
    return 0


if __name__ == "__main__":
    sys.exit(main())
