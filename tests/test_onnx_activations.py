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
from onnx_cases import passing_op_types

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


def _onnx_testcases() -> list:
    """ONNX's node test cases, those of the mapped operators among them.

    Generating all of them (``collect_testcases(None)``) takes about 10 s; importing just the
    mapped operators' generator modules registers their cases in the list ``collect_testcases``
    returns, in a fraction of a second (a later ``collect_testcases(None)`` imports the rest).
    """
    import importlib

    from onnx.backend.test.case import node as package

    with np.errstate(all="ignore"):
        try:
            for op_type in sorted(MAPPED):
                importlib.import_module(f"{package.__name__}.{op_type.lower()}")
            return list(package._NodeTestCases)
        except (ImportError, AttributeError):
            return package.collect_testcases(None)


@functools.lru_cache(maxsize=1)
def _cases():
    out = []
    for case in _onnx_testcases():
        graph = case.model.graph
        if len(graph.node) != 1 or graph.node[0].op_type not in MAPPED:
            continue
        opset = max(o.version for o in case.model.opset_import if o.domain in ("", "ai.onnx"))
        for inputs, outputs in case.data_sets or ():
            out.append((case.name, graph.node[0], opset, inputs, outputs))
    return out


def _dml_type(array: np.ndarray) -> str:
    name = array.dtype.name.upper()
    if name not in dml.DataType.__members__:
        pytest.skip(f"DirectML has no {name} data type")
    return name


def _broadcast_desc(array: np.ndarray, shape: tuple) -> dml.TensorDesc:
    """The DirectML view of ``array`` broadcast to ``shape``: stride 0 where it repeats."""
    sizes = (1,) * (len(shape) - array.ndim) + array.shape
    strides, step = [], 1
    for n in reversed(sizes):
        strides.append(step)
        step *= n
    strides = [0 if n == 1 and m > 1 else s for n, m, s in zip(sizes, shape, reversed(strides))]
    return dml.TensorDesc(_dml_type(array), list(shape), strides=strides)


def _run(node, opset: int, inputs: list[np.ndarray]) -> np.ndarray:
    op_type, x = node.op_type, inputs[0]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    shape = x.shape or (1,)
    ins = [dml.TensorDesc(_dml_type(x), list(shape))]
    out = dml.TensorDesc(_dml_type(x), list(shape))
    if op_type == "PRelu":
        ins.append(_broadcast_desc(inputs[1], shape))
        cls, kw = dml.ActivationParameterizedReluOperatorDesc, {}
    elif op_type in NORMALIZE:
        rank = len(shape)
        axis = attrs.get("axis", -1 if opset >= 13 else 1) % rank
        axes = [axis] if opset >= 13 else list(range(axis, rank))
        cls, kw = getattr(dml, NORMALIZE[op_type] + "OperatorDesc"), {"axes": axes}
    else:
        if attrs.get("approximate", b"none") != b"none":
            pytest.skip("DirectML's GELU has no tanh approximation")
        name, spec = UNARY[op_type]
        cls = getattr(dml, name + "OperatorDesc")
        kw = {k: float(attrs.get(a, d)) for k, (a, d) in spec.items()}
    desc = cls(*ins, out, **kw)
    try:
        dml.validate(desc)
    except dml.ValidationError as e:
        if "is not supported at feature level" in str(e):
            pytest.skip(f"DirectML does not support this case: {e}")
        raise
    op = dml.compile_operator(desc)
    (result,) = op.run_buffers([a.reshape(-1) for a in inputs], [np.zeros(x.size, x.dtype)])
    return np.asarray(result).reshape(x.shape)


def _int_shrink_by_dml_rule(node, x: np.ndarray) -> np.ndarray:
    """Integer SHRINK as docs/semantics.md defines it: Bias truncated toward zero (saturated)
    into the integer type, the arithmetic wrapping."""
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    bias, lambd = float(np.float32(attrs.get("bias", 0.0))), float(attrs.get("lambd", 0.5))
    info = np.iinfo(x.dtype)
    bias = min(max(math.trunc(bias), info.min), info.max)
    wide = x.astype(np.int64)
    y = np.where(wide > lambd, wide - bias, np.where(wide < -lambd, wide + bias, 0))
    return y.astype(x.dtype)


@functools.cache
def _result(index: int) -> np.ndarray:
    """DirectML's output for a case, kept: the last test reuses it (skips are not kept)."""
    _, node, opset, inputs, _ = _cases()[index]
    return _run(node, opset, list(inputs))


def _check(index: int) -> None:
    _, node, _, inputs, outputs = _cases()[index]
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


@pytest.mark.parametrize(
    "index", range(len(_cases())), ids=[f"{c[0]}-{i}" for i, c in enumerate(_cases())]
)
def test_onnx_node(index):
    _check(index)


def test_every_mapped_activation_has_a_passing_case():
    passed = passing_op_types(_cases(), _check)
    assert passed == MAPPED, f"no passing case: {sorted(MAPPED - passed)}"
