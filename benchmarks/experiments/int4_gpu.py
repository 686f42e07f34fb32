"""Block-quantized 4-bit weights (MatMulNBits) in a decode step's products, in the forms a
lowering can write: GB/s of float16-equivalent weights for x [M, K] times 16 weights of {K, N}
in one program, and the time against the float16 product.

- ``f16``: ``x @ W`` with float16 W (the float16 export's product);
- ``u8``: one uint8 per 4-bit value {N, K}, ``(q - zero) * scale`` per block of 32, then the
  product (the DEQUANTIZE + GEMM lowering at 2c... before this experiment);
- ``u4``: the same with q as ``uint4`` (XLA packs two to a byte);
- ``packed``: the bytes as stored, {N, K / 2}, unpacked with shifts inside the program.

Each with XLA's Triton GEMMs on and off (``/triton``, ``/cublas``), for M = 1, 2, 8.

Usage: ``PYTHONPATH=. python3 benchmarks/experiments/int4_gpu.py``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from gemv_forms_gpu import timed  # this folder's: run as a script from the repository root

COUNT = 16
BLOCK = 32


def deq(q, scale, zero):
    n, k = q.shape
    v = q.astype(jnp.float16).reshape(n, k // BLOCK, BLOCK)
    z = zero.astype(jnp.float16)[..., None]
    return ((v - z) * scale[..., None]).reshape(n, k)


def prod(x, w_nk):
    return jax.lax.dot_general(
        x, w_nk, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32
    ).astype(x.dtype)


def main() -> None:
    print(jax.devices()[0].device_kind, jax.__version__, flush=True)
    for k, n in ((2048, 2048), (2048, 8192), (8192, 2048)):
        rng = np.random.default_rng(0)
        qs = [rng.integers(0, 16, (n, k), dtype=np.uint8) for _ in range(COUNT)]
        scales = [jnp.asarray(rng.uniform(0.01, 0.02, (n, k // BLOCK)), jnp.float16)
                  for _ in range(COUNT)]  # fmt: skip
        zeros = [jnp.asarray(rng.integers(0, 16, (n, k // BLOCK), dtype=np.uint8))
                 for _ in range(COUNT)]  # fmt: skip
        w16 = [jnp.asarray(rng.standard_normal((k, n), np.float32) * 0.02, jnp.float16)
               for _ in range(COUNT)]  # fmt: skip
        u8 = [jnp.asarray(q) for q in qs]
        u4 = [jnp.asarray(q).astype(jnp.uint4) for q in qs]
        packed = [jnp.asarray((q[:, 0::2] | (q[:, 1::2] << 4)).astype(np.uint8)) for q in qs]
        nbytes = COUNT * k * n * 2

        def f16(x, ws):
            return [jnp.dot(x, w, preferred_element_type=jnp.float32).astype(x.dtype) for w in ws]

        def qform(x, q, s, z):
            return [prod(x, deq(a, b, c)) for a, b, c in zip(q, s, z)]

        def pform(x, p, s, z):
            out = []
            for a, b, c in zip(p, s, z):
                lo, hi = a & 15, a >> 4
                q = jnp.stack([lo, hi], -1).reshape(a.shape[0], -1)
                out.append(prod(x, deq(q, b, c)))
            return out

        for m in (1, 2, 8):
            x = jnp.asarray(rng.standard_normal((m, k), np.float32), jnp.float16)
            ref = None
            for triton in (True, False):
                opts = {"xla_gpu_enable_triton_gemm": triton}
                tag = "triton" if triton else "cublas"
                base = timed(jax.jit(f16, compiler_options=opts), x, w16)
                print(f"K{k} N{n} M{m} f16/{tag}: {base * 1e6:8.1f} us "
                      f"{nbytes / base / 1e9:7.0f} GB/s", flush=True)  # fmt: skip
                for name, fn, args in (
                    ("u8", qform, (u8, scales, zeros)),
                    ("u4", qform, (u4, scales, zeros)),
                    ("packed", pform, (packed, scales, zeros)),
                ):
                    try:
                        j = jax.jit(fn, compiler_options=opts)
                        got = np.asarray(j(x, *args)[0], np.float32)
                        if ref is None:
                            ref = got
                        err = float(np.abs(got - ref).max() / (np.abs(ref).max() + 1e-6))
                        t = timed(j, x, *args)
                        print(f"K{k} N{n} M{m} {name}/{tag}: {t * 1e6:8.1f} us "
                              f"{nbytes / t / 1e9:7.0f} GB/s-f16eq  x{base / t:5.2f} vs f16 "
                              f"err {err:.1e}", flush=True)  # fmt: skip
                    except Exception as e:  # a form XLA cannot compile
                        print(f"K{k} N{n} M{m} {name}/{tag}: {type(e).__name__} {e}"[:300])


if __name__ == "__main__":
    main()
