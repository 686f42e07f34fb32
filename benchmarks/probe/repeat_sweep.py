"""Experiment: the nearest-neighbour repeat kernel's tile and warps, 2x UPSAMPLE_2D to 1 GiB of
float32 / float16 output, against lax and the copy; every variant checked bit for bit."""
import sys
sys.path.insert(0, "benchmarks")
import jax
import jax.numpy as jnp
import numpy as np
from timing import timeit, torch_copy_seconds

import dml_jax as dml
from dml_jax.kernels import resample as K

for dt, n in (("float16", 32),):
    x = jax.random.normal(jax.random.PRNGKey(0), (n, 256, 128, 128), jnp.float32).astype(dt)
    t = dml.TensorDesc(dt.upper(), x.shape)
    d = dml.Upsample2DOperatorDesc(t, t.like(sizes=(n, 256, 256, 256)), (2, 2), "NEAREST_NEIGHBOR")
    nbytes = 5 * x.size * x.dtype.itemsize
    # the time a copy takes to move nbytes (read + write): a copy of S bytes moves 2 S
    copy = min(timeit(jax.jit(lambda y: y + 0), jnp.zeros((n, 256, 256, 256), dt)) * 0.625,
               torch_copy_seconds((n * 5, 256, 128, 128), dt) * 0.5)
    lax = jax.jit(dml.compile_operator(d, fast_paths=False).fn)
    want = np.asarray(lax(x))
    print(dt, "copy GB/s", round(nbytes / copy / 1e9), "lax", round(copy / timeit(lax, x), 3), flush=True)
    for tile in (4096, 8192, 16384):
        for warps in (4,):
            K.REPEAT_TILE, K.REPEAT_WARPS = tile, warps
            v = K.repeat_plan(d)
            f = jax.jit(lambda x, v=v: K.repeat_kernel(x, v))
            same = np.array_equal(np.asarray(f(x)).view(np.uint8), want.view(np.uint8))
            print(dt, tile, warps, (v.tr, v.tc), "ratio", round(copy / timeit(f, x), 3), "same", same, flush=True)
