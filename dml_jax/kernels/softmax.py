"""A one-pass SOFTMAX / LOG_SOFTMAX kernel (Pallas, Triton) as the CUDA fast path of the softmax
activations.

XLA's GPU code for a stable softmax reads the tensor twice or three times (the maximum, the sum
of exponentials, the result): 0.50 of the copy along rows of 32768 and 0.46 along axis 1 of
NCHW on an H200 (issue anchors, benchmarks/RESULTS.md). Here one program owns whole slices:
it loads every normalized element of its slices once, takes the maximum, the exponentials, their
sum and the result in registers, and stores once, so the tensor is read once and written once.

The tensor is viewed as ``(A, R, B)`` (``R`` the normalized axes, adjacent once size-1 axes are
dropped): with ``B == 1`` a program owns ``cols`` rows of the ``(A, R)`` matrix; otherwise it
owns ``cols`` adjacent columns of one ``a`` and all ``R`` rows above them (contiguous runs of
``cols`` elements). A slice longer than ``MAX_ELEMENTS`` (or non-adjacent axes) stays with lax.

Values: the lax formula (the maximum subtracted, ``exp``, a division by the sum; float16 in
float32, rounded once). Triton's ``exp`` is not XLA's: the kernel agrees with the lax lowering
to a few float32 ulps (tests/test_softmax_kernel.py states the tolerance), float16 to one ulp.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..fastpath import register_fast_path
from .reduce import load_pallas

DTYPES = frozenset(np.dtype(t) for t in ("float16", "float32"))
MAX_ELEMENTS = 32768  # a whole (padded) slice per program: 64 float32 per thread at 16 warps
_INDEX_LIMIT = 2**31 - 2**20
MIN_PROGRAMS = 264  # fewer cannot fill a large GPU (the reduce kernels' rule); lax splits better


@dataclass(frozen=True)
class View:
    """The ``(A, R, B)`` view of a softmax and its tile: ``rp`` (R padded to a power of two)
    by ``cols`` (rows of the matrix for B == 1, columns otherwise), on ``warps`` warps."""

    a: int
    r: int
    b: int
    rp: int
    cols: int
    warps: int

    @property
    def programs(self) -> int:
        if self.b == 1:
            return -(-self.a // self.cols)
        return self.a * -(-self.b // self.cols)


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _pow2_at_most(n: int) -> int:
    return 1 << (n.bit_length() - 1)


def plan(shape: tuple[int, ...], axes: tuple[int, ...], dtype) -> View | None:
    """The kernel's view of normalizing ``shape`` over ``axes``, or None where lax stays."""
    if np.dtype(dtype) not in DTYPES:
        return None
    live = [i for i in range(len(shape)) if shape[i] != 1]
    red = [i for i in live if i in axes]
    if not red:
        return None  # every normalized slice is one element: lax's constant is as fast
    pos = [live.index(i) for i in red]
    if pos != list(range(pos[0], pos[0] + len(pos))):
        return None
    a = math.prod(shape[i] for i in live[: pos[0]])
    r = math.prod(shape[i] for i in red)
    b = math.prod(shape[i] for i in live[pos[-1] + 1 :])
    rp = _pow2_at_least(r)
    if rp > MAX_ELEMENTS or a * r * b >= _INDEX_LIMIT:
        return None
    tile = TILE_ELEMENTS
    if b == 1:
        cols = max(1, tile // rp)
    else:
        cols = max(16, min(_pow2_at_most(b), tile // rp, 1024))
    elements = rp * cols
    warps = WARPS or (4 if elements <= 4096 else 8 if elements <= 8192 else 16)
    v = View(a, r, b, rp, cols, warps)
    return v if v.programs >= MIN_PROGRAMS else None


# Elements per tile when a slice is shorter (more rows or columns per program), and warps
# (None: 4 up to 4096 elements, 8 up to 8192, 16 above); benchmarks/softmax_variants.py sweeps them.
TILE_ELEMENTS = 4096
WARPS = None


def softmax_kernel(x, v: View, log: bool, interpret: bool = False):
    """SOFTMAX (or LOG_SOFTMAX with ``log``) of ``x`` over the ``R`` of view ``v``."""
    pl, pltriton = load_pallas()
    rp, cols = v.rp, v.cols
    neg_inf = np.float32(-np.inf)

    def normalize(tile, axis):
        tile = tile.astype(jnp.float32)
        m = jnp.max(tile, axis=axis, keepdims=True)
        shifted = tile - m  # an all -inf slice: NaN, as in the lax lowering
        e = jnp.exp(shifted)
        s = jnp.sum(e, axis=axis, keepdims=True)
        return shifted - jnp.log(s) if log else e / s

    if v.b == 1:
        x2 = jax.lax.reshape(x, (v.a, v.r))

        def kernel(x_ref, o_ref):
            pid = pl.program_id(0)
            rows = pid * cols + jnp.arange(cols, dtype=jnp.int32)
            red = jnp.arange(rp, dtype=jnp.int32)
            valid = (rows < v.a)[:, None] & (red < v.r)[None, :]
            at = (pl.ds(pid * cols, cols), pl.ds(0, rp))
            tile = pltriton.load(x_ref.at[at], mask=valid, other=neg_inf.astype(x.dtype))
            y = normalize(tile, 1)
            pltriton.store(o_ref.at[at], y.astype(o_ref.dtype), mask=valid)

    else:
        x2 = jax.lax.reshape(x, (v.a * v.r, v.b))
        nb = -(-v.b // cols)

        def kernel(x_ref, o_ref):
            pid = pl.program_id(0)
            a, j = pid // nb, pid % nb
            red = jnp.arange(rp, dtype=jnp.int32)
            col = j * cols + jnp.arange(cols, dtype=jnp.int32)
            valid = (red < v.r)[:, None] & (col < v.b)[None, :]
            at = (pl.ds(a * v.r, rp), pl.ds(j * cols, cols))
            tile = pltriton.load(x_ref.at[at], mask=valid, other=neg_inf.astype(x.dtype))
            y = normalize(tile, 0)
            pltriton.store(o_ref.at[at], y.astype(o_ref.dtype), mask=valid)

    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(x2.shape, x.dtype),
        grid=(v.programs,),
        interpret=interpret,
        compiler_params=pltriton.CompilerParams(num_warps=v.warps, num_stages=1),
    )(x2)
    return jax.lax.reshape(out, x.shape)


def _axes(d: Any) -> tuple[int, ...]:
    axes = getattr(d, "axes", None)
    return tuple(sorted(axes)) if axes is not None else (d.input_tensor.rank - 1,)


def _applies(d: Any) -> bool:
    x = d.input_tensor
    return plan(x.sizes, _axes(d), x.dtype) is not None


def _lower(log: bool):
    def lower(d: Any, x) -> tuple:
        v = plan(tuple(x.shape), _axes(d), x.dtype)
        return (softmax_kernel(x, v, log),)

    return lower


for _name, _log in (("SOFTMAX", False), ("LOG_SOFTMAX", True)):
    for _version in ("", "1"):
        register_fast_path(
            f"DML_OPERATOR_ACTIVATION_{_name}{_version}", "kernel", _applies, _lower(_log)
        )
