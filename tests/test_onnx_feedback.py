"""Presents fed back as pasts to ``run`` (``dml_jax.onnx.feedback``): the onnxruntime-style
greedy loop with the session's device copies of its last presents taken in place of the fed
arrays, against the same loop without them and against onnxruntime's; forced on for this CPU
(on which sessions do not keep their presents), with ``run``'s outputs packed and not."""

from __future__ import annotations

import os

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")

from dml_jax.onnx import InferenceSession, feedback, fetch

DECODER = os.path.join(os.path.dirname(__file__), "data", "decoders", "tiny_llama_step.onnx")


def _greedy(sess, prompt: np.ndarray, steps: int, copy_pasts: bool = False):
    """``run`` once a token, the presents fed back as pasts (copies of them where told)."""
    batch, n = prompt.shape
    pasts = [i for i in sess.get_inputs() if i.name.startswith("past")]
    outputs = [o.name for o in sess.get_outputs()]
    feed = {
        "input_ids": prompt.astype(np.int64),
        "attention_mask": np.ones((batch, n), np.int64),
        "position_ids": np.broadcast_to(np.arange(n, dtype=np.int64), (batch, n)).copy(),
    }
    for i in pasts:
        feed[i.name] = np.zeros((batch, i.shape[1], 0, i.shape[3]), np.float32)
    tokens, total = [], n
    for _ in range(steps):
        out = dict(zip(outputs, sess.run(None, feed)))
        x = out["logits"][:, -1].argmax(-1)[:, None].astype(np.int64)
        tokens.append(x)
        total += 1
        feed = {
            "input_ids": x,
            "attention_mask": np.ones((batch, total), np.int64),
            "position_ids": np.full((batch, 1), total - 1, np.int64),
        }
        for i in pasts:
            present = out[i.name.replace("past_key_values", "present")]
            feed[i.name] = np.array(present) if copy_pasts else present
    return np.concatenate(tokens, 1), {n: out[n] for n in outputs if n.startswith("present")}


@pytest.mark.parametrize("packed", [False, True])
def test_fed_back_presents_give_the_same_tokens_and_presents(packed, monkeypatch, found_by):
    """Past 16 positions the loop crosses a bucket (16 -> 32): the held presents are moved to
    the next bucket on the device."""
    prompt = np.array([[3, 17, 42, 8, 5], [9, 1, 30, 2, 11]])
    steps = 20
    want, want_cache = _greedy(ort.InferenceSession(DECODER, providers=["CPUExecutionProvider"]),
                               prompt, steps)  # fmt: skip
    plain, plain_cache = _greedy(InferenceSession(DECODER), prompt, steps)
    monkeypatch.setattr(feedback, "applies", lambda platform: True)
    reused = found_by(feedback, "reuse")
    if packed:
        monkeypatch.setattr(fetch, "packs", lambda platform, outputs: True)
    s = InferenceSession(DECODER)
    got, cache = _greedy(s, prompt, steps)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, plain)
    for name, value in cache.items():
        assert value.shape == want_cache[name].shape and not value.flags.writeable
        np.testing.assert_array_equal(value, plain_cache[name])
        np.testing.assert_allclose(value, want_cache[name], rtol=1e-4, atol=1e-5)
        with pytest.raises(ValueError):
            value.flags.writeable = True
    # the prompt's step has no held presents; every later one took them, but where the past is
    # exactly a bucket long (16: nothing to pad) and the step ran on the fed arrays
    assert reused == [False] + [5 + k != 16 for k in range(steps - 1)]
    # copies of the presents are not the held arrays: the loop runs on what it is given
    reused.clear()
    copied, _ = _greedy(s, prompt, 6, copy_pasts=True)
    np.testing.assert_array_equal(copied, got[:, :6])
    assert not any(reused)


def test_presents_not_held_on_the_cpu():
    """On the CPU a session keeps no presents and its outputs stay as ``run`` made them."""
    assert not feedback.applies("cpu") and feedback.applies("gpu") == feedback.KEEP_PRESENTS
    s = InferenceSession(DECODER, providers=["CPUExecutionProvider"])  # a GPU's machine too
    _greedy(s, np.array([[3, 17, 42]]), 3)
    assert s.__dict__.get("_held_presents") is None
