"""Helpers shared by the ONNX node-test modules (test_onnx_*.py).

Each module maps some ONNX operators onto DirectML descriptors and runs ONNX's own backend node
test cases through them: ``node_cases`` loads the cases, ``attrs`` reads a node's attributes
(``conv_attrs`` and ``forward_pads`` a convolution's), ``dml_type`` names an array's DML data
type, ``run_or_skip`` / ``run_buffers_or_skip`` validate and run a descriptor (skipping what
DirectML's support tables reject), ``case_ids`` names the parametrized tests, ``assert_outputs`` compares a result with ONNX's
expected outputs and ``assert_every_op_type_passes`` checks every mapped operator passes
somewhere.

Nothing here imports ``onnx`` at module level: the test modules skip themselves without it.
"""

from __future__ import annotations

import functools
import importlib
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import pytest
import strategies

import dml_jax as dml


class NodeCase(NamedTuple):
    """One data set of a single-node ONNX test case."""

    name: str
    node: Any  # onnx.NodeProto
    opset: int  # the model's default-domain opset
    inputs: Sequence[Any]
    outputs: Sequence[Any]


def node_cases(
    op_types: Iterable[str] | Mapping[str, str], *, load_all: bool = False
) -> tuple[NodeCase, ...]:
    """ONNX's single-node test cases of ``op_types``, one ``NodeCase`` per data set (cached).

    Generating every case (``collect_testcases(None)``) takes about 10 s; importing just the
    generator modules of ``onnx.backend.test.case.node`` that define the wanted operators
    registers their cases in the list ``collect_testcases`` returns, in a fraction of a second.
    A mapping gives each op type's generator module, imported in the mapping's order; otherwise
    each op type's lower-cased name is, in sorted order. ``load_all``, or a failed import, loads
    every module instead. Cases are kept in ONNX's registration order.
    """
    if isinstance(op_types, Mapping):
        modules = tuple(op_types.items())
    else:
        modules = tuple((op, op.lower()) for op in sorted(op_types))
    return _node_cases(modules, load_all)


@functools.cache
def _node_cases(modules: tuple[tuple[str, str], ...], load_all: bool) -> tuple[NodeCase, ...]:
    from onnx.backend.test.case import node as package

    found = None
    with np.errstate(all="ignore"):
        if not load_all:
            try:
                for _, module in modules:
                    importlib.import_module(f"{package.__name__}.{module}")
                found = list(package._NodeTestCases)
            except (ImportError, AttributeError):
                pass
        if found is None:
            found = package.collect_testcases(None)
    mapped = {op for op, _ in modules}
    out = []
    for case in found:
        graph = case.model.graph
        if len(graph.node) != 1 or graph.node[0].op_type not in mapped:
            continue
        versions = [o.version for o in case.model.opset_import if o.domain in ("", "ai.onnx")]
        opset = max(versions, default=0)
        for inputs, outputs in case.data_sets or ():
            out.append(NodeCase(case.name, graph.node[0], opset, inputs, outputs))
    return tuple(out)


def case_ids(cases: Sequence[NodeCase]) -> list[str]:
    """Test ids for ``parametrize("index", range(len(cases)))``: the case name and index."""
    return [f"{c.name}-{i}" for i, c in enumerate(cases)]


def attrs(node) -> dict[str, Any]:
    """A node's attributes as Python values (names to values; absent ones take no entry)."""
    import onnx

    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def dml_type(dtype) -> str:
    """The DML data type name of a NumPy dtype; skips the case for a type DirectML lacks."""
    name = np.dtype(dtype).name.upper()
    if name not in dml.DataType.__members__:
        pytest.skip(f"DirectML has no {name} data type")
    return name


def validate_or_skip(desc) -> None:
    """``dml.validate``; a combination the support tables reject skips the case with the
    message, any other validation error fails it."""
    try:
        dml.validate(desc)
    except dml.ValidationError as e:
        if "is not supported at feature level" in str(e):
            pytest.skip(f"DirectML does not support this case: {e}")
        raise


def run_or_skip(desc, *inputs):
    """Validates ``desc`` (see ``validate_or_skip``) and runs it in logical mode (x64 where it
    has 64-bit tensors): a NumPy array, or a tuple of them for several outputs."""
    validate_or_skip(desc)
    with strategies.x64(desc):
        result = dml.compile_operator(desc)(*inputs)
        if isinstance(result, tuple):
            return tuple(np.asarray(r) for r in result)
        return np.asarray(result)


def run_buffers_or_skip(desc, buffers: Sequence[np.ndarray], out_shape, dtype) -> np.ndarray:
    """Validates ``desc`` (see ``validate_or_skip``) and runs it in buffer mode: each of
    ``buffers`` flattened, one zeroed output buffer of ``dtype``, returned as ``out_shape``."""
    validate_or_skip(desc)
    with strategies.x64(desc):
        op = dml.compile_operator(desc)
        size = math.prod(out_shape)
        (result,) = op.run_buffers([b.reshape(-1) for b in buffers], [np.zeros(size, dtype)])
        return np.asarray(result).reshape(out_shape)


def broadcast_desc(
    array: np.ndarray, shape: Sequence[int], data_type: str | None = None
) -> dml.TensorDesc:
    """The DirectML view of ``array`` broadcast to ``shape``: stride 0 where it repeats.

    ``data_type`` defaults to ``dml_type(array.dtype)`` (which skips a type DirectML lacks)."""
    data_type = data_type or dml_type(array.dtype)
    sizes = (1,) * (len(shape) - array.ndim) + array.shape
    strides, step = [], 1
    for n in reversed(sizes):
        strides.append(step)
        step *= n
    strides = [0 if n == 1 and m > 1 else s for n, m, s in zip(sizes, shape, reversed(strides))]
    return dml.TensorDesc(data_type, list(shape), strides=strides)


def same_pads(auto_pad: str, total: int) -> tuple[int, int]:
    """ONNX's split of a total padding: SAME_UPPER puts the odd one at the end."""
    if auto_pad == "SAME_UPPER":
        return total // 2, total - total // 2
    return total - total // 2, total // 2


def conv_attrs(node, x: np.ndarray, w: np.ndarray) -> dict:
    """A Conv-like node's attributes (Conv, ConvTranspose, ConvInteger, QLinearConv) with
    ONNX's defaults, for ``x`` {N, C, spatial...} and ``w`` {M, C / group, kernel...}."""
    at = attrs(node)
    nd = x.ndim - 2
    kernel = list(at.get("kernel_shape", w.shape[2:]))
    assert kernel == list(w.shape[2:])
    return {
        "nd": nd,
        "auto_pad": at.get("auto_pad", b"NOTSET").decode(),
        "strides": list(at.get("strides", [1] * nd)),
        "dilations": list(at.get("dilations", [1] * nd)),
        "pads": list(at.get("pads", [0] * (2 * nd))),
        "group": int(at.get("group", 1)),
        "kernel": kernel,
        "output_padding": list(at.get("output_padding", [0] * nd)),
        "output_shape": at.get("output_shape"),
    }


def forward_pads(a: dict, x: np.ndarray) -> list[int]:
    """A forward convolution's explicit pads (auto_pad SAME_UPPER / SAME_LOWER / VALID by ONNX's
    formulas) stored in ``a`` as ``start`` / ``end``; returns the output's spatial sizes."""
    nd, start, end, out = a["nd"], [], [], []
    for i in range(nd):
        size, s, d = x.shape[2 + i], a["strides"][i], a["dilations"][i]
        window = (a["kernel"][i] - 1) * d + 1
        if a["auto_pad"] in ("SAME_UPPER", "SAME_LOWER"):
            total = max(0, (math.ceil(size / s) - 1) * s + window - size)
            b, e = same_pads(a["auto_pad"], total)
        elif a["auto_pad"] == "VALID":
            b, e = 0, 0
        else:
            b, e = a["pads"][i], a["pads"][nd + i]
        start.append(b)
        end.append(e)
        out.append((size + b + e - window) // s + 1)
    a.update(start=start, end=end)
    return out


def assert_outputs(got, wants: Sequence[np.ndarray], **tolerance) -> None:
    """``got`` (an array or a tuple) against ONNX's expected ``wants``: as many outputs, each of
    the same data type and element count, and, read in ``want``'s shape, equal values or values
    within ``tolerance`` (``np.testing.assert_allclose``'s ``rtol`` / ``atol``)."""
    got = tuple(got) if isinstance(got, tuple | list) else (got,)
    assert len(got) == len(wants), (len(got), len(wants))
    for g, w in zip(got, wants, strict=True):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.size == w.size, (g.dtype, w.dtype, g.shape, w.shape)
        if tolerance:
            np.testing.assert_allclose(g.reshape(w.shape), w, **tolerance)
        else:
            np.testing.assert_array_equal(g.reshape(w.shape), w)


def passing_op_types(cases: Sequence[tuple], check: Callable[[int], None]) -> set[str]:
    """The ONNX op types with at least one case that ``check(index)`` passes (not skipped).

    ``cases`` holds ``(name, node, ...)`` tuples (``NodeCase`` among them); each op type stops at
    its first passing case."""
    passed: set[str] = set()
    for index, (_, node, *_) in enumerate(cases):
        if node.op_type in passed:
            continue
        try:
            check(index)
        except (pytest.skip.Exception, AssertionError):
            continue
        passed.add(node.op_type)
    return passed


def assert_every_op_type_passes(
    cases: Sequence[tuple], check: Callable[[int], None], mapped: set[str]
) -> None:
    """Fails naming the op types of ``mapped`` with no passing case (see ``passing_op_types``)."""
    passed = passing_op_types(cases, check)
    if passed != mapped:
        pytest.fail(f"no passing case: {sorted(mapped - passed)}")
