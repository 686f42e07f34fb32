"""Where a network's GPU time goes: the CUDA kernels of one dml_jax graph call, next to PyTorch
eager's, by total time (CUPTI through ``torch.profiler``, which records every kernel of the
process, XLA's included). The GPT stack of ``examples/networks.py`` by default. Run from the
repository root on a CUDA machine with PyTorch:

    XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=. python benchmarks/profile_kernels.py [gpt|resnet50] [OUT.txt]
"""

from __future__ import annotations

import importlib.util
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))

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
    text = "\n".join(lines)
    print(text)
    if out:
        Path(out).write_text(text + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
