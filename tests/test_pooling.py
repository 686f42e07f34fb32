"""AVERAGE_POOLING(1), LP_POOLING(1), MAX_POOLING(1, 2) and MAX_UNPOOLING: MAX_POOLING1's
documented example exactly, hand-worked cases (padding in and out of the divisor, dilations,
ties, NaN, windows of padding only, unpooling's out-of-range and repeated indices), properties
against tests/reference/pooling.py over types, 2-D and 3-D windows, strides, padding and
dilations, one row per rule, jit / vmap / gradients."""

from __future__ import annotations

import dataclasses
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
from dml_jax.ops.pooling import window_plan

T = dml.TensorDesc
AVG, AVG1 = dml.AveragePoolingOperatorDesc, dml.AveragePooling1OperatorDesc
LP, LP1 = dml.LpPoolingOperatorDesc, dml.LpPooling1OperatorDesc
MAX, MAX1, MAX2 = (
    dml.MaxPoolingOperatorDesc,
    dml.MaxPooling1OperatorDesc,
    dml.MaxPooling2OperatorDesc,
)
UNPOOL = dml.MaxUnpoolingOperatorDesc
WINDOWED = (AVG, AVG1, LP, LP1, MAX, MAX1, MAX2)
DILATED = (AVG1, LP1, MAX2)
INDEXED = (MAX1, MAX2)


def _pool(cls, x, out, window, strides=None, start=None, end=None, dilations=None, **extra):
    """A pooling description over the last len(window) dimensions."""
    n = len(window)
    args = {
        "strides": list(strides or [1] * n),
        "window_size": list(window),
        "start_padding": list(start or [0] * n),
        "end_padding": list(end or [0] * n),
    }
    if cls in DILATED:
        args["dilations"] = list(dilations or [1] * n)
    if cls in (AVG, AVG1):
        args.setdefault("include_padding", extra.pop("include_padding", False))
    if cls in (LP, LP1):
        args["p"] = extra.pop("p", 2)
    if cls in INDEXED:
        args["output_indices_tensor"] = extra.pop("indices", None)
    return cls(x, out, **args, **extra)


def _a(values, dtype=np.float32, shape=None):
    a = np.array(values, dtype)
    return a.reshape(shape) if shape else a


IMAGE = _a([1, 5, 2, 4, 3, 9, 8, 6, 7], shape=(1, 1, 3, 3))
F32_3X3, F32_2X2 = T("FLOAT32", [1, 1, 3, 3]), T("FLOAT32", [1, 1, 2, 2])
NAN = np.nan

SEEDS = [
    # DML_MAX_POOLING1_OPERATOR_DESC's example: [[3,5,7,1],[9,4,2,8]] with a window of 3 along
    # the rows gives [[7,7],[9,8]] from the flat input indices [[2,2],[4,7]].
    (
        _pool(
            MAX1,
            T("FLOAT32", [1, 1, 2, 4]),
            F32_2X2,
            (1, 3),
            indices=T("UINT32", [1, 1, 2, 2]),
        ),
        (_a([3, 5, 7, 1, 9, 4, 2, 8], shape=(1, 1, 2, 4)),),
        (_a([7, 7, 9, 8], shape=(1, 1, 2, 2)), _a([2, 2, 4, 7], np.uint32, (1, 1, 2, 2))),
    ),
    # Worked by hand: 2x2 means over [[1,5,2],[4,3,9],[8,6,7]] padded by one row and column in
    # front; without the padding in the divisor the corner is 1 / 1, with it 1 / 4.
    (
        _pool(AVG, F32_3X3, F32_3X3, (2, 2), start=(1, 1)),
        (IMAGE,),
        (_a([1, 3, 3.5, 2.5, 3.25, 4.75, 6, 5.25, 6.25], shape=(1, 1, 3, 3)),),
    ),
    (
        _pool(AVG1, F32_3X3, F32_3X3, (2, 2), start=(1, 1), include_padding=True),
        (IMAGE,),
        (_a([0.25, 1.5, 1.75, 1.25, 3.25, 4.75, 3, 5.25, 6.25], shape=(1, 1, 3, 3)),),
    ),
    # ... their maxima and flat indices (the 9 is the maximum of two windows).
    (
        _pool(MAX2, F32_3X3, F32_2X2, (2, 2), indices=T("UINT32", [1, 1, 2, 2])),
        (IMAGE,),
        (_a([5, 9, 8, 9], shape=(1, 1, 2, 2)), _a([1, 5, 6, 5], np.uint32, (1, 1, 2, 2))),
    ),
    # L1, L2 and L3 norms of [3, -4] and of [3, -4, 0] with one zero of padding.
    (
        _pool(LP, T("FLOAT32", [1, 1, 1, 2]), T("FLOAT32", [1, 1, 1, 1]), (1, 2), p=1),
        (_a([3, -4], shape=(1, 1, 1, 2)),),
        (_a([7], shape=(1, 1, 1, 1)),),
    ),
    (
        _pool(LP1, T("FLOAT32", [1, 1, 1, 2]), T("FLOAT32", [1, 1, 1, 2]), (1, 2), end=(0, 1)),
        (_a([3, -4], shape=(1, 1, 1, 2)),),
        (_a([5, 4], shape=(1, 1, 1, 2)),),
    ),
    # Dilation 2 over arange(16) as 4x4: window (0, 0) reads 0, 2, 8, 10.
    (
        _pool(
            MAX2,
            T("FLOAT32", [1, 1, 4, 4]),
            F32_2X2,
            (2, 2),
            dilations=(2, 2),
            indices=T("UINT64", [1, 1, 2, 2]),
        ),
        (np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4),),
        (_a([10, 11, 14, 15], shape=(1, 1, 2, 2)), _a([10, 11, 14, 15], np.uint64, (1, 1, 2, 2))),
    ),
    (
        _pool(AVG1, T("FLOAT32", [1, 1, 4, 4]), F32_2X2, (2, 2), dilations=(2, 2)),
        (np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4),),
        (_a([5, 6, 9, 10], shape=(1, 1, 2, 2)),),
    ),
    # Ties keep the first in window order (-0.0 ties +0.0); NaN is the maximum, the first wins;
    # batch and channel count in the flat index (second channel: + 4).
    (
        _pool(
            MAX1,
            T("FLOAT32", [1, 2, 1, 4]),
            T("FLOAT32", [1, 2, 1, 2]),
            (1, 2),
            strides=(1, 2),
            indices=T("UINT32", [1, 2, 1, 2]),
        ),
        (_a([-0.0, 0.0, 2, 2, NAN, 1, 3, NAN], shape=(1, 2, 1, 4)),),
        (_a([0, 2, NAN, NAN], shape=(1, 2, 1, 2)), _a([0, 2, 4, 7], np.uint32, (1, 2, 1, 2))),
    ),
    # Padding never wins, even against the type's lowest value; -inf beats the padding too.
    (
        _pool(
            MAX1,
            T("INT8", [1, 1, 1, 2]),
            T("INT8", [1, 1, 1, 3]),
            (1, 2),
            start=(0, 1),
            end=(0, 1),
            indices=T("UINT32", [1, 1, 1, 3]),
        ),
        (_a([-128, -128], np.int8, (1, 1, 1, 2)),),
        (_a([-128, -128, -128], np.int8, (1, 1, 1, 3)), _a([0, 0, 1], np.uint32, (1, 1, 1, 3))),
    ),
    (
        _pool(
            MAX2,
            T("FLOAT16", [1, 1, 1, 2]),
            T("FLOAT16", [1, 1, 1, 3]),
            (1, 2),
            start=(0, 1),
            end=(0, 1),
            indices=T("UINT32", [1, 1, 1, 3]),
        ),
        (_a([-np.inf, -3], np.float16, (1, 1, 1, 2)),),
        (_a([-np.inf, -3, -3], np.float16, (1, 1, 1, 3)), _a([0, 1, 1], np.uint32, (1, 1, 1, 3))),
    ),
    # A window of padding only (points at -1 and 2 of a 1-wide input): the lowest value and the
    # largest index for MAX, 0 for AVERAGE (either divisor) and LP.
    (
        _pool(
            MAX2,
            T("FLOAT32", [1, 1, 1, 1]),
            T("FLOAT32", [1, 1, 1, 1]),
            (1, 2),
            start=(0, 1),
            end=(0, 2),
            dilations=(1, 3),
            indices=T("UINT32", [1, 1, 1, 1]),
        ),
        (_a([5], shape=(1, 1, 1, 1)),),
        (_a([-np.inf], shape=(1, 1, 1, 1)), _a([2**32 - 1], np.uint32, (1, 1, 1, 1))),
    ),
    (
        _pool(
            AVG1,
            T("FLOAT32", [1, 1, 1, 1]),
            T("FLOAT32", [1, 1, 1, 1]),
            (1, 2),
            start=(0, 1),
            end=(0, 2),
            dilations=(1, 3),
        ),
        (_a([5], shape=(1, 1, 1, 1)),),
        (_a([0], shape=(1, 1, 1, 1)),),
    ),
    # FLOAT16 sums accumulate in float32: (2048 + 1 + 1 + 2) / 4 = 513; a float16 running sum
    # would lose both ones (spacing 2 at 2048) and give 512.5.
    (
        _pool(AVG, T("FLOAT16", [1, 1, 2, 2]), T("FLOAT16", [1, 1, 1, 1]), (2, 2)),
        (_a([2048, 1, 1, 2], np.float16, (1, 1, 2, 2)),),
        (_a([513], np.float16, (1, 1, 1, 1)),),
    ),
    # 3-D windows: the maximum over a 2x2x2 cube of a 1x1x2x2x3 input, at two positions.
    (
        _pool(MAX, T("INT32", [1, 1, 2, 2, 3]), T("INT32", [1, 1, 1, 1, 2]), (2, 2, 2)),
        (_a([1, 9, 2, 3, 4, 5, 6, 7, 8, 0, -1, 10], np.int32, (1, 1, 2, 2, 3)),),
        (_a([9, 10], np.int32, (1, 1, 1, 1, 2)),),
    ),
    # MAX_UNPOOLING: the registered example's maxima put back; then index 9 is out of range
    # (written nowhere) and index 2 repeats (the last element, 4, wins).
    (
        UNPOOL(F32_2X2, T("UINT32", [1, 1, 2, 2]), F32_3X3),
        (_a([5, 9, 8, 9], shape=(1, 1, 2, 2)), _a([1, 5, 6, 5], np.uint32, (1, 1, 2, 2))),
        (_a([0, 5, 0, 0, 0, 9, 8, 0, 0], shape=(1, 1, 3, 3)),),
    ),
    (
        UNPOOL(F32_2X2, T("UINT32", [1, 1, 2, 2]), F32_2X2),
        (_a([1, 2, 3, 4], shape=(1, 1, 2, 2)), _a([0, 9, 2, 2], np.uint32, (1, 1, 2, 2))),
        (_a([1, 0, 4, 0], shape=(1, 1, 2, 2)),),
    ),
    # UINT64 2**32 is out of range, not 0.
    (
        UNPOOL(T("INT64", [1, 1, 1, 2]), T("UINT64", [1, 1, 1, 2]), T("INT64", [1, 1, 1, 2])),
        (_a([7, 8], np.int64, (1, 1, 1, 2)), _a([2**32, 1], np.uint64, (1, 1, 1, 2))),
        (_a([0, 8], np.int64, (1, 1, 1, 2)),),
    ),
]


@pytest.mark.parametrize("desc, inputs, expected", SEEDS)
def test_documented_and_worked_examples(desc, inputs, expected):
    S.assert_same(S.run(S.Case(desc, inputs)), expected)
    with S.x64(desc):
        S.assert_same(reference.reference(desc, *inputs), expected)


# --- properties -----------------------------------------------------------------------------


@st.composite
def windows(draw, dims: int, spatial_budget: int, dilated: bool):
    """(spatial sizes, window, strides, dilations, start, end) of a valid pooling window."""
    spatial, window, strides, dilations, start, end = [], [], [], [], [], []
    for _ in range(dims):
        w = draw(st.integers(1, 3))
        d = draw(st.integers(1, 2)) if dilated else 1
        s0, s1 = draw(st.integers(0, 2)), draw(st.integers(0, 2))
        extent = d * (w - 1) + 1
        low = max(1, extent - s0 - s1)
        size = draw(st.integers(low, low + (3 if dims == 2 else 1)))
        spatial.append(size)
        window.append(w)
        strides.append(draw(st.integers(1, 3)))
        dilations.append(d)
        start.append(s0)
        end.append(s1)
    assume(math.prod(spatial) <= spatial_budget)
    return spatial, window, strides, dilations, start, end


def _outputs(spatial, window, strides, dilations, start, end):
    return [
        (n + a + b - d * (w - 1) - 1) // s + 1
        for n, w, s, d, a, b in zip(spatial, window, strides, dilations, start, end)
    ]


@st.composite
def pooling_cases(draw, classes=WINDOWED, types=None, max_elements: int = 192, style=None):
    cls = draw(st.sampled_from(classes))
    type_name = draw(st.sampled_from(types or S.types_at_newest(cls.operator_type)))
    dims = draw(st.sampled_from([2, 3]))
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    budget = max(1, max_elements // (n * c))
    spatial, window, strides, dilations, start, end = draw(
        windows(dims, budget, dilated=cls in DILATED)
    )
    x = T(type_name, [n, c, *spatial])
    sizes = [n, c, *_outputs(spatial, window, strides, dilations, start, end)]
    extra = {}
    if cls in (AVG, AVG1):
        extra["include_padding"] = draw(st.booleans())
    if cls in (LP, LP1):
        extra["p"] = draw(st.integers(1, 4))
    if cls in INDEXED and draw(st.booleans()):
        extra["indices"] = T(draw(st.sampled_from(["UINT32", "UINT64"])), sizes)
    desc = _pool(cls, x, T(type_name, sizes), window, strides, start, end, dilations, **extra)
    if draw(st.booleans()):
        desc = dataclasses.replace(desc, dimension_count=dims)
    rng = draw(S.seeds())
    chosen = style or draw(st.sampled_from(["full", "ties", "small"]))
    if cls in (LP, LP1):
        chosen = "small"  # |x|^P of FLOAT16 stays finite
    values = S.values(rng, type_name, x.sizes, chosen)
    if values.dtype.kind == "f" and cls in (MAX, MAX1, MAX2) and draw(st.booleans()):
        values.ravel()[rng.integers(0, values.size, 2)] = np.nan
    return S.Case(desc, (values,))


def _tolerance(case) -> dict:
    dtype = case.inputs[0].dtype
    if case.desc.operator_type.startswith("DML_OPERATOR_MAX") or dtype.kind in "iu":
        return {"exact": True}
    if dtype == np.float16:
        return {"exact": False, "rtol": 2e-3, "atol": 2e-3}
    return {"exact": False, "rtol": 1e-5, "atol": 1e-5}


@given(pooling_cases())
def test_pooling_matches_reference(case):
    with S.x64(case.desc):
        want = reference.reference(case.desc, *case.inputs)
    S.assert_same(S.run(case), want, **_tolerance(case))


@S.HALF
@given(pooling_cases(classes=INDEXED, style="ties"))
def test_max_pooling_indices_match_reference_with_ties(case):
    with S.x64(case.desc):
        want = reference.reference(case.desc, *case.inputs)
    S.assert_same(S.run(case), want)


@S.FEW
@given(pooling_cases(classes=(MAX, MAX1, MAX2), style="ties"))
def test_max_by_slices_and_by_reduce_window_agree(case):
    """MAX's two forms, the strided slices off the CPU and reduce_window on it (traced for each
    platform here), give the same values bit for bit: NaN where it propagates, -0.0 below
    +0.0, padding never winning."""
    from dml_jax import fastpath
    from dml_jax.ops.pooling import window_max

    plan, (x,) = window_plan(case.desc), case.inputs
    values = {}
    for platform in ("cpu", "cuda"):
        with fastpath.target_platform(platform):
            values[platform] = np.asarray(jax.jit(lambda x: window_max(plan, x))(x))
    cpu, other = values["cpu"], values["cuda"]
    assert cpu.dtype == other.dtype and cpu.shape == other.shape
    np.testing.assert_array_equal(cpu.view(f"u{cpu.itemsize}"), other.view(f"u{cpu.itemsize}"))


def test_max_pooling_on_the_cpu_is_one_reduce_window():
    """An overlapping, padded max pooling (ResNet's 3x3/2 after its stem): on the CPU one
    reduce_window and no padded copy (XLA fused the padding's producers into it element by
    element), off it the slices of the padded input."""
    from dml_jax import fastpath
    from dml_jax.ops.pooling import window_max

    x = dml.TensorDesc("FLOAT32", (1, 4, 9, 9))
    desc = MAX(x, x.like(sizes=(1, 4, 5, 5)), (2, 2), (3, 3), (1, 1), (1, 1))
    plan = window_plan(desc)
    for platform, form in (("cpu", "reduce_window_max["), ("cuda", " pad[")):
        with fastpath.target_platform(platform):
            jaxpr = str(jax.make_jaxpr(lambda x: window_max(plan, x))(np.zeros((1, 4, 9, 9), "f4")))
        assert form in jaxpr and (" pad[" in jaxpr) == (platform == "cuda")


@S.FEW
@given(pooling_cases(max_elements=96))
def test_pooling_jit_and_vmap(case):
    S.check_jit(case, **S.same_program_tolerance(case))
    S.check_vmap(case, **S.same_program_tolerance(case))


def _separated(case):
    """The case's input replaced by distinct values 0.5 apart (no ties within a finite
    difference step), so max pooling's gradient is unique."""
    (x,) = case.inputs
    rng = np.random.default_rng(x.size)
    return S.Case(
        case.desc, ((rng.permutation(x.size) * 0.5 - x.size / 4).reshape(x.shape).astype(x.dtype),)
    )


@S.FEW
@given(pooling_cases(types=["FLOAT32"], max_elements=96))
def test_pooling_check_grads(case):
    if getattr(case.desc, "output_indices_tensor", None) is not None:
        case = S.Case(dataclasses.replace(case.desc, output_indices_tensor=None), case.inputs)
    if case.desc.operator_type.startswith("DML_OPERATOR_LP"):
        # Every window on some input and positive values: norms away from 0, where the root is
        # not differentiable.
        plan = window_plan(case.desc)
        assume(all(plan.counts(i).min() > 0 for i in range(len(plan.window))))
        (x,) = case.inputs
        x = np.random.default_rng(x.size).uniform(0.5, 2.0, x.shape).astype(np.float32)
        case = S.Case(case.desc, (x,))
    else:
        case = _separated(case)
    S.check_grads(case, atol=2e-2, rtol=2e-2)


@st.composite
def unpooling_cases(draw):
    type_name = draw(st.sampled_from(S.types_at_newest("DML_OPERATOR_MAX_UNPOOLING")))
    index_type = draw(st.sampled_from(["UINT32", "UINT64"]))
    shape = draw(S.shapes(ranks=(4,), max_elements=48, max_dim=4))
    out_shape = draw(S.shapes(ranks=(4,), max_elements=96, max_dim=5))
    rng = draw(S.seeds())
    size = math.prod(out_shape)
    # Mostly in range, repeats likely; some past the end and some huge.
    idx = rng.integers(0, size + 2, shape).astype(index_type.lower())
    if draw(st.booleans()):
        idx.ravel()[0] = np.iinfo(idx.dtype).max
    desc = UNPOOL(T(type_name, shape), T(index_type, shape), T(type_name, out_shape))
    return S.Case(desc, (S.values(rng, type_name, shape, "full"), idx))


@given(unpooling_cases())
def test_max_unpooling_matches_reference(case):
    S.assert_same(S.run(case), reference.reference(case.desc, *case.inputs))


@S.FEW
@given(unpooling_cases())
def test_max_unpooling_jit_vmap_and_grads(case):
    S.check_jit(case)
    S.check_vmap(case)
    if case.desc.input_tensor.data_type.name == "FLOAT32":
        S.check_grads(case, argnums=(0,), atol=1e-2, rtol=1e-2)


@S.FEW
@given(S.seeds(), st.sampled_from([(2, 2), (3, 2), (1, 3)]))
def test_unpooling_the_indices_restores_the_maxima(rng, window):
    """MAX_UNPOOLING(MAX_POOLING1(x)) over non-overlapping windows keeps each window's maximum
    where it was and zeroes the rest."""
    wh, ww = window
    shape = (2, 3, 2 * wh, 3 * ww)
    x = rng.permutation(math.prod(shape)).reshape(shape).astype(np.float32)
    pooled = T("FLOAT32", [2, 3, 2, 3])
    pool = _pool(
        MAX1, T("FLOAT32", shape), pooled, window, window, indices=T("UINT32", [2, 3, 2, 3])
    )
    values, indices = S.run(S.Case(pool, (x,)))
    (back,) = S.run(
        S.Case(UNPOOL(pooled, T("UINT32", [2, 3, 2, 3]), T("FLOAT32", shape)), (values, indices))
    )
    blocks = x.reshape(2, 3, 2, wh, 3, ww)
    is_max = blocks == blocks.max(axis=(3, 5), keepdims=True)
    np.testing.assert_array_equal(back, np.where(is_max, blocks, 0).reshape(shape))


@pytest.mark.parametrize(
    "desc, expected",
    [
        (_pool(MAX1, F32_3X3, F32_2X2, (2, 2), indices=T("UINT32", [1, 1, 2, 2])), True),
        (_pool(MAX, T("INT8", [1, 1, 3, 3]), T("INT8", [1, 1, 2, 2]), (2, 2)), False),
        (_pool(LP, T("FLOAT16", [1, 1, 3, 3]), T("FLOAT16", [1, 1, 2, 2]), (2, 2)), True),
        (UNPOOL(F32_2X2, T("UINT32", [1, 1, 2, 2]), F32_3X3), True),
    ],
)
def test_pooling_differentiable_flag(desc, expected):
    assert dml.compile_operator(desc).differentiable is expected


def test_max_pooling_gradient_ignores_the_indices_output():
    desc = _pool(MAX1, F32_3X3, F32_2X2, (2, 2), indices=T("UINT32", [1, 1, 2, 2]))
    op = dml.compile_operator(desc)
    grad = jax.grad(lambda x: op.fn(x)[0].sum())(IMAGE)
    # 5 and 8 are the maxima of one window each, 9 of two.
    np.testing.assert_array_equal(grad, _a([0, 1, 0, 0, 0, 2, 1, 0, 0], shape=(1, 1, 3, 3)))


@pytest.mark.parametrize(
    "window, strides, dilations, start",
    [
        ((3, 3), (1, 1), (1, 1), (1, 1)),
        ((2, 3), (1, 2), (2, 1), (0, 1)),
        ((2, 2), (1, 1), None, (0, 0)),
    ],
)
def test_sliced_max_gradient_goes_to_the_reported_index(window, strides, dilations, start):
    """Overlapping and dilated windows (the strided-slice lowering): each output's derivative
    goes to the element OutputIndicesTensor reports, the first maximum in window order, also
    among many ties and against padding."""
    cls = MAX2 if dilations else MAX1
    rng = np.random.default_rng(7)
    x = rng.integers(0, 3, (2, 2, 6, 7)).astype(np.float32)
    x[0, 0, 0, 0] = -np.inf  # an input element equal to the padding value
    geometry = (window, strides, start, start, dilations)
    probe = _pool(cls, T("FLOAT32", x.shape), T("FLOAT32", [1]), *geometry)  # for its plan
    sizes = x.shape[:2] + window_plan(probe).outputs
    desc = _pool(
        cls, T("FLOAT32", x.shape), T("FLOAT32", sizes), *geometry, indices=T("UINT32", sizes)
    )
    op = dml.compile_operator(desc)
    _, indices = op(x)
    want = np.bincount(np.asarray(indices).ravel(), minlength=x.size).reshape(x.shape)
    grad = jax.grad(lambda a: op.fn(a)[0].sum())(jnp.asarray(x))
    np.testing.assert_array_equal(grad, want.astype(np.float32))
    tangent = jax.jvp(lambda a: op.fn(a)[0], (jnp.asarray(x),), (jnp.asarray(x),))[1]
    np.testing.assert_array_equal(tangent, x.ravel()[np.asarray(indices).ravel()].reshape(sizes))


# --- rules ------------------------------------------------------------------------------------


def _make(cls=MAX, x=(1, 1, 4, 4), out=(1, 1, 3, 3), type_name="FLOAT32", out_type=None, **g):
    def make():
        args = {"window": (2, 2), **g}
        return _pool(cls, T(type_name, x), T(out_type or type_name, out), **args)

    return make


def _unpool(x=(1, 1, 2, 2), idx=(1, 1, 2, 2), out=(1, 1, 4, 4), t="FLOAT32", it="UINT32", ot=None):
    return lambda: UNPOOL(T(t, x), T(it, idx), T(ot or t, out))


INVALID_ROWS = [
    (
        _make(x=(1, 1, 4), out=(1, 1, 3), window=(2,)),
        r"^DML_OPERATOR_MAX_POOLING: DimensionCount must be 2 or 3 \(spatial dimensions\), got 1",
    ),
    (
        _make(start=(0, 0, 0)),
        r"^DML_OPERATOR_MAX_POOLING: StartPadding must hold DimensionCount \(2\) values, got 3",
    ),
    (_make(end=(0,)), r"EndPadding must hold DimensionCount \(2\) values, got 1"),
    (
        lambda: MAX(
            T("FLOAT32", [1, 1, 4, 4]), T("FLOAT32", [1, 1, 3, 3]), [1, 1], [2], [0, 0], [0, 0]
        ),
        r"MAX_POOLING: WindowSize must hold DimensionCount \(2\) values, got 1",
    ),
    (
        _make(AVG1, dilations=(1, 1, 1)),
        r"AVERAGE_POOLING1: Dilations must hold DimensionCount \(2\)",
    ),
    (_make(strides=(1, 0)), r"MAX_POOLING: Strides\[1\] must be >= 1, got 0"),
    (_make(window=(0, 2)), r"MAX_POOLING: WindowSize\[0\] must be >= 1, got 0"),
    (_make(MAX2, dilations=(0, 1)), r"MAX_POOLING2: Dilations\[0\] must be >= 1, got 0"),
    (
        _make(x=(1, 1, 1, 4, 4), out=(1, 1, 1, 3, 3)),
        r"MAX_POOLING: InputTensor\.DimensionCount must be DimensionCount \+ 2 = 4 .*, got 5",
    ),
    # The dilated span (3 * 1 + 1 = 4) sets the output size: 1 position, not 3.
    (_make(LP1, dilations=(3, 1)), r"LP_POOLING1: OutputTensor\.Sizes\[2\] must equal 1, got 3"),
    (
        _make(LP1, dilations=(4, 1)),
        (
            r"LP_POOLING1: InputTensor\.Sizes\[2\] plus StartPadding\[0\] and EndPadding\[0\] "
            r"\(4\) must hold the window \(Dilations\[0\] \* \(WindowSize\[0\] - 1\) \+ 1 = 5\)"
        ),
    ),
    (
        _make(AVG, window=(5, 2)),
        r"AVERAGE_POOLING: InputTensor\.Sizes\[2\] .* must hold the window \(WindowSize\[0\] = 5\)",
    ),
    # DirectML has no ceil mode: a 3x3 window at stride 2 over 4 has 1 position, not 2.
    (
        _make(out=(1, 1, 2, 2), window=(3, 3), strides=(2, 2)),
        r"MAX_POOLING: OutputTensor\.Sizes\[2\] must equal 1, got 2",
    ),
    (_make(out=(1, 2, 3, 3)), r"MAX_POOLING: OutputTensor\.Sizes\[1\] must equal 1, got 2"),
    (_make(out=(1, 1, 3, 3, 1)), r"MAX_POOLING: OutputTensor\.DimensionCount must equal 4, got 5"),
    (
        _make(out_type="FLOAT16"),
        r"MAX_POOLING: OutputTensor\.DataType must equal FLOAT32, got FLOAT16",
    ),
    (
        _make(MAX1, indices=T("UINT32", [1, 1, 3, 2])),
        r"MAX_POOLING1: OutputIndicesTensor\.Sizes\[3\] must equal 3, got 2",
    ),
    (
        _make(MAX2, indices=T("UINT32", [1, 1, 9])),
        r"MAX_POOLING2: OutputIndicesTensor\.DimensionCount must equal 4, got 3",
    ),
    (
        _make(MAX1, indices=T("INT32", [1, 1, 3, 3])),
        r"MAX_POOLING1: OutputIndicesTensor with data type INT32 .* no feature level supports it",
    ),
    (_make(LP, p=0), r"^DML_OPERATOR_LP_POOLING: P must be >= 1, got 0"),
    (
        _make(AVG, type_name="INT32"),
        r"AVERAGE_POOLING: InputTensor with data type INT32 .* no feature level supports it",
    ),
    (
        lambda: MAX(
            T("FLOAT32", [1, 1, 4, 4]),
            T("FLOAT32", [1, 1, 3, 3]),
            [1, 1],
            [2, 2],
            [0, 0],
            [0, 0],
            dimension_count=3,
        ),
        r"MAX_POOLING: DimensionCount must equal the length of Strides \(2\), got 3",
    ),
    (_unpool(idx=(1, 1, 2, 3)), r"^DML_OPERATOR_MAX_UNPOOLING: IndicesTensor\.Sizes must equal"),
    (_unpool(out=(1, 16)), r"MAX_UNPOOLING: OutputTensor\.DimensionCount must equal InputTensor"),
    (_unpool(ot="FLOAT16"), r"MAX_UNPOOLING: OutputTensor\.DataType must equal InputTensor"),
    (
        _unpool(it="INT32"),
        r"MAX_UNPOOLING: IndicesTensor with data type INT32 .* no feature level supports it",
    ),
    (
        _unpool(x=(1, 1, 1, 2, 2), idx=(1, 1, 1, 2, 2), out=(1, 1, 1, 4, 4)),
        r"MAX_UNPOOLING: InputTensor with data type FLOAT32 and DimensionCount 5 .* no feature",
    ),
]


@pytest.mark.parametrize("factory, pattern", INVALID_ROWS)
def test_invalid_descriptions_are_rejected(factory, pattern):
    with pytest.raises(dml.ValidationError, match=pattern):
        dml.validate(factory())


@pytest.mark.parametrize(
    "factory, ok, too_low, lowest",
    [
        (_make(AVG1), "6_2", "6_1", "6_2"),
        (_make(LP1), "6_2", "6_1", "6_2"),
        (_make(MAX2), "2_1", "2_0", "2_1"),
        (_make(MAX1), "2_0", "1_0", "2_0"),
        (_unpool(), "2_0", "1_0", "2_0"),
    ],
)
def test_pooling_introduction_levels(factory, ok, too_low, lowest):
    dml.validate(factory(), feature_level=ok)
    with pytest.raises(dml.ValidationError, match=f"requires feature level {lowest} or later"):
        dml.validate(factory(), feature_level=too_low)


@pytest.mark.parametrize(
    "factory, level, lowest",
    [
        (_make(MAX, type_name="INT8"), "2_1", "3_0"),
        (_make(MAX2, type_name="INT32"), "4_1", "5_0"),
        (_make(MAX1, indices=T("UINT64", [1, 1, 3, 3])), "4_1", "5_0"),
        (_unpool(it="UINT64"), "4_1", "5_0"),
        (_unpool(t="UINT8"), "4_1", "5_0"),
    ],
)
def test_pooling_type_levels(factory, level, lowest):
    with pytest.raises(
        dml.ValidationError, match=f"the lowest feature level that supports it is {lowest}"
    ):
        dml.validate(factory(), feature_level=level)
    dml.validate(factory(), feature_level=lowest)


def test_overlapping_average_sums_each_window_row_first():
    """The slices' sum runs one window dimension at a time (docs/semantics.md): each window
    row left to right, then the row sums. With rows (1e8, 1) and (-1e8, 1) in float32 that is
    1e8 + -1e8 = 0, where a row-major sum over all points, ((1e8 + 1) + -1e8) + 1, gives 1."""
    x = dml.TensorDesc("FLOAT32", (1, 1, 2, 3))
    d = dml.AveragePoolingOperatorDesc(
        x, x.like(sizes=(1, 1, 1, 2)), strides=(1, 1), window_size=(2, 2),
        start_padding=(0, 0), end_padding=(0, 0), include_padding=True,
    )  # fmt: skip
    data = np.array([[[[1e8, 1, 0], [-1e8, 1, 0]]]], np.float32)
    out = np.asarray(dml.compile_operator(d, fast_paths=False).fn(data))
    assert out[0, 0, 0, 0] == 0.0
    assert out[0, 0, 0, 1] == np.float32(0.5)
