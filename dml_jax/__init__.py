"""dml_jax: DirectML operator descriptors with exact semantics, lowered to JAX/XLA.

    import dml_jax as dml
    x = dml.TensorDesc("FLOAT32", [3, 3])
    op = dml.compile_operator(dml.ReduceOperatorDesc("SUM", x, x.like(sizes=(1, 3)), axes=[0]))
    op(jnp.ones((3, 3), jnp.float32))
"""

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
    "JoinOperatorDesc",
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
    "compile_operator",
    "operator_desc_from_json",
    "tensor_desc_from_json",
    "validate",
]
