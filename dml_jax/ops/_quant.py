"""Quantization arithmetic and rules shared by the quantized operators (each exists once, here).

DirectML's two functions (the quantized operators' pages):

    dequantize(q, Scale, ZeroPoint) = (q - ZeroPoint) * Scale
    quantize(x, Scale, ZeroPoint)   = clamp(round(x / Scale) + ZeroPoint, Min, Max)

dml_jax computes them in float32 (DML's FLOAT): ``q - ZeroPoint`` exactly, rounded once to
float32, times Scale (FLOAT16 scales and values widened exactly); ``x / Scale`` rounded to
float32, then rounded half to even, the zero point added, saturated to the output type's range.
NaN quantizes to the zero point (the quantized 0, as CAST maps NaN to 0); +-inf saturate. A scale
of 0 (undefined in DirectML) follows IEEE division: x / 0 is +-inf (saturates) and 0 / 0 NaN
(the zero point). docs/semantics.md, "Quantization", says why and what is tested.

4-bit tensors (UINT4 / INT4) are arrays of JAX's 4-bit dtypes (``jnp.uint4`` / ``jnp.int4``);
the arithmetic widens them to int32 (INT4 is two's complement).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..enums import DataType
from ..errors import Validator, show
from ..fastpath import known_input, platform_choice
from ..fields import INPUT, OperatorDesc, input_field, output_field
from ..support import types
from ..tensor import TensorDesc

Q8 = types("INT8", "UINT8")
Q4 = types("INT4", "UINT4")
F32 = types("FLOAT32")
F16_32 = types("FLOAT32", "FLOAT16")
I32 = types("INT32")
INTEGERS = types("INT32", "INT16", "INT8", "UINT32", "UINT16", "UINT8")


def held(x, data_type: DataType):
    """An input's values as DirectML reads them. 4-bit tensors arrive as ``jnp.int4`` /
    ``jnp.uint4`` arrays; a wider integer array standing for one (a caller's own carrier) is
    read by its low 4 bits, as DirectML reads a nibble."""
    if data_type.bits != 4 or x.dtype == data_type.numpy_dtype:
        return x
    if data_type.is_signed:  # sign-extend the low nibble
        return lax.shift_right_arithmetic(lax.shift_left(x, jnp.int8(4)), jnp.int8(4))
    return lax.bitwise_and(x, jnp.uint8(15))


def as_float32(x):
    """A float (or INT32) input in float32: FLOAT16 widens exactly, INT32 rounds to nearest."""
    return x.astype(jnp.float32)


def difference(q, q_type: DataType, zero_point, zero_point_type: DataType | None):
    """``q - zero_point`` computed exactly and rounded once to float32 (``zero_point`` None: 0).

    Types of 16 bits or fewer subtract in int32 (exact, and exact in float32). 32-bit types split
    each value into 16-bit halves, ``v = hi * 65536 + lo``: both partial differences are exact
    float32 values, so the one float32 addition rounds the exact difference once.
    """
    q = held(q, q_type)
    if zero_point is not None:
        zero_point = held(zero_point, zero_point_type)
    wide = q_type.bits > 16 or (zero_point_type is not None and zero_point_type.bits > 16)
    if not wide:
        d = q.astype(jnp.int32)
        if zero_point is not None:
            d = d - zero_point.astype(jnp.int32)
        return d.astype(jnp.float32)
    hi_q, lo_q = _halves(q)
    if zero_point is None:
        hi, lo = hi_q, lo_q
    else:
        hi_z, lo_z = _halves(zero_point)
        hi, lo = hi_q - hi_z, lo_q - lo_z
    # hi * 65536 is exact (a power of two), so a fused multiply-add rounds the same sum.
    return hi.astype(jnp.float32) * jnp.float32(65536) + lo.astype(jnp.float32)


def _halves(v):
    """(hi, lo) int32 halves of an int32 / uint32 array: ``v = hi * 65536 + lo``."""
    if v.dtype == jnp.uint32:
        hi = lax.shift_right_logical(v, jnp.uint32(16)).astype(jnp.int32)
        lo = lax.bitwise_and(v, jnp.uint32(0xFFFF)).astype(jnp.int32)
        return hi, lo
    v = v.astype(jnp.int32)
    return lax.shift_right_arithmetic(v, jnp.int32(16)), lax.bitwise_and(v, jnp.int32(0xFFFF))


def dequantize(q, q_type: DataType, zero_point, zero_point_type, scale):
    """``(q - zero_point) * scale`` in float32 (one rounding each)."""
    return difference(q, q_type, zero_point, zero_point_type) * as_float32(scale)


def quantize(real, scale, zero_point, zero_point_type, out_type: DataType):
    """``clamp(round(real / scale) + zero_point, Min, Max)`` in ``out_type``'s dtype.

    ``real`` and ``scale`` are float32; the quotient rounds to float32, then half to even; NaN
    gives the zero point. Adding the zero point in float32 is exact wherever the result is not
    saturated anyway (|round(real / scale)| < 2**24).
    """
    lo, hi = out_type.integer_range
    scale = as_float32(scale)
    if zero_point is None:
        zero = jnp.float32(0)
    else:
        zero = held(zero_point, zero_point_type).astype(jnp.float32)
    steps = round_quotient(real, scale)
    value = jnp.clip(steps + zero, jnp.float32(lo), jnp.float32(hi))
    value = jnp.where(jnp.isnan(value), jnp.broadcast_to(zero, value.shape), value)
    return value.astype(out_type.numpy_dtype)


def divide(x, y):
    """``x / y`` correctly rounded, ``y`` broadcast to ``x``'s shape.

    XLA rewrites a division by a broadcast (a scalar, one value per row, a constant) into a
    multiplication by the reciprocal, which can miss the correctly rounded quotient by an ulp
    (and so move a quantized value across a rounding boundary). A divisor that depends on ``x``
    element by element is no broadcast: where ``x`` is NaN it is 1, and the quotient is NaN
    either way.
    """
    y = jnp.broadcast_to(jnp.asarray(y, x.dtype), jnp.broadcast_shapes(x.shape, jnp.shape(y)))
    x = jnp.broadcast_to(x, y.shape)
    y = _per_element(x, y)
    if x.dtype != jnp.float32:
        return x / y
    # XLA's float32 division on NVIDIA GPUs is not correctly rounded (up to two ulps off: beside
    # a halfway point: DynamicQuantizeLinear's node test moves a value across a rounding
    # boundary); there the quotient is corrected to the nearest float32. The CPU's is exact.
    return platform_choice(x, y, cuda=_nearest_quotient, default=lax.div)


def round_quotient(x, y):
    """``round_half_even(x / y)`` of float32 ``x`` and ``y`` (``y`` broadcast to ``x``), the
    quotient correctly rounded to float32 first, as NumPy's ``np.round(x / y)``: exact wherever
    that quotient is under ``STEPS_EXACT`` in magnitude. Beyond it the result is an integer
    within one of a quotient within a few ulps, on the same side and at least ``STEPS_EXACT -
    2``, which every caller saturates (8- and 4-bit ranges, zero points included). NaN stays
    NaN.

    The CPU divides exactly. On NVIDIA GPUs XLA's division is not correctly rounded, and
    correcting the quotient itself (``divide``) took three exact residuals and two more
    divisions an element: ``_nearest_steps`` decides the rounding with one residual instead.
    ``y`` keeps its own sizes (broadcast to ``x``'s rank only): what depends on it alone is
    written once a value, though XLA may still fuse that work into the kernel over ``x``
    (computing it apart, behind an optimization barrier, was slower on an H200: QDQ ResNet-50
    5.14 against 5.04 ms, dynamic-int8 BERT-base 5.07 against 4.81; benchmarks/experiments/
    README.md)."""
    y = jnp.asarray(y, x.dtype)
    shape = jnp.broadcast_shapes(x.shape, jnp.shape(y))
    x = jnp.broadcast_to(x, shape)
    y = jnp.reshape(y, (1,) * (len(shape) - y.ndim) + y.shape)
    return platform_choice(x, y, cuda=_nearest_steps, default=_exact_steps)


def _exact_steps(x, y):
    """``round_quotient`` by an exact division (the CPU's), kept one by ``divide``'s rule."""
    return jnp.round(lax.div(x, _per_element(x, y)))


def _per_element(x, y):
    """``y`` made to depend on ``x`` element by element (1 where ``x`` is NaN, whose quotient is
    NaN either way): XLA then cannot turn a division by it into a multiplication by a
    broadcast reciprocal."""
    return jnp.where(jnp.isnan(x), jnp.ones((), x.dtype), y)


_MAGIC = np.float32(1.5 * 2**23)  # an integer x within 2^22: x + this holds it in its low bits
STEPS_EXACT = 2048.0  # |x / y| under this: ``round_quotient`` is exact (12-bit half-integers)


@jax.jit  # traced once a shape: a model's many quantizers of one shape share it
def _nearest_steps(x, y):
    """``round_quotient`` from an approximate quotient and one exact residual, in 17
    operations an element where ``y`` is one value.

    ``x`` and ``y`` are first multiplied by one signed power of two that brings ``y`` into
    [2^-23, 4) (exact; an ``x`` that then overflows or underflows has a quotient far beyond
    ``STEPS_EXACT`` or far under 1/2). ``q``, ``x`` times the reciprocal of ``y``, lies within
    an ulp or two of ``x / y``, so the answer is ``f = floor(q)`` or ``f + 1``: it is ``f + 1``
    where the correctly rounded quotient is above ``h = f + 1/2``, and where it is ``h`` itself
    and ``f`` is odd (half to even). ``h`` has at most 12 significant bits under
    ``STEPS_EXACT``, so ``h * yh`` and ``h * yl`` (``y`` split in 12-bit halves) are exact, and
    so is ``r = (x - h * yh) - h * yl`` wherever ``x / y`` lies within 2^-19 of ``h``
    relatively (Sterbenz; ``r`` is then a small multiple of the inputs' quanta); farther away
    its rounding errors are far under its distance from the bounds below, whatever XLA
    contracts into fused multiply-adds (each product is exact). The quotient rounds to ``h``
    where ``|r| < b`` (``b`` half of ``h``'s ulp times ``y``: a power of two times ``y``,
    exact); ``|r| = b`` cannot happen (``h`` plus or minus half its ulp has 25 significant bits,
    so no float32 ``x`` is it times a float32 ``y``). So the answer is ``f + 1`` where ``r >
    b`` for an even ``f``, and where ``r > -b`` for an odd one. Beyond ``STEPS_EXACT``
    (infinities and NaN included) ``f`` or ``f + 1`` is on the quotient's side and past it less
    one; a ``y`` of 0, infinite or NaN gives ``q`` the quotient's own value there (infinite, 0
    or NaN), and ``r``, NaN where ``y`` is infinite, adds nothing to ``f``, which is then 0."""
    power, ys = scaled_divisor(y)
    inverse = jnp.float32(1) / ys
    yh, yl = _split(ys)
    even = ys * jnp.float32(2.0**-24)  # b / lead(h), exact
    odd = -even
    xs = x * power
    f = jnp.floor(xs * inverse)
    h = f + jnp.float32(0.5)
    r = (xs - h * yh) - h * yl
    lead = lax.bitcast_convert_type(  # 2^e, |h| in [2^e, 2^(e+1))
        lax.bitcast_convert_type(h, jnp.uint32) & jnp.uint32(0x7F800000), jnp.float32
    )
    return f + (r > lead * jnp.where(_is_odd(f), odd, even)).astype(jnp.float32)


def scaled_divisor(y):
    """``(power, ys)`` of float32 divisors ``y``: ``power`` a signed power of two and ``ys = y *
    power`` (exact) in [2^-23, 4), or 0, infinite or NaN, so that ``x / y = (x * power) / ys``
    (``x * power`` exact unless it overflows or underflows, where the quotient is far beyond
    ``STEPS_EXACT`` or far under 1/2), and products and residuals of quotients of ``ys`` under
    ``STEPS_EXACT`` stay far from float32's underflow."""
    bits = lax.bitcast_convert_type(y, jnp.uint32)
    exponent = jnp.clip((bits >> 23) & jnp.uint32(0xFF), jnp.uint32(1), jnp.uint32(253))
    power = lax.bitcast_convert_type((jnp.uint32(254) - exponent) << 23, jnp.float32)
    power = jnp.where(y < 0, -power, power)
    return power, y * power


def _is_odd(f):
    """Whether the integer-valued float32 ``f`` is odd, where ``|f| < 2^22`` (beyond, either
    answer): the last significand bit of ``f + 1.5 * 2^23``, whose ulp is 1. Bits, not a
    conversion to an integer, which GPUs issue at a quarter of their rate (a QDQ chain of
    three quantizers in one fusion, 64 x 56 x 56 x 256 on an H200: 212 against 247 us with
    the conversion, ``quantize_steps_gpu.py --chain --conversions``)."""
    return (lax.bitcast_convert_type(f + _MAGIC, jnp.uint32) & jnp.uint32(1)) == 1


def _split(a):
    """``a = hi + lo`` exactly with ``hi`` holding the upper 12 of float32's 24 significand bits
    (its low 12 bits cleared) and ``lo`` the rest: the halves of Dekker's exact product, whose
    partial products are then exact in float32. Bit masking needs no guard against XLA fusing a
    multiply into the subtraction, as Dekker's ``4097 * a`` split would."""
    bits = lax.bitcast_convert_type(a, jnp.uint32) & jnp.uint32(0xFFFFF000)
    hi = lax.bitcast_convert_type(bits, jnp.float32)
    return hi, a - hi


@jax.jit  # traced once a shape (DYNAMIC_QUANTIZE_LINEAR's two scalar divisions a node)
def _nearest_quotient(x, y):
    """``x / y`` rounded to the nearest float32. XLA's GPU quotient ``q`` was measured up to two
    ulps off; its residual ``x - q * y``, computed exactly with Dekker's product, corrects it to
    within one ulp (``q + r / y``); that one's residual says on which side the exact quotient
    lies, and the nearer of it and its neighbour on that side (by exact residuals again) is the
    correctly rounded quotient. Where a residual cannot be computed (zero, infinite or NaN
    operands, products out of range) the quotient stays as XLA gives it."""
    q = x / y
    yh, yl = _split(y)

    def residual(c):  # x - c * y, exactly (signed)
        p = rounded(c * y)
        ch, cl = _split(c)
        e = ((ch * yh - p) + ch * yl + cl * yh) + cl * yl
        return (x - p) - e

    near = q + residual(q) / y
    r = residual(near)
    toward = jnp.where((r > 0) == (y > 0), jnp.inf, -jnp.inf).astype(q.dtype)
    other = lax.nextafter(near, toward)
    best = jnp.where(jnp.abs(residual(other)) < jnp.abs(r), other, near)
    ok = jnp.isfinite(q) & (q != 0) & jnp.isfinite(best) & jnp.isfinite(r)
    return jnp.where(ok, best, q)


def rounded(x):
    """``x`` itself, as a value XLA must round before any later addition.

    XLA contracts ``a * b + c`` into one fused multiply-add (one rounding instead of two) on CPU
    and GPU; ``nextafter(x, x)`` is ``x`` (NaN and signed zeros included) but not a multiply, so
    the product is rounded to float32 first, as the documented formula says.
    """
    return lax.nextafter(x, x)


# ---------------------------------------------------------------------------------------------
# Quantization parameter tensors of the matrix-multiply, convolution and pooling operators


def check_parameter(
    v: Validator, path: str, t: TensorDesc, rank: int, axis: int, count: int, what: str
) -> None:
    """A scale or zero point tensor holding one value or ``count`` values along ``axis`` of a
    rank-``rank`` result (``count`` 1: one value only).

    Its sizes, left-padded with 1s to ``rank``, are all 1 except at ``axis`` (1 or ``count``);
    a 1-D tensor holds the counted values directly (``{M}`` for per-row A parameters, as the
    pages' dimension tables ``{ [1], [1], Count, [1] }`` allow one dimension).
    """
    v.check(
        f"{path}.DimensionCount",
        t.rank <= rank,
        f"must be at most {rank} (the result's), got {t.rank}",
    )
    if t.element_count == 1:
        return
    if count > 1 and t.rank == 1:
        ok = t.sizes == (count,)
    elif count > 1:
        padded = (1,) * (rank - t.rank) + t.sizes
        ok = padded[axis] == count and all(s == 1 for i, s in enumerate(padded) if i != axis)
    else:
        ok = False
    if ok:
        return
    if count > 1:
        pattern = [1] * rank
        pattern[axis] = count
        rule = (
            f"must hold one value (every size 1) or {count} values ({what}: "
            f"{show(tuple(pattern))}, leading 1s optional, or {show((count,))})"
        )
    else:
        rule = f"must hold one value (every size 1; {what})"
    v.fail(f"{path}.Sizes", f"{rule}, got {show(t.sizes)}")


def parameter(x, rank: int, axis: int):
    """A parameter array (``check_parameter``'s shapes) shaped to broadcast over the result."""
    if x.size == 1:
        return lax.reshape(x, (1,) * rank)
    if x.ndim == 1:
        shape = [1] * rank
        shape[axis] = x.shape[0]
        return lax.reshape(x, tuple(shape))
    return lax.reshape(x, (1,) * (rank - x.ndim) + tuple(x.shape))


def named_inputs(d: Any, arrays: tuple) -> dict[str, Any]:
    """The lowering's arrays (present input tensors, schema order) by field name, None for an
    absent optional tensor."""
    it = iter(arrays)
    return {f.name: (None if getattr(d, f.name) is None else next(it)) for f in d.declared(INPUT)}


def known_inputs(d: Any) -> dict[str, Any]:
    """``named_inputs``'s known values: each present input the program holds as a constant
    (``fastpath.known_input``: a model's weights and their zero points), as NumPy, else None."""
    present = [f.name for f in d.declared(INPUT) if getattr(d, f.name) is not None]
    return {name: known_input(i) for i, name in enumerate(present)}


@dataclass(frozen=True)
class OperandMembers(OperatorDesc):
    """The first members of the quantized binary operators (QUANTIZED_LINEAR_ADD, the quantized
    and integer-to-float matrix multiplies): two operands, each with its scale and zero point."""

    a_tensor: TensorDesc = input_field()
    a_scale_tensor: TensorDesc = input_field()
    a_zero_point_tensor: TensorDesc | None = input_field(optional=True)
    b_tensor: TensorDesc = input_field()
    b_scale_tensor: TensorDesc = input_field()
    b_zero_point_tensor: TensorDesc | None = input_field(optional=True)


@dataclass(frozen=True)
class QuantizedPairMembers(OperandMembers):
    """ELEMENT_WISE_QUANTIZED_LINEAR_ADD's and QUANTIZED_LINEAR_MATRIX_MULTIPLY's members: the
    operands, then the output's scale and zero point, and the output."""

    output_scale_tensor: TensorDesc = input_field()
    output_zero_point_tensor: TensorDesc | None = input_field(optional=True)
    output_tensor: TensorDesc = output_field()


# ---------------------------------------------------------------------------------------------
# The integer products of the quantized matrix multiplies and convolutions

INT8_MIN = 128  # M, K and N at least this, and multiples of 4, take the int8 dot


def signed(q, q_type: DataType, zero_point):
    """8-bit values as int8 and their zero point in the same frame, so that ``q - zero_point``
    equals ``q' - zero_point'`` exactly: UINT8 shifts by -128 (its top bit flipped), INT8 stays.

    Tensor cores multiply int8 by int8 (XLA's int8 dot with an int32 result, cuBLASLt's IMMA
    on GPUs); 16-bit operands fall back to a slow untiled dot there. ``zero_point`` is an array
    broadcasting over ``q`` or None (0); the shifted zero point is int32, or None where it is
    statically 0 (an INT8 tensor without one)."""
    q = held(q, q_type)
    shift = 0 if q_type.is_signed else 128
    if shift:
        q = lax.bitcast_convert_type(lax.bitwise_xor(q, jnp.uint8(0x80)), jnp.int8)
    if zero_point is None:
        return q, (None if shift == 0 else jnp.full((1,) * q.ndim, -shift, jnp.int32))
    zero_point = held(zero_point, q_type).astype(jnp.int32)
    return q, (zero_point - jnp.int32(shift) if shift else zero_point)


def signed_known(q, q_type: DataType, zero_given: bool, zero_point) -> tuple[Any, Any]:
    """``signed`` of 8-bit values the program holds as constants, by NumPy at trace time.

    ``q`` and ``zero_point``: the known values (None: known only at run time); ``zero_given``:
    whether the operator has a zero point at all. Returns (the int8 values, or None where ``q``
    is not known; the shifted int32 zero point where it is known, False where it is 0
    everywhere, None where it is known only at run time). What ``zero_point_product`` reduces
    from a known operand is then a constant of the program, not a reduction XLA folds at every
    compile, slowly (a BERT-like encoder's column sums of its weights took 48 of its 49 s
    compile on the CPU), and a zero point of 0 (onnxruntime's symmetric INT8 weights) drops its
    terms."""
    if q_type.bits != 8:
        return None, None
    shift = 0 if q_type.is_signed else 128
    values = None
    if q is not None:
        q = np.asarray(q)  # (a weight's bytes: read once, shifted by a flip of the top bit)
        if shift:
            values = (q.astype(np.uint8, copy=False) ^ np.uint8(0x80)).view(np.int8)
        else:
            values = q.astype(np.int8, copy=False)
    if not zero_given:
        return values, (np.full((1,), -shift, np.int32) if shift else False)
    if zero_point is None:
        return values, None
    z = np.asarray(zero_point).astype(np.int32) - shift
    return values, (z if z.any() else False)


def zero_point_product(x, x_zero, y, y_zero, x_known=None, y_known=None):
    """``sum_k (x - x_zero)[.., m, k] * (y - y_zero)[.., k, n]`` in int32 (wrapping as int32
    accumulators do), for int8 ``x`` {B.., M, K} and ``y`` {B.., K, N}; ``x_zero`` broadcasts
    to {.., M, 1} and ``y_zero`` to {.., 1, N} (int32; None: 0). ``x_known`` / ``y_known``:
    the operand's values as NumPy int8 where the program holds it as a constant (None: not
    known), whose sums are then taken here, at trace time.

    The int8 product is one dot; the zero points enter outside it:
    ``(x - a)(y - b) = xy - a * colsum(y) - b * rowsum(x) + K * a * b``. int32 arithmetic is
    exact modulo 2**32, so this equals the sum of the differences' products wrapped to int32,
    bit for bit, on every backend."""
    rank = x.ndim
    batch = tuple(range(rank - 2))
    if not all(n >= INT8_MIN and n % 4 == 0 for n in (x.shape[-2], x.shape[-1], y.shape[-1])):
        # XLA's GPU backend computed small int8 dots wrongly (M, K, N of 2 and 3 on an H200,
        # jax 0.11.2). int16 operands hold every product of two 8-bit values, so they are exact
        # whichever code XLA emits; the int8 dot is kept for cuBLAS's aligned int8 GEMMs (checked
        # exact on the GPU from 512 up, benchmarks/RESULTS.md#quantized).
        x, y = x.astype(jnp.int16), y.astype(jnp.int16)
    acc = lax.dot_general(
        x, y, (((rank - 1,), (rank - 2,)), (batch, batch)), preferred_element_type=jnp.int32
    )
    if x_zero is not None:
        acc = acc - x_zero * _sums(y, y_known, rank - 2)
    if y_zero is not None:
        acc = acc - y_zero * _sums(x, x_known, rank - 1)
    if x_zero is not None and y_zero is not None:
        acc = acc + jnp.int32(x.shape[-1]) * x_zero * y_zero
    return acc


def _sums(q, known, axis: int):
    """``q``'s int32 sums along ``axis`` (kept): by NumPy where ``known`` holds its values
    (wrapping as int32 does, as XLA's sum would), else in the program."""
    if known is None:
        return jnp.sum(q, axis=axis, keepdims=True, dtype=jnp.int32)
    return jnp.asarray(np.sum(known, axis=axis, keepdims=True, dtype=np.int32))


def same_parameter_ranks(d: Any, v: Validator, names: tuple[str, ...]) -> None:
    """The pages' rule: these scale / zero point tensors share one DimensionCount."""
    present = [(n, getattr(d, snake(n))) for n in names if getattr(d, snake(n)) is not None]
    if present:
        v.same("rank", present[1:], present[0])


def snake(member: str) -> str:
    return "".join("_" + ch.lower() if ch.isupper() else ch for ch in member).lstrip("_")


def tensor_json(data_type: str, sizes: list) -> dict:
    return {"DataType": data_type, "Sizes": sizes}
