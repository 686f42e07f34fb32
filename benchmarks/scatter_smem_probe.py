"""Experiment: the shared-memory SCATTER kernel (Mosaic GPU) against lax, the Triton kernel and
the copy, bit-exact checks on the bench's indices and stressed ones. Run from the repository
root: XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=. python benchmarks/scatter_smem_probe.py"""

from __future__ import annotations

import json
import sys
import time
import traceback

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from timing import timeit, torch_copy_seconds

import dml_jax as dml
from dml_jax.kernels import scatter as K
from dml_jax.ops.indexing import ScatterOperatorDesc, lower_scatter

SHAPE, LENGTH = (16, 256, 256, 256), 128
VARIANTS = [{}, {"SMEM_LINES": 16}, {"SMEM_LINES": 8}, {"SMEM_STAGES": 3, "SMEM_LINES": 16},
            {"SMEM_GROUP": 16}, {"SMEM_STEPS": 8}, {"SMEM_GROUP": 4}]  # fmt: skip


def _same_bits(a, b):
    bits = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32}[a.dtype.itemsize]
    return jnp.array_equal(lax.bitcast_convert_type(a, bits), lax.bitcast_convert_type(b, bits))


def main() -> int:
    out = sys.argv[1] if len(sys.argv) > 1 else None
    same_bits = jax.jit(_same_bits)
    defaults = {n: getattr(K, n) for n in ("SMEM_LINES", "SMEM_STEPS", "SMEM_STAGES", "SMEM_GROUP")}
    rows = []
    for dtype in ("float32", "float16"):
        scale = 4 // np.dtype(dtype).itemsize
        shape = (SHAPE[0] * scale,) + SHAPE[1:]
        ushape = shape[:-1] + (LENGTH,)
        name = dtype.upper()
        x_t, u_t = dml.TensorDesc(name, shape), dml.TensorDesc(name, ushape)
        d = ScatterOperatorDesc(x_t, dml.TensorDesc("INT32", ushape), u_t, x_t, axis=3)
        keys = jax.random.split(jax.random.PRNGKey(0), 5)
        x = jax.random.normal(keys[0], shape, jnp.float32).astype(dtype)
        upd = jax.random.normal(keys[1], ushape, jnp.float32).astype(dtype)
        idx = jax.random.randint(keys[2], ushape, -100, 100, jnp.int32)
        w = shape[-1]
        many = jax.random.randint(keys[3], ushape, -6, 6, jnp.int32)
        wide = jax.random.randint(keys[4], ushape, -w - 16, w + 16, jnp.int32)
        idx2 = jnp.where(jnp.arange(LENGTH) % 2 == 0, many, wide)
        del many, wide
        nbytes = x.nbytes * 2 + idx.nbytes + upd.nbytes
        lax_fn = jax.jit(lambda x, i, u, d=d: lower_scatter(d, x, i, u)[0])
        refs = (lax_fn(x, idx, upd), lax_fn(x, idx2, upd))
        t_lax = timeit(lax_fn, x, idx, upd)
        copy = jax.jit(lambda y: -y)
        t_copy = min(timeit(copy, x), torch_copy_seconds(shape, dtype))
        copy_gbps = 2 * x.nbytes / t_copy / 1e9
        vt = K.plan(shape, ushape, 3, x.dtype, idx.dtype)
        t_triton = timeit(jax.jit(lambda x, i, u, v=vt: K.scatter_kernel(x, i, u, v)), x, idx, upd)
        print(f"{dtype} {shape}: copy {copy_gbps:.0f} GB/s, lax "
              f"{nbytes / t_lax / 1e9 / copy_gbps:.3f}, triton {nbytes / t_triton / 1e9 / copy_gbps:.3f}",
              flush=True)  # fmt: skip
        for change in VARIANTS:
            for k, val in {**defaults, **change}.items():
                setattr(K, k, val)
            row = dict(dtype=dtype, change=change, copy_gbps=copy_gbps,
                       lax_ratio=nbytes / t_lax / 1e9 / copy_gbps,
                       triton_ratio=nbytes / t_triton / 1e9 / copy_gbps)  # fmt: skip
            start = time.perf_counter()
            try:
                v = K.smem_plan(shape, ushape, 3, x.dtype, idx.dtype)
                row["view"] = str(v)
                fn = jax.jit(lambda x, i, u, v=v: K.scatter_smem(x, i, u, v))
                row["exact"] = bool(same_bits(fn(x, idx, upd), refs[0]))
                row["exact_stress"] = bool(same_bits(fn(x, idx2, upd), refs[1]))
                row["compile_s"] = time.perf_counter() - start
                t = timeit(fn, x, idx, upd)
                row["ratio"] = nbytes / t / 1e9 / copy_gbps
                print(f"{dtype} {change!s:40s} {v} ratio {row['ratio']:.3f} exact "
                      f"{row['exact']} {row['exact_stress']}", flush=True)  # fmt: skip
            except Exception as e:
                row["error"] = f"{type(e).__name__}: {e}"[:3000]
                traceback.print_exc(limit=6)
                print(f"{dtype} {change}: {row['error'][:2000]}", flush=True)
            rows.append(row)
            if out:
                with open(out, "w") as f:
                    json.dump(rows, f, indent=1)
        del x, upd, idx, idx2, refs
    return 0


if __name__ == "__main__":
    sys.exit(main())
