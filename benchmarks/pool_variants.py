"""GPU sweep and check of the overlapping pooling kernel (dml_jax.kernels.pooling).

For each case (3x3 windows of stride 1 padded by 1 over (16, 256, 256, 256): MAX, AVERAGE with
and without IncludePadding; ResNet's 3x3 stride 2 MAX over (334, 64, 112, 112); 1 GiB of float32
or the same bytes of float16, with NaN, -inf and -0.0 planted): the kernel against the lax
lowering (elements whose bits differ, NaN matching NaN), then GB/s (bytes read + written) of the
kernel for each variant (tile elements, band rows, warps, one column a thread, Triton stages,
prefetch), of the lax lowering, of PyTorch's pooling, and of the best device copy (XLA's or
PyTorch's), one sync per many dispatches. Run from the repository root:

    XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=. python benchmarks/pool_variants.py --out f.json
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys

import jax
import jax.numpy as jnp
from timing import timeit, torch_best, torch_copy_seconds

import dml_jax as dml
from dml_jax.kernels import pooling as K
from dml_jax.ops import pooling as P

# (label, operator, float32 shape, window, stride, pad, IncludePadding)
CASES = [
    ("MAX 3x3 s1 p1", "Max", (16, 256, 256, 256), 3, 1, 1, None),
    ("AVERAGE 3x3 s1 p1 incl", "Average", (16, 256, 256, 256), 3, 1, 1, True),
    ("AVERAGE 3x3 s1 p1 excl", "Average", (16, 256, 256, 256), 3, 1, 1, False),
    ("MAX 3x3 s2 p1 ResNet", "Max", (334, 64, 112, 112), 3, 2, 1, None),
]
# (tile elements, band rows, warps, one column a thread, num_stages, prefetch); the first is the
# module's default (one column a thread where the column stride > 1). The run that chose it
# (benchmarks/results/pool_kernel/sweep_spread.log) measured the first row with SPREAD False and
# the others with True; an earlier one (sweep.log) 1024-element steps on 4 warps, bands of 16 or
# 64 rows and MAX from comparisons instead of PTX max.NaN, since dropped.
VARIANTS = [
    (512, 32, 4, None, 1, True),
    (512, 32, 4, True, 1, True),
    (512, 32, 4, False, 1, True),
    (1024, 32, 4, True, 1, False),
    (2048, 32, 8, True, 1, False),
    (512, 32, 4, True, 3, False),
    (1024, 32, 4, False, 1, True),
    (1024, 32, 8, False, 1, True),
    (2048, 32, 8, False, 1, True),
]
TUNABLES = ("TILE_ELEMENTS", "BAND_ROWS", "WARPS", "SPREAD", "STAGES", "PREFETCH")


def _desc(op, shape, dtype, window, stride, pad, include):
    x = dml.TensorDesc(dtype.upper(), shape)
    plan = P.WindowPlan((window,) * 2, (stride,) * 2, (1, 1), (pad,) * 2, (pad,) * 2, shape[2:])
    geometry = dict(strides=[stride] * 2, window_size=[window] * 2, start_padding=[pad] * 2,
                    end_padding=[pad] * 2)  # fmt: skip
    if include is not None:
        geometry["include_padding"] = include
    cls = getattr(dml, f"{op}PoolingOperatorDesc")
    return cls(x, x.like(sizes=tuple(shape[:2]) + plan.outputs), **geometry), plan


def _mismatches(a, b) -> int:
    same = ((a == b) & (jnp.signbit(a) == jnp.signbit(b))) | (jnp.isnan(a) & jnp.isnan(b))
    return int(jnp.sum(~same))


def _torch_seconds(op, shape, dtype, window, stride, pad, include) -> float:
    try:
        import torch
    except ImportError:
        return float("inf")
    t = torch.randn(shape, device="cuda", dtype=torch.float32).to(getattr(torch, dtype))
    f = torch.nn.functional
    if op == "Max":
        best = torch_best(lambda: f.max_pool2d(t, window, stride, pad))
    else:
        best = torch_best(lambda: f.avg_pool2d(t, window, stride, pad, count_include_pad=include))
    del t
    torch.cuda.empty_cache()
    return best


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", help="JSON file for the rows")
    parser.add_argument("--only", default="", help="regular expression on the case labels")
    parser.add_argument("--variants", type=int, default=len(VARIANTS), help="the first N only")
    parser.add_argument("--pick", help="comma-separated VARIANTS indices instead")
    args = parser.parse_args()
    defaults = [getattr(K, name) for name in TUNABLES]
    default_16 = K.TILE_ELEMENTS_16
    rows = []
    for label, op, shape, window, stride, pad, include in CASES:
        if not re.search(args.only, label):
            continue
        for dtype in ("float32", "float16"):
            if dtype == "float16":
                shape = (shape[0] * 2,) + shape[1:]
            d, plan = _desc(op, shape, dtype, window, stride, pad, include)
            x = jax.random.normal(jax.random.PRNGKey(0), shape, jnp.float32).astype(dtype)
            x = x.at[0, 0, :2].set(jnp.nan).at[1, 3, 5].set(-jnp.inf).at[2, 1].set(-0.0)
            out_bytes = math.prod(d.output_tensor.sizes) * x.dtype.itemsize
            nbytes = x.size * x.dtype.itemsize + out_bytes
            t_copy = min(timeit(jax.jit(lambda y: -y), x), torch_copy_seconds(shape, dtype))
            copy_gbps = 2 * x.size * x.dtype.itemsize / t_copy / 1e9
            lax_fn = jax.jit(dml.compile_operator(d, fast_paths=False).fn)
            want = lax_fn(x)
            t_lax = timeit(lax_fn, x)
            t_torch = _torch_seconds(op, shape, dtype, window, stride, pad, include)
            average = op == "Average"
            picked = [VARIANTS[int(i)] for i in args.pick.split(",")] if args.pick else None
            for variant in picked or VARIANTS[: args.variants]:
                for name, value in zip(TUNABLES, variant):
                    setattr(K, name, value)
                K.TILE_ELEMENTS_16 = variant[0]  # a variant's tile in both types
                tile, band, warps, _, stages, prefetch = variant
                v = K.plan(shape, dtype, plan, average)
                row = dict(case=label, dtype=dtype, shape=list(shape), tile=tile, band=band,
                           warps=warps, spread=v.spread, stages=stages, prefetch=prefetch,
                           block_planes=v.block_planes,
                           cols=v.cols, programs=v.programs, copy_gbps=copy_gbps,
                           lax_ratio=nbytes / t_lax / 1e9 / copy_gbps,
                           torch_ratio=nbytes / t_torch / 1e9 / copy_gbps)  # fmt: skip
                try:
                    kfn = jax.jit(lambda y, v=v: K.pool_kernel(y, v, average, include))
                    row["mismatches"] = _mismatches(kfn(x), want)
                    t = timeit(kfn, x)
                    row["kernel_ratio"] = nbytes / t / 1e9 / copy_gbps
                except Exception as e:  # a variant that fails is reported
                    row["error"] = f"{type(e).__name__}: {str(e)[:400]}"
                rows.append(row)
                if args.out:  # after every row: a run cut short keeps what it measured
                    with open(args.out, "w") as f:
                        json.dump(rows, f, indent=1)
                print(f"{label:24s} {dtype:8s} tile {tile:5d} band {band:3d} warps {warps}"
                      f" spread {v.spread:d} stages {stages} prefetch {prefetch:d}"
                      f" planes {v.block_planes:3d} cols {v.cols:3d}"
                      f"  kernel {row.get('kernel_ratio', float('nan')):.2f}"
                      f"  lax {row['lax_ratio']:.2f}  torch {row['torch_ratio']:.2f}"
                      f"  mismatches {row.get('mismatches')} {row.get('error', '')}",
                      flush=True)  # fmt: skip
            for name, value in zip(TUNABLES, defaults):
                setattr(K, name, value)
            K.TILE_ELEMENTS_16 = default_16
            del x, want
    return 0


if __name__ == "__main__":
    sys.exit(main())
