"""The element-wise map kernel (dml_jax.kernels.elementwise_map) in Pallas interpret mode: for
every operator it serves, on narrow types, the kernel equals the operator's lax lowering bit for
bit (the kernel runs that lowering block by block). The same comparison on a GPU, where Triton
lowers the primitives, is test_kernels_gpu.py."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import dml_jax as dml
from dml_jax import catalog, fastpath, registry
from dml_jax.kernels import elementwise_map as M

pytestmark = pytest.mark.kernel_matrix


def _case(name: str):
    """The operator's example in its first narrow data type, {3, 347} (odd: masked blocks)."""
    spec = registry.lookup(name)
    desc = catalog.example_desc(spec)
    table = spec.support_rows(desc)[-1]
    narrow = sorted(t.name for t in table.inputs if np.dtype(t.name.lower()).itemsize <= 2)
    return catalog.retyped(desc, narrow[0], (3, 347)) if narrow else None


CASES = [c for c in map(_case, M.OPERATORS) if c is not None]


# Without CUDA (Pallas interpret mode, seconds a case): one operator of each form the map
# kernel takes (unary, binary, scaled, with attributes, predicates, three inputs, bits, activations).
@pytest.mark.kernel_matrix(
    cpu=[
        "ELEMENT_WISE_IDENTITY",
        "ELEMENT_WISE_ADD1",
        "ELEMENT_WISE_EXP",
        "ELEMENT_WISE_CONSTANT_POW",
        "ELEMENT_WISE_MODULUS_FLOOR",
        "ELEMENT_WISE_LOGICAL_EQUALS",
        "ELEMENT_WISE_IS_NAN",
        "ELEMENT_WISE_IF",
        "ELEMENT_WISE_BIT_SHIFT_RIGHT",
        "ELEMENT_WISE_THRESHOLD",
        "ACTIVATION_ELU",
        "ACTIVATION_PARAMETERIZED_RELU",
    ]
)
@pytest.mark.parametrize("desc", CASES, ids=lambda d: d.operator_type.removeprefix("DML_OPERATOR_"))
def test_map_kernel_equals_the_lowering(desc):
    dml.validate(desc)
    assert (fastpath.select(desc) is not None) == M.covered(desc)
    rng = np.random.default_rng(1)
    xs = []
    for _, t in desc.input_slots():
        if t.data_type.is_float:
            x = (rng.standard_normal(t.sizes) * 3).astype(t.dtype)
            x.ravel()[:4] = [np.nan, np.inf, -0.0, 0.5]
        else:
            info = np.iinfo(t.dtype)
            x = rng.integers(info.min, info.max, t.sizes, endpoint=True).astype(t.dtype)
        xs.append(jnp.asarray(x))
    (got,) = M.lower_with_kernel(desc, *xs, interpret=True)
    (want,) = registry.lookup(desc.operator_type).lower(desc, *xs)
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    if got.dtype.kind == "f":
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        mask = ~np.isnan(got)
        np.testing.assert_array_equal(got[mask].view(np.uint16), want[mask].view(np.uint16))
    else:
        np.testing.assert_array_equal(got, want)


def test_wide_or_float_min_max_cases_are_not_covered():
    f32 = dml.TensorDesc("FLOAT32", [8])
    assert not M.covered(dml.ElementWiseAddOperatorDesc(f32, f32, f32))
    f16 = dml.TensorDesc("FLOAT16", [8])
    assert M.covered(dml.ElementWiseAddOperatorDesc(f16, f16, f16))
    assert not M.covered(dml.ElementWiseMaxOperatorDesc(f16, f16, f16))
    elu = dml.ActivationEluOperatorDesc(alpha=1.0)
    assert not M.covered(dml.ElementWiseAdd1OperatorDesc(f16, f16, f16, elu))
    relu = dml.ActivationReluOperatorDesc()
    assert M.covered(dml.ElementWiseAdd1OperatorDesc(f16, f16, f16, relu))
    broadcast = dml.TensorDesc("FLOAT16", [2, 4], strides=[0, 1])
    assert not M.covered(
        dml.ElementWiseAddOperatorDesc(f16, broadcast.like(sizes=(8,), strides=(0,)), f16)
    )
    i8 = dml.TensorDesc("INT8", [8])
    assert M.covered(dml.ElementWiseMaxOperatorDesc(i8, i8, i8))
