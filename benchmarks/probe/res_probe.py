"""Experiment: the residual epilogue with the GEMM node rounded for the pref tile first
(PREFETCH_PIECES True, the current code) or by pieces (False): the output projection (K 1024,
N 1024) and fc2 (K 4096) with bias and residual, M 8192, both schedules; equal bit for bit."""
import sys
sys.path.insert(0, "benchmarks")
import jax, jax.numpy as jnp, numpy as np
from timing import timeit
from dml_jax.kernels import gemm as G

m = 8192
cases = [("out proj + res", 1024, 1024), ("fc2 bias + res", 4096, 1024), ("full C", 1024, 4096)]
data = {}
for label, k, n in cases:
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    a = jax.random.normal(keys[0], (m, k), jnp.float32).astype(jnp.float16)
    b = (jax.random.normal(keys[1], (k, n), jnp.float32) / 32).astype(jnp.float16)
    c = jax.random.normal(keys[2], (1, n), jnp.float32).astype(jnp.float16)
    r = jax.random.normal(keys[3], (m, n), jnp.float32).astype(jnp.float16)
    data[label] = (a, b, c, r, G.View(m, n, k, False))
fns = {}
for pref in (False, True):
    G.PREFETCH_PIECES = pref
    for sched in ("pingpong", "cooperative"):
        for label, (a, b, c, r, v) in data.items():
            jax.clear_caches()
            res = None if label == "full C" else r
            f = jax.jit(lambda a, b, c, r, v=v, s=sched, res=res is not None: (G.fused_gemm(a, b, v, c=c, c_row=True, residual=r, schedule=s) if res else G.fused_gemm(a, b, v, c=r, alpha=2.0, beta=0.5, schedule=s)))
            out = np.asarray(f(a, b, c, r))
            fns[(label, sched, pref)] = (f, out)
for (label, sched, pref), (f, out) in fns.items():
    if pref:
        print(label, sched, "equal", np.array_equal(out, fns[(label, sched, False)][1]), flush=True)
for rnd in range(3):
    for (label, sched, pref), (f, out) in fns.items():
        a, b, c, r, v = data[label]
        t = timeit(f, a, b, c, r, reps=50)
        print(rnd, f"{label:16s} {sched:12s} pref={pref!s:5s} {t * 1e6:7.1f} us {2 * m * v.n * v.k / t / 1e12:5.0f} TF", flush=True)
