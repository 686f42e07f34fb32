"""CONVOLUTION_INTEGER -> CAST to FLOAT32 as one cuDNN int8 convolution with a float32 output:
the CUDA lowering of the graph pair (``fastpath.register_epilogue``) that QDQ convolutions
become (``onnx/optimize/quantized.py``, ``QDQConvFusion``: the integer sums, then to float32
and times the scales).

CONVOLUTION_INTEGER's lax lowering sums the products as integer matrix products of strided
slices (XLA's GPU backend compiles integer convolutions only in cuDNN's int8 forms, and its
int8 convolution with int32 sums does not compile: benchmarks/experiments/README.md,
``int8_conv_gpu.py``). cuDNN's int8 convolution with a float32 output does: it sums the
products of the 8-bit values in int32 on the int8 tensor cores and converts the sum to float32
once, which is the pair's value, the exact sum then CAST's rounding to float32
(tests/test_int8_conv_kernel.py checks it against the two lax lowerings, sums past 2^24
included).

Taken where cuDNN has the form: 2-D, one group, no dilation, INT8 input and filter (UINT8 has
no such convolution) without zero points (``QDQConvFusion`` leaves out zero points of 0, as
symmetric QDQ models have them), the filter and the result packed (the input may be a view:
``ChannelsLast`` hands it channels-last bytes). Channels in and out are padded with zeros to
multiples of 4 (cuDNN's int8 layouts hold four channels a word: a network's first convolution
reads three). The operands go to channels-last (NHWC and the filter as HWIO), as cuDNN's int8
convolutions read them, and the result back to NCHW.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
from jax import lax

from ..fastpath import register_epilogue

# channels a word of cuDNN's int8 layouts: the channel counts it takes are multiples of it
CHANNELS_WORD = 4
# A convolution of fewer input channels than this (a network's first, on three colours) whose
# sums cannot reach 2^24 runs on float16 operands with float32 sums instead: exact there, and
# cuDNN's int8 engines for four padded channels were slow and unsteady (ResNet-50's 7 x 7
# stem at batch 64 on an H200: 0.9 ms in one process, 9.4 in another, by what its autotuning
# picked; the float16 model's whole network took 2.55). XLA runs it as a TF32 implicit GEMM
# (368 us there); its windows gathered channels-last and one float16 product instead made the
# network slower (6.72 against 6.14 ms a call, 2026-11-29), so that form was removed.
FEW_CHANNELS = 16


def _applies(conv: Any, cast: Any, slot: int) -> bool:
    x, w, y = conv.input_tensor, conv.filter_tensor, conv.output_tensor
    if slot != 0 or cast.output_tensor.data_type.name != "FLOAT32":
        return False
    if conv.input_zero_point_tensor is not None or conv.filter_zero_point_tensor is not None:
        return False
    if x.data_type.name != "INT8" or w.data_type.name != "INT8" or x.rank != 4:
        return False
    if conv.group_count != 1 or any(d != 1 for d in conv.dilations):
        return False
    # x may be read through strides (ChannelsLast hands it channels-last bytes): the graph
    # gives the lowering its logical tensor either way
    return w.is_packed and y.is_packed and cast.input_tensor == y


def int8_convolution(x, w, strides, padding):
    """x {N, C, H, W} by w {K, C, kH, kW}, both int8: the exact sums rounded to float32, by
    cuDNN's int8 convolution on channels-last operands, {N, K, outputs...}. Channels in and
    out padded with zeros to multiples of ``CHANNELS_WORD`` (a zero adds nothing to a sum; the
    padded outputs are dropped)."""
    c, k = x.shape[1], w.shape[0]
    taps = c * w.shape[2] * w.shape[3]
    if c < FEW_CHANNELS and taps * 128 * 128 <= 2**24:
        # every partial sum of products of int8 values is an integer below 2^24 in magnitude:
        # float16 operands (which hold every int8 value) summed in float32 give the exact sum
        y = lax.conv_general_dilated(
            x.astype(jnp.float16), w.astype(jnp.float16), tuple(strides), tuple(padding),
            dimension_numbers=("NCHW", "OIHW", "NCHW"), preferred_element_type=jnp.float32,
        )  # fmt: skip
        return y
    pc, pk = -c % CHANNELS_WORD, -k % CHANNELS_WORD
    if pc:
        x = jnp.pad(x, ((0, 0), (0, pc), (0, 0), (0, 0)))
    if pc or pk:
        w = jnp.pad(w, ((0, pk), (0, pc), (0, 0), (0, 0)))
    y = lax.conv_general_dilated(
        jnp.transpose(x, (0, 2, 3, 1)),
        jnp.transpose(w, (2, 3, 1, 0)),
        tuple(strides),
        tuple(padding),
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
        preferred_element_type=jnp.float32,
    )
    return jnp.transpose(y[..., :k], (0, 3, 1, 2))


def _lower(conv: Any, cast: Any, slot: int, producer, others):
    x, w = producer
    padding = list(zip(conv.start_padding, conv.end_padding))
    return (int8_convolution(x, w, conv.strides, padding),)


register_epilogue(
    "DML_OPERATOR_CONVOLUTION_INTEGER", "DML_OPERATOR_CAST", "cudnn_int8", _applies, _lower
)
