"""GPU timing of MULTIHEAD_ATTENTION and LSTM against their anchors (issue "Recurrent networks
and multi-head attention").

Attention: B=16, 16 heads, sequence 2048, head size 128, float16 (stacked QKV and separate Q, K,
V): dml_jax's MULTIHEAD_ATTENTION (the lax lowering), ``jax.nn.dot_product_attention`` (cuDNN
and XLA), and PyTorch's ``scaled_dot_product_attention``, in TFLOP/s (4 * B * H * S^2 * D).
LSTM: hidden 1024, 512 steps, batch 64, input 1024, float16: dml_jax's LSTM against
``torch.nn.LSTM`` (cuDNN), in steps/s. Many dispatches, one sync. Run from the repository root:

    XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=. python benchmarks/attention_lstm.py
"""

from __future__ import annotations

import json
import time

import jax
import jax.numpy as jnp

import dml_jax as dml

B, H, S, D = 16, 16, 2048, 128
T = dml.TensorDesc


def timeit(call, sync, reps=10) -> float:
    sync(call())
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        out = None
        for _ in range(reps):
            out = call()
        sync(out)
        best = min(best, (time.perf_counter() - t) / reps)
    return best


def attention_rows() -> list[dict]:
    flops = 4 * B * H * S * S * D
    key = jax.random.key(0)
    q, k, v = (
        jax.random.normal(kk, (B, S, H * D), jnp.float32).astype(jnp.float16)
        for kk in jax.random.split(key, 3)
    )
    t = T("FLOAT16", (B, S, H * D))
    desc = dml.MultiheadAttentionOperatorDesc(
        query_tensor=t,
        key_tensor=t,
        value_tensor=t,
        output_tensor=t,
        scale=D**-0.5,
        mask_filter_value=-1e4,
        head_count=H,
    )
    op = dml.compile_operator(desc)
    rows = [
        {
            "case": "MHA separate Q,K,V",
            "impl": "dml",
            "s": timeit(lambda: op(q, k, v), jax.block_until_ready),
        }
    ]
    q4, k4, v4 = (a.reshape(B, S, H, D) for a in (q, k, v))
    for impl in ("cudnn", "xla"):
        f = jax.jit(
            lambda a, b, c, impl=impl: jax.nn.dot_product_attention(a, b, c, implementation=impl)
        )
        try:
            rows.append(
                {
                    "case": "MHA",
                    "impl": f"jax {impl}",
                    "s": timeit(lambda: f(q4, k4, v4), jax.block_until_ready),
                }
            )
        except Exception as e:  # an implementation this device or jax lacks: recorded
            rows.append({"case": "MHA", "impl": f"jax {impl}", "error": str(e)[:200]})
    try:
        import torch

        tq, tk, tv = (torch.randn(B, H, S, D, dtype=torch.float16, device="cuda") for _ in range(3))
        sdpa = torch.nn.functional.scaled_dot_product_attention
        rows.append(
            {
                "case": "MHA",
                "impl": "torch sdpa",
                "s": timeit(lambda: sdpa(tq, tk, tv), lambda _: torch.cuda.synchronize()),
            }
        )
    except Exception as e:
        rows.append({"case": "MHA", "impl": "torch sdpa", "error": str(e)[:200]})
    for r in rows:
        if "s" in r:
            r["tflops"] = round(flops / r["s"] / 1e12, 1)
    return rows


def lstm_rows(hidden=1024, steps=512, batch=64) -> list[dict]:
    x = jax.random.normal(jax.random.key(1), (1, steps, batch, hidden), jnp.float32).astype(
        jnp.float16
    )
    w = (jax.random.normal(jax.random.key(2), (1, 1, 4 * hidden, hidden)) * 0.02).astype(
        jnp.float16
    )
    r = (jax.random.normal(jax.random.key(3), (1, 1, 4 * hidden, hidden)) * 0.02).astype(
        jnp.float16
    )
    sig, tanh = dml.ActivationSigmoidOperatorDesc(), dml.ActivationTanhOperatorDesc()
    desc = dml.LstmOperatorDesc(
        input_tensor=T("FLOAT16", x.shape),
        weight_tensor=T("FLOAT16", w.shape),
        recurrence_tensor=T("FLOAT16", r.shape),
        output_sequence_tensor=T("FLOAT16", (steps, 1, batch, hidden)),
        activation_descs=[sig, tanh, tanh],
    )
    op = dml.compile_operator(desc)
    rows = [
        {
            "case": "LSTM",
            "impl": "dml",
            "s": timeit(lambda: op(x, w, r), jax.block_until_ready, reps=3),
        }
    ]
    try:
        import torch

        lstm = torch.nn.LSTM(hidden, hidden, device="cuda", dtype=torch.float16)
        tx = torch.randn(steps, batch, hidden, device="cuda", dtype=torch.float16)
        with torch.no_grad():
            rows.append(
                {
                    "case": "LSTM",
                    "impl": "torch cudnn",
                    "s": timeit(lambda: lstm(tx), lambda _: torch.cuda.synchronize(), reps=3),
                }
            )
    except Exception as e:
        rows.append({"case": "LSTM", "impl": "torch cudnn", "error": str(e)[:200]})
    for row in rows:
        if "s" in row:
            row["steps_per_s"] = round(steps / row["s"])
    return rows


def main():
    print(json.dumps({"jax": jax.__version__, "device": str(jax.devices()[0])}), flush=True)
    for row in attention_rows() + lstm_rows():
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
