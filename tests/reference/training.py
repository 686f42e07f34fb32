"""NumPy references of DirectML's gradient operators and ADAM_OPTIMIZER, from their pages
(paraphrased), with explicit loops; nothing here differentiates anything or follows the
lowering (which is mostly ``jax.vjp`` of the forward lowering).

- ACTIVATION_RELU_GRAD: dY where X > 0, else 0.
- AVERAGE_POOLING_GRAD: every window point on the input receives the window's incoming
  gradient divided by the window's divisor (prod(WindowSize) with IncludePadding, else the
  window's points on the input); MAX_POOLING_GRAD: the whole gradient goes to the window's
  largest input element, the lowest logical index (first in window order) of equal ones, NaN
  the largest; overlapping windows add up.
- SLICE_GRAD: zeros, with element c of the gradient written at SLICE1's read position.
- RESAMPLE_GRAD(1): each gradient element added to the inputs RESAMPLE1/2 sampled for it, with
  the sampling weights.
- LOCAL_RESPONSE_NORMALIZATION_GRAD: the derivative of y_i = x_i * B_i^-Beta, B_i = Bias +
  Alpha / LocalSize * sum of squares over i's window, written out:
  dx_k = dy_k B_k^-Beta - 2 Alpha Beta / LocalSize * x_k * sum over i whose window holds k of
  dy_i x_i B_i^(-Beta-1).
- BATCH_NORMALIZATION_GRAD: dy * Scale / sqrt(Var + eps); scale gradient sum(dy * (x - Mean) /
  sqrt(Var + eps)); bias gradient sum(dy); sums over the dimensions where Mean has size 1.
- BATCH_NORMALIZATION_TRAINING_GRAD: Scale * k * (dy - mean(dy) - c * mean(dy * c) / (Var +
  eps)), c = x - Mean, k = 1 / sqrt(Var + eps); scale and bias gradients as above.
- ROI_ALIGN_GRAD: per region, output element and sample (ROI_ALIGN1's sampling, from
  reference/roi.py), the image gradient through the interpolation weights (AVERAGE: / sample
  count; MAX: to the first largest in-bounds sample), and the coordinate gradient: the
  interpolation's slope (floor and floor + 1 neighbours, 0 where the coordinate is clamped or
  for NEAREST_NEIGHBOR) times the sample coordinate's derivative with respect to x1, y1, x2, y2.
- ADAM_OPTIMIZER: the page's update in float64 from the float32 members.

Everything accumulates in float64 and rounds once to the output type.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from .normalization import _groups
from .pooling import _geometry, _is_greater, _window
from .resample import _contributions, _parameters
from .roi import _coordinates, _count, _offsets

f32 = np.float32


def _f(value: float) -> float:
    """A DML FLOAT member, read as float32."""
    return float(f32(value))


def _b(a) -> np.ndarray:
    return np.asarray(a, np.float64)


def relu_grad(desc: Any, x: np.ndarray, g: np.ndarray) -> tuple[np.ndarray]:
    out = np.zeros_like(g)
    for idx in np.ndindex(x.shape):
        if x[idx] > 0:
            out[idx] = g[idx]
    return (out,)


# --- pooling ----------------------------------------------------------------------------------


def _windows(desc: Any, shape: tuple[int, ...]):
    """(batch, channel, output position, window points) of every pooling window."""
    n, c, *spatial = shape
    spatial = tuple(spatial)
    dilations, outputs = _geometry(desc, spatial)
    for b, ch in itertools.product(range(n), range(c)):
        for o in itertools.product(*(range(k) for k in outputs)):
            yield b, ch, o, _window(desc, dilations, spatial, o)


def average_pooling_grad(desc: Any, g: np.ndarray) -> tuple[np.ndarray]:
    shape = tuple(desc.output_gradient_tensor.sizes)
    out = np.zeros(shape, np.float64)
    for b, ch, o, points in _windows(desc, shape):
        on_input = [p for p in points if p is not None]
        divisor = len(points) if desc.include_padding else len(on_input)
        for p in on_input:
            out[(b, ch, *p)] += float(g[(b, ch, *o)]) / divisor
    return (out.astype(g.dtype),)


def max_pooling_grad(desc: Any, x: np.ndarray, g: np.ndarray) -> tuple[np.ndarray]:
    out = np.zeros(x.shape, np.float64)
    for b, ch, o, points in _windows(desc, x.shape):
        best = None
        for p in points:
            if p is not None and (best is None or _is_greater(x[(b, ch, *p)], x[(b, ch, *best)])):
                best = p
        if best is not None:
            out[(b, ch, *best)] += float(g[(b, ch, *o)])
    return (out.astype(g.dtype),)


# --- SLICE_GRAD / RESAMPLE_GRAD ---------------------------------------------------------------


def slice_grad(desc: Any, g: np.ndarray) -> tuple[np.ndarray]:
    out = np.zeros(tuple(desc.output_gradient_tensor.sizes), g.dtype)
    starts = [
        off + size - 1 if step < 0 else off
        for off, size, step in zip(
            desc.input_window_offsets, desc.input_window_sizes, desc.input_window_strides
        )
    ]
    for c in np.ndindex(g.shape):
        target = tuple(s + step * i for s, step, i in zip(starts, desc.input_window_strides, c))
        out[target] = g[c]
    return (out,)


def resample_grad(desc: Any, g: np.ndarray) -> tuple[np.ndarray]:
    shape = tuple(desc.output_gradient_tensor.sizes)
    scales, in_offs, out_offs, rounding, _antialiased, linear = _parameters(desc, len(shape))
    out = np.zeros(shape, np.float64)
    for index in np.ndindex(g.shape):
        per_dim = [
            _contributions(
                index[d], shape[d], scales[d], in_offs[d], out_offs[d], rounding, False, linear
            )
            for d in range(len(shape))
        ]
        for combo in itertools.product(*per_dim):
            weight = math.prod(w for _, w in combo)
            out[tuple(i for i, _ in combo)] += weight * float(g[index])
    return (out.astype(g.dtype),)


# --- normalizations ---------------------------------------------------------------------------


def lrn_grad(desc: Any, x: np.ndarray, g: np.ndarray) -> tuple[np.ndarray]:
    n = desc.local_size
    lo, hi = (n - 1) // 2, -(-(n - 1) // 2)
    axes = (1,) if desc.cross_channel else (x.ndim - 2, x.ndim - 1)
    alpha, beta, bias = _f(desc.alpha), _f(desc.beta), _f(desc.bias)
    xf, gf = _b(x), _b(g)

    def window(idx):
        ranges = [
            range(max(0, i - lo), min(x.shape[d] - 1, i + hi) + 1) if d in axes else (i,)
            for d, i in enumerate(idx)
        ]
        return list(itertools.product(*ranges))

    base = np.empty_like(xf)
    for idx in np.ndindex(x.shape):
        base[idx] = bias + alpha / n * sum(xf[j] ** 2 for j in window(idx))
    held = np.zeros_like(xf)  # sum over the windows i holding k of dy_i x_i B_i^(-beta-1)
    for i in np.ndindex(x.shape):
        term = gf[i] * xf[i] * base[i] ** (-beta - 1)
        for k in window(i):
            held[k] += term
    out = gf * base ** (-beta) - 2 * alpha * beta / n * xf * held
    return (out.astype(g.dtype),)


def _stat_axes(desc: Any) -> tuple[int, ...]:
    return tuple(i for i, s in enumerate(desc.mean_tensor.sizes) if s == 1)


def _batch_norm_grads(desc: Any, x, g, mean, var, scale, training: bool):
    eps = 0.0 if desc.epsilon is None else _f(desc.epsilon)
    axes = _stat_axes(desc)
    xf, gf = _b(x), _b(g)
    dx = np.zeros_like(xf)
    dscale = np.zeros(mean.shape)
    dbias = np.zeros(mean.shape)
    for base, members in _groups(x.shape, axes):
        stat = tuple(0 if i in axes else b for i, b in enumerate(base))
        m, v, s = float(mean[stat]), float(var[stat]), float(scale[stat])
        k = 1.0 / math.sqrt(v + eps)
        dys = [gf[i] for i in members]
        cs = [xf[i] - m for i in members]
        dscale[stat] = sum(dy * c * k for dy, c in zip(dys, cs))
        dbias[stat] = sum(dys)
        mean_dy = sum(dys) / len(dys)
        mean_dyc = sum(dy * c for dy, c in zip(dys, cs)) / len(dys)
        for i, dy, c in zip(members, dys, cs):
            if training:
                dx[i] = s * k * (dy - mean_dy - c * mean_dyc / (v + eps))
            else:
                dx[i] = dy * s * k
    return tuple(a.astype(x.dtype) for a in (dx, dscale, dbias))


def batch_normalization_grad(desc: Any, x, g, mean, var, scale) -> tuple[np.ndarray, ...]:
    return _batch_norm_grads(desc, x, g, mean, var, scale, training=False)


def batch_normalization_training_grad(desc: Any, x, g, mean, var, scale):
    return _batch_norm_grads(desc, x, g, mean, var, scale, training=True)


# --- ROI_ALIGN_GRAD ---------------------------------------------------------------------------


def _axis_taps(coord: float, size: int, linear: bool):
    """(taps, slopes) of one sample coordinate along one axis, or None outside [-1, size]:
    taps [(index, weight)], slopes [(index, d weight / d coordinate)]."""
    if not -1 <= coord <= size:
        return None
    clamped = min(max(coord, 0.0), size - 1.0)
    moving = 0 <= coord <= size - 1  # the clamp holds the coordinate elsewhere
    if not linear:
        return [(int(np.round(clamped)), 1.0)], []
    i0 = math.floor(clamped)
    i1 = min(i0 + 1, size - 1)
    frac = clamped - i0
    return [(i0, 1.0 - frac), (i1, frac)], ([(i0, -1.0), (i1, 1.0)] if moving else [])


def _coordinate_slopes(desc: Any, size: float, out_size: int, count: int, scale: float):
    """d coordinate / d (first corner, second corner) of each sample (raw ROI units)."""
    _, out_off, corners = _offsets(desc)
    total = out_size * count
    slopes = []
    for o in range(out_size):
        row = []
        for k in range(count):
            if corners and total == 1:
                t = 0.5
            else:
                t = (o * count + k - _f(out_off)) / (total - 1 if corners else total)
            row.append((scale * (1 - t), scale * t))
        slopes.append(row)
    return slopes


def roi_align_grad(desc: Any, *arrays) -> tuple[np.ndarray, ...]:
    arrays = list(arrays)
    x = arrays.pop(0) if desc.input_tensor is not None else None
    g, rois, batch = arrays
    image = desc.input_tensor if desc.input_tensor is not None else desc.output_gradient_tensor
    n, c, h, w = image.sizes
    oh, ow = g.shape[2:]
    linear = desc.interpolation_mode.name == "LINEAR"
    is_max = desc.reduction_function.name == "MAX"
    dx = np.zeros((n, c, h, w))
    table = rois.reshape(-1, 4)
    droi = np.zeros(table.shape)
    sx, sy = f32(desc.spatial_scale_x), f32(desc.spatial_scale_y)
    for r, (rx1, ry1, rx2, ry2) in enumerate(table):
        b = int(batch.reshape(-1)[r])
        if b >= n:
            continue
        x1, x2 = f32(rx1) * sx, f32(rx2) * sx
        y1, y2 = f32(ry1) * sy, f32(ry2) * sy
        size_x, size_y = f32(x2 - x1), f32(y2 - y1)
        count_x, count_y = _count(desc, size_x, ow, w), _count(desc, size_y, oh, h)
        xs = _coordinates(desc, x1, size_x, ow, count_x)
        ys = _coordinates(desc, y1, size_y, oh, count_y)
        dxs = _coordinate_slopes(desc, size_x, ow, count_x, float(sx))
        dys = _coordinate_slopes(desc, size_y, oh, count_y, float(sy))
        for ch, oy, ox in itertools.product(range(c), range(oh), range(ow)):
            grad = float(g[r, ch, oy, ox])
            samples = []  # (weight, y taps, x taps, y slopes, x slopes, d coord_y, d coord_x)
            for (yc, dyc), (xc, dxc) in itertools.product(
                zip(ys[oy], dys[oy]), zip(xs[ox], dxs[ox])
            ):
                ty, tx = _axis_taps(float(yc), h, linear), _axis_taps(float(xc), w, linear)
                samples.append(None if ty is None or tx is None else (ty, tx, dyc, dxc))
            if is_max:
                best, best_value = None, None
                for sample in samples:
                    if sample is None:
                        continue
                    (ty, _), (tx, _), _, _ = sample
                    value = sum(wy * wx * float(x[b, ch, iy, ix]) for iy, wy in ty for ix, wx in tx)
                    if best is None or value > best_value:
                        best, best_value = sample, value
                chosen = [] if best is None else [(best, 1.0)]
            else:
                chosen = [(s, 1.0 / len(samples)) for s in samples if s is not None]
            for ((ty, sy_taps), (tx, sx_taps), dyc, dxc), weight in chosen:
                for (iy, wy), (ix, wx) in itertools.product(ty, tx):
                    dx[b, ch, iy, ix] += grad * weight * wy * wx
                if x is None:
                    continue
                img = x[b, ch].astype(np.float64)
                slope_x = sum(wy * s * img[iy, ix] for iy, wy in ty for ix, s in sx_taps)
                slope_y = sum(s * wx * img[iy, ix] for iy, s in sy_taps for ix, wx in tx)
                droi[r] += (
                    grad
                    * weight
                    * np.array(
                        [slope_x * dxc[0], slope_y * dyc[0], slope_x * dxc[1], slope_y * dyc[1]]
                    )
                )
    out = ()
    if desc.output_gradient_tensor is not None:
        out += (dx.astype(g.dtype),)
    if desc.output_roi_gradient_tensor is not None:
        out += (droi.reshape(rois.shape).astype(rois.dtype),)
    return out


# --- ADAM_OPTIMIZER ---------------------------------------------------------------------------


def adam_optimizer(desc: Any, x, m, v, g, step) -> tuple[np.ndarray, ...]:
    lr, b1, b2, eps = (_f(a) for a in (desc.learning_rate, desc.beta1, desc.beta2, desc.epsilon))
    t = float(step.reshape(-1)[0])
    with np.errstate(divide="ignore", invalid="ignore"):  # T = 0: 0 / 0, as the page reads
        alpha = np.sqrt(np.float64(1.0) - b2**t) / (np.float64(1.0) - b1**t)
    params, first, second = (np.empty(x.shape) for _ in range(3))
    for idx in np.ndindex(x.shape):
        gi = float(g[idx])
        mi = b1 * float(m[idx]) + (1.0 - b1) * gi
        vi = b2 * float(v[idx]) + (1.0 - b2) * gi * gi
        first[idx], second[idx] = mi, vi
        params[idx] = float(x[idx]) - lr * alpha * mi / (math.sqrt(vi) + eps)
    return tuple(a.astype(x.dtype) for a in (params, first, second))


REFERENCES = {
    "DML_OPERATOR_ACTIVATION_RELU_GRAD": relu_grad,
    "DML_OPERATOR_AVERAGE_POOLING_GRAD": average_pooling_grad,
    "DML_OPERATOR_MAX_POOLING_GRAD": max_pooling_grad,
    "DML_OPERATOR_SLICE_GRAD": slice_grad,
    "DML_OPERATOR_RESAMPLE_GRAD": resample_grad,
    "DML_OPERATOR_RESAMPLE_GRAD1": resample_grad,
    "DML_OPERATOR_LOCAL_RESPONSE_NORMALIZATION_GRAD": lrn_grad,
    "DML_OPERATOR_BATCH_NORMALIZATION_GRAD": batch_normalization_grad,
    "DML_OPERATOR_BATCH_NORMALIZATION_TRAINING_GRAD": batch_normalization_training_grad,
    "DML_OPERATOR_ROI_ALIGN_GRAD": roi_align_grad,
    "DML_OPERATOR_ADAM_OPTIMIZER": adam_optimizer,
}
