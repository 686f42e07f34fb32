"""Pooling, as ONNX Runtime's DirectML provider maps it: MaxPool onto MAX_POOLING2 (its Indices
output from OutputIndicesTensor), AveragePool onto AVERAGE_POOLING1, LpPool onto LP_POOLING1,
the global pools onto MAX_POOLING / AVERAGE_POOLING / LP_POOLING with the whole spatial extent as
the window, MaxUnpool onto MAX_UNPOOLING.

- DirectML pools 2 or 3 spatial dimensions: a 1-D pool runs over ``{N, C, 1, L}`` with a window
  of height 1; a global pool of any other rank runs over ``{N, C, 1, prod(spatial)}``.
- ``pads`` / auto_pad become StartPadding / EndPadding by ONNX's formulas; ceil_mode grows the
  end padding until DirectML's floor rule gives ONNX's ceil size (MAX pads with the lowest
  value, LP's padding adds nothing, AVERAGE does not count it). With count_include_pad, ONNX
  counts its pads but not that extra end padding: when both are present the input is padded
  with zeros first (PADDING) and AVERAGE counts only points on the padded input.
- Indices: MAX_POOLING2 writes UINT32 flat row-major indices, CAST to the graph's INT32 (ONNX's
  INT64); storage_order 1 (column-major over the spatial dimensions) is computed from them with
  integer element-wise operators. MaxUnpool's indices are CAST to UINT32.
- MaxUnpool with output_shape (a constant) unpools into a tensor of that shape, the indices
  flat into it, as ONNX Runtime and its DirectML provider do (docs/semantics.md, "ONNX").
"""

from __future__ import annotations

import math

import numpy as np

from ...tensor import TensorDesc
from ..importer import Value
from . import register
from ._common import (
    DataType,
    binary_value,
    cast_value,
    const_ints,
    op,
    pads_of,
    spatial_out,
    view,
)


def _lp_order(ctx) -> int:
    """LpPool's / GlobalLpPool's p: a float attribute before opset 2, an int after."""
    p = ctx.attr("p", 2)
    if float(p) != int(p) or int(p) < 1:
        raise ctx.fail(f"p must be a whole number >= 1, got {p}")
    return int(p)


def _int_scalar(ctx, x: Value, name: str, value: int) -> Value:
    return binary_value(ctx, f"ELEMENT_WISE_{name}", x, ctx.constant(np.int32(value)))


def _column_major(ctx, idx: Value, spatial: tuple[int, ...]) -> Value:
    """Row-major flat indices (INT32) turned column-major over the spatial dimensions (ONNX's
    storage_order 1): each coordinate recovered by integer division and modulus, then weighed
    by the column-major strides."""
    if len(spatial) < 2:
        return idx
    plane = math.prod(spatial)
    within = _int_scalar(ctx, idx, "MODULUS_TRUNCATE", plane)
    result = binary_value(ctx, "ELEMENT_WISE_SUBTRACT", idx, within)
    for i, size in enumerate(spatial):
        row_stride = math.prod(spatial[i + 1 :])
        col_stride = math.prod(spatial[:i])
        c = within if row_stride == 1 else _int_scalar(ctx, within, "DIVIDE", row_stride)
        if i > 0:
            c = _int_scalar(ctx, c, "MODULUS_TRUNCATE", size)
        if col_stride != 1:
            c = _int_scalar(ctx, c, "MULTIPLY", col_stride)
        result = binary_value(ctx, "ELEMENT_WISE_ADD", result, c)
    return result


def pooling_window(ctx, sizes, kernel, strides, dilations, start, end):
    """The output sizes of a pooling window over ``sizes`` (N, C, spatial...) and the window as
    the pooling operators' keyword fields; a window that does not fit is the node's error."""
    out = tuple(sizes[:2]) + tuple(spatial_out(sizes[2:], kernel, strides, dilations, start, end))
    if min(out) < 1:
        raise ctx.fail(f"the window does not fit the padded input (output {list(out)})")
    window = {
        "strides": strides,
        "window_size": kernel,
        "start_padding": start,
        "end_padding": end,
        "dilations": dilations,
    }
    return out, window


def _pool(kind: str):
    def convert(ctx, node, inputs):
        x = inputs[0]
        nd = x.rank - 2
        if not 1 <= nd <= 3:
            raise ctx.fail(f"pooling takes 1 to 3 spatial dimensions, got input rank {x.rank}")
        kernel = [int(k) for k in ctx.attr("kernel_shape")]
        if len(kernel) != nd:
            raise ctx.fail(f"kernel_shape must hold {nd} values, got {len(kernel)}")
        strides = [int(s) for s in ctx.attr("strides", [1] * nd)]
        dilations = [int(d) for d in ctx.attr("dilations", [1] * nd)]
        if len(strides) != nd or len(dilations) != nd:
            raise ctx.fail(f"strides and dilations must hold {nd} values each")
        ceil = bool(ctx.attr("ceil_mode", 0))
        spatial = tuple(x.shape[2:])
        pad_start, pad_end = pads_of(ctx, spatial, kernel, strides, dilations)
        start, end = pads_of(ctx, spatial, kernel, strides, dilations, ceil=ceil)
        one_d = nd == 1

        def lift(v, d):
            return [d] + list(v) if one_d else list(v)

        t = x.data_type
        sizes = x.shape[:2] + ((1,) if one_d else ()) + spatial
        source = x
        include = bool(ctx.attr("count_include_pad", 0))
        overhang = any(e != p for e, p in zip(end, pad_end))
        if kind == "avg" and include and overhang:
            # ONNX counts its own pads but not ceil_mode's extra end padding; DirectML's
            # IncludePadding would count both. Zeros in place of ONNX's pads, counted as input.
            if any(pad_start) or any(pad_end):
                before = [0, 0] + lift(pad_start, 0)
                after = [0, 0] + lift(pad_end, 0)
                padded = tuple(d + b + a for d, b, a in zip(sizes, before, after))
                desc = op("PADDING")(
                    TensorDesc(t, sizes),
                    TensorDesc(t, padded),
                    padding_mode="CONSTANT",
                    padding_value=0.0,
                    start_padding=before,
                    end_padding=after,
                )
                source = ctx.out(ctx.node(desc, [x]), padded)
                sizes = padded
                end = [e - p for e, p in zip(end, pad_end)]
                start = [0] * nd
            include = False
        kernel, strides, dilations = lift(kernel, 1), lift(strides, 1), lift(dilations, 1)
        start, end = lift(start, 0), lift(end, 0)
        out, window = pooling_window(ctx, sizes, kernel, strides, dilations, start, end)
        result = (out[:2] + out[3:]) if one_d else out
        if kind == "max":
            indices = TensorDesc(DataType.UINT32, out) if ctx.wants(1) else None
            desc = op("MAX_POOLING2")(TensorDesc(t, sizes), TensorDesc(t, out), indices, **window)
        elif kind == "avg":
            desc = op("AVERAGE_POOLING1")(
                TensorDesc(t, sizes), TensorDesc(t, out), **window, include_padding=include
            )
        else:
            desc = op("LP_POOLING1")(
                TensorDesc(t, sizes), TensorDesc(t, out), **window, p=_lp_order(ctx)
            )
        n = ctx.node(desc, [source])
        outputs = [ctx.out(n, result)]
        if kind == "max" and ctx.wants(1):
            idx = cast_value(ctx, ctx.out(n, out, 1), DataType.INT32)
            if int(ctx.attr("storage_order", 0)) == 1:
                idx = _column_major(ctx, idx, spatial)
            outputs.append(view(idx, result))
        return outputs

    return convert


def _global_pool(kind: str):
    def convert(ctx, node, inputs):
        (x,) = inputs
        if x.rank < 3:
            raise ctx.fail(f"the input must have 3 or more dimensions, got {x.rank}")
        sizes = x.shape if x.rank in (4, 5) else x.shape[:2] + (1, math.prod(x.shape[2:]))
        dims = len(sizes) - 2
        out = sizes[:2] + (1,) * dims
        t = x.data_type
        window = {
            "strides": [1] * dims,
            "window_size": list(sizes[2:]),
            "start_padding": [0] * dims,
            "end_padding": [0] * dims,
        }
        src, dst = TensorDesc(t, sizes), TensorDesc(t, out)
        if kind == "max":
            desc = op("MAX_POOLING")(src, dst, **window)
        elif kind == "avg":
            desc = op("AVERAGE_POOLING")(src, dst, **window, include_padding=False)
        else:
            desc = op("LP_POOLING")(src, dst, **window, p=_lp_order(ctx))
        return [ctx.out(ctx.node(desc, [x]), x.shape[:2] + (1,) * (x.rank - 2))]

    return convert


def _max_unpool(ctx, node, inputs):
    x, indices, shape_in = (list(inputs) + [None])[:3]
    nd = x.rank - 2
    if not 1 <= nd <= 3:
        raise ctx.fail(f"unpooling takes 1 to 3 spatial dimensions, got input rank {x.rank}")
    if indices.shape != x.shape:
        raise ctx.fail(f"I of shape {list(indices.shape)} differs from X's {list(x.shape)}")
    kernel = [int(k) for k in ctx.attr("kernel_shape")]
    strides = [int(s) for s in ctx.attr("strides", [1] * nd)]
    pads = [int(p) for p in ctx.attr("pads", [0] * (2 * nd))]
    if len(kernel) != nd or len(strides) != nd or len(pads) != 2 * nd:
        raise ctx.fail(f"kernel_shape, strides and pads must hold {nd}, {nd} and {2 * nd} values")
    if shape_in is not None:
        shape = tuple(const_ints(ctx, shape_in, "output_shape"))
        if len(shape) != x.rank or shape[:2] != x.shape[:2]:
            raise ctx.fail(f"output_shape {list(shape)} does not fit X of shape {list(x.shape)}")
    else:
        shape = x.shape[:2] + tuple(
            (size - 1) * s - (pads[i] + pads[nd + i]) + k
            for i, (size, k, s) in enumerate(zip(x.shape[2:], kernel, strides))
        )
    if min(shape) < 1:
        raise ctx.fail(f"the output shape {list(shape)} is empty")

    def four(s):
        # MAX_UNPOOLING is 4-D; its indices are flat, so any 4-D view of the same data serves.
        if len(s) == 3:
            return s[:2] + (1,) + s[2:]
        return s if len(s) == 4 else s[:3] + (s[3] * s[4],)

    t = x.data_type
    idx = cast_value(ctx, indices, DataType.UINT32)
    desc = op("MAX_UNPOOLING")(
        TensorDesc(t, four(x.shape)),
        TensorDesc(DataType.UINT32, four(x.shape)),
        TensorDesc(t, four(shape)),
    )
    return [ctx.out(ctx.node(desc, [x, idx]), shape)]


register("MaxPool", _pool("max"))
register("AveragePool", _pool("avg"))
register("LpPool", _pool("lp"))
register("GlobalAveragePool", _global_pool("avg"))
register("GlobalMaxPool", _global_pool("max"))
register("GlobalLpPool", _global_pool("lp"))
register("MaxUnpool", _max_unpool)
