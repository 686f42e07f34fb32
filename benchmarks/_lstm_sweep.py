"""Persistent LSTM kernel time per step: products left in flight x pieces (experiment)."""
import time
import jax, jax.numpy as jnp, numpy as np
from dml_jax.kernels import lstm as K
rng = np.random.default_rng(0)
steps, hidden = 512, 1024
programs = hidden // K.UNITS
xw = jnp.asarray(rng.standard_normal((steps, K.BATCH, programs, 32)), jnp.float32)
r = jnp.asarray(rng.standard_normal((programs, 32, hidden)) / 32, jnp.float16)
c0 = jnp.zeros((K.BATCH, hidden), jnp.float32)
for pieces in (1, 3):
    ref = None
    for lag in (1, 2, 4, 8):
        K.IN_FLIGHT = lag
        f = jax.jit(lambda xw, r, c0: K._persistent(xw, None, r, c0, pieces)[:3])
        out = jax.block_until_ready(f(xw, r, c0))
        t0 = time.perf_counter(); n = 20
        for _ in range(n): o = f(xw, r, c0)
        jax.block_until_ready(o)
        per = (time.perf_counter() - t0) / n
        same = "" if ref is None else all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(ref, out))
        ref = ref or out
        print(f"pieces {pieces} in flight {lag}: {per*1e3:.3f} ms, {per/steps*1e6:.2f} us a step; equal to 1: {same}", flush=True)
