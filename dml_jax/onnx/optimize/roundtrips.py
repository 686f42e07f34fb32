"""Quantize round trips: an 8-bit value dequantized, passed through a ReLU or nothing, and
quantized again with the same scale and zero point (the ``extended`` level).

A QDQ model quantizes every activation it hands on: where a ReLU stands on its own (after a
residual addition, say), the exporter writes QuantizeLinear -> DequantizeLinear -> Relu ->
QuantizeLinear, and onnxruntime's quantizer gives the two quantizers the same scale and zero
point where the ranges it calibrated agree (symmetric activations whose largest magnitude is
positive: every residual addition of a QDQ ResNet-50). The second quantizer then gives back
what the first wrote, ReLU'd:

    quantize(relu(dequantize(q, s, z)), s, z) = max(q, z)      (and without the ReLU, q)

wherever the scale ``s`` is a positive float32 in [2^-100, 2^100]: ``(q - z) * s`` is within
255 ulps' worth of a product whose quotient by ``s`` is ``q - z``, rounded once each way, so
the quotient lies within 2^-15 of the integer and rounds to it; ReLU keeps the positive
products, which are those with ``q > z``, and gives 0, ``z``'s value, for the rest. On an H200
the residual additions of a static QDQ ResNet-50 (two quantizers an element, instruction-bound)
took about a third less time with one (benchmarks/experiments/README.md,
``int8_tables_gpu.py``).

``QuantizeRoundTrips`` writes ``IF(ok, CLIP(q, z, max), quantize(...))`` (``IF(ok, q, ...)``
without the ReLU): the quantizer stays as the other branch, and ``ok`` (an UINT8 value) says
at run time whether the scales are equal and in that range, so the graph gives the same values whatever the scales hold, a parameter
replaced through ``apply`` included. Where the scales are compiled in (``run``: small
parameters, ``program.RUN_BAKED_PARAM_MAX_BYTES``) XLA folds ``ok`` and drops the quantizer.
Zero points must be constants of equal value (integer initializers are no parameters).
"""

from __future__ import annotations

import numpy as np

from ...enums import DataType
from ...tensor import TensorDesc
from . import GRAPH_INPUT, Editor, op_class, rewrite

_RANGE = (2.0**-100, 2.0**100)  # the scales the identity above is proved for (inclusive)
_TYPES = ("INT8", "UINT8")


def _one_value(g: Editor, src) -> float | None:
    """The single float32 value ``src`` holds now (a constant, parameter or not), else None."""
    value = None if src is None else g.constant(src)
    if value is None or value.dtype != np.float32 or np.unique(value).size != 1:
        return None
    return float(value.reshape(-1)[0])


def _zero(g: Editor, src, desc) -> int | None:
    """A zero point's value: 0 where absent; a non-parameter constant's one value; else None."""
    if src is None:
        return 0 if desc is None else None
    value = g.scalar(src)
    return None if value is None else int(value)


def _broadcast_one(desc: TensorDesc, sizes: tuple) -> TensorDesc:
    return TensorDesc(desc.data_type, tuple(sizes), strides=(0,) * len(sizes))


@rewrite("QuantizeRoundTrips", "extended")
def quantize_round_trips(g: Editor) -> int:
    """DEQUANTIZE_LINEAR of an 8-bit value -> [ACTIVATION_RELU] -> QUANTIZE_LINEAR back to its
    type with scales and zero points of equal value: the value itself (ReLU'd: CLIP from the
    zero point), behind an IF on the scales."""
    clip_class = op_class("ELEMENT_WISE_CLIP")
    equals_class = op_class("ELEMENT_WISE_LOGICAL_EQUALS")
    and_class = op_class("ELEMENT_WISE_LOGICAL_AND")
    if_class = op_class("ELEMENT_WISE_IF")
    count = 0
    for n in g.live():
        if g.op(n) != "ELEMENT_WISE_DEQUANTIZE_LINEAR":
            continue
        deq = g.nodes[n]
        x, mid = deq.input_tensor, deq.output_tensor
        if x.data_type.name not in _TYPES or mid.data_type.name != "FLOAT32" or not mid.is_packed:
            continue
        at, relu = (n, 0), False
        user = g.reader(at, "ACTIVATION_RELU")
        if user is not None and g.reads_as_written(*user):
            relu, at = True, (user[0], 0)
        user = g.reader(at, "ELEMENT_WISE_QUANTIZE_LINEAR")
        if user is None or user[1] != 0 or not g.reads_as_written(*user):
            continue
        q = user[0]
        quant = g.nodes[q]
        out = quant.output_tensor
        if out.data_type != x.data_type or out.sizes != mid.sizes or not out.is_packed:
            continue
        scale_src, quant_scale_src = g.source(n, 1), g.source(q, 1)
        s1, s2 = _one_value(g, scale_src), _one_value(g, quant_scale_src)
        z1 = _zero(g, g.source(n, 2), deq.zero_point_tensor)
        z2 = _zero(g, g.source(q, 2), quant.zero_point_tensor)
        if s1 is None or s2 is None or z1 is None or z1 != z2:
            continue
        if not (s1 == s2 and _RANGE[0] <= s1 <= _RANGE[1]):
            continue  # never taken with these values: no rewrite
        if scale_src[0] == GRAPH_INPUT or quant_scale_src[0] == GRAPH_INPUT:
            continue
        value = TensorDesc(x.data_type, mid.sizes)
        # the value itself (as the DEQUANTIZE reads it), from the zero point up with the ReLU
        kept = (
            clip_class(x, value, float(z1), float(x.data_type.integer_range[1])) if relu else None
        )
        one = TensorDesc(DataType.FLOAT32, g.output_desc(scale_src).sizes)
        other = TensorDesc(DataType.FLOAT32, g.output_desc(quant_scale_src).sizes)
        if one.element_count != 1 or other.element_count != 1:
            continue
        flag = TensorDesc(DataType.UINT8, one.sizes)
        clipped = clip_class(one, one, *_RANGE)
        in_range = equals_class(one, one, flag)  # clip(s) == s: false for NaN too
        same_scale = equals_class(one, other.like(sizes=one.sizes), flag)
        both = and_class(flag, flag, flag)
        choice = if_class(_broadcast_one(flag, mid.sizes), value if relu else x, value, value)
        descs = (kept, clipped, in_range, same_scale, both, choice)
        if not all(g.valid(d) for d in descs if d is not None):
            continue
        origin = g.origin[q]
        ranged = g.add(clipped, [scale_src], origin)
        ok = g.add(in_range, [(ranged, 0), scale_src], origin)
        same = g.add(same_scale, [scale_src, quant_scale_src], origin)
        ok = g.add(both, [(ok, 0), (same, 0)], origin)
        fast = (g.add(kept, [g.source(n, 0)], origin), 0) if relu else g.source(n, 0)
        chosen = g.add(choice, [(ok, 0), fast, (q, 0)], origin)
        g.reroute((q, 0), (chosen, 0))
        g.set_input(chosen, 2, (q, 0))  # the reroute moved the IF's own read of it too
        count += 1
    return count
