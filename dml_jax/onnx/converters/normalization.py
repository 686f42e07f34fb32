"""Normalization: BATCH_NORMALIZATION (and _TRAINING), the MEAN_VARIANCE_NORMALIZATION family,
LOCAL_RESPONSE_NORMALIZATION and LP_NORMALIZATION, as ONNX Runtime's DirectML provider maps them.

- BatchNormalization: BATCH_NORMALIZATION with {1, C, 1, ...} statistics, scale and bias (before
  opset 9, ``spatial`` 0 gives them the input's sizes but N). ``training_mode`` (opset 14):
  BATCH_NORMALIZATION_TRAINING over every dimension but C, and the running statistics ONNX
  blends from the given ones (``momentum``) by element-wise operators.
- InstanceNormalization: MEAN_VARIANCE_NORMALIZATION1 over axes 2.. (the input padded to 4-D).
- LayerNormalization: MEAN_VARIANCE_NORMALIZATION1 over the axes from ``axis``; the Mean and
  InvStdDev outputs from REDUCE and element-wise operators in ``stash_type``.
- GroupNormalization: MEAN_VARIANCE_NORMALIZATION1 over a {N, G, C / G, rest} view (scale and
  bias per group at opset 18, per channel from 21).
- RMSNormalization: MEAN_VARIANCE_NORMALIZATION2 without the mean.
- MeanVarianceNormalization: MEAN_VARIANCE_NORMALIZATION1 over ``axes``, the provider's
  Epsilon 1e-5 (added to the variance; ONNX adds 1e-9 to the standard deviation).
- LRN: LOCAL_RESPONSE_NORMALIZATION across channels on a 4-D view.
- LpNormalization: LP_NORMALIZATION with the provider's Epsilon 1e-5.

Mixed precision (float16 data with float32 parameters, or the reverse) is computed in float32,
every tensor cast up and the result cast once to the output's type (ONNX Runtime's
LayerNormalization does this); nothing is cast down.
"""

from __future__ import annotations

import math

import numpy as np

from ...enums import DataType
from ...tensor import ScaleBias, TensorDesc
from ..elements import data_type_of
from ..importer import Value, broadcast, packed
from . import converter
from ._common import axis_of, op, view

# ONNX Runtime's DirectML provider uses this Epsilon where ONNX has none to give (MVN, LpNorm).
PROVIDER_EPSILON = 1e-5


# ---------------------------------------------------------------------------------------------
# Helpers


def _cast(ctx, x: Value, to: DataType) -> Value:
    """``x`` as ``to`` through a CAST node (a parameter stays a parameter: it is not folded)."""
    if x is None or x.data_type == to:
        return x
    n = ctx.node(op("CAST")(packed(x.data_type, x.shape), packed(to, x.shape)), [x])
    return ctx.out(n, x.shape)


def _common_type(ctx, *values: Value | None) -> DataType:
    """The type the operator computes in: float32 when float16 and float32 meet (casting up is
    exact), else the one type they share. Other mixtures are left to the operator's own
    validation."""
    types = {v.data_type for v in values if v is not None}
    if types == {DataType.FLOAT16, DataType.FLOAT32}:
        return DataType.FLOAT32
    return values[0].data_type


def _unify(ctx, *values: Value | None) -> tuple[DataType, list[Value | None]]:
    t = _common_type(ctx, *values)
    return t, [_cast(ctx, v, t) for v in values]


def _per_channel(v: Value, rank: int, channels: int) -> Value:
    """A {C} (or broadcastable) parameter as {1, C, 1, ...} of ``rank`` dimensions."""
    if v.rank == 1 or v.rank == 0:
        return view(v, (1, v.shape[0] if v.shape else 1) + (1,) * (rank - 2))
    return view(v, (1,) + tuple(v.shape) + (1,) * (rank - 1 - v.rank))


def _mvn1(ctx, x: Value, scale, bias, axes, epsilon: float, shape=None) -> Value:
    """MEAN_VARIANCE_NORMALIZATION1 of ``x`` (viewed as ``shape``) over ``axes``, scale and bias
    broadcast to it; the result in ``x``'s shape."""
    shape = tuple(shape or x.shape)
    xv = view(x, shape)
    t = x.data_type
    desc = op("MEAN_VARIANCE_NORMALIZATION1")(
        packed(t, shape),
        None if scale is None else broadcast(scale, shape),
        None if bias is None else broadcast(bias, shape),
        packed(t, shape),
        axes=sorted(axes),
        normalize_variance=True,
        epsilon=float(epsilon),
    )
    return view(ctx.out(ctx.node(desc, [xv, scale, bias]), shape), x.shape)


def _unary_scaled(ctx, name: str, x: Value, scale: float = 1.0, bias: float = 0.0) -> Value:
    t = packed(x.data_type, x.shape)
    sb = None if (scale, bias) == (1.0, 0.0) else ScaleBias(scale, bias)
    return ctx.out(ctx.node(op(name)(t, t, scale_bias=sb), [x]), x.shape)


def _binary(ctx, name: str, a: Value, b: Value) -> Value:
    shape = tuple(np.broadcast_shapes(a.shape, b.shape))
    desc = op(name)(broadcast(a, shape), broadcast(b, shape), packed(a.data_type, shape))
    return ctx.out(ctx.node(desc, [a, b]), shape)


def _reduce(ctx, function: str, x: Value, axes) -> Value:
    kept = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    desc = op("REDUCE")(function, packed(x.data_type, x.shape), packed(x.data_type, kept),
                        axes=sorted(axes))  # fmt: skip
    return ctx.out(ctx.node(desc, [x]), kept)


# ---------------------------------------------------------------------------------------------
# BatchNormalization


@converter("BatchNormalization")
def _batch_norm(ctx, node, inputs):
    x, scale, bias, mean, var = inputs[:5]
    if x.rank < 2:
        raise ctx.fail(f"the input must have 2 or more dimensions (N, C, ...), got {x.rank}")
    training = ctx.opset >= 14 and bool(int(ctx.attr("training_mode", 0)))
    if ctx.output_count > 1 and not training:
        raise ctx.fail(
            "outputs beyond Y are training outputs: they need opset 14's training_mode "
            f"(opset {ctx.opset}, training_mode {int(ctx.attr('training_mode', 0))})"
        )
    out_type = x.data_type
    t, (x, scale, bias, mean, var) = _unify(ctx, x, scale, bias, mean, var)
    epsilon = float(ctx.attr("epsilon", 1e-5))
    # DirectML's BATCH_NORMALIZATION has 4-D tensors before feature level 3_1: pad N, C, ... to
    # 4 dimensions with trailing ones, as ONNX Runtime does.
    sizes = tuple(x.shape) + (1,) * max(0, 4 - x.rank)
    xv = view(x, sizes)
    if training:
        y, outs = _batch_norm_training(ctx, xv, scale, bias, mean, var, epsilon)
    else:
        spatial = ctx.opset >= 9 or bool(int(ctx.attr("spatial", 1)))
        if spatial:
            names = ("scale", "B", "input_mean", "input_var")
            for name, v in zip(names, (scale, bias, mean, var)):
                if math.prod(v.shape) != x.shape[1]:
                    raise ctx.fail(
                        f"input '{name}' has shape {list(v.shape)}: one value per channel "
                        f"({x.shape[1]}) is needed"
                    )
            params = [_per_channel(v, len(sizes), x.shape[1]) for v in (mean, var, scale, bias)]
        else:  # one statistic per element of a sample: {C, D1, ...}
            params = [view(v, (1,) + tuple(v.shape) + (1,) * (len(sizes) - 1 - v.rank))
                      for v in (mean, var, scale, bias)]  # fmt: skip
        desc = op("BATCH_NORMALIZATION")(
            packed(t, sizes),
            *[broadcast(p, sizes) for p in params],
            packed(t, sizes),
            spatial=spatial,
            epsilon=epsilon,
        )
        y = ctx.out(ctx.node(desc, [xv, *params]), sizes)
        outs = []
    y = _cast(ctx, view(y, x.shape), out_type)
    return [y] + outs[: ctx.output_count - 1]


def _batch_norm_training(ctx, x: Value, scale, bias, mean, var, epsilon: float):
    """Y and ONNX's running statistics ``given * momentum + batch * (1 - momentum)``, the batch
    statistics (population variance) from BATCH_NORMALIZATION_TRAINING."""
    rank = x.rank
    c = x.shape[1]
    stat = (1, c) + (1,) * (rank - 2)
    s, b = (_per_channel(v, rank, c) for v in (scale, bias))
    t = x.data_type
    st = TensorDesc(t, stat)
    desc = op("BATCH_NORMALIZATION_TRAINING")(
        packed(t, x.shape), broadcast(s, stat), broadcast(b, stat), None,
        packed(t, x.shape), st, st, epsilon=epsilon,
    )  # fmt: skip
    n = ctx.node(desc, [x, s, b, None])
    y = ctx.out(n, x.shape)
    momentum = float(np.float32(ctx.attr("momentum", 0.9)))
    outs = []
    for k, given in ((1, mean), (2, var)):
        if not ctx.wants(k):
            outs.append(None)
            continue
        batch = ctx.out(n, stat, k)
        kept = _unary_scaled(ctx, "ELEMENT_WISE_IDENTITY", view(given, stat), momentum)
        new = _unary_scaled(ctx, "ELEMENT_WISE_IDENTITY", batch, float(np.float32(1 - momentum)))
        outs.append(view(_binary(ctx, "ELEMENT_WISE_ADD", kept, new), (c,)))
    return y, outs


# ---------------------------------------------------------------------------------------------
# The MEAN_VARIANCE_NORMALIZATION family


@converter("InstanceNormalization")
def _instance_norm(ctx, node, inputs):
    x, scale, bias = inputs
    if x.rank < 2:
        raise ctx.fail(f"the input must have 2 or more dimensions (N, C, ...), got {x.rank}")
    out_type = x.data_type
    _, (x, scale, bias) = _unify(ctx, x, scale, bias)
    # Padded to 4-D with trailing ones (ONNX Runtime's rule): a {N, C} input normalizes single
    # elements (the result is the bias).
    shape = tuple(x.shape) + (1,) * max(0, 4 - x.rank)
    s, b = (_per_channel(v, len(shape), x.shape[1]) for v in (scale, bias))
    axes = range(2, len(shape))
    y = _mvn1(ctx, x, s, b, axes, ctx.attr("epsilon", 1e-5), shape)
    return [_cast(ctx, y, out_type)]


@converter("MeanVarianceNormalization")
def _mvn(ctx, node, inputs):
    (x,) = inputs
    axes = {axis_of(ctx, a, x.rank, "axes") for a in ctx.attr("axes", [0, 2, 3])}
    return [_mvn1(ctx, x, None, None, axes, PROVIDER_EPSILON)]


@converter("LayerNormalization")
def _layer_norm(ctx, node, inputs):
    x, scale, bias = (list(inputs) + [None])[:3]
    axis = axis_of(ctx, ctx.attr("axis", -1), x.rank)
    axes = list(range(axis, x.rank))
    epsilon = float(ctx.attr("epsilon", 1e-5))
    out_type = x.data_type
    _, (xc, scale, bias) = _unify(ctx, x, scale, bias)
    y = _cast(ctx, _mvn1(ctx, xc, scale, bias, axes, epsilon), out_type)
    if ctx.output_count == 1:
        return [y]
    # Mean and InvStdDev (ONNX Runtime's provider leaves these to the CPU): in stash_type, the
    # mean, then 1 / sqrt(mean((x - mean)^2) + epsilon), each reduced axis kept as 1.
    stash = data_type_of(int(ctx.attr("stash_type", 1)), ctx.where)
    xs = _cast(ctx, x, stash)
    mean = _reduce(ctx, "AVERAGE", xs, axes)
    d = _binary(ctx, "ELEMENT_WISE_SUBTRACT", xs, mean)
    var = _reduce(ctx, "AVERAGE", _binary(ctx, "ELEMENT_WISE_MULTIPLY", d, d), axes)
    std = _unary_scaled(ctx, "ELEMENT_WISE_SQRT", var, 1.0, epsilon)
    inv = _unary_scaled(ctx, "ELEMENT_WISE_RECIP", std)
    return [y, mean if ctx.wants(1) else None, inv if ctx.wants(2) else None]


@converter("GroupNormalization")
def _group_norm(ctx, node, inputs):
    x, scale, bias = inputs
    if x.rank < 2:
        raise ctx.fail(f"the input must have 2 or more dimensions (N, C, ...), got {x.rank}")
    groups = int(ctx.attr("num_groups"))
    n, c = x.shape[:2]
    if groups <= 0 or c % groups:
        raise ctx.fail(f"num_groups {groups} does not divide the {c} channels")
    out_type = x.data_type
    _, (x, scale, bias) = _unify(ctx, x, scale, bias)
    shape = (n, groups, c // groups, math.prod(x.shape[2:]))
    # Opset 18 scales and shifts each group, opset 21 each channel.
    per = (1, groups, 1, 1) if ctx.opset < 21 else (1, groups, c // groups, 1)
    for v, what in ((scale, "scale"), (bias, "bias")):
        if math.prod(v.shape) != math.prod(per):
            raise ctx.fail(
                f"{what} of shape {list(v.shape)} must hold {math.prod(per)} values at opset "
                f"{ctx.opset} ({'one per group' if ctx.opset < 21 else 'one per channel'})"
            )
    s, b = view(scale, per), view(bias, per)
    y = _mvn1(ctx, x, s, b, (2, 3), ctx.attr("epsilon", 1e-5), shape)
    return [_cast(ctx, y, out_type)]


@converter("RMSNormalization")
def _rms_norm(ctx, node, inputs):
    x, scale = inputs
    axis = axis_of(ctx, ctx.attr("axis", -1), x.rank)
    out_type = scale.data_type  # Y has the scale's type
    t, (x, scale) = _unify(ctx, x, scale)
    desc = op("MEAN_VARIANCE_NORMALIZATION2")(
        packed(t, x.shape),
        broadcast(scale, x.shape),
        None,
        packed(t, x.shape),
        axes=list(range(axis, x.rank)),
        use_mean=False,
        use_variance=True,
        epsilon=float(ctx.attr("epsilon", 1e-5)),
    )
    y = ctx.out(ctx.node(desc, [x, scale, None]), x.shape)
    return [_cast(ctx, y, out_type)]


# ---------------------------------------------------------------------------------------------
# LRN, LpNormalization


@converter("LRN")
def _lrn(ctx, node, inputs):
    (x,) = inputs
    if x.rank < 2:
        raise ctx.fail(f"the input must have 2 or more dimensions (N, C, ...), got {x.rank}")
    # ONNX windows the channels only; DirectML's operator is 4-D: {N, C, the rest, 1}.
    shape = x.shape if x.rank == 4 else (*x.shape[:2], math.prod(x.shape[2:]), 1)
    t = packed(x.data_type, shape)
    desc = op("LOCAL_RESPONSE_NORMALIZATION")(
        t, t, cross_channel=True, local_size=int(ctx.attr("size")),
        alpha=float(ctx.attr("alpha", 1e-4)), beta=float(ctx.attr("beta", 0.75)),
        bias=float(ctx.attr("bias", 1.0)),
    )  # fmt: skip
    return [view(ctx.out(ctx.node(desc, [view(x, shape)]), shape), x.shape)]


@converter("LpNormalization")
def _lp_norm(ctx, node, inputs):
    (x,) = inputs
    axis = axis_of(ctx, ctx.attr("axis", -1), x.rank)
    t = packed(x.data_type, x.shape)
    desc = op("LP_NORMALIZATION")(
        t, t, axis=axis, epsilon=PROVIDER_EPSILON, p=int(ctx.attr("p", 2))
    )
    return [ctx.out(ctx.node(desc, [x]), x.shape)]
