"""The GEMM and CONVOLUTION suite: TFLOP/s of dml_jax against jax and PyTorch at the same
precision.

Cases: the anchors (8192^3 GEMM in float32 at full precision, with the
ALLOW_HALF_PRECISION_COMPUTATION flag against TF32, and in float16; 256 batched 512x64x512
float16; a 3x3 convolution N=64, C=K=256, 56x56 in float16 and float32) and layer shapes of
ResNet-50 (1x1, 3x3 stride 2, 7x7 stride 2 stem) and a transformer (QKV and MLP projections,
batched attention products), plus depthwise and transposed convolutions. ``--quick``: the same
kinds of case at tiny sizes. ``ratio_to_best`` is dml_jax's rate over the faster of jax and
PyTorch.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import dml_jax as dml

from ..harness import Run, error_text, jax_sync

T = dml.TensorDesc


def gemm_case(label, batch, m, k, n, dtype, half=False):
    lead = (1, batch)
    desc = dml.GemmOperatorDesc(
        T(dtype, lead + (m, k)), T(dtype, lead + (k, n)), None, T(dtype, lead + (m, n))
    )
    precision = lax.Precision.DEFAULT if half else lax.Precision.HIGHEST

    def jnp_fn(a, b):
        return jnp.matmul(a, b, precision=precision)

    def torch_fn(torch, a, b):
        return torch.matmul(a, b)

    return dict(label=label, desc=desc, half=half, flops=2 * batch * m * n * k, jnp=jnp_fn,
                torch=torch_fn, tf32=half)  # fmt: skip


def conv_case(
    label, n, c, k, size, kernel, stride, pad, dtype, groups=1, backward=False, half=False
):
    x = T(dtype, (n, c, size, size))
    if backward:
        out_size = (size - 1) * stride + kernel - 2 * pad
        w = T(dtype, (c, k // groups, kernel, kernel))
    else:
        out_size = (size + 2 * pad - kernel) // stride + 1
        w = T(dtype, (k, c // groups, kernel, kernel))
    desc = dml.ConvolutionOperatorDesc(
        x, w, None, T(dtype, (n, k, out_size, out_size)),
        direction="BACKWARD" if backward else "FORWARD", dimension_count=2,
        strides=(stride, stride), dilations=(1, 1), start_padding=(pad, pad),
        end_padding=(pad, pad), output_padding=(0, 0), group_count=groups,
    )  # fmt: skip
    precision = lax.Precision.DEFAULT if half else lax.Precision.HIGHEST
    macs = n * k * out_size * out_size * (c // groups) * kernel * kernel
    if backward:
        macs = n * c * size * size * (k // groups) * kernel * kernel

    def jnp_fn(xa, wa):
        if backward:
            return lax.conv_transpose(
                xa, wa, (stride, stride), [(kernel - 1 - pad, kernel - 1 - pad)] * 2,
                dimension_numbers=("NCHW", "OIHW", "NCHW"), transpose_kernel=True,
                precision=precision,
            )  # fmt: skip
        return lax.conv_general_dilated(
            xa, wa, (stride, stride), [(pad, pad)] * 2, feature_group_count=groups,
            dimension_numbers=("NCHW", "OIHW", "NCHW"), precision=precision,
        )  # fmt: skip

    def torch_fn(torch, xa, wa):
        f = torch.nn.functional
        if backward:
            return f.conv_transpose2d(xa, wa, stride=stride, padding=pad, groups=groups)
        return f.conv2d(xa, wa, stride=stride, padding=pad, groups=groups)

    return dict(label=label, desc=desc, half=half, flops=2 * macs, jnp=jnp_fn, torch=torch_fn,
                tf32=half)  # fmt: skip


def cases(quick: bool) -> list[dict]:
    if quick:
        return [
            gemm_case("GEMM 64^3", 1, 64, 64, 64, "FLOAT32"),
            gemm_case("GEMM 64^3 (half-precision flag / TF32)", 1, 64, 64, 64, "FLOAT32", True),
            gemm_case("GEMM 64^3", 1, 64, 64, 64, "FLOAT16"),
            conv_case("CONV 3x3 N=2 C=K=8 16x16", 2, 8, 8, 16, 3, 1, 1, "FLOAT32"),
            conv_case("depthwise 3x3 C=8 16", 2, 8, 8, 16, 3, 1, 1, "FLOAT16", groups=8),
            conv_case("transposed 4x4/2 8->4 8", 2, 8, 4, 8, 4, 2, 1, "FLOAT16", backward=True),
        ]
    return [
        gemm_case("GEMM 8192^3", 1, 8192, 8192, 8192, "FLOAT32"),
        gemm_case(
            "GEMM 8192^3 (half-precision flag / TF32)", 1, 8192, 8192, 8192, "FLOAT32", half=True
        ),
        gemm_case("GEMM 8192^3", 1, 8192, 8192, 8192, "FLOAT16"),
        gemm_case("GEMM 256 x 512x64x512", 256, 512, 64, 512, "FLOAT16"),
        conv_case("CONV 3x3 N=64 C=K=256 56x56", 64, 256, 256, 56, 3, 1, 1, "FLOAT16"),
        conv_case("CONV 3x3 N=64 C=K=256 56x56", 64, 256, 256, 56, 3, 1, 1, "FLOAT32"),
        conv_case(
            "CONV 3x3 N=64 C=K=256 56x56 (flag / TF32)",
            64,
            256,
            256,
            56,
            3,
            1,
            1,
            "FLOAT32",
            half=True,
        ),
        # ResNet-50 layers (batch 64, float16)
        conv_case("ResNet stem 7x7/2 3->64 224", 64, 3, 64, 224, 7, 2, 3, "FLOAT16"),
        conv_case("ResNet 1x1 256->64 56", 64, 256, 64, 56, 1, 1, 0, "FLOAT16"),
        conv_case("ResNet 3x3/2 128 56->28", 64, 128, 128, 56, 3, 2, 1, "FLOAT16"),
        conv_case("ResNet 1x1 1024->2048 14->7 /2", 64, 1024, 2048, 14, 1, 2, 0, "FLOAT16"),
        conv_case("depthwise 3x3 C=256 56", 64, 256, 256, 56, 3, 1, 1, "FLOAT16", groups=256),
        conv_case(
            "transposed 4x4/2 256->128 28", 64, 256, 128, 28, 4, 2, 1, "FLOAT16", backward=True
        ),
        # transformer layers (4096 tokens, d=1024, float16)
        gemm_case("QKV projection 4096x1024x3072", 1, 4096, 1024, 3072, "FLOAT16"),
        gemm_case("MLP up 4096x1024x4096", 1, 4096, 1024, 4096, "FLOAT16"),
        gemm_case("attention QK^T 128 x 1024x64x1024", 128, 1024, 64, 1024, "FLOAT16"),
    ]


def add_arguments(p: Any) -> None:
    p.add_argument("--only", default=None, help="cases whose label contains this ('A|B': either)")


def run(run: Run) -> int:
    torch = run.torch
    timer = run.timer
    for case in cases(run.quick):
        if run.args.only and not any(w in case["label"] for w in run.args.only.split("|")):
            continue
        desc = case["desc"]
        row = dict(case=case["label"], dtype=desc.input_slots()[0][1].data_type.name)
        if run.over_budget():
            run.skip(f"{row['case']} {row['dtype']} on", f"--budget-s {run.args.budget_s}")
            break
        try:
            op = dml.compile_operator(desc, allow_half_precision=case["half"])
            key = jax.random.PRNGKey(0)
            xs = [
                jax.random.normal(jax.random.fold_in(key, i), t.sizes, jnp.float32).astype(t.dtype)
                for i, (_, t) in enumerate(desc.input_slots())
            ]
            fn, ref = jax.jit(op.fn), jax.jit(case["jnp"])
            tf = case["flops"] / 1e12
            row["dml_tflops"] = tf / timer.run(lambda: fn(*xs), jax_sync)
            row["jnp_tflops"] = tf / timer.run(lambda: ref(*xs), jax_sync)
            if torch is not None:
                torch.backends.cuda.matmul.allow_tf32 = case["tf32"]
                torch.backends.cudnn.allow_tf32 = case["tf32"]
                ts = [torch.from_numpy(np.asarray(x)).cuda() for x in xs]
                seconds = timer.run(lambda: case["torch"](torch, *ts), run.torch_sync)
                row["torch_tflops"] = tf / seconds
                del ts
                torch.cuda.empty_cache()
            del xs
            best = max(row.get("jnp_tflops") or 0, row.get("torch_tflops") or 0)
            row["ratio_to_best"] = row["dml_tflops"] / best
        except Exception as e:  # recorded, the run goes on
            row["error"] = error_text(e)
        run.add(row)
    return 0


def table(report: dict) -> list[str]:
    lines = [
        (
            "TFLOP/s; float32 at full precision unless the half-precision flag is named (against "
            "TF32); `dml/best`: dml_jax over the faster of jax and PyTorch."
        ),
        "",
        "| case | dtype | dml | jax | PyTorch | dml/best |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in report["rows"]:
        cells = [_rate(r.get(k)) for k in ("dml_tflops", "jnp_tflops", "torch_tflops")]
        ratio = f"{r['ratio_to_best']:.2f}" if r.get("ratio_to_best") else r.get("error", "-")
        lines.append(f"| {r['case']} | {r['dtype']} | {' | '.join(cells)} | {ratio} |")
    return lines


def _rate(value: float | None) -> str:
    if not value:
        return "-"
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}"
