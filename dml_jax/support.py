"""Support-table machinery: which data types and dimension counts an operator accepts per level.

The tables themselves live in each operator's entry (``register(..., support=rows(...))``); the
rows are DirectML's "tensor support" tables. A row applies from its feature level upward until a
later row replaces it. Input and output columns are separate because ARGMIN/ARGMAX write index
types. The type-set names follow the reference notes (F2, T8, IDX ...).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from .enums import DataType as D
from .enums import FeatureLevel as L
from .errors import ValidationError


class SupportRow(NamedTuple):
    level: L
    ranks: tuple[int, ...]
    inputs: frozenset
    outputs: frozenset
    # Tensors with a column of their own (GATHER's IndicesTensor, TOP_K's OutputIndexTensor): DML
    # member name -> (types, ranks); ranks None means the row's.
    tensors: tuple = ()

    def column(self, role: str, path: str) -> tuple[frozenset, tuple[int, ...]]:
        """The types and ranks allowed for the tensor at ``path`` (``IndicesTensor``,
        ``InputTensors[1]``) in ``role`` ("inputs" or "outputs")."""
        name = path.split("[")[0]
        for member, types_, ranks in self.tensors:
            if member == name:
                return types_, ranks or self.ranks
        return getattr(self, role), self.ranks


def types(*names: str) -> frozenset:
    return frozenset(D[n] for n in names)


F2 = types("FLOAT32", "FLOAT16")
S4 = F2 | types("INT32", "UINT32")
S6 = S4 | types("INT64", "UINT64")
T6 = S4 | types("INT16", "UINT16")
T8 = T6 | types("INT8", "UINT8")
T10 = T8 | types("INT64", "UINT64")
T11 = T10 | types("FLOAT64")
IDX = types("INT64", "INT32", "UINT64", "UINT32")
U32 = types("UINT32")
DIMS4 = (4,)
DIMS4_5 = (4, 5)
DIMS1_8 = tuple(range(1, 9))


def rows(*rows: tuple) -> tuple[SupportRow, ...]:
    """Rows as (level, ranks, types), (level, ranks, input types, output types) or that and a
    dict of per-tensor columns, ``{"IndicesTensor": types}`` or ``{name: (types, ranks)}``."""
    out = []
    for row in rows:
        level, ranks, inputs = row[:3]
        outputs = row[3] if len(row) > 3 else inputs
        own = []
        for name, column in (row[4] if len(row) > 4 else {}).items():
            types_, own_ranks = column if isinstance(column, tuple) else (column, None)
            own.append((name, frozenset(types_), tuple(own_ranks) if own_ranks else None))
        out.append(SupportRow(level, ranks, inputs, outputs, tuple(own)))
    return tuple(out)


def introduced(table: tuple[SupportRow, ...]) -> L:
    """The feature level at which an operator (or REDUCE function) first appears."""
    return table[0].level


def row_at(table: tuple[SupportRow, ...], level: L) -> SupportRow | None:
    """The row in force at ``level``, or None when the operator does not exist yet."""
    current = None
    for row in table:
        if row.level <= level:
            current = row
    return current


_BEYOND_TABLES: contextvars.ContextVar[frozenset] = contextvars.ContextVar(
    "beyond_tables", default=frozenset()
)


@contextlib.contextmanager
def beyond_tables(data_types: Iterable[D]) -> Iterator[None]:
    """Within this context, tensors of ``data_types`` pass the support tables' data type check
    (their dimension count still must be one the operator takes). The ONNX front end uses it for
    FLOAT64, which ONNX Runtime runs on its CPU provider where DirectML's tables have no FLOAT64:
    the operator's lowering then computes in float64 (docs/semantics.md, "ONNX import")."""
    token = _BEYOND_TABLES.set(frozenset(data_types))
    try:
        yield
    finally:
        _BEYOND_TABLES.reset(token)


def check_tensor(
    table: tuple[SupportRow, ...], level: L, role: str, path: str, dtype: D, rank: int, what: str
) -> None:
    """Raises ValidationError unless ``dtype`` and ``rank`` are supported for ``role`` at ``level``.

    Args:
        table: the support rows; ``what`` names them in messages (operator, and function for
            REDUCE).
        role: "inputs" or "outputs" (the table column).
        path: the tensor's DML path, e.g. ``OutputTensors[1]``.
    """
    row = row_at(table, level)
    if row is None:
        raise ValidationError(
            f"{what} requires feature level {introduced(table).label} or later; the target is "
            f"{level.label}"
        )

    relaxed = dtype in _BEYOND_TABLES.get()

    def allows(r: SupportRow) -> bool:
        types_, ranks = r.column(role, path)
        return (relaxed or dtype in types_) and rank in ranks

    if allows(row):
        return
    lowest = next((r.level for r in table if allows(r)), None)
    fix = (
        f"the lowest feature level that supports it is {lowest.label}"
        if lowest is not None
        else "no feature level supports it"
    )
    raise ValidationError(
        f"{what}: {path} with data type {dtype.name} and DimensionCount {rank} is not supported "
        f"at feature level {level.label}; {fix}"
    )


def check_desc(spec, desc, level: L) -> None:
    """Every present tensor of ``desc`` against ``spec``'s support table at ``level``."""
    table, what = spec.support_rows(desc), spec.what(desc)
    for role, tensors in (("inputs", desc.input_slots()), ("outputs", desc.output_slots())):
        for path, tensor in tensors:
            check_tensor(table, level, role, path, tensor.data_type, tensor.rank, what)
