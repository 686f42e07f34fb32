"""Where 4x bilinear upsampling loses against the copy: store-only and load-and-store probes of
the kernel's memory pattern (dml_jax.kernels.resample), on a CUDA GPU.

The 4x float32 bench case writes a 1 GiB output (16 x 256 x 256 x 256) from a 64 MiB input; a
program of the kernel reads two input row tiles of 4 x 64 at three column shifts and stores four
row phases, each 4 output rows of 256 elements, 4 rows apart (16 KiB a program). The probes:

- ``contiguous``: each program stores 16 KiB as one contiguous tile (FILL's pattern);
- ``phases``: each program stores the kernel's four row phases, values from its program id;
- ``phases+loads``: as ``phases``, each value the sum of the kernel's six input loads;
- ``phases+loads L2``: as ``phases+loads``, every program reading one of 4 images (64 KiB,
  resident in L2), so that the input costs no DRAM reads;
- ``phases+1 load``: one unshifted load of the pair's lower rows instead of six;
- ``phases+detached``: the six loads made but the stored values not depending on them (they
  feed a store that never happens), so that no store waits for DRAM;
- ``phases+ahead D``: the six loads of the program D programs ahead made (``evict_last``, fed
  to a store that never happens) besides its own, so that its own are L2 hits;
- ``phases+after D``: as ``phases+ahead D``, those loads issued after the program's own
  stores, so that no wait for its own loads covers them.
- ``kernel``: the upsampling kernel itself.

GB/s count the output written plus, for the last two, the input once (as the bench does);
ratios are to the best device copy of the output. Run from the repository root:

    XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=.:benchmarks python benchmarks/upsample_store_probe.py
"""

from __future__ import annotations

import argparse
import sys

import jax
import jax.numpy as jnp
from timing import record, timeit, torch_copy_seconds

import dml_jax as dml
from dml_jax.kernels import resample as K
from dml_jax.kernels.pallas_helpers import load_pallas

N, C, H, W, F = 16, 256, 64, 64, 4
OH, OW = H * F, W * F
ROWS = 4  # input rows a program (pairs in the kernel)


def probe(kind: str, warps: int):
    pl, pltriton = load_pallas()
    tiles = H // ROWS
    programs = N * C * tiles
    n_out = N * C * OH * OW

    def kernel(x_ref, o_ref):
        t = pl.program_id(0)
        img, i = t // tiles, t % tiles
        base = img * OH * OW + i * ROWS * F * OW
        if kind == "contiguous":
            at = base + jnp.arange(ROWS * F * OW, dtype=jnp.int32)
            o_ref[at] = jnp.full((ROWS * F * OW,), t, jnp.float32)
            return
        value = jnp.full((ROWS, OW), t, jnp.float32)

        def loads(src, i, live=None, policy=None):
            r = i * ROWS + jnp.arange(ROWS, dtype=jnp.int32)
            m = jnp.arange(W, dtype=jnp.int32)
            acc = jnp.zeros((ROWS, W), jnp.float32)
            for dr in (0,) if kind == "phases+1 load" else (0, 1):
                rr = src * H * W + jnp.clip(r + dr - 1, 0, H - 1) * W
                for dm in (0,) if kind == "phases+1 load" else (-1, 0, 1):
                    mm = m + dm
                    ok = jnp.broadcast_to(((mm >= 0) & (mm < W))[None, :], (ROWS, W))
                    if live is not None:
                        ok = ok & live
                    at = x_ref.at[rr[:, None] + mm[None, :]]
                    acc = acc + pltriton.load(at, mask=ok, other=0.0, eviction_policy=policy)
            return acc

        side = None
        after = kind.startswith("phases+after")
        if kind.startswith("phases+ahead"):
            ahead = t + int(kind.split()[-1])
            side = loads(ahead // tiles, ahead % tiles, ahead < programs, "evict_last")
            value = value + K._interleave([loads(img, i)] * F)
        elif after:
            value = value + K._interleave([loads(img, i)] * F)
        elif kind == "phases+detached":
            side = loads(img, i)
        elif kind.startswith("phases+"):
            value = value + K._interleave([loads(img % 4 if kind.endswith("L2") else img, i)] * F)
        for py in range(F):
            row = base + (jnp.arange(ROWS, dtype=jnp.int32) * F + py) * OW
            at = row[:, None] + jnp.arange(OW, dtype=jnp.int32)[None, :]
            pltriton.store(o_ref.at[at], value + py, eviction_policy="evict_first")
        if after:
            ahead = t + int(kind.split()[-1])
            side = loads(ahead // tiles, ahead % tiles, ahead < programs, "evict_last")
        if side is not None:
            # A store that never happens, so that the loads are kept: its mask is
            # min(loaded bits, number of SMs) > 65536, false on any GPU, but neither LLVM nor
            # ptxas can prove it (masks they can prove false, such as ``program_id >=
            # num_programs`` or an inline-asm constant, let them drop the loads: read in SASS).
            (small,) = pltriton.elementwise_inline_asm(
                "{ .reg .u32 n; mov.u32 n, %nsmid; min.u32 $0, $1, n; }",
                args=[jax.lax.bitcast_convert_type(side, jnp.int32)],
                constraints="=r,r",
                pack=1,
                result_shape_dtypes=[jax.ShapeDtypeStruct(side.shape, jnp.int32)],
            )
            at = base + jnp.arange(ROWS, dtype=jnp.int32)[:, None] * W + jnp.arange(W)[None, :]
            pltriton.store(o_ref.at[at], side, mask=small > 65536)

    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((n_out,), jnp.float32),
        grid=(programs,),
        compiler_params=pltriton.CompilerParams(num_warps=warps, num_stages=1),
    )
    return jax.jit(lambda x: call(x.reshape(-1)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write the rows as JSON here")
    args = parser.parse_args()
    x = jax.random.normal(jax.random.PRNGKey(0), (N, C, H, W), jnp.float32)
    out_bytes = N * C * OH * OW * 4
    y = jnp.zeros((N, C, OH, OW), jnp.float32)
    t_copy = min(timeit(jax.jit(lambda z: -z), y), torch_copy_seconds(y.shape, "float32"))
    del y
    copy_gbps = 2 * out_bytes / t_copy / 1e9
    t = dml.TensorDesc("FLOAT32", (N, C, H, W))
    desc = dml.Upsample2DOperatorDesc(t, t.like(sizes=(N, C, OH, OW)), (F, F), "LINEAR")
    v = K.plan(desc)
    runs = [(f"{kind} w{w}", probe(kind, w), kind.startswith("phases+"))
            for kind in ("contiguous", "phases", "phases+loads", "phases+loads L2",
                         "phases+1 load", "phases+detached", "phases+ahead 2048",
                         "phases+after 1024", "phases+after 2048", "phases+after 4096",
                         "phases+after 8192")
            for w in (4,)]  # fmt: skip
    runs.append((f"kernel w{v.warps} rows {v.rows}", jax.jit(lambda z: K.upsample_kernel(z, v)), 1))
    rows = []
    for label, fn, reads in runs:
        seconds = timeit(fn, x)
        gbps = (out_bytes + (x.size * 4 if reads else 0)) / seconds / 1e9
        row = dict(probe=label, gbps=gbps, ratio=gbps / copy_gbps, copy_gbps=copy_gbps)
        record(rows, row, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
