"""ImageDecoder through the session: bytes known at import are decoded at import (no JAX node),
run-time bytes of different sizes through one session (one program per image size), bytes
Pillow cannot decode and a missing Pillow as ``ValidationError``s naming the node.

Expected pixels are the arrays the lossless test images were written from (RGB, BGR: reversed
channels) or ONNX's reference implementation (Grayscale).
"""

from __future__ import annotations

import io
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
Image = pytest.importorskip("PIL.Image")
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from dml_jax.errors import ValidationError
from dml_jax.onnx import InferenceSession


def _png(pixels: np.ndarray, mode: str = "RGB") -> np.ndarray:
    with io.BytesIO() as f:
        Image.fromarray(pixels, mode).save(f, format="PNG")
        return np.frombuffer(f.getvalue(), np.uint8)


def _model(pixel_format: str = "RGB", encoded: np.ndarray | None = None):
    """``y = ImageDecoder(x)``; ``x`` an initializer when ``encoded`` is given, else an input."""
    node = helper.make_node("ImageDecoder", ["x"], ["y"], name="dec", pixel_format=pixel_format)
    inputs = [] if encoded is not None else [helper.make_tensor_value_info("x", 2, ["n"])]
    inits = [] if encoded is None else [numpy_helper.from_array(encoded, "x")]
    y = helper.make_tensor_value_info("y", TensorProto.UINT8, None)
    graph = helper.make_graph([node], "g", inputs, [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def test_known_bytes_are_decoded_at_import(rng):
    # RGBA: the alpha channel is dropped (RGB has 3 channels whatever the image's mode).
    pixels = rng.integers(0, 256, (5, 7, 4), dtype=np.uint8)
    session = InferenceSession(_model("BGR", _png(pixels, "RGBA")).SerializeToString())
    (y,) = session.run(None, {})
    np.testing.assert_array_equal(y, pixels[:, :, 2::-1])
    line = session.explain(shapes=[])
    assert "decoded at import" in line and "jax" not in line and "JAX" not in line


def test_run_time_bytes_of_two_sizes(rng):
    session = InferenceSession(_model().SerializeToString())
    for shape in [(4, 6, 3), (9, 3, 3), (4, 6, 3)]:
        pixels = rng.integers(0, 256, shape, dtype=np.uint8)
        (y,) = session.run(None, {"x": _png(pixels)})
        assert y.dtype == np.uint8
        np.testing.assert_array_equal(y, pixels)
    assert "jax" in session.explain() and "2 programs" in repr(session)  # one per image size
    gray = helper.make_node("ImageDecoder", ["x"], ["y"], pixel_format="Grayscale")
    encoded = _png(rng.integers(0, 256, (3, 5, 3), dtype=np.uint8))
    (want,) = ReferenceEvaluator(gray).run(None, {"x": encoded})
    (y,) = InferenceSession(_model("Grayscale").SerializeToString()).run(None, {"x": encoded})
    assert y.shape == (3, 5, 1)
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("known", [False, True])
@pytest.mark.parametrize("truncated", [False, True])
def test_bytes_that_are_no_image(known, truncated, rng):
    if truncated:
        encoded = _png(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8))
        bad = encoded[: encoded.size // 2]
    else:
        bad = np.frombuffer(b"\x89PNG not really an image", np.uint8)
    with pytest.raises(ValidationError, match=r"'dec', ImageDecoder\).*not an image Pillow"):
        model = _model(encoded=bad if known else None).SerializeToString()
        InferenceSession(model).run(None, {} if known else {"x": bad})


def test_missing_pillow(monkeypatch):
    encoded = _png(np.zeros((2, 2, 3), np.uint8))
    monkeypatch.setitem(sys.modules, "PIL", None)
    monkeypatch.setitem(sys.modules, "PIL.Image", None)
    with pytest.raises(ValidationError, match=r"'dec', ImageDecoder\): ImageDecoder needs Pillow"):
        InferenceSession(_model().SerializeToString()).run(None, {"x": encoded})
