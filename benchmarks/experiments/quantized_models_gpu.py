"""Quantized exports against their float16 export on a GPU (issue 66, item 2): BERT-base
quantized by onnxruntime's ``quantize_dynamic`` (DynamicQuantizeLinear + MatMulInteger, int8
weights) and ResNet-50 by ``quantize_static`` (QDQ, int8 activations and weights, weights per
channel, activations symmetric unless ``--asymmetric``, MinMax calibration on a few random
batches), each from its float32 export by the quantized models suite's ``quantize``; the
float16 export made from the half model on the GPU, as the ONNX models suite makes it. Random weights,
the suite's families (``dml_jax.bench.suites.onnx_families``), at the suite's timed batches.

Per model and form: the session's first call (import, trace, compile, run), ``run``'s program
(weights as arguments, inputs and outputs on the device) in milliseconds a call (median of
``--samples`` samples of ``--iters`` calls each, one sync a sample), the int8 form's speed-up
over float16, and the int8 output against onnxruntime's CPU provider on the same quantized
file (its optimizations off, and on), beside the float16 output against the float32 one; the
DML operators of the quantized program and its largest GPU kernels (a ``jax.profiler`` trace
of ``--iters`` calls; ``gpu_trace.py``).

Usage: ``PYTHONPATH=. python3 benchmarks/experiments/quantized_models_gpu.py [--only bert
resnet50] [--batch N] [--dump-hlo DIR]`` (another family of the suite's, as ``--only
mobilenet_v2``, is quantized by ``quantize_static`` as ResNet-50 is).
"""

from __future__ import annotations

import argparse
import collections
import copy
import os
import statistics
import sys
import tempfile
import time

import gpu_trace  # this folder's
import numpy as np


def _timed(call, iters: int, samples: int, sync=None) -> list[float]:
    import jax

    sync = sync or jax.block_until_ready
    sync(call())
    out = []
    for _ in range(samples):
        t = time.perf_counter()
        for _ in range(iters):
            y = call()
        sync(y)
        out.append((time.perf_counter() - t) / iters * 1e3)
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--only", nargs="*", default=["bert", "resnet50"])
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--samples", type=int, default=10)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument(
        "--profile",
        nargs="*",
        default=["float16", "int8"],
        help="the forms whose GPU kernels are listed",
    )
    p.add_argument("--top", type=int, default=12)
    p.add_argument("--forms", nargs="*", default=["float32", "float16", "int8"])
    p.add_argument("--torch", action="store_true", help="PyTorch eager's float16 time too")
    p.add_argument("--dump-hlo", default=None, metavar="DIR",
                   help="the sessions' optimized HLO into DIR (hlo_kernels.py reads it: which "
                   "fusion is which kernel of the profile)")  # fmt: skip
    p.add_argument("--drop-fast-path", nargs="*", default=[], metavar="OPERATOR:NAME",
                   help="fast paths left out (onnx_compile_time.py's option)")  # fmt: skip
    p.add_argument(
        "--asymmetric",
        dest="symmetric",
        action="store_false",
        help="QDQ activations with zero points (onnxruntime's default) rather than "
        "symmetric (ActivationSymmetric, as int8 GPU deployments take them)",
    )
    p.add_argument("--set", nargs="*", default=[], metavar="MODULE.NAME=VALUE",
                   help="a module's tunable set first (a Python literal), such as "
                   "dml_jax.kernels.int8_conv.LAYOUT='NCHW'")  # fmt: skip
    a = p.parse_args()
    if a.dump_hlo:  # before jax is imported: XLA reads its flags once
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" --xla_dump_to={a.dump_hlo}"
                                   " --xla_dump_hlo_as_text --xla_dump_hlo_module_re=.*apply.*")  # fmt: skip
    from onnx_compile_time import drop_fast_paths, set_tunables  # this folder's

    set_tunables(a.set)
    drop_fast_paths(a.drop_fast_path)
    import jax
    import onnxruntime as ort
    import torch

    from dml_jax.bench.suites.onnx_families import FAMILIES
    from dml_jax.bench.suites.onnx_models import agreement, export, random_model
    from dml_jax.bench.suites.quantized_models import MODELS, quantize
    from dml_jax.onnx import InferenceSession

    print(jax.devices()[0].device_kind, jax.__version__, torch.__version__, ort.__version__)
    for name in a.only:
        family = FAMILIES[name]
        batch = a.batch or family.batch
        model = random_model(name, torch, False)
        args = family.inputs(batch, False)
        feeds = [x.numpy() for x in args]
        tmp = tempfile.mkdtemp()
        paths = {k: os.path.join(tmp, f"{name}_{k}.onnx") for k in ("float32", "float16", "int8")}
        with torch.no_grad():
            export(model, args, paths["float32"], "torchscript", family.dynamic)
            half = copy.deepcopy(model).cuda().half()
            hargs = tuple(x.cuda().half() if x.is_floating_point() else x.cuda() for x in args)
            export(half, hargs, paths["float16"], "torchscript", family.dynamic)
            del half
        print(f"{name}: batch {batch}", flush=True)
        if "int8" in a.forms:
            t = time.perf_counter()
            kind = MODELS.get(name, "QDQ int8")  # another image family: static QDQ
            quantize(kind, paths["float32"], paths["int8"], feeds, a.symmetric)
            print(f"  quantized in {time.perf_counter() - t:.1f} s", flush=True)
        outs, ms = {}, {}
        if a.torch:
            with torch.inference_mode():
                torch.backends.cudnn.benchmark = True
                half = copy.deepcopy(model).cuda().half()
                if family.image:
                    half = half.to(memory_format=torch.channels_last)
                times = _timed(
                    lambda: half(*hargs), a.iters, a.samples, lambda _: torch.cuda.synchronize()
                )
                print(f"  PyTorch eager float16: {statistics.median(times):.3f} ms a call")
                del half
        for form in a.forms:
            t = time.perf_counter()
            s = InferenceSession(paths[form])
            fs = [x.astype(np.float16) if form == "float16" and x.dtype == np.float32 else x
                  for x in feeds]  # fmt: skip
            feed = {i.name: x for i, x in zip(s.get_inputs(), fs)}
            call = s._device_call(feed)
            y = jax.block_until_ready(call())
            first = time.perf_counter() - t
            outs[form] = np.asarray(y[0], np.float32)
            times = _timed(call, a.iters, a.samples)
            ms[form] = statistics.median(times)
            ops = collections.Counter(
                op for prog in s._programs.values() for op in prog.operators()
            )
            print(f"  {form}: first call {first:.1f} s, {ms[form]:.3f} ms a call "
                  f"({min(times):.3f}-{max(times):.3f})", flush=True)  # fmt: skip
            print(f"  {form} operators:", dict(ops.most_common(12)), flush=True)
            if form in a.profile:
                folder = gpu_trace.record(call, a.iters)
                prof = gpu_trace.kernels(folder, a.iters, top=a.top)
                print(f"  {form} kernels a call: {prof['kernels']:.0f}, "
                      f"{prof['kernel_us']:.0f} us, busy {prof['busy']:.2f}", flush=True)  # fmt: skip
                for row in prof["top"]:
                    print("    ", row, flush=True)
            del s, call
        if {"float32", "float16", "int8"} <= set(outs):
            print(f"  int8 over float16: x{ms['float16'] / ms['int8']:.2f}; float16 against "
                  f"float32 {agreement(outs['float16'], outs['float32']):.1e}; int8 against "
                  f"float32 {agreement(outs['int8'], outs['float32']):.1e}", flush=True)  # fmt: skip
        elif {"float16", "int8"} <= set(outs):
            print(f"  int8 over float16: x{ms['float16'] / ms['int8']:.2f}", flush=True)
        if "int8" not in outs:
            continue
        for level, opt in (("off", ort.GraphOptimizationLevel.ORT_DISABLE_ALL),
                           ("on", ort.GraphOptimizationLevel.ORT_ENABLE_ALL)):  # fmt: skip
            so = ort.SessionOptions()
            so.graph_optimization_level = opt
            o = ort.InferenceSession(paths["int8"], so, providers=["CPUExecutionProvider"])
            want = o.run(None, {i.name: x for i, x in zip(o.get_inputs(), feeds)})[0]
            print(f"  int8 against onnxruntime CPU (optimizations {level}): "
                  f"{agreement(outs['int8'], want):.1e}", flush=True)  # fmt: skip
        sys.stdout.flush()


if __name__ == "__main__":
    main()
