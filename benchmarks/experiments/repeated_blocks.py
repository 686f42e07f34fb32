"""Runs of identical consecutive blocks in an imported ONNX graph: where rolling them into one
loop (``rolled_blocks_gpu.py``) could apply (issue 42, the first-call goal).

Each node the graph's tracing evaluates (constant data nodes left out, in ``plan.order``) gets a
signature: its desc, and for each input where it comes from (a graph input, a constant, or an
earlier node's output at a distance back in the order, with the view it is read through). A
run is a stretch of the order that repeats a block of P nodes r >= 2 times with equal
signatures; runs are taken greedily from the front, the longest (r x P) first, at least 8
nodes, blocks of at most ``MAX_PERIOD`` nodes. This finds candidates only: a loop also needs every read between blocks to come from
the block just before, and no value of a block but the last read after the run.

Usage: ``PYTHONPATH=. python benchmarks/experiments/repeated_blocks.py [MODEL.onnx ...]
[--batch 64]`` (by default ONNX's light ResNet-50, DenseNet-121 and Inception v2 from the
onnx package's test data); a free first dimension of the first input is fixed to ``--batch``.
Figures: the README beside this file.
"""

from __future__ import annotations

import argparse
import os

import onnx

from dml_jax import FeatureLevel
from dml_jax.graph.validation import validated_plan
from dml_jax.onnx import compile_onnx

MAX_PERIOD = 300  # the longest block looked for, in nodes


def runs(path: str, batch: int) -> tuple[int, list[tuple[int, int, int]]]:
    """How many nodes the graph evaluates, and its runs as (start, period, repeats)."""
    model = onnx.load(path)
    dim = model.graph.input[0].type.tensor_type.shape.dim
    if dim and not dim[0].dim_value:
        dim[0].dim_value = batch
    graph = compile_onnx(model).imported.graph
    plan = validated_plan(graph, max(FeatureLevel), True)
    constants = set(graph.constant_nodes)
    order = [n for n in plan.order if n not in constants]
    at = {n: i for i, n in enumerate(order)}

    def signature(i: int) -> tuple:
        sources = []
        for s in plan.sources[order[i]]:
            if s[0] in ("input", "constant") or s[1] in constants:
                sources.append((s[0], repr(s[2:])) if s[0] == "constant" else (s[0],))
            else:
                sources.append(("node", i - at[s[1]], s[2], repr(s[3:])))
        return repr(graph.nodes[order[i]]), tuple(sources)

    ids: dict[tuple, int] = {}
    code = [ids.setdefault(signature(i), len(ids)) for i in range(len(order))]
    found, i = [], 0
    while i < len(code):
        best = (0, 0)
        for period in range(2, min(MAX_PERIOD, (len(code) - i) // 2) + 1):
            if code[i + period] != code[i]:
                continue
            r = 1
            while code[i + r * period : i + (r + 1) * period] == code[i : i + period]:
                r += 1
            if r >= 2 and r * period > best[0] * best[1]:
                best = (r, period)
        if best[0] * best[1] >= 8:
            found.append((i, best[1], best[0]))
            i += best[0] * best[1]
        else:
            i += 1
    return len(order), found


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    light = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    default = [os.path.join(light, f"light_{n}.onnx") for n in ("resnet50", "densenet121",
                                                                 "inception_v2")]  # fmt: skip
    p.add_argument("models", nargs="*", default=default)
    p.add_argument("--batch", type=int, default=64)
    a = p.parse_args()
    print("model | nodes | in runs | runs (start, period, repeats)")
    for path in a.models:
        count, found = runs(path, a.batch)
        covered = sum(period * r for _, period, r in found)
        print(f"{os.path.basename(path)} | {count} | {covered} | {found}", flush=True)


if __name__ == "__main__":
    main()
