"""DeBERTa-v2's disentangled (relative-position) attention as torch.onnx.export's TorchScript
exporter writes Hugging Face's ``DebertaV2Model``, built here with ``onnx.helper`` (torch is not
a test dependency): the embeddings, the attention mask made from ``torch.ones`` where the export
takes no ``attention_mask`` input, the log-bucketed relative positions
(``make_log_bucket_position``: Range / Unsqueeze / Sub / Sign / Abs / Where / Log / Ceil over
the sequence length), the content-to-position and position-to-content terms (a GatherElements
of the relative-position logits by the clipped positions expanded to every head), the masked
softmax and the output projection with its layer norm. Every relative-position value depends on
shapes only, so the whole bucket computation folds at import; the two terms read the parameter
``rel_embeddings`` and stay in the graph.

A sequence of 256 tokens made ``run`` raise a bare ``ValueError: cannot reshape array of size 1
into shape (256,256)``: the all-ones mask, fused into MULTIHEAD_ATTENTION (at least 128 keys),
reached the lowering as one value broadcast along every axis, and the check for a causal mask
read it as S x T (``ops.attention.known_causal_mask``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper

from dml_jax.onnx import InferenceSession

E, HEADS, BUCKETS, MAX_POSITION, VOCAB = 32, 2, 32, 128, 50
D = E // HEADS
SPAN = BUCKETS  # pos_ebd_size: position_buckets when they are set
SCALE_FACTOR = 3  # 1 + c2p + p2c
DIMS = ["batch", "sequence"]


class _Graph:
    """Nodes and initializers under construction (each node's one output named for it)."""

    def __init__(self, rng: np.random.Generator):
        self.rng, self.nodes, self.inits, self.count = rng, [], [], 0

    def op(self, op: str, *inputs: str, **attrs) -> str:
        self.count += 1
        out = f"{op.lower()}_{self.count}"
        self.nodes.append(helper.make_node(op, list(inputs), [out], **attrs))
        return out

    def const(self, value, dtype) -> str:
        """A Constant node, as the exporter writes Python scalars and shapes."""
        self.count += 1
        out = f"const_{self.count}"
        tensor = numpy_helper.from_array(np.asarray(value, dtype), out)
        self.nodes.append(helper.make_node("Constant", [], [out], value=tensor))
        return out

    def weight(self, shape, scale=None, name=None) -> str:
        self.count += 1
        name = name or f"w_{self.count}"
        scale = 1 / math.sqrt(shape[0]) if scale is None else scale
        array = (self.rng.standard_normal(shape) * scale).astype(np.float32)
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def dim(self, x: str, axis: int) -> str:
        """x.size(axis) as a 1-element int64 tensor (Shape, Gather, Unsqueeze)."""
        size = self.op("Gather", self.op("Shape", x), self.const(axis, np.int64), axis=0)
        return self.op("Unsqueeze", size, self.const([0], np.int64))

    def scalar_dim(self, x: str, axis: int) -> str:
        return self.op("Gather", self.op("Shape", x), self.const(axis, np.int64), axis=0)

    def linear(self, x: str, n_in: int, n_out: int) -> str:
        w = self.weight((n_in, n_out))
        return self.op("Add", self.op("MatMul", x, w), self.weight((n_out,), 0.1))

    def layer_norm(self, x: str) -> str:
        gamma = self.weight((E,), 0.1)
        gamma = self.op("Add", gamma, self.const(1.0, np.float32))
        return self.op("LayerNormalization", x, gamma, self.weight((E,), 0.1), epsilon=1e-7)

    def for_scores(self, x: str) -> str:
        """transpose_for_scores: {B, S, E} -> {B * heads, S, D}."""
        shape = self.op("Concat", self.dim(x, 0), self.dim(x, 1),
                        self.const([HEADS, -1], np.int64), axis=0)  # fmt: skip
        x = self.op("Transpose", self.op("Reshape", x, shape), perm=[0, 2, 1, 3])
        flat = self.op("Concat", self.const([-1], np.int64), self.dim(x, 2),
                       self.dim(x, 3), axis=0)  # fmt: skip
        return self.op("Reshape", x, flat)


def _relative_positions(g: _Graph, q: str) -> str:
    """build_relative_position + make_log_bucket_position over q's length: {1, 1, S, S} int64."""
    size = g.scalar_dim(q, 1)
    ids = g.op("Range", g.const(0, np.int64), size, g.const(1, np.int64))
    rel = g.op("Sub", g.op("Unsqueeze", ids, g.const([1], np.int64)),
               g.op("Unsqueeze", ids, g.const([0], np.int64)))  # fmt: skip
    mid = BUCKETS // 2
    sign = g.op("Sign", rel)
    near = g.op("And", g.op("Less", rel, g.const(mid, np.int64)),
                g.op("Greater", rel, g.const(-mid, np.int64)))  # fmt: skip
    abs_pos = g.op("Where", near, g.const(mid - 1, np.int64), g.op("Abs", rel))
    ratio = g.op("Div", g.op("Cast", abs_pos, to=TensorProto.FLOAT), g.const(mid, np.float32))
    log_ratio = g.op("Div", g.op("Log", ratio),
                     g.const(math.log((MAX_POSITION - 1) / mid), np.float32))  # fmt: skip
    log_pos = g.op("Add", g.op("Ceil", g.op("Mul", log_ratio, g.const(mid - 1, np.float32))),
                   g.const(mid, np.float32))  # fmt: skip
    bucket = g.op("Where", g.op("LessOrEqual", abs_pos, g.const(mid, np.int64)),
                  g.op("Cast", rel, to=TensorProto.FLOAT),
                  g.op("Mul", log_pos, g.op("Cast", sign, to=TensorProto.FLOAT)))  # fmt: skip
    rel = g.op("Cast", bucket, to=TensorProto.INT64)
    rel = g.op("Slice", rel, g.const([0], np.int64), g.dim(q, 1), g.const([0], np.int64))
    rel = g.op("Unsqueeze", rel, g.const([0], np.int64))
    return g.op("Unsqueeze", rel, g.const([1], np.int64))


def _disentangled_bias(g: _Graph, q: str, k: str, scale: str, rel_embeddings: str) -> str:
    """disentangled_attention_bias (share_att_key): the content-to-position and
    position-to-content logits, {B * heads, S, S}."""
    rel = _relative_positions(g, q)
    # The projections of the relative embeddings, repeated for the batch.
    rel_emb = g.op("Unsqueeze", g.op("Slice", rel_embeddings, g.const([0], np.int64),
                                     g.const([2 * SPAN], np.int64), g.const([0], np.int64)),
                   g.const([0], np.int64))  # fmt: skip
    batch = g.op("Div", g.dim(q, 0), g.const([HEADS], np.int64))
    repeats = g.op("Concat", batch, g.const([1, 1], np.int64), axis=0)
    pos_q = g.op("Tile", g.for_scores(g.linear(rel_emb, E, E)), repeats)
    pos_k = g.op("Tile", g.for_scores(g.linear(rel_emb, E, E)), repeats)
    index_shape = g.op("Concat", g.dim(q, 0), g.dim(q, 1), g.dim(rel, -1), axis=0)
    # content -> position
    c2p = g.op("MatMul", q, g.op("Transpose", pos_k, perm=[0, 2, 1]))
    c2p_pos = g.op("Clip", g.op("Add", rel, g.const(SPAN, np.int64)), g.const(0, np.int64),
                   g.const(2 * SPAN - 1, np.int64))  # fmt: skip
    c2p_index = g.op("Expand", g.op("Squeeze", c2p_pos, g.const([0], np.int64)), index_shape)
    c2p = g.op("GatherElements", c2p, c2p_index, axis=-1)
    score = g.op("Div", c2p, scale)
    # position -> content
    p2c = g.op("MatMul", k, g.op("Transpose", pos_q, perm=[0, 2, 1]))
    p2c_pos = g.op("Clip", g.op("Add", g.op("Neg", rel), g.const(SPAN, np.int64)),
                   g.const(0, np.int64), g.const(2 * SPAN - 1, np.int64))  # fmt: skip
    p2c_index = g.op("Expand", g.op("Squeeze", p2c_pos, g.const([0], np.int64)), index_shape)
    p2c = g.op("Transpose", g.op("GatherElements", p2c, p2c_index, axis=-1), perm=[0, 2, 1])
    return g.op("Add", score, g.op("Div", p2c, scale))


def _attention(g: _Graph, h: str, mask: str, rel_embeddings: str | None) -> str:
    q = g.for_scores(g.linear(h, E, E))
    k = g.for_scores(g.linear(h, E, E))
    v = g.for_scores(g.linear(h, E, E))
    scale = g.op("Sqrt", g.op("Mul", g.op("Cast", g.scalar_dim(q, -1), to=TensorProto.FLOAT),
                              g.const(SCALE_FACTOR, np.float32)))  # fmt: skip
    scores = g.op("MatMul", q, g.op("Div", g.op("Transpose", k, perm=[0, 2, 1]), scale))
    if rel_embeddings is not None:
        scores = g.op("Add", scores, _disentangled_bias(g, q, k, scale, rel_embeddings))
    # {B * heads, S, S} -> {B, heads, S, S}; masked_fill(~mask, lowest); softmax.
    four = g.op("Concat", g.const([-1, HEADS], np.int64), g.dim(scores, -2),
                g.dim(scores, -1), axis=0)  # fmt: skip
    scores = g.op("Reshape", scores, four)
    masked = g.op("Not", g.op("Cast", mask, to=TensorProto.BOOL))
    lowest = g.const(np.finfo(np.float32).min, np.float32)
    probs = g.op("Softmax", g.op("Where", masked, lowest, scores), axis=-1)
    three = g.op("Concat", g.const([-1], np.int64), g.dim(probs, -2), g.dim(probs, -1), axis=0)
    context = g.op("MatMul", g.op("Reshape", probs, three), v)
    merged = g.op("Concat", g.const([-1, HEADS], np.int64), g.dim(context, -2),
                  g.dim(context, -1), axis=0)  # fmt: skip
    context = g.op("Transpose", g.op("Reshape", context, merged), perm=[0, 2, 1, 3])
    back = g.op("Concat", g.dim(context, 0), g.dim(context, 1), g.const([-1], np.int64), axis=0)
    out = g.linear(g.op("Reshape", context, back), E, E)
    return g.layer_norm(g.op("Add", out, h))


def deberta_v2(seed: int = 0, layers: int = 2, relative: bool = True) -> onnx.ModelProto:
    """A tiny DebertaV2Model (relative_attention, position_buckets 32, share_att_key,
    pos_att_type c2p and p2c, layer-normed relative embeddings) exported without an attention
    mask: input_ids {batch, sequence} -> last hidden state {batch, sequence, E}. Without
    ``relative``, its attention is plain (relative_attention off: a BERT)."""
    g = _Graph(np.random.default_rng(seed))
    word = g.weight((VOCAB, E), 1.0)
    positions = numpy_helper.from_array(np.arange(512, dtype=np.int64)[None], "position_ids")
    g.inits.append(positions)
    pos_ids = g.op("Slice", "position_ids", g.const([0], np.int64), g.dim("input_ids", 1),
                   g.const([1], np.int64))  # fmt: skip
    h = g.op("Add", g.op("Gather", word, "input_ids"),
             g.op("Gather", g.weight((512, E), 1.0), pos_ids))  # fmt: skip
    h = g.layer_norm(h)
    ones = g.op("ConstantOfShape", g.op("Shape", "input_ids"),
                value=numpy_helper.from_array(np.ones(1, np.float32)))  # fmt: skip
    # get_attention_mask: m[:, None, None, :] * m[:, None, None, :].squeeze(-2)[..., None]
    m = g.op("Unsqueeze", g.op("Unsqueeze", ones, g.const([1], np.int64)),
             g.const([2], np.int64))  # fmt: skip
    mask = g.op("Mul", m, g.op("Unsqueeze", g.op("Squeeze", m, g.const([-2], np.int64)),
                               g.const([-1], np.int64)))  # fmt: skip
    rel_embeddings = None
    if relative:
        rel_embeddings = g.layer_norm(g.weight((2 * BUCKETS, E), 1.0, "rel_embeddings"))
    for _ in range(layers):
        h = _attention(g, h, mask, rel_embeddings)
    g.nodes.append(helper.make_node("Identity", [h], ["last_hidden_state"]))
    graph = helper.make_graph(
        g.nodes,
        "deberta_v2",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, DIMS)],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [*DIMS, E])],
        g.inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize(
    "relative, batch, sequence", [(True, 2, 16), (True, 1, 256), (False, 1, 256)]
)
def test_deberta_v2_matches_onnxruntime(relative, batch, sequence):
    """Short sequences run unfused; 256 tokens fuse the attention (the all-ones mask as a
    BOOLEAN mask, the disentangled terms as the RelativePositionBias). Without the relative
    terms every row keeps a key and MaskFilterValue becomes -inf, which sends the CPU's
    lowering to ``known_causal_mask`` (with them, only the GPU's cuDNN path asks it)."""
    ort = pytest.importorskip("onnxruntime")
    data = deberta_v2(relative=relative).SerializeToString()
    ids = np.random.default_rng(1).integers(0, VOCAB, (batch, sequence)).astype(np.int64)
    reference = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    (want,) = reference.run(None, {"input_ids": ids})
    session = InferenceSession(data)
    (got,) = session.run(None, {"input_ids": ids})
    assert got.shape == want.shape == (batch, sequence, E)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    if sequence >= 128:
        assert "AttentionFusion" in session.explain()


def test_a_mask_of_all_ones_is_not_causal():
    """``known_causal_mask`` on the constant all-ones BOOLEAN mask as the graph hands it over
    (one value, every axis broadcast: stride 0) is False, as it is for the same mask written
    out, and True for the causal one."""
    import dml_jax as dml
    from dml_jax import fastpath
    from dml_jax.errors import Validator
    from dml_jax.ops import attention as A

    s = 256
    full = (1, HEADS, s, s)
    mask = dml.TensorDesc("INT32", full, strides=(0, 0, 0, 0))

    def f32(sizes):
        return dml.TensorDesc("FLOAT32", sizes)

    desc = A.MultiheadAttentionOperatorDesc(
        query_tensor=f32((1, s, HEADS * D)),
        key_tensor=f32((1, s, HEADS * D)),
        value_tensor=f32((1, s, HEADS * D)),
        mask_tensor=mask,
        output_tensor=f32((1, s, HEADS * D)),
        scale=1.0,
        mask_filter_value=-np.inf,
        head_count=HEADS,
        mask_type="BOOLEAN",
    )
    slot = [p for p, _ in desc.input_slots()].index("MaskTensor")
    g = A.analyze(desc, Validator(desc.operator_type))
    one = np.lib.stride_tricks.as_strided(np.ones(1, np.int32), full, (0, 0, 0, 0))
    causal = np.broadcast_to(np.tril(np.ones((s, s), np.int32)), full)
    for value, want in ((one, False), (np.ones(full, np.int32), False), (causal, True)):
        with fastpath.known_inputs({slot: value}):
            assert A.known_causal_mask(desc, g) is want
