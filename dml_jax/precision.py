"""DirectML's precision rule for GEMM and CONVOLUTION, and its one exception.

DirectML computes FLOAT32 GEMM and convolution in float32. XLA on GPUs would use TF32 tensor
cores for float32 by default, which is not DirectML's answer, so the lowerings ask for
``lax.Precision.HIGHEST`` unless the caller passes DirectML's execution flag
ALLOW_HALF_PRECISION_COMPUTATION (``compile_operator(..., allow_half_precision=True)``,
``compile_graph`` likewise, or ``"executionFlags": "ALLOW_HALF_PRECISION_COMPUTATION"`` in a
DxDispatch model), which permits TF32. FLOAT16 inputs are always multiplied with float32
accumulation (docs/semantics.md); ``float16_pieces`` and ``pieces_product`` let a float32
operand of such a product (a recurrent layer's state) run on float16 arithmetic exactly.

The flag is read while a lowering is traced: ``with_half_precision(fn, allowed)`` wraps the
function a compiled operator or graph runs, so the flag travels with the compiled object, not
with the process.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

_HALF = contextvars.ContextVar("dml_jax_allow_half_precision", default=False)


def half_precision_allowed() -> bool:
    """Whether ALLOW_HALF_PRECISION_COMPUTATION holds for the lowering being traced."""
    return _HALF.get()


def matmul_precision() -> lax.Precision:
    """The precision of a float32 product in the lowering being traced (HIGHEST: DirectML's
    float32 rule, no TF32; float16 operands are multiplied exactly and summed in float32 at it
    too). Float16 products at XLA's default precision instead were timed on an H200
    (2026-11-30): no faster (benchmarks/experiments/README.md)."""
    return lax.Precision.DEFAULT if _HALF.get() else lax.Precision.HIGHEST


def with_half_precision(fn: Callable, allowed: bool) -> Callable:
    """``fn`` traced with ALLOW_HALF_PRECISION_COMPUTATION set to ``allowed``."""

    @functools.wraps(fn)
    def run(*args):
        token = _HALF.set(bool(allowed))
        try:
            return fn(*args)
        finally:
            _HALF.reset(token)

    return run


def float16_pieces(x, count: int) -> list:
    """``count`` FLOAT16 arrays whose sum is ``x * 2**14``, for float32 ``x`` in [-1, 1] (or NaN).

    A float32 significand has 24 bits and a float16 one 11, so three pieces hold ``x`` exactly
    when ``|x| >= 2**-15`` (its last bit is then no finer than float16's subnormals after the
    scaling by 2**14) and to within 2**-38 below: a product of the pieces with float16 values,
    accumulated in float32, is the float32 product, on float16 arithmetic (tensor cores)
    instead of float32's. Each piece but the last is the remainder truncated to 11 significant
    bits by masking its low 13 bits, and the next remainder is a float32 subtraction: no float32
    -> float16 -> float32 round trip, which XLA may drop as excess precision. The last piece is
    the remainder rounded to float16 (one piece is ``x`` rounded).
    """
    rest = x.astype(jnp.float32) * jnp.float32(2.0**14)
    pieces = []
    for _ in range(count - 1):
        bits = lax.bitcast_convert_type(rest, jnp.uint32) & np.uint32(0xFFFFE000)
        head = lax.bitcast_convert_type(bits, jnp.float32)
        pieces.append(head.astype(jnp.float16))
        rest = rest - head
    pieces.append(rest.astype(jnp.float16))
    return pieces


def pieces_product(product: Callable, a, b, axis: int | None = None, wide=None):
    """``product(a, b)`` for float32 ``a`` in [-1, 1] and FLOAT16 ``b``, on float16 arithmetic.

    ``product`` multiplies two arrays with float32 accumulation. ``a`` enters as
    ``float16_pieces(a, 3)`` (one rounded piece where half precision is allowed): the sum of
    ``product(piece, b)`` over the pieces, times 2**-14, is the float32 product (to the pieces'
    accuracy). With ``axis``, the pieces are joined along that axis of ``a`` and multiplied in
    one product, whose result ``product`` must hold along the same axis: one product of a taller
    operand reads ``b`` once instead of once per piece.

    Derivatives are those of the float32 product ``product(a, wide)``, ``wide`` being ``b``
    widened to float32 unless given (the same values): they reach ``b`` through ``wide`` only,
    so that a loop over many products can carry a float32 ``wide`` and sum ``b``'s gradient in
    float32.
    """
    count = 1 if half_precision_allowed() else 3

    @jax.custom_jvp
    def in_pieces(a, b, wide):
        pieces = float16_pieces(a, count)
        if axis is None:
            parts = [product(piece, b) for piece in pieces]
        else:
            parts = jnp.split(product(jnp.concatenate(pieces, axis), b), count, axis)
        out = parts[0]
        for part in parts[1:]:
            out = out + part
        return out * jnp.float32(2.0**-14)

    @in_pieces.defjvp
    def _jvp(primals, tangents):
        (a, b, wide), (da, _, dwide) = primals, tangents
        return in_pieces(a, b, wide), product(da, wide) + product(a, dwide)

    return in_pieces(a, b, b.astype(jnp.float32) if wide is None else wide)
