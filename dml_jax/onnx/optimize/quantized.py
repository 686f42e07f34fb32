"""Quantized products. Recognized in QDQ models: a GEMM both of whose operands are
ELEMENT_WISE_DEQUANTIZE_LINEAR outputs (the DequantizeLinear -> MatMul of onnxruntime's
``QuantFormat.QDQ`` exports) becomes one MATRIX_MULTIPLY_INTEGER_TO_FLOAT over the 8-bit
values, as onnxruntime's QDQ transformers turn such a node unit into MatMulIntegerToFloat or
QLinearMatMul: the product runs on integers (int8 tensor cores on a GPU, through that
operator's fast path) and the scales are applied once to its sums.

The value differs from the float GEMM over the dequantized operands only by rounding: the
integer form sums the exact products of ``(a - za)`` and ``(b - zb)`` and multiplies the sum by
``sa * sb`` once, where the float form rounds each dequantized operand and accumulates in
floating point (docs/semantics.md, "QDQ products").

QDQ convolutions likewise (``QDQConvFusion``): a CONVOLUTION of two DEQUANTIZE outputs becomes
CONVOLUTION_INTEGER over the 8-bit values, its sums cast to float32 and multiplied by the
scales' product (one value a channel), then the bias, as onnxruntime makes such a node unit a
QLinearConv (on a GPU the integer convolution and its cast run as cuDNN's int8 convolution,
``kernels/int8_conv.py``).

Joined in weight-only quantized models (com.microsoft MatMulNBits): the GEMMs of one A by
4-bit weights dequantized in blocks (a decoder's query, key and value projections; its gate
and up projections) become one DEQUANTIZE of the weights joined along N and one GEMM, whose
output a SPLIT gives back (``ParallelQuantizedGemms``), as XLA joins such float products
itself: one 4-bit kernel a group on a GPU (``kernels/int4_gemm.py``) rather than one a
projection, each product wider. The values are the same products (the codes and zero points
are joined at import, the scales by a JOIN), summed per column as before.

QDQ products are taken where the GEMM has no transposes, Alpha 1, no fused activation and at most a C of the
output's sizes with Beta 1 (the bias), and where each DEQUANTIZE reads its 8-bit input packed,
writes its output packed, and has one scale (and zero point) for the whole tensor, or, for B,
one per column (``per_channel`` weights); A and B of one 8-bit type (DirectML's operator takes
no mix). Anything else keeps its GEMM.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ...enums import DataType
from ...graph import ConstantDataNode
from ...graph.validation import constant_elements
from ...tensor import TensorDesc, pack_4bit
from . import Editor, op_class, rewrite

DEQUANTIZE = "ELEMENT_WISE_DEQUANTIZE_LINEAR"


def _collapsed(desc: TensorDesc | None, rank: int) -> TensorDesc | None:
    """A broadcast parameter desc (stride 0 on every repeated axis) as the parameter itself at
    ``rank`` (leading axes of size 1 added): size 1 on the repeated axes, the others as they
    were; None when absent."""
    if desc is None or desc.rank > rank:
        return None
    lead = rank - desc.rank
    strides = (0,) * lead + desc.layout_strides
    sizes = (1,) * lead + tuple(1 if s == 0 else n for n, s in zip(desc.sizes, desc.layout_strides))
    return TensorDesc(desc.data_type, sizes, strides=strides)


def _per(desc: TensorDesc | None, axis: int | None) -> bool:
    """Whether ``desc`` (collapsed) holds one value, or one per index of ``axis``."""
    if desc is None:
        return True
    return all(n == 1 for k, n in enumerate(desc.sizes) if k != axis)


def _operand(g: Editor, n: int, slot: int, read: TensorDesc, axis: int | None):
    """The 8-bit operand behind input ``slot`` of GEMM ``n`` when a DEQUANTIZE writes it: the
    GEMM's view of it in the 8-bit type, its scale and zero point descs (collapsed), and their
    sources; else None."""
    src = g.producer(n, slot, DEQUANTIZE)
    if src is None:
        return None
    deq = g.nodes[src[0]]
    x, out = deq.input_tensor, deq.output_tensor
    if x.data_type.name not in ("INT8", "UINT8") or not (x.is_packed and out.is_packed):
        return None
    lead = read.rank - out.rank  # the GEMM may read it with leading axes of size 1 added
    if x.sizes != out.sizes or lead < 0 or read.sizes != (1,) * lead + out.sizes:
        return None
    if not g.reads_packed(n, slot):
        return None  # a view other than those leading axes
    scale = _collapsed(deq.scale_tensor, read.rank)
    zero = _collapsed(deq.zero_point_tensor, read.rank)
    if scale is None or (deq.zero_point_tensor is not None and zero is None):
        return None
    if not (_per(scale, axis) and _per(zero, axis)):
        return None
    view = read.like(data_type=x.data_type)
    m = src[0]
    return view, scale, zero, [g.source(m, 0), g.source(m, 1), g.source(m, 2)]


@rewrite("QDQMatMulFusion", "extended")
def qdq_matmul(g: Editor) -> int:
    """GEMM of two DEQUANTIZE outputs: MATRIX_MULTIPLY_INTEGER_TO_FLOAT over their 8-bit
    inputs."""
    desc_class = op_class("MATRIX_MULTIPLY_INTEGER_TO_FLOAT")
    count = 0
    for n in g.live():
        if g.op(n) != "GEMM":
            continue
        d = g.nodes[n]
        out = d.output_tensor
        if d.trans_a.name != "NONE" or d.trans_b.name != "NONE" or d.alpha != 1.0:
            continue
        if d.fused_activation is not None or not out.data_type.is_float:
            continue
        if d.c_tensor is not None and (d.beta != 1.0 or d.c_tensor.sizes != out.sizes):
            continue
        rank = out.rank
        a = _operand(g, n, 0, d.a_tensor, None)
        b = _operand(g, n, 1, d.b_tensor, rank - 1)  # weights: per column, or one scale
        if a is None or b is None or a[0].data_type != b[0].data_type:
            continue
        desc = desc_class(
            a_tensor=a[0], a_scale_tensor=a[1], a_zero_point_tensor=a[2],
            b_tensor=b[0], b_scale_tensor=b[1], b_zero_point_tensor=b[2],
            bias_tensor=d.c_tensor, output_tensor=out,
        )  # fmt: skip
        if not g.valid(desc):
            continue
        # the operator's slots: A, its scale and zero point, B, its own, the bias (C)
        c = g.source(n, 2) if d.c_tensor is not None else None
        new = g.add(desc, [*a[3], *b[3], c], g.origin[n])
        g.reroute((n, 0), (new, 0))
        g.remove(n)
        count += 1
    if count:
        g.prune()
    return count


def _channels(desc: TensorDesc, rank: int) -> TensorDesc:
    """A filter's parameter desc (collapsed: one value, or one per output channel {K, 1, ..})
    as the output's parameter: {1, K, 1, ..} (the same values in order), or {1, ..}."""
    k = desc.sizes[0]
    return TensorDesc(desc.data_type, (1, k) + (1,) * (rank - 2) if k > 1 else (1,) * rank)


def _zero_point(g: Editor, desc: TensorDesc | None, src, rank: int):
    """A zero point for CONVOLUTION_INTEGER: (None, None) where it is absent or a constant 0
    (no term to subtract; an integer constant is no parameter), else its desc (one value, or
    one per output channel, as ``_channels``) and its source."""
    if desc is None or g.scalar(src) == 0:
        return None, None
    return _channels(desc, rank), src


@rewrite("QDQConvFusion", "extended")
def qdq_conv(g: Editor) -> int:
    """CONVOLUTION of a DEQUANTIZE output by a DEQUANTIZE output: CONVOLUTION_INTEGER over
    their 8-bit inputs, then its sums to float32 and times the two scales (their product, one
    per output channel), plus the bias."""
    conv_class = op_class("CONVOLUTION_INTEGER")
    cast_class = op_class("CAST")
    mul_class = op_class("ELEMENT_WISE_MULTIPLY")
    add_class = op_class("ELEMENT_WISE_ADD1")
    count = 0
    for n in g.live():
        if g.op(n) != "CONVOLUTION":
            continue
        d = g.nodes[n]
        out = d.output_tensor
        if d.direction.name != "FORWARD" or d.mode.name != "CROSS_CORRELATION":
            continue
        if d.fused_activation is not None or out.data_type.name != "FLOAT32":
            continue
        if any(p for p in d.output_padding) or not out.is_packed:
            continue
        rank, k = out.rank, out.sizes[1]
        x = _operand(g, n, 0, d.input_tensor, None)
        w = _operand(g, n, 1, d.filter_tensor, 0)  # weights: one scale, or one per channel
        if x is None or w is None or x[0].rank != rank or w[0].rank != rank:
            continue
        channel = (1, k) + (1,) * (rank - 2)
        zx, zx_src = _zero_point(g, x[2], x[3][2], rank)
        zw, zw_src = _zero_point(g, w[2], w[3][2], rank)
        ints = TensorDesc(DataType.INT32, out.sizes)
        conv = conv_class(
            input_tensor=x[0], input_zero_point_tensor=zx, filter_tensor=w[0],
            filter_zero_point_tensor=zw, output_tensor=ints, strides=d.strides,
            dilations=d.dilations, start_padding=d.start_padding, end_padding=d.end_padding,
            group_count=d.group_count,
        )  # fmt: skip
        f32 = TensorDesc(out.data_type, out.sizes)
        cast = cast_class(ints, f32)
        # the scales' product, one value a channel: x's one scale broadcast over the channels,
        # w's one per channel (or its one broadcast too)
        per = TensorDesc(x[1].data_type, channel)
        scales = mul_class(
            _broadcast(x[1], channel), _broadcast(_channels(w[1], rank), channel), per
        )
        scaled = mul_class(f32, _broadcast(per, out.sizes), f32)
        bias, add = d.bias_tensor, None
        if bias is not None:
            if not bias.is_packed or bias.sizes != channel:
                continue
            add = add_class(f32, _broadcast(bias, out.sizes), f32)
        if not all(g.valid(desc) for desc in (conv, cast, scales, scaled, add) if desc):
            continue
        origin = g.origin[n]
        ci = g.add(conv, [x[3][0], zx_src, w[3][0], zw_src], origin)
        cf = g.add(cast, [(ci, 0)], origin)
        sc = g.add(scales, [x[3][1], w[3][1]], origin)
        y = g.add(scaled, [(cf, 0), (sc, 0)], origin)
        if add is not None:
            y = g.add(add, [(y, 0), g.source(n, 2)], origin)
        g.reroute((n, 0), (y, 0))
        g.remove(n)
        count += 1
    if count:
        g.prune()
    return count


def _broadcast(desc: TensorDesc, sizes: tuple[int, ...]) -> TensorDesc:
    """A parameter desc (collapsed: size 1 on its repeated axes, packed otherwise) read at
    ``sizes``: stride 0 on every axis it repeats."""
    strides, step = [0] * len(sizes), 1
    for axis in reversed(range(len(sizes))):
        if desc.sizes[axis] != 1:
            strides[axis] = step
            step *= desc.sizes[axis]
    return TensorDesc(desc.data_type, tuple(sizes), strides=tuple(strides))


def _packed(data_type, sizes) -> TensorDesc:
    return TensorDesc(data_type, tuple(sizes))


def _blocked(g: Editor, n: int):
    """GEMM ``n`` as a product of A by a DEQUANTIZE of blocked 4-bit weights (MatMulNBits's
    import: codes and zero points in constant data nodes, scales a constant), without bias or
    activation: (the key its group shares, the DEQUANTIZE node, N); else None."""
    if g.op(n) != "GEMM":
        return None
    d = g.nodes[n]
    if d.trans_a.name != "NONE" or d.trans_b.name != "TRANSPOSE" or d.alpha != 1.0:
        return None
    if d.fused_activation is not None or d.c_tensor is not None:
        return None
    src = g.producer(n, 1, "DEQUANTIZE")
    if src is None or g.only_user(src) != (n, 1):
        return None
    m = src[0]
    deq = g.nodes[m]
    x, out = deq.input_tensor, deq.output_tensor
    if x.data_type.bits != 4 or x.rank != 2 or not out.is_packed or out.sizes != x.sizes:
        return None
    (rows_n, columns), (padded, step) = x.sizes, x.layout_strides
    if step != 1 or padded < columns or padded % 2:
        return None
    codes = g.source(m, 0)
    if codes is None or not isinstance(g.nodes[codes[0]], ConstantDataNode):
        return None
    if g.nodes[codes[0]].data_size != rows_n * padded // 2:
        return None
    params = deq.quantization_tensors
    if any(not p.is_packed or p.rank != 2 or p.sizes[0] != rows_n for p in params):
        return None
    if len({p.sizes for p in params}) != 1 or g.constant_index(g.source(m, 1)) is None:
        return None
    if len(params) == 2:
        zeros = g.source(m, 2)
        if zeros is None or not isinstance(g.nodes[zeros[0]], ConstantDataNode):
            return None
        if params[1].data_type != x.data_type:
            return None
    a, b, y = d.a_tensor, d.b_tensor, d.output_tensor
    k = a.sizes[-1]
    if b.sizes[:-2] != (1,) * (b.rank - 2) or b.sizes[-2:] != (rows_n, k) or k > columns:
        return None
    if b.layout_strides[-2:] != (columns, 1) or not y.is_packed:
        return None
    key = (g.source(n, 0), a, x.data_type, out.data_type, deq.quantization_type, columns,
           padded, params[0].sizes[1], params[0].data_type, len(params), y.sizes[:-1],
           y.data_type)  # fmt: skip
    return key, m, rows_n


def _join(g: Editor, members: list) -> bool:
    """Members (GEMM, DEQUANTIZE, N) of one group as one DEQUANTIZE, GEMM and SPLIT; False
    (nothing changed) where DirectML would refuse a node of them."""
    first, deq0 = g.nodes[members[0][0]], g.nodes[members[0][1]]
    x, params = deq0.input_tensor, deq0.quantization_tensors
    columns, padded = x.sizes[1], x.layout_strides[0]
    blocks, total = params[0].sizes[1], sum(r for _, _, r in members)
    t_scale = params[0].data_type
    joined = op_class("JOIN")(
        [_packed(t_scale, (r, blocks)) for _, _, r in members], _packed(t_scale, (total, blocks)), 0
    )
    quant = [_packed(t_scale, (total, blocks))]
    if len(params) == 2:
        quant.append(_packed(x.data_type, (total, blocks)))
    strides = None if padded == columns else (padded, 1)
    deq = dataclasses.replace(
        deq0, input_tensor=TensorDesc(x.data_type, (total, columns), strides=strides),
        quantization_tensors=quant, output_tensor=_packed(deq0.output_tensor.data_type,
                                                          (total, columns)),
    )  # fmt: skip
    b = first.b_tensor
    lead = (1,) * (b.rank - 2)
    t = first.output_tensor.data_type
    y = first.output_tensor.sizes[:-1]
    gemm = dataclasses.replace(
        first,
        b_tensor=TensorDesc(b.data_type, (*lead, total, b.sizes[-1]),
                            strides=(total * columns,) * len(lead) + (columns, 1)),
        output_tensor=_packed(t, (*y, total)),
    )  # fmt: skip
    split = op_class("SPLIT")(
        _packed(t, (*y, total)), [_packed(t, (*y, r)) for _, _, r in members], len(y)
    )
    if not all(g.valid(desc) for desc in (joined, deq, gemm, split)):
        return False
    codes = g.add_data(b"".join(g.nodes[g.source(m, 0)[0]].data for _, m, _ in members))
    scales = g.add(joined, [g.source(m, 1) for _, m, _ in members], g.origin[members[0][1]])
    inputs = [codes, (scales, 0)]
    if len(params) == 2:
        values = [constant_elements(g.nodes[g.source(m, 2)[0]], x.data_type, r * blocks)
                  for _, m, r in members]  # fmt: skip
        inputs.append(g.add_data(pack_4bit(np.concatenate(values)).tobytes()))
    origin = g.origin[members[0][0]]
    new_deq = g.add(deq, inputs, g.origin[members[0][1]])
    new_gemm = g.add(gemm, [g.source(members[0][0], 0), (new_deq, 0), None], origin)
    parts = g.add(split, [(new_gemm, 0)], origin)
    for k, (n, m, _) in enumerate(members):
        g.reroute((n, 0), (parts, k))
        g.remove(n, m)
    return True


@rewrite("ParallelQuantizedGemms", "extended")
def parallel_quantized_gemms(g: Editor) -> int:
    """GEMMs of one A by blocked 4-bit weights (MatMulNBits): one DEQUANTIZE of the weights
    joined along N, one GEMM and a SPLIT."""
    groups: dict = {}
    for n in g.live():
        found = _blocked(g, n)
        if found is not None:
            key, m, rows_n = found
            groups.setdefault(key, []).append((n, m, rows_n))
    count = 0
    for members in groups.values():
        if len(members) > 1 and _join(g, members):
            count += 1
    if count:
        g.prune()
    return count
