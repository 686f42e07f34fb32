"""How a one-row product reaches XLA's GEMM emitters in a decode step (issue 64, the 1B
roofline): GEMM's lowering computes a product of one row on two rows on CUDA (XLA writes a
one-row product as a multiply and a reduction, slower), the second row of zeros
(``ops/gemm_conv.py``, ``_one_row_as_two``). In the 1B-class decoder each product's A is a
fresh value, so every product has a pad kernel of its own before it: some 90 a token of
1.3 us each on an H100 (``decode_step_gpu.py``).

A chain shaped like the 1B-class LLaMA's layers at batch 1 (16 layers; per layer an
element-wise scale, q/k/v joined 2048 x 3072, o 2048 x 2048, the residual add, gate and up
joined 2048 x 16384, SiLU times up, down 8192 x 2048, the residual add; float16 weights of
their own, float32 sums), its one-row products in three forms:

- ``zeros``: A with a row of zeros under it (the lowering today);
- ``repeat``: A broadcast to two equal rows (a broadcast XLA may fuse into the product's
  operand, where the concatenation is a kernel of its own);
- ``one_row``: the product of one row as written.

Each line: milliseconds a chain (many dispatches, one sync), the GPU kernels a chain and their
summed time from a trace, and the largest difference from ``zeros``'s output.

Usage (the GPU machine, repository root): ``PYTHONPATH=. python3
benchmarks/experiments/two_row_forms_gpu.py``.
"""

from __future__ import annotations

import os
import time

import gpu_trace  # this folder's
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

LAYERS = int(os.environ.get("LAYERS", "16"))
SHAPES = {"qkv": (2048, 3072), "o": (2048, 2048), "gate_up": (2048, 16384), "down": (8192, 2048)}


def product(form: str, a, w):
    """a [1, K] x w [K, N] in float32 sums, one row out, in ``form``."""
    if form == "zeros":
        a2 = jnp.concatenate([a, jnp.zeros_like(a)], 0)
    elif form == "repeat":
        a2 = jnp.broadcast_to(a, (2, a.shape[1]))
    else:
        a2 = a
    y = lax.dot_general(a2, w, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32)
    return y[:1].astype(a.dtype)


def chain(form: str):
    def f(x, weights):
        for w in weights:
            h = x * jnp.float16(0.5)
            qkv = product(form, h, w["qkv"])
            o = product(form, qkv[:, :2048] * jnp.float16(0.25), w["o"])
            x = x + o
            g = product(form, x * jnp.float16(0.5), w["gate_up"])
            a = jax.nn.silu(g[:, :8192]) * g[:, 8192:]
            x = x + product(form, a, w["down"])
        return x

    return f


def main() -> None:
    print(jax.devices()[0].device_kind, jax.__version__, flush=True)
    rng = np.random.default_rng(0)
    weights = [
        {k: jnp.asarray(rng.standard_normal(s, np.float32) * 0.02, jnp.float16)
         for k, s in SHAPES.items()}
        for _ in range(LAYERS)
    ]  # fmt: skip
    x = jnp.asarray(rng.standard_normal((1, 2048), np.float32), jnp.float16)
    options = {"xla_gpu_enable_triton_gemm": True}  # the generator's: XLA's own emitters
    base = None
    for form in ("zeros", "repeat", "one_row"):
        fn = jax.jit(chain(form), compiler_options=options)
        out = np.asarray(fn(x, weights), np.float32)
        base = out if base is None else base
        for _ in range(3):
            fn(x, weights)
        jax.block_until_ready(fn(x, weights))
        t = time.perf_counter()
        for _ in range(50):
            y = fn(x, weights)
        jax.block_until_ready(y)
        ms = (time.perf_counter() - t) / 50 * 1e3
        k = gpu_trace.kernels(gpu_trace.record(lambda fn=fn: fn(x, weights), 5), 5)
        count, us = k.get("kernels", 0), k.get("kernel_us", 0)
        diff = float(np.abs(out - base).max())
        print(f"{form}: {ms:.3f} ms a chain, {count:.0f} kernels summing to {us:.0f} us, "
              f"max diff from zeros {diff:.3g}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
