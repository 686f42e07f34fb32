"""MULTIHEAD_ATTENTION's cuDNN path recognizes a causal BOOLEAN mask at run time and takes
cuDNN's causal mode (no mask read, masked blocks skipped); any other mask goes as it is. cuDNN is
replaced by stand-ins: one that reports the mode it was asked for, and jax's XLA implementation."""

from __future__ import annotations

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
