"""ONNX types no DML tensor holds (bfloat16, float8, the 4-bit integers...): held in a carrier
DML type and rounded once per node (docs/semantics.md, "Types no DML tensor holds"). ONNX's
backend cases test Cast, QuantizeLinear and single ops; these test what a chain of nodes shows:
where rounding happens and where it must not."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

pytest.importorskip("onnx")
from onnx import TensorProto, helper

from dml_jax.onnx import InferenceSession

BF16 = ml_dtypes.bfloat16


def _model(nodes, inputs, outputs, opset=21):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)]
    ).SerializeToString()


def _info(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def test_each_node_rounds_its_bfloat16_result():
    # (x + y) - y with x = 1 and y = 2^-8: 1 + 2^-8 is not a bfloat16 (8 significant bits), so
    # the sum rounds to 1 (ties to even) and the difference is 1 - 2^-8; computed in float32
    # without the rounding between the nodes it would be 1.
    nodes = [helper.make_node("Add", ["x", "y"], ["s"]), helper.make_node("Sub", ["s", "y"], ["z"])]
    model = _model(nodes, [_info("x", TensorProto.BFLOAT16, [2]),
                           _info("y", TensorProto.BFLOAT16, [2])],
                   [_info("z", TensorProto.BFLOAT16, [2])])  # fmt: skip
    x = np.array([1.0, 3.0], BF16)
    y = np.array([2.0**-8, 2.0**-8], BF16)
    (z,) = InferenceSession(model).run(None, {"x": x, "y": y})
    assert z.dtype == BF16
    expected = ((x.astype(np.float32) + y.astype(np.float32)).astype(BF16).astype(np.float32)
                - y.astype(np.float32)).astype(BF16)  # fmt: skip
    np.testing.assert_array_equal(z.astype(np.float32), expected.astype(np.float32))
    assert z.astype(np.float32)[0] == 1.0 - 2.0**-8


def test_a_value_cast_out_of_bfloat16_is_not_rounded_again():
    # Cast to FLOAT: the float32 sum after it keeps float32's precision.
    nodes = [
        helper.make_node("Cast", ["x"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["f", "e"], ["z"]),
    ]
    model = _model(nodes, [_info("x", TensorProto.BFLOAT16, [1]),
                           _info("e", TensorProto.FLOAT, [1])],
                   [_info("z", TensorProto.FLOAT, [1])])  # fmt: skip
    (z,) = InferenceSession(model).run(None, {"x": np.array([1.0], BF16),
                                              "e": np.array([2.0**-12], np.float32)})  # fmt: skip
    assert z.dtype == np.float32 and z[0] == np.float32(1.0 + 2.0**-12)


def test_int4_values_wrap_through_cast_and_dequantize_from_their_carrier():
    # Cast FLOAT -> INT4 truncates and wraps (ONNX's expected values); DequantizeLinear then
    # reads the int4 values (on DirectML's operator, from the int8 carrier).
    nodes = [
        helper.make_node("Cast", ["x"], ["q"], to=TensorProto.INT4),
        helper.make_node("DequantizeLinear", ["q", "s"], ["y"]),
    ]
    scale = helper.make_tensor("s", TensorProto.FLOAT, [], [0.5])
    graph = helper.make_graph(nodes, "g", [_info("x", TensorProto.FLOAT, [6])],
                              [_info("y", TensorProto.FLOAT, [6]),
                               _info("q", TensorProto.INT4, [6])], [scale])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    x = np.array([-9.5, -8.0, 7.9, 8.0, 15.0, 2.5], np.float32)
    y, q = InferenceSession(model.SerializeToString()).run(None, {"x": x})
    assert q.dtype == ml_dtypes.int4
    np.testing.assert_array_equal(q.astype(np.int8), [7, -8, 7, -8, -1, 2])
    np.testing.assert_array_equal(y, np.array([7, -8, 7, -8, -1, 2], np.float32) * 0.5)


def test_float8_results_of_an_if_keep_their_type():
    # Both branches give float8; the Mul after the If rounds its product to float8 (which the
    # Cast to FLOAT after it shows: an untyped If result would leave the float32 product).
    then_g = helper.make_graph([helper.make_node("Identity", ["a"], ["t"])], "then", [],
                               [_info("t", TensorProto.FLOAT8E4M3FN, [2])])  # fmt: skip
    else_g = helper.make_graph([helper.make_node("Neg", ["a"], ["e"])], "else", [],
                               [_info("e", TensorProto.FLOAT8E4M3FN, [2])])  # fmt: skip
    nodes = [
        helper.make_node("Cast", ["x"], ["a"], to=TensorProto.FLOAT8E4M3FN),
        helper.make_node("If", ["c"], ["r"], then_branch=then_g, else_branch=else_g),
        helper.make_node("Mul", ["r", "r"], ["m"]),
        helper.make_node("Cast", ["m"], ["z"], to=TensorProto.FLOAT),
    ]
    model = _model(nodes, [_info("x", TensorProto.FLOAT, [2]), _info("c", TensorProto.BOOL, [])],
                   [_info("z", TensorProto.FLOAT, [2])])  # fmt: skip
    session = InferenceSession(model)
    x = np.array([1.1, 3.3], np.float32)
    for c in (True, False):
        (z,) = session.run(None, {"x": x, "c": np.array(c)})
        a = x.astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
        expected = (a * a).astype(ml_dtypes.float8_e4m3fn)
        assert z.dtype == np.float32
        np.testing.assert_array_equal(z, expected.astype(np.float32))
        assert not np.array_equal(z, a * a)
