"""Matrix multiplication and convolution, as ONNX Runtime's DirectML provider maps them: Gemm,
MatMul and Einsum's contractions onto GEMM, Conv onto CONVOLUTION (FORWARD), ConvTranspose onto
CONVOLUTION (BACKWARD).

- Gemm: GEMM on ``{1, 1, M, N}`` tensors; C (any shape that broadcasts to ``{M, N}``) is read at
  the output's sizes with stride 0 where it repeats.
- MatMul: a 1-D operand becomes ``{1, K}`` / ``{K, 1}``; the batch dimensions broadcast (numpy's
  rules, right-aligned) through stride-0 strides. One GEMM takes two batch dimensions, so more
  are folded where the strides allow; an operand whose broadcast blocks the fold is first
  expanded by an ELEMENT_WISE_IDENTITY that reads it with stride 0. One B for every batch (a
  linear layer) is a single 2-D GEMM over A's rows of all batches.
- Einsum: repeated labels of one operand (diagonals) are strides, transposes are
  ELEMENT_WISE_IDENTITY reading permuted strides, a label only one operand has is summed by
  REDUCE, and each pair of operands is contracted by GEMM (the shared labels folded into K,
  the batch labels into one batch dimension), by ELEMENT_WISE_MULTIPLY when nothing is summed,
  or by MULTIPLY + REDUCE for the types GEMM does not take.
- Conv / ConvTranspose: 1-D becomes 2-D with a height of 1 (as the provider does); auto_pad
  becomes explicit pads by ONNX's formulas; ConvTranspose's output_shape becomes pads, and where
  ONNX's pads come out negative (an output longer than the full result) the extra positions are
  OutputPadding when DirectML allows it, else a PADDING node with the bias added after it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ...tensor import TensorDesc, packed_strides
from ..importer import Value, broadcast, dml_sizes, packed
from . import converter
from ._common import DataType, broadcast_shape, matmul_operands, op, pads_of, spatial_out, view

_GEMM_TYPES = (DataType.FLOAT32, DataType.FLOAT16)


def strided_desc(data_type: DataType, sizes: Sequence[int], strides: Sequence[int]) -> TensorDesc:
    """A desc of ``sizes`` reading with ``strides`` (no Strides when they are packed)."""
    sizes, strides = tuple(sizes), tuple(strides)
    if not sizes:
        sizes, strides = (1,), (1,)
    if strides == packed_strides(sizes):
        return TensorDesc(data_type, sizes)
    return TensorDesc(data_type, sizes, strides=strides)


# ---------------------------------------------------------------------------------------------
# Gemm, MatMul


@converter("Gemm")
def _gemm(ctx, node, inputs):
    a, b, c = (list(inputs) + [None])[:3]
    ta, tb = int(ctx.attr("transA", 0)), int(ctx.attr("transB", 0))
    if a.rank != 2 or b.rank != 2:
        raise ctx.fail(f"A and B must be 2-D, got shapes {list(a.shape)} and {list(b.shape)}")
    m, ka = (a.shape[1], a.shape[0]) if ta else a.shape
    kb, n = (b.shape[1], b.shape[0]) if tb else b.shape
    if ka != kb:
        raise ctx.fail(f"inner dimensions differ: A {list(a.shape)}, B {list(b.shape)}")
    if c is not None and broadcast_shape(ctx, c.shape, (m, n)) != (m, n):
        raise ctx.fail(f"C of shape {list(c.shape)} does not broadcast to [{m}, {n}]")
    out = (1, 1, m, n)
    t = a.data_type
    desc = op("GEMM")(
        packed(t, a.shape, 4),
        packed(t, b.shape, 4),
        None if c is None else broadcast(c, out),
        TensorDesc(t, out),
        trans_a="TRANSPOSE" if ta else "NONE",
        trans_b="TRANSPOSE" if tb else "NONE",
        alpha=float(ctx.attr("alpha", 1.0)),
        beta=float(ctx.attr("beta", 1.0)) if c is not None else 0.0,
    )
    return [ctx.out(ctx.node(desc, [a, b, c]), (m, n))]


def _batch_strides(v: Value, batch: Sequence[int]) -> list[int]:
    """The strides that read ``v``'s packed batch dimensions broadcast to ``batch`` (0 where
    ``v`` repeats)."""
    lead = len(batch) - (v.rank - 2)
    own = (1,) * lead + tuple(v.shape[:-2])
    strides = (0,) * lead + packed_strides(v.shape)[:-2]
    return [0 if o == 1 and d != 1 else s for o, d, s in zip(own, batch, strides)]


def fold_batch(
    batch: Sequence[int], *strides: list[int], keep_at_most: int = 0
) -> tuple[list[int], list[list[int]]]:
    """Batch dimensions merged where every operand's strides allow (dimension ``i`` and
    ``i + 1`` merge when ``stride[i] == stride[i + 1] * size[i + 1]`` for all); ones dropped.
    With ``keep_at_most`` n, merging stops once n dimensions or fewer are left."""
    keep = [i for i, d in enumerate(batch) if d != 1]
    sizes = [batch[i] for i in keep]
    folded = [[s[i] for i in keep] for s in strides]
    i = len(sizes) - 2
    while i >= 0 and len(sizes) > keep_at_most:
        if all(f[i] == f[i + 1] * sizes[i + 1] for f in folded):
            sizes[i] *= sizes.pop(i + 1)
            for f in folded:
                f[i] = f.pop(i + 1)
        i -= 1
    return sizes, folded


def _expand(ctx, v: Value, shape: Sequence[int]) -> Value:
    """``v`` broadcast to ``shape`` and written packed (an identity reading stride 0)."""
    desc = op("ELEMENT_WISE_IDENTITY")(broadcast(v, shape), packed(v.data_type, shape))
    return ctx.out(ctx.node(desc, [v]), shape)


def _batched_gemm(ctx, a: Value, b: Value, batch: Sequence[int]) -> Value:
    """GEMM of ``a`` {..., M, K} by ``b`` {..., K, N}, their batch dimensions broadcast to
    ``batch``: the packed result ``batch + (M, N)``."""
    m, k = a.shape[-2:]
    n = b.shape[-1]
    if batch and tuple(a.shape[:-2]) == tuple(batch) and not any(_batch_strides(b, batch)):
        # One matrix B for every batch (a linear layer): A's rows of all batches are one
        # {batch * M, K} matrix, and the result's packed layout is the same.
        rows = a.view((math.prod(batch) * m, k))
        y = _batched_gemm(ctx, rows, b.view((k, n)), ())
        return view(y, tuple(batch) + (m, n))
    # GEMM takes two batch dimensions: (batch, heads) stay apart, so that a mesh can split
    # each of them (data and tensor parallelism) without regrouping the merged dimension.
    sizes, (sa, sb) = fold_batch(
        batch, _batch_strides(a, batch), _batch_strides(b, batch), keep_at_most=2
    )
    if len(sizes) > 2:
        # Broadcasting that one GEMM's two batch dimensions cannot express: expand the operand
        # that repeats (both when one is not enough).
        for which in ("a", "b"):
            v = a if which == "a" else b
            if any(s == 0 and d != 1 for s, d in zip(_batch_strides(v, batch), batch)):
                v = _expand(ctx, v, tuple(batch) + v.shape[-2:])
                a, b = (v, b) if which == "a" else (a, v)
                sizes, (sa, sb) = fold_batch(
                    batch, _batch_strides(a, batch), _batch_strides(b, batch), keep_at_most=2
                )
                if len(sizes) <= 2:
                    break
    pad = 2 - len(sizes)
    lead = [1] * pad + sizes
    a_strides = [0] * pad + sa + [k, 1]
    b_strides = [0] * pad + sb + [n, 1]
    t = a.data_type
    desc = op("GEMM")(
        strided_desc(t, lead + [m, k], a_strides),
        strided_desc(t, lead + [k, n], b_strides),
        None,
        TensorDesc(t, tuple(lead) + (m, n)),
    )
    return ctx.out(ctx.node(desc, [a, b, None]), tuple(batch) + (m, n))


@converter("MatMul")
def _matmul(ctx, node, inputs):
    a2, b2, _, _, _, batch, result = matmul_operands(ctx, *inputs)
    return [view(_batched_gemm(ctx, a2, b2, batch), result)]


# ---------------------------------------------------------------------------------------------
# Einsum


@dataclass(frozen=True)
class _Term:
    """An einsum operand: ``value``'s packed data read with ``strides`` as a tensor of
    ``sizes``, one label per dimension (a letter, or ``("...", i)`` for ellipsis dimension i)."""

    value: Value
    labels: tuple
    sizes: tuple[int, ...]
    strides: tuple[int, ...]

    @classmethod
    def of(cls, value: Value, labels: Sequence) -> _Term:
        return cls(value, tuple(labels), tuple(value.shape), packed_strides(value.shape))

    def read(self, order: Sequence, sizes: dict) -> TensorDesc:
        """The desc that reads this term in label ``order`` at the global ``sizes`` (stride 0
        for a label it lacks or holds once)."""
        strides = []
        for label in order:
            if label in self.labels:
                i = self.labels.index(label)
                strides.append(0 if self.sizes[i] != sizes[label] else self.strides[i])
            else:
                strides.append(0)
        return strided_desc(self.value.data_type, [sizes[x] for x in order], strides)

    def is_packed(self, order: Sequence, sizes: dict) -> bool:
        """Whether reading in ``order`` is the packed data itself (no copy needed)."""
        if tuple(order) != self.labels or any(
            d != sizes[x] for x, d in zip(self.labels, self.sizes)
        ):
            return False
        return self.strides == packed_strides(self.sizes)


def _parse_einsum(ctx, equation: str, ranks: Sequence[int]) -> tuple[list[list], list]:
    """Each operand's labels and the output's, ellipses expanded (right-aligned, numpy's
    broadcasting) and the implicit output (no ``->``) made explicit."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ctx.fail(f"equation '{equation}' has {len(terms)} operands, the node {len(ranks)}")
    widths = []
    for term, rank in zip(terms, ranks):
        letters = term.replace("...", "", 1)
        if not all(c.isalpha() for c in letters):
            raise ctx.fail(f"equation '{equation}': term '{term}' is not letters and one '...'")
        width = rank - len(letters) if "..." in term else 0
        if width < 0 or ("..." not in term and len(letters) != rank):
            raise ctx.fail(f"equation '{equation}': term '{term}' does not fit rank {rank}")
        widths.append(width)
    ellipsis = max(widths, default=0)

    def labels_of(term: str, width: int) -> list:
        head, dots, tail = term.partition("...")
        dims = [("...", ellipsis - width + i) for i in range(width)] if dots else []
        return list(head) + dims + list(tail)

    operands = [labels_of(t, w) for t, w in zip(terms, widths)]
    if arrow:
        letters = rhs.replace("...", "", 1)
        if not all(c.isalpha() for c in letters) or len(set(letters)) != len(letters):
            raise ctx.fail(f"equation '{equation}': output '{rhs}' is not distinct letters")
        if any(c not in lhs for c in letters):
            raise ctx.fail(f"equation '{equation}': an output label is in no operand")
        if ellipsis and "..." not in rhs:
            raise ctx.fail(f"equation '{equation}': the output drops the ellipsis dimensions")
        output = labels_of(rhs, ellipsis)
    else:
        once = sorted(c for c in set(lhs) if c.isalpha() and lhs.count(c) == 1)
        output = [("...", i) for i in range(ellipsis)] + once
    return operands, output


def _einsum_sizes(ctx, inputs, operands) -> dict:
    sizes: dict = {}
    for v, labels in zip(inputs, operands):
        for label, d in zip(labels, v.shape):
            have = sizes.get(label, 1)
            if have != d and 1 not in (have, d):
                raise ctx.fail(f"label {label!r} has sizes {have} and {d}")
            sizes[label] = max(have, d)
    return sizes


def _diagonal(ctx, term: _Term) -> _Term:
    """A repeated label read once, its strides added: the diagonal as a strided view."""
    labels, sizes, strides = [], [], []
    for label, d, s in zip(term.labels, term.sizes, term.strides):
        if label in labels:
            i = labels.index(label)
            if sizes[i] != d:
                raise ctx.fail(f"the repeated label {label!r} has sizes {sizes[i]} and {d}")
            strides[i] += s
        else:
            labels.append(label)
            sizes.append(d)
            strides.append(s)
    return _Term(term.value, tuple(labels), tuple(sizes), tuple(strides))


def _reduce_term(ctx, term: _Term, summed: set) -> _Term:
    """REDUCE SUM of ``term`` over its labels in ``summed``."""
    axes = [i for i, x in enumerate(term.labels) if x in summed]
    if not axes:
        return term
    kept = tuple(1 if i in axes else d for i, d in enumerate(term.sizes))
    t = term.value.data_type
    src = strided_desc(t, term.sizes, term.strides)
    desc = op("REDUCE")("SUM", src, TensorDesc(t, dml_sizes(kept)), axes=axes)
    labels = tuple(x for x in term.labels if x not in summed)
    shape = tuple(d for i, d in enumerate(term.sizes) if i not in axes)
    return _Term.of(ctx.out(ctx.node(desc, [term.value]), shape), labels)


def _arrange(ctx, term: _Term, order: Sequence, sizes: dict) -> _Term:
    """``term`` packed in label ``order`` at the global sizes (an identity when it is not)."""
    if term.is_packed(order, sizes):
        return term
    shape = tuple(sizes[x] for x in order)
    t = term.value.data_type
    desc = op("ELEMENT_WISE_IDENTITY")(term.read(order, sizes), packed(t, shape))
    return _Term.of(ctx.out(ctx.node(desc, [term.value]), shape), order)


def _contract(ctx, a: _Term, b: _Term, needed: set, sizes: dict) -> _Term:
    """``a`` times ``b`` summed over the labels both have and nothing later needs."""
    a = _reduce_term(ctx, a, {x for x in a.labels if x not in b.labels and x not in needed})
    b = _reduce_term(ctx, b, {x for x in b.labels if x not in a.labels and x not in needed})
    batch = [x for x in a.labels if x in b.labels and x in needed]
    inner = [x for x in a.labels if x in b.labels and x not in needed]
    rows = [x for x in a.labels if x not in b.labels]
    cols = [x for x in b.labels if x not in a.labels]
    t = a.value.data_type
    if not inner or t not in _GEMM_TYPES:
        # Nothing summed: one broadcasting product; else the product over every label, then a
        # REDUCE (the types GEMM does not take).
        order = list(a.labels) + cols
        shape = tuple(sizes[x] for x in order)
        desc = op("ELEMENT_WISE_MULTIPLY")(
            a.read(order, sizes), b.read(order, sizes), packed(t, shape)
        )
        product = _Term.of(ctx.out(ctx.node(desc, [a.value, b.value]), shape), order)
        return _reduce_term(ctx, product, set(inner))
    # GEMM over {1, batch, M, K} x {1, batch, K, N}; an operand already packed in either of its
    # two orders is read as it is (TransA / TransB), else it is arranged first.
    a_plain, a_trans = batch + rows + inner, batch + inner + rows
    trans_a = not a.is_packed(a_plain, sizes) and a.is_packed(a_trans, sizes)
    a = a if trans_a else _arrange(ctx, a, a_plain, sizes)
    b_plain, b_trans = batch + inner + cols, batch + cols + inner
    trans_b = not b.is_packed(b_plain, sizes) and b.is_packed(b_trans, sizes)
    b = b if trans_b else _arrange(ctx, b, b_plain, sizes)
    nb, m, k, n = (math.prod(sizes[x] for x in g) for g in (batch, rows, inner, cols))
    desc = op("GEMM")(
        TensorDesc(t, (1, nb) + ((k, m) if trans_a else (m, k))),
        TensorDesc(t, (1, nb) + ((n, k) if trans_b else (k, n))),
        None,
        TensorDesc(t, (1, nb, m, n)),
        trans_a="TRANSPOSE" if trans_a else "NONE",
        trans_b="TRANSPOSE" if trans_b else "NONE",
    )
    order = batch + rows + cols
    shape = tuple(sizes[x] for x in order)
    return _Term.of(ctx.out(ctx.node(desc, [a.value, b.value, None]), shape), order)


@converter("Einsum")
def _einsum(ctx, node, inputs):
    equation = ctx.attr("equation")
    operands, output = _parse_einsum(ctx, equation, [v.rank for v in inputs])
    sizes = _einsum_sizes(ctx, inputs, operands)
    terms = [_diagonal(ctx, _Term.of(v, labels)) for v, labels in zip(inputs, operands)]
    later = set(output).union(*(t.labels for t in terms[1:]))
    acc = _reduce_term(ctx, terms[0], set(terms[0].labels) - later)
    for i, term in enumerate(terms[1:], 1):
        needed = set(output).union(*(t.labels for t in terms[i + 1 :]))
        acc = _contract(ctx, acc, term, needed, sizes)
    acc = _arrange(ctx, acc, output, sizes)
    return [acc.value.view(tuple(sizes[x] for x in output))]


# ---------------------------------------------------------------------------------------------
# Conv, ConvTranspose


def _spatial_attr(ctx, name: str, nd: int, default: int) -> list[int]:
    values = [int(a) for a in ctx.attr(name, [default] * nd)]
    if len(values) != nd:
        raise ctx.fail(f"{name} must hold {nd} values, got {len(values)}")
    return values


def _check_kernel(ctx, w: Value, nd: int) -> list[int]:
    kernel = list(w.shape[2:])
    given = ctx.attr("kernel_shape")
    if given is not None and [int(k) for k in given] != kernel:
        raise ctx.fail(f"kernel_shape {list(given)} differs from the weights' {kernel}")
    return kernel


def _lift(shape: Sequence[int], one_d: bool) -> tuple[int, ...]:
    """A 1-D convolution's {N, C, L} as {N, C, 1, L}."""
    shape = tuple(shape)
    return shape[:2] + (1,) + shape[2:] if one_d else shape


def _conv_ranks(ctx, x: Value, w: Value) -> int:
    if not 3 <= x.rank <= 5 or w.rank != x.rank:
        raise ctx.fail(
            f"input of rank {x.rank} and weights of rank {w.rank}: 1-D to 3-D convolutions "
            "take both of rank 3 to 5"
        )
    return x.rank - 2


@converter("Conv")
def _conv(ctx, node, inputs):
    x, w, bias = (list(inputs) + [None])[:3]
    nd = _conv_ranks(ctx, x, w)
    kernel = _check_kernel(ctx, w, nd)
    strides = _spatial_attr(ctx, "strides", nd, 1)
    dilations = _spatial_attr(ctx, "dilations", nd, 1)
    start, end = pads_of(ctx, x.shape[2:], kernel, strides, dilations)
    one_d = nd == 1
    lift = (lambda v, d: [d] + list(v)) if one_d else (lambda v, d: list(v))
    xs, ws = _lift(x.shape, one_d), _lift(w.shape, one_d)
    strides, dilations = lift(strides, 1), lift(dilations, 1)
    start, end = lift(start, 0), lift(end, 0)
    dims = len(xs) - 2
    out = (xs[0], ws[0]) + spatial_out(xs[2:], ws[2:], strides, dilations, start, end)
    if min(out) < 1:
        raise ctx.fail(f"the window does not fit the padded input (output {list(out)})")
    t = x.data_type
    desc = op("CONVOLUTION")(
        TensorDesc(t, xs),
        TensorDesc(t, ws),
        None if bias is None else TensorDesc(t, (1, ws[0]) + (1,) * dims),
        TensorDesc(t, out),
        mode="CROSS_CORRELATION",
        direction="FORWARD",
        strides=strides,
        dilations=dilations,
        start_padding=start,
        end_padding=end,
        output_padding=[0] * dims,
        group_count=int(ctx.attr("group", 1)),
    )
    result = (out[:2] + out[3:]) if one_d else out
    return [ctx.out(ctx.node(desc, [x, w, bias]), result)]


def _transpose_pads(ctx, x: Value, kernel, strides, dilations, output_padding):
    """ConvTranspose's (start, end) pads by ONNX's rules, negative where the output is longer
    than the full result (output_shape, or auto_pad with a kernel shorter than the stride)."""
    nd = len(kernel)
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    full = [
        s * (size - 1) + p + (k - 1) * d + 1
        for size, k, s, d, p in zip(x.shape[2:], kernel, strides, dilations, output_padding)
    ]
    target = ctx.attr("output_shape")
    if target is not None:
        target = [int(t) for t in target][-nd:]
        if len(target) != nd:
            raise ctx.fail(f"output_shape must hold {nd} spatial sizes, got {len(target)}")
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        target = [size * s for size, s in zip(x.shape[2:], strides)]
    elif auto_pad == "VALID":
        return [0] * nd, [0] * nd
    elif auto_pad == "NOTSET":
        pads = [int(p) for p in ctx.attr("pads", [0] * (2 * nd))]
        if len(pads) != 2 * nd:
            raise ctx.fail(f"pads must hold {2 * nd} values, got {len(pads)}")
        return pads[:nd], pads[nd:]
    else:
        raise ctx.fail(f"auto_pad '{auto_pad}' is not supported")
    start, end = [], []
    for f, want in zip(full, target):
        total = f - want
        if total < 0 and auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
            # An output_shape longer than the full result: the extra positions at the end (ONNX's
            # reference and ONNX Runtime's CPU kernel agree here).
            start.append(0)
            end.append(total)
            continue
        # ONNX's split: SAME_UPPER puts the odd one at the end, otherwise at the start.
        small, big = total // 2, total - total // 2
        start.append(small if auto_pad == "SAME_UPPER" else big)
        end.append(big if auto_pad == "SAME_UPPER" else small)
    return start, end


@converter("ConvTranspose")
def _conv_transpose(ctx, node, inputs):
    x, w, bias = (list(inputs) + [None])[:3]
    nd = _conv_ranks(ctx, x, w)
    kernel = _check_kernel(ctx, w, nd)
    strides = _spatial_attr(ctx, "strides", nd, 1)
    dilations = _spatial_attr(ctx, "dilations", nd, 1)
    output_padding = _spatial_attr(ctx, "output_padding", nd, 0)
    group = int(ctx.attr("group", 1))
    start, end = _transpose_pads(ctx, x, kernel, strides, dilations, output_padding)
    # Negative pads lengthen the output with positions no input reaches (the bias alone): at
    # the end through OutputPadding while DirectML allows it, else by a PADDING node.
    extra_start = [max(0, -s) for s in start]
    extra_end = [max(0, -e) for e in end]
    start, end = [max(0, s) for s in start], [max(0, e) for e in end]
    outpad = list(output_padding)
    for i in range(nd):
        room = max(strides[i], dilations[i]) - 1 - outpad[i]
        if not extra_start[i] and extra_end[i] <= room:
            outpad[i] += extra_end[i]
            extra_end[i] = 0
    padded = any(extra_start) or any(extra_end)
    one_d = nd == 1
    lift = (lambda v, d: [d] + list(v)) if one_d else (lambda v, d: list(v))
    xs, ws = _lift(x.shape, one_d), _lift(w.shape, one_d)
    channels = ws[1] * group
    spatial = [
        s * (size - 1) + (k - 1) * d + 1 + p - b - e
        for size, k, s, d, p, b, e in zip(x.shape[2:], kernel, strides, dilations, outpad, start,
                                          end)
    ]  # fmt: skip
    if min(spatial, default=1) < 1:
        raise ctx.fail(f"the pads leave no output (spatial sizes {spatial})")
    out = (xs[0], channels) + tuple(lift(spatial, 1))
    dims = len(xs) - 2
    t = x.data_type
    conv_bias = None if padded else bias
    desc = op("CONVOLUTION")(
        TensorDesc(t, xs),
        TensorDesc(t, ws),
        None if conv_bias is None else TensorDesc(t, (1, channels) + (1,) * dims),
        TensorDesc(t, out),
        mode="CROSS_CORRELATION",
        direction="BACKWARD",
        strides=lift(strides, 1),
        dilations=lift(dilations, 1),
        start_padding=lift(start, 0),
        end_padding=lift(end, 0),
        output_padding=lift(outpad, 0),
        group_count=group,
    )
    y = ctx.out(ctx.node(desc, [x, w, conv_bias]), out)
    if padded:
        before = [0, 0] + lift(extra_start, 0)
        after = [0, 0] + lift(extra_end, 0)
        shape = tuple(d + b + a for d, b, a in zip(out, before, after))
        pad = op("PADDING")(
            TensorDesc(t, out),
            TensorDesc(t, shape),
            padding_mode="CONSTANT",
            padding_value=0.0,
            start_padding=before,
            end_padding=after,
        )
        y = ctx.out(ctx.node(pad, [y]), shape)
        out = shape
        if bias is not None:
            b4 = bias.view((1, channels) + (1,) * dims)
            add = op("ELEMENT_WISE_ADD")(TensorDesc(t, out), broadcast(b4, out), TensorDesc(t, out))
            y = ctx.out(ctx.node(add, [y, b4]), out)
    result = (out[:2] + out[3:]) if one_d else out
    return [view(y, result)]
