"""NumPy references of the quantized and integer operators, from DirectML's pages for
DML_ELEMENT_WISE_(DE)QUANTIZE_LINEAR, DML_(DE)QUANTIZE, DML_DYNAMIC_QUANTIZE_LINEAR,
DML_ELEMENT_WISE_QUANTIZED_LINEAR_ADD, DML_MATRIX_MULTIPLY_INTEGER(_TO_FLOAT),
DML_QUANTIZED_LINEAR_MATRIX_MULTIPLY, DML_CONVOLUTION_INTEGER, DML_QUANTIZED_LINEAR_CONVOLUTION
and DML_QUANTIZED_LINEAR_AVERAGE_POOLING (paraphrased), and docs/semantics.md "Quantization"
where the pages are silent.

- dequantize(q, scale, zp) = (q - zp) * scale; quantize(x, scale, zp) =
  clamp(round(x / scale) + zp, Min, Max), Min / Max the output type's range (UINT8 0..255,
  INT8 -128..127, UINT4 0..15, INT4 -8..7).
- dml_jax's float choices (DML's FLOAT is float32): ``q - zp`` is exact (Python / int64) and
  rounded once to float32; products, sums and quotients are single float32 operations in the
  order the formulas write them; round is half to even (np.rint); NaN quantizes to the zero
  point; an absent zero point is 0.
- Integer sums (matrix products, convolutions, pooling windows) are exact int64 sums of exact
  differences, then wrapped to int32 (they never wrap in the tests).
- 4-bit elements are ml_dtypes' int4 / uint4 arrays (DirectML's INT4 is two's complement).

Everything here is written from the formulas: explicit loops over output positions and window
points, int64 / Python integers, np.float32 scalars for each rounding.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import ml_dtypes
import numpy as np

from .pooling import _geometry, _window

_RANGES = {
    "INT8": (-128, 127),
    "UINT8": (0, 255),
    "INT4": (-8, 7),
    "UINT4": (0, 15),
}
_HELD = {"INT4": ml_dtypes.int4, "UINT4": ml_dtypes.uint4}


def _name(t: Any) -> str:
    return t.data_type.name


def held_dtype(type_name: str) -> np.dtype:
    return np.dtype(_HELD.get(type_name, type_name.lower()))


def read(values: np.ndarray, type_name: str) -> np.ndarray:
    """Integer values as int64 (4-bit ones by their low 4 bits, two's complement for INT4: the
    same values for int4 / uint4 arrays)."""
    v = np.asarray(values).astype(np.int64)
    if type_name == "UINT4":
        return v % 16
    if type_name == "INT4":
        return (v + 8) % 16 - 8
    return v


def f32(v: Any) -> np.ndarray:
    return np.asarray(v, np.float32)


def quantize_values(real: np.ndarray, scale: np.ndarray, zero: np.ndarray | int, type_name: str):
    """clamp(rint(float32(real / scale)) + zero, Min, Max); NaN gives the zero point."""
    lo, hi = _RANGES[type_name]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        steps = np.rint(f32(real) / f32(scale))  # float32 / float32: one float32 rounding
    zero = np.broadcast_to(np.asarray(zero, np.float64), np.shape(steps))
    out = np.empty(np.shape(steps), np.int64)
    for idx in np.ndindex(np.shape(steps)):
        s = float(steps[idx])
        if math.isnan(s):
            out[idx] = int(zero[idx])
        else:
            out[idx] = int(min(max(s + zero[idx], lo), hi))
    return out.astype(held_dtype(type_name))


def difference_f32(q: np.ndarray, q_type: str, zero: np.ndarray | None) -> np.ndarray:
    """float32(q - zero), the difference exact (Python integers) and rounded once."""
    qi = read(q, q_type)
    zi = 0 if zero is None else read(zero, q_type)
    d = np.broadcast_to(qi, np.broadcast_shapes(np.shape(qi), np.shape(zi))) - zi
    return np.array([np.float32(int(v)) for v in np.ravel(d)], np.float32).reshape(np.shape(d))


def dequantize_values(q, q_type: str, zero, scale) -> np.ndarray:
    return difference_f32(q, q_type, zero) * f32(scale)  # one float32 product


# ---------------------------------------------------------------------------------------------
# Element-wise quantize / dequantize, QUANTIZE / DEQUANTIZE


def quantize_linear(desc: Any, x, scale, zero=None):
    out = _name(desc.output_tensor)
    return (quantize_values(f32(x), f32(scale), _zero(zero, out), out),)


def _zero(zero, type_name: str):
    return 0 if zero is None else read(zero, type_name)


def dequantize_linear(desc: Any, q, scale, zero=None):
    y = dequantize_values(q, _name(desc.input_tensor), zero, f32(scale))
    return (_to(y, desc.output_tensor.dtype),)


def _to(y: np.ndarray, dtype) -> np.ndarray:
    """float32 rounded to the output type (FLOAT16 overflows to infinity)."""
    with np.errstate(over="ignore"):
        return y.astype(dtype)


def _expand(p: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Each value of a quantization tensor copied over its block: element ``i`` of the input
    reads ``p[i // (shape / p.shape)]``."""
    out = np.empty(shape, p.dtype)
    blocks = [n // q for n, q in zip(shape, p.shape)]
    for idx in np.ndindex(shape):
        out[idx] = p[tuple(i // b for i, b in zip(idx, blocks))]
    return out


def quantize(desc: Any, x, scale, zero=None):
    out = _name(desc.output_tensor)
    z = None if zero is None else _expand(np.asarray(zero), x.shape)
    return (quantize_values(f32(x), f32(_expand(scale, x.shape)), _zero(z, out), out),)


def dequantize(desc: Any, q, scale, zero=None):
    z = None if zero is None else _expand(np.asarray(zero), q.shape)
    y = dequantize_values(q, _name(desc.input_tensor), z, f32(_expand(scale, q.shape)))
    return (_to(y, desc.output_tensor.dtype),)


# ---------------------------------------------------------------------------------------------
# DYNAMIC_QUANTIZE_LINEAR (ONNX's DynamicQuantizeLinear, with DirectML's INT8 range too)


def dynamic_quantize_linear(desc: Any, x):
    out = _name(desc.output_tensor)
    qmin, qmax = _RANGES[out]
    values = [float(v) for v in np.ravel(x) if not math.isnan(float(v))]
    lo = np.float32(min([0.0] + values))
    hi = np.float32(max([0.0] + values))
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        scale = np.float32(1.0) if hi == lo else np.float32(hi - lo) / np.float32(qmax - qmin)
        zero = np.float32(qmin) - lo / scale
    zero = 0.0 if math.isnan(zero) else min(max(float(np.rint(zero)), qmin), qmax)
    y = quantize_values(f32(x), np.float32(scale), int(zero), out)
    one = (1,) * x.ndim
    return (
        y,
        np.full(one, scale, np.float32),
        np.full(one, int(zero), held_dtype(out)),
    )


# ---------------------------------------------------------------------------------------------
# ELEMENT_WISE_QUANTIZED_LINEAR_ADD


def quantized_linear_add(desc: Any, a, a_scale, *rest):
    arrays = _by_field(desc, (a, a_scale) + rest)
    value = {}
    for side in ("a", "b"):
        t = _name(getattr(desc, f"{side}_tensor"))
        value[side] = dequantize_values(
            arrays[f"{side}_tensor"], t, arrays[f"{side}_zero_point_tensor"],
            np.float32(arrays[f"{side}_scale_tensor"].ravel()[0]),
        )  # fmt: skip
    total = value["a"] + value["b"]  # float32 + float32
    out = _name(desc.output_tensor)
    zero = arrays["output_zero_point_tensor"]
    return (
        quantize_values(
            total,
            np.float32(arrays["output_scale_tensor"].ravel()[0]),
            0 if zero is None else int(read(zero, out).ravel()[0]),
            out,
        ),
    )


def _by_field(desc: Any, arrays: tuple) -> dict:
    """The arrays by input field name (absent optional tensors: None)."""
    it = iter(arrays)
    out = {}
    for f in desc.declared("input"):
        out[f.name] = None if getattr(desc, f.name) is None else next(it)
    return out


# ---------------------------------------------------------------------------------------------
# Parameters per tensor / row / column / channel


def _param(p: np.ndarray | None, count: int, rank: int, axis: int) -> np.ndarray | None:
    """A scale or zero point as ``count`` values along the result's ``axis`` (one value
    repeated; a 1-D tensor holds the values; others are left-padded with 1s)."""
    if p is None:
        return None
    flat = np.ravel(p)
    if flat.size == 1:
        values = np.repeat(flat, count)
    else:
        assert flat.size == count, (np.shape(p), count)
        values = flat
    return values


# ---------------------------------------------------------------------------------------------
# Matrix products


def _integer_matmul(a, a_type, a_zero, b, b_type, b_zero) -> np.ndarray:
    """Exact sums of (A - AZeroPoint)(B - BZeroPoint) per leading index, as Python integers
    (32-bit inputs give 66-bit products)."""
    *lead, m, k = a.shape
    n = b.shape[-1]
    ai, bi = read(a, a_type), read(b, b_type)
    az = _param(a_zero, m, a.ndim, a.ndim - 2)
    bz = _param(b_zero, n, b.ndim, b.ndim - 1)
    az = np.zeros(m, np.int64) if az is None else read(az, a_type)
    bz = np.zeros(n, np.int64) if bz is None else read(bz, b_type)
    out = np.zeros((*lead, m, n), object)
    for idx in itertools.product(*(range(s) for s in lead)):
        for i in range(m):
            for j in range(n):
                out[(*idx, i, j)] = sum(
                    (int(ai[(*idx, i, t)]) - int(az[i])) * (int(bi[(*idx, t, j)]) - int(bz[j]))
                    for t in range(k)
                )
    return out


def _matmul_sum(desc: Any, x: dict) -> np.ndarray:
    return _integer_matmul(
        x["a_tensor"], _name(desc.a_tensor), x["a_zero_point_tensor"],
        x["b_tensor"], _name(desc.b_tensor), x["b_zero_point_tensor"],
    )  # fmt: skip


def matrix_multiply_integer(desc: Any, *arrays):
    return (_matmul_sum(desc, _by_field(desc, arrays)).astype(np.int64).astype(np.int32),)


def matrix_multiply_integer_to_float(desc: Any, *arrays):
    """Float64 from the exact integer sums (a tolerance covers float32's roundings)."""
    x = _by_field(desc, arrays)
    acc = _matmul_sum(desc, x).astype(np.float64)
    m, n = acc.shape[-2], acc.shape[-1]
    sa = _param(x["a_scale_tensor"], m, acc.ndim, acc.ndim - 2).astype(np.float64)
    sb = _param(x["b_scale_tensor"], n, acc.ndim, acc.ndim - 1).astype(np.float64)
    y = acc * sa[:, None] * sb[None, :]
    if x["bias_tensor"] is not None:
        y = y + x["bias_tensor"].astype(np.float64)
    return (_to(y, desc.output_tensor.dtype),)


def quantized_linear_matrix_multiply(desc: Any, *arrays):
    x = _by_field(desc, arrays)
    acc = _matmul_sum(desc, x)
    m, n = acc.shape[-2], acc.shape[-1]
    sa = _param(x["a_scale_tensor"], m, acc.ndim, acc.ndim - 2)
    sb = _param(x["b_scale_tensor"], n, acc.ndim, acc.ndim - 1)
    so = _param(x["output_scale_tensor"], m, acc.ndim, acc.ndim - 2)
    out = _name(desc.output_tensor)
    zo = _param(x["output_zero_point_tensor"], m, acc.ndim, acc.ndim - 2)
    zo = np.zeros(m, np.int64) if zo is None else read(zo, out)
    q = np.empty(acc.shape, held_dtype(out))
    for idx in np.ndindex(acc.shape):
        i, j = idx[-2], idx[-1]
        real = np.float32(acc[idx]) * (np.float32(sa[i]) * np.float32(sb[j]))
        q[idx] = quantize_values(real, np.float32(so[i]), int(zo[i]), out)
    return (q,)


# ---------------------------------------------------------------------------------------------
# Convolutions (FORWARD cross-correlation, zeros padding the zero-point differences)


def _integer_conv(desc: Any, x, x_zero, w, w_zero) -> np.ndarray:
    xt, wt = _name(desc.input_tensor), _name(desc.filter_tensor)
    n, _, *spatial = x.shape
    k, cg, *kernel = w.shape
    groups = desc.group_count
    xi = read(x, xt) - (0 if x_zero is None else int(read(x_zero, xt).ravel()[0]))
    wz = _param(w_zero, k, x.ndim, 1)
    wi = read(w, wt) - (0 if wz is None else read(wz, wt).reshape((k,) + (1,) * (w.ndim - 1)))
    out_sizes = tuple(desc.output_tensor.sizes)
    out = np.zeros(out_sizes, np.int64)
    for b, co in itertools.product(range(n), range(k)):
        g = co // (k // groups)
        for o in itertools.product(*(range(s) for s in out_sizes[2:])):
            total = 0
            for ci in range(cg):
                for tap in itertools.product(*(range(s) for s in kernel)):
                    at = tuple(
                        o[i] * desc.strides[i] + tap[i] * desc.dilations[i] - desc.start_padding[i]
                        for i in range(len(spatial))
                    )
                    if all(0 <= a < s for a, s in zip(at, spatial)):
                        total += int(xi[(b, g * cg + ci, *at)]) * int(wi[(co, ci, *tap)])
            out[(b, co, *o)] = total
    return out


def _conv_sum(desc: Any, x: dict) -> np.ndarray:
    return _integer_conv(
        desc, x["input_tensor"], x["input_zero_point_tensor"],
        x["filter_tensor"], x["filter_zero_point_tensor"],
    )  # fmt: skip


def convolution_integer(desc: Any, *arrays):
    return (_conv_sum(desc, _by_field(desc, arrays)).astype(np.int32),)


def quantized_linear_convolution(desc: Any, *arrays):
    x = _by_field(desc, arrays)
    acc = _conv_sum(desc, x)
    k = acc.shape[1]
    if x["bias_tensor"] is not None:
        acc = acc + x["bias_tensor"].astype(np.int64).reshape((1, k) + (1,) * (acc.ndim - 2))
    si = np.float32(np.ravel(x["input_scale_tensor"])[0])
    sf = _param(x["filter_scale_tensor"], k, acc.ndim, 1)
    so = np.float32(np.ravel(x["output_scale_tensor"])[0])
    out = _name(desc.output_tensor)
    zo = x["output_zero_point_tensor"]
    zo = 0 if zo is None else int(read(zo, out).ravel()[0])
    q = np.empty(acc.shape, held_dtype(out))
    for idx in np.ndindex(acc.shape):
        real = np.float32(np.int32(acc[idx])) * (si * np.float32(sf[idx[1]]))
        q[idx] = quantize_values(real, so, zo, out)
    return (q,)


# ---------------------------------------------------------------------------------------------
# QUANTIZED_LINEAR_AVERAGE_POOLING


def quantized_linear_average_pooling(desc: Any, *arrays):
    x = _by_field(desc, arrays)
    q = x["input_tensor"]
    it, out = _name(desc.input_tensor), _name(desc.output_tensor)
    n, c, *spatial = q.shape
    spatial = tuple(spatial)
    dilations, outputs = _geometry(desc, spatial)
    si = _param(x["input_scale_tensor"], c, q.ndim, 1)
    zi = _param(x["input_zero_point_tensor"], c, q.ndim, 1)
    so = _param(x["output_scale_tensor"], c, q.ndim, 1)
    zo = _param(x["output_zero_point_tensor"], c, q.ndim, 1)
    values = read(q, it)
    result = np.empty((n, c, *outputs), held_dtype(out))
    for b, ch in itertools.product(range(n), range(c)):
        zero_in = 0 if zi is None else int(read(zi, it)[ch])
        zero_out = 0 if zo is None else int(read(zo, out)[ch])
        for o in itertools.product(*(range(k) for k in outputs)):
            points = _window(desc, dilations, spatial, o)
            inside = [p for p in points if p is not None]
            total = sum(int(values[(b, ch, *p)]) - zero_in for p in inside)
            divisor = len(points) if desc.include_padding else max(len(inside), 1)
            real = np.float32(total) * np.float32(si[ch]) / np.float32(divisor)
            result[(b, ch, *o)] = quantize_values(real, np.float32(so[ch]), zero_out, out)
    return (result,)


REFERENCES = {
    "DML_OPERATOR_ELEMENT_WISE_QUANTIZE_LINEAR": quantize_linear,
    "DML_OPERATOR_ELEMENT_WISE_DEQUANTIZE_LINEAR": dequantize_linear,
    "DML_OPERATOR_QUANTIZE": quantize,
    "DML_OPERATOR_DEQUANTIZE": dequantize,
    "DML_OPERATOR_DYNAMIC_QUANTIZE_LINEAR": dynamic_quantize_linear,
    "DML_OPERATOR_ELEMENT_WISE_QUANTIZED_LINEAR_ADD": quantized_linear_add,
    "DML_OPERATOR_MATRIX_MULTIPLY_INTEGER": matrix_multiply_integer,
    "DML_OPERATOR_MATRIX_MULTIPLY_INTEGER_TO_FLOAT": matrix_multiply_integer_to_float,
    "DML_OPERATOR_QUANTIZED_LINEAR_MATRIX_MULTIPLY": quantized_linear_matrix_multiply,
    "DML_OPERATOR_CONVOLUTION_INTEGER": convolution_integer,
    "DML_OPERATOR_QUANTIZED_LINEAR_CONVOLUTION": quantized_linear_convolution,
    "DML_OPERATOR_QUANTIZED_LINEAR_AVERAGE_POOLING": quantized_linear_average_pooling,
}
