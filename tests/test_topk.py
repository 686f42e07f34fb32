"""TOP_K and TOP_K1: the pages' examples exactly, properties against tests/reference/topk.py over
types and ranks, one row per rule, jit / vmap / gradients, ties, NaN and signed zeros."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import reference
import strategies as S
from hypothesis import given
from hypothesis import strategies as st
from jax import lax
from jax.test_util import check_grads

import dml_jax as dml

T = dml.TensorDesc
TOPK, TOPK1 = dml.TopKOperatorDesc, dml.TopK1OperatorDesc
PAGE = np.array([[[[0, 1, 10, 11], [3, 2, 9, 8], [4, 5, 6, 7]]]], np.float32)
TIES = np.array([[[[1, 2, 2, 3], [3, 4, 5, 5], [6, 6, 6, 6]]]], np.float32)


def _top_k(cls, x: T, axis: int, k: int, direction=None, index_type="UINT32"):
    sizes = list(x.sizes)
    sizes[axis] = k
    extra = {} if direction is None else {"axis_direction": direction}
    return cls(
        x, x.like(sizes=sizes), x.like(sizes=sizes, data_type=index_type), axis=axis, k=k, **extra
    )


def _pair(values, indices, vtype=np.float32, itype=np.uint32):
    return (np.array([[values]], vtype), np.array([[indices]], itype))


X34 = T("FLOAT32", [1, 1, 3, 4])
_PAGE_1 = _pair([[11, 10], [9, 8], [7, 6]], [[3, 2], [2, 3], [3, 2]])
_PAGE_2 = _pair([[4, 5, 10, 11], [3, 2, 9, 8]], [[2, 2, 0, 0], [1, 1, 1, 1]])
_PAGE_3 = _pair([[3, 2, 2], [5, 5, 4], [6, 6, 6]], [[3, 1, 2], [2, 3, 1], [0, 1, 2]])
_PAGE_4 = _pair([[1, 2, 2], [3, 4, 5], [6, 6, 6]], [[0, 1, 2], [0, 1, 2], [0, 1, 2]])

SEEDS = [
    # DML_TOP_K_OPERATOR_DESC's three examples
    (_top_k(TOPK, X34, 3, 2), (PAGE,), _PAGE_1),
    (_top_k(TOPK, X34, 2, 2), (PAGE,), _PAGE_2),
    (_top_k(TOPK, X34, 3, 3), (TIES,), _PAGE_3),
    # DML_TOP_K1_OPERATOR_DESC's four examples
    (_top_k(TOPK1, X34, 3, 2, "DECREASING"), (PAGE,), _PAGE_1),
    (_top_k(TOPK1, X34, 2, 2, "DECREASING"), (PAGE,), _PAGE_2),
    (_top_k(TOPK1, X34, 3, 3, "DECREASING"), (TIES,), _PAGE_3),
    (_top_k(TOPK1, X34, 3, 3, "INCREASING"), (TIES,), _PAGE_4),
    # Worked by hand: NaN is the extreme of the search in either direction, -0.0 ties +0.0
    # (first index first), K equal to the axis size is a full sort.
    (
        _top_k(TOPK1, T("FLOAT32", [5]), 0, 5, "DECREASING"),
        (np.array([0.0, np.nan, -0.0, np.inf, -1.0], np.float32),),
        (
            np.array([np.nan, np.inf, 0.0, -0.0, -1.0], np.float32),
            np.array([1, 3, 0, 2, 4], np.uint32),
        ),
    ),
    (
        _top_k(TOPK1, T("FLOAT32", [5]), 0, 3, "INCREASING"),
        (np.array([-0.0, 2.0, np.nan, 0.0, -np.inf], np.float32),),
        (np.array([np.nan, -np.inf, -0.0], np.float32), np.array([2, 4, 0], np.uint32)),
    ),
    # Integers across their range, on axis 0 of a 2-D tensor, with UINT64 indices.
    (
        _top_k(TOPK1, T("INT8", [3, 2]), 0, 2, "INCREASING", "UINT64"),
        (np.array([[127, -128], [-128, 0], [5, -128]], np.int8),),
        (np.array([[-128, -128], [5, -128]], np.int8), np.array([[1, 0], [2, 2]], np.uint64)),
    ),
    (
        _top_k(TOPK, T("UINT32", [1, 1, 1, 4]), 3, 2),
        (np.array([[[[7, 2**32 - 1, 0, 2**32 - 1]]]], np.uint32),),
        (np.full((1, 1, 1, 2), 2**32 - 1, np.uint32), np.array([[[[1, 3]]]], np.uint32)),
    ),
]


@pytest.mark.parametrize("desc, inputs, expected", SEEDS)
def test_documented_and_worked_examples(desc, inputs, expected):
    S.assert_same(S.run(S.Case(desc, inputs)), expected)
    S.assert_same(reference.reference(desc, *inputs), expected)


def test_signed_zeros_keep_their_sign():
    # -0.0 ties +0.0, so the first one comes first and the values are the elements themselves.
    d = _top_k(TOPK, T("FLOAT32", [1, 1, 1, 4]), 3, 4)
    values, indices = S.run(S.Case(d, (np.array([[[[-0.0, 0.0, -0.0, 0.0]]]], np.float32),)))
    np.testing.assert_array_equal(np.signbit(values).ravel(), [True, False, True, False])
    np.testing.assert_array_equal(indices.ravel(), [0, 1, 2, 3])


# --- properties -----------------------------------------------------------------------------

_SPECIALS = np.array([np.nan, -0.0, 0.0, np.inf, -np.inf])


@st.composite
def topk_cases(draw, cls=None, types=None, ranks=None, max_elements: int = 256):
    cls = cls or draw(st.sampled_from([TOPK, TOPK1]))
    key = cls.operator_type
    type_name = draw(st.sampled_from(types or S.types_at_newest(key)))
    shape = draw(S.shapes(ranks or S.ranks_at_newest(key), max_elements=max_elements))
    axis = draw(st.integers(0, len(shape) - 1))
    k = draw(st.integers(1, shape[axis]))
    direction = None if cls is TOPK else draw(st.sampled_from(["INCREASING", "DECREASING"]))
    index_type = draw(st.sampled_from(["UINT32", "UINT64"]))
    desc = _top_k(cls, T(type_name, shape), axis, k, direction, index_type)
    rng = draw(S.seeds())
    x = S.values(rng, type_name, shape, draw(st.sampled_from(["full", "ties"])))
    if type_name.startswith("FLOAT") and draw(st.booleans()):
        where = rng.random(shape) < 0.25
        x[where] = rng.choice(_SPECIALS, size=shape)[where]
    return S.Case(desc, (x,))


@given(topk_cases())
def test_top_k_matches_reference(case):
    S.assert_same(S.run(case), reference.reference(case.desc, *case.inputs))


@S.FEW
@given(topk_cases())
def test_top_k_jit_equals_eager(case):
    S.check_jit(case)


@S.FEW
@given(topk_cases(max_elements=128))
def test_top_k_vmap_equals_loop(case):
    S.check_vmap(case)


@S.FEW
@given(topk_cases(cls=TOPK1, types=["FLOAT32", "INT32", "UINT8", "FLOAT16"]))
def test_k_of_one_is_argmax_or_argmin(case):
    """TOP_K1 with K = 1 reports the index ARGMAX / ARGMIN (INCREASING) report: the same order,
    NaN included, and the first of equal extremes."""
    d = case.desc
    one = _top_k(TOPK1, d.input_tensor, d.axis, 1, d.axis_direction, "UINT32")
    largest = d.axis_direction is dml.AxisDirection.DECREASING
    cls = dml.ArgMaxOperatorDesc if largest else dml.ArgMinOperatorDesc
    arg = cls(one.input_tensor, one.output_index_tensor, axes=[d.axis])
    _, index = S.run(S.Case(one, case.inputs))
    (want,) = S.run(S.Case(arg, case.inputs))
    np.testing.assert_array_equal(index, want)


@S.FEW
@given(st.data())
def test_top_k_check_grads(data):
    # Distinct, well separated values: a finite-difference step never reorders them.
    case = data.draw(topk_cases(types=["FLOAT32"], max_elements=64))
    x = case.inputs[0]
    rng = np.random.default_rng(x.size)
    x = (rng.permutation(x.size).reshape(x.shape) * 0.5).astype(np.float32)
    with S.x64(case.desc):
        op = dml.compile_operator(case.desc)
        assert op.differentiable
        check_grads(jax.jit(lambda a: op.fn(a)[0]), (jnp.asarray(x),), order=1, eps=1e-2)


def test_gradient_goes_to_the_selected_elements():
    d = _top_k(TOPK1, T("FLOAT32", [6]), 0, 3, "INCREASING")
    op = dml.compile_operator(d)
    x = jnp.array([5.0, 1.0, 4.0, 1.0, 0.0, 9.0])
    w = jnp.array([1.0, 10.0, 100.0])
    g = jax.grad(lambda a: (w * op.fn(a)[0]).sum())(x)
    # smallest three: 0.0 (index 4), then the two 1.0s by index (1, 3)
    np.testing.assert_array_equal(np.asarray(g), [0, 10, 0, 100, 1, 0])


@pytest.mark.parametrize("type_name, expected", [("FLOAT16", True), ("INT32", False)])
def test_top_k_differentiable_flag(type_name, expected):
    d = _top_k(TOPK, T(type_name, [1, 1, 2, 3]), 3, 2)
    assert dml.compile_operator(d).differentiable is expected


def test_lax_top_k_lists_ties_by_ascending_index():
    """The lowering relies on lax.top_k's documented tie rule; pinned here on long rows (a
    backend's tie rule would show as an unsorted index run)."""
    rng = np.random.default_rng(3)
    keys = jnp.asarray(rng.integers(0, 4, (8, 600)).astype(np.int32))
    values, index = jax.jit(lambda a: lax.top_k(a, 600))(keys)
    values, index = np.asarray(values), np.asarray(index)
    same = values[:, 1:] == values[:, :-1]
    assert np.all(index[:, 1:][same] > index[:, :-1][same])


def test_large_rows_match_numpy_stable_sort():
    # Rows of 1024 (the benchmark shape), few distinct values so ties are everywhere.
    rng = np.random.default_rng(0)
    x = rng.integers(-3, 4, (4, 1024)).astype(np.float32)
    for direction in ("DECREASING", "INCREASING"):
        d = _top_k(TOPK1, T("FLOAT32", [4, 1024]), 1, 8, direction)
        values, index = S.run(S.Case(d, (x,)))
        order = np.argsort(-x if direction == "DECREASING" else x, axis=1, kind="stable")[:, :8]
        np.testing.assert_array_equal(index, order.astype(np.uint32))
        np.testing.assert_array_equal(values, np.take_along_axis(x, order, axis=1))


# --- rules ------------------------------------------------------------------------------------


def _bad(cls=TOPK1, **changes):
    def make():
        x = changes.get("x", T("FLOAT32", [2, 5]))
        axis, k = changes.get("axis", 1), changes.get("k", 3)
        values = changes.get("values", T("FLOAT32", [2, 3]))
        index = changes.get("index", T("UINT32", [2, 3]))
        extra = {} if cls is TOPK else {"axis_direction": "DECREASING"}
        return cls(x, values, index, axis=axis, k=k, **extra)

    return make


INVALID_ROWS = [
    (_bad(axis=2), r"^DML_OPERATOR_TOP_K1: Axis must be in \[0, 1\]"),
    (_bad(k=0, values=T("FLOAT32", [2, 1]), index=T("UINT32", [2, 1])), r"K must be > 0, got 0"),
    (
        _bad(k=6, values=T("FLOAT32", [2, 6]), index=T("UINT32", [2, 6])),
        r"K must be <= InputTensor\.Sizes\[1\] \(5\), got 6",
    ),
    (_bad(values=T("FLOAT32", [2, 4])), r"OutputValueTensor\.Sizes\[1\] must equal 3, got 4"),
    (_bad(index=T("UINT32", [1, 3])), r"OutputIndexTensor\.Sizes\[0\] must equal 2, got 1"),
    (_bad(values=T("FLOAT16", [2, 3])), r"OutputValueTensor\.DataType must equal FLOAT32"),
    (_bad(index=T("UINT32", [2, 3, 1])), r"OutputIndexTensor\.DimensionCount must equal 2"),
    (
        _bad(cls=TOPK, index=T("INT32", [2, 3])),
        r"^DML_OPERATOR_TOP_K: OutputIndexTensor with data type INT32 .* not supported",
    ),
    (
        _bad(x=T("FLOAT64", [2, 5]), values=T("FLOAT64", [2, 3])),
        r"InputTensor with data type FLOAT64 .* no feature level supports it",
    ),
]


@pytest.mark.parametrize("factory, pattern", INVALID_ROWS)
def test_invalid_descriptions_are_rejected(factory, pattern):
    with pytest.raises(dml.ValidationError, match=pattern):
        dml.validate(factory())


LEVEL_ROWS = [
    # (factory, feature level, pattern): the support tables' rows
    (_bad(), "2_0", r"TOP_K1 requires feature level 2_1 or later"),
    (
        _bad(
            cls=TOPK,
            x=T("INT32", [1, 1, 2, 5]),
            values=T("INT32", [1, 1, 2, 3]),
            axis=3,
            index=T("UINT32", [1, 1, 2, 3]),
        ),
        "1_0",
        r"InputTensor with data type INT32 .* lowest feature level that supports it is 2_1",
    ),
    (_bad(), "2_1", r"InputTensor .* DimensionCount 2 .* lowest .* is 3_1"),
    (_bad(index=T("UINT64", [2, 3])), "4_1", r"OutputIndexTensor with data type UINT64 .* 5_0"),
    (
        _bad(x=T("INT64", [2, 5]), values=T("INT64", [2, 3])),
        "3_1",
        r"InputTensor with data type INT64 .* lowest feature level that supports it is 5_0",
    ),
]


@pytest.mark.parametrize("factory, level, pattern", LEVEL_ROWS)
def test_support_tables_by_feature_level(factory, level, pattern):
    with pytest.raises(dml.ValidationError, match=pattern):
        dml.validate(factory(), feature_level=level)


def test_top_k_exists_from_the_first_feature_level():
    d = _top_k(TOPK, X34, 3, 2)
    dml.validate(d, feature_level="1_0")
    with pytest.raises(dml.ValidationError, match="FLOAT64|INT8"):
        dml.validate(_top_k(TOPK, T("INT8", [1, 1, 3, 4]), 3, 2), feature_level="2_0")
