"""Which nodes of a validated graph are lowered together on CUDA (``graph.compile_graph``):
runs of nodes that a registered chain computes as one (``fastpath.register_chain``), producer
and consumer pairs of a registered epilogue (``fastpath.register_epilogue``), and the runs that
compute another input of such a pair's consumer inside its kernel
(``fastpath.register_prologue``). Each is found on descriptors and the graph's edges alone.
"""

from __future__ import annotations

import itertools
from typing import Any

from .. import fastpath
from ..tensor import packed_strides
from .records import FunctionNode, GraphDesc
from .validation import GraphPlan


def readers_of(plan: GraphPlan) -> dict[tuple[int, int], list[tuple[int, int, tuple]]]:
    """(node, output) -> every (reader node, its input position, the source entry)."""
    readers: dict[tuple[int, int], list[tuple[int, int, tuple]]] = {}
    for q, sources in enumerate(plan.sources):
        for j, s in enumerate(sources):
            if s[0] == "node":
                readers.setdefault((s[1], s[2]), []).append((q, j, s))
    return readers


def epilogue_chains(
    graph: GraphDesc, plan: GraphPlan
) -> dict[int, tuple[tuple[int, ...], tuple[int, ...], Any]]:
    """Last node -> (the run's nodes, the input slot of each after the first that reads the one
    before, ``fastpath.Chain``) for every run that a registered chain computes as one: each
    node but the last has one output, not a graph output, read by the next node alone (in the
    desc it was written with or through a view of it, which the chain's ``applies`` sees as
    the reader's input desc). From each node a chain can start at (in the plan's order, one
    run a node), the longest run that applies."""
    readers = readers_of(plan)
    outputs = set(plan.outputs)
    found_runs: dict[int, tuple[tuple[int, ...], tuple[int, ...], Any]] = {}
    taken: set[int] = set()
    for p in plan.order:
        node = graph.nodes[p]
        if p in taken or isinstance(node, FunctionNode):
            continue
        longest = max((c.longest for c in fastpath.chains(node.operator_type)), default=0)
        if not longest:
            continue
        members, slots = [p], []
        while len(members) < longest:
            last = members[-1]
            present = plan.present_outputs[last]
            if len(present) != 1 or (last, present[0]) in outputs:
                break
            found = readers.get((last, present[0]), [])
            if len(found) != 1:  # one reader (through the desc written, or a view of it)
                break
            q, j, _ = found[0]
            if q in taken or isinstance(graph.nodes[q], FunctionNode):
                break
            members.append(q)
            slots.append(j)
        for k in range(len(members), 1, -1):
            descs = tuple(graph.nodes[m] for m in members[:k])
            match = fastpath.chain(descs, tuple(slots[: k - 1]))
            if match is not None:
                found_runs[members[k - 1]] = (tuple(members[:k]), tuple(slots[: k - 1]), match)
                taken |= set(members[:k])
                break
    return found_runs


def epilogue_pairs(
    graph: GraphDesc, plan: GraphPlan, taken: set[int] | None = None
) -> dict[int, tuple[int, int, Any]]:
    """Consumer node -> (producer node, input slot, ``fastpath.Epilogue``) for every pair that a
    registered epilogue computes as one: the producer has one output, not a graph output, read
    by that one consumer input alone, in the desc it was written with or as a packed reshape of
    it (a reinterpreting edge). Nodes of ``taken`` (in a chain's run) join no pair."""
    readers = readers_of(plan)
    outputs = set(plan.outputs)
    pairs: dict[int, tuple[int, int, Any]] = {}
    taken = set(taken or ())  # nodes in a pair already: a node joins one pair at most
    for (p, k), found in readers.items():
        if len(found) != 1 or (p, k) in outputs or plan.present_outputs[p] != (k,):
            continue
        q, j, s = found[0]
        if p in taken or q in taken:
            continue
        if len(s) == 4 and s[3].layout_strides != packed_strides(s[3].sizes):
            continue  # read through strides: not the producer's packed output as it is
        match = fastpath.epilogue(graph.nodes[p], graph.nodes[q], j)
        if match is not None:
            pairs[q] = (p, j, match)
            taken |= {p, q}
    return pairs


def prologue_runs(
    graph: GraphDesc, plan: GraphPlan, pairs: dict, taken: set[int]
) -> dict[int, tuple[tuple[int, ...], Any]]:
    """Pair consumer -> (the run's nodes in order, ``fastpath.Prologue``) for every pair with a
    registered prologue that applies: back from the consumer's input the prologue computes,
    each node has one output, not a graph output, read by the next alone through the desc it
    was written with, and belongs to no other pair or chain; the longest run that applies."""
    readers = readers_of(plan)
    outputs = set(plan.outputs)
    used = set(taken) | set(pairs) | {p for p, _, _ in pairs.values()}  # in no second run
    found: dict[int, tuple[tuple[int, ...], Any]] = {}

    def fits(s: tuple, reader: int, q: int) -> bool:  # a node output the run may hold
        if s[0] != "node" or s[1] in used or (s[1], s[2]) in outputs:
            return False
        # the consumer may read the run's output as a packed reshape; within it, no view
        if len(s) == 4 and (reader != q or s[3].layout_strides != packed_strides(s[3].sizes)):
            return False
        node = graph.nodes[s[1]]
        return (
            not isinstance(node, FunctionNode)
            and plan.present_outputs[s[1]] == (s[2],)
            and (len(readers.get((s[1], s[2]), [])) == 1)
        )

    def back(q: int, at: int, j: int, depth: int) -> list[list[int]]:
        """Every run of at most ``depth`` nodes that ends at input ``j`` of node ``at``."""
        s = plan.sources[at][j]
        if depth < 1 or not fits(s, at, q):
            return []
        m = s[1]
        runs = [[m]]
        for i in range(len(plan.sources[m])):
            runs += [run + [m] for run in back(q, m, i, depth - 1)]
        return runs

    for q, (p, slot, epilogue) in pairs.items():
        for prologue in fastpath.prologues(epilogue):
            for run in sorted(back(q, q, prologue.slot, prologue.longest), key=len, reverse=True):
                descs = tuple(graph.nodes[m] for m in run)
                slots = run_slots(plan, tuple(run))
                if prologue.applies(descs, slots, graph.nodes[p], graph.nodes[q], slot):
                    found[q] = (tuple(run), prologue)
                    used |= set(run)
                    break
            if q in found:
                break
    return found


def view_of(source: tuple) -> Any:
    """The desc a reader reads a source through, where the edge is a view, else None."""
    return source[3] if len(source) == 4 else None


def run_slots(plan: GraphPlan, run: tuple[int, ...]) -> tuple[int, ...]:
    """The input of each node of ``run`` after the first that reads the node before it."""
    return tuple(
        next(j for j, s in enumerate(plan.sources[b]) if s[0] == "node" and s[1] == a)
        for a, b in itertools.pairwise(run)
    )


def run_sources(plan: GraphPlan, run: tuple[int, ...]) -> list[tuple]:
    """Each node's sources of ``run`` but the one it reads from the run."""
    slots = (None, *run_slots(plan, run))
    return [
        tuple(s for j, s in enumerate(plan.sources[m]) if j != slot) for m, slot in zip(run, slots)
    ]


def pair_sources(plan: GraphPlan, pairs: dict, fronts: dict, n: int) -> tuple[tuple, dict]:
    """The sources of pair consumer ``n``'s step, in the order its lowering takes them (the
    producer's, then its prologue run's node by node, then the consumer's others), and the
    position in them of each of the consumer's own inputs there (input -> position)."""
    p, slot, _ = pairs[n]
    skip = {slot}
    sources = tuple(plan.sources[p])
    if n in fronts:
        members, prologue = fronts[n]
        skip.add(prologue.slot)
        sources += tuple(s for own in run_sources(plan, members) for s in own)
    at = {}
    for j, s in enumerate(plan.sources[n]):
        if j not in skip:
            at[j] = len(sources)
            sources += (s,)
    return sources, at
