"""Narrow-type data movement on GPUs: move 32-bit words instead of 1- or 2-byte elements.

XLA's GPU code for float16 and int8 copies, slices, concatenations and broadcasts runs at a
fraction of the bandwidth it reaches for 32-bit types (on an H200: 3276 GB/s for float16, 1648
for int8, 4201 for float32; benchmarks/RESULTS.md). A movement that keeps the minor dimension
whole moves whole rows, so it can move the row's bytes as 32-bit words instead: the row
``[..., W]`` of ``s``-byte elements is bitcast to ``[..., W * s / 4]`` uint32 words, moved, and
bitcast back. Bitcasts are exact, so the result is bit-for-bit that of the element-wise move.
DEPTH_TO_SPACE interleaves elements of several channels inside each output row; ``d2s_words``
builds each output word from the input words with shifts and masks.

Dispatch follows ``kernels.reduce``: with no CUDA device the plain lowering is traced as is;
otherwise ``lax.platform_dependent`` lowers the word form for CUDA only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .reduce import _pallas, cuda_present

# Read at trace time; benchmarks turn it off to time the element-wise lowering.
ENABLED = True
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


def dispatch(xs: Sequence, plain: Callable, words: Callable):
    """``words(*xs)`` when lowered for CUDA (and enabled), else ``plain(*xs)``."""
    if not (ENABLED and cuda_present()):
        return plain(*xs)
    return lax.platform_dependent(*xs, cuda=words, default=plain)


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


S2D_ROWS = 8  # output rows per program of ``s2d_kernel``


def s2d_covered(shape, block: int) -> bool:
    """Whether ``s2d_kernel`` handles an NCHW input of ``shape`` with this block size."""
    n, c, h, w = shape
    ho, wo = h // block, w // block
    rows = min(S2D_ROWS, ho)
    return (
        block > 1
        and ho % rows == 0
        and wo >= 16
        and wo & (wo - 1) == 0
        and rows & (rows - 1) == 0
        and n * c * h * w < 2**31 - 2**20
    )


def s2d_kernel(x, block: int, dcr: bool):
    """SPACE_TO_DEPTH of NCHW ``x`` as a Pallas (Triton) kernel; CUDA only.

    Each program owns ``rows`` output rows of one input channel: for every block offset
    ``(i, j)`` it loads input rows ``h * b + i`` at columns ``w * b + j`` (a strided load; the
    ``b`` loads of one row share their cache lines) and stores them as contiguous rows of output
    channel ``(i, j, c)`` (DCR) or ``(c, i, j)`` (CRD). XLA's transpose for this permutation
    (the minor axis split by the block) reaches 0.69 of the copy on an H200.
    """
    pl, pltriton = _pallas()
    n, c, h, w = x.shape
    b = block
    ho, wo = h // b, w // b
    rows = min(S2D_ROWS, ho)
    nblk = ho // rows

    def kernel(x_ref, o_ref):
        pid = pl.program_id(0)
        nc, hb = pid // nblk, pid % nblk
        ni, ci = nc // c, nc % c
        for i in range(b):
            for j in range(b):
                src = x_ref.at[
                    pl.ds(nc * h + hb * rows * b + i, rows, stride=b), pl.ds(j, wo, stride=b)
                ]
                ch = (i * b + j) * c + ci if dcr else ci * b * b + i * b + j
                dst = o_ref.at[pl.ds((ni * c * b * b + ch) * ho + hb * rows, rows), :]
                pltriton.store(dst, pltriton.load(src))

    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((n * c * b * b * ho, wo), x.dtype),
        grid=(n * c * nblk,),
        compiler_params=pltriton.CompilerParams(num_warps=4, num_stages=1),
    )(lax.reshape(x, (n * c * h, w)))
    return lax.reshape(out, (n, c * b * b, ho, wo))
