"""BATCH_NORMALIZATION (inference) on float16 tensors with per-channel statistics: a Pallas
(Triton) kernel, the CUDA fast path.

XLA's code for the lax lowering runs float16 at 0.78 of the copy on an H200 (2-byte stores;
float32 at 0.98-0.99 already, so it stays with lax) (benchmarks/RESULTS.md). Here Mean,
Variance, Scale and Bias each hold one value per channel (dimension 1) or one value in all:
the lowering's own per-channel factor ``Scale * rsqrt(Variance + Epsilon)`` is computed by lax
on the small vectors, then a program reads a block of contiguous elements, finds each
element's channel, and applies the lowering's formula ``(x - Mean) * factor + Bias`` in
float32 and its fused activation (``ops.normalization._finish``, the lowering's own code on
the block), then rounds once to float16. A compiler may contract the product and the sum into
one fused multiply-add, and XLA and Triton need not choose alike: the stated tolerance is one
float16 ulp of the result (tests/test_batch_norm_kernel.py, docs/semantics.md).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..fastpath import register_fast_path
from ..ops.normalization import _f32, _finish
from .elementwise_map import _FUSABLE_IN_KERNEL
from .reduce import load_pallas

DTYPES = frozenset({np.dtype("float16")})
# Elements a program and warps; chosen on an H100 (benchmarks/RESULTS.md, round 18).
BLOCK = 4096
WARPS = 4
_INDEX_LIMIT = 2**31 - 2**20


def plan(d: Any) -> tuple[int, int] | None:
    """``(C, S)``: channels (dimension 1) and the elements a channel's run holds (the product
    of the dimensions after it), or None where lax stays."""
    x = d.input_tensor
    if np.dtype(x.dtype) not in DTYPES or x.rank < 2 or not x.is_packed:
        return None
    if not d.output_tensor.is_packed:
        return None
    n = math.prod(x.sizes)
    if not 0 < n < _INDEX_LIMIT:
        return None
    for t in (d.mean_tensor, d.variance_tensor, d.scale_tensor, d.bias_tensor):
        if any(s != 1 for i, s in enumerate(t.sizes) if i != 1):
            return None  # varies along another dimension
    fused = d.fused_activation
    if fused is not None and fused.operator_type not in _FUSABLE_IN_KERNEL:
        return None
    return x.sizes[1], math.prod(x.sizes[2:])


def _per_channel(t, c: int):
    """A Mean / Variance / Scale / Bias tensor as float32 values, one per channel."""
    return jnp.broadcast_to(t.astype(jnp.float32).reshape(-1), (c,))


def batch_norm_kernel(d: Any, x, mean, variance, scale, bias, interpret: bool = False):
    """The lowering's result for ``plan(d)``'s layout, one kernel over the tensor."""
    pl, pltriton = load_pallas()
    c, s = plan(d)
    n = x.size
    mean_c, var_c, scale_c, bias_c = (_per_channel(t, c) for t in (mean, variance, scale, bias))
    factor_c = scale_c * lax.rsqrt(var_c + _f32(d.epsilon, mean_c))  # the lowering's factor

    def kernel(x_ref, m_ref, f_ref, b_ref, o_ref):
        at = pl.program_id(0) * BLOCK + jnp.arange(BLOCK, dtype=jnp.int32)
        valid = at < n
        w = pltriton.load(x_ref.at[at], mask=valid, other=0).astype(jnp.float32)
        ch = (at // s) % c
        m = pltriton.load(m_ref.at[ch], mask=valid, other=0)
        f = pltriton.load(f_ref.at[ch], mask=valid, other=0)
        b = pltriton.load(b_ref.at[ch], mask=valid, other=0)
        y = _finish(d, (w - m) * f + b, d.output_tensor)
        pltriton.store(o_ref.at[at], y, mask=valid)

    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((n,), d.output_tensor.dtype),
        grid=(-(-n // BLOCK),),
        interpret=interpret,
        compiler_params=pltriton.CompilerParams(num_warps=WARPS, num_stages=1),
    )(lax.reshape(x, (n,)), mean_c, factor_c, bias_c)
    return lax.reshape(out, x.shape)


def _lower(d: Any, x, mean, variance, scale, bias) -> tuple:
    return (batch_norm_kernel(d, x, mean, variance, scale, bias),)


register_fast_path(
    "DML_OPERATOR_BATCH_NORMALIZATION", "kernel", lambda d: plan(d) is not None, _lower
)
