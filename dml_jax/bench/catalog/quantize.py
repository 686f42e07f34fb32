"""Bench cases of the operators of ``dml_jax.ops.quantize``: the float side is the run's dtype
(FLOAT32 or FLOAT16, so a quantize reads and a dequantize writes the run's 1 GiB), the integer
side INT8 or UINT8, the scale and zero point one value or one per channel (C of NCHW). The
hand-written equivalents compute the same formula in float32; PyTorch's are eager compositions of
the same steps."""

from __future__ import annotations

import functools

import jax.numpy as jnp

from dml_jax.bench.catalog import BenchCase, register_cases
from dml_jax.enums import DataType
from dml_jax.ops.quantize import (
    DequantizeOperatorDesc,
    DynamicQuantizeLinearOperatorDesc,
    ElementWiseDequantizeLinearOperatorDesc,
    ElementWiseQuantizeLinearOperatorDesc,
    QuantizeOperatorDesc,
)
from dml_jax.tensor import TensorDesc

_BENCH_FLOATS = ("float32", "float16")
_BLOCK = 32  # DEQUANTIZE's blocked case: one scale per 32 elements along W (MatMulNBits)


def _channel(shape: tuple) -> tuple:
    return (1, shape[1]) + (1,) * (len(shape) - 2)


def _viewed(shape: tuple | None, x, *params):
    """Buffers (1-D) as NCHW and per-channel parameters as {1, C, 1, 1}; arrays unchanged
    when ``shape`` is None (logical mode, or one value per tensor)."""
    if shape is None:
        return (x, *params)
    return (x.reshape(shape), *(p.reshape(_channel(shape)) for p in params))


def _flat(shape: tuple | None, y):
    return y if shape is None else y.reshape(-1)


def _hand_quantize(out: DataType, shape: tuple | None = None):
    lo, hi = out.integer_range

    def jnp_fn(x, scale, zero):
        x, scale, zero = _viewed(shape, x, scale, zero)
        f32 = jnp.float32
        y = jnp.round(x.astype(f32) / scale.astype(f32)) + zero.astype(f32)
        return _flat(shape, jnp.clip(y, lo, hi).astype(out.numpy_dtype))

    def torch_fn(torch, x, scale, zero):
        x, scale, zero = _viewed(shape, x, scale, zero)
        y = torch.round(x.float() / scale.float()) + zero.float()
        return _flat(shape, torch.clamp(y, lo, hi).to(getattr(torch, out.numpy_dtype.name)))

    return jnp_fn, torch_fn


def _hand_dequantize(out: DataType, shape: tuple | None = None):
    def jnp_fn(q, scale, zero):
        q, scale, zero = _viewed(shape, q, scale, zero)
        f32 = jnp.float32
        return _flat(
            shape, ((q.astype(f32) - zero.astype(f32)) * scale.astype(f32)).astype(out.numpy_dtype)
        )

    def torch_fn(torch, q, scale, zero):
        q, scale, zero = _viewed(shape, q, scale, zero)
        y = (q.float() - zero.float()) * scale.float()
        return _flat(shape, y.to(getattr(torch, out.numpy_dtype.name)))

    return jnp_fn, torch_fn


def _linear_cases(shape: tuple, dtype: str, full: bool, dequantize: bool) -> list:
    """ELEMENT_WISE_(DE)QUANTIZE_LINEAR in buffer mode, parameters as stride-0 descs (one
    element, or one per channel with strides {0, 1, 0, 0}): DirectML's per-tensor and per-axis
    forms, which read the parameters as small buffers."""
    if dtype not in _BENCH_FLOATS:
        return []
    x = TensorDesc(dtype.upper(), shape)
    cases = []
    for what, q_type, strides in (
        ("per-tensor", "INT8", (0,) * len(shape)),
        ("per-channel", "UINT8", (0, 1) + (0,) * (len(shape) - 2)),
    ):
        q = x.like(data_type=q_type)
        scale, zero = x.like(strides=strides), q.like(strides=strides)
        view = None if what == "per-tensor" else shape
        if dequantize:
            desc = ElementWiseDequantizeLinearOperatorDesc(q, scale, zero, x)
            label = f"DEQUANTIZE_LINEAR {what} {q_type}"
            jnp_fn, torch_fn = _hand_dequantize(x.data_type, view)
        else:
            desc = ElementWiseQuantizeLinearOperatorDesc(x, scale, zero, q)
            label = f"QUANTIZE_LINEAR {what} to {q_type}"
            jnp_fn, torch_fn = _hand_quantize(q.data_type, view)
        cases.append(BenchCase(label, desc, jnp=jnp_fn, torch=torch_fn, buffers=True))
    return cases


def _blocked_cases(shape: tuple, dtype: str, full: bool, dequantize: bool) -> list:
    """QUANTIZE / DEQUANTIZE with QuantizationTensors of one value and one per channel, and
    DEQUANTIZE of INT4 blocks along W (one scale and zero point per 32 elements)."""
    if dtype not in _BENCH_FLOATS:
        return []
    x = TensorDesc(dtype.upper(), shape)
    cases = []
    for what, q_type, sizes in (
        ("per-tensor", "INT8", (1,) * len(shape)),
        ("per-channel", "UINT8", _channel(shape)),
    ):
        q = x.like(data_type=q_type)
        params = [x.like(sizes=sizes), q.like(sizes=sizes)]
        if dequantize:
            desc = DequantizeOperatorDesc(q, "SCALE_ZERO_POINT", params, x)
            label = f"DEQUANTIZE {what} {q_type}"
            jnp_fn, torch_fn = _hand_dequantize(x.data_type)
        else:
            desc = QuantizeOperatorDesc(x, "SCALE_ZERO_POINT", params, q)
            label = f"QUANTIZE {what} to {q_type}"
            jnp_fn, torch_fn = _hand_quantize(q.data_type)
        cases.append(BenchCase(label, desc, jnp=jnp_fn, torch=torch_fn))
    if dequantize and shape[-1] % _BLOCK == 0:
        q = x.like(data_type="INT4")
        sizes = shape[:-1] + (shape[-1] // _BLOCK,)
        params = [x.like(sizes=sizes), q.like(sizes=sizes)]
        cases.append(
            BenchCase(
                f"DEQUANTIZE INT4 blocks of {_BLOCK} along W",
                DequantizeOperatorDesc(q, "SCALE_ZERO_POINT", params, x),
                jnp=_hand_dequantize_int4(shape, x.dtype),
                notes="INT4 as jnp.int4",
            )
        )
    return cases


def _hand_dequantize_int4(shape: tuple, out):
    blocked = shape[:-1] + (shape[-1] // _BLOCK, _BLOCK)

    def nibble(v):  # jnp.int4 elements
        return v.astype(jnp.float32)

    def jnp_fn(q, scale, zero):
        y = (nibble(q).reshape(blocked) - nibble(zero)[..., None]) * scale[..., None].astype(
            jnp.float32
        )
        return y.reshape(shape).astype(out)

    return jnp_fn


def _dynamic_cases(shape: tuple, dtype: str, full: bool) -> list:
    """DYNAMIC_QUANTIZE_LINEAR to UINT8: a range reduction, then the quantization."""
    if dtype not in _BENCH_FLOATS:
        return []
    x = TensorDesc(dtype.upper(), shape)
    one = (1,) * len(shape)
    desc = DynamicQuantizeLinearOperatorDesc(
        x, x.like(data_type="UINT8"), x.like(data_type="FLOAT32", sizes=one),
        x.like(data_type="UINT8", sizes=one),
    )  # fmt: skip

    def jnp_fn(v):
        f = v.astype(jnp.float32)
        lo, hi = jnp.minimum(jnp.min(f), 0.0), jnp.maximum(jnp.max(f), 0.0)
        scale = (hi - lo) / jnp.float32(255)
        zero = jnp.clip(jnp.round(-lo / scale), 0, 255)
        y = jnp.clip(jnp.round(f / scale) + zero, 0, 255).astype(jnp.uint8)
        return y, scale.reshape(one), zero.astype(jnp.uint8).reshape(one)

    def torch_fn(torch, v):
        f = v.float()
        lo, hi = torch.aminmax(f)
        lo, hi = torch.clamp(lo, max=0.0), torch.clamp(hi, min=0.0)
        scale = (hi - lo) / 255
        zero = torch.clamp(torch.round(-lo / scale), 0, 255)
        return torch.clamp(torch.round(f / scale) + zero, 0, 255).to(torch.uint8), scale, zero

    return [BenchCase("DYNAMIC_QUANTIZE_LINEAR to UINT8", desc, jnp=jnp_fn, torch=torch_fn)]


register_cases(
    ElementWiseQuantizeLinearOperatorDesc, functools.partial(_linear_cases, dequantize=False)
)
register_cases(
    ElementWiseDequantizeLinearOperatorDesc, functools.partial(_linear_cases, dequantize=True)
)
register_cases(QuantizeOperatorDesc, functools.partial(_blocked_cases, dequantize=False))
register_cases(DequantizeOperatorDesc, functools.partial(_blocked_cases, dequantize=True))
register_cases(DynamicQuantizeLinearOperatorDesc, _dynamic_cases)
