"""ONNX's own backend node tests of the element-wise operators, mapped onto DirectML descriptors.

Each ONNX node becomes the DML operator ONNX Runtime's DirectML provider uses for it; NumPy
broadcasting becomes DirectML's: every input desc gets the output's sizes, with stride 0 along
the dimensions it broadcasts (buffer mode). ONNX's bool tensors are DirectML's UINT8. The test
data comes from the ``onnx`` package (its test-case generators), so this module is skipped when
``onnx`` is not installed. A case whose data type DirectML's support table rejects is skipped
(named in the skip reason); every mapped ONNX operator must pass at least one case.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from onnx_cases import attrs, broadcast_desc, case_ids, node_cases, run_buffers_or_skip

import dml_jax as dml

onnx = pytest.importorskip("onnx")

E = "DML_OPERATOR_ELEMENT_WISE_"
UNARY = {
    "Sqrt": "SQRT", "Exp": "EXP", "Log": "LOG", "Abs": "ABS", "Neg": "NEGATE",
    "Reciprocal": "RECIP", "Floor": "FLOOR", "Ceil": "CEIL", "Sin": "SIN", "Cos": "COS",
    "Tan": "TAN", "Asin": "ASIN", "Acos": "ACOS", "Atan": "ATAN", "Sinh": "SINH",
    "Cosh": "COSH", "Tanh": "TANH", "Asinh": "ASINH", "Acosh": "ACOSH", "Atanh": "ATANH",
    "Erf": "ERF", "Sign": "SIGN", "IsNaN": "IS_NAN", "Not": "LOGICAL_NOT",
    "BitwiseNot": "BIT_NOT", "Round": "ROUND", "IsInf": "IS_INFINITY",
}  # fmt: skip
BINARY = {
    "Add": "ADD", "Sub": "SUBTRACT", "Mul": "MULTIPLY", "Div": "DIVIDE", "Pow": "POW",
    "Max": "MAX", "Min": "MIN", "Mean": "MEAN", "Mod": None, "BitShift": None,
    "BitwiseAnd": "BIT_AND", "BitwiseOr": "BIT_OR", "BitwiseXor": "BIT_XOR",
    "Equal": "LOGICAL_EQUALS", "Greater": "LOGICAL_GREATER_THAN",
    "GreaterOrEqual": "LOGICAL_GREATER_THAN_OR_EQUAL", "Less": "LOGICAL_LESS_THAN",
    "LessOrEqual": "LOGICAL_LESS_THAN_OR_EQUAL", "And": "LOGICAL_AND", "Or": "LOGICAL_OR",
    "Xor": "LOGICAL_XOR",
}  # fmt: skip
MAPPED = set(UNARY) | set(BINARY) | {"Where"}
CASES = node_cases(MAPPED, load_all=True)


def _name(op_type: str, node) -> str:
    at = attrs(node)
    if op_type == "Mod":
        return "MODULUS_TRUNCATE" if at.get("fmod", 0) else "MODULUS_FLOOR"
    if op_type == "BitShift":
        return "BIT_SHIFT_LEFT" if at["direction"] == b"LEFT" else "BIT_SHIFT_RIGHT"
    return {**UNARY, **BINARY, "Where": "IF"}[op_type]


def _dml_type(array: np.ndarray) -> str:
    return "UINT8" if array.dtype == np.bool_ else array.dtype.name.upper()


def _run(node, inputs: list[np.ndarray], out_type: str):
    op_type = node.op_type
    shape = tuple(np.broadcast_shapes(*(x.shape for x in inputs))) or (1,)
    arrays = [x.astype(np.uint8) if x.dtype == np.bool_ else x for x in inputs]
    ins = [broadcast_desc(x, shape, _dml_type(x)) for x in arrays]
    out = dml.TensorDesc(out_type, list(shape))
    name = E + _name(op_type, node)
    cls = dml.registry.lookup(name).desc_class
    kw = {}
    if op_type == "Round":
        kw["rounding_mode"] = "HALVES_TO_NEAREST_EVEN"
    if op_type == "IsInf":
        a = attrs(node)
        pos, neg = a.get("detect_positive", 1), a.get("detect_negative", 1)
        if not (pos or neg):
            pytest.skip("IsInf detecting nothing has no DirectML mode")
        kw["infinity_mode"] = "EITHER" if pos and neg else ("POSITIVE" if pos else "NEGATIVE")
    if op_type in ("Max", "Min", "Mean") and len(ins) != 2:
        if op_type == "Mean" or len(ins) == 1:
            pytest.skip(f"{op_type} of {len(ins)} inputs is not one DirectML operator")
        first = _run(node, inputs[:2], out_type)
        return _run(node, [first, *inputs[2:]], out_type)
    desc = cls(*ins, out, **kw)
    return run_buffers_or_skip(desc, arrays, shape, out.dtype)


@pytest.mark.parametrize("index", range(len(CASES)), ids=case_ids(CASES))
def test_onnx_node(index):
    _, node, _, inputs, outputs = CASES[index]
    want = outputs[0]
    if any(x.dtype.kind not in "biuf" for x in [*inputs, want]):
        pytest.skip("a string tensor: DirectML has no such data type")
    out_type = _dml_type(want)
    needs_x64 = any(x.dtype.itemsize == 8 for x in [*inputs, want])
    with jax.enable_x64(needs_x64):
        got = _run(node, list(inputs), out_type).reshape(want.shape)
    if want.dtype == np.bool_:
        np.testing.assert_array_equal(got != 0, want)
    elif want.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-7)
    else:
        np.testing.assert_array_equal(got, want)


def test_every_mapped_onnx_operator_has_cases():
    assert {node.op_type for _, node, *_ in CASES} == MAPPED
