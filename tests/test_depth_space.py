"""DEPTH_TO_SPACE(1) / SPACE_TO_DEPTH(1): seeds, reference, round trips, v0 == v1(DCR), transforms."""

import dataclasses

import jax
import numpy as np
import pytest
import reference
import seed_cases
import strategies as S
from hypothesis import given
from hypothesis import strategies as st

import dml_jax as dml


@pytest.mark.parametrize("case", seed_cases.cases("depth_space"), ids=repr)
def test_depth_space_seed_examples(case):
    seed_cases.check(case)


@pytest.mark.parametrize("cls", S.DEPTH_SPACE_CLASSES, ids=lambda c: c.operator_type)
@S.HALF
@given(data=st.data())
def test_depth_space_matches_reference(cls, data):
    case = data.draw(S.depth_space_cases(cls))
    S.assert_same(S.run(case), reference.reference(case.desc, *case.inputs))


@pytest.mark.parametrize("order", S.ORDERS)
@given(data=st.data())
def test_space_to_depth1_inverts_depth_to_space1(order, data):
    case = data.draw(S.depth_space_cases(dml.DepthToSpace1OperatorDesc, order=order))
    d = case.desc
    (space,) = S.run(case)
    back = dml.SpaceToDepth1OperatorDesc(d.output_tensor, d.input_tensor, d.block_size, order)
    S.assert_same(S.run(S.Case(back, (space,))), case.inputs)


@given(
    st.one_of(
        S.depth_space_cases(dml.DepthToSpaceOperatorDesc),
        S.depth_space_cases(dml.SpaceToDepthOperatorDesc),
    )
)
def test_depth_space_v0_is_v1_with_dcr(case):
    d = case.desc
    v1 = (
        dml.DepthToSpace1OperatorDesc
        if isinstance(d, dml.DepthToSpaceOperatorDesc)
        else dml.SpaceToDepth1OperatorDesc
    )
    same = v1(d.input_tensor, d.output_tensor, d.block_size, "DEPTH_COLUMN_ROW")
    S.assert_same(S.run(case), S.run(S.Case(same, case.inputs)))


@S.FEW
@given(S.depth_space_cases())
def test_depth_space_jit_equals_eager(case):
    S.check_jit(case)


@S.FEW
@given(S.depth_space_cases())
def test_depth_space_vmap_equals_loop(case):
    S.check_vmap(case)


@S.FEW
@given(S.depth_space_cases(types=S.GRAD_TYPES))
def test_depth_space_check_grads(case):
    S.check_grads(case)


def test_depth_to_space_gradient_is_the_inverse_permutation():
    import jax
    import jax.numpy as jnp

    d = seed_cases.cases("depth_space")[0].desc  # DEPTH_TO_SPACE1 DCR, {1,8,2,3} -> {1,2,4,6}
    d = dataclasses.replace(
        d,
        input_tensor=d.input_tensor.like(data_type="FLOAT32"),
        output_tensor=d.output_tensor.like(data_type="FLOAT32"),
    )
    op = dml.compile_operator(d)
    w = jnp.arange(48, dtype=jnp.float32).reshape(1, 2, 4, 6)
    grad = jax.grad(lambda x: (w * op.fn(x)).sum())(jnp.zeros((1, 8, 2, 3), jnp.float32))
    back = dml.SpaceToDepth1OperatorDesc(d.output_tensor, d.input_tensor, 2, d.order)
    np.testing.assert_array_equal(grad, reference.reference(back, np.asarray(w))[0])


@pytest.mark.parametrize(
    "type_name, expected",
    [("FLOAT64", True), ("FLOAT16", True), ("INT8", False), ("UINT32", False)],
)
def test_depth_space_differentiable_flag(type_name, expected):
    d = dml.DepthToSpaceOperatorDesc(
        dml.TensorDesc(type_name, [1, 4, 1, 1]),
        dml.TensorDesc(type_name, [1, 1, 2, 2]),
        block_size=2,
    )
    with S.x64(d):
        assert dml.compile_operator(d).differentiable is expected


@pytest.mark.parametrize("order", S.ORDERS)
@given(data=st.data())
def test_space_to_depth_cuda_slice_form_matches_reference(order, data):
    """The strided-slice SPACE_TO_DEPTH that CUDA lowers to, checked here on the CPU."""
    from dml_jax.kernels.movement import _to_depth_slices

    case = data.draw(S.depth_space_cases(dml.SpaceToDepth1OperatorDesc, order=order))
    with jax.enable_x64(case.desc.input_tensor.data_type.is_64bit):
        got = np.asarray(_to_depth_slices(case.desc, np.asarray(case.inputs[0])))
    S.assert_same((got,), reference.reference(case.desc, *case.inputs))
