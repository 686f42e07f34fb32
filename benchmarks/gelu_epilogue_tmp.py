import functools, jax, jax.numpy as jnp, numpy as np, sys
sys.path.insert(0, "benchmarks")
from gemm_epilogue_probe import timeit
from dml_jax.kernels import gemm as K
rng = np.random.default_rng(0)
x = jnp.asarray(rng.standard_normal((8192, 1024)), jnp.float16)
w = jnp.asarray(rng.standard_normal((4096, 1024)) / 32, jnp.float16)
b = jnp.asarray(rng.standard_normal((1, 4096)), jnp.float16)
v = K.plan(x.shape, w.shape, False, True, "float16")
for name, kw in [("no C", {}), ("bias", dict(c=b, c_row=True)), ("bias gelu", dict(c=b, c_row=True, gelu=True)), ("bias gelu exact math", dict(c=b, c_row=True, gelu=True, approx=False)), ("no C gelu", dict(gelu=True))]:
    f = jax.jit(functools.partial(K.fused_gemm, v=v, **kw))
    t = timeit(f, x, w)
    print(f"fc1 {name}: {t*1e6:.1f} us", flush=True)
