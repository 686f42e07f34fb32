"""GPU sweep and check of the TOP_K kernel (dml_jax.kernels.topk).

The top 8 (and 1, 16) of rows of 1024, 1 GiB of float32 or the same bytes of float16: the kernel's
indices against the lax lowering's (must be equal), then the ratio to the device copy (bytes read
and written over the copy's GB/s) for each (tile elements, warps) variant, of the lax lowering and
of torch.topk, one sync per many dispatches. ``--groups`` sweeps the grouped selection instead:
(tile elements, warps) x group widths (0: the whole row) with packed keys, K = 8 and 16;
``--rows`` the grouped selection with two and four rows a warp (its 32-bit keys' int64 form,
swept against the int32 pairs by the former ``--split``, is gone: commit 25911a7); ``--pairs``
float16's group extremes from 32-bit words (``PAIRS_16``) against every element's key, by group
width and rows a warp. A variant
that fails to compile is recorded, not fatal. Run from the repository root:

    XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=. python benchmarks/topk_variants.py [--groups | --rows | --pairs]
"""

from __future__ import annotations

import itertools
import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
from timing import timeit, torch_best

from dml_jax.kernels import topk as K
from dml_jax.ops.topk import top_k

VARIANTS = [(4096, 4), (2048, 4), (8192, 8), (1024, 2), (1024, 1), (2048, 2), (4096, 8)]
GROUP_TILES = [(1024, 1), (2048, 1), (4096, 1), (2048, 2), (4096, 2)]
GROUPS = [0, 2, 4, 8, 16, 32]
TUNABLES = ("TILE_ELEMENTS", "MIN_ROWS", "WARPS", "PACK_16", "PACK_32", "GROUP", "PAIRS_16")


def torch_seconds(shape, dtype, k=None):
    import torch

    src = torch.rand(shape, dtype=getattr(torch, dtype), device="cuda")
    dst = torch.empty_like(src)

    def run():
        return dst.copy_(src) if k is None else torch.topk(src, k, dim=-1)

    return torch_best(run)


def main():
    groups = "--groups" in sys.argv[1:]
    split = "--rows" in sys.argv[1:]
    pairs = "--pairs" in sys.argv[1:]
    defaults = {n: getattr(K, n) for n in TUNABLES}
    for dtype in ("float32", "float16"):
        rows = (1 << 18) * (2 if dtype == "float16" else 1)
        shape = (rows, 1024)
        x = jax.random.normal(jax.random.key(1), shape, jnp.float32).astype(dtype)
        itemsize = np.dtype(dtype).itemsize
        copy_bytes = 2 * x.size * itemsize
        copy = min(timeit(jax.jit(lambda a: a + 0), x), torch_seconds(shape, dtype))
        gbs = copy_bytes / copy
        for k in (8, 16) if groups or split or pairs else (1, 8, 16):
            moved = x.size * itemsize + rows * k * (itemsize + 4)

            def ratio(seconds, moved=moved):
                return round(moved / seconds / gbs, 3)

            f_lax = jax.jit(lambda a, k=k: top_k(a, 1, k, True, jnp.uint32))
            row = {"dtype": dtype, "k": k, "copy_gbs": round(gbs / 1e9),
                   "lax": ratio(timeit(f_lax, x)), "torch": ratio(torch_seconds(shape, dtype, k))}  # fmt: skip
            want = np.asarray(f_lax(x)[1]).astype(np.int64)
            if pairs and dtype == "float32":  # the float16 form alone; float32 as it is
                runs = [dict(MIN_ROWS=2)]
            elif pairs:
                runs = [dict(PAIRS_16=p, GROUP=g, MIN_ROWS=m)
                        for p in (False, True) for g in (None, 4, 16) for m in (2, 4)]  # fmt: skip
            elif split:
                runs = [dict(MIN_ROWS=m) for m in (2, 4)]
            elif groups:
                runs = [dict(TILE_ELEMENTS=t, MIN_ROWS=1, WARPS=w, GROUP=g)
                        for (t, w), g in itertools.product(GROUP_TILES, GROUPS)]  # fmt: skip
            else:
                runs = [dict(TILE_ELEMENTS=t, MIN_ROWS=1, WARPS=w, PACK_16=p, PACK_32=p, GROUP=0)
                        for (t, w), p in itertools.product(VARIANTS, (True, False))]  # fmt: skip
            for change in runs:
                for n, value in {**defaults, **change}.items():
                    setattr(K, n, value)
                v = K.plan(shape, 1, k, dtype)

                def f(a, v=v, k=k):
                    idx = K.top_k_indices(a, v, k, True)
                    return jnp.take_along_axis(a, idx, axis=-1), idx.astype(jnp.uint32)

                f = jax.jit(f)
                name = " ".join(f"{n}={value}" for n, value in change.items())
                try:
                    same = bool((np.asarray(f(x)[1]).astype(np.int64) == want).all())
                    row[name] = ratio(timeit(f, x)) if same else "MISMATCH"
                except Exception as e:  # a variant that fails to compile is recorded
                    row[name] = f"{type(e).__name__}: {e}"[:300]
            print(json.dumps(row), flush=True)
    for n, value in defaults.items():
        setattr(K, n, value)
    print(json.dumps({"jax": jax.__version__, "device": str(jax.devices()[0])}))


if __name__ == "__main__":
    main()
