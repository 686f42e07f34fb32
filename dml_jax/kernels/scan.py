"""CUMULATIVE_SUMMATION / CUMULATIVE_PRODUCT kernels (Pallas, Triton) as the CUDA fast path.

XLA's GPU scan reads and writes the tensor several times (0.31 of the copy along rows of 1024,
0.20 along axis 1 of NCHW with C = 32 on an H200: the issue's anchors). Here the tensor is read
once and written once.

The tensor is viewed as ``(A, R, B)``, ``R`` the scanned axis.

- ``B >= MIN_COLS`` (an outer axis): a program owns ``cols`` adjacent columns of one ``a`` and
  walks down the ``R`` rows above them, keeping the running value of each column in registers:
  every load and store is a contiguous run of ``cols`` elements. Any operation, direction and
  exclusivity; the scan is sequential, so a float result is the sequential sum (or product) in
  the scan direction, float16 accumulated in float32 and rounded once per output, as the lax
  lowering; integers wrap identically.
- ``B == 1`` (the minor axis): a program owns ``cols`` whole rows (a row longer than one tile
  is walked in tiles with a carried total) and scans each tile in registers (Triton's scan). A
  DECREASING scan loads and stores each tile through reversed element indices; an exclusive scan
  is the inclusive scan of the sequence read one place earlier in scan order. Products need a
  Triton lowering of ``cumprod``, registered by ``triton_cumprod`` where this jax allows it.

Values: integers are exact; float sums are taken in another order than XLA's, so float results
agree with the lax lowering to rounding (tests/test_scan_kernel.py states the tolerance).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..fastpath import register_fast_path
from .jax_private import triton_lowering
from .pallas_helpers import load_pallas
from .reduce_plan import pow2_at_least, pow2_at_most

DTYPES = frozenset(
    np.dtype(t) for t in ("float16", "float32", "int32", "uint32", "uint16", "int64", "uint64")
)
MIN_PROGRAMS = 264  # fewer cannot fill a large GPU (the reduce kernels' rule)
MIN_COLS = 64  # narrower outer-axis columns waste most of each memory transaction
# Chosen by benchmarks/scan_variants.py (git history) on an H200 (benchmarks/RESULTS.md#operators):
# 2048-element minor-axis tiles, 512 columns and 8 rows per loop step down an outer axis, 4 warps
# ran best or within 0.01 of best on every case (4096 / 1024 / 4: 0.86-0.94).
MAX_COLS = 512
TILE_ELEMENTS = 2048  # elements per minor-axis tile (rows x row length)
WARPS = 4
UNROLL = 8  # outer-axis rows loaded per loop step


@dataclass(frozen=True)
class View:
    """``(A, R, B)`` and the tile: ``cols`` columns (B > 1) or rows (B == 1) per program,
    ``width`` elements of a row per tile (B == 1, a power of two)."""

    a: int
    r: int
    b: int
    cols: int
    width: int = 1

    @property
    def programs(self) -> int:
        if self.b == 1:
            return -(-self.a // self.cols)
        return self.a * -(-self.b // self.cols)

    @property
    def tiles(self) -> int:
        return -(-self.r // self.width)


def plan(
    shape: tuple[int, ...],
    axis: int,
    dtype,
    reverse: bool,
    product: bool,
    min_programs: int = MIN_PROGRAMS,
) -> View | None:
    """The kernel's view of scanning ``shape`` along ``axis``, or None where lax stays
    (``min_programs``: tests lower it to run small tensors through the kernel)."""
    if np.dtype(dtype) not in DTYPES:
        return None
    a = int(np.prod(shape[:axis], dtype=np.int64))
    r = shape[axis]
    b = int(np.prod(shape[axis + 1 :], dtype=np.int64))
    if r == 1 or a * r * b >= 2**31:
        return None  # nothing to scan (a copy); or offsets beyond int32
    if b >= MIN_COLS:
        v = View(a, r, b, min(pow2_at_most(b), MAX_COLS))
    elif b == 1 and (not product or triton_cumprod()):
        width = min(pow2_at_least(r), TILE_ELEMENTS)
        v = View(a, r, 1, max(1, TILE_ELEMENTS // width), width)
    else:
        return None
    return v if v.programs >= min_programs else None


def triton_cumprod() -> bool:
    """Whether Pallas' Triton lowering runs ``jnp.cumprod`` in a kernel.

    It lowers cumulative sums to Triton's scan; a product is the same scan with a multiply,
    which this registers through Pallas' lowering table where this jax has it (not public API:
    without it, products along the minor axis stay with lax)."""
    try:
        tl = triton_lowering()

        if jax.lax.cumprod_p not in tl.triton_lowering_rules:

            def cumprod_rule(ctx, x, *, axis: int, reverse: bool):
                if reverse:
                    raise NotImplementedError("reverse scans are not lowered")
                return tl._associative_scan_lowering(jnp.multiply, ctx, x, (axis,))[0]

            tl.triton_lowering_rules[jax.lax.cumprod_p] = cumprod_rule
        return True
    except (ImportError, AttributeError):
        return False


def _compute_dtype(dtype):
    return jnp.float32 if dtype == jnp.float16 else dtype


def scan_kernel(x, v: View, reverse: bool, exclusive: bool, product: bool, interpret=False):
    """The running sum (``product``: product) of ``x`` along the ``R`` of ``v``."""
    pl, pltriton = load_pallas()
    wide = _compute_dtype(x.dtype)
    identity = np.array(1 if product else 0, wide)

    def combine(acc, t):
        return acc * t if product else acc + t

    if v.b > 1:
        nb = -(-v.b // v.cols)

        def kernel(x_ref, o_ref):
            pid = pl.program_id(0)
            a, j = pid // nb, pid % nb
            col = j * v.cols + jnp.arange(v.cols, dtype=jnp.int32)
            valid = col < v.b

            def step(g, acc):
                # UNROLL rows per step, loaded before any is combined, so that several loads
                # are in flight per program (the running value is the only dependency).
                places, values = [], []
                for u in range(UNROLL):
                    t = g * UNROLL + u
                    row = (v.r - 1 - t) if reverse else t
                    at = (a * v.r + row, pl.ds(j * v.cols, v.cols))
                    ok = valid & (t < v.r)
                    places.append((at, ok))
                    values.append(pltriton.load(x_ref.at[at], mask=ok, other=identity.item()))
                for (at, ok), value in zip(places, values):
                    new = combine(acc, value.astype(wide))
                    out = acc if exclusive else new
                    pltriton.store(o_ref.at[at], out.astype(o_ref.dtype), mask=ok)
                    acc = new
                return acc

            steps = -(-v.r // UNROLL)
            jax.lax.fori_loop(0, steps, step, jnp.full((v.cols,), identity.item(), wide))

        shape2 = (v.a * v.r, v.b)
    else:
        scan_fn = jnp.cumprod if product else jnp.cumsum

        def kernel(x_ref, o_ref):
            pid = pl.program_id(0)
            row = pid * v.cols + jnp.arange(v.cols, dtype=jnp.int32)[:, None]
            rows_ok = row < v.a
            k = jnp.arange(v.width, dtype=jnp.int32)[None, :]

            def index(t, shift: int, store: bool):
                """Where scan places ``t * width + k`` (shifted ``shift`` places back in scan
                order) lie: a contiguous run going forward (vector loads and stores), else an
                index per element. Places outside the row are masked; loads clamp them into
                it, stores send them past its end, each to its own element (a masked scatter
                must not name a written element twice)."""
                if not (reverse or shift):
                    return pl.ds(pid * v.cols, v.cols), pl.ds(t * v.width, v.width)
                place = t * v.width + k - shift
                col = (v.r - 1 - place) if reverse else place
                if store:
                    col = jnp.where(place < v.r, col, v.r + place)
                else:
                    col = jnp.clip(col, 0, v.r - 1)
                shape = (v.cols, v.width)
                rows = row if store else jnp.minimum(row, v.a - 1)
                return jnp.broadcast_to(rows, shape), jnp.broadcast_to(col, shape)

            def step(t, carry):
                order = t * v.width + k  # the place in scan order
                ok = rows_ok & (order < v.r)
                # An exclusive scan is the inclusive scan of the sequence shifted one place in
                # scan order (the identity entering first).
                shift = 1 if exclusive else 0
                tile = pltriton.load(
                    x_ref.at[index(t, shift, False)],
                    mask=ok & (order >= shift),
                    other=identity.item(),
                ).astype(wide)
                running = combine(scan_fn(tile, axis=1), carry)
                pltriton.store(o_ref.at[index(t, 0, True)], running.astype(o_ref.dtype), mask=ok)
                if v.tiles == 1:
                    return carry
                # The next tile starts from this one's total (integers: exactly its last
                # running value; floats: to rounding).
                if product:
                    # Triton has no product reduction: the last running value, picked by a sum
                    # of -0.0 elsewhere (which keeps its value and the sign of a zero).
                    last = jnp.where(k == v.width - 1, running, np.array(-0.0, wide))
                    return jnp.sum(last, axis=1, keepdims=True)
                return carry + jnp.sum(tile, axis=1, keepdims=True)

            jax.lax.fori_loop(0, v.tiles, step, jnp.full((v.cols, 1), identity.item(), wide))

        shape2 = (v.a, v.r)

    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(shape2, x.dtype),
        grid=(v.programs,),
        interpret=interpret,
        compiler_params=pltriton.CompilerParams(num_warps=WARPS, num_stages=1),
    )(jax.lax.reshape(x, shape2))
    return jax.lax.reshape(out, x.shape)


def _args(d: Any) -> tuple[bool, bool, bool]:
    product = d.operator_type == "DML_OPERATOR_CUMULATIVE_PRODUCT"
    reverse = d.axis_direction.name == "DECREASING"
    return reverse, bool(d.exclusive), product


def _applies(d: Any) -> bool:
    reverse, _, product = _args(d)
    x = d.input_tensor
    return plan(x.sizes, d.axis, x.dtype, reverse, product) is not None


def _lower(d: Any, x) -> tuple:
    reverse, exclusive, product = _args(d)
    v = plan(tuple(x.shape), d.axis, x.dtype, reverse, product)
    return (scan_kernel(x, v, reverse, exclusive, product),)


for _name in ("CUMULATIVE_SUMMATION", "CUMULATIVE_PRODUCT"):
    register_fast_path(f"DML_OPERATOR_{_name}", "kernel", _applies, _lower)
