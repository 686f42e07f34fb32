"""A float16 convolution's bias and ReLU on a GPU (the float16 ONNX CNNs): whether XLA hands
them to cuDNN with the convolution or runs them as a pass of their own.

CONVOLUTION's lowering (``ops/gemm_conv.py``) rounds the product to float16, then adds the
bias and applies a fused ReLU in float32 (the ReLU as selects that keep a NaN), then rounds
again; the float16 ResNet-50's profile on an H200 held some 50 ``loop_convert_fusion*`` kernels
beside its cuDNN convolutions (`quantized_models_gpu.py`, 2026-11-30), which such epilogues
would be. For a 3 x 3 convolution and a 1 x 1 one at ResNet-50's sizes (batch 64), forms timed
and their optimized HLO searched for cuDNN's fused ``convBiasActivationForward``:

- ``session``: the ONNX session's own (Conv with bias, then Relu, fused by the import);
- ``f16-epilogue``: ``lax.conv`` in float16, then ``max(y + b, 0)`` in float16 (a rounding
  less than the session's form: the same values whenever the float32 sum rounds as the
  float16 one, which a single addition always does);
- ``f32-epilogue``: the session's arithmetic written out in JAX (float32 sum, ``max``);
- ``conv``: the convolution alone; ``conv-highest``: with ``Precision.HIGHEST``, as the
  session asks for every product (DirectML's float32 rule; for float16 operands it only
  forbids TF32, which they do not use);
- ``f32-select``: ``f32-epilogue`` with the session's NaN-keeping ReLU (selects, not ``max``);
- ``session-conv``: the session with ``conv_forms.GPU_POINTWISE_PRODUCTS`` off (a 1x1
  convolution as XLA's convolution, not a matrix product; the same program at 3 x 3).

With ``--hlo`` each form's optimized HLO is summed up: its fusions by kind and its custom
calls by target (what runs as cuBLAS, cuDNN or a loop of XLA's own).

Each form's output is compared with ``session``'s (the values unlike it, the largest
difference; on the CPU the session's 3 x 3 convolutions are Winograd's, rounded otherwise).

Usage: ``PYTHONPATH=. python3 benchmarks/experiments/conv_epilogue_gpu.py [--batch 64] [--hlo]``.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np


def _model(c: int, k: int, size: int, kernel: int, batch: int, rng) -> tuple[bytes, dict]:
    """Conv (c -> k channels, ``kernel`` square, same padding) with bias, then Relu, float16."""
    from onnx import TensorProto, helper, numpy_helper

    w = (rng.standard_normal((k, c, kernel, kernel)) / np.sqrt(c * kernel * kernel)).astype(
        np.float16
    )
    b = rng.standard_normal(k).astype(np.float16)
    pad = kernel // 2
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[pad] * 4),
             helper.make_node("Relu", ["c"], ["y"])]  # fmt: skip
    f16 = TensorProto.FLOAT16
    graph = helper.make_graph(
        nodes, "conv", [helper.make_tensor_value_info("x", f16, [batch, c, size, size])],
        [helper.make_tensor_value_info("y", f16, [batch, k, size, size])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    return model.SerializeToString(), {"w": w, "b": b, "pad": pad}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--samples", type=int, default=7)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--hlo", action="store_true", help="each form's kernels from its HLO")
    a = p.parse_args()
    import re

    import jax
    import jax.numpy as jnp
    from jax import lax
    from quantize_steps_gpu import microseconds  # this folder's

    from dml_jax.onnx import InferenceSession
    from dml_jax.ops import conv_forms

    print(jax.devices()[0].device_kind, jax.__version__)
    rng = np.random.default_rng(0)
    for c, k, size, kernel in [(64, 64, 56, 3), (256, 64, 56, 1), (128, 128, 28, 3)]:
        data, p_ = _model(c, k, size, kernel, a.batch, rng)
        x = jnp.asarray(rng.standard_normal((a.batch, c, size, size)).astype(np.float16))
        s = InferenceSession(data)
        w, b = jnp.asarray(p_["w"]), jnp.asarray(p_["b"])
        pads = [(p_["pad"], p_["pad"])] * 2

        def conv(x, w, pads=pads):
            return lax.conv_general_dilated(x, w, (1, 1), pads, preferred_element_type=jnp.float16)

        def f16_epilogue(x, w, b, conv=conv):
            return jnp.maximum(conv(x, w) + b[None, :, None, None], 0)

        def f32_epilogue(x, w, b, conv=conv):
            y = conv(x, w).astype(jnp.float32) + b[None, :, None, None].astype(jnp.float32)
            return jnp.maximum(y, 0).astype(jnp.float16)

        def f32_select(x, w, b, conv=conv):
            y = conv(x, w).astype(jnp.float32) + b[None, :, None, None].astype(jnp.float32)
            kept = jnp.where(jnp.isnan(y), y, jnp.zeros_like(y))  # NaN kept, as the session's ReLU
            return jnp.where(y > 0, y, kept).astype(jnp.float16)

        def conv_highest(x, w, pads=pads):
            return lax.conv_general_dilated(x, w, (1, 1), pads, precision=lax.Precision.HIGHEST,
                                            preferred_element_type=jnp.float16)  # fmt: skip

        (program,) = (s.run(None, {"x": np.asarray(x)}), s._programs.values())[1]
        session_args = (s._run_params(program), x)
        conv_forms.GPU_POINTWISE_PRODUCTS = False
        s2 = InferenceSession(data)
        (program2,) = (s2.run(None, {"x": np.asarray(x)}), s2._programs.values())[1]
        forms = {
            "session": (program.jitted_on(jax.devices()[0]), session_args),
            "session-conv": (
                program2.jitted_on(jax.devices()[0]),
                (s2._run_params(program2), x),
            ),
            "f16-epilogue": (jax.jit(f16_epilogue), (x, w, b)),
            "f32-epilogue": (jax.jit(f32_epilogue), (x, w, b)),
            "f32-select": (jax.jit(f32_select), (x, w, b)),
            "conv": (jax.jit(conv), (x, w)),
            "conv-highest": (jax.jit(conv_highest), (x, w)),
        }
        ref = None
        print(f"{c} -> {k}, {size} x {size}, {kernel} x {kernel}, batch {a.batch}:")
        for name, (fn, args) in forms.items():
            # each form traced (at its first call) with the switch as it says
            conv_forms.GPU_POINTWISE_PRODUCTS = name != "session-conv"
            out = fn(*args)
            y = np.asarray(out[0] if isinstance(out, tuple | list) else out).astype(np.float32)
            ref = y if ref is None else ref
            times = microseconds(lambda fn=fn, args=args: fn(*args), a.samples, a.iters)
            text = fn.lower(*args).compile().as_text()
            fused = "convBiasActivationForward" in text
            loops = text.count("kind=kLoop")
            differ = "" if name.startswith("conv") else (
                f", {int((y != ref).sum())} of {ref.size} values unlike the session's (largest "
                f"difference {float(np.abs(y - ref).max()):.3g})")  # fmt: skip
            print(f"  {name}: {statistics.median(times):.1f} us ({min(times):.1f}-"
                  f"{max(times):.1f}), cuDNN bias-activation {fused}, loop fusions "
                  f"{loops}{differ}")  # fmt: skip
            if a.hlo:
                kinds = re.findall(r"kind=(k\w+)", text)
                calls = re.findall(r'custom_call_target="([^"]+)"', text)
                print("    fusions", {k: kinds.count(k) for k in sorted(set(kinds))},
                      "custom calls", {c: calls.count(c) for c in sorted(set(calls))})  # fmt: skip


if __name__ == "__main__":
    main()
