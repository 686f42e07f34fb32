"""The integer-factor bilinear upsampling kernel (dml_jax.kernels.resample) against the lax
lowering.

In Pallas interpret mode (any machine): ragged row tiles, columns that do not divide into
tiles, several images per call, power-of-two and other factors, float16 (read as 32-bit words),
5-D UPSAMPLE_2D and 2-D RESAMPLE. On inputs of few significant bits (every product and sum
exact in float32) the kernel equals the lax lowering bit for bit; otherwise XLA and Triton may
contract a product and a sum into a fused multiply-add differently, and the stated tolerance is
4 float32 ulps of the largest input magnitude (float16: one float16 ulp of the result more). On
a CUDA machine also the compiled Triton kernel through the operators' fast path.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dml_jax as dml
from dml_jax import fastpath
from dml_jax.kernels import resample as K
from dml_jax.ops.resample import lower_resample

pytestmark = pytest.mark.kernel_matrix

T = dml.TensorDesc
CENTRES = {"input_pixel_offsets": [0.5] * 4, "output_pixel_offsets": [-0.5] * 4}


def _upsample(shape, fh, fw, type_name="FLOAT32", mode="LINEAR"):
    out = tuple(shape[:-2]) + (shape[-2] * fh, shape[-1] * fw)
    return dml.Upsample2DOperatorDesc(T(type_name, shape), T(type_name, out), (fw, fh), mode)


def _resample(cls, shape, scales, out=None, type_name="FLOAT32", **extra):
    out = out or tuple(int(s * f) for s, f in zip(shape, scales))
    if cls is not dml.ResampleOperatorDesc:
        extra = {**{k: v[: len(shape)] for k, v in CENTRES.items()}, **extra}
    if cls in (dml.Resample2OperatorDesc, dml.Resample3OperatorDesc):
        extra.setdefault("rounding_direction", "DECREASING")
    return cls(T(type_name, shape), T(type_name, out), "LINEAR", scales=scales, **extra)


def _input(shape, dtype, exact: bool, seed=0):
    """Quarter steps in [-128, 128] (each blend exact in float32 for power-of-two factors), or
    normal values."""
    rng = np.random.default_rng(seed)
    if exact:
        return (rng.integers(-512, 513, shape) / 4).astype(dtype)
    return (rng.standard_normal(shape) * 3).astype(dtype)


def _close(got, want, x):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    g, w = got.astype(np.float64), want.astype(np.float64)
    tol = 4 * np.finfo(np.float32).eps * np.max(np.abs(np.asarray(x, np.float64)))
    if got.dtype == np.float16:
        tol = tol + np.finfo(np.float16).eps * np.abs(w) + 2.0**-24
    assert np.all(np.abs(g - w) <= tol), np.max(np.abs(g - w))


# (description, output elements per tile, maximum columns per tile): small tiles give ragged
# row tiles, several column tiles and columns that do not fill the last tile.
CASES = [
    (_upsample((2, 3, 5, 7), 2, 2), 64, 4),
    (_upsample((2, 2, 6, 5), 4, 4), 128, 4),  # 4x: chunked (one image a call) with chunk 1
    (_upsample((1, 2, 2, 3, 6), 2, 8, "FLOAT16"), 256, 4),  # 5-D: D is never resampled
    (
        _resample(
            dml.Resample3OperatorDesc, (1, 4, 6), (1, 2, 3.0), type_name="FLOAT16", antialiased=True
        ),
        64,
        4,
    ),
]


@pytest.mark.parametrize("chunk", [0, 1])
@pytest.mark.parametrize("desc, tile, max_cols", CASES)
def test_kernel_interpret_matches_lax(monkeypatch, desc, tile, max_cols, chunk):
    """``chunk``: input bytes a chunk, 1 (one image a call) or 0 (one call)."""
    monkeypatch.setattr(K, "CHUNK_BYTES", {"float32": chunk, "float16": chunk})
    monkeypatch.setattr(K, "TILE_ELEMENTS", tile)
    monkeypatch.setattr(K, "MAX_COLS", max_cols)
    monkeypatch.setattr(K, "WORDS_MAX_FACTOR", K.MAX_FACTOR)  # words with every factor
    v = K.plan(desc)
    assert v is not None and v.programs > 1
    big = v.h.factor * v.w.factor >= 16 and v.lead > 1
    assert v.chunk == (1 if chunk and big else 0)  # chunks only where a pixel makes 16
    x = desc.input_tensor
    assert v.pack == (2 if x.dtype == np.float16 else 1)  # float16 read as 32-bit words
    exact = all(f & (f - 1) == 0 for f in (v.h.factor, v.w.factor))
    data = jnp.asarray(_input(x.sizes, x.dtype, exact))
    got = K.upsample_kernel(data, v, interpret=True)
    want = jax.jit(lambda y: lower_resample(desc, y)[0])(data)
    if exact:
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    else:
        _close(got, want, data)


def test_chunked_calls_run_in_order_in_one_buffer(monkeypatch):
    """Chunked: prefetch, chunk, prefetch, chunk, ...; each prefetch after the first takes the
    previous chunk's output (so it cannot run ahead of it), and every chunk after the first
    writes into that same buffer (aliased)."""
    monkeypatch.setattr(K, "CHUNK_BYTES", {"float32": 1})
    desc = _upsample((3, 6, 5), 4, 4)
    v = K.plan(desc)
    assert (v.chunk, v.lead) == (1, 3)
    x = jnp.zeros(desc.input_tensor.sizes, jnp.float32)
    jaxpr = jax.make_jaxpr(lambda y: K.upsample_kernel(y, v, interpret=True))(x).jaxpr
    calls = [e for e in jaxpr.eqns if e.primitive.name == "pallas_call"]
    assert len(calls) == 2 * v.lead
    previous = None
    for prefetch, chunk in zip(calls[0::2], calls[1::2]):
        if previous is None:
            assert len(prefetch.invars) == 1 and not chunk.params["input_output_aliases"]
        else:
            assert previous in prefetch.invars and previous in chunk.invars
            assert dict(chunk.params["input_output_aliases"]) == {2: 0}
        assert prefetch.outvars[0] in chunk.invars
        previous = chunk.outvars[0]


@pytest.mark.parametrize(
    "desc",
    [
        _upsample((1, 2, 8, 8), 2, 1),  # a factor of 1
        _upsample((1, 2, 8, 8), 2, 9),  # past MAX_FACTOR
        _upsample((1, 2, 8, 8), 2, 2, "INT8"),
        _resample(dml.ResampleOperatorDesc, (1, 2, 8, 8), (1.0, 1.0, 2.5, 2.0)),
        _resample(dml.ResampleOperatorDesc, (1, 2, 8, 8), (1.0, 2.0, 2.0, 2.0)),  # C too
        _resample(dml.ResampleOperatorDesc, (1, 2, 8, 8), (1, 1, 2, 2), out=(1, 2, 15, 16)),
        _resample(dml.ResampleOperatorDesc, (1, 2, 8, 8), (1, 1, 0.5, 0.5)),
        _resample(
            dml.Resample1OperatorDesc,
            (1, 2, 8, 8),
            (1, 1, 2, 2),
            input_pixel_offsets=[0.5, 0.5, 0, 0],
            output_pixel_offsets=[-0.5, -0.5, 0, 0],
        ),
    ],
)
def test_plan_declines_what_lax_keeps(desc):
    assert K.plan(desc) is None and K.repeat_plan(desc) is None
    assert fastpath.select(desc) is None


@pytest.mark.parametrize(
    "desc",
    [
        _upsample((2, 4, 16, 16), 2, 2),
        _upsample((1, 2, 3, 16, 16), 3, 2, "FLOAT16"),
        _resample(dml.ResampleOperatorDesc, (2, 4, 16, 16), (1, 1, 2, 2)),
        _resample(dml.Resample1OperatorDesc, (16, 16), (4, 2)),
        _resample(dml.Resample2OperatorDesc, (2, 16, 16), (1, 2, 2)),
        _resample(dml.Resample3OperatorDesc, (2, 16, 16), (1, 2, 2), antialiased=True),
    ],
)
def test_fast_path_takes_integer_linear_upsampling(desc):
    v = K.plan(desc)
    assert v is not None and v.h.shift[0] == -1 and v.w.shift[-1] == 0
    assert fastpath.select(desc).name == "kernel"


def test_bench_cases_a_kernel_takes():
    """The operator suite's UPSAMPLE_2D cases (1 GiB): a fast path takes the bilinear ones, and
    nearest-neighbour of float16 (the suite then times the lax lowering beside it)."""
    from dml_jax import registry
    from dml_jax.bench import catalog

    spec = registry.lookup("DML_OPERATOR_UPSAMPLE_2D")
    for dtype, base in (("float32", 16), ("float16", 32)):
        cases = catalog.cases(spec, (base, 256, 256, 256), dtype, True)
        assert len(cases) == 3
        for c in cases:
            taken = "LINEAR" in c.label or dtype == "float16"
            assert (fastpath.select(c.desc) is not None) == taken, (dtype, c.label)


def test_plan_reads_float16_as_words_at_2x_only():
    assert (K.plan(_upsample((1, 2, 8, 8), 2, 2, "FLOAT16")).pack, K.WORDS_MAX_FACTOR) == (2, 2)
    assert K.plan(_upsample((1, 2, 8, 8), 2, 4, "FLOAT16")).pack == 1
    assert K.plan(_upsample((1, 2, 8, 7), 2, 2, "FLOAT16")).pack == 1  # odd width
    assert K.plan(_upsample((1, 2, 8, 8), 2, 2)).pack == 1


@pytest.mark.skipif(not fastpath.cuda_present(), reason="needs a CUDA GPU")
@pytest.mark.parametrize(
    "desc",
    [
        _upsample((2, 16, 100, 130), 2, 2),
        _upsample((2, 16, 100, 130), 2, 2, "FLOAT16"),
        _upsample((2, 8, 50, 33), 2, 2, "FLOAT16"),  # odd width: 2-byte loads
        _upsample((2, 4, 3, 40, 64), 4, 4, "FLOAT16"),  # chunks of 3 images (24: 8 calls)
        _upsample((2, 5, 40, 64), 4, 4),  # float32: chunks of 1 image (10 calls)
        _resample(dml.Resample1OperatorDesc, (3, 64, 50), (1, 3, 2)),
        _resample(dml.ResampleOperatorDesc, (8, 32, 64, 64), (1, 1, 2, 2), type_name="FLOAT16"),
    ],
)
def test_gpu_fast_path_matches_lax(monkeypatch, desc):
    # 4x in chunks of 3 images (the last partial): each call after its chunk's prefetch.
    monkeypatch.setattr(K, "CHUNK_BYTES", {"float32": 3 * 40 * 64 * 2, "float16": 3 * 40 * 64 * 2})
    assert fastpath.select(desc).name == "kernel"
    x = _input(desc.input_tensor.sizes, desc.input_tensor.dtype, False, seed=3)
    got = jax.jit(dml.compile_operator(desc).fn)(x)
    want = jax.jit(dml.compile_operator(desc, fast_paths=False).fn)(x)
    _close(got, want, x)


# The nearest-neighbour repeat kernel: bit for bit the lax lowering's broadcast, on any bits.

NEAREST = "NEAREST_NEIGHBOR"


def _nearest(cls, shape, scales, type_name="FLOAT32", **extra):
    out = tuple(int(s * f) for s, f in zip(shape, scales))
    if cls is not dml.ResampleOperatorDesc:
        extra = {**{k: v[: len(shape)] for k, v in CENTRES.items()}, **extra}
    if cls in (dml.Resample2OperatorDesc, dml.Resample3OperatorDesc):
        extra.setdefault("rounding_direction", "DECREASING")
    return cls(T(type_name, shape), T(type_name, out), NEAREST, scales=scales, **extra)


def _bits_input(desc, seed=0):
    """Random bits of the input's width (NaNs with payloads, both zeros, subnormals)."""
    dtype = np.dtype(desc.input_tensor.dtype)
    unsigned = np.dtype(f"uint{8 * dtype.itemsize}")
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, np.iinfo(unsigned).max, desc.input_tensor.sizes, dtype=np.uint64)
    return raw.astype(unsigned).view(dtype)


def _same_bits(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


ORIGIN = {"input_pixel_offsets": [0.0] * 3, "output_pixel_offsets": [0.0] * 3}
REPEAT_CASES = [
    _upsample((2, 3, 5, 7), 2, 2, "FLOAT16", mode=NEAREST),  # one partial tile a dimension
    _upsample((1, 2, 33, 130), 4, 2, "FLOAT16", mode=NEAREST),  # ragged rows and columns
    _nearest(dml.Resample1OperatorDesc, (3, 4, 9, 10), (1, 1, 2, 1), "INT8"),  # rows only
    _upsample((2, 3, 40, 300), 1, 8, "FLOAT16", mode=NEAREST),  # columns only, 8x
    _nearest(dml.ResampleOperatorDesc, (2, 3, 16, 24), (1, 1, 2, 4), "FLOAT16"),
    _nearest(dml.Resample1OperatorDesc, (3, 17, 20), (1, 2, 2), "UINT8"),
    # RESAMPLE2/3 round down: with offsets 0 the input of output o is floor(o / f)
    _nearest(dml.Resample2OperatorDesc, (2, 12, 16), (1, 4, 4), "INT8", **ORIGIN),
    _nearest(
        dml.Resample3OperatorDesc, (2, 12, 16), (1, 2, 2), "FLOAT16", antialiased=True, **ORIGIN
    ),
]


@pytest.mark.parametrize("desc", REPEAT_CASES)
def test_repeat_kernel_interpret_matches_lax(desc):
    dml.validate(desc)  # a description DirectML accepts
    v = K.repeat_plan(desc)
    assert v is not None and fastpath.select(desc).name == "repeat"
    x = _bits_input(desc)
    got = jax.jit(lambda x: K.repeat_kernel(x, v, interpret=True))(x)
    (want,) = jax.jit(lambda x: lower_resample(desc, x))(x)
    _same_bits(got, want)


def test_repeat_plan_tiles_and_refusals():
    v = K.repeat_plan(_upsample((32, 256, 128, 128), 2, 2, "FLOAT16", mode=NEAREST))  # bench
    assert (v.rows, v.w, v.fh, v.fw) == (32 * 256 * 128, 128, 2, 2)
    assert v.tr * v.fh * v.tc * v.fw == K.REPEAT_TILE and v.tc & (v.tc - 1) == 0
    refused = [
        _upsample((1, 2, 8, 8), 2, 2, "FLOAT16", mode="LINEAR"),  # the bilinear kernel's
        _upsample((1, 2, 8, 8), 3, 2, "FLOAT16", mode=NEAREST),  # not a power of two
        _upsample((1, 2, 8, 8), 2, 16, "FLOAT16", mode=NEAREST),  # past REPEAT_MAX_FACTOR
        _upsample((1, 2, 8, 8), 2, 2, mode=NEAREST),  # 4-byte elements: lax is at the copy
        _upsample((1, 2, 8, 8), 2, 2, "FLOAT64", mode=NEAREST),
        _nearest(dml.ResampleOperatorDesc, (1, 2, 8, 8), (1, 2, 2, 2), "FLOAT16"),  # C too
        _nearest(dml.ResampleOperatorDesc, (1, 2, 8, 8), (1, 1, 0.5, 0.5), "FLOAT16"),
        _nearest(dml.ResampleOperatorDesc, (1, 2, 8, 8), (1, 1, 1, 1), "FLOAT16"),  # a copy
        # corners aligned: not each input repeated in order
        _nearest(dml.Resample1OperatorDesc, (1, 2, 8, 8), (1, 1, 2, 2), "FLOAT16",
                 input_pixel_offsets=[0, 0, 0, 0], output_pixel_offsets=[0, 0, 0, 0]),
        # pixel centres rounded down (RESAMPLE2): each input but the first repeated 2 times
        # one output late
        _nearest(dml.Resample2OperatorDesc, (1, 2, 8, 8), (1, 1, 2, 2), "FLOAT16"),
    ]  # fmt: skip
    for desc in refused:
        assert K.repeat_plan(desc) is None, desc


@pytest.mark.skipif(not fastpath.cuda_present(), reason="needs a CUDA GPU")
@pytest.mark.parametrize(
    "desc",
    [
        _upsample((2, 16, 100, 130), 2, 2, "FLOAT16", mode=NEAREST),
        _upsample((2, 16, 13, 13), 2, 2, "FLOAT16", mode=NEAREST),  # odd: every tile partial
        _nearest(dml.Resample1OperatorDesc, (2, 8, 50, 33), (1, 1, 4, 2), "INT8"),
        _nearest(dml.Resample1OperatorDesc, (3, 64, 50), (1, 8, 4), "FLOAT16"),
    ],
)
def test_gpu_repeat_matches_lax(desc):
    assert fastpath.select(desc).name == "repeat"
    x = _bits_input(desc, seed=3)
    got = jax.jit(dml.compile_operator(desc).fn)(x)
    want = jax.jit(dml.compile_operator(desc, fast_paths=False).fn)(x)
    _same_bits(got, want)


@pytest.mark.skipif(not fastpath.cuda_present(), reason="needs a CUDA GPU")
def test_gpu_repeat_under_vmap():
    desc = _upsample((2, 4, 30, 50), 2, 2, "FLOAT16", mode=NEAREST)
    fn = dml.compile_operator(desc).fn
    xs = np.stack([_bits_input(desc, seed=s) for s in (1, 2)])
    batched = jax.jit(jax.vmap(fn))(xs)
    for i in range(2):
        _same_bits(batched[i], jax.jit(fn)(xs[i]))
