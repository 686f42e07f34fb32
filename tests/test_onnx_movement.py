"""The data-movement converters (``dml_jax/onnx/converters/movement.py``) through
``InferenceSession``, where ONNX's node tests (``test_onnx_backend.py``) leave gaps: older
opsets (attributes that later became inputs), DirectML-specific lowerings (negative pads
cropped by a SLICE1 before PADDING1, Expand as a stride-0 identity, views without a node) and
results with an empty dimension (known at import, since DML tensors are never empty).

Each model is built with ``onnx.helper`` and compared with ONNX Runtime's CPU provider (skipped
without onnxruntime) or with NumPy where ONNX's reference has no answer.
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper

import dml_jax as dml
from dml_jax.onnx import InferenceSession

TYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int32): TensorProto.INT32,
         np.dtype(np.int64): TensorProto.INT64, np.dtype(np.bool_): TensorProto.BOOL,
         np.dtype(np.float16): TensorProto.FLOAT16, np.dtype(np.uint8): TensorProto.UINT8}  # fmt: skip


def _model(node, feeds, outputs, opset, inits=()):
    """A one-node model whose inputs are ``feeds`` (name -> array) and initializers ``inits``."""
    inputs = [helper.make_tensor_value_info(k, TYPES[v.dtype], v.shape) for k, v in feeds.items()]
    outs = [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs]
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in dict(inits).items()]
    graph = helper.make_graph([node], "g", inputs, outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    model = onnx.shape_inference.infer_shapes(model)
    return model


def _session(model, feeds):
    """The session's outputs and the DML operator types of its program."""
    s = InferenceSession(model)
    got = s.run(None, feeds)
    program = s.program([np.shape(feeds[i.name]) for i in s.get_inputs()], feeds)
    return got, program.operators()


def _reference(model, feeds):
    ort = pytest.importorskip("onnxruntime")
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


def _check(node, feeds, opset, inits=(), outputs=("y",)):
    model = _model(node, feeds, outputs, opset, inits)
    got, ops = _session(model, feeds)
    for g, w in zip(got, _reference(model, feeds), strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_array_equal(g, w)
    return ops


def _fixed_input() -> np.ndarray:
    """The input of the Pad and Slice cases: the same array in every test and every run."""
    return np.random.default_rng(11).normal(size=(2, 3, 4, 5)).astype(np.float32)


X = _fixed_input()


# --- Pad ------------------------------------------------------------------------------------


@pytest.mark.parametrize("opset", [7, 10])
@pytest.mark.parametrize("mode", ["constant", "edge", "reflect"])
def test_pad_2_attributes(opset, mode):
    node = helper.make_node(
        "Pad", ["x"], ["y"], mode=mode, pads=[0, 1, 2, 0, 0, 2, 1, 1], value=1.5
    )
    assert _check(node, {"x": X}, opset) == ["PADDING1"]


def test_pad_negative_pads_crop_before_padding():
    """PADDING1's paddings are unsigned: the negative ones become a SLICE1 of the input, and
    the padding applies to what is left (reflecting the cropped data, as ONNX Runtime does)."""
    x = np.arange(2 * 7, dtype=np.float32).reshape(2, 7)
    pads = np.asarray([0, -2, 1, 1], np.int64)  # start: (0, -2), end: (1, 1)
    node = helper.make_node("Pad", ["x", "pads"], ["y"], mode="reflect")
    model = _model(node, {"x": x}, ["y"], 18, {"pads": pads})
    got, ops = _session(model, {"x": x})
    assert ops == ["SLICE1", "PADDING1"]
    np.testing.assert_array_equal(got[0], np.pad(x[:, 2:], [(0, 1), (0, 1)], mode="reflect"))


def test_pad_int_constant_value_and_axes_initializers(rng):
    x = rng.integers(-9, 9, size=(3, 4)).astype(np.int32)
    node = helper.make_node("Pad", ["x", "pads", "v", "axes"], ["y"])
    inits = {"pads": np.asarray([2, 3], np.int64), "v": np.asarray(-7, np.int32),
             "axes": np.asarray([-1], np.int64)}  # fmt: skip
    assert _check(node, {"x": x}, 18, inits) == ["PADDING1"]


def test_pad_wrap_with_pads_from_a_graph_input(rng):
    """pads as a graph input: the session specialises on its values."""
    x = rng.integers(0, 9, size=(3, 4)).astype(np.int32)
    pads = np.asarray([1, 2, 2, 3], np.int64)
    node = helper.make_node("Pad", ["x", "pads"], ["y"], mode="wrap")
    model = _model(node, {"x": x, "pads": pads}, ["y"], 19)
    got, ops = _session(model, {"x": x, "pads": pads})
    assert ops == ["PADDING1"]
    np.testing.assert_array_equal(got[0], np.pad(x, [(1, 2), (2, 3)], mode="wrap"))


# --- Slice, Split, views --------------------------------------------------------------------


def test_slice_1_attributes():
    node = helper.make_node("Slice", ["x"], ["y"], starts=[1, -3], ends=[1000, -1], axes=[1, 3])
    assert _check(node, {"x": X}, 9) == ["SLICE1"]


@pytest.mark.parametrize(
    "starts, ends, steps",
    [
        ([-1, 4], [-(2**63), -(2**63)], [-1, -2]),  # negative steps to the very start
        ([0, 1], [2**63 - 1, 2**63 - 1], [2, 3]),  # INT64_MAX ends: to the end
        ([10, -10], [-10, 10], [-3, 1]),  # starts and ends clamped into the axis
    ],
)
def test_slice_steps_and_clamping(starts, ends, steps):
    node = helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["y"])
    inits = {"starts": np.asarray(starts), "ends": np.asarray(ends),
             "axes": np.asarray([2, -1]), "steps": np.asarray(steps)}  # fmt: skip
    assert _check(node, {"x": X}, 13, inits) == ["SLICE1"]


def test_slice_with_an_empty_result_is_known_at_import():
    node = helper.make_node("Slice", ["x", "starts", "ends"], ["y"])
    inits = {"starts": np.asarray([3]), "ends": np.asarray([1])}
    assert _check(node, {"x": X}, 13, inits) == []


@pytest.mark.parametrize(
    "opset, split, attrs",
    [
        (7, None, {"split": [1, 3]}),
        (11, None, {}),
        (13, [3, 1], {}),
        (18, None, {"num_outputs": 3}),
    ],
)
def test_split_across_opsets(opset, split, attrs, rng):
    # num_outputs 3 of 5: pieces of 2, 2 and 1 (onnxruntime 1.30 rejects 4 in 2, 2 and 0).
    x = rng.normal(size=(2, 5 if "num_outputs" in attrs else 4, 3)).astype(np.float32)
    count = attrs.get("num_outputs", 2)
    outs = [f"y{k}" for k in range(count)]
    inputs = ["x", "split"] if split else ["x"]
    node = helper.make_node("Split", inputs, outs, axis=1, **attrs)
    inits = {"split": np.asarray(split, np.int64)} if split else {}
    assert _check(node, {"x": x}, opset, inits, outs) == ["SPLIT"]


def test_split_with_an_empty_piece(rng):
    x = rng.normal(size=(2, 4)).astype(np.float32)
    node = helper.make_node("Split", ["x", "split"], ["a", "b", "c"], axis=1)
    inits = {"split": np.asarray([0, 4, 0], np.int64)}
    assert _check(node, {"x": x}, 13, inits, ["a", "b", "c"]) == []  # b is x itself


@pytest.mark.parametrize("opset", [7, 11])
def test_squeeze_and_unsqueeze_axes_attributes(opset, rng):
    x = rng.normal(size=(3, 1, 4)).astype(np.float32)
    for node in (
        helper.make_node("Squeeze", ["x"], ["y"], axes=[1]),
        helper.make_node("Unsqueeze", ["x"], ["y"], axes=[0, 3]),
    ):
        assert _check(node, {"x": x}, opset) == []  # a view: no node


def test_reshape_allowzero_and_flatten_views(rng):
    x = rng.normal(size=(2, 3, 4)).astype(np.float32)
    node = helper.make_node("Reshape", ["x", "shape"], ["y"], allowzero=0)
    assert _check(node, {"x": x}, 14, {"shape": np.asarray([0, -1, 2])}) == []
    # With allowzero a 0 is a zero-sized dimension, not a copy of the input's.
    node = helper.make_node("Reshape", ["x", "shape"], ["y"], allowzero=1)
    model = _model(node, {"x": x}, ["y"], 14, {"shape": np.asarray([0, 24])})
    with pytest.raises(dml.ValidationError, match=r"Reshape.*cannot reshape \[2, 3, 4\]"):
        InferenceSession(model).run(None, {"x": x})
    assert _check(helper.make_node("Flatten", ["x"], ["y"], axis=-1), {"x": x}, 11) == []


def test_transpose_of_size_1_axes_is_a_view(rng):
    x = rng.normal(size=(3, 1, 4)).astype(np.float32)
    node = helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0, 2])
    assert _check(node, {"x": x}, 13) == []


# --- Expand, Tile, depth and space ----------------------------------------------------------


def test_expand_is_an_identity_reading_stride_0(rng):
    x = rng.normal(size=(3, 1)).astype(np.float32)
    node = helper.make_node("Expand", ["x", "shape"], ["y"])
    model = _model(node, {"x": x}, ["y"], 13, {"shape": np.asarray([2, 1, 4], np.int64)})
    s = InferenceSession(model)
    (got,) = s.run(None, {"x": x})
    np.testing.assert_array_equal(got, np.broadcast_to(x, (2, 3, 4)))
    nodes = s.program([x.shape]).imported.graph.nodes
    expand = [n for n in nodes if n.input_tensor.sizes == (2, 3, 4)]
    assert expand and expand[0].input_tensor.strides == (0, 1, 0)


def test_expand_to_an_empty_shape_and_tile(rng):
    x = rng.integers(0, 5, size=(2, 3)).astype(np.int64)
    assert _check(helper.make_node("Expand", ["x", "s"], ["y"]), {"x": x}, 8,
                  {"s": np.asarray([0, 1, 3])}) == []  # fmt: skip
    assert _check(helper.make_node("Tile", ["x", "r"], ["y"]), {"x": x}, 6,
                  {"r": np.asarray([2, 3])}) == ["TILE"]  # fmt: skip


@pytest.mark.parametrize("opset", [7, 11, 13])
def test_depth_to_space_default_mode(opset, rng):
    x = rng.normal(size=(1, 8, 2, 3)).astype(np.float32)
    node = helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=2)
    assert _check(node, {"x": x}, opset) == ["DEPTH_TO_SPACE1"]
    node = helper.make_node("SpaceToDepth", ["x"], ["y"], blocksize=2)
    assert _check(node, {"x": x.reshape(1, 2, 4, 6)}, opset) == ["SPACE_TO_DEPTH1"]


def test_reverse_sequence_batch_axis_0_with_lengths_from_a_graph_input(rng):
    """The [batch] lengths are cast to UINT32 and read through stride 0 along the other
    dimensions (REVERSE_SUBSEQUENCES wants x's sizes with 1 along the time axis)."""
    x = rng.normal(size=(3, 5, 2)).astype(np.float32)
    lengths = np.asarray([5, 0, 3], np.int64)
    node = helper.make_node("ReverseSequence", ["x", "lens"], ["y"], batch_axis=0, time_axis=1)
    ops = _check(node, {"x": x, "lens": lengths}, 10)
    assert ops[-2:] == ["CAST", "REVERSE_SUBSEQUENCES"]


def test_col2im_1d(rng):
    x = rng.normal(size=(1, 6, 5)).astype(np.float32)
    node = helper.make_node("Col2Im", ["x", "image", "block"], ["y"], strides=[2], pads=[1, 2])
    model = _model(node, {"x": x}, ["y"], 18, {"image": [8], "block": [3]})
    got, ops = _session(model, {"x": x})
    assert ops == ["FOLD"]
    want = np.zeros((1, 2, 8 + 3), np.float32)  # padded image, columns added at stride 2
    for block in range(5):
        want[0, :, 2 * block : 2 * block + 3] += x[0, :, block].reshape(2, 3)
    np.testing.assert_allclose(got[0], want[:, :, 1:9], rtol=1e-6)


def test_pad_with_a_cropped_away_axis_names_the_node():
    node = helper.make_node("Pad", ["x", "pads"], ["y"], name="crop")
    model = _model(node, {"x": X}, ["y"], 18, {"pads": np.asarray([0, 0, -5, 1, 0, 0, 2, 0])})
    with pytest.raises(dml.ValidationError, match=r"'crop', Pad.*crop an axis"):
        InferenceSession(model).run(None, {"x": X})
