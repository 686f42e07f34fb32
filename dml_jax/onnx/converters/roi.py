"""Regions of interest, as ONNX Runtime's DirectML provider maps them: MaxRoiPool onto
ROI_POOLING, RoiAlign (opsets 10 and 16) onto ROI_ALIGN1.

- MaxRoiPool: rois ``{num_rois, 5}`` rows ``[batch, x1, y1, x2, y2]`` are ROI_POOLING's ROITensor
  viewed as ``{1, 1, num_rois, 5}``; pooled_shape ``[height, width]`` is PooledSize.
- RoiAlign: LINEAR sampling, OutOfBoundsInputValue 0, OutputPixelOffset -0.5 (sample centres);
  coordinate_transformation_mode ``half_pixel`` (opset 16's default) is InputPixelOffset 0.5,
  ``output_half_pixel`` (opset 10's only behaviour) 0. sampling_ratio > 0 fixes the samples
  per output (Minimum = Maximum); 0 is ONNX's adaptive ``ceil(region / output)`` (1 to
  UINT32_MAX). batch_indices (INT64, INT32 in the graph) are CAST to UINT32.
- ``output_half_pixel`` also makes every region at least one pixel wide and high (after
  spatial_scale), which ROI_ALIGN1 does not: the rois' second corner is moved to
  ``x1 + max(x2 - x1, 1 / spatial_scale)`` first (SPLIT, SUBTRACT, MAX, ADD, JOIN; at import
  when the rois are constants).
- mode ``max``: ROI_ALIGN1's MAX is the largest interpolated sample; ONNX's is the largest
  weighted corner term of each sample (docs/semantics.md, "ONNX").
- NonMaxSuppression: no DirectML operator; a JAX lowering of the run-time number of boxes it
  selects (below).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ...tensor import Size2D, TensorDesc
from ..importer import Value, packed
from . import converter
from ._common import DataType, binary_value, cast_value, op
from .movement import empty

UINT32_MAX = 2**32 - 1


@converter("MaxRoiPool")
def _max_roi_pool(ctx, node, inputs):
    x, rois = inputs
    if x.rank != 4:
        raise ctx.fail(f"X must be 4-D, got shape {list(x.shape)}")
    if rois.rank != 2 or rois.shape[1] != 5:
        raise ctx.fail(f"rois must be {{num_rois, 5}}, got shape {list(rois.shape)}")
    pooled = [int(p) for p in ctx.attr("pooled_shape")]
    if len(pooled) != 2:
        raise ctx.fail(f"pooled_shape must hold 2 values, got {len(pooled)}")
    t = x.data_type
    out = (rois.shape[0], x.shape[1], pooled[0], pooled[1])
    desc = op("ROI_POOLING")(
        TensorDesc(t, x.shape),
        TensorDesc(rois.data_type, (1, 1) + rois.shape),
        TensorDesc(t, out),
        spatial_scale=float(ctx.attr("spatial_scale", 1.0)),
        pooled_size=Size2D(width=pooled[1], height=pooled[0]),
    )
    return [ctx.out(ctx.node(desc, [x, rois]), out)]


def _widened(ctx, rois: Value, scale: float) -> Value:
    """The rois with every region at least ``1 / scale`` wide and high (ONNX's
    output_half_pixel rule): the second corner moved to ``x1 + max(x2 - x1, 1 / scale)``."""
    if scale <= 0:
        return rois
    if rois.const is not None:
        r = rois.const
        corner = r[:, :2] + np.maximum(r[:, 2:] - r[:, :2], r.dtype.type(1 / scale))
        return ctx.constant(np.concatenate([r[:, :2], corner], axis=1).astype(r.dtype))
    t, count = rois.data_type, rois.shape[0]
    half = (count, 2)
    split = op("SPLIT")(packed(t, rois.shape), [packed(t, half), packed(t, half)], axis=1)
    n = ctx.node(split, [rois])
    first, second = ctx.out(n, half, 0), ctx.out(n, half, 1)
    size = binary_value(ctx, "ELEMENT_WISE_SUBTRACT", second, first)
    least = ctx.constant(np.asarray(1 / scale, t.numpy_dtype))
    size = binary_value(ctx, "ELEMENT_WISE_MAX", size, least)
    corner = binary_value(ctx, "ELEMENT_WISE_ADD", first, size)
    join = op("JOIN")([packed(t, half), packed(t, half)], packed(t, rois.shape), axis=1)
    return ctx.out(ctx.node(join, [first, corner]), rois.shape)


@converter("RoiAlign")
def _roi_align(ctx, node, inputs):
    x, rois, batch = inputs
    if x.rank != 4:
        raise ctx.fail(f"X must be 4-D, got shape {list(x.shape)}")
    if rois.rank != 2 or rois.shape[1] != 4:
        raise ctx.fail(f"rois must be {{num_rois, 4}}, got shape {list(rois.shape)}")
    if batch.shape != rois.shape[:1]:
        raise ctx.fail(f"batch_indices must be {{{rois.shape[0]}}}, got {list(batch.shape)}")
    mode = ctx.attr("mode", "avg")
    if mode not in ("avg", "max"):
        raise ctx.fail(f"mode '{mode}' is not supported")
    default = "half_pixel" if ctx.opset >= 16 else "output_half_pixel"
    transform = ctx.attr("coordinate_transformation_mode", default)
    if transform not in ("half_pixel", "output_half_pixel"):
        raise ctx.fail(f"coordinate_transformation_mode '{transform}' is not supported")
    ratio = int(ctx.attr("sampling_ratio", 0))
    if ratio < 0:
        raise ctx.fail(f"sampling_ratio must be >= 0, got {ratio}")
    scale = float(ctx.attr("spatial_scale", 1.0))
    height, width = int(ctx.attr("output_height", 1)), int(ctx.attr("output_width", 1))
    t = x.data_type
    out = (rois.shape[0], x.shape[1], height, width)
    if rois.shape[0] == 0:  # no regions (a pyramid level a detector's proposals all missed)
        return [empty(ctx, x, out)]
    if transform == "output_half_pixel":
        rois = _widened(ctx, rois, scale)
    indices = cast_value(ctx, batch, DataType.UINT32)
    desc = op("ROI_ALIGN1")(
        TensorDesc(t, x.shape),
        TensorDesc(rois.data_type, rois.shape),
        TensorDesc(DataType.UINT32, batch.shape),
        TensorDesc(t, out),
        reduction_function="MAX" if mode == "max" else "AVERAGE",
        interpolation_mode="LINEAR",
        spatial_scale_x=scale,
        spatial_scale_y=scale,
        input_pixel_offset=0.5 if transform == "half_pixel" else 0.0,
        output_pixel_offset=-0.5,
        out_of_bounds_input_value=0.0,
        minimum_samples_per_output=ratio if ratio else 1,
        maximum_samples_per_output=ratio if ratio else UINT32_MAX,
        align_regions_to_corners=False,
    )
    return [ctx.out(ctx.node(desc, [x, rois, indices]), out)]


# --- NonMaxSuppression ------------------------------------------------------------------------
# DirectML has no operator for it and ONNX Runtime's DirectML provider leaves it to the CPU. Its
# output length (the boxes selected) depends on the values: the session computes it before the
# run (``ctx.sizes``, with this same function), and the node is a JAX lowering of that size.


def _iou_over(boxes, center: bool, threshold):
    """[N, N]: whether box i and box j overlap by more than ``threshold`` (intersection over
    union), with ONNX's rules: corners in either order, an empty intersection or box never
    suppresses."""
    if center:
        cx, cy, w, h = (boxes[:, k] for k in range(4))
        x0, x1, y0, y1 = cx - w / 2, cx + w / 2, cy - h / 2, cy + h / 2
    else:
        y0, x0 = jnp.minimum(boxes[:, 0], boxes[:, 2]), jnp.minimum(boxes[:, 1], boxes[:, 3])
        y1, x1 = jnp.maximum(boxes[:, 0], boxes[:, 2]), jnp.maximum(boxes[:, 1], boxes[:, 3])
    ix = jnp.minimum(x1[:, None], x1[None]) - jnp.maximum(x0[:, None], x0[None])
    iy = jnp.minimum(y1[:, None], y1[None]) - jnp.maximum(y0[:, None], y0[None])
    inter = ix * iy
    area = (x1 - x0) * (y1 - y0)
    union = area[:, None] + area[None] - inter
    ok = (ix > 0) & (iy > 0) & (inter > 0) & (area[:, None] > 0) & (area[None] > 0) & (union > 0)
    return ok & (inter / jnp.where(ok, union, 1) > threshold)


def _nms_selection(boxes, scores, max_out, iou, score, center):
    """(order [B, C, N], chosen [B, C, N]): per batch and class, the boxes by descending score
    (ties: the lower index first) and which of them greedy suppression selects, in that order."""

    def one_class(b, s):
        n = s.shape[0]
        order = jnp.argsort(-s, stable=True)
        over = _iou_over(b, center, iou)[order][:, order]  # in sorted positions
        valid = s[order] > score if score is not None else jnp.ones(n, bool)

        def step(i, state):
            chosen, count = state
            ok = valid[i] & (count < max_out) & ~jnp.any(chosen & over[i])
            return chosen.at[i].set(ok), count + ok.astype(jnp.int32)

        chosen, _ = lax.fori_loop(0, n, step, (jnp.zeros(n, bool), jnp.int32(0)))
        return order, chosen

    per_class = jax.vmap(one_class, in_axes=(None, 0))
    return jax.vmap(per_class)(boxes, scores)


@functools.lru_cache(maxsize=64)
def _selected_count(max_out: int, iou: float, score: float | None, center: int):
    """The count of boxes NonMaxSuppression selects, one compiled function per attribute set:
    the session's size probe calls it at every run (a function made per call was compiled
    again at every run: 0.1 s a run on a CPU)."""
    return jax.jit(lambda b, s: _nms_selection(b, s, max_out, iou, score, center)[1].sum())


@converter("NonMaxSuppression", kind="jax")
def _non_max_suppression(ctx, node, inputs):
    boxes, scores = inputs[0], inputs[1]
    rest = list(inputs[2:]) + [None] * (5 - len(inputs))
    max_out = ctx.const(rest[0], "max_output_boxes_per_class")
    iou = ctx.const(rest[1], "iou_threshold")
    score = ctx.const(rest[2], "score_threshold")
    center = int(ctx.attr("center_point_box", 0))
    if center not in (0, 1):
        raise ctx.fail(f"attribute center_point_box must be 0 or 1, got {center}")
    if boxes.rank != 3 or boxes.shape[2] != 4:
        raise ctx.fail(f"input boxes must be [batch, boxes, 4], got {list(boxes.shape)}")
    if scores.rank != 3 or scores.shape[0] != boxes.shape[0] or scores.shape[2] != boxes.shape[1]:
        raise ctx.fail(
            f"input scores must be [batch, classes, boxes] = [{boxes.shape[0]}, C, "
            f"{boxes.shape[1]}], got {list(scores.shape)}"
        )
    max_out = 0 if max_out is None or max_out.size == 0 else max(int(max_out.reshape(-1)[0]), 0)
    iou = 0.0 if iou is None or iou.size == 0 else float(iou.reshape(-1)[0])
    score = None if score is None or score.size == 0 else float(score.reshape(-1)[0])
    t = DataType.INT32  # ONNX's INT64 indices, 32-bit in the graph
    if max_out == 0 or boxes.shape[1] == 0:
        return [ctx.constant(np.zeros((0, 3), np.int64))]
    max_out = min(max_out, boxes.shape[1])

    def selection(b, s):
        return _nms_selection(b, s, max_out, iou, score, center)

    def count_of(b, s):
        return (int(_selected_count(max_out, iou, score, center)(b, s)),)

    (count,) = ctx.sizes(count_of, [boxes, scores])
    if count == 0:
        return [ctx.constant(np.zeros((0, 3), np.int64))]

    def fn(b, s):
        order, chosen = selection(b, s)
        flat = jnp.nonzero(chosen.reshape(-1), size=count)[0]
        n_classes, n_boxes = s.shape[1], s.shape[2]
        batch = flat // (n_classes * n_boxes)
        cls = flat // n_boxes % n_classes
        box = order.reshape(-1)[flat]
        return (jnp.stack([batch, cls, box], axis=1).astype(jnp.int32),)

    return ctx.jax("NonMaxSuppression", fn, [boxes, scores], [((count, 3), t)])
