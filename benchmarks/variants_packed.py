"""GPU comparison for round 4 of issue 7: the packed ARGMIN/ARGMAX kernel and ``ex2.approx.ftz``.

The cases still below 90% of the copy after round 3 were ARGMAX of float16 and int8 and
LOG_SUM_EXP of float16 along the minor axis. Candidates:

- ``packed_kernel`` (1- and 2-byte types): one int32 ``key << 16 | index`` per element and a
  single maximum, against round 3's kernels (``lanes`` for int8, per-tile for float16); with
  per-element state (``lanes``) or a reduction per tile, several tilings, with and without
  unmasked loads on exactly divided tensors.
- LOG_SUM_EXP with ``ex2.approx.ftz.f32`` (no denormal fix-up around the instruction) against
  ``ex2.approx.f32``, warps and tile sizes.

Run on a CUDA machine from the repository root:

    XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=. python benchmarks/variants_packed.py [--out DIR]

First every candidate is checked on the GPU against the lax lowering on small odd and exactly
divided shapes (indices exact, NaN of both signs, signed zeros, infinities and type extremes
included; LOG_SUM_EXP within 1e-3 relative in float16, 1e-5 in float32). Then each is timed at
1 GiB next to the copy roofline of the same run, and checked bit-exact (LOG_SUM_EXP: within the
same tolerance) against the first variant of its case. Writes ``variants_packed.json``.
"""

from __future__ import annotations

import argparse
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
import variants_narrow as V

from dml_jax.bench import Timer, environment
from dml_jax.kernels import reduce as K
from dml_jax.kernels import reduce_plan as P
from dml_jax.ops import reduce as R


def _arg(y, axes, largest=True, last=False):
    """ARGMIN/ARGMAX through the kernel the switches of kernel_variants choose (by default the
    package's)."""
    return X.arg(y, axes, largest, last, jnp.int32)


def _lse(y, axes):
    """LOG_SUM_EXP through the kernel the switches of kernel_variants choose."""
    return X.lse(y, axes)


def _input(dtype, seed: int = 0):
    """The 1 GiB tensor of ``dtype`` (``--small``: a tiny one) and its shape: normal floats,
    integers in [-100, 100)."""
    item = np.dtype(dtype).itemsize
    shape = (16 * (4 // item), 256, 256, 256) if not V.SMALL else (4 // item, 16, 8, 256)
    key = jax.random.PRNGKey(seed)
    if np.dtype(dtype).kind == "f":
        return shape, jax.random.normal(key, shape, jnp.float32).astype(dtype)
    return shape, jax.random.randint(key, shape, -100, 100, jnp.int32).astype(dtype)


def _kernel_in(fn, x) -> bool:
    """Whether the program compiled for ``fn(x)`` calls a Triton kernel."""
    return "triton" in jax.jit(fn).lower(x).compile().as_text().lower()


LAYOUTS = ("inner", "narrow", "minor")
ROUND3 = {"X__ARG_KERNEL__1": "lanes", "X__ARG_KERNEL__2": "tile", "X__UNMASKED": False}


def _specials(x):
    """Adds NaN of both signs and a payload, signed zeros and infinities to a float16 array."""
    flat = x.reshape(-1)
    n = flat.size
    rng = np.random.default_rng(n)
    bits = flat.view(np.uint16)
    for pattern in (0xFE01, 0x7FFF, 0x7E00):
        bits[rng.integers(0, n, max(1, n // 97))] = pattern
    flat[rng.integers(0, n, max(1, n // 13))] = -0.0
    flat[rng.integers(0, n, max(1, n // 89))] = np.inf
    flat[rng.integers(0, n, max(1, n // 89))] = -np.inf
    return x


def check():
    """The packed kernel and the ftz exponent vs lax on small shapes, compiled for the GPU."""
    rng = np.random.default_rng(0)
    saved = P.MIN_PROGRAMS
    P.MIN_PROGRAMS = 1
    try:
        cases = [
            ((3, 300, 70), (1,)),  # inner, overhanging tiles
            ((5, 1000), (1,)),  # minor, overhanging
            ((2, 3, 5, 4), (1, 2)),  # two reduced axes
            ((16, 64, 512), (1,)),  # inner, exact tiles: unmasked loads
            ((4096, 256), (1,)),  # minor, exact
            ((8, 40000, 3), (1,)),  # long reduction, several tiles
        ]
        for dtype in ("float16", "int8", "uint8", "int16", "uint16"):
            for shape, axes in cases:
                x = V._data(rng, shape, dtype)
                if dtype == "float16":
                    x = _specials(x)
                xd = jnp.asarray(x)
                for largest in (True, False):
                    for last in (True, False):
                        want = np.asarray(
                            jax.jit(lambda y: R.arg_reduce(y, axes, largest, last, jnp.int32))(xd)
                        ).reshape(-1)
                        forms = ("where", "xor", "xornan") if dtype == "float16" else ("-",)
                        for lanes, unmasked, form in (
                            *((True, u, f) for u in (True, False) for f in forms),
                            (False, True, forms[0]),
                        ):
                            if True:
                                p = K.plan(xd.shape, axes, xd.dtype, "arg")
                                got = jax.jit(
                                    lambda y, p=p, lanes=lanes, unmasked=unmasked, form=form: (
                                        V._with(
                                            lambda z: X.packed_kernel(z, p, largest, last, lanes),
                                            X__UNMASKED=unmasked,
                                            X__PACKED_F16_KEY=dict.fromkeys(
                                                LAYOUTS, form if form != "-" else "where"
                                            ),
                                        )(y)
                                    )
                                )(xd)
                                ok = np.array_equal(np.asarray(got), want)
                                tag = (
                                    f"packed {dtype} {shape} {axes} largest={largest} "
                                    f"last={last} lanes={lanes} unmasked={unmasked} "
                                    f"key={form} exact={K.exact(p)}"
                                )
                                V.OUT["checks"].append(dict(case=tag, ok=ok))
                                if not ok:
                                    V._fail(tag)
                        # the package's choice (packed by default for these types)
                        got = jax.jit(lambda y: _arg(y, axes, largest, last))(xd)
                        ok = np.array_equal(np.asarray(got).reshape(-1), want)
                        tag = f"dispatch {dtype} {shape} {axes} largest={largest} last={last}"
                        V.OUT["checks"].append(dict(case=tag, ok=ok))
                        if not ok:
                            V._fail(tag)
        for dtype, tol in (("float16", 1e-3), ("float32", 1e-5)):
            for shape, axes in ((5, 1000), (1,)), ((3, 300, 70), (1,)), ((4096, 256), (1,)):
                x = rng.standard_normal(shape).astype(np.float32) * 4
                x.reshape(-1)[: shape[-1]] += 1000.0 if dtype == "float32" else 60000.0
                x[1] = -np.inf
                x.reshape(-1)[7] = np.nan
                x.reshape(-1)[-3] = np.inf
                xd = jnp.asarray(x.astype(dtype))
                want = np.asarray(
                    jax.jit(lambda y: R._reduce_value(R.F.LOG_SUM_EXP, y, axes))(xd)
                ).reshape(-1)
                for mode in ("ex2", "ex2ftz"):
                    item = np.dtype(dtype).itemsize
                    with V.setting(**{f"X__LSE_EXP__{item}": mode}):
                        p = K.plan(xd.shape, axes, xd.dtype, "lse")
                        got = jax.jit(lambda y, p=p: X.log_sum_exp_kernel(y, p))(xd)
                    ok = V._same(np.asarray(got), want, tol)
                    tag = f"lse {mode} {dtype} {shape} {axes} exact={K.exact(p)}"
                    V.OUT["checks"].append(dict(case=tag, ok=ok))
                    if not ok:
                        V._fail(tag)
    finally:
        P.MIN_PROGRAMS = saved
    n_ok = sum(c["ok"] for c in V.OUT["checks"])
    print(f"checks: {n_ok} of {len(V.OUT['checks'])} pass", flush=True)


PACKED_TILINGS = {
    "t4096/512/4/3": (4096, 512, 4, 3),
    "t4096/1024/8/2": (4096, 1024, 8, 2),
    "t8192/1024/8/3": (8192, 1024, 8, 3),
    "t2048/512/4/4": (2048, 512, 4, 4),
    "t4096/512/2/3": (4096, 512, 2, 3),
    "t8192/512/4/3": (8192, 512, 4, 3),
    "t16384/1024/8/2": (16384, 1024, 8, 2),
}


def arg_cases(timer, dtype, axes_list):
    item = np.dtype(dtype).itemsize
    shape, x = _input(dtype)
    roof = V.roofline(timer, x, dtype)
    for ax in axes_list:
        axes = (ax,)
        out_b = math.prod(V._keep(shape, axes)) * 4
        nbytes = x.size * item + out_b

        def arg(y, axes=axes):
            return _arg(y, axes).reshape(-1)

        print(f"axis {ax}: kernel in program: {_kernel_in(arg, x)}", flush=True)

        variants = {"round3": V._with(arg, **ROUND3)}
        for name, tl in PACKED_TILINGS.items():
            over = {f"P__PACKED_TILING__({item}, '{lay}')": tl for lay in LAYOUTS}
            variants[f"packed-lanes {name}"] = V._with(arg, **over)
            if name in ("t4096/512/4/3", "t4096/1024/8/2", "t2048/512/4/4"):
                variants[f"packed-tile {name}"] = V._with(
                    arg, **over, **{f"X__PACKED_LANES__{item}": False}
                )
        variants["packed-lanes default masked"] = V._with(arg, X__UNMASKED=False)
        V.measure(timer, f"ARGMAX axis {ax}", dtype, nbytes, variants, [x], roof)


F16_PACKED = {
    "t4096/512/4/4": (4096, 512, 4, 4),
    "t2048/256/2/3": (2048, 256, 2, 3),
    "t4096/256/4/4": (4096, 256, 4, 4),
    "t4096/512/4/5": (4096, 512, 4, 5),
    "t2048/512/2/4": (2048, 512, 2, 4),
    "t8192/1024/8/4": (8192, 1024, 8, 4),
    "t8192/512/2/3": (8192, 512, 2, 3),
}
F16_KEYS = ("xor", "xornan")
HALF = False  # time half_kernel too (round 4b did; it lost everywhere)
# Round 4b candidate, measured below the packed kernel and not in the package (float16 ARGMAX
# 0.87-0.88 along the minor axis, 0.38-0.83 elsewhere; round4/variants_packed_f16.log).
HALF_TILING = {
    (2, "inner"): (4096, 64, 4, 3),
    (2, "narrow"): (4096, 64, 4, 3),
    (2, "minor"): (4096, 512, 4, 3),
}


def half_kernel(x, p: K.Plan, largest: bool, last: bool, interpret: bool = False):
    """ARGMIN/ARGMAX of float16 compared in float16, one reduction pair per tile.

    Per tile: the extreme of the numbers (Triton's float max ignores NaN), then one index
    reduction over the elements that equal it or are NaN, where a NaN ranks before any number
    (index ``i`` for a NaN, ``R + i`` for a number with the first extreme; the reverse with the
    last). A tile holding a NaN reports its first (last) NaN, which decides the result; tiles
    without join the running extreme per output element. Returns int32 indices of shape
    ``(A * B,)``.
    """
    pl, pltriton = K.load_pallas()
    unmasked = X.UNMASKED and K.exact(p)
    load, store, ax = K._tile_loader(p, pl, pltriton, unmasked=unmasked)
    n_tiles = -(-p.r // p.tiling.rows)
    big = np.int32(p.r)
    none = np.int32(-1) if last else np.int32(np.iinfo(np.int32).max)
    pick = jnp.max if last else jnp.min
    extreme = jnp.max if largest else jnp.min
    fill = -np.inf if largest else np.inf

    def tile_result(x_ref, pid, t):
        tile, valid, idx = load(x_ref, pid, t, jnp.asarray(fill, x_ref.dtype))
        nan = jnp.isnan(tile)
        m = extreme(tile, axis=ax)
        hit = (tile == jnp.expand_dims(m, ax)) | nan
        if valid is not None:
            hit = hit & valid
        rank = jnp.where(nan, idx + big, idx) if last else jnp.where(nan, idx, idx + big)
        r = pick(jnp.where(hit, rank, none), axis=ax)
        # r's half: a NaN (below big for the first extreme, at or above it for the last)
        has_nan = (r >= big) if last else (r < big)
        return m.astype(jnp.float32), jnp.where(r >= big, r - big, r), has_nan

    def kernel(x_ref, o_ref):
        pid = pl.program_id(0)
        m, i, has_nan = tile_result(x_ref, pid, 0)
        nan_i = jnp.where(has_nan, i, none)

        def body(t, carry):
            m, i, nan_i = carry
            m_t, i_t, nan_t = tile_result(x_ref, pid, t)
            nan_i = jnp.where(nan_t, i_t if last else jnp.minimum(nan_i, i_t), nan_i)
            if last:
                upd = (m_t >= m) if largest else (m_t <= m)
            else:
                upd = (m_t > m) if largest else (m_t < m)
            upd = upd & ~nan_t
            return jnp.where(upd, m_t, m), jnp.where(upd, i_t, i), nan_i

        if n_tiles > 1:
            m, i, nan_i = lax.fori_loop(1, n_tiles, body, (m, i, nan_i))
        store(o_ref, pid, jnp.where(nan_i != none, nan_i, i))

    return K._call(kernel, p, K._as_2d(x, p), jnp.int32, interpret)


def _half_arg(y, axes, table=None):
    """ARGMAX through ``half_kernel`` on the packed kernel's plan, re-tiled by ``table``."""
    p = K.plan(y.shape, axes, y.dtype, "arg")
    tiling = X.lanes_tiling("arg", p.a, p.r, p.b, 2, table or HALF_TILING)
    out = half_kernel(y, K.Plan(p.a, p.r, p.b, tiling), True, False)
    return out


F16_HALF = {
    "h4096/64/4/3": (4096, 64, 4, 3),
    "h4096/128/4/3": (4096, 128, 4, 3),
    "h8192/64/8/3": (8192, 64, 8, 3),
    "h2048/32/4/3": (2048, 32, 4, 3),
    "h8192/128/4/3": (8192, 128, 4, 3),
    "h4096/64/2/3": (4096, 64, 2, 3),
}


def arg16_more(timer, axes_list=(3, 1, 0, 2)):
    """Round 4b for float16: more packed tilings, the "xor" key, and ``half_kernel``."""
    shape, x = _input("float16")
    roof = V.roofline(timer, x, "float16")
    for ax in axes_list:
        axes = (ax,)
        nbytes = x.size * 2 + math.prod(V._keep(shape, axes)) * 4

        def arg(y, axes=axes):
            return _arg(y, axes).reshape(-1)

        variants = {}
        for name, tl in F16_PACKED.items():
            over = {f"P__PACKED_TILING__(2, '{lay}')": tl for lay in LAYOUTS}
            for form in F16_KEYS:
                keys = dict.fromkeys(LAYOUTS, form)
                variants[f"packed-{form} {name}"] = V._with(arg, **over, X__PACKED_F16_KEY=keys)
        for name, tl in F16_HALF.items() if HALF else ():
            table = dict.fromkeys(((2, lay) for lay in LAYOUTS), tl)
            variants[f"half {name}"] = lambda y, axes=axes, table=table: _half_arg(
                y, axes, table
            ).reshape(-1)
        V.measure(timer, f"ARGMAX axis {ax}", "float16", nbytes, variants, [x], roof)


F16_NARROW = {
    "t4096/256/4/4": (4096, 256, 4, 4),
    "t4096/256/4/3": (4096, 256, 4, 3),
    "t4096/256/8/4": (4096, 256, 8, 4),
    "t8192/256/4/4": (8192, 256, 4, 4),
    "t8192/256/8/3": (8192, 256, 8, 3),
    "t2048/256/4/4": (2048, 256, 4, 4),
    "t4096/256/2/4": (4096, 256, 2, 4),
    "t2048/256/2/4": (2048, 256, 2, 4),
    "t16384/256/8/3": (16384, 256, 8, 3),
}


def arg16_final(timer):
    """Round 4c for float16: the chosen configuration on every axis, and the narrow inner
    layout (axis 2, B = 256) swept again."""
    shape, x = _input("float16")
    roof = V.roofline(timer, x, "float16")
    for ax in (3, 1, 0, 2):
        axes = (ax,)
        nbytes = x.size * 2 + math.prod(V._keep(shape, axes)) * 4

        def arg(y, axes=axes):
            return _arg(y, axes).reshape(-1)

        variants = {"chosen": arg}
        if ax == 2:
            for name, tl in F16_NARROW.items():
                for form in F16_KEYS:
                    over = {"P__PACKED_TILING__(2, 'narrow')": tl}
                    keys = {**X.PACKED_F16_KEY, "narrow": form}
                    variants[f"packed-{form} {name}"] = V._with(arg, **over, X__PACKED_F16_KEY=keys)
        variants["chosen again"] = arg
        V.measure(timer, f"ARGMAX axis {ax}", "float16", nbytes, variants, [x], roof)


def final_narrow(timer):
    """Round 4d: the chosen configuration, ARGMAX and ARGMIN of float16 and int8 and float16
    LOG_SUM_EXP on every axis; float16 LOG_SUM_EXP along the minor axis with other warps."""
    for dtype in ("float16", "int8"):
        item = np.dtype(dtype).itemsize
        shape, x = _input(dtype)
        roof = V.roofline(timer, x, dtype)
        for ax in (3, 1, 0, 2):
            axes = (ax,)
            nbytes = x.size * item + math.prod(V._keep(shape, axes)) * 4
            variants = {
                "ARGMAX": lambda y, axes=axes: _arg(y, axes, True).reshape(-1),
                "ARGMIN": lambda y, axes=axes: _arg(y, axes, False).reshape(-1),
            }
            for name, fn in variants.items():
                V.measure(timer, f"{name} axis {ax}", dtype, nbytes, {"chosen": fn}, [x], roof)
        if dtype != "float16":
            continue
        for ax in (3, 1, 0, 2):
            axes = (ax,)
            nbytes = x.size * item + math.prod(V._keep(shape, axes)) * item

            def lse(y, axes=axes):
                return _lse(y, axes).reshape(-1)

            variants = {"chosen": lse}
            if ax == 3:
                for w in (2, 8):
                    variants[f"w{w}"] = V._with(
                        lse, P__F16_LSE_WARPS={**P.F16_LSE_WARPS, "minor": w}
                    )
                variants["e4096"] = V._with(
                    lse, P__F16_LSE_ELEMENTS={**P.F16_LSE_ELEMENTS, "minor": 4096}
                )
                variants["chosen again"] = lse
            V.measure(timer, f"LOG_SUM_EXP axis {ax}", dtype, nbytes, variants, [x], roof, 1e-3)


I8_NARROW = {
    "t4096/512/4/3": (4096, 512, 4, 3),
    "t2048/256/4/3": (2048, 256, 4, 3),
    "t4096/256/8/4": (4096, 256, 8, 4),
    "t2048/512/2/4": (2048, 512, 2, 4),
    "t1024/256/2/4": (1024, 256, 2, 4),
    "t8192/512/8/3": (8192, 512, 8, 3),
}


def narrow_more(timer):
    """Round 4e: the narrow inner layout (axis 2, B = 256): int8 ARGMIN/ARGMAX tilings and
    float16 LOG_SUM_EXP warps and tile sizes; float16 LOG_SUM_EXP along the minor axis again."""
    shape, x = _input("int8")
    roof = V.roofline(timer, x, "int8")
    nbytes = x.size + math.prod(V._keep(shape, (2,))) * 4
    for largest in (False, True):
        name = "ARGMAX" if largest else "ARGMIN"

        def arg(y, largest=largest):
            return _arg(y, (2,), largest).reshape(-1)

        variants = {"chosen": arg}
        for form in ("key", "word"):
            for tname, tl in list(I8_NARROW.items())[:3]:
                variants[f"{form} {tname}"] = V._with(
                    arg, **{"P__PACKED_TILING__(1, 'narrow')": tl}, X__INT_ARGMIN=form
                )
        variants["chosen again"] = arg
        V.measure(timer, f"{name} axis 2", "int8", nbytes, variants, [x], roof)
    del x
    shape, x = _input("float16", seed=1)
    roof = V.roofline(timer, x, "float16")
    for ax in (2, 3):
        nbytes = x.size * 2 + math.prod(V._keep(shape, (ax,))) * 2

        def lse(y, ax=ax):
            return _lse(y, (ax,)).reshape(-1)

        lay = "narrow" if ax == 2 else "minor"
        variants = {"chosen": lse}
        for w in (1, 2, 4, 8):
            for elems in (2048, 4096, 8192):
                variants[f"w{w} e{elems * 2}"] = V._with(
                    lse,
                    P__F16_LSE_WARPS={**P.F16_LSE_WARPS, lay: w},
                    P__F16_LSE_ELEMENTS={**P.F16_LSE_ELEMENTS, lay: elems * 2},
                )
        variants["chosen again"] = lse
        V.measure(timer, f"LOG_SUM_EXP axis {ax}", "float16", nbytes, variants, [x], roof, 1e-3)


def f16_argmin(timer):
    """Round 4f: float16 ARGMIN with the complemented word (F16_ARGMIN "word") or negated keys."""
    shape, x = _input("float16")
    roof = V.roofline(timer, x, "float16")
    for ax in (3, 1, 0, 2):
        nbytes = x.size * 2 + math.prod(V._keep(shape, (ax,))) * 4

        def arg(y, ax=ax):
            return _arg(y, (ax,), False).reshape(-1)

        variants = {}
        for rep in ("", " again"):
            variants["word" + rep] = V._with(arg, X__F16_ARGMIN="word")
            variants["key" + rep] = V._with(arg, X__F16_ARGMIN="key")
        V.measure(timer, f"ARGMIN axis {ax}", "float16", nbytes, variants, [x], roof)


def lse_cases(timer, dtype, axes_list):
    item = np.dtype(dtype).itemsize
    shape, x = _input(dtype, seed=1)
    roof = V.roofline(timer, x, dtype)
    for ax in axes_list:
        axes = (ax,)
        nbytes = x.size * item + math.prod(V._keep(shape, axes)) * item

        def lse(y, axes=axes):
            return _lse(y, axes).reshape(-1)

        print(f"axis {ax}: kernel in program: {_kernel_in(lse, x)}", flush=True)

        round3 = {f"X__LSE_EXP__{item}": "ex2", "X__UNMASKED": False}
        variants = {"ex2 (round 3)": V._with(lse, **round3)}
        for mode in ("ex2", "ex2ftz"):
            for warps in (1, 2, 4, 8):
                over = {f"X__LSE_EXP__{item}": mode}
                if item == 2:
                    over["P__F16_LSE_WARPS"] = dict.fromkeys(LAYOUTS, warps)
                else:
                    over["P__NUM_WARPS__'lse'"] = warps
                    over["P__NARROW_LSE_WARPS"] = warps
                variants[f"{mode} w{warps}"] = V._with(lse, **over)
            for elems in (1024, 2048, 8192):
                over = {f"X__LSE_EXP__{item}": mode, "P__TILE_ELEMENTS__'lse'": elems}
                if item == 2:  # float16 tiles are sized by F16_LSE_ELEMENTS (elements)
                    del over["P__TILE_ELEMENTS__'lse'"]
                    over["P__F16_LSE_ELEMENTS"] = dict.fromkeys(LAYOUTS, elems * 2)
                variants[f"{mode} e{elems}"] = V._with(lse, **over)
        V.measure(timer, f"LOG_SUM_EXP axis {ax}", dtype, nbytes, variants, [x], roof, tol=1e-3)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--only", default="check,arg16,arg8,lse16,lse32")
    ap.add_argument("--small", action="store_true", help="tiny shapes, Pallas interpreter (CPU)")
    args = ap.parse_args(argv)
    if args.small:
        V.small_mode()
    os.makedirs(args.out, exist_ok=True)
    V.PATH = os.path.join(args.out, "variants_packed.json")
    V.OUT["environment"] = environment()
    print(V.OUT["environment"], flush=True)
    timer = Timer(sample_s=0.05, samples=5)
    parts = {
        "check": check,
        "arg16": lambda: arg_cases(timer, "float16", (3, 1, 0, 2)),
        "arg8": lambda: arg_cases(timer, "int8", (3, 1, 0, 2)),
        "lse16": lambda: lse_cases(timer, "float16", (3, 1)),
        "lse32": lambda: lse_cases(timer, "float32", (3,)),
        "arg16more": lambda: arg16_more(timer),
        "arg16final": lambda: arg16_final(timer),
        "final": lambda: final_narrow(timer),
        "narrowmore": lambda: narrow_more(timer),
        "f16argmin": lambda: f16_argmin(timer),
    }
    for part in args.only.split(","):
        try:
            parts[part]()
        except Exception:
            traceback.print_exc()
            V._fail(f"{part} raised")
        V._save()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
