"""GPU fast paths: alternative lowerings of an operator, registered per operator type.

An operator's ``lower`` in ``ops/`` is pure ``jax.lax``: it runs everywhere and is the reference.
A fast path is a second lowering for some of its cases (``dml_jax.kernels`` registers Pallas
kernels and 32-bit word forms of narrow-type moves), used only when the program is lowered for
CUDA. ``lowering`` is the one place that chooses between them; compile and graph call it.

A fast path never changes what is differentiated: derivatives always come from the lax lowering
(a ``custom_jvp`` around the platform choice), so autodiff never reaches a kernel.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.extend.core
import jax.numpy as jnp
from jax import lax


@dataclass(frozen=True)
class FastPath:
    """One registered fast path.

    Attributes:
        operator_type: the ``DML_OPERATOR_*`` name it lowers.
        name: its name, unique per operator type (``"kernel"``, ``"words"``, ...).
        applies: ``applies(desc) -> bool``, a predicate on the descriptor alone (sizes and data
            types are in its TensorDescs); nothing is traced.
        lower: ``lower(desc, *arrays) -> tuple``, the CUDA lowering, with the contract of the
            operator's lax ``lower`` (same inputs, same output shapes, dtypes and values).
        standalone: used only where the operator has no neighbour to fuse with (compiled alone,
            or a graph node without intermediate edges). An element-wise kernel moves the bytes
            XLA's own loop would, but it is a fusion barrier: in a graph the lax form fuses into
            its producer and consumer and moves nothing (ResNet-50 float16, batch 256, on an
            H200: 22.4k images/s with the element-wise kernels in the graph, 31.0k without).
        per_shard: ``per_shard(desc) -> fn or None``: where the lowering holds a kernel XLA
            cannot partition, ``fn`` (the contract of ``lower`` on the arrays alone) runs it on
            each device's shards in a program split over devices (``custom_partitioning``,
            with the collectives the operator needs), instead of the lax lowering.
    """

    operator_type: str
    name: str
    applies: Callable[[Any], bool]
    lower: Callable[..., tuple]
    standalone: bool = False
    per_shard: Callable[[Any], Callable | None] | None = None


_FAST_PATHS: dict[str, dict[str, FastPath]] = {}


def register_fast_path(
    operator_type: str,
    name: str,
    applies: Callable[[Any], bool],
    lower: Callable[..., tuple],
    standalone: bool = False,
    per_shard: Callable[[Any], Callable | None] | None = None,
) -> FastPath:
    """Registers a CUDA lowering for the descriptors of ``operator_type`` that ``applies`` accepts.

    Where several fast paths of one operator type apply, the first registered is used;
    ``standalone`` and ``per_shard`` as ``FastPath`` says.

    Raises:
        ValueError: if ``(operator_type, name)`` is already registered.
    """
    paths = _FAST_PATHS.setdefault(operator_type, {})
    if name in paths:
        raise ValueError(f"fast path {name!r} of {operator_type} is already registered")
    paths[name] = FastPath(operator_type, name, applies, lower, standalone, per_shard)
    return paths[name]


def fast_paths(operator_type: str) -> tuple[FastPath, ...]:
    """The fast paths registered for ``operator_type``, in registration order."""
    return tuple(_FAST_PATHS.get(operator_type, {}).values())


def registered() -> tuple[FastPath, ...]:
    """Every registered fast path, by operator type, each type's in registration order."""
    return tuple(p for t in sorted(_FAST_PATHS) for p in _FAST_PATHS[t].values())


def select(desc: Any, fusible: bool = False) -> FastPath | None:
    """The first fast path of ``desc``'s operator type that applies to it, or None; with
    ``fusible`` (the operator has graph neighbours) standalone fast paths are passed over."""
    for path in fast_paths(desc.operator_type):
        if not (fusible and path.standalone) and path.applies(desc):
            return path
    return None


_KNOWN: contextvars.ContextVar[dict | None] = contextvars.ContextVar(
    "dml_jax_known_inputs", default=None
)


@contextlib.contextmanager
def known_inputs(values: dict[int, Any]):
    """While a node is lowered: the values of its inputs that the program holds as constants
    (a graph's ``ConstantDataNode``), by argument position, as NumPy arrays."""
    token = _KNOWN.set(values)
    try:
        yield
    finally:
        _KNOWN.reset(token)


def known_input(index: int) -> Any:
    """The value of argument ``index`` of the lowering being traced where it is a constant of
    the program (NumPy, the argument's shape), or None where it is known only at run time.

    A fast path may use it to decide at trace time what it would otherwise test at run time
    (MULTIHEAD_ATTENTION recognizes a constant causal mask); the lowering's result must be the
    same either way, since the argument it receives holds the same values.
    """
    known = _KNOWN.get()
    return None if known is None else known.get(index)


# Traced 4-bit arrays made from packed bytes while a graph is traced (``packed_sources``): id
# -> (the array, its bytes).
_PACKED: contextvars.ContextVar[dict | None] = contextvars.ContextVar(
    "dml_jax_packed_sources", default=None
)


@contextlib.contextmanager
def packed_sources():
    """While a graph is traced: the 4-bit arrays its constants' packed bytes became
    (``note_packed``), for lowerings that read the bytes instead (``packed_bytes``)."""
    token = _PACKED.set({})
    try:
        yield
    finally:
        _PACKED.reset(token)


def note_packed(codes: Any, raw: Any) -> None:
    """``codes`` (4-bit elements, in order) are ``raw``'s bytes viewed two elements a byte,
    element 0 in the low nibble (DirectML's packing)."""
    found = _PACKED.get()
    if found is not None:
        found[id(codes)] = (codes, raw)


def packed_bytes(codes: Any) -> Any:
    """The bytes ``codes`` were viewed from (``note_packed``), flat, or None: a kernel that
    reads bytes takes them as they are rather than packing the elements again (a pass over
    them in XLA's program where the compiler does not cancel the two views)."""
    found = _PACKED.get()
    entry = None if found is None else found.get(id(codes))
    return entry[1] if entry is not None and entry[0] is codes else None


_TARGET: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "dml_jax_target_platform", default=None
)


@contextlib.contextmanager
def target_platform(platform: str | None):
    """While a program is traced for one known platform (``"cuda"``, ``"cpu"``, ...; None:
    unknown): ``platform_choice`` traces that platform's branch alone.

    A function traced without it works on every platform, since ``lax.platform_dependent``
    traces every branch and XLA keeps the one of the platform it compiles for; tracing the
    others costs first-call time (each fast path's lax lowering beside it, each CPU form of a
    convolution beside XLA's). Set it only inside a function whose traces run on that
    platform alone (``jax.jit`` caches a trace without this context in its key): an ONNX
    session's own programs (``program.Program.jitted_for``) do.
    """
    token = _TARGET.set(platform)
    try:
        yield
    finally:
        _TARGET.reset(token)


def target() -> str | None:
    """The platform the trace in progress is for (``target_platform``), or None: every one."""
    return _TARGET.get()


_SHARDED: contextvars.ContextVar[bool] = contextvars.ContextVar("dml_jax_sharded", default=False)

# Whether a fast path with a ``per_shard`` function runs its kernel on each device's shards in a
# program split over devices (False: it gives way to lax there, as the others do). Read when a
# program is traced.
PER_SHARD = True

# Primitives that XLA's SPMD partitioner cannot split: a fast path whose lowering holds one would
# run whole on every device, its sharded inputs gathered first. A Pallas kernel's launch is
# ``pallas_call`` in jax 0.10; from 0.11 a Mosaic GPU kernel traces to ``mpmd_map``.
OPAQUE_PRIMITIVES = frozenset({"pallas_call", "mpmd_map"})


@contextlib.contextmanager
def sharded(on: bool = True):
    """While a program whose arrays XLA splits over several devices is traced: a fast path whose
    lowering holds a kernel XLA cannot partition (``OPAQUE_PRIMITIVES``: a Pallas call, which
    the partitioner would run whole on every device after gathering its inputs) runs it on
    each device's shards where it has a ``per_shard`` function (and ``PER_SHARD`` is on), else
    steps aside for the lax lowering, which XLA partitions; fast paths built on calls with
    their own partitioning rules (cuDNN's attention) and those written in lax stay. An ONNX session on a
    mesh traces its programs so; a trace under a context mesh of more than one device
    (``jax.set_mesh``, ``jax.sharding.use_mesh``) is taken as sharded without it, and
    ``compile_operator`` / ``compile_graph`` with shardings over several devices trace so. As
    with ``target_platform``, set it inside a function of its own (``jax.jit`` keys a trace
    without this context): ``jax.jit(lambda x: ...)`` around ``op.fn``, not ``op.fn`` itself
    where that is also traced unsharded."""
    token = _SHARDED.set(on)
    try:
        yield
    finally:
        _SHARDED.reset(token)


def spread(shardings: Any) -> bool:
    """Whether any of ``shardings`` (None entries allowed) spans more than one device: a
    program laid out so is traced ``sharded``."""
    return any(getattr(getattr(s, "mesh", None), "size", 1) > 1 for s in shardings or ())


def partitioned() -> bool:
    """Whether the trace in progress is of a program split over several devices (``sharded``,
    or a context mesh of more than one device)."""
    if _SHARDED.get():
        return True
    mesh = jax.sharding.get_abstract_mesh()
    return not mesh.empty and mesh.size > 1


def opaque(fn: Callable, *arrays: Any) -> bool:
    """Whether ``fn(*arrays)`` traces to a primitive of ``OPAQUE_PRIMITIVES`` (at any depth)."""
    specs = [jax.ShapeDtypeStruct(jnp.shape(a), jnp.result_type(a)) for a in arrays]
    return _holds(jax.make_jaxpr(fn)(*specs).jaxpr)


def _holds(jaxpr: Any) -> bool:
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in OPAQUE_PRIMITIVES:
            return True
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            if _holds(sub):
                return True
    return False


def platform_of(device: Any) -> str | None:
    """The ``lax.platform_dependent`` name of ``device``'s platform (``"cuda"`` for a CUDA
    GPU), or None where it is not one this project chooses by."""
    platform = getattr(device, "platform", None)
    if platform == "cpu":
        return "cpu"
    if platform == "gpu" and cuda_present() and device in jax.devices("cuda"):
        return "cuda"
    return None


def platform_choice(*args: Any, default: Callable, **branches: Callable) -> Any:
    """``lax.platform_dependent(*args, default=..., **branches)``, or, inside
    ``target_platform``, the target's branch (else ``default``) alone, traced as a plain call."""
    chosen = _TARGET.get()
    if chosen is not None:
        return branches.get(chosen, default)(*args)
    return lax.platform_dependent(*args, default=default, **branches)


@functools.lru_cache(maxsize=1)
def cuda_present() -> bool:
    """Whether this process has a CUDA backend (checked once)."""
    try:
        return bool(jax.devices("cuda"))
    except RuntimeError:
        return False


def cuda_compiles(fn: Callable, inputs: tuple) -> bool:
    """Whether ``jax.jit(fn)`` traces and compiles for the first CUDA device, for arguments of
    ``inputs`` (TensorDescs, in order).

    For fast paths built on libraries whose support depends on the installed version and the GPU
    (cuDNN's attention): jax raises while tracing, XLA while compiling, for what they
    cannot run, and the predicate that asks this then leaves the case to the lax lowering
    instead of failing the program. Nothing runs; the answer costs one compilation.
    """
    try:
        device = jax.devices("cuda")[0]
        sharding = jax.sharding.SingleDeviceSharding(device)
        args = [jax.ShapeDtypeStruct(t.sizes, t.dtype, sharding=sharding) for t in inputs]
        jax.jit(fn).lower(*args).compile()
    except Exception:  # noqa: BLE001 - jax, XLA and cuDNN raise various errors; lax computes it
        return False
    return True


def _platform_choice(cuda: Callable, default: Callable) -> Callable:
    """``lax.platform_dependent(cuda=..., default=...)`` that stays a platform choice under vmap.

    Batched as an ordinary conditional, the choice would be traced with both branches, and the
    CUDA branch (a Pallas kernel) cannot be lowered for a CPU device of the same program. The
    rule batches each branch on its own (a kernel's own vmap rule folds the batch into it) and
    chooses again, so every level of vmap keeps one branch per platform.
    """

    @jax.custom_batching.custom_vmap
    def choose(*arrays):
        return platform_choice(*arrays, cuda=cuda, default=default)

    @choose.def_vmap
    def _rule(axis_size, in_batched, *arrays):
        in_axes = tuple(0 if b else None for b in in_batched)
        batched = _platform_choice(
            jax.vmap(cuda, in_axes=in_axes, axis_size=axis_size),
            jax.vmap(default, in_axes=in_axes, axis_size=axis_size),
        )
        out = batched(*arrays)
        return out, tuple(True for _ in out)

    return choose


def lowering(
    spec: Any, desc: Any, fast_paths: bool = True, fusible: bool = False
) -> Callable[..., tuple]:
    """The function ``(*arrays) -> tuple`` that computes ``desc``.

    Args:
        spec: the operator's ``OperatorSpec`` (its ``lower`` is the lax lowering).
        desc: the validated operator description.
        fast_paths: ``False`` gives the lax lowering whatever the platform (for benchmarks).
        fusible: the operator is a graph node with neighbours (``select``).

    Returns:
        The lax lowering ``spec.lower(desc, *arrays)`` when ``fast_paths`` is off, no CUDA
        device is present (so CPU-only programs trace exactly the lax code) or no fast path
        applies; otherwise ``lax.platform_dependent(*arrays, cuda=<fast path>, default=<lax>)``,
        so the fast path is lowered only for CUDA and every other platform of the same program
        gets the lax lowering. Derivatives come from the lax lowering in both cases.
    """

    def lax_lowering(*arrays):
        return tuple(spec.lower(desc, *arrays))

    if not (fast_paths and cuda_present()):
        return lax_lowering
    path = select(desc, fusible)
    if path is None:
        return lax_lowering

    def cuda(*arrays):
        return tuple(path.lower(desc, *arrays))

    per_shard = path.per_shard(desc) if path.per_shard is not None else None
    return _choice_with_lax_derivatives(cuda, lax_lowering, per_shard)


def _choice_with_lax_derivatives(
    cuda: Callable, lax_lowering: Callable, per_shard: Callable | None = None
) -> Callable:
    """The platform choice between ``cuda`` and ``lax_lowering``, differentiated as the latter.
    In a program split over devices, a ``cuda`` that holds a kernel XLA cannot partition gives
    way to ``per_shard`` (the kernel run on each device's shards) where there is one, else to
    ``lax_lowering``.

    One traced function per target platform (``target_platform``): jax caches what a custom
    derivative or batching rule traced by the arguments' shapes alone, so a function traced for
    CUDA alone must not be the one traced for every platform."""
    runs: dict[tuple, Callable] = {}
    kernels: dict[tuple, bool] = {}  # whether ``cuda`` holds an opaque kernel, by shapes

    def by_target(*arrays):
        chosen = _TARGET.get()
        fn = cuda
        if chosen in (None, "cuda") and partitioned():
            key = tuple((jnp.shape(a), jnp.result_type(a)) for a in arrays)
            if key not in kernels:
                kernels[key] = opaque(cuda, *arrays)
            if kernels[key]:  # XLA would gather its inputs and run it whole on every device
                if per_shard is None or not PER_SHARD:
                    return lax_lowering(*arrays)
                fn = per_shard
        run = runs.get((chosen, fn is cuda))
        if run is None:
            run = runs[chosen, fn is cuda] = _run_for(chosen, fn, lax_lowering)
        return run(*arrays)

    return by_target


def _batched_as(kernel: Callable, lax_lowering: Callable) -> Callable:
    """``kernel`` (a graph step's fused kernel, which has no batch rule of its own), batched
    under vmap as ``lax_lowering``, its contract, is."""
    fn = jax.custom_batching.custom_vmap(kernel)

    @fn.def_vmap
    def _rule(axis_size, in_batched, *arrays):
        in_axes = tuple(0 if b else None for b in in_batched)
        out = jax.vmap(lax_lowering, in_axes=in_axes, axis_size=axis_size)(*arrays)
        return out, tuple(True for _ in out)

    return fn


def _run_for(target: str | None, cuda: Callable, lax_lowering: Callable) -> Callable:
    if target not in (None, "cuda"):
        return lax_lowering
    # For CUDA alone the fast path is batched by its own rules (a kernel's vmap rule).
    choose = cuda if target == "cuda" else _platform_choice(cuda, lax_lowering)

    @jax.custom_jvp
    def run(*arrays):
        return choose(*arrays)

    @run.defjvp
    def _run_jvp(primals, tangents):
        return jax.jvp(lax_lowering, primals, tangents)

    return run


# ---------------------------------------------------------------------------------------------
# Epilogues: a graph node computed inside the lowering of the node that feeds it


@dataclass(frozen=True)
class Epilogue:
    """A CUDA lowering of two graph nodes as one: ``producer`` (an operator type) whose one
    output is read by ``consumer`` alone, at the consumer's input ``slot``.

    Attributes:
        applies: ``applies(producer_desc, consumer_desc, slot) -> bool``, on descriptors alone.
        lower: ``lower(producer_desc, consumer_desc, slot, producer_arrays, other_arrays)``
            -> the consumer's outputs (a tuple), where ``other_arrays`` are the consumer's
            inputs but ``slot``, in order. The contract is the two lax lowerings in sequence:
            the producer's output rounded to its data type, then the consumer.
    """

    producer: str
    consumer: str
    name: str
    applies: Callable[[Any, Any, int], bool]
    lower: Callable[..., tuple]
    per_shard: Callable[[Any, Any, int], Callable | None] | None = None


_EPILOGUES: dict[tuple[str, str], dict[str, Epilogue]] = {}


def register_epilogue(
    producer: str, consumer: str, name: str, applies: Callable, lower: Callable,
    per_shard: Callable | None = None,
) -> Epilogue:  # fmt: skip
    """Registers a CUDA lowering of a ``producer`` node and the ``consumer`` node that alone
    reads its output (``Epilogue``); ``graph.compile_graph`` uses it where ``applies``.
    ``per_shard(producer_desc, consumer_desc, slot) -> fn or None``: as ``FastPath.per_shard``,
    ``fn`` taking the producer's arrays, then the consumer's others.

    Raises:
        ValueError: if ``(producer, consumer, name)`` is already registered.
    """
    found = _EPILOGUES.setdefault((producer, consumer), {})
    if name in found:
        raise ValueError(f"epilogue {name!r} of {producer} -> {consumer} is already registered")
    found[name] = Epilogue(producer, consumer, name, applies, lower, per_shard)
    return found[name]


def epilogues() -> tuple[Epilogue, ...]:
    """Every registered epilogue, by (producer, consumer), each pair's in registration order."""
    return tuple(e for key in sorted(_EPILOGUES) for e in _EPILOGUES[key].values())


def epilogue(producer_desc: Any, consumer_desc: Any, slot: int) -> Epilogue | None:
    """The first registered epilogue that applies to the pair, or None."""
    key = (producer_desc.operator_type, consumer_desc.operator_type)
    for e in _EPILOGUES.get(key, {}).values():
        if e.applies(producer_desc, consumer_desc, slot):
            return e
    return None


def fused_lowering(
    producer_spec: Any, producer_desc: Any, consumer_spec: Any, consumer_desc: Any, slot: int,
    found: Epilogue, producer_count: int, read_as: Any = None,
    consumer_known: dict[int, Any] | None = None, run: PrologueRun | None = None,
) -> Callable[..., tuple]:  # fmt: skip
    """``(*producer_arrays, *other_arrays) -> consumer outputs`` for a pair that ``epilogue``
    found: on CUDA the epilogue's lowering, elsewhere (and for derivatives) the two lax
    lowerings in sequence; under vmap the lax lowerings (a fused kernel has no batch rule).

    ``read_as``: the consumer's desc where it reads the producer's packed output through its
    own sizes (a reinterpreting edge); ``consumer_known``: the consumer's constant inputs by
    its own argument positions, which the epilogue's lowering sees through ``known_input``.
    ``run``: a ``Prologue`` that computes another of the consumer's inputs, whose nodes'
    arrays come after the producer's (``other_arrays``: the run's, then the consumer's but
    the two it computes); on CUDA the prologue's lowering, elsewhere the run's lax lowerings
    first."""
    from .buffers import read_tensor

    def split(arrays):
        return arrays[:producer_count], arrays[producer_count:]

    def lax_pair(*arrays):
        p, rest = split(arrays)
        (y,) = producer_spec.lower(producer_desc, *p)[:1]
        if read_as is not None:
            y = read_tensor(y.reshape(-1), read_as)
        if run is None:
            inputs = list(rest)
            inputs.insert(slot, y)
        else:
            groups, inputs = run.split(rest)
            computed = ((slot, y), (run.prologue.slot, run.lax(groups)))
            for at, value in sorted(computed, key=lambda c: c[0]):
                inputs.insert(at, value)
        return tuple(consumer_spec.lower(consumer_desc, *inputs))

    def choice(packed: tuple) -> Callable:
        # ``packed``: (position, dtype, shape) of the producer's 4-bit inputs given as their
        # bytes (``packed_bytes``), viewed as codes again inside, and noted for the epilogue
        def viewed(arrays, note):
            out = list(arrays)
            for i, dtype, shape in packed:
                out[i] = lax.bitcast_convert_type(arrays[i], dtype).reshape(shape)
                if note:
                    note_packed(out[i], arrays[i])
            return out

        def kernel(*arrays):
            with packed_sources() if packed else contextlib.nullcontext():
                p, rest = split(viewed(arrays, True))
                with known_inputs({} if consumer_known is None else consumer_known):
                    if run is not None:
                        groups, others = run.split(rest)
                        return tuple(run.prologue.lower(
                            run.descs, run.slots, groups, producer_desc, consumer_desc, slot,
                            p, others,
                        ))  # fmt: skip
                    return tuple(found.lower(producer_desc, consumer_desc, slot, p, rest))

        def lax_viewed(*arrays):
            return lax_pair(*viewed(arrays, False))

        cuda = _batched_as(kernel, lax_viewed)

        per_shard = None
        if found.per_shard is not None and not packed and run is None:
            on_shards = found.per_shard(producer_desc, consumer_desc, slot)

            def per_shard(*arrays):
                with known_inputs({} if consumer_known is None else consumer_known):
                    return on_shards(*arrays)

        return _choice_with_lax_derivatives(cuda, lax_viewed, per_shard)

    choices: dict[tuple, Callable] = {}

    def lowered(*arrays):
        # a producer's 4-bit input viewed from a held constant's bytes enters as those bytes
        packed, args = [], list(arrays)
        for i, a in enumerate(arrays[:producer_count]):
            raw = packed_bytes(a)
            if raw is not None:
                packed.append((i, a.dtype, a.shape))
                args[i] = raw
        key = tuple(packed)
        if key not in choices:
            choices[key] = choice(key)
        return choices[key](*args)

    return lowered


# ---------------------------------------------------------------------------------------------
# Prologues: the nodes that compute another input of an epilogue pair's consumer, in its kernel


@dataclass(frozen=True)
class Prologue:
    """A CUDA lowering of an epilogue pair (``Epilogue``) that also computes the consumer's
    input ``slot`` from a run of graph nodes, each read by the next alone and the last by the
    consumer alone (a normalization whose output only a product reads: the product's kernel
    normalizes its operand as it loads it).

    Attributes:
        applies: ``applies(descs, slots, producer_desc, consumer_desc, pair_slot) -> bool`` on
            descriptors alone: ``descs`` the run's nodes in order, ``slots[i]`` the input of
            ``descs[i + 1]`` that reads ``descs[i]``.
        lower: ``lower(descs, slots, groups, producer_desc, consumer_desc, pair_slot,
            producer_arrays, other_arrays)`` -> the consumer's outputs, ``groups[i]`` node
            ``i``'s arrays but the one it reads from the run, ``other_arrays`` the consumer's
            inputs but ``pair_slot`` and ``slot``. The contract is the run's lax lowerings,
            then the pair's.
        longest: the most nodes a run may hold.
    """

    epilogue: tuple[str, str, str]  # the pair's (producer, consumer, name)
    slot: int
    name: str
    applies: Callable[..., bool]
    lower: Callable[..., tuple]
    longest: int


_PROLOGUES: dict[tuple[str, str, str], dict[str, Prologue]] = {}


def register_prologue(
    epilogue: Epilogue, slot: int, name: str, applies: Callable, lower: Callable, longest: int
) -> Prologue:
    """Registers a ``Prologue`` of ``epilogue``'s pair computing its consumer's input ``slot``
    (not the pair's own); ``graph.compile_graph`` uses it where ``applies``.

    Raises:
        ValueError: if ``name`` is already registered for that pair.
    """
    key = (epilogue.producer, epilogue.consumer, epilogue.name)
    found = _PROLOGUES.setdefault(key, {})
    if name in found:
        raise ValueError(f"prologue {name!r} of {key} is already registered")
    found[name] = Prologue(key, slot, name, applies, lower, longest)
    return found[name]


def prologues(epilogue: Epilogue | None = None) -> tuple[Prologue, ...]:
    """The prologues registered for ``epilogue``'s pair (every pair's where None, by pair), in
    registration order."""
    if epilogue is None:
        return tuple(p for key in sorted(_PROLOGUES) for p in _PROLOGUES[key].values())
    return tuple(_PROLOGUES.get((epilogue.producer, epilogue.consumer, epilogue.name), {}).values())


@dataclass(frozen=True)
class PrologueRun:
    """A ``Prologue`` found on graph nodes: their specs and descs, the input of each that reads
    the one before (``slots``) and how many arrays each takes (``counts``)."""

    prologue: Prologue
    specs: tuple
    descs: tuple
    slots: tuple[int, ...]
    counts: tuple[int, ...]
    read_as: Any = None  # the desc the consumer reads the run's output through (a view)

    def split(self, arrays) -> tuple[list, list]:
        """(each node's arrays, the arrays after the run's)."""
        groups, at = [], 0
        for c in self.counts:
            groups.append(tuple(arrays[at : at + c]))
            at += c
        return groups, list(arrays[at:])

    def lax(self, groups) -> Any:
        """The run's output by its nodes' lax lowerings in sequence."""
        y = None
        for i, (spec, desc, own) in enumerate(zip(self.specs, self.descs, groups)):
            inputs = list(own)
            if i:
                inputs.insert(self.slots[i - 1], y)
            y = spec.lower(desc, *inputs)[0]
        if self.read_as is not None:
            from .buffers import read_tensor

            y = read_tensor(y.reshape(-1), self.read_as)
        return y


# ---------------------------------------------------------------------------------------------
# Chains: a run of graph nodes, each read by the next alone, computed as one


@dataclass(frozen=True)
class Chain:
    """A CUDA lowering of a run of graph nodes as one kernel: ``first`` (an operator type), then
    each node reading the one output of the node before it alone (an epilogue longer than a
    pair: an integer product and the element-wise steps that requantize its sums).

    Attributes:
        applies: ``applies(descs, slots) -> bool`` on descriptors alone: ``descs`` the run's
            nodes in order (``descs[0].operator_type == first``), ``slots[i]`` the input of
            ``descs[i + 1]`` that reads ``descs[i]``. The graph tries the longest run first.
        lower: ``lower(descs, slots, groups)`` -> the last node's outputs (a tuple), where
            ``groups[0]`` are the first node's arrays and ``groups[i]`` node ``i``'s but the
            one it reads from the run. The contract is the nodes' lax lowerings in sequence.
        longest: the most nodes a run may hold.
    """

    first: str
    name: str
    applies: Callable[[tuple, tuple], bool]
    lower: Callable[..., tuple]
    longest: int


_CHAINS: dict[str, dict[str, Chain]] = {}


def register_chain(
    first: str, name: str, applies: Callable, lower: Callable, longest: int
) -> Chain:
    """Registers a CUDA lowering of a run of nodes starting at a ``first`` node (``Chain``);
    ``graph.compile_graph`` uses it where ``applies``, before pair epilogues.

    Raises:
        ValueError: if ``(first, name)`` is already registered, or ``longest`` is under 2.
    """
    if longest < 2:
        raise ValueError(f"chain {name!r}: a run holds at least two nodes, not {longest}")
    found = _CHAINS.setdefault(first, {})
    if name in found:
        raise ValueError(f"chain {name!r} from {first} is already registered")
    found[name] = Chain(first, name, applies, lower, longest)
    return found[name]


def chains(first: str | None = None) -> tuple[Chain, ...]:
    """The registered chains (those starting at ``first`` where given), in registration order
    within a first operator type."""
    keys = sorted(_CHAINS) if first is None else [first]
    return tuple(c for key in keys for c in _CHAINS.get(key, {}).values())


def chain(descs: tuple, slots: tuple) -> Chain | None:
    """The first registered chain that applies to the run ``descs`` (read through ``slots``)."""
    for c in _CHAINS.get(descs[0].operator_type, {}).values():
        if len(descs) <= c.longest and c.applies(descs, slots):
            return c
    return None


def chain_lowering(
    specs: tuple, descs: tuple, slots: tuple, counts: tuple, found: Chain, reads: tuple
) -> Callable[..., tuple]:
    """``(*arrays) -> the last node's outputs`` for a run that ``chain`` found, ``arrays`` each
    node's in turn (``counts[i]`` of node ``i``: all of the first's, the others' but the one
    read from the run): on CUDA the chain's lowering, elsewhere (and for derivatives, and
    under vmap) the nodes' lax lowerings in sequence. ``reads[i]``: the desc node ``i + 1``
    reads node ``i``'s packed output through where the edge is a view (else None)."""
    from .buffers import read_tensor

    def split(arrays):
        groups, at = [], 0
        for c in counts:
            groups.append(tuple(arrays[at : at + c]))
            at += c
        return groups

    def lax_run(*arrays):
        groups = split(arrays)
        outs = tuple(specs[0].lower(descs[0], *groups[0]))
        for spec, desc, slot, rest, view in zip(specs[1:], descs[1:], slots, groups[1:], reads):
            inputs = list(rest)
            y = outs[0] if view is None else read_tensor(outs[0].reshape(-1), view)
            inputs.insert(slot, y)
            outs = tuple(spec.lower(desc, *inputs))
        return outs

    def kernel(*arrays):
        return tuple(found.lower(descs, slots, split(arrays)))

    return _choice_with_lax_derivatives(_batched_as(kernel, lax_run), lax_run)
