"""DML_OPERATOR_SPLIT and DML_OPERATOR_JOIN: cut a tensor along an axis, and its inverse."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from jax import lax

from ..enums import FeatureLevel as L
from ..errors import Validator
from ..fields import UINT, OperatorDesc, attribute, count_of, input_field, output_field
from ..registry import Example, register
from ..support import DIMS1_8, DIMS4, DIMS4_5, T6, T8, T11, rows
from ..tensor import TensorDesc


def _check_pieces(v: Validator, whole: tuple, pieces: list, axis: int, array: str) -> None:
    """Shared SPLIT/JOIN rule: pieces match the whole except along Axis, where they sum to it."""
    whole_path, whole_desc = whole
    v.axis("Axis", axis, whole_desc.rank, whole_path)
    v.same("data_type", pieces, whole)
    v.same("rank", pieces, whole)
    for path, t in pieces:
        for d, (got, want) in enumerate(zip(t.sizes, whole_desc.sizes)):
            if d != axis:
                v.equal(f"{path}.Sizes[{d}]", got, want, f"{whole_path}.Sizes[{d}]")
    total = sum(t.sizes[axis] for _, t in pieces)
    v.check(
        array,
        total == whole_desc.sizes[axis],
        f"sizes along Axis {axis} must sum to {whole_path}.Sizes[{axis}] "
        f"({whole_desc.sizes[axis]}), got {total}",
    )


@dataclass(frozen=True)
class SplitOperatorDesc(OperatorDesc):
    """DML_SPLIT_OPERATOR_DESC: cuts InputTensor along Axis into consecutive pieces (FL 1_0).

    Fields:
        input_tensor: the tensor to cut.
        output_tensors: one desc per piece; sizes equal the input's except along Axis, where
            they sum to the input's size. At least one (one piece is a copy).
        axis: the dimension to cut, in [0, InputTensor.DimensionCount - 1].
        output_count: optional; must equal ``len(output_tensors)``.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_SPLIT"
    input_tensor: TensorDesc = input_field()
    output_tensors: tuple[TensorDesc, ...] = output_field(array=True)
    axis: int = attribute(UINT)
    output_count: int | None = count_of("output_tensors")


def infer_split(d: SplitOperatorDesc) -> tuple[TensorDesc, ...]:
    x = d.input_tensor
    return tuple(
        x.like(sizes=x.sizes[: d.axis] + (t.sizes[d.axis],) + x.sizes[d.axis + 1 :])
        for t in d.output_tensors
    )


def validate_split(d: SplitOperatorDesc, v: Validator) -> None:
    v.nonempty("OutputTensors", d.output_tensors, "OutputCount")
    pieces = [(f"OutputTensors[{i}]", t) for i, t in enumerate(d.output_tensors)]
    _check_pieces(v, ("InputTensor", d.input_tensor), pieces, d.axis, "OutputTensors")


def _slices(d: SplitOperatorDesc, x):
    outputs, start = [], 0
    for t in d.output_tensors:
        stop = start + t.sizes[d.axis]
        outputs.append(lax.slice_in_dim(x, start, stop, axis=d.axis))
        start = stop
    return tuple(outputs)


def lower_split(d: SplitOperatorDesc, x):
    return _slices(d, x)


register(
    SplitOperatorDesc,
    infer=infer_split,
    validate=validate_split,
    lower=lower_split,
    support=rows(
        (L.FL_1_0, DIMS4, T6),
        (L.FL_2_1, DIMS4, T8),
        (L.FL_3_0, DIMS1_8, T8),
        (L.FL_4_1, DIMS1_8, T11),
    ),
    example=Example(
        {
            "type": "DML_OPERATOR_SPLIT",
            "desc": {
                "InputTensor": {"DataType": "FLOAT32", "Sizes": [1, 1, 6, 2]},
                "OutputCount": 3,
                "OutputTensors": [
                    {"DataType": "FLOAT32", "Sizes": [1, 1, 2, 2]},
                    {"DataType": "FLOAT32", "Sizes": [1, 1, 1, 2]},
                    {"DataType": "FLOAT32", "Sizes": [1, 1, 3, 2]},
                ],
                "Axis": 2,
            },
        },
        {"InputTensor": list(range(1, 13))},
        "six rows cut into pieces of 2, 1 and 3 rows",
    ),
)


@dataclass(frozen=True)
class JoinOperatorDesc(OperatorDesc):
    """DML_JOIN_OPERATOR_DESC: concatenates InputTensors along Axis (FL 1_0); SPLIT's inverse.

    Fields:
        input_tensors: at least one desc; sizes equal the output's except along Axis.
        output_tensor: the result; its size along Axis is the sum of the inputs'.
        axis: the dimension to join along, in [0, OutputTensor.DimensionCount - 1].
        input_count: optional; must equal ``len(input_tensors)``.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_JOIN"
    input_tensors: tuple[TensorDesc, ...] = input_field(array=True)
    output_tensor: TensorDesc = output_field()
    axis: int = attribute(UINT)
    input_count: int | None = count_of("input_tensors")


def infer_join(d: JoinOperatorDesc) -> tuple[TensorDesc, ...]:
    first = d.input_tensors[0]
    total = sum(t.sizes[d.axis] for t in d.input_tensors)
    return (first.like(sizes=first.sizes[: d.axis] + (total,) + first.sizes[d.axis + 1 :]),)


def validate_join(d: JoinOperatorDesc, v: Validator) -> None:
    v.nonempty("InputTensors", d.input_tensors, "InputCount")
    pieces = [(f"InputTensors[{i}]", t) for i, t in enumerate(d.input_tensors)]
    _check_pieces(v, ("OutputTensor", d.output_tensor), pieces, d.axis, "InputTensors")


def lower_join(d: JoinOperatorDesc, *xs):
    return (lax.concatenate(xs, d.axis),)


register(
    JoinOperatorDesc,
    infer=infer_join,
    validate=validate_join,
    lower=lower_join,
    support=rows(
        (L.FL_1_0, DIMS4, T6),
        (L.FL_2_1, DIMS4, T8),
        (L.FL_3_0, DIMS4_5, T8),
        (L.FL_3_1, DIMS1_8, T8),
        (L.FL_4_1, DIMS1_8, T11),
    ),
    example=Example(
        {
            "type": "DML_OPERATOR_JOIN",
            "desc": {
                "InputCount": 3,
                "InputTensors": [
                    {"DataType": "INT32", "Sizes": [2, 1]},
                    {"DataType": "INT32", "Sizes": [2, 2]},
                    {"DataType": "INT32", "Sizes": [2, 1]},
                ],
                "OutputTensor": {"DataType": "INT32", "Sizes": [2, 4]},
                "Axis": 1,
            },
        },
        {"InputTensors": [[1, 5], [2, 3, 6, 7], [4, 8]]},
        "three column blocks joined into {2, 4}",
    ),
)
