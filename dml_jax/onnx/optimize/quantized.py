"""Quantized products recognized in QDQ models: a GEMM both of whose operands are
ELEMENT_WISE_DEQUANTIZE_LINEAR outputs (the DequantizeLinear -> MatMul of onnxruntime's
``QuantFormat.QDQ`` exports) becomes one MATRIX_MULTIPLY_INTEGER_TO_FLOAT over the 8-bit
values, as onnxruntime's QDQ transformers turn such a node unit into MatMulIntegerToFloat or
QLinearMatMul: the product runs on integers (int8 tensor cores on a GPU, through that
operator's fast path) and the scales are applied once to its sums.

The value differs from the float GEMM over the dequantized operands only by rounding: the
integer form sums the exact products of ``(a - za)`` and ``(b - zb)`` and multiplies the sum by
``sa * sb`` once, where the float form rounds each dequantized operand and accumulates in
floating point (docs/semantics.md, "QDQ products").

Taken where the GEMM has no transposes, Alpha 1, no fused activation and at most a C of the
output's sizes with Beta 1 (the bias), and where each DEQUANTIZE reads its 8-bit input packed,
writes its output packed, and has one scale (and zero point) for the whole tensor, or, for B,
one per column (``per_channel`` weights); A and B of one 8-bit type (DirectML's operator takes
no mix). Anything else keeps its GEMM.
"""

from __future__ import annotations

from ...registry import lookup
from ...tensor import TensorDesc
from . import Editor, rewrite

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
    desc_class = lookup("DML_OPERATOR_MATRIX_MULTIPLY_INTEGER_TO_FLOAT").desc_class
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
