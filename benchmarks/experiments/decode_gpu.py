"""Greedy decode on a GPU: dml_jax's ``Generator`` over a decoder step exported from PyTorch
(``dml_jax.bench.decoders``) against PyTorch eager with its own cache, same weights, same prompt.

For each model and batch: time to first token (the prefill, synced), decode tokens/s (every new
token of every row over the decode time, one sync at the end), the programs compiled, and the
roofline (the weights' and the mean cache's bytes per step over the copy bandwidth measured on
the card). dml_jax is timed twice: ``generate_until_done`` (one dispatch per bucket) and one
``generate_next_token`` a token (the onnxruntime-genai loop); each after a warm-up generation
that compiled its programs. Agreement: the fraction of generated tokens equal to PyTorch's, and
with ``--fp32`` the float32 export's greedy tokens against PyTorch's float32 tokens.

Usage (the GPU machine, repository root)::

    PYTHONPATH=. python3 benchmarks/experiments/decode_gpu.py --models gpt2 llama_8l \\
        --batch 1 8 --prompt 16 --new 128 --out bench_out/decode.json
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import numpy as np


def bandwidth(torch) -> float:
    """Bytes read and written per second by a 1 GiB device copy."""
    a = torch.empty(2**30, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(10):
        b.copy_(a)
    torch.cuda.synchronize()
    return 2 * 2**30 * 10 / (time.perf_counter() - t)


def torch_greedy(torch, model, prompt, new):
    """PyTorch eager's greedy loop with its own cache: (tokens, ttft_s, decode_s)."""
    ids = torch.as_tensor(prompt, device="cuda")
    out = []
    with torch.inference_mode():
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        r = model(input_ids=ids, use_cache=True)
        x = r.logits[:, -1].argmax(-1, keepdim=True)
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        cache = r.past_key_values
        out.append(x)
        for _ in range(new - 1):
            r = model(input_ids=x, past_key_values=cache, use_cache=True)
            cache = r.past_key_values
            x = r.logits[:, -1].argmax(-1, keepdim=True)
            out.append(x)
        torch.cuda.synchronize()
        t2 = time.perf_counter()
    return torch.cat(out, 1).cpu().numpy(), t1 - t0, t2 - t1


def dml_greedy(session, prompt, new, per_token=False):
    """dml_jax's greedy generation: (tokens, ttft_s, decode_s, compiles)."""
    import jax

    from dml_jax.onnx.generation import Generator, GeneratorParams

    batch, length = prompt.shape
    g = Generator(session, GeneratorParams(session, max_length=length + new, batch_size=batch))
    t0 = time.perf_counter()
    g.append_tokens(prompt)
    jax.block_until_ready(g._tokens)
    t1 = time.perf_counter()
    if per_token:
        while not g.is_done():
            g.generate_next_token()
    else:
        g.generate_until_done()
    jax.block_until_ready(g._tokens)
    t2 = time.perf_counter()
    return g.generated, t1 - t0, t2 - t1, g.compiles


def new_shape_cost(session, past: int) -> dict:
    """Seconds a new past length costs ``run``: import (and optimize and validate), trace and
    lower, XLA compile."""
    import jax

    names = [i.name for i in session.get_inputs()]
    shapes = []
    cache = next(i for i in session.get_inputs() if i.name.endswith("key")).shape
    for n in names:
        if n in ("input_ids", "position_ids"):
            shapes.append((1, 1))
        elif n == "attention_mask":
            shapes.append((1, past + 1))
        else:
            shapes.append((1, cache[1], past, cache[3]))
    t0 = time.perf_counter()
    program = session.program(shapes)
    t1 = time.perf_counter()
    args = [jax.ShapeDtypeStruct(s, np.int32 if len(s) == 2 else np.float16) for s in shapes]
    params = session._run_params(program)
    lowered = program.jitted_on(session._device).lower(params, *args)
    t2 = time.perf_counter()
    lowered.compile()
    t3 = time.perf_counter()
    return {"import_s": t1 - t0, "trace_lower_s": t2 - t1, "compile_s": t3 - t2}


def write_hlo(session, batch: int, folder: str, name: str, dtype=np.float16) -> None:
    """The optimized HLO of the compiled decode step at past length 64 (its launches counted
    in the file's first line)."""
    import re

    steps = next(iter(session._decode_steps.values()))
    fn, program = steps._step_fn(batch, 64)
    cache = steps._cache_shape(batch, 256)
    pending = steps._cache_shape(batch, 1)
    state = (
        [np.zeros(cache, dtype)] * (2 * steps.roles.layers),
        [np.zeros(pending, dtype)] * (2 * steps.roles.layers),
        np.ones((batch, 256), np.int32),
        np.ones((batch, 256), np.int32),
        np.zeros((batch,), bool),
        np.zeros((2,), np.uint32),
    )
    text = fn.lower(steps._params_for(program), state, np.int32(65)).compile().as_text()
    entry = text[text.index("ENTRY") :]
    kinds = re.findall(r"= \S+ (fusion|custom-call|copy|dynamic-update-slice|gather)\(", entry)
    counts = {k: kinds.count(k) for k in set(kinds)}
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"{name}.hlo.txt"), "w") as f:
        f.write(f"# launches in ENTRY: {counts}\n{text}")
    print(name, "launches in the step:", counts, flush=True)


def prefill_agreement(session, prompt, want) -> float:
    """The largest difference of the session's prefill logits from PyTorch's, over PyTorch's
    largest magnitude."""
    feed = {"input_ids": prompt, "attention_mask": np.ones_like(prompt)}
    feed["position_ids"] = np.broadcast_to(np.arange(prompt.shape[1]), prompt.shape).copy()
    for i in session.get_inputs():
        if i.name.startswith("past"):
            feed[i.name] = np.zeros((prompt.shape[0], i.shape[1], 0, i.shape[3]), np.float16)
    got = session.run(["logits"], feed)[0].astype(np.float32)
    return float(np.abs(got - want).max() / np.abs(want).max())


def main() -> None:
    import torch

    from dml_jax.bench import decoders
    from dml_jax.onnx import InferenceSession

    p = argparse.ArgumentParser()
    p.add_argument("--models", nargs="*", default=["gpt2", "llama_8l"])
    p.add_argument("--batch", nargs="*", type=int, default=[1, 8])
    p.add_argument("--prompt", type=int, default=16)
    p.add_argument("--new", type=int, default=128)
    p.add_argument("--fp32", action="store_true", help="also the float32 tokens check")
    p.add_argument("--out", default="")
    p.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="NAME:OPT=VAL,...",
        help="a session configuration by its XLA options (';' between options); repeatable",
    )
    p.add_argument("--hlo", default="", help="a folder for the optimized HLO of one step")
    args = p.parse_args()
    configs = {"default": {}}
    for c in args.config:
        name, _, opts = c.partition(":")
        configs[name] = dict(o.split("=", 1) for o in opts.split(";") if o)
    bw = bandwidth(torch)
    report = {"card": torch.cuda.get_device_name(), "copy_bytes_per_s": bw, "rows": []}
    print(f"{report['card']}: copy {bw / 1e12:.2f} TB/s", flush=True)
    rng = np.random.default_rng(0)
    for name in args.models:
        model = decoders.build(name)
        vocab = model.config.vocab_size
        with tempfile.TemporaryDirectory() as tmp:
            if args.fp32:
                path = os.path.join(tmp, "fp32.onnx")
                decoders.export(model, path)
                s = InferenceSession(path)
                prompt = rng.integers(1, vocab, size=(1, args.prompt))
                want = decoders.greedy(model, prompt, 64)
                got = dml_greedy(s, prompt, 64)[0]
                eq = int((got == want).all(axis=0).cumprod().sum())
                print(f"{name} float32: {eq} of 64 greedy tokens equal PyTorch's", flush=True)
                report["rows"].append({"model": name, "dtype": "float32", "equal_tokens": eq})
                del s
            half = model.half().cuda()
            path = os.path.join(tmp, "fp16.onnx")
            t = time.perf_counter()
            decoders.export(half, path, device="cuda")
            export_s = time.perf_counter() - t
            weights = sum(p.numel() * p.element_size() for p in half.parameters())
            refs = {}
            for batch in args.batch:
                prompt = rng.integers(1, vocab, size=(batch, args.prompt))
                torch_greedy(torch, half, prompt, args.new)
                refs[batch] = (prompt, *torch_greedy(torch, half, prompt, args.new))
                with torch.inference_mode():
                    logits = half(input_ids=torch.as_tensor(prompt, device="cuda")).logits
                refs[batch] += (logits.float().cpu().numpy(),)
            for config, options in configs.items():
                t = time.perf_counter()
                s = InferenceSession(path, compiler_options=options)
                session_s = time.perf_counter() - t
                for batch in args.batch:
                    prompt, ref, tttft, tdec, logits = refs[batch]
                    row = {"model": name, "config": config, "dtype": "float16", "batch": batch,
                           "prompt": args.prompt, "new": args.new, "export_s": export_s,
                           "session_s": session_s}  # fmt: skip
                    t = time.perf_counter()
                    dml_greedy(s, prompt, args.new)
                    dml_greedy(s, prompt, args.new, per_token=True)
                    row["warmup_s"] = time.perf_counter() - t
                    if batch == args.batch[0]:
                        row["new_shape"] = new_shape_cost(s, args.prompt + 37)
                    tok, ttft, dec, compiles = dml_greedy(s, prompt, args.new)
                    tok1, _, dec1, _ = dml_greedy(s, prompt, args.new, per_token=True)
                    row["programs"] = compiles
                    if args.hlo and batch == args.batch[0]:
                        write_hlo(s, batch, args.hlo, f"{name}_{config}")
                    row["logits_rel_err"] = prefill_agreement(s, prompt, logits)
                    steps = args.new - 1
                    shape = decoders.cache_shape(half, batch, args.prompt + args.new // 2)
                    cache = 2 * decoders.layer_count(half) * int(np.prod(shape)) * 2
                    row.update(
                        ttft_ms=ttft * 1e3,
                        torch_ttft_ms=tttft * 1e3,
                        tok_s=batch * steps / dec,
                        tok_s_per_token_loop=batch * steps / dec1,
                        torch_tok_s=batch * steps / tdec,
                        x_eager=tdec / dec,
                        roofline_tok_s=batch * bw / (weights + cache),
                        same_tokens=float((tok == ref).mean()),
                        loops_agree=bool((tok == tok1).all()),
                    )
                    row["of_roofline"] = row["tok_s"] / row["roofline_tok_s"]
                    print(json.dumps(row), flush=True)
                    report["rows"].append(row)
                del s
        del model, half
        torch.cuda.empty_cache()
    if args.out:
        os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
