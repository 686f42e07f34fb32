"""Whether jax's collective product kernel overlaps its communication at the GPT stack's
shapes (issue 65: the split GPT stack needs its collectives inside its products).

``jax.experimental.pallas.ops.gpu.collective_matmul_mgpu.all_gather_lhs_matmul`` (Mosaic GPU)
multiplies A, split by rows over the devices, by B, split by columns, sending A's pieces
around the ring while it multiplies the ones it holds: the sequence-parallel form of a
column-parallel projection, whose all-gather the plain program runs before the product. For
each shape (the stack's tokens split over the devices, K = d_model, B's columns split): the
all-gather and product as XLA runs them (``all_gather(a) @ b`` in ``shard_map``), the local
product alone (the bound with the communication hidden), and the kernel under a few tunings;
microseconds a call (many calls, one sync), and the kernel's largest difference from the
reference. First it says whether NVSHMEM is there (the kernel's remote copies may need it:
``--xla_gpu_experimental_enable_nvshmem`` in ``XLA_FLAGS``, the ``nvidia-nvshmem`` wheel).

Usage (a machine of two or more GPUs, repository root): ``PYTHONPATH=. python3
benchmarks/experiments/collective_matmul_gpu.py``; writes ``$OUT/collective_matmul.json``
when ``OUT`` is set.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import time

import numpy as np

# (label, rows of A on each device, K, columns of B on each device): the GPT stack of the
# networks suite (8 x 1,024 tokens, d_model 1,024, FFN 4,096) on two devices
SHAPES = (("fc1", 4096, 1024, 2048), ("qkv", 4096, 1024, 1536))


def timed(fn, *args, calls: int = 50) -> float:
    import jax

    jax.block_until_ready(fn(*args))
    cpu = jax.default_backend() == "cpu"  # (simulated CPU devices deadlock on calls in flight)
    t = time.perf_counter()
    for _ in range(calls):
        out = fn(*args)
        if cpu:
            jax.block_until_ready(out)
    jax.block_until_ready(out)
    return (time.perf_counter() - t) / calls * 1e6


def main() -> None:
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    report: dict = {"devices": [d.device_kind for d in jax.devices()], "jax": jax.__version__}
    report["nvshmem_wheel"] = (
        importlib.util.find_spec("nvidia") is not None
        and importlib.util.find_spec("nvidia.nvshmem") is not None
    )
    try:
        from jax.experimental.mosaic import gpu as mgpu

        report["nvshmem_available"] = bool(mgpu.is_nvshmem_available())
    except Exception as e:  # recorded
        report["nvshmem_available"] = f"{type(e).__name__}: {e}"[:300]
    report["xla_flags"] = os.environ.get("XLA_FLAGS", "")
    print(json.dumps(report), flush=True)
    try:
        from jax.experimental.pallas.ops.gpu import collective_matmul_mgpu as cm
    except Exception as e:  # recorded; the reference forms still run
        cm, report["kernel_import"] = None, f"{type(e).__name__}: {e}"[:300]

    n = len(jax.devices())
    mesh = jax.make_mesh((n,), ("x",))
    rows, cols = NamedSharding(mesh, P("x", None)), NamedSharding(mesh, P(None, "x"))

    def mapped(fn):
        return jax.jit(
            jax.shard_map(fn, mesh=mesh, in_specs=(P("x", None), P(None, "x")),
                          out_specs=P(None, "x"), check_vma=False)
        )  # fmt: skip

    results = {}
    for label, m, k, cols_each in SHAPES:
        key = jax.random.key(0)
        a = jax.device_put(jax.random.normal(key, (n * m, k), jnp.float16), rows)
        b = jax.device_put(
            (jax.random.normal(jax.random.key(1), (k, n * cols_each), jnp.float32) / 32).astype(
                jnp.float16
            ),
            cols,
        )
        reference = mapped(lambda x, y: jax.lax.all_gather(x, "x", axis=0, tiled=True) @ y)
        want = np.asarray(reference(a, b), np.float32)
        local = jax.jit(
            jax.shard_map(lambda x, y: x @ y, mesh=mesh, in_specs=(P(None, None), P(None, "x")),
                          out_specs=P(None, "x"), check_vma=False)
        )  # fmt: skip
        whole = jax.device_put(a, NamedSharding(mesh, P()))
        row = {
            "all_gather_then_product_us": timed(reference, a, b),
            "product_alone_us": timed(local, whole, b),
        }
        tunings = itertools.product((128, 256), (128,), (4,), ("M", "N"), (4, 8), ("M", "N"))
        tunings = tunings if cm is not None else ()
        for tile_m, tile_n, steps, minor, width, wg in tunings:
            name = (
                f"tile_m={tile_m},tile_n={tile_n},steps={steps},minor={minor},width={width},wg={wg}"
            )
            try:
                config = cm.TuningConfig(
                    tile_m=tile_m, tile_n=tile_n, tile_k=64, max_concurrent_steps=steps,
                    grid_minor_dim=getattr(cm.MatmulDimension, minor), grid_tile_width=width,
                    wg_dimension=getattr(cm.MatmulDimension, wg),
                )  # fmt: skip

                def kernel(x, y, config=config):
                    return cm.all_gather_lhs_matmul(x, y, "x", config=config, dtype=jnp.float16)

                fn = mapped(kernel)
                got = np.asarray(fn(a, b), np.float32)
                row[name] = {
                    "us": timed(fn, a, b),
                    "max_abs_diff": float(np.abs(got - want).max()),
                }
            except Exception as e:  # recorded, the next tuning taken
                row[name] = {"error": f"{type(e).__name__}: {e}"[:400]}
        results[label] = row
        print(label, json.dumps(row), flush=True)
    report["shapes"] = results
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "collective_matmul.json"), "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
