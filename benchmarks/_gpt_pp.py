"""GPT stack sustained ms a call and energy, PP_IN_FLIGHT from argv (experiment): argv depth [torch]."""
import ctypes, sys, time
from pathlib import Path
ROOT = Path.cwd()
sys.path.insert(0, str(ROOT / "examples"))
import jax, numpy as np, networks
from dml_jax.kernels import gemm
gemm.PP_IN_FLIGHT = int(sys.argv[1])
nv = ctypes.CDLL("libnvidia-ml.so.1"); nv.nvmlInit_v2(); h = ctypes.c_void_p()
nv.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h))
def energy():
    e = ctypes.c_ulonglong(); nv.nvmlDeviceGetTotalEnergyConsumption(h, ctypes.byref(e)); return e.value
net = networks.gpt_stack(8, 1024, 1024, 16, 12, "FLOAT16")
x = np.random.default_rng(0).standard_normal((8 * 1024, 1024)).astype(np.float16)
graph = net.compile()
args = [jax.device_put(a) for a in net.arguments(x=x)]
ref = np.asarray(graph(*args))
def sustained(step, sync, warm_s=1.5, meas_s=1.2):
    sync(); time.sleep(1.0)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < warm_s:
        for _ in range(10): step()
    sync(); res = []; en = []
    for _ in range(3):
        e0 = energy(); t1 = time.perf_counter(); n = 0
        while time.perf_counter() - t1 < meas_s / 3:
            for _ in range(10): step()
            n += 10
        sync(); res.append((time.perf_counter() - t1) / n * 1e3); en.append((energy() - e0) / n)
    return res, en
d, de = sustained(lambda: graph(*args), lambda: jax.block_until_ready(graph(*args)))
print(f"dml PP_IN_FLIGHT={gemm.PP_IN_FLIGHT}: ms a call {[round(t, 3) for t in d]} mJ a call {[round(t, 1) for t in de]}", flush=True)
np.save(f"/tmp/gpt_out_{sys.argv[1]}.npy", ref)
if len(sys.argv) > 2:
    import torch, importlib.util
    spec = importlib.util.spec_from_file_location("bn", ROOT / "benchmarks/networks.py")
    bench = importlib.util.module_from_spec(spec); spec.loader.exec_module(bench)
    c = net.config
    model = bench.torch_gpt(torch, c["d_model"], c["heads"], c["layers"], c["ffn"])
    model = bench._load(torch, model, net.parameters).to("cuda", torch.float16)
    tx = torch.from_numpy(x).to("cuda").reshape(c["batch"], c["seq"], c["d_model"])
    with torch.no_grad():
        e, ee = sustained(lambda: model(tx), torch.cuda.synchronize)
    print(f"eager ms a call {[round(t, 3) for t in e]} mJ a call {[round(t, 1) for t in ee]}; ratio {min(e)/min(d):.3f} (medians {np.median(e)/np.median(d):.3f})", flush=True)
