"""Buffer resources: initial values from JSON arrays, constants, sequences, lists and files.

Every initializer is sized against the memory budget before its data is created; ``.npy`` files
are read without pickle, their data type taken from the header.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..enums import DataType
from . import images
from .context import LoadContext, ModelError, cannot_allocate, json_kind, member
from .scalars import convert_scalar, parse_data_type, sequence_values


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
    # A "deferred" resource (ONNX outputs): sized by the first dispatch that writes it; the
    # bytes that output holds (what ``print`` shows).
    deferred_bytes: int | None = None

    @property
    def printed_bytes(self) -> int:
        """The bytes ``print`` shows: the initial values', or a deferred output's."""
        return len(self.initial) if self.deferred_bytes is None else self.deferred_bytes

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


def find_file(ctx: LoadContext, source: str, model_dir: str, path: str) -> str:
    """DxDispatch looks next to the model file first, then in the current directory."""
    for candidate in (os.path.join(model_dir, source), source):
        if os.path.isfile(candidate):
            return ctx.inside_model_dir(candidate, path, "file")
    raise ctx.fail(
        path,
        f"file '{source}' not found (looked in '{model_dir or '.'}' and in the current directory)",
    )


def _read_npy(ctx: LoadContext, file: str, path: str) -> tuple[bytes, DataType]:
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


def _resample_size(ctx: LoadContext, obj: dict, path: str) -> tuple[int, ...]:
    """``resampleSize``: absent, empty or four integers (DxDispatch checks it for every file)."""
    where = member(path, "resampleSize")
    value = obj.get("resampleSize", [])
    if not isinstance(value, list):
        raise ctx.fail(where, f"must be an array of integers, got {json_kind(value)}")
    size = tuple(ctx.uint(v, member(where, i)) for i, v in enumerate(value))
    if len(size) not in (0, 4):
        raise ctx.fail(
            where, "must be empty or have four dimensions in N,C,H,W order. N must be 1."
        )
    return size


def _image_initializer(
    ctx: LoadContext, obj: dict, file: str, data_type: DataType | None, path: str, src_path: str
) -> bytes:
    """An image file: decoded, scaled to ``resampleSize`` and stored planar as ``byte / 255``."""
    type_path = member(path, "initialValuesDataType")
    size_path = member(path, "resampleSize")
    mode = obj.get("resampleMode", "scale")
    if mode != "scale":
        raise ctx.fail(
            member(path, "resampleMode"),
            f'must be "scale" for image files, got {json.dumps(mode)}',
        )
    try:
        images.check_data_type(data_type)
    except ValueError as e:
        raise ctx.fail(type_path, str(e)) from None
    if "resampleSize" not in obj or not obj["resampleSize"]:
        raise ctx.fail(path, "an image initializer needs 'resampleSize' [1, C, H, W]")
    try:
        c, h, w = images.read_size(_resample_size(ctx, obj, path))
    except ValueError as e:
        raise ctx.fail(size_path, str(e)) from None
    ctx.reserve(images.image_bytes(c, h, w, data_type), size_path)
    try:
        return images.read_image(file, data_type, c, h, w)
    except (ImportError, ValueError) as e:
        raise ctx.fail(src_path, str(e)) from None


def _file_initializer(
    ctx: LoadContext,
    obj: dict,
    data_type: DataType | None,
    dtype_given: bool,
    model_dir: str,
    path: str,
) -> tuple[bytes, DataType | None]:
    init_path = member(path, "initialValues")
    type_path = member(path, "initialValuesDataType")
    init = obj["initialValues"]
    source = ctx.string(init["sourcePath"], member(init_path, "sourcePath"))
    src_path = member(init_path, "sourcePath")
    ext = os.path.splitext(source)[1].lower()
    _resample_size(ctx, obj, path)
    file = find_file(ctx, source, model_dir, src_path)
    if images.is_image(source):
        return _image_initializer(ctx, obj, file, data_type, path, src_path), data_type
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


def _list_initializer(ctx: LoadContext, items: list, path: str) -> bytes:
    chunks = []
    for i, item in enumerate(items):
        where = member(path, i)
        item = ctx.object(item, where)
        item_type = parse_data_type(ctx, ctx.require(item, "type", where), member(where, "type"))
        if item_type is None or item_type is DataType.FLOAT16:
            raise ctx.fail(
                member(where, "type"),
                "list elements must have a type other than UNKNOWN and FLOAT16",
            )
        value = convert_scalar(
            ctx, ctx.require(item, "value", where), item_type, member(where, "value")
        )
        chunks.append(value.tobytes())
    return b"".join(chunks)


def parse_resource(ctx: LoadContext, name: str, obj: Any, model_dir: str) -> Resource:
    """One entry of ``resources`` (a buffer)."""
    path = member("resources", name)
    obj = ctx.object(obj, path)
    allocated_before = ctx.allocated
    resource_type = obj.get("type", "buffer")
    if resource_type != "buffer":
        raise ctx.fail(
            member(path, "type"),
            f"only buffer resources are supported, got {json.dumps(resource_type)}",
        )
    type_path = member(path, "initialValuesDataType")
    dtype_given = "initialValuesDataType" in obj
    data_type = (
        parse_data_type(ctx, obj["initialValuesDataType"], type_path) if dtype_given else None
    )
    init_path = member(path, "initialValues")
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
            values = [convert_scalar(ctx, v, t, member(init_path, i)) for i, v in enumerate(init)]
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
                member(init_path, "valueCount"),
                minimum=1,
            )
            ctx.reserve(count * t.size, init_path)
            if has_value:
                v = convert_scalar(ctx, init["value"], t, member(init_path, "value"))
            else:
                start = convert_scalar(ctx, init["valueStart"], t, member(init_path, "valueStart"))
                delta = convert_scalar(
                    ctx,
                    ctx.require(init, "valueDelta", init_path),
                    t,
                    member(init_path, "valueDelta"),
                )
            try:  # within the budget, or with none (--max-memory 0), memory may still run out
                if has_value:
                    data = np.full(count, v, dtype=t.numpy_dtype).tobytes()
                else:
                    data = sequence_values(start, delta, count, t).tobytes()
            except (MemoryError, ValueError) as e:
                raise ctx.fail(init_path, cannot_allocate(count * t.size, e)) from None
        elif has_source:
            data, data_type = _file_initializer(ctx, obj, data_type, dtype_given, model_dir, path)
        else:
            raise ctx.fail(
                init_path,
                "must hold 'value' (constant), 'valueStart' (sequence) or 'sourcePath' (file)",
            )
    elif init == "deferred":
        # Sized when an ONNX dispatch binds it as an output (see onnx_dispatch).
        return Resource(name, data_type, b"", 0, path, deferred_bytes=0)
    else:
        raise ctx.fail(init_path, f"must be an array or an object, got {json_kind(init)}")
    if not data:
        raise ctx.fail(init_path, "'initialValues' must be non-empty")

    offset = 0
    if "initialValuesOffsetInBytes" in obj:
        offset = ctx.uint(
            obj["initialValuesOffsetInBytes"], member(path, "initialValuesOffsetInBytes")
        )
    if "sizeInBytes" in obj:
        size = ctx.uint(obj["sizeInBytes"], member(path, "sizeInBytes"))
        if size < len(data) + offset:
            raise ctx.fail(
                member(path, "sizeInBytes"),
                f"{size} is smaller than the initial values ({len(data)} bytes"
                + (f" at offset {offset}" if offset else "")
                + ")",
            )
    else:
        size = (len(data) + 3) // 4 * 4
    # The initializer was counted before its data was created; the resource costs its size.
    ctx.allocated = allocated_before
    ctx.reserve(size, member(path, "sizeInBytes"))
    return Resource(name, data_type, data, size, path)
