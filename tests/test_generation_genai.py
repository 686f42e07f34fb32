"""The Generator as onnxruntime-genai's, against onnxruntime-genai itself where it is installed:
beam search, streamed tokens, greedy search, model folders, a chat's later turns.

Beam search (``GeneratorParams.num_beams`` > 1, ``dml_jax.onnx.beams``) against onnxruntime-genai's
own beam search on the same ONNX files (where onnxruntime-genai is installed: a model folder with
its genai_config.json written here), and against a beam search written here in NumPy from the
rules onnxruntime-genai and Hugging Face document, over onnxruntime's CPU steps: log-softmax plus
the beam's score, the ``2 * num_beams`` best candidates of a prompt in order, an end token among
the first ``num_beams`` a finished hypothesis scored over its length to ``length_penalty``, the
other candidates the next beams; a prompt done with ``num_beams`` hypotheses (and, unless
``early_stopping``, none better to come); its open beams hypotheses at the end. The models are
``test_generation.py``'s tiny decoders: their end tokens below are ids the models choose often,
so that hypotheses end early. Greedy search is compared with onnxruntime-genai's here too."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")

from test_generation import DATA, _path  # this folder's

from dml_jax import ValidationError
from dml_jax.cli import main
from dml_jax.onnx import InferenceSession
from dml_jax.onnx.generation import Generator, GeneratorParams, generate

BUILDER = f"{DATA}/tiny_llama_h16_builder_step.onnx"


def _log_softmax(x):
    x = np.asarray(x, np.float64)
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def _numpy_beam_search(path, prompt, max_length, beams, eos, penalty=1.0, early=True, count=1):
    """One prompt's beam search over onnxruntime's steps of the Concat decoder at ``path``: its
    ``count`` best sequences (prompt and generated, an end token not included)."""
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    pasts = [i for i in sess.get_inputs() if i.name.startswith("past")]
    seqs = [list(prompt) for _ in range(beams)]
    scores = np.array([0.0] + [-1e9] * (beams - 1))
    hyps: list[tuple[float, list[int]]] = []  # best first
    ids = np.array([prompt] * beams, np.int64)
    feed_past = {i.name: np.zeros((beams, i.shape[1], 0, i.shape[3]), np.float32) for i in pasts}
    done = False
    while len(seqs[0]) < max_length:
        n = len(seqs[0])
        feed = {"input_ids": ids, "attention_mask": np.ones((beams, n), np.int64),
                "position_ids": np.tile(np.arange(n - ids.shape[1], n), (beams, 1)), **feed_past}  # fmt: skip
        logits, *presents = sess.run(None, feed)
        total = (_log_softmax(logits[:, -1]) + scores[:, None]).ravel()
        order = np.argsort(-total, kind="stable")[: 2 * beams]
        chosen = []
        for j, flat in enumerate(order):
            beam, token = divmod(int(flat), logits.shape[-1])
            if token == eos:
                if j < beams:
                    score = total[flat] / n**penalty
                    if len(hyps) < beams or score > hyps[-1][0]:
                        at = sum(1 for s, _ in hyps if s >= score)
                        hyps.insert(at, (score, seqs[beam][:]))
                        del hyps[beams:]
            else:
                chosen.append((total[flat], beam, token))
            if len(chosen) == beams:
                break
        if len(hyps) == beams and (early or not hyps[-1][0] < total[order[0]] / n**penalty):
            done = True
            break
        seqs = [seqs[b] + [t] for _, b, t in chosen]
        scores = np.array([s for s, _, _ in chosen])
        picked = [b for _, b, _ in chosen]
        feed_past = {i.name: p[picked] for i, p in zip(pasts, presents)}
        ids = np.array([[t] for _, _, t in chosen], np.int64)
    if not done:
        for s, seq in zip(scores, seqs):
            score = s / len(seq) ** penalty
            if len(hyps) < beams or score > hyps[-1][0]:
                hyps.insert(sum(1 for h, _ in hyps if h >= score), (score, seq))
                del hyps[beams:]
    return [seq for _, seq in hyps[:count]]


def _ours(session, prompts, max_length, **options):
    n = options.get("num_return_sequences", 1)
    g = Generator(session, GeneratorParams(session, max_length=max_length,
                                           batch_size=len(prompts), **options))  # fmt: skip
    g.append_tokens(prompts)
    while not g.is_done():
        g.generate_next_token()
    return [list(map(int, g.get_sequence(i))) for i in range(len(prompts) * n)]


@pytest.mark.parametrize(
    "eos, beams, count, penalty, early, length",
    [(52, 4, 4, 1.0, True, 16), (44, 4, 2, 0.6, False, 20), (44, 4, 4, 2.0, True, 16),
     (60, 2, 2, 1.0, True, 20), (36, 5, 5, 2.0, False, 20)],
)  # fmt: skip
def test_beam_search_against_numpy_over_onnxruntime(eos, beams, count, penalty, early, length):
    """(The first and third cases rank hypotheses of different lengths: a length off by one
    changes their order.)"""
    path = _path("tiny_llama")
    prompt = [5, 9, 13, 2]
    want = _numpy_beam_search(path, prompt, length, beams, eos, penalty, early, count)
    s = InferenceSession(path)
    got = _ours(s, [prompt], length, num_beams=beams, num_return_sequences=count,
                eos_token_id=eos, length_penalty=penalty, early_stopping=early)  # fmt: skip
    assert got == want
    if eos in (52, 44):  # these end tokens finish hypotheses before max_length
        assert min(map(len, got)) < length


def test_prompts_of_different_lengths_are_searched_as_alone():
    """Left-padded prompts: each prompt's sequences are those it gets alone (its padding
    neither scored nor counted in its lengths), through ``generate_until_done``'s runs of
    steps compiled ahead; ``generate`` returns them after the prompts, padded with the pad
    id."""
    s = InferenceSession(_path("tiny_llama"))
    prompts = [[5, 9, 13, 2, 7, 7], [7, 1, 3], [40, 2, 2, 9, 11]]
    options = {
        "num_beams": 3,
        "num_return_sequences": 2,
        "eos_token_id": 52,
        "repetition_penalty": 1.2,
    }
    g = Generator(s, GeneratorParams(s, max_length=20, batch_size=3, **options))
    g.append_tokens(prompts)
    # the prefill runs the model once a prompt (its beams' rows alike until the first choice)
    (prefill,) = g._fns._prefills.values()
    assert prefill[1].imported.input_shapes[0][0] == 3
    assert g.compile_ahead() > 0  # the beams' steps, compiled ahead as any others
    compiled = g.compiles
    g.generate_until_done()
    assert g.compiles == compiled
    batch = [list(map(int, g.get_sequence(i))) for i in range(6)]
    alone = [seq for p in prompts for seq in _ours(s, [p], 20 - 6 + len(p), **options)]
    assert batch == alone
    assert len(set(map(len, batch))) > 1  # some ended early
    out = generate(s, prompts, max_new_tokens=14, **options)
    assert out.shape == (6, 14)
    for row, seq, p in zip(out, batch, np.repeat(np.arange(3), 2)):
        new = seq[len(prompts[p]) :]
        assert list(row[: len(new)]) == new and (row[len(new) :] == 0).all()


def test_beam_search_options_are_checked(tmp_path):
    s = InferenceSession(_path("tiny_llama"))
    bad = [
        ({"num_beams": 0}, "num_beams must be an int >= 1"),
        ({"num_beams": 2, "num_return_sequences": 3}, "num_return_sequences must be an int from 1"),
        ({"num_beams": 2, "do_sample": True}, "sampled beam search is not supported"),
        ({"num_beams": 2, "length_penalty": float("nan")}, "length_penalty must be a finite"),
        ({"num_beams": 2, "early_stopping": "never"}, "early_stopping must be True or False"),
        ({"top_p": "0.5"}, "top_p must be in"),  # not a number: the same error, no raw one
        ({"temperature": None}, "temperature must be > 0"),
    ]
    for options, message in bad:
        with pytest.raises(ValidationError, match=message):
            GeneratorParams(s, **options)
    p = GeneratorParams(s)
    p.set_search_options(num_beams=4, num_return_sequences=2, length_penalty=0.8,
                         early_stopping=False, diversity_penalty=0.0)  # fmt: skip
    assert (p.num_beams, p.num_return_sequences, p.length_penalty) == (4, 2, 0.8)
    with pytest.raises(ValidationError, match="group beam search is not supported"):
        p.set_search_options(diversity_penalty=0.5)


def test_generate_command_with_beams(capsys):
    """``dml-jax generate`` with the beam options: each prompt's sequences a line, the NumPy
    beam search's (the length penalty and the stopping rule reach it)."""
    args = ["generate", _path("tiny_llama"), "--prompt-ids", "5,9,13,2", "--max-new-tokens",
            "16", "--num-beams", "3", "--num-return-sequences", "2", "--eos-token-id", "44",
            "--length-penalty", "2.0", "--no-early-stopping"]  # fmt: skip
    assert main(args) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    # (with early stopping, or another penalty, these sequences differ)
    want = _numpy_beam_search(_path("tiny_llama"), [5, 9, 13, 2], 20, 3, 44, 2.0, False, 2)
    assert len(lines) == 2
    for line, seq in zip(lines, want):
        new = seq[4:]
        row = [int(t) for t in line.split(",")]
        assert row[: len(new)] == new and set(row[len(new) :]) <= {0}


# --- onnxruntime-genai itself --------------------------------------------------------------


def _genai_folder(tmp_path, model: str, eos: int, builder: bool) -> str:
    """A model folder onnxruntime-genai reads: the step and its genai_config.json."""
    folder = tmp_path / f"{'builder' if builder else 'concat'}_{eos}"
    folder.mkdir()
    shutil.copy(model, folder / "model.onnx")
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    past = [i for i in sess.get_inputs() if i.name.startswith("past")]
    inputs = {"input_ids": "input_ids", "attention_mask": "attention_mask",
              "past_key_names": "past_key_values.%d.key",
              "past_value_names": "past_key_values.%d.value"}  # fmt: skip
    if not builder:
        inputs["position_ids"] = "position_ids"
    kv, head = past[0].shape[1], past[0].shape[3]
    decoder = {
        "session_options": {"log_id": "dml_jax_tests", "provider_options": []},
        "filename": "model.onnx", "head_size": head, "hidden_size": 2 * kv * head,
        "inputs": inputs,
        "outputs": {"logits": "logits", "present_key_names": "present.%d.key",
                    "present_value_names": "present.%d.value"},
        "num_attention_heads": 2 * kv, "num_hidden_layers": len(past) // 2,
        "num_key_value_heads": kv,
    }  # fmt: skip
    vocab = sess.get_outputs()[0].shape[-1]
    config = {
        "model": {"bos_token_id": 1, "context_length": 64, "decoder": decoder,
                  "eos_token_id": eos, "pad_token_id": 0, "type": "llama", "vocab_size": vocab},
        "search": {"max_length": 20, "num_beams": 1, "past_present_share_buffer": builder},
    }  # fmt: skip
    (folder / "genai_config.json").write_text(json.dumps(config))
    return str(folder)


@pytest.mark.parametrize(
    "model, eos, prompts, max_length, options",
    [
        ("concat", 52, [[5, 9, 13, 2]], 20, {"num_beams": 3, "num_return_sequences": 3}),
        ("concat", 44, [[5, 9, 13, 2]], 20,
         {"num_beams": 4, "num_return_sequences": 2, "length_penalty": 0.6, "early_stopping": False}),
        ("concat", 52, [[5, 9, 13, 2], [7, 1, 3, 8]], 24,
         {"num_beams": 3, "num_return_sequences": 3, "repetition_penalty": 1.3, "min_length": 9,
              "no_repeat_ngram_size": 2}),
        ("concat", 44, [[5, 9, 13, 2], [7, 1, 3, 8]], 24,
         {"num_beams": 5, "num_return_sequences": 5, "early_stopping": False, "length_penalty": 2.0}),
        ("gpt2", 52, [[5, 9, 13, 2], [7, 1, 3, 8]], 24, {"num_beams": 2, "num_return_sequences": 2}),
        ("builder", 44, [[5, 9, 13, 2], [7, 1, 3, 8]], 22,
         {"num_beams": 3, "num_return_sequences": 2, "early_stopping": False}),
    ],
)  # fmt: skip
def test_beam_search_equals_onnxruntime_genai(tmp_path, model, eos, prompts, max_length, options):
    og = pytest.importorskip("onnxruntime_genai")
    path = {"concat": _path("tiny_llama"), "gpt2": _path("tiny_gpt2"), "builder": BUILDER}[model]
    genai = og.Model(_genai_folder(tmp_path, path, eos, model == "builder"))
    params = og.GeneratorParams(genai)
    params.set_search_options(max_length=max_length, batch_size=len(prompts), **options)
    g = og.Generator(genai, params)
    g.append_tokens(np.array(prompts, np.int32))
    while not g.is_done():
        g.generate_next_token()
    count = len(prompts) * options["num_return_sequences"]
    want = [list(map(int, g.get_sequence(i))) for i in range(count)]
    got = _ours(InferenceSession(path), prompts, max_length, eos_token_id=eos, **options)
    assert got == want


def _genai_sequences(folder, prompts, max_length, options) -> list[list[int]]:
    og = pytest.importorskip("onnxruntime_genai")
    params = og.GeneratorParams(og.Model(folder))
    params.set_search_options(max_length=max_length, batch_size=len(prompts), **options)
    g = og.Generator(og.Model(folder), params)
    g.append_tokens(np.array(prompts, np.int32))
    while not g.is_done():
        g.generate_next_token()
    count = len(prompts) * options.get("num_return_sequences", 1)
    return [list(map(int, g.get_sequence(i))) for i in range(count)]


def test_streamed_tokens_equal_onnxruntime_genai(tmp_path):
    """The loop onnxruntime-genai's examples stream by: after ``append_tokens`` the sequence is
    the prompt; each ``generate_next_token`` adds a token, read by ``get_next_tokens``."""
    og = pytest.importorskip("onnxruntime_genai")
    folder = _genai_folder(tmp_path, _path("tiny_llama"), 96, False)
    model = og.Model(folder)
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=12)
    theirs = og.Generator(model, params)
    s = InferenceSession(_path("tiny_llama"))
    ours = Generator(s, GeneratorParams(s, max_length=12))
    for g in (theirs, ours):
        g.append_tokens(np.array([[5, 9, 13, 2]], np.int32))
    assert list(ours.get_sequence(0)) == list(theirs.get_sequence(0)) == [5, 9, 13, 2]
    streamed: dict = {"theirs": [], "ours": []}
    for name, g in (("theirs", theirs), ("ours", ours)):
        while not g.is_done():
            g.generate_next_token()
            streamed[name].append(int(g.get_next_tokens()[0]))
    assert streamed["ours"] == streamed["theirs"] and len(streamed["ours"]) == 8


def test_greedy_search_equals_onnxruntime_genai(tmp_path):
    """Greedy search with the penalties (no row ending) gives onnxruntime-genai's sequences;
    with rows ending, onnxruntime-genai leaves out the step at which the last row ends (its end
    token never appended), which here is kept as Hugging Face's ``generate`` keeps it: the
    sequences are onnxruntime-genai's and that one step more."""
    pytest.importorskip("onnxruntime_genai")
    s = InferenceSession(_path("tiny_llama"))
    prompts = [[5, 9, 13, 2], [7, 1, 3, 8]]
    options = {"repetition_penalty": 1.3, "min_length": 9, "no_repeat_ngram_size": 2}
    folder = _genai_folder(tmp_path, _path("tiny_llama"), 52, False)
    want = _genai_sequences(folder, prompts, 24, options)
    assert _ours(s, prompts, 24, eos_token_id=52, **options) == want
    assert all(len(w) == 24 for w in want)
    folder = _genai_folder(tmp_path, _path("tiny_llama"), 44, False)
    want = _genai_sequences(folder, prompts, 24, {})
    got = _ours(s, prompts, 24, eos_token_id=44)
    assert [g[:-1] for g in got] == want and len(want[0]) < 23
    last = [g[-1] for g in got]
    assert sorted(last) == [0, 44]  # the row ending last: its end token; the other: the pad


# --- onnxruntime-genai's model folder ------------------------------------------------------


def test_a_genai_model_folder_runs_with_its_config(tmp_path, capsys):
    """``Model(folder)``: the step and genai_config.json onnxruntime-genai reads; its search
    section and end id are ``GeneratorParams(model)``'s defaults, values given over them, and
    the sequences those of onnxruntime-genai on the same folder (where installed), of the
    session with the same options and of ``dml-jax generate FOLDER``."""
    from dml_jax.onnx import Model

    folder = _genai_folder(tmp_path, _path("tiny_llama"), 52, False)
    config = json.loads((tmp_path / "concat_52" / "genai_config.json").read_text())
    config["search"].update(max_length=18, num_beams=3, num_return_sequences=2,
                            length_penalty=0.7, early_stopping=False, diversity_penalty=0.0,
                            past_present_share_buffer=False, random_seed=4)  # fmt: skip
    (tmp_path / "concat_52" / "genai_config.json").write_text(json.dumps(config))
    model = Model(folder)
    params = GeneratorParams(model)
    assert (params.max_length, params.num_beams, params.eos_token_id, params.seed) == (18, 3, 52, 4)
    assert GeneratorParams(model, num_beams=2).num_beams == 2  # given: over the config
    g = Generator(model, params)
    g.append_tokens([[5, 9, 13, 2]])
    g.generate_until_done()
    got = [list(map(int, g.get_sequence(i))) for i in range(2)]
    options = {"num_beams": 3, "num_return_sequences": 2, "length_penalty": 0.7,
               "early_stopping": False}  # fmt: skip
    assert got == _ours(InferenceSession(_path("tiny_llama")), [[5, 9, 13, 2]], 18,
                        eos_token_id=52, **options)  # fmt: skip
    # the command line on the folder: the config's beams and end id, the length given
    assert main(["generate", folder, "--prompt-ids", "5,9,13,2", "--max-new-tokens", "14"]) == 0
    assert g.generated.tolist() == [
        [int(t) for t in line.split(",")] for line in capsys.readouterr().out.split()
    ]
    try:
        import onnxruntime_genai  # noqa: F401
    except ImportError:
        return
    assert got == _genai_sequences(folder, [[5, 9, 13, 2]], 18, options)


def test_a_genai_model_folder_that_does_not_fit_is_one_error(tmp_path):
    from dml_jax.onnx import Model

    folder = _genai_folder(tmp_path, _path("tiny_llama"), 52, False)
    path = tmp_path / "concat_52" / "genai_config.json"
    good = json.loads(path.read_text())
    cases = [
        (lambda c: c["model"]["decoder"].pop("filename"), "model.decoder.filename must name"),
        (lambda c: c["search"].update(top_n=3), "search: unknown search option 'top_n'"),
        (lambda c: c["search"].update(num_beams=2, num_return_sequences=3),
         "search: num_return_sequences must be"),
        (lambda c: c["model"].update(eos_token_id="2"), "model.eos_token_id must be an int"),
        (lambda c: c["model"]["decoder"]["inputs"].update(input_ids="ids"),
         "model.decoder.inputs.input_ids is 'ids', but the step's input ids are 'input_ids'"),
        (lambda c: c["model"]["decoder"]["outputs"].update(present_key_names="k.%d"),
         "model.decoder.outputs.present_key_names 'k.%d' names"),
        (lambda c: c["model"].pop("decoder"), "model.decoder must be an object"),
    ]  # fmt: skip
    for change, message in cases:
        config = json.loads(json.dumps(good))
        change(config)
        path.write_text(json.dumps(config))
        with pytest.raises(ValidationError, match=re.escape(message)):
            Model(folder)
    path.write_text("{")
    with pytest.raises(ValidationError, match="genai_config.json: not readable as JSON"):
        Model(folder)
    with pytest.raises(ValidationError, match="no genai_config.json"):
        Model(tmp_path)


# --- a chat's turns: append_tokens after generating -----------------------------------------


def _turns(g, turns) -> list[int]:
    """``g`` through a chat: each turn's tokens appended, then that many tokens generated."""
    for tokens, count in turns:
        g.append_tokens(np.array([tokens], np.int32))
        for _ in range(count):
            g.generate_next_token()
    return [int(t) for t in g.get_sequence(0)]


# The other two pairings run in test_rewind_to_cuts_the_sequence_and_its_cache (the suite's time).
@pytest.mark.parametrize("model, buckets", [("concat", False), ("builder", None)])
def test_later_turns_continue_the_cache(tmp_path, model, buckets):
    """``append_tokens`` after tokens were generated (one sequence): the tokens follow the
    sequence shown, run through the model over the cache in one call (their count in a bucket
    where it fits, or exact), and the generation goes on: each turn's tokens are those of a
    fresh generation of the whole conversation so far, here and (where installed) in
    onnxruntime-genai. A turn right after the prompt, a long turn and a turn of one token are
    among them."""
    path = _path("tiny_llama") if model == "concat" else BUILDER
    s = InferenceSession(path)
    conversations = [
        [([5, 9, 13, 2], 5), ([7, 1, 3], 6)],
        [([5, 9, 13, 2, 8, 8, 1], 3), (list(range(3, 20)), 4), ([3], 5)],
        [([5], 0), ([7], 3), ([9, 9, 9], 2)],
    ]
    for turns in conversations if buckets is None else conversations[:1]:  # (exact: slower)
        got = _turns(Generator(s, GeneratorParams(s, max_length=60, buckets=buckets)), turns)
        assert len(got) == sum(len(t) + n for t, n in turns)
        start = len(turns[0][0])
        for k in range(1, len(turns)):  # each later turn against a fresh generation
            upto = sum(len(t) + n for t, n in turns[:k]) + len(turns[k][0])
            fresh = Generator(s, GeneratorParams(s, max_length=60, buckets=buckets))
            fresh.append_tokens([got[:upto]])
            for _ in range(turns[k][1]):
                fresh.generate_next_token()
            assert [int(t) for t in fresh.get_sequence(0)] == got[: upto + turns[k][1]]
        assert got[:start] == turns[0][0]
    try:
        import onnxruntime_genai  # noqa: F401
    except ImportError:
        return
    # onnxruntime-genai's fresh generation of the first conversation's last turn (its own
    # later turns differ from that on the GroupQueryAttention step: docs/semantics.md)
    folder = _genai_folder(tmp_path, path, 96, model == "builder")
    got = _turns(Generator(s, GeneratorParams(s, max_length=60, buckets=buckets)),
                 conversations[0])  # fmt: skip
    assert _genai_sequences(folder, [got[:12]], 18, {}) == [got]


@pytest.mark.parametrize("model, eos", [("concat", 52), ("builder", 93)])
def test_a_turn_after_an_end_token_continues_the_cache(model, eos):
    """A reply generated by ``generate_until_done`` until its end token (the runs of steps
    queued past it dropped: their cache positions and pending keys too), then the next
    turn: the conversation a fresh generation of it gives."""
    s = InferenceSession(_path("tiny_llama") if model == "concat" else BUILDER)
    g = Generator(s, GeneratorParams(s, max_length=48, eos_token_id=eos))
    g.append_tokens([[5, 9, 13, 2]])
    g.generate_until_done()
    reply = [int(t) for t in g.get_sequence(0)]
    assert reply[-1] == eos and len(reply) < 10  # ended early, mid-run
    g.append_tokens([[7, 1, 3]])
    for _ in range(6):
        g.generate_next_token()
    fresh = Generator(s, GeneratorParams(s, max_length=48, eos_token_id=eos))
    fresh.append_tokens([reply + [7, 1, 3]])
    for _ in range(6):
        fresh.generate_next_token()
    assert g.get_sequence(0).tolist() == fresh.get_sequence(0).tolist()


@pytest.mark.parametrize("model, buckets", [("concat", None), ("builder", False)])
def test_rewind_to_cuts_the_sequence_and_its_cache(model, buckets):
    """``rewind_to(n)``: the sequence's first n tokens stay and generation goes on from them,
    as a fresh generation of those tokens does: back to a system prompt and a new turn
    appended (onnxruntime-genai's cached system prompt), back into the generated tokens and
    the next ones generated, back to the first token."""
    s = InferenceSession(_path("tiny_llama") if model == "concat" else BUILDER)

    def fresh(tokens, count):
        g = Generator(s, GeneratorParams(s, max_length=40, buckets=buckets))
        g.append_tokens([tokens])
        for _ in range(count):
            g.generate_next_token()
        return [int(t) for t in g.get_sequence(0)]

    g = Generator(s, GeneratorParams(s, max_length=40, buckets=buckets))
    current = _turns(g, [([5, 9, 13, 2], 4)])  # a system prompt, then a reply
    for keep, turn, count in [(4, [7, 1, 3], 5), (6, [], 3), (1, [8], 2), (3, [], 4)]:
        g.rewind_to(keep)
        assert [int(t) for t in g.get_sequence(0)] == current[:keep]
        if turn:
            g.append_tokens([turn])
        for _ in range(count):
            g.generate_next_token()
        got = [int(t) for t in g.get_sequence(0)]
        assert got == fresh(current[:keep] + turn, count)
        current = got
    with pytest.raises(ValidationError, match=r"rewind_to\(0\)"):
        g.rewind_to(0)
    with pytest.raises(ValidationError, match="the sequence holds"):
        g.rewind_to(99)


def test_later_turns_are_for_one_sequence():
    s = InferenceSession(_path("tiny_llama"))
    g = Generator(s, GeneratorParams(s, max_length=12, batch_size=2))
    g.append_tokens([[5, 9], [7, 1]])
    with pytest.raises(ValidationError, match="takes one sequence"):
        g.append_tokens([[3], [4]])
    g = Generator(s, GeneratorParams(s, max_length=12))
    g.append_tokens([[5, 9, 13, 2]])
    with pytest.raises(ValidationError, match="leave nothing to generate within max_length 12"):
        g.append_tokens([[1] * 8])
    with pytest.raises(ValidationError, match="no tokens to append"):
        g.append_tokens([])
