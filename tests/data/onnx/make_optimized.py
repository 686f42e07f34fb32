"""Builds the ONNX Runtime-optimized transformer models that ``tests/test_onnx_optimized_models.py``
runs: tiny random-weight Hugging Face BERT and GPT-2 models (2 layers, hidden size 32, 2 heads,
vocabulary 100), exported by ``torch.onnx.export`` (the TorchScript exporter, opset 17, batch and
sequence dynamic) and put through ONNX Runtime's optimizers:

- ``bert_optimized.onnx``, ``gpt2_optimized.onnx``: ``onnxruntime.transformers.optimizer``
  (``optimize_model`` with ``model_type`` 'bert' / 'gpt2', ``num_heads`` 2, ``hidden_size`` 32) at
  its default level for these types (1: ONNX Runtime's basic pass first, then the Python fusions).
  BERT comes out as EmbedLayerNormalization, Attention, BiasGelu and SkipLayerNormalization;
  GPT-2 (whose attention pattern in this transformers version the fusion does not match) with
  FastGelu and SkipLayerNormalization.
- ``bert_ort_extended.onnx``, ``gpt2_ort_extended.onnx``: ONNX Runtime's own graph fusions alone
  (``optimize_model(..., opt_level=2, only_onnxruntime=True)``): FusedMatMul, BiasGelu /
  FastGelu, FusedGemm.

``optimize_model`` imports ``torch`` to pick GPU providers whenever it runs ONNX Runtime's pass
(``optimize_by_onnxruntime``), even for the CPU. So that the optimizing stage runs where
onnxruntime is (the project's environment, without torch), this script runs the same two steps
itself: the ONNX Runtime session that saves its optimized graph (CPU provider, the same level and
disabled optimizers as ``optimize_model`` passes), then ``optimize_model(..., opt_level=0)`` for
the Python fusions. The Python fusions need ``sympy`` (symbolic shape inference).

Usage, from the repository root (two Python environments: one with torch and transformers for
the export, one with onnxruntime for the rest)::

    PYTHONPATH=<dir with sympy> python tests/data/onnx/make_optimized.py \\
        --torch-python /tmp/torchenv/bin/python

It was run with torch 2.15.0, transformers 5.24.0, onnx 1.23.2, onnxruntime 1.32.0.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = 0
CONFIG = {"vocab": 100, "hidden": 32, "layers": 2, "heads": 2, "positions": 16}
# What optimize_model disables in ONNX Runtime's pass before its Python fusions (opt_level > 1),
# and always (ConstantSharing).
PYTHON_FUSION_CONFLICTS = [
    "MatMulScaleFusion",
    "MatMulAddFusion",
    "MatmulTransposeFusion",
    "GemmActivationFusion",
    "BiasSoftmaxFusion",
]


def export(out_dir: str) -> None:
    """Stage 1 (torch, transformers): ``bert.onnx`` and ``gpt2.onnx`` in ``out_dir``."""
    import torch
    from transformers import BertConfig, BertModel, GPT2Config, GPT2Model

    class Bert(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids):
            out = self.model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                token_type_ids=token_type_ids,
                return_dict=True,
            )
            return out.last_hidden_state, out.pooler_output

    class Gpt2(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask):
            out = self.model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                use_cache=False,
                return_dict=True,
            )
            return out.last_hidden_state

    c = CONFIG
    torch.manual_seed(SEED)
    bert = BertModel(
        BertConfig(
            vocab_size=c["vocab"],
            hidden_size=c["hidden"],
            num_hidden_layers=c["layers"],
            num_attention_heads=c["heads"],
            intermediate_size=4 * c["hidden"],
            max_position_embeddings=c["positions"],
            type_vocab_size=2,
            attn_implementation="eager",  # the pattern ONNX Runtime's attention fusion matches
        )
    ).eval()
    gpt2 = GPT2Model(
        GPT2Config(
            vocab_size=c["vocab"],
            n_embd=c["hidden"],
            n_layer=c["layers"],
            n_head=c["heads"],
            n_positions=c["positions"],
            bos_token_id=0,
            eos_token_id=0,
            use_cache=False,
            attn_implementation="eager",
        )
    ).eval()
    ids = torch.randint(0, c["vocab"], (2, 8))
    mask = torch.ones(2, 8, dtype=torch.long)
    types = torch.zeros(2, 8, dtype=torch.long)
    dyn = {0: "batch", 1: "sequence"}
    torch.onnx.export(
        Bert(bert).eval(),
        (ids, mask, types),
        os.path.join(out_dir, "bert.onnx"),
        input_names=["input_ids", "attention_mask", "token_type_ids"],
        output_names=["last_hidden_state", "pooler_output"],
        dynamic_axes={
            "input_ids": dyn,
            "attention_mask": dyn,
            "token_type_ids": dyn,
            "last_hidden_state": dyn,
            "pooler_output": {0: "batch"},
        },
        opset_version=17,
        dynamo=False,
    )
    torch.onnx.export(
        Gpt2(gpt2).eval(),
        (ids, mask),
        os.path.join(out_dir, "gpt2.onnx"),
        input_names=["input_ids", "attention_mask"],
        output_names=["last_hidden_state"],
        dynamic_axes={"input_ids": dyn, "attention_mask": dyn, "last_hidden_state": dyn},
        opset_version=17,
        dynamo=False,
    )


def _ort_pass(src: str, dst: str, level, disabled: list[str]) -> None:
    """ONNX Runtime's graph optimizations at ``level`` on the CPU provider, the result saved."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = level
    options.optimized_model_filepath = dst
    ort.InferenceSession(
        src, options, providers=["CPUExecutionProvider"], disabled_optimizers=disabled
    )


def optimize(src_dir: str, out_dir: str) -> dict[str, collections.Counter]:
    """Stage 2 (onnxruntime): the four optimized models in ``out_dir``; their op counts."""
    import onnx
    import onnxruntime as ort
    from onnxruntime.transformers.optimizer import optimize_model

    basic = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    extended = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    counts = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("bert", "gpt2"):
            src = os.path.join(src_dir, f"{name}.onnx")
            # optimize_model's default for bert / gpt2: level 1, then the Python fusions.
            first = os.path.join(tmp, f"{name}_basic.onnx")
            _ort_pass(src, first, basic, ["ConstantSharing"])
            model = optimize_model(
                first,
                model_type=name,
                num_heads=CONFIG["heads"],
                hidden_size=CONFIG["hidden"],
                opt_level=0,
            )
            model.save_model_to_file(os.path.join(out_dir, f"{name}_optimized.onnx"))
            # only_onnxruntime at level 2: ONNX Runtime's pass is the whole optimization.
            _ort_pass(src, os.path.join(out_dir, f"{name}_ort_extended.onnx"), extended,
                      ["ConstantSharing"])  # fmt: skip
        for kind in ("optimized", "ort_extended"):
            for name in ("bert", "gpt2"):
                path = os.path.join(out_dir, f"{name}_{kind}.onnx")
                graph = onnx.load(path).graph
                counts[os.path.basename(path)] = collections.Counter(
                    (f"{n.domain}." if n.domain else "") + n.op_type for n in graph.node
                )
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stage", choices=["export", "all"], default="all")
    parser.add_argument("--out", default=HERE, help="where the models go")
    parser.add_argument(
        "--torch-python",
        default=sys.executable,
        help="a Python with torch and transformers, for the export",
    )
    args = parser.parse_args()
    if args.stage == "export":
        export(args.out)
        return
    with tempfile.TemporaryDirectory() as exported:
        subprocess.run(
            [args.torch_python, os.path.abspath(__file__), "--stage", "export", "--out", exported],
            check=True,
        )
        counts = optimize(exported, args.out)
    for name, count in counts.items():
        size = os.path.getsize(os.path.join(args.out, name))
        fused = {k: v for k, v in sorted(count.items()) if k.startswith("com.microsoft.")}
        print(f"{name}: {size} bytes, {sum(count.values())} nodes, fused {fused}")


if __name__ == "__main__":
    main()
