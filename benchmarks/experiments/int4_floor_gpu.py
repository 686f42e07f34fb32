"""Whether the 4-bit weight kernel (``dml_jax/kernels/int4_gemm.py``) at one row waits on its
instructions or on its loads: the kernel at the 1B-class decoder's shapes with parts of its
per-weight work taken out (wrong values, kept for their time only), against the read of the
codes alone.

- ``default``: the kernel as sessions run it (``int4_product`` of the codes' bytes);
- ``no-dequant``: without ``(codes - offset) * scale`` (the codes' float16 values go to the dots
  as they are: a subtraction and a product a weight fewer);
- ``no-split``: the bytes' nibbles not split by PTX: each byte's bits with 0x6400 as its low
  and high values (``bitcast(u16(raw) | 0x6400)``, the conversion Triton emits for it);
- ``neither``: both taken out;
- ``read``: the codes' bytes summed as 32-bit words by XLA (a read of the codes, what the
  product cannot beat).

Each line: microseconds a product (programs of up to 16 products, as ``int4_kernel_gpu.py``
times them) and the codes' bytes a second over that time.

Usage (the GPU machine, repository root): ``PYTHONPATH=. python3
benchmarks/experiments/int4_floor_gpu.py [--shapes 2048x16384 ...]``.
"""

from __future__ import annotations

import argparse
import contextlib

import int4_kernel_gpu as base  # this folder's
import jax
import jax.numpy as jnp
from jax import lax

from dml_jax.kernels import int4_gemm as K


def _no_split(raw):
    bits = lax.bitcast_convert_type(raw.astype(jnp.uint16) | jnp.uint16(0x6400), jnp.float16)
    return bits, bits


@contextlib.contextmanager
def variant(name: str):
    """The kernel's module with the named parts taken out while the context lasts."""
    saved = K._dequantized, K.nibbles_plus_1024
    if name in ("no-dequant", "neither"):
        K._dequantized = lambda codes, offset, scale, group: codes
    if name in ("no-split", "neither"):
        K.nibbles_plus_1024 = _no_split
    try:
        yield
    finally:
        K._dequantized, K.nibbles_plus_1024 = saved


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", nargs="*", default=None, help="KxN, e.g. 2048x8192")
    args = p.parse_args()
    shapes = [tuple(map(int, s.split("x"))) for s in args.shapes] if args.shapes else base.SHAPES
    print(jax.devices()[0].device_kind, jax.__version__, flush=True)
    for k, n in shapes:
        count = int(max(1, min(16, base.BUDGET // (k * n * 2))))
        keys = jax.random.split(jax.random.key(k * 7 + n), 3 * count)
        packed = [jax.random.randint(keys[i], (n, k // 2), 0, 256, jnp.uint8) for i in range(count)]
        scales = [jax.random.uniform(keys[count + i], (n, k // base.BLOCK), jnp.float16,
                                     0.005, 0.02) for i in range(count)]  # fmt: skip
        zeros = [jax.random.randint(keys[2 * count + i], (n, k // base.BLOCK), 0, 16, jnp.uint8)
                 .astype(jnp.uint4) for i in range(count)]  # fmt: skip
        x = jax.random.normal(jax.random.key(1), (1, k), jnp.float16)
        code_bytes = count * n * k // 2
        tag = f"K{k} N{n} x{count}"
        for name in ("default", "no-dequant", "no-split", "neither"):
            with variant(name):

                def kernel(x, qs, ss, zs):
                    return [K.int4_product(x, q, s, z) for q, s, z in zip(qs, ss, zs)]

                try:
                    fn = base.on_cuda(kernel)
                    t = base.timed(fn, x, packed, scales, zeros)
                except Exception as e:  # a variant Triton cannot compile: the next one
                    print(f"{tag} {name}: {type(e).__name__}: {e}"[:300], flush=True)
                    continue
            print(f"{tag} {name}: {t / count * 1e6:8.1f} us {code_bytes / t / 1e9:6.0f} GB/s "
                  "of codes", flush=True)  # fmt: skip

        def read(qs):
            return [jnp.sum(lax.bitcast_convert_type(q.reshape(n, k // 8, 4), jnp.uint32))
                    for q in qs]  # fmt: skip

        t = base.timed(base.on_cuda(read), packed)
        print(f"{tag} read: {t / count * 1e6:8.1f} us {code_bytes / t / 1e9:6.0f} GB/s",
              flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
