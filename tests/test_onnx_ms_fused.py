"""ONNX Runtime's ``com.microsoft`` contrib ops of optimized transformer models
(``dml_jax/onnx/converters/ms_fused.py``, ``ms_layers.py``) through ``dml_jax.onnx.InferenceSession``: one-node
models built with ``onnx.helper``, each against onnxruntime's CPU provider where it has a kernel
for the op (FusedMatMul, FusedGemm, Gelu, FastGelu, BiasGelu, QuickGelu, the skip / simplified
layer normalizations, EmbedLayerNormalization, ConvTransposeWithDynamicPads), else against the
same computation in onnxruntime's standard ops (NhwcConv as a transposed Conv,
FusedMatMulActivation as FusedMatMul then Softmax) or NumPy in float64 written from the contrib
spec (BiasAdd, BiasSplitGelu, GroupNorm: CUDA-only kernels). Attributes, optional inputs and
outputs, float16 where the DML operators take it, and rejected nodes (a ValidationError naming
the node).

Tolerances: float32 results agree with onnxruntime to a few units in the last place (1e-5
relative and absolute covers the reductions summed in another order); float16 ones to a couple of
float16 units (onnxruntime's CPU kernels compute those in float32 and round once, DirectML's
operators in float16).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper

from dml_jax import ValidationError
from dml_jax.onnx import InferenceSession

F32, F16, I32, I64 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT32, TensorProto.INT64
MS = "com.microsoft"
_ELEM = {np.dtype(np.float32): F32, np.dtype(np.float16): F16, np.dtype(np.int32): I32,
         np.dtype(np.int64): I64}  # fmt: skip
F32_TOL = {"rtol": 1e-5, "atol": 1e-5}
F16_TOL = {"rtol": 4e-3, "atol": 4e-3}


def _tol(dtype):
    return F16_TOL if np.dtype(dtype) == np.float16 else F32_TOL


def _model(nodes, feeds, outputs, initializers=None, opset=17):
    """A model of ``nodes`` (one node or a list): graph inputs for ``feeds`` (name -> array),
    ``initializers`` (name -> array), outputs by name with no declared type or shape."""
    nodes = nodes if isinstance(nodes, list) else [nodes]
    initializers = initializers or {}
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, _ELEM[a.dtype], a.shape) for n, a in feeds.items()],
        [helper.make_empty_tensor_value_info(n) for n in outputs],
        initializer=[numpy_helper.from_array(a, n) for n, a in initializers.items()],
    )
    opsets = [helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)]
    return helper.make_model(
        graph, opset_imports=opsets, ir_version=10
    )  # onnxruntime 1.30 reads 10


def _ort(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _ours(model, feeds):
    session = InferenceSession(model)
    return session.run(None, feeds), session.explain()


def _check(got, want, **tol):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), **tol)


def _against_ort(node, feeds, outputs, initializers=None, **tol):
    """Runs ``node`` through both; returns dml_jax's explain() for checks of the mapping."""
    model = _model(node, feeds, outputs, initializers)
    got, explain = _ours(model, feeds)
    dtype = next(iter(feeds.values())).dtype
    _check(got, _ort(model, feeds), **(tol or _tol(dtype)))
    return explain


def _rand(*shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# ---------------------------------------------------------------------------------------------
# FusedMatMul, FusedMatMulActivation, FusedGemm


@pytest.mark.parametrize(
    ("a", "b", "attrs"),
    [
        ((2, 3, 4, 5), (2, 3, 5, 6), {"alpha": 0.5}),
        ((2, 5, 4), (2, 6, 5), {"transA": 1, "transB": 1}),
        ((4, 2, 3, 5), (2, 3, 5, 6), {"transBatchA": 1}),  # A {M, b1, b2, K}
        ((2, 3, 4, 5), (6, 2, 3, 5), {"transBatchB": 1, "transB": 1}),  # B {N, b1, b2, K}
        ((5, 2, 4), (5, 2, 3), {"transBatchA": 1, "transBatchB": 1, "transA": 1, "alpha": 2.0}),
        ((2, 1, 4, 5), (3, 5, 6), {}),  # broadcast batch
        ((2, 1, 3, 4, 5), (3, 1, 5, 6), {"transA": 0}),  # batch dims that do not fold into two
        ((5,), (2, 5, 3), {"transA": 1}),  # a transpose of a vector is ignored
        ((2, 4, 5), (5,), {}),
    ],
)
def test_fused_matmul(a, b, attrs):
    feeds = {"a": _rand(*a), "b": _rand(*b, seed=1)}
    node = helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain=MS, **attrs)
    explain = _against_ort(node, feeds, ["y"])
    assert "FusedMatMul): dml: " in explain and "GEMM" in explain


def test_fused_matmul_float16():
    feeds = {"a": _rand(2, 5, 4, dtype=np.float16), "b": _rand(2, 5, 6, dtype=np.float16, seed=1)}
    node = helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain=MS, transA=1, alpha=0.25)
    _against_ort(node, feeds, ["y"], rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("axis", [-1, 1])
def test_fused_matmul_activation_softmax(axis):
    """FusedMatMul and the Softmax (opset 13: one axis) that MatMulActivationFusion folded."""
    feeds = {"a": _rand(2, 3, 4, 5), "b": _rand(2, 3, 6, 5, seed=1)}
    attrs = {"transB": 1, "alpha": 0.3}
    fused = helper.make_node(
        "FusedMatMulActivation", ["a", "b"], ["y"], domain=MS, activation="Softmax",
        activation_axis=axis, **attrs,
    )  # fmt: skip
    reference = [
        helper.make_node("FusedMatMul", ["a", "b"], ["p"], domain=MS, **attrs),
        helper.make_node("Softmax", ["p"], ["y"], axis=axis),
    ]
    got, explain = _ours(_model(fused, feeds, ["y"]), feeds)
    _check(got, _ort(_model(reference, feeds, ["y"]), feeds), **F32_TOL)
    # On the last axis the softmax is GEMM's fused activation: one operator.
    assert explain.endswith("dml: GEMM") == (axis == -1), explain


@pytest.mark.parametrize(
    ("activation", "extra"),
    [("Relu", {}), ("LeakyRelu", {"activation_alpha": 0.2}), ("Tanh", {}),
     ("HardSigmoid", {"activation_alpha": 0.3, "activation_beta": 0.4})],
)  # fmt: skip
def test_fused_gemm(activation, extra):
    feeds = {"a": _rand(5, 4), "b": _rand(3, 5, seed=1), "c": _rand(3, seed=2)}
    node = helper.make_node(
        "FusedGemm", ["a", "b", "c"], ["y"], domain=MS, transA=1, transB=1, alpha=0.7, beta=0.5,
        activation=activation, **extra,
    )  # fmt: skip
    _against_ort(node, feeds, ["y"])


# ---------------------------------------------------------------------------------------------
# Gelu family, QuickGelu, BiasAdd, BiasSplitGelu


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize(
    ("op", "bias", "attrs"),
    [
        ("Gelu", False, {}),
        ("FastGelu", False, {}),
        ("FastGelu", True, {}),
        ("BiasGelu", True, {}),
        ("QuickGelu", False, {}),
        ("QuickGelu", False, {"alpha": 1.0}),
    ],
)
def test_gelu_family(op, bias, attrs, dtype):
    x = (_rand(2, 3, 16) * 3).astype(dtype)
    feeds = {"x": x, "b": _rand(16, dtype=dtype, seed=1)} if bias else {"x": x}
    node = helper.make_node(op, list(feeds), ["y"], domain=MS, **attrs)
    explain = _against_ort(node, feeds, ["y"])
    if op == "FastGelu":
        assert "ELEMENT_WISE_TANH" in explain  # the contrib spec's tanh form, not erf
    if op == "QuickGelu":
        assert ("ELEMENT_WISE_IDENTITY" in explain) == ("alpha" not in attrs), explain


def _gelu(x):
    return x * 0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_bias_add_and_bias_split_gelu(dtype):
    """CUDA-only kernels in onnxruntime: NumPy in float64 from the contrib spec."""
    x, bias = _rand(2, 3, 8, dtype=dtype), _rand(8, dtype=dtype, seed=1)
    skip = _rand(2, 3, 8, dtype=dtype, seed=2)
    node = helper.make_node("BiasAdd", ["x", "b", "s"], ["y"], domain=MS)
    feeds = {"x": x, "b": bias, "s": skip}
    (got,), _ = _ours(_model(node, feeds, ["y"]), feeds)
    want = x.astype(np.float64) + bias + skip
    np.testing.assert_allclose(got.astype(np.float64), want, **_tol(dtype))

    node = helper.make_node("BiasSplitGelu", ["x", "b"], ["y"], domain=MS)
    feeds = {"x": x, "b": bias}
    (got,), explain = _ours(_model(node, feeds, ["y"]), feeds)
    h = x.astype(np.float64) + bias
    want = h[..., :4] * _gelu(h[..., 4:])
    assert got.shape == (2, 3, 4) and got.dtype == dtype
    np.testing.assert_allclose(got.astype(np.float64), want, **_tol(dtype))
    assert "SPLIT" in explain


# ---------------------------------------------------------------------------------------------
# SkipLayerNormalization, SkipSimplifiedLayerNormalization, SimplifiedLayerNormalization


@pytest.mark.parametrize(
    ("shape", "skip", "beta", "bias", "attrs"),
    [
        ((2, 3, 8), (2, 3, 8), True, True, {"epsilon": 1e-5}),
        ((2, 3, 8), (1, 3, 8), False, True, {}),  # epsilon: the contrib default 1e-12
        ((2, 3, 8), (3, 8), True, False, {}),
        ((4, 8), (4, 8), False, False, {"epsilon": 1e-3}),
    ],
)
def test_skip_layer_norm(shape, skip, beta, bias, attrs):
    h = shape[-1]
    feeds = {"x": _rand(*shape), "s": _rand(*skip, seed=1), "g": _rand(h, seed=2)}
    inputs = ["x", "s", "g", "be" if beta else "", "bi" if bias else ""]
    feeds.update({"be": _rand(h, seed=3)} if beta else {})
    feeds.update({"bi": _rand(h, seed=4)} if bias else {})
    while not inputs[-1]:
        inputs.pop()
    outs = ["y", "mean", "inv", "sum"]
    node = helper.make_node("SkipLayerNormalization", inputs, outs, domain=MS, **attrs)
    explain = _against_ort(node, feeds, outs)
    assert "MEAN_VARIANCE_NORMALIZATION2" in explain


def test_skip_layer_norm_float16_and_unnamed_outputs():
    """float16 data; only output and input_skip_bias_sum asked for (mean and inv_std_var are
    float32 whenever they are)."""
    shapes = {"x": (2, 3, 8), "s": (2, 3, 8), "g": (8,), "be": (8,)}
    feeds = {k: _rand(*s, dtype=np.float16, seed=i) for i, (k, s) in enumerate(shapes.items())}
    node = helper.make_node(
        "SkipLayerNormalization", ["x", "s", "g", "be"], ["y", "", "", "sum"], domain=MS
    )
    explain = _against_ort(node, feeds, ["y", "sum"], rtol=1e-2, atol=1e-2)
    assert "REDUCE" not in explain  # no statistics asked for
    node = helper.make_node(
        "SkipLayerNormalization", ["x", "s", "g"], ["y", "mean", "inv"], domain=MS, epsilon=1e-5
    )
    model = _model(node, feeds := {k: feeds[k] for k in "xsg"}, ["y", "mean", "inv"])
    got, _ = _ours(model, feeds)
    assert [g.dtype for g in got] == [np.float16, np.float32, np.float32]
    _check(got, _ort(model, feeds), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("bias", [False, True])
def test_skip_simplified_layer_norm(bias, dtype):
    feeds = {"x": _rand(2, 3, 8, dtype=dtype), "s": _rand(3, 8, dtype=dtype, seed=1),
             "g": _rand(8, dtype=dtype, seed=2)}  # fmt: skip
    if bias:
        feeds["b"] = _rand(8, dtype=dtype, seed=3)
    outs = ["y", "mean", "inv", "sum"]
    node = helper.make_node("SkipSimplifiedLayerNormalization", list(feeds), outs, domain=MS)
    tol = {"rtol": 1e-2, "atol": 1e-2} if dtype == np.float16 else F32_TOL
    _against_ort(node, feeds, outs, **tol)


@pytest.mark.parametrize(
    ("x_dtype", "scale_shape", "attrs"),
    [
        (np.float32, (8,), {}),
        (np.float32, (3, 8), {"axis": 1, "epsilon": 1e-3}),
        (np.float16, (8,), {}),  # float16 data, float32 scale: Y is float32
    ],
)
@pytest.mark.parametrize("domain", ["", MS])
def test_simplified_layer_norm(domain, x_dtype, scale_shape, attrs):
    """Registered in both domains, as ONNX Runtime's models use both; onnxruntime 1.32 knows
    only the ONNX-domain schema, so it runs that one as the reference."""
    feeds = {"x": _rand(2, 3, 8, dtype=x_dtype), "scale": _rand(*scale_shape, seed=1)}
    node = helper.make_node(
        "SimplifiedLayerNormalization", ["x", "scale"], ["y", "inv"], domain=domain, **attrs
    )
    reference = helper.make_node(
        "SimplifiedLayerNormalization", ["x", "scale"], ["y", "inv"], **attrs
    )
    got, explain = _ours(_model(node, feeds, ["y", "inv"]), feeds)
    tol = {"rtol": 1e-3, "atol": 1e-3} if x_dtype == np.float16 else F32_TOL
    _check(got, _ort(_model(reference, feeds, ["y", "inv"]), feeds), **tol)
    assert "MEAN_VARIANCE_NORMALIZATION2" in explain


# ---------------------------------------------------------------------------------------------
# EmbedLayerNormalization


def _embed_feeds(batch=2, seq=5, hidden=8, seed=0):
    r = np.random.default_rng(seed)
    return {
        "ids": r.integers(0, 10, (batch, seq)).astype(np.int32),
        "seg": r.integers(0, 2, (batch, seq)).astype(np.int32),
        "we": r.standard_normal((10, hidden)).astype(np.float32),
        "pe": r.standard_normal((7, hidden)).astype(np.float32),
        "se": r.standard_normal((2, hidden)).astype(np.float32),
        "g": r.standard_normal(hidden).astype(np.float32),
        "be": r.standard_normal(hidden).astype(np.float32),
        "mask": np.array([[1, 1, 1, 0, 0], [1, 0, 1, 1, 1]][:batch], np.int32)[:, :seq],
        "pos": np.array([[4, 3, 2, 1, 0]], np.int32)[:, :seq],
        "pos2": r.integers(0, 7, (batch, seq)).astype(np.int32),
    }


@pytest.mark.parametrize(
    ("inputs", "outputs", "attrs"),
    [
        (["ids", "seg", "we", "pe", "se", "g", "be", "mask"], ["y", "mi", "sum"], {}),
        (["ids", "", "we", "pe", "", "g", "be"], ["y", "mi"], {"epsilon": 1e-5}),
        (["ids", "seg", "we", "pe", "se", "g", "be", "", "pos"], ["y", "", "sum"], {}),
        (["ids", "", "we", "pe", "", "g", "be", "mask", "pos2"], ["y", "mi", "sum"], {}),
    ],
)
def test_embed_layer_norm(inputs, outputs, attrs):
    all_feeds = _embed_feeds()
    feeds = {k: all_feeds[k] for k in inputs if k}
    node = helper.make_node("EmbedLayerNormalization", inputs, outputs, domain=MS, **attrs)
    explain = _against_ort(node, feeds, [o for o in outputs if o], **F32_TOL)
    assert "GATHER" in explain and "MEAN_VARIANCE_NORMALIZATION1" in explain
    assert ("FILL_VALUE_SEQUENCE" in explain) == ("pos" not in "".join(inputs))


# ---------------------------------------------------------------------------------------------
# GroupNorm, NhwcConv, ConvTransposeWithDynamicPads


@pytest.mark.parametrize(
    ("channels_last", "activation", "dtype"),
    [(1, 0, np.float32), (1, 1, np.float32), (0, 1, np.float32), (1, 1, np.float16)],
)
def test_group_norm(channels_last, activation, dtype):
    """CUDA-only in onnxruntime: NumPy in float64. float32 gamma and beta with float16 data are
    cast to float16 (the provider's rule)."""
    nhwc = _rand(2, 3, 4, 8)
    x = (nhwc if channels_last else nhwc.transpose(0, 3, 1, 2)).astype(dtype)
    gamma, beta = _rand(8, seed=1), _rand(8, seed=2)
    node = helper.make_node(
        "GroupNorm", ["x", "g", "b"], ["y"], domain=MS, groups=4, activation=activation,
        channels_last=channels_last, epsilon=1e-4,
    )  # fmt: skip
    feeds = {"x": x, "g": gamma, "b": beta}
    (got,), explain = _ours(_model(node, feeds, ["y"]), feeds)
    v = x.astype(np.float64)
    v = (v if channels_last else v.transpose(0, 2, 3, 1)).reshape(2, 12, 4, 2)
    v = (v - v.mean((1, 3), keepdims=True)) / np.sqrt(v.var((1, 3), keepdims=True) + 1e-4)
    want = v.reshape(2, 3, 4, 8) * gamma.astype(dtype) + beta.astype(dtype)
    if activation:
        want = want / (1 + np.exp(-want))
    want = want if channels_last else want.transpose(0, 3, 1, 2)
    assert got.dtype == dtype
    np.testing.assert_allclose(got.astype(np.float64), want, **_tol(dtype))
    assert "MEAN_VARIANCE_NORMALIZATION1" in explain


@pytest.mark.parametrize(
    ("x", "w", "attrs"),
    [
        ((2, 5, 6, 4), (6, 3, 3, 2), {"group": 2, "strides": [2, 1], "pads": [1, 0, 1, 2]}),
        ((1, 5, 5, 3), (4, 2, 2, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 1]}),
        ((2, 7, 3), (4, 3, 3), {"strides": [2]}),  # 1-D
    ],
)
def test_nhwc_conv(x, w, attrs):
    """onnxruntime's NhwcConv is CUDA-only: its Conv on the transposed tensors."""
    xs, ws, b = _rand(*x), _rand(*w, seed=1), _rand(w[0], seed=2)
    node = helper.make_node("NhwcConv", ["x", "w", "b"], ["y"], domain=MS, **attrs)
    feeds = {"x": xs, "w": ws, "b": b}
    (got,), explain = _ours(_model(node, feeds, ["y"]), feeds)
    first = [0, len(x) - 1] + list(range(1, len(x) - 1))
    last = [0] + list(range(2, len(x))) + [1]
    ref = {"x": xs.transpose(first).copy(), "w": ws.transpose(first).copy(), "b": b}
    conv = helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)
    (want,) = _ort(_model(conv, ref, ["y"]), ref)
    np.testing.assert_allclose(got, want.transpose(last), **F32_TOL)
    assert "CONVOLUTION, ELEMENT_WISE_IDENTITY" in explain


@pytest.mark.parametrize("bias", [False, True])
def test_conv_transpose_with_dynamic_pads(bias):
    feeds = {"x": _rand(1, 2, 4, 4), "w": _rand(2, 3, 3, 3, seed=1)}
    if bias:
        feeds["b"] = _rand(3, seed=2)
    pads = {"p": np.array([1, 0, 1, 2], np.int64)}
    inputs = ["x", "w", "p"] + (["b"] if bias else [])
    node = helper.make_node(
        "ConvTransposeWithDynamicPads", inputs, ["y"], domain=MS, strides=[2, 2]
    )
    model = _model(node, feeds, ["y"], initializers=pads)
    got, explain = _ours(model, feeds)
    _check(got, _ort(model, feeds), **F32_TOL)
    assert explain.endswith("dml: CONVOLUTION")


# ---------------------------------------------------------------------------------------------
# Rejected nodes


def _rejects(op, inputs, feeds, match, outputs=("y",), initializers=None, **attrs):
    node = helper.make_node(op, inputs, list(outputs), domain=MS, name="bad", **attrs)
    model = _model(node, feeds, [o for o in outputs if o], initializers)
    with pytest.raises(ValidationError, match=r"node 0 \('bad', " + op + r"\).*" + match):
        InferenceSession(model).run(None, feeds)


def test_rejected_nodes():
    a, b = _rand(2, 3, 4), _rand(2, 4, 5)
    _rejects("FusedMatMul", ["a", "b"], {"a": a[0], "b": b[0]}, "transBatchA", transBatchA=1)
    _rejects("FusedMatMul", ["a", "b"], {"a": a, "b": b}, "inner dimensions", transA=1)
    _rejects("FusedMatMul", ["a", "b"], {"a": a, "b": b}, "'transC' is not", transC=1)
    _rejects("FusedMatMul", ["a", "b"], {"a": a, "b": b}, "'alpha' must be float", alpha=2)
    _rejects("FusedMatMul", ["a"], {"a": a}, r"input 1 \('B'\) is required")
    _rejects(
        "FusedMatMulActivation", ["a", "b"], {"a": a, "b": b}, "only 'Softmax'", activation="Relu"
    )
    _rejects("FusedMatMulActivation", ["a", "b"], {"a": a, "b": b}, "'activation' is required")
    _rejects("FusedGemm", ["a", "b"], {"a": a[0], "b": b[0]}, "activation 'Gelu'",
             activation="Gelu")  # fmt: skip
    x, h = _rand(2, 3, 8), _rand(8)
    _rejects("SkipLayerNormalization", ["x", "s", "g"], {"x": x, "s": x[:, :1], "g": h},
             "skip of shape")  # fmt: skip
    _rejects("SkipLayerNormalization", ["x", "s", "g"], {"x": x, "s": x, "g": h[:4]},
             r"gamma must have shape \[8\]")  # fmt: skip
    _rejects("SkipLayerNormalization", ["x", "s", "g"], {"x": x[None], "s": x[None], "g": h},
             "2-D or 3-D")  # fmt: skip
    _rejects(
        "SkipLayerNormalization", ["x", "s", "g"], {"x": x, "s": x, "g": h}, "1 to 4",
        outputs=("y", "m", "v", "s2", "extra"),
    )  # fmt: skip
    _rejects("BiasSplitGelu", ["x", "b"], {"x": x[..., :7], "b": h[:7]}, "D even")
    _rejects("BiasGelu", ["x", "b"], {"x": x, "b": h[:4]}, "last dimension")
    _rejects("Gelu", ["x"], {"x": np.zeros((2, 3), np.int32)}, "must be float")
    _rejects("GroupNorm", ["x", "g", "b"], {"x": x[None], "g": h, "b": h}, "'groups' is required",
             activation=0)  # fmt: skip
    _rejects("GroupNorm", ["x", "g", "b"], {"x": x[None], "g": h, "b": h}, "does not divide",
             activation=0, groups=3)  # fmt: skip
    feeds = _embed_feeds()
    _rejects(
        "EmbedLayerNormalization", ["ids", "seg", "we", "pe", "", "g", "be"],
        {k: feeds[k] for k in ("ids", "seg", "we", "pe", "g", "be")}, "given together",
    )  # fmt: skip
    _rejects("ConvTransposeWithDynamicPads", ["x", "w"], {"x": _rand(1, 2, 4, 4),
             "w": _rand(2, 3, 3, 3)}, "Pads")  # fmt: skip


def test_domain_must_be_imported():
    """A com.microsoft node in a model that does not import the domain."""
    node = helper.make_node("Gelu", ["x"], ["y"], domain=MS)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", F32, [2])],
        [helper.make_empty_tensor_value_info("y")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    with pytest.raises(ValidationError, match="domain 'com.microsoft' is not among"):
        InferenceSession(model).run(None, {"x": np.zeros(2, np.float32)})
