"""GPU comparison of candidate lowerings for the cases below 90% of the copy (issue 7).

Run on a CUDA machine from the repository root:

    XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=. python benchmarks/variants.py [--out DIR]

For each case, every variant is first checked bit-exact against the element-wise lax lowering
(NaN compared as NaN), then timed at 1 GiB with ``dml_jax.bench.Timer``; the copy roofline
(PyTorch ``copy_`` and XLA's own) is measured in the same run. Writes ``variants.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import traceback

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernel_variants as X

from dml_jax.bench import Timer, environment
from dml_jax.kernels import elementwise as E
from dml_jax.kernels import movement as M
from dml_jax.kernels import reduce as K
from dml_jax.kernels import reduce_plan as P
from dml_jax.ops import depth_space as DS
from dml_jax.ops import reduce as R

ROWS: list[dict] = []


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind == "f":
        nan = np.isnan(a)
        if not np.array_equal(nan, np.isnan(b)):
            return False
        ua = a.view(f"u{a.itemsize}")[~nan]
        return np.array_equal(ua, b.view(f"u{b.itemsize}")[~nan])
    return np.array_equal(a, b)


def measure(timer, case, dtype, nbytes, variants, x, roof, ref_name=None):
    """Times each ``name -> fn`` on ``x`` (tuple of arrays); checks each against the first."""
    ref = None
    for name, fn in variants.items():
        row = dict(case=case, dtype=dtype, variant=name)
        try:
            f = jax.jit(fn)
            out = jax.block_until_ready(f(*x))
            if ref is None:
                ref = jax.tree.map(np.asarray, out)
                row["exact"] = True
            else:
                row["exact"] = all(
                    _same(a, b) for a, b in zip(jax.tree.leaves(out), jax.tree.leaves(ref))
                )
            del out
            t = timer.run(lambda: f(*x), jax.block_until_ready)
            row["gbps"] = nbytes / t / 1e9
            row["ratio"] = row["gbps"] / roof
        except Exception as e:  # a variant that does not compile here: recorded
            row["error"] = f"{type(e).__name__}: {str(e)[:400]}"
        ROWS.append(row)
        print(
            f"{case:34s} {dtype:8s} {name:26s} "
            + (
                f"{row['gbps']:7.0f} GB/s {row['ratio']:.2f} exact={row['exact']}"
                if "gbps" in row
                else row["error"][:200]
            ),
            flush=True,
        )


def _input(shape, dtype, seed=0):
    key = jax.random.PRNGKey(seed)
    if np.dtype(dtype).kind == "f":
        return jax.random.normal(key, shape, jnp.float32).astype(dtype)
    return jax.random.randint(key, shape, -100, 100, jnp.int32).astype(dtype)


def roofline(timer, x, dtype):
    nbytes = 2 * x.size * x.dtype.itemsize
    neg = jax.jit(lambda y: -y)
    xla = nbytes / timer.run(lambda: neg(x), jax.block_until_ready) / 1e9
    best = xla
    try:
        import torch

        t = torch.empty(x.size * x.dtype.itemsize, dtype=torch.uint8, device="cuda")
        d = torch.empty_like(t)
        best = max(
            best, nbytes / timer.run(lambda: d.copy_(t), lambda _: torch.cuda.synchronize()) / 1e9
        )
        del t, d
    except Exception as e:  # no PyTorch: XLA's copy is the roofline
        print("torch copy:", e)
    ROWS.append(dict(case="copy", dtype=dtype, xla=xla, roof=best))
    print(f"copy {dtype}: xla {xla:.0f} roof {best:.0f} GB/s", flush=True)
    return best


def arg_variants(axes, largest, last):
    def lax_keys(y):
        return R.arg_reduce(y, axes, largest, last, jnp.int32)

    def kernel(y):
        p = K.plan(y.shape, axes, y.dtype, "arg")
        k = K.arg_reduce_kernel(y, p, largest, last)
        return lax.reshape(k, tuple(1 if i in axes else s for i, s in enumerate(y.shape)))

    def lax_float(y):  # the former lowering (NaN-incorrect on GPU): speed reference only
        y = lax.rev(y, axes) if last else y
        k = (lax.argmax if largest else lax.argmin)(y, axes[0], jnp.int32)
        k = (y.shape[axes[0]] - 1 - k) if last else k
        return lax.reshape(k, tuple(1 if i in axes else s for i, s in enumerate(y.shape)))

    return {"kernel": kernel, "lax_keys": lax_keys, "lax_float_old": lax_float}


def lse_variants(axes):
    out = {"lax": lambda y: R._reduce_value(R.F.LOG_SUM_EXP, y, axes)}
    for elems, warps, stages, single in (
        (4096, 4, 3, False),
        (4096, 4, 3, True),
        (4096, 8, 3, True),
        (2048, 4, 3, True),
        (8192, 8, 3, True),
        (4096, 4, 1, True),
        (4096, 2, 3, True),
        (1024, 2, 3, True),
    ):

        def fn(y, elems=elems, warps=warps, stages=stages, single=single):
            over = {
                "P__TILE_ELEMENTS__'lse'": elems,
                "P__NUM_WARPS__'lse'": warps,
                "P__NUM_STAGES__'lse'": stages,
                "X__SINGLE_TILE_LSE": single,
            }
            with X.setting(**over):
                p = P.plan(y.shape, axes, y.dtype, "lse")
                r = X.log_sum_exp_kernel(y, p)
            return lax.reshape(r, tuple(1 if i in axes else s for i, s in enumerate(y.shape)))

        out[f"k{elems}/{warps}/{stages}{'/1t' if single else ''}"] = fn
    return out


class _D:
    def __init__(self, to_space, block, order):
        self.to_space, self.block_size, self.depth_space_order = to_space, block, order


def s2d_kernel(x, block: int, dcr: bool, rows: int):
    """SPACE_TO_DEPTH of NCHW ``x`` as a Pallas (Triton) kernel; CUDA only, comparison only.

    Each program owns ``rows`` output rows of one input channel: for every block offset
    ``(i, j)`` it loads input rows ``h * b + i`` at columns ``w * b + j`` (a strided load; the
    ``b`` loads of one row share their cache lines) and stores them as contiguous rows of output
    channel ``(i, j, c)`` (DCR) or ``(c, i, j)`` (CRD). XLA's transpose for this permutation
    (the minor axis split by the block) reaches 0.69 of the copy on an H200.
    """
    pl, pltriton = K.load_pallas()
    n, c, h, w = x.shape
    b = block
    ho, wo = h // b, w // b
    rows = min(rows, ho)
    nblk = ho // rows

    def kernel(x_ref, o_ref):
        pid = pl.program_id(0)
        nc, hb = pid // nblk, pid % nblk
        ni, ci = nc // c, nc % c
        for i in range(b):
            for j in range(b):
                src = x_ref.at[
                    pl.ds(nc * h + hb * rows * b + i, rows, stride=b), pl.ds(j, wo, stride=b)
                ]
                ch = (i * b + j) * c + ci if dcr else ci * b * b + i * b + j
                dst = o_ref.at[pl.ds((ni * c * b * b + ch) * ho + hb * rows, rows), :]
                pltriton.store(dst, pltriton.load(src))

    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((n * c * b * b * ho, wo), x.dtype),
        grid=(n * c * nblk,),
        compiler_params=pltriton.CompilerParams(num_warps=4, num_stages=1),
    )(lax.reshape(x, (n * c * h, w)))
    return lax.reshape(out, (n, c * b * b, ho, wo))


def s2d_variants():
    def lax_now(x):
        return DS.lower_depth_space(_D(False, 2, DS.DCR), x)[0]

    def slices(x):
        b = 2
        parts = [
            lax.slice(x, (0, 0, i, j), x.shape, (1, 1, b, b)) for i in range(b) for j in range(b)
        ]
        return lax.concatenate(parts, 1)

    def two_step(x):  # the minor de-interleave first, then the row permutation
        n, c, h, w = x.shape
        y = lax.transpose(lax.reshape(x, (n, c, h, w // 2, 2)), (0, 1, 2, 4, 3))
        y = lax.reshape(y, (n, c, h // 2, 2, 2, w // 2))
        return lax.reshape(lax.transpose(y, (0, 3, 4, 1, 2, 5)), (n, 4 * c, h // 2, w // 2))

    out = {"lax": lax_now, "slices": slices, "two_step": two_step}
    for rows in (4, 8, 16):

        def k(x, rows=rows):
            return s2d_kernel(x, 2, True, rows)

        out[f"pallas_rows{rows}"] = k
    return out


def narrow(timer, dtype):
    scale = 4 // np.dtype(dtype).itemsize
    shape = (16 * scale, 256, 256, 256)
    n, c, h, w = shape
    x = _input(shape, dtype)
    roof = roofline(timer, x, dtype)
    nb = x.size * x.dtype.itemsize
    half = lax.slice_in_dim(x, 0, h // 2, axis=2)
    half2 = lax.slice_in_dim(x, h // 2, h, axis=2)

    def split(y):
        return lax.slice_in_dim(y, 0, h // 2, axis=2), lax.slice_in_dim(y, h // 2, h, axis=2)

    measure(
        timer,
        "SPLIT axis 2",
        dtype,
        2 * nb,
        {"lax": split, "words": lambda y: M.on_words(split, [y], y.dtype)},
        (x,),
        roof,
    )

    def join(a, b):
        return lax.concatenate([a, b], 2)

    measure(
        timer,
        "JOIN axis 2",
        dtype,
        2 * nb,
        {"lax": join, "words": lambda a, b: M.on_words(join, [a, b], a.dtype)},
        (half, half2),
        roof,
    )
    quarter = lax.slice(x, (0, 0, 0, 0), (n, c, h // 2, w // 2))

    def tile(y):
        wide = [k for r, s in zip((1, 1, 2, 2), y.shape) for k in (r, s)]
        z = lax.broadcast_in_dim(y, wide, (1, 3, 5, 7))
        return lax.reshape(z, tuple(s * r for s, r in zip(y.shape, (1, 1, 2, 2))))

    measure(
        timer,
        "TILE 1,1,2,2",
        dtype,
        nb + nb // 4,
        {"lax": tile, "words": lambda y: M.on_words(tile, [y], y.dtype)},
        (quarter,),
        roof,
    )
    del half, half2, quarter
    measure(
        timer,
        "DEPTH_TO_SPACE1 block 2 DCR",
        dtype,
        2 * nb,
        {
            "lax": lambda y: DS.lower_depth_space(_D(True, 2, DS.DCR), y)[0],
            "words": lambda y: M.d2s_words(y, 2, True),
        },
        (x,),
        roof,
    )
    lo, hi = (
        (np.asarray(-0.5, dtype), np.asarray(0.5, dtype))
        if dtype != "int8"
        else (np.int8(10), np.int8(60))
    )
    clip_v = {"lax": lambda y: lax.max(jnp.asarray(lo), lax.min(y, jnp.asarray(hi)))}
    for bb, warps in ((4096, 4), (16384, 4), (16384, 8), (65536, 8)):

        def kc(y, bb=bb, warps=warps):
            saved = E.BLOCK_BYTES, E.NUM_WARPS
            E.BLOCK_BYTES, E.NUM_WARPS = bb, warps
            try:
                return E.clip_kernel(y, lo, hi)
            finally:
                E.BLOCK_BYTES, E.NUM_WARPS = saved

        clip_v[f"pallas{bb}/{warps}"] = kc
    measure(timer, "CLIP", dtype, 2 * nb, clip_v, (x,), roof)
    for axes in ((1,), (3,)):
        out_b = math.prod(1 if i in axes else s for i, s in enumerate(shape)) * 4
        v = arg_variants(axes, True, False)
        measure(timer, f"ARGMAX axis {axes[0]}", dtype, nb + out_b, v, (x,), roof)
    if dtype == "float16":
        for axes in ((3,), (1,)):
            out_b = math.prod(1 if i in axes else s for i, s in enumerate(shape)) * 2
            v = lse_variants(axes)
            measure(
                timer,
                f"LSE axis {axes[0]}",
                dtype,
                nb + out_b,
                {k: v[k] for k in list(v)[:5]},
                (x,),
                roof,
            )


def wide(timer):
    shape = (16, 256, 256, 256)
    x = _input(shape, "float32")
    roof = roofline(timer, x, "float32")
    nb = x.size * 4
    measure(timer, "SPACE_TO_DEPTH1 block 2 DCR", "float32", 2 * nb, s2d_variants(), (x,), roof)
    for axes in ((2,), (0,), (1,), (3,)):
        out_b = math.prod(1 if i in axes else s for i, s in enumerate(shape)) * 4
        for largest in (True, False):
            measure(
                timer,
                f"{'ARGMAX' if largest else 'ARGMIN'} axis {axes[0]}",
                "float32",
                nb + out_b,
                arg_variants(axes, largest, False),
                (x,),
                roof,
            )
    for axes, largest in (((1,), True), ((3,), False)):
        out_b = math.prod(1 if i in axes else s for i, s in enumerate(shape)) * 4
        measure(
            timer,
            f"{'ARGMAX' if largest else 'ARGMIN'} axis {axes[0]} DECREASING",
            "float32",
            nb + out_b,
            arg_variants(axes, largest, True),
            (x,),
            roof,
        )
    for axes in ((3,), (2,)):
        out_b = math.prod(1 if i in axes else s for i, s in enumerate(shape)) * 4
        measure(timer, f"LSE axis {axes[0]}", "float32", nb + out_b, lse_variants(axes), (x,), roof)


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--only", default="wide,float16,int8")
    args = ap.parse_args(argv)
    timer = Timer(sample_s=0.05, samples=5)
    env = environment()
    print(env, flush=True)
    try:
        for part in args.only.split(","):
            try:
                wide(timer) if part == "wide" else narrow(timer, part)
            except Exception:
                traceback.print_exc()
    finally:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "variants.json"), "w") as f:
            json.dump(dict(environment=env, rows=ROWS), f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
