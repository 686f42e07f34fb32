"""Quantization as one Pallas (Triton) pass: the CUDA fast path of ELEMENT_WISE_QUANTIZE_LINEAR
and QUANTIZE whose scale (and zero point) is one value or varies along one axis, where the node
has no graph neighbours (standalone: in a graph the lax lowering fuses into its producer).

The lax lowering (``ops._quant.quantize``) rounds the quotient with ``round_quotient``: an exact
division on CPUs; on NVIDIA GPUs, whose float32 division in XLA is not always correctly rounded
(of 4.2M quotients of the operators sweep's data, 5 came out one ulp off, each moving a value
that lay just beside a halfway point across it: benchmarks/RESULTS.md#operators), an
approximate quotient and one exact residual. Alone, that ran at 0.65-0.97 of this kernel's
speed on an H200 (``quantize_steps_gpu.py --kernel``); in a graph it fuses into its producer,
which no kernel does. Here a program owns ``tile`` elements of one channel's run (the input as
{A, C, R}: the axis is C; one channel of everything for a per-tensor scale), loads that
channel's scale and zero point once, and computes
``clamp(round_half_even(x / scale) + zero_point, Min, Max)`` with PTX's correctly rounded
``div.rn.f32`` and ``cvt.rni`` (round to nearest even), NaN giving the zero point: NumPy's
float32 result exactly (tests/test_quantize_kernel.py; on the CPU, in interpret mode with the
lax lowering's own ``divide`` and ``jnp.round``, the lax lowering's bit for bit).

Taken for float32 or float16 input, 8- or 4-bit integer output (INT4 / UINT4 computed in int8 /
uint8, clamped to their own range, and returned as jnp.int4 / jnp.uint4), a per-axis scale (and zero point, of
the output's type) whose channels run at least ``MIN_RUN`` elements, and at least
``MIN_PROGRAMS`` programs; anything else stays with lax.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..fastpath import register_fast_path
from ..ops._quant import divide
from .pallas_helpers import is_nan, load_pallas, ptx
from .reduce_plan import pow2_at_least

IN_TYPES = frozenset(np.dtype(t) for t in ("float32", "float16"))
OUT_TYPES = frozenset(np.dtype(t) for t in ("int8", "uint8"))
# Elements a program; chosen on an H200 (benchmarks/RESULTS.md#operators: 1024 to 16384
# on 4 or 8 warps all 0.98-1.02 of the copy).
TILE_ELEMENTS = 4096
WARPS = 4
MIN_PROGRAMS = 264
MIN_RUN = 256  # elements of one channel in a row (the product of the sizes after the axis)
_INDEX_LIMIT = 2**31 - 2**20


def carrier(out_type) -> np.dtype:
    """The byte type the kernel stores ``out_type`` in (int8 / uint8 for INT4 / UINT4, whose
    values it then converts: Triton stores no 4-bit elements)."""
    if out_type.bits == 4:
        return np.dtype(np.int8 if out_type.is_signed else np.uint8)
    return out_type.numpy_dtype


@dataclass(frozen=True)
class View:
    """The input as {a, c, r} (the quantization axis is c), in tiles of ``tile`` elements of a
    channel's run of ``r``."""

    a: int
    c: int
    r: int
    tile: int
    warps: int

    @property
    def tiles(self) -> int:
        return -(-self.r // self.tile)

    @property
    def programs(self) -> int:
        return self.a * self.c * self.tiles


def plan(shape: tuple[int, ...], axis: int, in_dtype, out_dtype) -> View | None:
    if np.dtype(in_dtype) not in IN_TYPES or np.dtype(out_dtype) not in OUT_TYPES:
        return None
    if math.prod(shape) >= _INDEX_LIMIT or min(shape, default=0) < 1:
        return None
    a, c, r = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1 :])
    if r < MIN_RUN:
        return None  # short runs of a channel (the last axis): a tile would be mostly idle
    tile = min(TILE_ELEMENTS, pow2_at_least(r))
    v = View(a, c, r, tile, WARPS)
    return v if v.programs >= MIN_PROGRAMS else None


def quantize_kernel(x, scale, zero, v: View, out_type, interpret: bool = False):
    """``x`` quantized per channel into the ``DataType`` ``out_type`` (its own range; INT4 and
    UINT4 are computed in a byte, ``carrier``): ``scale`` (float32) and ``zero`` (the output's
    type, or None) are vectors of ``v.c``."""
    pl, pltriton = load_pallas()
    out_dtype = carrier(out_type)
    if zero is not None:
        zero = zero.astype(out_dtype)
    lo, hi = (np.float32(b) for b in out_type.integer_range)
    tile, tiles = v.tile, v.tiles
    has_zero = zero is not None

    def kernel(x_ref, s_ref, *refs):
        if has_zero:
            z_ref, o_ref = refs
        else:
            (o_ref,) = refs
        pid = pl.program_id(0)
        row, t = pid // tiles, pid % tiles  # row = a * C + c
        ch = row % v.c
        s = pltriton.load(s_ref.at[pl.ds(ch, 1)])  # (1,)
        zp = (
            pltriton.load(z_ref.at[pl.ds(ch, 1)]).astype(jnp.float32)
            if has_zero
            else jnp.zeros((1,), jnp.float32)
        )
        cols = t * tile + jnp.arange(tile, dtype=jnp.int32)
        ok = cols < v.r
        at = row * v.r + cols
        value = pltriton.load(x_ref.at[at], mask=ok, other=0).astype(jnp.float32)
        if interpret:
            steps = jnp.round(divide(value, s))
        else:
            steps = ptx("cvt.rni.f32.f32", ptx("div.rn.f32", value, jnp.broadcast_to(s, (tile,))))
        # A NaN quotient (NaN input, 0 / 0) gives the zero point; tested before the clamp, as
        # Triton's minimum and maximum drop NaN.
        q = jnp.clip(steps + zp, lo, hi)
        q = jnp.where(is_nan(steps), jnp.broadcast_to(zp, q.shape), q)
        pltriton.store(o_ref.at[at], q.astype(out_dtype), mask=ok)

    args = [lax.reshape(x, (x.size,)), scale.astype(jnp.float32)]
    if has_zero:
        args.append(zero)
    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((x.size,), out_dtype),
        grid=(v.programs,),
        interpret=interpret,
        compiler_params=pltriton.CompilerParams(num_warps=v.warps, num_stages=1),
    )(*args)
    return lax.reshape(out, x.shape).astype(out_type.numpy_dtype)


def _varying_axis(x_sizes: tuple[int, ...], t: Any, strided: bool) -> int | None:
    """The one axis along which a parameter of desc ``t`` varies over the input, or None (per
    tensor, several axes, blocks)."""
    sizes = tuple(t.sizes)
    if len(sizes) != len(x_sizes):
        return None
    if strided and t.strides is not None:
        varying = [i for i, (n, s) in enumerate(zip(sizes, t.strides)) if n > 1 and s != 0]
    else:
        varying = [i for i, n in enumerate(sizes) if n > 1]
    if len(varying) != 1 or sizes[varying[0]] != x_sizes[varying[0]]:
        return None
    if not strided and any(n not in (1, x_sizes[i]) for i, n in enumerate(sizes)):
        return None
    return varying[0]


def _params(d: Any):
    """(scale desc, zero point desc or None, strided) of either operator."""
    if hasattr(d, "quantization_tensors"):
        tensors = tuple(d.quantization_tensors)
        return tensors[0], (tensors[1] if len(tensors) > 1 else None), False
    return d.scale_tensor, d.zero_point_tensor, True


def _per_tensor(t: Any, strided: bool) -> bool:
    """Whether a parameter desc holds one value for the whole tensor."""
    if strided and t.strides is not None:
        return all(n == 1 or s == 0 for n, s in zip(t.sizes, t.strides))
    return all(n == 1 for n in t.sizes)


def _view(d: Any) -> tuple[View, int | None] | None:
    """The kernel's view and the quantization axis (None: one scale for the whole tensor)."""
    x, out = d.input_tensor, d.output_tensor
    if x.strides is not None or out.strides is not None:
        return None
    scale, zero, strided = _params(d)
    if _per_tensor(scale, strided) and (zero is None or _per_tensor(zero, strided)):
        v = plan((1, x.element_count), 0, x.dtype, carrier(out.data_type))  # one "channel"
        return None if v is None else (v, None)
    axis = _varying_axis(x.sizes, scale, strided)
    if axis is None or (zero is not None and _varying_axis(x.sizes, zero, strided) != axis):
        return None
    v = plan(tuple(x.sizes), axis, x.dtype, carrier(out.data_type))
    return None if v is None else (v, axis)


def _vector(p, axis: int | None):
    """A parameter array (the logical tensor: {1.., C, 1..}, or broadcast to the input's shape)
    as its vector of C (of one value where ``axis`` is None)."""
    if axis is None:
        return lax.reshape(p, (p.size,))[:1]
    index = tuple(slice(None) if i == axis else 0 for i in range(p.ndim))
    return p[index]


def _lower(d: Any, x, scale, *zero) -> tuple:
    v, axis = _view(d)
    z = _vector(zero[0], axis) if zero else None
    out = quantize_kernel(x, _vector(scale, axis), z, v, d.output_tensor.data_type)
    return (out,)


# Standalone: in a graph the lax lowering (``round_quotient``) fuses into the quantize's producer
# and the float input never reaches memory. One H200, 2026-11-29: alone, float32 to int8 at
# ResNet-50's activation sizes for a batch of 64, this kernel 71-94 us against lax's 108-114 at
# 64 x 256 x 56 x 56 (``quantize_steps_gpu.py --kernel``); in the QDQ ResNet-50 (batch 64) its
# 123 QuantizeLinear nodes as this kernel 9.23 ms a call, as lax fused into their producers 6.20.
for _name in ("ELEMENT_WISE_QUANTIZE_LINEAR", "QUANTIZE"):
    register_fast_path(
        f"DML_OPERATOR_{_name}", "kernel", lambda d: _view(d) is not None, _lower, standalone=True
    )
