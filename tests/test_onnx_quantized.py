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
import strategies
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
EXACT_DIVISION = strategies.ON_CPU
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
# MatMulInteger / QLinearMatMul / ConvInteger / QLinearConv


def _tensor(v: tuple) -> dml.TensorDesc | None:
    """An operand's desc: its own sizes (None when absent)."""
    array, data_type = v
    return None if array is None else dml.TensorDesc(data_type, list(array.shape))


def _parameter(v: tuple) -> dml.TensorDesc | None:
    """A scale or zero point: one value, or the 1-D per-row / per-column / per-output-channel
    form of its values (ONNX gives scalars and 1-D tensors)."""
    array, data_type = v
    return None if array is None else dml.TensorDesc(data_type, [array.size])


def _run(desc, *values):
    """Runs ``desc`` on ``values`` in schema order (None for an absent optional tensor), each
    shaped to its tensor's Sizes."""
    slots = iter(t for _, t in desc.input_slots())
    return run_or_skip(desc, *(v.reshape(next(slots).sizes) for v in values if v is not None))


def _output_sizes(a: np.ndarray, b: np.ndarray) -> list[int]:
    if a.ndim != b.ndim or a.shape[:-2] != b.shape[:-2] or a.ndim < 2:
        pytest.skip("operands of different ranks or batch sizes: DirectML needs equal ones")
    return list(a.shape[:-2]) + [a.shape[-2], b.shape[-1]]


def _matmul_integer(case):
    a, b, az, bz, *_ = _inputs(case)
    desc = dml.MatrixMultiplyIntegerOperatorDesc(
        _tensor(a),
        _parameter(az),
        _tensor(b),
        _parameter(bz),
        dml.TensorDesc("INT32", _output_sizes(a[0], b[0])),
    )
    return _run(desc, a[0], az[0], b[0], bz[0])


def _qlinear_matmul(case):
    a, sa, za, b, sb, zb, so, zo, *_ = _inputs(case)
    desc = dml.QuantizedLinearMatrixMultiplyOperatorDesc(
        _tensor(a), _parameter(sa), _parameter(za),
        _tensor(b), _parameter(sb), _parameter(zb),
        _parameter(so), _parameter(zo),
        dml.TensorDesc(_array(case.outputs[0])[1], _output_sizes(a[0], b[0])),
    )  # fmt: skip
    return _run(desc, *(v[0] for v in (a, sa, za, b, sb, zb, so, zo)))


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


def _conv_integer(case):
    x, w, xz, wz, *_ = _inputs(case)
    fields, out = _conv_geometry(case, x[0], w[0])
    desc = dml.ConvolutionIntegerOperatorDesc(
        _tensor(x), _parameter(xz), _tensor(w), _parameter(wz), dml.TensorDesc("INT32", out),
        **fields,
    )  # fmt: skip
    return _run(desc, x[0], xz[0], w[0], wz[0])


def _qlinear_conv(case):
    x, sx, zx, w, sw, zw, so, zo, bias, *_ = _inputs(case)
    fields, out = _conv_geometry(case, x[0], w[0])
    bias_desc = None
    if bias[0] is not None:
        bias_desc = dml.TensorDesc(bias[1], [1, bias[0].size] + [1] * (x[0].ndim - 2))
    desc = dml.QuantizedLinearConvolutionOperatorDesc(
        _tensor(x), _parameter(sx), _parameter(zx), _tensor(w), _parameter(sw), _parameter(zw),
        bias_desc, _parameter(so), _parameter(zo),
        dml.TensorDesc(_array(case.outputs[0])[1], out), **fields,
    )  # fmt: skip
    return _run(desc, *(v[0] for v in (x, sx, zx, w, sw, zw, bias, so, zo)))


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
        elif EXACT_DIVISION:
            np.testing.assert_array_equal(g, w)
        else:  # an approximate x / Scale next to a tie may quantize one step away (semantics.md)
            np.testing.assert_array_less(np.abs(g.astype(np.int64) - w.astype(np.int64)), 2)


@pytest.mark.parametrize("index", range(len(CASES)), ids=case_ids(CASES))
def test_onnx_node(index):
    _check(index)


def test_every_mapped_operator_has_a_passing_case():
    assert_every_op_type_passes(CASES, _check, MAPPED)
