"""The graph pair DEQUANTIZE -> GEMM on the 4-bit weight kernel (``kernels/int4_gemm.py``), and
the RMS normalizations it takes as its A's prologue: where a DEQUANTIZE of blocked 4-bit codes
is read only by a GEMM as its B (a com.microsoft MatMulNBits model's product), the GEMM's lax
lowering runs with its product the kernel's, over the codes, scales and zero points DEQUANTIZE
reads (``fastpath.register_epilogue``); the products ``int4_gemm.plan`` takes (1 to 16 rows of
A) and no others.

A LLaMA export's RMS normalization before such a product (CAST to float32, the normalization,
CAST back, the gamma MULTIPLY; or the model builder's one SimplifiedLayerNormalization node)
is computed by the kernel as it reads A (``fastpath.register_prologue``), where otherwise it
was two or three small kernels of its own before each product on a GPU; each form has its
switch, timed in a 1B-class decoder (below). (The SwiGLU gate before a down projection, SWISH
then the MULTIPLY by up, was a third prologue, timed on an H200 2026-11-30 and removed: the
same 205 kernels a token, 1,352 tokens/s against 1,361, its run already sharing a kernel with
the split gate-up product's addition; benchmarks/experiments/README.md.)
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from ..fastpath import packed_bytes, register_epilogue, register_prologue
from . import int4_gemm

_FOUR_BIT = (jnp.dtype(jnp.uint4), jnp.dtype(jnp.int4))


def _trailing(sizes: tuple[int, ...]) -> tuple[int, ...] | None:
    """The last two sizes where every one before them is 1, else None."""
    return tuple(sizes[-2:]) if len(sizes) >= 2 and all(s == 1 for s in sizes[:-2]) else None


def _view(deq: Any, gemm: Any) -> int4_gemm.View | None:
    """The kernel's view of GEMM ``gemm`` reading DEQUANTIZE ``deq``'s output as its B, or
    None: 4-bit codes {N, K} with one scale (and zero point) per row and block of K, a GEMM of
    A {M, K} by TransB(B {N, K}) in the dequantized type."""
    from ..enums import MatrixTransform

    x, out = deq.input_tensor, deq.output_tensor
    if x.dtype not in _FOUR_BIT or out.dtype not in (jnp.float16, jnp.float32):
        return None
    nk = _trailing(x.sizes)
    shapes = {_trailing(p.sizes) for p in deq.quantization_tensors}
    if nk is None or len(shapes) != 1 or None in shapes:
        return None
    (n, k), ((rows, blocks),) = nk, shapes
    if rows != n or k % blocks:
        return None
    if gemm.trans_a is not MatrixTransform.NONE or gemm.trans_b is not MatrixTransform.TRANSPOSE:
        return None
    mk = _trailing(gemm.a_tensor.sizes)
    if mk is None or mk[1] != k or _trailing(gemm.b_tensor.sizes) != (n, k):
        return None
    if gemm.a_tensor.dtype != out.dtype or gemm.output_tensor.dtype != out.dtype:
        return None
    return int4_gemm.plan(mk[0], n, k, k // blocks)


def _applies(deq: Any, gemm: Any, slot: int) -> bool:
    return slot == 1 and _view(deq, gemm) is not None


def _lowered(deq: Any, gemm: Any, producer, a, others, norm=None):
    """GEMM's lax lowering of A ``a`` and the other inputs ``others`` (C), its product the
    kernel's over DEQUANTIZE's arrays ``producer`` (A normalized in it by ``norm``)."""
    from ..ops.gemm_conv import lower_gemm

    q, scale, *zero = producer
    v = _view(deq, gemm)
    params = [p.reshape(v.n, v.k // v.block) for p in (scale, *zero)]
    raw = packed_bytes(q)  # a held constant's bytes: read as they are
    codes = q.reshape(v.n, v.k) if raw is None else raw.reshape(v.n, v.k // 2)

    def product(a):
        y = int4_gemm.int4_product(a.reshape(v.m, v.k), codes, *params,
                                   signed=q.dtype == jnp.int4, norm=norm)  # fmt: skip
        return y.reshape(a.shape[:-1] + (v.n,))

    return lower_gemm(gemm, a, None, *others, product=product)


def _lower(deq: Any, gemm: Any, slot: int, producer, others):
    a, *c = others
    return _lowered(deq, gemm, producer, a, c)


_PAIR = register_epilogue(
    "DML_OPERATOR_DEQUANTIZE", "DML_OPERATOR_GEMM", "kernel", _applies, _lower
)


# ---------------------------------------------------------------------------------------------
# The RMS normalization that alone feeds A: CAST (T -> float32), MEAN_VARIANCE_NORMALIZATION2
# (no mean, the last axis), CAST back, MULTIPLY by gamma (a LLaMA export's RMSNorm), computed
# by the kernel as it reads A (its normalization and its CASTs otherwise two or three small
# kernels of their own before each such product on a GPU)

# Whether the pair takes such a run as its prologue. One H200, 2026-11-29, the 1B-class int4
# decoder at batch 1 (prompt 16, 128 tokens; ``decode_step_gpu.py --int4 --int4-only --set ""
# "dml_jax.kernels.int4_pair.RMS_PROLOGUE=True"``), off / on: 1,260 / 1,312 tokens/s in the
# loop, 1,300 / 1,365 a dispatch a token, 293 / 228 kernels a token (the products that take it
# about 0.7 us longer each, the run's own kernels gone): on.
RMS_PROLOGUE = True
_RUN = (
    "DML_OPERATOR_CAST",
    "DML_OPERATOR_MEAN_VARIANCE_NORMALIZATION2",
    "DML_OPERATOR_CAST",
    "DML_OPERATOR_ELEMENT_WISE_MULTIPLY",
)


def _takes_prologue(deq: Any, gemm: Any, slot: int) -> bool:
    """Whether the pair's kernel may normalize its A (a prologue): a float16 A of one row read
    in the bytes form."""
    v = _view(deq, gemm) if slot == 1 else None
    return v is not None and v.widen_row and v.bytes_form and gemm.a_tensor.dtype == jnp.float16


def _rms_mvn(mvn: Any, k: int) -> bool:
    """Whether ``mvn`` is an RMS normalization of one row of ``k`` values: no mean, the
    variance, over the last axis, without bias or activation."""
    if mvn.operator_type != "DML_OPERATOR_MEAN_VARIANCE_NORMALIZATION2":
        return False
    x = mvn.input_tensor
    return (
        not mvn.use_mean
        and mvn.use_variance
        and mvn.bias_tensor is None
        and mvn.fused_activation is None
        and tuple(mvn.axes) == (len(x.sizes) - 1,)
        and x.sizes[-1] == k == x.element_count
    )


def _rms_run(descs: tuple, slots: tuple, deq: Any, gemm: Any, slot: int) -> bool:
    """Whether ``descs`` is the RMS normalization run above, in float32 between float16
    CASTs, of the A the pair's kernel may normalize."""
    if not RMS_PROLOGUE or tuple(d.operator_type for d in descs) != _RUN:
        return False
    if tuple(slots[:2]) != (0, 0) or not _takes_prologue(deq, gemm, slot):
        return False
    up, mvn, down, mul = descs
    t, f32 = jnp.float16, jnp.float32
    if not _rms_mvn(mvn, gemm.a_tensor.sizes[-1]) or mvn.scale_tensor is not None:
        return False
    if up.input_tensor.dtype != t or down.output_tensor.dtype != t:
        return False
    if any(x.dtype != f32 for x in (up.output_tensor, mvn.input_tensor, mvn.output_tensor)):
        return False
    gamma = (mul.a_tensor, mul.b_tensor)[1 - slots[2]]
    tensors = (up.input_tensor, up.output_tensor, mvn.output_tensor, down.output_tensor,
               mul.output_tensor, gamma)  # fmt: skip
    # one row of K values each (the GEMM may read the last as a reshape of it)
    return all(x.sizes == mvn.input_tensor.sizes for x in tensors) and all(
        x.dtype == t for x in (mul.output_tensor, gamma)
    )


def _lower_rms_run(descs, slots, groups, deq, gemm, slot, producer, others):
    (x,), _, _, (gamma,) = groups  # the CAST's input; the MULTIPLY's gamma
    norm = (gamma.reshape(1, -1), float(descs[1].epsilon), False)
    return _lowered(deq, gemm, producer, x.reshape(gemm.a_tensor.sizes), others, norm)


register_prologue(_PAIR, 0, "rms", _rms_run, _lower_rms_run, len(_RUN))


# The same normalization as ONNX Runtime GenAI's model builder writes it (SimplifiedLayerNorm-
# alization and its Skip form in float16): one MEAN_VARIANCE_NORMALIZATION2 without its mean
# over the last axis, gamma its Scale, rounded once. There it replaces one kernel a norm, not
# the two or three of the exporter's run, so RMS_PROLOGUE's timing does not carry over: its own
# switch, timed in the model-builder decoder on an H200 (``decode_step_gpu.py --builder --int4
# --int4-only --set "" "dml_jax.kernels.int4_pair.RMS_SCALED_PROLOGUE=True"``), off / on: 1,114
# (1,099-1,114) / 1,176 (1,157-1,183) tokens/s in the loop, 361 / 296 kernels a token (1,177
# again in a second run).
RMS_SCALED_PROLOGUE = True


def _rms_scaled_run(descs: tuple, slots: tuple, deq: Any, gemm: Any, slot: int) -> bool:
    """Whether ``descs`` is that one node, in float16, of the A the pair's kernel may
    normalize."""
    if not RMS_SCALED_PROLOGUE or len(descs) != 1 or not _takes_prologue(deq, gemm, slot):
        return False
    (mvn,) = descs
    if not _rms_mvn(mvn, gemm.a_tensor.sizes[-1]) or mvn.scale_tensor is None:
        return False
    x, y, gamma = mvn.input_tensor, mvn.output_tensor, mvn.scale_tensor
    return all(d.dtype == jnp.float16 for d in (x, y, gamma)) and x.sizes == y.sizes == gamma.sizes


def _lower_rms_scaled_run(descs, slots, groups, deq, gemm, slot, producer, others):
    ((x, gamma),) = groups
    norm = (gamma.reshape(1, -1), float(descs[0].epsilon), True)
    return _lowered(deq, gemm, producer, x.reshape(gemm.a_tensor.sizes), others, norm)


register_prologue(_PAIR, 0, "rms_scaled", _rms_scaled_run, _lower_rms_scaled_run, 1)
