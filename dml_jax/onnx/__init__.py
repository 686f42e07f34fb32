"""ONNX models on DirectML's operators: ``compile_onnx`` maps every node to DML operator
descriptors (``ops.CONVERTERS``, one entry per ONNX op type), builds one ``GraphDesc`` and
compiles it into one XLA program.

Needs the optional ``onnx`` package (``pip install 'dml-jax[onnx]'``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..errors import ValidationError
from ..graph import compile_graph
from .importer import ImportedGraph, import_graph

ONNX_MISSING = "ONNX models need the 'onnx' package: pip install 'dml-jax[onnx]'"


def load_onnx(path_or_model: Any) -> Any:
    """An ``onnx.ModelProto`` from a path, serialized bytes or a ModelProto."""
    try:
        import onnx
    except ImportError:
        raise ImportError(ONNX_MISSING) from None
    if isinstance(path_or_model, onnx.ModelProto):
        return path_or_model
    if isinstance(path_or_model, (bytes, bytearray)):
        return onnx.load_from_string(bytes(path_or_model))
    if isinstance(path_or_model, (str, os.PathLike)):
        try:
            return onnx.load(os.fspath(path_or_model))
        except OSError as e:
            raise ValidationError(f"ONNX: cannot read '{path_or_model}': {e}") from None
        except Exception as e:  # noqa: BLE001 - protobuf's decode errors have no common base
            raise ValidationError(f"ONNX: '{path_or_model}' is not an ONNX model: {e}") from None
    raise ValidationError(
        f"ONNX: expected a path, bytes or an onnx.ModelProto, got {type(path_or_model).__name__}"
    )


class CompiledOnnx:
    """An ONNX model compiled as one DML graph (one XLA program under jit).

    Attributes:
        imported: the ``ImportedGraph`` (its ``graph`` is the ``GraphDesc``).
        graph: the ``CompiledGraph``.
        input_names, input_shapes, output_names, output_shapes: the model's, with static shapes.
        input_dtypes, output_dtypes: NumPy dtypes (BOOL for ONNX BOOL tensors).
    """

    def __init__(self, imported: ImportedGraph, graph: Any):
        self.imported = imported
        self.graph = graph
        self.input_names = imported.input_names
        self.input_shapes = imported.input_shapes
        self.output_names = imported.output_names
        self.output_shapes = imported.output_shapes
        self.input_dtypes = tuple(np.dtype(t.numpy_dtype) for t in imported.input_types)
        self.output_dtypes = tuple(
            np.dtype(bool) if b else np.dtype(t.numpy_dtype)
            for t, b in zip(imported.output_types, imported.output_bool)
        )
        self._constants = tuple(jnp.asarray(c) for c in imported.constants)
        self._jitted = jax.jit(self.fn)

    def fn(self, *inputs: Any) -> tuple:
        """The pure function: one array per model input (ONNX shapes), a tuple of outputs."""
        descs = self.graph.input_descs
        args = []
        for i, x in enumerate(inputs):
            x = jnp.asarray(x)
            if x.dtype == jnp.bool_:
                x = x.astype(jnp.uint8)
            args.append(None if descs[i] is None else x.reshape(descs[i].sizes))
        outs = self.graph.fn(*args, *self._constants)
        outs = outs if isinstance(outs, tuple) else (outs,)
        return tuple(
            (y != 0 if b else y).reshape(shape)
            for y, shape, b in zip(outs, self.output_shapes, self.imported.output_bool)
        )

    def __call__(self, *inputs: Any, **named: Any) -> Any:
        """Runs the model: inputs by position or by ONNX name. One output: one array."""
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
        for name, x, shape in zip(self.input_names, inputs, self.input_shapes):
            if tuple(np.shape(x)) != tuple(shape):
                raise ValidationError(
                    f"ONNX: input '{name}' must have shape {list(shape)}, got {list(np.shape(x))}"
                )
        outs = self._jitted(*inputs)
        return outs[0] if len(outs) == 1 else outs

    def __repr__(self) -> str:
        return (
            f"CompiledOnnx({len(self.imported.graph.nodes)} DML nodes, "
            f"inputs {list(self.input_names)}, outputs {list(self.output_names)})"
        )


def compile_onnx(
    path_or_model: Any,
    *,
    free_dimensions: Mapping[str, int] | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    feature_level: Any = None,
) -> CompiledOnnx:
    """Maps an ONNX model onto DirectML operators and compiles it into one XLA program.

    Args:
        path_or_model: a file path, serialized bytes or an ``onnx.ModelProto``.
        free_dimensions: sizes of symbolic dimensions by name (``{"N": 2}``), like ONNX
            Runtime's free dimension overrides.
        input_shapes: full shapes of inputs by name (override the model's shapes).
        feature_level: the DML feature level nodes are validated at (None: the newest).

    Raises:
        ImportError: without the ``onnx`` package.
        ValidationError: an unsupported op type (naming the node and its type), a dimension
            without a size, or a node DirectML would reject.
    """
    from .ops import CONVERTERS

    model = load_onnx(path_or_model)
    imported = import_graph(model, CONVERTERS, free_dimensions, input_shapes)
    graph = compile_graph(imported.graph, feature_level, reinterpret_edges=True)
    return CompiledOnnx(imported, graph)


__all__ = ["CompiledOnnx", "ImportedGraph", "compile_onnx", "load_onnx"]
