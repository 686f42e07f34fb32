"""GPU sweep and check of the minor-axis SCATTER kernel (dml_jax.kernels.scatter).

The bench case: input (16, 256, 256, 256) float32 (1 GiB), INT32 indices and updates of
(16, 256, 256, 128) along axis 3, indices random in [-100, 100) as ``dml-jax bench`` draws
them (negative ones, many repeats); float16 with N doubled (the same input bytes). For each
kernel variant (a change of the tunables in BASE) it checks the result against the lax
lowering bit for bit, on the bench's indices and on indices half in [-6, 6) (repeated many
times per line) and half in [-W - 16, W + 16) (out of range on both sides), then times it.
GB/s count input + indices + updates read and output written; the ratio is to the best device
copy (XLA's or PyTorch's), one sync per many dispatches. The recorded runs also timed variants since dropped from the kernel:
benchmarks/results/scatter_kernel/sweep.log L2 hints at 4 threads a line ("stream": loads
"evict_first", "keep": copied lines stored "evict_last"), sweep_followup.log those hints at 8 to
32 threads a line (HINTS), a persistent grid of PER_SM programs an SM looping over blocks of
lines, a step's loads issued before its stores (LOADS 1) or the next step's too (LOADS 2), and
each position's winner found in registers over chunks of WINNER_CHUNK updates (no ordered
stores). Run from the repository root:

    XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=. python benchmarks/scatter_variants.py \\
        --out sweep.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from timing import timeit, torch_copy_seconds

import dml_jax as dml
from dml_jax.kernels import scatter as K
from dml_jax.ops.indexing import ScatterOperatorDesc, lower_scatter

SHAPE, LENGTH = (16, 256, 256, 256), 128
BASE = dict(WARPS=4, OWNERS=16, ROWS=1, STEP=16, VEC=4, COPY_ELEMENTS=4096)
# Each variant changes these tunables of BASE (the chosen ones); the first FLOAT16_VARIANTS
# also in float16.
VARIANTS = [{}, {"OWNERS": 8}, {"OWNERS": 32}, {"STEP": 8}, {"OWNERS": 8, "STEP": 8},
            {"OWNERS": 4}, {"WARPS": 8, "COPY_ELEMENTS": 8192},
            {"WARPS": 2, "COPY_ELEMENTS": 2048}]  # fmt: skip
FLOAT16_VARIANTS = 5


def _same_bits(a, b):
    bits = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32}[a.dtype.itemsize]
    return jnp.array_equal(lax.bitcast_convert_type(a, bits), lax.bitcast_convert_type(b, bits))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=None, help="JSON file for the rows")
    args = parser.parse_args()
    defaults = {name: getattr(K, name) for name in BASE}
    same_bits = jax.jit(_same_bits)
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
        print(f"{dtype} {shape}: copy {copy_gbps:.0f} GB/s, lax "
              f"{nbytes / t_lax / 1e9 / copy_gbps:.2f} of it", flush=True)  # fmt: skip
        variants = VARIANTS if dtype == "float32" else VARIANTS[:FLOAT16_VARIANTS]
        for change in variants:
            variant = {**BASE, **change}
            for tunable, value in variant.items():
                setattr(K, tunable, value)
            row = dict(case="SCATTER axis 3", dtype=dtype, variant=variant,
                       copy_gbps=copy_gbps, lax_gbps=nbytes / t_lax / 1e9)  # fmt: skip
            row["lax_ratio"] = row["lax_gbps"] / copy_gbps
            start = time.perf_counter()
            try:
                v = K.plan(shape, ushape, 3, x.dtype, idx.dtype)
                kfn = jax.jit(lambda x, i, u, v=v: K.scatter_kernel(x, i, u, v))
                row["exact"] = bool(same_bits(kfn(x, idx, upd), refs[0]))
                row["exact_stress"] = bool(same_bits(kfn(x, idx2, upd), refs[1]))
                row["compile_and_check_s"] = time.perf_counter() - start
                t = timeit(kfn, x, idx, upd)
            except Exception as e:  # a variant that fails is recorded, not fatal
                row["error"] = f"{type(e).__name__}: {e}"[:500]
                print(f"{dtype} {change}: {row['error']}", flush=True)
                rows.append(row)
                continue
            row["kernel_gbps"] = nbytes / t / 1e9
            row["kernel_ratio"] = row["kernel_gbps"] / copy_gbps
            row["lines"] = v.lines
            rows.append(row)
            print(f"{dtype:8s} {change!s:52s} lines {v.lines:3d} programs {v.programs:7d}"
                  f"  kernel {row['kernel_ratio']:.3f}  lax {row['lax_ratio']:.3f}"
                  f"  exact {row['exact']} {row['exact_stress']}", flush=True)  # fmt: skip
            if args.out:
                with open(args.out, "w") as f:
                    json.dump(rows, f, indent=1)
        del x, upd, idx, idx2, refs
    for tunable, value in defaults.items():
        setattr(K, tunable, value)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
