"""DML_OPERATOR_GEMM and DML_OPERATOR_CONVOLUTION.

Compute-bound: the gemm_conv suite (``dml-jax bench --suite gemm_conv``) times them in TFLOP/s
against jax and PyTorch (the operator suite measures bytes, which says nothing here).

Precision (docs/semantics.md, "GEMM and convolution"; ``dml_jax.precision``): FLOAT32 products
are computed in float32 (``lax.Precision.HIGHEST``) unless the compiled operator or graph allows
half precision; FLOAT16 products accumulate in float32 and round to FLOAT16; Alpha, Beta, C and
the bias are then applied in float32, with one more rounding (a fused activation likewise).
"""

from __future__ import annotations

import itertools
import math
import os
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

_DIMS2_4 = (2, 3, 4)


def _product_type(x):
    """The result type asked of XLA's dot / convolution: the input's own. For FLOAT16, XLA
    accumulates in float32 on every backend and rounds once (cuBLAS / cuDNN compute type
    float32; ``test_float16_accumulates_in_float32``); asking for a float32 result instead would
    add a float32 output pass (0.68-0.93 of jax's float16 GEMM on an H200,
    benchmarks/RESULTS.md#gemm_conv)."""
    return x.dtype


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
    """A x B on the float type of the products (``_product_type``), batched over the leading
    axes. TransA chooses A's contracted axis (no transpose written). B is written {..., N, K}
    (contracted on its minor axis) for a product of one row, {..., K, N} otherwise: where B is
    a constant, XLA's CPU compiler folds that form into the constant's layout (two CPU cores,
    float32, 9216 -> 4096: one row took 4.0-5.4 ms on {N, K} rows against 7.8-8.9 on {K, N}
    ones, 2 to 16 rows 10-15 ms against 18-24; 1024 -> 4096 at 128 rows 6.5 against 11.9).
    Elsewhere XLA folds the transpose into the product."""
    rows = a.shape[-1] if trans_a else a.shape[-2]
    if (rows == 1) != trans_b:
        b = jnp.swapaxes(b, -1, -2)
    batch = tuple(range(a.ndim - 2))
    ka = a.ndim - (2 if trans_a else 1)
    kb = b.ndim - (1 if rows == 1 else 2)
    return lax.dot_general(
        a,
        b,
        (((ka,), (kb,)), (batch, batch)),
        precision=matmul_precision(),
        preferred_element_type=_product_type(a),
    )


# How ``_one_row_as_two`` makes A's second row: "zeros" (a concatenation, a kernel of its own
# before each product in a decode step: some 90 a token of the 1B-class LLaMA on an H100), or
# "repeat" (A broadcast to two equal rows, which XLA may fuse into the product's operand; not
# yet timed on a GPU: benchmarks/experiments/two_row_forms_gpu.py).
ONE_ROW_FORM = "zeros"


def _one_row_as_two(a, b, trans_a: bool, trans_b: bool):
    """A product of one row computed on two, the second A's row of zeros, and the first row
    kept: on CUDA, XLA writes a product of one row as a multiply and a reduction, which read
    the weights at 0.4-2.6 TB/s on an H200 where the same product on two rows ran at 0.9-3.5
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


def _dimension_numbers(rank: int):
    spatial = "DHW"[3 - (rank - 2) :]
    return ("NC" + spatial, "OI" + spatial, "NC" + spatial)


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
    if _pointwise(d, kernel):
        y = _pointwise_product(x, w, g)
    elif _tiles_the_input(kernel, strides, lhs_dilation, dilations, g):
        y = _patch_product(x, w, padding)
    elif _is_depthwise(x, w, g):
        y = _depthwise(x, w, strides, padding, lhs_dilation, dilations, g)
    elif _few_channels(x, w, g):
        y = _patches(x, w, strides, padding, lhs_dilation, dilations)
    elif _split_groups(x, g):
        y = _per_group(x, w, strides, padding, lhs_dilation, dilations, g)
    elif _winograd_fits(x, w, strides, padding, lhs_dilation, dilations, g):
        y = _winograd(x, w, padding)
    else:
        y = _conv(x, w, strides, padding, lhs_dilation, dilations, g)
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


def _pointwise_product(x, w, g: int):
    """A 1x1 forward convolution as a matrix product per image (and per group): XLA's
    convolution of NCHW float16 ran 0.34 of PyTorch's for 1x1 256->64 at 56x56 on a GPU (the
    product is cuBLAS's), and on the CPU XLA's grouped 1x1 convolution ran 4-7 times slower than
    the batched product (ShuffleNet's 4-group 1x1 convolutions at 28x28). One product of K by C
    per group: the same sums as the convolution's.

    Grouped, one image: the filter is the left operand, so that the product's row-major
    {G, K / G, H x W} result is the NCHW output itself (with the image on the left, einsum's
    order, XLA's CPU backend, whose products take row-major operands, copies the input into
    {H x W, C} and the output back). The ungrouped product keeps the image-first order: the
    filter-first one saved those copies too (9% of ResNet-50's CPU time), but changed the
    rounding of SqueezeNet's constant-weight logits (1.5e9) that its final softmax turns into
    all zeros (tests/test_onnx_models.py)."""
    n, c, k = x.shape[0], x.shape[1], w.shape[0]
    out = (n, k) + x.shape[2:]
    precision = {"precision": matmul_precision(), "preferred_element_type": _product_type(x)}
    if g == 1:
        y = jnp.einsum("kc,ncp->nkp", w.reshape(w.shape[:2]), x.reshape((n, c, -1)), **precision)
    elif n == 1:
        y = lax.dot_general(
            w.reshape((g, k // g, c // g)),
            x.reshape((g, c // g, -1)),
            (((2,), (1,)), ((0,), (0,))),
            **precision,
        )
    else:
        y = jnp.einsum(
            "gkc,ngcp->ngkp",
            w.reshape((g, k // g, c // g)),
            x.reshape((n, g, c // g, -1)),
            **precision,
        )
    return y.reshape(out)


# Windows that tile the input are one matrix product (``_patch_product``); False gives them
# XLA's convolution (benchmarks/experiments/patch_products.py and onnx_compile_time.py compare).
PATCH_PRODUCTS = True


def _tiles_the_input(kernel, strides, lhs_dilation, dilations, g: int) -> bool:
    """An ungrouped forward convolution whose windows tile its (padded) input: strides equal
    to the window, undilated, larger than 1x1 (a vision transformer's patch embedding,
    ConvNeXt's and Swin's stem and downsampling layers)."""
    return (
        PATCH_PRODUCTS
        and g == 1
        and tuple(strides) == tuple(kernel)
        and math.prod(kernel) > 1
        and all(r == 1 for r in lhs_dilation)
        and all(r == 1 for r in dilations)
    )


def _patch_product(x, w, padding):
    """A convolution whose windows tile the input (``_tiles_the_input``) as one matrix
    product: each output position's window is a block of the input, so the input reshaped to
    {N, C, out1, k1, out2, k2, ...} meets the filter {K, C, k1, k2, ...} over its channel and
    window axes. The same products and sums as the convolution's; no convolution algorithm to
    search for or plan.

    Why on every backend: alone, XLA's convolution ran these 1.4 to 2.3 times slower than the
    product on two CPU cores (one image, float32) and, on an H100 at batch 64 in float16,
    ViT-B/16's 16x16 patches 8 times slower (0.50 against 0.06 ms) and ConvNeXt-T's stem and
    downsampling layers 1.1 to 1.7 times slower; whole ONNX models on the H100 went from 6.79 to
    6.46 ms (ViT-B/16), 4.11 to 3.92 (ConvNeXt-T) and 0.147 to 0.103 (CLIP's vision tower)
    (benchmarks/experiments/patch_products.py, figures in its README).

    Padding (negative values crop) comes first; the positions past the last whole window are
    dropped, as the convolution drops them."""
    kernel = w.shape[2:]
    n_sp = len(kernel)
    if any(lo or hi for lo, hi in padding):
        config = [(0, 0, 0), (0, 0, 0)] + [(lo, hi, 0) for lo, hi in padding]
        x = lax.pad(x, jnp.zeros((), x.dtype), config)
    out = tuple(size // k for size, k in zip(x.shape[2:], kernel))
    x = x[(slice(None), slice(None)) + tuple(slice(0, o * k) for o, k in zip(out, kernel))]
    n, c = x.shape[:2]
    blocks = x.reshape((n, c) + tuple(v for o, k in zip(out, kernel) for v in (o, k)))
    y = lax.dot_general(
        w,
        blocks,
        (((1,) + tuple(range(2, 2 + n_sp)), (1,) + tuple(range(3, 3 + 2 * n_sp, 2))), ((), ())),
        precision=matmul_precision(),
        preferred_element_type=_product_type(x),
    )  # {K, N, out...}
    return jnp.swapaxes(y, 0, 1)


# The most filter taps a depthwise convolution is unrolled over (a 7x7 or 3x3x3 window and
# 1-D windows to 64); longer windows stay one convolution, whose program does not grow with
# the window.
_MAX_DEPTHWISE_TAPS = 64


def _is_depthwise(x, w, g: int) -> bool:
    """One input channel per group (C = GroupCount > 1, any channel multiplier), a window of
    at most ``_MAX_DEPTHWISE_TAPS`` taps."""
    return g > 1 and x.shape[1] == g and math.prod(w.shape[2:]) <= _MAX_DEPTHWISE_TAPS


def _depthwise(x, w, strides, padding, lhs_dilation, dilations, g: int):
    """A depthwise convolution as taps (``_depthwise_taps``) where that is the faster form: on
    the CPU always, elsewhere where the window is dilated; undilated windows elsewhere take the
    grouped convolution. Both sum the same products.

    Measured on an H100 (jax 0.11.2, float16, batch 64, whole ONNX models): with the dilated
    depthwise convolutions of DeepLabV3-MobileNetV3 as taps and the others as grouped
    convolutions, it ran 3.44 ms against 5.41 with every one a grouped convolution, and
    MobileNetV2, MobileNetV3 and EfficientNet-B0 ran 1.50, 1.28 and 2.17 ms against 1.92, 1.49
    and 2.69 with their undilated 3x3 windows as taps. On CUDA undilated windows of up to 7x7
    take a fast path instead (``kernels/depthwise.py``), for the first call: no cuDNN algorithm
    search or plan."""

    def taps(x, w):
        return _depthwise_taps(x, w, strides, padding, lhs_dilation, dilations)

    if any(d > 1 for d in dilations):
        return taps(x, w)

    def grouped(x, w):
        return _conv(x, w, strides, padding, lhs_dilation, dilations, g)

    return platform_choice(x, w, cpu=taps, default=grouped)


def _depthwise_taps(x, w, strides, padding, lhs_dilation, dilations):
    """A depthwise convolution as a sum over the window's taps of a strided slice of the
    padded input times that tap's weight per channel (cross-correlation: flips and BACKWARD's
    rewrite are already in ``w``, ``padding`` and ``lhs_dilation``).

    Why: XLA's CPU backend runs a grouped convolution with one channel per group 10 to 20 times
    slower than this (a 3x3 depthwise convolution of 272 channels at 28x28: 6.8 ms against 0.4
    ms on two cores); written as slices and multiply-adds, the whole window is one fused loop
    on every backend, reading the input once per tap from cache, which is what a depthwise
    convolution costs anywhere (it has no reuse for a matrix unit to exploit).

    Exactness: each output is the sum of the same products as the convolution's, in float32
    for FLOAT16 (rounded once at the end, as the convolution accumulates), taken in the
    window's row-major order; only the order of the additions may differ from XLA's.
    """
    n, c = x.shape[:2]
    kernel = w.shape[2:]
    m = w.shape[0] // c  # output channels per input channel: channel c*m + j reads channel c
    taps = wide(w).reshape((c, m) + kernel)
    y = None
    out, windows = _windows(wide(x), kernel, strides, padding, lhs_dilation, dilations)
    for tap, window in windows:
        weight = taps[(slice(None), slice(None)) + tap].reshape((1, c, m) + (1,) * len(kernel))
        term = window[:, :, None] * weight
        y = term if y is None else y + term
    return y.reshape((n, c * m) + out).astype(_product_type(x))


def _windows(x, kernel, strides, padding, lhs_dilation, dilations):
    """The output's spatial sizes, and for each tap of the window in row-major order the tap
    and the strided slice of ``x`` (padded by ``padding``, negative values cropping, and
    dilated by ``lhs_dilation``) that the tap meets at every output position."""
    config = [(0, 0, 0), (0, 0, 0)] + [
        (lo, hi, dil - 1) for (lo, hi), dil in zip(padding, lhs_dilation)
    ]
    xp = lax.pad(x, jnp.zeros((), x.dtype), config)
    extents = [(k - 1) * r + 1 for k, r in zip(kernel, dilations)]
    out = tuple((size - e) // s + 1 for size, e, s in zip(xp.shape[2:], extents, strides))

    def each():
        for tap in itertools.product(*(range(k) for k in kernel)):
            start = tuple(t * r for t, r in zip(tap, dilations))
            limit = tuple(b + (o - 1) * s + 1 for b, o, s in zip(start, out, strides))
            yield tap, lax.slice(xp, (0, 0) + start, xp.shape[:2] + limit, (1, 1) + strides)

    return out, each()


# Ungrouped convolutions of at most this many input channels and window taps are, on the CPU,
# one matrix product of the gathered windows: up to 7x7 windows on CPUs of at most
# _PATCH_FEW_CORES cores, up to 5x5 on larger ones (``_patches`` says why).
_PATCH_CHANNELS, _PATCH_TAPS, _PATCH_TAPS_MANY_CORES, _PATCH_FEW_CORES = 3, 49, 25, 4


def _cpu_cores() -> int:
    """The cores this process may run on (XLA's CPU thread pool takes as many)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _few_channels(x, w, g: int) -> bool:
    """An ungrouped convolution of few input channels and a small window (an image's first
    layer)."""
    taps = _PATCH_TAPS if _cpu_cores() <= _PATCH_FEW_CORES else _PATCH_TAPS_MANY_CORES
    return g == 1 and x.shape[1] <= _PATCH_CHANNELS and math.prod(w.shape[2:]) <= taps


def _patches(x, w, strides, padding, lhs_dilation, dilations):
    """A convolution of few input channels, on the CPU as the product of the filter, {K, C x
    taps}, and the input's windows gathered into {C x taps, output positions}; elsewhere the
    convolution itself.

    Why keyed on the platform: XLA's CPU backend ran these convolutions 2 to 6 times slower
    than the product (ShuffleNet's first layer, 3x3 stride 2 of 3 channels into 24 at 224x224:
    3.0 ms against 0.5 ms on two cores; VGG's 3 into 64: 9 against 4 ms; with the windows
    stacked whole, ResNet's 7x7 stride 2 of 3 into 64: 3.8 against 3.1 ms, 3 into 96: 5.8
    against 3.4), while from 4 input channels or past 49 taps its own convolution was as fast
    (AlexNet's 11x11 stride 4: 1.5 against 1.6 ms) or faster; a GPU's convolution library
    has kernels for such first layers, and the gathered windows would cost it a copy of taps
    times the input. The product sums the same products in another order.

    The thread count moves the line: on a 16-core host (2026-11-26) XLA's convolution of 7x7
    windows spread over the cores and won (ResNet's stem 1.09 ms against the product's 1.99,
    3 into 96 2.03 against 2.12; ResNet-50 at batch 1, the graph's lax lowering, 55 ms with the
    product and 41 without, plain jax 47), while the 3x3 ones still lost to the product (1.3-1.8
    times its time). So 7x7 windows take the product only on CPUs of at most
    ``_PATCH_FEW_CORES`` cores (measured at 2 and 16 cores; the line between is not)."""

    def gathered(x, w):
        n, c, k = x.shape[0], x.shape[1], w.shape[0]
        out, windows = _windows(x, w.shape[2:], strides, padding, lhs_dilation, dilations)
        # {N, C, taps, *out}: the filter's own {C, kernel...} order. The windows are stacked as
        # they are and flattened once: flattening each strided window first made XLA's CPU
        # backend copy every window apart before the stack (the gather then took 1.2-2.1 times
        # as long).
        cols = jnp.stack([window for _, window in windows], axis=2)
        y = lax.dot_general(
            w.reshape((k, -1)),
            cols.reshape((n, c * cols.shape[2], -1)),
            (((1,), (1,)), ((), ())),
            precision=matmul_precision(),
            preferred_element_type=_product_type(x),
        )  # {K, N, positions}: for one image, the NCHW output's own order
        return jnp.swapaxes(y, 0, 1).reshape((n, k) + out)

    def whole(x, w):
        return _conv(x, w, strides, padding, lhs_dilation, dilations, 1)

    return platform_choice(x, w, cpu=gathered, default=whole)


# The most groups a grouped convolution is split into on the CPU (one convolution each).
_MAX_SPLIT_GROUPS = 32


def _split_groups(x, g: int) -> bool:
    """A grouped convolution with several channels per group (depthwise ones have their own
    lowering), of at most ``_MAX_SPLIT_GROUPS`` groups."""
    return 1 < g <= _MAX_SPLIT_GROUPS and x.shape[1] // g > 1


def _per_group(x, w, strides, padding, lhs_dilation, dilations, g: int):
    """A grouped convolution, on the CPU as one ungrouped convolution per group joined along
    the channels; elsewhere the grouped convolution itself.

    Why keyed on the platform: XLA's CPU backend ran AlexNet's two-group convolutions 2.2
    times slower grouped than split (5x5 96->256 at 27x27: 14.3 ms against 6.2 ms on two
    cores; 32 groups of 4 channels at 56x56: 15.7 against 9.7 ms), while a GPU's convolution
    library takes the groups in one call, where a split would be as many calls and a copy.
    Each group's convolution is the grouped one's slice of the work (the same products and
    sums: the results agreed bit for bit on the CPU)."""

    def split(x, w):
        parts = zip(jnp.split(x, g, axis=1), jnp.split(w, g, axis=0))
        ys = [_conv(a, b, strides, padding, lhs_dilation, dilations, 1) for a, b in parts]
        return lax.concatenate(ys, 1)

    def grouped(x, w):
        return _conv(x, w, strides, padding, lhs_dilation, dilations, g)

    return platform_choice(x, w, cpu=split, default=grouped)


# Ungrouped 3x3 stride-1 convolutions take Winograd's F(2x2, 3x3) on the CPU from this much
# work per transformed product (channels in x channels out x 2x2 output tiles) and these sizes.
_WINOGRAD_MIN_CHANNELS, _WINOGRAD_MIN_WORK, _WINOGRAD_MIN_OUT = 256, 4 * 2**20, 12


def _winograd_fits(x, w, strides, padding, lhs_dilation, dilations, g: int) -> bool:
    """An ungrouped 2-D 3x3 window, stride and dilation 1, padding of at most 2 per side, at
    least ``_WINOGRAD_MIN_CHANNELS`` channels in and out, outputs at least
    ``_WINOGRAD_MIN_OUT`` on each side and ``_WINOGRAD_MIN_WORK`` products per tile position:
    where the transforms cost less than the products they save (benchmarks/experiments/
    README.md, "winograd")."""
    if g != 1 or x.ndim != 4 or tuple(w.shape[2:]) != (3, 3):
        return False
    if any(v != 1 for v in (*strides, *lhs_dilation, *dilations)):
        return False
    if any(not 0 <= p <= 2 for pair in padding for p in pair):
        return False
    out = [size + lo + hi - 2 for size, (lo, hi) in zip(x.shape[2:], padding)]
    tiles = x.shape[0] * math.prod((o + 1) // 2 for o in out)
    c, k = x.shape[1], w.shape[0]
    return (
        min(c, k) >= _WINOGRAD_MIN_CHANNELS
        and min(out) >= _WINOGRAD_MIN_OUT
        and c * k * tiles >= _WINOGRAD_MIN_WORK
    )


def _winograd(x, w, padding):
    """A 3x3 stride-1 convolution, on the CPU by Winograd's minimal filtering F(2x2, 3x3)
    (Lavin and Gray, 2015); elsewhere the convolution itself.

    Each 2x2 block of outputs comes from the 4x4 block of input around it: the input blocks
    and the filter are transformed (``B^T d B``, ``G g G^T``: sums and differences, and halves
    of the filter), multiplied channel by channel as 16 matrix products of {K, C} by {C, tiles},
    and transformed back (``A^T m A``). That is 16 products per 2x2 outputs where the
    convolution takes 36: XLA's CPU convolution ran VGG's 3x3 layers at 99-171 GFLOP/s, and this
    form took 0.65-0.85 of its time for 256 to 512 channels at 12x12 to 56x56 (and lost below
    those sizes, hence ``_winograd_fits``). The transforms' coefficients are 0, +-1 and 1/2, so
    the result is the convolution's up to float32 rounding (within 1e-6 of the output's largest
    magnitude in the tests), not the same sums in another order; FLOAT16 is transformed and
    multiplied in float32 and rounded once."""

    def minimal(x, w, u):
        n, c, h, wd = x.shape
        k = w.shape[0]
        (top, bottom), (left, right) = padding
        oh, ow = h + top + bottom - 2, wd + left + right - 2
        th, tw = (oh + 1) // 2, (ow + 1) // 2
        # Padded so that the th x tw blocks of 4x4 (stride 2) fit: the extra rows and
        # columns only feed outputs past (oh, ow), which are cropped.
        xp = jnp.pad(
            wide(x),
            ((0, 0), (0, 0), (top, 2 * th + 2 - h - top), (left, 2 * tw + 2 - wd - left)),
        )

        def input_rows(a, axis):  # B^T applied along ``axis`` (rows 2i + 0..3 of each block)
            r = [lax.slice_in_dim(a, j, j + 2 * (th if axis == 2 else tw) - 1, 2, axis)
                 for j in range(4)]  # fmt: skip
            return [r[0] - r[2], r[1] + r[2], r[2] - r[1], r[1] - r[3]]

        v = jnp.stack([jnp.stack(input_rows(a, 3)) for a in input_rows(xp, 2)])
        # {4, 4, N, C, th, tw} -> {16, C, N x th x tw}
        v = jnp.transpose(v, (0, 1, 3, 2, 4, 5)).reshape(16, c, n * th * tw)
        if u is None:
            u = _winograd_filter(jnp, wide(w))
        m = lax.dot_general(
            u.reshape(16, k, c),
            v,
            (((2,), (1,)), ((0,), (0,))),
            precision=matmul_precision(),
            preferred_element_type=jnp.float32,
        ).reshape(4, 4, k, n, th, tw)
        s0, s1 = m[0] + m[1] + m[2], m[1] - m[2] - m[3]  # A^T along the rows: {4, K, N, th, tw}

        def output_cols(t):  # A^T along the columns: the two outputs of each block
            return jnp.stack([t[0] + t[1] + t[2], t[1] - t[2] - t[3]], -1)

        y = jnp.stack([output_cols(s0), output_cols(s1)], -3)  # {K, N, th, 2, tw, 2}
        y = y.reshape(k, n, 2 * th, 2 * tw)[:, :, :oh, :ow]
        return jnp.swapaxes(y, 0, 1).astype(_product_type(x))

    def whole(x, w, u):
        return _conv(x, w, (1, 1), padding, (1, 1), (1, 1), 1)

    # A constant filter (a model's weights) is transformed here, once, by NumPy: XLA would fold
    # the transform at every compile, slowly (VGG-19's compile took 12 s longer). Only where
    # the CPU is JAX's default backend: elsewhere the CPU branch is not the one compiled.
    u = None
    if not isinstance(w, jax.core.Tracer) and jax.default_backend() == "cpu":
        u = _winograd_filter(np, np.asarray(w, np.float32))
    return platform_choice(x, w, u, cpu=minimal, default=whole)


def _winograd_filter(xp, f):
    """``G f G^T`` of a {K, C, 3, 3} filter: {4, 4, K, C}, with ``xp`` NumPy or jax.numpy."""

    def rows(a):  # G along the third axis
        g0, g1, g2 = a[:, :, 0], a[:, :, 1], a[:, :, 2]
        return [g0, (g0 + g1 + g2) * 0.5, (g0 - g1 + g2) * 0.5, g2]

    return xp.stack([xp.stack(rows(a)) for a in rows(f)])


def _conv(x, w, strides, padding, lhs_dilation, dilations, g):
    return lax.conv_general_dilated(
        x,
        w,
        window_strides=strides,
        padding=padding,
        lhs_dilation=lhs_dilation,
        rhs_dilation=dilations,
        dimension_numbers=_dimension_numbers(x.ndim),
        feature_group_count=g,
        precision=matmul_precision(),
        preferred_element_type=_product_type(x),
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
