"""ONNX's own backend node tests of TopK, mapped onto DirectML's TOP_K1 as ONNX-on-DirectML
does:

- TopK(X, K) -> TOP_K1 with Axis = ``axis`` (negative counts from the end; default -1), K the
  value of the K input, AxisDirection DECREASING for ``largest`` = 1 (the default), INCREASING
  for 0. ``sorted`` needs no mapping: DirectML always sorts, and unsorted output is ONNX's
  "any order".
- ONNX's INT64 indices are written to a UINT64 OutputIndexTensor (DirectML's index types are
  unsigned; the values are non-negative either way) and compared as int64.

The data comes from the ``onnx`` package's test-case generators (skipped without it). Cases
DirectML's tables reject are skipped with the reason; every mapped ONNX operator must pass at
least one case.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from onnx_cases import (
    assert_every_op_type_passes,
    attrs,
    case_ids,
    dml_type,
    node_cases,
    run_or_skip,
)

import dml_jax as dml

onnx = pytest.importorskip("onnx")

MAPPED = {"TopK"}
CASES = node_cases(MAPPED)


def _top_k(node, inputs):
    x, k = inputs
    if 0 in x.shape:
        pytest.skip("DirectML tensors have no zero-sized dimension")
    a = attrs(node)
    axis = int(a.get("axis", -1)) % x.ndim
    k = int(np.asarray(k).reshape(-1)[0])
    t = dml.TensorDesc(dml_type(x.dtype), list(x.shape))
    sizes = list(x.shape)
    sizes[axis] = k
    desc = dml.TopK1OperatorDesc(
        t,
        t.like(sizes=sizes),
        t.like(sizes=sizes, data_type="UINT64"),
        axis=axis,
        k=k,
        axis_direction="DECREASING" if a.get("largest", 1) else "INCREASING",
    )
    return run_or_skip(desc, x)


@functools.cache
def _result(index: int):
    case = CASES[index]
    return _top_k(case.node, list(case.inputs))


def _check(index: int) -> None:
    want_values, want_indices = CASES[index].outputs
    values, indices = _result(index)
    assert values.dtype == want_values.dtype
    np.testing.assert_array_equal(values, want_values)
    np.testing.assert_array_equal(indices.astype(np.int64), want_indices)


@pytest.mark.parametrize("index", range(len(CASES)), ids=case_ids(CASES))
def test_onnx_node(index):
    _check(index)


def test_every_mapped_operator_has_a_passing_case():
    assert_every_op_type_passes(CASES, _check, MAPPED)
