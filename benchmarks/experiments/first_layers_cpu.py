"""First layers (3 input channels) on the CPU: the CONVOLUTION lowering's gathered-windows
product (``conv_forms._patches``) against XLA's own convolution (``conv_forms._conv``), one image,
float32, each under ``jax.jit`` (issue 42, the CPU items).

The thread count moves the line between them (the README beside this file has the figures at 2
and 16 cores): ``JAX_PLATFORMS=cpu PYTHONPATH=. python
benchmarks/experiments/first_layers_cpu.py``.
"""

import os

import jax
import jax.numpy as jnp
import numpy as np

from dml_jax.bench.harness import Timer, jax_sync
from dml_jax.ops import conv_forms as GC

CASES = [  # name, input channels, output channels, window, stride, image size
    ("ShuffleNet 3x3/2 3->24", 3, 24, 3, 2, 224),
    ("VGG 3x3 3->64", 3, 64, 3, 1, 224),
    ("ResNet 7x7/2 3->64", 3, 64, 7, 2, 224),
    ("ZFNet 7x7/2 3->96", 3, 96, 7, 2, 224),
    ("SqueezeNet 3x3/2 3->64", 3, 64, 3, 2, 224),
    ("AlexNet 11x11/4 3->64", 3, 64, 11, 4, 224),
]

timer = Timer(samples=5)
rng = np.random.default_rng(0)
print(f"{GC._cpu_cores()} cores ({os.cpu_count()} on the machine), jax {jax.__version__}")
for name, c, k, window, s, size in CASES:
    x = jnp.asarray(rng.standard_normal((1, c, size, size)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((k, c, window, window)), jnp.float32)
    pad = [(window // 2, window // 2)] * 2
    product = jax.jit(lambda x, w: GC._patches(x, w, (s, s), pad, (1, 1), (1, 1)))
    conv = jax.jit(lambda x, w: GC._conv(x, w, (s, s), pad, (1, 1), (1, 1), 1))
    a = timer.run(lambda: product(x, w), jax_sync)
    b = timer.run(lambda: conv(x, w), jax_sync)
    taken = "product" if GC._few_channels(x, w, 1) else "convolution"
    print(f"{name:24s} product {a * 1e3:6.2f} ms  convolution {b * 1e3:6.2f} ms  "
          f"taken here: {taken}", flush=True)  # fmt: skip
