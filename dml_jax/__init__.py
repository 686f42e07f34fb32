"""dml_jax: DirectML operator descriptors with exact semantics, lowered to JAX/XLA.

import dml_jax as dml
x = dml.TensorDesc("FLOAT32", [3, 3])
op = dml.compile_operator(dml.ReduceOperatorDesc("SUM", x, x.like(sizes=(1, 3)), axes=[0]))
op(jnp.ones((3, 3), jnp.float32))
"""

# Fills the registry of GPU fast paths (dml_jax.fastpath) that compile and graph choose from.
from . import kernels as _kernels  # noqa: F401
from .compile import CompiledOperator, compile_operator, validate
from .enums import (
    AxisDirection,
    DataType,
    DepthSpaceOrder,
    FeatureLevel,
    ReduceFunction,
    TensorFlags,
)
from .errors import ValidationError
from .graph import (
    CompiledGraph,
    GraphDesc,
    InputGraphEdge,
    IntermediateGraphEdge,
    OutputGraphEdge,
    compile_graph,
    graph_from_json,
    validate_graph,
)
from .jsonmodel import operator_desc_from_json, tensor_desc_from_json
from .ops import (
    ArgMaxOperatorDesc,
    ArgMinOperatorDesc,
    DepthToSpace1OperatorDesc,
    DepthToSpaceOperatorDesc,
    ElementWiseClip1OperatorDesc,
    ElementWiseClipGrad1OperatorDesc,
    ElementWiseClipGradOperatorDesc,
    ElementWiseClipOperatorDesc,
    JoinOperatorDesc,
    ReduceOperatorDesc,
    SpaceToDepth1OperatorDesc,
    SpaceToDepthOperatorDesc,
    SplitOperatorDesc,
    TileOperatorDesc,
)
from .tensor import ScaleBias, TensorDesc

__version__ = "0.1.0"

__all__ = [
    "ArgMaxOperatorDesc",
    "ArgMinOperatorDesc",
    "AxisDirection",
    "CompiledGraph",
    "CompiledOperator",
    "DataType",
    "DepthSpaceOrder",
    "DepthToSpace1OperatorDesc",
    "DepthToSpaceOperatorDesc",
    "ElementWiseClip1OperatorDesc",
    "ElementWiseClipGrad1OperatorDesc",
    "ElementWiseClipGradOperatorDesc",
    "ElementWiseClipOperatorDesc",
    "FeatureLevel",
    "GraphDesc",
    "InputGraphEdge",
    "IntermediateGraphEdge",
    "JoinOperatorDesc",
    "OutputGraphEdge",
    "ReduceFunction",
    "ReduceOperatorDesc",
    "ScaleBias",
    "SpaceToDepth1OperatorDesc",
    "SpaceToDepthOperatorDesc",
    "SplitOperatorDesc",
    "TensorDesc",
    "TensorFlags",
    "TileOperatorDesc",
    "ValidationError",
    "compile_graph",
    "compile_operator",
    "graph_from_json",
    "operator_desc_from_json",
    "tensor_desc_from_json",
    "validate",
    "validate_graph",
]
