"""The float16 BATCH_NORMALIZATION kernel (dml_jax.kernels.batch_norm) against the lax lowering.

In Pallas interpret mode (any machine): per-channel and single-value statistics, a partial last
block, 2-D to 5-D, RELU and LEAKY_RELU fused, NaN and infinite inputs; on a CUDA machine the
compiled kernel through the operator's fast path. The stated tolerance: one float16 ulp of the
result (XLA and Triton may contract the product and the sum differently).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

import dml_jax as dml
from dml_jax import fastpath
from dml_jax.kernels import batch_norm as K
from dml_jax.ops.normalization import lower_batch_norm

BN = dml.BatchNormalizationOperatorDesc
RELU = dml.ActivationReluOperatorDesc()
LEAKY = dml.ActivationLeakyReluOperatorDesc(alpha=0.25)


def _desc(shape, params=None, type_name="FLOAT16", **fields):
    x = dml.TensorDesc(type_name, shape)
    p = x.like(sizes=params or (1, shape[1]) + (1,) * (len(shape) - 2))
    return BN(x, p, p, p, p, x, spatial=True, epsilon=1e-3, **fields)


def _arrays(d, seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(d.input_tensor.sizes) * 4 + 1).astype(np.float16)
    x.reshape(-1)[:3] = [np.nan, np.inf, -np.inf]
    p = d.mean_tensor.sizes
    mean = rng.standard_normal(p).astype(np.float16)
    var = rng.uniform(0.1, 3, p).astype(np.float16)
    scale = rng.standard_normal(p).astype(np.float16)
    bias = rng.standard_normal(p).astype(np.float16)
    return x, mean, var, scale, bias


def _close(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype == np.float16 and got.shape == want.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    g, w = got[ok].astype(np.float64), want[ok].astype(np.float64)
    inf = np.isinf(w)
    np.testing.assert_array_equal(g[inf], w[inf])
    spacing = np.spacing(np.abs(want[ok][~inf]).astype(np.float16)).astype(np.float64)
    assert np.all(np.abs(g[~inf] - w[~inf]) <= spacing)


CASES = [
    _desc((2, 3, 17, 19)),  # per channel, a partial last block
    _desc((3, 5, 2, 3, 41), fused_activation=RELU),  # 5-D
    _desc((64, 24), fused_activation=LEAKY),  # 2-D: one element a channel's run
    _desc((2, 4, 33, 7), params=(1, 1, 1, 1)),  # one value for every channel
]


@pytest.mark.parametrize("d", CASES)
def test_kernel_interpret_matches_lax(d):
    dml.validate(d)
    assert K.plan(d) is not None and fastpath.select(d).name == "kernel"
    arrays = _arrays(d)
    got = jax.jit(lambda *a: K.batch_norm_kernel(d, *a, interpret=True))(*arrays)
    (want,) = jax.jit(lambda *a: lower_batch_norm(d, *a))(*arrays)
    _close(got, want)


def test_plan_declines_what_lax_keeps():
    assert K.plan(_desc((2, 3, 8, 8), type_name="FLOAT32")) is None  # at the copy already
    x = dml.TensorDesc("FLOAT16", (2, 3, 8, 8))
    varying = x.like(sizes=(1, 3, 8, 1))  # statistics along another dimension too
    assert K.plan(BN(x, varying, varying, varying, varying, x, spatial=True, epsilon=1e-3)) is None
    sigmoid = dml.ActivationSigmoidOperatorDesc()
    assert K.plan(_desc((2, 3, 8, 8), fused_activation=sigmoid)) is not None  # run in-kernel
    gelu = dml.ActivationGeluOperatorDesc()
    assert K.plan(_desc((2, 3, 8, 8), fused_activation=gelu)) is None  # erf: left to XLA


@pytest.mark.skipif(not fastpath.cuda_present(), reason="needs a CUDA GPU")
@pytest.mark.parametrize(
    "d", [_desc((4, 64, 56, 56), fused_activation=RELU), _desc((3, 7, 13, 11)), CASES[2]]
)
def test_gpu_fast_path_matches_lax(d):
    assert fastpath.select(d).name == "kernel"
    arrays = _arrays(d, seed=2)
    got = jax.jit(dml.compile_operator(d).fn)(*arrays)
    want = jax.jit(dml.compile_operator(d, fast_paths=False).fn)(*arrays)
    _close(got, want)
