"""The past right-aligned in its bucket (``padding_probe.padded_side`` "front", sliding windows)
against the cache's own layout (padding after the past, in place) on a GPU, at the 1B-class
decoder's size: what the probe costs on a real export and what reading the right-aligned past
costs a step.

Two float16 exports of the 1B-class LLaMA configuration (``dml_jax.bench.decoders``'s
``llama_1b``), random weights: LLaMA itself, and the same sizes as a Mistral with a sliding
window of ``--window`` positions (the same weights, seed 0), which the probe sends to the
front layout once a bucket reaches the window. For each: the side the probe chose at the
cache's capacity and the probe's seconds (evaluated again, on the host), then the Generator's
greedy loop at batch 1 (``generate_until_done``, a sync at its end), ms a token (median of
``--samples`` after one that compiles), its programs, and how many of PyTorch's own greedy
tokens (float16, its own cache) it matched before the first difference (near ties in float16
may part them).

Usage: ``PYTHONPATH=. python3 benchmarks/experiments/sliding_window_gpu.py [--new 128]
[--prompt 16] [--samples 3] [--window 64]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import numpy as np


def _build(window: int | None):
    import torch
    import transformers

    from dml_jax.bench import decoders

    _, cfg = decoders.CONFIGS["llama_1b"]
    torch.manual_seed(0)
    if window:
        config = transformers.MistralConfig(**cfg, sliding_window=window)
        model = transformers.MistralForCausalLM(config)
    else:
        config = transformers.LlamaConfig(**cfg)
        model = transformers.LlamaForCausalLM(config)
    config._attn_implementation = "eager"
    return model.half().to("cuda").eval()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--new", type=int, default=128)
    p.add_argument("--prompt", type=int, default=16)
    p.add_argument("--samples", type=int, default=3)
    p.add_argument("--window", type=int, default=64)
    a = p.parse_args()

    import jax

    from dml_jax.bench import decoders
    from dml_jax.onnx import InferenceSession
    from dml_jax.onnx.generation import Generator, GeneratorParams
    from dml_jax.onnx.padding_probe import padded_side
    from dml_jax.onnx.roles import roles_of

    print(jax.devices()[0].device_kind, jax.__version__, flush=True)
    for label, window in (("llama", None), (f"mistral window {a.window}", a.window)):
        model = _build(window)
        prompt = np.random.default_rng(0).integers(1, model.config.vocab_size, (1, a.prompt))
        want = decoders.greedy(model, prompt, a.new, device="cuda")[0]
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "fp16.onnx")
            decoders.export(model, path, device="cuda")
            del model
            session = InferenceSession(path)
            params = GeneratorParams(session, max_length=a.prompt + a.new)
            times, tokens, g = [], None, None
            for k in range(a.samples + 1):  # the first compiles
                g = Generator(session, params)
                g.append_tokens(prompt)
                if k == 0:  # the probe again, its answers found at append_tokens dropped
                    session.__dict__.pop("_padding_moves", None)
                    t0 = time.perf_counter()
                    side = padded_side(session, roles_of(session), g.capacity)
                    probe_s = time.perf_counter() - t0
                g.get_next_tokens()
                t0 = time.perf_counter()
                g.generate_until_done()
                tokens = g.generated[0]
                if k:
                    times.append((time.perf_counter() - t0) / (len(tokens) - 1) * 1e3)
            same = int(np.argmin(np.r_[tokens == want[: len(tokens)], False]))
            print(
                f"{label}: side {side} at {g.capacity} positions (probe {probe_s:.2f} s), "
                f"{statistics.median(times):.3f} ms a token "
                f"({min(times):.3f}-{max(times):.3f}), {g.compiles} programs, PyTorch's first "
                f"{same} of {len(tokens)} tokens",
                flush=True,
            )
            print("  " + g.explain().splitlines()[-1][:300], flush=True)


if __name__ == "__main__":
    main()
