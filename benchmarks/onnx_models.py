"""Models exported from PyTorch run through ``dml_jax.onnx.InferenceSession``: agreement with
PyTorch and speed against PyTorch eager and ``torch.compile``, on the same card in the same run.

Each model is built with random weights (no downloads), put in eval mode, and exported by both
of PyTorch's exporters: TorchScript (``dynamo=False``, opset 17, the batch (and sequence) axes
dynamic) and dynamo (opset 18, static shapes). Each export is imported by a session and run on
the GPU (and, with ``--cpu``, on the CPU); its outputs are compared with PyTorch's on the same
inputs (the largest absolute difference relative to the reference's largest magnitude). With
``--speed``, the first export of each model is also timed at ``--batch`` against PyTorch eager and
``torch.compile`` (median of ``--samples`` samples of ``--iters`` calls, one sync a sample), at
each graph optimization level of ``--levels`` (interleaved; the first one is compared).

Needs torch, torchvision, timm, transformers and onnx (onnxscript for the dynamo exporter).
Usage: ``PYTHONPATH=. python benchmarks/onnx_models.py [--only NAME ...] [--cpu] [--speed]
[--json OUT.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import traceback

import numpy as np

# ---------------------------------------------------------------------------------------------
# The models: name -> (builder, example inputs at a batch, dynamic axes {input: {axis: name}})


def _torchvision(name, **kw):
    def build():
        import torchvision

        return getattr(torchvision.models, name)(weights=None, **kw)

    return build


def _image(batch, size=224):
    import torch

    return (torch.randn(batch, 3, size, size),)


def _segmentation(name):
    def build():
        from torchvision.models import segmentation

        model = getattr(segmentation, name)(weights=None, weights_backbone=None, aux_loss=False)
        return _Wrap.make(model, "out")

    return build


def _timm(name):
    def build():
        import timm

        return timm.create_model(name, pretrained=False)

    return build


class _Wrap:
    """A transformers model as a module returning one tensor (its first output)."""

    @staticmethod
    def make(model, key="last_hidden_state"):
        import torch

        class M(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = model

            def forward(self, *args):
                out = self.m(*args)
                return out[key] if isinstance(out, dict) or hasattr(out, key) else out[0]

        return M()


def _bert():
    from transformers import BertConfig, BertModel

    cfg = BertConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=256, vocab_size=1000)  # fmt: skip
    return _Wrap.make(BertModel(cfg))


def _gpt2():
    from transformers import GPT2Config, GPT2Model

    cfg = GPT2Config(n_embd=128, n_layer=2, n_head=4, vocab_size=1000, n_positions=128)
    return _Wrap.make(GPT2Model(cfg))


def _llama():
    from transformers import LlamaConfig, LlamaModel

    cfg = LlamaConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, intermediate_size=256, vocab_size=1000,
                      max_position_embeddings=128)  # fmt: skip
    return _Wrap.make(LlamaModel(cfg))


def _t5_encoder():
    from transformers import T5Config, T5EncoderModel

    cfg = T5Config(d_model=128, num_layers=2, num_heads=4, d_ff=256, d_kv=32, vocab_size=1000)
    return _Wrap.make(T5EncoderModel(cfg))


def _whisper_encoder():
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    cfg = WhisperConfig(d_model=128, encoder_layers=2, encoder_attention_heads=4,
                        encoder_ffn_dim=256, num_mel_bins=80, max_source_positions=100)  # fmt: skip
    return _Wrap.make(WhisperEncoder(cfg))


def _clip_vision():
    from transformers import CLIPVisionConfig, CLIPVisionModel

    cfg = CLIPVisionConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                           intermediate_size=256, image_size=64, patch_size=16)  # fmt: skip
    return _Wrap.make(CLIPVisionModel(cfg), "pooler_output")


def _clip_text():
    from transformers import CLIPTextConfig, CLIPTextModel

    cfg = CLIPTextConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=256, vocab_size=1000, max_position_embeddings=64)  # fmt: skip
    return _Wrap.make(CLIPTextModel(cfg), "pooler_output")


def _unet_block():
    """A diffusers-style UNet block: ResNet block (GroupNorm, SiLU, time embedding), a
    transformer block (self- and cross-attention, GEGLU feed-forward) and 2x nearest upsampling
    with a convolution."""
    from torch import nn

    class Block(nn.Module):
        def __init__(self, ch=64, ctx=32, heads=4):
            super().__init__()
            self.n1, self.c1 = nn.GroupNorm(8, ch), nn.Conv2d(ch, ch, 3, padding=1)
            self.t = nn.Linear(128, ch)
            self.n2, self.c2 = nn.GroupNorm(8, ch), nn.Conv2d(ch, ch, 3, padding=1)
            self.ln1, self.ln2, self.ln3 = nn.LayerNorm(ch), nn.LayerNorm(ch), nn.LayerNorm(ch)
            self.a1 = nn.MultiheadAttention(ch, heads, batch_first=True)
            self.a2 = nn.MultiheadAttention(ch, heads, kdim=ctx, vdim=ctx, batch_first=True)
            self.ff1, self.ff2 = nn.Linear(ch, 8 * ch), nn.Linear(4 * ch, ch)
            self.up = nn.Conv2d(ch, ch, 3, padding=1)

        def forward(self, x, temb, context):
            h = self.c1(nn.functional.silu(self.n1(x)))
            h = h + self.t(nn.functional.silu(temb))[:, :, None, None]
            x = x + self.c2(nn.functional.silu(self.n2(h)))
            b, c, hh, ww = x.shape
            s = x.flatten(2).transpose(1, 2)
            q = self.ln1(s)
            s = s + self.a1(q, q, q, need_weights=False)[0]
            q = self.ln2(s)
            s = s + self.a2(q, context, context, need_weights=False)[0]
            u, g = self.ff1(self.ln3(s)).chunk(2, dim=-1)
            s = s + self.ff2(u * nn.functional.gelu(g))
            x = s.transpose(1, 2).reshape(b, c, hh, ww)
            return self.up(nn.functional.interpolate(x, scale_factor=2.0, mode="nearest"))

    return Block()


def _tokens(batch, seq=32, vocab=1000):
    import torch

    return (torch.randint(0, vocab, (batch, seq)),)


MODELS = {
    "resnet50": (_torchvision("resnet50"), _image, {0: "batch"}),
    "mobilenet_v2": (_torchvision("mobilenet_v2"), _image, {0: "batch"}),
    "mobilenet_v3_large": (_torchvision("mobilenet_v3_large"), _image, {0: "batch"}),
    "efficientnet_b0": (_torchvision("efficientnet_b0"), _image, {0: "batch"}),
    "convnext_tiny": (_torchvision("convnext_tiny"), _image, {0: "batch"}),
    "regnet_y_400mf": (_torchvision("regnet_y_400mf"), _image, {0: "batch"}),
    "swin_t": (_torchvision("swin_t"), _image, {0: "batch"}),
    "vit_b_16": (_torchvision("vit_b_16"), _image, {0: "batch"}),
    "deeplabv3_mobilenet": (
        _segmentation("deeplabv3_mobilenet_v3_large"),
        lambda b: _image(b, 256),
        {0: "batch"},
    ),
    "fcn_resnet50": (
        _segmentation("fcn_resnet50"),
        lambda b: _image(b, 256),
        {0: "batch"},
    ),
    "timm_vit_tiny": (_timm("vit_tiny_patch16_224"), _image, {0: "batch"}),
    "timm_efficientnet_b0": (_timm("efficientnet_b0"), _image, {0: "batch"}),
    "bert": (_bert, _tokens, {0: "batch", 1: "sequence"}),
    "gpt2": (_gpt2, _tokens, {0: "batch", 1: "sequence"}),
    "llama_gqa": (_llama, _tokens, {0: "batch", 1: "sequence"}),
    "t5_encoder": (_t5_encoder, _tokens, {0: "batch", 1: "sequence"}),
    "whisper_encoder": (
        _whisper_encoder,
        lambda b: (__import__("torch").randn(b, 80, 200),),
        {0: "batch"},
    ),
    "clip_vision": (_clip_vision, lambda b: _image(b, 64), {0: "batch"}),
    "clip_text": (_clip_text, _tokens, {0: "batch", 1: "sequence"}),
    "unet_block": (
        _unet_block,
        lambda b: (
            __import__("torch").randn(b, 64, 16, 16),
            __import__("torch").randn(b, 128),
            __import__("torch").randn(b, 12, 32),
        ),
        {0: "batch"},
    ),
}


# ---------------------------------------------------------------------------------------------


def _first(out):
    import torch

    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, dict):
        return next(iter(out.values()))
    if hasattr(out, "__getitem__"):
        return out[0]
    return out


def export(model, args, path, exporter, dynamic):
    import torch

    names = [f"input_{k}" for k in range(len(args))]
    if exporter == "torchscript":
        # The TorchScript exporter cannot export PyTorch's fused attention fast path.
        torch.backends.mha.set_fastpath_enabled(False)
        axes = {n: dict(dynamic) for n in names}
        if len(args) > 1:  # the extra inputs of the UNet block share only the batch axis
            axes = {names[0]: dict(dynamic), **{n: {0: "batch"} for n in names[1:]}}
        torch.onnx.export(model, args, path, opset_version=17, dynamo=False, input_names=names,
                          output_names=["output"], dynamic_axes=axes)  # fmt: skip
    else:
        torch.onnx.export(model, args, path, opset_version=18, dynamo=True, input_names=names,
                          output_names=["output"], external_data=False)  # fmt: skip


def agreement(got, want) -> float:
    want = np.asarray(want, np.float64)
    scale = max(float(np.abs(want).max()), 1e-6)
    return float(np.abs(np.asarray(got, np.float64) - want).max() / scale)


def timed(fn, samples, iters, sync):
    fn()
    sync()
    times = []
    for _ in range(samples):
        t = time.perf_counter()
        for _ in range(iters):
            fn()
        sync()
        times.append((time.perf_counter() - t) / iters)
    return statistics.median(times)


def run_model(name, opts, rows):
    import torch

    from dml_jax.onnx import InferenceSession

    build, inputs, dynamic = MODELS[name]
    torch.manual_seed(0)
    model = build().eval()
    with torch.no_grad():
        # Random weights everywhere: zero-initialized heads (torchvision's ViT) and default
        # normalization statistics would make the outputs constant and the comparison empty.
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
        for m in model.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.running_var is not None:
                m.running_mean.normal_(0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    args = inputs(opts.check_batch)
    feeds = [a.numpy() for a in args]
    with torch.no_grad():
        want = _first(model(*args)).float().numpy()
    gpu = torch.cuda.is_available()
    for exporter in opts.exporters:
        row = {"model": name, "exporter": exporter}
        rows.append(row)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, f"{name}.onnx")
            try:
                t = time.perf_counter()
                with torch.no_grad():
                    export(model, args, path, exporter, dynamic)
                row["export_s"] = round(time.perf_counter() - t, 2)
            except Exception as e:
                row["error"] = f"export: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
                print(name, exporter, row["error"], flush=True)
                continue
            devices = (["gpu"] if gpu else []) + (["cpu"] if opts.cpu or not gpu else [])
            for dev in devices:
                try:
                    s = InferenceSession(path, device=dev)
                    feed = {i.name: x for i, x in zip(s.get_inputs(), feeds)}
                    t = time.perf_counter()
                    got = s.run(None, feed)[0]
                    row[f"{dev}_first_call_s"] = round(time.perf_counter() - t, 2)
                    row[f"{dev}_rel_err"] = agreement(got, want)
                    row["dml_nodes"] = len(next(iter(s._programs.values())).imported.graph.nodes)
                except Exception as e:
                    row[f"{dev}_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
                    if opts.debug:
                        traceback.print_exc()
            print(json.dumps(row), flush=True)
            failed = any(k.endswith("error") for k in row) or row.get("gpu_rel_err", 0) > 1e-3
            if opts.save and failed and os.path.getsize(path) < 16 << 20:
                import shutil

                shutil.copy(path, os.path.join(opts.save, f"{name}_{exporter}.onnx"))
            if opts.speed and gpu and exporter == opts.exporters[0] and "gpu_rel_err" in row:
                speed(name, model, inputs, path, opts, row)
                print(json.dumps(row), flush=True)


def speed(name, model, inputs, path, opts, row):
    import jax
    import torch

    from dml_jax.onnx import InferenceSession

    args = inputs(opts.batch)
    path = path[:-5] + "_speed.onnx"  # exported again at the timed batch (dynamo's are static)
    with torch.no_grad():
        export(model, args, path, opts.exporters[0], MODELS[name][2])
    from dml_jax.onnx import SessionOptions

    feed = [jax.device_put(a.numpy()) for a in args]
    fns = {}
    for level in opts.levels:
        options = SessionOptions()
        options.graph_optimization_level = level
        fns[level] = jax.jit(InferenceSession(path, options, device="gpu").fn)
    times = {level: [] for level in fns}
    for _ in range(opts.samples):  # the levels' samples interleaved
        for level, fn in fns.items():
            times[level].append(timed(lambda fn=fn: fn(*feed), 1, opts.iters,
                                      lambda fn=fn: jax.block_until_ready(fn(*feed))))  # fmt: skip
    for level, t in times.items():
        row[f"dml_ms_{level}"] = round(statistics.median(t) * 1e3, 3)
    dml_s = statistics.median(times[opts.levels[0]])
    cuda = model.cuda()
    targs = [a.cuda() for a in args]
    with torch.no_grad():
        eager_s = timed(lambda: cuda(*targs), opts.samples, opts.iters, torch.cuda.synchronize)
        row["batch"] = opts.batch
        row["dml_ms"] = round(dml_s * 1e3, 3)
        row["eager_ms"] = round(eager_s * 1e3, 3)
        row["x_eager"] = round(eager_s / dml_s, 3)
        if opts.compile:
            try:
                compiled = torch.compile(cuda)
                t = time.perf_counter()
                compiled(*targs)
                torch.cuda.synchronize()
                row["torch_compile_first_s"] = round(time.perf_counter() - t, 1)
                comp_s = timed(lambda: compiled(*targs), opts.samples, opts.iters,
                               torch.cuda.synchronize)  # fmt: skip
                row["compile_ms"] = round(comp_s * 1e3, 3)
                row["x_compile"] = round(comp_s / dml_s, 3)
            except Exception as e:
                row["compile_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    model.cpu()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", nargs="*", default=None, help="model names (default: all)")
    p.add_argument("--exporters", nargs="*", default=["torchscript", "dynamo"])
    p.add_argument("--cpu", action="store_true", help="also run each export on the CPU")
    p.add_argument("--speed", action="store_true", help="time against PyTorch on the GPU")
    p.add_argument("--no-compile", dest="compile", action="store_false")
    p.add_argument("--check-batch", type=int, default=2)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--samples", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--levels", nargs="*", default=["all"],
                   help="graph optimization levels timed with --speed, interleaved (the first "
                        "is the one compared with PyTorch)")  # fmt: skip
    p.add_argument("--json", default=None, help="write the rows here")
    p.add_argument("--save", default=None, help="copy exports that fail (under 16 MB) here")
    p.add_argument("--debug", action="store_true")
    opts = p.parse_args(argv)
    import jax
    import torch

    # The same precision on both sides: dml_jax computes float32 products in float32, so
    # PyTorch's TF32 convolutions and matrix products are switched off.
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    names = opts.only or list(MODELS)
    rows = []
    header = {
        "jax": jax.__version__,
        "torch": torch.__version__,
        "device": str(jax.devices()[0].device_kind),
        "date": time.strftime("%Y-%m-%d"),
    }
    print(json.dumps(header), flush=True)
    for name in names:
        try:
            run_model(name, opts, rows)
        except Exception as e:
            rows.append({"model": name, "error": f"{type(e).__name__}: {str(e)[:200]}"})
            print(name, "ERROR", rows[-1]["error"], flush=True)
        if opts.json:  # written after each model, so a run cut short keeps what it measured
            with open(opts.json, "w") as f:
                json.dump({"header": header, "rows": rows}, f, indent=1)
    print()
    print(f"{'model':22} {'exporter':11} {'gpu err':>9} {'cpu err':>9} {'x eager':>8} "
          f"{'x compile':>9}  note")  # fmt: skip
    ok = 0
    for r in rows:
        err = lambda k: f"{r[k]:.1e}" if k in r else "-"
        note = r.get("error") or r.get("gpu_error") or r.get("cpu_error") or ""
        ok += "gpu_rel_err" in r and r["gpu_rel_err"] < 1e-3
        print(f"{r['model']:22} {r.get('exporter', ''):11} {err('gpu_rel_err'):>9} "
              f"{err('cpu_rel_err'):>9} {r.get('x_eager', '-'):>8} {r.get('x_compile', '-'):>9}  "
              f"{note[:120]}")  # fmt: skip
    print(f"{ok} of {len(rows)} exports run on the GPU and agree within 1e-3")
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"header": header, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
