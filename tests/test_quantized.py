"""The quantized and integer operators: worked values (exact), properties against
tests/reference/quantized.py over data types (INT8 / UINT8, UINT4 / INT4 where the tables have
them), ranks, zero points present or absent and per-tensor / per-axis / blocked parameters; one
row per rule; eager == jit and vmap; buffer-mode broadcasting; 4-bit storage.

Gradients: every one of these operators has an integer input or output, so none is
differentiable (``op.differentiable`` is False); DEQUANTIZE's derivative with respect to the
scale is not offered.
"""

from __future__ import annotations

import dataclasses
import json

import jax
import ml_dtypes
import numpy as np
import pytest
import reference
import strategies as S
from hypothesis import assume, given
from hypothesis import strategies as st
from test_pooling import windows

import dml_jax as dml
from dml_jax import catalog, registry
from dml_jax.ops.gemm_conv import conv_output_sizes
from dml_jax.tensor import calc_buffer_tensor_size, pack_4bit, unpack_4bit

# The quantizers divide correctly rounded on every backend (ops._quant.divide corrects XLA's GPU
# quotient, docs/semantics.md, "Quantization"), so results are exact everywhere.
EXACT_DIVISION = True


def _division_tolerance(desc) -> dict:
    if EXACT_DIVISION:
        return {}
    integer = any(not t.data_type.is_float for _, t in desc.output_slots())
    return {"exact": False, "rtol": 0 if integer else 5e-7, "atol": 1 if integer else 0}


def _assert_quantized(desc, got, want) -> None:
    S.assert_same(got, want, **_division_tolerance(desc))


T = dml.TensorDesc
QL, DQL = dml.ElementWiseQuantizeLinearOperatorDesc, dml.ElementWiseDequantizeLinearOperatorDesc
Q, DQ = dml.QuantizeOperatorDesc, dml.DequantizeOperatorDesc
DYN = dml.DynamicQuantizeLinearOperatorDesc
QADD = dml.ElementWiseQuantizedLinearAddOperatorDesc
MMI = dml.MatrixMultiplyIntegerOperatorDesc
MMITF = dml.MatrixMultiplyIntegerToFloatOperatorDesc
QLMM = dml.QuantizedLinearMatrixMultiplyOperatorDesc
CONVI = dml.ConvolutionIntegerOperatorDesc
QCONV = dml.QuantizedLinearConvolutionOperatorDesc
QPOOL = dml.QuantizedLinearAveragePoolingOperatorDesc
ALL = (QL, DQL, Q, DQ, DYN, QADD, MMI, MMITF, QLMM, CONVI, QCONV, QPOOL)
NAN, INF = np.nan, np.inf


def t(data_type: str, *sizes: int) -> dml.TensorDesc:
    return T(data_type, list(sizes))


def a(values, dtype, shape=None) -> np.ndarray:
    arr = np.array(values, dtype)
    return arr.reshape(shape) if shape is not None else arr


def f32(values, shape=None):
    return a(values, np.float32, shape)


def u8(values, shape=None):
    return a(values, np.uint8, shape)


def i8(values, shape=None):
    return a(values, np.int8, shape)


def i4(values, shape=None):  # INT4 elements: JAX's (ml_dtypes') int4
    return a(values, ml_dtypes.int4, shape)


def u4(values, shape=None):
    return a(values, ml_dtypes.uint4, shape)


def i32(values, shape=None):
    return a(values, np.int32, shape)


def _ql(in_type="FLOAT32", out="UINT8", sizes=(6,), zero=True, scale_type=None, zsizes=None):
    scale_type = scale_type or ("FLOAT32" if in_type == "INT32" else in_type)
    return QL(
        t(in_type, *sizes),
        t(scale_type, *sizes),
        t(out, *(zsizes or sizes)) if zero else None,
        t(out, *sizes),
    )


def _dql(in_type="UINT8", out="FLOAT32", sizes=(4,), zero=True, scale_type=None):
    return DQL(
        t(in_type, *sizes),
        t(scale_type or out, *sizes),
        t(in_type, *sizes) if zero else None,
        t(out, *sizes),
    )


def _blocked(cls, x, params, out, kind=None, **extra):
    kind = kind or ("SCALE_ZERO_POINT" if len(params) == 2 else "SCALE")
    return cls(x, kind, list(params), out, **extra)


def _conv_fields(dims=2, **kw):
    fields = {
        "strides": (1,) * dims,
        "dilations": (1,) * dims,
        "start_padding": (0,) * dims,
        "end_padding": (0,) * dims,
        "group_count": 1,
    }
    fields.update(kw)
    return fields


def _pool_fields(dims=2, window=(2, 2), **kw):
    fields = {
        "strides": (1,) * dims,
        "window_size": window,
        "start_padding": (0,) * dims,
        "end_padding": (0,) * dims,
        "dilations": (1,) * dims,
        "include_padding": False,
    }
    fields.update(kw)
    return fields


def _example(name: str):
    spec = registry.lookup(f"DML_OPERATOR_{name}")
    return catalog.example_desc(spec), catalog.example_inputs(spec)


# ---------------------------------------------------------------------------------------------
# Worked values, each checked by hand (the comments show the arithmetic)

SEEDS = [
    # x / 0.5 + 128: -2 -> 126; 0.5 and 2.5 are ties that round to even (0 and 2); 1.5 -> 2;
    # 200 and -200 saturate.
    (*_example("ELEMENT_WISE_QUANTIZE_LINEAR"), (u8([126, 128, 130, 130, 255, 0], (1, 1, 2, 3)),)),
    # INT8 with zero point -3 and no zero point; -0.5 / 1 -> -0 (even) -> -3; NaN -> the zero
    # point; +-inf saturate.
    (
        _ql(out="INT8", sizes=(6,)),
        (f32([-0.5, 2.5, NAN, INF, -INF, -130.0]), f32([1.0] * 6), i8([-3] * 6)),
        (i8([-3, -1, -3, 127, -128, -128]),),
    ),
    (
        _ql(out="INT8", sizes=(4,), zero=False),
        (f32([-0.5, 3.5, NAN, 1e30]), f32([1.0] * 4)),
        (i8([0, 4, 0, 127]),),
    ),
    # A negative scale is used as written: 3 / -1 and (-2.5 / -1 = 2.5, even) 2.
    (
        _ql(out="INT8", sizes=(2,), zero=False),
        (f32([3.0, -2.5]), f32([-1.0, -1.0])),
        (i8([-3, 2]),),
    ),
    # Scale 0 (undefined in DirectML): x / 0 is +-inf (saturates), 0 / 0 NaN (the zero point).
    (
        _ql(sizes=(3,)),
        (f32([2.0, -2.0, 0.0]), f32([0.0] * 3), u8([7] * 3)),
        (u8([255, 0, 7]),),
    ),
    # FLOAT16 input and scale; INT32 input read as float32: 2**24 + 1 rounds to 2**24 (/ 2**16:
    # 256, saturated), 2**24 + 3 (a tie) to 2**24 + 4 (/ 98304: 170.67 -> 171).
    (
        _ql("FLOAT16", "UINT8", (3,)),
        (a([1.5, 3.0, -1.0], np.float16), a([0.5] * 3, np.float16), u8([10] * 3)),
        (u8([13, 16, 8]),),
    ),
    (
        _ql("INT32", "UINT8", (3,), zero=False),
        (i32([2**24 + 1, 2**24 + 3, -(2**20)]), f32([2.0**16, 2.0**16 * 1.5, 1.0])),
        (u8([255, 171, 0]),),
    ),
    (*_example("ELEMENT_WISE_DEQUANTIZE_LINEAR"), (f32([-64, -0.5, 0, 254], (1, 1, 2, 2)),)),
    # INT32 differences are exact before the one float32 rounding: (2**31 - 1) - (-2**31) is
    # 2**32 - 1, which rounds to 2**32; 16777217 - 0 rounds to 16777216; FLOAT16 output.
    (
        _dql("INT32", "FLOAT32", (3,)),
        (i32([2**31 - 1, 16777217, -5]), f32([1.0, 1.0, 0.5]), i32([-(2**31), 0, 3])),
        (f32([2.0**32, 16777216.0, -4.0]),),
    ),
    (
        _dql("UINT32", "FLOAT32", (2,), zero=False),
        (a([2**32 - 1, 7], np.uint32), f32([1.0, 0.25])),
        (f32([2.0**32, 1.75]),),
    ),
    (
        _dql("INT8", "FLOAT16", (3,)),
        (i8([-128, 127, 0]), a([0.5, 0.5, 1000.0], np.float16), i8([127, -128, -100])),
        (a([-127.5, 127.5, INF], np.float16),),  # 100000 overflows FLOAT16
    ),
    # QUANTIZE / DEQUANTIZE: 1x2 blocks of the {2, 4} input, one scale and zero point each.
    (*_example("QUANTIZE"), (i8([2, -2, 12, 12, -1, -5, -4, 127], (2, 4)),)),
    (*_example("DEQUANTIZE"), (f32([1, -1, 4, 6, 1, 0, -4, 127], (2, 4)),)),
    # INT4 output saturates to [-8, 7]; per-axis scale (one per column), SCALE only.
    (
        _blocked(Q, t("FLOAT32", 2, 3), [t("FLOAT32", 1, 3)], t("INT4", 2, 3)),
        (f32([1.0, 9.0, -2.5, -100.0, 0.5, 3.0], (2, 3)), f32([1.0, 2.0, 0.5], (1, 3))),
        (i4([1, 4, -5, -8, 0, 6], (2, 3)),),
    ),
    # UINT4 with a UINT4 zero point of 8, per tensor: 7.5 -> 8 + 8 = 16 saturates to 15.
    (
        _blocked(Q, t("FLOAT16", 4), [t("FLOAT16", 1), t("UINT4", 1)], t("UINT4", 4)),
        (a([-8.0, -1.5, 0.0, 7.5], np.float16), a([1.0], np.float16), u4([8])),
        (u4([0, 6, 8, 15]),),
    ),
    # DEQUANTIZE of INT4 (two's complement, -8..7); 2x2 blocks of a {2, 4} input.
    (
        _blocked(DQ, t("INT4", 2, 4), [t("FLOAT32", 1, 2), t("INT4", 1, 2)], t("FLOAT32", 2, 4)),
        (i4([-7, 7, 1, 2, -8, 7, 3, 0], (2, 4)), f32([0.5, 2.0], (1, 2)), i4([1, 1], (1, 2))),
        (f32([-4, 3, 0, 2, -4.5, 3, 4, -2], (2, 4)),),
    ),
    (
        _blocked(DQ, t("UINT4", 3), [t("FLOAT16", 1)], t("FLOAT16", 3)),
        (u4([15, 0, 3]), a([0.25], np.float16)),
        (a([3.75, 0, 0.75], np.float16),),
    ),
    # DYNAMIC_QUANTIZE_LINEAR: range [-3, 2.25], scale 5.25 / 255, zero point round(145.71)
    # = 146; 2 / scale = 97.14 -> 97 + 146 = 243.
    (
        *_example("DYNAMIC_QUANTIZE_LINEAR"),
        (
            u8([146, 243, 0, 25, 207, 255], (2, 3)),
            f32([np.float32(5.25) / np.float32(255)], (1, 1)),
            u8([146], (1, 1)),
        ),
    ),
    # An all-zero input: scale 1, zero point 0. NaN does not count towards the range and
    # quantizes to the zero point: range [0, 2.55], scale 0.01 (float32), zero point 0.
    (
        DYN(t("FLOAT32", 3), t("UINT8", 3), t("FLOAT32", 1), t("UINT8", 1)),
        (f32([0.0, 0.0, 0.0]),),
        (u8([0, 0, 0]), f32([1.0]), u8([0])),
    ),
    (
        DYN(t("FLOAT32", 3), t("UINT8", 3), t("FLOAT32", 1), t("UINT8", 1)),
        (f32([NAN, 2.55, 1.0]),),
        (u8([0, 255, 100]), f32([np.float32(2.55) / np.float32(255)]), u8([0])),
    ),
    # An infinite input: range [-inf, 1], scale inf, -inf / inf is NaN: zero point 0 (CAST's NaN
    # rule); -inf / inf quantizes as NaN (the zero point), 1 / inf is 0.
    (
        DYN(t("FLOAT32", 2), t("UINT8", 2), t("FLOAT32", 1), t("UINT8", 1)),
        (f32([-INF, 1.0]),),
        (u8([0, 0]), f32([INF]), u8([0])),
    ),
    # INT8: range [-1, 1.5], scale 2.5 / 255, zero point -128 + 102 = -26; 1.5 and 0.5 are 153
    # and 51 steps.
    (
        DYN(t("FLOAT16", 1, 3), t("INT8", 1, 3), t("FLOAT32", 1, 1), t("INT8", 1, 1)),
        (a([-1.0, 1.5, 0.5], np.float16, (1, 3)),),
        (
            i8([-128, 127, 25], (1, 3)),
            f32([np.float32(np.float32(2.5) / np.float32(255))], (1, 1)),
            i8([-26], (1, 1)),
        ),
    ),
    # (A - 128) * 0.5 + B * 0.25 = [0, 1.75, -16.5, 95.25]; / 0.5 = [0, 3.5, -33, 190.5]
    # -> [0, 4, -33, 190] (ties to even) - 10, saturated.
    (*_example("ELEMENT_WISE_QUANTIZED_LINEAR_ADD"), (i8([-10, -6, -43, 127]),)),
    # A' = [[1, 2, 3], [127, -128, 0]] (per-row zero points), B' = B - 1.
    (*_example("MATRIX_MULTIPLY_INTEGER"), (i32([8, 120, -128, -32511], (1, 1, 2, 2)),)),
    # 1-D per-row zero point {M}, per-column 1-D {N}; 2-D tensors.
    (
        MMI(t("INT8", 2, 2), t("INT8", 2), t("UINT8", 2, 3), t("UINT8", 3), t("INT32", 2, 3)),
        (i8([1, 2, -3, 4], (2, 2)), i8([1, -1]), u8([0, 1, 2, 3, 4, 255], (2, 3)), u8([0, 2, 255])),
        (i32([3, 2, 0, 15, 12, 506], (2, 3)),),
    ),
    # Two INT8 operands without zero points: the int8 x int8 -> int32 product, batched.
    (
        MMI(t("INT8", 2, 1, 2), None, t("INT8", 2, 2, 1), None, t("INT32", 2, 1, 1)),
        (i8([-128, -128, 127, 1], (2, 1, 2)), i8([-128, -128, 127, -128], (2, 2, 1))),
        (i32([32768, 16001], (2, 1, 1)),),
    ),
    (*_example("MATRIX_MULTIPLY_INTEGER_TO_FLOAT"), (f32([-6.5, 1, 22.5, -4, -1.5, -3], (2, 3)),)),
    # INT32 inputs, dequantized in float32 (exact differences): A' = [3, -1] * 0.5,
    # B' = [4, 2] * 2: 1.5 * 8 - 0.5 * 4.
    (
        MMITF(
            t("INT32", 1, 2),
            t("FLOAT32", 1),
            t("INT32", 1),
            t("INT32", 2, 1),
            t("FLOAT32", 1),
            None,
            None,
            t("FLOAT32", 1, 1),
        ),
        (
            i32([2**30 + 3, 2**30 - 1], (1, 2)),
            f32([0.5]),
            i32([2**30]),
            i32([4, 2], (2, 1)),
            f32([2.0]),
        ),
        (f32([10.0], (1, 1)),),
    ),
    # A' = [[2, -2], [12, -28]], B = [[3, -2], [1, 4]]: sums [[4, -12], [8, -136]]; scales
    # 0.5 * [1, 0.5]: [[2, -3], [4, -34]]; / 0.25 + 100, saturated.
    (*_example("QUANTIZED_LINEAR_MATRIX_MULTIPLY"), (u8([108, 88, 116, 0], (1, 1, 2, 2)),)),
    # Per-row output scale and zero point ({M} 1-D, with every parameter 1-D).
    (
        QLMM(
            t("INT8", 2, 1),
            t("FLOAT32", 1),
            None,
            t("INT8", 1, 2),
            t("FLOAT32", 2),
            None,
            t("FLOAT32", 2),
            t("INT8", 2),
            t("INT8", 2, 2),
        ),
        (
            i8([3, -5], (2, 1)),
            f32([1.0]),
            i8([2, 1], (1, 2)),
            f32([1.0, 3.0]),
            f32([2.0, 0.5]),
            i8([0, 5]),
        ),
        (i8([3, 4, -15, -25], (2, 2)),),
    ),
    (*_example("CONVOLUTION_INTEGER"), (i32([-4, -2, 2, 4, -5, -1, 7, 11], (1, 2, 2, 2)),)),
    # 3-D (one spatial dimension), padding reads as the zero point, stride 2, dilation 2,
    # per-channel filter zero point: x - 2 = [-1, 2, 5, 8, 11] padded by a 0 each side; output o
    # reads inputs 2o - 1 and 2o + 1 with filters [1, 2] and [0, -1] - (-1) = [1, 0].
    (
        CONVI(
            t("UINT8", 1, 1, 5),
            t("UINT8", 1),
            t("INT8", 2, 1, 2),
            t("INT8", 2),
            t("INT32", 1, 2, 3),
            **_conv_fields(1, strides=(2,), dilations=(2,), start_padding=(1,), end_padding=(1,)),
        ),
        (u8([1, 4, 7, 10, 13], (1, 1, 5)), u8([2]), i8([1, 2, 0, -1], (2, 1, 2)), i8([0, -1])),
        (i32([4, 18, 8, 0, 2, 8], (1, 2, 3)),),
    ),
    # Groups: two input channels, two filters of one channel each.
    (
        CONVI(
            t("INT8", 1, 2, 1, 2),
            None,
            t("INT8", 2, 1, 1, 1),
            None,
            t("INT32", 1, 2, 1, 2),
            **_conv_fields(group_count=2),
        ),
        (i8([1, 2, 3, 4], (1, 2, 1, 2)), i8([10, -1], (2, 1, 1, 1))),
        (i32([10, 20, -3, -4], (1, 2, 1, 2)),),
    ),
    # (acc + bias) * 0.5 * [1, 0.25] / 0.5 - 3: channel 1 is [-3.25, -2.25, -0.25, 0.75] -> even.
    (
        *_example("QUANTIZED_LINEAR_CONVOLUTION"),
        (i8([-3, -1, 3, 5, -6, -5, -3, -2], (1, 2, 2, 2)),),
    ),
    # Channel 0: [0, 10, 20, 31] means of the padded windows [0, 5, 10, 15.25] / 0.5 (30.5 is a
    # tie: 30); channel 1 (scale 0.5) [-10, -6, -2, 2]: [-5, -4, -3, -2] / 0.5.
    (
        *_example("QUANTIZED_LINEAR_AVERAGE_POOLING"),
        (i8([0, 10, 20, 30, -10, -8, -6, -4], (1, 2, 2, 2)),),
    ),
    # IncludePadding: the corner's window holds one input point of four: (10 - 2) * 1 / 4.
    (
        QPOOL(
            t("UINT8", 1, 1, 1, 2),
            t("FLOAT32", 1),
            t("UINT8", 1),
            t("FLOAT32", 1),
            None,
            t("UINT8", 1, 1, 1, 2),
            **_pool_fields(start_padding=(1, 1), include_padding=True),
        ),
        (u8([10, 6], (1, 1, 1, 2)), f32([1.0]), u8([2]), f32([1.0])),
        (u8([2, 3], (1, 1, 1, 2)),),
    ),
]


@pytest.mark.parametrize("desc, inputs, expected", SEEDS)
def test_documented_and_worked_examples(desc, inputs, expected):
    _assert_quantized(desc, S.run(S.Case(desc, tuple(inputs))), expected)
    S.assert_same(reference.reference(desc, *inputs), expected)


# ---------------------------------------------------------------------------------------------
# Properties against the reference

_FLOAT_SCALES = [0.5, 0.25, 1.0, 2.0, 0.125, 3.0, 0.1, 0.037, 7.5]


def _floats(rng, shape, scale_values, dtype) -> np.ndarray:
    """Spread values, exact ties (k + 0.5 steps of a power-of-two scale) and now and then NaN or
    infinities."""
    x = rng.uniform(-200, 200, shape)
    ties = (rng.integers(-20, 20, shape) + 0.5) * rng.choice([0.5, 1.0, 0.25], shape)
    x = np.where(rng.random(shape) < 0.3, ties, x)
    if rng.random() < 0.3 and x.size:
        x.ravel()[rng.integers(0, x.size, 2)] = rng.choice([NAN, INF, -INF], 2)
    return x.astype(dtype)


def _ints(rng, type_name: str, shape) -> np.ndarray:
    held = reference.quantized.held_dtype(type_name)
    lo, hi = dml.DataType[type_name].integer_range
    if type_name in ("INT32", "UINT32") and rng.random() < 0.5:
        return rng.integers(lo // 1000, hi // 1000, shape, endpoint=True).astype(held)
    return rng.integers(lo, hi, shape, endpoint=True).astype(held)


def _axis_values(rng, shape, axis, values) -> np.ndarray:
    """A full-size parameter array: one value, or one per index of ``axis``."""
    if axis is None:
        return np.full(shape, rng.choice(values))
    per = rng.choice(values, shape[axis])
    return np.broadcast_to(per.reshape([-1 if i == axis else 1 for i in range(len(shape))]), shape)


@st.composite
def quantize_linear_cases(draw, dequantize: bool = False):
    rng = draw(S.seeds())
    shape = draw(S.shapes(max_elements=48))
    axis = draw(st.sampled_from([None] + list(range(len(shape)))))
    zero = draw(st.booleans())
    if dequantize:
        in_type = draw(st.sampled_from(["INT8", "UINT8", "INT16", "UINT16", "INT32", "UINT32"]))
        out = draw(st.sampled_from(["FLOAT32", "FLOAT16"]))
        desc = _dql(in_type, out, shape, zero)
        x = _ints(rng, in_type, shape)
        zp = _axis_values(rng, shape, axis, _ints(rng, in_type, (8,)))
        scale = _axis_values(rng, shape, axis, _FLOAT_SCALES).astype(out.lower())
    else:
        in_type = draw(st.sampled_from(["FLOAT32", "FLOAT16", "INT32"]))
        out = draw(st.sampled_from(["INT8", "UINT8"]))
        desc = _ql(in_type, out, shape, zero)
        x = (
            _ints(rng, "INT32", shape)
            if in_type == "INT32"
            else _floats(rng, shape, 1, in_type.lower())
        )
        zp = _axis_values(rng, shape, axis, _ints(rng, out, (8,)))
        scale_type = desc.scale_tensor.dtype
        scale = _axis_values(rng, shape, axis, _FLOAT_SCALES).astype(scale_type)
    inputs = (x, scale) + ((zp.astype(desc.input_slots()[2][1].dtype),) if zero else ())
    return S.Case(desc, tuple(np.ascontiguousarray(v) for v in inputs))


@given(case=st.one_of(quantize_linear_cases(), quantize_linear_cases(dequantize=True)))
def test_quantize_dequantize_linear_match_reference(case):
    S.assert_same(S.run(case), reference.reference(case.desc, *case.inputs))


@st.composite
def blocked_cases(draw, cls=None):
    cls = cls or draw(st.sampled_from([Q, DQ]))
    rng = draw(S.seeds())
    shape = draw(S.shapes(ranks=(1, 2, 3, 4), max_elements=48))
    blocks = tuple(draw(st.sampled_from([q for q in range(1, n + 1) if n % q == 0])) for n in shape)
    kind = draw(st.sampled_from(["SCALE", "SCALE_ZERO_POINT"]))
    real = draw(st.sampled_from(["FLOAT32", "FLOAT16"]))
    quant = draw(st.sampled_from(["INT8", "UINT8", "INT4", "UINT4"]))
    params = [t(real, *blocks)] + ([t(quant, *blocks)] if kind == "SCALE_ZERO_POINT" else [])
    if cls is Q:
        desc = _blocked(Q, t(real, *shape), params, t(quant, *shape), kind=kind)
        x = _floats(rng, shape, 1, real.lower())
    else:
        desc = _blocked(DQ, t(quant, *shape), params, t(real, *shape), kind=kind)
        x = _ints(rng, quant, shape)
    scale = rng.choice(_FLOAT_SCALES, blocks).astype(real.lower())
    inputs = (x, scale)
    if kind == "SCALE_ZERO_POINT":
        inputs += (_ints(rng, quant, blocks),)
    if draw(st.booleans()):
        desc = dataclasses.replace(desc, quantization_tensor_count=len(params))
    return S.Case(desc, inputs)


@given(case=blocked_cases())
def test_quantize_and_dequantize_blocked_match_reference(case):
    S.assert_same(S.run(case), reference.reference(case.desc, *case.inputs))


@S.HALF
@given(case=blocked_cases(Q))
def test_dequantize_inverts_quantize_within_half_a_step(case):
    """Within the range, dequantize(quantize(x)) is x to within half a scale step."""
    desc = case.desc
    (q,) = S.run(case)
    back = _blocked(DQ, desc.output_tensor, desc.quantization_tensors, desc.input_tensor)
    (y,) = S.run(S.Case(back, (q,) + case.inputs[1:]))
    x = case.inputs[0].astype(np.float64)
    scale = reference.quantized._expand(case.inputs[1], x.shape).astype(np.float64)
    lo, hi = desc.output_tensor.data_type.integer_range
    zero = (
        0
        if len(case.inputs) < 3
        else reference.quantized._expand(
            reference.quantized.read(case.inputs[2], desc.output_tensor.data_type.name), x.shape
        )
    )
    steps = x / scale + zero
    inside = np.isfinite(steps) & (steps > lo) & (steps < hi)
    error = np.abs(y.astype(np.float64) - x)[inside]
    assert np.all(error <= scale[inside] * (0.5 + 1e-3) + np.abs(x[inside]) * 1e-3)


@st.composite
def dynamic_cases(draw):
    rng = draw(S.seeds())
    shape = draw(S.shapes(max_elements=48))
    in_type = draw(st.sampled_from(["FLOAT32", "FLOAT16"]))
    out = draw(st.sampled_from(["UINT8", "INT8"]))
    one = (1,) * len(shape)
    desc = DYN(t(in_type, *shape), t(out, *shape), t("FLOAT32", *one), t(out, *one))
    style = draw(st.sampled_from(["spread", "positive", "negative", "zeros", "nan"]))
    x = rng.uniform(-50, 50, shape) * rng.choice([1e-3, 1, 10])
    if style == "positive":
        x = np.abs(x)
    elif style == "negative":
        x = -np.abs(x)
    elif style == "zeros":
        x = np.zeros(shape)
    elif style == "nan":
        x.ravel()[0] = NAN
    return S.Case(desc, (x.astype(in_type.lower()),))


@given(case=dynamic_cases())
def test_dynamic_quantize_linear_matches_reference(case):
    _assert_quantized(case.desc, S.run(case), reference.reference(case.desc, *case.inputs))


@st.composite
def quantized_add_cases(draw):
    rng = draw(S.seeds())
    shape = draw(S.shapes(max_elements=48))
    one = (1,) * len(shape)
    types = [draw(st.sampled_from(["INT8", "UINT8"])) for _ in range(3)]
    zeros = [draw(st.booleans()) for _ in range(3)]
    fields, inputs = {}, []
    for side, type_name, zero in zip(("a", "b", "output"), types, zeros):
        if side != "output":
            fields[f"{side}_tensor"] = t(type_name, *shape)
            inputs.append(_ints(rng, type_name, shape))
        fields[f"{side}_scale_tensor"] = t("FLOAT32", *one)
        inputs.append(np.full(one, rng.choice(_FLOAT_SCALES), np.float32))
        if zero:
            fields[f"{side}_zero_point_tensor"] = t(type_name, *one)
            inputs.append(_ints(rng, type_name, one))
    fields["output_tensor"] = t(types[2], *shape)
    desc = QADD(**fields)
    # Inputs in schema order: A, AScale, AZeroPoint, B, BScale, BZeroPoint, OutScale, OutZero.
    return S.Case(desc, tuple(inputs))


@given(case=quantized_add_cases())
def test_quantized_linear_add_matches_reference(case):
    S.assert_same(S.run(case), reference.reference(case.desc, *case.inputs))


# --- matrix products -------------------------------------------------------------------------


def _case(desc, values: dict) -> S.Case:
    """A case whose inputs are ``values`` (by field name) in schema order."""
    present = [f.name for f in desc.declared("input") if getattr(desc, f.name) is not None]
    return S.Case(desc, tuple(values[name] for name in present))


def _parameter_sizes(draw, mode: str, count: int, rank: int, axis: int, p_rank: int):
    """Sizes of a parameter tensor of rank ``p_rank``: one value, or ``count`` along ``axis``
    (1-D: the values themselves)."""
    if mode == "tensor" or count == 1:
        return (1,) * p_rank
    if p_rank == 1:
        return (count,)
    sizes = [1] * rank
    sizes[axis] = count
    return tuple(sizes[rank - p_rank :])


@st.composite
def matrix_cases(draw, cls):
    rng = draw(S.seeds())
    rank = draw(st.integers(2, 4))
    lead = tuple(draw(st.integers(1, 2)) for _ in range(rank - 2))
    m, k, n = (draw(st.integers(1, 4)) for _ in range(3))
    if cls is MMITF:
        int_type = draw(st.sampled_from(["INT8", "UINT8", "INT16", "UINT16", "INT32", "UINT32"]))
        a_type = b_type = int_type
        float_type = draw(st.sampled_from(["FLOAT32", "FLOAT16"]))
    else:
        a_type, b_type = (draw(st.sampled_from(["INT8", "UINT8"])) for _ in range(2))
        float_type = "FLOAT32"
    # The parameter tensors share a rank (QLMM: all six; MMITF: its four); A's per-row axis
    # needs two dimensions unless the tensor is 1-D.
    p_rank = draw(st.sampled_from([1] + list(range(2, rank + 1))))
    modes = {s: draw(st.sampled_from(["tensor", "axis"])) for s in ("a", "b", "output")}
    axes = {"a": (rank - 2, m), "b": (rank - 1, n), "output": (rank - 2, m)}

    def sizes(side):
        axis, count = axes[side]
        return _parameter_sizes(draw, modes[side], count, rank, axis, p_rank)

    fields = {
        "a_tensor": t(a_type, *lead, m, k),
        "b_tensor": t(b_type, *lead, k, n),
    }
    values = {
        "a_tensor": _ints(rng, a_type, (*lead, m, k)),
        "b_tensor": _ints(rng, b_type, (*lead, k, n)),
    }
    if float_type == "FLOAT16":  # products of 16- and 32-bit values would overflow FLOAT16
        values = {name: (v % 16).astype(v.dtype) for name, v in values.items()}
    out_type = {MMI: "INT32", MMITF: float_type}.get(cls) or draw(
        st.sampled_from(["INT8", "UINT8"])
    )
    sides = ("a", "b") if cls is not QLMM else ("a", "b", "output")
    for side in sides:
        owner = {"a": a_type, "b": b_type, "output": out_type}[side]
        if cls is not MMI:
            fields[f"{side}_scale_tensor"] = t(float_type, *sizes(side))
            values[f"{side}_scale_tensor"] = rng.choice(_FLOAT_SCALES, sizes(side)).astype(
                float_type.lower()
            )
        if draw(st.booleans()):
            fields[f"{side}_zero_point_tensor"] = t(owner, *sizes(side))
            zero = _ints(rng, owner, sizes(side))
            if float_type == "FLOAT16":
                zero = (zero % 16).astype(zero.dtype)
            values[f"{side}_zero_point_tensor"] = zero
    if cls is MMITF and draw(st.booleans()):
        fields["bias_tensor"] = t(float_type, *lead, m, n)
        values["bias_tensor"] = rng.uniform(-4, 4, (*lead, m, n)).astype(float_type.lower())
    fields["output_tensor"] = t(out_type, *lead, m, n)
    desc = cls(**fields)
    return _case(desc, values)


@S.HALF
@given(case=matrix_cases(MMITF))
def test_matrix_multiply_integer_to_float_matches_reference(case):
    (got,) = S.run(case)
    (want,) = reference.reference(case.desc, *case.inputs)
    assert got.dtype == want.dtype and got.shape == want.shape
    # float32 roundings of the products (16- and 32-bit inputs are dequantized first).
    half = got.dtype == np.float16
    assert np.all(np.isfinite(want))
    scale = np.max(np.abs(want.astype(np.float64)), initial=1.0)
    np.testing.assert_allclose(
        got.astype(np.float64),
        want.astype(np.float64),
        rtol=2e-3 if half else 1e-5,
        atol=(2e-3 if half else 1e-5) * scale,
    )


# --- convolutions ----------------------------------------------------------------------------


@st.composite
def conv_cases(draw, cls):
    rng = draw(S.seeds())
    dims = draw(st.integers(1, 2))
    rank = dims + 2
    groups = draw(st.integers(1, 2))
    c, k_per = groups * draw(st.integers(1, 2)), draw(st.integers(1, 2))
    k = groups * k_per
    kernel = tuple(draw(st.integers(1, 3)) for _ in range(dims))
    geometry = {
        "strides": tuple(draw(st.integers(1, 2)) for _ in range(dims)),
        "dilations": tuple(draw(st.integers(1, 2)) for _ in range(dims)),
        "start_padding": tuple(draw(st.integers(0, 2)) for _ in range(dims)),
        "end_padding": tuple(draw(st.integers(0, 2)) for _ in range(dims)),
        "group_count": groups,
    }
    size = tuple(draw(st.integers(1, 5)) for _ in range(dims))
    n = draw(st.integers(1, 2))
    x_type, w_type = (draw(st.sampled_from(["INT8", "UINT8"])) for _ in range(2))
    out_type = "INT32" if cls is CONVI else draw(st.sampled_from(["INT8", "UINT8"]))
    probe = CONVI(
        t(x_type, n, c, *size),
        None,
        t(w_type, k, c // groups, *kernel),
        None,
        t("INT32", n, k, *size),
        **geometry,
    )
    out_sizes = conv_output_sizes(probe)
    assume(all(s >= 1 for s in out_sizes))
    fields = {"input_tensor": probe.input_tensor, "filter_tensor": probe.filter_tensor}
    values = {
        "input_tensor": _ints(rng, x_type, probe.input_tensor.sizes),
        "filter_tensor": _ints(rng, w_type, probe.filter_tensor.sizes),
    }
    z_rank = draw(st.integers(1, rank))  # CONVOLUTION_INTEGER: both zero points share it
    params = [("input", x_type, 1), ("filter", w_type, k), ("output", out_type, 1)]
    for side, owner, count in params if cls is QCONV else params[:2]:
        mode = draw(st.sampled_from(["tensor", "axis"]))
        p_rank = z_rank if cls is CONVI else draw(st.integers(1, rank))
        sizes = _parameter_sizes(draw, mode, count, rank, 1, p_rank)
        if cls is QCONV:
            s_rank = draw(st.integers(1, rank))
            s_sizes = _parameter_sizes(draw, mode, count, rank, 1, s_rank)
            fields[f"{side}_scale_tensor"] = t("FLOAT32", *s_sizes)
            values[f"{side}_scale_tensor"] = rng.choice(_FLOAT_SCALES, s_sizes).astype(np.float32)
        if draw(st.booleans()):
            fields[f"{side}_zero_point_tensor"] = t(owner, *sizes)
            values[f"{side}_zero_point_tensor"] = _ints(rng, owner, sizes)
    if cls is QCONV and draw(st.booleans()):
        bias = (1, k) + (1,) * dims
        fields["bias_tensor"] = t("INT32", *bias)
        values["bias_tensor"] = rng.integers(-1000, 1000, bias).astype(np.int32)
    fields["output_tensor"] = t(out_type, *out_sizes)
    desc = cls(**fields, **geometry, dimension_count=draw(st.sampled_from([None, dims])))
    return _case(desc, values)


_INTEGER_SUMS = {
    "MATRIX_MULTIPLY_INTEGER": lambda: matrix_cases(MMI),
    "QUANTIZED_LINEAR_MATRIX_MULTIPLY": lambda: matrix_cases(QLMM),
    "CONVOLUTION_INTEGER": lambda: conv_cases(CONVI),
    "QUANTIZED_LINEAR_CONVOLUTION": lambda: conv_cases(QCONV),
}


@pytest.mark.parametrize("name", list(_INTEGER_SUMS))
@S.HALF
@given(data=st.data())
def test_integer_and_quantized_products_match_reference(name, data):
    case = data.draw(_INTEGER_SUMS[name]())
    S.assert_same(S.run(case), reference.reference(case.desc, *case.inputs))


def test_integer_convolution_equals_float_convolution_of_the_differences():
    """CONVOLUTION_INTEGER is CONVOLUTION (CROSS_CORRELATION, FORWARD) of the zero-point
    differences, exactly (small integers are exact in float32)."""
    rng = np.random.default_rng(5)
    x, w = _ints(rng, "UINT8", (2, 4, 5, 6)), _ints(rng, "INT8", (6, 2, 3, 2))
    zx, zw = u8([100]), i8([3, -2, 0, 1, 5, -7])
    geometry = _conv_fields(
        strides=(2, 1), dilations=(1, 2), start_padding=(1, 0), end_padding=(2, 1), group_count=2
    )
    probe = CONVI(
        t("UINT8", 2, 4, 5, 6),
        t("UINT8", 1),
        t("INT8", 6, 2, 3, 2),
        t("INT8", 6),
        t("INT32", 2, 6, 1, 1),
        **geometry,
    )
    out = conv_output_sizes(probe)
    desc = dataclasses.replace(probe, output_tensor=t("INT32", *out))
    (got,) = S.run(S.Case(desc, (x, zx, w, zw)))
    fdesc = dml.ConvolutionOperatorDesc(
        t("FLOAT32", 2, 4, 5, 6),
        t("FLOAT32", 6, 2, 3, 2),
        None,
        t("FLOAT32", *out),
        output_padding=(0, 0),
        **geometry,
    )
    xf = x.astype(np.float32) - 100
    wf = w.astype(np.float32) - zw.astype(np.float32).reshape(6, 1, 1, 1)
    (want,) = S.run(S.Case(fdesc, (xf, wf)))
    np.testing.assert_array_equal(got, want.astype(np.int32))


@pytest.mark.parametrize(
    "x_type, size, kernel, multiplier, geometry",
    [("UINT8", (7, 9), (3, 3), 1, {"strides": (1, 1), "dilations": (1, 1),
                                     "start_padding": (1, 1), "end_padding": (1, 1)}),
     ("INT8", (8, 8), (3, 3), 2, {"strides": (2, 2), "dilations": (1, 1),
                                    "start_padding": (1, 1), "end_padding": (0, 1)}),
     ("UINT8", (9, 7), (3, 2), 1, {"strides": (1, 2), "dilations": (2, 1),
                                     "start_padding": (2, 0), "end_padding": (1, 1)}),
     ("UINT8", (11,), (5,), 3, {"strides": (2,), "dilations": (1,),
                                  "start_padding": (2,), "end_padding": (1,)})],
)  # fmt: skip
def test_depthwise_integer_convolutions_match_reference(x_type, size, kernel, multiplier, geometry):
    """Depthwise CONVOLUTION_INTEGER and QUANTIZED_LINEAR_CONVOLUTION (one input channel a
    group, ``multiplier`` filters each), which run as int32 multiply-adds over the taps
    (``quantized_conv._taps_sum``): zero points (the filter's one a channel; the padding reads
    as the input's),
    strides, dilations, 1-D and 2-D windows, values at their types' extremes, against the
    int64 reference; the lowering holds neither a convolution nor a matrix product."""
    rng = np.random.default_rng(11)
    c, n = 6, 2
    k = c * multiplier
    lo, hi = _EXTREMES[x_type]
    x = rng.choice([lo, hi, (lo + hi) // 2], (n, c, *size)).astype(np.dtype(x_type.lower()))
    w = rng.choice([-128, 127, 3], (k, 1, *kernel)).astype(np.int8)
    rank = len(size) + 2
    zx = rng.integers(lo, hi + 1, (1,) * rank).astype(x.dtype)
    zw = rng.integers(-128, 128, (1, k) + (1,) * (rank - 2)).astype(np.int8)
    geometry = {**geometry, "group_count": c}
    probe = CONVI(
        t(x_type, *x.shape), t(x_type, *zx.shape), t("INT8", *w.shape), t("INT8", *zw.shape),
        t("INT32", n, k, *size), **geometry,
    )  # fmt: skip
    desc = dataclasses.replace(probe, output_tensor=t("INT32", *conv_output_sizes(probe)))
    case = S.Case(desc, (x, zx, w, zw))
    got = S.run(case)
    S.assert_same(got, reference.reference(desc, *case.inputs))
    assert np.abs(got[0]).max() > 2**17  # sums far beyond what any one product reaches
    jaxpr = str(jax.make_jaxpr(dml.compile_operator(desc).fn)(*case.inputs))
    assert "conv_general_dilated" not in jaxpr and "dot_general" not in jaxpr
    q = QCONV(
        input_tensor=desc.input_tensor, input_scale_tensor=t("FLOAT32", 1),
        input_zero_point_tensor=desc.input_zero_point_tensor, filter_tensor=desc.filter_tensor,
        filter_scale_tensor=t("FLOAT32", 1, k, *(1,) * (rank - 2)),
        filter_zero_point_tensor=desc.filter_zero_point_tensor, bias_tensor=None,
        output_scale_tensor=t("FLOAT32", 1), output_zero_point_tensor=t("INT8", 1),
        output_tensor=t("INT8", *desc.output_tensor.sizes), **geometry,
    )  # fmt: skip
    scales = rng.uniform(1e-3, 4e-3, (1, k, *(1,) * (rank - 2))).astype(np.float32)
    inputs = (x, np.float32([1e-3]), zx, w, scales, zw, np.float32([0.5]), np.int8([3]))
    qcase = S.Case(q, inputs)
    S.assert_same(S.run(qcase), reference.reference(q, *qcase.inputs))


# --- integer sums at the extremes of the 8-bit ranges --------------------------------------
# The products are int8 dots with the zero points applied outside them (UINT8 shifted by -128);
# these cases hold that to the exact int64 reference where every term is as large as the types
# allow: sums reaching int32's limits, and dots whose own int32 sum wraps while the result fits.

_K_LIMIT = 33025  # 33025 * 255 * 255 = 2_147_450_625 <= 2**31 - 1
_EXTREMES = {"UINT8": (0, 255), "INT8": (-128, 127)}


def _extreme_matrix_case(a_type, b_type, a_zero, b_zero, m, k, n, rng=None, values=None):
    """MATRIX_MULTIPLY_INTEGER {m, k} x {k, n}; zero points "row" / "column" (extremes chosen
    by ``rng``), a number (one value) or None; A and B drawn from their types' two extremes,
    or the constants ``values``."""
    fields = {"a_tensor": t(a_type, m, k), "b_tensor": t(b_type, k, n)}
    if values is None:
        arrays = {
            "a_tensor": rng.choice(_EXTREMES[a_type], (m, k)),
            "b_tensor": rng.choice(_EXTREMES[b_type], (k, n)),
        }
    else:
        arrays = {"a_tensor": np.full((m, k), values[0]), "b_tensor": np.full((k, n), values[1])}
    for side, zero, owner, shape in (("a", a_zero, a_type, (m, 1)), ("b", b_zero, b_type, (1, n))):
        if zero is None:
            continue
        if isinstance(zero, str):
            arrays[f"{side}_zero_point_tensor"] = rng.choice(_EXTREMES[owner], shape)
        else:
            shape = (1, 1)
            arrays[f"{side}_zero_point_tensor"] = np.full(shape, zero)
        fields[f"{side}_zero_point_tensor"] = t(owner, *shape)
    fields["output_tensor"] = t("INT32", m, n)
    types = {**{f"{s}_tensor": ty for s, ty in (("a", a_type), ("b", b_type))}}
    types.update({f"{s}_zero_point_tensor": types[f"{s}_tensor"] for s in "ab"})
    values = {name: v.astype(types[name].lower()) for name, v in arrays.items()}
    return _case(MMI(**fields), values)


_EXTREME_MATRICES = {
    # (A - 255)(B - 127) with A = 0, B = -128: every term +65025, the sum 2**31 - 32,023
    "largest sum": ("UINT8", "INT8", 255, 127, (0, -128)),
    # (A - 0)(B - 127) with A = 255, B = -128: every term -65025
    "smallest sum": ("UINT8", "INT8", 0, 127, (255, -128)),
    "int8 x int8, no zero points": ("INT8", "INT8", None, None, (-128, -128)),
    "uint8 x uint8, no zero points": ("UINT8", "UINT8", None, None, (255, 255)),
}


@pytest.mark.parametrize("name", list(_EXTREME_MATRICES))
def test_integer_products_are_exact_at_the_extremes(name):
    a_type, b_type, a_zero, b_zero, values = _EXTREME_MATRICES[name]
    k = _K_LIMIT if a_zero is not None else 2**17  # no zero points: 128 * 128 * 2**17 = 2**31
    if name == "uint8 x uint8, no zero points":
        k = _K_LIMIT
    case = _extreme_matrix_case(a_type, b_type, a_zero, b_zero, 1, k, 2, values=values)
    (got,) = S.run(case)
    want = np.int64(k) * (values[0] - (a_zero or 0)) * (values[1] - (b_zero or 0))
    if name == "int8 x int8, no zero points":
        want -= 2**32  # (-128) * (-128) * 2**17 = 2**31 wraps to -2**31, as int32 sums do
    np.testing.assert_array_equal(got, np.full((1, 2), want, np.int64).astype(np.int32))
    S.assert_same((got,), reference.reference(case.desc, *case.inputs))


@pytest.mark.parametrize(
    "a_type, b_type", [("UINT8", "UINT8"), ("UINT8", "INT8"), ("INT8", "UINT8"), ("INT8", "INT8")]
)
def test_integer_products_of_extreme_values_and_zero_points_match_reference(a_type, b_type):
    """Every element and zero point (one per row of A, one per column of B) at its type's
    minimum or maximum, K as large as int32 allows for any such choice."""
    rng = np.random.default_rng(11)
    case = _extreme_matrix_case(a_type, b_type, "row", "column", 2, _K_LIMIT, 3, rng)
    S.assert_same(S.run(case), reference.reference(case.desc, *case.inputs))


def test_large_aligned_products_take_the_int8_dot_and_small_ones_int16():
    """The int8 dot (cuBLAS's int8 GEMM on GPUs) where M, K and N are multiples of 4 and at
    least 128; 16-bit operands elsewhere. Both exact against the NumPy int64 reference."""
    rng = np.random.default_rng(12)
    for (m, k, n), operand in (((128, 256, 132), "int8"), ((128, 255, 128), "int16")):
        case = _extreme_matrix_case("UINT8", "INT8", "row", "column", m, k, n, rng)
        op = dml.compile_operator(case.desc)
        dots = [
            e for e in jax.make_jaxpr(op.fn)(*case.inputs).eqns if e.primitive.name == "dot_general"
        ]
        assert [str(e.invars[0].aval.dtype) for e in dots] == [operand]
        S.assert_same(S.run(case), reference.reference(case.desc, *case.inputs))


def test_an_int8_dot_that_wraps_inside_gives_the_exact_sum():
    """A = 255 with zero point 255 (differences 0), B = 127 with zero point -128: the int8 dot
    sums 127 * 127 over K = 140,000 terms (2.26e9, past int32), the correction removes it
    exactly and the result is 0; with zero point 254 every term is 255, the sum 35,700,000."""
    for a_zero, want in ((255, 0), (254, 255 * 140_000)):
        case = _extreme_matrix_case("UINT8", "INT8", a_zero, -128, 1, 140_000, 1, values=(255, 127))
        (got,) = S.run(case)
        np.testing.assert_array_equal(got, np.full((1, 1), want, np.int32))


@pytest.mark.parametrize("cls", [CONVI, QCONV], ids=["CONVOLUTION_INTEGER", "QUANTIZED_CONV"])
@pytest.mark.parametrize("x_type, w_type", [("UINT8", "INT8"), ("INT8", "UINT8")])
def test_integer_convolutions_of_extreme_values_match_reference(cls, x_type, w_type):
    """Extreme inputs, filters and zero points (the filter's one per output channel), padding
    on every side (it reads as the input zero point), and 900 channels of 3x3 windows: each sum
    has 8,100 terms of up to 255 * 255."""
    rng = np.random.default_rng(12)
    c, k = 900, 2
    x = rng.choice(_EXTREMES[x_type], (1, c, 3, 3)).astype(x_type.lower())
    w = rng.choice(_EXTREMES[w_type], (k, c, 3, 3)).astype(w_type.lower())
    zx = np.array([_EXTREMES[x_type][1]], x_type.lower()).reshape(1, 1, 1, 1)
    zw = rng.choice(_EXTREMES[w_type], (1, k, 1, 1)).astype(w_type.lower())
    geometry = _conv_fields(start_padding=(1, 1), end_padding=(1, 1))
    if cls is CONVI:
        desc = CONVI(
            t(x_type, 1, c, 3, 3), t(x_type, 1, 1, 1, 1), t(w_type, k, c, 3, 3),
            t(w_type, 1, k, 1, 1), t("INT32", 1, k, 3, 3), **geometry,
        )  # fmt: skip
        inputs = (x, zx, w, zw)
    else:
        one = t("FLOAT32", 1, 1, 1, 1)
        desc = QCONV(
            t(x_type, 1, c, 3, 3), one, t(x_type, 1, 1, 1, 1), t(w_type, k, c, 3, 3),
            t("FLOAT32", 1, k, 1, 1), t(w_type, 1, k, 1, 1), None, one, t("INT8", 1, 1, 1, 1),
            t("INT8", 1, k, 3, 3), **geometry,
        )  # fmt: skip
        scales = f32([2.0**-21, 2.0**-20], (1, k, 1, 1))  # sums of ~1e8 spread over INT8
        inputs = (x, f32([1.0], (1, 1, 1, 1)), zx, w, scales, zw, f32([0.5], (1, 1, 1, 1)),
                  i8([3], (1, 1, 1, 1)))  # fmt: skip
    _assert_quantized(desc, S.run(S.Case(desc, inputs)), reference.reference(desc, *inputs))


def _only(out) -> np.ndarray:
    """An operator's one output, given as itself or in a sequence."""
    return np.asarray(out[0] if isinstance(out, (tuple, list)) else out)


def _primitives(jaxpr) -> list[str]:
    """The primitive names of a jaxpr and of every jaxpr inside it."""
    names = []
    for e in jaxpr.eqns:
        names.append(e.primitive.name)
        for p in e.params.values():
            for sub in p if isinstance(p, (tuple, list)) else [p]:
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    names += _primitives(inner)
    return names


@pytest.mark.parametrize(
    "c, window, zero, chunks",
    [(100, 3, False, 1), (300, 3, False, 3), (300, 3, True, 11), (4, 17, True, None)],
)
def test_integer_convolutions_off_cuda_are_exact_float_convolutions(c, window, zero, chunks):
    """Off CUDA, CONVOLUTION_INTEGER sums as float32 convolutions of chunks of input channels
    whose partial sums stay within 2^24 (3x3 INT8 without zero points: 113 channels a chunk;
    with them, 28), the chunks added in int32; a window too large for one channel (17 x 17
    with zero points) keeps the integer products. Extreme values: the sums pass 2^24. Equal to
    CUDA's integer form on the same inputs and to the int64 reference."""
    from dml_jax import fastpath

    rng = np.random.default_rng(c)
    k, size = 2, 17
    # nine in ten at one extreme, the rest at the other: sums far past 2^24 that still depend
    # on every term
    x = np.where(rng.random((1, c, size, size)) < 0.9, 127, -128).astype(np.int8)
    w = np.where(rng.random((k, c, window, window)) < 0.9, -128, 127).astype(np.int8)
    zeros = (t("INT8", 1, 1, 1, 1), t("INT8", 1, k, 1, 1)) if zero else (None, None)
    out = size - window + 3
    desc = CONVI(
        t("INT8", 1, c, size, size), zeros[0], t("INT8", k, c, window, window), zeros[1],
        t("INT32", 1, k, out, out), **_conv_fields(start_padding=(1, 1), end_padding=(1, 1)),
    )  # fmt: skip
    dml.validate(desc)
    if zero:
        inputs = (x, i8([-128], (1, 1, 1, 1)), w, i8([127, -128], (1, k, 1, 1)))
    else:
        inputs = (x, w)
    op = dml.compile_operator(desc)
    # the CPU's form on the CPU: on an H200 XLA gave its float32 convolutions to a cuDNN
    # algorithm whose sums were not exact (the CPU lowering never runs on a GPU)
    with fastpath.target_platform("cpu"), jax.default_device(jax.devices("cpu")[0]):
        names = _primitives(jax.make_jaxpr(op.fn)(*inputs).jaxpr)
        got = _only(jax.jit(op.fn)(*inputs))
    assert names.count("conv_general_dilated") == (chunks or 0)
    with fastpath.target_platform("cuda"):
        integer = _only(jax.jit(op.fn)(*inputs))
    want = _only(reference.reference(desc, *inputs))
    assert np.abs(want).max() > (2**24 if chunks != 1 else 2**23)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(integer, want)


# --- pooling ---------------------------------------------------------------------------------


@st.composite
def pooling_cases(draw):
    rng = draw(S.seeds())
    dims = draw(st.sampled_from([2, 3]))
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    spatial, window, strides, dilations, start, end = draw(windows(dims, 48 // (n * c), True))
    x_type, out_type = (draw(st.sampled_from(["INT8", "UINT8"])) for _ in range(2))
    x = t(x_type, n, c, *spatial)
    geometry = {
        "strides": tuple(strides),
        "window_size": tuple(window),
        "start_padding": tuple(start),
        "end_padding": tuple(end),
        "dilations": tuple(dilations),
        "include_padding": draw(st.booleans()),
    }
    probe = QPOOL(x, t("FLOAT32", 1), None, t("FLOAT32", 1), None, x, **geometry)
    out_sizes = (n, c) + dml.ops.pooling.window_plan(probe).outputs
    fields = {"input_tensor": x}
    values = {"input_tensor": _ints(rng, x_type, x.sizes)}
    for side, owner in (("input", x_type), ("output", out_type)):
        mode = draw(st.sampled_from(["tensor", "axis"]))
        for kind in ("scale", "zero_point"):
            p_rank = draw(st.integers(1, dims + 2))
            sizes = _parameter_sizes(draw, mode, c, dims + 2, 1, p_rank)
            if kind == "zero_point" and draw(st.booleans()):
                continue
            name = f"{side}_{kind}_tensor"
            fields[name] = t("FLOAT32" if kind == "scale" else owner, *sizes)
            values[name] = (
                rng.choice(_FLOAT_SCALES, sizes).astype(np.float32)
                if kind == "scale"
                else _ints(rng, owner, sizes)
            )
    desc = QPOOL(**fields, output_tensor=t(out_type, *out_sizes), **geometry)
    return _case(desc, values)


@given(case=pooling_cases())
def test_quantized_average_pooling_matches_reference(case):
    S.assert_same(S.run(case), reference.reference(case.desc, *case.inputs))


# --- transforms ------------------------------------------------------------------------------

_CASES = st.one_of(
    quantize_linear_cases(),
    quantize_linear_cases(dequantize=True),
    blocked_cases(),
    dynamic_cases(),
    quantized_add_cases(),
    matrix_cases(MMI),
    matrix_cases(QLMM),
    matrix_cases(MMITF),
    conv_cases(CONVI),
    conv_cases(QCONV),
    pooling_cases(),
)


@S.FEW
@given(case=_CASES)
def test_eager_equals_jit_and_vmap_equals_a_loop(case):
    S.check_jit(case, **_division_tolerance(case.desc))
    S.check_vmap(case)


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_quantized_operators_are_not_differentiable(cls):
    desc = catalog.example_desc(registry.lookup(cls.operator_type))
    assert dml.compile_operator(desc).differentiable is False


# ---------------------------------------------------------------------------------------------
# DirectML's broadcasting (buffer mode), 4-bit storage, choices where DirectML is silent


def test_per_axis_parameters_broadcast_through_strides():
    """ELEMENT_WISE_QUANTIZE_LINEAR / DEQUANTIZE_LINEAR take per-tensor and per-axis
    parameters as DirectML does: full-size descs with stride 0 in buffer mode."""
    x = f32([[1.0, 2.0, 3.0], [-1.0, -2.0, -3.0]])
    per_column = T("FLOAT32", [2, 3], strides=[0, 1])
    zero = T("UINT8", [2, 3], strides=[0, 0])
    desc = QL(t("FLOAT32", 2, 3), per_column, zero, t("UINT8", 2, 3))
    op = dml.compile_operator(desc)
    (got,) = op.run_buffers([x.ravel(), f32([1.0, 0.5, 2.0]), u8([100])], [np.zeros(6, np.uint8)])
    np.testing.assert_array_equal(got, u8([101, 104, 102, 99, 96, 98]))
    back = DQL(t("UINT8", 2, 3), per_column, zero, t("FLOAT32", 2, 3))
    (y,) = dml.compile_operator(back).run_buffers(
        [got, f32([1.0, 0.5, 2.0]), u8([100])], [np.zeros(6, np.float32)]
    )
    np.testing.assert_array_equal(y, f32([1, 2, 4, -1, -2, -4]))


def _nibbles_packed(values) -> np.ndarray:
    """DirectML's memory of 4-bit elements, from NOTES.md 1.4: element 0 in the low nibble of
    byte 0, element 1 in its high nibble (two's complement for INT4), an odd count's last high
    nibble 0."""
    v = [int(x) & 0xF for x in np.asarray(values).reshape(-1)] + [0]
    return np.array([v[i] | (v[i + 1] << 4) for i in range(0, len(v) - 1, 2)], np.uint8)


def test_four_bit_tensors_are_packed_in_memory_and_jax_four_bit_in_arrays():
    """NOTES.md 1.3 / 1.4: UINT4 Sizes {5} needs 20 bits, 3 bytes, 4 after rounding; element 0
    is the low nibble. Arrays of them are JAX's int4 / uint4 (ml_dtypes')."""
    assert calc_buffer_tensor_size(dml.DataType.UINT4, (5,), None) == 4
    assert T("INT4", [9]).total_tensor_size_in_bytes == 8  # 36 bits: 5 bytes -> 8
    assert T("INT4", [2, 3], strides=[0, 1]).total_tensor_size_in_bytes == 4
    assert list(pack_4bit([1, 2, 3, 4, 5])) == [0x21, 0x43, 0x05]
    np.testing.assert_array_equal(unpack_4bit([0x21, 0x43, 0x05], 5, "UINT4"), u4([1, 2, 3, 4, 5]))
    np.testing.assert_array_equal(
        unpack_4bit(pack_4bit(i4([-8, 7, -1])), 3, "INT4"), i4([-8, 7, -1])
    )
    assert unpack_4bit([0x21], 2, "INT4").dtype == jax.numpy.int4
    assert T("INT4", [2]).dtype == np.dtype(ml_dtypes.int4) == dml.DataType.INT4.numpy_dtype
    assert T("UINT4", [2]).dtype == jax.numpy.uint4 and dml.DataType.UINT4.bits == 4
    assert (
        T("INT4", [2]).buffer_dtype == np.uint8 and T("INT4", [2], strides=[2]).buffer_elements == 2
    )
    assert dml.DataType.from_dtype(jax.numpy.int4) is dml.DataType.INT4
    assert dml.DataType.from_dtype(np.int8) is dml.DataType.INT8
    desc = _blocked(DQ, t("UINT4", 2), [t("FLOAT32", 1)], t("FLOAT32", 2))
    with pytest.raises(dml.ValidationError, match=r"InputTensor expects dtype uint4"):
        dml.compile_operator(desc)(u8([1, 2]), f32([1.0]))


def test_quantize_to_int4_through_strides_in_logical_and_buffer_mode():
    """The fuzzer's reproducer: QUANTIZE of a FLOAT32 {1,2,2,3,1,2,2} with interleaved strides
    {96,24,36,12,8,2,3}, SCALE only, to INT4 of the same sizes. Logical mode returns jnp.int4;
    buffer mode writes DirectML's packed bytes. Reference: clamp(rint(x / s), -8, 7) from the
    page, and NOTES.md's packing."""
    sizes, strides = (1, 2, 2, 3, 1, 2, 2), (96, 24, 36, 12, 8, 2, 3)
    x_desc = T("FLOAT32", sizes, strides=strides)
    one = t("FLOAT32", *(1,) * 7)
    desc = _blocked(Q, x_desc, [one], T("INT4", sizes), kind="SCALE")
    op = dml.compile_operator(desc)
    buffer = (np.arange(x_desc.addressed_elements, dtype=np.float32) - 60) * np.float32(0.25)
    x = np.lib.stride_tricks.as_strided(buffer, sizes, [4 * s for s in strides]).copy()
    scale = np.float32(1.5)
    want = np.clip(np.rint(x / scale), -8, 7)
    got = op(x, f32([scale], (1,) * 7))
    assert got.dtype == jax.numpy.int4
    np.testing.assert_array_equal(np.asarray(got).astype(np.int64), want.astype(np.int64))
    assert len(np.unique(want)) > 8  # both saturation ends and values between
    out = np.full(T("INT4", sizes).buffer_elements, 0xAB, np.uint8)
    (packed,) = op.run_buffers([buffer, f32([scale])], [out])
    assert packed.dtype == np.uint8 and packed.shape == (24,)
    np.testing.assert_array_equal(packed, _nibbles_packed(want))


def test_four_bit_buffers_are_packed_bytes_read_and_written_through_strides():
    """Buffer mode binds a 4-bit tensor to DirectML's bytes (uint8, two elements a byte, low
    nibble first). A strided INT4 input reads elements 0, 2, 4; a strided UINT4 output writes
    elements 0, 2, 4 and leaves the nibbles between as they were."""
    x = T("INT4", [3], strides=[2])
    desc = _blocked(DQ, x, [t("FLOAT32", 1), t("INT4", 1)], t("FLOAT32", 3))
    op = dml.compile_operator(desc)
    packed = np.uint8([0x51, 0x59, 0x08])  # elements 1, 5, -7, 5, -8 (0x9 is -7, 0x8 is -8)
    (got,) = op.run_buffers([packed, f32([0.5]), u8([0x0F])], [np.zeros(3, np.float32)])
    np.testing.assert_array_equal(got, f32([1.0, -3.0, -3.5]))  # zero point 0xF is -1
    with pytest.raises(dml.ValidationError, match=r"needs uint8 \(packed bytes"):
        op.run_buffers([packed.astype(np.int8), f32([0.5]), u8([0])], [np.zeros(3, np.float32)])
    with pytest.raises(dml.ValidationError, match=r"holds 2 bytes \(4 elements\)"):
        op.run_buffers([packed[:2], f32([0.5]), u8([0])], [np.zeros(3, np.float32)])
    y = T("UINT4", [3], strides=[2])
    desc = _blocked(Q, t("FLOAT32", 3), [t("FLOAT32", 1)], y, kind="SCALE")
    (out,) = dml.compile_operator(desc).run_buffers(
        [f32([3.0, 100.0, -2.0]), f32([1.0])], [np.uint8([0xEE, 0xEE, 0xEE, 0xEE])]
    )
    np.testing.assert_array_equal(out, np.uint8([0xE3, 0xEF, 0xE0, 0xEE]))


def test_dml_jax_run_binds_four_bit_tensors_to_packed_bytes(tmp_path, capsys):
    """``dml-jax run``: a 4-bit tensor views its resource's bytes packed two a byte (a UINT8
    resource holds them); DML_SCALAR_UNION has no 4-bit member and resources are not typed
    4-bit."""
    union = {
        "type": "DML_OPERATOR_FILL_VALUE_CONSTANT",
        "desc": {
            "OutputTensor": {"DataType": "INT8", "Sizes": [2]},
            "ValueDataType": "INT4",
            "Value": 3,
        },
    }
    with pytest.raises(dml.ValidationError, match=r"Value cannot be read in INT4"):
        dml.operator_desc_from_json(union)
    from dml_jax import cli

    q4 = {"DataType": "INT4", "Sizes": [5]}
    f5 = {"DataType": "FLOAT32", "Sizes": [5]}
    one = {"DataType": "FLOAT32", "Sizes": [1]}
    model = {
        "resources": {
            "x": {"initialValuesDataType": "FLOAT32", "initialValues": [-9, -1.5, 0.5, 2.5, 100]},
            "s": {"initialValuesDataType": "FLOAT32", "initialValues": [1]},
            "q": {"initialValuesDataType": "UINT8", "initialValues": [255, 255, 255, 255]},
            "y": {"initialValuesDataType": "FLOAT32", "initialValues": {"valueCount": 5, "value": 0}},
        },
        "dispatchables": {
            "quantize": {
                "type": "DML_OPERATOR_QUANTIZE",
                "desc": {"InputTensor": f5, "QuantizationType": "SCALE",
                         "QuantizationTensors": [one], "OutputTensor": q4},
            },
            "dequantize": {
                "type": "DML_OPERATOR_DEQUANTIZE",
                "desc": {"InputTensor": q4, "QuantizationType": "SCALE",
                         "QuantizationTensors": [one], "OutputTensor": f5},
            },
        },
        "commands": [
            {"type": "dispatch", "dispatchable": "quantize",
             "bindings": {"InputTensor": "x", "QuantizationTensors": ["s"], "OutputTensor": "q"}},
            {"type": "dispatch", "dispatchable": "dequantize",
             "bindings": {"InputTensor": "q", "QuantizationTensors": ["s"], "OutputTensor": "y"}},
            {"type": "print", "resource": "q"},
            {"type": "print", "resource": "y"},
        ],
    }  # fmt: skip
    path = tmp_path / "m.json"
    path.write_text(json.dumps(model))
    capsys.readouterr()
    assert cli.main(["run", str(path)]) == 0
    printed = capsys.readouterr().out
    # rint: -8 (saturated), -2 (half to even), 0, 2, 7 (saturated); nibbles 8, 14, 0, 2, 7, the
    # last byte's high nibble and the fourth byte untouched.
    assert "Resource 'q': 232, 32, 247, 255" in printed
    assert "Resource 'y': -8, -2, 0, 2, 7" in printed
    model["resources"]["q"]["initialValuesDataType"] = "INT4"
    path.write_text(json.dumps(model))
    assert cli.main(["run", str(path)]) == 1
    assert "INT4 resources are not supported" in capsys.readouterr().err


def test_quantize_of_nan_infinity_and_a_zero_scale():
    """docs/semantics.md: NaN quantizes to the zero point, +-inf saturate, a zero scale
    divides by zero (IEEE): +-inf saturate and 0 / 0 gives the zero point."""
    desc = _ql(out="INT8", sizes=(5,))
    x = f32([NAN, INF, -INF, 3.0, 0.0])
    (got,) = S.run(S.Case(desc, (x, f32([1, 1, 1, 0, 0]), i8([5] * 5))))
    np.testing.assert_array_equal(got, i8([5, 127, -128, 127, 5]))


def test_rounding_is_half_to_even_at_every_tie():
    ties = np.arange(-10, 10, dtype=np.float32) + np.float32(0.5)
    desc = _ql(out="INT8", sizes=(20,), zero=False)
    (got,) = S.run(S.Case(desc, (ties, np.ones(20, np.float32))))
    np.testing.assert_array_equal(got, np.rint(ties).astype(np.int8))
    assert set(got.astype(int) % 2) == {0}


def test_zero_point_is_optional_from_feature_level_6_2():
    desc = _ql(zero=False)
    dml.validate(desc, "6_2")
    with pytest.raises(
        dml.ValidationError, match=r"ZeroPointTensor is required below feature level 6_2"
    ):
        dml.validate(desc, "6_1")
    dml.validate(_ql(), "6_1")


def test_integer_to_float_rounds_the_product_before_the_bias():
    """MATRIX_MULTIPLY_INTEGER_TO_FLOAT rounds ``sum * (AScale * BScale)`` to float32 before it
    adds the bias, eagerly and compiled alike (found by the thorough profile: jit contracted the
    product and the bias into one fused multiply-add, one ulp away from the eager result)."""
    desc = MMITF(
        t("INT8", 1, 3), t("FLOAT32", 1), None, t("INT8", 3, 2), t("FLOAT32", 1), None,
        t("FLOAT32", 1, 2), t("FLOAT32", 1, 2),
    )  # fmt: skip
    a = np.array([[89, 35, 2]], np.int8)
    b = np.array([[-59, -50], [-118, -109], [-124, -84]], np.int8)
    scale_a, scale_b = f32([0.037]), f32([3.0])
    bias = f32([[0.85308623, 1.8359724]])
    product = (a.astype(np.int32) @ b.astype(np.int32)).astype(np.float32) * (scale_a * scale_b)
    want = product.astype(np.float32) + bias  # two float32 roundings
    op = dml.compile_operator(desc)
    args = (a, scale_a, b, scale_b, bias)
    for got in (op.fn(*args), jax.jit(op.fn)(*args)):
        np.testing.assert_array_equal(np.asarray(got), want)


def test_quantized_add_rounds_each_product_before_the_sum():
    """AValue and BValue are each rounded to float32 before they are added, as the formula
    says (XLA would fuse a product into the addition): with A = 3 and AScale = float32(1/3),
    AValue rounds to exactly 1, so AValue - 1 is 0 and quantizes to 0; the fused
    ``3 * AScale - 1`` keeps the product's residue (about 3e-8), which an OutputScale of 1.5
    residues would quantize to 1."""
    one = (1,)
    desc = QADD(
        t("UINT8", 1),
        t("FLOAT32", *one),
        None,
        t("UINT8", 1),
        t("FLOAT32", *one),
        None,
        t("FLOAT32", *one),
        None,
        t("UINT8", 1),
    )
    third = np.float32(1) / np.float32(3)
    a_value = np.float32(3) * third  # rounds to 1.0 exactly
    assert a_value == np.float32(1)
    residue = float(np.float64(3) * np.float64(third) - 1)  # what a fused product would keep
    out_scale = np.float32(abs(residue)) * np.float32(1.5)
    inputs = (u8([3]), f32([third]), u8([1]), f32([-1.0]), f32([out_scale]))
    (got,) = S.run(S.Case(desc, inputs))
    np.testing.assert_array_equal(got, u8([0]))
    S.check_jit(S.Case(desc, inputs))


# ---------------------------------------------------------------------------------------------
# Rules: one row per rule


def _mmi(
    a=(1, 1, 2, 3),
    b=(1, 1, 3, 2),
    out=(1, 1, 2, 2),
    az=None,
    bz=None,
    at="UINT8",
    bt="INT8",
    ot="INT32",
    azt=None,
    bzt=None,
):
    return lambda: MMI(
        t(at, *a),
        None if az is None else t(azt or at, *az),
        t(bt, *b),
        None if bz is None else t(bzt or bt, *bz),
        t(ot, *out),
    )


def _qlmm(params=(4, 4, 4, 4, 4, 4), shapes=None, ot="UINT8", ozt="UINT8"):
    shapes = shapes or {}
    default = {n: (1,) * r for n, r in zip(("as", "az", "bs", "bz", "os", "oz"), params)}
    default.update(shapes)

    def make():
        return QLMM(
            t("INT8", 1, 1, 2, 3),
            t("FLOAT32", *default["as"]),
            t("INT8", *default["az"]),
            t("INT8", 1, 1, 3, 2),
            t("FLOAT32", *default["bs"]),
            t("INT8", *default["bz"]),
            t("FLOAT32", *default["os"]),
            t(ozt, *default["oz"]),
            t(ot, 1, 1, 2, 2),
        )

    return make


def _mmitf(at="INT8", bt="INT8", st_="FLOAT32", ot="FLOAT32", bias=None, a_scale=(1, 1)):
    return lambda: MMITF(
        t(at, 2, 3),
        t(st_, *a_scale),
        None,
        t(bt, 3, 4),
        t(st_, 1, 1),
        None,
        None if bias is None else t(ot, *bias),
        t(ot, 2, 4),
    )


def _convi(
    x=(1, 2, 4, 4), w=(2, 2, 3, 3), out=(1, 2, 2, 2), xz=None, wz=None, wzt="INT8", ot="INT32", **kw
):
    dims = len(x) - 2
    fields = _conv_fields(dims, **kw)
    return lambda: CONVI(
        t("UINT8", *x),
        None if xz is None else t("UINT8", *xz),
        t("INT8", *w),
        None if wz is None else t(wzt, *wz),
        t(ot, *out),
        **fields,
    )


def _qconv(
    bias=None,
    bt="INT32",
    fs=(1, 2, 1, 1),
    is_=(1, 1, 1, 1),
    os=(1, 1, 1, 1),
    ozt="INT8",
    out=(1, 2, 2, 2),
):
    return lambda: QCONV(
        t("UINT8", 1, 1, 3, 3),
        t("FLOAT32", *is_),
        None,
        t("INT8", 2, 1, 2, 2),
        t("FLOAT32", *fs),
        None,
        None if bias is None else t(bt, *bias),
        t("FLOAT32", *os),
        t(ozt, *os),
        t("INT8", *out),
        **_conv_fields(),
    )


def _qpool(
    x=(1, 2, 3, 3), out=(1, 2, 2, 2), scale=(1, 2, 1, 1), izt="UINT8", ozt="INT8", xt="UINT8", **kw
):
    dims = len(x) - 2
    fields = _pool_fields(dims, **kw)
    return lambda: QPOOL(
        t(xt, *x),
        t("FLOAT32", *scale),
        t(izt, 1),
        t("FLOAT32", 1),
        t(ozt, 1),
        t("INT8", *out),
        **fields,
    )


QLP, DQLP = (
    "^DML_OPERATOR_ELEMENT_WISE_QUANTIZE_LINEAR: ",
    "^DML_OPERATOR_ELEMENT_WISE_DEQUANTIZE_LINEAR: ",
)
QP, DQP = "^DML_OPERATOR_QUANTIZE: ", "^DML_OPERATOR_DEQUANTIZE: "
DYNP, ADDP = (
    "^DML_OPERATOR_DYNAMIC_QUANTIZE_LINEAR: ",
    "^DML_OPERATOR_ELEMENT_WISE_QUANTIZED_LINEAR_ADD: ",
)
MMIP, MMITFP = (
    "^DML_OPERATOR_MATRIX_MULTIPLY_INTEGER: ",
    "^DML_OPERATOR_MATRIX_MULTIPLY_INTEGER_TO_FLOAT: ",
)
QLMMP, CONVIP = (
    "^DML_OPERATOR_QUANTIZED_LINEAR_MATRIX_MULTIPLY: ",
    "^DML_OPERATOR_CONVOLUTION_INTEGER: ",
)
QCONVP, QPOOLP = (
    "^DML_OPERATOR_QUANTIZED_LINEAR_CONVOLUTION: ",
    "^DML_OPERATOR_QUANTIZED_LINEAR_AVERAGE_POOLING: ",
)


def _add(scale=(1,), zt="INT8", b=(4,), rank_of_b_scale=1):
    return lambda: QADD(
        t("INT8", 4),
        t("FLOAT32", *scale),
        t(zt, 1),
        t("INT8", *b),
        t("FLOAT32", *(1,) * rank_of_b_scale),
        None,
        t("FLOAT32", 1),
        None,
        t("UINT8", 4),
    )


def _dyn(scale=(1, 1), zt="UINT8", st_="FLOAT32", out=(2, 3)):
    return lambda: DYN(t("FLOAT32", 2, 3), t("UINT8", *out), t(st_, *scale), t(zt, 1, 1))


INVALID_ROWS = [
    # ELEMENT_WISE_QUANTIZE_LINEAR
    (
        lambda: QL(t("FLOAT32", 6), t("FLOAT32", 3), t("UINT8", 6), t("UINT8", 6)),
        QLP + r"ScaleTensor\.Sizes must equal InputTensor\.Sizes",
    ),
    (
        lambda: QL(t("FLOAT32", 6), t("FLOAT32", 1, 6), t("UINT8", 6), t("UINT8", 6)),
        QLP + r"ScaleTensor\.DimensionCount must equal InputTensor\.DimensionCount",
    ),
    (
        lambda: _ql("FLOAT16", scale_type="FLOAT32"),
        QLP + r"ScaleTensor\.DataType must equal InputTensor\.DataType \(FLOAT16\), got FLOAT32",
    ),
    (
        lambda: _ql("INT32", scale_type="FLOAT16"),
        QLP + r"ScaleTensor\.DataType must equal FLOAT32 for an INT32 InputTensor",
    ),
    (
        lambda: QL(t("FLOAT32", 6), t("FLOAT32", 6), t("INT8", 6), t("UINT8", 6)),
        QLP + r"ZeroPointTensor\.DataType must equal OutputTensor\.DataType \(UINT8\), got INT8",
    ),
    (lambda: _ql(out="INT32"), QLP + r"ZeroPointTensor with data type INT32 .* no feature level"),
    (lambda: _ql("FLOAT64"), QLP + r"InputTensor with data type FLOAT64"),
    # ELEMENT_WISE_DEQUANTIZE_LINEAR
    (
        lambda: DQL(t("UINT8", 4), t("FLOAT32", 4), t("INT8", 4), t("FLOAT32", 4)),
        DQLP + r"ZeroPointTensor\.DataType must equal InputTensor\.DataType \(UINT8\)",
    ),
    (
        lambda: _dql(out="FLOAT16", scale_type="FLOAT32"),
        DQLP + r"ScaleTensor\.DataType must equal OutputTensor\.DataType \(FLOAT16\)",
    ),
    (
        lambda: DQL(t("UINT8", 4), t("FLOAT32", 4), t("UINT8", 4), t("FLOAT32", 2, 2)),
        DQLP + r"OutputTensor\.DimensionCount must equal InputTensor\.DimensionCount",
    ),
    (lambda: _dql("INT4"), DQLP + r"InputTensor with data type INT4 .* no feature level"),
    # QUANTIZE / DEQUANTIZE
    (
        lambda: _blocked(Q, t("FLOAT32", 4), [t("FLOAT32", 1)], t("INT8", 4), kind="NONE"),
        QP + r"QuantizationType must be SCALE or SCALE_ZERO_POINT, got NONE",
    ),
    (
        lambda: _blocked(
            Q, t("FLOAT32", 4), [t("FLOAT32", 1), t("INT8", 1)], t("INT8", 4), kind="SCALE"
        ),
        QP + r"QuantizationTensors must hold 1 tensor for SCALE \(the scale\), got 2",
    ),
    (
        lambda: _blocked(
            DQ, t("INT8", 4), [t("FLOAT32", 1)], t("FLOAT32", 4), kind="SCALE_ZERO_POINT"
        ),
        DQP + r"QuantizationTensors must hold 2 tensors for SCALE_ZERO_POINT",
    ),
    (
        lambda: _blocked(
            Q, t("FLOAT32", 4), [t("FLOAT32", 1)], t("INT8", 4), quantization_tensor_count=2
        ),
        QP + r"QuantizationTensorCount must equal the length of QuantizationTensors \(1\), got 2",
    ),
    (
        lambda: _blocked(Q, t("FLOAT32", 4), [t("FLOAT32", 1, 1)], t("INT8", 4)),
        QP + r"QuantizationTensors\[0\]\.DimensionCount must equal InputTensor\.DimensionCount",
    ),
    (
        lambda: _blocked(Q, t("FLOAT32", 4), [t("FLOAT16", 1)], t("INT8", 4)),
        QP + r"QuantizationTensors\[0\]\.DataType must equal InputTensor\.DataType \(FLOAT32\)",
    ),
    (
        lambda: _blocked(DQ, t("INT8", 4), [t("FLOAT16", 1)], t("FLOAT32", 4)),
        DQP + r"QuantizationTensors\[0\]\.DataType must equal OutputTensor\.DataType \(FLOAT32\)",
    ),
    (
        lambda: _blocked(Q, t("FLOAT32", 4), [t("FLOAT32", 2), t("UINT8", 2)], t("INT8", 4)),
        QP + r"QuantizationTensors\[1\]\.DataType must equal OutputTensor\.DataType \(INT8\)",
    ),
    (
        lambda: _blocked(DQ, t("INT4", 4), [t("FLOAT32", 2), t("INT4", 4)], t("FLOAT32", 4)),
        DQP + r"QuantizationTensors\[1\]\.Sizes must equal QuantizationTensors\[0\]\.Sizes",
    ),
    (
        lambda: _blocked(Q, t("FLOAT32", 2, 6), [t("FLOAT32", 2, 4)], t("UINT4", 2, 6)),
        QP
        + r"QuantizationTensors\[0\]\.Sizes\[1\] \(4\) must divide InputTensor\.Sizes\[1\] \(6\)",
    ),
    (
        lambda: _blocked(Q, t("FLOAT32", 4), [t("FLOAT32", 1)], t("INT8", 5)),
        QP + r"OutputTensor\.Sizes\[0\] must equal 4, got 5",
    ),
    (
        lambda: _blocked(DQ, t("INT16", 4), [t("FLOAT32", 1)], t("FLOAT32", 4)),
        DQP + r"InputTensor with data type INT16 .* no feature level",
    ),
    # DYNAMIC_QUANTIZE_LINEAR
    (_dyn(scale=(1,)), DYNP + r"OutputScaleTensor\.DimensionCount must equal InputTensor"),
    (_dyn(zt="INT8"), DYNP + r"OutputZeroPointTensor\.DataType must equal OutputTensor\.DataType"),
    (_dyn(scale=(1, 3)), DYNP + r"OutputScaleTensor\.Sizes\[1\] must equal 1, got 3"),
    (_dyn(out=(3, 2)), DYNP + r"OutputTensor\.Sizes\[0\] must equal 2, got 3"),
    (_dyn(st_="FLOAT16"), DYNP + r"OutputScaleTensor\.DataType must equal FLOAT32, got FLOAT16"),
    # ELEMENT_WISE_QUANTIZED_LINEAR_ADD
    (
        _add(rank_of_b_scale=2),
        ADDP + r"BScaleTensor\.DimensionCount must equal ATensor\.DimensionCount",
    ),
    (_add(b=(2,)), ADDP + r"BTensor\.Sizes must equal ATensor\.Sizes \(\{4\}\), got \{2\}"),
    (
        _add(scale=(2,)),
        ADDP + r"AScaleTensor\.Sizes must hold one element \(every size 1\), got \{2\}",
    ),
    (_add(zt="UINT8"), ADDP + r"AZeroPointTensor\.DataType must equal ATensor\.DataType \(INT8\)"),
    (
        lambda: QADD(
            t("INT8", 4),
            t("INT8", 1),
            None,
            t("INT8", 4),
            t("FLOAT32", 1),
            None,
            t("FLOAT32", 1),
            None,
            t("INT8", 4),
        ),
        ADDP + r"AScaleTensor with data type INT8",
    ),
    # MATRIX_MULTIPLY_INTEGER
    (_mmi(a=(3,), b=(3,), out=(1,)), MMIP + r"ATensor\.DimensionCount must be at least 2, got 1"),
    (_mmi(b=(1, 3, 2)), MMIP + r"BTensor\.DimensionCount must equal ATensor\.DimensionCount"),
    (
        _mmi(b=(1, 2, 3, 2), out=(1, 2, 2, 2)),
        MMIP + r"BTensor\.Sizes must equal ATensor\.Sizes \(leading",
    ),
    (_mmi(b=(1, 1, 4, 2)), MMIP + r"BTensor\.Sizes must have K = 3 .*, got 4"),
    (
        _mmi(az=(1, 1, 1, 2)),
        MMIP
        + r"AZeroPointTensor\.Sizes must hold one value \(every size 1\) or 2 values "
        + r"\(per row of A: \{1, 1, 2, 1\}",
    ),
    (
        _mmi(az=(1, 1, 2, 1), azt="INT8"),
        MMIP + r"AZeroPointTensor\.DataType must equal ATensor\.DataType \(UINT8\)",
    ),
    (
        _mmi(bz=(3,)),
        MMIP + r"BZeroPointTensor\.Sizes must hold one value .* or 2 values \(per column of B",
    ),
    (_mmi(bz=(1, 1, 1, 1, 1)), MMIP + r"BZeroPointTensor\.DimensionCount must be at most 4"),
    (_mmi(out=(1, 1, 2, 3)), MMIP + r"OutputTensor\.Sizes\[3\] must equal 2, got 3"),
    (_mmi(ot="INT8"), MMIP + r"OutputTensor\.DataType must equal INT32, got INT8"),
    (_mmi(at="INT16"), MMIP + r"ATensor with data type INT16 .* no feature level"),
    # MATRIX_MULTIPLY_INTEGER_TO_FLOAT
    (_mmitf(bt="UINT8"), MMITFP + r"BTensor\.DataType must equal ATensor\.DataType \(INT8\)"),
    (
        _mmitf(st_="FLOAT16"),
        MMITFP + r"AScaleTensor\.DataType must equal OutputTensor\.DataType \(FLOAT32\)",
    ),
    (
        _mmitf(a_scale=(1,)),
        MMITFP + r"BScaleTensor\.DimensionCount must equal AScaleTensor\.DimensionCount",
    ),
    (_mmitf(bias=(2, 1)), MMITFP + r"BiasTensor\.Sizes must equal OutputTensor\.Sizes"),
    (
        _mmitf(bias=(1, 2, 4)),
        MMITFP + r"BiasTensor\.DimensionCount must equal ATensor\.DimensionCount",
    ),
    (_mmitf(ot="INT32", st_="INT32"), MMITFP + r"AScaleTensor with data type INT32"),
    # QUANTIZED_LINEAR_MATRIX_MULTIPLY
    (
        _qlmm(params=(4, 4, 4, 4, 4, 2)),
        QLMMP + r"OutputZeroPointTensor\.DimensionCount must equal AScaleTensor",
    ),
    (
        _qlmm(shapes={"os": (1, 1, 1, 2)}),
        QLMMP + r"OutputScaleTensor\.Sizes must hold one value .* \(per row of the output",
    ),
    (
        _qlmm(shapes={"bs": (1, 1, 2, 1)}),
        QLMMP + r"BScaleTensor\.Sizes must hold one value .* \(per column of B",
    ),
    (
        _qlmm(ozt="INT8"),
        QLMMP + r"OutputZeroPointTensor\.DataType must equal OutputTensor\.DataType \(UINT8\)",
    ),
    (_qlmm(ot="INT32", ozt="INT32"), QLMMP + r"OutputZeroPointTensor with data type INT32"),
    # CONVOLUTION_INTEGER
    (
        _convi(x=(1, 2, 4, 4, 4), w=(2, 2, 3, 3, 3), out=(1, 2, 2, 2, 2)),
        CONVIP + r"DimensionCount must be 1 or 2, got 3",
    ),
    (
        _convi(dimension_count=2, strides=(1,)),
        CONVIP + r"DimensionCount must equal the length of Strides \(1\), got 2",
    ),
    (
        _convi(w=(2, 2, 3)),
        CONVIP + r"FilterTensor\.DimensionCount must equal InputTensor\.DimensionCount",
    ),
    (
        _convi(xz=(1, 1, 1, 1), wz=(2,)),
        CONVIP + r"FilterZeroPointTensor\.DimensionCount must equal InputZeroPointTensor",
    ),
    (
        _convi(xz=(1, 2, 1, 1)),
        CONVIP + r"InputZeroPointTensor\.Sizes must hold one value \(every size 1; per tensor\)",
    ),
    (
        _convi(wz=(1, 3, 1, 1)),
        CONVIP
        + r"FilterZeroPointTensor\.Sizes must hold one value .* or 2 values \(per output channel",
    ),
    (
        _convi(wz=(2,), wzt="UINT8"),
        CONVIP + r"FilterZeroPointTensor\.DataType must equal FilterTensor\.DataType \(INT8\)",
    ),
    (_convi(strides=(0, 1)), CONVIP + r"Strides\[0\] must be >= 1, got 0"),
    (
        _convi(group_count=2, w=(2, 2, 3, 3)),
        CONVIP + r"FilterTensor\.Sizes\[1\] times GroupCount must equal",
    ),
    (_convi(x=(1, 2, 2, 2)), CONVIP + r"OutputTensor\.Sizes would be \[1, 2, 0, 0\]"),
    (_convi(out=(1, 2, 3, 3)), CONVIP + r"OutputTensor\.Sizes\[2\] must equal 2, got 3"),
    (_convi(ot="INT8"), CONVIP + r"OutputTensor\.DataType must equal INT32, got INT8"),
    # QUANTIZED_LINEAR_CONVOLUTION
    (_qconv(bias=(1, 3, 1, 1)), QCONVP + r"BiasTensor\.Sizes must equal \{1, K, 1, \.\.\.\}"),
    (_qconv(bias=(1, 2, 1, 1), bt="INT8"), QCONVP + r"BiasTensor with data type INT8"),
    (
        _qconv(fs=(1, 3, 1, 1)),
        QCONVP + r"FilterScaleTensor\.Sizes must hold one value .* or 2 values",
    ),
    (
        _qconv(is_=(1, 2, 1, 1)),
        QCONVP + r"InputScaleTensor\.Sizes must hold one value \(every size 1; per tensor\)",
    ),
    (_qconv(os=(2, 1, 1, 1)), QCONVP + r"OutputScaleTensor\.Sizes must hold one value"),
    (
        _qconv(ozt="UINT8"),
        QCONVP + r"OutputZeroPointTensor\.DataType must equal OutputTensor\.DataType \(INT8\)",
    ),
    (_qconv(out=(1, 2, 2, 1)), QCONVP + r"OutputTensor\.Sizes\[3\] must equal 2, got 1"),
    # QUANTIZED_LINEAR_AVERAGE_POOLING
    (
        _qpool(x=(1, 2, 3), out=(1, 2, 2), scale=(1, 2, 1), window=(2,)),
        QPOOLP + r"DimensionCount must be 2 or 3 \(spatial dimensions\), got 1",
    ),
    (
        _qpool(window=(4, 2)),
        QPOOLP
        + r"InputTensor\.Sizes\[2\] plus StartPadding\[0\] and EndPadding\[0\] \(3\) "
        + r"must hold the window",
    ),
    (_qpool(out=(1, 2, 2, 3)), QPOOLP + r"OutputTensor\.Sizes\[3\] must equal 2, got 3"),
    (
        _qpool(out=(1, 2, 4)),
        QPOOLP + r"OutputTensor\.DimensionCount must equal InputTensor\.DimensionCount",
    ),
    (
        _qpool(scale=(1, 3, 1, 1)),
        QPOOLP + r"InputScaleTensor\.Sizes must hold one value .* or 2 values \(per channel",
    ),
    (
        _qpool(izt="INT8"),
        QPOOLP + r"InputZeroPointTensor\.DataType must equal InputTensor\.DataType \(UINT8\)",
    ),
    (
        _qpool(ozt="UINT8"),
        QPOOLP + r"OutputZeroPointTensor\.DataType must equal OutputTensor\.DataType \(INT8\)",
    ),
    (_qpool(xt="INT16", izt="INT16"), QPOOLP + r"InputTensor with data type INT16"),
]


@pytest.mark.parametrize("factory, pattern", INVALID_ROWS)
def test_invalid_descriptions_are_rejected(factory, pattern):
    with pytest.raises(dml.ValidationError, match=pattern):
        dml.validate(factory())


@pytest.mark.parametrize(
    "factory, level, lowest",
    [
        (lambda: _ql(out="INT8", sizes=(1, 1, 1, 6)), "2_0", "2_1"),
        (lambda: _ql(sizes=(6,)), "2_1", "3_0"),  # 1-D: 4-D only before 3_0
        (lambda: _ql("FLOAT16", sizes=(1, 1, 1, 6)), "5_2", "6_0"),
        (lambda: _dql("INT32", sizes=(1, 1, 2, 2)), "2_0", "2_1"),
        (lambda: _dql(out="FLOAT16", sizes=(1, 1, 2, 2)), "5_2", "6_0"),
        (_mmi(a=(2, 3), b=(3, 2), out=(2, 2)), "3_1", "4_0"),
        (_mmi(bz=(2,)), "5_1", "5_2"),
        (_qlmm(params=(2,) * 6), "3_1", "4_0"),
        (_convi(x=(1, 2, 4), w=(2, 2, 3), out=(1, 2, 2), dimension_count=1), "3_1", "4_0"),
        (_qconv(fs=(2,)), "5_1", "5_2"),
    ],
)
def test_support_table_levels(factory, level, lowest):
    with pytest.raises(
        dml.ValidationError, match=f"the lowest feature level that supports it is {lowest}"
    ):
        dml.validate(factory(), feature_level=level)
    dml.validate(factory(), feature_level=lowest)


@pytest.mark.parametrize(
    "cls, lowest",
    [
        (QL, "1_0"),
        (DQL, "1_0"),
        (QADD, "4_0"),
        (DYN, "4_0"),
        (MMI, "2_1"),
        (QLMM, "2_1"),
        (CONVI, "2_1"),
        (QCONV, "2_1"),
        (MMITF, "6_2"),
        (QPOOL, "6_2"),
        (Q, "6_3"),
        (DQ, "6_3"),
    ],
)
def test_introduction_levels(cls, lowest):
    spec = registry.lookup(cls.operator_type)
    assert min(r[0].level for r in spec.tables.values()).label == lowest


def test_quantization_type_parses_every_spelling():
    for spelling in ("SCALE", "DML_QUANTIZATION_TYPE_SCALE", dml.QuantizationType.SCALE):
        desc = _blocked(Q, t("FLOAT32", 4), [t("FLOAT32", 1)], t("INT8", 4), kind=spelling)
        assert desc.quantization_type is dml.QuantizationType.SCALE
    with pytest.raises(dml.ValidationError, match=r"QuantizationType must be a QuantizationType"):
        _blocked(Q, t("FLOAT32", 4), [t("FLOAT32", 1)], t("INT8", 4), kind="scale")


def test_divisions_by_a_broadcast_scale_are_correctly_rounded():
    """XLA turns a division by a broadcast value into a multiplication by its reciprocal, which
    misses the correctly rounded quotient here (x / s is exactly 1.5, 3.5 and -6.5, ties to
    even; x * (1 / s) lands just below or above them)."""
    s = np.float32(1.914515495300293)
    x = f32([2.8717732429504395, 6.700804233551025, -12.444351196289062])
    want = np.rint(x / s).astype(np.int8)
    assert not np.array_equal(want, np.rint(x * (np.float32(1) / s)).astype(np.int8))
    desc = _blocked(Q, t("FLOAT32", 3), [t("FLOAT32", 1)], t("INT8", 3))
    S.assert_same(S.run(S.Case(desc, (x, f32([s])))), (want,))
    S.check_jit(S.Case(desc, (x, f32([s]))))


def test_quotient_steps_are_numpys_rounded_quotients_on_every_platform():
    """The quantizers' ``round(x / scale)`` (``round_quotient``) is NumPy's rounded float32
    quotient under 2048 in magnitude, beside halfway points and ties included, in the program's
    own form (the CPU's exact division or elsewhere one exact residual) and in the residual form
    on this backend; beyond 2048 a value past 2046 on the same side (callers saturate there). A
    wrong bound, a wrong side or ties not to even fail it."""
    import jax

    from dml_jax.ops._quant import STEPS_EXACT, _nearest_steps, round_quotient

    rng = np.random.default_rng(11)
    n = 200_000
    spread = [1e-30, 1e-3, 1.0, 1e3, 1e30]
    x = (rng.standard_normal(n) * rng.choice(spread, n)).astype(np.float32)
    y = (rng.standard_normal(n) * rng.choice(spread, n)).astype(np.float32)
    # x / y beside k + 0.5 (an ulp or two either side, and on it), every binade of scales
    m = 20_000
    ys = np.exp(rng.uniform(-40, 40, m)).astype(np.float32) * rng.choice([-1, 1], m)
    k = rng.integers(-2100, 2100, m).astype(np.float32) + np.float32(0.5)
    on = (k * ys).astype(np.float32)
    up, down = np.nextafter(on, np.float32(np.inf)), np.nextafter(on, np.float32(-np.inf))
    near = [on, up, down, np.nextafter(up, np.float32(np.inf))]
    # exact ties: short scales whose halfway products are float32 values
    short = rng.integers(1, 4096, m).astype(np.float32) * np.float32(2.0**-10)
    specials = np.float32([0, -0.0, np.inf, -np.inf, np.nan, 3.4e38, 1.2e-38, 0.5, 2047.5, 1e10])
    sx, sy = (a.ravel() for a in np.meshgrid(specials, specials))
    x = np.concatenate([x, *near, (k * short).astype(np.float32), sx])
    y = np.concatenate([y, ys, ys, ys, ys, short, sy]).astype(np.float32)
    with np.errstate(all="ignore"):
        want = np.round(x / y)
    small = ~(np.abs(want) >= STEPS_EXACT)  # NaN included
    for f in (jax.jit(round_quotient), jax.jit(_nearest_steps)):
        got = np.asarray(f(x, y))
        np.testing.assert_array_equal(got[small], want[small])
        big = got[~small]
        assert np.all((np.sign(big) == np.sign(want[~small])) & (np.abs(big) >= STEPS_EXACT - 2))


def test_quantize_division_is_correctly_rounded_on_every_platform():
    """The quantizers' ``x / scale`` is the float32 nearest the exact quotient (NumPy's float32
    division) on every backend, including beside halfway points, where an ulp moves the
    rounded value (XLA's GPU division alone is not always correctly rounded)."""
    import jax

    from dml_jax.ops._quant import _nearest_quotient, divide

    rng = np.random.default_rng(7)
    n = 200_000
    x = (rng.standard_normal(n) * rng.choice([1e-3, 1.0, 1e3], n)).astype(np.float32)
    y = (rng.standard_normal(n) * rng.choice([1e-3, 1.0, 1e3], n)).astype(np.float32)
    # Quotients just beside k + 0.5: the case of DynamicQuantizeLinear's node test.
    scale = np.float32(5) / np.float32(255)
    near = (np.arange(-2000, 2000, dtype=np.float32) + np.float32(0.5)) * scale
    x = np.concatenate([x, near, np.float32([-2.5, 0, np.inf, np.nan])])
    y = np.concatenate([y, np.full(near.shape, scale), np.float32([scale, 3, 2, 1])])
    with np.errstate(all="ignore"):
        want = x / y
    for f in (jax.jit(divide), jax.jit(_nearest_quotient)):
        got = np.asarray(f(x, y))
        np.testing.assert_array_equal(got, want)
