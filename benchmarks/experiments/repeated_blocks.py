"""Which runs of repeated blocks an imported ONNX graph has for ``roll_repeats`` to loop
(``dml_jax.graph.rolling``; issue 42, the first-call goal): the runs the session's program
rolls, as blocks of steps times repeats, and how many of the steps the graph evaluates they
cover.

Usage: ``PYTHONPATH=. python benchmarks/experiments/repeated_blocks.py [MODEL.onnx ...]
[--batch 1]`` (by default ONNX's light ResNet-50, DenseNet-121 and Inception v2 from the onnx
package's test data); a free first dimension of the first input is fixed to ``--batch``.
Figures: the README beside this file.
"""

from __future__ import annotations

import argparse
import os

import onnx

from dml_jax.onnx import compile_onnx


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    light = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    names = ("resnet50", "densenet121", "inception_v2")
    p.add_argument(
        "models", nargs="*", default=[os.path.join(light, f"light_{n}.onnx") for n in names]
    )
    p.add_argument("--batch", type=int, default=1)
    a = p.parse_args()
    print("model | steps in runs / all | runs (steps x repeats)")
    for path in a.models:
        model = onnx.load(path)
        dim = model.graph.input[0].type.tensor_type.shape.dim
        if dim and not dim[0].dim_value:
            dim[0].dim_value = a.batch
        graph = compile_onnx(model, roll_repeats=True).graph
        steps = len(set(graph.order) - set(graph.desc.constant_nodes))
        runs = graph.rolled
        covered = sum(r.period * r.repeats for r in runs)
        print(f"{os.path.basename(path)} | {covered} / {steps} | "
              f"{', '.join(f'{r.period} x {r.repeats}' for r in runs) or '-'}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
