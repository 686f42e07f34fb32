"""Bench cases of the operators of ``dml_jax.ops.depth_space``."""

from __future__ import annotations

import jax.numpy as jnp

from dml_jax.bench.catalog import BenchCase, register_cases
from dml_jax.ops.depth_space import DepthToSpace1OperatorDesc, SpaceToDepth1OperatorDesc
from dml_jax.tensor import TensorDesc


def _jnp_d2s(crd: bool):
    def d2s(x):
        n, c, h, w = x.shape
        if crd:
            y = x.reshape(n, c // 4, 2, 2, h, w).transpose(0, 1, 4, 2, 5, 3)
        else:
            y = x.reshape(n, 2, 2, c // 4, h, w).transpose(0, 3, 4, 1, 5, 2)
        return jnp.reshape(y, (n, c // 4, h * 2, w * 2))

    return d2s


def _torch_d2s(crd: bool):
    def d2s(torch, x):
        if crd:
            return torch.nn.functional.pixel_shuffle(x, 2)
        n, c, h, w = x.shape
        y = x.reshape(n, 2, 2, c // 4, h, w).permute(0, 3, 4, 1, 5, 2)
        return y.reshape(n, c // 4, h * 2, w * 2)

    return d2s


def _jnp_s2d(crd: bool):
    def s2d(x):
        n, c, h, w = x.shape
        perm = (0, 1, 3, 5, 2, 4) if crd else (0, 3, 5, 1, 2, 4)
        y = x.reshape(n, c, h // 2, 2, w // 2, 2).transpose(perm)
        return jnp.reshape(y, (n, c * 4, h // 2, w // 2))

    return s2d


def _bench_d2s(shape: tuple, dtype: str, full: bool) -> list[BenchCase]:
    n, c, h, w = shape
    x = TensorDesc(dtype.upper(), shape)
    out = x.like(sizes=(n, c // 4, h * 2, w * 2))
    orders = ("DEPTH_COLUMN_ROW", "COLUMN_ROW_DEPTH") if full else ("DEPTH_COLUMN_ROW",)
    return [
        BenchCase(
            f"DEPTH_TO_SPACE1 block 2 {'CRD' if crd else 'DCR'}",
            DepthToSpace1OperatorDesc(x, out, block_size=2, order=order),
            jnp=_jnp_d2s(crd),
            torch=_torch_d2s(crd),
        )
        for order in orders
        for crd in (order == "COLUMN_ROW_DEPTH",)
    ]


def _bench_s2d(shape: tuple, dtype: str, full: bool) -> list[BenchCase]:
    if not full:
        return []
    n, c, h, w = shape
    x = TensorDesc(dtype.upper(), shape)
    out = x.like(sizes=(n, c * 4, h // 2, w // 2))
    return [
        BenchCase(
            "SPACE_TO_DEPTH1 block 2 DCR",
            SpaceToDepth1OperatorDesc(x, out, block_size=2, order="DEPTH_COLUMN_ROW"),
            jnp=_jnp_s2d(crd=False),
        ),
        BenchCase(
            "SPACE_TO_DEPTH1 block 2 CRD",
            SpaceToDepth1OperatorDesc(x, out, block_size=2, order="COLUMN_ROW_DEPTH"),
            jnp=_jnp_s2d(crd=True),
            torch=lambda torch, x: torch.nn.functional.pixel_unshuffle(x, 2),
            notes="torch: pixel_unshuffle (CRD order)",
        ),
    ]


_BENCH = {DepthToSpace1OperatorDesc: _bench_d2s, SpaceToDepth1OperatorDesc: _bench_s2d}


for _cls, _cases in _BENCH.items():
    register_cases(_cls, _cases)
