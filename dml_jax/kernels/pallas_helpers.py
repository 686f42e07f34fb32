"""Pallas helpers the kernels share: Pallas loaded on first use, one PTX instruction element by
element, bytes split into their two 4-bit codes as float16 by PTX, and a NaN test from the
bits.

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


# Two bytes (the low half of $1) to float16 1024 + nibble, packed in a pair ($0): PRMT spreads
# the two bytes a half of a register (SHR then brings the high nibbles down), and LOP3 keeps one
# nibble a half and sets the bits 0x6400 (float16 1024) in the same instruction. Two bytes an
# instance match the pairs of K a thread holds of a dot's operand, loaded as 16-bit words; four
# (a whole register) made Triton pack bytes of two rows into one register first. (Pallas lowers
# inline assembly of one result only: the low and the high nibbles are two sequences, whose
# common PRMT ptxas shares.)
def nibbles_plus_1024(raw):
    """(low, high) float16 ``1024 + nibble`` of each byte of ``raw`` (uint8, CUDA only): the
    bits 0x6400 | q, by Triton inline assembly two bytes at a time."""
    _, pltriton = load_pallas()
    out = [jax.ShapeDtypeStruct(raw.shape, jnp.float16)]

    def asm(shift: str) -> str:
        return ("{\n.reg .b32 t;\nprmt.b32 t, $1, 0, 0x4140;\n" + shift +
                "lop3.b32 $0, t, 0x000F000F, 0x64006400, 0xEA;\n}")  # fmt: skip

    return tuple(
        pltriton.elementwise_inline_asm(asm(shift), args=[raw], constraints="=r,r", pack=2,
                                        result_shape_dtypes=out)[0]
        for shift in ("", "shr.u32 t, t, 4;\n")
    )  # fmt: skip
