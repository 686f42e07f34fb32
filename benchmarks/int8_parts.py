"""Where the int8 GEMM fast path's time goes at M = N = K = 4096 (one GPU): the kernel alone,
with the zero-point terms, and its XLA-side pieces (B's transpose, the row and column sums).

    XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=. python benchmarks/int8_parts.py
"""

from __future__ import annotations

import json
import sys

import jax
import jax.numpy as jnp
from timing import timeit

from dml_jax.kernels import int8_gemm as K


def main() -> int:
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
    kx, ky = jax.random.split(jax.random.PRNGKey(0))
    x = jax.random.randint(kx, (size, size), -128, 128, jnp.int32).astype(jnp.int8)
    y = jax.random.randint(ky, (size, size), -128, 128, jnp.int32).astype(jnp.int8)
    xz = jnp.full((size, 1), 3, jnp.int32)
    yz = jnp.full((1, size), -5, jnp.int32)
    ops = 2 * size**3
    cases = {
        "kernel, no zero points": (lambda a, b: K.int8_product(a, None, b, None), (x, y)),
        "kernel, per-row and per-column zero points": (
            lambda a, b, p, q: K.int8_product(a, p, b, q), (x, y, xz, yz)),
        "B transposed": (lambda b: jnp.swapaxes(b, 0, 1) + 0, (y,)),
        "column sums of B": (lambda b: jnp.sum(b, axis=0, dtype=jnp.int32), (y,)),
        "row sums of A": (lambda a: jnp.sum(a, axis=1, dtype=jnp.int32), (x,)),
    }  # fmt: skip
    for name, (fn, args) in cases.items():
        t = timeit(jax.jit(fn), *args)
        print(json.dumps(dict(case=name, size=size, us=t * 1e6, tops=ops / t / 1e12)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
