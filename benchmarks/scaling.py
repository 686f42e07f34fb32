"""Scaling out: a large REDUCE and a CLIP -> REDUCE graph on 1 device and on all local devices.

The descriptors are the same for every device count; only ``in_shardings`` / ``out_shardings``
change (rows split over a 1-D mesh of k devices). Cases:

- ``REDUCE SUM axis 1``: each device reduces its own rows (no communication);
- ``REDUCE SUM axis 0``: the reduced axis is the sharded one (partial sums, then an all-reduce);
- ``graph CLIP -> REDUCE SUM axis 1``: two nodes compiled into one program (``compile_graph``);
- ``copy``: ``-x`` with the same sharding, the bandwidth roofline of the run.

Every hot time is the median of samples, each sample many dispatches followed by one sync; the
cold time (trace + compile + first call) is reported separately. GB/s counts the input read once
plus the output written once. Each sharded result is checked against the 1-device result.

Usage::

    python benchmarks/scaling.py                  # 1 GiB float32 input, every local device
    python benchmarks/scaling.py --quick          # small input (CPU, CI)
    python benchmarks/scaling.py --out scaling.json

Without accelerators JAX has one CPU device; the script asks XLA for ``--cpu-devices`` (default
8) simulated CPU devices so the multi-device path runs anywhere. They share the host's cores, so
CPU numbers show overhead, not speed-up. On a GPU machine JAX's default backend is the GPUs and
the simulated CPU devices are unused.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

FULL_SHAPE = (16384, 16384)  # 2**28 float32 elements: 1 GiB
QUICK_SHAPE = (512, 1024)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--quick", action="store_true", help=f"input {QUICK_SHAPE} instead of {FULL_SHAPE}"
    )
    p.add_argument("--rows", type=int, help="input rows (multiple of the device count)")
    p.add_argument("--cols", type=int, help="input columns")
    p.add_argument(
        "--cpu-devices",
        type=int,
        default=8,
        help="simulated CPU devices when there is no accelerator (default 8)",
    )
    p.add_argument("--sample-s", type=float, default=0.2, help="target seconds per sample")
    p.add_argument("--samples", type=int, default=5)
    p.add_argument("--out", type=Path, help="write the JSON report here")
    return p.parse_args(argv)


def _time(call, sync, sample_s: float, samples: int) -> tuple[float, float]:
    """(cold seconds, hot seconds per call): median of samples of many dispatches, one sync."""
    t = time.perf_counter()
    sync(call())
    cold = time.perf_counter() - t
    t = time.perf_counter()
    sync(call())
    one = max(time.perf_counter() - t, 1e-7)
    iters = int(min(1000, max(3, sample_s / one)))
    times = []
    for _ in range(samples):
        t = time.perf_counter()
        out = None
        for _ in range(iters):
            out = call()
        sync(out)
        times.append((time.perf_counter() - t) / iters)
    return cold, statistics.median(times)


def main(argv: list[str] | None = None) -> dict:
    args = _parse(argv)
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags and args.cpu_devices > 1:
        # Must precede the JAX import; only the CPU platform reads it.
        os.environ["XLA_FLAGS"] = (
            f"{flags} --xla_force_host_platform_device_count={args.cpu_devices}"
        ).strip()

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    import dml_jax as dml

    rows, cols = QUICK_SHAPE if args.quick else FULL_SHAPE
    rows, cols = args.rows or rows, args.cols or cols
    devices = jax.devices()
    counts = sorted({1, len(devices)})
    if rows % len(devices):
        raise SystemExit(f"--rows {rows} must be a multiple of the device count {len(devices)}")

    x_desc = dml.TensorDesc("FLOAT32", (rows, cols))
    sum_rows = dml.ReduceOperatorDesc("SUM", x_desc, x_desc.like(sizes=(rows, 1)), [1])
    sum_cols = dml.ReduceOperatorDesc("SUM", x_desc, x_desc.like(sizes=(1, cols)), [0])
    clip = dml.ElementWiseClipOperatorDesc(x_desc, x_desc, min=-1.0, max=1.0)
    graph = dml.GraphDesc(
        input_count=1,
        output_count=1,
        nodes=[clip, sum_rows],
        input_edges=[dml.InputGraphEdge(0, 0, 0)],
        intermediate_edges=[dml.IntermediateGraphEdge(0, 0, 1, 0)],
        output_edges=[dml.OutputGraphEdge(1, 0, 0)],
    )
    cases = [
        ("REDUCE SUM axis 1 (rows sharded: local)", sum_rows, False),
        ("REDUCE SUM axis 0 (sharded axis: all-reduce)", sum_cols, False),
        ("graph CLIP -> REDUCE SUM axis 1", graph, True),
        ("copy (-x)", None, False),
    ]

    host = np.random.default_rng(0).standard_normal((rows, cols), dtype=np.float32)
    in_bytes = host.nbytes
    results, reference = [], {}
    for k in counts:
        mesh = jax.make_mesh((k,), ("x",), devices=devices[:k])
        rows_sharded = NamedSharding(mesh, P("x"))
        replicated = NamedSharding(mesh, P())
        x = jax.device_put(host, rows_sharded)
        x.block_until_ready()
        for name, desc, is_graph in cases:
            if desc is None:
                out_desc = x_desc
                op = jax.jit(jnp.negative, in_shardings=rows_sharded, out_shardings=rows_sharded)
            else:
                out_desc = (desc.nodes[-1] if is_graph else desc).output_tensor
                # Output rows stay where they were computed; a 1-row result is replicated.
                out_s = rows_sharded if out_desc.sizes[0] % k == 0 else replicated
                compile_fn = dml.compile_graph if is_graph else dml.compile_operator
                op = compile_fn(desc, in_shardings=rows_sharded, out_shardings=out_s)
            cold, hot = _time(
                lambda op=op, x=x: op(x),
                lambda r: r.block_until_ready(),
                args.sample_s,
                args.samples,
            )
            result = np.asarray(op(x))
            if k == 1:
                reference[name] = result
                max_err = 0.0
            else:
                max_err = float(np.max(np.abs(result - reference[name])))
            out_bytes = int(np.prod(out_desc.sizes)) * 4
            results.append(
                {
                    "case": name,
                    "devices": k,
                    "cold_s": round(cold, 6),
                    "hot_s": hot,
                    "gb_per_s": round((in_bytes + out_bytes) / hot / 1e9, 2),
                    "max_abs_diff_vs_1_device": max_err,
                }
            )
            print(
                f"{name:48s} devices={k:2d} cold {cold * 1e3:9.2f} ms  hot "
                f"{hot * 1e6:10.1f} us  {results[-1]['gb_per_s']:8.2f} GB/s  "
                f"max|diff| vs 1 device {max_err:.3g}",
                flush=True,
            )
    one = {r["case"]: r["hot_s"] for r in results if r["devices"] == 1}
    copies = {r["devices"]: r["hot_s"] for r in results if r["case"].startswith("copy")}
    for r in results:
        r["speedup_vs_1_device"] = round(one[r["case"]] / r["hot_s"], 3)
        r["ratio_to_copy"] = round(copies[r["devices"]] / r["hot_s"], 3)
    report = {
        "benchmark": "scaling",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "jax": jax.__version__,
        "python": platform.python_version(),
        "backend": jax.default_backend(),
        "devices": [str(d) for d in devices],
        "device_kind": devices[0].device_kind,
        "shape": [rows, cols],
        "dtype": "float32",
        "results": results,
    }
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.out}")
    return report


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
