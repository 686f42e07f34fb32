"""Bench cases of the operators of ``dml_jax.ops.indexing`` and ``dml_jax.ops.scatter``."""

from __future__ import annotations

import jax.numpy as jnp

from dml_jax.bench.catalog import BenchCase, register_cases
from dml_jax.ops.indexing import GatherElementsOperatorDesc, GatherOperatorDesc
from dml_jax.ops.scatter import (
    OneHotOperatorDesc,
    ScatterNdOperatorDesc,
    ScatterOperatorDesc,
)
from dml_jax.tensor import TensorDesc


def _bench_rows(shape: tuple) -> tuple[int, int]:
    n, c, h, w = shape
    return n * c * h, w


def _bench_gather(shape: tuple, dtype: str, full: bool) -> list[BenchCase]:
    rows_, width = _bench_rows(shape)
    x = TensorDesc(dtype.upper(), (rows_, width))
    at = TensorDesc("INT32", (1, rows_))

    def torch_rows(torch, a, i):
        i = i.reshape(-1).long()
        return a[torch.where(i < 0, i + a.shape[0], i)]

    return [
        BenchCase(
            "GATHER rows (axis 0)",
            GatherOperatorDesc(x, at, x, axis=0, index_dimensions=1),
            jnp=lambda a, i: jnp.take(a, i.reshape(-1), axis=0, mode="fill", fill_value=0),
            torch=torch_rows,
            notes="bench indices are random in [-100, 100): few distinct rows are read",
        )
    ]


def _bench_gather_elements(shape: tuple, dtype: str, full: bool) -> list[BenchCase]:
    x = TensorDesc(dtype.upper(), shape)
    at = TensorDesc("INT32", shape)
    return [
        BenchCase(
            "GATHER_ELEMENTS axis 3",
            GatherElementsOperatorDesc(x, at, x, axis=3),
            jnp=lambda a, i: jnp.take_along_axis(a, i, axis=3, mode="fill", fill_value=0),
            torch=lambda torch, a, i: torch.gather(a, 3, i.long().remainder(a.shape[3])),
            notes="torch wraps out-of-range indices instead of reading 0 (timing only)",
        )
    ]


def _bench_scatter(shape: tuple, dtype: str, full: bool) -> list[BenchCase]:
    n, c, h, w = shape
    x = TensorDesc(dtype.upper(), shape)
    half = TensorDesc(dtype.upper(), (n, c, h, w // 2))
    at = TensorDesc("INT32", (n, c, h, w // 2))

    def jnp_elements(a, i, u):
        # put_along_axis lets an arbitrary duplicate win; the last one (row-major) wins here
        # too: positions scattered with max, then the winners taken.
        i = jnp.where(i < 0, i + w, i)
        i = jnp.where(i < 0, w, i)  # still negative: out of range (jnp would wrap it again)
        at = jnp.arange(u.size).reshape(u.shape)
        win = jnp.full(a.shape, -1).at[tuple(jnp.indices(i.shape)[:3]) + (i,)].max(at, mode="drop")
        return jnp.where(win >= 0, u.reshape(-1)[jnp.maximum(win, 0)], a)

    return [
        BenchCase(
            "SCATTER axis 3 (half the elements updated)",
            ScatterOperatorDesc(x, at, half, x, axis=3),
            jnp=jnp_elements,
            torch=lambda torch, a, i, u: a.scatter(3, i.long().remainder(w), u),
            notes="torch wraps out-of-range indices instead of dropping them (timing only)",
        )
    ]


def _bench_scatter_nd(shape: tuple, dtype: str, full: bool) -> list[BenchCase]:
    rows_, width = _bench_rows(shape)
    x = TensorDesc(dtype.upper(), (rows_, width))
    half = x.like(sizes=(rows_ // 2, width))
    at = TensorDesc("INT32", (rows_ // 2, 1))

    def jnp_rows(a, i, u):
        a, i, rows = jnp.asarray(a), i.reshape(-1), a.shape[0]
        i = jnp.where(i < 0, i + rows, i)
        return a.at[jnp.where(i < 0, rows, i)].set(u, mode="drop")

    def torch_rows(torch, a, i, u):
        i = i.reshape(-1).long()
        return a.index_copy(0, torch.where(i < 0, i + a.shape[0], i), u)

    return [
        BenchCase(
            "SCATTER_ND rows (half the rows updated)",
            ScatterNdOperatorDesc(
                x, at, half, x, input_dimension_count=2, indices_dimension_count=2
            ),
            jnp=jnp_rows,
            torch=torch_rows,
            notes="bench indices are random in [-100, 100): many repeat (last update wins)",
        )
    ]


def _bench_one_hot(shape: tuple, dtype: str, full: bool) -> list[BenchCase]:
    n, c, h, w = shape
    out = TensorDesc(dtype.upper(), shape)
    at = TensorDesc("INT32", (n, c, h, 1))
    values = TensorDesc(dtype.upper(), (1, 1, 1, 2))

    def jnp_one_hot(i, vals):
        i = jnp.where(i < 0, i + w, i)
        return jnp.where(jnp.arange(w) == i, vals[0, 0, 0, 1], vals[0, 0, 0, 0])

    def torch_one_hot(torch, i, vals):
        i = torch.where(i < 0, i + w, i)
        hot = torch.arange(w, device=i.device, dtype=i.dtype) == i
        return torch.where(hot, vals[0, 0, 0, 1], vals[0, 0, 0, 0])

    return [
        BenchCase(
            "ONE_HOT axis 3",
            OneHotOperatorDesc(at, values, out, axis=3),
            jnp=jnp_one_hot,
            torch=torch_one_hot,
        )
    ]


register_cases(GatherOperatorDesc, _bench_gather)
register_cases(GatherElementsOperatorDesc, _bench_gather_elements)
register_cases(ScatterOperatorDesc, _bench_scatter)
register_cases(ScatterNdOperatorDesc, _bench_scatter_nd)
register_cases(OneHotOperatorDesc, _bench_one_hot)
