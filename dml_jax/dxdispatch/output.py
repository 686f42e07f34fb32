"""Output: ``print`` in DxDispatch's console format, ``writeFile`` (.npy, image or raw bytes)."""

from __future__ import annotations

import io
import math
import os
import tempfile

import numpy as np

from ..enums import DataType
from . import images
from .context import ModelError
from .resources import Resource


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
    count = resource.printed_bytes // data_type.size
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
    """``writeFile``: .npy with the resource's data type, .png/.jpg as DxDispatch encodes a
    planar [N, C, H, W] tensor (``images.encode_image``), anything else raw bytes.

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
    if images.is_image(target):
        _replace_atomically(
            target, images.encode_image(buffer, resource.data_type, dimensions, ext)
        )
        return
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
