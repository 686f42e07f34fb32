"""A kernel over whole rows (``(A, R)``, each row's result its own: the normalization and
softmax kernels) on each device's rows of a program split over devices, instead of the lax
lowering that ``fastpath.sharded`` otherwise gives it.

The kernel sits inside ``custom_partitioning``; once the partitioner knows the operands'
shardings it asks for one device's computation: the kernel on that device's rows. The rows
enter with their leading dimensions apart (``(*lead, R)``: a {B, S, D} layer norm's batch and
sequence, a {B, H, S, S} softmax's batch, heads and queries), so a split of any of them stays a
split of rows (merged into A outside, a batch split over one axis and heads over another could
not stay split without moving data); inside, each device's rows are merged and the kernel runs
on them. A row itself (R) is never split (its statistics need all of it): a split of R is
gathered first, as a split that leaves a device too few rows for the kernel's tiles is. Rows
held whole on every device (a tensor-parallel layer's replicated residual stream) run whole on
each, with nothing communicated. Vectors beside the rows (Scale and Bias) are one value a row
(shaped as the leading dimensions, split with them) or one a column (held whole).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from ..sharding import ways


def partitioned(
    kernel: Callable, lead: int, modes: tuple[str, ...], fits: Callable[[int], bool]
) -> Callable:
    """``fn(x, *vectors) -> y`` split over devices by rows, for ``x`` of ``lead`` leading
    dimensions and then one of R.

    Args:
        kernel: ``kernel(x2, *vectors) -> y2`` on any rows ``x2`` {rows, R} it is given, with
            the vectors flat ({rows} or {R}).
        lead: how many leading dimensions ``x`` has before R.
        modes: per vector, ``"row"`` (shaped as the leading dimensions: split with them) or
            ``"along"`` ({R}: whole on every device).
        fits: ``fits(rows)``: the kernel takes that many rows (else the rows are gathered).
    """
    from jax.experimental.custom_partitioning import custom_partitioning

    names = [f"a{i}" for i in range(lead)]
    vector_dims = [" ".join(names) if m == "row" else "r" for m in modes]
    rule = ", ".join([" ".join([*names, "r"]), *vector_dims]) + f" -> {' '.join([*names, 'r'])}"

    def flat(x, vectors):
        r = x.shape[-1]
        rows = math.prod(x.shape[:-1])
        return x.reshape(rows, r), [v.reshape(-1) for v in vectors]

    def whole_rows(x, *vectors):
        x2, flats = flat(x, vectors)
        return kernel(x2, *flats).reshape(x.shape)

    @custom_partitioning
    def fn(x, *vectors):
        return whole_rows(x, *vectors)

    def lead_axes(mesh, arg_shapes) -> tuple:
        spec = tuple(getattr(arg_shapes[0].sharding, "spec", ()) or ())
        spec = (spec + (None,) * (lead + 1))[:lead]
        shape = arg_shapes[0].shape
        rows = 1
        for n, entry in zip(shape, spec):
            count = ways(mesh, entry)
            if n % count:
                return (None,) * lead
            rows *= n // count
        return spec if fits(rows) else (None,) * lead

    def shardings(mesh, axes: tuple):
        x = NamedSharding(mesh, P(*axes, None))
        vectors = [NamedSharding(mesh, P(*axes) if m == "row" else P(None)) for m in modes]
        return x, vectors

    def infer(mesh, arg_shapes, result_shape):
        return shardings(mesh, lead_axes(mesh, arg_shapes))[0]

    def partition(mesh, arg_shapes, result_shape):
        x, vectors = shardings(mesh, lead_axes(mesh, arg_shapes))
        return mesh, whole_rows, x, (x, *vectors)

    fn.def_partition(infer_sharding_from_operands=infer, partition=partition, sharding_rule=rule)
    return fn


def leading(shape: tuple[int, ...], axes: tuple[int, ...]) -> tuple[int, ...] | None:
    """The leading dimensions of ``shape`` before its normalized ``axes`` where those are its
    trailing ones (sizes of 1 among them ignored), or None."""
    kept = [i for i in range(len(shape)) if shape[i] != 1]
    trailing = [i for i in kept if i in axes]
    if not trailing or trailing != kept[len(kept) - len(trailing) :]:
        return None
    return tuple(shape[i] for i in range(trailing[0]) if i not in axes)


def rows_view(x: Any, lead: tuple[int, ...]) -> Any:
    """``x`` as ``(*lead, R)``."""
    return jax.lax.reshape(x, (*lead, math.prod(x.shape) // max(1, math.prod(lead))))
