"""The element-wise converters' DirectML-specific choices, through ``InferenceSession`` on
``onnx.helper``-built models: which DML operators a node becomes (CONSTANT_POW for a constant
scalar exponent, CLIP or CLIP1 for constant bounds, MAX/MIN for run-time bounds, Mean's ADD loop
and scaled IDENTITY) and the ONNX rules the lowering has to restore (Clip with min > max, IsInf
detecting nothing, Cast to BOOL of 0.5, BitShift's arithmetic right shift of signed types).
ONNX's own node tests of these ops run in ``tests/test_onnx_backend.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

from dml_jax.onnx import InferenceSession

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper

F, I32, I64, U8 = TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64, TensorProto.UINT8


def _session(nodes, inputs, outputs, initializers=(), opset=21):
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in initializers],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    onnx.checker.check_model(model)
    return InferenceSession(model)


def _op_types(session, *shapes) -> set[str]:
    graph = session.program(shapes).imported.graph
    return {n.operator_type.removeprefix("DML_OPERATOR_") for n in graph.nodes}


X = np.array([[-2.0, -0.5, 0.0], [0.25, 1.5, 3.0]], np.float32)


@pytest.mark.parametrize(
    "exponent", [np.float32(2.0), np.array([3.0], np.float32), np.float32(-1.5)], ids=repr
)
def test_pow_with_a_constant_scalar_exponent_is_constant_pow(exponent):
    # ONNX Runtime's rule: an initializer exponent of one element (any shape that does not
    # widen x) becomes CONSTANT_POW's FLOAT Exponent.
    s = _session(
        [helper.make_node("Pow", ["x", "e"], ["y"])],
        [("x", F, [2, 3])],
        [("y", F, [2, 3])],
        [("e", exponent)],
    )
    (y,) = s.run(None, {"x": X})
    with np.errstate(divide="ignore", invalid="ignore"):
        want = np.power(X, exponent.reshape(()))
    np.testing.assert_allclose(y, want, rtol=1e-6)
    assert _op_types(s, (2, 3)) == {"ELEMENT_WISE_IDENTITY", "ELEMENT_WISE_CONSTANT_POW"}


def test_pow_with_a_run_time_exponent_or_an_integer_base_is_pow():
    s = _session(
        [helper.make_node("Pow", ["x", "e"], ["y"])],
        [("x", I32, [4]), ("e", F, [1])],
        [("y", I32, [4])],
    )
    x = np.array([1, 2, 3, -2], np.int32)
    (y,) = s.run(None, {"x": x, "e": np.array([2.0], np.float32)})
    np.testing.assert_array_equal(y, [1, 4, 9, 4])
    assert "ELEMENT_WISE_POW" in _op_types(s, (4,), (1,))


def test_clip_constant_bounds_min_above_max_gives_max():
    # DirectML's CLIP computes max(Min, min(x, Max)), which gives Min where Min > Max; ONNX's
    # Clip gives Max there (Min(max, Max(x, min))).
    s = _session(
        [helper.make_node("Clip", ["x", "lo", "hi"], ["y"])],
        [("x", F, [2, 3])],
        [("y", F, [2, 3])],
        [("lo", np.float32(2.0)), ("hi", np.float32(1.0))],
    )
    (y,) = s.run(None, {"x": X})
    np.testing.assert_array_equal(y, np.ones_like(X))
    assert _op_types(s, (2, 3)) >= {"ELEMENT_WISE_CLIP"}


def test_clip6_attributes_min_above_max_gives_max():
    s = _session(
        [helper.make_node("Clip", ["x"], ["y"], min=2.0, max=1.0)],
        [("x", F, [2, 3])],
        [("y", F, [2, 3])],
        opset=6,
    )
    (y,) = s.run(None, {"x": X})
    np.testing.assert_array_equal(y, np.ones_like(X))


def test_clip_integer_bounds_are_exact_through_clip1():
    # 2**24 + 1 has no float32: CLIP's FLOAT bounds would round it, CLIP1's INT32 bounds do not.
    big = 2**24 + 1
    s = _session(
        [helper.make_node("Clip", ["x", "", "hi"], ["y"])],
        [("x", I32, [3])],
        [("y", I32, [3])],
        [("hi", np.int32(big))],
    )
    (y,) = s.run(None, {"x": np.array([-5, big + 1, 2**30], np.int32)})
    np.testing.assert_array_equal(y, [-5, big, big])
    assert "ELEMENT_WISE_CLIP1" in _op_types(s, (3,))


def test_clip_run_time_bounds_are_max_and_min_without_specialising():
    s = _session(
        [helper.make_node("Clip", ["x", "lo", "hi"], ["y"])],
        [("x", F, [2, 3]), ("lo", F, []), ("hi", F, [])],
        [("y", F, [2, 3])],
    )
    for lo, hi in ((-1.0, 1.0), (0.0, 2.0), (2.0, 1.0)):
        feed = {"x": X, "lo": np.float32(lo), "hi": np.float32(hi)}
        (y,) = s.run(None, feed)
        np.testing.assert_array_equal(y, np.minimum(np.maximum(X, lo), hi))
    assert s.static_inputs == ()
    assert _op_types(s, (2, 3), (), ()) == {
        "ELEMENT_WISE_IDENTITY",
        "ELEMENT_WISE_MAX",
        "ELEMENT_WISE_MIN",
    }


def test_mean_of_three_inputs_is_an_add_loop_and_a_scaled_identity():
    s = _session(
        [helper.make_node("Mean", ["a", "b", "c"], ["y"])],
        [("a", F, [2, 3]), ("b", F, [3]), ("c", F, [2, 1])],
        [("y", F, [2, 3])],
    )
    a, b, c = X, np.array([1.0, 2.0, 4.0], np.float32), np.array([[3.0], [6.0]], np.float32)
    (y,) = s.run(None, {"a": a, "b": b, "c": c})
    np.testing.assert_allclose(y, (a + b + c) / 3, rtol=1e-6)
    graph = s.program([(2, 3), (3,), (2, 1)]).imported.graph
    ops = [n.operator_type.removeprefix("DML_OPERATOR_") for n in graph.nodes]
    assert ops.count("ELEMENT_WISE_ADD") == 2
    scaled = [n for n in graph.nodes if getattr(n, "scale_bias", None) is not None]
    assert len(scaled) == 1 and scaled[0].scale_bias.scale == pytest.approx(1 / 3)


def test_isinf_detecting_nothing_is_all_false():
    s = _session(
        [helper.make_node("IsInf", ["x"], ["y"], detect_positive=0, detect_negative=0)],
        [("x", F, [3])],
        [("y", TensorProto.BOOL, [3])],
    )
    (y,) = s.run(None, {"x": np.array([np.inf, -np.inf, 1.0], np.float32)})
    assert y.dtype == np.bool_ and not y.any()


def test_abs_of_an_unsigned_type_is_identity():
    s = _session([helper.make_node("Abs", ["x"], ["y"])], [("x", U8, [3])], [("y", U8, [3])])
    (y,) = s.run(None, {"x": np.array([0, 7, 255], np.uint8)})
    np.testing.assert_array_equal(y, [0, 7, 255])
    assert "ELEMENT_WISE_ABS" not in _op_types(s, (3,))


def test_cast_to_bool_is_nonzero():
    # A CAST to UINT8 would truncate 0.5 to 0; ONNX's BOOL is x != 0 (NaN is true, -0 false).
    s = _session(
        [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.BOOL)],
        [("x", F, [5])],
        [("y", TensorProto.BOOL, [5])],
    )
    (y,) = s.run(None, {"x": np.array([0.5, np.nan, -0.0, 0.0, -3.0], np.float32)})
    np.testing.assert_array_equal(y, [True, True, False, False, True])


def test_bitshift_of_signed_types_is_arithmetic_on_the_right():
    # DirectML shifts unsigned types only; BitShift-28's signed right shift fills with the sign
    # bit, and a negative or too-large amount leaves only that fill (INT64 runs in 32 bits).
    s = _session(
        [helper.make_node("BitShift", ["x", "n"], ["y"], direction="RIGHT")],
        [("x", I64, [6]), ("n", I64, [6])],
        [("y", I64, [6])],
        opset=28,
    )
    x = np.array([-7, -7, 7, -1, -8, 100], np.int64)
    n = np.array([1, 40, 40, 3, -1, 2], np.int64)
    (y,) = s.run(None, {"x": x, "n": n})
    np.testing.assert_array_equal(y, [-4, -1, 0, -1, -1, 25])


def test_float64_max_runs_in_float64_beyond_directml_support_table():
    """DirectML's MAX has no FLOAT64; the session runs it in float64 all the same (ONNX Runtime
    would fall back to its CPU provider), values that float32 cannot hold included."""
    s = _session(
        [helper.make_node("Max", ["a", "b"], ["y"])],
        [("a", TensorProto.DOUBLE, [2]), ("b", TensorProto.DOUBLE, [2])],
        [("y", TensorProto.DOUBLE, [2])],
    )
    a = np.asarray([1e300, 1 + 2.0**-40])
    b = np.asarray([-1e300, 1.0])
    (y,) = s.run(None, {"a": a, "b": b})
    assert y.dtype == np.float64
    np.testing.assert_array_equal(y, np.maximum(a, b))
