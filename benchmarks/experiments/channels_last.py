"""The ChannelsLast graph rewrite (``dml_jax/onnx/optimize/strides.py``) on and off, per model:
how many nodes it takes, agreement between the two, and the time of one call, the two programs
timed alternately in one process (median of per-round ratios, quartiles beside it).

CPU (default): the ``onnx`` package's light networks at batch 1, float32, their weights replaced
by random ones (``onnx_cpu.with_random_weights``). ``--torchvision``: torchvision models exported
by the TorchScript exporter from float16 copies on the GPU at ``--batch`` (random weights, no
downloads), run on JAX's default device.

Usage: ``PYTHONPATH=. python benchmarks/experiments/channels_last.py [--only NAME ...]
[--torchvision] [--batch 64] [--rounds 15] [--iters 3]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np

LIGHT = ("resnet50", "densenet121", "inception_v1", "inception_v2", "squeezenet", "shufflenet",
         "vgg19", "bvlc_alexnet", "zfnet512")  # fmt: skip
TORCHVISION = ("resnet50", "densenet121", "efficientnet_b0", "regnet_y_800mf", "convnext_tiny",
               "mobilenet_v2")  # fmt: skip


def _light_model(name):
    sys.path.insert(0, os.path.dirname(__file__))
    from onnx_cpu import LIGHT as ROOT
    from onnx_cpu import with_random_weights

    model = with_random_weights(os.path.join(ROOT, f"light_{name}.onnx"))
    return model, None


def _torchvision_model(name, batch, folder):
    import onnx
    import torch
    import torchvision

    model = getattr(torchvision.models, name)(weights=None).eval().cuda().half()
    x = torch.randn(batch, 3, 224, 224, device="cuda", dtype=torch.float16)
    path = os.path.join(folder, f"{name}.onnx")
    with torch.no_grad():
        torch.onnx.export(model, (x,), path, opset_version=17, dynamo=False,
                          input_names=["input_0"], output_names=["output"])  # fmt: skip
    return onnx.load(path), x.cpu().numpy()


def compare(name, model, x, rounds, iters):
    import jax

    from dml_jax.onnx import compile_onnx

    on = compile_onnx(model)
    off = compile_onnx(model, disabled_optimizers=["ChannelsLast"])
    taken = dict(on.imported.optimizations).get("ChannelsLast", 0)
    if x is None:
        rng = np.random.default_rng(0)
        x = rng.standard_normal(on.input_shapes[0]).astype(on.input_dtypes[0])
    x = jax.device_put(x)
    ys = {}
    for key, f in (("off", off), ("on", on)):
        out = jax.block_until_ready(f(x))
        ys[key] = np.asarray(out[0] if isinstance(out, list | tuple) else out, np.float64)
    scale = max(float(np.abs(ys["off"]).max()), 1e-30)
    rel = float(np.abs(ys["on"] - ys["off"]).max()) / scale
    times = {"off": [], "on": []}
    for r in range(rounds):
        for key in ("off", "on") if r % 2 == 0 else ("on", "off"):
            f = on if key == "on" else off
            start = time.perf_counter()
            for _ in range(iters):
                out = f(x)
            jax.block_until_ready(out)
            times[key].append((time.perf_counter() - start) / iters * 1e3)
    ratios = sorted(a / b for a, b in zip(times["on"], times["off"]))
    q = len(ratios) // 4
    print(f"{name}: {taken} nodes, rel diff {rel:.1e}; off {statistics.median(times['off']):.3f}"
          f" ms, on {statistics.median(times['on']):.3f} ms; on/off {statistics.median(ratios):.3f}"
          f" (quartiles {ratios[q]:.3f}-{ratios[-q - 1]:.3f})", flush=True)  # fmt: skip


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", nargs="*", default=None, help="model names (default: all)")
    p.add_argument("--torchvision", action="store_true", help="torchvision exports on the GPU")
    p.add_argument("--batch", type=int, default=64, help="the torchvision models' batch")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--iters", type=int, default=3)
    opts = p.parse_args(argv)
    names = opts.only or (TORCHVISION if opts.torchvision else LIGHT)
    with tempfile.TemporaryDirectory() as folder:
        for name in names:
            if opts.torchvision:
                model, x = _torchvision_model(name, opts.batch, folder)
            else:
                model, x = _light_model(name)
            compare(name, model, x, opts.rounds, opts.iters)


if __name__ == "__main__":
    main()
