"""Probe (not kept): the float16 GPT with its causal mask as a constant and as a graph input,
PyTorch eager and torch.compile, interleaved in one process."""

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))
import jax
import networks
import numpy as np

spec = importlib.util.spec_from_file_location("bn", ROOT / "benchmarks/networks.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def main():
    import torch

    x = np.random.default_rng(0).standard_normal((8 * 1024, 1024)).astype(np.float16)
    calls = {}
    import os

    forms = (("constant", False, True), ("input", True, True), ("constant separate", False, False))
    if os.environ.get("ONLY_CONSTANT"):
        forms = forms[:1]
    for name, mask_input, fused in forms:
        net = networks.gpt_stack(
            8, 1024, 1024, 16, 12, "FLOAT16", mask_input=mask_input, fused_qkv=fused
        )
        g = net.compile()
        args = [jax.device_put(a) for a in net.arguments(x=x)]
        calls[f"dml {name}"] = ((lambda g=g, args=args: g(*args)), jax.block_until_ready)
    c = net.config
    model = bench.torch_gpt(torch, c["d_model"], c["heads"], c["layers"], c["ffn"])
    model = bench._load(torch, model, net.parameters).to("cuda", torch.float16)
    tx = torch.from_numpy(x).to("cuda").reshape(8, 1024, 1024)
    compiled = torch.compile(model)

    def torch_call(m):
        def call():
            with torch.inference_mode():
                return m(tx)

        return call

    def tsync(o):
        torch.cuda.synchronize()

    calls["torch eager"] = (torch_call(model), tsync)
    if not os.environ.get("ONLY_CONSTANT"):
        calls["torch.compile"] = (torch_call(compiled), tsync)
    for name, (call, sync) in calls.items():
        sync(call())
    rows = {k: [] for k in calls}
    for _ in range(3):
        for name, (call, sync) in calls.items():
            rows[name].append(bench.hot_time(call, sync, 0.2, 5) * 1e3)
    for name, ms in rows.items():
        print(
            f"{name:16s} ms {' '.join(f'{m:.3f}' for m in ms)}  tokens/s {8192 / min(ms) * 1e3:,.0f}"
        )


main()
