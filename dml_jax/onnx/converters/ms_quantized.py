"""ONNX Runtime's ``com.microsoft`` quantized contrib ops onto DirectML's operators, with
onnxruntime's contrib semantics (its CPU kernels), mapped the way its DirectML provider maps
them where it has a kernel (``../shared/spec/ONNX.md``, the com.microsoft table):

- QLinearAdd -> ELEMENT_WISE_QUANTIZED_LINEAR_ADD (A and B broadcast by stride-0 descs).
- QLinearSigmoid, QLinearLeakyRelu, QLinearSoftmax, QLinearMul, QLinearConcat, QLinearWhere ->
  ELEMENT_WISE_DEQUANTIZE_LINEAR of each quantized input, the float op's own converter
  (ACTIVATION_SIGMOID, ACTIVATION_LEAKY_RELU, ACTIVATION_SOFTMAX(1), ELEMENT_WISE_MULTIPLY, JOIN,
  ELEMENT_WISE_IF), ELEMENT_WISE_QUANTIZE_LINEAR with the output's scale and zero point
  (QLinearSoftmax's ``opset`` attribute picks Softmax's axis rule).
- QLinearAveragePool, QLinearGlobalAveragePool -> QUANTIZED_LINEAR_AVERAGE_POOLING (1-D pools
  over ``{N, C, 1, L}``, global pools of other ranks over ``{N, C, 1, prod(spatial)}``;
  ``channels_last`` inputs read through permuted strides, outputs written back by an
  ELEMENT_WISE_IDENTITY). count_include_pad divides by the whole window, ceil_mode's extra end
  padding included, as onnxruntime's kernel does (ai.onnx AveragePool counts ONNX's pads only).
- MatMulIntegerToFloat -> MATRIX_MULTIPLY_INTEGER_TO_FLOAT; A and B of two types (UINT8 x INT8,
  which that operator does not take) -> MATRIX_MULTIPLY_INTEGER, then ELEMENT_WISE_DEQUANTIZE_LINEAR
  of the INT32 sums by ``a_scale * b_scale`` and the bias added: onnxruntime's
  ``float(sum) * (a_scale * b_scale) + bias``.
- DynamicQuantizeMatMul -> DYNAMIC_QUANTIZE_LINEAR (A to B's type, as the provider does; the
  dequantized values equal onnxruntime's UINT8 ones) + MATRIX_MULTIPLY_INTEGER_TO_FLOAT.
- QGemm -> MATRIX_MULTIPLY_INTEGER (transposes as strides), C added in INT32, then
  ELEMENT_WISE_DEQUANTIZE_LINEAR by ``alpha * a_scale * b_scale [/ y_scale]`` (per column for a
  per-column B) and, for a quantized output, ELEMENT_WISE_QUANTIZE_LINEAR with scale 1 and the
  output's zero point: onnxruntime's requantization ``round(float(sum) * multiplier) + y_zp``.
- MatMulNBits -> DEQUANTIZE (blockwise, one scale and zero point per block of K) + GEMM
  (TransB). B and packed zero points must be known at import. 4-bit B is DEQUANTIZE's UINT4
  input as it is stored (its bytes are DirectML's UINT4 layout: two codes a byte, the low
  nibble first), held by the graph in a constant data node (``Builder.constant_data``: graph
  constants otherwise enter through ELEMENT_WISE_IDENTITY, which takes no 4-bit type), so the
  program keeps half a byte a weight; the zero points too (unpacked and packed again per row
  of blocks). 2-bit B is unpacked to UINT8 codes (DirectML has no 2-bit type), 8-bit B is
  UINT8 as it is. On CUDA a decode-sized GEMM reads the 4-bit codes directly
  (``kernels/int4_gemm.py``). Absent zero points are the CPU kernel's default,
  ``2**(bits - 1)`` (the DirectML provider dequantizes with the scale only, i.e. 0, and gives
  other results: here the contrib semantics win); float zero points (A's type) follow
  onnxruntime's ``q * s - s * z`` (DEQUANTIZE with the scale only, minus ``s * z`` per block).
  A K that does not fill the last block is read through GEMM's strides (the padding never
  enters the product); ``g_idx`` other than the plain block order gathers the scales and zero
  points per column of K (GATHER); the bias is GEMM's C. ``accuracy_level`` is a precision
  hint: the product is float (level 0).
- QLinearConv (com.microsoft) -> ai.onnx QLinearConv's mapping; ``channels_last`` inputs are
  read through permuted strides (ELEMENT_WISE_IDENTITY) and the output written back.
- QuantizeLinear / DequantizeLinear -> ai.onnx's (opset 13 rules: one value or one per index of
  ``axis``), including the 16-bit types (``quantized.quantize_value``).

Scales and zero points of the QLinear ops are per tensor (one value each), as onnxruntime's CPU
kernels require; scales are FLOAT32. DirectML's (de)quantization is float32 with rounding half to
even; onnxruntime's lookup tables and fixed-point requantization round intermediates differently,
so a quantized result may differ from onnxruntime's by one step of the output scale where an
intermediate lies on a rounding boundary (docs/semantics.md, "Quantization").

These ops have no schema in the ``onnx`` package, so each converter checks its node itself
(input count, required inputs, attributes) and names the node in every error.
"""

from __future__ import annotations

import math

import numpy as np

from ...enums import DataType
from ...tensor import ScaleBias, TensorDesc, pack_4bit, packed_strides
from ..importer import Value, broadcast, packed, permuted
from . import converter, lookup
from ._common import binary_value, broadcast_shape, op, pads_of
from .pooling import pooling_window
from .quantized import (
    dequantize_value,
    matrices,
    matrix_params,
    param_desc,
    parameter_layout,
    quantize_value,
    quantized_type,
)

MS = "com.microsoft"
_Q8 = (DataType.INT8, DataType.UINT8)
_SIXTEEN = (DataType.INT16, DataType.UINT16)
_FLOATS = (DataType.FLOAT32, DataType.FLOAT16)


# ---------------------------------------------------------------------------------------------
# Node checks (the walk has no schema to check contrib ops against)


def _check(ctx, inputs, spec: str, attrs: dict[str, str] | None = None) -> list:
    """The node's inputs by ``spec`` (names, ``?`` marking optional ones), None where absent.

    Checks the input count, the required inputs, one output, and the attributes (``attrs``:
    name -> ONNX attribute type name, ``!`` marking required ones)."""
    import onnx

    names = spec.split()
    if len(inputs) > len(names):
        raise ctx.fail(f"{len(inputs)} inputs; the op takes at most {len(names)}")
    padded = list(inputs) + [None] * (len(names) - len(inputs))
    for k, (name, v) in enumerate(zip(names, padded)):
        if v is None and not name.endswith("?"):
            raise ctx.fail(f"input {k} ('{name}') is required")
    if ctx.output_count != 1 or len(ctx.onnx_node.output) != 1:
        raise ctx.fail(f"{len(ctx.onnx_node.output)} outputs; the op has one")
    attrs = attrs or {}
    for a in ctx.onnx_node.attribute:
        want = attrs.get(a.name)
        if want is None:
            raise ctx.fail(f"attribute '{a.name}' is not an attribute of the op")
        got = onnx.AttributeProto.AttributeType.Name(a.type).lower()
        if got != want.rstrip("!"):
            raise ctx.fail(f"attribute '{a.name}' must be {want.rstrip('!')}, got {got}")
    for name, want in attrs.items():
        if want.endswith("!") and name not in ctx.attrs:
            raise ctx.fail(f"attribute '{name}' is required")
    return padded


def _quantized(ctx, x: Value, what: str, types=_Q8) -> DataType:
    if x.data_type not in types or x.is_bool:
        names = " or ".join(t.name for t in types)
        raise ctx.fail(f"{what} must be {names}, got {x.data_type.name}")
    return x.data_type


def _one(ctx, v: Value | None, what: str, data_type: DataType | None = None) -> Value | None:
    """A per-tensor scale or zero point: one value (a scalar or a one-element tensor)."""
    if v is None:
        return None
    if math.prod(v.shape) != 1:
        raise ctx.fail(f"{what} must hold one value (per tensor), got shape {list(v.shape)}")
    if data_type is not None and v.data_type != data_type:
        raise ctx.fail(f"{what} must be {data_type.name}, got {v.data_type.name}")
    return v.view(())


def _scale(ctx, v: Value, what: str) -> Value:
    return _one(ctx, v, what, DataType.FLOAT32)


def _zero(ctx, v: Value | None, what: str, data_type: DataType) -> Value | None:
    return _one(ctx, v, what, data_type)


class _OnnxContext:
    """The context an ai.onnx converter sees when a contrib op reuses it (the float op between a
    dequantize and a quantize, QLinearConv): the contrib node's, with that ai.onnx op's opset and
    attributes."""

    def __init__(self, ctx, opset: int, **attrs):
        self._ctx, self.opset, self._attrs = ctx, opset, attrs

    def __getattr__(self, name):
        return getattr(self._ctx, name)

    @property
    def attrs(self) -> dict:
        return self._attrs

    def attr(self, name: str, default=None):
        return self._attrs.get(name, default)


def _onnx_op(ctx, op_type: str, inputs: list, opset: int = 13, **attrs) -> Value:
    """The first output of ai.onnx ``op_type``'s converter on ``inputs``."""
    return lookup(op_type)(_OnnxContext(ctx, opset, **attrs), ctx.onnx_node, inputs)[0]


# ---------------------------------------------------------------------------------------------
# The element-wise QLinear ops


def _per_tensor(ctx, x: Value, scale: Value, zero: Value | None, what: str) -> tuple:
    t = _quantized(ctx, x, what)
    return _scale(ctx, scale, f"{what}'s scale"), _zero(ctx, zero, f"{what}'s zero point", t)


def _dequantized(ctx, x: Value, scale: Value, zero: Value | None, what: str) -> Value:
    scale, zero = _per_tensor(ctx, x, scale, zero, what)
    return dequantize_value(ctx, x, scale, zero)


def _requantized(ctx, y: Value, scale: Value, zero: Value | None, t: DataType) -> Value:
    scale = _scale(ctx, scale, "the output's scale")
    zero = _zero(ctx, zero, "the output's zero point", t)
    return quantize_value(ctx, y, scale, zero, t)


@converter("QLinearAdd", domain=MS)
def _qlinear_add(ctx, node, inputs):
    a, sa, za, b, sb, zb, sc, zc = _check(
        ctx, inputs, "A A_scale A_zero_point? B B_scale B_zero_point? C_scale C_zero_point?"
    )
    t = _quantized(ctx, a, "A")
    if b.data_type != t:
        raise ctx.fail(f"B ({b.data_type.name}) and A ({t.name}) must have one type")
    shape = broadcast_shape(ctx, a.shape, b.shape)
    one = (1,) * max(len(shape), 1)
    sa, za = _per_tensor(ctx, a, sa, za, "A")
    sb, zb = _per_tensor(ctx, b, sb, zb, "B")
    sc, zc = _scale(ctx, sc, "C's scale"), _zero(ctx, zc, "C's zero point", t)
    params = [None if v is None else v.view(one) for v in (sa, za, sb, zb, sc, zc)]
    sa, za, sb, zb, sc, zc = params
    desc = op("ELEMENT_WISE_QUANTIZED_LINEAR_ADD")(
        broadcast(a, shape), param_desc(sa), param_desc(za),
        broadcast(b, shape), param_desc(sb), param_desc(zb),
        param_desc(sc), param_desc(zc),
        packed(t, shape),
    )  # fmt: skip
    return [ctx.out(ctx.node(desc, [a, sa, za, b, sb, zb, sc, zc]), shape)]


@converter("QLinearMul", domain=MS)
def _qlinear_mul(ctx, node, inputs):
    a, sa, za, b, sb, zb, sc, zc = _check(
        ctx, inputs, "A A_scale A_zero_point? B B_scale B_zero_point? C_scale C_zero_point?"
    )
    t = _quantized(ctx, a, "A")
    if b.data_type != t:
        raise ctx.fail(f"B ({b.data_type.name}) and A ({t.name}) must have one type")
    fa, fb = _dequantized(ctx, a, sa, za, "A"), _dequantized(ctx, b, sb, zb, "B")
    return [_requantized(ctx, _onnx_op(ctx, "Mul", [fa, fb]), sc, zc, t)]


def _unary(op_type: str, attrs: dict[str, tuple[str, float]] | None = None):
    """A QLinear activation: X dequantized, ``op_type``'s converter, Y quantized
    (``attrs``: contrib attribute -> (ai.onnx attribute, default))."""
    attrs = attrs or {}

    def convert(ctx, node, inputs):
        x, sx, zx, sy, zy = _check(
            ctx, inputs, "X X_scale X_zero_point? Y_scale Y_zero_point?",
            {name: "float" for name in attrs},
        )  # fmt: skip
        t = _quantized(ctx, x, "X")
        given = {onnx: float(ctx.attr(name, d)) for name, (onnx, d) in attrs.items()}
        y = _onnx_op(ctx, op_type, [_dequantized(ctx, x, sx, zx, "X")], **given)
        return [_requantized(ctx, y, sy, zy, t)]

    return convert


converter("QLinearSigmoid", domain=MS)(_unary("Sigmoid"))
converter("QLinearLeakyRelu", domain=MS)(_unary("LeakyRelu", {"alpha": ("alpha", 0.01)}))


@converter("QLinearSoftmax", domain=MS)
def _qlinear_softmax(ctx, node, inputs):
    x, sx, zx, sy, zy = _check(
        ctx,
        inputs,
        "X X_scale x_zero_point? y_scale y_zero_point",
        {"opset": "int!", "axis": "int"},
    )
    t = _quantized(ctx, x, "X")
    # The Softmax the node replaced: its axis rule (2-D coercion before opset 13) by ``opset``.
    opset = int(ctx.attr("opset"))
    axis = int(ctx.attr("axis", -1))
    y = _onnx_op(ctx, "Softmax", [_dequantized(ctx, x, sx, zx, "X")], opset=opset, axis=axis)
    return [_requantized(ctx, y, sy, zy, t)]


@converter("QLinearConcat", domain=MS)
def _qlinear_concat(ctx, node, inputs):
    if len(inputs) < 5 or (len(inputs) - 2) % 3:
        raise ctx.fail(
            f"{len(inputs)} inputs; the op takes Y_scale, Y_zero_point, then (tensor, scale, "
            "zero point) for each input, at least one"
        )
    names = "Y_scale Y_zero_point " + " ".join(
        f"X{i} X{i}_scale X{i}_zero_point" for i in range((len(inputs) - 2) // 3)
    )
    args = _check(ctx, inputs, names, {"axis": "int!"})
    sy, zy = args[:2]
    t = _quantized(ctx, zy, "Y_zero_point")
    floats = []
    for i in range(2, len(args), 3):
        x, sx, zx = args[i : i + 3]
        if _quantized(ctx, x, f"input {i}") != t:
            raise ctx.fail(f"input {i} ({x.data_type.name}) and Y ({t.name}) must have one type")
        floats.append(_dequantized(ctx, x, sx, zx, f"input {i}"))
    y = _onnx_op(ctx, "Concat", floats, axis=int(ctx.attr("axis")))
    return [_requantized(ctx, y, sy, zy, t)]


@converter("QLinearWhere", domain=MS)
def _qlinear_where(ctx, node, inputs):
    cond, x, sx, zx, y, sy, zy, sz, zz = _check(
        ctx, inputs, "condition X x_scale x_zero_point Y y_scale y_zero_point z_scale z_zero_point"
    )
    if not cond.is_bool:
        raise ctx.fail("condition must be a bool tensor")
    t = _quantized(ctx, x, "X")
    if y.data_type != t:
        raise ctx.fail(f"Y ({y.data_type.name}) and X ({t.name}) must have one type")
    fx, fy = _dequantized(ctx, x, sx, zx, "X"), _dequantized(ctx, y, sy, zy, "Y")
    return [_requantized(ctx, _onnx_op(ctx, "Where", [cond, fx, fy]), sz, zz, t)]


# ---------------------------------------------------------------------------------------------
# QLinearAveragePool, QLinearGlobalAveragePool


def _channels_first(ctx, x: Value) -> tuple[tuple[int, ...], TensorDesc | None]:
    """``x``'s shape channels-first, and for ``channels_last`` the desc that reads it so."""
    if not int(ctx.attr("channels_last", 0)):
        return x.shape, None
    if x.rank < 3:
        raise ctx.fail(f"the input must have 3 or more dimensions, got {x.rank}")
    perm = (0, x.rank - 1) + tuple(range(1, x.rank - 1))
    return tuple(x.shape[p] for p in perm), permuted(x, perm)


def _channels_back(ctx, y: Value) -> Value:
    """A channels-first result written channels-last (for ``channels_last``)."""
    if not int(ctx.attr("channels_last", 0)):
        return y
    perm = (0,) + tuple(range(2, y.rank)) + (1,)
    shape = tuple(y.shape[p] for p in perm)
    desc = op("ELEMENT_WISE_IDENTITY")(permuted(y, perm), packed(y.data_type, shape))
    return ctx.out(ctx.node(desc, [y]), shape)


def _pooled(ctx, x, source, sizes, out, params, window, include) -> Value:
    """QUANTIZED_LINEAR_AVERAGE_POOLING of ``x`` read as ``sizes`` (``source``: a desc that reads
    it channels-last, else None); ``params``: the four per-tensor scales / zero points."""
    t = x.data_type
    one = (1,) * len(sizes)
    sx, zx, sy, zy = (None if v is None else v.view(one) for v in params)
    src = TensorDesc(t, sizes) if source is None else TensorDesc(
        t, sizes, strides=_lifted_strides(source, sizes)
    )  # fmt: skip
    desc = op("QUANTIZED_LINEAR_AVERAGE_POOLING")(
        src, param_desc(sx), param_desc(zx), param_desc(sy), param_desc(zy), TensorDesc(t, out),
        **window, include_padding=include,
    )  # fmt: skip
    return ctx.out(ctx.node(desc, [x, sx, zx, sy, zy]), out)


def _lifted_strides(source: TensorDesc, sizes) -> tuple[int, ...]:
    """The strides of a channels-last read (``source``) with the spatial dimensions lifted or
    merged to ``sizes``: a 1-D pool's height of 1, a merged global window."""
    n, c = source.strides[:2]
    spatial = source.strides[2:]
    if len(sizes) - 2 == len(spatial):
        return tuple(source.strides)
    if len(spatial) == 1:  # {N, C, L} as {N, C, 1, L}
        return (n, c, 0, spatial[0])
    # Global pools of other ranks: the spatial dimensions merged into one (channels-last data
    # keeps them contiguous, C apart), preceded by a height of 1.
    return (n, c, 0, spatial[-1] if spatial else 1)


@converter("QLinearAveragePool", domain=MS)
def _qlinear_average_pool(ctx, node, inputs):
    x, sx, zx, sy, zy = _check(
        ctx, inputs, "X x_scale x_zero_point? y_scale y_zero_point?",
        {"kernel_shape": "ints!", "strides": "ints", "pads": "ints", "auto_pad": "string",
         "ceil_mode": "int", "count_include_pad": "int", "channels_last": "int"},
    )  # fmt: skip
    t = _quantized(ctx, x, "X")
    sx, zx = _per_tensor(ctx, x, sx, zx, "X")
    sy, zy = _scale(ctx, sy, "Y's scale"), _zero(ctx, zy, "Y's zero point", t)
    first, source = _channels_first(ctx, x)
    nd = len(first) - 2
    if not 1 <= nd <= 3:
        raise ctx.fail(f"pooling takes 1 to 3 spatial dimensions, got input rank {x.rank}")
    kernel = [int(k) for k in ctx.attr("kernel_shape")]
    strides = [int(s) for s in ctx.attr("strides", [1] * nd)]
    if len(kernel) != nd or len(strides) != nd:
        raise ctx.fail(f"kernel_shape and strides must hold {nd} values each")
    ones = [1] * nd
    spatial = tuple(first[2:])
    start, end = pads_of(ctx, spatial, kernel, strides, ones, ceil=bool(ctx.attr("ceil_mode", 0)))
    # count_include_pad divides by the whole window, ceil_mode's extra end padding included:
    # onnxruntime's kernel (unlike ai.onnx AveragePool's) and DirectML's IncludePadding agree.
    include = bool(ctx.attr("count_include_pad", 0))
    lift = (lambda v, d: [d, *v]) if nd == 1 else (lambda v, d: list(v))
    sizes = first[:2] + ((1,) if nd == 1 else ()) + spatial
    kernel, strides, start, end = lift(kernel, 1), lift(strides, 1), lift(start, 0), lift(end, 0)
    out, window = pooling_window(ctx, sizes, kernel, strides, [1] * len(kernel), start, end)
    y = _pooled(ctx, x, source, sizes, out, (sx, zx, sy, zy), window, include)
    y = y.view(out[:2] + out[3:]) if nd == 1 else y
    return [_channels_back(ctx, y)]


@converter("QLinearGlobalAveragePool", domain=MS)
def _qlinear_global_average_pool(ctx, node, inputs):
    x, sx, zx, sy, zy = _check(
        ctx, inputs, "X x_scale x_zero_point y_scale y_zero_point", {"channels_last": "int"}
    )
    t = _quantized(ctx, x, "X")
    sx, zx = _per_tensor(ctx, x, sx, zx, "X")
    sy, zy = _scale(ctx, sy, "Y's scale"), _zero(ctx, zy, "Y's zero point", t)
    shape, source = _channels_first(ctx, x)
    if len(shape) < 3:
        raise ctx.fail(f"the input must have 3 or more dimensions, got {x.rank}")
    sizes = shape if len(shape) in (4, 5) else shape[:2] + (1, math.prod(shape[2:]))
    dims = len(sizes) - 2
    out = sizes[:2] + (1,) * dims
    window = {
        "strides": [1] * dims,
        "window_size": list(sizes[2:]),
        "start_padding": [0] * dims,
        "end_padding": [0] * dims,
        "dilations": [1] * dims,
    }
    y = _pooled(ctx, x, source, sizes, out, (sx, zx, sy, zy), window, False)
    # {N, C, 1, ..} and {N, 1, .., C} hold the same data: the output is a view either way.
    if source is not None:
        return [y.view((shape[0],) + (1,) * (len(shape) - 2) + (shape[1],))]
    return [y.view(shape[:2] + (1,) * (len(shape) - 2))]


@converter("QLinearConv", domain=MS)
def _ms_qlinear_conv(ctx, node, inputs):
    """ai.onnx QLinearConv's mapping (QUANTIZED_LINEAR_CONVOLUTION); ``channels_last`` (what
    onnxruntime's NHWC transformer writes) reads X through permuted strides and writes Y back."""
    args = _check(
        ctx, inputs, "x x_scale x_zero_point w w_scale w_zero_point y_scale y_zero_point B?",
        {"auto_pad": "string", "kernel_shape": "ints", "dilations": "ints", "strides": "ints",
         "pads": "ints", "group": "int", "channels_last": "int"},
    )  # fmt: skip
    x = args[0]
    shape, source = _channels_first(ctx, x)
    if source is not None:
        desc = op("ELEMENT_WISE_IDENTITY")(source, packed(x.data_type, shape))
        x = ctx.out(ctx.node(desc, [x]), shape)
    attrs = {k: ctx.attr(k) for k in ctx.attrs if k != "channels_last"}
    y = _onnx_op(ctx, "QLinearConv", [x, *args[1:]], opset=10, **attrs)
    return [_channels_back(ctx, y)]


# ---------------------------------------------------------------------------------------------
# Integer matrix products with a float or requantized result


def _column_params(ctx, scale: Value, zero: Value | None, n: int, what: str):
    """B's scale and zero point: one value, or one per column (N)."""
    count = math.prod(scale.shape)
    if count not in (1, n) or scale.rank > 1:
        raise ctx.fail(
            f"{what}'s scale must hold one value or one per column ({n}), got shape "
            f"{list(scale.shape)}"
        )
    if zero is not None and math.prod(zero.shape) != count:
        raise ctx.fail(
            f"{what}'s zero point has shape {list(zero.shape)}, its scale {list(scale.shape)}"
        )
    shape = (count,) if count > 1 else ()
    return scale.view(shape), None if zero is None else zero.view(shape)


def _integer_to_float(ctx, a, sa, za, b, sb, zb, bias, float_type) -> Value:
    """``((A - za) sa) x ((B - zb) sb) + bias`` in ``float_type``: MATRIX_MULTIPLY_INTEGER_TO_FLOAT
    when A and B share a type, else the INT32 product dequantized by ``sa * sb``."""
    a_desc, a2, b_desc, b2, sizes, result = matrices(ctx, a, b)
    n = sizes[-1]
    if bias is not None:
        if bias.data_type != float_type:
            raise ctx.fail(f"bias must be {float_type.name}, got {bias.data_type.name}")
        if bias.shape != (n,):
            raise ctx.fail(f"bias must have shape [{n}], got {list(bias.shape)}")
    rank = len(sizes)
    if a.data_type == b.data_type:
        sa2, za2, sb2, zb2 = matrix_params(ctx, [sa, za, sb, zb], rank, "rrcc")
        bias_desc = None if bias is None else broadcast(bias, sizes)
        desc = op("MATRIX_MULTIPLY_INTEGER_TO_FLOAT")(
            a_desc, param_desc(sa2), param_desc(za2), b_desc, param_desc(sb2), param_desc(zb2), bias_desc,
            TensorDesc(float_type, sizes),
        )  # fmt: skip
        y = ctx.out(ctx.node(desc, [a2, sa2, za2, b2, sb2, zb2, bias]), sizes)
        return y.view(result)
    za2, zb2 = matrix_params(ctx, [za, zb], rank, "rc")
    desc = op("MATRIX_MULTIPLY_INTEGER")(
        a_desc, param_desc(za2), b_desc, param_desc(zb2), TensorDesc(DataType.INT32, sizes)
    )
    acc = ctx.out(ctx.node(desc, [a2, za2, b2, zb2]), sizes)
    scale = binary_value(ctx, "ELEMENT_WISE_MULTIPLY", sa, sb)
    y = dequantize_value(ctx, acc, scale, None, rank - 1 if scale.rank else None)
    if bias is not None:
        y = binary_value(ctx, "ELEMENT_WISE_ADD", y, bias)
    return y.view(result)


@converter("MatMulIntegerToFloat", domain=MS)
def _matmul_integer_to_float(ctx, node, inputs):
    a, b, sa, sb, za, zb, bias = _check(
        ctx, inputs, "A B a_scale b_scale a_zero_point? b_zero_point? bias?"
    )
    ta, tb = _quantized(ctx, a, "A"), _quantized(ctx, b, "B")
    if sa.data_type not in _FLOATS or sb.data_type != sa.data_type:
        raise ctx.fail("a_scale and b_scale must be one float type (FLOAT32 or FLOAT16)")
    sa, za = _one(ctx, sa, "a_scale"), _zero(ctx, za, "a_zero_point", ta)
    if zb is not None and zb.data_type != tb:
        raise ctx.fail(f"b_zero_point must be {tb.name}, got {zb.data_type.name}")
    n = b.shape[-1] if b.rank > 1 else 1
    sb, zb = _column_params(ctx, sb, zb, n, "B")
    return [_integer_to_float(ctx, a, sa, za, b, sb, zb, bias, sa.data_type)]


@converter("DynamicQuantizeMatMul", domain=MS)
def _dynamic_quantize_matmul(ctx, node, inputs):
    a, b, sb, zb, bias = _check(ctx, inputs, "A B b_scale b_zero_point? bias?")
    if a.data_type != DataType.FLOAT32:
        raise ctx.fail(f"A must be FLOAT32, got {a.data_type.name}")
    tb = _quantized(ctx, b, "B")
    if sb.data_type != DataType.FLOAT32:
        raise ctx.fail(f"b_scale must be FLOAT32, got {sb.data_type.name}")
    if zb is not None and zb.data_type != tb:
        raise ctx.fail(f"b_zero_point must be {tb.name}, got {zb.data_type.name}")
    sb, zb = _column_params(ctx, sb, zb, b.shape[-1] if b.rank > 1 else 1, "B")
    one = (1,) * max(a.rank, 1)
    desc = op("DYNAMIC_QUANTIZE_LINEAR")(
        packed(a.data_type, a.shape),
        packed(tb, a.shape),
        TensorDesc(DataType.FLOAT32, one),
        TensorDesc(tb, one),
    )
    n = ctx.node(desc, [a])
    aq, sa, za = ctx.out(n, a.shape, 0), ctx.out(n, (), 1), ctx.out(n, (), 2)
    return [_integer_to_float(ctx, aq, sa, za, b, sb, zb, bias, DataType.FLOAT32)]


@converter("QGemm", domain=MS)
def _qgemm(ctx, node, inputs):
    a, sa, za, b, sb, zb, c, sy, zy = _check(
        ctx, inputs, "A a_scale a_zero_point B b_scale b_zero_point C? y_scale? y_zero_point?",
        {"transA": "int", "transB": "int", "alpha": "float"},
    )  # fmt: skip
    ta, tb = _quantized(ctx, a, "A"), _quantized(ctx, b, "B")
    if a.rank != 2 or b.rank != 2:
        raise ctx.fail(f"A and B must be 2-D, got shapes {list(a.shape)} and {list(b.shape)}")
    trans_a, trans_b = int(ctx.attr("transA", 0)), int(ctx.attr("transB", 0))
    m, k = a.shape[::-1] if trans_a else a.shape
    k2, n = b.shape[::-1] if trans_b else b.shape
    if k != k2:
        raise ctx.fail(f"inner dimensions differ: A {list(a.shape)}, B {list(b.shape)}")
    sa, za = _scale(ctx, sa, "a_scale"), _zero(ctx, za, "a_zero_point", ta)
    if sb.data_type != DataType.FLOAT32 or zb.data_type != tb:
        raise ctx.fail(f"b_scale must be FLOAT32 and b_zero_point {tb.name}")
    sb, zb = _column_params(ctx, sb, zb, n, "B")
    if (sy is None) != (zy is None):
        raise ctx.fail(
            "y_scale and y_zero_point come together (a quantized output) or not at all (a "
            "FLOAT32 output)"
        )
    a_desc = permuted(a, (1, 0)) if trans_a else packed(ta, a.shape)
    b_desc = permuted(b, (1, 0)) if trans_b else packed(tb, b.shape)
    za1 = za.view((1,))
    zb1 = zb.view((max(1, math.prod(zb.shape)),))
    desc = op("MATRIX_MULTIPLY_INTEGER")(
        a_desc, param_desc(za1), b_desc, param_desc(zb1), TensorDesc(DataType.INT32, (m, n))
    )
    acc = ctx.out(ctx.node(desc, [a, za1, b, zb1]), (m, n))
    if c is not None:
        if c.data_type != DataType.INT32:
            raise ctx.fail(f"C must be INT32, got {c.data_type.name}")
        if broadcast_shape(ctx, c.shape, (m, n)) != (m, n):
            raise ctx.fail(f"C of shape {list(c.shape)} does not broadcast to [{m}, {n}]")
        acc = binary_value(ctx, "ELEMENT_WISE_ADD", acc, c)
    # onnxruntime's multiplier: alpha * a_scale * b_scale, divided by y_scale for a quantized Y.
    alpha = float(ctx.attr("alpha", 1.0))
    if alpha != 1.0:
        t = packed(DataType.FLOAT32, ())
        scaled = op("ELEMENT_WISE_IDENTITY")(t, t, scale_bias=ScaleBias(alpha, 0.0))
        sa = ctx.out(ctx.node(scaled, [sa]), ())
    scale = binary_value(ctx, "ELEMENT_WISE_MULTIPLY", sa, sb)
    if sy is not None:
        sy, zy = _scale(ctx, sy, "y_scale"), _zero(ctx, zy, "y_zero_point", zy.data_type)
        _quantized(ctx, zy, "y_zero_point")
        scale = binary_value(ctx, "ELEMENT_WISE_DIVIDE", scale, sy)
    y = dequantize_value(ctx, acc, scale, None, 1 if scale.rank else None)
    if sy is None:
        return [y]
    # round(float(sum) * multiplier) + y_zero_point, saturated: a quantization by scale 1.
    return [quantize_value(ctx, y, ctx.constant(np.float32(1)), zy, zy.data_type)]


# ---------------------------------------------------------------------------------------------
# MatMulNBits


def _unpacked(data: np.ndarray, bits: int, rows: int, count: int) -> np.ndarray:
    """The first ``count`` values of each of ``rows`` rows of packed bytes (``bits`` each, the
    low bits first), as uint8."""
    per = 8 // bits
    raw = data.reshape(rows, -1).astype(np.uint8)
    shifts = (np.arange(per) * bits).astype(np.uint8)
    values = (raw[..., None] >> shifts) & np.uint8((1 << bits) - 1)
    return values.reshape(rows, -1)[:, :count]


def _strided(data_type: DataType, sizes, strides) -> TensorDesc:
    sizes, strides = tuple(sizes), tuple(strides)
    if strides == packed_strides(sizes):
        return TensorDesc(data_type, sizes)
    return TensorDesc(data_type, sizes, strides=strides)


def _codes(ctx, codes: np.ndarray, bits: int) -> Value:
    """Integer codes {rows, count} (uint8, below ``2**bits``) as a constant of the DEQUANTIZE
    input type ``_code_type(bits)``: UINT4 DirectML's packed bytes in the graph itself
    (``Builder.constant_data``), UINT8 a constant graph input."""
    if bits == 4:
        return ctx.builder.constant_data(pack_4bit(codes), DataType.UINT4, codes.shape)
    return ctx.constant(np.ascontiguousarray(codes, np.uint8))


def _code_type(bits: int) -> DataType:
    # 4-bit codes stay 4-bit (DEQUANTIZE takes UINT4); 2-bit ones widen (DirectML has no
    # 2-bit type), 8-bit ones are UINT8 as they are.
    return DataType.UINT4 if bits == 4 else DataType.UINT8


@converter("MatMulNBits", domain=MS)
def _matmul_nbits(ctx, node, inputs):
    a, b, scales, zeros, g_idx, bias = _check(
        ctx, inputs, "A B scales zero_points? g_idx? bias?",
        {"K": "int!", "N": "int!", "bits": "int", "block_size": "int!", "accuracy_level": "int",
         "weight_prepacked": "int"},
    )  # fmt: skip
    k, n = int(ctx.attr("K")), int(ctx.attr("N"))
    bits, block = int(ctx.attr("bits", 4)), int(ctx.attr("block_size"))
    t = a.data_type
    if t not in _FLOATS:
        raise ctx.fail(f"A must be FLOAT32 or FLOAT16, got {t.name}")
    if bits not in (2, 4, 8):
        raise ctx.fail(f"bits must be 2, 4 or 8, got {bits}")
    if block < 1 or block * bits % 8:
        raise ctx.fail(f"block_size {block} must be positive and hold whole bytes of {bits} bits")
    if int(ctx.attr("weight_prepacked", 0)):
        raise ctx.fail("weight_prepacked B (an execution provider's own layout) is not supported")
    if a.rank < 1 or a.shape[-1] != k or k < 1 or n < 1:
        raise ctx.fail(f"A's last dimension must be K ({k}), got shape {list(a.shape)}")
    blocks = -(-k // block)
    padded = blocks * block
    data = ctx.const(b, "B")
    if b.data_type != DataType.UINT8 or data.size != n * blocks * block * bits // 8:
        raise ctx.fail(
            f"B must be UINT8 of [N, ceil(K / block_size), block_size * bits / 8] = "
            f"[{n}, {blocks}, {block * bits // 8}], got {b.data_type.name} {list(b.shape)}"
        )
    code_type = _code_type(bits)
    if bits == 4:  # B's bytes are DirectML's UINT4 {N, padded K} as they are
        q = ctx.builder.constant_data(data, code_type, (n, padded), of=b)
    else:
        q = _codes(ctx, _unpacked(data, bits, n, padded), bits)
    if scales.data_type != t or math.prod(scales.shape) != n * blocks:
        raise ctx.fail(
            f"scales must be {t.name} of [{n}, {blocks}] values, got {scales.data_type.name} "
            f"{list(scales.shape)}"
        )
    scales = scales.view((n, blocks))
    float_zero = zeros is not None and zeros.data_type in _FLOATS
    zero_codes = None  # integer zero points, {N, blocks} uint8, until they become a constant
    if float_zero:
        if zeros.data_type != t or math.prod(zeros.shape) != n * blocks:
            raise ctx.fail(f"float zero_points must be {t.name} of [{n}, {blocks}] values")
        zeros = zeros.view((n, blocks))
    elif zeros is not None:
        packed_zeros = ctx.const(zeros, "zero_points")
        width = -(-blocks * bits // 8)
        if zeros.data_type != DataType.UINT8 or packed_zeros.size != n * width:
            raise ctx.fail(
                f"packed zero_points must be UINT8 of [{n}, {width}] bytes, got "
                f"{zeros.data_type.name} {list(zeros.shape)}"
            )
        zero_codes = _unpacked(packed_zeros, bits, n, blocks)
    else:  # onnxruntime's default: the middle of the unsigned range
        zero_codes = np.full((n, blocks), 1 << (bits - 1), np.uint8)
    columns = padded
    if g_idx is not None:
        order = np.asarray(ctx.const(g_idx, "g_idx")).reshape(-1).astype(np.int64)
        if order.size != k or order.min(initial=0) < 0 or order.max(initial=0) >= blocks:
            raise ctx.fail(f"g_idx must hold K ({k}) block indices below {blocks}")
        if not np.array_equal(order, np.arange(k) // block):
            # Each column of K reads its own block's scale and zero point: the quantization
            # tensors gathered to one value per column (blocks of one element), B read up to K.
            columns = k
            scales = _gathered(ctx, scales, order)
            if float_zero:
                zeros = _gathered(ctx, zeros, order)
            else:  # known zero points: gathered at import
                zero_codes = zero_codes[:, order]
    q_desc = _strided(code_type, (n, columns), (padded, 1))
    if float_zero:
        deq = _dequantize_blocks(ctx, q, q_desc, [scales], t)
        offset = binary_value(ctx, "ELEMENT_WISE_MULTIPLY", scales, zeros)
        per = columns // offset.shape[1]
        deq = binary_value(
            ctx, "ELEMENT_WISE_SUBTRACT", deq.view((n, offset.shape[1], per)),
            offset.view((n, offset.shape[1], 1)),
        ).view((n, columns))  # fmt: skip
    else:
        zeros = _codes(ctx, zero_codes, bits)
        deq = _dequantize_blocks(ctx, q, q_desc, [scales, zeros], t)
    rows = math.prod(a.shape[:-1])
    out = (1, 1, rows, n)
    if bias is not None and (bias.data_type != t or bias.shape != (n,)):
        raise ctx.fail(f"bias must be {t.name} of shape [{n}], got {list(bias.shape)}")
    desc = op("GEMM")(
        TensorDesc(t, (1, 1, rows, k)),
        _strided(t, (1, 1, n, k), (n * columns, n * columns, columns, 1)),
        None if bias is None else broadcast(bias, out),
        TensorDesc(t, out),
        trans_b="TRANSPOSE",
        beta=0.0 if bias is None else 1.0,
    )
    y = ctx.out(ctx.node(desc, [a, deq, bias]), out)
    return [y.view(a.shape[:-1] + (n,))]


def _gathered(ctx, v: Value, order: np.ndarray) -> Value:
    """``v`` {N, blocks} gathered along its blocks by ``order``: {N, K}."""
    if v.const is not None and v.param is None:  # known values: gathered at import
        return ctx.constant(v.const[:, order])
    indices = ctx.constant(order.astype(np.int32))
    shape = (v.shape[0], order.size)
    desc = op("GATHER")(
        packed(v.data_type, v.shape),
        packed(DataType.INT32, (1, order.size)),
        packed(v.data_type, shape),
        axis=1,
        index_dimensions=1,
    )
    return ctx.out(ctx.node(desc, [v, indices.view((1, order.size))]), shape)


def _dequantize_blocks(ctx, q: Value, q_desc: TensorDesc, params: list, t: DataType) -> Value:
    """DEQUANTIZE of ``q`` read through ``q_desc`` {N, columns} with {N, groups} quantization
    tensors (one value per block of ``columns / groups``)."""
    sizes = q_desc.sizes
    desc = op("DEQUANTIZE")(
        q_desc,
        "SCALE_ZERO_POINT" if len(params) == 2 else "SCALE",
        [packed(v.data_type, v.shape) for v in params],
        packed(t, sizes),
    )
    return ctx.out(ctx.node(desc, [q, *params]), sizes)


# ---------------------------------------------------------------------------------------------
# QuantizeLinear / DequantizeLinear


@converter("QuantizeLinear", domain=MS)
def _ms_quantize_linear(ctx, node, inputs):
    x, scale, zero = _check(ctx, inputs, "x y_scale y_zero_point?", {"axis": "int"})
    if x.data_type not in _FLOATS or scale.data_type != x.data_type:
        raise ctx.fail("x and y_scale must be one float type (FLOAT32 or FLOAT16)")
    axis, _ = parameter_layout(ctx, x, scale, zero, opset=13)
    if zero is not None:
        _quantized(ctx, zero, "y_zero_point", _Q8 + _SIXTEEN)
    out_type = quantized_type(ctx, zero)
    return [quantize_value(ctx, x, scale, zero, out_type, axis)]


@converter("DequantizeLinear", domain=MS)
def _ms_dequantize_linear(ctx, node, inputs):
    x, scale, zero = _check(ctx, inputs, "x x_scale x_zero_point?", {"axis": "int"})
    _quantized(ctx, x, "x", _Q8 + _SIXTEEN + (DataType.INT32,))
    if scale.data_type not in _FLOATS:
        raise ctx.fail(f"x_scale must be FLOAT32 or FLOAT16, got {scale.data_type.name}")
    if zero is not None and zero.data_type != x.data_type:
        raise ctx.fail("the zero point's type differs from the input's")
    axis, _ = parameter_layout(ctx, x, scale, zero, opset=13)
    return [dequantize_value(ctx, x, scale, zero, axis)]
