"""Where a network's GPU time goes: the CUDA kernels of one dml_jax graph call, next to PyTorch
eager's, by total time (CUPTI through ``torch.profiler``, which records every kernel of the
process, XLA's included). The GPT stack of ``examples/networks.py`` by default. Run from the
repository root on a CUDA machine with PyTorch:

    XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=. python benchmarks/profile_kernels.py [gpt|resnet50] [OUT.txt]

After the tables come the gaps: with the calls dispatched back to back and one sync, the idle
time on the device before each kernel, summed by kernel name, and the host's time to dispatch a
call against the device's time for it (a host that dispatches slower than the device runs
leaves the device idle between kernels).
"""

from __future__ import annotations

import importlib.util
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))

import itertools

import jax
import networks
import numpy as np

_spec = importlib.util.spec_from_file_location("bench_networks", ROOT / "benchmarks/networks.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

CALLS = 5


def table(title: str, events, total_calls: int) -> list[str]:
    """Kernels by total device time per call, the largest first, grouped by name."""
    times, counts = defaultdict(float), defaultdict(int)
    for e in events:
        t = getattr(e, "self_device_time_total", None)
        t = e.self_cuda_time_total if t is None else t
        if t > 0:
            times[e.key] += t
            counts[e.key] += e.count
    total = sum(times.values()) / total_calls
    lines = [f"== {title}: {total / 1e3:.3f} ms of kernels per call"]
    for name, t in sorted(times.items(), key=lambda kv: -kv[1])[:30]:
        per = t / total_calls
        lines.append(
            f"{per / 1e3:9.3f} ms {100 * per / total:5.1f}% x{counts[name] // total_calls:<4d} {name[:110]}"
        )
    return lines


def _short(name: str) -> str:
    return name[:60]


def gap_table(title: str, events, total_calls: int, layers: int = 0) -> list[str]:
    """Idle device time before each kernel, by kernel name, per call (calls back to back)."""
    kernels = sorted(
        (e.time_range.start, e.time_range.end, e.key)
        for e in events
        if str(getattr(e, "device_type", "")).endswith("CUDA")
        and e.time_range.end > e.time_range.start
    )
    if not kernels:
        return [f"== {title}: no kernels recorded"]
    before, after, counts = defaultdict(float), defaultdict(float), defaultdict(int)
    idle = 0.0
    for (_, prev_end, prev), (start, _, name) in itertools.pairwise(kernels):
        gap = max(start - prev_end, 0.0)
        idle += gap
        before[_short(name)] += gap
        after[_short(prev)] += gap
        counts[_short(name)] += 1
    span = kernels[-1][1] - kernels[0][0]
    lines = [
        (
            f"== {title}: {span / total_calls / 1e3:.3f} ms a call from first kernel to last, "
            f"{idle / total_calls / 1e3:.3f} ms of it idle ({len(kernels) / total_calls:.0f} kernels a call)"
        )
    ]
    for name, t in sorted(before.items(), key=lambda kv: -kv[1])[:12]:
        lines.append(
            f"   before {t / total_calls / 1e3:7.3f} ms (mean {t / max(counts[name], 1):6.2f} us) {name}"
        )
    for name, t in sorted(after.items(), key=lambda kv: -kv[1])[:12]:
        lines.append(f"   after  {t / total_calls / 1e3:7.3f} ms {name}")
    if layers:
        lines += layer_table(kernels, total_calls, layers)
    return lines


def layer_table(kernels, total_calls: int, layers: int) -> list[str]:
    """Mean time of each kernel of a layer, by its place in the layer (a call's kernels being
    ``layers`` equal runs of kernels and a few after them)."""
    per_call = len(kernels) // total_calls
    period = per_call // layers
    times, names = defaultdict(list), {}
    for c in range(total_calls):
        for i in range(period * layers):
            start, end, name = kernels[c * per_call + i]
            times[i % period].append(end - start)
            names[i % period] = _short(name)
    lines = [f"   a layer's kernels ({period} a layer, mean over layers and calls):"]
    for i in range(period):
        lines.append(f"     {i:2d} {np.mean(times[i]):8.2f} us  {names[i]}")
    return lines


def host_rate(step, sync, calls: int = 20) -> str:
    """The host's time to dispatch a call against the time until the device is done."""
    import time

    sync()
    t0 = time.perf_counter()
    for _ in range(calls):
        step()
    t1 = time.perf_counter()
    sync()
    t2 = time.perf_counter()
    return f"   host dispatch {1e3 * (t1 - t0) / calls:.3f} ms a call; done after {1e3 * (t2 - t0) / calls:.3f} ms a call"


def main(which: str = "gpt", out: str | None = None) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    if which == "gpt":
        net = networks.gpt_stack(8, 1024, 1024, 16, 12, "FLOAT16")
        x = np.random.default_rng(0).standard_normal((8 * 1024, 1024)).astype(np.float16)
    else:
        net = networks.resnet50(256, "FLOAT16")
        x = np.random.default_rng(0).standard_normal((256, 3, 224, 224)).astype(np.float16)
    graph = net.compile()
    args = [jax.device_put(a) for a in net.arguments(x=x)]
    jax.block_until_ready(graph(*args))
    c = net.config  # the PyTorch twin as benchmarks/networks.py builds it
    if which == "gpt":
        model = bench.torch_gpt(torch, c["d_model"], c["heads"], c["layers"], c["ffn"])
        model = bench._load(torch, model, net.parameters).to("cuda", torch.float16)
        tx = torch.from_numpy(x).to("cuda").reshape(c["batch"], c["seq"], c["d_model"])
    else:
        model = bench.torch_resnet(torch, c["width"], c["layers"], c["classes"])
        model = bench.fold_batch_norm(torch, bench._load(torch, model, net.parameters))
        model = model.to("cuda", torch.float16).to(memory_format=torch.channels_last)
        tx = torch.from_numpy(x).to("cuda").contiguous(memory_format=torch.channels_last)
    torch.backends.cudnn.benchmark = True
    with torch.no_grad():
        model(tx)
        torch.cuda.synchronize()
        lines = []
        for title, step in (
            ("dml_jax graph", lambda: jax.block_until_ready(graph(*args))),
            ("PyTorch eager", lambda: (model(tx), torch.cuda.synchronize())),
        ):
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(CALLS):
                    step()
            lines += table(title, prof.key_averages(), CALLS)
        for title, step, sync in (
            (
                "dml_jax graph, gaps",
                lambda: graph(*args),
                lambda: jax.block_until_ready(graph(*args)),
            ),
            ("PyTorch eager, gaps", lambda: model(tx), torch.cuda.synchronize),
        ):
            sync()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(CALLS):
                    step()
                sync()
            # the sync's own call (dml_jax) adds one call's kernels
            calls = CALLS + (1 if title.startswith("dml") else 0)
            lines += gap_table(title, prof.events(), calls, 12 if which == "gpt" else 0)
            lines.append(host_rate(step, sync))
    text = "\n".join(lines)
    print(text)
    if out:
        Path(out).write_text(text + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
