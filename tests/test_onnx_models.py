"""The model tests that ship with the ``onnx`` package (``onnx/backend/test/data``: ``light/``,
``pytorch-converted/``, ``pytorch-operator/``, ``simple/``) through ``InferenceSession``, against
their expected outputs. ``light/`` holds whole networks (AlexNet, DenseNet-121, Inception v1/v2,
ResNet-50, ShuffleNet, SqueezeNet, VGG-19, ZFNet-512) whose weights are ConstantOfShape nodes:
they fold at import. A model whose values are maps or strings gets one clear
``ValidationError`` line instead."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest

import dml_jax as dml

onnx = pytest.importorskip("onnx")
from onnx import numpy_helper

from dml_jax.onnx import InferenceSession

ROOT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")


def _cases() -> list[tuple[str, str, list[str] | None, list[str]]]:
    cases = []
    for path in sorted(glob.glob(os.path.join(ROOT, "light", "*.onnx"))):
        cases.append(("light", path, None, [path[:-5] + "_output_0.pb"]))
    for kind in ("pytorch-converted", "pytorch-operator", "simple"):
        for d in sorted(glob.glob(os.path.join(ROOT, kind, "*"))):
            data = os.path.join(d, "test_data_set_0")
            ins = sorted(glob.glob(os.path.join(data, "input_*.pb")))
            outs = sorted(glob.glob(os.path.join(data, "output_*.pb")))
            cases.append((kind, os.path.join(d, "model.onnx"), ins, outs))
    return cases


CASES = _cases() if os.path.isdir(ROOT) else []


def _load(path: str) -> np.ndarray:
    return numpy_helper.to_array(onnx.load_tensor(path))


def _not_runnable(model) -> bool:
    """Whether a value of the model is a map or a string tensor."""
    infos = list(model.graph.input) + list(model.graph.output) + list(model.graph.value_info)
    for info in infos:
        which = info.type.WhichOneof("value")
        if which not in (None, "tensor_type", "sequence_type", "optional_type"):
            return True
        if info.type.tensor_type.elem_type == 8:
            return True
    return False


@pytest.mark.parametrize(
    "kind, path, inputs, outputs",
    CASES,
    ids=[
        f"{c[0]}/{os.path.basename(os.path.dirname(c[1])) if c[2] is not None else os.path.basename(c[1])}"
        for c in CASES
    ],
)
def test_bundled_model(kind, path, inputs, outputs):
    model = onnx.load(path)
    if _not_runnable(model):
        with pytest.raises(dml.ValidationError) as info:
            s = InferenceSession(path)
            s.run(None, {i.name: _load(p) for i, p in zip(s.get_inputs(), inputs or [])})
        assert "\n" not in str(info.value)
        return
    s = InferenceSession(path)
    if inputs is None:  # light: one float input of its declared shape
        (info,) = s.get_inputs()
        feed = {info.name: np.random.default_rng(0).standard_normal(info.shape).astype(np.float32)}
    else:
        feed = {i.name: _load(p) for i, p in zip(s.get_inputs(), inputs)}
    got = s.run(None, feed)
    wants = [_load(p) for p in outputs]
    assert len(got) == len(wants)
    for g, w in zip(got, wants):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-4)
        else:
            np.testing.assert_array_equal(g, w)
