"""Bench cases of the operators of ``dml_jax.ops.random_generator``."""

from __future__ import annotations

from dml_jax.bench.catalog import BenchCase, register_cases
from dml_jax.enums import RandomGeneratorType
from dml_jax.ops.random_generator import PHILOX_STATE_SIZES, RandomGeneratorOperatorDesc
from dml_jax.tensor import TensorDesc


def _bench(shape: tuple, dtype: str, full: bool) -> list[BenchCase]:
    if dtype != "float32":
        return []  # the output is always UINT32: one case per run
    state = TensorDesc("UINT32", PHILOX_STATE_SIZES)
    desc = RandomGeneratorOperatorDesc(
        state, TensorDesc("UINT32", shape), state, RandomGeneratorType.PHILOX_4X32_10
    )
    # No jnp column: jax.random has no Philox, and the harness checks a jnp column's values
    # (jax.random.bits' threefry2x32 costs about as much but gives other bits).
    return [
        BenchCase(
            "RANDOM_GENERATOR philox4x32-10",
            desc,
            torch=lambda torch, s: torch.empty(shape, dtype=torch.int32, device=s.device).random_(),
            notes="torch: the CUDA generator's Philox (random_), for cost only",
        )
    ]


register_cases(RandomGeneratorOperatorDesc, _bench)
