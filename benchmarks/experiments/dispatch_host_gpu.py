"""Where the host's time goes when a decoder is generated a dispatch a token (the
``generate_next_token`` loop of ONNX Runtime GenAI's API): the 1B-class 4-bit decoder in the
model-builder form, then PyTorch's export, on one GPU.

For each: the microseconds a ``generate_next_token`` takes to issue (no sync between them; first,
again, and last, after the other calls); the
leaves of the step's arguments (weights, state); the same call made straight on the step
function (``DecodeSteps.steps_fn``, the Generator's bookkeeping left out); a jitted function of
the same arguments that returns the state unchanged (what a call of that many buffers costs at
the least); and the Python functions that took the most of 64 issues (cProfile).

    python3 dispatch_host_gpu.py            # writes $OUT/dispatch_host.json

Slow part on the GPU machine: two exports (~40 s each), two quantizations (~20 s), two compiles.
"""

from __future__ import annotations

import cProfile
import io
import json
import os
import pstats
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _issue_us(call, n: int) -> dict:
    """Microseconds each of ``n`` calls took to return (no sync): the mean, the median call and
    the slowest tenth's least."""
    times = []
    t = time.perf_counter()
    for _ in range(n):
        c = time.perf_counter()
        call()
        times.append(time.perf_counter() - c)
    mean = (time.perf_counter() - t) / n * 1e6
    return {"mean": mean, "median": float(np.median(times)) * 1e6,
            "p90": float(np.percentile(times, 90)) * 1e6}  # fmt: skip


def measure(path: str, new: int = 64, prompt_len: int = 16) -> dict:
    import jax

    from dml_jax.onnx import InferenceSession
    from dml_jax.onnx.generation import Generator, GeneratorParams

    session = InferenceSession(path)
    prompt = np.random.default_rng(0).integers(1, 1000, size=(1, prompt_len))

    def generator():
        params = GeneratorParams(session, max_length=prompt_len + 4 * new, batch_size=1)
        g = Generator(session, params)
        g.append_tokens(prompt)
        g.generate_next_token()  # the prefill's token shown: each later call a dispatch
        jax.block_until_ready(g._tokens)
        return g

    g = generator()  # compiles the steps
    for _ in range(3 * new):
        g.generate_next_token()
    jax.block_until_ready(g._tokens)
    out: dict = {}
    g = generator()
    out["generate_next_token_us"] = _issue_us(g.generate_next_token, new)
    jax.block_until_ready(g._tokens)
    g = generator()  # again, after the others (an order effect would show here)
    out["generate_next_token_again_us"] = _issue_us(g.generate_next_token, new)
    jax.block_until_ready(g._tokens)
    made = (*g._step_id(g._length), 1)
    fn, program = g._fns.steps_fn(*made)
    weights = g._fns.params_for(program)
    state = g._state()
    out["weight_leaves"] = len(jax.tree.leaves(weights))
    out["weight_bytes"] = int(sum(a.nbytes for a in jax.tree.leaves(weights)))
    out["state_leaves"] = len(jax.tree.leaves(state))
    length = g._fns.put(np.int32(g._length))

    # the step function alone (the state threaded through, as the Generator does)
    box = [state, length]

    def straight():  # the state and the length are donated: each call takes the last's
        made = fn(weights, box[0], box[1])
        box[0], box[1] = made[0], made[3]

    out["steps_fn_us"] = _issue_us(straight, new)
    jax.block_until_ready(box[0])

    # a call of as many buffers that does nothing
    @jax.jit
    def same(w, s, n):
        return s, n + 1

    s2, n2 = box
    same(weights, s2, n2)
    out["empty_call_us"] = _issue_us(lambda: same(weights, s2, n2), new)
    empty_w = jax.jit(lambda s, n: (s, n + 1))
    empty_w(s2, n2)
    out["empty_call_no_weights_us"] = _issue_us(lambda: empty_w(s2, n2), new)
    jax.block_until_ready(s2)

    g = generator()
    out["generate_next_token_last_us"] = _issue_us(g.generate_next_token, new)
    jax.block_until_ready(g._tokens)
    # Python's garbage collector off: a full collection over a session's objects is tens of
    # milliseconds (this 2-core CPU: 71 ms with the tiny decoder's session loaded)
    import gc

    g = generator()
    gc.collect()
    gc.disable()
    try:
        out["generate_next_token_no_gc_us"] = _issue_us(g.generate_next_token, new)
    finally:
        gc.enable()
    jax.block_until_ready(g._tokens)
    out["gc_objects"] = len(gc.get_objects())
    started = time.perf_counter()
    gc.collect()
    out["gc_collect_ms"] = (time.perf_counter() - started) * 1e3

    # the Python side of generate_next_token
    g = generator()
    for _ in range(2):
        g.generate_next_token()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(new):
        g.generate_next_token()
    prof.disable()
    jax.block_until_ready(g._tokens)
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(25)
    out["profile"] = text.getvalue().splitlines()[:60]
    return out


def main() -> None:
    import torch

    from dml_jax.bench import decoders, model_builder

    tmp = tempfile.mkdtemp()
    result = {}
    dest = os.path.join(os.environ.get("OUT", "."), "dispatch_host.json")
    for form in ("builder", "exporter"):
        model = decoders.build("llama_1b").half().cuda()
        f16 = os.path.join(tmp, f"{form}16.onnx")
        if form == "builder":
            model_builder.export(model, f16, np.float16)
        else:
            decoders.export(model, f16, device="cuda")
        del model
        torch.cuda.empty_cache()
        int4 = os.path.join(tmp, f"{form}4.onnx")
        decoders.quantize_int4(f16, int4)
        t = time.perf_counter()
        result[form] = measure(int4)
        result[form]["measure_s"] = time.perf_counter() - t
        print(form, json.dumps({k: v for k, v in result[form].items() if k != "profile"}))
        print("\n".join(result[form]["profile"][:45]), flush=True)
        with open(dest, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
