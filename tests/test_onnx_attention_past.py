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


def _one_head_step(b: int, past: int, d: int):
    """A decode step's attention of one head, written by hand ({B, H, S, D} with H = 1): the
    present keys and values the JOIN of the past inputs and the new position, which the fused
    node reads as {B, T, D} without a layout copy."""
    from onnx import TensorProto, helper

    f32 = TensorProto.FLOAT
    scale = helper.make_tensor("scale_value", f32, [], [d**-0.5])
    nodes = [  # the scale a Constant node (an initializer is a parameter the fusion leaves)
        helper.make_node("Constant", [], ["scale"], value=scale),
        helper.make_node("Concat", ["past_k", "k"], ["present_k"], axis=2),
        helper.make_node("Concat", ["past_v", "v"], ["present_v"], axis=2),
        helper.make_node("Transpose", ["present_k"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["s"]),
        helper.make_node("Mul", ["s", "scale"], ["scaled"]),
        helper.make_node("Softmax", ["scaled"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "present_v"], ["y"]),
    ]
    inputs = [
        helper.make_tensor_value_info(name, f32, [b, 1, size, d])
        for name, size in (("q", 1), ("k", 1), ("v", 1), ("past_k", past), ("past_v", past))
    ]
    outputs = [helper.make_tensor_value_info(n, f32, None) for n in ("y", "present_k", "present_v")]
    graph = helper.make_graph(nodes, "step", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def test_one_head_reads_its_past_in_place(tmp_path):
    """One head: the fused node read the JOIN itself ({B, 1, T, D} is {B, T, D}); now the past
    inputs and the new position."""
    import onnx

    path = str(tmp_path / "one_head.onnx")
    onnx.save(_one_head_step(2, 5, 8), path)
    rng = np.random.default_rng(7)
    feed = {}
    for name, size in (("q", 1), ("k", 1), ("v", 1), ("past_k", 5), ("past_v", 5)):
        feed[name] = rng.standard_normal((2, 1, size, 8), np.float32)
    s, joined = InferenceSession(path), InferenceSession(path, disabled_optimizers=[REWRITE])
    got, want = s.run(None, feed), joined.run(None, feed)
    (node,) = _attention(s)
    assert node.key_tensor.sizes == (2, 1, 8) and node.past_key_tensor.sizes == (2, 1, 5, 8)
    (unsplit,) = _attention(joined)
    assert unsplit.key_tensor.sizes == (2, 6, 8) and unsplit.past_key_tensor is None
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    k = np.concatenate([feed["past_k"], feed["k"]], axis=2)
    v = np.concatenate([feed["past_v"], feed["v"]], axis=2)
    logits = feed["q"] @ k.transpose(0, 1, 3, 2) / np.sqrt(8)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    np.testing.assert_allclose(got[0], (p / p.sum(-1, keepdims=True)) @ v, rtol=1e-5, atol=1e-6)
