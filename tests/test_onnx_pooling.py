"""ONNX's own backend node tests of the pooling operators, mapped onto DirectML's as
ONNX-on-DirectML does:

- MaxPool -> MAX_POOLING2 (its second output, Indices, from OutputIndicesTensor as UINT64);
  AveragePool -> AVERAGE_POOLING (AVERAGE_POOLING1 with dilations), count_include_pad ->
  IncludePadding; LpPool -> LP_POOLING (LP_POOLING1 with dilations), p -> P.
- GlobalMaxPool / GlobalAveragePool -> MAX_POOLING / AVERAGE_POOLING with the window the whole
  spatial extent.
- MaxUnpool(X, I, output_shape?) -> MAX_UNPOOLING into the expected output's shape, ONNX's
  INT64 indices read as UINT64 (they are never negative).
- ``pads`` [begin..., end...] split into StartPadding and EndPadding; auto_pad SAME_UPPER /
  SAME_LOWER become explicit pads by ONNX's formulas (output ceil(size / stride), the total
  padding split with the odd one at the end / the start); VALID is no padding.
- 1-D pools (DirectML's tables have 4-D and 5-D tensors only) run as 2-D ones over
  {N, C, 1, L} with a window of height 1, as ONNX Runtime's DirectML provider does.
- ceil_mode: DirectML has no ceil mode, but its output sizes follow the padding, so the end
  padding grows until the floor rule gives ONNX's size (the padding holds the lowest value for
  MAX, adds nothing to LP and is not counted by AVERAGE without count_include_pad; without
  ``pads``, count_include_pad changes nothing in ONNX and maps to IncludePadding FALSE).

Skipped with the reason: MaxPool's storage_order 1 (column-major indices; DirectML's are
row-major); AveragePool with ceil_mode, count_include_pad and pads where the grown end padding
would count in DirectML's divisor but not in ONNX's; MaxUnpool with output_shape (ONNX reads the
indices in the default output's shape, DirectML as flat indices into OutputTensor).
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

MAPPED = {"MaxPool", "AveragePool", "LpPool", "GlobalMaxPool", "GlobalAveragePool", "MaxUnpool"}
CASES = node_cases({op: op.lower() for op in sorted(MAPPED)})
T = dml.TensorDesc


def _same_pads(spatial, kernel, strides, dilations, upper: bool):
    begin, end = [], []
    for size, k, s, d in zip(spatial, kernel, strides, dilations):
        out = -(-size // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
        small = total // 2
        begin.append(small if upper else total - small)
        end.append(total - small if upper else small)
    return begin, end


def _window(node, x: np.ndarray, out_shape):
    """(kernel, strides, dilations, start, end) of a pooling node over ``x``, end padding grown
    to reach ``out_shape`` (ceil_mode); skips what DirectML cannot express."""
    a = attrs(node)
    spatial = x.shape[2:]
    dims = len(spatial)
    kernel = list(a["kernel_shape"])
    strides = list(a.get("strides", [1] * dims))
    dilations = list(a.get("dilations", [1] * dims))
    pads = list(a.get("pads", [0] * 2 * dims))
    start, end = pads[:dims], pads[dims:]
    auto_pad = a.get("auto_pad", b"NOTSET").decode()
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        start, end = _same_pads(spatial, kernel, strides, dilations, auto_pad == "SAME_UPPER")
    elif auto_pad == "VALID":
        start, end = [0] * dims, [0] * dims
    padded = any(start) or any(end)
    grown = False
    for i, size in enumerate(spatial):
        extent = (kernel[i] - 1) * dilations[i] + 1
        need = (out_shape[2 + i] - 1) * strides[i] + extent - (size + start[i] + end[i])
        if need > 0:
            end[i] += need
            grown = True
        floor = (size + start[i] + end[i] - extent) // strides[i] + 1
        assert floor == out_shape[2 + i], "ONNX's output size is not reachable by padding"
    if grown and padded and node.op_type == "AveragePool" and a.get("count_include_pad", 0):
        pytest.skip(
            "ceil_mode with count_include_pad: the end padding DirectML needs for the ceil "
            "size would count in its divisor, not in ONNX's"
        )
    return kernel, strides, dilations, start, end


def _as_2d(x: np.ndarray, shape) -> tuple[np.ndarray, tuple]:
    """A 1-D pool's {N, C, L} tensors as {N, C, 1, L}."""
    if x.ndim == 3:
        return x.reshape(x.shape[0], x.shape[1], 1, x.shape[2]), (*shape[:2], 1, shape[2])
    return x, tuple(shape)


def _pool(node, inputs, outputs):
    x = inputs[0]
    name = dml_type(x.dtype)
    want = outputs[0].shape
    kernel, strides, dilations, start, end = _window(node, x, want)
    one_d = x.ndim == 3
    x, out_shape = _as_2d(x, want)
    if one_d:
        kernel, strides, dilations = [1, *kernel], [1, *strides], [1, *dilations]
        start, end = [0, *start], [0, *end]
    geometry = {
        "strides": strides,
        "window_size": kernel,
        "start_padding": start,
        "end_padding": end,
    }
    dilated = any(d != 1 for d in dilations)
    a = attrs(node)
    out = T(name, list(out_shape))
    if node.op_type == "MaxPool":
        indices = None
        if len(node.output) > 1 and node.output[1]:
            if a.get("storage_order", 0) == 1:
                pytest.skip("storage_order 1 asks column-major indices; DirectML's are row-major")
            indices = T("UINT64", list(out_shape))
        desc = dml.MaxPooling2OperatorDesc(
            T(name, list(x.shape)), out, indices, **geometry, dilations=dilations
        )
    elif node.op_type == "AveragePool":
        # Without pads count_include_pad changes nothing in ONNX (ceil_mode's overhang is not
        # counted), which is IncludePadding FALSE over the grown end padding.
        include = bool(a.get("count_include_pad", 0)) and any(a.get("pads", [0]))
        if dilated:
            desc = dml.AveragePooling1OperatorDesc(
                T(name, list(x.shape)),
                out,
                **geometry,
                dilations=dilations,
                include_padding=include,
            )
        else:
            desc = dml.AveragePoolingOperatorDesc(
                T(name, list(x.shape)), out, **geometry, include_padding=include
            )
    else:
        p = int(a.get("p", 2))
        if dilated:
            desc = dml.LpPooling1OperatorDesc(
                T(name, list(x.shape)), out, **geometry, dilations=dilations, p=p
            )
        else:
            desc = dml.LpPoolingOperatorDesc(T(name, list(x.shape)), out, **geometry, p=p)
    result = run_or_skip(desc, x)
    results = result if isinstance(result, tuple) else (result,)
    return tuple(r.reshape(o.shape) for r, o in zip(results, outputs))


def _global(node, inputs, outputs):
    x = inputs[0]
    name = dml_type(x.dtype)
    dims = x.ndim - 2
    geometry = {
        "strides": [1] * dims,
        "window_size": list(x.shape[2:]),
        "start_padding": [0] * dims,
        "end_padding": [0] * dims,
    }
    shape = list(x.shape[:2]) + [1] * dims
    if node.op_type == "GlobalMaxPool":
        desc = dml.MaxPoolingOperatorDesc(T(name, list(x.shape)), T(name, shape), **geometry)
    else:
        desc = dml.AveragePoolingOperatorDesc(
            T(name, list(x.shape)), T(name, shape), **geometry, include_padding=False
        )
    return (run_or_skip(desc, x),)


def _unpool(node, inputs, outputs):
    x, indices = inputs[0], inputs[1]
    if len(inputs) > 2:
        pytest.skip(
            "with output_shape ONNX reads the indices in the default output's shape and places "
            "that block in the larger output; DirectML's indices are flat in OutputTensor"
        )
    name = dml_type(x.dtype)
    shape = list(outputs[0].shape)
    desc = dml.MaxUnpoolingOperatorDesc(
        T(name, list(x.shape)), T("UINT64", list(indices.shape)), T(name, shape)
    )
    return (run_or_skip(desc, x, indices.astype(np.uint64)),)


MAPPERS = {
    "MaxPool": _pool,
    "AveragePool": _pool,
    "LpPool": _pool,
    "GlobalMaxPool": _global,
    "GlobalAveragePool": _global,
    "MaxUnpool": _unpool,
}


@functools.cache
def _result(index: int) -> tuple:
    case = CASES[index]
    return MAPPERS[case.node.op_type](case.node, list(case.inputs), list(case.outputs))


# Cases whose expected values ONNX writes rounded to 4 decimals.
ROUNDED = {"test_averagepool_2d_ceil_last_window_starts_on_pad"}


def _check(index: int) -> None:
    wants = CASES[index].outputs
    atol = 1e-4 if CASES[index].name in ROUNDED else 1e-6
    got = _result(index)
    assert len(got) == len(wants)
    for g, w in zip(got, wants):
        if w.dtype == np.int64:  # ONNX's indices; DirectML's are unsigned
            g = g.astype(np.int64)
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        assert g.shape == w.shape, (g.shape, w.shape)
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=atol)
        else:
            np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("index", range(len(CASES)), ids=case_ids(CASES))
def test_onnx_node(index):
    _check(index)


def test_every_mapped_operator_has_a_passing_case():
    assert_every_op_type_passes(CASES, _check, MAPPED)


def test_the_cases_cover_every_mapped_operator():
    assert {c.node.op_type for c in CASES} == MAPPED
    assert len(CASES) > 40
