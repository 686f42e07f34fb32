"""A stage of repeated blocks written out (as an imported ONNX graph lists them) against the
same blocks as one ``lax.scan`` over their stacked weights: first call and hot time (issue 42,
the first-call goal).

The block is ConvNeXt-T's (a depthwise 7x7 convolution, layer norm over the channels, a 4x
wider GELU MLP, the residual addition), in plain JAX, float16 NCHW at ConvNeXt-T's third stage
(384 channels at 14x14, nine blocks) unless the arguments say otherwise. XLA compiles the
scan's body once, and cuDNN builds one convolution plan at the first run instead of one per
block. Each setting is compiled once in the process, the written-out one first.

Usage (CUDA machine): ``PYTHONPATH=. python benchmarks/experiments/rolled_blocks_gpu.py
[--blocks 9] [--channels 384] [--size 14] [--batch 64]``. Figures: the README beside this file.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from dml_jax.bench.harness import Timer, jax_sync


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--blocks", type=int, default=9)
    p.add_argument("--channels", type=int, default=384)
    p.add_argument("--size", type=int, default=14)
    p.add_argument("--batch", type=int, default=64)
    a = p.parse_args()
    c = a.channels
    rng = np.random.default_rng(0)

    def weights():
        def w(shape, scale):
            return jnp.asarray(rng.standard_normal(shape) * scale, jnp.float16)

        return {
            "dw": w((c, 1, 7, 7), 0.1),
            "gamma": jnp.ones((c,), jnp.float16),
            "beta": jnp.zeros((c,), jnp.float16),
            "w1": w((c, 4 * c), 0.02),
            "w2": w((4 * c, c), 0.02),
        }

    def block(x, p):
        y = lax.conv_general_dilated(
            x, p["dw"], (1, 1), ((3, 3), (3, 3)),
            dimension_numbers=("NCHW", "OIHW", "NCHW"), feature_group_count=c,
        )  # fmt: skip
        y = jnp.transpose(y, (0, 2, 3, 1)).astype(jnp.float32)
        mean = y.mean(-1, keepdims=True)
        var = ((y - mean) ** 2).mean(-1, keepdims=True)
        y = ((y - mean) * lax.rsqrt(var + 1e-6) * p["gamma"] + p["beta"]).astype(jnp.float16)
        y = jax.nn.gelu(y @ p["w1"], approximate=False) @ p["w2"]
        return x + jnp.transpose(y, (0, 3, 1, 2))

    def written_out(x, ps):
        for p in ps:
            x = block(x, p)
        return x

    def rolled(x, stacked):
        return lax.scan(lambda x, p: (block(x, p), None), x, stacked)[0]

    ps = [weights() for _ in range(a.blocks)]
    stacked = jax.tree.map(lambda *w: jnp.stack(w), *ps)
    x = jnp.asarray(rng.standard_normal((a.batch, c, a.size, a.size)), jnp.float16)
    print(f"jax {jax.__version__}, {jax.devices()[0].device_kind}, {a.blocks} blocks of {c} "
          f"channels at {a.size}x{a.size}, batch {a.batch}, float16")  # fmt: skip
    outs = {}
    for name, fn, w in (("written out", written_out, ps), ("scan", rolled, stacked)):
        t = time.perf_counter()
        compiled = jax.jit(fn).lower(x, w).compile()
        t_compile = time.perf_counter() - t
        t = time.perf_counter()
        outs[name] = np.asarray(jax.block_until_ready(compiled(x, w)), np.float32)
        t_run = time.perf_counter() - t
        hot = Timer().run(lambda: compiled(x, w), jax_sync)
        print(f"{name}: compile {t_compile:.2f} s, first run {t_run:.2f} s, "
              f"hot {hot * 1e3:.3f} ms", flush=True)  # fmt: skip
    ref = outs["written out"]
    print(f"max |scan - written out| / max |written out|: "
          f"{np.max(np.abs(outs['scan'] - ref)) / np.max(np.abs(ref)):.1e}")  # fmt: skip


if __name__ == "__main__":
    main()
