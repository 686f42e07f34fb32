"""Speculative decoding by n-grams (``GeneratorParams.ngram_size`` / ``max_draft_tokens``,
onnxruntime-genai's speculative options; ``dml_jax.onnx.speculative``): the tokens are those
of generation without drafts (greedy, sampled with the same seed, with the penalties and end
tokens; Concat and GroupQueryAttention steps, bucketed and exact), streamed a token a call,
through a later turn and a rewind, and onnxruntime-genai's own n-gram decoding's; the drafts
are those the rule gives, and a round that accepts drafts adds them all in one call of the
model."""

from __future__ import annotations

import functools
import re

import jax.numpy as jnp
import numpy as np
import pytest
from test_generation import _path  # this folder's
from test_generation_genai import BUILDER, _genai_folder

from dml_jax import ValidationError
from dml_jax.cli import main
from dml_jax.onnx import InferenceSession, Model
from dml_jax.onnx.generation import Generator, GeneratorParams
from dml_jax.onnx.speculative import ngram_drafts

PROMPT = [5, 9, 13, 2, 5, 9]  # a repeated pair: a lookup finds drafts from the first tokens


@functools.cache
def _session(path: str) -> InferenceSession:
    """One session a file for this module's tests (its compiled steps shared between them)."""
    return InferenceSession(path)


def _sequence(s, max_length=40, prompt=PROMPT, **options):
    g = Generator(s, GeneratorParams(s, max_length=max_length, **options))
    g.append_tokens([prompt])
    g.generate_until_done()
    return [int(t) for t in g.get_sequence(0)], g.get_speculative_stats()


def _drafts(sequence, n, count, start=0, width=16):
    """``ngram_drafts`` over ``sequence`` put at column ``start`` of a row of ``width``."""
    row = np.full(width, 99, np.int32)  # (the row's other columns never match nor draft)
    row[start : start + len(sequence)] = sequence
    drafts, known = ngram_drafts(jnp.asarray(row), start, start + len(sequence), n, count)
    drafts, known = np.asarray(drafts), int(known)
    assert drafts.shape == (count,) and not drafts[known:].any()
    return drafts[:known].tolist()


def test_ngram_drafts():
    assert _drafts([1, 2, 3, 4, 1, 2], 2, 4) == [3, 4, 1, 2]
    assert _drafts([1, 2, 3, 4, 1, 2], 2, 1) == [3]
    assert _drafts([1, 2, 3, 4, 1, 2], 3, 4) == []
    assert _drafts([7, 1, 2, 8, 1, 2, 9, 1, 2], 2, 3) == [9, 1, 2]  # the latest occurrence
    assert _drafts([7, 1, 2, 8, 1, 2, 9, 1, 2], 2, 3, start=5) == [9, 1, 2]
    assert _drafts([1, 2, 1, 2], 2, 4) == [1, 2]  # an occurrence overlapping the suffix
    assert _drafts([1, 2, 3, 2], 2, 4) == [] and _drafts([3, 3], 2, 4) == []
    assert _drafts([3, 3, 3], 2, 4) == [3] and _drafts([3], 2, 4) == []
    # the tokens before ``start`` are not the sequence's (a prompt's padding)
    row = jnp.asarray([1, 2, 5, 1, 2, 0, 0, 0], jnp.int32)
    assert int(ngram_drafts(row, 3, 5, 2, 2)[1]) == 0
    assert np.asarray(ngram_drafts(row, 0, 5, 2, 2)[0]).tolist() == [5, 1]


@pytest.mark.parametrize(
    "model, length, options",
    [
        ("tiny_llama", 40, {}),
        ("tiny_llama", 40, {"do_sample": True, "top_k": 5, "seed": 3}),
        ("tiny_llama", 12, {"buckets": False}),  # a program a length: a short generation
        ("builder", 40, {"repetition_penalty": 1.2, "min_length": 12, "eos_token_id": 44,
                         "no_repeat_ngram_size": 4}),
    ],
)  # fmt: skip
def test_tokens_equal_generation_without_drafts(model, length, options):
    s = _session(BUILDER if model == "builder" else _path(model))
    want, _ = _sequence(s, length, **options)
    got, stats = _sequence(s, length, ngram_size=2, max_draft_tokens=4, **options)
    assert got == want
    assert stats["tokens_emitted"] == len(want) - len(PROMPT) - 1  # the prefill's apart
    assert stats["rounds"] + stats["standard_fallback_steps"] == stats["target_forward_passes"]
    if model == "tiny_llama" and not options.get("do_sample"):
        # greedy: drafts accepted, fewer calls of the model than tokens
        assert stats["draft_tokens_accepted"] > 0
        assert stats["target_forward_passes"] < stats["tokens_emitted"]


def test_an_end_token_among_the_drafts_ends_the_sequence():
    """The prompt holds the loop the model falls into, its end token among the drafts: the
    sequence ends at it as without drafts (no token after it)."""
    s = _session(_path("tiny_llama"))
    prompt = [5, 9, 13, 2, 5, 9, 24, 44, 52, 44, 52, 52, 52]
    seen = []
    for ngram in (0, 2):
        g = Generator(s, GeneratorParams(s, max_length=40, eos_token_id=52, ngram_size=ngram))
        g.append_tokens([prompt])
        g.generate_until_done()
        done = g.is_done()
        g.generate_next_token()  # after the end: the pad id, fed to the model as a step does
        g.append_tokens([4, 8])
        for _ in range(4):
            g.generate_next_token()
        seen.append(([int(t) for t in g.get_sequence(0)], done, g.get_speculative_stats()))
    (want, done, _), (got, done_2, stats) = seen
    assert got == want and done and done_2 and len(want) < 40
    assert want[len(want) - 8 : len(want) - 4] == [52, 0, 4, 8]
    assert stats["draft_tokens_proposed"] > 0  # (the end token itself one a round chose)


def test_streamed_turns_and_rewinds_as_without_drafts():
    """A token a ``generate_next_token`` (a round's tokens waiting to be shown); a turn and a
    rewind while tokens wait drop them, and go on as generation without drafts does."""
    s = _session(_path("tiny_llama"))
    prompt = [5, 9, 13, 2, 5, 9, 24, 44, 24, 44, 52, 44, 52]
    runs = []
    for ngram in (0, 2):
        g = Generator(s, GeneratorParams(s, max_length=40, ngram_size=ngram, max_draft_tokens=4))
        g.append_tokens([prompt])
        shown = []
        for _ in range(2):
            g.generate_next_token()
            shown.append(len(g.get_sequence(0)))
        if ngram:  # a round took 3 tokens: 2 wait unshown, which the turn drops
            assert g._length - g._shown == 2
        g.append_tokens([4, 8, 4])
        for _ in range(6):
            g.generate_next_token()
            shown.append(len(g.get_sequence(0)))
        g.rewind_to(20)
        while not g.is_done():
            g.generate_next_token()
        runs.append((shown, [int(t) for t in g.get_sequence(0)], g.get_speculative_stats()))
    (shown, want, _), (shown_2, got, stats) = runs
    assert shown == shown_2 == [14, 15, *range(19, 25)] and got == want and len(got) == 40
    assert stats["draft_tokens_accepted"] > 0


def test_equals_onnxruntime_genai_ngram_decoding(tmp_path):
    og = pytest.importorskip("onnxruntime_genai")
    folder = _genai_folder(tmp_path, _path("tiny_llama"), 96, False)
    out = []
    for lib in (og, None):
        m = og.Model(folder) if lib else Model(folder)
        params = og.GeneratorParams(m) if lib else GeneratorParams(m)
        params.set_search_options(max_length=40)
        params.set_speculative_options(ngram_size=2, max_draft_tokens=4)
        g = og.Generator(m, params) if lib else Generator(m, params)
        g.append_tokens(np.array([PROMPT], np.int32))
        while not g.is_done():
            g.generate_next_token()
        out.append([int(t) for t in g.get_sequence(0)])
        assert g.get_speculative_stats()["draft_tokens_accepted"] > 0
    assert out[0] == out[1] and len(out[0]) == 40


def test_speculative_options_are_checked():
    s = _session(_path("tiny_llama"))
    p = GeneratorParams(s)
    assert p.get_speculative_options() == {
        "ngram_size": 0, "max_draft_tokens": 4, "ngram_chained_lookup": False,
        "min_adaptive_k": 0, "cooldown": False,
    }  # fmt: skip
    p.set_speculative_options(ngram_size=3, max_draft_tokens=8, cooldown=False)
    assert (p.ngram_size, p.max_draft_tokens) == (3, 8)
    assert "ngram_size" not in p.get_search_options()
    for bad, match in [
        ({"ngram_size": 1}, "ngram_size must be 0 or an int from 2 to 16, got 1"),
        ({"ngram_size": 17}, "ngram_size must be 0 or an int from 2 to 16"),
        ({"max_draft_tokens": 0}, "max_draft_tokens must be an int from 1 to 16, got 0"),
        ({"cooldown": True}, "speculative option cooldown=True is not supported"),
        ({"draft_model": "x"}, "unknown speculative option 'draft_model'"),
    ]:
        with pytest.raises(ValidationError, match=match):
            GeneratorParams(s).set_speculative_options(**bad)
    with pytest.raises(ValidationError, match="unknown search option 'ngram_size'"):
        GeneratorParams(s).set_search_options(ngram_size=2)
    with pytest.raises(ValidationError, match="takes one sequence: batch_size 1 and num_beams 1"):
        GeneratorParams(s, batch_size=2, ngram_size=2)
    with pytest.raises(ValidationError, match="takes one sequence"):
        GeneratorParams(s, num_beams=2, ngram_size=2)
    g = Generator(s, GeneratorParams(s, max_length=12, ngram_size=2))
    g.append_tokens([PROMPT])
    with pytest.raises(ValidationError, match="get_logits with speculative decoding"):
        g.get_logits()


def test_generate_command_with_ngram_drafts(capsys):
    """``dml-jax generate --ngram-size``: the tokens of generation without drafts, and the
    drafts' counts on stderr."""
    s = _session(_path("tiny_llama"))
    want, _ = _sequence(s, len(PROMPT) + 16)
    args = ["generate", _path("tiny_llama"), "--prompt-ids", ",".join(map(str, PROMPT)),
            "--max-new-tokens", "16", "--ngram-size", "2", "--max-draft-tokens", "3"]  # fmt: skip
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert [int(t) for t in out.strip().split(",")] == want[len(PROMPT) :]
    accepted, proposed = map(int, re.search(r"speculative: (\d+) of (\d+) drafts", err).groups())
    assert 0 < accepted <= proposed
    assert main(args[:-4] + ["--ngram-size", "1"]) == 1
    assert "ngram_size must be 0 or an int from 2 to 16" in capsys.readouterr().err


def test_compile_ahead_compiles_every_rounds_program():
    s = _session(_path("tiny_llama"))
    g = Generator(s, GeneratorParams(s, max_length=40, ngram_size=3, max_draft_tokens=2))
    g.append_tokens([PROMPT])
    assert g.compile_ahead() > 0 and g.compile_ahead() == 0
    compiled = g.compiles
    g.generate_until_done()
    assert g.compiles == compiled and len(g.get_sequence(0)) == 40
    assert "speculative decoding: drafts from the last 3 tokens'" in g.explain()
