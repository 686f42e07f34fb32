"""Experiment: the float16 batch-norm kernel's block and warps (1 GiB, per-channel statistics,
C = 256), against lax and the copy; every variant within one float16 ulp of lax."""
import sys
sys.path.insert(0, "benchmarks")
import jax
import jax.numpy as jnp
import numpy as np
from timing import timeit, torch_copy_seconds

import dml_jax as dml
from dml_jax.kernels import batch_norm as K

shape = (32, 256, 256, 256)
x = jax.random.normal(jax.random.PRNGKey(0), shape, jnp.float32).astype(jnp.float16)
t = dml.TensorDesc("FLOAT16", shape)
p = t.like(sizes=(1, 256, 1, 1))
d = dml.BatchNormalizationOperatorDesc(t, p, p, p, p, t, spatial=True, epsilon=1e-5)
ks = jax.random.split(jax.random.PRNGKey(1), 4)
mean, scale, bias = (jax.random.normal(k, (1, 256, 1, 1), jnp.float32).astype(jnp.float16) for k in ks[:3])
var = jax.random.uniform(ks[3], (1, 256, 1, 1), jnp.float32, 0.1, 2).astype(jnp.float16)
args = (x, mean, var, scale, bias)
copy = min(timeit(jax.jit(lambda y: y + 0), x), torch_copy_seconds(shape, "float16"))
lax_f = jax.jit(dml.compile_operator(d, fast_paths=False).fn)
want = np.asarray(lax_f(*args)).astype(np.float64)
print("lax", round(copy / timeit(lax_f, *args), 3), flush=True)
for block in (2048, 4096, 8192, 16384):
    for warps in (4, 8):
        K.BLOCK, K.WARPS = block, warps
        f = jax.jit(lambda *a: K.batch_norm_kernel(d, *a))
        got = np.asarray(f(*args)).astype(np.float64)
        ulp = np.spacing(np.abs(want).astype(np.float16)).astype(np.float64)
        ok = bool(np.all(np.abs(got - want) <= ulp))
        print(block, warps, "ratio", round(copy / timeit(f, *args), 3), "within", ok,
              "equal", float(np.mean(got == want)), flush=True)
