"""Bench cases of the operators of ``dml_jax.ops.topk``."""

from __future__ import annotations

import math

from jax import lax

from dml_jax.bench.catalog import BenchCase, register_cases
from dml_jax.ops.topk import TopK1OperatorDesc, TopKOperatorDesc
from dml_jax.tensor import TensorDesc


def _bench(cls: type):
    def cases(shape: tuple, dtype: str, full: bool) -> list[BenchCase]:
        if cls is TopK1OperatorDesc and not full:
            return []
        # Rows of 1024 (the decoding / beam-search shape): the 4-D shape's elements regrouped.
        n_el, k = math.prod(shape), 8
        row = 1024 if n_el % 1024 == 0 else shape[-1]
        x = TensorDesc(dtype.upper(), (n_el // row, row))
        values = x.like(sizes=(n_el // row, k))
        index = values.like(data_type="UINT32")
        if cls is TopKOperatorDesc:
            return [
                BenchCase(
                    f"TOP_K k={k} rows of {row}",
                    cls(x, values, index, axis=1, k=k),
                    jnp=lambda a: tuple(lax.top_k(a, k)),
                    torch=lambda torch, a: torch.topk(a, k, dim=-1),
                )
            ]

        def smallest(a):  # negation reverses the order of floats (not of unsigned integers)
            v, i = lax.top_k(-a, k)
            return -v, i

        return [
            BenchCase(
                f"TOP_K1 INCREASING k={k} rows of {row}",
                cls(x, values, index, axis=1, k=k, axis_direction="INCREASING"),
                jnp=smallest if x.data_type.is_float else None,
                torch=lambda torch, a: torch.topk(a, k, dim=-1, largest=False),
            )
        ]

    return cases


register_cases(TopKOperatorDesc, _bench(TopKOperatorDesc))
register_cases(TopK1OperatorDesc, _bench(TopK1OperatorDesc))
