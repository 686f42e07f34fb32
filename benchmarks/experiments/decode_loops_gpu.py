"""Where the onnxruntime-style decode loops' time goes on a GPU (issue 64): the 1B-class LLaMA
(``dml_jax.bench.decoders``) exported in float16, generated at batch 1 by the decode suite's
``run_loop`` (``run`` once a token, the cache through the host; ``run-unpacked``, its outputs
fetched each by its own copy, as before ``fetch``) and ``bound_loop`` (IOBinding, the cache on
the device), against ``Generator.generate_next_token``.

Per loop: its greedy tokens against the Generator's (the fraction equal), milliseconds a token
(median of ``--samples`` generations of ``--new`` tokens), the GPU kernels' summed time a token
and the busy fraction from a ``jax.profiler`` trace of one generation (``gpu_trace.py``), and
the host functions that take most of a generation's time (``cProfile``, cumulative, ``--top`` of
them): what a token spends outside the model's kernels; and the wall time a token of the
session's own steps (``PHASES``: the feed's checks, the bound pasts' padding, the program's
lookup and dispatch, the outputs' wrapping, an ``OrtValue``'s copies in and out) and of a few
bare JAX calls (a small ``device_put``, a small array's copy to the host, a jitted call of as
many device arguments as a step's).

``--options`` makes a session per set of XLA options (over the session's defaults) from one
export: Triton's products for ``run``'s one-row programs, XLA's command buffers, ...;
``--rounds R`` then times every session's every loop once a round, in turn, R rounds (the
option sets and loops compared without an order between them; ``--only-rounds`` skips the
per-session pass).

Usage: ``PYTHONPATH=. python3 benchmarks/experiments/decode_loops_gpu.py [--model llama_1b]
[--new 64] [--samples 3] [--top 25] [--options '{}' '{"xla_gpu_enable_triton_gemm": true}']``
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import sys
import tempfile
import time

import gpu_trace  # this folder's
import numpy as np

# (module, class or None, name): the session's steps timed a token
PHASES = [
    ("dml_jax.onnx.session", "InferenceSession", "_run"),
    ("dml_jax.onnx.session", "InferenceSession", "_checked"),
    ("dml_jax.onnx.session", "InferenceSession", "_dispatch"),
    ("dml_jax.onnx.cache", "ProgramCache", "_program_and_resumed"),
    ("dml_jax.onnx.binding", None, "pad_on_device"),
    ("dml_jax.onnx.binding", None, "on_device"),
    ("dml_jax.onnx.binding", "OrtValue", "numpy"),
    ("dml_jax.onnx.binding", "OrtValue", "ortvalue_from_numpy"),
    ("dml_jax.onnx.buckets", None, "pad_decoder_feed"),
    ("dml_jax.onnx.fetch", None, "host_outputs"),
]


def _timers() -> dict:
    """Wraps ``PHASES`` with wall-clock timers: their summed seconds by name."""
    import importlib

    spent: dict = {}

    def timed(name, fn):
        def call(*args, **kwargs):
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] = spent.get(name, 0.0) + time.perf_counter() - t

        return call

    from dml_jax.onnx.program import Program

    jitted_on = Program.jitted_on

    def jitted_timed(self, device, packed=False):  # the program's call alone: "call"
        fn = jitted_on(self, device, packed)
        call = timed("call", fn)
        call.lower = fn.lower
        return call

    Program.jitted_on = jitted_timed
    for module, owner, name in PHASES:
        m = importlib.import_module(module)
        if owner is None:
            setattr(m, name, timed(name, getattr(m, name)))
            continue
        cls = next((c for c in vars(m).values() if isinstance(c, type) and name in vars(c)),
                   getattr(m, owner, None))  # fmt: skip
        if cls is None or name not in vars(cls):
            continue
        raw = vars(cls)[name]
        wrapped = timed(name, raw.__func__ if isinstance(raw, staticmethod) else raw)
        setattr(cls, name, staticmethod(wrapped) if isinstance(raw, staticmethod) else wrapped)
    return spent


def _bare(jax, np) -> None:
    """A few bare JAX calls' wall time, median of 50, in microseconds."""
    import jax.numpy as jnp

    def us(fn):
        fn()
        out = []
        for _ in range(50):
            t = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t) * 1e6)
        return statistics.median(out)

    small = np.ones((1, 1), np.int32)
    dev = jax.device_put(small)
    args = [jnp.ones((8, 8)) for _ in range(180)]
    f = jax.jit(lambda *xs: xs[0] + 1)
    put = us(lambda: jax.device_put(small).block_until_ready())
    print(f"bare: device_put int32[1,1] {put:.0f} us,"
          f" np.asarray of it {us(lambda: np.asarray(dev + 0)):.0f} us,"
          f" jitted call of 180 device args {us(lambda: f(*args)):.0f} us (+sync "
          f"{us(lambda: f(*args).block_until_ready()):.0f}),"
          f" of 179 + a host int32[1,1] {us(lambda: f(*args[:-1], small)):.0f} us")  # fmt: skip
    pasts = [np.ones((1, 8, 64, 64), np.float16) for _ in range(32)]
    on_dev = [jax.device_put(x) for x in pasts]
    g = jax.jit(lambda *xs: sum(x[0, 0, 0, 0] for x in xs))
    big = jnp.ones((5 << 20,), jnp.uint8)

    def joined():  # the pasts' bytes as one host array
        return np.concatenate([x.reshape(-1) for x in pasts]).view(np.uint8)[None, None, None]

    print(f"bare: jitted call of 32 f16[1,8,64,64] + sync: host arrays "
          f"{us(lambda: g(*pasts).block_until_ready()):.0f} us, device arrays "
          f"{us(lambda: g(*on_dev).block_until_ready()):.0f} us, one host array of their bytes "
          f"{us(lambda: g(joined()).block_until_ready()):.0f} us;"
          f" 5 MiB to the host {us(lambda: np.asarray(big + 0)):.0f} us")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="llama_1b")
    p.add_argument("--new", type=int, default=64)
    p.add_argument("--prompt", type=int, default=16)
    p.add_argument("--samples", type=int, default=3)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--loops", nargs="*", default=["run", "bound", "generator"])
    p.add_argument("--no-profile", dest="profile", action="store_false", help="no cProfile")
    p.add_argument("--options", nargs="*", default=["{}"], metavar="JSON",
                   help="a session per set of compiler options over the defaults, as "
                   "'{\"xla_gpu_enable_triton_gemm\": true}' (the loops run for each)")  # fmt: skip
    p.add_argument("--hlo", action="store_true",
                   help="the concatenations in run()'s last program's optimized HLO")  # fmt: skip
    p.add_argument("--rounds", type=int, default=0,
                   help="then this many rounds, each timing every session's every loop once "
                   "in turn (an order-balanced comparison of the option sets)")  # fmt: skip
    p.add_argument(
        "--only-rounds",
        action="store_true",
        help="no per-session pass (traces, phases, profiles): the rounds alone",
    )
    a = p.parse_args()

    import jax
    import torch

    from dml_jax.bench import decoders
    from dml_jax.onnx import InferenceSession

    print(jax.devices()[0].device_kind, jax.__version__, torch.__version__)
    _bare(jax, np)
    spent = _timers()
    model = decoders.build(a.model).half().to("cuda")
    prompt = np.random.default_rng(0).integers(1, model.config.vocab_size, (1, a.prompt))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "fp16.onnx")
        decoders.export(model, path, device="cuda")
        sessions = [(o, InferenceSession(path, compiler_options=json.loads(o) or None))
                    for o in a.options]  # fmt: skip
    for options, session in sessions:
        print(f"compiler options {session.compiler_options} ({options} over the defaults)")
        if a.only_rounds:
            continue
        _loops(a, session, prompt, spent)
    if a.rounds:
        _rounds(a, sessions, prompt)
    if a.hlo:
        _concatenations(sessions[-1][1], prompt)
    sys.stdout.flush()


def _loop_table(session, prompt, new: int) -> dict:
    """Each loop by name: a call generating ``new`` tokens after ``prompt`` on ``session``,
    giving (tokens, ..., seconds)."""
    from dml_jax.bench.suites.decode import bound_loop, dml_generation, run_loop

    return {
        "run": lambda: run_loop(session, prompt, new),
        "bound": lambda: bound_loop(session, prompt, new),
        "generator": lambda: dml_generation(session, prompt, new, per_token=True)[:3],
        "run-unpacked": lambda: _unpacked(lambda: run_loop(session, prompt, new)),
    }


def _loops(a, session, prompt, spent) -> None:
    """Times ``a.loops`` on ``session`` (see the module docstring)."""
    loops = _loop_table(session, prompt, a.new)
    want = np.asarray(loops["generator"]()[0])
    for name in a.loops:
        loop = loops[name]
        same = float((np.asarray(loop()[0]) == want).mean())
        loop()
        times = [loop()[2] / (a.new - 1) * 1e3 for _ in range(a.samples)]
        folder = gpu_trace.record(lambda: loop()[0], 1)
        prof = gpu_trace.kernels(folder, a.new, top=8)
        spent.clear()
        loop()
        print("  a token, ms: " + ", ".join(f"{k} {v / a.new * 1e3:.3f}" for k, v in spent.items()))
        print(f"{name}: {statistics.median(times):.3f} ms a token "
              f"({min(times):.3f}-{max(times):.3f}); kernels a token "
              f"{prof.get('kernels', 0):.0f}, {prof.get('kernel_us', 0):.0f} us, busy "
              f"{prof.get('busy', 0):.2f}; tokens as the Generator's {same:.3f}")  # fmt: skip
        for row in prof.get("top", []):
            print("   ", row)
        if not a.profile:
            continue
        pr = cProfile.Profile()
        pr.enable()
        loop()
        pr.disable()
        text = io.StringIO()
        pstats.Stats(pr, stream=text).sort_stats("cumulative").print_stats(a.top)
        print(text.getvalue()[-6000:])
        pr = cProfile.Profile()
        pr.enable()
        loop()
        pr.disable()
        text = io.StringIO()
        pstats.Stats(pr, stream=text).sort_stats("tottime").print_stats(15)
        print(text.getvalue()[-3000:])


def _rounds(a, sessions, prompt) -> None:
    """``a.rounds`` rounds, each timing every (session, loop) once, in turn: each pair's
    milliseconds a token (median, range) and its tokens against its session's Generator."""
    tables = [(o, _loop_table(session, prompt, a.new)) for o, session in sessions]
    pairs = [(o, name, table[name], table["generator"]) for o, table in tables for name in a.loops]
    same, times = {}, {}
    for o, name, loop, generator in pairs:  # each compiled and checked before the rounds
        want = np.asarray(generator()[0])
        same[o, name] = float((np.asarray(loop()[0]) == want).mean())
    for _ in range(a.rounds):
        for o, name, loop, _ in pairs:
            times.setdefault((o, name), []).append(loop()[2] / (a.new - 1) * 1e3)
    print(f"rounds ({a.rounds}, each pair once a round in turn), ms a token:")
    for (o, name), ts in times.items():
        print(f"  {o} {name}: {statistics.median(ts):.3f} ({min(ts):.3f}-{max(ts):.3f}); "
              f"tokens as the Generator's {same[o, name]:.3f}")  # fmt: skip


def _unpacked(call):
    """``call()`` with ``run``'s outputs fetched each by its own copy (``fetch``)."""
    from dml_jax.onnx import fetch

    was = fetch.PACKED_MIN_OUTPUTS
    fetch.PACKED_MIN_OUTPUTS = 1 << 30
    try:
        return call()
    finally:
        fetch.PACKED_MIN_OUTPUTS = was


def _concatenations(session, prompt) -> None:
    """The concatenate instructions of the optimized HLO of ``run``'s program for a step at
    the prompt's length plus one (its operands' shapes say what is copied)."""
    from dml_jax.onnx import session as S

    seen = {}
    dispatch = S.InferenceSession._dispatch

    def spy(self, program, feed):
        seen["call"] = out = dispatch(self, program, feed)
        return out

    S.InferenceSession._dispatch = spy
    try:
        from dml_jax.bench.suites.decode import run_loop

        run_loop(session, prompt, 2)
    finally:
        S.InferenceSession._dispatch = dispatch
    jitted, params, args = seen["call"]
    text = jitted.lower(params, *args).compile().as_text()
    lines = [x.strip() for x in text.splitlines() if " concatenate(" in x or "wrapped_conc" in x]
    print(f"run()'s program: {len(lines)} concatenate instructions")
    for x in [x for x in lines if "wrapped_conc" in x][:8] + lines[:4]:
        print("   ", x[:400])


if __name__ == "__main__":
    main()
