"""operator_desc_from_json: DxDispatch dispatchables -> operator descriptors.

Each of the fourteen operators is written once by hand in DxDispatch's JSON (flat tensor descs,
abbreviated enums, ``desc`` form) next to the same descriptor built directly; the JSON is then
rewritten into the other spellings (inline form, ``Desc`` key, nested tensor descs, full enum
names) and every spelling must give a descriptor equal to the direct one.
"""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest

import dml_jax as dml
from dml_jax import registry


def T(data_type: str, sizes, **kw) -> dml.TensorDesc:
    return dml.TensorDesc(data_type, sizes, **kw)


def J(data_type: str, sizes, **kw) -> dict:
    """A flat JSON tensor desc with abbreviated names."""
    return {"DataType": data_type, "Sizes": list(sizes), **kw}


# (name, JSON desc members, type suffix, directly constructed descriptor)
CASES = [
    (
        "split",
        "SPLIT",
        {
            "InputTensor": J("FLOAT32", [1, 1, 6, 2]),
            "OutputCount": 3,
            "OutputTensors": [
                J("FLOAT32", [1, 1, 2, 2]),
                J("FLOAT32", [1, 1, 1, 2]),
                J("FLOAT32", [1, 1, 3, 2]),
            ],
            "Axis": 2,
        },
        dml.SplitOperatorDesc(
            T("FLOAT32", (1, 1, 6, 2)),
            (T("FLOAT32", (1, 1, 2, 2)), T("FLOAT32", (1, 1, 1, 2)), T("FLOAT32", (1, 1, 3, 2))),
            axis=2,
            output_count=3,
        ),
    ),
    (
        "split_no_count",
        "SPLIT",
        {"InputTensor": J("INT8", [6]), "OutputTensors": [J("INT8", [2])] * 3, "Axis": 0},
        dml.SplitOperatorDesc(T("INT8", [6]), [T("INT8", [2])] * 3, axis=0),
    ),
    (
        "join",
        "JOIN",
        {
            "InputCount": 2,
            "InputTensors": [J("UINT16", [1, 1, 2, 3]), J("UINT16", [1, 1, 2, 4])],
            "OutputTensor": J("UINT16", [1, 1, 2, 7]),
            "Axis": 3,
        },
        dml.JoinOperatorDesc(
            [T("UINT16", [1, 1, 2, 3]), T("UINT16", [1, 1, 2, 4])],
            T("UINT16", [1, 1, 2, 7]),
            axis=3,
            input_count=2,
        ),
    ),
    (
        "depth_to_space",
        "DEPTH_TO_SPACE",
        {
            "InputTensor": J("FLOAT16", [1, 8, 2, 3]),
            "OutputTensor": J("FLOAT16", [1, 2, 4, 6]),
            "BlockSize": 2,
        },
        dml.DepthToSpaceOperatorDesc(T("FLOAT16", [1, 8, 2, 3]), T("FLOAT16", [1, 2, 4, 6]), 2),
    ),
    (
        "depth_to_space1",
        "DEPTH_TO_SPACE1",
        {
            "InputTensor": J("FLOAT32", [1, 8, 2, 3]),
            "OutputTensor": J("FLOAT32", [1, 2, 4, 6]),
            "BlockSize": 2,
            "Order": "COLUMN_ROW_DEPTH",
        },
        dml.DepthToSpace1OperatorDesc(
            T("FLOAT32", [1, 8, 2, 3]),
            T("FLOAT32", [1, 2, 4, 6]),
            2,
            dml.DepthSpaceOrder.COLUMN_ROW_DEPTH,
        ),
    ),
    (
        "space_to_depth",
        "SPACE_TO_DEPTH",
        {
            "InputTensor": J("FLOAT32", [1, 2, 4, 6]),
            "OutputTensor": J("FLOAT32", [1, 8, 2, 3]),
            "BlockSize": 2,
        },
        dml.SpaceToDepthOperatorDesc(T("FLOAT32", [1, 2, 4, 6]), T("FLOAT32", [1, 8, 2, 3]), 2),
    ),
    (
        "space_to_depth1",
        "SPACE_TO_DEPTH1",
        {
            "InputTensor": J("UINT8", [1, 2, 4, 6]),
            "OutputTensor": J("UINT8", [1, 8, 2, 3]),
            "BlockSize": 2,
            "Order": "DEPTH_COLUMN_ROW",
        },
        dml.SpaceToDepth1OperatorDesc(
            T("UINT8", [1, 2, 4, 6]), T("UINT8", [1, 8, 2, 3]), 2, "DEPTH_COLUMN_ROW"
        ),
    ),
    (
        "clip",
        "ELEMENT_WISE_CLIP",
        {
            "InputTensor": J("FLOAT32", [9]),
            "OutputTensor": J("FLOAT32", [9]),
            "ScaleBias": {"Scale": 2, "Bias": -0.5},
            "Min": -2.5,
            "Max": "INF",
        },
        dml.ElementWiseClipOperatorDesc(
            T("FLOAT32", [9]), T("FLOAT32", [9]), -2.5, math.inf, dml.ScaleBias(2.0, -0.5)
        ),
    ),
    (
        "clip_no_scale_bias",
        "ELEMENT_WISE_CLIP",
        {
            "InputTensor": J("INT32", [3, 3]),
            "OutputTensor": J("INT32", [3, 3]),
            "Min": "-inf",
            "Max": 2.7,
        },
        dml.ElementWiseClipOperatorDesc(T("INT32", [3, 3]), T("INT32", [3, 3]), -math.inf, 2.7),
    ),
    (
        "clip1_fp16_bits",
        "ELEMENT_WISE_CLIP1",
        {
            "InputTensor": J("FLOAT16", [5]),
            "OutputTensor": J("FLOAT16", [5]),
            "MinMaxDataType": "FLOAT16",
            "Min": {"UInt16": 16384},
            "Max": {"UInt16": 17408},
        },
        dml.ElementWiseClip1OperatorDesc(
            T("FLOAT16", [5]), T("FLOAT16", [5]), 2.0, 4.0, min_max_data_type="FLOAT16"
        ),
    ),
    (
        "clip1_int8_scale_bias_null",
        "ELEMENT_WISE_CLIP1",
        {
            "InputTensor": J("INT8", [4]),
            "OutputTensor": J("INT8", [4]),
            "ScaleBias": None,
            "MinMaxDataType": "INT8",
            "Min": {"Int8": -3},
            "Max": 5,
        },
        dml.ElementWiseClip1OperatorDesc(T("INT8", [4]), T("INT8", [4]), -3, 5, "INT8"),
    ),
    (
        "clip_grad",
        "ELEMENT_WISE_CLIP_GRAD",
        {
            "InputTensor": J("FLOAT32", [2, 3]),
            "InputGradientTensor": J("FLOAT32", [2, 3]),
            "OutputGradientTensor": J("FLOAT32", [2, 3]),
            "Min": -1,
            "Max": 1.5,
        },
        dml.ElementWiseClipGradOperatorDesc(
            T("FLOAT32", [2, 3]), T("FLOAT32", [2, 3]), T("FLOAT32", [2, 3]), -1.0, 1.5
        ),
    ),
    (
        "clip_grad1",
        "ELEMENT_WISE_CLIP_GRAD1",
        {
            "InputTensor": J("UINT16", [4]),
            "InputGradientTensor": J("UINT16", [4]),
            "OutputGradientTensor": J("UINT16", [4]),
            "MinMaxDataType": "UINT16",
            "Min": {"UInt16": 1},
            "Max": 9,
        },
        dml.ElementWiseClipGrad1OperatorDesc(
            T("UINT16", [4]), T("UINT16", [4]), T("UINT16", [4]), 1, 9, "UINT16"
        ),
    ),
    (
        "clip_grad1_float32_default_type",
        "ELEMENT_WISE_CLIP_GRAD1",
        {
            "InputTensor": J("FLOAT32", [4]),
            "InputGradientTensor": J("FLOAT32", [4]),
            "OutputGradientTensor": J("FLOAT32", [4]),
            "Min": {"Float32": -0.25},
            "Max": 0.75,
        },
        dml.ElementWiseClipGrad1OperatorDesc(
            T("FLOAT32", [4]), T("FLOAT32", [4]), T("FLOAT32", [4]), -0.25, 0.75
        ),
    ),
    (
        "tile",
        "TILE",
        {
            "InputTensor": J("FLOAT32", [1, 1, 2, 3]),
            "OutputTensor": J("FLOAT32", [1, 1, 6, 9]),
            "RepeatsCount": 4,
            "Repeats": [1, 1, 3, 3],
        },
        dml.TileOperatorDesc(
            T("FLOAT32", [1, 1, 2, 3]), T("FLOAT32", [1, 1, 6, 9]), (1, 1, 3, 3), repeats_count=4
        ),
    ),
    (
        "reduce",
        "REDUCE",
        {
            "Function": "SUM_SQUARE",
            "InputTensor": J("FLOAT32", [3, 3]),
            "OutputTensor": J("FLOAT32", [1, 3]),
            "AxisCount": 1,
            "Axes": [0],
        },
        dml.ReduceOperatorDesc(
            dml.ReduceFunction.SUM_SQUARE, T("FLOAT32", [3, 3]), T("FLOAT32", [1, 3]), [0], 1
        ),
    ),
    (
        "argmin",
        "ARGMIN",
        {
            "InputTensor": J("FLOAT32", [3, 3]),
            "OutputTensor": J("UINT32", [1, 1]),
            "AxisCount": 2,
            "Axes": [0, 1],
            "AxisDirection": "DECREASING",
        },
        dml.ArgMinOperatorDesc(
            T("FLOAT32", [3, 3]), T("UINT32", [1, 1]), (0, 1), dml.AxisDirection.DECREASING, 2
        ),
    ),
    (
        "argmax_default_direction",
        "ARGMAX",
        {"InputTensor": J("INT16", [3, 3]), "OutputTensor": J("INT32", [3, 1]), "Axes": [1]},
        dml.ArgMaxOperatorDesc(T("INT16", [3, 3]), T("INT32", [3, 1]), [1]),
    ),
    (
        "tensor_desc_members",
        "ELEMENT_WISE_CLIP",
        {
            "InputTensor": J(
                "FLOAT32",
                [2, 3],
                Strides=[5, 1],
                DimensionCount=2,
                TotalTensorSizeInBytes=0,
                GuaranteedBaseOffsetAlignment=16,
                Flags=["OWNED_BY_DML"],
            ),
            "OutputTensor": J(
                "FLOAT32", [2, 3], Strides=[], TotalTensorSizeInBytes=32, Flags="NONE"
            ),
            "Min": 0,
            "Max": 1,
        },
        dml.ElementWiseClipOperatorDesc(
            T(
                "FLOAT32",
                [2, 3],
                strides=(5, 1),
                guaranteed_base_offset_alignment=16,
                flags="OWNED_BY_DML",
            ),
            T("FLOAT32", [2, 3], total_tensor_size_in_bytes=32),
            0.0,
            1.0,
        ),
    ),
]

ENUM_PREFIXES = {
    "DataType": "DML_TENSOR_DATA_TYPE_",
    "MinMaxDataType": "DML_TENSOR_DATA_TYPE_",
    "Function": "DML_REDUCE_FUNCTION_",
    "Order": "DML_DEPTH_SPACE_ORDER_",
    "AxisDirection": "DML_AXIS_DIRECTION_",
    "Flags": "DML_TENSOR_FLAG_",
}


def _is_tensor(value) -> bool:
    return isinstance(value, dict) and "DataType" in value


def nested(members: dict) -> dict:
    """Every tensor desc rewritten as {"Type": "DML_TENSOR_TYPE_BUFFER", "Desc": {...}}."""

    def wrap(t):
        return {"Type": "DML_TENSOR_TYPE_BUFFER", "Desc": t}

    out = {}
    for key, value in members.items():
        if _is_tensor(value):
            value = wrap(value)
        elif isinstance(value, list) and value and _is_tensor(value[0]):
            value = [wrap(t) for t in value]
        out[key] = value
    return out


def full_names(value):
    """Every abbreviated enum name rewritten to its full DML name (recursively)."""
    if isinstance(value, list):
        return [full_names(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for key, v in value.items():
        prefix = ENUM_PREFIXES.get(key)
        if prefix and isinstance(v, str):
            v = prefix + v
        elif prefix and isinstance(v, list) and all(isinstance(x, str) for x in v):
            v = [prefix + x for x in v]
        else:
            v = full_names(v)
        out[key] = v
    return out


def spellings(op_suffix: str, members: dict):
    """All the JSON spellings of one dispatchable, with a label each."""
    for enums in ("short", "full"):
        m = full_names(members) if enums == "full" else members
        op = "DML_OPERATOR_" + op_suffix if enums == "full" else op_suffix
        for tensors in ("flat", "nested"):
            mt = nested(m) if tensors == "nested" else m
            yield f"{enums}-{tensors}-desc", {"type": op, "desc": copy.deepcopy(mt)}
            yield f"{enums}-{tensors}-Desc", {"type": op, "Desc": copy.deepcopy(mt)}
            yield f"{enums}-{tensors}-inline", {"type": op, **copy.deepcopy(mt)}


@pytest.mark.parametrize("name, op, members, expected", CASES, ids=[c[0] for c in CASES])
def test_every_spelling_equals_direct_descriptor(name, op, members, expected):
    for label, obj in spellings(op, members):
        # Through a JSON text round trip, so only what json.loads can produce is used.
        desc = dml.operator_desc_from_json(json.loads(json.dumps(obj)))
        assert desc == expected, label
        assert type(desc) is type(expected), label
        assert hash(desc) == hash(expected), label
    dml.validate(expected)  # the cases are valid descriptors, not just well-formed JSON


def test_cases_are_registered_operators():
    """Hand-written JSON forms for the first operators; every registered operator's example
    round-trips through JSON in test_examples.py."""
    assert {c[3].operator_type for c in CASES} <= {spec.name for spec in registry.operators()}


def test_dispatchable_members_are_accepted_and_ignored():
    _, op, members, expected = CASES[0]
    obj = {
        "type": op,
        "desc": members,
        "executionFlags": [
            "ALLOW_HALF_PRECISION_COMPUTATION",
            "DML_EXECUTION_FLAG_DISABLE_META_COMMANDS",
        ],
        "dmlCompileType": "DmlCompileGraph",
        "bindings": {"InputTensor": "A"},
    }
    assert dml.operator_desc_from_json(obj) == expected
    inline = {"type": op, **members, "executionFlags": "NONE", "bindings": {}}
    assert dml.operator_desc_from_json(inline) == expected


def test_scalar_union_forms():
    """CLIP1 Min/Max: plain numbers, the named member, Bytes, and FLOAT16 raw bits decoded."""

    def clip1(data_type, lo, hi, with_type=True):
        obj = {
            "type": "ELEMENT_WISE_CLIP1",
            "InputTensor": J(data_type, [2]),
            "OutputTensor": J(data_type, [2]),
            "Min": lo,
            "Max": hi,
        }
        if with_type:
            obj["MinMaxDataType"] = data_type
        return dml.operator_desc_from_json(obj)

    # 0x3C00 = 1.0, 0xC500 = -5.0, 0x7C00 = +inf, 0x3555 = 0.333251953125 in binary16.
    d = clip1("FLOAT16", {"UInt16": 0xC500}, {"UInt16": 0x3C00})
    assert (d.min, d.max) == (-5.0, 1.0)
    d = clip1("FLOAT16", {"UInt16": 0x3555}, {"UInt16": 0x7C00})
    assert d.min == 0.333251953125 and d.max == math.inf
    assert clip1("FLOAT16", 1.5, "inf", with_type=False).max == math.inf
    d = clip1("INT64", {"Int64": -(2**63)}, {"Int64": 2**63 - 1})
    assert (d.min, d.max) == (-(2**63), 2**63 - 1)
    d = clip1("UINT8", {"Bytes": [7, 0, 0, 0, 0, 0, 0, 0]}, {"Bytes": [250, 1, 2, 3, 4, 5, 6, 7]})
    assert (d.min, d.max) == (7, 250)
    f32 = list(np.float32(-1.25).tobytes()) + [0] * 4
    assert clip1("FLOAT32", {"Bytes": f32}, {"Float32": "Inf"}).min == -1.25
    assert clip1("FLOAT64", {"Float64": 0.1}, 2).min == 0.1


def test_tensor_desc_from_json_is_public_and_names_the_location():
    t = dml.tensor_desc_from_json(
        {"Type": "BUFFER", "Desc": {"DataType": "DML_TENSOR_DATA_TYPE_INT16", "Sizes": [3]}}, "r"
    )
    assert t == T("INT16", [3])
    assert t.total_tensor_size_in_bytes == 8  # derived: 6 bytes rounded up to 4
    with pytest.raises(
        dml.ValidationError, match=r"^model\.json: resources\.x\.Sizes\[1\] must be"
    ):
        dml.tensor_desc_from_json({"DataType": "INT16", "Sizes": [3, 0]}, "model.json: resources.x")


# --- errors --------------------------------------------------------------------------------------

SPLIT_OK = {
    "InputTensor": J("FLOAT32", [6]),
    "OutputCount": 3,
    "OutputTensors": [J("FLOAT32", [2])] * 3,
    "Axis": 0,
}


def split(**changes) -> dict:
    members = copy.deepcopy(SPLIT_OK)
    for key, value in changes.items():
        if value is None:
            del members[key]
        else:
            members[key] = value
    return {"type": "SPLIT", "desc": members}


def clip1(data_type="FLOAT16", **changes) -> dict:
    obj = {
        "type": "ELEMENT_WISE_CLIP1",
        "InputTensor": J(data_type, [2]),
        "OutputTensor": J(data_type, [2]),
        "MinMaxDataType": data_type,
        "Min": 0,
        "Max": 1,
    }
    obj.update(changes)
    return obj


ERRORS = [
    # unknown operator: the message lists the supported ones
    (
        "unknown_type",
        {"type": "NO_SUCH_OPERATOR", "desc": {}},
        (
            r"^type: unknown operator type 'DML_OPERATOR_NO_SUCH_OPERATOR'; supported: "
            r".*DML_OPERATOR_ARGMAX"
            r".*DML_OPERATOR_TILE"
        ),
    ),
    ("lowercase_type", {"type": "split", "desc": {}}, r"unknown operator type .*supported:"),
    ("non_string_type", {"type": 62, "desc": {}}, r"^type: operator type must be a string"),
    ("missing_type", {"desc": {}}, r"^dispatchable: type is required"),
    ("other_dispatchable_kind", {"type": "HLSL"}, r"^type 'HLSL' is not supported"),
    ("not_an_object", ["SPLIT"], r"^dispatchable must be a JSON object"),
    (
        "desc_not_object",
        {"type": "SPLIT", "desc": [1]},
        r"^DML_OPERATOR_SPLIT: desc must be a JSON",
    ),
    (
        "desc_and_Desc",
        {"type": "SPLIT", "desc": {}, "Desc": {}},
        r"^DML_OPERATOR_SPLIT: .*not both",
    ),
    # missing and extra fields
    ("missing_field", split(Axis=None), r"^DML_OPERATOR_SPLIT: desc\.Axis is required"),
    (
        "null_required_field",
        {"type": "SPLIT", "desc": {**SPLIT_OK, "InputTensor": None}},
        r"^DML_OPERATOR_SPLIT: desc\.InputTensor is required",
    ),
    (
        "missing_tensor_sizes",
        split(InputTensor={"DataType": "FLOAT32"}),
        r"^DML_OPERATOR_SPLIT: desc\.InputTensor\.Sizes is required",
    ),
    (
        "extra_field",
        split(Axes=[0]),
        r"^DML_OPERATOR_SPLIT: desc has unknown member 'Axes'; members: InputTensor, OutputTensors",
    ),
    (
        "extra_field_inline",
        {"type": "SPLIT", **SPLIT_OK, "axis": 0},
        r"^DML_OPERATOR_SPLIT: unknown member 'axis'",
    ),
    (
        "extra_dispatchable_member",
        {**split(), "threadGroupCount": [1, 1, 1]},
        r"^DML_OPERATOR_SPLIT: unknown dispatchable member 'threadGroupCount'",
    ),
    (
        "extra_tensor_member",
        split(InputTensor=J("FLOAT32", [6], Stride=[1])),
        r"^DML_OPERATOR_SPLIT: desc\.InputTensor has unknown member 'Stride'",
    ),
    (
        "extra_nested_tensor_member",
        split(InputTensor={"Type": "BUFFER", "Desc": J("FLOAT32", [6]), "Sizes": [6]}),
        r"^DML_OPERATOR_SPLIT: desc\.InputTensor has unknown member 'Sizes'",
    ),
    (
        "extra_scale_bias_member",
        {
            "type": "ELEMENT_WISE_CLIP",
            "InputTensor": J("FLOAT32", [2]),
            "OutputTensor": J("FLOAT32", [2]),
            "Min": 0,
            "Max": 1,
            "ScaleBias": {"Scale": 1, "Bias": 0, "Shift": 2},
        },
        r"^DML_OPERATOR_ELEMENT_WISE_CLIP: ScaleBias has unknown member 'Shift'",
    ),
    # wrong types
    (
        "size_not_integer",
        split(OutputTensors=[J("FLOAT32", [2]), J("FLOAT32", ["x"]), J("FLOAT32", [2])]),
        r"^DML_OPERATOR_SPLIT: desc\.OutputTensors\[1\]\.Sizes\[0\] must be an integer, got 'x'",
    ),
    (
        "size_float",
        split(InputTensor=J("FLOAT32", [6.0])),
        r"^DML_OPERATOR_SPLIT: desc\.InputTensor\.Sizes\[0\] must be an integer, got 6\.0",
    ),
    (
        "size_zero",
        split(InputTensor=J("FLOAT32", [0])),
        r"^DML_OPERATOR_SPLIT: desc\.InputTensor\.Sizes\[0\] must be >= 1, got 0",
    ),
    (
        "sizes_not_array",
        split(InputTensor={"DataType": "FLOAT32", "Sizes": 6}),
        r"^DML_OPERATOR_SPLIT: desc\.InputTensor\.Sizes must be a sequence",
    ),
    (
        "uint_bool",
        split(Axis=True),
        r"^DML_OPERATOR_SPLIT: desc\.Axis must be an integer, got True",
    ),
    ("uint_negative", split(Axis=-1), r"^DML_OPERATOR_SPLIT: desc\.Axis must be >= 0, got -1"),
    (
        "uint_string",
        split(Axis="0"),
        r"^DML_OPERATOR_SPLIT: desc\.Axis must be an integer, got '0'",
    ),
    (
        "count_float",
        split(OutputCount=3.0),
        r"^DML_OPERATOR_SPLIT: desc\.OutputCount must be an integer",
    ),
    (
        "tensor_array_not_array",
        split(OutputTensors=J("FLOAT32", [6])),
        r"^DML_OPERATOR_SPLIT: desc\.OutputTensors must be a JSON array",
    ),
    (
        "tensor_not_object",
        split(InputTensor="A"),
        r"^DML_OPERATOR_SPLIT: desc\.InputTensor must be a JSON object",
    ),
    (
        "float_string",
        {
            "type": "ELEMENT_WISE_CLIP",
            "InputTensor": J("FLOAT32", [2]),
            "OutputTensor": J("FLOAT32", [2]),
            "Min": "zero",
            "Max": 1,
        },
        r"^DML_OPERATOR_ELEMENT_WISE_CLIP: Min must be a number \(or 'nan', 'inf', '-inf'\), got ",
    ),
    (
        "float_bool",
        {
            "type": "ELEMENT_WISE_CLIP",
            "InputTensor": J("FLOAT32", [2]),
            "OutputTensor": J("FLOAT32", [2]),
            "Min": 0,
            "Max": False,
        },
        r"^DML_OPERATOR_ELEMENT_WISE_CLIP: Max must be a number",
    ),
    (
        "float_nan_rejected_by_clip",
        {
            "type": "ELEMENT_WISE_CLIP",
            "InputTensor": J("FLOAT32", [2]),
            "OutputTensor": J("FLOAT32", [2]),
            "Min": "NaN",
            "Max": 1,
        },
        r"^DML_OPERATOR_ELEMENT_WISE_CLIP: Min must not be NaN",
    ),
    (
        "scale_bias_missing_bias",
        {
            "type": "ELEMENT_WISE_CLIP",
            "InputTensor": J("FLOAT32", [2]),
            "OutputTensor": J("FLOAT32", [2]),
            "Min": 0,
            "Max": 1,
            "ScaleBias": {"Scale": 1},
        },
        r"^DML_OPERATOR_ELEMENT_WISE_CLIP: ScaleBias\.Bias is required",
    ),
    (
        "scale_bias_infinite",
        {
            "type": "ELEMENT_WISE_CLIP",
            "InputTensor": J("FLOAT32", [2]),
            "OutputTensor": J("FLOAT32", [2]),
            "Min": 0,
            "Max": 1,
            "ScaleBias": {"Scale": "inf", "Bias": 0},
        },
        r"^DML_OPERATOR_ELEMENT_WISE_CLIP: ScaleBias\.Scale must be finite",
    ),
    # bad enums (suffixes are exact case; ints are not names)
    (
        "bad_enum_case",
        {
            "type": "REDUCE",
            "desc": {
                "Function": "sum",
                "InputTensor": J("FLOAT32", [3]),
                "OutputTensor": J("FLOAT32", [1]),
                "Axes": [0],
            },
        },
        r"^DML_OPERATOR_REDUCE: desc\.Function must be a ReduceFunction.*got 'sum'",
    ),
    (
        "bad_enum_int",
        {
            "type": "ARGMAX",
            "desc": {
                "InputTensor": J("FLOAT32", [3]),
                "OutputTensor": J("UINT32", [1]),
                "Axes": [0],
                "AxisDirection": 1,
            },
        },
        r"^DML_OPERATOR_ARGMAX: desc\.AxisDirection must be a AxisDirection.*got 1",
    ),
    (
        "bad_data_type",
        split(InputTensor=J("FLOAT8", [6])),
        r"^DML_OPERATOR_SPLIT: desc\.InputTensor\.DataType must be a DataType.*got 'FLOAT8'",
    ),
    (
        "bad_data_type_wrong_prefix",
        split(InputTensor=J("DML_REDUCE_FUNCTION_SUM", [6])),
        r"^DML_OPERATOR_SPLIT: desc\.InputTensor\.DataType must be a DataType",
    ),
    (
        "bad_flag",
        split(InputTensor=J("FLOAT32", [6], Flags=["NONE", "PINNED"])),
        r"^DML_OPERATOR_SPLIT: desc\.InputTensor\.Flags\[1\] must be a TensorFlags.*got 'PINNED'",
    ),
    (
        "bad_tensor_type",
        split(InputTensor={"Type": "DML_TENSOR_TYPE_INVALID", "Desc": J("FLOAT32", [6])}),
        r"^DML_OPERATOR_SPLIT: desc\.InputTensor\.Type must be DML_TENSOR_TYPE_BUFFER",
    ),
    (
        "bad_order",
        {
            "type": "DEPTH_TO_SPACE1",
            "InputTensor": J("FLOAT32", [1, 4, 1, 1]),
            "OutputTensor": J("FLOAT32", [1, 1, 2, 2]),
            "BlockSize": 2,
            "Order": "DCR",
        },
        r"^DML_OPERATOR_DEPTH_TO_SPACE1: Order must be a DepthSpaceOrder.*got 'DCR'",
    ),
    (
        "bad_execution_flag",
        {**split(), "executionFlags": ["NONE", "FAST"]},
        r"^DML_OPERATOR_SPLIT: executionFlags\[1\] must be a DML_EXECUTION_FLAGS name",
    ),
    # counts
    (
        "count_mismatch",
        split(OutputCount=2),
        r"^DML_OPERATOR_SPLIT: desc\.OutputCount must equal the length of OutputTensors \(3\), got",
    ),
    (
        "axis_count_mismatch",
        {
            "type": "REDUCE",
            "desc": {
                "Function": "SUM",
                "InputTensor": J("FLOAT32", [3]),
                "OutputTensor": J("FLOAT32", [1]),
                "AxisCount": 0,
                "Axes": [0],
            },
        },
        r"^DML_OPERATOR_REDUCE: desc\.AxisCount must equal the length of Axes \(1\), got 0",
    ),
    (
        "dimension_count_mismatch",
        split(InputTensor=J("FLOAT32", [6], DimensionCount=2)),
        r"^DML_OPERATOR_SPLIT: desc\.InputTensor\.DimensionCount must equal the length of Sizes",
    ),
    (
        "strides_length",
        split(InputTensor={"Type": "BUFFER", "Desc": J("FLOAT32", [6], Strides=[1, 1])}),
        r"^DML_OPERATOR_SPLIT: desc\.InputTensor\.Desc\.Strides must have one entry per dimension",
    ),
    (
        "total_size_too_small",
        split(InputTensor=J("FLOAT32", [6], TotalTensorSizeInBytes=20)),
        r"^DML_OPERATOR_SPLIT: desc\.InputTensor\.TotalTensorSizeInBytes must be >= 24",
    ),
    (
        "alignment",
        split(InputTensor=J("FLOAT32", [6], GuaranteedBaseOffsetAlignment=6)),
        r"^DML_OPERATOR_SPLIT: desc\.InputTensor\.GuaranteedBaseOffsetAlignment must be 0 or a",
    ),
    # scalar unions
    (
        "union_key_mismatch",
        clip1("FLOAT16", Min={"Float32": 2.0}),
        (
            r"^DML_OPERATOR_ELEMENT_WISE_CLIP1: Min gives union member Float32 but the data type "
            r"is FLOAT16, "
            r"which is read from UInt16"
        ),
    ),
    (
        "union_key_signedness",
        clip1("INT8", Max={"UInt8": 3}),
        r"^DML_OPERATOR_ELEMENT_WISE_CLIP1: Max gives union member UInt8 but the data type is INT8",
    ),
    (
        "union_key_from_output_type",
        clip1("INT32", MinMaxDataType=None, Min={"Int16": 1}),
        r"^DML_OPERATOR_ELEMENT_WISE_CLIP1: Min gives union member Int16 but the data type is INT",
    ),
    (
        "union_unknown_member",
        clip1("FLOAT32", Min={"Half": 1}),
        r"^DML_OPERATOR_ELEMENT_WISE_CLIP1: Min has unknown DML_SCALAR_UNION member 'Half'",
    ),
    (
        "union_two_members",
        clip1("INT8", Min={"Int8": 1, "Int16": 1}),
        r"^DML_OPERATOR_ELEMENT_WISE_CLIP1: Min must name exactly one DML_SCALAR_UNION member",
    ),
    (
        "union_member_out_of_range",
        clip1("INT8", Min={"Int8": -129}),
        r"^DML_OPERATOR_ELEMENT_WISE_CLIP1: Min\.Int8 must be >= -128, got -129",
    ),
    (
        "union_fp16_bits_out_of_range",
        clip1("FLOAT16", Max={"UInt16": 65536}),
        r"^DML_OPERATOR_ELEMENT_WISE_CLIP1: Max\.UInt16 must be <= 65535, got 65536",
    ),
    (
        "union_fp16_bits_not_integer",
        clip1("FLOAT16", Max={"UInt16": 1.5}),
        r"^DML_OPERATOR_ELEMENT_WISE_CLIP1: Max\.UInt16 must be an integer, got 1\.5",
    ),
    (
        "union_fp16_nan_bits",
        clip1("FLOAT16", Max={"UInt16": 0x7E00}),
        r"^DML_OPERATOR_ELEMENT_WISE_CLIP1: Max must not be NaN",
    ),
    (
        "union_plain_not_number",
        clip1("INT8", Min="3"),
        r"^DML_OPERATOR_ELEMENT_WISE_CLIP1: Min must be a number, got '3'",
    ),
    (
        "union_bytes_length",
        clip1("UINT8", Min={"Bytes": [1, 2]}),
        r"^DML_OPERATOR_ELEMENT_WISE_CLIP1: Min\.Bytes must hold the union's 8 bytes, got 2",
    ),
    (
        "union_bytes_range",
        clip1("UINT8", Min={"Bytes": [256, 0, 0, 0, 0, 0, 0, 0]}),
        r"^DML_OPERATOR_ELEMENT_WISE_CLIP1: Min\.Bytes\[0\] must be <= 255",
    ),
    (
        "union_bad_min_max_data_type",
        clip1("INT8", MinMaxDataType="BOOL"),
        r"^DML_OPERATOR_ELEMENT_WISE_CLIP1: MinMaxDataType must be a DataType",
    ),
]


@pytest.mark.parametrize("obj, pattern", [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_json_errors(obj, pattern):
    with pytest.raises(dml.ValidationError, match=pattern):
        dml.operator_desc_from_json(json.loads(json.dumps(obj)))


def test_plain_union_values_are_checked_by_validation():
    """A plain number that the type cannot hold is left to the descriptor's validation."""
    desc = dml.operator_desc_from_json(clip1("INT8", Min=2.5))
    with pytest.raises(
        dml.ValidationError, match=r"^DML_OPERATOR_ELEMENT_WISE_CLIP1: Min must be an integer"
    ):
        dml.validate(desc)
    desc = dml.operator_desc_from_json(clip1("UINT8", Max=256))
    with pytest.raises(
        dml.ValidationError, match=r"^DML_OPERATOR_ELEMENT_WISE_CLIP1: Max \(256\) is outside"
    ):
        dml.validate(desc)


def test_errors_are_never_raw_python_errors():
    """Malformed values in any member raise ValidationError, never KeyError/TypeError."""
    junk = [None, 1, -1, 1.5, "x", True, [], [None], {}, {"a": 1}, [[1]]]
    for _, op, members, _ in CASES:
        for key in members:
            for value in junk:
                obj = {"type": op, "desc": {**copy.deepcopy(members), key: value}}
                try:
                    dml.operator_desc_from_json(obj)
                except dml.ValidationError as e:
                    assert str(e).startswith(("DML_OPERATOR_", "type")), str(e)
