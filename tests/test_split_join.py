"""SPLIT and JOIN: seed examples, properties against the NumPy reference, round trip, transforms."""

import numpy as np
import pytest
import reference
import seed_cases
import strategies as S
from hypothesis import given
from hypothesis import strategies as st

import dml_jax as dml


@pytest.mark.parametrize("case", seed_cases.cases("split_join"), ids=repr)
def test_split_join_seed_examples(case):
    seed_cases.check(case)


def test_split_returns_tuple_even_for_one_output():
    t = dml.TensorDesc("INT8", [3, 2])
    op = dml.compile_operator(dml.SplitOperatorDesc(t, [t], axis=1))
    x = np.arange(6, dtype=np.int8).reshape(3, 2)
    out = op(x)
    assert isinstance(out, tuple) and len(out) == 1
    np.testing.assert_array_equal(out[0], x)


@given(S.split_cases())
def test_split_matches_reference(case):
    S.assert_same(S.run(case), reference.reference(case.desc, *case.inputs))


@given(S.join_cases())
def test_join_matches_reference(case):
    S.assert_same(S.run(case), reference.reference(case.desc, *case.inputs))


@given(S.split_cases())
def test_join_of_split_is_identity(case):
    pieces = S.run(case)
    d = case.desc
    join = dml.JoinOperatorDesc(d.output_tensors, d.input_tensor, axis=d.axis)
    S.assert_same(S.run(S.Case(join, pieces)), case.inputs)


@S.FEW
@given(st.one_of(S.split_cases(), S.join_cases()))
def test_split_join_jit_equals_eager(case):
    S.check_jit(case)


@S.FEW
@given(st.one_of(S.split_cases(), S.join_cases()))
def test_split_join_vmap_equals_loop(case):
    S.check_vmap(case)


@S.FEW
@given(st.one_of(S.split_cases(types=S.GRAD_TYPES), S.join_cases(types=S.GRAD_TYPES)))
def test_split_join_check_grads(case):
    S.check_grads(case)


def test_split_join_gradient_routes_cotangent_back():
    import jax
    import jax.numpy as jnp

    x = dml.TensorDesc("FLOAT32", [2, 5])
    pieces = [dml.TensorDesc("FLOAT32", [2, 2]), dml.TensorDesc("FLOAT32", [2, 3])]
    split = dml.compile_operator(dml.SplitOperatorDesc(x, pieces, axis=1))
    weights = (jnp.full((2, 2), 2.0), jnp.full((2, 3), 3.0))
    grad = jax.grad(lambda a: sum((w * y).sum() for w, y in zip(weights, split.fn(a))))(
        jnp.ones((2, 5), jnp.float32)
    )
    np.testing.assert_array_equal(grad, [[2, 2, 3, 3, 3]] * 2)
    join = dml.compile_operator(dml.JoinOperatorDesc(pieces, x, axis=1))
    w = jnp.arange(10.0, dtype=jnp.float32).reshape(2, 5)
    grads = jax.grad(lambda a, b: (w * join.fn(a, b)).sum(), argnums=(0, 1))(
        jnp.ones((2, 2), jnp.float32), jnp.ones((2, 3), jnp.float32)
    )
    np.testing.assert_array_equal(grads[0], w[:, :2])
    np.testing.assert_array_equal(grads[1], w[:, 2:])


@pytest.mark.parametrize(
    "type_name, expected",
    [("FLOAT32", True), ("FLOAT16", True), ("INT32", False), ("UINT8", False)],
)
def test_split_join_differentiable_flag(type_name, expected):
    whole, half = dml.TensorDesc(type_name, [4]), dml.TensorDesc(type_name, [2])
    assert (
        dml.compile_operator(dml.SplitOperatorDesc(whole, [half, half], axis=0)).differentiable
        is expected
    )
    assert (
        dml.compile_operator(dml.JoinOperatorDesc([half, half], whole, axis=0)).differentiable
        is expected
    )
