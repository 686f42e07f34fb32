"""ONNX op types -> DirectML operator descriptors: one converter per op type, in ``CONVERTERS``.

The mappings follow ONNX Runtime's DirectML execution provider: broadcasting through stride-0
input strides, GEMM and CONVOLUTION on 4-D tensors (a 1-D convolution gets H = 1), Transpose as
an identity that reads its input through permuted strides, Reshape / Flatten / Squeeze /
Unsqueeze / Identity as views of the same bytes (no node), BOOL stored as UINT8. Each
converter takes ``(ctx, node, inputs)`` (inputs: ``Value`` or None for an absent optional one)
and returns the outputs' values. Adding an op type is one function and one entry of
``CONVERTERS`` (``register`` for code outside this module).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .. import ops as _ops  # noqa: F401 (registers every operator)
from ..enums import DataType
from ..ops.pooling import WindowPlan
from ..registry import lookup
from ..tensor import TensorDesc
from .importer import (
    Context,
    Converter,
    Value,
    array_of,
    broadcast,
    const_value,
    data_type_of,
    packed,
    permuted,
)


def _desc_class(operator_type: str) -> type:
    return lookup(operator_type).desc_class


ActivationGeluOperatorDesc = _desc_class("DML_OPERATOR_ACTIVATION_GELU")
ActivationLeakyReluOperatorDesc = _desc_class("DML_OPERATOR_ACTIVATION_LEAKY_RELU")
ActivationLogSoftmax1OperatorDesc = _desc_class("DML_OPERATOR_ACTIVATION_LOG_SOFTMAX1")
ActivationReluOperatorDesc = _desc_class("DML_OPERATOR_ACTIVATION_RELU")
ActivationSigmoidOperatorDesc = _desc_class("DML_OPERATOR_ACTIVATION_SIGMOID")
ActivationSoftmax1OperatorDesc = _desc_class("DML_OPERATOR_ACTIVATION_SOFTMAX1")
AveragePoolingOperatorDesc = _desc_class("DML_OPERATOR_AVERAGE_POOLING")
BatchNormalizationOperatorDesc = _desc_class("DML_OPERATOR_BATCH_NORMALIZATION")
CastOperatorDesc = _desc_class("DML_OPERATOR_CAST")
ConvolutionOperatorDesc = _desc_class("DML_OPERATOR_CONVOLUTION")
ElementWiseAbsOperatorDesc = _desc_class("DML_OPERATOR_ELEMENT_WISE_ABS")
ElementWiseAddOperatorDesc = _desc_class("DML_OPERATOR_ELEMENT_WISE_ADD")
ElementWiseDivideOperatorDesc = _desc_class("DML_OPERATOR_ELEMENT_WISE_DIVIDE")
ElementWiseErfOperatorDesc = _desc_class("DML_OPERATOR_ELEMENT_WISE_ERF")
ElementWiseExpOperatorDesc = _desc_class("DML_OPERATOR_ELEMENT_WISE_EXP")
ElementWiseIdentityOperatorDesc = _desc_class("DML_OPERATOR_ELEMENT_WISE_IDENTITY")
ElementWiseIfOperatorDesc = _desc_class("DML_OPERATOR_ELEMENT_WISE_IF")
ElementWiseLogicalEqualsOperatorDesc = _desc_class("DML_OPERATOR_ELEMENT_WISE_LOGICAL_EQUALS")
ElementWiseLogicalGreaterThanOperatorDesc = _desc_class(
    "DML_OPERATOR_ELEMENT_WISE_LOGICAL_GREATER_THAN"
)
ElementWiseLogicalLessThanOperatorDesc = _desc_class("DML_OPERATOR_ELEMENT_WISE_LOGICAL_LESS_THAN")
ElementWiseLogOperatorDesc = _desc_class("DML_OPERATOR_ELEMENT_WISE_LOG")
ElementWiseMultiplyOperatorDesc = _desc_class("DML_OPERATOR_ELEMENT_WISE_MULTIPLY")
ElementWiseNegateOperatorDesc = _desc_class("DML_OPERATOR_ELEMENT_WISE_NEGATE")
ElementWisePowOperatorDesc = _desc_class("DML_OPERATOR_ELEMENT_WISE_POW")
ElementWiseSqrtOperatorDesc = _desc_class("DML_OPERATOR_ELEMENT_WISE_SQRT")
ElementWiseSubtractOperatorDesc = _desc_class("DML_OPERATOR_ELEMENT_WISE_SUBTRACT")
ElementWiseTanhOperatorDesc = _desc_class("DML_OPERATOR_ELEMENT_WISE_TANH")
GatherOperatorDesc = _desc_class("DML_OPERATOR_GATHER")
GemmOperatorDesc = _desc_class("DML_OPERATOR_GEMM")
JoinOperatorDesc = _desc_class("DML_OPERATOR_JOIN")
MaxPooling2OperatorDesc = _desc_class("DML_OPERATOR_MAX_POOLING2")
MeanVarianceNormalization1OperatorDesc = _desc_class("DML_OPERATOR_MEAN_VARIANCE_NORMALIZATION1")
ReduceOperatorDesc = _desc_class("DML_OPERATOR_REDUCE")
Slice1OperatorDesc = _desc_class("DML_OPERATOR_SLICE1")
SplitOperatorDesc = _desc_class("DML_OPERATOR_SPLIT")

# ---------------------------------------------------------------------------------------------
# Helpers


def _axis(ctx: Context, axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < max(rank, 1):
        raise ctx.fail(f"{what} {axis} is out of range for rank {rank}")
    return axis % max(rank, 1)


def _broadcast_shape(ctx: Context, *shapes: Sequence[int]) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError:
        raise ctx.fail(f"shapes {[list(s) for s in shapes]} do not broadcast") from None


def _unary(cls, **fixed) -> Converter:
    def convert(ctx: Context, node, inputs):
        (x,) = inputs[:1]
        t = packed(x.data_type, x.shape)
        return [ctx.out(ctx.node(cls(t, t, **fixed), [x]), x.shape)]

    return convert


def _binary(cls, *, is_bool: bool = False) -> Converter:
    """A broadcasting element-wise operator; comparisons write UINT8 (ONNX BOOL)."""

    def convert(ctx: Context, node, inputs):
        a, b = inputs
        shape = _broadcast_shape(ctx, a.shape, b.shape)
        out_type = DataType.UINT8 if is_bool else a.data_type
        desc = cls(broadcast(a, shape), broadcast(b, shape), packed(out_type, shape))
        return [ctx.out(ctx.node(desc, [a, b]), shape, is_bool=is_bool)]

    return convert


def _view(value: Value, shape: Sequence[int]) -> Value:
    return value.view(tuple(int(d) for d in shape))


# ---------------------------------------------------------------------------------------------
# Element-wise, activations


def _pow(ctx, node, inputs):
    x, y = inputs
    shape = _broadcast_shape(ctx, x.shape, y.shape)
    if y.data_type != x.data_type:
        y = _cast_value(ctx, y, x.data_type)
    desc = ElementWisePowOperatorDesc(
        broadcast(x, shape), broadcast(y, shape), packed(x.data_type, shape)
    )
    return [ctx.out(ctx.node(desc, [x, y]), shape)]


def _leaky_relu(ctx, node, inputs):
    return _unary(ActivationLeakyReluOperatorDesc, alpha=float(ctx.attr("alpha", 0.01)))(
        ctx, node, inputs
    )


def _gelu(ctx, node, inputs):
    if ctx.attr("approximate", "none") != "none":
        raise ctx.fail(
            f"approximate='{ctx.attr('approximate')}' is not supported (DirectML's "
            "GELU is the exact erf form)"
        )
    return _unary(ActivationGeluOperatorDesc)(ctx, node, inputs)


def _softmax(cls) -> Converter:
    def convert(ctx, node, inputs):
        (x,) = inputs
        r = max(x.rank, 1)
        if ctx.opset >= 13:
            axes = [_axis(ctx, ctx.attr("axis", -1), r)]
        else:  # opset < 13: the input is coerced to 2-D at ``axis``
            axes = list(range(_axis(ctx, ctx.attr("axis", 1), r), r))
        t = packed(x.data_type, x.shape)
        return [ctx.out(ctx.node(cls(t, t, axes=axes), [x]), x.shape)]

    return convert


def _cast_value(ctx, x: Value, to: DataType, *, is_bool: bool = False) -> Value:
    if x.data_type == to and x.is_bool == is_bool:
        return x
    if x.const is not None:
        array = x.const.astype(np.dtype(to.numpy_dtype))
        return Value(x.shape, to, ("const",), array, is_bool)
    src = packed(x.data_type, x.shape)
    n = ctx.node(CastOperatorDesc(src, packed(to, x.shape)), [x])
    return ctx.out(n, x.shape, is_bool=is_bool)


def _cast(ctx, node, inputs):
    (x,) = inputs
    to = int(ctx.attr("to"))
    target = data_type_of(to, ctx.where)
    if to == 9:  # BOOL: x != 0
        zero = const_value(np.zeros((), np.dtype(x.data_type.numpy_dtype)), ctx.where)
        (eq,) = _binary(ElementWiseLogicalEqualsOperatorDesc, is_bool=True)(ctx, node, [x, zero])
        one = const_value(np.ones((), np.uint8), ctx.where)
        shape = eq.shape
        desc = ElementWiseSubtractOperatorDesc(
            broadcast(one, shape), broadcast(eq, shape), packed(DataType.UINT8, shape)
        )
        return [ctx.out(ctx.node(desc, [one, eq]), shape, is_bool=True)]
    return [_cast_value(ctx, x, target)]


# ---------------------------------------------------------------------------------------------
# Matrix multiplication, convolution


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
    desc = GemmOperatorDesc(
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


def _matmul(ctx, node, inputs):
    a, b = inputs
    a2 = a.view((1, a.shape[0])) if a.rank == 1 else a
    b2 = b.view((b.shape[0], 1)) if b.rank == 1 else b
    m, k = a2.shape[-2:]
    k2, n = b2.shape[-2:]
    if k != k2:
        raise ctx.fail(f"inner dimensions differ: {list(a.shape)} x {list(b.shape)}")
    batch = _broadcast_shape(ctx, a2.shape[:-2], b2.shape[:-2])
    result = batch + ((m,) if a.rank > 1 else ()) + ((n,) if b.rank > 1 else ())
    if len(batch) > 2:
        # One GEMM takes two batch dimensions: fold the leading ones where neither operand
        # broadcasts along them (ORT's DML provider folds them the same way).
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
    desc = GemmOperatorDesc(
        broadcast(a2, batch + (m, k)),
        broadcast(b2, batch + (k, n)),
        None,
        TensorDesc(a.data_type, batch + (m, n)),
    )
    return [ctx.out(ctx.node(desc, [a2, b2, None]), result)]


def _pads(ctx, x_spatial, kernel, strides, dilations, *, ceil: bool = False):
    """ONNX's pads (explicit or auto_pad) as (start, end) lists over the spatial axes."""
    nd = len(x_spatial)
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    pads = list(ctx.attr("pads", [0] * (2 * nd)))
    start, end = pads[:nd], pads[nd:]
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        start, end = [], []
        for size, kk, s, d in zip(x_spatial, kernel, strides, dilations):
            out = -(-size // s)
            total = max(0, (out - 1) * s + (kk - 1) * d + 1 - size)
            small, big = total // 2, total - total // 2
            start.append(small if auto_pad == "SAME_UPPER" else big)
            end.append(big if auto_pad == "SAME_UPPER" else small)
    elif auto_pad == "VALID":
        start, end = [0] * nd, [0] * nd
    elif auto_pad != "NOTSET":
        raise ctx.fail(f"auto_pad '{auto_pad}' is not supported")
    if ceil:
        # ceil_mode: extend the end padding so the last, partial window is produced.
        for i, (size, kk, s, d) in enumerate(zip(x_spatial, kernel, strides, dilations)):
            span = size + start[i] + end[i] - ((kk - 1) * d + 1)
            out = -(-span // s) + 1
            if (out - 1) * s >= size + start[i]:  # a window may not start in the end padding
                out -= 1
            end[i] = max(end[i], (out - 1) * s + (kk - 1) * d + 1 - size - start[i])
    return start, end


def _spatial_out(sizes, kernel, strides, dilations, start, end) -> tuple[int, ...]:
    """Output sizes of a sliding window: DirectML's rule, shared with pooling and convolution."""
    plan = WindowPlan(*(tuple(a) for a in (kernel, strides, dilations, start, end, sizes)))
    return plan.outputs


def _conv(ctx, node, inputs):
    x, w, bias = (list(inputs) + [None])[:3]
    if x.rank < 3 or x.rank > 5:
        raise ctx.fail(f"a {x.rank - 2}-D convolution is not supported (1-D to 3-D are)")
    one_d = x.rank == 3
    xs, ws = (
        (x.shape[:2] + (1,) + x.shape[2:], w.shape[:2] + (1,) + w.shape[2:])
        if one_d
        else (x.shape, w.shape)
    )
    nd = len(xs) - 2
    kernel = ws[2:]

    def spatial(name, default):
        v = list(ctx.attr(name, [default] * (nd - one_d)))
        return ([default] + v) if one_d else v

    strides, dilations = spatial("strides", 1), spatial("dilations", 1)
    if one_d:
        start, end = _pads(ctx, xs[3:], kernel[1:], strides[1:], dilations[1:])
        start, end = [0] + start, [0] + end
    else:
        start, end = _pads(ctx, xs[2:], kernel, strides, dilations)
    group = int(ctx.attr("group", 1))
    out = (xs[0], ws[0]) + _spatial_out(xs[2:], kernel, strides, dilations, start, end)
    t = x.data_type
    desc = ConvolutionOperatorDesc(
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


def _batch_norm(ctx, node, inputs):
    x, scale, bias, mean, var = inputs[:5]
    if int(ctx.attr("training_mode", 0)) or len([o for o in node.output if o]) > 1:
        raise ctx.fail("training mode (more than one output) is not supported")
    if x.rank < 2:
        raise ctx.fail(f"the input must have 2 or more dimensions, got {x.rank}")
    sizes = x.shape + (1,) * max(0, 4 - x.rank)
    per_channel = (1, x.shape[1]) + (1,) * (len(sizes) - 2)
    t = x.data_type
    pt = TensorDesc(t, per_channel)
    desc = BatchNormalizationOperatorDesc(
        TensorDesc(t, sizes),
        pt,
        pt,
        pt,
        pt,
        TensorDesc(t, sizes),
        spatial=True,
        epsilon=float(ctx.attr("epsilon", 1e-5)),
    )
    return [ctx.out(ctx.node(desc, [x, mean, var, scale, bias]), x.shape)]


def _pool(kind: str) -> Converter:
    def convert(ctx, node, inputs):
        (x,) = inputs[:1]
        if len([o for o in node.output if o]) > 1:
            raise ctx.fail("the Indices output is not supported")
        nd = x.rank - 2
        if nd < 1 or nd > 3:
            raise ctx.fail(f"{nd}-D pooling is not supported")
        kernel = list(ctx.attr("kernel_shape"))
        strides = list(ctx.attr("strides", [1] * nd))
        dilations = list(ctx.attr("dilations", [1] * nd))
        ceil = bool(ctx.attr("ceil_mode", 0))
        start, end = _pads(ctx, x.shape[2:], kernel, strides, dilations, ceil=ceil)
        include = bool(ctx.attr("count_include_pad", 0))
        if kind == "avg" and ceil and include:
            raise ctx.fail("ceil_mode with count_include_pad is not supported")
        if kind == "avg" and any(d != 1 for d in dilations):
            raise ctx.fail("dilated average pooling is not supported")
        one_d = nd == 1
        sizes = x.shape[:2] + ((1,) if one_d else ()) + x.shape[2:]
        lift = (lambda v, d: [d] + list(v)) if one_d else (lambda v, d: list(v))
        kernel, strides, dilations = lift(kernel, 1), lift(strides, 1), lift(dilations, 1)
        start, end = lift(start, 0), lift(end, 0)
        out = sizes[:2] + _spatial_out(sizes[2:], kernel, strides, dilations, start, end)
        t = x.data_type
        if kind == "max":
            desc = MaxPooling2OperatorDesc(
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
            desc = AveragePoolingOperatorDesc(
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


def _global_pool(function: str) -> Converter:
    def convert(ctx, node, inputs):
        (x,) = inputs
        axes = list(range(2, x.rank))
        return [_reduce_value(ctx, x, function, axes, keepdims=True)]

    return convert


# ---------------------------------------------------------------------------------------------
# Reductions, normalization


def _reduce_value(ctx, x: Value, function: str, axes, *, keepdims: bool) -> Value:
    axes = sorted({_axis(ctx, a, x.rank, "axes") for a in axes})
    kept = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    if not x.shape:
        kept, axes = (), [0]
    desc = ReduceOperatorDesc(
        function, packed(x.data_type, x.shape), packed(x.data_type, kept), axes=axes
    )
    y = ctx.out(ctx.node(desc, [x]), kept)
    if keepdims:
        return y
    return _view(y, [d for i, d in enumerate(x.shape) if i not in axes])


def _reduce(function: str) -> Converter:
    def convert(ctx, node, inputs):
        (x, axes_in) = (list(inputs) + [None])[:2]
        axes = ctx.attr("axes")
        if axes_in is not None:
            axes = [int(a) for a in ctx.const(axes_in, "axes").reshape(-1)]
        if not axes:
            if int(ctx.attr("noop_with_empty_axes", 0)):
                return [x]
            axes = list(range(x.rank))
        return [_reduce_value(ctx, x, function, axes, keepdims=bool(ctx.attr("keepdims", 1)))]

    return convert


def _layer_norm(ctx, node, inputs):
    x, scale, bias = (list(inputs) + [None])[:3]
    if len([o for o in node.output if o]) > 1:
        raise ctx.fail("the Mean and InvStdDev outputs are not supported")
    axis = _axis(ctx, ctx.attr("axis", -1), x.rank)
    axes = list(range(axis, x.rank))
    t = x.data_type

    def param(v):
        return None if v is None else broadcast(v, x.shape)

    desc = MeanVarianceNormalization1OperatorDesc(
        packed(t, x.shape),
        param(scale),
        param(bias),
        packed(t, x.shape),
        axes=axes,
        normalize_variance=True,
        epsilon=float(ctx.attr("epsilon", 1e-5)),
    )
    return [ctx.out(ctx.node(desc, [x, scale, bias]), x.shape)]


# ---------------------------------------------------------------------------------------------
# Data movement


def _reshape(ctx, node, inputs):
    x, shape_in = inputs
    target = [int(d) for d in ctx.const(shape_in, "shape").reshape(-1)]
    allow_zero = int(ctx.attr("allowzero", 0))
    out = [x.shape[i] if d == 0 and not allow_zero else d for i, d in enumerate(target)]
    if out.count(-1) > 1:
        raise ctx.fail(f"shape {target} has more than one -1")
    if -1 in out:
        known = math.prod(d for d in out if d != -1)
        out[out.index(-1)] = math.prod(x.shape) // known if known else 0
    if math.prod(out) != math.prod(x.shape):
        raise ctx.fail(f"cannot reshape {list(x.shape)} to {target}")
    return [_view(x, out)]


def _flatten(ctx, node, inputs):
    (x,) = inputs
    axis = ctx.attr("axis", 1)
    axis = axis % (x.rank + 1) if x.rank else 0
    return [_view(x, (math.prod(x.shape[:axis]), math.prod(x.shape[axis:])))]


def _axes_input(ctx, inputs, name="axes"):
    if len(inputs) > 1 and inputs[1] is not None:
        return [int(a) for a in ctx.const(inputs[1], name).reshape(-1)]
    return ctx.attr(name)


def _squeeze(ctx, node, inputs):
    x = inputs[0]
    axes = _axes_input(ctx, inputs)
    if axes is None:
        return [_view(x, [d for d in x.shape if d != 1])]
    axes = {_axis(ctx, a, x.rank, "axes") for a in axes}
    return [_view(x, [d for i, d in enumerate(x.shape) if i not in axes])]


def _unsqueeze(ctx, node, inputs):
    x = inputs[0]
    axes = _axes_input(ctx, inputs)
    rank = x.rank + len(axes)
    axes = {_axis(ctx, a, rank, "axes") for a in axes}
    it = iter(x.shape)
    return [_view(x, [1 if i in axes else next(it) for i in range(rank)])]


def _identity(ctx, node, inputs):
    return [inputs[0]]


def _transpose(ctx, node, inputs):
    (x,) = inputs
    perm = list(ctx.attr("perm", list(reversed(range(x.rank)))))
    if sorted(perm) != list(range(x.rank)):
        raise ctx.fail(f"perm {perm} is not a permutation of {x.rank} axes")
    shape = tuple(x.shape[p] for p in perm)
    if x.const is not None:
        return [const_value(np.transpose(x.const, perm), ctx.where)]
    desc = ElementWiseIdentityOperatorDesc(permuted(x, perm), packed(x.data_type, shape))
    return [ctx.out(ctx.node(desc, [x]), shape)]


def _concat(ctx, node, inputs):
    xs = [v for v in inputs if v is not None and 0 not in v.shape]
    axis = _axis(ctx, ctx.attr("axis"), inputs[0].rank)
    shape = list(xs[0].shape)
    shape[axis] = sum(v.shape[axis] for v in xs)
    t = xs[0].data_type
    desc = JoinOperatorDesc([packed(t, v.shape) for v in xs], packed(t, shape), axis=axis)
    return [ctx.out(ctx.node(desc, xs), shape, is_bool=xs[0].is_bool)]


def _split(ctx, node, inputs):
    x = inputs[0]
    axis = _axis(ctx, ctx.attr("axis", 0), x.rank)
    count = len(node.output)
    sizes = None
    if len(inputs) > 1 and inputs[1] is not None:
        sizes = [int(s) for s in ctx.const(inputs[1], "split").reshape(-1)]
    elif ctx.attr("split") is not None:
        sizes = list(ctx.attr("split"))
    if sizes is None:
        n = x.shape[axis]
        piece = -(-n // count)
        sizes = [piece] * (count - 1) + [n - piece * (count - 1)]
    if sum(sizes) != x.shape[axis] or len(sizes) != count or min(sizes) < 1:
        raise ctx.fail(f"split sizes {sizes} do not cut dimension {axis} ({x.shape[axis]})")
    shapes = [x.shape[:axis] + (s,) + x.shape[axis + 1 :] for s in sizes]
    t = x.data_type
    desc = SplitOperatorDesc(packed(t, x.shape), [packed(t, s) for s in shapes], axis=axis)
    n = ctx.node(desc, [x])
    return [ctx.builder.output(n, k, s, is_bool=x.is_bool) for k, s in enumerate(shapes)]


def _slice(ctx, node, inputs):
    x = inputs[0]
    if ctx.opset < 10:
        starts, ends = ctx.attr("starts"), ctx.attr("ends")
        axes, steps = ctx.attr("axes"), None
    else:
        get = [None if i >= len(inputs) else inputs[i] for i in range(1, 5)]
        starts, ends, axes, steps = (
            None if v is None else [int(a) for a in ctx.const(v, name).reshape(-1)]
            for v, name in zip(get, ("starts", "ends", "axes", "steps"))
        )
    axes = list(range(len(starts))) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    offsets, windows, strides = [0] * x.rank, list(x.shape), [1] * x.rank
    sizes = list(x.shape)
    for a, s, e, st in zip(axes, starts, ends, steps):
        a = _axis(ctx, a, x.rank, "axes")
        idx = range(x.shape[a])[slice(s, e, st)]
        if len(idx) == 0:
            raise ctx.fail(f"the slice of axis {a} is empty")
        # The window holds every element read; a negative stride walks it from its end.
        offsets[a] = min(idx[0], idx[-1])
        windows[a] = abs(idx[-1] - idx[0]) + 1
        strides[a], sizes[a] = st, len(idx)
    t = x.data_type
    desc = Slice1OperatorDesc(
        packed(t, x.shape),
        packed(t, sizes),
        input_window_offsets=offsets,
        input_window_sizes=windows,
        input_window_strides=strides,
    )
    return [ctx.out(ctx.node(desc, [x]), sizes, is_bool=x.is_bool)]


def _gather(ctx, node, inputs):
    data, indices = inputs
    r, q = data.rank, indices.rank
    axis = _axis(ctx, ctx.attr("axis", 0), r)
    out_shape = data.shape[:axis] + indices.shape + data.shape[axis + 1 :]
    if data.const is not None and indices.const is not None:
        return [const_value(np.take(data.const, indices.const, axis=axis), ctx.where)]
    if indices.const is not None and indices.data_type.is_64bit:
        # Constant indices in INT32 (they index a dimension below 2^31): no 64-bit tensor.
        narrow = indices.const.astype(np.int32)
        indices = Value(indices.shape, DataType.INT32, ("const",), narrow)
    rank = max(r, q + r - 1, 1)
    desc = GatherOperatorDesc(
        packed(data.data_type, data.shape, rank),
        packed(indices.data_type, indices.shape, rank),
        packed(data.data_type, out_shape, rank),
        axis=axis + rank - r,
        index_dimensions=q,
    )
    return [ctx.out(ctx.node(desc, [data, indices]), out_shape, is_bool=data.is_bool)]


def _where(ctx, node, inputs):
    cond, a, b = inputs
    shape = _broadcast_shape(ctx, cond.shape, a.shape, b.shape)
    desc = ElementWiseIfOperatorDesc(
        broadcast(cond, shape, DataType.UINT8),
        broadcast(a, shape),
        broadcast(b, shape),
        packed(a.data_type, shape),
    )
    return [ctx.out(ctx.node(desc, [cond, a, b]), shape, is_bool=a.is_bool)]


def _constant(ctx, node, inputs):
    if "value" in ctx.attrs:
        return [const_value(array_of(ctx.attrs["value"]), ctx.where)]
    for name, dtype in (("value_float", np.float32), ("value_int", np.int64)):
        if name in ctx.attrs:
            return [const_value(np.asarray(ctx.attrs[name], dtype), ctx.where)]
    for name, dtype in (("value_floats", np.float32), ("value_ints", np.int64)):
        if name in ctx.attrs:
            return [const_value(np.asarray(list(ctx.attrs[name]), dtype), ctx.where)]
    raise ctx.fail(f"attributes {sorted(ctx.attrs)} are not supported")


def _shape(ctx, node, inputs):
    (x,) = inputs
    dims = np.asarray(x.shape, np.int64)
    start, end = ctx.attr("start", 0), ctx.attr("end", None)
    return [const_value(dims[slice(start, end)], ctx.where)]


# ---------------------------------------------------------------------------------------------
# The table

CONVERTERS: dict[str, Converter] = {
    "Add": _binary(ElementWiseAddOperatorDesc),
    "Sub": _binary(ElementWiseSubtractOperatorDesc),
    "Mul": _binary(ElementWiseMultiplyOperatorDesc),
    "Div": _binary(ElementWiseDivideOperatorDesc),
    "Pow": _pow,
    "Sqrt": _unary(ElementWiseSqrtOperatorDesc),
    "Exp": _unary(ElementWiseExpOperatorDesc),
    "Log": _unary(ElementWiseLogOperatorDesc),
    "Neg": _unary(ElementWiseNegateOperatorDesc),
    "Abs": _unary(ElementWiseAbsOperatorDesc),
    "Erf": _unary(ElementWiseErfOperatorDesc),
    "Tanh": _unary(ElementWiseTanhOperatorDesc),
    "Sigmoid": _unary(ActivationSigmoidOperatorDesc),
    "Relu": _unary(ActivationReluOperatorDesc),
    "LeakyRelu": _leaky_relu,
    "Gelu": _gelu,
    "Softmax": _softmax(ActivationSoftmax1OperatorDesc),
    "LogSoftmax": _softmax(ActivationLogSoftmax1OperatorDesc),
    "MatMul": _matmul,
    "Gemm": _gemm,
    "Conv": _conv,
    "BatchNormalization": _batch_norm,
    "MaxPool": _pool("max"),
    "AveragePool": _pool("avg"),
    "GlobalAveragePool": _global_pool("AVERAGE"),
    "GlobalMaxPool": _global_pool("MAX"),
    "Flatten": _flatten,
    "Reshape": _reshape,
    "Transpose": _transpose,
    "Concat": _concat,
    "Split": _split,
    "Slice": _slice,
    "Gather": _gather,
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Cast": _cast,
    "Identity": _identity,
    "ReduceMean": _reduce("AVERAGE"),
    "ReduceSum": _reduce("SUM"),
    "ReduceMax": _reduce("MAX"),
    "ReduceMin": _reduce("MIN"),
    "LayerNormalization": _layer_norm,
    "Where": _where,
    "Equal": _binary(ElementWiseLogicalEqualsOperatorDesc, is_bool=True),
    "Less": _binary(ElementWiseLogicalLessThanOperatorDesc, is_bool=True),
    "Greater": _binary(ElementWiseLogicalGreaterThanOperatorDesc, is_bool=True),
    "Constant": _constant,
    "Shape": _shape,
}


def register(op_type: str, converter: Converter) -> None:
    """Adds a converter for an ONNX op type (one not in the table yet)."""
    if op_type in CONVERTERS:
        raise ValueError(f"ONNX op type '{op_type}' already has a converter")
    CONVERTERS[op_type] = converter


__all__ = ["CONVERTERS", "register"]
