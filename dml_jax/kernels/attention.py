"""MULTIHEAD_ATTENTION and MULTIHEAD_ATTENTION1 on cuDNN's fused (flash) attention, through
``jax.nn.dot_product_attention(..., implementation="cudnn")``.

The lax lowering materializes the float32 logits and probabilities of every head (B * Hq * S * T
floats, written and read several times); cuDNN keeps them on chip. It computes Q K^T from the
float16 inputs with float32 accumulation, as the lax lowering does, but rounds the probabilities
to float16 before the second product and accumulates the softmax blockwise: docs/semantics.md
("Multi-head attention") states the tolerance the GPU tests hold it to.

``expressible`` says which descriptions cuDNN computes with DirectML's meaning:

- FLOAT16 (cuDNN takes float16 and bfloat16; DirectML has no bfloat16), without BiasTensor
  (cuDNN has no bias on Q, K and V: adding it in float16 first would round what Q K^T sees);
- one head size for Q, K and V, a multiple of 8 (cuDNN's bound on it, 256 on Hopper and 128
  before, and its other limits are found by ``fastpath.cuda_compiles``);
- any layout (separate, stacked, past / present, grouped heads): slices, reshapes and
  transposes of the same values;
- RelativePositionBias as cuDNN's additive bias (float16, as given);
- BOOLEAN masks whose MaskFilterValue is added exactly: a finite value that float16 holds, of
  magnitude <= 32768 (jax's own bound for cuDNN's masks), joins the bias (a row with every key
  masked is shifted as a whole, so it is left unmasked); -inf excludes the masked keys (cuDNN's
  mask) and a row without keys is NaN, as in the lax lowering;
- the sequence-length masks (MaskFilterValue replaces the logit) when MaskFilterValue <= -1000 or
  is -inf: cuDNN excludes the keys instead, which is the same wherever a row's largest kept
  logit exceeds MaskFilterValue by more than ln(T) + 9 (the replaced logits then weigh less than
  float16's rounding); a row without kept keys is set apart and gets DirectML's value, the mean
  of all values (NaN for -inf). KEY_SEQUENCE_LENGTH is cuDNN's key sequence length, the other
  two a boolean mask built by the lax lowering's own ``keep_mask``;
- a BOOLEAN mask that is causal (key j kept for query i exactly when j <= i, S == T) takes
  cuDNN's causal mode, which skips the masked blocks and reads no mask; any other mask is passed
  as it is. A mask held as a constant (a graph's ConstantDataNode) is tested when the program
  is traced; any other at run time (a conditional, whose predicate the host reads each call);
- PastSequenceLengthsTensor for one query position (S == 1, decoding) without a mask: the causal
  frontier is then the key length L_b + Skv, cuDNN's key sequence length, and a row with no
  position left is 0.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..enums import MultiheadAttentionMaskType as M
from ..errors import Validator
from ..fastpath import cuda_compiles, register_fast_path
from ..ops import attention as A
from ..ops import attention_parts as P
from . import decode_attention

BOOLEAN_FILTER_BOUND = 32768.0  # jax's mask value for cuDNN in float16 (-2 ** 15)
SET_FILTER_BOUND = -1000.0  # a replaced logit at or below this counts as excluded


def _float16_exact(value: float) -> bool:
    return abs(value) <= BOOLEAN_FILTER_BOUND and float(np.float16(value)) == value


def expressible(d: Any) -> bool:
    """Whether cuDNN's attention computes ``d`` (the rules in the module docstring); the
    description alone decides, nothing is traced."""
    if d.output_tensor.data_type.name != "FLOAT16" or d.bias_tensor is not None:
        return False
    g = A.analyze(d, Validator(d.operator_type))
    if g.head != g.v_head or g.head % 8:
        return False
    if g.lengths and (g.seq != 1 or d.mask_type is not M.NONE):
        return False
    value = float(d.mask_filter_value)
    if d.mask_type is M.BOOLEAN:
        return value == -math.inf or _float16_exact(value)
    if d.mask_type is not M.NONE:
        return value <= SET_FILTER_BOUND
    return True


def _by_query_head(a, g: P.Geometry):
    """{B, Hkv, ...} -> {B, Hq, ...}: query head n reads key/value head n // (Hq / Hkv)."""
    return jnp.repeat(a, g.q_heads // g.kv_heads, axis=1)


def _broadcast_kept(t: Any, a, shape: tuple[int, ...]):
    """``a`` (tensor ``t``, {B, H, S, T}) as ``shape``, with the batch and head dimensions ``t``
    broadcasts (stride 0) kept at size 1: a mask or bias shared by every head then stays shared
    when the heads are sharded over devices (cuDNN's partitioning splits a full-size one by
    batch only). The query and key dimensions are always whole: cuDNN takes a bias of the
    logits' sequence lengths only (a padding mask, {B, 1, 1, T}, is spread over the queries)."""
    a = a.reshape(shape)
    strides = t.strides
    if strides is None or len(strides) < len(shape):
        return a
    tail = strides[len(strides) - len(shape) :]
    kept = a[tuple(slice(0, 1) if s == 0 else slice(None) for s in tail)]
    # A mask the program holds as a constant (NumPy) stays NumPy, so that the causal test of
    # ``lower`` reads its values while tracing (a jnp result there is a tracer).
    xp = np if isinstance(kept, np.ndarray) else jnp
    return xp.broadcast_to(kept, kept.shape[:2] + tuple(shape[2:]))


def lower(d: Any, *arrays, qkv: tuple | None = None) -> tuple:
    """The cuDNN lowering of an ``expressible`` description (same outputs as the lax one).

    ``qkv``: the queries, keys and values ({B, S, H, D} each) where a graph epilogue computed
    them (``kernels.gemm``: the projection's GEMM writes them apart); the stacked input's
    position in ``arrays`` is then unused."""
    g = A.analyze(d, Validator(d.operator_type))
    x = dict(zip((p for p, _ in d.input_slots()), arrays))
    q, k, v = qkv if qkv is not None else P.split_heads(d, g, x)  # float16: no BiasTensor
    lengths = x.get("PastSequenceLengthsTensor")
    lengths = None if lengths is None else P.clamped_lengths(g, lengths)

    def heads_first(a):  # {B, seq, H, size} <-> {B, H, seq, size}
        return None if a is None else jnp.transpose(a, (0, 2, 1, 3))

    def past(name):
        a = x.get(name)
        return None if a is None else a.reshape(g.batch, g.kv_heads, g.past, g.head)

    keys = P.with_past(g, heads_first(k), past("PastKeyTensor"), lengths)  # {B, Hkv, T, D}
    values = P.with_past(g, heads_first(v), past("PastValueTensor"), lengths)

    shape = (g.batch, g.q_heads, g.seq, g.total)
    bias = mask = key_lengths = None
    rows_without_keys = None  # {B, S, Hq or 1, 1}: rows cuDNN cannot give DirectML's value
    if "RelativePositionBiasTensor" in x:
        bias = _broadcast_kept(
            d.relative_position_bias_tensor, x["RelativePositionBiasTensor"], shape
        )
    filter_value = float(d.mask_filter_value)
    if d.mask_type is M.BOOLEAN:
        zero = _broadcast_kept(d.mask_tensor, x["MaskTensor"], shape) == 0
        if filter_value == -math.inf:
            mask = ~zero
            rows_without_keys = heads_first(~jnp.any(mask, axis=3, keepdims=True))
        else:
            # A row whose keys are all masked is shifted as a whole, which changes nothing: it
            # is left unmasked rather than shifted in float16 (where RelativePositionBias +
            # MaskFilterValue would lose RelativePositionBias's low bits).
            zero = zero & jnp.any(~zero, axis=3, keepdims=True)
            added = jnp.where(zero, jnp.float32(filter_value), jnp.float32(0))
            bias = added if bias is None else bias.astype(jnp.float32) + added
            bias = bias.astype(jnp.float16)
    elif d.mask_type is M.KEY_SEQUENCE_LENGTH:
        count = x["MaskTensor"].reshape(g.batch).astype(jnp.int32)
        key_lengths = jnp.clip(count, 1, g.total)  # cuDNN's lengths; rows of 0 set apart
        rows_without_keys = (count <= 0).reshape(g.batch, 1, 1, 1)
    elif d.mask_type is not M.NONE:
        mask = P.keep_mask(d, g, x["MaskTensor"])  # {B, 1, S, T}
        rows_without_keys = heads_first(~jnp.any(mask, axis=3, keepdims=True))
    attended = (keys, values)
    if lengths is not None:
        end = lengths + g.kv_seq  # S == 1: the causal frontier is the end itself
        key_lengths = jnp.clip(end, 1, g.total)
        rows_without_keys = (end <= 0).reshape(g.batch, 1, 1, 1)
        attended = tuple(P.attended_rows(g, a, lengths) for a in attended)  # zeros past the end

    def attend(mask, is_causal: bool):
        out = jax.nn.dot_product_attention(
            q,
            heads_first(attended[0]),
            heads_first(attended[1]),
            bias=bias,
            mask=mask,
            scale=float(np.float32(d.scale)),
            key_value_seq_lengths=key_lengths,
            is_causal=is_causal,
            implementation="cudnn",
        )  # {B, S, Hq, D}
        if rows_without_keys is None or is_causal:  # a causal row keeps its own position
            return out
        if lengths is not None:
            fill = jnp.zeros((), out.dtype)
        elif filter_value == -math.inf:
            fill = jnp.full((), jnp.nan, out.dtype)
        else:  # every logit replaced by MaskFilterValue: equal weights
            mean = jnp.mean(values.astype(jnp.float32), axis=2)  # {B, Hkv, D}
            fill = _by_query_head(mean, g)[:, None].astype(out.dtype)  # {B, 1, Hq, D}
        return jnp.where(rows_without_keys, fill, out)

    if mask is not None and d.mask_type is M.BOOLEAN and g.seq == g.total:
        # A causal mask (a decoder's) is data, so it is recognized when it is known: cuDNN's
        # causal mode then skips the blocks above the diagonal and reads no mask (the same keys
        # kept). A mask the program holds as a constant (a graph's ConstantDataNode) is tested
        # now; any other at run time, a conditional whose predicate the host reads each call.
        causal = A.known_causal_mask(d, g)
        if causal is not None:
            out = attend(None, True) if causal else attend(mask, False)
        else:
            row = jax.lax.broadcasted_iota(jnp.int32, (g.seq, g.total), 0)
            causal = row >= jax.lax.broadcasted_iota(jnp.int32, (g.seq, g.total), 1)
            out = jax.lax.cond(
                jnp.all(mask == causal), lambda: attend(None, True), lambda: attend(mask, False)
            )
    else:
        out = attend(mask, False)
    results = [out.reshape(d.output_tensor.sizes).astype(d.output_tensor.dtype)]
    if d.output_present_key_tensor is not None:
        results.append(keys.reshape(d.output_present_key_tensor.sizes))
    if d.output_present_value_tensor is not None:
        results.append(values.reshape(d.output_present_value_tensor.sizes))
    return tuple(results)


@functools.lru_cache(maxsize=256)
def _cudnn_compiles(d: Any) -> bool:
    return cuda_compiles(functools.partial(lower, d), tuple(t for _, t in d.input_slots()))


def applies(d: Any) -> bool:
    """``expressible`` and compiled by this process's jax, cuDNN and GPU, and not a decode
    step that the decode-step kernel takes (``decode_attention.applies``: faster there)."""
    return expressible(d) and not decode_attention.applies(d) and _cudnn_compiles(d)


for _name in ("MULTIHEAD_ATTENTION", "MULTIHEAD_ATTENTION1"):
    register_fast_path(f"DML_OPERATOR_{_name}", "cudnn", applies, lower)
