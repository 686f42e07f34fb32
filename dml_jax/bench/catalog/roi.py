"""Bench cases of the operators of ``dml_jax.ops.roi``."""

from __future__ import annotations

from dml_jax.bench.catalog import BenchCase, register_cases
from dml_jax.ops.roi import RoiAlign1OperatorDesc
from dml_jax.tensor import TensorDesc


def _bench_roi_align(shape: tuple, dtype: str, full: bool) -> list[BenchCase]:
    if dtype not in ("float32", "float16"):
        return []  # FLOAT32 and FLOAT16 only
    _, c, h, w = shape
    x = TensorDesc(dtype.upper(), (1, c, h, w))
    rois, out = 256, 7
    desc = RoiAlign1OperatorDesc(
        x,
        x.like(sizes=(rois, 4)),
        TensorDesc("UINT32", (rois,)),
        x.like(sizes=(rois, c, out, out)),
        "AVERAGE",
        "LINEAR",
        spatial_scale_x=w / 4,
        spatial_scale_y=h / 4,
        input_pixel_offset=0.5,
        output_pixel_offset=-0.5,
        out_of_bounds_input_value=0.0,
        minimum_samples_per_output=2,
        maximum_samples_per_output=2,
        align_regions_to_corners=False,
    )
    return [
        BenchCase(
            "ROI_ALIGN1 256 ROIs 7x7, 2x2 samples (first image)",
            desc,
            notes="bench ROIs are random normal * size / 4 (many partly outside, some inverted); "
            "batch indices random in [0, 100): out-of-range ones read 0 but still gather",
        )
    ]


register_cases(RoiAlign1OperatorDesc, _bench_roi_align)
