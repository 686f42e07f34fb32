"""ImageDecoder (opset 20): an encoded image (BMP, JPEG, JPEG 2000, PNG, PNM, TIFF, WebP bytes)
as a uint8 [H, W, C] tensor. Decoding is a host codec, not a tensor computation: no DirectML
or XLA operation does it, so the bytes are decoded by Pillow (the ``[image]`` extra), as ONNX's
reference implementation decodes them.

* Bytes known at import (an initializer, a Constant): decoded once at import; the output is a
  constant of the program.
* Bytes computed at run time: the output's height and width depend on the bytes, so they are a
  data-dependent size (``Context.sizes``): the session decodes the bytes before the run to learn
  them (one program per distinct image size), and the program's JAX node decodes them again on
  the host (``jax.pure_callback``; a small cache makes that the same decode).

The channels follow ``pixel_format``: RGB, BGR (RGB reversed) or Grayscale (Pillow's "L"
conversion, ITU-R 601-2 luma, as the reference converts), C = 3, 3 and 1. Images of another
mode (RGBA, palette, grayscale, CMYK) are converted to RGB by Pillow first, so C is always
pixel_format's (the reference keeps the image's own channels, which the schema's shape does not
allow). Bytes Pillow cannot decode are a ``ValidationError`` naming the node; the schema's text
says an empty tensor, which would only move the failure downstream (docs/semantics.md).
"""

from __future__ import annotations

import functools
import io
import re

import jax
import numpy as np

from ...enums import DataType
from ...errors import ValidationError
from . import converter

PIXEL_FORMATS = {"RGB": 3, "BGR": 3, "Grayscale": 1}
PILLOW_MISSING = "ImageDecoder needs Pillow: pip install 'dml_jax[image]'"


def _pillow():
    """``PIL.Image``, or None when Pillow is not installed."""
    try:
        from PIL import Image
    except ImportError:
        return None
    return Image


@functools.lru_cache(maxsize=2)
def _decoded(data: bytes, pixel_format: str) -> np.ndarray:
    """The pixels of ``data`` as [H, W, C] uint8 (read-only: it is cached, so the size probe
    and the run's callback share one decode). Raises whatever Pillow raises on bad bytes."""
    image_module = _pillow()
    with image_module.open(io.BytesIO(data)) as image:
        image.load()  # a truncated stream fails here, not in the callback
        if pixel_format == "Grayscale":
            pixels = np.asarray(image.convert("L"))[:, :, None]
        else:
            pixels = np.asarray(image if image.mode == "RGB" else image.convert("RGB"))
            if pixel_format == "BGR":
                pixels = pixels[:, :, ::-1]
    pixels = np.ascontiguousarray(pixels, dtype=np.uint8)
    pixels.setflags(write=False)
    return pixels


def _undecodable(e: Exception) -> str:
    """What Pillow found wrong with a stream, said of the stream (its messages name the file
    object they read: ``cannot identify image file <_io.BytesIO object at 0x...>``)."""
    if type(e).__name__ == "UnidentifiedImageError":
        return "its format is none Pillow reads"
    text = str(e).splitlines()[0] if str(e) else ""
    return re.sub(r"<[^>]*>", "the stream", text) or "it breaks off or holds bad data"


@converter("ImageDecoder", kind="jax")
def _image_decoder(ctx, node, inputs):
    (encoded,) = inputs
    pixel_format = ctx.attr("pixel_format", "RGB")
    if pixel_format not in PIXEL_FORMATS:
        raise ctx.fail(f"pixel_format must be one of {sorted(PIXEL_FORMATS)}, got {pixel_format!r}")
    if _pillow() is None:
        raise ctx.fail(PILLOW_MISSING)
    where = ctx.where

    def decode(array: np.ndarray) -> np.ndarray:
        try:
            return _decoded(np.asarray(array, np.uint8).tobytes(), pixel_format)
        except Exception as e:  # noqa: BLE001 - Pillow's codecs raise many kinds
            raise ValidationError(
                f"ONNX: {where}: the encoded stream ({np.size(array)} bytes) is not an image "
                f"Pillow can decode: {_undecodable(e)}"
            ) from None

    if encoded.known is not None:
        ctx.note = "decoded at import"
        return [ctx.constant(decode(encoded.known))]
    height, width = ctx.sizes(lambda a: decode(a).shape[:2], [encoded])
    shape = (height, width, PIXEL_FORMATS[pixel_format])

    def fn(a):
        out = jax.ShapeDtypeStruct(shape, np.uint8)
        return (jax.pure_callback(decode, out, a, vmap_method="sequential"),)

    return ctx.jax("ImageDecoder", fn, [encoded], [(shape, DataType.UINT8)])
