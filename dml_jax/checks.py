"""Checks every compiled callable shares (operators, graphs, buffer mode): the feature level
argument, JAX's 64-bit mode, and logical-mode input arrays against their tensor descs."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .enums import NEWEST_FEATURE_LEVEL, FeatureLevel
from .errors import ValidationError
from .tensor import TensorDesc


def feature_level_of(feature_level: Any) -> FeatureLevel:
    """A ``feature_level`` argument as a ``FeatureLevel``: None means the newest."""
    if feature_level is None:
        return NEWEST_FEATURE_LEVEL
    return FeatureLevel.parse(feature_level, "feature_level")


def _x64_enabled() -> bool:
    return bool(jax.config.read("jax_enable_x64"))


def check_x64(descs: Iterable[tuple[str, TensorDesc | None]], owner: str) -> None:
    """Rejects a 64-bit tensor while JAX's x64 mode is off, saying how to switch it on.

    Args:
        descs: ``(path, desc)`` pairs; a None desc (an unused graph input) is skipped.
        owner: the operator type or ``DML_GRAPH``, first in the message.
    """
    if _x64_enabled():
        return
    for path, t in descs:
        if t is not None and t.data_type.is_64bit:
            raise ValidationError(
                f"{owner}: {path} has data type {t.data_type.name}, which JAX computes only in "
                "64-bit mode; enable it with jax.config.update('jax_enable_x64', True) (or "
                "JAX_ENABLE_X64=1) before compiling"
            )


def as_input(x: Any, path: str, t: TensorDesc | None, owner: str) -> Any:
    """One logical-mode input: an array of ``t``'s shape and dtype (lists and scalars are
    converted when nothing is lost), else a ``ValidationError`` naming ``path``.

    A None desc (a graph input that feeds no node) gives None: whatever was passed for it is
    dropped (None is an empty pytree to jit), so it neither reaches the program nor re-traces.
    """
    if t is None:
        return None
    if not (hasattr(x, "shape") and hasattr(x, "dtype")):
        x = _from_python(x, path, t, owner)
    if tuple(x.shape) != t.sizes:
        raise ValidationError(
            f"{owner}: {path} expects an array of shape {t.sizes} (its Sizes), got {tuple(x.shape)}"
        )
    if np.dtype(x.dtype) != t.dtype:
        raise ValidationError(
            f"{owner}: {path} expects dtype {t.dtype.name} (DataType {t.data_type.name}), "
            f"got {np.dtype(x.dtype).name}"
        )
    return x


def _from_python(x: Any, path: str, t: TensorDesc, owner: str):
    """Lists and scalars: converted to the tensor's dtype when that loses nothing."""
    try:
        arr = np.asarray(x)
    except (TypeError, ValueError) as e:
        raise ValidationError(f"{owner}: {path} is not an array: {e}") from None
    ok = arr.dtype.kind in "iu" or (arr.dtype.kind == "f" and t.data_type.is_float)
    if ok:
        cast = arr.astype(t.dtype)
        ok = t.data_type.is_float or np.array_equal(cast.astype(arr.dtype), arr)
    if not ok:
        raise ValidationError(
            f"{owner}: {path} expects {t.dtype.name} values, got {arr.dtype.name} data that "
            "does not convert exactly"
        )
    return jnp.asarray(cast)
