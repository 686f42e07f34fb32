"""The cuDNN fast path of MULTIHEAD_ATTENTION(1) (dml_jax.kernels.attention) against the lax
lowering, within docs/semantics.md's tolerance.

Any machine: which descriptions the path takes (``expressible``), that ``applies`` declines
without a CUDA device instead of failing, and the path's own work (layouts, masks, rows without
keys, grouped heads, caches, vmap) with the cuDNN call replaced by jax's own definition of it,
``jax.nn.dot_product_attention``'s XLA implementation (on float32 operands: XLA's CPU dot has no
float16 form). On a CUDA machine the same cases run through cuDNN itself, and the programs must
contain its call.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dml_jax as dml
from dml_jax import fastpath
from dml_jax.errors import Validator
from dml_jax.kernels import attention as KA
from dml_jax.ops.attention import analyze

T = dml.TensorDesc
MHA = dml.MultiheadAttentionOperatorDesc
MHA1 = dml.MultiheadAttention1OperatorDesc
CUDA = fastpath.cuda_present()
gpu = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")

# docs/semantics.md, "Multi-head attention": FLOAT16 outputs within 2**-9 of the largest |value|
# plus 2**-9 of the lax lowering's output.
ATTENTION_TOLERANCE = 2.0**-9


def _attention(
    layout="separate",
    type_name="FLOAT16",
    b=2,
    s=3,
    kv=5,
    hq=2,
    hkv=2,
    d=8,
    dv=None,
    past=0,
    lengths=False,
    rpb=False,
    padding=False,
    bias=False,
    mask_type="NONE",
    mask_filter_value=-10000.0,
    present=False,
    scale=0.35,
):
    """A MULTIHEAD_ATTENTION (MHA1 with grouped heads or past lengths) description.
    ``padding``: the relative position bias and a BOOLEAN mask are one row of keys per batch
    entry, broadcast over heads and queries (stride 0), as a padding mask is."""
    dv = d if dv is None else dv
    v1 = hq != hkv or lengths
    total = past if lengths else past + kv

    def t(*sizes):
        return T(type_name, sizes)

    def per_key(type_name, sizes):  # {B, H, S, T}, as ``padding`` asks
        strides = (sizes[3], 0, 0, 1) if padding else None
        return T(type_name, sizes, strides=strides)

    f = {}
    if layout == "separate":
        f.update(query_tensor=t(b, s, hq * d), key_tensor=t(b, kv, hkv * d))
        f["value_tensor"] = t(b, kv, hkv * dv)
    elif layout == "stacked_qkv":
        f["stacked_query_key_value_tensor"] = t(b, s, hq, 3, d)
    elif layout == "stacked_kv":
        f.update(query_tensor=t(b, s, hq * d), stacked_key_value_tensor=t(b, kv, hkv, 2, d))
    elif layout == "past_only":
        f["query_tensor"] = t(b, s, hq * d)
    if bias:
        f["bias_tensor"] = t(hq * d + hkv * d + hkv * dv)
    if rpb:
        f["relative_position_bias_tensor"] = per_key(type_name, (b, hq, s, total))
    if past:
        f.update(past_key_tensor=t(b, hkv, past, d), past_value_tensor=t(b, hkv, past, dv))
    if lengths:
        f["past_sequence_lengths_tensor"] = T("INT32", (b,))
    mask = {
        "KEY_SEQUENCE_LENGTH": (1, b),
        "KEY_SEQUENCE_END_START": (2, b),
        "KEY_QUERY_SEQUENCE_LENGTH_START_END": (3 * b + 2,),
        "BOOLEAN": (b, hq, s, total),
    }.get(mask_type)
    if mask:
        f["mask_tensor"] = per_key("INT32", mask) if len(mask) == 4 else T("INT32", mask)
    f["output_tensor"] = t(b, s, hq * dv)
    if present:
        f.update(
            output_present_key_tensor=t(b, hkv, total, d),
            output_present_value_tensor=t(b, hkv, total, dv),
        )
    common = {"scale": scale, "mask_filter_value": mask_filter_value, "mask_type": mask_type}
    if v1:
        return MHA1(**f, query_head_count=hq, key_value_head_count=hkv, **common)
    return MHA(**f, head_count=hq, **common)


ACCEPTED = {
    "separate": {},
    "stacked QKV": {"layout": "stacked_qkv", "kv": 3},
    "stacked KV, grouped heads": {"layout": "stacked_kv", "hq": 4, "hkv": 2},
    "grouped heads, one key/value head": {"hq": 4, "hkv": 1},
    "past and present": {"past": 4, "present": True},
    "past only": {"layout": "past_only", "past": 6, "kv": 0},
    "relative position bias": {"rpb": True},
    "padding bias and mask, broadcast over heads and queries": {
        "rpb": True,
        "padding": True,
        "mask_type": "BOOLEAN",
        "s": 4,
        "kv": 6,
    },
    "head size 64": {"d": 64},
    "boolean, float16 filter added": {"mask_type": "BOOLEAN", "rpb": True},
    "boolean, small filter added": {"mask_type": "BOOLEAN", "mask_filter_value": -2.5},
    "boolean, -inf": {"mask_type": "BOOLEAN", "mask_filter_value": -math.inf},
    "key lengths": {"mask_type": "KEY_SEQUENCE_LENGTH"},
    "key end / start, -inf": {
        "mask_type": "KEY_SEQUENCE_END_START",
        "mask_filter_value": -math.inf,
    },
    "key / query offsets, lowest float32": {
        "mask_type": "KEY_QUERY_SEQUENCE_LENGTH_START_END",
        "mask_filter_value": float(np.finfo(np.float32).min),
    },
    "past lengths, one query (decoding)": {"past": 6, "lengths": True, "s": 1, "present": True},
    "past lengths, one new key, rows after it": {
        "past": 6,
        "lengths": True,
        "s": 1,
        "kv": 1,
        "present": True,
    },
}

REJECTED = {
    "FLOAT32": {"type_name": "FLOAT32"},
    "BiasTensor": {"bias": True},
    "head size not a multiple of 8": {"d": 4},
    "value head size differs": {"dv": 16},
    "boolean filter float16 cannot hold": {"mask_type": "BOOLEAN", "mask_filter_value": -1e4 - 1},
    "boolean filter beyond cuDNN's mask": {"mask_type": "BOOLEAN", "mask_filter_value": -1e5},
    "replacing filter too close to the logits": {
        "mask_type": "KEY_SEQUENCE_LENGTH",
        "mask_filter_value": -100.0,
    },
    "past lengths with several queries": {"past": 6, "lengths": True, "s": 2},
    "past lengths with a mask": {
        "past": 6,
        "lengths": True,
        "s": 1,
        "mask_type": "KEY_SEQUENCE_LENGTH",
    },
}


@pytest.mark.parametrize("case", ACCEPTED)
def test_attention_expressible_accepts(case):
    desc = _attention(**ACCEPTED[case])
    dml.validate(desc)
    assert KA.expressible(desc)


@pytest.mark.parametrize("case", REJECTED)
def test_attention_expressible_rejects(case):
    desc = _attention(**REJECTED[case])
    dml.validate(desc)
    assert not KA.expressible(desc)


def test_registered_paths():
    # the decode-step kernel (kernels/decode_attention.py, which kernels/attention.py imports)
    # for one query position, which cuDNN's path also leaves to it; cuDNN's for the rest
    for name in ("MULTIHEAD_ATTENTION", "MULTIHEAD_ATTENTION1"):
        paths = [p.name for p in fastpath.fast_paths(f"DML_OPERATOR_{name}")]
        assert paths == ["decode", "cudnn"]


def test_one_query_position_is_left_to_the_decode_kernel(monkeypatch):
    # a decode step (S = 1) the decode-step kernel computes: cuDNN's path declines it while
    # that kernel is on, and takes it when it is off (the compile check stubbed: no GPU here)
    from dml_jax.kernels import decode_attention

    monkeypatch.setattr(KA, "_cudnn_compiles", lambda d: True)
    step, prompt = _attention(s=1, kv=1, past=16), _attention(s=3, kv=3, past=16)
    dml.validate(step)
    assert KA.expressible(step) and decode_attention.expressible(step)
    assert decode_attention.ON and not KA.applies(step) and KA.applies(prompt)
    monkeypatch.setattr(decode_attention, "ON", False)
    assert KA.applies(step)


@pytest.mark.skipif(CUDA, reason="this process has a CUDA backend")
def test_applies_declines_without_cuda(monkeypatch):
    # Even when the process is told it has CUDA, the trial compilation fails and the lax
    # lowering is chosen: no error reaches the caller.
    monkeypatch.setattr(fastpath, "cuda_present", lambda: True)
    desc = _attention()
    assert KA.expressible(desc) and not KA.applies(desc)
    assert fastpath.select(desc) is None
    jax.block_until_ready(dml.compile_operator(desc)(*_inputs(desc)))


# --- inputs and comparison --------------------------------------------------------------------


def _mask_values(rng, desc, t):
    """Masks with a row (or batch entry) that keeps no key, besides random ones."""
    g = analyze(desc, Validator(desc.operator_type))
    b, s, keys, name = g.batch, g.seq, g.total, desc.mask_type.name
    if name == "BOOLEAN":
        m = rng.choice(np.array([0, 1, 1, 1, 2, -1], np.int32), size=t.sizes)
        m.reshape(-1, keys)[0] = 0
        return m
    if name == "KEY_SEQUENCE_LENGTH":
        return np.array([0, *rng.integers(1, keys + 2, b - 1)], np.int32).reshape(t.sizes)
    if name == "KEY_SEQUENCE_END_START":
        ends = np.array([1, *rng.integers(2, keys + 2, b - 1)])
        starts = np.array([3, *rng.integers(-1, 2, b - 1)])  # batch 0 keeps no key
        return np.concatenate([ends, starts]).astype(np.int32).reshape(t.sizes)
    lengths = rng.integers(0, keys + 1, b)
    q_starts = np.sort(rng.integers(0, b * s + 1, b + 1))
    k_starts = np.sort(rng.integers(0, b * keys + 1, b + 1))
    return np.concatenate([lengths, q_starts, k_starts]).astype(np.int32).reshape(t.sizes)


def _inputs(desc, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for path, t in desc.input_slots():
        if path == "MaskTensor":
            out.append(_mask_values(rng, desc, t))
        elif path == "PastSequenceLengthsTensor":  # a cache filling up; nothing left to attend
            out.append(np.array([3, -9, 9][: t.sizes[0]], np.int32).reshape(t.sizes))
        else:
            out.append(rng.standard_normal(t.sizes).astype(t.dtype))
        if t.strides is not None and 0 in t.strides:  # the same along a broadcast axis
            first = tuple(slice(0, 1) if st == 0 else slice(None) for st in t.strides)
            out[-1] = np.ascontiguousarray(np.broadcast_to(out[-1][first], t.sizes))
    x = dict(zip((p for p, _ in desc.input_slots()), range(len(out))))
    if "PastSequenceLengthsTensor" in x:
        # the cache's rows from each entry's length on hold NaN and infinities, which no query
        # attends (docs/semantics.md): they must not reach the output
        lengths = out[x["PastSequenceLengthsTensor"]].reshape(-1, 1, 1, 1)
        for name in ("PastKeyTensor", "PastValueTensor"):
            past = out[x[name]]
            rows = np.arange(past.shape[2]).reshape(1, 1, -1, 1)
            junk = np.where(rows % 2 == 0, np.nan, np.inf).astype(past.dtype)
            out[x[name]] = np.where(rows >= np.maximum(lengths, 0), junk, past)
    return out


def _largest_value(desc, inputs) -> float:
    """max |V| over the values attended (the new and the past ones)."""
    x = dict(zip((p for p, _ in desc.input_slots()), inputs))
    parts = [x.get("ValueTensor"), x.get("PastValueTensor")]
    if "StackedKeyValueTensor" in x:
        parts.append(x["StackedKeyValueTensor"][..., 1, :])
    if "StackedQueryKeyValueTensor" in x:
        parts.append(x["StackedQueryKeyValueTensor"][..., 2, :])
    return max(float(np.abs(p.astype(np.float32)).max()) for p in parts if p is not None)


def assert_attention_close(desc, inputs, got, want):
    """The output within the tolerance of docs/semantics.md; present outputs equal."""
    (g, *g_present), (w, *w_present) = _tuple(got), _tuple(want)
    g, w = np.asarray(g, np.float32), np.asarray(w, np.float32)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
    bound = ATTENTION_TOLERANCE * (_largest_value(desc, inputs) + np.abs(np.nan_to_num(w)))
    excess = np.abs(np.nan_to_num(g) - np.nan_to_num(w)) - bound
    assert excess.max() <= 0, f"{excess.max()} beyond the tolerance"
    for a, b in zip(g_present, w_present, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def _tuple(result):
    return tuple(result) if isinstance(result, tuple | list) else (result,)


def _lax(desc):
    return dml.compile_operator(desc, fast_paths=False)


@pytest.fixture
def xla_attention(monkeypatch):
    """cuDNN's attention replaced by jax's XLA implementation of the same call."""
    original = jax.nn.dot_product_attention

    def xla(q, k, v, *, implementation=None, **kwargs):
        assert implementation == "cudnn"
        # cuDNN's own rule (jax checks it only there): a bias or mask has the logits' query
        # and key lengths, broadcast over batch and heads at most
        for name in ("bias", "mask"):
            a = kwargs.get(name)
            if a is not None:
                assert a.shape[2:] == (q.shape[1], k.shape[1]), (name, a.shape)
        # float32 operands: XLA's CPU dot has no float16-in, float32-accumulate form
        wide = (a.astype(jnp.float32) for a in (q, k, v))
        return original(*wide, implementation="xla", **kwargs).astype(q.dtype)

    monkeypatch.setattr(jax.nn, "dot_product_attention", xla)


ATTENTION_MASKS = {
    "boolean -10000 with fully masked rows": {"mask_type": "BOOLEAN", "rpb": True},
    "key lengths with an empty batch entry": {"mask_type": "KEY_SEQUENCE_LENGTH", "past": 2},
    "key end / start": {"mask_type": "KEY_SEQUENCE_END_START", "hq": 4, "hkv": 2},
    "key end / start, -inf": {
        "mask_type": "KEY_SEQUENCE_END_START",
        "mask_filter_value": -math.inf,
    },
    "key / query offsets": {"mask_type": "KEY_QUERY_SEQUENCE_LENGTH_START_END", "b": 3},
}
ATTENTION_CASES = {**ACCEPTED, **ATTENTION_MASKS}


@pytest.mark.parametrize("case", ATTENTION_CASES)
def test_attention_path_matches_lax_with_xla_attention(case, xla_attention):
    desc = _attention(**ATTENTION_CASES[case])
    assert KA.expressible(desc)
    inputs = _inputs(desc)
    got = jax.jit(functools.partial(KA.lower, desc))(*inputs)
    assert_attention_close(desc, inputs, got, _lax(desc)(*inputs))


def test_attention_path_vmap(xla_attention):
    desc = _attention(hq=4, hkv=2, mask_type="KEY_SEQUENCE_END_START", present=True)
    members = [_inputs(desc, seed) for seed in range(3)]
    got = jax.vmap(functools.partial(KA.lower, desc))(*[np.stack(a) for a in zip(*members)])
    for i, m in enumerate(members):
        assert_attention_close(desc, m, [g[i] for g in got], _lax(desc)(*m))


# --- on a CUDA machine: cuDNN itself ----------------------------------------------------------

GPU_ATTENTION = {
    **ATTENTION_CASES,
    "long, head 128": {"b": 2, "s": 256, "kv": 384, "hq": 4, "hkv": 4, "d": 128},
    "long, grouped, key lengths": {
        "s": 200,
        "kv": 300,
        "hq": 8,
        "hkv": 2,
        "d": 64,
        "mask_type": "KEY_SEQUENCE_LENGTH",
    },
}


@gpu
@pytest.mark.parametrize("case", GPU_ATTENTION)
def test_gpu_attention_fast_path_matches_lax(case, monkeypatch):
    from dml_jax.kernels import decode_attention

    desc = _attention(**GPU_ATTENTION[case])
    # a decode step the decode-step kernel takes (with past lengths, by default:
    # test_decode_attention_kernel.py) is not cuDNN's; cuDNN's path takes it with that kernel off
    assert KA.applies(desc) != decode_attention.applies(desc)
    monkeypatch.setattr(decode_attention, "ON", False)
    assert KA.applies(desc)
    inputs = _inputs(desc)
    op = dml.compile_operator(desc)
    assert "__cudnn$fmha" in jax.jit(op.fn).lower(*inputs).as_text()
    assert_attention_close(desc, inputs, op(*inputs), _lax(desc)(*inputs))


@gpu
def test_gpu_attention_vmap():
    desc = _attention(hq=4, hkv=2, mask_type="KEY_SEQUENCE_LENGTH")
    members = [_inputs(desc, seed) for seed in range(3)]
    got = _tuple(jax.vmap(dml.compile_operator(desc).fn)(*[np.stack(a) for a in zip(*members)]))
    for i, m in enumerate(members):
        assert_attention_close(desc, m, [g[i] for g in got], _lax(desc)(*m))


# --- masks the program holds as constants (a graph's ConstantDataNode) -------------------------


def _causal_case(causal: bool, s=6, broadcast=False):
    """A BOOLEAN -inf mask, causal or not; ``broadcast``: one {S, S} mask for every batch entry
    and head (strides 0, 0, S, 1), as the GPT stack of examples/networks.py describes it."""
    desc = _attention(mask_type="BOOLEAN", mask_filter_value=-math.inf, s=s, kv=s)
    b, h = desc.mask_tensor.sizes[:2]
    if broadcast:
        mask = T("INT32", (b, h, s, s), strides=(0, 0, s, 1))
        desc = dataclasses.replace(desc, mask_tensor=mask)
    inputs = _inputs(desc)
    keep = np.tril(np.ones((s, s), np.int32)) if causal else np.triu(np.ones((s, s), np.int32))
    inputs[-1] = np.broadcast_to(keep, (b, h, s, s)).copy()
    return desc, inputs


def _has_cond(jaxpr) -> bool:
    """Whether a traced program (its sub-programs included) holds a conditional."""
    return "cond[" in str(jaxpr)


@pytest.mark.parametrize("broadcast", [False, True], ids=["whole", "broadcast"])
@pytest.mark.parametrize("causal", [True, False])
def test_a_known_mask_is_tested_when_traced(causal, broadcast, xla_attention, monkeypatch):
    # A mask the program holds as a constant decides the causal mode at trace time (no
    # conditional); a mask known only at run time gets the conditional. Same values either way.
    # A broadcast mask's description too (it is sliced to {1, 1, S, S} first: the slice of a
    # constant stays a constant).
    desc, inputs = _causal_case(causal, broadcast=broadcast)
    modes = []
    original = jax.nn.dot_product_attention

    def record(*args, is_causal=False, **kwargs):
        modes.append(is_causal)
        return original(*args, is_causal=is_causal, **kwargs)

    monkeypatch.setattr(jax.nn, "dot_product_attention", record)
    lower = functools.partial(KA.lower, desc)
    assert _has_cond(jax.make_jaxpr(lower)(*inputs))
    assert modes == [True, False]  # both branches traced
    modes.clear()
    lower = functools.partial(KA.lower, desc)  # a new function: jit caches traces by function
    with fastpath.known_inputs({len(inputs) - 1: inputs[-1]}):
        jaxpr = jax.make_jaxpr(lower)(*inputs)
        got = jax.jit(lower)(*inputs)
    assert not _has_cond(jaxpr)
    assert modes == [causal]  # one branch, traced once (jit reuses the trace)
    assert_attention_close(desc, inputs, got, _lax(desc)(*inputs))


def _graph_with_mask(desc, mask, as_constant: bool):
    """MULTIHEAD_ATTENTION with its mask from a ConstantDataNode or from a graph input."""
    names = [p for p, _ in desc.input_slots()]
    data = len(names) - 1
    nodes, mids = [desc], []
    ins = [dml.InputGraphEdge(i, 0, k) for i, k in enumerate(_present_slots(desc)[:data])]
    if as_constant:
        nodes.append(dml.ConstantDataNode(mask))
        mids.append(dml.IntermediateGraphEdge(1, 0, 0, _present_slots(desc)[data]))
    else:
        ins.append(dml.InputGraphEdge(data, 0, _present_slots(desc)[data]))
    count = data + (0 if as_constant else 1)
    return dml.GraphDesc(count, 1, nodes, ins, [dml.OutputGraphEdge(0, 0, 0)], mids)


def _present_slots(desc):
    return [k for k, (_, t) in enumerate(desc.edge_slots(dml.fields.INPUT)) if t is not None]


@gpu
@pytest.mark.parametrize("causal", [True, False])
def test_gpu_constant_mask_in_a_graph(causal):
    # The graph holding the mask as a constant: one cuDNN call in the mode the mask asks for and
    # no conditional; the same values as the graph taking the mask as an input.
    desc, inputs = _causal_case(causal, s=64)
    with_constant = dml.compile_graph(_graph_with_mask(desc, inputs[-1], True))
    with_input = dml.compile_graph(_graph_with_mask(desc, inputs[-1], False))
    lowered = jax.jit(with_constant.fn).lower(*inputs[:-1])
    assert lowered.as_text().count("__cudnn$fmha") == 1
    assert " conditional(" not in lowered.compile().as_text()
    assert " conditional(" in jax.jit(with_input.fn).lower(*inputs).compile().as_text()
    got = with_constant(*inputs[:-1])
    np.testing.assert_array_equal(np.asarray(got), np.asarray(with_input(*inputs)))
    assert_attention_close(desc, inputs, got, _lax(desc)(*inputs))
