"""How a decode loop should reach the device (issue 64): a synthetic step of ``--kernels`` small
kernels (a chain of float32 updates of a {64, 1024} state, each kept apart by an optimization
barrier, as a decoder step's norms and rotary embeddings are) reading ``--args`` parameter
arrays, run ``--steps`` times:

- ``dispatch``: the step jitted, one dispatch a step, the state donated, no sync until the end
  (``Generator.generate_next_token``);
- ``while``: one ``lax.while_loop`` over the steps, its bound a run-time value (XLA reads the
  condition on the host at every iteration);
- ``fori N``: ``lax.fori_loop`` over N steps with N fixed in the program (a trip count XLA
  knows: no condition to read), dispatched ``steps / N`` times without a sync.

Microseconds a step (median of 5 runs), against the kernels' own time (the ``fori`` form with
the largest N is the closest to it).

Usage: ``PYTHONPATH=. python3 benchmarks/experiments/loop_forms_gpu.py [--kernels 400]
[--args 300] [--steps 128]``.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--kernels", type=int, default=400)
    p.add_argument("--args", type=int, default=300)
    p.add_argument("--steps", type=int, default=128)
    p.add_argument("--chunks", type=int, nargs="*", default=[8, 16, 32])
    a = p.parse_args()
    print(jax.devices()[0].device_kind, jax.__version__, flush=True)
    params = [jnp.full((64, 1024), 1.0 + i * 1e-3, jnp.float32) for i in range(a.args)]
    per = max(1, a.kernels // a.args)

    def step(params, x):
        for k in range(a.kernels):
            x = jax.lax.optimization_barrier(x * 0.999 + params[(k // per) % len(params)])
        return x

    def timed(run, reps=5):
        x = run(jnp.zeros((64, 1024), jnp.float32))  # compile
        jax.block_until_ready(x)
        out = []
        for _ in range(reps):
            t = time.perf_counter()
            x = run(jnp.zeros((64, 1024), jnp.float32))
            jax.block_until_ready(x)
            out.append((time.perf_counter() - t) / a.steps * 1e6)
        return float(np.median(out)), x

    one = jax.jit(step, donate_argnums=(1,))

    def dispatch(x):
        for _ in range(a.steps):
            x = one(params, x)
        return x

    @jax.jit
    def loop(params, x, stop):
        return jax.lax.while_loop(
            lambda c: c[0] < stop, lambda c: (c[0] + 1, step(params, c[1])), (0, x)
        )[1]

    results = {"dispatch": timed(dispatch), "while": timed(lambda x: loop(params, x, a.steps))}
    for n in a.chunks:
        fori = jax.jit(
            lambda params, x, n=n: jax.lax.fori_loop(0, n, lambda i, x: step(params, x), x),
            donate_argnums=(1,),
        )

        def chunked(x, fori=fori, n=n):
            for _ in range(a.steps // n):
                x = fori(params, x)
            return x

        results[f"fori {n}"] = timed(chunked)
    ref = np.asarray(results["dispatch"][1])
    for name, (us, x) in results.items():
        same = np.allclose(np.asarray(x), ref, rtol=1e-5)
        print(f"{name:10} {us:8.1f} us a step  (same state: {same})", flush=True)


if __name__ == "__main__":
    main()
