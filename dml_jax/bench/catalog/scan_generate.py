"""Bench cases of the operators of ``dml_jax.ops.scan_generate``."""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from dml_jax.bench.catalog import BenchCase, register_cases
from dml_jax.ops.scan_generate import (
    CumulativeProductOperatorDesc,
    CumulativeSummationOperatorDesc,
    DiagonalMatrix1OperatorDesc,
    FillValueConstantOperatorDesc,
    FillValueSequenceOperatorDesc,
)
from dml_jax.tensor import TensorDesc


def _bench_scan(cls: type, label: str, flag: str):
    def cases(shape: tuple, dtype: str, full: bool) -> list[BenchCase]:
        if np.dtype(dtype).kind != "f":
            return []
        x = TensorDesc(dtype.upper(), shape)
        out = []
        for axis in (len(shape) - 1, 1):
            desc = cls(x, x, axis=axis, axis_direction="INCREASING", **{flag: False})
            out.append(
                BenchCase(
                    f"{label} axis {axis}",
                    desc,
                    jnp=lambda a, axis=axis, f=label: (
                        jnp.cumsum(a, axis) if "SUM" in f else jnp.cumprod(a, axis)
                    ),
                    torch=lambda torch, a, axis=axis, f=label: (
                        torch.cumsum(a, axis) if "SUM" in f else torch.cumprod(a, axis)
                    ),
                )
            )
        return out

    return cases


def _bench_fill(shape: tuple, dtype: str, full: bool) -> list[BenchCase]:
    out = TensorDesc(dtype.upper(), shape)
    kind = np.dtype(dtype).kind
    value, start, delta = (1.5, 0.5, 0.25) if kind == "f" else (7, 3, 2)
    return [
        BenchCase(
            "FILL_VALUE_CONSTANT",
            FillValueConstantOperatorDesc(out, dtype.upper(), value),
            jnp=lambda: jnp.full(shape, value, dtype),
            torch=lambda torch: torch.full(
                shape, value, dtype=getattr(torch, dtype), device="cuda"
            ),
        ),
        BenchCase(
            "FILL_VALUE_SEQUENCE",
            FillValueSequenceOperatorDesc(out, dtype.upper(), start, delta),
            jnp=lambda: (jnp.arange(math.prod(shape), dtype=dtype) * delta + start).reshape(shape),
            torch=lambda torch: (
                torch.arange(math.prod(shape), dtype=getattr(torch, dtype), device="cuda") * delta
                + start
            ).reshape(shape),
        ),
    ]


def _bench_diagonal(shape: tuple, dtype: str, full: bool) -> list[BenchCase]:
    if np.dtype(dtype).kind != "f":
        return []
    x = TensorDesc(dtype.upper(), shape)
    return [
        BenchCase(
            "DIAGONAL_MATRIX1 triu (input kept above the diagonal)",
            DiagonalMatrix1OperatorDesc(x, x, dtype.upper(), 0, -(2**31), 0),
            jnp=lambda a: jnp.triu(a),
            torch=lambda torch, a: torch.triu(a),
        )
    ]


register_cases(
    CumulativeSummationOperatorDesc,
    _bench_scan(CumulativeSummationOperatorDesc, "CUMULATIVE_SUMMATION", "has_exclusive_sum"),
)
register_cases(
    CumulativeProductOperatorDesc,
    _bench_scan(CumulativeProductOperatorDesc, "CUMULATIVE_PRODUCT", "has_exclusive_product"),
)
register_cases(FillValueConstantOperatorDesc, _bench_fill)
register_cases(DiagonalMatrix1OperatorDesc, _bench_diagonal)
