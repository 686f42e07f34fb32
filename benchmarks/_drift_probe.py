import ctypes, sys, threading, time
from collections import defaultdict
from pathlib import Path
ROOT = Path.cwd()
sys.path.insert(0, str(ROOT / "examples"))
import jax, numpy as np, networks, torch
from torch.profiler import ProfilerActivity, profile
import importlib.util
spec = importlib.util.spec_from_file_location("bn", ROOT / "benchmarks/networks.py")
bench = importlib.util.module_from_spec(spec); spec.loader.exec_module(bench)

nv = ctypes.CDLL("libnvidia-ml.so.1")
nv.nvmlInit_v2()
h = ctypes.c_void_p()
nv.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h))
def sample():
    c = ctypes.c_uint(); p = ctypes.c_uint(); r = ctypes.c_ulonglong(); t = ctypes.c_uint()
    nv.nvmlDeviceGetClockInfo(h, 1, ctypes.byref(c))
    nv.nvmlDeviceGetPowerUsage(h, ctypes.byref(p))
    nv.nvmlDeviceGetCurrentClocksThrottleReasons(h, ctypes.byref(r))
    nv.nvmlDeviceGetTemperature(h, 0, ctypes.byref(t))
    return c.value, p.value / 1000, r.value, t.value
samples = []
stop = False
def sampler():
    while not stop:
        samples.append((time.perf_counter(),) + sample())
        time.sleep(0.005)
threading.Thread(target=sampler, daemon=True).start()

net = networks.gpt_stack(8, 1024, 1024, 16, 12, "FLOAT16")
x = np.random.default_rng(0).standard_normal((8 * 1024, 1024)).astype(np.float16)
graph = net.compile()
args = [jax.device_put(a) for a in net.arguments(x=x)]
jax.block_until_ready(graph(*args))
c = net.config
model = bench.torch_gpt(torch, c["d_model"], c["heads"], c["layers"], c["ffn"])
model = bench._load(torch, model, net.parameters).to("cuda", torch.float16)
tx = torch.from_numpy(x).to("cuda").reshape(c["batch"], c["seq"], c["d_model"])
N = 150
def drift(name, step, sync):
    sync(); time.sleep(3)
    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(N):
            o = step()
        sync()
    t1 = time.perf_counter()
    ks = sorted((e.time_range.start, e.time_range.end) for e in prof.events() if str(e.device_type).endswith("CUDA"))
    per = len(ks) // N
    busy = [sum(b - a for a, b in ks[i*per:(i+1)*per]) / 1e3 for i in range(N)]
    print(f"== {name}: {per} kernels a call, wall {1e3*(t1-t0)/N:.3f} ms a call")
    print("   busy ms by 10 calls:", [round(float(np.mean(busy[i:i+10])), 3) for i in range(0, N, 10)])
    s = [x for x in samples if t0 <= x[0] <= t1]
    for q in range(0, len(s), max(len(s) // 12, 1)):
        tt, clk, pw, rs, temp = s[q]
        print(f"   t={tt-t0:6.3f}s sm {clk} MHz power {pw:.0f} W reasons {rs:#x} temp {temp}")
with torch.no_grad():
    model(tx); torch.cuda.synchronize()
    drift("dml_jax", lambda: graph(*args), lambda: jax.block_until_ready(graph(*args)))
    drift("PyTorch eager", lambda: model(tx), torch.cuda.synchronize)
    drift("dml_jax again", lambda: graph(*args), lambda: jax.block_until_ready(graph(*args)))
stop = True
