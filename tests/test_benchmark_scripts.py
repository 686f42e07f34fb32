"""benchmarks/quantized.py and benchmarks/training.py in --quick mode on the CPU: they run, check
what they can and write their JSON (timings unchecked)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

_BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _script(name: str):
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", _BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quantized_gemm_benchmark_checks_and_times_every_case(tmp_path, capsys):
    out = tmp_path / "quantized.json"
    assert _script("quantized").main(["--quick", "--samples", "1", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    # every integer operator equals the NumPy int64 reference, and XLA's int8 dot, exactly
    assert report["checks"] and all(c.get("exact") is True for c in report["checks"])
    rows = report["results"]
    assert all("error" not in r and r["tera_ops"] > 0 for r in rows), rows
    impls = {(r["impl"], r["kind"]) for r in rows}
    assert {("dml", "int8"), ("dml", "float16"), ("jax", "int8"), ("jax", "float16")} <= impls
    summary = report["summary"]
    assert len(summary) == 5 and all(r["over_dml_float16_gemm"] > 0 for r in summary)
    assert "wrote" in capsys.readouterr().out


def test_training_benchmark_starts_the_ways_from_the_same_weights(tmp_path):
    out = tmp_path / "training.json"
    assert _script("training").main(["--quick", "--samples", "1", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    rows = {r["way"]: r for r in report["results"]}
    assert {"dml gradient operators", "jax.grad"} <= set(rows)
    assert all("error" not in r and r["steps_per_s"] > 0 for r in rows.values()), rows
    sanity = report["sanity"]
    losses = sanity["losses"]
    assert len(losses["jax.grad"]) == sanity["steps"] == 3
    # the same start, the same losses (float32 rounding apart); the loss falls
    for name, difference in sanity["max_relative_difference_to_dml"].items():
        assert difference < (1e-5 if name != "PyTorch eager" else 1e-3), name
    assert losses["jax.grad"][-1] < losses["jax.grad"][0]


@pytest.fixture(autouse=True)
def _forget_the_example():
    """training.py registers the example module by name; leave sys.modules as it was."""
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name == "train_cnn" or name.startswith("benchmark_"):
            del sys.modules[name]


def test_kernel_sass_reads_the_cuda_kernels_without_a_gpu():
    # benchmarks/kernel_sass.py lowers a program for CUDA on any machine: the TOP_K fast path's
    # Triton kernel comes out as Triton IR text with its launch settings (compiling it for sm_90a
    # needs Triton, which the project does not depend on).
    import jax

    import dml_jax as dml
    from dml_jax.kernels import topk

    sass = _script("kernel_sass")
    x = dml.TensorDesc("FLOAT32", (8192, 1024))
    out = x.like(sizes=(8192, 8))
    desc = dml.TopKOperatorDesc(x, out, out.like(data_type="UINT32"), axis=1, k=8)
    with sass.as_cuda():
        op = dml.compile_operator(desc)
    [kernel] = sass.triton_kernels(op.fn, jax.ShapeDtypeStruct((8192, 1024), "float32"))
    assert "tt.func" in kernel["ir"] and "tt.load" in kernel["ir"]
    assert kernel["num_warps"] == topk.plan((8192, 1024), 1, 8, "float32").warps
    # outside as_cuda() a machine without CUDA lowers the lax program alone (with CUDA, the
    # kernel again)
    from dml_jax import fastpath

    spec = jax.ShapeDtypeStruct((8192, 1024), "float32")
    found = sass.triton_kernels(dml.compile_operator(desc).fn, spec)
    assert len(found) == (1 if fastpath.cuda_present() else 0)
