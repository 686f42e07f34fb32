"""The subgraphs PyTorch's exporters write, built small with ``onnx.helper``, through
``InferenceSession`` with their dimensions left symbolic, against onnxruntime's CPU provider:
shape chains feeding Reshape, causal and padding attention masks (with the SDPA export's
all-masked-row guard), TF-style "same" padding computed from the input's shape, grouped-KV head
repeat, and rotary position embeddings."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper

from dml_jax.onnx import InferenceSession

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _c(name, value, dtype=np.int64):
    return numpy_helper.from_array(np.asarray(value, dtype), name)


def _model(nodes, inputs, outputs, inits, opset=17):
    graph = helper.make_graph(nodes, "pattern", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _check(model, feed, rtol=1e-5, atol=1e-5):
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    wants = s.run(None, feed)
    gots = InferenceSession(model).run(None, feed)
    for g, w in zip(gots, wants):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def _dim(node_prefix, tensor, index, out):
    """Shape -> Gather(index) -> Unsqueeze: one dimension as a 1-D int64 tensor."""
    return [
        helper.make_node("Shape", [tensor], [f"{node_prefix}_s"]),
        helper.make_node("Gather", [f"{node_prefix}_s", f"i{index}"], [f"{node_prefix}_g"]),
        helper.make_node("Unsqueeze", [f"{node_prefix}_g", "ax0"], [out]),
    ]


def attention_with_masks(rng):
    """q, k, v from x, split into heads by a Shape-chain Reshape; a causal mask from Range /
    Less / Where plus a padding mask from an int64 attention mask; SDPA's guard
    (IsNaN -> Where) against rows that are all masked; heads merged back."""
    d, h = 16, 4
    nodes = (
        _dim("b", "x", 0, "B")
        + _dim("t", "x", 1, "T")
        + [
            helper.make_node("Concat", ["B", "T", "H", "HD"], ["heads_shape"], axis=0),
            helper.make_node("MatMul", ["x", "wq"], ["q0"]),
            helper.make_node("MatMul", ["x", "wk"], ["k0"]),
            helper.make_node("MatMul", ["x", "wv"], ["v0"]),
            helper.make_node("Reshape", ["q0", "heads_shape"], ["q1"]),
            helper.make_node("Reshape", ["k0", "heads_shape"], ["k1"]),
            helper.make_node("Reshape", ["v0", "heads_shape"], ["v1"]),
            helper.make_node("Transpose", ["q1"], ["q"], perm=[0, 2, 1, 3]),
            helper.make_node("Transpose", ["k1"], ["kt"], perm=[0, 2, 3, 1]),
            helper.make_node("Transpose", ["v1"], ["v"], perm=[0, 2, 1, 3]),
            helper.make_node("MatMul", ["q", "kt"], ["s0"]),
            helper.make_node("Mul", ["s0", "scale"], ["s1"]),
            # causal: key position > query position is masked
            helper.make_node("Squeeze", ["T", "ax0"], ["t_scalar"]),
            helper.make_node("Range", ["zero", "t_scalar", "one"], ["pos"]),
            helper.make_node("Unsqueeze", ["pos", "ax1"], ["rows"]),
            helper.make_node("Less", ["rows", "pos"], ["future"]),
            # padding: attention_mask == 0 is masked, broadcast over heads and queries
            helper.make_node("Equal", ["mask", "zero"], ["pad0"]),
            helper.make_node("Unsqueeze", ["pad0", "ax12"], ["pad"]),
            helper.make_node("Or", ["future", "pad"], ["masked"]),
            helper.make_node("Where", ["masked", "neg_inf", "s1"], ["s2"]),
            helper.make_node("Softmax", ["s2"], ["p0"], axis=-1),
            helper.make_node("IsNaN", ["p0"], ["nan"]),
            helper.make_node("Where", ["nan", "fzero", "p0"], ["p"]),
            helper.make_node("MatMul", ["p", "v"], ["o0"]),
            helper.make_node("Transpose", ["o0"], ["o1"], perm=[0, 2, 1, 3]),
            helper.make_node("Concat", ["B", "T", "minus_one"], ["merged_shape"], axis=0),
            helper.make_node("Reshape", ["o1", "merged_shape"], ["y"]),
        ]
    )
    # Weights scaled by 1 / sqrt(d), as a layer's are initialised: outputs of unscaled ones
    # reach 10, where float32 rounding alone (onnxruntime's as well) leaves 1e-5 on an output
    # near zero, the tolerance of ``_check``.
    inits = [
        numpy_helper.from_array((rng.normal(size=(d, d)) / np.sqrt(d)).astype(np.float32), n)
        for n in ("wq", "wk", "wv")
    ] + [
        _c("i0", 0), _c("i1", 1), _c("ax0", [0]), _c("ax1", [1]), _c("ax12", [1, 2]),
        _c("H", [h]), _c("HD", [d // h]), _c("minus_one", [-1]), _c("zero", 0), _c("one", 1),
        _c("scale", 1 / np.sqrt(d // h), np.float32), _c("neg_inf", -np.inf, np.float32),
        _c("fzero", 0.0, np.float32),
    ]  # fmt: skip
    return _model(
        nodes,
        [
            helper.make_tensor_value_info("x", F, ["batch", "seq", d]),
            helper.make_tensor_value_info("mask", I64, ["batch", "seq"]),
        ],
        [helper.make_tensor_value_info("y", F, ["batch", "seq", d])],
        inits,
    )


@pytest.mark.parametrize("batch, seq", [(2, 5), (1, 7)])
def test_attention_masks_and_shape_chains(batch, seq, rng):
    x = rng.normal(size=(batch, seq, 16)).astype(np.float32)
    mask = np.ones((batch, seq), np.int64)
    mask[0, -2:] = 0
    if batch > 1:
        mask[1, :] = 0  # every key masked: the IsNaN guard makes the row zeros
    _check(attention_with_masks(rng), {"x": x, "mask": mask})


def tf_same_padding(rng):
    """TensorFlow-style "same" padding of a stride-2 3x3 convolution, its pads computed from the
    input's shape: pad = max((ceil(n / s) - 1) * s + k - n, 0), split begin / end."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Slice", ["shape", "two", "four"], ["hw"]),
        helper.make_node("Cast", ["hw"], ["hwf"], to=F),
        helper.make_node("Div", ["hwf", "stride_f"], ["q"]),
        helper.make_node("Ceil", ["q"], ["qc"]),
        helper.make_node("Cast", ["qc"], ["qi"], to=I64),
        helper.make_node("Sub", ["qi", "one"], ["q1"]),
        helper.make_node("Mul", ["q1", "stride"], ["q2"]),
        helper.make_node("Add", ["q2", "kernel"], ["q3"]),
        helper.make_node("Sub", ["q3", "hw"], ["q4"]),
        helper.make_node("Max", ["q4", "zero"], ["total"]),
        helper.make_node("Div", ["total", "two_s"], ["begin"]),
        helper.make_node("Sub", ["total", "begin"], ["end"]),
        helper.make_node("ConstantOfShape", ["two_1d"], ["nc"], value=helper.make_tensor("v", I64, [1], [0])),
        helper.make_node("Concat", ["nc", "begin", "nc", "end"], ["pads"], axis=0),
        helper.make_node("Pad", ["x", "pads", "pad_value"], ["xp"], mode="constant"),
        helper.make_node("Conv", ["xp", "w"], ["y"], strides=[2, 2]),
    ]  # fmt: skip
    inits = [
        _c("two", [2]), _c("four", [4]), _c("stride_f", [2.0, 2.0], np.float32),
        _c("one", 1), _c("stride", [2, 2]), _c("kernel", [3, 3]), _c("zero", 0), _c("two_s", 2),
        _c("two_1d", [2]), _c("pad_value", 0.0, np.float32),
        numpy_helper.from_array(rng.normal(size=(4, 3, 3, 3)).astype(np.float32), "w"),
    ]  # fmt: skip
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", F, ["n", 3, "h", "w"])],
        [helper.make_tensor_value_info("y", F, ["n", 4, "oh", "ow"])],
        inits,
    )


@pytest.mark.parametrize("shape", [(1, 3, 9, 10), (2, 3, 8, 7)])
def test_tf_same_padding_from_the_input_shape(shape, rng):
    _check(tf_same_padding(rng), {"x": rng.normal(size=shape).astype(np.float32)}, rtol=1e-4)


def grouped_kv_rotary():
    """LLaMA-style attention inputs: rotary embeddings (cos / sin of position x frequency,
    rotate-half by Slice / Neg / Concat) on q and k, and k's 2 KV heads repeated to 4 query heads
    by Unsqueeze -> Expand -> Reshape."""
    hd = 8
    nodes = (
        _dim("t", "q", 2, "T")
        + _dim("b", "q", 0, "B")
        + [
            helper.make_node("Squeeze", ["T", "ax0"], ["t_scalar"]),
            helper.make_node("Range", ["zero", "t_scalar", "one"], ["pos_i"]),
            helper.make_node("Cast", ["pos_i"], ["pos"], to=F),
            helper.make_node("Unsqueeze", ["pos", "ax1"], ["pos_col"]),
            helper.make_node("Mul", ["pos_col", "inv_freq"], ["freqs"]),
            helper.make_node("Concat", ["freqs", "freqs"], ["emb"], axis=-1),
            helper.make_node("Cos", ["emb"], ["cos"]),
            helper.make_node("Sin", ["emb"], ["sin"]),
        ]
    )
    for name in ("q", "k"):
        nodes += [
            helper.make_node("Slice", [name, "h0", "h1", "ax3"], [f"{name}_a"]),
            helper.make_node("Slice", [name, "h1", "h2", "ax3"], [f"{name}_b"]),
            helper.make_node("Neg", [f"{name}_b"], [f"{name}_nb"]),
            helper.make_node("Concat", [f"{name}_nb", f"{name}_a"], [f"{name}_rot"], axis=-1),
            helper.make_node("Mul", [name, "cos"], [f"{name}_c"]),
            helper.make_node("Mul", [f"{name}_rot", "sin"], [f"{name}_s"]),
            helper.make_node("Add", [f"{name}_c", f"{name}_s"], [f"{name}_r"]),
        ]
    nodes += [
        helper.make_node("Unsqueeze", ["k_r", "ax2"], ["k5"]),
        helper.make_node("Concat", ["B", "kv", "rep", "T", "HD"], ["exp_shape"], axis=0),
        helper.make_node("Expand", ["k5", "exp_shape"], ["k_exp"]),
        helper.make_node("Concat", ["B", "heads", "T", "HD"], ["k_shape"], axis=0),
        helper.make_node("Reshape", ["k_exp", "k_shape"], ["k_rep"]),
        helper.make_node("Transpose", ["k_rep"], ["k_t"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q_r", "k_t"], ["scores"]),
    ]
    inv = 1.0 / (10000 ** (np.arange(0, hd, 2) / hd))
    inits = [
        _c("zero", 0), _c("one", 1), _c("ax0", [0]), _c("ax1", [1]), _c("ax2", [2]), _c("ax3", [3]),
        _c("i0", 0), _c("i2", 2), _c("inv_freq", inv, np.float32), _c("h0", [0]), _c("h1", [hd // 2]),
        _c("h2", [hd]), _c("kv", [2]), _c("rep", [2]), _c("HD", [hd]), _c("heads", [4]),
    ]  # fmt: skip
    return _model(
        nodes,
        [
            helper.make_tensor_value_info("q", F, ["batch", 4, "seq", hd]),
            helper.make_tensor_value_info("k", F, ["batch", 2, "seq", hd]),
        ],
        [helper.make_tensor_value_info("scores", F, ["batch", 4, "seq", "seq"])],
        inits,
    )


@pytest.mark.parametrize("batch, seq", [(1, 6), (2, 3)])
def test_grouped_kv_repeat_and_rotary_embeddings(batch, seq, rng):
    q = rng.normal(size=(batch, 4, seq, 8)).astype(np.float32)
    k = rng.normal(size=(batch, 2, seq, 8)).astype(np.float32)
    _check(grouped_kv_rotary(), {"q": q, "k": k}, rtol=1e-4, atol=1e-4)
