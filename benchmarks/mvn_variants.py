"""GPU sweep and check of the single-pass MVN kernel (dml_jax.kernels.mvn).

For each case (instance norm over H, W of NCHW with C = 32 and per-channel Scale and Bias; layer
norm and RMS norm over rows of 4096 with per-column Scale and Bias; 1 GiB of float32 or the same
bytes of float16): the kernel against the lax lowering (the largest difference as a fraction of
the tolerance tests/test_mvn_kernel.py states, and NaN positions), then GB/s (input read plus
output written; Scale and Bias are negligible) of the kernel for each tile variant, of the lax
lowering, and of the best device copy (XLA's or PyTorch's), one sync per many dispatches. The
JSON is rewritten after every row, so a run cut short keeps what it measured. Run from the
repository root:

    XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=. python benchmarks/mvn_variants.py --out F
"""

from __future__ import annotations

import argparse
import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
from timing import timeit, torch_copy_seconds

import dml_jax as dml
from dml_jax.kernels import mvn as K
from dml_jax.ops.normalization import lower_mvn


def _instance(t):
    p = t.like(sizes=(1, t.sizes[1], 1, 1))
    return dml.MeanVarianceNormalizationOperatorDesc(
        t, p, p, t, cross_channel=False, normalize_variance=True, epsilon=1e-5
    )


def _rows(use_mean):
    def make(t):
        p = t.like(sizes=(1, t.sizes[1]))
        return dml.MeanVarianceNormalization2OperatorDesc(
            t, p, p, t, axes=(1,), use_mean=use_mean, use_variance=True, epsilon=1e-5
        )

    return make


# (name, float32 shape (float16 doubles the first size), description, variant kind)
CASES = [("instance norm NCHW C=32", (128, 32, 256, 256), _instance, "loop"),
         ("layer norm rows of 4096", (65536, 4096), _rows(True), "tile"),
         ("RMS norm rows of 4096", (65536, 4096), _rows(False), "tile")]  # fmt: skip
# Looped rows: (LOOP_ELEMENTS, LOOP_WARPS, LOOP_GRID); rows in one tile: (TILE_ELEMENTS, WARPS).
VARIANTS = {
    "loop": [(8192, 8, None), (4096, 4, None), (16384, 16, None), (8192, 4, None),
             (16384, 8, None), (8192, 8, 132), (8192, 8, 264), (16384, 16, 132),
             (16384, 16, 264), (4096, 4, 264), (4096, 4, 528), (8192, 8, 396)],
    "tile": [(4096, 4), (4096, 8), (4096, 16), (8192, 8), (8192, 16), (16384, 16)],
}  # fmt: skip
NAMES = {"loop": ("LOOP_ELEMENTS", "LOOP_WARPS", "LOOP_GRID"), "tile": ("TILE_ELEMENTS", "WARPS")}


@jax.jit
def _error(got, want, scale, bias):
    """The largest |got - want| over the stated tolerance, and whether NaN positions agree."""
    g, w = got.astype(jnp.float32), want.astype(jnp.float32)
    s = jnp.broadcast_to(jnp.abs(scale.astype(jnp.float32)), w.shape)
    b = jnp.broadcast_to(jnp.abs(bias.astype(jnp.float32)), w.shape)
    tol = 16 * np.finfo(np.float32).eps * (jnp.abs(w) + s + b)
    if want.dtype == jnp.float16:  # plus one float16 ulp: the next float16 up, less |want|
        a = jnp.abs(want)
        bits = jax.lax.bitcast_convert_type(a, jnp.uint16) + np.uint16(1)
        up = jax.lax.bitcast_convert_type(bits, jnp.float16)
        tol = tol + (up.astype(jnp.float32) - a.astype(jnp.float32))
    nan = jnp.isnan(w)
    ratio = jnp.where(nan, 0.0, jnp.abs(g - w) / tol)
    return jnp.max(ratio), jnp.all(nan == jnp.isnan(g))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", help="write the rows as JSON here")
    args = parser.parse_args(argv)
    rows = []
    saved = {n: getattr(K, n) for names in NAMES.values() for n in names}
    for name, shape, make, kind in CASES:
        for dtype in ("float32", "float16"):
            if dtype == "float16":
                shape2 = (shape[0] * 2,) + shape[1:]
            else:
                shape2 = shape
            desc = make(dml.TensorDesc(dtype.upper(), shape2))
            keys = jax.random.split(jax.random.PRNGKey(0), 3)
            x = (jax.random.normal(keys[0], shape2, jnp.float32) * 3 + 1).astype(dtype)
            p = desc.scale_tensor.sizes
            scale = (jax.random.normal(keys[1], p, jnp.float32) + 0.5).astype(dtype)
            bias = (jax.random.normal(keys[2], p, jnp.float32) + 0.5).astype(dtype)
            nbytes = 2 * x.size * x.dtype.itemsize
            t_copy = min(timeit(jax.jit(lambda y: -y), x), torch_copy_seconds(shape2, dtype))
            lax_fn = jax.jit(lambda *a, d=desc: lower_mvn(d, *a)[0])
            t_lax = timeit(lax_fn, x, scale, bias)
            want = lax_fn(x, scale, bias)
            for variant in VARIANTS[kind]:
                for n, value in saved.items():
                    setattr(K, n, value)
                for n, value in zip(NAMES[kind], variant):
                    setattr(K, n, value)
                v = K.plan(shape2, (2, 3) if kind == "loop" else (1,), x.dtype)
                kfn = jax.jit(lambda *a, d=desc: K.lower_mvn_kernel(d, *a)[0])
                try:
                    err, nan_ok = (float(e) for e in _error(kfn(x, scale, bias), want, scale, bias))
                    t = timeit(kfn, x, scale, bias)
                except Exception as e:  # a variant that cannot compile: reported, the sweep goes on
                    print(f"{name} {dtype} {variant}: {type(e).__name__}: {e}"[:400], flush=True)
                    continue
                row = dict(case=name, dtype=dtype, variant=list(variant), rows=v.rows,
                           cols=v.cols, warps=v.warps, grid=v.grid,
                           kernel_gbps=nbytes / t / 1e9, lax_gbps=nbytes / t_lax / 1e9,
                           copy_gbps=nbytes / t_copy / 1e9, error_over_tolerance=err,
                           nan_positions_equal=bool(nan_ok))  # fmt: skip
                row["kernel_ratio"] = row["kernel_gbps"] / row["copy_gbps"]
                row["lax_ratio"] = row["lax_gbps"] / row["copy_gbps"]
                rows.append(row)
                print(f"{name:24s} {dtype:8s} {variant!s:18s} rows {v.rows:5d} cols {v.cols:2d}"
                      f" warps {v.warps:2d} kernel {row['kernel_ratio']:.2f} lax"
                      f" {row['lax_ratio']:.2f} err/tol {err:.2f} nan {bool(nan_ok)}",
                      flush=True)  # fmt: skip
                if args.out:
                    with open(args.out, "w") as f:
                        json.dump(rows, f, indent=1)
            del x, want
    for n, value in saved.items():
        setattr(K, n, value)
    return 0


if __name__ == "__main__":
    sys.exit(main())
