"""DEPTH_TO_SPACE(1) and SPACE_TO_DEPTH(1): move channel blocks into spatial blocks and back.

Version 0 of each operator is version 1 with Order DEPTH_COLUMN_ROW; both share one validation
and one lowering: DEPTH_TO_SPACE is a reshape, a transpose and a reshape (1-byte types move as
32-bit words on CUDA), SPACE_TO_DEPTH one strided slice per block offset, concatenated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from jax import lax

from ..enums import DepthSpaceOrder
from ..enums import FeatureLevel as L
from ..errors import Validator
from ..fields import UINT, OperatorDesc, attribute, enum_type, input_field, output_field
from ..registry import Example, register
from ..support import DIMS4, F2, T8, T11, rows
from ..tensor import TensorDesc

DCR = DepthSpaceOrder.DEPTH_COLUMN_ROW
CRD = DepthSpaceOrder.COLUMN_ROW_DEPTH


class _DepthSpace(OperatorDesc):
    """Shared by the four descriptors: 4-D NCHW input and output, a BlockSize and an order."""

    to_space: ClassVar[bool]

    @property
    def depth_space_order(self) -> DepthSpaceOrder:
        return getattr(self, "order", DCR)


@dataclass(frozen=True)
class DepthToSpace1OperatorDesc(_DepthSpace):
    """DML_DEPTH_TO_SPACE1_OPERATOR_DESC: channel blocks to spatial blocks (FL 2_1).

    Fields:
        input_tensor: 4-D {N, C, H, W}; C divisible by BlockSize².
        output_tensor: {N, C / BlockSize², H * BlockSize, W * BlockSize}, same data type.
        block_size: the block's width and height, > 0.
        order: ``DepthSpaceOrder`` DEPTH_COLUMN_ROW (DCR) or COLUMN_ROW_DEPTH (CRD).
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_DEPTH_TO_SPACE1"
    to_space: ClassVar[bool] = True
    input_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    block_size: int = attribute(UINT)
    order: DepthSpaceOrder = attribute(enum_type(DepthSpaceOrder))


@dataclass(frozen=True)
class DepthToSpaceOperatorDesc(_DepthSpace):
    """DML_DEPTH_TO_SPACE_OPERATOR_DESC (FL 1_0): DEPTH_TO_SPACE1 with DEPTH_COLUMN_ROW order."""

    operator_type: ClassVar[str] = "DML_OPERATOR_DEPTH_TO_SPACE"
    to_space: ClassVar[bool] = True
    input_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    block_size: int = attribute(UINT)


@dataclass(frozen=True)
class SpaceToDepth1OperatorDesc(_DepthSpace):
    """DML_SPACE_TO_DEPTH1_OPERATOR_DESC: spatial blocks to channel blocks (FL 2_1).

    The inverse of DEPTH_TO_SPACE1 with the same order.

    Fields:
        input_tensor: 4-D {N, C, H, W}; H and W divisible by BlockSize.
        output_tensor: {N, C * BlockSize², H / BlockSize, W / BlockSize}, same data type.
        block_size: the block's width and height, > 0.
        order: ``DepthSpaceOrder`` DEPTH_COLUMN_ROW (DCR) or COLUMN_ROW_DEPTH (CRD).
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_SPACE_TO_DEPTH1"
    to_space: ClassVar[bool] = False
    input_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    block_size: int = attribute(UINT)
    order: DepthSpaceOrder = attribute(enum_type(DepthSpaceOrder))


@dataclass(frozen=True)
class SpaceToDepthOperatorDesc(_DepthSpace):
    """DML_SPACE_TO_DEPTH_OPERATOR_DESC (FL 1_0): SPACE_TO_DEPTH1 with DEPTH_COLUMN_ROW order."""

    operator_type: ClassVar[str] = "DML_OPERATOR_SPACE_TO_DEPTH"
    to_space: ClassVar[bool] = False
    input_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    block_size: int = attribute(UINT)


def infer_depth_space(d: _DepthSpace) -> tuple[TensorDesc, ...]:
    n, c, h, w = d.input_tensor.sizes
    b = d.block_size
    if d.to_space:
        sizes = (n, c // (b * b), h * b, w * b)
    else:
        sizes = (n, c * b * b, h // b, w // b)
    return (d.input_tensor.like(sizes=sizes),)


def validate_depth_space(d: _DepthSpace, v: Validator) -> None:
    b = d.block_size
    v.equal("InputTensor.DimensionCount", d.input_tensor.rank, 4)
    v.equal("OutputTensor.DimensionCount", d.output_tensor.rank, 4)
    v.check("BlockSize", b > 0, f"must be > 0, got {b}")
    _, c, h, w = d.input_tensor.sizes
    if d.to_space:
        v.check(
            "InputTensor.Sizes[1]",
            c % (b * b) == 0,
            f"(channels, {c}) must be divisible by BlockSize² ({b * b})",
        )
    else:
        for i, s in ((2, h), (3, w)):
            v.check(
                f"InputTensor.Sizes[{i}]", s % b == 0, f"({s}) must be divisible by BlockSize ({b})"
            )
    v.outputs_match(d.output_slots(), infer_depth_space(d))


def lower_depth_space(d: _DepthSpace, x):
    # The reshape/transpose forms, which XLA's simplifier cancels against each other in a graph
    # (a round trip becomes one copy). CUDA has fast paths (dml_jax.kernels.movement).
    return (_to_space(d, x) if d.to_space else _to_depth(d, x),)


def _to_depth(d: _DepthSpace, x):
    """SPACE_TO_DEPTH as a reshape, a transpose and a reshape."""
    n, c, h, w = x.shape
    b = d.block_size
    t = lax.reshape(x, (n, c, h // b, b, w // b, b))  # (n, c, h', row, w', col)
    perm = (0, 3, 5, 1, 2, 4) if d.depth_space_order is DCR else (0, 1, 3, 5, 2, 4)
    return lax.reshape(lax.transpose(t, perm), (n, c * b * b, h // b, w // b))


def _to_space(d: _DepthSpace, x):
    """DEPTH_TO_SPACE as a reshape, a transpose and a reshape."""
    n, c, h, w = x.shape
    b = d.block_size
    co = c // (b * b)
    if d.depth_space_order is DCR:  # channel = (row, col, c')
        t = lax.reshape(x, (n, b, b, co, h, w))
        t = lax.transpose(t, (0, 3, 4, 1, 5, 2))
    else:  # CRD: channel = (c', row, col)
        t = lax.reshape(x, (n, co, b, b, h, w))
        t = lax.transpose(t, (0, 1, 4, 2, 5, 3))
    return lax.reshape(t, (n, co, h * b, w * b))


def _example(cls: type, order: str | None) -> Example:
    """{1, 8, 1, 1} <-> {1, 2, 2, 2} with block 2: each output element names its source."""
    to_space = cls.to_space
    deep = {"DataType": "UINT16", "Sizes": [1, 8, 1, 1]}
    wide = {"DataType": "UINT16", "Sizes": [1, 2, 2, 2]}
    desc = {
        "InputTensor": deep if to_space else wide,
        "OutputTensor": wide if to_space else deep,
        "BlockSize": 2,
    }
    if order is not None:
        desc["Order"] = order
    return Example(
        {"type": cls.operator_type, "desc": desc},
        {"InputTensor": list(range(8))},
        f"block 2, {order or 'DEPTH_COLUMN_ROW'} order",
    )


_V0 = rows((L.FL_1_0, DIMS4, F2), (L.FL_2_1, DIMS4, T8), (L.FL_5_0, DIMS4, T11))
_V1 = rows((L.FL_2_1, DIMS4, T8), (L.FL_5_0, DIMS4, T11))
for _cls, _support, _order in (
    (DepthToSpaceOperatorDesc, _V0, None),
    (DepthToSpace1OperatorDesc, _V1, "COLUMN_ROW_DEPTH"),
    (SpaceToDepthOperatorDesc, _V0, None),
    (SpaceToDepth1OperatorDesc, _V1, "DEPTH_COLUMN_ROW"),
):
    register(
        _cls,
        infer=infer_depth_space,
        validate=validate_depth_space,
        lower=lower_depth_space,
        support=_support,
        example=_example(_cls, _order),
    )
