"""DML_GRAPH_DESC: validation rules, results against a NumPy graph reference, caching, tracing,
buffer mode, JSON, and what XLA's optimizer makes of small graphs (fusion shown, not claimed)."""

from __future__ import annotations

import json
import math
import re
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dml_jax as dml
from dml_jax.hlo import entry_instructions, optimized_hlo
from tests.reference import reference

F32 = "FLOAT32"
X = dml.TensorDesc(F32, (1, 2, 4, 4))  # the working shape most graphs share
SUMMED = dml.TensorDesc(F32, (1, 2, 1, 1))
HALF = dml.TensorDesc(F32, (1, 2, 4, 2))
In, Out, Mid = dml.InputGraphEdge, dml.OutputGraphEdge, dml.IntermediateGraphEdge


def clip(lo=-1.0, hi=1.0, t=X, scale_bias=None):
    return dml.ElementWiseClipOperatorDesc(t, t, lo, hi, scale_bias=scale_bias)


def reduce_sum(t=X, out=SUMMED, axes=(2, 3)):
    return dml.ReduceOperatorDesc("SUM", t, out, axes)


def clip_reduce(lo=-1.0, hi=1.0, **changes):
    """CLIP -> REDUCE(SUM over the spatial axes): the graph most tests perturb."""
    fields = {
        "input_count": 1,
        "output_count": 1,
        "nodes": (clip(lo, hi), reduce_sum()),
        "input_edges": (In(0, 0, 0),),
        "output_edges": (Out(1, 0, 0),),
        "intermediate_edges": (Mid(0, 0, 1, 0),),
        **changes,
    }
    return dml.GraphDesc(**fields)


def reference_graph(graph: dml.GraphDesc, *inputs: np.ndarray) -> tuple[np.ndarray, ...]:
    """Evaluates a graph with the NumPy operator reference, following the edges as DML does.

    Independent of dml_jax.graph: repeatedly runs any node whose inputs are all available.
    """
    values: dict[tuple[int, int], np.ndarray] = {}
    feeds: dict[tuple[int, int], np.ndarray | tuple[int, int]] = {}
    for e in graph.input_edges:
        feeds[(e.to_node_index, e.to_node_input_index)] = np.asarray(inputs[e.graph_input_index])
    for e in graph.intermediate_edges:
        feeds[(e.to_node_index, e.to_node_input_index)] = (
            e.from_node_index,
            e.from_node_output_index,
        )
    done: set[int] = set()
    while len(done) < len(graph.nodes):
        progressed = False
        for n, node in enumerate(graph.nodes):
            if n in done:
                continue
            srcs = [feeds[(n, k)] for k in range(len(node.input_slots()))]
            if any(isinstance(s, tuple) and s not in values for s in srcs):
                continue
            args = [values[s] if isinstance(s, tuple) else s for s in srcs]
            for k, y in enumerate(reference(node, *args)):
                values[(n, k)] = y
            done.add(n)
            progressed = True
        assert progressed, "reference evaluator found no runnable node"
    by_output = {
        e.graph_output_index: values[(e.from_node_index, e.from_node_output_index)]
        for e in graph.output_edges
    }
    return tuple(by_output[j] for j in range(graph.output_count))


def as_tuple(result):
    return result if isinstance(result, tuple) else (result,)


def assert_matches_reference(graph, *inputs):
    got = as_tuple(dml.compile_graph(graph)(*inputs))
    want = reference_graph(graph, *inputs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and np.dtype(g.dtype) == w.dtype
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-6, atol=1e-6)


def _fixed_input() -> np.ndarray:
    """The shared input of the result tests: the same array in every test and every run."""
    return np.random.default_rng(7).normal(size=X.sizes).astype(np.float32)


A = _fixed_input()


# ---------------------------------------------------------------------------------------------
# Results


def test_clip_reduce_matches_numpy():
    g = dml.compile_graph(clip_reduce(-0.5, 0.75))
    expected = np.clip(A, -0.5, 0.75).sum(axis=(2, 3), keepdims=True)
    np.testing.assert_allclose(np.asarray(g(A)), expected, rtol=1e-6)
    assert isinstance(g, dml.CompiledOperator)
    assert g.input_paths == ("Inputs[0]",) and g.output_paths == ("Outputs[0]",)
    assert g.input_descs == (X,) and g.output_descs == (SUMMED,)


def test_split_join_reorder_and_multiple_outputs_in_graph_output_order():
    split = dml.SplitOperatorDesc(X, (HALF, HALF), 3)
    join = dml.JoinOperatorDesc((HALF, HALF), X, 3)
    # Output edges listed out of order; nodes listed consumer first: order comes from edges.
    graph = dml.GraphDesc(
        1,
        3,
        (join, clip(0.0, 0.5, HALF), split),
        (In(0, 2, 0),),
        (Out(1, 0, 2), Out(0, 0, 0), Out(2, 0, 1)),
        (Mid(2, 0, 0, 1), Mid(2, 1, 0, 0), Mid(2, 1, 1, 0)),
    )
    swapped, left, clipped = dml.compile_graph(graph)(A)
    np.testing.assert_array_equal(
        np.asarray(swapped), np.concatenate([A[..., 2:], A[..., :2]], axis=3)
    )
    np.testing.assert_array_equal(np.asarray(left), A[..., :2])
    np.testing.assert_array_equal(np.asarray(clipped), np.clip(A[..., 2:], 0.0, 0.5))
    assert_matches_reference(graph, A)


def test_graph_input_feeding_two_nodes_and_an_unused_graph_input():
    graph = dml.GraphDesc(
        3,
        2,
        (clip(0.0, 1.0), clip(-1.0, 0.0)),
        (In(2, 0, 0), In(2, 1, 0)),  # Inputs[0] and Inputs[1] feed nothing
        (Out(0, 0, 0), Out(1, 0, 1)),
    )
    g = dml.compile_graph(graph)
    assert g.input_descs == (None, None, X)
    hi, lo = g("ignored", np.zeros(3), A)
    np.testing.assert_array_equal(np.asarray(hi), np.clip(A, 0.0, 1.0))
    np.testing.assert_array_equal(np.asarray(lo), np.clip(A, -1.0, 0.0))
    assert_matches_reference(graph, None, None, A)


def test_explicit_packed_strides_equal_null_strides_across_edges():
    packed = X.like(strides=(32, 16, 4, 1))
    graph = dml.GraphDesc(
        1,
        2,
        (clip(), reduce_sum(t=packed), clip(t=packed)),
        (In(0, 0, 0), In(0, 2, 0)),
        (Out(1, 0, 0), Out(2, 0, 1)),
        (Mid(0, 0, 1, 0),),
    )
    summed, clipped = dml.compile_graph(graph)(A)
    np.testing.assert_allclose(
        np.asarray(summed), np.clip(A, -1, 1).sum((2, 3), keepdims=True), rtol=1e-6
    )
    np.testing.assert_array_equal(np.asarray(clipped), np.clip(A, -1, 1))


def test_round_trips_and_tile_clip_match_reference(rng):
    deep = dml.TensorDesc(F32, (1, 8, 2, 2))
    wide = dml.TensorDesc(F32, (1, 2, 4, 4))
    d2s = dml.DepthToSpace1OperatorDesc(deep, wide, 2, "DEPTH_COLUMN_ROW")
    s2d = dml.SpaceToDepth1OperatorDesc(wide, deep, 2, "COLUMN_ROW_DEPTH")
    x = rng.normal(size=deep.sizes).astype(np.float32)
    mixed = dml.GraphDesc(1, 1, (d2s, s2d), (In(0, 0, 0),), (Out(1, 0, 0),), (Mid(0, 0, 1, 0),))
    assert_matches_reference(mixed, x)
    small = dml.TensorDesc(F32, (1, 2, 2, 2))
    tile = dml.TileOperatorDesc(small, X, (1, 1, 2, 2))
    tiled = dml.GraphDesc(
        1,
        1,
        (tile, clip(0.0, 1.0, scale_bias=dml.ScaleBias(2.0, 0.5))),
        (In(0, 0, 0),),
        (Out(1, 0, 0),),
        (Mid(0, 0, 1, 0),),
    )
    assert_matches_reference(tiled, A[:, :, :2, :2])


@st.composite
def random_dags(draw):
    """A random DAG over CLIP (A -> A), SPLIT (B -> A, A) and JOIN (A, A -> B) nodes.

    A = (1, 2, 4, 2), B = (1, 2, 4, 4). Graph input 0 is an A, graph input 1 a B. Every node
    output nobody consumes becomes a graph output, so every node contributes. Node indices are
    shuffled so the compiled order must come from the edges.
    """
    kinds = draw(st.lists(st.sampled_from(["clip", "split", "join"]), min_size=1, max_size=8))
    pool = {"A": [("in", 0)], "B": [("in", 1)]}
    nodes, wiring = [], []
    for kind in kinds:
        if kind == "clip":
            lo = draw(st.sampled_from([-1.0, -0.5, 0.0]))
            sb = draw(st.sampled_from([None, dml.ScaleBias(2.0, -0.25)]))
            desc, need, make = clip(lo, lo + 1.0, HALF, sb), ["A"], ["A"]
        elif kind == "split":
            desc, need, make = dml.SplitOperatorDesc(X, (HALF, HALF), 3), ["B"], ["A", "A"]
        else:
            desc, need, make = dml.JoinOperatorDesc((HALF, HALF), X, 3), ["A", "A"], ["B"]
        srcs = [draw(st.sampled_from(pool[shape])) for shape in need]
        n = len(nodes)
        nodes.append(desc)
        wiring.append(srcs)
        for k, shape in enumerate(make):
            pool[shape].append(("node", n, k))
    perm = draw(st.permutations(range(len(nodes))))
    new = {old: new for new, old in enumerate(perm)}
    inputs, mids, consumed = [], [], set()
    for n, srcs in enumerate(wiring):
        for k, s in enumerate(srcs):
            if s[0] == "in":
                inputs.append(In(s[1], new[n], k))
            else:
                mids.append(Mid(new[s[1]], s[2], new[n], k))
                consumed.add((s[1], s[2]))
    outs = [
        (n, k)
        for n, d in enumerate(nodes)
        for k in range(len(d.output_slots()))
        if (n, k) not in consumed
    ]
    outputs = [Out(new[n], k, j) for j, (n, k) in enumerate(outs)]
    ordered = [nodes[old] for old in perm]
    return dml.GraphDesc(
        2,
        len(outputs),
        ordered,
        draw(st.permutations(inputs)),
        draw(st.permutations(outputs)),
        draw(st.permutations(mids)),
    )


@settings(max_examples=12)
@given(st.data())
def test_random_dags_match_reference(data):
    graph = data.draw(random_dags())
    a = A[..., :2] * 1.5
    assert_matches_reference(graph, a, A)


# ---------------------------------------------------------------------------------------------
# Validation: one row per rule, with the path it names


def _graph(**changes):
    return clip_reduce(**changes)


BAD_GRAPHS = [
    (
        _graph(nodes=(clip(), reduce_sum(out=X))),
        r"^DML_GRAPH: Nodes\[1\]: DML_OPERATOR_REDUCE: OutputTensor\.Sizes\[2\]",
    ),
    (
        _graph(input_edges=(In(1, 0, 0),)),
        (
            r"^DML_GRAPH: InputEdges\[0\]\.GraphInputIndex must be < "
            r"InputCount \(1\), got 1"
        ),
    ),
    (
        _graph(input_edges=(In(0, 2, 0),)),
        (
            r"^DML_GRAPH: InputEdges\[0\]\.ToNodeIndex must be < "
            r"NodeCount \(2\), got 2"
        ),
    ),
    (
        _graph(input_edges=(In(0, 0, 1),)),
        (
            r"^DML_GRAPH: InputEdges\[0\]\.ToNodeInputIndex must be "
            r"< the input tensor count of Nodes\[0\]"
        ),
    ),
    (
        _graph(intermediate_edges=(Mid(5, 0, 1, 0),)),
        r"^DML_GRAPH: IntermediateEdges\[0\]\.FromNodeIndex must be < NodeCount",
    ),
    (
        _graph(intermediate_edges=(Mid(0, 1, 1, 0),)),
        r"^DML_GRAPH: IntermediateEdges\[0\]\.FromNodeOutputIndex must be < the output tensor",
    ),
    (
        _graph(intermediate_edges=(Mid(0, 0, 1, 3),)),
        (
            r"^DML_GRAPH: IntermediateEdges\[0\]\.ToNodeInputIndex must be < the "
            r"input tensor count "
            r"of Nodes\[1\] \(DML_OPERATOR_REDUCE\)"
        ),
    ),
    (
        _graph(output_edges=(Out(1, 0, 1),)),
        r"^DML_GRAPH: OutputEdges\[0\]\.GraphOutputIndex must be < OutputCount \(1\), got 1",
    ),
    (_graph(output_edges=(Out(1, 1, 0),)), r"^DML_GRAPH: OutputEdges\[0\]\.FromNodeOutputIndex"),
    (
        _graph(input_edges=(In(0, 0, 0), In(0, 1, 0))),
        (
            r"^DML_GRAPH: IntermediateEdges\[0\]\.ToNodeInputIndex feeds Nodes\[1\]\.InputTensor "
            r"\(input 0 of DML_OPERATOR_REDUCE\), which InputEdges\[1\] already feeds"
        ),
    ),
    (
        _graph(output_edges=(Out(1, 0, 0), Out(1, 0, 0))),
        (
            r"^DML_GRAPH: OutputEdges\[1\]\.GraphOutputIndex writes Outputs\[0\], "
            r"which OutputEdges\[0\] "
            r"already writes"
        ),
    ),
    (_graph(output_count=2), r"^DML_GRAPH: Outputs\[1\] is not written by any OutputEdges entry"),
    (
        _graph(input_edges=()),
        (
            r"^DML_GRAPH: Nodes\[0\]\.InputTensor \(input 0 of "
            r"DML_OPERATOR_ELEMENT_WISE_CLIP\) is not fed"
        ),
    ),
    (_graph(intermediate_edges=()), r"^DML_GRAPH: Nodes\[1\]\.InputTensor .* is not fed"),
    (
        _graph(
            nodes=(clip(), clip(), clip()),
            output_edges=(Out(0, 0, 0),),
            intermediate_edges=(Mid(1, 0, 2, 0), Mid(2, 0, 1, 0)),
        ),
        (
            r"^DML_GRAPH: IntermediateEdges form a cycle: Nodes\[1\] \(IntermediateEdges\[0\]\) -> "
            r"Nodes\[2\] \(IntermediateEdges\[1\]\) -> Nodes\[1\]"
        ),
    ),
    (
        _graph(
            nodes=(clip(), clip()),
            output_edges=(Out(0, 0, 0),),
            intermediate_edges=(Mid(1, 0, 1, 0),),
        ),
        r"^DML_GRAPH: IntermediateEdges form a cycle: Nodes\[1\]",
    ),
    (
        _graph(nodes=(clip(), reduce_sum(), clip()), input_edges=(In(0, 0, 0), In(0, 2, 0))),
        r"^DML_GRAPH: Nodes\[2\] \(DML_OPERATOR_ELEMENT_WISE_CLIP\) contributes to no graph output",
    ),
    (
        _graph(nodes=(clip(t=dml.TensorDesc("FLOAT16", X.sizes)), reduce_sum())),
        (
            r"^DML_GRAPH: IntermediateEdges\[0\] joins Nodes\[0\]\.OutputTensor to Nodes\[1\]\."
            r"InputTensor: Nodes\[1\]\.InputTensor\.DataType must equal Nodes\[0\]\.OutputTensor\."
            r"DataType \(FLOAT16\), got FLOAT32"
        ),
    ),
    (
        _graph(nodes=(clip(t=HALF), reduce_sum())),
        (
            r"^DML_GRAPH: IntermediateEdges\[0\] joins .*: "
            r"Nodes\[1\]\.InputTensor\.Sizes must equal "
            r"Nodes\[0\]\.OutputTensor\.Sizes \(\{1, 2, 4, 2\}\), got \{1, 2, 4, 4\}"
        ),
    ),
    (
        _graph(nodes=(clip(), reduce_sum(t=X.like(sizes=X.sizes, strides=(64, 32, 8, 1))))),
        (
            r"^DML_GRAPH: IntermediateEdges\[0\] joins .*InputTensor\.Strides must equal "
            r".*OutputTensor\.Strides \(\{32, 16, 4, 1\}\), got \{64, 32, 8, 1\}"
        ),
    ),
    (
        _graph(nodes=(clip(), reduce_sum(t=X.like(total_tensor_size_in_bytes=256)))),
        (
            r"^DML_GRAPH: IntermediateEdges\[0\] joins .*InputTensor\.TotalTensorSizeInBytes must "
            r"equal .*OutputTensor\.TotalTensorSizeInBytes \(128\), got 256"
        ),
    ),
    (
        _graph(nodes=(clip(), reduce_sum(t=X.like(flags="OWNED_BY_DML")))),
        (
            r"^DML_GRAPH: IntermediateEdges\[0\] feeds Nodes\[1\]\.InputTensor, which is flagged "
            r"OWNED_BY_DML"
        ),
    ),
    (
        _graph(
            nodes=(clip(), reduce_sum(), reduce_sum(t=X.like(strides=(64, 32, 8, 1)))),
            input_edges=(In(0, 0, 0), In(0, 2, 0)),
            output_count=2,
            output_edges=(Out(1, 0, 0), Out(2, 0, 1)),
        ),
        (
            r"^DML_GRAPH: InputEdges\[1\] feeds Inputs\[0\] to "
            r"Nodes\[2\]\.InputTensor: Nodes\[2\]\."
            r"InputTensor\.Strides must equal Nodes\[0\]\.InputTensor\.Strides "
            r"\(\{32, 16, 4, 1\}\), "
            r"which InputEdges\[0\] feeds from the same graph input, got \{64, 32, 8, 1\}"
        ),
    ),
]


@pytest.mark.parametrize("graph, pattern", BAD_GRAPHS)
def test_graph_rejects(graph, pattern):
    with pytest.raises(dml.ValidationError, match=pattern):
        dml.validate_graph(graph)
    with pytest.raises(dml.ValidationError, match=pattern):
        dml.compile_graph(graph)


BAD_CONSTRUCTION = [
    (
        lambda: _graph(nodes=(clip(), "REDUCE")),
        r"^DML_GRAPH: Nodes\[1\] must be an operator description, a ConstantDataNode or a FunctionNode, got str",
    ),
    (lambda: _graph(nodes=()), r"^DML_GRAPH: Nodes must not be empty"),
    (lambda: _graph(output_count=0), r"^DML_GRAPH: OutputCount must be >= 1, got 0"),
    (lambda: _graph(input_count="1"), r"^DML_GRAPH: InputCount must be an integer"),
    (
        lambda: _graph(input_edges=((0, 0, 0),)),
        r"^DML_GRAPH: InputEdges\[0\] must be an InputGraphEdge, got tuple",
    ),
    (
        lambda: _graph(intermediate_edges=(In(0, 0, 0),)),
        r"^DML_GRAPH: IntermediateEdges\[0\] must be an IntermediateGraphEdge",
    ),
    (lambda: In(0, -1, 0), r"^DML_INPUT_GRAPH_EDGE_DESC: ToNodeIndex must be >= 0, got -1"),
    (
        lambda: Mid(0, 0, 1.5, 0),
        (
            r"^DML_INTERMEDIATE_GRAPH_EDGE_DESC: ToNodeIndex must be an "
            r"integer"
        ),
    ),
    (lambda: Out(True, 0, 0), r"^DML_OUTPUT_GRAPH_EDGE_DESC: FromNodeIndex must be an integer"),
]


@pytest.mark.parametrize("build, pattern", BAD_CONSTRUCTION)
def test_graph_construction_rejects(build, pattern):
    with pytest.raises(dml.ValidationError, match=pattern):
        build()


def test_nodes_are_validated_at_the_graph_feature_level():
    small = dml.TensorDesc("UINT32", (1, 2, 1, 1))
    argmax = dml.ArgMaxOperatorDesc(X, small, (2, 3))
    graph = dml.GraphDesc(1, 1, (argmax,), (In(0, 0, 0),), (Out(0, 0, 0),))
    with pytest.raises(dml.ValidationError, match=r"^DML_GRAPH: Nodes\[0\]: .*3_0"):
        dml.compile_graph(graph, feature_level="2_1")
    g = dml.compile_graph(graph, feature_level="3_0")
    want = A.reshape(1, 2, 16).argmax(axis=2).reshape(1, 2, 1, 1).astype(np.uint32)
    np.testing.assert_array_equal(np.asarray(g(A)), want)


def test_bad_inputs_rejected_before_tracing():
    g = dml.compile_graph(clip_reduce(-3.0, 3.0))
    before = g.traces
    with pytest.raises(
        dml.ValidationError,
        match=r"^DML_GRAPH: expected 1 input arrays "
        r"\(Inputs\[0\]\), got 2",
    ):
        g(A, A)
    with pytest.raises(
        dml.ValidationError,
        match=r"^DML_GRAPH: Inputs\[0\] expects an array of "
        r"shape \(1, 2, 4, 4\)",
    ):
        g(A[0])
    with pytest.raises(
        dml.ValidationError,
        match=r"^DML_GRAPH: Inputs\[0\] expects dtype "
        r"float32",
    ):
        g(A.astype(np.float16))
    assert g.traces == before


def test_64bit_tensor_inside_the_graph_needs_x64():
    wide = dml.TensorDesc("INT64", (1, 2, 1, 1))
    argmax = dml.ArgMaxOperatorDesc(X, wide, (2, 3))
    # INT64 appears only on the graph output: the check still covers it.
    graph = dml.GraphDesc(
        1, 1, (clip(), argmax), (In(0, 0, 0),), (Out(1, 0, 0),), (Mid(0, 0, 1, 0),)
    )
    with (
        jax.enable_x64(False),
        pytest.raises(dml.ValidationError, match=r"^DML_GRAPH: .*INT64.*jax_enable_x64"),
    ):
        dml.compile_graph(graph)
    with jax.enable_x64(True):
        got = dml.compile_graph(graph)(A)
        assert got.dtype == np.int64
        np.testing.assert_array_equal(np.asarray(got), reference_graph(graph, A)[0])


# ---------------------------------------------------------------------------------------------
# Caching and tracing


def test_equal_graphs_share_one_compiled_object_and_trace_once():
    first = clip_reduce(-0.125, 0.875)  # bounds no other test uses: a fresh entry
    again = clip_reduce(-0.125, 0.875)
    assert first == again and first is not again and hash(first) == hash(again)
    g = dml.compile_graph(first)
    assert dml.compile_graph(again) is g
    assert dml.compile_graph(again, feature_level="6_4") is g
    assert dml.compile_graph(again, feature_level="5_0") is not g
    assert dml.compile_operator(clip(-0.125, 0.875)) is dml.compile_operator(clip(-0.125, 0.875))
    assert g.traces == 0  # compiling traces nothing
    y1 = g(A)
    assert g.traces == 1
    y2 = g(jnp.asarray(A) + 1)
    g(A)
    assert g.traces == 1  # same shapes: the jitted program is reused
    assert not np.array_equal(np.asarray(y1), np.asarray(y2))


def test_fn_supports_jit_grad_and_vmap():
    g = dml.compile_graph(clip_reduce(-0.5, 0.5))
    np.testing.assert_allclose(np.asarray(jax.jit(g.fn)(A)), np.asarray(g(A)), rtol=1e-6)
    grad = jax.grad(lambda x: g.fn(x).sum())(A)
    # CLIP_GRAD's rule: the gradient passes only strictly inside (Min, Max).
    np.testing.assert_array_equal(np.asarray(grad), ((A > -0.5) & (A < 0.5)).astype(np.float32))
    batch = np.stack([A, -A, 2 * A])
    stacked = np.stack([np.asarray(g(b)) for b in batch])
    np.testing.assert_allclose(np.asarray(jax.vmap(g.fn)(batch)), stacked, rtol=1e-6)
    assert g.differentiable


def test_two_hundred_chained_nodes_compile_quickly():
    count = 200
    nodes = [
        clip(-float(count - i), float(count - i), scale_bias=dml.ScaleBias(1.0, 0.5))
        if i % 3
        else dml.SplitOperatorDesc(X, (X,), 1)
        for i in range(count)
    ]
    graph = dml.GraphDesc(
        1,
        1,
        nodes,
        (In(0, 0, 0),),
        (Out(count - 1, 0, 0),),
        [Mid(i, 0, i + 1, 0) for i in range(count - 1)],
    )
    start = time.perf_counter()
    g = dml.compile_graph(graph)
    got = jax.block_until_ready(g(A))
    elapsed = time.perf_counter() - start
    assert elapsed < 10.0, f"200-node graph took {elapsed:.1f} s to validate, trace and compile"
    np.testing.assert_allclose(np.asarray(got), reference_graph(graph, A)[0], rtol=1e-6)
    # XLA fuses the chain: one kernel reads the input, and there are far fewer kernels than
    # nodes (one on CPU; a GPU backend may cut a chain this long into a few fusions).
    f = fused(graph, A)
    assert len(f.readers[0]) == 1, f.work
    assert len(f.work) <= count // 20, f.work


# ---------------------------------------------------------------------------------------------
# Buffer mode


def test_buffer_mode_reads_strided_inputs_and_keeps_unaddressed_output_elements(rng):
    padded = X.like(sizes=X.sizes, strides=(40, 20, 5, 1))  # one padding element per row
    out = SUMMED.like(sizes=SUMMED.sizes, strides=(4, 2, 1, 1))  # every other element
    nodes = (dml.ElementWiseClipOperatorDesc(padded, X, -1.0, 1.0), reduce_sum(out=out))
    graph = dml.GraphDesc(2, 1, nodes, (In(1, 0, 0),), (Out(1, 0, 0),), (Mid(0, 0, 1, 0),))
    g = dml.compile_graph(graph)
    source = rng.normal(size=40).astype(np.float32)
    old = np.full(4, -7.0, np.float32)
    (new,) = g.run_buffers([None, source], [old])
    logical = np.lib.stride_tricks.as_strided(source, X.sizes, [4 * s for s in padded.strides])
    want = old.copy()
    want[[0, 2]] = np.clip(logical, -1, 1).sum(axis=(2, 3)).ravel()
    # atol: sums of 16 values in [-1, 1] in another order than NumPy's differ by units of 1's
    # last place (6e-8), which a sum near 0 cannot absorb relatively (one draw: 0.0175835 for
    # 0.0175836).
    np.testing.assert_allclose(np.asarray(new), want, rtol=1e-6, atol=1e-6)
    with pytest.raises(dml.ValidationError, match=r"^DML_GRAPH: expected 2 input buffers"):
        g.run_buffers([source], [old])


# ---------------------------------------------------------------------------------------------
# JSON

T = {"DataType": "FLOAT32", "Sizes": [1, 2, 4, 4]}
JSON_GRAPH = {
    "type": "DML_GRAPH",
    "InputCount": 1,
    "OutputCount": 1,
    "Nodes": [
        {
            "Name": "clip",
            "type": "ELEMENT_WISE_CLIP",
            "desc": {"InputTensor": T, "OutputTensor": T, "Min": -1, "Max": 1},
        },
        {
            "Name": "sum",
            "type": "DML_OPERATOR_REDUCE",
            "desc": {
                "Function": "SUM",
                "InputTensor": T,
                "AxisCount": 2,
                "Axes": [2, 3],
                "OutputTensor": {"DataType": "FLOAT32", "Sizes": [1, 2, 1, 1]},
            },
        },
    ],
    "InputEdges": [{"GraphInputIndex": 0, "ToNodeIndex": "clip", "ToNodeInputIndex": 0}],
    "OutputEdges": [
        {"FromNodeIndex": 1, "FromNodeOutputIndex": 0, "GraphOutputIndex": 0, "Name": "result"}
    ],
    "IntermediateEdges": [
        {
            "FromNodeIndex": "clip",
            "FromNodeOutputIndex": 0,
            "ToNodeIndex": "sum",
            "ToNodeInputIndex": 0,
        }
    ],
}


def test_graph_from_json_builds_the_same_graph():
    reduce = dml.ReduceOperatorDesc("SUM", X, SUMMED, (2, 3), axis_count=2)
    assert dml.graph_from_json(JSON_GRAPH) == clip_reduce(nodes=(clip(), reduce))


def test_graph_to_json_is_read_back_as_the_same_graph():
    reduce = dml.ReduceOperatorDesc("SUM", X, SUMMED, (2, 3), axis_count=2)
    graph = clip_reduce(nodes=(clip(), reduce))
    written = dml.graph_to_json(graph)
    assert written["type"] == "DML_GRAPH" and written["IntermediateEdges"] == [
        {"FromNodeIndex": 0, "FromNodeOutputIndex": 0, "ToNodeIndex": 1, "ToNodeInputIndex": 0}
    ]
    assert dml.graph_from_json(json.loads(json.dumps(written))) == graph
    # strided tensors, a fused activation with attributes, an absent optional tensor
    a = dml.TensorDesc("FLOAT32", (2, 3, 4), strides=(12, 1, 3))
    out = dml.TensorDesc("FLOAT32", (2, 3, 3))
    gemm = dml.GemmOperatorDesc(
        a, a, None, out, trans_b="TRANSPOSE", alpha=0.5,
        fused_activation=dml.ActivationSoftmax1OperatorDesc(axes=(2,)),
    )  # fmt: skip
    graph = dml.GraphDesc(
        1, 1, [gemm], [dml.InputGraphEdge(0, 0, 0), dml.InputGraphEdge(0, 0, 1)],
        [dml.OutputGraphEdge(0, 0, 0)],
    )  # fmt: skip
    assert dml.graph_from_json(json.loads(json.dumps(dml.graph_to_json(graph)))) == graph
    with pytest.raises(dml.ValidationError, match="expected a GraphDesc"):
        dml.graph_to_json(gemm)


def test_graph_from_json_single_dispatchable_is_a_one_node_graph():
    half = {"DataType": "FLOAT32", "Sizes": [1, 2, 4, 2]}
    obj = {
        "type": "SPLIT",
        "dmlCompileType": "DmlCompileGraph",
        "desc": {"InputTensor": T, "OutputCount": 2, "OutputTensors": [half, half], "Axis": 3},
    }
    graph = dml.graph_from_json(obj)
    split = dml.SplitOperatorDesc(X, (HALF, HALF), 3, output_count=2)
    assert graph == dml.GraphDesc(1, 2, (split,), (In(0, 0, 0),), (Out(0, 0, 0), Out(0, 1, 1)))
    _, right = dml.compile_graph(graph)(A)
    np.testing.assert_array_equal(np.asarray(right), A[..., 2:])


def _with(path, value):
    import copy

    obj = copy.deepcopy(JSON_GRAPH)
    *head, last = path
    target = obj
    for key in head:
        target = target[key]
    if value is KeyError:
        del target[last]
    else:
        target[last] = value
    return obj


BAD_JSON = [
    (
        _with(("IntermediateEdges", 0, "ToNodeIndex"), "summ"),
        (
            r"^DML_GRAPH: IntermediateEdges\[0\]\.ToNodeIndex names no node: 'summ' \(node names: "
            r"clip, sum\)"
        ),
    ),
    (
        _with(("InputEdges", 0, "ToNodeInputIndex"), KeyError),
        r"^DML_GRAPH: InputEdges\[0\]\.ToNodeInputIndex is required",
    ),
    (
        _with(("InputEdges", 0, "ToNodeInput"), 0),
        (
            r"^DML_GRAPH: InputEdges\[0\] has unknown "
            r"member 'ToNodeInput'"
        ),
    ),
    (
        _with(("OutputEdges", 0, "GraphOutputIndex"), -1),
        r"^DML_GRAPH: OutputEdges\[0\]\.GraphOutputIndex must be >= 0",
    ),
    (
        _with(("Nodes", 1, "desc", "Axes"), [2, "x"]),
        r"^DML_GRAPH: Nodes\[1\]: DML_OPERATOR_REDUCE: desc\.Axes\[1\] must be an integer",
    ),
    (_with(("Nodes", 1, "Name"), "clip"), r"^DML_GRAPH: Nodes\[1\]\.Name 'clip' is already"),
    (_with(("OutputCount",), KeyError), r"^DML_GRAPH: OutputCount is required"),
    (_with(("Edges",), []), r"^DML_GRAPH: unknown member 'Edges'"),
    (_with(("dmlCompileType",), "Fast"), r"^DML_GRAPH: dmlCompileType must be one of"),
    ([1, 2], r"^DML_GRAPH: a graph must be a JSON object"),
]


@pytest.mark.parametrize("obj, pattern", BAD_JSON)
def test_graph_from_json_rejects(obj, pattern):
    with pytest.raises(dml.ValidationError, match=pattern):
        dml.graph_from_json(obj)


# ---------------------------------------------------------------------------------------------
# Fusion: what the optimized program does, asserted in terms that hold on every backend (how
# many kernels XLA makes, and their kinds, differ between CPU and GPU; docs/graphs.md lists the
# CPU kernels). A graph run node by node would read its input in one kernel and hand each node's
# full-size result to the next kernel through memory; these tests fail on that.


def _elements(shape: str) -> int:
    """Elements of an HLO result type, e.g. ``f32[1,2,4,4]{3,2,1,0}`` (tuples: summed)."""
    total = 0
    for dims in re.findall(r"\w+\[([\d,]*)\]", shape):
        total += math.prod(int(d) for d in dims.split(",") if d)
    return total


class Fused(NamedTuple):
    work: tuple  # the ENTRY computation's kernels, copies and unfused operations
    readers: tuple  # per graph input: the instructions that read it
    between: tuple  # instructions whose result another instruction reads (buffers in memory)


def fused(graph, *inputs) -> Fused:
    """Runs ``graph`` as one program and reports what its optimized HLO reads and writes."""
    g = dml.compile_graph(graph)
    jax.block_until_ready(g(*inputs))
    jax.block_until_ready(g(*inputs))
    assert g.traces == 1  # one program, traced once, reused
    work = entry_instructions(optimized_hlo(g, *inputs))
    readers = tuple(
        tuple(i for i in work if f"parameter({k})" in i.operands) for k in range(len(inputs))
    )
    between = tuple(i for i in work if any(i.name in j.operands for j in work))
    return Fused(work, readers, between)


def assert_one_pass(graph, *inputs, intermediate: int) -> Fused:
    """One kernel reads each graph input, and no buffer passed between kernels is as large as
    the graph's intermediate tensors (``intermediate`` elements): the nodes are fused."""
    f = fused(graph, *inputs)
    for k, readers in enumerate(f.readers):
        assert len(readers) == 1, (k, f.work)
    large = [i for i in f.between if _elements(i.shape) >= intermediate]
    assert not large, f.work
    return f


def test_fusion_clip_reduce_reads_the_input_once():
    # Bounds no other test uses: compile_graph caches by description and ``fused`` expects one
    # trace of its own (with the default bounds it failed in a full parallel run on an H100 and
    # passed alone).
    f = assert_one_pass(clip_reduce(-0.625, 0.625), A, intermediate=A.size)
    # The one kernel that reads the input writes fewer elements than it reads: it clamps and
    # sums in the same pass, and the clamped tensor never exists in memory.
    (reader,) = f.readers[0]
    assert _elements(reader.shape) < A.size


def test_fusion_checks_fail_for_a_graph_run_node_by_node(monkeypatch):
    """The checks are not vacuous: with every node's result handed on through memory (a host
    callback XLA cannot fuse), the clamped tensor is written and read back, and they fail."""
    import dml_jax.graph.tracing as graph_module

    def node_by_node(graph, plan, counter, *options):
        def lowered(*arrays):
            counter[0] += 1
            values = {}
            for n in plan.order:
                args = [
                    arrays[s[1]] if s[0] == "input" else values[(s[1], s[2])]
                    for s in plan.sources[n]
                ]
                for k, y in enumerate(plan.specs[n].lower(graph.nodes[n], *args)):
                    like = jax.ShapeDtypeStruct(y.shape, y.dtype)
                    values[(n, k)] = jax.pure_callback(lambda v: v, like, y)
            return tuple(values[src] for src in plan.outputs)

        return lowered

    monkeypatch.setattr(graph_module, "_graph_function", node_by_node)
    graph = clip_reduce(-0.125, 0.125)  # a graph no other test compiles (compile_graph caches)
    try:
        with pytest.raises(AssertionError):
            assert_one_pass(graph, A, intermediate=A.size)
    finally:
        graph_module._compile_graph_cached.cache_clear()


def test_fusion_tile_clip_reads_the_input_once():
    small = dml.TensorDesc(F32, (1, 2, 2, 2))
    graph = dml.GraphDesc(
        1,
        1,
        (dml.TileOperatorDesc(small, X, (1, 1, 2, 2)), clip()),
        (In(0, 0, 0),),
        (Out(1, 0, 0),),
        (Mid(0, 0, 1, 0),),
    )
    # The tiled tensor (X-sized) is never written between kernels: the tile is a broadcast
    # inside the kernel that clamps.
    assert_one_pass(graph, A[:, :, :2, :2], intermediate=A.size)


def _split_join(order):
    split = dml.SplitOperatorDesc(X, (HALF, HALF), 3)
    join = dml.JoinOperatorDesc((HALF, HALF), X, 3)
    mids = tuple(Mid(0, k, 1, order[k]) for k in range(2))
    return dml.GraphDesc(1, 1, (split, join), (In(0, 0, 0),), (Out(1, 0, 0),), mids)


def test_fusion_split_join_round_trips():
    half = math.prod(HALF.sizes)
    for order in ((0, 1), (1, 0)):
        # In order the slices and concatenate cancel (CPU: one copy); reordered, slices feed a
        # concatenate in one kernel. Either way neither half is written to memory.
        assert_one_pass(_split_join(order), A, intermediate=half)


def test_fusion_depth_space_round_trips(rng):
    deep = dml.TensorDesc(F32, (1, 8, 2, 2))

    def round_trip(first, second):
        d2s = dml.DepthToSpace1OperatorDesc(deep, X, 2, first)
        s2d = dml.SpaceToDepth1OperatorDesc(X, deep, 2, second)
        return dml.GraphDesc(1, 1, (d2s, s2d), (In(0, 0, 0),), (Out(1, 0, 0),), (Mid(0, 0, 1, 0),))

    x = rng.normal(size=deep.sizes).astype(np.float32)
    for order in ("DEPTH_COLUMN_ROW", "COLUMN_ROW_DEPTH"):
        graph = round_trip(order, order)
        np.testing.assert_array_equal(np.asarray(dml.compile_graph(graph)(x)), x)
        assert_one_pass(graph, x, intermediate=x.size)  # the transposes cancel
    # Different orders are a channel permutation: one reordering pass, no X-sized buffer between.
    assert_one_pass(round_trip("DEPTH_COLUMN_ROW", "COLUMN_ROW_DEPTH"), x, intermediate=x.size)


def test_example_pipeline_runs_and_reads_the_image_once(capsys):
    import runpy
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "examples" / "graph_pipeline.py"
    runpy.run_path(str(path), run_name="__main__")  # asserts against its NumPy pipeline
    out = capsys.readouterr().out
    assert "matches the NumPy pipeline" in out
    # SPACE_TO_DEPTH1, CLIP and REDUCE(AVERAGE) share the one kernel that reads the image.
    assert "; 1 of them (" in out and out.count("reads the image") == 2


def test_function_node_runs_between_operator_nodes_and_has_no_json_form():
    """A ``graph.FunctionNode`` (a JAX function where DirectML has no operator) takes and gives
    edges like an operator node; the graph then has no DML_GRAPH_DESC form."""
    from dml_jax.graph import FunctionNode
    from dml_jax.graph_json import graph_to_json

    t = dml.TensorDesc("FLOAT32", [2, 3])
    relu = dml.ActivationReluOperatorDesc(t, t)
    cumsum = FunctionNode("cumsum", (t,), (t,), lambda x: (jnp.cumsum(x, axis=1),))
    graph = dml.GraphDesc(
        input_count=1,
        output_count=1,
        nodes=(relu, cumsum),
        input_edges=(dml.InputGraphEdge(0, 0, 0),),
        output_edges=(dml.OutputGraphEdge(1, 0, 0),),
        intermediate_edges=(dml.IntermediateGraphEdge(0, 0, 1, 0),),
    )
    x = np.array([[1, -2, 3], [-1, 5, -6]], np.float32)
    got = dml.compile_graph(graph)(x)
    np.testing.assert_array_equal(np.asarray(got), np.cumsum(np.maximum(x, 0), axis=1))
    assert cumsum.operator_type == "JAX:cumsum"
    with pytest.raises(dml.ValidationError, match=r"JAX:cumsum is computed by JAX"):
        graph_to_json(graph)
