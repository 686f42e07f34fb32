"""Format readers: each model format is read into a ``GraphDesc`` (a DML graph) in one place,
and whatever runs a model (``dml_jax.dxdispatch``, ``dml-jax run``, ``dml_jax.onnx``'s session)
compiles and runs what a reader gives, with no reading of its own.

========================  ==========================================  ========================
format                    reader                                      gives
========================  ==========================================  ========================
DxDispatch JSON           ``dml_jax.graph_json.graph_desc_from_json``  ``GraphDesc``
(DML_GRAPH / operators)   (``operator_desc_from_json`` for one op)
DirectML serialized       ``load_serialized_graph`` (here)            ``LoadedGraph``: the
graph (``.bin``)                                                      ``GraphDesc``, bind names,
                                                                      constants' bytes
ONNX (``.onnx``)          ``dml_jax.onnx.walk.import_graph``           ``ImportedGraph``: the
                                                                      ``GraphDesc`` for one set
                                                                      of input shapes
========================  ==========================================  ========================

``read_graph`` picks the reader by file name.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from ..errors import ValidationError
from ..graph import GraphDesc
from .dml_serialized import ConvertedGraph, LoadedGraph, load_serialized_graph


def read_graph(
    path: str,
    *,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    free_dimensions: Mapping[str, int] | None = None,
) -> GraphDesc:
    """The ``GraphDesc`` a model file describes, whatever its format: a ``.json`` DML_GRAPH
    dispatchable (the object itself, or a DxDispatch model with exactly one graph
    dispatchable), a ``.bin`` DirectML serialized graph, or an ``.onnx`` model (imported for
    ``input_shapes`` / ``free_dimensions``; its constants become graph inputs after the
    model's own).

    Raises:
        ValidationError: an unknown extension, or what the format's reader rejects.
    """
    ext = os.path.splitext(path)[1].lower()
    if ext == ".bin":
        return load_serialized_graph(path).converted.graph
    if ext == ".onnx":
        from ..onnx.model import load_onnx
        from ..onnx.walk import import_graph

        imported = import_graph(
            load_onnx(path),
            free_dimensions=free_dimensions,
            input_shapes=input_shapes,
            base_dir=os.path.dirname(path),
        )
        if imported.graph is None:
            raise ValidationError(f"ONNX: '{path}': every output is known at import: no graph")
        return imported.graph
    if ext in (".json", ".jsonc"):
        return _json_graph(path)
    raise ValidationError(f"'{path}': unknown model format (expected .json, .bin or .onnx)")


def _json_graph(path: str) -> GraphDesc:
    from ..dxdispatch.jsonc import parse_json_text
    from ..graph_json import graph_desc_from_json
    from ..jsonforms import GRAPH_TYPES

    try:
        with open(path, encoding="utf-8") as f:
            root = parse_json_text(f.read(), path)
    except (OSError, UnicodeDecodeError) as e:
        raise ValidationError(f"cannot read '{path}': {e}") from None
    if isinstance(root, dict) and "dispatchables" in root:
        graphs = [d for d in root["dispatchables"].values()
                  if isinstance(d, dict) and d.get("type") in GRAPH_TYPES]  # fmt: skip
        if len(graphs) != 1:
            raise ValidationError(
                f"'{path}': a DxDispatch model with {len(graphs)} DML_GRAPH dispatchables "
                "(read_graph takes one)"
            )
        root = graphs[0]
    return graph_desc_from_json(root)


__all__ = ["ConvertedGraph", "LoadedGraph", "load_serialized_graph", "read_graph"]
