"""Where the int8 GEMM fast path's time goes at M = N = K = 4096 (one GPU): the kernel alone,
with the zero-point terms, and its XLA-side pieces (B's transpose, the row and column sums).

    XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=.:benchmarks python benchmarks/int8_parts.py [SIZE] [--profile]

``--profile``: the CUDA kernels of one call of each kernel row, by device time (CUPTI through
``torch.profiler``), instead of the timings.
"""

from __future__ import annotations

import json
import sys

import jax
import jax.numpy as jnp
from timing import timeit

from dml_jax.kernels import int8_gemm as K


def main() -> int:
    sizes = [a for a in sys.argv[1:] if a.isdigit()]
    size = int(sizes[0]) if sizes else 4096
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
    if "--profile" in sys.argv:
        import quantized

        import dml_jax as dml

        chosen = {k: v for k, v in cases.items() if k.startswith("kernel")}
        for name, _, desc, arrays in quantized.dml_cases(size):
            if "INTEGER" in name:
                chosen[name] = (dml.compile_operator(desc).fn, tuple(arrays))
        _profile(chosen)
        return 0
    for name, (fn, args) in cases.items():
        t = timeit(jax.jit(fn), *args)
        print(json.dumps(dict(case=name, size=size, us=t * 1e6, tops=ops / t / 1e12)), flush=True)
    return 0


def _profile(cases) -> None:
    from collections import defaultdict

    import torch

    for name, (fn, args) in cases.items():
        f = jax.jit(fn)
        jax.block_until_ready(f(*args))
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                out = f(*args)
            jax.block_until_ready(out)
        times = defaultdict(float)
        for e in prof.key_averages():
            t = getattr(e, "self_device_time_total", None)
            t = e.self_cuda_time_total if t is None else t
            if t > 0:
                times[e.key] += t / 10
        print(f"== {name}: {sum(times.values()):.1f} us of kernels per call")
        for key, t in sorted(times.items(), key=lambda kv: -kv[1]):
            print(f"  {t:9.1f} us  {key[:100]}")


if __name__ == "__main__":
    sys.exit(main())
