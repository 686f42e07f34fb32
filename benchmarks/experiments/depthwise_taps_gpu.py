"""Depthwise convolutions on GPUs as taps instead of cuDNN's grouped convolution: an exported
model's first call (``onnx_compile_time.py``'s columns) or its kernels summed by name (issue 42,
the first-call goal).

The CONVOLUTION lowering (``dml_jax/ops/gemm_conv.py``) runs undilated depthwise convolutions
on GPUs as XLA's grouped convolution (cuDNN), whose algorithm search and plan building are most
of the first call of MobileNetV2/V3 and EfficientNet. This replaces ``conv_forms._depthwise``,
for windows of at most ``--taps`` taps, by:

- ``--layout first``: ``conv_forms.depthwise_taps`` as it is (the CPU's form, channels second);
- ``--layout last``: the same sum with the channels last (transposed in and back out, which
  XLA's layout assignment can make free where the activations around are channels-last, as
  they are around the 1x1 convolutions' matrix products), ``--barrier`` keeping the input's
  producer (a bias and activation) out of the taps' fusion, where it would be computed once
  per tap.

Usage (CUDA machine with PyTorch and torchvision): ``PYTHONPATH=. python
benchmarks/experiments/depthwise_taps_gpu.py --taps 25 --layout last --barrier -- --only
mobilenet_v2 --no-compile`` (the arguments after ``--`` are ``onnx_compile_time.py``'s);
``--profile NAME`` prints NAME's GPU kernels summed by name instead. Figures in the README.
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import itertools
import json
import math
import os
import runpy
import sys
import tempfile

import jax.numpy as jnp
from jax import lax

from dml_jax.ops import conv_forms as G
from dml_jax.ops._common import wide


def taps_last(x, w, strides, padding, lhs_dilation, dilations, barrier: bool, out_barrier=False):
    """``conv_forms.depthwise_taps`` with the channels last (one output channel per input
    channel; other multipliers keep the channels-second form)."""
    n, c = x.shape[:2]
    kernel = w.shape[2:]
    if w.shape[0] != c:
        return G.depthwise_taps(x, w, strides, padding, lhs_dilation, dilations)
    if barrier:
        x = lax.optimization_barrier(x)
    nd = len(kernel)
    xt = jnp.transpose(wide(x), (0, *range(2, 2 + nd), 1))
    config = [(0, 0, 0)]
    config += [(lo, hi, d - 1) for (lo, hi), d in zip(padding, lhs_dilation)]
    xp = lax.pad(xt, jnp.zeros((), xt.dtype), [*config, (0, 0, 0)])
    extents = [(k - 1) * r + 1 for k, r in zip(kernel, dilations)]
    out = tuple((size - e) // s + 1 for size, e, s in zip(xp.shape[1:-1], extents, strides))
    taps = jnp.moveaxis(wide(w).reshape((c, *kernel)), 0, -1)  # {kernel..., C}
    y = None
    for tap in itertools.product(*(range(k) for k in kernel)):
        start = tuple(t * r for t, r in zip(tap, dilations))
        end = tuple(b + (o - 1) * s + 1 for b, o, s in zip(start, out, strides))
        window = lax.slice(xp, (0, *start, 0), (n, *end, c), (1, *strides, 1))
        term = window * taps[tap]
        y = term if y is None else y + term
    y = y.astype(G.product_type(x))
    if out_barrier:
        y = lax.optimization_barrier(y)
    return jnp.transpose(y, (0, nd + 1, *range(1, nd + 1)))


def patch(limit: int, layout: str, barrier: bool, out_barrier: bool = False) -> None:
    grouped = G._depthwise

    def depthwise(x, w, strides, padding, lhs_dilation, dilations, g):
        if math.prod(w.shape[2:]) > limit:
            return grouped(x, w, strides, padding, lhs_dilation, dilations, g)
        if layout == "last":
            return taps_last(x, w, strides, padding, lhs_dilation, dilations, barrier, out_barrier)
        return G.depthwise_taps(x, w, strides, padding, lhs_dilation, dilations)

    G._depthwise = depthwise


def profile(name: str, calls: int = 10) -> None:
    import jax
    import torch

    from dml_jax.bench.suites.onnx_models import MODELS, export, random_model
    from dml_jax.onnx import InferenceSession

    _, inputs, dynamic = MODELS[name]
    model = random_model(name, torch).cuda().half()
    targs = tuple(a.cuda().half() if a.is_floating_point() else a.cuda() for a in inputs(64))
    tmp = tempfile.mkdtemp()
    path = os.path.join(tmp, f"{name}.onnx")
    with torch.no_grad():
        export(model, targs, path, "torchscript", dynamic)
    feeds = [jax.device_put(a.cpu().numpy()) for a in targs]
    session = InferenceSession(path)
    fn = jax.jit(session.fn, compiler_options=session.compiler_options or None)
    for _ in range(3):
        jax.block_until_ready(fn(*feeds))
    jax.profiler.start_trace(tmp, create_perfetto_trace=True)
    for _ in range(calls):
        out = fn(*feeds)
    jax.block_until_ready(out)
    jax.profiler.stop_trace()
    trace = max(glob.glob(f"{tmp}/**/*.trace.json.gz", recursive=True), key=os.path.getmtime)
    with gzip.open(trace) as f:
        events = json.load(f)
    events = events["traceEvents"] if isinstance(events, dict) else events
    names = {
        e["pid"]: e["args"]["name"]
        for e in events
        if e.get("ph") == "M" and e.get("name") == "process_name"
    }
    total, count = collections.Counter(), collections.Counter()
    for e in events:
        if e.get("ph") == "X" and "GPU" in names.get(e.get("pid"), ""):
            total[e["name"][:100]] += e.get("dur", 0)
            count[e["name"][:100]] += 1
    print(f"{name}: {sum(total.values()) / calls / 1e3:.3f} ms of GPU kernels a call")
    for kernel, us in total.most_common(25):
        print(f"  {us / calls / 1e3:7.3f} ms {count[kernel] // calls:4d}x {kernel}")


def main() -> None:
    argv = sys.argv[1:]
    rest = argv[argv.index("--") + 1 :] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--taps", type=int, default=25, help="windows of at most this many taps")
    p.add_argument("--layout", choices=("first", "last"), default="last")
    p.add_argument("--barrier", action="store_true")
    p.add_argument("--out-barrier", action="store_true", help="the taps' sum materialized")
    p.add_argument("--profile", metavar="NAME")
    args = p.parse_args(own)
    patch(args.taps, args.layout, args.barrier, args.out_barrier)
    if args.profile:
        profile(args.profile)
        return
    here = os.path.dirname(os.path.abspath(__file__))
    sys.argv = ["onnx_compile_time.py", *rest]
    runpy.run_path(os.path.join(here, "onnx_compile_time.py"), run_name="__main__")


if __name__ == "__main__":
    main()
