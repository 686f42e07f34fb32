"""ONNX's own backend node tests of Gather, GatherElements, GatherND, Scatter, ScatterElements,
ScatterND, OneHot and NonZero, mapped onto DirectML's descriptors as ONNX-on-DirectML does:

- Every tensor gets the same DimensionCount R (the largest rank involved), padded with leading
  1s; axes move by the padding.
- Gather(data r-D, indices q-D, axis) -> GATHER with IndexDimensions q, R = max(r, q + r - 1).
- GatherElements(axis) -> GATHER_ELEMENTS; Scatter / ScatterElements(axis) -> SCATTER (cases with
  a ``reduction`` other than ``none`` have no DirectML counterpart and are skipped).
- GatherND(batch_dims) -> GATHER_ND1 with InputDimensionCount r, IndicesDimensionCount q,
  BatchDimensionCount batch_dims; ScatterND -> SCATTER_ND (reductions skipped as above).
- OneHot(indices, depth, values, axis) -> ONE_HOT: IndicesTensor gets a 1 inserted at the axis,
  ValuesTensor is { 1, ..., 1, 2 }; float indices are converted to INT64 (ONNX casts them).
- NonZero(x) -> NONZERO_COORDINATES with a { M, r } coordinates tensor (BOOL tensors become
  UINT8, as DirectML has no BOOL); ONNX's output is { r, count } INT64, so the first count rows
  are transposed and widened before comparing (ONNX's shape is data dependent).

Cases DirectML's tables reject (bfloat16, empty tensors) are skipped with the reason; every mapped
ONNX operator must pass at least one case.
"""

from __future__ import annotations

import functools

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

MAPPED = {
    "Gather",
    "GatherElements",
    "GatherND",
    "Scatter",
    "ScatterElements",
    "ScatterND",
    "OneHot",
    "NonZero",
}
CASES = node_cases(MAPPED)


def _tensor(dtype, shape, rank: int) -> dml.TensorDesc:
    if 0 in shape:
        pytest.skip("DirectML tensors have no zero-sized dimension")
    return dml.TensorDesc(dml_type(dtype), (1,) * (rank - len(shape)) + tuple(shape))


def _run(desc, *inputs):
    """``run_or_skip`` with each input reshaped to its tensor's Sizes (leading 1s added)."""
    sizes = [t.sizes for _, t in desc.input_slots()]
    return run_or_skip(desc, *(np.asarray(x).reshape(n) for x, n in zip(inputs, sizes)))


def _no_reduction(node) -> None:
    reduction = attrs(node).get("reduction", b"none")
    reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
    if reduction != "none":
        pytest.skip(f"DirectML's scatters have no reduction ({reduction!r})")


def _gather(node, inputs):
    data, indices = inputs
    r, q = data.ndim, indices.ndim
    rank = max(r, q + r - 1)
    axis = attrs(node).get("axis", 0) % r + rank - r
    out_shape = (
        data.shape[: axis - (rank - r)] + indices.shape + data.shape[axis - (rank - r) + 1 :]
    )
    desc = dml.GatherOperatorDesc(
        _tensor(data.dtype, data.shape, rank),
        _tensor(indices.dtype, indices.shape, rank),
        _tensor(data.dtype, out_shape, rank),
        axis=axis,
        index_dimensions=q,
    )
    return _run(desc, data, indices).reshape(out_shape)


def _gather_elements(node, inputs):
    data, indices = inputs
    rank = data.ndim
    desc = dml.GatherElementsOperatorDesc(
        _tensor(data.dtype, data.shape, rank),
        _tensor(indices.dtype, indices.shape, rank),
        _tensor(data.dtype, indices.shape, rank),
        axis=attrs(node).get("axis", 0) % rank,
    )
    return _run(desc, data, indices)


def _gather_nd(node, inputs):
    data, indices = inputs
    b = attrs(node).get("batch_dims", 0)
    r, q, k = data.ndim, indices.ndim, indices.shape[-1]
    out_shape = indices.shape[:-1] + data.shape[b + k :]
    rank = max(r, q, len(out_shape))
    desc = dml.GatherNd1OperatorDesc(
        _tensor(data.dtype, data.shape, rank),
        _tensor(indices.dtype, indices.shape, rank),
        _tensor(data.dtype, out_shape, rank),
        input_dimension_count=r,
        indices_dimension_count=q,
        batch_dimension_count=b,
    )
    return _run(desc, data, indices).reshape(out_shape)


def _scatter(node, inputs):
    _no_reduction(node)
    data, indices, updates = inputs
    rank = data.ndim
    desc = dml.ScatterOperatorDesc(
        _tensor(data.dtype, data.shape, rank),
        _tensor(indices.dtype, indices.shape, rank),
        _tensor(updates.dtype, updates.shape, rank),
        _tensor(data.dtype, data.shape, rank),
        axis=attrs(node).get("axis", 0) % rank,
    )
    return _run(desc, data, indices, updates)


def _scatter_nd(node, inputs):
    _no_reduction(node)
    data, indices, updates = inputs
    rank = max(data.ndim, indices.ndim, updates.ndim)
    desc = dml.ScatterNdOperatorDesc(
        _tensor(data.dtype, data.shape, rank),
        _tensor(indices.dtype, indices.shape, rank),
        _tensor(updates.dtype, updates.shape, rank),
        _tensor(data.dtype, data.shape, rank),
        input_dimension_count=data.ndim,
        indices_dimension_count=indices.ndim,
    )
    return _run(desc, data, indices, updates).reshape(data.shape)


def _one_hot(node, inputs):
    indices, depth, values = inputs
    if indices.dtype.kind == "f":
        indices = indices.astype(np.int64)  # ONNX casts non-integer index types to integers
    rank = indices.ndim + 1
    axis = attrs(node).get("axis", -1) % rank
    depth = int(depth)
    out_shape = indices.shape[:axis] + (depth,) + indices.shape[axis:]
    at_shape = indices.shape[:axis] + (1,) + indices.shape[axis:]
    desc = dml.OneHotOperatorDesc(
        _tensor(indices.dtype, at_shape, rank),
        _tensor(values.dtype, values.shape, rank),
        _tensor(values.dtype, out_shape, rank),
        axis=axis,
    )
    return _run(desc, indices, values)


def _nonzero(node, inputs):
    (x,) = inputs
    if x.dtype == np.bool_:
        x = x.astype(np.uint8)  # DirectML has no BOOL: ONNX-on-DirectML binds it as UINT8
    r = max(x.ndim, 1)
    desc = dml.NonzeroCoordinatesOperatorDesc(
        _tensor(x.dtype, x.shape or (1,), r),
        dml.TensorDesc("UINT32", [1]),
        dml.TensorDesc("UINT32", [x.size, r]),
    )
    count, coordinates = _run(desc, x)
    n = int(count.reshape(()))
    return coordinates[:n].T.astype(np.int64)


RUN = {
    "Gather": _gather,
    "GatherElements": _gather_elements,
    "GatherND": _gather_nd,
    "Scatter": _scatter,
    "ScatterElements": _scatter,
    "ScatterND": _scatter_nd,
    "OneHot": _one_hot,
    "NonZero": _nonzero,
}


@functools.cache
def _result(index: int) -> np.ndarray:
    case = CASES[index]
    return RUN[case.node.op_type](case.node, list(case.inputs))


def _check(index: int) -> None:
    got, want = _result(index), CASES[index].outputs[0]
    assert got.shape == want.shape, (got.shape, want.shape)
    assert_outputs(got, [want])


@pytest.mark.parametrize("index", range(len(CASES)), ids=case_ids(CASES))
def test_onnx_node(index):
    _check(index)


def test_every_mapped_operator_has_a_passing_case():
    assert_every_op_type_passes(CASES, _check, MAPPED)
