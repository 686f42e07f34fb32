"""A one-pass SOFTMAX / LOG_SOFTMAX / HARDMAX kernel (Pallas, Triton) as the CUDA fast path of the
softmax activations.

XLA's GPU code for a stable softmax reads the tensor twice or three times (the maximum, the sum of
exponentials, the result): 0.50 of the copy along rows of 32768 and 0.46 along axis 1 of NCHW on an
H200 (issue anchors, benchmarks/RESULTS.md#operators). Here one program owns whole slices: it loads
every normalized element of its slices once, takes the maximum, the exponentials, their sum and the
result in registers, and stores once, so the tensor is read once and written once.

The tensor is viewed as ``(A, R, B)`` (``R`` the normalized axes, adjacent once size-1 axes are
dropped): with ``B == 1`` a program owns ``cols`` rows of the ``(A, R)`` matrix; otherwise it
owns ``cols`` adjacent columns of one ``a`` and all ``R`` rows above them (contiguous runs of
``cols`` elements). Longer slices take two passes over their tiles (the second mostly from L2).
Normalized axes that are not adjacent stay with lax.

Values: the lax formula (the maximum subtracted, ``exp``, a division by the sum; float16 in
float32, rounded once). Triton's ``exp`` is not XLA's: the kernel agrees with the lax lowering
to a few float32 ulps (tests/test_softmax_kernel.py states the tolerance), float16 to one ulp.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..fastpath import register_fast_path
from .pallas_helpers import is_nan, load_pallas
from .reduce_plan import abr_view, pow2_at_least, pow2_at_most

DTYPES = frozenset(np.dtype(t) for t in ("float16", "float32"))
MIN_PROGRAMS = 264  # fewer cannot fill a large GPU (the reduce kernels' rule); lax splits better


@dataclass(frozen=True)
class View:
    """The ``(A, R, B)`` view of a softmax and its tiles: ``rows`` (elements of R per tile, a
    power of two; R padded to one tile when ``tiles == 1``) by ``cols`` (rows of the matrix for
    B == 1, columns otherwise), on ``warps`` warps."""

    a: int
    r: int
    b: int
    rows: int
    cols: int
    warps: int

    @property
    def tiles(self) -> int:
        return -(-self.r // self.rows)

    @property
    def programs(self) -> int:
        if self.b == 1:
            return -(-self.a // self.cols)
        return self.a * -(-self.b // self.cols)


def plan(
    shape: tuple[int, ...], axes: tuple[int, ...], dtype, min_programs: int | None = None
) -> View | None:
    """The kernel's view of normalizing ``shape`` over ``axes``, or None where lax stays
    (``min_programs``, ``MIN_PROGRAMS`` where None: fewer programs leave it to lax; a device's
    shard of rows whose whole took the kernel keeps it at any count, 1)."""
    if np.dtype(dtype) not in DTYPES:
        return None
    view = abr_view(shape, axes)  # None also for one-element slices: lax's constant is as fast
    if view is None:
        return None
    a, r, b = view
    itemsize = np.dtype(dtype).itemsize
    tile = TILE_BYTES // itemsize
    rp = pow2_at_least(r)
    warps = WARPS or 4
    if b == 1 and rp > tile and itemsize == 4 and rp <= WHOLE_ROW_MAX:
        # A long float32 row in one tile on 16 warps ran 0.72 of the copy along rows of 32768
        # against 0.61-0.63 for the two-pass loop (benchmarks/RESULTS.md#operators).
        rows, cols, warps = rp, 1, WHOLE_ROW_WARPS
    elif b == 1:
        rows = rp if rp <= tile else LOOP_ROWS
        cols = max(1, tile // rows)
        warps = (WARPS or 4) if rp <= tile else LOOP_WARPS
    elif rp * MIN_COLS <= INNER_MAX_ELEMENTS:
        rows, cols = rp, max(MIN_COLS, min(pow2_at_most(b), tile // rp, 1024))
        warps = WARPS or (4 if rows * cols <= 4096 else 8)
    else:  # a long slice over columns: loop down it in tiles of LOOP_COLS columns
        cols = min(pow2_at_most(b), LOOP_COLS)
        rows = max(1, tile // cols)
    v = View(a, r, b, rows, cols, warps)
    return v if v.programs >= (MIN_PROGRAMS if min_programs is None else min_programs) else None


# Bytes per tile of a slice that fits one tile (more rows or columns per program for shorter
# slices), the tile of the two-pass loop over longer slices, and warps; chosen by
# benchmarks/softmax_variants.py (git history) on an H200 (benchmarks/RESULTS.md#operators).
TILE_BYTES = 8192
LOOP_ROWS = 8192  # float16 rows of 32768: 8192-element tiles on 8 warps 0.65, 4096 on 4 0.62
LOOP_WARPS = 8
WHOLE_ROW_MAX = 32768
WHOLE_ROW_WARPS = 16
LOOP_COLS = 64
# Inner layout: at least 64 columns per tile (C = 256: 16 columns 0.60 of the copy, 64 columns
# on 8 warps 0.86 in float32, 0.66 in float16), whole slices up to 16384 elements per tile.
MIN_COLS = 64
INNER_MAX_ELEMENTS = 16384
WARPS = None  # None: 4, and 8 for inner-layout tiles of more than 4096 elements


def softmax_kernel(x, v: View, log: bool, interpret: bool = False, hard: bool = False):
    """SOFTMAX (LOG_SOFTMAX with ``log``, HARDMAX with ``hard``) of ``x`` over the ``R`` of ``v``.

    HARDMAX (one tile only): 1 at the first maximum of the slice in row-major order, a NaN
    counting as the maximum (the first NaN wins), as the lax lowering's ``argmax``; exact.

    A slice in one tile: its maximum, exponentials and sum in registers, one load and one
    store. A longer slice: a first loop keeps a running maximum ``m`` and a running sum ``s`` of
    ``exp(x - m)`` (rescaled by ``exp(old_m - new_m)`` when the maximum grows), a second loop
    reads the slice again (from L2 mostly: the slices in flight fit in it) and stores
    ``exp(x - m) / s`` (``x - m - log(s)``).
    """
    pl, pltriton = load_pallas()
    rows, cols = v.rows, v.cols
    neg_inf = np.float32(-np.inf)
    inner = v.b > 1
    ax = 0 if inner else 1
    nb = -(-v.b // cols)

    def where(pid, t):
        """The tile ``t`` of program ``pid``: its ref index and mask."""
        red = t * rows + jnp.arange(rows, dtype=jnp.int32)
        if inner:
            a, j = pid // nb, pid % nb
            col = j * cols + jnp.arange(cols, dtype=jnp.int32)
            valid = (red < v.r)[:, None] & (col < v.b)[None, :]
            return (pl.ds(a * v.r + t * rows, rows), pl.ds(j * cols, cols)), valid
        row = pid * cols + jnp.arange(cols, dtype=jnp.int32)
        valid = (row < v.a)[:, None] & (red < v.r)[None, :]
        return (pl.ds(pid * cols, cols), pl.ds(t * rows, rows)), valid

    def load(x_ref, pid, t):
        at, valid = where(pid, t)
        tile = pltriton.load(x_ref.at[at], mask=valid, other=neg_inf.astype(x.dtype))
        return tile.astype(jnp.float32)

    def store(o_ref, pid, t, y):
        at, valid = where(pid, t)
        pltriton.store(o_ref.at[at], y.astype(o_ref.dtype), mask=valid)

    def result(tile, m, s):
        shifted = tile - m  # m = -inf (an all -inf slice): NaN, as in the lax lowering
        return shifted - jnp.log(s) if log else jnp.exp(shifted) / s

    def hardmax(tile):
        index = jnp.broadcast_to(
            jnp.arange(rows, dtype=jnp.int32)[:, None] if inner else jnp.arange(rows)[None, :],
            tile.shape,
        ).astype(jnp.int32)
        big = jnp.int32(2**30)
        nan = is_nan(tile)  # tile is float32
        m = jnp.max(jnp.where(nan, neg_inf, tile), axis=ax, keepdims=True)
        first_nan = jnp.min(jnp.where(nan, index, big), axis=ax, keepdims=True)
        first_max = jnp.min(jnp.where(tile == m, index, big), axis=ax, keepdims=True)
        chosen = jnp.where(first_nan < big, first_nan, first_max)
        return (index == chosen).astype(jnp.float32)

    def kernel(x_ref, o_ref):
        pid = pl.program_id(0)
        if hard:
            store(o_ref, pid, 0, hardmax(load(x_ref, pid, 0)))
            return
        if v.tiles == 1:
            tile = load(x_ref, pid, 0)
            m = jnp.max(tile, axis=ax, keepdims=True)
            e = jnp.exp(tile - m)
            s = jnp.sum(e, axis=ax, keepdims=True)
            store(o_ref, pid, 0, tile - m - jnp.log(s) if log else e / s)
            return

        def first(t, carry):
            m, s = carry
            tile = load(x_ref, pid, t)
            new_m = jnp.maximum(m, jnp.max(tile, axis=ax, keepdims=True))
            # s == 0 (nothing seen yet, or only -inf) skips the rescale, whose exp(-inf - -inf)
            # would be NaN; the terms then use the new maximum.
            s = jnp.where(s > 0, s * jnp.exp(m - new_m), s)
            return new_m, s + jnp.sum(jnp.exp(tile - new_m), axis=ax, keepdims=True)

        shape = (1, cols) if inner else (cols, 1)
        init = (jnp.full(shape, neg_inf), jnp.zeros(shape, jnp.float32))
        m, s = jax.lax.fori_loop(0, v.tiles, first, init)

        def second(t, carry):
            store(o_ref, pid, t, result(load(x_ref, pid, t), m, s))
            return carry

        jax.lax.fori_loop(0, v.tiles, second, 0)

    shape2 = (v.a * v.r, v.b) if inner else (v.a, v.r)
    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(shape2, x.dtype),
        grid=(v.programs,),
        interpret=interpret,
        compiler_params=pltriton.CompilerParams(num_warps=v.warps, num_stages=1),
    )(jax.lax.reshape(x, shape2))
    return jax.lax.reshape(out, x.shape)


def _axes(d: Any) -> tuple[int, ...]:
    axes = getattr(d, "axes", None)
    return tuple(sorted(axes)) if axes is not None else (d.input_tensor.rank - 1,)


def _applies(hard: bool):
    def applies(d: Any) -> bool:
        x = d.input_tensor
        v = plan(x.sizes, _axes(d), x.dtype)
        return v is not None and (v.tiles == 1 or not hard)

    return applies


def _lower(log: bool, hard: bool):
    def lower(d: Any, x) -> tuple:
        v = plan(tuple(x.shape), _axes(d), x.dtype)
        return (softmax_kernel(x, v, log, hard=hard),)

    return lower


def _per_shard(log: bool, hard: bool):
    """Over the minor axis (``B == 1``: rows of ``R``), the kernel on each device's rows
    (``rows_shards``); other layouts give way to lax in a split program."""

    def per_shard(d: Any):
        from .rows_shards import leading, partitioned, rows_view

        x = d.input_tensor
        v = plan(x.sizes, _axes(d), x.dtype)
        if v.b != 1:
            return None
        lead = leading(x.sizes, _axes(d))

        def local(rows: int):
            w = plan((rows, v.r), (1,), x.dtype, 1)
            return w if w is not None and (w.tiles == 1 or not hard) else None

        def kernel(x2):
            return softmax_kernel(x2, local(x2.shape[0]), log, hard=hard)

        fn = partitioned(kernel, len(lead), (), lambda rows: local(rows) is not None)
        return lambda x: (jax.lax.reshape(fn(rows_view(x, lead)), tuple(x.shape)),)

    return per_shard


for _name, _log, _hard in (
    ("SOFTMAX", False, False),
    ("LOG_SOFTMAX", True, False),
    ("HARDMAX", False, True),
):
    for _version in ("", "1"):
        register_fast_path(
            f"DML_OPERATOR_ACTIVATION_{_name}{_version}",
            "kernel",
            _applies(_hard),
            _lower(_log, _hard),
            per_shard=_per_shard(_log, _hard),
        )
