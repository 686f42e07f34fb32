"""Bench cases of the operators of ``dml_jax.ops.split_join``."""

from __future__ import annotations

import jax.numpy as jnp

from dml_jax.bench.catalog import BenchCase, register_cases
from dml_jax.ops.split_join import JoinOperatorDesc, SplitOperatorDesc
from dml_jax.tensor import TensorDesc


def _halves(shape: tuple, dtype: str) -> tuple[TensorDesc, TensorDesc]:
    n, c, h, w = shape
    whole = TensorDesc(dtype.upper(), shape)
    return whole, whole.like(sizes=(n, c, h // 2, w))


def _bench_split(shape: tuple, dtype: str, full: bool) -> list[BenchCase]:
    whole, half = _halves(shape, dtype)
    return [
        BenchCase(
            "SPLIT axis 2",
            SplitOperatorDesc(whole, [half, half], axis=2),
            jnp=lambda x: tuple(jnp.split(x, 2, axis=2)),
            torch=lambda torch, x: [t.contiguous() for t in torch.split(x, shape[2] // 2, dim=2)],
        )
    ]


def _bench_join(shape: tuple, dtype: str, full: bool) -> list[BenchCase]:
    whole, half = _halves(shape, dtype)
    return [
        BenchCase(
            "JOIN axis 2",
            JoinOperatorDesc([half, half], whole, axis=2),
            jnp=lambda a, b: jnp.concatenate([a, b], axis=2),
            torch=lambda torch, a, b: torch.cat([a, b], dim=2),
        )
    ]


register_cases(SplitOperatorDesc, _bench_split)
register_cases(JoinOperatorDesc, _bench_join)
