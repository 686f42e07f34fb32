"""Experiment: the epilogue GEMM's two schedules, cooperative (both compute warpgroups on
halves of one 128 x 256 tile) and ping-pong (each on whole 128 x 128 tiles in turn), on the
GPT's GEMMs (M 8192, float16), checked equal, timed with many dispatches and one sync.
Run from the repository root: PYTHONPATH=.:benchmarks python benchmarks/gemm_schedule_probe.py"""

from __future__ import annotations

import sys
import traceback

import jax
import jax.numpy as jnp
import numpy as np
from timing import timeit

from dml_jax.kernels import gemm as G


def main() -> int:
    m = 8192
    rng = jax.random.PRNGKey(0)
    cases = [  # label, k, n, b_nk, form
        ("fc1 bias+gelu", 1024, 4096, False, "gelu"),
        ("fc1 bias", 1024, 4096, False, "bias"),
        ("qkv bias split", 1024, 3072, False, "split"),
        ("out proj + res", 1024, 1024, False, "res"),
        ("fc2 bias + res", 4096, 1024, False, "res"),
        ("fc1 bias+gelu B^T", 1024, 4096, True, "gelu"),
        ("full C", 1024, 4096, False, "full"),
    ]
    for label, k, n, b_nk, form in cases:
        keys = jax.random.split(rng, 5)
        a = jax.random.normal(keys[0], (m, k), jnp.float32).astype(jnp.float16)
        b = (jax.random.normal(keys[1], (n, k) if b_nk else (k, n), jnp.float32) / 32).astype(
            jnp.float16
        )
        c = jax.random.normal(keys[2], (1, n), jnp.float32).astype(jnp.float16)
        r = jax.random.normal(keys[3], (m, n), jnp.float32).astype(jnp.float16)
        v = G.View(m, n, k, b_nk)
        kw = dict(c=c, c_row=True)
        if form == "gelu":
            kw["gelu"] = True
        elif form == "split":
            kw["split"] = 64
        elif form == "res":
            kw["residual"] = r
        elif form == "full":
            kw = dict(c=r, beta=0.5, alpha=2.0)
        outs, times = {}, {}
        scheds = ("cooperative", "pingpong")
        fns = {}
        for sched in scheds:
            fns[sched] = jax.jit(
                lambda a, b, kw=kw, v=v, s=sched: G.fused_gemm(a, b, v, schedule=s, **kw)
            )
            try:
                outs[sched] = jax.tree.map(np.asarray, fns[sched](a, b))
            except Exception as e:
                traceback.print_exc(limit=3)
                print(label, sched, "ERROR", str(e)[:3000], flush=True)
        for _ in range(3):  # interleaved
            for sched in outs:
                t = timeit(fns[sched], a, b, reps=30)
                times[sched] = min(times.get(sched, t), t)
        flops = 2 * m * n * k
        same = None
        if len(outs) == len(scheds):
            same = all(
                np.array_equal(x, y)
                for o in outs.values()
                for x, y in zip(jax.tree.leaves(outs["cooperative"]), jax.tree.leaves(o))
            )
        line = "  ".join(
            f"{s} {t * 1e6:7.1f} us {flops / t / 1e12:5.0f} TF" for s, t in times.items()
        )
        print(f"{label:20s} {line}  equal {same}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
