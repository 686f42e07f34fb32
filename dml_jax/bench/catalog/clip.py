"""Bench cases of the operators of ``dml_jax.ops.clip``."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from dml_jax.bench.catalog import BenchCase, register_cases
from dml_jax.ops.clip import (
    ElementWiseClip1OperatorDesc,
    ElementWiseClipGrad1OperatorDesc,
    ElementWiseClipOperatorDesc,
)
from dml_jax.tensor import TensorDesc


def _bounds_for(dtype: str) -> tuple:
    return (-0.5, 0.5) if np.dtype(dtype).kind == "f" else (10, 60)


def _bench_clip(cls: type, label: str):
    def cases(shape: tuple, dtype: str, full: bool) -> list[BenchCase]:
        if cls is ElementWiseClipOperatorDesc and not full:
            return []
        lo, hi = _bounds_for(dtype)
        t = TensorDesc(dtype.upper(), shape)
        return [
            BenchCase(
                label,
                cls(t, t, min=lo, max=hi),
                jnp=lambda x: jnp.clip(x, lo, hi),
                torch=lambda torch, x: torch.clamp(x, lo, hi),
            )
        ]

    return cases


def _bench_clip_grad(shape: tuple, dtype: str, full: bool) -> list[BenchCase]:
    if not full:
        return []
    lo, hi = _bounds_for(dtype)
    t = TensorDesc(dtype.upper(), shape)
    return [
        BenchCase(
            "CLIP_GRAD",
            ElementWiseClipGrad1OperatorDesc(t, t, t, min=lo, max=hi),
            jnp=lambda x, g: jnp.where((x >= lo) & (x <= hi), g, jnp.zeros_like(g)),
            torch=lambda torch, x, g: torch.where((x >= lo) & (x <= hi), g, torch.zeros_like(g)),
        )
    ]


register_cases(ElementWiseClipOperatorDesc, _bench_clip(ElementWiseClipOperatorDesc, "CLIP (v1)"))
register_cases(ElementWiseClip1OperatorDesc, _bench_clip(ElementWiseClip1OperatorDesc, "CLIP"))
register_cases(ElementWiseClipGrad1OperatorDesc, _bench_clip_grad)
