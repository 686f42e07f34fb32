"""Pallas helpers the kernels share: Pallas loaded on first use, one PTX instruction element by
element, bytes split into their two 4-bit codes as float16 by PTX, a NaN test from the bits,
and a quotient rounded half to even by PTX's fused multiply-adds.

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


# The correctly rounded float32 quotient by fused multiply-adds (Markstein's division): from
# ``q0 = x * inv``, with ``inv`` the correctly rounded reciprocal of ``y``, within an ulp and a
# half of ``x / y``; one correction ``q1 = q0 + (x - q0 * y) * inv`` (each step one rounding)
# brings it within an ulp, and a second is then the correctly rounded quotient (Markstein's
# theorem: ``inv`` within half an ulp of ``1 / y``, ``q1`` within an ulp of ``x / y``, ``x - q1 *
# y`` exact in a fused multiply-add), provided nothing underflows (``_quant.scaled_divisor``
# keeps ``y`` in [2^-23, 4)). Where a step gives NaN while ``q0`` is not (``y`` 0 or infinite,
# ``x`` infinite) ``q0`` is the quotient's own value (infinite or 0); a NaN quotient gives 0.
_quotient_ptx = """{
.reg .f32 q0, q, r;
.reg .pred p;
mul.rn.f32 q0, $1, $3;
neg.f32 r, q0;
fma.rn.f32 r, r, $2, $1;
fma.rn.f32 q, r, $3, q0;
neg.f32 r, q;
fma.rn.f32 r, r, $2, $1;
fma.rn.f32 q, r, $3, q;
setp.nan.f32 p, q0, q0;
selp.f32 q0, 0f00000000, q0, p;
setp.nan.f32 p, q, q;
selp.f32 q, q0, q, p;
cvt.rni.f32.f32 $0, q;
}"""


def nearest_quotient(x, y, inv):
    """``round_half_even(x / y)`` of float32 ``x`` and ``y`` (one shape; ``inv`` the correctly
    rounded ``1 / y``, PTX's ``rcp.rn.f32``), the quotient correctly rounded first (as NumPy's
    ``np.rint(x / y)`` in float32), 0 where that quotient is NaN, by PTX fused multiply-adds:
    ten instructions an element, some of which ptxas folds (CUDA only; ``y`` from
    ``_quant.scaled_divisor``)."""
    _, pltriton = load_pallas()
    [out] = pltriton.elementwise_inline_asm(
        _quotient_ptx,
        args=[x, y, inv],
        constraints="=f,f,f,f",
        pack=1,
        result_shape_dtypes=[jax.ShapeDtypeStruct(x.shape, jnp.float32)],
    )
    return out
