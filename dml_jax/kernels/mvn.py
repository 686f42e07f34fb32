"""A single-pass MEAN_VARIANCE_NORMALIZATION (versions 0, 1 and 2) kernel (Pallas, Triton) as
the CUDA fast path of the mean-variance normalizations.

XLA's GPU code reads the tensor once per statistic and once more for the result: on an H200 at 1 GiB
it ran instance norm (H, W of NCHW, per-channel Scale and Bias) at 0.49 of the copy and layer norm
over rows of 4096 at 0.81 (benchmarks/RESULTS.md#operators). Here the normalized axes, which must be
the minor ones once size-1 axes are dropped, make contiguous rows of ``R`` elements of an ``(A, R)``
matrix, and one program owns whole rows:

- rows of up to ``ONE_TILE_MAX`` elements sit in registers (``cols`` rows per program): one
  load, the mean, the sum of squared deviations from it (the lax lowering's two-pass formula),
  the result, one store;
- rows of up to ``RETAIN_ROW_MAX`` elements (instance norm's H * W = 65536) read their first
  elements (``RETAIN``: half the row of 65536) as one block that stays in registers until its
  result is stored; it fills half of a multiprocessor's registers, so one program runs on each
  at a time. The rest of the row is read in tiles, each tile's loads issued a few tiles ahead
  of its use, and read again last tile first, so that only what was read last, half the row,
  need stay in L2 meanwhile (132 rows of 128 KB: 17 MB) instead of whole rows. The statistics
  come from per-lane sums of ``x - K`` and its square, ``K`` the kept block's mean (no
  cross-lane step per tile, and no cancellation beyond a factor of the row over the block);
- longer rows take two loops over tiles of the row: the first keeps a Welford mean and sum of
  squared deviations per lane of the tile and merges the lanes at its end by Chan's rule, which
  is as free of cancellation as the two-pass formula; the second reads the row again, last tile
  first (the tiles read last are the likeliest to be still in L2), and stores the result.

On an H200 at 1 GiB (benchmarks/RESULTS.md#operators) that gives layer norm over rows of 4096 0.88
of the copy (lax 0.79 float32, 0.77 float16), RMS norm 0.90 (lax 0.88, 0.80) and instance norm 0.82
float32, 0.77 float16 (lax 0.50, 0.43; the two loops 0.65, 0.64, about the 2/3 of a pass that reads
the whole row twice from memory).

On a Hopper GPU (under the jax releases of ``kernels/mosaic.py``) rows longer than ``ONE_TILE_MAX``
with Scale and Bias one value per row (instance norm) take ``mvn_cluster`` instead (Pallas's Mosaic
GPU backend): a row is split over a cluster of CTAs, each holding its 64 KB of the row in shared
memory from its TMA load to its TMA store, so the row is read once; the parts' statistics meet
through distributed shared memory. 0.97-0.98 of the copy in float32 and 0.96 in float16 on an H100
(benchmarks/RESULTS.md#operators; the Triton kernel 0.93 / 0.87 there).

Scale and Bias must each vary either only along the normalized axes (layer norm's per-column
gamma: a vector of ``R``) or only across them (instance norm's per-channel gamma: one value per
row, a vector of ``A``); anything else, other axes, types other than float16 and float32, and
fused activations other than RELU and LEAKY_RELU stay with lax.

Values: the lax formula ``Scale * (x - Mean) * rsqrt(Variance + Epsilon) + Bias`` with the
population variance, then the activation, float16 computed in float32 and rounded once. The
sums run in another order, and Triton's ``rsqrt`` and division are not XLA's: float32 agrees
with the lax lowering within 16 float32 ulps of ``|result| + |Scale| + |Bias|`` (the
normalized value is of order one, so that is its absolute error carried through the affine
step), float16 within one float16 ulp (tests/test_mvn_kernel.py). Rows whose mean is large
against their spread lose the ulps of the mean in both lowerings alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..fastpath import register_fast_path
from ..ops.normalization import mvn_axes, mvn_flags, optional_pair
from .jax_private import mlir_dialects, mlir_ir
from .pallas_helpers import is_nan, load_pallas
from .reduce_plan import abr_view, pow2_at_least

DTYPES = frozenset(np.dtype(t) for t in ("float16", "float32"))
MIN_PROGRAMS = 264  # fewer rows (groups of rows) cannot fill a large GPU; lax splits better
ACTIVATIONS = ("DML_OPERATOR_ACTIVATION_RELU", "DML_OPERATOR_ACTIVATION_LEAKY_RELU")

# Tunables, chosen by benchmarks/mvn_variants.py (git history) on an H200 at 1 GiB
# (benchmarks/RESULTS.md#operators). Rows of up to ONE_TILE_MAX
# elements sit in one tile; a tile holds TILE_ELEMENTS elements (whole rows, at least one) on WARPS
# warps (None: one warp per 512 elements, 4 to 16). Rows of 4096: 2 rows a program on 16 warps ran
# 0.88 of the copy for layer norm and 0.90 for RMS norm in both types (1 row on 8 warps 0.87-0.89; 4
# rows 0.78-0.89).
ONE_TILE_MAX = 16384
TILE_ELEMENTS = 8192
WARPS = None
# Rows of up to RETAIN_ROW_MAX elements: per data type, (elements kept in registers, a power of
# two; elements a tile of the rest; tiles loaded ahead of their use; programs, None: one per
# row), on RETAIN_WARPS warps with Triton's pipelining depth RETAIN_STAGES. Instance norm (rows
# of 65536, half kept): float32 2048-element tiles 4 ahead, one program per row, 0.82 of the
# copy (132 programs taking rows in turn 0.79; 4096 2 ahead 0.79; none ahead 0.72); float16
# 8192 1 ahead in 132 programs 0.77 (4096 2 ahead 0.75; 2048 4 ahead 0.64, one program per row
# 0.71); a quarter kept 0.73 and 0.60; 32 warps 0.79 and 0.56; stages 3 changed nothing. Rows
# of 131072 (a quarter kept, 3/4 read again) ran slower so (0.55, 0.42) than in two loops
# (0.62, 0.61), hence RETAIN_ROW_MAX.
RETAIN_ROW_MAX = 65536
RETAIN = {"float32": (32768, 2048, 4, None), "float16": (32768, 8192, 1, 132)}
RETAIN_WARPS = 16
RETAIN_STAGES = 1
# The data types that take L2 eviction hints on that path (the kept block and the second read
# ``evict_first``, read once; the first read of the streamed tiles ``evict_last``, read again;
# the results stored ``evict_first``), so that the half of each row read again is what L2
# keeps: instance norm float32 0.82 -> 0.85 of the copy (4096-element tiles 2 ahead 0.84; 132
# programs taking rows in turn 0.82); float16 0.77 -> 0.75-0.76, so not there
# (benchmarks/RESULTS.md#operators).
RETAIN_HINTS = ("float32",)
# Longer rows: tiles of LOOP_ELEMENTS on LOOP_WARPS warps; LOOP_GRID programs that take rows in
# turn (None: one program per row) bound the rows in flight, hence the L2 the second loop needs.
# Instance norm (rows of 65536) on this path: 16384 on 16 warps in 264 programs 0.65 float32,
# 0.66 float16; one program per row 0.59-0.61 and 0.50-0.57 whatever the tile; smaller tiles in
# 132-264 programs 0.33-0.61; stages 3 0.66, 0.65. Short of the copy: the second read does not
# all come from L2.
LOOP_ELEMENTS = 16384
LOOP_WARPS = 16
LOOP_GRID = 264
LOOP_STAGES = 1


@dataclass(frozen=True)
class View:
    """The ``(A, R)`` view of a normalization and its tiles: ``rows`` elements of a row per tile
    (a power of two; ``R`` padded to one tile when ``tiles == 1``) by ``cols`` rows, on
    ``warps`` warps; ``grid`` programs each taking groups of ``cols`` rows in turn, or one
    program per group (None); the first ``keep`` elements of a row (a power of two) held in
    registers between the passes (0: both passes loop over all tiles), the loads of the other
    tiles issued ``depth`` tiles ahead of their use; Triton's pipelining depth ``stages``;
    ``hints``: L2 eviction hints on the kept path (the types in ``RETAIN_HINTS``)."""

    a: int
    r: int
    rows: int
    cols: int
    warps: int
    grid: int | None = None
    keep: int = 0
    stages: int = 1
    depth: int = 1
    hints: bool = False

    @property
    def tiles(self) -> int:
        return -(-self.r // self.rows)

    @property
    def streamed(self) -> int:
        """Tiles of a row past the kept block."""
        return -(-max(0, self.r - self.keep) // self.rows)

    @property
    def groups(self) -> int:
        return -(-self.a // self.cols)

    @property
    def programs(self) -> int:
        return self.groups if self.grid is None else min(self.grid, self.groups)


@dataclass(frozen=True)
class Form:
    """What the kernel computes: the statistics used, Epsilon, and the fused activation
    (``"RELU"``, ``"LEAKY_RELU"`` with its Alpha, or None)."""

    use_mean: bool
    use_variance: bool
    epsilon: float
    activation: str | None = None
    alpha: float = 0.0


def _activation(form: Form, y):
    """The form's fused activation on float32 ``y``, as the lax lowering applies it (RELU: NaN
    passes, -0.0 and below give +0.0)."""
    if form.activation == "RELU":
        return jnp.where(y > 0, y, jnp.where(is_nan(y), y, jnp.zeros_like(y)))
    if form.activation == "LEAKY_RELU":
        return jnp.where(y >= 0, y, np.float32(form.alpha) * y)
    return y


def plan(
    shape: tuple[int, ...], axes: tuple[int, ...], dtype, min_programs: int | None = None
) -> View | None:
    """The kernel's view of normalizing ``shape`` over ``axes``, or None where lax stays
    (``min_programs``, ``MIN_PROGRAMS`` where None: fewer programs leave it to lax; a device's
    shard of rows whose whole took the kernel keeps it at any count, 1)."""
    if np.dtype(dtype) not in DTYPES:
        return None
    view = abr_view(shape, axes)  # None for one-element rows and axes not adjacent
    if view is None or view[2] != 1:
        return None  # the normalized axes are not the minor ones
    a, r, _ = view
    rp = pow2_at_least(r)
    if rp <= ONE_TILE_MAX:
        cols = min(max(1, TILE_ELEMENTS // rp), pow2_at_least(a))
        warps = WARPS or min(16, max(4, rp * cols // 512))
        v = View(a, r, rp, cols, warps)
    elif r <= RETAIN_ROW_MAX:
        keep, tile, depth, grid = RETAIN[np.dtype(dtype).name]
        v = View(
            a, r, tile, 1, RETAIN_WARPS, grid, min(keep, rp), RETAIN_STAGES, depth,
            np.dtype(dtype).name in RETAIN_HINTS,
        )  # fmt: skip
    else:
        v = View(a, r, LOOP_ELEMENTS, 1, LOOP_WARPS, LOOP_GRID, 0, LOOP_STAGES)
    return v if v.groups >= (MIN_PROGRAMS if min_programs is None else min_programs) else None


def broadcast_mode(sizes: tuple[int, ...], axes: tuple[int, ...]) -> str | None:
    """How a Scale or Bias tensor of ``sizes`` maps onto the rows: ``"row"`` (one value per
    row: size 1 on every normalized axis; a constant counts here), ``"along"`` (the same vector
    along every row: size 1 on every other axis), or None (both vary: lax stays)."""
    if all(sizes[i] == 1 for i in axes):
        return "row"
    if all(s == 1 for i, s in enumerate(sizes) if i not in axes):
        return "along"
    return None


def _vector(t, shape: tuple[int, ...], axes: tuple[int, ...], mode: str):
    """Scale or Bias as a vector of ``A`` (mode "row") or ``R`` (mode "along") elements."""
    keep = (lambda i: i not in axes) if mode == "row" else (lambda i: i in axes)
    target = tuple(n if keep(i) else 1 for i, n in enumerate(shape))
    return jax.lax.reshape(jnp.broadcast_to(t, target), (math.prod(target),))


def mvn_kernel(x2, v: View, form: Form, affine=(), interpret: bool = False):
    """The normalization of the rows of ``x2`` (``(A, R)``), in ``x2``'s type.

    Args:
        x2: the rows.
        v: the view (``plan``).
        form: what is computed.
        affine: up to two ``(vector, mode, op)``: Scale (``op`` "mul") then Bias ("add"), each
            a vector of ``A`` (mode "row") or ``R`` (mode "along") elements.
        interpret: run in Pallas interpret mode (tests on any machine).
    """
    pl, pltriton = load_pallas()
    rows, cols, tiles = v.rows, v.cols, v.tiles
    n = np.float32(v.r)
    eps = np.float32(form.epsilon)
    f32 = jnp.float32

    def traced(g, off):
        """A static offset past 0 made a traced value (the traced group times 0, which Triton
        folds back to the constant): Pallas rejects a static slice that runs past the row, as
        a partial last tile does."""
        return g * 0 + off if isinstance(off, int) and off > 0 else off

    def row_span(g):
        return (g * cols + jnp.arange(cols, dtype=jnp.int32)) < v.a

    def col_span(off, size):
        return (off + jnp.arange(size, dtype=jnp.int32)) < v.r

    def load(x_ref, g, off, size=rows, raw: bool = False, live=None, policy=None):
        """Elements ``off`` to ``off + size`` of the rows of group ``g`` (padding 0) in float32,
        or in their own type (``raw``); nothing is read where ``live`` is False; ``policy``:
        an L2 eviction hint."""
        valid = row_span(g)[:, None] & col_span(off, size)[None, :]
        if live is not None:
            valid = valid & live
        at = (pl.ds(g * cols, cols), pl.ds(traced(g, off), size))
        zero = np.zeros((), x_ref.dtype)
        tile = pltriton.load(x_ref.at[at], mask=valid, other=zero, eviction_policy=policy)
        return (tile if raw else tile.astype(f32)), valid

    def load_row_terms(refs, g):
        """The per-row vectors of group ``g`` as ``(cols, 1)`` columns (None: along-row)."""
        out = []
        for ref, (_, mode, _) in zip(refs, affine):
            if mode == "row":
                at = ref.at[pl.ds(g * cols, cols)]
                term = pltriton.load(at, mask=row_span(g), other=np.zeros((), ref.dtype))
                out.append(term.astype(f32)[:, None])
            else:
                out.append(None)
        return out

    def finish(refs, row_terms, g, off, y):
        size = y.shape[1]
        for ref, term, (_, _, op) in zip(refs, row_terms, affine):
            if term is None:  # along the row: the tile's stretch of the vector
                at = ref.at[pl.ds(traced(g, off), size)]
                vec = pltriton.load(at, mask=col_span(off, size), other=np.zeros((), ref.dtype))
                term = vec.astype(f32)[None, :]
            y = y * term if op == "mul" else y + term
        return _activation(form, y)

    def store(o_ref, g, off, y, policy=None):
        size = y.shape[1]
        valid = row_span(g)[:, None] & col_span(off, size)[None, :]
        at = (pl.ds(g * cols, cols), pl.ds(traced(g, off), size))
        pltriton.store(o_ref.at[at], y.astype(o_ref.dtype), mask=valid, eviction_policy=policy)

    def normalize(refs, row_terms, mean, factor, g, off, tile):
        y = tile - mean if mean is not None else tile
        if factor is not None:
            y = y * factor
        return finish(refs, row_terms, g, off, y)

    def one_tile(x_ref, o_ref, refs, g):
        tile, valid = load(x_ref, g, 0)
        y = tile
        if form.use_mean:
            mean = jnp.sum(tile, axis=1, keepdims=True) / n
            y = jnp.where(valid, tile - mean, 0.0)  # padding must not count in the variance
        if form.use_variance:
            y = y * jax.lax.rsqrt(jnp.sum(y * y, axis=1, keepdims=True) / n + eps)
        store(o_ref, g, 0, finish(refs, load_row_terms(refs, g), g, 0, y))

    def statistics(x_ref, g):
        """(mean or None, rsqrt(variance + eps) or None) of the rows of group ``g``."""
        zeros = jnp.zeros((cols, rows), f32)
        if form.use_mean and form.use_variance:

            def welford(t, carry):  # lane j's running mean and sum of squared deviations
                m, m2 = carry
                tile, valid = load(x_ref, g, t * rows)
                d = tile - m
                new_m = m + d * (1.0 / (t + 1).astype(f32))  # every valid lane has seen t + 1
                new_m2 = m2 + d * (tile - new_m)
                return jnp.where(valid, new_m, m), jnp.where(valid, new_m2, m2)

            m, m2 = jax.lax.fori_loop(0, tiles, welford, (zeros, zeros))
            # Chan's merge of the lanes: lanes past the row's end in the last tile saw one less.
            lane = jnp.arange(rows, dtype=jnp.int32)
            count = jnp.where(lane < v.r - (tiles - 1) * rows, tiles, tiles - 1).astype(f32)
            mean = jnp.sum(count[None, :] * m, axis=1, keepdims=True) / n
            spread = m - mean
            m2 = jnp.sum(m2, axis=1, keepdims=True)
            var = (m2 + jnp.sum(count[None, :] * spread * spread, axis=1, keepdims=True)) / n
            return mean, jax.lax.rsqrt(var + eps)

        def sums(t, acc):  # padding loads as 0, so plain lane sums need no mask
            tile, _ = load(x_ref, g, t * rows)
            return acc + (tile if form.use_mean else tile * tile)

        if not (form.use_mean or form.use_variance):
            return None, None
        total = jnp.sum(jax.lax.fori_loop(0, tiles, sums, zeros), axis=1, keepdims=True) / n
        if form.use_mean:
            return total, None
        return None, jax.lax.rsqrt(total + eps)

    def looped(x_ref, o_ref, refs, g):
        mean, factor = statistics(x_ref, g)
        row_terms = load_row_terms(refs, g)

        def second(i, carry):
            t = tiles - 1 - i  # last tile first: it is the likeliest still in L2
            tile, _ = load(x_ref, g, t * rows)
            store(o_ref, g, t * rows, normalize(refs, row_terms, mean, factor, g, t * rows, tile))
            return carry

        jax.lax.fori_loop(0, tiles, second, 0)

    def retained(x_ref, o_ref, refs, g):
        """The first ``keep`` elements of each row are read first, as one block held in
        registers to the end; the rest, in ``streamed`` tiles, is read in a loop and read again
        last tile first, so that what is read again is what was read last: only it need stay
        in L2 meanwhile. Both loops keep ``depth`` tiles' loads in flight ahead of their use.

        The statistics need no cross-lane step per tile: with ``K`` the kept block's mean when
        both statistics are used (0 otherwise), the sums of ``d = x - K`` and ``d * d`` (per
        lane over the tiles) give ``mean = K + S1 / n`` and ``variance = S2 / n - (S1 / n)**2``.
        Since the kept block holds a fraction ``f`` of the row, ``n * (mean - K)**2`` is at
        most ``(1 / f - 1)`` times ``n * variance``: the subtraction loses at most a factor
        ``1 / f`` (2 for half the row) against the two-pass formula.
        """
        keep, count = v.keep, v.streamed

        def total(y):
            return jnp.sum(y, axis=1, keepdims=True)

        depth = min(v.depth, count)

        once, again_ = ("evict_first", "evict_last") if v.hints else (None, None)

        def fetch(t, live=None, policy=None):
            return load(x_ref, g, keep + t * rows, raw=True, live=live, policy=policy)[0]

        def stream(order, use, carry, ahead, policy=None):
            """``carry = use(order(i), tile, carry)`` for i < count, the loads ``len(ahead)``
            tiles ahead of their use (``ahead``: the first ones, already issued)."""
            if not count:
                return carry

            def step(i, c):
                c, ahead = c
                if ahead:  # past the last tile: nothing read
                    nxt = fetch(order(jnp.minimum(i + depth, count - 1)), i + depth < count, policy)
                    tile, ahead = ahead[0], (*ahead[1:], nxt)
                else:
                    tile = fetch(order(i), policy=policy)
                return use(order(i), tile, c), ahead

            return jax.lax.fori_loop(0, count, step, (carry, ahead))[0]

        kept, kept_valid = load(x_ref, g, 0, keep, raw=True, policy=once)
        ahead = tuple(fetch(t, policy=again_) for t in range(depth))
        xk = kept.astype(f32)
        shift = None
        if form.use_mean and form.use_variance:
            shift = total(xk) / np.float32(min(v.r, keep))
            xk = xk - shift
            if keep > v.r:  # padding loads as 0; shifted it would count
                xk = jnp.where(kept_valid, xk, 0.0)
        # With the shift, the kept block's own sum of d is 0 but for rounding, which is
        # left out as the two-pass formula leaves it out of its mean (one reduction less).
        zero = jnp.zeros((cols, 1), f32)
        sums = [None if not form.use_mean else zero if shift is not None else total(xk)]
        sums.append(total(xk * xk) if form.use_variance else None)

        def add(t, tile, acc):
            d = tile.astype(f32)
            if shift is not None:
                d = d - shift
                if (v.r - keep) % rows:
                    d = jnp.where(col_span(keep + t * rows, rows)[None, :], d, 0.0)
            acc1, acc2 = acc
            return (None if acc1 is None else acc1 + d), (None if acc2 is None else acc2 + d * d)

        zeros = jnp.zeros((cols, rows), f32)
        acc = tuple(None if s is None else zeros for s in sums)
        acc = stream(lambda i: i, add, acc, ahead, again_)

        def last(i):  # last tile first
            return count - 1 - i

        ahead = tuple(fetch(last(i), policy=once) for i in range(depth))
        for k, a in enumerate(acc):
            if a is not None:
                sums[k] = sums[k] + total(a)
        mean = factor = None
        if form.use_mean:
            mean = sums[0] / n
        if form.use_variance:
            var = sums[1] / n
            if shift is not None:
                var = jnp.maximum(var - mean * mean, 0.0)
                mean = mean + shift
            factor = jax.lax.rsqrt(var + eps)
        row_terms = load_row_terms(refs, g)

        def put(off, tile):
            y = normalize(refs, row_terms, mean, factor, g, off, tile)
            store(o_ref, g, off, y, once)

        def again(t, tile, carry):
            put(keep + t * rows, tile.astype(f32))
            return carry

        stream(last, again, 0, ahead, once)
        put(0, kept.astype(f32))

    body = retained if v.keep else one_tile if tiles == 1 else looped

    def kernel(x_ref, *rest):
        *refs, o_ref = rest
        pid = pl.program_id(0)
        if v.grid is None:
            body(x_ref, o_ref, refs, pid)
            return

        def turn(i, carry):  # groups past the end are masked off entirely
            body(x_ref, o_ref, refs, pid + i * v.programs)
            return carry

        jax.lax.fori_loop(0, -(-v.groups // v.programs), turn, 0)

    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(x2.shape, x2.dtype),
        grid=(v.programs,),
        interpret=interpret,
        compiler_params=pltriton.CompilerParams(num_warps=v.warps, num_stages=v.stages),
    )(x2, *(vec for vec, _, _ in affine))


# The cluster form (Mosaic GPU; a Hopper GPU under the jax releases of kernels/mosaic.py), for
# rows longer than ONE_TILE_MAX with Scale and Bias one value per row (instance norm). A row is
# split over a cluster of CTAs, each holding its part of the row in shared memory from the load
# to the store, so the row is read once. Tunables chosen by a sweep on an H100 (rows of 65536, 1
# GiB; benchmarks/RESULTS.md#operators): 64 KB a CTA (three fit a multiprocessor): float32 0.98
# of the copy with 4 CTAs a row (2: 0.95-0.96, 8: 0.96), float16 0.98 with 2 (1: 0.97-0.98, 4:
# 0.97); pieces of 16 KB (one piece 0.97, 2: 0.98).
CLUSTER_BYTES = 64 * 1024  # of a row, a CTA
CLUSTER_MAX = 8  # CTAs a cluster: the portable maximum
CLUSTER_PIECE = 16 * 1024  # bytes a TMA copy: the sums start on the first piece to arrive
CLUSTER_LINE = 256  # elements a line of a CTA's block (a TMA box's minor dimension)
CLUSTER_SLICE = 16  # lines a step of the register loops (16 or 32 elements a thread)


@dataclass(frozen=True)
class ClusterView:
    """A row of ``r`` elements split over ``p`` CTAs (a cluster), each holding ``r / p`` of
    them in shared memory as ``lines`` lines of ``CLUSTER_LINE``, loaded and stored in
    ``pieces`` TMA copies; ``a`` rows, one cluster each."""

    a: int
    r: int
    p: int
    pieces: int

    @property
    def lines(self) -> int:
        return self.r // self.p // CLUSTER_LINE

    @property
    def steps(self) -> int:
        return self.lines // CLUSTER_SLICE


def cluster_plan(
    shape: tuple[int, ...], axes: tuple[int, ...], dtype, min_programs: int | None = None
) -> ClusterView | None:
    """The cluster form's view of normalizing ``shape`` over ``axes``, or None
    (``min_programs`` as ``plan``'s)."""
    from . import mosaic

    dtype = np.dtype(dtype)
    if dtype not in DTYPES or not mosaic.hopper():
        return None
    view = abr_view(shape, axes)
    if view is None or view[2] != 1:
        return None
    a, r, _ = view
    if r <= ONE_TILE_MAX:
        return None  # short rows: the Triton kernel holds whole rows already
    p = 1
    while r * dtype.itemsize > p * CLUSTER_BYTES:
        p *= 2
    if (
        p > CLUSTER_MAX
        or r % (p * CLUSTER_LINE * CLUSTER_SLICE)
        or a * p < (MIN_PROGRAMS if min_programs is None else min_programs)
    ):
        return None
    if a * p >= 2**31:
        return None  # the launch grid
    steps = r // p // (CLUSTER_LINE * CLUSTER_SLICE)
    pieces = math.gcd(steps, max(1, r // p * dtype.itemsize // CLUSTER_PIECE))
    return ClusterView(a, r, p, pieces)


def mvn_cluster(x2, v: ClusterView, form: Form, affine=()):
    """The normalization of the rows of ``x2`` (``(A, R)``) by clusters of ``v.p`` CTAs.

    A CTA (one warpgroup) brings its ``R / p`` elements of a row into shared memory in
    ``v.pieces`` TMA copies and sums them, a piece at a time as they arrive, in float32 per
    thread; its mean ``m`` and sum of squared deviations from it ``M2`` (two passes over shared
    memory, exact as the lax lowering's formula) go to every CTA of the cluster by distributed
    shared memory and a cluster barrier, and each combines them by Chan's rule: the row's mean
    is the mean of the ``m``, its ``M2`` the sum of theirs plus ``R / p`` times the squared
    spread of the ``m``. The CTA then writes its normalized elements over its own in shared
    memory and stores them by TMA, a piece at a time. With ``use_mean`` alone the figures are
    the means; with ``use_variance`` alone, sums of squares (DML's mean square).

    Args:
        x2: the rows.
        v: the view (``cluster_plan``).
        form: what is computed.
        affine: up to two ``(vector, "row", op)``: Scale (``op`` "mul") then Bias ("add"), each
            a vector of ``A`` elements.
    """
    import jax.experimental.pallas as pl
    import jax.experimental.pallas.mosaic_gpu as plgpu
    from jax.experimental.mosaic.gpu import utils as mu

    ir = mlir_ir()
    arith, gpu, memref, nvvm = mlir_dialects("arith", "gpu", "memref", "nvvm")

    a, r, p, pieces = v.a, v.r, v.p, v.pieces
    lines, steps, k = v.lines, v.steps, CLUSTER_SLICE
    per = steps // pieces  # steps a piece
    span_lines = lines // pieces
    c = np.float32(r // p)
    f32 = jnp.float32
    x4 = jax.lax.reshape(x2, (a, p, lines, CLUSTER_LINE))
    exchanged = p > 1 and (form.use_mean or form.use_variance)

    @plgpu.inline_mgpu(arg_types=(plgpu.RefType(), plgpu.RefType()))
    def exchange(ctx, mine, table):
        """One thread writes the CTA's two figures into column ``me`` of every CTA's table;
        the cluster barrier (release, then acquire) makes them visible to all."""
        del ctx
        index = ir.IndexType.get()
        mu.warpgroup_barrier()  # the figures' stores, by whichever thread made them
        me = gpu.cluster_block_id(gpu.Dimension.x)
        zero = mu.c(0, ir.IntegerType.get_signless(32))
        with mu.when(arith.cmpi(arith.CmpIPredicate.eq, mu.thread_idx(), zero)):
            vals = [memref.load(mine, [mu.c(j, index)]) for j in range(2)]
            for q in range(p):
                peer = mu.get_cluster_ref(table, gpu.Dimension.x, mu.c(q, index), generic=False)
                for j in range(2):
                    memref.store(vals[j], peer, [mu.c(j, index), me])
        nvvm.cluster_arrive(aligned=True)
        nvvm.cluster_wait(aligned=True)

    def kernel(x_gmem, *rest):
        *t_gmem, o_gmem, buf, mine, table, bar = rest
        row = jax.lax.axis_index("rows")
        me = jax.lax.axis_index("c")
        for j in range(pieces):
            span = pl.ds(j * span_lines, span_lines)
            plgpu.copy_gmem_to_smem(x_gmem.at[row, me, span], buf.at[span], bar.at[j])

        def piece(i):
            return buf[pl.ds(i * k, k), :].astype(f32)

        arrived = [False]  # whether a pass has waited for the pieces already

        def arrive(i):
            """Before the first pass's step ``i``: wait for the piece it starts, if any, so
            that the pass works on the pieces as they come in."""
            if not arrived[0] and i % per == 0:
                plgpu.barrier_wait(bar.at[i // per])

        def total(term):
            acc = None
            for i in range(steps):
                arrive(i)
                t = term(i)
                acc = t if acc is None else acc + t
            arrived[0] = True
            return jnp.sum(acc)

        m = m2 = None
        if form.use_mean:
            m = total(piece) / c
        if form.use_variance:

            def square(i):
                d = piece(i) - m if m is not None else piece(i)
                return d * d

            m2 = total(square)
        mean = m
        if exchanged:
            mine[0] = m if m is not None else np.float32(0)
            mine[1] = m2 if m2 is not None else np.float32(0)
            exchange(mine, table)
            ms = [table[0, q] for q in range(p)] if form.use_mean else []
            if form.use_mean:
                mean = sum(ms[1:], ms[0]) / np.float32(p)
            if form.use_variance:
                m2 = sum((table[1, q] for q in range(1, p)), table[1, 0])
                if form.use_mean:
                    for q in range(p):
                        spread = ms[q] - mean
                        m2 = m2 + c * spread * spread
        factor = None
        if form.use_variance:
            factor = jax.lax.rsqrt(m2 / np.float32(r) + np.float32(form.epsilon))
        bias = None
        for ref, (_, _, op) in zip(t_gmem, affine):
            term = ref[row].astype(f32)
            if op == "mul":
                factor = term if factor is None else factor * term
            else:
                bias = term
        for i in range(steps):
            arrive(i)  # no statistics: this pass is the first
            y = piece(i)
            if mean is not None:
                y = y - mean
            if factor is not None:
                y = y * factor
            if bias is not None:
                y = y + bias
            buf[pl.ds(i * k, k), :] = _activation(form, y).astype(buf.dtype)
            if (i + 1) % per == 0:
                span = pl.ds(i // per * span_lines, span_lines)
                plgpu.commit_smem()
                plgpu.copy_smem_to_gmem(buf.at[span], o_gmem.at[row, me, span])
        plgpu.wait_smem_to_gmem(0, wait_read_only=True)

    out = plgpu.kernel(
        kernel,
        out_type=jax.ShapeDtypeStruct(x4.shape, x4.dtype),
        grid=(a,),
        grid_names=("rows",),
        cluster=(p,),
        cluster_names=("c",),
        scratch_types=[
            plgpu.SMEM((lines, CLUSTER_LINE), x2.dtype),
            plgpu.SMEM((2,), f32),
            plgpu.SMEM((2, p), f32),
            plgpu.Barrier(num_barriers=pieces),
        ],
    )(x4, *(vec for vec, _, _ in affine))
    return jax.lax.reshape(out, (a, r))


def form_of(d: Any) -> Form | None:
    """The kernel's form of an MVN description, or None for a fused activation it lacks."""
    use_mean, use_variance = mvn_flags(d)
    act = d.fused_activation
    if act is None:
        return Form(use_mean, use_variance, d.epsilon)
    if act.operator_type not in ACTIVATIONS:
        return None
    name = act.operator_type.removeprefix("DML_OPERATOR_ACTIVATION_")
    return Form(use_mean, use_variance, d.epsilon, name, getattr(act, "alpha", 0.0))


def _spread(t: Any) -> tuple[int, ...]:
    """A Scale or Bias desc's sizes with 1 on each dimension of stride 0: a broadcast there
    (an imported LayerNormalization's Scale and Bias have the input's sizes, stride 0 on every
    axis but the normalized ones)."""
    return tuple(1 if st == 0 else n for n, st in zip(t.sizes, t.layout_strides))


def _takes(d: Any, plan_of, modes: tuple[str, ...]) -> bool:
    """A form takes ``d``: ``plan_of`` gives a view, the fused activation is one it runs, and
    Scale and Bias (where present) broadcast in one of ``modes``."""
    x, axes = d.input_tensor, mvn_axes(d)
    if plan_of(x.sizes, axes, x.dtype) is None or form_of(d) is None:
        return False
    pair = (d.scale_tensor, d.bias_tensor)
    return all(broadcast_mode(_spread(t), axes) in modes for t in pair if t is not None)


def _affine(d: Any, shape: tuple[int, ...], rest) -> tuple:
    """Scale and Bias as the kernels take them: ``(vector, mode, op)`` for each present. A
    dimension of stride 0 is read at index 0, as DirectML reads its one element (the logical
    array repeats it; ``quantize`` reads its per-axis parameters the same way)."""
    axes = mvn_axes(d)
    out = []
    for t, desc, op in zip(optional_pair(d, rest), (d.scale_tensor, d.bias_tensor), ("mul", "add")):
        if t is None:
            continue
        spread = _spread(desc)
        t = t[tuple(slice(0, 1) if n == 1 else slice(None) for n in spread)]
        mode = broadcast_mode(spread, axes)
        out.append((_vector(t, shape, axes, mode), mode, op))
    return tuple(out)


def applies(d: Any) -> bool:
    return _takes(d, plan, ("row", "along"))


def lower_mvn_kernel(d: Any, x, *rest, interpret: bool = False) -> tuple:
    """The fast path's lowering: the contract of ``ops.normalization.lower_mvn``."""
    shape = tuple(x.shape)
    v = plan(shape, mvn_axes(d), x.dtype)
    y = mvn_kernel(
        jax.lax.reshape(x, (v.a, v.r)), v, form_of(d), _affine(d, shape, rest), interpret
    )
    return (jax.lax.reshape(y, shape),)


def cluster_applies(d: Any) -> bool:
    return _takes(d, cluster_plan, ("row",))


def lower_mvn_cluster(d: Any, x, *rest) -> tuple:
    """The cluster form's lowering: the contract of ``ops.normalization.lower_mvn``."""
    shape = tuple(x.shape)
    v = cluster_plan(shape, mvn_axes(d), x.dtype)
    y = mvn_cluster(jax.lax.reshape(x, (v.a, v.r)), v, form_of(d), _affine(d, shape, rest))
    return (jax.lax.reshape(y, shape),)


def _per_shard(d: Any, cluster: bool) -> Any:
    """The kernel (or the cluster form) on each device's rows (``rows_shards``)."""
    from .rows_shards import leading, partitioned, rows_view

    plan_of, form = (cluster_plan if cluster else plan), form_of(d)
    lead = leading(tuple(d.input_tensor.sizes), mvn_axes(d))  # (the plan took them trailing)

    def run(x, *rest):
        shape = tuple(x.shape)
        v = plan_of(shape, mvn_axes(d), x.dtype)
        affine = _affine(d, shape, rest)
        modes, ops = tuple(m for _, m, _ in affine), tuple(o for _, _, o in affine)

        def kernel(x2, *vectors):
            local = plan_of(tuple(x2.shape), (1,), x2.dtype, 1)
            pieces = tuple(zip(vectors, modes, ops))
            if cluster:
                return mvn_cluster(x2, local, form, pieces)
            return mvn_kernel(x2, local, form, pieces)

        def fits(rows: int) -> bool:
            return plan_of((rows, v.r), (1,), x.dtype, 1) is not None

        fn = partitioned(kernel, len(lead), modes, fits)
        vectors = (t.reshape(lead) if m == "row" else t for t, m, _ in affine)
        return (jax.lax.reshape(fn(rows_view(x, lead), *vectors), shape),)

    return run


# The cluster form first (Hopper, jax 0.11, long rows), the Triton kernel elsewhere.
for _version in ("", "1", "2"):
    _name = f"DML_OPERATOR_MEAN_VARIANCE_NORMALIZATION{_version}"
    register_fast_path(
        _name, "cluster", cluster_applies, lower_mvn_cluster,
        per_shard=lambda d: _per_shard(d, True),
    )  # fmt: skip
    register_fast_path(
        _name, "kernel", applies, lower_mvn_kernel, per_shard=lambda d: _per_shard(d, False)
    )
