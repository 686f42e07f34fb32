"""Activations: DirectML's ACTIVATION_* operators."""

from __future__ import annotations

from ..importer import packed
from . import converter, register
from ._common import axis_of, op, unary

register("Tanh", unary("ELEMENT_WISE_TANH"))
register("Sigmoid", unary("ACTIVATION_SIGMOID"))
register("Relu", unary("ACTIVATION_RELU"))


@converter("LeakyRelu")
def _leaky_relu(ctx, node, inputs):
    return unary("ACTIVATION_LEAKY_RELU", alpha=float(ctx.attr("alpha", 0.01)))(ctx, node, inputs)


@converter("Gelu")
def _gelu(ctx, node, inputs):
    if ctx.attr("approximate", "none") != "none":
        raise ctx.fail(
            f"approximate='{ctx.attr('approximate')}' is not supported (DirectML's "
            "GELU is the exact erf form)"
        )
    return unary("ACTIVATION_GELU")(ctx, node, inputs)


def _softmax(name: str):
    def convert(ctx, node, inputs):
        (x,) = inputs
        r = max(x.rank, 1)
        if ctx.opset >= 13:
            axes = [axis_of(ctx, ctx.attr("axis", -1), r)]
        else:  # opset < 13: the input is coerced to 2-D at ``axis``
            axes = list(range(axis_of(ctx, ctx.attr("axis", 1), r), r))
        t = packed(x.data_type, x.shape)
        return [ctx.out(ctx.node(op(name)(t, t, axes=axes), [x]), x.shape)]

    return convert


register("Softmax", _softmax("ACTIVATION_SOFTMAX1"))
register("LogSoftmax", _softmax("ACTIVATION_LOG_SOFTMAX1"))
