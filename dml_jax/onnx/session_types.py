"""The session's descriptive types, in onnxruntime's shapes: ``NodeArg`` (an input or output),
``ModelMetadata``, ``SessionOptions``, and onnxruntime's type strings (``tensor(float)``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .elements import TYPE_NAMES


@dataclass(frozen=True)
class NodeArg:
    """A model input or output as onnxruntime describes it: ``type`` is ``"tensor(float)"``
    and the like, ``shape`` holds ints, ``dim_param`` names, or None for unnamed dims."""

    name: str
    type: str
    shape: list


@dataclass(frozen=True)
class ModelMetadata:
    """onnxruntime's ``ModelMetadata``."""

    producer_name: str
    graph_name: str
    domain: str
    description: str
    graph_description: str
    version: int
    custom_metadata_map: dict


class SessionOptions:
    """The parts of onnxruntime's ``SessionOptions`` that mean something here: free dimension
    overrides by name and by denotation; ``graph_optimization_level`` (onnxruntime's
    ``GraphOptimizationLevel``, its integer value, or ``"disable"``, ``"basic"``,
    ``"extended"``, ``"all"``; default ``"all"`` as onnxruntime's) chooses the rewrites of
    ``optimize`` run on each imported graph (constants are folded at import at every level);
    ``optimized_model_filepath``: where each program's optimized DML graph is written as a
    DxDispatch JSON model (docs/onnx.md, "Graph optimizations")."""

    def __init__(self):
        self.free_dimension_overrides: dict[str, int] = {}
        self.free_dimension_overrides_by_denotation: dict[str, int] = {}
        self.graph_optimization_level: Any = "all"
        self.optimized_model_filepath: str = ""
        self.config_entries: dict[str, str] = {}

    def add_free_dimension_override_by_name(self, name: str, value: int) -> None:
        self.free_dimension_overrides[name] = int(value)

    def add_free_dimension_override_by_denotation(self, denotation: str, value: int) -> None:
        self.free_dimension_overrides_by_denotation[denotation.upper()] = int(value)

    def add_session_config_entry(self, key: str, value: str) -> None:
        self.config_entries[key] = value


def type_string(elem: int) -> str:
    return f"tensor({TYPE_NAMES.get(int(elem), str(elem))})"


def type_string_of(type_proto: Any) -> str:
    """onnxruntime's type string of a value: ``tensor(float)``, ``seq(tensor(int64))``,
    ``optional(seq(tensor(float)))``."""
    kind = type_proto.WhichOneof("value")
    if kind == "sequence_type":
        return f"seq({type_string_of(type_proto.sequence_type.elem_type)})"
    if kind == "optional_type":
        return f"optional({type_string_of(type_proto.optional_type.elem_type)})"
    return type_string(type_proto.tensor_type.elem_type)
