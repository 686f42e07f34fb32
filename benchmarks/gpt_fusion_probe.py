"""Experiment: can XLA's own GEMM fusions take the GPT stack's bias adds and GELU into its
products? Times the float16 GPT of ``examples/networks.py`` (8 x 1024 tokens) compiled with
one set of XLA GPU options at a time (``jax.jit(..., compiler_options=...)``), next to PyTorch
eager and ``torch.compile``, in one process, interleaved, with each variant's kernel list
(CUPTI through ``torch.profiler``) and its agreement with the default's output.

    XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=. python benchmarks/gpt_fusion_probe.py OUT.json
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
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

VARIANTS = {
    "default": {},
    "no-gemm-path": {},
    "no-qkv": {},
    "old": {},
    "cudnn-fusion-1": {"xla_gpu_cudnn_gemm_fusion_level": 1},
    "cudnn-fusion-2": {"xla_gpu_cudnn_gemm_fusion_level": 2},
    "cudnn-fusion-3": {"xla_gpu_cudnn_gemm_fusion_level": 3},
    "cublaslt": {"xla_gpu_enable_cublaslt": True},
    "triton-any": {"xla_gpu_triton_gemm_any": True},
    "gemm-fusion-v2": {"xla_gpu_experimental_gemm_fusion_v2": True},
    "triton-tma": {"xla_gpu_experimental_enable_triton_tma": True},
    "triton-tma-ws": {
        "xla_gpu_experimental_enable_triton_tma": True,
        "xla_gpu_experimental_enable_triton_warp_specialization": True,
    },
    "all-triton": {"xla_gpu_experimental_all_fusions_with_triton": True},
    "force-triton-gemm": {"xla_gpu_unsupported_force_triton_gemm": True},
    "dynamic-slice": {"xla_gpu_enable_dynamic_slice_fusion": True},
    "multi-output": {"xla_gpu_unsupported_enable_triton_multi_output_fusion": True},
}


def kernels(call, sync, calls=5):
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            sync(call())
    times, counts = defaultdict(float), defaultdict(int)
    for e in prof.key_averages():
        t = getattr(e, "self_device_time_total", None)
        t = e.self_cuda_time_total if t is None else t
        if t > 0:
            times[e.key] += t / calls / 1e3
            counts[e.key] += e.count // calls
    top = sorted(times.items(), key=lambda kv: -kv[1])[:12]
    return sum(times.values()), [(round(t, 4), counts[k], k[:90]) for k, t in top]


def main(out: str) -> None:
    import torch

    names = os.environ.get("VARIANTS", ",".join(VARIANTS)).split(",")
    net = networks.gpt_stack(8, 1024, 1024, 16, 12, "FLOAT16")
    x = np.random.default_rng(0).standard_normal((8 * 1024, 1024)).astype(np.float16)
    args = [jax.device_put(a) for a in net.arguments(x=x)]
    g = net.compile()
    tokens = 8 * 1024

    def jsync(o):
        jax.block_until_ready(o)

    calls, report = {}, {"device": jax.devices()[0].device_kind, "jax": jax.__version__}
    ref = None
    from dml_jax import fastpath
    from dml_jax import graph as dml_graph

    saved = (dict(fastpath._FAST_PATHS["DML_OPERATOR_GEMM"]), dict(fastpath._EPILOGUES))
    for name in names:
        t = time.perf_counter()
        # registry variants: "no-gemm-path" (epilogues only), "old" (neither: round 15's program)
        fastpath._FAST_PATHS["DML_OPERATOR_GEMM"] = dict(saved[0])
        fastpath._EPILOGUES.clear()
        fastpath._EPILOGUES.update(saved[1])
        if name in ("no-gemm-path", "old"):
            fastpath._FAST_PATHS["DML_OPERATOR_GEMM"].pop("kernel", None)
        if name == "old":
            fastpath._EPILOGUES.clear()
        if name == "no-qkv":  # the attention epilogue off (slices of the stacked tensor again)
            for key in list(fastpath._EPILOGUES):
                if "ATTENTION" in key[1]:
                    del fastpath._EPILOGUES[key]
        dml_graph._compile_graph_cached.cache_clear()
        g = net.compile()
        try:
            f = jax.jit(g.fn, compiler_options=VARIANTS.get(name, {})).lower(*args).compile()
            o = f(*args)
            jsync(o)
        except Exception as e:  # noqa: BLE001 - an option this XLA refuses is a result
            report[name] = {"error": repr(e)[:300]}
            print(name, "failed", repr(e)[:300], flush=True)
            continue
        compile_s = time.perf_counter() - t
        o = np.asarray(o, np.float32)
        ref = o if ref is None else ref
        err = float(np.max(np.abs(o - ref)) / np.max(np.abs(ref)))
        kern, top = kernels(lambda f=f: f(*args), jsync)
        report[name] = {"compile_s": compile_s, "rel_err_vs_first": err, "kernel_ms": kern,
                        "top": top}  # fmt: skip
        calls[name] = (lambda f=f: f(*args), jsync)
        print(name, json.dumps(report[name])[:1500], flush=True)

    c = net.config
    model = bench.torch_gpt(torch, c["d_model"], c["heads"], c["layers"], c["ffn"])
    model = bench._load(torch, model, net.parameters).to("cuda", torch.float16)
    tx = torch.from_numpy(x).to("cuda").reshape(c["batch"], c["seq"], c["d_model"])
    torch.backends.cuda.matmul.allow_tf32 = False

    def tsync(o):
        torch.cuda.synchronize()

    with torch.no_grad():
        calls["torch eager"] = (lambda: model(tx), tsync)
        cm = torch.compile(model)
        cm(tx)
        tsync(None)
        calls["torch.compile"] = (lambda: cm(tx), tsync)
        for rnd in range(3):
            for name, (call, sync) in calls.items():
                sync(call())
                hot = bench.hot_time(call, sync, 0.2, 5)
                report.setdefault(name, {}).setdefault("ms", []).append(hot * 1e3)
                print(f"round {rnd} {name}: {hot * 1e3:.3f} ms {tokens / hot:,.0f} tokens/s",
                      flush=True)  # fmt: skip
    Path(out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
