"""Probe: an int8 x int8 -> int32 GEMM as a Pallas (Triton) kernel against XLA's int8 and float16
dots, on one GPU, at M = N = K = 4096 and 8192.

Each variant (block M, N, K, warps, pipeline stages, B laid out {K, N} or {N, K}) is checked
equal to XLA's int8 dot (exact int32) on random int8 operands, then timed (TOPS, one sync per
many dispatches). A variant that fails to compile is reported, not fatal. Run from the
repository root:

    XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=. python benchmarks/int8_gemm_probe.py [--out F]
"""

from __future__ import annotations

import argparse
import json
import sys

import jax
import jax.numpy as jnp
from jax import lax
from timing import record, timeit

from dml_jax.kernels.pallas_helpers import load_pallas

# (block M, block N, block K, warps, stages)
VARIANTS = [
    (128, 128, 64, 8, 4),
    (128, 128, 128, 8, 3),
    (128, 128, 64, 4, 4),
    (128, 256, 64, 8, 3),
    (256, 128, 64, 8, 3),
    (128, 256, 64, 16, 3),
    (256, 256, 64, 16, 3),
    (64, 256, 64, 4, 4),
]


def gemm(x, y, bm, bn, bk, warps, stages, transposed: bool):
    """``x`` {M, K} int8 times ``y`` ({K, N}, or {N, K} where ``transposed``) in int32."""
    pl, pltriton = load_pallas()
    m, k = x.shape
    n = y.shape[0] if transposed else y.shape[1]

    def kernel(x_ref, y_ref, o_ref):
        def body(i, acc):
            a = x_ref[:, pl.ds(i * bk, bk)]
            if transposed:
                b = y_ref[:, pl.ds(i * bk, bk)].T
            else:
                b = y_ref[pl.ds(i * bk, bk), :]
            return acc + jnp.dot(a, b, preferred_element_type=jnp.int32)

        o_ref[...] = lax.fori_loop(0, k // bk, body, jnp.zeros((bm, bn), jnp.int32))

    y_spec = (
        pl.BlockSpec((bn, k), lambda i, j: (j, 0))
        if transposed
        else pl.BlockSpec((k, bn), lambda i, j: (0, j))
    )
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), jnp.int32),
        grid=(m // bm, n // bn),
        in_specs=[pl.BlockSpec((bm, k), lambda i, j: (i, 0)), y_spec],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)),
        compiler_params=pltriton.CompilerParams(num_warps=warps, num_stages=stages),
    )(x, y)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out")
    parser.add_argument("--sizes", default="4096,8192")
    args = parser.parse_args(argv)
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        kx, ky = jax.random.split(jax.random.PRNGKey(0))
        x = jax.random.randint(kx, (size, size), -128, 128, jnp.int32).astype(jnp.int8)
        y = jax.random.randint(ky, (size, size), -128, 128, jnp.int32).astype(jnp.int8)
        yt = jnp.asarray(y.T)
        ops = 2 * size**3
        xla8 = jax.jit(lambda a, b: jnp.dot(a, b, preferred_element_type=jnp.int32))
        want = xla8(x, y)
        xh, yh = x.astype(jnp.float16), y.astype(jnp.float16)
        xla16 = jax.jit(lambda a, b: jnp.dot(a, b))
        base = dict(size=size, xla_int8=ops / timeit(xla8, x, y) / 1e12,
                    xla_float16=ops / timeit(xla16, xh, yh) / 1e12)  # fmt: skip
        print(json.dumps(base), flush=True)
        for bm, bn, bk, warps, stages in VARIANTS:
            for transposed in (False, True):
                row = dict(base, bm=bm, bn=bn, bk=bk, warps=warps, stages=stages,
                           transposed=transposed)  # fmt: skip
                fn = jax.jit(lambda a, b, c=(bm, bn, bk, warps, stages, transposed): gemm(a, b, *c))
                operand = yt if transposed else y
                try:
                    got = fn(x, operand)
                    row["exact"] = bool(jnp.all(got == want))
                    row["tops"] = ops / timeit(fn, x, operand) / 1e12
                except Exception as e:  # a variant that fails is reported
                    row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
                record(rows, row, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
