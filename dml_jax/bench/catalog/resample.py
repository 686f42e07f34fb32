"""Bench cases of the operators of ``dml_jax.ops.resample``."""

from __future__ import annotations

from dml_jax.bench.catalog import BenchCase, register_cases
from dml_jax.ops.resample import Upsample2DOperatorDesc
from dml_jax.tensor import Size2D, TensorDesc


def _jax_resize(x, shape, method: str):
    import jax

    return jax.image.resize(x, shape, method)


def _bench(shape: tuple, dtype: str, full: bool) -> list[BenchCase]:
    """2x nearest and bilinear upsampling of a quarter of the shape to the whole shape, and 4x
    bilinear of a sixteenth (GPU kernels cover the bilinear cases, and nearest in float16)."""
    if dtype not in ("float32", "float16"):
        return []
    n, c, h, w = shape
    out = TensorDesc(dtype.upper(), shape)
    cases = []
    for factor, mode, jax_method, torch_mode in (
        (2, "NEAREST_NEIGHBOR", "nearest", "nearest"),
        (2, "LINEAR", "linear", "bilinear"),
        (4, "LINEAR", "linear", "bilinear"),
    ):
        if h % factor or w % factor:
            continue
        x = out.like(sizes=(n, c, h // factor, w // factor))

        def jnp_fn(x, method=jax_method):
            return _jax_resize(x, shape, method)

        def torch_fn(torch, x, mode=torch_mode, factor=factor):
            extra = {} if mode == "nearest" else {"align_corners": False}
            return torch.nn.functional.interpolate(x, scale_factor=factor, mode=mode, **extra)

        cases.append(
            BenchCase(
                f"UPSAMPLE_2D {factor}x {mode}",
                Upsample2DOperatorDesc(
                    x, out, scale_size=Size2D(factor, factor), interpolation_mode=mode
                ),
                jnp=jnp_fn,
                torch=torch_fn,
            )
        )
    return cases


register_cases(Upsample2DOperatorDesc, _bench)
