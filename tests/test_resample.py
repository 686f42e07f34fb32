"""UPSAMPLE_2D and RESAMPLE, RESAMPLE1, RESAMPLE2, RESAMPLE3: hand-worked examples (the pages
give none; Microsoft's dml_upsample_2d model is the first), properties against
tests/reference/resample.py over types, ranks, up- and down-sampling and offsets, one row per
rule, jit / vmap / gradients."""

from __future__ import annotations

import math

import numpy as np
import pytest
import reference
import strategies as S
from hypothesis import given
from hypothesis import strategies as st

import dml_jax as dml
from dml_jax.ops.resample import plan_axis

T = dml.TensorDesc
UP, R, R1, R2, R3 = (
    dml.Upsample2DOperatorDesc,
    dml.ResampleOperatorDesc,
    dml.Resample1OperatorDesc,
    dml.Resample2OperatorDesc,
    dml.Resample3OperatorDesc,
)
CENTRES = {"input_pixel_offsets": [0.5], "output_pixel_offsets": [-0.5]}
CORNERS = {"input_pixel_offsets": [0.0], "output_pixel_offsets": [0.0]}


def _f32(*values):
    return np.array(values, np.float32)


def _line(cls, n_in, n_out, scale, mode, type_name="FLOAT32", offsets=None, **extra):
    """A 1-D description (RESAMPLE and later accept 1 to 4 dimensions from 5_1)."""
    args = {"interpolation_mode": mode, "scales": [scale], **extra}
    if cls is not R:
        args.update(offsets or CENTRES)
    return cls(T(type_name, [n_in]), T(type_name, [n_out]), **args)


SEEDS = [
    # Microsoft's dml_upsample_2d model: {1, 1, 2, 2} = 1..4 enlarged 2x bilinearly at pixel
    # centres. Per axis x = (o + 0.5) / 2 - 0.5 = -0.25, 0.25, 0.75, 1.25, clamped to [0, 1]:
    # rows read 1, 1.25, 1.75, 2 (top) and 3, 3.25, 3.75, 4 (bottom), and rows blend likewise.
    (
        UP(T("FLOAT32", [1, 1, 2, 2]), T("FLOAT32", [1, 1, 4, 4]), (2, 2), "LINEAR"),
        (_f32(1, 2, 3, 4).reshape(1, 1, 2, 2),),
        (
            _f32(
                1, 1.25, 1.75, 2, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25, 3.5, 3, 3.25, 3.75, 4
            ).reshape(1, 1, 4, 4),
        ),
    ),
    # 5-D nearest: each element repeated 3x down and 2x across; D is never resampled.
    (
        UP(
            T("FLOAT16", [1, 1, 2, 1, 2]), T("FLOAT16", [1, 1, 2, 3, 4]), (2, 3), "NEAREST_NEIGHBOR"
        ),
        (np.array([1, 2, 3, 4], np.float16).reshape(1, 1, 2, 1, 2),),
        (np.array([[[1, 1, 2, 2]] * 3, [[3, 3, 4, 4]] * 3], np.float16).reshape(1, 1, 2, 3, 4),),
    ),
    # RESAMPLE nearest, 4 -> 2 at scale 0.5: x = (o + 0.5) * 2 - 0.5 = 0.5, 2.5, halves round up
    # to 1 and 3.
    (_line(R, 4, 2, 0.5, "NEAREST_NEIGHBOR"), (_f32(10, 11, 12, 13),), (_f32(11, 13),)),
    # The scale need not be OutputSize / InputSize: scale 2, 2 -> 3 crops (x = -0.25, 0.25,
    # 0.75), linear.
    (_line(R, 2, 3, 2.0, "LINEAR"), (_f32(0, 4),), (_f32(0, 1, 3),)),
    # RESAMPLE1 with offsets 0 (corners): x = o / 2 = 0, 0.5, 1, 1.5 -> 0, 1, 1, 2 (clamped to 1).
    (
        _line(R1, 2, 4, 2.0, "NEAREST_NEIGHBOR", offsets=CORNERS),
        (_f32(5, 7),),
        (_f32(5, 7, 7, 7),),
    ),
    # ... and linear, 3 -> 5 at scale 2 (align-corners): x = 0, 0.5, 1, 1.5, 2.
    (_line(R1, 3, 5, 2.0, "LINEAR", offsets=CORNERS), (_f32(0, 2, 8),), (_f32(0, 1, 2, 5, 8),)),
    # Offsets shift the image: input offset 1 maps output o to x = o - 1 (scale 1).
    (
        _line(
            R1,
            3,
            3,
            1.0,
            "NEAREST_NEIGHBOR",
            offsets={"input_pixel_offsets": [1.0], "output_pixel_offsets": [0.0]},
        ),
        (_f32(1, 2, 3),),
        (_f32(1, 1, 2),),
    ),
    # RESAMPLE2 at scale 0.5 (x = 0.5, 2.5): DECREASING floors to 0, 2; INCREASING ceils to 1, 3.
    (
        _line(R2, 4, 2, 0.5, "NEAREST_NEIGHBOR", rounding_direction="DECREASING"),
        (_f32(10, 11, 12, 13),),
        (_f32(10, 12),),
    ),
    (
        _line(R2, 4, 2, 0.5, "NEAREST_NEIGHBOR", rounding_direction="INCREASING"),
        (_f32(10, 11, 12, 13),),
        (_f32(11, 13),),
    ),
    # RESAMPLE3 antialiased 4 -> 2: x = 0.5 sees inputs -1..2 with triangle weights 0.25, 0.75,
    # 0.75, 0.25 (sum 2), input -1 reading input 0: 0.5 a + 0.375 b + 0.125 c; x = 2.5 likewise
    # 0.125 b + 0.375 c + 0.5 d. Without antialiasing it is the plain average of two.
    (
        _line(R3, 4, 2, 0.5, "LINEAR", rounding_direction="DECREASING", antialiased=True),
        (_f32(0, 8, 16, 24),),
        (_f32(5, 19),),
    ),
    (
        _line(R3, 4, 2, 0.5, "LINEAR", rounding_direction="DECREASING", antialiased=False),
        (_f32(0, 8, 16, 24),),
        (_f32(4, 20),),
    ),
    # Integers blend in float and round to nearest even: corners, 2 -> 4, x = 0, 0.5, 1, 1.5.
    (
        _line(R1, 2, 4, 2.0, "LINEAR", "INT8", offsets=CORNERS),
        (np.array([2, 3], np.int8),),
        (np.array([2, 2, 3, 3], np.int8),),
    ),
    (
        _line(R2, 2, 4, 2.0, "LINEAR", "UINT8", offsets=CORNERS, rounding_direction="DECREASING"),
        (np.array([1, 2], np.uint8),),
        (np.array([1, 2, 2, 2], np.uint8),),
    ),
]


@pytest.mark.parametrize("desc, inputs, expected", SEEDS)
def test_worked_examples(desc, inputs, expected):
    S.assert_same(S.run(S.Case(desc, inputs)), expected)
    S.assert_same(reference.reference(desc, *inputs), expected)


def test_resample1_at_pixel_centres_is_resample():
    # RESAMPLE1's remark: offsets 0.5 and -0.5 give RESAMPLE.
    x = np.random.default_rng(0).standard_normal((1, 2, 3, 5)).astype(np.float32)
    for mode in ("NEAREST_NEIGHBOR", "LINEAR"):
        scales = [1.0, 1.5, 0.75, 2.5]
        a = R(T("FLOAT32", x.shape), T("FLOAT32", [1, 3, 2, 12]), mode, scales)
        b = R1(
            T("FLOAT32", x.shape), T("FLOAT32", [1, 3, 2, 12]), mode, scales, [0.5] * 4, [-0.5] * 4
        )
        S.assert_same(S.run(S.Case(a, (x,))), S.run(S.Case(b, (x,))))


def test_resample2_rounding_matches_resample1_when_shifted():
    # RESAMPLE1's halves-round-up rule floor(x + 0.5) is RESAMPLE2 DECREASING with x shifted by
    # half an input element (InputPixelOffsets - 0.5): the shift ONNX Runtime applies.
    x = np.arange(7, dtype=np.float32)
    for scale in (0.4, 0.5, 0.75, 1.5, 2.0, 3.0):
        n = max(1, math.floor(7 * scale))
        a = _line(R1, 7, n, scale, "NEAREST_NEIGHBOR")
        shifted = {"input_pixel_offsets": [0.0], "output_pixel_offsets": [-0.5]}
        b = _line(
            R2, 7, n, scale, "NEAREST_NEIGHBOR", offsets=shifted, rounding_direction="DECREASING"
        )
        S.assert_same(S.run(S.Case(a, (x,))), S.run(S.Case(b, (x,))))


def test_plan_axis_trims_taps_and_clamps():
    # Scale 1 at pixel centres is a copy: one tap of weight 1 once the zero tap is dropped.
    idx, w = plan_axis(4, 4, 1.0, 0.5, -0.5, dml.InterpolationMode.LINEAR)
    assert idx.shape == (4, 1) and np.array_equal(idx[:, 0], np.arange(4)) and np.all(w == 1)
    idx, w = plan_axis(2, 4, 2.0, 0.5, -0.5, dml.InterpolationMode.LINEAR)
    assert idx.min() == 0 and idx.max() == 1
    np.testing.assert_allclose(w.sum(axis=1), 1)


def test_integer_nearest_upsampling_is_a_broadcast():
    # Repeating each element r times needs no gather (the bench's 2x nearest case).
    import jax

    d = UP(T("FLOAT32", [1, 2, 3, 4]), T("FLOAT32", [1, 2, 6, 8]), (2, 2), "NEAREST_NEIGHBOR")
    text = jax.jit(dml.compile_operator(d).fn).lower(np.zeros((1, 2, 3, 4), np.float32)).as_text()
    assert "gather" not in text


# --- properties -------------------------------------------------------------------------------

CLASSES = (UP, R, R1, R2, R3)
SCALES = (0.25, 1 / 3, 0.5, 0.75, 1.0, 4 / 3, 1.5, 2.0, 2.5, 3.0)
OFFSETS = (0.0, 0.5, -0.5, 0.25, -1.0, 1.5)


@st.composite
def resample_cases(draw, cls=None, types=None, max_elements: int = 256, mode=None):
    cls = cls or draw(st.sampled_from(CLASSES))
    key = cls.operator_type
    type_name = draw(st.sampled_from(types or S.types_at_newest(key)))
    mode = mode or draw(st.sampled_from(["NEAREST_NEIGHBOR", "LINEAR"]))
    rank = draw(st.sampled_from(S.ranks_at_newest(key)))
    rng = draw(S.seeds())
    if cls is UP:
        sizes = [draw(st.integers(1, 2)) for _ in range(rank - 2)]
        sizes += [draw(st.integers(1, 3)), draw(st.integers(1, 3))]
        sh, sw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
        out = sizes[:-2] + [sizes[-2] * sh, sizes[-1] * sw]
        if math.prod(out) > max_elements:
            sh = sw = 1
            out = list(sizes)
        desc = cls(T(type_name, sizes), T(type_name, out), (sw, sh), mode)
        return S.Case(desc, (S.values(rng, type_name, sizes, "full"),))
    sizes, out, scales = [], [], []
    for _ in range(rank):
        n = draw(st.integers(1, 5))
        scale = draw(st.one_of(st.sampled_from(SCALES), st.floats(0.25, 3.0, width=32)))
        fitted = max(1, math.floor(n * scale))
        m = draw(st.sampled_from([fitted, fitted, max(1, fitted - 1), fitted + 1]))
        sizes.append(n)
        out.append(m)
        scales.append(scale)
    if math.prod(out) > max_elements or math.prod(sizes) > max_elements:
        out = list(sizes)
    args = {"interpolation_mode": mode, "scales": scales}
    if cls is not R:
        centred = draw(st.booleans())
        offsets = st.one_of(st.sampled_from(OFFSETS), st.floats(-2.0, 2.0, width=32))
        args["input_pixel_offsets"] = (
            [0.5] * rank if centred else [draw(offsets) for _ in range(rank)]
        )
        args["output_pixel_offsets"] = (
            [-0.5] * rank if centred else [draw(offsets) for _ in range(rank)]
        )
    if cls in (R2, R3):
        args["rounding_direction"] = draw(st.sampled_from(["INCREASING", "DECREASING"]))
    if cls is R3:
        args["antialiased"] = draw(st.booleans())
    if draw(st.booleans()):
        args["scale_count" if cls is R else "dimension_count"] = rank
    desc = cls(T(type_name, sizes), T(type_name, out), **args)
    return S.Case(desc, (S.values(rng, type_name, sizes, "full"),))


def _tolerance(case) -> dict:
    """Nearest neighbour copies (exact). Linear weighs in float32 where the reference uses
    float64: FLOAT16 may differ in its last bit, INT8/UINT8 by one next to a rounding tie."""
    if case.desc.interpolation_mode.name == "NEAREST_NEIGHBOR":
        return {"exact": True}
    dtype = case.inputs[0].dtype
    if dtype.kind in "iu":
        return {"exact": False, "rtol": 0, "atol": 1}
    if dtype == np.float16:
        return {"exact": False, "rtol": 2e-3, "atol": 1e-3}
    return {"exact": False, "rtol": 1e-5, "atol": 1e-5}


@S.HALF
@pytest.mark.parametrize("cls", CLASSES, ids=[c.__name__ for c in CLASSES])
@given(data=st.data())
def test_resample_matches_reference(cls, data):
    case = data.draw(resample_cases(cls))
    S.assert_same(S.run(case), reference.reference(case.desc, *case.inputs), **_tolerance(case))


@S.FEW
@given(resample_cases(max_elements=128))
def test_resample_jit_and_vmap(case):
    # jit may fuse the weighted sums differently: floats compare within a tolerance.
    S.check_jit(case, **_tolerance(case))
    S.check_vmap(case, **_tolerance(case))


@S.FEW
@given(resample_cases(types=["FLOAT32"], max_elements=96))
def test_resample_check_grads(case):
    S.check_grads(case, atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("type_name, expected", [("FLOAT16", True), ("INT8", False)])
def test_resample_differentiable_flag(type_name, expected):
    d = _line(R1, 3, 6, 2.0, "LINEAR", type_name)
    assert dml.compile_operator(d).differentiable is expected


# --- rules ------------------------------------------------------------------------------------


def _up(sizes=(1, 1, 2, 2), out=(1, 1, 4, 4), scale=(2, 2), type_name="FLOAT32", out_type=None):
    def make():
        return UP(T(type_name, list(sizes)), T(out_type or type_name, list(out)), scale, "LINEAR")

    return make


def _r(cls=R, sizes=(1, 1, 2, 2), out=(1, 1, 4, 4), type_name="FLOAT32", out_type=None, **kw):
    def make():
        rank = len(sizes)
        args = {"interpolation_mode": "LINEAR", "scales": [1.0] * (rank - 2) + [2.0, 2.0]}
        if cls is not R:
            args.update(input_pixel_offsets=[0.5] * rank, output_pixel_offsets=[-0.5] * rank)
        if cls in (R2, R3):
            args["rounding_direction"] = "DECREASING"
        if cls is R3:
            args["antialiased"] = False
        args.update(kw)
        return cls(T(type_name, list(sizes)), T(out_type or type_name, list(out)), **args)

    return make


INVALID_ROWS = [
    (
        _up(sizes=(1, 2, 2), out=(1, 4, 4)),
        r"^DML_OPERATOR_UPSAMPLE_2D: InputTensor\.DimensionCount must be 4 .* or 5 .*, got 3",
    ),
    (_up(scale=(2, 0)), r"UPSAMPLE_2D: ScaleSize\.Height must be > 0, got 0"),
    (_up(scale=(0, 2)), r"UPSAMPLE_2D: ScaleSize\.Width must be > 0, got 0"),
    (
        _up(sizes=(1, 1, 2, 4), scale=(2**31, 1)),
        r"UPSAMPLE_2D: ScaleSize\.Width must be <= UINT_MAX / InputWidth \(1073741823\)",
    ),
    (
        _up(sizes=(2, 2, 256, 256), scale=(256, 256)),
        r"UPSAMPLE_2D: ScaleSize makes the output 17179869184 elements",
    ),
    (_up(out=(1, 1, 4, 5)), r"^DML_OPERATOR_UPSAMPLE_2D: OutputTensor\.Sizes\[3\] must equal 4"),
    (_up(out_type="FLOAT16"), r"UPSAMPLE_2D: OutputTensor\.DataType must equal InputTensor"),
    (
        _up(out=(1, 1, 1, 4, 4)),
        r"UPSAMPLE_2D: OutputTensor\.DimensionCount must equal InputTensor\.DimensionCount",
    ),
    (
        _up(type_name="INT8"),
        r"UPSAMPLE_2D: InputTensor with data type INT8 .* no feature level supports it",
    ),
    (_r(scales=[1.0, 2.0]), r"^DML_OPERATOR_RESAMPLE: Scales must hold one value per Input"),
    (_r(scales=[1.0, 1.0, 0.0, 2.0]), r"RESAMPLE: Scales\[2\] must be finite and > 0, got 0\.0"),
    (_r(scales=[1.0, -1.0, 2.0, 2.0]), r"RESAMPLE: Scales\[1\] must be finite and > 0, got -1"),
    (_r(scales=[1.0, 1.0, math.inf, 2.0]), r"RESAMPLE: Scales\[2\] must be finite and > 0"),
    (_r(scale_count=3), r"RESAMPLE: ScaleCount must equal the length of Scales \(4\), got 3"),
    (_r(out_type="FLOAT16"), r"RESAMPLE: OutputTensor\.DataType must equal InputTensor"),
    (_r(out=(1, 4, 4)), r"RESAMPLE: OutputTensor\.DimensionCount must equal InputTensor"),
    (
        _r(sizes=(1, 1, 1, 2, 2), out=(1, 1, 1, 4, 4), scales=[1.0] * 3 + [2.0] * 2),
        r"RESAMPLE: InputTensor with data type FLOAT32 and DimensionCount 5 .* no feature level",
    ),
    (
        _r(R1, input_pixel_offsets=[0.5] * 3),
        r"^DML_OPERATOR_RESAMPLE1: InputPixelOffsets must hold DimensionCount \(4\) values, got 3",
    ),
    (
        _r(R1, output_pixel_offsets=[-0.5] * 5),
        r"RESAMPLE1: OutputPixelOffsets must hold DimensionCount \(4\) values, got 5",
    ),
    (
        _r(R1, input_pixel_offsets=[0.5, 0.5, math.inf, 0.5]),
        r"RESAMPLE1: InputPixelOffsets\[2\] must be finite, got inf",
    ),
    (
        _r(R1, output_pixel_offsets=[-0.5, -math.inf, -0.5, -0.5]),
        r"RESAMPLE1: OutputPixelOffsets\[1\] must be finite, got -inf",
    ),
    (_r(R1, dimension_count=2), r"RESAMPLE1: DimensionCount must equal the length of Scales"),
    (_r(R2, scales=[2.0]), r"^DML_OPERATOR_RESAMPLE2: Scales must hold one value per"),
    (_r(R2, out_type="INT8"), r"RESAMPLE2: OutputTensor\.DataType must equal InputTensor"),
    (
        _r(R3, scales=[1.0, 1.0, 2.0, 0.0]),
        r"^DML_OPERATOR_RESAMPLE3: Scales\[3\] must be finite and > 0",
    ),
    (
        _r(R3, type_name="INT16"),
        r"RESAMPLE3: InputTensor with data type INT16 .* no feature level supports it",
    ),
]


@pytest.mark.parametrize("factory, pattern", INVALID_ROWS)
def test_invalid_descriptions_are_rejected(factory, pattern):
    with pytest.raises(dml.ValidationError, match=pattern):
        dml.validate(factory())


@pytest.mark.parametrize(
    "factory, level, earlier",
    [
        (_up(), "1_0", None),
        (_r(), "2_0", "1_0"),
        (_r(R1), "2_1", "2_0"),
        (_r(R2), "5_1", "5_0"),
        (_r(R3), "6_4", "6_3"),
    ],
)
def test_introduction_levels(factory, level, earlier):
    dml.validate(factory(), feature_level=level)
    if earlier:
        with pytest.raises(dml.ValidationError, match=rf"requires feature level {level} or later"):
            dml.validate(factory(), feature_level=earlier)


@pytest.mark.parametrize("cls", [R, R1, R2])
def test_support_grows_by_level(cls):
    """RESAMPLE and RESAMPLE1 are 4-D only until 5_1, then 1 to 4 dimensions (RESAMPLE2's
    first level); INT8 / UINT8 from 6_2."""
    one_d = _r(cls, sizes=(3,), out=(6,), scales=[2.0])
    if cls is not R2:
        with pytest.raises(dml.ValidationError, match=r"DimensionCount 1 .* lowest .* is 5_1"):
            dml.validate(one_d(), feature_level="5_0")
    dml.validate(one_d(), feature_level="5_1")
    int8 = _r(cls, type_name="INT8")
    with pytest.raises(dml.ValidationError, match=r"data type INT8 .* lowest .* is 6_2"):
        dml.validate(int8(), feature_level="6_1")
    dml.validate(int8(), feature_level="6_2")


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_bench_equivalents_agree(dtype):
    """The bench's jax.image.resize equivalents compute what UPSAMPLE_2D computes."""
    from dml_jax import registry
    from dml_jax.bench import catalog

    spec = registry.lookup("DML_OPERATOR_UPSAMPLE_2D")
    cases = catalog.cases(spec, (2, 4, 8, 12), dtype, True)
    assert [c.label for c in cases] == [
        "UPSAMPLE_2D 2x NEAREST_NEIGHBOR",
        "UPSAMPLE_2D 2x LINEAR",
        "UPSAMPLE_2D 4x LINEAR",
    ]
    rng = np.random.default_rng(1)
    for case in cases:
        x = rng.standard_normal(case.desc.input_tensor.sizes).astype(dtype)
        got = np.asarray(dml.compile_operator(case.desc)(x), np.float64)
        want = np.asarray(case.jnp(x), np.float64)
        # jax.image.resize weighs FLOAT16 in FLOAT16: a few of its units apart near 0
        tolerance = {"rtol": 2e-3, "atol": 1e-3} if dtype == "float16" else {"atol": 1e-6}
        np.testing.assert_allclose(got, want, **tolerance)
