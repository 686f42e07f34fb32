"""onnxruntime's ``OrtValue`` and ``IOBinding`` (``dml_jax.onnx.binding``): the same user code
run on onnxruntime's CPU provider and on ``InferenceSession``, compared: an encoder-style model
with its outputs kept as device arrays, and a decoder's greedy loop with its presents fed back
as pasts through ``get_outputs()`` (Optimum's ``ORTModelForCausalLM`` loop on CUDA)."""

from __future__ import annotations

import os

import jax
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper

import dml_jax.onnx as dox
from dml_jax import ValidationError
from dml_jax.onnx import InferenceSession, IOBinding, OrtValue

DECODER = os.path.join(os.path.dirname(__file__), "data", "decoders", "tiny_llama_step.onnx")


def _mlp(rng) -> bytes:
    """x {batch, 8} float32 -> y = relu(x W + b) {batch, 4}, and the row's argmax (int64)."""
    w = rng.standard_normal((8, 4)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Add", ["h", "b"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"]),
             helper.make_node("ArgMax", ["y"], ["k"], axis=1, keepdims=0)]  # fmt: skip
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4]),
         helper.make_tensor_value_info("k", TensorProto.INT64, ["batch"])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    return model.SerializeToString()


def _bound_run(ortmod, sess, x):
    """The onnxruntime user's code: the input as an OrtValue, both outputs bound to the CPU."""
    binding = sess.io_binding()
    binding.bind_ortvalue_input("x", ortmod.OrtValue.ortvalue_from_numpy(x))
    binding.bind_output("y")
    binding.bind_output("k", "cpu")
    sess.run_with_iobinding(binding)
    values = binding.get_outputs()
    return binding.copy_outputs_to_cpu(), values


def test_ort_value_round_trips():
    x = np.arange(12, dtype=np.int64).reshape(3, 4) - 5
    v = OrtValue.ortvalue_from_numpy(x)
    w = ort.OrtValue.ortvalue_from_numpy(x)
    for got, want in [(v.shape(), w.shape()), (v.data_type(), w.data_type()),
                      (v.element_type(), w.element_type()), (v.device_name(), w.device_name()),
                      (v.is_tensor(), w.is_tensor()), (v.has_value(), w.has_value()),
                      (v.tensor_size_in_bytes(), w.tensor_size_in_bytes())]:  # fmt: skip
        assert got == want
    np.testing.assert_array_equal(v.numpy(), x)
    assert v.numpy().dtype == np.int64  # held in 32 bits, given back in its ONNX type
    z = OrtValue.ortvalue_from_shape_and_type([2, 5], np.float16)
    assert z.numpy().dtype == np.float16 and not z.numpy().any()
    z2 = OrtValue.ortvalue_from_shape_and_type([2], TensorProto.BOOL)
    assert z2.data_type() == "tensor(bool)" and z2.numpy().dtype == np.bool_
    v.update_inplace(x * 2)
    np.testing.assert_array_equal(v.numpy(), x * 2)
    with pytest.raises(ValidationError, match="update_inplace"):
        v.update_inplace(np.zeros((2, 2), np.int64))
    d = OrtValue.ortvalue_from_numpy(np.ones(3))  # float64: a host array without x64
    assert d.numpy().dtype == np.float64 and d.data_type() == "tensor(double)"


def test_ort_values_cross_dlpack_both_ways():
    """DLPack in and out, with onnxruntime's OrtValue, NumPy and JAX, each type kept."""
    for x in (np.arange(6, dtype=np.int64).reshape(2, 3) - 2, np.array([True, False, True]),
              np.linspace(-1, 1, 5, dtype=np.float32), np.arange(4, dtype=np.float16)):  # fmt: skip
        v = OrtValue.from_dlpack(x)
        assert v.numpy().dtype == x.dtype and v.data_type() == ort.OrtValue.ortvalue_from_numpy(
            x).data_type()  # fmt: skip
        np.testing.assert_array_equal(v.numpy(), x)
        np.testing.assert_array_equal(np.from_dlpack(v), x)  # ours out, NumPy in
        try:  # some onnxruntime versions take no DLPack booleans, not even NumPy's
            ort.OrtValue.from_dlpack(x.copy())
        except RuntimeError:
            assert x.dtype == np.bool_, x.dtype
            continue
        theirs = ort.OrtValue.from_dlpack(v)  # ours out, onnxruntime's in
        np.testing.assert_array_equal(theirs.numpy(), x)
        np.testing.assert_array_equal(OrtValue.from_dlpack(theirs).numpy(), x)  # and back
    j = OrtValue.from_dlpack(jax.numpy.arange(3.0))
    assert isinstance(j.jax_array(), jax.Array) and j.data_type() == "tensor(float)"
    with pytest.raises(ValidationError, match="has no __dlpack__"):
        OrtValue.from_dlpack([1, 2, 3])


def test_io_binding_matches_onnxruntime(rng):
    data = _mlp(rng)
    x = rng.standard_normal((5, 8)).astype(np.float32)
    want, _ = _bound_run(ort, ort.InferenceSession(data, providers=["CPUExecutionProvider"]), x)
    s = InferenceSession(data)
    got, values = _bound_run(dox, s, x)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(got[1], want[1])
    assert got[1].dtype == np.int64
    # the outputs stayed device arrays until copied
    assert all(isinstance(v.jax_array(), jax.Array) for v in values)
    assert [v.data_type() for v in values] == ["tensor(float)", "tensor(int64)"]
    # run takes OrtValues in its feed, as onnxruntime's does, and JAX arrays
    again = s.run(None, {"x": OrtValue.ortvalue_from_numpy(x)})
    np.testing.assert_array_equal(again[0], got[0])
    np.testing.assert_array_equal(s.run(None, {"x": jax.numpy.asarray(x)})[1], got[1])
    with pytest.raises(ValidationError, match="must be tensor\\(float\\)"):
        s.run(None, {"x": jax.numpy.asarray(x, jax.numpy.float16)})


def test_run_with_ort_values_and_bound_output_values(rng):
    data = _mlp(rng)
    x = rng.standard_normal((3, 8)).astype(np.float32)
    s = InferenceSession(data)
    want = s.run(None, {"x": x})
    values = s.run_with_ort_values(["k", "y"], {"x": OrtValue.ortvalue_from_numpy(x)})
    np.testing.assert_array_equal(values[0].numpy(), want[1])
    np.testing.assert_array_equal(values[1].numpy(), want[0])
    # an output bound into a given OrtValue: that value holds the result
    binding = s.io_binding()
    assert isinstance(binding, IOBinding)
    target = OrtValue.ortvalue_from_shape_and_type([3, 4], np.float32)
    binding.bind_cpu_input("x", x)
    binding.bind_ortvalue_output("y", target)
    s.run_with_iobinding(binding)
    np.testing.assert_array_equal(target.numpy(), want[0])
    assert binding.get_outputs()[0] is target
    binding.clear_binding_outputs()
    assert binding.get_outputs() == []


def _greedy(ortmod, sess, prompt: np.ndarray, steps: int) -> np.ndarray:
    """Optimum's bound decoder loop: every input an OrtValue, every output bound to the CPU
    device, the presents fed back as the next step's pasts without leaving it."""
    batch, n = prompt.shape
    pasts = [i for i in sess.get_inputs() if i.name.startswith("past")]
    presents = [o.name for o in sess.get_outputs() if o.name.startswith("present")]
    cache = {i.name: ortmod.OrtValue.ortvalue_from_numpy(
        np.zeros((batch, i.shape[1], 0, i.shape[3]), np.float32)) for i in pasts}  # fmt: skip
    ids, mask = prompt.astype(np.int64), np.ones((batch, n), np.int64)
    pos = np.broadcast_to(np.arange(n, dtype=np.int64), (batch, n))
    out = []
    for _ in range(steps):
        binding = sess.io_binding()
        for name, value in [("input_ids", ids), ("attention_mask", mask), ("position_ids", pos)]:
            binding.bind_ortvalue_input(name, ortmod.OrtValue.ortvalue_from_numpy(value))
        for name, value in cache.items():
            binding.bind_ortvalue_input(name, value)
        binding.bind_output("logits")
        for name in presents:
            binding.bind_output(name)
        sess.run_with_iobinding(binding)
        logits, *new = binding.get_outputs()
        ids = logits.numpy()[:, -1].argmax(-1)[:, None].astype(np.int64)
        out.append(ids)
        cache = dict(zip((i.name for i in pasts), new))
        pos = pos[:, -1:] + 1
        mask = np.concatenate([mask, np.ones((batch, 1), np.int64)], 1)
    return np.concatenate(out, 1), [(v.shape(), v.numpy()) for v in cache.values()]


@pytest.mark.parametrize("steps", [12, 20])
def test_bound_decoder_loop_gives_onnxruntime_tokens(steps, found_by):
    """Past 16 positions the loop crosses a bucket (its pasts then padded from 16 to 32)."""
    from dml_jax.onnx import binding

    padded = found_by(binding, "pad_on_device")
    prompt = np.array([[3, 17, 42, 8, 5], [9, 1, 30, 2, 11]])
    sess = ort.InferenceSession(DECODER, providers=["CPUExecutionProvider"])
    want, want_cache = _greedy(ort, sess, prompt, steps)
    s = InferenceSession(DECODER)
    got, cache = _greedy(dox, s, prompt, steps)
    np.testing.assert_array_equal(got, want)
    for (shape, value), (want_shape, want_value) in zip(cache, want_cache):
        assert shape == want_shape  # the presents' own positions, not their bucket's
        np.testing.assert_allclose(value, want_value, rtol=1e-4, atol=1e-5)
    # the presents went back in as device values, padded to their bucket there (but for the
    # prompt's step and a past of exactly a bucket's length): a program a bucket, none a token
    assert padded == [False] + [5 + k != 16 for k in range(steps - 1)]
    assert len(s._programs) <= 4


def test_binding_errors_are_validation_errors(rng):
    s = InferenceSession(_mlp(rng))
    b = s.io_binding()
    with pytest.raises(ValidationError, match="raw device pointer"):
        b.bind_input("x", "cpu", 0, np.float32, [1, 8], 1234)
    with pytest.raises(ValidationError, match="raw device pointer"):
        b.bind_output("y", buffer_ptr=1234)
    with pytest.raises(ValidationError, match="an OrtValue, not ndarray"):
        b.bind_ortvalue_input("x", np.zeros((1, 8), np.float32))
    with pytest.raises(ValidationError, match="device_type 'tpu9'"):
        OrtValue.ortvalue_from_numpy(np.zeros(2, np.float32), "tpu9")
    with pytest.raises(ValidationError, match="device_id 7"):
        OrtValue.ortvalue_from_numpy(np.zeros(2, np.float32), "cpu", 7)
    with pytest.raises(ValidationError, match="no output is bound"):
        s.run_with_iobinding(b)
    with pytest.raises(ValidationError, match="this session's io_binding"):
        InferenceSession(_mlp(rng)).run_with_iobinding(b)
    b.bind_cpu_input("nope", np.zeros((1, 8), np.float32))
    b.bind_output("y")
    with pytest.raises(ValidationError, match="unknown input names"):
        s.run_with_iobinding(b)
    with pytest.raises(ValidationError, match="no ONNX tensor type"):
        OrtValue.ortvalue_from_shape_and_type([2], np.dtype("complex64"))


def test_small_values_held_on_the_host_until_a_device_array_is_asked(rng):
    """A small value feeds runs from the host (no transfer of its own); a large one, or one
    whose device array was asked for, is on the device; both give the same outputs."""
    from dml_jax.onnx import binding

    s = InferenceSession(_mlp(rng))
    small = rng.standard_normal((2, 8)).astype(np.float32)
    large = rng.standard_normal((binding.HOST_HELD_MAX_BYTES // 32 + 1, 8)).astype(np.float32)
    for x, held in [(small, True), (large, False)]:
        v = OrtValue.ortvalue_from_numpy(x)
        assert isinstance(v.feed_value(), np.ndarray) == held
        np.testing.assert_array_equal(v.numpy(), x)
        np.testing.assert_array_equal(s.run(None, {"x": v})[0], s.run(None, {"x": x})[0])
        assert v.data_ptr()  # a device buffer now
        assert isinstance(v.feed_value(), jax.Array) and isinstance(v.jax_array(), jax.Array)
        v.update_inplace(x + 1)  # held again where small
        assert isinstance(v.feed_value(), np.ndarray) == held
        np.testing.assert_array_equal(v.numpy(), x + 1)
    ids = OrtValue.ortvalue_from_numpy(np.array([[1, 2]], np.int64))  # held in 32 bits
    assert ids.feed_value().dtype == np.int64 and ids.jax_array().dtype == np.int32
