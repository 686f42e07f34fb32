"""The normalization converters through ``dml_jax.onnx.InferenceSession``, where ONNX's node
tests (``test_onnx_backend.py``) leave a mapping unexercised: BatchNormalization at opsets 7
(``spatial``) and 9 and its training outputs, GroupNormalization at opset 18 (scale and bias per
group), LayerNormalization's Mean and InvStdDev in float16 with ``stash_type``, mixed-precision
parameters, InstanceNormalization, LRN and MeanVarianceNormalization of other ranks, and the
Epsilon that ONNX Runtime's DirectML provider gives MeanVarianceNormalization and
LpNormalization. Expected values come from ONNX's reference evaluator or NumPy in float64.
"""

from __future__ import annotations

import numpy as np
import pytest

import dml_jax as dml

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from dml_jax.onnx import InferenceSession

F32, F16 = TensorProto.FLOAT, TensorProto.FLOAT16


def _model(node, inputs: dict, outputs: dict, opset: int, initializers=()):
    """A one-node model; ``inputs``/``outputs`` map names to (element type, shape)."""
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items()],
        [helper.make_tensor_value_info(n, t, s) for n, (t, s) in outputs.items()],
        initializer=[numpy_helper.from_array(a, n) for n, a in initializers],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _reference(model, feeds):
    with np.errstate(all="ignore"):
        return ReferenceEvaluator(model).run(None, feeds)


def _rng(seed: int = 0):
    return np.random.default_rng(seed)


# ---------------------------------------------------------------------------------------------
# BatchNormalization


def _bn_params(c: int, seed: int = 1, dtype=np.float32):
    r = _rng(seed)
    return (
        r.uniform(0.5, 1.5, c).astype(dtype),  # scale
        r.standard_normal(c).astype(dtype),  # bias
        r.standard_normal(c).astype(dtype),  # mean
        r.uniform(0.5, 2.0, c).astype(dtype),  # var
    )


@pytest.mark.parametrize("opset", [7, 9, 15])
@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 5), (2, 3, 4, 5), (1, 3, 2, 2, 2)])
def test_batch_norm_inference_every_opset(opset, shape):
    x = _rng().standard_normal(shape).astype(np.float32)
    s, b, m, v = _bn_params(shape[1])
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=1e-3)
    model = _model(node, {"x": (F32, shape)}, {"y": (F32, shape)}, opset,
                   [("s", s), ("b", b), ("m", m), ("v", v)])  # fmt: skip
    (got,) = InferenceSession(model).run(None, {"x": x})
    rs = (1, -1) + (1,) * (len(shape) - 2)
    want = (x - m.reshape(rs)) / np.sqrt(v.reshape(rs) + 1e-3) * s.reshape(rs) + b.reshape(rs)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_batch_norm_opset_7_not_spatial():
    """``spatial`` 0: one statistic per element of a sample ({C, H, W} parameters)."""
    shape = (2, 3, 2, 2)
    r = _rng(2)
    x = r.standard_normal(shape).astype(np.float32)
    s, b, m = (r.standard_normal(shape[1:]).astype(np.float32) for _ in range(3))
    v = r.uniform(0.5, 2.0, shape[1:]).astype(np.float32)
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], spatial=0)
    model = _model(node, {"x": (F32, shape)}, {"y": (F32, shape)}, 7,
                   [("s", s), ("b", b), ("m", m), ("v", v)])  # fmt: skip
    (got,) = InferenceSession(model).run(None, {"x": x})
    np.testing.assert_allclose(got, (x - m) / np.sqrt(v + 1e-5) * s + b, rtol=1e-5, atol=1e-5)


def test_batch_norm_training_mode_running_statistics():
    shape = (3, 2, 4)
    x = _rng(3).standard_normal(shape).astype(np.float32)
    s, b, m, v = _bn_params(2)
    node = helper.make_node(
        "BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"],
        training_mode=1, momentum=0.7,
    )  # fmt: skip
    model = _model(
        node,
        {"x": (F32, shape), "s": (F32, (2,)), "b": (F32, (2,)), "m": (F32, (2,)), "v": (F32, (2,))},
        {"y": (F32, shape), "rm": (F32, (2,)), "rv": (F32, (2,))},
        15,
    )
    feeds = {"x": x, "s": s, "b": b, "m": m, "v": v}
    got = InferenceSession(model).run(None, feeds)
    for g, w in zip(got, _reference(model, feeds)):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_batch_norm_training_outputs_before_opset_14_are_refused():
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "mean"])
    s, b, m, v = _bn_params(3)
    model = _model(node, {"x": (F32, (2, 3))}, {"y": (F32, (2, 3)), "mean": (F32, (3,))}, 9,
                   [("s", s), ("b", b), ("m", m), ("v", v)])  # fmt: skip
    with pytest.raises(dml.ValidationError, match="training outputs"):
        InferenceSession(model).run(None, {"x": np.ones((2, 3), np.float32)})


def test_batch_norm_float16_data_with_float32_parameters():
    """Opset 15 lets the parameters' type differ: computed in float32, rounded once."""
    shape = (2, 3, 4)
    x = _rng(4).standard_normal(shape).astype(np.float16)
    s, b, m, v = _bn_params(3)
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])
    model = _model(node, {"x": (F16, shape)}, {"y": (F16, shape)}, 15,
                   [("s", s), ("b", b), ("m", m), ("v", v)])  # fmt: skip
    (got,) = InferenceSession(model).run(None, {"x": x})
    rs = (1, -1, 1)
    w = x.astype(np.float64)
    want = (w - m.reshape(rs)) / np.sqrt(v.reshape(rs) + 1e-5) * s.reshape(rs) + b.reshape(rs)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got, want.astype(np.float16), rtol=1e-3, atol=1e-3)


# ---------------------------------------------------------------------------------------------
# The MEAN_VARIANCE_NORMALIZATION family


@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 5), (2, 3, 2, 2, 3)])
def test_instance_norm_ranks(shape):
    r = _rng(5)
    x = r.standard_normal(shape).astype(np.float32)
    s, b = (
        r.standard_normal(shape[1]).astype(np.float32),
        r.standard_normal(shape[1]).astype(np.float32),
    )
    node = helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=1e-4)
    model = _model(node, {"x": (F32, shape)}, {"y": (F32, shape)}, 6, [("s", s), ("b", b)])
    (got,) = InferenceSession(model).run(None, {"x": x})
    axes = tuple(range(2, len(shape)))
    w = x.astype(np.float64)
    mean = w.mean(axis=axes, keepdims=True)
    var = w.var(axis=axes, keepdims=True)
    rs = (1, -1) + (1,) * (len(shape) - 2)
    want = (w - mean) / np.sqrt(var + 1e-4) * s.reshape(rs) + b.reshape(rs)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["float32", "float16"])
@pytest.mark.parametrize("axis", [1, -1])
def test_layer_norm_mean_and_inv_std_dev(axis, dtype):
    shape = (2, 3, 4)
    elem = F16 if dtype == np.float16 else F32
    r = _rng(6)
    x = (r.standard_normal(shape) * 3 + 5).astype(dtype)
    s = r.standard_normal(shape[axis:] if axis > 0 else shape[-1:]).astype(dtype)
    b = r.standard_normal(s.shape).astype(dtype)
    stats = tuple(d if i < axis % 3 else 1 for i, d in enumerate(shape))
    node = helper.make_node(
        "LayerNormalization", ["x", "s", "b"], ["y", "mean", "inv"], axis=axis, epsilon=1e-3
    )
    model = _model(
        node,
        {"x": (elem, shape), "s": (elem, s.shape), "b": (elem, b.shape)},
        # stash_type 1 (the default): Mean and InvStdDev are float32 whatever X's type.
        {"y": (elem, shape), "mean": (F32, stats), "inv": (F32, stats)},
        17,
    )
    feeds = {"x": x, "s": s, "b": b}
    got = InferenceSession(model).run(None, feeds)
    axes = tuple(range(axis % 3, 3))
    w = x.astype(np.float64)
    mean = w.mean(axis=axes, keepdims=True)
    inv = 1 / np.sqrt(w.var(axis=axes, keepdims=True) + 1e-3)
    want = [(w - mean) * inv * s + b, mean, inv]
    tol = 1e-5 if dtype == np.float32 else 2e-3
    for g, w_, t in zip(got, want, (dtype, np.float32, np.float32)):
        assert g.dtype == t and g.shape == w_.shape
        np.testing.assert_allclose(g, w_.astype(t), rtol=tol, atol=tol)


def test_group_norm_opset_18_scales_each_group():
    shape = (2, 6, 3)
    r = _rng(7)
    x = r.standard_normal(shape).astype(np.float32)
    s, b = r.standard_normal(3).astype(np.float32), r.standard_normal(3).astype(np.float32)
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=3)
    model = _model(node, {"x": (F32, shape)}, {"y": (F32, shape)}, 18, [("s", s), ("b", b)])
    (got,) = InferenceSession(model).run(None, {"x": x})
    g = x.astype(np.float64).reshape(2, 3, -1)
    norm = (g - g.mean(axis=2, keepdims=True)) / np.sqrt(g.var(axis=2, keepdims=True) + 1e-5)
    want = (norm * s.reshape(1, 3, 1) + b.reshape(1, 3, 1)).reshape(shape)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_group_norm_opset_21_rejects_per_group_parameters():
    s = np.ones(3, np.float32)
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=3)
    model = _model(node, {"x": (F32, (2, 6))}, {"y": (F32, (2, 6))}, 21, [("s", s), ("b", s)])
    with pytest.raises(dml.ValidationError, match="one per channel"):
        InferenceSession(model).run(None, {"x": np.ones((2, 6), np.float32)})


def test_rms_norm_float16_data_with_float32_scale():
    """Y has the scale's type (float32): computed in float32 from the float16 data."""
    shape = (2, 5)
    r = _rng(8)
    x = r.standard_normal(shape).astype(np.float16)
    s = r.standard_normal(5).astype(np.float32)
    node = helper.make_node("RMSNormalization", ["x", "s"], ["y"])
    model = _model(node, {"x": (F16, shape)}, {"y": (F32, shape)}, 23, [("s", s)])
    (got,) = InferenceSession(model).run(None, {"x": x})
    w = x.astype(np.float64)
    want = w / np.sqrt((w * w).mean(axis=1, keepdims=True) + 1e-5) * s
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("axes", [None, [1], [0, 1, 2, 3]])
def test_mvn_epsilon_goes_to_the_variance(axes):
    """ONNX Runtime's DirectML provider: Epsilon 1e-5 added to the variance (ONNX adds 1e-9 to
    the standard deviation); a constant slice gives 0 either way."""
    shape = (2, 3, 2, 2)
    x = _rng(9).standard_normal(shape).astype(np.float32) * 1e-2
    x[1, 2] = 7.0  # a constant slice for the default axes (0, 2, 3)... of one channel only
    node = helper.make_node(
        "MeanVarianceNormalization", ["x"], ["y"], **({} if axes is None else {"axes": axes})
    )
    model = _model(node, {"x": (F32, shape)}, {"y": (F32, shape)}, 13)
    (got,) = InferenceSession(model).run(None, {"x": x})
    a = tuple(axes or (0, 2, 3))
    w = x.astype(np.float64)
    d = w - w.mean(axis=a, keepdims=True)
    np.testing.assert_allclose(got, d / np.sqrt((d * d).mean(axis=a, keepdims=True) + 1e-5),
                               rtol=1e-5, atol=1e-5)  # fmt: skip


# ---------------------------------------------------------------------------------------------
# LRN, LpNormalization


@pytest.mark.parametrize("shape", [(2, 5), (2, 5, 3), (1, 5, 2, 3), (1, 5, 2, 2, 2)])
def test_lrn_every_rank(shape):
    """ONNX's formula in NumPy (its reference evaluator takes 4-D only and walks N for C)."""
    x = _rng(10).standard_normal(shape).astype(np.float32)
    size, alpha, beta, bias = 4, 2e-2, 0.6, 1.5
    node = helper.make_node("LRN", ["x"], ["y"], size=size, alpha=alpha, beta=beta, bias=bias)
    model = _model(node, {"x": (F32, shape)}, {"y": (F32, shape)}, 13)
    (got,) = InferenceSession(model).run(None, {"x": x})
    w = x.astype(np.float64)
    squares = np.zeros_like(w)
    for c in range(shape[1]):  # channels c - floor((size - 1) / 2) .. c + ceil((size - 1) / 2)
        lo, hi = max(0, c - (size - 1) // 2), min(shape[1], c + size // 2 + 1)
        squares[:, c] = (w[:, lo:hi] ** 2).sum(axis=1)
    want = w / (bias + alpha / size * squares) ** beta
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("p", [1, 2])
def test_lp_norm_small_vectors_use_the_provider_epsilon(p):
    """A vector of norm below 1e-5 is divided by 1e-5 (LP_NORMALIZATION's Epsilon as ONNX
    Runtime's DirectML provider sets it); a zero vector stays zero."""
    x = np.array([[3.0, 4.0], [0.0, 0.0], [3e-7, 4e-7]], np.float32)
    node = helper.make_node("LpNormalization", ["x"], ["y"], p=p)
    model = _model(node, {"x": (F32, x.shape)}, {"y": (F32, x.shape)}, 1)
    (got,) = InferenceSession(model).run(None, {"x": x})
    norm = np.abs(x).sum(axis=1, keepdims=True) if p == 1 else np.hypot(x[:, :1], x[:, 1:])
    np.testing.assert_allclose(got, x / np.maximum(norm, 1e-5), rtol=1e-6)
