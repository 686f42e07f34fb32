"""DirectML's precision rule for GEMM and CONVOLUTION, and its one exception.

DirectML computes FLOAT32 GEMM and convolution in float32. XLA on GPUs would use TF32 tensor
cores for float32 by default, which is not DirectML's answer, so the lowerings ask for
``lax.Precision.HIGHEST`` unless the caller passes DirectML's execution flag
ALLOW_HALF_PRECISION_COMPUTATION (``compile_operator(..., allow_half_precision=True)``,
``compile_graph`` likewise, or ``"executionFlags": "ALLOW_HALF_PRECISION_COMPUTATION"`` in a
DxDispatch model), which permits TF32. FLOAT16 inputs are always multiplied with float32
accumulation (docs/semantics.md).

The flag is read while a lowering is traced: ``with_half_precision(fn, allowed)`` wraps the
function a compiled operator or graph runs, so the flag travels with the compiled object, not
with the process.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable

from jax import lax

_HALF = contextvars.ContextVar("dml_jax_allow_half_precision", default=False)


def matmul_precision() -> lax.Precision:
    """The precision of a float32 product in the lowering being traced."""
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
