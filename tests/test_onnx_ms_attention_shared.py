"""com.microsoft Attention and MultiHeadAttention over a past / present buffer they share (ONNX
Runtime's ``past_present_share_buffer``): past and present are one buffer of max_sequence_length
positions, the new keys / values are written at ``past_sequence_length`` (a run-time input) and
the queries attend the positions before past_sequence_length + new.

References: onnxruntime's CPU provider wherever it runs the form (MultiHeadAttention, float32,
unpacked inputs); else a NumPy reference written from the contrib spec (``_reference``), and the
same data through onnxruntime's plain past / present (Concat) form, whose output and present
must match the shared form's (the present beyond past + new keeping the buffer's values). A
decode loop over a tiny model feeds each present back as the next past, past_sequence_length
advancing, against onnxruntime's own loop."""

from __future__ import annotations

import math

import numpy as np
import pytest

import dml_jax as dml

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import helper, numpy_helper

from dml_jax.onnx import InferenceSession

MS = "com.microsoft"
B, N, H, M = 2, 2, 4, 8  # batch, heads, head size, max_sequence_length
D = N * H


def _f(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def _model(op, inputs, outputs, attrs, *, inits=()):
    """A one-node model: ``inputs`` is a list of (name, array or None for an absent optional
    input); the names in ``inits`` are initializers. Returns (model, feeds)."""
    names = [name if a is not None else "" for name, a in inputs]
    while names and not names[-1]:
        names.pop()
    node = helper.make_node(op, names, list(outputs), domain=MS, **attrs)
    given = [(n, a) for n, a in inputs if a is not None]
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for n, a in given
            if n not in inits
        ],
        [helper.make_empty_tensor_value_info(o) for o in outputs if o],
        [numpy_helper.from_array(a, n) for n, a in given if n in inits],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=10)
    return model, {n: a for n, a in given if n not in inits}


# onnxruntime's CPU MultiHeadAttention over a shared buffer took the buffer's length for the
# past's before 1.31 (microsoft/onnxruntime#32723, "Fix CPU MHA shared cache length handling"):
# its answers there are no reference (the GPU machine's onnxruntime 1.30 gave other values).
SHARED_MHA_REFERENCE = tuple(int(p) for p in ort.__version__.split(".")[:2]) >= (1, 31)


def _session(model):
    """onnxruntime's CPU session of ``model``; a MultiHeadAttention with past_sequence_length
    (the shared buffer) is skipped where that provider's answer is no reference."""
    shared = any(
        n.op_type == "MultiHeadAttention" and len(n.input) > 8 and n.input[8]
        for n in model.graph.node
    )
    if shared and not SHARED_MHA_REFERENCE:
        pytest.skip(f"onnxruntime {ort.__version__}'s CPU MultiHeadAttention over a shared buffer")
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _ort(model, feeds):
    return _session(model).run(None, feeds)


def _close(got, want, tol=2e-5):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        assert np.isfinite(g).all()
        np.testing.assert_allclose(g.astype(np.float32), w.astype(np.float32), rtol=tol, atol=tol)


# --- the reference ----------------------------------------------------------------------------


def _reference(
    q,
    k,
    v,
    past_k,
    past_v,
    past,
    *,
    causal=False,
    keep=None,
    bias=None,
    scale=None,
    filter_value=-10000.0,
):
    """The contrib spec's attention over a shared buffer, in float64. q {B, N, S, H}; k, v
    {B, N, L, H / Hv}; past_k, past_v the buffers {B, N, M, H / Hv}; ``past`` the
    past_sequence_length, clamped to [0, M - L] (dml_jax's choice where ONNX Runtime fails);
    ``keep`` {B, 1 or S, T'} raw mask values (kept above 0) and ``bias`` {B or 1, N or 1, S, T'}
    over the first T' keys (the keys after them kept with no bias); ``causal``: query i reads
    the keys up to past + i, the last query all of them. Returns y {B, S, N * Hv} and the
    presents."""
    b, _, s, h = q.shape
    new, capacity = k.shape[2], past_k.shape[2]
    p = min(max(past, 0), capacity - new)
    present_k, present_v = past_k.copy(), past_v.copy()
    present_k[:, :, p : p + new], present_v[:, :, p : p + new] = k, v
    total = p + new
    scale = 1 / math.sqrt(h) if scale is None else scale
    logits = scale * np.einsum("bnsh,bnth->bnst", q.astype(np.float64), present_k[:, :, :total])
    if bias is not None:
        covered = min(bias.shape[-1], total)
        logits[..., :covered] += bias[..., :covered]
    if keep is not None:
        covered = min(keep.shape[-1], total)
        dropped = keep[:, None, :, :covered] <= 0
        logits[..., :covered] += np.where(dropped, filter_value, 0.0)
    if causal and s > 1:
        i, j = np.arange(s)[:, None], np.arange(total)[None, :]
        logits = np.where((j > p + i) & (i < s - 1), -np.inf, logits)
    w = np.exp(logits - logits.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    y = np.einsum("bnst,bnth->bsnh", w, present_v[:, :, :total].astype(np.float64))
    return y.reshape(b, s, -1).astype(q.dtype), present_k, present_v


def _heads(x, n=N):
    """{B, S, N * H} -> {B, N, S, H}."""
    b, s, hidden = x.shape
    return x.reshape(b, s, n, hidden // n).transpose(0, 2, 1, 3)


# --- MultiHeadAttention: onnxruntime's CPU kernel runs it ---------------------------------------


def _mha_inputs(rng, s, new, past, *, dv=H, mask=None, bias=None, qkv_bias=False):
    return [
        ("q", _f(rng, B, s, D)),
        ("k", _f(rng, B, new, D)),
        ("v", _f(rng, B, new, N * dv)),
        ("bias", _f(rng, 2 * D + N * dv) if qkv_bias else None),
        ("key_padding_mask", mask),
        ("attention_bias", bias),
        ("past_key", _f(rng, B, N, M, H)),
        ("past_value", _f(rng, B, N, M, dv)),
        ("past_sequence_length", np.array([past], np.int32)),
    ]


MHA_OUT = ["y", "present_key", "present_value"]


def _mha_cases():
    """(S, L, past, attributes, mask, attention_bias shape, qkv bias) per case."""
    r = np.random.default_rng(5)
    return {
        "decode": (1, 1, 3, {}, None, None, False),
        "decode_bias_mask": (
            1,
            1,
            4,
            {},
            np.array([[1, 0, 1, 1, 1], [1] * 5], np.int32),
            (1, N, 1, 5),
            True,
        ),
        "prompt_causal": (3, 3, 0, {"unidirectional": 1}, None, None, True),
        "chunk_causal": (3, 3, 2, {"unidirectional": 1, "scale": 0.4}, None, None, False),
        "chunk_bidirectional": (3, 3, 2, {"mask_filter_value": -3.0}, None, (B, 1, 3, 5), True),
        "cross_causal": (2, 3, 3, {"unidirectional": 1}, None, None, False),
        "lengths_mask": (2, 2, 3, {}, np.array([4, 5], np.int32), None, False),
        "mask_3d": (
            2,
            2,
            3,
            {"unidirectional": 1},
            r.integers(0, 2, (B, 2, 5)).astype(np.int32),
            None,
            False,
        ),
        "full_buffer": (2, 2, M - 2, {}, None, None, False),
    }


MHA_CASES = _mha_cases()


@pytest.mark.parametrize("case", sorted(MHA_CASES))
def test_mha_shared_buffer_matches_onnxruntime(case):
    s, new, past, attrs, mask, bias_shape, qkv_bias = MHA_CASES[case]
    rng = np.random.default_rng(sorted(MHA_CASES).index(case))
    bias = None if bias_shape is None else _f(rng, *bias_shape)
    inputs = _mha_inputs(rng, s, new, past, mask=mask, bias=bias, qkv_bias=qkv_bias)
    model, feeds = _model("MultiHeadAttention", inputs, MHA_OUT, {"num_heads": N, **attrs})
    session = InferenceSession(model)
    got = session.run(None, feeds)
    _close(got, _ort(model, feeds))
    ops = session.explain()
    assert "MULTIHEAD_ATTENTION1" in ops and "jax" not in ops
    # The buffer beyond past + new keeps the past's values.
    np.testing.assert_array_equal(got[1][:, :, past + new :], feeds["past_key"][:, :, past + new :])


def test_mha_shared_buffer_packed_qkv_and_kv():
    """Packed QKV {B, S, N, 3, H} and packed KV {B, L, N, 2, H}, which onnxruntime's CPU
    kernel does not run, against its output for the same data unpacked."""
    rng = np.random.default_rng(1)
    s, past = 3, 2
    qkv = _f(rng, B, s, N, 3, H)
    q, k, v = (qkv[:, :, :, i].reshape(B, s, D) for i in range(3))
    buffers = [("past_key", _f(rng, B, N, M, H)), ("past_value", _f(rng, B, N, M, H))]
    psl = [("past_sequence_length", np.array([past], np.int32))]
    attrs = {"num_heads": N}
    plain = [("q", q), ("k", k), ("v", v), ("b", None), ("m", None), ("ab", None)]
    want = _ort(*_model("MultiHeadAttention", plain + buffers + psl, MHA_OUT, attrs))
    packed = [("qkv", qkv), ("k", None), ("v", None), ("b", None), ("m", None), ("ab", None)]
    model, feeds = _model("MultiHeadAttention", packed + buffers + psl, MHA_OUT, attrs)
    _close(InferenceSession(model).run(None, feeds), want)
    kv = np.stack([k.reshape(B, s, N, H), v.reshape(B, s, N, H)], axis=3)
    packed_kv = [("q", q), ("kv", kv), ("v", None), ("b", None), ("m", None), ("ab", None)]
    model, feeds = _model("MultiHeadAttention", packed_kv + buffers + psl, MHA_OUT, attrs)
    _close(InferenceSession(model).run(None, feeds), want)


def test_mha_shared_buffer_float16_and_value_head_size():
    """float16 (no CPU kernel) and a value head size of its own (the CPU kernel wants the
    query's), against the reference."""
    rng = np.random.default_rng(2)
    s, past, dv = 2, 4, 2 * H
    for dtype, attrs in ((np.float16, {"unidirectional": 1}), (np.float32, {})):
        inputs = _mha_inputs(rng, s, s, past, dv=dv)
        inputs = [
            (n, a if a is None or a.dtype != np.float32 else a.astype(dtype)) for n, a in inputs
        ]
        model, feeds = _model("MultiHeadAttention", inputs, MHA_OUT, {"num_heads": N, **attrs})
        got = InferenceSession(model).run(None, feeds)
        want = _reference(
            _heads(feeds["q"]),
            _heads(feeds["k"]),
            _heads(feeds["v"]),
            feeds["past_key"],
            feeds["past_value"],
            past,
            causal="unidirectional" in attrs,
        )
        _close(got, list(want), 4e-3 if dtype == np.float16 else 2e-5)


# --- Attention: onnxruntime's CPU kernel refuses the shared form ---------------------------------


def _attention_case(rng, s, past, *, mask=None, bias=None):
    x, w, qkv_bias = _f(rng, B, s, D), _f(rng, D, 3 * D), _f(rng, 3 * D)
    buffer = _f(rng, 2, B, N, M, H)
    return [
        ("x", x),
        ("w", w),
        ("bias", qkv_bias),
        ("mask_index", mask),
        ("past", buffer),
        ("attention_bias", bias),
        ("past_sequence_length", np.array([past], np.int32)),
    ]


def _attention_reference(inputs, past, **kw):
    x, w, qkv_bias, _, buffer = (a for _, a in inputs[:5])
    q, k, v = np.split(x @ w + qkv_bias, 3, axis=-1)
    y, pk, pv = _reference(_heads(q), _heads(k), _heads(v), buffer[0], buffer[1], past, **kw)
    return [y, np.stack([pk, pv])]


def _keep(mask, total):
    """mask_index as raw values {B, 1 or S, T} over ``total`` keys."""
    j = np.arange(total)
    if mask is None or mask.ndim > 2:
        return mask
    if mask.ndim == 2:
        return mask[:, None]
    if mask.shape == (B,):  # key lengths
        return (j < mask[:, None])[:, None].astype(np.int32)
    # exclusive ends, then inclusive starts
    return ((j < mask[:B, None]) & (j >= mask[B:, None]))[:, None].astype(np.int32)


def _attention_cases():
    """(S, past, unidirectional, mask, attention_bias shape)."""
    r = np.random.default_rng(6)
    return {
        "decode": (1, 5, 0, None, None),
        "decode_causal_2d_mask": (
            1,
            4,
            1,
            np.array([[1, 1, 0, 1, 1], [0] + [1] * 4], np.int32),
            None,
        ),
        "prompt_causal": (3, 0, 1, np.array([3, 2], np.int32), None),
        "chunk_causal": (3, 2, 1, None, (B, N, 3, 5)),
        "chunk_bidirectional": (2, 3, 0, np.array([5, 4, 0, 1], np.int32), (1, 1, 2, 5)),
        "mask_3d": (2, 3, 0, r.integers(-1, 2, (B, 2, 5)).astype(np.int32), None),
    }


ATTENTION_CASES = _attention_cases()


@pytest.mark.parametrize("case", sorted(ATTENTION_CASES))
def test_attention_shared_buffer(case):
    s, past, causal, mask, bias_shape = ATTENTION_CASES[case]
    rng = np.random.default_rng(10 + sorted(ATTENTION_CASES).index(case))
    bias = None if bias_shape is None else _f(rng, *bias_shape)
    inputs = _attention_case(rng, s, past, mask=mask, bias=bias)
    attrs = {"num_heads": N, "unidirectional": causal, "mask_filter_value": -5.0}
    model, feeds = _model(
        "Attention", inputs, ["y", "present"], {**attrs, "past_present_share_buffer": 1}
    )
    got = InferenceSession(model).run(None, feeds)
    try:
        _close(got, _ort(model, feeds))
    except ort.capi.onnxruntime_pybind11_state.InvalidArgument as e:
        # onnxruntime 1.32's CPU kernel has no sharing (nor an attention_bias with a past)
        assert "past_sequence_length" in str(e) or "attention_bias" in str(e)
    want = _attention_reference(
        inputs, past, causal=bool(causal), keep=_keep(mask, past + s), bias=bias, filter_value=-5.0
    )
    _close(got, want)
    if bias is not None:
        return  # onnxruntime's Attention takes no attention_bias with a past
    # The plain (Concat) form on the same data, run by onnxruntime: the same output, and its
    # present is the shared one's first past + S positions.
    plain = [(n, a[:, :, :, :past].copy() if n == "past" else a) for n, a in inputs[:-1]]
    y, present = _ort(*_model("Attention", plain, ["y", "present"], attrs))
    _close([got[0], got[1][:, :, :, : past + s]], [y, present])


# --- what ONNX Runtime leaves undefined ---------------------------------------------------------


@pytest.mark.parametrize(("past", "start"), [(M - 1, M - 2), (M + 3, M - 2), (-2, 0)])
def test_past_sequence_length_outside_the_buffer_is_clamped(past, start):
    """past_sequence_length + new > max_sequence_length, or below 0 (onnxruntime fails): the
    start is clamped to [0, M - new], as lax.dynamic_update_slice clamps it."""
    rng = np.random.default_rng(3)
    s = 2
    inputs = _mha_inputs(rng, s, s, past)
    model, feeds = _model("MultiHeadAttention", inputs, MHA_OUT, {"num_heads": N})
    with pytest.raises(Exception, match="past_sequence_length"):
        _ort(model, feeds)
    got = InferenceSession(model).run(None, feeds)
    q, k, v = (_heads(feeds[n]) for n in "qkv")
    want = _reference(q, k, v, feeds["past_key"], feeds["past_value"], start)
    _close(got, list(want))
    inputs = _attention_case(rng, s, past)
    attrs = {"num_heads": N, "unidirectional": 1, "past_present_share_buffer": 1}
    model, feeds = _model("Attention", inputs, ["y", "present"], attrs)
    _close(
        InferenceSession(model).run(None, feeds), _attention_reference(inputs, start, causal=True)
    )


def test_mask_and_bias_shorter_than_the_keys():
    """A 2-D mask / attention_bias covering fewer keys than past_sequence_length + new (ONNX
    Runtime wants them equal, and fails): the keys after them are kept with no bias."""
    rng = np.random.default_rng(4)
    s, past, covered = 1, 5, 4
    mask = np.array([[1, 0, 1, 1], [1, 1, 0, 1]], np.int32)
    bias = _f(rng, B, 1, s, covered)
    inputs = _mha_inputs(rng, s, s, past, mask=mask, bias=bias)
    model, feeds = _model("MultiHeadAttention", inputs, MHA_OUT, {"num_heads": N})
    got = InferenceSession(model).run(None, feeds)
    q, k, v = (_heads(feeds[n]) for n in "qkv")
    want = _reference(
        q, k, v, feeds["past_key"], feeds["past_value"], past, keep=mask[:, None], bias=bias
    )
    _close(got, list(want))


@pytest.mark.parametrize("form", ["scalar", "known_at_import"])
def test_past_sequence_length_scalar_or_known_at_import(form):
    rng = np.random.default_rng(7)
    inputs = _mha_inputs(rng, 3, 3, 2)
    attrs = {"num_heads": N, "unidirectional": 1}
    inits = ()
    if form == "scalar":
        inputs[-1] = ("past_sequence_length", np.array(2, np.int32))
    else:
        inits = ("past_sequence_length",)
    want = _ort(*_model("MultiHeadAttention", inputs, MHA_OUT, attrs))
    model, feeds = _model("MultiHeadAttention", inputs, MHA_OUT, attrs, inits=inits)
    _close(InferenceSession(model).run(None, feeds), want)


def test_without_a_past_or_without_sharing_past_sequence_length_goes_unread():
    """As in onnxruntime: MultiHeadAttention without a past, and Attention without
    past_present_share_buffer, do not read past_sequence_length."""
    rng = np.random.default_rng(8)
    inputs = _mha_inputs(rng, 2, 2, 3)
    inputs[6:8] = [("past_key", None), ("past_value", None)]
    model, feeds = _model("MultiHeadAttention", inputs, MHA_OUT, {"num_heads": N})
    _close(InferenceSession(model).run(None, feeds), _ort(model, feeds))
    inputs = _attention_case(rng, 2, 3)
    inputs[4] = ("past", _f(rng, 2, B, N, 3, H))
    model, feeds = _model("Attention", inputs, ["y", "present"], {"num_heads": N})
    _close(InferenceSession(model).run(None, feeds), _ort(model, feeds))


# --- a decode loop ------------------------------------------------------------------------------

VOCAB = 11


def _decoder(op: str, shared: bool) -> onnx.ModelProto:
    """A one-layer decoder step (random weights of a fixed seed): token ids -> embedding ->
    causal self-attention (``op``) over a past / present cache -> logits; ``shared``: the cache
    is a buffer of M positions with past_sequence_length, else it grows by Concat."""
    rng = np.random.default_rng(20)
    embed, out = _f(rng, VOCAB, D), _f(rng, D, VOCAB)
    inits = [numpy_helper.from_array(embed, "embed"), numpy_helper.from_array(out, "out")]
    nodes = [helper.make_node("Gather", ["embed", "input_ids"], ["h"])]
    f32, i32 = onnx.TensorProto.FLOAT, onnx.TensorProto.INT32
    steps = "steps"
    attrs = {"num_heads": N, "unidirectional": 1}
    if op == "Attention":
        w, bias = _f(rng, D, 3 * D), _f(rng, 3 * D)
        inits += [numpy_helper.from_array(w, "w"), numpy_helper.from_array(bias, "qkv_bias")]
        cache_in = [helper.make_tensor_value_info("past", f32, [2, "batch", N, "past_len", H])]
        cache_out = ["present"]
        inputs = ["h", "w", "qkv_bias", "", "past", ""]
        if shared:
            attrs["past_present_share_buffer"] = 1
            inputs.append("past_sequence_length")
    else:
        for name in "qkv":
            inits.append(numpy_helper.from_array(_f(rng, D, D), f"w{name}"))
            nodes.append(helper.make_node("MatMul", ["h", f"w{name}"], [name]))
        cache_in = [
            helper.make_tensor_value_info(n, f32, ["batch", N, "past_len", H])
            for n in ("past_key", "past_value")
        ]
        cache_out = ["present_key", "present_value"]
        inputs = ["q", "k", "v", "", "", "", "past_key", "past_value"]
        if shared:
            inputs.append("past_sequence_length")
    nodes.append(helper.make_node(op, inputs, ["a", *cache_out], domain=MS, **attrs))
    nodes.append(helper.make_node("MatMul", ["a", "out"], ["logits"]))
    graph_inputs = [
        helper.make_tensor_value_info("input_ids", onnx.TensorProto.INT64, ["batch", steps])
    ] + cache_in
    if shared:
        graph_inputs.append(helper.make_tensor_value_info("past_sequence_length", i32, [1]))
    graph = helper.make_graph(
        nodes,
        "decoder",
        graph_inputs,
        [helper.make_empty_tensor_value_info(n) for n in ["logits", *cache_out]],
        inits,
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10)


def _loop(run, op: str, shared: bool, prompt: np.ndarray, steps: int):
    """Greedy decoding through ``run(feeds) -> outputs``: the prompt, then a token a step, each
    present fed back as the next past. Returns the logits of every step."""
    shape = (B, N, M if shared else 0, H)
    cache = (
        [np.zeros((2, *shape), np.float32)]
        if op == "Attention"
        else [np.zeros(shape, np.float32), np.zeros(shape, np.float32)]
    )
    names = ["past"] if op == "Attention" else ["past_key", "past_value"]
    ids, past, logits = prompt, 0, []
    for _ in range(steps + 1):
        feeds = {"input_ids": ids, **dict(zip(names, cache))}
        if shared:
            feeds["past_sequence_length"] = np.array([past], np.int32)
        out = run(feeds)
        logits.append(out[0])
        cache = out[1:]
        past += ids.shape[1]
        ids = out[0][:, -1:].argmax(-1).astype(np.int64)
    return logits


@pytest.mark.parametrize("op", ["MultiHeadAttention", "Attention"])
def test_decode_loop_over_a_shared_buffer(op):
    """A prompt of 3 tokens, then 4 steps of one token, the presents fed back as pasts and
    past_sequence_length advancing: the logits equal onnxruntime's, for MultiHeadAttention its
    own shared-buffer loop and the Concat loop, for Attention (no CPU kernel) the Concat loop;
    past_sequence_length is read at run time, so the steps share one program."""
    prompt = np.random.default_rng(21).integers(0, VOCAB, (B, 3)).astype(np.int64)
    shared, plain = _decoder(op, True), _decoder(op, False)
    session = InferenceSession(shared)
    got = _loop(lambda f: session.run(None, f), op, True, prompt, 4)
    wants = [_loop(_ort_runner(plain), op, False, prompt, 4)]
    if op == "MultiHeadAttention":
        wants.append(_loop(_ort_runner(shared), op, True, prompt, 4))
    for want in wants:
        _close(got, want, 1e-4)
    assert len(session._programs) == 2  # the prompt's shapes and the steps'


def _ort_runner(model):
    session = _session(model)
    return lambda feeds: session.run(None, feeds)


# --- rejected forms -----------------------------------------------------------------------------


def _rejected():
    """(op, inputs, outputs, attributes, what the error names)."""
    rng = np.random.default_rng(9)

    def attention(change, **attrs):
        inputs = dict(_attention_case(rng, 2, 3))
        inputs.update(change)
        return (
            "Attention",
            list(inputs.items()),
            ["y", "present"],
            {"past_present_share_buffer": 1, **attrs},
        )

    def mha(change):
        inputs = dict(_mha_inputs(rng, 2, 2, 3))
        inputs.update(change)
        return ("MultiHeadAttention", list(inputs.items()), MHA_OUT, {})

    return {
        "no_past_sequence_length": (
            *attention({"past_sequence_length": None}),
            "past_sequence_length",
        ),
        "two_lengths": (
            *attention({"past_sequence_length": np.array([3, 3], np.int32)}),
            "past_sequence_length",
        ),
        "float_length": (
            *mha({"past_sequence_length": np.array([3.0], np.float32)}),
            "past_sequence_length",
        ),
        "new_beyond_buffer": (
            *mha({"k": _f(rng, B, M + 1, D), "v": _f(rng, B, M + 1, D)}),
            "max_sequence_length",
        ),
        "mask_beyond_buffer": (
            *attention({"mask_index": np.ones((B, M + 1), np.int32)}),
            "mask_index",
        ),
        "mask_4d": (*attention({"mask_index": np.ones((B, 1, M, M), np.int32)}), "mask_index"),
        "bias_shorter_than_new": (
            *mha({"attention_bias": _f(rng, B, N, 2, 1)}),
            "attention_bias",
        ),
        "padding_mask_beyond_buffer": (
            *mha({"key_padding_mask": np.ones((B, M + 1), np.int32)}),
            "key_padding_mask",
        ),
    }


REJECTED = _rejected()


@pytest.mark.parametrize("case", sorted(REJECTED))
def test_rejected_shared_buffer_forms_name_the_node(case):
    op, inputs, outputs, attrs, what = REJECTED[case]
    model, feeds = _model(op, inputs, outputs, {"num_heads": N, **attrs})
    with pytest.raises(dml.ValidationError, match=rf"node 0 \({op}\).*{what}"):
        InferenceSession(model).run(None, feeds)
