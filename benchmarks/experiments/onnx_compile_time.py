"""Where an ONNX model's first call spends its time: the session's import (parsing, shape
folding, graph optimizations), jax's trace and lowering to StableHLO, XLA's compilation, and
the first run; against ``torch.compile``'s first call on the same model, in the same process.

Models are the onnx_models suite's (``dml_jax.bench.suites.onnx_families.FAMILIES``), random
weights, exported with TorchScript at the timed batch and type. Each phase is timed apart
(``jax.jit(fn).trace(...).lower().compile()``); ``hlo ops`` counts the instructions of the
optimized program, ``hot ms`` is the compiled program's time (the bench harness's ``Timer``).

Usage (on a CUDA machine with PyTorch and torchvision):
``PYTHONPATH=. python benchmarks/experiments/onnx_compile_time.py [--only NAME ...]
[--batch N] [--dtype float16] [--no-compile] [--level all] [--triton-gemm]
[--no-patch-products] [--profile] [--roll] [--drop-fast-path OPERATOR:NAME] [--quantized]``. The programs
compile with the session's options (``session.compiler_options``: on GPUs XLA's Triton matrix
products off, which they take over ``XLA_FLAGS``; ``--triton-gemm`` turns them back on);
``XLA_FLAGS`` set outside compares XLA's other options (``--xla_gpu_autotune_level=0``: no
algorithm search). ``--no-patch-products`` gives convolutions whose windows tile the input to
XLA's convolution instead of the lowering's matrix product (``conv_forms.PATCH_PRODUCTS``).
``--profile`` traces the compile and the first run with ``jax.profiler`` and prints, under each
model's row, the host events that took longest in all (XLA's passes, such as
``priority-fusion``, the autotuner's ``config-assigner``, and each convolution's first run):
seconds in all, how many times, on how many threads. ``--roll`` traces each run of
repeated blocks as one loop (``InferenceSession``'s ``roll_repeats=True``).
``--drop-fast-path CONVOLUTION:depthwise`` (or ``MEAN_VARIANCE_NORMALIZATION1:*``) times the
model with that GPU fast path out of the registry: the lowering it replaces. ``--quantized``
times the float32 export quantized as ``quantized_models_gpu.py`` quantizes it instead;
``--run`` times ``run``'s program (weights as arguments) rather than ``fn_on()``'s (weights
compiled in), its trace, lowering and compile as one phase.
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import tempfile
import time

import numpy as np


def _timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def _longest_events(trace_dir: str, count: int = 25) -> list[str]:
    """The ``count`` host events of a ``jax.profiler`` trace that took longest in all."""
    (path,) = glob.glob(os.path.join(trace_dir, "**", "*.trace.json.gz"), recursive=True)
    with gzip.open(path) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    total, calls, threads = collections.Counter(), collections.Counter(), {}
    for e in events:
        if e["name"].startswith("$"):  # Python frames
            continue
        total[e["name"]] += e["dur"]
        calls[e["name"]] += 1
        threads.setdefault(e["name"], set()).add(e.get("tid"))
    return [
        f"    {us / 1e6:8.3f} s {calls[name]:6d} x {len(threads[name]):3d} threads  {name[:100]}"
        for name, us in total.most_common(count)
    ]


def drop_fast_paths(specs: list[str]) -> None:
    """Removes the named fast paths from ``dml_jax.fastpath``'s registry, for a comparison with
    the lowering they replace in the same run."""
    from dml_jax import fastpath

    for spec in specs:
        op, _, name = spec.partition(":")
        paths = fastpath._FAST_PATHS.get(f"DML_OPERATOR_{op.removeprefix('DML_OPERATOR_')}", {})
        dropped = list(paths) if name == "*" else [name] if name in paths else []
        if not dropped:
            raise SystemExit(f"--drop-fast-path {spec}: no such fast path ({sorted(paths)})")
        for n in dropped:
            del paths[n]


def set_tunables(items: list[str]) -> None:
    """Sets module tunables, each ``MODULE.NAME=VALUE`` (a Python literal), before a run:
    ``dml_jax.kernels.int8_conv.LAYOUT='NCHW'``."""
    import ast
    import importlib

    for item in items:
        target, value = item.split("=", 1)
        module, attr = target.rsplit(".", 1)
        setattr(importlib.import_module(module), attr, ast.literal_eval(value))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", nargs="*", default=["convnext_tiny", "fcn_resnet50", "gpt2"])
    p.add_argument("--batch", type=int, default=None, help="default: the family's timed batch")
    p.add_argument("--dtype", choices=("float16", "float32"), default="float16")
    p.add_argument("--level", default="all")
    p.add_argument("--no-compile", dest="compile", action="store_false")
    p.add_argument("--triton-gemm", action="store_true", help="XLA's Triton matrix products on")
    p.add_argument(
        "--no-patch-products",
        action="store_true",
        help="windows that tile the input as XLA's convolution, not a product",
    )
    p.add_argument(
        "--profile", action="store_true", help="the compile's and first run's longest events"
    )
    p.add_argument("--roll", action="store_true", help="repeated blocks looped (roll_repeats)")
    p.add_argument(
        "--every-platform",
        action="store_true",
        help="trace the portable session.fn (every platform's branch) instead of fn_on()",
    )
    p.add_argument(
        "--drop-fast-path",
        action="append",
        default=[],
        metavar="OPERATOR:NAME",
        help="take a fast path out of the registry (repeatable), e.g. CONVOLUTION:depthwise or "
        "MEAN_VARIANCE_NORMALIZATION1:kernel; NAME * drops every fast path of the operator",
    )
    p.add_argument(
        "--quantized",
        action="store_true",
        help="the model's float32 export quantized as the quantized models suite quantizes it "
        "(BERT dynamic int8, image families static QDQ int8), timed instead of the export",
    )
    p.add_argument(
        "--run",
        action="store_true",
        help="time (and with --profile trace) run's first call as one phase: its program, "
        "weights as arguments, instead of fn_on()'s, weights compiled in",
    )
    args = p.parse_args()
    drop_fast_paths(args.drop_fast_path)
    if args.no_patch_products:
        from dml_jax.ops import conv_forms

        conv_forms.PATCH_PRODUCTS = False

    import jax
    import torch

    from dml_jax.bench.harness import Timer, cold_torch_caches, jax_sync
    from dml_jax.bench.suites.onnx_families import FAMILIES
    from dml_jax.bench.suites.onnx_models import export, random_model
    from dml_jax.onnx import InferenceSession, SessionOptions

    print(f"jax {jax.__version__}, torch {torch.__version__}, {jax.devices()[0].device_kind}, "
          f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}")  # fmt: skip
    print("model | import s | trace s | lower s | compile s | first run s | total s | "
          "hlo ops | hot ms | torch.compile first s")  # fmt: skip
    for name in args.only:
        family = FAMILIES[name]
        model = random_model(name, torch, False)
        targs = family.inputs(args.batch or family.batch, False)
        dynamic = family.dynamic
        if args.quantized:
            model = model.cuda()
            targs = tuple(a.cuda() for a in targs)
        elif args.dtype == "float16":
            model = model.cuda().half()
            targs = tuple(a.cuda().half() if a.is_floating_point() else a.cuda() for a in targs)
        else:
            model = model.cuda()
            targs = tuple(a.cuda() for a in targs)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, f"{name}.onnx")
            with torch.no_grad():
                export(model, targs, path, "torchscript", dynamic)
            if args.quantized:
                from dml_jax.bench.suites.quantized_models import MODELS as QUANTIZED
                from dml_jax.bench.suites.quantized_models import quantize

                source, path = path, os.path.join(tmp, f"{name}_int8.onnx")
                kind = QUANTIZED.get(name, "QDQ int8")
                quantize(kind, source, path, [a.cpu().numpy() for a in targs])
            feeds = [jax.device_put(a.cpu().numpy()) for a in targs]
            options = SessionOptions()
            options.graph_optimization_level = args.level
            triton = {"xla_gpu_enable_triton_gemm": True} if args.triton_gemm else None
            t_import, session = _timed(
                lambda: InferenceSession(
                    path, options, compiler_options=triton, roll_repeats=args.roll
                )
            )
            if args.run:
                feed = {i.name: np.asarray(a) for i, a in zip(session.get_inputs(), feeds)}
                profile = os.path.join(tmp, "profile") if args.profile else None
                if profile:
                    jax.profiler.start_trace(profile)
                t_first, call = _timed(lambda: session._device_call(feed))
                t_run, _ = _timed(lambda: jax.block_until_ready(call()))
                if profile:
                    jax.profiler.stop_trace()
                hot = Timer().run(call, jax_sync)
                print(f"{name} | run: import {t_import:.2f} s, program {t_first:.2f} s, first "
                      f"run {t_run:.2f} s | {hot * 1e3:.2f} ms", flush=True)  # fmt: skip
                if profile:
                    print("\n".join(_longest_events(profile)), flush=True)
                continue
            # traced for the session's device alone (as ``run`` does), unless --every-platform
            pure = session.fn if args.every_platform else session.fn_on()
            fn = jax.jit(pure, compiler_options=session.compiler_options or None)
            t_trace, traced = _timed(lambda: fn.trace(*feeds))
            t_lower, lowered = _timed(traced.lower)
            profile = None
            if args.profile:
                profile = os.path.join(tmp, "profile")
                jax.profiler.start_trace(profile)
            t_compile, compiled = _timed(lowered.compile)
            t_run, _ = _timed(lambda: jax.block_until_ready(compiled(*feeds)))
            if profile:
                jax.profiler.stop_trace()
                events = _longest_events(profile)
            ops = sum(
                1
                for line in compiled.as_text().splitlines()
                if " = " in line and not line.lstrip().startswith(("ROOT", "//"))
            )
            hot = Timer().run(lambda: compiled(*feeds), jax_sync)
            total = t_import + t_trace + t_lower + t_compile + t_run
            tc = ""
            if args.compile:
                torch._dynamo.reset()
                cm = torch.compile(model)
                with torch.no_grad(), cold_torch_caches():
                    t = time.perf_counter()
                    cm(*targs)
                    torch.cuda.synchronize()
                    tc = f"{time.perf_counter() - t:.1f}"
                torch._dynamo.reset()
            print(f"{name} | {t_import:.2f} | {t_trace:.2f} | {t_lower:.2f} | {t_compile:.2f} | "
                  f"{t_run:.2f} | {total:.2f} | {ops} | "
                  f"{hot * 1e3:.2f} | {tc}", flush=True)  # fmt: skip
            if profile:
                print("\n".join(events), flush=True)
        del model, session, fn, traced, lowered, compiled
        jax.clear_caches()
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
