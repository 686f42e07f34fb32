"""Which reductions the Pallas kernels take, and how they are tiled (no Pallas import).

The tensor is viewed as ``(A, R, B)``: ``R`` is the product of the reduced axes (which must be
adjacent once size-1 axes are dropped), ``A`` the product of the axes before them and ``B`` of
those after. Two layouts:

- ``B > 1`` ("inner"): each program owns ``BB`` adjacent columns of one ``a`` and walks down the
  ``R`` rows in ``BR``-row tiles, so every load is a contiguous run of ``BB`` elements.
- ``B == 1`` ("minor"): each program owns ``BA`` rows of the ``(A, R)`` matrix and walks along
  them in ``BR``-element tiles.

``plan`` returns the view and its ``Tiling``, or None where the lax lowering stays (a type the
kernels do not read, reduced axes that are not adjacent, too few programs to fill the GPU, or a
layout where XLA's own code was measured as fast). The tile sizes below were chosen by
benchmarks/gpu_kernels.py (git history), benchmarks/variants_narrow.py (git history) and
benchmarks/variants_packed.py (git history) on an H200 at 1 GiB (benchmarks/RESULTS.md#operators and
benchmarks/results/).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# Data types the kernels read. 64-bit types (and anything else) use the lax lowering.
ARG_DTYPES = frozenset(
    np.dtype(t)
    for t in ("float16", "float32", "int8", "int16", "int32", "uint8", "uint16", "uint32")
)
LSE_DTYPES = frozenset(np.dtype(t) for t in ("float16", "float32"))
# Data types of the integer MAX/MIN kernel (inner layout only: lax reaches the copy elsewhere).
EXT_DTYPES = frozenset(np.dtype(t) for t in ("int8", "uint8"))

# Fewer programs than this cannot keep every multiprocessor of a large GPU reading; such cases
# (a whole-tensor reduction, say) stay on lax, which splits the reduced axis across blocks.
MIN_PROGRAMS = 264
_INDEX_LIMIT = 2**31 - 2**16  # int32 element offsets inside the kernel, with room for a tile
# The packed ARGMIN/ARGMAX kernel keeps the index in 16 bits.
PACKED_MAX_R = 1 << 16


@dataclass(frozen=True)
class Tiling:
    """Tile sizes (powers of two) and Triton launch parameters for one kernel launch."""

    rows: int  # BR: reduced-axis elements per tile
    cols: int  # BB (inner layout) or BA (minor layout): output elements per program
    num_warps: int = 4
    num_stages: int = 3


@dataclass(frozen=True)
class Plan:
    """How a reduction maps onto a kernel: the ``(A, R, B)`` view and its tiling."""

    a: int
    r: int
    b: int
    tiling: Tiling

    @property
    def programs(self) -> int:
        per_a = -(-self.b // self.tiling.cols) if self.b > 1 else 1
        return self.a * per_a if self.b > 1 else -(-self.a // self.tiling.cols)


# Per-tile kernels (``arg_reduce_kernel``, ``log_sum_exp_kernel``): elements per tile for 4-byte
# types (narrow types scale it up so a tile moves as many bytes) and warps, per kind. Wide inner
# tiles (1024 columns) of 4-byte types like 8192 elements and 8 warps for ARGMIN/ARGMAX;
# everything else 4096 and 4 warps.
TILE_ELEMENTS = {"arg": 4096, "lse": 4096}
WIDE_TILE_ELEMENTS = {"arg": 8192, "lse": 4096}
NUM_WARPS = {"arg": 4, "lse": 4}
WIDE_NUM_WARPS = {"arg": 8, "lse": 4}
NUM_STAGES = {"arg": 3, "lse": 3}
# 4-byte LOG_SUM_EXP tiles narrower than 1024 columns: at 256 columns 2 warps ran 1.02 of the
# copy, 4 warps 0.93 (benchmarks/RESULTS.md#operators).
NARROW_LSE_WARPS = 2
LAX_ARG_MIN_B = 256
_MAX_COLS = 1024

# The "lanes" kernel (``lanes_kernel``: per-element running state, one cross-lane reduction at
# the end) runs 1-byte ARGMIN/ARGMAX longer than PACKED_MAX_R and 1-byte integer MAX/MIN. Per
# (kind, itemsize, inner layout): (tile elements, inner-layout columns, warps, stages). int8
# ARGMAX 0.86 / 0.77 of the copy (inner / minor; the per-tile kernel 0.40 / 0.57), int8 MAX
# 0.99-1.02 (lax 0.67-0.79; variants_narrow.log, variants_extra.log).
LANES_TILING = {
    ("arg", 1, True): (4096, 1024, 8, 2),
    ("arg", 1, False): (4096, 512, 2, 3),
    ("ext", 1, True): (2048, 512, 4, 4),
    ("ext", 1, False): (2048, 512, 4, 4),
}
# The packed kernel (``packed_kernel``), per (itemsize, layout): (tile elements, inner-layout
# columns, warps, stages). Layouts: "minor" (B == 1), "narrow" (1 < B < 1024), "inner" (B >= 1024).
# int8 0.94-0.97 and float16 0.89-0.98 of the copy on every axis (benchmarks/RESULTS.md#operators).
PACKED_TILING = {
    (1, "inner"): (2048, 512, 4, 4),
    (1, "narrow"): (2048, 512, 4, 4),
    (1, "minor"): (4096, 512, 4, 3),
    (2, "inner"): (2048, 512, 2, 4),
    (2, "narrow"): (4096, 512, 8, 4),
    (2, "minor"): (8192, 512, 2, 3),
}
# float16 LOG_SUM_EXP warps per layout: inner 2 warps 0.98 (4: 0.91), minor 4 warps 0.90-0.96
# (2: 0.90), narrow 1 warp 0.96-0.98 (2: 0.80-0.87; benchmarks/RESULTS.md#operators).
F16_LSE_WARPS = {"inner": 2, "narrow": 1, "minor": 4}
# float16 LOG_SUM_EXP elements per tile, per layout (narrow 256 columns: 1 warp 0.97-0.98, 2 warps
# 0.80-0.87; minor: 16384 elements 0.93-0.97 for 2-8 warps; benchmarks/RESULTS.md#operators).
F16_LSE_ELEMENTS = {"inner": 8192, "narrow": 8192, "minor": 16384}


def pow2_at_least(n: int) -> int:
    """The least power of two >= n (1 for n <= 1)."""
    return 1 << max(0, (n - 1).bit_length())


def pow2_at_most(n: int) -> int:
    """The greatest power of two <= n (n >= 1)."""
    return 1 << (n.bit_length() - 1)


def layout(b: int) -> str:
    """The layout class of a plan with ``B = b``: "minor", "narrow" or "inner"."""
    return "minor" if b == 1 else ("narrow" if b < _MAX_COLS else "inner")


def lanes_tiling(a: int, r: int, b: int, row: tuple[int, int, int, int]) -> Tiling:
    """The tiling of the lanes and packed kernels from a table row ``(tile elements,
    inner-layout columns, warps, stages)``."""
    elems, max_cols, warps, stages = row
    if b > 1:
        cols = min(pow2_at_least(b), max_cols)
        rows = min(pow2_at_least(r), max(1, elems // cols))
    else:
        rows = min(pow2_at_least(r), min(1024, elems))
        cols = max(1, elems // rows)
        while cols > 1 and -(-a // cols) < 4 * MIN_PROGRAMS:
            cols //= 2
    return Tiling(rows, cols, warps, stages)


def arg_kernel(dtype, r: int) -> str:
    """Which ARGMIN/ARGMAX kernel reduces ``r`` elements of ``dtype``: "packed", "lanes" or
    "tile".

    1- and 2-byte types run the packed kernel while the index fits its 16 bits; beyond that
    1-byte types run the lanes kernel and float16 the per-tile kernel (0.82-0.86 of the copy,
    lanes 0.55-0.61). 4-byte types run the per-tile kernel.
    """
    item = np.dtype(dtype).itemsize
    if item <= 2 and r <= PACKED_MAX_R:
        return "packed"
    return "lanes" if item == 1 else "tile"


def _elements(kind: str, itemsize: int, b: int) -> int:
    """Elements per tile of the per-tile kernels (TILE_ELEMENTS counts 4-byte elements)."""
    if kind == "lse" and itemsize == 2:
        return F16_LSE_ELEMENTS[layout(b)]
    return TILE_ELEMENTS[kind] * max(1, 4 // itemsize)


def tiling(kind: str, a: int, r: int, b: int, itemsize: int, kernel: str = "tile") -> Tiling:
    """The tiling of ``kernel`` ("tile", "lanes" or "packed") for a reduction of ``kind``."""
    if kernel == "lanes":
        return lanes_tiling(a, r, b, LANES_TILING[(kind, itemsize, b > 1)])
    if kernel == "packed":
        return lanes_tiling(a, r, b, PACKED_TILING[(itemsize, layout(b))])
    warps = F16_LSE_WARPS[layout(b)] if kind == "lse" and itemsize == 2 else NUM_WARPS[kind]
    if b > 1:
        cols = min(pow2_at_least(b), _MAX_COLS)
        if cols == _MAX_COLS and itemsize == 4:
            elems, warps = WIDE_TILE_ELEMENTS[kind], WIDE_NUM_WARPS[kind]
        else:
            elems = _elements(kind, itemsize, b)
            if kind == "lse" and cols < _MAX_COLS and itemsize == 4:
                warps = NARROW_LSE_WARPS
        rows = min(pow2_at_least(r), max(1, elems // cols))
    else:
        elems = _elements(kind, itemsize, b)
        rows = min(pow2_at_least(r), min(1024, elems))
        cols = max(1, elems // rows)
        # Keep enough programs for the whole GPU when A is modest.
        while cols > 1 and -(-a // cols) < 4 * MIN_PROGRAMS:
            cols //= 2
    return Tiling(rows, cols, warps, NUM_STAGES[kind])


def abr_view(shape: tuple[int, ...], axes: tuple[int, ...]) -> tuple[int, int, int] | None:
    """``(A, R, B)`` of ``shape`` reduced (or normalized) over ``axes``, or None when no
    reduced axis is larger than 1, the reduced axes are not adjacent, or int32 offsets overflow.

    Size-1 axes do not move the row-major linear index, so they are dropped before asking
    whether the reduced axes are adjacent."""
    live = [i for i in range(len(shape)) if shape[i] != 1]
    red = [i for i in live if i in axes]
    if not red:
        return None
    pos = [live.index(i) for i in red]
    if pos != list(range(pos[0], pos[0] + len(pos))):
        return None
    a = math.prod(shape[i] for i in live[: pos[0]])
    r = math.prod(shape[i] for i in red)
    b = math.prod(shape[i] for i in live[pos[-1] + 1 :])
    return None if a * r * b >= _INDEX_LIMIT else (a, r, b)


def plan(shape: tuple[int, ...], axes: tuple[int, ...], dtype, kind: str) -> Plan | None:
    """The kernel plan for reducing ``shape`` over ``axes``, or None when lax must do it.

    Args:
        shape: the input's shape.
        axes: the reduced axes (any order).
        dtype: the input's dtype.
        kind: ``"arg"`` (ARGMIN/ARGMAX), ``"lse"`` (LOG_SUM_EXP) or ``"ext"`` (integer
            MAX/MIN).
    """
    dtypes = {"arg": ARG_DTYPES, "lse": LSE_DTYPES, "ext": EXT_DTYPES}[kind]
    if np.dtype(dtype) not in dtypes:
        return None
    view = abr_view(shape, axes)
    if view is None:
        return None
    a, r, b = view
    if kind == "ext" and b == 1:
        # Along the minor axis XLA's own MAX/MIN of 1-byte integers ran 1.01 of the copy.
        return None
    itemsize = np.dtype(dtype).itemsize
    if kind == "arg" and itemsize == 4 and LAX_ARG_MIN_B <= b < _MAX_COLS:
        # 4-byte inner layouts of 256-1023 columns (1 GiB float32 along axis 2 has B = 256):
        # lax's argmax ran 0.93-0.94 of the copy there (NaN-correct order keys), the kernel
        # 0.89-0.90 (benchmarks/RESULTS.md#operators). Narrower B was not measured.
        return None
    kernel = {"arg": arg_kernel(dtype, r), "lse": "tile", "ext": "lanes"}[kind]
    p = Plan(a, r, b, tiling(kind, a, r, b, itemsize, kernel))
    return p if p.programs >= MIN_PROGRAMS else None


def exact(p: Plan) -> bool:
    """Whether the tiles of ``p`` cover the tensor exactly (no tile hangs over an edge)."""
    br, c = p.tiling.rows, p.tiling.cols
    return p.r % br == 0 and (p.b % c == 0 if p.b > 1 else p.a % c == 0)
