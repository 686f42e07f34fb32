import sys, jax, jax.numpy as jnp, numpy as np
sys.path.insert(0, "benchmarks")
from gemm_epilogue_probe import timeit
from jax.experimental.pallas.ops.gpu import hopper_matmul_mgpu as hm
rng = np.random.default_rng(0)
for (m, k, n) in [(8192, 1024, 4096), (8192, 4096, 1024), (8192, 1024, 3072), (8192, 1024, 1024)]:
    a = jnp.asarray(rng.standard_normal((m, k)).astype(np.float16))
    b = jnp.asarray((rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float16))
    ref = jax.jit(lambda a, b: a @ b)
    t = timeit(ref, a, b)
    print(m, k, n, "xla", round(t * 1e6, 1), round(2 * m * n * k / t / 1e12), flush=True)
    r = ref(a, b)
    for tm, tn, tk, st, gm, w in [(128, 128, 64, 4, hm.MatmulDimension.N, 1), (128, 256, 64, 4, hm.MatmulDimension.N, 1), (128, 128, 64, 4, hm.MatmulDimension.M, 4), (128, 256, 64, 3, hm.MatmulDimension.N, 4), (128, 128, 128, 3, hm.MatmulDimension.N, 4)]:
        cfg = hm.TuningConfig(tile_m=tm, tile_n=tn, tile_k=tk, max_concurrent_steps=st, grid_minor_dim=gm, grid_tile_width=w)
        try:
            f = jax.jit(lambda a, b, cfg=cfg: hm.matmul(a, b, None, cfg))
            o = f(a, b)
            t = timeit(f, a, b)
            err = float(jnp.max(jnp.abs(o.astype(jnp.float32) - r.astype(jnp.float32))))
            print(m, k, n, "mgpu", (tm, tn, tk, st, str(gm), w), round(t * 1e6, 1), round(2 * m * n * k / t / 1e12), err, flush=True)
        except Exception as e:
            print(m, k, n, "mgpu", (tm, tn, tk, st), "failed", repr(e)[:300], flush=True)
