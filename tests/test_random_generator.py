"""RANDOM_GENERATOR (Philox 4x32-10): Random123's known answers, the page's counter update,
properties against tests/reference/random_generator.py over states (counters near the 2**32 and
2**128 wraps) and output sizes, one row per rule, jit / vmap, and the state threaded through a
graph."""

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
from reference.random_generator import philox4x32_10

import dml_jax as dml

T = dml.TensorDesc
RG = dml.RandomGeneratorOperatorDesc
STATE = T("UINT32", [1, 1, 1, 6])
FF = 0xFFFFFFFF


def _desc(out_sizes, with_state=True, state=STATE, out_type="UINT32"):
    return RG(state, T(out_type, out_sizes), state if with_state else None, "PHILOX_4X32_10")


def _state(counter, key):
    return np.array(list(counter) + list(key), np.uint32).reshape(1, 1, 1, 6)


def _u32(words, shape=(1, 1, 1, 4)):
    return np.array(words, np.uint32).reshape(shape)


# Random123's known-answer vectors for philox4x32-10 (kat_vectors): counter words 0-3, key
# words 0-1 -> the four output words.
KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((FF, FF, FF, FF), (FF, FF), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
]

SEEDS = [
    # One block per known answer; the updated state is the counter + 1 (all ones wraps to 0).
    (
        _desc([1, 1, 1, 4]),
        (_state((0, 0, 0, 0), (0, 0)),),
        (_u32(KAT[0][2]), _state((1, 0, 0, 0), (0, 0))),
    ),
    (
        _desc([1, 1, 1, 4]),
        (_state(KAT[1][0], KAT[1][1]),),
        (_u32(KAT[1][2]), _state((0, 0, 0, 0), (FF, FF))),
    ),
    (
        _desc([1, 1, 2, 2], with_state=False),
        (_state(KAT[2][0], KAT[2][1]),),
        (_u32(KAT[2][2], (1, 1, 2, 2)),),
    ),
    # Three words: the block's first three, and the counter still advances by one whole block.
    (
        _desc([1, 3, 1, 1]),
        (_state((0, 0, 0, 0), (0, 0)),),
        (_u32(KAT[0][2][:3], (1, 3, 1, 1)), _state((1, 0, 0, 0), (0, 0))),
    ),
    # Counter all ones minus one: block 1 is the all-ones known answer (the carry runs through
    # every word), and the state wraps past 2**128 to 1.
    (
        _desc([1, 1, 2, 4]),
        (_state((FF - 1, FF, FF, FF), (FF, FF)),),
        (
            np.concatenate(
                [_u32(philox4x32_10([FF - 1, FF, FF, FF], [FF, FF])), _u32(KAT[1][2])], axis=2
            ).reshape(1, 1, 2, 4),
            _state((0, 0, 0, 0), (FF, FF)),
        ),
    ),
]


@pytest.mark.parametrize("desc, inputs, expected", SEEDS)
def test_known_answers_and_worked_examples(desc, inputs, expected):
    S.assert_same(S.run(S.Case(desc, inputs)), expected)
    S.assert_same(reference.reference(desc, *inputs), expected)


@pytest.mark.parametrize("counter, key, words", KAT)
def test_reference_philox_matches_random123(counter, key, words):
    assert philox4x32_10(list(counter), list(key)) == list(words)


def _updated_counter(counter_hex: str, sizes) -> str:
    """Runs the operator on the page's {3, 3, 20, 7219} output and returns the new counter in the
    page's spelling; only the state is kept, so jit drops the 1.3M random words."""
    words = [int(w, 16) for w in reversed(counter_hex.split("'"))]  # element 0: lowest word
    op = dml.compile_operator(_desc(sizes))
    state = jax.jit(lambda s: op.fn(s)[1])(_state(words, (7, 9)))
    new = [int(w) for w in np.asarray(state).ravel()]
    assert new[4:] == [7, 9]
    return "'".join(f"{w:08x}" for w in reversed(new[:4]))


def test_page_counter_update_example():
    # The page: {3, 3, 20, 7219} outputs advance the counter by 324,855. Its "before"
    # ...'74746c65 and "after" ...'746f776e are swapped (docs/semantics.md): adding takes
    # ...'746f776e to ...'74746c65, and ...'74746c65 to ...'7479615c.
    sizes = (3, 3, 20, 7219)
    assert math.ceil(math.prod(sizes) / 4) == 324_855
    assert (
        _updated_counter("48656c6c'6f46726f'6d536561'746f776e", sizes)
        == "48656c6c'6f46726f'6d536561'74746c65"
    )
    assert (
        _updated_counter("48656c6c'6f46726f'6d536561'74746c65", sizes)
        == "48656c6c'6f46726f'6d536561'7479615c"
    )


# --- properties -------------------------------------------------------------------------------

# Counter words near the wraps, so that carries into the next words are common.
_EDGE_WORDS = [0, 1, 2, FF - 2, FF - 1, FF, 0x80000000, 0x7FFFFFFF]
_word = st.one_of(st.sampled_from(_EDGE_WORDS), st.integers(0, FF))


@st.composite
def states(draw):
    return _state([draw(_word) for _ in range(4)], [draw(_word) for _ in range(2)])


@st.composite
def generator_cases(draw):
    sizes = draw(S.shapes(ranks=(4,), max_elements=S.MAX_ELEMENTS, max_dim=9))
    return S.Case(_desc(sizes, with_state=draw(st.booleans())), (draw(states()),))


@given(generator_cases())
def test_matches_reference(case):
    S.assert_same(S.run(case), reference.reference(case.desc, *case.inputs))


@S.FEW
@given(generator_cases())
def test_jit_equals_eager(case):
    S.check_jit(case)


@S.FEW
@given(generator_cases())
def test_vmap_equals_loop(case):
    S.check_vmap(case)


@S.FEW
@given(states(), st.integers(1, 40), st.integers(1, 40))
def test_the_updated_state_continues_the_stream(state, blocks, tail):
    # 4 * blocks words, then `tail` more from the updated state == one run of 4 * blocks + tail.
    first, later = _desc([1, 1, 1, 4 * blocks]), _desc([1, 1, 1, tail], with_state=False)
    words, new_state = S.run(S.Case(first, (state,)))
    (rest,) = S.run(S.Case(later, (new_state,)))
    (whole,) = S.run(S.Case(_desc([1, 1, 1, 4 * blocks + tail], with_state=False), (state,)))
    np.testing.assert_array_equal(np.concatenate([words, rest], axis=3), whole)


def test_large_output_spot_checks_against_the_reference():
    # 100,003 words (not a multiple of 4), the low counter word wrapping midway: the blocks on
    # both sides of the wrap and the last partial block equal the reference's blocks.
    n = 100_003
    counter, key = [FF - 10_000, FF, 3, 4], [0x1234, 0x5678]
    got, state = S.run(S.Case(_desc([1, 1, 1, n]), (_state(counter, key),)))
    got = got.ravel()
    for block in (0, 10_000, 10_001, 10_002, n // 4):
        c = sum(w << (32 * i) for i, w in enumerate(counter)) + block
        words = philox4x32_10([(c >> (32 * i)) & FF for i in range(4)], key)
        np.testing.assert_array_equal(got[4 * block : 4 * block + 4], words[: n - 4 * block])
    assert state.ravel().tolist() == [25_000 - 10_000, 0, 4, 4, 0x1234, 0x5678]


def test_same_bits_with_x64_enabled():
    case = S.Case(_desc([2, 1, 3, 5]), (_state(KAT[2][0], KAT[2][1]),))
    plain = S.run(case)
    with jax.enable_x64(True):
        wide = tuple(np.asarray(r) for r in dml.compile_operator(case.desc)(*case.inputs))
    S.assert_same(wide, plain)


def test_not_differentiable():
    assert dml.compile_operator(_desc([1, 1, 2, 2])).differentiable is False


def test_bits_make_uniform_floats_the_way_directml_callers_do():
    # tensorflow-directml-plugin: low 23 bits under 1.0's exponent, minus 1 -> [0, 1).
    (bits,) = S.run(S.Case(_desc([1, 1, 16, 16], with_state=False), (_state((0,) * 4, (42, 7)),)))
    u = ((bits & 0x7FFFFF) | 0x3F800000).view(np.float32) - np.float32(1)
    assert u.dtype == np.float32 and 0 <= u.min() and u.max() < 1
    assert 0.4 < u.mean() < 0.6


# --- in graphs --------------------------------------------------------------------------------


def test_state_threads_through_a_graph():
    # Node 0's updated state feeds node 1: its 8 words continue node 0's 8 (2 blocks each).
    first = _desc([1, 1, 1, 8])
    second = _desc([1, 1, 1, 8], with_state=False)
    graph = dml.GraphDesc(
        input_count=1,
        output_count=3,
        nodes=[first, second],
        input_edges=[dml.InputGraphEdge(0, 0, 0)],
        output_edges=[
            dml.OutputGraphEdge(0, 0, 0),
            dml.OutputGraphEdge(1, 0, 1),
            dml.OutputGraphEdge(0, 1, 2),
        ],
        intermediate_edges=[dml.IntermediateGraphEdge(0, 1, 1, 0)],
    )
    state = _state((FF - 2, FF, 0, 0), (11, 22))
    a, b, new_state = (np.asarray(r) for r in dml.compile_graph(graph)(jnp.asarray(state)))
    (whole,) = reference.reference(_desc([1, 1, 1, 16], with_state=False), state)
    np.testing.assert_array_equal(np.concatenate([a, b], axis=3), whole)
    np.testing.assert_array_equal(new_state, _state((FF, FF, 0, 0), (11, 22)))


# --- rules ------------------------------------------------------------------------------------

INVALID_ROWS = [
    (
        lambda: _desc([1, 1, 1, 4], state=T("UINT32", [1, 1, 1, 5])),
        r"InputStateTensor\.Sizes must equal the PHILOX_4X32_10 state \(\{1, 1, 1, 6\}\), got",
    ),
    (
        lambda: _desc([1, 1, 1, 4], state=T("UINT32", [6])),
        r"InputStateTensor\.Sizes must equal the PHILOX_4X32_10 state",
    ),
    (
        lambda: RG(STATE, T("UINT32", [1, 1, 1, 4]), T("UINT32", [1, 1, 6, 1]), "PHILOX_4X32_10"),
        r"RANDOM_GENERATOR: OutputStateTensor\.Sizes must equal InputStateTensor\.Sizes",
    ),
    (
        lambda: RG(STATE, T("UINT32", [1, 1, 1, 4]), T("INT32", [1, 1, 1, 6]), "PHILOX_4X32_10"),
        r"RANDOM_GENERATOR: OutputStateTensor\.DataType must equal UINT32, got INT32",
    ),
    (
        lambda: _desc([1, 1, 1, 4], state=T("INT32", [1, 1, 1, 6]), with_state=False),
        r"RANDOM_GENERATOR: InputStateTensor with data type INT32 .* not supported",
    ),
    (
        lambda: _desc([1, 1, 1, 4], out_type="FLOAT32"),
        r"RANDOM_GENERATOR: OutputTensor with data type FLOAT32 .* not supported",
    ),
    (
        lambda: _desc([2, 8]),
        r"RANDOM_GENERATOR: OutputTensor with data type UINT32 and DimensionCount 2 is not",
    ),
    (
        lambda: RG(STATE, T("UINT32", [1, 1, 1, 4]), None, "XORWOW"),
        r"RANDOM_GENERATOR: Type must be a RandomGeneratorType",
    ),
    (
        lambda: RG(STATE, T("UINT32", [1, 1, 1, 4])),
        r"RANDOM_GENERATOR: Type is required",
    ),
]


@pytest.mark.parametrize("factory, pattern", INVALID_ROWS)
def test_invalid_descriptions_are_rejected(factory, pattern):
    with pytest.raises(dml.ValidationError, match=pattern):
        dml.validate(factory())


def test_needs_feature_level_3_0():
    dml.validate(_desc([1, 1, 1, 4]), "3_0")
    with pytest.raises(dml.ValidationError, match=r"requires feature level 3_0 or later"):
        dml.validate(_desc([1, 1, 1, 4]), "2_1")
