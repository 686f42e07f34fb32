"""ONNX's own backend node tests of the normalizations, mapped onto DirectML's descriptors as
ONNX-on-DirectML does:

- BatchNormalization (inference) -> BATCH_NORMALIZATION with {1, C, 1, ...} statistics, Scale
  and Bias. ``training_mode`` -> BATCH_NORMALIZATION_TRAINING over every dimension but C: Y is
  its OutputTensor; ONNX's running_mean / running_var are ``momentum * given + (1 - momentum) *
  batch``, a blend DirectML does not compute, so the test blends DirectML's OutputMeanTensor and
  OutputVarianceTensor in NumPy and compares that.
- InstanceNormalization -> MEAN_VARIANCE_NORMALIZATION1 over axes 2.. with {1, C, 1, ...} Scale
  and Bias.
- LayerNormalization -> MEAN_VARIANCE_NORMALIZATION1 over the axes from ``axis`` on, Scale and
  Bias as {1, ..., normalized shape}. Its optional Mean and InvStdDev outputs have no DirectML
  counterpart (MVN writes only the normalized tensor): only Y is compared.
- MeanVarianceNormalization -> MEAN_VARIANCE_NORMALIZATION1 over ``axes`` (default 0, 2, 3).
  ONNX adds its 1e-9 to the standard deviation, DirectML's Epsilon goes to the variance: Epsilon
  0 here, within the tolerance.
- LRN -> LOCAL_RESPONSE_NORMALIZATION with CrossChannel TRUE (ONNX windows channels only).
- LpNormalization -> LP_NORMALIZATION (a negative axis counts from the end), Epsilon 1e-12: a
  zero vector gives zeros, as ONNX's expectation says.

Cases DirectML's tables reject are skipped with the validation message; every mapped ONNX
operator must pass at least one case.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from onnx_cases import (
    assert_every_op_type_passes,
    assert_outputs,
    attrs,
    case_ids,
    dml_type,
    node_cases,
    run_or_skip,
)

import dml_jax as dml

onnx = pytest.importorskip("onnx")

MODULES = {
    "BatchNormalization": "batch_normalization",
    "InstanceNormalization": "instance_normalization",
    "LayerNormalization": "layernormalization",
    "MeanVarianceNormalization": "meanvariancenormalization",
    "LRN": "lrn",
    "LpNormalization": "lpnormalization",
}
MAPPED = set(MODULES)
CASES = node_cases(MODULES)


def _t(array_or_dtype, shape) -> dml.TensorDesc:
    return dml.TensorDesc(dml_type(getattr(array_or_dtype, "dtype", array_or_dtype)), list(shape))


def _per_channel(v: np.ndarray, rank: int) -> np.ndarray:
    return v.reshape((1, -1) + (1,) * (rank - 2))


def _batch_norm(node, inputs):
    x, scale, bias, mean, var = inputs
    a = attrs(node)
    eps = a.get("epsilon", 1e-5)
    xt = _t(x, x.shape)
    params = [_per_channel(v, x.ndim) for v in (scale, bias, mean, var)]
    pt = _t(x, params[0].shape)
    if not a.get("training_mode", 0):
        desc = dml.BatchNormalizationOperatorDesc(xt, pt, pt, pt, pt, xt, spatial=True, epsilon=eps)
        s, b, m, v = params
        return (run_or_skip(desc, x, m, v, s, b),)
    desc = dml.BatchNormalizationTrainingOperatorDesc(xt, pt, pt, None, xt, pt, pt, epsilon=eps)
    y, batch_mean, batch_var = run_or_skip(desc, x, params[0], params[1])
    momentum = np.float32(a.get("momentum", 0.9))
    # The running statistics: ONNX's blend of the given ones with DirectML's batch statistics.
    running_mean = mean * momentum + batch_mean.reshape(-1) * (1 - momentum)
    running_var = var * momentum + batch_var.reshape(-1) * (1 - momentum)
    return y, running_mean, running_var


def _instance_norm(node, inputs):
    x, scale, bias = inputs
    xt = _t(x, x.shape)
    s, b = _per_channel(scale, x.ndim), _per_channel(bias, x.ndim)
    desc = dml.MeanVarianceNormalization1OperatorDesc(
        xt, _t(s, s.shape), _t(b, b.shape), xt,
        axes=list(range(2, x.ndim)), normalize_variance=True,
        epsilon=attrs(node).get("epsilon", 1e-5),
    )  # fmt: skip
    return (run_or_skip(desc, x, s, b),)


def _layer_norm(node, inputs):
    x, scale, *bias = inputs
    a = attrs(node)
    axis = a.get("axis", -1) % x.ndim
    lead = (1,) * axis
    s = scale.reshape(lead + scale.shape)
    b = bias[0].reshape(lead + bias[0].shape) if bias else None
    xt = _t(x, x.shape)
    desc = dml.MeanVarianceNormalization1OperatorDesc(
        xt, _t(s, s.shape), None if b is None else _t(b, b.shape), xt,
        axes=list(range(axis, x.ndim)), normalize_variance=True,
        epsilon=a.get("epsilon", 1e-5),
    )  # fmt: skip
    # Only Y: DirectML has no Mean / InvStdDev outputs.
    return (run_or_skip(desc, x, s, *([] if b is None else [b])),)


def _mvn(node, inputs):
    (x,) = inputs
    axes = [int(i) % x.ndim for i in attrs(node).get("axes", [0, 2, 3])]
    xt = _t(x, x.shape)
    desc = dml.MeanVarianceNormalization1OperatorDesc(
        xt, None, None, xt, axes=axes, normalize_variance=True, epsilon=0.0
    )
    return (run_or_skip(desc, x),)


def _lrn(node, inputs):
    (x,) = inputs
    a = attrs(node)
    xt = _t(x, x.shape)
    desc = dml.LocalResponseNormalizationOperatorDesc(
        xt, xt, cross_channel=True, local_size=a["size"],
        alpha=a.get("alpha", 1e-4), beta=a.get("beta", 0.75), bias=a.get("bias", 1.0),
    )  # fmt: skip
    return (run_or_skip(desc, x),)


def _lp(node, inputs):
    (x,) = inputs
    a = attrs(node)
    xt = _t(x, x.shape)
    desc = dml.LpNormalizationOperatorDesc(
        xt, xt, axis=a.get("axis", -1) % x.ndim, epsilon=1e-12, p=a.get("p", 2)
    )
    return (run_or_skip(desc, x),)


RUN = {
    "BatchNormalization": _batch_norm,
    "InstanceNormalization": _instance_norm,
    "LayerNormalization": _layer_norm,
    "MeanVarianceNormalization": _mvn,
    "LRN": _lrn,
    "LpNormalization": _lp,
}


@functools.cache
def _result(index: int) -> tuple:
    case = CASES[index]
    return RUN[case.node.op_type](case.node, list(case.inputs))


def _check(index: int) -> None:
    got = _result(index)
    assert_outputs(got, CASES[index].outputs[: len(got)], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("index", range(len(CASES)), ids=case_ids(CASES))
def test_onnx_node(index):
    _check(index)


def test_every_mapped_operator_has_a_passing_case():
    assert_every_op_type_passes(CASES, _check, MAPPED)


def test_training_mode_cases_are_present():
    names = {c.name for c in CASES}
    assert "test_batchnorm_example_training_mode" in names
