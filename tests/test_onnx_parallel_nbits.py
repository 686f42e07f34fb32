"""``ParallelQuantizedGemms``: the MatMulNBits products of one A (a decoder's query, key and
value projections; its gate and up projections) joined into one DEQUANTIZE, one GEMM and a
SPLIT. A model of two such groups (three projections of widths 64, 32 and 32 with zero points;
three of 48 on another A, two without zero points, which then take the default ones, and one
with) beside a product of the first A in other blocks and one of a third A, which stay apart:
one GEMM a group, the same values as the session without the rewrite (the same products,
summed per column), and onnxruntime's."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper

from dml_jax.onnx import InferenceSession

K = 128
BLOCK = 32


def _nbits(rng, name: str, a: str, n: int, zero: bool, k: int = K, block: int = BLOCK):
    """A MatMulNBits node (4 bits, blocks of ``block``) and its initializers."""
    blocks = -(-k // block)
    codes = rng.integers(0, 16, (n, blocks, block)).astype(np.uint8)
    inits = [
        numpy_helper.from_array(codes[..., 0::2] | codes[..., 1::2] << 4, f"{name}_q"),
        numpy_helper.from_array(rng.uniform(0.01, 0.05, (n, blocks)).astype(np.float32),
                                f"{name}_s"),
    ]  # fmt: skip
    inputs = [a, f"{name}_q", f"{name}_s"]
    if zero:
        z = rng.integers(0, 16, (n, blocks + blocks % 2)).astype(np.uint8)
        inits.append(numpy_helper.from_array(z[:, 0::2] | z[:, 1::2] << 4, f"{name}_z"))
        inputs.append(f"{name}_z")
    node = helper.make_node("MatMulNBits", inputs, [name], domain="com.microsoft", K=k, N=n,
                            bits=4, block_size=block)  # fmt: skip
    return node, inits


def _model(rng) -> bytes:
    nodes = [helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Neg", ["x"], ["h2"])]
    inits = []
    for name, a, n, zero in (("q", "x", 64, True), ("k", "x", 32, True), ("v", "x", 32, True),
                             ("gate", "h", 48, False), ("up", "h", 48, False),
                             ("other", "h", 48, True), ("solo", "h2", 32, True)):  # fmt: skip
        node, more = _nbits(rng, name, a, n, zero)
        nodes.append(node)
        inits += more
    # "odd": blocks of 64 over the same A: another group of its own (alone, left as it is)
    node, more = _nbits(rng, "odd", "x", 32, True, block=64)
    nodes.append(node)
    inits += more
    outs = ["q", "k", "v", "gate", "up", "other", "solo", "odd"]
    graph = helper.make_graph(
        nodes, "parallel", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, K])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs], inits,
    )  # fmt: skip
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10).SerializeToString()


def test_products_of_one_a_are_joined():
    rng = np.random.default_rng(5)
    data = _model(rng)
    x = rng.standard_normal((3, K)).astype(np.float32)
    s = InferenceSession(data)
    got = s.run(None, {"x": x})
    (program,) = s._programs.values()
    ops = program.operators()
    assert ops.count("GEMM") == 4, ops  # {q, k, v}, {gate, up, other}, solo, odd
    assert ops.count("SPLIT") == 2 and ops.count("JOIN") == 2, ops
    assert "ParallelQuantizedGemms x2" in s.explain()
    plain = InferenceSession(data, disabled_optimizers=["ParallelQuantizedGemms"])
    want = plain.run(None, {"x": x})
    (program,) = plain._programs.values()
    assert program.operators().count("GEMM") == 8
    for g, w in zip(got, want):
        assert g.shape == w.shape
        scale = np.abs(w).max()
        assert scale > 0.1
        # the same products; their float32 sums may run in another order (on a GPU the 4-bit
        # kernel splits a wider product otherwise): a column in the wrong place is off by O(1)
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5 * scale)
    ort = pytest.importorskip("onnxruntime")
    theirs = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for g, w in zip(got, theirs):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5 * np.abs(w).max())


def test_joined_scales_are_folded_once_per_session(monkeypatch):
    """Where ``run`` passes the weights as arguments (a GPU; here the CPU past its compiled-in
    limit), the JOINs of the joined products' scales depend on weights alone: the session
    computes them once (``Program.folded``) and the program takes them as arguments, with no
    JOIN (concatenation) left in it and the same values. ``apply`` with other scales computes
    its JOINs from them: the folded values are the session's own weights' only."""
    import jax

    from dml_jax import fastpath
    from dml_jax.onnx import session as session_module

    rng = np.random.default_rng(5)
    data = _model(rng)
    x = rng.standard_normal((3, K)).astype(np.float32)
    want = InferenceSession(data).run(None, {"x": x})
    monkeypatch.setattr(session_module, "CPU_BAKED_WEIGHTS_MAX_BYTES", -1)
    s = InferenceSession(data)
    got = s.run(None, {"x": x})
    (program,) = s._programs.values()
    joins = [n for n, _ in program.folded.values()]
    ops = program.imported.graph.nodes
    assert len(joins) == 2 and all(ops[n].operator_type == "DML_OPERATOR_JOIN" for n in joins)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    params = s._run_params(program)
    assert all(k in params for k in program.folded)
    # traced for the CPU, as lax alone (on a GPU a JOIN may take a fast path of its own)
    with fastpath.target_platform("cpu"):
        folded = str(jax.make_jaxpr(program.apply)(params, x)).count("concatenate")
        plain = str(jax.make_jaxpr(program.apply)(s._device_params(), x)).count("concatenate")
    assert plain - folded == 2  # the two JOINs, computed in the program without the values
    # apply with the q scales doubled: q's output doubles, the others stay
    doubled = dict(s.params, q_s=s.params["q_s"] * 2)
    out = s.apply(doubled, x)
    names = [o.name for o in s.get_outputs()]
    for name, y, w in zip(names, out, want):
        np.testing.assert_allclose(np.asarray(y), w * (2 if name == "q" else 1), rtol=1e-6)
