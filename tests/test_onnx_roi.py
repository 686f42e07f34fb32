"""ONNX's own backend node tests of RoiAlign, and cases built here and evaluated by ONNX's
reference runtime, mapped onto DML_OPERATOR_ROI_ALIGN1 as ONNX-on-DirectML does:

- X -> InputTensor, rois ``{num_rois, 4}`` -> ROITensor, batch_indices (INT64) -> a UINT64
  BatchIndicesTensor (the same bits; valid indices are never negative);
- mode ``avg`` / ``max`` -> ReductionFunction AVERAGE / MAX, InterpolationMode LINEAR;
- spatial_scale -> SpatialScaleX and SpatialScaleY, OutOfBoundsInputValue 0;
- sampling_ratio > 0 -> MinimumSamplesPerOutput = MaximumSamplesPerOutput = sampling_ratio;
  0 (adaptive, ``ceil(roi / output)``) -> 1 and UINT32_MAX;
- coordinate_transformation_mode (opset 16; opset 10 behaves as ``output_half_pixel``):
  ``half_pixel`` -> InputPixelOffset 0.5, ``output_half_pixel`` -> 0; OutputPixelOffset -0.5.

ONNX's ``max`` takes, for each sample, the largest of the four weighted corner terms
``w_i * v_i`` (its reference and onnxruntime's CPU kernel), where DirectML takes the largest
interpolated sample; the two agree only where every sample lands on a pixel (one weight 1) and
the data are >= 0. ONNX's max case with fractional samples is skipped with that reason; the max
case built here samples pixel centres. ``output_half_pixel`` also widens regions narrower than 1
to 1 in ONNX, which DirectML does not (the cases here are wider).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from onnx_cases import (
    NodeCase,
    assert_every_op_type_passes,
    assert_outputs,
    attrs,
    case_ids,
    dml_type,
    node_cases,
    run_or_skip,
)

import dml_jax as dml

onnx = pytest.importorskip("onnx")

MAPPED = {"RoiAlign"}
UINT32_MAX = 2**32 - 1


def _built_cases() -> tuple[NodeCase, ...]:
    """RoiAlign nodes evaluated by ``onnx.reference``: adaptive sampling (sampling_ratio 0) with
    half_pixel, and max mode on pixel centres of non-negative data."""
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(7)
    x = rng.uniform(0.0, 1.0, (2, 3, 7, 6)).astype(np.float32)
    out = []
    specs = [
        # name, attributes, rois, batch indices
        (
            "roialign_adaptive_half_pixel",
            {"mode": "avg", "output_height": 3, "output_width": 2, "sampling_ratio": 0},
            [[0.5, 1.0, 5.5, 6.0], [2.0, 0.25, 4.0, 3.5], [-1.0, -1.0, 7.0, 8.0]],
            [0, 1, 1],
        ),
        (
            "roialign_max_pixel_centres",
            # Regions 2 * output wide with 2 samples: every sample lands on a pixel centre.
            {
                "mode": "max",
                "output_height": 2,
                "output_width": 3,
                "sampling_ratio": 2,
                "coordinate_transformation_mode": "half_pixel",
            },
            [[0.0, 0.0, 6.0, 4.0], [0.0, 2.0, 6.0, 6.0]],
            [1, 0],
        ),
    ]
    for name, attributes, rois, batch in specs:
        node = helper.make_node("RoiAlign", ["X", "rois", "batch_indices"], ["Y"], **attributes)
        graph = helper.make_graph(
            [node],
            name,
            [
                helper.make_tensor_value_info("X", TensorProto.FLOAT, x.shape),
                helper.make_tensor_value_info("rois", TensorProto.FLOAT, [len(rois), 4]),
                helper.make_tensor_value_info("batch_indices", TensorProto.INT64, [len(rois)]),
            ],
            [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
        inputs = [x, np.array(rois, np.float32), np.array(batch, np.int64)]
        (y,) = ReferenceEvaluator(model).run(
            None, dict(zip(["X", "rois", "batch_indices"], inputs))
        )
        out.append(NodeCase(f"built_{name}", node, 16, inputs, [y]))
    return tuple(out)


@functools.cache
def _cases():
    return node_cases({"RoiAlign": "roialign"}) + _built_cases()


def _roi_align(case: NodeCase) -> np.ndarray:
    x, rois, batch = case.inputs
    a = attrs(case.node)
    mode = a.get("mode", b"avg")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode == "max" and not case.name.startswith("built_"):
        pytest.skip(
            "ONNX's max mode takes the largest weighted corner term of each sample; DirectML "
            "takes the largest interpolated sample (they differ for fractional samples)"
        )
    default = "half_pixel" if case.opset >= 16 else "output_half_pixel"
    transform = a.get("coordinate_transformation_mode", default)
    transform = transform.decode() if isinstance(transform, bytes) else transform
    ratio = int(a.get("sampling_ratio", 0))
    scale = float(a.get("spatial_scale", 1.0))
    oh, ow = int(a.get("output_height", 1)), int(a.get("output_width", 1))
    data_type = dml_type(x.dtype)
    t = dml.TensorDesc
    desc = dml.RoiAlign1OperatorDesc(
        t(data_type, list(x.shape)),
        t(dml_type(rois.dtype), list(rois.shape)),
        t("UINT64", [len(batch)]),
        t(data_type, [rois.shape[0], x.shape[1], oh, ow]),
        "MAX" if mode == "max" else "AVERAGE",
        "LINEAR",
        spatial_scale_x=scale,
        spatial_scale_y=scale,
        input_pixel_offset=0.5 if transform == "half_pixel" else 0.0,
        output_pixel_offset=-0.5,
        out_of_bounds_input_value=0.0,
        minimum_samples_per_output=ratio if ratio > 0 else 1,
        maximum_samples_per_output=ratio if ratio > 0 else UINT32_MAX,
        align_regions_to_corners=False,
    )
    return run_or_skip(desc, x, rois, batch.astype(np.uint64))


@functools.cache
def _result(index: int) -> np.ndarray:
    return _roi_align(_cases()[index])


def _check(index: int) -> None:
    # ONNX's expected arrays are printed to 4 decimals (the node tests compare at 1e-3).
    assert_outputs(_result(index), _cases()[index].outputs[:1], rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("index", range(len(_cases())), ids=case_ids(_cases()))
def test_onnx_node(index):
    _check(index)


def test_every_mapped_operator_has_a_passing_case():
    assert_every_op_type_passes(_cases(), _check, MAPPED)


def test_both_transformation_modes_and_both_reductions_pass():
    names = {c.name for c in _cases()}
    for name in (
        "test_roialign_aligned_false",  # output_half_pixel
        "test_roialign_aligned_true",  # half_pixel
        "built_roialign_adaptive_half_pixel",  # sampling_ratio 0
        "built_roialign_max_pixel_centres",  # max
    ):
        assert name in names
        _check([c.name for c in _cases()].index(name))
