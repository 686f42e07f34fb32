"""Transformer models as ONNX Runtime's optimizers leave them run through
``dml_jax.onnx.InferenceSession`` and match onnxruntime's CPU provider.

The models (``tests/data/onnx/``, made by ``tests/data/onnx/make_optimized.py``) are tiny
random-weight Hugging Face BERT and GPT-2 exports (2 layers, hidden size 32, 2 heads) put through
``onnxruntime.transformers.optimizer.optimize_model`` (``*_optimized``) and through ONNX Runtime's
own extended graph fusions (``*_ort_extended``). Each test first checks that the file really
holds the fused ``com.microsoft`` ops it is meant to exercise, then that each of them was mapped
onto DML operators by its converter (the session's ``explain()``).

Inputs: random token ids with a fixed seed, batch 2 and sequence 8, the second row padded (its
attention mask ends in zeros) and both token types present. Tolerance: 1e-5 relative and
absolute on float32 outputs of magnitude about 1 to 4 (LayerNorm outputs scaled by random
gammas); the two computations differ by summation order (GEMM, reductions) and the erf / tanh
implementations, a few units in the last place per op over some 40 ops in a row (observed
differences are below 1e-6).
"""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

from dml_jax.onnx import InferenceSession
from dml_jax.onnx.converters import REGISTRY

DATA = os.path.join(os.path.dirname(__file__), "data", "onnx")
MS = "com.microsoft"
TOL = {"rtol": 1e-5, "atol": 1e-5}

# The fused ops each model must hold (what the optimizer made of the export).
FUSED = {
    "bert_optimized": {
        "EmbedLayerNormalization",
        "Attention",
        "BiasGelu",
        "SkipLayerNormalization",
    },
    "gpt2_optimized": {"FastGelu", "SkipLayerNormalization"},
    "bert_ort_extended": {"FusedMatMul", "BiasGelu", "FusedGemm"},
    "gpt2_ort_extended": {"FusedMatMul", "FastGelu"},
}
# Converted in dml_jax/onnx/converters/ms_attention.py and ms_gqa.py.
ATTENTION_OPS = {"Attention", "MultiHeadAttention", "RotaryEmbedding", "GroupQueryAttention"}


def _feeds(model) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    values = {
        "input_ids": rng.integers(0, 100, (2, 8)),
        "attention_mask": np.array([[1] * 8, [1] * 5 + [0] * 3]),
        "token_type_ids": np.array([[0] * 4 + [1] * 4, [0] * 8]),
    }
    feeds = {}
    for i in model.graph.input:
        elem = i.type.tensor_type.elem_type
        feeds[i.name] = values[i.name].astype(onnx.helper.tensor_dtype_to_np_dtype(elem))
    return feeds


@pytest.mark.parametrize("name", sorted(FUSED))
def test_optimized_model_matches_onnxruntime(name):
    path = os.path.join(DATA, f"{name}.onnx")
    model = onnx.load(path)
    ms_ops = {n.op_type for n in model.graph.node if n.domain == MS}
    assert ms_ops >= FUSED[name], f"{name} lost fused ops: {sorted(FUSED[name] - ms_ops)}"
    missing = sorted(op for op in ms_ops if REGISTRY.entry(MS, op) is None)
    assert not missing, f"no converter for com.microsoft {missing}"
    feeds = _feeds(model)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)
    session = InferenceSession(path)
    got = session.run(None, feeds)
    for g, w, out in zip(got, want, model.graph.output):
        assert g.shape == w.shape and g.dtype == w.dtype, out.name
        np.testing.assert_allclose(g, w, **TOL, err_msg=out.name)

    # Every com.microsoft node became DML operators through its converter (no function body, no
    # JAX node, not folded away).
    ms_nodes = {n.name: n.op_type for n in model.graph.node if n.domain == MS}
    # A node a graph optimization merged into another (AttentionFusion: FusedMatMul into
    # MULTIHEAD_ATTENTION) says "(rewritten)".
    lines = re.findall(r"^node \d+ \('([^']*)', (\w+)\): (\w[\w+]*)(?:: (.*)|( \(rewritten\)))?$",
                       session.explain(), re.MULTILINE)  # fmt: skip
    seen = set()
    for node_name, op_type, how, operators, rewritten in lines:
        if ms_nodes.get(node_name) == op_type:
            assert how == "dml" and (operators or rewritten), (node_name, how, operators)
            seen.add(op_type)
    assert seen == ms_ops
    for op_type in ms_ops - ATTENTION_OPS:
        assert REGISTRY.entry(MS, op_type).group in ("ms_fused", "ms_layers")
