"""SOFTMAX and LOG_SOFTMAX of large finite values: never NaN, and what NumPy gives in float64.

A slice such as ``[1e10, 2e10, -3e10]`` has differences from its maximum of 1e10 and more, so its
softmax is one-hot (ONNX Runtime gives exactly that). The lowering subtracts the maximum first;
the maximum element's difference must be exactly 0, even when XLA fuses the producer of the
input into several loops (``dml_jax.ops.softmax.shifted``). Checked against an independent
float64 NumPy reference in float32 and float16, eager and under ``jax.jit`` (alone and after a
fused producer), over several axes, and through ONNX models run by ``InferenceSession``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dml_jax as dml

# Per float type: a slice of large finite values (differences far beyond exp's range).
LARGE = {
    np.float32: [1e10, 2e10, -3e10],
    np.float16: [2.0e4, 6.0e4, -6.0e4],
}
EXTREME = {
    np.float32: [3.0e38, -3.0e38, 1.0],  # x - max overflows to -inf
    np.float16: [65504.0, -65504.0, 0.0],
}


def reference(x: np.ndarray, axes: tuple[int, ...], log: bool) -> np.ndarray:
    """Softmax / log-softmax in float64 NumPy, rounded once to ``x``'s type."""
    w = x.astype(np.float64)
    d = w - w.max(axis=axes, keepdims=True)
    s = np.exp(d).sum(axis=axes, keepdims=True)
    y = d - np.log(s) if log else np.exp(d) / s
    with np.errstate(over="ignore"):  # a log-softmax beyond the type's range is -inf
        return y.astype(x.dtype)


def along(values, shape: tuple[int, ...], axis: int, dtype) -> np.ndarray:
    """A tensor of ``shape`` whose slices along ``axis`` are ``values`` (permuted per slice, so
    the maximum sits at different positions), or random multiples of them."""
    rng = np.random.default_rng(axis + len(shape))
    n = shape[axis]
    base = np.asarray(values, np.float64)
    out = np.empty(shape, np.float64)
    moved = np.moveaxis(out, axis, -1)
    for i, index in enumerate(np.ndindex(moved.shape[:-1])):
        row = np.resize(base, n) * (1 if i % 2 == 0 else rng.uniform(0.5, 1.0))
        moved[index] = np.roll(row, i)
    return out.astype(dtype)


def check(got, x: np.ndarray, axes: tuple[int, ...], log: bool) -> None:
    got = np.asarray(got)
    assert got.dtype == x.dtype and got.shape == x.shape
    assert not np.isnan(got).any(), f"NaN from finite input:\n{x}\n->\n{got}"
    want = reference(x, axes, log)
    np.testing.assert_allclose(got, want, rtol=1e-6 if x.dtype == np.float32 else 1e-3)


def _desc(log: bool, shape: tuple[int, ...], dtype, axes: tuple[int, ...] | None):
    t = dml.TensorDesc(np.dtype(dtype).name.upper(), shape)
    if axes is None:  # version 0: the last dimension
        cls = dml.ActivationLogSoftmaxOperatorDesc if log else dml.ActivationSoftmaxOperatorDesc
        return cls(t, t)
    cls = dml.ActivationLogSoftmax1OperatorDesc if log else dml.ActivationSoftmax1OperatorDesc
    return cls(t, t, axes=axes)


SHAPES = [((3,), 0), ((3, 4), 0), ((2, 3, 5), 1), ((4, 2, 3), 2)]


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["float32", "float16"])
@pytest.mark.parametrize("values", ["large", "extreme"])
@pytest.mark.parametrize("shape, axis", SHAPES, ids=[f"{s}-axis{a}" for s, a in SHAPES])
def test_operator_eager_and_jit(shape, axis, values, dtype, log):
    x = along((LARGE if values == "large" else EXTREME)[dtype], shape, axis, dtype)
    op = dml.compile_operator(_desc(log, shape, dtype, (axis,)))
    check(op.fn(jnp.asarray(x)), x, (axis,), log)  # op by op, no jit
    check(op(x), x, (axis,), log)  # the compiled program


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["float32", "float16"])
def test_version_0_and_several_axes(dtype, log):
    x = along(LARGE[dtype], (2, 3), 1, dtype)
    check(dml.compile_operator(_desc(log, (2, 3), dtype, None))(x), x, (1,), log)
    y = along(LARGE[dtype], (3, 2, 3), 0, dtype)
    check(dml.compile_operator(_desc(log, y.shape, dtype, (0, 2)))(y), y, (0, 2), log)


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["float32", "float16"])
@pytest.mark.parametrize("axis", [0, 1])
def test_after_a_fused_producer(axis, dtype, log):
    """The input computed inside the same program (a scale and a shift, a product): XLA fuses
    that producer into the loops of the lowering."""
    shape = (4, 3) if axis == 1 else (3, 4)
    x = along(LARGE[dtype], shape, axis, dtype)
    half = (x.astype(np.float64) / 2).astype(dtype)
    op = dml.compile_operator(_desc(log, shape, dtype, (axis,)))
    two = jnp.asarray(2, dtype)
    got = jax.jit(lambda h: op.fn(h * two + jnp.zeros_like(h)))(half)
    check(got, (half.astype(np.float64) * 2).astype(dtype), (axis,), log)
    eye = np.eye(shape[1], dtype=dtype)  # a product that gives x exactly
    check(jax.jit(lambda a, b: op.fn(a @ b))(x, eye), x, (axis,), log)


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_equal_large_values_from_a_fused_product_are_uniform(log):
    """1000 equal values near 9.5e9, each a product fused into the lowering's loops (the tail of
    ONNX's light SqueezeNet: a constant-weight classifier, then the 1/169 of its average
    pooling): XLA's CPU backend contracted the product into an FMA with the subtraction of the
    maximum, so every difference came out -149 and every exponential 0. Their softmax is 1/1000
    each (log-softmax -log 1000), as the float64 reference of the rounded products says."""
    shape, scale = (1, 1000), np.float32(1 / 169)
    v = np.full(shape, 9.475692e9 / scale, np.float32)
    x = v * scale  # the products, rounded to float32 as the lowering's input
    op = dml.compile_operator(_desc(log, shape, np.float32, (1,)))
    got = jax.jit(lambda a: op.fn(a * scale))(v)
    check(got, x, (1,), log)


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_a_maximum_taken_from_other_values_gives_no_nan(monkeypatch, log):
    """As if XLA had computed the maximum from copies of the input rounded differently (one
    float32 ulp at 2e10 is 2048): a maximum below the true one is capped away (the result is
    still one-hot); one above it leaves a sum below 1, which is floored, so the values stay
    finite instead of 0 / 0."""
    from dml_jax.ops import softmax as module

    x = np.array([[1e10, 2e10, -3e10]], np.float32)
    real_max = jnp.max
    for ulps, one_hot in ((-3, True), (3, False)):

        def skewed(a, axis=None, keepdims=False, ulps=ulps):
            m = real_max(a, axis=axis, keepdims=keepdims)
            return m + ulps * jnp.abs(m) * np.finfo(np.float32).eps

        monkeypatch.setattr(module.jnp, "max", skewed)
        got = np.asarray((module.log_softmax if log else module.softmax)(jnp.asarray(x), (1,)))
        monkeypatch.setattr(module.jnp, "max", real_max)
        assert not np.isnan(got).any(), got
        if one_hot:
            check(got, x, (1,), log)


def _model(op_type: str, opset: int, shape, axis: int, elem: int, scale: float | None):
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits, src = [], [], "x"
    if scale is not None:  # a producer in the same graph: x * scale
        dtype = np.float16 if elem == TensorProto.FLOAT16 else np.float32
        inits.append(numpy_helper.from_array(np.asarray(scale, dtype), "scale"))
        nodes.append(helper.make_node("Mul", ["x", "scale"], ["scaled"]))
        src = "scaled"
    nodes.append(helper.make_node(op_type, [src], ["y"], axis=axis))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", elem, shape)],
        [helper.make_tensor_value_info("y", elem, shape)],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


ONNX_CASES = [((3,), 0), ((3, 2), 0), ((2, 3, 4), 1), ((2, 4, 3), -1)]


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["float32", "float16"])
@pytest.mark.parametrize("producer", [False, True], ids=["input", "after_mul"])
@pytest.mark.parametrize("shape, axis", ONNX_CASES, ids=[f"{s}-axis{a}" for s, a in ONNX_CASES])
def test_through_an_onnx_model(shape, axis, producer, dtype, opset, op_type):
    pytest.importorskip("onnx")
    from onnx import TensorProto

    from dml_jax.onnx import InferenceSession

    a = axis % len(shape)
    # Before opset 13 every axis from ``axis`` on is normalized (the coerced 2-D view).
    axes = tuple(range(a, len(shape))) if opset < 13 else (a,)
    x = along(LARGE[dtype], shape, a, dtype)
    elem = TensorProto.FLOAT16 if dtype == np.float16 else TensorProto.FLOAT
    model = _model(op_type, opset, shape, axis, elem, 2.0 if producer else None)
    feed = (x.astype(np.float64) / 2).astype(dtype) if producer else x  # halving is exact
    (got,) = InferenceSession(model).run(None, {"x": feed})
    check(got, x, axes, op_type == "LogSoftmax")
