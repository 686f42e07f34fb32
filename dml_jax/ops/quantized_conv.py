"""Integer and quantized convolutions and average pooling: CONVOLUTION_INTEGER,
QUANTIZED_LINEAR_CONVOLUTION and QUANTIZED_LINEAR_AVERAGE_POOLING.

The arithmetic is the quantized matrix multiplies' (``quantized_matmul``, ``_quant``): sums of
``(q - ZeroPoint)`` products (or window elements) exactly in int32, int8 x int8 products with the
zero points applied outside them (``_quant.zero_point_product``), then DirectML's "dequantize,
compute, quantize" in float32: ``real = float32(sum) * (InputScale * FilterScale)`` (pooling:
``float32(window sum) * InputScale / divisor``), quantized with the output scale and zero point.

Geometry is shared, not copied: the convolutions use ``gemm_conv``'s output-size and window
rules and ``pooling``'s window slices for their cross-correlation (FORWARD, no filter flip,
padding holding the input zero point, so it reads as the zero point as in ONNX's ConvInteger);
the pooling uses ``pooling``'s window plan, rules, window sum and divisor. Scale and zero point
tensors hold one value or one per channel (``{1, C, 1, 1}``); ``_quant.check_parameter`` states
the accepted shapes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import jax.numpy as jnp
from jax import lax

from ..enums import DataType
from ..enums import FeatureLevel as L
from ..errors import Validator
from ..fastpath import platform_choice
from ..fields import (
    BOOL,
    UINT,
    UINT_ARRAY,
    OperatorDesc,
    attribute,
    count_of,
    input_field,
    output_field,
)
from ..registry import Example, register
from ..support import DIMS4, rows
from ..tensor import TensorDesc
from ._quant import (
    F32,
    I32,
    Q8,
    check_parameter,
    divide,
    held,
    named_inputs,
    parameter,
    quantize,
    same_parameter_ranks,
    signed,
    snake,
    tensor_json,
    zero_point_product,
)
from .gemm_conv import check_conv_dimension_count, check_conv_window, conv_output_sizes
from .pooling import (
    WindowPlan,
    average_divisor,
    validate_window,
    window_plan,
    window_points,
    window_sum,
)

_DIMS1_4 = (1, 2, 3, 4)
_DIMS3_4 = (3, 4)


# ---------------------------------------------------------------------------------------------
# CONVOLUTION_INTEGER and QUANTIZED_LINEAR_CONVOLUTION


@dataclass(frozen=True)
class ConvolutionIntegerOperatorDesc(OperatorDesc):
    """DML_CONVOLUTION_INTEGER_OPERATOR_DESC: the FORWARD cross-correlation of
    ``Input - InputZeroPoint`` with ``Filter - FilterZeroPoint``, summed exactly in INT32
    (FL 2_1).

    Fields:
        input_tensor: {N, C, [H], W}, INT8 or UINT8 (4-D before 4_0; 3-D or 4-D from 4_0).
        input_zero_point_tensor: optional (absent: 0), InputTensor's type, one value.
        filter_tensor: {K, C / GroupCount, [kH], kW}, INT8 or UINT8.
        filter_zero_point_tensor: optional, FilterTensor's type: one value or one per output
            channel (``{1, K, 1, 1}``; 1-D ``{K}``).
        output_tensor: {N, K, outputs...}, INT32, CONVOLUTION's FORWARD output sizes.
        strides, dilations, start_padding, end_padding: one value per spatial dimension
            (DimensionCount 1 or 2, InputTensor's rank - 2); padding is zero after the zero
            point is subtracted (it reads as the zero point).
        group_count: >= 1, divides C and K.
        dimension_count: optional; the length of the four arrays.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_CONVOLUTION_INTEGER"
    input_tensor: TensorDesc = input_field()
    input_zero_point_tensor: TensorDesc | None = input_field(optional=True)
    filter_tensor: TensorDesc = input_field()
    filter_zero_point_tensor: TensorDesc | None = input_field(optional=True)
    output_tensor: TensorDesc = output_field()
    strides: tuple[int, ...] = attribute(UINT_ARRAY)
    dilations: tuple[int, ...] = attribute(UINT_ARRAY)
    start_padding: tuple[int, ...] = attribute(UINT_ARRAY)
    end_padding: tuple[int, ...] = attribute(UINT_ARRAY)
    group_count: int = attribute(UINT, default=1)
    dimension_count: int | None = count_of("strides")


@dataclass(frozen=True)
class QuantizedLinearConvolutionOperatorDesc(OperatorDesc):
    """DML_QUANTIZED_LINEAR_CONVOLUTION_OPERATOR_DESC: CONVOLUTION_INTEGER's sum plus an INT32
    bias, dequantized and requantized with the output's scale and zero point (FL 2_1).

    ``real = float32(sum + Bias) * (InputScale * FilterScale)``, then
    ``clamp(round(real / OutputScale) + OutputZeroPoint, Min, Max)``.

    Fields:
        input_tensor, filter_tensor, the arrays, group_count, dimension_count: as
            ``ConvolutionIntegerOperatorDesc``.
        input_scale_tensor (FLOAT32) / input_zero_point_tensor (optional): one value.
        filter_scale_tensor (FLOAT32) / filter_zero_point_tensor (optional): one value or one
            per output channel (``{1, K, 1, 1}``).
        bias_tensor: optional, INT32 ``{1, K, 1, 1}``, added to the integer sum.
        output_scale_tensor (FLOAT32) / output_zero_point_tensor (optional): one value.
        output_tensor: INT8 or UINT8.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_QUANTIZED_LINEAR_CONVOLUTION"
    input_tensor: TensorDesc = input_field()
    input_scale_tensor: TensorDesc = input_field()
    input_zero_point_tensor: TensorDesc | None = input_field(optional=True)
    filter_tensor: TensorDesc = input_field()
    filter_scale_tensor: TensorDesc = input_field()
    filter_zero_point_tensor: TensorDesc | None = input_field(optional=True)
    bias_tensor: TensorDesc | None = input_field(optional=True)
    output_scale_tensor: TensorDesc = input_field()
    output_zero_point_tensor: TensorDesc | None = input_field(optional=True)
    output_tensor: TensorDesc = output_field()
    strides: tuple[int, ...] = attribute(UINT_ARRAY)
    dilations: tuple[int, ...] = attribute(UINT_ARRAY)
    start_padding: tuple[int, ...] = attribute(UINT_ARRAY)
    end_padding: tuple[int, ...] = attribute(UINT_ARRAY)
    group_count: int = attribute(UINT, default=1)
    dimension_count: int | None = count_of("strides")


def _infer_conv(d: Any) -> tuple[TensorDesc, ...]:
    """The output sizes of CONVOLUTION's FORWARD rule; CONVOLUTION_INTEGER writes INT32."""
    data_type = (
        DataType.INT32
        if isinstance(d, ConvolutionIntegerOperatorDesc)
        else d.output_tensor.data_type
    )
    return (d.input_tensor.like(data_type=data_type, sizes=conv_output_sizes(d)),)


_CONV_PARAMETERS = {
    # member: (owner, per output channel)
    "InputScaleTensor": ("InputTensor", False),
    "InputZeroPointTensor": ("InputTensor", False),
    "FilterScaleTensor": ("FilterTensor", True),
    "FilterZeroPointTensor": ("FilterTensor", True),
    "OutputScaleTensor": ("OutputTensor", False),
    "OutputZeroPointTensor": ("OutputTensor", False),
}


def validate_integer_conv(d: Any, v: Validator) -> None:
    x = d.input_tensor
    check_conv_dimension_count(d, v, (1, 2))
    tensors = [("FilterTensor", d.filter_tensor), ("OutputTensor", d.output_tensor)]
    bias = getattr(d, "bias_tensor", None)
    if bias is not None:
        tensors.insert(1, ("BiasTensor", bias))
    v.same("rank", tensors, ("InputTensor", x))
    if isinstance(d, ConvolutionIntegerOperatorDesc):  # its page's rule
        same_parameter_ranks(d, v, ("InputZeroPointTensor", "FilterZeroPointTensor"))
    want = check_conv_window(d, v)
    k = d.filter_tensor.sizes[0]
    for member, (owner, per_channel) in _CONV_PARAMETERS.items():
        t = getattr(d, snake(member), None)
        if t is None:
            continue
        what = "per output channel" if per_channel else "per tensor"
        check_parameter(v, member, t, x.rank, 1, k if per_channel else 1, what)
        if "Zero" in member:
            v.same("data_type", [(member, t)], (owner, getattr(d, snake(owner))))
    if bias is not None:
        v.equal(
            "BiasTensor.Sizes", bias.sizes, (1, want[1]) + (1,) * (x.rank - 2), "{1, K, 1, ...}"
        )


def _filter_zero(z, rank: int):
    """A per-output-channel zero point as a {K, 1, 1, ..} array for the filter {K, C, k..}."""
    values = lax.reshape(z, (z.size,))
    return lax.reshape(values, (z.size,) + (1,) * (rank - 1))


def _conv_sum(d: Any, x: dict) -> Any:
    """The FORWARD cross-correlation of ``Input - InputZeroPoint`` and ``Filter -
    FilterZeroPoint`` in int32: a depthwise one as int32 multiply-adds over its taps
    (``_taps_sum``); others on CUDA as integer matrix products (``_integer_sum``), on other
    backends as float32 convolutions where they are exact (``_float_sum``)."""
    if _is_depthwise(d):
        return _taps_sum(d, x)
    plan = _float_plan(d)
    if plan is None:
        return _integer_sum(d, x)
    return platform_choice(
        x, cuda=lambda x: _integer_sum(d, x), default=lambda x: _float_sum(d, x, plan)
    )


# Where every partial sum of a float32 convolution is an integer of at most 2^24 in magnitude,
# each is exact whatever the order of the additions: a chunk of input channels whose products
# are bounded so runs as one float32 convolution of the zero-point-free values, and the chunks'
# sums are added in int32. On two CPU cores a QDQ network's int8 convolutions so took about
# the time of its float32 ones (XLA's CPU convolution kernels), where the integer products of
# strided slices took four times as long.
_EXACT = 2**24


def _magnitude(t: TensorDesc, zero: Any) -> int:
    """The largest |value - zero point| of an 8-bit tensor of type ``t``."""
    if zero is not None:
        return 255
    return 128 if t.data_type == DataType.INT8 else 255


def _float_plan(d: Any) -> int | None:
    """Input channels a chunk of ``_float_sum`` holds, or None where no chunk is exact (a
    window too large, or groups whose channels need more than one chunk)."""
    bound = _magnitude(d.input_tensor, d.input_zero_point_tensor) * _magnitude(
        d.filter_tensor, d.filter_zero_point_tensor
    )
    per_channel = bound * math.prod(d.filter_tensor.sizes[2:])
    chunk = _EXACT // per_channel
    channels = d.filter_tensor.sizes[1]  # per group
    if chunk < 1 or (d.group_count > 1 and chunk < channels):
        return None
    return min(chunk, channels)


def _float_sum(d: Any, x: dict, chunk: int) -> Any:
    """``_conv_sum`` as float32 convolutions of ``chunk`` input channels each (all of them
    within a group), the zero points subtracted first (exact in float32), summed in int32.
    Padding is 0 after the subtraction: it reads as the zero point."""
    from .conv_forms import dimension_numbers

    rank = d.input_tensor.rank
    xs = x["input_tensor"].astype(jnp.float32)
    if x["input_zero_point_tensor"] is not None:
        xs = xs - parameter(x["input_zero_point_tensor"], rank, 1).astype(jnp.float32)
    ws = x["filter_tensor"].astype(jnp.float32)
    if x["filter_zero_point_tensor"] is not None:
        ws = ws - _filter_zero(x["filter_zero_point_tensor"], rank).astype(jnp.float32)
    channels = xs.shape[1]

    def conv(a, b):
        y = lax.conv_general_dilated(
            a, b, tuple(d.strides), tuple(zip(d.start_padding, d.end_padding)),
            rhs_dilation=tuple(d.dilations), dimension_numbers=dimension_numbers(rank),
            feature_group_count=d.group_count, precision=lax.Precision.HIGHEST,
            preferred_element_type=jnp.float32,
        )  # fmt: skip
        return y.astype(jnp.int32)

    if d.group_count > 1 or chunk >= channels:
        return conv(xs, ws)
    acc = None
    for start in range(0, channels, chunk):
        part = conv(xs[:, start : start + chunk], ws[:, start : start + chunk])
        acc = part if acc is None else acc + part
    return acc


def _is_depthwise(d: Any) -> bool:
    """Depthwise as the float convolutions' taps form takes it (``conv_forms.is_depthwise``)."""
    from .conv_forms import is_depthwise

    return is_depthwise(d.input_tensor.sizes[1], d.group_count, d.filter_tensor.sizes[2:])


def _taps_sum(d: Any, x: dict) -> Any:
    """``_conv_sum`` of a depthwise convolution: the sum over the window's taps of a strided
    slice of ``Input - InputZeroPoint`` (padded with 0 after the subtraction: the zero point)
    times the tap's ``Filter - FilterZeroPoint`` a channel, all in int32
    (``conv_forms.depthwise_taps``, the float convolutions' form, channels last: the
    activations around are channels-last in QDQ networks): exact, as every integer form is.
    XLA's grouped convolution of one channel a group, which the float32 form was, ran 10 to 30
    times slower on the CPU (MobileNet-v2's depthwise convolutions at batch 1: 14.2 ms against
    0.44 for 32 channels at 112 x 112; benchmarks/experiments/README.md,
    ``grouped_int8_conv_gpu.py``)."""
    from .conv_forms import depthwise_taps

    rank = d.input_tensor.rank
    zero = x["input_zero_point_tensor"]
    xs = held(x["input_tensor"], d.input_tensor.data_type).astype(jnp.int32)
    if zero is not None:
        xs = xs - parameter(held(zero, d.input_zero_point_tensor.data_type), rank, 1).astype(
            jnp.int32
        )
    zero = x["filter_zero_point_tensor"]
    ws = held(x["filter_tensor"], d.filter_tensor.data_type).astype(jnp.int32)
    if zero is not None:
        ws = ws - _filter_zero(held(zero, d.filter_zero_point_tensor.data_type), rank).astype(
            jnp.int32
        )
    spatial = rank - 2
    return depthwise_taps(
        xs, ws, tuple(d.strides), tuple(zip(d.start_padding, d.end_padding)),
        (1,) * spatial, tuple(d.dilations), channels_last=True,
    )  # fmt: skip


def _integer_sum(d: Any, x: dict) -> Any:
    """The FORWARD cross-correlation of ``Input - InputZeroPoint`` and ``Filter -
    FilterZeroPoint`` with ``d``'s Strides, Dilations, padding and GroupCount, in int32.

    Written as one strided slice of the padded input per kernel point and, per group, an int8
    matrix product over (channel, kernel point) (``zero_point_product``): XLA's GPU backend
    compiles integer convolutions only in cuDNN's int8 forms, integer matrix products on every
    backend. Padding holds the (shifted) input zero point, so its differences are 0: it reads as
    the zero point."""
    rank = d.input_tensor.rank
    zero = x["input_zero_point_tensor"]
    xs, x_zero = signed(
        x["input_tensor"],
        d.input_tensor.data_type,
        None if zero is None else parameter(zero, rank, 1),
    )
    zero = x["filter_zero_point_tensor"]
    ws, w_zero = signed(
        x["filter_tensor"],
        d.filter_tensor.data_type,
        None if zero is None else _filter_zero(zero, rank),
    )
    n, k, cg, g = xs.shape[0], ws.shape[0], ws.shape[1], d.group_count
    plan = WindowPlan(
        tuple(ws.shape[2:]),
        tuple(d.strides),
        tuple(d.dilations),
        tuple(d.start_padding),
        tuple(d.end_padding),
        tuple(xs.shape[2:]),
    )
    pad = jnp.int8(0) if x_zero is None else lax.reshape(x_zero, ()).astype(jnp.int8)
    points = list(window_points(plan, xs, pad))
    count, outs, flat = len(points), plan.outputs, math.prod(plan.outputs)
    # {N, C, P, O..} -> {G, C/G * P, N * O}: channel-major as the filter's {C/G, kernel...}
    patches = lax.reshape(jnp.stack(points, axis=2), (n, g, cg * count, flat))
    patches = lax.reshape(lax.transpose(patches, (1, 2, 0, 3)), (g, cg * count, n * flat))
    filters = lax.reshape(ws, (g, k // g, cg * count))
    if w_zero is not None:  # one value, or one per output channel: per row of the filters
        w_zero = lax.reshape(w_zero, (g, k // g, 1) if w_zero.size == k else (1, 1, 1))
    if x_zero is not None:
        x_zero = lax.reshape(x_zero, (1, 1, 1))
    y = zero_point_product(filters, w_zero, patches, x_zero)  # {G, K/G, N * O}
    y = lax.transpose(lax.reshape(y, (g, k // g, n, flat)), (2, 0, 1, 3))
    return lax.reshape(y, (n, k) + outs)


def lower_convolution_integer(d: ConvolutionIntegerOperatorDesc, *arrays):
    return (_conv_sum(d, named_inputs(d, arrays)),)


def lower_quantized_convolution(d: QuantizedLinearConvolutionOperatorDesc, *arrays):
    x = named_inputs(d, arrays)
    rank = d.input_tensor.rank
    acc = _conv_sum(d, x)
    if x["bias_tensor"] is not None:
        acc = acc + x["bias_tensor"]
    scale = parameter(x["input_scale_tensor"], rank, 1) * parameter(
        x["filter_scale_tensor"], rank, 1
    )
    out = d.output_tensor.data_type
    zero = x["output_zero_point_tensor"]
    return (
        quantize(
            acc.astype(jnp.float32) * scale,
            parameter(x["output_scale_tensor"], rank, 1),
            None if zero is None else parameter(zero, rank, 1),
            out,
            out,
        ),
    )


def _conv_example(cls: type) -> Example:
    desc: dict[str, Any] = {"InputTensor": tensor_json("UINT8", [1, 1, 3, 3])}
    inputs: dict[str, Any] = {"InputTensor": [1, 2, 3, 4, 5, 6, 7, 8, 9]}
    quantized = cls is QuantizedLinearConvolutionOperatorDesc
    if quantized:
        desc["InputScaleTensor"] = tensor_json("FLOAT32", [1, 1, 1, 1])
        inputs["InputScaleTensor"] = [0.5]
    desc["InputZeroPointTensor"] = tensor_json("UINT8", [1, 1, 1, 1])
    desc["FilterTensor"] = tensor_json("INT8", [2, 1, 2, 2])
    inputs.update({"InputZeroPointTensor": [5], "FilterTensor": [1, 0, 0, 1, -1, 2, 3, 0]})
    if quantized:
        desc["FilterScaleTensor"] = tensor_json("FLOAT32", [1, 2, 1, 1])
        desc["BiasTensor"] = tensor_json("INT32", [1, 2, 1, 1])
        desc["OutputScaleTensor"] = tensor_json("FLOAT32", [1, 1, 1, 1])
        desc["OutputZeroPointTensor"] = tensor_json("INT8", [1, 1, 1, 1])
        desc["OutputTensor"] = tensor_json("INT8", [1, 2, 2, 2])
        inputs.update(
            {
                "FilterScaleTensor": [1.0, 0.25],
                "BiasTensor": [4, -8],
                "OutputScaleTensor": [0.5],
                "OutputZeroPointTensor": [-3],
            }
        )
        note = "(x - 5) correlated with two 2x2 filters, plus bias, requantized"
    else:
        desc["OutputTensor"] = tensor_json("INT32", [1, 2, 2, 2])
        note = "(x - 5) correlated with two 2x2 filters, summed in INT32"
    desc.update(
        {
            "DimensionCount": 2,
            "Strides": [1, 1],
            "Dilations": [1, 1],
            "StartPadding": [0, 0],
            "EndPadding": [0, 0],
            "GroupCount": 1,
        }
    )
    return Example({"type": cls.operator_type, "desc": desc}, inputs, note)


register(
    ConvolutionIntegerOperatorDesc,
    infer=_infer_conv,
    validate=validate_integer_conv,
    lower=lower_convolution_integer,
    support=rows(
        (L.FL_2_1, DIMS4, Q8, I32),
        (
            L.FL_4_0,
            _DIMS3_4,
            Q8,
            I32,
            {"InputZeroPointTensor": (Q8, _DIMS1_4), "FilterZeroPointTensor": (Q8, _DIMS1_4)},
        ),
    ),
    example=_conv_example(ConvolutionIntegerOperatorDesc),
)


def _qconv_columns(filter_scale_ranks: tuple[int, ...]) -> dict:
    return {
        "InputScaleTensor": (F32, _DIMS1_4),
        "InputZeroPointTensor": (Q8, _DIMS1_4),
        "FilterScaleTensor": (F32, filter_scale_ranks),
        "FilterZeroPointTensor": (Q8, _DIMS1_4),
        "BiasTensor": I32,
        "OutputScaleTensor": (F32, _DIMS1_4),
        "OutputZeroPointTensor": (Q8, _DIMS1_4),
    }


register(
    QuantizedLinearConvolutionOperatorDesc,
    infer=_infer_conv,
    validate=validate_integer_conv,
    lower=lower_quantized_convolution,
    support=rows(
        (
            L.FL_2_1,
            DIMS4,
            Q8,
            Q8,
            {
                "InputScaleTensor": F32,
                "FilterScaleTensor": F32,
                "OutputScaleTensor": F32,
                "BiasTensor": I32,
            },
        ),
        (L.FL_4_0, _DIMS3_4, Q8, Q8, _qconv_columns(_DIMS3_4)),
        (L.FL_5_2, _DIMS3_4, Q8, Q8, _qconv_columns(_DIMS1_4)),
    ),
    example=_conv_example(QuantizedLinearConvolutionOperatorDesc),
)


# ---------------------------------------------------------------------------------------------
# QUANTIZED_LINEAR_AVERAGE_POOLING


@dataclass(frozen=True)
class QuantizedLinearAveragePoolingOperatorDesc(OperatorDesc):
    """DML_QUANTIZED_LINEAR_AVERAGE_POOLING_OPERATOR_DESC: AVERAGE_POOLING1 of the dequantized
    input, quantized with the output's scale and zero point (FL 6_2).

    ``real = float32(sum over the window of (Input - InputZeroPoint)) * InputScale / divisor``
    (the sum exact in int32; padding contributes 0, i.e. reads as the zero point; the divisor
    is AVERAGE_POOLING1's: prod(WindowSize), or the window points on the input), then
    ``clamp(round(real / OutputScale) + OutputZeroPoint, Min, Max)``.

    Fields:
        input_tensor: {N, C, spatial...} (4-D or 5-D), INT8 or UINT8.
        input_scale_tensor (FLOAT32) / input_zero_point_tensor (optional, InputTensor's type),
        output_scale_tensor (FLOAT32) / output_zero_point_tensor (optional, OutputTensor's
            type): one value or one per channel (``{1, C, 1, 1}``; 1-D ``{C}``).
        output_tensor: INT8 or UINT8, AVERAGE_POOLING1's output sizes.
        strides, window_size, start_padding, end_padding, dilations, include_padding,
            dimension_count: as ``AveragePooling1OperatorDesc``.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_QUANTIZED_LINEAR_AVERAGE_POOLING"
    input_tensor: TensorDesc = input_field()
    input_scale_tensor: TensorDesc = input_field()
    input_zero_point_tensor: TensorDesc | None = input_field(optional=True)
    output_scale_tensor: TensorDesc = input_field()
    output_zero_point_tensor: TensorDesc | None = input_field(optional=True)
    output_tensor: TensorDesc = output_field()
    strides: tuple[int, ...] = attribute(UINT_ARRAY)
    window_size: tuple[int, ...] = attribute(UINT_ARRAY)
    start_padding: tuple[int, ...] = attribute(UINT_ARRAY)
    end_padding: tuple[int, ...] = attribute(UINT_ARRAY)
    dilations: tuple[int, ...] = attribute(UINT_ARRAY)
    include_padding: bool = attribute(BOOL)
    dimension_count: int | None = count_of("strides")


def infer_quantized_average_pooling(d: QuantizedLinearAveragePoolingOperatorDesc):
    x = d.input_tensor
    sizes = tuple(x.sizes[:2]) + window_plan(d).outputs
    return (x.like(data_type=d.output_tensor.data_type, sizes=sizes),)


def validate_quantized_average_pooling(
    d: QuantizedLinearAveragePoolingOperatorDesc, v: Validator
) -> None:
    validate_window(d, v, "InputTensor", d.input_tensor)
    x = d.input_tensor
    v.same("rank", [("OutputTensor", d.output_tensor)], ("InputTensor", x))
    for member in ("InputScaleTensor", "InputZeroPointTensor", "OutputScaleTensor",
                   "OutputZeroPointTensor"):  # fmt: skip
        t = getattr(d, snake(member))
        if t is None:
            continue
        check_parameter(v, member, t, x.rank, 1, x.sizes[1], "per channel")
        if "Zero" in member:
            owner = member.split("Zero")[0] + "Tensor"
            v.same("data_type", [(member, t)], (owner, getattr(d, snake(owner))))


def lower_quantized_average_pooling(d: QuantizedLinearAveragePoolingOperatorDesc, *arrays):
    x = named_inputs(d, arrays)
    rank = d.input_tensor.rank
    plan = window_plan(d)
    zero = x["input_zero_point_tensor"]
    diff = held(x["input_tensor"], d.input_tensor.data_type).astype(jnp.int32)
    if zero is not None:
        zero = held(parameter(zero, rank, 1), d.input_tensor.data_type)
        diff = diff - zero.astype(jnp.int32)
    total = window_sum(plan, diff)  # zeros pad the differences
    divisor = jnp.asarray(average_divisor(plan, d.include_padding), jnp.float32)
    real = divide(total.astype(jnp.float32) * parameter(x["input_scale_tensor"], rank, 1), divisor)
    out = d.output_tensor.data_type
    out_zero = x["output_zero_point_tensor"]
    return (
        quantize(
            real,
            parameter(x["output_scale_tensor"], rank, 1),
            None if out_zero is None else parameter(out_zero, rank, 1),
            out,
            out,
        ),
    )


register(
    QuantizedLinearAveragePoolingOperatorDesc,
    infer=infer_quantized_average_pooling,
    validate=validate_quantized_average_pooling,
    lower=lower_quantized_average_pooling,
    support=rows(
        (
            L.FL_6_2,
            (4, 5),
            Q8,
            Q8,
            {
                "InputScaleTensor": (F32, (1, 2, 3, 4, 5)),
                "InputZeroPointTensor": (Q8, (1, 2, 3, 4, 5)),
                "OutputScaleTensor": (F32, (1, 2, 3, 4, 5)),
                "OutputZeroPointTensor": (Q8, (1, 2, 3, 4, 5)),
            },
        ),
    ),
    example=Example(
        {
            "type": "DML_OPERATOR_QUANTIZED_LINEAR_AVERAGE_POOLING",
            "desc": {
                "InputTensor": tensor_json("UINT8", [1, 2, 2, 2]),
                "InputScaleTensor": tensor_json("FLOAT32", [1, 2, 1, 1]),
                "InputZeroPointTensor": tensor_json("UINT8", [1, 1, 1, 1]),
                "OutputScaleTensor": tensor_json("FLOAT32", [1, 1, 1, 1]),
                "OutputZeroPointTensor": tensor_json("INT8", [1, 1, 1, 1]),
                "OutputTensor": tensor_json("INT8", [1, 2, 2, 2]),
                "DimensionCount": 2,
                "Strides": [1, 1],
                "WindowSize": [2, 2],
                "StartPadding": [1, 1],
                "EndPadding": [0, 0],
                "Dilations": [1, 1],
                "IncludePadding": False,
            },
        },
        {
            "InputTensor": [10, 20, 30, 41, 0, 4, 8, 12],
            "InputScaleTensor": [1.0, 0.5],
            "InputZeroPointTensor": [10],
            "OutputScaleTensor": [0.5],
            "OutputZeroPointTensor": [0],
        },
        "2x2 means of the dequantized input (one scale per channel), padding not counted",
    ),
)
