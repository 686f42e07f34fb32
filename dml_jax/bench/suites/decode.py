"""The decode suite: greedy generation through ``dml_jax.onnx.Generator`` over a decoder step
exported from PyTorch (``dml_jax.bench.decoders``: GPT-2 small, an 8-layer LLaMA-style model
with grouped-query attention, a 1B-class LLaMA), against PyTorch eager with its own cache and
``torch.compile`` with a static cache, same weights, same prompts, same card.

Per model and batch (``--batch``, 1 and 8), float16, a prompt of ``--prompt`` tokens and
``--new`` new ones:

- **tokens/s** of the decode (every new token of every row over the time after the first
  token, one sync at the end), for dml_jax's ``generate_until_done`` (``dml``: steps queued
  ahead of the device), its ``generate_next_token`` loop (``dml per token``: onnxruntime-genai's
  loop, ``is_done()`` asked at every token),
  the onnxruntime-style loop (``dml run()``: ``run`` once a token, presents fed back as pasts,
  host arrays in and out), the same loop through IOBinding (``dml bound``: the cache and the
  argmax on the device, the token alone copied back), PyTorch eager with its ``DynamicCache`` (``eager``) and
  ``transformers``' ``generate`` with a static cache under ``torch.compile``
  (``compile static``, mode ``reduce-overhead``: CUDA graphs) where it runs. Generations are
  sampled in turn (``--samples`` rounds, at least 5), the median and p10-p90 reported, and the
  ratios (``x_eager``, ``x_compile``) as the median of the rounds' ratios with their spread.
- **time to first token** (the prefill, synced) of dml_jax and PyTorch eager; dml_jax's compile
  (``warmup_s``: its first generation, which compiles the prefill and then every bucket's
  step side by side, ``Generator.compile_ahead``) apart.
- **programs** the generation compiled, and ``new_programs_after_warmup``: the programs a
  second generation over ``--long`` positions compiled after a first one did (0: bounded by the
  buckets); ``run_new_programs``: the same for the ``run`` loop.
- **cache bytes** held by the generator's cache buffers; the **roofline**: the card's copy
  bandwidth (measured in the run) over the bytes a step must read (the weights and the mean
  cache), and ``of_roofline``, dml_jax's tokens/s over it.
- **agreement**: the fraction of float16 greedy tokens equal to PyTorch eager's, the prefill
  logits' relative difference, and (``--fp32``, on by default off ``--quick``) the float32
  export's greedy tokens against PyTorch's float32 tokens (``fp32_equal_tokens`` of 64).
- ``--int4``: the 1B-class model's float16 export with its MatMuls quantized to 4 bits in
  blocks of 32 (``decoders.quantize_int4``: MatMulNBits as onnxruntime's quantizer writes
  them), its tokens/s over the float16 export's.

Needs torch and transformers on a GPU. Without them (``--quick`` on any machine) the suite
runs the tiny committed decoders (tests/data/decoders) and checks their greedy tokens against
the PyTorch tokens stored beside them.
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
import time
from typing import Any

import numpy as np

from ..harness import ROOT, Run, error_text, ratio, summary

MODELS = ("gpt2", "llama_8l", "llama_1b")
MIN_ROUNDS = 5
FIXTURES = ROOT / "tests" / "data" / "decoders"
# PyTorch's models and tensors go to the first GPU by name: "cuda" is the current device,
# which XLA's runtime sets as it starts each GPU (on two GPUs the second one was current, and
# the eager loop read input ids on one GPU with weights on the other).
TORCH_DEVICE = "cuda:0"


def add_arguments(p: Any) -> None:
    p.add_argument("--only", nargs="*", default=None, help=f"models (default: {MODELS})")
    p.add_argument("--batch", nargs="*", type=int, default=[1, 8], help="batch sizes")
    p.add_argument("--prompt", type=int, default=16, help="prompt tokens")
    p.add_argument("--new", type=int, default=128, help="new tokens per generation")
    p.add_argument(
        "--long", type=int, default=2048, help="positions of the programs-after-warm-up check"
    )
    p.add_argument("--no-fp32", dest="fp32", action="store_false", help="no float32 check")
    p.add_argument("--no-compile", dest="compile", action="store_false", help="no torch.compile")
    p.add_argument("--int4", action="store_true", help="the 1B model quantized to 4 bits too")
    p.add_argument(
        "--devices", type=int, default=1,
        help="N > 1: also the float16 decode on a 'model' mesh of N devices against one",
    )  # fmt: skip


def bandwidth(torch: Any) -> float:
    """Bytes read and written per second by a 1 GiB device copy."""
    a = torch.empty(2**30, dtype=torch.uint8, device=TORCH_DEVICE)
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    torch.cuda.synchronize(TORCH_DEVICE)
    t = time.perf_counter()
    for _ in range(10):
        b.copy_(a)
    torch.cuda.synchronize(TORCH_DEVICE)
    return 2 * 2**30 * 10 / (time.perf_counter() - t)


def dml_generation(
    session: Any,
    prompt: np.ndarray,
    new: int,
    per_token: bool = False,
    steps: int | None = None,
    buckets: Any = None,
):
    """dml_jax's greedy generation (``steps``: ``GeneratorParams.steps_per_dispatch``, None its
    default; ``buckets``: ``GeneratorParams.buckets``, None its default): (tokens,
    ttft_s, decode_s, generator); the steps' compiles (``Generator.compile_ahead``, the first
    generation's) are in neither time."""
    import jax

    from dml_jax.onnx.generation import Generator, GeneratorParams

    batch, length = prompt.shape
    options = {} if steps is None else {"steps_per_dispatch": steps}
    options.update({} if buckets is None else {"buckets": buckets})
    g = Generator(
        session, GeneratorParams(session, max_length=length + new, batch_size=batch, **options)
    )
    t0 = time.perf_counter()
    g.append_tokens(prompt)
    jax.block_until_ready(g._tokens)
    first = time.perf_counter() - t0
    g.compile_ahead()  # the first generation's step compiles, side by side; later ones: none
    t1 = time.perf_counter()
    if per_token:
        while not g.is_done():
            g.generate_next_token()
    else:
        g.generate_until_done()
    jax.block_until_ready(g._tokens)
    return g.generated, first, time.perf_counter() - t1, g


def run_loop(session: Any, prompt: np.ndarray, new: int):
    """The onnxruntime-style loop: ``run`` once a token, the presents fed back as pasts, the
    next token the logits' argmax on the host: (tokens, ttft_s, decode_s)."""
    batch, length = prompt.shape
    inputs = {i.name: i for i in session.get_inputs()}
    pasts = [n for n in inputs if n.startswith("past")]
    key = inputs[pasts[0]].shape
    dtype = np.float16 if "float16" in inputs[pasts[0]].type else np.float32
    feed = {"input_ids": prompt, "attention_mask": np.ones((batch, length), np.int64)}
    if "position_ids" in inputs:
        feed["position_ids"] = np.broadcast_to(np.arange(length), prompt.shape).copy()
    for n in pasts:
        feed[n] = np.zeros((batch, key[1], 0, key[3]), dtype)
    outputs = [o.name for o in session.get_outputs()]
    tokens = []
    t0 = time.perf_counter()
    for k in range(new):
        out = dict(zip(outputs, session.run(None, feed)))
        x = out["logits"][:, -1].argmax(-1)[:, None]
        tokens.append(x)
        if k == 0:
            t1 = time.perf_counter()
        total = length + k + 1
        feed = {"input_ids": x, "attention_mask": np.ones((batch, total), np.int64)}
        if "position_ids" in inputs:
            feed["position_ids"] = np.full((batch, 1), total - 1)
        for n in pasts:
            feed[n] = out[n.replace("past_key_values", "present")]
    return np.concatenate(tokens, 1), t1 - t0, time.perf_counter() - t1


def bound_loop(session: Any, prompt: np.ndarray, new: int):
    """``run_loop`` through onnxruntime's IOBinding (Optimum's loop on CUDA): the inputs bound as
    OrtValues on the session's device, every output bound there, the presents fed back as the
    next step's pasts without leaving it, the next token the argmax of the logits on the device
    (as Optimum's loop takes it from its CUDA tensors), only the token copied to the host:
    (tokens, ttft_s, decode_s)."""
    from dml_jax.onnx import OrtValue

    device = "cpu" if session.get_providers()[0] == "CPUExecutionProvider" else "cuda"
    batch, length = prompt.shape
    inputs = {i.name: i for i in session.get_inputs()}
    pasts = [n for n in inputs if n.startswith("past")]
    key = inputs[pasts[0]].shape
    dtype = np.float16 if "float16" in inputs[pasts[0]].type else np.float32
    outputs = [o.name for o in session.get_outputs()]

    def value(x):
        return OrtValue.ortvalue_from_numpy(np.ascontiguousarray(x), device)

    feed = {"input_ids": value(prompt), "attention_mask": value(np.ones((batch, length), np.int64))}
    if "position_ids" in inputs:
        feed["position_ids"] = value(np.broadcast_to(np.arange(length), prompt.shape))
    for n in pasts:
        feed[n] = value(np.zeros((batch, key[1], 0, key[3]), dtype))
    tokens = []
    t0 = time.perf_counter()
    for k in range(new):
        binding = session.io_binding()
        for n, v in feed.items():
            binding.bind_ortvalue_input(n, v)
        for n in outputs:
            binding.bind_output(n, device)
        session.run_with_iobinding(binding)
        out = dict(zip(outputs, binding.get_outputs()))
        x = np.asarray(_last_argmax()(out["logits"].jax_array())).astype(np.int64)
        tokens.append(x)
        if k == 0:
            t1 = time.perf_counter()
        total = length + k + 1
        feed = {"input_ids": value(x), "attention_mask": value(np.ones((batch, total), np.int64))}
        if "position_ids" in inputs:
            feed["position_ids"] = value(np.full((batch, 1), total - 1))
        for n in pasts:
            feed[n] = out[n.replace("past_key_values", "present")]
    return np.concatenate(tokens, 1), t1 - t0, time.perf_counter() - t1


@functools.cache
def _last_argmax() -> Any:
    """A jitted function: the greedy next token of each row of ``logits`` {batch, sequence,
    vocabulary}, {batch, 1} (the first of equal maxima, as NumPy's)."""
    import jax
    import jax.numpy as jnp

    return jax.jit(lambda logits: jnp.argmax(logits[:, -1], -1)[:, None])


def torch_eager(torch: Any, model: Any, prompt: np.ndarray, new: int):
    """PyTorch eager's greedy loop with its own cache: (tokens, ttft_s, decode_s)."""
    ids = torch.as_tensor(prompt, device=TORCH_DEVICE)
    out = []
    with torch.inference_mode(), torch.cuda.device(TORCH_DEVICE):
        torch.cuda.synchronize(TORCH_DEVICE)
        t0 = time.perf_counter()
        r = model(input_ids=ids, use_cache=True)
        x = r.logits[:, -1].argmax(-1, keepdim=True)
        torch.cuda.synchronize(TORCH_DEVICE)
        t1 = time.perf_counter()
        cache = r.past_key_values
        out.append(x)
        for _ in range(new - 1):
            r = model(input_ids=x, past_key_values=cache, use_cache=True)
            cache = r.past_key_values
            x = r.logits[:, -1].argmax(-1, keepdim=True)
            out.append(x)
        torch.cuda.synchronize(TORCH_DEVICE)
    return torch.cat(out, 1).cpu().numpy(), t1 - t0, time.perf_counter() - t1


class CompiledStatic:
    """``transformers``' ``generate`` with a static cache, which compiles the model's forward
    itself (``torch.compile``, mode ``reduce-overhead``: CUDA graphs, full graph; its
    documented recipe, through ``CompileConfig``), leaving the model's own forward eager: the
    decode time is a generation of ``new`` tokens less one of a single token (the prefill)."""

    def __init__(self, torch: Any, model: Any):
        from transformers import CompileConfig

        self.torch = torch
        self.model = model
        self.config = CompileConfig(fullgraph=True, mode="reduce-overhead")

    def _generate(self, ids: Any, new: int) -> tuple[Any, float]:
        torch = self.torch
        torch.cuda.synchronize(TORCH_DEVICE)
        t = time.perf_counter()
        out = self.model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False,
                                  cache_implementation="static", compile_config=self.config,
                                  pad_token_id=0)  # fmt: skip
        torch.cuda.synchronize(TORCH_DEVICE)
        return out, time.perf_counter() - t

    def __call__(self, prompt: np.ndarray, new: int):
        ids = self.torch.as_tensor(prompt, device=TORCH_DEVICE)
        with self.torch.inference_mode(), self.torch.cuda.device(TORCH_DEVICE):
            _, first = self._generate(ids, 1)
            out, whole = self._generate(ids, new)
        return out[:, prompt.shape[1] :].cpu().numpy(), first, whole - first

    def close(self) -> None:
        self.torch._dynamo.reset()


def _quick(run: Run) -> None:
    """The committed tiny decoders, no PyTorch: greedy tokens against PyTorch's stored ones."""
    from dml_jax.onnx import InferenceSession

    reference = json.loads((FIXTURES / "decoders_greedy.json").read_text())
    for name, ref in reference.items():
        if run.args.only and name not in run.args.only:
            continue
        prompt = np.asarray(ref["prompt"])
        want = np.asarray(ref["greedy"])
        new = want.shape[1]
        row: dict = {"model": name, "dtype": "float32", "batch": int(prompt.shape[0])}
        try:
            session = InferenceSession(str(FIXTURES / f"{name}_step.onnx"))
            t = time.perf_counter()
            dml_generation(session, prompt, new)
            row["warmup_s"] = round(time.perf_counter() - t, 2)
            dml_generation(session, prompt, new, per_token=True)
            run_loop(session, prompt, new)
            bound_loop(session, prompt, new)
            calls = {
                "dml": lambda: dml_generation(session, prompt, new)[:3],
                "dml per token": lambda: dml_generation(session, prompt, new, True)[:3],
                "dml run()": lambda: run_loop(session, prompt, new),
                "dml bound": lambda: bound_loop(session, prompt, new),
            }
            _rounds(run, row, calls, max(1, run.args.samples))
            tokens = dml_generation(session, prompt, new)[0]
            row["same_tokens"] = float((tokens == want).mean())
            row["run_same_tokens"] = float((run_loop(session, prompt, new)[0] == want).mean())
            row["bound_same_tokens"] = float((bound_loop(session, prompt, new)[0] == want).mean())
        except Exception as e:
            row["error"] = error_text(e)
        run.add(row)
        if getattr(run.args, "devices", 1) > 1:
            batch = int(prompt.shape[0])
            _sharded_rows(run, name, str(FIXTURES / f"{name}_step.onnx"),
                          [("float32", batch, run.args.devices)], lambda b: prompt, "float32",
                          new)  # fmt: skip


def _rounds(run: Run, row: dict, calls: dict[str, Any], rounds: int) -> None:
    """Each configuration's generation, in turn for ``rounds`` rounds: ``tok_s`` (median,
    p10, p90 of the decode's tokens/s), ``ttft_ms`` and the ratios against ``dml``."""
    names = list(calls)
    decode: dict[str, list[float]] = {n: [] for n in names}
    ttft: dict[str, list[float]] = {n: [] for n in names}
    tokens: dict[str, int] = {}
    for k in range(rounds):
        for name in names[k % len(names) :] + names[: k % len(names)]:
            out, first, dec = calls[name]()
            tokens[name] = out.shape[0] * (out.shape[1] - 1)  # those after the first
            decode[name].append(dec)
            ttft[name].append(first)
    row["tok_s"] = {n: _rate(tokens[n], s) for n, s in decode.items()}
    row["ttft_ms"] = {n: summary(s) for n, s in ttft.items()}
    for key, name in (
        ("eager", "eager"),
        ("compile", "compile static"),
        ("one_device", "one device"),
    ):
        if name in decode:
            row[f"x_{key}"] = ratio(decode[name], decode["dml"])


def _rate(tokens: int, seconds: list[float]) -> dict:
    """Tokens/s of each sample: median, p10, p90 (the p10 of the rate is the slow end)."""
    s = summary(seconds)
    return dict(median=tokens / (s["median"] / 1e3), p10=tokens / (s["p90"] / 1e3),
                p90=tokens / (s["p10"] / 1e3), n=s["n"])  # fmt: skip


def _programs(session: Any, prompt: np.ndarray, long: int) -> dict:
    """Programs compiled by a generation over ``long`` positions after a first one did, for the
    Generator and for the ``run`` loop (over the same positions, one prompt row)."""
    before = dml_generation(session, prompt, long - prompt.shape[1])[3].compiles
    again = dml_generation(session, prompt, long - prompt.shape[1])[3].compiles  # the session's
    out = {"programs_long": before, "new_programs_after_warmup": again - before}
    one = prompt[:1]
    steps = min(long - one.shape[1], 256)
    run_loop(session, one, steps)
    count = len(session._programs)
    run_loop(session, one, steps)
    out.update(run_programs=count, run_new_programs=len(session._programs) - count)
    return out


def _model(run: Run, name: str, torch: Any, bw: float) -> None:
    from dml_jax.bench import decoders
    from dml_jax.onnx import InferenceSession

    opts = run.args
    rng = np.random.default_rng(0)
    model = decoders.build(name)
    vocab = model.config.vocab_size
    todo = _todo(run, name)
    with tempfile.TemporaryDirectory() as tmp:
        fp32_eq = None
        if opts.fp32 and ("float16", opts.batch[0], 1) in todo:  # reported on that row
            try:
                path = os.path.join(tmp, "fp32.onnx")
                cuda32 = model.to(TORCH_DEVICE)
                decoders.export(cuda32, path, device=TORCH_DEVICE)
                prompt = rng.integers(1, vocab, size=(1, opts.prompt))
                with torch.inference_mode():
                    want = decoders.greedy(cuda32, prompt, 64, device=TORCH_DEVICE)
                got = dml_generation(InferenceSession(path), prompt, 64)[0]
                fp32_eq = int((got == want).all(axis=0).cumprod().sum())
                os.remove(path)
            except Exception as e:
                run.add({"model": name, "dtype": "float32", "error": error_text(e)})
        half = model.half().to(TORCH_DEVICE)
        path = os.path.join(tmp, "fp16.onnx")
        t = time.perf_counter()
        decoders.export(half, path, device=TORCH_DEVICE)
        export_s = round(time.perf_counter() - t, 1)
        weights = sum(p.numel() * p.element_size() for p in half.parameters())
        exports = [("float16", path)]
        if any(dtype == "int4" for dtype, _, _ in todo):
            try:
                decoders.quantize_int4(path, os.path.join(tmp, "int4.onnx"))
                exports.append(("int4", os.path.join(tmp, "int4.onnx")))
            except Exception as e:
                run.add({"model": name, "dtype": "int4", "error": error_text(e)})
        compiled = None
        if opts.compile:
            try:
                compiled = CompiledStatic(torch, half)
            except Exception as e:
                run.skip(f"{name} compile static", error_text(e))
        float16_tok_s = {  # a part before this one (--resume) may have measured them
            r["batch"]: r["tok_s"]["dml"]["median"]
            for r in run.rows
            if r.get("model") == name
            and r.get("dtype") == "float16"
            and "tok_s" in r
            and r.get("devices") == 1
        }
        for dtype, file in exports:
            if not any(d == dtype and n == 1 for d, _, n in todo):
                continue
            session = InferenceSession(file)
            for batch in opts.batch:
                if (dtype, batch, 1) not in todo:
                    continue
                if run.over_budget():
                    run.skip(f"{name} {dtype} batch {batch}", f"--budget-s {opts.budget_s}")
                    continue
                prompt = rng.integers(1, vocab, size=(batch, opts.prompt))
                row: dict = {"model": name, "dtype": dtype, "batch": batch, "devices": 1,
                             "prompt": opts.prompt, "new": opts.new, "export_s": export_s}  # fmt: skip
                if dtype == "float16" and batch == opts.batch[0] and fp32_eq is not None:
                    row["fp32_equal_tokens"] = fp32_eq
                try:
                    _generation_row(run, row, session, half, compiled, prompt, weights, bw, torch)
                    if dtype == "float16":
                        float16_tok_s[batch] = row["tok_s"]["dml"]["median"]
                    elif batch in float16_tok_s:
                        row["x_float16"] = row["tok_s"]["dml"]["median"] / float16_tok_s[batch]
                    if batch == opts.batch[0]:
                        row.update(_programs(session, prompt, opts.long))
                except Exception as e:
                    row["error"] = error_text(e)
                run.add(row)
            del session
        if any(n > 1 for _, _, n in todo):
            _sharded_rows(
                run, name, path, todo, lambda b: rng.integers(1, vocab, size=(b, opts.prompt))
            )
        if compiled is not None:
            compiled.close()
    del model, half
    torch.cuda.empty_cache()


def _todo(run: Run, name: str) -> list[tuple[str, int, int]]:
    """The (dtype, batch, devices) rows of model ``name`` this run makes: those not in the
    report yet (``--resume`` continues a run cut short between rows)."""
    kinds = [("float16", 1)] + ([("int4", 1)] if run.args.int4 and name == "llama_1b" else [])
    devices = getattr(run.args, "devices", 1)
    kinds += [("float16", devices)] if devices > 1 else []
    return [(d, b, n) for d, n in kinds for b in run.args.batch
            if not run.done(model=name, dtype=d, batch=b, devices=n)]  # fmt: skip


def _sharded_rows(
    run: Run,
    name: str,
    path: str,
    todo: list,
    prompt_of: Any,
    dtype: str = "float16",
    new: int | None = None,
) -> None:
    """The decode of the export at ``path`` on a ``"model"`` mesh of ``--devices`` devices (the
    session's tensor parallelism, the cache split over the heads) against one device, in turn,
    for each batch of ``todo`` (prompts from ``prompt_of(batch)``): tokens/s, the ratio
    ``x_one_device`` and whether the greedy tokens are the one device's."""
    import jax

    from dml_jax.onnx import InferenceSession

    opts, n = run.args, run.args.devices
    new = new or opts.new
    if len(jax.devices()) < n:
        run.skip(f"{name} on {n} devices", f"{len(jax.devices())} device(s)")
        return
    one = InferenceSession(path)
    split = InferenceSession(path, mesh=jax.make_mesh((n,), ("model",), devices=jax.devices()[:n]))
    for d, batch, count in todo:
        if (d, count) != (dtype, n):
            continue
        prompt = prompt_of(batch)
        row: dict = {"model": name, "dtype": dtype, "batch": batch, "devices": n,
                     "prompt": prompt.shape[1], "new": new}  # fmt: skip
        try:
            t = time.perf_counter()
            want = dml_generation(one, prompt, new)[0]
            got = dml_generation(split, prompt, new)[0]
            row["warmup_s"] = round(time.perf_counter() - t, 2)
            row["same_tokens"] = float((got == want).mean())
            calls = {
                "dml": lambda s=split, p=prompt: dml_generation(s, p, new)[:3],
                "one device": lambda s=one, p=prompt: dml_generation(s, p, new)[:3],
            }
            _rounds(run, row, calls, max(1 if run.quick else MIN_ROUNDS, opts.samples))
        except Exception as e:
            row["error"] = error_text(e)
        run.add(row)


def _generation_row(run, row, session, half, compiled, prompt, weights, bw, torch) -> None:
    from dml_jax.bench import decoders

    opts = run.args
    new = opts.new
    t = time.perf_counter()
    _, _, _, g = dml_generation(session, prompt, new)
    dml_generation(session, prompt, new, per_token=True)
    row["warmup_s"] = round(time.perf_counter() - t, 2)
    row["programs"] = g.compiles
    calls = {
        "dml": lambda: dml_generation(session, prompt, new)[:3],
        "dml per token": lambda: dml_generation(session, prompt, new, True)[:3],
        "eager": lambda: torch_eager(torch, half, prompt, new),
    }
    if prompt.shape[0] == 1:  # the run loop copies every cache to the host: batch 1 only
        run_loop(session, prompt, min(new, 32))  # its programs compiled before the rounds
        calls["dml run()"] = lambda: run_loop(session, prompt, min(new, 32))
    bound_loop(session, prompt, min(new, 32))  # the IOBinding loop: the cache on the device
    calls["dml bound"] = lambda: bound_loop(session, prompt, min(new, 32))
    if compiled is not None:
        try:
            compiled(prompt, new)  # compiled for this batch and length
            calls["compile static"] = lambda: compiled(prompt, new)
        except Exception as e:
            row["compile_error"] = error_text(e)
    rounds = max(MIN_ROUNDS, opts.samples)
    _rounds(run, row, calls, rounds)
    tokens, _, _, g = dml_generation(session, prompt, new)
    want = torch_eager(torch, half, prompt, new)[0]
    row["same_tokens"] = float((tokens == want).mean())
    with torch.inference_mode():
        logits = half(input_ids=torch.as_tensor(prompt, device=TORCH_DEVICE)).logits
    row["logits_rel_err"] = _prefill_agreement(session, prompt, logits.float().cpu().numpy())

    def cache_bytes(past: int) -> int:  # every layer's keys and values, float16
        return int(sum(np.prod(s) for s in decoders.cache_shapes(half, prompt.shape[0], past))) * 2

    row["cache_bytes"] = cache_bytes(opts.prompt + new)
    mean = cache_bytes(opts.prompt + new // 2)
    step_bytes = weights + mean
    if row["dtype"] == "int4":
        step_bytes = _file_bytes(session) + mean
    row["step_bytes"] = step_bytes
    row["roofline_tok_s"] = prompt.shape[0] * bw / step_bytes
    row["of_roofline"] = row["tok_s"]["dml"]["median"] / row["roofline_tok_s"]


def _file_bytes(session: Any) -> int:
    """Bytes of the session's initializers as the model stores them (a quantized model's
    weights packed)."""
    return sum(session._initializer(i).nbytes for i in session.model.graph.initializer)


def _prefill_agreement(session: Any, prompt: np.ndarray, want: np.ndarray) -> float:
    feed = {"input_ids": prompt, "attention_mask": np.ones_like(prompt)}
    names = {i.name: i for i in session.get_inputs()}
    if "position_ids" in names:
        feed["position_ids"] = np.broadcast_to(np.arange(prompt.shape[1]), prompt.shape).copy()
    for n, i in names.items():
        if n.startswith("past"):
            dtype = np.float16 if "float16" in i.type else np.float32
            feed[n] = np.zeros((prompt.shape[0], i.shape[1], 0, i.shape[3]), dtype)
    got = session.run(["logits"], feed)[0].astype(np.float32)
    return float(np.abs(got - want).max() / np.abs(want).max())


def run(run: Run) -> int:
    torch = None if run.quick else run.torch
    if torch is None:
        if not run.quick:
            run.skip("decoders", "needs PyTorch on a GPU (transformers builds the models)")
            return 0
        _quick(run)
        run.skip("PyTorch", "--quick runs the committed tiny decoders against stored tokens")
        return 0
    bw = bandwidth(torch)
    run.report["copy_bytes_per_s"] = bw
    torch.backends.cuda.matmul.allow_tf32 = False
    for name in run.args.only or MODELS:
        if not _todo(run, name):  # every row already in the report (--resume)
            continue
        try:
            _model(run, name, torch, bw)
        except Exception as e:
            run.add({"model": name, "error": error_text(e)})
    return 0


def _r(d: dict | None) -> str:
    if not d:
        return ""
    return f"{d['median']:.2f} ({d['p10']:.2f}-{d['p90']:.2f}){' ~' if d['crosses_1'] else ''}"


def table(report: dict) -> list[str]:
    """One line per model, type and batch."""
    bw = report.get("copy_bytes_per_s")
    lines = [
        "Greedy decode, one prompt per row, "
        + (f"copy bandwidth {bw / 1e12:.2f} TB/s. " if bw else "")
        + "`tok/s`: decode tokens/s (median, p10-p90) of `generate_until_done`, `per token` "
        "of `generate_next_token`, `run()` of the onnxruntime-style loop, `bound` of that "
        "loop through IOBinding (the cache left on the device, the argmax taken there); "
        "`x eager` / "
        "`x compile`: PyTorch eager's (its own cache) / `torch.compile`'s with a static cache "
        "decode time over dml_jax's (median of the rounds' ratios, p10-p90, `~` where the "
        "spread holds 1.0). `TTFT ms`: dml_jax / eager. `roofline`: dml_jax's tokens/s over "
        "the copy bandwidth divided by the bytes a step reads. `programs`: compiled by a "
        "generation / new after a warm-up over `--long` positions (Generator; `run()` loop). "
        "`same`: greedy tokens equal to PyTorch eager's (float16; on several devices, to one "
        "device's); `fp32`: of 64 in float32. On several devices: the decode on a `model` "
        "mesh, `x one device` its tokens/s over one device's.",
        "",
        (
            "| model | type | batch | tok/s | per token | run() | bound | x eager | x compile "
            "| TTFT ms | roofline | programs | same | fp32 | logits err | note |"
        ),
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in report["rows"]:
        tok = r.get("tok_s", {})

        def t(name, tok=tok):
            return f"{tok[name]['median']:,.0f}" if name in tok else ""

        ttft = r.get("ttft_ms", {})
        tt = " / ".join(f"{ttft[n]['median']:.1f}" for n in ("dml", "eager") if n in ttft)
        prog = ""
        if "programs" in r:
            prog = f"{r['programs']}"
            if "new_programs_after_warmup" in r:
                prog += f"; +{r['new_programs_after_warmup']} (run() +{r['run_new_programs']})"
        roof = f"{r['of_roofline']:.0%}" if "of_roofline" in r else ""
        note = r.get("error") or r.get("compile_error") or ""
        if "x_float16" in r:
            note = (note + f" {r['x_float16']:.2f}x float16").strip()
        if "x_one_device" in r:
            note = (note + f" {_r(r['x_one_device'])} x one device").strip()
        kind = r.get("dtype", "")
        if r.get("devices", 1) > 1:
            kind += f" on {r['devices']} devices"
        fp32 = r.get("fp32_equal_tokens", "")
        same = f"{r['same_tokens']:.2f}" if "same_tokens" in r else ""
        err = f"{r['logits_rel_err']:.1e}" if "logits_rel_err" in r else ""
        lines.append(
            f"| {r['model']} | {kind} | {r.get('batch', '')} | {t('dml')} | "
            f"{t('dml per token')} | {t('dml run()')} | {t('dml bound')} | "
            f"{_r(r.get('x_eager'))} | "
            f"{_r(r.get('x_compile'))} | {tt} | {roof} | {prog} | {same} | {fp32} | {err} | "
            f"{note[:80]} |"
        )
    return lines


__all__ = ["MODELS", "add_arguments", "run", "table"]
