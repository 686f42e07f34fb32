"""ONNX models on DirectML's operators.

``InferenceSession`` (onnxruntime's session shape) imports a model onto DirectML operator
descriptors (``converters``: one converter per ONNX op), folding at import whatever is known
then (``fold``), and compiles it into one XLA program per set of input shapes.
``compile_onnx`` is the call-style form for models whose shapes are all known.

Needs the optional ``onnx`` package (``pip install 'dml-jax[onnx]'``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np

from ..errors import ValidationError
from .importer import ImportedGraph
from .model import ONNX_MISSING, check_model, load_onnx
from .walk import import_graph


class CompiledOnnx:
    """An ONNX model with static shapes compiled as one DML graph (one XLA program under jit).

    Attributes:
        imported: the ``ImportedGraph`` (its ``graph`` is the ``GraphDesc``).
        graph: the ``CompiledGraph``.
        input_names, input_shapes, output_names, output_shapes: the model's, static.
        input_dtypes, output_dtypes: the ONNX NumPy dtypes (int64 for INT64, bool for BOOL).
    """

    def __init__(self, program: Any):
        imported = program.imported
        self.program = program
        self.imported = imported
        self.graph = program.graph
        self.input_names = imported.input_names
        self.input_shapes = imported.input_shapes
        self.output_names = imported.output_names
        self.output_shapes = imported.output_shapes
        self.input_dtypes = imported.input_dtypes
        self.output_dtypes = imported.output_dtypes

    def fn(self, *inputs: Any) -> tuple:
        """The pure function: one array per model input (ONNX shapes), a tuple of outputs."""
        return self.program.apply({}, *inputs)

    def __call__(self, *inputs: Any, **named: Any) -> Any:
        """Runs the model: inputs by position or by ONNX name. One output: one array."""
        from .elements import to_graph_array

        inputs = list(inputs)
        for name in self.input_names[len(inputs) :]:
            if name not in named:
                raise ValidationError(f"ONNX: input '{name}' is missing")
            inputs.append(named.pop(name))
        if named or len(inputs) != len(self.input_names):
            raise ValidationError(
                f"ONNX: expected inputs {list(self.input_names)}, got {len(inputs)} positional"
                + (f" and unknown names {sorted(named)}" if named else "")
            )
        args = []
        for name, x, shape in zip(self.input_names, inputs, self.input_shapes):
            if tuple(np.shape(x)) != tuple(shape):
                raise ValidationError(
                    f"ONNX: input '{name}' must have shape {list(shape)}, got {list(np.shape(x))}"
                )
            args.append(to_graph_array(np.asarray(x), f"input '{name}'"))
        outs = self.program.jitted_on(_default_device())({}, *args)
        return outs[0] if len(outs) == 1 else outs

    def __repr__(self) -> str:
        return (
            f"CompiledOnnx({len(self.imported.graph.nodes)} DML nodes, "
            f"inputs {list(self.input_names)}, outputs {list(self.output_names)})"
        )


def _default_device() -> Any:
    """The device ``jax.jit`` places NumPy arguments on."""
    chosen = jax.config.jax_default_device
    if chosen is None or isinstance(chosen, str):
        return jax.devices(chosen)[0] if chosen else jax.devices()[0]
    return chosen


def compile_onnx(
    path_or_model: Any,
    *,
    free_dimensions: Mapping[str, int] | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    feature_level: Any = None,
    allow_half_precision: bool = False,
    fast_paths: bool = True,
    roll_repeats: bool = False,
    optimization_level: Any = "all",
    disabled_optimizers: Sequence[str] | None = None,
    compiler_options: Mapping[str, Any] | None = None,
) -> CompiledOnnx:
    """Maps an ONNX model onto DirectML operators and compiles it into one XLA program, for
    models whose input shapes are fixed (by the model, ``free_dimensions`` or
    ``input_shapes``); ``InferenceSession`` binds open dimensions at each run instead.

    ``optimization_level`` (onnxruntime's ``GraphOptimizationLevel``, its integer value, or
    ``"disable"``, ``"basic"``, ``"extended"``, ``"all"``) and ``disabled_optimizers`` choose
    the graph optimizations run on the imported graph (docs/onnx.md, "Graph optimizations").
    ``compiler_options``: XLA options for the compile of the model's calls (``jax.jit``'s
    ``compiler_options``), over a session's defaults on JAX's default backend
    (``program.GPU_COMPILER_OPTIONS``, ``program.CPU_COMPILER_OPTIONS``; docs/onnx.md,
    "First-call time" and "On the CPU"). ``roll_repeats``: as ``InferenceSession``'s.

    Raises:
        ImportError: without the ``onnx`` package.
        ValidationError: an unsupported op type (naming the node and its type), a dimension
            without a size, or a node DirectML would reject.
    """
    import jax

    from .optimize import disabled_names, level_name, optimize
    from .program import Program, check_compiler_options, compile_imported, compiler_options_for

    options = compiler_options_for(
        check_compiler_options(compiler_options, "ONNX"), jax.default_backend()
    )
    level = level_name(optimization_level, "optimization_level")
    disabled = disabled_names(disabled_optimizers)
    model = load_onnx(path_or_model)
    base_dir = None
    if isinstance(path_or_model, str | os.PathLike):
        base_dir = os.path.dirname(os.fspath(path_or_model))
    check_model(model)
    imported = import_graph(model, None, free_dimensions, input_shapes, base_dir=base_dir)
    imported, _ = optimize(imported, level, disabled, feature_level)
    graph = compile_imported(
        imported,
        feature_level=feature_level,
        allow_half_precision=allow_half_precision,
        fast_paths=fast_paths,
        roll_repeats=bool(roll_repeats),
    )
    return CompiledOnnx(Program(imported, graph, compiler_options=options))


def __getattr__(name: str) -> Any:
    # The session module imports jax-side helpers; loaded on first use.
    if name in ("InferenceSession", "SessionOptions", "NodeArg", "ModelMetadata"):
        from . import session

        return getattr(session, name)
    if name in ("OrtValue", "IOBinding"):
        from . import binding

        return getattr(binding, name)
    if name in ("Generator", "GeneratorParams", "Model", "generate"):
        from . import generation

        return getattr(generation, name)
    raise AttributeError(name)


__all__ = [
    "ONNX_MISSING",
    "CompiledOnnx",
    "Generator",
    "GeneratorParams",
    "IOBinding",
    "ImportedGraph",
    "InferenceSession",
    "Model",
    "OrtValue",
    "SessionOptions",
    "check_model",
    "compile_onnx",
    "generate",
    "load_onnx",
]
