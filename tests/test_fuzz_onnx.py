"""Fuzzing of ONNX models: mutations of valid models, at the bytes level and the proto level.

Seeds: the models of onnx's backend test kinds ``pytorch-converted``, ``pytorch-operator`` and
``simple`` and its light image classifiers (shipped in the onnx package), the real exports
committed in tests/data (decoder steps, optimized BERT and GPT-2), small transformer-style
models built here (attention block, layer norm, MatMul+Add+Gelu, Reshape/Transpose shape
chains), and with ``DML_JAX_FUZZ_ONNX_NODE_SEEDS=1`` onnx's ~1,900 node test models. Each
mutated model goes through ``InferenceSession(bytes, max_memory=BUDGET)`` and, when it imports,
``run`` on inputs of its declared shapes (symbolic dimensions 1), whose outputs must be
onnxruntime's where onnxruntime runs the model (or, where onnxruntime departs from it, ONNX's
reference's); one in ``DML_JAX_FUZZ_ONNX_CLI_ONE_IN`` (CI: 6) goes through ``dml-jax run``
in-process instead (exit code 0 or 1, one error line, no traceback). The only exception allowed
is a one-line ``ValidationError`` naming the node (``node N (...)``), an input, output or
initializer, or the file or field at fault, and passing on no internal exception
(``KeyError: 99``).

``DML_JAX_FUZZ_EXAMPLES=N`` sets the example count, ``DML_JAX_FUZZ_SEED=S`` draws other models
(a long run's chunks), ``DML_JAX_FUZZ_REPORT=path`` writes the counts of mutations and outcomes
(the long run in ``tests/FUZZING.md``).
"""

from __future__ import annotations

import contextlib
import copy
import glob
import io
import json
import os
import re
import tempfile
import warnings
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper

from dml_jax import ValidationError, cli
from dml_jax.onnx import InferenceSession

BUDGET = 64 << 20  # the memory budget of every fuzzed session and run
MAX_INPUT_ELEMENTS = 10**6
CLI_ONE_IN = int(os.environ.get("DML_JAX_FUZZ_ONNX_CLI_ONE_IN", "6"))
KINDS = ("pytorch-converted", "pytorch-operator", "simple")


def _backend_seeds() -> dict[str, bytes]:
    root = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
    seeds = {}
    for kind in KINDS:
        folder = os.path.join(root, kind)
        for case in sorted(os.listdir(folder)):
            path = os.path.join(folder, case, "model.onnx")
            if os.path.isfile(path) and os.path.getsize(path) < 1 << 20:
                with open(path, "rb") as f:
                    seeds[f"{kind}/{case}"] = f.read()
    return seeds


def _export_seeds() -> dict[str, bytes]:
    """Real exports: the ONNX models committed here (tests/data: GPT-2 and Llama decoder steps
    from Optimum, BERT and GPT-2 as onnxruntime's optimizer writes them) and the light image
    classifiers that ship with onnx (AlexNet ... ZFNet-512, weights as ConstantOfShape)."""
    here = os.path.join(os.path.dirname(__file__), "data")
    light = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    paths = sorted(glob.glob(os.path.join(here, "**", "*.onnx"), recursive=True))
    paths += sorted(glob.glob(os.path.join(light, "*.onnx")))
    seeds = {}
    for path in paths:
        group, root = ("light", light) if path.startswith(light) else ("export", here)
        with open(path, "rb") as f:
            seeds[f"{group}/{os.path.relpath(path, root)}"] = f.read()
    return seeds


def _node_seeds() -> dict[str, bytes]:
    """The node test cases of onnx's backend suite (about 1,900 one-op models, every op and
    opset onnx tests; 3 s to make), with ``DML_JAX_FUZZ_ONNX_NODE_SEEDS=1``."""
    if os.environ.get("DML_JAX_FUZZ_ONNX_NODE_SEEDS") != "1":
        return {}
    from onnx.backend.test.loader import load_model_tests

    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = load_model_tests(kind="node")
    return {f"node/{c.name}": c.model.SerializeToString() for c in cases if c.model is not None}


def _f(shape, seed):
    return numpy_helper.from_array(
        np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 0.1,
        f"w{seed}",
    )


def _i64(name, values):
    return numpy_helper.from_array(np.asarray(values, np.int64), name)


def _model(nodes, inputs, outputs, inits, opset=17):
    graph = helper.make_graph(nodes, "seed", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _transformer_seeds() -> dict[str, bytes]:
    """Small transformer pieces, as exporters write them."""
    fl = TensorProto.FLOAT
    x = helper.make_tensor_value_info("x", fl, [1, 4, 8])
    y = helper.make_tensor_value_info("y", fl, [1, 4, 8])
    seeds = {}
    # Attention: Q, K, V projections, heads split by Reshape/Transpose, scaled softmax.
    wq, wk, wv = _f([8, 8], 1), _f([8, 8], 2), _f([8, 8], 3)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["q"]),
        helper.make_node("MatMul", ["x", "w2"], ["k"]),
        helper.make_node("MatMul", ["x", "w3"], ["v"]),
        helper.make_node("Reshape", ["q", "heads"], ["qh"]),
        helper.make_node("Reshape", ["k", "heads"], ["kh"]),
        helper.make_node("Reshape", ["v", "heads"], ["vh"]),
        helper.make_node("Transpose", ["qh"], ["qt"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["kh"], ["kt"], perm=[0, 2, 3, 1]),
        helper.make_node("Transpose", ["vh"], ["vt"], perm=[0, 2, 1, 3]),
        helper.make_node("MatMul", ["qt", "kt"], ["s"]),
        helper.make_node("Div", ["s", "scale"], ["ss"]),
        helper.make_node("Softmax", ["ss"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "vt"], ["o"]),
        helper.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ot", "merged"], ["y"]),
    ]
    inits = [
        wq,
        wk,
        wv,
        _i64("heads", [1, 4, 2, 4]),
        _i64("merged", [1, 4, 8]),
        numpy_helper.from_array(np.array(2.0, np.float32), "scale"),
    ]
    seeds["attention"] = _model(nodes, [x], [y], inits)
    # Layer norm, as an op and decomposed.
    gamma = numpy_helper.from_array(np.linspace(0.5, 1.5, 8).astype(np.float32), "gamma")
    beta = numpy_helper.from_array(np.linspace(-0.1, 0.1, 8).astype(np.float32), "beta")
    seeds["layer_norm"] = _model(
        [
            helper.make_node(
                "LayerNormalization", ["x", "gamma", "beta"], ["y"], axis=-1, epsilon=1e-5
            )
        ],
        [x],
        [y],
        [gamma, beta],
    )
    eps = numpy_helper.from_array(np.array(1e-5, np.float32), "eps")
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    seeds["layer_norm_decomposed"] = _model(
        [
            helper.make_node("ReduceMean", ["x"], ["m"], axes=[-1]),
            helper.make_node("Sub", ["x", "m"], ["d"]),
            helper.make_node("Pow", ["d", "two"], ["d2"]),
            helper.make_node("ReduceMean", ["d2"], ["var"], axes=[-1]),
            helper.make_node("Add", ["var", "eps"], ["ve"]),
            helper.make_node("Sqrt", ["ve"], ["sd"]),
            helper.make_node("Div", ["d", "sd"], ["n"]),
            helper.make_node("Mul", ["n", "gamma"], ["g"]),
            helper.make_node("Add", ["g", "beta"], ["y"]),
        ],
        [x],
        [y],
        [gamma, beta, eps, two],
        opset=13,
    )
    # MatMul + Add + Gelu (the op of opset 20 and the erf form).
    w, b = _f([8, 16], 4), _f([16], 5)
    y16 = helper.make_tensor_value_info("y", fl, [1, 4, 16])
    seeds["matmul_add_gelu"] = _model(
        [
            helper.make_node("MatMul", ["x", "w4"], ["h"]),
            helper.make_node("Add", ["h", "w5"], ["hb"]),
            helper.make_node("Gelu", ["hb"], ["y"]),
        ],
        [x],
        [y16],
        [w, b],
        opset=20,
    )
    half = numpy_helper.from_array(np.array(0.5, np.float32), "half")
    one = numpy_helper.from_array(np.array(1.0, np.float32), "one")
    rt2 = numpy_helper.from_array(np.array(np.sqrt(2.0), np.float32), "rt2")
    seeds["matmul_add_gelu_erf"] = _model(
        [
            helper.make_node("MatMul", ["x", "w4"], ["h"]),
            helper.make_node("Add", ["h", "w5"], ["hb"]),
            helper.make_node("Div", ["hb", "rt2"], ["hd"]),
            helper.make_node("Erf", ["hd"], ["e"]),
            helper.make_node("Add", ["e", "one"], ["e1"]),
            helper.make_node("Mul", ["hb", "e1"], ["he"]),
            helper.make_node("Mul", ["he", "half"], ["y"]),
        ],
        [x],
        [y16],
        [w, b, half, one, rt2],
        opset=13,
    )
    # Reshape/Transpose chain whose shapes come from Shape/Gather/Concat (a symbolic batch).
    xs = helper.make_tensor_value_info("x", fl, ["batch", 4, 8])
    ys = helper.make_tensor_value_info("y", fl, ["batch", 2, 4, 4])
    seeds["shape_chain"] = _model(
        [
            helper.make_node("Shape", ["x"], ["sh"]),
            helper.make_node("Gather", ["sh", "zero"], ["b"], axis=0),
            helper.make_node("Unsqueeze", ["b", "axes0"], ["b1"]),
            helper.make_node("Concat", ["b1", "rest"], ["target"], axis=0),
            helper.make_node("Reshape", ["x", "target"], ["r"]),
            helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3]),
            helper.make_node("Flatten", ["t"], ["f"], axis=1),
            helper.make_node("Reshape", ["f", "back"], ["y"]),
        ],
        [xs],
        [ys],
        [_i64("zero", 0), _i64("axes0", [0]), _i64("rest", [4, 2, 4]), _i64("back", [-1, 2, 4, 4])],
    )
    return {name: m.SerializeToString() for name, m in seeds.items()}


SEED_MODELS = {**_backend_seeds(), **_transformer_seeds(), **_export_seeds(), **_node_seeds()}
# Seeds are drawn by group first (the backend kinds, the transformer pieces built here, the
# committed exports, onnx's light models, its node tests), so the few real exports are mutated
# as often as the many small models.
SEED_GROUPS: dict[str, list[str]] = {}
for _name in sorted(SEED_MODELS):
    _group = _name.split("/")[0] if "/" in _name else "transformer"
    SEED_GROUPS.setdefault("backend" if _group in KINDS else _group, []).append(_name)

# In int64's range (protobuf refuses others); the huge ones stress sizes and element counts.
EDGE_INTS = [
    0,
    1,
    -1,
    2,
    3,
    -2,
    7,
    64,
    2**31 - 1,
    -(2**31),
    2**32,
    2**40,
    -(2**40),
    2**62,
    2**63 - 1,
    -(2**63),
]
EDGE_FLOATS = [0.0, -0.0, 1e-30, -1.0, 1e30, float("inf"), float("-inf"), float("nan")]
ELEM_TYPES = [
    0,
    1,
    2,
    6,
    7,
    8,
    9,
    10,
    11,
    13,
    14,
    15,
    16,
    17,
    21,
    22,
    23,
    24,
    25,
    26,
    27,
    99,
    -1,
    2**31 - 1,
]
OP_TYPES = [
    "NoSuchOp",
    "Add",
    "Relu",
    "Conv",
    "Reshape",
    "Split",
    "Slice",
    "Concat",
    "Gather",
    "Where",
    "Loop",
    "If",
    "Identity",
    "MaxPool",
    "BatchNormalization",
    "Resize",
    "Expand",
    "ConstantOfShape",
    "Range",
    "TopK",
    "Pad",
    "Einsum",
    "Attention",
    "",
]
DOMAINS = [
    "com.unknown",
    "com.microsoft",
    "ai.onnx.ml",
    "ai.onnx",
    "ai.onnx.preview.training",
    "local",
]
OPSETS = [0, -1, 1, 6, 7, 9, 11, 13, 17, 23, 24, 25, 99, 10**6, 2**62]
MUTATIONS = (
    "bytes_flip",
    "bytes_truncate",
    "bytes_insert",
    "delete_node",
    "rewire_missing",
    "rewire_cycle",
    "two_producers",
    "attr_value",
    "attr_type",
    "attr_drop",
    "attr_add",
    "init_dims",
    "dims",
    "elem_type",
    "opset",
    "domain",
    "op_type",
    "empty_graph",
    "node_arity",
    "ir_version",
    "io_rename",
    "const_value",
    "input_dims",
    "attr_nudge",
)
# Mutations that often leave a valid model computing something else, whose outputs are then
# compared with onnxruntime's: one model in three gets only these.
GENTLE = ("const_value", "input_dims", "attr_nudge")
# Values an integer constant is set to (shapes, axes, pads, indices, slice bounds).
CONST_VALUES = [-2, -1, 0, 1, 2, 3, 5, 64, 2**31 - 1, -(2**31), 2**40]


def _names(graph) -> list[str]:
    names = [i.name for i in graph.input] + [i.name for i in graph.initializer]
    names += [o for n in graph.node for o in n.output if o]
    return names or ["x"]


def _mutate(draw, data: bytes, kind: str) -> bytes:
    """``data`` (a serialized model) with one mutation of ``kind``."""
    if kind.startswith("bytes_"):
        buf = bytearray(data)
        if not buf:
            return bytes(buf)
        if kind == "bytes_flip":
            for _ in range(draw(st.integers(1, 8))):
                i = draw(st.integers(0, len(buf) - 1))
                buf[i] ^= draw(st.integers(1, 255))
        elif kind == "bytes_truncate":
            del buf[draw(st.integers(0, len(buf) - 1)) :]
        else:
            i = draw(st.integers(0, len(buf)))
            buf[i:i] = draw(st.binary(min_size=1, max_size=16))
        return bytes(buf)
    model = onnx.ModelProto.FromString(data)
    g = model.graph
    nodes = g.node
    pick = lambda seq: draw(st.integers(0, len(seq) - 1))
    if kind == "delete_node" and nodes:
        del nodes[pick(nodes)]
    elif kind == "rewire_missing" and nodes:
        n = nodes[pick(nodes)]
        if n.input:
            n.input[pick(n.input)] = draw(st.sampled_from(["missing", "", "y", " "]))
        else:
            n.input.append("missing")
    elif kind == "rewire_cycle" and nodes:
        i = pick(nodes)
        later = [o for n in list(nodes)[i:] for o in n.output if o]
        if nodes[i].input and later:
            nodes[i].input[pick(nodes[i].input)] = draw(st.sampled_from(later))
    elif kind == "two_producers" and nodes:
        n = nodes[pick(nodes)]
        if n.output:
            n.output[pick(n.output)] = draw(st.sampled_from(_names(g)))
    elif kind in ("attr_value", "attr_type", "attr_drop") and nodes:
        n = nodes[pick(nodes)]
        if not n.attribute:
            return model.SerializeToString()
        k = pick(n.attribute)
        a = n.attribute[k]
        if kind == "attr_drop":
            del n.attribute[k]
        elif kind == "attr_value":
            new = _attr_value(draw, a)
            if new is not None:
                n.attribute[k].CopyFrom(new)
        else:
            value = draw(_attr_values())
            n.attribute[k].CopyFrom(helper.make_attribute(a.name, value))
            if draw(st.booleans()):  # a type field that disagrees with what is set
                n.attribute[k].type = draw(st.sampled_from(list(range(15))))
    elif kind == "attr_add" and nodes:
        n = nodes[pick(nodes)]
        name = draw(
            st.sampled_from(
                [
                    "axis",
                    "perm",
                    "kernel_shape",
                    "pads",
                    "to",
                    "mode",
                    "junk",
                    "value",
                    "then_branch",
                    "body",
                    "split",
                    "keepdims",
                ]
            )
        )
        n.attribute.append(helper.make_attribute(name, draw(_attr_values())))
    elif kind == "init_dims" and g.initializer:
        t = g.initializer[pick(g.initializer)]
        choice = draw(st.integers(0, 2))
        if choice == 0 and t.dims:
            t.dims[pick(t.dims)] = draw(st.sampled_from(EDGE_INTS))
        elif choice == 1:
            t.dims.append(draw(st.sampled_from([2, 3, 0, 2**40])))
        else:
            del t.dims[:]
    elif kind == "dims":
        infos = list(g.input) + list(g.output) + list(g.value_info)
        targets = [i for i in infos if i.type.WhichOneof("value") == "tensor_type"]
        huge = draw(st.sampled_from([2**40, -1, 0, -(2**40), 2**31, 2**62, 3]))
        if targets and draw(st.booleans()):
            info = targets[pick(targets)]
            dims = info.type.tensor_type.shape.dim
            if dims:
                d = dims[pick(dims)]
                d.dim_value = huge
        elif g.initializer:
            t = g.initializer[pick(g.initializer)]
            if t.dims:
                t.dims[pick(t.dims)] = huge
    elif kind == "elem_type":
        elem = draw(st.sampled_from(ELEM_TYPES))
        infos = [
            i for i in list(g.input) + list(g.output) if i.type.WhichOneof("value") == "tensor_type"
        ]
        if infos and draw(st.booleans()):
            infos[pick(infos)].type.tensor_type.elem_type = elem
        elif g.initializer:
            g.initializer[pick(g.initializer)].data_type = elem
    elif kind == "opset":
        if model.opset_import and draw(st.booleans()):
            o = model.opset_import[pick(model.opset_import)]
            o.version = draw(st.sampled_from(OPSETS))
            if draw(st.integers(0, 3)) == 0:
                o.domain = draw(st.sampled_from(DOMAINS))
        elif draw(st.booleans()):
            del model.opset_import[:]
        else:
            model.opset_import.append(
                helper.make_opsetid(draw(st.sampled_from(DOMAINS)), draw(st.sampled_from(OPSETS)))
            )
    elif kind == "domain" and nodes:
        nodes[pick(nodes)].domain = draw(st.sampled_from(DOMAINS))
    elif kind == "op_type" and nodes:
        nodes[pick(nodes)].op_type = draw(st.sampled_from(OP_TYPES))
    elif kind == "empty_graph":
        what = draw(st.sampled_from(["node", "output", "input", "initializer", "all"]))
        for field in ("node", "output", "input", "initializer") if what == "all" else (what,):
            del getattr(g, field)[:]
    elif kind == "node_arity" and nodes:
        n = nodes[pick(nodes)]
        choice = draw(st.integers(0, 3))
        if choice == 0 and n.input:
            del n.input[-1]
        elif choice == 1:
            n.input.append(draw(st.sampled_from(_names(g) + [""])))
        elif choice == 2 and n.output:
            del n.output[-1]
        else:
            n.output.append(draw(st.sampled_from(["extra", ""])))
    elif kind == "ir_version":
        model.ir_version = draw(st.sampled_from([0, 1, 3, 4, 13, 99, -1]))
    elif kind == "io_rename":
        infos = list(g.input) + list(g.output)
        if infos:
            infos[pick(infos)].name = draw(st.sampled_from(_names(g) + ["", "nowhere"]))
    elif kind == "const_value":
        # One element of an integer initializer or Constant: the shapes, axes, pads, indices
        # and bounds that exports compute with.
        tensors = [t for t in g.initializer if t.data_type in (6, 7)]
        tensors += [a.t for n in nodes if n.op_type == "Constant" for a in n.attribute
                    if a.name == "value" and a.t.data_type in (6, 7)]  # fmt: skip
        if tensors:
            t = tensors[pick(tensors)]
            try:
                array = numpy_helper.to_array(t).copy()
            except Exception:  # noqa: BLE001 - an earlier mutation broke it: left as it is
                return model.SerializeToString()
            if array.size:
                info = np.iinfo(array.dtype)
                value = min(max(draw(st.sampled_from(CONST_VALUES)), info.min), info.max)
                array.reshape(-1)[draw(st.integers(0, array.size - 1))] = value
                t.CopyFrom(numpy_helper.from_array(array, t.name))
    elif kind == "input_dims":
        # A dimension of an input (a symbolic one included) set to another size: the batch
        # and sequence lengths real models are run with.
        infos = [i for i in g.input if i.type.WhichOneof("value") == "tensor_type"]
        infos = [i for i in infos if i.type.tensor_type.shape.dim]
        if infos:
            dims = infos[pick(infos)].type.tensor_type.shape.dim
            dims[pick(dims)].dim_value = draw(st.sampled_from([1, 2, 3, 5, 8, 130]))
    elif kind == "attr_nudge" and nodes:
        # A number attribute moved a little (an axis, a kernel size, a stride, a pad, an
        # epsilon): mostly still valid.
        n = nodes[pick(nodes)]
        numbers = [a for a in n.attribute if a.type in (1, 2, 7) and (a.type != 7 or a.ints)]
        if numbers:
            a = numbers[pick(numbers)]
            if a.type == onnx.AttributeProto.FLOAT:
                a.f *= draw(st.sampled_from([0.5, 2.0, -1.0, 0.0]))
            elif a.type == onnx.AttributeProto.INT:
                a.i += draw(st.sampled_from([-1, 1, 2]))
            else:
                a.ints[pick(a.ints)] += draw(st.sampled_from([-1, 1, 2]))
    return model.SerializeToString()


def _attr_values() -> st.SearchStrategy:
    return st.one_of(
        st.sampled_from(EDGE_INTS),
        st.sampled_from(EDGE_FLOATS),
        st.lists(st.sampled_from(EDGE_INTS), min_size=1, max_size=6),
        st.lists(st.sampled_from(EDGE_FLOATS), min_size=1, max_size=4),
        st.sampled_from([b"", b"NOTSET", b"constant", b"\xff\xfe", b"SAME_UPPER"]),
        st.just([b"a", b"b"]),
        st.just(numpy_helper.from_array(np.zeros((2, 0), np.float32))),
        st.just(numpy_helper.from_array(np.array([2**40, 3], np.int64))),
        st.just(helper.make_graph([], "empty", [], [])),
    )


def _attr_value(draw, a) -> object:
    """``a`` with a value of its own type, out of range."""
    name = a.name
    t = a.type
    if t == onnx.AttributeProto.INT:
        return helper.make_attribute(name, draw(st.sampled_from(EDGE_INTS)))
    if t == onnx.AttributeProto.FLOAT:
        return helper.make_attribute(name, draw(st.sampled_from(EDGE_FLOATS)))
    if t == onnx.AttributeProto.INTS:
        values = list(a.ints)
        choice = draw(st.integers(0, 3))
        if choice == 0:
            values = []
        elif choice == 1 and values:
            values[draw(st.integers(0, len(values) - 1))] = draw(st.sampled_from(EDGE_INTS))
        elif choice == 2:
            values = values + values + [1]
        else:
            values = values[:-1]
        return helper.make_attribute(name, values, attr_type=onnx.AttributeProto.INTS)
    if t == onnx.AttributeProto.FLOATS:
        values = list(a.floats) or [1.0]
        values[0] = draw(st.sampled_from(EDGE_FLOATS))
        return helper.make_attribute(name, values[: draw(st.integers(0, len(values)))] or [1.0])
    if t == onnx.AttributeProto.STRING:
        return helper.make_attribute(name, draw(st.sampled_from([b"", b"nope", b"\xff"])))
    if t == onnx.AttributeProto.TENSOR:
        tensor = onnx.TensorProto()
        tensor.CopyFrom(a.t)
        tensor.dims.append(draw(st.sampled_from([0, 2, 2**40])))
        return helper.make_attribute(name, tensor)
    return None


@st.composite
def mutated(draw) -> tuple[str, list[str], bytes]:
    name = draw(st.sampled_from(SEED_GROUPS[draw(st.sampled_from(sorted(SEED_GROUPS)))]))
    data = SEED_MODELS[name]
    kinds = []
    gentle = draw(st.integers(0, 2)) == 0
    for _ in range(draw(st.integers(1, 2 if gentle else 3))):
        kind = draw(st.sampled_from(GENTLE if gentle else MUTATIONS))
        kinds.append(kind)
        data = _mutate(draw, data, kind)
        if kind.startswith("bytes_"):
            break  # unparseable bytes cannot be mutated further as a proto
    return name, kinds, data


STATS: Counter = Counter()
COLLECT = os.environ.get("DML_JAX_FUZZ_COLLECT")  # a path: defects are written there, not raised
DEFECTS: dict = {}


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    path = os.environ.get("DML_JAX_FUZZ_REPORT")
    if path:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(dict(sorted(STATS.items())), f, indent=1)
    if COLLECT:
        with open(COLLECT, "w", encoding="utf-8") as f:
            json.dump(DEFECTS, f, indent=1)


def fuzz_settings():
    """25 models (``DML_JAX_FUZZ_EXAMPLES``), the same ones every run; a long run in chunks
    draws other models in each with ``DML_JAX_FUZZ_SEED=N`` (hypothesis' seed N)."""
    count = int(os.environ.get("DML_JAX_FUZZ_EXAMPLES", "25"))
    chunk = os.environ.get("DML_JAX_FUZZ_SEED")
    if chunk is None:
        return settings(max_examples=count)
    return lambda test: seed(int(chunk))(
        settings(max_examples=count, derandomize=False, database=None)(test)
    )


# What a message names: a node, a model input/output/initializer/value, the file or bytes, the
# graph, an opset or domain, a field of the model.
_NAMES = re.compile(
    r"node \d+ \(|input '|output '|initializer '|value '|the bytes given|'[^']*\.onnx'|"
    r"graph|opset|domain|ir_version|IR version|attribute '|memory budget|model\.\w"
)


# An internal exception passed on in a message ("node 0 (Constant): KeyError: 99"): a raw
# exception in disguise, not what is wrong with the model.
_INTERNAL = re.compile(r"\b(?!Validation)[A-Z]\w*(Error|Exception)\b|Traceback")


def check_message(message: str) -> None:
    assert "\n" not in message.strip(), message
    assert message.startswith("ONNX"), message
    assert _NAMES.search(message), message
    assert not _INTERNAL.search(message), message


def _inputs(session: InferenceSession) -> dict | None:
    """Random inputs of the declared shapes (symbolic dimensions 1); None where an input is a
    sequence or optional, or too large to make here."""
    rng = np.random.default_rng(0)
    feed = {}
    for info, dtype in zip(session.get_inputs(), session._input_dtypes):
        if not info.type.startswith("tensor(") or info.shape is None:
            return None
        shape = [d if isinstance(d, int) else 1 for d in info.shape]
        if any(d < 0 for d in shape) or np.prod(shape, dtype=object) > MAX_INPUT_ELEMENTS:
            return None
        if dtype.kind == "f":
            feed[info.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            feed[info.name] = rng.integers(0, 2, shape).astype(bool)
        elif dtype.kind in "iu":
            feed[info.name] = rng.integers(0, 3, shape).astype(dtype)
        else:
            feed[info.name] = np.zeros(shape, dtype)
    return feed


def _session_outcome(data: bytes) -> str:
    try:
        session = InferenceSession(data, max_memory=BUDGET)
    except ValidationError as e:
        check_message(str(e))
        return "import: ValidationError"
    feed = _inputs(session)
    if feed is None:
        return "imported, not run"
    try:
        got = session.run(None, feed)
    except ValidationError as e:
        check_message(str(e))
        return "run: ValidationError"
    return _against_onnxruntime(data, feed, [o.name for o in session.get_outputs()], got)


# Ops whose values ONNX leaves to the runtime (random draws): not compared.
UNCOMPARED = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
              "Bernoulli", "Multinomial", "Dropout"}  # fmt: skip


# Ops whose outputs select by score (a detector's NonMaxSuppression): on a mutated model's
# random inputs, scores equal to a rounding (an image one pixel wide) make two right answers
# choose and order differently (docs/semantics.md, "Detectors"); tests/test_onnx_detection.py
# compares such models on inputs whose scores differ.
SELECTING = {"NonMaxSuppression"}


# Nodes on which onnxruntime's CPU provider crashes the process (a segmentation fault while it
# makes the session), by op type and the input slot given explicitly empty: a
# LayerNormalization whose optional bias is named "" (onnxruntime 1.32; the fuzzer's mutation of
# the LayerNorm seed found it at seed 20261148). Such models are compared with ONNX's reference
# instead.
ONNXRUNTIME_CRASHES = {("LayerNormalization", 2)}


def _crashes_onnxruntime(graph) -> bool:
    """Whether ``graph`` (or a subgraph) holds a node of ``ONNXRUNTIME_CRASHES``."""
    for n in graph.node:
        if any((n.op_type, k) in ONNXRUNTIME_CRASHES for k, x in enumerate(n.input) if not x):
            return True
        for a in n.attribute:
            if any(_crashes_onnxruntime(g) for g in ([a.g] if a.HasField("g") else a.graphs)):
                return True
    return False


def _op_types(graph) -> set[str]:
    """The op types of ``graph``'s nodes and of its subgraphs' (If branches, Loop bodies)."""
    found = set()
    for n in graph.node:
        found.add(n.op_type)
        for a in n.attribute:
            for g in [a.g] if a.HasField("g") else list(a.graphs):
                found |= _op_types(g)
    return found


def _against_onnxruntime(data: bytes, feed: dict, names: list, got: list) -> str:
    """A model that ran: its outputs are onnxruntime's (CPU) where onnxruntime runs it on the
    same inputs (``check_agrees``)."""
    try:
        import onnxruntime as ort
    except ImportError:
        return "run: success"
    model = onnx.ModelProto.FromString(data)
    if any(n.op_type in UNCOMPARED for n in model.graph.node):
        return "run: success (random ops, not compared)"
    if _op_types(model.graph) & SELECTING:
        return "run: success (selections by score, not compared)"
    if _crashes_onnxruntime(model.graph):
        assert _agrees_with_reference(model, feed, names, got), names
        return "run: agrees with ONNX's reference (onnxruntime would crash)"
    options = ort.SessionOptions()
    options.log_severity_level = 4
    options.intra_op_num_threads = 1
    try:
        reference = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
        want = reference.run(None, feed)
    except Exception:  # noqa: BLE001 - onnxruntime refuses the model or the inputs
        return "run: success, onnxruntime refuses"
    assert len(got) == len(want), (names, len(got), len(want))
    try:
        for name, g, w in zip(names, got, want):
            check_agrees(name, g, w)
    except AssertionError:
        # Where onnxruntime departs from ONNX's reference (Attention's causal mask: its lowest
        # float for the reference's -inf), the reference's outputs are the right answer; it is
        # evaluated for small models only (its convolutions are slow NumPy loops).
        if len(model.graph.node) > REFERENCE_NODES or not _agrees_with_reference(
            model, feed, names, got
        ):
            raise
        return "run: agrees with ONNX's reference, not onnxruntime"
    return "run: agrees with onnxruntime"


REFERENCE_NODES = 30


def _agrees_with_reference(model, feed: dict, names: list, got: list) -> bool:
    from onnx.reference import ReferenceEvaluator

    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = ReferenceEvaluator(model).run(None, feed)
        for name, g, w in zip(names, got, want, strict=True):
            check_agrees(name, g, w)
    except Exception:  # noqa: BLE001 - the reference fails or disagrees too
        return False
    return True


def check_agrees(name: str, got, want) -> None:
    """``got`` is onnxruntime's ``want``: the same shape and dtype; integers and bools equal
    (64-bit values beyond 32 bits aside: computed in 32 bits, docs/semantics.md); floats
    within 1e-3 relative (float16 and narrower: 1e-2), with an absolute floor scaled to the
    output's largest finite value, NaN and infinities in the same places."""
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), (name, got, want)
        for k, (g, w) in enumerate(zip(got, want)):
            check_agrees(f"{name}[{k}]", g, w)
        return
    got, want = np.asarray(got), np.asarray(want)
    where = f"output '{name}'"
    assert got.shape == want.shape, f"{where}: shape {got.shape}, onnxruntime's {want.shape}"
    assert got.dtype == want.dtype, f"{where}: dtype {got.dtype}, onnxruntime's {want.dtype}"
    if want.dtype.kind in "iub":
        if want.dtype.itemsize == 8 and want.size:
            bits = np.iinfo(np.int32 if want.dtype.kind == "i" else np.uint32)
            if want.min() < bits.min or want.max() > bits.max:
                return
        np.testing.assert_array_equal(got, want, err_msg=where)
        return
    g64, w64 = got.astype(np.float64), want.astype(np.float64)
    for test in (np.isnan, np.isposinf, np.isneginf):
        assert np.array_equal(test(g64), test(w64)), f"{where}: non-finite values differ"
    finite = np.isfinite(w64)
    narrow = want.dtype.itemsize <= 2
    rtol = 1e-2 if narrow else 1e-3
    scale = float(np.max(np.abs(w64[finite]), initial=1.0))
    np.testing.assert_allclose(g64[finite], w64[finite], rtol=rtol, atol=rtol * 0.1 * scale,
                               err_msg=where)  # fmt: skip


def _cli_outcome(data: bytes) -> str:
    with tempfile.TemporaryDirectory(prefix="dml-jax-fuzz-onnx-") as folder:
        path = os.path.join(folder, "model.onnx")
        with open(path, "wb") as f:
            f.write(data)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(["run", path, "--max-memory", str(BUDGET)])
    message = err.getvalue()
    assert "Traceback" not in message + out.getvalue()
    assert code in (0, 1), (code, message)
    if code == 1:
        lines = message.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: {path}: "), message
        check_message(
            lines[0].removeprefix(f"error: {path}: ").split(": ", 1)[-1]
            if not lines[0].removeprefix(f"error: {path}: ").startswith("ONNX")
            else lines[0].removeprefix(f"error: {path}: ")
        )
        return "cli: exit 1"
    return "cli: exit 0"


@fuzz_settings()
@given(case=mutated(), route=st.integers(0, 10**6))
def test_mutated_onnx_model(case, route):
    name, kinds, data = case
    STATS["models"] += 1
    for kind in kinds:
        STATS[f"mutation {kind}"] += 1
    try:
        outcome = _cli_outcome(data) if route % CLI_ONE_IN == 0 else _session_outcome(data)
    except BaseException as e:
        if not COLLECT or isinstance(e, KeyboardInterrupt):
            raise
        # The long run's survey mode: every defect recorded (one example of each), none raised.
        STATS["defect"] += 1
        key = f"{type(e).__name__}: {str(e)[:150]}"
        if key not in DEFECTS:
            DEFECTS[key] = {"seed": name, "mutations": kinds, "bytes": data.hex()}
        return
    STATS[outcome] += 1


@pytest.mark.parametrize("name", sorted(_transformer_seeds()))
def test_transformer_seeds_match_onnxruntime(name):
    """The seeds built here are valid models, computed right (against onnxruntime's CPU
    provider), so that mutations start from models that run."""
    ort = pytest.importorskip("onnxruntime")
    data = SEED_MODELS[name]
    x = np.random.default_rng(1).standard_normal((1, 4, 8)).astype(np.float32)
    (want,) = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    (got,) = InferenceSession(data).run(None, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_seed_count():
    assert sum(k.split("/")[0] in KINDS for k in SEED_MODELS) >= 100, len(SEED_MODELS)
    assert copy.copy(MUTATIONS)


# ---------------------------------------------------------------------------------------------
# The defects the fuzzer found, one explicit test each.


def _one(op, inputs, outputs, inits=(), opset=13, **attrs):
    node = helper.make_node(op, [i.name for i in inputs] + [t.name for t in inits],
                            [o.name for o in outputs], **attrs)  # fmt: skip
    return _model([node], inputs, outputs, list(inits), opset=opset)


def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _cli(model) -> tuple[int, str]:
    with tempfile.TemporaryDirectory(prefix="dml-jax-fuzz-onnx-") as folder:
        path = os.path.join(folder, "model.onnx")
        onnx.save(model, path)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(["run", path, "--max-memory", str(BUDGET)])
    return code, err.getvalue().strip()


def _printed(out: str, resource: str) -> np.ndarray:
    """The values ``dml-jax run`` printed for ``resource`` (DxDispatch's ``Resource 'name':
    v, v, ...`` line, floats to 6 significant digits)."""
    (line,) = [x for x in out.splitlines() if x.startswith(f"Resource '{resource}': ")]
    return np.array([float(v) for v in line.split(": ", 1)[1].split(", ")])


def _embedding_seed():
    """pytorch-converted/test_Embedding: Gather of INT64 indices "0" {1, 4} from a FLOAT table
    "1" {4, 3} (an initializer), output "2" {1, 4, 3}."""
    return onnx.ModelProto.FromString(SEED_MODELS["pytorch-converted/test_Embedding"])


def test_cli_binds_int64_inputs_as_int64(tmp_path, capsys, rng):
    """``dml-jax run`` on an .onnx file with an INT64 input made a resource of INT32 values and
    then refused its own binding ("binding out of range"). The values it prints are
    onnxruntime's on the inputs it feeds (``onnx_model_text``'s random integers in [0, 10)):
    test_Embedding with its table grown from 4 rows to 10, so that every such index is in range
    (ONNX leaves an index out of range undefined, and onnxruntime refuses one)."""
    ort = pytest.importorskip("onnxruntime")
    from dml_jax.dxdispatch.onnx_dispatch import onnx_model_text

    model = _embedding_seed()
    (table,) = model.graph.initializer
    table.CopyFrom(numpy_helper.from_array(rng.standard_normal((10, 3)).astype(np.float32), "1"))
    (declared,) = [i for i in model.graph.input if i.name == "1"]
    declared.type.tensor_type.shape.dim[0].dim_value = 10
    path = str(tmp_path / "model.onnx")
    onnx.save(model, path)
    fed = json.loads(onnx_model_text(path))["resources"]["input:0"]
    assert fed["initialValuesDataType"] == "INT64"
    indices = np.array(fed["initialValues"], np.int64).reshape(1, 4)
    providers = ["CPUExecutionProvider"]
    (want,) = ort.InferenceSession(path, providers=providers).run(None, {"0": indices})

    assert cli.main(["run", path, "--max-memory", str(BUDGET)]) == 0
    got = _printed(capsys.readouterr().out, "output:2")
    np.testing.assert_allclose(got, want.ravel(), rtol=1e-5, atol=0)  # printed with %g


def test_cli_binds_an_int64_input_file(tmp_path, capsys):
    """test_Embedding's own input through ``--input`` (an INT64 .npy file): the printed output
    is the backend test case's expected one (the file's type switches JAX's x64 mode on, as a
    64-bit type named in the model text does; it ended in a raw ValueError)."""
    folder = os.path.join(
        os.path.dirname(onnx.__file__), "backend", "test", "data", "pytorch-converted"
    )
    case = os.path.join(folder, "test_Embedding", "test_data_set_0")
    indices, want = (
        numpy_helper.to_array(onnx.load_tensor(os.path.join(case, f"{name}_0.pb")))
        for name in ("input", "output")
    )
    path = str(tmp_path / "model.onnx")
    onnx.save(_embedding_seed(), path)
    np.save(tmp_path / "indices.npy", indices)
    args = ["run", path, "--input", f"0={tmp_path / 'indices.npy'}"]
    assert cli.main(args) == 0
    got = _printed(capsys.readouterr().out, "output:2")
    np.testing.assert_allclose(got, want.ravel(), rtol=1e-5, atol=0)  # printed with %g


@pytest.mark.parametrize("elem", [TensorProto.FLOAT8E8M0, TensorProto.INT4])
def test_cli_refuses_types_it_cannot_bind_with_one_line(elem):
    """A FLOAT8E8M0 input escaped as an AssertionError from DataType.from_dtype; an INT4 one
    as a resource error that named no input."""
    fl = TensorProto.FLOAT
    model = _one("Add", [_vi("a", fl, [1]), _vi("b", elem, [1])], [_vi("y", fl, [1])])
    code, err = _cli(model)
    assert code == 1 and "ONNX: input 'b'" in err and len(err.splitlines()) == 1, err


@pytest.mark.parametrize("dim", [2**62, 2**40, -1, -(2**40)])
def test_declared_input_dims_out_of_range(dim):
    """Input dims beyond a TensorDesc's UINT32 leaked "TensorDesc.Sizes[0] must be <= ..." (and
    2**40 made a MemoryError in the command line's random inputs)."""
    fl = TensorProto.FLOAT
    model = _one("Relu", [_vi("x", fl, [dim, 4])], [_vi("y", fl, [3, 4])])
    with pytest.raises(ValidationError, match=r"^ONNX: input 'x': dimension 0 is"):
        InferenceSession(model.SerializeToString())
    code, err = _cli(model)
    assert code == 1 and "input 'x': dimension 0" in err, err


def test_onnx_op_below_its_opset_is_refused_before_its_converter():
    """Einsum (since opset 12) in an opset-9 model reached its converter without a schema
    check, which read a missing equation (AttributeError)."""
    fl = TensorProto.FLOAT
    model = _one("Einsum", [_vi("x", fl, [2, 2]), _vi("z", fl, [2, 2])], [_vi("y", fl, [2, 2])],
                 opset=9)  # fmt: skip
    with pytest.raises(ValidationError, match=r"node 0 \(Einsum\): op type 'Einsum' is not an op"):
        InferenceSession(model).run(None, {"x": np.ones((2, 2), np.float32),
                                           "z": np.ones((2, 2), np.float32)})  # fmt: skip


def test_variadic_input_without_a_name():
    """Max('', b) reached the converter with a missing operand (AttributeError)."""
    fl = TensorProto.FLOAT
    node = helper.make_node("Max", ["", "b"], ["y"])
    model = _model([node], [_vi("b", fl, [3])], [_vi("y", fl, [3])], [])
    with pytest.raises(ValidationError, match=r"node 0 \(Max\): input 0 .* has no name"):
        InferenceSession(model).run(None, {"b": np.ones(3, np.float32)})


def test_graph_edge_type_mismatch_names_the_onnx_node():
    """A FLOAT16 Conv input with FLOAT weights leaked "DML_GRAPH: IntermediateEdges[1] ..."
    without the ONNX node."""
    data = SEED_MODELS["pytorch-converted/test_Conv2d_padding"]
    model = onnx.ModelProto.FromString(data)
    model.graph.input[0].type.tensor_type.elem_type = TensorProto.FLOAT16
    session = InferenceSession(model)
    with pytest.raises(ValidationError, match=r"^ONNX: node 0 \(Conv\): IntermediateEdges"):
        session.run(None, _inputs(session))


@pytest.mark.parametrize(
    "change, pattern",
    [
        ("cycle", r"node 0 \(Relu\): input 'b' is not produced before: node 1 \(Neg\) produces"),
        ("twice", r"node 1 \(Neg\): output 'a' is already produced by node 0 \(Relu\)"),
        ("input", r"node 0 \(Relu\): output 'x' is already produced by input 'x'"),
        ("init", r"initializer 'w': dims \[-2\] hold a negative size"),
        ("budget", r"initializer 'big': the initializers need 68719476736 bytes, more than"),
        ("opset", r"opset import of domain '' has version 1000000"),
    ],
)
def test_graph_structure_checked_up_front(change, pattern):
    fl = TensorProto.FLOAT
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["b"])]
    model = _model(nodes, [_vi("x", fl, [3])], [_vi("b", fl, [3])], [])
    if change == "cycle":
        model.graph.node[0].input[0] = "b"
    elif change == "twice":
        model.graph.node[1].output[0] = "a"
    elif change == "input":
        model.graph.node[0].output[0] = "x"
    elif change == "init":
        model.graph.initializer.append(helper.make_tensor("w", fl, [2], [1.0, 2.0]))
        model.graph.initializer[0].dims[0] = -2
    elif change == "budget":
        t = helper.make_tensor("big", fl, [2], [1.0, 2.0])
        t.dims[0] = 2**34  # no data is read before the budget refuses it
        model.graph.initializer.append(t)
    else:
        model.opset_import[0].version = 10**6
    with pytest.raises(ValidationError, match=pattern):
        InferenceSession(model.SerializeToString(), max_memory=BUDGET).run(
            None, {"x": np.ones(3, np.float32)}
        )


def test_memory_budget_applies_to_sessions_and_onnx_runs():
    """A node whose tensors exceed the budget (an Expand to 2**26 x 4 floats) is refused before
    it is compiled, naming the node; without a budget nothing changes."""
    fl = TensorProto.FLOAT
    model = _one("Expand", [_vi("x", fl, [1, 4])], [_vi("y", fl, [2**26, 4])],
                 [_i64("shape", [2**26, 4])])  # fmt: skip
    session = InferenceSession(model, max_memory=BUDGET)
    with pytest.raises(ValidationError, match=r"^ONNX: node 0 \(Expand\): the model's tensors"):
        session.program([(1, 4)])
    code, err = _cli(model)
    assert code == 1 and "memory budget" in err and len(err.splitlines()) == 1, err
    small = _one("Expand", [_vi("x", fl, [1, 4])], [_vi("y", fl, [8, 4])],
                 [_i64("shape", [8, 4])])  # fmt: skip
    (y,) = InferenceSession(small, max_memory=BUDGET).run(None, {"x": np.ones((1, 4), np.float32)})
    assert y.shape == (8, 4)


def test_model_that_crashes_onnxruntime_is_checked_against_the_reference():
    """A LayerNormalization whose bias is given as "" (seed 20261148): onnxruntime's CPU
    provider crashes making its session, so the fuzzer compares it with ONNX's reference."""
    from onnx import TensorProto, helper, numpy_helper

    gamma = numpy_helper.from_array(np.linspace(0.5, 1.5, 8).astype(np.float32), "gamma")
    node = helper.make_node("LayerNormalization", ["x", "gamma", ""], ["y"], axis=-1)
    graph = helper.make_graph(
        [node], "seed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8])], [gamma],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    assert _crashes_onnxruntime(model.graph)
    assert _session_outcome(model.SerializeToString()) == (
        "run: agrees with ONNX's reference (onnxruntime would crash)"
    )
    model.graph.node[0].input[2] = "gamma"  # a bias given: onnxruntime runs it
    assert not _crashes_onnxruntime(model.graph)


def test_empty_double_output_without_x64_warns_nothing():
    """An Add of an empty float64 input and a float64 constant (seed 20261153): its program
    holds no 64-bit tensor, so it ran without x64 and cast its output to float64 in JAX, which
    warned and truncated; the output is float64 on the host, empty, with no warning."""
    import warnings

    from onnx import TensorProto, helper, numpy_helper

    d = TensorProto.DOUBLE
    one = numpy_helper.from_array(np.array(1.0), "one_value")
    nodes = [helper.make_node("Constant", [], ["one"], value=one),
             helper.make_node("Add", ["x", "one"], ["y"])]  # fmt: skip
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", d, [0, 3])],
                              [helper.make_tensor_value_info("y", d, [0, 3])])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (y,) = InferenceSession(model).run(None, {"x": np.zeros((0, 3))})
    assert y.dtype == np.float64 and y.shape == (0, 3)
