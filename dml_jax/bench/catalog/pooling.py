"""Bench cases of the operators of ``dml_jax.ops.pooling``."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
from jax import lax

from dml_jax.bench.catalog import BenchCase, register_cases
from dml_jax.ops.pooling import AveragePoolingOperatorDesc, MaxPoolingOperatorDesc
from dml_jax.tensor import TensorDesc


def _bench_pooling(kind: str) -> Any:
    """MAX or AVERAGE pooling cases: 2x2 windows of stride 2 (disjoint) and 3x3 of stride 1
    padded by 1 (overlapping windows), against reduce_window and PyTorch's pooling."""

    def cases(shape: tuple, dtype: str, full: bool) -> list[BenchCase]:
        if dtype not in ("float32", "float16"):
            return []
        n, c, h, w = shape
        x = TensorDesc(dtype.upper(), shape)
        out = []
        for window, stride, pad in ((2, 2, 0), (3, 1, 1)):
            sizes = (n, c) + tuple((e + 2 * pad - window) // stride + 1 for e in (h, w))
            geometry = {
                "strides": [stride] * 2,
                "window_size": [window] * 2,
                "start_padding": [pad] * 2,
                "end_padding": [pad] * 2,
            }
            if kind == "MAX":
                desc = MaxPoolingOperatorDesc(x, x.like(sizes=sizes), **geometry)
            else:
                desc = AveragePoolingOperatorDesc(
                    x, x.like(sizes=sizes), **geometry, include_padding=True
                )
            args = ((1, 1, window, window), (1, 1, stride, stride))
            args += (((0, 0), (0, 0), (pad, pad), (pad, pad)),)

            def jnp_fn(y, args=args, window=window):
                if kind == "MAX":
                    return lax.reduce_window(y, -jnp.inf, lax.max, *args)
                return lax.reduce_window(y, 0.0, lax.add, *args) / (window * window)

            def torch_fn(torch, y, window=window, stride=stride, pad=pad):
                functional = torch.nn.functional
                pool = functional.max_pool2d if kind == "MAX" else functional.avg_pool2d
                return pool(y, window, stride, pad)

            label = f"{kind}_POOLING {window}x{window} stride {stride} pad {pad}"
            out.append(BenchCase(label, desc, jnp=jnp_fn, torch=torch_fn))
        return out

    return cases


register_cases(AveragePoolingOperatorDesc, _bench_pooling("AVERAGE"))
register_cases(MaxPoolingOperatorDesc, _bench_pooling("MAX"))
