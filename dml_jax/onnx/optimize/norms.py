"""Normalizations that exporters spell out in reductions and element-wise operators, as one
DML normalization: layer normalization (onnxruntime's LayerNormFusion) as
MEAN_VARIANCE_NORMALIZATION1 (the operator the DirectML provider runs LayerNormalization on),
RMS normalization (SimplifiedLayerNormFusion) as MEAN_VARIANCE_NORMALIZATION2 with UseMean off
(the provider's SimplifiedLayerNormalization; feature level 6_3, so only where the session's
level allows it).

The spellings matched, over the same reduced axes ``A`` (REDUCE AVERAGE, dimensions kept):

- layer norm: ``d = x - mean_A(x)``; ``v = mean_A(d^2)`` (Pow 2 or ``d * d``);
  ``n = d / sqrt(v + eps)`` (or ``d`` times ``1 / sqrt(v + eps)``, Reciprocal or Div); then optionally ``n * gamma``
  and ``+ beta``, in either operand order;
- RMS norm: the same without the mean: ``x / sqrt(mean_A(x^2) + eps)`` (or times the
  reciprocal), optionally ``* gamma``.

Epsilon must be added to the mean of squares inside the square root (where the operators
add it); a model that adds it elsewhere (``sqrt(v) + eps``) is left as it is. It becomes the
operator's Epsilon attribute, so it must be a constant that is not a parameter; gamma and beta
stay graph values (the operator's Scale and Bias tensors read them), parameters or not.
"""

from __future__ import annotations

from ...tensor import TensorDesc
from . import Editor, Source, op_class, rewrite


def _single(g: Editor, src: Source, *types: str) -> tuple[int, int] | None:
    user = g.reader(src, *types)
    if user is None or getattr(g.nodes[user[0]], "fused_activation", None) is not None:
        return None
    return user


def _broadcasts(g: Editor, n: int, slot: int) -> bool:
    """Input ``slot`` of node ``n`` reads its source (a reduction's result, reduced axes of
    size 1) broadcast: the source's packed strides, 0 along its size-1 dimensions."""
    src = g.source(n, slot)
    if src is None or src[0] < 0:
        return False
    mine, theirs = g.input_desc(n, slot), g.output_desc(src)
    if mine.rank != theirs.rank or not theirs.is_packed:
        return False
    for size, have, stride, packed in zip(mine.sizes, theirs.sizes, mine.layout_strides,
                                          theirs.layout_strides):  # fmt: skip
        if have == 1:
            if size != 1 and stride != 0:
                return False
        elif size != have or stride != packed:
            return False
    return True


def _reduce_mean(g: Editor, n: int) -> tuple[int, ...] | None:
    """The axes of a REDUCE AVERAGE node that reads its input packed and keeps its rank."""
    d = g.nodes[n]
    if g.op(n) != "REDUCE" or d.function.name != "AVERAGE" or not g.reads_packed(n, 0):
        return None
    if d.input_tensor.rank != d.output_tensor.rank:
        return None
    return tuple(sorted(d.axes))


def _square_of(g: Editor, n: int) -> Source | None:
    """``u`` when node ``n`` computes ``u ** 2`` (CONSTANT_POW 2, POW by a constant 2, or
    ``u * u``), reading ``u`` packed at its sizes."""
    kind, d = g.op(n), g.nodes[n]
    if kind in ("ELEMENT_WISE_CONSTANT_POW", "ELEMENT_WISE_POW") and d.scale_bias is not None:
        return None
    if kind == "ELEMENT_WISE_CONSTANT_POW" and d.exponent == 2.0:
        return g.source(n, 0) if g.reads_packed(n, 0) else None
    if kind == "ELEMENT_WISE_POW" and g.is_scalar(g.source(n, 1), 2.0):
        return g.source(n, 0) if g.reads_packed(n, 0) else None
    if kind == "ELEMENT_WISE_MULTIPLY" and g.source(n, 0) == g.source(n, 1):
        return g.source(n, 0) if g.reads_packed(n, 0) and g.reads_packed(n, 1) else None
    return None


def _normalized(g: Editor, r: int):
    """From a REDUCE AVERAGE node ``r`` of squares: ``(u, eps, axes, n, removed)`` when the
    graph computes ``n = u / sqrt(r + eps)`` (``r`` the mean of ``u ** 2`` over ``axes``),
    ``removed`` the nodes between; else None."""
    axes = _reduce_mean(g, r)
    if axes is None:
        return None
    sq = g.source(r, 0)
    if sq[0] < 0 or g.only_user(sq) is None:
        return None
    u = _square_of(g, sq[0])
    if u is None:
        return None
    add = _single(g, (r, 0), "ELEMENT_WISE_ADD", "ELEMENT_WISE_ADD1")
    if add is None or not g.reads_as_written(*add):
        return None
    eps = g.scalar(g.source(add[0], 1 - add[1]))
    if eps is None:
        return None
    root = _single(g, (add[0], 0), "ELEMENT_WISE_SQRT")
    if root is None or g.nodes[root[0]].scale_bias is not None or not g.reads_as_written(*root):
        return None
    removed = [sq[0], r, add[0], root[0]]
    user = g.reader((root[0], 0))
    if user is None:
        return None
    y, slot = user
    one_over = g.op(y) == "ELEMENT_WISE_DIVIDE" and slot == 1 and g.is_scalar(g.source(y, 0), 1.0)
    if (g.op(y) == "ELEMENT_WISE_RECIP" and g.nodes[y].scale_bias is None) or one_over:
        removed.append(y)
        user = g.reader((y, 0), "ELEMENT_WISE_MULTIPLY")
        if user is None:
            return None
        y, slot = user
    elif g.op(y) != "ELEMENT_WISE_DIVIDE" or slot != 1:
        return None
    if not _broadcasts(g, y, slot):
        return None
    if g.source(y, 1 - slot) != u or not g.reads_packed(y, 1 - slot):
        return None
    if g.nodes[r].input_tensor.sizes != g.nodes[y].output_tensor.sizes:
        return None  # the axes are of other sizes than the result's
    return u, eps, axes, y, removed


def _affine(g: Editor, n: int, kind: str) -> tuple[int, int] | None:
    """``(node, slot of the operand)`` when node ``n``'s one reader is a multiplication (or
    addition, ``kind``) of all of it by another tensor of its sizes (broadcast or not)."""
    user = _single(g, (n, 0), kind)
    if user is None or not g.reads_as_written(*user):
        return None
    y, slot = user
    if g.source(y, 0) == g.source(y, 1):
        return None
    return y, 1 - slot


@rewrite("LayerNormFusion", "basic")
def layer_norm(g: Editor) -> int:
    """Layer normalization in reductions and element-wise operators:
    MEAN_VARIANCE_NORMALIZATION1 (module docstring)."""
    return _fuse(g, rms=False)


@rewrite("SimplifiedLayerNormFusion", "extended")
def rms_norm(g: Editor) -> int:
    """RMS normalization in reductions and element-wise operators:
    MEAN_VARIANCE_NORMALIZATION2 with UseMean off (module docstring)."""
    return _fuse(g, rms=True)


def _fuse(g: Editor, rms: bool) -> int:
    count = 0
    for r in g.live():
        if g.nodes[r] is None or g.op(r) != "REDUCE":
            continue
        found = _normalized(g, r)
        if found is None:
            continue
        u, eps, axes, n, removed = found
        x = u
        if not rms:
            # u = x - mean(x) over the same axes, u read only by the square and the division
            sub = u[0]
            if (
                g.op(sub) != "ELEMENT_WISE_SUBTRACT"
                or len(g.users(u)) != (3 if g.op(removed[0]) == "ELEMENT_WISE_MULTIPLY" else 2)
                or g.is_output(u)
            ):
                continue
            mean = g.source(sub, 1)
            if mean[0] < 0 or g.only_user(mean) is None or _reduce_mean(g, mean[0]) != axes:
                continue
            if not _broadcasts(g, sub, 1):
                continue
            x = g.source(sub, 0)
            if g.source(mean[0], 0) != x or not g.reads_packed(sub, 0):
                continue
            if g.nodes[mean[0]].input_tensor.sizes != g.nodes[r].input_tensor.sizes:
                continue  # the mean over other sizes (other axes) than the variance's
            removed += [sub, mean[0]]
        out = g.nodes[n].output_tensor
        end, scale, bias = n, None, None
        found = _affine(g, end, "ELEMENT_WISE_MULTIPLY")
        if found is not None:
            scale = found
            end = found[0]
            if not rms:
                found = _affine(g, end, "ELEMENT_WISE_ADD")
                if found is not None:
                    bias = found
                    end = found[0]
        t = TensorDesc(out.data_type, out.sizes)
        tensors = {
            "input_tensor": t,
            "scale_tensor": None if scale is None else g.input_desc(*scale),
            "bias_tensor": None if bias is None else g.input_desc(*bias),
            "output_tensor": t,
            "axes": axes,
            "epsilon": eps,
        }
        if rms:
            desc = op_class("MEAN_VARIANCE_NORMALIZATION2")(
                **tensors, use_mean=False, use_variance=True
            )
        else:
            desc = op_class("MEAN_VARIANCE_NORMALIZATION1")(**tensors, normalize_variance=True)
        if not g.valid(desc):
            continue
        inputs = [x, None if scale is None else g.source(*scale),
                  None if bias is None else g.source(*bias)]  # fmt: skip
        new = g.add(desc, inputs, g.origin[end])
        g.reroute((end, 0), (new, 0))
        middle = [n] + [a[0] for a in (scale, bias) if a is not None]
        g.remove(*removed, *middle)
        count += 1
    return count
