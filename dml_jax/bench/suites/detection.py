"""The detection suite: torchvision's detectors and a YOLO-style head (``dml_jax.bench.detectors``:
random weights of unit gain, 5 classes, no score threshold), exported by PyTorch's TorchScript
exporter at opset 17 with one image, run one image a call through ``InferenceSession.run``
(NumPy in and out, as onnxruntime's), against PyTorch eager on the same card and onnxruntime's
CPU provider.

Per model:

- **ms per image**, latency (each call synced on its own, the three taken in turn, at least
  ``MIN_CALLS`` each; median, p10-p90): dml_jax's ``run``, PyTorch eager (float32 without TF32,
  as dml_jax computes FLOAT32, ``inference_mode``, ``cudnn.benchmark``), onnxruntime on the
  CPU; ``x_eager`` / ``x_ort_cpu`` their times over dml_jax's.
- **first call** (``first_s``): the session and its first call on the first image (import,
  the run-time sizes' probes, every program's compile); ``second_image_s`` the first call on
  a second image and ``second_image_programs`` the programs it compiled, segments included
  (its detections and proposals per level are other counts: new run-time sizes).
- **agreement on the timed outputs**: detections (score, label, box) of dml_jax's timed call
  with no match in PyTorch's timed call's at 1e-3 (``unmatched``) and, as the spread between
  two implementations of the same model, onnxruntime's against PyTorch's
  (``ort_unmatched``): random weights leave many low scores within a thousandth.

``--quick`` (any machine, no PyTorch): the committed tiny detectors of tests/data/detection,
dml_jax against onnxruntime (``unmatched`` is then against onnxruntime's detections, which
these models' must be, row for row).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from typing import Any

import numpy as np

from ..harness import ROOT, Run, error_text, ratio, summary

MIN_CALLS = 10
# the tiny detectors --quick runs (Mask R-CNN's, 20 s on two cores, is tests/test_onnx_detection's)
QUICK_MODELS = ("faster_rcnn", "retinanet", "ssd", "yolo")
FIXTURES = ROOT / "tests" / "data" / "detection"
TORCH_DEVICE = "cuda:0"


def add_arguments(p: Any) -> None:
    from ..detectors import full_size

    p.add_argument("--only", nargs="*", default=None, help=f"models (default: {list(full_size())})")


def _feed(session: Any, image: np.ndarray) -> dict:
    return {session.get_inputs()[0].name: image}


def _outputs(session: Any, out: list) -> dict:
    return dict(zip([o.name for o in session.get_outputs()], out))


def _programs(session: Any) -> int:
    """Programs the session compiled: those ``run`` looks up and the segments before them."""
    return len(session._programs) + sum(
        need.program is not None for need in session._size_needs.values()
    )


def _dml(run: Run, row: dict, path: str, image: np.ndarray, second: np.ndarray):
    """dml_jax's session on ``path``: its first call, then a second image's first call and the
    programs it compiled. Returns (session, call, outputs of ``image``)."""
    from dml_jax.onnx import InferenceSession

    t = time.perf_counter()
    session = InferenceSession(path)
    got = _outputs(session, session.run(None, _feed(session, image)))
    row["first_s"] = round(time.perf_counter() - t, 2)
    row["programs"] = before = _programs(session)
    t = time.perf_counter()
    session.run(None, _feed(session, second))
    row["second_image_s"] = round(time.perf_counter() - t, 3)
    row["second_image_programs"] = _programs(session) - before
    return session, lambda: session.run(None, _feed(session, image)), got


def _ort(path: str, image: np.ndarray):
    import onnxruntime as ort

    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    feed = {session.get_inputs()[0].name: image}
    return session, lambda: session.run(None, feed)


def _latency(run: Run, row: dict, calls: dict[str, Any], syncs: dict[str, Any]) -> None:
    samples = max(MIN_CALLS, run.args.samples) if not run.quick else max(1, run.args.samples)
    taken = run.timer.latency({n: (c, syncs[n]) for n, c in calls.items()}, samples)
    row["ms"] = {n: summary(s) for n, s in taken.items()}
    for key, name in (("eager", "eager"), ("ort_cpu", "ort cpu")):
        if name in taken:
            row[f"x_{key}"] = ratio(taken[name], taken["dml"])


def _quick(run: Run) -> None:
    from ..detectors import rows, unmatched

    rng = np.random.default_rng(0)
    for name in run.args.only or QUICK_MODELS:
        path = str(FIXTURES / f"{name}.onnx")
        image, second = (rng.random((3, 96, 96), dtype=np.float32) for _ in range(2))
        row: dict = {"model": name, "image": 96}
        try:
            _, call, got = _dml(run, row, path, image, second)
            ref, ort_call = _ort(path, image)
            want = _outputs(ref, ort_call())
            row["detections"] = len(got["scores"])
            row["reference"] = "onnxruntime"  # no PyTorch: the detections are onnxruntime's
            row["unmatched"] = unmatched(rows(got), rows(want), 1e-3)
            nothing = lambda out: None  # both return host arrays
            _latency(run, row, {"dml": call, "ort cpu": ort_call}, {"dml": nothing,
                                                                    "ort cpu": nothing})  # fmt: skip
        except Exception as e:
            row["error"] = error_text(e)
        run.add(row)
    run.skip("PyTorch", "--quick: the tiny detectors against onnxruntime alone")


@contextlib.contextmanager
def _exact_float32(torch: Any):
    """PyTorch's convolutions and products without TF32 (dml_jax's FLOAT32 is float32), and
    cuDNN's algorithm search on; restored after."""
    saved = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32,
             torch.backends.cudnn.benchmark)  # fmt: skip
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    try:
        yield
    finally:
        (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32,
         torch.backends.cudnn.benchmark) = saved  # fmt: skip


def _model(run: Run, name: str, torch: Any) -> None:
    from ..detectors import export, full_size, rows, scaled, takes_list, unmatched

    build, side = full_size()[name]
    torch.manual_seed(0)
    model = build(torch).eval()
    scaled(torch, model)
    image, second = torch.rand(3, side, side), torch.rand(3, side, side)
    row: dict = {"model": name, "image": side}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, f"{name}.onnx")
        try:
            t = time.perf_counter()
            export(torch, model, image, path)
            row["export_s"] = round(time.perf_counter() - t, 1)
            x = image.numpy()
            session, call, _ = _dml(run, row, path, x, second.numpy())
            ref, ort_call = _ort(path, x)
            gpu = model.to(TORCH_DEVICE)
            on_gpu = image.to(TORCH_DEVICE)

            def eager():
                with torch.inference_mode():
                    out = gpu([on_gpu]) if takes_list(gpu) else gpu(on_gpu)
                return out[0] if takes_list(gpu) else out

            def torch_sync(_):
                torch.cuda.synchronize(TORCH_DEVICE)

            nothing = lambda out: None  # run and onnxruntime return host arrays
            calls = {"dml": call, "eager": eager, "ort cpu": ort_call}
            _latency(run, row, calls, {"dml": nothing, "eager": torch_sync, "ort cpu": nothing})
            # the timed calls' own outputs, compared
            got, want = _outputs(session, call()), eager()
            want = {k: v.detach().cpu().numpy() for k, v in want.items()}
            theirs = _outputs(ref, ort_call())
            row["detections"] = len(got["scores"])
            row["unmatched"] = unmatched(rows(got), rows(want), 1e-3)
            row["unmatched_1e2"] = unmatched(rows(got), rows(want), 1e-2)
            row["ort_unmatched"] = unmatched(rows(theirs), rows(want), 1e-3)
            row["ort_unmatched_1e2"] = unmatched(rows(theirs), rows(want), 1e-2)
        except Exception as e:
            row["error"] = error_text(e)
    run.add(row)
    del model
    torch.cuda.empty_cache()


def run(run: Run) -> int:
    from ..detectors import full_size

    if run.quick:
        _quick(run)
        return 0
    torch = run.torch
    if torch is None:
        return 0
    with _exact_float32(torch):
        for name in run.args.only or list(full_size()):
            if run.done(model=name):
                continue
            if run.over_budget():
                run.skip(name, f"--budget-s {run.args.budget_s}")
                continue
            _model(run, name, torch)
    return 0


def _ms(row: dict, name: str) -> str:
    s = row.get("ms", {}).get(name)
    return f"{s['median']:.1f} ({s['p10']:.1f}-{s['p90']:.1f})" if s else ""


def _x(row: dict, key: str) -> str:
    r = row.get(key)
    if not r:
        return ""
    text = f"{r['median']:.2f}"
    return f"~{text}" if r.get("crosses_1") else text


def table(report: dict) -> list[str]:
    legend = (
        "One image a call, float32, random weights (no score threshold). `ms`: latency per "
        "image (each call synced; median, p10-p90) of `InferenceSession.run`, PyTorch eager on "
        "the same card (no TF32) and onnxruntime on the CPU; `x`: their time over dml_jax's "
        "(`~` where the spread holds 1.0). `first s`: session and first call; `2nd image`: "
        "the first call on another image (s) and the programs it compiled, segments included "
        "(new run-time sizes). `unmatched`: dml_jax's detections with no PyTorch detection "
        "within 1e-3 of the timed calls (onnxruntime's against PyTorch's beside it, the spread "
        "between two implementations)."
    )
    header = (
        "| model | image | detections | dml ms | eager ms | ort cpu ms | x eager | x ort cpu "
        "| first s | 2nd image | unmatched (ort) |"
    )
    lines = [legend, "", header, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in report["rows"]:
        if r.get("error"):
            lines.append(f"| {r['model']} | {r.get('image', '')} | {r['error'][:120]} "
                         "| | | | | | | | |")  # fmt: skip
            continue
        second = f"{r.get('second_image_s', 0):.2f} s, +{r.get('second_image_programs', 0)}"
        unmatched = f"{r.get('unmatched', '')}" + (
            f" ({r['ort_unmatched']})" if "ort_unmatched" in r else f" (vs {r.get('reference')})"
        )
        lines.append(
            f"| {r['model']} | {r['image']} | {r.get('detections', '')} | {_ms(r, 'dml')} | "
            f"{_ms(r, 'eager')} | {_ms(r, 'ort cpu')} | {_x(r, 'x_eager')} | "
            f"{_x(r, 'x_ort_cpu')} | {r.get('first_s', 0):.1f} | {second} | {unmatched} |"
        )
    return lines


__all__ = ["add_arguments", "run", "table"]
