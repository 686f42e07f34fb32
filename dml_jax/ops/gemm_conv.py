"""DML_OPERATOR_GEMM and DML_OPERATOR_CONVOLUTION.

Compute-bound: the gemm_conv suite (``dml-jax bench --suite gemm_conv``) times them in TFLOP/s
against jax and PyTorch (the operator suite measures bytes, which says nothing here).

Precision (docs/semantics.md, "GEMM and convolution"; ``dml_jax.precision``): FLOAT32 products
are computed in float32 (``lax.Precision.HIGHEST``) unless the compiled operator or graph allows
half precision; FLOAT16 products accumulate in float32 and round to FLOAT16; Alpha, Beta, C and
the bias are then applied in float32, with one more rounding (a fused activation likewise).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..enums import ConvolutionDirection, ConvolutionMode, MatrixTransform
from ..enums import FeatureLevel as L
from ..errors import Validator
from ..fastpath import platform_choice
from ..fields import (
    FLOAT,
    OPERATOR_DESC,
    UINT,
    UINT_ARRAY,
    OperatorDesc,
    attribute,
    count_of,
    enum_type,
    input_field,
    output_field,
)
from ..fused import apply_fused, validate_fused
from ..precision import matmul_precision
from ..registry import Example, register
from ..support import DIMS4, DIMS4_5, F2, rows
from ..tensor import TensorDesc
from ._common import wide
from .conv_forms import convolve, product_type

_DIMS2_4 = (2, 3, 4)


# ---------------------------------------------------------------------------------------------
# GEMM


@dataclass(frozen=True)
class GemmOperatorDesc(OperatorDesc):
    """DML_GEMM_OPERATOR_DESC: ``FusedActivation(Alpha * TransA(A) x TransB(B) + Beta * C)``
    over the last two dimensions, one product per leading index (FL 1_0).

    Fields:
        a_tensor: {..., M, K} ({..., K, M} with TransA TRANSPOSE).
        b_tensor: {..., K, N} ({..., N, K} with TransB TRANSPOSE).
        c_tensor: optional, the output's sizes (broadcast through strides in buffer mode).
        output_tensor: {..., M, N}; every tensor has the same rank, leading sizes and data type.
        trans_a, trans_b: ``MatrixTransform`` NONE or TRANSPOSE.
        alpha, beta: DML FLOATs.
        fused_activation: optional activation DirectML can fuse.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_GEMM"
    a_tensor: TensorDesc = input_field()
    b_tensor: TensorDesc = input_field()
    c_tensor: TensorDesc | None = input_field(optional=True)
    output_tensor: TensorDesc = output_field()
    trans_a: MatrixTransform = attribute(enum_type(MatrixTransform), default=MatrixTransform.NONE)
    trans_b: MatrixTransform = attribute(enum_type(MatrixTransform), default=MatrixTransform.NONE)
    alpha: float = attribute(FLOAT, default=1.0)
    beta: float = attribute(FLOAT, default=1.0)
    fused_activation: OperatorDesc | None = attribute(OPERATOR_DESC, default=None)


def _matrix(sizes: tuple[int, ...], transposed: bool) -> tuple[int, int]:
    rows_, cols = sizes[-2], sizes[-1]
    return (cols, rows_) if transposed else (rows_, cols)


def _gemm_mnk(d: GemmOperatorDesc) -> tuple[int, int, int, int]:
    """(M, K of A, K of B, N)."""
    m, ka = _matrix(d.a_tensor.sizes, d.trans_a is MatrixTransform.TRANSPOSE)
    kb, n = _matrix(d.b_tensor.sizes, d.trans_b is MatrixTransform.TRANSPOSE)
    return m, ka, kb, n


def infer_gemm(d: GemmOperatorDesc) -> tuple[TensorDesc, ...]:
    m, _, _, n = _gemm_mnk(d)
    return (d.a_tensor.like(sizes=d.a_tensor.sizes[:-2] + (m, n)),)


def validate_gemm(d: GemmOperatorDesc, v: Validator) -> None:
    a, b = d.a_tensor, d.b_tensor
    tensors = [("BTensor", b), ("OutputTensor", d.output_tensor)]
    if d.c_tensor is not None:
        tensors.insert(1, ("CTensor", d.c_tensor))
    v.same("data_type", tensors, ("ATensor", a))
    v.same("rank", tensors, ("ATensor", a))
    v.check("ATensor.DimensionCount", a.rank >= 2, f"must be at least 2, got {a.rank}")
    v.equal("BTensor.Sizes", b.sizes[:-2], a.sizes[:-2], "ATensor.Sizes (leading dimensions)")
    m, ka, kb, n = _gemm_mnk(d)
    v.check(
        "BTensor.Sizes",
        ka == kb,
        f"must have K = {ka} (ATensor's inner dimension with TransA {d.trans_a.name}), got "
        f"{kb} with TransB {d.trans_b.name}",
    )
    if d.c_tensor is not None:
        want = a.sizes[:-2] + (m, n)
        v.check(
            "CTensor.Sizes",
            d.c_tensor.sizes == want,
            f"must equal the output's sizes {list(want)} (broadcast through Strides), got "
            f"{list(d.c_tensor.sizes)}",
        )
    # DirectML's feature level history: GEMM fuses SOFTMAX and SOFTMAX1 from 6_1.
    validate_fused(v, d.fused_activation, d.output_tensor, also=_GEMM_SOFTMAX, also_from=L.FL_6_1)


_GEMM_SOFTMAX = ("DML_OPERATOR_ACTIVATION_SOFTMAX", "DML_OPERATOR_ACTIVATION_SOFTMAX1")


def _gemm_product(a, b, trans_a: bool, trans_b: bool):
    """A x B on the float type of the products (``product_type``), batched over the leading
    axes. TransA chooses A's contracted axis (no transpose written). B is written {..., N, K}
    (contracted on its minor axis) for a product of one row, {..., K, N} otherwise: where B is
    a constant, XLA's CPU compiler folds that form into the constant's layout (two CPU cores,
    float32, 9216 -> 4096: one row took 4.0-5.4 ms on {N, K} rows against 7.8-8.9 on {K, N}
    ones, 2 to 16 rows 10-15 ms against 18-24; 1024 -> 4096 at 128 rows 6.5 against 11.9).
    Elsewhere XLA folds the transpose into the product. A B of one row's product that is not a
    constant (a session's weights passed as arguments) is contracted as it comes: there XLA's
    CPU compiler writes the transpose out at every call (float32 1024 x 8192 on two cores:
    25.7 ms a product against 0.74 as it comes; a 221 MB decoder step 28.5 ms a token against
    onnxruntime's 2.6)."""
    rows = a.shape[-1] if trans_a else a.shape[-2]
    if rows == 1:  # B {N, K} where it is a constant (a Tracer is an argument)
        swap = not trans_b and not isinstance(b, jax.core.Tracer)
    else:  # B {K, N}
        swap = trans_b
    if swap:
        b = jnp.swapaxes(b, -1, -2)
    batch = tuple(range(a.ndim - 2))
    ka = a.ndim - (2 if trans_a else 1)
    kb = b.ndim - (1 if trans_b != swap else 2)  # B's K: its minor axis, or the one before
    return lax.dot_general(
        a,
        b,
        (((ka,), (kb,)), (batch, batch)),
        precision=matmul_precision(),
        preferred_element_type=product_type(a),
    )


# How ``_one_row_as_two`` makes A's second row: "repeat" (A broadcast to two equal rows, which
# XLA fuses into the product's operand), or "zeros" (a concatenation: a pad kernel of its own
# before each product of a decode step). The 1B-class LLaMA's float16 decode at batch 1 on an
# H200 (``decode_step_gpu.py --one-row-form "" repeat``, one process each, 2026-11-28): zeros
# 923 tokens/s (921-927) with 335 kernels a token, repeat 943 (940-946) with 319.
ONE_ROW_FORM = "repeat"


def _one_row_as_two(a, b, trans_a: bool, trans_b: bool):
    """A product of one row computed on two (A's second row per ``ONE_ROW_FORM``), and the
    first row kept: on CUDA, XLA writes a product of one row as a multiply and a reduction,
    which read the weights at 0.4-2.6 TB/s on an H200 where the same product on two rows ran at 0.9-3.5
    (float16, K x N of 2048 x 2048 to 8192 x 2048; benchmarks/experiments/gemv_forms_gpu.py);
    a decode step of a 1B-parameter LLaMA at batch 1 took 2.0 ms, at batch 2 1.2, and 1.6 ms
    at batch 1 with this form. Batched products of one row (attention's, a row a head) take it
    too; whether they gain was not measured apart (at batch 8, where the projections have 8
    rows and only attention's products have one, the 1B model's decode measured 4,929 tokens/s
    with it against 5,658 in a run before it: within two runs' spread or not, unknown)."""
    axis = a.ndim - 1 if trans_a else a.ndim - 2
    if ONE_ROW_FORM == "repeat":
        shape = list(a.shape)
        shape[axis] = 2
        two = jnp.broadcast_to(a, tuple(shape))
    else:
        two = jnp.concatenate([a, jnp.zeros_like(a)], axis=axis)
    y = _gemm_product(two, b, trans_a, trans_b)
    return lax.slice_in_dim(y, 0, 1, axis=y.ndim - 2)


def lower_gemm(d: GemmOperatorDesc, a, b, *c, product=None):
    """``product``: ``product(a) -> TransA(A) x TransB(B)`` in A's type, where a graph epilogue
    computes the product itself from what B was made of (``kernels/int4_gemm.py``: B a
    DEQUANTIZE's output, ``b`` None); Alpha, C and the fused activation follow as here."""
    trans_a = d.trans_a is MatrixTransform.TRANSPOSE
    trans_b = d.trans_b is MatrixTransform.TRANSPOSE
    rows = a.shape[-1] if trans_a else a.shape[-2]
    if product is not None:
        y = product(a)
    elif rows == 1:
        y = platform_choice(
            a,
            b,
            cuda=lambda a, b: _one_row_as_two(a, b, trans_a, trans_b),
            default=lambda a, b: _gemm_product(a, b, trans_a, trans_b),
        )
    else:
        y = _gemm_product(a, b, trans_a, trans_b)
    alpha, beta = float(np.float32(d.alpha)), float(np.float32(d.beta))
    if alpha != 1.0 or c:
        y = wide(y)
    if alpha != 1.0:
        y = jnp.asarray(alpha, y.dtype) * y
    if c:
        y = y + jnp.asarray(beta, y.dtype) * wide(c[0])
    return (apply_fused(d.fused_activation, y, d.output_tensor).astype(d.output_tensor.dtype),)


register(
    GemmOperatorDesc,
    infer=infer_gemm,
    validate=validate_gemm,
    lower=lower_gemm,
    support=rows((L.FL_1_0, DIMS4, F2), (L.FL_4_0, _DIMS2_4, F2)),
    example=Example(
        {
            "type": "DML_OPERATOR_GEMM",
            "desc": {
                "ATensor": {"DataType": "FLOAT32", "Sizes": [1, 1, 2, 3]},
                "BTensor": {"DataType": "FLOAT32", "Sizes": [1, 1, 3, 2]},
                "CTensor": {"DataType": "FLOAT32", "Sizes": [1, 1, 2, 2]},
                "OutputTensor": {"DataType": "FLOAT32", "Sizes": [1, 1, 2, 2]},
                "TransA": "DML_MATRIX_TRANSFORM_NONE",
                "TransB": "DML_MATRIX_TRANSFORM_NONE",
                "Alpha": 2.0,
                "Beta": 0.5,
            },
        },
        {
            "ATensor": [1, 2, 3, 4, 5, 6],
            "BTensor": [1, 0, 0, 1, 1, 1],
            "CTensor": [10, 20, 30, 40],
        },
        "2 * A x B + 0.5 * C",
    ),
)


# ---------------------------------------------------------------------------------------------
# CONVOLUTION


@dataclass(frozen=True)
class ConvolutionOperatorDesc(OperatorDesc):
    """DML_CONVOLUTION_OPERATOR_DESC: convolution or cross-correlation, forward or transposed
    (BACKWARD), over 1 to 3 spatial dimensions of NCHW / NCDHW tensors (FL 1_0).

    Fields:
        input_tensor: {N, C, spatial...}.
        filter_tensor: FORWARD {K, C / GroupCount, kernel...}; BACKWARD {C, K / GroupCount,
            kernel...} (K the output channels).
        bias_tensor: optional {1, K, 1...}.
        output_tensor: {N, K, output spatial...}; the sizes of the output-size rule.
        mode: ``ConvolutionMode`` (CONVOLUTION flips the filter, CROSS_CORRELATION does not).
        direction: ``ConvolutionDirection`` FORWARD or BACKWARD (transposed convolution).
        strides, dilations, start_padding, end_padding, output_padding: one value per spatial
            dimension (strides and dilations >= 1; output padding for BACKWARD).
        group_count: input and output channels split into this many groups (>= 1).
        fused_activation: optional activation DirectML can fuse.
        dimension_count: optional; the spatial dimension count (1, 2 or 3), the length of the
            five arrays and the tensors' rank minus 2.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_CONVOLUTION"
    input_tensor: TensorDesc = input_field()
    filter_tensor: TensorDesc = input_field()
    bias_tensor: TensorDesc | None = input_field(optional=True)
    output_tensor: TensorDesc = output_field()
    mode: ConvolutionMode = attribute(
        enum_type(ConvolutionMode), default=ConvolutionMode.CROSS_CORRELATION
    )
    direction: ConvolutionDirection = attribute(
        enum_type(ConvolutionDirection), default=ConvolutionDirection.FORWARD
    )
    strides: tuple[int, ...] = attribute(UINT_ARRAY)
    dilations: tuple[int, ...] = attribute(UINT_ARRAY)
    start_padding: tuple[int, ...] = attribute(UINT_ARRAY)
    end_padding: tuple[int, ...] = attribute(UINT_ARRAY)
    output_padding: tuple[int, ...] = attribute(UINT_ARRAY)
    group_count: int = attribute(UINT, default=1)
    fused_activation: OperatorDesc | None = attribute(OPERATOR_DESC, default=None)
    dimension_count: int | None = count_of("strides")


def _backward(d: Any) -> bool:
    return getattr(d, "direction", None) is ConvolutionDirection.BACKWARD


def conv_output_sizes(d: Any) -> tuple[int, ...]:
    """The output's sizes by DirectML's output-size rule (may be < 1 for invalid descs).

    ``d`` is a CONVOLUTION desc or one of the integer / quantized convolutions (FORWARD, without
    Direction or OutputPadding)."""
    x, w = d.input_tensor.sizes, d.filter_tensor.sizes
    spatial = []
    for i in range(len(d.strides)):
        size, k = x[2 + i], w[2 + i]
        extent = (k - 1) * d.dilations[i] + 1
        pads = d.start_padding[i] + d.end_padding[i]
        if _backward(d):
            spatial.append((size - 1) * d.strides[i] + extent - pads + d.output_padding[i])
        else:
            spatial.append((size + pads - extent) // d.strides[i] + 1)
    channels = w[1] * d.group_count if _backward(d) else w[0]
    return (x[0], channels, *spatial)


def infer_conv(d: ConvolutionOperatorDesc) -> tuple[TensorDesc, ...]:
    return (d.input_tensor.like(sizes=conv_output_sizes(d)),)


def validate_conv(d: ConvolutionOperatorDesc, v: Validator) -> None:
    x, w = d.input_tensor, d.filter_tensor
    check_conv_dimension_count(d, v, (1, 2, 3))
    tensors = [("FilterTensor", w), ("OutputTensor", d.output_tensor)]
    if d.bias_tensor is not None:
        tensors.insert(1, ("BiasTensor", d.bias_tensor))
    v.same("data_type", tensors, ("InputTensor", x))
    v.same("rank", tensors, ("InputTensor", x))
    want = check_conv_window(d, v)
    if d.bias_tensor is not None:
        bias = (1, want[1]) + (1,) * (x.rank - 2)
        v.equal("BiasTensor.Sizes", d.bias_tensor.sizes, bias, "{1, OutputChannels, 1, ...}")
    validate_fused(v, d.fused_activation, d.output_tensor)


def check_conv_dimension_count(d: Any, v: Validator, allowed: tuple[int, ...]) -> None:
    """DimensionCount (the length of Strides) is one of ``allowed`` and InputTensor's rank is
    DimensionCount + 2. Shared by every convolution desc."""
    n = len(d.strides)
    names = " or ".join(", ".join(str(a) for a in allowed).rsplit(", ", 1))
    v.check("DimensionCount", n in allowed, f"must be {names}, got {n}")
    v.check(
        "InputTensor.DimensionCount",
        d.input_tensor.rank == n + 2,
        f"must be DimensionCount + 2 = {n + 2}, got {d.input_tensor.rank}",
    )


def check_conv_window(d: Any, v: Validator) -> tuple[int, ...]:
    """The window rules every convolution desc shares (the arrays, GroupCount, the channel
    counts, the output sizes); returns the output sizes. Descs without Direction are FORWARD,
    without OutputPadding have none."""
    x, w = d.input_tensor, d.filter_tensor
    n = len(d.strides)
    arrays = ("Strides", "Dilations", "StartPadding", "EndPadding")
    if hasattr(d, "output_padding"):
        arrays += ("OutputPadding",)
    for name in arrays:
        values = getattr(d, _snake(name))
        v.check(name, len(values) == n, f"must hold DimensionCount ({n}) values, got {len(values)}")
    for name in ("Strides", "Dilations"):
        for i, s in enumerate(getattr(d, _snake(name))):
            v.check(f"{name}[{i}]", s >= 1, f"must be >= 1, got {s}")
    for i, p in enumerate(getattr(d, "output_padding", ())):
        v.check(
            f"OutputPadding[{i}]",
            p == 0 if not _backward(d) else p < max(d.strides[i], d.dilations[i]),
            "must be 0 for FORWARD"
            if not _backward(d)
            else f"must be < max(Strides[{i}], Dilations[{i}]) = "
            f"{max(d.strides[i], d.dilations[i])}, got {p}",
        )
    g = d.group_count
    v.check("GroupCount", g >= 1, f"must be >= 1, got {g}")
    c = x.sizes[1]
    v.check("InputTensor.Sizes[1]", c % g == 0, f"(channels {c}) must divide by GroupCount {g}")
    if _backward(d):
        v.equal("FilterTensor.Sizes[0]", w.sizes[0], c, "InputTensor.Sizes[1] (BACKWARD)")
    else:
        v.check(
            "FilterTensor.Sizes[1]",
            w.sizes[1] * g == c,
            f"times GroupCount must equal InputTensor.Sizes[1] = {c}, got {w.sizes[1]} * {g}",
        )
        v.check(
            "FilterTensor.Sizes[0]",
            w.sizes[0] % g == 0,
            f"(output channels {w.sizes[0]}) must divide by GroupCount {g}",
        )
    want = conv_output_sizes(d)
    v.check(
        "OutputTensor.Sizes",
        all(s >= 1 for s in want),
        f"would be {list(want)}: the window does not fit the padded input",
    )
    return want


def _snake(member: str) -> str:
    return "".join("_" + ch.lower() if ch.isupper() else ch for ch in member).lstrip("_")


def lower_conv(d: ConvolutionOperatorDesc, x, w, *bias):
    spatial = tuple(range(2, x.ndim))
    n = x.ndim - 2
    strides, dilations = tuple(d.strides), tuple(d.dilations)
    start, end, out_pad = d.start_padding, d.end_padding, d.output_padding
    flip = d.mode is ConvolutionMode.CONVOLUTION
    g = d.group_count
    kernel = w.shape[2:]
    if _backward(d):
        # The transposed convolution as a forward one: the input dilated by Strides, padded by
        # (extent - 1 - start, extent - 1 - end + output padding), with the filter's channel
        # axes swapped per group and its taps reversed (a cross-correlation's transpose is a
        # convolution).
        c_in, k_per = w.shape[0], w.shape[1]
        w = w.reshape((g, c_in // g, k_per) + kernel)
        w = jnp.swapaxes(w, 1, 2).reshape((g * k_per, c_in // g) + kernel)
        flip = not flip
        extents = [(k - 1) * r + 1 for k, r in zip(kernel, dilations)]
        padding = [(e - 1 - s, e - 1 - t + p) for e, s, t, p in zip(extents, start, end, out_pad)]
        lhs_dilation = strides
        strides = (1,) * n
    else:
        padding = list(zip(start, end))
        lhs_dilation = (1,) * n
    if flip:
        w = lax.rev(w, spatial)
    pointwise = _pointwise(d, kernel)
    y = convolve(x, w, strides, padding, lhs_dilation, dilations, g, pointwise)
    if bias:
        y = wide(y) + wide(bias[0])
    return (apply_fused(d.fused_activation, y, d.output_tensor).astype(d.output_tensor.dtype),)


def _pointwise(d: ConvolutionOperatorDesc, kernel) -> bool:
    return (
        not _backward(d)
        and all(k == 1 for k in kernel)
        and all(s == 1 for s in d.strides)
        and not any(d.start_padding)
        and not any(d.end_padding)
    )


register(
    ConvolutionOperatorDesc,
    infer=infer_conv,
    validate=validate_conv,
    lower=lower_conv,
    support=rows((L.FL_1_0, DIMS4_5, F2), (L.FL_4_0, (3, 4, 5), F2)),
    example=Example(
        {
            "type": "DML_OPERATOR_CONVOLUTION",
            "desc": {
                "InputTensor": {"DataType": "FLOAT32", "Sizes": [1, 1, 3, 3]},
                "FilterTensor": {"DataType": "FLOAT32", "Sizes": [1, 1, 2, 2]},
                "OutputTensor": {"DataType": "FLOAT32", "Sizes": [1, 1, 2, 2]},
                "Mode": "DML_CONVOLUTION_MODE_CROSS_CORRELATION",
                "Direction": "DML_CONVOLUTION_DIRECTION_FORWARD",
                "DimensionCount": 2,
                "Strides": [1, 1],
                "Dilations": [1, 1],
                "StartPadding": [0, 0],
                "EndPadding": [0, 0],
                "OutputPadding": [0, 0],
                "GroupCount": 1,
            },
        },
        {"InputTensor": [1, 2, 3, 4, 5, 6, 7, 8, 9], "FilterTensor": [1, 0, 0, 1]},
        "a 2x2 window summing each element and its lower-right neighbour",
    ),
)
