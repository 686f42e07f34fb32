"""fc1 with bias and GELU: epilogue pieces deferred into the next tile's products (experiment)."""
import sys, time
import jax, jax.numpy as jnp, numpy as np
from dml_jax.kernels import gemm

M, k, n = 8192, 1024, 4096
rng = np.random.default_rng(0)
a, b, c = (jnp.asarray(rng.standard_normal(s).astype(np.float16) * 0.05) for s in ((M, k), (k, n), (1, n)))
v = gemm.View(M, n, k, False)
mode, variants = sys.argv[1], sys.argv[2:]
fs, outs = {}, {}
for var in variants:
    gelu = var != "bias"
    gemm.DEFER = 0 if var == "bias" else int(var)
    gemm.fused_gemm.clear_cache()
    fs[var] = jax.jit(lambda a, b, c, g=gelu: gemm.fused_gemm(a, b, v, c=c, c_row=True, gelu=g, schedule="pingpong"))
    outs[var] = np.asarray(fs[var](a, b, c))
if mode == "ncu":
    for var in variants:
        jax.block_until_ready(fs[var](a, b, c))
else:
    gel = [x for x in variants if x != "bias"]
    print("deferred equal to none, bit for bit:", {x: bool(np.array_equal(outs[x], outs[gel[0]])) for x in gel}, flush=True)
    for r in range(3):
        for var in variants:
            f = fs[var]
            jax.block_until_ready(f(a, b, c))
            t0 = time.perf_counter()
            for _ in range(200):
                o = f(a, b, c)
            jax.block_until_ready(o)
            print(r, f"defer {var:5s} {(time.perf_counter() - t0) / 200 * 1e6:7.1f} us", flush=True)
