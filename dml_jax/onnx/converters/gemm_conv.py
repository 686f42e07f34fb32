"""Matrix multiplication and convolution: GEMM and CONVOLUTION."""

from __future__ import annotations

import math

from ...tensor import TensorDesc
from ..importer import broadcast, packed
from . import converter
from ._common import broadcast_shape, op, pads_of, spatial_out


@converter("Gemm")
def _gemm(ctx, node, inputs):
    a, b, c = (list(inputs) + [None])[:3]
    ta, tb = int(ctx.attr("transA", 0)), int(ctx.attr("transB", 0))
    if a.rank != 2 or b.rank != 2:
        raise ctx.fail(f"A and B must be 2-D, got shapes {list(a.shape)} and {list(b.shape)}")
    m = a.shape[1] if ta else a.shape[0]
    n = b.shape[0] if tb else b.shape[1]
    out = (1, 1, m, n)
    t = a.data_type
    cd = None if c is None else broadcast(c, out)
    desc = op("GEMM")(
        packed(t, a.shape, 4),
        packed(t, b.shape, 4),
        cd,
        TensorDesc(t, out),
        trans_a="TRANSPOSE" if ta else "NONE",
        trans_b="TRANSPOSE" if tb else "NONE",
        alpha=float(ctx.attr("alpha", 1.0)),
        beta=float(ctx.attr("beta", 1.0)) if c is not None else 0.0,
    )
    return [ctx.out(ctx.node(desc, [a, b, c]), (m, n))]


@converter("MatMul")
def _matmul(ctx, node, inputs):
    a, b = inputs
    if a.rank == 0 or b.rank == 0:
        raise ctx.fail("MatMul's inputs must have at least one dimension")
    a2 = a.view((1, a.shape[0])) if a.rank == 1 else a
    b2 = b.view((b.shape[0], 1)) if b.rank == 1 else b
    m, k = a2.shape[-2:]
    k2, n = b2.shape[-2:]
    if k != k2:
        raise ctx.fail(f"inner dimensions differ: {list(a.shape)} x {list(b.shape)}")
    batch = broadcast_shape(ctx, a2.shape[:-2], b2.shape[:-2])
    result = batch + ((m,) if a.rank > 1 else ()) + ((n,) if b.rank > 1 else ())
    if len(batch) > 2:
        # One GEMM takes two batch dimensions: fold the leading ones where neither operand
        # broadcasts along them (ONNX Runtime's DirectML provider folds them the same way).
        lead = batch[:-1]
        for v in (a2, b2):
            own = (1,) * (len(batch) - (v.rank - 2)) + tuple(v.shape[:-2])
            if tuple(own[:-1]) != lead:
                raise ctx.fail(f"{len(batch)} batch dimensions that broadcast: one GEMM takes 2")
        folded = (math.prod(lead), batch[-1])
        a2 = a2.view(folded + (m, k))
        b2 = b2.view(folded + (k, n))
        batch = folded
    batch = (1,) * (2 - len(batch)) + tuple(batch)
    desc = op("GEMM")(
        broadcast(a2, batch + (m, k)),
        broadcast(b2, batch + (k, n)),
        None,
        TensorDesc(a.data_type, batch + (m, n)),
    )
    return [ctx.out(ctx.node(desc, [a2, b2, None]), result)]


@converter("Conv")
def _conv(ctx, node, inputs):
    x, w, bias = (list(inputs) + [None])[:3]
    if x.rank < 3 or x.rank > 5 or w.rank != x.rank:
        raise ctx.fail(
            f"input of rank {x.rank} and weights of rank {w.rank}: 1-D to 3-D convolutions "
            "take both of rank 3 to 5"
        )
    one_d = x.rank == 3
    xs, ws = (
        (x.shape[:2] + (1,) + x.shape[2:], w.shape[:2] + (1,) + w.shape[2:])
        if one_d
        else (x.shape, w.shape)
    )
    nd = len(xs) - 2
    kernel = ws[2:]

    def spatial(name, default):
        v = [int(a) for a in ctx.attr(name, [default] * (nd - one_d))]
        if len(v) != nd - one_d:
            raise ctx.fail(f"{name} must hold {nd - one_d} values, got {len(v)}")
        return ([default] + v) if one_d else v

    strides, dilations = spatial("strides", 1), spatial("dilations", 1)
    if one_d:
        start, end = pads_of(ctx, xs[3:], kernel[1:], strides[1:], dilations[1:])
        start, end = [0] + start, [0] + end
    else:
        start, end = pads_of(ctx, xs[2:], kernel, strides, dilations)
    group = int(ctx.attr("group", 1))
    out = (xs[0], ws[0]) + spatial_out(xs[2:], kernel, strides, dilations, start, end)
    t = x.data_type
    desc = op("CONVOLUTION")(
        TensorDesc(t, xs),
        TensorDesc(t, ws),
        None if bias is None else TensorDesc(t, (1, ws[0]) + (1,) * nd),
        TensorDesc(t, out),
        mode="CROSS_CORRELATION",
        direction="FORWARD",
        strides=strides,
        dilations=dilations,
        start_padding=start,
        end_padding=end,
        output_padding=[0] * nd,
        group_count=group,
    )
    result = (out[:2] + out[3:]) if one_d else out
    return [ctx.out(ctx.node(desc, [x, w, bias]), result)]
