"""What an int8 convolution that requantizes in its own epilogue would buy (issue 66, item 2:
a static-QDQ ResNet-50 at 1.3x its float16 export). ResNet-50's 1x1 convolutions at batch 64,
channels-last, as the QDQ graph computes them: int8 activations {M = N * H * W, K} by int8
weights {C, K}, the sums times ``sx * sw[c]`` (float32), plus the bias, ReLU, then quantized by
``sy`` (the quotient correctly rounded, half to even, saturated to int8). Three forms, timed in
turn (median of ``--samples`` samples of ``--iters`` calls, one sync a sample):

- ``fused``: one Pallas (Triton) kernel, the int8 product on the int8 tensor cores and the
  whole QDQ chain in its epilogue, int8 written: now the sessions' fast path for such runs
  (``kernels/int8_qdq_conv.py``);
- ``cudnn``: what sessions ran before it, XLA's int8 convolution (cuDNN, float32 output) and the
  chain in XLA's fusion after it (``_quant.round_quotient``);
- ``float16``: the float16 export's convolution (bias and ReLU fused by XLA, float16 written).

``residual`` is ``fused`` with its quotient rounded as before 2026-11-30 (``FMA_QUOTIENT`` off:
the lax lowering's CUDA form, ``_quant._nearest_steps``), which must give the same values.

It prints microseconds a convolution, TOPS, the bytes moved against the copy's bandwidth, and
how many of the fused form's values differ from the cudnn form's (the two are the same chain;
XLA may contract the scaling and the bias into one fused multiply-add, docs/semantics.md, which
moves a value beside a rounding boundary at times).

Usage: ``PYTHONPATH=. python3 benchmarks/experiments/int8_qdq_gemm_gpu.py [--batch 64]
[--windows]`` (``--windows``: ResNet-50's 3x3 shapes at strides 1 and 2 and its 7x7 stem in the
kernel's windowed form, which ``int8_qdq_conv.MAX_WINDOW`` takes once this shows it faster);
``--interpret`` checks the fused kernel against the cudnn form on two small cases, one with a
partial last block of rows (any machine).
"""

from __future__ import annotations

import argparse
import functools
import statistics

import numpy as np

# ResNet-50's 1x1 convolutions: (spatial positions a sample, K = channels in, channels out)
SHAPES = [(56 * 56, 64, 64), (56 * 56, 64, 256), (56 * 56, 256, 64), (28 * 28, 128, 512),
          (28 * 28, 512, 128), (14 * 14, 256, 1024), (14 * 14, 1024, 256), (7 * 7, 512, 2048),
          (7 * 7, 2048, 512)]  # fmt: skip


def fused(x, w, scale, bias, sy, interpret=False):
    """The QDQ chain in one kernel, the sessions' fast path (``kernels/int8_qdq_conv.py``, the
    quotient by fused multiply-adds, ``FMA_QUOTIENT``): int8 x {M, K} by int8 w {C, K} -> int8
    {M, C}, as a 1x1 convolution of M images of one pixel. (Its first form divided by PTX's
    ``div.rn`` and ``cvt.rni`` instead: slower on the output-heavy shapes; README.)"""
    import jax.numpy as jnp

    from dml_jax.enums import DataType
    from dml_jax.kernels.int8_qdq_conv import qdq_convolution

    (m, k), c = x.shape, w.shape[0]
    y = qdq_convolution(
        x.reshape(m, k, 1, 1), w.reshape(c, k, 1, 1), scale, bias, sy, jnp.zeros((1,), jnp.float32),
        (1, 1), DataType.INT8, True, channels_last=True, interpret=interpret,
    )  # fmt: skip
    return y.reshape(m, c)


def residual_form(f):
    """``f`` traced with the kernel's quotient rounded as the lax lowering rounds it on CUDA
    (``_quant._nearest_steps``: ``FMA_QUOTIENT`` off), its form before 2026-11-30."""
    from dml_jax.kernels import int8_qdq_conv as K

    @functools.wraps(f)
    def traced(*args, **kw):
        saved, K.FMA_QUOTIENT = K.FMA_QUOTIENT, False
        try:
            return f(*args, **kw)
        finally:
            K.FMA_QUOTIENT = saved

    return traced


def cudnn(x, w, scale, bias, sy):
    """Today's path: XLA's int8 convolution (1x1, NHWC) with float32 sums, the chain after it."""
    import jax.numpy as jnp
    from jax import lax

    from dml_jax.ops._quant import round_quotient

    m, k = x.shape
    acc = lax.conv_general_dilated(
        x.reshape(1, m, 1, k), w.reshape(1, 1, *w.shape).transpose(0, 1, 3, 2), (1, 1),
        "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"), preferred_element_type=jnp.float32,
    ).reshape(m, -1)  # fmt: skip
    v = jnp.maximum(acc * scale + bias, 0.0)
    return jnp.clip(round_quotient(v, sy[0]), -128, 127).astype(jnp.int8)


def half(x16, w16, bias16):
    import jax.numpy as jnp
    from jax import lax

    m, k = x16.shape
    y = lax.conv_general_dilated(
        x16.reshape(1, m, 1, k), w16.reshape(1, 1, *w16.shape).transpose(0, 1, 3, 2), (1, 1),
        "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"),
    ).reshape(m, -1)  # fmt: skip
    return jnp.maximum(y + bias16, 0)


# ResNet-50's windowed convolutions: (H = W in, channels in, out, window, stride, pad)
WINDOW_SHAPES = [(56, 64, 64, 3, 1, 1), (28, 128, 128, 3, 1, 1), (14, 256, 256, 3, 1, 1),
                 (7, 512, 512, 3, 1, 1), (56, 128, 128, 3, 2, 1), (28, 256, 256, 3, 2, 1),
                 (14, 512, 512, 3, 2, 1), (224, 3, 64, 7, 2, 3)]  # fmt: skip


def fused_window(x, w, scale, bias, sy, stride, pad, interpret=False):
    """The windowed form of the sessions' kernel (``int8_qdq_conv.qdq_convolution``, taken
    where ``MAX_WINDOW`` allows): x {N, H, W, C} int8 by w {K, C, kH, kW}."""
    import jax.numpy as jnp

    from dml_jax.enums import DataType
    from dml_jax.kernels.int8_qdq_conv import qdq_convolution

    return qdq_convolution(
        jnp.transpose(x, (0, 3, 1, 2)), w, scale, bias, sy, jnp.zeros((1,), jnp.float32),
        (stride, stride), DataType.INT8, True, channels_last=True, interpret=interpret,
        padding=((pad, pad), (pad, pad)),
    )  # fmt: skip


def cudnn_window(x, w, scale, bias, sy, stride, pad):
    """Today's path, NHWC: XLA's int8 convolution (cuDNN, float32 sums; the session's own
    ``int8_conv.int8_convolution`` for a few-channel one) and the chain after it."""
    import jax.numpy as jnp
    from jax import lax

    from dml_jax.kernels.int8_conv import FEW_CHANNELS, int8_convolution
    from dml_jax.ops._quant import round_quotient

    if x.shape[3] < FEW_CHANNELS:
        acc = jnp.transpose(
            int8_convolution(jnp.transpose(x, (0, 3, 1, 2)), w, (stride, stride), [(pad, pad)] * 2),
            (0, 2, 3, 1),
        )
    else:
        acc = lax.conv_general_dilated(
            x, jnp.transpose(w, (2, 3, 1, 0)), (stride, stride), ((pad, pad), (pad, pad)),
            dimension_numbers=("NHWC", "HWIO", "NHWC"), preferred_element_type=jnp.float32,
        )  # fmt: skip
    v = jnp.maximum(acc * scale + bias, 0.0)
    return jnp.clip(round_quotient(v, sy[0]), -128, 127).astype(jnp.int8)


def half_window(x16, w16, bias16, stride, pad):
    import jax.numpy as jnp
    from jax import lax

    y = lax.conv_general_dilated(
        x16, jnp.transpose(w16, (2, 3, 1, 0)), (stride, stride), ((pad, pad), (pad, pad)),
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
    )  # fmt: skip
    return jnp.maximum(y + bias16, 0)


def _window_data(rng, n, hw, c, k, window):
    x = rng.integers(-128, 128, (n, hw, hw, c)).astype(np.int8)
    w = rng.integers(-127, 128, (k, c, window, window)).astype(np.int8)
    taps = window * window
    scale = (np.float32(0.02) * rng.uniform(0.002, 0.01, k) / np.sqrt(taps)).astype(np.float32)
    bias = rng.standard_normal(k).astype(np.float32)
    sy = np.array([0.05 * np.sqrt(taps * c)], np.float32)
    return x, w, scale, bias, sy


def _data(rng, m, k, c):
    x = rng.integers(-128, 128, (m, k)).astype(np.int8)
    w = rng.integers(-127, 128, (c, k)).astype(np.int8)
    scale = (np.float32(0.02) * rng.uniform(0.002, 0.01, c)).astype(np.float32)
    bias = rng.standard_normal(c).astype(np.float32)
    sy = np.array([0.05 * np.sqrt(k)], np.float32)
    return x, w, scale, bias, sy


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--samples", type=int, default=7)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--interpret", action="store_true")
    p.add_argument("--windows", action="store_true",
                   help="ResNet-50's 3x3 convolutions (the windowed form) instead")  # fmt: skip
    a = p.parse_args()
    import jax
    import jax.numpy as jnp
    from quantize_steps_gpu import microseconds  # this folder's

    rng = np.random.default_rng(0)
    if a.interpret:
        for m in (256, 200):  # whole blocks of rows, and a partial last one
            args = _data(rng, m, 64, 128)
            got = np.asarray(fused(*map(jnp.asarray, args), interpret=True))
            want = np.asarray(cudnn(*map(jnp.asarray, args)))
            print(f"interpret, {m} rows: differ", int(np.sum(got != want)), "of", got.size)
        for hw, c, k, window, stride, pad in [(7, 64, 64, 3, 1, 1), (8, 64, 32, 3, 2, 1),
                                              (12, 3, 64, 7, 2, 3)]:  # fmt: skip
            args = [jnp.asarray(v) for v in _window_data(rng, 2, hw, c, k, window)]
            got = np.asarray(fused_window(*args, stride, pad, interpret=True))
            want = np.asarray(cudnn_window(*args, stride, pad))
            print(f"interpret, {window}x{window} at {stride} on {c} channels: differ",
                  int(np.sum(got != want)), "of", got.size)  # fmt: skip
        return
    print(jax.devices()[0].device_kind, jax.__version__)
    copy = jax.jit(lambda t: t + 1)
    shapes = WINDOW_SHAPES if a.windows else [(hw, k, c, 1, 1, 0) for hw, k, c in SHAPES]
    for hw, k, c, window, stride, pad in shapes:
        if a.windows:
            out = (hw + 2 * pad - window) // stride + 1
            m, taps = a.batch * out * out, window * window
            args = [jax.device_put(v) for v in _window_data(rng, a.batch, hw, k, c, window)]
            opts = {"stride": stride, "pad": pad}
            forms = {"fused": jax.jit(functools.partial(fused_window, **opts)),
                     "residual": jax.jit(residual_form(functools.partial(fused_window, **opts))),
                     "cudnn": jax.jit(functools.partial(cudnn_window, **opts))}  # fmt: skip
            half_form = jax.jit(functools.partial(half_window, **opts))
        else:
            m, taps = a.batch * hw, 1
            args = [jax.device_put(v) for v in _data(rng, m, k, c)]
            forms = {"fused": jax.jit(fused), "residual": jax.jit(residual_form(fused)),
                     "cudnn": jax.jit(cudnn)}  # fmt: skip
            half_form = jax.jit(half)
        x16 = jax.device_put(np.asarray(args[0]).astype(np.float16))
        w16 = jax.device_put(np.asarray(args[1]).astype(np.float16))
        b16 = jax.device_put(np.asarray(args[3]).astype(np.float16))
        us, outs = {}, {}
        for name, f in [*forms.items(), ("float16", half_form), ("copy", copy)]:
            call = {"float16": lambda f=f: f(x16, w16, b16), "copy": lambda f=f: f(x16)}.get(
                name, lambda f=f: f(*args)
            )
            outs[name] = call()
            jax.block_until_ready(outs[name])
            us[name] = statistics.median(microseconds(call, a.samples, a.iters))
        differ = int(np.sum(np.asarray(outs["fused"]) != np.asarray(outs["cudnn"])))
        apart = int(np.sum(np.asarray(outs["fused"]) != np.asarray(outs["residual"])))
        ops = 2 * m * k * c * taps / 1e12
        label = f"{window}x{window}/{stride} " if a.windows else ""
        tops = ops / us["fused"] * 1e6
        print(f"{label}{m} x {k} -> {c}: fused {us['fused']:.1f} us ({tops:.0f} TOPS), "
              f"residual quotient {us['residual']:.1f} ({apart} differ), "
              f"cudnn {us['cudnn']:.1f}, float16 {us['float16']:.1f}, "
              f"copy of x16 {us['copy']:.1f}; fused/cudnn {us['cudnn'] / us['fused']:.2f}x, "
              f"fused/float16 {us['float16'] / us['fused']:.2f}x; {differ} of {m * c} "
              "differ")  # fmt: skip


if __name__ == "__main__":
    main()
