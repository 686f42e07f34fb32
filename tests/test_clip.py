"""ELEMENT_WISE_CLIP(1) and CLIP_GRAD(1): seeds, bound conversion, reference, gradients, transforms."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import reference
import seed_cases
import strategies as S
from hypothesis import given
from hypothesis import strategies as st
from jax import lax

import dml_jax as dml
from dml_jax.ops.clip import convert_float_bound

CLIP, CLIP1 = dml.ElementWiseClipOperatorDesc, dml.ElementWiseClip1OperatorDesc
GRAD, GRAD1 = dml.ElementWiseClipGradOperatorDesc, dml.ElementWiseClipGrad1OperatorDesc


def _t(type_name, sizes):
    return dml.TensorDesc(type_name, list(sizes))


@pytest.mark.parametrize("case", seed_cases.cases("clip"), ids=repr)
def test_clip_seed_examples(case):
    seed_cases.check(case)


# --- the formula max(Min, min(x, Max)) -----------------------------------------------------


@pytest.mark.parametrize("type_name", ["FLOAT32", "FLOAT16", "INT16", "UINT8"])
def test_clip_min_above_max_gives_min_everywhere(type_name):
    t = _t(type_name, [6])
    x = np.array([0, 1, 2, 3, 4, 5], dtype=t.dtype)
    out = dml.compile_operator(CLIP(t, t, min=4.0, max=1.0))(x)
    np.testing.assert_array_equal(out, np.full(6, 4, t.dtype))
    out1 = dml.compile_operator(CLIP1(t, t, min=4, max=1))(x)
    np.testing.assert_array_equal(out1, np.full(6, 4, t.dtype))
    # XLA's clamp is min(max(x, lo), hi): it would give Max, which is why CLIP avoids it.
    np.testing.assert_array_equal(
        lax.clamp(t.dtype.type(4), jnp.asarray(x), t.dtype.type(1)), np.full(6, 1, t.dtype)
    )


@pytest.mark.parametrize(
    "value, type_name, expected",
    [
        (-2.5, "INT32", -2),
        (2.7, "INT32", 2),
        (-2.7, "INT8", -2),
        (2.5, "UINT16", 2),
        (-1.0, "UINT8", 0),
        (-0.5, "UINT32", 0),
        (1e10, "INT16", 32767),
        (-1e10, "INT8", -128),
        (1e30, "UINT64", 2**64 - 1),
        (-1e30, "INT64", -(2**63)),
        (math.inf, "INT32", 2**31 - 1),
        (-math.inf, "UINT8", 0),
        (2049.0, "FLOAT16", 2048.0),
        (2051.0, "FLOAT16", 2052.0),
        (0.1, "FLOAT16", 0.0999755859375),
        (70000.0, "FLOAT16", 65504.0),
        (-1e10, "FLOAT16", -65504.0),
        (math.inf, "FLOAT16", math.inf),
        (0.1, "FLOAT32", float(np.float32(0.1))),
    ],
)
def test_convert_float_bound(value, type_name, expected):
    got = convert_float_bound(value, dml.DataType[type_name])
    assert np.dtype(type(got)) == np.dtype(type_name.lower())
    assert got == expected
    assert reference.clip_float_bound(value, type_name) == expected


@given(
    st.floats(allow_nan=False, width=32),
    st.sampled_from(S.types_at_newest("DML_OPERATOR_ELEMENT_WISE_CLIP")),
)
def test_convert_float_bound_matches_reference_rule(value, type_name):
    got = convert_float_bound(value, dml.DataType[type_name])
    want = reference.clip_float_bound(value, type_name)
    assert type(got) is type(want) and got == want


def test_clip1_64bit_extremes_exact():
    with jax.enable_x64(True):
        i64 = _t("INT64", [5])
        x = np.array([-(2**63), 0, 2**53 + 1, 2**63 - 3, 2**63 - 1], dtype=np.int64)
        out = dml.compile_operator(CLIP1(i64, i64, min=2**63 - 2, max=2**63 - 1))(x)
        np.testing.assert_array_equal(
            out, np.array([2**63 - 2, 2**63 - 2, 2**63 - 2, 2**63 - 2, 2**63 - 1], np.int64)
        )
        # 2**53 + 1 is held by neither float32 nor float64.
        out = dml.compile_operator(CLIP1(i64, i64, min=2**53 + 1, max=2**53 + 1))(x)
        np.testing.assert_array_equal(out, np.full(5, 2**53 + 1, np.int64))
        u64 = _t("UINT64", [4])
        y = np.array([0, 5, 2**64 - 2, 2**64 - 1], dtype=np.uint64)
        out = dml.compile_operator(
            CLIP1(u64, u64, min=2**64 - 2, max=2**64 - 1, min_max_data_type="UINT64")
        )(y)
        np.testing.assert_array_equal(
            out, np.array([2**64 - 2, 2**64 - 2, 2**64 - 2, 2**64 - 1], np.uint64)
        )
        out = dml.compile_operator(CLIP1(u64, u64, min=1, max=2**63 + 1))(y)
        np.testing.assert_array_equal(out, np.array([1, 5, 2**63 + 1, 2**63 + 1], np.uint64))


def test_clip_propagates_nan_and_clip_grad_zeroes_it():
    t = _t("FLOAT32", [4])
    x = np.array([np.nan, -5.0, 0.5, 5.0], np.float32)
    for desc in (CLIP(t, t, min=-1.0, max=1.0), CLIP1(t, t, min=-1.0, max=1.0)):
        out = dml.compile_operator(desc)(x)
        np.testing.assert_array_equal(out, [np.nan, -1.0, 0.5, 1.0])
        np.testing.assert_array_equal(reference.reference(desc, x)[0], [np.nan, -1.0, 0.5, 1.0])
    g = np.ones(4, np.float32)
    grad = dml.compile_operator(GRAD(t, t, t, min=-1.0, max=1.0))(x, g)
    np.testing.assert_array_equal(grad, [0, 0, 1, 0])


def test_clip_scale_bias_on_integers_is_rejected():
    t = _t("INT32", [3])
    with pytest.raises(dml.ValidationError, match=r"^DML_OPERATOR_ELEMENT_WISE_CLIP: ScaleBias"):
        dml.validate(CLIP(t, t, min=0.0, max=1.0, scale_bias=dml.ScaleBias(2.0, 0.0)))


# --- properties against the reference ------------------------------------------------------


@pytest.mark.parametrize("cls", S.CLIP_CLASSES, ids=lambda c: c.operator_type)
@S.HALF
@given(data=st.data())
def test_clip_family_matches_reference(cls, data):
    case = data.draw(S.clip_cases(cls))
    S.assert_same(S.run(case), reference.reference(case.desc, *case.inputs))


# --- gradients -----------------------------------------------------------------------------


def _clip_grad_of(desc):
    """The CLIP_GRAD description with CLIP's bounds and tensors."""
    t = desc.input_tensor
    return GRAD(t, t, t, min=desc.min, max=desc.max)


@given(S.clip_cases(CLIP, types=["FLOAT32", "FLOAT16"], scale_bias=False))
def test_clip_vjp_equals_clip_grad(case):
    (x,) = case.inputs
    op = dml.compile_operator(case.desc)
    g = np.random.default_rng(x.size).standard_normal(x.shape).astype(x.dtype)
    backward = jax.jit(lambda a, ct: jax.vjp(op.fn, a)[1](ct)[0])
    via_autodiff = backward(jnp.asarray(x), jnp.asarray(g))
    via_clip_grad = dml.compile_operator(_clip_grad_of(case.desc))(x, g)
    S.assert_same(via_autodiff, via_clip_grad)
    S.assert_same(via_clip_grad, reference.reference(_clip_grad_of(case.desc), x, g))


@pytest.mark.parametrize("type_name", ["FLOAT32", "FLOAT16"])
def test_clip_gradient_is_zero_at_the_bounds(type_name):
    t = _t(type_name, [6])
    x = np.array([-3.0, -2.0, -1.5, 1.5, 2.0, 3.0], t.dtype)
    inside = np.array([0, 0, 1, 1, 0, 0], t.dtype)
    clip = dml.compile_operator(CLIP(t, t, min=-2.0, max=2.0))
    np.testing.assert_array_equal(jax.grad(lambda a: clip.fn(a).sum())(jnp.asarray(x)), inside)
    for desc in (GRAD(t, t, t, min=-2.0, max=2.0), GRAD1(t, t, t, min=-2.0, max=2.0)):
        np.testing.assert_array_equal(dml.compile_operator(desc)(x, np.ones(6, t.dtype)), inside)


def test_clip_scale_bias_gradient_is_scale_inside_zero_outside():
    t = _t("FLOAT32", [6])
    op = dml.compile_operator(CLIP(t, t, min=-1.0, max=3.0, scale_bias=dml.ScaleBias(2.0, 1.0)))
    x = jnp.array([-3.0, -1.0, 0.0, 0.5, 1.0, 5.0], jnp.float32)  # g(x) = -5, -1, 1, 2, 3, 11
    np.testing.assert_array_equal(op.fn(x), [-1, -1, 1, 2, 3, 3])
    np.testing.assert_array_equal(jax.grad(lambda a: op.fn(a).sum())(x), [0, 0, 2, 2, 0, 0])


def _away_from_bounds(case):
    """Moves inputs whose g(x) lies within 0.1 of a bound (kinks) away from it."""
    d = case.desc
    x = case.inputs[0].astype(np.float64)
    lo, hi = (float(b) for b in reference._bounds(d, x.dtype.name.upper()))
    sb = getattr(d, "scale_bias", None)
    s, b = (sb.scale, sb.bias) if sb else (1.0, 0.0)
    for _ in range(8):
        gx = x * s + b
        near = (np.abs(gx - lo) < 0.1) | (np.abs(gx - hi) < 0.1)
        x = np.where(near, x + 0.37 / abs(s), x)
    inputs = (x.astype(case.inputs[0].dtype),) + case.inputs[1:]
    return dataclasses.replace(case, inputs=inputs)


@S.FEW
@given(
    st.one_of(
        S.clip_cases(CLIP, types=["FLOAT32"]),
        S.clip_cases(CLIP1, types=["FLOAT32"]),
        S.clip_cases(GRAD, types=["FLOAT32"]),
        S.clip_cases(GRAD1, types=["FLOAT32"]),
    )
)
def test_clip_family_check_grads(case):
    S.check_grads(_away_from_bounds(case))


# --- transforms ----------------------------------------------------------------------------


@S.FEW
@given(S.clip_cases())
def test_clip_family_jit_equals_eager(case):
    S.check_jit(case)


@S.FEW
@given(S.clip_cases())
def test_clip_family_vmap_equals_loop(case):
    S.check_vmap(case)


@pytest.mark.parametrize("cls", S.CLIP_CLASSES, ids=lambda c: c.operator_type)
@pytest.mark.parametrize("type_name, expected", [("FLOAT16", True), ("INT32", False)])
def test_clip_family_differentiable_flag(cls, type_name, expected):
    t = _t(type_name, [2])
    tensors = (t, t, t) if "GRAD" in cls.operator_type else (t, t)
    assert dml.compile_operator(cls(*tensors, min=0, max=1)).differentiable is expected
