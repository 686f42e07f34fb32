"""ONNX's own backend node tests of CumSum, Range, Trilu and EyeLike, mapped onto DirectML's
scans and generators as ONNX-on-DirectML does:

- CumSum(x, axis) -> CUMULATIVE_SUMMATION: a negative axis counts from the end; ``reverse``
  -> AxisDirection DECREASING; ``exclusive`` -> HasExclusiveSum.
- Range(start, limit, delta) -> FILL_VALUE_SEQUENCE on { n } with
  n = max(ceil((limit - start) / delta), 0), ValueStart = start, ValueDelta = delta.
- Trilu(x, k) -> DIAGONAL_MATRIX1 with InputTensor x and Value 0 on the band that is zeroed:
  upper keeps column - row >= k, so [Begin, End) = [INT_MIN, k); lower keeps column - row <= k,
  so [k + 1, INT_MAX).
- EyeLike(x, k, dtype) -> DIAGONAL_MATRIX1 without an input: Value 1 on [k, k + 1).

The data comes from the ``onnx`` package's test-case generators (skipped without it). Cases
DirectML's tables reject (FLOAT64 sums, bfloat16, empty tensors) are skipped with the reason;
every mapped ONNX operator must pass at least one case.
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
    dml_type,
    node_cases,
    run_or_skip,
)

import dml_jax as dml

onnx = pytest.importorskip("onnx")

MODULES = {"CumSum": "cumsum", "Range": "rangeop", "Trilu": "trilu", "EyeLike": "eyelike"}
MAPPED = set(MODULES)
CASES = node_cases(MODULES)
INT_MIN, INT_MAX = -(2**31), 2**31 - 1


def _tensor(dtype, shape) -> dml.TensorDesc:
    if 0 in shape:
        pytest.skip("DirectML tensors have no zero-sized dimension")
    return dml.TensorDesc(dml_type(dtype), list(shape) or [1])


def _cumsum(node, inputs):
    x, axis = inputs
    a = attrs(node)
    t = _tensor(x.dtype, x.shape)
    desc = dml.CumulativeSummationOperatorDesc(
        t,
        t,
        axis=int(axis) % x.ndim,
        axis_direction="DECREASING" if a.get("reverse", 0) else "INCREASING",
        has_exclusive_sum=bool(a.get("exclusive", 0)),
    )
    return run_or_skip(desc, x)


def _range(node, inputs):
    start, limit, delta = (a.item() for a in inputs)
    n = max(math.ceil((limit - start) / delta), 0)
    dtype = inputs[0].dtype
    out = _tensor(dtype, (n,))
    desc = dml.FillValueSequenceOperatorDesc(out, out.data_type, start, delta)
    return run_or_skip(desc)


def _trilu(node, inputs):
    x = inputs[0]
    k = int(inputs[1]) if len(inputs) > 1 else 0
    t = _tensor(x.dtype, x.shape)
    if attrs(node).get("upper", 1):
        begin, end = INT_MIN, k
    else:
        begin, end = k + 1, INT_MAX
    desc = dml.DiagonalMatrix1OperatorDesc(t, t, t.data_type, 0, begin, end)
    return run_or_skip(desc, x)


def _eyelike(node, inputs):
    x = inputs[0]
    a = attrs(node)
    dtype = x.dtype
    if "dtype" in a:
        dtype = onnx.helper.tensor_dtype_to_np_dtype(a["dtype"])
    k = int(a.get("k", 0))
    out = _tensor(dtype, x.shape)
    desc = dml.DiagonalMatrix1OperatorDesc(None, out, out.data_type, 1, k, k + 1)
    return run_or_skip(desc)


RUN = {"CumSum": _cumsum, "Range": _range, "Trilu": _trilu, "EyeLike": _eyelike}


@functools.cache
def _result(index: int) -> np.ndarray:
    case = CASES[index]
    return RUN[case.node.op_type](case.node, list(case.inputs))


def _check(index: int) -> None:
    assert_outputs(_result(index), CASES[index].outputs[:1])


@pytest.mark.parametrize("index", range(len(CASES)), ids=case_ids(CASES))
def test_onnx_node(index):
    _check(index)


def test_every_mapped_operator_has_a_passing_case():
    assert_every_op_type_passes(CASES, _check, MAPPED)
