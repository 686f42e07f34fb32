"""Where Pallas's Mosaic GPU kernels may run: a Hopper GPU (compute capability 9.x: WGMMA, TMA)
as the default device, under a jax release they were written and tested for (jax 0.11.2 on an
H100). Mosaic GPU's interface changes between releases, so any other release keeps the other
lowerings (``gemm``, ``scatter``)."""

from __future__ import annotations

import jax

JAX_VERSIONS = ((0, 11), (0, 12))  # [from, to)


def hopper() -> bool:
    """A CUDA device of compute capability 9.x is the default device, under a jax release in
    ``JAX_VERSIONS``."""
    version = tuple(int(p) for p in jax.__version__.split(".")[:2])
    if not JAX_VERSIONS[0] <= version < JAX_VERSIONS[1]:
        return False
    try:
        dev = jax.devices()[0]
    except RuntimeError:
        return False
    return dev.platform == "gpu" and str(getattr(dev, "compute_capability", "")).startswith("9")
