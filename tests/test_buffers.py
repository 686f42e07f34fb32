"""Buffer mode: strides, broadcasting, padding, permuted layouts and in-place binding.

The reference reads and writes buffers with ``numpy.lib.stride_tricks.as_strided`` on the same
buffers (independent of ``dml_jax.buffers``); the operator itself is computed by logical mode on
a packed copy of the description, which the operator tests check against the spec.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.lib.stride_tricks import as_strided

import dml_jax as dml
from dml_jax.buffers import buffer_function, read_tensor, write_tensor

# Every example compiles a new program: a third of the profile's count keeps CI fast.
EXAMPLES = max(4, settings.default.max_examples // 3)
SENTINEL_BASE = 100


# --------------------------------------------------------------------------------------------
# NumPy reference


def np_view(buf: np.ndarray, t: dml.TensorDesc, writeable: bool = False) -> np.ndarray:
    strides = tuple(s * buf.itemsize for s in t.layout_strides)
    return as_strided(buf, t.sizes, strides, writeable=writeable)


def np_read(buf: np.ndarray, t: dml.TensorDesc) -> np.ndarray:
    return np_view(buf, t).copy()


def np_write(buf: np.ndarray, value: np.ndarray, t: dml.TensorDesc) -> np.ndarray:
    out = buf.copy()
    np_view(out, t, writeable=True)[...] = value
    return out


def addressed(t: dml.TensorDesc, length: int) -> np.ndarray:
    mask = np.zeros(length, bool)
    np_view(mask, t, writeable=True)[...] = True
    return mask


def packed_desc(desc):
    """The same description with every tensor packed: logical mode does not depend on strides."""
    changes = {}
    for f in dataclasses.fields(desc):
        value = getattr(desc, f.name)
        if isinstance(value, dml.TensorDesc):
            changes[f.name] = value.like(strides=None)
        elif isinstance(value, tuple) and value and isinstance(value[0], dml.TensorDesc):
            changes[f.name] = tuple(t.like(strides=None) for t in value)
    return dataclasses.replace(desc, **changes)


def reference(desc, inputs, outputs):
    """Expected output buffers: as_strided reads, logical mode, as_strided writes."""
    op = dml.compile_operator(desc)
    arrays = [np_read(b, t) for b, t in zip(inputs, op.input_descs)]
    result = dml.compile_operator(packed_desc(desc))(*arrays)
    results = result if isinstance(result, tuple) else (result,)
    return [np_write(b, np.asarray(r), t) for b, r, t in zip(outputs, results, op.output_descs)]


def random_buffer(rng, t: dml.TensorDesc, extra: int) -> np.ndarray:
    n = t.addressed_elements + extra
    if np.issubdtype(t.dtype, np.unsignedinteger):
        return rng.integers(0, 9, n).astype(t.dtype)
    return rng.integers(-4, 5, n).astype(t.dtype)


def sentinel_buffer(t: dml.TensorDesc, extra: int) -> np.ndarray:
    """Distinct values, so any element written where it should not be is noticed."""
    return (np.arange(t.addressed_elements + extra) % 50 + SENTINEL_BASE).astype(t.dtype)


def check_buffers(op, got, want, outputs):
    assert isinstance(got, tuple) and len(got) == len(want)
    for g, w, old, t, path in zip(got, want, outputs, op.output_descs, op.output_paths):
        g = np.asarray(g)
        assert g.dtype == old.dtype and g.shape == old.shape, path
        mask = addressed(t, old.shape[0])
        np.testing.assert_array_equal(g[~mask], old[~mask], err_msg=f"{path} untouched")
        np.testing.assert_allclose(
            g[mask].astype(np.float64),
            w[mask].astype(np.float64),
            rtol=1e-6,
            atol=0,
            equal_nan=True,
            err_msg=path,
        )


def lowered_text(op, inputs, outputs) -> str:
    return jax.jit(buffer_function(op)).lower(*inputs, *outputs).as_text()


# --------------------------------------------------------------------------------------------
# Strategies: small descriptions of every operator with random layouts


@st.composite
def strides_for(draw, sizes: tuple[int, ...], output: bool) -> tuple[int, ...]:
    """Packed, padded, permuted, broadcast (inputs), irregular (inputs) or a mix of them."""
    kinds = ["packed", "padded", "permuted", "mixed"]
    if not output:
        kinds += ["broadcast", "irregular"]
    kind = draw(st.sampled_from(kinds))
    rank = len(sizes)
    if kind == "irregular":  # overlapping windows, interleavings: anything goes on an input
        return tuple(draw(st.integers(0, 4)) for _ in sizes)
    order = list(range(rank))  # outermost first
    if kind in ("permuted", "mixed"):
        order = draw(st.permutations(range(rank)))
    pads = [0] * rank
    if kind in ("padded", "mixed"):
        pads = draw(st.lists(st.integers(0, 2), min_size=rank, max_size=rank))
    strides, span = [0] * rank, 1
    for axis in reversed(order):  # innermost first: each stride clears the span inside it
        strides[axis] = span + pads[axis]
        span += (sizes[axis] - 1) * strides[axis]
    if not output and kind in ("broadcast", "mixed"):
        zero = draw(st.lists(st.booleans(), min_size=rank, max_size=rank))
        strides = [0 if z else s for z, s in zip(zero, strides)]
    return tuple(strides)


@st.composite
def tensor(draw, data_type, sizes, output=False) -> dml.TensorDesc:
    sizes = tuple(sizes)
    return dml.TensorDesc(data_type, sizes, draw(strides_for(sizes, output)))


MOVE_TYPES = st.sampled_from(["FLOAT32", "FLOAT16", "INT32", "UINT8"])
small_sizes = st.lists(st.integers(1, 3), min_size=1, max_size=4).map(tuple)


@st.composite
def split_desc(draw):
    sizes = draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))
    axis = draw(st.integers(0, len(sizes) - 1))
    sizes[axis] = draw(st.integers(2, 4))
    cuts = sorted(draw(st.sets(st.integers(1, sizes[axis] - 1), max_size=2)))
    parts = [b - a for a, b in zip([0] + cuts, cuts + [sizes[axis]])]
    dt = draw(MOVE_TYPES)
    outs = [draw(tensor(dt, sizes[:axis] + [p] + sizes[axis + 1 :], True)) for p in parts]
    return dml.SplitOperatorDesc(draw(tensor(dt, sizes)), outs, axis)


@st.composite
def join_desc(draw):
    sizes = draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))
    axis = draw(st.integers(0, len(sizes) - 1))
    parts = draw(st.lists(st.integers(1, 2), min_size=1, max_size=3))
    dt = draw(MOVE_TYPES)
    ins = [draw(tensor(dt, sizes[:axis] + [p] + sizes[axis + 1 :])) for p in parts]
    out_sizes = sizes[:axis] + [sum(parts)] + sizes[axis + 1 :]
    return dml.JoinOperatorDesc(ins, draw(tensor(dt, out_sizes, True)), axis)


def depth_space_desc(cls, to_space: bool, ordered: bool):
    @st.composite
    def build(draw):
        b = draw(st.integers(1, 2))
        n, c, h, w = (draw(st.integers(1, 2)) for _ in range(4))
        if to_space:
            x, y = (n, c * b * b, h, w), (n, c, h * b, w * b)
        else:
            x, y = (n, c, h * b, w * b), (n, c * b * b, h, w)
        dt = draw(MOVE_TYPES)
        args = [draw(tensor(dt, x)), draw(tensor(dt, y, True)), b]
        if ordered:
            args.append(draw(st.sampled_from(["DEPTH_COLUMN_ROW", "COLUMN_ROW_DEPTH"])))
        return cls(*args)

    return build()


@st.composite
def clip_desc(draw, cls):
    sizes, dt = draw(small_sizes), draw(st.sampled_from(["FLOAT32", "INT32", "INT8"]))
    scale_bias = None
    if dt == "FLOAT32" and draw(st.booleans()):
        scale_bias = dml.ScaleBias(2.0, -1.0)
    lo, hi = -2, 3
    return cls(
        draw(tensor(dt, sizes)), draw(tensor(dt, sizes, True)), lo, hi, scale_bias=scale_bias
    )


@st.composite
def clip_grad_desc(draw, cls):
    sizes, dt = draw(small_sizes), draw(st.sampled_from(["FLOAT32", "INT32"]))
    return cls(
        draw(tensor(dt, sizes)), draw(tensor(dt, sizes)), draw(tensor(dt, sizes, True)), -2, 3
    )


@st.composite
def tile_desc(draw):
    sizes = draw(st.lists(st.integers(1, 2), min_size=1, max_size=3))
    repeats = draw(st.lists(st.integers(1, 2), min_size=len(sizes), max_size=len(sizes)))
    dt = draw(MOVE_TYPES)
    out = [s * r for s, r in zip(sizes, repeats)]
    return dml.TileOperatorDesc(draw(tensor(dt, sizes)), draw(tensor(dt, out, True)), repeats)


@st.composite
def _reduce_parts(draw):
    sizes = draw(small_sizes)
    axes = sorted(draw(st.sets(st.integers(0, len(sizes) - 1), min_size=1)))
    out = tuple(1 if i in axes else s for i, s in enumerate(sizes))
    return sizes, axes, out


@st.composite
def reduce_desc(draw):
    sizes, axes, out = draw(_reduce_parts())
    function = draw(st.sampled_from(["SUM", "MAX", "MIN", "AVERAGE", "L2", "ARGMAX", "ARGMIN"]))
    out_type = "UINT32" if function.startswith("ARG") else "FLOAT32"
    return dml.ReduceOperatorDesc(
        function, draw(tensor("FLOAT32", sizes)), draw(tensor(out_type, out, True)), axes
    )


@st.composite
def arg_desc(draw, cls):
    sizes, axes, out = draw(_reduce_parts())
    out_type = draw(st.sampled_from(["UINT32", "INT32"]))
    direction = draw(st.sampled_from(["INCREASING", "DECREASING"]))
    return cls(draw(tensor("FLOAT32", sizes)), draw(tensor(out_type, out, True)), axes, direction)


BUILDERS = {
    "SPLIT": split_desc,
    "JOIN": join_desc,
    "DEPTH_TO_SPACE": lambda: depth_space_desc(dml.DepthToSpaceOperatorDesc, True, False),
    "DEPTH_TO_SPACE1": lambda: depth_space_desc(dml.DepthToSpace1OperatorDesc, True, True),
    "SPACE_TO_DEPTH": lambda: depth_space_desc(dml.SpaceToDepthOperatorDesc, False, False),
    "SPACE_TO_DEPTH1": lambda: depth_space_desc(dml.SpaceToDepth1OperatorDesc, False, True),
    "ELEMENT_WISE_CLIP": lambda: clip_desc(dml.ElementWiseClipOperatorDesc),
    "ELEMENT_WISE_CLIP1": lambda: clip_desc(dml.ElementWiseClip1OperatorDesc),
    "ELEMENT_WISE_CLIP_GRAD": lambda: clip_grad_desc(dml.ElementWiseClipGradOperatorDesc),
    "ELEMENT_WISE_CLIP_GRAD1": lambda: clip_grad_desc(dml.ElementWiseClipGrad1OperatorDesc),
    "TILE": tile_desc,
    "REDUCE": reduce_desc,
    "ARGMIN": lambda: arg_desc(dml.ArgMinOperatorDesc),
    "ARGMAX": lambda: arg_desc(dml.ArgMaxOperatorDesc),
}


def test_builders_are_registered_operators():
    """Hand-written layouts for the first operators; every registered operator also runs in
    buffer mode with padded strides from its registry example (test_examples.py)."""
    from dml_jax.registry import operators

    assert {f"DML_OPERATOR_{n}" for n in BUILDERS} <= {spec.name for spec in operators()}


@pytest.mark.parametrize("name", sorted(BUILDERS))
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_buffer_mode_matches_as_strided_reference(name, data):
    desc = data.draw(BUILDERS[name]())
    extra = data.draw(st.integers(0, 3))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    op = dml.compile_operator(desc)
    inputs = [random_buffer(rng, t, extra) for t in op.input_descs]
    outputs = [sentinel_buffer(t, extra) for t in op.output_descs]
    got = op.run_buffers(inputs, outputs)
    check_buffers(op, got, reference(desc, inputs, outputs), outputs)


# --------------------------------------------------------------------------------------------
# In-place binding


PADDED = dml.TensorDesc("FLOAT32", (2, 3), (5, 1))
NHWC_2x3x2x2 = (12, 1, 6, 3)  # N, C, H, W = 2, 3, 2, 2 stored as NHWC


@pytest.mark.parametrize(
    "sizes, strides", [((2, 3), None), ((2, 3), (5, 1)), ((2, 3, 2, 2), NHWC_2x3x2x2)]
)
def test_clip_in_place_equals_separate_buffers(sizes, strides):
    t = dml.TensorDesc("FLOAT32", sizes, strides)
    op = dml.compile_operator(dml.ElementWiseClipOperatorDesc(t, t, -1.5, 2.0))
    buf = np.linspace(-4, 4, t.addressed_elements + 2, dtype=np.float32)
    (aliased,) = op.run_buffers([buf], [buf])
    (separate,) = op.run_buffers([buf], [buf.copy()])
    np.testing.assert_array_equal(aliased, separate)
    np.testing.assert_array_equal(aliased, np_write(buf, np.clip(np_read(buf, t), -1.5, 2), t))


def test_clip1_int8_in_place():
    t = dml.TensorDesc("INT8", (3, 2), (1, 4))
    op = dml.compile_operator(dml.ElementWiseClip1OperatorDesc(t, t, -3, 3))
    buf = np.arange(-6, 6, dtype=np.int8)
    (aliased,) = op.run_buffers([buf], [buf])
    np.testing.assert_array_equal(aliased, np_write(buf, np.clip(np_read(buf, t), -3, 3), t))


@pytest.mark.parametrize(
    "cls", [dml.ElementWiseClipGradOperatorDesc, dml.ElementWiseClipGrad1OperatorDesc]
)
def test_clip_grad_output_aliasing_input(cls):
    t = PADDED
    op = dml.compile_operator(cls(t, t, t, -1, 2))
    x = np.array([-2, -1, 0, 9, 9, 1, 2, 3, 9, 9], np.float32)[: t.addressed_elements + 2]
    g = np.arange(10, 20, dtype=np.float32)[: t.addressed_elements + 2]
    (aliased,) = op.run_buffers([x, g], [x])
    (separate,) = op.run_buffers([x, g], [x.copy()])
    xv, gv = np_read(x, t), np_read(g, t)
    want = np_write(x, np.where((xv > -1) & (xv < 2), gv, 0), t)
    np.testing.assert_array_equal(aliased, separate)
    np.testing.assert_array_equal(aliased, want)


# --------------------------------------------------------------------------------------------
# NHWC through strides


def nhwc_strides(n, c, h, w):
    return (h * w * c, 1, w * c, c)


@pytest.mark.parametrize("order", ["DEPTH_COLUMN_ROW", "COLUMN_ROW_DEPTH"])
def test_depth_to_space1_nhwc(order):
    n, c, h, w, b = 1, 8, 2, 3, 2
    co = c // (b * b)
    x = dml.TensorDesc("FLOAT32", (n, c, h, w), nhwc_strides(n, c, h, w))
    y = dml.TensorDesc("FLOAT32", (n, co, h * b, w * b), nhwc_strides(n, co, h * b, w * b))
    op = dml.compile_operator(dml.DepthToSpace1OperatorDesc(x, y, b, order))
    nhwc = np.arange(n * h * w * c, dtype=np.float32).reshape(n, h, w, c)
    want = np.zeros((n, h * b, w * b, co), np.float32)  # written NHWC, straight from the rule
    for i0 in range(n):
        for yy in range(h):
            for xx in range(w):
                for i in range(b):
                    for j in range(b):
                        for k in range(co):
                            if order == "DEPTH_COLUMN_ROW":
                                src = (i * b + j) * co + k
                            else:
                                src = k * b * b + i * b + j
                            want[i0, yy * b + i, xx * b + j, k] = nhwc[i0, yy, xx, src]
    out = np.full(y.addressed_elements, -1, np.float32)
    (got,) = op.run_buffers([nhwc.ravel()], [out])
    np.testing.assert_array_equal(got, want.ravel())
    text = lowered_text(op, [nhwc.ravel()], [out])
    assert "gather" not in text and "scatter" not in text


def test_reduce_sum_nhwc_spatial():
    n, c, h, w = 2, 3, 2, 2
    x = dml.TensorDesc("FLOAT32", (n, c, h, w), nhwc_strides(n, c, h, w))
    y = dml.TensorDesc("FLOAT32", (n, c, 1, 1), nhwc_strides(n, c, 1, 1))
    op = dml.compile_operator(dml.ReduceOperatorDesc("SUM", x, y, [2, 3]))
    nhwc = np.arange(n * h * w * c, dtype=np.float32).reshape(n, h, w, c)
    (got,) = op.run_buffers([nhwc.ravel()], [np.zeros(n * c, np.float32)])
    np.testing.assert_array_equal(got, nhwc.sum(axis=(1, 2)).ravel())
    text = lowered_text(op, [nhwc.ravel()], [np.zeros(n * c, np.float32)])
    assert "gather" not in text and "scatter" not in text


def test_reduce_argmax_nhwc_channels():
    n, c, h, w = 2, 3, 2, 2
    x = dml.TensorDesc("FLOAT32", (n, c, h, w), nhwc_strides(n, c, h, w))
    y = dml.TensorDesc("UINT32", (n, 1, h, w), nhwc_strides(n, 1, h, w))
    op = dml.compile_operator(dml.ReduceOperatorDesc("ARGMAX", x, y, [1]))
    nhwc = np.random.default_rng(0).permutation(n * h * w * c).astype(np.float32)
    (got,) = op.run_buffers([nhwc], [np.zeros(n * h * w, np.uint32)])
    np.testing.assert_array_equal(got, nhwc.reshape(n, h, w, c).argmax(axis=3).ravel())


# --------------------------------------------------------------------------------------------
# Lowering quality: boxes lower to slice/pad/reshape/transpose/broadcast, never to gather


NO_GATHER_LAYOUTS = {
    "packed": ((2, 3, 4), None),
    "nhwc": ((2, 3, 2, 2), NHWC_2x3x2x2),
    "padded rows": ((2, 3), (5, 1)),
    "padded every dim": ((2, 2, 3), (20, 8, 2)),
    "nested, not multiples": ((2, 2, 2), (1, 2, 5)),
    "permuted and padded": ((2, 3, 4), (1, 8, 2)),
    "size-1 dims with odd strides": ((1, 3, 1), (7, 1, 9)),
    "single element": ((1, 1), (3, 2)),
}
BROADCAST_LAYOUTS = {
    "broadcast channel": ((2, 3, 4), (4, 0, 1)),
    "broadcast scalar": ((2, 3), (0, 0)),
    "broadcast, padded, permuted": ((2, 3, 4), (1, 0, 3)),
}


@pytest.mark.parametrize("key", sorted(NO_GATHER_LAYOUTS) + sorted(BROADCAST_LAYOUTS))
def test_clip_layout_lowers_without_gather_or_scatter(key):
    sizes, strides = {**NO_GATHER_LAYOUTS, **BROADCAST_LAYOUTS}[key]
    x = dml.TensorDesc("FLOAT32", sizes, strides)
    # Outputs cannot broadcast; for those cases the output gets the input's sizes packed.
    y = dml.TensorDesc("FLOAT32", sizes, strides if key in NO_GATHER_LAYOUTS else None)
    op = dml.compile_operator(dml.ElementWiseClipOperatorDesc(x, y, -3.0, 5.0))
    ins = [np.arange(x.addressed_elements + 1, dtype=np.float32) - 4]
    outs = [sentinel_buffer(y, 2)]
    text = lowered_text(op, ins, outs)
    assert "stablehlo" in text
    assert "gather" not in text and "scatter" not in text
    want = [np_write(outs[0], np.clip(np_read(ins[0], x), -3, 5), y)]
    check_buffers(op, op.run_buffers(ins, outs), want, outs)


def test_split_padded_outputs_and_tile_broadcast_input_lower_without_gather():
    x = dml.TensorDesc("FLOAT32", (2, 4), (1, 2))
    outs_d = [dml.TensorDesc("FLOAT32", (2, 1), (3, 1)), dml.TensorDesc("FLOAT32", (2, 3), (1, 4))]
    split = dml.compile_operator(dml.SplitOperatorDesc(x, outs_d, 1))
    tile = dml.compile_operator(
        dml.TileOperatorDesc(
            dml.TensorDesc("FLOAT32", (2, 3), (0, 1)), dml.TensorDesc("FLOAT32", (4, 3)), [2, 1]
        )
    )
    for op in (split, tile):
        ins = [np.arange(t.addressed_elements, dtype=np.float32) for t in op.input_descs]
        outs = [sentinel_buffer(t, 1) for t in op.output_descs]
        text = lowered_text(op, ins, outs)
        assert "gather" not in text and "scatter" not in text
        check_buffers(op, op.run_buffers(ins, outs), reference(op.desc, ins, outs), outs)


@pytest.mark.parametrize("sizes, strides", [((3, 4), (1, 1)), ((2, 3), (3, 2)), ((2, 2), (2, 2))])
def test_irregular_input_falls_back_to_gather_and_is_correct(sizes, strides):
    x = dml.TensorDesc("FLOAT32", sizes, strides)
    y = dml.TensorDesc("FLOAT32", sizes)
    op = dml.compile_operator(dml.ElementWiseClipOperatorDesc(x, y, 0.0, 100.0))
    ins, outs = [np.arange(x.addressed_elements, dtype=np.float32)], [sentinel_buffer(y, 0)]
    assert "gather" in lowered_text(op, ins, outs)  # the no-gather checks above can fail
    want = [np_write(outs[0], np_read(ins[0], x), y)]
    check_buffers(op, op.run_buffers(ins, outs), want, outs)


def test_interleaved_write_falls_back_to_scatter():
    # Sizes {2, 3} Strides {3, 2} are one-to-one but not nested: validation rejects them for an
    # output, yet write_tensor itself stays correct through a scatter.
    t = dml.TensorDesc("FLOAT32", (2, 3), (3, 2))
    buf = np.full(t.addressed_elements + 1, -1, np.float32)
    value = np.arange(6, dtype=np.float32).reshape(2, 3) + 1
    fn = jax.jit(lambda b, v: write_tensor(b, v, t))
    assert "scatter" in fn.lower(buf, value).as_text()
    np.testing.assert_array_equal(fn(buf, value), np_write(buf, value, t))
    np.testing.assert_array_equal(
        jax.jit(lambda b: read_tensor(b, t))(np_write(buf, value, t)), value
    )


# --------------------------------------------------------------------------------------------
# Logical mode, graphs, caching


def test_logical_mode_ignores_strides():
    x = dml.TensorDesc("FLOAT32", (2, 3), (0, 1))
    op = dml.compile_operator(dml.ElementWiseClipOperatorDesc(x, x.like(strides=(5, 1)), 0.0, 4))
    arr = np.arange(-1, 5, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(op(arr), np.clip(arr, 0, 4))


def test_buffer_function_is_cached_pure_and_vmappable():
    op = dml.compile_operator(dml.ElementWiseClipOperatorDesc(PADDED, PADDED, 0.0, 4.0))
    fn = buffer_function(op)
    assert buffer_function(op) is fn
    bufs = np.arange(-8, 12, dtype=np.float32).reshape(2, 10)
    got = jax.vmap(fn)(bufs, jnp.zeros_like(bufs))[0]
    for row, g in zip(bufs, got):
        np.testing.assert_array_equal(
            g, np_write(np.zeros(10, np.float32), np.clip(np_read(row, PADDED), 0, 4), PADDED)
        )


def test_graph_runs_in_buffer_mode():
    t = PADDED
    graph = dml.GraphDesc(
        input_count=1,
        output_count=1,
        nodes=[dml.ElementWiseClipOperatorDesc(t, t, 0.0, 4.0)],
        input_edges=[dml.InputGraphEdge(0, 0, 0)],
        output_edges=[dml.OutputGraphEdge(0, 0, 0)],
    )
    g = dml.compile_graph(graph)
    buf = np.arange(-3, 7, dtype=np.float32)
    (got,) = g.run_buffers([buf], [np.full(10, 9, np.float32)])
    np.testing.assert_array_equal(
        got, np_write(np.full(10, 9, np.float32), np.clip(np_read(buf, t), 0, 4), t)
    )


def test_64bit_buffers():
    t = dml.TensorDesc("INT64", (2, 2), (1, 3))
    op_desc = dml.ElementWiseClipOperatorDesc(t, t, 0.0, 5.0)
    buf = np.arange(-2, 3, dtype=np.int64)
    with jax.enable_x64(True):
        (got,) = dml.compile_operator(op_desc).run_buffers([buf], [buf])
        np.testing.assert_array_equal(got, np_write(buf, np.clip(np_read(buf, t), 0, 5), t))


# --------------------------------------------------------------------------------------------
# Rejections


def clip_op(x=PADDED, y=PADDED):
    return dml.compile_operator(dml.ElementWiseClipOperatorDesc(x, y, 0.0, 1.0))


def test_short_input_buffer_rejected():
    with pytest.raises(
        dml.ValidationError,
        match=r"^DML_OPERATOR_ELEMENT_WISE_CLIP: InputTensor "
        r"buffer holds 7 elements, but its Sizes \{2, 3\} and Strides \{5, 1\} "
        r"address 8",
    ):
        clip_op().run_buffers([np.zeros(7, np.float32)], [np.zeros(8, np.float32)])


def test_short_output_buffer_rejected_naming_the_tensor():
    x = dml.TensorDesc("FLOAT32", (2, 4))
    outs = [dml.TensorDesc("FLOAT32", (2, 1)), dml.TensorDesc("FLOAT32", (2, 3), (4, 1))]
    op = dml.compile_operator(dml.SplitOperatorDesc(x, outs, 1))
    with pytest.raises(
        dml.ValidationError,
        match=r"^DML_OPERATOR_SPLIT: OutputTensors\[1\] buffer holds 6 elements",
    ):
        op.run_buffers(
            [np.zeros(8, np.float32)], [np.zeros(2, np.float32), np.zeros(6, np.float32)]
        )


def test_buffer_without_the_four_byte_rounding_is_accepted():
    t = dml.TensorDesc("FLOAT16", (5,))
    assert t.total_tensor_size_in_bytes == 12  # 10 bytes rounded up to a DWORD
    op = dml.compile_operator(dml.ElementWiseClipOperatorDesc(t, t, 0.0, 2.0))
    buf = np.arange(-2, 3, dtype=np.float16)
    (got,) = op.run_buffers([buf], [buf])
    np.testing.assert_array_equal(got, np.clip(buf, 0, 2))


def test_misaligned_total_tensor_size_rejected():
    with pytest.raises(
        dml.ValidationError,
        match=r"^TensorDesc\.TotalTensorSizeInBytes must be a multiple of 4, got 14",
    ):
        dml.TensorDesc("FLOAT16", (5,), total_tensor_size_in_bytes=14)


@pytest.mark.parametrize(
    "strides, reason",
    [
        ((0, 1), r"dimension 0 has size 2 and stride 0"),
        ((1, 1), r"dimension 1 \(size 3, stride 1\) steps over less than the 2 elements"),
        ((3, 2), r"dimension 0 \(size 2, stride 3\) steps over less than the 5 elements"),
    ],
)
def test_overlapping_output_strides_rejected(strides, reason):
    y = dml.TensorDesc("FLOAT32", (2, 3), strides)
    pattern = (
        r"^DML_OPERATOR_ELEMENT_WISE_CLIP: OutputTensor\.Strides \{"
        + ", ".join(map(str, strides))
        + r"\} make output elements overlap \("
        + reason
    )
    desc = dml.ElementWiseClipOperatorDesc(dml.TensorDesc("FLOAT32", (2, 3)), y, 0.0, 1.0)
    with pytest.raises(dml.ValidationError, match=pattern):
        dml.validate(desc)
    with pytest.raises(dml.ValidationError, match=pattern):
        dml.compile_operator(desc)
    # The same strides on an input are fine: inputs may broadcast and overlap.
    dml.validate(dml.ElementWiseClipOperatorDesc(y, dml.TensorDesc("FLOAT32", (2, 3)), 0.0, 1.0))


def test_overlapping_output_in_a_tensor_array_names_the_element():
    x = dml.TensorDesc("FLOAT32", (2, 2))
    outs = [dml.TensorDesc("FLOAT32", (2, 1)), dml.TensorDesc("FLOAT32", (2, 1), (0, 1))]
    with pytest.raises(
        dml.ValidationError, match=r"^DML_OPERATOR_SPLIT: OutputTensors\[1\]\.Strides \{0, 1\} make"
    ):
        dml.validate(dml.SplitOperatorDesc(x, outs, 1))


@pytest.mark.parametrize(
    "inputs, outputs, pattern",
    [
        (
            [np.zeros(10, np.float64)],
            [np.zeros(10, np.float32)],
            r"InputTensor buffer has dtype float64; its DataType FLOAT32 needs float32",
        ),
        (
            [np.zeros(10, np.float32)],
            [np.zeros(10, np.int32)],
            r"OutputTensor buffer has dtype int32",
        ),
        (
            [np.zeros((2, 5), np.float32)],
            [np.zeros(10, np.float32)],
            r"InputTensor buffer must be 1-D, got shape \(2, 5\)",
        ),
        ([[0.0] * 10], [np.zeros(10, np.float32)], r"InputTensor buffer must be a 1-D array"),
        ([], [np.zeros(10, np.float32)], r"expected 1 input buffers \(InputTensor\), got 0"),
        ([np.zeros(10, np.float32)], [], r"expected 1 output buffers \(OutputTensor\), got 0"),
    ],
)
def test_bad_buffers_rejected(inputs, outputs, pattern):
    with pytest.raises(dml.ValidationError, match=r"^DML_OPERATOR_ELEMENT_WISE_CLIP: " + pattern):
        clip_op().run_buffers(inputs, outputs)


def test_64bit_buffers_without_x64_rejected():
    t = dml.TensorDesc("INT64", (2,))
    with jax.enable_x64(True):
        op = dml.compile_operator(dml.ElementWiseClipOperatorDesc(t, t, 0.0, 5.0))
    with pytest.raises(dml.ValidationError, match=r"jax_enable_x64"):
        op.run_buffers([np.zeros(2, np.int64)], [np.zeros(2, np.int64)])


@pytest.mark.parametrize(
    "sizes, strides",
    [((2, 3), None), ((3, 2), (1, 3)), ((2, 1, 4), (4, 0, 1)), ((4, 3), (0, 2)), ((1, 5), (7, 1))],
)
def test_host_view_reads_each_element_at_its_offset(sizes, strides):
    """``tensor.host_view``: element i of the view is the flat element at sum(i_k * stride_k),
    the offsets written out here; a broadcast (stride 0) copies nothing, and the view is
    read-only."""
    from dml_jax.tensor import host_view

    desc = dml.TensorDesc("FLOAT32", sizes, strides=strides)
    flat = np.arange(desc.addressed_elements, dtype=np.float32) * 1.5
    got = host_view(flat, desc)
    assert got.shape == sizes and not got.flags.writeable
    for index in np.ndindex(*sizes):
        offset = sum(i * t for i, t in zip(index, desc.layout_strides))
        assert got[index] == flat[offset]
    assert np.shares_memory(got, flat)
