"""The scaling suite: a large REDUCE and a CLIP -> REDUCE graph on 1 device and on every local
device.

The descriptors are the same for every device count; only ``in_shardings`` / ``out_shardings``
change (rows split over a 1-D mesh of k devices). Cases:

- ``REDUCE SUM axis 1``: each device reduces its own rows (no communication);
- ``REDUCE SUM axis 0``: the reduced axis is the sharded one (partial sums, then an all-reduce);
- ``graph CLIP -> REDUCE SUM axis 1``: two nodes compiled into one program (``compile_graph``);
- ``copy``: ``-x`` with the same sharding, the bandwidth roofline of the run.

GB/s counts the input read once plus the output written once. Each sharded result is checked
against the 1-device result. With one device the multi-device half is skipped (and recorded so);
on a CPU, ``XLA_FLAGS=--xla_force_host_platform_device_count=8`` before the run gives 8 simulated
devices (they share the host's cores: overhead, not speed-up). Default input 16384 x 16384
float32 (1 GiB); ``--quick``: 512 x 1024.
"""

from __future__ import annotations

from typing import Any

from ..harness import Run, cold_time, error_text

FULL_SHAPE = (16384, 16384)  # 2**28 float32 elements: 1 GiB
QUICK_SHAPE = (512, 1024)


def add_arguments(p: Any) -> None:
    p.add_argument("--rows", type=int, help="input rows (multiple of the device count)")
    p.add_argument("--cols", type=int, help="input columns")


def suite_cases(rows: int, cols: int) -> list[tuple[str, Any, bool]]:
    """The suite's DML cases on a {rows, cols} float32 input: (name, descriptor, whether it is
    a graph)."""
    import dml_jax as dml

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
    return [
        ("REDUCE SUM axis 1 (rows sharded: local)", sum_rows, False),
        ("REDUCE SUM axis 0 (sharded axis: all-reduce)", sum_cols, False),
        ("graph CLIP -> REDUCE SUM axis 1", graph, True),
    ]


def run(run: Run) -> int:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    import dml_jax as dml

    args = run.args
    rows, cols = QUICK_SHAPE if run.quick else FULL_SHAPE
    rows, cols = args.rows or rows, args.cols or cols
    devices = jax.devices()
    counts = sorted({1, len(devices)})
    if len(devices) == 1:
        run.skip("several devices", "one device: the 1-device rows only")
    if rows % len(devices):
        run.log(f"--rows {rows} must be a multiple of the device count {len(devices)}")
        return 2
    run.report.update(shape=[rows, cols], dtype="float32")

    x_desc = dml.TensorDesc("FLOAT32", (rows, cols))
    cases = [*suite_cases(rows, cols), ("copy (-x)", None, False)]

    host = np.random.default_rng(0).standard_normal((rows, cols), dtype=np.float32)
    in_bytes = host.nbytes
    reference = {}
    for k in counts:
        mesh = jax.make_mesh((k,), ("x",), devices=devices[:k])
        rows_sharded = NamedSharding(mesh, P("x"))
        replicated = NamedSharding(mesh, P())
        x = jax.device_put(host, rows_sharded)
        x.block_until_ready()
        for name, desc, is_graph in cases:
            row = {"case": name, "devices": k}
            try:
                if desc is None:
                    out_desc = x_desc
                    op = jax.jit(
                        jnp.negative, in_shardings=rows_sharded, out_shardings=rows_sharded
                    )
                else:
                    out_desc = (desc.nodes[-1] if is_graph else desc).output_tensor
                    # Output rows stay where they were computed; a 1-row result is replicated.
                    out_s = rows_sharded if out_desc.sizes[0] % k == 0 else replicated
                    compile_fn = dml.compile_graph if is_graph else dml.compile_operator
                    op = compile_fn(desc, in_shardings=rows_sharded, out_shardings=out_s)
                cold, out = cold_time(lambda op=op, x=x: op(x), jax.block_until_ready)
                hot = run.timer.run(lambda op=op, x=x: op(x), jax.block_until_ready)
                result = np.asarray(out)
                if k == 1:
                    reference[name] = result
                err = float(np.max(np.abs(result - reference[name])))
                out_bytes = int(np.prod(out_desc.sizes)) * 4
                row.update(
                    cold_s=round(cold, 6),
                    hot_s=hot,
                    gb_per_s=round((in_bytes + out_bytes) / hot / 1e9, 2),
                    max_abs_diff_vs_1_device=err,
                )
            except Exception as e:  # recorded, the run goes on
                row["error"] = error_text(e)
            run.add(row)
    one = {r["case"]: r["hot_s"] for r in run.rows if r["devices"] == 1 and "hot_s" in r}
    copies = {r["devices"]: r["hot_s"] for r in run.rows if r["case"].startswith("copy")}
    for r in run.rows:
        if "hot_s" in r and r["case"] in one and r["devices"] in copies:
            r["speedup_vs_1_device"] = round(one[r["case"]] / r["hot_s"], 3)
            r["ratio_to_copy"] = round(copies[r["devices"]] / r["hot_s"], 3)
    return 0


def table(report: dict) -> list[str]:
    rows, cols = report.get("shape", ["?", "?"])
    lines = [
        (
            f"float32 input {rows} x {cols}, rows split over the devices; GB/s: input read once "
            "plus output written once."
        ),
        "",
        "| case | devices | GB/s | copy time / time | speed-up vs 1 device | max abs diff |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in report["rows"]:
        if "gb_per_s" not in r:
            lines.append(f"| {r['case']} | {r['devices']} | {r.get('error', '-')} | | | |")
            continue
        lines.append(
            f"| {r['case']} | {r['devices']} | {r['gb_per_s']:.1f} | "
            f"{r.get('ratio_to_copy', '')} | {r.get('speedup_vs_1_device', '')} | "
            f"{r['max_abs_diff_vs_1_device']:.2g} |"
        )
    return lines
