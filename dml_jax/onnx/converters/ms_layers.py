"""ONNX Runtime's ``com.microsoft`` normalization, embedding and convolution contrib ops, on the
DirectML operators its DirectML provider uses for them (``ms_fused.py`` has the rest of the
family, its schema checks and the shared pieces):

- SkipLayerNormalization / SkipSimplifiedLayerNormalization: ELEMENT_WISE_ADD of input, skip
  (and bias), then MEAN_VARIANCE_NORMALIZATION2 over the hidden dimension (UseMean off for the
  simplified one, i.e. RMS normalization). The statistics outputs (float32, which the provider
  leaves to the CPU) come from REDUCE and element-wise operators; the simplified op's mean is 0.
- SimplifiedLayerNormalization (ai.onnx and com.microsoft): MEAN_VARIANCE_NORMALIZATION2 without
  the mean over the axes from ``axis``, computed in float32 when float16 and float32 meet;
  ``inv_std_var`` from REDUCE and element-wise operators in ``stash_type``.
- EmbedLayerNormalization: GATHERs of the word, position (FILL_VALUE_SEQUENCE when no position
  ids are given) and segment embeddings, ELEMENT_WISE_ADDs, MEAN_VARIANCE_NORMALIZATION1 over the
  hidden dimension; ``mask_index`` counts the mask's ones per row (ELEMENT_WISE_LOGICAL_EQUALS,
  CAST, REDUCE), zeros (FILL_VALUE_CONSTANT) without a mask.
- GroupNorm: MEAN_VARIANCE_NORMALIZATION1 over a view that puts each group's elements on two
  axes (NHWC by default), gamma and beta cast to the input's type; SiLU activation as
  ACTIVATION_SIGMOID and ELEMENT_WISE_MULTIPLY.
- NhwcConv: CONVOLUTION reading the NHWC input and the {M, kH, kW, C / group} filter through
  permuted strides, its NCHW result turned channels last by an ELEMENT_WISE_IDENTITY.
- ConvTransposeWithDynamicPads: ConvTranspose's converter with the pads of input 2 (which
  DirectML needs as a constant).
"""

from __future__ import annotations

import numpy as np

from ...enums import DataType
from ...tensor import TensorDesc, packed_strides
from ..elements import data_type_of
from ..importer import Context, Value, broadcast, packed
from . import REGISTRY
from ._common import axis_of, const_ints, op, pads_of, spatial_out, view
from .gemm_conv import strided_desc
from .ms_fused import (
    FLOAT_TYPES,
    MS,
    as_onnx_context,
    binary_op,
    cast_to,
    check_hidden_vector,
    contrib_converter,
    float_type_of,
    inv_std,
    mvn1,
    mvn2,
    reduce_op,
    strided_copy,
    unary_op,
)

# ---------------------------------------------------------------------------------------------
# Skip / simplified layer normalization


def _skip_layer_norm(ctx: Context, inputs, *, simplified: bool):
    if simplified:
        x, skip, gamma, bias = inputs[:4]
        beta = None
    else:
        x, skip, gamma, beta, bias = inputs[:5]
    float_type_of(
        ctx, ("input", x), ("skip", skip), ("gamma", gamma), ("beta", beta), ("bias", bias)
    )
    if x.rank not in (2, 3):
        raise ctx.fail(f"input must be 2-D or 3-D, got shape {list(x.shape)}")
    hidden = x.shape[-1]
    # skip: the input's shape, or (for a 3-D input) {1, S, H} or {S, H}, repeated over the batch.
    allowed = [tuple(x.shape)]
    if x.rank == 3:
        allowed += [(1,) + tuple(x.shape[1:]), tuple(x.shape[1:])]
    if tuple(skip.shape) not in allowed:
        raise ctx.fail(
            f"skip of shape {list(skip.shape)} must be one of {[list(s) for s in allowed]}"
        )
    check_hidden_vector(ctx, gamma, hidden, "gamma")
    check_hidden_vector(ctx, beta, hidden, "beta")
    check_hidden_vector(ctx, bias, hidden, "bias")
    epsilon = float(ctx.attr("epsilon", 1e-12))
    s = binary_op(ctx, "ELEMENT_WISE_ADD", x, skip)
    if bias is not None:
        s = binary_op(ctx, "ELEMENT_WISE_ADD", s, bias)
    axis = x.rank - 1
    y = mvn2(ctx, s, gamma, beta, [axis], epsilon, use_mean=not simplified)
    outputs = [y, None, None, s if ctx.wants(3) else None]
    if ctx.wants(1) or ctx.wants(2):
        # float32 statistics (type U), each row's kept as {..., 1}.
        s32 = cast_to(ctx, s, DataType.FLOAT32)
        mean, inv = inv_std(ctx, s32, [axis], epsilon, centered=not simplified)
        if simplified:  # no centering term: ONNX Runtime's kernel writes 0
            mean = ctx.constant(np.zeros(tuple(x.shape[:-1]) + (1,), np.float32))
        outputs[1] = mean if ctx.wants(1) else None
        outputs[2] = inv if ctx.wants(2) else None
    return outputs


@contrib_converter("SkipLayerNormalization")
def _skip_ln(ctx, node, inputs):
    """LayerNorm over the hidden dimension of ``input + skip (+ bias)``."""
    return _skip_layer_norm(ctx, inputs, simplified=False)


@contrib_converter("SkipSimplifiedLayerNormalization")
def _skip_simplified_ln(ctx, node, inputs):
    """RMSNorm over the hidden dimension of ``input + skip (+ bias)``."""
    return _skip_layer_norm(ctx, inputs, simplified=True)


@contrib_converter("SimplifiedLayerNormalization", domains=("", MS))
def _simplified_ln(ctx, node, inputs):
    """RMSNorm over the axes from ``axis``: ``x / sqrt(mean(x^2) + epsilon) * scale``. Y has the
    scale's type (the op's V); float16 meeting float32 is computed in float32. ONNX Runtime
    registers it in the ONNX domain (since 1) and models from some builders carry it in
    com.microsoft: both are the same op here."""
    x, scale = inputs[:2]
    for name, v in (("X", x), ("scale", scale)):
        if v.data_type not in FLOAT_TYPES:
            raise ctx.fail(f"{name} must be float or float16, got {v.data_type.name}")
    axis = axis_of(ctx, ctx.attr("axis", -1), x.rank)
    axes = list(range(axis, x.rank))
    try:
        np.broadcast_shapes(tuple(scale.shape), tuple(x.shape[axis:]))
    except ValueError:
        raise ctx.fail(
            f"scale of shape {list(scale.shape)} does not broadcast to the normalized "
            f"dimensions {list(x.shape[axis:])}"
        ) from None
    epsilon = float(ctx.attr("epsilon", 1e-5))
    out_type = scale.data_type
    t = DataType.FLOAT32 if x.data_type != scale.data_type else x.data_type
    xc, sc = cast_to(ctx, x, t), cast_to(ctx, scale, t)
    y = cast_to(ctx, mvn2(ctx, xc, sc, None, axes, epsilon, use_mean=False), out_type)
    if not ctx.wants(1):
        return [y]
    stash = data_type_of(int(ctx.attr("stash_type", 1)), ctx.where)
    if stash not in (DataType.FLOAT32, DataType.FLOAT64):
        raise ctx.fail(f"stash_type must be float or double, got {stash.name}")
    _, inv = inv_std(ctx, cast_to(ctx, x, stash), axes, epsilon, centered=False)
    return [y, inv]


# ---------------------------------------------------------------------------------------------
# EmbedLayerNormalization


def _embed(ctx: Context, table: Value, ids: Value, what: str) -> Value:
    """GATHER of ``table``'s rows {V, H} at ``ids`` {B, S}: {B, S, H}."""
    if ids.data_type != DataType.INT32:
        raise ctx.fail(f"{what} must be int32, got {ids.data_type.name}")
    out = tuple(ids.shape) + (table.shape[1],)
    desc = op("GATHER")(
        packed(table.data_type, table.shape, 3),
        packed(ids.data_type, ids.shape, 3),
        packed(table.data_type, out),
        axis=1,
        index_dimensions=2,
    )
    return ctx.out(ctx.node(desc, [table, ids]), out)


@contrib_converter("EmbedLayerNormalization")
def _embed_layer_norm(ctx, node, inputs):
    """LayerNorm (MVN1, epsilon 1e-12 by default) of word + position (+ segment) embeddings;
    ``mask_index`` is the count of ones in each mask row (zeros without a mask), as ONNX
    Runtime's CPU kernel and DirectML provider compute it; ``embedding_sum`` the sum before
    normalization. Position ids default to 0..S-1; a {1, S} position_ids serves every batch."""
    ids, seg_ids, word, pos, seg, gamma, beta, mask, pos_ids = inputs[:9]
    float_type_of(
        ctx, ("word_embedding", word), ("position_embedding", pos), ("segment_embedding", seg),
        ("gamma", gamma), ("beta", beta),
    )  # fmt: skip
    if ids.rank != 2:
        raise ctx.fail(f"input_ids must be 2-D {{batch, sequence}}, got {list(ids.shape)}")
    b, s = ids.shape
    for name, v in (("word_embedding", word), ("position_embedding", pos),
                    ("segment_embedding", seg)):  # fmt: skip
        if v is not None and v.rank != 2:
            raise ctx.fail(f"{name} must be 2-D {{rows, hidden}}, got {list(v.shape)}")
    hidden = word.shape[1]
    for name, v in (("position_embedding", pos), ("segment_embedding", seg)):
        if v is not None and v.shape[1] != hidden:
            raise ctx.fail(f"{name} must have {hidden} columns, got {list(v.shape)}")
    check_hidden_vector(ctx, gamma, hidden, "gamma")
    check_hidden_vector(ctx, beta, hidden, "beta")
    if (seg_ids is None) != (seg is None):
        raise ctx.fail("segment_ids and segment_embedding must be given together")
    for name, v in (("segment_ids", seg_ids), ("mask", mask)):
        if v is not None and tuple(v.shape) != (b, s):
            raise ctx.fail(f"{name} must have input_ids' shape {[b, s]}, got {list(v.shape)}")
    if pos_ids is None:
        desc = op("FILL_VALUE_SEQUENCE")(
            packed(DataType.INT32, (1, s)), DataType.INT32, value_start=0, value_delta=1
        )
        pos_ids = ctx.out(ctx.node(desc, []), (1, s))
    elif tuple(pos_ids.shape) not in ((b, s), (1, s)):
        raise ctx.fail(f"position_ids must have shape {[b, s]} or {[1, s]}, got "
                       f"{list(pos_ids.shape)}")  # fmt: skip
    total = binary_op(
        ctx, "ELEMENT_WISE_ADD", _embed(ctx, word, ids, "input_ids"),
        _embed(ctx, pos, pos_ids, "position_ids"),
    )  # fmt: skip
    if seg is not None:
        total = binary_op(ctx, "ELEMENT_WISE_ADD", total, _embed(ctx, seg, seg_ids, "segment_ids"))
    y = mvn1(ctx, total, gamma, beta, [2], float(ctx.attr("epsilon", 1e-12)))
    outputs = [y, None, total if ctx.wants(2) else None]
    if ctx.wants(1):
        i32 = DataType.INT32
        if mask is None:
            desc = op("FILL_VALUE_CONSTANT")(packed(i32, (b,)), i32, value=0)
            outputs[1] = ctx.out(ctx.node(desc, []), (b,))
        else:
            if mask.data_type != i32:
                raise ctx.fail(f"mask must be int32, got {mask.data_type.name}")
            one = ctx.constant(np.ones((1, 1), np.int32))
            eq = op("ELEMENT_WISE_LOGICAL_EQUALS")(
                packed(i32, (b, s)), broadcast(one, (b, s)), packed(DataType.UINT8, (b, s))
            )
            ones = cast_to(ctx, ctx.out(ctx.node(eq, [mask, one]), (b, s)), i32)
            outputs[1] = view(reduce_op(ctx, "SUM", ones, [1]), (b,))
    return outputs


# ---------------------------------------------------------------------------------------------
# GroupNorm


@contrib_converter("GroupNorm")
def _ms_group_norm(ctx, node, inputs):
    """Group normalization of a 4-D input, NHWC unless ``channels_last`` is 0: each group's
    ``C / groups`` channels at every position are viewed as two axes of a 4-D view
    ({N, H*W, groups, C/groups} for NHWC, {N, groups, C/groups, H*W} for NCHW), normalized
    by MEAN_VARIANCE_NORMALIZATION1 over them; gamma and beta (per channel) are cast to the
    input's type as the provider does. ``activation`` 1: SiLU after it."""
    x, gamma, beta = inputs[:3]
    float_type_of(ctx, ("X", x))
    float_type_of(ctx, ("gamma", gamma), ("beta", beta))
    if x.rank != 4:
        raise ctx.fail(f"X must be 4-D, got shape {list(x.shape)}")
    last = int(ctx.attr("channels_last", 1))
    activation = int(ctx.attr("activation"))
    groups = int(ctx.attr("groups"))
    if last not in (0, 1) or activation not in (0, 1):
        raise ctx.fail(f"channels_last and activation must be 0 or 1, got {last}, {activation}")
    c = x.shape[3] if last else x.shape[1]
    if groups <= 0 or c % groups:
        raise ctx.fail(f"groups {groups} does not divide the {c} channels")
    check_hidden_vector(ctx, gamma, c, "gamma")
    check_hidden_vector(ctx, beta, c, "beta")
    n, per = x.shape[0], c // groups
    if last:
        shape, axes, pshape = (n, x.shape[1] * x.shape[2], groups, per), (1, 3), (1, 1, groups, per)
    else:
        shape, axes, pshape = (n, groups, per, x.shape[2] * x.shape[3]), (2, 3), (1, groups, per, 1)
    g = view(cast_to(ctx, gamma, x.data_type), pshape)
    bt = view(cast_to(ctx, beta, x.data_type), pshape)
    y = mvn1(ctx, view(x, shape), g, bt, axes, float(ctx.attr("epsilon", 1e-5)))
    if activation:
        y = binary_op(ctx, "ELEMENT_WISE_MULTIPLY", y, unary_op(ctx, "ACTIVATION_SIGMOID", y))
    return [view(y, x.shape)]


# ---------------------------------------------------------------------------------------------
# NhwcConv, ConvTransposeWithDynamicPads


@contrib_converter("NhwcConv")
def _nhwc_conv(ctx, node, inputs):
    """Conv on channels-last tensors: X {N, spatial..., C}, W {M, kernel..., C / group}, Y
    {N, spatial'..., M} (the layout ONNX Runtime's NhwcConv fusion writes). One CONVOLUTION in
    DirectML's NCHW order that reads the input and filter through permuted strides, and an
    ELEMENT_WISE_IDENTITY that writes its result channels last; ONNX Conv's rules for pads,
    auto_pad, strides, dilations and group; a 1-D convolution gets a height of 1."""
    x, w, b = inputs[:3]
    t = float_type_of(ctx, ("X", x), ("W", w), ("B", b))
    if x.rank != w.rank or not 3 <= x.rank <= 5:
        raise ctx.fail(
            f"X and W must have one rank, 3 to 5, got shapes {list(x.shape)} and {list(w.shape)}"
        )
    nd = x.rank - 2
    kernel = list(w.shape[1:-1])
    given = ctx.attr("kernel_shape")
    if given is not None and [int(k) for k in given] != kernel:
        raise ctx.fail(f"kernel_shape {list(given)} differs from the weights' {kernel}")
    group = int(ctx.attr("group", 1))
    c, m = x.shape[-1], w.shape[0]
    if group <= 0 or c % group or m % group or w.shape[-1] * group != c:
        raise ctx.fail(
            f"W {list(w.shape)} does not fit {c} input channels in {group} groups "
            "(W is {M, kernel..., C / group})"
        )
    if b is not None and tuple(b.shape) != (m,):
        raise ctx.fail(f"B must have shape [{m}], got {list(b.shape)}")
    attr = {}
    for name, default in (("strides", 1), ("dilations", 1)):
        attr[name] = [int(v) for v in ctx.attr(name, [default] * nd)]
        if len(attr[name]) != nd:
            raise ctx.fail(f"{name} must hold {nd} values, got {len(attr[name])}")
    start, end = pads_of(ctx, x.shape[1:-1], kernel, attr["strides"], attr["dilations"])
    spatial = spatial_out(x.shape[1:-1], kernel, attr["strides"], attr["dilations"], start, end)
    if min(spatial) < 1:
        raise ctx.fail(f"the window does not fit the padded input (output {list(spatial)})")
    y_shape = (x.shape[0],) + tuple(spatial) + (m,)

    def nchw(shape):
        """Sizes and strides that read a packed channels-last tensor in NCHW order (a 1-D
        one with a height of 1)."""
        st = packed_strides(shape)
        sizes = [shape[0], shape[-1]] + list(shape[1:-1])
        strides = [st[0], st[-1]] + list(st[1:-1])
        if nd == 1:
            sizes.insert(2, 1)
            strides.insert(2, strides[2] * sizes[3])
        return strided_desc(t, sizes, strides)

    lift = (lambda v, d: [d] + list(v)) if nd == 1 else (lambda v, d: list(v))
    dims = max(nd, 2)
    out = (x.shape[0], m) + tuple(lift(spatial, 1))
    desc = op("CONVOLUTION")(
        nchw(x.shape),
        nchw(w.shape),
        None if b is None else TensorDesc(t, (1, m) + (1,) * dims),
        TensorDesc(t, out),
        mode="CROSS_CORRELATION",
        direction="FORWARD",
        strides=lift(attr["strides"], 1),
        dilations=lift(attr["dilations"], 1),
        start_padding=lift(start, 0),
        end_padding=lift(end, 0),
        output_padding=[0] * dims,
        group_count=group,
    )
    y = ctx.out(ctx.node(desc, [x, w, b]), out)
    # Back to channels last: an identity reading the NCHW result through permuted strides
    # (a graph's intermediate tensors are packed, so the CONVOLUTION cannot write NHWC itself).
    st = packed_strides(out)
    perm = [0] + list(range(2, len(out))) + [1]
    if nd == 1:
        perm.remove(2)
    return [strided_copy(ctx, y, y_shape, [st[p] for p in perm])]


@contrib_converter("ConvTransposeWithDynamicPads")
def _conv_transpose_dynamic_pads(ctx, node, inputs):
    """ConvTranspose whose pads come from input 2 (begin values of each spatial axis, then the
    end values), which DirectML needs as a constant; the mapping is ConvTranspose's converter's
    with those pads. ONNX Runtime's kernel requires the pads input."""
    x, w, pads, b = inputs[:4]
    if pads is None:
        raise ctx.fail("input 2 ('Pads') is required (ONNX Runtime's kernel needs it)")
    values = const_ints(ctx, pads, "Pads")
    nd = x.rank - 2
    if len(values) != 2 * nd:
        raise ctx.fail(f"Pads must hold {2 * nd} values, got {len(values)}")
    if ctx.attr("auto_pad", "NOTSET") not in ("NOTSET", ""):
        raise ctx.fail("auto_pad must be NOTSET when the pads are given")
    float_type_of(ctx, ("X", x), ("W", w), ("B", b))
    attrs = {k: v for k, v in ctx.attrs.items() if k != "auto_pad"}
    attrs["pads"] = values
    return REGISTRY.get("", "ConvTranspose")(as_onnx_context(ctx, attrs), node, [x, w, b])


__all__ = ["MS"]
