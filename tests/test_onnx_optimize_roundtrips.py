"""QuantizeRoundTrips (``dml_jax.onnx.optimize.roundtrips``): DequantizeLinear -> [Relu] ->
QuantizeLinear back to the same type with scales and zero points of equal value gives the 8-bit
value itself (ReLU'd: from the zero point up), behind a run-time test of the scales. The
outputs stay those of the ``disable`` level bit for bit and within a quantization step of
onnxruntime's CPU provider; scales replaced through ``apply`` by values the identity does not
hold for (another scale, 0, one out of range) give the unrewritten graph's values; what stays
unrewritten: scales or zero points that differ, a scale out of the proved range, a ReLU whose
output is also read elsewhere."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper

from dml_jax.onnx import InferenceSession, SessionOptions

SHAPE = (2, 8, 5, 5)


def _model(
    relu=True, s1=0.05, s2=None, shared=False, z1=0, z2=None, uint8=False, extra_reader=False
):
    """a, b -> quantized (scales 0.8 and 0.6 times |s1|) -> dequantized -> Add -> Q(s1, z1) ->
    DQ(s1, z1) -> [Relu] -> Q(s2, z2) (``shared``: the very initializers s1, z1) -> DQ -> y."""
    s2 = s1 if s2 is None else s2
    unit = abs(s1)
    z2 = z1 if z2 is None else z2
    qt = np.uint8 if uint8 else np.int8
    inits = [
        numpy_helper.from_array(np.array(v, np.float32), n)
        for n, v in (("sa", 0.8 * unit), ("sb", 0.6 * unit), ("s1", s1), ("s2", s2))
    ] + [
        numpy_helper.from_array(np.array(v, qt), n)
        for n, v in (("za", 128 if uint8 else 0), ("z1", z1), ("z2", z2))
    ]
    second = ("s1", "z1") if shared else ("s2", "z2")
    nodes = [
        helper.make_node("QuantizeLinear", ["a", "sa", "za"], ["qa"]),
        helper.make_node("DequantizeLinear", ["qa", "sa", "za"], ["da"]),
        helper.make_node("QuantizeLinear", ["b", "sb", "za"], ["qb"]),
        helper.make_node("DequantizeLinear", ["qb", "sb", "za"], ["db"]),
        helper.make_node("Add", ["da", "db"], ["sum"]),
        helper.make_node("QuantizeLinear", ["sum", "s1", "z1"], ["q1"]),
        helper.make_node("DequantizeLinear", ["q1", "s1", "z1"], ["d1"]),
    ]
    prev = "d1"
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, SHAPE)]
    if relu:
        nodes.append(helper.make_node("Relu", ["d1"], ["r"]))
        prev = "r"
        if extra_reader:
            nodes.append(helper.make_node("Abs", ["r"], ["z"]))
            outputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, SHAPE))
    nodes += [
        helper.make_node("QuantizeLinear", [prev, *second], ["q2"]),
        helper.make_node("DequantizeLinear", ["q2", *second], ["y"]),
    ]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, SHAPE) for n in "ab"]
    graph = helper.make_graph(nodes, "roundtrip", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _feeds(seed=5, unit=0.05):
    """Inputs of about 40 steps of a scale ``unit`` (s1)."""
    rng = np.random.default_rng(seed)
    return {n: (rng.standard_normal(SHAPE) * 40 * unit).astype(np.float32) for n in "ab"}


def _session(model, level="all", disabled=None):
    options = SessionOptions()
    options.graph_optimization_level = level
    return InferenceSession(model.SerializeToString(), options, disabled_optimizers=disabled)


def _fired(s) -> int:
    return dict(list(s._programs.values())[-1].imported.optimizations).get("QuantizeRoundTrips", 0)


def _check(model, step: float, against_ort: bool = True) -> int:
    feeds = _feeds(unit=step)
    s = _session(model)
    got = s.run(None, feeds)
    want = _session(model, "disable").run(None, feeds)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for g, r in zip(got, ref.run(None, feeds) if against_ort else ()):
        np.testing.assert_allclose(g, r, rtol=0, atol=step * 1.001)
    assert len(np.unique(got[0])) > 10  # values that can differ
    return _fired(s)


@pytest.mark.parametrize(
    "kw",
    [{}, {"relu": False}, {"shared": True}, {"uint8": True, "z1": 100},
     {"uint8": True, "z1": 0}, {"z1": -7}, {"s1": 2.0**-100 * 3}],
)  # fmt: skip
def test_round_trips_are_rewritten(kw):
    """(onnxruntime's CPU provider dequantizes the saturated values of a scale near 2^-100 to
    0: that case is checked against the ``disable`` level alone.)"""
    s1 = kw.get("s1", 0.05)
    assert _check(_model(**kw), s1, against_ort=s1 > 1e-20) == 1


@pytest.mark.parametrize(
    "kw",
    [{"s2": 0.06}, {"z2": 3}, {"s1": 1e-32}, {"s1": -0.05}, {"relu": True, "extra_reader": True}],
)
def test_what_stays(kw):
    step = abs(kw.get("s1", 0.05))
    assert _check(_model(**kw), max(step, kw.get("s2", 0))) == 0


def test_the_switch():
    s = _session(_model(), disabled=["QuantizeRoundTrips"])
    s.run(None, _feeds())
    assert _fired(s) == 0


@pytest.mark.parametrize(
    "params",
    [{"s2": np.float32(0.07)}, {"s1": np.float32(0.0)}, {"s2": np.float32(0.0)},
     {"s1": np.float32(1e-35), "s2": np.float32(1e-35)},
     {"s1": np.float32(-0.05), "s2": np.float32(-0.05)},
     {"s1": np.float32(0.02), "s2": np.float32(0.02)}],
)  # fmt: skip
def test_replaced_scales_give_the_unrewritten_values(params):
    """The rewrite's run-time test of the scales: through ``apply`` (the scales then traced,
    nothing folded), scales the identity does not hold for take the quantizer's branch, and
    equal ones in range (the last case) the rewritten one; each as the unrewritten graph."""
    import jax

    model = _model()
    feeds = _feeds(7)
    s = _session(model)
    plain = _session(model, disabled=["QuantizeRoundTrips"])
    s.run(None, feeds)
    assert _fired(s) == 1
    got = jax.jit(s.apply)(params, feeds["a"], feeds["b"])
    want = jax.jit(plain.apply)(params, feeds["a"], feeds["b"])
    np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(want[0]))
    untouched = jax.jit(plain.apply)(None, feeds["a"], feeds["b"])
    if "s2" in params and params["s2"] != 0.05:  # the replacement changed the values
        assert not np.array_equal(np.asarray(want[0]), np.asarray(untouched[0]))


def test_the_test_of_the_scales_is_left_to_xla():
    """The rewrite's test reads the scales alone, parameters of at most
    ``RUN_BAKED_PARAM_MAX_BYTES`` that ``run`` compiles in off the CPU: no output of it is
    among the values the session computes once and passes (``Program.folded``), which would
    hide them from XLA, so XLA folds the test and drops the quantizer's branch. The graph
    still folds what larger parameters determine (tests/test_onnx_parallel_nbits.py)."""
    s = _session(_model(relu=True, s2=0.05))
    s.run(None, _feeds())
    program = list(s._programs.values())[-1]
    assert _fired(s) == 1
    assert program.folded == {}
    count = len(program.imported.input_names)
    everything = frozenset(range(count, count + len(program.imported.constants)))
    assert program.graph.folded(everything)  # what the graph folds without that exception
