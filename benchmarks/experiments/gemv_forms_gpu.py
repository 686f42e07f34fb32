"""One-row products (a decode step's GEMVs) on a GPU, in the forms the GEMM lowering can write:
GB/s of weights read for x [1, K] times 16 different float16 weights of [K, N] in one program.

- ``dot``: ``x @ W`` with W {K, N} as stored (the form for products of several rows);
- ``swapped``: W swapped to {N, K} and contracted on its minor axis (the lowering's one-row form,
  chosen for XLA's CPU backend, where a constant B is laid out for it at compile time);
- ``dml4d``: the same one-row form with DML's 4-D batch dimensions of size 1;
- ``swiglu``: silu(x @ Wg) * (x @ Wu) in the ``dot`` and ``swapped`` forms;
- ``two_rows``: x with a row of zeros under it, the product's first row (``_barrier``: the
  product behind an optimization barrier); ``rope_*``: a consumer slicing the product's halves
  (as rotary embeddings do);
- PyTorch's ``x @ W`` on the same card.

Each jax form also with the sessions' GPU compiler options (``/session``: no Triton GEMMs).

Usage: ``PYTHONPATH=. python3 benchmarks/experiments/gemv_forms_gpu.py``.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

COUNT = 16


def timed(fn, *args, reps=50):
    jax.block_until_ready(fn(*args))
    t = time.perf_counter()
    for _ in range(reps):
        out = fn(*args)
    jax.block_until_ready(out)
    return (time.perf_counter() - t) / reps


def main() -> None:
    for k, n in ((2048, 2048), (2048, 8192), (8192, 2048)):
        rng = np.random.default_rng(0)
        ws = [jnp.asarray(rng.standard_normal((k, n), np.float32) * 0.02, jnp.float16)
              for _ in range(COUNT)]  # fmt: skip
        x = jnp.asarray(rng.standard_normal((1, k), np.float32), jnp.float16)
        nbytes = COUNT * k * n * 2

        def dot(x, ws):
            return [jnp.dot(x, w, preferred_element_type=jnp.float32).astype(x.dtype) for w in ws]

        def swapped(x, ws):
            return [lax.dot_general(x, jnp.swapaxes(w, -1, -2), (((1,), (1,)), ((), ())),
                                    preferred_element_type=jnp.float32).astype(x.dtype)
                    for w in ws]  # fmt: skip

        def dml4d(x, ws):
            a = x.reshape(1, 1, 1, k)
            return [lax.dot_general(a, jnp.swapaxes(w.reshape(1, 1, k, n), -1, -2),
                                    (((3,), (3,)), ((0, 1), (0, 1))),
                                    preferred_element_type=jnp.float32).astype(x.dtype)
                    for w in ws]  # fmt: skip

        def two_rows(x, ws):
            x2 = jnp.concatenate([x, jnp.zeros_like(x)], 0)
            return [jnp.dot(x2, w, preferred_element_type=jnp.float32).astype(x.dtype)[:1]
                    for w in ws]  # fmt: skip

        def two_rows_barrier(x, ws):
            x2 = jnp.concatenate([x, jnp.zeros_like(x)], 0)
            return [lax.optimization_barrier(jnp.dot(x2, w, preferred_element_type=jnp.float32))
                    .astype(x.dtype)[:1] for w in ws]  # fmt: skip

        def rope(form):  # a consumer that slices the product (rotary embeddings' halves)
            def f(x, ws):
                out = []
                for y in form(x, ws):
                    h = y.shape[-1] // 2
                    out.append(y * 0.5 + jnp.concatenate([-y[:, h:], y[:, :h]], -1) * 0.25)
                return out

            return f

        def swiglu(form):
            def f(x, ws):
                ys = form(x, ws)
                return [jax.nn.silu(a) * b for a, b in zip(ys[::2], ys[1::2])]

            return f

        row = {}
        for name, f in (("dot", dot), ("swapped", swapped), ("dml4d", dml4d),
                        ("swiglu_dot", swiglu(dot)), ("swiglu_swapped", swiglu(swapped)),
                        ("two_rows", two_rows), ("two_rows_barrier", two_rows_barrier),
                        ("rope_dot", rope(dot)), ("rope_two_rows", rope(two_rows)),
                        ("swiglu_two_rows", swiglu(two_rows))):  # fmt: skip
            row[name] = nbytes / timed(jax.jit(f), x, ws) / 1e9
            # with the sessions' GPU options (no Triton GEMMs)
            opts = {"xla_gpu_enable_triton_gemm": False}
            row[name + "/session"] = nbytes / timed(jax.jit(f, compiler_options=opts), x, ws) / 1e9
        import torch

        tw = [torch.from_numpy(np.asarray(w.astype(jnp.float32))).half().cuda() for w in ws]
        tx = torch.from_numpy(np.asarray(x.astype(jnp.float32))).half().cuda()
        torch.cuda.synchronize()
        for _ in range(3):
            [tx @ w for w in tw]
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(50):
            [tx @ w for w in tw]
        torch.cuda.synchronize()
        row["torch"] = nbytes / ((time.perf_counter() - t) / 50) / 1e9
        print(f"K={k} N={n}: " + ", ".join(f"{a} {b:.0f} GB/s" for a, b in row.items()), flush=True)


if __name__ == "__main__":
    main()
