"""A LLaMA causal LM written as ONNX Runtime GenAI's model builder writes it: one decode step in
com.microsoft operators, from the weights of a ``transformers`` model (``decoders.build``).

The graph per layer: SimplifiedLayerNormalization (the first layer) or
SkipSimplifiedLayerNormalization (the residual addition joined to the next norm), the q, k and v
MatMuls, GroupQueryAttention over the layer's past with rotary embeddings from cos / sin caches
(``do_rotary``, the halves rotated as Hugging Face's LLaMA rotates them), ``seqlens_k`` (the
attention mask's sum less one) and ``total_sequence_length`` (the mask's length), the o MatMul,
and the MLP as gate and up MatMuls, SiLU as Sigmoid times the gate, their product and the down
MatMul; then the final norm and the head. Inputs ``input_ids`` [batch, sequence],
``attention_mask`` [batch, total] and ``past_key_values.N.key`` / ``.value`` [batch, kv heads,
past, head size]; outputs ``logits`` and ``present.N.key`` / ``.value``: the names the builder
writes, which ``Generator`` reads as a GroupQueryAttention step (``roles.kind`` "gqa").
``decoders.quantize_int4`` turns its MatMuls into MatMulNBits, the builder's int4 form.

Needs torch, transformers and onnx. ``python -m dml_jax.bench.model_builder OUT_DIR`` writes the
tiny model the tests run (``decoders.CONFIGS["tiny_llama_h16"]``, float32) and its prompt and
PyTorch's greedy tokens (OUT_DIR/builder_greedy.json; tests/data/decoders/ was written so
on a CPU machine with torch 2.14.1, transformers 5.24 and onnx 1.23.2).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import numpy as np

MS = "com.microsoft"


def sequence_lengths() -> tuple[list, list]:
    """(initializers, nodes) computing GroupQueryAttention's ``seqlens_k`` (each entry's
    ``attention_mask`` sum less one, INT32) and ``total_sequence_length`` (the mask's length,
    INT32) from ``attention_mask``, as the builder writes them."""
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(np.array([1], np.int64), "axis_1"),
             numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.array(1, np.int64), "index_1")]  # fmt: skip
    nodes = [
        helper.make_node("ReduceSum", ["attention_mask", "axis_1"], ["mask_sum"], keepdims=0),
        helper.make_node("Sub", ["mask_sum", "one"], ["seqlens_k_64"]),
        helper.make_node("Cast", ["seqlens_k_64"], ["seqlens_k"], to=TensorProto.INT32),
        helper.make_node("Shape", ["attention_mask"], ["mask_shape"]),
        helper.make_node("Gather", ["mask_shape", "index_1"], ["total_64"]),
        helper.make_node("Cast", ["total_64"], ["total_sequence_length"], to=TensorProto.INT32),
    ]
    return inits, nodes


def export(model: Any, path: str, dtype: Any = np.float16) -> None:
    """Writes ``model`` (a ``LlamaForCausalLM``) as a model-builder decode step to ``path``, its
    weights in ``dtype`` (float16 or float32); weights over 2 GB go to an external data file
    beside it."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    c = model.config
    layers, heads = c.num_hidden_layers, c.num_attention_heads
    kv_heads = c.num_key_value_heads or heads
    head = c.hidden_size // heads
    eps = float(c.rms_norm_eps)
    state = {k: v.detach().float().cpu().numpy() for k, v in model.state_dict().items()}
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    inits: list = []
    nodes: list = []

    def weight(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(value.astype(dtype)), name))
        return name

    def linear(x: str, key: str, out: str) -> str:  # a Linear's weight [out, in] as B [in, out]
        nodes.append(helper.make_node("MatMul", [x, weight(key, state[key].T)], [out], name=out))
        return out

    # the rotary caches: angle p * inv_freq for each position and pair of the head's values
    inv_freq = model.model.rotary_emb.inv_freq.detach().float().cpu().numpy()
    scaling = float(getattr(model.model.rotary_emb, "attention_scaling", 1.0))
    angles = np.arange(c.max_position_embeddings)[:, None] * inv_freq[None, :]
    cos = weight("cos_cache", np.cos(angles) * scaling)
    sin = weight("sin_cache", np.sin(angles) * scaling)
    lengths_inits, lengths_nodes = sequence_lengths()
    inits += lengths_inits
    nodes += lengths_nodes
    nodes.append(helper.make_node(
        "Gather", [weight("embed_tokens", state["model.embed_tokens.weight"]), "input_ids"],
        ["embedded"],
    ))  # fmt: skip

    def norm(x: str, skip: str | None, key: str, out: str) -> tuple[str, str]:
        """(normalized, the residual sum after it)."""
        gamma = weight(key, state[key])
        if skip is None:
            nodes.append(helper.make_node("SimplifiedLayerNormalization", [x, gamma], [out],
                                          axis=-1, epsilon=eps, name=out))  # fmt: skip
            return out, x
        total = f"{out}_residual"
        nodes.append(helper.make_node("SkipSimplifiedLayerNormalization", [x, skip, gamma],
                                      [out, "", "", total], domain=MS, epsilon=eps, name=out))  # fmt: skip
        return out, total

    x, residual = "embedded", None
    for i in range(layers):
        p = f"model.layers.{i}"
        h, residual = norm(x, residual, f"{p}.input_layernorm.weight", f"l{i}_norm1")
        q, k, v = (linear(h, f"{p}.self_attn.{n}_proj.weight", f"l{i}_{n}") for n in "qkv")
        nodes.append(helper.make_node(
            "GroupQueryAttention",
            [q, k, v, f"past_key_values.{i}.key", f"past_key_values.{i}.value", "seqlens_k",
             "total_sequence_length", cos, sin],
            [f"l{i}_attention", f"present.{i}.key", f"present.{i}.value"],
            domain=MS, num_heads=heads, kv_num_heads=kv_heads, do_rotary=1,
            rotary_interleaved=0, name=f"l{i}_gqa",
        ))  # fmt: skip
        o = linear(f"l{i}_attention", f"{p}.self_attn.o_proj.weight", f"l{i}_o")
        h, residual = norm(o, residual, f"{p}.post_attention_layernorm.weight", f"l{i}_norm2")
        gate = linear(h, f"{p}.mlp.gate_proj.weight", f"l{i}_gate")
        up = linear(h, f"{p}.mlp.up_proj.weight", f"l{i}_up")
        nodes += [helper.make_node("Sigmoid", [gate], [f"l{i}_sigmoid"]),
                  helper.make_node("Mul", [gate, f"l{i}_sigmoid"], [f"l{i}_silu"]),
                  helper.make_node("Mul", [f"l{i}_silu", up], [f"l{i}_gated"])]  # fmt: skip
        x = linear(f"l{i}_gated", f"{p}.mlp.down_proj.weight", f"l{i}_down")
    h, _ = norm(x, residual, "model.norm.weight", "final_norm")
    head_key = "lm_head.weight" if "lm_head.weight" in state else "model.embed_tokens.weight"
    nodes.append(helper.make_node("MatMul", [h, weight("lm_head", state[head_key].T)], ["logits"],
                                  name="lm_head"))  # fmt: skip

    cache = ["batch", kv_heads, "past_sequence", head]
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"]),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64,
                                            ["batch", "total_sequence"])]  # fmt: skip
    outputs = [helper.make_tensor_value_info("logits", elem, ["batch", "sequence", c.vocab_size])]
    for i in range(layers):
        for kind in ("key", "value"):
            inputs.append(helper.make_tensor_value_info(f"past_key_values.{i}.{kind}", elem, cache))
            outputs.append(helper.make_tensor_value_info(
                f"present.{i}.{kind}", elem, ["batch", kv_heads, "total_sequence", head]))  # fmt: skip
    graph = helper.make_graph(nodes, "model_builder_step", inputs, outputs, inits)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)]
    onnx_model = helper.make_model(graph, opset_imports=opsets, ir_version=8)
    big = sum(len(t.raw_data) for t in inits) > 2**31 - 2**26
    onnx.save(onnx_model, path, save_as_external_data=big)


TINY = "tiny_llama_h16"


def main(argv: list[str] | None = None) -> int:
    """Writes the tiny model-builder step and its greedy tokens."""
    from . import decoders

    out_dir = (argv or sys.argv[1:])[0]
    os.makedirs(out_dir, exist_ok=True)
    model = decoders.build(TINY)
    prompt = np.random.default_rng(1).integers(1, model.config.vocab_size, size=(2, 5))
    export(model, os.path.join(out_dir, f"{TINY}_builder_step.onnx"), np.float32)
    greedy = decoders.greedy(model, prompt, 24).tolist()
    with open(os.path.join(out_dir, "builder_greedy.json"), "w") as f:
        json.dump({f"{TINY}_builder": {"prompt": prompt.tolist(), "greedy": greedy}}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
