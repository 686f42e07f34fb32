"""Single-pass Pallas (Triton) kernels for ARGMIN/ARGMAX, LOG_SUM_EXP and integer MAX/MIN.

Each kernel reduces the ``(A, R, B)`` view of a ``Plan`` (``reduce_plan``: layouts, tilings and
which cases the kernels take) and keeps a running state per output element, so the tensor is
read exactly once:

- ``arg_reduce_kernel`` (ARGMIN/ARGMAX of 4-byte types, and float16 longer than 65536): per
  tile the extreme, then its index.
- ``packed_kernel`` (1- and 2-byte ARGMIN/ARGMAX of at most 65536 elements): one int32 maximum
  of ``key << 16 | index`` per element.
- ``lanes_kernel`` (longer 1-byte ARGMIN/ARGMAX, 1-byte integer MAX/MIN): per-element state.
- ``log_sum_exp_kernel``: running maximum and rescaled sum.

The packed and LOG_SUM_EXP kernels load without masks when the tiles divide the tensor exactly
(``exact``); otherwise tiles hanging over the edge are masked. The semantics are those of the
lax lowering in ``dml_jax.ops.reduce``: the first (INCREASING) or last (DECREASING) index of the
extreme, NaN counting as the extreme; LOG_SUM_EXP shifted by the running maximum (so inputs of
1000 do not overflow), float16 read and accumulated in float32 and rounded once.
``reduce_paths`` registers them as the CUDA fast paths of REDUCE, ARGMIN and ARGMAX.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..fastpath import cuda_present
from ..ops.reduce import order_keys
from .pallas_helpers import is_nan, load_pallas, ptx
from .reduce_plan import PACKED_MAX_R, Plan, Tiling, arg_kernel, exact, layout, plan

__all__ = [
    "Plan",
    "Tiling",
    "arg_kernel",
    "arg_reduce_kernel",
    "cuda_present",
    "exact",
    "lanes_kernel",
    "layout",
    "log_sum_exp_kernel",
    "packed_kernel",
    "plan",
]


def _identity(dtype, largest: bool):
    """The value that never wins: -inf/+inf for floats, the type's min/max for integers."""
    if jnp.issubdtype(dtype, jnp.floating):
        return -np.inf if largest else np.inf
    info = np.iinfo(dtype)
    return info.min if largest else info.max


def _compute_dtype(dtype):
    # float16 compares exactly in float32; Triton reduces 32-bit values most efficiently.
    return jnp.float32 if dtype == jnp.float16 else dtype


def _tile_loader(p: Plan, pl, pltriton, unmasked: bool = False):
    """Returns ``(load, store, axis)`` for either layout.

    ``load(x_ref, pid, t, other) -> (tile, valid, index)``: tile ``t`` of program ``pid``,
    ``valid`` marking elements inside the tensor and ``index`` each element's reduced-axis index.
    ``axis`` is the tile axis that is reduced (0 for the inner layout, 1 for the minor one).
    With ``unmasked`` (only when ``exact(p)``) loads carry no mask and ``valid`` is None.
    """
    br, c = p.tiling.rows, p.tiling.cols
    if unmasked and not exact(p):
        raise ValueError(f"unmasked loads need tiles that divide the tensor: {p}")
    if p.b > 1:
        nb = -(-p.b // c)

        def load(x_ref, pid, t, other):
            a, j = pid // nb, pid % nb
            rows = t * br + jnp.arange(br, dtype=jnp.int32)
            ref = x_ref.at[pl.ds(a * p.r + t * br, br), pl.ds(j * c, c)]
            index = jnp.broadcast_to(rows[:, None], (br, c))
            if unmasked:
                return pltriton.load(ref), None, index
            cols = j * c + jnp.arange(c, dtype=jnp.int32)
            valid = (rows < p.r)[:, None] & (cols < p.b)[None, :]
            tile = pltriton.load(ref, mask=valid, other=other)
            return tile, valid, index

        def store(o_ref, pid, value):
            a, j = pid // nb, pid % nb
            ref = o_ref.at[pl.ds(a * p.b + j * c, c)]
            if unmasked:
                pltriton.store(ref, value)
                return
            cols = j * c + jnp.arange(c, dtype=jnp.int32)
            pltriton.store(ref, value, mask=cols < p.b)

    else:

        def load(x_ref, pid, t, other):
            red = t * br + jnp.arange(br, dtype=jnp.int32)
            ref = x_ref.at[pl.ds(pid * c, c), pl.ds(t * br, br)]
            index = jnp.broadcast_to(red[None, :], (c, br))
            if unmasked:
                return pltriton.load(ref), None, index
            rows = pid * c + jnp.arange(c, dtype=jnp.int32)
            valid = (rows < p.a)[:, None] & (red < p.r)[None, :]
            tile = pltriton.load(ref, mask=valid, other=other)
            return tile, valid, index

        def store(o_ref, pid, value):
            ref = o_ref.at[pl.ds(pid * c, c)]
            if unmasked:
                pltriton.store(ref, value)
                return
            rows = pid * c + jnp.arange(c, dtype=jnp.int32)
            pltriton.store(ref, value, mask=rows < p.a)

    return load, store, (0 if p.b > 1 else 1)


def _call(kernel, p: Plan, x2, out_dtype, interpret: bool):
    pl, pltriton = load_pallas()
    n_out = p.a * p.b
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((n_out,), out_dtype),
        grid=(p.programs,),
        interpret=interpret,
        compiler_params=pltriton.CompilerParams(
            num_warps=p.tiling.num_warps, num_stages=p.tiling.num_stages
        ),
    )(x2)


def _as_2d(x, p: Plan):
    return lax.reshape(x, (p.a * p.r, p.b) if p.b > 1 else (p.a, p.r))


def arg_reduce_kernel(x, p: Plan, largest: bool, last: bool, interpret: bool = False):
    """Runs the ARGMIN/ARGMAX kernel; returns int32 indices of shape ``(A * B,)``.

    Args:
        x: the input, any shape with ``A * R * B`` elements laid out as the plan says.
        p: the plan from ``plan(..., kind="arg")``.
        largest: ARGMAX (True) or ARGMIN (False).
        last: report the last extreme (DECREASING) instead of the first.
        interpret: run through Pallas's interpreter (any platform; for tests).
    """
    pl, pltriton = load_pallas()
    load, store, ax = _tile_loader(p, pl, pltriton)
    cdt = _compute_dtype(x.dtype)
    is_float = jnp.issubdtype(cdt, jnp.floating)
    ident = _identity(cdt, largest)
    width = p.tiling.cols
    n_tiles = -(-p.r // p.tiling.rows)
    none = np.int32(-1) if last else np.int32(np.iinfo(np.int32).max)
    pick = jnp.max if last else jnp.min  # which index among equal extremes
    better = (
        ((lambda new, old: new >= old) if largest else (lambda new, old: new <= old))
        if last
        else ((lambda new, old: new > old) if largest else (lambda new, old: new < old))
    )
    extreme = jnp.max if largest else jnp.min

    def kernel(x_ref, o_ref):
        pid = pl.program_id(0)

        def body(t, carry):
            best, best_i, nan_i = carry
            tile, valid, idx = load(x_ref, pid, t, jnp.asarray(ident, x_ref.dtype))
            tile = tile.astype(cdt)
            if is_float:
                nan = is_nan(tile)
                tile = jnp.where(nan, jnp.asarray(ident, cdt), tile)
                nan_i = (jnp.maximum if last else jnp.minimum)(
                    nan_i, pick(jnp.where(nan & valid, idx, none), axis=ax)
                )
            m = extreme(tile, axis=ax)
            hit = (tile == jnp.expand_dims(m, ax)) & valid
            i = pick(jnp.where(hit, idx, none), axis=ax)
            upd = better(m, best)
            return jnp.where(upd, m, best), jnp.where(upd, i, best_i), nan_i

        init = (
            jnp.full((width,), ident, cdt),
            jnp.zeros((width,), jnp.int32),
            jnp.full((width,), none, jnp.int32),
        )
        _best, best_i, nan_i = lax.fori_loop(0, n_tiles, body, init)
        if is_float:
            # NaN is the extreme: the first (or last) NaN wins over any number.
            best_i = jnp.where(nan_i != none, nan_i, best_i)
        store(o_ref, pid, best_i)

    return _call(kernel, p, _as_2d(x, p), jnp.int32, interpret)


def _int_keys(v, dtype, largest: bool):
    """int32 keys of a tile of ``dtype`` whose order is the search order (NaN the extreme).

    Floats: ``order_keys`` (signed zeros tie, every NaN the one key beyond the extreme) widened
    to int32. Integers widen to int32 (uint32 with its sign bit flipped, which keeps the
    unsigned order).
    """
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return order_keys(v, largest).astype(jnp.int32)
    if dt == np.uint32:
        return lax.bitcast_convert_type(v ^ np.uint32(0x80000000), jnp.int32)
    return v.astype(jnp.int32)


def lanes_kernel(
    x, p: Plan, largest: bool, last: bool = False, index: bool = True, interpret: bool = False
):
    """ARGMIN/ARGMAX (``index``) or MAX/MIN of integers (values) with per-element state.

    Every element of the tile keeps its own running extreme (an int32 key, see ``_int_keys``)
    and, for ARGMIN/ARGMAX, the index where it was found; a tile costs one compare and one or two
    selects per element, with no reduction across threads. One cross-lane reduction at the end
    gives the extreme and, among the lanes holding it, the first (or last) index. Later tiles
    replace a lane's state only when strictly better (or better or equal for the last
    extreme), so each lane holds its first (last) extreme. Returns int32 indices of shape
    ``(A * B,)``, or the extremes in ``x``'s dtype.
    """
    pl, pltriton = load_pallas()
    load, store, ax = _tile_loader(p, pl, pltriton)
    n_tiles = -(-p.r // p.tiling.rows)
    none = np.int32(-1) if last else np.int32(np.iinfo(np.int32).max)
    pick = jnp.max if last else jnp.min
    extreme = jnp.max if largest else jnp.min
    dt = np.dtype(x.dtype)
    fill = _identity(dt, largest) if dt.kind != "f" else (-np.inf if largest else np.inf)

    def better(new, old):
        if last:
            return new >= old if largest else new <= old
        return new > old if largest else new < old

    def kernel(x_ref, o_ref):
        pid = pl.program_id(0)
        tile, valid, idx = load(x_ref, pid, 0, jnp.asarray(fill, x_ref.dtype))
        key = _int_keys(tile, dt, largest)
        at = jnp.where(valid, idx, none)

        def body(t, carry):
            best, best_i = carry
            tile, valid, idx = load(x_ref, pid, t, jnp.asarray(fill, x_ref.dtype))
            k = _int_keys(tile, dt, largest)
            upd = better(k, best) & valid
            if index:
                return jnp.where(upd, k, best), jnp.where(upd, idx, best_i)
            return jnp.where(upd, k, best), best_i

        if n_tiles > 1:
            key, at = lax.fori_loop(1, n_tiles, body, (key, at))
        m = extreme(key, axis=ax)
        if not index:
            store(o_ref, pid, m.astype(o_ref.dtype))
            return
        hit = key == jnp.expand_dims(m, ax)
        store(o_ref, pid, pick(jnp.where(hit, at, none), axis=ax))

    out_dtype = jnp.int32 if index else x.dtype
    return _call(kernel, p, _as_2d(x, p), out_dtype, interpret)


def _packed_keys(v, dtype, nan_lowest: bool = False):
    """ARGMAX keys in ``[-2**15, 2**15)`` of a tile of a 1- or 2-byte ``dtype``: a larger key is
    a larger value, NaN the largest of all (or, with ``nan_lowest``, the lowest).

    float16: the magnitude with the value's sign (so -0.0 and +0.0 tie, as IEEE says), from
    sign-mask arithmetic on the bits; every NaN (``isnan``) becomes ``0x7C01``, one beyond the key
    of an infinity, or ``-0x7C02`` with ``nan_lowest``. Integers: the value, unsigned ones
    shifted into the signed range.
    """
    dt = np.dtype(dtype)
    if dt.kind == "f":
        k = lax.bitcast_convert_type(v, jnp.int16).astype(jnp.int32)
        sign = lax.shift_right_arithmetic(k, np.int32(31))  # 0 or -1
        t = (k ^ (sign & np.int32(0x7FFF))) - sign  # magnitude with the value's sign
        inf = np.int32(0x7C00)
        return jnp.where(jnp.isnan(v), -(inf + 2) if nan_lowest else inf + 1, t)
    k = v.astype(jnp.int32)
    if dt.kind == "u":
        return k - np.int32(1 << (8 * dt.itemsize - 1))
    return k


def packed_kernel(x, p: Plan, largest: bool, last: bool, interpret: bool = False):
    """ARGMIN/ARGMAX of 1- and 2-byte types with ``R <= 65536``: one int32 maximum per element.

    Each element becomes ``key << 16 | low`` (``_packed_keys``), where ``low`` is ``0xFFFF -
    index`` for the first extreme (INCREASING) or ``index`` for the last (DECREASING); the
    largest packed value then holds the extreme and the wanted index, so a tile costs a few
    integer operations and one maximum per element, and the result is ``low`` read back. Every
    element of the tile keeps its running maximum (a reduction per tile ran 0.25-0.85 of the
    copy) and the lanes are combined once at the end. Returns int32 indices of shape
    ``(A * B,)``.
    """
    if p.r > PACKED_MAX_R:
        raise ValueError(f"packed_kernel needs R <= {PACKED_MAX_R}, got {p.r}")
    pl, pltriton = load_pallas()
    load, store, ax = _tile_loader(p, pl, pltriton, unmasked=exact(p))
    n_tiles = -(-p.r // p.tiling.rows)
    dt = np.dtype(x.dtype)
    lowest = np.int32(np.iinfo(np.int32).min)
    mask16 = np.int32(0xFFFF)

    def packed(tile, valid, idx):
        low = idx if last else mask16 - idx
        if largest:
            v = lax.shift_left(_packed_keys(tile, dt), np.int32(16)) | low
        else:
            # ARGMIN complements the whole ARGMAX word: ~(k << 16 | (0xFFFF - low)) equals
            # (~k) << 16 | low, and the complement folds into the OR. NaN, the lowest ARGMAX
            # key here, becomes the best.
            k = _packed_keys(tile, dt, nan_lowest=True)
            v = ~(lax.shift_left(k, np.int32(16)) | (mask16 - low))
        return v if valid is None else jnp.where(valid, v, lowest)

    def kernel(x_ref, o_ref):
        pid = pl.program_id(0)
        fill = jnp.asarray(0, x_ref.dtype)
        state = packed(*load(x_ref, pid, 0, fill))

        def body(t, state):
            return jnp.maximum(state, packed(*load(x_ref, pid, t, fill)))

        if n_tiles > 1:
            state = lax.fori_loop(1, n_tiles, body, state)
        low = jnp.max(state, axis=ax) & mask16
        store(o_ref, pid, low if last else mask16 - low)

    return _call(kernel, p, _as_2d(x, p), jnp.int32, interpret)


def log_sum_exp_kernel(x, p: Plan, interpret: bool = False):
    """Runs the LOG_SUM_EXP kernel; returns ``(A * B,)`` values in the input's dtype.

    One pass with a running maximum ``m`` and a running sum ``s`` of ``exp(x - shift)``, where
    ``shift`` is ``m`` when finite and 0 otherwise (the lax lowering's rule, so all ``-inf``
    gives ``-inf`` and a ``+inf`` gives ``+inf``). When the maximum grows, ``s`` is rescaled by
    ``exp(old_shift - new_shift) <= 1``, so nothing overflows; a reduced extent that fits one
    tile takes the maximum first and needs no rescaling.

    ``exp(v)`` is ``2 ** (v * log2(e))`` through the ``ex2.approx.ftz.f32`` instruction: no
    denormal fix-up, harmless here since every term is <= 1 and the sum holds a term 1. At 1 GiB
    along the minor axis: float16 0.90-0.96 of the copy, float32 0.94-0.97 (libdevice expf:
    0.71 / 0.88; benchmarks/RESULTS.md#operators). Inline PTX does not run in the interpreter, which
    computes the same formula with ``exp2``.
    """
    pl, pltriton = load_pallas()
    load, store, ax = _tile_loader(p, pl, pltriton, unmasked=exact(p))
    width = p.tiling.cols
    n_tiles = -(-p.r // p.tiling.rows)
    neg_inf = np.float32(-np.inf)

    def exp(v):
        v = v * np.float32(np.log2(np.e))
        if interpret:
            return jnp.exp2(v)
        return ptx("ex2.approx.ftz.f32", v)

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

        if n_tiles == 1:
            # The whole reduced extent in one tile: max, then the shifted sum, no rescaling.
            tile, _, _ = load(x_ref, pid, 0, jnp.asarray(neg_inf, x_ref.dtype))
            tile = tile.astype(jnp.float32)
            m = jnp.max(tile, axis=ax)
            s = jnp.sum(exp(tile - jnp.expand_dims(shift_of(m), ax)), axis=ax)
        else:
            init = (jnp.full((width,), neg_inf), jnp.zeros((width,), jnp.float32))
            m, s = lax.fori_loop(0, n_tiles, body, init)
        store(o_ref, pid, (jnp.log(s) + shift_of(m)).astype(o_ref.dtype))

    return _call(kernel, p, _as_2d(x, p), x.dtype, interpret)
