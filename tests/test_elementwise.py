"""Element-wise math operators: worked values, properties against tests/reference/elementwise.py,
one row per rule, jit / vmap / gradients."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import reference
import strategies as S
from hypothesis import given
from hypothesis import strategies as st

import dml_jax as dml
from dml_jax import catalog, registry
from dml_jax.fused import fusable_names


def tensors(type_name: str, sizes, n: int) -> list[dml.TensorDesc]:
    return [dml.TensorDesc(type_name, list(sizes))] * n


def identity(type_name="FLOAT32", sizes=(3,), scale_bias=None):
    x, y = tensors(type_name, sizes, 2)
    return dml.ElementWiseIdentityOperatorDesc(x, y, scale_bias=scale_bias)


def add(type_name="FLOAT32", sizes=(3,)):
    return dml.ElementWiseAddOperatorDesc(*tensors(type_name, sizes, 3))


def add1(type_name="FLOAT32", sizes=(3,), fused_activation=None):
    return dml.ElementWiseAdd1OperatorDesc(*tensors(type_name, sizes, 3), fused_activation)


def _fused_form(name: str):
    """The registry example of a fusable activation, its tensors left None (a FusedActivation)."""
    desc = catalog.example_desc(registry.lookup(name))
    return dataclasses.replace(desc, input_tensor=None, output_tensor=None)


# Every activation DirectML can fuse, from the registry (test_activation pins the list).
FUSABLE = [_fused_form(name) for name in fusable_names()]

# operator type -> (desc maker(type, sizes, **extra), number of inputs)
OPERATORS = {
    "DML_OPERATOR_ELEMENT_WISE_ADD": (add, 2),
    "DML_OPERATOR_ELEMENT_WISE_ADD1": (add1, 2),
    "DML_OPERATOR_ELEMENT_WISE_IDENTITY": (identity, 1),
}

SEEDS = [
    # The identity model of DxDispatch: [1, 2, 3] * 2 + 10.
    (
        identity(scale_bias=dml.ScaleBias(2, 10)),
        (np.array([1, 2, 3], np.float32),),
        (np.array([12, 14, 16], np.float32),),
    ),
    (identity("UINT8", (2, 2)), (np.array([[0, 255], [7, 8]], np.uint8),), None),
    # The add models of DxDispatch: [1, 2, 3] + [5, 8, -5].
    (
        add(),
        (np.array([1, 2, 3], np.float32), np.array([5, 8, -5], np.float32)),
        (np.array([6, 10, -2], np.float32),),
    ),
    # DxDispatch's ADD1 model: ELU(a + b) with Alpha 0.5; ELU(-2) = 0.5 * (exp(-2) - 1).
    (
        add1(fused_activation=dml.ActivationEluOperatorDesc(alpha=0.5)),
        (np.array([1, 2, 3], np.float32), np.array([5, 8, -5], np.float32)),
        (np.array([6, 10, 0.5 * np.expm1(-2)], np.float32),),
    ),
    # Integers wrap around (docs/semantics.md).
    (
        add("INT8", (3,)),
        (np.array([127, -128, 5], np.int8), np.array([1, -1, -7], np.int8)),
        (np.array([-128, 127, -2], np.int8),),
    ),
]


@pytest.mark.parametrize("desc, inputs, expected", SEEDS)
def test_elementwise_worked_values(desc, inputs, expected):
    expected = expected or inputs
    got = S.as_tuple(dml.compile_operator(desc)(*inputs))
    for g, w in zip(got, expected):
        np.testing.assert_array_equal(np.asarray(g), w)
    for g, w in zip(reference.reference(desc, *inputs), expected):
        np.testing.assert_array_equal(g, w)


@st.composite
def elementwise_cases(draw, name=None, types=None):
    name = name or draw(st.sampled_from(sorted(OPERATORS)))
    maker, n_inputs = OPERATORS[name]
    type_name = draw(st.sampled_from(types or S.types_at_newest(name)))
    shape = draw(S.shapes(ranks=S.ranks_at_newest(name)))
    extra = {}
    if name == "DML_OPERATOR_ELEMENT_WISE_ADD1" and type_name.startswith("FLOAT"):
        extra["fused_activation"] = draw(st.sampled_from([None, *FUSABLE]))
    floats = type_name.startswith("FLOAT")
    if name == "DML_OPERATOR_ELEMENT_WISE_IDENTITY" and floats and draw(st.booleans()):
        extra["scale_bias"] = dml.ScaleBias(
            draw(st.floats(-4, 4, width=32)), draw(st.floats(-4, 4, width=32))
        )
    rng = draw(S.seeds())
    style = draw(st.sampled_from(("full", "ties", "small")))
    inputs = tuple(S.values(rng, type_name, shape, style) for _ in range(n_inputs))
    return S.Case(maker(type_name, shape, **extra), inputs)


def _float_tolerance(case: S.Case) -> dict:
    if case.inputs[0].dtype == np.float16:
        return {"rtol": 1e-3, "atol": 1e-3}
    return {"rtol": 1e-6, "atol": 1e-6}


@given(case=elementwise_cases())
def test_elementwise_matches_reference(case):
    with S.x64(case.desc):
        got = S.run(case)
        want = reference.reference(case.desc, *case.inputs)
    exact = not np.issubdtype(case.inputs[0].dtype, np.floating)
    S.assert_same(got, want, exact=exact, **({} if exact else _float_tolerance(case)))


@S.FEW
@given(case=elementwise_cases())
def test_elementwise_jit_equals_eager(case):
    with S.x64(case.desc):
        S.check_jit(case, **S.same_program_tolerance(case))


@S.FEW
@given(case=elementwise_cases())
def test_elementwise_vmap_equals_loop(case):
    with S.x64(case.desc):
        S.check_vmap(case, **S.same_program_tolerance(case))


@S.FEW
@given(case=elementwise_cases(types=["FLOAT32"]))
def test_elementwise_gradients(case):
    S.check_grads(case)


INVALID_ROWS = [
    (
        lambda: add1("INT32", fused_activation=dml.ActivationReluOperatorDesc()),
        (
            r"^DML_OPERATOR_ELEMENT_WISE_ADD1: FusedActivation may be used only when the output "
            r"data type is FLOAT32 or FLOAT16, got INT32"
        ),
    ),
    (
        lambda: add1(fused_activation=add()),
        (
            r"^DML_OPERATOR_ELEMENT_WISE_ADD1: FusedActivation is not an activation: got "
            r"DML_OPERATOR_ELEMENT_WISE_ADD; it must be an activation DirectML can fuse "
            r"\(DML_OPERATOR_ACTIVATION_CELU, .*\)"
        ),
    ),
    (
        lambda: add1("FLOAT32", (3,), "relu"),
        r"^DML_OPERATOR_ELEMENT_WISE_ADD1: FusedActivation must be an operator description",
    ),
    (
        lambda: dml.ElementWiseAddOperatorDesc(
            dml.TensorDesc("FLOAT32", [3]),
            dml.TensorDesc("FLOAT32", [1]),
            dml.TensorDesc("FLOAT32", [3]),
        ),
        r"^DML_OPERATOR_ELEMENT_WISE_ADD: BTensor\.Sizes must equal ATensor\.Sizes",
    ),
    (
        lambda: add("INT8", (3,)),
        None,  # valid at 5_1 (checked below), rejected earlier
    ),
    (
        lambda: dml.ElementWiseIdentityOperatorDesc(
            dml.TensorDesc("FLOAT32", [3]), dml.TensorDesc("FLOAT32", [4])
        ),
        r"^DML_OPERATOR_ELEMENT_WISE_IDENTITY: OutputTensor\.Sizes must equal",
    ),
    (
        lambda: identity("INT32", scale_bias=dml.ScaleBias(2, 1)),
        r"^DML_OPERATOR_ELEMENT_WISE_IDENTITY: ScaleBias is supported only for float tensors",
    ),
    (
        lambda: dml.ElementWiseIdentityOperatorDesc(
            dml.TensorDesc("FLOAT32", [3]), dml.TensorDesc("INT32", [3])
        ),
        r"^DML_OPERATOR_ELEMENT_WISE_IDENTITY: OutputTensor\.DataType must equal",
    ),
]


@pytest.mark.parametrize("factory, pattern", INVALID_ROWS)
def test_elementwise_rules(factory, pattern):
    if pattern is None:
        dml.validate(factory(), "5_1")
        with pytest.raises(
            dml.ValidationError, match="lowest feature level that supports it is 5_1"
        ):
            dml.validate(factory(), "5_0")
        return
    with pytest.raises(dml.ValidationError, match=pattern):
        dml.validate(factory())


def test_identity_float64_needs_4_1():
    desc = identity("FLOAT64")
    with pytest.raises(dml.ValidationError, match="lowest feature level that supports it is 4_1"):
        dml.validate(desc, "4_0")
    dml.validate(desc, "4_1")


def test_identity_changes_layout_in_buffer_mode():
    # A {2, 3} tensor read with strides {1, 2} (column-major) and written packed.
    x = dml.TensorDesc("FLOAT32", [2, 3], strides=[1, 2])
    y = dml.TensorDesc("FLOAT32", [2, 3])
    op = dml.compile_operator(dml.ElementWiseIdentityOperatorDesc(x, y))
    (out,) = op.run_buffers([np.arange(6, dtype=np.float32)], [np.zeros(6, np.float32)])
    np.testing.assert_array_equal(np.asarray(out), [0, 2, 4, 1, 3, 5])


def test_add_broadcasts_through_a_stride_0_input_in_buffer_mode():
    # B is one row read for every row of A ({2, 3} with strides {0, 1}).
    a = dml.TensorDesc("INT32", [2, 3])
    b = dml.TensorDesc("INT32", [2, 3], strides=[0, 1])
    op = dml.compile_operator(dml.ElementWiseAddOperatorDesc(a, b, a))
    (out,) = op.run_buffers(
        [np.arange(6, dtype=np.int32), np.array([10, 20, 30], np.int32)], [np.zeros(6, np.int32)]
    )
    np.testing.assert_array_equal(np.asarray(out), [10, 21, 32, 13, 24, 35])


@pytest.mark.parametrize("act", [None, *FUSABLE], ids=lambda a: getattr(a, "operator_type", "none"))
def test_add1_with_and_without_each_fused_activation(act):
    rng = np.random.default_rng(7)
    a, b = (rng.uniform(-3, 3, (2, 5)).astype(np.float32) for _ in range(2))
    case = S.Case(add1("FLOAT32", (2, 5), act), (a, b))
    got = S.run(case)
    np.testing.assert_allclose(
        got[0], reference.reference(case.desc, a, b)[0], rtol=2e-6, atol=1e-6
    )
    S.check_jit(case, **S.same_program_tolerance(case))  # an FMA in Alpha * x + Beta
    S.check_grads(S.Case(case.desc, (np.abs(a) + 0.5, np.abs(b) + 0.5)), atol=2e-2, rtol=2e-2)


def test_add1_fused_activation_is_one_program_with_no_second_pass():
    from dml_jax.graph import optimized_hlo

    desc = add1("FLOAT32", (64, 64), dml.ActivationSigmoidOperatorDesc())
    op = dml.compile_operator(desc)
    a = np.ones((64, 64), np.float32)
    hlo = optimized_hlo(op, a, a)
    entry = hlo[hlo.index("ENTRY") :]
    # One fused computation produces the result: no add kernel writing a temporary for a
    # separate logistic kernel to read.
    assert entry.count("fusion(") == 1, entry


def test_add1_fused_json_forms():
    for fused in (
        {"Type": "ACTIVATION_ELU", "Alpha": 0.5},
        {"Type": "DML_OPERATOR_ACTIVATION_ELU", "Desc": {"Alpha": 0.5}},
    ):
        obj = {
            "type": "ELEMENT_WISE_ADD1",
            "desc": {
                "ATensor": {"DataType": "FLOAT32", "Sizes": [3]},
                "BTensor": {"DataType": "FLOAT32", "Sizes": [3]},
                "OutputTensor": {"DataType": "FLOAT32", "Sizes": [3]},
                "FusedActivation": fused,
            },
        }
        desc = dml.operator_desc_from_json(obj)
        assert desc.fused_activation == dml.ActivationEluOperatorDesc(alpha=0.5)
    bad = dict(obj["desc"], FusedActivation={"Type": "ACTIVATION_ELU", "Alpha": "x"})
    with pytest.raises(
        dml.ValidationError,
        match=r"^DML_OPERATOR_ELEMENT_WISE_ADD1: desc\.FusedActivation\.Alpha must be a number",
    ):
        dml.operator_desc_from_json({"type": "ELEMENT_WISE_ADD1", "desc": bad})
    bad = dict(obj["desc"], FusedActivation={"Alpha": 1})
    with pytest.raises(dml.ValidationError, match=r"desc\.FusedActivation\.Type is required"):
        dml.operator_desc_from_json({"type": "ELEMENT_WISE_ADD1", "desc": bad})


def test_float32_subnormals_flush_on_the_cpu_and_stay_on_gpus():
    """docs/semantics.md, "Subnormal numbers": float32 math flushes subnormal inputs and results
    to a zero of the same sign on XLA's CPU backend (Direct3D's rule) and keeps them on GPUs;
    data movement and FLOAT16 math keep them on every backend."""
    import jax

    backend = jax.default_backend()
    if backend not in ("cpu", "gpu"):
        pytest.skip(f"docs/semantics.md states the CPU's and GPUs' rule, not {backend}'s")
    tiny = np.array([1e-40, -1e-40, 1.0], np.float32)
    mul = dml.compile_operator(dml.ElementWiseMultiplyOperatorDesc(*tensors("FLOAT32", (3,), 3)))
    doubled = np.asarray(mul(tiny, np.full(3, 2, np.float32)))
    product = np.asarray(mul(*(np.full(3, v, np.float32) for v in (1e-20, 1e-19))))
    if backend == "cpu":
        np.testing.assert_array_equal(doubled, [0.0, -0.0, 2.0])
        assert np.signbit(doubled[1])
        np.testing.assert_array_equal(product, 0.0)
    else:
        np.testing.assert_array_equal(doubled, tiny * np.float32(2))
        np.testing.assert_array_equal(product, np.float32(1e-20) * np.float32(1e-19))
        assert 0 < product[0] < np.finfo(np.float32).tiny
    # Data movement keeps the bits.
    copied = np.asarray(dml.compile_operator(identity())(tiny))
    np.testing.assert_array_equal(copied.view(np.uint32), tiny.view(np.uint32))
    # FLOAT16 subnormals are normal float32 numbers: kept.
    half = np.array([1e-7, -1e-7, 1.0], np.float16)
    mul16 = dml.compile_operator(dml.ElementWiseMultiplyOperatorDesc(*tensors("FLOAT16", (3,), 3)))
    np.testing.assert_array_equal(
        np.asarray(mul16(half, np.full(3, 2, np.float16))), half * np.float16(2)
    )
    assert 0 < half[0] * 2 < np.finfo(np.float16).tiny
