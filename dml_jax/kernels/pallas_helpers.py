"""Pallas helpers the kernels share: Pallas loaded on first use, one PTX instruction element by
element, and a NaN test from the bits.

Pallas (and its Triton backend) is imported only when a kernel is traced, so CPU-only users never
load it; the kernels call ``load_pallas()`` inside their lowerings.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


def load_pallas():
    # Imported lazily: CPU-only users never load Pallas.
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as pltriton

    return pl, pltriton


def ptx(instruction: str, *args):
    """One PTX instruction element by element (Triton inline assembly, CUDA only):
    ``instruction $0, $1, ...`` over same-shape float32, float16 or int32 arrays (32-bit
    registers: packed pairs, for instance), in their type."""
    _, pltriton = load_pallas()
    reg = {jnp.float16: "h", jnp.float32: "f", jnp.int32: "r"}[jnp.dtype(args[0].dtype).type]
    operands = ", ".join(f"${i + 1}" for i in range(len(args)))
    [out] = pltriton.elementwise_inline_asm(
        f"{instruction} $0, {operands};",
        args=list(args),
        constraints=",".join([f"={reg}"] + [reg] * len(args)),
        pack=1,
        result_shape_dtypes=[jax.ShapeDtypeStruct(args[0].shape, args[0].dtype)],
    )
    return out


def is_nan(v):
    # From the bits (exponent all ones, mantissa not zero) rather than v != v, which a
    # compiler allowed to assume no NaNs may fold to False.
    bits = lax.bitcast_convert_type(v, jnp.int32) & np.int32(0x7FFFFFFF)
    return bits > np.int32(0x7F800000)
