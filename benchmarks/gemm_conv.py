"""GEMM and CONVOLUTION in TFLOP/s: dml_jax against jax and PyTorch at the same precision.

Cases: the issue's anchors (8192^3 GEMM in float32 at full precision, with the
ALLOW_HALF_PRECISION_COMPUTATION flag against TF32, and in float16; 256 batched 512x64x512
float16; a 3x3 convolution N=64, C=K=256, 56x56 in float16 and float32) and layer shapes of
ResNet-50 (1x1, 3x3 stride 2, 7x7 stride 2 stem) and a transformer (QKV and MLP projections,
batched attention products), plus depthwise and transposed convolutions. Each is timed with many
dispatches and one sync. Run from the repository root on a CUDA machine:

    XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=. python benchmarks/gemm_conv.py OUT.json
"""

from __future__ import annotations

import json
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from timing import timeit, torch_best

import dml_jax as dml

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


def cases():
    out = [
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
    return out


def main() -> int:
    try:
        import torch
    except ImportError:
        torch = None
    rows = []
    for case in cases():
        desc = case["desc"]
        op = dml.compile_operator(desc, allow_half_precision=case["half"])
        key = jax.random.PRNGKey(0)
        xs = [
            jax.random.normal(jax.random.fold_in(key, i), t.sizes, jnp.float32).astype(t.dtype)
            for i, (_, t) in enumerate(desc.input_slots())
        ]
        fn = jax.jit(op.fn)
        t_dml = timeit(fn, *xs)
        t_jnp = timeit(jax.jit(case["jnp"]), *xs)
        t_torch = None
        if torch is not None and torch.cuda.is_available():
            torch.backends.cuda.matmul.allow_tf32 = case["tf32"]
            torch.backends.cudnn.allow_tf32 = case["tf32"]
            ts = [torch.from_numpy(np.asarray(x)).cuda() for x in xs]
            t_torch = torch_best(lambda *a: case["torch"](torch, *a), *ts)
            del ts
            torch.cuda.empty_cache()
        del xs
        tf = case["flops"] / 1e12
        row = dict(case=case["label"], dtype=desc.input_slots()[0][1].data_type.name,
                   dml_tflops=tf / t_dml, jnp_tflops=tf / t_jnp,
                   torch_tflops=tf / t_torch if t_torch else None)  # fmt: skip
        best = max(v for v in (row["jnp_tflops"], row["torch_tflops"]) if v)
        row["ratio_to_best"] = row["dml_tflops"] / best
        rows.append(row)
        torch_text = f"{row['torch_tflops']:8.1f}" if row["torch_tflops"] else "       -"
        print(f"{row['case']:44s} {row['dtype']:8s} dml {row['dml_tflops']:8.1f}  jnp "
              f"{row['jnp_tflops']:8.1f}  torch {torch_text}  ratio {row['ratio_to_best']:.2f}",
              flush=True)  # fmt: skip
    env = dict(device=str(jax.devices()[0].device_kind), jax=jax.__version__,
               torch=getattr(torch, "__version__", None), date=time.strftime("%Y-%m-%d"))  # fmt: skip
    print(env)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(dict(environment=env, results=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
