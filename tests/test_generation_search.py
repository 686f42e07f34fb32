"""onnxruntime-genai's search options beyond greedy and sampled choice (``GeneratorParams``'s
``repetition_penalty``, ``min_length`` and ``no_repeat_ngram_size``, ``set_search_options``'
names), against onnxruntime's greedy loop with the same rules applied to its logits in NumPy, as
onnxruntime-genai and Hugging Face define them: a token already in the row has its logit divided
by the penalty where positive and multiplied by it where not; a row shorter than ``min_length``
does not end; no n-gram occurs twice.
The models are ``test_generation.py``'s tiny decoders."""

from __future__ import annotations

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")

from test_generation import GREEDY, _greedy_loop, _path  # this folder's
from test_generation_forms import _gqa_decoder, _ort_gqa_loop

from dml_jax import ValidationError
from dml_jax.onnx import InferenceSession
from dml_jax.onnx.generation import Generator, GeneratorParams, generate


def _penalty(p: float):
    """The repetition penalty's rule in NumPy, over each row's real tokens so far."""

    def process(logits, history):
        out = np.array(logits, np.float32)
        for b, row in enumerate(history):
            seen = np.unique(row)
            x = out[b, seen]
            out[b, seen] = np.where(x > 0, x / np.float32(p), x * np.float32(p))
        return out

    return process


def _no_end_before(min_length: int, eos: list[int]):
    """The minimum length's rule in NumPy: end tokens out while a row is shorter."""

    def process(logits, history):
        out = np.array(logits, np.float32)
        for b, row in enumerate(history):
            if len(row) < min_length:
                out[b, eos] = -np.inf
        return out

    return process


def _no_repeat(n: int):
    """The repeated n-grams' rule in NumPy: the token after each earlier occurrence of the
    row's last n - 1 tokens is out (none while the row holds fewer than n - 1)."""

    def process(logits, history):
        out = np.array(logits, np.float32)
        for b, row in enumerate(history):
            if len(row) + 1 < n:
                continue
            tail = row[len(row) - n + 1 :] if n > 1 else []
            for i in range(len(row) - n + 1):
                if row[i : i + n - 1] == tail:
                    out[b, row[i + n - 1]] = -np.inf
        return out

    return process


@pytest.fixture(scope="module")
def llama():
    return InferenceSession(_path("tiny_llama"))


@pytest.fixture(scope="module")
def onnxruntime_llama():
    return ort.InferenceSession(_path("tiny_llama"), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("penalty", [1.5, 0.7])
def test_repetition_penalty_against_onnxruntime(llama, onnxruntime_llama, penalty):
    """Greedy with the penalty (discouraging, and below 1 encouraging repeats) gives
    onnxruntime's loop's tokens with the rule applied in NumPy, and not the plain greedy ones
    (the tiny model repeats itself: the penalty changes its choices)."""
    rows = GREEDY["tiny_llama"]["prompt"]
    want = _greedy_loop(onnxruntime_llama, rows, 24, process=_penalty(penalty))
    assert not np.array_equal(want, np.array(GREEDY["tiny_llama"]["greedy"]))
    np.testing.assert_array_equal(generate(llama, rows, 24, repetition_penalty=penalty), want)
    # one dispatch a step, and runs of steps, alike
    got = generate(llama, rows, 24, repetition_penalty=penalty, steps_per_dispatch=5)
    np.testing.assert_array_equal(got, want)


def test_repetition_penalty_leaves_the_left_padding_out(llama, onnxruntime_llama):
    """Prompts of different lengths: each row's tokens are its own prompt's alone (the pad
    id in the shorter prompt's padding is no token of that row), a pad id that the model
    would choose."""
    rows = [[63, 88, 49, 59, 94, 12, 40], [71, 61, 53]]
    pad = int(GREEDY["tiny_llama"]["greedy"][1][0])  # row 1's first greedy token
    want = _greedy_loop(onnxruntime_llama, rows, 16, process=_penalty(1.8))
    got = generate(llama, rows, 16, repetition_penalty=1.8, pad_token_id=pad)
    np.testing.assert_array_equal(got, want)
    for b, row in enumerate(rows):
        alone = generate(llama, [row], 16, repetition_penalty=1.8, pad_token_id=pad)
        np.testing.assert_array_equal(alone[0], want[b])


def test_repetition_penalty_over_a_group_query_attention_step():
    """The model builder's form (its cache each entry's positions first, its mask counting
    them) with prompts of different lengths: onnxruntime's loop with the rule in NumPy."""
    model = _gqa_decoder().SerializeToString()
    rows = [[5, 17, 42], [3, 9, 11, 30, 2, 8, 44]]
    want = _ort_gqa_loop(model, rows, 20, process=_penalty(1.6))
    assert not np.array_equal(want, _ort_gqa_loop(model, rows, 20))
    got = generate(InferenceSession(model), rows, 20, repetition_penalty=1.6)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_no_repeat_ngram_size_against_onnxruntime(llama, onnxruntime_llama, n):
    """No n-gram of ``no_repeat_ngram_size`` tokens twice in a row (prompt included): the
    tokens of onnxruntime's loop with the rule in NumPy, prompts of different lengths."""
    rows = [[63, 88, 49, 59, 94, 12, 40], [71, 61, 53]]
    steps = 14 if n == 1 else 20
    want = _greedy_loop(onnxruntime_llama, rows, steps, process=_no_repeat(n))
    assert not np.array_equal(want, _greedy_loop(onnxruntime_llama, rows, steps))
    # the pad id a token the model chooses: unwritten columns (the pad id) are no n-gram's
    got = generate(llama, rows, steps, no_repeat_ngram_size=n, steps_per_dispatch=3,
                   pad_token_id=int(want[0, 0]))  # fmt: skip
    np.testing.assert_array_equal(got, want)
    for row, new in zip(rows, got.tolist()):  # and so no n-gram occurs twice
        seq = row + new
        grams = [tuple(seq[i : i + n]) for i in range(len(seq) - n + 1)]
        assert len(grams) == len(set(grams))


def test_a_row_with_every_token_banned_takes_token_0(llama, onnxruntime_llama):
    """Unigrams banned (``no_repeat_ngram_size`` 1) over the tiny model's 97 tokens: once the
    row holds every token, each further choice is token 0 (the argmax of -inf everywhere, as
    the NumPy loop's; docs/semantics.md), greedy and sampled alike."""
    prompt = GREEDY["tiny_llama"]["prompt"][0]
    steps = 97 - len(prompt) + 6
    want = _greedy_loop(onnxruntime_llama, [prompt], steps, process=_no_repeat(1))[0]
    assert sorted(prompt + want[: 97 - len(prompt)].tolist()) == list(range(97))
    assert (want[97 - len(prompt) :] == 0).all()
    got = generate(llama, [prompt], steps, no_repeat_ngram_size=1, steps_per_dispatch=32)
    np.testing.assert_array_equal(got[0], want)
    sampled = generate(llama, [prompt], steps, no_repeat_ngram_size=1, do_sample=True, seed=3)
    assert sorted(prompt + sampled[0, : 97 - len(prompt)].tolist()) == list(range(97))
    assert (sampled[0, 97 - len(prompt) :] == 0).all()


def test_min_length_keeps_end_tokens_out(llama, onnxruntime_llama):
    """An end token the model chooses early is not chosen while the row is shorter than
    ``min_length`` (prompt included), then ends it."""
    rows = [GREEDY["tiny_llama"]["prompt"][0]]
    greedy = GREEDY["tiny_llama"]["greedy"][0]
    eos = greedy[1]  # chosen at the second step
    want = _greedy_loop(onnxruntime_llama, rows, 24, process=_no_end_before(12, [eos]))[0]
    assert eos not in want[:7].tolist()  # 5 prompt tokens + 7 chosen = 12 before any end
    got = generate(llama, rows, 24, eos_token_id=eos, min_length=12)[0].tolist()
    end = want.tolist().index(eos) if eos in want.tolist() else len(want)
    assert got == want[: end + 1].tolist()
    # without it the row ends at the second token
    assert generate(llama, rows, 24, eos_token_id=eos)[0].tolist() == greedy[:2]


def test_search_options_by_onnxruntime_genai_names(llama):
    """``set_search_options`` takes onnxruntime-genai's names: ``random_seed`` for the seed,
    beam search's options, ``past_present_share_buffer``; bad values (more sequences than
    beams, a diversity penalty, sampled beams) and unknown names are one ValidationError
    each."""
    p = GeneratorParams(llama, max_length=20)
    p.set_search_options(random_seed=7, num_beams=1, num_return_sequences=1,
                         past_present_share_buffer=True, repetition_penalty=1.2,
                         min_length=3, do_sample=True, top_k=5, diversity_penalty=0.0,
                         length_penalty=1.4, early_stopping=True)  # fmt: skip
    assert (p.seed, p.repetition_penalty, p.min_length) == (7, 1.2, 3)
    sampled = []
    for seed in (7, 7, 8):
        q = GeneratorParams(llama, max_length=20, do_sample=True, top_k=5, seed=seed)
        g = Generator(llama, q)
        g.append_tokens([[63, 88, 49]])
        g.generate_until_done()
        sampled.append(g.get_sequence(0).tolist())
    assert sampled[0] == sampled[1] != sampled[2]  # the seed is the sampling's
    g = Generator(llama, p)  # the options set by name, as the same options given at once
    g.append_tokens([[63, 88, 49]])
    g.generate_until_done()
    same = generate(llama, [[63, 88, 49]], 17, seed=7, repetition_penalty=1.2, min_length=3,
                    do_sample=True, top_k=5)  # fmt: skip
    np.testing.assert_array_equal(g.generated, same)
    for bad, match in [
        ({"num_return_sequences": 2}, "num_return_sequences must be an int from 1 to num_beams"),
        ({"diversity_penalty": 0.5}, "group beam search is not supported"),
        ({"num_beams": 2, "do_sample": True}, "sampled beam search is not supported"),
        ({"no_repeat_ngram_size": -2}, "no_repeat_ngram_size must be"),
        ({"repetition_penalty": 0.0}, "repetition_penalty must be"),
        ({"repetition_penalty": float("nan")}, "repetition_penalty must be"),
        ({"min_length": -1}, "min_length must be"),
        ({"top_n": 3}, "unknown search option 'top_n'"),
    ]:
        with pytest.raises(ValidationError, match=match):
            GeneratorParams(llama, max_length=20).set_search_options(**bad)


def test_generate_command_takes_the_search_options(llama, capsys):
    """``dml-jax generate --repetition-penalty P --min-length N`` prints the tokens those
    options give; a bad value is one error line."""
    from dml_jax.cli import main

    prompt = GREEDY["tiny_llama"]["prompt"][0]
    eos = GREEDY["tiny_llama"]["greedy"][0][1]
    argv = ["generate", _path("tiny_llama"), "--prompt-ids", ",".join(map(str, prompt)),
            "--max-new-tokens", "10", "--eos-token-id", str(eos)]  # fmt: skip
    assert main([*argv, "--repetition-penalty", "1.5", "--min-length", "9",
                 "--no-repeat-ngram-size", "2"]) == 0  # fmt: skip
    got = [int(t) for t in capsys.readouterr().out.split(",")]
    want = generate(llama, [prompt], 10, eos_token_id=eos, repetition_penalty=1.5, min_length=9,
                    no_repeat_ngram_size=2)  # fmt: skip
    assert got == want[0].tolist()
    assert main([*argv, "--repetition-penalty", "-1"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and "repetition_penalty must be" in err[-1]
