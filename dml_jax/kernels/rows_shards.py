"""A kernel over whole rows (``(A, R)``, each row's result its own: the normalization kernels)
on each device's rows of a program split over devices, instead of the lax lowering that
``fastpath.sharded`` otherwise gives it.

The kernel sits inside ``custom_partitioning``; once the partitioner knows the operands'
shardings it asks for one device's computation: the kernel on that device's rows, where the
rows (A) are split over mesh axes; a row itself (R) is never split (its statistics need all of
it), so a split of R is gathered first, as a split of rows too small for the kernel's tiles is.
Rows held whole on every device (a tensor-parallel layer's replicated residual stream) run
whole on each, with nothing communicated. Vectors beside the rows (Scale and Bias) are one value
a row (split with the rows) or one a column (held whole).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def _axes(entry: Any) -> tuple:
    if entry is None:
        return ()
    return tuple(entry) if isinstance(entry, tuple) else (entry,)


def partitioned(kernel: Callable, modes: tuple[str, ...], fits: Callable[[int], bool]) -> Callable:
    """``fn(x2, *vectors) -> y2`` split over devices by rows.

    Args:
        kernel: ``kernel(x2, *vectors) -> y2`` on any rows of ``x2`` it is given.
        modes: per vector, ``"row"`` (A elements: split with the rows) or ``"along"`` (R
            elements: whole on every device).
        fits: ``fits(rows)``: the kernel takes that many rows (else the rows are gathered).
    """
    from jax.experimental.custom_partitioning import custom_partitioning

    vector_factors = ["a" if m == "row" else "r" for m in modes]
    rule = ", ".join(["a r", *vector_factors]) + " -> a r"

    @custom_partitioning
    def fn(x2, *vectors):
        return kernel(x2, *vectors)

    def rows_axes(mesh, arg_shapes) -> Any:
        spec = tuple(getattr(arg_shapes[0].sharding, "spec", ()) or ())
        axes = spec[0] if spec else None
        count = 1
        for name in _axes(axes):
            count *= mesh.shape[name]
        rows = arg_shapes[0].shape[0]
        return axes if rows % count == 0 and fits(rows // count) else None

    def shardings(mesh, axes):
        x = NamedSharding(mesh, P(axes, None))
        vectors = [NamedSharding(mesh, P(axes if f == "a" else None)) for f in vector_factors]
        return x, vectors

    def infer(mesh, arg_shapes, result_shape):
        return shardings(mesh, rows_axes(mesh, arg_shapes))[0]

    def partition(mesh, arg_shapes, result_shape):
        x, vectors = shardings(mesh, rows_axes(mesh, arg_shapes))
        return mesh, kernel, x, (x, *vectors)

    fn.def_partition(infer_sharding_from_operands=infer, partition=partition, sharding_rule=rule)
    return fn
