"""A GEMM whose B is a DEQUANTIZE of blocked 4-bit weights, as one Pallas (Triton) kernel that
reads the 4-bit codes and dequantizes them in registers: the CUDA lowering of the graph pair
DEQUANTIZE -> GEMM for products of 1 to 16 rows, the decode steps of com.microsoft MatMulNBits
models (the pair and its RMS prologues are registered by ``kernels/int4_pair.py``).

The lax lowering runs the two nodes apart: DEQUANTIZE writes B in its float type (2 bytes a
weight for float16) and the GEMM reads it back, so a decode step moves several times the
codes' bytes. On an H200 (benchmarks/experiments/README.md, ``int4_gpu.py``) every such form,
the codes one a byte, ``uint4`` or packed bytes unpacked by shifts in the program, ran at
0.20-0.50x the float16 product with XLA's Triton GEMMs (600-1,100 GB/s of float16-equivalent
weights): XLA does not fuse the dequantization into the product's reads. Here each program
reads its tile of codes once, half a byte a weight, with the tile's scales (and zero points),
one per block of K:

    w = round_T((q - z) * s)           DEQUANTIZE's values, one block of K at a time
    acc += A x w^T                     Triton's dot on 16 rows, float32 accumulation (one row
                                       of A widened to them in registers, more rows padded)

The weights are DEQUANTIZE's bits: ``q - z`` is exact in T (float16 or float32), and its
product with ``s`` is rounded once in T, where the lax lowering rounds the exact float32
product to T: the same value. The products are summed in float32 in another order than XLA's
dot, so the result agrees with the lax lowering to float32 summation before the one rounding
to T (tests/test_int4_gemm_kernel.py). Where N gives fewer than ``TARGET_PROGRAMS`` programs,
K is split among programs too: each writes float32 partial sums, which XLA adds before that
rounding. The GEMM's Alpha, C and fused activation follow through ``lower_gemm``'s ``product``
hook, as in the lax lowering.

Each program reads the codes as their bytes ({N, K / 2}, DirectML's packing: a held weight
arrives so) and splits each byte by a few PTX instructions into two float16 values 1024 + q,
the low nibble a weight of an even value of K and the high one of an odd: two dots a step, by
A's even and odd values. Its loop over its steps along K is unrolled in Python (``LOOP``: a
loop Triton pipelines). The codes may also be read as 4-bit values (``BYTES_FORM`` off), which
Pallas loads as whole bytes, two codes each split by shifts and joined again.

The form was chosen from the sm_90a SASS of its variants (Triton 3.6, lowered for CUDA on a CPU
machine): the codes turned into float16 by a bit pattern rather than a conversion instruction,
a dot per 128 values of K rather than per block, 16 columns a warp; its tiles by timing them at
a 1B-class decoder's shapes on an H100 (the tunables below say what each saved).

``plan`` takes 1 to ``MAX_ROWS`` rows of A, blocks of K that are a power of two of at least 16
(Triton's dot), N a multiple of 16 and A and B of one float type; anything else, and every
larger product, stays with lax.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from ..precision import matmul_precision
from .pallas_helpers import load_pallas, nibbles_plus_1024

MAX_ROWS = 16  # rows of A the kernel takes (a decode step: a row a sequence); more: lax
ROWS = 16  # A is padded to this many rows: Triton's dot takes no operand under 16

# Tunables (benchmarks/experiments/int4_kernel_gpu.py times others, passed as ``Tiles``; one
# H200, 2026-11-27, 16 weights a program, float16-equivalent GB/s at one row: steps of 256
# over 128 took 8192 x 2048 from 1,913 to 2,174 and 2048 x 128256 from 2,339 to 3,310, the
# float16 product 1,176 and 4,056; 128 columns on 8 warps 2,223 and 2,069). A program reads BLOCK_N columns of B
# (16 a warp: narrower tiles on 4 warps doubled the instructions a weight in the sm_90a SASS)
# over k_per_program values of K, in steps of STEP_K (one dot each: steps of one block of 32
# took 8.2 SASS instructions a weight, of 128 6.4). K is split among programs (partial sums
# added by XLA) until the grid has TARGET_PROGRAMS programs (about two a multiprocessor of an
# H100 or H200, 132), but no program reads fewer than MIN_K_PER_PROGRAM values of K (the
# partial sums of 16 rows are 64 bytes a column a program, against 128 bytes of codes at 256)
# nor, since its loop is unrolled, more than MAX_K_PER_PROGRAM. WEIGHTS_FIRST takes the dot as
# w x A^T (the codes' tile the left operand, {BLOCK_N, 16} accumulated) rather than A x w^T.
# One H100, 2026-11-28, microseconds a product at one row (q, k and v joined 2048 x 3072, o
# 2048 x 2048, gate and up joined 2048 x 16384, down 8192 x 2048): 256 programs of at least 256
# values of K with A padded 12.7 / 9.3 / 23.6 / 15.6; 512 programs of at least 128 with A's row
# widened in registers (WIDEN_ROW) 10.8 / 8.8 / 17.0 / 14.8, taken.
BLOCK_N = 64
WARPS = 4
STEP_K = 256
TARGET_PROGRAMS = 512
MIN_K_PER_PROGRAM = 128
MAX_K_PER_PROGRAM = 2048
WEIGHTS_FIRST = True
# A product of one row as a sum of products on the vector units rather than Triton's dot: A
# read as its one row (no padding to 16 rows, no pad kernel beside each call), each weight
# times its value of A in float32 and the row summed; the codes read as bytes where the default
# form reads them so. One H200, 2026-11-28: alone, no form of it beat the dot at all four of the
# 1B-class decoder's shapes (benchmarks/experiments/README.md, ``row-all-*``), and in that
# decoder o's product took 61.7 us a token against the dot's 60.6: off.
ONE_ROW = False
# The one-row form, where ONE_ROW is on, takes products of at most ROW_MAX_WEIGHTS weights
# (one H100, 2026-11-28, float16-equivalent GB/s of 16 products a program at one row: q, k and
# v joined, 2048 x 3072, 1,417 against the dot's 947; o, 2048 x 2048, 767 against 714; gate and
# up joined, 2048 x 16384, 1,527 against 2,811; down, 8192 x 2048, 1,858 against 2,318), and
# narrows its programs (BLOCK_N halved, down to 16) until there are ROW_PROGRAMS of them before
# K is split. (Narrowed so with the dot, q, k and v joined took 26.2 us against 13.3 unnarrowed.)
ROW_MAX_WEIGHTS = 1 << 23
ROW_PROGRAMS = 128
# Loads issued AHEAD steps before the step that uses them (0: each step loads, then computes),
# unrolled (a loop's loads are as Triton pipelines them). The gate and up kernel of the
# 1B-class decoder (16 MB of codes) ran at about 0.9 TB/s on an H100 with 157 registers a
# thread and a third of the issue rate busy: its loads wait. Two steps ahead with A's row
# widened, the codes read as 4-bit values (benchmarks/experiments/README.md, ``widen-a2``), was
# no faster overall than none; in the bytes form (one H200, 2026-11-29, the 1B-class int4
# decoder, tokens/s in the loop) one step ahead 1,214 and every step 1,154 against none's
# 1,324 (168 registers a thread against 128), steps of 128 one ahead 990 and three 912: 0.
AHEAD = 0
# One row of A read as it is and widened to Triton's 16 rows in registers (its other rows
# zero), the product's first column kept: no pad kernel before each product, and each program
# reads 2 bytes of A a value of K rather than 32 (the 16 rows of a padded A were as many bytes
# as the codes a program reads). Timed above: on.
WIDEN_ROW = True

# The program's steps along K as a loop (``lax.fori_loop``: Triton's software pipeliner keeps
# STAGES steps of loads in flight, cp.async into shared memory) rather than unrolled, the codes
# read as their bytes (``BYTES_FORM``). Slower in the decoder than unrolled (below): off.
LOOP = False
STAGES = 3
# Where K is split among programs, each program adds its float32 sums into one float32 product
# atomically (Triton's atomic add; the product starts as zeros) instead of writing them apart
# for XLA to add: no reduction kernel after the product (the conversion to A's type then joins
# its reader's kernel). The float32 sums then arrive in an order that may change from run to run
# (before the one rounding to A's type; docs/semantics.md). Not yet timed on a GPU: off.
ATOMIC_SPLITS = False
# The codes read as their bytes (``LOOP`` off: unrolled), each byte's two codes split by PTX
# that writes float16 1024 + q in pairs, about one instruction a code (``nibbles_plus_1024``;
# the codes read as 4-bit values took about 3.4 instructions a code for that in the sm_90a SASS:
# Pallas's shifts, the join of the two halves, the bits of 1024); the low nibbles times A's
# even values, the high ones times its odd ones. A session's held 4-bit weights arrive as their
# bytes (``fastpath.packed_bytes``), so no program step packs them. One H100, 2026-11-28, the
# 1B-class int4 decoder at batch 1 (decode_step_gpu.py, 128 tokens): the 4-bit codes' form 959
# tokens/s (its float16 export 735 in that run), this form 1,055 (float16 718), its kernels a
# token: gate and up 243 -> 195 us, down 145 -> 127, the head 99 -> 76, q, k and v and o
# unchanged; with 128 columns on 8 warps 959, as the loop (512 programs of 512 values) 979. On.
BYTES_FORM = True

# In the bytes form, each byte's two codes joined back into K's order (a register-level join)
# so that a step is one dot of the weights by A's contiguous values, rather than two dots by A's
# even and odd values read at a stride of 2. In the sm_90a SASS of Triton 3.8 (lowered on the
# CPU, gate and up joined, 2048 x 16384): the defaults 2,240 instructions a thread on 128
# registers, 153 shared-memory stores (A's row widened to 16 and stored for each dot, 16-bit
# stores) and 33 barriers; joined, 2,776 on 168 registers, 25 stores, 25 barriers (the join's
# byte permutations: 808 PRMT against 456); joined with A first (``weights_first`` off:
# mma.sync on registers, no wgmma), 2,896 on 96 registers, 26 stores. Timed in the 1B-class
# int4 decoder on an H200 (2026-11-29, ``decode_step_gpu.py --int4 --int4-only --int4-tiles ""
# natural_k=1 "natural_k=1,weights_first=0"``), tokens/s in the loop: the defaults 1,334, joined
# 1,098 (gate and up 198.6 -> 273.2 us a token), joined with A first 1,250: off.
NATURAL_K = False
# In the bytes form on one row of A (``widen_row``), A's even and odd values of a step as the
# first two rows of one widened operand that both of the step's dots read (the low codes' dot
# keeps its first column, the high codes' its second, each in an accumulator of its own), where
# each dot has an operand of its own, A's even or odd values with 15 rows of zeros, which Triton
# stores to shared memory for it: one such store and wait a step, not two. The same products,
# summed in float32 in another order. One H200, 2026-11-30, the 1B-class int4 decoder at batch
# 1 (``decode_step_gpu.py --int4 --int4-only --int4-tiles "" paired_rows=1``), tokens/s in the
# loop / a dispatch a token: 1,331 / 1,322 -> 1,352 / 1,341, the 4-bit kernels 777 -> 762 us a
# token (each of the five products a little faster): on.
PAIRED_ROWS = True

# Whether the float32 partial sums of a product whose K is split among programs are added after
# the call one addition a split on static slices (elementwise, which XLA may take into each
# reader's fusion, as it takes the other small elementwise work there) rather than by a
# reduction over the splits, which in the 1B-class int4 decoder's HLO on an H200 was a kernel
# of its own after q, k and v's product (its three readers, the rotations and the cache's
# joins, each a fusion; 2026-11-30), joined to the one reader after the others. Timed with
# ``decode_attention.FOLD_SPLITS`` (both off against both on, one H200, 2026-11-30, a step a
# dispatch, ``decode_step_gpu.py --int4 --flags default --samples 3 --steps 1 --set "" ...``):
# the int4 decoder 234 -> 205 kernels a token, 1,340 / 1,326 -> 1,341 / 1,350 tokens/s in the
# loop / a dispatch a token (float16 988 / 988 -> 1,001 / 1,002): on.
SPLIT_ADDS = True


@dataclass(frozen=True)
class Tiles:
    """The tunables of one kernel: its defaults are the module's constants above."""

    block_n: int = BLOCK_N
    warps: int = WARPS
    step_k: int = STEP_K
    target_programs: int = TARGET_PROGRAMS
    min_k: int = MIN_K_PER_PROGRAM
    max_k: int = MAX_K_PER_PROGRAM
    weights_first: bool = WEIGHTS_FIRST
    one_row: bool = ONE_ROW
    row_max_weights: int = ROW_MAX_WEIGHTS
    row_programs: int = ROW_PROGRAMS
    ahead: int = AHEAD
    widen_row: bool = WIDEN_ROW
    loop: bool = LOOP
    stages: int = STAGES
    bytes_form: bool = BYTES_FORM
    atomic: bool = ATOMIC_SPLITS
    natural_k: bool = NATURAL_K
    paired_rows: bool = PAIRED_ROWS


@dataclass(frozen=True)
class View:
    """A product of ``m`` rows, N = ``n``, K = ``k`` in quantization blocks of ``block``, by
    programs of ``block_n`` columns and ``k_per_program`` values of K, in steps of ``step``."""

    m: int
    n: int
    k: int
    block: int
    block_n: int
    k_per_program: int
    step: int
    warps: int
    weights_first: bool
    one_row: bool = False
    ahead: int = 0
    widen_row: bool = False
    loop: bool = False
    stages: int = 1
    bytes_form: bool = False
    atomic: bool = False
    natural_k: bool = False
    paired_rows: bool = False

    @property
    def splits(self) -> int:
        """Programs along K (1: the kernel writes the product itself)."""
        return self.k // self.k_per_program


def plan(m: int, n: int, k: int, block: int, tiles: Tiles | None = None) -> View | None:
    """The kernel's view of A {m, k} times the blocked codes {n, k} (one scale a ``block`` of
    K), or None where lax keeps the product."""
    tiles = tiles or Tiles()
    if not 1 <= m <= MAX_ROWS or n < 16 or k < 1 or block < 16 or block & (block - 1):
        return None
    if k % block or block > tiles.max_k:
        return None
    bn = tiles.block_n
    while bn > 16 and n % bn:
        bn //= 2
    if n % bn:
        return None
    row = tiles.one_row and m == 1 and n * k <= tiles.row_max_weights
    target = tiles.row_programs if row else tiles.target_programs
    while row and bn > 16 and n // bn < target:
        bn //= 2
    count = k // block
    per = None
    for splits in (s for s in range(1, count + 1) if count % s == 0):
        if k // splits > tiles.max_k:
            continue
        if per is not None and k // splits < tiles.min_k:
            break
        per = k // splits
        if (n // bn) * splits >= target:
            break
    group = max(1, tiles.step_k // block)  # blocks a step: a power of two dividing the program's
    while (per // block) % group:
        group //= 2
    loop = tiles.loop and not row and per // (group * block) > 1 and group * block >= 32
    as_bytes = loop or (tiles.bytes_form and group * block >= 32)
    return View(m, n, k, block, bn, per, group * block, tiles.warps, tiles.weights_first, row,
                0 if loop else tiles.ahead, tiles.widen_row and m == 1 and not row, loop,
                tiles.stages if loop else 1, as_bytes, tiles.atomic and k // per > 1,
                tiles.natural_k and as_bytes and not row,
                tiles.paired_rows and as_bytes and tiles.widen_row and m == 1 and not row
                and not tiles.natural_k)  # fmt: skip


def int4_product(
    a,
    q,
    scale,
    zero=None,
    *,
    interpret: bool = False,
    tiles: Tiles | None = None,
    signed: bool = False,
    norm: tuple | None = None,
):
    """``A x w^T`` in A's type for A {M, K} and ``w = round((q - zero) * scale)`` of the 4-bit
    codes ``q`` {N, K} (``jnp.uint4`` or ``jnp.int4``; or their bytes {N, K / 2}, uint8,
    DirectML's packing, two's complement where ``signed``) with ``scale`` {N, K / block} (A's
    type) and ``zero`` (the codes' type, or None for 0) of those sizes: DEQUANTIZE then GEMM's
    product, on the kernel ``plan`` gives (it must give one). ``norm`` (gamma {1, K},
    epsilon, once): A is then the RMS normalization of ``a``'s one row as the graph's
    prologue run computes it (``_normed``: rounded after the normalization and again after
    gamma, or with ``once`` after both; the bytes form on one row only, ``plan``'s
    ``widen_row``)."""
    (m, k), (n, blocks) = a.shape, scale.shape
    v = plan(m, n, k, k // blocks, tiles)
    if q.dtype == jnp.uint8 and not v.bytes_form:  # packed bytes: their codes
        codes = lax.bitcast_convert_type(q, jnp.int4 if signed else jnp.uint4)
        q = codes.reshape(n, k)
    if v.bytes_form:
        return _from_bytes(a, q, scale, zero, v, interpret, signed or q.dtype == jnp.int4, norm)
    if norm is not None:
        raise ValueError("int4_product: a normalized A needs the bytes form on one row")
    t, bn, per, bs, step = a.dtype, v.block_n, v.k_per_program, v.block, v.step
    group = step // bs  # quantization blocks a step
    rows, a16 = _a_rows(a, v)
    args = [a16, q, scale]
    if zero is not None:
        # Slices of whole bytes are read as 4-bit values; a step of one block reads a {BLOCK_N,
        # 1} slice, no byte, so its zero points are read as bytes (converted per call). (A
        # converted per call, once the zero points were arguments rather than constants XLA
        # folded, was 48 kernels a token of the 1B-class int4 decoder, 82 us of its 1,655.)
        if group % 2 or (per // bs) % 2:
            zero = zero.astype(jnp.int8 if zero.dtype == jnp.int4 else jnp.uint8)
        args.append(zero)
    magic = t == jnp.float16 and q.dtype == jnp.uint4  # (_plus_1024)
    precision = matmul_precision() if t == jnp.float32 else None
    wf = v.weights_first

    def kernel(a_ref, q_ref, s_ref, *refs):
        *z_ref, o_ref = refs
        if v.one_row:  # products summed along K at the end: no reduction across lanes a step
            acc = jnp.zeros((bn, step), jnp.float32)
        else:
            acc = jnp.zeros((bn, ROWS) if wf else (ROWS, bn), jnp.float32)
        steps = per // step

        def load(j):  # a step's codes, zero points, scales and A, at constant offsets
            cols, blks = slice(j * step, (j + 1) * step), slice(j * group, (j + 1) * group)
            zeros = z_ref[0][:, blks] if z_ref else None
            return q_ref[:, cols], zeros, s_ref[:, blks], a_ref[:, cols]

        def compute(acc, raw, zeros, scale_, x):
            codes = _plus_1024(raw, t) if magic else raw.astype(t)
            w = _dequantized(codes, _offset(zeros, bn, group, t, magic), scale_, group)
            if v.one_row:  # float16 products exact in float32 (11-bit by 11-bit significands)
                return acc + w.astype(jnp.float32) * x.astype(jnp.float32)
            return _dot(acc, w, x, v, precision)

        loaded: list = []
        for j in range(steps):  # unrolled: each slice at a constant offset
            while len(loaded) <= min(j + v.ahead, steps - 1):
                loaded.append(load(len(loaded)))
            acc = compute(acc, *loaded[j])
        _write(o_ref, _result(acc, v), v)

    return _launch(kernel, args, v, rows, t, per, interpret)


def _a_rows(a, v: View):
    """(rows, A as the programs read it): its one row (the one-row form, or widened in
    registers), else padded to ``ROWS`` rows."""
    rows = 1 if v.one_row or v.widen_row else ROWS
    if rows == 1:
        return rows, a
    return rows, lax.pad(a, jnp.zeros((), a.dtype), ((0, ROWS - a.shape[0], 0), (0, 0, 0)))


def _plus_1024(raw, t):
    """Unsigned codes into float16 without a conversion instruction (a quarter-rate one): the
    bits 0x6400 | q are the float16 1024 + q, exactly, from which 1024 (+ z) is subtracted."""
    return lax.bitcast_convert_type(raw.astype(jnp.uint16) | jnp.uint16(0x6400), t)


def _offset(zeros, bn: int, group: int, t, magic: bool):
    """What a step subtracts from its codes, a block each: the zero points (or 0), plus 1024
    where the codes came through ``_plus_1024``."""
    offset = jnp.full((bn, group), 1024 if magic else 0, t)
    return offset if zeros is None else offset + zeros.astype(t)


def _dequantized(codes, offset, scale, group: int):
    """DEQUANTIZE's weights of a step's codes {bn, width} in ``group`` blocks of K:
    ``(codes - offset) * scale``, each block by its own, exact and then rounded once."""
    bn, width = codes.shape
    if group > 1:  # each block of the step by its own scale and zero point
        codes = codes.reshape(bn, group, width // group)
        offset, scale = offset[:, :, None], scale[:, :, None]
    return ((codes - offset) * scale).reshape(bn, width)


def _dot(acc, w, x, v: View, precision):
    """``acc`` plus the step's product of the weights ``w`` {bn, width} and A's values ``x``
    {rows, width} (its one row widened to the dot's ``ROWS`` rows, the others zeros)."""
    if v.widen_row and x.shape[0] == 1:
        x = _widened(x)
    lhs, rhs = (w, x) if v.weights_first else (x, w)
    return acc + lax.dot_general(lhs, rhs, (((1,), (1,)), ((), ())), precision=precision,
                                 preferred_element_type=jnp.float32)  # fmt: skip


def _widened(*rows):
    """Rows {1, width} of A as the first rows of a dot operand of ``ROWS`` rows, the others
    zeros: its one row (``widen_row``), or its even and odd values (``PAIRED_ROWS``)."""
    shape = (ROWS, rows[0].shape[1])
    index = lax.broadcasted_iota(jnp.int32, shape, 0)
    out = jnp.zeros(shape, rows[0].dtype)
    for k in reversed(range(len(rows))):
        out = jnp.where(index == k, jnp.broadcast_to(rows[k], shape), out)
    return out


def _result(acc, v: View):
    """A program's product {rows, bn} from its float32 sums (the other rows of a widened row
    are zeros: their sums drop, exactly; with ``paired_rows`` the low codes' sums are the
    first row of A's pair, the high codes' the second)."""
    if v.paired_rows:
        lo, hi = acc
        axis = 1 if v.weights_first else 0
        which = lax.broadcasted_iota(jnp.int32, lo.shape, axis)
        both = jnp.where(which == 0, lo, 0.0) + jnp.where(which == 1, hi, 0.0)
        return jnp.sum(both, axis=axis)[None, :]
    if v.one_row or (v.widen_row and v.weights_first):
        return jnp.sum(acc, axis=1)[None, :]
    if v.widen_row:
        return jnp.sum(acc, axis=0)[None, :]
    return acc.T if v.weights_first else acc


def _write(o_ref, value, v: View) -> None:
    """A program's float32 sums into its output block: stored (the product, or this program's
    partial sums along K), or added atomically to the other programs' (``v.atomic``)."""
    if v.atomic:
        _, pltriton = load_pallas()
        pltriton.atomic_add(o_ref, (slice(None), slice(None)), value)
    else:
        o_ref[...] = value.astype(o_ref.dtype)


def _launch(
    kernel, args: list, v: View, rows: int, t: Any, code_width: int, interpret: bool,
    extra: tuple = (),
):  # fmt: skip
    """``kernel`` on the grid of ``v``: programs of ``block_n`` columns by ``k_per_program``
    values of K, reading ``rows`` rows of A, ``code_width`` columns of the codes (4-bit codes,
    or their bytes), the scales and the zero points (a fourth argument, where given), then
    ``extra``'s operands of A's prologue, each with how a program reads it; the product of A's
    ``v.m`` rows in ``t``, partial sums along K added in float32 first."""
    pl, pltriton = load_pallas()
    bn, count = v.block_n, v.k_per_program // v.block
    specs = [
        pl.BlockSpec((rows, v.k_per_program), lambda i, s: (0, s)),
        pl.BlockSpec((bn, code_width), lambda i, s: (i, s)),
        pl.BlockSpec((bn, count), lambda i, s: (i, s)),
    ]
    if len(args) > 3:
        specs.append(pl.BlockSpec((bn, count), lambda i, s: (i, s)))
    blocks = {  # how a program reads each extra operand of A's prologue
        "row": ((1, v.k), lambda i, s: (0, 0)),  # a normalized A's whole row (mean square)
        "k": ((1, v.k_per_program), lambda i, s: (0, s)),  # gamma by the program's K
    }
    for array, block in extra:
        args = [*args, array]
        specs.append(pl.BlockSpec(*blocks[block]))
    aliases = {}
    if v.atomic:  # every split adds into one float32 product, zeros to start (aliased)
        out_shape = jax.ShapeDtypeStruct((rows, v.n), jnp.float32)
        out_spec = pl.BlockSpec((rows, bn), lambda i, s: (0, i))
        specs.append(out_spec)
        args = [*args, jnp.zeros((rows, v.n), jnp.float32)]
        aliases = {len(args) - 1: 0}
        body = kernel

        def kernel(*refs):  # the zeros' ref is the output's: the kernel writes through that one
            body(*refs[:-2], refs[-1])
    elif v.splits == 1:
        out_shape = jax.ShapeDtypeStruct((rows, v.n), t)
        out_spec = pl.BlockSpec((rows, bn), lambda i, s: (0, i))
    else:
        out_shape = jax.ShapeDtypeStruct((v.splits, rows, v.n), jnp.float32)
        out_spec = pl.BlockSpec((None, rows, bn), lambda i, s: (s, 0, i))
    out = pl.pallas_call(
        kernel,
        out_shape=out_shape,
        grid=(v.n // bn, v.splits),
        in_specs=specs,
        out_specs=out_spec,
        input_output_aliases=aliases,
        interpret=interpret,
        compiler_params=pltriton.CompilerParams(num_warps=v.warps, num_stages=v.stages),
    )(*args)
    if v.atomic:
        return out[: v.m].astype(t)  # one rounding, as the dot's
    if v.splits == 1:
        return out[: v.m]
    return _split_sum(out[:, : v.m]).astype(t)  # one rounding, as the dot's


def _split_sum(parts):
    """The programs' float32 partial sums {splits, rows, N} added (``SPLIT_ADDS``)."""
    if not SPLIT_ADDS:
        return jnp.sum(parts, axis=0)
    total = parts[0]
    for s in range(1, parts.shape[0]):  # elementwise, in order
        total = total + parts[s]
    return total


def _from_bytes(a, q, scale, zero, v: View, interpret: bool, signed: bool, norm=None):
    """``int4_product``'s kernel on the codes' bytes (``BYTES_FORM``, ``LOOP``): each byte's
    low nibble a weight of an even value of K, its high one of an odd, split by PTX
    (``nibbles_plus_1024``) where the codes are unsigned and A float16; its steps along K
    unrolled, or a loop (``v.loop``). ``q`` may be the bytes themselves ({N, K / 2} uint8,
    DirectML's packing), which no program step then converts."""
    pl, _ = load_pallas()
    k, n = a.shape[1], scale.shape[0]
    t, bn, per, bs, step = a.dtype, v.block_n, v.k_per_program, v.block, v.step
    group, half, steps = step // bs, step // 2, per // step
    rows, a16 = _a_rows(a, v)
    # byte j of a row: codes 2j (low nibble) and 2j + 1 (high), as DirectML packs them
    if q.dtype != jnp.uint8:
        q = lax.bitcast_convert_type(q.reshape(n, k // 2, 2), jnp.uint8)
    args = [a16, q.reshape(n, k // 2), scale] + ([] if zero is None else [zero])
    if norm is not None and not v.widen_row:
        raise ValueError("int4_product: a normalized A needs the bytes form on one row")
    extra: tuple = ()  # (operand, how a program reads it), after the codes' (``_launch``)
    if norm is not None:
        extra = ((a16, "row"), (norm[0].reshape(1, k), "k"))
    once = norm is not None and norm[2]
    magic = t == jnp.float16 and not signed
    precision = matmul_precision() if t == jnp.float32 else None

    def nibbles(raw):  # the low and high codes of each byte, as values of T (1024 + q: magic)
        if signed:  # two's complement nibbles, sign-extended
            b = lax.bitcast_convert_type(raw, jnp.int8)
            lo, hi = lax.shift_right_arithmetic(b << 4, jnp.int8(4)), b >> 4
            return lo.astype(t), hi.astype(t)
        if magic and not interpret:
            return nibbles_plus_1024(raw)
        lo, hi = raw & jnp.uint8(15), raw >> 4
        if magic:
            return _plus_1024(lo, t), _plus_1024(hi, t)
        return lo.astype(t), hi.astype(t)

    def at(j, size):  # a step's offset: constant where unrolled
        return j * size if isinstance(j, int) else pl.multiple_of(j * size, size)

    def kernel(a_ref, q_ref, s_ref, *refs):
        *z_ref, o_ref = refs
        if norm is not None:
            *z_ref, row_ref, g_ref = z_ref
            r = _rms_factor(row_ref[...], norm[1])

        def a_values(start, size, stride):  # A's values there (normalized as read)
            x = a_ref[:, pl.ds(start, size, stride=stride)]
            if norm is not None:
                x = _normed(x, r, g_ref[:, pl.ds(start, size, stride=stride)], once)
            return x

        def load(j):  # a step's codes, zero points, scales and A
            blks, start = pl.ds(at(j, group), group), at(j, step)
            if v.natural_k:  # A's step of values in order (``odd`` unused)
                even, odd = a_values(start, step, 1), None
            else:
                even, odd = a_values(start, half, 2), a_values(start + 1, half, 2)
            zeros = z_ref[0][:, blks] if z_ref else None
            return q_ref[:, pl.ds(at(j, half), half)], zeros, s_ref[:, blks], even, odd

        def body(j, acc):
            return compute(acc, *load(j))

        def compute(acc, raw, zeros, scale_, even, odd):
            lo, hi = nibbles(raw)
            offset = _offset(zeros, bn, group, t, magic)
            if v.natural_k:  # byte j's codes are K's 2j and 2j + 1
                codes = jnp.stack([lo, hi], axis=-1).reshape(bn, step)
                return _dot(acc, _dequantized(codes, offset, scale_, group), even, v, precision)
            lo, hi = (
                _dequantized(lo, offset, scale_, group),
                _dequantized(hi, offset, scale_, group),
            )
            if v.one_row:  # sums of products on the vector units (float16's exact in float32)
                f32 = jnp.float32
                return acc + lo.astype(f32) * even.astype(f32) + hi.astype(f32) * odd.astype(f32)
            if v.paired_rows:  # one operand of A's even and odd values for both dots
                pair = _widened(even, odd)
                return _dot(acc[0], lo, pair, v, precision), _dot(acc[1], hi, pair, v, precision)
            return _dot(_dot(acc, lo, even, v, precision), hi, odd, v, precision)

        if v.one_row:
            acc = jnp.zeros((bn, half), jnp.float32)
        else:
            acc = jnp.zeros((bn, ROWS) if v.weights_first else (ROWS, bn), jnp.float32)
            acc = (acc, acc) if v.paired_rows else acc
        if v.loop:
            acc = lax.fori_loop(0, steps, body, acc)
        else:  # unrolled, each step's loads issued ``v.ahead`` steps before its products
            loaded: list = []
            for j in range(steps):
                while len(loaded) <= min(j + v.ahead, steps - 1):
                    loaded.append(load(len(loaded)))
                acc = compute(acc, *loaded[j])
        _write(o_ref, _result(acc, v), v)

    return _launch(kernel, args, v, rows, t, per // 2, interpret, extra)


def _rms_factor(row, epsilon: float):
    """``1 / sqrt(mean(x^2) + epsilon)`` of a row in float32, as MEAN_VARIANCE_NORMALIZATION2
    without its mean computes it (the sum in another order)."""
    x = row.astype(jnp.float32)
    mean = jnp.sum(x * x) / jnp.float32(row.shape[-1])
    return lax.rsqrt(mean + jnp.float32(epsilon))


def _normed(x, r, gamma, once: bool = False):
    """The prologue run's value of A: ``x`` (float16) in float32 times the factor, rounded to
    float16 (the normalization and its CAST back), times ``gamma``, rounded again (the
    MULTIPLY); with ``once``, times ``gamma`` in float32 and rounded once (a
    MEAN_VARIANCE_NORMALIZATION2 whose Scale is gamma)."""
    t = x.dtype
    y = x.astype(jnp.float32) * r
    if once:
        return (y * gamma.astype(jnp.float32)).astype(t)
    return (gamma.astype(jnp.float32) * y.astype(t).astype(jnp.float32)).astype(t)
