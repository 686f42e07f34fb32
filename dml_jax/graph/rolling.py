"""Repeated blocks of a graph's steps as one loop: ``lax.scan`` over their stacked inputs.

A graph imported from a network lists its layers one after another: a stage of nine equal
blocks is nine copies of the same nodes, each with its own weights. Traced as they are, XLA
compiles every copy and cuDNN builds a plan for every copy's convolution at the first run.
Rolled, the first block of a run is traced as it is and the others become one ``lax.scan``
whose body is the block once: the same operations on the same values. It is opt-in
(``compile_graph(roll_repeats=True)``): on an H100 it shortened first calls by 0-25% and
lengthened calls by 2-47% (docs/onnx.md, "First-call time"), the stacking of every block's
weights at each call and their slices in the loop being most of the cost.

A run is found on the graph's steps in evaluation order (``tracing._graph_function``): blocks
of ``P`` steps, ``r >= MIN_REPEATS`` of them, where every step of the second block on equals
the step ``P`` before it (its descs, its lowering, and the kinds of its inputs: a graph input,
a constant, or an earlier step's output, read through the same desc) and the first block's
steps make what the second's make (the same output descs: its inputs may differ). It is rolled
only where the loop computes what the steps would:

- each block after the first reads its own steps and the block just before it (the loop's
  carry) at the same positions, and values from before the run, graph inputs and constants
  either the same for every block (read as they are) or each its own, of one desc (stacked:
  the scan's ``xs``);
- nothing after the run, and no graph output, reads a block but the first or the last.

Inside the body a lowering sees as known (``fastpath.known_input``) only the inputs that are the
same for every block: another block's constants must not be taken for the first one's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp
from jax import lax

from .. import fastpath

# The fewest repeats of a block that are rolled (the first is traced as it is, the others
# looped: at least two to loop), and the longest block looked for, in steps.
MIN_REPEATS, MAX_PERIOD = 3, 400


@dataclass(frozen=True)
class Run:
    """A rolled run: ``repeats`` blocks of ``period`` steps from step ``start`` (steps as
    ``tracing._graph_function`` orders them), and ``first_node``, the node of its first step."""

    start: int
    period: int
    repeats: int
    first_node: int


@dataclass
class _Slot:
    """Where a body step's argument comes from: ``own`` (a step of the same block, by position
    and output), ``carry`` (of the block before), ``same`` (one source for every block) or
    ``stacked`` (each block's own, at this index of the scan's inputs)."""

    kind: str
    key: Any = None
    read_as: Any = None
    source: Any = None


class RolledRun:
    """One run, as the step that computes its blocks after the first."""

    def __init__(self, run: Run, steps, slots, stacked, carry_keys, out_keys, lowers, knowns):
        self.run = run
        self._steps, self._slots, self._stacked = steps, slots, stacked
        self._carry_keys, self._out_keys = carry_keys, out_keys
        self._lowers, self._knowns = lowers, knowns

    def __call__(self, values: dict, arrays: Sequence[Any], source_value: Callable) -> None:
        from ..buffers import read_tensor

        period, repeats, start = self.run.period, self.run.repeats, self.run.start
        first = [self._steps[start + t][0] for t in range(period)]
        last = [self._steps[start + (repeats - 1) * period + t][0] for t in range(period)]
        carry = {key: values[(first[key[0]], key[1])] for key in self._carry_keys}
        xs = [
            jnp.stack([source_value(values, arrays, s) for s in sources])
            for sources in self._stacked
        ]
        same = {
            (t, j): source_value(values, arrays, slot.source)
            for t, slots in enumerate(self._slots)
            for j, slot in enumerate(slots)
            if slot.kind == "same"
        }

        def read(v, read_as):
            return v if read_as is None else read_tensor(v.reshape(-1), read_as)

        def body(carry, xs):
            local: dict[tuple[int, int], Any] = {}
            for t in range(period):
                args = []
                for j, slot in enumerate(self._slots[t]):
                    if slot.kind == "own":
                        args.append(read(local[slot.key], slot.read_as))
                    elif slot.kind == "carry":
                        args.append(read(carry[slot.key], slot.read_as))
                    elif slot.kind == "same":
                        args.append(same[(t, j)])
                    else:
                        args.append(xs[slot.key])
                with fastpath.known_inputs(self._knowns[t]):
                    results = self._lowers[t](*args)
                for k, y in zip(self._steps[start + period + t][3], results):
                    local[(t, k)] = y
            return {key: local[key] for key in self._carry_keys}, None

        # the blocks after the first (a run whose blocks all read the same values, weights
        # shared, stacks nothing: the count is given)
        final, _ = lax.scan(body, carry, xs, length=repeats - 1)
        for key in self._out_keys:
            values[(last[key[0]], key[1])] = final[key]


def find_runs(
    steps: Sequence[tuple],
    signatures: Sequence[Any],
    readers_after: Callable[[int], set],
) -> list[tuple[Run, list, list, list, set]]:
    """The runs of ``steps`` to roll, each with how its body reads its arguments.

    ``steps[i]`` is ``(node, lower, sources, present, known)``; ``signatures[i]`` three
    hashables, what step i computes (its descs and lowering), where its inputs come from and
    what it makes (its outputs' descs), or None (never rolled); ``readers_after(end)`` the
    (node, output) pairs read by the steps from ``end`` on and by the graph outputs. The first
    block of a run, traced as it is, need only make what the others make: its inputs may come
    from elsewhere and be read through other strides (a stage's first block)."""
    ids: dict[Any, int] = {}
    made = [-1 - i if sig is None else ids.setdefault(("made", sig[2]), len(ids))
            for i, sig in enumerate(signatures)]  # fmt: skip
    full = [-1 - i if sig is None else ids.setdefault(("full", sig), len(ids))
            for i, sig in enumerate(signatures)]  # fmt: skip
    at = {step[0]: i for i, step in enumerate(steps)}
    found = []
    i = 0
    while i < len(steps):
        best = None
        for period in range(1, min(MAX_PERIOD, (len(steps) - i) // MIN_REPEATS) + 1):
            if made[i] < 0 or made[i + period] != made[i]:
                continue
            if made[i : i + period] != made[i + period : i + 2 * period]:
                continue
            block = full[i + period : i + 2 * period]
            r = 2
            while full[i + r * period : i + (r + 1) * period] == block:
                r += 1
            if r >= MIN_REPEATS and (best is None or r * period > best[0] * best[1]):
                best = (r, period)
        rolled = None
        if best is not None:
            rolled = _plan(steps, at, i, best[1], best[0], readers_after)
        if rolled is None:
            i += 1
            continue
        found.append(rolled)
        i += rolled[0].period * rolled[0].repeats
    return found


def _plan(steps, at, start, period, repeats, readers_after):
    """How the body reads each argument, or None where the run cannot be a loop: every block
    after the first must read its arguments the way the second does."""
    slots: list[list[_Slot]] = []
    stacked: list[list[tuple]] = []
    carry_keys: set[tuple[int, int]] = set()

    def position(s, b):  # a node source's step, from the start of block b; None if no step
        i = at.get(s[1])
        return None if i is None else i - (start + b * period)

    for t in range(period):
        row = []
        for j, s in enumerate(steps[start + period + t][2]):
            per_block = [steps[start + b * period + t][2][j] for b in range(1, repeats)]
            pos = position(s, 1) if s[0] == "node" else None
            if all(p == s for p in per_block) and (s[0] != "node" or (pos is not None and pos < 0)):
                # one graph input or constant for every block, or one value of the first block
                # or from before the run
                row.append(_Slot("same", source=s))
                continue
            if s[0] != "node":
                if any(p[0] != s[0] or p[2:] != s[2:] for p in per_block):
                    return None
                row.append(_Slot("stacked", len(stacked)))
                stacked.append(per_block)
                continue
            q = pos
            before = [position(p, 1) if p[0] == "node" else None for p in per_block]
            if all(v is not None and v < -period for v in before) and all(
                p[0] == "node" and p[2:] == s[2:] for p in per_block
            ):
                # each block's own value from before the run (a weight's copy): stacked
                row.append(_Slot("stacked", len(stacked)))
                stacked.append(per_block)
                continue
            if q is None or not -period <= q < period:
                return None
            for b, p in enumerate(per_block, 1):
                if p[0] != "node" or position(p, b) != q or p[2:] != s[2:]:
                    return None
            read_as = s[3] if len(s) == 4 else None
            if q >= 0:
                row.append(_Slot("own", (q, s[2]), read_as))
            else:
                carry_keys.add((q + period, s[2]))
                row.append(_Slot("carry", (q + period, s[2]), read_as))
        slots.append(row)
    end = start + repeats * period
    out_keys = set()
    for node, k in readers_after(end):
        i = at.get(node)
        if i is None or not start + period <= i < end:
            continue  # before the run, or its first block (traced as it is)
        if i < end - period:
            return None  # a block in the middle read after the run
        out_keys.add((i - (end - period), k))
    carry_keys |= out_keys
    run = Run(start, period, repeats, steps[start][0])
    return run, slots, stacked, sorted(carry_keys), out_keys
