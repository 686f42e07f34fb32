"""A Pallas (Triton) CLIP kernel for narrow types on CUDA GPUs.

XLA's GPU code for element-wise float16 and int8 ops runs at 0.77 and 0.39 of the copy roofline on
an H200 (benchmarks/RESULTS.md#operators). This kernel reads and writes blocks of contiguous
elements, which Triton moves with 16-byte vector accesses.

Semantics are the lax lowering's (``dml_jax.ops.clip``): ``max(lo, min(x, hi))`` in that order,
with XLA's IEEE 754-2019 minimum/maximum (NaN propagated, -0.0 below +0.0). Triton lowers float
min/max to minNum/maxNum, which drop NaN, so the float comparisons run on integer keys of the
bits and NaN inputs pass through (as NaN; XLA may return another NaN bit pattern). It is
registered as the CUDA fast path of ELEMENT_WISE_CLIP(1) without ScaleBias (``dml_jax.fastpath``).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..fastpath import register_fast_path
from ..ops.clip import ElementWiseClip1OperatorDesc, ElementWiseClipOperatorDesc
from .pallas_helpers import load_pallas

CLIP_DTYPES = frozenset(np.dtype(t) for t in ("float16", "int8", "uint8", "int16", "uint16"))
BLOCK_BYTES = 4096  # bytes per program: 0.97-0.98 of the copy on an H200 (variants.log)
NUM_WARPS = 4
_INDEX_LIMIT = 2**31 - 2**20


def clip_covered(shape, dtype) -> bool:
    """Whether ``clip_kernel`` handles this shape and dtype."""
    n = math.prod(shape)
    return np.dtype(dtype) in CLIP_DTYPES and 0 < n < _INDEX_LIMIT


def _key(bits, nbits: int):
    """Integer key of float bits ordered as IEEE 754-2019 orders floats (-0.0 < +0.0)."""
    imax = (1 << (nbits - 1)) - 1
    if isinstance(bits, int):  # a bound, folded here: Triton constants stay integers
        return bits ^ imax if bits < 0 else bits
    return bits ^ (lax.shift_right_arithmetic(bits, jnp.asarray(nbits - 1, bits.dtype)) & imax)


def clip_kernel(x, lo, hi, interpret: bool = False):
    """``max(lo, min(x, hi))`` element-wise, NaN propagated; same shape and dtype as ``x``."""
    pl, pltriton = load_pallas()
    n = math.prod(x.shape)
    block = max(128, BLOCK_BYTES // x.dtype.itemsize)
    is_float = jnp.issubdtype(x.dtype, jnp.floating)
    lo = np.asarray(lo, x.dtype)
    hi = np.asarray(hi, x.dtype)
    if is_float:
        ibits = {2: np.int16, 4: np.int32}[x.dtype.itemsize]
        itype = jnp.dtype(ibits)
        lo_bits, hi_bits = int(lo.view(ibits)), int(hi.view(ibits))
        imax = int(np.iinfo(ibits).max)
        inf_bits = int(np.array(np.inf, x.dtype).view(ibits))

    def kernel(x_ref, o_ref):
        pid = pl.program_id(0)
        idx = pid * block + jnp.arange(block, dtype=jnp.int32)
        valid = idx < n
        v = pltriton.load(x_ref.at[pl.ds(pid * block, block)], mask=valid)
        if is_float:
            # XLA's min/max are IEEE 754-2019 minimum/maximum (NaN propagated, -0.0 < +0.0);
            # Triton's are minNum/maxNum and may lose the sign of a zero constant, so the
            # whole computation runs on the bits: integer keys compare, bounds enter as bits.
            nbits = 8 * x.dtype.itemsize
            bits = lax.bitcast_convert_type(v, itype)
            kv = _key(bits, nbits)
            khi, klo = _key(hi_bits, nbits), _key(lo_bits, nbits)
            below_hi = kv <= khi
            yb = jnp.where(below_hi, bits, jnp.asarray(hi_bits, itype))  # min(x, hi)
            ky = jnp.where(below_hi, kv, jnp.asarray(khi, itype))
            yb = jnp.where(ky >= klo, yb, jnp.asarray(lo_bits, itype))  # max(lo, .)
            nan = (bits & jnp.asarray(imax, itype)) > jnp.asarray(inf_bits, itype)
            y = lax.bitcast_convert_type(jnp.where(nan, bits, yb), x.dtype)
        else:
            y = lax.max(jnp.asarray(lo, x.dtype), lax.min(v, jnp.asarray(hi, x.dtype)))
        pltriton.store(o_ref.at[pl.ds(pid * block, block)], y, mask=valid)

    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((n,), x.dtype),
        grid=(-(-n // block),),
        interpret=interpret,
        compiler_params=pltriton.CompilerParams(num_warps=NUM_WARPS, num_stages=1),
    )(lax.reshape(x, (n,)))
    return lax.reshape(out, x.shape)


def clip(x, lo, hi, fallback):
    """CLIP on CUDA: the kernel where ``x``'s shape and dtype are covered, else ``fallback(x)``."""
    if not clip_covered(x.shape, x.dtype):
        return fallback(x)
    return clip_kernel(x, lo, hi)


def _applies(d) -> bool:
    # ScaleBias runs before the bounds in float32; the lax lowering fuses it.
    return d.scale_bias is None and clip_covered(d.input_tensor.sizes, d.input_tensor.dtype)


def _lower(d, x) -> tuple:
    lo, hi = d.bounds()
    return (clip_kernel(x, lo, hi),)


for _cls in (ElementWiseClipOperatorDesc, ElementWiseClip1OperatorDesc):
    register_fast_path(_cls.operator_type, "kernel", _applies, _lower, standalone=True)
