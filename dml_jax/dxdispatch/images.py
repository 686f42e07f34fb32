"""Image files as DxDispatch reads and writes them: ``.jpg`` and ``.png`` (Pillow, [image]).

DxDispatch (``ImageReaderWriter.cpp``, WIC) defines both directions:

* Reading (an initializer ``{"sourcePath": "x.jpg"}`` with ``resampleSize`` [1, C, H, W]): the
  image is converted to 8-bit RGB (C = 3) or RGBA (C = 4), scaled to W x H with high-quality
  bicubic filtering when its size differs, and stored planar (NCHW: every R, then every G, ...),
  each value ``byte / 255`` as FLOAT32 or FLOAT16 (no other data type).
* Writing (``writeFile`` to x.png or x.jpg, ``dimensions`` [N, C, H, W]): C = 1 (gray), 3 (RGB)
  or 4 (RGBA) planar FLOAT32/FLOAT16 values from the start of the buffer, each clamped to [0, 1]
  (NaN counts as 1, as C++'s ``std::max(0, std::min(1, v))`` gives), times 255, truncated to a
  byte.

Only these two extensions (any case) are images; ``.jpeg`` is raw bytes, as in DxDispatch.
Decoding differs from WIC's in the last bit at most for JPEG (another IDCT), and the scaler is
Pillow's bicubic (its kernel widens with the scale factor, as WIC's high-quality cubic does), so
resampled values are close to DxDispatch's, not bit-exact; unscaled PNG pixels are exact.
"""

from __future__ import annotations

import io
import math
import os
from typing import Any

import numpy as np

from ..enums import DataType

IMAGE_EXTENSIONS = (".jpg", ".png")
IMAGE_DATA_TYPES = (DataType.FLOAT32, DataType.FLOAT16)
_READ_MODES = {3: "RGB", 4: "RGBA"}
_WRITE_MODES = {1: "L", 3: "RGB", 4: "RGBA"}
PILLOW_MISSING = "image files need Pillow: pip install 'dml-jax[image]'"


def is_image(path: str) -> bool:
    """Whether DxDispatch treats ``path`` as an image (by its extension, in any case)."""
    return os.path.splitext(path)[1].lower() in IMAGE_EXTENSIONS


def pillow() -> Any:
    """The ``PIL.Image`` module.

    Raises:
        ImportError: with the one-line install hint when Pillow is missing.
    """
    try:
        from PIL import Image
    except ImportError:
        raise ImportError(PILLOW_MISSING) from None
    return Image


def check_data_type(data_type: DataType | None) -> DataType:
    """FLOAT32 or FLOAT16, the only types DxDispatch converts pixels to and from."""
    if data_type not in IMAGE_DATA_TYPES:
        name = data_type.name if data_type is not None else "UNKNOWN"
        raise ValueError(f"image files need FLOAT32 or FLOAT16 values, not {name}")
    return data_type


def read_size(resample_size: tuple[int, ...]) -> tuple[int, int, int]:
    """``resampleSize`` [1, C, H, W] -> (C, H, W), checked."""
    if len(resample_size) != 4:
        raise ValueError(
            f"must have four dimensions in N,C,H,W order for an image, got {list(resample_size)}"
        )
    n, c, h, w = resample_size
    if n != 1:
        raise ValueError(f"N must be 1, got {n}")
    if c not in _READ_MODES:
        raise ValueError(f"C must be 3 (RGB) or 4 (RGBA) for an image initializer, got {c}")
    if h < 1 or w < 1:
        raise ValueError(f"H and W must be >= 1, got {h} x {w}")
    return c, h, w


def write_size(dimensions: tuple[int, ...] | None) -> tuple[int, int, int]:
    """``dimensions`` -> (C, H, W) as DxDispatch reads them: [N, C, H, W], missing ones are 1."""
    dims = tuple(dimensions or ())
    c, h, w = (dims[i] if len(dims) > i else 1 for i in (1, 2, 3))
    if c not in _WRITE_MODES:
        raise ValueError(f"Unsupported channel count {c} for image file (1, 3 or 4)")
    if h < 1 or w < 1:
        raise ValueError(f"image height and width must be >= 1, got {h} x {w}")
    return c, h, w


def _byte_to_half_table() -> np.ndarray:
    """byte / 255 in float32, converted to FLOAT16 the way DxDispatch's half library does."""
    from .scalars import float_to_half_truncated

    fractions = np.arange(256, dtype=np.float32) / np.float32(255)
    return np.array([float_to_half_truncated(v) for v in fractions], np.float16)


def _open_rgb(image: Any, mode: str) -> Any:
    """The decoded image as 8-bit ``mode``; 16-bit gray keeps its high byte (as WIC converts)."""
    if image.mode in ("I;16", "I;16L", "I;16B", "I;16N", "I"):
        high = (np.asarray(image, dtype=np.uint32) >> (8 if image.mode != "I" else 0)).clip(0, 255)
        image = pillow().fromarray(high.astype(np.uint8), "L")
    return image.convert(mode)


def _resize(image: Any, width: int, height: int) -> Any:
    Image = pillow()
    bicubic = Image.Resampling.BICUBIC
    # Each channel on its own: Pillow would premultiply RGBA by alpha, WIC scales the values.
    bands = [band.resize((width, height), bicubic) for band in image.split()]
    return Image.merge(image.mode, bands)


def read_image(file: str, data_type: DataType, channels: int, height: int, width: int) -> bytes:
    """An image file as DxDispatch's initial bytes: planar C x H x W values ``byte / 255``.

    Raises:
        ImportError: without Pillow.
        ValueError: an unsupported data type, or a file Pillow cannot decode.
    """
    Image = pillow()
    check_data_type(data_type)
    try:
        with Image.open(file) as image:
            image.load()
            rgb = _open_rgb(image, _READ_MODES[channels])
    except (OSError, SyntaxError, Image.DecompressionBombError) as e:
        raise ValueError(f"cannot decode image '{file}': {e}") from None
    if rgb.size != (width, height):
        rgb = _resize(rgb, width, height)
    planar = np.asarray(rgb, np.uint8).reshape(height, width, channels).transpose(2, 0, 1)
    if data_type is DataType.FLOAT16:
        return _byte_to_half_table()[planar].tobytes()
    return (planar.astype(np.float32) / np.float32(255)).tobytes()


def encode_image(
    buffer: np.ndarray, data_type: DataType | None, dimensions: tuple[int, ...] | None, ext: str
) -> bytes:
    """The bytes of a .png or .jpg file holding a resource's planar values, as DxDispatch writes.

    Args:
        buffer: the resource's bytes (uint8); values are read from byte 0.
        data_type: the resource's ``initialValuesDataType`` (FLOAT32 or FLOAT16).
        dimensions: the command's ``dimensions`` ([N, C, H, W]; missing ones are 1).
        ext: ".png" or ".jpg" (any case).

    Raises:
        ImportError: without Pillow.
        ValueError: another data type or channel count, or a buffer too small for C x H x W.
    """
    Image = pillow()
    t = check_data_type(data_type)
    c, h, w = write_size(dimensions)
    need = c * h * w * t.size
    if need > buffer.size:
        raise ValueError(
            f"dimensions C x H x W = {c} x {h} x {w} need {need} bytes; the buffer has "
            f"{buffer.size}"
        )
    values = np.frombuffer(buffer.tobytes()[:need], t.numpy_dtype.newbyteorder("<"))
    values = values.astype(np.float32)
    clamped = np.where(np.isnan(values), np.float32(1), np.clip(values, 0, 1))
    pixels = (clamped * np.float32(255)).astype(np.uint8)  # truncation, as the C++ cast
    hwc = pixels.reshape(c, h, w).transpose(1, 2, 0)
    image = Image.fromarray(hwc[:, :, 0] if c == 1 else hwc, _WRITE_MODES[c])
    stream = io.BytesIO()
    if ext.lower() == ".jpg":
        # JPEG holds no alpha: an RGBA tensor is written as its RGB channels.
        image = image.convert("RGB") if c == 4 else image
        image.save(stream, format="JPEG", quality=90)
    else:
        image.save(stream, format="PNG")
    return stream.getvalue()


def image_bytes(channels: int, height: int, width: int, data_type: DataType) -> int:
    """Bytes of a planar image tensor."""
    return math.prod((channels, height, width)) * data_type.size
