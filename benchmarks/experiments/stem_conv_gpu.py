"""ResNet-50's first convolution in the QDQ model (issue 66, item 2): 7 x 7, stride 2, three
input channels, 64 out, at batch 64, on int8 values whose sums (up to 147 x 128 x 128, under
2^24) are exact in float32. The session takes it on float16 operands with float32 sums
(``int8_conv.FEW_CHANNELS``), which XLA ran as a TF32 implicit GEMM at 368-371 us on an H200
(7% of the int8 network's call). Forms timed, each checked to be the exact sums:

- ``session``: ``int8_conv.int8_convolution`` as the graph runs it (NCHW in, NCHW out);
- ``nhwc-c4`` / ``nhwc-c8``: float16 operands channels-last, channels padded with zeros to 4 /
  8, float32 sums, the result channels-last (as ChannelsLast's readers take it);
- ``int8-c4``: XLA's int8 convolution with float32 sums, channels padded to 4 (cuDNN's int8
  form, whose engines were slow and unsteady for this shape);
- ``float16``: the float16 export's convolution (float16 out; not exact: for its time alone).

Usage: ``PYTHONPATH=. python3 benchmarks/experiments/stem_conv_gpu.py [--batch 64]``.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--samples", type=int, default=7)
    p.add_argument("--iters", type=int, default=20)
    a = p.parse_args()
    import jax
    import jax.numpy as jnp
    from jax import lax
    from quantize_steps_gpu import microseconds  # this folder's

    from dml_jax.kernels import int8_conv

    print(jax.devices()[0].device_kind, jax.__version__)
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (a.batch, 3, 224, 224)).astype(np.int8)
    w = rng.integers(-128, 128, (64, 3, 7, 7)).astype(np.int8)
    pads = [(3, 3), (3, 3)]

    def session(x, w):
        return int8_conv.int8_convolution(x, w, (2, 2), pads)

    def nhwc(c):
        def form(x, w):
            xs = jnp.pad(jnp.transpose(x, (0, 2, 3, 1)), ((0, 0), (0, 0), (0, 0), (0, c - 3)))
            ws = jnp.pad(jnp.transpose(w, (2, 3, 1, 0)), ((0, 0), (0, 0), (0, c - 3), (0, 0)))
            return lax.conv_general_dilated(
                xs.astype(jnp.float16), ws.astype(jnp.float16), (2, 2), pads,
                dimension_numbers=("NHWC", "HWIO", "NHWC"), preferred_element_type=jnp.float32,
            )  # fmt: skip

        return form

    def int8_c4(x, w):
        xs = jnp.pad(jnp.transpose(x, (0, 2, 3, 1)), ((0, 0), (0, 0), (0, 0), (0, 1)))
        ws = jnp.pad(jnp.transpose(w, (2, 3, 1, 0)), ((0, 0), (0, 0), (0, 1), (0, 0)))
        return lax.conv_general_dilated(
            xs, ws, (2, 2), pads, dimension_numbers=("NHWC", "HWIO", "NHWC"),
            preferred_element_type=jnp.float32,
        )  # fmt: skip

    def half(x, w):
        return lax.conv_general_dilated(
            x.astype(jnp.float16), w.astype(jnp.float16), (2, 2), pads,
            dimension_numbers=("NCHW", "OIHW", "NCHW"),
        )  # fmt: skip

    xd, wd = jax.device_put(x), jax.device_put(w)
    want = None
    forms = {"session": session, "nhwc-c4": nhwc(4), "nhwc-c8": nhwc(8), "int8-c4": int8_c4,
             "float16": half}  # fmt: skip
    for name, form in forms.items():
        f = jax.jit(form)
        try:
            out = np.asarray(f(xd, wd))
        except Exception as e:  # a form this backend does not compile
            print(f"{name}: {type(e).__name__}: {str(e)[:200]}")
            continue
        if name == "session":
            want = out
        elif name != "float16":
            out = np.transpose(out, (0, 3, 1, 2))
        exact = "exact" if want is not None and np.array_equal(out, want) else "differs"
        us = statistics.median(microseconds(lambda f=f: f(xd, wd), a.samples, a.iters))
        print(f"{name}: {us:.1f} us ({exact} against the session's form)")


if __name__ == "__main__":
    main()
