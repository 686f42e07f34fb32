"""CUMULATIVE_SUMMATION / CUMULATIVE_PRODUCT and the generators FILL_VALUE_CONSTANT,
FILL_VALUE_SEQUENCE, DIAGONAL_MATRIX, DIAGONAL_MATRIX1: the pages' examples exactly, properties
against tests/reference/scan_generate.py over types and ranks, one row per rule, jit / vmap /
gradients, and the generators (no input) in graphs."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import reference
import strategies as S
from hypothesis import given
from hypothesis import strategies as st

import dml_jax as dml

T = dml.TensorDesc
CUMSUM, CUMPROD = dml.CumulativeSummationOperatorDesc, dml.CumulativeProductOperatorDesc
PAGE_INPUT = np.array([[[[2, 1, 3, 5], [3, 8, 7, 3], [9, 6, 2, 4]]]], np.float32)
X34 = T("FLOAT32", [1, 1, 3, 4])


def _scan(cls, axis, direction, exclusive, x=X34):
    flag = "has_exclusive_sum" if cls is CUMSUM else "has_exclusive_product"
    return cls(x, x, axis=axis, axis_direction=direction, **{flag: exclusive})


def _f32(rows):
    return np.array([[rows]], np.float32)


SEEDS = [
    # DML_CUMULATIVE_SUMMATION_OPERATOR_DESC's four examples
    (
        _scan(CUMSUM, 3, "INCREASING", False),
        (PAGE_INPUT,),
        (_f32([[2, 3, 6, 11], [3, 11, 18, 21], [9, 15, 17, 21]]),),
    ),
    (
        _scan(CUMSUM, 3, "INCREASING", True),
        (PAGE_INPUT,),
        (_f32([[0, 2, 3, 6], [0, 3, 11, 18], [0, 9, 15, 17]]),),
    ),
    (
        _scan(CUMSUM, 3, "DECREASING", False),
        (PAGE_INPUT,),
        (_f32([[11, 9, 8, 5], [21, 18, 10, 3], [21, 12, 6, 4]]),),
    ),
    (
        _scan(CUMSUM, 2, "INCREASING", False),
        (PAGE_INPUT,),
        (_f32([[2, 1, 3, 5], [5, 9, 10, 8], [14, 15, 12, 12]]),),
    ),
    # DML_CUMULATIVE_PRODUCT_OPERATOR_DESC's examples
    (
        _scan(CUMPROD, 3, "INCREASING", False),
        (PAGE_INPUT,),
        (_f32([[2, 2, 6, 30], [3, 24, 168, 504], [9, 54, 108, 432]]),),
    ),
    (
        _scan(CUMPROD, 3, "INCREASING", True),
        (PAGE_INPUT,),
        (_f32([[1, 2, 2, 6], [1, 3, 24, 168], [1, 9, 54, 108]]),),
    ),
    (
        _scan(CUMPROD, 3, "DECREASING", False),
        (PAGE_INPUT,),
        (_f32([[30, 15, 15, 5], [504, 168, 21, 3], [432, 48, 8, 4]]),),
    ),
    (
        _scan(CUMPROD, 2, "INCREASING", False),
        (PAGE_INPUT,),
        (_f32([[2, 1, 3, 5], [6, 8, 21, 15], [54, 48, 42, 60]]),),
    ),
    # Worked by hand: an exclusive DECREASING sum, and UINT32 wrapping past 2**32.
    (
        _scan(CUMSUM, 1, "DECREASING", True, T("INT32", [1, 4])),
        (np.array([[1, 2, 3, 4]], np.int32),),
        (np.array([[9, 7, 4, 0]], np.int32),),
    ),
    (
        _scan(CUMSUM, 0, "INCREASING", False, T("UINT32", [3])),
        (np.array([2**32 - 1, 2, 5], np.uint32),),
        (np.array([2**32 - 1, 1, 6], np.uint32),),
    ),
    # FILL_VALUE_CONSTANT's example
    (
        dml.FillValueConstantOperatorDesc(T("FLOAT32", [1, 1, 2, 4]), "FLOAT32", 13.0),
        (),
        (np.full((1, 1, 2, 4), 13, np.float32),),
    ),
    # FILL_VALUE_SEQUENCE's two examples
    (
        dml.FillValueSequenceOperatorDesc(T("FLOAT32", [1, 1, 1, 3]), "FLOAT32", 3, 2),
        (),
        (np.array([[[[3, 5, 7]]]], np.float32),),
    ),
    (
        dml.FillValueSequenceOperatorDesc(T("UINT8", [1, 1, 2, 2]), "UINT8", 10, -2),
        (),
        (np.array([[[[10, 8], [6, 4]]]], np.uint8),),
    ),
    # DIAGONAL_MATRIX's four examples
    (
        dml.DiagonalMatrixOperatorDesc(T("FLOAT32", [1, 1, 3, 3]), offset=0, value=1.0),
        (),
        (np.eye(3, dtype=np.float32)[None, None],),
    ),
    (
        dml.DiagonalMatrixOperatorDesc(T("FLOAT32", [1, 1, 3, 3]), offset=1, value=1.0),
        (),
        (_f32([[0, 1, 0], [0, 0, 1], [0, 0, 0]]),),
    ),
    (
        dml.DiagonalMatrixOperatorDesc(T("FLOAT32", [1, 1, 3, 2]), offset=-1, value=1.0),
        (),
        (_f32([[0, 0], [1, 0], [0, 1]]),),
    ),
    (
        dml.DiagonalMatrixOperatorDesc(T("FLOAT32", [1, 1, 3, 2]), offset=-3, value=1.0),
        (),
        (np.zeros((1, 1, 3, 2), np.float32),),
    ),
    # The page's note: 10.6 becomes 10 in an integer tensor.
    (
        dml.DiagonalMatrixOperatorDesc(T("INT32", [1, 1, 2, 2]), offset=0, value=10.6),
        (),
        (np.array([[[[10, 0], [0, 10]]]], np.int32),),
    ),
    # DIAGONAL_MATRIX1 worked from its pseudocode: the band [-1, 2) (three diagonals) ...
    (
        dml.DiagonalMatrix1OperatorDesc(None, T("FLOAT32", [3, 4]), "FLOAT32", 1.0, -1, 2),
        (),
        (np.array([[1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 1]], np.float32),),
    ),
    # ... inverted (End < Begin): Value outside [End, Begin) = [0, 1), the input elsewhere.
    (
        dml.DiagonalMatrix1OperatorDesc(T("INT32", [3, 3]), T("INT32", [3, 3]), "INT32", -1, 1, 0),
        (np.arange(1, 10, dtype=np.int32).reshape(3, 3),),
        (np.array([[1, -1, -1], [-1, 5, -1], [-1, -1, 9]], np.int32),),
    ),
]


@pytest.mark.parametrize("desc, inputs, expected", SEEDS)
def test_documented_and_worked_examples(desc, inputs, expected):
    got = S.run(S.Case(desc, inputs))
    S.assert_same(got, expected)
    S.assert_same(reference.reference(desc, *inputs), expected)


# --- properties -----------------------------------------------------------------------------


@st.composite
def scan_cases(draw, cls=None, types=None, ranks=None):
    cls = cls or draw(st.sampled_from([CUMSUM, CUMPROD]))
    types = types or S.types_at_newest(cls.operator_type)
    type_name = draw(st.sampled_from(types))
    shape = draw(S.shapes(ranks or S.ranks_at_newest(cls.operator_type), max_elements=128))
    axis = draw(st.integers(0, len(shape) - 1))
    desc = _scan(
        cls,
        axis,
        draw(st.sampled_from(["INCREASING", "DECREASING"])),
        draw(st.booleans()),
        T(type_name, shape),
    )
    style = "near_one" if cls is CUMPROD else "small"
    if type_name.startswith(("INT", "UINT")):
        style = draw(st.sampled_from(["full", style]))  # full: sums and products wrap
    return S.Case(desc, (S.values(draw(S.seeds()), type_name, shape, style),))


def _tolerance(case) -> dict:
    dtype = (
        case.inputs[0].dtype
        if case.inputs
        else np.dtype(case.desc.output_tensor.data_type.name.lower())
    )
    if dtype == np.float16:
        return {"exact": False, "rtol": 2e-3, "atol": 4e-3}
    if dtype.kind == "f":
        return {"exact": False, "rtol": 1e-5, "atol": 1e-5}
    return {"exact": True}


@given(scan_cases())
def test_scans_match_reference(case):
    S.assert_same(S.run(case), reference.reference(case.desc, *case.inputs), **_tolerance(case))


@S.FEW
@given(scan_cases())
def test_scans_jit_and_vmap(case):
    S.check_jit(case, **_tolerance(case))
    S.check_vmap(case, **_tolerance(case))


@S.FEW
@given(scan_cases(types=["FLOAT32"]))
def test_scans_check_grads(case):
    S.check_grads(case, atol=2e-2, rtol=2e-2)


def test_exclusive_product_gradient_at_a_zero():
    # d/dx of the exclusive running product: the element at position 1 multiplies the later
    # outputs only; a zero elsewhere in the line must not produce NaN (no division).
    op = dml.compile_operator(_scan(CUMPROD, 0, "INCREASING", True, T("FLOAT32", [4])))
    x = jnp.array([2.0, 0.0, 3.0, 5.0], jnp.float32)
    g = jax.grad(lambda x: op.fn(x).sum())(x)
    # outputs: 1, 2, 0, 0 -> d/dx0 = 1 + 0 + 0 = 1 (x1 = 0); d/dx1 = 2 + 2*3 = 8; d/dx2 = 0
    np.testing.assert_array_equal(np.asarray(g), [1, 8, 0, 0])


@st.composite
def generator_cases(draw):
    cls = draw(
        st.sampled_from(
            [
                dml.FillValueConstantOperatorDesc,
                dml.FillValueSequenceOperatorDesc,
                dml.DiagonalMatrixOperatorDesc,
                dml.DiagonalMatrix1OperatorDesc,
            ]
        )
    )
    type_name = draw(st.sampled_from(S.types_at_newest(cls.operator_type, "outputs")))
    shape = draw(S.shapes(S.ranks_at_newest(cls.operator_type)))
    out = T(type_name, shape)
    dtype = np.dtype(type_name.lower())
    if dtype.kind == "f":
        number = st.floats(-1000, 1000, width=16 if dtype == np.float16 else 32)
    else:
        info = np.iinfo(dtype)
        number = st.integers(int(info.min), int(info.max))
    if cls is dml.FillValueConstantOperatorDesc:
        return S.Case(cls(out, type_name, draw(number)), ())
    if cls is dml.FillValueSequenceOperatorDesc:
        if dtype.kind == "u":
            bits = dtype.itemsize * 8
            delta = draw(st.integers(-(2 ** (bits - 1)), 2**bits - 1))  # negative steps wrap
        else:
            delta = draw(number)
        return S.Case(cls(out, type_name, draw(number), delta), ())
    if cls is dml.DiagonalMatrixOperatorDesc:
        value = draw(st.floats(-1000, 1000, width=32))
        return S.Case(cls(out, offset=draw(st.integers(-7, 7)), value=value), ())
    begin, end = draw(st.integers(-7, 7)), draw(st.integers(-7, 7))
    if draw(st.booleans()):
        x = S.values(draw(S.seeds()), type_name, shape, "full")
        return S.Case(cls(out, out, type_name, draw(number), begin, end), (x,))
    return S.Case(cls(None, out, type_name, draw(number), begin, end), ())


@given(generator_cases())
def test_generators_match_reference(case):
    got = S.run(case)
    want = reference.reference(case.desc, *case.inputs)
    if case.desc.operator_type == "DML_OPERATOR_FILL_VALUE_SEQUENCE":
        # float sequences: start + i * delta in float32 (two roundings) against float64 rounded
        # once: within an ulp of each term's magnitude.
        S.assert_same(got, want, **{**_tolerance(case), "atol": 1e-3})
    else:
        S.assert_same(got, want)


@S.FEW
@given(generator_cases())
def test_generators_jit_equals_eager(case):
    S.check_jit(case)


def test_diagonal_matrix1_vmap_and_gradient_keep_the_input_off_the_band():
    x = T("FLOAT32", [2, 3, 3])
    d = dml.DiagonalMatrix1OperatorDesc(x, x, "FLOAT32", 7.0, 0, 1)
    case = S.Case(d, (np.arange(18, dtype=np.float32).reshape(2, 3, 3),))
    S.check_vmap(case)
    S.check_grads(case)
    g = jax.grad(lambda a: dml.compile_operator(d).fn(a).sum())(jnp.zeros((2, 3, 3)))
    np.testing.assert_array_equal(np.asarray(g), np.broadcast_to(1 - np.eye(3), (2, 3, 3)))


def test_float16_sequence_rounds_once_from_float32():
    d = dml.FillValueSequenceOperatorDesc(T("FLOAT16", [5]), "FLOAT16", 0.1, 0.1)
    start, delta = np.float32(np.float16(0.1)), np.float32(np.float16(0.1))
    want = (start + np.arange(5, dtype=np.float32) * delta).astype(np.float16)
    S.assert_same(S.run(S.Case(d, ())), (want,))


def test_sixty_four_bit_sequences_wrap():
    d = dml.FillValueSequenceOperatorDesc(T("UINT64", [3]), "UINT64", 2**64 - 2, 1)
    S.assert_same(S.run(S.Case(d, ())), (np.array([2**64 - 2, 2**64 - 1, 0], np.uint64),))
    d = dml.FillValueSequenceOperatorDesc(T("INT64", [2]), "INT64", 2**63 - 1, 1)
    S.assert_same(S.run(S.Case(d, ())), (np.array([2**63 - 1, -(2**63)], np.int64),))


@pytest.mark.parametrize(
    "type_name, start, delta, sizes",
    [("INT8", 0, 0, [1, 2, 3, 4, 6]), ("INT8", 3, 2, [300]), ("UINT8", 10, -2, [2, 300]),
     ("INT16", -5, 7, [2, 40000]), ("UINT16", 0, 1, [2, 70000])],
)  # fmt: skip
def test_narrow_sequences_longer_than_their_type_wrap(type_name, start, delta, sizes):
    # More elements than the type holds: positions and values wrap modulo 2**bits (found by the
    # thorough profile: the positions' strides overflowed the type before anything ran).
    d = dml.FillValueSequenceOperatorDesc(T(type_name, sizes), type_name, start, delta)
    dtype = np.dtype(type_name.lower())
    modulus = 2 ** (8 * dtype.itemsize)
    i = np.arange(int(np.prod(sizes)), dtype=np.int64)
    want = ((start + i * (delta % modulus)) % modulus).astype(np.uint64).astype(dtype)
    S.assert_same(S.run(S.Case(d, ())), (want.reshape(sizes),))


# --- in graphs ------------------------------------------------------------------------------


def test_generators_feed_a_graph():
    # FILL_VALUE_SEQUENCE (no input) -> CUMULATIVE_SUMMATION: 1, 2, 3, 4 -> 1, 3, 6, 10
    x = T("FLOAT32", [1, 1, 1, 4])
    fill = dml.FillValueSequenceOperatorDesc(x, "FLOAT32", 1, 1)
    total = _scan(CUMSUM, 3, "INCREASING", False, x)
    graph = dml.GraphDesc(
        input_count=0,
        output_count=1,
        nodes=[fill, total],
        input_edges=[],
        output_edges=[dml.OutputGraphEdge(1, 0, 0)],
        intermediate_edges=[dml.IntermediateGraphEdge(0, 0, 1, 0)],
    )
    (y,) = dml.compile_graph(graph)()
    np.testing.assert_array_equal(np.asarray(y).ravel(), [1, 3, 6, 10])


# --- rules ------------------------------------------------------------------------------------


def _bad_scan(**changes):
    def make():
        x = T("FLOAT32", [2, 3])
        fields = {"axis": 1, "axis_direction": "INCREASING", "has_exclusive_sum": False}
        fields.update(changes)
        out = fields.pop("out", x)
        return CUMSUM(fields.pop("x", x), out, **fields)

    return make


INVALID_ROWS = [
    (_bad_scan(axis=2), r"CUMULATIVE_SUMMATION: Axis must be in \[0, 1\]"),
    (_bad_scan(out=T("FLOAT32", [3, 2])), r"OutputTensor\.Sizes must equal"),
    (_bad_scan(out=T("FLOAT16", [2, 3])), r"OutputTensor\.DataType must equal"),
    (_bad_scan(x=T("INT8", [2, 3]), out=T("INT8", [2, 3])), r"INT8 .* not supported"),
    (
        lambda: _scan(CUMPROD, 0, "INCREASING", False, T("INT32", [4])),
        r"CUMULATIVE_PRODUCT: InputTensor with data type INT32 .* not supported",
    ),
    (
        lambda: dml.FillValueConstantOperatorDesc(T("FLOAT32", [2]), "FLOAT16", 1.0),
        r"FILL_VALUE_CONSTANT: ValueDataType must equal OutputTensor\.DataType",
    ),
    (
        lambda: dml.FillValueConstantOperatorDesc(T("UINT8", [2]), "UINT8", 256),
        r"FILL_VALUE_CONSTANT: Value \(256\) is outside the range of UINT8",
    ),
    (
        lambda: dml.FillValueConstantOperatorDesc(T("INT32", [2]), "INT32", 1.5),
        r"Value must be an integer for INT32",
    ),
    (
        lambda: dml.FillValueSequenceOperatorDesc(T("UINT8", [2]), "UINT8", 0, -129),
        r"FILL_VALUE_SEQUENCE: ValueDelta \(-129\) does not fit 8 bits",
    ),
    (
        lambda: dml.FillValueSequenceOperatorDesc(T("INT8", [2]), "INT8", -129, 1),
        r"ValueStart \(-129\) is outside the range of INT8",
    ),
    (
        lambda: dml.FillValueSequenceOperatorDesc(T("FLOAT64", [2]), "FLOAT64", 0, 1),
        r"FILL_VALUE_SEQUENCE: OutputTensor with data type FLOAT64 .* not supported",
    ),
    (
        lambda: dml.DiagonalMatrixOperatorDesc(T("FLOAT32", [3, 3]), offset=0, value=1.0),
        r"DIAGONAL_MATRIX: OutputTensor .* DimensionCount 2 is not supported",
    ),
    (
        lambda: dml.DiagonalMatrix1OperatorDesc(None, T("FLOAT32", [3]), "FLOAT32", 1.0, 0, 1),
        r"DIAGONAL_MATRIX1: OutputTensor\.DimensionCount must be at least 2",
    ),
    (
        lambda: dml.DiagonalMatrix1OperatorDesc(
            T("FLOAT32", [3, 2]), T("FLOAT32", [3, 3]), "FLOAT32", 1.0, 0, 1
        ),
        r"DIAGONAL_MATRIX1: OutputTensor\.Sizes must equal",
    ),
    (
        lambda: dml.DiagonalMatrix1OperatorDesc(None, T("INT8", [3, 3]), "INT16", 1, 0, 1),
        r"ValueDataType must equal OutputTensor\.DataType",
    ),
]


@pytest.mark.parametrize("factory, pattern", INVALID_ROWS)
def test_invalid_descriptions_are_rejected(factory, pattern):
    with pytest.raises(dml.ValidationError, match=pattern):
        dml.validate(factory())
