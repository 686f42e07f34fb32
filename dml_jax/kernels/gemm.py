"""A float16 GEMM with its element-wise tail in the epilogue (Pallas on Mosaic GPU, Hopper): the
CUDA fast path of GEMM with a C term, and graph epilogues (``fastpath.register_epilogue``): a
GEMM node computed together with the one node that alone reads its output, ACTIVATION_GELU,
ELEMENT_WISE_ADD(1) (a residual) or MULTIHEAD_ATTENTION(1) reading it as stacked queries, keys
and values.

XLA hands a GEMM to cuBLAS (or its own Triton GEMM) and everything after it to separate loop
fusions: a GELU or a residual add after the GEMM node is one more pass over the result, and the
attention's queries, keys and values are copied out of the stacked projection. Here the
accumulator, still in registers, becomes the node's output and then the consumer's:

    y = round(Alpha * (A x B) + Beta * C)     the GEMM node, rounded to its data type
    y = round(gelu(y))  or  round(y + R)      the consumer node, where fused

and only the last value is stored (with ``split``, in three arrays, one per block kind of the
stacked {.., H, 3, D} columns). The grid is persistent (one program per multiprocessor), each
program a memory warpgroup issuing TMA copies of A and B tiles and two compute warpgroups
issuing WGMMA, on one of two schedules:

- ping-pong (K <= PINGPONG_MAX_K): each compute warpgroup owns whole 128 x 128 tiles, the
  program's tiles dealt out in turn; one ring of up to 5 stages (4 beside a C or R read by
  pieces) is filled in tile order, and a warpgroup's products start when the other's are
  issued, so one's epilogue runs while the other's products do;
- cooperative (longer K): both compute warpgroups on the 128 x 128 halves of one 128 x 256 tile
  (Pallas's warp-specialized pipeline, 3 stages), which reads A once for both and ran the
  second MLP GEMM (K = 4096) faster: 102 us against 115 (H100, benchmarks/RESULTS.md#networks).

Both sum the products in the same order, so their results are equal bit for bit. The epilogue
goes out in 64 x 64 pieces through shared memory and TMA. A bias C (a row broadcast down M, a
stride-0 desc) comes in once a tile as a vector, during the products, and is added to the
whole accumulator; a full C and R come in by pieces, one piece ahead.

GELU is ``0.5 y (1 + erf(y / sqrt 2))`` with erfc from Abramowitz and Stegun 7.1.28 (absolute
error <= 3e-7, ``erfc = P^-16``), taken as ``max(y, 0) - |y| h`` with ``h = erfc(|y| / sqrt 2) /
2 = 2^(-16 log2 P)`` on MUFU's ``lg2`` and ``ex2`` (``_gelu``), so the negative side has no
cancellation and +inf and -inf give +inf and 0. Over every float16 input it is within one
float16 unit of the exact GELU, except where GELU is tiny (y in (-5, -3.6), results of
magnitude below 6e-4): there the polynomial's absolute error reaches 8 units
(``test_gelu_formula_against_erf``). The GEMM node is rounded once (Alpha, Beta and C applied
to the float32 accumulator), where the lax lowering rounds the float16 product first
(docs/semantics.md); results are within ``2^-10 |want| + 2^-10 max |want|`` of the lax nodes'
(``tests/test_gemm_kernel.py``), and the products' summation order differs from XLA's, so
they are not bit-equal.

Measured on an H100 (benchmarks/RESULTS.md#networks), M = 8192 tokens, kernel time with many
dispatches and one sync: the GPT's first MLP GEMM with its bias and GELU 129 us (ping-pong;
cooperative 139, XLA's GEMM and GELU 172 in benchmarks/RESULTS.md#networks); the QKV projection with
its bias, Q, K and V written apart, 80 (cooperative 86, XLA 128); the residual adds fused 45-63 (N =
K = 1024) and 102 (K = 4096, cooperative) against XLA's 50 and 117. The GPT stack runs 1.20-1.21x
PyTorch eager in the bench with this GELU (benchmarks/RESULTS.md#networks; 1.18-1.19x with the
previous one in benchmarks/RESULTS.md#networks, 1.04x before the kernel, 1.16x with the cooperative
schedule alone); on an H200 1.13x (benchmarks/RESULTS.md#networks, the previous GELU), at the GPU's
power cap.

``plan`` takes 2-D problems (leading dimensions of 1), A not transposed, B either way, M a
multiple of 128, N of 256 and K of 64, on a Hopper GPU (WGMMA and TMA; compute capability
9.0); anything else stays with lax.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..fastpath import register_epilogue, register_fast_path
from .mosaic import hopper, multiprocessors, swizzled

# Tunables (benchmarks/mgpu_gemm_probe.py (git history), commit 5a9046f, on an H100): 128 x 128 per
# compute warpgroup, K steps of 64, 3 stages in flight (4 do not fit beside the epilogue's buffers),
# tiles visited in bands 4 tiles wide (``planar_snake``).
TILE_M = 128
TILE_N = 128  # per compute warpgroup; a cooperative program's tile is TILE_M x 2 * TILE_N
TILE_K = 64
STAGES = 3  # cooperative schedule
BAND = 4
EPI = 64  # epilogue pieces, EPI x EPI
DTYPES = frozenset({np.dtype("float16")})  # DirectML has no bfloat16


@dataclass(frozen=True)
class View:
    """{M, K} x B -> {M, N}; ``b_nk``: B is held as {N, K} (TransB TRANSPOSE)."""

    m: int
    n: int
    k: int
    b_nk: bool


def plan(a_sizes, b_sizes, trans_a: bool, trans_b: bool, dtype) -> View | None:
    """The kernel's view of a GEMM, or None where it stays with lax."""
    if np.dtype(dtype) not in DTYPES or trans_a or len(a_sizes) != len(b_sizes):
        return None
    if any(s != 1 for s in tuple(a_sizes[:-2]) + tuple(b_sizes[:-2])):
        return None
    m, k = a_sizes[-2:]
    n, kb = b_sizes[-2:] if trans_b else b_sizes[-2:][::-1]
    if kb != k or m % TILE_M or n % (2 * TILE_N) or k % TILE_K:
        return None
    return View(m, n, k, trans_b)


# Abramowitz and Stegun 7.1.28: erfc(x) = P(x)^-16, P(x) = 1 + sum A[i] x^(i + 1) (|error| <=
# 3e-7), rewritten as a polynomial in |y| = x sqrt 2 and scaled by 2^(1/16), so that its
# -16th power is erfc(|y| / sqrt 2) / 2 directly.
_AS_7_1_28 = (0.0705230784, 0.0422820123, 0.0092705272, 0.0001520143, 0.0002765672, 0.0000430638)
_GELU_POLY = tuple(
    float(np.float32(2 ** (1 / 16) * c / math.sqrt(2) ** i))
    for i, c in enumerate((1.0,) + _AS_7_1_28)
)
_GELU_CLAMP = 1e4  # |y| beyond this: the tail factor is 0 in float32 (no inf * 0 at y = +-inf)


def _gelu(y, log2=jnp.log2, exp2=jnp.exp2):
    """GELU in float32, ``0.5 y (1 + erf(y / sqrt 2))``, as ``max(y, 0) - |y| h`` with ``h =
    erfc(|y| / sqrt 2) / 2 = 2^(-16 log2 P)`` (A&S 7.1.28: ``P`` of degree 6 in ``|y|``).
    Below zero that is ``y h`` (no cancellation), above it ``y (1 - h)``; at +-inf it is +inf
    and 0, the limits (``|y|`` is clamped, ``h`` being 0 there). In the kernel ``log2`` and
    ``exp2`` are MUFU's ``lg2`` / ``ex2.approx.ftz`` (relative error 2^-22, which the 16th
    power makes 2^-18): 13 operations an element (abs, clamp, six FMAs, lg2, a multiply, ex2,
    max, one FMA), where the reciprocal square root raised by five squarings took 19; the GPT's
    fc1 with its bias and GELU fell from 116.3 to 107.9 us (H100,
    benchmarks/RESULTS.md#networks)."""
    a = jnp.minimum(jnp.abs(y), _GELU_CLAMP)
    p = _GELU_POLY[-1]
    for c in _GELU_POLY[-2::-1]:
        p = c + a * p
    h = exp2(-16.0 * log2(p))
    return jnp.maximum(y, 0.0) - a * h


def _kernel_gelu(y):
    """``_gelu`` inside the kernel, on MUFU's approximate base-2 logarithm and exponential."""
    from .mosaic import approx

    return _gelu(y, lambda x: approx(x, "lg2"), lambda x: approx(x, "ex2"))


PINGPONG_MAX_K = (
    2048  # longer products keep the cooperative schedule (benchmarks/RESULTS.md#networks)
)
PP_STAGES = 5  # ping-pong ring stages, at most (fewer where the epilogue's buffers need room)
SMEM_LIMIT = 227 * 1024


def _pingpong_stages(k_iters: int, pieces: int) -> int:
    """Stages of the ping-pong ring: as many 32 KiB stages as fit beside the epilogue's
    buffers (the output's and one per C or R read by pieces, 32 KiB each), at most
    PP_STAGES."""
    room = (SMEM_LIMIT - 4096 - 32768 * (1 + pieces)) // 32768
    return max(1, min(PP_STAGES, room, k_iters))


@dataclass(frozen=True)
class _Grid:
    """A call's tiles and ring: ``m_iters`` x ``n_iters`` tiles (a program's, or with ping-pong
    a warpgroup's), ``k_iters`` steps of TILE_K, ``stages`` in flight, ``programs`` (one a
    multiprocessor), and the shared-memory ``transforms`` of the A and B tiles."""

    m_iters: int
    n_iters: int
    k_iters: int
    stages: int
    programs: int
    transforms: tuple


@dataclass(frozen=True)
class _Form:
    """What a call computes besides the products (static)."""

    alpha: float
    beta: float
    c_row: bool  # C is a bias row
    full_c: bool  # C is {M, N}, read by pieces
    gelu: bool
    residual: bool
    split: int


def _epilogue(f: _Form, dtype, wg, refs: dict):
    """The epilogue of a warpgroup's TILE_M x TILE_N tile: ``start(cm, cn)`` issues the copies
    of its bias and first C / R piece (before the products); ``finish(acc_ref, cm, cn, col0)``
    stores ``round(Alpha * acc + Beta * C)`` (or its GELU, or plus R) by EPI x EPI pieces,
    ``col0`` the tile's first column. Unless C comes by pieces, the GEMM node is rounded for
    the whole tile at once, so the tile is held as float16 (half the registers) during the
    pieces' math."""
    import jax.experimental.pallas as pl
    import jax.experimental.pallas.mosaic_gpu as plgpu

    grid_pieces = [(ei, ej) for ei in range(TILE_M // EPI) for ej in range(TILE_N // EPI)]
    x_smem, x_bar = refs["x_smem"], refs["x_bar"]
    out_smem, out_gmem = refs["out_smem"], refs["out_gmem"]

    def at(p):
        ei, ej = grid_pieces[p]
        return slice(ei * EPI, (ei + 1) * EPI), slice(ej * EPI, (ej + 1) * EPI)

    def fetch(p, cm, cn):  # piece p's C and R into slot p % 2
        ms, ns = at(p)
        for src, dst, bar in zip(refs["piece_gmem"], x_smem, x_bar):
            plgpu.copy_gmem_to_smem(
                src.at[cm, cn].at[ms, ns], dst.at[wg, p % 2], bar.at[2 * wg + p % 2]
            )

    def start(cm, cn):
        if refs["bias_gmem"] is not None:
            plgpu.copy_gmem_to_smem(
                refs["bias_gmem"].at[cn], refs["bias_smem"].at[wg], refs["bias_bar"].at[wg]
            )
        if x_smem:
            fetch(0, cm, cn)

    def finish(acc_ref, cm, cn, col0):
        acc = acc_ref[...]
        if f.alpha != 1.0:
            acc = f.alpha * acc
        if refs["bias_gmem"] is not None:
            plgpu.barrier_wait(refs["bias_bar"].at[wg])
            row = plgpu.load(
                refs["bias_smem"].at[wg], (), layout=plgpu.Layout.WGMMA.reduce(0)
            ).astype(jnp.float32)
            if f.beta != 1.0:
                row = f.beta * row
            acc = acc + lax.broadcast_in_dim(row, (TILE_M, TILE_N), [1])
        if not f.full_c:
            acc = acc.astype(dtype)
        plgpu.wait_smem_to_gmem(0, wait_read_only=True)
        for p in range(len(grid_pieces)):
            ms, ns = at(p)
            if x_smem and p + 1 < len(grid_pieces):
                fetch(p + 1, cm, cn)
            for bar in x_bar:
                plgpu.barrier_wait(bar.at[2 * wg + p % 2])
            y = acc[ms, ns]
            if f.full_c:
                cv = x_smem[0][wg, p % 2].astype(jnp.float32)
                y = (y + (cv if f.beta == 1.0 else f.beta * cv)).astype(dtype)
            if f.gelu:
                y = _kernel_gelu(y.astype(jnp.float32)).astype(dtype)
            if f.residual:
                r = x_smem[-1][wg, p % 2].astype(jnp.float32)
                y = (y.astype(jnp.float32) + r).astype(dtype)
            plgpu.wait_smem_to_gmem(1, wait_read_only=True)
            out_smem[wg, p % 2] = y
            plgpu.commit_smem()
            if not f.split:
                plgpu.copy_smem_to_gmem(out_smem.at[wg, p % 2], out_gmem[0].at[cm, cn].at[ms, ns])
                continue
            col = col0 + ns.start  # in the stacked columns
            kind = (col // f.split) % 3
            first = (col // (3 * f.split)) * f.split + col % f.split  # in that kind's columns
            for t in range(3):

                @pl.when(kind == t)
                def _(t=t, first=first, ms=ms, slot=p % 2):
                    dst = out_gmem[t].at[cm, pl.ds(first, EPI)].at[ms]
                    plgpu.copy_smem_to_gmem(out_smem.at[wg, slot], dst)

    return start, finish


@functools.partial(
    jax.jit, static_argnames=("v", "alpha", "beta", "c_row", "gelu", "split", "schedule")
)
def fused_gemm(a, b, v: View, *, alpha=1.0, beta=1.0, c=None, c_row=False, gelu=False,
               residual=None, split=0, schedule=None):  # fmt: skip
    """``round(Alpha * a @ B + Beta * C)``, then ``round(gelu(.))`` and/or ``round(. + R)``.
    One jitted function per form, so that a program with many calls of one form lowers (and
    compiles) the kernel once.

    ``a``: {M, K}; ``b``: {N, K} if ``v.b_nk`` else {K, N}; ``c``: {M, N}, or with ``c_row``
    any array whose first row is the bias (only row 0 is read); ``residual``: {M, N}.

    ``split`` (a head size D, a multiple of EPI): the N columns are H heads of three D-wide
    blocks (query, key, value: a stacked {.., H, 3, D} tensor), and the result is three
    {M, H * D} arrays, one per block kind, written where the stacked layout's pieces belong.

    ``schedule``: "pingpong" (each compute warpgroup on whole 128 x 128 tiles in turn, one's
    products running while the other's epilogue does), "cooperative" (both on the halves of
    one 128 x 256 tile), or None: ping-pong where K <= PINGPONG_MAX_K. Both sum the products
    in the same order: their results are equal bit for bit.

    A bias row comes into shared memory once a tile (its TMA copy issued before the products)
    and is added to the whole accumulator as a column vector. C and R come in as EPI x EPI
    pieces, two slots a warpgroup, each piece's copy issued while the one before is finished
    (the first before the products)."""
    import jax.experimental.pallas as pl
    import jax.experimental.pallas.mosaic_gpu as plgpu

    schedule = schedule or ("pingpong" if v.k <= PINGPONG_MAX_K else "cooperative")
    pingpong = schedule == "pingpong"
    dtype = a.dtype
    m, n, k = v.m, v.n, v.k
    form = _Form(
        float(np.float32(alpha)), float(np.float32(beta)), c is not None and c_row,
        c is not None and not c_row, gelu, residual is not None, split,
    )  # fmt: skip
    out_transforms = swizzled(plgpu, EPI)
    cta_n = TILE_N if pingpong else 2 * TILE_N  # a warpgroup's tile in turn, or a program's
    bias = c[:1].reshape(n) if form.c_row else None
    pieces = [x for x in ((c if form.full_c else None), residual) if x is not None]
    operands = ([bias] if bias is not None else []) + pieces
    k_iters = k // TILE_K
    grid = _Grid(
        m // TILE_M, n // cta_n, k_iters,
        _pingpong_stages(k_iters, len(pieces)) if pingpong else STAGES,
        multiprocessors(), swizzled(plgpu, TILE_K),
    )  # fmt: skip

    def kernel(a_gmem, b_gmem, *refs):
        scratch = {
            "out_smem": plgpu.SMEM((2, 2, EPI, EPI), dtype, transforms=out_transforms),
            "x_smem": [
                plgpu.SMEM((2, 2, EPI, EPI), dtype, transforms=out_transforms) for _ in pieces
            ],
            "x_bar": [plgpu.Barrier(num_barriers=4) for _ in pieces],
        }
        if bias is not None:
            scratch["bias_smem"] = plgpu.SMEM((2, TILE_N), dtype)
            scratch["bias_bar"] = plgpu.Barrier(num_barriers=2)
        if pingpong:
            b_block = (TILE_N, TILE_K) if v.b_nk else (TILE_K, TILE_N)
            ring = grid.stages
            scratch["a_smem"] = plgpu.SMEM(
                (ring, TILE_M, TILE_K), dtype, transforms=grid.transforms
            )
            scratch["b_smem"] = plgpu.SMEM((ring, *b_block), dtype, transforms=grid.transforms)
            # One set of full barriers a compute warpgroup: each waits only on the phases of
            # its own steps, so its parities stay right however the tiles' steps fall on the
            # ring's stages.
            scratch["full"] = plgpu.Barrier(num_arrivals=2, num_barriers=2 * ring)
            scratch["empty"] = plgpu.Barrier(num_arrivals=1, num_barriers=ring)
            scratch["order"] = plgpu.Barrier(num_arrivals=1, num_barriers=2)
        else:
            scratch["pipeline_allocs"] = _cooperative_pipeline(v, grid, None, None).get_allocations(
                a_gmem, b_gmem
            )

        @functools.partial(pl.run_scoped, **scratch, collective_axes="wg")
        def _scope(**mem):
            wg = lax.axis_index("wg")
            mem["bias_gmem"] = refs[0] if bias is not None else None
            mem["piece_gmem"] = refs[int(bias is not None) : len(operands)]
            mem["out_gmem"] = refs[len(operands) :]
            start, finish = _epilogue(form, dtype, wg, mem)
            run = _pingpong_tiles if pingpong else _cooperative_tiles
            run(v, grid, a_gmem, b_gmem, mem, wg, start, finish)

        plgpu.wait_smem_to_gmem(0, wait_read_only=True)

    out_type = (
        tuple(jax.ShapeDtypeStruct((m, n // 3), dtype) for _ in range(3))
        if split
        else jax.ShapeDtypeStruct((m, n), dtype)
    )
    f = plgpu.kernel(
        kernel,
        out_type=out_type,
        grid=(grid.programs,),
        grid_names=("cluster_grid",),
        cluster=(1,),
        cluster_names=("cluster",),
        num_threads=3,
        thread_name="wg",
        compiler_params=plgpu.CompilerParams(
            approx_math=True, lowering_semantics=plgpu.LoweringSemantics.Warpgroup
        ),
    )
    return f(a, b, *operands)


def _cooperative_pipeline(v: View, grid: _Grid, body, context):
    """Pallas's warp-specialized pipeline over K: a memory warpgroup's TMA copies of A and
    B tiles, ``grid.stages`` in flight, for two compute warpgroups."""
    import jax.experimental.pallas.mosaic_gpu as plgpu

    cta_n = 2 * TILE_N
    transforms = grid.transforms
    return plgpu.emit_pipeline_warp_specialized(
        body,
        grid=(grid.k_iters,),
        memory_registers=40,
        in_specs=[
            plgpu.BlockSpec(
                (TILE_M, TILE_K), lambda s: (0, s), transforms=transforms,
                memory_space=plgpu.SMEM,
            ),
            plgpu.BlockSpec(
                (cta_n, TILE_K) if v.b_nk else (TILE_K, cta_n),
                (lambda s: (0, s)) if v.b_nk else (lambda s: (s, 0)),
                transforms=transforms, memory_space=plgpu.SMEM,
            ),
        ],
        wg_axis="wg",
        num_compute_wgs=2,
        max_concurrent_steps=grid.stages,
        compute_context=context,
    )  # fmt: skip


def _cooperative_tiles(v, grid: _Grid, a_gmem, b_gmem, mem, wg, start, finish):
    """Both compute warpgroups on the halves of one TILE_M x 2 TILE_N tile, the tiles of a
    persistent program in turn."""
    import jax.experimental.pallas as pl
    import jax.experimental.pallas.mosaic_gpu as plgpu

    m_iters, n_iters = grid.m_iters, grid.n_iters
    cta_n = 2 * TILE_N

    @plgpu.nd_loop((m_iters * n_iters,), collective_axes="cluster_grid")
    def _tile(info):
        (lin,) = info.index
        mi, ni = plgpu.planar_snake(lin, (m_iters, n_iters), 1, BAND)
        cm = pl.ds(mi * TILE_M, TILE_M)
        cn = pl.ds(ni * cta_n + wg * TILE_N, TILE_N)

        def context(eval_pipeline):
            @functools.partial(pl.run_scoped, acc_ref=plgpu.ACC((TILE_M, TILE_N), jnp.float32))
            def _acc(acc_ref):
                start(cm, cn)
                eval_pipeline(acc_ref)
                finish(acc_ref, cm, cn, ni * cta_n + wg * TILE_N)

        def mma(idxs, a_smem, b_smem, acc_ref):
            wn = pl.ds(wg * TILE_N, TILE_N)
            rhs = b_smem.at[wn].transpose((1, 0)) if v.b_nk else b_smem.at[:, wn]
            plgpu.wgmma(acc_ref, a_smem, rhs)
            plgpu.wgmma_wait(0)
            return acc_ref

        b_rows = pl.ds(ni * cta_n, cta_n)
        _cooperative_pipeline(v, grid, mma, context)(
            a_gmem.at[cm, :],
            b_gmem.at[b_rows, :] if v.b_nk else b_gmem.at[:, b_rows],
            allocations=mem["pipeline_allocs"],
        )


def _pingpong_tiles(v, grid: _Grid, a_gmem, b_gmem, mem, wg, start, finish):
    """Each compute warpgroup on whole TILE_M x TILE_N tiles, the program's tiles dealt out
    in turn: the memory warpgroup fills one ring of ``stages`` stages in tile order, and a
    warpgroup's products start when the other's are issued, so one's products run while the
    other's epilogue does. A warpgroup keeps one step's products running while it waits for
    the next stage."""
    import jax.experimental.pallas as pl
    import jax.experimental.pallas.mosaic_gpu as plgpu

    m_iters, n_iters, k_iters, stages = grid.m_iters, grid.n_iters, grid.k_iters, grid.stages
    a_smem, b_smem = mem["a_smem"], mem["b_smem"]
    full, empty, order = mem["full"], mem["empty"], mem["order"]
    ncta = grid.programs
    cta = lax.axis_index("cluster_grid")
    mine = (m_iters * n_iters - cta + ncta - 1) // ncta  # this program's tiles

    def where(t):
        mi, ni = plgpu.planar_snake(cta + t * ncta, (m_iters, n_iters), 1, BAND)
        return ni, pl.ds(mi * TILE_M, TILE_M), pl.ds(ni * TILE_N, TILE_N)

    @pl.when(wg == 2)
    def _memory():
        plgpu.set_max_registers(40, action="decrease")

        def tile(t, carry):
            _, cm, cn = where(t)

            def step(kk, carry):
                g = t * k_iters + kk
                slot = lax.rem(g, stages)

                @pl.when(g >= stages)
                def _wait():
                    plgpu.barrier_wait(empty.at[slot])

                ks = pl.ds(kk * TILE_K, TILE_K)
                ready = full.at[lax.rem(t, 2) * stages + slot]
                plgpu.copy_gmem_to_smem(a_gmem.at[cm, ks], a_smem.at[slot], ready)
                src = b_gmem.at[cn, ks] if v.b_nk else b_gmem.at[ks, cn]
                plgpu.copy_gmem_to_smem(src, b_smem.at[slot], ready)
                return carry

            return lax.fori_loop(0, k_iters, step, carry)

        lax.fori_loop(0, mine, tile, None)

    @pl.when(wg < 2)
    def _compute():
        plgpu.set_max_registers(232, action="increase")

        def tile(t2, carry):
            t = wg + 2 * t2
            ni, cm, cn = where(t)

            @functools.partial(pl.run_scoped, acc_ref=plgpu.ACC((TILE_M, TILE_N), jnp.float32))
            def _acc(acc_ref):
                start(cm, cn)

                def step(kk, carry):
                    g = t * k_iters + kk
                    slot = lax.rem(g, stages)
                    plgpu.barrier_wait(full.at[wg * stages + slot])
                    rhs = b_smem.at[slot]
                    plgpu.wgmma(acc_ref, a_smem.at[slot], rhs.transpose((1, 0)) if v.b_nk else rhs)
                    plgpu.wgmma_wait(1)  # the step before is done: its stage is free

                    @pl.when(kk > 0)
                    def _free():
                        plgpu.barrier_arrive(empty.at[lax.rem(g - 1 + stages, stages)])

                    return carry

                @pl.when(t > 0)
                def _turn():  # the other warpgroup's products are issued
                    plgpu.barrier_wait(order.at[wg])

                lax.fori_loop(0, k_iters, step, None)
                plgpu.barrier_arrive(order.at[1 - wg])
                plgpu.wgmma_wait(0)
                plgpu.barrier_arrive(empty.at[lax.rem(t * k_iters + k_iters - 1, stages)])
                finish(acc_ref, cm, cn, ni * TILE_N)

            return carry

        lax.fori_loop(0, (mine - wg + 1) // 2, tile, None)


# ---------------------------------------------------------------------------------------------
# The fast path of GEMM with a C term, and the epilogues of a GEMM node


def _view(d: Any) -> View | None:
    from ..ops.gemm_conv import MatrixTransform

    a, b, out = d.a_tensor, d.b_tensor, d.output_tensor
    if d.fused_activation is not None or out.dtype != a.dtype or not hopper():
        return None
    return plan(
        a.sizes, b.sizes, d.trans_a is MatrixTransform.TRANSPOSE,
        d.trans_b is MatrixTransform.TRANSPOSE, a.dtype,
    )  # fmt: skip


def _c_form(d: Any) -> str | None:
    """How C is read: "row" (a bias row broadcast down M: stride 0 along M, 1 along N), "full"
    (packed), "none" (no C), or None (another layout: lax)."""
    from ..tensor import packed_strides

    c = d.c_tensor
    if c is None:
        return "none"
    strides = c.strides or packed_strides(c.sizes)
    if strides[-2:] == (0, 1) and all(s == 0 or z == 1 for s, z in zip(strides[:-2], c.sizes)):
        return "row"
    if tuple(strides) == packed_strides(c.sizes):
        return "full"
    return None


def _gemm(d: Any, a, b, c=None, **epilogue):
    v = _view(d)
    form = _c_form(d)
    a2 = a.reshape(v.m, v.k)
    b2 = b.reshape((v.n, v.k) if v.b_nk else (v.k, v.n))
    c2 = None if c is None else c.reshape(v.m, v.n)
    y = fused_gemm(a2, b2, v, alpha=d.alpha, beta=d.beta, c=c2, c_row=form == "row", **epilogue)
    return y if epilogue.get("split") else y.reshape(d.output_tensor.sizes)


def _per_shard(d: Any, q: Any = None, slot: int = 0, split: int = 0) -> Any:
    """``fn(a, b[, c][, r]) -> y`` (2-D arrays; C as its row where it is one) computing GEMM
    ``d`` (and its consumer ``q`` fused at ``slot``: GELU, or an add whose other input is R) on
    each device's shards (``gemm_shards``): the kernel where the shards fit it, else the two
    nodes' lax lowerings on the shards. ``split`` (a head size D): no consumer; the result is
    the queries, keys and values apart, as ``fused_gemm``'s ``split``."""
    from ..catalog import retyped
    from ..ops.gemm_conv import lower_gemm
    from ..registry import lookup
    from .gemm_shards import partitioned

    v = _view(d)
    form = _c_form(d)
    gelu = q is not None and q.operator_type == "DML_OPERATOR_ACTIVATION_GELU"
    residual = q is not None and not gelu

    def consumer(y, r):
        if split:  # {M, H * 3 * D} -> three {M, H * D}
            heads = y.reshape(y.shape[0], -1, 3, split)
            return tuple(heads[:, :, i].reshape(y.shape[0], -1) for i in range(3))
        if q is None:
            return y
        inputs = [] if r is None else [r]
        inputs.insert(slot, y)
        # the element-wise consumer on one device's shard: its tensors of the shard's sizes
        local = retyped(q, q.output_tensor.data_type, tuple(y.shape))
        return lookup(q.operator_type).lower(local, *inputs)[0]

    def finish(product, c, r):
        cs = [] if c is None else [c]
        (y,) = lower_gemm(d, product, None, *cs, product=lambda _: product)
        return consumer(y, r)

    def partial(a, b):
        import dataclasses

        return lower_gemm(dataclasses.replace(d, alpha=1.0), a, b)[0]

    def whole(a, b, c, r):
        local = plan(a.shape, b.shape, False, v.b_nk, a.dtype)
        if local is None:
            cs = [] if c is None else [c]
            return consumer(lower_gemm(d, a, b, *cs)[0], r)
        return fused_gemm(a, b, local, alpha=d.alpha, beta=d.beta, c=c, c_row=form == "row",
                          gelu=gelu, residual=r, split=split)  # fmt: skip

    heads = (v.n // (3 * split), split) if split else None
    fn = partitioned(v.b_nk, form, residual, whole, partial, finish, heads)

    def run(a, b, *rest):
        args = [a.reshape(v.m, v.k), b.reshape((v.n, v.k) if v.b_nk else (v.k, v.n))]
        if form != "none":
            c = rest[0].reshape(v.m, v.n)
            args.append(c[:1] if form == "row" else c)  # a bias row enters as its row
        if residual:
            args.append(rest[-1].reshape(v.m, v.n))
        y = fn(*args)
        return y if split else y.reshape((q or d).output_tensor.sizes)

    return run


def _shard_gemm(d: Any, q: Any = None, slot: int = 0) -> Any:
    """``_per_shard`` as a lowering: the producer's arrays, then the consumer's others (R)."""
    run = _per_shard(d, q, slot)
    return lambda *arrays: (run(*arrays),)


def _shard_attention(p: Any, q: Any, slot: int) -> Any:
    """The projection's product on each device's shards (its columns split by whole heads in
    a column-parallel projection), the queries, keys and values written apart; the attention
    after it as on one device (cuDNN's attention has its own partitioning rule: the heads stay
    split)."""
    from . import attention

    d = _stacked_heads(p, q, slot)
    run = _per_shard(p, split=d)
    count = len(p.input_slots())
    b, s, h = q.stacked_query_key_value_tensor.sizes[:3]

    def lowered(*arrays):
        parts = run(*arrays[:count])
        others = list(arrays[count:])
        others.insert(slot, None)  # the stacked tensor: never formed
        qkv = tuple(x.reshape(b, s, h, d) for x in parts)
        return attention.lower(q, *others, qkv=qkv)

    return lowered


def _applies_gemm(d: Any) -> bool:
    # Without C, XLA's own GEMM is as fast (cuBLAS or its Triton GEMM;
    # benchmarks/RESULTS.md#networks): lax stays.
    return _view(d) is not None and _c_form(d) in ("row", "full")


def _same_layout(t: Any, u: Any) -> bool:
    from ..tensor import packed_strides

    def dense(x):
        return (x.strides or packed_strides(x.sizes)) == packed_strides(x.sizes)

    return t.sizes == u.sizes and t.dtype == u.dtype and dense(t) and dense(u)


def _stacked_heads(p: Any, q: Any, slot: int) -> int:
    """The head size D where the attention ``q`` reads the GEMM ``p``'s output as its stacked
    {B, S, H, 3, D} queries, keys and values (a packed reshape) and the kernel can write them
    apart (D a multiple of EPI); else 0."""
    from ..tensor import packed_strides

    names = [name for name, _ in q.input_slots()]
    t = q.stacked_query_key_value_tensor
    if t is None or names[slot] != "StackedQueryKeyValueTensor" or t.rank != 5:
        return 0
    out = p.output_tensor
    b, s, h, three, d = t.sizes
    packed = (t.strides or packed_strides(t.sizes)) == packed_strides(t.sizes)
    if not packed or three != 3 or d % EPI or out.sizes[-2:] != (b * s, h * 3 * d):
        return 0
    return d


def _applies_attention(p: Any, q: Any, slot: int) -> bool:
    from . import attention

    return (
        _view(p) is not None
        and _c_form(p) in ("row", "none")
        and _stacked_heads(p, q, slot) > 0
        and attention.applies(q)
    )


def _lower_attention(p: Any, q: Any, slot: int, producer, others):
    from . import attention

    d = _stacked_heads(p, q, slot)
    b, s, h = q.stacked_query_key_value_tensor.sizes[:3]
    parts = _gemm(p, *producer, split=d)
    arrays = list(others)
    arrays.insert(slot, None)  # the stacked tensor: never formed
    qkv = tuple(x.reshape(b, s, h, d) for x in parts)
    return attention.lower(q, *arrays, qkv=qkv)


def _applies_gelu(p: Any, q: Any, slot: int) -> bool:
    return (
        _view(p) is not None
        and _c_form(p) is not None
        and _same_layout(p.output_tensor, q.input_tensor)
        and _same_layout(q.input_tensor, q.output_tensor)
    )


def _applies_add(p: Any, q: Any, slot: int) -> bool:
    other = q.b_tensor if slot == 0 else q.a_tensor
    mine = q.a_tensor if slot == 0 else q.b_tensor
    return (
        _view(p) is not None
        and _c_form(p) in ("row", "none")  # a full C and R by pieces overflow shared memory
        and getattr(q, "fused_activation", None) is None
        and _same_layout(p.output_tensor, mine)
        and _same_layout(mine, other)
        and _same_layout(mine, q.output_tensor)
    )


def _lower_gelu(p: Any, q: Any, slot: int, producer, others):
    return (_gemm(p, *producer, gelu=True),)


def _lower_add(p: Any, q: Any, slot: int, producer, others):
    (r,) = others
    v = _view(p)
    return (_gemm(p, *producer, residual=r.reshape(v.m, v.n)),)


def _register() -> None:
    # Standalone: in a graph, XLA's GEMM with the bias fused after it ran faster than the kernel
    # (QKV projection of the GPT stack, H100: 70 against 84 us, benchmarks/RESULTS.md#networks).
    register_fast_path(
        "DML_OPERATOR_GEMM", "kernel", _applies_gemm, lambda d, *x: (_gemm(d, *x),),
        standalone=True, per_shard=_shard_gemm,
    )  # fmt: skip
    register_epilogue(
        "DML_OPERATOR_GEMM", "DML_OPERATOR_ACTIVATION_GELU", "kernel", _applies_gelu, _lower_gelu,
        per_shard=_shard_gemm,
    )  # fmt: skip
    for add in ("DML_OPERATOR_ELEMENT_WISE_ADD", "DML_OPERATOR_ELEMENT_WISE_ADD1"):
        register_epilogue(
            "DML_OPERATOR_GEMM", add, "kernel", _applies_add, _lower_add, per_shard=_shard_gemm
        )
    for name in ("MULTIHEAD_ATTENTION", "MULTIHEAD_ATTENTION1"):
        register_epilogue(
            "DML_OPERATOR_GEMM", f"DML_OPERATOR_{name}", "kernel", _applies_attention,
            _lower_attention, per_shard=_shard_attention,
        )  # fmt: skip


_register()
