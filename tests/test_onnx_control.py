"""Control flow and sequence values through ``InferenceSession``, in the forms ONNX's node cases
miss: an If on a condition computed at run time with DML operators in both branches
(``lax.cond``), or with branches of different shapes (segments: the condition read on the host
between programs, nested too), Loops that read values of the enclosing graph (rolled into
``lax.while_loop`` / ``lax.scan``, their scan outputs counted first where an early exit or a
run-time trip count sets their length, or unrolled at import), the forms under ``jax.jit`` and
``jax.vmap``, Scans over other axes and in reverse, Scan-8's sequence lengths, sequence ops on
run-time tensors, and the errors that name the node. Expected values come from onnxruntime's
CPU provider, or ONNX's reference evaluator (a Loop without a condition input runs no
iteration there; the spec runs M)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from dml_jax import ValidationError
from dml_jax.onnx import InferenceSession

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _info(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _model(nodes, inputs, outputs, opset=17, initializers=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def _graph(nodes, inputs, outputs, initializers=()):
    return helper.make_graph(nodes, "body", inputs, outputs, list(initializers))


def _const(name, array):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(array, name))


def _check(session, model, feed, reference="onnx"):
    got = session.run(None, feed)
    if reference == "onnx":
        want = ReferenceEvaluator(model).run(None, feed)
    else:
        ort = pytest.importorskip("onnxruntime")
        want = ort.InferenceSession(
            model.SerializeToString(), providers=["CPUExecutionProvider"]
        ).run(None, feed)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if isinstance(w, list):
            assert len(g) == len(w)
            for a, b in zip(g, w):
                np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        else:
            assert g.shape == np.shape(w) and g.dtype == np.asarray(w).dtype
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


# --- If ---------------------------------------------------------------------------------------


def _if_model(cond_node=None, else_shape=(2, 3)):
    """out = If(cond) then Relu(x) @ w + y else x * k (k a branch constant); y = Exp(x) is read
    from the enclosing graph by the then branch."""
    then_b = _graph(
        [
            helper.make_node("Relu", ["x"], ["r"]),
            helper.make_node("MatMul", ["r", "w"], ["m"]),
            helper.make_node("Add", ["m", "y"], ["t"]),
        ],
        [],
        [_info("t", F, [2, 3])],
    )
    if else_shape == (2, 3):
        else_nodes = [_const("k", np.float32(-2.5)), helper.make_node("Mul", ["x", "k"], ["e"])]
    else:
        else_nodes = [helper.make_node("ReduceSum", ["x"], ["e"], keepdims=0)]
    else_b = _graph(else_nodes, [], [_info("e", F, list(else_shape))])
    nodes = [helper.make_node("Exp", ["x"], ["y"])]
    inputs = [_info("x", F, [2, 3])]
    if cond_node is None:
        inputs.append(_info("c", B, []))
    else:
        nodes += cond_node
    nodes.append(helper.make_node("If", ["c"], ["out"], then_branch=then_b, else_branch=else_b))
    w = numpy_helper.from_array(np.linspace(-1, 1, 9, dtype=np.float32).reshape(3, 3), "w")
    return _model(nodes, inputs, [_info("out", F, None)], initializers=[w])


def test_if_on_a_run_time_condition_runs_both_branches_dml_operators_under_lax_cond():
    model = _if_model()
    s = InferenceSession(model)
    x = np.array([[1, -2, 3], [-0.5, 0.25, 2]], np.float32)
    for c in (True, False):
        _check(s, model, {"x": x, "c": np.array(c)}, reference="onnxruntime")
    assert s.static_inputs == ()  # one program for both conditions
    line = s.explain().splitlines()[-1]
    # The parameter w enters the program as a constant (an identity node), read by the If.
    assert (
        line.startswith("node 1 (If): jax: ")
        and "JAX:If(lax.cond; then: ACTIVATION_RELU, GEMM" in line
    )
    assert "GEMM" in line and "ELEMENT_WISE_MULTIPLY" in line.split("else:")[1]


def _data_condition(source="x"):
    """c = ReduceSum(source) > 0: a condition computed from data at run time."""
    return [helper.make_node("ReduceSum", [source], ["sum"], keepdims=0),
            _const("zero", np.float32(0)), helper.make_node("Greater", ["sum", "zero"], ["c"])]  # fmt: skip


def test_if_on_a_condition_computed_from_data():
    model = _if_model(_data_condition())
    s = InferenceSession(model)
    for x in (np.ones((2, 3), np.float32), -np.ones((2, 3), np.float32)):
        _check(s, model, {"x": x}, reference="onnxruntime")
    assert s.static_inputs == () and len(s._programs) == 1 and not s._size_needs


def test_if_whose_branches_differ_in_shape_is_specialised_on_its_condition():
    model = _if_model(else_shape=())
    s = InferenceSession(model)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for c in (True, False, True):
        _check(s, model, {"x": x, "c": np.array(c)}, reference="onnxruntime")
    assert s.static_inputs == ("c",) and len(s._programs) == 2 and not s._size_needs
    assert "branch" in s.explain()


def test_if_whose_branches_differ_in_shape_on_a_computed_condition_runs_as_segments():
    """The condition comes from a large input: the program up to the If computes it, run()
    reads it and runs the program imported for the branch taken; each is compiled once."""
    model = _if_model(_data_condition("big"), else_shape=())
    model.graph.input.append(_info("big", F, [5000]))
    s = InferenceSession(model)
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    rng = np.random.default_rng(3)
    for sign in (1, -1, -1, 1):
        big = sign * rng.uniform(0.5, 1, 5000).astype(np.float32)  # new values, same shape
        _check(s, model, {"x": x, "big": big}, reference="onnxruntime")
    assert s.static_inputs == ()
    (segment,) = s._size_needs.values()
    assert len(s._programs) == 2 and segment.program is not None  # one per branch, one before
    before = (dict(s._programs), segment.program)
    for sign in (-1, 1):
        _check(s, model, {"x": x * 3, "big": sign * np.ones(5000, np.float32)}, "onnxruntime")
    assert (dict(s._programs), segment.program) == before  # nothing compiled again
    lines = s.explain().splitlines()  # the program compiled last: the else branch's
    assert lines[-2] == (
        "node 4 (If): dml (segments: else_branch taken, the condition read on the host first): "
        "REDUCE"
    )
    assert (
        lines[-1] == "segments (read on the host before this program): node 4 (If): condition = 0"
    )


def _branch(nodes, output, shape):
    return _graph(nodes, [], [_info(output, F, shape)])


def test_nested_ifs_as_segments_and_lax_cond():
    """An If (segments) whose then branch holds an If of different branch shapes (segments,
    read only when the outer takes that branch) and whose else branch holds an If of agreeing
    shapes (lax.cond inside the segment's program)."""
    inner_seg = helper.make_node(
        "If", ["c2"], ["t"],
        then_branch=_branch([helper.make_node("Mul", ["x", "x"], ["a"])], "a", [2, 3]),
        else_branch=_branch([helper.make_node("ReduceMax", ["x"], ["b"], keepdims=0)], "b", []),
    )  # fmt: skip
    then_b = _graph(
        [helper.make_node("ReduceMax", ["x"], ["mx"], keepdims=0),
         _const("one", np.float32(1)), helper.make_node("Greater", ["mx", "one"], ["c2"]),
         inner_seg],
        [], [_info("t", F, None)],
    )  # fmt: skip
    inner_cond = helper.make_node(
        "If", ["c3"], ["e"],
        then_branch=_branch([helper.make_node("ReduceMax", ["x"], ["p"], axes=[0], keepdims=0)], "p", [3]),
        else_branch=_branch([helper.make_node("ReduceMin", ["x"], ["q"], axes=[0], keepdims=0)], "q", [3]),
    )  # fmt: skip
    else_b = _graph(
        [helper.make_node("ReduceMin", ["x"], ["mn"], keepdims=0),
         _const("lo", np.float32(-1.5)), helper.make_node("Less", ["mn", "lo"], ["c3"]),
         inner_cond],
        [], [_info("e", F, [3])],
    )  # fmt: skip
    nodes = [*_data_condition(), helper.make_node("If", ["c"], ["y"], then_branch=then_b,
                                                  else_branch=else_b)]  # fmt: skip
    model = _model(nodes, [_info("x", F, [2, 3])], [_info("y", F, None)], opset=13)
    s = InferenceSession(model)
    base = np.array([[0.5, 0.25, 0.5], [0.25, 0.5, 0.25]], np.float32)
    feeds = [base, base * 4, -base, -base * 4, base * 4 + 0.1, -base * 4 - 0.1]
    for x in feeds:  # then: c2 false, true; else: c3 false, true; then each branch again
        _check(s, model, {"x": x}, reference="onnxruntime")
    assert len(s._programs) == 3  # outer else; outer then with the inner's two branches
    # Two segments: the outer's condition; the inner's, only under the outer's then branch.
    assert len(s._size_needs) == 2 and all(n.program for n in s._size_needs.values())
    outer, inner = "node 3 (If): condition", "node 3 (If) > then_branch > node 3 (If): condition"
    assert [p.segments for p in s._programs.values()] == [
        ((outer, (1,)), (inner, (0,))),
        ((outer, (1,)), (inner, (1,))),
        ((outer, (0,)),),
    ]
    lines = s.explain().splitlines()  # the program compiled last: the outer else branch's
    assert "(segments: else_branch taken" in lines[-2]
    assert "JAX:If(lax.cond; then: REDUCE; else: REDUCE)" in lines[-2]
    assert lines[-1] == f"segments (read on the host before this program): {outer} = 0"


# --- Loop -------------------------------------------------------------------------------------


def _while_model():
    """acc, n = Loop(M, true, acc0, 0): acc = acc * a + b (a, b from the enclosing graph, b
    computed there) while sum(acc) < limit; n counts the iterations."""
    body = _graph(
        [helper.make_node("Mul", ["acc_in", "a"], ["t"]),
         helper.make_node("Add", ["t", "b"], ["acc_out"]),
         helper.make_node("ReduceSum", ["acc_out"], ["s"], keepdims=0),
         helper.make_node("Less", ["s", "limit"], ["cond_out"]),
         _const("one", np.int64(1)), helper.make_node("Add", ["n_in", "one"], ["n_out"])],
        [_info("i", I64, []), _info("cond_in", B, []), _info("acc_in", F, [3]),
         _info("n_in", I64, [])],
        [_info("cond_out", B, []), _info("acc_out", F, [3]), _info("n_out", I64, [])],
    )  # fmt: skip
    nodes = [
        helper.make_node("Abs", ["a0"], ["a"]),
        helper.make_node("Sigmoid", ["a0"], ["b"]),
        _const("yes", np.array(True)),
        _const("n0", np.int64(0)),
        helper.make_node("Loop", ["M", "yes", "acc0", "n0"], ["acc", "n"], body=body),
    ]
    inputs = [_info("M", I64, []), _info("a0", F, [3]), _info("acc0", F, [3]),
              _info("limit", F, [])]  # fmt: skip
    return _model(nodes, inputs, [_info("acc", F, [3]), _info("n", I64, [])])


def test_loop_with_a_run_time_condition_and_trip_count_is_a_while_loop_reading_outer_values():
    model = _while_model()
    s = InferenceSession(model)
    a0 = np.array([1.5, -1.2, 0.5], np.float32)
    acc0 = np.array([0.1, 0.2, 0.3], np.float32)
    for m, limit in ((100, 20.0), (3, 100.0), (0, 1.0), (100, -5.0)):
        feed = {"M": np.array(m, np.int64), "a0": a0, "acc0": acc0, "limit": np.float32(limit)}
        _check(s, model, feed)
    assert s.static_inputs == ()  # nothing specialised: M and the condition stay run-time
    line = s.explain().splitlines()[-1]
    assert line.startswith("node 4 (Loop): jax: JAX:Loop(lax.while_loop; body: ")
    assert "ELEMENT_WISE_MULTIPLY" in line and "REDUCE" in line


def _scan_outputs_model(cond_out_node=None, trip="initializer"):
    """A Loop of trip count M: x = x * a + float(i), each x a scan output. M is 4 (an
    initializer), a model input ("input") or Cast(Ceil(ReduceMax(t))) of a model input t
    ("computed")."""
    body_nodes = [
        helper.make_node("Mul", ["x_in", "a"], ["t"]),
        helper.make_node("Cast", ["i"], ["fi"], to=F),
        helper.make_node("Add", ["t", "fi"], ["x_out"]),
        helper.make_node("Identity", ["x_out"], ["scan"]),
    ]
    if cond_out_node is None:
        body_nodes.append(helper.make_node("Identity", ["cond_in"], ["cond_out"]))
    else:
        body_nodes += cond_out_node
    body = _graph(
        body_nodes,
        [_info("i", I64, []), _info("cond_in", B, []), _info("x_in", F, [2, 2])],
        [_info("cond_out", B, []), _info("x_out", F, [2, 2]), _info("scan", F, [2, 2])],
    )
    nodes = [helper.make_node("Loop", ["M", "", "x0"], ["x", "xs"], body=body)]
    inputs = [_info("x0", F, [2, 2]), _info("a", F, [2, 2])]
    inits = []
    if trip == "initializer":
        inits.append(numpy_helper.from_array(np.array(4, np.int64), "M"))
    elif trip == "input":
        inputs.append(_info("M", I64, []))
    else:
        inputs.append(_info("n", F, [3]))
        nodes[:0] = [helper.make_node("ReduceMax", ["n"], ["mx"], keepdims=0),
                     helper.make_node("Ceil", ["mx"], ["up"]),
                     helper.make_node("Cast", ["up"], ["M"], to=I64)]  # fmt: skip
    outputs = [_info("x", F, [2, 2]), _info("xs", F, None)]
    return _model(nodes, inputs, outputs, initializers=inits)


def test_loop_with_a_trip_count_and_scan_outputs_is_a_scan():
    model = _scan_outputs_model()
    s = InferenceSession(model)
    x0 = np.array([[1, 2], [3, 4]], np.float32)
    a = np.array([[0.5, -1], [2, 0.25]], np.float32)
    _check(s, model, {"x0": x0, "a": a}, reference="onnxruntime")
    assert s.explain().startswith("node 0 (Loop): jax: JAX:Loop(lax.scan, 4 iterations; body: ")


def _programs(s):
    """The session's compiled programs: those run() looks up, and the segments before them."""
    return [*s._programs.values(), *(n.program for n in s._size_needs.values())]


def test_loop_with_scan_outputs_and_a_condition_computed_in_the_body_counts_its_iterations():
    """Early exit: the scan outputs' length is the iteration count, which the program up to
    the Loop computes (a lax.while_loop without the scan outputs); the Loop is then a
    lax.scan of that many iterations, a program per count."""
    stop = [helper.make_node("ReduceSum", ["x_out"], ["s"], keepdims=0),
            _const("lim", np.float32(10)), helper.make_node("Less", ["s", "lim"], ["cond_out"])]  # fmt: skip
    model = _scan_outputs_model(stop)
    s = InferenceSession(model)
    ones = np.ones((2, 2), np.float32)
    # 3 iterations (the third stops), 1 (the first stops), 4 (M stops it), 3 again
    for x0, a in ((ones, ones), (ones * 5, ones), (ones * 0.1, ones * 0.1), (ones * 2, ones * 0)):
        _check(s, model, {"x0": x0, "a": a}, reference="onnxruntime")
    assert s.run(None, {"x0": ones, "a": ones})[1].shape == (3, 2, 2)
    assert len(s._programs) == 3 and len(_programs(s)) == 4  # a program per count, a segment
    assert s.explain() == (
        "node 0 (Loop): jax: JAX:Loop(lax.scan, 4 iterations; body: ELEMENT_WISE_MULTIPLY, CAST, "
        "ELEMENT_WISE_ADD, REDUCE, ELEMENT_WISE_LOGICAL_LESS_THAN)\n"
        "segments (read on the host before this program): node 0 (Loop): iterations = 4"
    )
    (segment,) = s._size_needs.values()
    last = segment.probe.graph.nodes[-1].operator_type  # the segment: the Loop, counting
    assert last.startswith("JAX:Loop(lax.while_loop, its iterations; body: ")
    # M = 2**63 - 1, "no bound", as exporters write a while loop: the condition alone stops it.
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.array(2**63 - 1), "M"))
    s = InferenceSession(model)
    _check(s, model, {"x0": ones * 0.1, "a": ones * 1.5}, reference="onnxruntime")
    assert s.explain().endswith("node 0 (Loop): iterations = 3")


@pytest.mark.parametrize("trip", ["computed", "input"])
def test_loop_with_scan_outputs_and_a_run_time_trip_count(trip):
    """M computed at run time: read on the host first (segments); M a model input: the session
    specialises on it (no segment). A program per trip count either way."""
    model = _scan_outputs_model(trip=trip)
    s = InferenceSession(model)
    x0 = np.array([[1, 2], [3, 4]], np.float32)
    a = np.array([[0.5, -1], [2, 0.25]], np.float32)
    for m in (2, 0, 5, 2):
        feed = {"x0": x0, "a": a}
        if trip == "input":
            feed["M"] = np.array(m, np.int64)
        else:
            feed["n"] = np.array([m - 0.5, -1, 0], np.float32)
        _check(s, model, feed, reference="onnxruntime")
    assert len(s._programs) == 3
    assert s.static_inputs == (("M",) if trip == "input" else ())
    assert len(s._size_needs) == (0 if trip == "input" else 1)


def test_loop_whose_condition_comes_from_the_iteration_is_unrolled_for_its_scan_outputs():
    stop = [_const("two", np.int64(2)), helper.make_node("Less", ["i", "two"], ["cond_out"])]
    model = _scan_outputs_model(stop)
    s = InferenceSession(model)
    x0 = np.array([[1, 2], [3, 4]], np.float32)
    _check(s, model, {"x0": x0, "a": x0}, reference="onnxruntime")
    assert s.run(None, {"x0": x0, "a": x0})[1].shape == (3, 2, 2)
    assert "unrolled at import: 3 iterations" in s.explain()


def _slice_at_iteration_model(trip):
    """y += x[i] for i < trip: the body slices at the iteration number, which DirectML needs as
    a constant, so the Loop is unrolled (as ONNX's test_loop11 is)."""
    body = _graph(
        [_const("one", np.int64(1)), helper.make_node("Add", ["i", "one"], ["end"]),
         helper.make_node("Unsqueeze", ["i", "zero"], ["start1"]),
         helper.make_node("Unsqueeze", ["end", "zero"], ["end1"]),
         helper.make_node("Slice", ["x", "start1", "end1"], ["row"]),
         helper.make_node("Add", ["y_in", "row"], ["y_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        [_info("i", I64, []), _info("cond_in", B, []), _info("y_in", F, [1, 3])],
        [_info("cond_out", B, []), _info("y_out", F, [1, 3])],
    )  # fmt: skip
    nodes = [helper.make_node("Loop", ["M", "", "y0"], ["y"], body=body)]
    inits = [numpy_helper.from_array(np.array(trip, np.int64), "M"),
             numpy_helper.from_array(np.array([0], np.int64), "zero")]  # fmt: skip
    inputs = [_info("x", F, [max(trip, 1), 3]), _info("y0", F, [1, 3])]
    return _model(nodes, inputs, [_info("y", F, [1, 3])], initializers=inits)


def test_loop_whose_body_needs_the_iteration_as_a_constant_is_unrolled():
    model = _slice_at_iteration_model(5)
    s = InferenceSession(model)
    x = np.arange(15, dtype=np.float32).reshape(5, 3)
    _check(s, model, {"x": x, "y0": np.ones((1, 3), np.float32)}, reference="onnxruntime")
    assert s.explain().startswith("node 0 (Loop): dml (unrolled at import: 5 iterations)")


def test_loop_that_must_be_unrolled_past_the_limit_names_the_node():
    s = InferenceSession(_slice_at_iteration_model(1000))
    x = np.zeros((1000, 3), np.float32)
    with pytest.raises(ValidationError, match=r"node 0 \(Loop\).*more than 64 iterations"):
        s.run(None, {"x": x, "y0": np.ones((1, 3), np.float32)})


def test_if_on_the_iteration_inside_a_rolled_loop():
    """An If on a condition computed from the loop state: a lax.cond inside the loop."""
    then_b = _graph([helper.make_node("Add", ["v_in", "step"], ["o"])], [], [_info("o", F, [2])])
    else_b = _graph([helper.make_node("Sub", ["v_in", "step"], ["o"])], [], [_info("o", F, [2])])
    body = _graph(
        [_const("two", np.int64(2)), helper.make_node("Mod", ["i", "two"], ["r"]),
         _const("z", np.int64(0)), helper.make_node("Equal", ["r", "z"], ["even"]),
         helper.make_node("If", ["even"], ["v_out"], then_branch=then_b, else_branch=else_b),
         helper.make_node("Mul", ["v_out", "v_out"], ["sq"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        [_info("i", I64, []), _info("cond_in", B, []), _info("v_in", F, [2])],
        [_info("cond_out", B, []), _info("v_out", F, [2]), _info("sq", F, [2])],
    )  # fmt: skip
    nodes = [helper.make_node("Loop", ["M", "", "v0"], ["v", "sqs"], body=body)]
    inits = [numpy_helper.from_array(np.array(5, np.int64), "M")]
    model = _model(nodes, [_info("v0", F, [2]), _info("step", F, [2])],
                   [_info("v", F, [2]), _info("sqs", F, [5, 2])], initializers=inits)  # fmt: skip
    s = InferenceSession(model)
    feed = {"v0": np.array([1, -1], np.float32), "step": np.array([0.5, 2], np.float32)}
    _check(s, model, feed, reference="onnxruntime")
    assert s.explain() == (
        "node 0 (Loop): jax: JAX:Loop(lax.scan, 5 iterations; body: ELEMENT_WISE_MODULUS_FLOOR, "
        "ELEMENT_WISE_LOGICAL_EQUALS, JAX:If(lax.cond; then: ELEMENT_WISE_ADD; else: "
        "ELEMENT_WISE_SUBTRACT), ELEMENT_WISE_MULTIPLY)"
    )


def test_if_on_data_inside_a_loop_that_exits_early():
    """An If on a condition computed from the loop state, inside a Loop whose body computes
    its own condition and whose trip count is a model input: lax.cond in lax.while_loop."""
    then_b = _branch([_const("h", np.float32(0.5)), helper.make_node("Mul", ["v_in", "h"], ["o"])],
                     "o", [2])  # fmt: skip
    else_b = _branch([helper.make_node("Add", ["v_in", "step"], ["o"])], "o", [2])
    body = _graph(
        [helper.make_node("ReduceSum", ["v_in"], ["s"], keepdims=0),
         _const("four", np.float32(4)), helper.make_node("Greater", ["s", "four"], ["big"]),
         helper.make_node("If", ["big"], ["v_out"], then_branch=then_b, else_branch=else_b),
         helper.make_node("ReduceMax", ["v_out"], ["mx"], keepdims=0),
         helper.make_node("Less", ["mx", "stop"], ["cond_out"])],
        [_info("i", I64, []), _info("cond_in", B, []), _info("v_in", F, [2])],
        [_info("cond_out", B, []), _info("v_out", F, [2])],
    )  # fmt: skip
    nodes = [_const("yes", np.array(True)),
             helper.make_node("Loop", ["M", "yes", "v0"], ["v"], body=body)]  # fmt: skip
    inputs = [_info("M", I64, []), _info("v0", F, [2]), _info("step", F, [2]),
              _info("stop", F, [])]  # fmt: skip
    model = _model(nodes, inputs, [_info("v", F, [2])])
    s = InferenceSession(model)
    for m, stop in ((20, 100.0), (20, 3.5), (2, 100.0), (0, 1.0)):
        feed = {"M": np.array(m, np.int64), "v0": np.array([1, 0.5], np.float32),
                "step": np.array([1.5, 0.25], np.float32), "stop": np.array(stop, np.float32)}  # fmt: skip
        _check(s, model, feed, reference="onnxruntime")
    assert len(s._programs) == 1 and not s._size_needs
    assert s.explain() == (
        "node 0 (Constant): view\nnode 1 (Loop): jax: JAX:Loop(lax.while_loop; body: REDUCE x2, "
        "ELEMENT_WISE_LOGICAL_GREATER_THAN, JAX:If(lax.cond; then: ELEMENT_WISE_MULTIPLY; else: "
        "ELEMENT_WISE_ADD), ELEMENT_WISE_LOGICAL_LESS_THAN)"
    )


def _growing_model():
    """seq = Concat(seq, x) while ReduceSum(seq) < limit and fewer than M iterations: the
    carried value grows each iteration, so the Loop is unrolled; its condition is computed
    from data, so each iteration's is read on the host (segments)."""
    body = _graph(
        [helper.make_node("Concat", ["seq_in", "x"], ["seq_out"], axis=0),
         helper.make_node("ReduceSum", ["seq_out"], ["s"], keepdims=0),
         helper.make_node("Less", ["s", "limit"], ["cond_out"])],
        [_info("i", I64, []), _info("cond_in", B, []), _info("seq_in", F, None)],
        [_info("cond_out", B, []), _info("seq_out", F, None)],
    )  # fmt: skip
    nodes = [_const("M", np.int64(5)), _const("yes", np.array(True)),
             helper.make_node("Loop", ["M", "yes", "x"], ["seq"], body=body)]  # fmt: skip
    return _model(nodes, [_info("x", F, [2]), _info("limit", F, [])], [_info("seq", F, None)])


def test_loop_whose_state_grows_and_whose_condition_is_computed_from_data():
    model = _growing_model()
    s = InferenceSession(model)
    x = np.array([1, 0.5], np.float32)
    for limit in (4.0, 1.0, 100.0, 4.0):  # 2 iterations (3 rows), 1, 5 (M), 2 again
        _check(s, model, {"x": x, "limit": np.array(limit, np.float32)}, reference="onnxruntime")
    assert len(s._programs) == 3
    lines = s.explain().splitlines()
    assert lines[-2].startswith("node 2 (Loop): dml (unrolled at import: 5 iterations): JOIN")
    assert lines[-1] == "segments (read on the host before this program): " + "; ".join(
        f"node 2 (Loop): iteration {i}: condition = 1" for i in range(4)
    )  # the fifth's stops nothing: M does


def test_a_data_dependent_size_inside_a_branch_and_a_loop_body():
    """A NonZero in an If branch: the branch cannot be one function of lax.cond, so the If runs
    as segments, and the NonZero's count is a segment of the branch taken. In a Loop body: the
    Loop is unrolled, each iteration's count read on the host."""
    then_b = _branch([_const("z", np.float32(0)), helper.make_node("Greater", ["x", "z"], ["m"]),
                      helper.make_node("NonZero", ["m"], ["o"])], "o", None)  # fmt: skip
    then_b.output[0].type.tensor_type.elem_type = I64
    else_b = _graph([helper.make_node("Shape", ["x"], ["o"])], [], [_info("o", I64, None)])
    nodes = [*_data_condition(), helper.make_node("If", ["c"], ["y"], then_branch=then_b,
                                                  else_branch=else_b)]  # fmt: skip
    model = _model(nodes, [_info("x", F, [2, 3])], [_info("y", I64, None)])
    s = InferenceSession(model)
    x = np.array([[1, -2, 3], [-0.5, 0.25, 2]], np.float32)
    for feed in (x, -x, x * (x > 1)):
        _check(s, model, {"x": feed}, reference="onnxruntime")
    assert len(s._programs) == 3  # the else branch; the then branch for counts 4 and 2

    body = _graph(
        [helper.make_node("Greater", ["x", "t"], ["m"]), helper.make_node("NonZero", ["m"], ["nz"]),
         helper.make_node("Shape", ["nz"], ["n2"]), helper.make_node("Cast", ["n2"], ["nf"], to=F),
         helper.make_node("ReduceMax", ["nf"], ["n"], keepdims=0),
         helper.make_node("Sub", ["t", "n"], ["t2"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        [_info("i", I64, []), _info("cond_in", B, []), _info("t", F, [])],
        [_info("cond_out", B, []), _info("t2", F, [])],
    )  # fmt: skip
    loop = helper.make_node("Loop", ["M", "", "t0"], ["t"], body=body)
    inits = [numpy_helper.from_array(np.array(2, np.int64), "M")]
    model = _model([loop], [_info("x", F, [2, 3]), _info("t0", F, [])], [_info("t", F, [])],
                   initializers=inits)  # fmt: skip
    s = InferenceSession(model)
    _check(s, model, {"x": x, "t0": np.array(0.5, np.float32)}, reference="onnxruntime")
    assert "node 0 (Loop): dml+jax (unrolled at import: 2 iterations)" in s.explain()


def test_cond_and_while_loop_under_jit_and_vmap_segments_refused():
    """lax.cond and lax.while_loop trace with the condition a tracer (jit, vmap); a model that
    needs segments says so under a trace, and runs through fn on concrete arrays."""
    import jax

    model = _if_model()
    s = InferenceSession(model)
    x = np.array([[1, -2, 3], [-0.5, 0.25, 2]], np.float32)
    fn = jax.jit(s.fn_on())
    for c in (True, False):
        (got,) = fn(x, np.array(c))
        np.testing.assert_allclose(got, s.run(None, {"x": x, "c": np.array(c)})[0], rtol=1e-6)
    xs, cs = np.stack([x, -x, 2 * x]), np.array([True, False, True])
    (batched,) = jax.vmap(s.fn)(xs, cs)
    for k in range(3):
        (want,) = s.run(None, {"x": xs[k], "c": cs[k]})
        np.testing.assert_allclose(batched[k], want, rtol=1e-6)

    loop = InferenceSession(_while_model())
    feed = {"M": np.array(100, np.int64), "a0": np.array([1.5, -1.2, 0.5], np.float32),
            "acc0": np.array([0.1, 0.2, 0.3], np.float32), "limit": np.float32(20)}  # fmt: skip
    got = jax.jit(loop.fn_on())(*feed.values())
    for g, w in zip(got, loop.run(None, feed)):
        np.testing.assert_allclose(g, w, rtol=1e-6)

    segments = InferenceSession(_if_model(_data_condition(), else_shape=()))
    with pytest.raises(ValidationError, match=r"^ONNX: node 4 \(If\): its branches give values "
                       r"of different shapes.*jit/apply/fn cannot trace such a model"):  # fmt: skip
        jax.jit(segments.fn)(x)
    (y,) = segments.fn(-x * 10)  # concrete arrays: run()'s segments
    np.testing.assert_allclose(y, segments.run(None, {"x": -x * 10})[0], rtol=1e-6)
    counted = InferenceSession(_scan_outputs_model(trip="computed"))
    with pytest.raises(ValidationError, match=r"^ONNX: node 3 \(Loop\): its scan outputs' "
                       r"length .* is computed at run time.*cannot trace"):  # fmt: skip
        jax.jit(counted.fn)(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32), x[0])


# --- Scan -------------------------------------------------------------------------------------


def _scan_body():
    """state += x_t * y_t; outputs the state and x_t."""
    return _graph(
        [helper.make_node("Mul", ["x_t", "y_t"], ["p"]),
         helper.make_node("Add", ["s_in", "p"], ["s_out"]),
         helper.make_node("Identity", ["s_out"], ["o1"]),
         helper.make_node("Identity", ["x_t"], ["o2"])],
        [_info("s_in", F, [2]), _info("x_t", F, [2]), _info("y_t", F, [2])],
        [_info("s_out", F, [2]), _info("o1", F, [2]), _info("o2", F, [2])],
    )  # fmt: skip


def test_scan_over_other_axes_in_reverse():
    scan = helper.make_node(
        "Scan", ["s0", "x", "y"], ["s", "o1", "o2"], body=_scan_body(), num_scan_inputs=2,
        scan_input_axes=[1, -2], scan_input_directions=[1, 0], scan_output_axes=[-1, 0],
        scan_output_directions=[0, 1],
    )  # fmt: skip
    inputs = [_info("s0", F, [2]), _info("x", F, [2, 4]), _info("y", F, [4, 2])]
    outputs = [_info("s", F, [2]), _info("o1", F, [2, 4]), _info("o2", F, [4, 2])]
    model = _model([scan], inputs, outputs, opset=16)
    s = InferenceSession(model)
    rng = np.random.default_rng(0)
    feed = {"s0": np.array([1, -1], np.float32),
            "x": rng.standard_normal((2, 4)).astype(np.float32),
            "y": rng.standard_normal((4, 2)).astype(np.float32)}  # fmt: skip
    _check(s, model, feed, reference="onnxruntime")
    assert (
        s.explain() == "node 0 (Scan): jax: JAX:Scan(body: ELEMENT_WISE_MULTIPLY, ELEMENT_WISE_ADD)"
    )


def test_scan8_with_sequence_lengths_and_a_reverse_input():
    scan = helper.make_node("Scan", ["lens", "s0", "x", "y"], ["s", "o1", "o2"],
                            body=_scan_body(), num_scan_inputs=2, directions=[0, 1])  # fmt: skip
    inputs = [_info("lens", I64, [3]), _info("s0", F, [3, 2]), _info("x", F, [3, 4, 2]),
              _info("y", F, [3, 4, 2])]  # fmt: skip
    outputs = [_info("s", F, [3, 2]), _info("o1", F, [3, 4, 2]), _info("o2", F, [3, 4, 2])]
    model = _model([scan], inputs, outputs, opset=8)
    s = InferenceSession(model)
    rng = np.random.default_rng(1)
    feed = {"lens": np.array([4, 2, 3], np.int64), "s0": np.ones((3, 2), np.float32),
            "x": rng.standard_normal((3, 4, 2)).astype(np.float32),
            "y": rng.standard_normal((3, 4, 2)).astype(np.float32)}  # fmt: skip
    _check(s, model, feed, reference="onnxruntime")
    feed = dict(feed, lens=np.array([4, 4, 4], np.int64))
    _check(s, model, feed, reference="onnxruntime")


# --- sequences and optionals --------------------------------------------------------------------


def test_sequence_ops_on_run_time_tensors():
    """Split a run-time tensor into a sequence, erase, insert, read, and stack it again."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("SplitToSequence", ["r"], ["seq"], axis=1, keepdims=0),
        _const("p", np.int64(-1)),
        helper.make_node("SequenceErase", ["seq", "p"], ["seq2"]),
        helper.make_node("SequenceInsert", ["seq2", "extra", "zero"], ["seq3"]),
        helper.make_node("ConcatFromSequence", ["seq3"], ["stacked"], axis=-1, new_axis=1),
        helper.make_node("SequenceAt", ["seq3", "p"], ["last"]),
        helper.make_node("SequenceLength", ["seq3"], ["n"]),
    ]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero")]
    outputs = [_info("stacked", F, [3, 4]), _info("last", F, [3]), _info("n", I64, []),
               helper.make_tensor_sequence_value_info("seq3", F, None)]  # fmt: skip
    model = _model(nodes, [_info("x", F, [3, 4]), _info("extra", F, [3])], outputs, opset=17,
                   initializers=inits)  # fmt: skip
    s = InferenceSession(model)
    rng = np.random.default_rng(2)
    feed = {"x": rng.standard_normal((3, 4)).astype(np.float32),
            "extra": rng.standard_normal(3).astype(np.float32)}  # fmt: skip
    _check(s, model, feed)
    explain = s.explain()
    assert "SplitToSequence): dml: SPLIT" in explain and "ConcatFromSequence): dml: JOIN" in explain
    assert s.get_outputs()[3].type == "seq(tensor(float))"


def test_sequence_position_out_of_range_names_the_node():
    nodes = [helper.make_node("SequenceConstruct", ["x", "x"], ["seq"]),
             _const("p", np.int64(2)), helper.make_node("SequenceAt", ["seq", "p"], ["y"])]  # fmt: skip
    s = InferenceSession(_model(nodes, [_info("x", F, [2])], [_info("y", F, [2])]))
    with pytest.raises(ValidationError, match=r"node 2 \(SequenceAt\).*position 2 is out of range"):
        s.run(None, {"x": np.ones(2, np.float32)})


def test_a_sequence_is_not_a_tensor_input_of_other_ops():
    nodes = [helper.make_node("SequenceConstruct", ["x"], ["seq"]),
             helper.make_node("Relu", ["seq"], ["y"])]  # fmt: skip
    s = InferenceSession(_model(nodes, [_info("x", F, [2])], [_info("y", F, [2])]))
    with pytest.raises(ValidationError, match=r"node 1 \(Relu\).*not a tensor"):
        s.run(None, {"x": np.ones(2, np.float32)})


def test_optional_input_present_and_absent():
    opt = helper.make_tensor_type_proto(F, [2])
    nodes = [helper.make_node("OptionalHasElement", ["o"], ["has"]),
             helper.make_node("Identity", ["o"], ["same"])]  # fmt: skip
    model = _model(
        nodes,
        [helper.make_value_info("o", helper.make_optional_type_proto(opt))],
        [_info("has", B, []), helper.make_value_info("same", helper.make_optional_type_proto(opt))],
        opset=18,
    )
    s = InferenceSession(model)
    has, same = s.run(None, {"o": np.array([1, 2], np.float32)})
    assert has and same.tolist() == [1, 2]
    has, same = s.run(None, {"o": None})
    assert not has and same is None
    assert s.run(None, {})[1] is None  # an optional input left out is empty
    assert s.get_inputs()[0].type == "optional(tensor(float))"


def test_sequences_through_fn_under_jit():
    """``fn`` takes a list for a sequence input and returns a list for a sequence output."""
    import jax

    nodes = [helper.make_node("ConcatFromSequence", ["s"], ["n"], axis=0),
             helper.make_node("SequenceErase", ["s"], ["t"])]  # fmt: skip
    outputs = [_info("n", F, None), helper.make_tensor_sequence_value_info("t", F, None)]
    model = _model(nodes, [helper.make_tensor_sequence_value_info("s", F, [2])], outputs)
    s = InferenceSession(model)
    seq = [np.ones(2, np.float32), np.arange(2, dtype=np.float32), np.zeros(2, np.float32)]
    n, t = jax.jit(s.fn)(seq)
    np.testing.assert_array_equal(n, np.concatenate(seq))
    assert isinstance(t, list) and len(t) == 2
    np.testing.assert_array_equal(t[1], seq[1])
