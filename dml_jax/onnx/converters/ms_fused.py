"""ONNX Runtime's ``com.microsoft`` contrib ops of optimized transformer models (what
``onnxruntime.transformers.optimizer`` and ONNX Runtime's own level-2 fusions emit), on the
DirectML operators ONNX Runtime's DirectML provider uses for them: here the fused products and
activations and what the family shares (the contrib schemas, the node checks, the
normalization pieces), the normalizations, embeddings and convolutions in ``ms_layers.py``;
the numbers follow the contrib ops' specification (``docs/ContribOperators.md``) and their CPU
kernels.

- FusedMatMul: one GEMM; every transpose (``transA``/``transB`` of the last two dimensions,
  ``transBatchA``/``transBatchB``, which move the first dimension behind the batch dimensions) is
  strides of the operands, ``alpha`` is GEMM's Alpha, the batch dimensions broadcast and fold as
  MatMul's do. FusedMatMulActivation (ONNX Runtime's MatMulActivationFusion, a FusedMatMul and
  the Softmax after it) adds SOFTMAX1 as GEMM's fused activation.
- FusedGemm (the CPU provider's Gemm + activation fusion): Gemm's converter, then the
  activation's.
- Gelu: ACTIVATION_GELU. BiasGelu: ELEMENT_WISE_ADD, then ACTIVATION_GELU.
- FastGelu: the tanh approximation of the contrib spec and its CPU kernel,
  ``0.5 * x * (1 + tanh(x * (0.7978845608 + 0.0356774081 * x^2)))`` with the optional bias added
  first, composed from element-wise operators (ScaleBias for the constants). ONNX Runtime's
  DirectML provider runs FastGelu on the erf-form ACTIVATION_GELU instead (up to about 5e-4
  apart); the contrib spec's numbers are kept here, so a model gives what its CPU kernel gives.
- QuickGelu: ``x * sigmoid(alpha * x)``: ELEMENT_WISE_IDENTITY (ScaleBias alpha),
  ACTIVATION_SIGMOID, ELEMENT_WISE_MULTIPLY. BiasAdd: two ELEMENT_WISE_ADDs. BiasSplitGelu:
  ELEMENT_WISE_ADD, SPLIT of the last dimension in halves, ACTIVATION_GELU of the second,
  ELEMENT_WISE_MULTIPLY.
These nodes are never folded (the ``onnx`` package has no schema for them), and ``schema.check``
finds none to check them against: each converter checks its node against the contrib schema
(``_SPECS``: input and output counts, required inputs, attribute names and types).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ...enums import DataType
from ...tensor import ScaleBias, TensorDesc, packed_strides
from ..importer import Context, Value, broadcast, packed
from . import REGISTRY
from ._common import axis_of, broadcast_shape, op, view
from .gemm_conv import fold_batch, strided_desc

MS = "com.microsoft"
FLOAT_TYPES = (DataType.FLOAT32, DataType.FLOAT16)

# AttributeProto types.
_FLOAT, _INT, _STRING, _INTS = 1, 2, 3, 7
_TYPE_NAMES = {_FLOAT: "float", _INT: "int", _STRING: "string", _INTS: "ints"}


# ---------------------------------------------------------------------------------------------
# The contrib schemas (what ``schema.check`` does for ai.onnx ops)


@dataclass(frozen=True)
class _Spec:
    """A contrib op's formal inputs and outputs (a trailing ``?`` marks an optional one) and
    attributes by name: ``(AttributeProto type, required)``."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: dict[str, tuple[int, bool]] = field(default_factory=dict)


_MATMUL_ATTRS = {
    "alpha": (_FLOAT, False),
    "transA": (_INT, False),
    "transB": (_INT, False),
    "transBatchA": (_INT, False),
    "transBatchB": (_INT, False),
}
_CONV_ATTRS = {
    "auto_pad": (_STRING, False),
    "dilations": (_INTS, False),
    "group": (_INT, False),
    "kernel_shape": (_INTS, False),
    "strides": (_INTS, False),
}
_SPECS = {
    "FusedMatMul": _Spec(("A", "B"), ("Y",), _MATMUL_ATTRS),
    "FusedMatMulActivation": _Spec(
        ("A", "B"),
        ("Y",),
        {
            **_MATMUL_ATTRS,
            "activation": (_STRING, True),
            "activation_alpha": (_FLOAT, False),
            "activation_beta": (_FLOAT, False),
            "activation_gamma": (_FLOAT, False),
            "activation_axis": (_INT, False),
        },
    ),
    "FusedGemm": _Spec(
        ("A", "B", "C?"),
        ("Y",),
        {
            "alpha": (_FLOAT, False),
            "beta": (_FLOAT, False),
            "transA": (_INT, False),
            "transB": (_INT, False),
            "activation": (_STRING, False),
            "activation_alpha": (_FLOAT, False),
            "activation_beta": (_FLOAT, False),
            "activation_gamma": (_FLOAT, False),
        },
    ),
    "Gelu": _Spec(("X",), ("Y",)),
    "FastGelu": _Spec(("X", "bias?"), ("Y",)),
    "BiasGelu": _Spec(("A", "B"), ("C",)),
    "QuickGelu": _Spec(("X",), ("Y",), {"alpha": (_FLOAT, False)}),
    "BiasAdd": _Spec(("X", "bias", "skip"), ("Y",)),
    "BiasSplitGelu": _Spec(("X", "bias"), ("Y",)),
    "SkipLayerNormalization": _Spec(
        ("input", "skip", "gamma", "beta?", "bias?"),
        ("output", "mean?", "inv_std_var?", "input_skip_bias_sum?"),
        {"epsilon": (_FLOAT, False)},
    ),
    "SkipSimplifiedLayerNormalization": _Spec(
        ("input", "skip", "gamma", "bias?"),
        ("output", "mean?", "inv_std_var?", "input_skip_bias_sum?"),
        {"epsilon": (_FLOAT, False)},
    ),
    "SimplifiedLayerNormalization": _Spec(
        ("X", "scale"),
        ("Y", "inv_std_var?"),
        {"axis": (_INT, False), "epsilon": (_FLOAT, False), "stash_type": (_INT, False)},
    ),
    "EmbedLayerNormalization": _Spec(
        (
            "input_ids",
            "segment_ids?",
            "word_embedding",
            "position_embedding",
            "segment_embedding?",
            "gamma",
            "beta",
            "mask?",
            "position_ids?",
        ),
        ("output", "mask_index?", "embedding_sum?"),
        {"epsilon": (_FLOAT, False), "mask_index_type": (_INT, False)},
    ),
    "GroupNorm": _Spec(
        ("X", "gamma", "beta"),
        ("Y",),
        {
            "activation": (_INT, True),
            "channels_last": (_INT, False),
            "epsilon": (_FLOAT, False),
            "groups": (_INT, True),
        },
    ),
    "NhwcConv": _Spec(("X", "W", "B?"), ("Y",), {**_CONV_ATTRS, "pads": (_INTS, False)}),
    "ConvTransposeWithDynamicPads": _Spec(
        ("X", "W", "Pads?", "B?"), ("Y",), {**_CONV_ATTRS, "output_padding": (_INTS, False)}
    ),
}


def _check(ctx: Context, node, inputs: Sequence[Value | None], spec: _Spec) -> None:
    """``node`` against its contrib schema; raises a ValidationError naming the node."""
    given, formal = len(node.input), len(spec.inputs)
    if given > formal:
        raise ctx.fail(f"{given} inputs; {node.op_type} takes at most {formal}")
    for k, name in enumerate(spec.inputs):
        if not name.endswith("?") and (k >= given or inputs[k] is None):
            raise ctx.fail(f"input {k} ('{name}') is required")
    n_out = len(node.output)
    if not 1 <= n_out <= len(spec.outputs) or not node.output[0]:
        raise ctx.fail(
            f"{n_out} outputs (the first named); {node.op_type} has 1 to {len(spec.outputs)}"
        )
    seen = set()
    for a in node.attribute:
        want = spec.attrs.get(a.name)
        if want is None:
            raise ctx.fail(f"attribute '{a.name}' is not an attribute of {node.op_type}")
        if int(a.type) != want[0]:
            got = _TYPE_NAMES.get(int(a.type), str(int(a.type)))
            raise ctx.fail(f"attribute '{a.name}' must be {_TYPE_NAMES[want[0]]}, got {got}")
        seen.add(a.name)
    for name, (_, required) in spec.attrs.items():
        if required and name not in seen:
            raise ctx.fail(f"attribute '{name}' is required")


def contrib_converter(op_type: str, *, domains: Sequence[str] = (MS,)):
    """Registers the decorated converter for ``op_type`` in ``domains``, checked against
    ``_SPECS[op_type]`` first."""
    spec = _SPECS[op_type]

    def wrap(fn):
        def convert(ctx, node, inputs):
            inputs = list(inputs) + [None] * (len(spec.inputs) - len(inputs))
            _check(ctx, node, inputs, spec)
            return fn(ctx, node, inputs)

        convert.__doc__ = fn.__doc__
        for domain in domains:
            REGISTRY.register(op_type, convert, domain=domain, group=fn.__module__)
        return fn

    return wrap


# ---------------------------------------------------------------------------------------------
# Helpers


def float_type_of(ctx: Context, *named: tuple[str, Value | None]) -> DataType:
    """The one float type (FLOAT32 or FLOAT16) of the present ``(name, value)`` pairs."""
    present = [(n, v) for n, v in named if v is not None]
    t = present[0][1].data_type
    for name, v in present:
        if v.data_type not in FLOAT_TYPES:
            raise ctx.fail(f"{name} must be float or float16, got {v.data_type.name}")
        if v.data_type != t:
            raise ctx.fail(
                f"{name} is {v.data_type.name}, but {present[0][0]} is {t.name} (one type T)"
            )
    return t


def check_hidden_vector(ctx: Context, v: Value | None, hidden: int, what: str) -> None:
    """A per-hidden-unit parameter must be 1-D of ``hidden`` values."""
    if v is not None and tuple(v.shape) != (hidden,):
        raise ctx.fail(f"{what} must have shape [{hidden}], got {list(v.shape)}")


def unary_op(ctx: Context, name: str, x: Value, scale: float = 1.0, bias: float = 0.0) -> Value:
    """``name`` (an element-wise operator or activation) of ``x``, with ``x * scale + bias``
    inside it (DML's ScaleBias) when those are not 1 and 0."""
    t = packed(x.data_type, x.shape)
    if (scale, bias) == (1.0, 0.0):
        desc = op(name)(t, t)
    else:
        desc = op(name)(t, t, scale_bias=ScaleBias(float(scale), float(bias)))
    return ctx.out(ctx.node(desc, [x]), x.shape)


def binary_op(ctx: Context, name: str, a: Value, b: Value) -> Value:
    """A broadcasting element-wise operator of ``a`` and ``b`` (the result in ``a``'s type)."""
    shape = broadcast_shape(ctx, a.shape, b.shape)
    desc = op(name)(broadcast(a, shape), broadcast(b, shape), packed(a.data_type, shape))
    return ctx.out(ctx.node(desc, [a, b]), shape)


def cast_to(ctx: Context, x: Value, to: DataType) -> Value:
    """``x`` as ``to`` through a CAST node (a parameter stays in the graph: never folded)."""
    if x is None or x.data_type == to:
        return x
    n = ctx.node(op("CAST")(packed(x.data_type, x.shape), packed(to, x.shape)), [x])
    return ctx.out(n, x.shape)


def reduce_op(ctx: Context, function: str, x: Value, axes: Sequence[int]) -> Value:
    """REDUCE over ``axes``, each kept as a dimension of 1."""
    kept = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    desc = op("REDUCE")(
        function, packed(x.data_type, x.shape), packed(x.data_type, kept), axes=sorted(axes)
    )
    return ctx.out(ctx.node(desc, [x]), kept)


def inv_std(ctx: Context, x: Value, axes, epsilon: float, *, centered: bool) -> tuple:
    """``(mean, 1 / sqrt(variance + epsilon))`` of ``x`` over ``axes`` (each kept as 1); the
    uncentered variance (mean of squares) when not ``centered``, its mean then None."""
    mean = reduce_op(ctx, "AVERAGE", x, axes) if centered else None
    d = binary_op(ctx, "ELEMENT_WISE_SUBTRACT", x, mean) if centered else x
    var = reduce_op(ctx, "AVERAGE", binary_op(ctx, "ELEMENT_WISE_MULTIPLY", d, d), axes)
    return mean, unary_op(
        ctx, "ELEMENT_WISE_RECIP", unary_op(ctx, "ELEMENT_WISE_SQRT", var, 1, epsilon)
    )


def mvn2(ctx, x: Value, scale, bias, axes, epsilon: float, *, use_mean: bool) -> Value:
    """MEAN_VARIANCE_NORMALIZATION2 of ``x`` over ``axes``, scale and bias broadcast."""
    t = packed(x.data_type, x.shape)
    desc = op("MEAN_VARIANCE_NORMALIZATION2")(
        t,
        None if scale is None else broadcast(scale, x.shape),
        None if bias is None else broadcast(bias, x.shape),
        t,
        axes=sorted(axes),
        use_mean=use_mean,
        use_variance=True,
        epsilon=float(epsilon),
    )
    return ctx.out(ctx.node(desc, [x, scale, bias]), x.shape)


def mvn1(ctx, x: Value, scale, bias, axes, epsilon: float) -> Value:
    """MEAN_VARIANCE_NORMALIZATION1 of ``x`` over ``axes``, scale and bias broadcast."""
    t = packed(x.data_type, x.shape)
    desc = op("MEAN_VARIANCE_NORMALIZATION1")(
        t,
        None if scale is None else broadcast(scale, x.shape),
        None if bias is None else broadcast(bias, x.shape),
        t,
        axes=sorted(axes),
        normalize_variance=True,
        epsilon=float(epsilon),
    )
    return ctx.out(ctx.node(desc, [x, scale, bias]), x.shape)


def as_onnx_context(ctx: Context, attrs: dict) -> Context:
    """A context in which an ai.onnx op's converter maps this node: ``attrs`` as the node's
    attributes, the model's ai.onnx opset as its opset."""
    inner = Context(ctx.builder, ctx.onnx_node, ctx.opsets, ctx.where)
    inner.attrs = dict(attrs)
    inner.opset = ctx.opsets.get("", 1)
    return inner


def _gelu(ctx: Context, x: Value) -> Value:
    return unary_op(ctx, "ACTIVATION_GELU", x)


def _add_bias(ctx: Context, x: Value, bias: Value, what: str = "bias") -> Value:
    """``x + bias``, the bias 1-D over ``x``'s last dimension (the contrib ops' rule)."""
    if x.rank < 1 or bias.rank != 1 or bias.shape[0] != x.shape[-1]:
        raise ctx.fail(
            f"{what} must be 1-D with the input's last dimension ({x.shape[-1] if x.rank else 0}"
            f" values), got shape {list(bias.shape)}"
        )
    return binary_op(ctx, "ELEMENT_WISE_ADD", x, bias)


# ---------------------------------------------------------------------------------------------
# FusedMatMul, FusedMatMulActivation


def _operand(v: Value, trans_batch: bool, trans: bool) -> tuple[list[int], list[int]]:
    """``v``'s sizes and strides read as {batch..., rows, cols} after its transposes (1-D: a
    row {1, K}, a transpose of it ignored, as ONNX Runtime's kernels do)."""
    sizes, strides = list(v.shape), list(packed_strides(v.shape))
    if v.rank == 1:
        return [1, sizes[0]], [0, 1]
    if trans_batch:  # {d0, b1..bn, d_last} read as {b1..bn, d0, d_last}
        perm = list(range(1, v.rank - 1)) + [0, v.rank - 1]
        sizes, strides = [sizes[p] for p in perm], [strides[p] for p in perm]
    if trans:
        sizes[-2:], strides[-2:] = sizes[-2:][::-1], strides[-2:][::-1]
    return sizes, strides


def _broadcast_strides(sizes, strides, batch) -> list[int]:
    """The batch strides of an operand read at the broadcast ``batch`` (0 where it repeats)."""
    lead = len(batch) - (len(sizes) - 2)
    own = [1] * lead + list(sizes[:-2])
    st = [0] * lead + list(strides[:-2])
    return [0 if o == 1 and d != 1 else s for o, d, s in zip(own, batch, st)]


def _fused_matmul(ctx: Context, a: Value, b: Value, *, softmax: bool = False) -> Value:
    """GEMM of the transposed, broadcast operands (``softmax``: with SOFTMAX1 over N fused);
    the result in ONNX's shape."""
    t = float_type_of(ctx, ("A", a), ("B", b))
    if a.rank == 0 or b.rank == 0:
        raise ctx.fail("the inputs must have at least one dimension")
    tba, tbb = bool(int(ctx.attr("transBatchA", 0))), bool(int(ctx.attr("transBatchB", 0)))
    if (tba or tbb) and not (a.rank > 2 and a.rank == b.rank):
        raise ctx.fail(
            "transBatchA / transBatchB need inputs of one rank, 3 or more; got ranks "
            f"{a.rank} and {b.rank}"
        )
    sa, ta = _operand(a, tba, bool(int(ctx.attr("transA", 0))))
    if b.rank == 1:  # a column {K, 1}
        sb, tb_ = [b.shape[0], 1], [1, 0]
    else:
        sb, tb_ = _operand(b, tbb, bool(int(ctx.attr("transB", 0))))
    m, k = sa[-2:]
    k2, n = sb[-2:]
    if k != k2:
        raise ctx.fail(
            f"inner dimensions differ after the transposes: {list(a.shape)} gives K = {k}, "
            f"{list(b.shape)} gives K = {k2}"
        )
    batch = broadcast_shape(ctx, sa[:-2], sb[:-2])
    result = tuple(batch) + ((m,) if a.rank > 1 else ()) + ((n,) if b.rank > 1 else ())
    bsa = _broadcast_strides(sa, ta, batch)
    bsb = _broadcast_strides(sb, tb_, batch)
    sizes, (fa, fb) = fold_batch(batch, bsa, bsb)
    if len(sizes) > 2:
        # More batch dimensions than GEMM's two that the strides cannot merge: both operands
        # written packed at the broadcast batch shape first (an identity each), then one.
        full_a, full_b = tuple(batch) + (m, k), tuple(batch) + (k, n)
        a = strided_copy(ctx, a, full_a, bsa + ta[-2:])
        b = strided_copy(ctx, b, full_b, bsb + tb_[-2:])
        ta, tb_ = list(packed_strides(full_a)), list(packed_strides(full_b))
        sizes, (fa, fb) = fold_batch(batch, ta[:-2], tb_[:-2])
    pad = 2 - len(sizes)
    lead = [1] * pad + sizes
    out = tuple(lead) + (m, n)
    fused = None
    if softmax:
        fused = op("ACTIVATION_SOFTMAX1")(TensorDesc(t, out), TensorDesc(t, out), axes=[3])
    desc = op("GEMM")(
        strided_desc(t, lead + [m, k], [0] * pad + fa + ta[-2:]),
        strided_desc(t, lead + [k, n], [0] * pad + fb + tb_[-2:]),
        None,
        TensorDesc(t, out),
        alpha=float(ctx.attr("alpha", 1.0)),
        beta=0.0,
        fused_activation=fused,
    )
    y = ctx.out(ctx.node(desc, [a, b, None]), tuple(batch) + (m, n))
    return view(y, result)


def strided_copy(ctx: Context, v: Value, sizes, strides) -> Value:
    """``v`` read with ``strides`` at ``sizes``, written packed (an ELEMENT_WISE_IDENTITY)."""
    desc = op("ELEMENT_WISE_IDENTITY")(
        strided_desc(v.data_type, sizes, strides), packed(v.data_type, sizes)
    )
    return ctx.out(ctx.node(desc, [v]), tuple(sizes))


@contrib_converter("FusedMatMul")
def _fused_matmul_op(ctx, node, inputs):
    """``alpha * op(A) x op(B)``, numpy's matmul broadcasting, on one GEMM."""
    a, b = inputs[:2]
    return [_fused_matmul(ctx, a, b)]


@contrib_converter("FusedMatMulActivation")
def _fused_matmul_activation(ctx, node, inputs):
    """FusedMatMul with the Softmax that ONNX Runtime's MatMulActivationFusion folded into it
    (the only activation that fusion and the DirectML provider take): over ``activation_axis``
    (default -1) of the result, as one axis (Softmax-13's rule; the fusion drops the Softmax's
    version). On the last axis it is GEMM's fused SOFTMAX1, elsewhere a SOFTMAX1 node after it.
    """
    a, b = inputs[:2]
    activation = ctx.attr("activation")
    if activation != "Softmax":
        raise ctx.fail(
            f"activation '{activation}' is not supported (ONNX Runtime's MatMulActivationFusion "
            "and its DirectML provider fuse only 'Softmax')"
        )
    for name in ("activation_alpha", "activation_beta", "activation_gamma"):
        if name in ctx.attrs:
            raise ctx.fail(f"attribute '{name}' does not apply to activation 'Softmax'")
    rank = max(a.rank, b.rank, 2) - 2 + (a.rank > 1) + (b.rank > 1)  # numpy's matmul result
    axis = axis_of(ctx, ctx.attr("activation_axis", -1), rank, "activation_axis")
    # The result's last axis is GEMM's N (when B is not 1-D): the softmax is fused there.
    if b.rank > 1 and axis == rank - 1:
        return [_fused_matmul(ctx, a, b, softmax=True)]
    y = _fused_matmul(ctx, a, b)
    t = packed(y.data_type, y.shape)
    desc = op("ACTIVATION_SOFTMAX1")(t, t, axes=[axis])
    return [ctx.out(ctx.node(desc, [y]), y.shape)]


# The activations ONNX Runtime's FusedGemm kernel applies that ONNX has as ops: each is that op's
# converter, with the node's ``activation_<name>`` attributes as its ``<name>`` attributes.
_GEMM_ACTIVATIONS = (
    "Elu",
    "HardSigmoid",
    "LeakyRelu",
    "Relu",
    "Selu",
    "Sigmoid",
    "Softplus",
    "Softsign",
    "Tanh",
    "ThresholdedRelu",
)


@contrib_converter("FusedGemm")
def _fused_gemm(ctx, node, inputs):
    """Gemm followed by an activation (ONNX Runtime's GemmActivationFusion for its CPU
    provider): the ai.onnx Gemm converter, then the activation op's converter (XLA fuses them as
    DirectML's FusedActivation would)."""
    a, b, c = inputs[:3]
    float_type_of(ctx, ("A", a), ("B", b), ("C", c))
    activation = ctx.attr("activation", "")
    if activation not in _GEMM_ACTIVATIONS:
        raise ctx.fail(
            f"activation '{activation}' is not supported (one of {', '.join(_GEMM_ACTIVATIONS)})"
        )
    (y,) = REGISTRY.get("", "Gemm")(as_onnx_context(ctx, ctx.attrs), node, [a, b, c])
    prefix = "activation_"
    attrs = {k[len(prefix) :]: v for k, v in ctx.attrs.items() if k.startswith(prefix)}
    return REGISTRY.get("", activation)(as_onnx_context(ctx, attrs), node, [y])


# ---------------------------------------------------------------------------------------------
# Gelu family, QuickGelu, BiasAdd


@contrib_converter("Gelu")
def _ms_gelu(ctx, node, inputs):
    """ACTIVATION_GELU: the exact (erf) form."""
    float_type_of(ctx, ("X", inputs[0]))
    return [_gelu(ctx, inputs[0])]


@contrib_converter("BiasGelu")
def _bias_gelu(ctx, node, inputs):
    """Gelu (erf form) of ``A + B``, B 1-D over A's last dimension. ONNX Runtime's provider
    fuses the GELU into ELEMENT_WISE_ADD1; dml_jax's table of fusable activations has no GELU,
    so it is a node of its own (XLA fuses the two)."""
    a, b = inputs[:2]
    float_type_of(ctx, ("A", a), ("B", b))
    return [_gelu(ctx, _add_bias(ctx, a, b, "B"))]


# FastGelu's constants, as the contrib CPU kernel writes its formula: sqrt(2 / pi) and
# 0.044715 * sqrt(2 / pi).
_FAST_GELU_B = 0.7978845608028654
_FAST_GELU_C = 0.035677408136300125


@contrib_converter("FastGelu")
def _fast_gelu(ctx, node, inputs):
    """The contrib spec's tanh approximation, term by term as its CPU kernel computes it:
    ``x * (C * x^2 + B)``, tanh, then ``x * (0.5 + 0.5 * tanh(...))`` (halving is exact, so this
    equals the kernel's ``0.5 * x * (tanh(...) + 1)``)."""
    x, bias = inputs[:2]
    float_type_of(ctx, ("X", x), ("bias", bias))
    if bias is not None:
        x = _add_bias(ctx, x, bias)
    sq = binary_op(ctx, "ELEMENT_WISE_MULTIPLY", x, x)
    inner = binary_op(
        ctx, "ELEMENT_WISE_MULTIPLY", x, unary_op(ctx, "ELEMENT_WISE_IDENTITY", sq, _FAST_GELU_C,
                                                _FAST_GELU_B)
    )  # fmt: skip
    half = unary_op(ctx, "ELEMENT_WISE_TANH", inner)
    return [binary_op(ctx, "ELEMENT_WISE_MULTIPLY", x,
                    unary_op(ctx, "ELEMENT_WISE_IDENTITY", half, 0.5, 0.5))]  # fmt: skip


@contrib_converter("QuickGelu")
def _quick_gelu(ctx, node, inputs):
    """``x * sigmoid(alpha * x)`` (alpha 1.702 by default; 1 is SiLU)."""
    x = inputs[0]
    float_type_of(ctx, ("X", x))
    alpha = float(np.float32(ctx.attr("alpha", 1.702)))
    scaled = x if alpha == 1.0 else unary_op(ctx, "ELEMENT_WISE_IDENTITY", x, alpha)
    return [binary_op(ctx, "ELEMENT_WISE_MULTIPLY", x, unary_op(ctx, "ACTIVATION_SIGMOID", scaled))]


@contrib_converter("BiasAdd")
def _bias_add(ctx, node, inputs):
    """``X + bias + skip``: X and skip {N, S, C}, bias {C}."""
    x, bias, skip = inputs[:3]
    float_type_of(ctx, ("X", x), ("bias", bias), ("skip", skip))
    if x.rank != 3:
        raise ctx.fail(f"X must be 3-D {{N, S, C}}, got shape {list(x.shape)}")
    if tuple(skip.shape) != tuple(x.shape):
        raise ctx.fail(f"skip must have X's shape {list(x.shape)}, got {list(skip.shape)}")
    return [binary_op(ctx, "ELEMENT_WISE_ADD", _add_bias(ctx, x, bias), skip)]


@contrib_converter("BiasSplitGelu")
def _bias_split_gelu(ctx, node, inputs):
    """``left * gelu(right)`` of ``X + bias`` cut in halves along the last dimension (GEGLU)."""
    x, bias = inputs[:2]
    float_type_of(ctx, ("X", x), ("bias", bias))
    if x.rank != 3 or x.shape[-1] % 2:
        raise ctx.fail(f"X must be 3-D {{N, S, D}} with D even, got shape {list(x.shape)}")
    s = _add_bias(ctx, x, bias)
    half = tuple(x.shape[:-1]) + (x.shape[-1] // 2,)
    t = s.data_type
    n = ctx.node(op("SPLIT")(packed(t, s.shape), [packed(t, half)] * 2, axis=2), [s])
    left, right = ctx.out(n, half, 0), ctx.out(n, half, 1)
    return [binary_op(ctx, "ELEMENT_WISE_MULTIPLY", left, _gelu(ctx, right))]
