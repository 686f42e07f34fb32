"""Narrow-type data movement on GPUs: move 32-bit words instead of 1- or 2-byte elements.

XLA's GPU code for float16 and int8 copies, slices, concatenations and broadcasts runs at a fraction
of the bandwidth it reaches for 32-bit types (on an H200: 3276 GB/s for float16, 1648 for int8, 4201
for float32; benchmarks/RESULTS.md#operators). A movement that keeps the minor dimension whole moves
whole rows, so it can move the row's bytes as 32-bit words instead: the row ``[..., W]`` of
``s``-byte elements is bitcast to ``[..., W * s / 4]`` uint32 words, moved, and bitcast back.
Bitcasts are exact, so the result is bit-for-bit that of the element-wise move. DEPTH_TO_SPACE
interleaves elements of several channels inside each output row; ``d2s_words`` builds each output
word from the input words with shifts and masks.

Two Pallas (Triton) kernels cover what XLA's own code still runs below the copy bandwidth:
``join_kernel`` (JOIN of 1-byte types: 4 KiB word blocks copied into their output slots) and
``d2s_kernel`` (DEPTH_TO_SPACE of float16 and 1-byte types: output words packed from the
block's channels).

The bottom of this module registers them as CUDA fast paths (``dml_jax.fastpath``) of TILE,
SPLIT, JOIN, DEPTH_TO_SPACE(1) and SPACE_TO_DEPTH(1).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..fastpath import register_fast_path
from ..ops.depth_space import (
    DCR,
    DepthToSpace1OperatorDesc,
    DepthToSpaceOperatorDesc,
    SpaceToDepth1OperatorDesc,
    SpaceToDepthOperatorDesc,
    lower_depth_space,
)
from ..ops.split_join import JoinOperatorDesc, SplitOperatorDesc, lower_split
from ..ops.tile import TileOperatorDesc, lower_tile
from .pallas_helpers import load_pallas

_NARROW = frozenset(np.dtype(t) for t in ("float16", "int16", "uint16", "int8", "uint8"))


def packable(shape: Sequence[int], dtype) -> bool:
    """Whether rows of ``shape``'s minor dimension fill whole 32-bit words (narrow types only)."""
    dt = np.dtype(dtype)
    return dt in _NARROW and len(shape) > 0 and shape[-1] * dt.itemsize % 4 == 0 and shape[-1] > 0


def to_words(x):
    """``[..., W]`` of 1- or 2-byte elements -> ``[..., W * itemsize / 4]`` uint32 (exact)."""
    per = 4 // x.dtype.itemsize
    y = lax.reshape(x, x.shape[:-1] + (x.shape[-1] // per, per))
    return lax.bitcast_convert_type(y, jnp.uint32)


def from_words(w, dtype):
    """Inverse of ``to_words``: uint32 ``[..., V]`` -> ``[..., V * 4 / itemsize]`` of dtype."""
    y = lax.bitcast_convert_type(w, np.dtype(dtype))
    return lax.reshape(y, w.shape[:-1] + (w.shape[-1] * y.shape[-1],))


def on_words(move: Callable, xs: Sequence, dtype) -> Callable:
    """``move`` applied to the word views of ``xs``; outputs converted back to ``dtype``.

    ``move`` must treat the minor dimension as a whole (slicing, concatenating, broadcasting or
    permuting only the other dimensions, or repeating whole rows), which is what makes the word
    view exact.
    """
    out = move(*[to_words(x) for x in xs])
    if isinstance(out, tuple | list):
        return type(out)(from_words(o, dtype) for o in out)
    return from_words(out, dtype)


def d2s_words(x, block: int, dcr: bool):
    """DEPTH_TO_SPACE of NCHW ``x`` (narrow type, ``packable``) computed on 32-bit words.

    Output row ``(c, h * b + i)`` is ``in[(i, j, c)][h, w]`` at column ``w * b + j`` (DCR; CRD
    orders the channel as ``(c, i, j)``). With ``m = 4 / itemsize`` elements per word, input
    words ``q`` of the ``b`` channels ``j`` hold exactly the elements of output words
    ``q * b .. q * b + b - 1``: output word ``t``'s element ``e`` is column ``p = t * m + e`` of
    the group, taken from channel ``j = p % b`` at element ``p // b`` of its word.
    """
    n, c, h, _ = x.shape
    item = x.dtype.itemsize
    m, bits = 4 // item, 8 * item
    co = c // (block * block)
    words = to_words(x)  # (n, c, h, wq)
    wq = words.shape[-1]
    if dcr:
        words = lax.reshape(words, (n, block, block, co, h, wq))
        chan = [[words[:, i, j] for j in range(block)] for i in range(block)]
    else:
        words = lax.reshape(words, (n, co, block, block, h, wq))
        chan = [[words[:, :, i, j] for j in range(block)] for i in range(block)]
    mask = jnp.uint32((1 << bits) - 1)
    rows = []
    for i in range(block):
        group = []
        for t in range(block):
            acc = None
            for e in range(m):
                p = t * m + e
                src = chan[i][p % block]
                part = (src >> jnp.uint32(bits * (p // block))) & mask
                part = part << jnp.uint32(bits * e)
                acc = part if acc is None else acc | part
            group.append(acc)
        rows.append(jnp.stack(group, axis=-1))  # (n, co, h, wq, b)
    out = jnp.stack(rows, axis=3)  # (n, co, h, b, wq, b)
    out = lax.reshape(out, (n, co, h * block, wq * block))
    return from_words(out, x.dtype)


# ---------------------------------------------------------------------------------------------
# JOIN: flat rows of 32-bit words


def join_covered(shapes: Sequence[Sequence[int]], axis: int, dtype) -> bool:
    """Whether ``join_flat`` handles pieces of ``shapes`` joined along ``axis``."""
    dt = np.dtype(dtype)
    if dt not in _NARROW or not shapes:
        return False
    inner = [math.prod(s[axis:]) * dt.itemsize for s in shapes]
    return all(n > 0 and n % 4 == 0 for n in inner) and math.prod(shapes[0][:axis]) > 0


def join_flat(xs: Sequence, axis: int):
    """JOIN along ``axis`` as a concatenation of flat rows of 32-bit words (exact).

    Every piece is ``O = prod(sizes[:axis])`` rows of ``prod(sizes[axis:])`` contiguous elements,
    and the output row ``o`` is the pieces' rows ``o`` one after another. Viewing each row as
    32-bit words (``to_words`` on the flattened row) makes XLA's concatenation move long
    contiguous runs of words; the 4-D word form (the minor dimension alone as words) measured
    the same as the element-wise one for int8.
    """
    dtype = xs[0].dtype
    rows = math.prod(xs[0].shape[:axis])
    flat = [to_words(lax.reshape(x, (rows, math.prod(x.shape[axis:])))) for x in xs]
    out = from_words(lax.concatenate(flat, 1), dtype)
    shape = list(xs[0].shape)
    shape[axis] = sum(x.shape[axis] for x in xs)
    return lax.reshape(out, tuple(shape))


JOIN_BLOCK_WORDS = 1024  # 32-bit words per program of ``join_kernel`` (4 KiB)


def join_kernel_covered(shapes: Sequence[Sequence[int]], axis: int, dtype) -> bool:
    """Whether ``join_kernel`` handles these pieces (rows of whole, aligned word blocks)."""
    if not join_covered(shapes, axis, dtype):
        return False
    item = np.dtype(dtype).itemsize
    words = [math.prod(s[axis:]) * item // 4 for s in shapes]
    total = math.prod(shapes[0][:axis]) * sum(words)
    return math.gcd(*words) >= 32 and total < 2**31 - 2**20


def join_kernel(xs: Sequence, axis: int, interpret: bool = False):
    """JOIN along ``axis`` as a Pallas (Triton) copy kernel on 32-bit words; CUDA only.

    Program ``(o, k)`` copies word block ``k`` of output row ``o``; the blocks (the largest
    power of two dividing every piece's row, at most ``JOIN_BLOCK_WORDS``) never straddle two
    pieces, so each program reads one piece (chosen with ``pl.when``) and writes one
    contiguous block.
    """
    pl, pltriton = load_pallas()
    dtype = xs[0].dtype
    rows = math.prod(xs[0].shape[:axis])
    flat = [to_words(lax.reshape(x, (rows, math.prod(x.shape[axis:])))) for x in xs]
    words = [f.shape[1] for f in flat]
    g = math.gcd(*words)
    blk = min(JOIN_BLOCK_WORDS, g & -g)
    starts = np.cumsum([0] + [w // blk for w in words]).tolist()
    nblk = starts[-1]

    def kernel(*refs):
        o_ref = refs[-1]
        pid = pl.program_id(0)
        o, k = pid // nblk, pid % nblk
        for i, ref in enumerate(refs[:-1]):

            @pl.when((k >= starts[i]) & (k < starts[i + 1]))
            def _copy(ref=ref, i=i):
                v = pltriton.load(ref.at[pl.ds(o * words[i] + (k - starts[i]) * blk, blk)])
                pltriton.store(o_ref.at[pl.ds(o * nblk * blk + k * blk, blk)], v)

    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((rows * nblk * blk,), jnp.uint32),
        grid=(rows * nblk,),
        interpret=interpret,
        compiler_params=pltriton.CompilerParams(num_warps=4, num_stages=1),
    )(*[lax.reshape(f, (f.size,)) for f in flat])
    shape = list(xs[0].shape)
    shape[axis] = sum(x.shape[axis] for x in xs)
    return lax.reshape(from_words(lax.reshape(out, (rows, nblk * blk)), dtype), tuple(shape))


# ---------------------------------------------------------------------------------------------
# DEPTH_TO_SPACE: output words packed from the block's channels

# Input rows per program of ``d2s_kernel``, per itemsize (at 1 GiB, block 2: float16 rows 2
# 0.97, 4 0.94; int8 rows 4 0.98, 2 0.88, 8 0.94).
D2S_ROWS = {1: 4, 2: 2}


def d2s_kernel_covered(shape: Sequence[int], dtype, block: int) -> bool:
    """Whether ``d2s_kernel`` handles an NCHW input of ``shape`` (narrow type) and block."""
    dt = np.dtype(dtype)
    if dt not in _NARROW or len(shape) != 4 or block < 2 or 4 % (block * dt.itemsize):
        return False
    n, c, h, w = shape
    k = 4 // (block * dt.itemsize)
    units = w // k if w % k == 0 else 0
    rows = min(D2S_ROWS[dt.itemsize], h)
    return (
        units >= 16
        and units & (units - 1) == 0
        and rows & (rows - 1) == 0
        and h % rows == 0
        and n * c * h * w < 2**31 - 2**20
    )


def d2s_kernel(x, block: int, dcr: bool, interpret: bool = False):
    """DEPTH_TO_SPACE of NCHW ``x`` (narrow type) as a Pallas (Triton) kernel; CUDA only.

    Output row ``(c, h * b + i)`` interleaves, element by element, input rows ``h`` of the
    ``b`` channels ``(i, j, c)`` (DCR; CRD orders the channel ``(c, i, j)``). With
    ``b * itemsize`` dividing 4, each output 32-bit word holds ``k = 4 / (b * itemsize)``
    consecutive elements of every one of the ``b`` channels: the program loads the ``b``
    channels' rows as units of ``k`` elements (uint8 or uint16), builds each word with shifts
    and ors (element ``e`` of the word is element ``e // b`` of channel ``e % b``'s unit), and
    stores whole contiguous output rows. Bitcasts outside the kernel make it exact.
    """
    pl, pltriton = load_pallas()
    n, c, h, w = x.shape
    b, item = block, x.dtype.itemsize
    k = 4 // (b * item)
    bits = 8 * item
    co = c // (b * b)
    units = w // k
    rows = min(D2S_ROWS[item], h)
    nblk = h // rows
    unit_dt = {1: jnp.uint8, 2: jnp.uint16}[k * item]
    if k * item == item:
        xu = lax.bitcast_convert_type(x, unit_dt)
    else:
        xu = lax.bitcast_convert_type(lax.reshape(x, (n, c, h, units, k)), unit_dt)
    xu = lax.reshape(xu, (n * c * h, units))
    mask = np.uint32((1 << bits) - 1)

    def kernel(x_ref, o_ref):
        pid = pl.program_id(0)
        nc, hb = pid // nblk, pid % nblk
        ni, ci = nc // co, nc % co
        for i in range(b):
            chans = []
            for j in range(b):
                ch = (i * b + j) * co + ci if dcr else ci * b * b + i * b + j
                src = x_ref.at[pl.ds((ni * c + ch) * h + hb * rows, rows), :]
                chans.append(pltriton.load(src).astype(jnp.uint32))
            acc = None
            for e in range(b * k):
                part = chans[e % b]
                if e // b:
                    part = lax.shift_right_logical(part, np.uint32(bits * (e // b)))
                if k > 1:
                    part = part & mask
                if e:
                    part = lax.shift_left(part, np.uint32(bits * e))
                acc = part if acc is None else acc | part
            dst = o_ref.at[pl.ds(nc * h + hb * rows, rows), pl.ds(i * units, units)]
            pltriton.store(dst, acc)

    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((n * co * h, b * units), jnp.uint32),
        grid=(n * co * nblk,),
        interpret=interpret,
        compiler_params=pltriton.CompilerParams(num_warps=4, num_stages=1),
    )(xu)
    return lax.reshape(from_words(out, x.dtype), (n, co, h * b, w * b))


def join(xs: Sequence, axis: int, plain: Callable):
    """JOIN on CUDA: ``join_kernel`` for 1-byte types where it is covered, else ``join_flat``
    where that is, else ``plain(*xs)``.

    At 1 GiB, int8: the kernel 0.98 of the copy, lax, 4-D words and flat words 0.78-0.79;
    float16 0.98 with every form, so 2-byte types keep the concatenation
    (benchmarks/RESULTS.md#operators).
    """
    dtype = xs[0].dtype
    shapes = [x.shape for x in xs]
    if np.dtype(dtype).itemsize == 1:
        if join_kernel_covered(shapes, axis, dtype):
            return join_kernel(xs, axis)
        if join_covered(shapes, axis, dtype):
            return join_flat(xs, axis)
    return plain(*xs)


def depth_to_space(x, block: int, dcr: bool, plain: Callable):
    """DEPTH_TO_SPACE on CUDA: ``d2s_kernel`` where it is covered, else ``d2s_words`` for
    narrow types whose rows fill whole words, else ``plain(x)``.

    At 1 GiB, block 2: the kernel 0.97-0.98 of the copy, lax 0.76 (float16) / 0.39 (int8),
    words 0.76 / 0.79 (benchmarks/RESULTS.md#operators).
    """
    if d2s_kernel_covered(x.shape, x.dtype, block):
        return d2s_kernel(x, block, dcr)
    if block > 1 and packable(x.shape, x.dtype):
        return d2s_words(x, block, dcr)
    return plain(x)


# ---------------------------------------------------------------------------------------------
# Registration: predicates on the descriptor, lowerings with the contract of the ops' lowerings


def _tile_words(d, x) -> tuple:
    # Repeats along the minor axis repeat whole rows, so the word view is exact.
    return (on_words(lambda w: lower_tile(d, w)[0], [x], x.dtype),)


def _split_words(d, x) -> tuple:
    return tuple(on_words(lambda w: lower_split(d, w), [x], x.dtype))


def _join_applies(d) -> bool:
    first = d.input_tensors[0]
    shapes = [t.sizes for t in d.input_tensors]
    return first.dtype.itemsize == 1 and join_covered(shapes, d.axis, first.dtype)


def _join_words(d, *xs) -> tuple:
    return (join(xs, d.axis, lambda *ys: lax.concatenate(ys, d.axis)),)


def _d2s_applies(d) -> bool:
    x = d.input_tensor
    return d.block_size > 1 and packable(x.sizes, x.dtype)


def _d2s_words(d, x) -> tuple:
    dcr = d.depth_space_order is DCR
    return (depth_to_space(x, d.block_size, dcr, lambda y: lower_depth_space(d, y)[0]),)


def _s2d_slices(d, x) -> tuple:
    # One strided slice per block offset (i, j), concatenated along the channels (DCR) or
    # stacked after each channel (CRD): XLA emits one fused copy at 0.96 of the copy on an H200,
    # where the reshape/transpose form (the minor axis split by the block) ran 0.69.
    return (_to_depth_slices(d, x),)


def _to_depth_slices(d, x):
    """SPACE_TO_DEPTH as b * b strided slices, concatenated (the CUDA form)."""
    n, c, h, w = x.shape
    b = d.block_size
    parts = [lax.slice(x, (0, 0, i, j), x.shape, (1, 1, b, b)) for i in range(b) for j in range(b)]
    if d.depth_space_order is DCR:
        return lax.concatenate(parts, 1)
    parts = [lax.broadcast_in_dim(p, (n, c, 1, h // b, w // b), (0, 1, 3, 4)) for p in parts]
    return lax.reshape(lax.concatenate(parts, 2), (n, c * b * b, h // b, w // b))


register_fast_path(
    TileOperatorDesc.operator_type,
    "words",
    lambda d: packable(d.input_tensor.sizes, d.input_tensor.dtype),
    _tile_words,
)
register_fast_path(
    SplitOperatorDesc.operator_type,
    "words",
    lambda d: (
        d.axis != d.input_tensor.rank - 1 and packable(d.input_tensor.sizes, d.input_tensor.dtype)
    ),
    _split_words,
)
register_fast_path(JoinOperatorDesc.operator_type, "words", _join_applies, _join_words)
for _cls in (DepthToSpaceOperatorDesc, DepthToSpace1OperatorDesc):
    register_fast_path(_cls.operator_type, "words", _d2s_applies, _d2s_words)
for _cls in (SpaceToDepthOperatorDesc, SpaceToDepth1OperatorDesc):
    register_fast_path(_cls.operator_type, "slices", lambda d: d.block_size > 1, _s2d_slices)
