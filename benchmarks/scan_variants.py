"""GPU sweep and check of the scan kernel (dml_jax.kernels.scan).

For each case (rows of 1024, axis 1 of NCHW with C = 32, 1 GiB of float32 or the same bytes of
float16) and each scan (sum or product, forward or reverse, inclusive or exclusive): the kernel
against the lax lowering (max relative difference; integers exactly), then GB/s of the kernel for
each (warps, tile elements, columns) variant, of the lax lowering, of jnp.cumsum, of PyTorch's
cumsum and of the best device copy, one sync per many dispatches. Run from the repository root:

    XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=. python benchmarks/scan_variants.py
"""

from __future__ import annotations

import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
from timing import timeit, torch_best

from dml_jax.kernels import scan as K
from dml_jax.ops.scan_generate import scan as lax_scan

GIB = 1 << 30
CASES = [("rows of 1024", (1 << 18, 1024), 1), ("axis 1 NCHW C=32", (128, 32, 256, 256), 1),
         ("axis 2 NCHW H=256", (64, 64, 256, 256), 2)]  # fmt: skip
SCANS = [("sum", False, False, False), ("sum exclusive", False, True, False),
         ("sum reverse", True, False, False), ("product", False, False, True)]  # fmt: skip
# (warps, minor-axis tile elements, outer-axis columns, outer-axis rows per loop step)
VARIANTS = [(4, 4096, 1024, 4), (4, 2048, 512, 4), (4, 2048, 512, 8), (8, 4096, 1024, 2)]


def torch_seconds(shape, dtype, fn_name=None, axis=0) -> float:
    try:
        import torch
    except ImportError:
        return float("inf")
    src = torch.rand(shape, dtype=getattr(torch, dtype), device="cuda")
    dst = torch.empty_like(src)

    def run():
        if fn_name is None:
            dst.copy_(src)
            return dst
        return getattr(torch, fn_name)(src, axis)

    return torch_best(run)


def main() -> None:
    rows = []
    for dtype in ("float32", "float16"):
        for label, shape, axis in CASES:
            if dtype == "float16":
                shape = (shape[0] * 2, *shape[1:])
            x = jax.random.uniform(jax.random.key(0), shape, jnp.float32, 0.5, 1.5).astype(dtype)
            nbytes = 2 * x.size * x.dtype.itemsize
            copy = min(timeit(jax.jit(lambda a: a + 0), x), torch_seconds(shape, dtype))
            base = {"case": label, "dtype": dtype, "copy_gbs": nbytes / copy / 1e9}
            print(json.dumps(base), flush=True)
            for name, rev, exc, prod in SCANS:
                f_lax = jax.jit(
                    lambda a, rev=rev, exc=exc, prod=prod: lax_scan(a, axis, rev, exc, prod)
                )
                t_lax = timeit(f_lax, x)
                t_torch = torch_seconds(shape, dtype, "cumprod" if prod else "cumsum", axis)
                row = {**base, "scan": name, "lax": copy / t_lax, "torch": copy / t_torch}
                want = np.asarray(f_lax(x), np.float64)
                for warps, tile, cols, unroll in VARIANTS:
                    K.WARPS, K.TILE_ELEMENTS, K.MAX_COLS, K.UNROLL = warps, tile, cols, unroll
                    v = K.plan(shape, axis, dtype, rev, prod)
                    if v is None:
                        continue
                    f = jax.jit(
                        lambda a, v=v, rev=rev, exc=exc, prod=prod: K.scan_kernel(
                            a, v, rev, exc, prod
                        )
                    )
                    try:
                        got = np.asarray(f(x), np.float64)
                        same = np.isnan(got) == np.isnan(want)
                        err = (
                            float(np.nanmax(np.abs(got - want) / (np.abs(want) + 1e-30)))
                            if same.all()
                            else float("inf")
                        )
                        row[f"kernel w{warps} t{tile} c{cols} u{unroll}"] = round(
                            copy / timeit(f, x), 3
                        )
                        row["max_rel_err"] = max(row.get("max_rel_err", 0), err)
                    except Exception as e:
                        row[f"kernel w{warps} t{tile} c{cols} u{unroll}"] = (
                            f"error {type(e).__name__}: {str(e)[:200]}"
                        )
                rows.append(row)
                print(json.dumps(row), flush=True)
    print(json.dumps({"jax": jax.__version__, "device": str(jax.devices()[0])}))


if __name__ == "__main__":
    sys.exit(main())
