"""dml_jax: DirectML operator descriptors with exact semantics, lowered to JAX/XLA.

import dml_jax as dml
x = dml.TensorDesc("FLOAT32", [3, 3])
op = dml.compile_operator(dml.ReduceOperatorDesc("SUM", x, x.like(sizes=(1, 3)), axes=[0]))
op(jnp.ones((3, 3), jnp.float32))
"""

# Fills the registry of GPU fast paths (dml_jax.fastpath) that compile and graph choose from.
from . import kernels as _kernels
from . import ops as _ops
from .compile import CompiledOperator, compile_operator, validate
from .enums import ENUMS as _ENUMS
from .errors import ValidationError
from .graph import (
    CompiledGraph,
    ConstantDataNode,
    GraphDesc,
    InputGraphEdge,
    IntermediateGraphEdge,
    OutputGraphEdge,
    compile_graph,
    validate_graph,
)
from .graph_json import graph_from_json, graph_to_json
from .jsonmodel import operator_desc_from_json, operator_desc_to_json, tensor_desc_from_json
from .onnx import CompiledOnnx, compile_onnx
from .registry import aliases as _aliases
from .registry import lookup as _lookup
from .registry import operators as _operators
from .registry import registered_operators
from .tensor import ScaleBias, Size2D, TensorDesc

__version__ = "0.1.0"

_BASE = [
    "CompiledGraph",
    "CompiledOnnx",
    "CompiledOperator",
    "ConstantDataNode",
    "GraphDesc",
    "InputGraphEdge",
    "IntermediateGraphEdge",
    "OutputGraphEdge",
    "ScaleBias",
    "Size2D",
    "TensorDesc",
    "ValidationError",
    "compile_graph",
    "compile_onnx",
    "compile_operator",
    "graph_from_json",
    "graph_to_json",
    "operator_desc_from_json",
    "operator_desc_to_json",
    "registered_operators",
    "tensor_desc_from_json",
    "validate",
    "validate_graph",
]

# Every DML enum is exported under its own name (DataType, FeatureLevel, ReduceFunction ...).
for _enum in _ENUMS:
    globals()[_enum.__name__] = _enum
_BASE += [_enum.__name__ for _enum in _ENUMS]

# Every registered operator class is exported under its own name (ElementWiseAdd1OperatorDesc ...).
for _spec in _operators():
    globals()[_spec.desc_class.__name__] = _spec.desc_class

# DirectML's alias structs name the same class (DML_SCATTER_ELEMENTS_OPERATOR_DESC is
# ScatterOperatorDesc); left out of __all__, which lists each operator class once.
for _alias, _name in _aliases().items():
    _words = _alias.removeprefix("DML_OPERATOR_").split("_")
    globals()["".join(w.capitalize() for w in _words) + "OperatorDesc"] = _lookup(_name).desc_class

__all__ = sorted(_BASE + [_spec.desc_class.__name__ for _spec in _operators()])
del _spec, _enum
