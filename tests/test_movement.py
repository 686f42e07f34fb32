"""SLICE, SLICE1, PADDING, PADDING1, CAST and REVERSE_SUBSEQUENCES: the pages' examples exactly,
worked values for what the pages leave open, properties against tests/reference/movement.py over
data types and ranks (every CAST pair), one row per rule, jit / vmap / gradients."""

from __future__ import annotations

import math

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
SLICE, SLICE1 = dml.SliceOperatorDesc, dml.Slice1OperatorDesc
PAD, PAD1 = dml.PaddingOperatorDesc, dml.Padding1OperatorDesc
CAST, REVERSE = dml.CastOperatorDesc, dml.ReverseSubsequencesOperatorDesc
X44 = T("FLOAT32", [1, 1, 4, 4])
PAGE_16 = np.arange(1, 17, dtype=np.float32).reshape(1, 1, 4, 4)
PAD_IN = np.array([[1, 2, 3, 4], [5, 6, 7, 8]] * 2, np.float32).reshape(1, 1, 4, 4)
PAD_OUT = T("FLOAT32", [1, 1, 8, 10])
PAD_START, PAD_END = [0, 0, 1, 2], [0, 0, 3, 4]
REV_IN = np.arange(1, 13, dtype=np.float32).reshape(1, 1, 3, 4)
X34 = T("FLOAT32", [1, 1, 3, 4])


def _f32(rows):
    return np.array([[rows]], np.float32)


# The PADDING pages' four outputs (the same for PADDING1).
PAGE_PADDED = {
    "CONSTANT": [[9] * 10]
    + [[9, 9, *r, 9, 9, 9, 9] for r in ([1, 2, 3, 4], [5, 6, 7, 8]) * 2]
    + [[9] * 10] * 3,
    "EDGE": [
        [1, 1, 1, 2, 3, 4, 4, 4, 4, 4],
        [1, 1, 1, 2, 3, 4, 4, 4, 4, 4],
        [5, 5, 5, 6, 7, 8, 8, 8, 8, 8],
        [1, 1, 1, 2, 3, 4, 4, 4, 4, 4],
        [5, 5, 5, 6, 7, 8, 8, 8, 8, 8],
        [5, 5, 5, 6, 7, 8, 8, 8, 8, 8],
        [5, 5, 5, 6, 7, 8, 8, 8, 8, 8],
        [5, 5, 5, 6, 7, 8, 8, 8, 8, 8],
    ],
    "REFLECTION": [
        [7, 6, 5, 6, 7, 8, 7, 6, 5, 6],
        [3, 2, 1, 2, 3, 4, 3, 2, 1, 2],
    ]
    * 4,
    "SYMMETRIC": [
        [2, 1, 1, 2, 3, 4, 4, 3, 2, 1],
        [2, 1, 1, 2, 3, 4, 4, 3, 2, 1],
        [6, 5, 5, 6, 7, 8, 8, 7, 6, 5],
        [2, 1, 1, 2, 3, 4, 4, 3, 2, 1],
        [6, 5, 5, 6, 7, 8, 8, 7, 6, 5],
        [6, 5, 5, 6, 7, 8, 8, 7, 6, 5],
        [2, 1, 1, 2, 3, 4, 4, 3, 2, 1],
        [6, 5, 5, 6, 7, 8, 8, 7, 6, 5],
    ],
}


def _page_pad(mode, typed=False):
    if typed:
        return PAD1(X44, PAD_OUT, mode, "FLOAT32", 9, PAD_START, PAD_END)
    return PAD(X44, PAD_OUT, mode, 9, PAD_START, PAD_END)


SEEDS = [
    # DML_SLICE_OPERATOR_DESC's two examples
    (
        SLICE(X44, T("FLOAT32", [1, 1, 3, 2]), [0, 0, 1, 2], [1, 1, 3, 2], [1, 1, 1, 1]),
        (PAGE_16,),
        (_f32([[7, 8], [11, 12], [15, 16]]),),
    ),
    (
        SLICE(X44, T("FLOAT32", [1, 1, 2, 2]), [0, 0, 1, 0], [1, 1, 2, 2], [1, 1, 2, 3]),
        (PAGE_16,),
        (_f32([[5, 8], [13, 16]]),),
    ),
    # DML_SLICE1_OPERATOR_DESC's two examples
    (
        SLICE1(X44, T("FLOAT32", [1, 1, 2, 2]), [0, 0, 0, 1], [1, 1, 4, 3], [1, 1, 2, 2]),
        (PAGE_16,),
        (_f32([[2, 4], [10, 12]]),),
    ),
    (
        SLICE1(X44, T("FLOAT32", [1, 1, 2, 2]), [0, 0, 0, 1], [1, 1, 4, 3], [1, 1, -2, 2]),
        (PAGE_16,),
        (_f32([[14, 16], [6, 8]]),),
    ),
    # Worked by hand: a backward window copied only in part (window rows 1..3 from the end, 2
    # of them), and SLICE's stride 0 repeating its offset's element.
    (
        SLICE1(X44, T("FLOAT32", [1, 1, 2, 1]), [0, 0, 1, 2], [1, 1, 3, 1], [1, 1, -1, 1]),
        (PAGE_16,),
        (_f32([[15], [11]]),),
    ),
    (
        SLICE(T("INT32", [5]), T("INT32", [3]), [2], [3], [0]),
        (np.array([10, 11, 12, 13, 14], np.int32),),
        (np.array([12, 12, 12], np.int32),),
    ),
    # DML_PADDING_OPERATOR_DESC's and DML_PADDING1_OPERATOR_DESC's four examples each
    *[
        (_page_pad(mode, typed), (PAD_IN,), (_f32(PAGE_PADDED[mode]),))
        for typed in (False, True)
        for mode in ("CONSTANT", "EDGE", "REFLECTION", "SYMMETRIC")
    ],
    # Worked by hand: WRAP repeats the input; PaddingValue 10.6 becomes 10 in INT32 (the page's
    # note), -1e10 saturates; REFLECTION of a single element repeats it.
    (
        PAD(T("INT16", [3]), T("INT16", [8]), "WRAP", 0, [2], [3]),
        (np.array([1, 2, 3], np.int16),),
        (np.array([2, 3, 1, 2, 3, 1, 2, 3], np.int16),),
    ),
    (
        PAD(T("INT32", [1, 2]), T("INT32", [1, 4]), "CONSTANT", 10.6, [0, 1], [0, 1]),
        (np.array([[1, 2]], np.int32),),
        (np.array([[10, 1, 2, 10]], np.int32),),
    ),
    (
        PAD(T("INT8", [2]), T("INT8", [3]), "CONSTANT", -1e10, [1], [0]),
        (np.array([1, 2], np.int8),),
        (np.array([-128, 1, 2], np.int8),),
    ),
    (
        PAD1(
            T("FLOAT16", [1, 2]), T("FLOAT16", [3, 2]), "REFLECTION", "FLOAT16", 0, [1, 0], [1, 0]
        ),
        (np.array([[1, 2]], np.float16),),
        (np.array([[1, 2]] * 3, np.float16),),
    ),
    (
        PAD1(T("UINT64", [2]), T("UINT64", [4]), "CONSTANT", "UINT64", 2**64 - 1, [1], [1]),
        (np.array([5, 6], np.uint64),),
        (np.array([2**64 - 1, 5, 6, 2**64 - 1], np.uint64),),
    ),
    # DML_REVERSE_SUBSEQUENCES_OPERATOR_DESC's two examples
    (
        REVERSE(X34, T("UINT32", [1, 1, 3, 1]), X34, axis=3),
        (REV_IN, np.array([2, 4, 3], np.uint32).reshape(1, 1, 3, 1)),
        (_f32([[2, 1, 3, 4], [8, 7, 6, 5], [11, 10, 9, 12]]),),
    ),
    (
        REVERSE(X34, T("UINT32", [1, 1, 1, 4]), X34, axis=2),
        (REV_IN, np.array([2, 3, 1, 0], np.uint32).reshape(1, 1, 1, 4)),
        (_f32([[5, 10, 3, 4], [1, 6, 7, 8], [9, 2, 11, 12]]),),
    ),
    # Worked by hand: a length beyond the axis acts as the axis size (the page), also at the
    # top of UINT64.
    (
        REVERSE(T("INT8", [2, 3]), T("UINT64", [2, 1]), T("INT8", [2, 3]), axis=1),
        (np.array([[1, 2, 3], [4, 5, 6]], np.int8), np.array([[7], [2**64 - 1]], np.uint64)),
        (np.array([[3, 2, 1], [6, 5, 4]], np.int8),),
    ),
    # CAST, worked by hand: truncation toward zero, saturation, NaN -> 0; integer wrap; integer
    # to float16 rounding to nearest even and overflowing to infinity.
    (
        CAST(T("FLOAT32", [8]), T("INT8", [8])),
        (np.array([-2.7, -0.5, 0.5, 2.7, 300, -300, np.nan, -np.inf], np.float32),),
        (np.array([-2, 0, 0, 2, 127, -128, 0, -128], np.int8),),
    ),
    (
        CAST(T("FLOAT16", [4]), T("UINT16", [4])),
        (np.array([-1.5, 65504, np.inf, 3.75], np.float16),),
        (np.array([0, 65504, 65535, 3], np.uint16),),
    ),
    (
        CAST(T("INT32", [4]), T("INT8", [4])),
        (np.array([200, -129, 256, -1], np.int32),),
        (np.array([-56, 127, 0, -1], np.int8),),
    ),
    (
        CAST(T("INT16", [4]), T("UINT16", [4])),
        (np.array([-1, -32768, 5, 32767], np.int16),),
        (np.array([65535, 32768, 5, 32767], np.uint16),),
    ),
    (
        CAST(T("INT32", [5]), T("FLOAT16", [5])),
        (np.array([2049, 2051, 65519, 65520, -70000], np.int32),),
        (np.array([2048, 2052, 65504, np.inf, -np.inf], np.float16),),
    ),
]


@pytest.mark.parametrize("desc, inputs, expected", SEEDS)
def test_documented_and_worked_examples(desc, inputs, expected):
    S.assert_same(S.run(S.Case(desc, inputs)), expected)
    S.assert_same(reference.reference(desc, *inputs), expected)


# --- strategies -------------------------------------------------------------------------------


def _values(draw, type_name, shape):
    style = draw(st.sampled_from(["full", "ties", "small"]))
    return S.values(draw(S.seeds()), type_name, shape, style)


@st.composite
def slice_cases(draw, cls=None, types=None):
    cls = cls or draw(st.sampled_from([SLICE, SLICE1]))
    type_name = draw(st.sampled_from(types or S.types_at_newest(cls.operator_type)))
    shape = draw(S.shapes(S.ranks_at_newest(cls.operator_type), max_elements=256))
    offsets, sizes, steps, out = [], [], [], []
    for n in shape:
        off = draw(st.integers(0, n - 1))
        if cls is SLICE:
            step = draw(st.integers(0, 3))
            most = 1 + (n - 1 - off) // step if step else 3
            count = draw(st.integers(1, most))
            offsets.append(off), sizes.append(count), steps.append(step), out.append(count)
        else:
            size = draw(st.integers(1, n - off))
            step = draw(st.integers(1, 3)) * draw(st.sampled_from([1, -1]))
            count = draw(st.integers(1, 1 + (size - 1) // abs(step)))
            offsets.append(off), sizes.append(size), steps.append(step), out.append(count)
    count_field = draw(st.sampled_from([None, len(shape)]))
    desc = cls(T(type_name, shape), T(type_name, out), offsets, sizes, steps, count_field)
    return S.Case(desc, (_values(draw, type_name, shape),))


MODES = ("CONSTANT", "EDGE", "REFLECTION", "SYMMETRIC", "WRAP")


@st.composite
def padding_cases(draw, cls=None, types=None, modes=MODES):
    cls = cls or draw(st.sampled_from([PAD, PAD1]))
    type_name = draw(st.sampled_from(types or S.types_at_newest(cls.operator_type)))
    shape = draw(S.shapes(S.ranks_at_newest(cls.operator_type), max_elements=48, max_dim=4))
    start, end, budget = [], [], S.MAX_ELEMENTS // math.prod(shape)
    for n in shape:
        # mostly small, now and then several times the input (the modes fold periodically)
        high = max(0, min(2 * n + 1, budget // max(n, 1)))
        a, b = draw(st.integers(0, high)), draw(st.integers(0, high))
        start.append(a), end.append(b)
        budget = max(1, budget // max(1, (n + a + b) // n))
    out = tuple(n + a + b for n, a, b in zip(shape, start, end))
    mode = draw(st.sampled_from(modes))
    dtype = np.dtype(type_name.lower())
    if cls is PAD:
        value = draw(st.floats(-300, 300, width=32) | st.sampled_from([10.6, -1e10, 1e10]))
        desc = cls(T(type_name, shape), T(type_name, out), mode, value, start, end)
    else:
        if dtype.kind == "f":
            value = draw(st.floats(-1000, 1000, width=16 if dtype == np.float16 else 32))
        else:
            info = np.iinfo(dtype)
            value = draw(st.integers(int(info.min), int(info.max)))
        desc = cls(T(type_name, shape), T(type_name, out), mode, type_name, value, start, end)
    return S.Case(desc, (_values(draw, type_name, shape),))


CAST_TYPES = S.types_at_newest("DML_OPERATOR_CAST")


def _cast_values(rng, type_name, shape, special=True):
    """Random values with the conversions' edge cases mixed in (``special``)."""
    x = S.values(rng, type_name, shape, "full")
    if not special:
        return x
    dtype = x.dtype
    if dtype.kind == "f":
        special = np.array(
            [np.nan, np.inf, -np.inf, 0.5, -0.5, 2.5, -1.5, 127.5, -128.5, 255.9, 65519.0,
             65520.0, 2.0**31, -(2.0**31) - 4096, 2.0**32, 2.0**63, 2.0**64, -1e30, 1e30,
             1 + 2.0**-11 + 2.0**-40, 3e-8],
            np.float64,
        )  # fmt: skip
        with np.errstate(over="ignore"):
            special = special.astype(dtype)
        scale = rng.choice([1.0, 100.0, 1e5, 1e10], size=shape)
        with np.errstate(over="ignore"):
            x = (x.astype(np.float64) * scale).astype(dtype)
    else:
        info = np.iinfo(dtype)
        special = np.array(
            [v for v in (0, 1, -1, 127, 128, -129, 255, 256, 2049, 2051, 65504, 65519, 65520,
                         2**24 + 1, 2**31 - 1, 2**53 + 1, 2**63 - 2**39 - 1, info.min, info.max)
             if info.min <= v <= info.max],
            dtype,
        )  # fmt: skip
    flat = x.ravel()
    picks = rng.integers(0, 2, flat.size).astype(bool)
    flat[picks] = rng.choice(special, picks.sum())
    return flat.reshape(shape)


@st.composite
def cast_cases(draw, pairs=None, special=True):
    if pairs is None:
        src = draw(st.sampled_from(CAST_TYPES))
        dst = draw(st.sampled_from(CAST_TYPES))
    else:
        src, dst = draw(st.sampled_from(pairs))
    shape = draw(S.shapes(S.ranks_at_newest("DML_OPERATOR_CAST"), max_elements=64))
    desc = CAST(T(src, shape), T(dst, shape))
    return S.Case(desc, (_cast_values(draw(S.seeds()), src, shape, special),))


@st.composite
def reverse_cases(draw, types=None):
    key = "DML_OPERATOR_REVERSE_SUBSEQUENCES"
    type_name = draw(st.sampled_from(types or S.types_at_newest(key)))
    shape = draw(S.shapes(S.ranks_at_newest(key), max_elements=128))
    axis = draw(st.integers(0, len(shape) - 1))
    len_type = draw(st.sampled_from(["UINT32", "UINT64"]))
    lshape = tuple(1 if i == axis else s for i, s in enumerate(shape))
    rng = draw(S.seeds())
    n = shape[axis]
    lengths = rng.integers(0, n + 3, size=lshape).astype(len_type.lower())
    if draw(st.booleans()):
        lengths.ravel()[0] = np.iinfo(lengths.dtype).max
    desc = REVERSE(T(type_name, shape), T(len_type, lshape), T(type_name, shape), axis=axis)
    return S.Case(desc, (_values(draw, type_name, shape), lengths))


ALL = st.one_of(slice_cases(), padding_cases(), cast_cases(), reverse_cases())


# --- properties -------------------------------------------------------------------------------


@given(slice_cases())
def test_slices_match_reference(case):
    S.assert_same(S.run(case), reference.reference(case.desc, *case.inputs))


@given(padding_cases())
def test_paddings_match_reference(case):
    S.assert_same(S.run(case), reference.reference(case.desc, *case.inputs))


@given(cast_cases())
def test_casts_match_reference(case):
    S.assert_same(S.run(case), reference.reference(case.desc, *case.inputs))


@given(reverse_cases())
def test_reverse_subsequences_match_reference(case):
    S.assert_same(S.run(case), reference.reference(case.desc, *case.inputs))


def test_every_cast_pair_on_edge_values():
    """All 121 (input, output) pairs of the support table at once (one compile), on the edge
    values of the conversions, against the reference."""
    rng = np.random.default_rng(7)
    pairs = [(a, b) for a in CAST_TYPES for b in CAST_TYPES]
    assert len(pairs) == 121
    inputs = {a: _cast_values(rng, a, (48,)) for a in CAST_TYPES}
    with jax.enable_x64(True):
        ops = [dml.compile_operator(CAST(T(a, [48]), T(b, [48]))) for a, b in pairs]
        run_all = jax.jit(lambda xs: [op.fn(xs[a]) for op, (a, _) in zip(ops, pairs)])
        results = run_all({a: jnp.asarray(x) for a, x in inputs.items()})
    for (a, b), got, op in zip(pairs, results, ops):
        want = reference.reference(op.desc, inputs[a])
        try:
            S.assert_same(np.asarray(got), want)
        except AssertionError as e:
            raise AssertionError(f"CAST {a} -> {b}: {e}") from None


@S.FEW
@given(ALL)
def test_jit_equals_eager(case):
    S.check_jit(case)


@S.FEW
@given(ALL)
def test_vmap_equals_loop(case):
    S.check_vmap(case)


@S.FEW
@given(
    st.one_of(
        slice_cases(types=S.GRAD_TYPES),
        padding_cases(types=S.GRAD_TYPES),
        cast_cases([(a, b) for a in S.GRAD_TYPES for b in S.GRAD_TYPES], special=False),
    )
)
def test_check_grads(case):
    S.check_grads(case)


@S.FEW
@given(reverse_cases(types=S.GRAD_TYPES))
def test_reverse_subsequences_gradient_on_the_input(case):
    S.check_grads(case, argnums=(0,))


def test_padding_gradient_sums_the_mirrored_copies():
    # REFLECTION of [a, b, c] by 2 on both sides: c b a b c b a -> d/da = 2, d/db = 3, d/dc = 2
    d = PAD(T("FLOAT32", [3]), T("FLOAT32", [7]), "REFLECTION", 0, [2], [2])
    g = jax.grad(lambda x: dml.compile_operator(d).fn(x).sum())(jnp.zeros(3, jnp.float32))
    np.testing.assert_array_equal(np.asarray(g), [2, 3, 2])


def test_differentiable_flags():
    x16 = T("FLOAT16", [2])
    assert dml.compile_operator(CAST(x16, T("FLOAT32", [2]))).differentiable
    assert not dml.compile_operator(CAST(x16, T("INT32", [2]))).differentiable
    rev = REVERSE(T("FLOAT32", [2, 2]), T("UINT32", [1, 2]), T("FLOAT32", [2, 2]), axis=0)
    assert dml.compile_operator(rev).differentiable


def test_float64_to_float16_rounds_once():
    # 1 + 2**-11 + 2**-40 lies just above the midpoint between float16's 1 and 1 + 2**-10: one
    # rounding gives 1 + 2**-10; rounding through float32 first would land on the midpoint and
    # give 1 (ties to even).
    d = CAST(T("FLOAT64", [3]), T("FLOAT16", [3]))
    x = np.array([1 + 2.0**-11 + 2.0**-40, -(1 + 2.0**-11 + 2.0**-40), 1 + 2.0**-11], np.float64)
    S.assert_same(S.run(S.Case(d, (x,))), (np.array([1 + 2**-10, -(1 + 2**-10), 1], np.float16),))


def test_big_paddings_fold_many_times():
    # 40 elements of padding around 2: more pieces than a concatenation is used for.
    d = PAD1(T("INT32", [2]), T("INT32", [82]), "SYMMETRIC", "INT32", 0, [40], [40])
    x = np.array([1, 2], np.int32)
    S.assert_same(S.run(S.Case(d, (x,))), reference.reference(d, x))


@pytest.mark.parametrize("mode", ["EDGE", "REFLECTION", "SYMMETRIC", "WRAP"])
@pytest.mark.parametrize(
    "shape, pad",
    [
        ((3, 4), (2, 1)),  # a few border runs: constant pad, then border planes copied in place
        ((2, 3, 4), (3, 2)),  # corners of three dimensions
        ((3,), (20, 20)),  # many runs: one concatenation of strided takes
        ((3, 4), (9, 9)),  # more blocks still: a static gather per dimension
    ],
)
def test_mirrored_padding_lowerings_match_reference(mode, shape, pad):
    start = [pad[0]] * len(shape)
    end = [pad[1]] * len(shape)
    out = [n + pad[0] + pad[1] for n in shape]
    d = PAD1(T("INT32", shape), T("INT32", out), mode, "INT32", 0, start, end)
    x = np.arange(1, math.prod(shape) + 1, dtype=np.int32).reshape(shape)
    S.assert_same(S.run(S.Case(d, (x,))), reference.reference(d, x))


@pytest.mark.parametrize(
    "mode, level, ok",
    [
        ("SYMMETRIC", "2_1", False),
        ("SYMMETRIC", "3_0", True),
        ("WRAP", "6_3", False),
        ("WRAP", "6_4", True),
        ("REFLECTION", "1_0", True),
    ],
)
def test_padding_modes_need_their_feature_level(mode, level, ok):
    d = PAD(X44, T("FLOAT32", [1, 1, 6, 6]), mode, 0, [0, 0, 1, 1], [0, 0, 1, 1])
    if ok:
        dml.validate(d, level)
    else:
        with pytest.raises(dml.ValidationError, match=rf"PaddingMode {mode} needs feature level"):
            dml.validate(d, level)


# --- rules ------------------------------------------------------------------------------------


_slice = S.rule_factory(
    SLICE,
    input_tensor=X44,
    output_tensor=T("FLOAT32", [1, 1, 2, 2]),
    offsets=[0, 0, 1, 0],
    sizes=[1, 1, 2, 2],
    strides=[1, 1, 2, 3],
)
_slice1 = S.rule_factory(
    SLICE1,
    input_tensor=X44,
    output_tensor=T("FLOAT32", [1, 1, 2, 2]),
    input_window_offsets=[0, 0, 0, 1],
    input_window_sizes=[1, 1, 4, 3],
    input_window_strides=[1, 1, -2, 2],
)
_PAD_FIELDS = {
    "input_tensor": X44,
    "output_tensor": PAD_OUT,
    "padding_mode": "CONSTANT",
    "padding_value": 9,
    "start_padding": PAD_START,
    "end_padding": PAD_END,
}


def _pad(cls=PAD, **changes):
    typed = {"padding_value_data_type": "FLOAT32"} if cls is PAD1 else {}
    return S.rule_factory(cls, **_PAD_FIELDS, **typed)(**changes)


_reverse = S.rule_factory(
    REVERSE,
    input_tensor=X34,
    sequence_lengths_tensor=T("UINT32", [1, 1, 3, 1]),
    output_tensor=X34,
    axis=3,
)


INVALID_ROWS = [
    (_slice(offsets=[0, 0, 1]), r"^DML_OPERATOR_SLICE: Offsets must hold DimensionCount"),
    (_slice(strides=[1, 1, 2]), r"SLICE: Strides must hold DimensionCount = .* \(4\) values"),
    (_slice(dimension_count=3), r"SLICE: DimensionCount must equal the length of Offsets"),
    (_slice(offsets=[0, 0, 2, 0]), r"SLICE: Offsets\[2\] \+ Strides\[2\] \* \(Sizes\[2\] - 1\)"),
    (_slice(sizes=[1, 1, 2, 0]), r"SLICE: Sizes\[3\] must be >= 1"),
    (_slice(sizes=[1, 1, 1, 2]), r"SLICE: OutputTensor\.Sizes\[2\] must equal 1, got 2"),
    (
        _slice(output_tensor=T("FLOAT16", [1, 1, 2, 2])),
        r"SLICE: OutputTensor\.DataType must equal InputTensor\.DataType",
    ),
    (
        _slice(output_tensor=T("FLOAT32", [1, 2, 2])),
        r"SLICE: OutputTensor\.DimensionCount must equal InputTensor\.DimensionCount",
    ),
    (_slice1(input_window_sizes=[1, 1, 0, 3]), r"SLICE1: InputWindowSizes\[2\] must be >= 1"),
    (
        _slice1(input_window_offsets=[0, 0, 1, 1]),
        r"SLICE1: InputWindowOffsets\[2\] \+ InputWindowSizes\[2\] \(1 \+ 4\) must be <= InputTensor",
    ),
    (_slice1(input_window_strides=[1, 1, 0, 2]), r"SLICE1: InputWindowStrides\[2\] must not be 0"),
    (
        _slice1(output_tensor=T("FLOAT32", [1, 1, 3, 2])),
        r"SLICE1: OutputTensor\.Sizes\[2\] must be <= .* = 2 \(the elements the window",
    ),
    (
        _slice1(input_window_strides=[1, 1, -2]),
        r"SLICE1: InputWindowStrides must hold DimensionCount",
    ),
    (
        _slice1(input_window_strides=[1, 1, -(2**31) - 1, 2]),
        r"SLICE1: InputWindowStrides\[2\] must be >= -2147483648",
    ),
    (_pad(start_padding=[0, 0, 1]), r"^DML_OPERATOR_PADDING: StartPadding must hold"),
    (_pad(end_padding=[0, 0, 3, 3]), r"PADDING: OutputTensor\.Sizes\[3\] must equal 9, got 10"),
    (_pad(padding_mode="MIRROR"), r"PADDING: PaddingMode"),
    (
        _pad(output_tensor=T("FLOAT16", [1, 1, 8, 10])),
        r"PADDING: OutputTensor\.DataType must equal InputTensor\.DataType",
    ),
    (_pad(padding_value=math.nan), r"PADDING: PaddingValue must not be NaN"),
    (
        _pad(PAD1, padding_value_data_type="FLOAT16"),
        r"PADDING1: PaddingValueDataType must equal OutputTensor\.DataType",
    ),
    (
        _pad(
            PAD1,
            input_tensor=T("UINT8", [1, 1, 4, 4]),
            output_tensor=T("UINT8", [1, 1, 8, 10]),
            padding_value_data_type="UINT8",
            padding_value=256,
        ),
        r"PADDING1: PaddingValue \(256\) is outside the range of UINT8",
    ),
    (
        _pad(
            PAD1,
            input_tensor=T("INT32", [1, 1, 4, 4]),
            output_tensor=T("INT32", [1, 1, 8, 10]),
            padding_value_data_type="INT32",
            padding_value=1.5,
        ),
        r"PADDING1: PaddingValue must be an integer for INT32",
    ),
    (
        lambda: CAST(T("FLOAT32", [2, 3]), T("INT32", [3, 2])),
        r"^DML_OPERATOR_CAST: OutputTensor\.Sizes must equal InputTensor\.Sizes",
    ),
    (
        lambda: CAST(T("FLOAT32", [6]), T("INT32", [1, 6])),
        r"CAST: OutputTensor\.DimensionCount must equal InputTensor\.DimensionCount",
    ),
    (_reverse(axis=4), r"^DML_OPERATOR_REVERSE_SUBSEQUENCES: Axis must be in \[0, 3\]"),
    (
        _reverse(sequence_lengths_tensor=T("UINT32", [1, 1, 3, 4])),
        r"SequenceLengthsTensor\.Sizes must equal InputTensor\.Sizes with 1 at Axis",
    ),
    (
        _reverse(sequence_lengths_tensor=T("UINT32", [3, 1])),
        r"SequenceLengthsTensor\.DimensionCount must equal InputTensor\.DimensionCount",
    ),
    (
        _reverse(sequence_lengths_tensor=T("INT32", [1, 1, 3, 1])),
        r"SequenceLengthsTensor with data type INT32 .* is not supported",
    ),
    (
        _reverse(output_tensor=T("FLOAT16", [1, 1, 3, 4])),
        r"OutputTensor\.DataType must equal FLOAT32, got FLOAT16",
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
            _pad(input_tensor=T("INT8", [1, 1, 4, 4]), output_tensor=T("INT8", [1, 1, 8, 10])),
            "1_0",
            r"PADDING: InputTensor with data type INT8 .* lowest feature level .* is 2_1",
        ),
        (
            lambda: CAST(T("INT32", [1, 1, 2, 2]), T("FLOAT32", [1, 1, 2, 2])),
            "2_1",
            r"CAST: InputTensor with data type INT32 .* lowest .* is 3_0",
        ),
        (
            lambda: CAST(T("FLOAT64", [2]), T("FLOAT32", [2])),
            "3_1",
            r"CAST: InputTensor with data type FLOAT64 .* lowest .* is 4_1",
        ),
        (
            _slice(input_tensor=T("INT8", [1, 1, 4, 4]), output_tensor=T("INT8", [1, 1, 2, 2])),
            "1_0",
            r"SLICE: InputTensor with data type INT8 and DimensionCount 4 is not supported",
        ),
        (
            _slice1(),
            "2_0",
            r"SLICE1 requires feature level 2_1 or later",
        ),
        (
            _reverse(sequence_lengths_tensor=T("UINT64", [1, 1, 3, 1])),
            "4_1",
            r"SequenceLengthsTensor with data type UINT64 .* lowest .* is 5_0",
        ),
        (_pad(PAD1), "4_1", r"PADDING1 requires feature level 5_0 or later"),
    ],
)
def test_support_tables_by_feature_level(factory, level, pattern):
    with pytest.raises(dml.ValidationError, match=pattern):
        dml.validate(factory(), level)


def test_narrowing_float_casts_round_inside_a_round_trip():
    """CAST float32 -> float16 -> float32 (and float64 -> float32 / float16 -> float64) in one
    program rounds, overflows to infinity and keeps the subnormals, as NumPy's conversions do:
    XLA's GPU compiler drops such a conversion pair unless the rounding is its own operation."""
    rng = np.random.default_rng(11)
    x32 = np.concatenate([
        rng.standard_normal(4000).astype(np.float32) * 300,
        rng.uniform(-(2.0**-13), 2.0**-13, 4000).astype(np.float32),  # float16's subnormals
        np.array([65504, 65519.99, 65520, 1e5, -7e4, 2.0**-25, 3 * 2.0**-26, np.inf, np.nan]),
    ]).astype(np.float32)  # fmt: skip
    x64 = np.concatenate([x32.astype(np.float64) * np.float64(1 + 2.0**-30),
                          rng.uniform(-(2.0**-125), 2.0**-125, 4000), [3.5e38, -1e39, 2.0**-150]])  # fmt: skip
    with jax.enable_x64(True):
        for x, mid in ((x32, "FLOAT16"), (x64, "FLOAT32"), (x64, "FLOAT16")):
            src = "FLOAT32" if x.dtype == np.float32 else "FLOAT64"
            there = dml.compile_operator(CAST(T(src, [x.size]), T(mid, [x.size]))).fn
            back = dml.compile_operator(CAST(T(mid, [x.size]), T(src, [x.size]))).fn
            got = np.asarray(jax.jit(lambda v, b=back, t=there: b(t(v)))(x))
            with np.errstate(over="ignore"):
                want = x.astype(np.float16 if mid == "FLOAT16" else np.float32).astype(x.dtype)
            if src == "FLOAT64" and mid == "FLOAT32" and jax.default_backend() == "cpu":
                # XLA's CPU backend flushes float32's subnormals to zero (a lone CAST too)
                want = np.where(
                    np.abs(want) < np.finfo(np.float32).tiny, np.copysign(0, want), want
                )
            np.testing.assert_array_equal(got, want, err_msg=f"{src} -> {mid} -> {src}")
