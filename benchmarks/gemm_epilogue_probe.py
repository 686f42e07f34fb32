"""Experiment: a float16 GEMM (Pallas, Triton) with the GPT stack's element-wise work in its
epilogue, against XLA's GEMM (cuBLAS or its own Triton fusion) followed by XLA's loop fusion,
on the GPT's shapes (8 x 1024 tokens, d_model 1024, ffn 4096):

- ``fc1``: gelu(x W^T + b), the GEMM's float16 result rounded before GELU (the DML graph's
  GEMM node, then its ACTIVATION_GELU node);
- ``fc2`` / ``out``: r + (x W^T + b) (GEMM node, then the residual ELEMENT_WISE_ADD);
- ``qkv``: x W^T + b written as three {M, 1024} outputs (queries, keys, values) instead of
  one {M, 3072} result that the attention's operands are then sliced from.

Each kernel variant's result is compared with XLA's (max |diff| over max |XLA's|, and the
fraction of elements that differ) and timed by its kernels' device time a call (CUPTI through
``torch.profiler``, 20 calls): these calls are short enough that a host-side timing measures
the dispatch, not the GPU.

    XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=. python benchmarks/gemm_epilogue_probe.py OUT.json
"""

from __future__ import annotations

import math
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

sys.path.insert(0, os.path.dirname(__file__))
from timing import record  # noqa: E402

from dml_jax.kernels.reduce import load_pallas  # noqa: E402

M, D, F = (int(v) for v in os.environ.get("SHAPE", "8192,1024,4096").split(","))
INTERPRET = bool(os.environ.get("INTERPRET"))


def timeit(fn, *args, reps=20):
    """Seconds of device time per call: the sum of the CUDA kernels' durations (CUPTI)."""
    jax.block_until_ready(fn(*args))
    if INTERPRET:
        return 1.0
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            jax.block_until_ready(fn(*args))
    total = 0.0
    for e in prof.key_averages():
        t = getattr(e, "self_device_time_total", None)
        total += e.self_cuda_time_total if t is None else t
    return total / reps / 1e6


def erf(x):
    """erf in float32 (Abramowitz and Stegun 7.1.26, |error| <= 1.5e-7)."""
    a = jnp.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    p = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    e = 1.0 - p * jnp.exp(-a * a)
    return jnp.where(x < 0, -e, e)


def gelu16(y16):
    y = y16.astype(jnp.float32)
    return (y * (0.5 * (1.0 + erf(y * np.float32(1 / math.sqrt(2)))))).astype(jnp.float16)


def gelu16_fast(y16):
    """0.5 y (1 + erf(y / sqrt 2)) with erf(a) = 1 - q, q = t P(t) exp(-a^2) (A&S 7.1.26),
    1 + erf taken as q below 0 (no cancellation) and 2 - q above; the reciprocal and exp2 as
    single PTX approximations, no division."""
    from dml_jax.kernels.reduce import ptx

    if INTERPRET:
        rcp, ex2 = (lambda v: 1.0 / v), jnp.exp2
    else:
        rcp = lambda v: ptx("rcp.approx.ftz.f32", v)  # noqa: E731
        ex2 = lambda v: ptx("ex2.approx.ftz.f32", v)  # noqa: E731
    y = y16.astype(jnp.float32)
    a = jnp.abs(y) * np.float32(1 / math.sqrt(2))
    t = rcp(1.0 + 0.3275911 * a)
    p = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    q = p * ex2(a * a * np.float32(-1 / math.log(2)))
    return (0.5 * y * jnp.where(y < 0, q, 2.0 - q)).astype(jnp.float16)


def xla_gelu16(y16):
    y = y16.astype(jnp.float32)
    return (y * (0.5 * (1.0 + lax.erf(y * np.float32(1 / math.sqrt(2)))))).astype(jnp.float16)


def gemm(x, w, b, *extra, kind, bm, bn, bk, warps, stages, order="ij"):
    pl, pltriton = load_pallas()
    m, k = x.shape
    n = w.shape[0]
    gi, gj = m // bm, n // bn

    def ij(p, q):
        return (p, q) if order == "ij" else (q, p)

    def kernel(x_ref, w_ref, b_ref, *refs):
        def body(s, acc):
            a = x_ref[:, pl.ds(s * bk, bk)]
            bb = w_ref[:, pl.ds(s * bk, bk)].T
            return acc + jnp.dot(a, bb, preferred_element_type=jnp.float32)

        acc = lax.fori_loop(0, k // bk, body, jnp.zeros((bm, bn), jnp.float32))
        y16 = (acc + b_ref[...].astype(jnp.float32)[None, :]).astype(jnp.float16)
        if kind == "fc1":
            (o_ref,) = refs
            o_ref[...] = gelu16(y16)
        elif kind == "fc1fast":
            (o_ref,) = refs
            o_ref[...] = gelu16_fast(y16)
        elif kind == "res":
            r_ref, o_ref = refs
            o_ref[...] = (y16.astype(jnp.float32) + r_ref[...].astype(jnp.float32)).astype(
                jnp.float16
            )
        elif kind == "qkv":
            q_ref, k_ref, v_ref = refs
            j = pl.program_id(1 if order == "ij" else 0)
            per = D // bn
            for t, ref in enumerate((q_ref, k_ref, v_ref)):

                @pl.when((j >= t * per) & (j < (t + 1) * per))
                def _(ref=ref):
                    ref[...] = y16

        else:
            (o_ref,) = refs
            o_ref[...] = y16

    def spec(shape, f):
        return pl.BlockSpec(shape, lambda p, q: f(*ij(p, q)))

    in_specs = [
        spec((bm, k), lambda i, j: (i, 0)),
        spec((bn, k), lambda i, j: (j, 0)),
        spec((bn,), lambda i, j: (j,)),
    ]
    if kind == "res":
        in_specs.append(spec((bm, bn), lambda i, j: (i, j)))
    if kind == "qkv":
        per = D // bn
        out_shape = [jax.ShapeDtypeStruct((m, D), jnp.float16)] * 3
        out_specs = [
            spec((bm, bn), lambda i, j, t=t: (i, jnp.clip(j - t * per, 0, per - 1)))
            for t in range(3)
        ]
    else:
        out_shape = jax.ShapeDtypeStruct((m, n), jnp.float16)
        out_specs = spec((bm, bn), lambda i, j: (i, j))
    return pl.pallas_call(
        kernel,
        out_shape=out_shape,
        grid=ij(gi, gj),
        in_specs=in_specs,
        out_specs=out_specs,
        compiler_params=pltriton.CompilerParams(num_warps=warps, num_stages=stages),
        interpret=INTERPRET,
    )(x, w, b, *extra)


def xla(x, w, b, *extra, kind):
    y16 = (
        lax.dot_general(x, w, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
        + b.astype(jnp.float32)
    ).astype(jnp.float16)
    if kind in ("fc1", "fc1fast"):
        return xla_gelu16(y16)
    if kind == "res":
        return (y16.astype(jnp.float32) + extra[0].astype(jnp.float32)).astype(jnp.float16)
    if kind == "qkv":
        return y16[:, :D], y16[:, D : 2 * D], y16[:, 2 * D :]
    return y16


CONFIGS = [
    (128, 128, 64, 4, 3),
    (128, 128, 64, 8, 4),
    (128, 256, 64, 8, 3),
    (256, 128, 64, 8, 3),
    (128, 128, 128, 8, 3),
    (128, 256, 64, 8, 4),
    (256, 128, 64, 8, 4),
    (128, 256, 32, 8, 5),
]


def main(out):
    rng = np.random.default_rng(0)
    rows = []

    def arr(*shape, scale=1.0):
        return jnp.asarray((rng.standard_normal(shape) * scale).astype(np.float16))

    fc1 = (arr(M, D), arr(F, D, scale=D**-0.5), arr(F, scale=0.1))
    qkv = (arr(M, D), arr(3 * D, D, scale=D**-0.5), arr(3 * D, scale=0.1))
    cases = {  # name: (kind, arguments)
        "fc1": ("fc1", fc1),
        "fc1fast": ("fc1fast", fc1),
        "fc1 bias only": ("plain", fc1),
        "fc2 res": ("res", (arr(M, F), arr(D, F, scale=F**-0.5), arr(D, scale=0.1), arr(M, D))),
        "out res": ("res", (arr(M, D), arr(D, D, scale=D**-0.5), arr(D, scale=0.1), arr(M, D))),
        "qkv": ("qkv", qkv),
        "qkv bias only": ("plain", qkv),
    }
    only = os.environ.get("CASES", ",".join(cases)).split(",")
    for name in only:
        kind, args = cases[name]
        flops = 2 * args[0].shape[0] * args[1].shape[0] * args[0].shape[1]
        ref_fn = jax.jit(lambda *a, kind=kind: xla(*a, kind=kind))
        ref = ref_fn(*args)
        t = timeit(ref_fn, *args, )
        record(rows, {"case": name, "impl": "xla", "us": t * 1e6, "tflops": flops / t / 1e12}, out)
        plain = jax.jit(
            lambda x, w, b: lax.dot_general(x, w, (((1,), (1,)), ((), ())))
        )  # the GEMM alone, XLA's choice
        t = timeit(plain, *args[:3])
        record(rows, {"case": name, "impl": "xla dot alone", "us": t * 1e6,
                      "tflops": flops / t / 1e12}, out)  # fmt: skip
        for cfg in CONFIGS:
            for order in ("ij", "ji"):
                bm, bn, bk, warps, stages = cfg
                fn = jax.jit(
                    lambda *a, cfg=cfg, order=order, kind=kind: gemm(
                        *a, kind=kind, bm=cfg[0], bn=cfg[1], bk=cfg[2], warps=cfg[3],
                        stages=cfg[4], order=order,
                    )
                )  # fmt: skip
                row = {"case": name, "impl": f"kernel {cfg} {order}"}
                try:
                    got = fn(*args)
                    t = timeit(fn, *args, )
                except Exception as e:  # noqa: BLE001 - a config that fails is a result
                    row["error"] = repr(e)[:200]
                    record(rows, row, out)
                    continue
                g = jnp.concatenate(got, 1) if isinstance(got, (list, tuple)) else got
                r = jnp.concatenate(ref, 1) if isinstance(ref, (list, tuple)) else ref
                diff = jnp.abs(g.astype(jnp.float32) - r.astype(jnp.float32))
                row.update(us=t * 1e6, tflops=flops / t / 1e12,
                           max_rel=float(jnp.max(diff) / jnp.max(jnp.abs(r.astype(jnp.float32)))),
                           frac_differ=float(jnp.mean(diff > 0)))  # fmt: skip
                record(rows, row, out)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
