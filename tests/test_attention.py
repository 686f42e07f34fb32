"""MULTIHEAD_ATTENTION and MULTIHEAD_ATTENTION1: worked values, one rule row per rule, properties
against tests/reference/attention.py over layouts (separate, stacked QK / KV / QKV, past only),
every mask type, bias, relative position bias, past / present, grouped heads and past sequence
lengths in FLOAT32 and FLOAT16; eager == jit, vmap, gradients; the choices docs/semantics.md
states ("Multi-head attention")."""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
import re

import jax
import jax.extend as jex
import jax.numpy as jnp
import numpy as np
import pytest
import reference
import strategies as S
from hypothesis import given
from hypothesis import strategies as st

import dml_jax as dml
from dml_jax.precision import float16_pieces

T = dml.TensorDesc
MHA = dml.MultiheadAttentionOperatorDesc
MHA1 = dml.MultiheadAttention1OperatorDesc


def _t(sizes, type_name="FLOAT32"):
    return T(type_name, list(sizes))


def _a(*values, shape, dtype=np.float32):
    return np.array(values, dtype).reshape(shape)


def _i(*values, shape):
    return _a(*values, shape=shape, dtype=np.int32)


# --- worked values ----------------------------------------------------------------------------

SEEDS = [
    # One head, equal logits (Q . K = 1 for both keys): the mean of the two values.
    (
        MHA(_t((1, 1, 2)), _t((1, 2, 2)), _t((1, 2, 2)), output_tensor=_t((1, 1, 2)),
            scale=1.0, mask_filter_value=-10000.0, head_count=1),
        (_a(1, 1, shape=(1, 1, 2)), _a(1, 0, 0, 1, shape=(1, 2, 2)),
         _a(2, 4, 6, 8, shape=(1, 2, 2))),
        (_a(4, 6, shape=(1, 1, 2)),),
    ),
    # The same in FLOAT16.
    (
        MHA(_t((1, 1, 2), "FLOAT16"), _t((1, 2, 2), "FLOAT16"), _t((1, 2, 2), "FLOAT16"),
            output_tensor=_t((1, 1, 2), "FLOAT16"), scale=1.0, mask_filter_value=-10000.0,
            head_count=1),
        (_a(1, 1, shape=(1, 1, 2), dtype=np.float16), _a(1, 0, 0, 1, shape=(1, 2, 2),
         dtype=np.float16), _a(2, 4, 6, 8, shape=(1, 2, 2), dtype=np.float16)),
        (_a(4, 6, shape=(1, 1, 2), dtype=np.float16),),
    ),
    # KEY_SEQUENCE_LENGTH {1, B} = [2, 1]: batch 0's third key (logit 10) is set to -10000, batch
    # 1 keeps only its first key.
    (
        MHA(_t((2, 1, 2)), _t((2, 3, 2)), _t((2, 3, 2)), mask_tensor=_t((1, 2), "INT32"),
            output_tensor=_t((2, 1, 2)), scale=1.0, mask_filter_value=-10000.0, head_count=1,
            mask_type="KEY_SEQUENCE_LENGTH"),
        (_a(1, 1, 1, 1, shape=(2, 1, 2)), _a(1, 0, 0, 1, 5, 5, 1, 0, 0, 1, 5, 5, shape=(2, 3, 2)),
         _a(2, 4, 6, 8, 100, 100, 1, 2, 3, 4, 5, 6, shape=(2, 3, 2)), _i(2, 1, shape=(1, 2))),
        (_a(4, 6, 1, 2, shape=(2, 1, 2)),),
    ),
    # KEY_SEQUENCE_END_START {2, B}: end 3 (exclusive), start 1 (inclusive): keys 1 and 2.
    (
        MHA(_t((1, 1, 2)), _t((1, 3, 2)), _t((1, 3, 2)), mask_tensor=_t((2, 1), "INT32"),
            output_tensor=_t((1, 1, 2)), scale=1.0, mask_filter_value=-10000.0, head_count=1,
            mask_type="KEY_SEQUENCE_END_START"),
        (_a(0, 0, shape=(1, 1, 2)), _a(9, 9, 1, 2, 3, 4, shape=(1, 3, 2)),
         _a(50, 50, 2, 4, 6, 8, shape=(1, 3, 2)), _i(3, 1, shape=(2, 1))),
        (_a(4, 6, shape=(1, 1, 2)),),
    ),
    # BOOLEAN {B, H, S, T}: a 0 adds MaskFilterValue (-inf here): only the first key counts.
    (
        MHA(_t((1, 1, 2)), _t((1, 2, 2)), _t((1, 2, 2)), mask_tensor=_t((1, 1, 1, 2), "INT32"),
            output_tensor=_t((1, 1, 2)), scale=1.0, mask_filter_value=-math.inf, head_count=1,
            mask_type="BOOLEAN"),
        (_a(1, 1, shape=(1, 1, 2)), _a(1, 0, 0, 7, shape=(1, 2, 2)),
         _a(2, 4, 6, 8, shape=(1, 2, 2)), _i(1, 0, shape=(1, 1, 1, 2))),
        (_a(2, 4, shape=(1, 1, 2)),),
    ),
    # KEY_QUERY_SEQUENCE_LENGTH_START_END {3B + 2} with the padded layout's offsets: key lengths
    # [1, 2], query starts [0, 1] and end 2, key starts [0, 2] and end 4.
    (
        MHA(_t((2, 1, 2)), _t((2, 2, 2)), _t((2, 2, 2)), mask_tensor=_t((8,), "INT32"),
            output_tensor=_t((2, 1, 2)), scale=1.0, mask_filter_value=-10000.0, head_count=1,
            mask_type="KEY_QUERY_SEQUENCE_LENGTH_START_END"),
        (_a(0, 0, 0, 0, shape=(2, 1, 2)), _a(*range(8), shape=(2, 2, 2)) * 0,
         _a(2, 4, 6, 8, 1, 2, 3, 4, shape=(2, 2, 2)), _i(1, 2, 0, 1, 2, 0, 2, 4, shape=(8,))),
        (_a(2, 4, 2, 3, shape=(2, 1, 2)),),
    ),
    # StackedQueryKeyValue {1, 1, 2 heads, 3, 1} after a past of one position, with present
    # outputs: head 0 (q = k = 1, past key 1) averages past value 1 and new value 3; head 1
    # (q = 2, keys 0) averages 7 and 5.
    (
        MHA(stacked_query_key_value_tensor=_t((1, 1, 2, 3, 1)), past_key_tensor=_t((1, 2, 1, 1)),
            past_value_tensor=_t((1, 2, 1, 1)), output_tensor=_t((1, 1, 2)),
            output_present_key_tensor=_t((1, 2, 2, 1)),
            output_present_value_tensor=_t((1, 2, 2, 1)), scale=1.0,
            mask_filter_value=-10000.0, head_count=2),
        (_a(1, 1, 3, 2, 0, 5, shape=(1, 1, 2, 3, 1)), _a(1, 0, shape=(1, 2, 1, 1)),
         _a(1, 7, shape=(1, 2, 1, 1))),
        (_a(2, 6, shape=(1, 1, 2)), _a(1, 1, 0, 0, shape=(1, 2, 2, 1)),
         _a(1, 3, 7, 5, shape=(1, 2, 2, 1))),
    ),
    # BiasTensor {Hq*D + Hkv*D + Hkv*Dv}: adds [10, 20] to every value; a zero relative position
    # bias keeps the logits equal.
    (
        MHA(_t((1, 1, 2)), _t((1, 2, 2)), _t((1, 2, 2)), bias_tensor=_t((6,)),
            relative_position_bias_tensor=_t((1, 1, 1, 2)), output_tensor=_t((1, 1, 2)),
            scale=1.0, mask_filter_value=-10000.0, head_count=1),
        (_a(0, 0, shape=(1, 1, 2)), _a(0, 0, 0, 0, shape=(1, 2, 2)),
         _a(2, 4, 6, 8, shape=(1, 2, 2)), _a(0, 0, 0, 0, 10, 20, shape=(6,)),
         _a(0, 0, shape=(1, 1, 1, 2))),
        (_a(14, 26, shape=(1, 1, 2)),),
    ),
    # MULTIHEAD_ATTENTION1: two query heads on one key/value head, past sequence length 1 in a
    # cache of 3: the new key/value goes to position 1, and the query sees positions 0 and 1
    # (the mean of 1 and 9), not the stale 100 at position 2.
    (
        MHA1(_t((1, 1, 2)), _t((1, 1, 1)), _t((1, 1, 1)), past_key_tensor=_t((1, 1, 3, 1)),
             past_value_tensor=_t((1, 1, 3, 1)),
             past_sequence_lengths_tensor=_t((1,), "INT32"), output_tensor=_t((1, 1, 2)),
             output_present_key_tensor=_t((1, 1, 3, 1)),
             output_present_value_tensor=_t((1, 1, 3, 1)), scale=1.0,
             mask_filter_value=-10000.0, query_head_count=2, key_value_head_count=1),
        (_a(1, -1, shape=(1, 1, 2)), _a(0, shape=(1, 1, 1)), _a(9, shape=(1, 1, 1)),
         _a(0, 0, 0, shape=(1, 1, 3, 1)), _a(1, 3, 100, shape=(1, 1, 3, 1)),
         _i(1, shape=(1,))),
        (_a(5, 5, shape=(1, 1, 2)), _a(0, 0, 0, shape=(1, 1, 3, 1)),
         _a(1, 9, 100, shape=(1, 1, 3, 1))),
    ),
]  # fmt: skip


@pytest.mark.parametrize("desc, inputs, expected", SEEDS)
def test_worked_examples(desc, inputs, expected):
    S.assert_same(S.run(S.Case(desc, inputs)), expected)
    S.assert_same(reference.reference(desc, *inputs), expected)


# --- properties against the reference ---------------------------------------------------------

LAYOUTS = ("separate", "stacked_qk", "stacked_kv", "stacked_qkv", "past_only")
MASKS = tuple(dml.MultiheadAttentionMaskType)


def _lead(draw, core: tuple[int, ...], most: int) -> tuple[int, ...]:
    """``core`` with 0 or more leading 1s, at most ``most`` dimensions."""
    return (1,) * draw(st.integers(0, most - len(core))) + core


@st.composite
def attention_cases(draw, version=None, type_name=None, layout=None, mask_type=None,
                    finite=False):  # fmt: skip
    """A valid MULTIHEAD_ATTENTION(1) case and its inputs.

    ``finite`` keeps MaskFilterValue finite and rows from being fully masked with a large
    additive filter (for gradients and tight comparisons)."""
    version = draw(st.sampled_from(["", "1"])) if version is None else version
    type_name = type_name or draw(st.sampled_from(["FLOAT32", "FLOAT16"]))
    b, s = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    hkv = draw(st.integers(1, 2))
    stacked_query = layout in ("stacked_qk", "stacked_qkv")
    group = draw(st.integers(1, 2)) if version and not stacked_query else 1
    hq = hkv * group
    d = draw(st.integers(1, 3))
    options = [x for x in LAYOUTS if group == 1 or x in ("separate", "stacked_kv", "past_only")]
    layout = layout or draw(st.sampled_from(options))
    kv = {"separate": None, "stacked_kv": None, "past_only": 0}.get(layout, s)
    kv = draw(st.integers(1, 3)) if kv is None else kv
    dv = draw(st.integers(1, 3)) if layout in ("separate", "past_only") else d
    with_past = layout == "past_only" or draw(st.booleans())
    lengths = bool(version) and with_past and draw(st.booleans())
    p = draw(st.integers(1, 4)) if with_past else 0
    total = p if lengths else p + kv

    def ft(core, most=5):
        return _t(_lead(draw, core, most), type_name)

    f = {}
    if layout in ("separate", "stacked_kv", "past_only"):
        f["query_tensor"] = ft((b, s, hq * d))
    if layout == "separate":
        f["key_tensor"] = ft((b, kv, hkv * d))
        f["value_tensor"] = ft((b, kv, hkv * dv))
    if layout == "stacked_qk":
        f["stacked_query_key_tensor"] = _t((b, s, hq, 2, d), type_name)
        f["value_tensor"] = ft((b, kv, hkv * dv))
    if layout == "stacked_kv":
        f["stacked_key_value_tensor"] = _t((b, kv, hkv, 2, d), type_name)
    if layout == "stacked_qkv":
        f["stacked_query_key_value_tensor"] = _t((b, s, hq, 3, d), type_name)
    if draw(st.booleans()):
        f["bias_tensor"] = ft((hq * d + hkv * d + hkv * dv,))
    if draw(st.booleans()):
        f["relative_position_bias_tensor"] = ft((b, hq, s, total))
    if with_past:
        f["past_key_tensor"] = ft((b, hkv, p, d))
        f["past_value_tensor"] = ft((b, hkv, p, dv))
    if lengths:
        f["past_sequence_lengths_tensor"] = _t(_lead(draw, (b,), 5), "INT32")
    mask_type = mask_type or draw(st.sampled_from(MASKS))
    mask_core = {
        "KEY_SEQUENCE_LENGTH": (1, b),
        "KEY_SEQUENCE_END_START": (2, b),
        "KEY_QUERY_SEQUENCE_LENGTH_START_END": (3 * b + 2,),
        "BOOLEAN": (b, hq, s, total),
    }.get(mask_type.name)
    if mask_core:
        f["mask_tensor"] = _t(_lead(draw, mask_core, 5), "INT32")
    f["output_tensor"] = ft((b, s, hq * dv))
    if draw(st.booleans()):
        f["output_present_key_tensor"] = ft((b, hkv, total, d))
    if draw(st.booleans()):
        f["output_present_value_tensor"] = ft((b, hkv, total, dv))
    fill = [-10000.0, -3.0, 0.0, 2.5] + ([] if finite else [-math.inf])
    heads = {"query_head_count": hq, "key_value_head_count": hkv} if version else {}
    desc = (MHA1 if version else MHA)(
        **f,
        scale=draw(st.sampled_from([0.5, 1 / math.sqrt(d), -1.0, 0.0])),
        mask_filter_value=draw(st.sampled_from(fill)),
        mask_type=mask_type,
        **(heads or {"head_count": hq}),
    )

    rng = draw(S.seeds())
    inputs = []
    for path, t in desc.input_slots():
        if path == "MaskTensor":
            inputs.append(_mask_values(draw, rng, desc, mask_type.name, b, s, total, t, finite))
        elif path == "PastSequenceLengthsTensor":
            inputs.append(rng.integers(-1, p + 2, t.sizes).astype(np.int32))
        else:
            inputs.append(S.values(rng, type_name, t.sizes, "small"))
    return S.Case(desc, tuple(inputs))


def _mask_values(draw, rng, desc, name, b, s, total, t, finite):
    if name == "BOOLEAN":
        m = rng.choice(np.array([0, 1, 1, 2, -1], np.int32), size=t.sizes)
        if finite and abs(desc.mask_filter_value) > 100:
            m.reshape(-1, total)[:, -1] = 1  # no row is shifted as a whole by a large filter
        return m.astype(np.int32)
    if name == "KEY_SEQUENCE_LENGTH":
        return rng.integers(0, total + 2, t.sizes).astype(np.int32)
    if name == "KEY_SEQUENCE_END_START":
        ends = rng.integers(0, total + 2, b)
        starts = rng.integers(-1, total + 1, b)
        return np.concatenate([ends, starts]).astype(np.int32).reshape(t.sizes)
    lengths = rng.integers(0, total + 2, b)
    if draw(st.booleans()):  # the padded layout's offsets
        q_starts, k_starts = np.arange(b + 1) * s, np.arange(b + 1) * total
    else:
        q_starts = np.sort(rng.integers(0, b * s + 1, b + 1))
        k_starts = np.sort(rng.integers(0, b * total + 1, b + 1))
    return np.concatenate([lengths, q_starts, k_starts]).astype(np.int32).reshape(t.sizes)


def _tolerance(case: S.Case) -> dict:
    if case.desc.output_tensor.data_type.name == "FLOAT16":
        return {"rtol": 1e-2, "atol": 1e-2}
    tolerance = {"rtol": 1e-4, "atol": 1e-4}
    d = case.desc
    boolean = d.mask_tensor is not None and d.mask_type is dml.MultiheadAttentionMaskType.BOOLEAN
    if boolean and np.isfinite(d.mask_filter_value):
        # A BOOLEAN mask adds MaskFilterValue: in float32 each masked logit rounds to the
        # spacing of |MaskFilterValue|, and in a row whose keys are all masked those roundings
        # are all that separates the softmax weights (the float64 reference keeps them): the
        # weights move by up to that spacing, relatively, and the output, a mean of values
        # (bias included), by that times their size. (Thorough profile: -10000 moved an
        # output by 2.1e-4.)
        sizes = [float(np.max(np.abs(a))) for a in case.inputs if a.dtype.kind == "f" and a.size]
        spacing = float(np.spacing(np.float32(abs(d.mask_filter_value))))
        tolerance["atol"] += 2 * spacing * 2 * max(sizes, default=0.0)
    return tolerance


@given(case=attention_cases())
def test_attention_matches_reference(case):
    got = S.run(case)
    want = reference.reference(case.desc, *case.inputs)
    S.assert_same(got, want, exact=False, **_tolerance(case))


@S.FEW
@pytest.mark.parametrize("layout", LAYOUTS)
@given(data=st.data())
def test_every_layout_matches_reference(layout, data):
    case = data.draw(attention_cases(layout=layout))
    S.assert_same(S.run(case), reference.reference(case.desc, *case.inputs), exact=False,
                  **_tolerance(case))  # fmt: skip


@S.FEW
@pytest.mark.parametrize("mask_type", MASKS, ids=lambda m: m.name)
@given(data=st.data())
def test_every_mask_type_matches_reference(mask_type, data):
    case = data.draw(attention_cases(mask_type=mask_type))
    S.assert_same(S.run(case), reference.reference(case.desc, *case.inputs), exact=False,
                  **_tolerance(case))  # fmt: skip


@S.FEW
@given(case=attention_cases(type_name="FLOAT32"))
def test_attention_jit_and_vmap(case):
    # The same products; a backend may order a sum differently per program: last bits.
    S.check_jit(case, exact=False, rtol=1e-5, atol=1e-5)
    S.check_vmap(case, exact=False, rtol=1e-5, atol=1e-5)


@S.FEW
@given(case=attention_cases(type_name="FLOAT16"))
def test_attention_float16_jit(case):
    S.check_jit(case, exact=False, rtol=2e-3, atol=2e-3)


@S.FEW
@given(case=attention_cases(type_name="FLOAT32", finite=True))
def test_attention_gradients(case):
    floats = tuple(i for i, a in enumerate(case.inputs) if a.dtype.kind == "f")
    S.check_grads(case, argnums=floats, atol=5e-2, rtol=5e-2)


# --- choices where DirectML is silent (docs/semantics.md, "Multi-head attention") -------------


def _one_row(mask_type, mask, filter_value, logits_key1=5.0):
    """One query (zeros plus a key that gives logit ``logits_key1`` on key 1)."""
    desc = MHA(
        _t((1, 1, 1)), _t((1, 2, 1)), _t((1, 2, 1)), mask_tensor=_t(mask.shape, "INT32"),
        output_tensor=_t((1, 1, 1)), scale=1.0, mask_filter_value=filter_value, head_count=1,
        mask_type=mask_type,
    )  # fmt: skip
    inputs = (_a(1, shape=(1, 1, 1)), _a(0, logits_key1, shape=(1, 2, 1)),
              _a(10, 20, shape=(1, 2, 1)), mask)  # fmt: skip
    return float(S.run(S.Case(desc, inputs))[0].ravel()[0]), desc, inputs


def test_mask_filter_value_is_added_for_boolean_and_set_for_the_sequence_types():
    """BOOLEAN adds MaskFilterValue to the masked logit (5 - 1 = 4); KEY_SEQUENCE_LENGTH sets it
    (-1), as each type's own sentence on DirectML's page says."""
    added, *_ = _one_row("BOOLEAN", _i(1, 0, shape=(1, 1, 1, 2)), -1.0)
    w = math.exp(4) / (1 + math.exp(4))
    assert added == pytest.approx(10 * (1 - w) + 20 * w, rel=1e-6)
    set_, *_ = _one_row("KEY_SEQUENCE_LENGTH", _i(1, shape=(1, 1)), -1.0)
    w = math.exp(-1) / (1 + math.exp(-1))
    assert set_ == pytest.approx(10 * (1 - w) + 20 * w, rel=1e-6)


def test_fully_masked_rows():
    """A sequence-length mask that keeps no key sets every logit to MaskFilterValue: the mean of
    the values; BOOLEAN with -inf leaves no normalization: NaN (SOFTMAX's rule); BOOLEAN with a
    finite filter shifts the whole row: the unmasked softmax, up to float32 rounding."""
    mean, *_ = _one_row("KEY_SEQUENCE_LENGTH", _i(0, shape=(1, 1)), -10000.0)
    assert mean == 15
    nan, *_ = _one_row("BOOLEAN", _i(0, 0, shape=(1, 1, 1, 2)), -math.inf)
    assert math.isnan(nan)
    shifted, desc, inputs = _one_row("BOOLEAN", _i(0, 0, shape=(1, 1, 1, 2)), -10000.0)
    w = math.exp(5) / (1 + math.exp(5))
    assert shifted == pytest.approx(10 * (1 - w) + 20 * w, abs=2e-2)
    assert float(reference.reference(desc, *inputs)[0].ravel()[0]) == pytest.approx(
        shifted, abs=2e-2
    )


def test_a_row_of_minus_infinity_is_nan_under_jit():
    """One key, set to -inf: NaN in eager and jitted code alike (XLA's CPU code for exp(x - max)
    of such a row gave arbitrary numbers; the lowering sets the NaN explicitly)."""
    desc = MHA(
        _t((1, 1, 2)), _t((1, 1, 2)), _t((1, 1, 6)), mask_tensor=_t((1, 1), "INT32"),
        output_tensor=_t((1, 1, 6)), scale=0.5, mask_filter_value=-math.inf, head_count=2,
        mask_type="KEY_SEQUENCE_LENGTH",
    )  # fmt: skip
    ones = [np.ones(t.sizes, np.float32) for t in (desc.query_tensor, desc.key_tensor,
                                                   desc.value_tensor)]  # fmt: skip
    case = S.Case(desc, (*ones, np.zeros((1, 1), np.int32)))
    assert np.isnan(S.run(case)[0]).all()
    op = dml.compile_operator(desc)
    assert np.isnan(np.asarray(op.fn(*case.inputs))).all()


def _cache_desc(seq: int, capacity: int):
    """MULTIHEAD_ATTENTION1 of one head of size 1 over a cache of ``capacity`` positions with a
    past sequence length, ``seq`` queries and new keys, its present values an output."""
    s, c = _t((1, seq, 1)), _t((1, 1, capacity, 1))
    return MHA1(
        s, s, s, past_key_tensor=c, past_value_tensor=c,
        past_sequence_lengths_tensor=_t((1,), "INT32"), output_tensor=s,
        output_present_value_tensor=c, scale=1.0, mask_filter_value=-10000.0,
        query_head_count=1, key_value_head_count=1,
    )  # fmt: skip


def test_past_sequence_lengths_are_causal_and_drop_what_the_cache_cannot_hold():
    """Capacity 2, past length 1, three new keys: positions 1 and 2 of the cache would get new
    keys 0 and 1 (key 2 falls outside and is dropped); query i sees positions <= 1 + 3 - 3 + i:
    query 0 positions {0, 1}, query 1 and 2 everything (two positions). A negative length
    shifts the frontier before position 0 for query 0: no position, output 0."""
    desc = _cache_desc(seq=3, capacity=2)
    zeros = np.zeros((1, 3, 1), np.float32)
    values = _a(10, 20, 30, shape=(1, 3, 1))
    past_v = _a(2, 4, shape=(1, 1, 2, 1))
    out, present = S.run(S.Case(desc, (zeros, zeros, values, np.zeros((1, 1, 2, 1), np.float32),
                                       past_v, _i(1, shape=(1,)))))  # fmt: skip
    np.testing.assert_array_equal(present.ravel(), [2, 10])
    np.testing.assert_array_equal(out.ravel(), [6, 6, 6])
    out, present = S.run(S.Case(desc, (zeros, zeros, values, np.zeros((1, 1, 2, 1), np.float32),
                                       past_v, _i(-2, shape=(1,)))))  # fmt: skip
    # Frontier -2 + 3 - 3 + i: query 0 none, query 1 none, query 2 position 0 (new key 2).
    np.testing.assert_array_equal(present.ravel(), [30, 4])
    np.testing.assert_array_equal(out.ravel(), [0, 0, 30])


def test_cache_rows_after_the_sequence_never_reach_the_output():
    """Capacity 4, past length 1, one new key: the cache's rows 2 and 3 hold a NaN and an
    infinity in keys and values, which no query attends (docs/semantics.md): the output is the
    mean of past value 2 and new value 10 (equal logits), and the present keeps those rows as
    they were, the new key written at row 1."""
    desc = _cache_desc(seq=1, capacity=4)
    past_k = _a(0.0, 5.0, np.nan, np.inf, shape=(1, 1, 4, 1))
    past_v = _a(2.0, 7.0, np.nan, -np.inf, shape=(1, 1, 4, 1))
    q, k, v = _a(1.0, shape=(1, 1, 1)), _a(0.0, shape=(1, 1, 1)), _a(10.0, shape=(1, 1, 1))
    out, present = S.run(S.Case(desc, (q, k, v, past_k, past_v, _i(1, shape=(1,)))))
    np.testing.assert_array_equal(out.ravel(), [6.0])
    np.testing.assert_array_equal(present.ravel(), [2.0, 10.0, np.nan, -np.inf])


def test_rows_without_a_position_give_zero_gradients():
    """The cache case above with length -2: queries 0 and 1 see no position and give 0; their
    gradients are 0, not NaN (the lowering settles such a row on a divisor of 1; a NaN divisor
    behind a select would turn the select's zero cotangent into NaN), and the rest finite."""
    desc = MHA1(
        _t((1, 3, 1)), _t((1, 3, 1)), _t((1, 3, 1)), past_key_tensor=_t((1, 1, 2, 1)),
        past_value_tensor=_t((1, 1, 2, 1)), past_sequence_lengths_tensor=_t((1,), "INT32"),
        output_tensor=_t((1, 3, 1)), scale=1.0, mask_filter_value=-10000.0,
        query_head_count=1, key_value_head_count=1,
    )  # fmt: skip
    fn = dml.compile_operator(desc).fn
    q = _a(0.5, 1.0, 1.5, shape=(1, 3, 1))
    k = _a(1.0, -1.0, 2.0, shape=(1, 3, 1))
    v = _a(10, 20, 30, shape=(1, 3, 1))
    pk, pv = _a(0.25, 0.5, shape=(1, 1, 2, 1)), _a(2, 4, shape=(1, 1, 2, 1))
    lengths = _i(-2, shape=(1,))
    np.testing.assert_array_equal(np.asarray(fn(q, k, v, pk, pv, lengths)).ravel(), [0, 0, 30])
    grads = jax.grad(lambda *a: fn(*a, lengths).sum(), argnums=(0, 1, 2, 3, 4))(q, k, v, pk, pv)
    for g in grads:
        assert np.isfinite(np.asarray(g)).all()
    np.testing.assert_array_equal(np.asarray(grads[0]).ravel(), [0, 0, 0])  # one position: 0
    np.testing.assert_array_equal(np.asarray(grads[2]).ravel(), [0, 0, 1])  # query 2 takes v 2


def _equations(jaxpr):
    """Every equation of a traced program, those of its sub-programs included."""
    for eqn in jaxpr.eqns:
        yield eqn
        for param in eqn.params.values():
            for sub in param if isinstance(param, (tuple, list)) else (param,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    yield from _equations(inner)


def test_the_lax_lowering_neither_moves_selects_nor_divides_the_s_by_t_tensor():
    """The lax lowering's cost at long sequences is its passes over the {S, T} logits, so the
    tensor is written by the first product, masked once (the BOOLEAN mask's select), and read
    by the softmax's maximum, its exponentials and the second product: no transpose of it (the
    product comes out as {B, H, S, T}), no select for rows without a finite maximum (they are
    settled on the row's divisor) and no division (it comes after the second product, on the
    {S, Dv} result). S = 5 and T = 7 tell the axes apart."""
    from dml_jax.ops.attention import lower_attention

    desc = _m(q=(2, 5, 8), k=(2, 7, 8), v=(2, 7, 8), out=(2, 5, 8),
              mask_tensor=((2, 2, 5, 7), "INT32"), mask_type="BOOLEAN")()  # fmt: skip
    args = [np.ones(t.sizes, t.dtype) for _, t in desc.input_slots()]
    eqns = list(_equations(jax.make_jaxpr(lambda *a: lower_attention(desc, *a))(*args).jaxpr))
    on_logits = [
        e.primitive.name
        for e in eqns
        if any(tuple(getattr(v.aval, "shape", ()))[-2:] == (5, 7) for v in e.outvars)
    ]
    assert "dot_general" in on_logits and "exp" in on_logits  # the test sees the tensor
    assert "transpose" not in on_logits
    assert "div" not in on_logits
    assert on_logits.count("select_n") == 1, on_logits
    assert any(e.primitive.name == "div" for e in eqns)  # the division, on the small result


def test_float16_logits_accumulate_in_float32():
    """2048 products of 8 * 8: a float16 sum would overflow (131072 > 65504) and give NaN; in
    float32 the logits are 1 and 1 and the output is the mean of the values."""
    n = 2048
    t = (1, 1, n)
    desc = MHA(
        _t(t, "FLOAT16"), _t((1, 2, n), "FLOAT16"), _t((1, 2, n), "FLOAT16"),
        output_tensor=_t(t, "FLOAT16"), scale=2.0**-17, mask_filter_value=-10000.0, head_count=1,
    )  # fmt: skip
    q = np.full(t, 8, np.float16)
    k = np.full((1, 2, n), 8, np.float16)
    v = np.concatenate([np.full((1, 1, n), 2), np.full((1, 1, n), 4)], 1).astype(np.float16)
    (out,) = S.run(S.Case(desc, (q, k, v)))
    np.testing.assert_array_equal(out, np.full(t, 3, np.float16))


def test_half_precision_flag_reaches_the_products():
    """Both products ask for HIGHEST (float32) without ALLOW_HALF_PRECISION_COMPUTATION, and for
    DEFAULT with it (GEMM's rule)."""
    desc = _m()()
    args = [np.ones(t.sizes, np.float32) for _, t in desc.input_slots()]
    for half, highest in ((False, 2), (True, 0)):
        op = dml.compile_operator(desc, allow_half_precision=half)
        jaxpr = str(jax.make_jaxpr(op.fn)(*args))
        assert jaxpr.count("dot_general") == 2
        assert jaxpr.count("precision=(Precision.HIGHEST, Precision.HIGHEST)") == highest


def test_half_precision_flag_rounds_float16_logits_to_float16():
    """Q . K = 2049 for key 0 and 2048 for key 1 (scale 1/16): float32 logits 128.0625 and 128
    give key 0 the weight 0.5156; with ALLOW_HALF_PRECISION_COMPUTATION the logits may round to
    float16, where 2049 is 2048, and both keys weigh one half: they do on the CPU, while XLA's
    GPU compiler may keep the float32 product it accumulated (excess precision the flag
    permits)."""
    t = lambda sizes: _t(sizes, "FLOAT16")
    desc = MHA(t((1, 1, 2)), t((1, 2, 2)), t((1, 2, 2)), output_tensor=t((1, 1, 2)),
               scale=1 / 16, mask_filter_value=-10000.0, head_count=1)  # fmt: skip
    q = np.array([[[1, 1]]], np.float16)
    k = np.array([[[2048, 1], [2048, 0]]], np.float16)
    v = np.array([[[1024, 0], [0, 0]]], np.float16)
    exact = np.asarray(dml.compile_operator(desc)(q, k, v))
    half = np.asarray(dml.compile_operator(desc, allow_half_precision=True)(q, k, v))
    w0 = 1 / (1 + np.exp(-1 / 16))
    np.testing.assert_allclose(exact[0, 0, 0], 1024 * w0, rtol=2e-3)
    assert half[0, 0, 1] == 0
    if jax.default_backend() == "cpu":
        assert half[0, 0, 0] == 512
    else:
        assert half[0, 0, 0] in (512, exact[0, 0, 0])


def test_float16_pieces_hold_float32_exactly():
    """Three float16 pieces sum to x * 2**14 exactly for float32 x in [2**-15, 1] (the bits of
    smaller x reach below float16's subnormals), and to within 2**-38 (in x's units) below; one
    piece is x rounded to float16."""
    rng = np.random.default_rng(11)
    x = np.concatenate([rng.random(4000), 2.0 ** -rng.uniform(0, 40, 4000), [0, 1, 2**-15]])
    x = x.astype(np.float32)
    pieces = [np.asarray(p) for p in float16_pieces(jnp.asarray(x), 3)]
    assert all(p.dtype == np.float16 for p in pieces)
    total = sum(p.astype(np.float64) for p in pieces) * 2.0**-14
    exact = x >= 2.0**-15
    np.testing.assert_array_equal(total[exact], x[exact].astype(np.float64))
    assert np.abs(total - x).max() <= 2.0**-38
    (one,) = float16_pieces(jnp.asarray(x), 1)
    np.testing.assert_array_equal(np.asarray(one), (x * np.float32(2**14)).astype(np.float16))


def test_float16_probabilities_enter_the_product_at_float32_precision():
    """FLOAT16 values: the float32 probabilities times the values equal the float64 product to
    float32 accuracy; with ALLOW_HALF_PRECISION_COMPUTATION the probabilities are rounded to
    float16 and the product is only float16-accurate."""
    from dml_jax.ops.attention_parts import weighted_values
    from dml_jax.precision import with_half_precision

    rng = np.random.default_rng(12)
    w = rng.random((1, 2, 1, 3, 64)).astype(np.float32)
    w /= w.sum(-1, keepdims=True)
    v = rng.standard_normal((1, 2, 64, 5)).astype(np.float16)
    want = np.einsum("bkrst,bktd->bskrd", w.astype(np.float64), v.astype(np.float64))
    scale = np.einsum("bkrst,bktd->bskrd", np.abs(w), np.abs(v).astype(np.float64))

    def product(half):
        fn = with_half_precision(weighted_values, half)
        return np.asarray(jax.jit(fn)(w, v), np.float64)

    assert (np.abs(product(False) - want) / scale).max() < 2e-7
    assert (np.abs(product(True) - want) / scale).max() > 2e-5
    # derivatives are the float32 product's
    grad = jax.grad(lambda a: weighted_values(a, v).sum())(w)
    np.testing.assert_allclose(
        np.asarray(grad),
        np.broadcast_to(v.astype(np.float32).sum(-1)[:, :, None, None], w.shape),
        rtol=1e-6,
    )


def test_float16_values_meet_the_weights_on_tf32_tensor_cores_on_cuda_only(monkeypatch):
    """``attention_parts.weights_product``: FLOAT16 values times the float32 weights is one product per
    platform, TF32 x3 on CUDA GPUs (float32-accurate for FLOAT16 values: their TF32 remainder
    is 0) and float32 elsewhere; FLOAT32 values, the half-precision flag and CUDA devices
    without TF32 tensor cores take one product at the lowering's precision."""
    import jax.extend as jex

    from dml_jax.ops import attention_parts
    from dml_jax.precision import with_half_precision

    w = np.ones((1, 2, 1, 3, 8), np.float32)

    def precisions(values, half=False):
        fn = with_half_precision(attention_parts.weighted_values, half)
        found = []

        def walk(jaxpr, platforms=None):
            for eqn in jaxpr.eqns:
                if eqn.primitive.name == "dot_general":
                    found.append((platforms, str(eqn.params["precision"])))
                branches = eqn.params.get("branches_platforms")
                for i, sub in enumerate(jex.core.jaxprs_in_params(eqn.params)):
                    walk(sub, branches[i] if branches else platforms)

        walk(jax.make_jaxpr(fn)(w, values).jaxpr)
        return found

    highest = str((jax.lax.Precision.HIGHEST,) * 2)
    assert precisions(np.ones((1, 2, 8, 4), np.float16)) == [
        (("cuda",), str(jax.lax.DotAlgorithmPreset.TF32_TF32_F32_X3)),
        (None, highest),
    ]
    assert precisions(np.ones((1, 2, 8, 4), np.float32)) == [(None, highest)]
    assert len(precisions(np.ones((1, 2, 8, 4), np.float16), half=True)) == 1
    monkeypatch.setattr(attention_parts, "tf32_tensor_cores", lambda: False)  # a pre-Ampere GPU
    assert precisions(np.ones((1, 2, 8, 4), np.float16)) == [(None, highest)]


def test_float16_values_above_four_do_not_overflow_when_one_key_takes_all_the_weight():
    """A regression: probabilities entered the second product as float16 pieces scaled by
    2**14, whose products with values above 4 overflowed float16 on a GPU (-inf outputs)."""
    rng = np.random.default_rng(5)
    q = rng.standard_normal((1, 2, 4)).astype(np.float16)
    k = np.zeros((1, 2, 4), np.float16)
    v = (rng.standard_normal((1, 2, 4)) * 1000).astype(np.float16)
    mask = np.array([[[[1, 0], [1, 0]]]], np.int32)  # every query reads key 0 only
    desc = MHA(_t((1, 2, 4), "FLOAT16"), _t((1, 2, 4), "FLOAT16"), _t((1, 2, 4), "FLOAT16"),
               mask_tensor=_t((1, 1, 2, 2), "INT32"), mask_type="BOOLEAN",
               output_tensor=_t((1, 2, 4), "FLOAT16"), scale=0.5, mask_filter_value=-1e4,
               head_count=1)  # fmt: skip
    out = np.asarray(dml.compile_operator(desc)(q, k, v, mask))
    np.testing.assert_array_equal(out, np.broadcast_to(v[:, :1], (1, 2, 4)))


def _product_operand_types(fn, *args) -> list[tuple[str, ...]]:
    """The operand dtypes of every dot_general that ``fn`` traces (nested jaxprs included)."""
    found = []

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "dot_general":
                found.append(tuple(str(v.aval.dtype) for v in eqn.invars))
            for sub in jex.core.jaxprs_in_params(eqn.params):
                walk(sub)

    walk(jax.make_jaxpr(fn)(*args).jaxpr)
    return found


def test_float16_products_take_float16_operands():
    """FLOAT16 without BiasTensor: Q K^T on float16 operands and the second product on float32
    ones (one per platform: ``attention_parts.weights_product``), float16 with the half-precision flag; with
    BiasTensor the biased Q, K and V are float32, as are both products."""
    plain = _m(type_name="FLOAT16")()
    biased = _m(type_name="FLOAT16", bias_tensor=(12,))()
    half16, wide = ("float16", "float16"), ("float32", "float32")
    for desc, half, want in (
        (plain, False, [half16, wide, wide]),
        (plain, True, [half16] * 2),
        (biased, False, [wide] * 2),
    ):
        args = [np.ones(t.sizes, t.dtype) for _, t in desc.input_slots()]
        op = dml.compile_operator(desc, allow_half_precision=half)
        assert _product_operand_types(op.fn, *args) == want, (desc, half)


def test_key_query_offsets_of_the_padded_layout_equal_key_sequence_lengths():
    """KEY_QUERY_SEQUENCE_LENGTH_START_END with queryStart b * S and keyStart b * T (what ONNX
    Runtime passes for padded batches) is KEY_SEQUENCE_LENGTH."""
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((2, 3, 4)).astype(np.float32) for _ in range(3))
    lengths = np.array([2, 3], np.int32)
    common = {
        "output_tensor": _t((2, 3, 4)),
        "scale": 0.5,
        "mask_filter_value": -10000.0,
        "head_count": 2,
    }
    packed = MHA(_t((2, 3, 4)), _t((2, 3, 4)), _t((2, 3, 4)), mask_tensor=_t((8,), "INT32"),
                 mask_type="KEY_QUERY_SEQUENCE_LENGTH_START_END", **common)  # fmt: skip
    plain = MHA(_t((2, 3, 4)), _t((2, 3, 4)), _t((2, 3, 4)), mask_tensor=_t((1, 2), "INT32"),
                mask_type="KEY_SEQUENCE_LENGTH", **common)  # fmt: skip
    offsets = np.concatenate([lengths, [0, 3, 6], [0, 3, 6]]).astype(np.int32)
    a = S.run(S.Case(packed, (q, k, v, offsets)))
    b = S.run(S.Case(plain, (q, k, v, lengths.reshape(1, 2))))
    S.assert_same(a, b)


def test_grouped_heads_equal_repeated_key_value_heads():
    """MULTIHEAD_ATTENTION1 with Hq = 4, Hkv = 2 equals MULTIHEAD_ATTENTION with each key/value
    head repeated for its two query heads (n // 2)."""
    rng = np.random.default_rng(5)
    q = rng.standard_normal((2, 3, 8)).astype(np.float32)
    k = rng.standard_normal((2, 4, 4)).astype(np.float32)
    v = rng.standard_normal((2, 4, 6)).astype(np.float32)
    gqa = MHA1(_t(q.shape), _t(k.shape), _t(v.shape), output_tensor=_t((2, 3, 12)), scale=0.7,
               mask_filter_value=-10000.0, query_head_count=4, key_value_head_count=2)  # fmt: skip

    def repeat(x, size):
        return np.repeat(x.reshape(2, 4, 2, size), 2, axis=2).reshape(2, 4, 4 * size)

    k4, v4 = repeat(k, 2), repeat(v, 3)
    mha = MHA(_t(q.shape), _t(k4.shape), _t(v4.shape), output_tensor=_t((2, 3, 12)), scale=0.7,
              mask_filter_value=-10000.0, head_count=4)  # fmt: skip
    S.assert_same(S.run(S.Case(gqa, (q, k, v))), S.run(S.Case(mha, (q, k4, v4))), exact=False,
                  rtol=1e-6, atol=1e-6)  # fmt: skip


_CLOSE = {"rtol": 1e-5, "atol": 1e-6}  # float32 against the float64 reference


def _causal_case(type_name, seq=10, rpb=False, flip=False, seed=3):
    """MULTIHEAD_ATTENTION1 (4 query heads on 2 key/value heads) with a BOOLEAN causal mask of
    S == T (MaskFilterValue -inf), broadcast over batch and heads by stride 0 as a graph's
    constant reads it; ``flip`` keeps one key past the diagonal (no longer causal)."""
    b, hq, hkv, d = 2, 4, 2, 5
    rng = np.random.default_rng(seed)
    dtype = np.float16 if type_name == "FLOAT16" else np.float32
    q = rng.standard_normal((b, seq, hq * d)).astype(dtype)
    k = rng.standard_normal((b, seq, hkv * d)).astype(dtype)
    v = rng.standard_normal((b, seq, hkv * d)).astype(dtype)
    mask = np.broadcast_to(np.tril(np.ones((seq, seq), np.int32)), (b, hq, seq, seq))
    if flip:
        mask = mask.copy()
        mask[1, 2, 3, seq - 1] = 1
    inputs = [q, k, v, mask]
    extra = {}
    if rpb:
        inputs.append(rng.standard_normal((b, hq, seq, seq)).astype(dtype))
        extra["relative_position_bias_tensor"] = _t((b, hq, seq, seq), type_name)
    desc = MHA1(_t(q.shape, type_name), _t(k.shape, type_name), _t(v.shape, type_name),
                mask_tensor=_t(mask.shape, "INT32"), output_tensor=_t(q.shape, type_name),
                scale=0.6, mask_filter_value=-math.inf, query_head_count=hq,
                key_value_head_count=hkv, mask_type="BOOLEAN", **extra)  # fmt: skip
    return desc, inputs


def _lower_with_known_mask(desc, inputs, known=True):
    """The lax lowering, jitted, with the mask a constant of the program (as a graph's
    ConstantDataNode gives it: ``fastpath.known_input``) or known only at run time; the
    logits' shapes of the traced program too."""
    from dml_jax.fastpath import known_inputs
    from dml_jax.ops.attention import lower_attention

    index = [p for p, _ in desc.input_slots()].index("MaskTensor")
    with known_inputs({index: inputs[index]} if known else {}):
        jaxpr = jax.make_jaxpr(lambda *a: lower_attention(desc, *a))(*inputs)
        got = jax.jit(lambda *a: lower_attention(desc, *a))(*inputs)
    shapes = [
        tuple(v.aval.shape)
        for e in _equations(jaxpr.jaxpr)
        if e.primitive.name == "dot_general"
        for v in e.outvars
    ]
    return got, shapes


@pytest.mark.parametrize("type_name, rpb", [("FLOAT32", False), ("FLOAT32", True),
                                            ("FLOAT16", False), ("FLOAT16", True)])  # fmt: skip
def test_a_known_causal_mask_computes_only_what_it_keeps(monkeypatch, type_name, rpb):
    """A causal BOOLEAN mask (-inf) that the program holds as a constant: the sequence (10,
    padded to 12) in ``CAUSAL_BLOCKS`` blocks (3 of 4 here) and only the 6 tiles of query block
    i and key block j <= i computed, each {G * 4 rows, 4 keys} (G = 2 query heads a key/value
    head); the same results as the reference, which computes every logit and masks it."""
    from dml_jax.ops import attention as A

    monkeypatch.setattr(A, "CAUSAL_MIN_ROWS", 2)
    monkeypatch.setattr(A, "CAUSAL_BLOCKS", 3)
    desc, inputs = _causal_case(type_name, rpb=rpb)
    got, shapes = _lower_with_known_mask(desc, inputs)
    assert shapes[0] == (2, 2, 6, 8, 4), shapes  # the logits
    # the weighted values (and the row sums): for FLOAT16 one product per platform
    # (``attention_parts.weights_product``)
    assert len(set(shapes)) == 2 and all(s[:4] == (2, 2, 6, 8) for s in shapes[1:]), shapes
    tolerance = {"rtol": 1e-2, "atol": 1e-2} if type_name == "FLOAT16" else _CLOSE
    S.assert_same(got, reference.reference(desc, *inputs), exact=False, **tolerance)
    full, full_shapes = _lower_with_known_mask(desc, inputs, known=False)
    assert (10, 10) in {s[-2:] for s in full_shapes}
    np.testing.assert_allclose(np.asarray(got[0], np.float32), np.asarray(full[0], np.float32),
                               rtol=1e-3 if type_name == "FLOAT16" else 1e-6,
                               atol=1e-3 if type_name == "FLOAT16" else 1e-6)  # fmt: skip


def test_causal_blocks_round_up_to_the_alignment(monkeypatch):
    """Blocks longer than ``CAUSAL_ALIGN`` rows are rounded up to a multiple of it: 10 tokens
    in 4 blocks would be 3 rows each; with the alignment at 2 they are 3 blocks of 4 (the
    sequence padded to 12), 6 tiles; the results are still the reference's."""
    from dml_jax.ops import attention as A

    monkeypatch.setattr(A, "CAUSAL_MIN_ROWS", 2)
    monkeypatch.setattr(A, "CAUSAL_ALIGN", 2)
    desc, inputs = _causal_case("FLOAT32")
    got, shapes = _lower_with_known_mask(desc, inputs)
    assert shapes[0] == (2, 2, 6, 8, 4), shapes
    S.assert_same(got, reference.reference(desc, *inputs), exact=False, **_CLOSE)


def test_a_known_causal_mask_gives_the_gradients_of_the_masked_computation(monkeypatch):
    """The tiles' gradients with respect to Q, K, V and the relative position bias equal those
    of every logit computed and masked (the mask known only at run time)."""
    from dml_jax.fastpath import known_inputs
    from dml_jax.ops import attention as A

    monkeypatch.setattr(A, "CAUSAL_MIN_ROWS", 2)
    desc, inputs = _causal_case("FLOAT32", rpb=True)
    index = [p for p, _ in desc.input_slots()].index("MaskTensor")
    floats = tuple(i for i, a in enumerate(inputs) if a.dtype.kind == "f")
    weights = np.random.default_rng(1).standard_normal(desc.output_tensor.sizes, np.float32)

    def loss(*a):
        return jnp.sum(A.lower_attention(desc, *a)[0] * weights)

    with known_inputs({index: inputs[index]}):
        tiles = jax.jit(jax.grad(loss, argnums=floats))(*inputs)
    masked = jax.jit(jax.grad(loss, argnums=floats))(*inputs)
    for a, b in zip(tiles, masked):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)
        assert np.abs(np.asarray(b)).max() > 0


def test_a_known_mask_that_is_not_causal_computes_every_logit(monkeypatch):
    from dml_jax.ops import attention as A

    monkeypatch.setattr(A, "CAUSAL_MIN_ROWS", 2)
    desc, inputs = _causal_case("FLOAT32", flip=True)
    got, shapes = _lower_with_known_mask(desc, inputs)
    assert (10, 10) in {s[-2:] for s in shapes}
    S.assert_same(got, reference.reference(desc, *inputs), exact=False, **_CLOSE)


def test_a_known_causal_mask_leaves_the_masked_logits_out(monkeypatch):
    """docs/semantics.md's choice: with a causal mask known when the program is compiled, the
    masked positions are not computed, so a NaN key reaches only the rows that keep it (the
    rows before it are the attention over the keys they keep); with the mask known only at
    run time, +-inf or NaN logits at masked positions make their rows NaN (inf + -inf)."""
    from dml_jax.ops import attention as A

    monkeypatch.setattr(A, "CAUSAL_MIN_ROWS", 2)
    desc, inputs = _causal_case("FLOAT32")
    poisoned = [a.copy() for a in inputs]
    poisoned[1][:, 7] = np.nan  # key 7 of every head
    got, _ = _lower_with_known_mask(desc, poisoned)
    out = np.asarray(got[0])
    assert np.isnan(out[:, 7:]).all()
    clean = [a.copy() for a in inputs]
    clean[1][:, 7] = 0.0  # rows 0..6 do not keep key 7: any value gives them the same result
    want = reference.reference(desc, *clean)[0][:, :7]
    S.assert_same((out[:, :7],), (want,), exact=False, **_CLOSE)
    late, _ = _lower_with_known_mask(desc, poisoned, known=False)
    assert np.isnan(np.asarray(late[0])).all()


def test_agrees_with_jax_dot_product_attention():
    """A third opinion where both apply: jax.nn.dot_product_attention (its float32 'xla' path)
    with grouped heads, a boolean mask and a bias."""
    rng = np.random.default_rng(7)
    b, s, t, hq, hkv, d = 2, 3, 4, 4, 2, 5
    q = rng.standard_normal((b, s, hq, d)).astype(np.float32)
    k = rng.standard_normal((b, t, hkv, d)).astype(np.float32)
    v = rng.standard_normal((b, t, hkv, d)).astype(np.float32)
    bias = rng.standard_normal((b, hq, s, t)).astype(np.float32)
    keep = rng.random((b, hq, s, t)) < 0.7
    keep[..., 0] = True
    desc = MHA1(_t((b, s, hq * d)), _t((b, t, hkv * d)), _t((b, t, hkv * d)),
                mask_tensor=_t((b, hq, s, t), "INT32"),
                relative_position_bias_tensor=_t(bias.shape),
                output_tensor=_t((b, s, hq * d)), scale=0.3, mask_filter_value=-math.inf,
                query_head_count=hq, key_value_head_count=hkv, mask_type="BOOLEAN")  # fmt: skip
    (ours,) = S.run(S.Case(desc, (q.reshape(b, s, -1), k.reshape(b, t, -1), v.reshape(b, t, -1),
                                  keep.astype(np.int32), bias)))  # fmt: skip
    with jax.default_matmul_precision("highest"):
        theirs = jax.nn.dot_product_attention(q, k, v, bias=bias, mask=keep, scale=0.3,
                                              implementation="xla")  # fmt: skip
    np.testing.assert_allclose(ours, np.asarray(theirs).reshape(b, s, -1), rtol=1e-5, atol=1e-5)


def test_mask_type_enum_matches_directml():
    spec = pathlib.Path(__file__).parents[2] / "shared/spec/dml_operators.json"
    if not spec.exists():
        pytest.skip("the schema file of the reference notes is not beside this checkout")
    values = json.loads(spec.read_text())["enum_values"]["DML_MULTIHEAD_ATTENTION_MASK_TYPE"]
    assert {m.dml_name: m.value for m in dml.MultiheadAttentionMaskType} == values


def test_semantics_page_cites_tests_of_this_module():
    """docs/semantics.md's attention section names its tests; each exists here."""
    page = (pathlib.Path(__file__).parents[1] / "docs/semantics.md").read_text()
    section = page.split("## Multi-head attention", 1)[1].split("\n## ", 1)[0]
    cited = set(re.findall(r"`(test_[a-z0-9_]+)`", section))
    assert cited and cited <= {name for name in globals() if name.startswith("test_")}


def test_json_round_trip_with_every_member():
    desc = MHA1(
        _t((1, 2, 4)), _t((1, 3, 2)), _t((1, 3, 2)), bias_tensor=_t((8,)),
        mask_tensor=_t((1, 2, 2, 5), "INT32"), relative_position_bias_tensor=_t((1, 2, 2, 5)),
        past_key_tensor=_t((1, 1, 2, 2)), past_value_tensor=_t((1, 1, 2, 2)),
        output_tensor=_t((1, 2, 4)), output_present_key_tensor=_t((1, 1, 5, 2)),
        output_present_value_tensor=_t((1, 1, 5, 2)), scale=0.25, mask_filter_value=-math.inf,
        query_head_count=2, key_value_head_count=1, mask_type="BOOLEAN",
    )  # fmt: skip
    dml.validate(desc)
    text = json.dumps(dml.operator_desc_to_json(desc))
    assert dml.operator_desc_from_json(json.loads(text)) == desc


# --- rules ------------------------------------------------------------------------------------


def _m(q=(1, 2, 4), k=(1, 3, 4), v=(1, 3, 4), out=(1, 2, 4), type_name="FLOAT32", heads=2,
       **kw):  # fmt: skip
    """MULTIHEAD_ATTENTION with Q, K, V (two heads of size 2) unless changed; tensors given as
    sizes (a (sizes, type) pair for another type) or None."""

    def tensor(x):
        if x is None or isinstance(x, T):
            return x
        if isinstance(x[-1], str):
            return _t(x[0], x[1])
        return _t(x, type_name)

    fields = {k_: tensor(v_) if k_.endswith("_tensor") else v_ for k_, v_ in kw.items()}
    fields.setdefault("scale", 0.5)
    fields.setdefault("mask_filter_value", -10000.0)
    return lambda: MHA(tensor(q), tensor(k), tensor(v), output_tensor=tensor(out),
                       head_count=heads, **fields)  # fmt: skip


def _m1(q=(1, 2, 4), k=(1, 3, 2), v=(1, 3, 2), out=(1, 2, 4), hq=2, hkv=1, **kw):
    """MULTIHEAD_ATTENTION1 with two query heads on one key/value head (head size 2)."""

    def tensor(x):
        if x is None or isinstance(x, T):
            return x
        if isinstance(x[-1], str):
            return _t(x[0], x[1])
        return _t(x)

    fields = {k_: tensor(v_) if k_.endswith("_tensor") else v_ for k_, v_ in kw.items()}
    fields.setdefault("scale", 0.5)
    fields.setdefault("mask_filter_value", -10000.0)
    return lambda: MHA1(tensor(q), tensor(k), tensor(v), output_tensor=tensor(out),
                        query_head_count=hq, key_value_head_count=hkv, **fields)  # fmt: skip


A, A1 = "^DML_OPERATOR_MULTIHEAD_ATTENTION: ", "^DML_OPERATOR_MULTIHEAD_ATTENTION1: "
INVALID_ROWS = [
    # head counts
    (_m(heads=0), A + r"HeadCount must be >= 1, got 0"),
    (_m1(hkv=0), A1 + r"KeyValueHeadCount must be >= 1, got 0"),
    (_m1(q=(1, 2, 6), out=(1, 2, 6), hq=3, hkv=2, k=(1, 3, 4), v=(1, 3, 4)),
     A1 + r"QueryHeadCount must be a multiple of KeyValueHeadCount \(2\), got 3"),
    # which tensors hold the query, the key and the value
    (_m(stacked_query_key_value_tensor=(1, 2, 2, 3, 2)),
     A + r"StackedQueryKeyValueTensor must be null when QueryTensor is given: exactly one "
         r"tensor holds the query"),
    (_m(q=None, v=None, stacked_query_key_tensor=(1, 2, 2, 2, 2)),
     A + r"StackedQueryKeyTensor must be null when KeyTensor is given: exactly one tensor "
         r"holds the key"),
    (_m(k=None, stacked_key_value_tensor=(1, 3, 2, 2, 2)),
     A + r"StackedKeyValueTensor must be null when ValueTensor is given: exactly one tensor "
         r"holds the value"),
    (_m(q=None), A + r"QueryTensor is required: one of QueryTensor, StackedQueryKeyTensor and "
                     r"StackedQueryKeyValueTensor must hold the query"),
    (_m(past_key_tensor=(1, 2, 1, 2)),
     A + r"PastValueTensor must be given together with PastKeyTensor"),
    (_m(past_value_tensor=(1, 2, 1, 2)),
     A + r"PastKeyTensor must be given together with PastValueTensor"),
    (_m(k=None, v=None), A + r"KeyTensor is required unless PastKeyTensor and PastValueTensor"),
    (_m(k=None), A + r"KeyTensor is required: ValueTensor holds the value"),
    (_m(v=None), A + r"ValueTensor is required: KeyTensor holds the key"),
    (_m1(q=None, k=None, stacked_query_key_tensor=(1, 2, 2, 2, 2), v=(1, 2, 2)),
     A1 + r"StackedQueryKeyTensor needs QueryHeadCount == KeyValueHeadCount"),
    # shapes of the query, key and value
    (_m(q=(2, 4), out=(1, 2, 4)), A + r"QueryTensor\.DimensionCount must be at least 3"),
    (_m(q=(2, 1, 2, 4)), A + r"QueryTensor\.Sizes\[0\] must be 1: the dimensions before"),
    (_m(q=(1, 2, 5), out=(1, 2, 4)),
     A + r"QueryTensor\.Sizes\[2\] \(hidden size 5\) must be a multiple of HeadCount \(2\)"),
    (_m(q=None, k=None, v=None, stacked_query_key_value_tensor=(2, 2, 3, 2)),
     A + r"StackedQueryKeyValueTensor\.DimensionCount must be 5"),
    (_m(q=None, k=None, v=None, stacked_query_key_value_tensor=(1, 2, 2, 2, 2)),
     A + r"StackedQueryKeyValueTensor\.Sizes\[3\] must equal the number of stacked tensors "
         r"\(3\), got 2"),
    (_m(q=None, k=None, v=None, stacked_query_key_value_tensor=(1, 2, 1, 3, 4)),
     A + r"StackedQueryKeyValueTensor\.Sizes\[2\] must equal HeadCount \(2\), got 1"),
    (_m(k=(2, 3, 4)), A + r"KeyTensor\.Sizes\[0\] must equal the batch size of QueryTensor"),
    (_m(k=(1, 3, 6)), A + r"KeyTensor\.Sizes\[2\] must equal HeadCount \* the query's head "
                          r"size 2 \* 2 \(4\), got 6"),
    (_m(k=None, v=None, stacked_key_value_tensor=(1, 3, 1, 2, 2)),
     A + r"StackedKeyValueTensor\.Sizes\[2\] must equal HeadCount \(2\), got 1"),
    (_m(k=None, v=None, stacked_key_value_tensor=(1, 3, 2, 2, 3)),
     A + r"StackedKeyValueTensor\.Sizes\[4\] must equal the query's head size \(2\), got 3"),
    (_m(v=(1, 2, 4)),
     A + r"ValueTensor\.Sizes\[1\] must equal the key sequence length of KeyTensor \(3\)"),
    (_m(v=(1, 3, 5)), A + r"ValueTensor\.Sizes\[2\] \(value hidden size 5\) must be a multiple"),
    # past, present, past sequence lengths
    (_m(past_key_tensor=(1, 1, 1, 2), past_value_tensor=(1, 2, 1, 2)),
     A + r"PastKeyTensor\.Sizes\[1\] must equal the key's head count \(2\), got 1"),
    (_m(past_key_tensor=(1, 2, 1, 3), past_value_tensor=(1, 2, 1, 2)),
     A + r"PastKeyTensor\.Sizes\[3\] must equal the query's head size \(2\), got 3"),
    (_m(past_key_tensor=(1, 2, 1, 2), past_value_tensor=(1, 2, 2, 2)),
     A + r"PastValueTensor\.Sizes\[2\] must equal PastKeyTensor's sequence length \(1\)"),
    (_m(past_key_tensor=(1, 2, 1, 2), past_value_tensor=(1, 2, 1, 3)),
     A + r"PastValueTensor\.Sizes\[3\] must equal the value's head size \(2\), got 3"),
    (_m(past_key_tensor=(2, 1, 2, 1, 2), past_value_tensor=(1, 2, 1, 2)),
     A + r"PastKeyTensor\.Sizes\[0\] must be 1"),
    (_m(output_present_key_tensor=(1, 2, 4, 2)),
     A + r"OutputPresentKeyTensor\.Sizes\[2\] must equal 3, got 4"),
    (_m(past_key_tensor=(1, 2, 1, 2), past_value_tensor=(1, 2, 1, 2),
        output_present_value_tensor=(1, 2, 3, 2)),
     A + r"OutputPresentValueTensor\.Sizes\[2\] must equal 4, got 3"),
    (_m1(past_sequence_lengths_tensor=((1,), "INT32")),
     A1 + r"PastSequenceLengthsTensor needs PastKeyTensor and PastValueTensor"),
    (_m1(past_key_tensor=(1, 1, 4, 2), past_value_tensor=(1, 1, 4, 2),
         past_sequence_lengths_tensor=((2,), "INT32")),
     A1 + r"PastSequenceLengthsTensor\.Sizes\[0\] must equal the batch size of QueryTensor"),
    (_m1(past_key_tensor=(1, 1, 4, 2), past_value_tensor=(1, 1, 4, 2),
         past_sequence_lengths_tensor=((1,), "INT32"), output_present_key_tensor=(1, 1, 7, 2)),
     A1 + r"OutputPresentKeyTensor\.Sizes\[2\] must equal 4, got 7"),
    # bias, relative position bias, mask
    (_m(bias_tensor=(11,)), A + r"BiasTensor\.Sizes\[0\] must equal the query, key and value "
                                r"hidden sizes 4 \+ 4 \+ 4 \(12\), got 11"),
    (_m(bias_tensor=(2, 6)), A + r"BiasTensor\.Sizes\[0\] must be 1"),
    (_m(relative_position_bias_tensor=(1, 2, 2, 4)),
     A + r"RelativePositionBiasTensor\.Sizes must equal \{batchSize, headCount, sequenceLength, "
         r"totalSequenceLength\} \(\{1, 2, 2, 3\}\), got \{1, 2, 2, 4\}"),
    (_m1(relative_position_bias_tensor=(1, 1, 2, 3)),
     A1 + r"RelativePositionBiasTensor\.Sizes must equal .*\(\{1, 2, 2, 3\}\)"),
    (_m(mask_tensor=((1, 1), "INT32")), A + r"MaskTensor must be null when MaskType is NONE"),
    (_m(mask_type="BOOLEAN"), A + r"MaskTensor is required with MaskType BOOLEAN"),
    (_m(mask_tensor=((1,), "INT32"), mask_type="KEY_SEQUENCE_LENGTH"),
     A + r"MaskTensor\.DimensionCount must be at least 2 \(\{1, batchSize\}\), got 1"),
    (_m(mask_tensor=((2, 1), "INT32"), mask_type="KEY_SEQUENCE_LENGTH"),
     A + r"MaskTensor\.Sizes must equal \{1, batchSize\} for KEY_SEQUENCE_LENGTH \(\{1, 1\}\)"),
    (_m(mask_tensor=((1, 1), "INT32"), mask_type="KEY_SEQUENCE_END_START"),
     A + r"MaskTensor\.Sizes must equal \{2, batchSize\} for KEY_SEQUENCE_END_START"),
    (_m(mask_tensor=((6,), "INT32"), mask_type="KEY_QUERY_SEQUENCE_LENGTH_START_END"),
     A + r"MaskTensor\.Sizes must equal \{batchSize \* 3 \+ 2\} for "
         r"KEY_QUERY_SEQUENCE_LENGTH_START_END \(\{5\}\), got \{6\}"),
    (_m(mask_tensor=((1, 1, 2, 3), "INT32"), mask_type="BOOLEAN"),
     A + r"MaskTensor\.Sizes must equal \{batchSize, headCount, sequenceLength, "
         r"totalSequenceLength\} for BOOLEAN \(\{1, 2, 2, 3\}\), got \{1, 1, 2, 3\}"),
    # data types, output, support
    (_m(k=((1, 3, 4), "FLOAT16")), A + r"KeyTensor\.DataType must equal QueryTensor\.DataType"),
    (_m(out=((1, 2, 4), "FLOAT16")),
     A + r"OutputTensor\.DataType must equal QueryTensor\.DataType"),
    (_m(out=(1, 2, 6)), A + r"OutputTensor\.Sizes\[2\] must equal 4, got 6"),
    (_m(v=(1, 3, 6), out=(1, 2, 4)), A + r"OutputTensor\.Sizes\[2\] must equal 6, got 4"),
    (_m(type_name="INT32"), A + r"QueryTensor with data type INT32 and DimensionCount 3 is not "
                                r"supported"),
    (_m(mask_tensor=((1, 1), "FLOAT32"), mask_type="KEY_SEQUENCE_LENGTH"),
     A + r"MaskTensor with data type FLOAT32 and DimensionCount 2 is not supported"),
    (_m(q=(1, 1, 1, 1, 2, 4), k=(1, 1, 1, 1, 3, 4), v=(1, 1, 1, 1, 3, 4), out=(1, 1, 1, 1, 2, 4)),
     A + r"QueryTensor with data type FLOAT32 and DimensionCount 6 is not supported"),
    (_m1(past_key_tensor=(1, 1, 4, 2), past_value_tensor=(1, 1, 4, 2),
         past_sequence_lengths_tensor=((1,), "UINT32")),
     A1 + r"PastSequenceLengthsTensor with data type UINT32 .* is not supported"),
    (_m(mask_type="KEY_LENGTH"), A + r"MaskType must be a MultiheadAttentionMaskType"),
    (_m(scale="1"), A + r"Scale must be a number"),
]  # fmt: skip


@pytest.mark.parametrize("factory, pattern", INVALID_ROWS)
def test_attention_rules(factory, pattern):
    with pytest.raises(dml.ValidationError, match=pattern):
        dml.validate(factory())


def test_valid_rule_baselines():
    """The rule rows' starting points validate, so each row breaks exactly its rule."""
    dml.validate(_m()())
    dml.validate(_m1()())


def test_feature_levels():
    """MULTIHEAD_ATTENTION from 6_1, MULTIHEAD_ATTENTION1 from 6_3."""
    dml.validate(_m()(), "6_1")
    with pytest.raises(dml.ValidationError, match=r"requires feature level 6_1 or later"):
        dml.validate(_m()(), "6_0")
    dml.validate(_m1()(), "6_3")
    with pytest.raises(dml.ValidationError, match=r"requires feature level 6_3 or later"):
        dml.validate(_m1()(), "6_2")


def test_cross_attention_from_the_past_alone():
    """No KeyTensor or ValueTensor: the past holds every key and value (ONNX Runtime's DirectML
    provider builds cross-attention this way); the present outputs are the past."""
    rng = np.random.default_rng(11)
    desc = _m(k=None, v=None, past_key_tensor=(1, 2, 3, 2), past_value_tensor=(1, 2, 3, 5),
              out=(1, 2, 10), output_present_value_tensor=(1, 2, 3, 5))()  # fmt: skip
    inputs = tuple(rng.standard_normal(t.sizes).astype(np.float32) for _, t in desc.input_slots())
    got = S.run(S.Case(desc, inputs))
    S.assert_same(got, reference.reference(desc, *inputs), exact=False, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got[1], inputs[2])


def test_dataclass_replace_keeps_validation():
    desc = _m()()
    with pytest.raises(dml.ValidationError, match=r"HeadCount must be >= 1"):
        dml.validate(dataclasses.replace(desc, head_count=0))
