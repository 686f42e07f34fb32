"""Decoder models exported from PyTorch as one decode step with its key / value cache, the way an
onnxruntime user exports a Hugging Face decoder for a generation loop.

Each model is a ``transformers`` causal LM with random weights (no downloads). ``export`` writes
one step: inputs ``input_ids`` [batch, sequence], ``attention_mask`` [batch, past + sequence],
``position_ids`` [batch, sequence] (``positions=False``: none; the model then numbers the new
tokens from the past's length) and ``past_key_values.N.key`` / ``.value`` [batch, kv heads,
past, head size] per layer; outputs ``logits`` [batch, sequence, vocabulary] and
``present.N.key`` / ``.value`` [batch, kv heads, past + sequence, head size]: the names of Hugging
Face Optimum's decoder exports. The exporter is PyTorch's TorchScript exporter (opset 17, every
batch and length axis dynamic). ``greedy`` is PyTorch's own greedy loop with its own cache, the
reference a generation loop is checked against.

Needs torch and transformers. ``python -m dml_jax.bench.decoders OUT_DIR`` writes the tiny models
the tests run (``TINY``) with their PyTorch greedy tokens; tests/data/decoders/ was written so on
the GPU machine with torch 2.11.0, transformers 5.17.0 and onnx 1.23.1.
"""

from __future__ import annotations

import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

# name -> (family, config). The tiny ones are what tests/data/onnx holds; the others the sizes
# the decode suite times (GPT-2 small; an 8-layer LLaMA-style model with grouped-query
# attention; a 1B-class LLaMA configuration: 16 layers, d_model 2048).
CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    "tiny_gpt2": (
        "gpt2",
        dict(n_embd=32, n_layer=2, n_head=2, vocab_size=97, n_positions=128, initializer_range=0.2),
    ),
    "tiny_llama": (
        "llama",
        dict(
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=64,
            vocab_size=97,
            max_position_embeddings=256,
            initializer_range=0.2,
        ),
    ),
    # ONNX Runtime's GroupQueryAttention wants head sizes that are multiples of 16: the tiny
    # model-builder step (``model_builder.main``) has heads of 16
    "tiny_llama_h16": (
        "llama",
        dict(
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=96,
            vocab_size=97,
            max_position_embeddings=64,
            initializer_range=0.2,
        ),
    ),
    "gpt2": ("gpt2", dict(n_embd=768, n_layer=12, n_head=12, vocab_size=50257, n_positions=2048)),
    "llama_8l": (
        "llama",
        dict(
            hidden_size=1024,
            num_hidden_layers=8,
            num_attention_heads=16,
            num_key_value_heads=4,
            intermediate_size=2816,
            vocab_size=32000,
            max_position_embeddings=4096,
        ),
    ),
    "llama_1b": (
        "llama",
        dict(
            hidden_size=2048,
            num_hidden_layers=16,
            num_attention_heads=32,
            num_key_value_heads=8,
            intermediate_size=8192,
            vocab_size=128256,
            max_position_embeddings=4096,
            tie_word_embeddings=True,
        ),
    ),
}
TINY = ("tiny_gpt2", "tiny_llama")


def build(name: str, seed: int = 0) -> Any:
    """The causal LM ``name`` of ``CONFIGS`` in eval mode with random weights (seed ``seed``),
    eager attention (the form every exporter takes)."""
    import torch
    import transformers

    family, cfg = CONFIGS[name]
    torch.manual_seed(seed)
    if family == "gpt2":
        config = transformers.GPT2Config(**cfg)
        model = transformers.GPT2LMHeadModel(config)
    else:
        config = transformers.LlamaConfig(**cfg)
        model = transformers.LlamaForCausalLM(config)
    config._attn_implementation = "eager"
    return model.eval()


def layer_count(model: Any) -> int:
    c = model.config
    return int(getattr(c, "n_layer", None) or c.num_hidden_layers)


def cache_shapes(model: Any, batch: int, past: int) -> list[tuple[int, int, int, int]]:
    """Each past input's shape in order (layer by layer, key then value): [batch, kv heads,
    past, head size], read from the cache the model itself writes for one token (Falcon's and
    GPTBigCode's single key-value head, Gemma's head size, without a rule per family)."""
    import torch

    device = next(model.parameters()).device
    with torch.no_grad():
        out = model(input_ids=torch.ones(1, 1, dtype=torch.long, device=device), use_cache=True)
    return [(batch, t.shape[1], past, t.shape[-1])
            for t in _flat_cache(out.past_key_values, layer_count(model))]  # fmt: skip


def _cache_of(torch: Any, layers: int, past: list) -> Any:
    from transformers import DynamicCache

    cache = DynamicCache()
    for i in range(layers):
        cache.update(past[2 * i], past[2 * i + 1], i)
    return cache


def _flat_cache(cache: Any, layers: int) -> list:
    out = []
    for i in range(layers):
        if isinstance(cache, (tuple, list)):  # the legacy form: a (key, value) pair a layer
            out += list(cache[i][:2])
        elif hasattr(cache, "layers"):
            out += [cache.layers[i].keys, cache.layers[i].values]
        else:
            out += [cache.key_cache[i], cache.value_cache[i]]
    return out


def step(model: Any, positions: bool = True) -> Any:
    """``model`` as a module of flat tensors: (input_ids, attention_mask, [position_ids,]
    past key, past value, ...) -> (logits, present key, present value, ...)."""
    import torch

    layers = layer_count(model)

    class Step(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, *rest):
            position_ids = rest[0] if positions else None
            past = list(rest[1:] if positions else rest)
            extra = {"position_ids": position_ids} if positions else {}  # (BLOOM takes none)
            out = self.model(input_ids=input_ids, attention_mask=attention_mask,
                             past_key_values=_cache_of(torch, layers, past), use_cache=True,
                             **extra)  # fmt: skip
            return (out.logits, *_flat_cache(out.past_key_values, layers))

    return Step().eval()


def names(layers: int, positions: bool = True) -> tuple[list[str], list[str]]:
    """The step's input and output names."""
    inputs = ["input_ids", "attention_mask"] + (["position_ids"] if positions else [])
    outputs = ["logits"]
    for i in range(layers):
        inputs += [f"past_key_values.{i}.key", f"past_key_values.{i}.value"]
        outputs += [f"present.{i}.key", f"present.{i}.value"]
    return inputs, outputs


def export(
    model: Any,
    path: str,
    positions: bool = True,
    device: str = "cpu",
    exporter: str = "torchscript",
) -> None:
    """Writes ``model``'s decode step to ``path`` (TorchScript exporter, opset 17; weights over
    2 GB in an external data file beside it). ``exporter="dynamo"``: PyTorch's ``torch.export``
    based exporter instead (``dynamo=True``, its default opset; the input axes dynamic)."""
    import torch

    layers = layer_count(model)
    module = step(model, positions)
    batch, past, seq = 2, 3, 2
    dtype = next(model.parameters()).dtype
    args = [torch.ones(batch, seq, dtype=torch.long, device=device),
            torch.ones(batch, past + seq, dtype=torch.long, device=device)]  # fmt: skip
    if positions:
        args.append(torch.arange(past, past + seq, device=device).expand(batch, seq).contiguous())
    args += [torch.randn(s, dtype=dtype, device=device) for s in cache_shapes(model, batch, past)]
    inputs, outputs = names(layers, positions)
    axes = {"input_ids": {0: "batch", 1: "sequence"},
            "attention_mask": {0: "batch", 1: "total_sequence"},
            "position_ids": {0: "batch", 1: "sequence"},
            "logits": {0: "batch", 1: "sequence"}}  # fmt: skip
    for n in inputs[2 + positions :]:
        axes[n] = {0: "batch", 2: "past_sequence"}
    for n in outputs[1:]:
        axes[n] = {0: "batch", 2: "total_sequence"}
    axes = {k: v for k, v in axes.items() if k in inputs + outputs}
    big = sum(p.numel() * p.element_size() for p in model.parameters()) > 2**31 - 2**26
    with torch.no_grad():
        if exporter == "dynamo":  # each input axis dynamic, by Step.forward's arguments
            auto = torch.export.Dim.AUTO
            specs = [{axis: auto for axis in axes[n]} for n in inputs]
            shapes = {"input_ids": specs[0], "attention_mask": specs[1], "rest": tuple(specs[2:])}
            torch.onnx.export(module, tuple(args), path, dynamo=True, input_names=inputs,
                              output_names=outputs, external_data=big,
                              dynamic_shapes=shapes)  # fmt: skip
            return
        torch.onnx.export(module, tuple(args), path, opset_version=17, dynamo=False,
                          input_names=inputs, output_names=outputs, dynamic_axes=axes,
                          external_data=big)  # fmt: skip


def quantize_int4(path: str, out_path: str, block: int = 32) -> int:
    """Writes ``path`` with each MatMul by a 2-D floating initializer replaced by a
    com.microsoft MatMulNBits over its weights quantized to 4 bits in blocks of ``block``
    along K, asymmetric as onnxruntime's ``MatMulNBitsQuantizer`` quantizes them (per block:
    the range stretched to hold 0, ``scale = (max - min) / 15``, zero point
    ``round(-min / scale)``, codes ``round(w / scale) + zero point``, each clipped to 0..15;
    codes and zero points packed two a byte, the low nibble first). NumPy over whole weights,
    where onnxruntime's quantizer takes minutes on a 1B-class model. Returns the MatMuls
    replaced. Weights over 2 GB go to an external data file beside ``out_path``."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(path)
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    users: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            users[name] = users.get(name, 0) + 1

    def quantized(weight):  # (packed codes, scales, packed zero points)
        w = numpy_helper.to_array(weight)
        dtype = w.dtype
        k, n = w.shape
        blocks = -(-k // block)
        wt = np.zeros((n, blocks * block), np.float32)
        wt[:, :k] = w.T
        wt = wt.reshape(n, blocks, block)
        lo = np.minimum(wt.min(-1), 0.0)
        hi = np.maximum(wt.max(-1), 0.0)
        scale = (hi - lo) / 15.0
        safe = np.where(scale == 0, 1.0, scale)
        zero = np.where(scale == 0, 8, np.clip(np.round(-lo / safe), 0, 15)).astype(np.uint8)
        codes = np.clip(np.round(wt / safe[..., None]) + zero[..., None], 0, 15).astype(np.uint8)
        codes = np.where(scale[..., None] == 0, 8, codes).astype(np.uint8)
        packed = codes[..., 0::2] | (codes[..., 1::2] << 4)
        zeros = np.zeros((n, blocks + blocks % 2), np.uint8)
        zeros[:, :blocks] = zero
        return packed, scale.astype(dtype), zeros[:, 0::2] | (zeros[:, 1::2] << 4)

    taken = {}  # node position -> its weight
    for at, node in enumerate(graph.node):
        weight = inits.get(node.input[1]) if node.op_type == "MatMul" else None
        if weight is not None and len(weight.dims) == 2 and weight.data_type in (1, 10):
            taken[at] = weight
    # NumPy's passes release the GIL: the weights side by side, on at most 8 threads (the 1B
    # model's some 110 matrices took 53 s one at a time on the GPU machine)
    with ThreadPoolExecutor(max(1, min(8, os.cpu_count() or 1))) as pool:
        done = dict(zip(taken, pool.map(quantized, taken.values())))
    nodes, count = [], 0
    for at, node in enumerate(graph.node):
        if at not in done:
            nodes.append(node)
            continue
        packed, scale, zeros = done.pop(at)
        k, n = taken[at].dims
        name = node.input[1]
        graph.initializer.extend([
            numpy_helper.from_array(packed, f"{name}_Q4"),
            numpy_helper.from_array(scale, f"{name}_scales"),
            numpy_helper.from_array(zeros, f"{name}_zero_points"),
        ])  # fmt: skip
        nodes.append(helper.make_node(
            "MatMulNBits", [node.input[0], f"{name}_Q4", f"{name}_scales", f"{name}_zero_points"],
            list(node.output), name=f"{node.name}_Q4", domain="com.microsoft",
            K=k, N=n, bits=4, block_size=block,
        ))  # fmt: skip
        users[name] -= 1
        count += 1
    del graph.node[:]
    graph.node.extend(nodes)
    unused = [i for i in graph.initializer if users.get(i.name, 1) == 0]
    for init in unused:
        graph.initializer.remove(init)
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    big = sum(len(i.raw_data) for i in graph.initializer) > 2**31 - 2**26
    onnx.save(model, out_path, save_as_external_data=big)
    return count


def greedy(model: Any, prompt: np.ndarray, steps: int, device: str = "cpu") -> np.ndarray:
    """PyTorch's greedy tokens after ``prompt`` ([batch, length], no padding), its own cache:
    [batch, steps]."""
    import torch

    ids = torch.as_tensor(prompt, device=device)
    out = []
    with torch.inference_mode():
        cache = None
        x = ids
        for _ in range(steps):
            r = model(input_ids=x, past_key_values=cache, use_cache=True)
            cache = r.past_key_values
            x = r.logits[:, -1].argmax(-1, keepdim=True)
            out.append(x)
    return torch.cat(out, 1).cpu().numpy()


def main(argv: list[str] | None = None) -> int:
    """Writes the tiny models (with and without position_ids) and their greedy tokens."""
    out_dir = (argv or sys.argv[1:])[0]
    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.default_rng(0)
    reference = {}
    for name in TINY:
        model = build(name)
        vocab = model.config.vocab_size
        prompt = rng.integers(1, vocab, size=(2, 5))
        reference[name] = {"prompt": prompt.tolist(), "greedy": greedy(model, prompt, 24).tolist()}
        export(model, os.path.join(out_dir, f"{name}_step.onnx"))
        export(model, os.path.join(out_dir, f"{name}_step_nopos.onnx"), positions=False)
    with open(os.path.join(out_dir, "decoders_greedy.json"), "w") as f:
        json.dump(reference, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
