"""ONNX's own backend node tests of the activation operators, mapped onto DirectML descriptors.

Each ONNX node becomes the DML activation ONNX Runtime's DirectML provider uses for it, run in
buffer mode; PRelu's slope is broadcast to the input's sizes through stride-0 strides. Softmax,
LogSoftmax and Hardmax map onto the ``1`` versions: from opset 13 with the single ``axis``,
before it with ONNX's "coerced 2-D" semantics (every axis from ``axis`` to the end). The test
data comes from the ``onnx`` package (its test-case generators), so this module is skipped when
``onnx`` is not installed. A case whose data type DirectML lacks or its support table rejects is
skipped (named in the skip reason); every mapped ONNX operator must pass at least one case.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from onnx_cases import (
    assert_every_op_type_passes,
    attrs,
    broadcast_desc,
    case_ids,
    dml_type,
    node_cases,
    run_buffers_or_skip,
)

import dml_jax as dml

onnx = pytest.importorskip("onnx")

SELU_ALPHA, SELU_GAMMA = 1.67326319217681884765625, 1.05070102214813232421875
# ONNX op -> (DML desc class, {DML attribute: (ONNX attribute, ONNX default)}).
UNARY = {
    "Relu": ("ActivationRelu", {}),
    "LeakyRelu": ("ActivationLeakyRelu", {"alpha": ("alpha", 0.01)}),
    "Elu": ("ActivationElu", {"alpha": ("alpha", 1.0)}),
    "Selu": ("ActivationScaledElu", {"alpha": ("alpha", SELU_ALPHA), "gamma": ("gamma", SELU_GAMMA)}),
    "Celu": ("ActivationCelu", {"alpha": ("alpha", 1.0)}),
    "Sigmoid": ("ActivationSigmoid", {}),
    "HardSigmoid": ("ActivationHardSigmoid", {"alpha": ("alpha", 0.2), "beta": ("beta", 0.5)}),
    "Tanh": ("ActivationTanh", {}),
    "Softplus": ("ActivationSoftplus", {"steepness": (None, 1.0)}),
    "Softsign": ("ActivationSoftsign", {}),
    "ThresholdedRelu": ("ActivationThresholdedRelu", {"alpha": ("alpha", 1.0)}),
    "Gelu": ("ActivationGelu", {}),
    "Shrink": ("ActivationShrink", {"bias": ("bias", 0.0), "threshold": ("lambd", 0.5)}),
    "HardSwish": ("ActivationHardSwish", {"alpha": (None, 1 / 6), "beta": (None, 0.5)}),
}  # fmt: skip
NORMALIZE = {"Softmax": "ActivationSoftmax1", "LogSoftmax": "ActivationLogSoftmax1",
             "Hardmax": "ActivationHardmax1"}  # fmt: skip
MAPPED = set(UNARY) | set(NORMALIZE) | {"PRelu"}
CASES = node_cases(MAPPED)


def _run(node, opset: int, inputs: list[np.ndarray]) -> np.ndarray:
    op_type, x = node.op_type, inputs[0]
    at = attrs(node)
    shape = x.shape or (1,)
    ins = [dml.TensorDesc(dml_type(x.dtype), list(shape))]
    out = dml.TensorDesc(dml_type(x.dtype), list(shape))
    if op_type == "PRelu":
        ins.append(broadcast_desc(inputs[1], shape))
        cls, kw = dml.ActivationParameterizedReluOperatorDesc, {}
    elif op_type in NORMALIZE:
        rank = len(shape)
        axis = at.get("axis", -1 if opset >= 13 else 1) % rank
        axes = [axis] if opset >= 13 else list(range(axis, rank))
        cls, kw = getattr(dml, NORMALIZE[op_type] + "OperatorDesc"), {"axes": axes}
    else:
        if at.get("approximate", b"none") != b"none":
            pytest.skip("DirectML's GELU has no tanh approximation")
        name, spec = UNARY[op_type]
        cls = getattr(dml, name + "OperatorDesc")
        kw = {k: float(at.get(a, d)) for k, (a, d) in spec.items()}
    desc = cls(*ins, out, **kw)
    return run_buffers_or_skip(desc, inputs, x.shape, x.dtype)


def _int_shrink_by_dml_rule(node, x: np.ndarray) -> np.ndarray:
    """Integer SHRINK as docs/semantics.md defines it: Bias truncated toward zero (saturated)
    into the integer type, the arithmetic wrapping."""
    at = attrs(node)
    bias, lambd = float(np.float32(at.get("bias", 0.0))), float(at.get("lambd", 0.5))
    info = np.iinfo(x.dtype)
    bias = min(max(math.trunc(bias), info.min), info.max)
    wide = x.astype(np.int64)
    y = np.where(wide > lambd, wide - bias, np.where(wide < -lambd, wide + bias, 0))
    return y.astype(x.dtype)


@functools.cache
def _result(index: int) -> np.ndarray:
    """DirectML's output for a case, kept: the last test reuses it (skips are not kept)."""
    case = CASES[index]
    return _run(case.node, case.opset, list(case.inputs))


def _check(index: int) -> None:
    _, node, _, inputs, outputs = CASES[index]
    want = outputs[0]
    got = _result(index)
    if want.dtype == np.float16:
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)
    elif want.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    elif node.op_type == "Shrink" and not np.array_equal(got, want):
        if np.array_equal(got, _int_shrink_by_dml_rule(node, inputs[0])):
            pytest.skip(
                "integer Shrink: DirectML converts Bias to the integer type (toward zero) and "
                "wraps (docs/semantics.md); ONNX's expected output differs only by that rule"
            )
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("index", range(len(CASES)), ids=case_ids(CASES))
def test_onnx_node(index):
    _check(index)


def test_every_mapped_activation_has_a_passing_case():
    assert_every_op_type_passes(CASES, _check, MAPPED)
