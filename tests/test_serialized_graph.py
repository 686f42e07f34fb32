"""``dmlSerializedGraph`` dispatchables: DirectML's flatbuffer graph files run as DML graphs.

The test writes its own ``dml.ir.DmlGraphDesc`` flatbuffers (a small forward-laid builder below,
following the schema in ONNX Runtime's DmlGraphDesc_generated.h / OperatorFieldTypes_generated.h)
and checks the runner's results against NumPy.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import struct

import numpy as np
import pytest

import dml_jax as dml
from dml_jax import cli, registry
from dml_jax.dxdispatch import ModelError, load_model
from dml_jax.fields import dml_member_name
from dml_jax.formats.dml_serialized import read_serialized_graph, schema_fields

SPEC = pathlib.Path(__file__).resolve().parents[2] / "shared/spec/dml_operators.json"


class Builder:
    """Writes flatbuffer tables front to back: every child lies after the field pointing at it."""

    def __init__(self):
        self.buf = bytearray(4)

    def _align(self, n):
        while len(self.buf) % n:
            self.buf.append(0)

    def _patch(self, at, target):
        struct.pack_into("<I", self.buf, at, target - at)

    def finish(self, root):
        self._patch(0, self.write(root))
        return bytes(self.buf)

    def write(self, obj):
        kind = obj[0]
        if kind == "str":
            self._align(4)
            pos = len(self.buf)
            data = obj[1].encode()
            self.buf += struct.pack("<I", len(data)) + data + b"\0"
            return pos
        if kind == "vec":  # ("vec", fmt, values)
            self._align(8 if obj[1] in "Qd" else 4)
            pos = len(self.buf)
            self.buf += struct.pack("<I", len(obj[2])) + b"".join(
                struct.pack("<" + obj[1], v) for v in obj[2]
            )
            return pos
        if kind == "objs":  # ("objs", [children])
            self._align(4)
            pos = len(self.buf)
            self.buf += struct.pack("<I", len(obj[1])) + bytes(4 * len(obj[1]))
            for i, child in enumerate(obj[1]):
                self._patch(pos + 4 + 4 * i, self.write(child))
            return pos
        if kind == "struct":  # ("struct", fmt, values)
            self._align(8)
            pos = len(self.buf)
            self.buf += struct.pack("<" + obj[1], *obj[2])
            return pos
        # ("table", [field per vtable slot: None, (fmt, value) or a child object])
        fields = obj[1]
        layout, size = [], 4
        for f in fields:
            if f is None:
                layout.append(None)
                continue
            fmt = f[0] if f[0] in ("B", "I", "Q", "f") else "I"
            width = struct.calcsize(fmt)
            size = (size + width - 1) // width * width
            layout.append((size, fmt, f))
            size += width
        self._align(2)
        vtable = len(self.buf)
        self.buf += struct.pack("<HH", 4 + 2 * len(fields), size)
        self.buf += b"".join(struct.pack("<H", 0 if e is None else e[0]) for e in layout)
        self._align(8)
        table = len(self.buf)
        self.buf += bytes(size)
        struct.pack_into("<i", self.buf, table, table - vtable)
        children = []
        for e in layout:
            if e is None:
                continue
            at, fmt, f = e
            if f[0] in ("B", "I", "Q", "f"):
                struct.pack_into("<" + fmt, self.buf, table + at, f[1])
            else:
                children.append((table + at, f))
        for at, f in children:
            self._patch(at, self.write(f))
        return table


def tensor(sizes):
    return ("table", [("str", "DML_TENSOR_DATA_TYPE_FLOAT32"), ("vec", "I", sizes), None,
                      ("Q", 4 * int(np.prod(sizes)))])  # fmt: skip


def attribute(name, kind_code, value):
    return ("table", [("str", name), ("B", kind_code), value])


def operator_node(name, op, inputs, outputs, in_names, out_names, attributes):
    desc = ("table", [("str", op), ("objs", inputs), ("objs", outputs), ("objs", attributes)])
    return ("table", [("B", 1), desc, ("str", name), ("objs", [("str", n) for n in in_names]),
                      ("objs", [("str", n) for n in out_names])])  # fmt: skip


def constant_node(name, out_name, *, file_name=None, data=None):
    detail = (
        (1, ("table", [("str", file_name)])) if file_name else (2, ("table", [("vec", "B", data)]))
    )
    desc = ("table", [("B", detail[0]), detail[1]])
    return ("table", [("B", 2), desc, ("str", name), ("objs", []), ("objs", [("str", out_name)])])


SIZES = [1, 1, 1, 4]
C_VALUES = np.array([1, -2, 3, -4], np.float32)
K_VALUES = np.array([2, 3, 4, 5], np.float32)
# AttributeFieldVariant: Activation 1, UInt32 3, UIntArray 7; DML_REDUCE_FUNCTION_SUM is 10.
GRAPH = (
    "table",
    [
        ("objs", [
            constant_node("c", "c_out", data=list(C_VALUES.tobytes())),
            operator_node("add", "DML_OPERATOR_ELEMENT_WISE_ADD1", [tensor(SIZES)] * 2,
                          [tensor(SIZES)], ["x", "c_out"], ["t"],
                          [attribute("FusedActivation", 1, ("table", [
                              ("str", "DML_OPERATOR_ACTIVATION_RELU"), ("objs", [])]))]),
            constant_node("k", "k_out", file_name="k_values"),
            operator_node("mul", "DML_OPERATOR_ELEMENT_WISE_MULTIPLY", [tensor(SIZES)] * 2,
                          [tensor(SIZES)], ["t", "k_out"], ["y"], []),
            operator_node("sum", "DML_OPERATOR_REDUCE", [tensor(SIZES)], [tensor([1, 1, 1, 1])],
                          ["t"], ["s"],
                          [attribute("Function", 3, ("struct", "I", [10])),
                           attribute("AxisCount", 3, ("struct", "I", [1])),
                           attribute("Axes", 7, ("table", [("vec", "I", [3])]))]),
        ]),
        ("objs", [("str", "x")]),
        ("objs", [("str", "y"), ("str", "s")]),
    ],
)  # fmt: skip


def write_graph_model(tmp_path, x):
    (tmp_path / "g").mkdir()
    (tmp_path / "g" / "graph.bin").write_bytes(Builder().finish(GRAPH))
    (tmp_path / "g" / "k_values.bin").write_bytes(K_VALUES.tobytes())
    model = {
        "resources": {
            "x": {"initialValuesDataType": "FLOAT32", "initialValues": x},
            "y": {
                "initialValuesDataType": "FLOAT32",
                "initialValues": {"valueCount": 4, "value": 0},
            },
            "s": {"initialValuesDataType": "FLOAT32", "initialValues": [0]},
        },
        "dispatchables": {"g": {"type": "dmlSerializedGraph", "sourcePath": "g/graph.bin"}},
        "commands": [
            {"type": "dispatch", "dispatchable": "g", "bindings": {"x": "x", "y": "y", "s": "s"}},
            {"type": "print", "resource": "y"},
            {"type": "print", "resource": "s"},
        ],
    }
    path = tmp_path / "model.json"
    path.write_text(json.dumps(model))
    return str(path)


def test_builder_output_reads_back():
    g = read_serialized_graph(Builder().finish(GRAPH))
    assert g.input_names == ["x"] and g.output_names == ["y", "s"]
    assert [n.name for n in g.nodes] == ["c", "add", "k", "mul", "sum"]
    assert g.nodes[4].attributes[2].value == (3,)
    assert g.nodes[0].constant_data == C_VALUES.tobytes()


def test_graph_with_constants_activation_and_counts_runs(tmp_path, capsys):
    x = [0.5, 1.0, -4.0, 2.0]
    assert cli.main(["run", write_graph_model(tmp_path, x)]) == 0
    t = np.maximum(np.array(x, np.float32) + C_VALUES, 0)
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("Resource")]
    assert printed == [
        "Resource 'y': " + ", ".join(f"{v:g}" for v in t * K_VALUES),
        f"Resource 's': {t.sum():g}",
    ]


def test_graph_desc_follows_the_names(tmp_path):
    model = load_model(write_graph_model(tmp_path, [0, 0, 0, 0]))
    d = model.dispatchables["g"]
    assert [(p.name, p.role) for p in d.bind_points] == [
        ("x", "input"),
        ("y", "output"),
        ("s", "output"),
    ]
    assert len(d.op.input_descs) == 1  # the constants are not bind points


def test_missing_constant_file_and_unknown_edge(tmp_path):
    path = write_graph_model(tmp_path, [0, 0, 0, 0])
    (tmp_path / "g" / "k_values.bin").unlink()
    with pytest.raises(ModelError, match="constant 'k': cannot read"):
        load_model(path)
    broken = Builder().finish(GRAPH).replace(b"k_out", b"q_out", 1)
    (tmp_path / "g" / "graph.bin").write_bytes(broken)
    (tmp_path / "g" / "k_values.bin").write_bytes(K_VALUES.tobytes())
    with pytest.raises(ModelError, match="input 'k_out' is neither a graph input"):
        load_model(path)
    (tmp_path / "g" / "graph.bin").write_bytes(b"\x10\x00")
    with pytest.raises(ModelError, match="truncated or corrupt"):
        load_model(path)


@pytest.mark.skipif(not SPEC.exists(), reason="the schema file is not beside this checkout")
def test_schema_order_of_every_operator_matches_directml():
    """Attributes are read by position, so each class's schema order must be DirectML's."""
    schemas = {op["type"]: op for op in json.loads(SPEC.read_text())["operators"]}
    for name in dml.registered_operators():
        schema = schemas.get(name)
        if schema is None:
            continue
        cls = registry.lookup(name).desc_class
        ours = [dml_member_name(f.name) for f in schema_fields(cls)]
        assert ours == [f["name"] for f in schema["fields"]], name
        assert len(ours) == len(dataclasses.fields(cls))


def test_read_graph_reads_each_format_into_a_graph_desc(tmp_path):
    """One reader per format (dml_jax.formats): the serialized graph's GraphDesc runs to the same
    values as the DxDispatch model that dispatches it; a DML_GRAPH JSON and an ONNX model read to
    GraphDescs too; other files are refused."""
    from dml_jax.formats import load_serialized_graph, read_graph
    from dml_jax.graph import GraphDesc, compile_graph
    from dml_jax.graph_json import graph_to_json

    write_graph_model(tmp_path, [0, 0, 0, 0])
    bin_path = str(tmp_path / "g" / "graph.bin")
    graph = read_graph(bin_path)
    assert isinstance(graph, GraphDesc) and len(graph.nodes) == 3  # constants: graph inputs
    loaded = load_serialized_graph(bin_path)
    assert loaded.converted.input_names == ["x"]
    constants = {i: np.frombuffer(b, np.float32) for i, b in loaded.constants.items()}
    x = np.array([0.5, 1.0, -4.0, 2.0], np.float32)
    args = [x.reshape(SIZES)] + [constants[i].reshape(SIZES) for i in sorted(constants)]
    y, s = compile_graph(graph)(*args)
    t = np.maximum(x + C_VALUES, 0)
    np.testing.assert_allclose(np.ravel(y), t * K_VALUES, rtol=1e-6)
    np.testing.assert_allclose(np.ravel(s), [t.sum()], rtol=1e-6)

    json_path = tmp_path / "graph.json"
    json_path.write_text(json.dumps(graph_to_json(graph)))
    assert read_graph(str(json_path)) == graph

    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    model = helper.make_model(
        helper.make_graph(
            [helper.make_node("Relu", ["a"], ["b"])],
            "g",
            [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["n", 3])],
            [helper.make_tensor_value_info("b", TensorProto.FLOAT, ["n", 3])],
        ),
        opset_imports=[helper.make_opsetid("", 13)],
    )
    onnx.save(model, str(tmp_path / "m.onnx"))
    g = read_graph(str(tmp_path / "m.onnx"), free_dimensions={"n": 2})
    assert [n.operator_type for n in g.nodes][-1] == "DML_OPERATOR_ACTIVATION_RELU"
    with pytest.raises(dml.ValidationError, match="unknown model format"):
        read_graph(str(tmp_path / "m.txt"))
