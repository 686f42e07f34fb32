"""``AttentionPastSplit``: a decode step's fused attention reads its past where it lies, as
MULTIHEAD_ATTENTION's PastKeyTensor / PastValueTensor, instead of a copy of the joined cache.
On the tiny decoders of tests/data/decoders (GPT-2: MULTIHEAD_ATTENTION; LLaMA: MULTIHEAD_ATTENTION1
with 2 key-value heads for 4 query heads), at a decode step, batches of 1 and 2: every attention
node takes the past inputs and one new position, the layout copies are gone, the outputs equal
the session's without the rewrite bit for bit and onnxruntime's; a prefill of several positions
and a session on a model axis keep the joined keys."""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import pytest

pytest.importorskip("onnx")
from _decoder_feeds import step_feed  # this folder's

from dml_jax.onnx import InferenceSession

DATA = Path(__file__).parent / "data" / "decoders"
REWRITE = "AttentionPastSplit"


def _attention(session) -> list:
    (program,) = session._programs.values()
    return [n for n in program.imported.graph.nodes if "ATTENTION" in n.operator_type]


def _identities(session) -> int:
    (program,) = session._programs.values()
    kind = "DML_OPERATOR_ELEMENT_WISE_IDENTITY"
    return sum(n.operator_type == kind for n in program.imported.graph.nodes)


@pytest.mark.parametrize("model", ["tiny_llama_step", "tiny_gpt2_step"])
@pytest.mark.parametrize("batch, past", [(1, 7), (2, 20)])
def test_decode_step_reads_its_past_in_place(model, batch, past):
    path = str(DATA / f"{model}.onnx")
    s = InferenceSession(path)
    joined = InferenceSession(path, disabled_optimizers=[REWRITE])
    feed = step_feed(s, batch, 1, past, seed=batch + past)
    got, want = s.run(None, feed), joined.run(None, feed)
    nodes = _attention(s)
    assert len(nodes) == 2 and f"{REWRITE} x2" in s.explain()
    for node in nodes:
        heads = node.past_key_tensor.sizes[1]
        assert node.key_tensor.sizes == (batch, 1, heads * node.past_key_tensor.sizes[3])
        assert node.past_key_tensor.sizes[2] == node.past_value_tensor.sizes[2] >= past
    assert all(n.past_key_tensor is None for n in _attention(joined))
    assert _identities(s) == _identities(joined) - 4  # a key and a value copy a layer
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    ort = pytest.importorskip("onnxruntime")
    theirs = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feed)
    for g, w in zip(got, theirs):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * np.abs(w).max())


def test_a_prefill_keeps_the_joined_keys():
    """Several query positions: the rewrite leaves the node as AttentionFusion made it."""
    from dml_jax.onnx.optimize import attention

    s = InferenceSession(str(DATA / "tiny_llama_step.onnx"))
    saved = attention.MIN_KEYS
    attention.MIN_KEYS = 1  # fuse the short prefill
    try:
        s.run(None, step_feed(s, 2, 3, 5, seed=1))
    finally:
        attention.MIN_KEYS = saved
    nodes = _attention(s)
    assert len(nodes) == 2 and REWRITE not in s.explain()
    assert all(n.past_key_tensor is None and n.key_tensor.sizes[1] >= 8 for n in nodes)


def test_left_out_on_a_model_axis():
    """(On one device's "model" axis: the rule is the axis's, whatever its size; the
    communication it avoids is checked on four devices in tests/_session_mesh_worker.py.)"""
    mesh = jax.make_mesh((1,), ("model",), devices=jax.devices()[:1])
    s = InferenceSession(str(DATA / "tiny_llama_step.onnx"), mesh=mesh)
    s.run(None, step_feed(s, 2, 1, 7, seed=3))
    assert REWRITE not in s.explain() and all(n.past_key_tensor is None for n in _attention(s))
