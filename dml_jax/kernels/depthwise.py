"""A Pallas (Triton) kernel for 2-D depthwise convolution on CUDA GPUs, for its first call.

The lax lowering (``dml_jax.ops.conv_forms``) gives an undilated depthwise window on GPUs to
XLA's grouped convolution, which runs on cuDNN. XLA times every cuDNN algorithm of each such
convolution while it compiles, and cuDNN builds each one's plan at its first run: for a network
of depthwise layers that is most of its first call (MobileNetV3-Large on an H100, float16,
batch 64: 17.8 s of compile and first run, against 3.2 s with this kernel). This kernel has
nothing to tune and no plan to build; in those networks it runs within 0-4% of cuDNN's call
time (docs/onnx.md, "First-call time").

It runs channels-last, as XLA lays out the activations around a GPU network's products and
convolutions: the transposes into and out of it cancel against theirs (with the channels
second it moved the same data faster alone, but made MobileNetV3 12% slower whole). A program
owns a band of output rows of one image by ``cols`` output columns by ``block_channels``
channels and walks down it one output row at a time, as the pooling kernel does
(``kernels/pooling.py``). Each step loads the input rows the new output row adds to the window
(its last ``stride`` rows), every window column as one shifted load of the row, masked where
the window hangs over the padding, and adds each row, times the taps of every window row it
stands at, to the float32 sums of the output rows whose windows hold it (one to
``ceil(KH / stride)`` of them, carried from step to step). The taps are loaded once per
program. So the input is read from memory about once and each output is written once.

Windows of more than ``UNROLLED_TAPS`` points (7x7, ConvNeXt's) take the looped form
(``View.looped``): unrolled as above, with 49 taps and seven pending sums in registers, Triton
took 3-12 s to compile each shape, longer than cuDNN's search (and the kernel ran 0.74-1.22x
cuDNN's time). The looped form's step computes ``STEP_ROWS`` output rows: a loop over the input
rows of their windows loads each once (``KW`` shifted loads) and adds it, times the taps of the
window row it is for each output row (loaded at each use, zero where it is in none), to that
row's sums; channels are contiguous, so a thread loads several channels of input and taps in
one vector load. On an H100 (float16, batch 64, ConvNeXt-T's four shapes, 2026-11-27) it
compiled in 0.5-1.0 s per shape against cuDNN's 1.4-4.6 s of search and plan, and ran 281 us
against cuDNN's 202-218 at 96 channels of 56x56, 146 against 116-117 at 192 of 28x28, 73-74
against 61-66 at 384 of 14x14 and 49-64 against 76-85 at 768 of 7x7 (two runs). Unrolling the input rows
of a step with the taps loaded once ran up to 20% faster but compiled in 3-6 s again; one output
row a step ran 16-60% slower, four 0-8% slower than two, and larger or smaller tiles and
bands, or two warps, no faster. In ConvNeXt-T whole its call was 1-2% slower than with cuDNN
(4.26 against 4.19 ms) and its first call 10.1 s against 15.6 (docs/onnx.md, "Depthwise windows
on the GPU").

Values are the lax lowering's up to the order of the additions: each output is the sum, in
float32, of the same products of the input and the (flipped, for CONVOLUTION mode) filter,
rounded once to the output type (cuDNN's float16 convolution accumulates in float32 and
rounds once); then, as the lax lowering does, the bias is added in float32 to that rounded
value and the fused activation applied before the last rounding. Each kernel is one jitted
function per shape, so a network's equal convolutions are traced and lowered to Triton once.

Registered as the CUDA fast path of CONVOLUTION for FORWARD 2-D depthwise windows (GroupCount
= C > 1, one output channel per input channel, no dilation) of float16 or float32, of at most
``MAX_TAPS`` points and at least as tall as the row stride; not standalone (the grouped
convolution it replaces fuses with nothing either). Larger windows stay on cuDNN.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..enums import ConvolutionDirection, ConvolutionMode
from ..fastpath import register_fast_path
from ..fused import apply_fused
from .pallas_helpers import load_pallas
from .reduce_plan import pow2_at_least

DTYPES = frozenset(np.dtype(t) for t in ("float16", "float32"))
MAX_TAPS = 49  # window points (7x7); larger windows stay on cuDNN
UNROLLED_TAPS = 25  # up to 5x5 the window's rows are unrolled; larger ones loop over them
STEP_ROWS = 2  # output rows a looped kernel's step computes (the module docstring says why)
_INDEX_LIMIT = 2**31 - 2**20  # int32 element offsets, with room for a tile past the end
# Fused activations computed in the kernel (element-wise, lowered by Pallas's Triton backend).
ACTIVATIONS = frozenset(
    f"DML_OPERATOR_ACTIVATION_{a}"
    for a in ("IDENTITY", "LINEAR", "RELU", "LEAKY_RELU", "SIGMOID", "TANH")
)

TILE_ELEMENTS = 512  # output elements per step (cols x block_channels)
MAX_BLOCK_CHANNELS = 64
MAX_COLS = 256  # output columns per tile; wider rows take several column tiles
BAND_ROWS = 32  # output rows per program
WARPS = 4


@dataclass(frozen=True)
class View:
    """A depthwise convolution of a {N, C, H, W} input, run channels-last, and its tiles: a
    program owns ``band`` output rows of one image by ``cols`` output columns by
    ``block_channels`` channels."""

    batch: int
    channels: int
    height: int
    width: int
    out_h: int
    out_w: int
    window: tuple[int, int]
    strides: tuple[int, int]
    start: tuple[int, int]
    block_channels: int
    cols: int
    band: int
    warps: int

    @property
    def looped(self) -> bool:
        """The window's rows in a loop (more than ``UNROLLED_TAPS`` points)."""
        return math.prod(self.window) > UNROLLED_TAPS

    @property
    def step_rows(self) -> int:
        """Output rows a step computes: ``STEP_ROWS`` where ``looped``, else 1."""
        return STEP_ROWS if self.looped else 1

    @property
    def pending(self) -> int:
        """How many output rows one input row adds to: ``ceil(KH / stride)``."""
        return -(-self.window[0] // self.strides[0])

    @property
    def grid(self) -> tuple[int, int, int, int]:
        """(images, channel blocks, column tiles, bands)."""
        return (
            self.batch,
            -(-self.channels // self.block_channels),
            -(-self.out_w // self.cols),
            -(-self.out_h // self.band),
        )

    @property
    def programs(self) -> int:
        return math.prod(self.grid)


def _block_channels(c: int) -> int:
    """Channels a tile takes: the largest power of two up to ``MAX_BLOCK_CHANNELS`` that
    divides C (no masked lanes), or C rounded up to one where none of at least 8 does."""
    for b in (MAX_BLOCK_CHANNELS >> i for i in range(MAX_BLOCK_CHANNELS.bit_length())):
        if b >= 8 and c % b == 0:
            return b
    return min(pow2_at_least(c), MAX_BLOCK_CHANNELS)


def plan(shape, dtype, window, strides, start, outputs) -> View | None:
    """The kernel's view of a depthwise convolution of the {N, C, H, W} ``shape`` with an
    undilated ``window`` (KH, KW), or None where lax stays."""
    if np.dtype(dtype) not in DTYPES or len(shape) != 4 or len(window) != 2:
        return None
    kh, kw = window
    sh, _ = strides
    if math.prod(window) > MAX_TAPS or kh < sh:
        return None
    n, c, h, w = shape
    out_h, out_w = outputs
    if min(n, c, out_h, out_w) < 1:
        return None
    if (n * c + TILE_ELEMENTS) * max(h * w, out_h * out_w) >= _INDEX_LIMIT:
        return None
    block = _block_channels(c)
    cols = max(1, min(pow2_at_least(out_w), MAX_COLS, TILE_ELEMENTS // block))
    bands = -(-out_h // BAND_ROWS)
    band = -(-out_h // bands)  # balanced bands
    v = View(
        n, c, h, w, out_h, out_w, (kh, kw), tuple(strides), tuple(start), block, cols, band,
        WARPS,
    )  # fmt: skip
    return dataclasses.replace(v, band=-(-band // v.step_rows) * v.step_rows)  # whole steps


def depthwise_kernel(x, w, bias, v: View, finish=None, interpret: bool = False):
    """The depthwise cross-correlation of the {N, C, H, W} ``x`` with the {C, 1, KH, KW}
    ``w`` (already flipped for CONVOLUTION mode), as ``v`` tiles it: the float32 sums rounded
    to ``x``'s type, then, where ``bias`` ({C}) is given, that plus the bias in float32,
    through ``finish`` (the fused activation, on float32), rounded again."""
    fn = _kernel_fn(v, np.dtype(x.dtype).name, bias is not None, finish, interpret)
    args = (x, w) if bias is None else (x, w, bias)
    return fn(*args)


@functools.lru_cache(maxsize=256)
def _kernel_fn(v: View, dtype_name: str, has_bias: bool, finish, interpret: bool):
    """The kernel for one view as a jitted function, so that a network's equal convolutions
    are traced and lowered to Triton once (each call of it in a program is one call of the
    same function)."""
    pl, pltriton = load_pallas()
    kh, kw = v.window
    (sh, sw), (ph, pw) = v.strides, v.start
    cb, cols, band = v.block_channels, v.cols, v.band
    _, nchb, ncol, nband = v.grid
    c_all, taps, pending = v.channels, kh * kw, v.pending
    dtype = np.dtype(dtype_name)
    extra = has_bias or finish is not None

    def rounded(total, offset):
        """An output tile's float32 sums rounded to the output type; then, as the lax lowering
        does, plus the bias in float32, through the fused activation, rounded again."""
        y = total.astype(dtype)
        if extra:
            y = y.astype(jnp.float32)
            if offset is not None:
                y = y + offset
            if finish is not None:
                y = finish(y)
            y = y.astype(dtype)
        return y

    def tile(rest, spread: bool):
        """The program's tile: (output ref, image, first output row, channels {1, cb} and
        which are real, output columns {cols, 1} and which are real, each window column's
        input columns and where they are inside, the bias tile or None)."""
        b_ref, o_ref = rest if has_bias else (None, rest[0])
        pid = pl.program_id(0)
        bnd, rest_id = pid % nband, pid // nband
        j, rest_id = rest_id % ncol, rest_id // ncol
        cblk, img = rest_id % nchb, rest_id // nchb
        lanes = jnp.arange(cb, dtype=jnp.int32)
        if spread:
            # Times a one Triton cannot prove constant: its axis analysis then sees no
            # contiguous channels and gives a thread one channel of several columns, so that
            # its taps are one channel's (registers), where contiguous ones would give it several.
            lanes = lanes * (pid >= 0).astype(jnp.int32)
        ch = cblk * cb + lanes[None, :]
        ch_ok = ch < c_all
        ow = j * cols + jnp.arange(cols, dtype=jnp.int32)[:, None]
        ow_ok = ow < v.out_w
        cols_in = [ow * sw - pw + k for k in range(kw)]
        cols_ok = [ow_ok & (c >= 0) & (c < v.width) & ch_ok for c in cols_in]
        offset = pltriton.load(b_ref.at[ch], mask=ch_ok, other=0.0) if has_bias else None
        return o_ref, img, bnd * band, ch, ch_ok, ow, ow_ok, cols_in, cols_ok, offset

    def kernel(x_ref, w_ref, *rest):
        o_ref, img, o0, ch, ch_ok, ow, ow_ok, cols_in, cols_ok, offset = tile(rest, True)

        # The taps, loaded once: {1, block_channels} each.
        tap = [pltriton.load(w_ref.at[t * c_all + ch], mask=ch_ok, other=0.0) for t in range(taps)]

        def add_row(sums, o, t):
            """Adds window row ``t`` of output row ``o`` (input row ``o * sh - ph + t``) to the
            sums of output rows ``o + i``, where it is their window row ``t - i * sh``."""
            r = o * sh - ph + t
            row_ok = (r >= 0) & (r < v.height)
            at = (img * v.height + r) * v.width
            loads = [
                pltriton.load(x_ref.at[(at + c) * c_all + ch], mask=ok & row_ok, other=0).astype(
                    jnp.float32
                )
                for c, ok in zip(cols_in, cols_ok)
            ]
            sums = list(sums)
            for i in range(pending):
                k = t - i * sh
                if 0 <= k < kh:
                    for c in range(kw):
                        sums[i] = sums[i] + loads[c] * tap[k * kw + c]
            return sums

        def store(o, total):
            y = rounded(total, offset)
            ok = ch_ok & ow_ok & (o < v.out_h)
            at = ((img * v.out_h + o) * v.out_w + ow) * c_all + ch
            pltriton.store(o_ref.at[at], y, mask=ok)

        zero = jnp.zeros((cols, cb), jnp.float32)

        def step(i, sums):
            """Output row ``o0 + i``: the last ``sh`` rows of its window are new; its sum is
            then whole and stored, and the sums move up one output row."""
            o = o0 + i
            for t in range(kh - sh, kh):
                sums = add_row(sums, o, t)
            store(o, sums[0])
            return tuple(sums[1:]) + (zero,)

        # The rows of the first output row's window that the steps do not load.
        sums = [zero] * pending
        for t in range(kh - sh):
            sums = add_row(sums, o0, t)
        jax.lax.fori_loop(0, band, step, tuple(sums))

    def looped_kernel(x_ref, w_ref, *rest):
        # Contiguous channels (no spread lanes): the taps are loaded at each use, so a thread
        # loads several channels of input and taps in one vector load.
        o_ref, img, o0, ch, ch_ok, ow, ow_ok, cols_in, cols_ok, offset = tile(rest, False)
        col_at = [c * c_all + ch for c in cols_in]  # element offsets within an input row
        out_at = ow * c_all + ch
        out_ok = ch_ok & ow_ok
        zero = jnp.zeros((cols, cb), jnp.float32)
        rows = v.step_rows
        span = (rows - 1) * sh + kh  # input rows of a step's windows

        def load_row(r):
            row_ok = (r >= 0) & (r < v.height)
            at = (img * v.height + r) * (v.width * c_all)
            return [
                pltriton.load(x_ref.at[at + c], mask=ok & row_ok, other=0).astype(jnp.float32)
                for c, ok in zip(col_at, cols_ok)
            ]

        def group(g, carry):
            """Output rows ``o .. o + rows - 1``: the input rows of their windows, each loaded
            once (as ``kw`` shifted loads) and added, times the taps of the window row it is
            for each output row (loaded at each use; zero where it is in no window), to that
            row's float32 sum."""
            o = o0 + g * rows
            r0 = o * sh - ph

            def input_row(s_, sums):
                loads = load_row(r0 + s_)
                sums = list(sums)
                for i in range(rows):
                    k = s_ - i * sh
                    k_ok = (k >= 0) & (k < kh)
                    for c in range(kw):
                        t = pltriton.load(
                            w_ref.at[(k * kw + c) * c_all + ch], mask=ch_ok & k_ok, other=0.0
                        )
                        sums[i] = sums[i] + loads[c] * t
                return tuple(sums)

            sums = jax.lax.fori_loop(0, span, input_row, (zero,) * rows)
            for i in range(rows):
                oi = o + i
                at = (img * v.out_h + oi) * (v.out_w * c_all)
                y = rounded(sums[i], offset)
                pltriton.store(o_ref.at[at + out_at], y, mask=out_ok & (oi < v.out_h))
            return carry

        jax.lax.fori_loop(0, band // rows, group, 0)

    def run(x, w, *bias):
        n, c = x.shape[:2]
        xt = jnp.transpose(x, (0, 2, 3, 1)).reshape(-1)  # channels-last
        wt = jnp.transpose(w.astype(jnp.float32).reshape(c, taps)).reshape(-1)  # {taps, C}
        args = [xt, wt] + [b.astype(jnp.float32).reshape(-1) for b in bias]
        out = pl.pallas_call(
            looped_kernel if v.looped else kernel,
            out_shape=jax.ShapeDtypeStruct((n * v.out_h * v.out_w * c,), dtype),
            grid=(v.programs,),
            interpret=interpret,
            compiler_params=pltriton.CompilerParams(num_warps=v.warps, num_stages=1),
        )(*args)
        return jnp.transpose(out.reshape(n, v.out_h, v.out_w, c), (0, 3, 1, 2))

    return jax.jit(run)


def _view(d: Any) -> View | None:
    x, w, out = d.input_tensor, d.filter_tensor, d.output_tensor
    if d.direction is not ConvolutionDirection.FORWARD or len(x.sizes) != 4:
        return None
    c, g = x.sizes[1], d.group_count
    if g < 2 or c != g or w.sizes[:2] != (c, 1) or tuple(d.dilations) != (1, 1):
        return None
    if not (x.dtype == w.dtype == out.dtype):
        return None
    if d.bias_tensor is not None and d.bias_tensor.dtype != x.dtype:
        return None
    act = d.fused_activation
    if act is not None and act.operator_type not in ACTIVATIONS:
        return None
    return plan(x.sizes, x.dtype, w.sizes[2:], d.strides, d.start_padding, out.sizes[2:])


@functools.lru_cache(maxsize=64)
def _finish(activation: Any, out: Any):
    """The fused activation on float32 values, one function per (activation, output desc) so
    that the kernel functions it keys are shared."""

    def finish(y):
        return apply_fused(activation, y, out)

    return finish


def _applies(d: Any) -> bool:
    return _view(d) is not None


def _lower(d: Any, x, w, *bias) -> tuple:
    v = _view(d)
    if d.mode is ConvolutionMode.CONVOLUTION:
        w = jnp.flip(w, (2, 3))
    finish = None if d.fused_activation is None else _finish(d.fused_activation, d.output_tensor)
    return (depthwise_kernel(x, w, bias[0] if bias else None, v, finish),)


register_fast_path("DML_OPERATOR_CONVOLUTION", "depthwise", _applies, _lower)
