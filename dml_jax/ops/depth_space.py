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
from ..errors import Validator
from ..fields import OperatorDesc, attribute, input_field, output_field, to_enum, to_uint
from ..registry import register
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
    block_size: int = attribute(to_uint)
    order: DepthSpaceOrder = attribute(to_enum(DepthSpaceOrder))


@dataclass(frozen=True)
class DepthToSpaceOperatorDesc(_DepthSpace):
    """DML_DEPTH_TO_SPACE_OPERATOR_DESC (FL 1_0): DEPTH_TO_SPACE1 with DEPTH_COLUMN_ROW order."""

    operator_type: ClassVar[str] = "DML_OPERATOR_DEPTH_TO_SPACE"
    to_space: ClassVar[bool] = True
    input_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    block_size: int = attribute(to_uint)


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
    block_size: int = attribute(to_uint)
    order: DepthSpaceOrder = attribute(to_enum(DepthSpaceOrder))


@dataclass(frozen=True)
class SpaceToDepthOperatorDesc(_DepthSpace):
    """DML_SPACE_TO_DEPTH_OPERATOR_DESC (FL 1_0): SPACE_TO_DEPTH1 with DEPTH_COLUMN_ROW order."""

    operator_type: ClassVar[str] = "DML_OPERATOR_SPACE_TO_DEPTH"
    to_space: ClassVar[bool] = False
    input_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    block_size: int = attribute(to_uint)


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
    # (a round trip becomes one copy). CUDA has fast paths (dml_jax.kernels.movement), among
    # them _to_depth_slices below.
    return (_to_space(d, x) if d.to_space else _to_depth(d, x),)


def _to_depth(d: _DepthSpace, x):
    """SPACE_TO_DEPTH as a reshape, a transpose and a reshape."""
    n, c, h, w = x.shape
    b = d.block_size
    t = lax.reshape(x, (n, c, h // b, b, w // b, b))  # (n, c, h', row, w', col)
    perm = (0, 3, 5, 1, 2, 4) if d.depth_space_order is DCR else (0, 1, 3, 5, 2, 4)
    return lax.reshape(lax.transpose(t, perm), (n, c * b * b, h // b, w // b))


def _to_depth_slices(d: _DepthSpace, x):
    """SPACE_TO_DEPTH as b * b strided slices, concatenated (the CUDA form)."""
    n, c, h, w = x.shape
    b = d.block_size
    parts = [lax.slice(x, (0, 0, i, j), x.shape, (1, 1, b, b)) for i in range(b) for j in range(b)]
    if d.depth_space_order is DCR:
        return lax.concatenate(parts, 1)
    parts = [lax.broadcast_in_dim(p, (n, c, 1, h // b, w // b), (0, 1, 3, 4)) for p in parts]
    return lax.reshape(lax.concatenate(parts, 2), (n, c * b * b, h // b, w // b))


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


for _cls in (
    DepthToSpaceOperatorDesc,
    DepthToSpace1OperatorDesc,
    SpaceToDepthOperatorDesc,
    SpaceToDepth1OperatorDesc,
):
    register(_cls, infer=infer_depth_space, validate=validate_depth_space, lower=lower_depth_space)
