"""The ONNX models suite: models exported from PyTorch and run through
``dml_jax.onnx.InferenceSession`` as users run them, against PyTorch at its best on the same
card, in the same process, at the same precision; agreement checked on the timed outputs.

The families (``onnx_families``) are built with random weights at their published sizes (toy
sizes under ``--quick``) and exported by PyTorch's TorchScript exporter (``dynamo=False``,
opset 17, batch and sequence axes dynamic), or by dynamo too (``--exporters torchscript
dynamo``: opset 18, static shapes). Per model:

- **Agreement in float32** (``rel_err`` per exporter): the export at ``--check-batch`` through
  ``InferenceSession.run`` against the PyTorch model on the same inputs (the largest absolute
  difference over the reference's largest magnitude).
- **Speed** of the first exporter's export at the timed batch (the family's, or ``--batch``) in
  ``--dtype`` (float16 by default, exported from the half model on the GPU). dml_jax is timed
  on the path ``run`` takes (``dml``: its program, the weights passed as arguments, inputs and
  outputs left on the device), at each graph optimization level of ``--levels``, and as
  ``dml baked``: the weights folded into the program as compile-time constants (what
  onnxruntime's constant folding and ``torch.compile``'s freezing do; not what ``run`` does on
  a GPU). PyTorch runs in each configuration of ``torch_best`` (tuned eager, BatchNorm folded,
  ``torch.compile`` in each mode with freezing). All are sampled in turn
  (``Timer.alternate``: ``--samples`` rounds, at least 10), each sample many dispatches and
  one sync; the report holds every configuration's median, p10 and p90, and each ratio
  (``x_eager``: the best eager configuration over ``dml``; ``x_compile``: the best compile
  mode; ``x_torch``: the best of all) as the median of the per-round ratios with their p10 and
  p90. A ratio whose spread holds 1.0 is marked: the run cannot tell which side is faster.
- **Agreement on the timed outputs** (``agree``): every timed configuration's output, dml_jax's
  and PyTorch's, against PyTorch eager's in the timed precision at the timed batch; beside it
  ``agree_floor``, PyTorch eager in that precision against itself in float32 (what the
  precision alone costs).
- **Latency at batch 1** (``--no-latency``: not): one example of the same inputs, each call
  synced on its own (``Timer.latency``, at least 50 calls a configuration, in turn): dml_jax's
  program as above and ``session.run`` whole (host arrays in and out), PyTorch eager, eager in
  a CUDA graph and the fastest compile mode at the timed batch recompiled at batch 1; median
  and p90 of the per-call times.
- **First call**: dml_jax's import and first call (trace, compile, run) at the first level
  (``dml_cold_s``), against each compile mode's first call with cold on-disk caches.
- onnxruntime's CPU provider (``ort_cpu_ms``, in a child process; ``--no-ort-cpu``: not).

Needs torch, torchvision, timm, transformers and onnx (onnxscript for the dynamo exporter).
Without PyTorch the suite runs one small model written with ``onnx.helper`` (``mlp``) against
onnxruntime alone, and records the PyTorch models as skipped. ``--quick``: that model, and with
PyTorch ``mobilenet_v2`` and ``bert`` at batch 2 and toy sizes.
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

from .. import torch_best
from ..harness import Run, error_text, jax_sync, ratio, summary
from .onnx_families import FAMILIES

MIN_SAMPLES = 10  # rounds of alternated throughput samples, at least
MIN_CALLS = 50  # batch-1 calls a configuration, at least


def export(model, args, path, exporter, dynamic):
    """``model`` on ``args`` exported to ``path``; the file's types checked (``check_types``)."""
    import torch

    names = [f"input_{k}" for k in range(len(args))]
    if exporter == "torchscript":
        # The TorchScript exporter cannot export PyTorch's fused attention fast path, nor, in
        # float16, transformers' SDPA attention (below): both off for the export only (PyTorch
        # is timed with them on).
        fast = torch.backends.mha.get_fastpath_enabled()
        torch.backends.mha.set_fastpath_enabled(False)
        axes = {n: dict(dynamic) for n in names}
        if len(args) > 1:  # the extra inputs of the UNet block share only the batch axis
            axes = {names[0]: dict(dynamic), **{n: {0: "batch"} for n in names[1:]}}
        restore = _eager_attention(model)
        try:
            torch.onnx.export(model, args, path, opset_version=17, dynamo=False,
                              input_names=names, output_names=["output"], dynamic_axes=axes)  # fmt: skip
        finally:
            torch.backends.mha.set_fastpath_enabled(fast)
            restore()
    else:
        torch.onnx.export(model, args, path, opset_version=18, dynamo=True, input_names=names,
                          output_names=["output"], external_data=False)  # fmt: skip
    check_types(path)


def _eager_attention(model) -> Any:
    """Every transformers model inside ``model`` set to its eager attention; returns what
    restores their own. PyTorch 2.11's TorchScript exporter writes SDPA with a boolean mask
    in float16 as float32 scores it never casts back (its mask's constants are float32): the
    rest of the network then exported in float32, float32 weights and all, with float16
    LayerNormalization scales that onnxruntime refuses (BERT, GPT-2 and CLIP's text tower of
    the 2026-11-27 page; on an H200 BERT-base's "float16" export ran its products on float32
    arithmetic, 17.4 ms a call at batch 32 against PyTorch eager's 3.8)."""
    changed = []
    for m in model.modules():
        config = getattr(m, "config", None)
        implementation = getattr(config, "_attn_implementation", None)
        if hasattr(m, "set_attn_implementation") and implementation not in (None, "eager"):
            m.set_attn_implementation("eager")
            changed.append((m, implementation))

    def restore() -> None:
        for m, implementation in changed:
            m.set_attn_implementation(implementation)

    return restore


def check_types(path: str) -> None:
    """Raises where the ONNX file at ``path`` binds one type parameter of a node to two types
    (onnx's shape inference with type checks): such a file is no model of its declared
    precision (onnxruntime refuses it), and a timing of it would say nothing."""
    import onnx

    model = onnx.load(path, load_external_data=False)  # the types alone: no weights read
    try:
        onnx.shape_inference.infer_shapes(model, check_type=True)
    except Exception as e:  # onnx's InferenceError / ValidationError, whose types vary
        raise ValueError(f"the export's types are inconsistent: {str(e)[:300]}") from None


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


def _first(out):
    import torch

    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, dict):
        return next(iter(out.values()))
    if hasattr(out, "__getitem__"):
        return out[0]
    return out


def _host(out: Any) -> np.ndarray:
    """The first output of a dml_jax or PyTorch call, as float32 NumPy."""
    if isinstance(out, (tuple, list)):
        out = out[0]
    if hasattr(out, "detach"):
        out = _first(out).detach().float().cpu().numpy()
    return np.asarray(out, np.float32)


def _dml_calls(
    run: Run, row: dict, path: str, feeds: list[np.ndarray]
) -> tuple[dict[str, Any], Any]:
    """dml_jax's configurations for ``feeds``: ``dml`` (``run``'s program at the main level),
    ``dml <level>`` for the other levels of ``--levels`` and ``dml baked``, each a call with no
    argument, and the main level's session. Records the import plus first call of the first
    level (``dml_cold_s``) and of each (``dml_cold_s_<level>``)."""
    import jax

    from dml_jax.onnx import InferenceSession, SessionOptions

    levels = list(getattr(run.args, "levels", None) or ["all"])
    main = "all" if "all" in levels else levels[-1]
    calls: dict[str, Any] = {}
    main_session = None
    for level in levels:
        options = SessionOptions()
        options.graph_optimization_level = level
        start = time.perf_counter()
        session = InferenceSession(path, options, compiler_options=_xla_options(run))
        feed = {i.name: a for i, a in zip(session.get_inputs(), feeds)}
        call = session._device_call(feed)
        jax_sync(call())
        cold = round(time.perf_counter() - start, 2)
        row[f"dml_cold_s_{level}"] = cold
        row.setdefault("dml_cold_s", cold)
        calls["dml" if level == main else f"dml {level}"] = call
        if level == main:
            main_session = session
            if session._device.platform != "cpu":  # on the CPU run's program is the baked one
                fn = jax.jit(session.fn_on(), compiler_options=session.compiler_options or None)
                inputs = [jax.device_put(a, session._device) for a in feeds]
                calls["dml baked"] = lambda fn=fn, inputs=inputs: fn(*inputs)
    return calls, main_session


def _time(run: Run, row: dict, calls: dict[str, Any], syncs: dict[str, Any]) -> None:
    """Throughput of every configuration, sampled in turn: ``ms`` (name -> median, p10, p90)
    and the ratios against ``dml``."""
    samples = max(MIN_SAMPLES, run.args.samples) if not run.quick else max(1, run.args.samples)
    taken = run.timer.alternate({n: (c, syncs[n]) for n, c in calls.items()}, samples)
    row["ms"] = {n: summary(s) for n, s in taken.items()}
    row["dml_ms"] = row["ms"]["dml"]["median"]
    medians = {n: row["ms"][n]["median"] for n in taken}
    for key, prefix in (("eager", "eager"), ("compile", "compile"), ("torch", "")):
        names = [n for n in medians if not n.startswith("dml") and n.startswith(prefix)]
        if names:
            name = min(names, key=medians.__getitem__)
            row[f"best_{key}"] = name
            row[f"x_{key}"] = ratio(taken[name], taken["dml"])
    baked = row["ms"].get("dml baked")
    if baked:
        row["x_baked"] = ratio(taken["dml"], taken["dml baked"])


def _latency(run: Run, row: dict, calls: dict[str, Any], syncs: dict[str, Any]) -> None:
    samples = MIN_CALLS if not run.quick else 3
    taken = run.timer.latency({n: (c, syncs[n]) for n, c in calls.items()}, samples)
    row["b1_ms"] = {n: summary(s) for n, s in taken.items()}
    torch_names = [n for n in taken if not n.startswith("dml")]
    if torch_names:
        name = min(torch_names, key=lambda n: row["b1_ms"][n]["median"])
        row["best_torch_b1"] = name
        row["x_torch_b1"] = ratio(taken[name], taken["dml"])


def _ort(run: Run, row: dict, path: str, feeds: list[np.ndarray]) -> None:
    if not getattr(run.args, "ort_cpu", True):
        return
    try:
        ort_s = _ort_cpu_seconds(path, feeds)
        row.update(ort_cpu_ms=ort_s * 1e3, x_ort_cpu=ort_s / (row["dml_ms"] / 1e3))
    except Exception as e:  # onnxruntime lacks an op, or crashed: recorded
        row["ort_cpu_error"] = error_text(e)


def run_mlp(run: Run) -> None:
    """The PyTorch-free case: agreement with onnxruntime's CPU provider, then speed."""
    from dml_jax.onnx import InferenceSession

    row: dict = {"model": "mlp", "exporter": "onnx.helper", "reference": "onnxruntime CPU"}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "mlp.onnx")
        try:
            feeds = _mlp_model(path, 2 if run.quick else run.args.batch or 32)
            want = _ort_session(path).run(None, {"x": feeds[0]})[0]
            got = InferenceSession(path).run(None, {"x": feeds[0]})[0]
            row["rel_err"] = agreement(got, want)
            row.update(batch=int(feeds[0].shape[0]), dtype="float32")
            calls, session = _dml_calls(run, row, path, feeds)
            syncs = dict.fromkeys(calls, jax_sync)
            row["agree"] = {n: agreement(_host(c()), want) for n, c in calls.items()}
            _time(run, row, calls, syncs)
            if run.args.latency:
                one = {"x": feeds[0][:1]}
                b1 = {"dml": session._device_call(one), "dml run()": lambda: session.run(None, one)}
                _latency(run, row, b1, dict.fromkeys(b1, jax_sync))
            _ort(run, row, path, feeds)
        except Exception as e:
            row["error"] = error_text(e)
    run.add(row)


def random_model(name: str, torch, quick: bool):
    """The family ``name`` in eval mode, with random weights everywhere (seed 0):
    zero-initialized heads (torchvision's ViT) and default normalization statistics would make
    the outputs constant and the comparison empty."""
    torch.manual_seed(0)
    model = FAMILIES[name].build(quick).eval()
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
    family = FAMILIES[name]
    model = random_model(name, torch, run.quick)
    args = family.inputs(opts.check_batch, run.quick)
    feeds = [a.numpy() for a in args]
    device = "cuda" if run.torch is not None else "cpu"
    with torch.no_grad():  # the float32 reference (TF32 is off for the run)
        want = _first(model.to(device)(*[a.to(device) for a in args])).float().cpu().numpy()
    model.cpu()
    for exporter in opts.exporters:
        row = {"model": name, "exporter": exporter, "reference": "PyTorch"}
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, f"{name}.onnx")
            try:
                t = time.perf_counter()
                with torch.no_grad():
                    export(model, args, path, exporter, family.dynamic)
                row["export_s"] = round(time.perf_counter() - t, 2)
                s = InferenceSession(path)
                feed = {i.name: x for i, x in zip(s.get_inputs(), feeds)}
                got = s.run(None, feed)[0]
                row["rel_err"] = agreement(got, want)
                row["dml_nodes"] = len(next(iter(s._programs.values())).imported.graph.nodes)
                del s
            except Exception as e:
                row["error"] = error_text(e)
                row["error_trace"] = traceback.format_exc()[-2000:]
            if exporter == opts.exporters[0] and "rel_err" in row and not run.over_budget():
                try:
                    speed(run, name, model, path, row, torch)
                except Exception as e:
                    row["speed_error"] = error_text(e)
                    row["speed_trace"] = traceback.format_exc()[-2000:]
        run.add(row)


def _half_copy(model):
    """A float16 copy of ``model`` on the GPU: ``Module.half()`` converts in place, and the
    exporters after the timed one check the float32 model."""
    return copy.deepcopy(model).cuda().half()


def speed(run: Run, name: str, model, path: str, row: dict, torch) -> None:
    opts = run.args
    family = FAMILIES[name]
    batch = 2 if run.quick else (opts.batch or family.batch)
    args = family.inputs(batch, run.quick)
    path = path[:-5] + "_speed.onnx"  # exported again at the timed batch (dynamo's are static)
    on_gpu = run.torch is not None
    half = opts.dtype == "float16" and on_gpu
    timed = _half_copy(model) if half else (copy.deepcopy(model).cuda() if on_gpu else model)
    if on_gpu:
        args = tuple(a.cuda().half() if half and a.is_floating_point() else a.cuda() for a in args)
    row.update(dtype="float16" if half else "float32", batch=batch)
    with torch.no_grad():
        export(timed, args, path, opts.exporters[0], family.dynamic)
    feeds = [a.cpu().numpy() for a in args]
    calls, session = _dml_calls(run, row, path, feeds)
    syncs = dict.fromkeys(calls, jax_sync)
    if not on_gpu:  # PyTorch on the CPU is no anchor for a GPU run
        _time(run, row, calls, syncs)
        _ort(run, row, path, feeds)
        return
    configs = torch_best.Configurations(torch)
    with torch_best.tuned(torch):
        model32 = copy.deepcopy(model).cuda()
        floor_ref = _host(model32(*[a.float() if a.is_floating_point() else a for a in args]))
        del model32
        fast, fast_args = torch_best.placed(torch, timed, args, family.image)
        configs.eager(fast, fast_args)
        configs.eager_fused(fast, fast_args)
        if opts.compile:
            configs.compiled(fast, fast_args, tuple(opts.compile_modes))
        ref = _host(configs.calls["eager"]())
        row["agree_floor"] = agreement(ref, floor_ref)
        row["agree"] = {
            n: agreement(_host(c()), ref) for n, c in {**calls, **configs.calls}.items()
        }
        row["torch_first_s"] = configs.first_s
        if configs.errors:
            row["torch_errors"] = configs.errors
        syncs.update(dict.fromkeys(configs.calls, configs.sync))
        _time(run, row, {**calls, **configs.calls}, syncs)
        best_compile = row.get("best_compile")
        configs.close()
        if opts.latency and batch > 1:
            _batch_one(run, row, session, feeds, fast, fast_args, best_compile, torch)
    _ort(run, row, path, feeds)
    del fast, timed
    torch.cuda.empty_cache()


def _batch_one(run, row, session, feeds, model, args, best_compile, torch) -> None:
    """Latency at batch 1: the first example of each input, every configuration synced per
    call; agreement of dml_jax's batch-1 output with PyTorch eager's."""
    import jax

    one = {i.name: a[:1] for i, a in zip(session.get_inputs(), feeds)}
    calls: dict[str, Any] = {
        "dml": session._device_call(one),
        "dml run()": lambda: session.run(None, one),
    }
    syncs = dict.fromkeys(calls, jax_sync)
    configs = torch_best.Configurations(torch)
    one_args = tuple(a[:1].clone(memory_format=torch.preserve_format) for a in args)
    configs.eager(model, one_args)
    configs.cuda_graph(model, one_args)
    if best_compile:
        configs.compiled(model, one_args, (best_compile.removeprefix("compile "),))
    ref = _host(configs.calls["eager"]())
    row["agree_b1"] = agreement(_host(jax.block_until_ready(calls["dml"]())), ref)
    syncs.update(dict.fromkeys(configs.calls, configs.sync))
    _latency(run, row, {**calls, **configs.calls}, syncs)
    if configs.errors:
        row["torch_errors_b1"] = configs.errors
    configs.close()


QUICK_MODELS = ("mobilenet_v2", "bert")


def add_arguments(p: Any) -> None:
    p.add_argument("--only", nargs="*", default=None, help="model names (default: all)")
    p.add_argument("--exporters", nargs="*", default=["torchscript"], help="torchscript, dynamo")
    p.add_argument("--no-compile", dest="compile", action="store_false", help="no torch.compile")
    p.add_argument(
        "--compile-modes",
        nargs="*",
        default=list(torch_best.COMPILE_MODES),
        help="torch.compile modes timed (default: %(default)s)",
    )
    p.add_argument("--check-batch", type=int, default=2, help="batch of the float32 agreement")
    p.add_argument(
        "--batch", type=int, default=None, help="timed batch (default: each family's own)"
    )
    p.add_argument(
        "--dtype",
        choices=("float32", "float16"),
        default="float16",
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
    p.add_argument("--no-latency", dest="latency", action="store_false", help="no batch-1 latency")
    p.add_argument(
        "--no-ort-cpu", dest="ort_cpu", action="store_false", help="no onnxruntime CPU time"
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
    run.report["onnx_device"] = jax.default_backend()
    # The same precision on both sides: dml_jax computes float32 products in float32, so
    # PyTorch's TF32 convolutions and matrix products are switched off.
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    names = run.args.only or (list(QUICK_MODELS) if run.quick else list(FAMILIES))
    for name in names:
        if run.done(model=name):
            continue
        if run.over_budget():
            run.skip(f"models from {name} on", f"--budget-s {run.args.budget_s}")
            break
        try:
            run_model(run, name, torch)
        except ModuleNotFoundError as e:
            if (e.name or "").split(".")[0] not in _MODEL_SOURCES:
                run.add({"model": name, "error": error_text(e)})
                continue
            run.skip(f"model {name}", f"{e.name} is not importable: the model comes from it")
        except Exception as e:
            run.add({"model": name, "error": error_text(e)})
    return 0


# The packages the PyTorch models come from: where one is missing, its models are skipped
# (said why) rather than recorded as errors.
_MODEL_SOURCES = ("torchvision", "timm", "transformers", "diffusers", "onnxscript")


def _ratio_text(r: dict | None) -> str:
    """A ratio with its spread: ``1.23 (1.18-1.30)``, marked ``~`` when the spread holds 1.0."""
    if not r:
        return ""
    if isinstance(r, (int, float)):  # a report from before the paired samples: no spread
        return f"{r:.2f}"
    mark = " ~" if r.get("crosses_1") else ""
    return f"{r['median']:.2f} ({r['p10']:.2f}-{r['p90']:.2f}){mark}"


def _short(name: str | None) -> str:
    return (name or "").replace("compile ", "").replace("max-autotune", "max-at")


def table(report: dict) -> list[str]:
    """One line per model: float32 agreement of each export, then the timed export's speed
    against PyTorch's best, agreement on the timed outputs, and batch-1 latency."""
    exporters = list(dict.fromkeys(r.get("exporter", "") for r in report["rows"]))
    lines = [
        (
            "`rel err`: max |dml - PyTorch| / max |PyTorch| in float32, per exporter. Then the "
            "first export at the row's batch and type, timed as `run` runs it (weights as "
            "arguments, inputs and outputs on the device): `dml ms` the median; `x eager` / "
            "`x compile`: the best tuned-eager / best `torch.compile` configuration's time over "
            "dml_jax's (above 1: dml_jax is faster; median of the rounds' ratios, p10-p90 in "
            "brackets, `~` where the spread holds 1.0), `compile`: that mode; `x baked`: "
            "dml_jax with its weights folded in as constants, its speed-up over `run`'s "
            "program. `agree`: dml_jax's timed output against PyTorch eager's (same inputs, "
            "same type), beside `floor`: PyTorch's own in that type against float32. `b1 ms`: "
            "dml_jax's latency at batch 1, each call synced (median / p90), `x b1`: the best "
            "PyTorch batch-1 configuration (`b1 best`) over it. `first s`: dml_jax's import "
            "and first call; `compile first s`: the best compile mode's first call (cold "
            "caches)."
        ),
        "",
        "| model | "
        + " | ".join(f"rel err {e}" for e in exporters)
        + " | batch | dml ms | x eager | x compile | compile | x baked | agree | floor |"
        + " b1 ms | x b1 | b1 best | first s | compile first s | x ORT CPU | note |",
        "|---|" + "---:|" * (len(exporters) + 15) + "---|",
    ]

    def f(value, fmt):
        return format(value, fmt) if isinstance(value, (int, float)) else ""

    models: dict[str, dict[str, dict]] = {}
    for r in report["rows"]:
        models.setdefault(r["model"], {})[r.get("exporter", "")] = r
    for model, by in models.items():
        t = next((r for r in by.values() if "dml_ms" in r), {})
        notes = [
            f"{e}: {r.get('error') or r.get('speed_error')}"[:70]
            for e, r in by.items()
            if r.get("error") or r.get("speed_error")
        ]
        if t.get("ort_cpu_error"):
            notes.append(f"onnxruntime: {t['ort_cpu_error'].split('failed:')[-1].strip()}"[:80])
        errs = " | ".join(f(by.get(e, {}).get("rel_err"), ".1e") for e in exporters)
        agree = t.get("agree", {})
        b1 = t.get("b1_ms", {}).get("dml")
        best = t.get("best_compile")
        lines.append(
            f"| {model} | {errs} | {t.get('batch', '')} {t.get('dtype', '')} | "
            f"{f(t.get('dml_ms'), '.3f')} | {_ratio_text(t.get('x_eager'))} | "
            f"{_ratio_text(t.get('x_compile'))} | {_short(best)} | "
            f"{_ratio_text(t.get('x_baked'))} | {f(agree.get('dml'), '.1e')} | "
            f"{f(t.get('agree_floor'), '.1e')} | "
            + (f"{b1['median']:.3f} / {b1['p90']:.3f}" if b1 else "")
            + f" | {_ratio_text(t.get('x_torch_b1'))} | {_short(t.get('best_torch_b1'))} | "
            f"{f(t.get('dml_cold_s'), '.1f')} | "
            f"{f(t.get('torch_first_s', {}).get(best), '.1f')} | "
            f"{f(t.get('x_ort_cpu'), '.1f')} | {'; '.join(notes)} |"
        )
    return lines
