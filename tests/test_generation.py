"""Generation (``dml_jax.onnx.generation``) against PyTorch's greedy tokens and onnxruntime.

The models (``tests/data/decoders/``, written by ``python -m dml_jax.bench.decoders``) are tiny
random-weight Hugging Face decoders exported by PyTorch's TorchScript exporter as one decode step
with its cache: GPT-2 (2 layers, hidden size 32, 2 heads, learned positions) and a LLaMA-style
model (2 layers, hidden size 32, 4 heads over 2 key / value heads, rotary positions), each with
and without a ``position_ids`` input. ``decoders_greedy.json`` holds PyTorch's own greedy tokens
(its own cache, float32) for two prompts of 5 tokens, 24 steps. Token ids are compared exactly:
the weights (initializer range 0.2) make the logits' top two far apart, so a reordering of sums
cannot flip an argmax.
"""

from __future__ import annotations

import json
import os
import re

import jax
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from dml_jax import ValidationError
from dml_jax.onnx import InferenceSession
from dml_jax.onnx.generation import (
    Generator,
    GeneratorParams,
    find_roles,
    generate,
    select_tokens,
)

DATA = os.path.join(os.path.dirname(__file__), "data", "decoders")
with open(os.path.join(DATA, "decoders_greedy.json")) as f:
    GREEDY = json.load(f)


def _path(name: str, positions: bool = True) -> str:
    return os.path.join(DATA, f"{name}_step{'' if positions else '_nopos'}.onnx")


@pytest.fixture(scope="module")
def sessions():
    cache = {}

    def get(name: str, positions: bool = True) -> InferenceSession:
        key = (name, positions)
        if key not in cache:
            cache[key] = InferenceSession(_path(name, positions))
        return cache[key]

    return get


def _ort_greedy(path: str, rows: list[list[int]], steps: int, positions: bool = True):
    """onnxruntime's greedy loop (``_greedy_loop``) on its CPU provider."""
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return _greedy_loop(sess, rows, steps, positions)


def _greedy_loop(sess, rows: list[list[int]], steps: int, positions: bool = True, process=None):
    """The greedy loop an onnxruntime user writes, on ``sess`` (onnxruntime's session shape):
    prompts left-padded to the longest with mask zeros, positions counted from each row's first
    real token (Hugging Face's convention), ``run`` once a token, the presents fed back as
    pasts: [batch, steps]. ``process(logits, history)``, where given, changes each step's last
    logits [batch, vocabulary] before the argmax, ``history`` each row's real tokens so far."""
    batch, longest = len(rows), max(map(len, rows))
    ids = np.zeros((batch, longest), np.int64)
    mask = np.zeros((batch, longest), np.int64)
    for b, row in enumerate(rows):
        ids[b, longest - len(row) :] = row
        mask[b, longest - len(row) :] = 1
    pos = np.where(mask > 0, np.cumsum(mask, 1) - 1, 1)
    pasts = [i for i in sess.get_inputs() if i.name.startswith("past")]
    feed_past = {i.name: np.zeros((batch, i.shape[1], 0, i.shape[3]), np.float32) for i in pasts}
    out, history = [], [list(row) for row in rows]
    for _ in range(steps):
        feed = {"input_ids": ids, "attention_mask": mask, **feed_past}
        if positions:
            feed["position_ids"] = pos
        logits, *presents = sess.run(None, feed)
        last = logits[:, -1] if process is None else process(logits[:, -1], history)
        ids = last.argmax(-1)[:, None]
        out.append(ids)
        for row, token in zip(history, ids[:, 0].tolist()):
            row.append(token)
        feed_past = dict(zip((i.name for i in pasts), presents))
        pos = pos[:, -1:] + 1
        mask = np.concatenate([mask, np.ones((batch, 1), np.int64)], 1)
    return np.concatenate(out, 1)


@pytest.mark.parametrize("name", ["tiny_gpt2", "tiny_llama"])
def test_greedy_tokens_equal_pytorch(sessions, name):
    ref = GREEDY[name]
    got = generate(sessions(name), np.array(ref["prompt"]), 24)
    np.testing.assert_array_equal(got, np.array(ref["greedy"]))


def test_model_builder_step_gives_pytorch_greedy_tokens():
    """A LLaMA in ONNX Runtime GenAI's model-builder form (``dml_jax.bench.model_builder``:
    GroupQueryAttention with rotary embeddings from cos / sin caches, SimplifiedLayerNormalization
    and its Skip form, written from a transformers model's weights; float32): the Generator's
    greedy tokens are PyTorch's for 24 steps, and its prefill and a decode step over the presents
    agree with onnxruntime."""
    ort = pytest.importorskip("onnxruntime")
    path = os.path.join(DATA, "tiny_llama_h16_builder_step.onnx")
    with open(os.path.join(DATA, "builder_greedy.json")) as f:
        ref = json.load(f)["tiny_llama_h16_builder"]
    prompt = np.array(ref["prompt"])
    s = InferenceSession(path)
    g = Generator(s, GeneratorParams(s, max_length=5 + 24, batch_size=2))
    assert "GroupQueryAttention" in g.explain()
    g.append_tokens(prompt)
    g.generate_until_done()
    np.testing.assert_array_equal(g.generated, np.array(ref["greedy"]))
    o = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    cache = (2, 2, 0, 16)
    feeds = {"input_ids": prompt.astype(np.int64), "attention_mask": np.ones((2, 5), np.int64)}
    feeds |= {f"past_key_values.{i}.{k}": np.zeros(cache, np.float32)
              for i in range(2) for k in ("key", "value")}  # fmt: skip
    for step in range(2):  # the prefill, then a token over its presents
        want, got = o.run(None, feeds), s.run(None, feeds)
        for w, x in zip(want, got):
            np.testing.assert_allclose(np.asarray(x), w, rtol=1e-4, atol=1e-4)
        feeds = {"input_ids": np.array([[3], [4]], np.int64),
                 "attention_mask": np.ones((2, 6), np.int64)}  # fmt: skip
        feeds |= {f"past_key_values.{i}.{k}": want[1 + 2 * i + j]
                  for i in range(2) for j, k in enumerate(("key", "value"))}  # fmt: skip


@pytest.mark.parametrize("name", ["tiny_gpt2", "tiny_llama"])
def test_greedy_without_position_ids_runs_exact_lengths(sessions, name):
    """Without position_ids the past cannot be padded: each length is its own program, and the
    tokens are still PyTorch's."""
    s = sessions(name, positions=False)
    ref = GREEDY[name]
    g = Generator(s, GeneratorParams(s, max_length=5 + 6, batch_size=2))
    assert "exact" in g.explain() and "no position_ids" in g.explain()
    g.append_tokens(np.array(ref["prompt"]))
    g.generate_until_done()
    np.testing.assert_array_equal(g.generated, np.array(ref["greedy"])[:, :6])
    assert g.compiles == 1 + 5  # the prefill and one step a past length


def test_left_padded_prompts_against_onnxruntime(sessions):
    """Prompts of 3 and 7 tokens: left-padded (to 16 here, to 7 in onnxruntime's loop), the
    padding masked, positions counted from each row's first token."""
    rows = [[5, 17, 42], [3, 9, 11, 60, 2, 8, 90]]
    for name in ("tiny_gpt2", "tiny_llama"):
        got = generate(sessions(name), rows, 16)
        np.testing.assert_array_equal(got, _ort_greedy(_path(name), rows, 16))


def test_run_loop_compiles_a_program_per_bucket():
    """``run`` once a token, the presents fed back as pasts (default options): the pasts are
    padded to buckets (16, 32, 64) and the presents cut back, so 40 steps compile the prefill
    and 3 programs, not 40; the tokens are onnxruntime's; with buckets=False each length is a
    program."""
    rows = [[5, 17, 42], [3, 9, 11, 60, 2, 8, 90]]
    path = _path("tiny_llama")
    want = _ort_greedy(path, rows, 40)
    s = InferenceSession(path)
    np.testing.assert_array_equal(_greedy_loop(s, rows, 40), want)
    assert len(s._programs) == 1 + 3
    assert (
        "buckets: past_key_values.0.key ... dimension 2 and attention_mask padded to powers"
        in s.explain()
    )
    exact = InferenceSession(path, buckets=False)
    np.testing.assert_array_equal(_greedy_loop(exact, rows, 8), want[:, :8])
    assert len(exact._programs) == 8
    assert "buckets: none, every past length exact (buckets=False)" in exact.explain()
    # The presents come back at the exact length, the padding cut out.
    feed = {"input_ids": np.array([[1]]), "attention_mask": np.ones((1, 4), np.int64),
            "position_ids": np.array([[3]])}  # fmt: skip
    past = np.random.default_rng(0).standard_normal((1, 2, 3, 8)).astype(np.float32)
    for i in range(2):
        feed[f"past_key_values.{i}.key"] = feed[f"past_key_values.{i}.value"] = past
    got = s.run(None, feed)
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feed)
    assert got[1].shape == (1, 2, 4, 8)
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-5)


def test_bucketed_steps_equal_exact_steps(sessions):
    """The same sampled tokens (same seed, so the same random keys) with the past padded to
    buckets and at its exact length: the padding changes no logit beyond rounding."""
    s = sessions("tiny_llama")
    prompt = np.array(GREEDY["tiny_llama"]["prompt"])
    opts = {"do_sample": True, "temperature": 1.5, "top_k": 20, "seed": 7}
    bucketed = generate(s, prompt, 10, **opts)
    exact = generate(s, prompt, 10, buckets=False, **opts)
    np.testing.assert_array_equal(bucketed, exact)
    assert len(set(bucketed.ravel().tolist())) > 4  # sampled, not a constant


def test_only_sampling_steps_split_the_random_key(sessions):
    """A sampling step splits the generation's key (each step its own); a greedy one reads no
    key, so it keeps it as it is and its step program holds no random-number work."""
    s = sessions("tiny_llama")
    prompt = np.array(GREEDY["tiny_llama"]["prompt"])
    keys = {}
    for sample in (False, True):
        g = Generator(s, GeneratorParams(s, max_length=12, batch_size=2, do_sample=sample,
                                         seed=5))  # fmt: skip
        start = np.asarray(g._key)
        g.append_tokens(prompt)
        g.generate_next_token()  # the prefill's token
        g.generate_next_token()  # a step
        keys[sample] = (start, np.asarray(g._key))
        fn, program = g._fns.steps_fn(2, g._step_key(g._length), 0, 1)
        state = g._state()
        jaxpr = str(fn.trace(g._fns.params_for(program), state, np.int32(g._length)).jaxpr)
        assert ("threefry2x32" in jaxpr or "random_bits" in jaxpr) == sample
    np.testing.assert_array_equal(keys[False][0], keys[False][1])
    assert not np.array_equal(keys[True][0], keys[True][1])


def test_steps_take_the_weights_as_one_tuple_in_name_order(monkeypatch):
    """A dispatch's weights (passed as arguments, as on a GPU) are a tuple of the session's
    parameters in the order of their names, the same object at every dispatch (a dict's
    flattening sorts its names at every call), and the tokens are those of the weights
    compiled in."""
    from dml_jax.onnx import session as session_module

    path = os.path.join(DATA, "tiny_llama_h16_builder_step.onnx")

    def tokens(s):
        g = Generator(s, GeneratorParams(s, max_length=12, batch_size=1))
        g.append_tokens([[3, 4, 5]])
        g.generate_until_done()
        return g, np.asarray(g.generated)

    _, baked = tokens(InferenceSession(path))
    monkeypatch.setattr(session_module, "CPU_BAKED_WEIGHTS_MAX_BYTES", -1)
    s = InferenceSession(path)
    g, got = tokens(s)
    np.testing.assert_array_equal(got, baked)
    _, program = g._fns.steps_fn(1, g._step_key(g._length - 1), g._gqa_capacity, 1)
    weights, named = g._fns.params_for(program), s._run_params(program)
    assert isinstance(weights, tuple) and weights is g._fns.params_for(program)
    assert len(weights) == len(named) > 0
    assert all(w is named[n] for w, n in zip(weights, sorted(named), strict=True))


def test_programs_bounded_by_buckets():
    """100 new tokens after a 5-token prompt, a step a dispatch: one prefill (prompt bucket 16)
    and one step per past bucket 16, 32, 64, 128, whatever the positions; a second generation
    compiles none."""
    s = InferenceSession(_path("tiny_llama"))
    prompt = np.array(GREEDY["tiny_llama"]["prompt"])
    params = GeneratorParams(s, max_length=105, batch_size=2, buckets=[16, 32, 64, 128],
                             steps_per_dispatch=1)  # fmt: skip
    g = Generator(s, params)
    before = g.compiles
    g.append_tokens(prompt)
    g.generate_until_done()
    assert before == 0 and g.compiles == 5
    assert len(s._programs) == 5
    assert g.generated.shape == (2, 100)
    again = Generator(s, params)
    again.append_tokens(prompt)
    again.generate_until_done()
    assert again.compiles == g.compiles
    np.testing.assert_array_equal(again.generated, g.generated)
    np.testing.assert_array_equal(g.generated[:, :24], np.array(GREEDY["tiny_llama"]["greedy"]))


@pytest.mark.parametrize("count", [7])
def test_runs_of_steps_give_the_single_steps_tokens(sessions, count):
    """``steps_per_dispatch``: runs of ``count`` steps in one ``lax.fori_loop`` dispatch inside
    each bucket, the rest a step each: the tokens of a step a dispatch, greedy and sampled, in
    a batch of prompts of different lengths; with end tokens the generation ends where the
    last row ended, inside a run or at the prefill's token."""
    ref = GREEDY["tiny_llama"]
    s = sessions("tiny_llama")
    rows = [ref["prompt"][0], ref["prompt"][1][2:]]
    for options in ({}, {"do_sample": True, "top_k": 5, "seed": 3}):
        want = generate(s, rows, 40, **options)
        np.testing.assert_array_equal(generate(s, rows, 40, steps_per_dispatch=count, **options),
                                      want)  # fmt: skip
    greedy = ref["greedy"][0]
    for eos in (greedy[5], greedy[0]):
        first = greedy.index(eos)
        got = generate(s, [ref["prompt"][0]], 30, eos_token_id=eos, steps_per_dispatch=count)
        np.testing.assert_array_equal(got[0], greedy[: first + 1])
    fresh = InferenceSession(_path("tiny_llama"))
    g = Generator(fresh, GeneratorParams(fresh, max_length=40, batch_size=2,
                                         steps_per_dispatch=count))  # fmt: skip
    g.append_tokens(rows)
    made = g.compile_ahead(workers=2)
    assert made >= 2 and g.compile_ahead() == 0  # the steps and runs of the buckets to come
    g.generate_until_done()
    np.testing.assert_array_equal(g.generated, generate(s, rows, g.generated.shape[1]))
    with pytest.raises(ValidationError, match="steps_per_dispatch"):
        GeneratorParams(s, steps_per_dispatch=0)


def test_compile_ahead_compiles_every_bucket_before_the_steps():
    """``compile_ahead`` after the prefill: the steps of the buckets 16, 32, 64 and 128 compiled
    at once; the generation then compiles nothing (no XLA compile at all while it runs) and
    gives the tokens of a generation that compiled as it went."""
    from jax import monitoring

    s = InferenceSession(_path("tiny_llama"))
    prompt = np.array(GREEDY["tiny_llama"]["prompt"])
    params = GeneratorParams(s, max_length=105, batch_size=2, buckets=[16, 32, 64, 128])
    g = Generator(s, params)
    g.append_tokens(prompt)
    # the steps of the four buckets and the runs of 16 of the three that hold one (32, 64, 128)
    assert g.compile_ahead(workers=2) == 7
    assert g.compile_ahead() == 0  # nothing left
    compiled = []

    def count(event, duration, **kw):
        if event == "/jax/core/compile/backend_compile_duration":
            compiled.append(duration)

    monitoring.register_event_duration_secs_listener(count)
    try:
        g.generate_until_done()
    finally:
        monitoring.unregister_event_duration_listener(count)
    assert compiled == [] and g.compiles == 8
    np.testing.assert_array_equal(g.generated[:, :24], np.array(GREEDY["tiny_llama"]["greedy"]))
    lazy = Generator(InferenceSession(_path("tiny_llama")), params)
    lazy.append_tokens(prompt)
    lazy.generate_until_done()
    np.testing.assert_array_equal(lazy.generated, g.generated)


def test_generator_calls_match_generate(sessions):
    """onnxruntime-genai's loop: append_tokens, generate_next_token until is_done (a call a
    new token, the first the prefill's), get_sequence (prompt and generated ids, no padding),
    get_next_tokens."""
    s = sessions("tiny_gpt2")
    ref = GREEDY["tiny_gpt2"]
    params = GeneratorParams(s)
    params.set_search_options(max_length=5 + 12, batch_size=2)
    g = Generator(s, params)
    g.append_tokens(ref["prompt"])
    steps = 0
    while not g.is_done():
        g.generate_next_token()
        steps += 1
    assert steps == 12
    np.testing.assert_array_equal(g.get_next_tokens(), np.array(ref["greedy"])[:, 11])
    for b in range(2):
        np.testing.assert_array_equal(
            g.get_sequence(b), np.array(ref["prompt"][b] + ref["greedy"][b][:12])
        )


def test_end_token_stops_a_sequence(sessions):
    ref = GREEDY["tiny_llama"]
    greedy = ref["greedy"][0]
    eos = greedy[3]
    first = greedy.index(eos)
    s = sessions("tiny_llama")
    got = generate(s, [ref["prompt"][0]], 20, eos_token_id=[eos, 96])
    np.testing.assert_array_equal(got[0], greedy[: first + 1])  # stops at the end token
    # In a batch the row that ended is padded while the other goes on.
    both = generate(s, ref["prompt"], 20, eos_token_id=eos, pad_token_id=0)
    row0 = both[0].tolist()
    assert row0[: first + 1] == greedy[: first + 1]
    assert set(row0[first + 1 :]) <= {0}
    # The prefill's token ends the row: no step is kept (the one queued before the host saw
    # that is dropped), as no step ran in a loop that checks first.
    got = generate(s, [ref["prompt"][0]], 20, eos_token_id=greedy[0])
    np.testing.assert_array_equal(got[0], greedy[:1])


def test_select_tokens_samples_the_truncated_distribution():
    logits = jax.numpy.array([[2.0, 1.5, 1.0, 0.5, 0.0, -1.0]])
    keys = jax.random.split(jax.random.PRNGKey(0), 6000)

    def freq(**kw):
        draw = jax.vmap(lambda k: select_tokens(logits, k, True, **kw)[0])(keys)
        return np.bincount(np.asarray(draw), minlength=6) / len(keys)

    def expected(keep, temperature=1.0):
        z = np.exp(np.asarray(logits[0]) / temperature) * keep
        return z / z.sum()

    p = np.exp(np.asarray(logits[0]))
    p /= p.sum()
    cases = [
        ({"top_k": 3, "top_p": 1.0, "temperature": 1.0}, expected(np.arange(6) < 3)),
        ({"top_k": 0, "top_p": 1.0, "temperature": 0.5}, expected(np.ones(6), 0.5)),
        # top_p 0.7: the first two hold 0.56 of the mass, the third takes it past 0.7.
        ({"top_k": 0, "top_p": 0.7, "temperature": 1.0}, expected(np.arange(6) < 3)),
        ({"top_k": 0, "top_p": 1.0, "temperature": 1.0}, p),
    ]
    assert p[:2].sum() < 0.7 < p[:3].sum()
    for kw, want in cases:
        got = freq(**kw)
        err = 4 * np.sqrt(want * (1 - want) / len(keys)) + 1e-9
        assert np.all(np.abs(got - want) <= err), (kw, got, want)
    assert int(select_tokens(logits, keys[0], True, 1, 1.0, 1.0)[0]) == 0
    assert int(select_tokens(logits, keys[0], False, 0, 1.0, 1.0)[0]) == 0


@pytest.mark.parametrize("count", [1, 16])
def test_cache_updated_in_place(sessions, count):
    """The decode step's donated cache buffer is updated in place, in a step and in a run of
    steps (``lax.fori_loop``): the compiled program copies no buffer of the cache's size (a
    write after the read made XLA copy each one every step)."""
    s = sessions("tiny_llama")
    g = Generator(s, GeneratorParams(s, max_length=40, batch_size=1))
    g.append_tokens([[1, 2, 3]])
    g.generate_next_token()
    fn, program = g._fns.steps_fn(1, 16, 0, count)
    state = g._state()
    text = fn.lower(g._fns.params_for(program), state, np.int32(g._length)).compile().as_text()
    # one buffer, its positions first, then every layer's keys and values: neither it nor a
    # layer's share is copied
    assert g._cache.shape[:2] == (g.capacity, 4)  # 2 layers, a key and a value each
    shapes = [g._cache.shape, g._cache.shape[:1] + g._cache.shape[2:]]
    full = ["f32[{}]".format(",".join(map(str, shape))) for shape in shapes]
    copies = re.findall(r"= (\S+) copy\(", text[text.index("ENTRY") :])
    assert not [c for c in copies if c.startswith(tuple(full))], copies


def test_roles_and_explain(sessions):
    roles = find_roles(sessions("tiny_llama"))
    assert roles.layers == 2 and roles.position_ids == "position_ids"
    assert roles.past[1] == ("past_key_values.1.key", "past_key_values.1.value")
    assert roles.present[0] == ("present.0.key", "present.0.value")
    assert roles.bucketable
    assert not find_roles(sessions("tiny_llama", positions=False)).bucketable


def test_generation_errors(sessions):
    from onnx import TensorProto, helper

    s = sessions("tiny_llama")
    nopos = sessions("tiny_llama", positions=False)
    bad = [
        (lambda: GeneratorParams(s, top_p=0.0), "top_p"),
        (lambda: GeneratorParams(s, temperature=0.0), "temperature"),
        (lambda: GeneratorParams(s, top_k=-1), "top_k"),
        (lambda: GeneratorParams(s, max_length=1), "max_length"),
        (lambda: GeneratorParams(s, buckets=[0, 8]), "buckets"),
        (lambda: GeneratorParams(s).set_search_options(beams=4), "beams"),
        (
            lambda: Generator(nopos, GeneratorParams(nopos, buckets=[16])).append_tokens([[1, 2]]),
            "buckets were asked for, but the step has no position_ids input",
        ),
        (lambda: generate(nopos, [[1, 2], [1, 2, 3]], 4), "position_ids"),
        (lambda: generate(s, [[1] * 10], 0), "max_length"),
        (lambda: generate(s, [[]], 4), "empty"),
        (lambda: Generator(s).generate_next_token(), "append_tokens"),
        (lambda: Generator(s, GeneratorParams(s, batch_size=2)).append_tokens([[1]]), "batch"),
        (lambda: InferenceSession(_path("tiny_llama"), buckets=[0, 16]), "buckets"),
        (lambda: InferenceSession(_path("tiny_llama"), buckets="16"), "buckets"),
    ]
    for call, text in bad:
        with pytest.raises(ValidationError, match=text):
            call()
    g = Generator(s, GeneratorParams(s, max_length=4))
    g.append_tokens([[1, 2]])
    with pytest.raises(ValidationError, match="leave nothing to generate within max_length 4"):
        g.append_tokens([[3, 4]])  # a later turn (test_generation_genai.py) too long
    g.generate_next_token()  # the prefill's token, shown
    assert not g.is_done() and len(g.get_sequence(0)) == 3
    g.generate_next_token()
    assert g.is_done()
    with pytest.raises(ValidationError, match="max_length 4 reached"):
        g.generate_next_token()
    # A model that is no decoder step: the missing role is named.
    x = helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, 4])
    m = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [1, 4])
    y = helper.make_tensor_value_info("logits", TensorProto.INT64, [1, 4])
    graph = helper.make_graph([helper.make_node("Add", ["input_ids", "attention_mask"], ["logits"])],
                              "g", [x, m], [y])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ValidationError, match="no past key / value inputs"):
        Generator(InferenceSession(model.SerializeToString()))


def test_generate_command(capsys):
    from dml_jax.cli import main

    ref = GREEDY["tiny_gpt2"]
    ids = [",".join(map(str, p)) for p in ref["prompt"]]
    code = main(["generate", _path("tiny_gpt2"), "--prompt-ids", ids[0], "--prompt-ids", ids[1],
                 "--max-new-tokens", "12"])  # fmt: skip
    out = capsys.readouterr()
    assert code == 0
    rows = [list(map(int, line.split(","))) for line in out.out.split()]
    assert rows == [g[:12] for g in ref["greedy"]]
    assert re.search(r"12 tokens a prompt: first token [\d.]+ ms, then [\d.]+ tokens/s", out.err)
    assert main(["generate", os.path.join(DATA, "missing.onnx"), "--prompt-ids", "1"]) == 1
    assert "missing.onnx" in capsys.readouterr().err


def test_decode_steps_drop_the_sessions_cublas_choice_unless_the_caller_made_it():
    """A decode step's products have a row a sequence, where XLA's own emitters outran cuBLAS
    (docs/onnx.md, "Generation"): the steps compile without the sessions' default
    ``xla_gpu_enable_triton_gemm: False`` nor its sibling products left unmerged, and keep
    either where the caller passed it."""
    from types import SimpleNamespace

    from dml_jax.onnx.decode_steps import DOT_MERGER
    from dml_jax.onnx.generation import TRITON_GEMM, DecodeSteps
    from dml_jax.onnx.program import GPU_COMPILER_OPTIONS

    assert TRITON_GEMM in GPU_COMPILER_OPTIONS and DOT_MERGER in GPU_COMPILER_OPTIONS
    defaults = {**GPU_COMPILER_OPTIONS, "xla_gpu_autotune_level": 2}
    steps = DecodeSteps.__new__(DecodeSteps)
    steps.session = SimpleNamespace(compiler_options=defaults, _compiler_options=None)
    assert steps.options() == {"xla_gpu_autotune_level": 2}
    chosen = {TRITON_GEMM: False}
    steps.session = SimpleNamespace(
        compiler_options={**defaults, **chosen}, _compiler_options=chosen
    )
    assert steps.options()[TRITON_GEMM] is False and DOT_MERGER not in steps.options()
    chosen = {DOT_MERGER: 0}
    steps.session = SimpleNamespace(
        compiler_options={**defaults, **chosen}, _compiler_options=chosen
    )
    assert steps.options() == {"xla_gpu_autotune_level": 2, DOT_MERGER: 0}


def test_int4_quantizer_of_the_decode_suite(tmp_path):
    """``decoders.quantize_int4`` (the decode suite's int4 export) writes MatMulNBits that
    onnxruntime reads as it writes them: the session agrees with onnxruntime on the quantized
    step, each weight is within half a quantization step of the float one, and the quantized
    logits follow the float model's."""
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper

    from dml_jax.bench import decoders

    src = os.path.join(DATA, "tiny_llama_step.onnx")
    out = str(tmp_path / "int4.onnx")
    model = onnx.load(src)
    matmuls = sum(
        n.op_type == "MatMul" and any(i.name == n.input[1] and len(i.dims) == 2
                                      for i in model.graph.initializer)
        for n in model.graph.node
    )  # fmt: skip
    assert decoders.quantize_int4(src, out) == matmuls > 0
    q = onnx.load(out)
    assert not any(n.op_type == "MatMul" and n.input[1].endswith("weight") for n in q.graph.node)
    inits = {i.name: numpy_helper.to_array(i) for i in q.graph.initializer}
    floats = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    node = next(n for n in q.graph.node if n.op_type == "MatMulNBits")
    k, n = (a.i for a in node.attribute if a.name in ("K", "N"))
    codes = inits[node.input[1]].reshape(n, -1)
    codes = np.stack([codes & 15, codes >> 4], -1).reshape(n, -1)[:, :k].astype(np.float32)
    scales = inits[node.input[2]].reshape(n, -1)
    zp = inits[node.input[3]].reshape(n, -1)
    zp = np.stack([zp & 15, zp >> 4], -1).reshape(n, -1)[:, : scales.shape[1]]
    per = np.repeat(np.arange(scales.shape[1]), 32)[:k]
    deq = (codes - zp[:, per]) * scales[:, per]
    w = floats[node.input[1].removesuffix("_Q4")].T
    assert np.all(np.abs(deq - w) <= scales[:, per] / 2 + 1e-6)
    rng = np.random.default_rng(5)
    feed = {"input_ids": rng.integers(1, 97, (2, 3)), "attention_mask": np.ones((2, 5), np.int64),
            "position_ids": np.array([[2, 3, 4]] * 2)}  # fmt: skip
    for i in InferenceSession(out).get_inputs():
        if i.name.startswith("past"):
            feed[i.name] = rng.standard_normal((2, i.shape[1], 2, i.shape[3])).astype(np.float32)
    got = InferenceSession(out).run(["logits"], feed)[0]
    want = ort.InferenceSession(out, providers=["CPUExecutionProvider"]).run(["logits"], feed)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    full = InferenceSession(src).run(["logits"], feed)[0]
    assert np.corrcoef(got.ravel(), full.ravel())[0, 1] > 0.9  # 4 bits of a K = 32 model
    # the decode suite's step bytes of the int4 export: its initializers as stored
    from dml_jax.bench.suites import decode

    stored = sum(a.nbytes for a in inits.values())
    assert decode._file_bytes(InferenceSession(out)) == stored


def test_int4_generation_with_folded_scales(tmp_path, monkeypatch):
    """The tiny LLaMA quantized to 4 bits (MatMulNBits; q/k/v and gate/up joined, their scales
    by JOINs): where the weights are arguments (a GPU's path, here the CPU past its compiled-in
    limit) the JOINs are computed once per session (``Program.folded``) and the generator's
    steps take them as arguments; the greedy tokens equal those of the session whose weights
    are compiled in (the JOINs computed in the program), and of onnxruntime's loop."""
    from dml_jax.bench.decoders import quantize_int4
    from dml_jax.onnx import session as session_module

    path = str(tmp_path / "int4.onnx")
    assert quantize_int4(_path("tiny_llama"), path) > 0
    prompt = [[5, 17, 3, 9, 22], [8, 1, 4, 60, 2]]

    def tokens(session):
        g = Generator(session, GeneratorParams(session, max_length=5 + 12, batch_size=2))
        g.append_tokens(np.array(prompt))
        g.generate_until_done()
        return np.asarray(g.generated)

    baked = tokens(InferenceSession(path))
    monkeypatch.setattr(session_module, "CPU_BAKED_WEIGHTS_MAX_BYTES", -1)
    s = InferenceSession(path)
    got = tokens(s)
    folded = [p for p in s._programs.values() if p.folded]
    assert folded and all(k in s._run_params(p) for p in folded for k in p.folded)
    np.testing.assert_array_equal(got, baked)
    np.testing.assert_array_equal(got, _ort_greedy(path, prompt, 12))


def test_run_pads_no_past_whose_present_is_not_a_concat(tmp_path):
    """A step whose presents are not ``Concat(past, new)`` (here each negated twice) shows
    no padding masked: ``run`` runs each past length exact by default, and buckets asked for
    are a ``ValidationError`` at the first call, as the Generator's are, never a padded past."""
    import onnx
    from onnx import helper

    m = onnx.load(_path("tiny_llama"))
    nodes = []
    for node in m.graph.node:
        nodes.append(node)
        for k, out in enumerate(node.output):
            if out.startswith("present"):  # each present negated twice
                node.output[k] = out + "_concat"
                nodes.append(helper.make_node("Neg", [out + "_concat"], [out + "_neg"]))
                nodes.append(helper.make_node("Neg", [out + "_neg"], [out]))
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    path = str(tmp_path / "other.onnx")
    onnx.save(m, path)
    rows = [[5, 17, 42]]
    want = _ort_greedy(path, rows, 6)
    s = InferenceSession(path)
    np.testing.assert_array_equal(_greedy_loop(s, rows, 6), want)
    assert len(s._programs) == 6 and "buckets: none, every past length exact" in s.explain()
    asked = InferenceSession(path, buckets=True)
    with pytest.raises(ValidationError, match="buckets were asked for"):
        _greedy_loop(asked, rows, 3)
    shapes = [[1, 1], [1, 4], [1, 1]] + [[1, 2, 3, 8]] * 4  # a step of the loop
    assert "buckets: refused (ONNX: buckets were asked for" in asked.explain(shapes)
    with pytest.raises(ValidationError, match="neither Concat"):
        Generator(asked, GeneratorParams(asked))
