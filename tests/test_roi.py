"""ROI_POOLING, ROI_ALIGN and ROI_ALIGN1: ROI_ALIGN_GRAD's forward example exactly, worked
examples, properties against tests/reference/roi.py, one row per rule, jit / vmap / gradients."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import reference
import strategies as S
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.test_util import check_grads

import dml_jax as dml

T = dml.TensorDesc
POOL, ALIGN, ALIGN1 = (
    dml.RoiPoolingOperatorDesc,
    dml.RoiAlignOperatorDesc,
    dml.RoiAlign1OperatorDesc,
)
BIG = 2**32 - 1
# Eager runs compile every primitive afresh for each new shape, and check_grads evaluates many
# times: an eighth of the profile's examples keeps these transform checks quick.
RARE = settings(max_examples=max(2, settings.default.max_examples // 10))


def _pool(x, rois, out, scale=1.0, pooled=None):
    pooled = pooled or (out.sizes[3], out.sizes[2])
    return POOL(x, rois, out, spatial_scale=scale, pooled_size=pooled)


def _align(
    cls,
    x,
    rois,
    batch,
    out,
    function="AVERAGE",
    mode="LINEAR",
    scale=(1.0, 1.0),
    oob=0.0,
    samples=(1, 1),
    offsets=(0.5, -0.5),
    corners=False,
):
    common = {
        "reduction_function": function,
        "interpolation_mode": mode,
        "spatial_scale_x": scale[0],
        "spatial_scale_y": scale[1],
        "out_of_bounds_input_value": oob,
        "minimum_samples_per_output": samples[0],
        "maximum_samples_per_output": samples[1],
    }
    if cls is ALIGN1:
        common.update(
            input_pixel_offset=offsets[0],
            output_pixel_offset=offsets[1],
            align_regions_to_corners=corners,
        )
    return cls(x, rois, batch, out, **common)


def _f(values, shape, dtype=np.float32):
    return np.array(values, dtype).reshape(shape)


# DML_ROI_ALIGN_GRAD_OPERATOR_DESC's forward example: four 2x2 crops of a 4x4 image scaled 1.5x
# across and 0.5x down by nearest neighbour (MinimumSamplesPerOutput = Maximum = 1).
IMAGE16 = _f(range(1, 17), (1, 1, 4, 4))
GRAD_ROIS = _f([[0, 0, 2, 2], [2, 0, 4, 2], [0, 2, 2, 4], [2, 2, 4, 4]], (4, 4))
GRAD_BATCH = np.zeros(4, np.uint32)
GRAD_OUT = _f([1, 1, 2, 3, 3, 4, 9, 9, 10, 11, 11, 12], (4, 1, 1, 3))
X44, R44, B4, O4 = T("FLOAT32", [1, 1, 4, 4]), T("FLOAT32", [4, 4]), T("UINT32", [4]), None
O4 = T("FLOAT32", [4, 1, 1, 3])

X22 = T("FLOAT32", [1, 1, 2, 2])
R1 = T("FLOAT32", [1, 1, 1, 4])
B1 = T("UINT32", [1])
O11 = T("FLOAT32", [1, 1, 1, 1])
LIN22 = _f([0, 1, 2, 3], (1, 1, 2, 2))  # 2y + x: bilinear reproduces it exactly
SQUARES = _f([0, 1, 4, 9, 16, 25, 36, 49], (1, 1, 1, 8))
X18, O12 = T("FLOAT32", [1, 1, 1, 8]), T("FLOAT32", [1, 1, 1, 2])
ZERO = np.zeros(1, np.uint32)


def _roi(*v):
    return _f(v, (1, 1, 1, 4))


SEEDS = [
    # The page's example, through ROI_ALIGN (pixel centres) and ROI_ALIGN1 with the same offsets.
    (
        _align(ALIGN, X44, R44, B4, O4, mode="NEAREST_NEIGHBOR"),
        (IMAGE16, GRAD_ROIS, GRAD_BATCH),
        (GRAD_OUT,),
    ),
    (
        _align(ALIGN1, X44, R44, B4, O4, mode="NEAREST_NEIGHBOR"),
        (IMAGE16, GRAD_ROIS, GRAD_BATCH),
        (GRAD_OUT,),
    ),
    # Worked by hand: 2 x 2 samples at the four pixel centres of [[0, 1], [2, 3]].
    (
        _align(ALIGN, X22, R1, B1, O11, samples=(2, 2)),
        (LIN22, _roi(0, 0, 2, 2), ZERO),
        (_f(1.5, O11.sizes),),
    ),
    (
        _align(ALIGN, X22, R1, B1, O11, "MAX", samples=(2, 2)),
        (LIN22 - 4, _roi(0, 0, 2, 2), ZERO),
        (_f(-1, O11.sizes),),  # the largest sample, not max(0, ...)
    ),
    # A sample at x = y = 3.5 lies past the edge (> 2): OutOfBoundsInputValue.
    (
        _align(ALIGN, X22, R1, B1, O11, oob=7.0),
        (LIN22, _roi(2, 2, 6, 6), ZERO),
        (_f(7, O11.sizes),),
    ),
    # An empty region at -0.5 samples -1.0 (inside, clamped to 0); at -0.6 it samples -1.1.
    (
        _align(ALIGN, X22, R1, B1, O11, oob=7.0),
        (LIN22 + 1, _roi(-0.5, -0.5, -0.5, -0.5), ZERO),
        (_f(1, O11.sizes),),
    ),
    (
        _align(ALIGN, X22, R1, B1, O11, oob=7.0),
        (LIN22 + 1, _roi(-0.6, -0.6, -0.6, -0.6), ZERO),
        (_f(7, O11.sizes),),
    ),
    # A batch index past BatchCount reads OutOfBoundsInputValue.
    (
        _align(ALIGN, X22, R1, B1, O11, oob=-2.0),
        (LIN22, _roi(0, 0, 2, 2), np.ones(1, np.uint32)),
        (_f(-2, O11.sizes),),
    ),
    # An inverted region mirrors: x1 = 4, x2 = 0 samples 3, 2, 1, 0.
    (
        _align(ALIGN, T("FLOAT32", [1, 1, 1, 4]), R1, B1, T("FLOAT32", [1, 1, 1, 4])),
        (_f([10, 20, 30, 40], (1, 1, 1, 4)), _roi(4, 0, 0, 1), ZERO),
        (_f([40, 30, 20, 10], (1, 1, 1, 4)),),
    ),
    # The sample count follows the region: 8 / 2 = 4 samples per output (0..3 and 4..7) ...
    (
        _align(ALIGN, X18, R1, B1, O12, samples=(1, 8)),
        (SQUARES, _roi(0, 0, 8, 1), ZERO),
        (_f([3.5, 31.5], O12.sizes),),
    ),
    # ... and is clamped to MaximumSamplesPerOutput: one sample at x = 1.5 and 5.5.
    (
        _align(ALIGN, X18, R1, B1, O12, samples=(1, 1)),
        (SQUARES, _roi(0, 0, 8, 1), ZERO),
        (_f([2.5, 30.5], O12.sizes),),
    ),
    # dml_jax's static bound: a region 5 wide on a 2-wide input takes ceil(2 * 2 / 1) = 4 samples
    # (at 0.125, 1.375, 2.625, 3.875: values 1, 8 and two out of bounds), not 5.
    (
        _align(ALIGN, T("FLOAT32", [1, 1, 1, 2]), R1, B1, O11, samples=(1, BIG)),
        (_f([0, 8], (1, 1, 1, 2)), _roi(0, 0, 5, 1), ZERO),
        (_f(2.25, O11.sizes),),
    ),
    # AlignRegionsToCorners as TensorFlow's CropAndResize uses it: normalised boxes scaled by
    # size - 1, offsets 0; samples land on the corners (a copy), a lone sample on the centre.
    (
        _align(
            ALIGN1,
            T("FLOAT32", [1, 1, 3, 3]),
            R1,
            B1,
            T("FLOAT32", [1, 1, 3, 3]),
            scale=(2.0, 2.0),
            offsets=(0.0, 0.0),
            corners=True,
        ),
        (_f(range(9), (1, 1, 3, 3)), _roi(0, 0, 1, 1), ZERO),
        (_f(range(9), (1, 1, 3, 3)),),
    ),
    (
        _align(
            ALIGN1,
            T("FLOAT32", [1, 1, 3, 3]),
            R1,
            B1,
            O11,
            mode="NEAREST_NEIGHBOR",
            scale=(2.0, 2.0),
            offsets=(0.0, 0.0),
            corners=True,
        ),
        (_f(range(9), (1, 1, 3, 3)), _roi(0, 0, 1, 1), ZERO),
        (_f(4, O11.sizes),),
    ),
    # ROI_POOLING: 2x2 bins of the whole image and of its centre block.
    (
        _pool(X44, T("FLOAT32", [1, 1, 2, 5]), T("FLOAT32", [2, 1, 2, 2])),
        (IMAGE16, _f([0, 0, 0, 3, 3, 0, 1, 1, 2, 2], (1, 1, 2, 5))),
        (_f([6, 8, 14, 16, 6, 7, 10, 11], (2, 1, 2, 2)),),
    ),
    # SpatialScale 0.5: corners 0.5 and 2.5 round away from zero to 1 and 3; a 3-wide region
    # in 2 bins: [1, 3) and [2, 4).
    (
        _pool(X44, T("FLOAT32", [1, 1, 1, 5]), T("FLOAT32", [1, 1, 2, 2]), 0.5),
        (IMAGE16, _f([0, 1, 1, 5, 5], (1, 1, 1, 5))),
        (_f([11, 12, 15, 16], (1, 1, 2, 2)),),
    ),
    # A batch past BatchCount, a region past the edge (empty bins) and one partly before it.
    (
        _pool(
            X44.like(data_type="FLOAT16"), T("FLOAT16", [1, 1, 3, 5]), T("FLOAT16", [3, 1, 2, 2])
        ),
        (
            IMAGE16.astype(np.float16),
            _f([1, 0, 0, 3, 3, 0, 5, 5, 8, 8, 0, -3, -3, 0, 0], (1, 1, 3, 5), np.float16),
        ),
        (_f([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1], (3, 1, 2, 2), np.float16),),
    ),
]


@pytest.mark.parametrize("desc, inputs, expected", SEEDS)
def test_documented_and_worked_examples(desc, inputs, expected):
    S.assert_same(S.run(S.Case(desc, inputs)), expected)
    S.assert_same(reference.reference(desc, *inputs), expected)


# --- properties -----------------------------------------------------------------------------


def _coords(rng, n: int, extent: int, dtype) -> np.ndarray:
    # Quarter steps (exact in FLOAT16) from a little before to a little past the edge.
    return (rng.integers(-6, 4 * extent + 7, size=n) / 4).astype(dtype)


@st.composite
def pool_cases(draw, types=None):
    type_name = draw(st.sampled_from(types or S.types_at_newest("DML_OPERATOR_ROI_POOLING")))
    dtype = np.dtype(type_name.lower())
    n, c, h, w = (draw(st.integers(1, k)) for k in (2, 3, 6, 6))
    rois, ph, pw = (draw(st.integers(1, 3)) for _ in range(3))
    scale = draw(st.sampled_from([1.0, 0.5, 2.0, 0.75]))
    rng = draw(S.seeds())
    table = np.empty((rois, 5), dtype)
    table[:, 0] = rng.integers(0, n + 1, size=rois)  # n: out of range
    for col, extent in ((1, w), (2, h), (3, w), (4, h)):
        table[:, col] = _coords(rng, rois, extent, dtype) / np.float32(scale)
    x = T(type_name, [n, c, h, w])
    desc = _pool(x, T(type_name, [1, 1, rois, 5]), T(type_name, [rois, c, ph, pw]), scale)
    values = S.values(rng, type_name, (n, c, h, w), draw(st.sampled_from(["full", "ties"])))
    return S.Case(desc, (values, table.reshape(1, 1, rois, 5)))


@st.composite
def align_cases(draw, cls=None, types=None, function=None, max_rois: int = 3):
    cls = cls or draw(st.sampled_from([ALIGN, ALIGN1]))
    key = cls.operator_type
    type_name = draw(st.sampled_from(types or S.types_at_newest(key)))
    dtype = np.dtype(type_name.lower())
    n, c, h, w = (draw(st.integers(1, k)) for k in (2, 2, 6, 6))
    rois, oh, ow = draw(st.integers(1, max_rois)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
    low = draw(st.integers(1, 2))
    high = draw(st.sampled_from([low, low + 1, low + 3, BIG]))
    scale = draw(st.sampled_from([(1.0, 1.0), (0.5, 2.0), (2.0, 0.75)]))
    rng = draw(S.seeds())
    table = np.empty((rois, 4), dtype)
    for col, extent, s in ((0, w, scale[0]), (1, h, scale[1]), (2, w, scale[0]), (3, h, scale[1])):
        table[:, col] = _coords(rng, rois, extent, dtype) / np.float32(s)
    roi_rank = draw(st.integers(2, 4))
    batch_rank = draw(st.integers(1, 4))
    index_type = draw(st.sampled_from(["UINT32", "UINT64"]))
    batch = rng.integers(0, n + 1, size=rois).astype(index_type.lower())  # n: out of range
    extra = {}
    if cls is ALIGN1:
        extra = {
            "offsets": draw(st.sampled_from([(0.5, -0.5), (0.0, -0.5), (0.0, 0.0), (0.25, 0.5)])),
            "corners": draw(st.booleans()),
        }
    desc = _align(
        cls,
        T(type_name, [n, c, h, w]),
        T(type_name, [1] * (roi_rank - 2) + [rois, 4]),
        T(index_type, [1] * (batch_rank - 1) + [rois]),
        T(type_name, [rois, c, oh, ow]),
        function or draw(st.sampled_from(["AVERAGE", "MAX"])),
        draw(st.sampled_from(["LINEAR", "NEAREST_NEIGHBOR"])),
        scale,
        draw(st.sampled_from([0.0, -1.5, 7.0])),
        (low, high),
        **extra,
    )
    x = S.values(rng, type_name, (n, c, h, w), "small")
    return S.Case(
        desc,
        (x, table.reshape(desc.roi_tensor.sizes), batch.reshape(desc.batch_indices_tensor.sizes)),
    )


def _tolerance(case) -> dict:
    if case.inputs[0].dtype == np.float16:
        return {"exact": False, "rtol": 2e-3, "atol": 4e-3}
    return {"exact": False, "rtol": 1e-5, "atol": 2e-5}


@S.HALF
@given(pool_cases())
def test_roi_pooling_matches_reference(case):
    S.assert_same(S.run(case), reference.reference(case.desc, *case.inputs))


@S.HALF
@given(align_cases())
def test_roi_align_matches_reference(case):
    S.assert_same(S.run(case), reference.reference(case.desc, *case.inputs), **_tolerance(case))


@RARE
@given(st.one_of(pool_cases(), align_cases()))
def test_roi_jit_equals_eager(case):
    S.check_jit(case)


@S.FEW
@given(st.one_of(pool_cases(), align_cases(max_rois=2)))
def test_roi_vmap_equals_loop(case):
    S.check_vmap(case)


@RARE
@given(align_cases(types=["FLOAT32"]))
def test_roi_align_check_grads_input(case):
    S.check_grads(case, argnums=(0,), atol=2e-2, rtol=2e-2)


@RARE
@given(pool_cases(types=["FLOAT32"]))
def test_roi_pooling_check_grads_input(case):
    # Distinct values keep every bin's maximum unique, so the max is smooth where it is taken.
    x = case.inputs[0]
    distinct = np.random.default_rng(x.size).permutation(x.size).reshape(x.shape)
    S.check_grads(S.Case(case.desc, (distinct.astype(np.float32),) + case.inputs[1:]), argnums=(0,))


def test_roi_align_gradient_flows_to_the_roi_coordinates():
    # Inside the image, with a fixed sample count, the output is smooth in the coordinates:
    # the derivative of the interpolation weights (sample counts and clamps are piecewise
    # constant, so ROI gradients hold only away from their steps).
    d = _align(
        ALIGN,
        T("FLOAT32", [1, 1, 6, 6]),
        R1,
        B1,
        T("FLOAT32", [1, 1, 2, 2]),
        samples=(2, 2),
    )
    op = dml.compile_operator(d)
    x = jnp.asarray(np.random.default_rng(0).standard_normal((1, 1, 6, 6)), jnp.float32)
    rois = jnp.asarray(_roi(1.1, 1.2, 3.3, 3.45))
    check_grads(
        jax.jit(lambda r: op.fn(x, r, jnp.zeros(1, jnp.uint32))),
        (rois,),
        1,
        modes=("rev",),
        eps=1e-2,
        atol=2e-2,
        rtol=2e-2,
    )


def test_roi_pooling_gradient_goes_to_each_bins_maximum():
    d = _pool(X44, T("FLOAT32", [1, 1, 1, 5]), T("FLOAT32", [1, 1, 2, 2]))
    op = dml.compile_operator(d)
    g = jax.jit(jax.grad(lambda a: op.fn(a, jnp.asarray(_f([0, 0, 0, 3, 3], (1, 1, 1, 5)))).sum()))(
        jnp.asarray(IMAGE16)
    )
    want = np.zeros((4, 4), np.float32)
    want[1, 1] = want[1, 3] = want[3, 1] = want[3, 3] = 1
    np.testing.assert_array_equal(np.asarray(g)[0, 0], want)


@pytest.mark.parametrize("cls", [POOL, ALIGN, ALIGN1])
def test_roi_operators_are_differentiable_despite_index_inputs(cls):
    d = SEEDS[0][0] if cls is ALIGN else SEEDS[1][0] if cls is ALIGN1 else SEEDS[-1][0]
    assert dml.compile_operator(d).differentiable


def test_float16_is_computed_in_float32():
    # 2049 is not a FLOAT16 value; the average of 2048 and 2050 still comes out 2049 -> 2048 or
    # 2050 after one rounding, never the 2048 a float16 accumulation (2048 + 1 = 2048) gives.
    d = _align(
        ALIGN,
        X22.like(data_type="FLOAT16"),
        R1.like(data_type="FLOAT16"),
        B1,
        O11.like(data_type="FLOAT16"),
        samples=(2, 2),
    )
    x = _f([2048, 2050, 2048, 2050], (1, 1, 2, 2), np.float16)
    got = S.run(S.Case(d, (x, _roi(0, 0, 2, 2).astype(np.float16), ZERO)))[0]
    assert got.dtype == np.float16 and float(got.ravel()[0]) in (2048.0, 2050.0)
    assert float(got.ravel()[0]) == float(np.float16(np.float32(2049)))


def test_nan_coordinates_read_out_of_bounds_and_pool_to_zero():
    d = _align(ALIGN, X22, R1, B1, O11, oob=5.0, samples=(1, BIG))
    rois = _roi(np.nan, 0, 2, 2)
    for got in (S.run(S.Case(d, (LIN22, rois, ZERO))), reference.reference(d, LIN22, rois, ZERO)):
        np.testing.assert_array_equal(got[0], _f(5, O11.sizes))
    p = _pool(X44, T("FLOAT32", [1, 1, 2, 5]), T("FLOAT32", [2, 1, 1, 1]))
    rois = _f([0, 0, 0, np.nan, 3, np.nan, 0, 0, 3, 3], (1, 1, 2, 5))
    for got in (S.run(S.Case(p, (IMAGE16, rois))), reference.reference(p, IMAGE16, rois)):
        np.testing.assert_array_equal(got[0], np.zeros((2, 1, 1, 1), np.float32))


# --- rules ------------------------------------------------------------------------------------


def _bad_pool(**changes):
    def make():
        x = changes.get("x", T("FLOAT32", [1, 2, 4, 4]))
        rois = changes.get("rois", T("FLOAT32", [1, 1, 3, 5]))
        out = changes.get("out", T("FLOAT32", [3, 2, 2, 2]))
        pooled = changes.get("pooled", (2, 2))
        return POOL(x, rois, out, spatial_scale=1.0, pooled_size=pooled)

    return make


def _bad_align(cls=ALIGN1, **changes):
    def make():
        x = changes.get("x", T("FLOAT32", [2, 3, 4, 4]))
        rois = changes.get("rois", T("FLOAT32", [5, 4]))
        batch = changes.get("batch", T("UINT32", [5]))
        out = changes.get("out", T("FLOAT32", [5, 3, 2, 2]))
        function = changes.get("function", "AVERAGE")
        samples = changes.get("samples", (1, 2))
        return _align(cls, x, rois, batch, out, function, samples=samples)

    return make


INVALID_ROWS = [
    (
        _bad_pool(x=T("FLOAT32", [2, 4, 4])),
        r"^DML_OPERATOR_ROI_POOLING: InputTensor\.DimensionCount must be 4",
    ),
    (_bad_pool(rois=T("FLOAT32", [3, 5])), r"ROITensor\.DimensionCount must be 4, got 2"),
    (_bad_pool(rois=T("FLOAT32", [1, 2, 3, 5])), r"ROITensor\.Sizes\[1\] must equal 1, got 2"),
    (_bad_pool(rois=T("FLOAT32", [1, 1, 3, 4])), r"ROITensor\.Sizes\[3\] must equal 5 .*got 4"),
    (
        _bad_pool(rois=T("FLOAT16", [1, 1, 3, 5])),
        r"ROITensor\.DataType must equal InputTensor\.DataType",
    ),
    (_bad_pool(pooled=(0, 2)), r"PooledSize\.Width must be > 0"),
    (_bad_pool(pooled=(2, 3)), r"OutputTensor\.Sizes\[2\] must equal 3, got 2"),
    (_bad_pool(out=T("FLOAT32", [2, 2, 2, 2])), r"OutputTensor\.Sizes\[0\] must equal 3, got 2"),
    (_bad_pool(out=T("FLOAT32", [3, 1, 2, 2])), r"OutputTensor\.Sizes\[1\] must equal 2, got 1"),
    (
        _bad_pool(
            x=T("INT32", [1, 2, 4, 4]), rois=T("INT32", [1, 1, 3, 5]), out=T("INT32", [3, 2, 2, 2])
        ),
        r"InputTensor with data type INT32 .* no feature level supports it",
    ),
    (
        _bad_align(x=T("FLOAT32", [3, 4, 4])),
        r"^DML_OPERATOR_ROI_ALIGN1: InputTensor\.DimensionCount must be 4",
    ),
    (_bad_align(rois=T("FLOAT32", [20])), r"ROITensor\.DimensionCount must be 2 or 3 or 4, got 1"),
    (_bad_align(rois=T("FLOAT32", [2, 5, 4])), r"ROITensor\.Sizes\[0\] must equal 1, got 2"),
    (
        _bad_align(rois=T("FLOAT32", [4, 5])),
        r"ROITensor\.Sizes must equal 4 in the last dimension \(4\), got 5",
    ),
    (
        _bad_align(batch=T("UINT32", [1, 1, 1, 1, 5])),
        r"BatchIndicesTensor\.DimensionCount must be 1 or 2",
    ),
    (_bad_align(batch=T("UINT32", [5, 1])), r"BatchIndicesTensor\.Sizes\[0\] must equal 1, got 5"),
    (
        _bad_align(batch=T("UINT32", [4])),
        r"BatchIndicesTensor\.Sizes\[0\] must equal NumROIs \(5\), got 4",
    ),
    (_bad_align(out=T("FLOAT32", [5, 3, 4])), r"OutputTensor\.DimensionCount must be 4, got 3"),
    (
        _bad_align(rois=T("FLOAT16", [5, 4])),
        r"ROITensor\.DataType must equal InputTensor\.DataType",
    ),
    (
        _bad_align(cls=ALIGN, function="SUM"),
        r"^DML_OPERATOR_ROI_ALIGN: ReductionFunction must be AVERAGE or MAX, got SUM",
    ),
    (_bad_align(samples=(0, 2)), r"MinimumSamplesPerOutput must be >= 1, got 0"),
    (
        _bad_align(samples=(3, 2)),
        r"MaximumSamplesPerOutput must be >= MinimumSamplesPerOutput \(3\), got 2",
    ),
    (_bad_align(out=T("FLOAT32", [4, 3, 2, 2])), r"OutputTensor\.Sizes\[0\] must equal 5, got 4"),
    (_bad_align(out=T("FLOAT32", [5, 2, 2, 2])), r"OutputTensor\.Sizes\[1\] must equal 3, got 2"),
    (_bad_align(out=T("FLOAT16", [5, 3, 2, 2])), r"OutputTensor\.DataType must equal FLOAT32"),
    (
        _bad_align(batch=T("INT32", [5])),
        r"BatchIndicesTensor with data type INT32 .* no feature level",
    ),
    (
        _bad_align(
            cls=ALIGN,
            x=T("FLOAT64", [2, 3, 4, 4]),
            rois=T("FLOAT64", [5, 4]),
            out=T("FLOAT64", [5, 3, 2, 2]),
        ),
        r"InputTensor with data type FLOAT64 .* no feature level supports it",
    ),
]


@pytest.mark.parametrize("factory, pattern", INVALID_ROWS)
def test_invalid_descriptions_are_rejected(factory, pattern):
    with pytest.raises(dml.ValidationError, match=pattern):
        dml.validate(factory())


LEVEL_ROWS = [
    (_bad_align(cls=ALIGN), "2_1", r"ROI_ALIGN requires feature level 3_0 or later"),
    (_bad_align(), "3_1", r"ROI_ALIGN1 requires feature level 4_0 or later"),
    (_bad_align(batch=T("UINT64", [5])), "4_1", r"BatchIndicesTensor with data type UINT64 .* 5_0"),
]


@pytest.mark.parametrize("factory, level, pattern", LEVEL_ROWS)
def test_support_tables_by_feature_level(factory, level, pattern):
    with pytest.raises(dml.ValidationError, match=pattern):
        dml.validate(factory(), feature_level=level)


def test_roi_pooling_exists_from_the_first_feature_level():
    dml.validate(_bad_pool()(), feature_level="1_0")
