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
- M and N split over one mesh axis cannot both stay: the smaller of A and B is gathered (the
  weights of a layer's many tokens, as the partitioner chose for the lax lowering's products
  of the sequence-parallel GPT stack; A where it has few rows).

The factor rule is also given to Shardy (``sharding_rule``) so that propagation sees the
product's factors rather than an opaque call.

"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from ..sharding import mesh_axes, ways


def _spec(sharding: Any, rank: int) -> tuple:
    spec = tuple(getattr(sharding, "spec", ()) or ())
    return spec + (None,) * (rank - len(spec))


class _Forms:
    """The operands' factor names, in argument order: A, B, then C and R where present; and
    the outputs': one {M, N}, or with ``split`` (H heads of size D) three {M, H * D}."""

    def __init__(self, b_nk: bool, c_form: str, residual: bool, split: tuple | None = None):
        self.dims = [("m", "k"), ("n", "k") if b_nk else ("k", "n")]
        if c_form == "row":
            self.dims.append(("o", "n"))  # the bias row: a dimension of one
        elif c_form == "full":
            self.dims.append(("m", "n"))
        if residual:
            self.dims.append(("m", "n"))
        self.split = split
        self.outputs = 3 if split else 1

    def rule(self) -> str:
        """Shardy's rule; with ``split`` N is the compound (heads, q/k/v, size), each output's
        columns (heads, size): splitting B's columns splits every output's heads."""
        n, out = ("(h t d)", "m (h d)") if self.split else ("n", "m n")
        operands = ", ".join(" ".join(n if f == "n" else f for f in d) for d in self.dims)
        return f"{operands} -> " + ", ".join([out] * self.outputs)

    def sizes(self) -> dict:
        return {} if not self.split else {"h": self.split[0], "t": 3, "d": self.split[1]}

    def results(self, mesh, found: dict[str, Any]) -> Any:
        out = NamedSharding(mesh, P(found["m"], found["n"]))
        return (out,) * 3 if self.split else out

    def factors(self, shardings: list, shapes: list) -> dict[str, Any]:
        """Each factor's mesh axes from the operands' shardings: M from A, K from A (else B),
        N from B (else C or R). Axes claimed twice are dropped from one factor: where M and N
        share one, the smaller of A and B is gathered (A for a product of few rows, the
        weights for a layer's many tokens); K gives way to both."""
        specs = [_spec(s, 2) for s in shardings]
        found: dict[str, Any] = {"o": None}
        for f in ("m", "k", "n"):
            for dims, spec in zip(self.dims, specs):
                if f in dims and spec[dims.index(f)] is not None:
                    found[f] = spec[dims.index(f)]
                    break
            else:
                found[f] = None
        a_size, b_size = (math.prod(s) for s in shapes[:2])
        order = ("n", "m", "k") if a_size <= b_size else ("m", "n", "k")
        used: set = set()
        for f in order:
            if set(mesh_axes(found[f])) & used:
                found[f] = None
            used |= set(mesh_axes(found[f]))
        return found

    def shardings(self, mesh, found: dict[str, Any], scattered: Any = None) -> tuple:
        """The operands' shardings; ``scattered``: the rows of C and R (those after the
        product) split over these axes, as the product's sums are scattered."""
        out = []
        for i, d in enumerate(self.dims):
            f = found if i < 2 or scattered is None else {**found, "m": scattered}
            out.append(NamedSharding(mesh, P(*(f[x] for x in d))))
        return tuple(out)


def partitioned(
    b_nk: bool,
    c_form: str,
    residual: bool,
    whole: Callable,
    partial: Callable,
    finish: Callable,
    split: tuple | None = None,
) -> Callable:
    """``fn(a, b[, c][, r]) -> y``, split over devices by the product's factors.

    Args:
        b_nk: B is held {N, K}.
        c_form: ``"row"`` (C given as its {1, N} row), ``"full"`` ({M, N}) or ``"none"``.
        residual: an R {M, N} follows C.
        split: (H, D) where N is H heads of query, key and value blocks of size D each and
            the result is three {M, H * D} arrays (``fused_gemm``'s ``split``): B's columns
            then split by whole heads.
        whole: ``whole(a, b, c, r) -> y`` on shards whose K is whole (``c``, ``r`` None where
            absent): the kernel where the shards fit it, else its lax form.
        partial: ``partial(a, b) -> product``, the partial product of shards of K.
        finish: ``finish(summed, c, r) -> y``: C, the activation and R after the sum.
    """
    from jax.experimental.custom_partitioning import custom_partitioning

    forms = _Forms(b_nk, c_form, residual, split)
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
        shardings, shapes = [s.sharding for s in arg_shapes], [s.shape for s in arg_shapes]
        return forms.results(mesh, forms.factors(shardings, shapes))

    def partition(mesh, arg_shapes, result_shape):
        found = forms.factors([s.sharding for s in arg_shapes], [s.shape for s in arg_shapes])
        k_axes = mesh_axes(found["k"])
        # Where the partitioner wants a split product's rows split over the axes of its K (the
        # sequence-parallel form: Shardy asks it of a row-parallel projection), its sums are
        # scattered rather than summed whole on every device and then sliced: a reduce-scatter
        # in place of an all-reduce.
        scatter = None
        if k_axes and forms.outputs == 1 and found["m"] is None and found["n"] is None:
            wanted = _spec(getattr(result_shape, "sharding", None), 2)
            rows = arg_shapes[0].shape[0]
            if (
                set(mesh_axes(wanted[0])) == set(k_axes)
                and wanted[1] is None
                and rows % ways(mesh, found["k"]) == 0
            ):
                scatter = wanted[0]

        def lower(*args):
            a, b, c, r = split(args)
            if not k_axes:
                return whole(a, b, c, r)
            if scatter is None:
                return finish(jax.lax.psum(partial(a, b), k_axes), c, r)
            summed = jax.lax.psum_scatter(partial(a, b), k_axes, scatter_dimension=0, tiled=True)
            return finish(summed, c, r)

        results = forms.results(mesh, {**found, "m": scatter} if scatter else found)
        return mesh, lower, results, forms.shardings(mesh, found, scatter)

    fn.def_partition(
        infer_sharding_from_operands=infer,
        partition=partition,
        sharding_rule=forms.rule(),
        **forms.sizes(),
    )
    return fn
