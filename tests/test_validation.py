"""Validation tables: one failing row per rule, checking ValidationError and the field path.

Each operator has a small factory building a valid descriptor; a row changes one thing and gives
the feature level to validate at and a regex on the message (operator type, then the DML field
path). Support-table rows also give the level at which the same descriptor becomes valid, so
both sides of every feature-level boundary are checked against NOTES.md section 4.
"""

from __future__ import annotations

import enum
import math

import pytest

import dml_jax as dml
from dml_jax import registry
from dml_jax.fields import OperatorDesc

NEWEST = dml.FeatureLevel.FL_6_4


def lead(rank: int, tail: tuple) -> tuple:
    """``tail`` padded on the left with 1s to ``rank`` dimensions (or its last ``rank`` ones)."""
    if rank < len(tail):
        return tuple(tail[len(tail) - rank :])
    return (1,) * (rank - len(tail)) + tuple(tail)


def t(dtype: str = "FLOAT32", sizes=(2, 3), **kw) -> dml.TensorDesc:
    return dml.TensorDesc(dtype, sizes, **kw)


# --- factories: a valid descriptor, with any constructor argument overridden -------------------


def split(dtype="FLOAT32", rank=4, **change):
    def s(*tail):
        return t(dtype, lead(rank, tail))

    base = {"input_tensor": s(6, 2), "output_tensors": [s(2, 2), s(4, 2)], "axis": rank - 2}
    return dml.SplitOperatorDesc(**{**base, **change})


def join(dtype="FLOAT32", rank=4, **change):
    def s(*tail):
        return t(dtype, lead(rank, tail))

    base = {"input_tensors": [s(2, 2), s(4, 2)], "output_tensor": s(6, 2), "axis": rank - 2}
    return dml.JoinOperatorDesc(**{**base, **change})


def _depth_space(cls, to_space: bool, dtype, change):
    depth, space = t(dtype, (1, 8, 2, 3)), t(dtype, (1, 2, 4, 6))
    base = {
        "input_tensor": depth if to_space else space,
        "output_tensor": space if to_space else depth,
        "block_size": 2,
    }
    if cls in (dml.DepthToSpace1OperatorDesc, dml.SpaceToDepth1OperatorDesc):
        base["order"] = "COLUMN_ROW_DEPTH"
    return cls(**{**base, **change})


def d2s(dtype="FLOAT32", **change):
    return _depth_space(dml.DepthToSpaceOperatorDesc, True, dtype, change)


def d2s1(dtype="FLOAT32", **change):
    return _depth_space(dml.DepthToSpace1OperatorDesc, True, dtype, change)


def s2d(dtype="FLOAT32", **change):
    return _depth_space(dml.SpaceToDepthOperatorDesc, False, dtype, change)


def s2d1(dtype="FLOAT32", **change):
    return _depth_space(dml.SpaceToDepth1OperatorDesc, False, dtype, change)


def clip(dtype="FLOAT32", rank=4, **change):
    x = t(dtype, lead(rank, (2, 3)))
    base = {"input_tensor": x, "output_tensor": x, "min": -1.0, "max": 1.0}
    return dml.ElementWiseClipOperatorDesc(**{**base, **change})


def clip1(dtype="FLOAT32", rank=4, **change):
    x = t(dtype, lead(rank, (2, 3)))
    base = {"input_tensor": x, "output_tensor": x, "min": 0, "max": 1, "min_max_data_type": dtype}
    return dml.ElementWiseClip1OperatorDesc(**{**base, **change})


def clip_grad(dtype="FLOAT32", rank=4, **change):
    x = t(dtype, lead(rank, (2, 3)))
    base = {
        "input_tensor": x,
        "input_gradient_tensor": x,
        "output_gradient_tensor": x,
        "min": -1.0,
        "max": 1.0,
    }
    return dml.ElementWiseClipGradOperatorDesc(**{**base, **change})


def clip_grad1(dtype="FLOAT32", rank=4, **change):
    x = t(dtype, lead(rank, (2, 3)))
    base = {
        "input_tensor": x,
        "input_gradient_tensor": x,
        "output_gradient_tensor": x,
        "min": 0,
        "max": 1,
        "min_max_data_type": dtype,
    }
    return dml.ElementWiseClipGrad1OperatorDesc(**{**base, **change})


def tile(dtype="FLOAT32", rank=4, **change):
    base = {
        "input_tensor": t(dtype, lead(rank, (2, 3))),
        "output_tensor": t(dtype, lead(rank, (4, 9))),
        "repeats": lead(rank, (2, 3)),
    }
    return dml.TileOperatorDesc(**{**base, **change})


def reduce(function="SUM", dtype="FLOAT32", rank=4, out_dtype=None, **change):
    base = {
        "function": function,
        "input_tensor": t(dtype, lead(rank, (2, 3))),
        "output_tensor": t(out_dtype or dtype, lead(rank, (2, 1))),
        "axes": [rank - 1],
    }
    return dml.ReduceOperatorDesc(**{**base, **change})


def _arg(cls, dtype, rank, out_dtype, change):
    base = {
        "input_tensor": t(dtype, lead(rank, (2, 3))),
        "output_tensor": t(out_dtype, lead(rank, (2, 1))),
        "axes": [rank - 1],
    }
    return cls(**{**base, **change})


def argmin(dtype="FLOAT32", rank=4, out_dtype="UINT32", **change):
    return _arg(dml.ArgMinOperatorDesc, dtype, rank, out_dtype, change)


def argmax(dtype="FLOAT32", rank=4, out_dtype="UINT32", **change):
    return _arg(dml.ArgMaxOperatorDesc, dtype, rank, out_dtype, change)


FACTORIES = [
    split,
    join,
    d2s,
    d2s1,
    s2d,
    s2d1,
    clip,
    clip1,
    clip_grad,
    clip_grad1,
    tile,
    reduce,
    argmin,
    argmax,
]


@pytest.mark.parametrize("factory", FACTORIES, ids=lambda f: f.__name__)
def test_factories_build_valid_descriptors(factory):
    desc = factory()
    dml.validate(desc)
    assert isinstance(desc, OperatorDesc)


def test_factories_are_registered_operators():
    """Rule rows for the first operators live here; test_registry.py requires rule rows (here or
    in a group's INVALID_ROWS) for every registered operator."""
    assert {f().operator_type for f in FACTORIES} <= {s.name for s in registry.operators()}


# --- operator rules: (factory, change, pattern), validated at the newest level -----------------

S, J = "DML_OPERATOR_SPLIT", "DML_OPERATOR_JOIN"
F4 = t("FLOAT32", (1, 1, 2, 2))

RULES = [
    # generic, compile.py: count members, OWNED_BY_DML on outputs, overlapping output strides
    (
        split,
        {"output_count": 3},
        rf"^{S}: OutputCount must equal the length of OutputTensors \(2\), got 3",
    ),
    (
        join,
        {"input_count": 1},
        rf"^{J}: InputCount must equal the length of InputTensors \(2\), got 1",
    ),
    (
        tile,
        {"repeats_count": 3},
        r"^DML_OPERATOR_TILE: RepeatsCount must equal the length of Repeats \(4\)",
    ),
    (
        reduce,
        {"axis_count": 2},
        r"^DML_OPERATOR_REDUCE: AxisCount must equal the length of Axes \(1\)",
    ),
    (
        argmin,
        {"axis_count": 0},
        r"^DML_OPERATOR_ARGMIN: AxisCount must equal the length of Axes \(1\)",
    ),
    (
        argmax,
        {"axis_count": 5},
        r"^DML_OPERATOR_ARGMAX: AxisCount must equal the length of Axes \(1\)",
    ),
    (split, {"output_count": -1}, rf"^{S}: OutputCount must be >= 0, got -1"),
    (split, {"output_count": 2.0}, rf"^{S}: OutputCount must be an integer, got 2\.0"),
    (
        clip,
        {"output_tensor": t("FLOAT32", (1, 1, 2, 3), flags="OWNED_BY_DML")},
        (
            r"^DML_OPERATOR_ELEMENT_WISE_CLIP: OutputTensor\.Flags must be NONE: "
            r"OWNED_BY_DML applies to "
            r"input tensors only"
        ),
    ),
    (
        split,
        {
            "output_tensors": [
                t("FLOAT32", (1, 1, 2, 2)),
                t("FLOAT32", (1, 1, 4, 2), flags="DML_TENSOR_FLAG_OWNED_BY_DML"),
            ]
        },
        rf"^{S}: OutputTensors\[1\]\.Flags must be NONE",
    ),
    (
        clip,
        {"output_tensor": t("FLOAT32", (1, 1, 2, 3), strides=(6, 6, 0, 1))},
        (
            r"^DML_OPERATOR_ELEMENT_WISE_CLIP: OutputTensor\.Strides \{6, 6, 0, 1\} make "
            r"output elements "
            r"overlap"
        ),
    ),
    # field types, rejected by the constructors
    (split, {"input_tensor": [t()]}, rf"^{S}: InputTensor must be a TensorDesc, got list"),
    (split, {"output_tensors": t()}, rf"^{S}: OutputTensors must be a sequence of TensorDesc"),
    (
        split,
        {"output_tensors": [t(), "x"]},
        rf"^{S}: OutputTensors\[1\] must be a TensorDesc, got str",
    ),
    (split, {"axis": -1}, rf"^{S}: Axis must be >= 0, got -1"),
    (split, {"axis": "2"}, rf"^{S}: Axis must be an integer, got '2'"),
    (split, {"axis": True}, rf"^{S}: Axis must be an integer, got True"),
    (split, {"axis": 2**32}, rf"^{S}: Axis must be <= 4294967295"),
    (tile, {"repeats": 2}, r"^DML_OPERATOR_TILE: Repeats must be a sequence of integers, got 2"),
    (tile, {"repeats": (1, 1, 2, 3.0)}, r"^DML_OPERATOR_TILE: Repeats\[3\] must be an integer"),
    (reduce, {"function": "sum"}, r"^DML_OPERATOR_REDUCE: Function must be a ReduceFunction"),
    (reduce, {"axes": (-1,)}, r"^DML_OPERATOR_REDUCE: Axes\[0\] must be >= 0, got -1"),
    (argmax, {"axis_direction": 1}, r"^DML_OPERATOR_ARGMAX: AxisDirection must be a AxisDirection"),
    (d2s1, {"order": "DCR"}, r"^DML_OPERATOR_DEPTH_TO_SPACE1: Order must be a DepthSpaceOrder"),
    (d2s, {"block_size": 2.0}, r"^DML_OPERATOR_DEPTH_TO_SPACE: BlockSize must be an integer"),
    (
        clip,
        {"scale_bias": (1.0, 0.0)},
        (
            r"^DML_OPERATOR_ELEMENT_WISE_CLIP: ScaleBias must be a "
            r"ScaleBias or None"
        ),
    ),
    (clip, {"min": "0"}, r"^DML_OPERATOR_ELEMENT_WISE_CLIP: Min must be a number, got '0'"),
    (clip, {"max": math.nan}, r"^DML_OPERATOR_ELEMENT_WISE_CLIP: Max must not be NaN"),
    (clip1, {"min": None}, r"^DML_OPERATOR_ELEMENT_WISE_CLIP1: Min is required, got None"),
    (split, {"axis": None}, rf"^{S}: Axis is required, got None"),
    (argmax, {"axis_direction": None}, r"^DML_OPERATOR_ARGMAX: AxisDirection is required"),
    (d2s1, {"order": None}, r"^DML_OPERATOR_DEPTH_TO_SPACE1: Order is required, got None"),
    (clip1, {"max": True}, r"^DML_OPERATOR_ELEMENT_WISE_CLIP1: Max must be a number, got True"),
    (
        clip1,
        {"min_max_data_type": "HALF"},
        (
            r"^DML_OPERATOR_ELEMENT_WISE_CLIP1: MinMaxDataType must be a "
            r"DataType"
        ),
    ),
    (clip_grad, {"min": math.nan}, r"^DML_OPERATOR_ELEMENT_WISE_CLIP_GRAD: Min must not be NaN"),
    (clip_grad1, {"max": math.nan}, r"^DML_OPERATOR_ELEMENT_WISE_CLIP_GRAD1: Max must not be NaN"),
    # SPLIT
    (
        split,
        {"output_tensors": []},
        rf"^{S}: OutputTensors must not be empty \(OutputCount must be > 0\)",
    ),
    (
        split,
        {"axis": 4},
        rf"^{S}: Axis must be in \[0, 3\] \(InputTensor\.DimensionCount - 1\), got 4",
    ),
    (
        split,
        {"output_tensors": [F4, t("INT8", (1, 1, 4, 2))]},
        (
            rf"^{S}: OutputTensors\[1\]\.DataType must equal InputTensor\.DataType "
            rf"\(FLOAT32\), got INT8"
        ),
    ),
    (
        split,
        {"output_tensors": [F4, t("FLOAT32", (1, 4, 2))]},
        (
            rf"^{S}: OutputTensors\[1\]\.DimensionCount must equal InputTensor\.DimensionCount "
            rf"\(4\), got 3"
        ),
    ),
    (
        split,
        {"output_tensors": [F4, t("FLOAT32", (1, 1, 4, 3))]},
        rf"^{S}: OutputTensors\[1\]\.Sizes\[3\] must equal InputTensor\.Sizes\[3\] \(2\), got 3",
    ),
    (
        split,
        {"output_tensors": [F4, t("FLOAT32", (1, 1, 3, 2))]},
        rf"^{S}: OutputTensors sizes along Axis 2 must sum to InputTensor\.Sizes\[2\] \(6\), got 5",
    ),
    # JOIN
    (
        join,
        {"input_tensors": []},
        rf"^{J}: InputTensors must not be empty \(InputCount must be > 0\)",
    ),
    (
        join,
        {"axis": 7},
        rf"^{J}: Axis must be in \[0, 3\] \(OutputTensor\.DimensionCount - 1\), got 7",
    ),
    (
        join,
        {"input_tensors": [t("INT32", (1, 1, 2, 2)), t("FLOAT32", (1, 1, 4, 2))]},
        (
            rf"^{J}: InputTensors\[0\]\.DataType must equal OutputTensor\.DataType "
            rf"\(FLOAT32\), got INT32"
        ),
    ),
    (
        join,
        {"input_tensors": [F4, t("FLOAT32", (1, 1, 1, 4, 2))]},
        rf"^{J}: InputTensors\[1\]\.DimensionCount must equal OutputTensor\.DimensionCount \(4\)",
    ),
    (
        join,
        {"input_tensors": [t("FLOAT32", (2, 1, 2, 2)), t("FLOAT32", (1, 1, 4, 2))]},
        rf"^{J}: InputTensors\[0\]\.Sizes\[0\] must equal OutputTensor\.Sizes\[0\] \(1\), got 2",
    ),
    (
        join,
        {"output_tensor": t("FLOAT32", (1, 1, 7, 2))},
        rf"^{J}: InputTensors sizes along Axis 2 must sum to OutputTensor\.Sizes\[2\] \(7\), got 6",
    ),
    # DEPTH_TO_SPACE(1), SPACE_TO_DEPTH(1)
    (
        d2s,
        {"input_tensor": t("FLOAT32", (8, 2, 3))},
        r"^DML_OPERATOR_DEPTH_TO_SPACE: InputTensor\.DimensionCount must equal 4, got 3",
    ),
    (
        d2s1,
        {"output_tensor": t("FLOAT32", (1, 1, 2, 4, 6))},
        r"^DML_OPERATOR_DEPTH_TO_SPACE1: OutputTensor\.DimensionCount must equal 4, got 5",
    ),
    (d2s, {"block_size": 0}, r"^DML_OPERATOR_DEPTH_TO_SPACE: BlockSize must be > 0, got 0"),
    (
        d2s1,
        {"block_size": 3},
        (
            r"^DML_OPERATOR_DEPTH_TO_SPACE1: InputTensor\.Sizes\[1\] \(channels, 8\) must "
            r"be divisible by "
            r"BlockSize² \(9\)"
        ),
    ),
    (
        d2s,
        {"output_tensor": t("FLOAT32", (1, 2, 4, 5))},
        r"^DML_OPERATOR_DEPTH_TO_SPACE: OutputTensor\.Sizes\[3\] must equal 6, got 5",
    ),
    (
        d2s1,
        {"output_tensor": t("FLOAT32", (2, 2, 4, 6))},
        r"^DML_OPERATOR_DEPTH_TO_SPACE1: OutputTensor\.Sizes\[0\] must equal 1, got 2",
    ),
    (
        d2s,
        {"output_tensor": t("FLOAT16", (1, 2, 4, 6))},
        r"^DML_OPERATOR_DEPTH_TO_SPACE: OutputTensor\.DataType must equal FLOAT32, got FLOAT16",
    ),
    (
        s2d,
        {"input_tensor": t("FLOAT32", (2, 4, 6))},
        r"^DML_OPERATOR_SPACE_TO_DEPTH: InputTensor\.DimensionCount must equal 4, got 3",
    ),
    (s2d1, {"block_size": 0}, r"^DML_OPERATOR_SPACE_TO_DEPTH1: BlockSize must be > 0, got 0"),
    (
        s2d,
        {"block_size": 4},
        (
            r"^DML_OPERATOR_SPACE_TO_DEPTH: InputTensor\.Sizes\[3\] \(6\) must be "
            r"divisible by BlockSize "
            r"\(4\)"
        ),
    ),
    (
        s2d1,
        {"block_size": 3},
        (
            r"^DML_OPERATOR_SPACE_TO_DEPTH1: InputTensor\.Sizes\[2\] \(4\) must be divisible "
            r"by BlockSize"
        ),
    ),
    (
        s2d,
        {"output_tensor": t("FLOAT32", (1, 8, 3, 2))},
        r"^DML_OPERATOR_SPACE_TO_DEPTH: OutputTensor\.Sizes\[2\] must equal 2, got 3",
    ),
    (
        s2d1,
        {"output_tensor": t("UINT8", (1, 8, 2, 3))},
        r"^DML_OPERATOR_SPACE_TO_DEPTH1: OutputTensor\.DataType must equal FLOAT32, got UINT8",
    ),
    # ELEMENT_WISE_CLIP(1)
    (
        clip,
        {"output_tensor": t("FLOAT16", (1, 1, 2, 3))},
        (
            r"^DML_OPERATOR_ELEMENT_WISE_CLIP: OutputTensor\.DataType must equal "
            r"InputTensor\.DataType "
            r"\(FLOAT32\), got FLOAT16"
        ),
    ),
    (
        clip,
        {"output_tensor": t("FLOAT32", (1, 2, 3))},
        (
            r"^DML_OPERATOR_ELEMENT_WISE_CLIP: OutputTensor\.DimensionCount must equal "
            r"InputTensor\.DimensionCount \(4\), got 3"
        ),
    ),
    (
        clip,
        {"output_tensor": t("FLOAT32", (1, 1, 3, 2))},
        (
            r"^DML_OPERATOR_ELEMENT_WISE_CLIP: OutputTensor\.Sizes must equal InputTensor\.Sizes "
            r"\(\{1, 1, 2, 3\}\), got \{1, 1, 3, 2\}"
        ),
    ),
    (
        lambda **c: clip("INT32", **c),
        {"scale_bias": dml.ScaleBias(2, 1)},
        (
            r"^DML_OPERATOR_ELEMENT_WISE_CLIP: ScaleBias is supported only for float "
            r"tensors in dml_jax, "
            r"not INT32"
        ),
    ),
    (
        clip1,
        {"output_tensor": t("INT32", (1, 1, 2, 3))},
        (
            r"^DML_OPERATOR_ELEMENT_WISE_CLIP1: OutputTensor\.DataType must equal "
            r"InputTensor\.DataType"
        ),
    ),
    (
        lambda **c: clip1("UINT8", **c),
        {"scale_bias": dml.ScaleBias(1, 0)},
        r"^DML_OPERATOR_ELEMENT_WISE_CLIP1: ScaleBias is supported only for float tensors",
    ),
    (
        clip1,
        {"min_max_data_type": "FLOAT16"},
        (
            r"^DML_OPERATOR_ELEMENT_WISE_CLIP1: MinMaxDataType must equal OutputTensor\.DataType "
            r"\(FLOAT32\), got FLOAT16"
        ),
    ),
    (
        lambda **c: clip1("INT8", **c),
        {"min": 2.5},
        r"^DML_OPERATOR_ELEMENT_WISE_CLIP1: Min must be an integer for INT8, got 2\.5",
    ),
    (
        lambda **c: clip1("INT8", **c),
        {"max": 128},
        r"^DML_OPERATOR_ELEMENT_WISE_CLIP1: Max \(128\) is outside the range of INT8 \[-128, 127\]",
    ),
    (
        lambda **c: clip1("UINT16", **c),
        {"min": -1},
        r"^DML_OPERATOR_ELEMENT_WISE_CLIP1: Min \(-1\) is outside the range of UINT16",
    ),
    (
        lambda **c: clip1("FLOAT16", **c),
        {"max": 1e5},
        r"^DML_OPERATOR_ELEMENT_WISE_CLIP1: Max \(100000\.0\) is outside the range of FLOAT16",
    ),
    (
        lambda **c: clip1("INT32", min_max_data_type=None, **c),
        {"min": math.inf},
        r"^DML_OPERATOR_ELEMENT_WISE_CLIP1: Min must be an integer for INT32, got inf",
    ),
    # ELEMENT_WISE_CLIP_GRAD(1)
    (
        clip_grad,
        {"input_gradient_tensor": t("FLOAT16", (1, 1, 2, 3))},
        (
            r"^DML_OPERATOR_ELEMENT_WISE_CLIP_GRAD: InputGradientTensor\.DataType must equal "
            r"InputTensor\.DataType \(FLOAT32\), got FLOAT16"
        ),
    ),
    (
        clip_grad,
        {"output_gradient_tensor": t("FLOAT32", (1, 1, 2, 4))},
        (
            r"^DML_OPERATOR_ELEMENT_WISE_CLIP_GRAD: OutputGradientTensor\.Sizes must equal "
            r"InputTensor\.Sizes"
        ),
    ),
    (
        clip_grad1,
        {"input_gradient_tensor": t("FLOAT32", (2, 3))},
        (
            r"^DML_OPERATOR_ELEMENT_WISE_CLIP_GRAD1: InputGradientTensor\.DimensionCount "
            r"must equal "
            r"InputTensor\.DimensionCount \(4\), got 2"
        ),
    ),
    (
        clip_grad1,
        {"min_max_data_type": "INT32"},
        (
            r"^DML_OPERATOR_ELEMENT_WISE_CLIP_GRAD1: MinMaxDataType must equal "
            r"OutputGradientTensor\.DataType \(FLOAT32\), got INT32"
        ),
    ),
    (
        lambda **c: clip_grad1("UINT8", **c),
        {"max": 256},
        r"^DML_OPERATOR_ELEMENT_WISE_CLIP_GRAD1: Max \(256\) is outside the range of UINT8",
    ),
    # TILE
    (
        tile,
        {"repeats": (2, 3)},
        r"^DML_OPERATOR_TILE: Repeats must have one entry per InputTensor dimension \(4\), got 2",
    ),
    (tile, {"repeats": (1, 0, 2, 3)}, r"^DML_OPERATOR_TILE: Repeats\[1\] must be > 0, got 0"),
    (
        tile,
        {"output_tensor": t("FLOAT32", (1, 1, 4, 8))},
        r"^DML_OPERATOR_TILE: OutputTensor\.Sizes\[3\] must equal 9, got 8",
    ),
    (
        tile,
        {"output_tensor": t("FLOAT32", (1, 4, 9))},
        r"^DML_OPERATOR_TILE: OutputTensor\.DimensionCount must equal 4, got 3",
    ),
    (
        tile,
        {"output_tensor": t("INT16", (1, 1, 4, 9))},
        r"^DML_OPERATOR_TILE: OutputTensor\.DataType must equal FLOAT32, got INT16",
    ),
    (
        tile,
        {"repeats": (1, 1, 2**16, 2**16)},
        (
            r"^DML_OPERATOR_TILE: Repeats make the output 25769803776 elements; a buffer "
            r"tensor holds at "
            r"most 4294967295"
        ),
    ),
    # REDUCE
    (
        reduce,
        {"axes": ()},
        r"^DML_OPERATOR_REDUCE: Axes must not be empty \(AxisCount must be > 0\)",
    ),
    (
        reduce,
        {"axes": (4,)},
        (
            r"^DML_OPERATOR_REDUCE: Axes\[0\] must be in \[0, 3\] "
            r"\(InputTensor\.DimensionCount - 1\), got 4"
        ),
    ),
    (
        reduce,
        {"axes": (3, 3)},
        r"^DML_OPERATOR_REDUCE: Axes\[1\] repeats axis 3; axes must be unique",
    ),
    (
        reduce,
        {"output_tensor": t("FLOAT32", (1, 1, 2, 3))},
        r"^DML_OPERATOR_REDUCE: OutputTensor\.Sizes\[3\] must equal 1, got 3",
    ),
    (
        reduce,
        {"output_tensor": t("FLOAT32", (1, 1, 1, 1))},
        r"^DML_OPERATOR_REDUCE: OutputTensor\.Sizes\[2\] must equal 2, got 1",
    ),
    (
        reduce,
        {"output_tensor": t("FLOAT32", (2, 1))},
        r"^DML_OPERATOR_REDUCE: OutputTensor\.DimensionCount must equal 4, got 2",
    ),
    (
        reduce,
        {"output_tensor": t("FLOAT16", (1, 1, 2, 1))},
        r"^DML_OPERATOR_REDUCE: OutputTensor\.DataType must equal FLOAT32, got FLOAT16",
    ),
    (
        lambda **c: reduce("ARGMAX", out_dtype="UINT32", **c),
        {"axes": (0, 0)},
        r"^DML_OPERATOR_REDUCE: Axes\[1\] repeats axis 0",
    ),
    # ARGMIN / ARGMAX
    (argmin, {"axes": []}, r"^DML_OPERATOR_ARGMIN: Axes must not be empty"),
    (argmax, {"axes": [1, 5]}, r"^DML_OPERATOR_ARGMAX: Axes\[1\] must be in \[0, 3\]"),
    (argmax, {"axes": [2, 2]}, r"^DML_OPERATOR_ARGMAX: Axes\[1\] repeats axis 2"),
    (
        argmin,
        {"output_tensor": t("UINT32", (1, 1, 2, 3))},
        r"^DML_OPERATOR_ARGMIN: OutputTensor\.Sizes\[3\] must equal 1, got 3",
    ),
    (
        argmax,
        {"output_tensor": t("UINT32", (1, 2, 1))},
        r"^DML_OPERATOR_ARGMAX: OutputTensor\.DimensionCount must equal 4, got 3",
    ),
]


@pytest.mark.parametrize(
    "factory, change, pattern", RULES, ids=[f"{i}-{r[2][1:40]}" for i, r in enumerate(RULES)]
)
def test_operator_rules(factory, change, pattern):
    with pytest.raises(dml.ValidationError, match=pattern):
        dml.validate(factory(**change))


def test_validate_rejects_what_is_not_a_descriptor():
    with pytest.raises(dml.ValidationError, match=r"^expected an operator description"):
        dml.validate({"type": "SPLIT"})
    with pytest.raises(dml.ValidationError, match=r"^feature_level must be a FeatureLevel"):
        dml.validate(split(), feature_level="7_0")


# --- support tables: (factory, change, rejected at, accepted at, pattern) -----------------------


def _unsupported(op: str, tensor: str, dtype: str, rank: int, level: str, lowest: str | None):
    fix = (
        f"the lowest feature level that supports it is {lowest}"
        if lowest
        else ("no feature level supports it")
    )
    return (
        rf"^{op}: {tensor} with data type {dtype} and DimensionCount {rank} is not supported at "
        rf"feature level {level}; {fix}$"
    )


def _introduced(op: str, lowest: str, level: str):
    return rf"^{op} requires feature level {lowest} or later; the target is {level}$"


R = "DML_OPERATOR_REDUCE with Function"
SUPPORT_ROWS = [
    # SPLIT: 1_0 4-D T6 | 2_1 4-D T8 | 3_0 1-8 T8 | 4_1 1-8 T11
    (
        split,
        {"dtype": "INT8"},
        "1_0",
        "2_1",
        _unsupported(S, "InputTensor", "INT8", 4, "1_0", "2_1"),
    ),
    (split, {"rank": 2}, "2_1", "3_0", _unsupported(S, "InputTensor", "FLOAT32", 2, "2_1", "3_0")),
    (
        split,
        {"dtype": "FLOAT64", "rank": 8},
        "3_0",
        "4_1",
        _unsupported(S, "InputTensor", "FLOAT64", 8, "3_0", "4_1"),
    ),
    (split, {"dtype": "UINT16"}, None, "1_0", None),
    # JOIN: 1_0 4-D T6 | 2_1 4-D T8 | 3_0 4-5 T8 | 3_1 1-8 T8 | 4_1 1-8 T11
    (
        join,
        {"dtype": "UINT8"},
        "1_0",
        "2_1",
        _unsupported(J, "InputTensors[0]", "UINT8", 4, "1_0", "2_1").replace("[0]", r"\[0\]"),
    ),
    (
        join,
        {"rank": 5},
        "2_1",
        "3_0",
        _unsupported(J, "InputTensors[0]", "FLOAT32", 5, "2_1", "3_0").replace("[0]", r"\[0\]"),
    ),
    (
        join,
        {"rank": 3},
        "3_0",
        "3_1",
        _unsupported(J, "InputTensors[0]", "FLOAT32", 3, "3_0", "3_1").replace("[0]", r"\[0\]"),
    ),
    (
        join,
        {"dtype": "INT64"},
        "3_1",
        "4_1",
        _unsupported(J, "InputTensors[0]", "INT64", 4, "3_1", "4_1").replace("[0]", r"\[0\]"),
    ),
    # DEPTH_TO_SPACE / SPACE_TO_DEPTH: 1_0 F2 | 2_1 T8 | 5_0 T11; the "1" versions from 2_1
    (
        d2s,
        {"dtype": "INT32"},
        "1_0",
        "2_1",
        _unsupported("DML_OPERATOR_DEPTH_TO_SPACE", "InputTensor", "INT32", 4, "1_0", "2_1"),
    ),
    (
        d2s,
        {"dtype": "FLOAT64"},
        "4_1",
        "5_0",
        _unsupported("DML_OPERATOR_DEPTH_TO_SPACE", "InputTensor", "FLOAT64", 4, "4_1", "5_0"),
    ),
    (d2s1, {}, "2_0", "2_1", _introduced("DML_OPERATOR_DEPTH_TO_SPACE1", "2_1", "2_0")),
    (
        d2s1,
        {"dtype": "UINT64"},
        "4_1",
        "5_0",
        _unsupported("DML_OPERATOR_DEPTH_TO_SPACE1", "InputTensor", "UINT64", 4, "4_1", "5_0"),
    ),
    (
        s2d,
        {"dtype": "UINT8"},
        "1_0",
        "2_1",
        _unsupported("DML_OPERATOR_SPACE_TO_DEPTH", "InputTensor", "UINT8", 4, "1_0", "2_1"),
    ),
    (
        s2d,
        {"dtype": "INT64"},
        "4_1",
        "5_0",
        _unsupported("DML_OPERATOR_SPACE_TO_DEPTH", "InputTensor", "INT64", 4, "4_1", "5_0"),
    ),
    (s2d1, {}, "1_0", "2_1", _introduced("DML_OPERATOR_SPACE_TO_DEPTH1", "2_1", "1_0")),
    (
        s2d1,
        {"dtype": "FLOAT64"},
        "4_1",
        "5_0",
        _unsupported("DML_OPERATOR_SPACE_TO_DEPTH1", "InputTensor", "FLOAT64", 4, "4_1", "5_0"),
    ),
    # ELEMENT_WISE_CLIP: 1_0 4-D F2 | 2_1 4-D T8 | 3_0 1-8 T8 | 5_0 1-8 T10
    (
        clip,
        {"dtype": "INT16"},
        "1_0",
        "2_1",
        _unsupported("DML_OPERATOR_ELEMENT_WISE_CLIP", "InputTensor", "INT16", 4, "1_0", "2_1"),
    ),
    (
        clip,
        {"rank": 1},
        "2_1",
        "3_0",
        _unsupported("DML_OPERATOR_ELEMENT_WISE_CLIP", "InputTensor", "FLOAT32", 1, "2_1", "3_0"),
    ),
    (
        clip,
        {"dtype": "UINT64", "rank": 8},
        "4_1",
        "5_0",
        _unsupported("DML_OPERATOR_ELEMENT_WISE_CLIP", "InputTensor", "UINT64", 8, "4_1", "5_0"),
    ),
    (
        clip,
        {"dtype": "FLOAT64"},
        "6_4",
        None,
        _unsupported("DML_OPERATOR_ELEMENT_WISE_CLIP", "InputTensor", "FLOAT64", 4, "6_4", None),
    ),
    # ELEMENT_WISE_CLIP1: 5_0 1-8 T10
    (clip1, {}, "4_1", "5_0", _introduced("DML_OPERATOR_ELEMENT_WISE_CLIP1", "5_0", "4_1")),
    (
        clip1,
        {"dtype": "FLOAT64"},
        "6_4",
        None,
        _unsupported("DML_OPERATOR_ELEMENT_WISE_CLIP1", "InputTensor", "FLOAT64", 4, "6_4", None),
    ),
    # ELEMENT_WISE_CLIP_GRAD: 3_1 1-8 T8 | 5_0 1-8 T10; CLIP_GRAD1: 5_0 1-8 T10
    (clip_grad, {}, "3_0", "3_1", _introduced("DML_OPERATOR_ELEMENT_WISE_CLIP_GRAD", "3_1", "3_0")),
    (
        clip_grad,
        {"dtype": "INT64", "rank": 1},
        "4_1",
        "5_0",
        _unsupported(
            "DML_OPERATOR_ELEMENT_WISE_CLIP_GRAD", "InputTensor", "INT64", 1, "4_1", "5_0"
        ),
    ),
    (
        clip_grad,
        {"dtype": "FLOAT64"},
        "6_4",
        None,
        _unsupported(
            "DML_OPERATOR_ELEMENT_WISE_CLIP_GRAD", "InputTensor", "FLOAT64", 4, "6_4", None
        ),
    ),
    (
        clip_grad1,
        {"rank": 8},
        "4_1",
        "5_0",
        _introduced("DML_OPERATOR_ELEMENT_WISE_CLIP_GRAD1", "5_0", "4_1"),
    ),
    # TILE: 1_0 4-D F2 | 2_1 4-D T8 | 3_1 1-8 T8 | 4_1 1-8 T10
    (
        tile,
        {"dtype": "INT8"},
        "1_0",
        "2_1",
        _unsupported("DML_OPERATOR_TILE", "InputTensor", "INT8", 4, "1_0", "2_1"),
    ),
    (
        tile,
        {"rank": 2},
        "2_1",
        "3_1",
        _unsupported("DML_OPERATOR_TILE", "InputTensor", "FLOAT32", 2, "2_1", "3_1"),
    ),
    (
        tile,
        {"rank": 2},
        "3_0",
        "3_1",
        _unsupported("DML_OPERATOR_TILE", "InputTensor", "FLOAT32", 2, "3_0", "3_1"),
    ),
    (
        tile,
        {"dtype": "INT64"},
        "3_1",
        "4_1",
        _unsupported("DML_OPERATOR_TILE", "InputTensor", "INT64", 4, "3_1", "4_1"),
    ),
    (
        tile,
        {"dtype": "FLOAT64"},
        "6_4",
        None,
        _unsupported("DML_OPERATOR_TILE", "InputTensor", "FLOAT64", 4, "6_4", None),
    ),
    # REDUCE ARGMIN/ARGMAX: 1_0 4-D F2->UINT32 | 2_1 4-D T8->UINT32 | 3_0 1-8 T8->IDX | 4_1 T10
    (
        reduce,
        {"function": "ARGMAX", "dtype": "INT8", "out_dtype": "UINT32"},
        "1_0",
        "2_1",
        _unsupported(f"{R} ARGMAX", "InputTensor", "INT8", 4, "1_0", "2_1"),
    ),
    (
        reduce,
        {"function": "ARGMIN", "out_dtype": "INT32"},
        "2_1",
        "3_0",
        _unsupported(f"{R} ARGMIN", "OutputTensor", "INT32", 4, "2_1", "3_0"),
    ),
    (
        reduce,
        {"function": "ARGMIN", "out_dtype": "UINT32", "rank": 3},
        "2_1",
        "3_0",
        _unsupported(f"{R} ARGMIN", "InputTensor", "FLOAT32", 3, "2_1", "3_0"),
    ),
    (
        reduce,
        {"function": "ARGMAX", "dtype": "INT64", "out_dtype": "INT64"},
        "3_0",
        "4_1",
        _unsupported(f"{R} ARGMAX", "InputTensor", "INT64", 4, "3_0", "4_1"),
    ),
    (
        reduce,
        {"function": "ARGMAX", "out_dtype": "FLOAT32"},
        "6_4",
        None,
        _unsupported(f"{R} ARGMAX", "OutputTensor", "FLOAT32", 4, "6_4", None),
    ),
    # REDUCE AVERAGE, L2, LOG_SUM, LOG_SUM_EXP: 1_0 4-D F2 | 3_0 1-8 F2 (never integers)
    (
        reduce,
        {"function": "AVERAGE", "dtype": "INT32"},
        "6_4",
        None,
        _unsupported(f"{R} AVERAGE", "InputTensor", "INT32", 4, "6_4", None),
    ),
    (
        reduce,
        {"function": "LOG_SUM_EXP", "rank": 2},
        "2_1",
        "3_0",
        _unsupported(f"{R} LOG_SUM_EXP", "InputTensor", "FLOAT32", 2, "2_1", "3_0"),
    ),
    (
        reduce,
        {"function": "L2", "dtype": "UINT32"},
        "6_4",
        None,
        _unsupported(f"{R} L2", "InputTensor", "UINT32", 4, "6_4", None),
    ),
    (reduce, {"function": "LOG_SUM", "dtype": "FLOAT16"}, None, "1_0", None),
    # REDUCE L1, SUM_SQUARE: 1_0 4-D F2 | 3_0 1-8 F2 | 5_0 1-8 S6
    (
        reduce,
        {"function": "L1", "dtype": "INT32"},
        "4_1",
        "5_0",
        _unsupported(f"{R} L1", "InputTensor", "INT32", 4, "4_1", "5_0"),
    ),
    (
        reduce,
        {"function": "SUM_SQUARE", "rank": 6},
        "2_1",
        "3_0",
        _unsupported(f"{R} SUM_SQUARE", "InputTensor", "FLOAT32", 6, "2_1", "3_0"),
    ),
    (
        reduce,
        {"function": "SUM_SQUARE", "dtype": "INT16"},
        "6_4",
        None,
        _unsupported(f"{R} SUM_SQUARE", "InputTensor", "INT16", 4, "6_4", None),
    ),
    # REDUCE MIN, MAX: 1_0 4-D F2 | 2_1 4-D S4 | 3_0 1-8 T8 | 5_0 1-8 T10
    (
        reduce,
        {"function": "MIN", "dtype": "UINT32"},
        "1_0",
        "2_1",
        _unsupported(f"{R} MIN", "InputTensor", "UINT32", 4, "1_0", "2_1"),
    ),
    (
        reduce,
        {"function": "MAX", "dtype": "INT8"},
        "2_1",
        "3_0",
        _unsupported(f"{R} MAX", "InputTensor", "INT8", 4, "2_1", "3_0"),
    ),
    (
        reduce,
        {"function": "MAX", "dtype": "UINT64", "rank": 1},
        "4_1",
        "5_0",
        _unsupported(f"{R} MAX", "InputTensor", "UINT64", 1, "4_1", "5_0"),
    ),
    # REDUCE MULTIPLY, SUM: 1_0 4-D F2 | 2_1 4-D S4 | 3_0 1-8 S4 | 5_0 1-8 S6
    (
        reduce,
        {"function": "SUM", "dtype": "INT32"},
        "1_0",
        "2_1",
        _unsupported(f"{R} SUM", "InputTensor", "INT32", 4, "1_0", "2_1"),
    ),
    (
        reduce,
        {"function": "MULTIPLY", "rank": 5},
        "2_1",
        "3_0",
        _unsupported(f"{R} MULTIPLY", "InputTensor", "FLOAT32", 5, "2_1", "3_0"),
    ),
    (
        reduce,
        {"function": "SUM", "dtype": "INT64"},
        "4_1",
        "5_0",
        _unsupported(f"{R} SUM", "InputTensor", "INT64", 4, "4_1", "5_0"),
    ),
    (
        reduce,
        {"function": "SUM", "dtype": "INT8"},
        "6_4",
        None,
        _unsupported(f"{R} SUM", "InputTensor", "INT8", 4, "6_4", None),
    ),
    # ARGMIN / ARGMAX: 3_0 1-8 T8->IDX | 4_1 1-8 T10->IDX
    (argmax, {}, "2_1", "3_0", _introduced("DML_OPERATOR_ARGMAX", "3_0", "2_1")),
    (argmin, {}, "2_0", "3_0", _introduced("DML_OPERATOR_ARGMIN", "3_0", "2_0")),
    (
        argmin,
        {"dtype": "INT64", "out_dtype": "INT64", "rank": 2},
        "3_1",
        "4_1",
        _unsupported("DML_OPERATOR_ARGMIN", "InputTensor", "INT64", 2, "3_1", "4_1"),
    ),
    (
        argmax,
        {"out_dtype": "INT16"},
        "6_4",
        None,
        _unsupported("DML_OPERATOR_ARGMAX", "OutputTensor", "INT16", 4, "6_4", None),
    ),
    (
        argmin,
        {"dtype": "FLOAT64", "out_dtype": "INT64"},
        "6_4",
        None,
        _unsupported("DML_OPERATOR_ARGMIN", "InputTensor", "FLOAT64", 4, "6_4", None),
    ),
]


def _ids(rows):
    return [f"{r[0].__name__}-{'-'.join(map(str, r[1].values()))}-{r[2]}-{r[3]}" for r in rows]


@pytest.mark.parametrize(
    "factory, change, rejected, accepted, pattern", SUPPORT_ROWS, ids=_ids(SUPPORT_ROWS)
)
def test_support_boundaries(factory, change, rejected, accepted, pattern):
    desc = factory(**change)
    if rejected is not None:
        with pytest.raises(dml.ValidationError, match=pattern):
            dml.validate(desc, feature_level=rejected)
    if accepted is not None:
        dml.validate(desc, feature_level=accepted)
        dml.validate(desc, feature_level=dml.FeatureLevel.FL_6_4)  # levels are supersets


def test_support_rows_cover_the_first_operators_and_every_reduce_function():
    ops = {r[0](**r[1]).operator_type for r in SUPPORT_ROWS}
    # The first operators' rows here; every registered operator's introduction level is checked
    # from its registry entry in test_examples.py.
    assert ops <= {s.name for s in registry.operators()}
    functions = {r[1].get("function", "SUM") for r in SUPPORT_ROWS if r[0] is reduce}
    groups = [
        {"ARGMAX", "ARGMIN"},
        {"AVERAGE", "L2", "LOG_SUM", "LOG_SUM_EXP"},
        {"L1", "SUM_SQUARE"},
        {"MIN", "MAX"},
        {"MULTIPLY", "SUM"},
    ]
    assert all(group & functions for group in groups)


# --- TensorDesc, ScaleBias and enum parsing -----------------------------------------------------

TD = "TensorDesc"
TENSOR_RULES = [
    ({"data_type": "FLOAT8"}, rf"^{TD}\.DataType must be a DataType .*got 'FLOAT8'"),
    ({"data_type": "UNKNOWN"}, rf"^{TD}\.DataType must be a DataType .*got 'UNKNOWN'"),
    ({"data_type": "DML_TENSOR_DATA_TYPE_UNKNOWN"}, rf"^{TD}\.DataType must be a DataType"),
    ({"data_type": 1}, rf"^{TD}\.DataType must be a DataType .*got 1$"),
    ({"data_type": "float32"}, rf"^{TD}\.DataType must be a DataType .*got 'float32'"),
    ({"flags": "OWNED"}, rf"^{TD}\.Flags must be a TensorFlags"),
    ({"flags": 1}, rf"^{TD}\.Flags must be a TensorFlags"),
    ({"sizes": 6}, rf"^{TD}\.Sizes must be a sequence of integers, got 6"),
    ({"sizes": (2, "3")}, rf"^{TD}\.Sizes\[1\] must be an integer, got '3'"),
    ({"sizes": (2, 3.0)}, rf"^{TD}\.Sizes\[1\] must be an integer, got 3\.0"),
    ({"sizes": (2, True)}, rf"^{TD}\.Sizes\[1\] must be an integer, got True"),
    ({"sizes": (2, 0)}, rf"^{TD}\.Sizes\[1\] must be >= 1, got 0"),
    ({"sizes": (-2, 3)}, rf"^{TD}\.Sizes\[0\] must be >= 1, got -2"),
    ({"sizes": (2**32, 1)}, rf"^{TD}\.Sizes\[0\] must be <= 4294967295, got 4294967296"),
    ({"sizes": ()}, rf"^{TD}\.DimensionCount must be in \[1, 8\], got 0"),
    ({"sizes": (1,) * 9}, rf"^{TD}\.DimensionCount must be in \[1, 8\], got 9"),
    (
        {"sizes": (2**16, 2**16)},
        rf"^{TD}\.Sizes describe 4294967296 elements; a buffer tensor holds at most 4294967295",
    ),
    ({"strides": (1,)}, rf"^{TD}\.Strides must have one entry per dimension \(2\), got 1"),
    ({"strides": (3, -1)}, rf"^{TD}\.Strides\[1\] must be >= 0, got -1"),
    ({"strides": 1}, rf"^{TD}\.Strides must be a sequence of integers"),
    ({"strides": (2**31, 2**31)}, rf"^{TD}\.Strides address element 6442450944; a buffer tensor"),
    (
        {"total_tensor_size_in_bytes": 20},
        rf"^{TD}\.TotalTensorSizeInBytes must be >= 24 \(DMLCalcBufferTensorSize\), got 20",
    ),
    ({"total_tensor_size_in_bytes": 26}, rf"^{TD}\.TotalTensorSizeInBytes must be a multiple of 4"),
    ({"total_tensor_size_in_bytes": 24.0}, rf"^{TD}\.TotalTensorSizeInBytes must be an integer"),
    (
        {"total_tensor_size_in_bytes": 2**64},
        rf"^{TD}\.TotalTensorSizeInBytes must be <= 18446744073709551615",
    ),
    (
        {"guaranteed_base_offset_alignment": 24},
        (
            rf"^{TD}\.GuaranteedBaseOffsetAlignment must be 0 or a power of two >= the "
            rf"element size "
            rf"\(4\), got 24"
        ),
    ),
    (
        {"guaranteed_base_offset_alignment": 2},
        rf"^{TD}\.GuaranteedBaseOffsetAlignment must be 0 or a power of two >= the element size",
    ),
    (
        {"guaranteed_base_offset_alignment": -16},
        rf"^{TD}\.GuaranteedBaseOffsetAlignment must be >= 0",
    ),
]


@pytest.mark.parametrize(
    "change, pattern", TENSOR_RULES, ids=[f"{i}-{r[1][14:50]}" for i, r in enumerate(TENSOR_RULES)]
)
def test_tensor_desc_rules(change, pattern):
    args = {"data_type": "FLOAT32", "sizes": (2, 3), **change}
    with pytest.raises(dml.ValidationError, match=pattern):
        dml.TensorDesc(**args)


def test_tensor_desc_size_arithmetic_accepts_the_boundaries():
    """The rows above fail by one; these sit exactly on the limits (NOTES 1.3 worked values)."""
    assert dml.TensorDesc("FLOAT16", [5]).total_tensor_size_in_bytes == 12
    assert dml.TensorDesc("FLOAT32", [3, 2, 5], [0, 0, 1]).total_tensor_size_in_bytes == 20
    assert dml.TensorDesc("FLOAT32", [1, 1, 2, 3], [6, 6, 3, 1]).total_tensor_size_in_bytes == 24
    assert dml.TensorDesc("UINT8", [1] * 8, total_tensor_size_in_bytes=4).rank == 8
    assert dml.TensorDesc("FLOAT32", (2, 3), guaranteed_base_offset_alignment=4)
    assert dml.TensorDesc("INT8", (2, 3), guaranteed_base_offset_alignment=1)
    assert dml.TensorDesc("UINT8", (2**16, 2**16 - 1)).element_count == 2**32 - 2**16


SCALE_BIAS_RULES = [
    ({"scale": "1"}, r"^ScaleBias\.Scale must be a number, got '1'"),
    ({"bias": None}, r"^ScaleBias\.Bias must be a number, got None"),
    ({"scale": True}, r"^ScaleBias\.Scale must be a number, got True"),
    ({"scale": math.inf}, r"^ScaleBias\.Scale must be finite, got inf"),
    ({"bias": math.nan}, r"^ScaleBias\.Bias must be finite, got nan"),
]


@pytest.mark.parametrize("change, pattern", SCALE_BIAS_RULES)
def test_scale_bias_rules(change, pattern):
    with pytest.raises(dml.ValidationError, match=pattern):
        dml.ScaleBias(**{"scale": 1.0, "bias": 0.0, **change})


# Every enum the public API exports.
ENUMS = [v for v in map(dml.__dict__.get, dml.__all__) if isinstance(v, enum.EnumMeta)]
BAD_ENUM_VALUES = [
    0,
    1,
    True,
    None,
    1.0,
    "",
    "sum",
    "float32",
    "DML_",
    "NOT_A_MEMBER",
    "DML_OPERATOR_SPLIT",
]


@pytest.mark.parametrize("enum_cls", ENUMS, ids=lambda e: e.__name__)
def test_enum_parsing_rejects_everything_else(enum_cls):
    for value in BAD_ENUM_VALUES + [m.name.lower() for m in enum_cls]:
        with pytest.raises(dml.ValidationError, match=rf"^where must be a {enum_cls.__name__} "):
            enum_cls.parse(value, "where")
    other = next(e for e in ENUMS if e is not enum_cls and e is not dml.FeatureLevel)
    with pytest.raises(dml.ValidationError):
        enum_cls.parse(next(iter(other)), "where")  # a member of another enum


def test_every_exported_enum_is_checked():
    assert {e.__name__ for e in ENUMS} == {
        "DataType",
        "TensorFlags",
        "FeatureLevel",
        "ReduceFunction",
        "DepthSpaceOrder",
        "AxisDirection",
        "RoundingMode",
        "IsInfinityMode",
        "MatrixTransform",
        "ConvolutionMode",
        "ConvolutionDirection",
        "PaddingMode",
        "RandomGeneratorType",
        "InterpolationMode",
        "RecurrentNetworkDirection",
        "QuantizationType",
        "MultiheadAttentionMaskType",
    }
