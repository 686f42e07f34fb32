"""An int8 convolution that requantizes its sums in its own epilogue, as one Pallas (Triton)
kernel: the CUDA lowering of the graph run (``fastpath.register_chain``) CONVOLUTION_INTEGER ->
CAST to FLOAT32 -> ELEMENT_WISE_MULTIPLY by one scale a channel -> [ELEMENT_WISE_ADD1 of one
bias a channel] -> [ACTIVATION_RELU] -> [ELEMENT_WISE_CLIP] -> ELEMENT_WISE_QUANTIZE_LINEAR by
one scale, which a static QDQ convolution and the quantizer of its output become
(``onnx/optimize/quantized.py``, ``QDQConvFusion``), and the fast path of
QUANTIZED_LINEAR_CONVOLUTION (ONNX's QLinearConv), whose requantization is the same steps with
its INT32 bias added to the sums. 1x1 filters and windows up to ``MAX_WINDOW``.

Without it the run is cuDNN's int8 convolution with float32 sums (``int8_conv``), written out,
then XLA's fusion of the rest reading them back: eight bytes moved a value where the result is
one. Here the product runs on the int8 tensor cores (Triton's int8 MMA) over the input's rows
channels-last (M = N * H * W rows of C channels, by the filter as {K, C}), and the chain runs
on the accumulator: the sums to float32 (rounded to nearest even, as CAST), times the channel's
scale, plus the bias (PTX ``add.rn``: never contracted into a fused multiply-add, which would
round once where the two lowerings round twice), the ReLU, the clip, then the quantizer: the
correctly rounded quotient by the output scale rounded half to even (by fused multiply-adds,
``FMA_QUOTIENT``, or as the quantizers' lax lowering rounds on CUDA), plus the zero point,
saturated; one byte written a value. Equal to the nodes' lax lowerings in sequence
(tests/test_int8_qdq_conv_kernel.py; where a value is NaN the ReLU here gives 0 and the lax
lowering NaN, and the quantizer turns both into the zero point). On an H200, ResNet-50's nine
1x1 shapes at batch 64 ran 1.07-2.32x faster than cuDNN's convolution and XLA's fusion
(benchmarks/experiments/README.md, ``int8_qdq_gemm_gpu.py``).

Taken where: one group, an INT8 or UINT8 input (with a zero point or none) and an INT8
filter without one; a 1x1 filter without padding (strides taken by reading the input's strided
rows first), or a window of at most ``MAX_WINDOW``, undilated, padded by less than the window
(``qdq_convolution`` says how; at strides (sy, sx) as sy * sx * C channels); C (channels in,
padded with zeros to a multiple of 32 or a power of two: ``padded_channels``) times the
window's taps at most ``MAX_C``; K (channels out) any (zero filters to a multiple of 32,
dropped after); MULTIPLY's and ADD1's other operand one FLOAT32 value a channel (broadcast:
stride 0 but along the channels), ADD1's fused activation none or ReLU; CLIP without a scale
and bias; QUANTIZE_LINEAR's scale one value (every stride 0) and its zero point absent or one
value, into INT8 or UINT8. Every tensor after the convolution packed, listed {N, K, H, W} or
channels-last {N, H, W, K} (ChannelsLast's rewrite), each node reading the one before as
written or through the other listing's view (``layouts``).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..fastpath import register_chain, register_fast_path
from ..ops import _quant
from .pallas_helpers import is_nan, load_pallas, nearest_quotient, ptx

# Tunables, from int8_qdq_gemm_gpu.py on an H200: 128 rows a program, 8 warps, 3 stages.
BLOCK_M = 128
WARPS = 8
STAGES = 3
MAX_C = 1 << 16  # products a sum (C times the window's taps): |sums| <= 2^14 * that < 2^31
# The largest filter window taken. On an H200 (benchmarks/experiments/README.md) ResNet-50's 3x3
# convolutions here and as cuDNN's int8 convolution with XLA's requantizing fusion ran the
# network at the same speed (3.22 against 3.20 ms a call at batch 64), but cuDNN's int8
# convolutions are autotuned when the program compiles, engine by engine: the first call 27.7 s
# with them, 11.6 s with every convolution here (the float16 export's 5.3 s). The 7x7/2 stem
# here ran 1.94x cuDNN's and XLA's fusion alone; with UINT8 activations (a zero point: XLA's
# own integer product otherwise) the network took 30.3 ms with its 3x3 convolutions elsewhere
# and 3.3 here.
MAX_WINDOW = 7
# Whether the quantizer's quotient is rounded by PTX's fused multiply-adds from the scale's
# reciprocal (``pallas_helpers.nearest_quotient``: ten PTX instructions an element, the scale's
# terms once a program) rather than by the lax lowering's CUDA form, an approximate quotient and
# one exact residual from 12-bit halves of the scale (``_quant._nearest_steps``, some seventeen):
# the same correctly rounded quotient (Markstein's theorem; 13.1M quotients beside halfway
# points and at random, NumPy's float32 division rounded half to even, none different, and
# tests/test_ptx_quotient.py runs the PTX itself so on the CPU; natively on an H200 both forms
# equal the definition bit for bit). What the kernel spends on its output-heavy shapes is that
# epilogue (51M outputs in 87 us where their bytes take about 15): in the sm_90a SASS of the 64
# -> 256 1x1 kernel (Triton 3.8, on the CPU) 2,000 -> 1,536 instructions a thread (its
# conversion's own saturation then taking the clip's place). One H200, 2026-11-30
# (``int8_qdq_gemm_gpu.py``, ResNet-50's nine 1x1 shapes at batch 64, two runs): that shape
# 103.1 / 98.1 -> 83.8 / 83.8 us, the others within the runs' spread (0.8-1.2x either way).
# The network not yet timed: ``quantized_models_gpu.py --only resnet50 --forms int8`` with and
# without ``--set dml_jax.kernels.int8_qdq_conv.FMA_QUOTIENT=False``.
FMA_QUOTIENT = True


def _listed(nkhw: tuple, channels_last: bool) -> tuple:
    n, k, h, w = nkhw
    return (n, h, w, k) if channels_last else nkhw


def _view_of(writer: Any, reader: Any, nkhw: tuple, channels_last: bool) -> bool | None:
    """How ``reader`` reads ``writer``'s packed output (listed channels-last or not): None
    where it is no listing of the same {N, K, H, W} values, else whether the reader lists
    them channels-last (the same desc, or the other listing's view of the bytes, as
    ChannelsLast hands them between nodes)."""
    if not writer.is_packed or writer.sizes != _listed(nkhw, channels_last):
        return None
    if reader.data_type != writer.data_type:
        return None
    read = (reader.sizes, reader.layout_strides)
    if read == (writer.sizes, writer.layout_strides):
        return channels_last
    n, k, h, w = nkhw
    if channels_last:  # NHWC bytes read as {N, K, H, W}
        view = (nkhw, (h * w * k, 1, w * k, k))
    else:  # NCHW bytes read as {N, H, W, K}
        view = ((n, h, w, k), (k * h * w, w, 1, h * w))
    return not channels_last if read == view else None


def _per_channel(t: Any, sizes: tuple, axis: int) -> bool:
    """A FLOAT32 operand of ``sizes`` read as one value a channel (``axis``)."""
    if t is None or t.data_type.name != "FLOAT32" or t.sizes != sizes:
        return False
    return all(s == 0 for i, s in enumerate(t.layout_strides) if i != axis)


def _one_value(t: Any, sizes: tuple) -> bool:
    return t.sizes == sizes and all(s == 0 for s in t.layout_strides)


def _blocks(n: int) -> int:
    """A block of channels (in or out) of ``n``, a multiple of 32: the largest of 128, 64, 32
    dividing it."""
    return next(b for b in (128, 64, 32) if n % b == 0)


def _kind(d: Any) -> str:
    return d.operator_type.removeprefix("DML_OPERATOR_")


def _steps_apply(descs: tuple) -> bool:
    """The run's operators: the convolution, CAST, MULTIPLY, then ADD1 (a bias),
    ACTIVATION_RELU and CLIP (ReLU6, as MobileNet's) where present, in that order, and
    QUANTIZE_LINEAR last."""
    kinds = [_kind(d) for d in descs]
    if len(kinds) < 4 or kinds[:3] != ["CONVOLUTION_INTEGER", "CAST", "ELEMENT_WISE_MULTIPLY"]:
        return False
    order = ("ELEMENT_WISE_ADD1", "ACTIVATION_RELU", "ELEMENT_WISE_CLIP")
    middle = ["ELEMENT_WISE_CLIP" if _clips(k) else k for k in kinds[3:-1]]
    places = [order.index(k) if k in order else -1 for k in middle]
    return (
        kinds[-1] == "ELEMENT_WISE_QUANTIZE_LINEAR"
        and -1 not in places
        and places == sorted(set(places))
    )


def _clips(kind: str) -> bool:
    return kind in ("ELEMENT_WISE_CLIP", "ELEMENT_WISE_CLIP1")


def _conv_applies(conv: Any, filter_zero: bool = False) -> bool:
    """The convolution's part of the conditions (``filter_zero``: a filter zero point may be
    present, for the lowering to find 0)."""
    x, w, y = conv.input_tensor, conv.filter_tensor, conv.output_tensor
    if conv.filter_zero_point_tensor is not None and not filter_zero:
        return False
    if x.data_type.name not in ("INT8", "UINT8") or w.data_type.name != "INT8" or x.rank != 4:
        return False
    if conv.group_count != 1 or not w.is_packed or not y.is_packed:
        return False
    window = tuple(w.sizes[2:])
    if window != (1, 1):  # a window: undilated, padded by less than the window
        if max(window) > MAX_WINDOW:
            return False
        if any(d != 1 for d in conv.dilations):
            return False
        pads = zip(conv.start_padding, conv.end_padding, window)
        if any(p >= size or q >= size for p, q, size in pads):
            return False
    elif any(conv.start_padding) or any(conv.end_padding):
        return False
    c = x.sizes[1]
    (sy, sx), (kh, kw) = conv.strides, window
    strided = window != (1, 1) and (sy, sx) != (1, 1)
    cells = sy * sx if strided else 1  # the input's channels a space-to-depth cell holds
    taps = -(-kh // sy) * -(-kw // sx) if strided else kh * kw
    return padded_channels(c, cells) * cells * taps <= MAX_C


def padded_channels(c: int, cells: int) -> int:
    """The channels in the kernel reads of C = ``c`` (``cells`` of them a space-to-depth cell),
    zeros past C: from 32, C up to a multiple of 32 (MobileNet's 144: 160); fewer than 32 (a
    network's first convolution, on three colours) up to the next power of two, and so that a
    cell holds at least 32."""
    if c >= 32:
        return -(-c // 32) * 32
    power = 1 << (c - 1).bit_length()
    return max(power, -(-32 // cells))


def layouts(descs: tuple, slots: tuple) -> tuple[bool, ...] | None:
    """Whether each node after the convolution lists its tensors channels-last (ChannelsLast's
    rewrite), where the run is one this kernel computes; None where it is not."""
    if not _steps_apply(descs) or not _conv_applies(descs[0]) or slots[0] != 0:
        return None
    nkhw = descs[0].output_tensor.sizes
    listing, writer, out = [], descs[0].output_tensor, False
    for d, slot in zip(descs[1:], slots):
        ins = [t for _, t in d.input_slots() if t is not None]
        if slot >= len(ins):
            return None
        last = _view_of(writer, ins[slot], nkhw, out)
        if last is None:
            return None
        sizes = _listed(nkhw, last)
        if _kind(d) in ("ELEMENT_WISE_MULTIPLY", "ELEMENT_WISE_ADD1"):
            if not _per_channel(ins[1 - slot], sizes, 3 if last else 1):
                return None
            act = getattr(d, "fused_activation", None)
            if act is not None and _kind(act) != "ACTIVATION_RELU":
                return None
        elif _clips(_kind(d)):
            if d.scale_bias is not None:
                return None
        elif _kind(d) == "ELEMENT_WISE_QUANTIZE_LINEAR":
            scale, zero = d.scale_tensor, d.zero_point_tensor
            if scale.data_type.name != "FLOAT32" or not _one_value(scale, sizes):
                return None
            if zero is not None and not _one_value(zero, sizes):
                return None
            if d.output_tensor.data_type.name not in ("INT8", "UINT8"):
                return None
        wanted = d.output_tensor.data_type.name if d is descs[-1] else "FLOAT32"
        if d.output_tensor.sizes != sizes or not d.output_tensor.is_packed:
            return None
        if d.output_tensor.data_type.name != wanted:
            return None
        listing.append(last)
        writer, out = d.output_tensor, last
    return tuple(listing)


def _applies(descs: tuple, slots: tuple) -> bool:
    return layouts(descs, slots) is not None


def qdq_convolution(
    x, w, scale, bias, out_scale, zero, strides, out_type, relu: bool,
    channels_last: bool = False, interpret: bool = False, padding=((0, 0), (0, 0)),
    x_zero=None, int_bias=None, clip=None,
):  # fmt: skip
    """x {N, C, H, W} int8 by w {K, C, kH, kW} int8 at ``strides``, ``padding`` ((top, bottom),
    (left, right)) of zeros around x (none for a 1x1 filter): the sums to float32,
    times ``scale`` {K}, plus ``bias`` {K} (or None), ReLU where ``relu``, clipped to ``clip``
    ((lo, hi) Python floats, or None: CLIP's ``max(lo, min(v, hi))``, NaN kept), quantized by
    ``out_scale`` {1} with the zero point ``zero`` {1} (float32) into ``out_type`` (a
    DataType): {N, K, H', W'}, or {N, H', W', K} where ``channels_last``. ``interpret`` runs
    the kernel in Pallas's interpreter (any machine; PTX's add is then XLA's). x may be UINT8
    and have a zero point ``x_zero`` (one value, x's type; padding reads as it): the product
    runs on int8 values (a UINT8 value less 128) and the accumulator less that zero point times
    the filter's sums (``zp8 * sum(w)``, exact in int32 within ``MAX_C``) is the sum of
    ``(x - x_zero) * w``. ``int_bias`` {K} (int32, or None) is added to the integer sums
    before they become float32 (QUANTIZED_LINEAR_CONVOLUTION's bias).

    A window's sums are one product a tap of the window over the input's rows channels-last,
    padded: output position (n, y, x) of the padded grid reads row ``r + i * Wp + j`` for tap
    (i, j), where ``r`` is its own row, so each tap's rows for a block of positions are one
    contiguous block. The kernel computes every position of the padded grid (those past the
    output's edge read rows of the next image or of zeros, and are dropped after): a
    (Hp * Wp) / (H' * W') share more products. A window at strides (sy, sx) is first the same
    sums at strides 1 (``_space_to_depth``)."""
    pl, pltriton = load_pallas()
    kh, kw = w.shape[2:]
    k_out = w.shape[0]
    more_k = -(-k_out // 32) * 32 - k_out  # channels out to a multiple of 32: zero filters
    if more_k:
        w = jnp.pad(w, ((0, more_k), (0, 0), (0, 0), (0, 0)))
        scale = jnp.pad(scale, (0, more_k))
        bias = None if bias is None else jnp.pad(bias, (0, more_k))
        int_bias = None if int_bias is None else jnp.pad(int_bias, (0, more_k))
    if (kh, kw) == (1, 1) and tuple(strides) != (1, 1):
        x = x[:, :, :: strides[0], :: strides[1]]
    shift = 128 if x.dtype == jnp.uint8 else 0
    if shift:
        x = (x.astype(jnp.int16) - shift).astype(jnp.int8)
    zp8 = None if x_zero is None else jnp.asarray(x_zero).reshape(()).astype(jnp.int32) - shift
    if zp8 is None and shift:
        zp8 = jnp.int32(-shift)
    fill = 0 if zp8 is None else zp8.astype(jnp.int8)  # what padding reads: the zero point
    # the filter's sums, one a channel out, where a zero point's share comes off them
    sums = (jnp.zeros((w.shape[0],), jnp.int32) if zp8 is None
            else jnp.sum(w.astype(jnp.int32), axis=(1, 2, 3)))  # fmt: skip
    xs = jnp.transpose(x, (0, 2, 3, 1))
    if any(p for pair in padding for p in pair):
        xs = jnp.pad(xs, ((0, 0), *padding, (0, 0)), constant_values=fill)
    out_h, out_w = xs.shape[1] - kh + 1, xs.shape[2] - kw + 1
    strided = (kh, kw) != (1, 1) and tuple(strides) != (1, 1)
    more = padded_channels(xs.shape[3], strides[0] * strides[1] if strided else 1) - xs.shape[3]
    if more:  # few channels: zeros (they add nothing to a sum)
        xs = jnp.pad(xs, ((0, 0), (0, 0), (0, 0), (0, more)))
        w = jnp.pad(w, ((0, 0), (0, more), (0, 0), (0, 0)))
    if strided:
        out_h, out_w = ((xs.shape[i + 1] - w.shape[i + 2]) // strides[i] + 1 for i in (0, 1))
        xs, w = _space_to_depth(xs, w, strides)
        kh, kw = w.shape[2:]
    n, c = xs.shape[0], xs.shape[3]
    k = w.shape[0]
    hp, wp = xs.shape[1:3]

    m = n * hp * wp  # positions computed: the padded grid (the output itself for 1x1)
    a = xs.reshape(m, c)
    b = jnp.transpose(w, (2, 3, 0, 1)).reshape(kh * kw, k, c)
    offsets = [i * wp + j for i in range(kh) for j in range(kw)]
    bm, bn, bk = BLOCK_M, _blocks(k), _blocks(c)
    rows = -(-m // bm) * bm  # whole blocks of rows; the padding's rows dropped after
    reach = rows + offsets[-1]  # the rows the last block's last tap reads
    if reach != m:
        a = jnp.pad(a, ((0, reach - m), (0, 0)))
    lo, hi = (float(v) for v in out_type.integer_range)
    has_bias = bias is not None
    if bias is None:
        bias = jnp.zeros((k,), jnp.float32)
    blocks = c // bk
    whole = len(offsets) > 1  # the input whole, each tap's rows read from it at their offset

    corrected = zp8 is not None
    zp8 = jnp.reshape(zp8 if corrected else jnp.int32(0), (1,))
    has_int_bias = int_bias is not None
    if int_bias is None:
        int_bias = jnp.zeros((k,), jnp.int32)

    def kernel(a_ref, b_ref, s_ref, c_ref, y_ref, z_ref, p_ref, u_ref, i_ref, o_ref):
        first = pl.program_id(0) * bm if whole else 0
        tap_b = pl.ds(pl.program_id(1) * bn, bn) if whole else slice(None)

        def body(t, acc):
            tap, part = _divmod(t, blocks)
            i, j = _divmod(tap, kw)
            off = i * wp + j if whole else 0
            lhs = a_ref[pl.ds(first + off, bm), pl.ds(part * bk, bk)]
            rhs = b_ref[tap, tap_b, pl.ds(part * bk, bk)].T
            return acc + jnp.dot(lhs, rhs, preferred_element_type=jnp.int32)

        acc = lax.fori_loop(0, len(offsets) * blocks, body, jnp.zeros((bm, bn), jnp.int32))
        cols = pl.ds(pl.program_id(1) * bn, bn) if whole else slice(None)
        if corrected:  # less the zero point's share: zp8 times the filter's sums
            acc = acc - p_ref[...][None, :] * u_ref[cols][None, :]
        if has_int_bias:
            acc = acc + i_ref[cols][None, :]
        v = acc.astype(jnp.float32) * s_ref[cols][None, :]
        if has_bias:
            t = jnp.broadcast_to(c_ref[cols][None, :], v.shape)
            v = v + t if interpret else ptx("add.rn.f32", v, t)
        if relu:
            v = jnp.where(v > 0, v, jnp.float32(0))
        if clip is not None:  # min then max (lo above hi gives lo); NaN stays NaN
            v = jnp.where(v > clip[1], jnp.float32(clip[1]), v)
            v = jnp.where(v < clip[0], jnp.float32(clip[0]), v)
        q = _quantized(v, y_ref[...], z_ref[...], lo, hi, out_type.numpy_dtype, interpret)
        if whole:
            o_ref[pl.ds(first, bm), cols] = q
        else:
            o_ref[...] = q

    specs = {} if whole else {
        "in_specs": [
            pl.BlockSpec((bm, c), lambda i, j: (i, 0)),
            pl.BlockSpec((1, bn, c), lambda i, j: (0, j, 0)),
            pl.BlockSpec((bn,), lambda i, j: (j,)),
            pl.BlockSpec((bn,), lambda i, j: (j,)),
            pl.BlockSpec((1,), lambda i, j: (0,)),
            pl.BlockSpec((1,), lambda i, j: (0,)),
            pl.BlockSpec((1,), lambda i, j: (0,)),
            pl.BlockSpec((bn,), lambda i, j: (j,)),
            pl.BlockSpec((bn,), lambda i, j: (j,)),
        ],
        "out_specs": pl.BlockSpec((bm, bn), lambda i, j: (i, j)),
    }  # fmt: skip
    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((rows, k), out_type.numpy_dtype),
        grid=(rows // bm, k // bn),
        interpret=interpret,
        compiler_params=pltriton.CompilerParams(num_warps=WARPS, num_stages=STAGES),
        **specs,
    )(a, b, scale, bias, out_scale, zero, zp8, sums, int_bias)
    out = out[:m].reshape(n, hp, wp, k)[:, :out_h, :out_w, :k_out]
    return out if channels_last else jnp.transpose(out, (0, 3, 1, 2))


def _quantized(v, y, z, lo: float, hi: float, dtype, interpret: bool):
    """The quantizer on the block ``v``: ``round_half_even(v / y) + z`` ({1} each) saturated to
    [lo, hi] in ``dtype``, the quotient correctly rounded first, the zero point where it is
    NaN. By fused multiply-adds from the scale's correctly rounded reciprocal, computed once a
    program (``FMA_QUOTIENT``; NaN quotients come out 0, and the conversion's own clamp, as
    JAX's, saturates where [lo, hi] is the type's range), or as the quantizers' lax lowering
    rounds on CUDA (``_quant._nearest_steps``, also the interpreter's)."""
    if interpret or not FMA_QUOTIENT:
        q = _quant._nearest_steps.__wrapped__(v, jnp.broadcast_to(y, v.shape))
        nan = jnp.isnan(q) if interpret else is_nan(q)
        q = jnp.where(nan, z, jnp.clip(q + z, jnp.float32(lo), jnp.float32(hi)))
        return q.astype(dtype)
    power, ys = _quant.scaled_divisor(y)
    inv = ptx("rcp.rn.f32", ys)
    q = nearest_quotient(v * power, *(jnp.broadcast_to(t, v.shape) for t in (ys, inv))) + z
    info = np.iinfo(dtype)
    if (lo, hi) != (info.min, info.max):
        q = jnp.clip(q, jnp.float32(lo), jnp.float32(hi))
    return q.astype(dtype)


def _divmod(a, b: int) -> tuple:
    """``divmod`` of a traced int32 by a Python int: (a, 0) by 1, else by an int32 constant
    (by the Python int 1 itself Pallas's Triton lowering made a boolean constant and failed;
    interpret mode does not show it: tests/test_int8_qdq_conv_kernel.py lowers for CUDA)."""
    if b == 1:
        return a, 0
    return a // jnp.int32(b), a % jnp.int32(b)


def _space_to_depth(xs, w, strides) -> tuple:
    """The padded input xs {N, Hp, Wp, C} and filter w {K, C, kH, kW} of a convolution at
    ``strides`` (sy, sx) as the input and filter of one at strides 1 with the same sums at
    its first positions: xs' {N, Hp / sy, Wp / sx, sy * sx * C} holds xs[n, sy * y + a,
    sx * x + b, c] at channel (a * sx + b) * C + c, and w' {K, sy * sx * C, ceil(kH / sy),
    ceil(kW / sx)} holds w[k, c, sy * i + a, sx * j + b] (0 past the window) there. xs is
    padded to whole cells first (those rows meet only the zeros past the window in w', so
    their values, a zero point's or not, add nothing)."""
    (sy, sx), (n, hp, wp, c), (k, _, kh, kw) = strides, xs.shape, w.shape
    th, tw = -(-kh // sy), -(-kw // sx)  # the window in cells
    # whole cells (the last position's window, floor((Hp - kH) / sy) + ceil(kH / sy) cells,
    # never reaches past ceil(Hp / sy) of them)
    cells_h, cells_w = -(-hp // sy), -(-wp // sx)
    xs = jnp.pad(xs, ((0, 0), (0, cells_h * sy - hp), (0, cells_w * sx - wp), (0, 0)))
    xs = xs.reshape(n, cells_h, sy, cells_w, sx, c).transpose(0, 1, 3, 2, 4, 5)
    xs = xs.reshape(n, cells_h, cells_w, sy * sx * c)
    w = jnp.pad(w, ((0, 0), (0, 0), (0, th * sy - kh), (0, tw * sx - kw)))
    w = w.reshape(k, c, th, sy, tw, sx).transpose(0, 3, 5, 1, 2, 4)
    return xs, w.reshape(k, sy * sx * c, th, tw)


def _channel_values(t: Any, channels_last: bool) -> Any:
    """An operand read as one value a channel: its {K} values."""
    return (t[0, 0, 0, :] if channels_last else t[0, :, 0, 0]).astype(jnp.float32)


def _lower(descs: tuple, slots: tuple, groups: list) -> tuple:
    listing = layouts(descs, slots)
    conv, quant = descs[0], descs[-1]
    x, *x_zero, w = groups[0]  # the input's zero point where present
    scale = _channel_values(groups[2][0], listing[1])
    bias, relu, clip = None, False, None
    for d, group, last in zip(descs[3:-1], groups[3:-1], listing[2:-1]):
        if _kind(d) == "ELEMENT_WISE_ADD1":
            bias = _channel_values(group[0], last)
            relu = relu or d.fused_activation is not None
        elif _clips(_kind(d)):
            clip = tuple(float(v) for v in d.bounds())
        else:
            relu = True
    out_scale = groups[-1][0].reshape(-1)[:1].astype(jnp.float32)
    zero = jnp.zeros((1,), jnp.float32)
    if quant.zero_point_tensor is not None:
        zp = _quant.held(groups[-1][1], quant.zero_point_tensor.data_type)
        zero = zp.reshape(-1)[:1].astype(jnp.float32)
    out_type = quant.output_tensor.data_type
    padding = tuple(zip(conv.start_padding, conv.end_padding))
    return (
        qdq_convolution(
            x, w, scale, bias, out_scale, zero, conv.strides, out_type, relu, listing[-1],
            padding=padding, x_zero=x_zero[0] if x_zero else None, clip=clip,
        ),
    )  # fmt: skip


register_chain("DML_OPERATOR_CONVOLUTION_INTEGER", "int8_qdq", _applies, _lower, longest=7)


# ---------------------------------------------------------------------------------------------
# QUANTIZED_LINEAR_CONVOLUTION (QLinearConv): the same kernel, its requantization the operator's


def _quantized_applies(d: Any) -> bool:
    """QUANTIZED_LINEAR_CONVOLUTION where the kernel computes it: the convolution as the chain
    takes it (a filter zero point present only if the lowering finds it 0), one input scale,
    the filter's scales one or one a channel, one output scale and zero point, packed {N, K,
    H', W'} INT8 or UINT8 out."""
    if not _conv_applies(d, filter_zero=True):
        return False
    k = d.filter_tensor.sizes[0]
    one = all(t.element_count == 1 for t in (d.input_scale_tensor, d.output_scale_tensor))
    zero = d.output_zero_point_tensor
    return (
        one
        and d.filter_scale_tensor.element_count in (1, k)
        and (zero is None or zero.element_count == 1)
        and d.output_tensor.data_type.name in ("INT8", "UINT8")
    )


def _quantized_lower(d: Any, *arrays) -> tuple:
    from ..ops.quantized_conv import lower_quantized_convolution

    x = _quant.named_inputs(d, arrays)
    if d.filter_zero_point_tensor is not None:
        known = _quant.known_inputs(d)["filter_zero_point_tensor"]
        if known is None or np.any(np.asarray(known) != 0):  # a zero point to subtract
            return lower_quantized_convolution(d, *arrays)
    k = d.filter_tensor.sizes[0]
    # the operator's own float32 product of the two scales (the lax lowering's), one a channel
    scale = _quant.parameter(x["input_scale_tensor"], 4, 1) * _quant.parameter(
        x["filter_scale_tensor"], 4, 1
    )
    scale = jnp.broadcast_to(scale, (1, k, 1, 1)).reshape(k).astype(jnp.float32)
    bias = None if x["bias_tensor"] is None else x["bias_tensor"].reshape(k)
    out_type = d.output_tensor.data_type
    zero = jnp.zeros((1,), jnp.float32)
    if x["output_zero_point_tensor"] is not None:
        zp = _quant.held(x["output_zero_point_tensor"], d.output_zero_point_tensor.data_type)
        zero = zp.reshape(-1)[:1].astype(jnp.float32)
    out_scale = x["output_scale_tensor"].reshape(-1)[:1].astype(jnp.float32)
    x_zero = x["input_zero_point_tensor"]
    padding = tuple(zip(d.start_padding, d.end_padding))
    return (
        qdq_convolution(
            x["input_tensor"], x["filter_tensor"], scale, None, out_scale, zero, d.strides,
            out_type, False, padding=padding, int_bias=bias,
            x_zero=None if x_zero is None else x_zero.reshape(()),
        ),
    )  # fmt: skip


register_fast_path(
    "DML_OPERATOR_QUANTIZED_LINEAR_CONVOLUTION", "kernel", _quantized_applies, _quantized_lower
)
