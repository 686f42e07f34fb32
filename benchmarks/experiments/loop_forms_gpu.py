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

``--host``: what the host spends issuing one dispatch a step (the time until the last step is
issued, before the sync, against the time until it is done), in the forms a decode step's
arguments and outputs take: the state alone, donated (every output aliased to an input, so
each call sees the buffers of the last); plus a NumPy scalar argument (a new device buffer a
call, as a length copied in was); plus a scalar output apart from the state (a new buffer a
call, as the generator's stop report is); plus a donated scalar in and out (as the length
handed on the device is). Where the issue time grows with the kernels only once a buffer
moves, XLA is updating its command buffer (CUDA graph) at each call.

Usage: ``PYTHONPATH=. python3 benchmarks/experiments/loop_forms_gpu.py [--kernels 400]
[--args 300] [--steps 128] [--host]``.
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
    p.add_argument("--host", action="store_true", help="the host's time a dispatch, by form")
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

    if a.host:
        host_forms(step, params, a.steps)
        return
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


def host_forms(step, params, steps: int, reps: int = 5) -> None:
    """``--host``: issue and done microseconds a step, one dispatch a step, by form."""

    def plain(params, x):
        return step(params, x)

    def scalar_in(params, x, n):
        return step(params, x + n.astype(jnp.float32) * 0)

    def scalar_out(params, x, n):
        y = step(params, x + n.astype(jnp.float32) * 0)
        return y, jnp.sum(y[0, :4])

    def carried(params, x, n):
        y = step(params, x + n.astype(jnp.float32) * 0)
        return y, n + 1

    forms = {
        "state": (jax.jit(plain, donate_argnums=(1,)), None),
        "+ host scalar": (jax.jit(scalar_in, donate_argnums=(1,)), "host"),
        "+ scalar out": (jax.jit(scalar_out, donate_argnums=(1,)), "out"),
        "+ carried scalar": (jax.jit(carried, donate_argnums=(1, 2)), "carried"),
    }
    for name, (fn, kind) in forms.items():
        rows = []
        for rep in range(reps + 1):  # the first compiles
            x = jnp.zeros((64, 1024), jnp.float32)
            n = jnp.int32(0)
            jax.block_until_ready((x, n))
            t = time.perf_counter()
            for i in range(steps):
                if kind is None:
                    x = fn(params, x)
                elif kind == "host":
                    x = fn(params, x, np.int32(i))
                elif kind == "out":
                    x, _ = fn(params, x, np.int32(i))
                else:
                    x, n = fn(params, x, n)
            issued = time.perf_counter()
            jax.block_until_ready(x)
            done = time.perf_counter()
            if rep:
                rows.append(((issued - t) / steps * 1e6, (done - t) / steps * 1e6))
        issue, whole = np.median([r[0] for r in rows]), np.median([r[1] for r in rows])
        print(f"{name:18} issue {issue:8.1f} us a step, done {whole:8.1f}", flush=True)


if __name__ == "__main__":
    main()
