"""Field kinds of every DirectML schema, on a stand-in operator that uses each of them.

No registered operator has all of them yet (GEMM's optional CTensor, RNN's ActivationDescs,
ROI pooling's Size2D ...), so a test-only operator is registered for the duration of each test:
construction, DxDispatch JSON in both directions with field paths in errors, graph edge indices
counting an absent optional tensor, and the logical-mode calling convention.
"""

from __future__ import annotations

import dataclasses
import json
from typing import ClassVar

import numpy as np
import pytest

import dml_jax as dml
from dml_jax import registry, support
from dml_jax.enums import FeatureLevel as L
from dml_jax.fields import (
    BOOL,
    FLOAT,
    FLOAT_ARRAY,
    INT,
    INT_ARRAY,
    OPERATOR_DESC,
    OPERATOR_DESC_ARRAY,
    SIZE_2D,
    UINT64,
    OperatorDesc,
    ScalarUnion,
    attribute,
    count_of,
    enum_type,
    input_field,
    output_field,
)


@dataclasses.dataclass(frozen=True)
class KitchenSinkOperatorDesc(OperatorDesc):
    """DML_KITCHEN_SINK_OPERATOR_DESC: out = a (+ c when present) (FL 1_0); a test stand-in."""

    operator_type: ClassVar[str] = "DML_OPERATOR_KITCHEN_SINK"
    a_tensor: dml.TensorDesc = input_field()
    c_tensor: dml.TensorDesc | None = input_field(optional=True)
    output_tensor: dml.TensorDesc = output_field()
    extra_output_tensor: dml.TensorDesc | None = output_field(optional=True)
    window: dml.Size2D = attribute(SIZE_2D)
    flag: bool = attribute(BOOL)
    offset: int = attribute(INT)
    seed: int = attribute(UINT64)
    weights: tuple = attribute(FLOAT_ARRAY)
    shifts: tuple = attribute(INT_ARRAY)
    shift_count: int | None = count_of("shifts")
    value_data_type: dml.DataType = attribute(enum_type(dml.DataType))
    value: float = attribute(ScalarUnion("value_data_type"))
    scale: float = attribute(FLOAT, default=1.0)
    fused_activation: OperatorDesc | None = attribute(OPERATOR_DESC, default=None)
    activation_descs: tuple = attribute(OPERATOR_DESC_ARRAY, default=())


def _lower(d, a, *c):
    return (a + c[0] if c else a,) + ((a,) if d.extra_output_tensor is not None else ())


@pytest.fixture
def sink(monkeypatch):
    spec = registry.OperatorSpec(
        KitchenSinkOperatorDesc,
        infer=lambda d: tuple(t for _, t in d.output_slots()),
        validate=lambda d, v: None,
        lower=_lower,
        support=support.rows((L.FL_1_0, support.DIMS1_8, support.F2)),
        example=registry.Example({"type": "DML_OPERATOR_KITCHEN_SINK", "desc": {}}, {}),
    )
    monkeypatch.setitem(registry._REGISTRY, spec.name, spec)
    return spec


T = dml.TensorDesc("FLOAT32", [2, 3])


def make(**changes):
    fields = {
        "a_tensor": T,
        "output_tensor": T,
        "window": (3, 2),
        "flag": 1,
        "offset": -4,
        "seed": 2**63 + 5,
        "weights": [0.5, -1],
        "shifts": [-1, 2, 3],
        "value_data_type": "INT8",
        "value": -7,
    }
    fields.update(changes)
    return KitchenSinkOperatorDesc(**fields)


def test_construction_converts_every_kind(sink):
    d = make(c_tensor=T, fused_activation=dml.ActivationReluOperatorDesc())
    assert d.window == dml.Size2D(3, 2) and d.flag is True and d.seed == 2**63 + 5
    assert d.weights == (0.5, -1.0) and d.shifts == (-1, 2, 3)
    assert d.value_data_type is dml.DataType.INT8 and d.value == -7
    assert d.fused_activation.input_tensor is None
    assert hash(d) == hash(make(c_tensor=T, fused_activation=dml.ActivationReluOperatorDesc()))


@pytest.mark.parametrize(
    "change, pattern",
    [
        ({"window": 3}, r"Window must be a Size2D or a \(width, height\) pair"),
        ({"window": (3, -1)}, r"Window\.Height must be >= 0"),
        ({"flag": 2}, r"Flag must be a bool"),
        ({"offset": 2**31}, r"Offset must be <= 2147483647"),
        ({"seed": -1}, r"Seed must be >= 0"),
        ({"weights": [1, "x"]}, r"Weights\[1\] must be a number"),
        ({"shifts": 5}, r"Shifts must be a sequence of integers"),
        ({"value": "x"}, r"Value must be a number"),
        ({"fused_activation": "relu"}, r"FusedActivation must be an operator description"),
        ({"activation_descs": [dml.ActivationReluOperatorDesc(), 1]}, r"ActivationDescs\[1\]"),
        ({"c_tensor": [T]}, r"CTensor must be a TensorDesc"),
        ({"a_tensor": None}, r"ATensor must be a TensorDesc"),
    ],
)
def test_construction_errors_name_the_member(sink, change, pattern):
    with pytest.raises(dml.ValidationError, match=rf"^DML_OPERATOR_KITCHEN_SINK: {pattern}"):
        make(**change)


def test_required_members_after_optional_ones_keep_their_place(sink):
    with pytest.raises(dml.ValidationError, match=r"^DML_OPERATOR_KITCHEN_SINK: OutputTensor is "):
        KitchenSinkOperatorDesc(T, None)


def test_json_round_trip_of_every_kind(sink):
    acts = (dml.ActivationEluOperatorDesc(alpha=0.5), dml.ActivationSigmoidOperatorDesc())
    for d in (
        make(),
        make(c_tensor=T, extra_output_tensor=T, activation_descs=acts, scale=float("inf")),
        make(fused_activation=dml.ActivationLinearOperatorDesc(alpha=2, beta=1)),
    ):
        obj = json.loads(json.dumps(dml.operator_desc_to_json(d)))
        assert dml.operator_desc_from_json(obj) == d
    obj = dml.operator_desc_to_json(make(activation_descs=acts))
    assert obj["desc"]["Window"] == {"Width": 3, "Height": 2}
    assert obj["desc"]["ActivationDescs"][0] == {
        "Type": "DML_OPERATOR_ACTIVATION_ELU",
        "Desc": {"Alpha": 0.5},
    }
    assert "CTensor" not in obj["desc"] and "ShiftCount" not in obj["desc"]
    assert dml.operator_desc_to_json(make(shift_count=3))["desc"]["ShiftCount"] == 3


@pytest.mark.parametrize(
    "member, value, pattern",
    [
        ("Window", [3, 2], r"desc\.Window must be a JSON object \{Width, Height\}"),
        ("Window", {"Width": 3}, r"desc\.Window\.Height is required"),
        ("Window", {"Width": 3, "Height": 1, "Depth": 1}, r"desc\.Window has unknown member"),
        ("Flag", "yes", r"desc\.Flag must be a bool"),
        ("Weights", [1, "nan", "x"], r"desc\.Weights\[2\] must be a number"),
        ("Value", {"Float32": 1.5}, r"desc\.Value gives union member Float32 but the data type"),
        ("ActivationDescs", {"Type": "ACTIVATION_RELU"}, r"desc\.ActivationDescs must be a JSON"),
        ("ActivationDescs", [{"Type": "NOPE"}], r"desc\.ActivationDescs\[0\]\.Type: unknown"),
        ("FusedActivation", {"Type": "ACTIVATION_ELU"}, r"desc\.FusedActivation\.Alpha is req"),
        ("ShiftCount", 2, r"desc\.ShiftCount must equal the length of Shifts \(3\), got 2"),
    ],
)
def test_json_errors_give_the_member_path(sink, member, value, pattern):
    obj = dml.operator_desc_to_json(make(shift_count=3))
    obj["desc"][member] = value
    with pytest.raises(dml.ValidationError, match=rf"^DML_OPERATOR_KITCHEN_SINK: {pattern}"):
        dml.operator_desc_from_json(obj)


def test_absent_optional_tensors_take_no_argument_but_count_as_edges(sink):
    d = make()
    op = dml.compile_operator(d)
    assert op.input_paths == ("ATensor",) and op.output_paths == ("OutputTensor",)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(np.asarray(op(x)), x)
    with_c = dml.compile_operator(make(c_tensor=T))
    np.testing.assert_array_equal(np.asarray(with_c(x, x)), 2 * x)
    assert [p for p, _ in d.edge_slots("input")] == ["ATensor", "CTensor"]
    # A graph feeding the absent CTensor (node input 1) is rejected; input 0 is ATensor.
    edges = {"output_edges": [dml.OutputGraphEdge(0, 0, 0)]}
    good = dml.GraphDesc(1, 1, [d], [dml.InputGraphEdge(0, 0, 0)], **edges)
    np.testing.assert_array_equal(np.asarray(dml.compile_graph(good)(x)), x)
    bad = dml.GraphDesc(1, 1, [d], [dml.InputGraphEdge(0, 0, 1)], **edges)
    with pytest.raises(dml.ValidationError, match=r"CTensor, which the node leaves null"):
        dml.compile_graph(bad)
    # Output edge index 1 is the absent ExtraOutputTensor.
    absent_out = dml.GraphDesc(
        1, 1, [d], [dml.InputGraphEdge(0, 0, 0)], [dml.OutputGraphEdge(0, 1, 0)]
    )
    with pytest.raises(dml.ValidationError, match=r"ExtraOutputTensor, which the node leaves null"):
        dml.compile_graph(absent_out)
    # The present CTensor is node input 1, fed by graph input 1.
    g = dml.GraphDesc(
        2,
        1,
        [make(c_tensor=T)],
        [dml.InputGraphEdge(0, 0, 0), dml.InputGraphEdge(1, 0, 1)],
        **edges,
    )
    np.testing.assert_array_equal(np.asarray(dml.compile_graph(g)(x, x + 1)), 2 * x + 1)


def test_outputs_must_be_what_infer_says_even_when_validate_does_not_check(monkeypatch, sink):
    # The stand-in's validate checks nothing; compile compares every output with infer.
    spec = dataclasses.replace(sink, infer=lambda d: (T.like(sizes=(2, 4)),))
    monkeypatch.setitem(registry._REGISTRY, spec.name, spec)
    with pytest.raises(
        dml.ValidationError,
        match=r"^DML_OPERATOR_KITCHEN_SINK: OutputTensor\.Sizes\[1\] must equal 4, got 3",
    ):
        dml.validate(make())


def test_one_node_graph_from_json_binds_present_tensors_only(sink):
    # ATensor (edge index 0) is graph input 0; absent CTensor is skipped; the output is graph
    # output 0. With CTensor present it becomes graph input 1 at node input 1.
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    obj = {**dml.operator_desc_to_json(make()), "dmlCompileType": "DmlCompileGraph"}
    graph = dml.graph_from_json(obj)
    assert [(e.graph_input_index, e.to_node_input_index) for e in graph.input_edges] == [(0, 0)]
    np.testing.assert_array_equal(np.asarray(dml.compile_graph(graph)(x)), x)
    obj = {**dml.operator_desc_to_json(make(c_tensor=T)), "dmlCompileType": "DmlCompileGraph"}
    graph = dml.graph_from_json(obj)
    assert [(e.graph_input_index, e.to_node_input_index) for e in graph.input_edges] == [
        (0, 0),
        (1, 1),
    ]
    np.testing.assert_array_equal(np.asarray(dml.compile_graph(graph)(x, x)), 2 * x)
