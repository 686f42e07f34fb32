"""Beam search's cost a token (issue 64; ``GeneratorParams.num_beams``, ``dml_jax/onnx/beams.py``):
the 1B-class LLaMA (``dml_jax.bench.decoders``) exported in float16, generated at batch 1 by
``Generator.generate_until_done`` with 1 (greedy), 2 and 4 beams, against Hugging Face's
``generate`` on the same PyTorch model with the same beams. End tokens are kept out until the
last step on both sides (``min_length`` / ``min_new_tokens``), so every hypothesis has the same
length and both rank them by their sums of log-probabilities alone: the best sequences should
then agree (float16 may flip near ties: the fraction of equal tokens is printed).

Per beam count: milliseconds a generated token of the prompt (median of ``--samples``
generations after one to compile, a sync at the end of each), and the fraction of tokens equal
to PyTorch's best sequence.

Usage: ``PYTHONPATH=. python3 benchmarks/experiments/beams_gpu.py [--model llama_1b] [--new 48]
[--beams 1 2 4] [--samples 3]``; ``--onnx STEP.onnx`` times an existing step without PyTorch
(on this CPU: ``tests/data/decoders/tiny_llama_step.onnx``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import numpy as np


def _ours(session, prompt, new: int, beams: int, eos: int | None, samples: int):
    from dml_jax.onnx.generation import Generator, GeneratorParams

    length = prompt.shape[1] + new
    options = {"num_beams": beams, "eos_token_id": eos, "min_length": length if eos else 0}
    times, tokens = [], None
    for k in range(samples + 1):  # the first compiles
        g = Generator(session, GeneratorParams(session, max_length=length, **options))
        t0 = time.perf_counter()
        g.append_tokens(prompt)
        g.generate_until_done()
        tokens = g.generated  # (a sync)
        if k:
            times.append((time.perf_counter() - t0) / new * 1e3)
    return tokens[0], times


def _pytorch(model, prompt, new: int, beams: int, samples: int):
    import torch

    ids = torch.tensor(prompt, device="cuda")
    times, out = [], None
    with torch.inference_mode():
        for k in range(samples + 1):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = model.generate(ids, num_beams=beams, max_new_tokens=new, min_new_tokens=new,
                                 do_sample=False, num_return_sequences=1)  # fmt: skip
            torch.cuda.synchronize()
            if k:
                times.append((time.perf_counter() - t0) / new * 1e3)
    return out[0, prompt.shape[1] :].cpu().numpy(), times


def _line(name: str, times: list) -> str:
    return f"{name} {statistics.median(times):.3f} ms a token ({min(times):.3f}-{max(times):.3f})"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="llama_1b")
    p.add_argument("--onnx", default=None, help="an existing step (no PyTorch side)")
    p.add_argument("--new", type=int, default=48)
    p.add_argument("--prompt", type=int, default=16)
    p.add_argument("--beams", type=int, nargs="*", default=[1, 2, 4])
    p.add_argument("--samples", type=int, default=3)
    a = p.parse_args()

    import jax

    from dml_jax.onnx import InferenceSession

    print(jax.devices()[0].device_kind, jax.__version__)
    model, eos = None, None
    if a.onnx:
        session, vocab = InferenceSession(a.onnx), 64
    else:
        from dml_jax.bench import decoders

        model = decoders.build(a.model).half().to("cuda").eval()
        eos, vocab = model.config.eos_token_id, model.config.vocab_size
        eos = eos[0] if isinstance(eos, list) else eos
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "fp16.onnx")
            decoders.export(model, path, device="cuda")
            session = InferenceSession(path)
    prompt = np.random.default_rng(0).integers(1, vocab, (1, a.prompt))
    for beams in a.beams:
        tokens, times = _ours(session, prompt, a.new, beams, eos, a.samples)
        line = _line(f"{beams} beam{'s' if beams > 1 else ''}: dml_jax", times)
        if model is not None:
            want, torch_times = _pytorch(model, prompt, a.new, beams, a.samples)
            same = float(np.mean(tokens[: len(want)] == want))
            line += f"; {_line('PyTorch', torch_times)}; tokens equal {same:.3f}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
