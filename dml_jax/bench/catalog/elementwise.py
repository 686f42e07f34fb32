"""Bench cases of the operators of ``dml_jax.ops.elementwise``."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from dml_jax.bench.catalog import BenchCase, register_cases
from dml_jax.bench.catalog.rows import broadcast_case, in_place_case
from dml_jax.fused import fusable_names
from dml_jax.ops.elementwise import (
    ElementWiseAdd1OperatorDesc,
    ElementWiseAddOperatorDesc,
    ElementWiseIdentityOperatorDesc,
)
from dml_jax.registry import lookup
from dml_jax.tensor import ScaleBias, TensorDesc


def _bench_identity(shape: tuple, dtype: str, full: bool) -> list[BenchCase]:
    t = TensorDesc(dtype.upper(), shape)
    cases = [BenchCase("IDENTITY", ElementWiseIdentityOperatorDesc(t, t), jnp=lambda x: x + 0)]
    if full and t.data_type.is_float:
        cases.append(
            BenchCase(
                "IDENTITY ScaleBias",
                ElementWiseIdentityOperatorDesc(t, t, ScaleBias(2.0, 1.0)),
                jnp=lambda x: x * 2 + 1,
                torch=lambda torch, x: x * 2 + 1,
            )
        )
    return cases


def _bench_add(shape: tuple, dtype: str, full: bool) -> list[BenchCase]:
    t = TensorDesc(dtype.upper(), shape)
    desc = ElementWiseAddOperatorDesc(t, t, t)
    torch_add = lambda torch, a, b: a + b
    return [
        BenchCase("ADD", desc, jnp=jnp.add, torch=torch_add),
        broadcast_case("ADD per-channel B", desc, jnp.add, torch_add),
        in_place_case("ADD", desc),
    ]


def _bench_add1(shape: tuple, dtype: str, full: bool) -> list[BenchCase]:
    """ADD1 with each activation DirectML can fuse (their registry examples), and ADD1 alone:
    a fused activation should cost next to nothing over the addition."""
    from dml_jax.catalog import example_desc

    t = TensorDesc(dtype.upper(), shape)
    if not t.data_type.is_float:
        return []
    cases = [BenchCase("ADD1", ElementWiseAdd1OperatorDesc(t, t, t), jnp=jnp.add)]
    for name in fusable_names():
        act = example_desc(lookup(name))
        act = dataclasses.replace(act, input_tensor=None, output_tensor=None)
        short = name.removeprefix("DML_OPERATOR_ACTIVATION_")
        extra = {}
        if short == "RELU":
            extra = {
                "jnp": lambda a, b: jax.nn.relu(a + b),
                "torch": lambda torch, a, b: torch.relu(a + b),
            }
        cases.append(
            BenchCase(f"ADD1 + fused {short}", ElementWiseAdd1OperatorDesc(t, t, t, act), **extra)
        )
    return cases


register_cases(ElementWiseIdentityOperatorDesc, _bench_identity)
register_cases(ElementWiseAddOperatorDesc, _bench_add)
register_cases(ElementWiseAdd1OperatorDesc, _bench_add1)
