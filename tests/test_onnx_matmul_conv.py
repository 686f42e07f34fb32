"""ONNX's own backend node tests of Gemm, MatMul, Conv and ConvTranspose, mapped onto DirectML's
GEMM and CONVOLUTION descriptors, run in buffer mode.

- Gemm -> GEMM on { 1, 1, rows, columns } tensors: transA / transB / alpha / beta carry over; C
  (unidirectionally broadcastable in ONNX) gets the output's sizes with stride 0 along the
  dimensions it repeats, as DirectML broadcasts (its page wants C at the output's Sizes).
- MatMul -> GEMM: a 1-D operand becomes a matrix ({1, K} on the left, {K, 1} on the right, the
  extra dimension dropped from the result); the leading (batch) dimensions broadcast through
  stride-0 strides to their common shape, padded to { BatchCount, ChannelCount }; more than two
  leading dimensions cannot be one GEMM and are skipped.
- Conv -> CONVOLUTION, CROSS_CORRELATION, FORWARD; ConvTranspose -> CROSS_CORRELATION, BACKWARD
  with ONNX's filter { C_in, C_out / group, k.. } unchanged (ONNX Runtime's DirectML provider does
  the same). pads [x1_begin, x2_begin, .., x1_end, x2_end] -> StartPadding / EndPadding; auto_pad
  SAME_UPPER / SAME_LOWER / VALID become explicit pads by ONNX's formulas; a 1-D convolution
  becomes a 2-D one with H = 1 (4-D tensors, which every feature level supports); the bias
  { M } becomes { 1, M, 1, 1 }. ConvTranspose's output_shape becomes pads by ONNX's formula
  (total = stride * (in - 1) + output_padding + (k - 1) * dilation + 1 - output_shape); a
  negative total (the requested output longer than the full result) adds that many positions at
  the end, as OutputPadding, as ONNX's reference implementation does.

The test data comes from the ``onnx`` package's test-case generators, so this module is skipped
when ``onnx`` is not installed. A case DirectML's support tables reject (a data type, a rank) is
skipped with the validation message; every mapped ONNX operator must pass at least one case.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from onnx_cases import (
    assert_every_op_type_passes,
    assert_outputs,
    attrs,
    broadcast_desc,
    case_ids,
    conv_attrs,
    dml_type,
    forward_pads,
    node_cases,
    run_buffers_or_skip,
    same_pads,
)

import dml_jax as dml

onnx = pytest.importorskip("onnx")

MAPPED = {"Gemm", "MatMul", "Conv", "ConvTranspose"}
CASES = node_cases(MAPPED)


# ---------------------------------------------------------------------------------------------
# Gemm, MatMul


def _gemm(node, inputs):
    a, b = inputs[0], inputs[1]
    c = inputs[2] if len(inputs) > 2 and inputs[2] is not None and inputs[2].size else None
    at = attrs(node)
    ta, tb = int(at.get("transA", 0)), int(at.get("transB", 0))
    m = a.shape[1] if ta else a.shape[0]
    n = b.shape[0] if tb else b.shape[1]
    out = (1, 1, m, n)
    t = dml_type(a.dtype)
    desc = dml.GemmOperatorDesc(
        dml.TensorDesc(t, [1, 1, *a.shape]),
        dml.TensorDesc(t, [1, 1, *b.shape]),
        None if c is None else broadcast_desc(c, out),
        dml.TensorDesc(t, list(out)),
        trans_a="TRANSPOSE" if ta else "NONE",
        trans_b="TRANSPOSE" if tb else "NONE",
        alpha=float(at.get("alpha", 1.0)),
        beta=float(at.get("beta", 1.0)),
    )
    buffers = [a, b] + ([] if c is None else [c])
    return run_buffers_or_skip(desc, buffers, out, a.dtype).reshape(m, n)


def _matmul(node, inputs):
    a, b = inputs
    want = np.matmul(np.zeros(a.shape, np.int8), np.zeros(b.shape, np.int8)).shape
    a2 = a.reshape(1, -1) if a.ndim == 1 else a
    b2 = b.reshape(-1, 1) if b.ndim == 1 else b
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    if len(batch) > 2:
        pytest.skip(f"{len(batch)} batch dimensions: one GEMM takes at most 2")
    batch = (1,) * (2 - len(batch)) + tuple(batch)
    m, k, n = a2.shape[-2], a2.shape[-1], b2.shape[-1]
    out = (*batch, m, n)
    t = dml_type(a.dtype)
    desc = dml.GemmOperatorDesc(
        broadcast_desc(a2, (*batch, m, k)),
        broadcast_desc(b2, (*batch, k, n)),
        None,
        dml.TensorDesc(t, list(out)),
    )
    return run_buffers_or_skip(desc, [a2, b2], out, a.dtype).reshape(want)


# ---------------------------------------------------------------------------------------------
# Conv, ConvTranspose


def _as_2d(x, w, a: dict, spatial_out: list[int]):
    """A 1-D convolution as a 2-D one with H = 1 (the arrays, the attributes, the output)."""
    if a["nd"] != 1:
        return x, w, a, spatial_out
    a = dict(a)
    for key, one in (("strides", 1), ("dilations", 1), ("output_padding", 0), ("kernel", 1)):
        a[key] = [one, *a[key]]
    a["start"], a["end"] = [0, *a["start"]], [0, *a["end"]]
    a["nd"] = 2
    return x[:, :, None, :], w[:, :, None, :], a, [1, *spatial_out]


def _conv_desc(x, w, bias, out_shape, a: dict, direction: str):
    t = dml_type(x.dtype)
    nd = a["nd"]
    return dml.ConvolutionOperatorDesc(
        dml.TensorDesc(t, list(x.shape)),
        dml.TensorDesc(t, list(w.shape)),
        None if bias is None else dml.TensorDesc(t, [1, bias.size] + [1] * nd),
        dml.TensorDesc(t, list(out_shape)),
        mode="CROSS_CORRELATION",
        direction=direction,
        dimension_count=nd,
        strides=tuple(a["strides"]),
        dilations=tuple(a["dilations"]),
        start_padding=tuple(a["start"]),
        end_padding=tuple(a["end"]),
        output_padding=tuple(a["output_padding"] if direction == "BACKWARD" else [0] * nd),
        group_count=a["group"],
    )


def _conv(node, inputs):
    x, w = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    a = conv_attrs(node, x, w)
    out = forward_pads(a, x)
    x2, w2, a2, out2 = _as_2d(x, w, a, out)
    out_shape = (x.shape[0], w.shape[0], *out2)
    desc = _conv_desc(x2, w2, bias, out_shape, a2, "FORWARD")
    buffers = [x2, w2] + ([] if bias is None else [bias])
    y = run_buffers_or_skip(desc, buffers, out_shape, x.dtype)
    return y.reshape(x.shape[0], w.shape[0], *out)


def _conv_transpose(node, inputs):
    x, w = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    a = conv_attrs(node, x, w)
    nd, start, end, out, outpad = a["nd"], [], [], [], list(a["output_padding"])
    target = a["output_shape"]
    if target is None and a["auto_pad"] in ("SAME_UPPER", "SAME_LOWER"):
        target = [x.shape[2 + i] * a["strides"][i] for i in range(nd)]
    for i in range(nd):
        size, s, d = x.shape[2 + i], a["strides"][i], a["dilations"][i]
        full = s * (size - 1) + outpad[i] + (a["kernel"][i] - 1) * d + 1
        if target is not None:
            total = full - int(target[-nd + i])
            if total < 0:  # longer than the full result: the rest at the end, as output padding
                b, e, outpad[i] = 0, 0, outpad[i] - total
            else:
                b, e = same_pads(a["auto_pad"], total)
        elif a["auto_pad"] == "VALID":
            b, e = 0, 0
        else:
            b, e = a["pads"][i], a["pads"][nd + i]
        start.append(b)
        end.append(e)
        out.append(s * (size - 1) + outpad[i] + (a["kernel"][i] - 1) * d + 1 - b - e)
    a.update(start=start, end=end, output_padding=outpad)
    channels = w.shape[1] * a["group"]
    x2, w2, a2, out2 = _as_2d(x, w, a, out)
    out_shape = (x.shape[0], channels, *out2)
    desc = _conv_desc(x2, w2, bias, out_shape, a2, "BACKWARD")
    buffers = [x2, w2] + ([] if bias is None else [bias])
    y = run_buffers_or_skip(desc, buffers, out_shape, x.dtype)
    return y.reshape(x.shape[0], channels, *out)


RUN = {"Gemm": _gemm, "MatMul": _matmul, "Conv": _conv, "ConvTranspose": _conv_transpose}


@functools.cache
def _result(index: int) -> np.ndarray:
    """DirectML's output for a case, kept: the last test reuses it (skips are not kept)."""
    case = CASES[index]
    return RUN[case.node.op_type](case.node, list(case.inputs))


def _check(index: int) -> None:
    got, want = _result(index), CASES[index].outputs[0]
    assert got.shape == want.shape, (got.shape, want.shape)
    tol = 1e-3 if want.dtype == np.float16 else 1e-5
    assert_outputs(got, [want], rtol=tol, atol=tol)


@pytest.mark.parametrize("index", range(len(CASES)), ids=case_ids(CASES))
def test_onnx_node(index):
    _check(index)


def test_every_mapped_operator_has_a_passing_case():
    assert_every_op_type_passes(CASES, _check, MAPPED)
