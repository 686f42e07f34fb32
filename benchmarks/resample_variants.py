"""GPU sweep and check of the bilinear upsampling kernel (dml_jax.kernels.resample).

For each case (UPSAMPLE_2D LINEAR 2x and 4x of NCHW, the output 1 GiB of float32 or the same
bytes of float16): the kernel against the lax lowering (max |difference| over the largest input
magnitude, and the share of elements equal bit for bit), then GB/s (input read + output
written) of the kernel for each (output elements per tile, input columns per tile, warps,
pipeline stages, float16 read as 32-bit words) variant, of the lax lowering, and of the best
device copy of the output (XLA's or PyTorch's), one sync per many dispatches.
Run from the repository root:

    XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=. python benchmarks/resample_variants.py \
        [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import sys

import jax
import jax.numpy as jnp
from timing import timeit, torch_copy_seconds

import dml_jax as dml
from dml_jax.kernels import resample as K
from dml_jax.ops.resample import lower_resample

OUT_SHAPE = (16, 256, 256, 256)  # 1 GiB of float32; float16 doubles N
CASES = [("2x NCHW", 2), ("4x NCHW", 4)]
# (output elements per tile, input columns per tile, warps, stages, float16 as 32-bit words);
# float32 runs each distinct view once. The input rows are 128 (2x) and 64 (4x) wide, so wider
# column tiles (256) give the same views. results/resample/sweep.log also ran 4096 / 64 / 4 and
# 16384 / 128 / 8 (slower), and 4096 / 128 / 4 with the column phases stored fw apart instead
# of interleaved in registers (0.52 / 0.22 of the copy for 2x / 4x float32).
# Logged in results/resample/words_sweep.log.
VARIANTS = [
    (2048, 128, 4, 1, False),
    (2048, 128, 4, 1, True),
    (1024, 128, 4, 1, True),
    (4096, 128, 4, 1, True),
    (2048, 128, 8, 1, True),
    (4096, 128, 8, 1, True),
    (8192, 128, 8, 1, True),
    (2048, 128, 4, 2, True),
    (2048, 128, 2, 1, True),
]

# ``--hints``: (tile, max_cols, warps, stages, words at every factor, store eviction policy):
# the defaults (2-byte float16 loads at 4x, words on 2 warps at 2x) and the 8-warp 4096 tile,
# each with and without "evict_first" on the output stores.
HINT_VARIANTS = [
    (2048, 128, 4, 1, False, None),
    (2048, 128, 4, 1, False, "evict_first"),
    (4096, 128, 8, 1, False, None),
    (4096, 128, 8, 1, False, "evict_first"),
    (8192, 128, 8, 1, False, "evict_first"),
    (2048, 128, 2, 1, True, None),
    (2048, 128, 2, 1, True, "evict_first"),
]

# ``--sizes``: one tile a program, output stores evict_first, other tile shapes and warps
# (smaller programs, more of them resident; two input columns a thread; narrower column tiles).
SIZE_VARIANTS = [
    (2048, 128, 4, 1, False, "evict_first"),
    (512, 128, 1, 1, False, "evict_first"),
    (1024, 128, 1, 1, False, "evict_first"),
    (1024, 128, 2, 1, False, "evict_first"),
    (4096, 128, 4, 1, False, "evict_first"),
    (8192, 128, 4, 1, False, "evict_first"),
    (8192, 128, 16, 1, False, "evict_first"),
    (2048, 32, 4, 1, False, "evict_first"),
    (4096, 32, 4, 1, False, "evict_first"),
]

# ``--chunks``: input bytes a chunk where an input element makes 16 or more outputs, both
# types (K.CHUNK_BYTES: one call per chunk of images, each after a call reading the chunk into L2),
# with the defaults' tiles; (tile, max_cols, warps, stages, words, policy, chunk bytes).
CHUNK_VARIANTS = [
    (t, 128, w, 1, words, "evict_first", chunk)
    for t, w, words in ((4096, 4, False), (2048, 4, False), (2048, 2, True))
    for chunk in (0, 8 << 20, 12 << 20)
]


def _check(kfn, lax_out, x) -> tuple[float, float]:
    """(max |kernel - lax| / max |x|, share of elements equal bit for bit)."""
    got = kfn(x)
    diff = jnp.abs(got.astype(jnp.float32) - lax_out.astype(jnp.float32))
    scale = jnp.max(jnp.abs(x.astype(jnp.float32)))
    equal = jnp.mean((got == lax_out).astype(jnp.float32))
    return float(jnp.max(diff) / scale), float(equal)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write the rows as JSON here")
    parser.add_argument("--hints", action="store_true", help="HINT_VARIANTS: store hints")
    parser.add_argument("--sizes", action="store_true", help="SIZE_VARIANTS: tile shapes")
    parser.add_argument("--chunks", action="store_true", help="CHUNK_VARIANTS: chunked calls")
    parser.add_argument("--repeat", type=int, default=1, help="time each variant N times")
    args = parser.parse_args()
    if args.chunks:
        variants = CHUNK_VARIANTS
    elif args.sizes:
        variants = [(*v, 0) for v in SIZE_VARIANTS]
    elif args.hints:
        variants = [(*v, 0) for v in HINT_VARIANTS]
    else:
        variants = [(*v, None, 0) for v in VARIANTS]
    rows = []
    for dtype in ("float32", "float16"):
        out_shape = (OUT_SHAPE[0] * (4 // jnp.dtype(dtype).itemsize),) + OUT_SHAPE[1:]
        t_copy = None
        for label, f in CASES:
            shape = out_shape[:2] + (out_shape[2] // f, out_shape[3] // f)
            t = dml.TensorDesc(dtype.upper(), shape)
            desc = dml.Upsample2DOperatorDesc(t, t.like(sizes=out_shape), (f, f), "LINEAR")
            x = jax.random.normal(jax.random.PRNGKey(0), shape, jnp.float32).astype(dtype)
            nbytes = (x.size + x.size * f * f) * x.dtype.itemsize
            if t_copy is None:
                y = jnp.zeros(out_shape, dtype)
                t_copy = min(timeit(jax.jit(lambda z: -z), y), torch_copy_seconds(out_shape, dtype))
                copy_gbps = 2 * y.size * y.dtype.itemsize / t_copy / 1e9
                del y
            lax_fn = jax.jit(lambda y, d=desc: lower_resample(d, y)[0])
            lax_out = lax_fn(x)
            lax_gbps = nbytes / timeit(lax_fn, x) / 1e9
            seen = set()
            for tile, max_cols, warps, stages, words, policy, chunk in variants:
                K.TILE_ELEMENTS, K.MAX_COLS, K.WARPS = tile, max_cols, warps
                K.CHUNK_BYTES = {"float32": chunk, "float16": chunk}
                K.EVICT_STORES = policy is not None
                K.BIG_FACTOR_TILE = {}  # the variant's tile at every factor
                K.STAGES, K.WORDS_WARPS = stages, warps
                K.WORDS_MAX_FACTOR = K.MAX_FACTOR if words else 0
                v = K.plan(desc)
                if v in seen:
                    continue
                seen.add(v)
                kfn = jax.jit(lambda y, v=v: K.upsample_kernel(y, v))
                try:
                    err, equal = _check(kfn, lax_out, x)
                    # The median of ``--repeat`` timings (each itself a median of samples).
                    times = sorted(timeit(kfn, x) for _ in range(args.repeat))
                    gbps = nbytes / times[len(times) // 2] / 1e9
                except Exception as e:  # report the variant, go on with the rest
                    print(f"{label} {dtype} tile {tile} cols {max_cols} warps {warps} "
                          f"stages {stages} pack {v.pack}: "
                          f"FAILED {type(e).__name__}: {e}"[:2000])  # fmt: skip
                    continue
                row = dict(case=label, dtype=dtype, tile=tile, max_cols=max_cols, warps=warps,
                           stages=stages, pack=v.pack, store_policy=policy, rows=v.rows, cols=v.cols,
                           chunk_images=v.chunk,
                           kernel_gbps=gbps, lax_gbps=lax_gbps, copy_gbps=copy_gbps,
                           kernel_ratio=gbps / copy_gbps, lax_ratio=lax_gbps / copy_gbps,
                           max_rel_diff=err, bit_equal=equal)  # fmt: skip
                rows.append(row)
                print(f"{label:8s} {dtype:8s} tile {tile:5d} cols {max_cols:3d} warps {warps}"
                      f" stages {stages} pack {v.pack} {policy or ''} chunk {v.chunk}"
                      f" -> rows {v.rows:3d} cols {v.cols:3d}"
                      f"  kernel {row['kernel_ratio']:.2f}  lax {row['lax_ratio']:.2f}"
                      f"  (copy {copy_gbps:.0f} GB/s)  diff {err:.1e} equal {equal:.4f}",
                      flush=True)  # fmt: skip
            del x, lax_out
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
