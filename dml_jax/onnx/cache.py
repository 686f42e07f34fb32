"""A session's programs: one import and compile per set of input shapes (``ProgramCache``).

Every shape inside a program is static, so shape subgraphs fold at import. An input whose values a
node needs at import (a Reshape's shape fed as a graph input, say) is specialised on: its values
join the cache key, as ONNX Runtime's DirectML provider bakes in its CPU inputs. Values computed
at run time that an import needs as constants (``NeedsSizes``: a NonZero's count, the condition
of an If whose branches differ in shape, the iteration count of a Loop with scan outputs) are
computed before the lookup, each by the device program of the import up to the node that needs
them (a segment), and read on the host, as ONNX Runtime's DirectML provider runs such nodes on
its CPU kernels; the program is then looked up per those values.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np

from ..errors import ValidationError
from .elements import ONNX, elem_type_of
from .importer import ImportedGraph, NeedsSizes, NeedsValues
from .optimize import optimize
from .program import Program, check_memory, compile_imported
from .walk import import_graph

# Inputs a session specialises on must have at most this many elements (``_static_limit``; a
# Loop's body run on the host takes none: specialising on its inputs is what it is for).
STATIC_INPUT_LIMIT = 4096


def flat_feed(feed: dict, imported: ImportedGraph) -> dict:
    """The feed with each sequence or optional input replaced by its tensors, under the names
    the program gives them (``ImportedGraph.layouts``)."""
    for kind, name, layout in imported.layouts:
        if kind != "input" or name not in feed:
            continue
        value = feed.pop(name)
        if isinstance(layout, list):
            feed.update(zip(layout, value))
        elif layout is not None:
            feed[layout] = value
    return feed


def structure_shape(x: Any) -> Any:
    """The shapes a program is imported for, of one input: a tensor's shape, a sequence's list
    of shapes (a tuple of tuples), None for an empty optional."""
    if x is None:
        return None
    if isinstance(x, list | tuple):
        return tuple(tuple(int(d) for d in np.shape(a)) for a in x)
    return tuple(int(d) for d in np.shape(x))


def shape_key(s: Any) -> Any:
    """``structure_shape``'s value normalised (a tensor's shape: a tuple of ints)."""
    if s is None:
        return None
    s = tuple(s)
    if s and not isinstance(s[0], int | np.integer):
        return tuple(shape_key(x) for x in s)  # a sequence's shapes
    return tuple(int(d) for d in s)


class ProgramCache:
    """The program cache of ``InferenceSession`` (a base class: it reads the session's model,
    inputs, free dimensions and options): ``program(shapes)`` imports and compiles on first use,
    ``_program_for(arrays)`` first computes the run-time sizes the import needs."""

    # the most elements of an input the session specialises on (None: any)
    _static_limit: int | None = STATIC_INPUT_LIMIT

    @property
    def _plain_programs(self) -> dict:
        """The programs of models with no specialised inputs and no run-time sizes, by their
        inputs' shapes (``_program_and_resumed``)."""
        return self.__dict__.setdefault("_plain", {})

    @property
    def _initializer_arrays(self) -> dict[str, np.ndarray]:
        """The initializers' values, read once for every import of the session."""
        return self.__dict__.setdefault("_initializers", {})

    def _check_shapes(self, shapes: Sequence[tuple[int, ...]]) -> None:
        bound: dict[str, tuple[int, str]] = {}
        for info, shape in zip(self._inputs, shapes):
            where = f"input '{info.name}'"
            if not info.type.tensor_type.HasField("shape"):
                continue
            dims = self._declared(info)
            if len(dims) != len(shape):
                raise ValidationError(
                    f"{ONNX}: {where} must have rank {len(dims)} (shape {dims}), got shape "
                    f"{list(shape)}"
                )
            for k, (d, n) in enumerate(zip(dims, shape)):
                if isinstance(d, int) and d != n:
                    raise ValidationError(
                        f"{ONNX}: {where}: dimension {k} must be {d}, got {n} (shape {list(shape)})"
                    )
                if isinstance(d, str):
                    if d in bound and bound[d][0] != n:
                        raise ValidationError(
                            f"{ONNX}: {where}: dimension {k} ('{d}') is {n}, but {bound[d][1]} "
                            f"gave '{d}' the size {bound[d][0]}"
                        )
                    bound.setdefault(d, (n, where))

    def program(
        self,
        shapes: Sequence[Sequence[int]],
        values: Mapping[str, np.ndarray] | None = None,
        overrides: Sequence[str] = (),
        override_shapes: Sequence[Sequence[int]] = (),
        sizes: Mapping[str, Sequence[int]] | None = None,
        resumed: Sequence[tuple[str, Any]] | None = None,
    ) -> Program:
        """The program for inputs of ``shapes`` (one per input of ``get_inputs()``), imported
        and compiled on first use. ``values`` gives the values of static inputs; ``sizes`` the
        run-time sizes of data-dependent output shapes (``NeedsSizes``). ``resumed`` (a run's
        segments, ``resume``): the values earlier segments computed, ``(name, Resumed)``
        sorted, inputs after the model's; given (even empty), a ``NeedsSizes``'s segment also
        returns the values the rest of the model reads."""
        shapes = tuple(shape_key(s) for s in shapes)
        values = dict(values or {})
        sizes = {k: tuple(int(n) for n in v) for k, v in (sizes or {}).items()}
        self._check_shapes(shapes)
        if resumed:  # a value of specialised inputs alone is a constant of the import, not one
            resumed = tuple((n, r) for n, r in resumed if not r.deps <= self._static)
        static = tuple((n, values[n].dtype.str, values[n].tobytes()) for n in sorted(self._static))
        key = (shapes, static, tuple(overrides), tuple(map(tuple, override_shapes)),
               tuple(sorted(sizes.items())), None if resumed is None else tuple(resumed))  # fmt: skip
        program = self._programs.get(key)
        if program is not None:
            return program
        input_shapes = {i.name: s for i, s in zip(self._inputs, shapes)}
        input_shapes.update(zip(overrides, override_shapes))
        try:
            imported = import_graph(
                self._model,
                free_dimensions=self._free,
                input_shapes=input_shapes,
                input_values={n: values[n] for n in self._static},
                base_dir=self._base_dir,
                sizes=sizes,
                max_memory=self._max_memory,
                arrays=self._initializer_arrays,
                resumed=dict(resumed or ()),
                frontier=resumed is not None,
            )
        except NeedsValues as e:
            self._specialise(e, values)
            return self.program(shapes, values, overrides, override_shapes, sizes, resumed)
        imported, _ = optimize(imported, self._level, self._disabled, self._feature_level)
        check_memory(imported, self._max_memory)
        if self._saved_to:
            self._save(imported)
        layout = None
        if self._layout is not None:
            layout = self._layout.for_program(
                imported, self._static, self._output_dims, self._cache_heads()
            )
        # Over several devices the graph's input shardings go to compile_graph: its two-node
        # GPU epilogue kernels run on each device's shards, or give way to lax.
        graph = self._compile(imported, layout.graph_inputs if layout is not None else None)
        program = Program(imported, graph, layout, self.compiler_options, tuple(sizes.items()))
        self._programs[key] = program
        return program

    def _cache_heads(self) -> dict[str, int]:
        """On a mesh with a model axis, a decoder step's cache inputs and outputs (``roles``),
        each with its heads dimension, which the layout splits with the attention heads; else
        nothing (found once: the roles are the session's)."""
        if self._layout is None or self._layout.model_axis is None:
            return {}
        from .roles import roles_of

        try:
            r = roles_of(self)
        except ValidationError:
            return {}
        dim = {2: 1, 1: 2}.get(r.axis)  # [batch, heads, positions, size] or [b, pos, heads, s]
        if dim is None:
            return {}
        return {n: dim for pair in (*r.past, *r.present) for n in pair}

    def _compile(self, imported: ImportedGraph, in_shardings: Any = None) -> Any:
        """The ``CompiledGraph`` of an import, with the session's compile options."""
        return compile_imported(
            imported,
            feature_level=self._feature_level,
            allow_half_precision=self._allow_half,
            fast_paths=self._fast_paths,
            roll_repeats=self._roll,
            in_shardings=in_shardings,
        )

    def _save(self, imported: ImportedGraph) -> None:
        """Writes the optimized graph to ``optimized_model_filepath`` (DxDispatch JSON)."""
        from .graph_file import write_imported

        try:
            write_imported(imported, self._saved_to)
        except ValidationError as e:
            text = str(e).removeprefix(f"{ONNX}: ")
            raise ValidationError(f"{ONNX}: optimized_model_filepath: {text}") from None

    def _specialise(self, e: NeedsValues, values: Mapping[str, np.ndarray]) -> None:
        for name in sorted(e.names):
            if name in self._static:
                continue
            where = f"input '{name}'"
            array = values.get(name)
            if array is None:
                raise ValidationError(
                    f"{e}; its values are needed to import the model (pass concrete arrays, "
                    "not tracers)"
                ) from None
            limit = self._static_limit
            if not elem_type_of(array.dtype) or (limit is not None and array.size > limit):
                raise ValidationError(
                    f"{e}; {where} ({array.dtype}, {array.size} elements) cannot be specialised "
                    f"on: only inputs of at most {limit} elements are"
                ) from None
            self._static.add(name)

    def _program_for(self, arrays, overrides=(), extra=()) -> Program:
        """The program for concrete inputs (``_program_and_resumed``'s, nothing handed on)."""
        return self._program_and_resumed(arrays, overrides, extra, False)[0]

    def _program_and_resumed(self, arrays, overrides=(), extra=(), resume=True):
        """The program for concrete inputs. Values the import needs that are computed at run
        time (``NeedsSizes``: a data-dependent size, the condition of an If whose branches
        differ in shape, a Loop's iteration count) are computed first, each by the device
        program of the import up to the node that needs them (a segment), and read on the host;
        then the program imported for those values runs. Which need follows which is
        remembered per input shapes, static values and the values read so far (a nested If's
        condition is needed only on its branch), so later runs go through the same segments
        and look the program up, compiling nothing.

        With ``resume`` each segment also returns the values the rest of the model reads and
        the next segment and the program take them as inputs (``resume``: nothing is computed
        twice). Returns ``(program, resumed)``: the values to feed beside the inputs by name
        (none without ``resume``)."""
        shapes = [structure_shape(a) for a in arrays]
        # A model with no specialised inputs and no run-time sizes: its program follows from
        # the input shapes alone, looked up in one dictionary (a small model's ``run`` is
        # otherwise mostly this method's keys).
        plain = None
        if not self._static and not overrides and not extra:
            plain = (tuple(shapes), resume)
            program = self._plain_programs.get(plain)
            if program is not None:
                return program, {}
        from .resume import merged

        values = {i.name: a for i, a in zip(self._inputs, arrays)}
        extra_shapes = [e.shape for e in extra]
        base = (tuple(shape_key(x) for x in shapes), tuple(overrides),
                tuple(map(tuple, extra_shapes)))  # fmt: skip
        feed = dict(zip(self._names(tuple(overrides)), list(arrays) + list(extra)))
        sizes: dict[str, tuple[int, ...]] = {}
        specs: tuple = ()  # (name, Resumed) of the values handed on so far
        while True:
            static = tuple(
                (n, values[n].dtype.str, values[n].tobytes()) for n in sorted(self._static)
            )
            at = (base, static, tuple(sorted(sizes.items())), resume)
            need = self._size_needs.get(at)
            if need is None:
                try:
                    program = self.program(shapes, values, overrides, extra_shapes, sizes,
                                           specs if resume else None)  # fmt: skip
                    if plain is not None and not sizes and not self._static:
                        self._plain_programs[plain] = program
                    return program, {n: feed[n] for n, _ in specs}
                except NeedsSizes as e:
                    if e.key in sizes or e.probe is None:
                        raise
                    need = self._size_needs[at] = _Segment(e)
            sizes[need.key], handed = self._run_segment(need, feed)
            feed.update(handed)
            specs = merged(specs, need.frontier)

    def _run_segment(self, need: _Segment, feed: Mapping[str, Any]) -> tuple[tuple, dict]:
        """``need.fn`` of the values its segment computes for ``feed`` (the segment compiled on
        first use), and the values it hands on by name (left on the device)."""
        if need.program is None:  # optimized and compiled as the session's programs are
            imported, _ = optimize(need.probe, self._level, self._disabled, self._feature_level)
            need.program = Program(imported, self._compile(imported), None, self.compiler_options)
        program = need.program
        flat = flat_feed(dict(feed), program.imported)
        read = len(program.imported.output_names) - len(need.frontier)
        with jax.enable_x64(True) if program.needs_x64 else contextlib.nullcontext():
            jitted, params, args = self._dispatch(program, flat)
            outs = jitted(params, *args)
            arrays = [np.asarray(y).astype(d, copy=False).reshape(s) for y, d, s in
                      zip(outs[:read], program.imported.output_dtypes,
                          program.imported.output_shapes)]  # fmt: skip
        handed = {name: y for (name, _), y in zip(need.frontier, outs[read:])}
        return tuple(int(n) for n in need.fn(*arrays)), handed


class _Segment:
    """A need for run-time values (``NeedsSizes``) and the device program that computes them:
    the import up to the node that needs them (compiled on first use)."""

    def __init__(self, e: NeedsSizes):
        self.key, self.fn, self.probe, self.frontier = e.key, e.fn, e.probe, e.frontier
        self.program: Program | None = None
