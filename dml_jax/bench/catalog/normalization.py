"""Bench cases of the operators of ``dml_jax.ops.normalization``."""

from __future__ import annotations

import math

import jax.numpy as jnp
from jax import lax

from dml_jax.bench.catalog import BenchCase, register_cases
from dml_jax.ops.normalization import (
    BatchNormalizationOperatorDesc,
    BatchNormalizationTrainingOperatorDesc,
    MeanVarianceNormalization1OperatorDesc,
    MeanVarianceNormalization2OperatorDesc,
    MeanVarianceNormalizationOperatorDesc,
)
from dml_jax.tensor import TensorDesc


def _layer_norm_jnp(axes, eps, dtype, rms=False):
    def fn(x, scale, bias):
        xf = x.astype(jnp.float32)
        if rms:
            y = xf * lax.rsqrt(jnp.mean(xf * xf, axis=axes, keepdims=True) + eps)
        else:
            mean = jnp.mean(xf, axis=axes, keepdims=True)
            var = jnp.mean(jnp.square(xf - mean), axis=axes, keepdims=True)
            y = (xf - mean) * lax.rsqrt(var + eps)
        return (y * scale + bias).astype(dtype)

    return fn


def _rows_of(shape: tuple, dtype: str, row: int):
    n = math.prod(shape)
    if n % row:
        return None
    return TensorDesc(dtype.upper(), (n // row, row))


def _bench_batch_norm(shape: tuple, dtype: str, full: bool) -> list[BenchCase]:
    if dtype not in ("float32", "float16"):
        return []
    c = shape[1]
    x = TensorDesc(dtype.upper(), shape)
    p = x.like(sizes=(1, c, 1, 1))
    eps = 1e-5

    def jnp_fn(x, mean, var, scale, bias):
        # The textbook formula (the harness draws normal values, so channels with a negative
        # variance are NaN in every implementation alike).
        wide = [a.astype(jnp.float32) for a in (x, mean, var, scale, bias)]
        x, mean, var, scale, bias = wide
        y = (x - mean) * (scale * lax.rsqrt(var + eps)) + bias
        return y.astype(dtype)

    def torch_fn(torch, x, mean, var, scale, bias):
        return torch.nn.functional.batch_norm(
            x,
            mean.reshape(-1),
            var.reshape(-1),
            scale.reshape(-1),
            bias.reshape(-1),
            training=False,
            eps=eps,
        )

    return [
        BenchCase(
            "BATCH_NORMALIZATION inference {1,C,1,1}",
            BatchNormalizationOperatorDesc(x, p, p, p, p, x, spatial=True, epsilon=eps),
            jnp=jnp_fn,
            torch=torch_fn,
        )
    ]


def _bench_batch_norm_training(shape: tuple, dtype: str, full: bool) -> list[BenchCase]:
    if dtype not in ("float32", "float16"):
        return []
    c = shape[1]
    x = TensorDesc(dtype.upper(), shape)
    p = x.like(sizes=(1, c, 1, 1))
    eps = 1e-5

    def jnp_fn(x, scale, bias):
        xf = x.astype(jnp.float32)
        mean = xf.mean(axis=(0, 2, 3), keepdims=True)
        var = jnp.square(xf - mean).mean(axis=(0, 2, 3), keepdims=True)
        y = (xf - mean) * lax.rsqrt(var + eps) * scale.astype(jnp.float32) + bias
        return y.astype(dtype), mean.astype(dtype), var.astype(dtype)

    def torch_fn(torch, x, scale, bias):
        var, mean = torch.var_mean(x, dim=(0, 2, 3), keepdim=True, correction=0)
        y = torch.nn.functional.batch_norm(
            x, None, None, scale.reshape(-1), bias.reshape(-1), training=True, eps=eps
        )
        return y, mean, var

    return [
        BenchCase(
            "BATCH_NORMALIZATION_TRAINING over N,H,W",
            BatchNormalizationTrainingOperatorDesc(x, p, p, None, x, p, p, epsilon=eps),
            jnp=jnp_fn,
            torch=torch_fn,
        )
    ]


def _bench_mvn(version: str):
    eps = 1e-5

    def cases(shape: tuple, dtype: str, full: bool) -> list[BenchCase]:
        if dtype not in ("float32", "float16"):
            return []
        c = shape[1]
        x = TensorDesc(dtype.upper(), shape)
        per_c = x.like(sizes=(1, c, 1, 1))
        out = []

        def instance_torch(torch, x, scale, bias):
            return torch.nn.functional.instance_norm(
                x, weight=scale.reshape(-1), bias=bias.reshape(-1), eps=eps
            )

        instance = _layer_norm_jnp((2, 3), eps, dtype)
        if version == "":
            desc = MeanVarianceNormalizationOperatorDesc(
                x, per_c, per_c, x, cross_channel=False, normalize_variance=True, epsilon=eps
            )
            out.append(BenchCase("MVN instance norm (H,W of NCHW)", desc, instance, instance_torch))
            return out
        flat = _rows_of(shape, dtype, 4096)
        if version == "1":
            desc = MeanVarianceNormalization1OperatorDesc(
                x, per_c, per_c, x, axes=(2, 3), normalize_variance=True, epsilon=eps
            )
            out.append(
                BenchCase("MVN1 instance norm (H,W of NCHW)", desc, instance, instance_torch)
            )
        if flat is None:
            return out
        row = flat.like(sizes=(1, 4096))

        def layer_torch(torch, x, scale, bias):
            return torch.nn.functional.layer_norm(
                x, (4096,), scale.reshape(-1), bias.reshape(-1), eps
            )

        def rms_torch(torch, x, scale, bias):
            xf = x.float()
            y = xf * torch.rsqrt(xf.square().mean(dim=-1, keepdim=True) + eps)
            return (y * scale + bias).to(x.dtype)

        if version == "1":
            desc = MeanVarianceNormalization1OperatorDesc(
                flat, row, row, flat, axes=(1,), normalize_variance=True, epsilon=eps
            )
            out.append(
                BenchCase(
                    "MVN1 layer norm rows of 4096",
                    desc,
                    _layer_norm_jnp((1,), eps, dtype),
                    layer_torch,
                )
            )
        else:
            for use_mean in (True, False):
                desc = MeanVarianceNormalization2OperatorDesc(
                    flat,
                    row,
                    row,
                    flat,
                    axes=(1,),
                    use_mean=use_mean,
                    use_variance=True,
                    epsilon=eps,
                )
                out.append(
                    BenchCase(
                        f"MVN2 {'layer' if use_mean else 'RMS'} norm rows of 4096",
                        desc,
                        _layer_norm_jnp((1,), eps, dtype, rms=not use_mean),
                        layer_torch if use_mean else rms_torch,
                    )
                )
        return out

    return cases


register_cases(BatchNormalizationOperatorDesc, _bench_batch_norm)
register_cases(BatchNormalizationTrainingOperatorDesc, _bench_batch_norm_training)
register_cases(MeanVarianceNormalizationOperatorDesc, _bench_mvn(""))
register_cases(MeanVarianceNormalization1OperatorDesc, _bench_mvn("1"))
register_cases(MeanVarianceNormalization2OperatorDesc, _bench_mvn("2"))
