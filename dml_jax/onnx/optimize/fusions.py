"""Fusions into GEMM and CONVOLUTION: a following batch normalization folded into the weights
(onnxruntime's ConvBNFusion and MatmulBNFusion), a following bias or residual addition into
GEMM's C (MatMulAddFusion) and CONVOLUTION's bias (ConvAddFusion), and a following activation
into the producer's ``FusedActivation`` (the DirectML provider's DmlOperatorFusionTransformer).

Parameters (``apply(params)`` may replace them): folded weights that depend on a parameter are
computed by graph nodes on the parameter inputs (a few element-wise nodes over the weights, run
with the model), so a replaced parameter still takes effect; weights that are plain constants
are folded on the host here. A fold at run time passes over the weights to save a pass over
the normalization's input, so it is made only where the weights have at most as many elements
as that input (early convolutions, large batches; not a late 1x1 layer at batch 1).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ...enums import DataType
from ...tensor import ScaleBias, TensorDesc, host_view
from . import Editor, Source, op_class, reshape_strides, rewrite

# ---------------------------------------------------------------------------------------------
# Values that are host arrays or graph nodes


class _Calc:
    """Arithmetic on small tensors (per-channel vectors, weights) that are either known here
    (NumPy, computed now) or graph values (DML element-wise nodes added to the graph): a value
    is a NumPy array or ``(source, desc)``, the desc reading the source as that tensor."""

    def __init__(self, g: Editor, t: DataType, origin: int, on_host: bool):
        self.g, self.t, self.origin, self.on_host = g, t, origin, on_host
        # host arithmetic in float32 (the operators' compute type for FLOAT16 too), float64
        # for FLOAT64 graphs
        self.dtype = np.float64 if t == DataType.FLOAT64 else np.float32

    def read(self, src: Source, desc: TensorDesc) -> Any:
        """The tensor ``desc`` reads from ``src`` (a constant's value on the host)."""
        if self.on_host:  # a strided view of the flat elements (no index array), then copied
            flat = np.ascontiguousarray(self.g.constant(src)).reshape(-1)
            return host_view(flat, desc).astype(self.dtype)
        return (src, desc)

    def const(self, array: np.ndarray) -> Any:
        array = np.asarray(array, self.dtype)
        if self.on_host:
            return array
        src = self.g.add_constant_node(array, self.t)
        return (src, TensorDesc(self.t, array.shape or (1,)))

    def _node(self, name: str, sizes, *values, **fields) -> Any:
        out = TensorDesc(self.t, tuple(sizes))
        descs = [v[1] for v in values]
        n = self.g.add(op_class(name)(*descs, out, **fields), [v[0] for v in values], self.origin)
        return ((n, 0), out)

    def binary(self, name: str, a: Any, b: Any, fn) -> Any:
        """``fn(a, b)`` / the DML element-wise ``name``, both read at their common sizes."""
        if self.on_host:
            return fn(a, b).astype(self.dtype)
        sizes = np.broadcast_shapes(a[1].sizes, b[1].sizes)
        return self._node(name, sizes, self.broadcast(a, sizes), self.broadcast(b, sizes))

    def mul(self, a: Any, b: Any) -> Any:
        return self.binary("ELEMENT_WISE_MULTIPLY", a, b, np.multiply)

    def add(self, a: Any, b: Any) -> Any:
        return self.binary("ELEMENT_WISE_ADD", a, b, np.add)

    def sub(self, a: Any, b: Any) -> Any:
        return self.binary("ELEMENT_WISE_SUBTRACT", a, b, np.subtract)

    def div(self, a: Any, b: Any) -> Any:
        return self.binary("ELEMENT_WISE_DIVIDE", a, b, np.divide)

    def sqrt_plus(self, a: Any, eps: float) -> Any:
        """``sqrt(a + eps)`` (ELEMENT_WISE_SQRT's ScaleBias adds eps)."""
        if self.on_host:
            return np.sqrt(a + self.dtype(eps)).astype(self.dtype)
        return self._node("ELEMENT_WISE_SQRT", a[1].sizes, a, scale_bias=ScaleBias(1.0, eps))

    def broadcast(self, v: Any, sizes) -> Any:
        """``v`` read at ``sizes`` (numpy's broadcasting; stride 0 where it repeats)."""
        if self.on_host:
            return np.broadcast_to(v, sizes)
        src, desc = v
        sizes = tuple(sizes)
        lead = len(sizes) - desc.rank
        own = (1,) * lead + desc.sizes
        strides = (0,) * lead + desc.layout_strides
        strides = tuple(0 if o == 1 and n != 1 else s for o, n, s in zip(own, sizes, strides))
        return (src, TensorDesc(self.t, sizes, strides=strides))

    def reshape(self, v: Any, sizes) -> Any:
        """``v`` (a packed tensor or a host array) under other sizes of the same count."""
        if self.on_host:
            return np.reshape(v, sizes)
        src, desc = v
        strides = reshape_strides(desc.sizes, desc.layout_strides, sizes)
        assert strides is not None  # the values this module reshapes are packed vectors
        return (src, TensorDesc(self.t, tuple(sizes), strides=strides))

    def source(self, v: Any) -> tuple[Source, TensorDesc]:
        """A graph value of ``v`` (a host array becomes a constant), and its desc."""
        if self.on_host:
            src = self.g.add_constant_node(np.asarray(v, self.dtype), self.t)
            return src, TensorDesc(self.t, np.shape(v) or (1,))
        return v


def _channel_desc(g: Editor, n: int, slot: int, channels: int, axis: int) -> TensorDesc | None:
    """The desc reading input ``slot`` of node ``n`` as a vector over ``axis`` (length
    ``channels``), when that input varies along ``axis`` only (stride 0 elsewhere or size 1);
    else None."""
    d = g.input_desc(n, slot)
    if d is None or d.rank <= axis or d.sizes[axis] != channels:
        return None
    for k, (size, stride) in enumerate(zip(d.sizes, d.layout_strides)):
        if k != axis and size != 1 and stride != 0:
            return None
    return TensorDesc(d.data_type, (channels,), strides=(d.layout_strides[axis],))


def _on_host(g: Editor, sources) -> bool:
    """Every source is a constant that is not a parameter: fold on the host."""
    return all(g.constant(s) is not None and g.param(s) is None for s in sources)


def _bn_after(g: Editor, n: int, exact: bool = True) -> int | None:
    """The BATCH_NORMALIZATION node that alone reads node ``n``'s output exactly (``exact``;
    else packed, under any sizes), when ``n`` has no fused activation of its own and the BN's
    statistics are constants (parameters or not)."""
    if getattr(g.nodes[n], "fused_activation", None) is not None:
        return None
    user = g.reader((n, 0), "BATCH_NORMALIZATION")
    if user is None or user[1] != 0:
        return None
    if not (g.reads_as_written(*user) if exact else g.reads_packed(*user)):
        return None
    if any(g.constant(g.source(user[0], k)) is None for k in (1, 2, 3, 4)):
        return None
    return user[0]


def _bn_factors(calc: _Calc, g: Editor, bn: int, vectors: list[TensorDesc]):
    """(f, shift) of a BATCH_NORMALIZATION node: ``bn(y) = y * f + shift`` per channel."""
    mean, var, scale, bias = (calc.read(g.source(bn, k), v) for k, v in zip((1, 2, 3, 4), vectors))
    f = calc.div(scale, calc.sqrt_plus(var, g.nodes[bn].epsilon))
    return f, calc.sub(bias, calc.mul(mean, f))


def _take_bn(g: Editor, producer: int, bn: int, desc: Any, inputs: dict[int, Source]) -> None:
    """Node ``producer`` becomes ``desc`` reading ``inputs`` (slot -> source) and takes the
    BN's readers."""
    g.set_node(producer, desc)
    for slot, src in inputs.items():
        g.set_input(producer, slot, src)
    g.reroute((bn, 0), (producer, 0))
    g.remove(bn)


def _fold_bn(
    g: Editor,
    n: int,
    bn: int,
    desc: Any,
    vectors: list,
    weight: TensorDesc,
    per_channel: tuple,
    bias: TensorDesc | None = None,
    beta: float = 1.0,
) -> bool:
    """Folds BATCH_NORMALIZATION node ``bn`` into node ``n``, which becomes ``desc``: its slot-1
    weight (read as ``weight``) times the BN's factor (reshaped to ``per_channel``), its slot 2
    ``beta * bias * f + shift`` (``bias``: how slot 2 is read, None without one). False, and
    nothing changed, where a run-time fold (parameters) would cost more than the pass over the
    output it saves."""
    sources = [g.source(bn, j) for j in (1, 2, 3, 4)] + [g.source(n, 1)]
    if bias is not None:
        sources.append(g.source(n, 2))
    on_host = _on_host(g, sources)
    if not on_host and weight.element_count > desc.output_tensor.element_count:
        return False
    calc = _Calc(g, desc.output_tensor.data_type, g.origin[n], on_host)
    f, shift = _bn_factors(calc, g, bn, vectors)
    w = calc.mul(calc.read(g.source(n, 1), weight), calc.reshape(f, per_channel))
    if bias is not None:
        c = calc.read(g.source(n, 2), bias)
        if beta != 1.0:
            c = calc.mul(c, calc.const(np.full((1,), beta)))
        shift = calc.add(calc.mul(c, f), shift)
    _take_bn(g, n, bn, desc, {1: calc.source(w)[0], 2: calc.source(shift)[0]})
    return True


@rewrite("ConvBNFusion", "basic")
def conv_bn(g: Editor) -> int:
    """CONVOLUTION (forward) followed by BATCH_NORMALIZATION with constant statistics: the
    statistics folded into the filter and the bias."""
    count = 0
    for n in g.live():
        d = g.nodes[n]
        if g.op(n) != "CONVOLUTION" or d.direction.name != "FORWARD":
            continue
        if not d.output_tensor.data_type.is_float:
            continue
        bn = _bn_after(g, n)
        if bn is None:
            continue
        k = d.output_tensor.sizes[1]
        vectors = [_channel_desc(g, bn, j, k, 1) for j in (1, 2, 3, 4)]
        bias_vec = _channel_desc(g, n, 2, k, 1) if d.bias_tensor is not None else None
        if any(v is None for v in vectors) or (d.bias_tensor is not None and bias_vec is None):
            continue
        t = d.output_tensor.data_type
        rank = d.filter_tensor.rank
        desc = dataclasses.replace(
            d,
            filter_tensor=TensorDesc(t, d.filter_tensor.sizes),
            bias_tensor=TensorDesc(t, (1, k) + (1,) * (rank - 2)),
            fused_activation=g.nodes[bn].fused_activation,
        )
        if not g.valid(desc):
            continue
        per_channel = (k,) + (1,) * (rank - 1)
        if _fold_bn(g, n, bn, desc, vectors, d.filter_tensor, per_channel, bias_vec):
            count += 1
    return count


@rewrite("MatmulBNFusion", "basic")
def matmul_bn(g: Editor) -> int:
    """GEMM with a constant B followed by BATCH_NORMALIZATION over its columns (the BN reads
    the product as ``{rows, N, 1...}``) with constant statistics: B's columns scaled, and C
    (absent, or a bias along the rows) becomes ``Beta * C * f + shift`` with Beta 1."""
    count = 0
    for n in g.live():
        d = g.nodes[n]
        if g.op(n) != "GEMM" or not d.output_tensor.data_type.is_float:
            continue
        if g.constant(g.source(n, 1)) is None:
            continue
        bn = _bn_after(g, n, exact=False)
        if bn is None:
            continue
        x = g.nodes[bn].input_tensor
        cols = d.output_tensor.sizes[-1]
        if x.rank < 2 or x.sizes[1] != cols or any(s != 1 for s in x.sizes[2:]):
            continue  # the BN's channels are not the product's columns
        vectors = [_channel_desc(g, bn, j, cols, 1) for j in (1, 2, 3, 4)]
        out = d.output_tensor
        c_vec = None
        if d.c_tensor is not None:
            c_vec = _channel_desc(g, n, 2, cols, out.rank - 1)
            if c_vec is None:
                continue
        if any(v is None for v in vectors):
            continue
        t = out.data_type
        bias = TensorDesc(t, out.sizes, strides=(0,) * (out.rank - 1) + (1,))
        desc = dataclasses.replace(
            d,
            b_tensor=TensorDesc(t, d.b_tensor.sizes),
            c_tensor=bias,
            beta=1.0,
            fused_activation=g.nodes[bn].fused_activation,
        )
        if not g.valid(desc):
            continue
        per_col = (1,) * (d.b_tensor.rank - 1) + (cols,)
        if d.trans_b.name == "TRANSPOSE":
            per_col = (1,) * (d.b_tensor.rank - 2) + (cols, 1)
        if _fold_bn(g, n, bn, desc, vectors, d.b_tensor, per_col, c_vec, d.beta):
            count += 1
    return count


# ---------------------------------------------------------------------------------------------
# Additions


def _added(g: Editor, n: int, types: tuple[str, ...]) -> tuple[int, int] | None:
    """``(add node, slot of the other operand)`` when the one reader of node ``n``'s output is
    an element-wise addition (without a fused activation) reading all of it, packed, in order
    (any sizes), and ``n`` itself is one of ``types`` without a fused activation."""
    if g.op(n) not in types or getattr(g.nodes[n], "fused_activation", None) is not None:
        return None
    user = g.reader((n, 0), "ELEMENT_WISE_ADD", "ELEMENT_WISE_ADD1")
    if user is None or getattr(g.nodes[user[0]], "fused_activation", None) is not None:
        return None
    add, slot = user
    if not g.reads_packed(add, slot) or not g.nodes[add].output_tensor.is_packed:
        return None
    if g.source(add, 0) == g.source(add, 1):
        return None  # x + x
    return add, 1 - slot


def _other_as(g: Editor, add: int, other: int, sizes) -> TensorDesc | None:
    """The desc that reads the addition's other operand, element for element, at the
    producer's output ``sizes`` (the same bytes the addition read), or None."""
    d = g.input_desc(add, other)
    strides = reshape_strides(d.sizes, d.layout_strides, sizes)
    if strides is None:
        return None
    return dataclasses.replace(d.like(sizes=tuple(sizes), strides=strides))


def _take_add(g: Editor, n: int, add: int, desc: Any, slot: int, other: int) -> None:
    g.set_node(n, desc)
    g.set_input(n, slot, g.source(add, other))
    g.reroute((add, 0), (n, 0))
    g.remove(add)


@rewrite("MatMulAddFusion", "basic")
def matmul_add(g: Editor) -> int:
    """GEMM without C followed by an addition (a bias broadcast along the rows, a residual of
    the output's shape, anything that reads as the output's sizes): the addend becomes C with
    Beta 1."""
    count = 0
    for n in g.live():
        found = _added(g, n, ("GEMM",))
        d = g.nodes[n]
        if found is None or d.c_tensor is not None:
            continue
        add, other = found
        c = _other_as(g, add, other, d.output_tensor.sizes)
        if c is None or c.data_type != d.output_tensor.data_type:
            continue
        desc = dataclasses.replace(d, c_tensor=c, beta=1.0)
        if g.valid(desc):
            _take_add(g, n, add, desc, 2, other)
            count += 1
    return count


@rewrite("ConvAddFusion", "basic")
def conv_add(g: Editor) -> int:
    """CONVOLUTION without bias followed by the addition of a per-output-channel tensor: the
    addend becomes the bias."""
    count = 0
    for n in g.live():
        found = _added(g, n, ("CONVOLUTION",))
        d = g.nodes[n]
        if found is None or d.bias_tensor is not None:
            continue
        add, other = found
        out = d.output_tensor
        c = _other_as(g, add, other, out.sizes)
        if c is None or c.data_type != out.data_type:
            continue
        k = out.sizes[1]
        strides = c.layout_strides
        if any(s != 0 for i, s in enumerate(strides) if i != 1 and out.sizes[i] != 1):
            continue
        bias = TensorDesc(out.data_type, (1, k) + (1,) * (out.rank - 2),
                          strides=(0, strides[1]) + (0,) * (out.rank - 2))  # fmt: skip
        desc = dataclasses.replace(d, bias_tensor=bias)
        if g.valid(desc):
            _take_add(g, n, add, desc, 2, other)
            count += 1
    return count


# ---------------------------------------------------------------------------------------------
# Activations


# The operators whose FusedActivation the DirectML provider fills (its fusable-operator list),
# and the activations an addition takes (Relu and LeakyRelu only, as the provider fuses Add).
_FUSING = (
    "GEMM",
    "CONVOLUTION",
    "BATCH_NORMALIZATION",
    "MEAN_VARIANCE_NORMALIZATION",
    "MEAN_VARIANCE_NORMALIZATION1",
    "MEAN_VARIANCE_NORMALIZATION2",
    "ELEMENT_WISE_ADD",
    "ELEMENT_WISE_ADD1",
)
_ADD_ACTIVATIONS = ("ACTIVATION_RELU", "ACTIVATION_LEAKY_RELU")


def _without_tensors(activation: Any) -> Any:
    """The activation in the form of a FusedActivation (its tensor members null)."""
    tensors = [f.name for f in dataclasses.fields(activation)
               if isinstance(getattr(activation, f.name), TensorDesc)]  # fmt: skip
    return dataclasses.replace(activation, **dict.fromkeys(tensors))


@rewrite("DmlOperatorFusionTransformer", "extended", order=1)
def fused_activation(g: Editor) -> int:
    """An activation DirectML can fuse that alone reads the whole output of GEMM, CONVOLUTION,
    a normalization or an addition (Relu / LeakyRelu only): moved into its FusedActivation
    (an ELEMENT_WISE_ADD becomes ELEMENT_WISE_ADD1)."""
    from ...fused import fusable_names

    fusable = set(fusable_names())
    count = 0
    for n in g.live():
        kind = g.op(n)
        if kind not in _FUSING:
            continue
        d = g.nodes[n]
        if getattr(d, "fused_activation", None) is not None:
            continue
        user = g.reader((n, 0))
        if user is None or user[1] != 0 or not g.reads_packed(*user):
            continue
        act = g.nodes[user[0]]
        name = act.operator_type
        if name not in fusable or (
            kind.startswith("ELEMENT_WISE_ADD")
            and name.removeprefix("DML_OPERATOR_") not in _ADD_ACTIVATIONS
        ):
            continue  # fmt: skip
        if not act.edge_slots("output")[0][1].is_packed or len(act.edge_slots("input")) != 1:
            continue
        fused = _without_tensors(act)
        if kind == "ELEMENT_WISE_ADD":
            desc = op_class("ELEMENT_WISE_ADD1")(d.a_tensor, d.b_tensor, d.output_tensor, fused)
        else:
            desc = dataclasses.replace(d, fused_activation=fused)
        if not g.valid(desc):
            continue
        g.set_node(n, desc)
        g.reroute((user[0], 0), (n, 0))
        g.remove(user[0])
        count += 1
    return count
