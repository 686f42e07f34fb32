"""The quantizers' rounded quotient ``round(x / scale)`` on a GPU (issue 66, item 2): the
residual form (``_quant.round_quotient``: an approximate quotient, one exact residual against
the nearest half-integer) against the corrected-quotient form it replaced (``divide``: three
exact residuals and two more divisions an element, then ``round``) and the plain ``round(x /
y)`` of XLA's division (not correctly rounded there: its mismatches are counted). Per form and
shape: the compile, microseconds a call (median of ``--samples`` samples of ``--iters`` calls,
one sync a sample) and the elements that differ from NumPy's float32 ``np.round(x / y)`` (random
values, a fifth of them beside halfway points; quotients under 2048 in magnitude, the residual
form's exact range).

``--model ARGS...``: instead, ``quantized_models_gpu.py ARGS`` with the replaced form in place of
the residual one where ``--replaced`` is given (whole-model compile and call times).

``--chain``: the quantizers as a QDQ network's fusions hold them (``chain``), ``--conversions``
with the rounding's parity by a conversion as well.

Usage: ``PYTHONPATH=. python3 benchmarks/experiments/quantize_steps_gpu.py [--replaced] [--model
--only bert --forms int8 --profile int8] [--chain [--conversions]]``.
"""

from __future__ import annotations

import argparse
import os
import runpy
import statistics
import sys
import time

import numpy as np


def _forms():
    import jax.numpy as jnp

    from dml_jax.ops import _quant

    return {
        "residual": _quant.round_quotient,
        "replaced": lambda x, y: jnp.round(_quant.divide(x, y)),
        "plain": lambda x, y: jnp.round(x / y),
    }


def _data(shape, per_channel: bool, rng):
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    s = np.exp(rng.uniform(-6, 0, shape[-1] if per_channel else 1)).astype(np.float32)
    y = np.broadcast_to(s, shape)
    near = rng.random(shape) < 0.2  # x beside (k + 0.5) * s
    k = np.round(x / y) + np.float32(0.5)
    x = np.where(near, np.nextafter((k * y).astype(np.float32), rng.choice([-np.inf, np.inf])), x)
    return x.astype(np.float32), (s if per_channel else s.reshape(())).astype(np.float32)


def microseconds(call, samples: int, iters: int) -> list[float]:
    """``call()``'s time in microseconds, a value a sample of ``iters`` calls, one sync each
    (int8_qdq_gemm_gpu.py's too)."""
    import jax

    times = []
    for _ in range(samples):
        t = time.perf_counter()
        for _ in range(iters):
            y = call()
        jax.block_until_ready(y)
        times.append((time.perf_counter() - t) / iters * 1e6)
    return times


def micro(args) -> None:
    import jax

    rng = np.random.default_rng(0)
    forms = _forms()
    for shape in ((4096, 3072), (4096, 768)):
        for per_channel in (False, True):
            x, s = _data(shape, per_channel, rng)
            with np.errstate(all="ignore"):
                want = np.round(x / np.broadcast_to(s, shape))
            xd, sd = jax.device_put(x), jax.device_put(s)
            for name, f in forms.items():
                t = time.perf_counter()
                fn = jax.jit(f).lower(xd, sd).compile()
                compile_s = time.perf_counter() - t
                got = np.asarray(fn(xd, sd))
                small = np.abs(want) < 2048  # beyond: saturated by every caller
                wrong = int(np.sum((got != want) & small))
                times = microseconds(lambda fn=fn: fn(xd, sd), args.samples, args.iters)
                gbs = x.nbytes * 2 / (statistics.median(times) * 1e-6) / 1e9
                print(f"{shape} {'per-channel' if per_channel else 'one scale'} {name}: compile "
                      f"{compile_s:.2f} s, {statistics.median(times):.1f} us "
                      f"({min(times):.1f}-{max(times):.1f}; {gbs:.0f} GB/s), {wrong} differ under 2048")  # fmt: skip


SHAPES = ((64, 256, 56, 56), (64, 512, 28, 28), (64, 2048, 7, 7))


def kernel_vs_lax(args) -> None:
    """QUANTIZE_LINEAR's CUDA kernel (``kernels.quantize``) against its lax lowering (now the
    residual form) alone, float32 to int8, one scale and one a channel (axis 1), at ResNet-50's
    activation sizes for a batch of 64; fraction of the copy's bandwidth (bytes read + written)
    and whether the two agree."""
    import jax

    from dml_jax.enums import DataType
    from dml_jax.kernels import quantize as K
    from dml_jax.ops._quant import quantize

    rng = np.random.default_rng(0)
    t = DataType.INT8
    copy = jax.jit(lambda a: a + 1)
    for shape in SHAPES:
        x = jax.device_put((rng.standard_normal(shape) * 3).astype(np.float32))
        for per_channel in (False, True):
            c = shape[1] if per_channel else 1
            s = jax.device_put(np.exp(rng.uniform(-4, -1, c)).astype(np.float32))
            bshape = (1, c, 1, 1)
            if per_channel:
                v = K.plan(shape, 1, np.float32, np.int8)
            else:  # one "channel": the flattened input, as the fast path views it
                v = K.plan((1, x.size), 0, np.float32, np.int8)
            forms = {
                "lax": jax.jit(lambda a, b: quantize(a, b.reshape(bshape), None, t, t)),
                "copy": lambda a, b: copy(a),
            }
            if v is not None:
                flat = (1, x.size) if not per_channel else shape

                def kernel(a, b, v=v, flat=flat):
                    return K.quantize_kernel(a.reshape(flat), b, None, v, t).reshape(a.shape)

                forms["kernel"] = jax.jit(kernel)
            outs, us = {}, {}
            for name, f in forms.items():
                outs[name] = np.asarray(f(x, s))
                times = microseconds(lambda f=f: f(x, s), args.samples, args.iters)
                us[name] = statistics.median(times)
            same = "kernel" not in outs or np.array_equal(outs["kernel"], outs["lax"])
            row = ", ".join(f"{k} {u:.1f} us ({x.size * (8 if k == 'copy' else 5) / u / 1e3:.0f} GB/s)"
                            for k, u in us.items())  # fmt: skip
            print(f"{shape} {'per-channel' if per_channel else 'one scale'}: {row}; "
                  f"equal {same}")  # fmt: skip


def _conversions():
    """``_quant``'s bit-level parity replaced by a conversion to an integer (the form before
    it)."""
    import jax.numpy as jnp

    from dml_jax.ops import _quant

    _quant._is_odd = lambda f: (f.astype(jnp.int32) & 1) == 1


def chain(args) -> None:
    """The quantizers as a QDQ network runs them, in one fusion: a bottleneck's end at
    ResNet-50's 64 x 56 x 56 x 256 (channels last), the convolution's float32 sums scaled and
    biased per channel, quantized, dequantized and added to a dequantized int8 shortcut,
    quantized, dequantized, ReLU, quantized to int8 (``residual``); and a convolution's ReLU
    (quantize, dequantize, ReLU, quantize: ``relu``). Microseconds and the bytes moved (float32
    sums and the int8 shortcut read, int8 written) against the copy's bandwidth; with
    ``--conversions`` the rounding's parity by a conversion instruction instead,
    alternating in one process (caches cleared between)."""
    import jax
    import jax.numpy as jnp

    from dml_jax.enums import DataType
    from dml_jax.ops import _quant

    t = DataType.INT8
    rng = np.random.default_rng(0)
    n, h, w, c = 64, 56, 56, 256
    acc = jax.device_put((rng.standard_normal((n, h, w, c)) * 300).astype(np.float32))
    short = jax.device_put(rng.integers(-128, 128, (n, h, w, c)).astype(np.int8))
    ws = jax.device_put(np.exp(rng.uniform(-9, -7, c)).astype(np.float32))
    bias = jax.device_put((rng.standard_normal(c) * 0.1).astype(np.float32))
    scales = [jax.device_put(np.float32(v)) for v in (0.021, 0.017, 0.023, 0.019)]

    def q(x, s):
        return _quant.quantize(x, s, None, t, t)

    def dq(x, s):
        return _quant.dequantize(x, t, None, t, s)

    def residual(acc, short, ws, bias, s1, s2, s3, s4):
        a = dq(q(acc * ws + bias, s1), s1) + dq(short, s2)
        return q(jnp.maximum(dq(q(a, s3), s3), 0), s4)

    def relu(acc, short, ws, bias, s1, s2, s3, s4):
        return q(jnp.maximum(dq(q(acc * ws + bias, s1), s1), 0), s2)

    saved = _quant._is_odd
    variants = ["bits", "conversions"] if args.conversions else ["bits"]
    results, outs = {}, {}
    for _ in range(3):  # alternate
        for variant in variants:
            _quant._is_odd = saved
            if variant == "conversions":
                _conversions()
            jax.clear_caches()
            for name, f in (("residual", residual), ("relu", relu)):
                fn = jax.jit(f).lower(acc, short, ws, bias, *scales).compile()
                kernels = fn.as_text().count(" fusion(")
                outs[name, variant] = np.asarray(fn(acc, short, ws, bias, *scales))
                times = microseconds(lambda fn=fn: fn(acc, short, ws, bias, *scales),
                                     args.samples, args.iters)  # fmt: skip
                results.setdefault((name, variant), []).extend(times)
                results[name, variant, "kernels"] = kernels
    _quant._is_odd = saved
    copy = jax.jit(lambda a, b: (a + 1, b + 1))
    copy_us = statistics.median(microseconds(lambda: copy(acc, short), args.samples, args.iters))
    moved = acc.size * (4 + 1 + 1)
    for name in ("residual", "relu"):
        for variant in variants:
            us = statistics.median(results[name, variant])
            same = np.array_equal(outs[name, variant], outs[name, variants[0]])
            print(f"{name} {variant}: {us:.1f} us ({moved / us / 1e3:.0f} GB/s; the copy's "
                  f"{acc.size * 10 / copy_us / 1e3:.0f}), {results[name, variant, 'kernels']} "
                  f"fusions, same as {variants[0]}: {same}")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--samples", type=int, default=10)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--replaced", action="store_true")
    p.add_argument("--kernel", action="store_true", help="the CUDA kernel against lax alone")
    p.add_argument("--model", nargs=argparse.REMAINDER, default=None)
    p.add_argument("--chain", action="store_true", help="QDQ chains in one fusion")
    p.add_argument("--conversions", action="store_true", help="--chain: both forms")
    args = p.parse_args()
    if args.chain:
        chain(args)
        return
    if args.kernel:
        kernel_vs_lax(args)
        return
    if args.replaced:
        from dml_jax.ops import _quant

        _quant.round_quotient = _forms()["replaced"]
    if args.model is None:
        micro(args)
        return
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    sys.argv = ["quantized_models_gpu.py", *args.model]
    runpy.run_path(os.path.join(here, "quantized_models_gpu.py"), run_name="__main__")


if __name__ == "__main__":
    main()
