"""Sequence and Optional values, whose structure is known at import.

ONNX Runtime's DirectML provider runs the sequence and optional ops as CPU kernels beside its DML
graphs (a sequence is a list of tensors in CPU-side bookkeeping). Here a sequence is a
``SequenceValue`` (a tuple of tensor values of known length) and an optional an
``OptionalValue`` (a value or nothing): the ops that only rearrange them (construct, insert,
erase, at, length, the optional ops) add no node, and positions must be known at import
(``ctx.const``; a graph input is specialised on). The ops that compute tensors map onto DML
operators: ConcatFromSequence is Concat's JOIN (as ONNX.md lists it), SplitToSequence is Split's
SPLIT. SequenceMap imports its body once per position (an unrolled map).
"""

from __future__ import annotations

import numpy as np

from .. import functions
from ..importer import (
    OptionalValue,
    SequenceValue,
    Value,
    elem_of,
)
from . import converter
from .subgraph import run_op


def _sequence(ctx, v, what: str = "input_sequence") -> SequenceValue:
    if not isinstance(v, SequenceValue):
        raise ctx.fail(f"input '{what}' must be a sequence")
    return v


def _tensor(ctx, v, what: str) -> Value:
    if v is None or isinstance(v, SequenceValue | OptionalValue):
        raise ctx.fail(f"input '{what}' must be a tensor")
    return v


def _position(ctx, v, length: int, *, insert: bool = False) -> int:
    """A position known at import, in [-length, length - 1] ([-length, length] to insert)."""
    p = np.asarray(ctx.const(v, "position")).reshape(-1)
    if p.size != 1:
        raise ctx.fail(f"position must hold one value, got {p.size}")
    p = int(p[0])
    top = length if insert else length - 1
    if not -length <= p <= top:
        raise ctx.fail(f"position {p} is out of range for a sequence of {length} tensors")
    return p + length if p < 0 else p


def _checked_type(ctx, seq: SequenceValue, t: Value) -> None:
    if seq.items and (seq.items[0].data_type, seq.items[0].is_bool) != (t.data_type, t.is_bool):
        raise ctx.fail(
            f"the tensor's type {t.data_type.name} differs from the sequence's "
            f"{seq.items[0].data_type.name}"
        )


@converter("SequenceEmpty")
def _sequence_empty(ctx, node, inputs):
    return [SequenceValue((), int(ctx.attr("dtype", 1)))]


@converter("SequenceConstruct")
def _sequence_construct(ctx, node, inputs):
    items = [_tensor(ctx, v, f"inputs[{k}]") for k, v in enumerate(inputs)]
    seq = SequenceValue((), elem_of(items[0]))
    for t in items:
        _checked_type(ctx, seq, t)
        seq = SequenceValue((*seq.items, t), seq.elem_type)
    return [seq]


@converter("SequenceAt")
def _sequence_at(ctx, node, inputs):
    seq = _sequence(ctx, inputs[0])
    return [seq.items[_position(ctx, inputs[1], len(seq.items))]]


@converter("SequenceInsert")
def _sequence_insert(ctx, node, inputs):
    seq = _sequence(ctx, inputs[0])
    t = _tensor(ctx, inputs[1], "tensor")
    _checked_type(ctx, seq, t)
    n = len(seq.items)
    at = n if len(inputs) < 3 or inputs[2] is None else _position(ctx, inputs[2], n, insert=True)
    items = (*seq.items[:at], t, *seq.items[at:])
    return [SequenceValue(items, seq.elem_type or elem_of(t))]


@converter("SequenceErase")
def _sequence_erase(ctx, node, inputs):
    seq = _sequence(ctx, inputs[0])
    n = len(seq.items)
    if n == 0:
        raise ctx.fail("the sequence is empty")
    at = n - 1 if len(inputs) < 2 or inputs[1] is None else _position(ctx, inputs[1], n)
    return [SequenceValue((*seq.items[:at], *seq.items[at + 1 :]), seq.elem_type)]


@converter("SequenceLength")
def _sequence_length(ctx, node, inputs):
    return [ctx.constant(np.int64(len(_sequence(ctx, inputs[0]).items)))]


@converter("SplitToSequence")
def _split_to_sequence(ctx, node, inputs):
    x = _tensor(ctx, inputs[0], "input")
    if x.rank == 0:
        raise ctx.fail("input must have at least one dimension")
    axis = int(ctx.attr("axis", 0))
    if not -x.rank <= axis < x.rank:
        raise ctx.fail(f"axis {axis} is out of range for rank {x.rank}")
    axis %= x.rank
    n = x.shape[axis]
    split = inputs[1] if len(inputs) > 1 else None
    keepdims = True
    if split is None:  # pieces of one, the axis dropped unless keepdims
        sizes = [1] * n
        keepdims = bool(ctx.attr("keepdims", 1))
    else:
        s = np.asarray(ctx.const(split, "split")).astype(np.int64)
        if s.ndim == 0:  # pieces of this size, the last one smaller
            size = int(s)
            if size <= 0:
                raise ctx.fail(f"split {size} must be positive")
            sizes = [size] * (n // size) + ([n % size] if n % size else [])
        else:
            sizes = [int(d) for d in s.reshape(-1)]
            if sum(sizes) != n or min(sizes, default=0) < 0:
                raise ctx.fail(f"split sizes {sizes} do not cut dimension {axis} ({n})")
    if len(sizes) <= 1:
        pieces = [x] if sizes else []
    elif ctx.opsets.get("", 1) >= 13:
        parts = ctx.constant(np.asarray(sizes, np.int64))
        pieces = run_op(ctx, "Split", [x, parts], len(sizes), axis=axis)
    else:
        pieces = run_op(ctx, "Split", [x], len(sizes), axis=axis, split=sizes)
    if not keepdims:
        pieces = [p.view(p.shape[:axis] + p.shape[axis + 1 :]) for p in pieces]
    return [SequenceValue(tuple(pieces), elem_of(x))]


@converter("ConcatFromSequence")
def _concat_from_sequence(ctx, node, inputs):
    seq = _sequence(ctx, inputs[0])
    if not seq.items:
        raise ctx.fail("the sequence is empty: there is nothing to concatenate")
    items = list(seq.items)
    axis = ctx.attr("axis")
    if axis is None:
        raise ctx.fail("attribute 'axis' is required")
    axis = int(axis)
    rank = items[0].rank + (1 if ctx.attr("new_axis", 0) else 0)
    if not -rank <= axis < rank:
        raise ctx.fail(f"axis {axis} is out of range for rank {rank}")
    axis %= rank
    if ctx.attr("new_axis", 0):  # stacked: each tensor gets the new axis of size 1
        items = [v.view(v.shape[:axis] + (1,) + v.shape[axis:]) for v in items]
    if len(items) == 1:
        return [items[0]]
    return run_op(ctx, "Concat", items, axis=axis)


@converter("Optional")
def _optional(ctx, node, inputs):
    value = inputs[0] if inputs else None
    if isinstance(value, OptionalValue):
        raise ctx.fail("input must be a tensor or a sequence, not an optional")
    if value is None and ctx.attrs.get("type") is None:
        raise ctx.fail("an Optional without an input needs the attribute 'type'")
    return [OptionalValue(value)]


@converter("OptionalHasElement")
def _optional_has_element(ctx, node, inputs):
    v = inputs[0] if inputs else None
    has = v is not None and not (isinstance(v, OptionalValue) and v.value is None)
    return [ctx.constant(np.bool_(has))]


@converter("OptionalGetElement")
def _optional_get_element(ctx, node, inputs):
    v = inputs[0]
    if isinstance(v, OptionalValue):
        if v.value is None:
            raise ctx.fail("the optional is empty")
        return [v.value]
    return [v]  # a tensor or a sequence: itself (opset 18)


@converter("SequenceMap")
def _sequence_map(ctx, node, inputs):
    """The body imported once per position of the sequences (the tensor inputs the same at
    every position); each body output collected into an output sequence."""
    from ..walk import walk_nodes

    body = ctx.attrs.get("body")
    if body is None:
        raise ctx.fail("attribute 'body' is required")
    seqs = [v for v in inputs if isinstance(v, SequenceValue)]
    if not isinstance(inputs[0], SequenceValue):
        raise ctx.fail("input 'input_sequence' must be a sequence")
    lengths = {len(s.items) for s in seqs}
    if len(lengths) != 1:
        raise ctx.fail(f"the input sequences differ in length ({sorted(lengths)})")
    n = lengths.pop()
    if len(body.input) != len(inputs):
        raise ctx.fail(f"the body has {len(body.input)} inputs for {len(inputs)} node inputs")
    results: list[list] = [[] for _ in body.output]
    for i in range(n):
        bindings = {
            formal.name: v.items[i] if isinstance(v, SequenceValue) else v
            for formal, v in zip(body.input, inputs)
        }
        outs = functions.inline_graph(
            ctx.walk, body, bindings, f"{ctx.where} > position {i}", walk_nodes
        )
        for k, v in enumerate(outs):
            if isinstance(v, SequenceValue | OptionalValue):
                raise ctx.fail(f"body output {k} must be a tensor")
            results[k].append(v)
    elems = []
    for k, out in enumerate(body.output):
        t = out.type.sequence_type.elem_type.tensor_type.elem_type
        elems.append(int(t) or (elem_of(results[k][0]) if results[k] else 0))
    return [SequenceValue(tuple(r), e) for r, e in zip(results, elems)]
