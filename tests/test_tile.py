"""TILE: seed example, reference over every type and rank 1-8, transforms."""

import numpy as np
import pytest
import reference
import seed_cases
import strategies as S
from hypothesis import given

import dml_jax as dml


@pytest.mark.parametrize("case", seed_cases.cases("tile"), ids=repr)
def test_tile_seed_example(case):
    seed_cases.check(case)


@given(S.tile_cases())
def test_tile_matches_reference(case):
    S.assert_same(S.run(case), reference.reference(case.desc, *case.inputs))


@S.FEW
@given(S.tile_cases())
def test_tile_jit_equals_eager(case):
    S.check_jit(case)


@S.FEW
@given(S.tile_cases())
def test_tile_vmap_equals_loop(case):
    S.check_vmap(case)


@S.FEW
@given(S.tile_cases(types=["FLOAT32"]))
def test_tile_check_grads(case):
    S.check_grads(case)


def test_tile_gradient_sums_the_copies():
    import jax
    import jax.numpy as jnp

    op = dml.compile_operator(
        dml.TileOperatorDesc(
            dml.TensorDesc("FLOAT32", [2, 3]), dml.TensorDesc("FLOAT32", [4, 6]), repeats=[2, 2]
        )
    )
    w = jnp.arange(24, dtype=jnp.float32).reshape(4, 6)
    grad = jax.grad(lambda x: (w * op.fn(x)).sum())(jnp.zeros((2, 3), jnp.float32))
    # Each input element appears at (i + 2a, j + 3b) for a, b in {0, 1}.
    want = sum(
        np.asarray(w)[a * 2 : (a + 1) * 2, b * 3 : (b + 1) * 3] for a in (0, 1) for b in (0, 1)
    )
    np.testing.assert_array_equal(grad, want)


@pytest.mark.parametrize("type_name, expected", [("FLOAT32", True), ("INT64", False)])
def test_tile_differentiable_flag(type_name, expected):
    d = dml.TileOperatorDesc(
        dml.TensorDesc(type_name, [2]), dml.TensorDesc(type_name, [4]), repeats=[2]
    )
    with S.x64(d):
        assert dml.compile_operator(d).differentiable is expected
