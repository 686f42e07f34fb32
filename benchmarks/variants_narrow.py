"""GPU comparison of candidate lowerings for the float16/int8 cases below 90% of the copy.

Round 3 of issue 7 (JOIN int8, DEPTH_TO_SPACE1 float16/int8, ARGMAX float16/int8, LOG_SUM_EXP
float16, int8 REDUCE MAX over a non-minor axis). Run on a CUDA machine from the repository root:

    XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=. python benchmarks/variants_narrow.py [--out DIR]

First every candidate is checked on the GPU against the lax lowering on small odd shapes (exact
for data movement, indices and integer extremes, ties, NaN, infinities and signed zeros
included; LOG_SUM_EXP within 1e-3 relative in float16). Then each is timed at 1 GiB with
``dml_jax.bench.Timer`` next to the copy roofline of the same run (PyTorch ``copy_``), and
checked bit-exact (LOG_SUM_EXP: within 1e-3) against the first variant of its case. Writes
``variants_narrow.json`` after every row.
"""

from __future__ import annotations

import argparse
import itertools
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
from kernel_variants import setting

from dml_jax.bench import Timer, environment
from dml_jax.kernels import movement as M
from dml_jax.kernels import reduce as K
from dml_jax.kernels import reduce_plan as P
from dml_jax.ops import depth_space as DS
from dml_jax.ops import reduce as R

OUT: dict = {"rows": [], "checks": [], "failures": []}
PATH = "variants_narrow.json"


def _save():
    with open(PATH, "w") as f:
        json.dump(OUT, f, indent=1, default=str)


def _bits(a):
    a = np.asarray(a)
    return a.view(f"u{a.itemsize}") if a.dtype.kind in "fiu" else a


def _same(a, b, tol=None) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if tol is not None:
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        if not np.array_equal(np.isnan(a64), np.isnan(b64)):
            return False
        ok = ~np.isnan(a64)
        fin = ok & np.isfinite(a64) & np.isfinite(b64)
        if not np.array_equal(a64[ok & ~fin], b64[ok & ~fin]):
            return False
        err = np.abs(a64[fin] - b64[fin]) / np.maximum(1, np.abs(b64[fin]))
        return err.size == 0 or float(err.max()) <= tol
    if a.dtype.kind == "f":
        nan = np.isnan(a)
        return np.array_equal(nan, np.isnan(b)) and np.array_equal(_bits(a)[~nan], _bits(b)[~nan])
    return np.array_equal(a, b)


def _fail(msg):
    OUT["failures"].append(msg)
    print("FAIL", msg, flush=True)


def _data(rng, shape, dtype, nan_every=50):
    dt = np.dtype(dtype)
    if dt.kind == "f":
        x = rng.integers(-3, 4, size=shape).astype(dt)
        flat = x.reshape(-1)
        flat[rng.integers(0, flat.size, max(1, flat.size // 20))] = -0.0
        k = max(1, flat.size // nan_every)
        flat[rng.integers(0, flat.size, k)] = np.nan
        flat[rng.integers(0, flat.size, k)] = np.inf
        flat[rng.integers(0, flat.size, k)] = -np.inf
        return x
    info = np.iinfo(dt)
    x = rng.integers(max(info.min, -3), min(info.max, 3) + 1, size=shape).astype(dt)
    x.reshape(-1)[rng.integers(0, x.size, 3)] = info.max
    x.reshape(-1)[rng.integers(0, x.size, 3)] = info.min
    return x


class _D:
    def __init__(self, to_space, block, order):
        self.to_space, self.block_size, self.depth_space_order = to_space, block, order


def _keep(shape, axes):
    return tuple(1 if i in axes else s for i, s in enumerate(shape))


def check():
    """Every new path vs lax on small odd shapes, compiled for the GPU."""
    rng = np.random.default_rng(3)
    n = 0
    with setting(P__MIN_PROGRAMS=1):
        # ARGMIN/ARGMAX lanes kernel, every layout, several tilings
        for dtype in ("float16", "int8", "uint8", "int16", "uint16", "float32", "uint32"):
            x = jnp.asarray(_data(rng, (3, 37, 129, 33), dtype, nan_every=7))
            main = dtype in ("float16", "int8")
            for axes in ((1,), (3,), (1, 2), (0,)) if main else ((1,), (3,)):
                for tl in ((4096, 512, 4, 3), (2048, 128, 4, 2))[: 2 if main else 1]:
                    over = {
                        f"X__LANES_TILING__('arg', {i}, {b})": tl
                        for i in (1, 2)
                        for b in (True, False)
                    }
                    with setting(**over):
                        pl_ = K.plan(x.shape, axes, x.dtype, "arg")
                        p = K.Plan(
                            pl_.a,
                            pl_.r,
                            pl_.b,
                            X.lanes_tiling("arg", pl_.a, pl_.r, pl_.b, x.dtype.itemsize),
                        )
                        for largest, last in itertools.product((True, False), (False, True)):
                            got = np.asarray(
                                jax.jit(
                                    lambda y, p=p, a=largest, b=last: K.lanes_kernel(y, p, a, b)
                                )(x)
                            )
                            want = np.asarray(
                                jax.jit(
                                    lambda y, a=largest, b=last: R.arg_reduce(
                                        y, axes, a, b, jnp.int32
                                    )
                                )(x)
                            ).reshape(-1)
                            n += 1
                            if not np.array_equal(got, want):
                                _fail(
                                    f"lanes arg {dtype} {axes} {tl} {largest} {last}: {int((got != want).sum())}"
                                )
        # integer MAX/MIN lanes kernel
        for dtype in ("int8", "uint8"):
            x = jnp.asarray(_data(rng, (3, 37, 129, 33), dtype))
            for axes in ((1,), (0,), (1, 2), (2,)):
                p = K.plan(x.shape, axes, x.dtype, "ext")
                for largest in (True, False):
                    got = np.asarray(
                        jax.jit(lambda y, p=p, a=largest: K.lanes_kernel(y, p, a, index=False))(x)
                    )
                    want = (np.max if largest else np.min)(np.asarray(x), axis=axes).reshape(-1)
                    n += 1
                    if not np.array_equal(got, want):
                        _fail(f"ext {dtype} {axes} {largest}")
        # LOG_SUM_EXP exp modes
        for shape, axes in (
            ((3, 37, 129, 33), (3,)),
            ((3, 37, 129, 33), (1,)),
            ((5, 3000, 7), (1,)),
        ):
            x = rng.standard_normal(shape).astype(np.float32) * 4
            x.reshape(-1)[: shape[-1]] += 1000.0
            x.reshape(-1)[7] = np.nan
            x[0] = -np.inf
            for dtype in ("float16", "float32"):
                xd = jnp.asarray(x.astype(dtype))
                want = np.asarray(
                    jax.jit(lambda y: R._reduce_value(R.F.LOG_SUM_EXP, y, axes))(xd)
                ).reshape(-1)
                for mode in ("exp", "exp2", "ex2"):
                    with setting(X__LSE_EXP__2=mode, X__LSE_EXP__4=mode):
                        p = K.plan(xd.shape, axes, xd.dtype, "lse")
                        got = np.asarray(jax.jit(lambda y, p=p: X.log_sum_exp_kernel(y, p))(xd))
                    n += 1
                    tol = 1e-3 if dtype == "float16" else 2e-6
                    if not _same(got, want, tol):
                        _fail(f"lse {mode} {dtype} {shape} {axes}")
    # JOIN and DEPTH_TO_SPACE
    for dtype in ("int8", "float16", "uint8", "int16"):
        for shapes, axis in (
            ([(3, 5, 64, 33 * 4), (3, 5, 32, 33 * 4)], 2),
            ([(2, 7, 16, 64), (2, 9, 16, 64), (2, 1, 16, 64)], 1),
            ([(3, 4, 128, 128)] * 2, 2),
            ([(2, 300, 8), (2, 100, 8)], 1),
        ):
            xs = [jnp.asarray(_data(rng, s, dtype)) for s in shapes]
            want = np.asarray(jax.jit(lambda *ys: lax.concatenate(ys, axis))(*xs))
            for name, ok_fn, fn in (
                ("flat", M.join_covered, M.join_flat),
                ("kernel", M.join_kernel_covered, M.join_kernel),
            ):
                if ok_fn(shapes, axis, dtype):
                    got = np.asarray(jax.jit(lambda *ys, fn=fn: fn(ys, axis))(*xs))
                    n += 1
                    if not _same(got, want):
                        _fail(f"join {name} {dtype} {shapes} {axis}")
        for block, dcr in itertools.product((2, 4), (True, False)):
            shape = (3, 2 * block * block, 37, 64)
            x = jnp.asarray(_data(rng, shape, dtype))
            order = DS.DCR if dcr else DS.CRD
            want = np.asarray(jax.jit(lambda y: DS._to_space(_D(True, block, order), y))(x))
            for rows in (2, 4, 8):
                if not M.d2s_kernel_covered(shape, dtype, block) and rows == 2:
                    continue
                with setting(**{f"M__D2S_ROWS__{np.dtype(dtype).itemsize}": rows}):
                    if not M.d2s_kernel_covered(shape, dtype, block):
                        continue
                    got = np.asarray(jax.jit(lambda y: M.d2s_kernel(y, block, dcr))(x))
                n += 1
                if not _same(got, want):
                    _fail(f"d2s kernel {dtype} block {block} dcr {dcr} rows {rows}")
    OUT["checked"] = n
    print(f"checked {n} cases, {len(OUT['failures'])} failures", flush=True)


def measure(timer, case, dtype, nbytes, variants, xs, roof, tol=None):
    ref = None
    for name, fn in variants.items():
        row = dict(case=case, dtype=dtype, variant=name)
        try:
            f = jax.jit(fn)
            out = jax.block_until_ready(f(*xs))
            if ref is None:
                ref = np.asarray(out)
                row["exact"] = True
            else:
                row["exact"] = _same(out, ref, tol)
            del out
            t = timer.run(lambda: f(*xs), jax.block_until_ready)
            row["gbps"] = nbytes / t / 1e9
            row["ratio"] = row["gbps"] / roof
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {str(e)[:400]}"
        OUT["rows"].append(row)
        _save()
        print(
            f"{case:28s} {dtype:8s} {name:24s} "
            + (
                f"{row['gbps']:7.0f} GB/s {row['ratio']:.2f} exact={row['exact']}"
                if "gbps" in row
                else row["error"][:300]
            ),
            flush=True,
        )


def roofline(timer, x, dtype):
    nbytes = 2 * x.size * x.dtype.itemsize
    if SMALL:
        return 1.0
    import torch

    t = torch.empty(x.size * x.dtype.itemsize, dtype=torch.uint8, device="cuda")
    d = torch.empty_like(t)
    best = nbytes / timer.run(lambda: d.copy_(t), lambda _: torch.cuda.synchronize()) / 1e9
    del t, d
    OUT["rows"].append(dict(case="copy", dtype=dtype, roof=best))
    print(f"copy {dtype}: roof {best:.0f} GB/s", flush=True)
    return best


def _with(fn, **kw):
    def g(*a):
        with setting(**kw):
            return fn(*a)

    return g


LANES = {
    "l4096/512/4/3": (4096, 512, 4, 3),
    "l8192/1024/8/3": (8192, 1024, 8, 3),
    "l2048/512/4/4": (2048, 512, 4, 4),
    "l4096/1024/8/2": (4096, 1024, 8, 2),
    "l16384/1024/8/2": (16384, 1024, 8, 2),
}


SMALL = False  # --small: tiny shapes, for a dry run on CPU (Pallas interpreter)


def narrow(timer, dtype):
    item = np.dtype(dtype).itemsize
    shape = (16 * (4 // item), 256, 256, 256) if not SMALL else (4 // item, 16, 8, 256)
    h = shape[2]
    key = jax.random.PRNGKey(0)
    if dtype == "float16":
        x = jax.random.normal(key, shape, jnp.float32).astype(dtype)
    else:
        x = jax.random.randint(key, shape, -100, 100, jnp.int32).astype(dtype)
    roof = roofline(timer, x, dtype)
    nb = x.size * item
    # JOIN axis 2 of two halves
    a = lax.slice_in_dim(x, 0, h // 2, axis=2)
    b = lax.slice_in_dim(x, h // 2, h, axis=2)

    def join(*ys):
        return lax.concatenate(ys, 2)

    measure(
        timer,
        "JOIN axis 2",
        dtype,
        2 * nb,
        {
            "lax": join,
            "words_minor": lambda *ys: M.on_words(join, ys, ys[0].dtype),
            "flat": lambda *ys: M.join_flat(ys, 2),
            "kernel": lambda *ys: M.join_kernel(ys, 2),
            "kernel4096": _with(lambda *ys: M.join_kernel(ys, 2), M__JOIN_BLOCK_WORDS=4096),
        },
        (a, b),
        roof,
    )
    del a, b
    v = {
        "lax": lambda y: DS._to_space(_D(True, 2, DS.DCR), y),
        "words": lambda y: M.d2s_words(y, 2, True),
    }
    for rows in (2, 4, 8, 16):
        v[f"kernel_rows{rows}"] = _with(
            lambda y: M.d2s_kernel(y, 2, True), **{f"M__D2S_ROWS__{item}": rows}
        )
    measure(timer, "DEPTH_TO_SPACE1 block 2 DCR", dtype, 2 * nb, v, (x,), roof)
    for axes in ((1,), (3,)):
        out_b = math.prod(_keep(shape, axes)) * 4

        def tile_k(y, axes=axes):
            with setting(**{f"X__ARG_KERNEL__{item}": "tile"}):
                p = X.plan(y.shape, axes, y.dtype, "arg")
            return K.arg_reduce_kernel(y, p, True, False)

        v = {
            "lax_keys": lambda y, axes=axes: R.arg_reduce(y, axes, True, False, jnp.int32).reshape(
                -1
            ),
            "tile": tile_k,
        }
        for name, tl in LANES.items():
            if item == 2 and tl[0] > 8192:
                continue

            def lk(y, axes=axes, tl=tl):
                over = {f"X__LANES_TILING__('arg', {item}, {b})": tl for b in (True, False)}
                with setting(**over, **{f"X__ARG_KERNEL__{item}": "lanes"}):
                    p = X.plan(y.shape, axes, y.dtype, "arg")
                return K.lanes_kernel(y, p, True, False)

            v[name] = lk
        measure(timer, f"ARGMAX axis {axes[0]}", dtype, nb + out_b, v, (x,), roof)
    if dtype == "float16":
        for axes in ((3,), (1,)):
            out_b = math.prod(_keep(shape, axes)) * 2
            v = {"lax": lambda y, axes=axes: R._reduce_value(R.F.LOG_SUM_EXP, y, axes).reshape(-1)}
            for mode, elems, warps in (
                ("exp", 4096, 4),
                ("exp2", 4096, 4),
                ("ex2", 4096, 4),
                ("ex2", 2048, 4),
                ("ex2", 4096, 2),
            ):

                def lk(y, axes=axes, mode=mode, elems=elems, warps=warps):
                    with setting(
                        **{
                            "X__LSE_EXP__2": mode,
                            "P__TILE_ELEMENTS__'lse'": elems,
                            # float16 tiles are sized by F16_LSE_ELEMENTS since round 4
                            "P__F16_LSE_ELEMENTS": dict.fromkeys(P.F16_LSE_ELEMENTS, 2 * elems),
                            "P__NUM_WARPS__'lse'": warps,
                        }
                    ):
                        p = P.plan(y.shape, axes, y.dtype, "lse")
                        return X.log_sum_exp_kernel(y, p)

                v[f"{mode}/{elems}/{warps}"] = lk
            measure(timer, f"LSE axis {axes[0]}", dtype, nb + out_b, v, (x,), roof, tol=1e-3)
    if dtype == "int8":
        for axes in ((1,), (0,)):
            out_b = math.prod(_keep(shape, axes))
            v = {"lax": lambda y, axes=axes: lax.reduce_max(y, axes).reshape(-1)}
            for name, tl in LANES.items():

                def ek(y, axes=axes, tl=tl):
                    with setting(**{"X__LANES_TILING__('ext', 1, True)": tl}):
                        p = X.plan(y.shape, axes, y.dtype, "ext")
                    return K.lanes_kernel(y, p, True, index=False)

                v[name] = ek
            measure(timer, f"REDUCE MAX axis {axes[0]}", dtype, nb + out_b, v, (x,), roof)


def _input(shape, dtype):
    key = jax.random.PRNGKey(0)
    if np.dtype(dtype).kind == "f":
        return jax.random.normal(key, shape, jnp.float32).astype(dtype)
    return jax.random.randint(key, shape, -100, 100, jnp.int32).astype(dtype)


def extra(timer):
    """Second sweep: float16 per-tile ARGMAX tilings, int8 lanes tilings, float16/32 LSE."""
    for dtype in ("float16", "int8", "float32"):
        item = np.dtype(dtype).itemsize
        shape = (16 * (4 // item), 256, 256, 256) if not SMALL else (4 // item, 16, 8, 256)
        x = _input(shape, dtype)
        roof = roofline(timer, x, dtype)
        nb = x.size * item
        if dtype == "float16":
            for axes in ((1,), (3,)):
                out_b = math.prod(_keep(shape, axes)) * 4
                v = {}
                for elems, warps, stages in (
                    (4096, 4, 3),
                    (2048, 4, 3),
                    (4096, 2, 3),
                    (4096, 8, 3),
                    (8192, 8, 3),
                    (4096, 4, 4),
                    (2048, 2, 4),
                ):

                    def tk(y, axes=axes, e=elems, w=warps, st=stages):
                        over = {
                            "P__TILE_ELEMENTS__'arg'": e,
                            "P__NUM_WARPS__'arg'": w,
                            "P__NUM_STAGES__'arg'": st,
                            "X__ARG_KERNEL__2": "tile",
                        }
                        with setting(**over):
                            p = X.plan(y.shape, axes, y.dtype, "arg")
                        return K.arg_reduce_kernel(y, p, True, False)

                    v[f"tile{elems}/{warps}/{stages}"] = tk
                measure(timer, f"ARGMAX axis {axes[0]}", dtype, nb + out_b, v, (x,), roof)
            out_b = math.prod(_keep(shape, (3,))) * 2
            v = {}
            for elems, warps, stages in (
                (4096, 2, 3),
                (8192, 2, 3),
                (4096, 1, 3),
                (2048, 2, 3),
                (4096, 2, 1),
                (8192, 4, 3),
            ):

                def lk(y, e=elems, w=warps, st=stages):
                    over = {
                        "P__TILE_ELEMENTS__'lse'": e,
                        "P__F16_LSE_ELEMENTS": dict.fromkeys(P.F16_LSE_ELEMENTS, 2 * e),
                        "P__F16_LSE_WARPS": dict.fromkeys(("inner", "narrow", "minor"), w),
                        "P__NUM_STAGES__'lse'": st,
                    }
                    with setting(**over):
                        p = P.plan(y.shape, (3,), y.dtype, "lse")
                        return X.log_sum_exp_kernel(y, p)

                v[f"ex2/{elems}/{warps}/{stages}"] = lk
            measure(timer, "LSE axis 3", dtype, nb + out_b, v, (x,), roof, tol=1e-3)
        elif dtype == "int8":
            for axes, tls in (
                (
                    (3,),
                    (
                        (4096, 512, 4, 3),
                        (8192, 512, 4, 3),
                        (4096, 512, 4, 4),
                        (4096, 512, 2, 3),
                        (2048, 512, 2, 3),
                        (8192, 512, 8, 4),
                    ),
                ),
                (
                    (1,),
                    (
                        (4096, 1024, 8, 2),
                        (4096, 1024, 4, 3),
                        (2048, 1024, 4, 4),
                        (2048, 256, 4, 4),
                        (4096, 512, 4, 4),
                        (8192, 1024, 8, 3),
                    ),
                ),
            ):
                out_b = math.prod(_keep(shape, axes)) * 4
                v = {}
                for tl in tls:

                    def lk(y, axes=axes, tl=tl):
                        over = {f"X__LANES_TILING__('arg', 1, {b})": tl for b in (True, False)}
                        with setting(**over, X__ARG_KERNEL__1="lanes"):
                            p = X.plan(y.shape, axes, y.dtype, "arg")
                        return K.lanes_kernel(y, p, True, False)

                    v["l" + "/".join(map(str, tl))] = lk
                measure(timer, f"ARGMAX axis {axes[0]}", dtype, nb + out_b, v, (x,), roof)
        else:
            out_b = math.prod(_keep(shape, (3,))) * 4
            v = {}
            for mode in ("exp", "ex2"):

                def lk(y, mode=mode):
                    with setting(X__LSE_EXP__4=mode):
                        p = P.plan(y.shape, (3,), y.dtype, "lse")
                        return X.log_sum_exp_kernel(y, p)

                v[mode] = lk
            measure(timer, "LSE axis 3", dtype, nb + out_b, v, (x,), roof, tol=2e-6)
        del x


def small_mode():
    """``--small``: tiny shapes, every plan allowed, every Pallas call interpreted (CPU)."""
    global SMALL
    SMALL = True
    P.MIN_PROGRAMS = 1
    from jax._src.pallas import pallas_call as _pc

    real = _pc.pallas_call

    def interpreted(*a, **kw):
        kw["interpret"] = True
        return real(*a, **kw)

    import jax.experimental.pallas as _pl

    _pl.pallas_call = interpreted


def main(argv):
    global PATH
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--only", default="check,float16,int8")
    ap.add_argument("--small", action="store_true", help="tiny shapes, Pallas interpreter (CPU)")
    args = ap.parse_args(argv)
    if args.small:
        small_mode()
    os.makedirs(args.out, exist_ok=True)
    PATH = os.path.join(args.out, "variants_narrow.json")
    OUT["environment"] = environment()
    print(OUT["environment"], flush=True)
    timer = Timer(sample_s=0.05, samples=5)
    for part in args.only.split(","):
        try:
            if part == "check":
                check()
            elif part == "extra":
                extra(timer)
            else:
                narrow(timer, part)
        except Exception:
            traceback.print_exc()
            _fail(f"{part} raised")
        _save()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
