"""The forms of CONVOLUTION's product (``gemm_conv.lower_conv`` picks one through ``convolve``):
1x1 convolutions and windows that tile the input as matrix products, depthwise convolutions as
their taps, patches of few channels, grouped convolutions one group at a time and Winograd's
F(2x2, 3x3) on the CPU, else XLA's convolution; each the same sums as the convolution's (the
measurements that chose them are in the constants' comments and
benchmarks/experiments/README.md).
"""

from __future__ import annotations

import itertools
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..fastpath import platform_choice
from ..precision import matmul_precision
from ._common import wide


def product_type(x):
    """The result type asked of XLA's dot / convolution: the input's own. For FLOAT16, XLA
    accumulates in float32 on every backend and rounds once (cuBLAS / cuDNN compute type
    float32; ``test_float16_accumulates_in_float32``); asking for a float32 result instead would
    add a float32 output pass (0.68-0.93 of jax's float16 GEMM on an H200,
    benchmarks/RESULTS.md#gemm_conv)."""
    return x.dtype


def dimension_numbers(rank: int):
    spatial = "DHW"[3 - (rank - 2) :]
    return ("NC" + spatial, "OI" + spatial, "NC" + spatial)


def convolve(x, w, strides, padding, lhs_dilation, dilations, g: int, pointwise: bool):
    """CONVOLUTION's product of ``x`` {N, C, ...} by the (already flipped, transposed) filter
    ``w`` {K, C / g, ...} as a forward cross-correlation, in the form that fits it on this
    platform: a matrix product for a 1x1 one (``pointwise``: forward, unit strides, no padding)
    or for windows that tile the input, depthwise taps, patches of few channels, one
    convolution a group, Winograd's F(2x2, 3x3) on the CPU, else XLA's convolution."""
    kernel = w.shape[2:]
    if pointwise and GPU_POINTWISE_PRODUCTS:
        return _pointwise_product(x, w, g)
    if pointwise:  # the product on the CPU, XLA's convolution elsewhere

        def conv(x, w):
            return _conv(x, w, strides, padding, lhs_dilation, dilations, g)

        return platform_choice(x, w, cpu=lambda x, w: _pointwise_product(x, w, g), default=conv)
    if _tiles_the_input(kernel, strides, lhs_dilation, dilations, g):
        return _patch_product(x, w, padding)
    if _is_depthwise(x, w, g):
        return _depthwise(x, w, strides, padding, lhs_dilation, dilations, g)
    if _few_channels(x, w, g):
        return _patches(x, w, strides, padding, lhs_dilation, dilations)
    if _split_groups(x, g):
        return _per_group(x, w, strides, padding, lhs_dilation, dilations, g)
    if _winograd_fits(x, w, strides, padding, lhs_dilation, dilations, g):
        return _winograd(x, w, padding)
    return _conv(x, w, strides, padding, lhs_dilation, dilations, g)


# Whether 1x1 convolutions are matrix products on accelerators too (on the CPU they always are).
# False gives them XLA's convolution there, which cuDNN may run channels-last beside the
# network's other convolutions. Timed on an H200 (2026-11-30, float16, batch 64,
# ``quantized_models_gpu.py``): ResNet-50 2.537 -> 2.402 ms a call with it off, 165 -> 139
# kernels, but MobileNetV2 1.565 -> 1.627 (the same kernel time; its first call 5.4 -> 7.0 s),
# so neither form wins every network and the products stay.
GPU_POINTWISE_PRODUCTS = True


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
    precision = {"precision": matmul_precision(), "preferred_element_type": product_type(x)}
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
        preferred_element_type=product_type(x),
    )  # {K, N, out...}
    return jnp.swapaxes(y, 0, 1)


# The most filter taps a depthwise convolution is unrolled over (a 7x7 or 3x3x3 window and
# 1-D windows to 64); longer windows stay one convolution, whose program does not grow with
# the window.
MAX_DEPTHWISE_TAPS = 64


def is_depthwise(channels: int, groups: int, kernel) -> bool:
    """One input channel per group (C = GroupCount > 1, any channel multiplier), a window of
    at most ``MAX_DEPTHWISE_TAPS`` taps: what runs as taps (``depthwise_taps``), float or
    integer (``quantized_conv``)."""
    return groups > 1 and channels == groups and math.prod(kernel) <= MAX_DEPTHWISE_TAPS


def _is_depthwise(x, w, g: int) -> bool:
    return is_depthwise(x.shape[1], g, w.shape[2:])


def _depthwise(x, w, strides, padding, lhs_dilation, dilations, g: int):
    """A depthwise convolution as taps (``depthwise_taps``) where that is the faster form: on
    the CPU always, elsewhere where the window is dilated; undilated windows elsewhere take the
    grouped convolution. Both sum the same products.

    Measured on an H100 (jax 0.11.2, float16, batch 64, whole ONNX models): with the dilated
    depthwise convolutions of DeepLabV3-MobileNetV3 as taps and the others as grouped
    convolutions, it ran 3.44 ms against 5.41 with every one a grouped convolution, and
    MobileNetV2, MobileNetV3 and EfficientNet-B0 ran 1.50, 1.28 and 2.17 ms against 1.92, 1.49
    and 2.69 with their undilated 3x3 windows as taps. On CUDA undilated windows of up to 7x7
    take a fast path instead (``kernels/depthwise.py``), for the first call: no cuDNN algorithm
    search or plan."""

    def taps(x, w, channels_last=False):
        return depthwise_taps(x, w, strides, padding, lhs_dilation, dilations, channels_last)

    def taps_last(x, w):
        return taps(x, w, channels_last=True)

    if any(d > 1 for d in dilations):
        return platform_choice(x, w, cpu=taps_last, default=taps)

    def grouped(x, w):
        return _conv(x, w, strides, padding, lhs_dilation, dilations, g)

    return platform_choice(x, w, cpu=taps_last, default=grouped)


def depthwise_taps(x, w, strides, padding, lhs_dilation, dilations, channels_last=False):
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

    ``channels_last``: the same sums over the input transposed to {N, spatial..., C} and the
    result transposed back, so that XLA cancels the transposes against a channels-last
    neighbour (a 1x1 convolution's matrix product) instead of transposing inside the taps'
    fusion. On two CPU cores a MobileNet-v2-like network at batch 1 ran 9.4 -> 3.5 ms so in
    float32, and its static QDQ form 22.6 -> 6.6 ms, torchvision's MobileNets, EfficientNet-B0
    and ConvNeXt-T 9-46% faster; ONNX's light ShuffleNet, whose depthwise convolutions sit
    between grouped ones and a channel shuffle, 15% slower (benchmarks/experiments/README.md,
    ``grouped_int8_conv_gpu.py``). The lowering cannot see its neighbours (the graph holds
    both networks' depthwise inputs packed {N, C, H, W}), so the CPU takes it for every float
    depthwise convolution. On an H100 the channels-last form was the faster one in networks
    too (``depthwise_taps_gpu.py``), but GPUs take it only for integers so far.
    """
    n, c = x.shape[:2]
    kernel = w.shape[2:]
    nd = len(kernel)
    m = w.shape[0] // c  # output channels per input channel: channel c*m + j reads channel c
    taps = wide(w).reshape((c, m) + kernel)
    last = (0,) + tuple(range(2, 2 + nd)) + (1,)  # {N, C, spatial...} -> {N, spatial..., C}
    xs = jnp.transpose(wide(x), last) if channels_last else wide(x)
    axis = 1 + nd if channels_last else 1  # the channels' axis of xs, and the spatial axes'
    first = 1 if channels_last else 2
    shape = [1] * (xs.ndim + 1)  # a tap's weights, {C, M} at the channels' axis
    shape[axis], shape[axis + 1] = c, m
    y = None
    out, windows = _windows(xs, kernel, strides, padding, lhs_dilation, dilations, first)
    for tap, window in windows:
        weight = taps[(slice(None), slice(None)) + tap].reshape(shape)
        term = jnp.expand_dims(window, axis + 1) * weight
        y = term if y is None else y + term
    if not channels_last:
        return y.reshape((n, c * m) + out).astype(product_type(x))
    y = y.reshape((n,) + out + (c * m,))
    return jnp.transpose(y, (0, 1 + nd) + tuple(range(1, 1 + nd))).astype(product_type(x))


def _windows(x, kernel, strides, padding, lhs_dilation, dilations, first: int = 2):
    """The output's spatial sizes, and for each tap of the window in row-major order the tap
    and the strided slice of ``x`` (padded by ``padding``, negative values cropping, and
    dilated by ``lhs_dilation``) that the tap meets at every output position. The spatial axes
    of ``x`` start at ``first`` (2: {N, C, spatial...}; 1: channels last)."""
    nd = len(kernel)
    rest = x.ndim - first - nd  # axes after the spatial ones (the channels, listed last)
    config = [(0, 0, 0)] * first
    config += [(lo, hi, dil - 1) for (lo, hi), dil in zip(padding, lhs_dilation)]
    config += [(0, 0, 0)] * rest
    xp = lax.pad(x, jnp.zeros((), x.dtype), config)
    extents = [(k - 1) * r + 1 for k, r in zip(kernel, dilations)]
    sizes = xp.shape[first : first + nd]
    out = tuple((size - e) // s + 1 for size, e, s in zip(sizes, extents, strides))
    head, tail = xp.shape[:first], xp.shape[first + nd :]

    def each():
        for tap in itertools.product(*(range(k) for k in kernel)):
            start = tuple(t * r for t, r in zip(tap, dilations))
            limit = tuple(b + (o - 1) * s + 1 for b, o, s in zip(start, out, strides))
            yield tap, lax.slice(
                xp, (0,) * first + start + (0,) * rest, head + limit + tail,
                (1,) * first + tuple(strides) + (1,) * rest,
            )  # fmt: skip

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
            preferred_element_type=product_type(x),
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
        return jnp.swapaxes(y, 0, 1).astype(product_type(x))

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
        dimension_numbers=dimension_numbers(x.ndim),
        feature_group_count=g,
        precision=matmul_precision(),
        preferred_element_type=product_type(x),
    )
