"""Experiment: a float16 GEMM on Pallas's Mosaic GPU backend (warp-specialized TMA pipeline,
two compute warpgroups, persistent grid) with the GPT stack's element-wise work in its
epilogue: y = A W^T (W as {N, K}) + C (a bias row, read through a {64, N} broadcast, or a full
{M, N}), rounded to float16, then optionally GELU, then optionally + R (a residual), rounded.
Compared with XLA's GEMM and loop fusions on the GPT's shapes, device time by CUPTI.

    XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=. python benchmarks/mgpu_gemm_probe.py
"""

from __future__ import annotations

import functools
import math
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

sys.path.insert(0, os.path.dirname(__file__))
from gemm_epilogue_probe import timeit, xla_gelu16  # noqa: E402

EPI = 64


def gelu(y):
    a = jnp.abs(y) * np.float32(1 / math.sqrt(2))
    t = 1.0 / (1.0 + 0.3275911 * a)
    p = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    q = p * jnp.exp(-(a * a))
    return 0.5 * y * jnp.where(y < 0, q, 2.0 - q)


def gemm(a, w, c=None, r=None, *, act=False, tile_m=128, tile_n=128, tile_k=64, stages=3,
         minor="N", width=1):  # fmt: skip
    import jax.experimental.pallas as pl
    import jax.experimental.pallas.mosaic_gpu as plgpu

    m, k = a.shape
    n = w.shape[0]
    dtype = a.dtype
    swizzle = plgpu.find_swizzle(tile_k * 16)
    transforms = (plgpu.TilingTransform((8, swizzle // 2)), plgpu.SwizzleTransform(swizzle))
    out_swizzle = plgpu.find_swizzle(EPI * 16)
    out_transforms = (
        plgpu.TilingTransform((8, out_swizzle // 2)),
        plgpu.SwizzleTransform(out_swizzle),
    )
    cta_n = 2 * tile_n
    m_iters, n_iters, k_iters = m // tile_m, n // cta_n, k // tile_k
    extras = [x for x in (c, r) if x is not None]
    c_rows = None if c is None else c.shape[0]  # EPI: a broadcast row; m: full
    minor_dim = {"N": 1, "M": 0}[minor]

    def kernel(a_gmem, w_gmem, *refs):
        extra_gmem, out_gmem = refs[: len(extras)], refs[len(extras)]

        def pipeline(body, context):
            return plgpu.emit_pipeline_warp_specialized(
                body,
                grid=(k_iters,),
                memory_registers=40,
                in_specs=[
                    plgpu.BlockSpec((tile_m, tile_k), lambda kk: (0, kk), transforms=transforms,
                                    memory_space=plgpu.SMEM),
                    plgpu.BlockSpec((cta_n, tile_k), lambda kk: (0, kk), transforms=transforms,
                                    memory_space=plgpu.SMEM),
                ],  # fmt: skip
                wg_axis="wg",
                num_compute_wgs=2,
                max_concurrent_steps=stages,
                compute_context=context,
            )

        ignore = lambda *_, **__: None  # noqa: E731
        scratch = dict(
            pipeline_allocs=pipeline(ignore, ignore).get_allocations(a_gmem, w_gmem),
            out_smem=plgpu.SMEM((2, 2, EPI, EPI), dtype, transforms=out_transforms),
        )
        for e in range(len(extras)):
            scratch[f"x{e}_smem"] = plgpu.SMEM((2, EPI, EPI), dtype, transforms=out_transforms)
        if extras:
            scratch["bar"] = plgpu.Barrier(num_barriers=2 * len(extras))

        @functools.partial(pl.run_scoped, **scratch, collective_axes="wg")
        def _scope(pipeline_allocs, out_smem, **rest):
            x_smem = [rest[f"x{e}_smem"] for e in range(len(extras))]
            bar = rest.get("bar")
            wg = lax.axis_index("wg")

            @plgpu.nd_loop((m_iters * n_iters,), collective_axes="cluster_grid")
            def _mn(info):
                (lin,) = info.index
                mi, ni = plgpu.planar_snake(lin, (m_iters, n_iters), minor_dim, width)
                cm = pl.ds(mi * tile_m, tile_m)
                cn = pl.ds(ni * cta_n + wg * tile_n, tile_n)

                def context(eval_pipeline):
                    @functools.partial(
                        pl.run_scoped, acc_ref=plgpu.ACC((tile_m, tile_n), jnp.float32)
                    )
                    def _acc(acc_ref):
                        eval_pipeline(acc_ref)
                        acc = acc_ref[...]
                        plgpu.wait_smem_to_gmem(0, wait_read_only=True)
                        for ei in range(tile_m // EPI):
                            for ej in range(tile_n // EPI):
                                ms = slice(ei * EPI, (ei + 1) * EPI)
                                ns = slice(ej * EPI, (ej + 1) * EPI)
                                slot = (ei * (tile_n // EPI) + ej) % 2
                                for e, src in enumerate(extra_gmem):
                                    if e == 0 and c is not None and c_rows == EPI:
                                        view = src.at[:, cn]  # the bias row, 64 times
                                    else:
                                        view = src.at[cm, cn].at[ms]
                                    plgpu.copy_gmem_to_smem(
                                        view.at[:, ns], x_smem[e].at[wg], bar.at[wg * len(extras) + e]
                                    )
                                y = acc[ms, ns]
                                for e in range(len(extras)):
                                    plgpu.barrier_wait(bar.at[wg * len(extras) + e])
                                e = 0
                                if c is not None:
                                    y = y + x_smem[0][wg].astype(jnp.float32)
                                    e = 1
                                y16 = y.astype(dtype)
                                if act:
                                    y16 = gelu(y16.astype(jnp.float32)).astype(dtype)
                                if r is not None:
                                    y16 = (
                                        y16.astype(jnp.float32) + x_smem[e][wg].astype(jnp.float32)
                                    ).astype(dtype)
                                plgpu.wait_smem_to_gmem(1, wait_read_only=True)
                                out_smem[wg, slot] = y16
                                plgpu.commit_smem()
                                plgpu.copy_smem_to_gmem(
                                    out_smem.at[wg, slot], out_gmem.at[cm, cn].at[ms, ns]
                                )

                def mma(idxs, a_smem, w_smem, acc_ref):
                    wn = pl.ds(wg * tile_n, tile_n)
                    plgpu.wgmma(acc_ref, a_smem, plgpu.transpose_ref(w_smem.at[wn], (1, 0)))
                    plgpu.wgmma_wait(0)
                    return acc_ref

                pipeline(mma, context)(
                    a_gmem.at[cm, :],
                    w_gmem.at[pl.ds(ni * cta_n, cta_n), :],
                    allocations=pipeline_allocs,
                )

        plgpu.wait_smem_to_gmem(0, wait_read_only=True)

    sms = jax.devices()[0].core_count
    f = plgpu.kernel(
        kernel,
        out_type=jax.ShapeDtypeStruct((m, n), dtype),
        grid=(sms,),
        grid_names=("cluster_grid",),
        cluster=(1,),
        cluster_names=("cluster",),
        num_threads=3,
        thread_name="wg",
        compiler_params=plgpu.CompilerParams(
            lowering_semantics=plgpu.LoweringSemantics.Warpgroup
        ),
    )
    return f(a, w, *extras)


def xla(a, w, c=None, r=None, *, act=False):
    y = lax.dot_general(a, w, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
    if c is not None:
        y = y + jnp.broadcast_to(c[:1] if c.shape[0] != a.shape[0] else c, y.shape).astype(
            jnp.float32
        )
    y16 = y.astype(a.dtype)
    if act:
        y16 = xla_gelu16(y16)
    if r is not None:
        y16 = (y16.astype(jnp.float32) + r.astype(jnp.float32)).astype(a.dtype)
    return y16


def main():
    rng = np.random.default_rng(0)
    M, D, F = 8192, 1024, 4096

    def arr(*shape, scale=1.0):
        return jnp.asarray((rng.standard_normal(shape) * scale).astype(np.float16))

    def bias(n):
        return jnp.broadcast_to(arr(1, n, scale=0.1), (EPI, n))

    x, h = arr(M, D), arr(M, F)
    w1, w2, wq, wo = (arr(F, D, scale=D**-0.5), arr(D, F, scale=F**-0.5),
                      arr(3 * D, D, scale=D**-0.5), arr(D, D, scale=D**-0.5))  # fmt: skip
    cases = {
        "plain fc1": ((x, w1), {}),
        "fc1 bias gelu": ((x, w1, bias(F)), {"act": True}),
        "fc2 bias res": ((h, w2, bias(D), x), {}),
        "out bias res": ((x, wo, bias(D), x), {}),
        "qkv bias": ((x, wq, bias(3 * D)), {}),
    }
    configs = [dict(stages=3), dict(stages=4), dict(stages=3, minor="M", width=4),
               dict(stages=2)]  # fmt: skip
    only = os.environ.get("CASES")
    for name, (args, kw) in cases.items():
        if only and name not in only.split(","):
            continue
        flops = 2 * args[0].shape[0] * args[1].shape[0] * args[0].shape[1]
        ref_fn = jax.jit(functools.partial(xla, **kw))
        ref = ref_fn(*args)
        t = timeit(ref_fn, *args)
        print(f"{name}: xla {t * 1e6:.1f} us {flops / t / 1e12:.0f} TFLOP/s", flush=True)
        for cfg in configs:
            fn = jax.jit(functools.partial(gemm, **kw, **cfg))
            try:
                got = fn(*args)
                t = timeit(fn, *args)
            except Exception as e:  # noqa: BLE001 - a failing config is a result
                print(f"{name}: {cfg} failed {repr(e)[:400]}", flush=True)
                continue
            d = jnp.abs(got.astype(jnp.float32) - ref.astype(jnp.float32))
            rel = float(jnp.max(d) / jnp.max(jnp.abs(ref.astype(jnp.float32))))
            print(f"{name}: {cfg} {t * 1e6:.1f} us {flops / t / 1e12:.0f} TFLOP/s "
                  f"max_rel {rel:.2e} differ {float(jnp.mean(d > 0)):.3f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
