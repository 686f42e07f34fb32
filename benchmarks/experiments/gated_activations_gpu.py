"""ACTIVATION_SWISH's lax lowering in several forms inside an exported model at level ``all``
(where QuickGeluFusion turns its SiLUs into SWISH), against level ``disable`` (SIGMOID and
MULTIPLY), timed interleaved in one process (issue 42: a rewrite must not cost time where XLA
already fuses what it replaces).

The forms, each put in place of the SWISH row's ``fn`` while that session is traced:

- ``lowering``: the lowering as it is (``activation._swish``);
- ``plain``: ``x * sigmoid(x)``, without SWISH(-inf) = 0 (a floor, not a candidate);
- ``select first``: the limit taken before the product, ``where(isinf(x) & (gate == 0), 0,
  x * gate)`` (the lowering before 4b40856);
- ``one select after``: ``where(isnan(y) & ~isnan(x), 0, y)`` on ``y = x * gate``;
- ``nested selects after``: ``where(isnan(y), where(isnan(x), y, 0), y)`` (the lowering's form).

Each session's function is ``fn_on()`` jitted with the session's ``compiler_options``, as the
benchmark suite times it. Prints each form's median call time over 7 rounds of 30 calls.

Usage (CUDA machine with PyTorch and torchvision): ``PYTHONPATH=. python
benchmarks/experiments/gated_activations_gpu.py [MODEL]`` (a name of the onnx_models suite,
default efficientnet_b0; float16, batch 64). Figures in the README.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time

import jax
import jax.numpy as jnp

from dml_jax.onnx import InferenceSession, SessionOptions
from dml_jax.ops import activation


def _gate(d, x):
    return jax.nn.sigmoid(activation._f(d, "sigmoid_input_scale", x) * x)


def _select_first(d, x):
    gate = _gate(d, x)
    return jnp.where(jnp.isinf(x) & (gate == 0), jnp.zeros_like(x), x * gate)


def _one_select_after(d, x):
    y = x * _gate(d, x)
    return jnp.where(jnp.isnan(y) & ~jnp.isnan(x), jnp.zeros_like(y), y)


def _nested_selects_after(d, x):
    y = x * _gate(d, x)
    return jnp.where(jnp.isnan(y), jnp.where(jnp.isnan(x), y, jnp.zeros_like(y)), y)


def main() -> None:
    import torch

    from dml_jax.bench.suites.onnx_models import MODELS, export, random_model

    name = sys.argv[1] if len(sys.argv) > 1 else "efficientnet_b0"
    _, inputs, dynamic = MODELS[name]
    model = random_model(name, torch).cuda().half()
    args = tuple(a.cuda().half() for a in inputs(64))
    path = os.path.join(tempfile.mkdtemp(), "model.onnx")
    with torch.no_grad():
        export(model, args, path, "torchscript", dynamic)
    feeds = [jax.device_put(a.cpu().numpy()) for a in args]
    row = next(r for r in activation.ROWS if r.name == "ACTIVATION_SWISH")
    lowering = row.fn
    forms = {
        "lowering": lowering,
        "plain": lambda d, x: x * jax.nn.sigmoid(x),
        "select first": _select_first,
        "one select after": _one_select_after,
        "nested selects after": _nested_selects_after,
    }

    def compiled(level: str):
        options = SessionOptions()
        options.graph_optimization_level = level
        session = InferenceSession(path, options)
        fn = jax.jit(session.fn_on(), compiler_options=session.compiler_options or None)
        jax.block_until_ready(fn(*feeds))
        return fn

    fns = {"disable": compiled("disable")}
    try:
        for key, form in forms.items():
            object.__setattr__(row, "fn", form)  # read at trace time
            fns[key] = compiled("all")
    finally:
        object.__setattr__(row, "fn", lowering)
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(7):
        for key, fn in fns.items():
            jax.block_until_ready(fn(*feeds))
            start = time.perf_counter()
            for _ in range(30):
                out = fn(*feeds)
            jax.block_until_ready(out)
            times[key].append((time.perf_counter() - start) / 30 * 1e3)
    for key, values in times.items():
        print(f"{key:22s} {statistics.median(values):.3f} ms")


if __name__ == "__main__":
    main()
