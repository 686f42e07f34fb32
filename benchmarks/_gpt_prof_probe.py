import sys, time
from pathlib import Path
ROOT = Path.cwd()
sys.path.insert(0, str(ROOT / "examples"))
import jax, numpy as np, networks, torch
from torch.profiler import ProfilerActivity, profile
net = networks.gpt_stack(8, 1024, 1024, 16, 12, "FLOAT16")
x = np.random.default_rng(0).standard_normal((8 * 1024, 1024)).astype(np.float16)
graph = net.compile()
args = [jax.device_put(a) for a in net.arguments(x=x)]
jax.block_until_ready(graph(*args))
def run(n=50):
    jax.block_until_ready(graph(*args))
    t0 = time.perf_counter()
    outs = [graph(*args) for _ in range(n)]
    jax.block_until_ready(outs)
    return 1e3 * (time.perf_counter() - t0) / n
def run_keep1(n=50):
    jax.block_until_ready(graph(*args))
    t0 = time.perf_counter()
    for _ in range(n):
        o = graph(*args)
    jax.block_until_ready(o)
    return 1e3 * (time.perf_counter() - t0) / n
for rep in range(3):
    print("plain keep-all", round(run(), 3), "keep-last", round(run_keep1(), 3), flush=True)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        t = run_keep1()
    ks = sorted((e.time_range.start, e.time_range.end) for e in prof.events() if str(e.device_type).endswith("CUDA"))
    busy = sum(b - a for a, b in ks)
    print("profiled keep-last", round(t, 3), "kernel busy/call", round(busy / 51 / 1e3, 3), "span/call", round((ks[-1][1]-ks[0][0]) / 51 / 1e3, 3), flush=True)
