"""GELU epilogue forms for fc1 (experiment): instruction count and dependency depth; ncu cycles."""
import math, sys
import jax, jax.numpy as jnp, numpy as np
from jax import lax
from dml_jax.kernels import gemm

A = (0.0705230784, 0.0422820123, 0.0092705272, 0.0001520143, 0.0002765672, 0.0000430638)
S = 2.0 ** (1 / 16)
FOLD = [np.float32(S)] + [np.float32(S * a / math.sqrt(2) ** (i + 1)) for i, a in enumerate(A)]


def rsqrt_ftz(x):
    import jax.experimental.pallas.mosaic_gpu as plgpu
    layout = plgpu.Layout.WGMMA

    @plgpu.inline_mgpu(arg_types=(layout,),
                       return_type=plgpu.ShapeDtypeStruct(x.shape, jnp.float32, layout=layout))
    def f(ctx, v):
        del ctx
        return v._pointwise(v._lift_fast_instr("rsqrt.approx.ftz.f32"))

    return f(x)


def fast(x, instr):
    import jax.experimental.pallas.mosaic_gpu as plgpu
    layout = plgpu.Layout.WGMMA

    @plgpu.inline_mgpu(arg_types=(layout,),
                       return_type=plgpu.ShapeDtypeStruct(x.shape, jnp.float32, layout=layout))
    def f(ctx, v):
        del ctx
        return v._pointwise(v._lift_fast_instr(instr))

    return f(x)


def relu_form(y, h):
    return jnp.maximum(y, 0.0) - jnp.abs(y) * h


def folded_relu(y):
    h = rsqrt_ftz(horner(jnp.abs(y)))
    for _ in range(5):
        h = h * h
    return relu_form(y, h)


def lg2_relu(y):
    p = horner(jnp.abs(y))
    h = fast(-16.0 * fast(p, "lg2.approx.ftz.f32"), "ex2.approx.ftz.f32")
    return relu_form(y, h)


def horner(a):
    p = FOLD[6]
    for c in FOLD[5::-1]:
        p = c + a * p
    return p


def estrin(a):
    c = FOLD
    a2 = a * a
    a4 = a2 * a2
    u = (c[0] + c[1] * a) + (c[2] + c[3] * a) * a2
    v = (c[4] + c[5] * a) + c[6] * a2
    return u + v * a4


def folded(y, poly=horner, rsqrt=rsqrt_ftz):
    a = jnp.abs(y)
    h = rsqrt(poly(a))
    for _ in range(5):
        h = h * h  # (2^(1/16) P)^-16 = erfc / 2
    return y * jnp.where(y < 0, h, 1.0 - h)


VARIANTS = {
    "bias": None,
    "current": gemm._gelu,
    "folded_ftz": folded,
    "estrin_ftz": lambda y: folded(y, estrin),
    "mul only": lambda y: y * 1.5,
    "folded_relu": folded_relu,
    "lg2_relu": lg2_relu,
}
M, k, n = 8192, 1024, 4096

if __name__ == "__main__":
    rng = np.random.default_rng(0)
    a, b, c = (jnp.asarray(rng.standard_normal(s).astype(np.float16) * 0.05) for s in ((M, k), (k, n), (1, n)))
    v = gemm.View(M, n, k, False)
    base = gemm._gelu
    fs = {}
    names = sys.argv[2:] or list(VARIANTS)
    for name in names:
        fn = VARIANTS[name]
        gemm._gelu = fn or base
        gemm.fused_gemm.clear_cache()
        fs[name] = jax.jit(lambda a, b, c, g=fn is not None: gemm.fused_gemm(a, b, v, c=c, c_row=True, gelu=g, schedule="pingpong"))
        jax.block_until_ready(fs[name](a, b, c))
    if sys.argv[1] == "ncu":
        for name in names:
            jax.block_until_ready(fs[name](a, b, c))
    else:
        import time
        want = np.asarray(jax.nn.gelu(fs["bias"](a, b, c).astype(jnp.float32), approximate=False))
        for name in names:
            if name not in ("bias", "mul only"):
                got = np.asarray(fs[name](a, b, c), np.float32)
                print(name, "max abs err vs erf GELU", float(np.abs(got - want).max()), flush=True)
        for r in range(3):
            for name in names:
                f = fs[name]
                jax.block_until_ready(f(a, b, c))
                t0 = time.perf_counter()
                for _ in range(200):
                    o = f(a, b, c)
                jax.block_until_ready(o)
                print(r, f"{name:11s} {(time.perf_counter() - t0) / 200 * 1e6:7.1f} us", flush=True)
