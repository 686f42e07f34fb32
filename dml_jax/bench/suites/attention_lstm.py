"""The attention and LSTM suite: MULTIHEAD_ATTENTION and LSTM against their anchors.

Attention (default B=16, 16 heads, sequence 2048, head size 128, float16, separate Q, K, V), in
TFLOP/s (4 * B * H * S^2 * D): ``dml`` (as compiled: the cuDNN fast path on CUDA), ``dml lax``
(``fast_paths=False``), ``jax.nn.dot_product_attention`` (cuDNN and XLA) and PyTorch's
``scaled_dot_product_attention``. Each dml form is checked against the lax lowering on the same
inputs: ``max_err`` is max |fast - lax| / max |V| (docs/semantics.md allows 2^-9 plus 2^-9 of
|lax|).

LSTM (default hidden 1024, 512 steps, batch 64, input 1024, float16), in steps/s: ``dml``,
``dml half precision`` (``allow_half_precision=True``: on a Hopper GPU the persistent kernel of
``kernels/lstm.py``), ``dml lax`` and ``dml lax half precision`` (``fast_paths=False``), and
PyTorch's ``torch.nn.LSTM`` (cuDNN). Each dml form is checked against the lax lowering in full
precision: ``max_abs_err``.

``--quick``: B=2, 2 heads, sequence 64, head size 16; hidden 32, 8 steps, batch 2.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

import dml_jax as dml
from dml_jax import fastpath

from ..harness import Run, cold_time, error_text, jax_sync

T = dml.TensorDesc
FULL = {"attention": (16, 16, 2048, 128), "lstm": (1024, 512, 64)}
QUICK = {"attention": (2, 2, 64, 16), "lstm": (32, 8, 2)}


def add_arguments(p: Any) -> None:
    p.add_argument("--only", choices=("attention", "lstm"), help="one half of the suite")


def _row(run: Run, case: str, impl: str, call, sync, rate, check=None) -> None:
    """Times ``call`` (cold, then hot); ``rate(seconds)`` gives the throughput columns and
    ``check(result)`` the error columns. Errors are recorded, not raised."""
    row = {"case": case, "impl": impl}
    try:
        cold, out = cold_time(call, sync)
        seconds = run.timer.run(call, sync)
        row.update(cold_s=round(cold, 3), s=seconds, **rate(seconds))
        if check is not None:
            row.update(check(out))
    except Exception as e:  # a path this device, jax or PyTorch lacks: recorded
        row["error"] = error_text(e)
    run.add(row)


def attention(run: Run) -> None:
    b, h, s, d = (QUICK if run.quick else FULL)["attention"]
    keys = jax.random.split(jax.random.key(0), 3)
    q, k, v = (jax.random.normal(kk, (b, s, h * d), jnp.float32).astype(jnp.float16) for kk in keys)
    t = T("FLOAT16", (b, s, h * d))
    desc = dml.MultiheadAttentionOperatorDesc(
        query_tensor=t,
        key_tensor=t,
        value_tensor=t,
        output_tensor=t,
        scale=d**-0.5,
        mask_filter_value=-1e4,
        head_count=h,
    )
    case = f"MHA B={b} H={h} S={s} D={d} float16"
    lax_op = dml.compile_operator(desc, fast_paths=False)
    reference = jax.block_until_ready(lax_op(q, k, v)).astype(jnp.float32)
    v_max = float(jnp.max(jnp.abs(v.astype(jnp.float32))))

    def check(out):
        return {"max_err": float(jnp.max(jnp.abs(out.astype(jnp.float32) - reference))) / v_max}

    def tflops(seconds):
        return {"tflops": 4 * b * h * s * s * d / seconds / 1e12}

    path = fastpath.select(desc)
    op = dml.compile_operator(desc)
    _row(run, case, f"dml ({path.name if path else 'lax'})", lambda: op(q, k, v), jax_sync,
         tflops, check)  # fmt: skip
    _row(run, case, "dml lax", lambda: lax_op(q, k, v), jax_sync, tflops, check)
    q4, k4, v4 = (a.reshape(b, s, h, d) for a in (q, k, v))
    for impl in ("cudnn", "xla"):
        if impl == "cudnn" and run.report["backend"] != "gpu":
            run.skip("jax cudnn attention", "needs a CUDA GPU")
            continue
        f = jax.jit(functools.partial(jax.nn.dot_product_attention, implementation=impl))
        _row(run, case, f"jax {impl}", lambda f=f: f(q4, k4, v4), jax_sync, tflops)
    torch = run.torch
    if torch is not None:
        tq, tk, tv = (torch.randn(b, h, s, d, dtype=torch.float16, device="cuda") for _ in "qkv")
        sdpa = torch.nn.functional.scaled_dot_product_attention
        _row(run, case, "torch sdpa", lambda: sdpa(tq, tk, tv), run.torch_sync, tflops)
        del tq, tk, tv


def lstm(run: Run) -> None:
    hidden, steps, batch = (QUICK if run.quick else FULL)["lstm"]
    shape_x, shape_w = (1, steps, batch, hidden), (1, 1, 4 * hidden, hidden)
    x = jax.random.normal(jax.random.key(1), shape_x, jnp.float32).astype(jnp.float16)
    w, r = (
        (jax.random.normal(jax.random.key(i), shape_w) * 0.02).astype(jnp.float16) for i in (2, 3)
    )
    sig, tanh = dml.ActivationSigmoidOperatorDesc(), dml.ActivationTanhOperatorDesc()
    desc = dml.LstmOperatorDesc(
        input_tensor=T("FLOAT16", x.shape),
        weight_tensor=T("FLOAT16", w.shape),
        recurrence_tensor=T("FLOAT16", r.shape),
        output_sequence_tensor=T("FLOAT16", (steps, 1, batch, hidden)),
        activation_descs=[sig, tanh, tanh],
    )
    case = f"LSTM hidden {hidden} steps {steps} batch {batch} float16"
    lax_form = dml.compile_operator(desc, fast_paths=False)
    reference = jax.block_until_ready(lax_form(x, w, r)).astype(jnp.float32)

    def check(out):
        return {"max_abs_err": float(jnp.max(jnp.abs(out.astype(jnp.float32) - reference)))}

    def per_s(seconds):
        return {"steps_per_s": steps / seconds}

    forms = {
        "dml": dml.compile_operator(desc),
        "dml half precision": dml.compile_operator(desc, allow_half_precision=True),
        "dml lax": lax_form,
        "dml lax half precision": dml.compile_operator(
            desc, allow_half_precision=True, fast_paths=False
        ),
    }
    for impl, op in forms.items():
        _row(run, case, impl, lambda op=op: op(x, w, r), jax_sync, per_s, check)
    torch = run.torch
    if torch is not None:
        layer = torch.nn.LSTM(hidden, hidden, device="cuda", dtype=torch.float16)
        tx = torch.randn(steps, batch, hidden, device="cuda", dtype=torch.float16)
        with torch.no_grad():
            _row(run, case, "torch cudnn", lambda: layer(tx), run.torch_sync, per_s)
        del layer, tx


def run(run: Run) -> int:
    try:
        from dml_jax.kernels.jax_private import cudnn_version

        run.report["cudnn"] = cudnn_version()
    except Exception as e:  # not a CUDA build of jaxlib
        run.report["cudnn"] = f"unknown ({type(e).__name__})"
    if run.args.only != "lstm":
        attention(run)
    if run.args.only != "attention" and not run.over_budget():
        lstm(run)
    return 0


def table(report: dict) -> list[str]:
    lines = [
        (
            "Attention in TFLOP/s (4 B H S^2 D), LSTM in steps/s; errors against the lax lowering "
            "(attention: over max |V|)."
        ),
        "",
        "| case | implementation | rate | cold s | error |",
        "|---|---|---:|---:|---:|",
    ]
    for r in report["rows"]:
        rate = r.get("tflops", r.get("steps_per_s"))
        if rate:
            rate = f"{rate:,.0f}" if rate >= 1000 else f"{rate:.1f}"
        else:
            rate = r.get("error", "-")[:80]
        err = r.get("max_err", r.get("max_abs_err"))
        err = f"{err:.1e}" if err is not None else ""
        lines.append(f"| {r['case']} | {r['impl']} | {rate} | {r.get('cold_s', '')} | {err} |")
    return lines
