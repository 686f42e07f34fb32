"""GPT stack sustained ms a call against PyTorch eager (experiment)."""
import sys, time
from pathlib import Path
ROOT = Path.cwd()
sys.path.insert(0, str(ROOT / "examples"))
import jax, numpy as np, networks
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
    sync(); res = []
    for _ in range(3):
        t1 = time.perf_counter(); n = 0
        while time.perf_counter() - t1 < meas_s / 3:
            for _ in range(10): step()
            n += 10
        sync(); res.append((time.perf_counter() - t1) / n * 1e3)
    return res
import torch, importlib.util
spec = importlib.util.spec_from_file_location("bn", ROOT / "benchmarks/networks.py")
bench = importlib.util.module_from_spec(spec); spec.loader.exec_module(bench)
c = net.config
model = bench.torch_gpt(torch, c["d_model"], c["heads"], c["layers"], c["ffn"])
model = bench._load(torch, model, net.parameters).to("cuda", torch.float16)
tx = torch.from_numpy(x).to("cuda").reshape(c["batch"], c["seq"], c["d_model"])
with torch.no_grad():
    want = model(tx).float().cpu().numpy().reshape(ref.shape)
    print("relative error vs PyTorch", float(np.abs(ref.astype(np.float32) - want).max() / np.abs(want).max()))
    for r in range(2):
        d = sustained(lambda: graph(*args), lambda: jax.block_until_ready(graph(*args)))
        e = sustained(lambda: model(tx), torch.cuda.synchronize)
        print(f"round {r}: dml ms a call {[round(t, 3) for t in d]}  eager {[round(t, 3) for t in e]}  ratio {np.median(e)/np.median(d):.3f}", flush=True)
