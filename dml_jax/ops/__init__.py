"""Operator families; importing this package fills the registry."""

from .clip import (
    ElementWiseClip1OperatorDesc,
    ElementWiseClipGrad1OperatorDesc,
    ElementWiseClipGradOperatorDesc,
    ElementWiseClipOperatorDesc,
)
from .depth_space import (
    DepthToSpace1OperatorDesc,
    DepthToSpaceOperatorDesc,
    SpaceToDepth1OperatorDesc,
    SpaceToDepthOperatorDesc,
)
from .reduce import ArgMaxOperatorDesc, ArgMinOperatorDesc, ReduceOperatorDesc
from .split_join import JoinOperatorDesc, SplitOperatorDesc
from .tile import TileOperatorDesc

__all__ = [
    "ArgMaxOperatorDesc",
    "ArgMinOperatorDesc",
    "DepthToSpace1OperatorDesc",
    "DepthToSpaceOperatorDesc",
    "ElementWiseClip1OperatorDesc",
    "ElementWiseClipGrad1OperatorDesc",
    "ElementWiseClipGradOperatorDesc",
    "ElementWiseClipOperatorDesc",
    "JoinOperatorDesc",
    "ReduceOperatorDesc",
    "SpaceToDepth1OperatorDesc",
    "SpaceToDepthOperatorDesc",
    "SplitOperatorDesc",
    "TileOperatorDesc",
]
