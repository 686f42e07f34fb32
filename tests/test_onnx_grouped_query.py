"""``GroupedQueryGemms``: a grouped-query attention's products over the key-value heads, reading
the cache itself rather than its copy repeated for every query head. On the tiny LLaMA decoder
step of tests/data/decoders (4 query heads sharing 2 key-value heads), at a decode step and a
prefill of several tokens, batches of 1 and 2: every attention GEMM rewritten and every
repeated copy gone, the values those of the session without the rewrite and onnxruntime's;
GPT-2's step (no grouping) keeps its GEMMs as they are. AttentionFusion, which takes a decode
step's attention whole at any length (``MIN_KEYS_ONE_QUERY``), is left out here so that the
products stay for the rewrite."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx")
from dml_jax.onnx import InferenceSession

DATA = Path(__file__).parent / "data" / "decoders"
REWRITE = "GroupedQueryGemms"
FUSION = "AttentionFusion"


def step_feed(session, batch: int, seq: int, past: int, seed: int) -> dict:
    """A step of ``seq`` new positions after ``past`` cached ones, for each of ``batch``
    sequences: random token ids, a mask over all of them, their positions, random pasts."""
    rng = np.random.default_rng(seed)
    feed = {}
    for i in session.get_inputs():
        if i.name == "input_ids":
            feed[i.name] = rng.integers(1, 90, (batch, seq)).astype(np.int64)
        elif i.name == "attention_mask":
            feed[i.name] = np.ones((batch, past + seq), np.int64)
        elif i.name == "position_ids":
            feed[i.name] = np.tile(np.arange(past, past + seq, dtype=np.int64), (batch, 1))
        else:  # past keys and values {batch, heads, past, head size}
            shape = [batch, i.shape[1], past, i.shape[3]]
            feed[i.name] = rng.standard_normal(shape).astype(np.float32)
    return feed


def _repeated_copies(session) -> int:
    """IDENTITY nodes of the session's one program that copy a stride-0 view."""
    (program,) = session._programs.values()
    return sum(
        getattr(n, "operator_type", "") == "DML_OPERATOR_ELEMENT_WISE_IDENTITY"
        and 0 in n.input_tensor.layout_strides
        and max(n.input_tensor.sizes) > 1
        for n in program.imported.graph.nodes
    )


@pytest.mark.parametrize("batch, seq, past", [(1, 1, 7), (2, 1, 5), (1, 5, 3), (2, 3, 4)])
def test_llama_attention_over_the_key_value_heads(batch, seq, past):
    path = str(DATA / "tiny_llama_step.onnx")
    s = InferenceSession(path, disabled_optimizers=[FUSION])
    plain = InferenceSession(path, disabled_optimizers=[REWRITE, FUSION])
    feed = step_feed(s, batch, seq, past, seed=batch * 10 + seq)
    got = s.run(None, feed)
    want = plain.run(None, feed)
    assert f"{REWRITE} x4" in s.explain()  # two products a layer, two layers
    assert _repeated_copies(s) == 0 and _repeated_copies(plain) == 4
    names = [o.name for o in s.get_outputs()]
    for name, g, w in zip(names, got, want):
        assert g.shape == w.shape, name
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5 * np.abs(w).max(), err_msg=name)
    ort = pytest.importorskip("onnxruntime")
    theirs = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feed)
    for name, g, w in zip(names, got, theirs):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * np.abs(w).max(), err_msg=name)


def test_ungrouped_attention_is_left_alone():
    path = str(DATA / "tiny_gpt2_step.onnx")
    s = InferenceSession(path)
    s.run(None, step_feed(s, 1, 1, 6, seed=3))
    assert REWRITE not in s.explain()
