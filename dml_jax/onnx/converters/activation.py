"""Activations: DirectML's ACTIVATION_* operators, as ONNX Runtime's DirectML provider maps them.

Each element-wise activation is its ACTIVATION_* operator with ONNX's attributes (ONNX's
defaults where a node leaves them out); PRelu's slope is broadcast to the input's sizes through
stride-0 strides. Softmax, LogSoftmax and Hardmax before opset 13 normalize the input coerced to
2-D at ``axis`` (every axis from ``axis`` on): the original operators on that 2-D view, as the
provider does; from opset 13 the ``1`` operators over the single ``axis``. Dropout at inference
is the identity (its mask all true); in training mode a JAX node draws its mask. Gelu's tanh approximation, which DirectML has no operator
for, is composed exactly from element-wise operators.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from ...enums import DataType
from ...tensor import ScaleBias
from ..importer import broadcast, packed
from . import converter, register
from ._common import axis_of, op, unary, view

# ONNX's Selu defaults (the float32 values of its schema).
SELU_ALPHA = 1.67326319217681884765625
SELU_GAMMA = 1.05070102214813232421875

register("Relu", unary("ACTIVATION_RELU"))
register("Sigmoid", unary("ACTIVATION_SIGMOID"))
register("Tanh", unary("ACTIVATION_TANH"))
register("Softsign", unary("ACTIVATION_SOFTSIGN"))
# ONNX's Softplus is log(1 + exp(x)): Steepness 1.
register("Softplus", unary("ACTIVATION_SOFTPLUS", steepness=1.0))
# ONNX's HardSwish is x * HardSigmoid(x) with alpha 1/6 and beta 0.5 fixed.
register("HardSwish", unary("ACTIVATION_HARD_SWISH", alpha=1 / 6, beta=0.5))


def _with_attrs(name: str, **onnx_defaults: tuple[str, float]):
    """An activation whose DML FLOAT fields come from ONNX attributes: ``field=(attr, default)``."""

    def convert(ctx, node, inputs):
        fields = {k: float(ctx.attr(a, d)) for k, (a, d) in onnx_defaults.items()}
        return unary(name, **fields)(ctx, node, inputs)

    return convert


register("LeakyRelu", _with_attrs("ACTIVATION_LEAKY_RELU", alpha=("alpha", 0.01)))
register("Elu", _with_attrs("ACTIVATION_ELU", alpha=("alpha", 1.0)))
register("Celu", _with_attrs("ACTIVATION_CELU", alpha=("alpha", 1.0)))
register("ThresholdedRelu", _with_attrs("ACTIVATION_THRESHOLDED_RELU", alpha=("alpha", 1.0)))
register(
    "Selu",
    _with_attrs("ACTIVATION_SCALED_ELU", alpha=("alpha", SELU_ALPHA), gamma=("gamma", SELU_GAMMA)),
)
register(
    "HardSigmoid",
    _with_attrs("ACTIVATION_HARD_SIGMOID", alpha=("alpha", 0.2), beta=("beta", 0.5)),
)
# ONNX's Swish (opset 24) is x * sigmoid(alpha * x): SigmoidInputScale is alpha.
register("Swish", _with_attrs("ACTIVATION_SWISH", sigmoid_input_scale=("alpha", 1.0)))


@converter("Shrink")
def _shrink(ctx, node, inputs):
    """ACTIVATION_SHRINK, Threshold lambd. Integer Shrink follows DirectML's rule (Bias
    converted toward zero; docs/semantics.md). A negative lambd makes both of Shrink's cases
    hold between lambd and -lambd, where ONNX takes ``x < -lambd`` (``x + bias``) and
    DirectML ``x > Threshold`` (``x - Bias``): a float Shrink of negative lambd is
    ``-SHRINK(-x)``, whose first case is ONNX's (two negating ELEMENT_WISE_IDENTITY nodes)."""
    fields = {"bias": float(ctx.attr("bias", 0.0)), "threshold": float(ctx.attr("lambd", 0.5))}
    shrink = unary("ACTIVATION_SHRINK", **fields)
    (x,) = inputs
    if not fields["threshold"] < 0 or not x.data_type.is_float:
        return shrink(ctx, node, inputs)
    t = packed(x.data_type, x.shape)
    negate = op("ELEMENT_WISE_IDENTITY")(t, t, scale_bias=ScaleBias(-1.0, 0.0))
    minus = ctx.out(ctx.node(negate, [x]), x.shape)
    (y,) = shrink(ctx, node, [minus])
    return [ctx.out(ctx.node(negate, [y]), x.shape)]


@converter("PRelu")
def _prelu(ctx, node, inputs):
    x, slope = inputs
    if ctx.opset < 7 and slope.rank == 1 and x.rank > 2 and slope.shape[0] == x.shape[1] != 1:
        # Before opset 7 the slope is per channel (axis 1), not numpy-broadcast.
        slope = view(slope, (slope.shape[0],) + (1,) * (x.rank - 2))
    # The slope broadcasts to X (unidirectionally): X's shape is the output's.
    try:
        shape = np.broadcast_shapes(tuple(slope.shape), tuple(x.shape))
    except ValueError:
        shape = None
    if shape != tuple(x.shape):
        raise ctx.fail(f"slope of shape {list(slope.shape)} does not broadcast to {list(x.shape)}")
    t = packed(x.data_type, x.shape)
    desc = op("ACTIVATION_PARAMETERIZED_RELU")(t, broadcast(slope, x.shape), t)
    return [ctx.out(ctx.node(desc, [x, slope]), x.shape)]


def _normalized(name: str):
    """Softmax, LogSoftmax, Hardmax: ``ACTIVATION_<name>`` on the coerced 2-D view before opset
    13, ``ACTIVATION_<name>1`` over ``axis`` from 13."""

    def convert(ctx, node, inputs):
        (x,) = inputs
        r = max(x.rank, 1)
        if ctx.opset >= 13:
            axis = axis_of(ctx, ctx.attr("axis", -1), r)
            t = packed(x.data_type, x.shape)
            desc = op(f"ACTIVATION_{name}1")(t, t, axes=[axis])
            return [ctx.out(ctx.node(desc, [x]), x.shape)]
        # {product of the axes before ``axis``, product of the rest}: ``axis`` may be the rank
        # (one element per row), as Flatten's.
        axis = int(ctx.attr("axis", 1))
        if not -r <= axis <= r:
            raise ctx.fail(f"axis {axis} is out of range for rank {x.rank}")
        axis = axis + r if axis < 0 else axis
        dims = x.shape or (1,)
        flat = (math.prod(dims[:axis]), math.prod(dims[axis:]))
        t = packed(x.data_type, flat)
        y = ctx.out(ctx.node(op(f"ACTIVATION_{name}")(t, t), [view(x, flat)]), flat)
        return [view(y, x.shape)]

    return convert


register("Softmax", _normalized("SOFTMAX"))
register("LogSoftmax", _normalized("LOG_SOFTMAX"))
register("Hardmax", _normalized("HARDMAX"))


@converter("Dropout")
def _dropout(ctx, node, inputs):
    """Inference (and training with a ratio known to be 0): the input itself, and a mask of
    ones (all kept), as ONNX Runtime's DirectML provider runs Dropout (ACTIVATION_IDENTITY).
    Training mode (opset 12's ``training_mode`` input, known at import) with any other ratio:
    ``dropout_training``, a JAX node."""
    x, ratio, training = (list(inputs) + [None, None])[:3]
    training = training is not None and bool(ctx.const(training, "training_mode").any())
    # Only a ratio known to be 0 keeps every element (and scales by 1).
    known_zero = ratio is not None and ratio.const is not None and not ratio.const.any()
    if training and not known_zero:
        return dropout_training(ctx, x, ratio)
    outputs = [x]
    if ctx.wants(1):
        # Dropout-7's mask has the data's type; later ones are BOOL.
        if ctx.opset < 10:
            mask = np.ones(x.shape, x.data_type.numpy_dtype)
        else:
            mask = np.ones(x.shape, np.bool_)
        outputs.append(ctx.constant(mask))
    return outputs


def dropout_training(ctx, x, ratio):
    """Training-mode Dropout, which no DirectML operator draws (ONNX Runtime's DirectML provider
    leaves it to the CPU): a JAX node keeping each element where a uniform draw in [0, 1) is
    >= ratio (default 0.5), scaled by 1 / (1 - ratio), and 0 elsewhere; the mask is the kept
    elements. A run-time ratio of 0 keeps everything (the identity, an all-true mask), of 1
    nothing (zeros). The draw's key is the ``seed`` attribute or a fixed default
    (``random.key_of``): every run of a session draws the same mask."""
    from .random import key_of

    if not x.data_type.is_float:
        raise ctx.fail(f"input 'data' must be a float tensor, got {x.data_type.name}")
    if ratio is not None and (ratio.shape != () and ratio.shape != (1,)):
        raise ctx.fail(f"input 'ratio' must be a scalar, got shape {list(ratio.shape)}")
    key = key_of(ctx)
    compute = jnp.promote_types(x.data_type.numpy_dtype, jnp.float32)
    shape = tuple(x.shape)

    def drop(data, r=None):
        r = jnp.asarray(0.5 if r is None else r.reshape(()), compute)
        keep = jax.random.uniform(jax.random.key(key), shape, compute) >= r
        scaled = data.astype(compute) / (1 - r)
        return jnp.where(keep, scaled, 0), keep

    present = [x] if ratio is None else [x, ratio]
    y, mask = ctx.jax(
        "Dropout.training", drop, present, [(shape, x.data_type), (shape, DataType.UINT8, True)]
    )
    return [y, mask] if ctx.wants(1) else [y]


def _scaled(ctx, name: str, x, scale: float, bias: float = 0.0):
    """``name`` (ELEMENT_WISE_IDENTITY, _TANH...) of ``x * scale + bias`` (DML's ScaleBias)."""
    t = packed(x.data_type, x.shape)
    desc = op(name)(t, t, scale_bias=ScaleBias(scale, bias))
    return ctx.out(ctx.node(desc, [x]), x.shape)


def _binary(ctx, name: str, a, b):
    t = packed(a.data_type, a.shape)
    return ctx.out(ctx.node(op(name)(t, t, t), [a, b]), a.shape)


@converter("Gelu")
def _gelu(ctx, node, inputs):
    """'none': ACTIVATION_GELU (the erf form). 'tanh': ONNX's formula
    ``0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))`` term by term, each product
    and sum an element-wise operator (ScaleBias for the constant factors), as its function body
    computes it; the last two steps as ``x * (0.5 + 0.5 * tanh(...))``, equal in floating point
    (halving is exact)."""
    (x,) = inputs
    approximate = ctx.attr("approximate", "none")
    if approximate == "none":
        return unary("ACTIVATION_GELU")(ctx, node, inputs)
    if approximate != "tanh":
        raise ctx.fail(f"approximate must be 'none' or 'tanh', got '{approximate}'")
    cube = _binary(ctx, "ELEMENT_WISE_MULTIPLY", _binary(ctx, "ELEMENT_WISE_MULTIPLY", x, x), x)
    inner = _binary(
        ctx, "ELEMENT_WISE_ADD", x, _scaled(ctx, "ELEMENT_WISE_IDENTITY", cube, 0.044715)
    )
    t = _scaled(ctx, "ELEMENT_WISE_TANH", inner, math.sqrt(2 / math.pi))
    return [
        _binary(ctx, "ELEMENT_WISE_MULTIPLY", x, _scaled(ctx, "ELEMENT_WISE_IDENTITY", t, 0.5, 0.5))
    ]
