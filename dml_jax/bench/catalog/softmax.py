"""Bench cases of the operators of ``dml_jax.ops.softmax``."""

from __future__ import annotations

import math

import jax

from dml_jax.bench.catalog import BenchCase, register_cases
from dml_jax.ops.softmax import CLASSES, FUNCTIONS
from dml_jax.tensor import TensorDesc


def _bench(function: str, version: str):
    def cases(shape: tuple, dtype: str, full: bool) -> list[BenchCase]:
        if dtype not in ("float32", "float16"):
            return []
        n = math.prod(shape)
        label = f"{function}{version}"
        jnp_fn = {"SOFTMAX": jax.nn.softmax, "LOG_SOFTMAX": jax.nn.log_softmax}.get(function)
        torch_name = {"SOFTMAX": "softmax", "LOG_SOFTMAX": "log_softmax"}.get(function)
        out = []
        if version == "":
            for row in (1024, 32768):
                if n % row:
                    continue  # a small (quick) shape
                flat = TensorDesc(dtype.upper(), (n // row, row))
                out.append(
                    BenchCase(
                        f"{label} rows of {row}",
                        CLASSES[function](flat, flat),
                        jnp=jnp_fn and (lambda x, f=jnp_fn: f(x, axis=-1)),
                        torch=torch_name
                        and (lambda torch, x, m=torch_name: getattr(torch, m)(x, dim=-1)),
                    )
                )
        else:
            # Axis 1 of NCHW with C = 32 (the anchor) and the shape's own C.
            n_, c, h, w = shape
            for channels in sorted({32, c}):
                if (n_ * c) % channels:
                    continue
                nchw = TensorDesc(dtype.upper(), ((n_ * c) // channels, channels, h, w))
                out.append(
                    BenchCase(
                        f"{label} axis 1 (NCHW, C={channels})",
                        CLASSES[function + "1"](nchw, nchw, axes=(1,)),
                        jnp=jnp_fn and (lambda x, f=jnp_fn: f(x, axis=1)),
                        torch=torch_name
                        and (lambda torch, x, m=torch_name: getattr(torch, m)(x, dim=1)),
                    )
                )
        return out

    return cases


for _function in FUNCTIONS:
    for _version in ("", "1"):
        register_cases(CLASSES[_function + _version], _bench(_function, _version))
