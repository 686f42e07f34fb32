"""Generation across Hugging Face's decoder families, against PyTorch's greedy tokens and
onnxruntime.

The models (``tests/data/decoders/families/``, written by ``python -m
dml_jax.bench.decoder_families``) are tiny random-weight ``transformers`` causal LMs of the
families people export for generation (Qwen, Mistral, Phi, Gemma, OPT, GPT-NeoX, Falcon, BLOOM,
GPT-J, CodeGen, GPTBigCode, OLMo, Starcoder2, Granite), each exported by PyTorch's TorchScript
exporter as one decode step with its cache (Cohere's and Mixtral's exports failed: their record
holds the exporter's error), and five of them (Cohere among them) by its dynamo exporter too.
``families_greedy.json`` holds, per family, two prompts (6 and 3 tokens) and PyTorch's own
greedy tokens for each prompt alone (its own cache, float32, 16 steps): the two prompts
generated as one left-padded batch must give each row's tokens exactly (the weights'
initializer range of 0.2 keeps the logits' top two far apart). The prefill's logits are checked
against onnxruntime's CPU provider on the same file. The padding probe
(``dml_jax.onnx.padding_probe``) is checked on the families' sliding windows (Mistral, Gemma 2
and 3, windows of 8) and on steps without ``position_ids`` (BLOOM, GPT-2).
"""

from __future__ import annotations

import functools
import json
import os

import numpy as np
import pytest

pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from test_generation import _greedy_loop  # this folder's
from test_generation_forms import _merged  # this folder's

from dml_jax import ValidationError
from dml_jax.bench.decoder_families import FAMILIES
from dml_jax.onnx import InferenceSession
from dml_jax.onnx.generation import Generator, GeneratorParams
from dml_jax.onnx.padding_probe import padding_moves, prompt_padding_moves
from dml_jax.onnx.roles import roles_of

DATA = os.path.join(os.path.dirname(__file__), "data", "decoders", "families")
with open(os.path.join(DATA, "families_greedy.json")) as f:
    RECORD = json.load(f)
EXPORTED = sorted(name for name, r in RECORD.items() if "error" not in r)
# The generation test's families in the suite (each of a kind the others are not: the windows,
# ALiBi without position_ids, joined projections, a single key-value head, learned positions, a
# Cast on the present, soft-capping); every family with DML_JAX_DECODER_FAMILIES=all (the
# suite's time on two cores), for the probe's test too.
SUITE = ("bloom", "falcon", "gemma2", "gemma3", "gptj", "mistral", "opt", "phi3", "qwen2")
GENERATED = [n for n in EXPORTED if os.environ.get("DML_JAX_DECODER_FAMILIES") == "all"
             or n in SUITE]  # fmt: skip
with open(os.path.join(DATA, "families_dynamo.json")) as f:
    DYNAMO = sorted(n for n, r in json.load(f).items() if r == "ok")
# the families whose configuration gives every layer, or some, a sliding window (its width)
WINDOWS = {n: c["sliding_window"] for n, (_, c) in FAMILIES.items() if c.get("sliding_window")}


@functools.cache
def _session(name: str) -> InferenceSession:
    """The family's step, one session for the tests that neither patch nor count its work (its
    probes' answers and programs shared between them)."""
    return InferenceSession(os.path.join(DATA, f"{name}_step.onnx"))


def _padded(rows: list[list[int]], positions: bool) -> dict:
    """The prompts left-padded into one batch as an onnxruntime user feeds a first step: mask
    zeros over the padding, positions from each row's first real token, empty pasts."""
    longest = max(map(len, rows))
    ids = np.zeros((len(rows), longest), np.int64)
    mask = np.zeros_like(ids)
    for b, row in enumerate(rows):
        ids[b, longest - len(row) :] = row
        mask[b, longest - len(row) :] = 1
    feed = {"input_ids": ids, "attention_mask": mask}
    if positions:
        feed["position_ids"] = np.where(mask > 0, np.cumsum(mask, 1) - 1, 1)
    return feed


@pytest.mark.parametrize("name", GENERATED)
def test_family_generates_pytorch_greedy_tokens(name):
    """The family's two prompts as one left-padded batch: PyTorch's tokens row by row, in at
    most three programs (buckets, right-aligned where a window would move); the prefill's logits
    at each prompt's last token onnxruntime's."""
    r = RECORD[name]
    path = os.path.join(DATA, f"{name}_step.onnx")
    s = _session(name)
    steps = len(r["greedy"][0])
    g = Generator(s, GeneratorParams(s, max_length=6 + steps, batch_size=2))
    g.append_tokens(r["prompts"])
    # the prefill's logits at each prompt's last token against onnxruntime's first step
    feed = _padded(r["prompts"], r["positions"])
    o = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for i in o.get_inputs():
        if i.name.startswith("past"):
            feed[i.name] = np.zeros((2, i.shape[1], 0, i.shape[3]), np.float32)
    want = o.run(["logits"], feed)[0][:, -1]
    np.testing.assert_allclose(g.get_logits()[:, 0], want, atol=1e-4 * np.abs(want).max(), rtol=0)
    g.generate_until_done()
    np.testing.assert_array_equal(g.generated, np.array(r["greedy"]))
    if not r["positions"]:  # BLOOM: its ALiBi numbers tokens from the mask, so padding holds
        assert "numbers its tokens from the mask" in g.explain()
    assert g.compiles <= 3  # the prefill and two buckets, never a program a length


@pytest.mark.parametrize("name", [n for n in GENERATED if RECORD[n]["positions"]])
def test_padding_probe_finds_the_sliding_windows(name):
    """A past padded after its real positions moves a sliding window over the real keys once
    the bucket reaches the window (the new token numbered from the padded size): the probe
    says so for the windowed families at 32 positions, and for none below the window or
    without one; padded before them (right-aligned) nothing moves in any family."""
    s = _session(name)
    roles = roles_of(s)
    below = min(WINDOWS.values()) - 1
    assert padding_moves(s, roles, below) is None
    moved = padding_moves(s, roles, 32)
    assert (moved is not None) == (name in WINDOWS), moved
    assert padding_moves(s, roles, 32, front=True) is None


def test_sliding_window_keeps_its_keys_in_buckets(monkeypatch):
    """Mistral's window of 8 over 22 positions: the Generator's steps read the past
    right-aligned in its bucket (three programs, not one a length) and give PyTorch's tokens,
    as Gemma 3's do with n-gram drafts (chunks over the right-aligned past); an
    onnxruntime-style ``run``
    loop pads its pasts in front likewise; where neither side kept the window, buckets asked
    for would be refused."""
    name = "mistral"
    r = RECORD[name]
    s = InferenceSession(os.path.join(DATA, f"{name}_step.onnx"))
    want = np.array(r["greedy"])
    g = Generator(s, GeneratorParams(s, max_length=6 + 16, batch_size=2))
    g.append_tokens(r["prompts"])
    g.generate_until_done()
    assert "the past right-aligned in its bucket" in g.explain()
    np.testing.assert_array_equal(g.generated, want)
    assert g.compiles <= 3
    # Gemma 3's sliding layers with n-gram drafts accepted (chunks over the right-aligned past)
    g3, r3 = InferenceSession(os.path.join(DATA, "gemma3_step.onnx")), RECORD["gemma3"]
    spec = Generator(g3, GeneratorParams(g3, max_length=6 + 16, ngram_size=2, max_draft_tokens=4))
    spec.append_tokens(r3["prompts"][:1])
    spec.generate_until_done()
    assert spec.get_speculative_stats()["draft_tokens_accepted"] > 0
    np.testing.assert_array_equal(spec.generated, np.array(r3["greedy"][:1]))
    np.testing.assert_array_equal(_greedy_loop(s, r["prompts"][:1], 16), want[:1])
    assert "else before it" in s.explain()
    from dml_jax.onnx import generation

    monkeypatch.setattr(generation, "padded_side", lambda *a: None)
    asked = Generator(s, GeneratorParams(s, max_length=6 + 16, batch_size=2, buckets=True))
    with pytest.raises(ValidationError, match="changes what the step computes"):
        asked.append_tokens(r["prompts"])


@pytest.mark.parametrize("name", DYNAMO)
def test_dynamo_export_generates_the_same_tokens(name):
    """The same models exported by PyTorch's dynamo exporter (``torch.export``, opset 20: the
    default of ``torch.onnx.export`` since PyTorch 2.9; other node spellings throughout):
    PyTorch's greedy tokens for the left-padded batch, or, for Cohere, whose TorchScript export
    failed (so no PyTorch tokens were kept), onnxruntime's greedy loop on the same file."""
    path = os.path.join(DATA, f"{name}_dynamo_step.onnx")
    r = RECORD[name]
    prompts = r.get("prompts") or [[5, 6, 7, 8, 9, 10], [11, 12, 13]]
    if "greedy" in r:
        want = np.array(r["greedy"])
    else:
        want = _greedy_loop(ort.InferenceSession(path, providers=["CPUExecutionProvider"]),
                            prompts, 16)  # fmt: skip
    s = InferenceSession(path)
    g = Generator(s, GeneratorParams(s, max_length=6 + 16, batch_size=2))
    g.append_tokens(prompts)
    g.generate_until_done()
    np.testing.assert_array_equal(g.generated, want)
    assert g.compiles <= 3  # bucketed (right-aligned where a window would move)


def test_merged_decoder_with_a_window():
    """Mistral as Optimum's merged decoder (an If on ``use_cache_branch``, the step with its
    past inside the then-branch): the probe follows the branch the cache takes, finds the
    window there and the Generator reads the past right-aligned: PyTorch's tokens."""
    import onnx

    r = RECORD["mistral"]
    s = InferenceSession(
        _merged(onnx.load(os.path.join(DATA, "mistral_step.onnx"))).SerializeToString()
    )
    g = Generator(s, GeneratorParams(s, max_length=6 + 16, batch_size=2))
    g.append_tokens(r["prompts"])
    g.generate_until_done()
    assert "the past right-aligned in its bucket" in g.explain()
    np.testing.assert_array_equal(g.generated, np.array(r["greedy"]))


def test_a_probe_that_fails_leaves_exact_lengths(monkeypatch):
    """Where the probe cannot evaluate a step (shape inference raising, here), it withholds
    buckets rather than raise: Mistral then runs exact lengths, PyTorch's tokens, and the
    explanation says why."""
    import onnx

    def refuse(*args, **kwargs):
        raise onnx.shape_inference.InferenceError("planted")

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", refuse)
    r = RECORD["mistral"]
    s = InferenceSession(os.path.join(DATA, "mistral_step.onnx"))
    g = Generator(s, GeneratorParams(s, max_length=6 + 4))
    g.append_tokens(r["prompts"][:1])
    g.generate_until_done()
    assert "could not be evaluated at a padded size (InferenceError: planted)" in g.explain()
    np.testing.assert_array_equal(g.generated[0], r["greedy"][0][:4])


@pytest.mark.parametrize("name", ["gemma2", "falcon"])
def test_int4_family_generates_onnxruntime_tokens(name, tmp_path):
    """The families' steps with every MatMul by a weight as com.microsoft MatMulNBits (4-bit
    blocks of 16, ``decoders.quantize_int4``): Gemma 2's window and soft-capping, Falcon's
    single key-value head; the Generator's greedy tokens against
    onnxruntime's greedy loop on the same file (its CPU provider's MatMulNBits)."""
    from dml_jax.bench.decoders import quantize_int4

    r = RECORD[name]
    path = str(tmp_path / f"{name}_q4.onnx")
    assert quantize_int4(os.path.join(DATA, f"{name}_step.onnx"), path, block=16) > 0
    want = _greedy_loop(ort.InferenceSession(path, providers=["CPUExecutionProvider"]),
                        r["prompts"], 12)  # fmt: skip
    s = InferenceSession(path)
    g = Generator(s, GeneratorParams(s, max_length=6 + 12, batch_size=2))
    g.append_tokens(r["prompts"])
    g.generate_until_done()
    np.testing.assert_array_equal(g.generated, want)


def test_prompt_probe_tells_mask_numbering_from_size_numbering():
    """Without position_ids, BLOOM's ALiBi numbers tokens from the mask (a token left-padded to
    16 computes as it does alone), GPT-2's learned positions from the sizes (the padded token
    takes position 15): the prompt probe says so. ``run``'s loop pads BLOOM's pasts to buckets
    (PyTorch's tokens, a program a bucket) and runs GPT-2's exact (onnxruntime's tokens). The
    Generator takes buckets asked for on BLOOM as its default does, and refuses them on GPT-2
    (a ``ValidationError`` naming the move), never silently exact."""
    r = RECORD["bloom"]
    bloom = InferenceSession(os.path.join(DATA, "bloom_step.onnx"))
    assert prompt_padding_moves(bloom, roles_of(bloom), 16) is None
    got = _greedy_loop(bloom, r["prompts"][:1], 16, positions=False)
    np.testing.assert_array_equal(got, np.array(r["greedy"][:1]))
    assert len(bloom._programs) <= 3  # the prompt, then pasts of 6 to 21 in 16 and 32
    assert "where the probe shows the step numbering its tokens from the mask" in bloom.explain()
    asked = Generator(bloom, GeneratorParams(bloom, max_length=6 + 12, batch_size=2,
                                             buckets=[8, 32]))  # fmt: skip
    asked.append_tokens(r["prompts"])
    asked.generate_until_done()
    np.testing.assert_array_equal(asked.generated, np.array(r["greedy"])[:, :12])
    assert asked.compiles <= 3 and "bucketed to [8, 32]" in asked.explain()  # prefill, 8, 32
    path = os.path.join(DATA, "..", "tiny_gpt2_step_nopos.onnx")
    gpt2 = InferenceSession(path)
    assert "differs at the real positions" in prompt_padding_moves(gpt2, roles_of(gpt2), 16)
    refused = Generator(gpt2, GeneratorParams(gpt2, max_length=12, buckets=True))
    with pytest.raises(ValidationError, match="padding the prompt moves its tokens: .*differs"):
        refused.append_tokens([[5, 6, 7]])
    want = _greedy_loop(ort.InferenceSession(path, providers=["CPUExecutionProvider"]),
                        [[5, 6, 7]], 6, positions=False)  # fmt: skip
    np.testing.assert_array_equal(_greedy_loop(gpt2, [[5, 6, 7]], 6, positions=False), want)
    assert len(gpt2._programs) == 6  # a program a length


def test_bound_loop_pads_a_window_in_front_on_the_device(found_by):
    """Optimum's bound loop (every input an OrtValue, the presents fed back without leaving the
    device) over Mistral's window: the pasts are padded in front of their real positions on
    the device (a present left in its bucket loses its first zeros, no program a token):
    PyTorch's tokens."""
    from test_onnx_iobinding import _greedy  # this folder's

    import dml_jax.onnx as dox
    from dml_jax.onnx import binding

    padded = found_by(binding, "pad_on_device")
    r = RECORD["mistral"]
    s = InferenceSession(os.path.join(DATA, "mistral_step.onnx"))
    got, _ = _greedy(dox, s, np.array(r["prompts"][:1]), 16)
    np.testing.assert_array_equal(got, np.array(r["greedy"][:1]))
    assert padded == [False] + [6 + k != 16 for k in range(15)]
    assert len(s._programs) <= 4
