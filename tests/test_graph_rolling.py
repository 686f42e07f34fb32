"""Repeated blocks of a graph traced as one loop (``compile_graph(roll_repeats=True)``,
``dml_jax.graph.rolling``): which runs are rolled, and that the rolled graph computes what the
graph computes (against the NumPy graph reference and the graph traced block by block)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import dml_jax as dml
from tests.test_graph import reference_graph

F32 = "FLOAT32"
M, K = 4, 8
ROW = dml.TensorDesc(F32, (1, 1, M, K))
SQUARE = dml.TensorDesc(F32, (1, 1, K, K))
BIAS = dml.TensorDesc(F32, (1, 1, 1, K))
In, Out, Mid = dml.InputGraphEdge, dml.OutputGraphEdge, dml.IntermediateGraphEdge


def residual_mlp(blocks: int, *, shared_bias: bool = False, read_middle: int | None = None,
                 constant_weights: bool = False, copied_weights: bool = False) -> dml.GraphDesc:  # fmt: skip
    """``blocks`` of x + relu(x W_b + c_b) after one another: graph input 0 is x, then each
    block's W_b (graph inputs, or constant data nodes with ``constant_weights``) and c_b (one c
    for every block with ``shared_bias``). ``copied_weights``: each W_b reaches its GEMM
    through an ELEMENT_WISE_IDENTITY listed before every block (as the ONNX importer brings
    initializers in). ``read_middle``: a second graph output reads that block's ReLU."""
    nodes: list = [dml.ElementWiseIdentityOperatorDesc(SQUARE, SQUARE)] * (
        blocks if copied_weights else 0
    )
    ins: list = []
    mids: list = []
    inputs = 1
    relus = []
    prev = None  # the node whose output 0 is the current x
    for b in range(blocks):
        gemm, relu, add = len(nodes), len(nodes) + 1, len(nodes) + 2
        relus.append(relu)
        nodes += [
            dml.GemmOperatorDesc(ROW, SQUARE, ROW, ROW),
            dml.ActivationReluOperatorDesc(ROW, ROW),
            dml.ElementWiseAddOperatorDesc(ROW, ROW, ROW),
        ]
        if constant_weights:
            w = np.random.default_rng(b).standard_normal((1, 1, K, K)).astype(np.float32) / 3
            nodes.append(dml.ConstantDataNode(w))
            mids.append(Mid(len(nodes) - 1, 0, gemm, 1))
        elif copied_weights:
            ins.append(In(inputs, b, 0))
            mids.append(Mid(b, 0, gemm, 1))
            inputs += 1
        else:
            ins.append(In(inputs, gemm, 1))
            inputs += 1
        if not shared_bias or b == 0:
            bias_input = inputs
            inputs += 1
        ins.append(In(bias_input, gemm, 2))
        if prev is None:
            ins += [In(0, gemm, 0), In(0, add, 0)]
        else:
            mids += [Mid(prev, 0, gemm, 0), Mid(prev, 0, add, 0)]
        mids += [Mid(gemm, 0, relu, 0), Mid(relu, 0, add, 1)]
        prev = add
    outs = [Out(prev, 0, 0)]
    if read_middle is not None:
        outs.append(Out(relus[read_middle], 0, 1))
    return dml.GraphDesc(inputs, len(outs), tuple(nodes), tuple(ins), tuple(outs), tuple(mids))


def feeds(graph: dml.GraphDesc, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    g = dml.compile_graph(graph)
    return [(rng.standard_normal(d.sizes) / 3).astype(np.float32) for d in g.input_descs]


def scan_count(fn, *args) -> int:
    return str(jax.make_jaxpr(fn)(*args)).count("scan[")


@pytest.mark.parametrize("blocks", [3, 6])
def test_a_run_of_equal_blocks_is_one_scan_with_the_same_results(blocks):
    graph = residual_mlp(blocks)
    args = feeds(graph)
    written = dml.compile_graph(graph)
    rolled = dml.compile_graph(graph, roll_repeats=True)
    assert written.rolled == ()
    (run,) = rolled.rolled
    assert (run.period, run.repeats) == (3, blocks)
    assert scan_count(rolled.fn, *args) == 1 and scan_count(written.fn, *args) == 0
    got = np.asarray(rolled(*args))
    np.testing.assert_array_equal(got, np.asarray(written(*args)))
    (want,) = reference_graph(graph, *args)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_two_blocks_are_not_rolled():
    graph = residual_mlp(2)
    assert dml.compile_graph(graph, roll_repeats=True).rolled == ()


def test_an_input_shared_by_every_block_is_read_as_it_is():
    graph = residual_mlp(4, shared_bias=True)
    args = feeds(graph, 1)
    rolled = dml.compile_graph(graph, roll_repeats=True)
    assert [r.repeats for r in rolled.rolled] == [4]
    # the loop's inputs: the weights of blocks 1-3 stacked, the one bias as it is
    (loop,) = [e for e in jax.make_jaxpr(rolled.fn)(*args).jaxpr.eqns if e.primitive.name == "scan"]
    shapes = {tuple(v.aval.shape) for v in loop.invars}
    assert (3, *SQUARE.sizes) in shapes and (3, *ROW.sizes) not in shapes and ROW.sizes in shapes
    (want,) = reference_graph(graph, *args)
    np.testing.assert_allclose(np.asarray(rolled(*args)), want, rtol=1e-5, atol=1e-5)


def test_each_block_s_value_from_before_the_run_is_stacked():
    # Each W_b copied by an identity evaluated before the first block: the loop stacks the
    # copies, one per block.
    graph = residual_mlp(4, copied_weights=True)
    args = feeds(graph, 6)
    rolled = dml.compile_graph(graph, roll_repeats=True)
    assert [r.repeats for r in rolled.rolled] == [4]
    (want,) = reference_graph(graph, *args)
    got = np.asarray(rolled(*args))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got, np.asarray(dml.compile_graph(graph)(*args)))


def test_constant_weights_are_stacked_per_block():
    graph = residual_mlp(5, constant_weights=True)
    args = feeds(graph, 2)
    rolled = dml.compile_graph(graph, roll_repeats=True)
    assert [r.repeats for r in rolled.rolled] == [5]
    x = args[0][0, 0]
    for b in range(5):  # the weights residual_mlp made, the biases its graph inputs
        w = np.random.default_rng(b).standard_normal((1, 1, K, K)).astype(np.float32) / 3
        x = x + np.maximum(x @ w[0, 0] + args[1 + b][0, 0], 0)
    got = np.asarray(rolled(*args))
    np.testing.assert_allclose(got[0, 0], x, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got, np.asarray(dml.compile_graph(graph)(*args)))


def test_a_middle_block_read_after_the_run_keeps_the_run_short_of_it():
    # Block 2 of 6 is read by a graph output: no run may loop over it past its first block.
    graph = residual_mlp(6, read_middle=2)
    args = feeds(graph, 3)
    rolled = dml.compile_graph(graph, roll_repeats=True)
    read = rolled.order.index(3 * 2 + 1)  # the step of block 2's ReLU
    assert rolled.rolled
    for run in rolled.rolled:  # looped, and not the last block: its values stay in the loop
        assert read not in range(run.start + run.period, run.start + (run.repeats - 1) * run.period)
    want = reference_graph(graph, *args)
    for g, w in zip(rolled(*args), want):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-5, atol=1e-5)


def test_the_last_block_read_by_a_graph_output_comes_out_of_the_loop():
    graph = residual_mlp(4, read_middle=3)
    args = feeds(graph, 4)
    rolled = dml.compile_graph(graph, roll_repeats=True)
    assert [r.repeats for r in rolled.rolled] == [4]
    want = reference_graph(graph, *args)
    for g, w in zip(rolled(*args), want):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-5, atol=1e-5)


def test_the_rolled_graph_differentiates_and_jits_as_the_graph_does():
    graph = residual_mlp(4)
    args = [jax.numpy.asarray(a) for a in feeds(graph, 5)]
    written = dml.compile_graph(graph)
    rolled = dml.compile_graph(graph, roll_repeats=True)

    def loss(g):
        return lambda *a: (g.fn(*a) ** 2).sum()

    want = jax.grad(loss(written), argnums=tuple(range(len(args))))(*args)
    got = jax.jit(jax.grad(loss(rolled), argnums=tuple(range(len(args)))))(*args)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-6)


def test_an_onnx_model_s_repeated_layers_roll_and_agree_with_onnxruntime():
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    from dml_jax.onnx import InferenceSession

    rng = np.random.default_rng(7)
    nodes, inits, x = [], [], "x"
    for b in range(5):  # x + relu(x @ w_b + c_b), then LayerNormalization with its own scale
        names = [f"{v}{b}" for v in ("h", "hc", "r", "s", "y")]
        nodes += [
            helper.make_node("MatMul", [x, f"w{b}"], [names[0]]),
            helper.make_node("Add", [names[0], f"c{b}"], [names[1]]),
            helper.make_node("Relu", [names[1]], [names[2]]),
            helper.make_node("Add", [x, names[2]], [names[3]]),
            helper.make_node(
                "LayerNormalization", [names[3], f"g{b}", f"e{b}"], [names[4]], axis=-1
            ),
        ]
        inits += [
            numpy_helper.from_array((rng.standard_normal((K, K)) / 3).astype(np.float32), f"w{b}"),
            numpy_helper.from_array(rng.standard_normal(K).astype(np.float32), f"c{b}"),
            numpy_helper.from_array(rng.standard_normal(K).astype(np.float32) + 1, f"g{b}"),
            numpy_helper.from_array(rng.standard_normal(K).astype(np.float32), f"e{b}"),
        ]
        x = names[4]
    graph = helper.make_graph(
        nodes, "layers", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [M, K])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [M, K])], inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # what every onnxruntime this runs beside reads
    feed = {"x": rng.standard_normal((M, K)).astype(np.float32)}
    rolled = InferenceSession(model.SerializeToString(), roll_repeats=True)
    (got,) = rolled.run(None, feed)
    assert [r.repeats for r in rolled.program([(M, K)]).graph.rolled] == [5]
    plain = InferenceSession(model.SerializeToString())
    assert plain.program([(M, K)]).graph.rolled == ()
    np.testing.assert_array_equal(got, plain.run(None, feed)[0])
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(got, session.run(None, feed)[0], rtol=1e-4, atol=1e-4)


def test_a_block_s_own_constant_is_not_known_to_the_loop_body(monkeypatch):
    """Blocks of x + attention(x, x, x, mask_b), each mask a constant data node: causal, causal,
    full, causal. Written out, the attention lowering reads each causal mask at trace time and
    computes only the tiles it keeps; in the loop the masks are stacked and none is known, or
    the full block would be computed as a causal one. Against the NumPy operator reference."""
    import reference

    from dml_jax.fields import INPUT
    from dml_jax.ops import attention as A

    monkeypatch.setattr(A, "CAUSAL_MIN_ROWS", 2)
    b, heads, d, seq = 1, 2, 4, 8
    x_desc = dml.TensorDesc(F32, (b, seq, heads * d))
    m_desc = dml.TensorDesc("INT32", (b, heads, seq, seq))
    causal = np.broadcast_to(np.tril(np.ones((seq, seq), np.int32)), m_desc.sizes).copy()
    masks = [causal, causal, np.ones(m_desc.sizes, np.int32), causal]
    attention = dml.MultiheadAttention1OperatorDesc(
        x_desc, x_desc, x_desc, mask_tensor=m_desc, output_tensor=x_desc, scale=0.5,
        mask_filter_value=-np.inf, query_head_count=heads, key_value_head_count=heads,
        mask_type="BOOLEAN",
    )  # fmt: skip
    edges = [p for p, _ in attention.edge_slots(INPUT)]  # edge indices count absent tensors
    q, k, v, m = (edges.index(n) for n in ("QueryTensor", "KeyTensor", "ValueTensor", "MaskTensor"))
    nodes, ins, mids, prev = [], [], [], None
    for mask in masks:
        att, const, add = len(nodes), len(nodes) + 1, len(nodes) + 2
        nodes += [
            attention,
            dml.ConstantDataNode(mask),
            dml.ElementWiseAddOperatorDesc(x_desc, x_desc, x_desc),
        ]
        for slot in (q, k, v):
            ins.append(In(0, att, slot)) if prev is None else mids.append(Mid(prev, 0, att, slot))
        ins.append(In(0, add, 0)) if prev is None else mids.append(Mid(prev, 0, add, 0))
        mids += [Mid(const, 0, att, m), Mid(att, 0, add, 1)]
        prev = add
    graph = dml.GraphDesc(1, 1, tuple(nodes), tuple(ins), (Out(prev, 0, 0),), tuple(mids))
    x = np.random.default_rng(8).standard_normal(x_desc.sizes).astype(np.float32)
    rolled = dml.compile_graph(graph, roll_repeats=True)
    assert [r.repeats for r in rolled.rolled] == [4]
    want = x
    for mask in masks:  # the present inputs in schema order: query, key, value, mask
        want = want + reference.reference(attention, want, want, want, mask)[0]
    np.testing.assert_allclose(np.asarray(rolled(x)), want, rtol=1e-5, atol=1e-5)


def test_blocks_sharing_every_input_roll():
    """Four blocks that all read the same graph inputs (weights shared: nothing of their own
    to stack) still roll, and compute the four blocks."""
    t = dml.TensorDesc(F32, (2, 3))
    nodes, mids = [], []
    for i in range(4):
        nodes += [dml.ElementWiseAddOperatorDesc(t, t, t), dml.ActivationReluOperatorDesc(t, t)]
        mids.append(Mid(2 * i, 0, 2 * i + 1, 0))
        if i:
            mids.append(Mid(2 * i - 1, 0, 2 * i, 0))
    graph = dml.GraphDesc(
        input_count=2, output_count=1, nodes=tuple(nodes),
        input_edges=(In(0, 0, 0), *(In(1, 2 * i, 1) for i in range(4))),
        output_edges=(Out(7, 0, 0),), intermediate_edges=tuple(mids),
    )  # fmt: skip
    rng = np.random.default_rng(3)
    x, w = (rng.standard_normal((2, 3)).astype(np.float32) for _ in range(2))
    compiled = dml.compile_graph(graph, roll_repeats=True)
    got = np.asarray(jax.jit(compiled.fn)(x, w))
    assert compiled.rolled
    (want,) = reference_graph(graph, x, w)
    np.testing.assert_allclose(got, want, rtol=1e-6)
