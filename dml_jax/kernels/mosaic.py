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


def multiprocessors() -> int:
    """The default device's multiprocessors (0 where it does not say): a persistent kernel's
    grid, one program each."""
    return int(getattr(jax.devices()[0], "core_count", 0) or 0)


def swizzled(plgpu, cols: int, itemsize: int = 2) -> tuple:
    """Shared-memory transforms of tiles ``cols`` elements of ``itemsize`` bytes wide for TMA
    and WGMMA: 8-row tiles, swizzled (rows of 16 bytes, which no swizzle fits, tiled only)."""
    swizzle = plgpu.find_swizzle(cols * itemsize * 8)
    if swizzle < 32:
        return (plgpu.TilingTransform((8, cols)),)
    return (plgpu.TilingTransform((8, swizzle // itemsize)), plgpu.SwizzleTransform(swizzle))


def approx(x, op: str):
    """PTX's ``{op}.approx.ftz.f32`` (``op``: ``lg2``, ``ex2``, ``rsqrt``...: one MUFU
    instruction, denormals flushed) on each element of a float32 array in the WGMMA layout,
    inside a Mosaic GPU kernel. ``approx_math`` lowers ``jnp.log2`` and friends to the forms
    without ``.ftz``, which test and scale denormal operands: three more instructions each."""
    import jax.experimental.pallas.mosaic_gpu as plgpu
    import jax.numpy as jnp

    layout = plgpu.Layout.WGMMA

    @plgpu.inline_mgpu(
        arg_types=(layout,),
        return_type=plgpu.ShapeDtypeStruct(x.shape, jnp.float32, layout=layout),
    )
    def run(ctx, v):
        del ctx
        return v._pointwise(v._lift_fast_instr(f"{op}.approx.ftz.f32"))

    return run(x)
