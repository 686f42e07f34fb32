"""A validated graph as one JAX function: every node's lowering in topological order (a graph's
GEMM node and the node that reads it through a fast-path epilogue where one applies), jitted and
cached as a ``CompiledGraph``.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from .. import fastpath
from ..checks import check_x64, feature_level_of
from ..compile import CompiledOperator, with_shardings
from ..enums import FeatureLevel
from ..errors import ValidationError
from ..precision import with_half_precision
from ..tensor import host_view
from . import fusing, rolling
from .records import GRAPH, ConstantDataNode, FunctionNode, GraphDesc
from .validation import GraphPlan, constant_value, validated_plan

# Constant data nodes whose values the caller passes as arguments of its own jit: the graph
# they are of, and (node index, DataType) -> the node's elements of that type, flat
# (``held_constants``).
_HELD: contextvars.ContextVar[tuple | None] = contextvars.ContextVar("dml_graph_held", default=None)


def _held_value(flat, desc):
    """What a reader of ``desc`` reads from a held constant's elements ``flat``: 4-bit ones
    may be given as their packed bytes (uint8), viewed here as elements and noted
    (``fastpath.note_packed``) where the reader reads them in order."""
    from ..buffers import read_tensor

    count = desc.addressed_elements
    if desc.data_type.bits != 4 or flat.dtype != jnp.uint8:
        return read_tensor(flat[:count], desc)
    codes = jax.lax.bitcast_convert_type(flat, desc.dtype).reshape(-1)
    value = read_tensor(codes[:count], desc)
    if desc.is_packed and count == desc.element_count and count % 2 == 0:
        fastpath.note_packed(value, flat[: count // 2])
    return value


@contextlib.contextmanager
def held_constants(graph: GraphDesc, values: Mapping[tuple[int, Any], Any]) -> Iterator[None]:
    """``graph``, traced inside, reads these arrays for its constant data nodes: ``values``
    maps (node index, ``DataType``) to the node's elements of that type, flat and in order
    (``validation.constant_elements``), as arrays, traced ones included; 4-bit elements may be
    given as their packed bytes (uint8, two a byte, element 0 in the low nibble). A reader of a node
    reads the array of its own data type where one is given, and the node's bytes, compiled
    into the program, where none is; other graphs traced inside (a Loop's body) read their
    own bytes. The values must be the nodes' (the lowerings still read the bytes while
    tracing, ``fastpath.known_input``): what changes is only that the program takes them as
    arguments instead of holding them, so that a program over large constants (4-bit weights)
    is not compiled with them in it."""
    token = _HELD.set((graph, values))
    try:
        yield
    finally:
        _HELD.reset(token)


# Node outputs the caller computed before the trace (``precomputed_outputs``): the graph they
# are of, and (node index, output slot) -> the node's output.
_PRECOMPUTED: contextvars.ContextVar[tuple | None] = contextvars.ContextVar(
    "dml_graph_precomputed", default=None
)


@contextlib.contextmanager
def precomputed_outputs(graph: GraphDesc, values: Mapping[tuple[int, int], Any]) -> Iterator[None]:
    """``graph``, traced inside, takes these outputs as given: ``values`` maps (node index,
    output slot) to what the node computes (``CompiledGraph.folded`` names nodes computed
    from constant inputs alone, ``CompiledGraph.fold`` computes them), and a node whose every
    output is given is not traced. The values must be the nodes' for the constants the trace
    reads: a caller gives them where those constants are its own (a session's ``run``), so
    that a program's steps do not compute again, each call, what depends on weights alone (a
    JOIN of scales). Other graphs traced inside read nothing of them."""
    token = _PRECOMPUTED.set((graph, values))
    try:
        yield
    finally:
        _PRECOMPUTED.reset(token)


class CompiledGraph(CompiledOperator):
    """A validated graph as one pure JAX function; called exactly like a ``CompiledOperator``.

    Inputs are the graph inputs (``Inputs[i]``) and outputs the graph outputs (``Outputs[j]``).
    A graph input that feeds no node has ``None`` as its desc and accepts any array, which is
    ignored (DirectML tolerates unused graph inputs).

    Attributes:
        traces: how many times the graph's Python function has run, i.e. been traced by
            ``jax.jit`` (or evaluated eagerly through ``fn``). Calling the compiled graph again
            with the same inputs reuses the jitted program and leaves it unchanged.
        order: node indices in the order they are evaluated.
        rolled: the runs of repeated blocks traced as one loop each (``rolling.Run``: first
            step, block length in steps, repeats, first node), with ``roll_repeats``; empty
            otherwise.
    """

    def __init__(
        self,
        graph: GraphDesc,
        level: FeatureLevel,
        plan: GraphPlan,
        counter: list,
        half: bool = False,
        fast_paths: bool = True,
        constant_inputs: Mapping[int, Any] | None = None,
        roll: bool = False,
    ):
        runs: list = []
        function = _graph_function(graph, plan, counter, fast_paths, constant_inputs, roll, runs)
        differentiable = all(
            spec.is_differentiable(node)
            for spec, node in zip(plan.specs, graph.nodes)
            if spec is not None
        )
        super().__init__(
            graph,
            level,
            plan.input_descs,
            plan.output_descs,
            with_half_precision(function, half),
            tuple_result=False,
            differentiable=differentiable,
            name=GRAPH,
        )
        self.order = plan.order
        self.rolled = tuple(runs)
        self._counter = counter
        self._used_view: _UsedInputs | None = None
        self._function, self._half = function, half

    def folded(
        self, constants: frozenset[int], compiled_in: frozenset[int] = frozenset()
    ) -> tuple[tuple[int, int], ...]:
        """The outputs (node index, output slot) that graph inputs ``constants`` (indices) and
        constant data nodes alone determine, worth computing once rather than at every call:
        each of a node of two sources or more that, as every node before it down to the
        constants, writes no more bytes than it reads (a JOIN, not a DEQUANTIZE of 4-bit
        weights) and is not half of a pair a fast path computes as one, read by a node that
        depends on more or a graph output; none where the graph is traced with half precision
        or with rolled repeats. Not those that ``compiled_in`` (those of ``constants`` that
        the program holds as compile-time constants) alone determine: XLA folds them itself,
        and as arguments they would hide their values from it (a test of quantization scales,
        ``onnx/optimize/roundtrips.py``, whose other branch it then could not drop)."""
        if self._half or self.rolled:
            return ()
        return self._function.folded(constants, compiled_in)

    def fold(self, wanted: Sequence[tuple[int, int]], inputs: Mapping[int, Any]) -> dict:
        """The outputs ``wanted`` (of ``folded``) computed from ``inputs`` (graph input index ->
        array, the constant ones they read), as the graph's trace computes them."""
        return self._function.values_of(tuple(wanted), inputs)

    @property
    def traces(self) -> int:
        return self._counter[0]

    def run_buffers(self, inputs: Sequence[Any], outputs: Sequence[Any]) -> tuple:
        """Buffer mode, as for an operator: one 1-D buffer per graph input, one per output.

        The buffer of a graph input that feeds no node is ignored (it may be ``None``, like an
        unbound DML binding).
        """
        from ..buffers import run_buffers

        used = [i for i, t in enumerate(self.input_descs) if t is not None]
        if len(used) == len(self.input_descs):
            return run_buffers(self, inputs, outputs)
        if not isinstance(inputs, (list, tuple)) or len(inputs) != len(self.input_descs):
            got = len(inputs) if isinstance(inputs, (list, tuple)) else type(inputs).__name__
            raise ValidationError(
                f"{self.name}: expected {len(self.input_descs)} input buffers "
                f"({', '.join(self.input_paths)}), got {got}"
            )
        if self._used_view is None:
            self._used_view = _UsedInputs(self, used)
        return run_buffers(self._used_view, [inputs[i] for i in used], outputs)

    def __repr__(self) -> str:
        return (
            f"CompiledGraph({len(self.desc.nodes)} nodes, {len(self.input_descs)} inputs, "
            f"{len(self.output_descs)} outputs, feature_level={self.feature_level.label})"
        )


class _UsedInputs:
    """A compiled graph seen through its used inputs only, for buffer mode."""

    def __init__(self, graph: CompiledGraph, used: list[int]):
        count = len(graph.input_descs)
        self.name = graph.name
        self.input_paths = tuple(graph.input_paths[i] for i in used)
        self.input_descs = tuple(graph.input_descs[i] for i in used)
        self.output_paths, self.output_descs = graph.output_paths, graph.output_descs
        self._buffer_fn = None

        def fn(*arrays):
            full = [None] * count
            for i, x in zip(used, arrays):
                full[i] = x
            return graph.fn(*full)

        self.fn = fn


def _graph_function(
    graph: GraphDesc,
    plan: GraphPlan,
    counter: list,
    fast_paths: bool = True,
    constant_inputs: Mapping[int, Any] | None = None,
    roll: bool = False,
    runs: list | None = None,
) -> Callable[..., tuple]:
    from ..buffers import read_tensor

    constants = set(graph.constant_nodes)
    # A node fed only by constants still fuses with nothing: it keeps standalone fast paths.
    linked = {
        n
        for e in graph.intermediate_edges
        if e.from_node_index not in constants
        for n in (e.from_node_index, e.to_node_index)
    }
    on = fast_paths and fastpath.cuda_present()
    runs_of = fusing.epilogue_chains(graph, plan) if on else {}
    in_runs = {m for members, _, _ in runs_of.values() for m in members}
    pairs = fusing.epilogue_pairs(graph, plan, in_runs) if on else {}
    fronts = fusing.prologue_runs(graph, plan, pairs, in_runs) if on else {}
    fused_into = {p for p, _, _ in pairs.values()} | (in_runs - set(runs_of))
    fused_into |= {m for members, _ in fronts.values() for m in members}

    fixed = dict(constant_inputs or {})

    def known_value(s):
        """The value a source gives its reader (NumPy, the reader's sizes) where the program
        fixes it: a ConstantDataNode, a graph input of ``constant_inputs``, or the copy of one
        by an ELEMENT_WISE_IDENTITY without ScaleBias (read through the reader's own desc
        where it reinterprets the packed output); None where it is known only at run time."""
        if s[0] == "constant":
            return constant_value(graph.nodes[s[1]], s[2])
        if s[0] == "input":
            value = fixed.get(s[1])
            return None if value is None else np.asarray(value)
        node = graph.nodes[s[1]]
        if getattr(node, "operator_type", "") != "DML_OPERATOR_ELEMENT_WISE_IDENTITY":
            return None
        if node.scale_bias is not None or s[2] != 0 or not plan.sources[s[1]]:
            return None
        inner = known_value(plan.sources[s[1]][0])
        if inner is None:
            return None
        packed = np.ascontiguousarray(inner).reshape(node.output_tensor.sizes)
        if len(s) < 4:
            return packed
        desc, flat = s[3], packed.reshape(-1)
        if desc.addressed_elements > flat.size:
            return None
        return host_view(flat, desc)

    def known(n):
        # Values of node n's constant-fed inputs (its argument positions), as NumPy arrays, for
        # the lowerings that decide at trace time what they would otherwise test at run time;
        # each is found when a lowering asks for it.
        return _Known({i: s for i, s in enumerate(plan.sources[n])}, known_value)

    def pair_lowering(n, consumer_known):
        p, slot, found = pairs[n]
        edge = plan.sources[n][slot]
        run = None
        if n in fronts:
            members, prologue = fronts[n]
            run = fastpath.PrologueRun(
                prologue, tuple(plan.specs[m] for m in members),
                tuple(graph.nodes[m] for m in members), fusing.run_slots(plan, members),
                tuple(len(s) for s in fusing.run_sources(plan, members)),
                fusing.view_of(plan.sources[n][prologue.slot]),
            )  # fmt: skip
        return fastpath.fused_lowering(
            plan.specs[p], graph.nodes[p], plan.specs[n], graph.nodes[n], slot, found,
            len(plan.sources[p]), read_as=fusing.view_of(edge), consumer_known=consumer_known,
            run=run,
        )  # fmt: skip

    steps: list = []
    for n in plan.order:
        if n in constants or n in fused_into:
            continue
        if n in runs_of:  # the run's nodes as one step, each one's inputs in turn
            members, slots, found = runs_of[n]
            sources, counts, reads = [], [], []
            for i, m in enumerate(members):
                own = [s for j, s in enumerate(plan.sources[m]) if i == 0 or j != slots[i - 1]]
                sources += own
                counts.append(len(own))
                if i:  # the desc it reads the node before through, where it is a view
                    edge = plan.sources[m][slots[i - 1]]
                    reads.append(edge[3] if len(edge) == 4 else None)
            lower = fastpath.chain_lowering(
                tuple(plan.specs[m] for m in members), tuple(graph.nodes[m] for m in members),
                slots, tuple(counts), found, tuple(reads),
            )  # fmt: skip
            steps.append((n, lower, tuple(sources), plan.present_outputs[n], {}))
            continue
        if n in pairs:  # this node and its producer (and a prologue run) as one step
            sources, _ = fusing.pair_sources(plan, pairs, fronts, n)
            steps.append((n, pair_lowering(n, known(n)), sources, plan.present_outputs[n], {}))
            continue
        if isinstance(graph.nodes[n], FunctionNode):
            lower = graph.nodes[n].fn
        else:
            lower = fastpath.lowering(plan.specs[n], graph.nodes[n], fast_paths, n in linked)
        steps.append((n, lower, plan.sources[n], plan.present_outputs[n], known(n)))
    if roll:
        steps = _rolled(
            steps, graph, plan, pairs, linked, known_value, pair_lowering, runs, runs_of, fronts
        )

    held: Mapping | None = None  # held_constants' values while ``lowered`` traces

    def source_value(values, arrays, s):
        if s[0] == "input":
            return arrays[s[1]]
        if s[0] == "constant":  # the bytes as the consumer's elements, read through its desc
            flat = held.get((s[1], s[2].data_type)) if held else None
            if flat is not None:
                return _held_value(flat, s[2])
            data = constant_value(graph.nodes[s[1]], s[2].like(sizes=(s[2].addressed_elements,)))
            return read_tensor(jnp.asarray(data), s[2])
        if len(s) == 3:
            return values[(s[1], s[2])]
        return read_tensor(values[(s[1], s[2])].reshape(-1), s[3])

    def run_steps(arrays, chosen=None) -> dict:
        with fastpath.packed_sources():
            return traced_steps(arrays, chosen)

    def traced_steps(arrays, chosen) -> dict:
        nonlocal held
        owner = _HELD.get()
        held = owner[1] if owner is not None and _same_graph(owner[0], graph) else None
        given = _PRECOMPUTED.get()
        given = given[1] if given is not None and _same_graph(given[0], graph) else {}
        values: dict[tuple[int, int], Any] = {}
        for step in steps:
            if isinstance(step, rolling.RolledRun):
                step(values, arrays, source_value)
                continue
            n, lower, sources, present, known = step
            if chosen is not None and n not in chosen:
                continue
            if present and all((n, k) in given for k in present):
                values.update({(n, k): given[(n, k)] for k in present})
                continue
            args = [source_value(values, arrays, s) for s in sources]
            with fastpath.known_inputs(known):
                results = lower(*args)
            for k, y in zip(present, results):
                values[(n, k)] = y
        return values

    def lowered(*arrays):
        counter[0] += 1
        values = run_steps(arrays)
        return tuple(values[src] for src in plan.outputs)

    def folded(
        constant_inputs: frozenset[int], compiled_in: frozenset[int]
    ) -> tuple[tuple[int, int], ...]:
        paired = set(pairs) | fused_into | set(runs_of)
        entries = {e.to_node_index for e in graph.input_edges}
        cheap: set[int] = set()  # from constants alone, each node writing no more than it reads
        baked: set[int] = set()  # from compile-time constants alone: XLA's to fold
        for n in plan.order:
            node = graph.nodes[n]
            if n in constants or n in paired or isinstance(node, FunctionNode):
                continue
            if plan.sources[n] and all(
                (s[0] == "input" and s[1] in compiled_in) or (s[0] == "node" and s[1] in baked)
                for s in plan.sources[n]
            ):
                baked.add(n)
            if not plan.sources[n] or not all(
                (s[0] == "input" and s[1] in constant_inputs)
                or s[0] == "constant"
                or (s[0] == "node" and s[1] in cheap)
                for s in plan.sources[n]
            ):
                continue
            ins = sum(_bytes(t) for _, t in node.input_slots() if t is not None)
            outs = sum(_bytes(t) for _, t in node.output_slots() if t is not None)
            if outs <= ins:
                cheap.add(n)
        frontier = {
            s[1:3]
            for n in plan.order
            if n not in cheap
            for s in plan.sources[n]
            if s[0] == "node" and s[1] in cheap and s[1] not in entries and s[1] not in baked
        }
        frontier |= {src for src in plan.outputs
                     if src[0] in cheap and src[0] not in entries and src[0] not in baked}  # fmt: skip
        # A node of one source (a cast, a transpose of a weight) would only hold a second copy
        # of it beside the parameter, where XLA folds such a change into its reader anyway.
        return tuple(sorted(w for w in frontier if len(set(plan.sources[w[0]])) >= 2))

    def values_of(wanted: tuple[tuple[int, int], ...], inputs: Mapping[int, Any]) -> dict:
        chosen: set[int] = set()
        todo = [n for n, _ in wanted]
        while todo:
            n = todo.pop()
            if n in chosen or n in constants:
                continue
            chosen.add(n)
            todo += [s[1] for s in plan.sources[n] if s[0] == "node"]
        arrays = [inputs.get(i) for i in range(len(plan.input_descs))]
        values = run_steps(arrays, chosen)
        return {w: values[w] for w in wanted}

    lowered.folded = folded
    lowered.values_of = values_of
    return lowered


def _bytes(t: Any) -> int:
    """The bytes of a tensor desc's elements."""
    return -(-t.element_count * t.data_type.bits // 8)


def _same_graph(a: GraphDesc, b: GraphDesc) -> bool:
    """The same graph: the same object, or an equal one (a compiled graph is shared by equal
    descriptions)."""
    return a is b or (hash(a) == hash(b) and a == b)


def _rolled(
    steps, graph, plan, pairs, linked, known_value, pair_lowering, runs, runs_of, fronts
) -> list:
    """``steps`` with each run of repeated blocks (``rolling``) after its first block as one
    ``RolledRun``; the runs are appended to ``runs``."""
    at = {step[0]: i for i, step in enumerate(steps)}

    def signature(step):
        n, _, sources, present, _ = step
        if isinstance(graph.nodes[n], FunctionNode):
            return None
        read = []
        for s in sources:
            if s[0] == "node":
                if s[1] not in at:
                    return None
                read.append(("node", s[2], repr(s[3:])))
            else:
                read.append((s[0], repr(s[2:])))
        pair = ()
        if n in pairs:
            p, slot, found = pairs[n]
            pair = (repr(graph.nodes[p]), slot, repr(found))
            if n in fronts:
                members, prologue = fronts[n]
                pair += (tuple(repr(graph.nodes[m]) for m in members), repr(prologue))
        elif n in runs_of:
            members, slots, found = runs_of[n]
            pair = (tuple(repr(graph.nodes[m]) for m in members), slots, repr(found))
        made = type(graph.nodes[n]).__name__, present, repr(graph.nodes[n].output_slots())
        return (repr(graph.nodes[n]), pair, n in linked, present), tuple(read), made

    def readers_after(end):
        read = {(s[1], s[2]) for step in steps[end:] for s in step[2] if s[0] == "node"}
        return read | set(plan.outputs)

    found = rolling.find_runs(steps, [signature(step) for step in steps], readers_after)
    if not found:
        return steps
    out, i = [], 0
    for run, slots, stacked, carry_keys, out_keys in found:
        out.extend(steps[i : run.start + run.period])
        lowers, knowns = [], []
        for t in range(run.period):
            n, lower, sources, _, _ = steps[run.start + run.period + t]
            same = {j: s for j, s in enumerate(sources) if slots[t][j].kind == "same"}
            if n in pairs:  # the consumer's inputs by its own positions, where the step has them
                at = fusing.pair_sources(plan, pairs, fronts, n)[1]
                own = {j: plan.sources[n][j] for j, k in at.items() if k in same}
                lowers.append(pair_lowering(n, _Known(own, known_value)))
                knowns.append({})
            elif n in runs_of:  # a run's step knows no inputs (its lowering is one per step)
                lowers.append(lower)
                knowns.append({})
            else:
                lowers.append(lower)
                knowns.append(_Known(same, known_value))
        out.append(
            rolling.RolledRun(run, steps, slots, stacked, carry_keys, out_keys, lowers, knowns)
        )
        if runs is not None:
            runs.append(run)
        i = run.start + run.period * run.repeats
    out.extend(steps[i:])
    return out


def _check_constant_inputs(constant_inputs: Any, plan: GraphPlan) -> None:
    """``compile_graph``'s ``constant_inputs``: graph input indices, each with as many elements
    as the input's sizes hold (an input that feeds no node may be given anything)."""
    if not isinstance(constant_inputs, Mapping):
        raise ValidationError(
            f"{GRAPH}: constant_inputs: expected a mapping of graph input index to value, got "
            f"{type(constant_inputs).__name__}"
        )
    for index, value in constant_inputs.items():
        if not isinstance(index, int) or not 0 <= index < len(plan.input_descs):
            raise ValidationError(
                f"{GRAPH}: constant_inputs: {index!r} is not a graph input index (the graph "
                f"has {len(plan.input_descs)} inputs)"
            )
        desc = plan.input_descs[index][1]
        size = np.size(value)
        if desc is not None and size != desc.element_count:
            raise ValidationError(
                f"{GRAPH}: constant_inputs[{index}]: {size} elements where Inputs[{index}] "
                f"has sizes {list(desc.sizes)} ({desc.element_count} elements)"
            )


class _Known(Mapping):
    """Argument position -> its value where the program fixes it, looked up when asked."""

    def __init__(self, sources: dict[int, tuple], value: Callable[[tuple], Any]):
        self._sources, self._value, self._found = sources, value, {}

    def __getitem__(self, index: int) -> Any:
        if index not in self._found:
            source = self._sources[index]  # KeyError: not an argument
            self._found[index] = self._value(source)
        if self._found[index] is None:
            raise KeyError(index)
        return self._found[index]

    def __iter__(self):
        return (i for i in self._sources if self.get(i) is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)


@functools.lru_cache(maxsize=1024)
def _compile_graph_cached(
    graph: GraphDesc,
    level: FeatureLevel,
    half: bool,
    reinterpret: bool = False,
    fast_paths: bool = True,
    roll: bool = False,
) -> CompiledGraph:
    plan = validated_plan(graph, level, reinterpret)
    return CompiledGraph(graph, level, plan, [0], half, fast_paths, None, roll)


def _several_devices(shardings: Any) -> bool:
    """Whether shardings (as ``compile_graph`` takes them) may place data on more than one
    device: a sharding over several devices, or a bare PartitionSpec (devices unknown)."""
    for leaf in jax.tree.leaves(shardings, is_leaf=lambda x: isinstance(x, P)):
        devices = getattr(leaf, "device_set", None)
        if devices is None or len(devices) > 1:
            return True
    return False


def compile_graph(
    graph: GraphDesc,
    feature_level: Any = None,
    in_shardings: Any = None,
    out_shardings: Any = None,
    *,
    allow_half_precision: bool = False,
    reinterpret_edges: bool = False,
    fast_paths: bool = True,
    constant_inputs: Mapping[int, Any] | None = None,
    roll_repeats: bool = False,
) -> CompiledGraph:
    """Validates a graph and compiles it into one function (one XLA program under jit).

    Compiling an equal graph again at the same feature level returns the same object.

    Args:
        graph: a ``GraphDesc``.
        feature_level: a ``FeatureLevel`` (or its name); ``None`` means the newest.
        in_shardings, out_shardings: as for ``compile_operator``, one per graph input/output.
        allow_half_precision: DirectML's ALLOW_HALF_PRECISION_COMPUTATION execution flag, as
            for ``compile_operator``.
        reinterpret_edges: let an intermediate edge join tensors of one data type whose sizes
            or strides differ: the consumer reads the producer's packed buffer through its own
            desc (a reshape or a stride-0 broadcast), as DirectML reinterprets the bytes. Off by
            default (edges must match exactly); the ONNX importer turns it on.
        fast_paths: as for ``compile_operator``: ``True`` lets each node's registered GPU fast
            path (``dml_jax.fastpath``) compute it when the program is lowered for CUDA;
            ``False`` lowers every node with its lax lowering. Fast paths registered as
            standalone (the element-wise kernels, fusion barriers) are used only for nodes
            without intermediate edges: elsewhere their lax form fuses into its neighbours.
            Graph epilogues (``fastpath.register_epilogue``: a GEMM node and the node that
            alone reads it as one kernel) apply with shardings over several devices too, where
            the kernel runs on each device's shards (``per_shard``) or the two nodes' lax
            lowerings run in sequence, as apart.
        constant_inputs: graph input index -> its value (NumPy, the input's sizes), for inputs
            whose values the caller fixes (a model's constants that are not parameters): the
            lowerings may read them while tracing (``fastpath.known_input``), as they read a
            ConstantDataNode's, and decide then what they would test at run time (a causal
            attention mask). The arrays passed at those positions must hold these values. A
            graph compiled with them is not cached (each call compiles anew).
        roll_repeats: trace each run of at least three equal consecutive blocks of nodes (a
            network's repeated layers, each with its own weights) as its first block and one
            ``lax.scan`` over the others (``dml_jax.graph.rolling``): the same operations on
            the same values, which XLA compiles once per run instead of once per block. On an
            H100 exported models' first calls took 0-25% less time and their calls 2-47% more
            (docs/onnx.md, "First-call time"), hence off by default; ignored with shardings
            over several devices. ``rolled`` lists the runs.

    Returns:
        A ``CompiledGraph`` (a ``CompiledOperator``): ``g(*inputs)`` takes one array per graph
        input and returns one array, or a tuple when OutputCount > 1; ``g.fn`` is the pure
        function for jit/grad/vmap; ``g.run_buffers`` is buffer mode.

    Raises:
        ValidationError: if a node or an edge breaks a rule (before anything is traced), or a
            tensor uses a 64-bit type without ``jax_enable_x64``.
    """
    level = feature_level_of(feature_level)
    if not isinstance(graph, GraphDesc):
        raise ValidationError(f"{GRAPH}: expected a GraphDesc, got {type(graph).__name__}")
    try:
        hash(graph)
    except TypeError:
        raise ValidationError(f"{GRAPH}: description is not hashable") from None
    # Over several devices graph epilogues (one kernel for two nodes) stay, their kernels run
    # on each device's shards (``fastpath``'s ``per_shard``) or giving way to the two lax
    # lowerings; repeated blocks are not rolled.
    several = _several_devices(in_shardings) or _several_devices(out_shardings)
    if constant_inputs:
        plan = validated_plan(graph, level, bool(reinterpret_edges))
        _check_constant_inputs(constant_inputs, plan)
        compiled = CompiledGraph(
            graph, level, plan, [0], bool(allow_half_precision), bool(fast_paths),
            constant_inputs, bool(roll_repeats) and not several,
        )  # fmt: skip
    else:
        compiled = _compile_graph_cached(
            graph, level, bool(allow_half_precision), bool(reinterpret_edges), bool(fast_paths),
            bool(roll_repeats) and not several,
        )  # fmt: skip
    for n, node in enumerate(graph.nodes):
        if isinstance(node, ConstantDataNode):
            continue
        check_x64(
            [(f"Nodes[{n}].{p}", t) for p, t in node.input_slots() + node.output_slots()], GRAPH
        )
    return with_shardings(compiled, in_shardings, out_shardings)
