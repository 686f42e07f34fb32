"""DxDispatch JSON models: resources, dispatchables and commands, executed with JAX.

A model file (DxDispatch's format) declares typed byte buffers (``resources``), DML operators
(``dispatchables``) and a list of ``commands`` (``dispatch``, ``print``, ``writeFile``).
``load_model`` parses and checks the whole file in plain Python (NumPy only reads data files);
``Executor`` then uploads every resource to a JAX device as a ``uint8`` array, compiles one XLA
program per dispatch command, and runs the commands in order.

A dispatch views each bound resource's bytes, from the binding's byte offset, as the bind
point tensor's data type (a bit-for-bit reinterpretation, as on a GPU), runs the operator in
buffer mode (strides, broadcasting, padding) and writes the output buffers back into the bytes,
so later commands see the new contents; a resource bound as both input and output is updated in
place.

Every problem with a model is a ``ModelError`` naming the file and the JSON path.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .enums import DataType, TensorFlags
from .errors import ValidationError, brief
from .tensor import TensorDesc

MINIMUM_BUFFER_TENSOR_ALIGNMENT = 16  # DML_MINIMUM_BUFFER_TENSOR_ALIGNMENT


class ModelError(Exception):
    """A problem in a model file or its data: names the file and the JSON path.

    Attributes:
        file: the model file (as given on the command line).
        path: the JSON path of the offending member, e.g. ``commands[2].bindings.InputTensor``.
        message: what is wrong.
    """

    def __init__(self, file: str, path: str, message: str):
        self.file = file
        self.path = path
        self.message = message
        where = f"{file}: {path}: " if path else f"{file}: "
        super().__init__(where + message)


# ---------------------------------------------------------------------------------------------
# JSON with comments and trailing commas


def _strip_json_extensions(text: str) -> str:
    """Blanks out ``//`` and ``/* */`` comments and trailing commas, keeping every position.

    Replacing with spaces (and keeping newlines) means ``json`` reports the line and column of
    the original text.
    """
    out = list(text)
    i, n = 0, len(text)
    last_comma = -1  # index of a comma that may turn out to be trailing
    while i < n:
        c = text[i]
        if c == '"':
            last_comma = -1
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
            continue
        if c == "/" and i + 1 < n and text[i + 1] == "/":
            while i < n and text[i] != "\n":
                out[i] = " "
                i += 1
            continue
        if c == "/" and i + 1 < n and text[i + 1] == "*":
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            for k in range(i, end):
                if out[k] != "\n":
                    out[k] = " "
            i = end
            continue
        if c == ",":
            last_comma = i
        elif c in "}]":
            if last_comma >= 0:
                out[last_comma] = " "
            last_comma = -1
        elif not c.isspace():
            last_comma = -1
        i += 1
    return "".join(out)


def parse_json_text(text: str, file: str) -> Any:
    """Parses DxDispatch-flavoured JSON (comments and trailing commas allowed)."""
    try:
        return json.loads(_strip_json_extensions(text))
    except json.JSONDecodeError as e:
        raise ModelError(
            file, "", f"invalid JSON at line {e.lineno}, column {e.colno}: {e.msg}"
        ) from None
    except RecursionError:
        raise ModelError(file, "", "invalid JSON: nested too deeply") from None
    except ValueError as e:  # e.g. an integer literal beyond Python's digit limit
        raise ModelError(file, "", f"invalid JSON: {e}") from None


# ---------------------------------------------------------------------------------------------
# Small helpers


_IDENTIFIER = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$]*$")


def _member(path: str, key: str | int) -> str:
    """``resources`` + ``A`` -> ``resources.A``; indices and odd names use brackets."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    if not _IDENTIFIER.match(key):
        key_text = json.dumps(key)
        return f"{path}[{key_text}]"
    return f"{path}.{key}" if path else key


class _Ctx:
    """The model file name, for errors, and the limits of this load (see ``load_model``)."""

    def __init__(
        self,
        file: str,
        max_memory: int | None = None,
        allow_outside_paths: bool = False,
        model_dir: str = "",
    ):
        self.file = file
        self.max_memory = max_memory
        self.allocated = 0
        self.allow_outside_paths = allow_outside_paths
        self.model_dir = model_dir

    def reserve(self, nbytes: int, path: str, what: str = "resources") -> None:
        """Counts ``nbytes`` against the memory budget before anything that large is allocated."""
        self.allocated += nbytes
        if self.max_memory is not None and self.allocated > self.max_memory:
            raise self.fail(
                path,
                f"the {what} need {self.allocated} bytes, more than the "
                f"memory budget of {self.max_memory} bytes (--max-memory)",
            )

    def inside_model_dir(self, file: str, path: str, what: str) -> str:
        """Refuses a path that resolves (symbolic links included) outside the model's folder."""
        if self.allow_outside_paths:
            return file
        real, root = os.path.realpath(file), os.path.realpath(self.model_dir or ".")
        if os.path.commonpath([real, root]) != root:
            raise self.fail(
                path,
                f"{what} '{file}' is outside the model's folder '{root}' "
                "(allowed with --allow-outside-paths)",
            )
        return file

    def fail(self, path: str, message: str) -> ModelError:
        return ModelError(self.file, path, message)

    def require(self, obj: dict, key: str, path: str) -> Any:
        if key not in obj:
            raise self.fail(path, f"missing required member '{key}'")
        return obj[key]

    def object(self, value: Any, path: str) -> dict:
        if not isinstance(value, dict):
            raise self.fail(path, f"must be a JSON object, got {_kind(value)}")
        return value

    def string(self, value: Any, path: str) -> str:
        if not isinstance(value, str):
            raise self.fail(path, f"must be a string, got {_kind(value)}")
        return value

    def uint(self, value: Any, path: str, minimum: int = 0) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(path, f"must be an integer, got {brief(value)}")
        if value < minimum:
            raise self.fail(path, f"must be >= {minimum}, got {value}")
        return value


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    return {dict: "an object", list: "an array", str: "a string"}.get(
        type(value), f"the number {value}"
    )


_DATA_TYPE_PREFIX = "DML_TENSOR_DATA_TYPE_"


def _parse_data_type(ctx: _Ctx, value: Any, path: str) -> DataType | None:
    """A DML_TENSOR_DATA_TYPE name (full or short, exact case); UNKNOWN -> None."""
    if value in ("UNKNOWN", _DATA_TYPE_PREFIX + "UNKNOWN"):
        return None
    try:
        return DataType.parse(ctx.string(value, path), path)
    except ValidationError:
        names = ", ".join(["UNKNOWN"] + [t.name for t in DataType])
        raise ctx.fail(
            path,
            f"unknown data type {json.dumps(value)}; expected one of {names} (or the "
            f"full name, e.g. {_DATA_TYPE_PREFIX}FLOAT32)",
        ) from None


# ---------------------------------------------------------------------------------------------
# Typed values: JSON numbers -> bytes of a DML data type


def float_to_half_truncated(value: float) -> np.float16:
    """DxDispatch's JSON -> FLOAT16 conversion: to float32, then to half rounding toward zero.

    DxDispatch converts through its half library's default rounding, which truncates; NumPy
    rounds to nearest even, so a result that NumPy rounded away from zero is stepped back one
    ulp toward zero. Overflow still gives infinity, as the library does.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        f32 = np.float32(value)
        half = np.float16(f32)
    if np.isfinite(half) and abs(float(half)) > abs(float(f32)):
        half = np.nextafter(half, np.float16(0))
    return np.float16(half)


_SPECIAL_FLOATS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def convert_scalar(ctx: _Ctx, value: Any, data_type: DataType, path: str) -> np.generic:
    """One JSON value as a scalar of ``data_type`` (DxDispatch's rules).

    Floating types take numbers or the strings "nan", "inf", "-inf" (any case); integer types
    take JSON integers within range (unsigned types reject negatives).
    """
    if data_type.is_float:
        if isinstance(value, str) and value.lower() in _SPECIAL_FLOATS:
            value = _SPECIAL_FLOATS[value.lower()]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ctx.fail(
                path,
                f'must be a number (or "nan", "inf", "-inf") for '
                f"{data_type.name}, got {json.dumps(value)}",
            )
        if data_type is DataType.FLOAT16:
            return float_to_half_truncated(value)
        with np.errstate(over="ignore"):
            return data_type.numpy_dtype.type(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ctx.fail(path, f"must be an integer for {data_type.name}, got {json.dumps(value)}")
    info = np.iinfo(data_type.numpy_dtype)
    if not info.min <= value <= info.max:
        raise ctx.fail(
            path, f"{value} is out of range for {data_type.name} [{info.min}, {info.max}]"
        )
    return data_type.numpy_dtype.type(value)


def _wrap_int(value: int, data_type: DataType) -> int:
    """Two's-complement wrap-around of an integer into ``data_type`` (sequence accumulation)."""
    bits = 8 * data_type.size
    value &= (1 << bits) - 1
    if data_type.is_signed and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


def sequence_values(
    start: np.generic, delta: np.generic, count: int, data_type: DataType
) -> np.ndarray:
    """start, start + delta, ... by repeated addition in the target type.

    FLOAT16 adds in float32 and converts each partial sum back to half the way JSON numbers
    are converted; integers wrap around.
    """
    values = []
    if data_type.is_float:
        acc = start
        for _ in range(count):
            values.append(acc)
            if data_type is DataType.FLOAT16:
                acc = float_to_half_truncated(np.float32(acc) + np.float32(delta))
            else:
                with np.errstate(over="ignore", invalid="ignore"):
                    acc = acc + delta
        return np.array(values, dtype=data_type.numpy_dtype)
    acc = int(start)
    for _ in range(count):
        values.append(acc)
        acc = _wrap_int(acc + int(delta), data_type)
    return np.array(values, dtype=data_type.numpy_dtype)


# ---------------------------------------------------------------------------------------------
# Resources


@dataclass
class Resource:
    """A buffer resource: its declared type, initial bytes and size.

    Attributes:
        name: the resource's name in the model.
        data_type: ``initialValuesDataType`` (None for UNKNOWN, e.g. the list initializer);
            it decides how ``print`` and ``writeFile`` read the buffer, never how it is bound.
        initial: the initial bytes (written at byte 0; the rest of the buffer is zero).
        size_in_bytes: the buffer size.
        path: the JSON path of the resource.
    """

    name: str
    data_type: DataType | None
    initial: bytes
    size_in_bytes: int
    path: str

    def initial_buffer(self) -> np.ndarray:
        """The buffer's bytes at upload: initial values, then zero padding."""
        buffer = np.zeros(self.size_in_bytes, np.uint8)
        buffer[: len(self.initial)] = np.frombuffer(self.initial, np.uint8)
        return buffer


_NPY_TYPES = {
    ("b", 1): DataType.UINT8,  # bool
    ("i", 1): DataType.INT8,
    ("u", 1): DataType.UINT8,
    ("i", 2): DataType.INT16,
    ("u", 2): DataType.UINT16,
    ("i", 4): DataType.INT32,
    ("u", 4): DataType.UINT32,
    ("i", 8): DataType.INT64,
    ("u", 8): DataType.UINT64,
    ("f", 2): DataType.FLOAT16,
    ("f", 4): DataType.FLOAT32,
    ("f", 8): DataType.FLOAT64,
}


def _find_file(ctx: _Ctx, source: str, model_dir: str, path: str) -> str:
    """DxDispatch looks next to the model file first, then in the current directory."""
    for candidate in (os.path.join(model_dir, source), source):
        if os.path.isfile(candidate):
            return ctx.inside_model_dir(candidate, path, "file")
    raise ctx.fail(
        path,
        f"file '{source}' not found (looked in '{model_dir or '.'}' and in the current directory)",
    )


def _read_npy(ctx: _Ctx, file: str, path: str) -> tuple[bytes, DataType]:
    try:
        with open(file, "rb") as f:
            version = np.lib.format.read_magic(f)
            if version[0] >= 4:
                raise ctx.fail(path, f"'{file}': .npy format version {version} is not supported")
            read_header = (
                np.lib.format.read_array_header_1_0
                if version == (1, 0)
                else np.lib.format.read_array_header_2_0
            )
            shape, fortran, dtype = read_header(f)
            if fortran:
                raise ctx.fail(path, f"'{file}': Fortran-ordered .npy arrays are not supported")
            if dtype.hasobject or dtype.fields is not None:
                raise ctx.fail(
                    path, f"'{file}': .npy data type {dtype.str} is not a plain numeric type"
                )
            data = f.read()
    except ModelError:
        raise
    except (OSError, ValueError) as e:
        raise ctx.fail(path, f"cannot read .npy file '{file}': {e}") from None
    data_type = _NPY_TYPES.get((dtype.kind, dtype.itemsize))
    if data_type is None:
        raise ctx.fail(path, f"'{file}': .npy data type '{dtype.str}' has no DML data type")
    if dtype.byteorder == ">" and dtype.itemsize > 1:
        raise ctx.fail(path, f"'{file}': big-endian .npy data ('{dtype.str}') is not supported")
    nbytes = math.prod(shape) * dtype.itemsize  # exact: a hostile header cannot wrap it
    if len(data) < nbytes:
        raise ctx.fail(
            path, f"'{file}': .npy payload is {len(data)} bytes, its header promises {nbytes}"
        )
    return data[:nbytes], data_type


def _file_initializer(
    ctx: _Ctx,
    init: dict,
    data_type: DataType | None,
    dtype_given: bool,
    model_dir: str,
    path: str,
    type_path: str,
) -> tuple[bytes, DataType | None]:
    source = ctx.string(init["sourcePath"], _member(path, "sourcePath"))
    src_path = _member(path, "sourcePath")
    ext = os.path.splitext(source)[1].lower()
    file = _find_file(ctx, source, model_dir, src_path)
    if ext in (".png", ".jpg", ".jpeg"):
        raise ctx.fail(src_path, "image initializers are not supported by dml_jax")
    try:
        ctx.reserve(os.path.getsize(file), src_path)
    except OSError as e:
        raise ctx.fail(src_path, f"cannot read '{file}': {e}") from None
    if ext == ".npy":
        data, npy_type = _read_npy(ctx, file, src_path)
        if dtype_given and data_type != npy_type:
            given = data_type.name if data_type else "UNKNOWN"
            raise ctx.fail(
                type_path, f"{given} does not match the data type of '{source}' ({npy_type.name})"
            )
        return data, npy_type
    if data_type is None:
        raise ctx.fail(type_path, f"is required (not UNKNOWN) for raw file '{source}'")
    try:
        with open(file, "rb") as f:
            return f.read(), data_type
    except OSError as e:
        raise ctx.fail(src_path, f"cannot read '{file}': {e}") from None


def _list_initializer(ctx: _Ctx, items: list, path: str) -> bytes:
    chunks = []
    for i, item in enumerate(items):
        where = _member(path, i)
        item = ctx.object(item, where)
        item_type = _parse_data_type(ctx, ctx.require(item, "type", where), _member(where, "type"))
        if item_type is None or item_type is DataType.FLOAT16:
            raise ctx.fail(
                _member(where, "type"),
                "list elements must have a type other than UNKNOWN and FLOAT16",
            )
        value = convert_scalar(
            ctx, ctx.require(item, "value", where), item_type, _member(where, "value")
        )
        chunks.append(value.tobytes())
    return b"".join(chunks)


def parse_resource(ctx: _Ctx, name: str, obj: Any, model_dir: str) -> Resource:
    """One entry of ``resources`` (a buffer)."""
    path = _member("resources", name)
    obj = ctx.object(obj, path)
    allocated_before = ctx.allocated
    resource_type = obj.get("type", "buffer")
    if resource_type != "buffer":
        raise ctx.fail(
            _member(path, "type"),
            f"only buffer resources are supported, got {json.dumps(resource_type)}",
        )
    type_path = _member(path, "initialValuesDataType")
    dtype_given = "initialValuesDataType" in obj
    data_type = (
        _parse_data_type(ctx, obj["initialValuesDataType"], type_path) if dtype_given else None
    )
    init_path = _member(path, "initialValues")
    init = ctx.require(obj, "initialValues", path)

    def need_type() -> DataType:
        if data_type is None:
            raise ctx.fail(
                type_path,
                "is required (and not UNKNOWN) for this initializer"
                if dtype_given
                else "missing required member (the initializer needs a data type)",
            )
        return data_type

    if isinstance(init, list):
        if data_type is None and all(isinstance(v, dict) for v in init):
            data = _list_initializer(ctx, init, init_path)
        else:
            t = need_type()
            ctx.reserve(len(init) * t.size, init_path)
            values = [convert_scalar(ctx, v, t, _member(init_path, i)) for i, v in enumerate(init)]
            data = np.array(values, dtype=t.numpy_dtype).tobytes()
    elif isinstance(init, dict):
        has_value, has_start = "value" in init, "valueStart" in init
        has_source = "sourcePath" in init
        if has_value and (has_start or has_source):
            raise ctx.fail(
                init_path, "'value' cannot be combined with 'valueStart' or 'sourcePath'"
            )
        if has_value or has_start:
            t = need_type()
            count = ctx.uint(
                ctx.require(init, "valueCount", init_path),
                _member(init_path, "valueCount"),
                minimum=1,
            )
            ctx.reserve(count * t.size, init_path)
            if has_value:
                v = convert_scalar(ctx, init["value"], t, _member(init_path, "value"))
                data = np.full(count, v, dtype=t.numpy_dtype).tobytes()
            else:
                start = convert_scalar(ctx, init["valueStart"], t, _member(init_path, "valueStart"))
                delta = convert_scalar(
                    ctx,
                    ctx.require(init, "valueDelta", init_path),
                    t,
                    _member(init_path, "valueDelta"),
                )
                data = sequence_values(start, delta, count, t).tobytes()
        elif has_source:
            data, data_type = _file_initializer(
                ctx, init, data_type, dtype_given, model_dir, init_path, type_path
            )
        else:
            raise ctx.fail(
                init_path,
                "must hold 'value' (constant), 'valueStart' (sequence) or 'sourcePath' (file)",
            )
    elif init == "deferred":
        raise ctx.fail(init_path, "deferred resources exist only for ONNX dispatchables")
    else:
        raise ctx.fail(init_path, f"must be an array or an object, got {_kind(init)}")
    if not data:
        raise ctx.fail(init_path, "'initialValues' must be non-empty")

    offset = 0
    if "initialValuesOffsetInBytes" in obj:
        offset = ctx.uint(
            obj["initialValuesOffsetInBytes"], _member(path, "initialValuesOffsetInBytes")
        )
    if "sizeInBytes" in obj:
        size = ctx.uint(obj["sizeInBytes"], _member(path, "sizeInBytes"))
        if size < len(data) + offset:
            raise ctx.fail(
                _member(path, "sizeInBytes"),
                f"{size} is smaller than the initial values ({len(data)} bytes"
                + (f" at offset {offset}" if offset else "")
                + ")",
            )
    else:
        size = (len(data) + 3) // 4 * 4
    # The initializer was counted before its data was created; the resource costs its size.
    ctx.allocated = allocated_before
    ctx.reserve(size, _member(path, "sizeInBytes"))
    return Resource(name, data_type, data, size, path)


# ---------------------------------------------------------------------------------------------
# Dispatchables


_OTHER_KINDS = ("hlsl", "onnx", "dmlserializedgraph")
_GRAPH_KINDS = ("DML_GRAPH", "GRAPH")


@dataclass(frozen=True)
class BindPoint:
    """A named group of tensors (a DML tensor field, or a graph's Inputs/Outputs).

    Attributes:
        name: e.g. ``InputTensor``, ``OutputTensors``.
        role: "input" or "output".
        slots: indices into the operator's input (or output) tensors, in order.
        descs: the tensors' descs (None: a graph input that feeds nothing).
    """

    name: str
    role: str
    slots: tuple[int, ...]
    descs: tuple[TensorDesc | None, ...]


@dataclass
class Dispatchable:
    """A compiled DML dispatchable.

    Attributes:
        name, path: its name and JSON path.
        op: the ``CompiledOperator`` (or compiled graph).
        compile_type: "DmlCompileOp" or "DmlCompileGraph".
        bind_points: inputs first, then outputs, in schema order.
        init_bindings: bind point name -> sources bound at initialization (OWNED_BY_DML inputs).
    """

    name: str
    path: str
    op: Any
    compile_type: str
    bind_points: tuple[BindPoint, ...]
    init_bindings: dict = field(default_factory=dict)


def _bind_points(op: Any) -> tuple[BindPoint, ...]:
    """Groups the compiled operator's tensor paths (``OutputTensors[1]``) by field name."""
    points: list[BindPoint] = []
    for role, paths, descs in (
        ("input", op.input_paths, op.input_descs),
        ("output", op.output_paths, op.output_descs),
    ):
        groups: dict[str, list[int]] = {}
        for i, p in enumerate(paths):
            groups.setdefault(p.split("[", 1)[0], []).append(i)
        for name, slots in groups.items():
            points.append(BindPoint(name, role, tuple(slots), tuple(descs[i] for i in slots)))
    return tuple(points)


class _GraphBindPoints:
    """A one-node graph (DmlCompileGraph) keeps its operator's bind point names."""

    def __init__(self, desc: Any, graph_op: Any):
        self.input_paths = tuple(p for p, _ in desc.input_slots())
        self.output_paths = tuple(p for p, _ in desc.output_slots())
        self.input_descs = graph_op.input_descs
        self.output_descs = graph_op.output_descs


def parse_dispatchable(ctx: _Ctx, name: str, obj: Any, feature_level: Any) -> Dispatchable:
    """One entry of ``dispatchables``: validates and compiles the DML operator (or graph).

    ``"type": "DML_GRAPH"`` is a multi-node graph whose bind points are ``Inputs`` and
    ``Outputs``; ``"dmlCompileType": "DmlCompileGraph"`` compiles one operator as a one-node
    graph that keeps the operator's bind points.
    """
    from .compile import compile_operator
    from .graph import compile_graph, graph_from_json
    from .jsonmodel import operator_desc_from_json

    path = _member("dispatchables", name)
    obj = ctx.object(obj, path)
    kind = ctx.string(ctx.require(obj, "type", path), _member(path, "type"))
    if kind.lower() in _OTHER_KINDS:
        raise ctx.fail(
            _member(path, "type"),
            f"'{kind}' dispatchables are not supported by dml_jax (only DML operators and graphs)",
        )
    compile_type = obj.get("dmlCompileType", "DmlCompileOp")
    if compile_type not in ("DmlCompileOp", "DmlCompileGraph"):
        raise ctx.fail(
            _member(path, "dmlCompileType"),
            f'must be "DmlCompileOp" or "DmlCompileGraph", got {json.dumps(compile_type)}',
        )
    try:
        if kind in _GRAPH_KINDS:
            op = compile_graph(graph_from_json(obj), feature_level)
            compile_type, bind_source = "DmlCompileGraph", op
        elif compile_type == "DmlCompileGraph":
            graph = graph_from_json(obj)
            op = compile_graph(graph, feature_level)
            bind_source = _GraphBindPoints(graph.nodes[0], op)
        else:
            op = compile_operator(operator_desc_from_json(obj), feature_level)
            bind_source = op
    except ValidationError as e:
        raise ctx.fail(path, str(e)) from None
    return Dispatchable(name, path, op, compile_type, _bind_points(bind_source))


# ---------------------------------------------------------------------------------------------
# Bindings


@dataclass(frozen=True)
class BoundTensor:
    """One tensor's view of a resource: bytes ``[offset, size)`` read as the tensor's type.

    Attributes:
        resource: the resource name.
        offset: the byte offset (elementOffset x element size).
        length: elements of the view, ``(resource size - offset) // tensor element size``.
        desc: the bind point tensor's desc.
        path: the JSON path of the binding.
    """

    resource: str
    offset: int
    length: int
    desc: TensorDesc
    path: str


def _binding_sources(ctx: _Ctx, value: Any, path: str) -> list[tuple[str, dict, str]]:
    """A binding value -> [(resource name, binding object, path)]."""
    items = value if isinstance(value, list) else [value]
    out = []
    for i, item in enumerate(items):
        where = _member(path, i) if isinstance(value, list) else path
        if isinstance(item, str):
            out.append((item, {}, where))
        elif isinstance(item, dict):
            res = ctx.string(ctx.require(item, "name", where), _member(where, "name"))
            out.append((res, item, where))
        else:
            raise ctx.fail(
                where,
                'must be a resource name, a binding object {"name": ...} or '
                f"an array of those, got {_kind(item)}",
            )
    return out


def resolve_bindings(
    ctx: _Ctx,
    dispatchable: Dispatchable,
    bindings: Any,
    path: str,
    resources: dict[str, Resource],
    *,
    initialization: bool = False,
) -> dict[str, list[BoundTensor]]:
    """Checks a ``bindings`` object against the bind points and DML's buffer binding rules.

    Returns:
        bind point name -> one ``BoundTensor`` per tensor; bind points absent from ``bindings``
        are left out (DxDispatch binds them as "no binding"; names it does not know are
        ignored, as DxDispatch does).
    """
    bindings = ctx.object(bindings, path)
    resolved: dict[str, list[BoundTensor]] = {}
    for point in dispatchable.bind_points:
        if point.name not in bindings:
            continue
        where = _member(path, point.name)
        sources = _binding_sources(ctx, bindings[point.name], where)
        if len(sources) != len(point.slots):
            raise ctx.fail(
                where,
                f"Bind point '{point.name}' requires {len(point.slots)} "
                f"resources, but {len(sources)} were bound.",
            )
        if initialization and point.role != "input":
            raise ctx.fail(
                where, "only input tensors flagged OWNED_BY_DML are bound at initialization"
            )
        tensors = []
        for (res_name, obj, src_path), desc in zip(sources, point.descs):
            name_path = _member(src_path, "name") if obj else src_path
            if res_name not in resources:
                raise ctx.fail(name_path, f"unknown resource '{res_name}'")
            resource = resources[res_name]
            owned = desc is not None and desc.flags is TensorFlags.OWNED_BY_DML
            if owned != initialization and desc is not None:
                raise ctx.fail(
                    src_path,
                    (
                        "this tensor is not flagged OWNED_BY_DML; bind it in the dispatch command"
                        if initialization
                        else "this tensor is flagged OWNED_BY_DML; bind it in the dispatchable's own "
                        "'bindings' (initialization), not in a dispatch command"
                    ),
                )
            tensors.append(_bind_one(ctx, resource, obj, desc, src_path))
        resolved[point.name] = tensors
    return resolved


def _bind_one(
    ctx: _Ctx, resource: Resource, obj: dict, desc: TensorDesc | None, path: str
) -> BoundTensor:
    element_offset = ctx.uint(obj.get("elementOffset", 0), _member(path, "elementOffset"))
    if "elementCount" in obj:  # parsed for HLSL; DML bindings ignore it (as DxDispatch does)
        ctx.uint(obj["elementCount"], _member(path, "elementCount"))
    if "elementSizeInBytes" in obj:
        element_size = ctx.uint(obj["elementSizeInBytes"], _member(path, "elementSizeInBytes"))
    elif resource.data_type is not None:
        element_size = resource.data_type.size
    else:
        element_size = 0
    if element_offset and not element_size:
        raise ctx.fail(
            _member(path, "elementOffset"),
            f"resource '{resource.name}' has no data type; give 'elementSizeInBytes' "
            "to use an element offset",
        )
    offset = element_offset * element_size
    if desc is None:  # a graph input that feeds nothing: nothing is read
        return BoundTensor(resource.name, offset, 0, None, path)
    alignment = max(MINIMUM_BUFFER_TENSOR_ALIGNMENT, desc.guaranteed_base_offset_alignment)
    if offset % alignment:
        raise ctx.fail(
            path,
            f"byte offset {offset} (elementOffset {element_offset} x "
            f"{element_size} bytes) into '{resource.name}' must be a multiple "
            f"of {alignment}",
        )
    available = resource.size_in_bytes - offset
    if available < desc.total_tensor_size_in_bytes:
        raise ctx.fail(
            path,
            (
                f"binding out of range: the tensor needs {desc.total_tensor_size_in_bytes} bytes "
                f"(TotalTensorSizeInBytes) but resource '{resource.name}' has "
                f"{max(available, 0)} bytes from byte offset {offset} "
                f"(sizeInBytes {resource.size_in_bytes})"
            ),
        )
    return BoundTensor(resource.name, offset, available // desc.data_type.size, desc, path)


# ---------------------------------------------------------------------------------------------
# Commands and the model


@dataclass
class DispatchCommand:
    path: str
    dispatchable: str
    bindings: dict[str, list[BoundTensor]]


@dataclass
class PrintCommand:
    path: str
    resource: str
    verbose: bool


@dataclass
class WriteFileCommand:
    path: str
    resource: str
    target: str
    dimensions: tuple[int, ...] | None


@dataclass
class Model:
    """A parsed, checked model: resources, compiled dispatchables, resolved commands."""

    file: str
    resources: dict[str, Resource]
    dispatchables: dict[str, Dispatchable]
    commands: list


def _parse_command(ctx: _Ctx, i: int, obj: Any, model_resources: dict, dispatchables: dict) -> Any:
    path = _member("commands", i)
    obj = ctx.object(obj, path)
    kind = ctx.string(ctx.require(obj, "type", path), _member(path, "type"))

    def resource_member(key: str) -> str:
        name = ctx.string(ctx.require(obj, key, path), _member(path, key))
        if name not in model_resources:
            raise ctx.fail(_member(path, key), f"unknown resource '{name}'")
        return name

    if kind.lower() == "dispatch":
        name = ctx.string(ctx.require(obj, "dispatchable", path), _member(path, "dispatchable"))
        if name not in dispatchables:
            raise ctx.fail(_member(path, "dispatchable"), f"unknown dispatchable '{name}'")
        d = dispatchables[name]
        bindings = resolve_bindings(
            ctx, d, ctx.require(obj, "bindings", path), _member(path, "bindings"), model_resources
        )
        for point in d.bind_points:
            if point.name in bindings or point.name in d.init_bindings:
                continue
            if all(desc is None for desc in point.descs):
                continue
            raise ctx.fail(
                _member(path, "bindings"), f"Nothing bound for required tensor '{point.name}'."
            )
        return DispatchCommand(path, name, bindings)
    if kind.lower() == "print":
        verbose = obj.get("verbose", False)
        if not isinstance(verbose, bool):
            raise ctx.fail(_member(path, "verbose"), f"must be true or false, got {_kind(verbose)}")
        return PrintCommand(path, resource_member("resource"), verbose)
    if kind.lower() == "writefile":
        res = resource_member("resource")
        target = ctx.string(ctx.require(obj, "targetPath", path), _member(path, "targetPath"))
        dims = None
        if "dimensions" in obj:
            dpath = _member(path, "dimensions")
            if not isinstance(obj["dimensions"], list):
                raise ctx.fail(
                    dpath, f"must be an array of integers, got {_kind(obj['dimensions'])}"
                )
            dims = tuple(ctx.uint(v, _member(dpath, k)) for k, v in enumerate(obj["dimensions"]))
        return WriteFileCommand(path, res, target, dims)
    raise ctx.fail(
        _member(path, "type"),
        f"Unrecognized command '{kind}' (expected dispatch, print or writeFile)",
    )


def load_model(
    file: str,
    *,
    feature_level: Any = None,
    text: str | None = None,
    max_memory: int | None = None,
    allow_outside_paths: bool = False,
    overwrite: bool = False,
) -> Model:
    """Reads, checks and compiles a model file.

    Args:
        file: the model path (also used in error messages).
        feature_level: the DML feature level operators are validated at (None: newest).
        text: the JSON text, when already read.
        max_memory: bytes the resources (and each dispatch's tensors next to them) may use;
            checked before anything is allocated. None: no limit.
        allow_outside_paths: let ``sourcePath`` and ``targetPath`` resolve outside the model's
            folder.
        overwrite: let ``writeFile`` replace existing files.

    Raises:
        ModelError: for any problem, naming ``file`` and the JSON path.
    """
    model_dir = os.path.dirname(os.path.abspath(file))
    ctx = _Ctx(file, max_memory, allow_outside_paths, model_dir)
    if text is None:
        try:
            if max_memory is not None and os.path.getsize(file) > max_memory:
                raise ctx.fail(
                    "",
                    f"the model file is {os.path.getsize(file)} bytes, more than "
                    f"the memory budget of {max_memory} bytes (--max-memory)",
                )
            with open(file, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise ctx.fail("", f"cannot read the model: {e}") from None
    root = ctx.object(parse_json_text(text, file), "")
    for key in ("resources", "dispatchables", "commands"):
        ctx.require(root, key, "")

    resources = {}
    for name, obj in ctx.object(root["resources"], "resources").items():
        resources[name] = parse_resource(ctx, name, obj, model_dir)

    dispatchables = {}
    for name, obj in ctx.object(root["dispatchables"], "dispatchables").items():
        d = parse_dispatchable(ctx, name, obj, feature_level)
        path = d.path
        if "bindings" in obj:
            d.init_bindings = resolve_bindings(
                ctx, d, obj["bindings"], _member(path, "bindings"), resources, initialization=True
            )
        for point in d.bind_points:
            owned = [
                desc
                for desc in point.descs
                if desc is not None and desc.flags is TensorFlags.OWNED_BY_DML
            ]
            if owned and point.name not in d.init_bindings:
                raise ctx.fail(
                    _member(path, "bindings"),
                    f"'{point.name}' is flagged OWNED_BY_DML and must be bound here "
                    "(at initialization)",
                )
        dispatchables[name] = d

    commands_json = root["commands"]
    if not isinstance(commands_json, list):
        raise ctx.fail("commands", f"must be a JSON array, got {_kind(commands_json)}")
    commands = [
        _parse_command(ctx, i, c, resources, dispatchables) for i, c in enumerate(commands_json)
    ]
    _check_commands(ctx, commands, dispatchables, overwrite)
    return Model(file, resources, dispatchables, commands)


def _check_commands(ctx: _Ctx, commands: list, dispatchables: dict, overwrite: bool) -> None:
    """Limits checked before anything runs: each dispatch's tensors fit the memory budget
    next to the resources, and writeFile targets stay in the model's folder and overwrite
    nothing (unless allowed)."""
    targets: set[str] = set()
    for command in commands:
        if isinstance(command, DispatchCommand) and ctx.max_memory is not None:
            op = dispatchables[command.dispatchable].op
            tensors = tuple(getattr(op, "input_descs", ())) + tuple(getattr(op, "output_descs", ()))
            # Logical sizes: a broadcast (stride 0) input may be far larger than its buffer.
            working = sum(t.element_count * t.data_type.size for t in tensors if t is not None)
            if ctx.allocated + working > ctx.max_memory:
                raise ctx.fail(
                    command.path,
                    f"the dispatch works on {working} bytes of tensors "
                    f"next to {ctx.allocated} bytes of resources, more "
                    f"than the memory budget of {ctx.max_memory} bytes "
                    "(--max-memory)",
                )
        if isinstance(command, WriteFileCommand):
            where = _member(command.path, "targetPath")
            ctx.inside_model_dir(command.target, where, "targetPath")
            real = os.path.realpath(command.target)
            if os.path.isdir(real):
                raise ctx.fail(where, f"'{command.target}' is a directory")
            if not overwrite and (os.path.lexists(command.target) or real in targets):
                raise ctx.fail(
                    where,
                    f"'{command.target}' already exists or is written by an "
                    "earlier command; it is not overwritten without "
                    "--overwrite",
                )
            targets.add(real)


# ---------------------------------------------------------------------------------------------
# Printing (DxDispatch's console format)


def format_value(value: np.generic, data_type: DataType, *, bytes_as_chars: bool = False) -> str:
    """One element as C++ ``std::ostream << value`` writes it with default settings.

    Floats use 6 significant digits (``%g``): 2.5 -> ``2.5``, 1e6 -> ``1e+06``; FLOAT16 prints
    its float value. INT8/UINT8 print as numbers unless ``bytes_as_chars`` reproduces
    DxDispatch's character output.
    """
    if data_type.is_float:
        v = float(value)
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return f"{v:g}"
    if bytes_as_chars and data_type.size == 1:
        return chr(int(value) & 0xFF)
    return str(int(value))


def format_resource(
    name: str,
    buffer: np.ndarray,
    resource: Resource,
    *,
    verbose: bool = False,
    bytes_as_chars: bool = False,
) -> str:
    """The text of a ``print`` command for a resource's current bytes.

    The element count is the initial values' byte length over the element size (the 4-byte
    padding is not shown); the bytes are read as ``initialValuesDataType``.
    """
    data_type = resource.data_type
    if data_type is None:
        raise ModelError(
            "", resource.path, "cannot print a resource whose initialValuesDataType is UNKNOWN"
        )
    count = len(resource.initial) // data_type.size
    values = np.frombuffer(
        buffer.tobytes()[: count * data_type.size], dtype=data_type.numpy_dtype.newbyteorder("<")
    )
    texts = [format_value(v, data_type, bytes_as_chars=bytes_as_chars) for v in values]
    if not verbose:
        return f"Resource '{name}': " + ", ".join(texts)
    bits = np.frombuffer(values.tobytes(), dtype=f"<u{data_type.size}")
    index_width = math.floor(math.log10(count)) + 1 if count else 1
    hex_width = 2 * data_type.size
    lines = [f"Resource '{name}':"]
    for i, (text, b) in enumerate(zip(texts, bits)):
        lines.append(f"[{i:{index_width}}] {text} (0x{int(b):{hex_width}X})")
    return "\n".join(lines)


def write_file(
    resource: Resource,
    buffer: np.ndarray,
    target: str,
    dimensions: tuple[int, ...] | None,
    *,
    overwrite: bool = True,
) -> None:
    """``writeFile``: .npy with the resource's data type, anything else raw bytes.

    The file is written under a temporary name and renamed into place, so a failed write
    leaves no partial file and an existing file is either kept or replaced whole; with
    ``overwrite=False`` an existing file is an error.
    """
    parent = os.path.dirname(target)
    if parent:
        os.makedirs(parent, exist_ok=True)
    if not overwrite and os.path.lexists(target):
        raise ValueError(f"'{target}' already exists; it is not overwritten without --overwrite")
    ext = os.path.splitext(target)[1].lower()
    if ext in (".png", ".jpg", ".jpeg"):
        raise ValueError("image files are not supported by dml_jax")
    if ext != ".npy":
        _replace_atomically(target, buffer.tobytes())
        return
    if resource.data_type is None:
        raise ValueError("a .npy file needs an initialValuesDataType other than UNKNOWN")
    size = resource.data_type.size
    shape = dimensions if dimensions else (resource.size_in_bytes // size,)
    count = math.prod(shape)
    if count * size > buffer.size:
        raise ValueError(
            f"dimensions {list(shape)} need {count * size} bytes; the buffer has {buffer.size}"
        )
    array = np.frombuffer(
        buffer.tobytes()[: count * size], dtype=resource.data_type.numpy_dtype
    ).reshape(shape)
    stream = io.BytesIO()
    np.save(stream, array, allow_pickle=False)
    _replace_atomically(target, stream.getvalue())


def _replace_atomically(target: str, data: bytes) -> None:
    fd, temporary = tempfile.mkstemp(prefix=".dml-jax-", dir=os.path.dirname(target) or ".")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(temporary, target)
    except BaseException:
        os.unlink(temporary)
        raise


# ---------------------------------------------------------------------------------------------
# Execution


@dataclass
class RunOptions:
    """DxDispatch's timing options plus dml_jax's own.

    Attributes:
        dispatch_iterations: samples per dispatch command (``-i``).
        dispatch_repeat: dispatches per sample; a sample is the time divided by it (``-r``).
        milliseconds_to_run: run samples until this much time passed (``-t``; overrides ``-i``).
        warmup_samples: at most this many leading samples are "cold" (``-w``).
        timing_verbosity: 0, 1 or 2 (``-v``).
        dispatch_interval: minimum milliseconds between samples (``-I``).
        bytes_as_chars: print INT8/UINT8 as characters, as DxDispatch does.
        max_memory: bytes the model may use (``--max-memory``); None: derived from the device
            (``default_memory_budget``); 0: no limit.
        allow_outside_paths: files may be read or written outside the model's folder.
        overwrite: ``writeFile`` may replace existing files.
    """

    dispatch_iterations: int = 1
    dispatch_repeat: int = 1
    milliseconds_to_run: float | None = None
    warmup_samples: int = 1
    timing_verbosity: int = 0
    dispatch_interval: float = 0.0
    bytes_as_chars: bool = False
    max_memory: int | None = None
    allow_outside_paths: bool = False
    overwrite: bool = False


def _view(jnp_bytes: Any, offset: int, length: int, dtype: np.dtype) -> Any:
    """Bytes ``[offset, offset + length * itemsize)`` reinterpreted as ``length`` elements."""
    from jax import lax

    size = dtype.itemsize
    seg = lax.slice(jnp_bytes, (offset,), (offset + length * size,))
    if size == 1:
        return lax.bitcast_convert_type(seg, dtype)
    return lax.bitcast_convert_type(seg.reshape(length, size), dtype)


def _to_bytes(array: Any) -> Any:
    import jax.numpy as jnp
    from jax import lax

    out = lax.bitcast_convert_type(array, jnp.uint8)
    return out.reshape(-1)


def _addressed_mask(desc: TensorDesc, length: int) -> np.ndarray:
    """Which elements of a view the desc addresses (static: derived from sizes and strides)."""
    index = np.zeros((), np.int64)
    for n, s in zip(desc.sizes, desc.layout_strides):
        index = index[..., None] + np.arange(n, dtype=np.int64) * s
    mask = np.zeros(length, bool)
    mask[index.reshape(-1)] = True
    return mask


class _DispatchPlan:
    """One dispatch command compiled into one XLA program over the bound resources' bytes."""

    def __init__(self, model: Model, command: DispatchCommand, device: Any):
        import jax
        import jax.numpy as jnp

        from .buffers import buffer_function

        d = model.dispatchables[command.dispatchable]
        self.name = d.name
        op = d.op
        n_in, n_out = len(op.input_descs), len(op.output_descs)
        inputs: list[BoundTensor | None] = [None] * n_in
        outputs: list[BoundTensor | None] = [None] * n_out
        snapshot: dict[int, BoundTensor] = {}
        for point in d.bind_points:
            bound = command.bindings.get(point.name)
            from_init = bound is None and point.name in d.init_bindings
            if from_init:
                bound = d.init_bindings[point.name]
            if bound is None:
                continue
            for slot, b in zip(point.slots, bound):
                if point.role == "input":
                    inputs[slot] = b
                    if from_init:
                        snapshot[slot] = b
                else:
                    outputs[slot] = b
        # Resources the program reads (inputs, outputs' old contents) and the ones it returns.
        names = []
        for b in inputs + outputs:
            if b is not None and b.resource not in names:
                names.append(b.resource)
        self.resources = tuple(names)
        self.written = tuple(dict.fromkeys(b.resource for b in outputs))
        index = {n: i for i, n in enumerate(names)}
        shared = {n for n in self.written if sum(b.resource == n for b in outputs) > 1}
        masks = {
            j: _addressed_mask(b.desc, b.length)
            for j, b in enumerate(outputs)
            if b.resource in shared
        }
        fn = buffer_function(op)

        def program(*buffers):
            views_in = []
            for i, b in enumerate(inputs):
                if b is None or b.desc is None:
                    # A graph input that feeds nothing: any placeholder will do.
                    views_in.append(jnp.zeros((1,), jnp.uint8))
                else:
                    views_in.append(
                        _view(buffers[index[b.resource]], b.offset, b.length, b.desc.dtype)
                    )
            views_out = [
                _view(buffers[index[b.resource]], b.offset, b.length, b.desc.dtype) for b in outputs
            ]
            results = fn(*views_in, *views_out)
            state = list(buffers)
            for j, (b, new) in enumerate(zip(outputs, results)):
                k = index[b.resource]
                if j in masks:
                    # Several outputs share this resource: write only what this one addresses,
                    # so one output's untouched elements do not undo another's results.
                    old_view = _view(state[k], b.offset, b.length, b.desc.dtype)
                    new = jnp.where(jnp.asarray(masks[j]), new, old_view)
                state[k] = jax.lax.dynamic_update_slice(state[k], _to_bytes(new), (b.offset,))
            return tuple(state[index[n]] for n in self.written)

        shapes = [
            jax.ShapeDtypeStruct(
                (model.resources[n].size_in_bytes,),
                jnp.uint8,
                sharding=jax.sharding.SingleDeviceSharding(device),
            )
            for n in names
        ]
        start = time.perf_counter()
        self.compiled = jax.jit(program).lower(*shapes).compile()
        self.compile_ms = (time.perf_counter() - start) * 1000
        self.snapshot_resources = {inputs[s].resource for s in snapshot}
        self.bytes_moved = sum(
            b.desc.element_count * b.desc.data_type.size
            for b in inputs + outputs
            if b is not None and b.desc is not None
        )


def _stats(samples: Sequence[float]) -> tuple[int, float, float, float, float]:
    ordered = sorted(samples)
    return (
        len(ordered),
        statistics.fmean(ordered),
        ordered[0],
        ordered[len(ordered) // 2],
        ordered[-1],
    )


class Executor:
    """Runs a loaded model on one JAX device, writing DxDispatch-style lines to ``out``."""

    def __init__(
        self,
        model: Model,
        device: Any,
        options: RunOptions | None = None,
        out: Callable[[str], None] = print,
    ):
        self.model = model
        self.device = device
        self.options = options or RunOptions()
        self.out = out
        self.state: dict[str, Any] = {}
        self.plans: list[_DispatchPlan | None] = []

    def run(self) -> None:
        """Uploads resources, compiles every dispatch, runs the commands in order."""
        import jax

        for name, resource in self.model.resources.items():
            self.state[name] = jax.device_put(resource.initial_buffer(), self.device)
        init_ms: dict[str, float] = {}
        for d in self.model.dispatchables.values():
            init_ms[d.name] = 0.0
            if d.compile_type == "DmlCompileOp":
                self.out("Compile Op")
        for command in self.model.commands:
            plan = None
            if isinstance(command, DispatchCommand):
                plan = _compile_plan(self.model, command, self.device)
                init_ms[plan.name] += plan.compile_ms
            self.plans.append(plan)
        # OWNED_BY_DML inputs are captured when the dispatchable is initialized.
        self.init_state = dict(self.state)
        if self.options.timing_verbosity >= 1:
            for name, ms in init_ms.items():
                self.out(f"Initialize '{name}': {ms:.4f} ms")
        for command, plan in zip(self.model.commands, self.plans):
            before = dict(self.state)
            try:
                if isinstance(command, DispatchCommand):
                    self._dispatch(command, plan)
                elif isinstance(command, PrintCommand):
                    self._print(command)
                else:
                    self._write_file(command)
            except (OSError, ValueError, RuntimeError, MemoryError) as e:
                # Nothing is lost: the resources keep their contents from before this command
                # (a failed dispatch may have updated some of them) and earlier files stay.
                self.state = before
                if isinstance(e, ModelError):
                    raise
                raise ModelError(
                    self.model.file, command.path, f"{type(command).__name__[:-7]} failed: {e}"
                ) from None

    def _buffer(self, name: str) -> np.ndarray:
        return np.asarray(self.state[name])

    def _print(self, command: PrintCommand) -> None:
        resource = self.model.resources[command.resource]
        if resource.data_type is None:
            raise ModelError(
                self.model.file,
                command.path,
                f"cannot print '{command.resource}': its initialValuesDataType is UNKNOWN",
            )
        self.out(
            format_resource(
                command.resource,
                self._buffer(command.resource),
                resource,
                verbose=command.verbose,
                bytes_as_chars=self.options.bytes_as_chars,
            )
        )

    def _write_file(self, command: WriteFileCommand) -> None:
        resource = self.model.resources[command.resource]
        write_file(
            resource,
            self._buffer(command.resource),
            command.target,
            command.dimensions,
            overwrite=self.options.overwrite,
        )
        self.out(f"Resource '{command.resource}' written to '{command.target}'")

    def _dispatch(self, command: DispatchCommand, plan: _DispatchPlan) -> None:
        import jax

        opts = self.options
        cpu: list[float] = []
        dev: list[float] = []
        limit = opts.milliseconds_to_run
        iterations = math.inf if limit is not None else opts.dispatch_iterations
        loop_start = time.perf_counter()
        done = 0
        while done < iterations:
            start = time.perf_counter()
            for _ in range(opts.dispatch_repeat):
                args = [
                    self.init_state[n]
                    if n in plan.snapshot_resources and n not in plan.written
                    else self.state[n]
                    for n in plan.resources
                ]
                results = plan.compiled(*args)
                for n, r in zip(plan.written, results):
                    self.state[n] = r
            issued = time.perf_counter()
            # One synchronization per sample: device time covers every repeat.
            jax.block_until_ready([self.state[n] for n in plan.written])
            end = time.perf_counter()
            cpu.append((issued - start) * 1000 / opts.dispatch_repeat)
            dev.append((end - start) * 1000 / opts.dispatch_repeat)
            done += 1
            elapsed_ms = (time.perf_counter() - loop_start) * 1000
            if limit is not None and elapsed_ms >= limit:
                break
            wait = opts.dispatch_interval - (time.perf_counter() - start) * 1000
            if wait > 0:
                time.sleep(wait / 1000)
        self._report(plan, cpu, dev)

    def _report(self, plan: _DispatchPlan, cpu: list[float], dev: list[float]) -> None:
        opts = self.options
        cold = min(max(len(cpu), 1) - 1, opts.warmup_samples)
        hot_cpu, hot_dev = cpu[cold:], dev[cold:]
        dev_median = _stats(hot_dev)[3]
        bandwidth = plan.bytes_moved / (dev_median / 1000) / 1e9 if dev_median > 0 else math.inf
        if opts.timing_verbosity == 0:
            self.out(
                f"Dispatch '{plan.name}': {len(cpu)} iterations, "
                f"{_stats(hot_cpu)[3]:.4f} ms median (CPU), {dev_median:.6f} ms median "
                f"(device), {bandwidth:.4g} GB/s"
            )
        else:
            self.out(f"Dispatch '{plan.name}': {len(cpu)} iterations")
            for label, samples in (
                ("CPU Timings (Cold)   ", cpu[:cold]),
                ("Device Timings (Cold)", dev[:cold]),
                ("CPU Timings (Hot)    ", hot_cpu),
                ("Device Timings (Hot) ", hot_dev),
            ):
                if samples:
                    n, avg, lo, med, hi = _stats(samples)
                    self.out(
                        f"{label} : {n} samples, {avg:.4f} ms average, {lo:.4f} ms min, "
                        f"{med:.4f} ms median, {hi:.4f} ms max"
                    )
            self.out(
                f"Bandwidth (Hot) : {plan.bytes_moved} bytes read + written, "
                f"{bandwidth:.4g} GB/s at the median device time"
            )
        if opts.timing_verbosity >= 2:
            self.out("The timings of each iteration: ")
            for i, (c, g) in enumerate(zip(cpu, dev)):
                self.out(f"iteration {i}: {c:.4f} ms (CPU), {g:.4f} ms (device)")


def _compile_plan(model: Model, command: DispatchCommand, device: Any) -> _DispatchPlan:
    try:
        return _DispatchPlan(model, command, device)
    except ValidationError as e:
        raise ModelError(model.file, command.path, str(e)) from None
    except (RuntimeError, MemoryError) as e:  # XLA refusing to compile or to allocate
        raise ModelError(model.file, command.path, f"Dispatch cannot be compiled: {e}") from None


def select_device(spec: str | None) -> Any:
    """``cpu``, ``gpu``, ``tpu`` (the first such device), an index into ``jax.devices()``, or
    None (JAX's default device)."""
    import jax

    if spec is None:
        return jax.devices()[0]
    if spec.isdigit():
        devices = jax.devices()
        if int(spec) >= len(devices):
            raise ValueError(
                f"device index {spec} is out of range; there are {len(devices)} "
                f"devices: {', '.join(str(d) for d in devices)}"
            )
        return devices[int(spec)]
    if spec.lower() in ("cpu", "gpu", "tpu", "cuda", "rocm"):
        try:
            return jax.devices(spec.lower())[0]
        except RuntimeError as e:
            raise ValueError(f"no {spec} device is available ({e})") from None
    raise ValueError(f"device must be cpu, gpu, tpu or an index, got '{spec}'")


def default_memory_budget(device: Any) -> int:
    """``--max-memory`` by default: 80% of the device's memory limit when JAX reports one
    (GPUs), else half of the machine's physical memory (CPU), else 4 GiB."""
    try:
        stats = device.memory_stats() or {}
    except Exception:  # noqa: BLE001 - backends without memory statistics raise various errors
        stats = {}
    if stats.get("bytes_limit"):
        return int(stats["bytes_limit"] * 0.8)
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    except (AttributeError, ValueError, OSError):
        return 4 << 30


def describe_device(device: Any) -> str:
    """The adapter line's description, e.g. ``cpu (cpu:0)``."""
    kind = getattr(device, "device_kind", device.platform)
    return f"{kind} ({device.platform}:{device.id})"


def run_model(
    file: str,
    *,
    device: str | None = None,
    options: RunOptions | None = None,
    feature_level: Any = None,
    out: Callable[[str], None] = print,
) -> Model:
    """Loads and runs a model file; prints DxDispatch-style output through ``out``.

    Raises:
        ModelError: for any problem in the model or its data.
        ValueError: for a device that does not exist.
    """
    import jax

    dev = select_device(device)
    options = options or RunOptions()
    budget = options.max_memory
    if budget is None:
        budget = default_memory_budget(dev)
    # 64-bit tensors need JAX's x64 mode; it is switched on for this run only.
    x64 = jax.enable_x64(True) if _model_mentions_64bit(file) else _null_context()
    with x64:
        model = load_model(
            file,
            feature_level=feature_level,
            max_memory=budget or None,
            allow_outside_paths=options.allow_outside_paths,
            overwrite=options.overwrite,
        )
        out(f"Running on '{describe_device(dev)}'")
        Executor(model, dev, options, out).run()
    return model


class _null_context:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _model_mentions_64bit(file: str) -> bool:
    """Whether the model text names a 64-bit data type, so its tensors need JAX's x64 mode.

    Decided on the text because x64 must be on before operators are compiled; resources
    typed as 64-bit need nothing (they are bytes until a tensor views them).
    """
    try:
        with open(file, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return False
    return re.search(r"(INT64|FLOAT64)", text) is not None


__all__ = [
    "Executor",
    "Model",
    "ModelError",
    "Resource",
    "RunOptions",
    "default_memory_budget",
    "format_resource",
    "format_value",
    "load_model",
    "parse_json_text",
    "run_model",
    "select_device",
]
