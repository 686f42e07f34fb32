"""ONNX's Attention through ``InferenceSession`` where ONNX's node tests do not reach: which
DirectML operator and mask type each kind of node becomes, fully masked rows (a zero key length,
a constant mask) giving ONNX's zeros where DirectML's softmax gives NaN, windows over a past
cache, softcap with grouped heads and a run-time mask. Results are compared with ONNX's reference
evaluator; ONNX's own node tests run in ``test_onnx_backend.py``."""

from __future__ import annotations

import numpy as np
import pytest

import dml_jax as dml

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from dml_jax.onnx import InferenceSession

NAMES = ["Q", "K", "V", "attn_mask", "past_key", "past_value", "nonpad_kv_seqlen"]
OUTPUTS = ["Y", "present_key", "present_value", "qk_matmul_output"]


def _model(arrays, *, opset=24, outputs=("Y",), constants=(), **attrs):
    """An Attention model over ``arrays`` (input name -> array; absent inputs left out), the
    names in ``constants`` as initializers; returns (model, feeds)."""
    names = [n if n in arrays else "" for n in NAMES]
    while not names[-1]:
        names.pop()
    wanted = [o if o in outputs else "" for o in OUTPUTS]
    while not wanted[-1]:
        wanted.pop()
    node = helper.make_node("Attention", names, wanted, **attrs)
    elem = helper.np_dtype_to_tensor_dtype
    inputs = [
        helper.make_tensor_value_info(n, elem(a.dtype), a.shape)
        for n, a in arrays.items()
        if n not in constants
    ]
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in wanted if o]
    inits = [numpy_helper.from_array(arrays[n], n) for n in constants]
    graph = helper.make_graph([node], "attention", inputs, outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return model, {n: a for n, a in arrays.items() if n not in constants}


def _qkv(rng, b=2, hq=4, hkv=2, s=3, kv=5, d=8, dv=6):
    q = rng.standard_normal((b, hq, s, d)).astype(np.float32)
    k = rng.standard_normal((b, hkv, kv, d)).astype(np.float32)
    v = rng.standard_normal((b, hkv, kv, dv)).astype(np.float32)
    return {"Q": q, "K": k, "V": v}


def _check(model, feeds):
    want = ReferenceEvaluator(model).run(None, feeds)
    got = InferenceSession(model).run(None, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        assert not np.isnan(g).any()
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def _graph(model):
    nodes = dml.compile_onnx(model, optimization_level="disable").imported.graph.nodes
    ops = [n.operator_type.removeprefix("DML_OPERATOR_") for n in nodes]
    masks = [n.mask_type.name for n in nodes if "MULTIHEAD" in n.operator_type]
    return ops, masks


@pytest.mark.parametrize(
    ("attrs", "extra", "operator", "mask_type"),
    [
        ({}, {}, "MULTIHEAD_ATTENTION", "NONE"),  # equal head counts
        ({"is_causal": 1}, {}, "MULTIHEAD_ATTENTION1", "BOOLEAN"),  # grouped heads
        ({}, {"nonpad_kv_seqlen": np.array([5, 2])}, "MULTIHEAD_ATTENTION1", "KEY_SEQUENCE_LENGTH"),
        ({"is_causal": 1}, {"nonpad_kv_seqlen": np.array([4, 5])}, "MULTIHEAD_ATTENTION1", "NONE"),
    ],
)
def test_each_kind_of_node_maps_onto_directml_attention(attrs, extra, operator, mask_type, rng):
    arrays = _qkv(rng, hkv=4 if operator == "MULTIHEAD_ATTENTION" else 2) | extra
    model, feeds = _model(arrays, **attrs)
    _check(model, feeds)
    ops, masks = _graph(model)
    assert operator in ops and masks == [mask_type]
    if "nonpad_kv_seqlen" in extra and attrs:
        # The external cache: K / V are the past, nonpad_kv_seqlen its per-batch lengths.
        nodes = dml.compile_onnx(model).imported.graph.nodes
        desc = next(n for n in nodes if "MULTIHEAD" in n.operator_type)
        assert desc.past_sequence_lengths_tensor is not None and desc.key_tensor is None


def test_a_zero_key_length_gives_zero_rows_not_nan(rng):
    arrays = _qkv(rng) | {"nonpad_kv_seqlen": np.array([0, 3])}
    model, feeds = _model(arrays)
    _check(model, feeds)
    y = InferenceSession(model).run(None, feeds)[0]
    assert np.all(y[0] == 0)


def test_a_constant_mask_with_an_empty_row_is_folded(rng):
    arrays = _qkv(rng, hkv=4)
    mask = rng.random((3, 5)) > 0.4
    mask[1] = False  # query 1 attends nothing: ONNX gives a zero row
    model, feeds = _model(arrays | {"attn_mask": mask}, constants=("attn_mask",))
    _check(model, feeds)
    ops, masks = _graph(model)
    assert masks == ["BOOLEAN"] and "ELEMENT_WISE_LOGICAL_AND" not in ops
    assert "REDUCE" not in ops  # the empty rows are known at import


def test_a_window_over_a_past_cache_with_3d_inputs_and_present_outputs(rng):
    b, hq, hkv, s, kv, past, d = 1, 2, 2, 3, 3, 4, 4
    arrays = {
        "Q": rng.standard_normal((b, s, hq * d)).astype(np.float32),
        "K": rng.standard_normal((b, kv, hkv * d)).astype(np.float32),
        "V": rng.standard_normal((b, kv, hkv * d)).astype(np.float32),
        "past_key": rng.standard_normal((b, hkv, past, d)).astype(np.float32),
        "past_value": rng.standard_normal((b, hkv, past, d)).astype(np.float32),
    }
    model, feeds = _model(
        arrays,
        opset=25,
        outputs=("Y", "present_key", "present_value"),
        q_num_heads=hq,
        kv_num_heads=hkv,
        left_window_size=1,
        right_window_size=1,
    )
    _check(model, feeds)


def test_softcap_with_grouped_heads_a_run_time_mask_and_the_biased_logits(rng):
    arrays = _qkv(rng) | {"attn_mask": rng.random((2, 1, 3, 5)) > 0.3}
    arrays["attn_mask"][0, 0, 2] = False
    model, feeds = _model(
        arrays, outputs=("Y", "qk_matmul_output"), softcap=1.5, qk_matmul_output_mode=2
    )
    _check(model, feeds)
    ops, masks = _graph(model)
    assert {"GEMM", "ACTIVATION_SCALED_TANH", "ACTIVATION_SOFTMAX1"} <= set(ops) and not masks


def test_known_lengths_fold_the_window_mask(rng):
    arrays = _qkv(rng, hkv=4, kv=6) | {"nonpad_kv_seqlen": np.array([6, 4])}
    model, feeds = _model(
        arrays, opset=25, constants=("nonpad_kv_seqlen",), is_causal=1, left_window_size=1
    )
    _check(model, feeds)
    ops, masks = _graph(model)
    assert masks == ["BOOLEAN"] and "ELEMENT_WISE_LOGICAL_LESS_THAN" not in ops
