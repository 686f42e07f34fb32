"""Experiment: where the GELU epilogue's time goes (fc1 of the GPT, M 8192, K 1024, N 4096,
float16): bias only, GELU, GELU replaced by the identity (the float16 round trip alone), and
a GELU whose GEMM node is rounded with a Veltkamp split in float32 (no conversions).
Run from the repository root: PYTHONPATH=. python benchmarks/gelu_epilogue_probe.py"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np
from timing import timeit

from dml_jax.kernels import gemm as G


def main() -> int:
    m, k, n = 8192, 1024, 4096
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    a = jax.random.normal(keys[0], (m, k), jnp.float32).astype(jnp.float16)
    b = (jax.random.normal(keys[1], (k, n), jnp.float32) / 32).astype(jnp.float16)
    c = jax.random.normal(keys[2], (1, n), jnp.float32).astype(jnp.float16)
    v = G.View(m, n, k, False)
    gelu = G._gelu
    flops = 2 * m * n * k

    def run(label, **kw):
        jax.clear_caches()
        f = jax.jit(lambda a, b, c: G.fused_gemm(a, b, v, c=c, c_row=True, **kw))
        y = f(a, b, c)
        t = timeit(f, a, b, c, reps=50)
        print(f"{label:28s} {t * 1e6:8.1f} us  {flops / t / 1e12:6.1f} TFLOP/s", flush=True)
        return y

    run("bias")
    want = run("bias + gelu", gelu=True)
    G._gelu = lambda y: y
    run("bias + identity round trip", gelu=True)
    G._gelu = gelu
    xla = jax.jit(lambda a, b, c: jax.nn.gelu((a @ b + c).astype(jnp.float16), approximate=False))
    t = timeit(xla, a, b, c, reps=50)
    print(f"{'XLA gemm + gelu':28s} {t * 1e6:8.1f} us", flush=True)
    err = np.max(np.abs(np.asarray(want, np.float32) - np.asarray(xla(a, b, c), np.float32)))
    print("max abs diff vs XLA", err)
    return 0


if __name__ == "__main__":
    sys.exit(main())
