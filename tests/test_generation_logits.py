"""The Generator's logits as onnxruntime-genai gives and takes them: ``get_logits`` (the model's
logits after each sequence's last token, from which the next one is chosen), ``set_logits``
(the next token chosen from the caller's logits), ``token_count``, the search options read
back and a model folder's type. Against onnxruntime-genai itself where it is installed, and
against onnxruntime's CPU provider running each whole sequence through the step with no past
(the logits at its last position)."""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")

from test_generation import _path  # this folder's
from test_generation_genai import BUILDER, _genai_folder

from dml_jax import ValidationError
from dml_jax.onnx import InferenceSession, Model
from dml_jax.onnx.generation import Generator, GeneratorParams, generate

PROMPTS = [[5, 9, 13, 2], [7, 1, 3, 8]]


@functools.cache
def _session(path: str) -> InferenceSession:
    """One session a file for this module's tests (its compiled steps shared between them)."""
    return InferenceSession(path)


def _forced(logits: np.ndarray, ids: list[int]) -> np.ndarray:
    """``logits`` with each row's token ``ids[row]`` made the most probable."""
    out = logits.copy()
    out[np.arange(len(ids)), 0, ids] = out.max() + 5.0
    return out


@pytest.mark.parametrize("model", ["concat", "builder"])
def test_logits_equal_onnxruntime_genai(tmp_path, model):
    """Each step's logits and token count equal onnxruntime-genai's, and a token forced through
    ``set_logits`` gives its sequences (an end token neither side meets)."""
    og = pytest.importorskip("onnxruntime_genai")
    path = BUILDER if model == "builder" else _path("tiny_llama")
    folder = _genai_folder(tmp_path, path, 96, model == "builder")
    seen = {}
    for name, lib in (("theirs", og), ("ours", None)):
        m = og.Model(folder) if lib else Model(folder)
        params = og.GeneratorParams(m) if lib else GeneratorParams(m)
        params.set_search_options(max_length=10, batch_size=2)
        g = og.Generator(m, params) if lib else Generator(m, params)
        g.append_tokens(np.array(PROMPTS, np.int32))
        steps = [(g.token_count(), g.get_logits().copy())]
        while not g.is_done():
            g.generate_next_token()
            if g.token_count() == 6:  # the next tokens forced: 7 and 11
                g.set_logits(_forced(g.get_logits(), [7, 11]))
            elif not g.is_done():
                steps.append((g.token_count(), g.get_logits().copy()))
        seen[name] = (steps, [list(map(int, g.get_sequence(i))) for i in range(2)])
    (theirs, want), (ours, got) = seen["theirs"], seen["ours"]
    assert got == want and [w[6] for w in want] == [7, 11] and len(want[0]) == 10
    assert [n for n, _ in ours] == [n for n, _ in theirs] == [4, 5, 7, 8, 9]
    for (_, a), (_, b) in zip(ours, theirs, strict=True):
        assert a.shape == b.shape == (2, 1, 97) and a.dtype == np.float32
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def _reference_logits(sequence: list[int]) -> np.ndarray:
    """onnxruntime's logits at the last position of ``sequence`` run whole with no past."""
    sess = ort.InferenceSession(_path("tiny_llama"), providers=["CPUExecutionProvider"])
    n = len(sequence)
    feeds = {"input_ids": np.array([sequence], np.int64),
             "attention_mask": np.ones((1, n), np.int64),
             "position_ids": np.arange(n, dtype=np.int64)[None]}  # fmt: skip
    for i in sess.get_inputs():
        if i.name.startswith("past"):
            feeds[i.name] = np.zeros((1, i.shape[1], 0, i.shape[3]), np.float32)
    return sess.run(["logits"], feeds)[0][0, -1]


@pytest.mark.parametrize("buckets", [None, False])
def test_get_logits_is_the_models_after_the_last_token(buckets):
    """After the prompt, each token, a later turn and a rewind, and at max_length (a step past
    the last token, whose choice is never shown), ``get_logits`` is the model's after the last
    token; asking for it changes no token generated, and twice runs no second step."""
    s = _session(_path("tiny_llama"))
    want = generate(s, [PROMPTS[0]], max_new_tokens=6, buckets=buckets)[0].tolist()
    g = Generator(s, GeneratorParams(s, max_length=10, buckets=buckets))
    g.append_tokens([PROMPTS[0]])
    for _ in range(7):
        sequence = list(map(int, g.get_sequence(0)))
        np.testing.assert_allclose(
            g.get_logits()[0, 0], _reference_logits(sequence), rtol=1e-4, atol=1e-5
        )
        if g.is_done():
            break
        g.generate_next_token()
    assert list(map(int, g.get_sequence(0))) == PROMPTS[0] + want and g.token_count() == 10
    assert g.is_done() and np.array_equal(g.get_logits(), g.get_logits())
    with pytest.raises(ValidationError, match="max_length 10 reached"):
        g.generate_next_token()
    with pytest.raises(ValidationError, match="max_length 10 reached"):
        g.set_logits(g.get_logits())
    g.rewind_to(6)
    np.testing.assert_allclose(
        g.get_logits()[0, 0], _reference_logits(sequence[:6]), rtol=1e-4, atol=1e-5
    )
    g.generate_next_token()
    g.append_tokens([4, 8])
    sequence = list(map(int, g.get_sequence(0)))
    assert sequence[6:] == [want[2], 4, 8]  # the rewound sequence's next token, then the turn
    np.testing.assert_allclose(
        g.get_logits()[0, 0], _reference_logits(sequence), rtol=1e-4, atol=1e-5
    )


def test_get_logits_after_an_end_token_keeps_the_generation_done():
    """A step ``get_logits`` runs after every row ended shows nothing: the generation stays
    done, its sequences those of a generation that never asked."""
    s = _session(_path("tiny_llama"))
    plain = generate(s, PROMPTS, max_new_tokens=12)
    # an end token both rows meet early: the one whose later first occurrence is earliest
    both = set(plain[0].tolist()) & set(plain[1].tolist())
    eos = min(both, key=lambda t: max(list(row).index(t) for row in plain.tolist()))
    want = generate(s, PROMPTS, max_new_tokens=12, eos_token_id=eos)
    g = Generator(s, GeneratorParams(s, max_length=16, batch_size=2, eos_token_id=eos))
    g.append_tokens(PROMPTS)
    while not g.is_done():
        g.generate_next_token()
        g.get_logits()
    assert g.is_done() and np.array_equal(g.generated, want)
    assert g.generated.shape[1] < 12


def test_set_logits_chooses_as_a_step_chooses():
    """The tokens chosen from set logits take the penalties first: a token of the prompt loses
    to a slightly less probable one under a repetition penalty; right after the prompt too."""
    s = _session(_path("tiny_llama"))
    for penalty, want in ((1.0, 9), (2.0, 20)):
        g = Generator(s, GeneratorParams(s, max_length=10, repetition_penalty=penalty))
        g.append_tokens([PROMPTS[0]])
        logits = np.zeros((1, 97), np.float32)
        logits[0, 9], logits[0, 20] = 3.0, 2.0  # 9 in the prompt: 3 / 2 < 2 with the penalty
        g.set_logits(logits)
        g.generate_next_token()
        assert int(g.get_next_tokens()[0]) == want
        reference = _reference_logits(PROMPTS[0] + [want])
        np.testing.assert_allclose(g.get_logits()[0, 0], reference, rtol=1e-4, atol=1e-5)


def test_logits_calls_are_checked():
    s = _session(_path("tiny_llama"))
    g = Generator(s, GeneratorParams(s, max_length=10))
    assert g.token_count() == 0
    with pytest.raises(ValidationError, match="append_tokens"):
        g.get_logits()
    g.append_tokens([PROMPTS[0]])
    with pytest.raises(ValidationError, match=r"shape \[1, 96\], not \[1, 1, 97\]"):
        g.set_logits(np.zeros((1, 96), np.float32))
    with pytest.raises(ValidationError, match="logits are not numbers"):
        g.set_logits([["a"] * 97])
    beams = Generator(s, GeneratorParams(s, max_length=10, num_beams=2))
    beams.append_tokens([PROMPTS[0]])
    for call in (beams.get_logits, lambda: beams.set_logits(np.zeros((2, 97), np.float32))):
        with pytest.raises(ValidationError, match="one row a sequence \\(num_beams 1, not 2\\)"):
            call()


def test_search_options_read_back_and_the_model_type(tmp_path):
    folder = _genai_folder(tmp_path, _path("tiny_llama"), 52, False)
    m = Model(folder)
    # the session's device: the default backend's (the suite runs on CPUs and on GPUs)
    device = "CUDA" if jax.default_backend() == "gpu" else "CPU"
    assert (m.type, m.device_type) == ("llama", device)
    p = GeneratorParams(m, top_k=5)
    options = p.get_search_options()
    assert options["max_length"] == 20 and options["eos_token_id"] == 52
    assert options["top_k"] == 5 and options["random_seed"] == 0 and "session" not in options
    q = GeneratorParams(m)
    q.set_search_options(**options)
    assert q == p
