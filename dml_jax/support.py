"""Support tables: which data types and dimension counts each operator accepts at each level.

The rows are DirectML's "tensor support" tables (per operator, and per function for REDUCE). A row
applies from its feature level upward until a later row replaces it. Input and output columns are
separate because ARGMIN/ARGMAX write index types.
"""

from __future__ import annotations

from typing import NamedTuple

from .enums import DataType as D
from .enums import FeatureLevel as L
from .errors import ValidationError


class SupportRow(NamedTuple):
    level: L
    ranks: tuple[int, ...]
    inputs: frozenset
    outputs: frozenset


def _types(*names: str) -> frozenset:
    return frozenset(D[n] for n in names)


F2 = _types("FLOAT32", "FLOAT16")
S4 = F2 | _types("INT32", "UINT32")
S6 = S4 | _types("INT64", "UINT64")
T6 = S4 | _types("INT16", "UINT16")
T8 = T6 | _types("INT8", "UINT8")
T10 = T8 | _types("INT64", "UINT64")
T11 = T10 | _types("FLOAT64")
IDX = _types("INT64", "INT32", "UINT64", "UINT32")
U32 = _types("UINT32")
DIMS4 = (4,)
DIMS4_5 = (4, 5)
DIMS1_8 = tuple(range(1, 9))


def _rows(*rows: tuple) -> tuple[SupportRow, ...]:
    """Rows as (level, ranks, types) or (level, ranks, input types, output types)."""
    out = []
    for row in rows:
        level, ranks, inputs = row[:3]
        outputs = row[3] if len(row) > 3 else inputs
        out.append(SupportRow(level, ranks, inputs, outputs))
    return tuple(out)


_DEPTH_SPACE = _rows((L.FL_1_0, DIMS4, F2), (L.FL_2_1, DIMS4, T8), (L.FL_5_0, DIMS4, T11))
_DEPTH_SPACE1 = _rows((L.FL_2_1, DIMS4, T8), (L.FL_5_0, DIMS4, T11))
_ARG = _rows((L.FL_3_0, DIMS1_8, T8, IDX), (L.FL_4_1, DIMS1_8, T10, IDX))

# Keys: the DML_OPERATOR_* name, or (name, reduce function name) for REDUCE.
SUPPORT: dict = {
    "DML_OPERATOR_SPLIT": _rows(
        (L.FL_1_0, DIMS4, T6),
        (L.FL_2_1, DIMS4, T8),
        (L.FL_3_0, DIMS1_8, T8),
        (L.FL_4_1, DIMS1_8, T11),
    ),
    "DML_OPERATOR_JOIN": _rows(
        (L.FL_1_0, DIMS4, T6),
        (L.FL_2_1, DIMS4, T8),
        (L.FL_3_0, DIMS4_5, T8),
        (L.FL_3_1, DIMS1_8, T8),
        (L.FL_4_1, DIMS1_8, T11),
    ),
    "DML_OPERATOR_DEPTH_TO_SPACE": _DEPTH_SPACE,
    "DML_OPERATOR_SPACE_TO_DEPTH": _DEPTH_SPACE,
    "DML_OPERATOR_DEPTH_TO_SPACE1": _DEPTH_SPACE1,
    "DML_OPERATOR_SPACE_TO_DEPTH1": _DEPTH_SPACE1,
    "DML_OPERATOR_ELEMENT_WISE_CLIP": _rows(
        (L.FL_1_0, DIMS4, F2),
        (L.FL_2_1, DIMS4, T8),
        (L.FL_3_0, DIMS1_8, T8),
        (L.FL_5_0, DIMS1_8, T10),
    ),
    "DML_OPERATOR_ELEMENT_WISE_CLIP1": _rows((L.FL_5_0, DIMS1_8, T10)),
    "DML_OPERATOR_ELEMENT_WISE_CLIP_GRAD": _rows((L.FL_3_1, DIMS1_8, T8), (L.FL_5_0, DIMS1_8, T10)),
    "DML_OPERATOR_ELEMENT_WISE_CLIP_GRAD1": _rows((L.FL_5_0, DIMS1_8, T10)),
    "DML_OPERATOR_TILE": _rows(
        (L.FL_1_0, DIMS4, F2),
        (L.FL_2_1, DIMS4, T8),
        (L.FL_3_1, DIMS1_8, T8),
        (L.FL_4_1, DIMS1_8, T10),
    ),
    "DML_OPERATOR_ARGMIN": _ARG,
    "DML_OPERATOR_ARGMAX": _ARG,
}

_REDUCE_ARG = _rows(
    (L.FL_1_0, DIMS4, F2, U32),
    (L.FL_2_1, DIMS4, T8, U32),
    (L.FL_3_0, DIMS1_8, T8, IDX),
    (L.FL_4_1, DIMS1_8, T10, IDX),
)
_REDUCE_FLOAT = _rows((L.FL_1_0, DIMS4, F2), (L.FL_3_0, DIMS1_8, F2))
_REDUCE_L1 = _rows((L.FL_1_0, DIMS4, F2), (L.FL_3_0, DIMS1_8, F2), (L.FL_5_0, DIMS1_8, S6))
_REDUCE_MINMAX = _rows(
    (L.FL_1_0, DIMS4, F2),
    (L.FL_2_1, DIMS4, S4),
    (L.FL_3_0, DIMS1_8, T8),
    (L.FL_5_0, DIMS1_8, T10),
)
_REDUCE_SUM = _rows(
    (L.FL_1_0, DIMS4, F2),
    (L.FL_2_1, DIMS4, S4),
    (L.FL_3_0, DIMS1_8, S4),
    (L.FL_5_0, DIMS1_8, S6),
)
for _names, _table in (
    (("ARGMAX", "ARGMIN"), _REDUCE_ARG),
    (("AVERAGE", "L2", "LOG_SUM", "LOG_SUM_EXP"), _REDUCE_FLOAT),
    (("L1", "SUM_SQUARE"), _REDUCE_L1),
    (("MIN", "MAX"), _REDUCE_MINMAX),
    (("MULTIPLY", "SUM"), _REDUCE_SUM),
):
    for _name in _names:
        SUPPORT[("DML_OPERATOR_REDUCE", _name)] = _table


def introduced(key) -> L:
    """The feature level at which an operator (or REDUCE function) first appears."""
    return SUPPORT[key][0].level


def row_at(key, level: L) -> SupportRow | None:
    """The row in force at ``level``, or None when the operator does not exist yet."""
    current = None
    for row in SUPPORT[key]:
        if row.level <= level:
            current = row
    return current


def check_tensor(key, level: L, role: str, path: str, dtype: D, rank: int, what: str) -> None:
    """Raises ValidationError unless ``dtype`` and ``rank`` are supported for ``role`` at ``level``.

    Args:
        key: the SUPPORT key; ``what`` names it in messages (operator, and function for REDUCE).
        role: "inputs" or "outputs" (the table column).
        path: the tensor's DML path, e.g. ``OutputTensors[1]``.
    """
    row = row_at(key, level)
    if row is None:
        raise ValidationError(
            f"{what} requires feature level {introduced(key).label} or later; the target is "
            f"{level.label}"
        )
    if dtype in getattr(row, role) and rank in row.ranks:
        return
    lowest = next(
        (r.level for r in SUPPORT[key] if dtype in getattr(r, role) and rank in r.ranks), None
    )
    fix = (
        f"the lowest feature level that supports it is {lowest.label}"
        if lowest is not None
        else "no feature level supports it"
    )
    raise ValidationError(
        f"{what}: {path} with data type {dtype.name} and DimensionCount {rank} is not supported "
        f"at feature level {level.label}; {fix}"
    )
