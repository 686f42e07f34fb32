"""One import of an ONNX model compiled for one set of input shapes: ``Program`` (the imported
graph, its ``CompiledGraph`` and its jits, per platform), the XLA options a session's compiles
take (``GPU_COMPILER_OPTIONS``, ``CPU_COMPILER_OPTIONS``), ``compile_imported`` (an error in a
DML node names the ONNX node it came from), ``check_memory`` and ``explain``.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import fastpath
from ..errors import ValidationError
from ..graph import ConstantDataNode, compile_graph
from ..graph.tracing import held_constants, precomputed_outputs
from . import fetch
from .elements import ONNX, graph_dtype
from .importer import ImportedGraph

# XLA options a session's compiles take on GPUs unless the caller's compiler_options say
# otherwise: matrix products on cuBLAS, as onnxruntime and torch.compile's default mode run
# them, rather than XLA's search over Triton kernels for each one, which was most of the first
# call of the small transformers (BERT 12.3 s of compile against 1.8, for 0.11 against 0.13 ms
# a call; docs/onnx.md, "First-call time"). And products that share an operand left apart:
# XLA's DotMerger makes them one product over their weights concatenated, which, with the
# weights ``run``'s arguments, copies them at every call (a 1B-class LLaMA's decode step: its
# query-key-value and gate-up weights, 611 of the step's 1,983 us of kernels on an H200;
# benchmarks/experiments/decode_loops_gpu.py).
GPU_COMPILER_OPTIONS: dict[str, Any] = {
    "xla_gpu_enable_triton_gemm": False,
    "xla_gpu_dot_merger_threshold_mb": 0,
}

# XLA options a session's compiles take on CPUs unless the caller's compiler_options say
# otherwise: of the operations XLA's CPU backend hands to YNNPACK by default (matrix products,
# convolutions, reductions), the convolutions stay on XLA's own kernels, which ran ONNX's light
# CNNs 8-21% faster at batch 1 on two cores (ResNet-50 68 -> 61 ms; docs/onnx.md, "On the
# CPU"). The option is experimental in XLA: where this XLA does not take it, CPU sessions have
# no defaults.
CPU_COMPILER_OPTIONS: dict[str, Any] = {
    "xla_cpu_experimental_ynn_fusion_type": (
        "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT,LIBRARY_FUSION_TYPE_REDUCE"
    )
}

# On the CPU, ``run`` compiles the session's own weights into its programs as constants, up to
# this many bytes of them: XLA's CPU backend then lays each filter and matrix out for its
# kernels once, at compile time, where weights passed as arguments were copied into those
# layouts at every call (ResNet-50 101 -> 70 ms a call, AlexNet 152 -> 22, VGG-19 590 -> 214;
# docs/onnx.md, "On the CPU"), for 35-47 ms of compile per MB. ``apply`` and ``fn`` still
# take the parameters as arguments.
CPU_BAKED_WEIGHTS_MAX_BYTES = 2**30
# Except the matrices (2-D parameters of at least this many bytes: fully connected layers'
# weights), which ``run`` passes as arguments on the CPU too: the products read them as they
# are (GEMM's lowering contracts B on the axis XLA's CPU kernels want), so compiled in they
# only lengthened the compile. Random weights, batch 1, two cores (2026-11-28, first call /
# call, all compiled in -> matrices passed): AlexNet 3.32 s / 10.5 ms -> 1.06 s / 10.3 ms,
# ZFNet-512 5.03 / 19.5 -> 1.94 / 19.7, VGG-19 9.13 / 99.7 -> 3.34 / 90.9 (onnxruntime's
# session and first call 0.46, 0.70 and 1.15 s); a 4-layer encoder of BERT-base's sizes
# exported by PyTorch (MatMul by {K, N} weights), 128 tokens: 2.62 s / 21.4 ms -> 0.93 / 21.7;
# ResNet-50 and the networks without such a matrix unchanged (docs/onnx.md, "Weights compiled
# in").
CPU_MATRIX_ARGUMENT_MIN_BYTES = 2**20

# Where ``run`` passes the session's parameters as arguments (off the CPU), it compiles in
# those of at most this many bytes (a quantizer's scale, a scalar factor): XLA then folds what
# depends on them alone, where as arguments each was a small kernel at every call (a static
# QDQ ResNet-50 on an H200: about 200 of its 331 kernels computed scalars from its quantizers'
# scales). ``apply`` and ``fn`` still take them as arguments.
RUN_BAKED_PARAM_MAX_BYTES = 64

# Where ``run`` passes the session's parameters as arguments (a GPU, or a CPU past the bytes
# above), the program's other constants of at least this many bytes (4-bit weights, held by
# constant data nodes; codes that converters unpack at import) enter as arguments too, under
# keys of its parameter mapping that start with ``HELD`` (``Program.held``), instead of being
# compiled in: XLA took 60-65 s to compile each decode program of a 1B-class int4 model with
# its half-gigabyte of 4-bit codes in it, against about 5.6 s for the float16 model, whose
# weights are arguments (benchmarks/experiments/README.md, ``int4_compile_gpu.py``).
HELD_MIN_BYTES = 2**14
HELD = "\x00held:"
# Under keys that start with this, ``run`` passes the outputs of nodes that depend on weights
# alone (``Program.folded``: a JOIN of MatMulNBits scales, say), computed once per session:
# XLA computes them at every call otherwise, even inside a decode loop (the 1B-class int4
# decoder's JOINs of scales: 32 kernels a token, 75 us of 1,403 on an H100).
FOLDED = HELD + "n"


class Held(NamedTuple):
    """A constant ``run`` passes as an argument (``Program.held``): ``same``, a key equal for
    equal values across the session's programs (they share one device copy); ``value``, a
    function giving it as NumPy; ``target``, what the program reads it as: (node index,
    DataType) of a constant data node, or the index of a constant graph input."""

    same: Any
    value: Callable[[], np.ndarray]
    target: Any


def _constant_key(j: int) -> str:
    """The parameter key under which ``run`` passes constant graph input ``j`` (``Held``)."""
    return f"{HELD}c{j}"


@functools.cache
def cpu_compiler_defaults() -> dict[str, Any]:
    """``CPU_COMPILER_OPTIONS`` where this XLA takes them (``check_compiler_options``), else
    {}."""
    try:
        return check_compiler_options(CPU_COMPILER_OPTIONS, ONNX) or {}
    except ValidationError:
        return {}


def compiler_options_for(options: Mapping[str, Any] | None, platform: str) -> dict[str, Any]:
    """The XLA options of a session's compiles on ``platform``: ``GPU_COMPILER_OPTIONS`` on
    GPUs, ``cpu_compiler_defaults()`` on CPUs, with the caller's checked ``options`` over
    them."""
    defaults = {"gpu": GPU_COMPILER_OPTIONS, "cpu": cpu_compiler_defaults()}.get(platform, {})
    return {**defaults, **(options or {})}


def check_compiler_options(options: Any, where: str) -> dict[str, Any] | None:
    """XLA options for the programs' compiles (``jax.jit``'s ``compiler_options``), checked
    before anything is traced: a mapping of option names to a bool, int, float or str, each
    of which XLA accepts (a trivial program is compiled with them). None or empty: None."""
    if options is None:
        return None
    if not isinstance(options, Mapping):
        raise ValidationError(
            f"{where}: compiler_options must be a mapping of XLA option names to values, "
            f"got {type(options).__name__}"
        )
    out = dict(options)
    for name, value in out.items():
        if not isinstance(name, str) or not isinstance(value, bool | int | float | str):
            raise ValidationError(
                f"{where}: compiler_options[{name!r}] must map a name to a bool, int, float "
                f"or str, got {type(value).__name__}"
            )
    if not out:
        return None
    try:
        jax.jit(lambda: 0, compiler_options=out).lower().compile()
    except (jax.errors.JaxRuntimeError, TypeError, ValueError) as e:  # XLA names the option
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ValidationError(f"{where}: compiler_options: {reason}") from None
    return out


class Program:
    """One import of the model for one set of input shapes (and static input values).

    Attributes:
        imported: the ``ImportedGraph``.
        graph: the ``CompiledGraph``.
        needs_x64: the DML graph holds a 64-bit (FLOAT64) tensor.
        layout: on a session with a mesh, the shardings of its inputs, parameters and outputs
            (``placement.ProgramLayout``), which ``apply`` imposes; else None.
        jitted: ``apply`` under ``jax.jit``, with the session's XLA ``compiler_options``.
            ``jitted_for(platform)`` (``jitted_on(device)``) is the same traced for one platform
            alone.
        segments: the values read on the host before this program runs, which it was imported
            for (``NeedsSizes``: ``(key, values)`` in the order run() computes them).
    """

    def __init__(
        self,
        imported: ImportedGraph,
        graph: Any,
        layout: Any = None,
        compiler_options: Mapping[str, Any] | None = None,
        segments: tuple[tuple[str, tuple[int, ...]], ...] = (),
    ):
        self.imported = imported
        self.graph = graph
        self.layout = layout
        self.segments = segments
        nodes = imported.graph.nodes if imported.graph is not None else ()
        descs = [d for n in nodes for d in _tensor_descs(n)]
        self.needs_x64 = any(d is not None and d.data_type.is_64bit for d in descs)
        self.jitted = jax.jit(self.apply, compiler_options=compiler_options or None)
        self._compiler_options = compiler_options
        self._jitted_for: dict[tuple, Any] = {}
        self.packed_layouts: dict[tuple, Any] = {}  # ``fetch.pack``'s, by input signature

    def jitted_on(self, device: Any, packed: bool = False) -> Any:
        """``apply`` under ``jax.jit`` for calls whose arrays are on ``device``'s platform
        (``jitted_for`` that platform)."""
        return self.jitted_for(fastpath.platform_of(device), packed)

    def jitted_for(self, platform: str | None, packed: bool = False) -> Any:
        """``apply`` under ``jax.jit``, traced inside ``fastpath.target_platform(platform)``,
        so that each platform choice of the lowerings (a fast path or its lax lowering; a
        convolution's CPU form or XLA's) traces the branch of that platform alone, not every
        one (on an H100 ConvNeXt-T's trace and lowering took 2.4 s less; docs/onnx.md,
        "First-call time"). ``jitted`` where the platform is None (not one the lowerings
        choose by). ``packed``: its outputs' bytes as one flat buffer instead
        (``fetch.pack``; ``packed_layouts`` says where each output is in it)."""
        if platform is None and not packed:
            return self.jitted
        fn = self._jitted_for.get((platform, packed))
        if fn is None:

            def apply_on(params: Mapping[str, Any], *inputs: Any) -> tuple:
                with fastpath.target_platform(platform):
                    outs = self.apply(params, *inputs)
                return fetch.pack(outs, inputs, self.packed_layouts) if packed else outs

            fn = jax.jit(apply_on, compiler_options=self._compiler_options or None)
            self._jitted_for[(platform, packed)] = fn
        return fn

    @functools.cached_property
    def held(self) -> dict[str, Held]:
        """The constants ``run`` passes as arguments (``HELD_MIN_BYTES``), by their key in the
        parameter mapping: a constant data node once per data type its readers read it as
        (``tracing.held_constants``; 4-bit elements as DirectML's packed bytes), a constant
        graph input that is no parameter as it is."""
        from ..graph.validation import constant_elements

        imp, out = self.imported, {}
        if imp.graph is None:
            return out
        nodes = imp.graph.nodes
        for e in imp.graph.intermediate_edges:
            node = nodes[e.from_node_index]
            if not isinstance(node, ConstantDataNode) or node.data_size < HELD_MIN_BYTES:
                continue
            t = nodes[e.to_node_index].edge_slots("input")[e.to_node_input_index][1].data_type
            # 4-bit elements as their packed bytes: half the size, and what kernels read
            value = (functools.partial(np.frombuffer, node.data, np.uint8) if t.bits == 4
                     else functools.partial(constant_elements, node, t))  # fmt: skip
            out[f"{HELD}{e.from_node_index}:{t.name}"] = Held((node, t), value,
                                                               (e.from_node_index, t))  # fmt: skip
        for j, (c, p) in enumerate(zip(imp.constants, imp.params)):
            if p is None and c.nbytes >= HELD_MIN_BYTES:
                c = np.ascontiguousarray(c)
                digest = hashlib.blake2b(c.data, digest_size=16).digest()
                same = ("constant", c.shape, c.dtype.str, digest)
                out[_constant_key(j)] = Held(same, lambda c=c: c, j)
        return out

    @functools.cached_property
    def small_params(self) -> frozenset[int]:
        """The constant graph inputs (indices) that are parameters of at most
        ``RUN_BAKED_PARAM_MAX_BYTES``: those ``run`` compiles in off the CPU."""
        imp = self.imported
        return frozenset(
            j
            for j, (c, p) in enumerate(zip(imp.constants, imp.params))
            if p is not None and c.nbytes <= RUN_BAKED_PARAM_MAX_BYTES
        )

    @functools.cached_property
    def folded(self) -> dict[str, tuple[int, int]]:
        """The node outputs that the program's constants alone determine and that ``run``
        computes once per session (``fold``) and passes, under ``FOLDED`` keys, rather than
        the program computing them at every call (``CompiledGraph.folded`` says which): by
        key, (node index, output slot). Empty on a mesh."""
        imp = self.imported
        if self.graph is None or self.layout is not None:
            return {}
        count = len(imp.input_names)
        held = {h.target for h in self.held.values() if isinstance(h.target, int)}
        baked = frozenset(  # what ``run`` compiles in: the smallest parameters, constants not held
            count + j
            for j, p in enumerate(imp.params)
            if (j in self.small_params if p is not None else j not in held)
        )
        found = self.graph.folded(frozenset(range(count, count + len(imp.constants))), baked)
        return {f"{FOLDED}{n}:{k}": (n, k) for n, k in found}

    def fold(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The ``folded`` outputs for ``params`` (the parameters ``run`` passes, held
        constants included), by key, as the program's trace computes them."""
        if not self.folded:
            return {}
        imp = self.imported
        count = len(imp.input_names)
        args = self._graph_args(params, [None] * count)
        inputs = {count + j: x for j, x in enumerate(args[count:])}
        with self._held(params):
            values = self.graph.fold(tuple(self.folded.values()), inputs)
        return {k: values[w] for k, w in self.folded.items()}

    def _held(self, params: Mapping[str, Any]):
        """The context in which the graph reads the held constants ``params`` gives."""
        given = any(isinstance(k, str) and k.startswith(HELD) for k in params)
        data = {h.target: params[k] for k, h in (self.held.items() if given else ())
                if isinstance(h.target, tuple) and k in params}  # fmt: skip
        return held_constants(self.imported.graph, data) if data else contextlib.nullcontext()

    def apply(self, params: Mapping[str, Any], *inputs: Any) -> tuple:
        """The model's outputs for ``inputs`` (every model input, in order; those the program
        took as constants are ignored) with ``params`` replacing initializers by name (and
        holding, under ``HELD`` keys, the constants ``held`` names and, under ``FOLDED``
        keys, the outputs ``folded`` names, where the caller passes them)."""
        imp = self.imported
        outs: tuple = ()
        if self.graph is not None:
            # Split over devices, kernels XLA cannot partition give way to lax (fastpath.sharded).
            split = self.layout is not None and fastpath.spread(self.layout.graph_inputs)
            folded = {w: params[k] for k, w in self.folded.items() if k in params}
            with (
                fastpath.sharded() if split else contextlib.nullcontext(),
                self._held(params),
                precomputed_outputs(imp.graph, folded) if folded else contextlib.nullcontext(),
            ):
                outs = self.graph.fn(*self._graph_args(params, inputs))
            outs = outs if isinstance(outs, tuple) else (outs,)
        computed = iter(outs)
        outs = tuple(next(computed) if c is None else jnp.asarray(c) for c in imp.output_consts)
        result = []
        placed = self.layout.outputs if self.layout is not None else (None,) * len(outs)
        for y, shape, dtype, s in zip(outs, imp.output_shapes, imp.output_dtypes, placed):
            y = y.reshape(shape)
            if dtype == np.bool_:
                y = y != 0
            elif jax.config.read("jax_enable_x64") or dtype.itemsize < 8:
                y = y.astype(dtype)
            elif dtype.kind == "f":  # float64 without x64: float32 here, the host casts back
                y = y.astype(jax.dtypes.canonicalize_dtype(dtype))
            result.append(y if s is None else jax.lax.with_sharding_constraint(y, s))
        return tuple(result)

    def operators(self) -> list[str]:
        """The DML operator types of the program in node order (``GEMM``, ``CONVOLUTION``...),
        without the identity nodes through which graph inputs and constants enter and the
        constant data nodes that hold 4-bit constants."""
        graph = self.imported.graph
        if graph is None:
            return []
        entries = {e.to_node_index for e in graph.input_edges}
        return [
            n.operator_type.removeprefix("DML_OPERATOR_")
            for k, n in enumerate(graph.nodes)
            if not isinstance(n, ConstantDataNode)
            and (k not in entries or n.operator_type != "DML_OPERATOR_ELEMENT_WISE_IDENTITY")
        ]

    def _graph_args(self, params: Mapping[str, Any], inputs: Sequence[Any]) -> list:
        imp = self.imported
        descs = self.graph.input_descs
        args = []
        for i, (x, dtype) in enumerate(zip(inputs, imp.input_dtypes)):
            if descs[i] is None or x is None:
                args.append(None)
                continue
            x = jnp.asarray(x)
            args.append(x.astype(graph_dtype(dtype)).reshape(descs[i].sizes))
        count = len(imp.input_names)
        for j, (c, p) in enumerate(zip(imp.constants, imp.params)):
            value = params.get(p) if p is not None else None
            if value is None:
                args.append(c if p is not None else params.get(_constant_key(j), c))
            else:
                args.append(jnp.asarray(value).astype(c.dtype).reshape(descs[count + j].sizes))
        if self.layout is not None:
            # The layout is part of the function: under any jit the arguments start where the
            # session's rules put them, and GSPMD partitions the program from there.
            args = [
                x if s is None or x is None else jax.lax.with_sharding_constraint(x, s)
                for x, s in zip(args, self.layout.graph_inputs)
            ]
        return args


def _tensor_descs(node: Any) -> tuple:
    """A node's input and output tensor descs (None for absent optional ones); a constant data
    node has none of its own (each reader reads its bytes through the reader's desc)."""
    if isinstance(node, ConstantDataNode):
        return ()
    return tuple(d for _, d in node.input_slots() + node.output_slots())


def check_memory(imported: ImportedGraph, max_memory: int | None) -> None:
    """Refuses a program whose tensors need more than ``max_memory`` bytes, before it is
    compiled or run: its weights and constants, the model's inputs and outputs, and next to
    them the tensors of its largest node (the budget of ``dml-jax run --max-memory``, which
    counts a dispatch's tensors next to the resources the same way)."""
    if not max_memory:
        return
    fixed = imported.constant_bytes
    for shape, dtype in zip(imported.input_shapes, imported.input_dtypes):
        fixed += math.prod(shape) * np.dtype(dtype).itemsize
    for shape, dtype in zip(imported.output_shapes, imported.output_dtypes):
        fixed += math.prod(shape) * np.dtype(dtype).itemsize
    largest, where = 0, ""
    nodes = imported.graph.nodes if imported.graph is not None else ()
    for k, node in enumerate(nodes):
        descs = [d for d in _tensor_descs(node) if d is not None]
        need = sum(d.element_count * d.data_type.size for d in descs)
        if need > largest:
            origin = imported.origin[k]
            largest = need
            where = imported.onnx_nodes[origin][0] if 0 <= origin < len(imported.onnx_nodes) else ""
    if fixed + largest > max_memory:
        at = f"{where}: " if where and largest > fixed else ""
        raise ValidationError(
            f"{ONNX}: {at}the model's tensors need {fixed + largest} bytes (weights, inputs and "
            f"outputs: {fixed}; the largest node's tensors: {largest}), more than the memory "
            f"budget of {max_memory} bytes (max_memory, --max-memory)"
        )


def compile_imported(imported: ImportedGraph, **options: Any) -> Any:
    """``compile_graph`` of an import; an error in a DML node names the ONNX node it came
    from. None when every output is known at import."""
    import re

    if imported.graph is None:
        return None
    nodes = imported.graph.nodes
    wide = any(d is not None and d.data_type.is_64bit for n in nodes for d in _tensor_descs(n))
    from ..enums import DataType
    from ..support import beyond_tables

    try:
        with (
            jax.enable_x64(True) if wide else contextlib.nullcontext(),
            beyond_tables({DataType.FLOAT64}),
        ):
            # The constants that are not parameters are fixed: the lowerings may read them
            # while tracing (a causal attention mask: cuDNN's causal mode, the lax lowering's
            # tiles), as they read a graph's ConstantDataNode.
            count = len(imported.input_names)
            fixed = {count + j: c for j, (c, p) in enumerate(zip(imported.constants,
                                                                 imported.params)) if p is None}  # fmt: skip
            return compile_graph(
                imported.graph, reinterpret_edges=True, constant_inputs=fixed, **options
            )
    except ValidationError as e:
        text = str(e)
        m = re.match(r"DML_GRAPH: Nodes\[(\d+)\]: ", text)
        # An edge between two nodes (types that disagree): named by the node it enters.
        edge = re.match(r"DML_GRAPH: .*?Nodes\[\d+\]\.\w+ to Nodes\[(\d+)\]", text)
        if m is None and edge is None:
            if text.startswith(f"{ONNX}: "):
                raise
            raise ValidationError(f"{ONNX}: the imported graph: {text}") from None
        origin = imported.origin[int((m or edge).group(1))]
        where = imported.onnx_nodes[origin][0] if 0 <= origin < len(imported.onnx_nodes) else ""
        rest = text[m.end() :] if m else text.removeprefix("DML_GRAPH: ")
        raise ValidationError(f"{ONNX}: {where or 'the imported graph'}: {rest}") from None


def explain(imported: ImportedGraph) -> str:
    """Each ONNX node of an import with the DML operators it became (after the graph
    optimizations: a node whose operators a rewrite removed or merged into another node's says
    ``rewritten``), then the rewrites that fired and how often."""
    ops: dict[int, list[str]] = {}
    nodes = imported.graph.nodes if imported.graph is not None else ()
    for desc, origin in zip(nodes, imported.origin):
        ops.setdefault(origin, []).append(desc.operator_type.removeprefix("DML_OPERATOR_"))
    lines = []
    for k, (where, how) in enumerate(imported.onnx_nodes):
        names = ops.get(k, [])
        detail = f": {', '.join(names)}" if names else ""
        if not names and imported.optimizations and how.startswith(("dml", "jax")):
            detail = " (rewritten)"
        lines.append(f"{where}: {how}{detail}")
    if imported.optimizations:
        fired = ", ".join(f"{name} x{count}" for name, count in imported.optimizations)
        lines.append(f"optimizations: {fired}")
    return "\n".join(lines)
