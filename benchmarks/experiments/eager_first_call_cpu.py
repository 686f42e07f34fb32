"""Whether a first call run op by op (no jit: each lax operation dispatched on its own, as JAX
runs code outside ``jax.jit``) would come nearer onnxruntime's session and first call on the
CPU than the session's compiled program (issue 66, item 4: the light models' first calls
within 3x of onnxruntime's).

One light model (``onnx/backend/test/data/light``) per process, ``--random-weights`` as
``tests/test_onnx_models.py`` gives them; ``--mode``: ``ort`` (onnxruntime's session and first
call), ``jit`` (``InferenceSession`` and its first ``run``), ``eager`` (``InferenceSession``,
its program for the input's shapes and that program's ``apply`` called outside any jit).
Prints the first call's seconds, a second call's milliseconds and the output's sum.

Usage: ``JAX_PLATFORMS=cpu PYTHONPATH=.:tests python
benchmarks/experiments/eager_first_call_cpu.py light_resnet50 --mode eager
[--random-weights]``, from the repository root.
"""

from __future__ import annotations

import argparse
import os
import time


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="a light model's name (light_resnet50, light_densenet121...)")
    p.add_argument("--mode", choices=("ort", "jit", "eager"), default="eager")
    p.add_argument("--random-weights", action="store_true")
    args = p.parse_args()

    import numpy as np
    import onnx

    path = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light",
                        f"{args.model}.onnx")  # fmt: skip
    if args.random_weights:
        from test_onnx_models import _randomized  # tests/, on PYTHONPATH

        data = _randomized(path).SerializeToString()
    else:
        with open(path, "rb") as f:
            data = f.read()
    graph = onnx.load_from_string(data).graph
    weights = {i.name for i in graph.initializer}
    (info,) = [i for i in graph.input if i.name not in weights]
    shape = [d.dim_value for d in info.type.tensor_type.shape.dim]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    feed = {info.name: x}
    start = time.perf_counter()
    if args.mode == "ort":
        import onnxruntime as ort

        s = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
        call = lambda: s.run(None, feed)[0]
    else:
        from dml_jax.onnx import InferenceSession

        s = InferenceSession(data)
        if args.mode == "jit":
            call = lambda: s.run(None, feed)[0]
        else:
            program, _ = s._program_and_resumed([x], (), [], True)
            params = s._run_params(program)
            call = lambda: np.asarray(program.apply(params, x)[0])
    out = call()
    first = time.perf_counter() - start
    start = time.perf_counter()
    call()
    second = time.perf_counter() - start
    print(f"{args.model} {args.mode}: first {first:.3f} s, second call {second * 1000:.1f} ms, "
          f"output sum {float(np.abs(out).sum()):.6g}")  # fmt: skip


if __name__ == "__main__":
    main()
