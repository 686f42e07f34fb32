"""Single-pass Pallas (Triton) kernels for ARGMIN/ARGMAX and LOG_SUM_EXP on CUDA GPUs.

The tensor is viewed as ``(A, R, B)``: ``R`` is the product of the reduced axes (which must be
adjacent once size-1 axes are dropped), ``A`` the product of the axes before them and ``B`` of
those after. Two layouts:

- ``B > 1`` ("inner"): each program owns ``BB`` adjacent columns of one ``a`` and walks down the
  ``R`` rows in ``BR``-row tiles, so every load is a contiguous run of ``BB`` elements.
- ``B == 1`` ("minor"): each program owns ``BA`` rows of the ``(A, R)`` matrix and walks along
  them in ``BR``-element tiles.

Both keep a running state per output element, so the tensor is read exactly once. Kernels:
``arg_reduce_kernel`` (per tile: extreme, then index), ``lanes_kernel`` (per-element state,
1-byte types and integer MAX/MIN), ``packed_kernel`` (1- and 2-byte ARGMIN/ARGMAX of at most
65536 elements: one int32 maximum of ``key << 16 | index`` per element) and
``log_sum_exp_kernel``. The packed and LOG_SUM_EXP kernels load without masks when the tiles
divide the tensor exactly (``exact``); otherwise tiles hanging over the edge are masked. The
semantics are those of the lax lowering in ``dml_jax.ops.reduce``:
the first (INCREASING) or last (DECREASING) index of the extreme, NaN counting as the extreme;
LOG_SUM_EXP shifted by the running maximum (so inputs of 1000 do not overflow), float16 read and
accumulated in float32 and rounded once.

Dispatch: ``arg_reduce`` and ``log_sum_exp`` take the lax lowering as ``fallback``. When no CUDA
device exists they return ``fallback(x)`` itself, so CPU-only programs trace exactly the lax
code. Otherwise they use ``lax.platform_dependent``, so the kernel is lowered only for CUDA and
any other platform the same program is lowered for gets the fallback. Differentiation always
goes through the fallback, and ``vmap`` folds the batch into ``A``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

# Data types the kernels read. 64-bit types (and anything else) use the lax lowering.
ARG_DTYPES = frozenset(
    np.dtype(t)
    for t in ("float16", "float32", "int8", "int16", "int32", "uint8", "uint16", "uint32")
)
LSE_DTYPES = frozenset(np.dtype(t) for t in ("float16", "float32"))

# Fewer programs than this cannot keep every multiprocessor of a large GPU reading; such cases
# (a whole-tensor reduction, say) stay on lax, which splits the reduced axis across blocks.
MIN_PROGRAMS = 264
_INDEX_LIMIT = 2**31 - 2**16  # int32 element offsets inside the kernel, with room for a tile

# Read at trace time; benchmarks turn it off to time the lax lowering the kernels replace.
ENABLED = True
# Kernels that support it load tiles without masks when the tiles divide the tensor exactly.
UNMASKED = True
# The packed ARGMIN/ARGMAX kernel keeps the index in 16 bits.
PACKED_MAX_R = 1 << 16
# LOG_SUM_EXP whose reduced extent fits one tile skips the online rescaling (read at trace time).
SINGLE_TILE_LSE = True


@dataclass(frozen=True)
class Tiling:
    """Tile sizes (powers of two) and Triton launch parameters for one kernel launch."""

    rows: int  # BR: reduced-axis elements per tile
    cols: int  # BB (inner layout) or BA (minor layout): output elements per program
    num_warps: int = 4
    num_stages: int = 3


@dataclass(frozen=True)
class Plan:
    """How a reduction maps onto a kernel: the ``(A, R, B)`` view and its tiling."""

    a: int
    r: int
    b: int
    tiling: Tiling

    @property
    def programs(self) -> int:
        per_a = -(-self.b // self.tiling.cols) if self.b > 1 else 1
        return self.a * per_a if self.b > 1 else -(-self.a // self.tiling.cols)


# Tile sizes, chosen by benchmarks/gpu_kernels.py on an H200 (1 GiB, every axis; see
# benchmarks/RESULTS.md): elements per tile for 4-byte types (narrow types scale it up so a tile
# moves as many bytes) and warps, per layout. Wide inner tiles (1024 columns) of 4-byte types
# like 8192 elements and 8 warps for ARGMIN/ARGMAX; everything else 4096 and 4 warps.
TILE_ELEMENTS = {"arg": 4096, "lse": 4096}
WIDE_TILE_ELEMENTS = {"arg": 8192, "lse": 4096}
NUM_WARPS = {"arg": 4, "lse": 4}
WIDE_NUM_WARPS = {"arg": 8, "lse": 4}
NUM_STAGES = {"arg": 3, "lse": 3}
NARROW_LSE_WARPS = 2
LAX_ARG_MIN_B = 256
_MAX_COLS = 1024

# 1-byte ARGMIN/ARGMAX and the 1-byte integer MAX/MIN kernel run the "lanes" kernel
# (``lanes_kernel``): per-element running state, one cross-lane reduction at the end. Per
# (kind, itemsize, inner layout): (tile elements, inner-layout columns, warps, stages), chosen on
# an H200 at 1 GiB (benchmarks/results/variants_narrow.log, variants_extra.log): int8 ARGMAX
# 0.86 / 0.77 of the copy (inner / minor; the per-tile kernel 0.40 / 0.57), int8 MAX 0.99-1.02
# (lax 0.67-0.79).
LANES_TILING = {
    ("arg", 1, True): (4096, 1024, 8, 2),
    ("arg", 1, False): (4096, 512, 2, 3),
    ("arg", 2, True): (4096, 512, 4, 3),
    ("arg", 2, False): (4096, 512, 4, 3),
    ("ext", 1, True): (2048, 512, 4, 4),
    ("ext", 1, False): (2048, 512, 4, 4),
}
# Which ARGMIN/ARGMAX kernel runs per itemsize: "packed" (``packed_kernel``), "lanes" or
# "tile" (``arg_reduce_kernel``). Reductions longer than PACKED_MAX_R cannot run "packed" and
# use ARG_KERNEL_LONG (float16: the per-tile kernel, 0.82-0.86 vs 0.55-0.61 for lanes).
ARG_KERNEL = {1: "packed", 2: "packed", 4: "tile"}
ARG_KERNEL_LONG = {1: "lanes", 2: "tile", 4: "tile"}
# Packed kernel, per (itemsize, layout): (tile elements, inner-layout columns, warps, stages),
# and whether every element keeps its own running maximum (PACKED_LANES; a reduction per tile
# instead ran 0.25-0.85). Layouts: "minor" (B == 1), "narrow" (1 < B < 1024), "inner" (B >=
# 1024). Chosen on an H200 at 1 GiB (benchmarks/results/round4/): int8 0.94-0.97 and float16
# 0.89-0.98 of the copy on every axis.
PACKED_TILING = {
    (1, "inner"): (2048, 512, 4, 4),
    (1, "narrow"): (2048, 512, 4, 4),
    (1, "minor"): (4096, 512, 4, 3),
    (2, "inner"): (2048, 512, 2, 4),
    (2, "narrow"): (4096, 512, 8, 4),
    (2, "minor"): (8192, 512, 2, 3),
}
PACKED_LANES = {1: True, 2: True}
# How the packed kernel forms float16 keys, per layout: "where" (selects), "xor" (sign-mask
# arithmetic, NaN from the key's magnitude) or "xornan" (as "xor", NaN from a float compare).
PACKED_F16_KEY = {"inner": "xornan", "narrow": "xornan", "minor": "xornan"}
# Integer ARGMIN in the packed kernel: "key" (complemented keys) or "word" (complemented word).
INT_ARGMIN = "word"
# float16 ARGMIN in the packed kernel: "key" (negated keys) or "word" (as INT_ARGMIN).
F16_ARGMIN = "word"
# How the LOG_SUM_EXP kernel exponentiates: "exp" (libdevice expf), "exp2" (libdevice exp2f of
# x * log2(e)), "ex2" (the ex2.approx.f32 instruction) or "ex2ftz" (ex2.approx.ftz.f32, without
# the denormal fix-up; harmless here since every term is <= 1 and the sum holds a term 1). The
# last two are CUDA only ("exp2" when interpreted). At 1 GiB along the minor axis: float16 ex2
# 0.84-0.87 of the copy, exp2 0.84, exp 0.71; float32 ex2 0.94, exp 0.88 (variants_narrow.log,
# variants_extra.log); ex2ftz float16 0.90-0.96, float32 0.94-0.97 (round4/).
LSE_EXP = {2: "ex2ftz", 4: "ex2ftz"}
# float16 LOG_SUM_EXP warps per layout: with ex2ftz, inner 2 warps 0.98 (4: 0.91), minor 4
# warps 0.90-0.96 (2: 0.90), narrow 1 warp 0.96-0.98 (2: 0.80-0.87; round4/).
F16_LSE_WARPS = {"inner": 2, "narrow": 1, "minor": 4}
# float16 LOG_SUM_EXP elements per tile, per layout (narrow 256 columns: 1 warp 0.97-0.98,
# 2 warps 0.80-0.87; minor: 16384 elements 0.93-0.97 for 2-8 warps; round4/narrow_more_*.log).
F16_LSE_ELEMENTS = {"inner": 8192, "narrow": 8192, "minor": 16384}
# Data types of the integer MAX/MIN kernel (inner layout only: lax reaches the copy elsewhere).
EXT_DTYPES = frozenset(np.dtype(t) for t in ("int8", "uint8"))


def _pow2_at_most(n: int, cap: int) -> int:
    return min(1 << max(0, (n - 1).bit_length()), cap)


def layout(b: int) -> str:
    """The layout class of a plan with ``B = b``: "minor", "narrow" or "inner"."""
    return "minor" if b == 1 else ("narrow" if b < _MAX_COLS else "inner")


def _lanes_tiling(kind: str, a: int, r: int, b: int, itemsize: int, table=None) -> Tiling:
    if table is None:
        elems, max_cols, warps, stages = LANES_TILING[(kind, min(itemsize, 2), b > 1)]
    else:
        elems, max_cols, warps, stages = table[(itemsize, layout(b))]
    if b > 1:
        cols = _pow2_at_most(b, max_cols)
        rows = _pow2_at_most(r, max(1, elems // cols))
    else:
        rows = _pow2_at_most(r, min(1024, elems))
        cols = max(1, elems // rows)
        while cols > 1 and -(-a // cols) < 4 * MIN_PROGRAMS:
            cols //= 2
    return Tiling(rows, cols, warps, stages)


def arg_kernel(dtype, r: int) -> str:
    """Which ARGMIN/ARGMAX kernel reduces ``r`` elements of ``dtype``: "packed", "lanes" or
    "tile"."""
    item = np.dtype(dtype).itemsize
    name = ARG_KERNEL.get(item, "tile")
    if name == "packed" and (item > 2 or r > PACKED_MAX_R):
        name = ARG_KERNEL_LONG.get(item, "tile")
    return name


def _elements(kind: str, itemsize: int, b: int) -> int:
    """Elements per tile of the per-tile kernels (TILE_ELEMENTS counts 4-byte elements)."""
    if kind == "lse" and itemsize == 2:
        return F16_LSE_ELEMENTS[layout(b)]
    return TILE_ELEMENTS[kind] * max(1, 4 // itemsize)


def _tiling(kind: str, a: int, r: int, b: int, itemsize: int, dtype=None) -> Tiling:
    name = "lanes" if kind == "ext" else None
    if kind == "arg" and dtype is not None:
        name = arg_kernel(dtype, r)
    if name == "lanes":
        return _lanes_tiling(kind, a, r, b, itemsize)
    if name == "packed":
        return _lanes_tiling(kind, a, r, b, itemsize, PACKED_TILING)
    warps = F16_LSE_WARPS[layout(b)] if kind == "lse" and itemsize == 2 else NUM_WARPS[kind]
    if b > 1:
        cols = _pow2_at_most(b, _MAX_COLS)
        if cols == _MAX_COLS and itemsize == 4:
            elems, warps = WIDE_TILE_ELEMENTS[kind], WIDE_NUM_WARPS[kind]
        else:
            elems = _elements(kind, itemsize, b)
            if kind == "lse" and cols < _MAX_COLS and itemsize == 4:
                # 4-byte LOG_SUM_EXP tiles narrower than 1024 columns: at 256 columns 2 warps
                # ran 1.02 of the copy, 4 warps 0.93 (benchmarks/results/variants.log).
                warps = NARROW_LSE_WARPS
        rows = _pow2_at_most(r, max(1, elems // cols))
    else:
        elems = _elements(kind, itemsize, b)
        rows = _pow2_at_most(r, min(1024, elems))
        cols = max(1, elems // rows)
        # Keep enough programs for the whole GPU when A is modest.
        while cols > 1 and -(-a // cols) < 4 * MIN_PROGRAMS:
            cols //= 2
    return Tiling(rows, cols, warps, NUM_STAGES[kind])


def plan(shape: tuple[int, ...], axes: tuple[int, ...], dtype, kind: str) -> Plan | None:
    """The kernel plan for reducing ``shape`` over ``axes``, or None when lax must do it.

    Args:
        shape: the input's shape.
        axes: the reduced axes (any order).
        dtype: the input's dtype.
        kind: ``"arg"`` (ARGMIN/ARGMAX), ``"lse"`` (LOG_SUM_EXP) or ``"ext"`` (integer
            MAX/MIN).
    """
    dtypes = {"arg": ARG_DTYPES, "lse": LSE_DTYPES, "ext": EXT_DTYPES}[kind]
    if np.dtype(dtype) not in dtypes:
        return None
    # Size-1 axes do not move the row-major linear index, so they are dropped before asking
    # whether the reduced axes are adjacent.
    live = [i for i in range(len(shape)) if shape[i] != 1]
    red = [i for i in live if i in axes]
    if not red:
        return None
    pos = [live.index(i) for i in red]
    if pos != list(range(pos[0], pos[0] + len(pos))):
        return None
    a = math.prod(shape[i] for i in live[: pos[0]])
    r = math.prod(shape[i] for i in red)
    b = math.prod(shape[i] for i in live[pos[-1] + 1 :])
    if a * r * b >= _INDEX_LIMIT:
        return None
    if kind == "ext" and b == 1:
        # Along the minor axis XLA's own MAX/MIN of 1-byte integers ran 1.01 of the copy.
        return None
    if kind == "arg" and np.dtype(dtype).itemsize == 4 and LAX_ARG_MIN_B <= b < _MAX_COLS:
        # 4-byte inner layouts of 256-1023 columns (1 GiB float32 along axis 2 has B = 256):
        # lax's argmax ran 0.93-0.94 of the copy there (NaN-correct order keys), the kernel
        # 0.89-0.90 (benchmarks/results/variants.log). Narrower B was not measured.
        return None
    p = Plan(a, r, b, _tiling(kind, a, r, b, np.dtype(dtype).itemsize, dtype))
    return p if p.programs >= MIN_PROGRAMS else None


def _cuda_present() -> bool:
    try:
        return bool(jax.devices("cuda"))
    except RuntimeError:
        return False


@functools.lru_cache(maxsize=1)
def cuda_present() -> bool:
    """Whether this process has a CUDA backend (checked once)."""
    return _cuda_present()


# ---------------------------------------------------------------------------------------------
# Kernels


def load_pallas():
    # Imported lazily: CPU-only users never load Pallas.
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as pltriton

    return pl, pltriton


def _identity(dtype, largest: bool):
    """The value that never wins: -inf/+inf for floats, the type's min/max for integers."""
    if jnp.issubdtype(dtype, jnp.floating):
        return -np.inf if largest else np.inf
    info = np.iinfo(dtype)
    return info.min if largest else info.max


def _compute_dtype(dtype):
    # float16 compares exactly in float32; Triton reduces 32-bit values most efficiently.
    return jnp.float32 if dtype == jnp.float16 else dtype


def exact(p: Plan) -> bool:
    """Whether the tiles of ``p`` cover the tensor exactly (no tile hangs over an edge)."""
    br, c = p.tiling.rows, p.tiling.cols
    return p.r % br == 0 and (p.b % c == 0 if p.b > 1 else p.a % c == 0)


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
                nan = _is_nan(tile)
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


def _is_nan(v):
    # From the bits (exponent all ones, mantissa not zero) rather than v != v, which a
    # compiler allowed to assume no NaNs may fold to False.
    bits = lax.bitcast_convert_type(v, jnp.int32) & np.int32(0x7FFFFFFF)
    return bits > np.int32(0x7F800000)


def _int_keys(v, dtype, largest: bool):
    """int32 keys of a tile of ``dtype`` whose order is the search order (NaN the extreme).

    Floats: the sign-magnitude bits become two's complement (bits below the sign flipped for
    negative values), -0.0 maps onto +0.0 and every NaN onto the key beyond +inf (ARGMAX) or
    below -inf (ARGMIN), as ``order_keys`` in ``dml_jax.ops.reduce`` does. Integers widen to
    int32 (uint32 with its sign bit flipped, which keeps the unsigned order).
    """
    dt = np.dtype(dtype)
    if dt.kind == "f":
        nbits = 8 * dt.itemsize
        ibits = {16: jnp.int16, 32: jnp.int32}[nbits]
        k = lax.bitcast_convert_type(v, ibits).astype(jnp.int32)  # sign-extended
        low = (1 << (nbits - 1)) - 1
        mag = k & np.int32(low)
        key = k ^ (lax.shift_right_arithmetic(k, np.int32(31)) & np.int32(low))
        key = jnp.where(mag == 0, np.int32(0), key)
        inf_bits = int(np.array(np.inf, dt).view(f"u{dt.itemsize}"))
        if nbits == 16:
            nan_key = np.int32(low + 1) if largest else np.int32(-low - 2)
        else:
            nan_key = np.int32(np.iinfo(np.int32).max if largest else np.iinfo(np.int32).min)
        return jnp.where(mag > np.int32(inf_bits), nan_key, key)
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
    x, p: Plan, largest: bool, last: bool, lanes: bool = True, interpret: bool = False
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
    if p.r > PACKED_MAX_R:
        raise ValueError(f"packed_kernel needs R <= {PACKED_MAX_R}, got {p.r}")
    pl, pltriton = load_pallas()
    unmasked = UNMASKED and exact(p)
    load, store, ax = _tile_loader(p, pl, pltriton, unmasked=unmasked)
    n_tiles = -(-p.r // p.tiling.rows)
    dt = np.dtype(x.dtype)
    lowest = np.int32(np.iinfo(np.int32).min)
    mask16 = np.int32(0xFFFF)
    form = PACKED_F16_KEY[layout(p.b)]

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

    return _call(kernel, p, _as_2d(x, p), jnp.int32, interpret)


def log_sum_exp_kernel(x, p: Plan, interpret: bool = False):
    """Runs the LOG_SUM_EXP kernel; returns ``(A * B,)`` values in the input's dtype.

    One pass with a running maximum ``m`` and a running sum ``s`` of ``exp(x - shift)``, where
    ``shift`` is ``m`` when finite and 0 otherwise (the lax lowering's rule, so all ``-inf``
    gives ``-inf`` and a ``+inf`` gives ``+inf``). When the maximum grows, ``s`` is rescaled by
    ``exp(old_shift - new_shift) <= 1``, so nothing overflows.
    """
    pl, pltriton = load_pallas()
    load, store, ax = _tile_loader(p, pl, pltriton, unmasked=UNMASKED and exact(p))
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

    return _call(kernel, p, _as_2d(x, p), x.dtype, interpret)


# ---------------------------------------------------------------------------------------------
# Dispatch


def _batched(fn: Callable, fallback: Callable, axes: tuple[int, ...]):
    """``fn(x, axes, fallback)`` with a vmap rule that folds the batch axis into ``A``."""

    @jax.custom_batching.custom_vmap
    def call(x):
        return fn(x, axes, fallback)

    @call.def_vmap
    def _rule(axis_size, in_batched, x):
        del axis_size, in_batched  # custom_vmap puts the batch axis first
        shifted = tuple(i + 1 for i in axes)
        return _batched(fn, jax.vmap(fallback), shifted)(x), True

    return call


def _arg_cuda(x, axes, fallback, largest, last, out_dtype):
    p = plan(x.shape, axes, x.dtype, "arg")
    if p is None:
        return fallback(x)
    name = arg_kernel(x.dtype, p.r)
    if name == "packed":
        lanes = PACKED_LANES.get(x.dtype.itemsize, True)
        k = packed_kernel(x, p, largest, last, lanes=lanes)
    elif name == "lanes":
        k = lanes_kernel(x, p, largest, last)
    else:
        k = arg_reduce_kernel(x, p, largest, last)
    shape = tuple(1 if i in axes else s for i, s in enumerate(x.shape))
    return lax.reshape(k.astype(out_dtype), shape)


def arg_reduce(x, axes: tuple[int, ...], largest: bool, last: bool, out_dtype, fallback: Callable):
    """ARGMIN/ARGMAX: the kernel when lowered for CUDA and covered, else ``fallback(x)``.

    Args:
        x: the input array.
        axes: reduced axes, sorted.
        largest: ARGMAX (True) or ARGMIN (False).
        last: DECREASING (last extreme) instead of INCREASING (first).
        out_dtype: the index dtype of the result.
        fallback: the lax lowering, ``fallback(x)`` -> indices in keepdims shape.
    """
    if not (ENABLED and cuda_present()) or plan(x.shape, axes, x.dtype, "arg") is None:
        return fallback(x)
    fn = functools.partial(_arg_cuda, largest=largest, last=last, out_dtype=out_dtype)
    # Indices have no derivative: stop_gradient keeps autodiff away from the kernel.
    gpu = _batched(fn, fallback, axes)
    return lax.platform_dependent(lax.stop_gradient(x), cuda=gpu, default=lambda y: fallback(y))


def _lse_cuda(x, axes, fallback):
    p = plan(x.shape, axes, x.dtype, "lse")
    if p is None:
        return fallback(x)
    y = log_sum_exp_kernel(x, p)
    return lax.reshape(y, tuple(1 if i in axes else s for i, s in enumerate(x.shape)))


def log_sum_exp(x, axes: tuple[int, ...], fallback: Callable):
    """LOG_SUM_EXP: the kernel when lowered for CUDA and covered, else ``fallback(x)``.

    Args:
        x: the input array (float16 or float32 for the kernel).
        axes: reduced axes, sorted.
        fallback: the lax lowering, ``fallback(x)`` -> result in keepdims shape, x's dtype.
    """
    if not (ENABLED and cuda_present()) or plan(x.shape, axes, x.dtype, "lse") is None:
        return fallback(x)
    gpu = _batched(_lse_cuda, fallback, axes)

    # Derivatives come from the lax lowering (softmax), whichever branch computes the value.
    @jax.custom_jvp
    def lse(y):
        return lax.platform_dependent(y, cuda=gpu, default=fallback)

    @lse.defjvp
    def _lse_jvp(primals, tangents):
        return jax.jvp(fallback, primals, tangents)

    return lse(x)


def _ext_cuda(x, axes, fallback, largest):
    p = plan(x.shape, axes, x.dtype, "ext")
    if p is None:
        return fallback(x)
    y = lanes_kernel(x, p, largest, index=False)
    return lax.reshape(y, tuple(1 if i in axes else s for i, s in enumerate(x.shape)))


def reduce_extreme(x, axes: tuple[int, ...], largest: bool, fallback: Callable):
    """MAX/MIN of 1-byte integers: the kernel when lowered for CUDA and covered, else lax.

    Args:
        x: the input array.
        axes: reduced axes, sorted.
        largest: MAX (True) or MIN (False).
        fallback: the lax lowering, ``fallback(x)`` -> result in keepdims shape, x's dtype.
    """
    if not (ENABLED and cuda_present()) or plan(x.shape, axes, x.dtype, "ext") is None:
        return fallback(x)
    gpu = _batched(functools.partial(_ext_cuda, largest=largest), fallback, axes)
    # Integer values: no derivative to keep (REDUCE on integers is not differentiable).
    return lax.platform_dependent(x, cuda=gpu, default=fallback)
