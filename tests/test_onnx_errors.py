"""What is wrong with a model is said as such: each error path here once escaped
``InferenceSession`` or ``dml-jax run`` as an internal exception's type and text passed on by the
import walk (``node 0 (Constant): KeyError: 99``), or as a DirectML TensorDesc message naming
no ONNX node. Each case is a one-line ``ValidationError`` naming the node (or input, output,
initializer) and the model's fault; the command line prints it as its one error line.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import tempfile

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper

from dml_jax import ValidationError, cli
from dml_jax.onnx import InferenceSession

FLOAT = TensorProto.FLOAT
BUDGET = 64 << 20


def _model(nodes, inputs=(), inits=(), output="y", opset=17):
    graph = helper.make_graph(
        nodes, "g", list(inputs), [helper.make_tensor_value_info(output, FLOAT, None)], list(inits)
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _raises(model, pattern: str, feed=None, cli_pattern: str | None = None) -> None:
    """``pattern`` from the session (built and run) and as the command line's one error line
    (``cli_pattern`` where it reads the model another way)."""
    with pytest.raises(ValidationError, match=pattern) as caught:
        InferenceSession(model.SerializeToString(), max_memory=BUDGET).run(None, feed or {})
    assert "\n" not in str(caught.value)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.onnx")
        with open(path, "wb") as f:
            f.write(model.SerializeToString())  # as it is (onnx.save writes external data)
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            code = cli.main(["run", path, "--max-memory", str(BUDGET)])
    lines = err.getvalue().strip().splitlines()
    assert code == 1 and len(lines) == 1, err.getvalue()
    # The command line reads the model as an ONNX dispatchable of a DxDispatch model.
    head = f'error: {path}: dispatchables["model.onnx"]: '
    if cli_pattern is not None:
        assert re.search(cli_pattern, lines[0]), lines[0]
        return
    assert lines[0].startswith(head), lines[0]
    assert re.search(pattern, lines[0].removeprefix(head)), lines[0]


def _tensor(elem=FLOAT, dims=(1,), values=(1.0,), raw: bytes | None = None):
    t = helper.make_tensor("v", FLOAT, [len(values)], list(values))
    t.data_type = elem
    del t.dims[:]
    t.dims.extend(dims)
    if raw is not None:
        del t.float_data[:]
        t.raw_data = raw
    return t


# (tensor change, what the message says): data types ONNX does not define or DML does not hold,
# dims and stored values that disagree. The fuzzer's cases first: KeyError: 99, "cannot reshape
# array of size 1 into shape (1099511627776,)", "The element type in the input tensor is
# UNDEFINED".
BAD_TENSORS = [
    ({"elem": 99}, r"has data type 99, which ONNX does not define"),
    (
        {"dims": (2**40,)},
        r"dims \[1099511627776\] hold 1099511627776 float elements, but its float_data holds 1",
    ),
    ({"elem": 0}, r"has no data type \(UNDEFINED\)"),
    ({"elem": -3}, r"has data type -3, which ONNX does not define"),
    ({"elem": TensorProto.COMPLEX64}, r"element type complex64 has no DML data type"),
    ({"dims": (2, -1)}, r"dims \[2, -1\] hold a negative size"),
    ({"dims": (3,), "values": (1.0, 2.0)}, r"dims \[3\] hold 3 float elements, but its float_"),
    ({"dims": (2,), "raw": b"\0" * 4}, r"raw_data holds 4 bytes; dims \[2\] of float need 8"),
    ({"elem": TensorProto.INT4, "dims": (3,), "raw": b"\0"}, r"dims \[3\] of int4 need 2"),
    ({"elem": TensorProto.INT64, "dims": (1,)}, r"int64_data holds 0 values"),
]


@pytest.mark.parametrize("change, pattern", BAD_TENSORS)
def test_constant_value_is_checked_before_it_is_read(change, pattern):
    node = helper.make_node("Constant", [], ["y"], value=_tensor(**change))
    _raises(_model([node]), r"^ONNX: node 0 \(Constant\): attribute 'value': .*" + pattern)


# (Dims of 2^40 in an initializer are the memory budget's: it is checked before any value.)
@pytest.mark.parametrize("change, pattern", [BAD_TENSORS[i] for i in (0, 2, 3, 6, 7)])
def test_initializers_and_other_tensor_attributes_are_checked_too(change, pattern):
    init = _tensor(**change)
    init.name = "w"
    x = helper.make_tensor_value_info("x", FLOAT, [1])
    model = _model([helper.make_node("Add", ["x", "w"], ["y"])], [x], [init])
    _raises(model, r"ONNX: initializer 'w': .*" + pattern, {"x": np.ones(1, np.float32)})
    fill = helper.make_node("ConstantOfShape", ["shape"], ["y"], value=_tensor(**change))
    shape = numpy_helper.from_array(np.array([2], np.int64), "shape")
    _raises(_model([fill], inits=[shape]), r"node 0 \(ConstantOfShape\): attribute 'value': ")


def test_constant_external_data_that_is_missing():
    """From bytes the session reads it when the node is imported; from a path, with the rest
    of the model's external data (onnx's loader had been reported as "not an ONNX model")."""
    t = _tensor(raw=b"\0" * 4)
    onnx.external_data_helper.set_external_data(t, "nowhere.bin")
    t.data_location = TensorProto.EXTERNAL
    t.ClearField("float_data")
    node = helper.make_node("Constant", [], ["y"], value=t)
    _raises(
        _model([node]),
        r"node 0 \(Constant\): attribute 'value': cannot be read from its external data",
        cli_pattern=r"ONNX: '.*model.onnx': external data cannot be read: .*nowhere.bin",
    )


@pytest.mark.parametrize(
    "shape, pattern",
    [
        ([1] * 9, r"the input has 9 dimensions \(shape \[1(, 1){8}\]\); a DirectML tensor has at"),
        ([65536, 65536], r"the input of shape \[65536, 65536\] holds 4294967296 elements; a"),
    ],
)
def test_inputs_directml_cannot_hold_name_the_input(shape, pattern):
    """A rank-9 input and one of 2^32 elements ("TensorDesc.DimensionCount must be in [1, 8]",
    "TensorDesc.Sizes describe 4294967296 elements") named no ONNX input or node."""
    x = helper.make_tensor_value_info("x", FLOAT, shape)
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [x])
    with pytest.raises(ValidationError, match=r"^ONNX: input 'x': " + pattern):
        InferenceSession(model.SerializeToString()).program([tuple(shape)])


def test_a_constant_output_directml_cannot_hold_names_the_output():
    w = numpy_helper.from_array(np.ones([1] * 9, np.float32), "w")
    model = _model([helper.make_node("Identity", ["w"], ["y"])], inits=[w])
    _raises(model, r"^ONNX: output 'y': the constant has 9 dimensions")


def test_node_outputs_directml_cannot_hold_name_the_node():
    x = helper.make_tensor_value_info("x", FLOAT, [1, 1])
    shape = numpy_helper.from_array(np.array([2**16, 2**16], np.int64), "shape")
    model = _model([helper.make_node("Expand", ["x", "shape"], ["y"])], [x], [shape])
    with pytest.raises(ValidationError, match=r"^ONNX: node 0 \(Expand\): TensorDesc.Sizes"):
        InferenceSession(model.SerializeToString()).program([(1, 1)])


def test_constant_of_shape_of_more_dimensions_than_directml_holds():
    """130 dimensions, an empty one among them (folding gives up on it): the converter had made
    it with NumPy, and past NumPy's 64 dimensions a ValueError passed on (the ONNX fuzzer, a
    mutated ShuffleNet at seed 20261135)."""
    fill = helper.make_node("ConstantOfShape", ["shape"], ["y"])
    dims = numpy_helper.from_array(np.array([2, 0] + [1] * 128, np.int64), "shape")
    _raises(_model([fill], inits=[dims]),
            r"^ONNX: node 0 \(ConstantOfShape\): its output has 130 dimensions")  # fmt: skip


def test_a_string_attribute_that_is_not_utf8():
    """Pad(mode=b"\\xff") passed on a UnicodeDecodeError from the converter."""
    x = helper.make_tensor_value_info("x", FLOAT, [1, 1, 2, 2])
    pads = numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pads")
    node = helper.make_node("Pad", ["x", "pads"], ["y"], mode=b"\xff")
    _raises(
        _model([node], [x], [pads]),
        r"^ONNX: node 0 \(Pad\): attribute 'mode' holds b'\\xff', which is not UTF-8 text$",
        {"x": np.ones((1, 1, 2, 2), np.float32)},
    )


@pytest.mark.parametrize("name, value", [("strides", [0, 1]), ("dilations", [1, -1])])
def test_a_window_of_zero_or_negative_steps(name, value):
    """Conv(strides=[0, 1]) passed on a ZeroDivisionError from the output-size rule."""
    x = helper.make_tensor_value_info("x", FLOAT, [1, 1, 5, 5])
    w = numpy_helper.from_array(np.ones((1, 1, 3, 3), np.float32), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], **{name: value})
    _raises(
        _model([node], [x], [w]),
        rf"^ONNX: node 0 \(Conv\): {name} must hold 2 values >= 1, got {re.escape(str(value))}$",
        {"x": np.ones((1, 1, 5, 5), np.float32)},
    )


def test_batch_normalization_statistics_of_another_channel_count():
    """ShuffleNet with a BatchNormalization scale of 64 values for 272 channels: the graph
    optimizer's BN folding read past the vector (IndexError)."""
    x = helper.make_tensor_value_info("x", FLOAT, [1, 3, 2, 2])
    stats = [numpy_helper.from_array(np.ones(n, np.float32), f"s{k}") for k, n in
             enumerate((3, 3, 2, 3))]  # fmt: skip
    node = helper.make_node("BatchNormalization", ["x", "s0", "s1", "s2", "s3"], ["y"])
    _raises(
        _model([node], [x], stats),
        r"^ONNX: node 0 \(BatchNormalization\): input 'input_mean' has shape \[2\]: one value "
        r"per channel \(3\) is needed$",
        {"x": np.ones((1, 3, 2, 2), np.float32)},
    )


def test_operands_read_as_a_shape_they_do_not_broadcast_to():
    """The one rule under every converter's broadcast read: a desc reading past its operand is
    refused at import, not left to a rewrite or the lowering."""
    from dml_jax.enums import DataType
    from dml_jax.onnx.importer import Value, broadcast

    v = Value((64,), DataType.FLOAT32, ("const",))
    assert broadcast(Value((1, 272, 1, 1), DataType.FLOAT32, ("const",)), (2, 272, 3, 3))
    for shape in [(1, 272, 14, 14), (32,)]:
        with pytest.raises(ValidationError, match=r"shape \[64\] does not broadcast to"):
            broadcast(v, shape)


@pytest.mark.parametrize("constant", [True, False])
def test_an_output_declared_of_another_type(constant):
    """An output renamed onto an int64 Constant of GPT-2 was returned cast to the float its
    declaration says (onnxruntime returns the int64)."""
    x = helper.make_tensor_value_info("x", TensorProto.INT64, [2])
    shape = numpy_helper.from_array(np.array([2], np.int64), "shape")
    node = helper.make_node("Identity" if constant else "Neg", ["shape" if constant else "x"],
                            ["y"])  # fmt: skip
    computed = "int64" if constant else "int32 or int64"
    _raises(
        _model([node], [] if constant else [x], [shape] if constant else []),
        rf"^ONNX: output 'y' is declared float, but the graph computes {computed}$",
        None if constant else {"x": np.ones(2, np.int64)},
    )


def _cli_line(model) -> tuple[int, str]:
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.onnx")
        with open(path, "wb") as f:
            f.write(model.SerializeToString())
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            code = cli.main(["run", path])
    return code, err.getvalue().strip().split('dispatchables["model.onnx"]: ')[-1]


def test_the_command_line_names_tensors_it_cannot_bind():
    """An empty input (CastLike's 'like' of shape [0]) ran in the session but failed the
    command line's binding with a bare "TensorDesc.Sizes[0] must be >= 1, got 0"; an output
    known at import of 9 dimensions likewise."""
    x = helper.make_tensor_value_info("x", FLOAT, [3])
    like = helper.make_tensor_value_info("like", TensorProto.FLOAT16, [0])
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT16, None)
    graph = helper.make_graph([helper.make_node("CastLike", ["x", "like"], ["y"])], "g",
                              [x, like], [out])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=8)
    (y,) = InferenceSession(model.SerializeToString()).run(
        None, {"x": np.ones(3, np.float32), "like": np.ones(0, np.float16)}
    )
    assert y.dtype == np.float16
    code, line = _cli_line(model)
    assert code == 1 and line.startswith("ONNX: input 'like': shape [0] is empty, and a "), line
    w = numpy_helper.from_array(np.ones([1] * 9, np.int64), "w")
    graph = helper.make_graph([helper.make_node("Identity", ["w"], ["y"])], "g", [],
                              [helper.make_tensor_value_info("y", TensorProto.INT64, None)], [w])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    assert InferenceSession(model.SerializeToString()).run(None, {})[0].shape == (1,) * 9
    code, line = _cli_line(model)
    assert code == 1 and line.startswith("ONNX: output 'y': the tensor has 9 dimensions"), line


def test_image_bytes_pillow_cannot_decode():
    """ImageDecoder passed on Pillow's "UnidentifiedImageError: cannot identify image file
    <_io.BytesIO object at 0x...>"."""
    pytest.importorskip("PIL")
    enc = numpy_helper.from_array(np.frombuffer(b"not an image", np.uint8), "enc")
    out = helper.make_tensor_value_info("y", TensorProto.UINT8, None)
    graph = helper.make_graph([helper.make_node("ImageDecoder", ["enc"], ["y"])], "g", [], [out],
                              [enc])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)
    _raises(
        model,
        r"^ONNX: node 0 \(ImageDecoder\): the encoded stream \(12 bytes\) is not an image Pillow "
        r"can decode: its format is none Pillow reads$",
    )


TOO_LARGE_TO_FOLD = [
    ("HannWindow", {"size": np.array(2**40, np.int64)}, r"node 0 \(HannWindow\) > node \d+ "),
    (
        "OneHot",
        {"i": np.arange(2), "d": np.array(2**31), "v": np.ones(2, np.float32)},
        r"node 0 \(OneHot\)",
    ),
    ("Pad", {"x": np.ones((2, 2), np.float32), "p": np.array([2**20] * 4)}, r"node 0 \(Pad\)"),
]


@pytest.mark.parametrize("op, inputs, pattern", TOO_LARGE_TO_FOLD)
def test_constant_results_too_large_to_fold_are_not_computed(op, inputs, pattern):
    """HannWindow of 2^40 points was evaluated at import by ONNX's reference (a MemoryError
    passed on as 'cannot be evaluated at import: MemoryError: ...'; 2^33 points would have
    taken 32 GiB): windows, OneHot, Pad and Resize results are sized before they are folded,
    and a node with a function body that cannot be folded is expanded."""
    inits = [numpy_helper.from_array(v, k) for k, v in inputs.items()]
    model = _model([helper.make_node(op, list(inputs), ["y"])], inits=inits)
    with pytest.raises(ValidationError, match=r"^ONNX: " + pattern):
        InferenceSession(model.SerializeToString()).run(None, {})


def test_names_that_are_not_utf8():
    """An input named b'shap\\xbc' (protobuf hands out a name that is not UTF-8 as bytes)
    reached the decoder-role search, whose sorted() of str and bytes names raised TypeError."""
    x = helper.make_tensor_value_info("x", FLOAT, [1, 3, 1])
    shape = helper.make_tensor_value_info("shapZ", TensorProto.INT64, [3])
    model = _model([helper.make_node("Expand", ["x", "shapZ"], ["y"])], [x, shape])
    data = model.SerializeToString().replace(b"shapZ", b"shap\xbc")
    with pytest.raises(
        ValidationError, match=r"^ONNX: model\.graph\.node\[0\]\.input\[1\] is not UTF-8 text: "
    ):
        InferenceSession(data)


def test_contrib_op_attributes_of_another_type():
    """com.microsoft ops have no schema in the onnx package: BERT's Attention with num_heads
    given as a list reached its converter (int() of a list: TypeError). onnxruntime's schema
    types them."""
    pytest.importorskip("onnxruntime")
    x = helper.make_tensor_value_info("x", FLOAT, [1, 2, 4])
    w = numpy_helper.from_array(np.ones((4, 12), np.float32), "w")
    node = helper.make_node("Attention", ["x", "w"], ["y"], domain="com.microsoft", num_heads=[2])
    graph = helper.make_graph([node], "g", [x], [helper.make_tensor_value_info("y", FLOAT, None)],
                              [w])  # fmt: skip
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=8)
    _raises(
        model,
        r"^ONNX: node 0 \(Attention\): attribute 'num_heads' must be int, got ints$",
        {"x": np.ones((1, 2, 4), np.float32)},
    )


def test_a_name_with_control_characters_stays_on_one_line():
    """A model's names may hold any byte (a flipped byte made one ``'x\\n\\x02w1'``): the error
    naming it is one line, the characters written as escapes (found by the ONNX fuzzer)."""
    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    node = helper.make_node("MatMul", ["x\n\x02w1", "w"], ["y"])
    data = _model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])], [w])
    with pytest.raises(ValidationError) as e:
        InferenceSession(data.SerializeToString()).run(None, {"x": np.ones((2, 4), np.float32)})
    message = str(e.value)
    assert "\n" not in message and "\\n\\x02w1" in message
    assert message.startswith("ONNX: node 0 (MatMul): input 'x"), message


@pytest.mark.parametrize("op", ["Reshape", "Unsqueeze"])
def test_a_shape_or_axes_of_floats(op):
    """A Reshape whose shape initializer's type was changed to DOUBLE (the fuzzer, seed 523):
    its bytes read as doubles held a NaN, and ``int(NaN)`` escaped as ``ValueError: cannot
    convert float NaN to integer``. Inputs read as integers (shapes, axes, starts, pads...)
    refuse a floating type, naming the input."""
    x = helper.make_tensor_value_info("x", FLOAT, [2, 4])
    values = np.array([np.nan, 4.0] if op == "Reshape" else [0.0], np.float64)
    init = numpy_helper.from_array(values, "s")
    node = helper.make_node(op, ["x", "s"], ["y"])
    name = "shape" if op == "Reshape" else "axes"
    _raises(
        _model([node], [x], [init]),
        rf"^ONNX: node 0 \({op}\): input '{name}' must hold integers, got float64 values$",
        {"x": np.ones((2, 4), np.float32)},
    )


@pytest.mark.parametrize(
    "op, inputs, attrs, outputs",
    [
        ("Split", ["x"], {"axis": 0}, ["y", "z"]),
        ("Concat", ["x", "x"], {"axis": 0}, ["y"]),
        ("Compress", ["x", "c"], {"axis": 0}, ["y"]),
    ],
)
def test_a_scalar_where_an_axis_is_needed(op, inputs, attrs, outputs):
    """A scalar where the op cuts, joins or selects along an axis (the fuzzer, seed 601: an
    Unsqueeze of a scalar retyped Split): ``IndexError: tuple index out of range`` escaped
    into the message. The op is refused, naming the node."""
    x = helper.make_tensor_value_info("x", FLOAT, [])
    init = numpy_helper.from_array(np.array([True]), "c")
    node = helper.make_node(op, inputs, outputs, **attrs)
    graph = helper.make_graph(
        [node], "g", [x], [helper.make_tensor_value_info(o, FLOAT, None) for o in outputs], [init]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    _raises(
        model,
        rf"^ONNX: node 0 \({op}\): (the )?inputs? must have at least one dimension",
        {"x": np.array(1.5, np.float32)},
    )
