"""Activations that exporters spell out in element-wise operators, as one DML activation:
GELU's erf form (onnxruntime's GeluFusion) as ACTIVATION_GELU, ``x * sigmoid(a * x)``
(QuickGeluFusion, which also takes SiLU's ``x * sigmoid(x)``) as ACTIVATION_SWISH.

GELU's tanh form (``0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))``, onnxruntime's
FastGeluFusion) is left as it is: DirectML's only GELU is the erf form, and the two differ by
up to 4.7e-4 absolute (near x = 2.7), beyond float32 rounding.

The constants of a pattern (0.5, 1, sqrt 2, the sigmoid's scale) become the activation's
formula or attributes, so they must be constants that are not parameters (``Editor.scalar``):
a pattern whose constant is an initializer that ``apply(params)`` may replace is left as it is.
"""

from __future__ import annotations

import math

from ...tensor import TensorDesc
from . import Editor, Source, op_class, rewrite


def _mul_operands(g: Editor, n: int) -> tuple[Source, Source] | None:
    if g.op(n) != "ELEMENT_WISE_MULTIPLY":
        return None
    return g.source(n, 0), g.source(n, 1)


def _same_sizes(g: Editor, n: int, slot: int) -> bool:
    """Input ``slot`` of node ``n`` reads all of its source, packed, at the node's output
    sizes (the source may have been written under other sizes: a reshape)."""
    return g.reads_packed(n, slot) and (
        g.input_desc(n, slot).sizes == g.nodes[n].output_tensor.sizes
    )


def _times_scalar(g: Editor, n: int, value: float) -> Source | None:
    """``x`` when node ``n`` is ``x * value`` (either order; ``value`` a constant scalar, ``x``
    read as written), else None."""
    ops = _mul_operands(g, n)
    if ops is None:
        return None
    for k in (0, 1):
        if g.is_scalar(ops[1 - k], value) and _same_sizes(g, n, k):
            return ops[k]
    return None


def _gelu_input(g: Editor, erf: int) -> Source | None:
    """``x`` when ERF node ``erf`` computes ``erf(x / sqrt 2)`` (or ``erf(x * (1/sqrt 2))``)
    and its argument node has no other reader."""
    d = g.nodes[erf]
    if d.scale_bias is not None or not _same_sizes(g, erf, 0):
        return None
    arg = g.source(erf, 0)
    if g.only_user(arg) is None:
        return None
    n = arg[0]
    if g.op(n) == "ELEMENT_WISE_DIVIDE":
        if g.is_scalar(g.source(n, 1), math.sqrt(2)) and _same_sizes(g, n, 0):
            return g.source(n, 0)
        return None
    return _times_scalar(g, n, 1 / math.sqrt(2))


def _plus_one(g: Editor, erf: int) -> int | None:
    """The addition node computing ``1 + erf(...)``, the erf's only reader."""
    user = g.reader((erf, 0), "ELEMENT_WISE_ADD", "ELEMENT_WISE_ADD1")
    if user is None or getattr(g.nodes[user[0]], "fused_activation", None) is not None:
        return None
    add, slot = user
    if not _same_sizes(g, add, slot) or not g.is_scalar(g.source(add, 1 - slot), 1.0):
        return None
    return add


def _gelu_product(g: Editor, x: Source, a: int) -> tuple[int, list[int]] | None:
    """The node computing ``x * 0.5 * a`` from ``a`` (the ``1 + erf`` node) in any grouping
    and order, and the intermediate products it removes; None if there is none."""
    user = g.reader((a, 0), "ELEMENT_WISE_MULTIPLY")
    if user is None or not _same_sizes(g, *user):
        return None
    m1, slot = user
    other = g.source(m1, 1 - slot)
    # (x * a) * 0.5, or x * 0.5 read by m1: (x * 0.5) * a
    if other == x and _same_sizes(g, m1, 1 - slot):
        nxt = g.reader((m1, 0), "ELEMENT_WISE_MULTIPLY")
        if nxt is not None and _times_scalar(g, nxt[0], 0.5) == (m1, 0):
            return nxt[0], [m1]
        return None
    if other[0] >= 0 and g.only_user(other) is not None and _times_scalar(g, other[0], 0.5) == x:
        return m1, [other[0]]
    # x * (a * 0.5)
    if g.is_scalar(other, 0.5):
        nxt = g.reader((m1, 0), "ELEMENT_WISE_MULTIPLY")
        if nxt is not None and _same_sizes(g, *nxt):
            y, k = nxt
            if g.source(y, 1 - k) == x and _same_sizes(g, y, 1 - k):
                return y, [m1]
    return None


@rewrite("GeluFusion", "basic")
def gelu(g: Editor) -> int:
    """``x * 0.5 * (1 + erf(x / sqrt 2))`` in any operand order and grouping: ACTIVATION_GELU."""
    count = 0
    gelu_desc = op_class("ACTIVATION_GELU")
    for erf in g.live():
        if g.op(erf) != "ELEMENT_WISE_ERF" or g.nodes[erf] is None:
            continue
        x = _gelu_input(g, erf)
        if x is None:
            continue
        a = _plus_one(g, erf)
        if a is None:
            continue
        found = _gelu_product(g, x, a)
        if found is None:
            continue
        y, middle = found
        out = g.nodes[y].output_tensor
        desc = gelu_desc(TensorDesc(out.data_type, out.sizes), TensorDesc(out.data_type, out.sizes))
        if not g.valid(desc):
            continue
        new = g.add(desc, [x], g.origin[y])
        g.reroute((y, 0), (new, 0))
        g.remove(y, *middle, a, erf, g.source(erf, 0)[0])
        count += 1
    return count


@rewrite("QuickGeluFusion", "extended")
def swish(g: Editor) -> int:
    """``x * sigmoid(a * x)`` (``a`` a constant scalar, 1 when absent: SiLU) in any operand
    order: ACTIVATION_SWISH with SigmoidInputScale ``a``."""
    count = 0
    swish_desc = op_class("ACTIVATION_SWISH")
    for s in g.live():
        if g.op(s) != "ACTIVATION_SIGMOID" or g.nodes[s] is None:
            continue
        if not _same_sizes(g, s, 0):
            continue
        user = g.reader((s, 0), "ELEMENT_WISE_MULTIPLY")
        if user is None or not _same_sizes(g, *user):
            continue
        y, slot = user
        x = g.source(y, 1 - slot)
        if not _same_sizes(g, y, 1 - slot):
            continue
        arg, scale, middle = g.source(s, 0), 1.0, []
        if arg != x:
            n = arg[0]
            if n < 0 or g.only_user(arg) is None or g.op(n) != "ELEMENT_WISE_MULTIPLY":
                continue
            ops = (g.source(n, 0), g.source(n, 1))
            k = 0 if ops[0] == x else 1 if ops[1] == x else None
            if k is None or not _same_sizes(g, n, k):
                continue
            scale = g.scalar(ops[1 - k])
            if scale is None:
                continue
            middle = [n]
        out = g.nodes[y].output_tensor
        t = TensorDesc(out.data_type, out.sizes)
        desc = swish_desc(t, t, sigmoid_input_scale=scale)
        if not g.valid(desc):
            continue
        new = g.add(desc, [x], g.origin[y])
        g.reroute((y, 0), (new, 0))
        g.remove(y, s, *middle)
        count += 1
    return count
