"""GEMM and CONVOLUTION: properties against tests/reference/matmul_conv.py over shapes, strides,
padding, dilation, groups, modes, directions, data types and fused activations; one rule row per
rule; jit / vmap / gradients; DirectML's float32 precision and the half-precision flag."""

from __future__ import annotations

import dataclasses
import itertools

import jax
import numpy as np
import pytest
import reference
import strategies as S
from hypothesis import assume, given
from hypothesis import strategies as st

import dml_jax as dml
from dml_jax import catalog, registry
from dml_jax.fused import fusable_names

T = dml.TensorDesc
FUSED = [None] + [
    dataclasses.replace(
        catalog.example_desc(registry.lookup(n)), input_tensor=None, output_tensor=None
    )
    for n in fusable_names()
]


def _tolerance(dtype) -> dict:
    return {"rtol": 2e-2, "atol": 2e-2} if dtype == np.float16 else {"rtol": 2e-5, "atol": 2e-5}


def _same_program(case) -> dict:
    if case.inputs[0].dtype == np.float16:
        return {"rtol": 2e-3, "atol": 2e-3}  # one float16 ulp
    return {"rtol": 1e-5, "atol": 1e-5}


# --- GEMM -----------------------------------------------------------------------------------


@st.composite
def gemm_cases(draw, type_name=None, fused=True):
    type_name = type_name or draw(st.sampled_from(["FLOAT32", "FLOAT16"]))
    rank = draw(st.integers(2, 4))
    lead = tuple(draw(st.integers(1, 3)) for _ in range(rank - 2))
    m, k, n = (draw(st.integers(1, 7)) for _ in range(3))
    trans_a, trans_b = draw(st.booleans()), draw(st.booleans())
    a = lead + ((k, m) if trans_a else (m, k))
    b = lead + ((n, k) if trans_b else (k, n))
    out = lead + (m, n)
    with_c = draw(st.booleans())
    desc = dml.GemmOperatorDesc(
        T(type_name, a),
        T(type_name, b),
        T(type_name, out) if with_c else None,
        T(type_name, out),
        trans_a="TRANSPOSE" if trans_a else "NONE",
        trans_b="TRANSPOSE" if trans_b else "NONE",
        alpha=draw(st.floats(-2, 2, width=32)),
        beta=draw(st.floats(-2, 2, width=32)),
        fused_activation=draw(st.sampled_from(FUSED)) if fused else None,
    )
    rng = draw(S.seeds())
    inputs = tuple(S.values(rng, type_name, t.sizes, "small") for _, t in desc.input_slots())
    return S.Case(desc, inputs)


@given(case=gemm_cases())
def test_gemm_matches_reference(case):
    got = S.run(case)
    want = reference.reference(case.desc, *case.inputs)
    S.assert_same(got, want, exact=False, **_tolerance(case.inputs[0].dtype))


@S.FEW
@given(case=gemm_cases(fused=False))
def test_gemm_jit_and_vmap(case):
    # The same sums, but a GPU may pick another accumulation order per program: last bits.
    tol = _same_program(case)
    S.check_jit(case, exact=False, **tol)
    S.check_vmap(case, exact=False, **tol)


@S.FEW
@given(case=gemm_cases("FLOAT32", fused=False))
def test_gemm_gradients(case):
    S.check_grads(case, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("form", ["zeros", "repeat"])
@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize("trans_b", ["NONE", "TRANSPOSE"])
def test_gemm_contracts_b_on_its_minor_axis_for_one_row_only(rows, trans_b, form, monkeypatch):
    """A constant B enters the product {N, K} (contracted on its minor axis) for one row of A,
    {K, N} otherwise, whatever TransB says (``lower_gemm``: the form XLA's CPU compiler folds
    into a constant B's layout); a B that is an argument enters one row's product as it comes
    (XLA's CPU compiler would transpose it at every call); on CUDA one row is computed as two
    (the second zeros, or the first repeated: ``ONE_ROW_FORM``); the values are the
    reference's every way."""
    from dml_jax.ops import gemm_conv

    monkeypatch.setattr(gemm_conv, "ONE_ROW_FORM", form)
    k, n = 5, 4
    b_sizes = (1, 1) + ((n, k) if trans_b == "TRANSPOSE" else (k, n))
    desc = dml.GemmOperatorDesc(
        T("FLOAT32", (1, 1, rows, k)), T("FLOAT32", b_sizes), None,
        T("FLOAT32", (1, 1, rows, n)), trans_b=trans_b,
    )  # fmt: skip
    from dml_jax import fastpath

    rng = np.random.default_rng(rows)
    a, b = (rng.standard_normal(t.sizes).astype(np.float32) for _, t in desc.input_slots())
    op = dml.compile_operator(desc)
    want = reference.reference(desc, a, b)
    S.assert_same(op(a, b), want, exact=False, rtol=1e-5, atol=1e-5)
    from dml_jax.ops.gemm_conv import lower_gemm

    for platform, constant in itertools.product(("cpu", "cuda"), (True, False)):
        # The lowering itself, traced afresh for each target (a compiled operator's traces
        # are cached by shapes alone); B an argument, or a constant of the trace.
        def fn(a, b):
            return lower_gemm(desc, a, b)[0]

        args = (a,) if constant else (a, b)
        traced = (lambda a: fn(a, b)) if constant else fn
        with fastpath.target_platform(platform):
            eqns = jax.make_jaxpr(traced)(*args).eqns
            # The CUDA form is lax too: it runs here, against the same reference.
            S.assert_same(jax.jit(traced)(*args), want, exact=False, rtol=1e-5, atol=1e-5)
        (dot,) = [e for e in eqns if e.primitive.name == "dot_general"]
        (_, (contracted,)), _ = dot.params["dimension_numbers"]
        lhs, rhs = dot.invars[0].aval.shape, dot.invars[1].aval.shape
        # On CUDA a product of one row is computed on two (_one_row_as_two), and so takes the
        # form of products of several rows.
        one = rows == 1 and platform == "cpu"
        assert lhs[2] == (2 if rows == 1 and platform == "cuda" else rows)
        if one and not constant:  # as it comes
            assert rhs[2:] == b_sizes[2:] and contracted == (3 if trans_b == "TRANSPOSE" else 2)
        else:
            assert rhs[2:] == ((n, k) if one else (k, n))
            assert contracted == (3 if one else 2)


# --- CONVOLUTION ----------------------------------------------------------------------------


@st.composite
def conv_cases(draw, type_name=None, fused=True, direction=None):
    type_name = type_name or draw(st.sampled_from(["FLOAT32", "FLOAT16"]))
    dims = draw(st.integers(1, 3))
    groups = draw(st.integers(1, 2))
    c, k_per = groups * draw(st.integers(1, 2)), draw(st.integers(1, 2))
    kernel = tuple(draw(st.integers(1, 3)) for _ in range(dims))
    strides = tuple(draw(st.integers(1, 2)) for _ in range(dims))
    dilations = tuple(draw(st.integers(1, 2)) for _ in range(dims))
    start = tuple(draw(st.integers(0, 2)) for _ in range(dims))
    end = tuple(draw(st.integers(0, 2)) for _ in range(dims))
    size = tuple(draw(st.integers(1, 6)) for _ in range(dims))
    direction = direction or draw(st.sampled_from(["FORWARD", "BACKWARD"]))
    backward = direction == "BACKWARD"
    out_pad = tuple(
        draw(st.integers(0, max(s, d) - 1)) if backward else 0 for s, d in zip(strides, dilations)
    )
    n = draw(st.integers(1, 2))
    filt = (c, k_per) + kernel if backward else (groups * k_per, c // groups) + kernel
    x = T(type_name, (n, c) + size)
    desc = dml.ConvolutionOperatorDesc(
        x,
        T(type_name, filt),
        None,
        x,  # replaced below by the inferred output
        mode=draw(st.sampled_from(["CONVOLUTION", "CROSS_CORRELATION"])),
        direction=direction,
        dimension_count=dims,
        strides=strides,
        dilations=dilations,
        start_padding=start,
        end_padding=end,
        output_padding=out_pad,
        group_count=groups,
        fused_activation=draw(st.sampled_from(FUSED)) if fused else None,
    )
    sizes = dml.ops.gemm_conv.conv_output_sizes(desc)
    assume(all(s >= 1 for s in sizes))
    out = T(type_name, sizes)
    bias = T(type_name, (1, sizes[1]) + (1,) * dims) if draw(st.booleans()) else None
    desc = dataclasses.replace(desc, output_tensor=out, bias_tensor=bias)
    rng = draw(S.seeds())
    inputs = tuple(S.values(rng, type_name, t.sizes, "small") for _, t in desc.input_slots())
    return S.Case(desc, inputs)


@given(case=conv_cases())
def test_convolution_matches_reference(case):
    got = S.run(case)
    want = reference.reference(case.desc, *case.inputs)
    S.assert_same(got, want, exact=False, **_tolerance(case.inputs[0].dtype))


@S.FEW
@given(case=conv_cases(fused=False))
def test_convolution_jit_and_vmap(case):
    tol = _same_program(case)
    S.check_jit(case, exact=False, **tol)
    S.check_vmap(case, exact=False, **tol)


@S.FEW
@pytest.mark.parametrize("direction", ["FORWARD", "BACKWARD"])
@given(data=st.data())
def test_convolution_gradients(direction, data):
    case = data.draw(conv_cases("FLOAT32", fused=False, direction=direction))
    S.check_grads(case, atol=2e-2, rtol=2e-2)


# Grouped convolutions have their own lowerings: depthwise ones as slices times taps (dilated
# windows "taps" everywhere, channels last on the CPU; undilated ones on the CPU: "taps or
# conv"), 1x1 ones as a batched
# product ("product"), the others split per group on the CPU ("split"); ungrouped ones of at
# most 3 input channels and 25 taps (49 on CPUs of few cores) are a product of gathered windows
# on the CPU ("patches"), large ungrouped 3x3 stride-1 ones Winograd's F(2x2, 3x3) there
# ("winograd"), and ungrouped undilated windows that tile the input (strides equal to the
# window) one product everywhere ("patch product"). Each row one of their cases against the
# reference: (input, filter, direction, strides, dilations, start, end, output padding, groups,
# mode, type, bias, lowering).
_GROUPED = [
    ((1, 4, 7, 7), (4, 1, 3, 3), "FORWARD", (1, 1), (1, 1), (1, 1), (1, 1), (0, 0), 4,
     "CROSS_CORRELATION", "FLOAT32", True, "taps or conv"),  # undilated: by platform
    ((2, 3, 9, 8), (6, 1, 3, 2), "FORWARD", (2, 1), (2, 3), (0, 2), (1, 0), (0, 0), 3,
     "CONVOLUTION", "FLOAT32", False, "taps"),
    ((1, 4, 11), (4, 1, 5), "FORWARD", (3,), (1,), (2,), (1,), (0,), 4,
     "CROSS_CORRELATION", "FLOAT16", True, "taps or conv"),
    ((1, 2, 4, 5, 6), (2, 1, 3, 3, 3), "FORWARD", (1, 2, 1), (1, 1, 2), (1, 1, 0), (1, 0, 2),
     (0, 0, 0), 2, "CROSS_CORRELATION", "FLOAT32", True, "taps"),  # dilated: taps everywhere
    ((1, 3, 4, 5), (3, 2, 3, 3), "BACKWARD", (2, 2), (1, 1), (1, 0), (0, 1), (1, 0), 3,
     "CROSS_CORRELATION", "FLOAT32", True, "taps or conv"),
    ((1, 2, 6), (2, 1, 2), "BACKWARD", (1,), (2,), (3,), (0,), (1,), 2,
     "CONVOLUTION", "FLOAT16", False, "taps"),  # start padding beyond the window: cropped
    ((1, 2, 70), (2, 1, 65), "FORWARD", (1,), (1,), (1,), (0,), (0,), 2,
     "CROSS_CORRELATION", "FLOAT32", False, "conv"),  # over MAX_DEPTHWISE_TAPS: one convolution
    ((1, 8, 5, 6), (12, 2, 1, 1), "FORWARD", (1, 1), (1, 1), (0, 0), (0, 0), (0, 0), 4,
     "CROSS_CORRELATION", "FLOAT32", True, "product"),
    ((2, 4, 2, 3, 3), (6, 2, 1, 1, 1), "FORWARD", (1, 1, 1), (1, 1, 1), (0, 0, 0), (0, 0, 0),
     (0, 0, 0), 2, "CONVOLUTION", "FLOAT16", False, "product"),
    ((1, 4, 6, 6), (4, 2, 1, 1), "FORWARD", (2, 2), (1, 1), (0, 0), (0, 0), (0, 0), 2,
     "CROSS_CORRELATION", "FLOAT32", False, "split"),  # strided 1x1: a convolution per group
    ((1, 4, 6, 5), (6, 2, 3, 3), "FORWARD", (2, 1), (1, 2), (1, 2), (0, 1), (0, 0), 2,
     "CONVOLUTION", "FLOAT32", True, "split"),
    ((2, 6, 7), (6, 2, 3), "FORWARD", (1,), (1,), (1,), (1,), (0,), 3,
     "CROSS_CORRELATION", "FLOAT16", False, "split"),
    ((1, 4, 3, 4), (4, 3, 2, 2), "BACKWARD", (2, 1), (1, 1), (0, 1), (1, 0), (1, 0), 2,
     "CROSS_CORRELATION", "FLOAT32", True, "split"),
    ((1, 3, 9, 8), (5, 3, 3, 3), "FORWARD", (2, 2), (1, 1), (1, 1), (1, 0), (0, 0), 1,
     "CROSS_CORRELATION", "FLOAT32", True, "patches"),
    ((2, 1, 10), (3, 1, 4), "FORWARD", (3,), (2,), (0,), (2,), (0,), 1,
     "CONVOLUTION", "FLOAT16", True, "patches"),
    ((2, 2, 3, 4, 5), (2, 2, 2, 2, 3), "FORWARD", (1, 2, 1), (1, 1, 2), (1, 0, 1), (0, 1, 0),
     (0, 0, 0), 1, "CROSS_CORRELATION", "FLOAT32", False, "patches"),
    ((1, 3, 3, 4), (3, 2, 3, 2), "BACKWARD", (2, 2), (1, 2), (1, 0), (0, 1), (1, 1), 1,
     "CONVOLUTION", "FLOAT32", True, "patches"),
    ((1, 3, 9, 9), (4, 3, 7, 7), "FORWARD", (2, 2), (1, 1), (3, 3), (3, 3), (0, 0), 1,
     "CROSS_CORRELATION", "FLOAT32", False, "patches on few cores"),  # 49 taps
    ((1, 3, 12, 12), (4, 3, 8, 8), "FORWARD", (2, 2), (1, 1), (2, 2), (2, 2), (0, 0), 1,
     "CROSS_CORRELATION", "FLOAT32", False, "conv"),  # 64 taps: one convolution
    ((1, 4, 6, 6), (4, 4, 3, 3), "FORWARD", (1, 1), (1, 1), (1, 1), (1, 1), (0, 0), 1,
     "CROSS_CORRELATION", "FLOAT32", False, "conv"),  # 4 channels: one convolution
    ((2, 256, 12, 12), (256, 256, 3, 3), "FORWARD", (1, 1), (1, 1), (1, 1), (1, 1), (0, 0), 1,
     "CROSS_CORRELATION", "FLOAT32", True, "winograd"),
    ((1, 256, 13, 15), (512, 256, 3, 3), "FORWARD", (1, 1), (1, 1), (0, 1), (2, 0), (0, 0), 1,
     "CONVOLUTION", "FLOAT32", False, "winograd"),  # odd outputs: the last blocks cropped
    ((1, 256, 24, 24), (256, 256, 3, 3), "FORWARD", (1, 1), (1, 1), (1, 1), (1, 1), (0, 0), 1,
     "CROSS_CORRELATION", "FLOAT16", True, "winograd"),
    ((1, 256, 14, 14), (256, 256, 3, 3), "FORWARD", (1, 1), (1, 1), (1, 1), (1, 1), (0, 0), 1,
     "CROSS_CORRELATION", "FLOAT32", False, "conv"),  # too little work per product for Winograd
    ((2, 5, 9, 8), (6, 5, 2, 2), "FORWARD", (2, 2), (1, 1), (0, 1), (1, 0), (0, 0), 1,
     "CONVOLUTION", "FLOAT32", True, "patch product"),  # windows tile the padded input
    ((1, 3, 11, 8), (4, 3, 4, 4), "FORWARD", (4, 4), (1, 1), (0, 0), (0, 0), (0, 0), 1,
     "CROSS_CORRELATION", "FLOAT16", True, "patch product"),  # a stem: rows past 8 dropped
    ((2, 4, 11), (3, 4, 4), "FORWARD", (4,), (1,), (1,), (0,), (0,), 1,
     "CROSS_CORRELATION", "FLOAT16", False, "patch product"),
    ((1, 2, 4, 6, 4), (3, 2, 2, 3, 1), "FORWARD", (2, 3, 1), (1, 1, 1), (0, 0, 0), (0, 0, 0),
     (0, 0, 0), 1, "CROSS_CORRELATION", "FLOAT32", True, "patch product"),
    ((1, 4, 8, 8), (4, 2, 2, 2), "FORWARD", (2, 2), (1, 1), (0, 0), (0, 0), (0, 0), 2,
     "CROSS_CORRELATION", "FLOAT32", False, "split"),  # grouped: not a patch product
    ((1, 4, 8, 8), (4, 4, 2, 2), "FORWARD", (2, 2), (2, 2), (0, 0), (0, 0), (0, 0), 1,
     "CROSS_CORRELATION", "FLOAT32", False, "conv"),  # dilated: windows do not tile
]  # fmt: skip


@pytest.mark.parametrize("row", _GROUPED, ids=range(len(_GROUPED)))
def test_convolution_grouped_lowerings(row):
    x, w, direction, strides, dilations, start, end, out_pad, g, mode, type_name, bias, path = row
    if path == "patches on few cores":
        few = dml.ops.conv_forms._cpu_cores() <= dml.ops.conv_forms._PATCH_FEW_CORES
        path = "patches" if few else "conv"
    desc = dml.ConvolutionOperatorDesc(
        T(type_name, x), T(type_name, w), None, T(type_name, x), mode=mode,
        direction=direction, strides=strides, dilations=dilations, start_padding=start,
        end_padding=end, output_padding=out_pad, group_count=g,
    )  # fmt: skip
    sizes = dml.ops.gemm_conv.conv_output_sizes(desc)
    b = T(type_name, (1, sizes[1]) + (1,) * (len(x) - 2)) if bias else None
    desc = dataclasses.replace(desc, output_tensor=T(type_name, sizes), bias_tensor=b)
    rng = np.random.default_rng(len(sizes) + sum(x))
    case = S.Case(
        desc, tuple(S.values(rng, type_name, t.sizes, "small") for _, t in desc.input_slots())
    )
    want = reference.reference(desc, *case.inputs)
    tolerance = _tolerance(case.inputs[0].dtype)
    if case.inputs[0].dtype == np.float32:
        # Sums of 2304 products reach 1e3 in the 256-channel rows: float32 rounding there is
        # ~1e-4 (XLA's convolution and Winograd's alike, ~6e-7 of the largest output).
        tolerance["atol"] = max(tolerance["atol"], 2e-6 * float(np.abs(want[0]).max()))
    S.assert_same(S.run(case), want, False, **tolerance)
    # The lowering taken: a convolution only where the row says so, chosen by platform for
    # "split", "patches", "winograd" and an undilated depthwise window ("taps or conv").
    fn = dml.compile_operator(desc).fn
    jaxpr = str(jax.make_jaxpr(fn)(*case.inputs))
    by_platform = ("split", "patches", "taps or conv", "winograd")
    assert ("conv_general_dilated" in jaxpr) == (path in ("conv",) + by_platform)
    # taps are by platform too: channels last on the CPU
    assert ("platform_index" in jaxpr) == (path in by_platform + ("taps",))
    if jax.default_backend() == "cpu" and path in ("winograd", "conv"):
        # On the CPU the Winograd rows compile to no convolution at all, the others to one.
        compiled = jax.jit(fn).lower(*case.inputs).compile().as_text()
        assert ("convolution(" in compiled) == (path == "conv")


def test_seven_by_seven_first_layers_take_the_product_on_few_cores_only(monkeypatch):
    """A 3-channel 7x7 window is a product of gathered windows on CPUs of at most
    ``_PATCH_FEW_CORES`` cores and a convolution on larger ones (where XLA's convolution spreads
    over the cores); 3x3 and 5x5 windows are products on both; 4 channels never."""
    import os

    from dml_jax.ops import conv_forms as GC

    assert 1 <= GC._cpu_cores() <= (os.cpu_count() or 1)  # this process's cores
    x3, x4 = np.zeros((1, 3, 32, 32)), np.zeros((1, 4, 32, 32))
    taken = {}
    for cores in (2, 16):
        monkeypatch.setattr(GC, "_cpu_cores", lambda cores=cores: cores)
        taken[cores] = [GC._few_channels(x, np.zeros((8, x.shape[1], k, k)), 1)
                        for x, k in ((x3, 7), (x3, 5), (x3, 3), (x4, 3))]  # fmt: skip
    assert taken == {2: [True, True, True, False], 16: [False, True, True, False]}


# --- precision ------------------------------------------------------------------------------


def _gemm(k: int, half: bool = False):
    a, b = T("FLOAT32", (1, 1, 16, k)), T("FLOAT32", (1, 1, k, 16))
    desc = dml.GemmOperatorDesc(a, b, None, T("FLOAT32", (1, 1, 16, 16)))
    return dml.compile_operator(desc, allow_half_precision=half)


def test_float32_gemm_is_float32_accurate_without_the_flag():
    """Float32 products and sums (DirectML's rule): the error against a float64 reference is of
    float32 rounding (TF32's 10-bit mantissa would give ~1e-3)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1, 1, 16, 4096)).astype(np.float32)
    b = rng.standard_normal((1, 1, 4096, 16)).astype(np.float32)
    y = np.asarray(_gemm(4096)(a, b))
    exact = a.astype(np.float64) @ b.astype(np.float64)
    scale = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    assert np.max(np.abs(y - exact) / scale) < 1e-6


def test_half_precision_flag_reaches_the_program():
    """Without the flag every product asks for HIGHEST; with it, DEFAULT (TF32 on GPUs)."""
    a = np.ones((1, 1, 16, 8), np.float32)
    b = np.ones((1, 1, 8, 16), np.float32)
    strict = str(jax.make_jaxpr(_gemm(8).fn)(a, b))
    half = str(jax.make_jaxpr(_gemm(8, half=True).fn)(a, b))
    assert "Precision.HIGHEST" in strict and "Precision.HIGHEST" not in half


@pytest.mark.parametrize("rows", [1, 2])
def test_float16_accumulates_in_float32(rows):
    """4096 products of 1 + 2^-10 (rounded in float16 each step they would stall), one row of
    A and two, traced at HIGHEST."""
    k = 4096
    a, b = T("FLOAT16", (1, 1, rows, k)), T("FLOAT16", (1, 1, k, 1))
    op = dml.compile_operator(dml.GemmOperatorDesc(a, b, None, T("FLOAT16", (1, 1, rows, 1))))
    x = np.full((1, 1, rows, k), 1 + 2**-10, np.float16)
    ones = np.ones((1, 1, k, 1), np.float16)
    y = np.asarray(op(x, ones)).ravel()
    assert (y == np.float16(k * (1 + 2**-10))).all(), y
    jaxpr = str(jax.make_jaxpr(lambda *v: op.fn(*v))(x, ones))
    assert "Precision.HIGHEST" in jaxpr


@pytest.mark.parametrize("kernel, products", [(3, True), (1, True), (1, False)])
def test_float16_convolution_accumulates_in_float32(kernel, products, monkeypatch):
    """A convolution's 4,608 products of 1 + 2^-10 in one sum (512 channels by a 3 x 3 window,
    or 4,608 channels by 1 x 1: XLA's convolution, or a matrix product where
    ``GPU_POINTWISE_PRODUCTS`` holds or on the CPU), traced at HIGHEST: float32's sum rounded
    once, where float16 steps would stall at 2,048."""
    from dml_jax.ops import conv_forms

    monkeypatch.setattr(conv_forms, "GPU_POINTWISE_PRODUCTS", products)
    c = 4608 // (kernel * kernel)
    shapes = ((1, c, kernel, kernel), (1, c, kernel, kernel), (1, 1, 1, 1))
    for t, np_t in (("FLOAT16", np.float16), ("FLOAT32", np.float32)):
        op = dml.compile_operator(_c(*shapes, type_name=t)())
        x = np.full(shapes[0], 1 + 2**-10, np_t)
        w = np.ones(shapes[1], np_t)
        y = float(np.asarray(op(x, w)).ravel()[0])
        assert y == float(np_t(np.float64(4608) * (1 + 2**-10))), (t, y)
        jaxpr = str(jax.make_jaxpr(lambda *v, op=op: op.fn(*v))(x, w))
        assert "Precision.HIGHEST" in jaxpr, t


# --- rules ----------------------------------------------------------------------------------


def _g(a=(1, 1, 2, 3), b=(1, 1, 3, 4), c=None, out=(1, 1, 2, 4), type_name="FLOAT32", **kw):
    return lambda: dml.GemmOperatorDesc(
        T(type_name, a), T(type_name, b), None if c is None else T(type_name, c),
        T(type_name, out), **kw,
    )  # fmt: skip


def _c(x=(1, 1, 4, 4), w=(2, 1, 3, 3), out=(1, 2, 2, 2), bias=None, type_name="FLOAT32", **kw):
    fields = {
        "strides": (1, 1), "dilations": (1, 1), "start_padding": (0, 0),
        "end_padding": (0, 0), "output_padding": (0, 0), "group_count": 1,
    }  # fmt: skip
    fields.update(kw)
    return lambda: dml.ConvolutionOperatorDesc(
        T(type_name, x), T(type_name, w), None if bias is None else T(type_name, bias),
        T(type_name, out), **fields,
    )  # fmt: skip


G, C = "^DML_OPERATOR_GEMM: ", "^DML_OPERATOR_CONVOLUTION: "
INVALID_ROWS = [
    (
        lambda: dml.GemmOperatorDesc(
            T("FLOAT32", (1, 1, 2, 3)), T("FLOAT16", (1, 1, 3, 4)), None, T("FLOAT32", (1, 1, 2, 4))
        ),
        G + r"BTensor\.DataType must equal ATensor\.DataType",
    ),
    (_g(b=(1, 3, 4), out=(1, 2, 4)), G + r"BTensor\.DimensionCount must equal ATensor"),
    (_g(b=(1, 2, 3, 4), out=(1, 1, 2, 4)), G + r"BTensor\.Sizes must equal ATensor\.Sizes"),
    (_g(b=(1, 1, 5, 4)), G + r"BTensor\.Sizes must have K = 3 .*got 5 with TransB NONE"),
    (_g(b=(1, 1, 4, 3), trans_b="NONE"), G + r"BTensor\.Sizes must have K = 3"),
    (_g(c=(1, 1, 1, 4)), G + r"CTensor\.Sizes must equal the output's sizes \[1, 1, 2, 4\]"),
    (_g(out=(1, 1, 2, 5)), G + r"OutputTensor\.Sizes"),
    (_g(a=(1, 2, 3), b=(3, 4), out=(2, 4)), G + r"BTensor\.DimensionCount must equal"),
    (_g(type_name="INT32"), G + r"ATensor with data type INT32"),
    (
        _g(a=(1, 1, 1, 2, 3), b=(1, 1, 1, 3, 4), out=(1, 1, 1, 2, 4)),
        G + r"ATensor with data type FLOAT32 and DimensionCount 5 is not supported",
    ),
    (_g(a=(3,), b=(3,), out=(1,)), G + r"ATensor\.DimensionCount must be at least 2"),
    (
        _g(fused_activation=dml.ActivationGeluOperatorDesc()),
        G + r"FusedActivation must be an activation DirectML can fuse",
    ),
    (
        _c(
            x=(1, 1, 4, 4, 4, 4, 4),
            w=(2, 1, 3, 3, 3, 3, 3),
            out=(1, 2, 2, 2, 2, 2, 2),
            strides=(1,) * 5,
            dilations=(1,) * 5,
            start_padding=(0,) * 5,
            end_padding=(0,) * 5,
            output_padding=(0,) * 5,
        ),
        C + r"DimensionCount must be 1, 2 or 3, got 5",
    ),
    (_c(dimension_count=3), C + r"DimensionCount must equal the length of Strides"),
    (_c(x=(1, 1, 4, 4, 4), w=(2, 1, 3, 3, 3)), C + r"InputTensor\.DimensionCount must be"),
    (_c(dilations=(1,)), C + r"Dilations must hold DimensionCount \(2\) values, got 1"),
    (_c(strides=(0, 1)), C + r"Strides\[0\] must be >= 1, got 0"),
    (_c(dilations=(1, 0)), C + r"Dilations\[1\] must be >= 1, got 0"),
    (_c(output_padding=(1, 0)), C + r"OutputPadding\[0\] must be 0 for FORWARD"),
    (
        _c(
            x=(1, 2, 2, 2),
            w=(2, 1, 3, 3),
            out=(1, 1, 4, 4),
            direction="BACKWARD",
            output_padding=(1, 0),
        ),
        C + r"OutputPadding\[0\] must be < max\(Strides\[0\], Dilations\[0\]\) = 1, got 1",
    ),
    (_c(group_count=0), C + r"GroupCount must be >= 1, got 0"),
    (_c(x=(1, 3, 4, 4), group_count=2), C + r"InputTensor\.Sizes\[1\] \(channels 3\) must divide"),
    (
        _c(x=(1, 2, 4, 4)),
        C + r"FilterTensor\.Sizes\[1\] times GroupCount must equal InputTensor\.Sizes\[1\] = 2",
    ),
    (
        _c(x=(1, 2, 4, 4), w=(3, 1, 3, 3), out=(1, 3, 2, 2), group_count=2),
        C + r"FilterTensor\.Sizes\[0\] \(output channels 3\) must divide by GroupCount 2",
    ),
    (
        _c(x=(1, 2, 2, 2), w=(3, 1, 3, 3), out=(1, 1, 4, 4), direction="BACKWARD"),
        C + r"FilterTensor\.Sizes\[0\] must equal InputTensor\.Sizes\[1\]",
    ),
    (_c(x=(1, 1, 2, 2)), C + r"OutputTensor\.Sizes would be \[1, 2, 0, 0\]"),
    (_c(bias=(1, 3, 1, 1)), C + r"BiasTensor\.Sizes must equal"),
    (_c(out=(1, 2, 3, 3)), C + r"OutputTensor\.Sizes"),
    (_c(type_name="INT8"), C + r"InputTensor with data type INT8"),
    (
        _c(fused_activation=dml.ActivationSoftmaxOperatorDesc()),
        C + r"FusedActivation must be an activation DirectML can fuse",
    ),
]


@pytest.mark.parametrize("factory, pattern", INVALID_ROWS)
def test_gemm_conv_rules(factory, pattern):
    with pytest.raises(dml.ValidationError, match=pattern):
        dml.validate(factory())


@pytest.mark.parametrize(
    "act", [dml.ActivationSoftmaxOperatorDesc(), dml.ActivationSoftmax1OperatorDesc(axes=[2])]
)
def test_gemm_fuses_softmax_from_6_1(act):
    """DirectML's feature level history: GEMM's FusedActivation takes SOFTMAX and SOFTMAX1 from
    feature level 6_1 (no other operator does)."""
    rng = np.random.default_rng(2)
    a = rng.standard_normal((1, 1, 3, 4)).astype(np.float32)  # SOFTMAX: effective rank <= 2
    b = rng.standard_normal((1, 1, 4, 5)).astype(np.float32)
    desc = dml.GemmOperatorDesc(
        T("FLOAT32", a.shape), T("FLOAT32", b.shape), None, T("FLOAT32", (1, 1, 3, 5)),
        fused_activation=act,
    )  # fmt: skip
    y = np.asarray(dml.compile_operator(desc)(a, b))
    z = a.astype(np.float64) @ b.astype(np.float64)
    axis = -1 if act.operator_type.endswith("SOFTMAX") else 2  # SOFTMAX1 over M here
    want = np.exp(z - z.max(axis, keepdims=True))
    want /= want.sum(axis, keepdims=True)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
    with pytest.raises(dml.ValidationError, match=r"needs feature level 6_1 or later here"):
        dml.validate(desc, "6_0")
    add1 = dml.ElementWiseAdd1OperatorDesc(
        T("FLOAT32", (3,)), T("FLOAT32", (3,)), T("FLOAT32", (3,)), fused_activation=act
    )
    with pytest.raises(dml.ValidationError, match=r"must be an activation DirectML can fuse"):
        dml.validate(add1)


def test_half_precision_flag_reaches_graphs_and_models(tmp_path):
    """``compile_graph(..., allow_half_precision=True)`` and a DxDispatch dispatchable's
    ``executionFlags`` carry the flag into the program; without them products stay HIGHEST."""
    import json

    from dml_jax.dxdispatch import load_model

    t = T("FLOAT32", (1, 1, 4, 4))
    gemm = dml.GemmOperatorDesc(t, t, None, t)
    graph = dml.GraphDesc(
        2, 1, [gemm],
        input_edges=[dml.InputGraphEdge(0, 0, 0), dml.InputGraphEdge(1, 0, 1)],
        output_edges=[dml.OutputGraphEdge(0, 0, 0)],
    )  # fmt: skip
    x = np.ones((1, 1, 4, 4), np.float32)
    for half, expect in ((False, True), (True, False)):
        g = dml.compile_graph(graph, allow_half_precision=half)
        assert ("Precision.HIGHEST" in str(jax.make_jaxpr(g.fn)(x, x))) is expect
    model = {
        "resources": {"A": {"initialValuesDataType": "FLOAT32", "initialValues": [1.0] * 16}},
        "dispatchables": {
            "gemm": {
                "type": "DML_OPERATOR_GEMM",
                "desc": json.loads(json.dumps(dml.operator_desc_to_json(gemm)["desc"])),
                "executionFlags": "ALLOW_HALF_PRECISION_COMPUTATION",
            }
        },
        "commands": [],
    }
    path = tmp_path / "m.json"
    path.write_text(json.dumps(model))
    op = load_model(str(path)).dispatchables["gemm"].op
    assert "Precision.HIGHEST" not in str(jax.make_jaxpr(op.fn)(x, x))


def test_winograd_with_a_constant_filter_equals_the_traced_one():
    """A filter known when the program is traced (a model's weights compiled in) is transformed
    by NumPy, once, on the CPU; the result is the traced filter's (the same transform)."""
    x_desc, w_desc = T("FLOAT32", (2, 256, 12, 12)), T("FLOAT32", (256, 256, 3, 3))
    desc = dml.ConvolutionOperatorDesc(
        x_desc, w_desc, None, T("FLOAT32", (2, 256, 12, 12)), start_padding=(1, 1),
        end_padding=(1, 1), strides=(1, 1), dilations=(1, 1), output_padding=(0, 0),
    )  # fmt: skip
    rng = np.random.default_rng(7)
    x = rng.standard_normal(x_desc.sizes).astype(np.float32)
    w = (rng.standard_normal(w_desc.sizes) / 48).astype(np.float32)
    fn = dml.compile_operator(desc).fn
    traced = np.asarray(jax.jit(fn)(x, w))
    constant = jax.jit(lambda x: fn(x, w))
    np.testing.assert_allclose(np.asarray(constant(x)), traced, rtol=0, atol=1e-5)
    (want,) = reference.reference(desc, x, w)
    np.testing.assert_allclose(traced, want, rtol=0, atol=2e-6 * np.abs(want).max())
    if jax.default_backend() == "cpu":
        assert "convolution(" not in constant.lower(x).compile().as_text()


def _agrees_on_platform(desc, target: str, type_name: str, seed: int) -> str:
    """Runs ``desc`` traced as ``target``'s program on this machine's device, against the
    reference; returns that trace's jaxpr (the form it took)."""
    from dml_jax import fastpath

    rng = np.random.default_rng(seed)
    inputs = tuple(S.values(rng, type_name, t.sizes, "small") for _, t in desc.input_slots())
    want = reference.reference(desc, *inputs)
    op = dml.compile_operator(desc)
    with fastpath.target_platform(target):  # fresh functions: jit caches traces by function
        got = jax.jit(lambda *a: op.fn(*a))(*inputs)
        jaxpr = str(jax.make_jaxpr(lambda *a: op.fn(*a))(*inputs))
    S.assert_same(got, want, False, **_tolerance(inputs[0].dtype))
    return jaxpr


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_dilated_depthwise_taps_in_either_layout(target):
    """A dilated depthwise convolution runs as taps on every platform: channels last on the CPU
    (XLA cancels the transposes against channels-last neighbours), channels second elsewhere;
    each traced here as that platform's program, against the reference."""

    x, w = (2, 6, 9, 8), (12, 1, 3, 2)  # two filters a channel
    desc = dml.ConvolutionOperatorDesc(
        T("FLOAT32", x), T("FLOAT32", w), None, T("FLOAT32", x), mode="CROSS_CORRELATION",
        direction="FORWARD", strides=(1, 2), dilations=(2, 1), start_padding=(1, 0),
        end_padding=(2, 1), output_padding=(0, 0), group_count=6,
    )  # fmt: skip
    desc = dataclasses.replace(
        desc, output_tensor=T("FLOAT32", dml.ops.gemm_conv.conv_output_sizes(desc))
    )
    jaxpr = _agrees_on_platform(desc, target, "FLOAT32", seed=3)
    assert "conv_general_dilated" not in jaxpr
    assert ("transpose" in jaxpr) == (target == "cpu")


@pytest.mark.parametrize("products", [True, False])
@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_pointwise_convolution_form_by_platform(target, products, monkeypatch):
    """A 1x1 convolution is a matrix product on the CPU always, and elsewhere while
    ``GPU_POINTWISE_PRODUCTS`` holds (else XLA's convolution there); each traced as that
    platform's program, against the reference."""
    from dml_jax.ops import conv_forms

    monkeypatch.setattr(conv_forms, "GPU_POINTWISE_PRODUCTS", products)
    desc = _c(x=(2, 6, 5, 4), w=(3, 6, 1, 1), out=(2, 3, 5, 4), type_name="FLOAT16")()
    jaxpr = _agrees_on_platform(desc, target, "FLOAT16", seed=5)
    convolution = target == "cuda" and not products
    assert ("conv_general_dilated" in jaxpr) == convolution
    assert ("dot_general" in jaxpr) == (not convolution)
