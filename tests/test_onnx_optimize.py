"""Graph optimizations on imported ONNX models (``dml_jax.onnx.optimize``).

Each rewrite gets a small model in the spelling exporters write (``onnx.helper``): the rewrite
fires (its count, the DML operator types of the optimized program) and the outputs equal those
of the same model at the ``disable`` level within float rounding; it leaves alone what it must
not rewrite (a second reader of an intermediate, a computed statistic, another epsilon
placement, a parameter as a pattern constant). Then the switches and levels, ``apply`` with a
replaced folded parameter, ``optimized_model_filepath`` and ``explain``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import helper, numpy_helper

import dml_jax as dml
from dml_jax.onnx import InferenceSession, SessionOptions, compile_onnx

TOL = {"rtol": 1e-5, "atol": 1e-5}


def _const(name: str, value) -> onnx.NodeProto:
    """A Constant node (exporters' scalars: not a parameter)."""
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(
        np.asarray(value, np.float32), name))  # fmt: skip


def _model(nodes, shape, inits=(), outputs=("y",), opset=17, dtype=np.float32):
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    if dtype != np.float32:  # the Constant nodes' values too
        nodes = [helper.make_node("Constant", [], list(n.output), value=numpy_helper.from_array(
                     numpy_helper.to_array(n.attribute[0].t).astype(dtype), n.output[0]))
                 if n.op_type == "Constant" else n for n in nodes]  # fmt: skip
    x = helper.make_tensor_value_info("x", elem, list(shape))
    outs = [helper.make_tensor_value_info(o, elem, None) for o in outputs]
    init = [numpy_helper.from_array(np.asarray(v, dtype), k) for k, v in inits]
    graph = helper.make_graph(list(nodes), "g", [x], outs, init)
    # IR 10: onnxruntime 1.30 (the GPU machine's) reads no newer
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def _session(model, level="all", disabled=None, **kw):
    options = SessionOptions()
    options.graph_optimization_level = level
    for k, v in kw.items():
        setattr(options, k, v)
    return InferenceSession(model, options, disabled_optimizers=disabled)


def _program(s):
    return list(s._programs.values())[-1]


def _check(rng, model, shape, fired: dict, level="all", disabled=None, dtype=np.float32):
    """Runs ``model`` at ``level`` and at ``disable``; the outputs agree (float16: within two
    units in the last place of the magnitudes here), the rewrites that fired are ``fired``;
    returns the optimized program's operator types."""
    feed = {"x": rng.standard_normal(shape).astype(dtype)}
    s = _session(model, level, disabled)
    got = s.run(None, feed)
    want = _session(model, "disable").run(None, feed)
    tol = TOL if dtype == np.float32 else {"rtol": 2e-3, "atol": 2e-3}
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.astype(np.float32), b.astype(np.float32), **tol)
    program = _program(s)
    assert dict(program.imported.optimizations) == fired
    return program.operators()


# ---------------------------------------------------------------------------------------------
# GELU, Swish


def _gelu_nodes(variant: int, x: str = "x", y: str = "y") -> list:
    consts = [_const("sq2", np.sqrt(2)), _const("one", 1.0), _const("half", 0.5),
              _const("isq2", 1 / np.sqrt(2))]  # fmt: skip
    if variant % 2:  # x * (1 / sqrt 2), constant first
        arg = [helper.make_node("Mul", ["isq2", x], ["a"])]
    else:
        arg = [helper.make_node("Div", [x, "sq2"], ["a"])]
    core = arg + [
        helper.make_node("Erf", ["a"], ["b"]),
        helper.make_node("Add", ["one", "b"], ["c"]),
    ]
    tails = [
        [helper.make_node("Mul", [x, "c"], ["d"]), helper.make_node("Mul", ["d", "half"], [y])],
        [helper.make_node("Mul", ["half", x], ["d"]), helper.make_node("Mul", ["c", "d"], [y])],
        [helper.make_node("Mul", ["c", "half"], ["d"]), helper.make_node("Mul", ["d", x], [y])],
    ]
    return consts + core + tails[variant % 3]


@pytest.mark.parametrize("variant", [0, 1, 2])
def test_gelu_erf_spellings_become_activation_gelu(variant, rng):
    ops = _check(rng, _model(_gelu_nodes(variant), [2, 8]), (2, 8), {"GeluFusion": 1})
    assert ops == ["ACTIVATION_GELU"]


def test_float16_constants_are_the_float16_roundings(rng):
    # float16's sqrt(2) is 1.4140625: the pattern's constant as the model's type rounds it
    model = _model(_gelu_nodes(0), [2, 8], dtype=np.float16)
    assert _check(rng, model, (2, 8), {"GeluFusion": 1}, dtype=np.float16) == ["ACTIVATION_GELU"]


def test_gelu_not_fused_with_a_second_reader_or_a_parameter_constant(rng):
    # erf's result also an output: the chain must stay
    model = _model(_gelu_nodes(0), [2, 8], outputs=("y", "b"))
    assert "ACTIVATION_GELU" not in _check(rng, model, (2, 8), {})
    # 0.5 an initializer (apply may replace it): left as it is
    nodes = [n for n in _gelu_nodes(0) if n.output[0] != "half"]
    assert "ACTIVATION_GELU" not in _check(rng, _model(nodes, [2, 8], [("half", 0.5)]), (2, 8), {})


def test_silu_and_quick_gelu_become_swish(rng):
    silu = [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["s", "x"], ["y"])]
    assert _check(rng, _model(silu, [2, 8]), (2, 8), {"QuickGeluFusion": 1}) == ["ACTIVATION_SWISH"]
    quick = [_const("a", 1.702), helper.make_node("Mul", ["x", "a"], ["xa"]),
             helper.make_node("Sigmoid", ["xa"], ["s"]), helper.make_node("Mul", ["x", "s"], ["y"])]  # fmt: skip
    s = _session(_model(quick, [2, 8]))
    s.run(None, {"x": np.ones((2, 8), np.float32)})
    (node,) = [n for n in _program(s).imported.graph.nodes if "SWISH" in n.operator_type]
    assert node.sigmoid_input_scale == pytest.approx(1.702)
    # basic stops below QuickGeluFusion's level
    assert _check(rng, _model(silu, [2, 8]), (2, 8), {}, level="basic") == [
        "ACTIVATION_SIGMOID", "ELEMENT_WISE_MULTIPLY"]  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Layer norm, RMS norm


def _layer_norm_nodes(eps_inside=True):
    nodes = [
        _const("two", 2.0), _const("eps", 1e-5),
        helper.make_node("ReduceMean", ["x"], ["m"], axes=[-1]),
        helper.make_node("Sub", ["x", "m"], ["d"]),
        helper.make_node("Pow", ["d", "two"], ["d2"]),
        helper.make_node("ReduceMean", ["d2"], ["v"], axes=[-1]),
    ]  # fmt: skip
    if eps_inside:
        nodes += [helper.make_node("Add", ["v", "eps"], ["ve"]),
                  helper.make_node("Sqrt", ["ve"], ["s"])]  # fmt: skip
    else:  # sqrt(v) + eps: another formula
        nodes += [helper.make_node("Sqrt", ["v"], ["sv"]),
                  helper.make_node("Add", ["sv", "eps"], ["s"])]  # fmt: skip
    return nodes + [
        helper.make_node("Div", ["d", "s"], ["n"]),
        helper.make_node("Mul", ["n", "gamma"], ["ng"]),
        helper.make_node("Add", ["beta", "ng"], ["y"]),
    ]


def _affine(rng):
    """LayerNorm's scale and bias, (gamma, beta)."""
    return [("gamma", rng.standard_normal(16)), ("beta", rng.standard_normal(16))]


def test_layer_norm_becomes_mvn1(rng):
    ops = _check(rng, _model(_layer_norm_nodes(), [2, 3, 16], _affine(rng)), (2, 3, 16),
                 {"LayerNormFusion": 1})  # fmt: skip
    assert ops == ["MEAN_VARIANCE_NORMALIZATION1"]


def test_layer_norm_other_epsilon_placement_left_alone(rng):
    model = _model(_layer_norm_nodes(eps_inside=False), [2, 3, 16], _affine(rng))
    assert "MEAN_VARIANCE_NORMALIZATION1" not in _check(rng, model, (2, 3, 16), {})


def test_rms_norm_becomes_mvn2(rng):
    nodes = [
        _const("eps", 1e-6), _const("one", 1.0),
        helper.make_node("Mul", ["x", "x"], ["x2"]),
        helper.make_node("ReduceMean", ["x2"], ["v"], axes=[-1]),
        helper.make_node("Add", ["eps", "v"], ["ve"]),
        helper.make_node("Sqrt", ["ve"], ["s"]),
        helper.make_node("Reciprocal", ["s"], ["r"]),
        helper.make_node("Mul", ["x", "r"], ["n"]),
        helper.make_node("Mul", ["gamma", "n"], ["y"]),
    ]  # fmt: skip
    ops = _check(rng, _model(nodes, [2, 3, 16], _affine(rng)[:1]), (2, 3, 16),
                 {"SimplifiedLayerNormFusion": 1})  # fmt: skip
    assert ops == ["MEAN_VARIANCE_NORMALIZATION2"]


# ---------------------------------------------------------------------------------------------
# MatMul + Add, activations, batch normalization


def test_matmul_bias_and_relu_fold_into_gemm(rng):
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"]), helper.make_node("Add", ["mm", "b"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]  # fmt: skip
    inits = [("w", rng.standard_normal((8, 5))), ("b", rng.standard_normal(5))]
    model = _model(nodes, [2, 3, 8], inits)
    ops = _check(rng, model, (2, 3, 8), {"MatMulAddFusion": 1, "DmlOperatorFusionTransformer": 1})
    assert ops == ["GEMM"]
    # each switch alone
    ops = _check(rng, model, (2, 3, 8), {"MatMulAddFusion": 1},
                 disabled=["DmlOperatorFusionTransformer"])  # fmt: skip
    assert ops == ["GEMM", "ACTIVATION_RELU"]


def test_matmul_residual_add_and_a_second_reader(rng):
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"]),
        helper.make_node("Add", ["x", "mm"], ["y"]),
    ]
    assert _check(rng, _model(nodes, [4, 8], [("w", rng.standard_normal((8, 8)))]), (4, 8),
                  {"MatMulAddFusion": 1}) == ["GEMM"]  # fmt: skip
    # the product is also an output: the addition stays
    model = _model(nodes, [4, 8], [("w", rng.standard_normal((8, 8)))], outputs=("y", "mm"))
    assert _check(rng, model, (4, 8), {}) == ["GEMM", "ELEMENT_WISE_ADD"]


def _conv_bn(rng, stat_inputs=None):
    k = 4
    inits = [("w", rng.standard_normal((k, 3, 3, 3))), ("cb", rng.standard_normal(k)),
             ("s", rng.standard_normal(k)), ("b", rng.standard_normal(k)),
             ("m", rng.standard_normal(k)), ("v", rng.random(k) + 0.5)]  # fmt: skip
    nodes = [helper.make_node("Conv", ["x", "w", "cb"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "s", "b", stat_inputs or "m", "v"], ["bn"]),
             helper.make_node("Relu", ["bn"], ["y"])]  # fmt: skip
    return nodes, inits


def test_conv_bn_relu_folds_into_one_convolution(rng):
    nodes, inits = _conv_bn(rng)
    ops = _check(rng, _model(nodes, [1, 3, 6, 6], inits), (1, 3, 6, 6),
                 {"ConvBNFusion": 1, "DmlOperatorFusionTransformer": 1})  # fmt: skip
    # the folded weights are computed by graph nodes from the parameters (apply may replace them)
    assert ops.count("CONVOLUTION") == 1 and "BATCH_NORMALIZATION" not in ops
    assert "ACTIVATION_RELU" not in ops


def test_conv_bn_folded_on_the_host_when_nothing_is_a_parameter(rng):
    nodes, inits = _conv_bn(rng)
    consts = [helper.make_node("Constant", [], [k], value=numpy_helper.from_array(
        np.asarray(v, np.float32), k)) for k, v in inits]  # fmt: skip
    ops = _check(rng, _model(consts + nodes, [1, 3, 6, 6]), (1, 3, 6, 6),
                 {"ConvBNFusion": 1, "DmlOperatorFusionTransformer": 1})  # fmt: skip
    assert ops == ["CONVOLUTION"]


def test_conv_bn_not_folded_with_a_computed_statistic(rng):
    nodes, inits = _conv_bn(rng, stat_inputs="mx")
    # the mean computed from the input: the normalization stays (its activation still fuses)
    nodes[:0] = [helper.make_node("ReduceMean", ["x"], ["xm"], keepdims=0),
                 helper.make_node("Mul", ["m", "xm"], ["mx"])]  # fmt: skip
    model = _model(nodes, [1, 3, 6, 6], inits)
    fired = {"DmlOperatorFusionTransformer": 1}
    assert "BATCH_NORMALIZATION" in _check(rng, model, (1, 3, 6, 6), fired)


@pytest.mark.parametrize("op", ["MatMul", "Gemm"])
def test_gemm_bn_folds_into_b_and_c(op, rng):
    k = 5
    inits = [("w", rng.standard_normal((8, k))), ("c", rng.standard_normal(k)),
             ("s", rng.standard_normal(k)), ("b", rng.standard_normal(k)),
             ("m", rng.standard_normal(k)), ("v", rng.random(k) + 0.5)]  # fmt: skip
    mm = (helper.make_node("MatMul", ["x", "w"], ["mm"]) if op == "MatMul" else
          helper.make_node("Gemm", ["x", "w", "c"], ["mm"], beta=0.5))  # fmt: skip
    bn = helper.make_node("BatchNormalization", ["mm", "s", "b", "m", "v"], ["y"])
    ops = _check(rng, _model([mm, bn], [16, 8], inits), (16, 8), {"MatmulBNFusion": 1})
    # one GEMM; the rest are the element-wise nodes computing B * f and C from the parameters
    assert ops.count("GEMM") == 1 and "BATCH_NORMALIZATION" not in ops
    assert all(o.startswith("ELEMENT_WISE_") for o in ops if o != "GEMM")
    # 2 rows: B (40 elements) is larger than the output (10) the fold would save a pass over
    assert "BATCH_NORMALIZATION" in _check(rng, _model([mm, bn], [2, 8], inits), (2, 8), {})


def test_conv_channel_add_becomes_the_bias(rng):
    inits = [("w", rng.standard_normal((4, 3, 3, 3))), ("b", rng.standard_normal((1, 4, 1, 1)))]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node("Add", ["c", "b"], ["y"]),
    ]
    ops = _check(rng, _model(nodes, [1, 3, 5, 5], inits), (1, 3, 5, 5), {"ConvAddFusion": 1})
    assert ops == ["CONVOLUTION"]


def test_apply_with_a_replaced_folded_parameter(rng):
    nodes, inits = _conv_bn(rng)
    model = _model(nodes, [1, 3, 6, 6], inits)
    x = rng.standard_normal((1, 3, 6, 6)).astype(np.float32)
    opt, plain = _session(model), _session(model, "disable")
    params = dict(opt.params, s=np.full(4, 3.0, np.float32), w=opt.params["w"] * 2)
    (got,), (want,) = opt.apply(params, x), plain.apply(params, x)
    np.testing.assert_allclose(got, want, **TOL)
    assert not np.allclose(got, opt.apply(opt.params, x)[0])
    assert dict(_program(opt).imported.optimizations)["ConvBNFusion"] == 1


# ---------------------------------------------------------------------------------------------
# Transposes into strides


def test_transpose_copy_read_through_strides(rng):
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Transpose", ["r"], ["t"], perm=[1, 0, 2]),
             helper.make_node("Sigmoid", ["t"], ["y"])]  # fmt: skip
    model = _model(nodes, [2, 3, 8])
    assert _check(rng, model, (2, 3, 8), {"StridedCopyElimination": 1}) == [
        "ACTIVATION_RELU", "ACTIVATION_SIGMOID"]  # fmt: skip
    # below `all`, and when the transposed tensor is an output, the copy stays
    assert "ELEMENT_WISE_IDENTITY" in _check(rng, model, (2, 3, 8), {}, level="extended")
    model = _model(nodes, [2, 3, 8], outputs=("y", "t"))
    assert "ELEMENT_WISE_IDENTITY" in _check(rng, model, (2, 3, 8), {})


def test_a_linear_layer_and_its_gelu_and_residual_take_the_gemm_sizes(rng):
    # x {2, 4, 8} -> MatMul + bias -> GELU -> MatMul + bias -> + x: each GEMM is one {8, N}
    # matrix; its one reader (the GELU, the residual addition) takes the GEMM's sizes, as the
    # GPU's GEMM epilogues need
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["m1"]),
             helper.make_node("Add", ["m1", "b1"], ["h"]), *_gelu_nodes(0, "h", "g"),
             helper.make_node("MatMul", ["g", "w2"], ["m2"]),
             helper.make_node("Add", ["m2", "b2"], ["o"]), helper.make_node("Add", ["x", "o"], ["y"])]  # fmt: skip
    inits = [("w1", rng.standard_normal((8, 16))), ("b1", rng.standard_normal(16)),
             ("w2", rng.standard_normal((16, 8))), ("b2", rng.standard_normal(8))]  # fmt: skip
    fired = {"GeluFusion": 1, "MatMulAddFusion": 2, "GemmEpilogueLayout": 2}
    s = _session(_model(nodes, [2, 4, 8], inits))
    assert _check(rng, _model(nodes, [2, 4, 8], inits), (2, 4, 8), fired) == [
        "GEMM", "GEMM", "ELEMENT_WISE_ADD", "ACTIVATION_GELU"]  # fmt: skip
    s.run(None, {"x": np.ones((2, 4, 8), np.float32)})
    graph = _program(s).imported.graph
    for node in graph.nodes:
        if node.operator_type.endswith(("GELU", "_ADD")):
            assert {d.sizes for _, d in node.edge_slots("input") + node.edge_slots("output")} == {
                (1, 1, 8, 16) if "GELU" in node.operator_type else (1, 1, 8, 8)}  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Switches, levels, files, explain


def test_levels_and_switches_by_onnxruntime_names():
    ort = pytest.importorskip("onnxruntime")
    model = _model(_gelu_nodes(0), [2, 8])
    x = {"x": np.ones((2, 8), np.float32)}
    for level, fired in [(ort.GraphOptimizationLevel.ORT_DISABLE_ALL, {}),
                         (ort.GraphOptimizationLevel.ORT_ENABLE_BASIC, {"GeluFusion": 1}),
                         (ort.GraphOptimizationLevel.ORT_ENABLE_LAYOUT, {"GeluFusion": 1}),
                         (1, {"GeluFusion": 1}), (0, {})]:  # fmt: skip
        s = _session(model, level)
        s.run(None, x)
        assert dict(_program(s).imported.optimizations) == fired
    s = _session(model, disabled=["GeluFusion"])
    s.run(None, x)
    assert _program(s).imported.optimizations == ()
    c = compile_onnx(model, optimization_level="disable")
    assert [n.operator_type for n in c.imported.graph.nodes].count(
        "DML_OPERATOR_ELEMENT_WISE_ERF"
    ) == 1
    c = compile_onnx(model, disabled_optimizers=["LayerNormFusion"])
    assert dict(c.imported.optimizations) == {"GeluFusion": 1}


def test_unknown_level_or_name_is_a_validation_error():
    model = _model(_gelu_nodes(0), [2, 8])
    with pytest.raises(dml.ValidationError, match="graph_optimization_level"):
        _session(model, "fastest")
    with pytest.raises(dml.ValidationError, match="disabled_optimizers.*NoSuchFusion"):
        InferenceSession(model, disabled_optimizers=["NoSuchFusion"])
    with pytest.raises(dml.ValidationError, match="optimization_level"):
        compile_onnx(model, optimization_level=7)


def test_optimized_model_filepath_runs_with_dml_jax_run(tmp_path, capsys):
    from dml_jax.cli import main

    path = tmp_path / "gelu.json"
    s = _session(_model(_gelu_nodes(0), [2, 8]), optimized_model_filepath=str(path))
    s.run(None, {"x": np.ones((2, 8), np.float32)})
    doc = json.loads(path.read_text())
    (graph,) = doc["dispatchables"].values()
    assert [n["type"] for n in graph["Nodes"]].count("DML_OPERATOR_ACTIVATION_GELU") == 1
    capsys.readouterr()
    assert main(["run", str(path)]) == 0
    assert "output:y" in capsys.readouterr().out


def test_optimized_model_filepath_with_a_jax_node_is_an_error(tmp_path):
    nodes = [
        helper.make_node("NonZero", ["x"], ["nz"]),
        helper.make_node("Cast", ["nz"], ["y"], to=1),
    ]
    s = _session(_model(nodes, [2, 3]), optimized_model_filepath=str(tmp_path / "m.json"))
    with pytest.raises(dml.ValidationError, match="optimized_model_filepath.*JAX"):
        s.run(None, {"x": np.ones((2, 3), np.float32)})


def test_explain_names_the_rewrites_that_fired():
    s = _session(_model(_gelu_nodes(1), [2, 8]))
    s.run(None, {"x": np.ones((2, 8), np.float32)})
    text = s.explain()
    assert text.splitlines()[-1] == "optimizations: GeluFusion x1"
    assert "(Erf): dml (rewritten)" in text and "ACTIVATION_GELU" in text


# ---------------------------------------------------------------------------------------------
# Channels last


def _conv(out: str, x: str, w: str, b: str | None = None, **kw) -> onnx.NodeProto:
    return helper.make_node("Conv", [x, w] + ([b] if b else []), [out], **kw)


def _residual_block(rng, tail=()):
    """x -> conv a (3x3) -> ReLU -> conv b (1x1) -> a + b -> ReLU -> conv y (1x1): the ReLU
    after a (a has a second reader, so it stays a node) and the addition sit between
    convolutions."""
    nodes = [_conv("a", "x", "w1", "b1", pads=[1, 1, 1, 1]), helper.make_node("Relu", ["a"], ["r"]),
             _conv("b", "r", "w2"), helper.make_node("Add", ["a", "b"], ["s"]),
             helper.make_node("Relu", ["s"], ["t"]), *tail]  # fmt: skip
    inits = [("w1", rng.standard_normal((4, 3, 3, 3))), ("b1", rng.standard_normal(4)),
             ("w2", rng.standard_normal((4, 4, 1, 1))), ("w3", rng.standard_normal((2, 4, 1, 1))),
             ("wg", rng.standard_normal((4 * 8 * 8, 5)))]  # fmt: skip
    return nodes, inits


def test_element_wise_nodes_between_convolutions_run_channels_last(rng):
    nodes, inits = _residual_block(rng, [_conv("y", "t", "w3")])
    model = _model(nodes, [1, 3, 8, 8], [i for i in inits if i[0] != "wg"])
    fired = {"DmlOperatorFusionTransformer": 1, "ChannelsLast": 2}
    assert _check(rng, model, (1, 3, 8, 8), fired) == [
        "CONVOLUTION", "ACTIVATION_RELU", "CONVOLUTION", "ELEMENT_WISE_ADD1", "CONVOLUTION"]  # fmt: skip
    s = _session(model)
    s.run(None, {"x": np.ones((1, 3, 8, 8), np.float32)})
    graph = _program(s).imported.graph
    by_type = {}
    for node in graph.nodes:
        by_type.setdefault(node.operator_type.removeprefix("DML_OPERATOR_"), []).append(node)
    relu, add = by_type["ACTIVATION_RELU"][0], by_type["ELEMENT_WISE_ADD1"][0]
    # NHWC sizes, each input a view of its convolution's NCHW output
    assert relu.output_tensor.sizes == add.output_tensor.sizes == (1, 8, 8, 4)
    assert add.a_tensor.layout_strides == add.b_tensor.layout_strides == (256, 8, 1, 64)
    # the convolutions after them read the NHWC bytes through strides
    for conv in by_type["CONVOLUTION"][1:]:
        assert conv.input_tensor.sizes == (1, 4, 8, 8)
        assert conv.input_tensor.layout_strides[1:] == (1, 32, 4)
    # off with its switch, and below `all`
    plain = {"DmlOperatorFusionTransformer": 1}
    _check(rng, model, (1, 3, 8, 8), plain, disabled=["ChannelsLast"])
    _check(rng, model, (1, 3, 8, 8), plain, level="extended")


def test_channels_last_leaves_outputs_flattens_and_nodes_away_from_convolutions(rng):
    # the addition is a graph output too: it keeps NCHW (both ReLUs, now apart from it, move)
    nodes, inits = _residual_block(rng, [_conv("y", "t", "w3")])
    inits = [i for i in inits if i[0] != "wg"]
    model = _model(nodes, [1, 3, 8, 8], inits, outputs=("y", "s"))
    assert _check(rng, model, (1, 3, 8, 8), {"ChannelsLast": 2}).count("ACTIVATION_RELU") == 2
    s = _session(model)
    s.run(None, {"x": np.ones((1, 3, 8, 8), np.float32)})
    (add,) = [n for n in _program(s).imported.graph.nodes if "ADD" in n.operator_type]
    assert add.output_tensor.sizes == (1, 4, 8, 8)
    # the ReLU's output flattened into a GEMM's rows: NHWC bytes would need a copy there
    flat = [
        helper.make_node("Flatten", ["t"], ["f"]),
        helper.make_node("MatMul", ["f", "wg"], ["y"]),
    ]
    nodes, inits = _residual_block(rng, flat)
    fired = {"DmlOperatorFusionTransformer": 1, "ChannelsLast": 1}
    _check(
        rng, _model(nodes, [1, 3, 8, 8], [i for i in inits if i[0] != "w3"]), (1, 3, 8, 8), fired
    )
    # element-wise 4-D nodes with no convolution beside them (an attention's scores)
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Sigmoid", ["r"], ["y"])]
    _check(rng, _model(nodes, [2, 3, 5, 5]), (2, 3, 5, 5), {})
    # beside a grouped convolution of several channels a group only (lowered per group,
    # channels first)
    nodes = [_conv("d", "x", "wd", group=2, pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["d", "x"], ["y"])]  # fmt: skip
    _check(
        rng,
        _model(nodes, [1, 4, 6, 6], [("wd", rng.standard_normal((4, 2, 3, 3)))]),
        (1, 4, 6, 6),
        {},
    )


def test_channels_last_takes_depthwise_neighbours_and_readers_listing_nhwc(rng):
    """x -> 1x1 conv -> depthwise conv -> Sigmoid, Mul (a Swish) -> squeeze-excitation (a
    global average pool, its scale multiplied in) -> 1x1 conv, as EfficientNet's blocks: the
    Swish after the depthwise convolution runs channels-last too, and the multiply taken
    before it (beside the last convolution), which read it through an NHWC listing of its
    NCHW bytes, reads it packed; outputs as without the rewrite and at ``disable``."""
    nodes = [_conv("c", "x", "w1"), _conv("d", "c", "wd", group=6, pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["d"], ["g"]), helper.make_node("Mul", ["d", "g"], ["sw"]),
             helper.make_node("GlobalAveragePool", ["sw"], ["p"]),
             helper.make_node("Sigmoid", ["p"], ["ps"]),
             helper.make_node("Mul", ["sw", "ps"], ["m"]), _conv("y", "m", "w3")]  # fmt: skip
    inits = [("w1", rng.standard_normal((6, 3, 1, 1))), ("wd", rng.standard_normal((6, 1, 3, 3))),
             ("w3", rng.standard_normal((4, 6, 1, 1)))]  # fmt: skip
    model = _model(nodes, [1, 3, 8, 8], inits)
    s = _session(model)
    s.run(None, {"x": np.ones((1, 3, 8, 8), np.float32)})
    fired = dict(_program(s).imported.optimizations)
    assert fired.get("ChannelsLast", 0) >= 2
    _check(rng, model, (1, 3, 8, 8), fired)
    graph = _program(s).imported.graph
    swish = [n for n in graph.nodes if n.operator_type.endswith("ACTIVATION_SWISH")]
    muls = [n for n in graph.nodes if n.operator_type.endswith("ELEMENT_WISE_MULTIPLY")]
    assert swish and swish[0].output_tensor.sizes == (1, 8, 8, 6)  # listed NHWC, packed
    # the depthwise convolution's NCHW bytes, listed NHWC
    assert swish[0].input_tensor.sizes == (1, 8, 8, 6)
    assert swish[0].input_tensor.layout_strides == (384, 8, 1, 64)
    # the squeeze-excitation's multiply reads the Swish's NHWC bytes packed
    (mul,) = [m for m in muls if m.output_tensor.sizes == (1, 8, 8, 6)]
    (full,) = [t for t in (mul.a_tensor, mul.b_tensor) if 0 not in t.layout_strides]
    assert full.sizes == (1, 8, 8, 6) and full.is_packed  # the other: the scale, broadcast
    plain = {k: v for k, v in fired.items() if k != "ChannelsLast"}
    _check(rng, model, (1, 3, 8, 8), plain, disabled=["ChannelsLast"])


def test_channels_last_follows_a_chain_and_hands_a_graph_output_back_through_strides(rng):
    # two convolutions -> Add -> BatchNormalization (Sigmoid fused) -> Tanh (a graph output):
    # the addition reads convolutions; the normalization only the addition, taken before it;
    # the Tanh, an output, stays NCHW and reads the normalization's NHWC bytes through strides
    nodes = [_conv("a", "x", "w1", pads=[1, 1, 1, 1]), _conv("b", "x", "w2"),
             helper.make_node("Add", ["a", "b"], ["s"]),
             helper.make_node("BatchNormalization", ["s", "g", "be", "mu", "var"], ["n"]),
             helper.make_node("Sigmoid", ["n"], ["t"]), helper.make_node("Tanh", ["t"], ["y"])]  # fmt: skip
    inits = [("w1", rng.standard_normal((4, 3, 3, 3))), ("w2", rng.standard_normal((4, 3, 1, 1))),
             ("g", rng.uniform(0.5, 2, 4)), ("be", rng.standard_normal(4)),
             ("mu", rng.standard_normal(4)), ("var", rng.uniform(0.5, 2, 4))]  # fmt: skip
    model = _model(nodes, [1, 3, 8, 8], inits)
    fired = {"DmlOperatorFusionTransformer": 1, "ChannelsLast": 2}
    assert _check(rng, model, (1, 3, 8, 8), fired) == [
        "CONVOLUTION", "CONVOLUTION", "ELEMENT_WISE_ADD", "BATCH_NORMALIZATION",
        "ACTIVATION_TANH"]  # fmt: skip
    s = _session(model)
    s.run(None, {"x": np.ones((1, 3, 8, 8), np.float32)})
    nodes = {
        n.operator_type.removeprefix("DML_OPERATOR_"): n for n in _program(s).imported.graph.nodes
    }
    norm, tanh = nodes["BATCH_NORMALIZATION"], nodes["ACTIVATION_TANH"]
    assert norm.output_tensor.sizes == (1, 8, 8, 4)
    assert norm.mean_tensor.sizes == (1, 8, 8, 4) and norm.mean_tensor.layout_strides[1:3] == (0, 0)
    assert tanh.output_tensor.sizes == tanh.input_tensor.sizes == (1, 4, 8, 8)
    assert tanh.input_tensor.layout_strides[1:] == (1, 32, 4)
