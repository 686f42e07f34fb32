"""MULTIHEAD_ATTENTION's cuDNN path recognizes a causal BOOLEAN mask at run time and takes
cuDNN's causal mode (no mask read, masked blocks skipped); any other mask goes as it is. cuDNN is
replaced by stand-ins: one that reports the mode it was asked for, and jax's XLA implementation."""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_cudnn_paths import (  # noqa: F401 (xla_attention is a fixture)
    _attention,
    _inputs,
    _lax,
    assert_attention_close,
    xla_attention,
)

from dml_jax.kernels import attention as KA


@pytest.fixture
def mode_attention(monkeypatch):
    """cuDNN's attention replaced by one that answers 1 in causal mode and 2 otherwise."""

    def mode(q, k, v, *, implementation=None, is_causal=False, mask=None, **kwargs):
        assert implementation == "cudnn" and not (is_causal and mask is not None)
        return jnp.full(q.shape[:3] + v.shape[3:], 1 if is_causal else 2, q.dtype)

    monkeypatch.setattr(jax.nn, "dot_product_attention", mode)


def _causal_case(flip: bool):
    desc = _attention(s=6, kv=6, hq=2, mask_type="BOOLEAN", mask_filter_value=-math.inf)
    assert KA.expressible(desc)
    inputs = _inputs(desc, seed=4)
    mask = np.broadcast_to(np.tril(np.ones((6, 6), np.int32)), desc.mask_tensor.sizes).copy()
    if flip:
        mask[1, 0, 2, 4] = 1  # one key beyond the diagonal: no longer causal
    slots = [p for p, _ in desc.input_slots()]
    inputs[slots.index("MaskTensor")] = mask
    return desc, inputs


FLIPS = pytest.mark.parametrize("flip", [False, True], ids=["causal", "one key past the diagonal"])


@FLIPS
def test_the_mode_follows_the_mask(flip, mode_attention):
    desc, inputs = _causal_case(flip)
    got = np.asarray(jax.jit(functools.partial(KA.lower, desc))(*inputs)[0])
    assert set(got.ravel().tolist()) == {2 if flip else 1}


@FLIPS
@pytest.mark.usefixtures("xla_attention")
def test_both_modes_match_lax(flip):
    desc, inputs = _causal_case(flip)
    got = jax.jit(functools.partial(KA.lower, desc))(*inputs)
    assert_attention_close(desc, inputs, got, _lax(desc)(*inputs))


@pytest.mark.usefixtures("xla_attention")
@pytest.mark.parametrize(
    "filter_value, calls",
    [
        # -10000: the mask is added to the bias, one call
        (-10000.0, [((1, 2, 6, 6), None)]),
        # -inf: a mask, and the causal mode traced beside it (lax.cond)
        (-math.inf, [((1, 2, 6, 6), (1, 1, 6, 6)), ((1, 2, 6, 6), None)]),
    ],
)
def test_broadcast_mask_and_bias_reach_cudnn_unexpanded(monkeypatch, filter_value, calls):
    # A mask broadcast over batch and heads (strides 0) reaches cuDNN as {1, 1, S, T}, and a
    # bias broadcast over the batch as {1, H, S, T}: cuDNN's partitioning of a head-sharded call
    # keeps them whole, where full-size copies would be split by batch only.
    desc, inputs = _causal_case(flip=True)
    s, t = desc.mask_tensor.sizes[2:]
    desc = dataclasses.replace(
        _attention(s=6, kv=6, hq=2, mask_type="BOOLEAN", mask_filter_value=filter_value, rpb=True),
        mask_tensor=dataclasses.replace(desc.mask_tensor, strides=(0, 0, t, 1)),
    )
    bias_t = desc.relative_position_bias_tensor
    desc = dataclasses.replace(
        desc,
        relative_position_bias_tensor=dataclasses.replace(bias_t, strides=(0, s * t, t, 1)),
    )
    inputs = _inputs(desc, seed=5)
    slots = [p for p, _ in desc.input_slots()]
    mask = np.tril(np.ones((s, t), np.int32))
    mask[2, 4] = 1
    inputs[slots.index("MaskTensor")] = np.broadcast_to(mask, desc.mask_tensor.sizes).copy()
    i = slots.index("RelativePositionBiasTensor")
    inputs[i] = np.broadcast_to(inputs[i][:1], bias_t.sizes).copy()
    seen = []
    cudnn = jax.nn.dot_product_attention

    def spy(q, k, v, *, bias=None, mask=None, **kwargs):
        seen.append((None if bias is None else bias.shape, None if mask is None else mask.shape))
        return cudnn(q, k, v, bias=bias, mask=mask, **kwargs)

    monkeypatch.setattr(jax.nn, "dot_product_attention", spy)
    got = jax.jit(functools.partial(KA.lower, desc))(*inputs)
    assert sorted(seen, key=str) == calls
    assert_attention_close(desc, inputs, got, _lax(desc)(*inputs))
