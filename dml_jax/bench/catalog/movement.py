"""Bench cases of the operators of ``dml_jax.ops.movement``."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from dml_jax.bench.catalog import BenchCase, register_cases
from dml_jax.ops.movement import (
    CastOperatorDesc,
    Padding1OperatorDesc,
    PaddingOperatorDesc,
    ReverseSubsequencesOperatorDesc,
    Slice1OperatorDesc,
    SliceOperatorDesc,
)
from dml_jax.tensor import TensorDesc

_CAST_TARGETS = {"float32": "float16", "float16": "float32", "float64": "float32"}


def _bench_slice(shape: tuple, dtype: str, full: bool) -> list[BenchCase]:
    n, c, h, w = shape
    x = TensorDesc(dtype.upper(), shape)
    crop = SliceOperatorDesc(
        x, x.like(sizes=(n, c, h - 2, w - 2)), [0, 0, 1, 1], [n, c, h - 2, w - 2], [1, 1, 1, 1]
    )
    return [
        BenchCase(
            "SLICE crop 1",
            crop,
            jnp=lambda a: a[:, :, 1:-1, 1:-1],
            torch=lambda torch, a: a[:, :, 1:-1, 1:-1].contiguous(),
        ),
        BenchCase(
            "SLICE stride 2",
            SliceOperatorDesc(
                x, x.like(sizes=(n, c, h, w // 2)), [0, 0, 0, 1], [n, c, h, w // 2], [1, 1, 1, 2]
            ),
            jnp=lambda a: a[:, :, :, 1::2],
            torch=lambda torch, a: a[:, :, :, 1::2].contiguous(),
        ),
    ]


def _bench_slice1(shape: tuple, dtype: str, full: bool) -> list[BenchCase]:
    x = TensorDesc(dtype.upper(), shape)
    flip = Slice1OperatorDesc(x, x, [0, 0, 0, 0], list(shape), [1, 1, 1, -1])
    return [
        BenchCase(
            "SLICE1 reverse W",
            flip,
            jnp=lambda a: a[:, :, :, ::-1],
            torch=lambda torch, a: torch.flip(a, (3,)),
        )
    ]


def _bench_padding(cls: type, label: str):
    def cases(shape: tuple, dtype: str, full: bool) -> list[BenchCase]:
        n, c, h, w = shape
        out = TensorDesc(dtype.upper(), shape)
        x = out.like(sizes=(n, c, h - 2, w - 2))
        pads = {"start_padding": [0, 0, 1, 1], "end_padding": [0, 0, 1, 1]}

        def desc(mode: str):
            if cls is Padding1OperatorDesc:
                return cls(x, out, mode, dtype.upper(), 0, **pads)
            return cls(x, out, mode, 0.0, **pads)

        torch_pad = (1, 1, 1, 1)
        jnp_pad = ((0, 0), (0, 0), (1, 1), (1, 1))
        out_cases = [
            BenchCase(
                f"{label} CONSTANT",
                desc("CONSTANT"),
                jnp=lambda a: jnp.pad(a, jnp_pad),
                torch=lambda torch, a: torch.nn.functional.pad(a, torch_pad),
            )
        ]
        if np.dtype(dtype).kind == "f":  # torch pads mirrored only in float types
            out_cases.append(
                BenchCase(
                    f"{label} REFLECTION",
                    desc("REFLECTION"),
                    jnp=lambda a: jnp.pad(a, jnp_pad, mode="reflect"),
                    torch=lambda torch, a: torch.nn.functional.pad(a, torch_pad, mode="reflect"),
                )
            )
        return out_cases

    return cases


def _bench_cast(shape: tuple, dtype: str, full: bool) -> list[BenchCase]:
    x = TensorDesc(dtype.upper(), shape)
    target = _CAST_TARGETS.get(dtype, "float32")
    out_cases = []
    for to in dict.fromkeys([target, "int32" if dtype != "int32" else "int8"]):
        out_cases.append(
            BenchCase(
                f"CAST to {to.upper()}",
                CastOperatorDesc(x, x.like(data_type=to.upper())),
                jnp=lambda a, to=to: a.astype(to),
                torch=lambda torch, a, to=to: a.to(getattr(torch, to)),
            )
        )
    return out_cases


def _bench_reverse(shape: tuple, dtype: str, full: bool) -> list[BenchCase]:
    if not full:
        return []
    n, c, h, _ = shape
    x = TensorDesc(dtype.upper(), shape)
    desc = ReverseSubsequencesOperatorDesc(x, TensorDesc("UINT32", (n, c, h, 1)), x, axis=3)
    return [BenchCase("REVERSE_SUBSEQUENCES axis 3", desc)]


register_cases(SliceOperatorDesc, _bench_slice)
register_cases(Slice1OperatorDesc, _bench_slice1)
register_cases(PaddingOperatorDesc, _bench_padding(PaddingOperatorDesc, "PADDING (v1)"))
register_cases(Padding1OperatorDesc, _bench_padding(Padding1OperatorDesc, "PADDING"))
register_cases(CastOperatorDesc, _bench_cast)
register_cases(ReverseSubsequencesOperatorDesc, _bench_reverse)
