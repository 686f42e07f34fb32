"""Experiment: fc1 of the GPT (M 8192, K 1024, N 4096, float16) under ping-pong, bias only or
bias + GELU: one call (for the Mosaic GPU dumps) or timed."""
import sys
sys.path.insert(0, "benchmarks")
import jax, jax.numpy as jnp
from timing import timeit
from dml_jax.kernels import gemm as G

variant, mode = sys.argv[1], sys.argv[2]
m, k, n = 8192, 1024, 4096
keys = jax.random.split(jax.random.PRNGKey(0), 3)
a = jax.random.normal(keys[0], (m, k), jnp.float32).astype(jnp.float16)
b = (jax.random.normal(keys[1], (k, n), jnp.float32) / 32).astype(jnp.float16)
c = jax.random.normal(keys[2], (1, n), jnp.float32).astype(jnp.float16)
v = G.View(m, n, k, False)
f = jax.jit(lambda a, b, c: G.fused_gemm(a, b, v, c=c, c_row=True, gelu=variant == "gelu", schedule="pingpong"))
f(a, b, c).block_until_ready()
if mode == "time":
    for _ in range(3):
        print(variant, f"{min(timeit(f, a, b, c, reps=30) for _ in range(3)) * 1e6:.1f} us", flush=True)
