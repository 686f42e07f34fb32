"""Issue 64's float32 acceptance on the CPU (no GPU needed): each decode suite model (GPT-2
small, the 8-layer LLaMA-style GQA model, the 1B-class LLaMA), random weights, exported in float32
by PyTorch's exporter with its past key/values (``dml_jax.bench.decoders``); its greedy tokens
through ``Generator`` (the decode suite's ``dml_generation``) against PyTorch's own greedy
decode with its cache, 64 steps after the suite's prompt (16 tokens drawn as the suite draws
them). Reports, per model, how many of the 64 tokens agree before the first that does not (the
suite's ``fp32`` column), the export's and the generation's seconds.

The PyTorch model is dropped before the session is made (the 1B model's float32 weights are
5 GB, each copy of them).

Usage: ``PYTHONPATH=. python3 benchmarks/experiments/decode_fp32_cpu.py [--only gpt2 llama_8l
llama_1b] [--steps 64]``; ``$OUT/decode_fp32.json`` when ``OUT`` is set.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import tempfile
import time

import numpy as np


def check(name: str, steps: int, prompt_length: int) -> dict:
    import torch

    from dml_jax.bench import decoders
    from dml_jax.bench.suites.decode import dml_generation
    from dml_jax.onnx import InferenceSession

    rng = np.random.default_rng(0)  # the suite's draw
    model = decoders.build(name)
    prompt = rng.integers(1, model.config.vocab_size, size=(1, prompt_length))
    row: dict = {"model": name, "steps": steps}
    t = time.perf_counter()
    with torch.inference_mode():
        want = decoders.greedy(model, prompt, steps)
    row["torch_s"] = round(time.perf_counter() - t, 1)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "fp32.onnx")
        t = time.perf_counter()
        decoders.export(model, path)
        row["export_s"] = round(time.perf_counter() - t, 1)
        del model
        gc.collect()
        t = time.perf_counter()
        got = dml_generation(InferenceSession(path), prompt, steps)[0]
        row["generate_s"] = round(time.perf_counter() - t, 1)
    row["fp32_equal_tokens"] = int((got == want).all(axis=0).cumprod().sum())
    row["tokens_equal"] = int((got == want).sum())
    return row


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--only", nargs="*", default=["gpt2", "llama_8l", "llama_1b"])
    p.add_argument("--steps", type=int, default=64)
    p.add_argument("--prompt", type=int, default=16)
    a = p.parse_args()
    rows = []
    for name in a.only:
        row = check(name, a.steps, a.prompt)
        print(json.dumps(row), flush=True)
        rows.append(row)
        gc.collect()
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "decode_fp32.json"), "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
