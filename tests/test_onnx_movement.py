"""ONNX's own backend node tests of Slice, Pad, Cast and ReverseSequence, mapped onto DirectML's
data-movement operators as ONNX-on-DirectML does:

- Slice(x, starts, ends, axes, steps) -> SLICE1: starts and ends clamped as ONNX says (to
  [0, n] for a positive step, to [0, n - 1] and [-1, n - 1] for a negative one); the window is
  [start, end) with InputWindowStrides = step, or (end, start] walked backwards for a negative
  step; the output holds ceil(|end - start| / |step|) elements. Axes not named are copied whole.
- Pad(x, pads, value, axes) -> PADDING1 with PaddingValueDataType = the tensor type, mode
  constant / edge / reflect / wrap -> CONSTANT / EDGE / REFLECTION / WRAP.
- Cast(x, to) -> CAST.
- ReverseSequence(x, sequence_lens, batch_axis, time_axis) -> REVERSE_SUBSEQUENCES with Axis =
  time_axis and SequenceLengthsTensor = the lengths (UINT64) along batch_axis, repeated along
  the other dimensions (size 1 at the time axis).

The data comes from the ``onnx`` package's test-case generators (skipped without it). Cases
DirectML cannot express are skipped with the reason: types it lacks (bfloat16, float8, 4- and
2-bit types, strings), types CAST's table rejects (the validation message), empty outputs and
negative pads. Every mapped ONNX operator must pass at least one case.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from onnx_cases import (
    assert_every_op_type_passes,
    assert_outputs,
    attrs,
    case_ids,
    node_cases,
    run_or_skip,
)

import dml_jax as dml

onnx = pytest.importorskip("onnx")
from onnx import numpy_helper

MODULES = {"Slice": "slice", "Pad": "pad", "Cast": "cast", "ReverseSequence": "reversesequence"}
MAPPED = set(MODULES)
CASES = node_cases(MODULES)
ONNX_TO_DML = {
    "FLOAT": "FLOAT32",
    "FLOAT16": "FLOAT16",
    "DOUBLE": "FLOAT64",
    "INT8": "INT8",
    "INT16": "INT16",
    "INT32": "INT32",
    "INT64": "INT64",
    "UINT8": "UINT8",
    "UINT16": "UINT16",
    "UINT32": "UINT32",
    "UINT64": "UINT64",
}
# DirectML's 4-bit types (FL 6_3) are in no table of these operators.
FOUR_BIT = {"UINT4", "INT4"}


def _type_of(value) -> str:
    """The DML data type name of an ONNX value (a TensorProto or an array); skips otherwise."""
    if isinstance(value, onnx.TensorProto):
        name = onnx.TensorProto.DataType.Name(value.data_type)
    else:
        name = {v: k for k, v in ONNX_TO_DML.items()}.get(np.dtype(value.dtype).name.upper())
        name = name or np.dtype(value.dtype).name.upper()
    return _dml_name(name)


def _dml_name(onnx_name: str) -> str:
    if onnx_name in FOUR_BIT:
        pytest.skip(f"{onnx_name} is in no support table of these DirectML operators")
    if onnx_name not in ONNX_TO_DML:
        pytest.skip(f"DirectML has no {onnx_name} data type")
    return ONNX_TO_DML[onnx_name]


def _array(value) -> np.ndarray:
    return numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else value


def _tensor(type_name: str, shape) -> dml.TensorDesc:
    if 0 in shape:
        pytest.skip("DirectML tensors have no zero-sized dimension")
    return dml.TensorDesc(type_name, list(shape) or [1])


def _slice(node, inputs):
    x = _array(inputs[0])
    starts, ends = (np.asarray(_array(a)).tolist() for a in inputs[1:3])
    axes = np.asarray(_array(inputs[3])).tolist() if len(inputs) > 3 else range(len(starts))
    steps = np.asarray(_array(inputs[4])).tolist() if len(inputs) > 4 else [1] * len(starts)
    offsets, sizes, strides = [0] * x.ndim, list(x.shape), [1] * x.ndim
    out = list(x.shape)
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis %= x.ndim
        n = x.shape[axis]
        start = start + n if start < 0 else start
        end = end + n if end < 0 else end
        if step > 0:
            start, end = min(max(start, 0), n), min(max(end, 0), n)
            count = max(0, math.ceil((end - start) / step))
            offsets[axis], sizes[axis] = start, max(end - start, 1)
        else:
            start, end = min(max(start, 0), n - 1), min(max(end, -1), n - 1)
            count = max(0, math.ceil((start - end) / -step))
            offsets[axis], sizes[axis] = end + 1, max(start - end, 1)
        strides[axis], out[axis] = step, count
    t = _type_of(inputs[0])
    desc = dml.Slice1OperatorDesc(_tensor(t, x.shape), _tensor(t, out), offsets, sizes, strides)
    return run_or_skip(desc, x)


PAD_MODES = {"constant": "CONSTANT", "edge": "EDGE", "reflect": "REFLECTION", "wrap": "WRAP"}


def _pad(node, inputs):
    x = _array(inputs[0])
    pads = np.asarray(_array(inputs[1])).tolist()
    value = _array(inputs[2]).item() if len(inputs) > 2 and inputs[2] is not None else 0
    axes = np.asarray(_array(inputs[3])).tolist() if len(inputs) > 3 else range(x.ndim)
    if any(p < 0 for p in pads):
        pytest.skip("negative pads crop; DirectML's StartPadding and EndPadding are UINTs")
    start, end = [0] * x.ndim, [0] * x.ndim
    k = len(pads) // 2
    for i, axis in enumerate(axes):
        start[axis % x.ndim], end[axis % x.ndim] = pads[i], pads[k + i]
    mode = PAD_MODES[attrs(node).get("mode", b"constant").decode()]
    t = _type_of(inputs[0])
    out = [n + a + b for n, a, b in zip(x.shape, start, end)]
    desc = dml.Padding1OperatorDesc(
        _tensor(t, x.shape), _tensor(t, out), mode, t, value, start, end
    )
    return run_or_skip(desc, x)


def _cast(node, inputs):
    source = _type_of(inputs[0])
    to = _dml_name(onnx.TensorProto.DataType.Name(attrs(node)["to"]))
    x_shape = tuple(inputs[0].dims) if isinstance(inputs[0], onnx.TensorProto) else inputs[0].shape
    desc = dml.CastOperatorDesc(_tensor(source, x_shape), _tensor(to, x_shape))
    try:
        dml.validate(desc)
    except dml.ValidationError as e:
        pytest.skip(f"DirectML does not support this case: {e}")
    return run_or_skip(desc, _array(inputs[0]))


def _reverse_sequence(node, inputs):
    x, lengths = _array(inputs[0]), np.asarray(_array(inputs[1]))
    a = attrs(node)
    batch, time = a.get("batch_axis", 1), a.get("time_axis", 0)
    t = _type_of(inputs[0])
    lshape = [1 if i == time else s for i, s in enumerate(x.shape)]
    view = [1] * x.ndim
    view[batch] = x.shape[batch]
    full = np.broadcast_to(lengths.astype(np.uint64).reshape(view), lshape)
    desc = dml.ReverseSubsequencesOperatorDesc(
        _tensor(t, x.shape), _tensor("UINT64", lshape), _tensor(t, x.shape), axis=time
    )
    return run_or_skip(desc, x, np.ascontiguousarray(full))


RUN = {"Slice": _slice, "Pad": _pad, "Cast": _cast, "ReverseSequence": _reverse_sequence}


@functools.cache
def _result(index: int) -> np.ndarray:
    case = CASES[index]
    with np.errstate(all="ignore"):
        return RUN[case.node.op_type](case.node, list(case.inputs))


def _check(index: int) -> None:
    assert_outputs(_result(index), [_array(CASES[index].outputs[0])])


@pytest.mark.parametrize("index", range(len(CASES)), ids=case_ids(CASES))
def test_onnx_node(index):
    _check(index)


def test_every_mapped_operator_has_a_passing_case():
    assert_every_op_type_passes(CASES, _check, MAPPED)
