"""The ONNX models suite: models exported from PyTorch, run through
``dml_jax.onnx.InferenceSession``; agreement with PyTorch, and speed against PyTorch eager,
``torch.compile`` and onnxruntime on the CPU.

Each model is built with random weights (no downloads), put in eval mode, and exported by
PyTorch's TorchScript exporter (``dynamo=False``, opset 17, the batch (and sequence) axes
dynamic) and, with ``--exporters torchscript dynamo``, by dynamo too (opset 18, static shapes).
Each export is imported by a session on JAX's default device and its outputs compared with
PyTorch's on the same inputs (``rel_err``: the largest absolute difference over the reference's
largest magnitude). The first export of each model is then timed at ``--batch``: dml_jax
(``jax.jit`` of the session's function with the session's XLA options, ``--xla-option`` over
them; ``--levels``: at each graph optimization level, ``dml_ms`` being level ``all``'s where it
is timed, else the last level's; ``dml_b1_ms``: that level at batch 1),
onnxruntime's CPU provider (``ort_cpu_ms``; few samples: it is the slowest; in a child process,
so that a model onnxruntime crashes on costs that figure only, ``ort_cpu_error``), and on a GPU
PyTorch eager and ``torch.compile`` (``--no-compile``: not). ``x_eager`` / ``x_compile`` /
``x_ort_cpu``: their time over ``dml_ms``.

Needs torch, torchvision, timm, transformers and onnx (onnxscript for the dynamo exporter). Without
PyTorch the suite runs one small model written with ``onnx.helper`` (``mlp``) against onnxruntime
alone, and records the PyTorch models as skipped. ``--quick``: that model, and with PyTorch
``mobilenet_v2`` and ``bert`` at batch 2.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any

import numpy as np

from ..harness import Run, cold_time, cold_torch_caches, error_text, jax_sync

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


def _mlp_model(path: str, batch: int) -> list[np.ndarray]:
    """A small ONNX model written with onnx.helper (MatMul, Add, Relu, Softmax, a Conv branch is
    not needed here): the suite's PyTorch-free case. Returns its inputs at ``batch``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = {
        "w1": rng.standard_normal((256, 512)).astype(np.float32) * 0.05,
        "b1": rng.standard_normal(512).astype(np.float32) * 0.05,
        "w2": rng.standard_normal((512, 10)).astype(np.float32) * 0.05,
    }
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Add", ["h", "b1"], ["hb"]),
        helper.make_node("Relu", ["hb"], ["r"]),
        helper.make_node("MatMul", ["r", "w2"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["output"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 256])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 10])],
        [numpy_helper.from_array(v, k) for k, v in weights.items()],
    )
    # IR 10: onnxruntime 1.30 reads no newer
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    onnx.save(model, path)
    return [rng.standard_normal((batch, 256)).astype(np.float32)]


def _ort_session(path: str):
    import onnxruntime as ort

    return ort.InferenceSession(path, providers=["CPUExecutionProvider"])


_ORT_CHILD = """
import sys, time
import numpy as np
import onnxruntime as ort
from dml_jax.bench.harness import Timer
path, arrays = sys.argv[1], np.load(sys.argv[2])
s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
feed = {i.name: arrays[f"a{k}"] for k, i in enumerate(s.get_inputs())}
print(Timer(sample_s=0.0, samples=1).run(lambda: s.run(None, feed), lambda _: None))
"""


def _ort_cpu_seconds(path: str, feeds: list[np.ndarray], timeout_s: float = 600.0) -> float:
    """onnxruntime CPU's seconds per call on ``feeds`` (a few calls: the CPU is far slower),
    measured in a child process: onnxruntime aborts the process on some models it cannot
    build (a segmentation fault creating the session of torchvision's ViT in float16)."""
    npz = path[:-5] + "_feeds.npz"
    np.savez(npz, **{f"a{k}": a for k, a in enumerate(feeds)})
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run(
        [sys.executable, "-c", _ORT_CHILD, path, npz],
        check=False, capture_output=True, text=True, env=env, timeout=timeout_s,
    )  # fmt: skip
    if done.returncode != 0:
        lines = [ln for ln in done.stderr.strip().splitlines() if ln.strip()]
        why = lines[-1] if lines else ""
        if done.returncode < 0:
            why = f"onnxruntime's process ended by signal {-done.returncode} {why}".strip()
        raise RuntimeError(why[:300])
    return float(done.stdout.strip().splitlines()[-1])


def _xla_options(run: Run) -> dict | None:
    """``--xla-option NAME=VALUE`` as ``jax.jit``'s ``compiler_options``, or None. XLA parses
    numbers from their text but takes booleans only as bools: true and false become bools."""
    out: dict[str, Any] = {}
    for item in getattr(run.args, "xla_option", None) or []:
        name, _, value = item.partition("=")
        out[name] = value.lower() == "true" if value.lower() in ("true", "false") else value
    return out or None


def _time_onnx(run: Run, row: dict, path: str, feeds: list[np.ndarray]) -> Any:
    """dml_jax's times on ``feeds`` at each graph optimization level of ``--levels``
    (``dml_ms_<level>`` each; ``dml_ms``: level ``all``'s where it is timed, else the last
    level's) and onnxruntime CPU's; returns the dml output of the first level.
    ``dml_cold_s_<level>``: the session's import (folding and graph optimizations) and its first
    call (trace, compile, run), as ``torch_compile_first_s`` is ``torch.compile``'s first call;
    ``dml_cold_s`` is the first level's, the one cold figure: later levels reuse the process's
    XLA autotuning results. ``dml_b1_ms``: the ``dml_ms`` level's latency at batch 1."""
    import jax

    from dml_jax.onnx import InferenceSession, SessionOptions

    inputs = [jax.device_put(a) for a in feeds]
    levels = list(getattr(run.args, "levels", None) or ["all"])
    main = "all" if "all" in levels else levels[-1]
    out = dml_s = main_fn = None
    for level in levels:
        options = SessionOptions()
        options.graph_optimization_level = level
        start = time.perf_counter()
        session = InferenceSession(path, options, compiler_options=_xla_options(run))
        # traced for the session's device alone, as ``run`` traces its programs
        fn = jax.jit(session.fn_on(), compiler_options=session.compiler_options or None)
        imported = time.perf_counter() - start
        cold, first = cold_time(lambda fn=fn: fn(*inputs), jax_sync)
        t = run.timer.run(lambda fn=fn: fn(*inputs), jax_sync)
        row[f"dml_ms_{level}"] = t * 1e3
        row[f"dml_cold_s_{level}"] = round(imported + cold, 2)
        if out is None:
            out = first
            row.update(batch=int(feeds[0].shape[0]), dml_cold_s=round(imported + cold, 2))
        if level == main:
            dml_s, main_fn = t, fn
            row["dml_ms"] = t * 1e3
    if getattr(run.args, "latency", False) and int(feeds[0].shape[0]) > 1:
        # Batch-1 latency: the same session function on the first example of each input
        # (the exports' batch axis is dynamic), traced and compiled again.
        one = [a[:1] for a in inputs]
        jax_sync(main_fn(*one))
        row["dml_b1_ms"] = run.timer.run(lambda: main_fn(*one), jax_sync) * 1e3
    try:
        ort_s = _ort_cpu_seconds(path, feeds)
        row.update(ort_cpu_ms=ort_s * 1e3, x_ort_cpu=ort_s / dml_s)
    except Exception as e:  # onnxruntime lacks an op, or crashed: recorded
        row["ort_cpu_error"] = error_text(e)
    return out


def run_mlp(run: Run) -> None:
    """The PyTorch-free case: agreement with onnxruntime's CPU provider, then speed."""
    from dml_jax.onnx import InferenceSession

    row = {"model": "mlp", "exporter": "onnx.helper", "reference": "onnxruntime CPU"}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "mlp.onnx")
        try:
            feeds = _mlp_model(path, 2 if run.quick else run.args.batch)
            want = _ort_session(path).run(None, {"x": feeds[0]})[0]
            got = InferenceSession(path).run(None, {"x": feeds[0]})[0]
            row["rel_err"] = agreement(got, want)
            _time_onnx(run, row, path, feeds)
        except Exception as e:
            row["error"] = error_text(e)
    run.add(row)


def random_model(name: str, torch):
    """The model ``name`` of ``MODELS`` in eval mode, with random weights everywhere (seed 0):
    zero-initialized heads (torchvision's ViT) and default normalization statistics would make
    the outputs constant and the comparison empty."""
    torch.manual_seed(0)
    model = MODELS[name][0]().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
        for m in model.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.running_var is not None:
                m.running_mean.normal_(0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    return model


def run_model(run: Run, name: str, torch) -> None:
    from dml_jax.onnx import InferenceSession

    opts = run.args
    _, inputs, dynamic = MODELS[name]
    model = random_model(name, torch)
    args = inputs(opts.check_batch)
    feeds = [a.numpy() for a in args]
    with torch.no_grad():
        want = _first(model(*args)).float().numpy()
    for exporter in opts.exporters:
        row = {"model": name, "exporter": exporter, "reference": "PyTorch"}
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, f"{name}.onnx")
            try:
                t = time.perf_counter()
                with torch.no_grad():
                    export(model, args, path, exporter, dynamic)
                row["export_s"] = round(time.perf_counter() - t, 2)
                s = InferenceSession(path)
                feed = {i.name: x for i, x in zip(s.get_inputs(), feeds)}
                got = s.run(None, feed)[0]
                row["rel_err"] = agreement(got, want)
                row["dml_nodes"] = len(next(iter(s._programs.values())).imported.graph.nodes)
            except Exception as e:
                row["error"] = error_text(e)
                row["error_trace"] = traceback.format_exc()[-2000:]
            if exporter == opts.exporters[0] and "rel_err" in row and not run.over_budget():
                try:
                    speed(run, name, model, inputs, path, row, torch)
                except Exception as e:
                    row["speed_error"] = error_text(e)
        run.add(row)


def _half_copy(model):
    """A float16 copy of ``model`` on the GPU: ``Module.half()`` converts in place, and the
    exporters after the timed one check the float32 model at ``--check-batch`` on the CPU."""
    return copy.deepcopy(model).cuda().half()


def speed(run: Run, name, model, inputs, path, row, torch):
    opts = run.args
    batch = 2 if run.quick else opts.batch
    args = inputs(batch)
    path = path[:-5] + "_speed.onnx"  # exported again at the timed batch (dynamo's are static)
    half = opts.dtype == "float16"
    if half:  # the model timed and exported in float16 (on the GPU, where PyTorch has its ops)
        model = _half_copy(model)
        args = tuple(a.cuda().half() if a.is_floating_point() else a.cuda() for a in args)
    row["dtype"] = opts.dtype
    with torch.no_grad():
        export(model, args, path, opts.exporters[0], MODELS[name][2])
    _time_onnx(run, row, path, [a.cpu().numpy() for a in args])
    if run.torch is None:  # PyTorch on the CPU is no anchor for a GPU run
        return
    cuda = model.cuda()
    targs = [a.cuda() for a in args]
    with torch.no_grad():
        eager_s = run.timer.run(lambda: cuda(*targs), run.torch_sync)
        row.update(eager_ms=eager_s * 1e3, x_eager=eager_s / (row["dml_ms"] / 1e3))
        if "dml_b1_ms" in row:
            one = [a[:1] for a in targs]
            eager1_s = run.timer.run(lambda: cuda(*one), run.torch_sync)
            row.update(eager_b1_ms=eager1_s * 1e3, x_eager_b1=eager1_s / (row["dml_b1_ms"] / 1e3))
        if opts.compile:
            try:
                with cold_torch_caches():  # a cold first call, as dml_jax's is
                    compiled = torch.compile(cuda)
                    cold, _ = cold_time(lambda: compiled(*targs), run.torch_sync)
                    row["torch_compile_first_s"] = round(cold, 1)
                    comp_s = run.timer.run(lambda: compiled(*targs), run.torch_sync)
                row.update(compile_ms=comp_s * 1e3, x_compile=comp_s / (row["dml_ms"] / 1e3))
            except Exception as e:
                row["compile_error"] = error_text(e)
            torch._dynamo.reset()
    model.cpu()
    torch.cuda.empty_cache()


QUICK_MODELS = ("mobilenet_v2", "bert")


def add_arguments(p: Any) -> None:
    p.add_argument("--only", nargs="*", default=None, help="model names (default: all)")
    p.add_argument("--exporters", nargs="*", default=["torchscript"], help="torchscript, dynamo")
    p.add_argument("--no-compile", dest="compile", action="store_false", help="no torch.compile")
    p.add_argument("--check-batch", type=int, default=2, help="batch of the agreement check")
    p.add_argument("--batch", type=int, default=32, help="batch of the timing")
    p.add_argument(
        "--dtype",
        choices=("float32", "float16"),
        default="float32",
        help="the timed model's type (float16: exported from the half model on the GPU)",
    )
    p.add_argument(
        "--levels",
        nargs="*",
        default=["all"],
        help="graph optimization levels dml_jax is timed at (the first one is compared)",
    )
    p.add_argument(
        "--xla-option",
        action="append",
        metavar="NAME=VALUE",
        help="an XLA option for dml_jax's compiles, over the session's own (jax.jit's "
        "compiler_options; repeatable), e.g. xla_gpu_enable_triton_gemm=true",
    )
    p.add_argument(
        "--no-latency",
        dest="latency",
        action="store_false",
        help="no batch-1 latency (by default dml_jax and PyTorch eager are timed at batch 1 "
        "too, dml_jax at level all where it is timed, else at the last level)",
    )


def run(run: Run) -> int:
    import jax

    run_mlp(run)
    if run.args.no_torch:
        run.skip("PyTorch models", "--no-torch")
        return 0
    try:
        import torch
    except ImportError as e:
        run.skip("PyTorch models", f"PyTorch is not importable ({e}): the models come from it")
        return 0
    run.report["torch"] = torch.__version__
    run.report["onnx_device"] = jax.default_backend()
    # The same precision on both sides: dml_jax computes float32 products in float32, so
    # PyTorch's TF32 convolutions and matrix products are switched off.
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    names = run.args.only or (list(QUICK_MODELS) if run.quick else list(MODELS))
    for name in names:
        if run.over_budget():
            run.skip(f"models from {name} on", f"--budget-s {run.args.budget_s}")
            break
        try:
            run_model(run, name, torch)
        except Exception as e:
            run.add({"model": name, "error": error_text(e)})
    return 0


def table(report: dict) -> list[str]:
    """One line per model: agreement of each export, then the timed export's speed (with the
    graph optimizations off too, where the run timed both levels)."""
    exporters = list(dict.fromkeys(r.get("exporter", "") for r in report["rows"]))
    levels = any("dml_ms_disable" in r and "dml_ms_all" in r for r in report["rows"])
    latency = any("dml_b1_ms" in r for r in report["rows"])
    lines = [
        (
            "Agreement: max |dml - reference| / max |reference| per exporter. Times at the row's "
            "batch, of the first export; `x eager`, `x compile`, `x ORT CPU`: their time over "
            "dml_jax's (above 1: dml_jax is faster)"
            + (
                "; `dml ms` at the default graph optimization level (all), `x opt`: the time "
                "with the optimizations off (disable) over it"
                if levels
                else ""
            )
            + ". `first s`: dml_jax's import and first call (trace, compile, run) at the first "
            "level the run timed (later levels reuse the process's autotuning results), against "
            "`torch.compile`'s first call (`compile first s`; with its on-disk caches in a fresh "
            "directory, `harness.cold_torch_caches`, in runs from 2026-11-27 on: the source "
            "says which rows)."
            + (
                " `b1 ms`: dml_jax's latency at batch 1 (one example of the same inputs, the "
                "default level), `x eager b1`: PyTorch eager's over it."
                if latency
                else ""
            )
        ),
        "",
        "| model | "
        + " | ".join(f"rel err {e}" for e in exporters)
        + " | batch | dml ms |"
        + (" x opt |" if levels else "")
        + " x eager | x compile | x ORT CPU | first s | compile first s |"
        + (" b1 ms | x eager b1 |" if latency else "")
        + " note |",
        "|---|" + "---:|" * (len(exporters) + 7 + levels + 2 * latency) + "---|",
    ]

    def f(r, key, fmt):
        return format(r[key], fmt) if isinstance(r.get(key), (int, float)) else ""

    models: dict[str, dict[str, dict]] = {}
    for r in report["rows"]:
        models.setdefault(r["model"], {})[r.get("exporter", "")] = r
    for model, by in models.items():
        timed = next((r for r in by.values() if "dml_ms" in r), {})
        notes = [
            f"{e}: {r.get('error') or r.get('speed_error') or r.get('compile_error')}"[:70]
            for e, r in by.items()
            if r.get("error") or r.get("speed_error") or r.get("compile_error")
        ]
        if timed.get("ort_cpu_error"):
            why = timed["ort_cpu_error"].split("failed:")[-1].strip()
            notes.append(f"onnxruntime: {why}"[:80])
        errs = " | ".join(f(by.get(e, {}), "rel_err", ".1e") for e in exporters)
        # reports before dml_cold_s_<level> timed the first call alone: no figure for them
        timed_import = any(k.startswith("dml_cold_s_") for k in timed)
        first = f(timed, "dml_cold_s", ".1f") if timed_import else ""
        opt = ""
        if levels:
            both = timed.get("dml_ms_disable") and timed.get("dml_ms_all")
            opt = f" {timed['dml_ms_disable'] / timed['dml_ms_all']:.2f} |" if both else " |"
        lines.append(
            f"| {model} | {errs} | {timed.get('batch', '')} | {f(timed, 'dml_ms', '.2f')} |{opt} "
            f"{f(timed, 'x_eager', '.2f')} | {f(timed, 'x_compile', '.2f')} | "
            f"{f(timed, 'x_ort_cpu', '.1f')} | {first} | "
            f"{f(timed, 'torch_compile_first_s', '.1f')} |"
            + (
                f" {f(timed, 'dml_b1_ms', '.3f')} | {f(timed, 'x_eager_b1', '.2f')} |"
                if latency
                else ""
            )
            + f" {'; '.join(notes)} |"
        )
    return lines
