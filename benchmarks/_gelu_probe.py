"""Where the GELU epilogue's time goes (experiment): variants of the epilogue math, cold and sustained."""

import sys, time
import jax, jax.numpy as jnp, numpy as np
from dml_jax.kernels import gemm

orig = gemm._gelu
M = 8192
rng = np.random.default_rng(0)


def arr(*s):
    return jnp.asarray(rng.standard_normal(s).astype(np.float16) * 0.05)


def timed(f, args, warm_s=0.8, meas_s=0.5):
    jax.block_until_ready(f(*args))
    time.sleep(0.4)
    t0, n = time.perf_counter(), 0
    while time.perf_counter() - t0 < 0.04:
        o = f(*args)
        n += 1
    jax.block_until_ready(o)
    cold = (time.perf_counter() - t0) / n
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < warm_s:
        for _ in range(20):
            o = f(*args)
    jax.block_until_ready(o)
    t1, n = time.perf_counter(), 0
    while time.perf_counter() - t1 < meas_s:
        for _ in range(20):
            o = f(*args)
        n += 20
    jax.block_until_ready(o)
    return (time.perf_counter() - t1) / n, cold


def gelu_f16(y):
    h = y.astype(jnp.float16)
    return orig(h).astype(jnp.float32) if False else _f16(h).astype(jnp.float32)


def _f16(y):
    a = jnp.abs(y) * np.float16(0.70710678)
    p = 1.0 + a * (np.float16(0.0705230784) + a * (np.float16(0.0422820123) + a * (np.float16(0.0092705272) + a * (np.float16(0.0001520143) + a * (np.float16(0.0002765672) + a * np.float16(0.0000430638))))))
    q = lax_rsqrt(p)
    for _ in range(5):
        q = q * q
    return np.float16(0.5) * y * jnp.where(y < 0, q, np.float16(2.0) - q)


from jax import lax
lax_rsqrt = lambda p: lax.rsqrt(p.astype(jnp.float32)).astype(jnp.float16)

variants = {
    "bias": None,
    "gelu": orig,
    "gelu x2": lambda y: orig(orig(y)),
    "gelu f16 math": gelu_f16,
    "gelu no rsqrt": lambda y: 0.5 * y * (1.0 + y * (0.07 + y * (0.04 + y * (0.009 + y * (0.00015 + y * (0.0003 + y * 0.00004)))))),
    "mul only": lambda y: y * 1.5,
}
for k in (1024, 2048):
    n = 4096
    a, b, c = arr(M, k), arr(k, n), arr(1, n)
    v = gemm.View(M, n, k, False)
    for sched in ("pingpong", "cooperative"):
        for name, g in variants.items():
            if g is not None:
                gemm._gelu = g
            gemm.fused_gemm.clear_cache()
            f = jax.jit(lambda a, b, c: gemm.fused_gemm(a, b, v, c=c, c_row=True, gelu=g is not None, schedule=sched))
            per, cold = timed(f, (a, b, c))
            print(f"K {k} {sched:11s} {name:14s} sustained {per * 1e6:7.1f} us  cold {cold * 1e6:7.1f} us", flush=True)
        gemm._gelu = orig
