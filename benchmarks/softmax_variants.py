"""GPU sweep and check of the one-pass softmax kernel (dml_jax.kernels.softmax).

For each case (rows of 1024 and 32768, axis 1 of NCHW with C = 32, 1 GiB of float32 or the same
bytes of float16): the kernel against the lax lowering (max |difference| in ulps of the result,
NaN positions equal), then GB/s of the kernel for each (tile bytes, loop rows, warps) variant, of the
lax lowering, and of the best device copy (XLA's or PyTorch's), one sync per many dispatches. Run from the repository root:

    XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=. python benchmarks/softmax_variants.py
"""

from __future__ import annotations

import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
from timing import timeit, torch_copy_seconds

from dml_jax.kernels import softmax as K
from dml_jax.ops.softmax import log_softmax, softmax

CASES = [("rows of 32768", (1 << 13, 32768), (1,)), ("axis 1 NCHW C=32", (128, 32, 256, 256), (1,)),
         ("axis 1 NCHW C=256", (16, 256, 256, 256), (1,))]  # fmt: skip
# (tile bytes, loop rows, minimum inner-layout columns, warps; None: the plan's own)
VARIANTS = [(8192, 8192, 16, None), (8192, 8192, 32, None), (8192, 8192, 64, None),
            (8192, 8192, 64, 8), (8192, 8192, 32, 8), (16384, 8192, 64, 8)]  # fmt: skip


def main() -> int:
    rows = []
    for dtype in ("float32", "float16"):
        for label, shape, axes in CASES:
            if dtype == "float16":
                shape = (shape[0] * 2,) + shape[1:]
            x = jax.random.normal(jax.random.PRNGKey(0), shape, jnp.float32).astype(dtype) * 4
            nbytes = 2 * x.size * x.dtype.itemsize
            copy = jax.jit(lambda y: -y)
            t_copy = min(timeit(copy, x), torch_copy_seconds(shape, dtype))
            for log in (False, True):
                fn = log_softmax if log else softmax
                lax_fn = jax.jit(lambda y, f=fn: f(y.astype(jnp.float32), axes).astype(y.dtype))
                t_lax = timeit(lax_fn, x)
                name = ("LOG_SOFTMAX " if log else "SOFTMAX ") + label
                want = np.asarray(lax_fn(x)).astype(np.float32)
                for tile, loop, min_cols, warps in VARIANTS:
                    K.TILE_BYTES, K.LOOP_ROWS, K.MIN_COLS = tile, loop, min_cols
                    K.WARPS = warps
                    v = K.plan(shape, axes, x.dtype)
                    if v is None:
                        print(f"{name} {dtype}: no plan")
                        break
                    kfn = jax.jit(lambda y, v=v, log=log: K.softmax_kernel(y, v, log))
                    got = np.asarray(kfn(x)).astype(np.float32)
                    scale = np.maximum(np.abs(want), np.finfo(dtype).tiny)
                    ulps = np.nanmax(np.abs(got - want) / (scale * np.finfo(dtype).eps))
                    nan_ok = bool(np.array_equal(np.isnan(got), np.isnan(want)))
                    t = timeit(kfn, x)
                    row = dict(case=name, dtype=dtype, tile=tile, loop=loop, min_cols=min_cols,
                               warps=v.warps,
                               cols=v.cols, rows=v.rows,
                               kernel_gbps=nbytes / t / 1e9, lax_gbps=nbytes / t_lax / 1e9,
                               copy_gbps=nbytes / t_copy / 1e9, max_ulps=float(ulps),
                               nan_positions_equal=nan_ok)  # fmt: skip
                    row["kernel_ratio"] = row["kernel_gbps"] / row["copy_gbps"]
                    row["lax_ratio"] = row["lax_gbps"] / row["copy_gbps"]
                    rows.append(row)
                    print(f"{name:28s} {dtype:8s} tile {tile:6d}B loop {loop:5d} warps {v.warps:2d}"
                          f" rows {v.rows:5d} cols {v.cols:5d}"
                          f"  kernel {row['kernel_ratio']:.2f}  lax {row['lax_ratio']:.2f}"
                          f"  ulps {ulps:.1f} nan {nan_ok}", flush=True)  # fmt: skip
            del x
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
