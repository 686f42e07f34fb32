"""Bench cases of the operators of ``dml_jax.ops.reduce``."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from dml_jax.bench.catalog import BenchCase, register_cases
from dml_jax.ops.reduce import (
    ArgMaxOperatorDesc,
    ArgMinOperatorDesc,
    ReduceOperatorDesc,
    reduced_sizes,
)
from dml_jax.tensor import TensorDesc

_JNP = {
    "ARGMAX": lambda x, a: jnp.argmax(x, axis=a, keepdims=True),
    "ARGMIN": lambda x, a: jnp.argmin(x, axis=a, keepdims=True),
    "AVERAGE": lambda x, a: jnp.mean(x, axis=a, keepdims=True),
    "L1": lambda x, a: jnp.sum(jnp.abs(x), axis=a, keepdims=True),
    "L2": lambda x, a: jnp.sqrt(jnp.sum(x * x, axis=a, keepdims=True)),
    "LOG_SUM": lambda x, a: jnp.log(jnp.sum(x, axis=a, keepdims=True)),
    "LOG_SUM_EXP": lambda x, a: jax.nn.logsumexp(x, axis=a, keepdims=True),
    "MAX": lambda x, a: jnp.max(x, axis=a, keepdims=True),
    "MIN": lambda x, a: jnp.min(x, axis=a, keepdims=True),
    "MULTIPLY": lambda x, a: jnp.prod(x, axis=a, keepdims=True),
    "SUM": lambda x, a: jnp.sum(x, axis=a, keepdims=True),
    "SUM_SQUARE": lambda x, a: jnp.sum(x * x, axis=a, keepdims=True),
}


_TORCH = {
    "ARGMAX": lambda torch, x, a: torch.argmax(x, dim=a, keepdim=True),
    "ARGMIN": lambda torch, x, a: torch.argmin(x, dim=a, keepdim=True),
    "AVERAGE": lambda torch, x, a: torch.mean(x, dim=a, keepdim=True),
    "L1": lambda torch, x, a: torch.sum(torch.abs(x), dim=a, keepdim=True),
    "L2": lambda torch, x, a: torch.linalg.vector_norm(x, dim=a, keepdim=True),
    "LOG_SUM": lambda torch, x, a: torch.log(torch.sum(x, dim=a, keepdim=True)),
    "LOG_SUM_EXP": lambda torch, x, a: torch.logsumexp(x, dim=a, keepdim=True),
    "MAX": lambda torch, x, a: torch.amax(x, dim=a, keepdim=True),
    "MIN": lambda torch, x, a: torch.amin(x, dim=a, keepdim=True),
    "MULTIPLY": lambda torch, x, a: torch.prod(x, dim=a, keepdim=True),
    "SUM": lambda torch, x, a: torch.sum(x, dim=a, keepdim=True),
    "SUM_SQUARE": lambda torch, x, a: torch.sum(x * x, dim=a, keepdim=True),
}


def _bench_case(fn: str, x: TensorDesc, axis: int, direction: str, standalone: bool):
    out = x.like(sizes=reduced_sizes(x.sizes, (axis,)))
    if fn in ("ARGMAX", "ARGMIN"):
        out = out.like(data_type="UINT32")
    if standalone:
        cls = ArgMaxOperatorDesc if fn == "ARGMAX" else ArgMinOperatorDesc
        desc = cls(x, out, axes=[axis], axis_direction=direction)
        label = f"{fn[:3]}{fn[3:]} op axis {axis}" + (
            " DECREASING" if direction == "DECREASING" else ""
        )
    else:
        desc = ReduceOperatorDesc(fn, x, out, axes=[axis])
        label = f"REDUCE {fn} axis {axis}"
    plain = _JNP[fn]
    if direction == "DECREASING":

        def jnp_fn(y):  # the last extreme: search the reversed axis
            k = plain(jnp.flip(y, axis), axis)
            return (y.shape[axis] - 1 - k).astype(k.dtype)

        torch_fn = None
    else:

        def jnp_fn(y):
            return plain(y, axis)

        def torch_fn(torch, y):
            return _TORCH[fn](torch, y, axis)

    return BenchCase(label, desc, jnp=jnp_fn, torch=torch_fn)


def _bench_reduce(shape: tuple, dtype: str, full: bool) -> list[BenchCase]:
    x = TensorDesc(dtype.upper(), shape)
    if full:
        functions = list(_JNP)
    else:
        functions = ["SUM", "MAX", "ARGMAX"] + (["LOG_SUM_EXP"] if x.data_type.is_float else [])
    cases = []
    for fn in functions:
        axes = [3, 1] + ([0, 2] if full and fn in ("ARGMAX", "ARGMIN", "LOG_SUM_EXP") else [])
        cases += [_bench_case(fn, x, a, "INCREASING", standalone=False) for a in axes]
    return cases


def _bench_arg(name: str):
    def cases(shape: tuple, dtype: str, full: bool) -> list[BenchCase]:
        if not full:
            return []
        x = TensorDesc(dtype.upper(), shape)
        out = [_bench_case(name, x, a, "INCREASING", standalone=True) for a in (3, 1, 0, 2)]
        axis = 1 if name == "ARGMAX" else 3
        return out + [_bench_case(name, x, axis, "DECREASING", standalone=True)]

    return cases


register_cases(ReduceOperatorDesc, _bench_reduce)
register_cases(ArgMinOperatorDesc, _bench_arg("ARGMIN"))
register_cases(ArgMaxOperatorDesc, _bench_arg("ARGMAX"))
