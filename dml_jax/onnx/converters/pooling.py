"""Pooling: MAX_POOLING2, AVERAGE_POOLING and the global forms (REDUCE)."""

from __future__ import annotations

from ...tensor import TensorDesc
from . import register
from ._common import op, pads_of, reduce_value, spatial_out


def _pool(kind: str):
    def convert(ctx, node, inputs):
        x = inputs[0]
        if ctx.output_count > 1:
            raise ctx.fail("the Indices output is not supported")
        nd = x.rank - 2
        if nd < 1 or nd > 3:
            raise ctx.fail(f"{nd}-D pooling is not supported")
        kernel = [int(k) for k in ctx.attr("kernel_shape")]
        if len(kernel) != nd:
            raise ctx.fail(f"kernel_shape must hold {nd} values, got {len(kernel)}")
        strides = [int(s) for s in ctx.attr("strides", [1] * nd)]
        dilations = [int(d) for d in ctx.attr("dilations", [1] * nd)]
        ceil = bool(ctx.attr("ceil_mode", 0))
        start, end = pads_of(ctx, x.shape[2:], kernel, strides, dilations, ceil=ceil)
        include = bool(ctx.attr("count_include_pad", 0))
        if kind == "avg" and ceil and include:
            raise ctx.fail("ceil_mode with count_include_pad is not supported")
        if kind == "avg" and any(d != 1 for d in dilations):
            raise ctx.fail("dilated average pooling is not supported")
        one_d = nd == 1
        sizes = x.shape[:2] + ((1,) if one_d else ()) + x.shape[2:]

        def lift(v, d):
            return [d] + list(v) if one_d else list(v)

        kernel, strides, dilations = lift(kernel, 1), lift(strides, 1), lift(dilations, 1)
        start, end = lift(start, 0), lift(end, 0)
        out = sizes[:2] + spatial_out(sizes[2:], kernel, strides, dilations, start, end)
        t = x.data_type
        if kind == "max":
            desc = op("MAX_POOLING2")(
                TensorDesc(t, sizes),
                TensorDesc(t, out),
                None,
                strides=strides,
                window_size=kernel,
                start_padding=start,
                end_padding=end,
                dilations=dilations,
            )
        else:
            desc = op("AVERAGE_POOLING")(
                TensorDesc(t, sizes),
                TensorDesc(t, out),
                strides=strides,
                window_size=kernel,
                start_padding=start,
                end_padding=end,
                include_padding=include,
            )
        result = (out[:2] + out[3:]) if one_d else out
        return [ctx.out(ctx.node(desc, [x]), result)]

    return convert


def _global_pool(function: str):
    def convert(ctx, node, inputs):
        (x,) = inputs
        if x.rank < 3:
            raise ctx.fail(f"the input must have 3 or more dimensions, got {x.rank}")
        return [reduce_value(ctx, x, function, list(range(2, x.rank)), keepdims=True)]

    return convert


register("MaxPool", _pool("max"))
register("AveragePool", _pool("avg"))
register("GlobalAveragePool", _global_pool("AVERAGE"))
register("GlobalMaxPool", _global_pool("MAX"))
