"""A TOP_K / TOP_K1 kernel (Pallas, Triton) for a small K along the minor axis.

XLA's GPU ``top_k`` sorts (0.03 of the copy for the top 8 of rows of 1024 on an H200, the
issue's anchor; PyTorch 0.03 too). Here a program owns ``cols`` whole rows: it loads them once,
turns every element into the 32-bit search key of ``ops.topk`` and takes K maxima in registers:
each the extreme key and the lowest column holding it (the operator's tie rule), then masked out.
A 16-bit key and its column fit one int32 (key above, complemented column below), so for float16
each of the K selections is a single maximum (``PACK_32``: 32-bit keys likewise in an int64). The
kernel writes the indices; the values are gathered from the input at them, as the lax lowering
does, so every value keeps its bits (-0.0, NaN payloads). Results equal the lax lowering's
exactly.

Grouped selection (packed keys, K > 1): the row is cut into groups of G adjacent columns and
the K groups with the largest maxima are selected first (K selections over width / G group
maxima, each maximum a key packed with its group's number); the top K of the row lie in those
groups, which are read again (from cache) as K x G candidates, and the K selections run over
those alone. Packed places are all distinct, so the argument is exact: an element of any other
group is below K distinct group maxima, so it is not among the K largest. A row of 1024 with
K = 8 and G = 4 costs 256 + 32 places a selection instead of 1024.

float16 groups (``PAIRS_16``): the row is read again as 32-bit words of two elements, and each
group's extreme comes from the words (``max.NaN.f16x2`` / ``min.NaN.f16x2``, then the extreme
of a word's two halves), so only the group extremes are turned into keys. NaN propagates through
those instructions, so a group holding one reports NaN, whose key is the extreme, and signed
zeros share one key either way: each group's key is the largest of its elements' keys, as
before. In interpret mode jnp's maximum and minimum (which propagate NaN too) stand in for the
instructions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..fastpath import register_fast_path
from ..ops.reduce import order_keys
from .pallas_helpers import load_pallas, ptx
from .reduce_plan import pow2_at_least

DTYPES = frozenset(np.dtype(t) for t in ("float16", "float32", "int32"))
MIN_PROGRAMS = 264
MAX_K = 16  # each selection is a pass over the tile in registers; lax's sort for larger K
MAX_ROW = 4096  # longest row (after padding to a power of two) held in registers
TILE_ELEMENTS = 1024  # one warp per row of 1024 ran best for every K and dtype in that sweep
WARPS = 1
# Selection forms, from benchmarks/RESULTS.md#operators (H200, rows of 1024, ratio
# to the copy): float16 keys packed in an int32 ran K=8 at 0.26 against 0.07-0.08 with two
# reductions (K=1 0.60 against 0.52); float32 keys packed in an int64 ran K=8 at 0.21 against 0.17
# at best, but K=1 at 0.93 against 0.98, so a single selection keeps the two int32 reductions.
PACK_16 = True
PACK_32 = True  # for K > 1
# Grouped selection (K > 1, packed keys), from benchmarks/RESULTS.md#operators (H200, rows of
# 1024, K=8, ratio to the copy):
# - two rows a warp ran 0.395 float32 / 0.404 float16 against one row a warp's 0.32 / 0.35 (the
#   selections of two rows overlap; four 0.37 / 0.42), so for K > 1 a warp takes at least
#   MIN_ROWS rows of up to TILE_ELEMENTS (shorter rows come TILE_ELEMENTS / width a program
#   already; twice that doubles the registers, 96 -> 249 for rows of 128 at K=16);
# - groups of 4 (float32) or 8 (float16) beat wider and narrower ones. GROUP: None picks the
#   power of two at most sqrt(width / K), half that for 32-bit keys (chosen when they were
#   int64 places at twice the cost; the int32 pairs below were measured at it); 0 selects over
#   the whole row;
# - ordering the groups by their keys, packed once a group, instead of packing every place first:
#   float32 0.378 -> 0.43, float16 unchanged (0.38); a rank form of the last round (each
#   candidate's place from all pairwise comparisons) lost everywhere (sweep_forms.log).
MIN_ROWS = 2
# 32-bit keys in the grouped selection are int32 pairs, not packed int64 places: each selection the
# largest key, then the lowest group number or column holding it, two int32 warp reductions (single
# REDUX instructions on sm_90) instead of one int64 reduction (five shuffle levels): 2408 -> 2072
# sm_90 instructions, 226 -> 68 shuffles for float32 K=8 (benchmarks/kernel_sass.py (git history)).
# H200 (benchmarks/RESULTS.md#operators): float32 K=8 0.428 -> 0.521 of the copy with two rows a
# warp (four: 0.385 -> 0.435), K=16 0.219 -> 0.257; the int64 form was then removed (commit 25911a7
# has it).
GROUP: int | None = None
# float16 group extremes from 32-bit words (PAIRS_16, the module docstring): off, every
# element's order key and a maximum over the keys.
PAIRS_16 = True
# H100 (benchmarks/RESULTS.md#operators, rows of 1024, ratio to the copy): K=8 0.52
# with every element's key -> 0.736 from words at G = 8 (0.734 at 16, 0.71 at 4); K=16 0.357 ->
# 0.432 at G = 16 (0.426 at 4, but 0.258 at 8). The words' groups are PAIR_GROUP wide, narrower
# only where a row would hold fewer than K groups.
PAIR_GROUP = 16


@dataclass(frozen=True)
class View:
    a: int  # rows
    r: int  # row length
    width: int  # row length padded to a power of two
    cols: int  # rows per program
    warps: int

    @property
    def programs(self) -> int:
        return -(-self.a // self.cols)


def plan(shape: tuple[int, ...], axis: int, k: int, dtype, min_programs: int = MIN_PROGRAMS):
    """The kernel's view of a TOP_K over ``shape``'s ``axis``, or None where lax stays."""
    if np.dtype(dtype) not in DTYPES or axis != len(shape) - 1 or not 1 <= k <= MAX_K:
        return None
    r = shape[-1]
    width = pow2_at_least(r)
    if width > MAX_ROW or k > r:
        return None
    a = int(np.prod(shape[:-1], dtype=np.int64))
    if a * r >= 2**31:
        return None
    # WARPS per tile: a row longer than a tile gets more warps, not more registers per thread.
    cols = max(1, TILE_ELEMENTS // width)
    if k > 1 and width <= TILE_ELEMENTS:
        cols = max(cols, MIN_ROWS)
    v = View(a, r, width, cols, WARPS * max(1, width // TILE_ELEMENTS))
    return v if v.programs >= min_programs else None


def group_width(v: View, k: int, itemsize: int, pairs: bool = False) -> int:
    """G of the grouped selection for a row of ``v``, ``k`` selections and keys of ``itemsize``
    bytes (``pairs``: float16 group extremes from words); 0 where it does not apply (a single
    selection, or fewer than ``k`` groups of 2)."""
    if k < 2:
        return 0
    if GROUP is not None:
        g = GROUP
    elif pairs:
        g = PAIR_GROUP
        while g > 2 and v.width // g < k:
            g //= 2
    else:
        g = 1 << int(np.floor(np.log2(max(1.0, np.sqrt(v.width / k)))))
        g = g // 2 if itemsize == 4 else g
    return g if g >= 2 and v.width // g >= k and v.width % g == 0 else 0


def _pair_select(keys, free, names, none):
    """Per row, the largest key among the ``free`` places, then the least of ``names`` holding it
    (the tie rule): two 32-bit reductions. Taken places hold the least key and are not free, as
    a real key may equal the least."""
    best = jnp.max(keys, axis=1, keepdims=True)
    hit = free & (keys == best)
    return jnp.min(jnp.where(hit, names, none), axis=1, keepdims=True)


def _keys32(x, largest: bool):
    """The 32-bit search keys of ``ops.topk``: order keys, complemented for the smallest."""
    keys = order_keys(x, largest).astype(jnp.int32)  # float16 keys widen exactly
    return keys if largest else ~keys


def _word_extreme(a, b, largest: bool, interpret: bool):
    """Element by element, the extreme of two float16 pairs held in int32 words (NaN wins)."""
    if interpret:  # jnp's maximum and minimum propagate NaN as the instructions do
        fa, fb = (jax.lax.bitcast_convert_type(w, jnp.float16) for w in (a, b))
        m = jnp.maximum(fa, fb) if largest else jnp.minimum(fa, fb)
        return jax.lax.bitcast_convert_type(m, jnp.int32)
    return ptx(f"{'max' if largest else 'min'}.NaN.f16x2", a, b)


def _halves_extreme(w, largest: bool, interpret: bool):
    """The extreme of the two float16 halves of each int32 word, as float16 (NaN wins)."""
    if interpret:
        f = jax.lax.bitcast_convert_type(w, jnp.float16)  # (..., 2)
        return jnp.max(f, axis=-1) if largest else jnp.min(f, axis=-1)
    _, pltriton = load_pallas()
    op = "max" if largest else "min"
    [out] = pltriton.elementwise_inline_asm(
        f"{{ .reg .b16 lo, hi; mov.b32 {{lo, hi}}, $1; {op}.NaN.f16 $0, lo, hi; }}",
        args=[w],
        constraints="=h,r",
        pack=1,
        result_shape_dtypes=[jax.ShapeDtypeStruct(w.shape, jnp.float16)],
    )
    return out


def top_k_indices(x, v: View, k: int, largest: bool, interpret: bool = False):
    """The indices (int32, shape ``(..., k)``) of the ``k`` extremes of each row of ``x``."""
    pl, pltriton = load_pallas()
    lowest = np.iinfo(np.int32).min
    wide = x.dtype.itemsize == 4
    packed = (PACK_32 and k > 1) if wide else PACK_16

    # float16 group extremes from words (PAIRS_16): rows of whole words, groups of whole words
    pairs = PAIRS_16 and packed and x.dtype == jnp.float16 and v.r % 2 == 0
    g = group_width(v, k, x.dtype.itemsize, pairs) if packed else 0
    pairs = pairs and g > 0 and g % 2 == 0

    def kernel(x_ref, *refs):
        *w_ref, o_ref = refs
        pid = pl.program_id(0)
        rows = pl.ds(pid * v.cols, v.cols)
        row = pid * v.cols + jnp.arange(v.cols, dtype=jnp.int32)[:, None]
        col = jnp.arange(v.width, dtype=jnp.int32)[None, :]
        valid = (row < v.a) & (col < v.r)

        def tile():  # the program's rows, read where a form needs every element's key
            return pltriton.load(x_ref.at[rows, pl.ds(0, v.width)], mask=valid, other=0)

        if packed:
            # Key and column packed in one integer (the lower column the larger), so each
            # selection is one reduction; a taken place drops to the type's least value, below
            # every packed key (the least, the least key at column ``2**bits - 1``, is past
            # MAX_ROW). 16-bit keys pack into int32; 32-bit keys into int64 (64-bit types are
            # enabled for the kernel's own arithmetic alone).
            with jax.enable_x64(wide):
                ptype = jnp.int64 if wide else jnp.int32
                bits = 32 if wide else 16
                low, last, scale = np.iinfo(ptype).min, (1 << bits) - 1, 1 << bits

                def column(best):
                    return (last - (best & last)).astype(jnp.int32)

                def join(keys, columns):
                    return keys.astype(ptype) * scale + (last - columns.astype(ptype))

                def pack(values, columns, ok):
                    return jnp.where(ok, join(_keys32(values, largest), columns), low)

                def select(p):  # the K largest places, stored in order
                    for i in range(k):
                        best = jnp.max(p, axis=1, keepdims=True)
                        pltriton.store(o_ref.at[rows, pl.ds(i, 1)], column(best), mask=row < v.a)
                        p = jnp.where(p == best, low, p)

                if not g:
                    select(pack(tile(), col, valid))
                    return
                n = v.width // g
                number = jnp.arange(n, dtype=jnp.int32)[None, :]
                # Each group's largest key (padding at the type's least key, which only the
                # row's last groups hold) packed with the group's number, the lower number the
                # larger: the order of the groups' best places, as equal keys rank by column
                # and the groups are runs of columns. Only the maxima pack.
                least = np.iinfo(np.int32).min if wide else -(1 << 15)
                # K chosen groups in a power of two of slots (Triton's arrays are powers of
                # two); the slots past K are never held, so their candidates are never valid
                kp = pow2_at_least(k)
                slot = jnp.arange(kp, dtype=jnp.int32)[None, :]
                chosen = jnp.zeros((v.cols, kp), jnp.int32)
                held = jnp.zeros((v.cols, kp), jnp.bool_)
                if wide:
                    keys = jnp.where(valid, _keys32(tile(), largest), least)
                    gkey = jnp.max(keys.reshape(v.cols, n, g), axis=2)
                    free = jnp.ones((v.cols, n), jnp.bool_)
                    for i in range(k):
                        num = _pair_select(gkey, free, number, n)
                        chosen = jnp.where(slot == i, num, chosen)
                        held = jnp.where(slot == i, num * g < v.r, held)
                        free = free & (number != num)
                        gkey = jnp.where(free, gkey, least)
                elif pairs:
                    # Word j of group q holds columns 2 (q g / 2 + j) and the next; a row's
                    # padding words hold the extreme that never wins (-inf pairs for the
                    # largest), which ties only real groups of higher numbers.
                    fill = np.uint32(0xFC00FC00 if largest else 0x7C007C00).view(np.int32)
                    half = g // 2
                    grow = jnp.broadcast_to(jnp.minimum(row, v.a - 1), (v.cols, n))
                    best = None
                    for j in range(half):
                        wcol = jnp.broadcast_to(number * half + j, (v.cols, n))
                        ok = (row < v.a) & (wcol * 2 < v.r)
                        w = pltriton.load(w_ref[0].at[grow, wcol], mask=ok, other=fill)
                        best = w if best is None else _word_extreme(best, w, largest, interpret)
                    extreme = _halves_extreme(best, largest, interpret)
                    gmax = join(_keys32(extreme, largest), number)
                else:
                    keys = jnp.where(valid, _keys32(tile(), largest), least)
                    gmax = join(jnp.max(keys.reshape(v.cols, n, g), axis=2), number)
                if not wide:
                    for i in range(k):
                        best = jnp.max(gmax, axis=1, keepdims=True)
                        chosen = jnp.where(slot == i, column(best), chosen)
                        held = jnp.where(slot == i, column(best) * g < v.r, held)
                        gmax = jnp.where(gmax == best, low, gmax)
                within = jnp.arange(g, dtype=jnp.int32)[None, None, :]
                ccol = (chosen[:, :, None] * g + within).reshape(v.cols, kp * g)
                held = jnp.broadcast_to(held[:, :, None], (v.cols, kp, g)).reshape(v.cols, kp * g)
                crow = jnp.broadcast_to(jnp.minimum(row, v.a - 1), (v.cols, kp * g))
                cvalid = (row < v.a) & (ccol < v.r) & held
                cand = pltriton.load(x_ref.at[crow, ccol], mask=cvalid, other=0)
                if wide:
                    ck = jnp.where(cvalid, _keys32(cand, largest), least)
                    free = cvalid
                    for i in range(k):
                        index = _pair_select(ck, free, ccol, v.width)
                        pltriton.store(o_ref.at[rows, pl.ds(i, 1)], index, mask=row < v.a)
                        free = free & (ccol != index)
                        ck = jnp.where(free, ck, least)
                    return
                select(pack(cand, ccol, cvalid))
            return
        keys = jnp.where(valid, _keys32(tile(), largest), lowest)
        for i in range(k):
            # The extreme key among the places not yet taken, then the lowest column holding
            # it (the tie rule). ``valid`` marks what is left: a real key may equal ``lowest``.
            index = _pair_select(keys, valid, col, v.width)
            pltriton.store(o_ref.at[rows, pl.ds(i, 1)], index, mask=row < v.a)
            valid = valid & (col != index)
            keys = jnp.where(valid, keys, lowest)

    x2 = jax.lax.reshape(x, (v.a, v.r))
    inputs = [x2]
    if pairs:  # the same bytes as words of two elements
        words = jax.lax.reshape(x2, (v.a, v.r // 2, 2))
        inputs.append(jax.lax.bitcast_convert_type(words, jnp.int32))
    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((v.a, k), jnp.int32),
        grid=(v.programs,),
        interpret=interpret,
        compiler_params=pltriton.CompilerParams(num_warps=v.warps, num_stages=1),
    )(*inputs)
    return jax.lax.reshape(out, (*x.shape[:-1], k))


def _largest(d: Any) -> bool:
    return d.axis_direction.name == "DECREASING"


def _applies(d: Any) -> bool:
    x = d.input_tensor
    return plan(x.sizes, d.axis, d.k, x.dtype) is not None


def _lower(d: Any, x) -> tuple:
    v = plan(tuple(x.shape), d.axis, d.k, x.dtype)
    index = top_k_indices(jax.lax.stop_gradient(x), v, d.k, _largest(d))
    values = jnp.take_along_axis(x, index, axis=-1, mode="promise_in_bounds")
    return values, index.astype(d.output_index_tensor.dtype)


for _name in ("TOP_K", "TOP_K1"):
    register_fast_path(f"DML_OPERATOR_{_name}", "kernel", _applies, _lower)
