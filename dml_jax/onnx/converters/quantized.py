"""Quantized ops (ONNX domain) onto DirectML's quantization operators, as ONNX Runtime's DirectML
provider maps them:

- QuantizeLinear / DequantizeLinear -> ELEMENT_WISE_QUANTIZE_LINEAR /
  ELEMENT_WISE_DEQUANTIZE_LINEAR: the scale and zero point read through stride-0 descs of the
  input's sizes (one value, or one per index of ``axis``). Blocked ones (``block_size``, opset
  21) -> QUANTIZE / DEQUANTIZE, whose quantization tensors have the input's rank and one value
  per block (the scale's own sizes; DirectML's blocks must divide the input). An absent zero
  point is absent (0); the output type is then ``output_dtype``, else UINT8. Outputs no
  DirectML quantize operator writes (INT16 / UINT16, opset 21; the 4- and 2-bit integers,
  float8 and float4, which the graph holds in a carrier, ``elements.CARRIED``) are a JAX node
  (``quantize_linear_jax``) with the same arithmetic: the correctly rounded quotient, halves to
  even, the zero point added, saturated (a float type: converted as Cast does). A 4- or 2-bit
  input dequantizes from its 8-bit carrier on DirectML's operators; a float8 / float4 one is a
  JAX node (``dequantize_linear_jax``).
- DynamicQuantizeLinear -> DYNAMIC_QUANTIZE_LINEAR (scale and zero point {1, ..} of the input's
  rank, ONNX's scalars).
- MatMulInteger -> MATRIX_MULTIPLY_INTEGER, QLinearMatMul -> QUANTIZED_LINEAR_MATRIX_MULTIPLY:
  A and B at one rank (NumPy's matmul: a 1-D operand gains a dimension, batch dimensions
  broadcast through stride-0 descs, more than two fold as MatMul's do); a 1-D scale or zero point
  is DirectML's 1-D form (per row of A and of the output, per column of B).
- ConvInteger -> CONVOLUTION_INTEGER, QLinearConv -> QUANTIZED_LINEAR_CONVOLUTION (1-D and 2-D
  convolutions, as DirectML's): pads / auto_pad as Conv's, group -> GroupCount, a 1-D filter
  scale / zero point per output channel, QLinearConv's INT32 bias {M} -> {1, M, 1, ..}.

DirectML quantizes and dequantizes in float32 (FLOAT16 operands widen exactly;
docs/semantics.md, "Quantization"): operands of two float types are both widened to FLOAT32, as
are FLOAT16 scales of the quantized matrix multiply (QLinearMatMul-21), which DirectML's operator
reads as FLOAT32 only; ONNX's ``precision`` (opset 23) is that float32 division.
"""

from __future__ import annotations

import math
from dataclasses import replace

import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax

from ...enums import DataType
from ...ops._quant import divide
from ...tensor import TensorDesc
from ..elements import CARRIED, TYPE_NAMES, data_type_of
from ..importer import Value, broadcast, packed
from . import converter
from ._common import (
    axis_of,
    cast_value,
    matmul_operands,
    op,
    pads_of,
    spatial_out,
    view,
)
from .elementwise import carried_convert

_SIXTEEN_BIT = (DataType.INT16, DataType.UINT16)
_FLOATS = (DataType.FLOAT32, DataType.FLOAT16)


def _present(inputs, k: int) -> Value | None:
    return inputs[k] if k < len(inputs) else None


# ---------------------------------------------------------------------------------------------
# QuantizeLinear / DequantizeLinear


def parameter_layout(ctx, x: Value, scale: Value, zero: Value | None, opset: int | None = None):
    """(axis, block): how the scale maps onto ``x``; per tensor gives (None, 0). ``opset``: the
    ai.onnx opset whose rules apply (default: the node's)."""
    opset = ctx.opset if opset is None else opset
    block = int(ctx.attr("block_size", 0)) if opset >= 21 else 0
    single = math.prod(scale.shape) == 1 and scale.rank <= 1
    if zero is not None and zero.shape != scale.shape and not (single and zero.rank <= 1):
        raise ctx.fail(
            f"the zero point has shape {list(zero.shape)}, the scale {list(scale.shape)}"
        )
    if block < 0:
        raise ctx.fail(f"block_size must be >= 0, got {block}")
    if not block and single:
        return None, 0  # one value: per tensor
    if opset < 13:
        raise ctx.fail(f"the scale must be a scalar before opset 13, got {list(scale.shape)}")
    axis = axis_of(ctx, ctx.attr("axis", 1), x.rank)
    if block == 0:
        if scale.rank != 1 or scale.shape[0] != x.shape[axis]:
            raise ctx.fail(
                f"a per-axis scale must be 1-D of {x.shape[axis]} values (axis {axis} of "
                f"{list(x.shape)}), got shape {list(scale.shape)}"
            )
        return axis, 0
    want = tuple(-(-d // block) if i == axis else d for i, d in enumerate(x.shape))
    if scale.shape != want:
        raise ctx.fail(
            f"a blocked scale (block_size {block} on axis {axis}) must have shape {list(want)}, "
            f"got {list(scale.shape)}"
        )
    if x.shape[axis] % block:
        # DirectML's blocks are InputTensor.Sizes / Sizes: they must divide the input, or the
        # operator would read other blocks than ONNX's (docs/semantics.md, "Quantization").
        raise ctx.fail(
            f"block_size {block} does not divide axis {axis} ({x.shape[axis]}): DirectML's "
            "QUANTIZE / DEQUANTIZE have no partial last block"
        )
    return axis, block


def _linear_params(x: Value, params: list[Value | None], axis: int | None) -> list:
    """ELEMENT_WISE_(DE)QUANTIZE_LINEAR's scale / zero point descs: x's sizes, stride 0 where
    a value repeats."""
    out = []
    for v in params:
        if v is None:
            out.append(None)
            continue
        if axis is None:
            src = v.view(())
        else:
            src = v.view(tuple(v.shape[0] if i == axis else 1 for i in range(x.rank)))
        out.append((src, broadcast(src, x.shape)))
    return out


def _blocked(ctx, name: str, x: Value, scale: Value, zero: Value | None, out_type, axis):
    """QUANTIZE / DEQUANTIZE with quantization tensors of x's rank (one value per block)."""
    if axis is None:
        shape = (1,) * x.rank
    elif scale.rank == 1:
        shape = tuple(scale.shape[0] if i == axis else 1 for i in range(x.rank))
    else:
        shape = scale.shape
    params = [v.view(shape) for v in (scale, zero) if v is not None]
    desc = op(name)(
        packed(x.data_type, x.shape),
        "SCALE_ZERO_POINT" if zero is not None else "SCALE",
        [packed(v.data_type, shape) for v in params],
        packed(out_type, x.shape),
    )
    return ctx.out(ctx.node(desc, [x, *params]), x.shape)


def quantized_carried(ctx, zero: Value | None) -> int:
    """The ONNX type QuantizeLinear writes when the graph holds it in a carrier (4- and 2-bit
    integers, float8, float4: ``elements.CARRIED``), else 0."""
    if zero is not None:
        return zero.carried
    given = int(ctx.attr("output_dtype", 0)) if ctx.opset >= 21 else 0
    return given if given in CARRIED else 0


def quantized_type(ctx, zero: Value | None) -> DataType:
    """The integer type QuantizeLinear writes: the zero point's, else ``output_dtype``, else
    UINT8."""
    given = int(ctx.attr("output_dtype", 0)) if ctx.opset >= 21 else 0
    if zero is not None:
        t = zero.data_type
        if given and data_type_of(given, ctx.where) != t:
            raise ctx.fail("output_dtype differs from the zero point's type")
        return t
    return data_type_of(given, ctx.where) if given else DataType.UINT8


def dequantize_value(ctx, x: Value, scale: Value, zero: Value | None, axis=None) -> Value:
    """ELEMENT_WISE_DEQUANTIZE_LINEAR of ``x`` with one scale and zero point (``axis`` None) or
    one per index of ``axis``: the result in the scale's float type."""
    s, z = _linear_params(x, [scale, zero], axis)
    desc = op("ELEMENT_WISE_DEQUANTIZE_LINEAR")(
        packed(x.data_type, x.shape),
        s[1],
        None if z is None else z[1],
        packed(scale.data_type, x.shape),
    )
    return ctx.out(ctx.node(desc, [x, s[0], None if z is None else z[0]]), x.shape)


def quantize_value(
    ctx, x: Value, scale: Value, zero: Value | None, out_type: DataType, axis=None
) -> Value:
    """``x`` quantized to ``out_type`` with one scale and zero point (``axis`` None) or one per
    index of ``axis``: ELEMENT_WISE_QUANTIZE_LINEAR for the 8-bit types; the 16-bit types, which
    no DirectML quantize operator writes, as a JAX node (``quantize_linear_jax``)."""
    elem = 0 if zero is None else zero.carried
    if out_type in _SIXTEEN_BIT or elem:
        return quantize_linear_jax(ctx, x, scale, zero, out_type, axis, 0, elem)
    s, z = _linear_params(x, [scale, zero], axis)
    desc = op("ELEMENT_WISE_QUANTIZE_LINEAR")(
        packed(x.data_type, x.shape),
        s[1],
        None if z is None else z[1],
        packed(out_type, x.shape),
    )
    return ctx.out(ctx.node(desc, [x, s[0], None if z is None else z[0]]), x.shape)


def _spread(x: Value, axis, block: int):
    """A function broadcasting a scale or zero point array against x (one value; one per index
    of ``axis``; or blocks along ``axis``, repeated)."""

    def spread(v):
        if axis is None:
            return v.reshape(())
        if block:
            v = jnp.repeat(v.reshape(tuple(v.shape)), block, axis=axis)
            return lax.slice_in_dim(v, 0, x.shape[axis], axis=axis)
        return v.reshape(tuple(v.size if i == axis else 1 for i in range(x.rank)))

    return spread


def quantize_linear_jax(ctx, x, scale, zero, out_type: DataType, axis, block: int, elem: int = 0):
    """QuantizeLinear writing a type no DirectML quantize operator writes (8- and 4-bit DML
    integers only), as a JAX node: INT16 / UINT16, and the types the graph holds in a carrier
    (``elem``: 4- and 2-bit integers, float8, float4; ``elements.CARRIED``). ``axis`` and
    ``block`` are the scale's layout as ``parameter_layout`` finds it (None and 0 per tensor;
    per axis; blocked along ``axis``). ONNX's rule: x / scale in ``precision`` (opset 23) or else
    the operands' float type; an integer type rounds it half to even, adds the zero point and
    saturates to its range; a float type adds the zero point and converts as Cast does
    (``saturate``)."""
    if out_type not in _SIXTEEN_BIT and elem not in CARRIED:
        raise ctx.fail(f"the JAX quantization writes INT16, UINT16 or a carried type, not "
                       f"{out_type.name}")  # fmt: skip
    precision = int(ctx.attr("precision", 0)) if ctx.opset >= 23 else 0
    saturate = bool(ctx.attr("saturate", 1)) if ctx.opset >= 19 else True
    wanted = None
    if precision:
        wanted = data_type_of(precision, f"{ctx.where}: attribute 'precision'").numpy_dtype
    target = CARRIED[elem][1] if elem else np.dtype(out_type.numpy_dtype)
    integer = jnp.issubdtype(target, jnp.integer)
    info = ml_dtypes.iinfo(target) if integer else None
    spread = _spread(x, axis, block)

    def quantize(a, s, z=None):
        if wanted is not None:
            kind = wanted
        elif a.dtype.kind == "f":
            kind = jnp.promote_types(a.dtype, s.dtype)
        else:
            kind = s.dtype
        # The correctly rounded quotient on every backend (``_quant.divide``).
        q = divide(a.astype(kind), spread(s).astype(kind))
        if not integer:
            q = q.astype(jnp.promote_types(kind, jnp.float32))
            if z is not None:
                q = q + spread(z).astype(q.dtype)
            # The barrier keeps XLA from dropping the float8 round trip (excess precision).
            return (lax.optimization_barrier(carried_convert(q, elem, saturate)),)
        q = jnp.round(q)  # half to even
        q = jnp.where(jnp.isnan(q), jnp.zeros((), q.dtype), q)  # NaN: the zero point (DML's rule)
        q = q.astype(jnp.promote_types(kind, jnp.float32))  # adds and saturates beyond float16
        if z is not None:
            q = q + spread(z).astype(q.dtype)
        return (jnp.clip(q, int(info.min), int(info.max)).astype(target),)

    present = [x, scale] if zero is None else [x, scale, zero]
    name = f"QuantizeLinear.{TYPE_NAMES[elem]}" if elem else "QuantizeLinear.16bit"
    (y,) = ctx.jax(name, quantize, present, [(x.shape, out_type)])
    return replace(y, carried=elem)


def dequantize_linear_jax(ctx, x, scale, zero, out_type: DataType, axis, block: int):
    """DequantizeLinear of a float8 / float4 tensor (held in float32, ``elements.CARRIED``),
    which no DirectML dequantize operator reads: (x - zero point) * scale in float32, as a JAX
    node, rounded once to ``out_type``."""
    spread = _spread(x, axis, block)

    def dequantize(a, s, z=None):
        a = a.astype(jnp.float32)
        if z is not None:
            a = a - spread(z).astype(jnp.float32)
        return (a * spread(s).astype(jnp.float32),)

    present = [x, scale] if zero is None else [x, scale, zero]
    (y,) = ctx.jax(f"DequantizeLinear.{TYPE_NAMES[x.carried]}", dequantize, present,
                   [(x.shape, out_type)])  # fmt: skip
    return y


@converter("QuantizeLinear")
def _quantize_linear(ctx, node, inputs):
    x, scale = inputs[:2]
    zero = _present(inputs, 2)
    axis, block = parameter_layout(ctx, x, scale, zero)
    out_type = quantized_type(ctx, zero)
    elem = quantized_carried(ctx, zero)
    if elem or out_type in _SIXTEEN_BIT:  # DirectML quantizes to 8- and 4-bit DML types only
        return [quantize_linear_jax(ctx, x, scale, zero, out_type, axis, block, elem)]
    # DirectML divides in float32 whatever the operands (FLOAT16 widens exactly), so operands
    # of two float types are both widened; ONNX's ``precision`` (opset 23) is then float32.
    if x.data_type in _FLOATS and scale.data_type in _FLOATS and x.data_type != scale.data_type:
        x = cast_value(ctx, x, DataType.FLOAT32)
        scale = cast_value(ctx, scale, DataType.FLOAT32)
    if block:
        return [_blocked(ctx, "QUANTIZE", x, scale, zero, out_type, axis)]
    return [quantize_value(ctx, x, scale, zero, out_type, axis)]


@converter("DequantizeLinear")
def _dequantize_linear(ctx, node, inputs):
    x, scale = inputs[:2]
    zero = _present(inputs, 2)
    if zero is not None and (zero.data_type, zero.carried) != (x.data_type, x.carried):
        raise ctx.fail("the zero point's type differs from the input's")
    axis, block = parameter_layout(ctx, x, scale, zero)
    given = int(ctx.attr("output_dtype", 0)) if ctx.opset >= 23 else 0
    out_type = data_type_of(given, ctx.where) if given else scale.data_type
    if x.carried and x.data_type == DataType.FLOAT32:  # float8 / float4
        y = dequantize_linear_jax(ctx, x, scale, zero, DataType.FLOAT32, axis, block)
        return [cast_value(ctx, y, out_type)]
    if out_type == DataType.FLOAT32:
        scale = cast_value(ctx, scale, DataType.FLOAT32)  # a FLOAT16 scale widens exactly
    if block:
        y = _blocked(ctx, "DEQUANTIZE", x, scale, zero, scale.data_type, axis)
    else:
        y = dequantize_value(ctx, x, scale, zero, axis)
    # A FLOAT16 output_dtype of a FLOAT32 scale: the float32 result, rounded once.
    return [cast_value(ctx, y, out_type)]


@converter("DynamicQuantizeLinear")
def _dynamic_quantize_linear(ctx, node, inputs):
    (x,) = inputs
    one = (1,) * max(x.rank, 1)
    desc = op("DYNAMIC_QUANTIZE_LINEAR")(
        packed(x.data_type, x.shape),
        packed(DataType.UINT8, x.shape),
        TensorDesc(DataType.FLOAT32, one),
        TensorDesc(DataType.UINT8, one),
    )
    n = ctx.node(desc, [x])
    return [ctx.out(n, x.shape, 0), ctx.out(n, (), 1), ctx.out(n, (), 2)]


# ---------------------------------------------------------------------------------------------
# MatMulInteger / QLinearMatMul


def matrices(ctx, a: Value, b: Value):
    """A and B as DirectML's equal-rank operands: (a desc, a value, b desc, b value, output
    sizes, ONNX result shape). NumPy's matmul rules; batch dimensions broadcast by stride 0."""
    a2, b2, m, k, n, batch, result = matmul_operands(ctx, a, b)
    if len(batch) > 2:
        # Two batch dimensions at most: fold the leading ones where neither operand
        # broadcasts along them (MatMul's rule).
        lead = batch[:-1]
        for v in (a2, b2):
            own = (1,) * (len(batch) - (v.rank - 2)) + tuple(v.shape[:-2])
            if tuple(own[:-1]) != lead:
                raise ctx.fail(f"{len(batch)} batch dimensions that broadcast: DirectML takes 2")
        folded = (math.prod(lead), batch[-1])
        a2, b2 = a2.view(folded + (m, k)), b2.view(folded + (k, n))
        batch = folded
    a_desc = broadcast(a2, batch + (m, k))
    b_desc = broadcast(b2, batch + (k, n))
    return a_desc, a2, b_desc, b2, batch + (m, n), result


def matrix_params(ctx, params: list, rank: int, sides: str) -> list:
    """Scale / zero point values for the matrix operators, all at one rank: 1-D (DirectML's
    per-row / per-column form) when none has more dimensions, else ``rank`` with a 1-D one
    placed on its side's axis (``sides``: 'r' per row, 'c' per column)."""
    nd = any(v is not None and v.rank > 1 for v in params)
    out = []
    for v, side in zip(params, sides):
        if v is None:
            out.append(None)
        elif not nd:
            out.append(v.view((max(1, math.prod(v.shape)),)))
        elif v.rank <= 1:
            count = math.prod(v.shape)
            shape = [1] * rank
            shape[rank - 2 if side == "r" else rank - 1] = count
            out.append(v.view(shape if count > 1 else [1] * rank))
        else:
            out.append(v.view((1,) * (rank - v.rank) + tuple(v.shape)))
    return out


def param_desc(v: Value | None) -> TensorDesc | None:
    return None if v is None else packed(v.data_type, v.shape)


def _widen(ctx, v: Value | None) -> Value | None:
    """A FLOAT16 scale as FLOAT32 (exact), the type DirectML's quantized operators read."""
    if v is None or v.data_type != DataType.FLOAT16:
        return v
    return cast_value(ctx, v, DataType.FLOAT32)


@converter("MatMulInteger")
def _matmul_integer(ctx, node, inputs):
    a, b = inputs[:2]
    az, bz = _present(inputs, 2), _present(inputs, 3)
    a_desc, a2, b_desc, b2, sizes, result = matrices(ctx, a, b)
    az, bz = matrix_params(ctx, [az, bz], len(sizes), "rc")
    desc = op("MATRIX_MULTIPLY_INTEGER")(
        a_desc, param_desc(az), b_desc, param_desc(bz), TensorDesc(DataType.INT32, sizes)
    )
    return [view(ctx.out(ctx.node(desc, [a2, az, b2, bz]), sizes), result)]


@converter("QLinearMatMul")
def _qlinear_matmul(ctx, node, inputs):
    a, sa, za, b, sb, zb, so, zo = (list(inputs) + [None] * 8)[:8]
    a_desc, a2, b_desc, b2, sizes, result = matrices(ctx, a, b)
    sa, sb, so = (_widen(ctx, v) for v in (sa, sb, so))
    sa, za, sb, zb, so, zo = matrix_params(ctx, [sa, za, sb, zb, so, zo], len(sizes), "rrccrr")
    out_type = zo.data_type if zo is not None else a.data_type
    desc = op("QUANTIZED_LINEAR_MATRIX_MULTIPLY")(
        a_desc, param_desc(sa), param_desc(za),
        b_desc, param_desc(sb), param_desc(zb),
        param_desc(so), param_desc(zo),
        TensorDesc(out_type, sizes),
    )  # fmt: skip
    n = ctx.node(desc, [a2, sa, za, b2, sb, zb, so, zo])
    return [view(ctx.out(n, sizes), result)]


# ---------------------------------------------------------------------------------------------
# ConvInteger / QLinearConv


def _conv_geometry(ctx, x: Value, w: Value) -> tuple[dict, tuple[int, ...]]:
    """CONVOLUTION's fields and output sizes for ONNX's conv attributes (1-D and 2-D)."""
    if x.rank not in (3, 4) or w.rank != x.rank:
        raise ctx.fail(
            f"input of rank {x.rank} and weights of rank {w.rank}: DirectML's integer and "
            "quantized convolutions are 1-D or 2-D (both of rank 3 or 4)"
        )
    nd = x.rank - 2
    kernel = list(w.shape[2:])
    given = ctx.attr("kernel_shape")
    if given is not None and [int(k) for k in given] != kernel:
        raise ctx.fail(f"kernel_shape {list(given)} differs from the weights' {kernel}")

    def spatial(name, default):
        v = [int(a) for a in ctx.attr(name, [default] * nd)]
        if len(v) != nd:
            raise ctx.fail(f"{name} must hold {nd} values, got {len(v)}")
        return v

    strides, dilations = spatial("strides", 1), spatial("dilations", 1)
    start, end = pads_of(ctx, x.shape[2:], kernel, strides, dilations)
    group = int(ctx.attr("group", 1))
    spatial = spatial_out(x.shape[2:], kernel, strides, dilations, start, end)
    fields = {
        "strides": strides,
        "dilations": dilations,
        "start_padding": start,
        "end_padding": end,
        "group_count": group,
    }
    return fields, (x.shape[0], w.shape[0]) + spatial


def _conv_param(v: Value | None) -> Value | None:
    """A scale or zero point as DirectML's 1-D form (one value, or one per output channel)."""
    return None if v is None else v.view((max(1, math.prod(v.shape)),))


@converter("ConvInteger")
def _conv_integer(ctx, node, inputs):
    x, w = inputs[:2]
    xz, wz = (_conv_param(_present(inputs, k)) for k in (2, 3))
    fields, out = _conv_geometry(ctx, x, w)
    desc = op("CONVOLUTION_INTEGER")(
        packed(x.data_type, x.shape),
        param_desc(xz),
        packed(w.data_type, w.shape),
        param_desc(wz),
        TensorDesc(DataType.INT32, out),
        **fields,
    )
    return [ctx.out(ctx.node(desc, [x, xz, w, wz]), out)]


@converter("QLinearConv")
def _qlinear_conv(ctx, node, inputs):
    x, sx, zx, w, sw, zw, so, zo, bias = (list(inputs) + [None] * 9)[:9]
    sx, zx, sw, zw, so, zo = (_conv_param(v) for v in (sx, zx, sw, zw, so, zo))
    fields, out = _conv_geometry(ctx, x, w)
    if bias is not None:
        if bias.shape != (w.shape[0],):
            raise ctx.fail(f"B must have shape [{w.shape[0]}], got {list(bias.shape)}")
        bias = bias.view((1, w.shape[0]) + (1,) * (x.rank - 2))
    out_type = zo.data_type if zo is not None else x.data_type
    desc = op("QUANTIZED_LINEAR_CONVOLUTION")(
        packed(x.data_type, x.shape), param_desc(sx), param_desc(zx),
        packed(w.data_type, w.shape), param_desc(sw), param_desc(zw),
        param_desc(bias), param_desc(so), param_desc(zo),
        TensorDesc(out_type, out),
        **fields,
    )  # fmt: skip
    n = ctx.node(desc, [x, sx, zx, w, sw, zw, bias, so, zo])
    return [ctx.out(n, out)]
