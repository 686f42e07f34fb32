"""Hugging Face decoder families beyond GPT-2 and LLaMA, tiny and with random weights, exported
as one decode step with its cache the way ``dml_jax.bench.decoders`` exports those two: the
architectures people export for generation (Qwen2 and Qwen3, Mistral's sliding window, Phi and
Phi-3, Gemma 1-3 with their soft-capping and sliding layers, OPT, GPT-NeoX and StableLM's
partial rotary embeddings, Falcon's multi-query attention, BLOOM's ALiBi, GPT-J, CodeGen,
GPTBigCode, OLMo, Cohere, Starcoder2, Granite and Mixtral's experts).

Each family is a ``transformers`` model type and its configuration at about 32 hidden units, 2
layers (``FAMILIES``); ``write(out_dir)`` builds each with random weights (initializer range 0.2,
so that the logits' top two lie far apart), exports its step (``decoders.export``: inputs
``input_ids``, ``attention_mask``, ``position_ids`` where the model's ``forward`` takes them,
``past_key_values.N.key`` / ``.value``; outputs ``logits``, ``present.N.key`` / ``.value``) and
records PyTorch's own greedy tokens (``decoders.greedy``: its own cache, float32) for each of
two prompts alone, of 6 and 3 tokens, in ``families_greedy.json``: what a generation loop over
the two prompts left-padded into one batch must give row by row. A family that fails to build or
export is recorded with its error (the exporter's, not the library's) and left out.

Needs torch and transformers: ``python -m dml_jax.bench.decoder_families OUT_DIR [NAME ...]``;
``--dynamo OUT_DIR [NAME ...]`` exports with PyTorch's dynamo exporter (``write_dynamo``).
tests/data/decoders/families/ was written so on the GPU machine (torch 2.11.0, transformers
5.17.0, onnx 1.23.1): every family by TorchScript (Cohere's and Mixtral's exports failed), and
Qwen2, Mistral, Gemma 3, Cohere and Falcon by dynamo (``families_dynamo.json`` holds Mixtral's
error too).
"""

from __future__ import annotations

import inspect
import json
import os
import sys
import traceback
from typing import Any

import numpy as np

from dml_jax.bench import decoders

# the sizes every family shares (each family's own names below, where its configuration
# spells them otherwise)
_SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
              max_position_embeddings=256)  # fmt: skip
_IDS = dict(vocab_size=97, initializer_range=0.2, pad_token_id=0, bos_token_id=1, eos_token_id=2)

# name -> (transformers model type, configuration)
FAMILIES: dict[str, tuple[str, dict[str, Any]]] = {
    "qwen2": ("qwen2", dict(_SMALL, num_key_value_heads=2)),
    "qwen3": ("qwen3", dict(_SMALL, num_key_value_heads=2, head_dim=8)),
    "mistral": ("mistral", dict(_SMALL, num_key_value_heads=2, sliding_window=8)),
    "phi3": ("phi3", dict(_SMALL, num_key_value_heads=2)),
    "phi": ("phi", dict(_SMALL, partial_rotary_factor=0.5)),
    "gemma": ("gemma", dict(_SMALL, num_key_value_heads=1, head_dim=8)),
    "gemma2": (
        "gemma2",
        dict(
            _SMALL,
            num_key_value_heads=2,
            head_dim=8,
            sliding_window=8,
            query_pre_attn_scalar=8,
            attn_logit_softcapping=50.0,
            final_logit_softcapping=30.0,
        ),
    ),
    "gemma3": (
        "gemma3_text",
        dict(_SMALL, num_key_value_heads=2, head_dim=8, sliding_window=8, query_pre_attn_scalar=8),
    ),
    "opt": (
        "opt",
        dict(
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            ffn_dim=64,
            word_embed_proj_dim=32,
            max_position_embeddings=256,
        ),
    ),
    "gpt_neox": ("gpt_neox", dict(_SMALL, rotary_pct=0.25)),
    "stablelm": ("stablelm", dict(_SMALL, num_key_value_heads=2, partial_rotary_factor=0.25)),
    "falcon": (
        "falcon",
        dict(
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            multi_query=True,
            parallel_attn=True,
            alibi=False,
            new_decoder_architecture=False,
        ),
    ),
    "bloom": ("bloom", dict(hidden_size=32, n_layer=2, n_head=4)),
    "gptj": ("gptj", dict(n_embd=32, n_layer=2, n_head=4, rotary_dim=4, n_positions=256)),
    "codegen": (
        "codegen",
        dict(n_embd=32, n_layer=2, n_head=4, rotary_dim=4, n_positions=256, n_ctx=256),
    ),
    "gpt_bigcode": (
        "gpt_bigcode",
        dict(n_embd=32, n_layer=2, n_head=4, multi_query=True, n_positions=256),
    ),
    "olmo": ("olmo", dict(_SMALL, num_key_value_heads=2)),
    "cohere": ("cohere", dict(_SMALL, num_key_value_heads=2, logit_scale=0.5)),
    "starcoder2": ("starcoder2", dict(_SMALL, num_key_value_heads=2, sliding_window=None)),
    "granite": (
        "granite",
        dict(
            _SMALL,
            num_key_value_heads=2,
            embedding_multiplier=2.0,
            residual_multiplier=0.5,
            attention_multiplier=0.2,
            logits_scaling=2.0,
        ),
    ),
    "mixtral": (
        "mixtral",
        dict(_SMALL, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2),
    ),
}

PROMPT_LENGTHS = (6, 3)
STEPS = 16


def build(name: str, seed: int = 0) -> Any:
    """The causal LM of family ``name`` in eval mode with random weights (seed ``seed``),
    eager attention."""
    import torch
    import transformers

    model_type, cfg = FAMILIES[name]
    torch.manual_seed(seed)
    config = transformers.AutoConfig.for_model(model_type, **cfg, **_IDS)
    config._attn_implementation = "eager"
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    return model.eval()


def takes_positions(model: Any) -> bool:
    """Whether the model's ``forward`` takes ``position_ids`` (BLOOM's ALiBi does not)."""
    return "position_ids" in inspect.signature(model.forward).parameters


def write_dynamo(out_dir: str, names: list[str]) -> dict:
    """Exports each family of ``names`` again with PyTorch's dynamo exporter (``torch.export``,
    the default of ``torch.onnx.export`` since PyTorch 2.9) to ``out_dir``/NAME_dynamo_step.onnx,
    the same weights as ``write``'s (their greedy tokens are those), and writes
    ``families_dynamo.json``: per family "ok" or the exporter's error."""
    os.makedirs(out_dir, exist_ok=True)
    record: dict[str, str] = {}
    for name in names:
        try:
            model = build(name)
            path = os.path.join(out_dir, f"{name}_dynamo_step.onnx")
            decoders.export(model, path, takes_positions(model), exporter="dynamo")
            record[name] = "ok"
        except Exception:  # a family's exporter failure is a result to record
            record[name] = traceback.format_exc(limit=4)[-1500:]
        print(name, "dynamo", "ok" if record[name] == "ok" else "error", flush=True)
    with open(os.path.join(out_dir, "families_dynamo.json"), "w") as f:
        json.dump(record, f, indent=1)
    return record


def write(out_dir: str, names: list[str] | None = None) -> dict:
    """Exports each family of ``names`` (all by default) to ``out_dir``/NAME_step.onnx and
    writes ``families_greedy.json``: per family its prompts, PyTorch's greedy tokens for each
    prompt alone and whether the step takes ``position_ids``, or the error that stopped it."""
    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.default_rng(0)
    record: dict[str, Any] = {}
    for name in names or list(FAMILIES):
        prompts = [rng.integers(3, 97, size=n).tolist() for n in PROMPT_LENGTHS]
        try:
            model = build(name)
            positions = takes_positions(model)
            greedy = [decoders.greedy(model, np.array([p]), STEPS)[0].tolist() for p in prompts]
            decoders.export(model, os.path.join(out_dir, f"{name}_step.onnx"), positions)
            record[name] = {"prompts": prompts, "greedy": greedy, "positions": positions}
        except Exception:  # a family's exporter failure is a result to record
            record[name] = {"error": traceback.format_exc(limit=4)[-1500:]}
        print(name, "error" if "error" in record[name] else "ok", flush=True)
    with open(os.path.join(out_dir, "families_greedy.json"), "w") as f:
        json.dump(record, f, indent=1)
    return record


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--dynamo"]:
        write_dynamo(args[1], args[2:] or list(FAMILIES))
    else:
        write(args[0], args[1:] or None)
