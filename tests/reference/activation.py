"""NumPy references of the activation operators, from each DML_ACTIVATION_*_OPERATOR_DESC page.

FLOAT16 inputs are computed in float64 and rounded once to the output type (dml_jax computes them
in float32: the comparison tolerances allow for that). Each function returns a one-tuple.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def _wide(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64) if x.dtype.kind == "f" else x


def _out(desc: Any, y: np.ndarray) -> tuple[np.ndarray]:
    return (np.asarray(y).astype(desc.output_tensor.dtype),)


def relu(desc: Any, x: np.ndarray):
    # f(x) = max(0, x); NaN stays NaN (dml_jax's documented choice).
    w = _wide(x)
    return _out(desc, np.where(np.isnan(w) if w.dtype.kind == "f" else False, w, np.maximum(w, 0)))


def elu(desc: Any, x: np.ndarray):
    # f(x) = x if x >= 0 else Alpha * (exp(x) - 1)
    w = _wide(x)
    with np.errstate(over="ignore"):
        return _out(desc, np.where(w >= 0, w, np.float64(np.float32(desc.alpha)) * (np.exp(w) - 1)))


def linear(desc: Any, x: np.ndarray):
    # f(x) = Alpha * x + Beta
    w = _wide(x)
    return _out(desc, np.float32(desc.alpha) * w + np.float32(desc.beta))


def sigmoid(desc: Any, x: np.ndarray):
    # f(x) = 1 / (1 + exp(-x))
    w = _wide(x)
    with np.errstate(over="ignore"):
        return _out(desc, 1.0 / (1.0 + np.exp(-w)))


# ---------------------------------------------------------------------------------------------
# The other activations, one per DML_ACTIVATION_*_OPERATOR_DESC page. Common rules:
#
# - FLOAT members are float32 in DirectML: each is read as np.float64(np.float32(value)).
# - Float inputs are widened to float64, the page's formula is evaluated there, and the result is
#   rounded once to the output tensor's type.
# - NaN: every element-wise function here gives NaN for a NaN input, also where the page's
#   comparison branches would pick a number (THRESHOLDED_RELU's and SHRINK's "0, otherwise"):
#   the same choice as RELU, CLIP and THRESHOLD in dml_jax. The pages say nothing about NaN.
# - Infinities: where the function has a finite limit that the literal formula turns into
#   inf * 0 or inf / inf (GELU, SWISH and HARD_SWISH at the infinity where their gate is 0,
#   SOFTSIGN and TANH at +-inf), the limit is returned. Nothing else is special-cased.


def _attr(desc: Any, name: str) -> np.float64:
    """A FLOAT member, as DirectML holds it (float32), widened to float64."""
    return np.float64(np.float32(getattr(desc, name)))


def _nan_kept(w: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``y`` with NaN wherever the (float) input ``w`` is NaN."""
    return np.where(np.isnan(w), w, y) if w.dtype.kind == "f" else y


def _gated(w: np.ndarray, gate: np.ndarray) -> np.ndarray:
    """x * gate(x), with 0 (the limit) where x is infinite and its gate is 0 (not inf * 0)."""
    with np.errstate(invalid="ignore"):
        return np.where(np.isinf(w) & (gate == 0), 0.0, w * gate)


def _to_integer(y: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """A float64 result in an integer type: truncated toward zero and saturated to the type's
    range (dml_jax's float-to-integer rule, as for CLIP's bounds and integer POW), NaN as 0."""
    info = np.iinfo(dtype)
    y = np.trunc(np.nan_to_num(y, nan=0.0, posinf=float(info.max), neginf=float(info.min)))
    return np.clip(y, float(info.min), float(info.max)).astype(dtype)


def _wrapped(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Exact Python-integer results (an object array) wrapped into ``dtype`` two's complement."""
    dtype = np.dtype(dtype)
    bits = 8 * dtype.itemsize
    out = [int(v) % (1 << bits) for v in values.ravel()]
    if dtype.kind == "i":
        out = [v - (1 << bits) if v >= 1 << (bits - 1) else v for v in out]
    return np.array(out, dtype=dtype).reshape(values.shape)


def celu(desc: Any, x: np.ndarray):
    # f(x) = max(0, x) + min(0, Alpha * (exp(x / Alpha) - 1)), evaluated as written (expm1 for
    # exp(.) - 1). Alpha = 0 is not excluded by the page; it gives x / 0 here (the page is silent).
    w, a = _wide(x), _attr(desc, "alpha")
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        return _out(desc, np.maximum(0.0, w) + np.minimum(0.0, a * np.expm1(w / a)))


_ERF = np.vectorize(math.erf, otypes=[np.float64])


def gelu(desc: Any, x: np.ndarray):
    # f(x) = 0.5 * x * (1 + erf(x / sqrt(2))), the exact erf form (no tanh approximation).
    w = _wide(x)
    return _out(desc, _gated(w, 0.5 * (1.0 + _ERF(w / math.sqrt(2.0)))))


def hard_sigmoid(desc: Any, x: np.ndarray):
    # f(x) = max(0, min(Alpha * x + Beta, 1)): clamped to [0, 1]; NaN stays NaN.
    w = _wide(x)
    return _out(
        desc, np.maximum(0.0, np.minimum(_attr(desc, "alpha") * w + _attr(desc, "beta"), 1.0))
    )


def hard_swish(desc: Any, x: np.ndarray):
    # f(x) = x * HardSigmoid(x, Alpha, Beta), HardSigmoid as above.
    w = _wide(x)
    with np.errstate(invalid="ignore"):
        gate = np.maximum(0.0, np.minimum(_attr(desc, "alpha") * w + _attr(desc, "beta"), 1.0))
    return _out(desc, _nan_kept(w, _gated(w, gate)))


def identity(desc: Any, x: np.ndarray):
    # f(x) = x
    return _out(desc, _wide(x))


def leaky_relu(desc: Any, x: np.ndarray):
    # f(x) = x if x >= 0, else Alpha * x. NaN takes the second branch and stays NaN.
    w = _wide(x)
    return _out(desc, np.where(w >= 0, w, _attr(desc, "alpha") * w))


def parameterized_relu(desc: Any, x: np.ndarray, slope: np.ndarray):
    # f(x, slope) = x if x >= 0, else slope * x, with the slope of the same element (the caller
    # broadcasts SlopeTensor through strides: ``slope`` has the input's shape here). Integer
    # tensors (INT32/16/8 from 5_1): the exact product wrapped to the type (DirectML is silent).
    out = desc.output_tensor.dtype
    if x.dtype.kind in "iu":
        product = x.astype(object) * slope.astype(object)
        return (np.where(x >= 0, x, _wrapped(product, out)).astype(out),)
    w, s = _wide(x), _wide(slope)
    with np.errstate(invalid="ignore"):
        return _out(desc, np.where(w >= 0, w, s * w))


def parametric_softplus(desc: Any, x: np.ndarray):
    # f(x) = Alpha * ln(1 + exp(Beta * x)); ln(1 + exp(t)) is evaluated as logaddexp(0, t), the same
    # value without exp's overflow.
    w = _wide(x)
    with np.errstate(invalid="ignore"):
        return _out(desc, _attr(desc, "alpha") * np.logaddexp(0.0, _attr(desc, "beta") * w))


def scaled_elu(desc: Any, x: np.ndarray):
    # f(x) = Gamma * x if x > 0, else Gamma * (Alpha * exp(x) - Alpha) (= Gamma * Alpha * expm1(x)).
    w, a, g = _wide(x), _attr(desc, "alpha"), _attr(desc, "gamma")
    with np.errstate(over="ignore", invalid="ignore"):
        return _out(desc, np.where(w > 0, g * w, g * (a * np.expm1(w))))


def scaled_tanh(desc: Any, x: np.ndarray):
    # f(x) = Alpha * tanh(Beta * x)
    w = _wide(x)
    with np.errstate(invalid="ignore"):
        return _out(desc, _attr(desc, "alpha") * np.tanh(_attr(desc, "beta") * w))


def shrink(desc: Any, x: np.ndarray):
    # f(x) = x - Bias if x > Threshold; x + Bias if x < -Threshold; 0 otherwise. The branches are
    # taken in that order (a negative Threshold makes both conditions true for |x| < -Threshold:
    # the first one wins). NaN stays NaN. Integer tensors (all 8/16/32-bit types from 5_1;
    # DirectML is silent, dml_jax's documented rule): the comparisons are exact on the real
    # values; Bias is converted to the tensor type as CLIP converts its bounds (toward zero,
    # saturated to the type's range) and x -+ Bias wraps in two's complement, as integer
    # arithmetic does in every element-wise operator.
    out = np.dtype(desc.output_tensor.dtype)
    t = _attr(desc, "threshold")
    if out.kind in "iu":
        info = np.iinfo(out)
        bias = int(np.clip(np.trunc(_attr(desc, "bias")), info.min, info.max))
        exact = np.array([int(v) for v in x.ravel()], dtype=object).reshape(x.shape)
        above, below = x.astype(np.float64) > t, x.astype(np.float64) < -t
        y = np.where(above, exact - bias, np.where(below, exact + bias, 0))
        return (_wrapped(y, out),)
    w, b = x.astype(np.float64), _attr(desc, "bias")
    y = np.where(w > t, w - b, np.where(w < -t, w + b, 0.0))
    return _out(desc, _nan_kept(w, y))


def softplus(desc: Any, x: np.ndarray):
    # f(x) = ln(1 + exp(Steepness * x)) / Steepness, ln(1 + exp(t)) as logaddexp(0, t). The page
    # says Steepness cannot be less than 1 (a validation rule; not checked here).
    w, s = _wide(x), _attr(desc, "steepness")
    with np.errstate(invalid="ignore", divide="ignore"):
        return _out(desc, np.logaddexp(0.0, s * w) / s)


def softsign(desc: Any, x: np.ndarray):
    # f(x) = x / (1 + abs(x)); +-inf give +-1 (the limit; the literal quotient is inf / inf).
    w = _wide(x)
    with np.errstate(invalid="ignore"):
        return _out(desc, np.where(np.isinf(w), np.sign(w), w / (1.0 + np.abs(w))))


def swish(desc: Any, x: np.ndarray):
    # f(x) = x * Sigmoid(SigmoidInputScale * x), Sigmoid(t) = 1 / (1 + exp(-t)).
    w = _wide(x)
    with np.errstate(over="ignore", invalid="ignore"):
        gate = 1.0 / (1.0 + np.exp(-(_attr(desc, "sigmoid_input_scale") * w)))
    return _out(desc, _nan_kept(w, _gated(w, gate)))


def tanh(desc: Any, x: np.ndarray):
    # f(x) = (1 - exp(-2x)) / (1 + exp(-2x)), the hyperbolic tangent; np.tanh gives its value
    # without the formula's overflow for large negative x (tanh(-inf) = -1).
    return _out(desc, np.tanh(_wide(x)))


def thresholded_relu(desc: Any, x: np.ndarray):
    # f(x) = x if x > Alpha, else 0. NaN stays NaN (not the "otherwise" 0: the RELU choice).
    w = _wide(x)
    return _out(desc, _nan_kept(w, np.where(w > _attr(desc, "alpha"), w, 0.0)))


# ---------------------------------------------------------------------------------------------
# SOFTMAX, LOG_SOFTMAX and HARDMAX reduce over a set of axes.
#
# The version-0 operators (pages "DML_ACTIVATION_SOFTMAX_OPERATOR_DESC structure",
# "DML_ACTIVATION_LOG_SOFTMAX_OPERATOR_DESC structure", "DML_ACTIVATION_HARDMAX_OPERATOR_DESC
# structure"): InputTensor must have an effective rank of at most 2, the effective rank being the
# DimensionCount less the leading dimensions of size 1, so sizes { 1, 1, BatchCount, Width } are
# treated as { BatchCount, Width }. Each of the BatchCount rows is normalized on its own: the
# function runs over the last dimension (Width). HARDMAX's page says so in words: 1 for the first
# occurrence of the largest value of each row, 0 for all others. The version-1 pages confirm it:
# SOFTMAX1 / LOG_SOFTMAX1 / HARDMAX1 equal the version-0 operator when AxisCount == 1 and
# Axes == { DimensionCount - 1 }. So the version-0 references reduce over axis ndim - 1 only.
#
# The version-1 operators reduce over every axis listed in Axes at once (values in
# [0, DimensionCount - 1]); the order of the list and repeats do not matter here (a set).
#
# Softmax is exp(x - max) / sum(exp(x - max)) over the reduced elements (the max subtracted, as
# an older revision of the SOFTMAX page writes it), log-softmax is
# (x - max) - ln(sum(exp(x - max))). -inf entries give 0 (softmax) / -inf (log-softmax). A slice
# whose elements are all -inf gives NaN everywhere in that slice (max = -inf, -inf - -inf = NaN),
# and so does a slice holding +inf or NaN: the reference evaluates the formula and does not patch
# these cases.
#
# Hardmax (HARDMAX1's page): ReduceArgMax over Axes with DML_AXIS_DIRECTION_INCREASING, then 1
# where an element's index within the reduced axes equals that argmax, 0 elsewhere. ARGMAX's page
# numbers the reduced elements in row-major order over the reduced axes (argmax over all of a
# 3 x 3 tensor is an index in 0..8), and INCREASING picks the first of equal maxima. So a tie puts
# the 1 on the first maximum in row-major order of the reduced elements (axes ascending). NaN:
# the first NaN counts as the maximum (dml_jax's ARGMAX rule); an all -inf slice puts its 1 on
# the slice's first element.


def _v0_axes(desc: Any, x: np.ndarray) -> tuple[int, ...]:
    return (x.ndim - 1,)


def _v1_axes(desc: Any, x: np.ndarray) -> tuple[int, ...]:
    return tuple(sorted({int(a) for a in desc.axes}))


def _softmax(x: np.ndarray, axes: tuple[int, ...], log: bool) -> np.ndarray:
    w = x.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        shifted = w - np.max(w, axis=axes, keepdims=True)
        total = np.sum(np.exp(shifted), axis=axes, keepdims=True)
        return shifted - np.log(total) if log else np.exp(shifted) / total


def _hardmax(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    kept = [d for d in range(x.ndim) if d not in axes]
    # Reduced axes last, in ascending order, flattened row-major into one axis of length n.
    moved = np.transpose(x.astype(np.float64), kept + list(axes))
    flat = moved.reshape(moved.shape[: len(kept)] + (-1,))
    n = flat.shape[-1]
    # Scan the reduced elements in order; a later element wins only if strictly greater, or if it
    # is the first NaN (NaN is the extreme).
    best, where = flat[..., 0].copy(), np.zeros(flat.shape[:-1], dtype=np.int64)
    for k in range(1, n):
        v = flat[..., k]
        take = (v > best) | (np.isnan(v) & ~np.isnan(best))
        best, where = np.where(take, v, best), np.where(take, k, where)
    onehot = (np.arange(n) == where[..., None]).astype(np.float64).reshape(moved.shape)
    return np.transpose(onehot, np.argsort(kept + list(axes)))


def softmax(desc: Any, x: np.ndarray):
    return _out(desc, _softmax(x, _v0_axes(desc, x), log=False))


def softmax1(desc: Any, x: np.ndarray):
    return _out(desc, _softmax(x, _v1_axes(desc, x), log=False))


def log_softmax(desc: Any, x: np.ndarray):
    return _out(desc, _softmax(x, _v0_axes(desc, x), log=True))


def log_softmax1(desc: Any, x: np.ndarray):
    return _out(desc, _softmax(x, _v1_axes(desc, x), log=True))


def hardmax(desc: Any, x: np.ndarray):
    return _out(desc, _hardmax(x, _v0_axes(desc, x)))


def hardmax1(desc: Any, x: np.ndarray):
    return _out(desc, _hardmax(x, _v1_axes(desc, x)))


REFERENCES = {
    "DML_OPERATOR_ACTIVATION_CELU": celu,
    "DML_OPERATOR_ACTIVATION_ELU": elu,
    "DML_OPERATOR_ACTIVATION_GELU": gelu,
    "DML_OPERATOR_ACTIVATION_HARDMAX": hardmax,
    "DML_OPERATOR_ACTIVATION_HARDMAX1": hardmax1,
    "DML_OPERATOR_ACTIVATION_HARD_SIGMOID": hard_sigmoid,
    "DML_OPERATOR_ACTIVATION_HARD_SWISH": hard_swish,
    "DML_OPERATOR_ACTIVATION_IDENTITY": identity,
    "DML_OPERATOR_ACTIVATION_LEAKY_RELU": leaky_relu,
    "DML_OPERATOR_ACTIVATION_LINEAR": linear,
    "DML_OPERATOR_ACTIVATION_LOG_SOFTMAX": log_softmax,
    "DML_OPERATOR_ACTIVATION_LOG_SOFTMAX1": log_softmax1,
    "DML_OPERATOR_ACTIVATION_PARAMETERIZED_RELU": parameterized_relu,
    "DML_OPERATOR_ACTIVATION_PARAMETRIC_SOFTPLUS": parametric_softplus,
    "DML_OPERATOR_ACTIVATION_RELU": relu,
    "DML_OPERATOR_ACTIVATION_SCALED_ELU": scaled_elu,
    "DML_OPERATOR_ACTIVATION_SCALED_TANH": scaled_tanh,
    "DML_OPERATOR_ACTIVATION_SHRINK": shrink,
    "DML_OPERATOR_ACTIVATION_SIGMOID": sigmoid,
    "DML_OPERATOR_ACTIVATION_SOFTMAX": softmax,
    "DML_OPERATOR_ACTIVATION_SOFTMAX1": softmax1,
    "DML_OPERATOR_ACTIVATION_SOFTPLUS": softplus,
    "DML_OPERATOR_ACTIVATION_SOFTSIGN": softsign,
    "DML_OPERATOR_ACTIVATION_SWISH": swish,
    "DML_OPERATOR_ACTIVATION_TANH": tanh,
    "DML_OPERATOR_ACTIVATION_THRESHOLDED_RELU": thresholded_relu,
}


def activation(act: Any, y: np.ndarray) -> np.ndarray:
    """A fused activation applied to ``y`` (the op's result, already in the output type)."""
    if act is None:
        return y
    tensor = type("Tensor", (), {"dtype": y.dtype})()
    return REFERENCES[act.operator_type](_Filled(act, tensor), y)[0]


class _Filled:
    """A fused activation's desc with its output tensor's dtype (its tensors are None)."""

    def __init__(self, desc: Any, tensor: Any):
        self._desc, self.output_tensor, self.input_tensor = desc, tensor, tensor

    def __getattr__(self, name: str) -> Any:
        return getattr(self._desc, name)
