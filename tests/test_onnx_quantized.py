"""ONNX's own backend node tests of QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv, mapped onto DirectML's quantized
descriptors as ONNX Runtime's DirectML provider maps them:

- QuantizeLinear / DequantizeLinear with a per-tensor or per-axis scale and zero point, 8 or 16
  bits -> ELEMENT_WISE_QUANTIZE_LINEAR / ELEMENT_WISE_DEQUANTIZE_LINEAR in buffer mode: the
  scale and zero point are full-size descs with stride 0 where they repeat (DirectML's
  broadcasting). Blocked cases (``block_size``) and 4-bit types -> QUANTIZE / DEQUANTIZE with
  the quantization tensors at the input's rank (one value per block: the scale's own sizes,
  ONNX's blocked layout; a per-axis {C} becomes {1, .., C, .., 1}). A missing zero point is
  absent (0).
- DynamicQuantizeLinear -> DYNAMIC_QUANTIZE_LINEAR (scale and zero point {1, ..} of the input's
  rank, compared with ONNX's scalars).
- MatMulInteger -> MATRIX_MULTIPLY_INTEGER, QLinearMatMul -> QUANTIZED_LINEAR_MATRIX_MULTIPLY on
  the inputs' own ranks (2 to 4); a 1-D zero point or scale of M (A's rows) or N (B's columns)
  values is DirectML's 1-D per-row / per-column form, a scalar one value.
- ConvInteger -> CONVOLUTION_INTEGER, QLinearConv -> QUANTIZED_LINEAR_CONVOLUTION: pads (and
  auto_pad by ONNX's formulas) -> StartPadding / EndPadding, group -> GroupCount, a 1-D
  filter zero point / scale of M values per output channel, QLinearConv's bias {M} ->
  {1, M, 1, ..}.

Cases DirectML cannot express are skipped with the reason: float8, 2-bit and float4 types (no
DML data type), 16-bit quantized outputs and FLOAT16 scales of the quantized matrix multiply and
convolution (the support tables reject them). The test data comes from the ``onnx`` package, so
the module is skipped without it; every mapped operator must pass at least one case.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from onnx_cases import (
    assert_every_op_type_passes,
    attrs,
    broadcast_desc,
    case_ids,
    conv_attrs,
    forward_pads,
    node_cases,
    run_buffers_or_skip,
    run_or_skip,
)

import dml_jax as dml

onnx = pytest.importorskip("onnx")

MODULES = {
    "QuantizeLinear": "quantizelinear",
    "DequantizeLinear": "dequantizelinear",
    "DynamicQuantizeLinear": "dynamicquantizelinear",
    "MatMulInteger": "matmulinteger",
    "ConvInteger": "convinteger",
    "QLinearMatMul": "qlinearmatmul",
    "QLinearConv": "qlinearconv",
}
MAPPED = set(MODULES)
CASES = node_cases(MODULES)

# DML data types of the NumPy / ml_dtypes arrays ONNX gives (4-bit ones are held in a byte).
_TYPES = {
    "float32": "FLOAT32",
    "float16": "FLOAT16",
    "int8": "INT8",
    "uint8": "UINT8",
    "int16": "INT16",
    "uint16": "UINT16",
    "int32": "INT32",
    "uint32": "UINT32",
    "int4": "INT4",
    "uint4": "UINT4",
}


def _array(value) -> tuple[np.ndarray | None, str | None]:
    """(array as dml_jax holds it, DML type name) of an ONNX input or output; skips the case for
    a type DirectML lacks."""
    if value is None:
        return None, None
    if isinstance(value, onnx.TensorProto):
        value = onnx.numpy_helper.to_array(value)
    value = np.asarray(value)
    name = _TYPES.get(value.dtype.name)
    if name is None:
        pytest.skip(f"DirectML has no data type for ONNX's {value.dtype.name}")
    if name in ("INT4", "UINT4"):
        value = value.astype(np.int8 if name == "INT4" else np.uint8)
    return value, name


def _inputs(case) -> list:
    return [_array(v) for v in case.inputs] + [(None, None)] * 8


# ---------------------------------------------------------------------------------------------
# QuantizeLinear / DequantizeLinear


def _parameter_shape(x: np.ndarray, p: np.ndarray, axis: int, block: int) -> tuple[int, ...]:
    """A scale / zero point as a tensor of x's rank: one value, one per index of ``axis``, or
    (blocked) the parameter's own sizes."""
    if p.size == 1:
        return (1,) * x.ndim
    if block:
        return tuple(p.shape)
    shape = [1] * x.ndim
    shape[axis] = p.size
    return tuple(shape)


def _quantize_linear(case, quantize: bool):
    (x, xt), (scale, st), (zero, zt), *_ = _inputs(case)
    at = attrs(case.node)
    axis = int(at.get("axis", 1)) % max(x.ndim, 1)
    block = int(at.get("block_size", 0))
    out_array, out_type = _array(case.outputs[0])
    shape = _parameter_shape(x, scale, axis, block)
    if block and any(n % q for n, q in zip(x.shape, shape)):
        pytest.skip("a partial last block: DirectML's blocks divide the input")
    scale = scale.reshape(shape)
    zero = None if zero is None else zero.reshape(shape)
    if block or {xt, out_type} & {"INT4", "UINT4"}:
        cls = dml.QuantizeOperatorDesc if quantize else dml.DequantizeOperatorDesc
        params = [dml.TensorDesc(st, list(shape))]
        if zero is not None:
            params.append(dml.TensorDesc(zt, list(shape)))
        desc = cls(
            dml.TensorDesc(xt, list(x.shape)),
            "SCALE_ZERO_POINT" if zero is not None else "SCALE",
            params,
            dml.TensorDesc(out_type, list(x.shape)),
        )
        arrays = [x, scale] + ([] if zero is None else [zero])
        return run_or_skip(desc, *arrays)
    cls = (
        dml.ElementWiseQuantizeLinearOperatorDesc
        if quantize
        else dml.ElementWiseDequantizeLinearOperatorDesc
    )
    desc = cls(
        dml.TensorDesc(xt, list(x.shape)),
        broadcast_desc(scale, x.shape, st),
        None if zero is None else broadcast_desc(zero, x.shape, zt),
        dml.TensorDesc(out_type, list(x.shape)),
    )
    buffers = [x, scale] + ([] if zero is None else [zero])
    return run_buffers_or_skip(desc, buffers, x.shape, out_array.dtype)


def _dynamic_quantize_linear(case):
    (x, xt), *_ = _inputs(case)
    one = [1] * x.ndim
    desc = dml.DynamicQuantizeLinearOperatorDesc(
        dml.TensorDesc(xt, list(x.shape)),
        dml.TensorDesc("UINT8", list(x.shape)),
        dml.TensorDesc("FLOAT32", one),
        dml.TensorDesc("UINT8", one),
    )
    y, scale, zero = run_or_skip(desc, x)
    return y, scale.reshape(()), zero.reshape(())


# ---------------------------------------------------------------------------------------------
# MatMulInteger / QLinearMatMul


def _matrix_parameter(p: np.ndarray | None, t: str | None) -> dml.TensorDesc | None:
    """A scalar or 1-D parameter as DirectML's one value / 1-D per-row or per-column form."""
    return None if p is None else dml.TensorDesc(t, [p.size])


def _matrices(a: np.ndarray, b: np.ndarray):
    if a.ndim != b.ndim or a.shape[:-2] != b.shape[:-2] or a.ndim < 2:
        pytest.skip("operands of different ranks or batch sizes: DirectML needs equal ones")
    return list(a.shape[:-2]) + [a.shape[-2], b.shape[-1]]


def _matmul_integer(case):
    (a, at), (b, bt), (az, azt), (bz, bzt), *_ = _inputs(case)
    out = _matrices(a, b)
    desc = dml.MatrixMultiplyIntegerOperatorDesc(
        dml.TensorDesc(at, list(a.shape)),
        _matrix_parameter(az, azt),
        dml.TensorDesc(bt, list(b.shape)),
        _matrix_parameter(bz, bzt),
        dml.TensorDesc("INT32", out),
    )
    arrays = [a] + ([] if az is None else [az.reshape(-1)]) + [b]
    return run_or_skip(desc, *arrays, *([] if bz is None else [bz.reshape(-1)]))


def _qlinear_matmul(case):
    (a, at), (sa, sat), (za, zat), (b, bt), (sb, sbt), (zb, zbt), (so, sot), (zo, zot), *_ = (
        _inputs(case)
    )
    out_type = _array(case.outputs[0])[1]
    desc = dml.QuantizedLinearMatrixMultiplyOperatorDesc(
        dml.TensorDesc(at, list(a.shape)),
        _matrix_parameter(sa, sat),
        _matrix_parameter(za, zat),
        dml.TensorDesc(bt, list(b.shape)),
        _matrix_parameter(sb, sbt),
        _matrix_parameter(zb, zbt),
        _matrix_parameter(so, sot),
        _matrix_parameter(zo, zot),
        dml.TensorDesc(out_type, _matrices(a, b)),
    )
    arrays = [
        v.reshape(-1) if v.ndim < 2 else v for v in (a, sa, za, b, sb, zb, so, zo) if v is not None
    ]
    return run_or_skip(desc, *arrays)


# ---------------------------------------------------------------------------------------------
# ConvInteger / QLinearConv


def _conv_geometry(case, x, w) -> tuple[dict, list[int]]:
    a = conv_attrs(case.node, x, w)
    spatial = forward_pads(a, x)
    fields = {
        "strides": a["strides"],
        "dilations": a["dilations"],
        "start_padding": a["start"],
        "end_padding": a["end"],
        "group_count": a["group"],
    }
    return fields, [x.shape[0], w.shape[0], *spatial]


def _channel_parameter(p: np.ndarray | None, t: str | None) -> dml.TensorDesc | None:
    """One value, or one per output channel (1-D {M})."""
    return None if p is None else dml.TensorDesc(t, [p.size])


def _conv_integer(case):
    (x, xt), (w, wt), (xz, xzt), (wz, wzt), *_ = _inputs(case)
    fields, out = _conv_geometry(case, x, w)
    desc = dml.ConvolutionIntegerOperatorDesc(
        dml.TensorDesc(xt, list(x.shape)),
        _channel_parameter(xz, xzt),
        dml.TensorDesc(wt, list(w.shape)),
        _channel_parameter(wz, wzt),
        dml.TensorDesc("INT32", out),
        **fields,
    )
    arrays = [v.reshape(-1) if v.ndim < 1 else v for v in (x, xz, w, wz) if v is not None]
    return run_or_skip(desc, *arrays)


def _qlinear_conv(case):
    (
        (x, xt),
        (sx, sxt),
        (zx, zxt),
        (w, wt),
        (sw, swt),
        (zw, zwt),
        (so, sot),
        (zo, zot),
        (
            bias,
            biast,
        ),
        *_,
    ) = _inputs(case)
    fields, out = _conv_geometry(case, x, w)
    out_type = _array(case.outputs[0])[1]
    bias_desc = None
    if bias is not None:
        bias_desc = dml.TensorDesc(biast, [1, bias.size] + [1] * (x.ndim - 2))
    desc = dml.QuantizedLinearConvolutionOperatorDesc(
        dml.TensorDesc(xt, list(x.shape)),
        _channel_parameter(sx, sxt),
        _channel_parameter(zx, zxt),
        dml.TensorDesc(wt, list(w.shape)),
        _channel_parameter(sw, swt),
        _channel_parameter(zw, zwt),
        bias_desc,
        _channel_parameter(so, sot),
        _channel_parameter(zo, zot),
        dml.TensorDesc(out_type, out),
        **fields,
    )
    arrays = [
        v.reshape(desc_t.sizes)
        for v, desc_t in zip(
            (x, sx, zx, w, sw, zw, bias, so, zo),
            (
                desc.input_tensor,
                desc.input_scale_tensor,
                desc.input_zero_point_tensor,
                desc.filter_tensor,
                desc.filter_scale_tensor,
                desc.filter_zero_point_tensor,
                desc.bias_tensor,
                desc.output_scale_tensor,
                desc.output_zero_point_tensor,
            ),
        )
        if v is not None
    ]
    return run_or_skip(desc, *arrays)


RUN = {
    "QuantizeLinear": lambda case: _quantize_linear(case, True),
    "DequantizeLinear": lambda case: _quantize_linear(case, False),
    "DynamicQuantizeLinear": _dynamic_quantize_linear,
    "MatMulInteger": _matmul_integer,
    "QLinearMatMul": _qlinear_matmul,
    "ConvInteger": _conv_integer,
    "QLinearConv": _qlinear_conv,
}


@functools.cache
def _result(index: int):
    """DirectML's outputs for a case (a tuple), kept: the last test reuses them."""
    case = CASES[index]
    got = RUN[case.node.op_type](case)
    return got if isinstance(got, tuple) else (got,)


def _check(index: int) -> None:
    case = CASES[index]
    got = _result(index)
    assert len(got) == len(case.outputs)
    for g, want in zip(got, case.outputs):
        w, _ = _array(want)
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=1e-6 if w.dtype == np.float32 else 1e-3)
        else:
            np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("index", range(len(CASES)), ids=case_ids(CASES))
def test_onnx_node(index):
    _check(index)


def test_every_mapped_operator_has_a_passing_case():
    assert_every_op_type_passes(CASES, _check, MAPPED)
