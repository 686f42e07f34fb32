"""Elementwise work on int8 values as table lookups (issue 66, item 2): a static QDQ ResNet-50's
residual additions are fusions of ``Q(relu(DQ(Q(DQ(a) + DQ(b)))))`` (two exact quantizers an
element, some 70 instructions), instruction-bound on an H200 (51M elements in about 110 us
where the bytes take about 30). A function of one int8 value has 256 results and one of two
has 65,536: computed once a call (or folded where the scales are known) into a table, the
fusion reads the table instead. Per form: microseconds a call (median of ``--samples``
samples of ``--iters`` calls, one sync a sample), the elements that differ from the direct
form, and the copy of the same bytes (two int8 tensors in, one out) as the bound.

Usage: ``PYTHONPATH=. python3 benchmarks/experiments/int8_tables_gpu.py [--shape N H W C]``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from quantize_steps_gpu import microseconds  # this folder's


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--shape", nargs=4, type=int, default=[64, 56, 56, 256])
    p.add_argument("--samples", type=int, default=7)
    p.add_argument("--iters", type=int, default=20)
    a = p.parse_args()
    import jax
    import jax.numpy as jnp

    from dml_jax.enums import DataType
    from dml_jax.ops import _quant

    i8 = DataType.INT8
    sa, sb, s1, s2 = (
        np.float32(v) for v in (0.0231312308, 0.0200870465, 0.0258117449, 0.0258117449)
    )

    def dq(q, s):
        return _quant.dequantize(q, i8, None, None, s)

    def q(x, s):
        return _quant.quantize(x, s, None, None, i8)

    def tail(t):  # Q(relu(DQ(t))), one scale before and after (as in ResNet-50 QDQ)
        return q(jnp.maximum(dq(t, s1), 0), s2)

    def direct(x, y):
        return tail(q(dq(x, sa) + dq(y, sb), s1))

    grid = jnp.arange(-128, 128, dtype=jnp.int32).astype(jnp.int8)

    def lut2(x, y):
        table = direct(grid[:, None], grid[None, :]).reshape(-1)
        i = (x.astype(jnp.int32) + 128) * 256 + (y.astype(jnp.int32) + 128)
        return jnp.take(table, i, mode="clip")

    def lut1(x, y):
        table = tail(grid)
        t = q(dq(x, sa) + dq(y, sb), s1)
        return jnp.take(table, t.astype(jnp.int32) + 128, mode="clip")

    def roundtrip(x, y):  # the tail as its exact simplification: same scale, no zero point
        return jnp.maximum(q(dq(x, sa) + dq(y, sb), s1), jnp.int8(0))

    def guarded(x, y, scale=s1):  # as QuantizeRoundTrips writes it: a select on the scale
        ok = jnp.clip(scale, np.float32(2.0**-100), np.float32(2.0**100)) == scale
        t = q(dq(x, sa) + dq(y, sb), s1)
        return jnp.where(ok, jnp.maximum(t, jnp.int8(0)), tail(t))

    def unary_direct(x, y):
        return tail(x)

    def unary_lut(x, y):
        return jnp.take(tail(grid), x.astype(jnp.int32) + 128, mode="clip")

    def copy(x, y):
        return x + y

    def flat_copy(x, y):  # the same sum over the tensors as one row
        return (x.reshape(-1) + y.reshape(-1)).reshape(x.shape)

    def f32_copy(x, y):  # float32 of the same bytes: XLA's element-wise bandwidth
        xf = jax.lax.bitcast_convert_type(x.reshape(-1, 4), jnp.float32)
        yf = jax.lax.bitcast_convert_type(y.reshape(-1, 4), jnp.float32)
        return jax.lax.bitcast_convert_type(xf + yf, jnp.int8).reshape(x.shape)

    def pallas_copy(x, y):  # a Pallas (Triton) kernel adding the int8 tensors in blocks
        from jax.experimental import pallas as pl

        rows = x.size // 1024
        block = 32

        def kernel(a, b, o):
            o[...] = a[...] + b[...]

        out = pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((rows, 1024), jnp.int8),
            grid=(rows // block,),
            in_specs=[pl.BlockSpec((block, 1024), lambda i: (i, 0))] * 2,
            out_specs=pl.BlockSpec((block, 1024), lambda i: (i, 0)),
        )(x.reshape(rows, 1024), y.reshape(rows, 1024))
        return out.reshape(x.shape)

    def packed(f):
        """``f`` on four int8 values an int32 word: words loaded and stored, bytes unpacked
        by shifts (sign-extended), the four results packed back."""

        def g(x, y):
            def words(v):
                return jax.lax.bitcast_convert_type(v.reshape(-1, 4), jnp.int32)

            wx, wy = words(x), words(y)
            out = jnp.zeros_like(wx)
            for k in range(4):
                bx = jax.lax.shift_right_arithmetic(wx << (24 - 8 * k), 24).astype(jnp.int8)
                by = jax.lax.shift_right_arithmetic(wy << (24 - 8 * k), 24).astype(jnp.int8)
                r = f(bx, by).astype(jnp.int32) & 0xFF
                out = out | (r << (8 * k))
            return jax.lax.bitcast_convert_type(out, jnp.int8).reshape(x.shape)

        return g

    rng = np.random.default_rng(0)
    shape = tuple(a.shape)
    x = jnp.asarray(np.clip(np.round(rng.standard_normal(shape) * 30), -128, 127).astype(np.int8))
    y = jnp.asarray(np.clip(np.round(rng.standard_normal(shape) * 30), -128, 127).astype(np.int8))
    print(jax.devices()[0].device_kind, jax.__version__, shape)
    ref = {}
    for name, f in [("direct", direct), ("lut2", lut2), ("lut1", lut1), ("copy", copy),
                    ("roundtrip", roundtrip), ("guarded", guarded),
                    ("unary_direct", unary_direct), ("unary_lut", unary_lut),
                    ("copy_flat", flat_copy), ("copy_f32", f32_copy),
                    ("copy_pallas", pallas_copy), ("packed_direct", packed(direct)), ("packed_copy", packed(copy)),
                    ("packed_lut1", packed(lut1)), ("unary_packed", packed(unary_direct))]:  # fmt: skip
        g = jax.jit(f)
        t = time.perf_counter()
        out = jax.block_until_ready(g(x, y))
        compile_s = time.perf_counter() - t
        times = microseconds(lambda g=g: g(x, y), a.samples, a.iters)
        base = ref.setdefault(name.split("_")[0] if name.startswith("unary") else "binary", out)
        differ = "-" if "copy" in name else int(np.sum(np.asarray(out) != np.asarray(base)))
        print(f"{name}: {statistics.median(times):.1f} us ({min(times):.1f}-{max(times):.1f}), "
              f"compile {compile_s:.2f} s, differ {differ}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
