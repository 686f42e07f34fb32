"""An imported ONNX graph (as imported, or as ``optimize`` left it) written as a DxDispatch JSON
model: what ``dml-jax convert`` and ``SessionOptions.optimized_model_filepath`` write."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import ValidationError
from ..graph import FunctionNode
from ..graph_json import graph_to_json
from .elements import to_graph_array


def write_imported(
    imported: Any, out_path: str, arrays: Mapping[str, np.ndarray] | None = None
) -> list[str]:
    """Writes an ``ImportedGraph`` (as imported, or as ``optimize`` left it) as a DxDispatch
    JSON model at ``out_path`` plus one ``.npy`` file per graph input; returns the files
    written. ``arrays``: the model inputs' values by name (others: zeros).

    Raises:
        ValidationError: a graph with JAX function nodes (no DML_GRAPH form), or none at all.
    """
    arrays = dict(arrays or {})
    for name, shape, dtype in zip(imported.input_names, imported.input_shapes,
                                  imported.input_dtypes):  # fmt: skip
        arrays.setdefault(name, np.zeros(shape, dtype))
    if imported.graph is None:
        raise ValidationError("ONNX: every output of the model is known at import: no DML graph")
    jax_nodes = sorted({imported.onnx_nodes[o][0] for d, o in zip(imported.graph.nodes,
                        imported.origin) if isinstance(d, FunctionNode)})  # fmt: skip
    if jax_nodes:
        raise ValidationError(
            f"ONNX: {jax_nodes[0]}: runs as a JAX lowering, not DML operators (DirectML has no "
            "operator for it): the model has no DML_GRAPH form"
        )
    base = os.path.splitext(out_path)[0]
    stem = os.path.basename(base)
    written, resources, graph_inputs = [], {}, []

    def save(key: str, array: np.ndarray) -> None:
        file = f"{base}_{len(written)}.npy"
        np.save(file, np.ascontiguousarray(array))
        written.append(file)
        resources[key] = {"initialValues": {"sourcePath": os.path.basename(file)}}
        graph_inputs.append(key)

    for name in imported.input_names:
        save(f"input:{name}", to_graph_array(arrays[name], f"input '{name}'"))
    for k, const in enumerate(imported.constants):
        save(f"constant:{k}", const)
    outputs = []
    for name, shape, t in zip(imported.output_names, imported.output_shapes,
                              imported.output_types):  # fmt: skip
        if imported.output_consts[imported.output_names.index(name)] is not None:
            continue
        key = f"output:{name}"
        count = int(np.prod(shape)) if shape else 1
        resources[key] = {
            "initialValuesDataType": t.name,
            "initialValues": {"valueCount": count, "value": 0},
        }
        outputs.append(key)
    doc = {
        "resources": resources,
        "dispatchables": {stem: graph_to_json(imported.graph)},
        "commands": [
            {
                "type": "dispatch",
                "dispatchable": stem,
                "bindings": {"Inputs": graph_inputs, "Outputs": outputs},
            }
        ]
        + [{"type": "print", "resource": key} for key in outputs],
    }
    with open(out_path, "w") as f:
        json.dump(doc, f, indent=1)
    return [out_path] + written
