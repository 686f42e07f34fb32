"""Pallas (Triton) kernels for integer-factor bilinear upsampling at pixel centres and for
nearest-neighbour repeats, the CUDA fast paths of UPSAMPLE_2D and RESAMPLE / RESAMPLE1 /
RESAMPLE2 / RESAMPLE3.

XLA's code for the lax lowering (two static gathers and a weighted sum per axis, fused into one
loop that gathers four inputs per output element) runs at 0.47 of the copy for 2x float32 on an
H200 and 0.33 for float16 (1 GiB output). With an integer factor ``f``
and half-pixel centres, output ``o = q * f + p`` of an axis blends inputs ``q + s[p]`` and
``q + s[p] + 1`` (clamped) with weights that depend on the phase ``p`` only (``s[p]`` is -1 or
0). So a program here owns a tile of input rows and columns and writes the outputs they produce:

- Rows: the tile holds ``rows`` consecutive row pairs ``(r, r + 1)`` (``r`` from -1 to H - 1,
  clamped), loaded once as two tiles; phase ``py`` of pair ``r`` is output row
  ``(r - s[py]) * fh + py``, so each phase is one store of ``rows`` output rows, ``fh`` apart.
- Columns: the two row tiles are read at column shifts -1, 0 and +1 (clamped) and blended
  vertically (float16 rows of even width, 2x: read as 32-bit words of two elements, the
  neighbours -1 and +1 taken from halves of the words either side, so that the shifted tiles
  are 4-byte loads, not 2-byte ones); each column phase blends two of those, and for a
  power-of-two ``fw`` the phases are interleaved in registers (a tree of joins) into contiguous
  output rows, stored as vectors.
  Other ``fw`` store each phase ``fw`` elements apart (for 2x and 4x that ran 0.52 / 0.22 of the
  copy in float32 against 0.90 / 0.88 interleaved, same tiles).

Where an input element makes 16 or more outputs (4x), float32 runs one call per chunk of images
(``CHUNK_BYTES`` of input), each after a small call that reads the chunk's input into L2, so
that the upsampling's DRAM traffic is writes alone (64 MiB of reads among a 1 GiB write stream
cost it about 15%).

On the H200 (benchmarks/resample_variants.py (git history), benchmarks/RESULTS.md#operators): 2x
0.92 of the copy in float32 and float16 (0.86 with 2-byte loads), 4x float32 0.91-0.93 in chunks
(0.87-0.89 in one call), float16 0.89.

Values: the lax lowering's formula and order (the vertical blend ``x[i0] * wy0 + x[i1] * wy1``
first, then the horizontal one, in float32; float16 read into float32 and rounded once), with
the lowering's own indices and float32 weights: ``plan`` takes them from ``ops.resample.plan``'s
tables and declines unless they are exactly periodic. A compiler may contract a product and a
sum into one fused multiply-add, and XLA and Triton need not choose alike: the stated tolerance
is 4 float32 ulps of the largest input magnitude (float16: one float16 ulp of the result more;
tests/test_resample_kernel.py, docs/semantics.md). On the H200 every element of the sweep's
cases came out equal bit for bit; Pallas interpret mode on a CPU differs from XLA's CPU code by
an ulp at some elements, except where every product and sum is exact.

``plan`` accepts LINEAR mode, integer scales from 2 to ``MAX_FACTOR`` on the last two
dimensions with the pixel-centre offsets 0.5 / -0.5, the output exactly ``factor`` times the
input there and an exact copy along every other dimension (scale 1), float32 or float16.
RESAMPLE3's Antialiased changes nothing at these scales (it widens the filter only where
Scale < 1) and is accepted.

NEAREST_NEIGHBOR at power-of-two integer factors, where the lax tables repeat each input element
(``repeat_plan``), takes ``repeat_kernel`` for 1- and 2-byte types: the bits move, each element
repeated along the row in registers and each row stored ``fh`` times; 2x float16 0.94 of the copy on
an H100 against XLA's 0.69 (benchmarks/RESULTS.md#operators). 4-byte types stay with lax (0.94
already).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..enums import InterpolationMode
from ..fastpath import register_fast_path
from ..ops.resample import geometry, repeats
from ..ops.resample import plan as lax_plan
from .pallas_helpers import load_pallas
from .reduce_plan import pow2_at_least, pow2_at_most

DTYPES = frozenset(np.dtype(t) for t in ("float16", "float32"))
MAX_FACTOR = 8  # phases are unrolled: fh * fw blends per tile
_INDEX_LIMIT = 2**31 - 2**24  # int32 element offsets, with room for a tile past the end

# Output elements per program, input columns per tile and warps; chosen by
# benchmarks/resample_variants.py (git history) on an H200 (benchmarks/RESULTS.md#operators): 2048
# elements on 4 warps 0.92 / 0.86 of the copy for 2x / 4x float32 (1024 to 8192 elements, 2 to 8
# warps, 0.86 to 0.93; 16384 on 8 warps 0.79 / 0.86). A loop-free kernel: 2 pipeline stages ran as
# 1.
TILE_ELEMENTS = 2048
# Output elements per program where an input element makes 16 or more (4x and up), per type:
# 4x float32 4096 on 4 warps 0.899 against 2048's 0.885 (1024 on 1 warp 0.896; 8192 0.875-0.888);
# float16 keeps 2048 (0.898 against 0.888) (benchmarks/RESULTS.md#operators).
BIG_FACTOR_TILE = {"float32": 4096}
MAX_COLS = 128
WARPS = 4
STAGES = 1
# float16 rows of even width are read as 32-bit words where the column factor is at most
# WORDS_MAX_FACTOR, on WORDS_WARPS warps: 2x 0.92 of the copy against 0.86 with 2-byte loads.
# It pays only with at least a word or two a thread: 4x float16 (64-column rows, 32 words)
# ran 0.21 to 0.88 read as words against 0.89 read as 2-byte elements.
WORDS_MAX_FACTOR = 2
WORDS_WARPS = 2
# Whether the output stores carry the L2 hint evict_first (written once, so the input rows that
# neighbouring tiles read again keep their place in L2). Two sweeps on the H200
# (benchmarks/RESULTS.md#operators): 4x float32 0.861 -> 0.869-0.879 at 2048 on 4 warps,
# 2x 0.909-0.915 -> 0.921-0.922, float16 words 0.931-0.933 -> 0.938-0.942, the rest within
# 0.01. Several tiles a program in turn, each next tile's words loaded before this one's
# stores, lost everywhere (0.79-0.84 for 4x float32; tiles_sweep.json, the variant in commit
# 938b98a), so a program takes one tile.
EVICT_STORES = True
# Input bytes a chunk, per data type, where an input element makes 16 or more outputs (none: one
# call). Chunked, the upsampling is one call per chunk of whole images, each after a call that reads
# the chunk's input into L2 (loads ``evict_last``; a sum a block is kept so that the loads are), so
# that the upsampling's reads hit L2 and its DRAM traffic is writes alone. The 4x float32 store
# pattern ran 0.87-0.89 of the copy with any read from DRAM among its writes (even one 1 KiB load a
# program, or loads no store waits for) and 1.10 with its input resident in L2
# (benchmarks/upsample_store_probe.py (git history)). Chunks of 8 MiB, medians of three timings: 4x
# float32 0.87-0.89 -> 0.91-0.93 (12 MiB 0.90-0.92; one earlier run: 4 MiB 0.80-0.82, 16-24 MiB
# 0.84-0.88). float16 gained with 4096-element tiles (0.88 -> 0.93) but lost with its default 2048
# (0.89 -> 0.86), so it stays one call. At 2x (more input, so more and longer prefetch calls) chunks
# lost everywhere (0.46-0.73 against 0.85-0.92), hence the factor bound.
CHUNK_BYTES = {"float32": 8 << 20}
PREFETCH_BLOCK = 4096  # elements a program of the prefetching call reads


@dataclass(frozen=True)
class Axis:
    """One upsampled axis: its input ``size``, the integer ``factor`` and, per phase ``p``, the
    offset ``shift[p]`` (-1 or 0) of the lower input from ``q`` and the float32 weights ``w0[p]``
    of ``q + shift[p]`` and ``w1[p]`` of the next input (both clamped into the axis)."""

    size: int
    factor: int
    shift: tuple[int, ...]
    w0: tuple[float, ...]
    w1: tuple[float, ...]


@dataclass(frozen=True)
class View:
    """The kernel's view: ``lead`` images of ``h.size x w.size`` (every leading dimension
    merged) in tiles of ``rows`` row pairs by ``cols`` input columns, on ``warps`` warps and
    ``stages`` pipeline stages, the input read as words of ``pack`` elements (1, or 2 for
    float16 rows of even width)."""

    lead: int
    h: Axis
    w: Axis
    rows: int
    cols: int
    warps: int
    stages: int = 1
    pack: int = 1
    store_policy: str | None = None
    chunk: int = 0  # images a call (0: one call), each call after its chunk's prefetch

    @property
    def row_tiles(self) -> int:
        return -(-(self.h.size + 1) // self.rows)  # pairs r = -1 .. H - 1

    @property
    def col_tiles(self) -> int:
        return -(-self.w.size // self.cols)

    @property
    def programs(self) -> int:
        return self.lead * self.row_tiles * self.col_tiles


def periodic_axis(n_in: int, n_out: int, indices: np.ndarray, weights: np.ndarray) -> Axis | None:
    """The ``Axis`` whose phases reproduce one dimension's lax table exactly, or None.

    Args:
        n_in, n_out: the dimension's input and output extents.
        indices, weights: ``plan_axis``'s table for it (two taps, weights in float64; the lax
            lowering multiplies by them in float32).
    """
    if indices.shape[1] != 2 or n_out % n_in or not 2 <= n_out // n_in <= MAX_FACTOR:
        return None
    if not all(np.any(weights[:, k] != 1) for k in range(2)):
        return None  # the lowering would skip a multiplication the kernel does
    f = n_out // n_in
    p = np.arange(f)
    shift = np.where(2 * p + 1 < f, -1, 0)  # floor((p + 0.5) / f - 0.5)
    q = np.arange(n_out) // f
    lower = q + np.tile(shift, n_in)
    w32 = weights.astype(np.float32)
    periodic = np.array_equal(w32, np.tile(w32[:f], (n_in, 1)))
    clamped = all(np.array_equal(indices[:, k], np.clip(lower + k, 0, n_in - 1)) for k in range(2))
    if not (periodic and clamped):
        return None
    return Axis(
        n_in, f, tuple(int(s) for s in shift), *(tuple(map(float, w32[:f, k])) for k in range(2))
    )


def plan(d: Any) -> View | None:
    """The kernel's view of an UPSAMPLE_2D / RESAMPLE* description, or None where lax stays."""
    x, out = d.input_tensor, d.output_tensor
    if np.dtype(x.dtype) not in DTYPES or x.rank < 2:
        return None
    g = geometry(d)
    if g.mode is not InterpolationMode.LINEAR:
        return None
    for axis in (x.rank - 2, x.rank - 1):
        s = g.scales[axis]
        if s != round(s) or (g.input_offsets[axis], g.output_offsets[axis]) != (0.5, -0.5):
            return None
    if max(x.element_count, out.element_count) >= _INDEX_LIMIT:
        return None
    steps = lax_plan(d)
    if [axis for axis, _, _ in steps] != [x.rank - 2, x.rank - 1]:
        return None  # another dimension is resampled too, or one of these is not
    (_, hi, hw), (_, wi, ww) = steps
    h = periodic_axis(x.sizes[-2], out.sizes[-2], hi, hw)
    w = periodic_axis(x.sizes[-1], out.sizes[-1], wi, ww)
    if h is None or w is None:
        return None
    words = np.dtype(x.dtype).itemsize == 2 and w.size % 2 == 0 and w.factor <= WORDS_MAX_FACTOR
    pack, warps = (2, WORDS_WARPS) if words else (1, WARPS)
    elements = TILE_ELEMENTS
    if h.factor * w.factor >= 16:
        elements = BIG_FACTOR_TILE.get(np.dtype(x.dtype).name, elements)
    tile = max(1, elements // (h.factor * w.factor))  # input elements per tile
    cols = max(pack, min(pow2_at_least(w.size), MAX_COLS, tile))
    rows = min(pow2_at_most(max(1, tile // cols)), pow2_at_least(h.size + 1))
    policy = "evict_first" if EVICT_STORES else None
    lead = math.prod(x.sizes[:-2])
    chunk = 0
    chunk_bytes = CHUNK_BYTES.get(np.dtype(x.dtype).name, 0)
    if h.factor * w.factor >= 16 and chunk_bytes:
        chunk = max(1, chunk_bytes // (h.size * w.size * np.dtype(x.dtype).itemsize))
        chunk = 0 if chunk >= lead else chunk
    return View(lead, h, w, rows, cols, warps, STAGES, pack, policy, chunk)


def _interleave(parts: list):
    """``out[..., k * len(parts) + i] = parts[i][..., k]`` for a power-of-two count of parts:
    joins of pairs (Triton's interleave, done in registers)."""
    if len(parts) == 1:
        return parts[0]
    even, odd = _interleave(parts[0::2]), _interleave(parts[1::2])
    joined = jnp.stack([even, odd], axis=-1)
    return joined.reshape(joined.shape[:-2] + (joined.shape[-2] * 2,))


def _half(word, e: int):
    """Element ``e`` (0: the low 16 bits) of float16 pairs read as 32-bit words, in float32."""
    bits = (word >> 16 if e else word).astype(jnp.uint16)
    return jax.lax.bitcast_convert_type(bits, jnp.float16).astype(jnp.float32)


def upsample_kernel(x, v: View, interpret: bool = False):
    """``x`` (``(..., H, W)``) upsampled by ``v.h.factor`` x ``v.w.factor`` as ``v`` says."""
    pl, pltriton = load_pallas()
    h, w, g = v.h, v.w, v.pack
    oh, ow = h.size * h.factor, w.size * w.factor
    n_out = v.lead * oh * ow
    rows, cols, tr, tc = v.rows, v.cols, v.row_tiles, v.col_tiles
    wn, cw = w.size // g, cols // g  # words a row, words a tile
    exact = w.size % cols == 0
    interleave = w.factor & (w.factor - 1) == 0

    # The word offsets a tile reads: each column phase blends columns p and p + 1 of a word.
    offsets = sorted(
        {(e + w.shift[px] + k) // g for e in range(g) for px in range(w.factor) for k in (0, 1)}
    )
    keys = [(dr, dm) for dr in (0, 1) for dm in offsets]

    def place(t):
        """Tile ``t``'s image, the pairs' lower input rows and its words in its rows."""
        n, rest = t // (tr * tc), t % (tr * tc)
        i, j = rest // tc, rest % tc
        r = i * rows - 1 + jnp.arange(rows, dtype=jnp.int32)
        m = j * cw + jnp.arange(cw, dtype=jnp.int32)
        return n, j, r, m

    def load_words(x_ref, t) -> tuple:
        """Tile ``t``'s input rows ``r + dr`` (clamped) at words ``m + dm`` for each key."""
        n, _, r, m = place(t)
        image = n * (h.size * wn)
        out = []
        for dr, dm in keys:
            at_r = image + jnp.clip(r + dr, 0, h.size - 1) * wn
            # Unclamped columns: every load of the tile keeps Triton's contiguity along the
            # row, so all of them (and the blends) share one layout; the unshifted words load
            # as vectors where the tiles divide W. (Clamped shifted columns gave the loads a
            # second layout and moved the blends between the two through shared memory: 55
            # barriers in the 4x float32 kernel.) ``tile`` puts the clamped edge in place.
            at_m = m + dm
            if dm == 0 and exact:
                out.append(x_ref[at_r[:, None] + at_m[None, :]])
                continue
            mask = jnp.broadcast_to(((at_m >= 0) & (at_m < wn))[None, :], (rows, cw))
            out.append(pltriton.load(x_ref.at[at_r[:, None] + at_m[None, :]], mask=mask, other=0))
        return tuple(out)

    def emit(o_ref, t, loaded):
        """Tile ``t``'s outputs from its loaded words."""
        n, j, r, m = place(t)
        words = dict(zip(keys, loaded))

        @functools.cache
        def tile(dr: int, p: int):
            """Input rows ``r + dr`` at columns ``g * m + p`` (``p`` from -1 to ``g``), clamped,
            in float32. With words of two elements the neighbours -1 and ``g`` are halves of
            the words either side, read with 4-byte loads rather than 2-byte ones."""
            dm, e = divmod(p, g)
            if g == 1:
                value = words[dr, dm].astype(jnp.float32)
            else:
                value = _half(words[dr, dm], e)
            if dm < 0:  # column -1 clamps to column 0
                value = jnp.where(m[None, :] == 0, tile(dr, 0), value)
            elif dm > 0:  # column W clamps to column W - 1
                value = jnp.where(m[None, :] == wn - 1, tile(dr, g - 1), value)
            return value

        def store_row_phase(py: int):
            """Output rows ``(r - s[py]) * fh + py``: the vertical blend (the lax lowering's
            height step) at each column the column phases read, then theirs."""
            q = r - h.shift[py]
            valid = (q >= 0) & (q < h.size)
            # Masked rows point past the end (never written; interpret mode drops them).
            out_row = jnp.where(valid, n * oh + q * h.factor + py, v.lead * oh)

            @functools.cache
            def vertical(p: int):
                return tile(0, p) * h.w0[py] + tile(1, p) * h.w1[py]

            # Output column (g * m + e) * fw + px, for element e of a word and phase px.
            phases = [
                (vertical(e + w.shift[px]) * w.w0[px] + vertical(e + w.shift[px] + 1) * w.w1[px])
                for e in range(g)
                for px in range(w.factor)
            ]
            phases = [p.astype(o_ref.dtype) for p in phases]
            if interleave:
                out_cols = [j * cols * w.factor + jnp.arange(cols * w.factor, dtype=jnp.int32)]
                values = [_interleave(phases)]
            else:
                out_cols = [(g * m + e) * w.factor + px for e in range(g) for px in range(w.factor)]
                values = phases
            for oc, value in zip(out_cols, values):
                at = out_row[:, None] * ow + oc[None, :]
                mask = jnp.broadcast_to(valid[:, None], at.shape)
                if not exact:
                    col_ok = jnp.broadcast_to((oc < ow)[None, :], at.shape)
                    mask = mask & col_ok
                    at = jnp.where(col_ok, at, n_out)
                pltriton.store(o_ref.at[at], value, mask=mask, eviction_policy=v.store_policy)

        for py in range(h.factor):
            store_row_phase(py)

    def kernel(t0: int):
        """The kernel for the tiles from ``t0`` on (a chunk's); its arguments are the input,
        then, in a chunk's call, the prefetch's sums (only to order the calls) and the output
        so far (the same buffer as its output), then the output."""

        def body(x_ref, *rest):
            t = pl.program_id(0) + t0
            emit(rest[-1], t, load_words(x_ref, t))

        return body

    flat = jax.lax.reshape(x, (x.size // g, g) if g > 1 else (x.size,))
    if g > 1:
        flat = jax.lax.bitcast_convert_type(flat, jnp.uint32)
    params = pltriton.CompilerParams(num_warps=v.warps, num_stages=v.stages)
    out_shape = jax.ShapeDtypeStruct((n_out,), x.dtype)
    if not v.chunk:
        out = pl.pallas_call(
            kernel(0), out_shape=out_shape, grid=(v.programs,), interpret=interpret,
            compiler_params=params,
        )(flat)  # fmt: skip
        return jax.lax.reshape(out, x.shape[:-2] + (oh, ow))

    def prefetch(e0: int, e1: int):
        """Reads input words ``e0`` to ``e1`` (into L2); returns a sum a block. Its arguments:
        the input and, after the first chunk, the output so far (not read: it only makes the
        call wait for the previous chunk's, so that no prefetch runs ahead of its chunk)."""
        block = PREFETCH_BLOCK

        def body(x_ref, *rest):
            s_ref = rest[-1]
            at = e0 + pl.program_id(0) * block + jnp.arange(block, dtype=jnp.int32)
            words = pltriton.load(x_ref.at[at], mask=at < e1, other=0, eviction_policy="evict_last")
            s_ref[pl.program_id(0)] = jnp.sum(words.astype(jnp.float32))

        grid = -(-(e1 - e0) // block)
        return pl.pallas_call(
            body, out_shape=jax.ShapeDtypeStruct((grid,), jnp.float32), grid=(grid,),
            interpret=interpret, compiler_params=pltriton.CompilerParams(num_warps=4),
        )  # fmt: skip

    out = None
    words_per_image = h.size * wn
    for n0 in range(0, v.lead, v.chunk):
        n1 = min(v.lead, n0 + v.chunk)
        after = () if out is None else (out,)
        token = prefetch(n0 * words_per_image, n1 * words_per_image)(flat, *after)
        call = pl.pallas_call(
            kernel(n0 * tr * tc), out_shape=out_shape, grid=((n1 - n0) * tr * tc,),
            interpret=interpret, compiler_params=params,
            input_output_aliases={} if out is None else {2: 0},
        )  # fmt: skip
        out = call(flat, token) if out is None else call(flat, token, out)
    return jax.lax.reshape(out, x.shape[:-2] + (oh, ow))


# Nearest neighbour at integer power-of-two factors: each input element repeated fh x fw times,
# which the lax lowering does as a broadcast and a reshape; XLA's code ran it at 0.94 of the copy
# in float32 but 0.49 in float16 on an H200 (2-byte stores). ``repeat_kernel`` moves the bits:
# a program loads a tile of input rows, repeats each element fw times in registers (the same
# tree of joins as the bilinear phases) and stores the widened rows fh times. Output elements a
# program (a power of two) and warps: chosen on an H100 (benchmarks/RESULTS.md#operators).
# 2x float16 to 1 GiB: 8192 on 4 warps 0.92-0.93 of the copy (4096-32768 on 4 or 8 warps 0.89-0.93;
# lax 0.69 there). 4-byte types stay with lax, already at 0.94 (the kernel 0.91-0.93).
REPEAT_TILE = 8192
REPEAT_WARPS = 4
REPEAT_MAX_FACTOR = 8
BITS = {1: jnp.uint8, 2: jnp.uint16}  # the element types the kernel takes, by their bits


@dataclass(frozen=True)
class RepeatView:
    """``rows`` input rows of ``w`` elements (every leading dimension and H merged), each
    element repeated ``fw`` times along the row and each row ``fh`` times, in tiles of ``tr``
    rows by ``tc`` columns."""

    rows: int
    w: int
    fh: int
    fw: int
    tr: int
    tc: int


def repeat_plan(d: Any) -> RepeatView | None:
    """The repeat kernel's view of a NEAREST_NEIGHBOR description, or None where lax stays:
    the lax tables must repeat each input of the last two dimensions a power of two times (up
    to ``REPEAT_MAX_FACTOR``; 1 where a dimension is copied) and copy every other dimension."""
    x, out = d.input_tensor, d.output_tensor
    if np.dtype(x.dtype).itemsize not in BITS or x.rank < 2:
        return None
    if geometry(d).mode is InterpolationMode.LINEAR:
        return None
    if max(x.element_count, out.element_count) >= _INDEX_LIMIT:
        return None
    factors = {x.rank - 2: 1, x.rank - 1: 1}
    for axis, indices, _ in lax_plan(d):
        r = repeats(indices, x.sizes[axis])
        if axis not in factors or r is None or r & (r - 1) or r > REPEAT_MAX_FACTOR:
            return None
        factors[axis] = r
    fh, fw = factors[x.rank - 2], factors[x.rank - 1]
    if fh * fw == 1:
        return None
    w = x.sizes[-1]
    tc = min(pow2_at_least(w), max(1, REPEAT_TILE // (fh * fw * 16)))  # 16 rows a tile or more
    tr = max(1, REPEAT_TILE // (fh * fw * tc))
    return RepeatView(math.prod(x.sizes[:-1]), w, fh, fw, tr, tc)


def repeat_kernel(x, v: RepeatView, interpret: bool = False):
    """``x`` (``(..., H, W)``) with each element repeated ``v.fh`` x ``v.fw`` times, bit for
    bit (the elements move as unsigned integers of their width). Tiles at the edges are masked
    element by element (flat int32 offsets, as in ``upsample_kernel``)."""
    pl, pltriton = load_pallas()
    bits = BITS[x.dtype.itemsize]
    ow = v.w * v.fw
    flat = jax.lax.bitcast_convert_type(jax.lax.reshape(x, (x.size,)), bits)
    col_tiles = -(-v.w // v.tc)

    def kernel(x_ref, o_ref):
        t = pl.program_id(0)
        r = (t // col_tiles) * v.tr + jnp.arange(v.tr, dtype=jnp.int32)
        c = (t % col_tiles) * v.tc + jnp.arange(v.tc, dtype=jnp.int32)
        ok = (r < v.rows)[:, None] & (c < v.w)[None, :]
        tile = pltriton.load(x_ref.at[r[:, None] * v.w + c[None, :]], mask=ok, other=0)
        wide = _interleave([tile] * v.fw)
        oc = (t % col_tiles) * (v.tc * v.fw) + jnp.arange(v.tc * v.fw, dtype=jnp.int32)
        out_ok = (r < v.rows)[:, None] & (oc < ow)[None, :]
        for py in range(v.fh):
            at = (r * v.fh + py)[:, None] * ow + oc[None, :]
            pltriton.store(o_ref.at[at], wide, mask=out_ok)

    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((x.size * v.fh * v.fw,), bits),
        grid=(-(-v.rows // v.tr) * col_tiles,),
        interpret=interpret,
        compiler_params=pltriton.CompilerParams(num_warps=REPEAT_WARPS, num_stages=1),
    )(flat)
    shape = x.shape[:-2] + (x.shape[-2] * v.fh, ow)
    return jax.lax.reshape(jax.lax.bitcast_convert_type(out, x.dtype), shape)


def _applies(d: Any) -> bool:
    return d.interpolation_mode is InterpolationMode.LINEAR and plan(d) is not None


def _lower_repeat(d: Any, x) -> tuple:
    return (repeat_kernel(x, repeat_plan(d)),)


def _lower(d: Any, x) -> tuple:
    return (upsample_kernel(x, plan(d)),)


for _op in ("UPSAMPLE_2D", "RESAMPLE", "RESAMPLE1", "RESAMPLE2", "RESAMPLE3"):
    register_fast_path(f"DML_OPERATOR_{_op}", "kernel", _applies, _lower)
    register_fast_path(
        f"DML_OPERATOR_{_op}", "repeat", lambda d: repeat_plan(d) is not None, _lower_repeat
    )
