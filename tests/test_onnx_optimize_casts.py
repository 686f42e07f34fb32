"""CastChainElimination (``dml_jax.onnx.optimize.casts``): a Cast that widens exactly, read only
by a Cast back to its input's type, is removed with that Cast; the outputs stay those of the
``disable`` level bit for bit and of onnxruntime's CPU provider. What stays: a round trip that
rounds (float32 to float16 and back), a widening read by another node too, a second Cast that is
a graph output, a second Cast to another type than the first's input, the switch."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper

from dml_jax.onnx import InferenceSession, SessionOptions
from dml_jax.onnx.optimize.casts import widens_exactly

SHAPE = (3, 5)


def _model(dtype: int, hops: list[int], extra_reader: bool = False, out_at: int | None = None):
    """x (``dtype``) -> x + x -> Cast to each of ``hops`` -> doubled -> y; ``extra_reader``: the first
    cast also read by a second output; ``out_at``: that cast's output also a graph output."""
    nodes = [helper.make_node("Add", ["x", "x"], ["r"])]
    prev = "r"
    for i, to in enumerate(hops):
        nodes.append(helper.make_node("Cast", [prev], [f"c{i}"], to=to))
        prev = f"c{i}"
    nodes.append(helper.make_node("Add", [prev, prev], ["y"]))
    outputs = [helper.make_tensor_value_info("y", dtype, SHAPE)]
    if extra_reader:
        nodes.append(helper.make_node("Abs", ["c0"], ["z"]))
        outputs.append(helper.make_tensor_value_info("z", hops[0], SHAPE))
    if out_at is not None:
        outputs.append(helper.make_tensor_value_info(f"c{out_at}", hops[out_at], SHAPE))
    graph = helper.make_graph(
        nodes, "casts", [helper.make_tensor_value_info("x", dtype, SHAPE)], outputs
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def _run(model, level="all", disabled=None):
    options = SessionOptions()
    options.graph_optimization_level = level
    s = InferenceSession(model.SerializeToString(), options, disabled_optimizers=disabled)
    dtype = helper.tensor_dtype_to_np_dtype(model.graph.input[0].type.tensor_type.elem_type)
    x = np.random.default_rng(3).standard_normal(SHAPE) * 300
    feed = {"x": x.astype(dtype)}
    out = s.run(None, feed)
    fired = dict(list(s._programs.values())[-1].imported.optimizations)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for a, b in zip(out, ref.run(None, feed)):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(out, InferenceSession(model.SerializeToString(), _disabled()).run(None, feed)):
        np.testing.assert_array_equal(a, b)
    operators = list(s._programs.values())[-1].operators()
    return fired.get("CastChainElimination", 0), operators.count("CAST")


def _disabled():
    options = SessionOptions()
    options.graph_optimization_level = "disable"
    return options


F16, F32, F64, I8, I32, U8 = (TensorProto.FLOAT16, TensorProto.FLOAT, TensorProto.DOUBLE,
                              TensorProto.INT8, TensorProto.INT32, TensorProto.UINT8)  # fmt: skip


@pytest.mark.parametrize(
    "dtype, hops",
    [(F16, [F32, F16]), (F16, [F64, F16]), (F32, [F64, F32]), (I8, [I32, I8]), (U8, [F16, U8])],
)
def test_exact_round_trips_are_removed(dtype, hops):
    assert _run(_model(dtype, hops)) == (1, 0)
    assert _run(_model(dtype, hops), disabled=["CastChainElimination"]) == (0, 2)
    assert _run(_model(dtype, hops), level="disable") == (0, 2)


def test_a_longer_chain_loses_its_exact_pair():
    # float16 -> float32 -> float16 -> float32: the first two go, the last cast stays
    model = _model(F16, [F32, F16, F32])
    model.graph.output[0].type.tensor_type.elem_type = F32
    assert _run(model) == (1, 1)


@pytest.mark.parametrize(
    "dtype, hops, extra, out_at",
    [
        (F32, [F16, F32], False, None),  # rounds: float32 -> float16 is not exact
        (I32, [I8, I32], False, None),  # wraps
        (F16, [F32, F16], True, None),  # the widened value has another reader
        (F16, [F32, F16], False, 1),  # the round trip's end is a graph output
        (F16, [F32, F64], False, None),  # not back to float16
    ],
)
def test_what_stays(dtype, hops, extra, out_at):
    model = _model(dtype, hops, extra, out_at)
    model.graph.output[0].type.tensor_type.elem_type = hops[-1]
    assert _run(model) == (0, 2)


def test_exact_widenings():
    for a, b in [("FLOAT16", "FLOAT32"), ("INT8", "INT64"), ("UINT16", "FLOAT32")]:
        assert widens_exactly(a, b)
    for a, b in [
        ("FLOAT32", "FLOAT16"),
        ("INT32", "FLOAT32"),
        ("UINT8", "INT8"),
        ("INT8", "UINT8"),
    ]:
        assert not widens_exactly(a, b)
    # each listed widening holds every value of its source (checked on the types' extremes)
    np_types = {"FLOAT16": np.float16, "FLOAT32": np.float32, "FLOAT64": np.float64,
                "INT8": np.int8, "UINT8": np.uint8, "INT16": np.int16, "UINT16": np.uint16,
                "INT32": np.int32, "UINT32": np.uint32, "INT64": np.int64, "UINT64": np.uint64}  # fmt: skip
    for a, ta in np_types.items():
        for b, tb in np_types.items():
            if not widens_exactly(a, b):
                continue
            info = np.finfo(ta) if np.dtype(ta).kind == "f" else np.iinfo(ta)
            probe = [info.min, info.max, 0]
            if np.dtype(ta).kind == "i":
                probe += [info.max - 1, info.min + 1]
            else:
                probe += [getattr(info, "smallest_subnormal", 0)]
            values = np.array(probe, ta)
            assert (values.astype(tb).astype(ta) == values).all(), (a, b)
            if np.dtype(tb).kind == "f" and np.dtype(ta).kind in "iu":
                assert np.iinfo(ta).max <= 2 ** (np.finfo(tb).nmant + 1), (a, b)
