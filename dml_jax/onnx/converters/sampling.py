"""GridSample and DeformConv: sampling at positions computed at run time, which no DirectML
operator interpolates (ONNX Runtime's DirectML provider runs GridSample as a compute shader of
its own), as JAX nodes in the program (``ctx.jax``): ONNX's reference computations."""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from . import register
from ._common import DataType

# GridSample's modes by name: opset 16 says bilinear / bicubic, 20 on linear / cubic.
_GRID_MODES_16 = {"bilinear": "linear", "nearest": "nearest", "bicubic": "cubic"}
_GRID_MODES_20 = {"linear": "linear", "nearest": "nearest", "cubic": "cubic"}
_GRID_PADDING = ("zeros", "border", "reflection")


def _reflect(x, lo: float, hi: float):
    """``x`` reflected by the borders ``lo`` and ``hi`` until it lies between them (ONNX's rule,
    PyTorch's: -3.5 in [-1, 1] becomes 1.5, then 0.5). A single point (lo == hi) is itself."""
    span = hi - lo
    if span <= 0:
        return jnp.full_like(x, lo)
    below, above = lo - x, x - hi
    d = jnp.where(x < lo, below, above)
    n = jnp.trunc(d / span)
    r = d - n * span
    even = jnp.remainder(n, 2) == 0
    low_side = jnp.where(even, lo + r, hi - r)
    high_side = jnp.where(even, hi - r, lo + r)
    return jnp.where(x < lo, low_side, jnp.where(x > hi, high_side, x))


def _keys(t, a: float = -0.75):
    """Keys' cubic weights of the four taps at offsets -1, 0, 1, 2 from floor(x), t = x -
    floor(x) (GridSample's coefficient is fixed at -0.75)."""

    def near(s):
        return ((a + 2) * s - (a + 3)) * s * s + 1

    def far(s):
        return ((a * s - 5 * a) * s + 8 * a) * s - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _grid_sample(ctx, node, inputs):
    """GridSample-16 (4-D; bilinear, nearest, bicubic) and -20/22 (N-D; linear, nearest, cubic):
    DirectML has no gather-with-interpolation operator (ONNX Runtime's DirectML provider runs
    GridSample as a compute shader of its own): a JAX node, ONNX's reference computation. The
    grid's last dimension lists coordinates innermost axis first (x, y, z); each is
    denormalized (align_corners: -1 and 1 are the corner elements' centres, else their outer
    edges); nearest rounds half to even; a coordinate beyond the borders is clamped to the
    input (border) or reflected into it (reflection) before the taps are taken, and each tap
    outside reads 0 (zeros), the nearest edge element (border) or its reflection. Linear and
    cubic interpolate in float32 (float64 for double data); integer data is sampled by nearest
    only."""
    x, grid = inputs
    r = x.rank - 2
    modes = _GRID_MODES_16 if ctx.opset < 20 else _GRID_MODES_20
    default = "bilinear" if ctx.opset < 20 else "linear"
    name = ctx.attr("mode", default)
    if name not in modes:
        raise ctx.fail(
            f"attribute 'mode': '{name}' is not one of {sorted(modes)} (GridSample-{ctx.opset})"
        )
    mode = modes[name]
    padding = ctx.attr("padding_mode", "zeros")
    if padding not in _GRID_PADDING:
        raise ctx.fail(f"attribute 'padding_mode': '{padding}' is not one of {list(_GRID_PADDING)}")
    align = bool(int(ctx.attr("align_corners", 0)))
    if r < 1 or (ctx.opset < 20 and r != 2):
        raise ctx.fail(
            f"input X must be {'4-D' if ctx.opset < 20 else 'at least 3-D'} (N, C, spatial...), "
            f"got shape {list(x.shape)}"
        )
    n, c = x.shape[:2]
    dims = x.shape[2:]
    if grid.rank != r + 2 or grid.shape[0] != n or grid.shape[-1] != r:
        raise ctx.fail(
            f"grid must have shape [{n}, out..., {r}] for X of shape {list(x.shape)}, got "
            f"{list(grid.shape)}"
        )
    if not grid.data_type.is_float:
        raise ctx.fail(f"grid must be a float tensor, got {grid.data_type.name}")
    t = x.data_type
    if not t.is_float and mode != "nearest":
        raise ctx.fail(
            f"attribute 'mode': '{name}' on {t.name} data: ONNX leaves the rounding of "
            "interpolated integers undefined (nearest samples integer data exactly)"
        )
    out = grid.shape[1:-1]
    compute = np.float64 if DataType.FLOAT64 in (t, grid.data_type) else np.float32
    points = math.prod(out)

    def sample(data, g):
        g = g.reshape(n, points, r).astype(compute)
        flat = data.reshape(n, c, math.prod(dims))
        index, weight, valid = None, None, None
        for axis, size in enumerate(dims):
            u = g[..., r - 1 - axis]  # the grid lists the innermost axis first
            if align:
                lo, hi = 0.0, size - 1.0
                p = (u + 1) / 2 * (size - 1)
            else:
                lo, hi = -0.5, size - 0.5
                p = ((u + 1) * size - 1) / 2
            if mode == "nearest":
                p = jnp.round(p)  # half to even
            outside = (p < lo) | (p > hi)
            if padding == "border":
                p = jnp.where(outside, jnp.clip(p, 0, size - 1), p)
            elif padding == "reflection":
                p = jnp.where(outside, _reflect(p, lo, hi), p)
            if mode == "nearest":
                taps, weights = [p], [jnp.ones_like(p)]
            else:
                base = jnp.floor(p)
                f = p - base
                if mode == "linear":
                    taps, weights = [base, base + 1], [1 - f, f]
                else:
                    taps, weights = [base - 1, base, base + 1, base + 2], _keys(f)
            k_index, k_weight, k_valid = [], [], []
            for tap, w in zip(taps, weights):
                ok = (tap >= 0) & (tap <= size - 1)
                if padding == "reflection":
                    tap = jnp.trunc(_reflect(tap, lo, hi))
                at = jnp.clip(tap, 0, size - 1).astype(jnp.int32)
                k_index.append(at)
                k_weight.append(w)
                k_valid.append(ok if padding == "zeros" else jnp.ones_like(ok))
            k_index = jnp.stack(k_index, -1)  # n, points, taps
            k_weight = jnp.stack(k_weight, -1)
            k_valid = jnp.stack(k_valid, -1)
            if index is None:
                index, weight, valid = k_index, k_weight, k_valid
            else:  # every combination of this axis' taps with the earlier axes'
                index = (index[..., :, None] * size + k_index[..., None, :]).reshape(n, points, -1)
                weight = (weight[..., :, None] * k_weight[..., None, :]).reshape(n, points, -1)
                valid = (valid[..., :, None] & k_valid[..., None, :]).reshape(n, points, -1)
        taps = index.shape[-1]
        picked = jnp.take_along_axis(flat, index.reshape(n, 1, points * taps), axis=2)
        picked = picked.reshape(n, c, points, taps)
        if mode == "nearest":
            y = jnp.where(valid[:, None, :, 0], picked[..., 0], jnp.zeros((), picked.dtype))
        else:
            terms = picked.astype(compute) * weight[:, None].astype(compute)
            y = jnp.sum(jnp.where(valid[:, None], terms, 0), axis=-1)  # a tap outside adds 0
        return (y.reshape((n, c) + tuple(out)).astype(t.numpy_dtype),)

    return ctx.jax("GridSample", sample, [x, grid], [((n, c) + tuple(out), t, x.is_bool)])


register("GridSample", _grid_sample, kind="jax")


# --- DeformConv: a direct JAX lowering ----------------------------------------------------------


def _deform_conv(ctx, node, inputs):
    """DeformConv-19/22: a convolution whose every kernel tap reads the input at its regular
    position plus a learned offset (per output position and offset group), interpolated
    linearly, with 0 for taps outside the input (so a location outside the padded input gives
    0), and scaled by the optional mask. DirectML has no operator for it: a JAX node that
    samples the taps (N-linear, as ONNX's reference samples through GridSample with
    align_corners) and contracts them with the weights per group. Computed in float32 (float64
    for double tensors)."""
    x, w, offset = inputs[:3]
    bias, mask = (list(inputs[3:]) + [None, None])[:2]
    r = x.rank - 2
    if r < 1:
        raise ctx.fail(f"input X must have at least 3 dimensions, got shape {list(x.shape)}")
    t = x.data_type
    if not t.is_float:
        raise ctx.fail(f"input X must be a float tensor, got {t.name}")
    n, c = x.shape[:2]
    dims = x.shape[2:]
    if w.rank != x.rank:
        raise ctx.fail(f"W must have rank {x.rank}, got shape {list(w.shape)}")
    oc = w.shape[0]
    kernel = tuple(int(k) for k in ctx.attr("kernel_shape", w.shape[2:]))
    if kernel != tuple(w.shape[2:]):
        raise ctx.fail(
            f"attribute 'kernel_shape': {list(kernel)} differs from W's {list(w.shape[2:])}"
        )
    strides = [int(s) for s in ctx.attr("strides", [1] * r)]
    dilations = [int(d) for d in ctx.attr("dilations", [1] * r)]
    pads = [int(p) for p in ctx.attr("pads", [0] * (2 * r))]
    group = int(ctx.attr("group", 1))
    offset_group = int(ctx.attr("offset_group", 1))
    for what, v, size in (("strides", strides, r), ("dilations", dilations, r),
                          ("pads", pads, 2 * r)):  # fmt: skip
        if len(v) != size:
            raise ctx.fail(f"attribute '{what}' must hold {size} values, got {len(v)}")
    if min(strides + dilations) < 1 or min(pads) < 0:
        raise ctx.fail("attributes 'strides' and 'dilations' must be >= 1, 'pads' >= 0")
    if group < 1 or c % group or oc % group or w.shape[1] * group != c:
        raise ctx.fail(
            f"attribute 'group' ({group}): X's {c} channels and W's shape {list(w.shape)} do not "
            "divide into it"
        )
    if offset_group < 1 or c % offset_group:
        raise ctx.fail(
            f"attribute 'offset_group' ({offset_group}) does not divide X's {c} channels"
        )
    out = tuple(
        (size + pads[a] + pads[a + r] - (kernel[a] - 1) * dilations[a] - 1) // strides[a] + 1
        for a, size in enumerate(dims)
    )
    if min(out) < 1:
        raise ctx.fail(f"the output's spatial shape {list(out)} has an empty dimension")
    taps = math.prod(kernel)
    want = (n, offset_group * taps * r) + out
    if tuple(offset.shape) != want:
        raise ctx.fail(f"input 'offset' must have shape {list(want)}, got {list(offset.shape)}")
    if mask is not None and tuple(mask.shape) != (n, offset_group * taps) + out:
        raise ctx.fail(
            f"input 'mask' must have shape {[n, offset_group * taps, *out]}, got {list(mask.shape)}"
        )
    if bias is not None and tuple(bias.shape) != (oc,):
        raise ctx.fail(f"input 'B' must have shape [{oc}], got {list(bias.shape)}")
    compute = np.float64 if t is DataType.FLOAT64 else np.float32
    points = math.prod(out)
    # Each tap's regular position along each axis, for every output position: (r, taps, points).
    grids = np.meshgrid(*[np.arange(k) for k in kernel], indexing="ij")
    outs = np.meshgrid(*[np.arange(o) for o in out], indexing="ij")
    base = np.stack(
        [
            (
                -pads[a]
                + strides[a] * outs[a].reshape(1, -1)
                + dilations[a] * grids[a].reshape(-1, 1)
            )
            for a in range(r)
        ]
    ).astype(compute)
    cg = c // offset_group

    def deform(data, weights, shifts, *optional):
        optional = list(optional)
        b = optional.pop(0) if bias is not None else None
        m = optional.pop(0) if mask is not None else None
        shifts = shifts.astype(compute).reshape(n, offset_group, taps, r, points)
        flat = data.astype(compute).reshape(n, offset_group, cg, math.prod(dims))
        index, weight = None, None
        for a, size in enumerate(dims):
            p = jnp.asarray(base[a]) + shifts[:, :, :, a]  # n, offset groups, taps, points
            low = jnp.floor(p)
            f = p - low
            k_index, k_weight = [], []
            for tap, tw in ((low, 1 - f), (low + 1, f)):
                inside = (tap >= 0) & (tap <= size - 1)
                k_index.append(jnp.clip(tap, 0, size - 1).astype(jnp.int32))
                k_weight.append(jnp.where(inside, tw, 0))
            k_index, k_weight = jnp.stack(k_index, -1), jnp.stack(k_weight, -1)
            if index is None:
                index, weight = k_index, k_weight
            else:
                index = (index[..., :, None] * size + k_index[..., None, :]).reshape(
                    *k_index.shape[:-1], -1
                )
                weight = (weight[..., :, None] * k_weight[..., None, :]).reshape(
                    *k_weight.shape[:-1], -1
                )
        corners = index.shape[-1]
        picked = jnp.take_along_axis(flat, index.reshape(n, offset_group, 1, -1), axis=3)
        picked = picked.reshape(n, offset_group, cg, taps, points, corners)
        values = jnp.sum(picked * weight[:, :, None], axis=-1)  # n, og, cg, taps, points
        if m is not None:
            values = values * m.astype(compute).reshape(n, offset_group, 1, taps, points)
        values = values.reshape(n, group, c // group, taps, points)
        kernel_w = weights.astype(compute).reshape(group, oc // group, c // group, taps)
        y = jnp.einsum("ngctp,goct->ngop", values, kernel_w, precision="highest")
        y = y.reshape(n, oc, points)
        if b is not None:
            y = y + b.astype(compute)[None, :, None]
        return (y.reshape((n, oc) + out),)

    present = [v for v in (x, w, offset, bias, mask) if v is not None]
    return ctx.jax("DeformConv", deform, present, [((n, oc) + out, t)])


register("DeformConv", _deform_conv, kind="jax")
