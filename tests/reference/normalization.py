"""NumPy references of the normalizations, from DirectML's pages (paraphrased below).

Everything is computed in float64 from the inputs as given and rounded once to the output type;
a fused activation is then applied to that rounded result (``activation``'s convention). FLOAT
members are float32 in DirectML: each is read as np.float64(np.float32(value)). Statistics are
taken with explicit loops over the positions that share them, never with the lowering's
reductions.

- BATCH_NORMALIZATION: Output = FusedActivation(Scale * (Input - Mean) / sqrt(Variance +
  Epsilon) + Bias); Mean, Variance, Scale and Bias have the input's rank, a size 1 broadcasting.
- BATCH_NORMALIZATION_TRAINING: the same with Mean and Variance computed from the input over the
  dimensions in which Scale has size 1 (population variance: the mean of squared deviations),
  a FusedAdd tensor added before the activation; Mean and Variance are outputs too.
- MEAN_VARIANCE_NORMALIZATION (0, 1, 2): the same formula with Mean and Variance over {C, H, W}
  (CrossChannel) or {H, W}, or over Axes; NormalizeVariance / UseVariance FALSE drop the
  division, UseMean FALSE takes Mean = 0 (the variance is then the mean square).
- LOCAL_RESPONSE_NORMALIZATION: Output = Input / (Bias + Alpha / LocalSize * square_sum) ^ Beta,
  square_sum over [c - floor((LocalSize - 1) / 2), c + ceil((LocalSize - 1) / 2)] clipped to the
  tensor, along channels (CrossChannel) or along height and width together.
- LP_NORMALIZATION: Input / max(||Input||_P, Epsilon) along Axis (dml_jax's choice of where
  Epsilon goes; the page only says it avoids division by zero).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from .activation import activation


def _f(value: float) -> float:
    return float(np.float64(np.float32(value)))


def _groups(shape: tuple[int, ...], axes: tuple[int, ...]):
    """For each position of the kept dimensions: the index tuples of its reduced elements."""
    kept = [range(1) if i in axes else range(n) for i, n in enumerate(shape)]
    for base in itertools.product(*kept):
        members = []
        for offset in itertools.product(*(range(shape[a]) for a in axes)):
            idx = list(base)
            for a, o in zip(axes, offset):
                idx[a] = o
            members.append(tuple(idx))
        yield base, members


def _statistics(x: np.ndarray, axes: tuple[int, ...], use_mean: bool = True):
    """(mean, variance) with the reduced dimensions of size 1, by explicit sums."""
    stat_shape = tuple(1 if i in axes else n for i, n in enumerate(x.shape))
    mean, var = np.zeros(stat_shape), np.zeros(stat_shape)
    for base, members in _groups(x.shape, axes):
        values = [float(x[i]) for i in members]
        m = sum(values) / len(values) if use_mean else 0.0
        mean[base] = m
        var[base] = sum((v - m) ** 2 for v in values) / len(values)
    return mean, var


def _out(desc: Any, y: np.ndarray, tensor=None) -> np.ndarray:
    tensor = tensor if tensor is not None else desc.output_tensor
    return y.astype(tensor.dtype)


def _b(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, np.float64)


def batch_normalization(desc: Any, x, mean, var, scale, bias) -> tuple[np.ndarray, ...]:
    eps = _f(desc.epsilon)
    y = _b(scale) * (_b(x) - _b(mean)) / np.sqrt(_b(var) + eps) + _b(bias)
    return (activation(desc.fused_activation, _out(desc, y)),)


def batch_normalization_training(desc: Any, x, scale, bias, *add) -> tuple[np.ndarray, ...]:
    axes = tuple(i for i, s in enumerate(scale.shape) if s == 1)
    mean, var = _statistics(_b(x), axes)
    y = _b(scale) * (_b(x) - mean) / np.sqrt(var + _f(desc.epsilon)) + _b(bias)
    if add:
        y = y + _b(add[0])
    out = activation(desc.fused_activation, _out(desc, y))
    return out, _out(desc, mean, desc.output_mean_tensor), _out(desc, var)


def _mvn(desc: Any, x, rest, axes, use_mean: bool, use_variance: bool):
    rest = list(rest)
    scale = rest.pop(0) if desc.scale_tensor is not None else None
    bias = rest.pop(0) if desc.bias_tensor is not None else None
    mean, var = _statistics(_b(x), tuple(sorted(axes)), use_mean)
    y = _b(x) - mean
    if use_variance:
        y = y / np.sqrt(var + _f(desc.epsilon))
    if scale is not None:
        y = y * _b(scale)
    if bias is not None:
        y = y + _b(bias)
    return (activation(desc.fused_activation, _out(desc, y)),)


def mean_variance_normalization(desc: Any, x, *rest):
    axes = (1, 2, 3) if desc.cross_channel else (2, 3)
    return _mvn(desc, x, rest, axes, True, desc.normalize_variance)


def mean_variance_normalization1(desc: Any, x, *rest):
    return _mvn(desc, x, rest, desc.axes, True, desc.normalize_variance)


def mean_variance_normalization2(desc: Any, x, *rest):
    return _mvn(desc, x, rest, desc.axes, desc.use_mean, desc.use_variance)


def local_response_normalization(desc: Any, x: np.ndarray) -> tuple[np.ndarray, ...]:
    n = desc.local_size
    lo, hi = (n - 1) // 2, -(-(n - 1) // 2)  # floor and ceil of (n - 1) / 2
    axes = (1,) if desc.cross_channel else (x.ndim - 2, x.ndim - 1)
    xf = _b(x)
    y = np.empty_like(xf)
    for idx in itertools.product(*(range(s) for s in x.shape)):
        ranges = []
        for d, i in enumerate(idx):
            if d in axes:
                ranges.append(range(max(0, i - lo), min(x.shape[d] - 1, i + hi) + 1))
            else:
                ranges.append(range(i, i + 1))
        square_sum = sum(xf[j] ** 2 for j in itertools.product(*ranges))
        base = _f(desc.bias) + _f(desc.alpha) / n * square_sum
        y[idx] = xf[idx] / base ** _f(desc.beta)
    return (_out(desc, y),)


def lp_normalization(desc: Any, x: np.ndarray) -> tuple[np.ndarray, ...]:
    xf = _b(x)
    y = np.empty_like(xf)
    for _, members in _groups(x.shape, (desc.axis,)):
        values = [xf[i] for i in members]
        if desc.p == 1:
            norm = sum(abs(v) for v in values)
        else:
            norm = sum(v * v for v in values) ** 0.5
        for i in members:
            y[i] = xf[i] / max(norm, _f(desc.epsilon))
    return (_out(desc, y),)


REFERENCES = {
    "DML_OPERATOR_BATCH_NORMALIZATION": batch_normalization,
    "DML_OPERATOR_BATCH_NORMALIZATION_TRAINING": batch_normalization_training,
    "DML_OPERATOR_MEAN_VARIANCE_NORMALIZATION": mean_variance_normalization,
    "DML_OPERATOR_MEAN_VARIANCE_NORMALIZATION1": mean_variance_normalization1,
    "DML_OPERATOR_MEAN_VARIANCE_NORMALIZATION2": mean_variance_normalization2,
    "DML_OPERATOR_LOCAL_RESPONSE_NORMALIZATION": local_response_normalization,
    "DML_OPERATOR_LP_NORMALIZATION": lp_normalization,
}
