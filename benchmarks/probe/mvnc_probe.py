import functools, json, sys, time
sys.path.insert(0, "benchmarks"); sys.path.insert(0, "benchmarks/probe")
import jax, jax.numpy as jnp, numpy as np
from timing import timeit, torch_copy_seconds
from mvnc import mvn_cluster, reference
import dml_jax as dml
from dml_jax.kernels import mvn as K

print(jax.__version__, jax.devices()[0].device_kind, flush=True)
a, r = 4096, 65536
res = []
for dt in ("float32", "float16"):
    ar = 2 * (1 << 30) // (4 if dt == "float32" else 2) // r  # 1 GiB f32 and same elements f16? keep bytes
    a = (1 << 30) // (r * np.dtype(dt).itemsize)
    key = jax.random.PRNGKey(0)
    x = (jax.random.normal(key, (a, r), jnp.float32) * 3 + 1.5).astype(dt)
    sc = (jax.random.normal(jax.random.PRNGKey(1), (a,), jnp.float32)).astype(dt)
    bi = (jax.random.normal(jax.random.PRNGKey(2), (a,), jnp.float32)).astype(dt)
    nbytes = 2 * x.size * x.dtype.itemsize
    want = jax.jit(lambda x, s, b: reference(x, 1e-5, s, b))(x, sc, bi)
    copy = min(timeit(jax.jit(lambda x: x + 0), x), torch_copy_seconds((a, r), dt))
    lax_t = timeit(jax.jit(lambda x, s, b: reference(x, 1e-5, s, b)), x, sc, bi)
    v = K.plan((a, r), (1,), dt)
    tri = jax.jit(lambda x, s, b: K.mvn_kernel(x, v, K.Form(True, True, 1e-5), ((s, "row", "mul"), (b, "row", "add"))))
    tri_t = timeit(tri, x, sc, bi)
    print(json.dumps(dict(dt=dt, copy_gbs=nbytes / copy / 1e9, lax=copy / lax_t, triton=copy / tri_t)), flush=True)
    variants = [(2, 2), (2, 4), (2, 8), (4, 1), (4, 2), (4, 4), (8, 2)] if dt == "float32" else [(1, 4), (1, 8), (1, 16), (2, 2), (2, 4), (2, 8), (4, 4)]
    for p, pc in variants:
        try:
            f = jax.jit(lambda x, s, b, p=p, pc=pc: mvn_cluster(x, p, 1e-5, s, b, pieces=pc))
            got = f(x, sc, bi)
            err = float(jnp.max(jnp.abs(got.astype(jnp.float32) - want.astype(jnp.float32))))
            t = timeit(f, x, sc, bi)
            row = dict(dt=dt, p=p, pieces=pc, ratio=copy / t, err=err)
        except Exception as e:
            row = dict(dt=dt, p=p, pieces=pc, error=repr(e)[:400])
        print(json.dumps(row), flush=True)
