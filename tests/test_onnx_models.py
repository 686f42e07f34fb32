"""The whole networks that ship with the ``onnx`` package (``onnx/backend/test/data/light``:
AlexNet, DenseNet-121, Inception v1/v2, ResNet-50, ShuffleNet, SqueezeNet, VGG-19, ZFNet-512)
through ``InferenceSession``, against their expected outputs; their weights are ConstantOfShape
nodes that fold at import. (The package's other model kinds, ``pytorch-converted``,
``pytorch-operator`` and ``simple``, run in ONNX's backend suite, tests/test_onnx_backend.py,
which leaves these out by default.)"""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import numpy_helper

from dml_jax.onnx import InferenceSession

ROOT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")


LIGHT = sorted(glob.glob(os.path.join(ROOT, "light", "*.onnx")))


def _load(path: str) -> np.ndarray:
    return numpy_helper.to_array(onnx.load_tensor(path))


@pytest.mark.parametrize("path", LIGHT, ids=[os.path.basename(p) for p in LIGHT])
def test_light_model(path):
    """One float input of its declared shape; the output beside the model was computed for it."""
    s = InferenceSession(path)
    (info,) = s.get_inputs()
    feed = {info.name: np.random.default_rng(0).standard_normal(info.shape).astype(np.float32)}
    (got,) = s.run(None, feed)
    want = _load(path[:-5] + "_output_0.pb")
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)
