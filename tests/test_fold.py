"""UNFOLD (im2col) and FOLD (col2im): the pages' examples exactly, properties against
tests/reference/fold.py over types and 1 to 6 spatial dimensions, one row per rule, jit / vmap /
gradients, and FOLD as UNFOLD's adjoint."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import reference
import strategies as S
from hypothesis import assume, given
from hypothesis import strategies as st

import dml_jax as dml

T = dml.TensorDesc
FOLD, UNFOLD = dml.FoldOperatorDesc, dml.UnfoldOperatorDesc


def _geometry(window=(3, 3), strides=(1, 1), dilations=(1, 1), start=(0, 0), end=(0, 0)):
    return {
        "window_sizes": list(window),
        "strides": list(strides),
        "dilations": list(dilations),
        "start_padding": list(start),
        "end_padding": list(end),
    }


IMAGE_5X5 = np.arange(25, dtype=np.float32).reshape(1, 1, 5, 5)
FOLD_EXAMPLE_2_3 = np.array(
    [
        [26, 70, 102, 60],
        [78, 183, 231, 129],
        [84, 195, 243, 135],
        [82, 182, 214, 116],
    ],
    np.float32,
)

SEEDS = [
    # DML_UNFOLD_OPERATOR_DESC's two examples
    (
        UNFOLD(T("FLOAT32", [1, 1, 5, 5]), T("FLOAT32", [1, 9, 9]), **_geometry()),
        (IMAGE_5X5,),
        (
            np.array(
                [
                    [[r + dr * 5 + dc + c for r in (0, 5, 10) for c in (0, 1, 2)]]
                    for dr in range(3)
                    for dc in range(3)
                ],
                np.float32,
            ).reshape(1, 9, 9),
        ),
    ),
    (
        UNFOLD(
            T("FLOAT32", [1, 1, 5, 5]),
            T("FLOAT32", [1, 9, 15]),
            **_geometry(start=(1, 0), end=(1, 0)),
        ),
        (IMAGE_5X5,),
        (
            np.array(
                [
                    [0, 0, 0, 0, 1, 2, 5, 6, 7, 10, 11, 12, 15, 16, 17],
                    [0, 0, 0, 1, 2, 3, 6, 7, 8, 11, 12, 13, 16, 17, 18],
                    [0, 0, 0, 2, 3, 4, 7, 8, 9, 12, 13, 14, 17, 18, 19],
                    [0, 1, 2, 5, 6, 7, 10, 11, 12, 15, 16, 17, 20, 21, 22],
                    [1, 2, 3, 6, 7, 8, 11, 12, 13, 16, 17, 18, 21, 22, 23],
                    [2, 3, 4, 7, 8, 9, 12, 13, 14, 17, 18, 19, 22, 23, 24],
                    [5, 6, 7, 10, 11, 12, 15, 16, 17, 20, 21, 22, 0, 0, 0],
                    [6, 7, 8, 11, 12, 13, 16, 17, 18, 21, 22, 23, 0, 0, 0],
                    [7, 8, 9, 12, 13, 14, 17, 18, 19, 22, 23, 24, 0, 0, 0],
                ],
                np.float32,
            )[None],
        ),
    ),
    # DML_FOLD_OPERATOR_DESC's three examples
    (
        FOLD(T("FLOAT32", [1, 9, 4]), T("FLOAT32", [1, 1, 4, 4]), **_geometry()),
        (np.arange(36, dtype=np.float32).reshape(1, 9, 4),),
        (
            np.array(
                [[0, 5, 13, 9], [14, 38, 54, 32], [38, 86, 102, 56], [26, 57, 65, 35]],
                np.float32,
            )[None, None],
        ),
    ),
    (
        FOLD(
            T("FLOAT32", [1, 9, 8]),
            T("FLOAT32", [1, 1, 4, 4]),
            **_geometry(start=(1, 0), end=(1, 0)),
        ),
        (np.arange(72, dtype=np.float32).reshape(1, 9, 8),),
        (FOLD_EXAMPLE_2_3[None, None],),
    ),
    (
        FOLD(
            T("FLOAT32", [1, 18, 8]),
            T("FLOAT32", [1, 2, 4, 4]),
            **_geometry(start=(1, 0), end=(1, 0)),
        ),
        (np.arange(144, dtype=np.float32).reshape(1, 18, 8),),
        (
            np.stack(
                [
                    FOLD_EXAMPLE_2_3,
                    np.array(
                        [
                            [170, 358, 390, 204],
                            [294, 615, 663, 345],
                            [300, 627, 675, 351],
                            [226, 470, 502, 260],
                        ],
                        np.float32,
                    ),
                ]
            )[None],
        ),
    ),
    # Worked by hand, 1-D: [1..5] padded to [0, 1, 2, 3, 4, 5]; windows of 2 points 2 apart at
    # steps of 2 start at 0 and 2: points (0, 2) -> [0, 2] and (2, 4) -> [2, 4].
    (
        UNFOLD(
            T("INT32", [1, 1, 5]),
            T("INT32", [1, 2, 2]),
            **_geometry((2,), (2,), (2,), (1,), (0,)),
        ),
        (np.arange(1, 6, dtype=np.int32).reshape(1, 1, 5),),
        (np.array([[[0, 2], [2, 4]]], np.int32),),
    ),
    # ... and a UINT8 FOLD whose overlap wraps: out[1] = 156 + 100 = 256 -> 0.
    (
        FOLD(
            T("UINT8", [1, 2, 2]), T("UINT8", [1, 1, 3]), **_geometry((2,), (1,), (1,), (0,), (0,))
        ),
        (np.array([[[200, 156], [100, 7]]], np.uint8),),
        (np.array([[[200, 0, 7]]], np.uint8),),
    ),
]


@pytest.mark.parametrize("desc, inputs, expected", SEEDS)
def test_documented_and_worked_examples(desc, inputs, expected):
    S.assert_same(S.run(S.Case(desc, inputs)), expected)
    S.assert_same(reference.reference(desc, *inputs), expected)


# --- properties -----------------------------------------------------------------------------


@st.composite
def geometries(draw, max_elements: int = 256):
    """(image sizes, geometry) with at most ``max_elements`` in the image and in the columns."""
    dims = draw(st.integers(1, 6))
    small = dims >= 3
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 2 if small else 3))
    window, strides, dilations, start, end, spatial = [], [], [], [], [], []
    for _ in range(dims):
        w = draw(st.integers(1, 2 if small else 3))
        dil = draw(st.integers(1, 1 if small else 2))
        s0, s1 = draw(st.integers(0, 1 if small else 2)), draw(st.integers(0, 1 if small else 2))
        extent = dil * (w - 1) + 1
        size = draw(st.integers(max(1, extent - s0 - s1), max(1, extent - s0 - s1) + 3))
        window.append(w)
        strides.append(draw(st.integers(1, 3)))
        dilations.append(dil)
        start.append(s0)
        end.append(s1)
        spatial.append(size)
    geometry = _geometry(window, strides, dilations, start, end)
    blocks = math.prod(
        (size + a + b - d * (w - 1) - 1) // s + 1
        for size, a, b, d, w, s in zip(spatial, start, end, dilations, window, strides)
    )
    image = (n, c, *spatial)
    assume(math.prod(image) <= max_elements)
    assume(n * c * math.prod(window) * blocks <= max_elements)
    return image, (n, c * math.prod(window), blocks), geometry


@st.composite
def fold_cases(draw, cls=None, types=None, max_elements: int = 256):
    cls = cls or draw(st.sampled_from([FOLD, UNFOLD]))
    type_name = draw(st.sampled_from(types or S.types_at_newest(cls.operator_type)))
    image, columns, geometry = draw(geometries(max_elements))
    if cls is UNFOLD:
        desc = cls(T(type_name, image), T(type_name, columns), **geometry)
        shape = image
    else:
        desc = cls(T(type_name, columns), T(type_name, image), **geometry)
        shape = columns
    if draw(st.booleans()):
        desc = cls(
            desc.input_tensor, desc.output_tensor, **geometry, dimension_count=len(image) - 2
        )
    style = draw(st.sampled_from(["full", "small"]))
    return S.Case(desc, (S.values(draw(S.seeds()), type_name, shape, style),))


def _tolerance(case) -> dict:
    """UNFOLD copies (exact); FOLD's float sums run in another order than the reference's."""
    dtype = case.inputs[0].dtype
    if case.desc.operator_type == "DML_OPERATOR_UNFOLD" or dtype.kind in "iu":
        return {"exact": True}
    if dtype == np.float16:
        return {"exact": False, "rtol": 1e-3, "atol": 1e-3}
    return {"exact": False, "rtol": 1e-5, "atol": 1e-4}


@given(fold_cases())
def test_fold_unfold_match_reference(case):
    S.assert_same(S.run(case), reference.reference(case.desc, *case.inputs), **_tolerance(case))


@S.FEW
@given(fold_cases(max_elements=128))
def test_fold_unfold_jit_and_vmap(case):
    S.check_jit(case, **_tolerance(case))
    S.check_vmap(case, **_tolerance(case))


@S.FEW
@given(fold_cases(types=["FLOAT32"], max_elements=128))
def test_fold_unfold_check_grads(case):
    S.check_grads(case, atol=1e-2, rtol=1e-2)


@S.FEW
@given(geometries(max_elements=128), S.seeds())
def test_fold_is_the_adjoint_of_unfold(shapes, rng):
    """<UNFOLD(x), y> = <x, FOLD(y)>: FOLD with UNFOLD's geometry is its transpose, so UNFOLD's
    gradient is FOLD (and FOLD's is UNFOLD)."""
    image, columns, geometry = shapes
    unfold = dml.compile_operator(UNFOLD(T("FLOAT32", image), T("FLOAT32", columns), **geometry))
    fold = dml.compile_operator(FOLD(T("FLOAT32", columns), T("FLOAT32", image), **geometry))
    x = jnp.asarray(rng.standard_normal(image), jnp.float32)
    y = jnp.asarray(rng.standard_normal(columns), jnp.float32)

    @jax.jit
    def everything(x, y):
        u, f = unfold.fn(x), fold.fn(y)
        return (
            jnp.vdot(u, y),
            jnp.vdot(x, f),
            u,
            f,
            jax.vjp(unfold.fn, x)[1](y)[0],
            jax.vjp(fold.fn, y)[1](x)[0],
        )

    uy, xf, u, f, unfold_vjp, fold_vjp = everything(x, y)
    np.testing.assert_allclose(float(uy), float(xf), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(unfold_vjp), np.asarray(f), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(fold_vjp), np.asarray(u))


def test_non_overlapping_windows_round_trip():
    # 2x2 windows at stride 2 tile a 4x6 image exactly: FOLD(UNFOLD(x)) == x, bit for bit.
    geometry = _geometry((2, 2), (2, 2))
    image, columns = T("FLOAT16", [2, 3, 4, 6]), T("FLOAT16", [2, 12, 6])
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 6)).astype(np.float16)
    (cols,) = S.run(S.Case(UNFOLD(image, columns, **geometry), (x,)))
    (back,) = S.run(S.Case(FOLD(columns, image, **geometry), (cols,)))
    np.testing.assert_array_equal(back, x)


def test_float16_overlaps_accumulate_in_float32():
    # Nine windows cover the centre of a 3x3 image; 2048 + 8 * 1 is exact in float32, while a
    # float16 running sum would stay at 2048 (its spacing there is 2).
    geometry = _geometry((3, 3), (1, 1), (1, 1), (1, 1), (1, 1))
    y = np.ones((1, 9, 9), np.float16)
    y[0, 0, 8] = 2048  # window point (0, 0) of the last block covers the centre
    (out,) = S.run(
        S.Case(FOLD(T("FLOAT16", [1, 9, 9]), T("FLOAT16", [1, 1, 3, 3]), **geometry), (y,))
    )
    assert out[0, 0, 1, 1] == np.float16(2056)


@pytest.mark.parametrize("type_name, expected", [("FLOAT16", True), ("INT64", False)])
def test_fold_differentiable_flag(type_name, expected):
    d = FOLD(T(type_name, [1, 9, 4]), T(type_name, [1, 1, 4, 4]), **_geometry())
    with S.x64(d):
        assert dml.compile_operator(d).differentiable is expected


# --- rules ------------------------------------------------------------------------------------


def _unfold(image=(1, 2, 4, 4), columns=(1, 18, 4), type_name="FLOAT32", out_type=None, **g):
    def make():
        geometry = {**_geometry(), **g}
        return UNFOLD(T(type_name, image), T(out_type or type_name, columns), **geometry)

    return make


def _fold(columns=(1, 18, 4), image=(1, 2, 4, 4), type_name="FLOAT32", **g):
    def make():
        return FOLD(T(type_name, columns), T(type_name, image), **{**_geometry(), **g})

    return make


INVALID_ROWS = [
    (
        _unfold(**_geometry((), (), (), (), ())),
        r"^DML_OPERATOR_UNFOLD: DimensionCount must be in \[1, 6\], got 0",
    ),
    (
        _unfold(image=(1, 1) + (2,) * 6, **_geometry(*[(1,) * 7] * 3, (0,) * 7, (0,) * 7)),
        r"DimensionCount must be in \[1, 6\], got 7",
    ),
    (_unfold(strides=[1]), r"UNFOLD: Strides must hold DimensionCount \(2\) values, got 1"),
    (_unfold(end_padding=[0, 0, 0]), r"EndPadding must hold DimensionCount \(2\) values, got 3"),
    (_unfold(window_sizes=[0, 3]), r"WindowSizes\[0\] must be >= 1, got 0"),
    (_unfold(strides=[1, 0]), r"Strides\[1\] must be >= 1, got 0"),
    (_unfold(dilations=[0, 1]), r"Dilations\[0\] must be >= 1, got 0"),
    (
        _unfold(image=(2, 4, 4)),
        r"UNFOLD: InputTensor\.DimensionCount must be DimensionCount \+ 2 = 4 .*, got 3",
    ),
    (
        _unfold(dilations=[2, 1]),
        r"InputTensor\.Sizes\[2\] plus StartPadding\[0\] and EndPadding\[0\] \(4\) .* = 5\)",
    ),
    (_unfold(columns=(1, 18, 5)), r"UNFOLD: OutputTensor\.Sizes\[2\] must equal 4, got 5"),
    (_unfold(columns=(1, 18, 4, 1)), r"OutputTensor\.DimensionCount must equal 3, got 4"),
    (_unfold(out_type="FLOAT16"), r"OutputTensor\.DataType must equal FLOAT32, got FLOAT16"),
    (
        _unfold(type_name="FLOAT64"),
        r"UNFOLD: InputTensor with data type FLOAT64 .* no feature level supports it",
    ),
    (
        lambda: UNFOLD(
            T("FLOAT32", [1, 2, 4, 4]), T("FLOAT32", [1, 18, 4]), **_geometry(), dimension_count=3
        ),
        r"UNFOLD: DimensionCount must equal the length of WindowSizes \(2\), got 3",
    ),
    (_fold(columns=(1, 18, 2, 2)), r"^DML_OPERATOR_FOLD: InputTensor\.DimensionCount must be 3"),
    (
        _fold(image=(1, 2, 16)),
        r"FOLD: OutputTensor\.DimensionCount must be DimensionCount \+ 2 = 4 .*, got 3",
    ),
    (_fold(columns=(1, 16, 4)), r"InputTensor\.Sizes\[1\] \(16\) must be a multiple of .* \(9\)"),
    (
        _fold(columns=(1, 18, 9)),
        r"FOLD: InputTensor\.Sizes\[2\] must equal BlockCount of OutputTensor \(4\), got 9",
    ),
    (_fold(image=(1, 3, 4, 4)), r"FOLD: OutputTensor\.Sizes\[1\] must equal 2, got 3"),
    (_fold(image=(2, 2, 4, 4)), r"FOLD: OutputTensor\.Sizes\[0\] must equal 1, got 2"),
    (
        _fold(image=(1, 2, 1, 4)),
        r"FOLD: OutputTensor\.Sizes\[2\] plus StartPadding\[0\] and EndPadding\[0\] \(1\)",
    ),
]


@pytest.mark.parametrize("factory, pattern", INVALID_ROWS)
def test_invalid_descriptions_are_rejected(factory, pattern):
    with pytest.raises(dml.ValidationError, match=pattern):
        dml.validate(factory())


@pytest.mark.parametrize("factory", [_unfold(), _fold()])
def test_fold_unfold_need_feature_level_6_4(factory):
    dml.validate(factory(), feature_level="6_4")
    with pytest.raises(dml.ValidationError, match=r"requires feature level 6_4 or later"):
        dml.validate(factory(), feature_level="6_3")
