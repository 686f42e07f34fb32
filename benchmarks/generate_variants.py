"""GPU sweep of the write-only kernels (dml_jax.kernels.generate): FILL_VALUE_CONSTANT and
minor-axis ONE_HOT writing 1 GiB (float32, and the same bytes of float16), for each (bytes per
program, warps) variant, against XLA's own code (the lax lowering), PyTorch and the device copy;
ratios are bytes moved over the copy's bytes per second, one sync per many dispatches. Run from
the repository root:

    XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=. python benchmarks/generate_variants.py OUT.json
"""

from __future__ import annotations

import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
from timing import timeit, torch_best
from topk_variants import torch_seconds

from dml_jax.kernels import generate as K

VARIANTS = [(4096, 4), (16384, 4), (16384, 8), (65536, 8), (65536, 16)]
ROWS, WIDTH = 262144, 1024  # 2**28 elements


def torch_generate(kind: str, dtype: str, index=None):
    import torch

    shape = (ROWS, WIDTH)
    dt = getattr(torch, dtype)
    if kind == "fill":

        def run():
            return torch.full(shape, 1.5, dtype=dt, device="cuda")
    else:
        i = torch.as_tensor(np.asarray(index), device="cuda").reshape(ROWS, 1)
        cols = torch.arange(WIDTH, device="cuda", dtype=i.dtype)

        def run():
            return torch.where(cols == i, torch.ones((), dtype=dt, device="cuda"), 0)

    return torch_best(run)


def main(out_path: str) -> None:
    rows = []
    for dtype in ("float32", "float16"):
        shape = (ROWS, WIDTH)
        nbytes = ROWS * WIDTH * np.dtype(dtype).itemsize
        x = jnp.ones(shape, dtype)
        copy = timeit(jax.jit(lambda a: a + 0), x)  # reads and writes nbytes
        copy_bw = 2 * nbytes / copy
        index = jax.random.randint(jax.random.key(0), (ROWS,), -3, WIDTH + 3, jnp.int32)
        on, off = jnp.asarray(1, dtype), jnp.asarray(0, dtype)

        def row(case, impl, seconds, moved, **extra):
            rows.append(
                {
                    "case": case,
                    "dtype": dtype,
                    "impl": impl,
                    "ms": round(seconds * 1e3, 4),
                    "ratio": round(moved / seconds / copy_bw, 3),
                    **extra,
                }
            )
            print(rows[-1], flush=True)

        full = jax.jit(lambda _: jnp.full(shape, 1.5, dtype))
        row("FILL", "xla", timeit(full, x), nbytes)
        hot = jax.jit(lambda i: jnp.where(jnp.arange(WIDTH) == i[:, None], on, off))
        row("ONE_HOT", "xla", timeit(hot, index), nbytes + 4 * ROWS)
        want_fill = np.asarray(full(x))
        want_hot = np.asarray(hot(index))
        for block, warps in VARIANTS:
            K.FILL_BLOCK_BYTES, K.ONE_HOT_TILE_BYTES, K.NUM_WARPS = block, block, warps
            try:
                fill = jax.jit(lambda _: K.fill_kernel(shape, dtype, 1.5))
                same = bool(np.array_equal(np.asarray(fill(x)), want_fill))
                row("FILL", f"kernel {block}B/{warps}w", timeit(fill, x), nbytes, equal=same)
                vv = K.one_hot_plan(shape, 1, dtype)
                hk = jax.jit(lambda i, vv=vv: K.one_hot_kernel(i, on, off, vv, dtype))
                same = bool(np.array_equal(np.asarray(hk(index)), want_hot))
                row("ONE_HOT", f"kernel {block}B/{warps}w", timeit(hk, index), nbytes, equal=same)
            except Exception as e:  # a variant Triton rejects: recorded, the sweep goes on
                rows.append({"dtype": dtype, "impl": f"{block}/{warps}", "error": str(e)[:300]})
                print(rows[-1], flush=True)
        try:
            row("FILL", "torch", torch_generate("fill", dtype), nbytes)
            row("ONE_HOT", "torch", torch_generate("one_hot", dtype, index), nbytes + 4 * ROWS)
            row("copy", "torch", torch_seconds(shape, dtype), 2 * nbytes)
        except Exception as e:  # no PyTorch here
            rows.append({"dtype": dtype, "impl": "torch", "error": str(e)[:300]})
    env = {"device": str(jax.devices()[0]), "jax": jax.__version__}
    with open(out_path, "w") as f:
        json.dump({"env": env, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "generate_variants.json")
