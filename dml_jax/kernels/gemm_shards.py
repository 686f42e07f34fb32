"""The GEMM kernel (``kernels/gemm.py``) on each device's shards of a program split over
devices, instead of the lax lowering that ``fastpath.sharded`` otherwise gives it.

A Pallas kernel is a call XLA's SPMD partitioner cannot split; here it sits inside
``custom_partitioning``, whose rule the partitioner asks, once it knows the operands' shardings,
for the computation of one device's shards. The product ``{M, K} x B -> {M, N}`` (B held
{N, K} or {K, N}), with its C (a bias row, or a full {M, N}) and a residual R {M, N}, splits by
its factors:

- M, N: rows and columns apart, nothing to communicate: each device runs the kernel (bias,
  GELU and residual in its epilogue) on its shards. A column-parallel projection (B split on
  N, Megatron's first products) is this case; so is a data-parallel one (A split on M).
- K (a row-parallel projection: A and B split along K): each device's product is a partial
  sum. The partial products (lax, rounded to the output type as the lax lowering rounds its
  product) are summed over the K axes with one ``psum``, and C, the activation and R are
  applied after it in lax, once: the kernel's epilogue cannot come before the sum. This is
  the program the lax lowering partitions to as well.
- M and N split over one mesh axis cannot both stay: A is gathered along M (the sharding the
  partitioner would otherwise give the lax lowering's product as well).

The factor rule is also given to Shardy (``sharding_rule``) so that propagation sees the
product's factors rather than an opaque call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def _axes(entry: Any) -> tuple:
    """The mesh axis names of one PartitionSpec entry (None, a name, or a tuple of names)."""
    if entry is None:
        return ()
    return tuple(entry) if isinstance(entry, tuple) else (entry,)


def _spec(sharding: Any, rank: int) -> tuple:
    spec = tuple(getattr(sharding, "spec", ()) or ())
    return spec + (None,) * (rank - len(spec))


class _Forms:
    """The operands' factor names, in argument order: A, B, then C and R where present."""

    def __init__(self, b_nk: bool, c_form: str, residual: bool):
        self.dims = [("m", "k"), ("n", "k") if b_nk else ("k", "n")]
        if c_form == "row":
            self.dims.append(("o", "n"))  # the bias row: a dimension of one
        elif c_form == "full":
            self.dims.append(("m", "n"))
        if residual:
            self.dims.append(("m", "n"))

    def rule(self) -> str:
        return ", ".join(" ".join(d) for d in self.dims) + " -> m n"

    def factors(self, shardings: list) -> dict[str, Any]:
        """Each factor's mesh axes from the operands' shardings: M from A, K from A (else B),
        N from B (else C or R); axes claimed twice are dropped from the later factor."""
        specs = [_spec(s, 2) for s in shardings]
        found: dict[str, Any] = {"o": None}
        order = ("m", "k", "n")
        for f in order:
            for dims, spec in zip(self.dims, specs):
                if f in dims and spec[dims.index(f)] is not None:
                    found[f] = spec[dims.index(f)]
                    break
            else:
                found[f] = None
        used: set = set()
        # N first: a column-parallel projection keeps its weights' split and gathers A's rows
        for f in ("n", "m", "k"):
            if set(_axes(found[f])) & used:
                found[f] = None
            used |= set(_axes(found[f]))
        return found

    def shardings(self, mesh, found: dict[str, Any]) -> tuple:
        return tuple(NamedSharding(mesh, P(*(found[f] for f in d))) for d in self.dims)


def partitioned(
    b_nk: bool,
    c_form: str,
    residual: bool,
    whole: Callable,
    partial: Callable,
    finish: Callable,
) -> Callable:
    """``fn(a, b[, c][, r]) -> y``, split over devices by the product's factors.

    Args:
        b_nk: B is held {N, K}.
        c_form: ``"row"`` (C given as its {1, N} row), ``"full"`` ({M, N}) or ``"none"``.
        residual: an R {M, N} follows C.
        whole: ``whole(a, b, c, r) -> y`` on shards whose K is whole (``c``, ``r`` None where
            absent): the kernel where the shards fit it, else its lax form.
        partial: ``partial(a, b) -> product``, the partial product of shards of K.
        finish: ``finish(summed, c, r) -> y``: C, the activation and R after the sum.
    """
    from jax.experimental.custom_partitioning import custom_partitioning

    forms = _Forms(b_nk, c_form, residual)
    has_c = c_form != "none"

    def split(args):
        args = list(args)
        a, b = args[:2]
        c = args[2] if has_c else None
        r = args[-1] if residual else None
        return a, b, c, r

    @custom_partitioning
    def fn(*args):
        return whole(*split(args))

    def infer(mesh, arg_shapes, result_shape):
        found = forms.factors([s.sharding for s in arg_shapes])
        return NamedSharding(mesh, P(found["m"], found["n"]))

    def partition(mesh, arg_shapes, result_shape):
        found = forms.factors([s.sharding for s in arg_shapes])
        k_axes = _axes(found["k"])

        def lower(*args):
            a, b, c, r = split(args)
            if not k_axes:
                return whole(a, b, c, r)
            return finish(jax.lax.psum(partial(a, b), k_axes), c, r)

        out = NamedSharding(mesh, P(found["m"], found["n"]))
        return mesh, lower, out, forms.shardings(mesh, found)

    fn.def_partition(
        infer_sharding_from_operands=infer, partition=partition, sharding_rule=forms.rule()
    )
    return fn
