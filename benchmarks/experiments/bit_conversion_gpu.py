"""Integer-valued float32 values to int8 by bits rather than a conversion instruction (issue 66,
item 2): the forms, checked for the right values on this backend (eager, jitted alone, and
jitted after the quantizer's clamp, as ``_quant.quantize`` would use them).

On an H200 (jax 0.11.2, 2026-11-29) the low byte of ``value + 1.5 * 2^23`` (bitcast to uint32,
``& 0xFF``, converted to uint8, bitcast to int8) gave 0xFF for every element of a small jitted
call, although its optimized HLO read right (add, bitcast, and 255, convert to u8) and the
same steps were right eagerly and inside the quantizer; 28 native quantization tests failed
with it. The forms here tell which steps a backend gets wrong:

- ``low byte``: that form;
- ``shifted``: the uint32 bits shifted left by 24 then right by 24 as int32 (no narrowing of
  a large value);
- ``difference``: the bits as int32 less those of 1.5 * 2^23 (the value itself as int32),
  then a narrowing conversion of an in-range int32;
- ``conversion``: ``astype(int8)`` (a float-to-integer conversion: what the sessions run).

Usage: ``PYTHONPATH=. python3 benchmarks/experiments/bit_conversion_gpu.py``; prints, per form
and context, whether every value came out right, and the first wrong ones.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

MAGIC = np.float32(1.5 * 2**23)


def low_byte(v):
    bits = lax.bitcast_convert_type(v + MAGIC, jnp.uint32)
    return lax.bitcast_convert_type((bits & jnp.uint32(0xFF)).astype(jnp.uint8), jnp.int8)


def shifted(v):
    bits = lax.bitcast_convert_type(v + MAGIC, jnp.int32)
    return ((bits << 24) >> 24).astype(jnp.int8)


def difference(v):
    bits = lax.bitcast_convert_type(v + MAGIC, jnp.int32)
    return (bits - lax.bitcast_convert_type(MAGIC, jnp.int32)).astype(jnp.int8)


def conversion(v):
    return v.astype(jnp.int8)


FORMS = {"low byte": low_byte, "shifted": shifted, "difference": difference,
         "conversion": conversion}  # fmt: skip


def main() -> None:
    print(jax.devices()[0].device_kind, jax.__version__)
    values = np.arange(-128, 128, dtype=np.float32)
    want = values.astype(np.int8)
    raw = np.float32([np.nan, 300.0, -300.0, 3.0, 0.0, -0.0, 127.0, -128.0])

    def clamped(form):  # the quantizer's last steps: add the zero point, clamp, NaN to it
        def f(x):
            v = jnp.clip(jnp.round(x) + 5, -128, 127)
            return form(jnp.where(jnp.isnan(v), jnp.float32(5), v))

        return f

    raw_want = np.int8([5, 127, -128, 8, 5, 5, 127, -123])
    for name, form in FORMS.items():
        cases = {
            "eager": (form(jnp.asarray(values)), want),
            "jit alone": (jax.jit(form)(values), want),
            "jit alone, 5 values": (jax.jit(form)(values[:5]), want[:5]),
            "jit after the clamp": (jax.jit(clamped(form))(raw), raw_want),
        }
        for context, (got, expected) in cases.items():
            got = np.asarray(got)
            wrong = np.flatnonzero(got != expected)
            print(f"{name:10s} {context:20s}: {'right' if wrong.size == 0 else 'WRONG'}"
                  + (f" (first: {got[wrong[:4]]} for {expected[wrong[:4]]})" if wrong.size else ""))  # fmt: skip


if __name__ == "__main__":
    main()
