"""Write-only kernels (Pallas, Triton): FILL_VALUE_CONSTANT and ONE_HOT along the minor axis.

XLA's GPU code writes a constant at 3.3 TB/s on an H200 (0.78 of the copy roofline, bytes written
over the copy's bytes moved per second) where PyTorch's fill writes at 4.6; ONE_HOT, one compare and
select per output element, runs at 0.77 (benchmarks/RESULTS.md#operators). These kernels store large
contiguous blocks, which Triton writes with 16-byte vector stores.

Both write the output's bits as unsigned integers of its width and the result is bitcast back,
so every value keeps its bits exactly (NaN payloads, -0.0); results equal the lax lowerings'.
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
from ..ops.scan_generate import fill_constant_value
from ..ops.scatter import one_hot_parts
from .pallas_helpers import load_pallas
from .reduce_plan import pow2_at_least

BITS = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32}  # the output's bits, by item size
FILL_BLOCK_BYTES = 4096  # bytes one program writes (the sweep: 1.08 of the copy; 16384: 1.06)
ONE_HOT_TILE_BYTES = 4096
NUM_WARPS = 4
MIN_ELEMENTS = 1 << 20  # below this the launch, not the bandwidth, is the cost: lax stays
_INDEX_LIMIT = 2**31 - 2**20


def _covered(shape, dtype) -> bool:
    n = math.prod(shape)
    return np.dtype(dtype).itemsize in BITS and MIN_ELEMENTS <= n < _INDEX_LIMIT


def _bits_of(value, dtype) -> int:
    """The bits of ``value`` in ``dtype`` as a Python int (the kernel's constant)."""
    item = np.dtype(dtype).itemsize
    return int(np.asarray(value, dtype).reshape(1).view(BITS[item])[0])


def fill_kernel(shape, dtype, value, interpret: bool = False):
    """An array of ``shape`` and ``dtype`` with every element ``value`` (bit for bit)."""
    pl, pltriton = load_pallas()
    dtype = np.dtype(dtype)
    bits = BITS[dtype.itemsize]
    n = math.prod(shape)
    block = FILL_BLOCK_BYTES // dtype.itemsize
    word = _bits_of(value, dtype)

    def kernel(o_ref):
        pid = pl.program_id(0)
        valid = pid * block + jnp.arange(block, dtype=jnp.int32) < n
        tile = jnp.full((block,), word, bits)
        pltriton.store(o_ref.at[pl.ds(pid * block, block)], tile, mask=valid)

    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((n,), bits),
        grid=(-(-n // block),),
        interpret=interpret,
        compiler_params=pltriton.CompilerParams(num_warps=NUM_WARPS, num_stages=1),
    )()
    return lax.bitcast_convert_type(lax.reshape(out, tuple(shape)), dtype)


@dataclass(frozen=True)
class OneHotView:
    """ONE_HOT's output as ``(a, w)`` (the one-hot axis minor) in tiles of ``rows`` x ``cols``."""

    a: int
    w: int
    rows: int
    cols: int

    @property
    def grid(self) -> tuple[int, int]:
        return -(-self.a // self.rows), -(-self.w // self.cols)


def one_hot_plan(shape: tuple[int, ...], axis: int, dtype) -> OneHotView | None:
    """The kernel's view of a ONE_HOT writing ``shape`` along ``axis``, or None where lax stays."""
    if axis != len(shape) - 1 or not _covered(shape, dtype):
        return None
    w = shape[-1]
    tile = ONE_HOT_TILE_BYTES // np.dtype(dtype).itemsize
    cols = min(pow2_at_least(w), tile)
    return OneHotView(math.prod(shape[:-1]), w, max(1, tile // cols), cols)


def one_hot_kernel(index, on, off, v: OneHotView, dtype, interpret: bool = False):
    """``where(column == index[row], on, off)`` over ``(v.a, v.w)``, bit for bit.

    ``index``: int32, ``(v.a,)``, already in ``[0, w)`` or -1 (matching no column); ``on``,
    ``off``: scalars of ``dtype``.
    """
    pl, pltriton = load_pallas()
    dtype = np.dtype(dtype)
    bits = BITS[dtype.itemsize]
    words = lax.bitcast_convert_type(jnp.stack([off, on]).astype(dtype), bits)

    def kernel(i_ref, v_ref, o_ref):
        r, c = pl.program_id(0), pl.program_id(1)
        row = r * v.rows + jnp.arange(v.rows, dtype=jnp.int32)
        col = c * v.cols + jnp.arange(v.cols, dtype=jnp.int32)
        at = pltriton.load(i_ref.at[pl.ds(r * v.rows, v.rows)], mask=row < v.a, other=-1)
        off_word, on_word = v_ref[0], v_ref[1]
        tile = jnp.where(col[None, :] == at[:, None], on_word, off_word)
        valid = (row < v.a)[:, None] & (col < v.w)[None, :]
        at_out = (pl.ds(r * v.rows, v.rows), pl.ds(c * v.cols, v.cols))
        pltriton.store(o_ref.at[at_out], tile, mask=valid)

    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((v.a, v.w), bits),
        grid=v.grid,
        interpret=interpret,
        compiler_params=pltriton.CompilerParams(num_warps=NUM_WARPS, num_stages=1),
    )(index.astype(jnp.int32), words)
    return lax.bitcast_convert_type(out, dtype)


def _fill_applies(d: Any) -> bool:
    out = d.output_tensor
    return _covered(out.sizes, out.dtype)


def _fill_lower(d: Any) -> tuple:
    out = d.output_tensor
    return (fill_kernel(out.sizes, out.dtype, fill_constant_value(d)),)


def _one_hot_applies(d: Any) -> bool:
    out = d.output_tensor
    return one_hot_plan(out.sizes, d.axis, out.dtype) is not None


def _one_hot_lower(d: Any, idx, values) -> tuple:
    shape = d.output_tensor.sizes
    v = one_hot_plan(shape, d.axis, d.output_tensor.dtype)
    i, on, off = one_hot_parts(d, idx, values)
    y = one_hot_kernel(lax.reshape(i, (v.a,)), on, off, v, d.output_tensor.dtype)
    return (lax.reshape(y, tuple(shape)),)


# Standalone: in a graph XLA folds a constant or a compare-and-select into its consumer, which
# writes nothing at all.
register_fast_path(
    "DML_OPERATOR_FILL_VALUE_CONSTANT", "kernel", _fill_applies, _fill_lower, standalone=True
)
register_fast_path(
    "DML_OPERATOR_ONE_HOT", "kernel", _one_hot_applies, _one_hot_lower, standalone=True
)
