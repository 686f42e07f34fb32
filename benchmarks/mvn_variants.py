"""GPU sweep and check of the single-pass MVN kernel (dml_jax.kernels.mvn).

For each case (instance norm over H, W of NCHW with C = 32 and per-channel Scale and Bias, rows
of 65536 and of 131072; layer norm and RMS norm over rows of 4096 with per-column Scale and Bias;
1 GiB of float32 or the same bytes of float16): the kernel against the lax lowering (the largest
difference as a fraction of the tolerance tests/test_mvn_kernel.py states, and NaN positions),
then GB/s (input read plus output written; Scale and Bias are negligible) of the kernel for each
variant of its tunables (``*``: the module's defaults), of the lax lowering, and of the best
device copy (XLA's or PyTorch's), one sync per many dispatches. The JSON is rewritten after
every row, so a run cut short keeps what it measured. Run from the repository root:

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


def _retain(tile, keep, warps, depth, grid=132, stages=1, hints=False):
    """Rows kept in part in registers: ``keep`` elements kept, the rest in ``tile``-element
    tiles loaded ``depth`` tiles ahead (``hints``: L2 eviction hints)."""
    both = {dtype: (keep, tile, depth, grid) for dtype in ("float32", "float16")}
    return dict(RETAIN_ROW_MAX=1 << 17, RETAIN=both, RETAIN_WARPS=warps, RETAIN_STAGES=stages,
                RETAIN_HINTS=tuple(both) if hints else ())  # fmt: skip


def _loop(tile, warps, grid, stages=1):
    """The two loops over the whole row (what longer rows take)."""
    return dict(RETAIN_ROW_MAX=0, LOOP_ELEMENTS=tile, LOOP_WARPS=warps, LOOP_GRID=grid,
                LOOP_STAGES=stages)  # fmt: skip


# Rows of 65536 (instance norm): half the row kept (a quarter in one row), the rest in tiles of
# 2048-8192 loaded 0-4 tiles ahead, on 16 warps in 132 programs (then one program per row, 32
# warps, Triton pipelining). ptxas (sm_90a, from the same Triton IR through Triton 3.5) reports
# 101-128 registers (64 on 32 warps) and no spills for these rows but float32 4096/2 (16 bytes);
# more kept (65536 float16) or deeper (float32 4096/4, 8192/1) spilled 56-580 bytes. Then the
# two-loop path: the previous default (16384 on 16 warps in 264 programs) and with stages 3.
_BOTH = [_retain(4096, 16384, 16, 4), _retain(2048, 32768, 16, 4, None),
         _retain(4096, 32768, 32, 0), _retain(4096, 32768, 16, 0, 132, 3),
         _loop(16384, 16, 264), _loop(16384, 16, 264, 3)]  # fmt: skip
INSTANCE = {
    "float32": [_retain(2048, 32768, 16, 4), _retain(2048, 32768, 16, 2),
                _retain(4096, 32768, 16, 0), _retain(4096, 32768, 16, 2),
                _retain(2048, 32768, 16, 1), *_BOTH],
    "float16": [_retain(2048, 32768, 16, 4), _retain(4096, 32768, 16, 4),
                _retain(4096, 32768, 16, 2), _retain(8192, 32768, 16, 1),
                _retain(4096, 32768, 16, 0), *_BOTH],
}  # fmt: skip
# Rows of 131072: half of 65536 kept against the two loops, for where keeping stops paying.
LONG = {
    dtype: [_retain(2048, 32768, 16, 4), _loop(16384, 16, 264)] for dtype in ("float32", "float16")
}
# Rows of 4096 (one tile): the default only, against regressions.
ROWS = {dtype: [{}] for dtype in ("float32", "float16")}
# (name, float32 shape (float16 doubles the first size), description, normalized axes,
# variants per data type)
CASES = [("instance norm NCHW C=32", (128, 32, 256, 256), _instance, (2, 3), INSTANCE),
         ("layer norm rows of 4096", (65536, 4096), _rows(True), (1,), ROWS),
         ("RMS norm rows of 4096", (65536, 4096), _rows(False), (1,), ROWS),
         ("instance norm 256x512", (64, 32, 256, 512), _instance, (2, 3), LONG)]  # fmt: skip
# ``--focus``: instance norm (rows of 65536) only, the defaults against L2 eviction hints
# (results/mvn/sweep_focus.log: the first focus run, without hints: float16 8192-element tiles
# with one program per row 0.74 against 0.78 in 132 programs; float32 tiles of 1024 or 4096
# 0.68-0.76 against 0.83).
FOCUS = {
    "float32": [{}, _retain(2048, 32768, 16, 6, None, hints=True),
                _retain(1024, 32768, 16, 8, None, hints=True),
                _retain(2048, 32768, 16, 2, None, hints=True),
                _retain(4096, 32768, 16, 3, None, hints=True)],
    "float16": [{}],
}  # fmt: skip
TUNABLES = ("TILE_ELEMENTS", "WARPS", "RETAIN_ROW_MAX", "RETAIN", "RETAIN_WARPS",
            "RETAIN_STAGES", "RETAIN_HINTS", "LOOP_ELEMENTS", "LOOP_WARPS", "LOOP_GRID",
            "LOOP_STAGES")  # fmt: skip


def _label(v) -> str:
    """The kernel's view in short: path, tile, kept elements, warps, depth, grid, stages."""
    if v.tiles == 1:
        return f"tile {v.rows} x{v.cols} w{v.warps}"
    path = f"keep {v.keep} d{v.depth}{' hints' if v.hints else ''}" if v.keep else "loop"
    return f"{path} t{v.rows} w{v.warps} g{v.grid} s{v.stages}"


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
    parser.add_argument("--focus", action="store_true", help="instance norm only, FOCUS variants")
    args = parser.parse_args(argv)
    cases = [(*CASES[0][:4], FOCUS)] if args.focus else CASES
    rows = []
    saved = {n: getattr(K, n) for n in TUNABLES}
    for name, shape, make, axes, variants in cases:
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
            for variant in variants[dtype]:
                for n, value in saved.items():
                    setattr(K, n, value)
                for n, value in variant.items():
                    setattr(K, n, value)
                v = K.plan(shape2, axes, x.dtype)
                label = _label(v)
                kfn = jax.jit(lambda *a, d=desc: K.lower_mvn_kernel(d, *a)[0])
                try:
                    err, nan_ok = (float(e) for e in _error(kfn(x, scale, bias), want, scale, bias))
                    t = timeit(kfn, x, scale, bias)
                except Exception as e:  # a variant that cannot compile: reported, the sweep goes on
                    print(f"{name} {dtype} {label}: {type(e).__name__}: {e}"[:400], flush=True)
                    continue
                row = dict(case=name, dtype=dtype, variant=label, default=not variant,
                           rows=v.rows, cols=v.cols, warps=v.warps, grid=v.grid,
                           keep=v.keep, depth=v.depth, stages=v.stages,
                           kernel_gbps=nbytes / t / 1e9, lax_gbps=nbytes / t_lax / 1e9,
                           copy_gbps=nbytes / t_copy / 1e9, error_over_tolerance=err,
                           nan_positions_equal=bool(nan_ok))  # fmt: skip
                row["kernel_ratio"] = row["kernel_gbps"] / row["copy_gbps"]
                row["lax_ratio"] = row["lax_gbps"] / row["copy_gbps"]
                rows.append(row)
                print(f"{name:24s} {dtype:8s} {label:34s}{' *' if not variant else '  '} kernel"
                      f" {row['kernel_ratio']:.2f} lax {row['lax_ratio']:.2f} err/tol {err:.2f}"
                      f" nan {bool(nan_ok)}", flush=True)  # fmt: skip
                if args.out:
                    with open(args.out, "w") as f:
                        json.dump(rows, f, indent=1)
            del x, want
    for n, value in saved.items():
        setattr(K, n, value)
    return 0


if __name__ == "__main__":
    sys.exit(main())
