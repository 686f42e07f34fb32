"""The PTX of ``pallas_helpers.nearest_quotient`` (the int8 convolution kernel's quantizer on
CUDA, ``int8_qdq_conv.FMA_QUOTIENT``) run on the CPU by a small interpreter of the instructions
it uses, each rounded as PTX defines it (``fma.rn``: the exact ``a * b + c`` rounded once to
float32), from ``_quant.scaled_divisor``'s operands, against NumPy's float32 division rounded
half to even: quotients beside halfway points, at random, and the special values."""

from __future__ import annotations

import numpy as np
import pytest

from dml_jax.kernels import pallas_helpers

F32, F64 = np.float32, np.float64


def _fma(a, b, c):
    """``a * b + c`` of float32 arrays rounded once to float32: the product is exact in float64;
    the sum's float64 rounding error (TwoSum) decides the one case where rounding that sum to
    float32 again would differ, a float32 halfway point."""
    a, b, c = (np.asarray(t, F32).astype(F64) for t in (a, b, c))
    with np.errstate(all="ignore"):
        p = a * b
        s = p + c
        bb = s - p
        err = (p - (s - bb)) + (c - bb)
        r = s.astype(F32)
        toward = np.where(s > r.astype(F64), F32(np.inf), F32(-np.inf)).astype(F32)
        other = np.nextafter(r, toward)
        halfway = (s == (r.astype(F64) + other.astype(F64)) / 2) & (s != r.astype(F64))
        fix = halfway & (err != 0) & ((err > 0) == (other > r))
        return np.where(fix, other, r).astype(F32)


def _run(asm: str, *args):
    """The inline assembly ``asm`` ($0 the result, $1... ``args``) on float32 arrays."""
    regs = {f"${i + 1}": np.asarray(a, F32) for i, a in enumerate(args)}

    def val(t):
        if t.startswith("0f"):
            return np.uint32(int(t.removeprefix("0f"), 16)).view(F32)
        return regs[t]

    with np.errstate(all="ignore"):
        for line in asm.splitlines():
            line = line.strip().rstrip(";")
            if not line or line in "{}" or line.startswith(".reg"):
                continue
            op, rest = line.split(None, 1)
            d, *src = [t.strip() for t in rest.split(",")]
            s = [val(t) for t in src]
            if op == "mul.rn.f32":
                out = (s[0] * s[1]).astype(F32)
            elif op == "neg.f32":
                out = -s[0]
            elif op == "fma.rn.f32":
                out = _fma(*s)
            elif op == "setp.nan.f32":
                out = np.isnan(s[0]) | np.isnan(s[1])
            elif op == "selp.f32":
                out = np.where(s[2], s[0], s[1]).astype(F32)
            elif op == "cvt.rni.f32.f32":
                out = np.rint(s[0]).astype(F32)
            elif op == "cvt.rzi.f32.f32":
                out = np.trunc(s[0]).astype(F32)
            else:
                raise AssertionError(f"an instruction the interpreter does not know: {op}")
            regs[d] = out
    return regs["$0"]


def _quotient(x, y, asm=pallas_helpers._quotient_ptx):
    """The kernel's steps: the scaled divisor, its correctly rounded reciprocal, the PTX."""
    import jax.numpy as jnp

    from dml_jax.ops import _quant

    power, ys = (np.asarray(t) for t in _quant.scaled_divisor(jnp.asarray(y)))
    with np.errstate(all="ignore"):
        inv = (F32(1) / ys).astype(F32)  # rcp.rn.f32: IEEE's reciprocal
        return _run(asm, (x * power).astype(F32), ys, inv)


def _expected(x, y):
    with np.errstate(all="ignore"):
        q = np.rint((x / y).astype(F32)).astype(F32)
    return np.where(np.isnan(q), F32(0), q)


def _cases(rng, rows=48, cols=256):
    """Quotients beside halfway points (k + 1/2 times the divisor, moved by up to three ulps)
    and random ones, over divisors from 2^-126 to 2^100 of both signs."""
    e = rng.integers(-126, 100, rows)
    y = (rng.uniform(1, 2, rows) * 2.0**e).astype(F32)
    y[rng.random(rows) < 0.2] *= -1
    k = rng.integers(-1500, 1500, (rows, cols)).astype(F64)
    with np.errstate(all="ignore"):
        x = ((k + 0.5) * y[:, None].astype(F64)).astype(F32)
        steps = rng.integers(-3, 4, x.shape)
        for s in range(3):
            up, down = np.nextafter(x, F32(np.inf)), np.nextafter(x, F32(-np.inf))
            x = np.where(steps > s, up, np.where(steps < -s, down, x)).astype(F32)
        scatter = rng.standard_normal((rows, cols)) * 2.0 ** rng.integers(-130, 130, (rows, 1))
        xr = scatter.astype(F32)
    return [(xs, np.broadcast_to(y[:, None], xs.shape).astype(F32)) for xs in (x, xr)]


def test_fma_quotient_is_the_correctly_rounded_one(rng):
    for x, y in _cases(rng):
        want = _expected(x, y)
        inside = np.abs(want) < 2048  # the quantizers saturate beyond (STEPS_EXACT)
        np.testing.assert_array_equal(_quotient(x, y)[inside], want[inside])


def test_fma_quotient_of_special_values():
    """Zeros, infinities, NaN, the largest and smallest values (no subnormal divisor: XLA's CPU
    flushes it to 0 in ``scaled_divisor`` here, as a scale it is out of any use)."""
    v = [0, -0.0, 1, -1, 3.5, np.inf, -np.inf, np.nan, 2e-38, 3e38, -3e38]
    x, y = (a.astype(F32) for a in np.meshgrid(np.array(v + [1e-45], F32), np.array(v, F32)))
    got, want = _quotient(x, y), _expected(x, y)
    np.testing.assert_array_equal(got, want)  # a NaN quotient gives 0


@pytest.mark.parametrize("fault", ["uncorrected", "truncated"])
def test_a_changed_sequence_is_seen(rng, fault):
    """The interpreter and the cases tell a weaker sequence from the kernel's: the product by
    the reciprocal uncorrected, or the quotient truncated rather than rounded."""
    asm = pallas_helpers._quotient_ptx
    if fault == "uncorrected":  # q0 itself: both corrections' results replaced by it
        asm = asm.replace("fma.rn.f32 q, r, $3, q0;", "mul.rn.f32 q, $1, $3;")
        asm = asm.replace("fma.rn.f32 q, r, $3, q;", "mul.rn.f32 q, $1, $3;")
    else:
        asm = asm.replace("cvt.rni.f32.f32", "cvt.rzi.f32.f32")
    assert asm != pallas_helpers._quotient_ptx
    differs = 0
    for x, y in _cases(rng):
        want = _expected(x, y)
        inside = np.abs(want) < 2048
        differs += int((_quotient(x, y, asm)[inside] != want[inside]).sum())
    assert differs > 0
