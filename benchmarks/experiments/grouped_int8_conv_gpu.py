"""Grouped and depthwise int8 convolutions on a GPU (issue 66, item 2: QDQ models beyond
ResNet-50). CONVOLUTION_INTEGER's lax lowering takes, on CUDA, one strided slice of the
padded input a kernel point and an integer matrix product a group (``quantized_conv.
_integer_sum``): XLA's own integer product, which ran ResNet-50's UINT8 3x3 convolutions at 8
ms each on an H200 (benchmarks/experiments/README.md). A depthwise convolution is a product of
one channel a group: here that form against others that give the same int32 sums, for
MobileNet-v2's depthwise convolutions and a ResNeXt grouped one at batch 64:

- ``lowering``: the operator's lax lowering as a CUDA program computes it;
- ``taps``: the sum over the window's points of the shifted input times the channel's filter
  value, in int32 (depthwise only: one XLA fusion);
- ``float32`` / ``float16``: cuDNN's float convolution of the (zero-point-free) values with
  float32 sums, exact where every partial sum is an integer under 2^24 (a 3x3 depthwise window:
  nine products of at most 2^16), unless cuDNN picks a transform (Winograd, FFT) that is not:
  each is checked against ``taps``;
- ``float16 model``: the float16 export's own convolution (float16 out), for scale.

Microseconds a call (median of ``--samples`` samples of ``--iters`` calls, one sync a sample)
and whether each form's sums equal the ``lowering``'s.

Usage: ``PYTHONPATH=. python3 benchmarks/experiments/grouped_int8_conv_gpu.py [--batch 64]``.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np
from quantize_steps_gpu import microseconds  # this folder's

# (H = W, channels, groups, window, stride): MobileNet-v2's depthwise convolutions, a
# ResNeXt-50 32x4d grouped one
SHAPES = [
    (112, 32, 32, 3, 1), (112, 96, 96, 3, 2), (56, 144, 144, 3, 1), (56, 144, 144, 3, 2),
    (28, 192, 192, 3, 1), (28, 192, 192, 3, 2), (14, 384, 384, 3, 1), (14, 576, 576, 3, 1),
    (14, 576, 576, 3, 2), (7, 960, 960, 3, 1), (56, 128, 32, 3, 1),
]  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--samples", type=int, default=5)
    p.add_argument("--iters", type=int, default=10)
    a = p.parse_args()
    import jax
    import jax.numpy as jnp
    from jax import lax

    import dml_jax as dml
    from dml_jax import fastpath
    from dml_jax.ops.quantized_conv import lower_convolution_integer

    platform = jax.devices()[0].platform
    print(jax.devices()[0].device_kind, jax.__version__, flush=True)
    rng = np.random.default_rng(0)
    for h, c, groups, r, stride in SHAPES:
        pad = r // 2
        out = (h + 2 * pad - r) // stride + 1
        x = jnp.asarray(rng.integers(-128, 128, (a.batch, c, h, h), dtype=np.int8))
        w = jnp.asarray(rng.integers(-127, 128, (c, c // groups, r, r), dtype=np.int8))
        td = dml.TensorDesc
        d = dml.ConvolutionIntegerOperatorDesc(
            td("INT8", x.shape), None, td("INT8", w.shape), None,
            td("INT32", (a.batch, c, out, out)), strides=(stride, stride), dilations=(1, 1),
            start_padding=(pad, pad), end_padding=(pad, pad), group_count=groups,
        )  # fmt: skip

        def lowering(x, w, d=d):
            with fastpath.target_platform(platform if platform != "gpu" else "cuda"):
                return lower_convolution_integer(d, x, w)[0]  # absent zero points: no arrays

        def conv(x, w, dtype, precision=None, groups=groups, stride=stride, pad=pad):
            return lax.conv_general_dilated(
                x.astype(dtype), w.astype(dtype), (stride, stride), [(pad, pad)] * 2,
                dimension_numbers=("NCHW", "OIHW", "NCHW"), feature_group_count=groups,
                precision=precision, preferred_element_type=jnp.float32,
            ).astype(jnp.int32)  # fmt: skip

        def taps(x, w, r=r, stride=stride, pad=pad, out=out):
            xp = jnp.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad))).astype(jnp.int32)
            acc = None
            for i in range(r):
                for j in range(r):
                    part = xp[:, :, i : i + stride * out : stride, j : j + stride * out : stride]
                    part = part * w[:, 0, i, j].astype(jnp.int32)[None, :, None, None]
                    acc = part if acc is None else acc + part
            return acc

        forms = {
            "lowering": lowering,
            "float32": lambda x, w: conv(x, w, jnp.float32, lax.Precision.HIGHEST),
            "float16": lambda x, w: conv(x, w, jnp.float16),
        }
        if groups == c:
            forms["taps"] = taps
        want = np.asarray(jax.jit(lowering)(x, w))
        line = f"{h:3}x{h:<3} {c:4} ch / {groups:4} groups {r}x{r}/{stride}:"
        for name, f in forms.items():
            g = jax.jit(f)
            jax.block_until_ready(g(x, w))  # compiled before it is timed
            times = microseconds(lambda g=g: g(x, w), a.samples, a.iters)
            same = bool(np.array_equal(np.asarray(g(x, w)), want))
            line += f" {name} {statistics.median(times):.1f} us ({'exact' if same else 'DIFFERS'});"
        xh = x.astype(jnp.float16)
        wh = w.astype(jnp.float16)

        def model(x, w, groups=groups, stride=stride, pad=pad):
            return lax.conv_general_dilated(
                x, w, (stride, stride), [(pad, pad)] * 2,
                dimension_numbers=("NCHW", "OIHW", "NCHW"), feature_group_count=groups,
            )  # fmt: skip

        model = jax.jit(model)
        jax.block_until_ready(model(xh, wh))
        times = microseconds(lambda: model(xh, wh), a.samples, a.iters)
        print(f"{line} float16 model {statistics.median(times):.1f} us", flush=True)


if __name__ == "__main__":
    main()
