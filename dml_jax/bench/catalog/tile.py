"""Bench cases of the operators of ``dml_jax.ops.tile``."""

from __future__ import annotations

import jax.numpy as jnp

from dml_jax.bench.catalog import BenchCase, register_cases
from dml_jax.ops.tile import TileOperatorDesc
from dml_jax.tensor import TensorDesc


def _bench(shape: tuple, dtype: str, full: bool) -> list[BenchCase]:
    n, c, h, w = shape
    out = TensorDesc(dtype.upper(), shape)
    x = out.like(sizes=(n, c, h // 2, w // 2))
    return [
        BenchCase(
            "TILE 1,1,2,2",
            TileOperatorDesc(x, out, repeats=[1, 1, 2, 2]),
            jnp=lambda x: jnp.tile(x, (1, 1, 2, 2)),
            torch=lambda torch, x: x.repeat(1, 1, 2, 2),
        )
    ]


register_cases(TileOperatorDesc, _bench)
