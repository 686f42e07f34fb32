"""ONNX's own backend node tests of Attention (opset 23 and later), mapped onto DirectML's
MULTIHEAD_ATTENTION (equal query and key/value head counts) or MULTIHEAD_ATTENTION1 (grouped
heads, or a key/value cache with per-batch lengths), run in logical mode.

The mapping (what a DirectML execution provider would do around the operator):

- 4-D inputs {B, N, S, H} are transposed to DirectML's {B, S, N * H} (and Y back); 3-D inputs
  {B, S, N * H} pass as they are, with q_num_heads / kv_num_heads as the head counts. past_key /
  past_value {B, Nkv, P, H} and present_key / present_value are DirectML's PastKey / PastValue
  and OutputPresentKey / OutputPresentValue unchanged. ``scale`` is Scale (default
  1 / sqrt(H)).
- A float attn_mask (padded with -inf to the total length, broadcast to {B, Nq, S, T}) is the
  RelativePositionBiasTensor. What a boolean attn_mask, is_causal (aligned at the end: key j is
  allowed for query i iff j <= i + P, or i + nonpad_kv_seqlen[b] - S with an external cache) and
  a local window (opset 25) allow is one BOOLEAN mask {B, Nq, S, T} (0 = masked) with
  MaskFilterValue -inf: DirectML adds it, as ONNX adds -inf.
- nonpad_kv_seqlen (opset 24, an external cache K / V {B, Nkv, T, H}): without a boolean mask,
  is_causal or a window, it is the KEY_SEQUENCE_LENGTH mask {1, B} (set to -inf); with
  is_causal, K and V become MULTIHEAD_ATTENTION1's PastKey / PastValue with
  PastSequenceLengthsTensor = nonpad_kv_seqlen and no new key or value, whose causal frontier
  ``j <= L_b + 0 - S + i`` is ONNX's; anything else is folded into the BOOLEAN mask.

Skipped, with the reason: softcap (no DirectML member), the qk_matmul_output output (DirectML
has none), bfloat16 (no DirectML type), and cases where a query row that has positions to attend
has them all masked: ONNX gives 0 there, DirectML's additive -inf mask NaN (docs/semantics.md).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx_cases import (
    assert_every_op_type_passes,
    attrs,
    case_ids,
    dml_type,
    node_cases,
    run_or_skip,
)

import dml_jax as dml

onnx = pytest.importorskip("onnx")

MAPPED = {"Attention"}
CASES = tuple(c for c in node_cases({"Attention": "attention"}) if c.opset >= 23)


def _roles(node, inputs):
    """The case's arrays by their position in ONNX's input list (absent optional inputs: None)."""
    it = iter(inputs)
    return {i: (next(it) if name else None) for i, name in enumerate(node.input)}


def _to_bsh(x: np.ndarray) -> np.ndarray:
    """{B, N, S, H} -> {B, S, N * H}."""
    b, n, s, h = x.shape
    return np.ascontiguousarray(x.transpose(0, 2, 1, 3)).reshape(b, s, n * h)


def _map(case):
    """(descriptor, inputs, expected outputs and how to read ours back) for one case."""
    node, at = case.node, attrs(case.node)
    if at.get("softcap", 0.0):
        pytest.skip("softcap has no DirectML member")
    if len(node.output) > 3 and node.output[3]:
        pytest.skip("DirectML has no qk_matmul_output output")
    x = _roles(node, case.inputs)
    q, k, v = x[0], x[1], x[2]
    mask, past_k, past_v = x.get(3), x.get(4), x.get(5)
    nonpad = x.get(6)
    type_name = dml_type(q.dtype)
    four_d = q.ndim == 4
    if four_d:
        b, nq, s, h = q.shape
        nkv = k.shape[1]
        q3, k3, v3 = _to_bsh(q), _to_bsh(k), _to_bsh(v)
    else:
        nq, nkv = int(at["q_num_heads"]), int(at["kv_num_heads"])
        q3, k3, v3 = q, k, v
        b, s = q.shape[:2]
        h = q.shape[2] // nq
    hv = v3.shape[2] // nkv
    p = 0 if past_k is None else past_k.shape[2]
    t = p + k3.shape[1]
    external = nonpad is not None
    scale = float(at.get("scale", 1 / math.sqrt(h)))
    causal = bool(at.get("is_causal", 0))
    left, right = int(at.get("left_window_size", -1)), int(at.get("right_window_size", -1))

    # What the masks allow, and what a float mask adds, over {B, Nq, S, T}.
    i = np.arange(s).reshape(1, 1, s, 1)
    j = np.arange(t).reshape(1, 1, 1, t)
    offset = np.zeros((b, 1, 1, 1), np.int64) + p
    if external:
        offset = (nonpad.astype(np.int64) - s).reshape(b, 1, 1, 1)
    allowed = np.ones((b, nq, s, t), bool)
    additive = None
    if mask is not None:
        pad = t - mask.shape[-1]
        fill = False if mask.dtype == np.bool_ else -np.inf
        mask = np.pad(mask, [(0, 0)] * (mask.ndim - 1) + [(0, pad)], constant_values=fill)
        full = np.broadcast_to(mask, (b, nq, s, t))
        if mask.dtype == np.bool_:
            allowed &= full
        else:
            additive = np.ascontiguousarray(full).astype(q.dtype)
    window = np.ones((b, nq, s, t), bool)
    if left >= 0:
        window &= (i + offset) - j <= left
    if right >= 0:
        window &= j - (i + offset) <= right
    lengths = None  # the MULTIHEAD_ATTENTION1 cache route
    key_lengths = False  # the KEY_SEQUENCE_LENGTH route
    if external:
        if causal:
            lengths = nonpad.astype(np.int32)
        elif (mask is None or mask.dtype != np.bool_) and left < 0 and right < 0:
            key_lengths = True
        else:
            allowed &= j < nonpad.reshape(b, 1, 1, 1)
    elif causal:
        allowed &= j <= i + offset
    allowed &= window

    # Rows with positions to attend but all of them masked: ONNX 0, DirectML NaN (the cache
    # route's rows without positions give 0 in both).
    valid = np.ones((b, 1, s, t), bool)
    if lengths is not None:
        valid = (j < lengths.reshape(b, 1, 1, 1)) & (j <= i + offset)
    kept = allowed & valid
    if key_lengths:
        kept = kept & (j < nonpad.reshape(b, 1, 1, 1))
    if additive is not None:
        kept = kept & np.isfinite(additive)
    if np.any(np.any(valid, axis=3) & ~np.any(kept, axis=3)):
        pytest.skip("a query row with positions to attend has all of them masked: ONNX gives 0, "
                    "DirectML's additive -inf mask NaN (docs/semantics.md)")  # fmt: skip

    def tensor(a):
        return dml.TensorDesc(type_name, list(a.shape))

    fields, arrays = {}, []
    if lengths is None:
        fields.update(query_tensor=tensor(q3), key_tensor=tensor(k3), value_tensor=tensor(v3))
        arrays += [q3, k3, v3]
    else:
        fields["query_tensor"] = tensor(q3)
        arrays.append(q3)
    mask_type = "NONE"
    if key_lengths:
        mask_type = "KEY_SEQUENCE_LENGTH"
        m = nonpad.astype(np.int32).reshape(1, b)
        fields["mask_tensor"] = dml.TensorDesc("INT32", [1, b])
        arrays.append(m)
    elif not np.all(allowed):
        mask_type = "BOOLEAN"
        fields["mask_tensor"] = dml.TensorDesc("INT32", [b, nq, s, t])
        arrays.append(allowed.astype(np.int32))
    if additive is not None:
        fields["relative_position_bias_tensor"] = tensor(additive)
        arrays.append(additive)
    if past_k is not None:
        fields.update(past_key_tensor=tensor(past_k), past_value_tensor=tensor(past_v))
        arrays += [past_k, past_v]
    if lengths is not None:
        fields.update(past_key_tensor=tensor(k), past_value_tensor=tensor(v))
        arrays += [k, v]
        fields["past_sequence_lengths_tensor"] = dml.TensorDesc("INT32", [b])
        arrays.append(lengths)
    fields["output_tensor"] = dml.TensorDesc(type_name, [b, s, nq * hv])
    names = list(node.output[:3])
    if len(names) > 1 and names[1]:
        fields["output_present_key_tensor"] = dml.TensorDesc(type_name, [b, nkv, t, h])
    if len(names) > 2 and names[2]:
        fields["output_present_value_tensor"] = dml.TensorDesc(type_name, [b, nkv, t, hv])
    common = {"scale": scale, "mask_filter_value": -math.inf, "mask_type": mask_type}
    if nq == nkv and lengths is None:
        desc = dml.MultiheadAttentionOperatorDesc(**fields, head_count=nq, **common)
    else:
        desc = dml.MultiheadAttention1OperatorDesc(
            **fields, query_head_count=nq, key_value_head_count=nkv, **common
        )

    def read_back(results):
        y = results[0]
        if four_d:
            y = y.reshape(b, s, nq, hv).transpose(0, 2, 1, 3)
        return (y, *results[1:])

    return desc, arrays, read_back


@pytest.mark.parametrize("index", range(len(CASES)), ids=case_ids(CASES))
def test_onnx_attention_case(index):
    case = CASES[index]
    desc, arrays, read_back = _map(case)
    got = run_or_skip(desc, *arrays)
    got = read_back(got if isinstance(got, tuple) else (got,))
    expected = list(case.outputs)  # the node's outputs that are present, in order
    assert len(got) == len(expected)
    tol = 2e-2 if expected[0].dtype == np.float16 else 1e-4
    for g, w in zip(got, expected):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=tol, atol=tol)


def test_every_mapped_op_type_has_a_passing_case():
    assert_every_op_type_passes(CASES, test_onnx_attention_case, MAPPED)


def test_the_mapping_uses_every_mask_route():
    """The cases reach DirectML as NONE, BOOLEAN, KEY_SEQUENCE_LENGTH, relative position bias,
    past / present and past sequence lengths, so the mapping is not one path tried 80 times."""
    seen = set()
    for case in CASES:
        try:
            desc, *_ = _map(case)
        except pytest.skip.Exception:
            continue
        seen.add(desc.mask_type.name)
        seen |= {path for path, _ in desc.input_slots() + desc.output_slots()}
    assert {
        "NONE",
        "BOOLEAN",
        "KEY_SEQUENCE_LENGTH",
        "RelativePositionBiasTensor",
        "PastKeyTensor",
        "OutputPresentKeyTensor",
        "PastSequenceLengthsTensor",
    } <= seen
