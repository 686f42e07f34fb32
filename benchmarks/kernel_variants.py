"""The alternatives the package's reduction kernels were chosen from, for the GPU experiments.

``dml_jax.kernels`` holds each kernel frozen at its chosen variant (see benchmarks/RESULTS.md
and results/). The experiments here (variants.py, variants_narrow.py, variants_packed.py) time
the others, selected by the module-level switches below, whose values are the package's choice.
Set them for one call with ``variants_narrow.setting(X__NAME=...)`` (dict items:
``X__NAME__key``); ``plan``, ``arg`` and ``lse`` read them at trace time.

This module carries its own copies of the kernels with every alternative (``packed_kernel``,
``log_sum_exp_kernel``); the per-tile and lanes kernels have no alternatives and come from
``dml_jax.kernels.reduce``. ``python benchmarks/kernel_variants.py --check`` runs the
alternatives through Pallas's interpreter against the lax lowering (CPU is enough).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from dml_jax.kernels import elementwise as E
from dml_jax.kernels import movement as M
from dml_jax.kernels import reduce as K
from dml_jax.kernels import reduce_plan as P
from dml_jax.ops import reduce as R

# Packed and LOG_SUM_EXP kernels load tiles without masks when the tiles divide the tensor.
UNMASKED = True
# Which ARGMIN/ARGMAX kernel runs per itemsize: "packed" (``packed_kernel``), "lanes"
# (``K.lanes_kernel``) or "tile" (``K.arg_reduce_kernel``); reductions longer than
# P.PACKED_MAX_R cannot run "packed" and use ARG_KERNEL_LONG.
ARG_KERNEL = {1: "packed", 2: "packed", 4: "tile"}
ARG_KERNEL_LONG = {1: "lanes", 2: "tile", 4: "tile"}
# Packed kernel: every element keeps its own running maximum (False: a reduction per tile).
PACKED_LANES = {1: True, 2: True}
# How the packed kernel forms float16 keys, per layout: "where" (selects), "xor" (sign-mask
# arithmetic, NaN from the key's magnitude) or "xornan" (as "xor", NaN from a float compare).
PACKED_F16_KEY = {"inner": "xornan", "narrow": "xornan", "minor": "xornan"}
# Integer ARGMIN in the packed kernel: "key" (complemented keys) or "word" (complemented word).
INT_ARGMIN = "word"
# float16 ARGMIN in the packed kernel: "key" (negated keys) or "word" (as INT_ARGMIN).
F16_ARGMIN = "word"
# How the LOG_SUM_EXP kernel exponentiates, per itemsize: "exp" (libdevice expf), "exp2"
# (libdevice exp2f of x * log2(e)), "ex2" (ex2.approx.f32) or "ex2ftz" (ex2.approx.ftz.f32).
# The last two are CUDA only ("exp2" when interpreted).
LSE_EXP = {2: "ex2ftz", 4: "ex2ftz"}
# LOG_SUM_EXP whose reduced extent fits one tile skips the online rescaling.
SINGLE_TILE_LSE = True
# Lanes-kernel tilings, per (kind, itemsize, inner layout): the package's 1-byte rows and the
# 2-byte rows the experiments ran (4-byte types use the 2-byte rows).
LANES_TILING = {
    **P.LANES_TILING,
    ("arg", 2, True): (4096, 512, 4, 3),
    ("arg", 2, False): (4096, 512, 4, 3),
}


@contextlib.contextmanager
def setting(**kw):
    """Temporarily sets ``module.NAME`` (key ``"X__NAME"``) or dict items (``"X__D__key"``,
    the key a Python literal). Modules: X (this one), P (``reduce_plan``: tile tables,
    MIN_PROGRAMS), K (``kernels.reduce``), M (``kernels.movement``), E (``kernels.elementwise``).
    """
    mods = {"X": sys.modules[__name__], "P": P, "K": K, "M": M, "E": E}
    saved = []
    try:
        for key, value in kw.items():
            mod, name = key.split("__", 1)
            obj = mods[mod]
            if "__" in name:
                dname, item = name.split("__", 1)
                d = getattr(obj, dname)
                k = eval(item)
                saved.append((d, k, d.get(k)))
                d[k] = value
            else:
                saved.append((obj, name, getattr(obj, name)))
                setattr(obj, name, value)
        yield
    finally:
        for obj, name, value in reversed(saved):
            if isinstance(obj, dict):
                obj[name] = value
            else:
                setattr(obj, name, value)


def arg_kernel(dtype, r: int) -> str:
    """Which ARGMIN/ARGMAX kernel ARG_KERNEL / ARG_KERNEL_LONG name for ``r`` elements."""
    item = np.dtype(dtype).itemsize
    name = ARG_KERNEL.get(item, "tile")
    if name == "packed" and (item > 2 or r > P.PACKED_MAX_R):
        name = ARG_KERNEL_LONG.get(item, "tile")
    return name


def lanes_tiling(kind: str, a: int, r: int, b: int, itemsize: int, table=None) -> P.Tiling:
    """The lanes/packed tiling from LANES_TILING (or ``table``, keyed ``(itemsize, layout)``)."""
    if table is None:
        row = LANES_TILING[(kind, min(itemsize, 2), b > 1)]
    else:
        row = table[(itemsize, P.layout(b))]
    return P.lanes_tiling(a, r, b, row)


def plan(shape, axes, dtype, kind: str) -> P.Plan | None:
    """``P.plan`` with the kernel (and its tiling) the switches above choose."""
    p = P.plan(shape, axes, dtype, kind)
    if p is None or kind == "lse":
        return p
    item = np.dtype(dtype).itemsize
    name = "lanes" if kind == "ext" else arg_kernel(dtype, p.r)
    if name == "lanes":
        tiling = lanes_tiling(kind, p.a, p.r, p.b, item)
    else:
        tiling = P.tiling(kind, p.a, p.r, p.b, item, name)
    q = P.Plan(p.a, p.r, p.b, tiling)
    return q if q.programs >= P.MIN_PROGRAMS else None


def arg(y, axes, largest: bool = True, last: bool = False, out_dtype=jnp.int32):
    """ARGMIN/ARGMAX as the switches choose (the lax lowering where there is no plan)."""
    p = plan(y.shape, axes, y.dtype, "arg")
    if p is None:
        return R.arg_reduce(y, axes, largest, last, out_dtype)
    name = arg_kernel(y.dtype, p.r)
    if name == "packed":
        lanes = PACKED_LANES.get(np.dtype(y.dtype).itemsize, True)
        k = packed_kernel(y, p, largest, last, lanes=lanes)
    elif name == "lanes":
        k = K.lanes_kernel(y, p, largest, last)
    else:
        k = K.arg_reduce_kernel(y, p, largest, last)
    return lax.reshape(k.astype(out_dtype), R.reduced_sizes(y.shape, axes))


def lse(y, axes):
    """LOG_SUM_EXP as the switches choose (the lax lowering where there is no plan)."""
    p = plan(y.shape, axes, y.dtype, "lse")
    if p is None:
        return lax.reshape(
            R._reduce_value(R.F.LOG_SUM_EXP, y, axes), R.reduced_sizes(y.shape, axes)
        )
    return lax.reshape(log_sum_exp_kernel(y, p), R.reduced_sizes(y.shape, axes))


# ---------------------------------------------------------------------------------------------
# Kernels with every alternative


def _packed_keys(v, dtype, largest: bool, form: str = "where", nan_lowest: bool = False):
    """int32 keys in ``[-2**15, 2**15)`` of a tile of a 1- or 2-byte ``dtype``: a larger key is
    a better candidate (ARGMAX or ARGMIN alike), NaN the best of all.

    float16: the magnitude with the value's sign (so -0.0 and +0.0 tie, as IEEE says), negated
    for ARGMIN; every NaN becomes ``0x7C01``, one beyond the key of an infinity. Integers: the
    value (ARGMAX) or its complement (ARGMIN), unsigned ones shifted into the signed range.
    ``nan_lowest`` (float16 "xor"/"xornan" forms with ``largest``): NaN becomes ``-0x7C02``, the
    lowest key, whose complement is the best ARGMIN key (see ``packed_kernel``).
    """
    dt = np.dtype(dtype)
    if dt.kind == "f" and form in ("xor", "xornan"):
        k = lax.bitcast_convert_type(v, jnp.int16).astype(jnp.int32)
        sign = lax.shift_right_arithmetic(k, np.int32(31))  # 0 or -1
        t = (k ^ (sign & np.int32(0x7FFF))) - sign  # magnitude with the value's sign
        t = t if largest else -t
        inf = np.int32(0x7C00)
        # "xornan" asks the float unit (isnan: v != v); "xor" the key's magnitude, |t| > inf
        nan = jnp.isnan(v) if form == "xornan" else (jnp.abs(t) > inf)
        return jnp.where(nan, -(inf + 2) if nan_lowest else inf + 1, t)
    if dt.kind == "f":
        k = lax.bitcast_convert_type(v, jnp.int16).astype(jnp.int32)  # sign-extended bits
        neg = k < 0
        if largest:  # negative values: -(magnitude) = -32768 - k
            t = jnp.where(neg, np.int32(-32768) - k, k)
        else:
            t = jnp.where(neg, k + np.int32(32768), -k)
        inf = np.int32(0x7C00)
        # |t| > inf is a NaN: positive ones are clamped, negative ones flipped to the top.
        return jnp.where(t < -inf, inf + 1, jnp.minimum(t, inf + 1))
    k = v.astype(jnp.int32)
    if dt.kind == "u":
        half = np.int32(1 << (8 * dt.itemsize - 1))
        return k - half if largest else (half - 1) - k
    return k if largest else ~k


def packed_kernel(
    x, p: P.Plan, largest: bool, last: bool, lanes: bool = True, interpret: bool = False
):
    """ARGMIN/ARGMAX of 1- and 2-byte types with ``R <= 65536``: one int32 maximum per element.

    Each element becomes ``key << 16 | low`` (``_packed_keys``), where ``low`` is ``0xFFFF -
    index`` for the first extreme (INCREASING) or ``index`` for the last (DECREASING); the
    largest packed value then holds the extreme and the wanted index, so a tile costs a few
    integer operations and one maximum per element, and the result is ``low`` read back. With
    ``lanes`` every element of the tile keeps its running maximum and lanes are combined once
    at the end; without, each tile is reduced before it joins the running maximum. Returns
    int32 indices of shape ``(A * B,)``.
    """
    if p.r > P.PACKED_MAX_R:
        raise ValueError(f"packed_kernel needs R <= {P.PACKED_MAX_R}, got {p.r}")
    pl, pltriton = K.load_pallas()
    unmasked = UNMASKED and P.exact(p)
    load, store, ax = K._tile_loader(p, pl, pltriton, unmasked=unmasked)
    n_tiles = -(-p.r // p.tiling.rows)
    dt = np.dtype(x.dtype)
    lowest = np.int32(np.iinfo(np.int32).min)
    mask16 = np.int32(0xFFFF)
    form = PACKED_F16_KEY[P.layout(p.b)]

    # ARGMIN may complement the whole word instead of the key: ~(k << 16 | (0xFFFF - low))
    # equals (~k) << 16 | low, and the complement folds into the OR. Integers: INT_ARGMIN;
    # float16 (forms "xor"/"xornan", NaN then the lowest ARGMAX key): F16_ARGMIN.
    if dt.kind == "f":
        flip_word = not largest and F16_ARGMIN == "word" and form in ("xor", "xornan")
    else:
        flip_word = not largest and INT_ARGMIN == "word"

    def packed(tile, valid, idx):
        low = idx if last else mask16 - idx
        if flip_word:
            k = _packed_keys(tile, dt, True, form, nan_lowest=True)
            v = ~(lax.shift_left(k, np.int32(16)) | (mask16 - low))
        else:
            v = lax.shift_left(_packed_keys(tile, dt, largest, form), np.int32(16)) | low
        return v if valid is None else jnp.where(valid, v, lowest)

    def kernel(x_ref, o_ref):
        pid = pl.program_id(0)
        fill = jnp.asarray(0, x_ref.dtype)
        state = packed(*load(x_ref, pid, 0, fill))
        if not lanes:
            state = jnp.max(state, axis=ax)

        def body(t, state):
            v = packed(*load(x_ref, pid, t, fill))
            return jnp.maximum(state, v if lanes else jnp.max(v, axis=ax))

        if n_tiles > 1:
            state = lax.fori_loop(1, n_tiles, body, state)
        low = (jnp.max(state, axis=ax) if lanes else state) & mask16
        store(o_ref, pid, low if last else mask16 - low)

    return K._call(kernel, p, K._as_2d(x, p), jnp.int32, interpret)


def log_sum_exp_kernel(x, p: P.Plan, interpret: bool = False):
    """Runs the LOG_SUM_EXP kernel; returns ``(A * B,)`` values in the input's dtype.

    One pass with a running maximum ``m`` and a running sum ``s`` of ``exp(x - shift)``, where
    ``shift`` is ``m`` when finite and 0 otherwise (the lax lowering's rule, so all ``-inf``
    gives ``-inf`` and a ``+inf`` gives ``+inf``). When the maximum grows, ``s`` is rescaled by
    ``exp(old_shift - new_shift) <= 1``, so nothing overflows.
    """
    pl, pltriton = K.load_pallas()
    load, store, ax = K._tile_loader(p, pl, pltriton, unmasked=UNMASKED and P.exact(p))
    width = p.tiling.cols
    n_tiles = -(-p.r // p.tiling.rows)
    neg_inf = np.float32(-np.inf)
    mode = LSE_EXP.get(np.dtype(x.dtype).itemsize, "exp")
    if mode in ("ex2", "ex2ftz") and interpret:
        mode = "exp2"  # inline PTX does not run in the interpreter; same formula otherwise

    def exp(v):
        if mode == "exp":
            return jnp.exp(v)
        v = v * np.float32(np.log2(np.e))
        if mode == "exp2":
            return jnp.exp2(v)
        (y,) = pltriton.elementwise_inline_asm(
            "ex2.approx.ftz.f32 $0, $1;" if mode == "ex2ftz" else "ex2.approx.f32 $0, $1;",
            args=[v],
            constraints="=r,r",
            pack=1,
            result_shape_dtypes=[jax.ShapeDtypeStruct(v.shape, jnp.float32)],
        )
        return y

    def shift_of(m):
        return jnp.where(jnp.abs(m) < np.float32(np.inf), m, np.float32(0))

    def kernel(x_ref, o_ref):
        pid = pl.program_id(0)

        def body(t, carry):
            m, s = carry
            tile, _, _ = load(x_ref, pid, t, jnp.asarray(neg_inf, x_ref.dtype))
            tile = tile.astype(jnp.float32)
            new_m = jnp.maximum(m, jnp.max(tile, axis=ax))
            old_shift, new_shift = shift_of(m), shift_of(new_m)
            # s == 0 skips the rescale: exp(old - new) may overflow when the old maximum was
            # -inf (shift 0) and the new one is very negative; 0 * inf would be NaN.
            s = jnp.where(s > 0, s * exp(old_shift - new_shift), s)
            s = s + jnp.sum(exp(tile - jnp.expand_dims(new_shift, ax)), axis=ax)
            return new_m, s

        if n_tiles == 1 and SINGLE_TILE_LSE:
            # The whole reduced extent in one tile: max, then the shifted sum, no rescaling.
            tile, _, _ = load(x_ref, pid, 0, jnp.asarray(neg_inf, x_ref.dtype))
            tile = tile.astype(jnp.float32)
            m = jnp.max(tile, axis=ax)
            s = jnp.sum(exp(tile - jnp.expand_dims(shift_of(m), ax)), axis=ax)
        else:
            init = (jnp.full((width,), neg_inf), jnp.zeros((width,), jnp.float32))
            m, s = lax.fori_loop(0, n_tiles, body, init)
        store(o_ref, pid, (jnp.log(s) + shift_of(m)).astype(o_ref.dtype))

    return K._call(kernel, p, K._as_2d(x, p), x.dtype, interpret)


# ---------------------------------------------------------------------------------------------
# Interpreter checks of the alternatives (formerly in tests/test_kernels.py)


def _data(rng, shape, dtype):
    dt = np.dtype(dtype)
    if dt.kind == "u":
        x = rng.integers(0, 4, size=shape).astype(dt)
        x.reshape(-1)[:2] = np.iinfo(dt).max
        return x
    x = rng.integers(-3, 4, size=shape).astype(dt)  # few values: many ties
    if dt.kind == "f":
        flat = x.reshape(-1)
        flat[rng.integers(0, flat.size, 4)] = np.nan
        flat[rng.integers(0, flat.size, 2)] = np.inf
        flat[rng.integers(0, flat.size, 2)] = -np.inf
    return x


def check_float16_keys() -> list[str]:
    """Every float16 bit pattern, every key form: keys order as the values, ties exactly where
    IEEE says equal, every NaN the single best key, all within 16 signed bits; the ARGMIN word
    form's complemented keys equal the ARGMIN keys - 1."""
    bad = []
    v = np.arange(65536, dtype=np.uint16).view(np.float16)
    nan = np.isnan(v)
    order = np.argsort(v[~nan].astype(np.float64), kind="stable")
    num = v[~nan].astype(np.float64)[order]
    for form in ("where", "xor", "xornan"):
        for largest in (True, False):
            key = np.asarray(_packed_keys(jnp.asarray(v), np.float16, largest, form))
            key = key.astype(np.int64)
            best = key[nan]
            k = key[~nan][order] if largest else -key[~nan][order]
            ok = (
                key.min() >= -(2**15)
                and key.max() < 2**15
                and (best == best[0]).all()
                and best[0] > key[~nan].max()
                and (np.diff(k) >= 0).all()
                and np.array_equal(np.diff(k) == 0, np.diff(num) == 0)
            )
            if not ok:
                bad.append(f"float16 keys {form} largest={largest}")
        if form != "where":
            low = np.asarray(_packed_keys(jnp.asarray(v), np.float16, True, form, nan_lowest=True))
            amin = np.asarray(_packed_keys(jnp.asarray(v), np.float16, False, form))
            if not (
                np.array_equal(~low[~nan], amin[~nan] - 1)
                and (~low[nan] == 0x7C01).all()
                and 0x7C01 > (~low[~nan]).max()
            ):
                bad.append(f"float16 ARGMIN word keys {form}")
    return bad


LAYOUTS = [
    ((3, 7, 5), (1,), P.Tiling(rows=4, cols=4)),  # inner, overhanging
    ((6, 9), (1,), P.Tiling(rows=4, cols=4)),  # minor, overhanging
    ((4, 8, 6), (1,), P.Tiling(rows=4, cols=2)),  # inner, exact: unmasked
    ((8, 12), (1,), P.Tiling(rows=4, cols=4)),  # minor, exact
]


def _plan_of(shape, axes, tiling):
    a = int(np.prod(shape[: axes[0]]))
    r = int(np.prod([shape[i] for i in axes]))
    b = int(np.prod(shape[axes[-1] + 1 :]))
    return P.Plan(a, r, b, tiling)


def check_packed() -> list[str]:
    """``packed_kernel`` with every key form, ARGMIN form, lanes and masking choice."""
    bad = []
    rng = np.random.default_rng(5)
    for dtype in ("float16", "int8", "uint8", "int16", "uint16"):
        forms = ("where", "xor", "xornan") if dtype == "float16" else ("where",)
        for (shape, axes, tiling), form, argmin, lanes, unmasked in itertools.product(
            LAYOUTS, forms, ("key", "word"), (True, False), (True, False)
        ):
            x = jnp.asarray(_data(rng, shape, dtype))
            p = _plan_of(shape, axes, tiling)
            over = dict(
                X__PACKED_F16_KEY=dict.fromkeys(PACKED_F16_KEY, form),
                X__INT_ARGMIN=argmin,
                X__F16_ARGMIN=argmin,
                X__UNMASKED=unmasked,
            )
            for largest, last in itertools.product((True, False), (True, False)):
                want = np.asarray(R.arg_reduce(x, axes, largest, last, jnp.int32)).reshape(-1)
                with setting(**over):
                    got = packed_kernel(x, p, largest, last, lanes=lanes, interpret=True)
                if not np.array_equal(np.asarray(got), want):
                    bad.append(f"packed {dtype} {shape} {form} {argmin} {lanes} {unmasked}")
    return bad


def check_lse() -> list[str]:
    """``log_sum_exp_kernel`` with every exponent form, with and without the one-tile path."""
    bad = []
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((6, 9)) * 3).astype(np.float32)
    x[0] += 1000.0
    x[1] = -np.inf
    x = jnp.asarray(x)
    want = np.asarray(R._reduce_value(R.F.LOG_SUM_EXP, x, (1,)))
    for mode, single, rows in itertools.product(("exp", "exp2", "ex2"), (True, False), (4, 16)):
        p = P.Plan(6, 9, 1, P.Tiling(rows=rows, cols=4))
        with setting(X__LSE_EXP__4=mode, X__SINGLE_TILE_LSE=single):
            got = np.asarray(log_sum_exp_kernel(x, p, interpret=True))
        if not (np.allclose(got, want, rtol=2e-6) and got[1] == -np.inf):
            bad.append(f"lse {mode} single={single} rows={rows}")
    return bad


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument(
        "--check", action="store_true", help="run the alternatives through the interpreter"
    )
    args = ap.parse_args(argv)
    if not args.check:
        ap.print_help()
        return 0
    bad = check_float16_keys() + check_packed() + check_lse()
    for b in bad:
        print("FAIL", b)
    print(f"{len(bad)} failures")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
