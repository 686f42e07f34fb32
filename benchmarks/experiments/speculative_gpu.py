"""Speculative decoding by n-grams (``GeneratorParams.ngram_size``; ``dml_jax/onnx/speculative.py``)
on a GPU: what a round costs against a decode step, and what the drafts give.

The 1B-class LLaMA (``dml_jax.bench.decoders``) exported in float16, generated at batch 1 by
``Generator.generate_until_done``, greedy, without drafts (runs of ``steps_per_dispatch`` steps a
dispatch, no sync between them) and with ``ngram_size`` 2 and 3 and ``max_draft_tokens`` 4 and 8
(a sync a round). Random weights do not copy spans of their prompt as a real model does when it
edits code or quotes a document, so two prompts are timed: ``random`` (random ids: drafts only
where the model falls into a loop) and ``echo`` (the prompt is a random prompt followed by the
model's own greedy continuation of it, twice over, so that the continuation it now generates
is likely to repeat spans it has seen). Per configuration: ms a generated token (median of
``--samples`` generations after one that compiles, each synced at its end), the drafts
accepted of those proposed, the model's calls a token, and whether the tokens equal those
without drafts.

Usage: ``PYTHONPATH=. python3 benchmarks/experiments/speculative_gpu.py [--model llama_1b]
[--new 128] [--samples 3]``; ``--onnx STEP.onnx`` times an existing step (on this CPU:
``tests/data/decoders/tiny_llama_step.onnx``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import numpy as np


def _run(session, prompt, new: int, samples: int, **options):
    from dml_jax.onnx.generation import Generator, GeneratorParams

    times, tokens, stats = [], None, None
    for k in range(samples + 1):  # the first compiles
        g = Generator(session, GeneratorParams(session, max_length=len(prompt) + new, **options))
        g.append_tokens([prompt])
        g.get_next_tokens()  # (the prefill done: a sync)
        t0 = time.perf_counter()
        g.generate_until_done()
        tokens = g.generated[0]  # (a sync)
        if k:
            times.append((time.perf_counter() - t0) / (len(tokens) - 1) * 1e3)
        stats = g.get_speculative_stats()
    return tokens, times, stats


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="llama_1b")
    p.add_argument("--onnx", default=None, help="an existing step (no PyTorch side)")
    p.add_argument("--new", type=int, default=128)
    p.add_argument("--prompt", type=int, default=32)
    p.add_argument("--samples", type=int, default=3)
    p.add_argument("--configs", nargs="*", default=["2x4", "3x4", "2x8"], help="NGRAMxDRAFTS")
    a = p.parse_args()

    import jax

    from dml_jax.onnx import InferenceSession
    from dml_jax.onnx.generation import generate

    print(jax.devices()[0].device_kind, jax.__version__, flush=True)
    if a.onnx:
        session, vocab = InferenceSession(a.onnx), 64
    else:
        from dml_jax.bench import decoders

        model = decoders.build(a.model).half().to("cuda").eval()
        vocab = model.config.vocab_size
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "fp16.onnx")
            decoders.export(model, path, device="cuda")
            del model
            session = InferenceSession(path)
    start = np.random.default_rng(0).integers(1, vocab, a.prompt).tolist()
    echo = start + generate(session, [start], max_new_tokens=a.prompt)[0].tolist()
    echo = echo + echo
    for name, prompt in (("random", start), ("echo", echo)):
        want, times, _ = _run(session, prompt, a.new, a.samples)
        base = statistics.median(times)
        print(f"{name} prompt ({len(prompt)} tokens), {a.new} new: without drafts "
              f"{base:.3f} ms a token ({min(times):.3f}-{max(times):.3f})", flush=True)  # fmt: skip
        for config in a.configs:
            ngram, drafts = map(int, config.split("x"))
            tokens, times, stats = _run(session, prompt, a.new, a.samples, ngram_size=ngram,
                                        max_draft_tokens=drafts)  # fmt: skip
            med = statistics.median(times)
            calls = stats["target_forward_passes"] / max(stats["tokens_emitted"], 1)
            print(
                f"  ngram {ngram}, drafts {drafts}: {med:.3f} ms a token "
                f"({min(times):.3f}-{max(times):.3f}; x{base / med:.2f}), accepted "
                f"{stats['draft_tokens_accepted']} of {stats['draft_tokens_proposed']}, "
                f"{stats['rounds']} rounds and {stats['standard_fallback_steps']} steps, "
                f"{calls:.2f} model calls a token, tokens equal {np.array_equal(tokens, want)}",
                flush=True,
            )


if __name__ == "__main__":
    main()
