"""Gemm, MatMul, Einsum, Conv and ConvTranspose through ``dml_jax.onnx.InferenceSession``, for
what ONNX's node tests (``test_onnx_backend.py``) leave out: MatMul batch dimensions that one
GEMM cannot take as they are, Gemm's C shapes, Einsum's general contractions (and which DML
operators they become), and ConvTranspose's negative pads. Models are built with
``onnx.helper``; expected values come from NumPy or ONNX's reference evaluator.
"""

from __future__ import annotations

import numpy as np
import pytest

import dml_jax as dml

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from dml_jax.onnx import InferenceSession, import_graph

TYPES = {
    np.float32: TensorProto.FLOAT,
    np.float16: TensorProto.FLOAT16,
    np.int32: TensorProto.INT32,
}


def _model(op_type, arrays, opset=21, names=None, **attributes):
    """A one-node model whose inputs are ``arrays`` (graph inputs), output ``y``."""
    names = names or [f"x{i}" for i in range(len(arrays))]
    node = helper.make_node(op_type, names, ["y"], **attributes)
    inputs = [
        helper.make_tensor_value_info(n, TYPES[a.dtype.type], a.shape)
        for n, a in zip(names, arrays)
    ]
    out = helper.make_tensor_value_info("y", TYPES[arrays[0].dtype.type], None)
    graph = helper.make_graph([node], op_type.lower(), inputs, [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10  # what onnxruntime 1.30 (the GPU machine) reads
    return model


def _run(model, arrays):
    names = [i.name for i in model.graph.input]
    (y,) = InferenceSession(model).run(None, dict(zip(names, arrays)))
    return y


def _reference(model, arrays):
    names = [i.name for i in model.graph.input]
    (y,) = ReferenceEvaluator(model).run(None, dict(zip(names, arrays)))
    return y


def _operators(model, arrays):
    """The DML operator types the model imports to, less the identities through which graph
    inputs and constants enter."""
    session = InferenceSession(model)
    return session.program([a.shape for a in arrays]).operators()


def _x(rng, *shape, dtype=np.float32):
    if dtype == np.int32:
        return rng.integers(-4, 5, shape).astype(np.int32)
    return rng.normal(size=shape).astype(dtype)


# ---------------------------------------------------------------------------------------------
# MatMul: batch dimensions beyond GEMM's two


@pytest.mark.parametrize(
    "a_shape, b_shape, copies",
    [
        ((2, 3, 4, 5, 6), (6, 7), 0),  # B broadcast over three batch dims that fold into one
        ((2, 3, 4, 5, 6), (2, 3, 4, 6, 7), 0),
        ((2, 1, 4, 5, 6), (3, 1, 6, 7), 2),  # both broadcast: both expanded
        ((1, 3, 1, 2, 3), (4, 1, 5, 3, 2), 2),
        ((5,), (2, 3, 4, 5, 2), 0),
        ((2, 3, 4, 3, 5), (5,), 0),
    ],
)
def test_matmul_batch_broadcasting(a_shape, b_shape, copies, rng):
    a, b = _x(rng, *a_shape), _x(rng, *b_shape)
    model = _model("MatMul", [a, b])
    np.testing.assert_allclose(_run(model, [a, b]), np.matmul(a, b), rtol=1e-5, atol=1e-5)
    ops = _operators(model, [a, b])
    assert ops.count("GEMM") == 1
    assert ops.count("ELEMENT_WISE_IDENTITY") == copies, ops


def test_matmul_by_one_matrix_is_one_2d_gemm(rng):
    """A linear layer: the batches' rows form one {batch * M, K} matrix (no broadcast B)."""
    a, b = _x(rng, 2, 3, 4, 5), _x(rng, 5, 6)
    model = _model("MatMul", [a, b])
    shapes = {"x0": a.shape, "x1": b.shape}
    (gemm,) = [n for n in import_graph(model, input_shapes=shapes).graph.nodes
               if n.operator_type == "DML_OPERATOR_GEMM"]  # fmt: skip
    assert gemm.a_tensor.sizes == (1, 1, 24, 5)
    assert gemm.b_tensor.sizes == (1, 1, 5, 6)
    np.testing.assert_allclose(_run(model, [a, b]), a @ b, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# Gemm


@pytest.mark.parametrize("c_shape", [(4, 1), (1,), (), (3,), (1, 3)])
@pytest.mark.parametrize("trans", [(0, 0), (1, 1)])
def test_gemm_broadcasts_c(c_shape, trans, rng):
    ta, tb = trans
    a = _x(rng, *((5, 4) if ta else (4, 5)))
    b = _x(rng, *((3, 5) if tb else (5, 3)))
    c = _x(rng, *c_shape)
    model = _model("Gemm", [a, b, c], transA=ta, transB=tb, alpha=0.5, beta=-2.0)
    want = 0.5 * ((a.T if ta else a) @ (b.T if tb else b)) - 2.0 * c
    np.testing.assert_allclose(_run(model, [a, b, c]), want, rtol=1e-5, atol=1e-5)


def test_gemm_without_c_and_opset_7(rng):
    a, b = _x(rng, 3, 4), _x(rng, 4, 2)
    np.testing.assert_allclose(_run(_model("Gemm", [a, b], opset=11), [a, b]), a @ b, rtol=1e-5)
    c = _x(rng, 3, 2)
    model = _model("Gemm", [a, b, c], opset=7, beta=0.25)
    np.testing.assert_allclose(_run(model, [a, b, c]), a @ b + 0.25 * c, rtol=1e-5, atol=1e-6)


def test_gemm_of_integers_is_rejected_by_gemm(rng):
    a, b = _x(rng, 3, 4, dtype=np.int32), _x(rng, 4, 2, dtype=np.int32)
    with pytest.raises(dml.ValidationError, match="GEMM"):
        _run(_model("Gemm", [a, b], opset=13), [a, b])


# ---------------------------------------------------------------------------------------------
# Einsum


EINSUM = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("ij,jk", [(3, 4), (4, 5)]),  # implicit output
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
    ("ii->i", [(4, 4)]),
    ("ii", [(4, 4)]),
    ("bii->b", [(3, 4, 4)]),
    ("ij->", [(3, 4)]),
    ("ijk->kji", [(2, 3, 4)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ij,ij->ij", [(3, 4), (3, 4)]),
    ("i,i", [(5,), (5,)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),
    ("...i,i->...", [(2, 3, 4), (4,)]),
    ("abc,cd,de->abe", [(2, 3, 4), (4, 5), (5, 6)]),
    ("ab,bc,ca->", [(3, 4), (4, 5), (5, 3)]),
    ("ijk,jil->kl", [(2, 3, 4), (3, 2, 5)]),
    ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),
]


@pytest.mark.parametrize("equation, shapes", EINSUM, ids=[e for e, _ in EINSUM])
def test_einsum(equation, shapes, rng):
    arrays = [_x(rng, *s) for s in shapes]
    got = _run(_model("Einsum", arrays, opset=12, equation=equation), arrays)
    want = np.einsum(equation, *arrays)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_einsum_integers_multiply_and_reduce(rng):
    arrays = [_x(rng, 3, 4, dtype=np.int32), _x(rng, 4, 5, dtype=np.int32)]
    model = _model("Einsum", arrays, opset=12, equation="ij,jk->ik")
    np.testing.assert_array_equal(_run(model, arrays), arrays[0] @ arrays[1])
    assert _operators(model, arrays) == ["ELEMENT_WISE_MULTIPLY", "REDUCE"]


@pytest.mark.parametrize(
    "equation, shapes, ops",
    [
        # Attention's scores: batch labels lead, K last in both: one GEMM with TransB, no copy.
        ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)], ["GEMM"]),
        ("bhqk,bhkd->bhqd", [(2, 3, 4, 6), (2, 3, 6, 5)], ["GEMM"]),
        ("ij->ji", [(3, 4)], ["ELEMENT_WISE_IDENTITY"]),
        ("ii->i", [(4, 4)], ["ELEMENT_WISE_IDENTITY"]),  # the diagonal as a strided read
        ("ij->i", [(3, 4)], ["REDUCE"]),
        ("i,j->ij", [(3,), (4,)], ["ELEMENT_WISE_MULTIPLY"]),
    ],
)
def test_einsum_operators(equation, shapes, ops, rng):
    arrays = [_x(rng, *s) for s in shapes]
    assert _operators(_model("Einsum", arrays, opset=12, equation=equation), arrays) == ops


def test_einsum_rejects_a_dropped_ellipsis(rng):
    a = _x(rng, 2, 3)
    with pytest.raises(dml.ValidationError, match="ellipsis"):
        _run(_model("Einsum", [a], opset=12, equation="...i->i"), [a])


# ---------------------------------------------------------------------------------------------
# Conv, ConvTranspose


CONV = [
    ({"x": (1, 4, 9), "w": (6, 2, 3)}, {"group": 2, "auto_pad": "SAME_LOWER", "strides": [2]}),
    (
        {"x": (2, 2, 5, 6, 4), "w": (3, 2, 2, 3, 2)},
        {"dilations": [2, 1, 1], "pads": [1, 0, 1, 0, 2, 1]},
    ),
    (
        {"x": (1, 3, 7, 8), "w": (3, 1, 3, 3)},
        {"group": 3, "auto_pad": "SAME_UPPER", "dilations": [2, 2]},
    ),
]


@pytest.mark.parametrize("shapes, attributes", CONV)
def test_conv(shapes, attributes, rng):
    x, w, b = _x(rng, *shapes["x"]), _x(rng, *shapes["w"]), _x(rng, shapes["w"][0])
    model = _model("Conv", [x, w, b], opset=11, **attributes)
    np.testing.assert_allclose(
        _run(model, [x, w, b]), _reference(model, [x, w, b]), rtol=1e-4, atol=1e-4
    )


CONV_TRANSPOSE = [
    # 3-D, dilations, explicit pads
    (
        {"x": (1, 2, 3, 4, 3), "w": (2, 2, 2, 3, 2)},
        {"dilations": [2, 1, 2], "pads": [1, 0, 0, 0, 1, 1]},
    ),
    # SAME_UPPER with a kernel shorter than the stride: ONNX's pads are negative at the start
    ({"x": (1, 2, 3, 3), "w": (2, 1, 2, 2)}, {"strides": [3, 3], "auto_pad": "SAME_UPPER"}),
    (
        {"x": (1, 2, 4, 3), "w": (2, 2, 3, 3)},
        {"strides": [2, 2], "auto_pad": "SAME_LOWER", "output_padding": [1, 0]},
    ),
]


@pytest.mark.parametrize("shapes, attributes", CONV_TRANSPOSE)
def test_conv_transpose(shapes, attributes, rng):
    x, w = _x(rng, *shapes["x"]), _x(rng, *shapes["w"])
    b = _x(rng, shapes["w"][1] * attributes.get("group", 1))
    model = _model("ConvTranspose", [x, w, b], opset=11, **attributes)
    got, want = _run(model, [x, w, b]), _reference(model, [x, w, b])
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_conv_transpose_1d_groups_against_onnxruntime(rng):
    """1-D, two groups, output padding, bias (ONNX's reference evaluator mishandles groups)."""
    ort = pytest.importorskip("onnxruntime")
    x, w, b = _x(rng, 2, 4, 5), _x(rng, 4, 3, 3), _x(rng, 6)
    model = _model("ConvTranspose", [x, w, b], opset=11, group=2, strides=[2], output_padding=[1])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = session.run(None, {"x0": x, "x1": w, "x2": b})
    np.testing.assert_allclose(_run(model, [x, w, b]), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "output_shape, start",
    [
        ([10, 7], [0, 0]),  # three rows longer than the full 7 x 7: PADDING, then the bias
        ([6, 5], [1, 1]),  # shorter: ONNX's pads, the odd one at the start
        ([8, 7], [0, 0]),  # one longer: OutputPadding
    ],
)
def test_conv_transpose_output_shape(output_shape, start, rng):
    """The output is the full result (7 x 7 here) read from ``start``, zeros past its end, plus
    the bias (ONNX's formulas; its reference evaluator rejects these shapes)."""
    x, w, b = _x(rng, 1, 1, 3, 3), _x(rng, 1, 2, 3, 3), _x(rng, 2)
    full = _reference(_model("ConvTranspose", [x, w], opset=11, strides=[2, 2]), [x, w])
    padded = np.zeros((1, 2, 12, 12), np.float32)
    padded[:, :, :7, :7] = full
    want = padded[
        :, :, start[0] : start[0] + output_shape[0], start[1] : start[1] + output_shape[1]
    ]
    want = want + b[None, :, None, None]
    model = _model("ConvTranspose", [x, w, b], opset=11, strides=[2, 2], output_shape=output_shape)
    np.testing.assert_allclose(_run(model, [x, w, b]), want, rtol=1e-5, atol=1e-5)
