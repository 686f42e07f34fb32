"""The decode-step attention kernel (``dml_jax/kernels/decode_attention.py``): one query position
of MULTIHEAD_ATTENTION(1) as one Pallas program per query head, against the lax lowering and
tests/reference/attention.py (in interpret mode on this CPU, natively on a CUDA GPU): layouts
with and without a past or new positions, grouped heads, every mask type, fully masked rows,
float16 with and without half precision, pasts that end inside a block of keys."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import reference

import dml_jax as dml
from dml_jax import fastpath
from dml_jax.kernels import decode_attention as K
from dml_jax.ops import attention as A
from dml_jax.precision import with_half_precision

T = dml.TensorDesc
M = dml.MultiheadAttentionMaskType
INTERPRET = not fastpath.cuda_present()

# (version, type, query heads, key / value heads, head size, value head size, past, new,
#  mask, MaskFilterValue, bias, presents[, relative position bias: "heads" one a head, "shared"
#  one a sequence read through strides of 0, as an exported decoder's additive mask arrives])
# fmt: off
CASES = {
    "mha-f32-past-new-none": ("", "FLOAT32", 2, 2, 8, 8, 5, 1, "NONE", -1e4, False, False),
    "mha1-f16-gqa-boolean": ("1", "FLOAT16", 8, 2, 16, 16, 70, 1, "BOOLEAN", -65504.0, False,
                             True),
    "mha1-f32-gqa-boolean-inf": ("1", "FLOAT32", 4, 2, 8, 4, 130, 1, "BOOLEAN", -math.inf,
                                 False, False),
    "mha-f16-bias-key-length": ("", "FLOAT16", 2, 2, 8, 8, 64, 2, "KEY_SEQUENCE_LENGTH", -1e4,
                                True, True),
    "mha1-f32-no-past": ("1", "FLOAT32", 2, 1, 16, 16, 0, 3, "KEY_SEQUENCE_END_START", -5.0,
                         False, False),
    "mha1-f16-past-only": ("1", "FLOAT16", 4, 4, 8, 8, 33, 0, "BOOLEAN", -3.0, False, True),
    "mha1-f16-exported-mask": ("1", "FLOAT16", 4, 2, 8, 8, 0, 257, "NONE", -math.inf, False,
                               False, "shared"),
    "mha-f32-bias-per-head": ("", "FLOAT32", 2, 2, 16, 16, 40, 1, "BOOLEAN", -2.0, False,
                              False, "heads"),
    # a step with its past apart (PastKeyTensor) and one new key, under an exported mask
    "mha1-f16-split-past-exported-mask": ("1", "FLOAT16", 4, 2, 8, 8, 200, 1, "NONE", -math.inf,
                                          False, False, "shared"),
    # 603 keys: three splits, the last over the past's end and the new keys
    "mha1-f32-long-boolean-inf": ("1", "FLOAT32", 4, 2, 8, 8, 600, 3, "BOOLEAN", -math.inf,
                                  False, False),
}
# fmt: on


def _case(name: str, seed: int = 0):
    version, t, hq, hkv, dh, dv, past, new, mask, fill, bias, presents, *rpb = CASES[name]
    b, total = 2, past + new
    f = {"query_tensor": T(t, [b, 1, hq * dh])}
    if new:
        f["key_tensor"] = T(t, [b, new, hkv * dh])
        f["value_tensor"] = T(t, [b, new, hkv * dv])
    if past:
        f["past_key_tensor"] = T(t, [b, hkv, past, dh])
        f["past_value_tensor"] = T(t, [b, hkv, past, dv])
    if bias:
        f["bias_tensor"] = T(t, [hq * dh + hkv * dh + hkv * dv])
    if rpb == ["shared"]:  # {B, Hq, 1, T} read from one row of T a sequence
        f["relative_position_bias_tensor"] = T(t, [b, hq, 1, total], strides=[total, 0, 0, 1])
    elif rpb:
        f["relative_position_bias_tensor"] = T(t, [b, hq, 1, total])
    mask_type = M[mask]
    core = {"KEY_SEQUENCE_LENGTH": [1, b], "KEY_SEQUENCE_END_START": [2, b],
            "BOOLEAN": [b, hq, 1, total]}.get(mask)  # fmt: skip
    if core:
        f["mask_tensor"] = T("INT32", core)
    f["output_tensor"] = T(t, [b, 1, hq * dv])
    if presents:
        f["output_present_key_tensor"] = T(t, [b, hkv, total, dh])
        f["output_present_value_tensor"] = T(t, [b, hkv, total, dv])
    heads = {"query_head_count": hq, "key_value_head_count": hkv} if version else {}
    cls = dml.MultiheadAttention1OperatorDesc if version else dml.MultiheadAttentionOperatorDesc
    desc = cls(**f, scale=1 / math.sqrt(dh), mask_filter_value=fill, mask_type=mask_type,
               **(heads or {"head_count": hq}))  # fmt: skip
    rng = np.random.default_rng(seed)
    inputs = []
    dtype = np.float16 if t == "FLOAT16" else np.float32
    for path, td in desc.input_slots():
        if path == "MaskTensor" and mask == "BOOLEAN":
            m = rng.choice(np.array([0, 1, 1, 2], np.int32), size=td.sizes)
            m[0, 0] = 0  # a row with every key masked
            inputs.append(m)
        elif path == "MaskTensor" and mask == "KEY_SEQUENCE_LENGTH":
            inputs.append(np.array([[total - 3, 0]], np.int32))  # the second: no key kept
        elif path == "MaskTensor":
            inputs.append(np.array([[2, total], [0, 1]], np.int32))
        elif path == "RelativePositionBiasTensor":  # an additive mask: 0 or float16's lowest
            # (one row a sequence where the strides say so: the values a graph reads there)
            shared = td.strides is not None and td.strides[1] == 0
            keep = rng.random((b, 1, 1, total) if shared else td.sizes) < 0.8
            bias_values = np.where(keep, 0, -65504).astype(dtype)
            inputs.append(np.ascontiguousarray(np.broadcast_to(bias_values, td.sizes)))
        else:
            inputs.append((rng.standard_normal(td.sizes) * 2).astype(dtype))
    return desc, inputs


def _close(got, want, t: str, desc="", tol=None):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, desc
    assert np.array_equal(np.isnan(got), np.isnan(want)), desc
    tol = tol or (4e-3 if t == "FLOAT16" else 2e-5)
    ok = np.isnan(want) | np.isclose(got, want, rtol=tol, atol=tol)
    assert ok.all(), f"{desc}: max diff {np.nanmax(np.abs(got - want)):.3g}"


def _kernel(desc, half: bool):
    def fn(*arrays):
        return K.lower(desc, *arrays, interpret=INTERPRET)

    return jax.jit(with_half_precision(fn, half))


def _lax(desc, half: bool):
    return jax.jit(with_half_precision(lambda *a: A.lower_attention(desc, *a), half))


@pytest.mark.parametrize("half", [False, True])
@pytest.mark.parametrize("name", sorted(CASES))
def test_kernel_matches_the_lax_lowering_and_the_reference(name, half):
    desc, inputs = _case(name)
    assert K.expressible(desc)
    got = _kernel(desc, half)(*map(jnp.asarray, inputs))
    want = _lax(desc, half)(*map(jnp.asarray, inputs))
    t = desc.output_tensor.data_type.name
    assert len(got) == len(want)
    # Half precision lets the lax lowering's FLOAT32 products run at XLA's default precision
    # (TF32 tensor cores on a GPU: about 3 decimal digits); the kernel's stay float32.
    tol = 1e-2 if half and t == "FLOAT32" else None
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape
        _close(g, w, t, f"output {k} against the lax lowering", tol)
    if not half:  # the reference computes in float64, without half precision's roundings
        ref = reference.reference(desc, *inputs)
        for k, (g, r) in enumerate(zip(got, ref)):
            _close(g, np.asarray(r).reshape(g.shape), t, f"output {k} against the reference")


@pytest.mark.parametrize("name", sorted(CASES))
def test_keys_split_among_programs(name, monkeypatch):
    """Rows of keys split among programs (flash decoding) in 64-position splits, their running
    values combined after the call: the same values, within float32 rounding."""
    monkeypatch.setattr(K, "SPLIT_KEYS", 16)
    desc, inputs = _case(name)
    got = _kernel(desc, False)(*map(jnp.asarray, inputs))
    want = _lax(desc, False)(*map(jnp.asarray, inputs))
    for k, (g, w) in enumerate(zip(got, want)):
        _close(g, w, desc.output_tensor.data_type.name, f"output {k}, split keys")


@pytest.mark.parametrize("fold", [True, False])
def test_splits_combine_in_any_order(fold, monkeypatch):
    """The splits' running values merged as one softmax (``_combined``, folded or reduced), against
    the softmax over the splits' keys written out: splits without a position (maximum -inf,
    sums 0) first, last or between, which a GPU's reduction may merge with each other before
    the others; a row with no position at all is NaN (``lower`` makes it 0 where lengths say
    so)."""
    monkeypatch.setattr(K, "FOLD_SPLITS", fold)
    rng = np.random.default_rng(5)
    logits = rng.standard_normal((3, 4, 6)).astype(np.float32)  # rows, splits, keys a split
    values = rng.standard_normal((3, 4, 6, 2)).astype(np.float32)
    empty = np.array([[True, True, False, False], [False, True, True, False], [True] * 4])
    tops = np.where(empty, -np.inf, logits.max(axis=2)).astype(np.float32)
    e = np.where(empty[:, :, None], 0, np.exp(logits - np.where(empty, 0, tops)[:, :, None]))
    totals = e.sum(axis=2).astype(np.float32)
    accs = np.einsum("rsk,rskd->rsd", e, values).astype(np.float32)
    got = np.asarray(jax.jit(K._combined)(tops, totals, accs))
    for r in range(2):
        kept = ~empty[r]
        w = np.exp(logits[r][kept] - logits[r][kept].max())
        want = np.einsum("sk,skd->d", w, values[r][kept]) / w.sum()
        np.testing.assert_allclose(got[r], want, rtol=1e-5, atol=1e-6)
    assert np.isnan(got[2]).all()
    # every order of the splits, two empty ones merged with each other first among them
    for order in ([2, 3, 0, 1], [0, 2, 1, 3], [3, 0, 1, 2]):
        pairs = K._merge(*[(tops[:1, i], totals[:1, i], accs[:1, i].T) for i in order[:2]])
        pairs = K._merge(pairs, K._merge(*[(tops[:1, i], totals[:1, i], accs[:1, i].T)
                                           for i in order[2:]]))  # fmt: skip
        top, total, acc = (np.asarray(a) for a in pairs)
        assert top[0] == tops[0].max()
        np.testing.assert_allclose((acc / total).T[0], got[0], rtol=1e-5, atol=1e-6)


def test_a_row_without_keys_is_nan_as_the_lax_lowering_says():
    desc, inputs = _case("mha1-f32-gqa-boolean-inf")
    (got,) = _kernel(desc, False)(*map(jnp.asarray, inputs))
    (want,) = _lax(desc, False)(*map(jnp.asarray, inputs))
    rows = np.isnan(np.asarray(want)).reshape(2, -1).any(axis=1)
    assert rows[0]  # the case masks every key of the first sequence's first head
    _close(got, want, "FLOAT32")


# (type, query heads, key / value heads, head size, capacity C, new positions Skv, the
#  sequences' past lengths: inside the cache, at its last position, beyond it (the new keys
#  dropped), none, negative (no position at all: 0), at a block's end)
LENGTH_CASES = {
    "f16-gqa-one-new": ("FLOAT16", 8, 2, 16, 100, 1, [37, 99, 130, 0, -1, 64]),
    "f32-two-new": ("FLOAT32", 4, 4, 8, 70, 2, [68, 69, 3, -1, -2, 64]),
}


def _length_case(name: str):
    t, hq, hkv, dh, cap, new, lengths = LENGTH_CASES[name]
    b = len(lengths)
    desc = dml.MultiheadAttention1OperatorDesc(
        T(t, [b, 1, hq * dh]), T(t, [b, new, hkv * dh]), T(t, [b, new, hkv * dh]),
        past_key_tensor=T(t, [b, hkv, cap, dh]), past_value_tensor=T(t, [b, hkv, cap, dh]),
        past_sequence_lengths_tensor=T("INT32", [b]), output_tensor=T(t, [b, 1, hq * dh]),
        output_present_key_tensor=T(t, [b, hkv, cap, dh]),
        output_present_value_tensor=T(t, [b, hkv, cap, dh]),
        scale=1 / math.sqrt(dh), mask_filter_value=-1e4, query_head_count=hq,
        key_value_head_count=hkv,
    )  # fmt: skip
    rng = np.random.default_rng(len(name))
    dtype = np.float16 if t == "FLOAT16" else np.float32
    inputs = [
        np.asarray(lengths, np.int32) if path == "PastSequenceLengthsTensor"
        else (rng.standard_normal(td.sizes) * 2).astype(dtype)
        for path, td in desc.input_slots()
    ]  # fmt: skip
    # the cache's rows from each sequence's length on hold what no query attends: NaN and
    # infinities, which must not reach the output (docs/semantics.md)
    rows = np.arange(cap).reshape(1, 1, cap, 1)
    after = rows >= np.maximum(np.asarray(lengths), 0).reshape(b, 1, 1, 1)
    junk = np.where(rows % 3 == 0, np.nan, np.where(rows % 3 == 1, np.inf, -np.inf))
    for slot in (3, 4):  # PastKeyTensor, PastValueTensor
        inputs[slot] = np.where(after, junk, inputs[slot]).astype(dtype)
    return desc, inputs


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("name", sorted(LENGTH_CASES))
def test_past_sequence_lengths(name, split, monkeypatch):
    """A cache with each sequence's past length (PastSequenceLengthsTensor): the past's first
    L_b positions and the new ones written from L_b, inside the capacity, against the lax
    lowering and the reference, keys whole and split among programs; a sequence with no
    position gives 0, one past the capacity attends the whole past without its new keys."""
    monkeypatch.setattr(K, "PAST_LENGTHS", True)
    if split:
        monkeypatch.setattr(K, "SPLIT_KEYS", 16)
    desc, inputs = _length_case(name)
    assert K.expressible(desc)
    got = _kernel(desc, False)(*map(jnp.asarray, inputs))
    want = _lax(desc, False)(*map(jnp.asarray, inputs))
    ref = reference.reference(desc, *inputs)
    t = desc.output_tensor.data_type.name
    for k, (g, w, r) in enumerate(zip(got, want, ref)):
        _close(g, w, t, f"output {k} against the lax lowering")
        _close(g, np.asarray(r).reshape(g.shape), t, f"output {k} against the reference")
    lengths = inputs[-1]
    out = np.asarray(got[0], np.float64).reshape(len(lengths), -1)
    assert not out[lengths + desc.key_tensor.sizes[1] <= 0].any()  # no position: 0
    assert np.all(np.abs(out[lengths + desc.key_tensor.sizes[1] > 0]).sum(axis=1) > 0)


def test_what_the_kernel_takes(monkeypatch):
    assert all(K.expressible(_case(n)[0]) for n in CASES)
    desc, _ = _case("mha-f32-past-new-none")
    # more than one query position, a relative position bias, a head size of 3: lax
    two = dml.MultiheadAttentionOperatorDesc(
        T("FLOAT32", [1, 2, 16]), T("FLOAT32", [1, 2, 16]), T("FLOAT32", [1, 2, 16]),
        output_tensor=T("FLOAT32", [1, 2, 16]), scale=1.0, mask_filter_value=0.0, head_count=2,
    )  # fmt: skip
    assert not K.expressible(two)
    odd = dml.MultiheadAttentionOperatorDesc(
        T("FLOAT32", [1, 1, 6]), T("FLOAT32", [1, 2, 6]), T("FLOAT32", [1, 2, 6]),
        output_tensor=T("FLOAT32", [1, 1, 6]), scale=1.0, mask_filter_value=0.0, head_count=2,
    )  # fmt: skip
    assert not K.expressible(odd)
    lengths = dml.MultiheadAttention1OperatorDesc(
        T("FLOAT32", [1, 1, 16]), past_key_tensor=T("FLOAT32", [1, 2, 4, 8]),
        past_value_tensor=T("FLOAT32", [1, 2, 4, 8]),
        past_sequence_lengths_tensor=T("INT32", [1]), output_tensor=T("FLOAT32", [1, 1, 16]),
        scale=1.0, mask_filter_value=0.0, query_head_count=2, key_value_head_count=2,
    )  # fmt: skip
    monkeypatch.setattr(K, "PAST_LENGTHS", False)
    assert not K.expressible(lengths)  # PAST_LENGTHS off: cuDNN's path or lax
    monkeypatch.setattr(K, "PAST_LENGTHS", True)
    assert K.expressible(lengths) and K.expressible(_length_case("f32-two-new")[0])
    masked = dml.MultiheadAttention1OperatorDesc(
        T("FLOAT32", [1, 1, 16]), past_key_tensor=T("FLOAT32", [1, 2, 4, 8]),
        past_value_tensor=T("FLOAT32", [1, 2, 4, 8]), mask_tensor=T("INT32", [1, 1]),
        past_sequence_lengths_tensor=T("INT32", [1]), output_tensor=T("FLOAT32", [1, 1, 16]),
        scale=1.0, mask_filter_value=0.0, query_head_count=2, key_value_head_count=2,
        mask_type=M.KEY_SEQUENCE_LENGTH,
    )  # fmt: skip
    assert not K.expressible(masked)  # lengths with a mask: lax (or cuDNN)
    monkeypatch.setattr(K, "PAST_LENGTHS", False)
    # on by default (timed in a decoder: the module says); ON turns it off
    assert K.expressible(desc) and K.applies(desc)
    monkeypatch.setattr(K, "ON", False)
    assert not K.applies(desc)
