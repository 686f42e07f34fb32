"""Mirrored and periodic PADDING / PADDING1 (EDGE, REFLECTION, SYMMETRIC, WRAP) as one Pallas
(Triton) gather kernel.

The lax lowering builds a constant pad and then overwrites its borders with copies of planes of
the result (``ops.movement._border_copies``): the tensor is written once and the border planes
are read and written again, 0.70 of the copy for float32 and 0.49 for float16 on an H200
(1 GiB, NCHW padded by one on H and W; benchmarks/RESULTS.md#operators). Each program owns a block
of the output (``rows`` output rows by ``cols`` output columns), computes for every output
element the input element it copies with the mode's index map (``ops.movement.source_index``
written on integer vectors: per row from the row index, per column from the column index),
loads those elements (a gather whose addresses are mostly consecutive, so the loads coalesce)
and stores the block contiguously. The tensor is read once and written once.

The view: size-1 axes without padding are dropped and runs of unpadded axes merged; the columns
are the last padded axis (with a trailing unpadded block of fewer than ``MERGE_INNER`` elements
folded into each of its positions) or the trailing unpadded block itself, and the rows are
everything before. 64-bit types move as pairs of 32-bit words (a trailing block of two).

Values: every element is a copy of an input element's bits (moved as unsigned integers of its
width), so the result equals the lax lowering's bit for bit, NaN payloads and -0.0 included.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..enums import PaddingMode
from ..fastpath import register_fast_path
from .pallas_helpers import load_pallas
from .reduce_plan import pow2_at_least

BITS = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32}  # the elements' bits, by item size
MODES = frozenset(
    (PaddingMode.EDGE, PaddingMode.REFLECTION, PaddingMode.SYMMETRIC, PaddingMode.WRAP)
)
_INDEX_LIMIT = 2**31 - 2**20  # int32 offsets, with room for a tile past the end

# Output bytes per program by the item size moved, and warps: benchmarks/pad_variants.py (git
# history) on an H200, 1 GiB NCHW padded on H and W, mean over the modes
# (benchmarks/RESULTS.md#operators, padding kernel): float32 4 KiB 0.97 of the copy (8-64 KiB
# 0.93-0.94), float16 8 KiB 0.94 (4 KiB 0.90, 64 KiB 0.91). 1-byte types were not swept and take
# float16's tile.
TILE_BYTES = {1: 8192, 2: 8192, 4: 4096}
WARPS = 4
# A trailing unpadded block shorter than this joins the padded axis before it in the columns
# (each column then divides by the block); a longer one is the columns by itself.
MERGE_INNER = 32


@dataclass(frozen=True)
class Axis:
    """One axis of the view: ``n`` input positions, ``start`` and ``end`` padding."""

    n: int
    start: int
    end: int

    @property
    def out(self) -> int:
        return self.n + self.start + self.end

    @property
    def padded(self) -> bool:
        return self.start > 0 or self.end > 0


@dataclass(frozen=True)
class View:
    """The padding as ``row_axes`` (outer to inner) by a column axis ``col`` whose positions
    are blocks of ``inner`` contiguous elements, tiled ``rows`` x ``cols`` on ``warps``."""

    mode: PaddingMode
    row_axes: tuple[Axis, ...]
    col: Axis
    inner: int
    rows: int
    cols: int
    warps: int

    @property
    def out_rows(self) -> int:
        return math.prod(a.out for a in self.row_axes)

    @property
    def out_cols(self) -> int:
        return self.col.out * self.inner

    @property
    def col_blocks(self) -> int:
        return -(-self.out_cols // self.cols)

    @property
    def programs(self) -> int:
        return -(-self.out_rows // self.rows) * self.col_blocks


def _merged_axes(shape, start, end) -> list[Axis]:
    """The axes with size-1 unpadded ones dropped and runs of unpadded ones merged (neither
    moves the row-major index of what is copied)."""
    axes: list[Axis] = []
    for n, a, b in zip(shape, start, end):
        ax = Axis(n, a, b)
        if not ax.padded and n == 1:
            continue
        if not ax.padded and axes and not axes[-1].padded:
            axes[-1] = Axis(axes[-1].n * n, 0, 0)
        else:
            axes.append(ax)
    return axes


def plan(shape, start, end, mode: PaddingMode, dtype) -> View | None:
    """The kernel's view of padding ``shape`` by ``start`` / ``end``, or None where lax stays
    (CONSTANT, no padding, empty tensors, offsets beyond int32)."""
    dt = np.dtype(dtype)
    if mode not in MODES or dt.itemsize not in (1, 2, 4, 8) or 0 in shape:
        return None
    if dt.itemsize == 8:  # pairs of 32-bit words
        shape, start, end = (*shape, 2), (*start, 0), (*end, 0)
    out = [n + a + b for n, a, b in zip(shape, start, end)]
    if math.prod(shape) >= _INDEX_LIMIT or math.prod(out) >= _INDEX_LIMIT:
        return None
    axes = _merged_axes(shape, start, end)
    if not any(ax.padded for ax in axes):
        return None  # nothing padded: lax returns the input
    if axes[-1].padded:
        row_axes, col, inner = axes[:-1], axes[-1], 1
    elif axes[-1].n < MERGE_INNER:
        row_axes, col, inner = axes[:-2], axes[-2], axes[-1].n
    else:
        row_axes, col, inner = axes[:-1], axes[-1], 1
    item = min(dt.itemsize, 4)
    elems = TILE_BYTES[item] // item
    out_rows = math.prod(a.out for a in row_axes)
    cols = min(pow2_at_least(col.out * inner), elems)
    rows = min(max(1, elems // cols), pow2_at_least(out_rows))
    return View(mode, tuple(row_axes), col, inner, rows, cols, WARPS)


def _fold(i, ax: Axis, mode: PaddingMode):
    """``source_index(mode, ax.n, i - ax.start)`` on an int32 vector ``i`` of output positions
    in ``[0, ax.out)``: the mode's index map as integer arithmetic. Where the padding folds at
    most once the remainder is skipped."""
    n, a, b = ax.n, ax.start, ax.end
    if not ax.padded:
        return i
    if n == 1:
        return jnp.zeros_like(i)  # every mode repeats the one element
    i = i - a
    if mode is PaddingMode.EDGE:
        return jnp.minimum(jnp.maximum(i, 0), n - 1)
    period = {PaddingMode.WRAP: n, PaddingMode.REFLECTION: 2 * (n - 1)}.get(mode, 2 * n)
    once = max(a, b) <= (n - 1 if mode is PaddingMode.REFLECTION else n)
    if mode is PaddingMode.WRAP:
        if once:
            return jnp.where(i < 0, i + n, jnp.where(i >= n, i - n, i))
        return lax.rem(i + -(-a // n) * n, np.int32(n))
    if once:
        m = jnp.abs(i) if mode is PaddingMode.REFLECTION else jnp.maximum(i, -1 - i)
    else:  # reduced to one period [0, period), non-negative before the remainder
        m = lax.rem(i + -(-a // period) * period, np.int32(period))
    if mode is PaddingMode.REFLECTION:
        return (n - 1) - jnp.abs((n - 1) - m)
    return jnp.minimum(m, (2 * n - 1) - m)  # SYMMETRIC


def _row_offsets(row, v: View):
    """The input offset of the first element of each output row in ``row`` (int32)."""
    stride = v.col.n * v.inner
    off = jnp.zeros_like(row)
    for k in range(len(v.row_axes) - 1, -1, -1):
        ax = v.row_axes[k]
        if k > 0:
            coord, row = lax.rem(row, np.int32(ax.out)), lax.div(row, np.int32(ax.out))
        else:
            coord = row
        off = off + _fold(coord, ax, v.mode) * stride
        stride *= ax.n
    return off


def _col_sources(col, v: View):
    """The input offset, within a row, of each output column in ``col`` (int32)."""
    if v.inner == 1:
        return _fold(col, v.col, v.mode)
    block, within = lax.div(col, np.int32(v.inner)), lax.rem(col, np.int32(v.inner))
    return _fold(block, v.col, v.mode) * v.inner + within


def padding_kernel(x, v: View, interpret: bool = False):
    """``x`` padded as ``v`` says (its shape is ``v``'s input); exact."""
    pl, pltriton = load_pallas()
    dtype = x.dtype
    wide = dtype.itemsize == 8
    bits = lax.bitcast_convert_type(x, jnp.uint32 if wide else BITS[dtype.itemsize])
    flat = lax.reshape(bits, (bits.size,))
    out_rows, out_cols, ncb = v.out_rows, v.out_cols, v.col_blocks
    ragged_rows, ragged_cols = out_rows % v.rows != 0, out_cols % v.cols != 0

    def kernel(x_ref, o_ref):
        pid = pl.program_id(0)
        # pid * 0, not 0: a traced start of the same type as the rows' (interpret mode under
        # x64 rejects a mix); it folds away when compiled.
        rb, cb = (pid // ncb, pid % ncb) if ncb > 1 else (pid, pid * 0)
        row = rb * v.rows + jnp.arange(v.rows, dtype=jnp.int32)
        col = cb * v.cols + jnp.arange(v.cols, dtype=jnp.int32)
        shape = (v.rows, v.cols)
        mask = None
        if ragged_rows or ragged_cols:
            mask = jnp.broadcast_to((row < out_rows)[:, None], shape) & (col < out_cols)[None, :]
            # positions past the end load the last row's or column's (valid) elements
            row, col = jnp.minimum(row, out_rows - 1), jnp.minimum(col, out_cols - 1)
        index = _row_offsets(row, v)[:, None] + _col_sources(col, v)[None, :]
        tile = x_ref[index]
        at = (pl.ds(rb * v.rows, v.rows), pl.ds(cb * v.cols, v.cols))
        pltriton.store(o_ref.at[at], tile, mask=mask)

    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((out_rows, out_cols), flat.dtype),
        grid=(v.programs,),
        interpret=interpret,
        compiler_params=pltriton.CompilerParams(num_warps=v.warps, num_stages=1),
    )(flat)
    return out


def pad(x, mode: PaddingMode, start, end, interpret: bool = False):
    """``x`` padded by ``start`` / ``end`` in ``mode`` with the kernel (``plan`` must cover it).

    Under ``vmap`` the batch becomes one more unpadded leading axis of the same kernel (one
    call per batch element where that would pass the int32 offsets).
    """
    start, end = tuple(start), tuple(end)

    @jax.custom_batching.custom_vmap
    def run(y):
        v = plan(y.shape, start, end, mode, y.dtype)
        out = padding_kernel(y, v, interpret)
        sizes = tuple(n + a + b for n, a, b in zip(y.shape, start, end))
        if y.dtype.itemsize == 8:
            return lax.bitcast_convert_type(lax.reshape(out, (*sizes, 2)), y.dtype)
        return lax.bitcast_convert_type(lax.reshape(out, sizes), y.dtype)

    @run.def_vmap
    def _rule(axis_size, in_batched, y):
        del axis_size, in_batched  # y is batched along axis 0 (the only argument)
        if plan(y.shape, (0, *start), (0, *end), mode, y.dtype) is None:
            return lax.map(run, y), True
        return pad(y, mode, (0, *start), (0, *end), interpret), True

    return run(x)


def _applies(d: Any) -> bool:
    x = d.input_tensor
    return plan(x.sizes, d.start_padding, d.end_padding, d.padding_mode, x.dtype) is not None


def _lower(d: Any, x) -> tuple:
    return (pad(x, d.padding_mode, d.start_padding, d.end_padding),)


# Standalone: in a graph the lax pad fuses into its producer, which a kernel would prevent.
for _name in ("DML_OPERATOR_PADDING", "DML_OPERATOR_PADDING1"):
    register_fast_path(_name, "kernel", _applies, _lower, standalone=True)
