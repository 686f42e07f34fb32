"""NumPy references of SLICE, SLICE1, PADDING, PADDING1, CAST and REVERSE_SUBSEQUENCES, from
DirectML's pages for their DML_*_OPERATOR_DESC structs (paraphrased) and docs/semantics.md where
the pages are silent.

- SLICE: ``Output[c] = Input[Offsets + Strides * c]`` element by element.
- SLICE1: the copy starts at the window's offset, or at its last element (offset + size - 1) in
  a dimension with a negative stride; ``Output[c] = Input[CopyStart + InputWindowStrides * c]``.
- PADDING(1): every output position maps to an input position per dimension (or to the
  constant): EDGE clamps; REFLECTION folds at the edge elements (period 2(n - 1)); SYMMETRIC
  folds beyond them (period 2n); WRAP repeats (period n). The PADDING FLOAT value is cast as
  CLIP casts its bounds (integers truncate toward zero and saturate), PADDING1's is exact.
- CAST: per element with Python numbers: float -> integer truncates toward zero, saturates,
  NaN -> 0; integer -> integer modulo 2**bits; integer -> float correctly rounded from the exact
  integer (ties to even, beyond the range -> infinity); float -> float by NumPy (one rounding).
- REVERSE_SUBSEQUENCES: along Axis, each line's first min(L, n) elements are written in reverse
  order; the rest are copied.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from . import clip_float_bound


def _name(member: Any) -> str:
    return getattr(member, "name", member)


def _take(x: np.ndarray, starts, steps, counts) -> np.ndarray:
    out = np.empty(tuple(counts), x.dtype)
    for c in itertools.product(*(range(n) for n in counts)):
        src = tuple(s + k * ci for s, k, ci in zip(starts, steps, c))
        assert all(0 <= i < n for i, n in zip(src, x.shape)), src
        out[c] = x[src]
    return out


def slice_(desc: Any, x: np.ndarray) -> tuple[np.ndarray, ...]:
    return (_take(x, desc.offsets, desc.strides, desc.sizes),)


def slice1(desc: Any, x: np.ndarray) -> tuple[np.ndarray, ...]:
    starts = [
        off + size - 1 if step < 0 else off
        for off, size, step in zip(
            desc.input_window_offsets, desc.input_window_sizes, desc.input_window_strides
        )
    ]
    return (_take(x, starts, desc.input_window_strides, desc.output_tensor.sizes),)


def _mirror(mode: str, n: int, i: int) -> int | None:
    """Input index for position i relative to the input start; None for the constant."""
    if 0 <= i < n:
        return i
    if mode == "CONSTANT":
        return None
    if mode == "EDGE":
        return 0 if i < 0 else n - 1
    if mode == "WRAP":
        return i % n
    # Walk the fold one step at a time: bounce off the ends (REFLECTION turns at the edge
    # element, SYMMETRIC repeats it first).
    pos, direction = 0 if i < 0 else n - 1, -1 if i < 0 else 1
    steps = -i if i < 0 else i - (n - 1)
    for _ in range(steps):
        if n == 1:
            break
        nxt = pos + direction
        if mode == "SYMMETRIC" and not 0 <= nxt < n:
            direction = -direction  # the edge element again, then inward
            continue
        if mode == "REFLECTION" and not 0 <= nxt < n:
            direction = -direction
            nxt = pos + direction
        pos = nxt
    return pos


def padding(desc: Any, x: np.ndarray) -> tuple[np.ndarray, ...]:
    mode = _name(desc.padding_mode)
    dtype = x.dtype
    if desc.operator_type.endswith("PADDING1"):
        value = dtype.type(desc.padding_value)
    else:
        value = clip_float_bound(desc.padding_value, dtype.name.upper())
    out_shape = tuple(s + a + b for s, a, b in zip(x.shape, desc.start_padding, desc.end_padding))
    out = np.empty(out_shape, dtype)
    for o in itertools.product(*(range(n) for n in out_shape)):
        src = [_mirror(mode, n, oi - a) for n, oi, a in zip(x.shape, o, desc.start_padding)]
        out[o] = value if any(s is None for s in src) else x[tuple(src)]
    return (out,)


def _round_int(n: int, dtype: np.dtype) -> Any:
    """The integer ``n`` rounded to nearest (ties to even) in a float type."""
    bits = {np.float16: 11, np.float32: 24, np.float64: 53}[dtype.type]
    m = abs(n)
    if m.bit_length() > bits:
        shift = m.bit_length() - bits
        q, r = divmod(m, 1 << shift)
        half = 1 << (shift - 1)
        if r > half or (r == half and q & 1):
            q += 1
        m = q << shift
    if m > float(np.finfo(dtype).max):
        return dtype.type(math.copysign(math.inf, n))
    return dtype.type(math.copysign(float(m), n) if n else 0.0)


def _float_to_int(v: float, dtype: np.dtype) -> int:
    info = np.iinfo(dtype)
    if math.isnan(v):
        return 0
    if math.isinf(v):
        return int(info.max if v > 0 else info.min)
    return min(max(math.trunc(v), int(info.min)), int(info.max))


def _wrap(n: int, dtype: np.dtype) -> int:
    bits = dtype.itemsize * 8
    n %= 2**bits
    if dtype.kind == "i" and n >= 2 ** (bits - 1):
        n -= 2**bits
    return n


def cast(desc: Any, x: np.ndarray) -> tuple[np.ndarray, ...]:
    dtype = np.dtype(desc.output_tensor.dtype)
    src = x.dtype
    if src.kind == "f" and dtype.kind == "f":
        with np.errstate(over="ignore"):
            return (x.astype(dtype),)
    out = np.empty(x.shape, dtype)
    for idx in np.ndindex(x.shape):
        v = x[idx].item()
        if src.kind == "f":
            out[idx] = _float_to_int(float(v), dtype)
        elif dtype.kind == "f":
            out[idx] = _round_int(int(v), dtype)
        else:
            out[idx] = _wrap(int(v), dtype)
    return (out,)


def reverse_subsequences(desc: Any, x: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, ...]:
    axis = desc.axis
    n = x.shape[axis]
    out = x.copy()
    rest = [range(s) for i, s in enumerate(x.shape) if i != axis]
    for index in itertools.product(*rest):
        at_len = index[:axis] + (0,) + index[axis:]
        length = min(int(lengths[at_len]), n)
        for k in range(length):
            dst = index[:axis] + (k,) + index[axis:]
            src = index[:axis] + (length - 1 - k,) + index[axis:]
            out[dst] = x[src]
    return (out,)


REFERENCES = {
    "DML_OPERATOR_SLICE": slice_,
    "DML_OPERATOR_SLICE1": slice1,
    "DML_OPERATOR_PADDING": padding,
    "DML_OPERATOR_PADDING1": padding,
    "DML_OPERATOR_CAST": cast,
    "DML_OPERATOR_REVERSE_SUBSEQUENCES": reverse_subsequences,
}
