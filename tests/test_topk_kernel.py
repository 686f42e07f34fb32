"""The TOP_K kernel (dml_jax.kernels.topk) against the lax lowering: the indices (and so the
values gathered at them) must be equal, in Pallas interpret mode (any machine) and, on a CUDA
machine, through the operators' fast path. Inputs are full of ties, signed zeros, infinities and
NaNs (and the int32 extremes), where the order and tie rules matter."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dml_jax as dml
from dml_jax import fastpath
from dml_jax.kernels import topk as K
from dml_jax.ops.topk import top_k

pytestmark = pytest.mark.kernel_matrix


def _input(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "i":
        pool = [-(2**31), 2**31 - 1, 0, 1, -1]
    else:
        pool = [-2.0, -1.0, -0.0, 0.0, 1.0, 2.0, np.nan, np.inf, -np.inf, 0.5]
    return rng.choice(pool, size=shape).astype(dtype)


@pytest.mark.parametrize("largest", [True, False], ids=["largest", "smallest"])
@pytest.mark.parametrize(
    "shape, dtype, k",
    [((20, 37), np.float32, 8), ((5, 1000), np.float16, 3), ((9, 64), np.int32, 16)],
)
def test_kernel_interpret_matches_lax(shape, dtype, k, largest):
    v = K.plan(shape, len(shape) - 1, k, dtype, min_programs=1)
    assert v is not None
    x = jnp.asarray(_input(shape, dtype))
    got = K.top_k_indices(x, v, k, largest, interpret=True)
    _, want = top_k(x, len(shape) - 1, k, largest, jnp.int32)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


@pytest.mark.parametrize("pack", [True, False], ids=["packed", "two-reductions"])
@pytest.mark.parametrize("largest", [True, False], ids=["largest", "smallest"])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.int32])
def test_selection_forms_match_lax(monkeypatch, dtype, pack, largest):
    # Both selection forms (packed key and column, or two reductions) over every value class
    # (ties, signed zeros, infinities, NaN) and the extreme keys, on rows whose length is not a
    # power of two.
    monkeypatch.setattr(K, "PACK_16", pack)
    monkeypatch.setattr(K, "PACK_32", pack)
    shape, k = (6, 300), 9
    x = _input(shape, dtype, seed=3)
    if dtype != np.int32:
        info = np.finfo(dtype)
        x[0, :4] = [info.max, -info.max, info.smallest_subnormal, -info.smallest_subnormal]
    v = K.plan(shape, 1, k, dtype, min_programs=1)
    got = K.top_k_indices(jnp.asarray(x), v, k, largest, interpret=True)
    _, want = top_k(jnp.asarray(x), 1, k, largest, jnp.int32)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


@pytest.mark.parametrize("group", [None, 2, 16])
@pytest.mark.parametrize(
    "shape, dtype, k",
    [
        ((4, 9), np.float32, 8),
        ((3, 17), np.int32, 5),
        ((2, 33), np.float16, 16),
        ((5, 100), np.float32, 7),
    ],
)
def test_grouped_selection_matches_lax(monkeypatch, group, shape, dtype, k):
    # The grouped selection (K groups by their maxima, then K selections over their places) on
    # rows where fewer than K groups hold a column (all-padding groups are chosen too), rows
    # that do not fill their last group, and the type's least key (padding's key too); 32-bit
    # keys as int32 pairs (key, then group number or column).
    monkeypatch.setattr(K, "GROUP", group)
    v = K.plan(shape, 1, k, dtype, min_programs=1)
    x = jnp.asarray(_input(shape, dtype, seed=k))
    for largest in (True, False):
        got = K.top_k_indices(x, v, k, largest, interpret=True)
        _, want = top_k(x, 1, k, largest, jnp.int32)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


# Without CUDA: largest and smallest, no groups, narrow and wide groups.
@pytest.mark.kernel_matrix(cpu=["True-None-shape0-5", "False-2-shape3-5", "True-16-shape6-16"])
# Each form (pairs of words, or every element's key) with each group width and each row shape,
# not every combination (the interpreted kernel takes seconds a case on a CPU).
@pytest.mark.parametrize(
    "pairs, group, shape, k",
    [
        (True, None, (3, 40), 5),
        (False, None, (5, 102), 16),
        (True, 2, (5, 102), 16),
        (False, 2, (3, 40), 5),
        (True, 4, (4, 1024), 8),
        (False, 4, (3, 40), 5),
        (True, 16, (5, 102), 16),
        (False, 16, (4, 1024), 8),
    ],
)
def test_float16_group_extremes_from_words(monkeypatch, pairs, group, shape, k):
    # float16 groups' extremes from 32-bit words (PAIRS_16: pairwise extremes of the words, then
    # of a word's halves, NaN winning) against every element's key (the other form) and the lax
    # lowering: NaNs of both signs and payloads, signed zeros, infinities, ties, rows that do not
    # fill their last group or word.
    monkeypatch.setattr(K, "GROUP", group)
    monkeypatch.setattr(K, "PAIRS_16", pairs)
    x = _input(shape, np.float16, seed=k)
    bits = x.view(np.uint16)
    bits[:, ::7] = np.array([0xFE00, 0x7E01, 0xFC01, 0x8000], np.uint16)[
        np.arange(bits[:, ::7].shape[1]) % 4
    ]
    v = K.plan(shape, 1, k, np.float16, min_programs=1)
    assert K.group_width(v, k, 2, pairs=True) % 2 == 0
    for largest in (True, False):
        got = K.top_k_indices(jnp.asarray(x), v, k, largest, interpret=True)
        _, want = top_k(jnp.asarray(x), 1, k, largest, jnp.int32)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    # without NaNs the order of the numbers decides
    y = np.random.default_rng(k).standard_normal(shape).astype(np.float16)
    for largest in (True, False):
        got = K.top_k_indices(jnp.asarray(y), v, k, largest, interpret=True)
        _, want = top_k(jnp.asarray(y), 1, k, largest, jnp.int32)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_group_width():
    v = K.plan((8192, 1024), 1, 8, np.float32)
    assert (v.cols, v.warps) == (2, 1)  # two rows a warp for K > 1
    assert K.group_width(v, 1, 4) == 0  # a single selection needs no groups
    assert K.group_width(v, 8, 2) == 8  # the power of two at most sqrt(1024 / 8)
    assert K.group_width(v, 8, 4) == 4  # half that for 32-bit keys
    assert K.group_width(v, 16, 4) == 4
    assert K.group_width(K.plan((64, 9), 1, 9, np.float32, min_programs=1), 9, 2) == 0  # < K groups
    assert K.group_width(v, 8, 2, pairs=True) == 16  # float16 from words: PAIR_GROUP
    assert K.group_width(v, 16, 2, pairs=True) == 16
    narrow = K.plan((64, 100), 1, 16, np.float16, min_programs=1)  # 128 wide: 8 groups of 16
    assert K.group_width(narrow, 16, 2, pairs=True) == 8


def test_plan_declines_what_lax_keeps():
    assert K.plan((4096, 1024), 0, 8, np.float32) is None  # not the minor axis
    assert K.plan((4096, 1024), 1, 17, np.float32) is None  # K beyond MAX_K
    assert K.plan((4096, 8192), 1, 8, np.float32) is None  # row beyond MAX_ROW
    assert K.plan((4096, 1024), 1, 8, np.int8) is None  # type
    assert K.plan((16, 1024), 1, 8, np.float32) is None  # too few programs
    v = K.plan((8192, 1024), 1, 8, np.float32)
    assert v is not None and (v.a, v.r) == (8192, 1024)


@pytest.mark.skipif(not fastpath.cuda_present(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", ["TOP_K", "TOP_K1"])
@pytest.mark.parametrize(
    "shape, k",
    [((8192, 1024), 8), ((4096, 3, 100), 16), ((2048, 4096), 1), ((4096, 1022), 8),
     ((4096, 1000), 5)],
)  # fmt: skip
@pytest.mark.parametrize("values", ["specials", "normal"])
@pytest.mark.parametrize("type_name", ["FLOAT32", "FLOAT16", "INT32"])
def test_gpu_fast_path_matches_lax(name, shape, k, values, type_name):
    x_desc = dml.TensorDesc(type_name, shape)
    out = (*shape[:-1], k)
    values, index = x_desc.like(sizes=out), dml.TensorDesc("UINT32", out)
    if name == "TOP_K":
        desc = dml.TopKOperatorDesc(x_desc, values, index, axis=len(shape) - 1, k=k)
    else:
        desc = dml.TopK1OperatorDesc(
            x_desc, values, index, axis=len(shape) - 1, k=k, axis_direction="INCREASING"
        )
    assert fastpath.select(desc) is not None
    x = _input(shape, x_desc.dtype, seed=5)
    if values == "normal":  # few NaNs (both signs), so the numbers' order decides
        x = (np.random.default_rng(5).standard_normal(shape) * 100).astype(x_desc.dtype)
        if type_name == "FLOAT16":
            x.view(np.uint16).reshape(-1)[::997] = 0xFE00
            x.view(np.uint16).reshape(-1)[::1009] = 0x7E01
    got = jax.jit(dml.compile_operator(desc).fn)(x)
    want = jax.jit(dml.compile_operator(desc, fast_paths=False).fn)(x)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(
            np.asarray(g).view(np.uint8), np.asarray(w).view(np.uint8)
        )  # bits: -0.0 and NaN payloads too


@pytest.mark.parametrize(
    "shape, k, dtype",
    [((4096, 1000), 3, np.float16), ((4096, 1000), 5, np.float32), ((4096, 300), 9, np.int32)],
)
def test_kernel_lowers_for_cuda(shape, k, dtype):
    """The kernel as Triton compiles it (not interpreted), lowered for CUDA on any machine, for
    K that is no power of two: the grouped selection's arrays of K slots made Triton's lowering
    refuse it (its arrays are powers of two), which interpret mode never showed."""
    v = K.plan(shape, len(shape) - 1, k, dtype)
    assert v is not None
    lowered = (
        jax.jit(lambda x: K.top_k_indices(x, v, k, True))
        .trace(jax.ShapeDtypeStruct(shape, dtype))
        .lower(lowering_platforms=("cuda",))
    )
    assert "__gpu$xla.gpu.triton" in lowered.as_text()
