"""A Pallas (Triton) kernel for overlapping 2-D MAX and AVERAGE pooling on CUDA GPUs.

The lax lowering (``dml_jax.ops.pooling``) writes an overlapping window as one element-wise pass
over strided slices of the padded input: 0.58 of the copy for a 3x3 window of stride 1 in
float32 on an H200 and 0.52 in float16 (benchmarks/RESULTS.md#operators), since every slice
reads the input again. Here a program owns a band of output rows of ``block_planes`` (N, C)
planes by ``cols`` output columns and walks down it one output row at a time. Each step loads
the input rows the new output row adds to the window (one at stride 1), every window column as
one shifted (and strided) load of the row, masked where the window hangs over the padding; the
window rows the next output row shares stay in registers, and the next step's loads are issued
before this step's output is reduced, so a warp has two steps' loads in flight. So the input is
read from memory about once (the band's first window rows twice, from L2), the shifted loads hit
L1, and the output is written once. At a column stride above 1 a thread takes one output column
per instruction (consecutive lanes, consecutive columns) instead of Triton's adjacent ones.

Values are the lax lowering's, bit for bit:

- MAX reduces each window row first, then the rows: the IEEE 754-2019 maximum that XLA's GPU
  code uses (NaN propagated, -0.0 below +0.0) is associative and commutative, so the order does
  not matter; on the GPU it is the same PTX instruction, ``max.NaN`` (Triton's own float maximum
  drops NaN). Padding is -inf.
- AVERAGE sums each window row (left to right, padding read as +0.0), keeps the row sums the
  next output row shares, and adds the rows in order: the lax lowering's ``nested_sum`` order,
  in float32 for float16 inputs, rounded once. It then multiplies by the float32 reciprocal of
  the divisor, as XLA does with the lax lowering's division by a constant (``average_divisor``:
  prod(WindowSize), or for IncludePadding FALSE the count of window rows on the input times
  the count of window columns on it, computed in the kernel: the reciprocal of each product
  the plan can meet is a constant chosen by selects). Only windows the lax lowering sums as
  slices (``SLICE_WINDOW_POINTS``) are taken: a larger one is summed by ``reduce_window`` in its
  own order.

Registered as the CUDA fast path of MAX_POOLING, MAX_POOLING1/2 without OutputIndicesTensor, and
AVERAGE_POOLING(1), for 4-D float16/float32 tensors whose window overlaps (a stride smaller
than the window in some dimension; disjoint windows are at the copy in lax). Standalone: in a
graph the lax form fuses its producer (a ReLU, a batch norm) into the pooling loop, which the
kernel cannot.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..fastpath import register_fast_path
from ..ops.pooling import SLICE_WINDOW_POINTS, WindowPlan, window_plan
from .pallas_helpers import load_pallas, ptx
from .reduce_plan import pow2_at_least, pow2_at_most

DTYPES = frozenset(np.dtype(t) for t in ("float16", "float32"))
MAX_WINDOW_POINTS = 64  # MAX: window rows in registers; larger windows stay on lax
_INDEX_LIMIT = 2**31 - 2**20  # int32 element offsets, with room for a tile past the end

# Tunables, chosen by benchmarks/pool_variants.py (git history) on an H200
# (benchmarks/RESULTS.md#operators). 512-element steps, 4 warps: 0.85-0.86 of the copy for MAX 3x3
# stride 1 float32 and 0.66-0.67 float16, AVERAGE 0.77-0.81 and 0.62-0.63 (lax: 0.58-0.59, 0.51,
# 0.56-0.58, 0.50-0.52). ResNet's 3x3 stride 2 MAX with one column a thread (SPREAD): 0.86 and 0.59,
# against 0.62 and 0.56 with Triton's adjacent columns (lax 0.58, 0.49). One column a thread at
# stride 1 lost 0.10-0.15 in every case; 1024-element steps were within noise for MAX but halved
# ResNet's float16 MAX (8 float16 outputs a thread) and AVERAGE with the prefetch fell to 0.68 /
# 0.43 (the registers of two steps' loads); without the prefetch, or with Triton's 3 stages instead,
# nothing gained; 8 warps, bands of 16 or 64 rows gained nothing.
TILE_ELEMENTS = 512  # output elements per step (block_planes x cols)
# float16 with adjacent columns (column stride 1): 1024 (8 a thread), 0.67-0.69 of the copy
# against 512's 0.66-0.67 for MAX and both AVERAGEs (benchmarks/RESULTS.md#operators);
# float32 stays at 512 (1024: within 0.01; 2048 on 8 warps 0.83).
TILE_ELEMENTS_16 = 1024
MAX_COLS = 256  # output columns per tile; wider rows take several column tiles
BAND_ROWS = 32  # output rows per program (more programs, and the halo rows re-read from L2)
WARPS = 4
SPREAD = None  # one output column a thread (``View.spread``); None: where the column stride > 1
STAGES = 1  # Triton's num_stages
PREFETCH = True  # each step issues the next step's loads before reducing its own
# (evict_first on the output stores changed nothing: benchmarks/RESULTS.md#operators)
LIVE_REGISTERS = 128  # bound on the registers per thread that the window's live values take


def _carried(window, strides, dilations) -> int:
    """How many window rows the next output row shares with this one (the last ones, which are
    its first): with stride S and dilation D, rows S / D down the window, when D divides S."""
    (kh, _), (sh, _), (dh, _) = window, strides, dilations
    return max(kh - sh // dh, 0) if sh % dh == 0 else 0


@dataclass(frozen=True)
class View:
    """A pooling over ``planes`` (N * C) planes of ``height`` x ``width``, and its tiles: a
    program owns ``band`` output rows of ``block_planes`` planes by ``cols`` output columns."""

    planes: int
    height: int
    width: int
    out_h: int
    out_w: int
    window: tuple[int, int]
    strides: tuple[int, int]
    dilations: tuple[int, int]
    start: tuple[int, int]
    block_planes: int
    cols: int
    band: int
    warps: int
    # Whether a warp's lanes take consecutive output columns (one a thread per instruction)
    # rather than Triton's default of as many adjacent columns a thread as the aligned store
    # vectorizes (4 float32, up to 8 float16). The shifted loads are scalar either way; at a
    # column stride of 2 a thread's adjacent columns put one warp's load instruction on many
    # L1 sectors, and one column a thread runs 0.86 of the copy instead of 0.62 (ResNet's
    # float32 MAX, H200); at stride 1 adjacent columns are faster (0.85 against 0.74).
    spread: bool = False
    stages: int = 1
    prefetch: bool = True

    @property
    def carried(self) -> int:
        return _carried(self.window, self.strides, self.dilations)

    @property
    def grid(self) -> tuple[int, int, int]:
        """(plane blocks, column tiles, bands)."""
        return (
            -(-self.planes // self.block_planes),
            -(-self.out_w // self.cols),
            -(-self.out_h // self.band),
        )

    @property
    def programs(self) -> int:
        return math.prod(self.grid)


def overlapping(p: WindowPlan) -> bool:
    """Whether windows overlap (a stride below the window's span) in some dimension."""
    return any(s < x for s, x in zip(p.strides, p.extents))


def plan(shape: tuple[int, ...], dtype, p: WindowPlan, average: bool) -> View | None:
    """The kernel's view of pooling ``shape`` with the window ``p``, or None where lax stays."""
    if np.dtype(dtype) not in DTYPES or len(shape) != 4 or not overlapping(p):
        return None
    points = math.prod(p.window)
    if points > (SLICE_WINDOW_POINTS if average else MAX_WINDOW_POINTS):
        return None
    n, c, h, w = shape
    out_h, out_w = p.outputs
    planes = n * c
    if min(planes, out_h, out_w) < 1:
        return None
    cols = min(pow2_at_least(out_w), MAX_COLS)
    if (planes + TILE_ELEMENTS) * max(h * w, out_h * out_w) >= _INDEX_LIMIT:
        return None
    # Live values per thread: the window rows' sums or maxima and one row's shifted loads, and
    # the next step's loads.
    kh, kw = p.window
    new_rows = kh - _carried(p.window, p.strides, p.dilations)
    live = kh + kw + new_rows * kw
    spread = p.strides[1] > 1 if SPREAD is None else SPREAD
    step = TILE_ELEMENTS_16 if np.dtype(dtype).itemsize == 2 and not spread else TILE_ELEMENTS
    elements = min(step, pow2_at_most(max(1, LIVE_REGISTERS * 32 * WARPS // live)))
    cols = min(cols, elements)
    block_planes = min(max(1, elements // cols), pow2_at_least(planes))
    bands = -(-out_h // BAND_ROWS)
    band = -(-out_h // bands)  # balanced bands
    return View(
        planes, h, w, out_h, out_w, p.window, p.strides, p.dilations,
        p.start, block_planes, cols, band, WARPS, spread, STAGES, PREFETCH,
    )  # fmt: skip


def _max(a, b, interpret: bool):
    """XLA's float maximum (IEEE 754-2019: NaN propagated, -0.0 below +0.0)."""
    if interpret:
        return jax.lax.max(a, b)  # the host's maximum, as in the lax lowering run there
    return ptx(f"max.NaN.{'f32' if a.dtype == jnp.float32 else 'f16'}", a, b)


def window_counts(v: View) -> tuple[np.ndarray, np.ndarray]:
    """Per output row and per output column, how many window rows (columns) lie on the input."""
    out = []
    for n_out, n_in, k, s, d, p in zip(
        (v.out_h, v.out_w), (v.height, v.width), v.window, v.strides, v.dilations, v.start
    ):
        at = np.arange(n_out)[:, None] * s - p + np.arange(k)[None, :] * d
        out.append(((at >= 0) & (at < n_in)).sum(axis=1))
    return out[0], out[1]


def _reciprocal(count: int) -> np.float32:
    """The float32 reciprocal XLA multiplies by for the lax lowering's float32 divisor."""
    return np.float32(1) / np.float32(max(count, 1))


def pool_kernel(x, v: View, average: bool, include_padding: bool = True, interpret: bool = False):
    """MAX (or AVERAGE, dividing by prod(WindowSize) or, ``include_padding`` False, by the
    window points on the input) pooling of the {N, C, H, W} ``x`` as ``v`` tiles it.
    """
    pl, pltriton = load_pallas()
    kh, kw = v.window
    (sh, sw), (dh, dw), (ph, pw) = v.strides, v.dilations, v.start
    bp, cols, band = v.block_planes, v.cols, v.band
    _, ncol, nband = v.grid
    carried = v.carried
    plane_size, out_size = v.height * v.width, v.out_h * v.out_w
    pad = np.array(0 if average else -np.inf, x.dtype)
    row_counts, col_counts = window_counts(v)
    # Per-position divisors only where a window hangs over the padding; else one constant.
    counted = average and not include_padding and (min(row_counts) < kh or min(col_counts) < kw)

    def kernel(x_ref, o_ref):
        pid = pl.program_id(0)
        b, rest = pid % nband, pid // nband
        j, g = rest % ncol, rest // ncol
        plane = g * bp + jnp.arange(bp, dtype=jnp.int32)[:, None]
        plane_ok = plane < v.planes
        lanes = jnp.arange(cols, dtype=jnp.int32)
        if v.spread:
            # Times a one Triton cannot prove constant, so its axis analysis sees no contiguous
            # columns and lays one column a thread, consecutive columns on consecutive lanes.
            lanes = lanes * (pid >= 0).astype(jnp.int32)
        ow = j * cols + lanes[None, :]
        ow_ok = ow < v.out_w
        # Per window column: the input column each output column reads, and whether it is on
        # the input (the same on every row).
        cols_in = [ow * sw - pw + k * dw for k in range(kw)]
        cols_ok = [ow_ok & (c >= 0) & (c < v.width) for c in cols_in]
        base = plane * plane_size
        o0 = b * band
        if counted:
            # Per row count the plan meets: each column's reciprocal of (rows x columns on the
            # input), by selects over the column counts; loop-invariant, broadcast over the
            # tile's planes once.
            cc = sum(ok.astype(jnp.int32) for ok in cols_ok) + 0 * plane
            recips = {}
            for rc in sorted(set(row_counts.tolist())):
                r = jnp.full(cc.shape, _reciprocal(rc * kw), jnp.float32)
                for c in sorted(set(col_counts.tolist())):
                    r = jnp.where(cc == c, _reciprocal(rc * c), r)
                recips[rc] = r

        def load_rows(o, rows):
            """Window rows ``rows`` of output row ``o``, as loaded: one shifted load per window
            column of each row."""
            out = []
            for k in rows:
                r = o * sh - ph + k * dh
                row_ok = (r >= 0) & (r < v.height)
                at = base + r * v.width
                out += [
                    pltriton.load(x_ref.at[at + c], mask=plane_ok & ok & row_ok, other=pad)
                    for c, ok in zip(cols_in, cols_ok)
                ]
            return out

        def reduce_rows(loads):
            """What the window keeps of loaded rows: each row's sum in float32 (AVERAGE, left
            to right) or maximum (MAX)."""
            out = []
            for i in range(0, len(loads), kw):
                if average:
                    m = loads[i].astype(jnp.float32)
                    for t in loads[i + 1 : i + kw]:
                        m = m + t.astype(jnp.float32)
                else:
                    m = loads[i]
                    for t in loads[i + 1 : i + kw]:
                        m = _max(m, t, interpret)
                out.append(m)
            return out

        def store(o, rows):
            if average:
                total = rows[0]
                for t in rows[1:]:
                    total = total + t
                if counted:
                    first = o * sh - ph
                    rc = sum(
                        ((first + k * dh >= 0) & (first + k * dh < v.height)).astype(jnp.int32)
                        for k in range(kh)
                    )
                    counts = sorted(recips)
                    r = recips[counts[0]]
                    for c in counts[1:]:
                        r = jnp.where(rc == c, recips[c], r)
                    total = total * r
                else:
                    total = total * _reciprocal(kh * kw)
                y = total.astype(x.dtype)
            else:
                y = rows[0]
                for t in rows[1:]:
                    y = _max(y, t, interpret)
            ok = plane_ok & ow_ok & (o < v.out_h)
            pltriton.store(o_ref.at[plane * out_size + o * v.out_w + ow], y, mask=ok)

        new = range(carried, kh)  # the window rows each step loads
        drop = kh - carried  # row values the next output row drops

        def step(i, state):
            """Output row ``o0 + i``: its window is the rows carried from the last step and the
            new rows, which were loaded a step ahead (so a warp has two steps' loads in flight);
            this step loads the next one's."""
            rows, loads = state
            o = o0 + i
            if not v.prefetch:
                loads = tuple(load_rows(o, new))
            pending = tuple(load_rows(o + 1, new)) if v.prefetch else ()
            rows = list(rows) + reduce_rows(loads)
            store(o, rows)
            return (tuple(rows[drop:]) if carried else (), pending)

        first = tuple(reduce_rows(load_rows(o0, range(carried))))
        pending = tuple(load_rows(o0, new)) if v.prefetch else ()
        jax.lax.fori_loop(0, band, step, (first, pending))

    n = x.shape[0] * x.shape[1]
    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((n * out_size,), x.dtype),
        grid=(v.programs,),
        interpret=interpret,
        compiler_params=pltriton.CompilerParams(num_warps=v.warps, num_stages=v.stages),
    )(jax.lax.reshape(x, (n * plane_size,)))
    return jax.lax.reshape(out, tuple(x.shape[:2]) + (v.out_h, v.out_w))


def _view(d: Any) -> View | None:
    x = d.input_tensor
    if getattr(d, "output_indices_tensor", None) is not None:
        return None
    return plan(x.sizes, x.dtype, window_plan(d), hasattr(d, "include_padding"))


def _applies(d: Any) -> bool:
    return _view(d) is not None


def _lower(d: Any, x) -> tuple:
    v = _view(d)
    if not hasattr(d, "include_padding"):
        return (pool_kernel(x, v, False),)
    return (pool_kernel(x, v, True, d.include_padding),)


# Standalone: in a graph the lax form fuses its producer (ResNet's batch norm and ReLU before
# the 3x3 stride 2 max pooling) into the pooling loop; the kernel would read it materialized.
for _name in ("MAX_POOLING", "MAX_POOLING1", "MAX_POOLING2", "AVERAGE_POOLING", "AVERAGE_POOLING1"):
    register_fast_path(f"DML_OPERATOR_{_name}", "kernel", _applies, _lower, standalone=True)
