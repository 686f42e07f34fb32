"""The float16 attention of the GPT stack's portable lowering, against plain JAX's: where the
exact lowering's time goes (issue 42, the portable-path goal).

One MULTIHEAD_ATTENTION of ``examples/networks.py``'s GPT stack (batch 8, 1024 tokens, 16 heads
of 64, the causal mask as a BOOLEAN MaskTensor, MaskFilterValue -inf), float16, and lowerings of
the same attention written in plain JAX:

- ``ref16``: the jax reference of ``examples/networks.py`` (the logits rounded to float16 by the
  first product, softmax in float32, the probabilities rounded to float16);
- ``ref32``: ``jax.nn.dot_product_attention``'s precision (float32 logits and softmax, float16
  probabilities);
- ``op exact`` / ``op half``: the operator on its lax lowering (``fast_paths=False``), without and
  with ALLOW_HALF_PRECISION_COMPUTATION;
- ``exact ...``: DirectML's precision as docs/semantics.md gives it (float32 logits and
  exponentials, the second product in float32), with the second product at several dot
  algorithms (HIGHEST, TF32 x3, BF16 x6 and x9; DEFAULT is TF32 once, a bound, not exact), the
  row sum from a column of ones in that product, the exponentials as three float16 pieces, the
  division before the product, and the heads split into chunks run one after another
  (``lax.map``, or unrolled) so that each chunk's S x T intermediates might stay in L2.

``err``: the largest absolute difference from a float64 reference on the first image (float16
outputs). Usage: ``PYTHONPATH=. python benchmarks/experiments/attention_precision.py [NAME
SUBSTRING ...]`` (``SMALL=1``: 4 x 128 tokens, any backend). The figures are in the README.
"""

import math
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import dml_jax as dml
from dml_jax.bench.harness import Timer, jax_sync

B, S, H, D = (4, 128, 16, 64) if os.environ.get("SMALL") else (8, 1024, 16, 64)
rng = np.random.default_rng(0)
q = jnp.asarray(rng.standard_normal((B, S, H, D)), jnp.float16)
k = jnp.asarray(rng.standard_normal((B, S, H, D)), jnp.float16)
v = jnp.asarray(rng.standard_normal((B, S, H, D)) * 3, jnp.float16)
causal_np = np.tril(np.ones((S, S), np.int32))
causal = jnp.asarray(causal_np)
scale = 1.0 / math.sqrt(D)


def ref16(q, k, v):
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32)
    s = jnp.where(causal.astype(bool), s * scale, -jnp.inf)
    w = jax.nn.softmax(s, axis=-1).astype(jnp.float16)
    return jnp.einsum("bhqk,bkhd->bqhd", w, v)


def ref32(q, k, v):
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.float32)
    s = jnp.where(causal.astype(bool), s * scale, -jnp.inf)
    w = jax.nn.softmax(s, axis=-1).astype(jnp.float16)
    return jnp.einsum("bhqk,bkhd->bqhd", w, v, preferred_element_type=jnp.float32).astype(
        jnp.float16
    )


def logits_e(q, k):
    s = lax.dot_general(
        jnp.transpose(q, (0, 2, 1, 3)),
        jnp.transpose(k, (0, 2, 1, 3)),
        (((3,), (3,)), ((0, 1), (0, 1))),
        preferred_element_type=jnp.float32,
    )
    s = s * jnp.float32(scale)
    s = jnp.where(causal == 0, s + jnp.float32(-jnp.inf), s)
    top = lax.stop_gradient(jnp.max(s, -1, keepdims=True))
    return s, top


def pv(w, vv, precision, out=jnp.float32):
    return lax.dot_general(
        w,
        vv,
        (((3,), (1,)), ((0, 1), (0, 2))),
        precision=precision,
        preferred_element_type=out,
    )  # {B, H, S, Dv}


def finish(o, total):
    return jnp.transpose(o / total, (0, 2, 1, 3)).astype(jnp.float16)


def exact(precision):
    def f(q, k, v):
        s, top = logits_e(q, k)
        e = jnp.exp(s - top)
        total = jnp.sum(e, -1, keepdims=True)
        return finish(pv(e, v.astype(jnp.float32), precision), total)

    return f


def exact_norm_first(precision):
    def f(q, k, v):
        s, top = logits_e(q, k)
        e = jnp.exp(s - top)
        w = e / jnp.sum(e, -1, keepdims=True)
        o = pv(w, v.astype(jnp.float32), precision)
        return jnp.transpose(o, (0, 2, 1, 3)).astype(jnp.float16)

    return f


def exact_ones(precision):
    def f(q, k, v):
        s, top = logits_e(q, k)
        e = jnp.exp(s - top)
        vv = v.astype(jnp.float32)
        ones = jnp.ones(vv.shape[:-1] + (1,), jnp.float32)
        o = pv(e, jnp.concatenate([vv, ones], -1), precision)
        return finish(o[..., :D], o[..., D:])

    return f


def pieces16(q, k, v):
    s, top = logits_e(q, k)
    e = jnp.exp(s - top)
    total = jnp.sum(e, -1, keepdims=True)
    p1 = e.astype(jnp.float16)
    r1 = (e - p1.astype(jnp.float32)) * jnp.float32(2.0**11)
    p2 = r1.astype(jnp.float16)
    r2 = (r1 - p2.astype(jnp.float32)) * jnp.float32(2.0**11)
    p3 = r2.astype(jnp.float16)
    w = jnp.concatenate([p1, p2, p3], 2)  # {B, H, 3S, T}
    o = pv(w, v, None)
    o1, o2, o3 = jnp.split(o, 3, 2)
    o = o1 + (o2 + o3 * jnp.float32(2.0**-11)) * jnp.float32(2.0**-11)
    return finish(o, total)


def operator(half):
    T = dml.TensorDesc
    sep = T("FLOAT16", (B, S, H * D))
    desc = dml.MultiheadAttentionOperatorDesc(
        query_tensor=sep,
        key_tensor=sep,
        value_tensor=sep,
        mask_tensor=T("INT32", (B, H, S, S), strides=(0, 0, S, 1)),
        output_tensor=T("FLOAT16", (B, S, H * D)),
        scale=scale,
        mask_filter_value=-math.inf,
        head_count=H,
        mask_type="BOOLEAN",
    )
    op = dml.compile_operator(desc, fast_paths=False, allow_half_precision=half)

    def f(q, k, v):
        flat = (a.reshape(B, S, H * D) for a in (q, k, v))
        # The mask broadcast inside the traced function (a stride-0 view, as in the network's
        # graph), not a materialized {B, H, S, S} constant.
        mask = jnp.broadcast_to(causal, (B, H, S, S))
        return op(*flat, mask).reshape(B, S, H, D)

    return f


def chunked(n, precision, unroll=False):
    def body(args):
        qc, kc, vc = args  # {c, S, D}
        sc = lax.dot_general(
            qc, kc, (((2,), (2,)), ((0,), (0,))), preferred_element_type=jnp.float32
        ) * jnp.float32(scale)
        sc = jnp.where(causal == 0, sc + jnp.float32(-jnp.inf), sc)
        top = jnp.max(sc, -1, keepdims=True)
        e = jnp.exp(sc - top)
        total = jnp.sum(e, -1, keepdims=True)
        o = lax.dot_general(
            e,
            vc.astype(jnp.float32),
            (((2,), (1,)), ((0,), (0,))),
            precision=precision,
            preferred_element_type=jnp.float32,
        )
        return (o / total).astype(jnp.float16)

    def f(q, k, v):
        def heads(a):
            return jnp.transpose(a, (0, 2, 1, 3)).reshape(n, B * H // n, S, D)

        args = (heads(q), heads(k), heads(v))
        if unroll:
            o = jnp.stack([body((a[i], b_[i], c_[i])) for i, (a, b_, c_) in enumerate([args] * n)])
        else:
            o = lax.map(body, args)
        return jnp.transpose(o.reshape(B, H, S, D), (0, 2, 1, 3))

    return f


P = lax.Precision.HIGHEST
variants = {
    "chunk map 8": chunked(8, P),
    "chunk map 16": chunked(16, P),
    "chunk map 32": chunked(32, P),
    "chunk map 64": chunked(64, P),
    "chunk unrolled 16": chunked(16, P, True),
    "chunk map 16 TF32x3": chunked(16, "TF32_TF32_F32_X3"),
    "chunk map 32 TF32x3": chunked(32, "TF32_TF32_F32_X3"),
    "ref16 (jax reference)": ref16,
    "ref32 (f32 logits, f16 probs)": ref32,
    "op exact (current lax)": operator(False),
    "op half": operator(True),
    "exact HIGHEST": exact(P),
    "exact norm-first HIGHEST": exact_norm_first(P),
    "exact TF32x3": exact("TF32_TF32_F32_X3"),
    "exact BF16x6": exact("BF16_BF16_F32_X6"),
    "exact BF16x9": exact("BF16_BF16_F32_X9"),
    "exact ones TF32x3": exact_ones("TF32_TF32_F32_X3"),
    "exact ones HIGHEST": exact_ones(P),
    "exact f16 pieces": pieces16,
    "exact DEFAULT (tf32, bound)": exact(None),
}
only = sys.argv[1:]

# float64 reference on batch 0
qn, kn, vn = (np.asarray(a[0], np.float64) for a in (q, k, v))
s = np.einsum("qhd,khd->hqk", qn, kn) * scale
s = np.where(causal_np.astype(bool), s, -np.inf)
s = np.exp(s - s.max(-1, keepdims=True))
w64 = s / s.sum(-1, keepdims=True)
want = np.einsum("hqk,khd->qhd", w64, vn)

timer = Timer(sample_s=0.2, samples=5)
base = None
for name, fn in variants.items():
    if only and not any(o in name for o in only):
        continue
    try:
        f = jax.jit(fn)
        t0 = time.perf_counter()
        comp = f.lower(q, k, v).compile()
        ct = time.perf_counter() - t0
        txt = comp.as_text()
        out = np.asarray(f(q, k, v)[0], np.float64)
        err = np.abs(out - want).max()
        ms = timer.run(lambda: f(q, k, v), jax_sync) * 1e3
        base = base or ms
        nf = txt.count("fusion(") + txt.count("custom-call(")
        tri = txt.count("__triton_gemm")
        cub = txt.count("__cublas")
        print(
            f"{name:34s} {ms:8.3f} ms  x{base / ms:5.2f}  err {err:.2e}  compile {ct:5.1f}s "
            f"ops~{nf} triton_gemm {tri} cublas {cub}",
            flush=True,
        )
    except Exception as e:
        print(f"{name:34s} FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
