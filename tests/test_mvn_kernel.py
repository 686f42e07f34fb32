"""The single-pass MVN kernel (dml_jax.kernels.mvn) against the lax lowering.

In Pallas interpret mode (any machine): rows in one tile, rows kept in part in registers (or
whole) and rows taken by two loops (the last tile and the last group of rows partial), every
statistics form of MVN, MVN1 and MVN2, Scale and Bias per row and along the row, fused RELU and
LEAKY_RELU, a NaN row and float16; on a CUDA machine also the compiled Triton kernel through the
operator's fast path. The stated tolerance: float32 within 16 float32 ulps of ``|result| +
|Scale| + |Bias|`` (the normalized value is of order one), float16 within one float16 ulp of the
result (plus that float32 bound, which matters only near zero).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dml_jax as dml
from dml_jax import fastpath
from dml_jax.kernels import mosaic
from dml_jax.kernels import mvn as K
from dml_jax.ops.normalization import lower_mvn, mvn_axes

pytestmark = pytest.mark.kernel_matrix

MVN, MVN1, MVN2 = (
    dml.MeanVarianceNormalizationOperatorDesc,
    dml.MeanVarianceNormalization1OperatorDesc,
    dml.MeanVarianceNormalization2OperatorDesc,
)
RELU = dml.ActivationReluOperatorDesc()
LEAKY = dml.ActivationLeakyReluOperatorDesc(alpha=0.25)


def _desc(cls, shape, type_name="FLOAT32", scale=None, bias=None, **fields):
    x = dml.TensorDesc(type_name, shape)
    s = None if scale is None else x.like(sizes=scale)
    b = None if bias is None else x.like(sizes=bias)
    return cls(x, s, b, x, epsilon=1e-5, **fields)


def _arrays(d, seed=0):
    rng = np.random.default_rng(seed)
    dtype = d.input_tensor.dtype
    out = [(rng.standard_normal(d.input_tensor.sizes) * 3 + 1).astype(dtype)]
    out[0].reshape(-1)[7] = np.nan  # one row is NaN throughout in both lowerings
    for t in (d.scale_tensor, d.bias_tensor):
        if t is not None:
            out.append((rng.standard_normal(t.sizes) + 0.5).astype(dtype))
    return out


def _close(got, want, d, arrays):
    """The module docstring's tolerance; NaN where the lax lowering has NaN."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    arrays = [np.asarray(a, np.float64) for a in arrays]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    want = np.where(ok, want, 0)
    magnitude = np.abs(want)
    for arr in arrays[1:]:  # Scale and Bias, broadcast
        magnitude = magnitude + np.abs(np.broadcast_to(arr, want.shape))
    if d.scale_tensor is None:
        magnitude = magnitude + 1
    tol = 16 * np.finfo(np.float32).eps * magnitude
    if d.input_tensor.dtype == np.float16:
        tol = tol + np.spacing(np.abs(want).astype(np.float16)).astype(np.float64)
    err = np.abs(got - want)
    assert np.all(err[ok] <= tol[ok]), np.max(err[ok] / tol[ok])


# (description, tunables): small tiles make the CPU cases loop and leave partial tiles/groups.
ONE = {"ONE_TILE_MAX": 16384, "TILE_ELEMENTS": 1024}
LOOP = {"ONE_TILE_MAX": 64, "RETAIN_ROW_MAX": 64, "LOOP_ELEMENTS": 64, "LOOP_GRID": None}


def _keep(keep=64, depth=4, grid=None):
    """Rows kept in part: ``keep`` elements, tiles of 32 loaded ``depth`` ahead."""
    both = {dtype: (keep, 32, depth, grid) for dtype in ("float32", "float16")}
    return {"ONE_TILE_MAX": 64, "RETAIN": both}


CASES = [
    # layer norm: one tile, 2 rows per program, 3 groups (the last one half empty)
    (_desc(MVN1, (5, 300), scale=(1, 300), bias=(1, 300), axes=(1,), normalize_variance=True), ONE),
    # RMS norm, float16, a per-channel Scale, no Bias, a size-1 axis among the normalized ones
    (_desc(MVN2, (3, 4, 1, 100), "FLOAT16", scale=(1, 4, 1, 1), axes=(2, 3), use_mean=False,
           use_variance=True), ONE),
    # MVN1 without the division, float16, Scale along the row
    (_desc(MVN1, (9, 2, 48), "FLOAT16", scale=(1, 2, 48), axes=(1, 2), normalize_variance=False),
     ONE),
    # MVN2 with neither statistic: Scale and Bias only
    (_desc(MVN2, (21, 33), scale=(21, 1), bias=(1, 33), axes=(1,), use_mean=False,
           use_variance=False), ONE),
    # instance norm, two loops (5 tiles, the last of 44), per-channel Scale and Bias, RELU
    (_desc(MVN, (2, 3, 10, 30), scale=(1, 3, 1, 1), bias=(1, 3, 1, 1), cross_channel=False,
           normalize_variance=True, fused_activation=RELU), LOOP),
    # two loops, mean square only, on 3 programs taking 2 rows in turn (the last turn partial)
    (_desc(MVN2, (5, 150), scale=(5, 1), axes=(1,), use_mean=False, use_variance=True),
     dict(LOOP, LOOP_GRID=3)),
    # rows kept in part: cross-channel, float16, 64 kept and 3 tiles of 32 (the last of 12)
    # loaded 2 ahead, on 2 programs taking 2 rows in turn, a per-channel Scale (along the row
    # here), a constant Bias, LEAKY_RELU, L2 eviction hints
    (_desc(MVN, (3, 4, 5, 7), "FLOAT16", scale=(1, 4, 1, 1), bias=(1, 1, 1, 1),
           cross_channel=True, normalize_variance=True, fused_activation=LEAKY),
     dict(_keep(depth=2, grid=2), RETAIN_HINTS=("float16",))),
    # kept in part, mean only, Bias along the row, the tiles in a plain loop (depth 0)
    (_desc(MVN2, (4, 150), bias=(1, 150), axes=(1,), use_mean=True, use_variance=False),
     _keep(depth=0)),
    # the whole row kept (100 of a block of 128), per-row Scale and Bias
    (_desc(MVN2, (4, 100), scale=(4, 1), bias=(4, 1), axes=(1,), use_mean=True,
           use_variance=True), _keep(keep=128)),
]  # fmt: skip


@pytest.mark.parametrize("d, tunables", CASES)
def test_kernel_interpret_matches_lax(monkeypatch, d, tunables):
    monkeypatch.setattr(K, "MIN_PROGRAMS", 1)
    for name, value in tunables.items():
        monkeypatch.setattr(K, name, value)
    assert K.applies(d)
    v = K.plan(d.input_tensor.sizes, mvn_axes(d), d.input_tensor.dtype)
    assert (v.tiles > 1) == (tunables is not ONE) and (v.groups > 1)
    assert bool(v.keep) == ("RETAIN" in tunables)
    arrays = [jnp.asarray(a) for a in _arrays(d)]
    (got,) = jax.jit(lambda *a: K.lower_mvn_kernel(d, *a, interpret=True))(*arrays)
    (want,) = jax.jit(lambda *a: lower_mvn(d, *a))(*arrays)
    assert got.dtype == want.dtype and got.shape == want.shape
    _close(got, want, d, arrays)


def test_stride_zero_scale_and_bias_take_the_kernel(monkeypatch):
    """An imported LayerNormalization's Scale and Bias: the input's sizes, stride 0 on every
    axis but the normalized one (read there at index 0, the one element DirectML reads)."""
    monkeypatch.setattr(K, "MIN_PROGRAMS", 1)
    for name, value in ONE.items():
        monkeypatch.setattr(K, name, value)
    shape = (2, 5, 7, 48)
    x = dml.TensorDesc("FLOAT16", shape)
    along = x.like(strides=(0, 0, 0, 1))
    d = MVN1(x, along, along, x, axes=(3,), normalize_variance=True, epsilon=1e-5)
    assert K.applies(d) and fastpath.select(d, fusible=True) is not None
    rng = np.random.default_rng(1)
    vectors = [(rng.standard_normal(48) + 0.5).astype(np.float16) for _ in range(2)]
    arrays = [jnp.asarray(rng.standard_normal(shape).astype(np.float16))]
    arrays += [jnp.broadcast_to(v, shape) for v in vectors]  # the logical arrays
    (got,) = jax.jit(lambda *a: K.lower_mvn_kernel(d, *a, interpret=True))(*arrays)
    (want,) = jax.jit(lambda *a: lower_mvn(d, *a))(*arrays)
    _close(got, want, d, arrays)
    # Without the strides the same sizes vary on every axis: lax keeps it.
    assert not K.applies(MVN1(x, x, x, x, axes=(3,), normalize_variance=True, epsilon=1e-5))


def test_plan_and_applies_decline_what_lax_keeps():
    rows = {"axes": (1,), "normalize_variance": True}
    assert K.plan((4096, 1024), (1,), np.float64) is None  # 64-bit: lax
    assert K.plan((64, 8, 1024), (0, 2), np.float32) is None  # axes not adjacent
    assert K.plan((64, 1024, 8), (1,), np.float32) is None  # not the minor axes
    assert K.plan((8, 1024), (1,), np.float32) is None  # too few rows to fill a GPU
    v = K.plan((4096, 4096), (1,), np.float32)
    assert v is not None and (v.a, v.r, v.tiles) == (4096, 4096, 1)
    v = K.plan((16, 256, 256, 256), (2, 3), np.float16)  # instance norm: half the row kept
    assert v.tiles > 1 and 0 < v.keep < v.r and v.keep & (v.keep - 1) == 0
    assert K.plan((8, 64, 256, 512), (2, 3), np.float32).keep == 0  # too long: two loops
    assert K.applies(_desc(MVN1, (40000, 64), scale=(1, 64), bias=(40000, 1), **rows))
    assert not K.applies(_desc(MVN1, (40000, 64), scale=(40000, 64), **rows))  # both vary
    sigmoid = dml.ActivationSigmoidOperatorDesc()
    assert not K.applies(_desc(MVN1, (40000, 64), fused_activation=sigmoid, **rows))


def test_bench_cases_take_the_kernel():
    """Every MVN case of the operator suite (1 GiB) is one the fast path takes."""
    from dml_jax import registry
    from dml_jax.bench import catalog

    for name in ("", "1", "2"):
        spec = registry.lookup(f"DML_OPERATOR_MEAN_VARIANCE_NORMALIZATION{name}")
        for dtype, base in (("float32", 16), ("float16", 32)):
            cases = catalog.cases(spec, (base, 256, 256, 256), dtype, True)
            assert cases and all(fastpath.select(c.desc) for c in cases)


# Built per data type: (name, builder).
GPU_CASES = [
    # instance norm, rows of 20480 kept whole (in a padded block)
    ("instance", lambda t: _desc(MVN, (2, 160, 128, 160), t, scale=(1, 160, 1, 1),
                                 bias=(1, 160, 1, 1), cross_channel=False,
                                 normalize_variance=True)),
    # rows of 60000 kept in part, the rest in tiles (the last one partial), ReLU
    ("kept_part", lambda t: _desc(MVN, (1, 300, 200, 300), t, scale=(1, 300, 1, 1),
                                  bias=(1, 300, 1, 1), cross_channel=False,
                                  normalize_variance=True, fused_activation=RELU)),
    # rows of 160000, too long to keep part: two loops
    ("two_loops", lambda t: _desc(MVN, (1, 264, 400, 400), t, scale=(1, 264, 1, 1),
                                  cross_channel=False, normalize_variance=True)),
    # layer norm, rows of 768 in one tile (enough groups for up to 16 rows a program)
    ("layer", lambda t: _desc(MVN1, (8000, 768), t, scale=(1, 768), bias=(1, 768), axes=(1,),
                              normalize_variance=True)),
    # RMS norm with RELU, rows of 4096
    ("rms_relu", lambda t: _desc(MVN2, (2400, 4096), t, scale=(1, 4096), axes=(1,),
                                 use_mean=False, use_variance=True, fused_activation=RELU)),
    # mean only, rows of 5000
    ("mean_only", lambda t: _desc(MVN2, (1200, 1, 5000), t, bias=(1200, 1, 1), axes=(2,),
                                  use_mean=True, use_variance=False)),
]  # fmt: skip


@pytest.mark.skipif(not fastpath.cuda_present(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("type_name", ["FLOAT32", "FLOAT16"])
@pytest.mark.parametrize("name, build", GPU_CASES, ids=[c[0] for c in GPU_CASES])
def test_gpu_fast_path_matches_lax(name, build, type_name):
    d = build(type_name)
    assert fastpath.select(d) is not None
    arrays = _arrays(d, seed=3)
    got = jax.jit(dml.compile_operator(d).fn)(*arrays)
    want = jax.jit(dml.compile_operator(d, fast_paths=False).fn)(*arrays)
    _close(got, want, d, arrays)


# The cluster form (Mosaic GPU, Hopper): the plan on any machine, the kernel on a Hopper GPU
# against the lax lowering within the same tolerance.


def test_cluster_plan_and_refusals(monkeypatch):
    monkeypatch.setattr(mosaic, "hopper", lambda: True)
    bench = (16, 32, 256, 256)  # instance norm, rows of 65536
    assert K.cluster_plan(bench, (2, 3), np.float32) == K.ClusterView(512, 65536, 4, 4)
    assert K.cluster_plan(bench, (2, 3), np.float16) == K.ClusterView(512, 65536, 2, 4)
    assert K.cluster_plan((300, 131072), (1,), np.float32).p == 8  # 64 KB a CTA
    assert K.cluster_plan((300, 32768), (1,), np.float16).p == 1  # one CTA holds the row
    v = K.cluster_plan((300, 49152), (1,), np.float32)  # three steps: three pieces
    assert (v.p, v.steps, v.pieces) == (4, 3, 3)
    refused = [
        ((300, 262144), (1,), np.float32),  # 16 CTAs a row: past the portable cluster
        ((300, 16384), (1,), np.float32),  # short rows: the Triton kernel's one tile
        ((300, 20480), (1,), np.float32),  # a CTA's part not whole steps of 4096
        ((40, 65536), (1,), np.float32),  # too few CTAs to fill a GPU
        ((300, 65536), (1,), np.float64),  # 8-byte data
        ((300, 65536, 2), (1,), np.float32),  # not the minor axes
    ]
    for shape, axes, dtype in refused:
        assert K.cluster_plan(shape, axes, dtype) is None, shape
    instance = _desc(MVN, bench, scale=(1, 32, 1, 1), cross_channel=False, normalize_variance=True)
    assert K.cluster_applies(instance)
    along = _desc(MVN, bench, scale=(1, 1, 256, 256), cross_channel=False, normalize_variance=True)
    assert not K.cluster_applies(along) and K.applies(along)  # Scale along the row: Triton
    sigmoid = dml.ActivationSigmoidOperatorDesc()
    assert not K.cluster_applies(
        _desc(MVN, bench, cross_channel=False, normalize_variance=True, fused_activation=sigmoid)
    )
    monkeypatch.setattr(mosaic, "hopper", lambda: False)
    assert K.cluster_plan(bench, (2, 3), np.float32) is None


def test_cluster_form_is_chosen_first_on_hopper(monkeypatch):
    d = _desc(MVN, (16, 32, 256, 256), scale=(1, 32, 1, 1), bias=(1, 32, 1, 1),
              cross_channel=False, normalize_variance=True)  # fmt: skip
    monkeypatch.setattr(mosaic, "hopper", lambda: True)
    assert fastpath.select(d).name == "cluster"
    monkeypatch.setattr(mosaic, "hopper", lambda: False)
    assert fastpath.select(d).name == "kernel"  # the Triton kernel elsewhere


# Built per data type: (name, builder, CTAs a row (float32, float16)).
CLUSTER_CASES = [
    # instance norm, per-channel Scale and Bias (row 0 NaN throughout)
    ("instance", lambda t: _desc(MVN, (2, 3, 256, 256), t, scale=(1, 3, 1, 1), bias=(1, 3, 1, 1),
                                 cross_channel=False, normalize_variance=True), (4, 2)),
    # RMS norm over rows of 131072 with LEAKY_RELU
    ("rms_leaky", lambda t: _desc(MVN2, (5, 131072), t, scale=(5, 1), axes=(1,), use_mean=False,
                                  use_variance=True, fused_activation=LEAKY), (8, 4)),
    # mean only, rows of 32768, Bias per row, RELU
    ("mean_relu", lambda t: _desc(MVN2, (7, 1, 32768), t, bias=(7, 1, 1), axes=(2,),
                                  use_mean=True, use_variance=False, fused_activation=RELU),
     (2, 1)),
    # rows of 49152 in three pieces, MVN1 without the division, no Scale or Bias
    ("three_pieces", lambda t: _desc(MVN1, (4, 49152), t, axes=(1,), normalize_variance=False),
     (4, 2)),
]  # fmt: skip


@pytest.mark.skipif(not mosaic.hopper(), reason="needs a Hopper GPU (TMA) and jax 0.11")
@pytest.mark.parametrize("type_name", ["FLOAT32", "FLOAT16"])
@pytest.mark.parametrize("name, build, ctas", CLUSTER_CASES, ids=[c[0] for c in CLUSTER_CASES])
def test_cluster_kernel_matches_lax(monkeypatch, name, build, ctas, type_name):
    monkeypatch.setattr(K, "MIN_PROGRAMS", 1)
    d = build(type_name)
    v = K.cluster_plan(d.input_tensor.sizes, mvn_axes(d), d.input_tensor.dtype)
    assert v.p == ctas[type_name == "FLOAT16"] and fastpath.select(d).name == "cluster"
    arrays = _arrays(d, seed=4)
    got = jax.jit(dml.compile_operator(d).fn)(*arrays)
    want = jax.jit(dml.compile_operator(d, fast_paths=False).fn)(*arrays)
    _close(got, want, d, arrays)


@pytest.mark.skipif(not mosaic.hopper(), reason="needs a Hopper GPU (TMA) and jax 0.11")
def test_cluster_kernel_under_vmap(monkeypatch):
    # vmap batches the fast path itself (Mosaic GPU's rule adds a grid axis): the batch equals
    # its entries computed one by one
    monkeypatch.setattr(K, "MIN_PROGRAMS", 1)
    d = CLUSTER_CASES[0][1]("FLOAT32")
    assert fastpath.select(d).name == "cluster"
    fn = dml.compile_operator(d).fn
    x, scale, bias = _arrays(d, seed=5)
    xs = np.stack([x, -x])
    batched = jax.jit(jax.vmap(fn, in_axes=(0, None, None)))(xs, scale, bias)
    for i in range(2):
        np.testing.assert_array_equal(
            np.asarray(batched[i]), np.asarray(jax.jit(fn)(xs[i], scale, bias))
        )
