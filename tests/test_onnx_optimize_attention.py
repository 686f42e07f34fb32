"""AttentionFusion (``dml_jax.onnx.optimize.attention``): the attention subgraphs exporters write
become MULTIHEAD_ATTENTION(1).

Each model is built with ``onnx.helper`` in an exporter's spelling (torch.onnx.export's
TorchScript exporter: Div of the logits by a Constant, Transpose of the keys, an additive
padding mask computed from a mask input, or Where of a causal constant; float16 with the softmax
between two Casts; 3-D products over {B * H, S, D}, with a key/value cache concatenated from
inputs; its dynamo exporter: sqrt(scale) initializers multiplying Q and K, the IsNaN guard after
Softmax, a run-time -inf padding mask with an empty row, grouped key/value heads repeated by
Unsqueeze / Expand / Reshape). Each one fires (its count, the attention node and its mask), and
its outputs equal those of the ``disable`` level within float rounding (float32: 1e-5; float16:
MULTIHEAD_ATTENTION computes in float32 where the unfused graph rounds the logits and the
probabilities to float16, a few float16 units) and those of onnxruntime's CPU provider (float32).
``apply`` with a replaced scale initializer equals the unfused graph's. What the fusion must
leave alone: a second reader of the probabilities or the logits, another softmax axis, a mask
added before the scale, a finite Where fill that MaskFilterValue cannot stand for, a condition
computed at run time, the level below extended and the switch. Last, the strided-view algebra
the rewrite reads operands with, against NumPy.
"""

from __future__ import annotations

import logging
import math

import jax
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper

from dml_jax.onnx import InferenceSession, SessionOptions
from dml_jax.onnx.optimize import attention
from dml_jax.onnx.optimize.views import compose, reshaped_strides
from dml_jax.tensor import packed_strides

B, S, H, D = 2, 6, 2, 8
E = H * D
F32_LOWEST = float(np.finfo(np.float32).min)
MIN_KEYS = attention.MIN_KEYS  # the default, before any test lowers it


@pytest.fixture(autouse=True)
def _fuse_short_sequences(monkeypatch):
    """The patterns are built with a few keys: every test but the threshold's own fuses them."""
    monkeypatch.setattr(attention, "MIN_KEYS", 1)


class _Builder:
    """An ONNX graph under construction: nodes, initializers (parameters) and Constant nodes
    (exporters' scalars, not parameters)."""

    def __init__(self, rng: np.random.Generator, dtype=np.float32):
        self.rng = rng  # the weights' source
        self.dtype = np.dtype(dtype)
        self.nodes: list = []
        self.inits: list = []
        self.count = 0

    def name(self, base: str) -> str:
        self.count += 1
        return f"{base}{self.count}"

    def node(self, op: str, inputs, **attrs) -> str:
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, list(inputs), [out], **attrs))
        return out

    def init(self, value, dtype=None) -> str:
        name = self.name("w")
        keep = isinstance(value, np.ndarray) and value.dtype.kind in "biu"
        array = np.asarray(value, dtype or (value.dtype if keep else self.dtype))
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def const(self, value, dtype=None) -> str:
        name = self.name("c")
        keep = isinstance(value, np.ndarray) and value.dtype.kind in "biu"
        array = np.asarray(value, dtype or (value.dtype if keep else self.dtype))
        self.nodes.append(
            helper.make_node("Constant", [], [name], value=numpy_helper.from_array(array, name))
        )
        return name

    def shape(self, *dims) -> str:
        return self.const(np.array(dims, np.int64))

    def model(self, y: str, mask: bool = False, outputs=(), extra=()) -> onnx.ModelProto:
        elem = helper.np_dtype_to_tensor_dtype(self.dtype)
        self.nodes.append(helper.make_node("Identity", [y], ["y"]))
        inputs = [helper.make_tensor_value_info("x", elem, [B, S, E])]
        if mask:
            inputs.append(helper.make_tensor_value_info("mask", TensorProto.INT64, [B, S]))
        inputs += [helper.make_tensor_value_info(n, elem, list(shape)) for n, shape in extra]
        outs = [helper.make_tensor_value_info(o, elem, None) for o in ("y", *outputs)]
        graph = helper.make_graph(self.nodes, "attention", inputs, outs, self.inits)
        # IR 10: onnxruntime 1.30 (the GPU machine's) reads no newer
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)

    def project(self, heads: int = H) -> str:
        """x W + b: {B, S, heads * D}."""
        w = self.init(self.rng.standard_normal((E, heads * D)) / math.sqrt(E))
        b = self.init(self.rng.standard_normal(heads * D) * 0.1)
        return self.node("Add", [self.node("MatMul", ["x", w]), b])

    def heads_first(self, t: str, heads: int = H) -> str:
        """{B, S, heads * D} -> {B, heads, S, D}."""
        t = self.node("Reshape", [t, self.shape(B, S, heads, D)])
        return self.node("Transpose", [t], perm=[0, 2, 1, 3])

    def merge(self, o: str) -> str:
        """{B, H, S, D} -> {B, S, H * D}, then the output projection."""
        o = self.node("Transpose", [o], perm=[0, 2, 1, 3])
        o = self.node("Reshape", [o, self.shape(B, S, E)])
        return self.node("MatMul", [o, self.init(self.rng.standard_normal((E, E)) / math.sqrt(E))])

    def padding_mask(self) -> str:
        """(1 - mask[:, None, None, :]) * lowest, as Hugging Face's BERT builds it."""
        m = self.node("Unsqueeze", ["mask", self.const(np.array([1, 2], np.int64))])
        m = self.node("Cast", [m], to=helper.np_dtype_to_tensor_dtype(self.dtype))
        m = self.node("Sub", [self.const(1.0), m])
        return self.node("Mul", [m, self.const(np.finfo(self.dtype).min)])


def _torchscript(
    rng,
    dtype=np.float32,
    mask=True,
    two_transposes=False,
    causal=False,
    upcast=False,
    round_trip=False,
) -> onnx.ModelProto:
    """BERT / GPT-2 as torch.onnx.export's TorchScript exporter writes them; ``upcast``: the
    softmax in float32 between two Casts (Hugging Face's eager attention in float16);
    ``round_trip``: the softmax in float16, its probabilities cast to float32 and back (that
    attention in a model made float16 whole, LLaMA's ``softmax(..., dtype=float32)`` traced
    in float16)."""
    g = _Builder(rng, dtype)
    q, k, v = (g.heads_first(g.project()) for _ in range(3))
    if two_transposes:
        k = g.node("Transpose", [k], perm=[0, 1, 3, 2])
    else:  # the two transposes folded into one
        k = g.node("Transpose", [g.node("Reshape", [g.project(), g.shape(B, S, H, D)])],
                   perm=[0, 2, 3, 1])  # fmt: skip
    s = g.node("MatMul", [q, k])
    s = g.node("Div", [s, g.const(math.sqrt(D))])
    if causal:  # GPT-2: where(tril, w, lowest) with a bool buffer sliced to S
        tril = np.tril(np.ones((1, 1, S, S), bool))
        s = g.node("Where", [g.init(tril, np.bool_), s, g.const(np.finfo(dtype).min)])
    if mask:
        s = g.node("Add", [s, g.padding_mask()])
    if upcast:
        s = g.node("Cast", [s], to=TensorProto.FLOAT)
    p = g.node("Softmax", [s], axis=-1)
    if round_trip:
        p = g.node("Cast", [p], to=TensorProto.FLOAT)
    if upcast or round_trip:
        p = g.node("Cast", [p], to=TensorProto.FLOAT16)
    return g.model(g.merge(g.node("MatMul", [p, v])), mask=mask)


def _bmm(rng, past: int = 0) -> onnx.ModelProto:
    """Attention over 3-D products {B * H, S, D} (models written with bmm); ``past``: keys and
    values concatenated after a cache {B, H, P, D} from inputs (decoding), the new cache an
    output."""
    g = _Builder(rng)
    q, k, v = (g.heads_first(g.project()) for _ in range(3))
    extra, outputs = (), ()
    if past:
        extra = (("past_k", (B, H, past, D)), ("past_v", (B, H, past, D)))
        k = g.node("Concat", ["past_k", k], axis=2)
        v = g.node("Concat", ["past_v", v], axis=2)
        outputs = (k, v)
    t = S + past
    q = g.node("Reshape", [q, g.shape(B * H, S, D)])
    k = g.node("Transpose", [g.node("Reshape", [k, g.shape(B * H, t, D)])], perm=[0, 2, 1])
    v = g.node("Reshape", [v, g.shape(B * H, t, D)])
    s = g.node("Mul", [g.node("MatMul", [q, k]), g.const(1 / math.sqrt(D))])
    o = g.node("MatMul", [g.node("Softmax", [s], axis=-1), v])
    o = g.node("Reshape", [o, g.shape(B, H, S, D)])
    model = g.model(g.merge(o), extra=extra)
    for name in outputs:
        model.graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    return model


def _dynamo(rng, dtype=np.float32, kv_heads=H, causal=True, padding=False) -> onnx.ModelProto:
    """LLaMA / ViT as the dynamo exporter writes them (scaled_dot_product_attention's
    decomposition); ``kv_heads`` < H: the keys and values repeated by Unsqueeze, Expand and
    Reshape; ``padding``: a boolean key mask from an input, Where(mask, 0, -inf) added (the
    second batch entry has no key: its rows are NaN until the IsNaN guard)."""
    g = _Builder(rng, dtype)
    q = g.heads_first(g.project())
    k, v = (g.heads_first(g.project(kv_heads), kv_heads) for _ in range(2))
    if kv_heads < H:
        group = H // kv_heads

        def repeat(t):
            t = g.node("Unsqueeze", [t, g.const(np.array([2], np.int64))])
            t = g.node("Expand", [t, g.shape(B, kv_heads, group, S, D)])
            return g.node("Reshape", [t, g.shape(B, H, S, D)])

        k, v = repeat(k), repeat(v)
    root = g.init(math.sqrt(1 / math.sqrt(D)))
    q = g.node("Mul", [q, root])
    k = g.node("Mul", [g.node("Transpose", [k], perm=[0, 1, 3, 2]), root])
    s = g.node("MatMul", [q, k])
    if causal:
        lowest = np.finfo(dtype).min
        s = g.node("Add", [s, g.init(np.triu(np.full((1, 1, S, S), lowest), 1))])
    if padding:
        keep = g.node("Cast", ["mask"], to=TensorProto.BOOL)
        keep = g.node("Unsqueeze", [keep, g.const(np.array([1, 2], np.int64))])
        s = g.node("Add", [s, g.node("Where", [keep, g.const(0.0), g.const(-np.inf)])])
    p = g.node("Softmax", [s], axis=-1)
    p = g.node("Where", [g.node("IsNaN", [p]), g.init(0.0), p])
    model = g.model(g.merge(g.node("MatMul", [p, v])), mask=padding)
    model.doc_string = "empty row" if padding else ""
    return model


def _session(model, level="all", disabled=None) -> InferenceSession:
    options = SessionOptions()
    options.graph_optimization_level = level
    return InferenceSession(model.SerializeToString(), options, disabled_optimizers=disabled)


def _feed(model) -> dict:
    dtype = helper.tensor_dtype_to_np_dtype(model.graph.input[0].type.tensor_type.elem_type)
    feed = {"x": np.random.default_rng(5).standard_normal((B, S, E)).astype(dtype)}
    for i in model.graph.input[1:]:
        if i.name != "mask":
            shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
            feed[i.name] = np.random.default_rng(6).standard_normal(shape).astype(dtype)
    if "mask" in {i.name for i in model.graph.input}:
        second = [0] * S if model.doc_string == "empty row" else [1] * (S - 2) + [0] * 2
        feed["mask"] = np.array([[1] * S, second], np.int64)
    return feed


_REFERENCES: dict = {}
_LAST: list = []  # the session ``_check`` ran last


def _reference(model, which: str) -> list:
    """The outputs of ``model`` for ``_feed`` at the ``disable`` level or by onnxruntime's CPU
    provider (computed once per model)."""
    key = (model.SerializeToString(), which)
    if key not in _REFERENCES:
        if which == "disable":
            out = _session(model, "disable").run(None, _feed(model))
        else:
            ref = ort.InferenceSession(key[0], providers=["CPUExecutionProvider"])
            out = ref.run(None, _feed(model))
        _REFERENCES[key] = out
    return _REFERENCES[key]


def _attention_nodes(s: InferenceSession) -> list:
    program = list(s._programs.values())[-1]
    return [n for n in program.imported.graph.nodes if "ATTENTION" in n.operator_type]


def _check(model, fired: int, level="all", disabled=None, tol=1e-5, onnxruntime=True):
    """The outputs at ``level`` equal those at ``disable`` (and onnxruntime's); AttentionFusion
    fired ``fired`` times. Returns the attention nodes."""
    feed = _feed(model)
    s = _session(model, level, disabled)
    got = s.run(None, feed)
    for a, b in zip(got, _reference(model, "disable")):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
    if onnxruntime:
        for a, b in zip(got, _reference(model, "onnxruntime")):
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
    program = list(s._programs.values())[-1]
    assert dict(program.imported.optimizations).get("AttentionFusion", 0) == fired
    _LAST[:] = [s]
    return _attention_nodes(s)


# ---------------------------------------------------------------------------------------------
# What fires


@pytest.mark.parametrize("two_transposes", [False, True])
def test_torchscript_encoder_with_padding_mask(two_transposes, rng):
    (node,) = _check(_torchscript(rng, two_transposes=two_transposes), 1)
    assert node.operator_type == "DML_OPERATOR_MULTIHEAD_ATTENTION"
    assert node.head_count == H and node.scale == pytest.approx(1 / math.sqrt(D))
    # the computed padding mask is the relative position bias, broadcast over heads and rows
    assert node.mask_type.name == "NONE"
    assert node.relative_position_bias_tensor.strides == (S, 0, 0, 1)


def test_torchscript_causal_where_becomes_a_boolean_mask(rng):
    (node,) = _check(_torchscript(rng, mask=False, causal=True), 1)
    # Where(tril, w, lowest): every row keeps a key, so lowest acts as -inf (cuDNN's causal mode)
    assert node.mask_type.name == "BOOLEAN" and node.mask_filter_value == -math.inf
    assert node.mask_tensor.strides == (0, 0, S, 1)
    # with a padding mask as well (a bias that could take a row's kept keys away): lowest kept
    (node,) = _check(_torchscript(rng, causal=True), 1)
    assert node.mask_type.name == "BOOLEAN" and node.mask_filter_value == F32_LOWEST
    assert node.relative_position_bias_tensor is not None


@pytest.mark.parametrize("past", [0, 3])
def test_three_dimensional_products_and_a_key_value_cache(past, rng):
    (node,) = _check(_bmm(rng, past), 1)
    assert node.head_count == H and node.key_tensor.sizes == (B, S + past, E)


def test_dynamo_sdpa_decomposition(rng):
    (node,) = _check(_dynamo(rng), 1)
    # sqrt(scale) is an initializer: multiplied into Q and K where they are laid out for the
    # node, which then has scale 1; the causal initializer is the relative position bias
    assert node.scale == 1.0 and node.relative_position_bias_tensor is not None
    assert node.query_tensor.sizes == (B, S, E)


def test_dynamo_padding_mask_with_an_empty_row(rng):
    # a run-time -inf mask: rows without a key are NaN in the softmax, zeroed by the guard; the
    # guard (its 0 an initializer) is applied to the attention's output instead
    model = _dynamo(rng, causal=False, padding=True)
    (node,) = _check(model, 1)
    assert node.relative_position_bias_tensor.strides == (S, 0, 0, 1)
    ops = list(_LAST[0]._programs.values())[-1].operators()
    assert {"ELEMENT_WISE_IS_NAN", "REDUCE", "ELEMENT_WISE_IF"} <= set(ops)


def test_dynamo_grouped_key_value_heads(rng):
    (node,) = _check(_dynamo(rng, kv_heads=1), 1)
    assert node.operator_type == "DML_OPERATOR_MULTIHEAD_ATTENTION1"
    assert (node.query_head_count, node.key_value_head_count) == (H, 1)
    assert node.key_tensor.sizes == (B, S, D)


def test_float16(rng):
    (node,) = _check(_torchscript(rng, np.float16, causal=True), 1, tol=4e-3, onnxruntime=False)
    assert node.output_tensor.data_type.name == "FLOAT16"
    _check(_dynamo(rng, np.float16, kv_heads=1), 1, tol=4e-3, onnxruntime=False)
    _check(_torchscript(rng, np.float16, upcast=True), 1, tol=4e-3, onnxruntime=False)
    # the probabilities' exact round trip through float32 (CastChainElimination removes it)
    _check(_torchscript(rng, np.float16, round_trip=True), 1, tol=4e-3, onnxruntime=False)
    _check(_torchscript(rng, np.float16, round_trip=True), 0, tol=4e-3, onnxruntime=False,
           disabled=["CastChainElimination"])  # fmt: skip


def test_apply_replaces_the_scale_parameter(rng):
    model = _dynamo(rng, causal=False)
    root = next(i.name for i in model.graph.initializer if i.dims == [])
    x = _feed(model)["x"]
    params = {root: np.float32(0.7)}
    got = jax.jit(_session(model).apply)(params, x)
    want = jax.jit(_session(model, "disable").apply)(params, x)
    np.testing.assert_allclose(np.asarray(got[0]), np.asarray(want[0]), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# What must not fire


def _edit(model, op_type: str, **attrs):
    for n in model.graph.node:
        if n.op_type == op_type:
            for k, v in attrs.items():
                n.attribute.remove(next(a for a in n.attribute if a.name == k))
                n.attribute.append(helper.make_attribute(k, v))
    return model


@pytest.mark.parametrize("op_type", ["Softmax", "Div"])
def test_not_fused_with_a_second_reader_of_the_probabilities_or_logits(op_type, rng):
    model = _torchscript(rng, mask=False)
    value = next(n.output[0] for n in model.graph.node if n.op_type == op_type)
    model.graph.output.append(helper.make_tensor_value_info(value, TensorProto.FLOAT, None))
    assert _check(model, 0) == []


def test_not_fused_over_another_softmax_axis(rng, caplog):
    with caplog.at_level(logging.DEBUG, logger=attention.__name__):
        assert _check(_edit(_torchscript(rng), "Softmax", axis=2), 0) == []
    # the reason is logged (DEBUG, the module's logger)
    assert "not fused: a softmax over another axis than the last" in caplog.text


def test_not_fused_with_the_mask_added_before_the_scale(rng):
    model = _torchscript(rng)
    nodes = list(model.graph.node)
    div = next(n for n in nodes if n.op_type == "Div")
    add = next(n for n in nodes if n.op_type == "Add" and n.input[0] == div.output[0])
    # MatMul -> Add(mask) -> Div -> Softmax
    scores, mask = div.input[0], add.input[1]
    add.input[0], add.input[1], add.output[0] = scores, mask, "masked"
    div.input[0], div.output[0] = "masked", "scaled"
    softmax = next(n for n in nodes if n.op_type == "Softmax")
    softmax.input[0] = "scaled"
    del model.graph.node[:]
    order = [n for n in nodes if n is not div]
    order.insert(order.index(add) + 1, div)
    model.graph.node.extend(order)
    assert _check(model, 0) == []


def test_not_fused_with_a_finite_where_fill_or_a_run_time_condition(rng):
    model = _torchscript(rng, mask=False, causal=True)
    fill = next(n for n in model.graph.node if n.op_type == "Where").input[2]
    const = next(n for n in model.graph.node if n.output[0] == fill)
    const.attribute[0].t.CopyFrom(numpy_helper.from_array(np.array(-1.0, np.float32), fill))
    assert _check(model, 0) == []
    # the condition from an input (a boolean mask computed at run time)
    g = _Builder(rng)
    q, k, v = (g.heads_first(g.project()) for _ in range(3))
    s = g.node("MatMul", [q, g.node("Transpose", [k], perm=[0, 1, 3, 2])])
    keep = g.node("Cast", [g.node("Unsqueeze", ["mask", g.const(np.array([1, 2], np.int64))])],
                  to=TensorProto.BOOL)  # fmt: skip
    s = g.node("Where", [keep, s, g.const(-np.inf)])
    p = g.node("Softmax", [s], axis=-1)
    assert _check(g.model(g.merge(g.node("MatMul", [p, v])), mask=True), 0) == []


def test_only_attention_over_enough_keys_is_fused(monkeypatch, rng, caplog):
    """Below MIN_KEYS keys the subgraph stays as it is (the unfused program is the faster one);
    at MIN_KEYS it is fused."""
    assert MIN_KEYS == 128
    monkeypatch.setattr(attention, "MIN_KEYS", MIN_KEYS)
    with caplog.at_level(logging.DEBUG, logger=attention.__name__):
        assert _check(_torchscript(rng), 0, onnxruntime=False) == []
    assert "not fused: fewer keys than MIN_KEYS" in caplog.text
    monkeypatch.setitem(globals(), "S", MIN_KEYS)
    (node,) = _check(_torchscript(rng), 1, onnxruntime=False)
    assert node.key_tensor.sizes == (B, MIN_KEYS, E)


def test_one_query_position_is_fused_at_any_length(monkeypatch, rng, caplog):
    """A decode step (one query position) over 4 keys is fused under the default thresholds;
    two query positions over 5 keys are not."""
    monkeypatch.setattr(attention, "MIN_KEYS", MIN_KEYS)
    monkeypatch.setitem(globals(), "S", 1)
    (node,) = _check(_bmm(rng, 3), 1)
    assert node.key_tensor.sizes == (B, 4, E) and node.query_tensor.sizes == (B, 1, E)
    monkeypatch.setitem(globals(), "S", 2)
    with caplog.at_level(logging.DEBUG, logger=attention.__name__):
        assert _check(_bmm(rng, 3), 0, onnxruntime=False) == []
    assert "not fused: fewer keys than MIN_KEYS" in caplog.text


def test_levels_and_switch(rng):
    model = _torchscript(rng)
    assert _check(model, 0, level="basic", onnxruntime=False) == []
    assert _check(model, 0, disabled=["AttentionFusion"], onnxruntime=False) == []


# ---------------------------------------------------------------------------------------------
# Strided views


def _offsets(sizes, strides):
    grids = np.meshgrid(*[np.arange(n) for n in sizes], indexing="ij")
    return sum(g * s for g, s in zip(grids, strides))


def _factors(count: int, k: int, rng) -> tuple[int, ...]:
    out = []
    for _ in range(k - 1):
        d = int(rng.choice([d for d in range(1, count + 1) if count % d == 0]))
        out.append(d)
        count //= d
    return (*out, count)


def test_view_composition_and_reshape_match_numpy():
    rng = np.random.default_rng(3)
    checked = 0
    for trial in range(400):
        # X -> Y: a transpose of a packed X (Y's element i is at sum(i * ys) of X), or a
        # broadcast of one axis (stride 0, as Expand reads)
        x_shape = tuple(int(n) for n in rng.integers(1, 4, 4))
        perm = rng.permutation(4)
        ys_sizes = tuple(x_shape[p] for p in perm)
        xs = packed_strides(x_shape)
        y_axes = [[(n, xs[p] if n > 1 else 0)] for n, p in zip(ys_sizes, perm)]
        if trial % 3 == 0:
            j = int(rng.integers(4))
            y_axes[j] = [(ys_sizes[j], 0)]
        count = math.prod(ys_sizes)
        if trial % 4 == 0:  # a permutation of Y's own axes: always strided
            order = rng.permutation(4)
            view_sizes = tuple(ys_sizes)
            vs = packed_strides(view_sizes)
        else:  # a reshape of Y into 2 or 3 axes, then a permutation
            view_sizes = _factors(count, int(rng.integers(2, 4)), rng)
            vs = packed_strides(view_sizes)
            order = rng.permutation(len(view_sizes))
        view = [[(view_sizes[o], vs[o] if view_sizes[o] > 1 else 0)] for o in order]
        composed = compose(view, ys_sizes, y_axes)
        # brute force: the X offset of each element of the view
        y_off = _offsets([view_sizes[o] for o in order], [vs[o] for o in order])
        y_index = np.unravel_index(y_off, ys_sizes)
        want = sum(i * ax[0][1] for i, ax in zip(y_index, y_axes))
        if composed is None:
            assert trial % 4, "a permutation of Y's axes must compose"
            continue  # not every view is strided; those that are must be right
        sizes = [n for axes in composed for n, _ in axes]
        strides = [t for axes in composed for _, t in axes]
        np.testing.assert_array_equal(_offsets(sizes, strides).reshape(want.shape), want)
        checked += 1
        # reshaped_strides: the composed first axis read as two axes, where it can be
        first = composed[0]
        n = math.prod(k for k, _ in first)
        whole = _offsets([k for k, _ in first], [t for _, t in first]).reshape(-1)
        for d in (d for d in range(1, n + 1) if n % d == 0):
            split = reshaped_strides(first, (d, n // d))
            if split is not None:
                np.testing.assert_array_equal(_offsets((d, n // d), split).reshape(-1), whole)
    assert checked > 150


def test_a_fused_causal_mask_is_known_to_the_lowering(monkeypatch, rng):
    """GPT-2's Where(tril, ...) fused into a BOOLEAN mask reaches MULTIHEAD_ATTENTION's lax
    lowering as a constant it recognizes as causal, which then computes only the tiles on and
    below the diagonal (``ops.attention.causal_blocks``); the outputs are onnxruntime's."""
    from dml_jax.ops import attention as A

    monkeypatch.setattr(A, "CAUSAL_MIN_ROWS", 2)
    seen = []
    blocks = A.causal_blocks
    monkeypatch.setattr(A, "causal_blocks", lambda d, g: seen.append(blocks(d, g)) or seen[-1])
    (node,) = _check(_torchscript(rng, mask=False, causal=True), 1)
    assert node.mask_type.name == "BOOLEAN"
    if seen:  # the lax lowering ran (not a GPU's fused attention)
        assert set(seen) == {min(A.CAUSAL_BLOCKS, S // 2)}  # 3 blocks of the 6 tokens
    else:
        assert jax.default_backend() != "cpu"
