import functools, math
import jax, jax.numpy as jnp, numpy as np
from jax import lax

W = 256          # elements a line of a CTA's block
SLICE = 4096     # elements per register slice

def mvn_cluster(x2, p, eps, scale=None, bias=None, relu=False, pieces=1):
    import jax.experimental.pallas as pl
    import jax.experimental.pallas.mosaic_gpu as plgpu
    from jax._src.lib.mlir.dialects import arith, nvvm
    a, r = x2.shape
    c = r // p
    h = c // W
    k = SLICE // W
    steps = h // k
    f32 = jnp.float32
    n = np.float32(r)
    x4 = x2.reshape(a, p, h, W)
    terms = [t for t in (scale, bias) if t is not None]

    from jax._src.lib.mlir import ir
    from jax._src.lib.mlir.dialects import gpu, memref
    from jax.experimental.mosaic.gpu import utils as mu

    @plgpu.inline_mgpu(arg_types=(plgpu.RefType(), plgpu.RefType()))
    def exchange(ctx, mine, table):
        """Every CTA of the cluster writes its two figures into column ``me`` of every peer's
        table (one thread), then the cluster barrier (release, acquire) makes them visible."""
        del ctx
        index = ir.IndexType.get()
        mu.warpgroup_barrier()
        me = gpu.cluster_block_id(gpu.Dimension.x)
        first = arith.cmpi(arith.CmpIPredicate.eq, mu.thread_idx(), mu.c(0, ir.IntegerType.get_signless(32)))
        with mu.when(first):
            vals = [memref.load(mine, [mu.c(j, index)]) for j in range(2)]
            for q in range(p):
                peer = mu.get_cluster_ref(table, gpu.Dimension.x, mu.c(q, index), generic=False)
                for j in range(2):
                    memref.store(vals[j], peer, [mu.c(j, index), me])
        nvvm.cluster_arrive(aligned=True)
        nvvm.cluster_wait(aligned=True)

    hp = h // pieces

    def kernel(x_gmem, *rest):
        *t_gmem, o_gmem, buf, mine, stats, bar = rest
        row = lax.axis_index("rows")
        me = lax.axis_index("c")
        for j in range(pieces):
            span = pl.ds(j * hp, hp)
            plgpu.copy_gmem_to_smem(x_gmem.at[row, me, span], buf.at[span], bar.at[j])

        def piece(i):
            return buf[pl.ds(i * k, k), :].astype(f32)

        per = steps // pieces
        s1 = None
        for i in range(steps):
            if i % per == 0:
                plgpu.barrier_wait(bar.at[i // per])
            s1 = piece(i) if s1 is None else s1 + piece(i)
        m = jnp.sum(s1) / np.float32(c)
        acc = None
        for i in range(steps):
            d = piece(i) - m
            acc = d * d if acc is None else acc + d * d
        m2 = jnp.sum(acc)
        if p > 1:
            mine[0] = m
            mine[1] = m2
            exchange(mine, stats)
            ms = [stats[0, q] for q in range(p)]
            mean = sum(ms[1:], ms[0]) / np.float32(p)
            tot = stats[1, 0]
            for q in range(1, p):
                tot = tot + stats[1, q]
            for q in range(p):
                dq = ms[q] - mean
                tot = tot + np.float32(c) * dq * dq
        else:
            mean, tot = m, m2
        factor = lax.rsqrt(tot / n + np.float32(eps))
        sc = t_gmem[0][row].astype(f32) if scale is not None else None
        bi = t_gmem[-1][row].astype(f32) if bias is not None else None
        if sc is not None:
            factor = factor * sc
        for i in range(steps):
            y = (piece(i) - mean) * factor
            if bi is not None:
                y = y + bi
            if relu:
                y = jnp.where(y > 0, y, jnp.where(y != y, y, 0.0))
            buf[pl.ds(i * k, k), :] = y.astype(buf.dtype)
            if (i + 1) % per == 0:
                j = i // per
                span = pl.ds(j * hp, hp)
                plgpu.commit_smem()
                plgpu.copy_smem_to_gmem(buf.at[span], o_gmem.at[row, me, span])
        plgpu.wait_smem_to_gmem(0, wait_read_only=True)

    out = plgpu.kernel(
        kernel,
        out_type=jax.ShapeDtypeStruct(x4.shape, x4.dtype),
        grid=(a,), grid_names=("rows",),
        cluster=(p,), cluster_names=("c",),
        scratch_types=[plgpu.SMEM((h, W), x2.dtype), plgpu.SMEM((2,), f32), plgpu.SMEM((2, p), f32), plgpu.Barrier(num_barriers=pieces)],
    )(x4, *terms)
    return out.reshape(a, r)

def reference(x2, eps, scale=None, bias=None, relu=False):
    x = x2.astype(jnp.float32)
    m = x.mean(1, keepdims=True)
    v = ((x - m) ** 2).mean(1, keepdims=True)
    y = (x - m) * lax.rsqrt(v + eps)
    if scale is not None: y = y * scale[:, None].astype(jnp.float32)
    if bias is not None: y = y + bias[:, None].astype(jnp.float32)
    if relu: y = jnp.maximum(y, 0)
    return y.astype(x2.dtype)

if __name__ == "__main__":
    from jax import export
    for dt, p, pc in (("float32", 4, 4), ("float16", 2, 1), ("float32", 2, 2), ("float16", 1, 4)):
        f = jax.jit(functools.partial(mvn_cluster, p=p, eps=1e-5, relu=True, pieces=pc))
        e = export.export(f, platforms=["cuda"])(jax.ShapeDtypeStruct((4096, 65536), dt),
            scale=jax.ShapeDtypeStruct((4096,), dt), bias=jax.ShapeDtypeStruct((4096,), dt))
        print(dt, "lowered", len(e.mlir_module()))
