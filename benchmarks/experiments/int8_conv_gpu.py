"""Whether a QDQ convolution gains from running on 8-bit values on a GPU (issue 66, item 2: a
static-QDQ ResNet-50 at 1.3x its float16 export): XLA's convolution of int8 NHWC operands
accumulating in int32 (cuDNN's integer convolutions), then the per-channel scale and bias,
against the float16 convolution of the same shape (NHWC, float32 accumulation), for the
convolutions of ResNet-50 at batch 64. TOPS / TFLOP/s at 2 x N x H x W x C x K x R x S
operations a call, median of 20 calls after warm-up, and the integer result checked against a
float32 convolution of the same integers.

Decides whether the QDQ rewrite that takes DequantizeLinear -> Conv into CONVOLUTION_INTEGER
(as ``QDQMatMulFusion`` takes MatMuls into MATRIX_MULTIPLY_INTEGER_TO_FLOAT) would help there.

Usage: ``PYTHONPATH=. python3 benchmarks/experiments/int8_conv_gpu.py [--batch 64]``.
"""

from __future__ import annotations

import argparse
import functools
import time

import jax
import jax.numpy as jnp
import numpy as np

# (H = W, C in, K out, R = S, stride) of ResNet-50's distinct convolutions after the stem
SHAPES = [
    (56, 64, 64, 1, 1), (56, 64, 64, 3, 1), (56, 64, 256, 1, 1), (56, 256, 128, 1, 1),
    (28, 128, 128, 3, 1), (28, 128, 512, 1, 1), (28, 512, 256, 1, 1), (14, 256, 256, 3, 1),
    (14, 256, 1024, 1, 1), (14, 1024, 512, 1, 1), (7, 512, 512, 3, 1), (7, 512, 2048, 1, 1),
]  # fmt: skip
DN = ("NHWC", "HWIO", "NHWC")


def timed(fn, *args) -> float:
    out = fn(*args)
    jax.block_until_ready(out)
    times = []
    for _ in range(20):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=64)
    a = p.parse_args()
    print(jax.devices()[0].device_kind, jax.__version__, flush=True)
    rng = np.random.default_rng(0)
    total = {"float16": 0.0}
    for h, c, k, r, stride in SHAPES:
        x = rng.integers(-127, 128, (a.batch, h, h, c), dtype=np.int8)
        w = rng.integers(-127, 128, (r, r, c, k), dtype=np.int8)
        scale = jnp.asarray(rng.uniform(1e-4, 1e-3, k), jnp.float32)
        bias = jnp.asarray(rng.standard_normal(k) * 0.1, jnp.float32)
        pad = "SAME"

        def int8(x, w, scale, bias, out=jnp.int32):
            acc = jax.lax.conv_general_dilated(
                x, w, (stride, stride), pad, dimension_numbers=DN, preferred_element_type=out,
            )  # fmt: skip
            return (acc.astype(jnp.float32) * scale + bias).astype(jnp.float16)

        def f16(x, w, scale, bias):
            y = jax.lax.conv_general_dilated(
                x, w, (stride, stride), pad, dimension_numbers=DN,
                preferred_element_type=jnp.float32,
            )  # fmt: skip
            return (y * scale + bias).astype(jnp.float16)

        xi, wi = jnp.asarray(x), jnp.asarray(w)
        xh, wh = xi.astype(jnp.float16), wi.astype(jnp.float16)
        ops = 2 * a.batch * (h // stride) ** 2 * c * k * r * r
        th = timed(jax.jit(f16), xh, wh, scale, bias)
        total["float16"] += th
        exact = jax.lax.conv_general_dilated(
            xi.astype(jnp.float32), wi.astype(jnp.float32), (stride, stride), pad,
            dimension_numbers=DN, precision=jax.lax.Precision.HIGHEST,
        )  # fmt: skip
        line = f"{h:3}x{h:<3} {c:5}->{k:<5} {r}x{r}: float16 {th * 1e3:7.3f} ms " \
               f"{ops / th / 1e12:6.1f} TFLOP/s"  # fmt: skip
        # int8 operands, sums in int32 (cuDNN's integer convolution) or in float32 (its int8
        # convolution with a float output): XLA may take one and not the other
        for form, out in (("int8->int32", jnp.int32), ("int8->float32", jnp.float32)):
            try:
                ti = timed(jax.jit(functools.partial(int8, out=out)), xi, wi, scale, bias)
                got = jax.jit(lambda x, w, out=out: jax.lax.conv_general_dilated(
                    x, w, (stride, stride), pad, dimension_numbers=DN,
                    preferred_element_type=out))(xi, wi)  # fmt: skip
            except Exception as e:  # the form XLA cannot compile here: said, and the next
                line += f"; {form}: {type(e).__name__}: {str(e).splitlines()[0][:120]}"
                continue
            total.setdefault(form, 0.0)
            total[form] += ti
            agree = bool(jnp.all(got.astype(jnp.float32) == exact))  # sums << 2^24
            line += (f"; {form} {ti * 1e3:7.3f} ms {ops / ti / 1e12:6.1f} TOPS x{th / ti:5.2f} "
                     f"exact {agree}")  # fmt: skip
        print(line, flush=True)
    for form, t in total.items():
        if t and form != "float16":
            print(f"all shapes once: {form} {t * 1e3:.2f} ms, float16 {total['float16'] * 1e3:.2f} "
                  f"ms, x{total['float16'] / t:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
