"""SCATTER (alias SCATTER_ELEMENTS) along the minor axis: two kernels, both bit for bit the
lax lowering's result.

The lax lowering makes repeated indices deterministic with a ``scatter_max`` of update positions
(atomics), a gather of the winners and a select over the input: 0.19 of the copy on an H200 for the
bench case in float32, 0.12 in float16 (input read, indices and updates read, output written;
benchmarks/RESULTS.md#operators). Each line along the axis receives only its own line's updates, so
both kernels give a program whole lines, and give every output position one thread that stores its
line's updates in order: where indices repeat, the last update (row-major) wins, as the lax lowering
says. Negative INT32 indices count from the end; indices still out of range drop their update.
Values move as unsigned integers of their width, so every data type keeps its bits (NaN payloads,
-0.0).

``scatter_smem`` (Mosaic GPU, a Hopper GPU under jax 0.11; registered first): the lines are
scattered in shared memory. A program takes blocks of 32 lines in turn, TMA bringing the next
block's input, indices and updates while one is scattered; of 128 threads, four share a line, each
owning a quarter of its positions: it copies that quarter into the output block, then walks the
line's updates and stores those whose index falls in it. Nothing goes to memory but whole blocks, by
TMA. 0.97-0.99 of the copy in float32 and float16 on an H100 (benchmarks/RESULTS.md#operators).

``scatter_kernel`` (Pallas Triton, any other CUDA GPU): a program copies its lines' input to
the output in coalesced tiles, a CTA barrier (``debug_barrier``, ``bar.sync``) makes those
stores visible, then ``owners`` threads a line, splitting its positions by the index's low
bits, store the updates into global memory in order. 0.36 of the copy in float32, 0.22 in
float16 on an H200: every update is a scattered store of its own into L2. 1, 2, 4, 8 and 16
threads per line (128 to 8 lines a program) ran 0.09, 0.12, 0.22, 0.36 and 0.36 in float32
(32: 0.33); 8-update steps, L2 hints, loads issued ahead and a persistent grid moved it by less
than 0.02 or lost (benchmarks/RESULTS.md#operators). Finding each
position's winner in registers instead (positions x chunks of updates, no ordered stores) ran
0.03 to 0.07: W x L compares a line outweigh the stores they save.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..fastpath import register_fast_path
from .jax_private import mlir_dialects, mlir_ir
from .pallas_helpers import load_pallas
from .reduce_plan import pow2_at_least

BITS = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32}
INDEX_TYPES = frozenset(np.dtype(t) for t in ("int32", "uint32"))
_OFFSET_LIMIT = 2**31 - 2**24  # int32 element offsets, with a padded last block of lines

# Tunables, chosen by benchmarks/scatter_variants.py (git history) on an H200
# (benchmarks/RESULTS.md#operators): 16 threads a line on 4 warps, 16-update steps: 0.36 of the copy
# in float32 and 0.22 in float16 (8 threads a line: 0.36 and 0.21). Steps of 8 and single loads
# changed it by under 0.01.
WARPS = 4
OWNERS = 16  # threads per line, each storing the positions whose index is its own modulo OWNERS
ROWS = 1  # lines per thread group of OWNERS threads
STEP = 16  # updates of a line loaded per loop step
VEC = 4  # contiguous updates per load (one 16-byte vector of INT32 indices)
COPY_ELEMENTS = 4096  # elements per copy tile
MIN_PROGRAMS = 264  # fewer cannot fill a large GPU; lax stays


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

    @property
    def programs(self) -> int:
        return -(-self.a // self.lines)


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
    v = View(a, w, l, lines, owners, step, vec, copy_cols, WARPS)
    return v if v.programs >= MIN_PROGRAMS else None


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

    def kernel(x_ref, i_ref, u_ref, o_ref):
        first = pl.program_id(0) * nl
        rows = first + jnp.arange(nl, dtype=jnp.int32)

        def copy(c, carry):
            cols = c * cw + jnp.arange(cw, dtype=jnp.int32)
            ok = (rows < a)[:, None] & (cols < w)[None, :]
            at = (pl.ds(first, nl), pl.ds(c * cw, cw))
            pltriton.store(o_ref.at[at], pltriton.load(x_ref.at[at], mask=ok), mask=ok)
            return carry

        lax.fori_loop(0, -(-w // cw), copy, 0)
        if not interpret:  # interpret mode runs the program sequentially
            pltriton.debug_barrier()

        row3 = first + lax.broadcasted_iota(jnp.int32, shape3, 0)
        k3 = lax.broadcasted_iota(jnp.int32, shape3, 2)
        row2 = first + lax.broadcasted_iota(jnp.int32, (nl, q), 0)
        owner = lax.broadcasted_iota(jnp.int32, (nl, q), 1)

        def step(s, carry):
            for g in range(v.step // vec):
                l0 = s * v.step + g * vec
                col3 = l0 + k3
                # Unclamped: masked lanes never touch memory, and the pointers keep their
                # contiguity, so a thread loads its ``vec`` updates as one vector.
                at3 = (row3, col3)
                ok3 = (row3 < a) & (col3 < length)
                at_i = pltriton.load(i_ref.at[at3], mask=ok3, other=0)
                up = pltriton.load(u_ref.at[at3], mask=ok3, other=0).astype(jnp.uint32)
                for k in range(vec):
                    i = _column(at_i, k, k3)
                    if signed:
                        i = jnp.where(i < 0, i + w, i)
                        ok = (i >= 0) & (i < w)
                    else:
                        ok = i < jnp.uint32(w)
                        i = i.astype(jnp.int32)
                    ok = ok & (row2 < a) & (l0 + k < length)
                    if q > 1:
                        ok = ok & ((i & (q - 1)) == owner)
                    # A dropped update points one past the line's end: masked on the GPU,
                    # and dropped (not clamped onto a kept one) by interpret mode's scatter.
                    at = (row2, jnp.where(ok, i, w))
                    pltriton.store(o_ref.at[at], _column(up, k, k3).astype(bits), mask=ok)
            return carry

        lax.fori_loop(0, -(-length // v.step), step, 0)

    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((a, w), bits),
        grid=(v.programs,),
        interpret=interpret,
        compiler_params=pltriton.CompilerParams(num_warps=v.warps, num_stages=1),
    )(x2, i2, u2)
    return lax.bitcast_convert_type(out.reshape(x.shape), dtype)


def _plan_args(d: Any) -> tuple:
    """A SCATTER descriptor's shapes, axis and types, as ``plan`` and ``smem_plan`` take them."""
    x = d.input_tensor
    return x.sizes, d.updates_tensor.sizes, d.axis, x.dtype, d.indices_tensor.dtype


def _plan_of(d: Any) -> View | None:
    return plan(*_plan_args(d))


def _lower(d: Any, x, idx, updates) -> tuple:
    return (scatter_kernel(x, idx, updates, _plan_of(d)),)


# ---------------------------------------------------------------------------------------------
# The shared-memory form (Mosaic GPU, Hopper). Tunables from the sweep of
# benchmarks/RESULTS.md#operators (H100): 8 blocks a program 0.986
# / 0.989 of the copy (float32 / float16); 16 blocks, 16 or 8 lines, 3 stages, 4 or 16 updates
# before their stores 0.956-0.982 (float16 with 8 lines 0.716).

SMEM_LINES = 32  # lines a block, at most (128 threads: 128 / lines threads share a line)
SMEM_STEPS = 8  # blocks a program, at most
SMEM_STAGES = 2  # blocks in flight a program
SMEM_BYTES = 200 * 1024  # shared memory for the stages' blocks
SMEM_GROUP = 8  # updates loaded before their stores (vectors of 4)
SMEM_MIN_PROGRAMS = 132


@dataclass(frozen=True)
class SmemView:
    """The scatter as ``a`` lines of ``w`` elements receiving ``l`` updates each, in blocks of
    ``lines`` lines, ``steps`` blocks a program."""

    a: int
    w: int
    l: int
    lines: int
    steps: int

    @property
    def owners(self) -> int:
        return 128 // self.lines

    @property
    def programs(self) -> int:
        return self.a // (self.lines * self.steps)


def smem_plan(shape, updates_shape, axis: int, dtype, index_dtype) -> SmemView | None:
    """The shared-memory kernel's view, or None (another axis, 1- or 8-byte data, rows that
    are not whole 16-byte units, lines that fill no block, too few programs, no Hopper GPU)."""
    from . import mosaic

    size = np.dtype(dtype).itemsize
    if axis != len(shape) - 1 or size not in (2, 4) or np.dtype(index_dtype) not in INDEX_TYPES:
        return None
    a, w, l = math.prod(shape[:-1]), shape[-1], updates_shape[-1]
    # TMA moves rows of whole 16-byte units; indices and updates are read 4 at a time.
    if l == 0 or l % 4 or (l * size) % 16 or (w * size) % 16 or max(a * w, a * l) >= 2**31:
        return None
    for lines in (32, 16, 8):
        if lines > SMEM_LINES or a % lines:
            continue
        owners = 128 // lines
        if w % owners or (w // owners * size) % 16:
            continue
        if SMEM_STAGES * lines * (2 * w * size + l * (4 + size)) > SMEM_BYTES:
            continue
        blocks = a // lines
        steps = next(s for s in (16, 8, 4, 2, 1) if s <= SMEM_STEPS and blocks % s == 0)
        v = SmemView(a, w, l, lines, steps)
        if v.programs >= SMEM_MIN_PROGRAMS and mosaic.hopper():
            return v
        return None
    return None


def scatter_smem(x, idx, updates, v: SmemView):
    """SCATTER along the minor axis through shared memory, bit for bit as the lax lowering.

    A program takes ``v.steps`` blocks of ``v.lines`` whole lines in turn, TMA bringing the
    next block's input, indices and updates while this one is scattered. Of the 128 threads,
    ``v.owners`` share a line, each owning one contiguous part of its positions: a thread
    copies its part of the input to the output block, then walks the line's updates in order
    and stores those whose index falls in its part. A position has one writer, which writes in
    update order (the last repeated index wins), and no thread waits for another before the
    TMA store of the block. Reads of indices and updates start ``4 * (line mod lines a warp)``
    steps late so the lines of a warp read different banks."""
    import jax.experimental.pallas as pl
    import jax.experimental.pallas.mosaic_gpu as plgpu
    from jax.experimental.mosaic.gpu import utils as mu

    ir = mlir_ir()
    arith, memref, vector = mlir_dialects("arith", "memref", "vector")

    dtype = x.dtype
    size = dtype.itemsize
    bits = BITS[size]
    signed = idx.dtype == jnp.int32
    a, w, length, nl, steps = v.a, v.w, v.l, v.lines, v.steps
    q = v.owners
    part = w // q
    vec = 16 // size  # elements a 16-byte copy
    chunks = part // vec
    per_warp = max(1, 32 // q)  # lines a warp
    lag = 4 * (per_warp - 1)
    group = SMEM_GROUP
    rounds = -(-(length + lag) // group)
    x2 = lax.bitcast_convert_type(x, bits).reshape(a, w)
    u2 = lax.bitcast_convert_type(updates, bits).reshape(a, length)
    i2 = lax.bitcast_convert_type(idx, jnp.int32).reshape(a, length)

    @plgpu.inline_mgpu(arg_types=(plgpu.RefType(),) * 4)
    def scatter_block(ctx, x_ref, i_ref, u_ref, o_ref):
        del ctx
        i32 = ir.IntegerType.get_signless(32)
        index = ir.IndexType.get()
        elem = ir.IntegerType.get_signless(8 * size)

        def c(n):
            return mu.c(n, i32)

        def ix(n):
            return arith.index_cast(index, n)

        tid = mu.thread_idx()
        lane = arith.andi(tid, c(31))
        line = arith.divui(tid, c(q))
        mine = arith.remui(tid, c(q))
        row = ix(line)
        first = arith.muli(mine, c(part))
        copy_ty = ir.VectorType.get((vec,), elem)

        def copy(k, _):
            # A rotated order, so the lanes of a warp touch different banks.
            at = arith.addi(first, arith.muli(arith.remui(arith.addi(lane, k), c(chunks)), c(vec)))
            vector.store(vector.load(copy_ty, x_ref, [row, ix(at)]), o_ref, [row, ix(at)])
            return _

        mu.fori(c(chunks), ())(copy)

        lag_here = arith.muli(arith.remui(line, c(per_warp)), c(4))
        i_ty = ir.VectorType.get((4,), i32)
        u_ty = ir.VectorType.get((4,), elem)

        def walk(r, _):
            base = arith.subi(arith.muli(r, c(group)), lag_here)
            loaded = []
            for g in range(group // 4):  # loads first: the stores below may alias them
                j = arith.addi(base, c(4 * g))
                ok = arith.cmpi(arith.CmpIPredicate.ult, j, c(length))
                at = ix(arith.select(ok, j, c(0)))
                iv = vector.load(i_ty, i_ref, [row, at])
                uv = vector.load(u_ty, u_ref, [row, at])
                loaded.append((ok, iv, uv))
            for ok, iv, uv in loaded:
                for e in range(4):
                    i = vector.extract(iv, [], [e])
                    if signed:
                        neg = arith.cmpi(arith.CmpIPredicate.slt, i, c(0))
                        i = arith.select(neg, arith.addi(i, c(w)), i)
                    owner = arith.cmpi(arith.CmpIPredicate.eq, arith.divui(i, c(part)), mine)
                    with mu.when(arith.andi(ok, owner)):
                        memref.store(vector.extract(uv, [], [e]), o_ref, [row, ix(i)])
            return _

        mu.fori(c(rounds), ())(walk)

    def kernel(x_gmem, i_gmem, u_gmem, o_gmem):
        p = lax.axis_index("p")
        span = pl.ds(p * (steps * nl), steps * nl)

        def block(_, x_smem, i_smem, u_smem, o_smem):
            scatter_block(x_smem, i_smem, u_smem, o_smem)

        def spec(cols):
            return plgpu.BlockSpec((nl, cols), lambda s: (s, 0))

        plgpu.emit_pipeline(
            block,
            grid=(steps,),
            in_specs=[spec(w), spec(length), spec(length)],
            out_specs=[spec(w)],
            max_concurrent_steps=SMEM_STAGES,
        )(x_gmem.at[span], i_gmem.at[span], u_gmem.at[span], o_gmem.at[span])

    out = plgpu.kernel(
        kernel,
        out_type=jax.ShapeDtypeStruct((a, w), bits),
        grid=(v.programs,),
        grid_names=("p",),
    )(x2, i2, u2)
    return lax.bitcast_convert_type(out.reshape(x.shape), dtype)


def _smem_plan_of(d: Any) -> SmemView | None:
    return smem_plan(*_plan_args(d))


def _lower_smem(d: Any, x, idx, updates) -> tuple:
    return (scatter_smem(x, idx, updates, _smem_plan_of(d)),)


# SCATTER_ELEMENTS is an alias: its descriptors are SCATTER's. The shared-memory form first
# (Hopper, jax 0.11), the Triton kernel on other GPUs and layouts.
register_fast_path(
    "DML_OPERATOR_SCATTER", "smem", lambda d: _smem_plan_of(d) is not None, _lower_smem
)
register_fast_path("DML_OPERATOR_SCATTER", "kernel", lambda d: _plan_of(d) is not None, _lower)
