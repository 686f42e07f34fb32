"""GPU sweep and check of the mirrored-padding kernel (dml_jax.kernels.padding).

For each case (an NCHW tensor padded on H and W, 1 GiB of float32 output or the same bytes of
float16; EDGE, REFLECTION, SYMMETRIC and WRAP): the kernel against the lax lowering (bit for
bit), then GB/s (bytes read + written) of the kernel for each (tile bytes, warps) variant, of
the lax lowering, and of the best device copy of the output (XLA's or PyTorch's), one sync per
many dispatches. Run from the repository root:

    XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=. python benchmarks/pad_variants.py --out F
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
from dml_jax.enums import PaddingMode
from dml_jax.kernels import padding as K
from dml_jax.ops.movement import lower_padding

OUT_F32 = (16, 256, 256, 256)  # the bench's output shape: 1 GiB of float32
# (label, padding on H and W each side, modes)
CASES = [("NCHW pad 1 H,W", 1, ("REFLECTION", "EDGE", "SYMMETRIC", "WRAP")),
         ("NCHW pad 3 H,W", 3, ("REFLECTION",))]  # fmt: skip
VARIANTS = [(4096, 4), (8192, 4), (16384, 4), (16384, 8), (32768, 8), (65536, 16)]  # (bytes, warps)


def _bits(a):
    return jax.lax.bitcast_convert_type(a, {2: jnp.uint16, 4: jnp.uint32}[a.dtype.itemsize])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write the rows as JSON here")
    args = parser.parse_args()
    rows = []
    same = jax.jit(lambda a, b: jnp.array_equal(_bits(a), _bits(b)))
    for dtype in ("float32", "float16"):
        out_shape = (OUT_F32[0] * 4 // np.dtype(dtype).itemsize, *OUT_F32[1:])
        copy_src = jnp.zeros(out_shape, dtype)
        t_copy = min(timeit(jax.jit(lambda y: -y), copy_src), torch_copy_seconds(out_shape, dtype))
        del copy_src
        for label, p, modes in CASES:
            n, c, h, w = out_shape
            shape = (n, c, h - 2 * p, w - 2 * p)
            start = end = (0, 0, p, p)
            x = jax.random.normal(jax.random.PRNGKey(0), shape, jnp.float32).astype(dtype)
            nbytes = (x.size + n * c * h * w) * x.dtype.itemsize
            copy_gbps = 2 * n * c * h * w * x.dtype.itemsize / t_copy / 1e9
            t = dml.TensorDesc(dtype.upper(), shape)
            for mode in modes:
                desc = dml.Padding1OperatorDesc(
                    t, t.like(sizes=out_shape), mode, dtype.upper(), 0, start, end
                )
                lax_fn = jax.jit(lambda y, d=desc: lower_padding(d, y)[0])
                want = lax_fn(x)
                t_lax = timeit(lax_fn, x)
                for tile, warps in VARIANTS:
                    K.TILE_BYTES, K.WARPS = dict.fromkeys((1, 2, 4), tile), warps
                    v = K.plan(shape, start, end, PaddingMode[mode], x.dtype)
                    kfn = jax.jit(lambda y, m=PaddingMode[mode]: K.pad(y, m, start, end))
                    exact = bool(same(kfn(x), want))
                    tk = timeit(kfn, x)
                    row = dict(case=f"{mode} {label}", dtype=dtype, tile=tile, warps=warps,
                               rows=v.rows, cols=v.cols, exact=exact,
                               kernel_gbps=nbytes / tk / 1e9, lax_gbps=nbytes / t_lax / 1e9,
                               copy_gbps=copy_gbps)  # fmt: skip
                    row["kernel_ratio"] = row["kernel_gbps"] / copy_gbps
                    row["lax_ratio"] = row["lax_gbps"] / copy_gbps
                    rows.append(row)
                    print(f"{row['case']:28s} {dtype:8s} tile {tile:6d}B warps {warps:2d}"
                          f" rows {v.rows:4d} cols {v.cols:4d}  kernel {row['kernel_ratio']:.2f}"
                          f"  lax {row['lax_ratio']:.2f}  exact {exact}", flush=True)  # fmt: skip
                    if args.out:  # as it goes: a run cut short keeps what it measured
                        with open(args.out, "w") as f:
                            json.dump(rows, f, indent=1)
                del want
            del x
    return 0


if __name__ == "__main__":
    sys.exit(main())
