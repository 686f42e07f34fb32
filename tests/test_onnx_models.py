"""The whole networks that ship with the ``onnx`` package (``onnx/backend/test/data/light``:
AlexNet, DenseNet-121, Inception v1/v2, ResNet-50, ShuffleNet, SqueezeNet, VGG-19, ZFNet-512)
through ``InferenceSession``, against their expected outputs; their weights are ConstantOfShape
nodes that fold at import, which makes every output a near-uniform softmax that a wrong value
hardly moves, so each also runs with random weights against onnxruntime
(``test_light_model_with_random_weights``: a convolution whose kernels were flipped fails it on
SqueezeNet, ResNet-50 and DenseNet-121, checked by patching the lowering). (The package's other model kinds, ``pytorch-converted``,
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
# With random weights VGG-19 (548 MB of them, 16 s of the suite on two cores) and ZFNet-512 (9 s)
# check nothing AlexNet's same layers do not: they run with DML_JAX_LIGHT_FULL=1.
RANDOMIZED = [
    p
    for p in LIGHT
    if os.environ.get("DML_JAX_LIGHT_FULL") == "1" or not ("vgg19" in p or "zfnet512" in p)
]


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


def _randomized(path: str, seed: int = 0) -> onnx.ModelProto:
    """The light model with random weights in place of its ConstantOfShape fills, and the
    logits before its Softmax as a second output. Each weight's scale follows the op that
    reads it (through Unsqueeze / Reshape): convolution and GEMM weights He-scaled,
    normalization and Mul scales near 1, variances in [0.5, 1.5], biases, shifts and means
    small; so the logits spread and depend on the input (checked by the test)."""
    from onnx import helper

    m = onnx.load(path)
    g = m.graph
    rng = np.random.default_rng(seed)
    inits = {i.name: i for i in g.initializer}
    readers: dict[str, list] = {}
    for n in g.node:
        for k, x in enumerate(n.input):
            readers.setdefault(x, []).append((n, k))
    kept, weights = [], {}
    for n in g.node:
        if n.op_type != "ConstantOfShape" or n.input[0] not in inits:
            kept.append(n)
            continue
        shape = tuple(int(d) for d in numpy_helper.to_array(inits[n.input[0]]))
        user, k = readers.get(n.output[0], [(None, None)])[0]
        while user is not None and k == 0 and user.op_type in ("Unsqueeze", "Reshape", "Identity",
                                                                "Squeeze", "Flatten"):  # fmt: skip
            user, k = readers.get(user.output[0], [(None, None)])[0]
        op = user.op_type if user is not None else ""
        f32 = np.float32  # drawn in float32: VGG-19's 143M weights took 6.7 s in float64
        if op == "Conv" and k == 1:
            v = rng.standard_normal(shape, f32) * f32(np.sqrt(2.0 / np.prod(shape[1:])))
        elif op == "Gemm" and k == 1:
            trans_b = any(a.name == "transB" and a.i for a in user.attribute)
            v = rng.standard_normal(shape, f32) * f32(np.sqrt(2.0 / shape[1 if trans_b else 0]))
        elif (op == "BatchNormalization" and k == 1) or op == "Mul":
            v = f32(0.9) + f32(0.2) * rng.random(shape, f32)
        elif op == "BatchNormalization" and k == 4:
            v = f32(0.5) + rng.random(shape, f32)
        else:
            v = rng.standard_normal(shape, f32) * f32(0.01)
        weights[n.output[0]] = numpy_helper.from_array(v, n.output[0])
    del g.node[:]
    g.node.extend(kept)
    shapes = {i.name for i in g.initializer if i.name.endswith("__SHAPE")}  # the fills' shapes
    rest = [i for i in g.initializer if i.name not in weights and i.name not in shapes]
    del g.initializer[:]
    g.initializer.extend(rest + list(weights.values()))
    inputs = [i for i in g.input if i.name not in shapes]
    del g.input[:]
    g.input.extend(inputs)
    outputs = {o.name for o in g.output}
    for n in g.node:
        if n.op_type == "Softmax" and n.output[0] in outputs:
            g.output.append(helper.make_empty_tensor_value_info(n.input[0]))
    return m


@pytest.mark.parametrize("path", RANDOMIZED, ids=[os.path.basename(p) for p in RANDOMIZED])
def test_light_model_with_random_weights(path):
    """The light models with random weights (``_randomized``) against onnxruntime's CPU
    provider on the same input: the probabilities and the logits before them, to 1e-5 of the
    logits' largest magnitude (observed: at most 2e-6). The reference must be able to tell a
    wrong value: its logits spread (standard deviation over 5% of their largest magnitude)
    and move when the input does (a half-changed input moves them by over 0.1%)."""
    ort = pytest.importorskip("onnxruntime")
    data = _randomized(path).SerializeToString()
    session = InferenceSession(data)
    (info,) = session.get_inputs()
    rng = np.random.default_rng(0)
    x = rng.standard_normal(info.shape).astype(np.float32)
    other = (0.5 * x + 0.5 * rng.standard_normal(x.shape)).astype(np.float32)
    ref = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    want = ref.run(None, {info.name: x})
    logits, moved = want[-1], ref.run(None, {info.name: other})[-1]
    scale = np.abs(logits).max()
    assert logits.std() > 0.05 * scale and np.abs(moved - logits).max() > 1e-3 * scale
    got = session.run(None, {info.name: x})
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-5 * np.abs(w).max())
