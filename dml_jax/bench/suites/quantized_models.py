"""The quantized models suite: models quantized by onnxruntime's quantization tools from their
float32 exports, run through ``dml_jax.onnx.InferenceSession``, against the float16 export of
the same model (what a GPU user runs unquantized) on the same card, in the same run.

- ``bert``: BERT-base (128 tokens, batch 32; the ONNX models suite's family) by
  ``quantize_dynamic`` (DynamicQuantizeLinear + MatMulInteger, int8 weights per tensor).
- ``resnet50``: torchvision's ResNet-50 (batch 64) by ``quantize_static`` in the QDQ format,
  int8 activations (symmetric) and int8 weights per channel, MinMax calibration on four random
  batches of two images.

Per model: ``ms`` of ``run``'s program (weights as arguments, inputs and outputs on the device)
for the quantized file and the float16 export, sampled in turn; ``x_float16``: the float16
export's time over the quantized one's (above 1: the quantized model is faster); the first
calls (``first_s``: session, trace, compile and run of each); agreement: the quantized output
against onnxruntime's CPU provider on the same file (``agree_ort``, its optimizations off),
against the float32 export's through dml_jax (``agree_float32``, what the quantization costs),
and the float16 export's against the float32 one beside it.

Needs PyTorch (and transformers, torchvision) and onnxruntime's quantization tools. Without a
GPU, and under ``--quick`` (any machine, no PyTorch): a small convolutional network written
with ``onnx.helper`` (``cnn``), quantized the same QDQ way, against its float32 file.
"""

from __future__ import annotations

import copy
import os
import tempfile
import time
from typing import Any

import numpy as np

from ..harness import Run, error_text, jax_sync, ratio, summary
from .onnx_models import agreement

MODELS = {"bert": "dynamic int8", "resnet50": "QDQ int8"}
CALIBRATION = 4  # random batches of two the static quantization calibrates on


def add_arguments(p: Any) -> None:
    p.add_argument("--only", nargs="*", default=None, help=f"models (default: {list(MODELS)})")


def quantize(
    kind: str, source: str, path: str, inputs: list[np.ndarray], symmetric: bool = True
) -> None:
    """``source`` (a float32 ONNX file) quantized by onnxruntime's tools to ``path``:
    ``dynamic int8`` or ``QDQ int8`` (calibrated on random batches shaped like ``inputs``;
    activations symmetric unless ``symmetric`` is false: onnxruntime's default)."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    if kind == "dynamic int8":
        quantize_dynamic(source, path, weight_type=QuantType.QInt8)
        return
    rng = np.random.default_rng(1)
    batches = iter(
        [{f"input_{k}": rng.standard_normal((2, *x.shape[1:])).astype(np.float32)
          for k, x in enumerate(inputs)} for _ in range(CALIBRATION)]
    )  # fmt: skip

    class Reader(CalibrationDataReader):
        def get_next(self):
            return next(batches, None)

    quantize_static(source, path, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                    extra_options={"ActivationSymmetric": symmetric})  # fmt: skip


def _session(row: dict, form: str, path: str, inputs: list[np.ndarray]):
    """The session of ``path`` and its timed call on ``inputs`` (``run``'s program, inputs on
    the device); records its first call and returns the call and its output (float32)."""
    from dml_jax.onnx import InferenceSession

    start = time.perf_counter()
    session = InferenceSession(path)
    feed = {i.name: x for i, x in zip(session.get_inputs(), inputs)}
    call = session._device_call(feed)
    out = call()
    jax_sync(out)
    row.setdefault("first_s", {})[form] = round(time.perf_counter() - start, 2)
    return call, np.asarray(out[0], np.float32)


def _ort(path: str, inputs: list[np.ndarray]) -> np.ndarray:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    return s.run(None, {i.name: x for i, x in zip(s.get_inputs(), inputs)})[0]


def measure(run: Run, row: dict, paths: dict[str, str], inputs: dict[str, list]) -> None:
    """Times the quantized file against the reference form(s) in ``paths`` (``float16`` or
    ``float32``; ``float32`` also the agreement's reference), in turn, and compares outputs."""
    calls, outs = {}, {}
    for form, path in paths.items():
        calls[form], outs[form] = _session(row, form, path, inputs[form])
    samples = max(1, run.args.samples) if run.quick else max(10, run.args.samples)
    timed = {f: c for f, c in calls.items() if f != "float32" or "float16" not in calls}
    taken = run.timer.alternate({f: (c, jax_sync) for f, c in timed.items()}, samples)
    row["ms"] = {f: summary(s) for f, s in taken.items()}
    reference = "float16" if "float16" in taken else "float32"
    row["reference"] = reference
    row["x_reference"] = ratio(taken[reference], taken["int8"])
    row["agree_ort"] = agreement(outs["int8"], _ort(paths["int8"], inputs["int8"]))
    row["agree_float32"] = agreement(outs["int8"], outs["float32"])
    if "float16" in outs:
        row["agree_float16_float32"] = agreement(outs["float16"], outs["float32"])


def _cnn(path: str, batch: int) -> list[np.ndarray]:
    """A small float32 network written with onnx.helper (three convolutions with ReLU, a
    residual Add, global pooling, a Gemm): the suite's PyTorch-free case. Its inputs."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)

    def conv(name, c, k, src, out, relu=True):
        w = (rng.standard_normal((k, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
        b = (rng.standard_normal(k) * 0.05).astype(np.float32)
        inits.extend([numpy_helper.from_array(w, f"{name}_w"),
                      numpy_helper.from_array(b, f"{name}_b")])  # fmt: skip
        mid = out + "_pre" if relu else out
        nodes.append(helper.make_node("Conv", [src, f"{name}_w", f"{name}_b"], [mid],
                                      pads=[1, 1, 1, 1]))  # fmt: skip
        if relu:
            nodes.append(helper.make_node("Relu", [mid], [out]))

    nodes: list = []
    inits: list = []
    conv("c1", 4, 32, "input_0", "h1")
    conv("c2", 32, 32, "h1", "h2")
    conv("c3", 32, 32, "h2", "h3", relu=False)
    fc = (rng.standard_normal((32, 10)) / np.sqrt(32)).astype(np.float32)
    inits.append(numpy_helper.from_array(fc, "fc"))
    nodes += [
        helper.make_node("Add", ["h3", "h1"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("MatMul", ["f", "fc"], ["output"]),
    ]
    graph = helper.make_graph(
        nodes, "cnn", [helper.make_tensor_value_info("input_0", TensorProto.FLOAT, ["b", 4, 16, 16])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["b", 10])], inits,
    )  # fmt: skip
    # IR 10: the onnxruntime of the GPU machine reads no newer
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    onnx.save(model, path)
    return [rng.standard_normal((batch, 4, 16, 16)).astype(np.float32)]


def run_cnn(run: Run) -> None:
    row: dict = {"model": "cnn", "quantization": "QDQ int8", "exporter": "onnx.helper"}
    with tempfile.TemporaryDirectory() as tmp:
        paths = {f: os.path.join(tmp, f"cnn_{f}.onnx") for f in ("float32", "int8")}
        try:
            inputs = _cnn(paths["float32"], 2 if run.quick else 64)
            row["batch"] = int(inputs[0].shape[0])
            quantize("QDQ int8", paths["float32"], paths["int8"], inputs)
            measure(run, row, paths, {"float32": inputs, "int8": inputs})
        except Exception as e:
            row["error"] = error_text(e)
    run.add(row)


def run_model(run: Run, name: str, torch: Any) -> None:
    from .onnx_families import FAMILIES
    from .onnx_models import export, random_model

    family, kind = FAMILIES[name], MODELS[name]
    row: dict = {"model": name, "quantization": kind, "batch": family.batch}
    with tempfile.TemporaryDirectory() as tmp:
        paths = {f: os.path.join(tmp, f"{name}_{f}.onnx") for f in ("float32", "float16", "int8")}
        try:
            model = random_model(name, torch, False)
            args = family.inputs(family.batch, False)
            feeds = [a.numpy() for a in args]
            with torch.no_grad():
                export(model, args, paths["float32"], "torchscript", family.dynamic)
                half = copy.deepcopy(model).cuda().half()
                on_gpu = tuple(a.cuda().half() if a.is_floating_point() else a.cuda() for a in args)
                export(half, on_gpu, paths["float16"], "torchscript", family.dynamic)
                del half
            start = time.perf_counter()
            quantize(kind, paths["float32"], paths["int8"], feeds)
            row["quantize_s"] = round(time.perf_counter() - start, 1)
            halves = [a.astype(np.float16) if a.dtype == np.float32 else a for a in feeds]
            measure(run, row, paths, {"float32": feeds, "float16": halves, "int8": feeds})
        except Exception as e:
            row["error"] = error_text(e)
    run.add(row)
    torch.cuda.empty_cache()


def run(run: Run) -> int:
    if run.quick or run.torch is None:
        run_cnn(run)
        if run.quick:
            run.skip("PyTorch models", "--quick")
        return 0
    torch = run.torch
    for name in run.args.only or list(MODELS):
        if run.done(model=name):
            continue
        if run.over_budget():
            run.skip(name, f"--budget-s {run.args.budget_s}")
            continue
        try:
            run_model(run, name, torch)
        except ModuleNotFoundError as e:  # torchvision, transformers
            run.skip(f"model {name}", f"{e.name} is not importable: the model comes from it")
    return 0


def _ms(row: dict, form: str) -> str:
    s = row.get("ms", {}).get(form)
    return f"{s['median']:.3f} ({s['p10']:.3f}-{s['p90']:.3f})" if s else ""


def table(report: dict) -> list[str]:
    legend = (
        "Models quantized by onnxruntime's tools from their float32 exports (`quantization`), "
        "against the same model's float16 export (without a GPU: its float32 file), both "
        "timed as `run` runs them (weights as arguments, inputs and outputs on the device): "
        "`ms` median (p10-p90), sampled in turn; `x`: the reference's time over the quantized "
        "model's (above 1: quantized faster; `~` where the spread holds 1.0). `first s`: "
        "session and first call of each. `vs ort`: the quantized output against onnxruntime's "
        "CPU provider on the same file; `vs f32`: against the float32 export's (what the "
        "quantization costs); `f16 vs f32`: the float16 export's, beside it."
    )
    lines = [
        legend,
        "",
        (
            "| model | quantization | batch | int8 ms | reference | reference ms | x | first s "
            "(int8 / reference) | vs ort | vs f32 | f16 vs f32 |"
        ),
        "|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["rows"]:
        if r.get("error"):
            lines.append(f"| {r['model']} | {r.get('quantization', '')} | {r.get('batch', '')} | "
                         f"{r['error'][:120]} | | | | | | | |")  # fmt: skip
            continue
        ref, x = r.get("reference", ""), r.get("x_reference") or {}
        first = r.get("first_s", {})
        xs = f"{'~' if x.get('crosses_1') else ''}{x.get('median', 0):.2f}"
        f16 = r.get("agree_float16_float32")
        lines.append(
            f"| {r['model']} | {r['quantization']} | {r.get('batch', '')} | {_ms(r, 'int8')} | "
            f"{ref} | {_ms(r, ref)} | {xs} | {first.get('int8', 0):.1f} / "
            f"{first.get(ref, 0):.1f} | {r.get('agree_ort', 0):.1e} | "
            f"{r.get('agree_float32', 0):.1e} | {'' if f16 is None else f'{f16:.1e}'} |"
        )
    return lines


__all__ = ["add_arguments", "run", "table"]
