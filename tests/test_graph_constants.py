"""Constant data nodes (DML_CONSTANT_DATA_GRAPH_NODE_DESC, ``dml.ConstantDataNode``): the bytes
read through each consumer's desc against a NumPy reading of the same bytes, eager == jit, vmap
and gradients of the graph around them, a validation row per rule, JSON, and the values the
fast paths see (``fastpath.known_input``)."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dml_jax as dml
from dml_jax import fastpath
from dml_jax.graph import constant_value
from dml_jax.graph import tracing as graph_module

T = dml.TensorDesc
In, Out, Mid = dml.InputGraphEdge, dml.OutputGraphEdge, dml.IntermediateGraphEdge


def strided_reference(data: bytes, dtype, sizes, strides) -> np.ndarray:
    """Element i of the result is the element at sum(index * stride) of the bytes as ``dtype``:
    the definition of a strided tensor desc, one element at a time."""
    flat = np.frombuffer(data, dtype)
    out = np.empty(sizes, dtype)
    for index in np.ndindex(*sizes):
        out[index] = flat[sum(i * s for i, s in zip(index, strides))]
    return out


def identity_graph(data, desc):
    """A graph with no input: IDENTITY of a constant read through ``desc``."""
    out = T(desc.data_type.name, desc.sizes)
    node = dml.ElementWiseIdentityOperatorDesc(desc, out)
    return dml.GraphDesc(
        0, 1, (dml.ConstantDataNode(data), node), (), (Out(1, 0, 0),), (Mid(0, 0, 1, 0),)
    )


LAYOUTS = {
    "packed": ((2, 3), None),
    "broadcast rows": ((4, 3), (0, 1)),
    "transposed": ((3, 2), (1, 3)),
    "every other element": ((2, 2), (4, 2)),
}


@pytest.mark.parametrize("type_name", ["FLOAT32", "FLOAT16", "INT32", "INT8", "UINT8", "UINT16"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_constant_reads_through_its_consumers_desc(type_name, layout):
    sizes, strides = LAYOUTS[layout]
    desc = T(type_name, sizes, strides=strides) if strides else T(type_name, sizes)
    dtype = desc.dtype
    values = np.arange(1, 9).astype(dtype) * (-1 if dtype.kind in "fi" else 1)
    data = values.tobytes()
    want = strided_reference(data, dtype, sizes, desc.layout_strides)
    g = dml.compile_graph(identity_graph(data, desc))
    np.testing.assert_array_equal(np.asarray(g()), want)
    np.testing.assert_array_equal(np.asarray(jax.jit(g.fn)()), want)
    np.testing.assert_array_equal(constant_value(dml.ConstantDataNode(data), desc), want)


@pytest.mark.parametrize("type_name", ["INT4", "UINT4"])
def test_four_bit_constants_unpack_two_a_byte_low_nibble_first(type_name):
    data = bytes([0x21, 0xF7, 0x8C])  # elements 1, 2, 7, 15, 12, 8 as nibbles, low first
    nibbles = np.array([1, 2, 7, 15, 12, 8])
    want = np.where(nibbles >= 8, nibbles - 16, nibbles) if type_name == "INT4" else nibbles
    got = constant_value(dml.ConstantDataNode(data), T(type_name, (2, 3)))
    np.testing.assert_array_equal(got, want.reshape(2, 3))
    assert got.dtype == T(type_name, (1,)).dtype
    # five elements use the low nibble of the third byte only
    odd = constant_value(dml.ConstantDataNode(data), T(type_name, (5,)))
    np.testing.assert_array_equal(odd, want[:5])


def add_graph(constant: np.ndarray, c_desc: dml.TensorDesc):
    """ADD(graph input 0, a constant read as ``c_desc``) -> output 0."""
    x = T("FLOAT32", c_desc.sizes)
    node = dml.ElementWiseAddOperatorDesc(x, c_desc, x)
    return dml.GraphDesc(
        1,
        1,
        (dml.ConstantDataNode(constant), node),
        (In(0, 1, 0),),
        (Out(1, 0, 0),),
        (Mid(0, 0, 1, 1),),
    )


def test_the_graph_around_a_constant_is_an_ordinary_jax_function():
    bias = np.array([10.0, -20.0, 30.0], np.float32)
    g = dml.compile_graph(add_graph(bias, T("FLOAT32", (2, 3), strides=(0, 1))))
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    want = x + bias
    np.testing.assert_array_equal(np.asarray(g(x)), want)
    np.testing.assert_array_equal(np.asarray(jax.jit(g.fn)(x)), want)
    batch = np.stack([x, 2 * x, -x])
    np.testing.assert_array_equal(np.asarray(jax.vmap(g.fn)(batch)), batch + bias)
    grad = jax.grad(lambda a: jnp.sum(g.fn(a) ** 2))(x)
    np.testing.assert_allclose(np.asarray(grad), 2 * want, rtol=1e-6)
    # the same graph with the bias as an input gives the same bits
    as_input = dml.GraphDesc(
        2,
        1,
        (
            dml.ElementWiseAddOperatorDesc(
                T("FLOAT32", (2, 3)), T("FLOAT32", (2, 3), strides=(0, 1)), T("FLOAT32", (2, 3))
            ),
        ),
        (In(0, 0, 0), In(1, 0, 1)),
        (Out(0, 0, 0),),
    )
    np.testing.assert_array_equal(
        np.asarray(dml.compile_graph(as_input)(x, np.broadcast_to(bias, (2, 3)))), np.asarray(g(x))
    )
    # buffer mode: the graph input's buffer only; the constant is the graph's own
    (out,) = g.run_buffers([x.reshape(-1)], [np.zeros(6, np.float32)])
    np.testing.assert_array_equal(np.asarray(out), want.reshape(-1))


def test_a_constant_may_feed_an_input_flagged_owned_by_dml():
    weight = T("FLOAT32", (2, 3), flags="OWNED_BY_DML")
    node = dml.ElementWiseAddOperatorDesc(X3, weight, X3)
    g = dml.GraphDesc(
        1,
        1,
        (dml.ConstantDataNode(np.ones(6, np.float32)), node),
        (In(0, 1, 0),),
        (Out(1, 0, 0),),
        (Mid(0, 0, 1, 1),),
    )
    np.testing.assert_array_equal(
        np.asarray(dml.compile_graph(g)(np.zeros((2, 3), np.float32))), np.ones((2, 3))
    )


def test_a_numpy_array_and_its_bytes_make_equal_nodes():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert dml.ConstantDataNode(a) == dml.ConstantDataNode(a.tobytes())
    assert dml.ConstantDataNode(a.T) == dml.ConstantDataNode(np.ascontiguousarray(a.T).tobytes())
    assert hash(dml.ConstantDataNode(a)) == hash(dml.ConstantDataNode(bytearray(a.tobytes())))
    assert dml.ConstantDataNode(a).data_size == 24
    with pytest.raises(AttributeError):
        dml.ConstantDataNode(a).data = b"x"
    g = add_graph(a.reshape(-1)[:3], T("FLOAT32", (2, 3), strides=(0, 1)))
    assert dml.compile_graph(g) is dml.compile_graph(
        add_graph(a.reshape(-1)[:3].copy(), T("FLOAT32", (2, 3), strides=(0, 1)))
    )


X3 = T("FLOAT32", (2, 3))
ADD = dml.ElementWiseAddOperatorDesc(X3, X3, X3)
C6 = np.zeros(6, np.float32)


def _graph(nodes, inputs, outputs, mids, input_count=1, output_count=1):
    return dml.GraphDesc(input_count, output_count, nodes, inputs, outputs, mids)


REJECTED = {
    "before feature level 6_2": (
        lambda: dml.compile_graph(add_graph(C6, X3), feature_level="6_1"),
        (
            r"^DML_GRAPH: Nodes\[0\] is a DML_CONSTANT_DATA_GRAPH_NODE_DESC, which needs feature "
            r"level 6_2 or later \(the graph is compiled for 6_1\)$"
        ),
    ),
    "fewer bytes than the consumer addresses": (
        lambda: dml.compile_graph(add_graph(np.zeros(5, np.float32), X3)),
        (
            r"^DML_GRAPH: IntermediateEdges\[0\] joins Nodes\[0\] \(DML_CONSTANT_DATA_GRAPH_NODE_DESC, "
            r"DataSize 20\) to Nodes\[1\]\.BTensor, which addresses 6 FLOAT32 elements \(24 bytes\); "
            r"DataSize must be >= 24$"
        ),
    ),
    "a graph output from a constant": (
        lambda: dml.compile_graph(
            _graph(
                (dml.ConstantDataNode(C6), ADD),
                (In(0, 1, 0),),
                (Out(1, 0, 0), Out(0, 0, 1)),
                (Mid(0, 0, 1, 1),),
                output_count=2,
            )
        ),
        (
            r"^DML_GRAPH: OutputEdges\[1\]\.FromNodeIndex names Nodes\[0\], a constant: a graph "
            r"output comes from an operator node"
        ),
    ),
    "an input edge into a constant": (
        lambda: dml.compile_graph(
            _graph(
                (dml.ConstantDataNode(C6), ADD),
                (In(0, 1, 0), In(0, 0, 0)),
                (Out(1, 0, 0),),
                (Mid(0, 0, 1, 1),),
            )
        ),
        r"^DML_GRAPH: InputEdges\[1\]\.ToNodeIndex names Nodes\[0\], a constant, which takes no input$",
    ),
    "an intermediate edge into a constant": (
        lambda: dml.compile_graph(
            _graph(
                (dml.ConstantDataNode(C6), ADD),
                (In(0, 1, 0),),
                (Out(1, 0, 0),),
                (Mid(0, 0, 1, 1), Mid(1, 0, 0, 0)),
            )
        ),
        r"^DML_GRAPH: IntermediateEdges\[1\]\.ToNodeIndex names Nodes\[0\], a constant, which takes no input$",
    ),
    "a second output of a constant": (
        lambda: dml.compile_graph(
            _graph(
                (dml.ConstantDataNode(C6), ADD), (In(0, 1, 0),), (Out(1, 0, 0),), (Mid(0, 1, 1, 1),)
            )
        ),
        (
            r"^DML_GRAPH: IntermediateEdges\[0\]\.FromNodeOutputIndex must be < the output tensor "
            r"count of Nodes\[0\] \(CONSTANT\) \(1\), got 1$"
        ),
    ),
    "a constant that feeds nothing": (
        lambda: dml.compile_graph(
            _graph(
                (dml.ConstantDataNode(C6), ADD, dml.ConstantDataNode(C6)),
                (In(0, 1, 0),),
                (Out(1, 0, 0),),
                (Mid(0, 0, 1, 1),),
            )
        ),
        r"^DML_GRAPH: Nodes\[2\] \(CONSTANT\) contributes to no graph output; DirectML rejects unused nodes$",
    ),
    "no bytes": (
        lambda: dml.ConstantDataNode(b""),
        r"^DML_CONSTANT_DATA_GRAPH_NODE_DESC: DataSize must be > 0$",
    ),
    "not bytes": (
        lambda: dml.ConstantDataNode([1, 2]),
        r"^DML_CONSTANT_DATA_GRAPH_NODE_DESC: Data must be bytes or a NumPy array, got list$",
    ),
}


@pytest.mark.parametrize("case", REJECTED)
def test_constant_rules(case):
    build, pattern = REJECTED[case]
    with pytest.raises(dml.ValidationError, match=pattern):
        build()


def test_validate_graph_applies_the_same_rules():
    with pytest.raises(dml.ValidationError, match="DataSize must be >= 24"):
        dml.validate_graph(add_graph(np.zeros(5, np.float32), X3))
    dml.validate_graph(add_graph(C6, X3))


def test_json_round_trip_and_errors():
    g = add_graph(np.arange(3, dtype=np.float32), T("FLOAT32", (2, 3), strides=(0, 1)))
    written = json.loads(json.dumps(dml.graph_to_json(g)))
    assert written["Nodes"][0]["type"] == "CONSTANT"
    assert written["Nodes"][0]["DataSize"] == 12
    assert dml.graph_from_json(written) == g
    node = written["Nodes"][0]
    for change, pattern in (
        (
            {"Data": "not base64!"},
            r"Nodes\[0\]: DML_CONSTANT_DATA_GRAPH_NODE_DESC: Data is not valid base64$",
        ),
        (
            {"Data": 12},
            r"Nodes\[0\]: DML_CONSTANT_DATA_GRAPH_NODE_DESC: Data must be a base64 string",
        ),
        (
            {"DataSize": 8},
            r"Nodes\[0\]: DML_CONSTANT_DATA_GRAPH_NODE_DESC: DataSize must equal the 12 bytes of Data, got 8$",
        ),
        ({"desc": {}}, r"Nodes\[0\]: DML_CONSTANT_DATA_GRAPH_NODE_DESC: unknown member 'desc'"),
        ({"Data": ""}, r"Nodes\[0\]: DML_CONSTANT_DATA_GRAPH_NODE_DESC: DataSize must be > 0$"),
    ):
        bad = dict(written, Nodes=[dict(node, **change), written["Nodes"][1]])
        if change.get("Data") == "":
            bad["Nodes"][0].pop("DataSize")
        with pytest.raises(dml.ValidationError, match=pattern):
            dml.graph_from_json(bad)
    named = dict(written, Nodes=[dict(node, Name="bias"), written["Nodes"][1]])
    named["IntermediateEdges"] = [dict(written["IntermediateEdges"][0], FromNodeIndex="bias")]
    assert dml.graph_from_json(named) == g


def test_fast_paths_see_the_constant_values(monkeypatch):
    # While a node is lowered, known_input(i) is the value of its constant-fed argument i (as the
    # consumer's desc reads it) and None for the others; outside a lowering, nothing is known.
    seen = []
    original = fastpath.lowering

    fusible = []

    def recording(spec, desc, fast_paths, linked):
        fusible.append(linked)
        lower = original(spec, desc, fast_paths, linked)

        def run(*arrays):
            seen.append([fastpath.known_input(i) for i in range(len(arrays))])
            return lower(*arrays)

        return run

    monkeypatch.setattr(graph_module.fastpath, "lowering", recording)
    bias = np.array([1.5, 2.5, 3.5], np.float32)
    g = dml.compile_graph(
        add_graph(bias, T("FLOAT32", (4, 3), strides=(0, 1))), feature_level="6_3"
    )
    x = np.zeros((4, 3), np.float32)
    np.testing.assert_array_equal(np.asarray(g(x)), np.broadcast_to(bias, (4, 3)))
    ((first, second),) = seen
    assert first is None
    np.testing.assert_array_equal(second, np.broadcast_to(bias, (4, 3)))
    assert fastpath.known_input(1) is None
    # a node fed by graph inputs and constants alone has no neighbour to fuse with: it keeps
    # the fast paths registered as standalone (the element-wise kernels)
    assert fusible == [False]
