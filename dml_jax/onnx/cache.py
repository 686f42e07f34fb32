"""A session's programs: one import and compile per set of input shapes (``ProgramCache``).

Every shape inside a program is static, so shape subgraphs fold at import. An input whose values a
node needs at import (a Reshape's shape fed as a graph input, say) is specialised on: its values
join the cache key, as ONNX Runtime's DirectML provider bakes in its CPU inputs. Sizes that
depend on values (``NeedsSizes``: a NonZero's count) are computed before the lookup, each by a
probe session of the model cut at that node's inputs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import ValidationError
from .importer import ONNX, ImportedGraph, NeedsSizes, NeedsValues, elem_type_of
from .optimize import optimize
from .program import Program, check_memory, compile_imported
from .walk import import_graph

# Inputs a session specialises on must have at most this many elements.
STATIC_INPUT_LIMIT = 4096


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
    ) -> Program:
        """The program for inputs of ``shapes`` (one per input of ``get_inputs()``), imported
        and compiled on first use. ``values`` gives the values of static inputs; ``sizes`` the
        run-time sizes of data-dependent output shapes (``NeedsSizes``)."""
        shapes = tuple(shape_key(s) for s in shapes)
        values = dict(values or {})
        sizes = {k: tuple(int(n) for n in v) for k, v in (sizes or {}).items()}
        self._check_shapes(shapes)
        static = tuple((n, values[n].dtype.str, values[n].tobytes()) for n in sorted(self._static))
        key = (shapes, static, tuple(overrides), tuple(map(tuple, override_shapes)),
               tuple(sorted(sizes.items())))  # fmt: skip
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
            )
        except NeedsValues as e:
            self._specialise(e, values)
            return self.program(shapes, values, overrides, override_shapes, sizes)
        imported, _ = optimize(imported, self._level, self._disabled, self._feature_level)
        check_memory(imported, self._max_memory)
        if self._saved_to:
            self._save(imported)
        layout = None
        if self._layout is not None:
            layout = self._layout.for_program(imported, self._static, self._output_dims)
        graph = compile_imported(
            imported,
            feature_level=self._feature_level,
            allow_half_precision=self._allow_half,
            fast_paths=self._fast_paths,
            roll_repeats=self._roll,
            # Over several devices, nodes are lowered apart (no two-node GPU epilogue kernels)
            # so that XLA partitions a sharded GEMM as it partitions any dot.
            in_shardings=layout.graph_inputs if layout is not None else None,
        )
        program = Program(imported, graph, layout, self.compiler_options)
        self._programs[key] = program
        return program

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
            if not elem_type_of(array.dtype) or array.size > STATIC_INPUT_LIMIT:
                raise ValidationError(
                    f"{e}; {where} ({array.dtype}, {array.size} elements) cannot be specialised "
                    f"on: only inputs of at most {STATIC_INPUT_LIMIT} elements are"
                ) from None
            self._static.add(name)

    def _program_for(self, arrays, overrides=(), extra=()) -> Program:
        """The program for concrete inputs: run-time sizes the import needs (``NeedsSizes``)
        are computed first, each by a program of the model cut at that node's inputs; the
        nodes that need them are remembered per input shapes, so later runs compute them
        before looking the program up."""
        values = {i.name: a for i, a in zip(self._inputs, arrays)}
        shapes = [structure_shape(a) for a in arrays]
        extra_shapes = [e.shape for e in extra]
        base = (tuple(shape_key(x) for x in shapes), tuple(overrides),
                tuple(map(tuple, extra_shapes)))  # fmt: skip
        needs = self._size_needs.setdefault(base, [])
        feed = dict(zip(self._names(tuple(overrides)), list(arrays) + list(extra)))
        sizes = {e.key: self._run_size(e, feed) for e in needs}
        while True:
            try:
                return self.program(shapes, values, overrides, extra_shapes, sizes)
            except NeedsSizes as e:
                if e.key in sizes:
                    raise
                needs.append(e)
                sizes[e.key] = self._run_size(e, feed)

    def _run_size(self, e: NeedsSizes, feed: Mapping[str, np.ndarray]) -> tuple[int, ...]:
        """``e.fn`` of the values ``e.names`` take for ``feed``, computed by a session of the
        model whose outputs are those values."""
        probe = self._probes.get(e.names)
        if probe is None:
            import onnx

            model = onnx.ModelProto()
            model.CopyFrom(self._model)
            del model.graph.output[:]
            model.graph.output.extend(onnx.helper.make_empty_tensor_value_info(n) for n in e.names)
            kept = _needed_nodes(model.graph.node, e.names)
            del model.graph.node[:]
            model.graph.node.extend(kept)
            options = type(self._sess_options)()  # the session's own classes: no import
            options.graph_optimization_level = self._level
            probe = type(self)(
                model,
                options,
                disabled_optimizers=self._disabled,
                free_dimensions=self._free,
                device=self._device,
                feature_level=self._feature_level,
                allow_half_precision=self._allow_half,
                fast_paths=self._fast_paths,
                base_dir=self._base_dir,
            )
            self._probes[e.names] = probe
        arrays = probe.run(None, feed)
        return tuple(int(n) for n in e.fn(*arrays))


def _needed_nodes(nodes: Sequence[Any], names: Sequence[str]) -> list[Any]:
    """The nodes, in order, that the values ``names`` are computed from (a node with subgraphs
    needs every name its subgraphs read)."""
    import onnx

    def reads(node: Any) -> set[str]:
        out = {n for n in node.input if n}
        for a in node.attribute:
            graphs = [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)
            for g in graphs:
                for inner in g.node:
                    out |= reads(inner)
        return out

    wanted, kept = set(names), []
    for node in reversed(list(nodes)):
        if wanted & set(node.output):
            kept.append(node)
            wanted |= reads(node)
    return kept[::-1]
