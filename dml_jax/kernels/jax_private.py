"""Every import of jax's private modules (``jax._src``) that the kernels make, in one place.

The Mosaic GPU kernels emit a few MLIR operations Pallas has no public form for (inline PTX, a
proxy fence, cluster barriers and shared-memory views) through jax's MLIR bindings, and the scan
kernel adds CUMULATIVE_PRODUCT's rule to Pallas's Triton lowering table. These live under
``jax._src``, which may change in any release, so the kernels reach them only through the
functions here, each importing when called (CPU-only programs never load them);
``tests/test_imports.py`` checks that no other module imports ``jax._src`` and that these
resolve under the installed jax.

Tested on jax 0.10.x (CPU, where the kernels are never lowered: imports only) and jax 0.11.x
(0.11.2 on NVIDIA H100 and H200 machines, where the kernels run). ``mosaic.JAX_VERSIONS`` keeps
the Mosaic GPU kernels to the releases they were tested under.
"""

from __future__ import annotations

from types import ModuleType

TESTED_JAX_VERSIONS = ((0, 10), (0, 11))


def mlir_ir() -> ModuleType:
    """jax's MLIR ``ir`` bindings (``jax._src.lib.mlir``'s ``ir``, a module it imports from
    jaxlib rather than a submodule of its own)."""
    from jax._src.lib.mlir import ir

    return ir


def mlir_dialects(*names: str) -> tuple[ModuleType, ...]:
    """jax's MLIR dialect bindings by name (``"arith"``, ``"llvm"``, ``"nvvm"`` ...), in order:
    attributes of ``jax._src.lib.mlir.dialects``, as ``from ... dialects import arith`` reads
    them."""
    from jax._src.lib.mlir import dialects

    return tuple(getattr(dialects, n) for n in names)


def triton_lowering() -> ModuleType:
    """Pallas's Triton lowering module (its rule table ``triton_lowering_rules``)."""
    from jax._src.pallas.triton import lowering

    return lowering


def cudnn_version() -> int:
    """The cuDNN version jaxlib was built against (``jax._src.lib.cuda_versions``; raises on a
    jaxlib without CUDA): the benchmarks record it beside their attention timings."""
    from jax._src.lib import cuda_versions

    return cuda_versions.cudnn_get_version()
