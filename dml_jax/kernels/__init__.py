"""GPU fast paths: Pallas kernels where XLA's own code runs below memory bandwidth, and cuDNN's
attention where XLA has no fused form.

Each module registers its fast paths with ``dml_jax.fastpath`` (an operator type, a predicate
on the descriptor and a CUDA lowering); importing this package, which ``import dml_jax`` does,
imports every module of it (in name order, as ``ops/__init__.py`` does) and so fills that
registry: a new kernel module needs no line elsewhere. ``dml_jax.fastpath.lowering`` then picks
the fast path only when the program is lowered for CUDA; every other case, and every other
platform, runs the lax lowering in ``dml_jax.ops``, which stays the reference.

Which module serves which operators, from each module's docstring: docs/fast-paths.md
(``dml-jax list-operators --fast-paths`` prints the registry). Shared pieces: ``pallas_helpers``
(Pallas loaded on first use, inline PTX, a NaN test), ``mosaic`` (where the Mosaic GPU kernels
run), ``jax_private`` (every import of jax's private modules, with the jax releases it was
tested on) and ``reduce_plan`` (the reductions' tiling, no Pallas import).
"""

import importlib as _importlib
import pkgutil as _pkgutil

for _module in sorted(m.name for m in _pkgutil.iter_modules(__path__)):
    if not _module.startswith("_"):
        _importlib.import_module(f"{__name__}.{_module}")

from .reduce_paths import arg_reduce, log_sum_exp, reduce_extreme
from .reduce_plan import plan

__all__ = ["arg_reduce", "log_sum_exp", "plan", "reduce_extreme"]
