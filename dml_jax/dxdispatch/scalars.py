"""Typed values: JSON numbers (and data type names) as scalars of a DML data type.

DxDispatch's conversions: FLOAT16 rounds toward zero, floats take "nan"/"inf"/"-inf",
integers must be in range, and sequences accumulate in the target type.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from ..enums import DataType
from ..errors import ValidationError
from .context import LoadContext

_DATA_TYPE_PREFIX = "DML_TENSOR_DATA_TYPE_"


def parse_data_type(ctx: LoadContext, value: Any, path: str) -> DataType | None:
    """A DML_TENSOR_DATA_TYPE name (full or short, exact case); UNKNOWN -> None."""
    if value in ("UNKNOWN", _DATA_TYPE_PREFIX + "UNKNOWN"):
        return None
    try:
        data_type = DataType.parse(ctx.string(value, path), path)
    except ValidationError:
        names = ", ".join(["UNKNOWN"] + [t.name for t in DataType])
        raise ctx.fail(
            path,
            f"unknown data type {json.dumps(value)}; expected one of {names} (or the "
            f"full name, e.g. {_DATA_TYPE_PREFIX}FLOAT32)",
        ) from None
    if data_type.bits < 8:
        raise ctx.fail(
            path,
            f"{data_type.name} resources are not supported by dml-jax run: give a 4-bit "
            "tensor's packed bytes (two elements a byte, element 0 in the low nibble) as a UINT8 "
            "resource and bind that",
        )
    return data_type


def float_to_half_truncated(value: float) -> np.float16:
    """DxDispatch's JSON -> FLOAT16 conversion: to float32, then to half rounding toward zero.

    DxDispatch converts through its half library's default rounding, which truncates; NumPy
    rounds to nearest even, so a result that NumPy rounded away from zero is stepped back one
    ulp toward zero. Overflow still gives infinity, as the library does.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        f32 = np.float32(value)
        half = np.float16(f32)
    if np.isfinite(half) and abs(float(half)) > abs(float(f32)):
        half = np.nextafter(half, np.float16(0))
    return np.float16(half)


_SPECIAL_FLOATS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def convert_scalar(ctx: LoadContext, value: Any, data_type: DataType, path: str) -> np.generic:
    """One JSON value as a scalar of ``data_type`` (DxDispatch's rules).

    Floating types take numbers or the strings "nan", "inf", "-inf" (any case); integer types
    take JSON integers within range (unsigned types reject negatives).
    """
    if data_type.is_float:
        if isinstance(value, str) and value.lower() in _SPECIAL_FLOATS:
            value = _SPECIAL_FLOATS[value.lower()]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ctx.fail(
                path,
                f'must be a number (or "nan", "inf", "-inf") for '
                f"{data_type.name}, got {json.dumps(value)}",
            )
        if data_type is DataType.FLOAT16:
            return float_to_half_truncated(value)
        with np.errstate(over="ignore"):
            return data_type.numpy_dtype.type(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ctx.fail(path, f"must be an integer for {data_type.name}, got {json.dumps(value)}")
    lo, hi = data_type.integer_range
    if not lo <= value <= hi:
        raise ctx.fail(path, f"{value} is out of range for {data_type.name} [{lo}, {hi}]")
    return data_type.numpy_dtype.type(value)


def _wrap_int(value: int, data_type: DataType) -> int:
    """Two's-complement wrap-around of an integer into ``data_type`` (sequence accumulation)."""
    bits = 8 * data_type.size
    value &= (1 << bits) - 1
    if data_type.is_signed and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


def sequence_values(
    start: np.generic, delta: np.generic, count: int, data_type: DataType
) -> np.ndarray:
    """start, start + delta, ... by repeated addition in the target type.

    FLOAT16 adds in float32 and converts each partial sum back to half the way JSON numbers
    are converted; integers wrap around.
    """
    values = np.empty(count, dtype=data_type.numpy_dtype)  # all memory first: fails at once
    if data_type.is_float:
        acc = start
        for i in range(count):
            values[i] = acc
            if data_type is DataType.FLOAT16:
                acc = float_to_half_truncated(np.float32(acc) + np.float32(delta))
            else:
                with np.errstate(over="ignore", invalid="ignore"):
                    acc = acc + delta
        return values
    acc = int(start)
    for i in range(count):
        values[i] = acc
        acc = _wrap_int(acc + int(delta), data_type)
    return values
