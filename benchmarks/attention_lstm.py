"""GPU timing of MULTIHEAD_ATTENTION and LSTM against their anchors (issue "Recurrent networks
and multi-head attention"), with the variants the lowerings were chosen from.

Attention: B=16, 16 heads, sequence 2048, head size 128, float16, separate Q, K, V, in TFLOP/s
(4 * B * H * S^2 * D):

- ``dml``: MULTIHEAD_ATTENTION as compiled (cuDNN fast path, ``dml_jax.kernels.attention``);
- ``dml lax``: the lax lowering (``compile_operator(..., fast_paths=False)``);
- the anchors: ``jax.nn.dot_product_attention`` (cuDNN and XLA) and PyTorch's
  ``scaled_dot_product_attention``;
- lax variants (the lowering's math for this case, written out): ``f32 HIGHEST`` (Q, K, V
  widened and both products float32, the lowering before float16 operands), ``f16 QK, f32 PV``
  (only the first product on float16), ``f16 QK, X6 PV`` (the second product with XLA's
  BF16_BF16_F32_X6 algorithm), ``f16 QK, f16x3 PV`` (the lowering: three float16 pieces of the
  probabilities), ``f16 QK, f16x1 PV`` (probabilities rounded to float16: the half-precision
  flag).

Each compiled dml form is also checked against the lax lowering on the same inputs:
``max_err`` is max |fast - lax| / max |V| (docs/semantics.md allows 2^-9 plus 2^-9 of |lax|).

LSTM: hidden 1024, 512 steps, batch 64, input 1024, float16, in steps/s: ``dml`` (the operator:
its fast path runs the lax lowering here, the state's rows scaled by powers of two and entering
the recurrent product as three float16 pieces, ``unroll`` 8), ``dml half precision``
(``allow_half_precision=True``: on a Hopper GPU the persistent kernel of ``kernels/lstm.py``, one
piece), ``dml lax`` and ``dml lax half precision`` (the same with ``fast_paths=False``),
PyTorch's ``torch.nn.LSTM`` (cuDNN, float16), then the variants: the lowering with other
``unroll`` values, ``scan f16x3 unroll 8`` (the pieces without the rows' scaling, valid only for
|state| < 4: what the scaling costs) and ``scan f32 HIGHEST unroll 1`` (float32 products, the
lowering before the pieces). Each is checked against the float32 HIGHEST scan on the same inputs
(``max_abs_err``).

Hot times: the best and the median of 3 samples, each many dispatches and one sync; cold
(trace + compile + first call) separately. Every row is printed and written to ``--out`` (JSON)
as soon as it is measured (the anchors and dml's forms first, then the variants); a failing row
records its error and the run goes on. Run from the
repository root on a CUDA machine:

    XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=. python benchmarks/attention_lstm.py --out OUT.json
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time
import traceback

import jax
import jax.numpy as jnp
from jax import lax

import dml_jax as dml
from dml_jax import fastpath, registry
from dml_jax.bench import environment
from dml_jax.ops import recurrent
from dml_jax.ops.attention import _weights
from dml_jax.precision import float16_pieces

B, H, S, D = 16, 16, 2048, 128
HIDDEN, STEPS, BATCH = 1024, 512, 64
T = dml.TensorDesc
ROWS: list[dict] = []
OUT: str | None = None


def _emit(row: dict) -> None:
    ROWS.append(row)
    print(json.dumps(row), flush=True)
    if OUT:
        with open(OUT, "w") as f:
            json.dump({"environment": _env(), "rows": ROWS}, f, indent=1)


@functools.lru_cache(maxsize=1)
def _env() -> dict:
    env = environment()
    try:
        from jax._src.lib import cuda_versions

        env["cudnn"] = cuda_versions.cudnn_get_version()
    except Exception as e:
        env["cudnn"] = f"unknown ({type(e).__name__})"
    return env


def timeit(call, sync, reps) -> dict:
    t = time.perf_counter()
    sync(call())
    cold = time.perf_counter() - t
    samples = []
    for _ in range(3):
        t = time.perf_counter()
        out = None
        for _ in range(reps):
            out = call()
        sync(out)
        samples.append((time.perf_counter() - t) / reps)
    return {"s": min(samples), "median_s": statistics.median(samples), "cold_s": round(cold, 3)}


def _row(case: str, impl: str, measure, rate) -> None:
    """Times ``measure() -> dict`` (keys of ``timeit`` and extras); ``rate(seconds)`` adds the
    throughput. Errors are recorded, not raised."""
    row = {"case": case, "impl": impl}
    try:
        row.update(measure())
        row.update(rate(row["s"]))
    except Exception as e:  # a path this device, jax or PyTorch lacks: recorded
        row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        traceback.print_exc()
    _emit(row)


# --- attention --------------------------------------------------------------------------------


def _tflops(seconds: float) -> dict:
    return {"tflops": round(4 * B * H * S * S * D / seconds / 1e12, 1)}


def _attention_variant(pv: str):
    """The lax lowering's math for separate Q, K, V without mask, with the second product as
    ``pv`` (and Q, K, V widened first for ``f32``)."""

    def fn(q, k, v):
        if pv == "f32":
            q, k, v = (a.astype(jnp.float32) for a in (q, k, v))
        q, k, v = (a.reshape(B, S, H, D) for a in (q, k, v))
        kt, vt = jnp.transpose(k, (0, 2, 1, 3)), jnp.transpose(v, (0, 2, 1, 3))
        logits = jnp.einsum(
            "bshd,bhtd->bhst",
            q,
            kt,
            precision=lax.Precision.HIGHEST,
            preferred_element_type=jnp.float32,
        )
        w = _weights(logits * jnp.float32(D**-0.5))

        def product(a, b, precision=lax.Precision.HIGHEST):
            return jnp.einsum(
                "bhst,bhtd->bshd", a, b, precision=precision, preferred_element_type=jnp.float32
            )

        if pv in ("f32", "f16 QK, f32 PV"):
            out = product(w, vt.astype(jnp.float32))
        elif pv == "f16 QK, X6 PV":
            out = product(w, vt.astype(jnp.float32), lax.DotAlgorithmPreset.BF16_BF16_F32_X6)
        else:
            pieces = float16_pieces(w, 3 if pv == "f16 QK, f16x3 PV" else 1)
            out = sum(product(p, vt) for p in pieces) * jnp.float32(2.0**-14)
        return out.reshape(B, S, H * D).astype(jnp.float16)

    return jax.jit(fn)


def attention_rows(variants: bool) -> None:
    """The anchors and dml's two forms, or (``variants``) the lax variants."""
    keys = jax.random.split(jax.random.key(0), 3)
    q, k, v = (jax.random.normal(kk, (B, S, H * D), jnp.float32).astype(jnp.float16) for kk in keys)
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
    case = f"MHA B={B} H={H} S={S} D={D} float16"
    lax_op = dml.compile_operator(desc, fast_paths=False)
    reference = {}
    v_max = float(jnp.max(jnp.abs(v.astype(jnp.float32))))

    def checked(fn):
        out = fn()
        if "lax" not in reference:
            reference["lax"] = jax.block_until_ready(lax_op(q, k, v))
        err = jnp.max(jnp.abs(out.astype(jnp.float32) - reference["lax"].astype(jnp.float32)))
        return {"max_err": float(err) / v_max}

    def dml_row(op):
        def measure():
            timing = timeit(lambda: op(q, k, v), jax.block_until_ready, reps=10)
            return {**timing, **checked(lambda: op(q, k, v))}

        return measure

    if variants:
        for pv in (
            "f16 QK, f16x3 PV",
            "f32",
            "f16 QK, f32 PV",
            "f16 QK, X6 PV",
            "f16 QK, f16x1 PV",
        ):
            fn = _attention_variant(pv)

            def measure(fn=fn):
                timing = timeit(lambda: fn(q, k, v), jax.block_until_ready, reps=5)
                return {**timing, **checked(lambda: fn(q, k, v))}

            _row(case, f"lax variant {pv}", measure, _tflops)
        return
    path = fastpath.select(desc)
    _row(
        case, f"dml ({path.name if path else 'lax'})", dml_row(dml.compile_operator(desc)), _tflops
    )
    _row(case, "dml lax", dml_row(lax_op), _tflops)
    q4, k4, v4 = (a.reshape(B, S, H, D) for a in (q, k, v))
    for impl in ("cudnn", "xla"):
        f = jax.jit(functools.partial(jax.nn.dot_product_attention, implementation=impl))
        _row(
            case,
            f"jax {impl}",
            lambda f=f: timeit(lambda: f(q4, k4, v4), jax.block_until_ready, reps=10),
            _tflops,
        )

    def torch_sdpa():
        import torch

        tq, tk, tv = (torch.randn(B, H, S, D, dtype=torch.float16, device="cuda") for _ in range(3))
        sdpa = torch.nn.functional.scaled_dot_product_attention
        return timeit(lambda: sdpa(tq, tk, tv), lambda _: torch.cuda.synchronize(), reps=10)

    _row(case, "torch sdpa", torch_sdpa, _tflops)


# --- LSTM -------------------------------------------------------------------------------------


def _steps(seconds: float) -> dict:
    return {"steps_per_s": round(STEPS / seconds)}


def _recurrent_product(kind: str):
    """h {batch, hidden} float32 times R^T (R {4 * hidden, hidden} float16) in float32."""

    def dot(a, b):
        return lax.dot_general(
            a,
            b,
            (((1,), (1,)), ((), ())),
            precision=lax.Precision.HIGHEST,
            preferred_element_type=jnp.float32,
        )

    def product(h, r):
        if kind == "f32 HIGHEST":
            return dot(h, r.astype(jnp.float32))
        # |h| <= 1 here (o * tanh(c)): float16 pieces of the state, stacked along the batch
        pieces = float16_pieces(h, 3)
        out = dot(jnp.concatenate(pieces, axis=0), r).reshape(3, *h.shape[:-1], -1)
        return jnp.sum(out, axis=0) * jnp.float32(2.0**-14)

    return product


def _scan_lstm(kind: str, unroll: int):
    """The lax lowering's LSTM for this case (forward, no bias, zero initial state, default
    activations, the sequence output), with the recurrent product ``kind``."""
    product = _recurrent_product(kind)

    def fn(x, w, r):
        x, w, r = x[0], w[0, 0], r[0, 0]
        xw = jnp.einsum(
            "tbi,gi->tbg", x, w, precision=lax.Precision.HIGHEST, preferred_element_type=jnp.float32
        )
        zero = jnp.zeros((x.shape[1], HIDDEN), jnp.float32)

        def step(carry, xw_t):
            h, c = carry
            i, o, f, g = jnp.split(xw_t + product(h, r), 4, axis=-1)
            c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
            h = jax.nn.sigmoid(o) * jnp.tanh(c)
            return (h, c), h

        _, ys = lax.scan(step, (zero, zero), xw, unroll=unroll)
        return ys[:, None].astype(jnp.float16)

    return jax.jit(fn)


def _lowering_with_unroll(desc, unroll: int):
    """The lowering traced with ``unroll`` steps per loop iteration (compiled apart from the
    operator cache)."""
    lower = registry.lookup(desc.operator_type).lower

    def fn(*args):
        saved = recurrent._UNROLL
        recurrent._UNROLL = unroll
        try:
            return lower(desc, *args)[0]
        finally:
            recurrent._UNROLL = saved

    return jax.jit(fn)


def lstm_rows(variants: bool) -> None:
    """The anchor and dml's forms, or (``variants``) the other unrolls and scans."""
    shape_x, shape_w = (1, STEPS, BATCH, HIDDEN), (1, 1, 4 * HIDDEN, HIDDEN)
    x = jax.random.normal(jax.random.key(1), shape_x, jnp.float32).astype(jnp.float16)
    w, r = (
        (jax.random.normal(jax.random.key(i), shape_w) * 0.02).astype(jnp.float16) for i in (2, 3)
    )
    sig, tanh = dml.ActivationSigmoidOperatorDesc(), dml.ActivationTanhOperatorDesc()
    desc = dml.LstmOperatorDesc(
        input_tensor=T("FLOAT16", x.shape),
        weight_tensor=T("FLOAT16", w.shape),
        recurrence_tensor=T("FLOAT16", r.shape),
        output_sequence_tensor=T("FLOAT16", (STEPS, 1, BATCH, HIDDEN)),
        activation_descs=[sig, tanh, tanh],
    )
    case = f"LSTM hidden {HIDDEN} steps {STEPS} batch {BATCH} float16"
    highest = _scan_lstm("f32 HIGHEST", 1)
    reference = {}

    def checked(fn):
        if "f32" not in reference:
            reference["f32"] = jax.block_until_ready(highest(x, w, r))
        err = jnp.max(jnp.abs(fn().astype(jnp.float32) - reference["f32"].astype(jnp.float32)))
        return {"max_abs_err": float(err)}

    def measure_with(fn):
        def measure():
            timing = timeit(lambda: fn(x, w, r), jax.block_until_ready, reps=3)
            return {**timing, **checked(lambda: fn(x, w, r))}

        return measure

    if variants:
        for unroll in (1, 4, 16):
            fn = _lowering_with_unroll(desc, unroll)
            _row(case, f"dml unroll {unroll}", measure_with(fn), _steps)
        _row(case, "scan f16x3 unroll 8", measure_with(_scan_lstm("f16x3", 8)), _steps)
        _row(case, "scan f32 HIGHEST unroll 1", measure_with(highest), _steps)
        return
    _row(case, "dml", measure_with(dml.compile_operator(desc)), _steps)
    half = dml.compile_operator(desc, allow_half_precision=True)
    _row(case, "dml half precision", measure_with(half), _steps)
    lax_form = dml.compile_operator(desc, fast_paths=False)
    _row(case, "dml lax", measure_with(lax_form), _steps)
    lax_half = dml.compile_operator(desc, allow_half_precision=True, fast_paths=False)
    _row(case, "dml lax half precision", measure_with(lax_half), _steps)

    def torch_lstm():
        import torch

        lstm = torch.nn.LSTM(HIDDEN, HIDDEN, device="cuda", dtype=torch.float16)
        tx = torch.randn(STEPS, BATCH, HIDDEN, device="cuda", dtype=torch.float16)
        with torch.no_grad():
            return timeit(lambda: lstm(tx), lambda _: torch.cuda.synchronize(), reps=3)

    _row(case, "torch cudnn", torch_lstm, _steps)


def main():
    global OUT
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="JSON file for the environment and every row")
    parser.add_argument("--only", choices=("attention", "lstm"), help="one half of the run")
    args = parser.parse_args()
    OUT = args.out
    print(json.dumps(_env()), flush=True)
    # The anchors and dml's forms first, the variants after: a run cut short keeps the former.
    for variants in (False, True):
        if args.only != "lstm":
            attention_rows(variants)
        if args.only != "attention":
            lstm_rows(variants)


if __name__ == "__main__":
    main()
