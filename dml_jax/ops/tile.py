"""DML_OPERATOR_TILE: repeat a tensor along every dimension."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from jax import lax

from ..enums import FeatureLevel as L
from ..errors import UINT32_MAX, Validator
from ..fields import UINT_ARRAY, OperatorDesc, attribute, count_of, input_field, output_field
from ..registry import Example, register
from ..support import DIMS1_8, DIMS4, F2, T8, T10, rows
from ..tensor import TensorDesc


@dataclass(frozen=True)
class TileOperatorDesc(OperatorDesc):
    """DML_TILE_OPERATOR_DESC: repeats InputTensor Repeats[i] times along dimension i (FL 1_0).

    Fields:
        input_tensor: the tensor to repeat.
        output_tensor: sizes ``InputTensor.Sizes[i] * Repeats[i]``, same data type and rank.
        repeats: one count > 0 per input dimension (no NumPy-style rank broadcasting).
        repeats_count: optional; must equal ``len(repeats)``.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_TILE"
    input_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    repeats: tuple[int, ...] = attribute(UINT_ARRAY)
    repeats_count: int | None = count_of("repeats")


def infer_tile(d: TileOperatorDesc) -> tuple[TensorDesc, ...]:
    x = d.input_tensor
    return (x.like(sizes=tuple(s * r for s, r in zip(x.sizes, d.repeats))),)


def validate_tile(d: TileOperatorDesc, v: Validator) -> None:
    v.check(
        "Repeats",
        len(d.repeats) == d.input_tensor.rank,
        f"must have one entry per InputTensor dimension ({d.input_tensor.rank}), "
        f"got {len(d.repeats)}",
    )
    for i, r in enumerate(d.repeats):
        v.check(f"Repeats[{i}]", r > 0, f"must be > 0, got {r}")
    # Checked before inferring the output desc, which could not even be built for such sizes.
    total = d.input_tensor.element_count * math.prod(d.repeats)
    v.check(
        "Repeats",
        total <= UINT32_MAX,
        f"make the output {total} elements; a buffer tensor holds at most {UINT32_MAX}",
    )
    v.outputs_match(d.output_slots(), infer_tile(d))


def _tile(x, repeats):
    # A new axis of size r before each axis, broadcast, then merge each (r, s) pair: one
    # broadcast feeding a reshape, which XLA emits as a single fused copy.
    wide = [n for r, s in zip(repeats, x.shape) for n in (r, s)]
    y = lax.broadcast_in_dim(x, wide, tuple(range(1, 2 * x.ndim, 2)))
    return lax.reshape(y, tuple(s * r for s, r in zip(x.shape, repeats)))


def lower_tile(d: TileOperatorDesc, x):
    return (_tile(x, d.repeats),)


register(
    TileOperatorDesc,
    infer=infer_tile,
    validate=validate_tile,
    lower=lower_tile,
    support=rows(
        (L.FL_1_0, DIMS4, F2),
        (L.FL_2_1, DIMS4, T8),
        (L.FL_3_1, DIMS1_8, T8),
        (L.FL_4_1, DIMS1_8, T10),
    ),
    example=Example(
        {
            "type": "DML_OPERATOR_TILE",
            "desc": {
                "InputTensor": {"DataType": "UINT16", "Sizes": [2, 2]},
                "OutputTensor": {"DataType": "UINT16", "Sizes": [4, 6]},
                "RepeatsCount": 2,
                "Repeats": [2, 3],
            },
        },
        {"InputTensor": [1, 2, 3, 4]},
        "a {2, 2} tensor repeated twice down and three times across",
    ),
)
