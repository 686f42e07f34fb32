"""Convolutions whose windows tile the input (strides equal to the window: patch embeddings,
ConvNeXt's and Swin's stem and downsampling layers) as XLA's convolution against the CONVOLUTION
lowering's matrix product (``ops.conv_forms._patch_product``), alone, on the default backend.

Each shape is timed as XLA's convolution (``conv_forms._conv``), as the product (the filter on the
left, {K, N, positions}, then the batch moved first) and as the einsum written image-first
(``nchpwq,kcpq->nkhw``: XLA picks the operands' order); the largest difference from the
convolution is printed beside. The bench harness's ``Timer`` (many dispatches, one sync).

Usage: ``PYTHONPATH=. python benchmarks/experiments/patch_products.py [--batch 64 --dtype
float16]`` (defaults: batch 1 float32 on the CPU, batch 64 float16 elsewhere). Figures: the
README beside this file.
"""

import argparse

import jax
import jax.numpy as jnp
import numpy as np

from dml_jax.bench.harness import Timer, jax_sync
from dml_jax.ops import conv_forms as G
from dml_jax.precision import matmul_precision

cpu = jax.default_backend() == "cpu"
p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, default=1 if cpu else 64)
p.add_argument("--dtype", default="float32" if cpu else "float16")
args = p.parse_args()

# (input channels, output channels, image size, window): ViT-B/16, ConvNeXt-T, Swin-T.
SHAPES = [
    (3, 768, 224, 16),
    (3, 96, 224, 4),
    (96, 192, 56, 2),
    (192, 384, 28, 2),
    (384, 768, 14, 2),
]
timer = Timer()
rng = np.random.default_rng(0)
dtype = jnp.dtype(args.dtype)
print(f"{jax.devices()[0].device_kind}, jax {jax.__version__}, batch {args.batch}, {args.dtype}")
print("shape | convolution ms | product ms | image-first einsum ms | max |diff|")
for c, k, size, win in SHAPES:
    x = jnp.asarray(rng.standard_normal((args.batch, c, size, size)), dtype)
    w = jnp.asarray(rng.standard_normal((k, c, win, win)) / np.sqrt(c * win * win), dtype)
    zero = [(0, 0), (0, 0)]
    conv = jax.jit(lambda x, w: G._conv(x, w, (win, win), zero, (1, 1), (1, 1), 1))
    product = jax.jit(lambda x, w: G._patch_product(x, w, zero))

    def image_first(x, w, win=win):
        n, c, h, v = x.shape
        blocks = x.reshape(n, c, h // win, win, v // win, win)
        return jnp.einsum("nchpwq,kcpq->nkhw", blocks, w, precision=matmul_precision())

    image_first = jax.jit(image_first)
    want = np.asarray(conv(x, w), np.float32)
    times, diff = [], 0.0
    for f in (conv, product, image_first):
        times.append(timer.run(lambda f=f: f(x, w), jax_sync) * 1e3)
        diff = max(diff, float(np.max(np.abs(np.asarray(f(x, w), np.float32) - want))))
    print(f"{c}->{k} {win}x{win}/{win} at {size} | " + " | ".join(f"{t:.3f}" for t in times)
          + f" | {diff:.1e}")  # fmt: skip
