"""fc1 with bias, and with bias and GELU, one call each after warm-up, for Nsight Compute (experiment)."""
import sys
import jax, jax.numpy as jnp, numpy as np
from dml_jax.kernels import gemm

M, k, n = 8192, 1024, 4096
rng = np.random.default_rng(0)
a, b, c = (jnp.asarray(rng.standard_normal(s).astype(np.float16) * 0.05) for s in ((M, k), (k, n), (n,)))
v = gemm.View(M, n, k, False)
sched = sys.argv[1] if len(sys.argv) > 1 else "pingpong"
fs = [jax.jit(lambda a, b, c, g=g: gemm.fused_gemm(a, b, v, c=c[None], c_row=True, gelu=g, schedule=sched)) for g in (False, True)]
for f in fs:
    jax.block_until_ready(f(a, b, c))
for f in fs:
    jax.block_until_ready(f(a, b, c))
