"""GATHER, GATHER_ELEMENTS, GATHER_ND, GATHER_ND1, SCATTER (SCATTER_ELEMENTS), SCATTER_ND,
ONE_HOT and NONZERO_COORDINATES: the pages' examples exactly, hand-worked cases of the choices
DirectML leaves open (out-of-range indices select nothing, the last repeated scatter index wins,
rows past the nonzero count are 0), properties against tests/reference/indexing.py over every
data type, index type and rank, one row per rule, jit / vmap / gradients, and the SCATTER_ELEMENTS
alias."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import reference
import strategies as S
from hypothesis import given, settings
from hypothesis import strategies as st

import dml_jax as dml
from dml_jax import registry, support

T = dml.TensorDesc
GATHER, GATHER_ELEMENTS = dml.GatherOperatorDesc, dml.GatherElementsOperatorDesc
GATHER_ND, GATHER_ND1 = dml.GatherNdOperatorDesc, dml.GatherNd1OperatorDesc
SCATTER, SCATTER_ND = dml.ScatterOperatorDesc, dml.ScatterNdOperatorDesc
ONE_HOT, NONZERO = dml.OneHotOperatorDesc, dml.NonzeroCoordinatesOperatorDesc


def f32(values, shape) -> np.ndarray:
    return np.array(values, np.float32).reshape(shape)


def u32(values, shape) -> np.ndarray:
    return np.array(values, np.uint32).reshape(shape)


def i32(values, shape) -> np.ndarray:
    return np.array(values, np.int32).reshape(shape)


def _gather(x, at, out, axis, k):
    return GATHER(
        T("FLOAT32", x), T(at[0], at[1]), T("FLOAT32", out), axis=axis, index_dimensions=k
    )


SEEDS = [
    # DML_GATHER_OPERATOR_DESC's examples 1, 2, 4 and 5 exactly.
    (
        _gather([4], ("UINT32", [5]), [5], 0, 1),
        (f32([11, 12, 13, 14], 4), u32([3, 1, 3, 0, 2], 5)),
        (f32([14, 12, 14, 11, 13], 5),),
    ),
    (
        _gather([3, 2], ("UINT32", [1, 4]), [4, 2], 0, 1),
        (f32(range(1, 7), (3, 2)), u32([0, 1, 1, 2], (1, 4))),
        (f32([1, 2, 3, 4, 3, 4, 5, 6], (4, 2)),),
    ),
    (
        _gather([1, 3, 3], ("UINT32", [1, 1, 2]), [3, 1, 2], 2, 2),
        (f32(range(1, 10), (1, 3, 3)), u32([0, 2], (1, 1, 2))),
        (f32([1, 3, 4, 6, 7, 9], (3, 1, 2)),),
    ),
    (
        _gather([1, 3, 2], ("UINT32", [1, 2, 2]), [2, 2, 2], 1, 2),
        (f32(range(1, 7), (1, 3, 2)), u32([0, 1, 1, 2], (1, 2, 2))),
        (f32([1, 2, 3, 4, 3, 4, 5, 6], (2, 2, 2)),),
    ),
    # The page's example 3 (columns swapped) states IndexDimensions 2, which its own rule turns
    # into 3 output dimensions for a 2-D output; with the one index dimension it has, it holds.
    (
        _gather([3, 2], ("UINT32", [1, 2]), [3, 2], 1, 1),
        (f32(range(1, 7), (3, 2)), u32([1, 0], (1, 2))),
        (f32([2, 1, 4, 3, 6, 5], (3, 2)),),
    ),
    # Worked by hand: negative indices count from the end, out of range reads 0 (also a huge
    # UINT64 and an INT32 below -size), and IndexDimensions 0 (one scalar index) drops Axis.
    (
        _gather([4], ("INT32", [5]), [5], 0, 1),
        (f32([11, 12, 13, 14], 4), i32([-1, -4, -5, 4, 2], 5)),
        (f32([14, 11, 0, 0, 13], 5),),
    ),
    (
        _gather([2, 3], ("UINT64", [1, 3]), [3, 3], 0, 1),
        (f32(range(6), (2, 3)), np.array([[1, 2**63 + 1, 2**32]], np.uint64)),
        (f32([3, 4, 5, 0, 0, 0, 0, 0, 0], (3, 3)),),
    ),
    (
        _gather([2, 3], ("INT64", [1, 1]), [1, 2], 1, 0),
        (f32(range(6), (2, 3)), np.array([[-1]], np.int64)),
        (f32([2, 5], (1, 2)),),
    ),
    # DML_GATHER_ELEMENTS_OPERATOR_DESC's example, plus negative and out-of-range indices.
    (
        GATHER_ELEMENTS(T("FLOAT32", [3, 3]), T("UINT32", [2, 3]), T("FLOAT32", [2, 3]), axis=0),
        (f32(range(1, 10), (3, 3)), u32([1, 2, 0, 2, 0, 0], (2, 3))),
        (f32([4, 8, 3, 7, 2, 3], (2, 3)),),
    ),
    (
        GATHER_ELEMENTS(T("INT8", [2, 3]), T("INT64", [2, 2]), T("INT8", [2, 2]), axis=1),
        (np.arange(1, 7, dtype=np.int8).reshape(2, 3), np.array([[-1, 3], [-3, -4]], np.int64)),
        (np.array([[3, 0], [4, 0]], np.int8),),
    ),
    # DML_GATHER_ND_OPERATOR_DESC's two examples.
    (
        GATHER_ND(T("FLOAT32", [2, 2]), T("UINT32", [2, 1]), T("FLOAT32", [2, 2]), 2, 2),
        (f32([0, 1, 2, 3], (2, 2)), u32([1, 0], (2, 1))),
        (f32([2, 3, 0, 1], (2, 2)),),
    ),
    (
        GATHER_ND(
            T("FLOAT32", [1, 2, 2, 2]), T("UINT32", [1, 1, 2, 2]), T("FLOAT32", [1, 1, 2, 2]), 3, 2
        ),
        (f32(range(8), (1, 2, 2, 2)), u32([0, 1, 1, 0], (1, 1, 2, 2))),
        (f32([2, 3, 4, 5], (1, 1, 2, 2)),),
    ),
    # The output-size example of the page ({3,4,5,6,7} by a {1,2} array of 3-tuples), worked.
    (
        GATHER_ND(
            T("UINT8", [3, 4, 5, 6, 7]),
            T("INT32", [1, 1, 1, 2, 3]),
            T("UINT8", [1, 1, 2, 6, 7]),
            5,
            3,
        ),
        (
            (np.arange(2520) % 251).astype(np.uint8).reshape(3, 4, 5, 6, 7),
            i32([2, 3, 4, -1, 0, -5], (1, 1, 1, 2, 3)),
        ),
        (
            np.stack(
                [
                    (np.arange(2520) % 251).astype(np.uint8).reshape(3, 4, 5, 6, 7)[2, 3, 4],
                    (np.arange(2520) % 251).astype(np.uint8).reshape(3, 4, 5, 6, 7)[2, 0, 0],
                ]
            ).reshape(1, 1, 2, 6, 7),
        ),
    ),
    # DML_GATHER_ND1_OPERATOR_DESC's two examples, and a tuple with one coordinate out of range.
    (
        GATHER_ND1(T("FLOAT32", [2, 2]), T("UINT32", [2, 1]), T("FLOAT32", [2, 2]), 2, 2, 0),
        (f32([0, 1, 2, 3], (2, 2)), u32([1, 0], (2, 1))),
        (f32([2, 3, 0, 1], (2, 2)),),
    ),
    (
        GATHER_ND1(
            T("FLOAT32", [1, 3, 2, 2]),
            T("UINT32", [1, 3, 2, 2]),
            T("FLOAT32", [1, 1, 3, 2]),
            3,
            3,
            1,
        ),
        (f32(range(12), (1, 3, 2, 2)), u32([0, 0, 1, 1, 1, 1, 0, 0, 0, 1, 1, 0], (1, 3, 2, 2))),
        (f32([0, 3, 7, 4, 9, 10], (1, 1, 3, 2)),),
    ),
    (
        GATHER_ND1(T("FLOAT32", [2, 2]), T("INT32", [2, 2]), T("FLOAT32", [1, 2]), 2, 2, 0),
        (f32([0, 1, 2, 3], (2, 2)), i32([1, -1, 0, 2], (2, 2))),
        (f32([3, 0], (1, 2)),),
    ),
    # DML_SCATTER_OPERATOR_DESC's examples (example 2 with the {3,3} input its values show).
    (
        SCATTER(T("FLOAT32", [5]), T("UINT32", [4]), T("FLOAT32", [4]), T("FLOAT32", [5]), axis=0),
        (f32(range(5), 5), u32([3, 1, 3, 0], 4), f32([5, 6, 7, 8], 4)),
        (f32([8, 6, 2, 7, 4], 5),),
    ),
    (
        SCATTER(
            T("FLOAT32", [3, 3]),
            T("UINT32", [2, 3]),
            T("FLOAT32", [2, 3]),
            T("FLOAT32", [3, 3]),
            axis=0,
        ),
        (
            np.zeros((3, 3), np.float32),
            u32([1, 0, 2, 0, 2, 1], (2, 3)),
            f32([10, 11, 12, 20, 21, 22], (2, 3)),
        ),
        (f32([20, 11, 0, 10, 0, 22, 0, 21, 12], (3, 3)),),
    ),
    # Worked: repeated indices (the last update in row-major order wins), negative and
    # out-of-range indices (dropped).
    (
        SCATTER(
            T("INT16", [2, 4]), T("INT32", [2, 3]), T("INT16", [2, 3]), T("INT16", [2, 4]), axis=1
        ),
        (
            np.zeros((2, 4), np.int16),
            i32([1, 1, -1, 7, -5, 0], (2, 3)),
            np.array([[1, 2, 3], [4, 5, 6]], np.int16),
        ),
        (np.array([[0, 2, 0, 3], [6, 0, 0, 0]], np.int16),),
    ),
    # DML_SCATTER_ND_OPERATOR_DESC's example (tensors of equal rank, as its constraints require).
    (
        SCATTER_ND(
            T("FLOAT32", [1, 8]),
            T("UINT32", [4, 1]),
            T("FLOAT32", [1, 4]),
            T("FLOAT32", [1, 8]),
            1,
            2,
        ),
        (f32(range(1, 9), (1, 8)), u32([4, 3, 1, 7], (4, 1)), f32([9, 10, 11, 12], (1, 4))),
        (f32([1, 11, 3, 10, 9, 6, 7, 12], (1, 8)),),
    ),
    # Worked: rows replaced, a repeated row (the later wins), a tuple out of range (dropped).
    (
        SCATTER_ND(
            T("FLOAT32", [3, 2]),
            T("INT64", [4, 1]),
            T("FLOAT32", [4, 2]),
            T("FLOAT32", [3, 2]),
            2,
            2,
        ),
        (
            np.zeros((3, 2), np.float32),
            np.array([[2], [-1], [0], [3]], np.int64),
            f32(range(1, 9), (4, 2)),
        ),
        (f32([5, 6, 0, 0, 3, 4], (3, 2)),),
    ),
    # DML_ONE_HOT_OPERATOR_DESC's four examples.
    (
        ONE_HOT(
            T("UINT32", [1, 1, 3, 1]),
            T("FLOAT32", [1, 1, 1, 2]),
            T("FLOAT32", [1, 1, 3, 4]),
            axis=3,
        ),
        (u32([0, 3, 2], (1, 1, 3, 1)), f32([0, 1], (1, 1, 1, 2))),
        (f32([1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0], (1, 1, 3, 4)),),
    ),
    (
        ONE_HOT(
            T("UINT32", [1, 1, 1, 4]),
            T("FLOAT32", [1, 1, 1, 2]),
            T("FLOAT32", [1, 1, 3, 4]),
            axis=2,
        ),
        (u32([0, 2, 1, 0], (1, 1, 1, 4)), f32([0, 1], (1, 1, 1, 2))),
        (f32([1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0], (1, 1, 3, 4)),),
    ),
    (
        ONE_HOT(
            T("UINT32", [1, 1, 3, 1]),
            T("FLOAT32", [1, 1, 3, 1]),
            T("FLOAT32", [1, 1, 3, 4]),
            axis=3,
        ),
        (u32([0, 3, 2], (1, 1, 3, 1)), f32([4, 2, 9], (1, 1, 3, 1))),
        (f32([2, 4, 4, 4, 4, 4, 4, 2, 4, 4, 2, 4], (1, 1, 3, 4)),),
    ),
    (
        ONE_HOT(
            T("INT32", [1, 1, 3, 1]), T("FLOAT32", [1, 1, 1, 2]), T("FLOAT32", [1, 1, 3, 4]), axis=3
        ),
        (i32([-3, 100, 3], (1, 1, 3, 1)), f32([0, 1], (1, 1, 1, 2))),
        (f32([0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1], (1, 1, 3, 4)),),
    ),
    # DML_NONZERO_COORDINATES_OPERATOR_DESC's example (-0.0 is zero; rows past the count 0).
    (
        NONZERO(T("FLOAT32", [1, 1, 2, 4]), T("UINT32", [1, 1, 1, 1]), T("UINT32", [1, 1, 8, 3])),
        (f32([1.0, 0.0, 0.0, 2.0, -0.0, 3.5, 0.0, -5.2], (1, 1, 2, 4)),),
        (
            u32([4], (1, 1, 1, 1)),
            u32([0, 0, 0, 0, 0, 3, 0, 1, 1, 0, 1, 3] + [0] * 12, (1, 1, 8, 3)),
        ),
    ),
    # The page's ordering example: nonzeros at {1,0}, {1,2}, {0,5} come out by element index;
    # NaN counts as nonzero.
    (
        NONZERO(T("FLOAT16", [2, 6]), T("UINT32", [1]), T("UINT32", [12, 2])),
        (np.array([[0, 0, 0, 0, 0, 7], [np.nan, 0, -1, 0, 0, 0]], np.float16),),
        (u32([3], 1), u32([0, 5, 1, 0, 1, 2] + [0] * 18, (12, 2))),
    ),
]


@pytest.mark.parametrize("desc, inputs, expected", SEEDS)
def test_documented_and_worked_examples(desc, inputs, expected):
    case = S.Case(desc, inputs)
    S.assert_same(S.run(case), expected)
    with S.x64(desc):
        S.assert_same(reference.reference(desc, *inputs), expected)


# --- the SCATTER_ELEMENTS alias ---------------------------------------------------------------


def test_scatter_elements_alias_is_scatter():
    assert dml.ScatterElementsOperatorDesc is dml.ScatterOperatorDesc
    spec = registry.lookup("DML_OPERATOR_SCATTER")
    for name in ("DML_OPERATOR_SCATTER_ELEMENTS", "SCATTER_ELEMENTS", "SCATTER"):
        assert registry.parse_operator_type(name) is spec
    desc = _s()()
    obj = dml.operator_desc_to_json(desc)
    assert obj["type"] == "DML_OPERATOR_SCATTER"
    for name in ("DML_OPERATOR_SCATTER_ELEMENTS", "SCATTER_ELEMENTS"):
        assert dml.operator_desc_from_json({**obj, "type": name}) == desc
    assert "DML_OPERATOR_SCATTER_ELEMENTS" not in dml.registered_operators()


# --- properties -----------------------------------------------------------------------------

INDEX_TYPES = ("INT32", "INT64", "UINT32", "UINT64")


def index_types(key: str) -> list[str]:
    row = support.row_at(registry.support_tables()[key], S.NEWEST)
    return sorted(t.name for t in row.column("inputs", "IndicesTensor")[0])


def index_values(rng, type_name: str, shape, sizes) -> np.ndarray:
    """Indices for dimensions of ``sizes`` (one size, or one per last-axis entry): mostly in
    range, some negative (from the end) for signed types, some out of range (huge too)."""
    dtype = np.dtype(type_name.lower())
    size = np.broadcast_to(np.asarray(sizes, np.int64), shape)
    low = -size - 1 if dtype.kind == "i" else np.zeros(shape, np.int64)
    values = rng.integers(low, size + 1).astype(dtype)
    huge = dtype.type(np.iinfo(dtype).max if dtype.kind == "u" else np.iinfo(dtype).min)
    return np.where(rng.random(shape) < 0.05, huge, values).astype(dtype)


def _data(rng, type_name: str, shape) -> np.ndarray:
    return S.values(rng, type_name, shape, "full")


@st.composite
def _shape(draw, rank: int, max_elements: int = 64, max_dim: int = 4):
    return draw(S.shapes((rank,), max_elements=max_elements, max_dim=max_dim))


@st.composite
def gather_cases(draw, types=None):
    key = "DML_OPERATOR_GATHER"
    type_name = draw(st.sampled_from(types or S.types_at_newest(key)))
    at_type = draw(st.sampled_from(index_types(key)))
    rank = draw(st.sampled_from(S.ranks_at_newest(key)))
    k = draw(st.integers(0, min(rank, 3)))
    axis = draw(st.integers(0, rank - 1))
    x = list(draw(_shape(rank)))
    inner = list(draw(_shape(k, max_elements=8, max_dim=3))) if k else []
    # The first k - 1 derived dimensions are dropped into DimensionCount: make them 1.
    drop = max(0, k - 1)
    for i in range(min(axis, drop)):
        x[i] = 1
    for i in range(max(0, drop - axis)):
        inner[i] = 1
    at_sizes = [1] * (rank - k) + inner
    full = x[:axis] + inner + x[axis + 1 :]
    out = full[len(full) - rank :] if len(full) >= rank else [1] * (rank - len(full)) + full
    desc = GATHER(T(type_name, x), T(at_type, at_sizes), T(type_name, out), axis, k)
    rng = draw(S.seeds())
    return S.Case(desc, (_data(rng, type_name, x), index_values(rng, at_type, at_sizes, x[axis])))


@st.composite
def gather_elements_cases(draw, types=None):
    key = "DML_OPERATOR_GATHER_ELEMENTS"
    type_name = draw(st.sampled_from(types or S.types_at_newest(key)))
    at_type = draw(st.sampled_from(index_types(key)))
    x = draw(S.shapes(S.ranks_at_newest(key), max_elements=128))
    axis = draw(st.integers(0, len(x) - 1))
    at = x[:axis] + (draw(st.integers(1, 4)),) + x[axis + 1 :]
    desc = GATHER_ELEMENTS(T(type_name, x), T(at_type, at), T(type_name, at), axis=axis)
    rng = draw(S.seeds())
    return S.Case(desc, (_data(rng, type_name, x), index_values(rng, at_type, at, x[axis])))


@st.composite
def _nd_layout(draw, key: str, batch: bool):
    """(rank, input sizes, indices sizes, ri, qi, k, b, derived sizes)."""
    rank = draw(st.sampled_from(S.ranks_at_newest(key)))
    ri = draw(st.integers(1, rank))
    b = draw(st.integers(0, ri - 1)) if batch else 0
    k = draw(st.integers(1, min(ri - b, 3)))
    qi = draw(st.integers(b + 1, min(rank, rank - (ri - b - k) + 1)))
    xm = list(draw(_shape(ri)))
    inner = list(draw(_shape(qi - 1 - b, max_elements=8, max_dim=3))) if qi - 1 - b else []
    im = xm[:b] + inner + [k]
    full = im[:-1] + xm[b + k :]
    return rank, [1] * (rank - ri) + xm, [1] * (rank - qi) + im, ri, qi, k, b, full


def _fit(sizes, rank):
    return [1] * (rank - len(sizes)) + list(sizes)


@st.composite
def gather_nd_cases(draw, cls=None, types=None):
    cls = cls or draw(st.sampled_from([GATHER_ND, GATHER_ND1]))
    key = cls.operator_type
    type_name = draw(st.sampled_from(types or S.types_at_newest(key)))
    at_type = draw(st.sampled_from(index_types(key)))
    rank, x, at, ri, qi, k, b, full = draw(_nd_layout(key, cls is GATHER_ND1))
    extra = (b,) if cls is GATHER_ND1 else ()
    desc = cls(T(type_name, x), T(at_type, at), T(type_name, _fit(full, rank)), ri, qi, *extra)
    rng = draw(S.seeds())
    bounds = tuple(x[rank - ri + b : rank - ri + b + k])
    return S.Case(desc, (_data(rng, type_name, x), index_values(rng, at_type, at, bounds)))


@st.composite
def scatter_cases(draw, types=None):
    key = "DML_OPERATOR_SCATTER"
    type_name = draw(st.sampled_from(types or S.types_at_newest(key)))
    at_type = draw(st.sampled_from(index_types(key)))
    x = draw(S.shapes(S.ranks_at_newest(key), max_elements=128))
    axis = draw(st.integers(0, len(x) - 1))
    at = x[:axis] + (draw(st.integers(1, 5)),) + x[axis + 1 :]
    desc = SCATTER(T(type_name, x), T(at_type, at), T(type_name, at), T(type_name, x), axis=axis)
    rng = draw(S.seeds())
    inputs = (
        _data(rng, type_name, x),
        index_values(rng, at_type, at, x[axis]),
        _data(rng, type_name, at),
    )
    return S.Case(desc, inputs)


@st.composite
def scatter_nd_cases(draw, types=None):
    key = "DML_OPERATOR_SCATTER_ND"
    type_name = draw(st.sampled_from(types or S.types_at_newest(key)))
    at_type = draw(st.sampled_from(index_types(key)))
    rank, x, at, ri, qi, k, _, full = draw(_nd_layout(key, batch=False))
    updates = _fit(full, rank)
    desc = SCATTER_ND(
        T(type_name, x), T(at_type, at), T(type_name, updates), T(type_name, x), ri, qi
    )
    rng = draw(S.seeds())
    bounds = tuple(x[rank - ri : rank - ri + k])
    inputs = (
        _data(rng, type_name, x),
        index_values(rng, at_type, at, bounds),
        _data(rng, type_name, updates),
    )
    return S.Case(desc, inputs)


@st.composite
def one_hot_cases(draw, types=None):
    key = "DML_OPERATOR_ONE_HOT"
    type_name = draw(st.sampled_from(types or S.types_at_newest(key)))
    at_type = draw(st.sampled_from(index_types(key)))
    out = draw(S.shapes(S.ranks_at_newest(key), max_elements=128))
    rank = len(out)
    axis = draw(st.integers(0, rank - 1))
    at = out[:axis] + (1,) + out[axis + 1 :]
    values = list(draw(_shape(rank, max_elements=6, max_dim=3)))
    if math.prod(values) < 2:
        values[draw(st.integers(0, rank - 1))] = 2
    desc = ONE_HOT(T(at_type, at), T(type_name, values), T(type_name, out), axis=axis)
    rng = draw(S.seeds())
    inputs = (index_values(rng, at_type, at, out[axis]), _data(rng, type_name, values))
    return S.Case(desc, inputs)


@st.composite
def nonzero_cases(draw, types=None):
    key = "DML_OPERATOR_NONZERO_COORDINATES"
    type_name = draw(st.sampled_from(types or S.types_at_newest(key)))
    x = draw(S.shapes(S.ranks_at_newest(key), max_elements=96))
    lead = next((i for i, s in enumerate(x) if s != 1), len(x))
    n = draw(st.integers(max(1, len(x) - lead), len(x)))
    coords_rank = draw(st.integers(2, 8))
    count_rank = draw(st.integers(1, 8))
    desc = NONZERO(
        T(type_name, x),
        T("UINT32", [1] * count_rank),
        T("UINT32", [1] * (coords_rank - 2) + [math.prod(x), n]),
    )
    rng = draw(S.seeds())
    values = S.values(rng, type_name, x, "ties")  # many zeros
    if np.dtype(type_name.lower()).kind == "f":
        values = np.where(rng.random(x) < 0.2, -0.0, values).astype(values.dtype)
    return S.Case(desc, (values,))


# jit, vmap and finite differences compile several programs per example: an eighth of the
# profile's examples per operator keeps this module fast; "thorough" still scales them up.
TRANSFORMS = settings(max_examples=max(3, settings.default.max_examples // 8))

ALL_CASES = {
    "GATHER": gather_cases,
    "GATHER_ELEMENTS": gather_elements_cases,
    "GATHER_ND": gather_nd_cases,
    "SCATTER": scatter_cases,
    "SCATTER_ND": scatter_nd_cases,
    "ONE_HOT": one_hot_cases,
    "NONZERO_COORDINATES": nonzero_cases,
}


@pytest.mark.parametrize("name", list(ALL_CASES))
@S.HALF
@given(data=st.data())
def test_matches_reference(name, data):
    case = data.draw(ALL_CASES[name]())
    with S.x64(case.desc):
        want = reference.reference(case.desc, *case.inputs)
    S.assert_same(S.run(case), want)


@pytest.mark.parametrize("name", list(ALL_CASES))
@TRANSFORMS
@given(data=st.data())
def test_jit_and_vmap(name, data):
    case = data.draw(ALL_CASES[name]())
    S.check_jit(case)
    S.check_vmap(case)


# --- gradients ------------------------------------------------------------------------------

GRADIENT_CASES = {
    "GATHER": (gather_cases, (0,)),
    "GATHER_ELEMENTS": (gather_elements_cases, (0,)),
    "GATHER_ND": (gather_nd_cases, (0,)),
    "SCATTER": (scatter_cases, (0, 2)),
    "SCATTER_ND": (scatter_nd_cases, (0, 2)),
    "ONE_HOT": (one_hot_cases, (1,)),
}


@pytest.mark.parametrize("name", list(GRADIENT_CASES))
@TRANSFORMS
@given(data=st.data())
def test_check_grads(name, data):
    strategy, argnums = GRADIENT_CASES[name]
    case = data.draw(strategy(types=["FLOAT32"]))
    S.check_grads(case, argnums=argnums, atol=2e-2, rtol=2e-2)


def test_scatter_gradient_goes_to_the_winning_update():
    d = SCATTER(T("FLOAT32", [3]), T("UINT32", [3]), T("FLOAT32", [3]), T("FLOAT32", [3]), axis=0)
    op = dml.compile_operator(d)
    x, upd = jnp.zeros(3), jnp.zeros(3)
    at = jnp.array([2, 2, 7], jnp.uint32)  # 0 loses to 1; 7 is out of range
    gx, gu = jax.grad(lambda x, u: (op.fn(x, at, u) * jnp.arange(1.0, 4.0)).sum(), (0, 1))(x, upd)
    np.testing.assert_array_equal(np.asarray(gx), [1, 2, 0])
    np.testing.assert_array_equal(np.asarray(gu), [0, 3, 0])


def test_gather_gradient_sums_repeated_rows_and_skips_out_of_range():
    d = _gather([3, 2], ("INT32", [1, 4]), [4, 2], 0, 1)
    op = dml.compile_operator(d)
    at = jnp.array([[1, -2, 5, 0]], jnp.int32)
    g = jax.grad(lambda x: op.fn(x, at).sum())(jnp.zeros((3, 2)))
    np.testing.assert_array_equal(np.asarray(g), [[1, 1], [2, 2], [0, 0]])


# --- in a graph -------------------------------------------------------------------------------


def test_gather_feeds_a_scatter_in_a_graph():
    # Rows 2 and 0 gathered, then written back swapped: row 0 <- old row 2, row 2 <- old row 0.
    x = T("FLOAT32", [3, 2])
    at = T("UINT32", [2, 1])
    rows = T("FLOAT32", [2, 2])
    gather = GATHER_ND(x, at, rows, 2, 2)
    scatter = SCATTER_ND(x, T("UINT32", [2, 1]), rows, x, 2, 2)
    graph = dml.GraphDesc(
        input_count=3,
        output_count=1,
        nodes=[gather, scatter],
        input_edges=[
            dml.InputGraphEdge(0, 0, 0),
            dml.InputGraphEdge(1, 0, 1),
            dml.InputGraphEdge(0, 1, 0),
            dml.InputGraphEdge(2, 1, 1),
        ],
        output_edges=[dml.OutputGraphEdge(1, 0, 0)],
        intermediate_edges=[dml.IntermediateGraphEdge(0, 0, 1, 2)],
    )
    data = f32(range(6), (3, 2))
    y = dml.compile_graph(graph)(data, u32([2, 0], (2, 1)), u32([0, 2], (2, 1)))
    np.testing.assert_array_equal(np.asarray(y), [[4, 5], [2, 3], [0, 1]])


# --- rules ------------------------------------------------------------------------------------


def _g(x=(3, 2), at=(1, 4), out=(4, 2), axis=0, k=1, at_type="UINT32", out_type="FLOAT32"):
    return lambda: GATHER(
        T("FLOAT32", x), T(at_type, at), T(out_type, out), axis=axis, index_dimensions=k
    )


def _ge(x=(3, 3), at=(2, 3), out=(2, 3), axis=0):
    return lambda: GATHER_ELEMENTS(T("FLOAT32", x), T("UINT32", at), T("FLOAT32", out), axis=axis)


def _nd(x=(1, 2, 2, 2), at=(1, 1, 2, 2), out=(1, 1, 2, 2), ri=3, qi=2, b=None):
    cls = GATHER_ND if b is None else GATHER_ND1
    extra = () if b is None else (b,)
    return lambda: cls(T("FLOAT32", x), T("UINT32", at), T("FLOAT32", out), ri, qi, *extra)


def _s(x=(3, 3), at=(2, 3), upd=(2, 3), out=(3, 3), axis=0, upd_type="FLOAT32"):
    return lambda: SCATTER(
        T("FLOAT32", x), T("UINT32", at), T(upd_type, upd), T("FLOAT32", out), axis=axis
    )


def _snd(x=(1, 8), at=(4, 1), upd=(1, 4), ri=1, qi=2, upd_type="FLOAT32", out=(1, 8)):
    return lambda: SCATTER_ND(
        T("FLOAT32", x), T("UINT32", at), T(upd_type, upd), T("FLOAT32", out), ri, qi
    )


def _oh(at=(1, 1, 3, 1), values=(1, 1, 1, 2), out=(1, 1, 3, 4), axis=3, out_type="FLOAT32"):
    return lambda: ONE_HOT(T("UINT32", at), T("FLOAT32", values), T(out_type, out), axis=axis)


def _nz(
    x=(1, 1, 2, 4), count=(1, 1, 1, 1), coords=(1, 1, 8, 3), count_type="UINT32", x_type="FLOAT32"
):
    return lambda: NONZERO(T(x_type, x), T(count_type, count), T("UINT32", coords))


def _g4(at_type="UINT32"):
    return _g(x=(1, 1, 3, 2), at=(1, 1, 1, 4), out=(1, 1, 4, 2), axis=2, at_type=at_type)


INVALID_ROWS = [
    (_g(at=(4,)), r"^DML_OPERATOR_GATHER: IndicesTensor\.DimensionCount must equal"),
    (_g(axis=2), r"^DML_OPERATOR_GATHER: Axis must be in \[0, 1\]"),
    (_g(k=3), r"^DML_OPERATOR_GATHER: IndexDimensions must be in \[0, 2\]"),
    (_g(at=(2, 4), k=1), r"^DML_OPERATOR_GATHER: IndicesTensor\.Sizes\[0\] must be 1"),
    (_g(at=(2, 2), k=2, out=(2, 2)), r"^DML_OPERATOR_GATHER: IndexDimensions = 2 gives 3 output"),
    (_g(out=(4, 3)), r"^DML_OPERATOR_GATHER: OutputTensor\.Sizes\[1\] must equal 2, got 3"),
    (_g(out_type="FLOAT16"), r"^DML_OPERATOR_GATHER: OutputTensor\.DataType must equal FLOAT32"),
    (
        _g(at_type="INT16"),
        r"^DML_OPERATOR_GATHER: IndicesTensor with data type INT16 .* not supported",
    ),
    (_ge(axis=2), r"^DML_OPERATOR_GATHER_ELEMENTS: Axis must be in \[0, 1\]"),
    (
        _ge(at=(2, 2), out=(2, 2)),
        r"GATHER_ELEMENTS: IndicesTensor\.Sizes\[1\] must equal InputTensor",
    ),
    (_ge(out=(3, 3)), r"GATHER_ELEMENTS: OutputTensor\.Sizes\[0\] must equal 2, got 3"),
    (_ge(x=(3,)), r"GATHER_ELEMENTS: IndicesTensor\.DimensionCount must equal"),
    (_nd(ri=5), r"^DML_OPERATOR_GATHER_ND: InputDimensionCount must be in \[1, 4\]"),
    (_nd(qi=0), r"^DML_OPERATOR_GATHER_ND: IndicesDimensionCount must be in \[1, 4\]"),
    (_nd(ri=2), r"^DML_OPERATOR_GATHER_ND: InputTensor\.Sizes\[1\] must be 1"),
    (_nd(qi=1), r"^DML_OPERATOR_GATHER_ND: IndicesTensor\.Sizes\[2\] must be 1"),
    (
        _nd(at=(1, 1, 2, 4), out=(1, 1, 1, 2)),
        r"^DML_OPERATOR_GATHER_ND: IndicesTensor\.Sizes\[3\] is the index tuple size; it must be in \[1, 3\]",
    ),
    (_nd(out=(1, 1, 2, 3)), r"^DML_OPERATOR_GATHER_ND: OutputTensor\.Sizes\[3\] must equal 2"),
    (
        _nd(x=(2, 2, 2, 2), at=(2, 2, 2, 1), out=(2, 2, 2, 2), ri=4, qi=4),
        r"GATHER_ND: IndicesDimensionCount and InputDimensionCount give 6 meaningful dimensions",
    ),
    (
        _nd(b=3),
        r"^DML_OPERATOR_GATHER_ND1: BatchDimensionCount must be below IndicesDimensionCount",
    ),
    (
        _nd(x=(1, 3, 2, 2), at=(1, 2, 2, 2), out=(1, 1, 2, 2), qi=3, b=1),
        r"GATHER_ND1: IndicesTensor\.Sizes\[1\] must equal InputTensor\.Sizes\[1\] \(a batch",
    ),
    (
        _nd(x=(1, 3, 2, 2), at=(1, 3, 2, 3), out=(1, 1, 3, 2), qi=3, b=1),
        (
            r"GATHER_ND1: IndicesTensor\.Sizes\[3\] is the index tuple size; it must be in "
            r"\[1, 2\] \(InputDimensionCount - BatchDimensionCount\)"
        ),
    ),
    (_s(axis=2), r"^DML_OPERATOR_SCATTER: Axis must be in \[0, 1\]"),
    (_s(at=(2, 2), upd=(2, 2)), r"^DML_OPERATOR_SCATTER: IndicesTensor\.Sizes\[1\] must equal"),
    (_s(upd=(1, 3)), r"^DML_OPERATOR_SCATTER: UpdatesTensor\.Sizes\[0\] must equal IndicesTensor"),
    (_s(upd_type="FLOAT16"), r"^DML_OPERATOR_SCATTER: UpdatesTensor\.DataType must equal Input"),
    (_s(out=(3, 2)), r"^DML_OPERATOR_SCATTER: OutputTensor\.Sizes\[1\] must equal 3, got 2"),
    (_s(upd=(2, 3, 1)), r"^DML_OPERATOR_SCATTER: UpdatesTensor\.DimensionCount must equal"),
    (_snd(upd=(1, 3)), r"^DML_OPERATOR_SCATTER_ND: UpdatesTensor\.Sizes\[1\] must equal 4, got 3"),
    (_snd(upd_type="INT32"), r"^DML_OPERATOR_SCATTER_ND: UpdatesTensor\.DataType must equal"),
    (_snd(at=(4, 2)), r"^DML_OPERATOR_SCATTER_ND: IndicesTensor\.Sizes\[1\] is the index tuple"),
    (_snd(ri=3), r"^DML_OPERATOR_SCATTER_ND: InputDimensionCount must be in \[1, 2\]"),
    (_snd(out=(1, 9)), r"^DML_OPERATOR_SCATTER_ND: OutputTensor\.Sizes\[1\] must equal 8, got 9"),
    (_oh(axis=4), r"^DML_OPERATOR_ONE_HOT: Axis must be in \[0, 3\] \(IndicesTensor"),
    (_oh(at=(1, 1, 3, 2)), r"^DML_OPERATOR_ONE_HOT: IndicesTensor\.Sizes\[3\] must equal 1"),
    (_oh(values=(1, 1, 1, 1)), r"^DML_OPERATOR_ONE_HOT: ValuesTensor must hold at least two"),
    (_oh(out=(1, 1, 2, 4)), r"^DML_OPERATOR_ONE_HOT: OutputTensor\.Sizes\[2\] must equal 3, got 2"),
    (_oh(out_type="FLOAT16"), r"^DML_OPERATOR_ONE_HOT: OutputTensor\.DataType must equal FLOAT32"),
    (_oh(values=(1, 2)), r"^DML_OPERATOR_ONE_HOT: ValuesTensor\.DimensionCount must equal"),
    (
        _nz(count=(1, 1, 1, 2)),
        r"^DML_OPERATOR_NONZERO_COORDINATES: OutputCountTensor\.Sizes\[3\] must equal 1",
    ),
    (
        _nz(count_type="INT32"),
        r"NONZERO_COORDINATES: OutputCountTensor\.DataType must equal UINT32",
    ),
    (
        _nz(coords=(8,)),
        r"NONZERO_COORDINATES: OutputCoordinatesTensor\.DimensionCount must be at least 2",
    ),
    (
        _nz(coords=(1, 1, 8, 1)),
        r"NONZERO_COORDINATES: OutputCoordinatesTensor\.Sizes\[3\] \(N,.* \[2, 4\]",
    ),
    (_nz(coords=(1, 1, 8, 5)), r"NONZERO_COORDINATES: OutputCoordinatesTensor\.Sizes\[3\] \(N,"),
    (
        _nz(coords=(1, 1, 7, 3)),
        r"NONZERO_COORDINATES: OutputCoordinatesTensor\.Sizes\[2\] must equal 8",
    ),
    (
        _nz(coords=(2, 8, 3)),
        r"NONZERO_COORDINATES: OutputCoordinatesTensor\.Sizes\[0\] must equal 1",
    ),
    (
        _nz(x_type="INT64"),
        r"NONZERO_COORDINATES: InputTensor with data type INT64 .* not supported",
    ),
]


@pytest.mark.parametrize("factory, pattern", INVALID_ROWS)
def test_invalid_descriptions_are_rejected(factory, pattern):
    with pytest.raises(dml.ValidationError, match=pattern):
        dml.validate(factory())


@pytest.mark.parametrize(
    "factory, level, pattern",
    [
        (
            _g4(at_type="INT32"),
            "2_1",
            r"IndicesTensor with data type INT32 .* lowest feature level .* 3_0",
        ),
        (_g4(), "1_0", None),
        (_g(), "2_1", r"GATHER: InputTensor with data type FLOAT32 and DimensionCount 2"),
        (
            _nz(x=(2, 4), coords=(8, 2)),
            "3_0",
            r"DimensionCount 2 is not supported at feature level 3_0",
        ),
        (_nz(x=(2, 4), coords=(8, 2)), "4_0", None),
        (_nd(b=0), "2_1", r"GATHER_ND1 requires feature level 3_0"),
        (_oh(), "1_0", r"ONE_HOT requires feature level 2_0"),
    ],
)
def test_support_by_feature_level(factory, level, pattern):
    if pattern is None:
        dml.validate(factory(), level)
        return
    with pytest.raises(dml.ValidationError, match=pattern):
        dml.validate(factory(), level)


@pytest.mark.parametrize(
    "desc, expected",
    [
        (_g()(), True),
        (GATHER(T("INT32", [4]), T("INT32", [5]), T("INT32", [5]), 0, 1), False),
        (_s()(), True),
        (_oh()(), True),
        (_nz()(), False),
    ],
)
def test_differentiable_flag(desc, expected):
    assert dml.compile_operator(desc).differentiable is expected
