"""An ONNX model written as a DML graph in DxDispatch's JSON format (``dml-jax convert``).

The model is imported for one set of input shapes (free dimensions from the options, else 1,
as DxDispatch sizes them), and written as one ``DML_GRAPH`` dispatchable whose graph inputs are
the model's inputs, then its constants (weights and folded values) as ``.npy`` files beside the
JSON. Intermediate edges whose descs differ (the ONNX views: Reshape, Flatten, ...) are left as
DirectML reads them: the consumer reinterprets the producer's bytes. The result runs with
``dml-jax run OUT.json`` and with DirectML's own DxDispatch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import ValidationError
from .graph_file import write_imported


def write_dxdispatch(
    model: Any,
    out_path: str,
    *,
    free_dimensions: Mapping[str, int] | None = None,
    inputs: Mapping[str, np.ndarray] | None = None,
    seed: int = 0,
) -> list[str]:
    """Writes ``model`` (a path, bytes or ModelProto) as a DxDispatch JSON model at
    ``out_path`` plus one ``.npy`` file per graph input; returns the files written.

    Args:
        free_dimensions: sizes of symbolic dimensions (others are 1).
        inputs: input values by name (others are seeded random values: floats in [-1, 1),
            integers in [0, 10)).

    Raises:
        ValidationError: a model that does not import, or one whose outputs are all known at
            import (nothing for DirectML to compute).
    """
    from .session import InferenceSession

    session = InferenceSession(model, free_dimensions=free_dimensions)
    given = {k: np.asarray(v) for k, v in (inputs or {}).items()}
    unknown = sorted(set(given) - {i.name for i in session.get_inputs()})
    if unknown:
        raise ValidationError(f"ONNX: the model has no input named {unknown}")
    rng = np.random.default_rng(seed)
    arrays = {}
    for info, dtype in zip(session.get_inputs(), session._input_dtypes):
        if info.name in given:
            arrays[info.name] = given[info.name].astype(dtype)
            continue
        shape = [d if isinstance(d, int) else 1 for d in (info.shape or [])]
        if dtype.kind == "f":
            arrays[info.name] = rng.uniform(-1, 1, shape).astype(dtype)
        elif dtype == np.bool_:
            arrays[info.name] = rng.integers(0, 2, shape).astype(bool)
        else:
            arrays[info.name] = rng.integers(0, 10, shape).astype(dtype)
    program = session._program_for([arrays[i.name] for i in session.get_inputs()])
    return write_imported(program.imported, out_path, arrays)
