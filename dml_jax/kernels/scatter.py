"""SCATTER (alias SCATTER_ELEMENTS) along the minor axis as one Pallas (Triton) kernel.

The lax lowering makes repeated indices deterministic with a ``scatter_max`` of update
positions (atomics), a gather of the winners and a select over the input: 0.19 of the copy on
an H200 for the bench case in float32, 0.12 in float16 (input read, indices and updates read,
output written; benchmarks/RESULTS.md). Here each line along the axis receives only its own
line's updates, so a program owns a block of whole lines and writes them twice:

1. the lines' input is copied to the output in coalesced tiles, then a CTA barrier
   (``debug_barrier``, ``bar.sync``) makes those stores visible to every thread of the program
   before any update is stored;
2. the updates are stored in order along the line: every output position is owned by one
   thread (``owners`` threads share a line and split its positions by the index's low bits),
   and that thread walks the line's updates l = 0, 1, ... storing ``out[line, idx[l]] =
   upd[l]`` where the index is its own. Stores of one thread to one address take effect in
   program order, so where indices repeat the last update (row-major) wins, exactly as the
   lax lowering says.

Values move as unsigned integers of their width, so every data type of 1, 2 or 4 bytes keeps
its bits (NaN payloads, -0.0). Negative INT32 indices count from the end; indices still out of
range drop their update (masked stores). The result equals the lax lowering's bit for bit.

Speed: 0.36 of the copy in float32, 0.21 in float16 on the bench case, against 0.19 and 0.12
for lax, far from the copy. Every update is a scattered store of its own into L2, and a
line's updates land well after its copy: the likely cost is that with more lines in flight per
SM, L2 has evicted more of them by then (partly written sectors then go to memory). 1, 2, 4 and 8 threads per line (128 to 16 lines a program) ran 0.09, 0.12,
0.22 and 0.36 in float32; storing the copied lines ``evict_last`` (with the loads
``evict_first``) lifted 4 threads per line from 0.22 to 0.30 in float32 but not float16
(benchmarks/results/scatter_kernel/sweep.log).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..fastpath import register_fast_path
from .reduce import load_pallas
from .reduce_plan import pow2_at_least

BITS = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32}
INDEX_TYPES = frozenset(np.dtype(t) for t in ("int32", "uint32"))
_OFFSET_LIMIT = 2**31 - 2**24  # int32 element offsets, with a padded last block of lines

# Tunables, chosen by benchmarks/scatter_variants.py on an H200 (benchmarks/RESULTS.md): 8
# threads a line on 4 warps, 16-update steps, was the fastest variant measured, 0.36 of the copy
# in float32 and 0.21 in float16. At 4 threads a line, steps of 8 ran 0.26 against 0.22 (32:
# 0.23) and single loads 0.21 against 0.22 for vectors of 4.
WARPS = 4
OWNERS = 8  # threads per line, each storing the positions whose index is its own modulo OWNERS
ROWS = 1  # lines per thread group of OWNERS threads
STEP = 16  # updates of a line loaded per loop step
VEC = 4  # contiguous updates per load (one 16-byte vector of INT32 indices)
COPY_ELEMENTS = 4096  # elements per copy tile
MIN_PROGRAMS = 264  # fewer cannot fill a large GPU; lax stays
HINTS = False  # loads "evict_first", copied lines stored "evict_last"
PER_SM = 0  # programs per SM looping over the blocks of lines; 0: one program a block
LOADS = 0  # 0: each vector's stores follow its load; 1: a step's loads first; 2: next step's too
WINNER_CHUNK = 0  # > 0: winner of each position computed in registers, updates in these chunks


@functools.cache
def _sms() -> int:
    """Streaming multiprocessors of the first device (132 on an H100 / H200 where unknown)."""
    return int(getattr(jax.devices()[0], "core_count", 0) or 132)


@dataclass(frozen=True)
class View:
    """The scatter as ``a`` lines of ``w`` input elements, each receiving ``l`` updates.

    A program owns ``lines`` lines; ``owners`` threads share each line; a loop step loads
    ``step`` updates of every line in loads of ``vec``; the copy moves ``lines`` x
    ``copy_cols`` tiles; ``warps`` warps per program."""

    a: int
    w: int
    l: int
    lines: int
    owners: int
    step: int
    vec: int
    copy_cols: int
    warps: int
    hints: bool = False
    per_sm: int = 0
    loads: int = 0
    chunk: int = 0

    @property
    def blocks(self) -> int:
        return -(-self.a // self.lines)

    @property
    def programs(self) -> int:
        return min(self.blocks, self.per_sm * _sms()) if self.per_sm else self.blocks


def plan(shape: tuple[int, ...], updates_shape: tuple[int, ...], axis: int, dtype, index_dtype):
    """The kernel's view of scattering ``updates_shape`` into ``shape`` along ``axis``, or None
    where lax stays (another axis, 8-byte data or indices, too small or too large)."""
    rank = len(shape)
    if axis != rank - 1 or np.dtype(dtype).itemsize not in BITS:
        return None
    if np.dtype(index_dtype) not in INDEX_TYPES:
        return None
    a, w, l = math.prod(shape[:-1]), shape[-1], updates_shape[-1]
    if l == 0 or w == 0 or max(a * w, a * l) >= _OFFSET_LIMIT:
        return None
    owners = min(OWNERS, pow2_at_least(w))
    lines = max(1, 32 * WARPS // owners) * ROWS
    vec = min(VEC, pow2_at_least(l))
    step = max(vec, min(STEP, pow2_at_least(l)))
    copy_cols = min(pow2_at_least(w), max(1, COPY_ELEMENTS // lines))
    if WINNER_CHUNK:
        owners, lines, step = 1, ROWS, min(WINNER_CHUNK, pow2_at_least(l))
    v = View(a, w, l, lines, owners, step, vec, copy_cols, WARPS, HINTS, PER_SM, LOADS,
             WINNER_CHUNK)  # fmt: skip
    return v if v.blocks >= MIN_PROGRAMS else None


def _column(tile, k: int, k_iota):
    """Column ``k`` of the last axis of ``tile`` (each thread holds its rows' columns, so this
    is a sum within the thread; exact, as only one term is nonzero)."""
    if tile.shape[-1] == 1:
        return jnp.sum(tile, axis=-1)
    return jnp.sum(jnp.where(k_iota == k, tile, jnp.zeros_like(tile)), axis=-1)


def scatter_kernel(x, idx, updates, v: View, interpret: bool = False):
    """SCATTER of ``updates`` at ``idx`` into ``x`` along the minor axis of ``v``, bit for bit.

    ``idx`` is INT32 (negative counts from the end) or UINT32, of ``updates``' shape; indices
    out of range after that drop their update.
    """
    pl, pltriton = load_pallas()
    dtype = x.dtype
    bits = BITS[dtype.itemsize]
    signed = idx.dtype == jnp.int32
    a, w, length = v.a, v.w, v.l
    nl, q, vec, cw = v.lines, v.owners, v.vec, v.copy_cols
    x2 = lax.bitcast_convert_type(x, bits).reshape(a, w)
    u2 = lax.bitcast_convert_type(updates, bits).reshape(a, length)
    i2 = idx.reshape(a, length)
    shape3 = (nl, q, vec)
    stream = "evict_first" if v.hints else None
    keep = "evict_last" if v.hints else None
    n_steps = -(-length // v.step)

    def position(i):
        """The index ``i`` counted from the line's start, and whether it is in range."""
        if signed:
            i = jnp.where(i < 0, i + w, i)
            return i, (i >= 0) & (i < w)
        return i.astype(jnp.int32), i < jnp.uint32(w)

    def ordered(x_ref, i_ref, u_ref, o_ref, first):
        rows = first + jnp.arange(nl, dtype=jnp.int32)

        def copy(c, carry):
            cols = c * cw + jnp.arange(cw, dtype=jnp.int32)
            ok = (rows < a)[:, None] & (cols < w)[None, :]
            at = (pl.ds(first, nl), pl.ds(c * cw, cw))
            tile = pltriton.load(x_ref.at[at], mask=ok, eviction_policy=stream)
            pltriton.store(o_ref.at[at], tile, mask=ok, eviction_policy=keep)
            return carry

        lax.fori_loop(0, -(-w // cw), copy, 0)
        if not interpret:  # interpret mode runs the program sequentially
            pltriton.debug_barrier()

        row3 = first + lax.broadcasted_iota(jnp.int32, shape3, 0)
        k3 = lax.broadcasted_iota(jnp.int32, shape3, 2)
        row2 = first + lax.broadcasted_iota(jnp.int32, (nl, q), 0)
        owner = lax.broadcasted_iota(jnp.int32, (nl, q), 1)

        def load(s, g):
            col3 = s * v.step + g * vec + k3
            # Unclamped: masked lanes never touch memory, and the pointers keep their
            # contiguity, so a thread loads its ``vec`` updates as one vector.
            at3 = (row3, col3)
            ok3 = (row3 < a) & (col3 < length)
            at_i = pltriton.load(i_ref.at[at3], mask=ok3, other=0, eviction_policy=stream)
            up = pltriton.load(u_ref.at[at3], mask=ok3, other=0, eviction_policy=stream)
            return at_i, up.astype(jnp.uint32)

        def store(s, g, at_i, up):
            l0 = s * v.step + g * vec
            for k in range(vec):
                i, ok = position(_column(at_i, k, k3))
                ok = ok & (row2 < a) & (l0 + k < length)
                if q > 1:
                    ok = ok & ((i & (q - 1)) == owner)
                # A dropped update points one past the line's end: masked on the GPU,
                # and dropped (not clamped onto a kept one) by interpret mode's scatter.
                at = (row2, jnp.where(ok, i, w))
                pltriton.store(o_ref.at[at], _column(up, k, k3).astype(bits), mask=ok)

        groups = range(v.step // vec)

        def step(s, carry):
            if v.loads == 0:
                for g in groups:
                    store(s, g, *load(s, g))
                return carry
            now = carry if v.loads == 2 else [load(s, g) for g in groups]
            nxt = [load(s + 1, g) for g in groups] if v.loads == 2 else carry
            for g in groups:
                store(s, g, *now[g])
            return nxt

        init = [load(0, g) for g in groups] if v.loads == 2 else 0
        lax.fori_loop(0, n_steps, step, init)

    def winner(x_ref, i_ref, u_ref, o_ref, first):
        wp = pow2_at_least(w)
        rows = first + lax.broadcasted_iota(jnp.int32, (nl, 1), 0)
        pos = lax.broadcasted_iota(jnp.int32, (1, wp, 1), 1)
        rows_c = first + lax.broadcasted_iota(jnp.int32, (nl, v.step), 0)
        rows_w = first + lax.broadcasted_iota(jnp.int32, (nl, wp), 0)

        def chunk(c, win):
            cols = c * v.step + lax.broadcasted_iota(jnp.int32, (1, v.step), 1)
            ok = (rows < a) & (cols < length)
            at = (rows_c, cols + 0 * rows_c)
            i, ok_i = position(pltriton.load(i_ref.at[at], mask=ok, other=0))
            i = jnp.where(ok & ok_i, i, -1)
            hit = jnp.where(i[:, None, :] == pos, (cols + 1)[:, None, :], 0)
            return jnp.maximum(win, jnp.max(hit, axis=2))

        win = lax.fori_loop(0, n_steps, chunk, jnp.zeros((nl, wp), jnp.int32))
        cols = lax.broadcasted_iota(jnp.int32, (1, wp), 1)
        ok = (rows < a) & (cols < w)
        at = (pl.ds(first, nl), pl.ds(0, wp))
        tile = pltriton.load(x_ref.at[at], mask=ok)
        hit = ok & (win > 0)
        # Only the winning update of each position is read: one gather, one coalesced store.
        got = pltriton.load(u_ref.at[rows_w, jnp.maximum(win - 1, 0)], mask=hit, other=0)
        pltriton.store(o_ref.at[at], jnp.where(hit, got, tile), mask=ok)

    body = winner if v.chunk else ordered
    grid = v.programs

    def kernel(x_ref, i_ref, u_ref, o_ref):
        pid = pl.program_id(0)
        if grid == v.blocks:
            body(x_ref, i_ref, u_ref, o_ref, pid * nl)
            return

        def block(b, carry):
            body(x_ref, i_ref, u_ref, o_ref, (pid + b * grid) * nl)
            return carry

        lax.fori_loop(0, -(-v.blocks // grid), block, 0)

    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((a, w), bits),
        grid=(grid,),
        interpret=interpret,
        compiler_params=pltriton.CompilerParams(num_warps=v.warps, num_stages=1),
    )(x2, i2, u2)
    return lax.bitcast_convert_type(out.reshape(x.shape), dtype)


def _plan_of(d: Any) -> View | None:
    return plan(
        d.input_tensor.sizes,
        d.updates_tensor.sizes,
        d.axis,
        d.input_tensor.dtype,
        d.indices_tensor.dtype,
    )


def _lower(d: Any, x, idx, updates) -> tuple:
    return (scatter_kernel(x, idx, updates, _plan_of(d)),)


# SCATTER_ELEMENTS is an alias: its descriptors are SCATTER's.
register_fast_path("DML_OPERATOR_SCATTER", "kernel", lambda d: _plan_of(d) is not None, _lower)
