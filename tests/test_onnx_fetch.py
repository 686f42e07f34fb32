"""``run``'s outputs fetched from an accelerator as one packed buffer (``dml_jax.onnx.fetch``):
the packing's views against the program's own outputs, every element type and shape, and a
decoder step's ``run`` with the packing forced on this CPU against its unpacked outputs and
onnxruntime's."""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dml_jax.onnx import fetch

DECODER = os.path.join(os.path.dirname(__file__), "data", "decoders", "tiny_llama_step.onnx")


def test_packed_outputs_are_the_outputs_bit_for_bit():
    """Mixed element sizes in an order that would misalign a naive packing; an empty output, a
    scalar, a None and 4-bit elements among them."""

    def program(params, x, n):
        return (
            (x * params["w"]).astype(jnp.float16),  # 2 bytes, odd count
            n.astype(jnp.int8) - 3,  # 1 byte
            x.sum(),  # a scalar of 4 bytes
            n > 2,  # booleans
            jnp.zeros((0, 3), jnp.float32),
            None,
            jnp.arange(5, dtype=jnp.int32) * n[0],
            (n - 6).astype(jnp.int4),  # elements narrower than a byte, an odd count
            n.astype(jnp.uint4),
            (x * 2).astype(jnp.float4_e2m1fn),
            -x,
        )

    layouts: dict = {}
    packed = jax.jit(lambda params, *xs: fetch.pack(program(params, *xs), xs, layouts))
    params = {"w": jnp.float32(1.5)}
    x = np.linspace(-2, 2, 7, dtype=np.float32)
    for n in (np.array([3, 1, 4], np.int32), np.array([1, 5, 9, 2, 6], np.int32)):
        want = jax.jit(program)(params, x, n)
        got = fetch.host_outputs(packed, layouts, params, [x, n])
        assert len(got) == len(want)
        for g, w in zip(got, want):
            if w is None:
                assert g is None
                continue
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_array_equal(g, np.asarray(w))
    assert len(layouts) == 2  # a trace a signature


def test_packing_is_for_accelerators_with_several_outputs():
    assert not fetch.packs("cpu", 33)
    assert fetch.packs("gpu", fetch.PACKED_MIN_OUTPUTS)
    assert not fetch.packs("gpu", fetch.PACKED_MIN_OUTPUTS - 1)


def test_decoder_run_packed_equals_unpacked_and_onnxruntime(monkeypatch):
    ort = pytest.importorskip("onnxruntime")
    from dml_jax.onnx import InferenceSession

    rng = np.random.default_rng(0)
    feed = {"input_ids": rng.integers(0, 50, (2, 3)), "attention_mask": np.ones((2, 9), np.int64),
            "position_ids": np.broadcast_to(np.arange(6, 9), (2, 3)).copy()}  # fmt: skip
    sess = ort.InferenceSession(DECODER, providers=["CPUExecutionProvider"])
    for i in sess.get_inputs():
        if i.name.startswith("past"):
            feed[i.name] = rng.standard_normal((2, i.shape[1], 6, i.shape[3])).astype(np.float32)
    want = sess.run(None, feed)
    plain = InferenceSession(DECODER).run(None, feed)
    calls = []
    original = fetch.host_outputs

    def spy(*args):
        calls.append(1)
        return original(*args)

    monkeypatch.setattr(fetch, "packs", lambda platform, outputs: True)
    monkeypatch.setattr(fetch, "host_outputs", spy)
    packed = InferenceSession(DECODER).run(None, feed)
    assert calls  # the packed fetch ran
    for p, u, w in zip(packed, plain, want):
        assert p.dtype == u.dtype == w.dtype and p.shape == u.shape == w.shape
        np.testing.assert_array_equal(p, u)
        np.testing.assert_allclose(p, w, rtol=1e-4, atol=1e-5)
