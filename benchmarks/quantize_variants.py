"""GPU sweep and check of the per-axis quantization kernel (dml_jax.kernels.quantize).

The bench's per-channel cases (ELEMENT_WISE_QUANTIZE_LINEAR in buffer mode and QUANTIZE, float32
{16, 256, 256, 256} to UINT8, one scale and zero point per channel): for each (tile elements,
warps) the operator through its fast path against the same operator with the GPU paths off
(bit for bit), then its ratio to the device copy (input read + output written), one sync per
many dispatches; and, once per case, how many elements of the kernel's and of the lax
lowering's results differ from NumPy's (float32 division, correctly rounded; half to even).
Run from the repository root:

    XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=. python benchmarks/quantize_variants.py [--out F]
"""

from __future__ import annotations

import argparse
import sys

import jax
import jax.numpy as jnp
import numpy as np
from timing import record, timeit, torch_copy_seconds

import dml_jax as dml
from dml_jax import compile as compiled
from dml_jax.kernels import quantize as K

SHAPE = (16, 256, 256, 256)
VARIANTS = [(4096, 4), (2048, 4), (8192, 8), (4096, 8), (16384, 8), (1024, 4)]


def _cases():
    x = dml.TensorDesc("FLOAT32", SHAPE)
    q = x.like(data_type="UINT8")
    strides = (0, 1, 0, 0)
    linear = dml.ElementWiseQuantizeLinearOperatorDesc(
        x, x.like(strides=strides), q.like(strides=strides), q
    )
    sizes = (1, SHAPE[1], 1, 1)
    blocked = dml.QuantizeOperatorDesc(
        x, "SCALE_ZERO_POINT", [x.like(sizes=sizes), q.like(sizes=sizes)], q
    )
    return [("QUANTIZE_LINEAR per channel", linear, True), ("QUANTIZE per channel", blocked, False)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal(SHAPE, np.float32) * 4)
    scale = jnp.asarray(rng.uniform(0.01, 0.1, SHAPE[1]).astype(np.float32))
    zero = jnp.asarray(rng.integers(0, 256, SHAPE[1]).astype(np.uint8))
    nbytes = x.size * 5
    t_copy = min(timeit(jax.jit(lambda y: -y), x), torch_copy_seconds(SHAPE, "float32"))
    copy_gbps = 2 * x.size * 4 / t_copy / 1e9
    rows = []
    for name, desc, strided in _cases():
        view = (1, SHAPE[1], 1, 1)
        if strided:
            params = (jnp.broadcast_to(scale.reshape(view), SHAPE),
                      jnp.broadcast_to(zero.reshape(view), SHAPE))  # fmt: skip
        else:
            params = (scale.reshape(view), zero.reshape(view))
        lax_fn = jax.jit(dml.compile_operator(desc, fast_paths=False).fn)
        want = lax_fn(x, *params)
        t_lax = timeit(lax_fn, x, *params)
        s, z = np.asarray(scale).reshape(view), np.asarray(zero).reshape(view).astype(np.float32)
        ref = np.clip(np.round(np.asarray(x) / s) + z, 0, 255).astype(np.uint8)
        kernel_out = np.asarray(dml.compile_operator(desc).fn(x, *params))
        check = dict(case=name, elements=int(ref.size),
                     kernel_differs_from_numpy=int(np.sum(kernel_out != ref)),
                     lax_differs_from_numpy=int(np.sum(np.asarray(want) != ref)))  # fmt: skip
        record(rows, check, args.out)
        for tile, warps in VARIANTS:
            K.TILE_ELEMENTS, K.WARPS = tile, warps
            compiled._compile_cached.cache_clear()
            fn = jax.jit(dml.compile_operator(desc).fn)
            got = fn(x, *params)
            same = bool(jnp.array_equal(got, want))
            t = timeit(fn, x, *params)
            row = dict(case=name, tile=tile, warps=warps, bit_equal=same,
                       kernel_ratio=nbytes / t / 1e9 / copy_gbps,
                       lax_ratio=nbytes / t_lax / 1e9 / copy_gbps, copy_gbps=copy_gbps)  # fmt: skip
            record(rows, row, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
