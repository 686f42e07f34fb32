"""NumPy-only reference semantics, written from DirectML's documentation, one module per group.

This module holds the data-movement, CLIP and reduction references (the first fourteen
operators); every other module of this package holds a group's and exports ``REFERENCES``, a dict
from operator type to function, merged here. The rules of the first fourteen follow.

Each function takes the operator description (reading its fields) and NumPy arrays in schema order
and returns a tuple of NumPy arrays, one per output tensor. Nothing here imports ``dml_jax.ops`` or
follows the lowering: data movement uses the spec's index maps, ARGMIN/ARGMAX scan the reduced
elements one by one, CLIP converts its bounds with its own rules (seed 002 and NOTES.md 4.5-4.7).

``reference(desc, *arrays)`` dispatches on ``desc.operator_type``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

# ---------------------------------------------------------------------------------------------
# SPLIT / JOIN: output i takes indices [off_i, off_i + size_i) along Axis (NOTES 4.1, 4.2).


def _axis_slice(rank: int, axis: int, start: int, stop: int) -> tuple:
    return tuple(slice(start, stop) if d == axis else slice(None) for d in range(rank))


def split(desc: Any, x: np.ndarray) -> tuple[np.ndarray, ...]:
    outputs, offset = [], 0
    for t in desc.output_tensors:
        size = t.sizes[desc.axis]
        outputs.append(x[_axis_slice(x.ndim, desc.axis, offset, offset + size)].copy())
        offset += size
    return tuple(outputs)


def join(desc: Any, *xs: np.ndarray) -> tuple[np.ndarray, ...]:
    out = np.empty(desc.output_tensor.sizes, dtype=xs[0].dtype)
    offset = 0
    for x in xs:
        size = x.shape[desc.axis]
        out[_axis_slice(out.ndim, desc.axis, offset, offset + size)] = x
        offset += size
    assert offset == out.shape[desc.axis]
    return (out,)


# ---------------------------------------------------------------------------------------------
# DEPTH_TO_SPACE(1) / SPACE_TO_DEPTH(1), from the index maps (NOTES 4.3, 4.4):
#   DCR: out[n, c, h*B + i, w*B + j] = in[n, (i*B + j)*C' + c, h, w]
#   CRD: out[n, c, h*B + i, w*B + j] = in[n, c*B*B + i*B + j, h, w]


def _order_name(desc: Any) -> str:
    order = getattr(desc, "order", None)
    return "DEPTH_COLUMN_ROW" if order is None else order.name


def _depth_channel(order: str, b: int, c_space: int, c: int, i: int, j: int) -> int:
    """The depth-side channel that holds space-side channel ``c`` at block position (i, j)."""
    if order == "DEPTH_COLUMN_ROW":
        return (i * b + j) * c_space + c
    return c * b * b + i * b + j


def depth_to_space(desc: Any, x: np.ndarray) -> tuple[np.ndarray, ...]:
    n, c_depth, h, w = x.shape
    b = desc.block_size
    c_space = c_depth // (b * b)
    out = np.empty((n, c_space, h * b, w * b), dtype=x.dtype)
    order = _order_name(desc)
    for c in range(c_space):
        for i in range(b):
            for j in range(b):
                # Every (h, w) at once: rows h*B + i, columns w*B + j.
                out[:, c, i::b, j::b] = x[:, _depth_channel(order, b, c_space, c, i, j), :, :]
    return (out,)


def space_to_depth(desc: Any, x: np.ndarray) -> tuple[np.ndarray, ...]:
    n, c_space, h, w = x.shape
    b = desc.block_size
    out = np.empty((n, c_space * b * b, h // b, w // b), dtype=x.dtype)
    order = _order_name(desc)
    for c in range(c_space):
        for i in range(b):
            for j in range(b):
                out[:, _depth_channel(order, b, c_space, c, i, j), :, :] = x[:, c, i::b, j::b]
    return (out,)


# ---------------------------------------------------------------------------------------------
# TILE: out[idx] = in[idx mod InputTensor.Sizes] (NOTES 4.8, seed 003).


def tile(desc: Any, x: np.ndarray) -> tuple[np.ndarray, ...]:
    index = [np.arange(s * r) % s for s, r in zip(x.shape, desc.repeats)]
    return (x[np.ix_(*index)],)


# ---------------------------------------------------------------------------------------------
# CLIP family: y = max(Min, min(g(x), Max)) (seed 002), CLIP_GRAD: g where Min < x < Max.


def clip_float_bound(value: float, type_name: str) -> np.generic:
    """CLIP's FLOAT Min/Max in the tensor type (seed 002 remarks, NOTES 4.5).

    The value is a DML FLOAT (float32). Integer types truncate toward zero, FLOAT16 rounds to
    nearest even; values beyond the type's range saturate to its extremes.
    """
    dtype = np.dtype(type_name.lower())
    with np.errstate(over="ignore"):
        f32 = float(np.float32(value))
    if dtype == np.float32:
        return np.float32(f32)
    if dtype.kind == "f":
        biggest = float(np.finfo(dtype).max)
        if math.isfinite(f32) and abs(f32) > biggest:
            return dtype.type(math.copysign(biggest, f32))
        return dtype.type(f32)  # NumPy's float conversion rounds to nearest even
    info = np.iinfo(dtype)
    if math.isinf(f32):
        return dtype.type(info.max if f32 > 0 else info.min)
    whole = math.trunc(f32)
    return dtype.type(min(max(whole, int(info.min)), int(info.max)))


def clip1_bound(value: float, type_name: str) -> np.generic:
    """CLIP1's DML_SCALAR_UNION Min/Max: the value as written in MinMaxDataType, no truncation."""
    dtype = np.dtype(type_name.lower())
    if dtype.kind != "f":
        assert float(value) == int(value)
        return dtype.type(int(value))
    return dtype.type(value)


def _bounds(desc: Any, tensor_type: str) -> tuple[np.generic, np.generic]:
    if desc.operator_type.endswith("1"):
        typed = desc.min_max_data_type.name if desc.min_max_data_type else tensor_type
        return clip1_bound(desc.min, typed), clip1_bound(desc.max, typed)
    return clip_float_bound(desc.min, tensor_type), clip_float_bound(desc.max, tensor_type)


def scale_bias(x: np.ndarray, sb: Any) -> np.ndarray:
    """g(x) = x * Scale + Bias; FLOAT16 is computed in float32 (DML's FLOAT) and rounded once."""
    if sb is None:
        return x
    work = np.float32 if x.dtype == np.float16 else x.dtype.type
    wide = x.astype(work)
    return (wide * work(sb.scale) + work(sb.bias)).astype(x.dtype)


def clip(desc: Any, x: np.ndarray) -> tuple[np.ndarray, ...]:
    lo, hi = _bounds(desc, desc.output_tensor.data_type.name)
    g = scale_bias(x, desc.scale_bias)
    with np.errstate(invalid="ignore"):
        out = np.maximum(lo, np.minimum(g, hi)).astype(x.dtype)
    return (out,)


def clip_grad(desc: Any, x: np.ndarray, grad: np.ndarray) -> tuple[np.ndarray, ...]:
    lo, hi = _bounds(desc, desc.output_gradient_tensor.data_type.name)
    out = np.zeros_like(grad)
    for idx in np.ndindex(x.shape):
        if lo < x[idx] < hi:  # strict interior; NaN compares false and gets 0
            out[idx] = grad[idx]
    return (out,)


# ---------------------------------------------------------------------------------------------
# REDUCE (NOTES 3, 4.9, 7): rank kept, FLOAT16 accumulated in float32, integers wrap around.


def _accumulate_dtype(dtype: np.dtype) -> np.dtype:
    return np.dtype(np.float32) if dtype == np.float16 else dtype


def _reduce_values(function: str, x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """One formula per DML_REDUCE_FUNCTION (NOTES section 3), keepdims."""
    acc = _accumulate_dtype(x.dtype)
    a = x.astype(acc)
    n = math.prod(x.shape[i] for i in axes)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        if function == "MAX":
            return np.max(x, axis=axes, keepdims=True)
        if function == "MIN":
            return np.min(x, axis=axes, keepdims=True)
        if function == "SUM":
            r = np.sum(a, axis=axes, keepdims=True, dtype=acc)
        elif function == "MULTIPLY":
            r = np.prod(a, axis=axes, keepdims=True, dtype=acc)
        elif function == "SUM_SQUARE":
            r = np.sum(a * a, axis=axes, keepdims=True, dtype=acc)
        elif function == "L1":
            mag = a if acc.kind == "u" else np.abs(a)
            r = np.sum(mag, axis=axes, keepdims=True, dtype=acc)
        elif function == "L2":
            r = np.sqrt(np.sum(a * a, axis=axes, keepdims=True, dtype=acc))
        elif function == "AVERAGE":
            r = np.sum(a, axis=axes, keepdims=True, dtype=acc) / acc.type(n)
        elif function == "LOG_SUM":
            r = np.log(np.sum(a, axis=axes, keepdims=True, dtype=acc))
        elif function == "LOG_SUM_EXP":
            # The documented naive formula; the property tests keep inputs small enough for it.
            r = np.log(np.sum(np.exp(a), axis=axes, keepdims=True, dtype=acc))
        else:
            raise ValueError(function)
        return r.astype(x.dtype)


def _is_nan(v: Any) -> bool:
    return isinstance(v, float) and math.isnan(v)


def arg_extreme(
    x: np.ndarray, axes: tuple[int, ...], largest: bool, last: bool, out_dtype: np.dtype
) -> np.ndarray:
    """ARGMIN/ARGMAX by scanning each reduced block in row-major order (NOTES 4.10, 7.2-7.3).

    The reported index counts the reduced elements with the reduced axes taken in increasing
    dimension order, the last one fastest. A tie keeps the first position (INCREASING) or moves to
    the later one (DECREASING). NaN counts as the extreme (dml_jax's documented convention).
    """
    axes = tuple(sorted(axes))
    out_shape = tuple(1 if d in axes else s for d, s in enumerate(x.shape))
    out = np.zeros(out_shape, dtype=out_dtype)
    reduced_shape = tuple(x.shape[d] for d in axes)
    for out_idx in np.ndindex(out_shape):
        best_value, best_pos = None, None
        for pos, red_idx in enumerate(np.ndindex(reduced_shape)):
            full = list(out_idx)
            for d, i in zip(axes, red_idx):
                full[d] = i
            v = x[tuple(full)].item()
            if best_pos is None:
                take = True
            elif _is_nan(best_value):
                take = last and _is_nan(v)
            elif _is_nan(v):
                take = True
            elif v == best_value:
                take = last
            else:
                take = v > best_value if largest else v < best_value
            if take:
                best_value, best_pos = v, pos
        out[out_idx] = best_pos
    return out


def reduce(desc: Any, x: np.ndarray) -> tuple[np.ndarray, ...]:
    function = desc.function.name
    axes = tuple(sorted(desc.axes))
    if function in ("ARGMAX", "ARGMIN"):
        last = getattr(desc, "axis_direction", None)
        last = last is not None and last.name == "DECREASING"
        return (arg_extreme(x, axes, function == "ARGMAX", last, desc.output_tensor.dtype),)
    return (_reduce_values(function, x, axes),)


# ---------------------------------------------------------------------------------------------

_BY_TYPE: dict[str, Callable[..., tuple]] = {
    "DML_OPERATOR_SPLIT": split,
    "DML_OPERATOR_JOIN": join,
    "DML_OPERATOR_DEPTH_TO_SPACE": depth_to_space,
    "DML_OPERATOR_DEPTH_TO_SPACE1": depth_to_space,
    "DML_OPERATOR_SPACE_TO_DEPTH": space_to_depth,
    "DML_OPERATOR_SPACE_TO_DEPTH1": space_to_depth,
    "DML_OPERATOR_TILE": tile,
    "DML_OPERATOR_ELEMENT_WISE_CLIP": clip,
    "DML_OPERATOR_ELEMENT_WISE_CLIP1": clip,
    "DML_OPERATOR_ELEMENT_WISE_CLIP_GRAD": clip_grad,
    "DML_OPERATOR_ELEMENT_WISE_CLIP_GRAD1": clip_grad,
    "DML_OPERATOR_REDUCE": reduce,
    "DML_OPERATOR_ARGMIN": reduce,
    "DML_OPERATOR_ARGMAX": reduce,
}


def _load_groups() -> None:
    import importlib
    import pkgutil

    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for name, fn in module.REFERENCES.items():
            if name in _BY_TYPE:
                raise ValueError(f"two references for {name}")
            _BY_TYPE[name] = fn


_load_groups()


def reference(desc: Any, *arrays: Any) -> tuple[np.ndarray, ...]:
    """The reference result of ``desc`` on ``arrays`` (NumPy arrays in schema order)."""
    return _BY_TYPE[desc.operator_type](desc, *(np.asarray(a) for a in arrays))
