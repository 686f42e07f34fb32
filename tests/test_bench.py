"""``dml-jax bench``: every suite runs with --quick and writes its JSON report (timings unchecked),
the results page is generated from the reports, and the operator bench catalog is consistent."""

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
import strategies

from dml_jax import bench
from dml_jax.bench import page
from dml_jax.bench.suites import operators

ROOT = Path(__file__).resolve().parents[1]

# Per suite: extra options that keep the smoke run to a few seconds on a CPU.
_QUICK_ARGS = {
    "operators": ["--dtypes", "float32", "--only", "SUM|CLIP"],
    # a detector and the YOLO-style head (tests/test_onnx_detection.py runs all four), one
    # decoder (the two-device test below runs tiny_llama): the suite's time
    "detection": ["--only", "retinanet", "yolo"],
    "decode": ["--only", "tiny_gpt2"],
}
# Rows that fail on a CPU by design, recorded in the report rather than raised.
_CPU_ERRORS = {("attention_lstm", "jax xla")}  # float16 dot_general with float32 accumulation


@pytest.fixture(scope="module")
def quick_reports(tmp_path_factory):
    """Every suite run once with --quick into one folder (the tests below read the reports)."""
    out = tmp_path_factory.mktemp("bench")
    for suite in bench.SUITES:
        argv = ["--suite", suite, "--quick", "--out", str(out), "--samples", "1"]
        assert bench.main(argv + _QUICK_ARGS.get(suite, [])) == 0, suite
    return out


# The tests that read the quick reports share one parallel test worker: the module's fixture
# runs every suite once per worker that needs it.
QUICK = pytest.mark.xdist_group("bench-quick")


@QUICK
@pytest.mark.parametrize("suite", bench.SUITES)
def test_suite_quick_writes_its_report(suite, quick_reports):
    report = json.loads((quick_reports / f"{suite}.json").read_text())
    assert report["suite"] == suite and report["quick"] is True
    assert report["backend"] == jax.default_backend() and report["jax"] == jax.__version__
    assert report["device"] and report["date"] and "commit" in report
    assert report["rows"], report
    for row in report["rows"]:
        if (suite, row.get("impl")) in _CPU_ERRORS and strategies.ON_CPU:
            continue
        assert not row.get("error"), row
    # What did not run says why (no PyTorch on CUDA, one device); on a CPU every suite but
    # training (whose PyTorch rows run on the CPU where PyTorch is installed) skips something.
    assert all(s["part"] and s["reason"] for s in report["skipped"])
    if jax.default_backend() != "gpu" and suite != "training":
        assert report["skipped"], report
    lines = bench.suite_module(suite).table(report)
    assert any(line.startswith("|---") for line in lines)


@QUICK
def test_quick_reports_check_what_they_can(quick_reports):
    """The checks inside the reports: quantized products exact, training from one start, the
    GPT stack timed with no cuDNN attention call off CUDA."""
    report = json.loads((quick_reports / "quantized.json").read_text())
    assert report["checks"] and all(c.get("exact") is True for c in report["checks"])
    summary = report["summary"]
    assert len(summary) == 5 and all(r["over_dml_float16_gemm"] > 0 for r in summary)
    sanity = json.loads((quick_reports / "training.json").read_text())["sanity"]
    losses = sanity["losses"]
    assert len(losses["jax.grad"]) == sanity["steps"] == 3
    for name, difference in sanity["max_relative_difference_to_dml"].items():
        assert difference < (1e-5 if name != "PyTorch eager" else 1e-3), name
    assert losses["jax.grad"][-1] < losses["jax.grad"][0]
    rows = json.loads((quick_reports / "networks.json").read_text())["rows"]
    gpt = [r for r in rows if r["network"] == "gpt" and r["impl"] == "dml"]
    assert gpt and all(r["tokens_per_s"] > 0 and r["cold_s"] > 0 for r in gpt)
    if jax.default_backend() != "gpu":
        assert all(r["cudnn_attention_calls"] == 0 for r in gpt)
    assert any(r["network"] == "gpt" and r["impl"] == "torch eager" for r in rows)
    # the ONNX suite's cold time is the import and the first call, per level, shown as first s
    from dml_jax.bench.suites import onnx_models

    report = json.loads((quick_reports / "onnx_models.json").read_text())
    (mlp,) = [r for r in report["rows"] if r["model"] == "mlp"]
    assert mlp["dml_cold_s"] == mlp["dml_cold_s_all"] > 0
    (line,) = [ln for ln in onnx_models.table(report) if ln.startswith("| mlp |")]
    assert f"| {mlp['dml_cold_s']:.1f} |" in line
    # the quick run's batch is 2: its batch-1 latency is timed per call and shown, for run's
    # program and for run() whole (host arrays in and out)
    b1 = mlp["b1_ms"]
    assert mlp["batch"] == 2 and b1["dml"]["median"] > 0 and b1["dml run()"]["n"] == 3
    assert f"| {b1['dml']['median']:.3f} / {b1['dml']['p90']:.3f} |" in line
    # agreement is checked on the timed output itself
    assert mlp["agree"]["dml"] < 1e-5
    # the quantized models suite's network: its QDQ file agrees with onnxruntime's, and is
    # timed in turn with its float32 file
    (cnn,) = json.loads((quick_reports / "quantized_models.json").read_text())["rows"]
    assert cnn["agree_ort"] < 1e-5 and 0 < cnn["agree_float32"] < 0.1
    assert cnn["reference"] == "float32" and set(cnn["ms"]) == {"int8", "float32"}
    assert cnn["x_reference"]["median"] > 0 and cnn["first_s"]["int8"] > 0
    # the decode suite's quick run: the committed tiny decoders' greedy tokens are PyTorch's,
    # through the Generator, the run loop and the IOBinding loop, each timed
    rows = json.loads((quick_reports / "decode.json").read_text())["rows"]
    assert [r["model"] for r in rows] == ["tiny_gpt2"]
    loops = ("dml", "dml per token", "dml run()", "dml bound")
    for r in rows:
        assert r["same_tokens"] == r["run_same_tokens"] == r["bound_same_tokens"] == 1.0
        assert all(r["tok_s"][n]["median"] > 0 for n in loops)
    # the detection suite's quick run: the tiny detectors give onnxruntime's detections on the
    # timed image, row for row, and a second image's first call is timed apart

    rows = json.loads((quick_reports / "detection.json").read_text())["rows"]
    assert [r["model"] for r in rows] == _QUICK_ARGS["detection"][1:]
    for r in rows:
        assert r["reference"] == "onnxruntime" and r["unmatched"] == 0 and r["detections"] >= 10
        assert r["ms"]["dml"]["median"] > 0 and r["ms"]["ort cpu"]["median"] > 0
        assert r["first_s"] > 0 and r["second_image_s"] > 0 and r["second_image_programs"] >= 0


@pytest.mark.parametrize("network", ["resnet50", "gpt"])
def test_networks_cpu_rows_run_on_the_cpu_and_agree(network):
    """The networks suite's "... cpu" rows: the portable lowering and plain jax, both on jax's
    CPU device whatever the default backend, computing the same network."""
    from types import SimpleNamespace

    from dml_jax.bench.suites import networks

    args = SimpleNamespace(quick=True, gpt_qkv="fused", gpt_mask="constant")
    net = networks._build(args, network, "FLOAT32", 1)
    x = net.example_data()["x"]
    outs = []
    for impl in ("dml lax cpu", "jax reference cpu"):
        call, sync = networks._implementation(SimpleNamespace(torch=None), net, impl, x)
        out = call()
        sync(out)
        assert {d.platform for d in out.devices()} == {"cpu"}, impl
        outs.append(np.asarray(out, np.float32))
    got, want = outs
    got = got.reshape(want.shape)  # the graph's ResNet logits are {N, classes, 1, 1}
    assert np.max(np.abs(got - want)) <= 1e-4 * np.max(np.abs(want))


def test_networks_page_says_what_each_split_row_communicates():
    """A split row's ``collectives`` (``dml_jax.hlo.collectives``) in its note: count, kind and
    the bytes of the results in B, KiB or MiB; a split row without any says so; a one-device
    row says nothing of them."""
    from dml_jax.bench.suites import networks

    base = {"network": "gpt", "dtype": "FLOAT16", "batch": 8, "impl": "dml", "tokens_per_s": 1.0}
    rows = [
        {**base, "layout": "1 device"},
        {**base, "layout": "2 devices, tensor-parallel",
         "collectives": {"all-reduce": {"count": 24, "bytes": 24 * 8192 * 1024 * 2},
                         "all-gather": {"count": 1, "bytes": 4096}}},
        {**base, "layout": "2 devices, data-parallel", "collectives": {}},
    ]  # fmt: skip
    notes = [line.rsplit("|", 2)[-2].strip() for line in networks.table({"rows": rows})[4:]]
    assert notes == [
        "1 device",
        "2 devices, tensor-parallel; 24 all-reduce (384 MiB), 1 all-gather (4 KiB)",
        "2 devices, data-parallel; no collective",
    ]


def test_onnx_models_xla_options_become_compiler_options():
    from types import SimpleNamespace

    from dml_jax.bench.suites import onnx_models

    given = ["xla_gpu_enable_triton_gemm=false", "xla_gpu_autotune_level=1"]
    options = onnx_models._xla_options(SimpleNamespace(args=SimpleNamespace(xla_option=given)))
    assert options == {"xla_gpu_enable_triton_gemm": False, "xla_gpu_autotune_level": "1"}
    jax.jit(lambda x: x + 1, compiler_options=options).lower(np.ones(2)).compile()  # XLA takes them
    assert onnx_models._xla_options(SimpleNamespace(args=SimpleNamespace(xla_option=None))) is None


def _timing_run(**args):
    from types import SimpleNamespace

    from dml_jax.bench.harness import Timer

    base = {"levels": ["all"], "latency": True, "xla_option": None, "samples": 1, "ort_cpu": False}
    return SimpleNamespace(args=SimpleNamespace(**{**base, **args}), quick=True,
                           timer=Timer(sample_s=0.0, samples=1))  # fmt: skip


def test_onnx_models_times_run_s_program_at_each_level(tmp_path):
    """``dml`` is ``run``'s own program (the session's dispatch: on this CPU the weights
    baked in as ``run`` does), at level all even where it is not the last; each other level
    its own configuration; ``dml_cold_s`` the first level's import and first call. Every
    configuration's output is what ``run`` returns."""
    from dml_jax.bench.suites import onnx_models
    from dml_jax.onnx import InferenceSession

    path = str(tmp_path / "mlp.onnx")
    feeds = onnx_models._mlp_model(path, 4)
    run = _timing_run(levels=["disable", "all"])
    row: dict = {}
    calls, session = onnx_models._dml_calls(run, row, path, feeds)
    assert session.get_session_options().graph_optimization_level == "all"
    # the baked form beside run's off the CPU; on the CPU run's program is the baked one
    baked = {"dml baked"} if session._device.platform != "cpu" else set()
    assert set(calls) == {"dml", "dml disable"} | baked
    assert row["dml_cold_s"] == row["dml_cold_s_disable"] > 0 and row["dml_cold_s_all"] > 0
    want = InferenceSession(path).run(None, {"x": feeds[0]})[0]
    for call in calls.values():
        np.testing.assert_array_equal(np.asarray(call()[0]), want)
    onnx_models._time(run, row, calls, dict.fromkeys(calls, jax.block_until_ready))
    assert row["dml_ms"] == row["ms"]["dml"]["median"] > 0 and row["ms"]["dml disable"]["n"] == 1


def test_onnx_models_xla_options_reach_the_session(tmp_path):
    """``--xla-option`` is the session's ``compiler_options`` (over its defaults): the session
    checks them, so a name XLA does not know stops the timing with a ValidationError."""
    import dml_jax as dml
    from dml_jax.bench.suites import onnx_models

    path = str(tmp_path / "mlp.onnx")
    feeds = onnx_models._mlp_model(path, 2)
    run = _timing_run(xla_option=["xla_no_such_option=true"])
    with pytest.raises(dml.ValidationError, match="xla_no_such_option"):
        onnx_models._dml_calls(run, {}, path, feeds)


def test_onnx_models_times_a_float16_copy_of_the_model():
    """The float16 timing converts a copy: ``Module.half()`` and ``cuda()`` work in place, and
    the exporters after the timed one check the float32 model on the CPU."""
    from dml_jax.bench.suites import onnx_models

    class Module:  # the in-place conversions of torch.nn.Module
        dtype, device = "float32", "cpu"

        def cuda(self):
            self.device = "cuda"
            return self

        def half(self):
            self.dtype = "float16"
            return self

    model = Module()
    copy = onnx_models._half_copy(model)
    assert (copy.dtype, copy.device) == ("float16", "cuda")
    assert (model.dtype, model.device) == ("float32", "cpu")


@QUICK
def test_report_page_from_the_reports(quick_reports, tmp_path):
    (quick_reports / "networks.json").rename(tmp_path / "networks.json")
    try:
        out = tmp_path / "RESULTS.md"
        assert bench.main(["--report", "--out", str(quick_reports), "--page", str(out)]) == 0
    finally:
        (tmp_path / "networks.json").rename(quick_reports / "networks.json")
    text = out.read_text()
    assert all(f"## {suite}" in text for suite in bench.SUITES)
    assert f"jax {jax.__version__}" in text
    # a suite without a report is named as such, not left out silently
    assert "No report yet: `dml-jax bench --suite networks`" in text
    assert len(text.splitlines()) <= page.MAX_LINES


def test_the_results_page_is_the_generated_one():
    """benchmarks/RESULTS.md is what ``dml-jax bench --report`` writes from benchmarks/results."""
    root = page.ROOT
    assert (root / "benchmarks" / "RESULTS.md").read_text() == page.render(
        root / "benchmarks" / "results"
    )


def test_usage_errors():
    assert bench.main([]) == 2
    assert bench.main(["--suite", "nope"]) == 2
    assert bench.main(["--suite", "operators", "--shape", "1,2,3"]) == 2
    assert bench.main(["--suite", "operators,scaling", "--dtypes", "float32"]) == 2


# ---------------------------------------------------------------------------------------------
# The operator bench catalog


def test_operator_cases_cover_every_operator_and_function():
    import dml_jax as dml
    from dml_jax.bench import catalog
    from dml_jax.registry import operators as registered

    cases = operators.build_cases(operators.QUICK_SHAPE, ["float32"], full=True)
    ops = {c.op for c in cases}
    assert {"DML_OPERATOR_SPLIT", "DML_OPERATOR_REDUCE", "DML_OPERATOR_ARGMAX", "copy",
            "graph"} <= ops  # fmt: skip
    # (uint32 too: the logical and shift operators take unsigned integers only)
    ops |= {c.op for c in operators.build_cases(operators.QUICK_SHAPE, ["uint32"], full=False)}
    entries = catalog.catalog()
    assert set(entries) <= {s.name for s in registered()}, "a case of no operator"
    assert set(entries) <= ops, "an operator's catalog entry gives no case"
    assert len(entries) >= 129  # every operator that had a case in ops/ before the catalog
    functions = {c.name.split()[1] for c in cases if c.op == "DML_OPERATOR_REDUCE"}
    assert functions == {f.name for f in dml.ReduceFunction}


_COMPARED = [
    c
    for c in operators.build_cases(operators.QUICK_SHAPE, ["float32"], full=True)
    if c.make_dml is not None and c.jnp_fn is not None
]
_REPEATS_ANY_WINS = {"SCATTER_ND rows (half the rows updated)"}


@pytest.mark.parametrize("case", _COMPARED, ids=[c.name for c in _COMPARED])
def test_bench_case_is_valid_and_its_jnp_function_agrees(case):
    """Every float32 case's descriptor is valid, and the hand-written jnp equals dml's result
    (one test per case, so parallel workers share them)."""
    op = case.make_dml()
    xs = [np.asarray(operators._jax_input(s, d, 0)) for s, d in zip(case.shapes, case.dtypes)]
    got, want = op(*xs), jax.jit(case.jnp_fn)(*xs)  # as the suite times it
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    if case.name in _REPEATS_ANY_WINS and not strategies.ON_CPU:
        # jnp's ``.at[].set`` keeps any one of a repeated row's updates on a GPU (dml keeps the
        # last): compare the rows written at most once.
        rows = xs[1].reshape(-1).astype(np.int64)
        rows = np.where(rows < 0, rows + xs[0].shape[0], rows)
        once = np.bincount(rows[(rows >= 0) & (rows < xs[0].shape[0])], minlength=xs[0].shape[0])
        got, want = (tuple(np.asarray(a)[once <= 1] for a in t) for t in (got, want))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(
            np.asarray(g, np.float64), np.asarray(w, np.float64), rtol=2e-5, atol=1e-5
        )


def test_onnxruntime_is_timed_apart_and_its_crash_recorded(tmp_path, monkeypatch):
    """onnxruntime's CPU time comes from a child process: a time where it runs, and an error
    naming the signal where it crashes (it aborts on some models), the suite going on."""
    from dml_jax.bench.suites import onnx_models as OM

    path = str(tmp_path / "mlp.onnx")
    feeds = OM._mlp_model(path, 2)
    assert OM._ort_cpu_seconds(path, feeds) > 0
    monkeypatch.setattr(OM, "_ORT_CHILD", "import os, signal; os.kill(os.getpid(), 11)")
    with pytest.raises(RuntimeError, match=r"ended by signal 11"):
        OM._ort_cpu_seconds(path, feeds)
    monkeypatch.setattr(OM, "_ORT_CHILD", "raise SystemExit('no session: bad model')")
    with pytest.raises(RuntimeError, match=r"no session: bad model"):
        OM._ort_cpu_seconds(path, feeds)


def test_operators_header_names_the_best_copy_of_any_implementation():
    """The ratios are to the fastest copy of the run (XLA's or PyTorch's); the header says
    which rate that is."""

    def row(op, impl, gbps, ratio=None):
        return {"case": op, "op": op, "dtype": "float32", "impl": impl, "gbps": gbps,
                "ratio_to_copy": ratio, "error": None}  # fmt: skip

    report = {"rows": [row("copy", "jnp", 100.0), row("copy", "torch", 250.0),
                       row("DML_OPERATOR_CAST", "dml", 200.0, 0.8)]}  # fmt: skip
    header = operators.table(report)[0]
    assert "float32 250 GB/s" in header and "100 GB/s" not in header


def test_cold_torch_caches_give_a_fresh_directory_and_restore_the_variables(monkeypatch):
    """``harness.cold_torch_caches``: inside, Inductor's and Triton's cache variables name a
    new empty directory; after, it is gone and the variables are what they were (one set, one
    unset)."""
    import os

    from dml_jax.bench.harness import cold_torch_caches

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/somewhere/else")
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    with cold_torch_caches() as tmp:
        assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == tmp
        assert os.environ["TRITON_CACHE_DIR"].startswith(tmp)
        assert os.path.isdir(tmp) and not os.listdir(tmp)
    assert not os.path.exists(tmp)
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == "/somewhere/else"
    assert "TRITON_CACHE_DIR" not in os.environ


def test_alternate_takes_the_samples_in_turn():
    """Sample k of every configuration comes before sample k + 1 of any, the order rotated each
    round; each sample is whole dispatches of one configuration."""
    from dml_jax.bench.harness import Timer

    log = []

    def call(name):
        return lambda: log.append(name)

    timer = Timer(sample_s=0.0, samples=1)
    calls = {n: (call(n), lambda _: None) for n in "abc"}
    taken = timer.alternate(calls, 4)
    assert {n: len(v) for n, v in taken.items()} == {"a": 4, "b": 4, "c": 4}
    timed = log[3 * 2 :]  # after warming and sizing each (2 calls), samples of 3 dispatches
    rounds = [timed[k : k + 9] for k in range(0, len(timed), 9)]
    firsts = [r[0] for r in rounds]
    assert firsts == ["a", "b", "c", "a"]
    assert all(sorted(set(r)) == ["a", "b", "c"] for r in rounds)
    assert all(r[3 * i] == r[3 * i + 1] == r[3 * i + 2] for r in rounds for i in range(3))


def test_ratio_is_paired_and_says_when_its_spread_holds_one():
    from dml_jax.bench.harness import ratio, summary

    clear = ratio([2.0, 2.2, 1.9, 2.1], [1.0, 1.0, 1.0, 1.0])
    assert clear["median"] == pytest.approx(2.05) and not clear["crosses_1"]
    assert clear["p10"] < clear["median"] < clear["p90"]
    noisy = ratio([1.1, 0.9, 1.05, 0.95], [1.0, 1.0, 1.0, 1.0])
    assert noisy["crosses_1"]
    s = summary([0.001, 0.002, 0.003])
    assert s == {"median": 2.0, "p10": pytest.approx(1.2), "p90": pytest.approx(2.8), "n": 3}


def test_latency_syncs_every_call():
    from dml_jax.bench.harness import Timer

    synced = []
    timer = Timer(sample_s=0.0, samples=1)
    taken = timer.latency({"a": (lambda: 1, synced.append), "b": (lambda: 2, synced.append)}, 5)
    assert len(taken["a"]) == len(taken["b"]) == 5
    assert synced == [1, 2] + [1, 2, 2, 1] * 2 + [1, 2]  # warm, then rounds in turn


def test_reports_hold_their_provenance(tmp_path):
    """Every report's head: the full commit hash, card, driver, versions of the packages it
    ran with, the command line and the date, written by the harness."""
    import re
    from types import SimpleNamespace

    from dml_jax.bench.harness import PROVENANCE, Run

    args = SimpleNamespace(quick=True, sample_s=None, samples=1)
    run = Run("onnx_models", args, tmp_path / "r.json", log=lambda *_: None)
    run.write()
    report = json.loads((tmp_path / "r.json").read_text())
    assert set(PROVENANCE) <= set(report)
    assert report["commit"] is None or re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", report["commit"])
    assert report["versions"]["jax"] == jax.__version__
    assert report["versions"]["numpy"] == np.__version__
    assert (report["driver"] is None) == (report["backend"] != "gpu")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT.*", report["date"])
    assert report["tree"] is None or re.fullmatch(r"[0-9a-f]{40}", report["tree"])
    heading = page._heading(report)
    if report["commit"]:
        assert report["commit"] not in heading  # 12 digits of it, or of the tree's commit


def test_resume_continues_one_run_only(tmp_path, monkeypatch):
    """``--resume`` keeps the rows of a report of the same package files (its code tree), card,
    versions and options but ``--only``, and records each part with its own files; files
    outside the package (docs, tests) may differ between parts; a report of other package files
    or other options is not continued."""
    import sys
    from types import SimpleNamespace

    from dml_jax.bench import harness

    files = {"all": "a" * 40, "code": "c" * 40}
    monkeypatch.setattr(
        harness, "tree", lambda paths=(".",): files["code" if paths != (".",) else "all"]
    )
    monkeypatch.setattr(harness, "commit_of_tree", lambda t: {"a" * 40: "1" * 40,
                                                               "d" * 40: "2" * 40}.get(t))  # fmt: skip
    path = tmp_path / "onnx_models.json"

    def part(argv, resume):
        monkeypatch.setattr(sys, "argv", ["dml-jax bench", *argv])
        args = SimpleNamespace(quick=False, sample_s=None, samples=10, resume=resume)
        return harness.Run("onnx_models", args, path, log=lambda *_: None)

    first = part(["--out", "a", "--suite", "onnx_models", "--budget-s", "380", "--only", "bert"],
                 False)  # fmt: skip
    first.add({"model": "bert"})
    # another budget and another folder of reports (a copy of it on another machine) measure
    # the same
    second = part(["--out=b", "--suite", "onnx_models", "--resume", "--budget-s", "470",
                   "--only", "gpt2"], True)  # fmt: skip
    assert second.done(model="bert") and not second.done(model="gpt2")
    second.add({"model": "gpt2"})
    report = json.loads(path.read_text())
    assert [r["model"] for r in report["rows"]] == ["bert", "gpt2"]
    assert [p["argv"][-1] for p in report["parts"]] == ["bert", "gpt2"]
    assert "in 2 parts" in page._heading(report)
    other = part(["--suite", "onnx_models", "--resume", "--dtype", "float32"], True)
    assert not other.rows
    # docs changed between sittings, the package's files did not: the run goes on, each part
    # naming its own commit, the report its first part's
    files["all"] = "d" * 40
    third = part(["--suite", "onnx_models", "--resume", "--only", "t5"], True)
    assert third.done(model="gpt2")
    third.add({"model": "t5"})
    report = json.loads(path.read_text())
    assert [p["tree"] for p in report["parts"]] == ["a" * 40, "a" * 40, "d" * 40]
    assert report["tree"] == "a" * 40
    heading = page._heading(report)
    assert "in 3 parts" in heading and "commit 111111111111, commit 222222222222" in heading
    files["code"] = "e" * 40  # the package changed: a new run
    assert not part(["--suite", "onnx_models", "--resume"], True).rows


def test_decode_resumes_between_rows():
    """A decode run cut short after some rows of a model makes only the rest in its next part
    (the rows are per model, dtype, batch and devices; int4 only for the 1B model)."""
    from types import SimpleNamespace

    from dml_jax.bench import harness
    from dml_jax.bench.suites import decode

    run = SimpleNamespace(
        args=SimpleNamespace(batch=[1, 8], int4=True, devices=2),
        rows=[{"model": "llama_1b", "dtype": "float16", "batch": 1, "devices": 1},
              {"model": "llama_1b", "error": "a model-wide failure is tried again"},
              {"model": "llama_1b", "dtype": "float16", "batch": 8, "devices": 2},
              {"model": "gpt2", "dtype": "float16", "batch": 1, "devices": 1},
              {"model": "gpt2", "dtype": "float16", "batch": 8, "devices": 1},
              {"model": "gpt2", "dtype": "float16", "batch": 1, "devices": 2},
              {"model": "gpt2", "dtype": "float16", "batch": 8, "devices": 2}],
    )  # fmt: skip
    run.done = lambda **fields: harness.Run.done(run, **fields)
    assert decode._todo(run, "llama_1b") == [
        ("float16", 8, 1), ("int4", 1, 1), ("int4", 8, 1), ("float16", 1, 2)
    ]  # fmt: skip
    assert decode._todo(run, "gpt2") == []
    run.args.devices = 1
    assert decode._todo(run, "llama_8l") == [("float16", 1, 1), ("float16", 8, 1)]


def test_decode_quick_on_two_devices(tmp_path):
    """``--quick --devices 2`` decodes the tiny decoders on a 2-device model mesh (simulated
    CPU devices): the same greedy tokens as one device, with the ratio reported."""
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2",
               JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "dml_jax.bench", "--suite", "decode", "--quick", "--devices", "2",
         "--samples", "1", "--only", "tiny_llama", "--out", str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads((tmp_path / "decode.json").read_text())["rows"]
    split = [r for r in rows if r.get("devices") == 2]
    assert [r["model"] for r in split] == ["tiny_llama"]
    for r in split:
        assert "error" not in r, r
        assert r["same_tokens"] == 1.0 and "x_one_device" in r


def test_a_report_names_the_commit_of_its_files():
    """The page names the commit whose tree the run's files were (a remote copy of the working
    tree may carry an older .git: its HEAD says nothing), else the HEAD it read, marked dirty."""
    import subprocess

    from dml_jax.bench.harness import ROOT

    head = subprocess.run(["git", "rev-parse", "HEAD", "HEAD^{tree}"], cwd=ROOT, check=False,
                          capture_output=True, text=True)  # fmt: skip
    if head.returncode:
        pytest.skip("not a git checkout")
    commit, tree = head.stdout.split()
    stale = "0" * 40 + "+dirty"
    assert f"commit {commit[:12]}" in page._heading({"commit": stale, "tree": tree})
    assert "commit 000000000000+dirty" in page._heading({"commit": stale, "tree": "f" * 40})


def test_frozen_runs_name_the_archived_commit(tmp_path):
    """``benchmarks/frozen.sh``: a suite run from ``git archive HEAD`` unpacked elsewhere
    reports HEAD's tree (so the page names HEAD), whatever the working tree holds, and a second
    run reuses the unpacked copy."""
    from dml_jax.bench import harness

    root = harness.ROOT
    archive = tmp_path / "frozen.tgz"
    subprocess.run(["git", "archive", "--format=tar.gz", "-o", str(archive), "HEAD"], cwd=root,
                   check=True)  # fmt: skip
    head_tree = subprocess.run(["git", "rev-parse", "HEAD^{tree}"], cwd=root, check=True,
                               capture_output=True, text=True).stdout.strip()  # fmt: skip
    env = dict(os.environ, FROZEN_DIR=str(tmp_path / "frozen"), PYTHON=sys.executable)
    out = tmp_path / "out"
    for _ in range(2):
        done = subprocess.run(
            ["bash", str(root / "benchmarks" / "frozen.sh"), str(archive), "--out", str(out),
             "--suite", "scaling", "--quick", "--samples", "1"],
            check=False, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        report = json.loads((out / "scaling.json").read_text())
        assert report["tree"] == head_tree and report["rows"]
    assert (tmp_path / "frozen" / ".git" / "frozen_from").exists()


def test_a_missing_model_source_is_a_skip(monkeypatch, tmp_path):
    # PyTorch importable but torchvision not: its models are skipped, said why; any other
    # missing module is an error row
    import types

    from dml_jax.bench.suites import onnx_models

    ns = types.SimpleNamespace
    fake = ns(
        __version__="0", backends=ns(cudnn=ns(), cuda=ns(matmul=ns(), is_available=lambda: False))
    )
    monkeypatch.setitem(sys.modules, "torch", fake)

    def run_model(run, name, torch):
        assert torch is fake
        missing = "torchvision" if name == "mobilenet_v2" else "dml_jax_helper"
        raise ModuleNotFoundError(f"No module named '{missing}'", name=missing)

    monkeypatch.setattr(onnx_models, "run_model", run_model)
    monkeypatch.setattr(onnx_models, "run_mlp", lambda run: None)
    argv = ["--suite", "onnx_models", "--quick", "--out", str(tmp_path), "--no-ort-cpu"]
    assert bench.main([*argv, "--only", "mobilenet_v2", "bert"]) == 0
    report = json.loads((tmp_path / "onnx_models.json").read_text())
    assert {"part": "model mobilenet_v2",
            "reason": "torchvision is not importable: the model comes from it"} in report["skipped"]  # fmt: skip
    (row,) = report["rows"]
    assert row["model"] == "bert" and "dml_jax_helper" in row["error"]


def test_an_export_of_inconsistent_types_is_refused(tmp_path):
    """A file whose node binds one type parameter to two types (float32 values, float16
    LayerNormalization scales: what PyTorch 2.11's TorchScript exporter made of transformers'
    SDPA attention in float16) is no model of its precision: the suite refuses to time it."""
    from onnx import TensorProto, helper, numpy_helper, save

    from dml_jax.bench.suites import onnx_models

    def model(scale_type):
        w = numpy_helper.from_array(np.ones(4, scale_type), "w")
        node = helper.make_node("LayerNormalization", ["x", "w", "w"], ["y"], axis=-1)
        graph = helper.make_graph(
            [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [w],
        )  # fmt: skip
        path = str(tmp_path / f"{np.dtype(scale_type).name}.onnx")
        save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
        return path

    onnx_models.check_types(model(np.float32))
    with pytest.raises(ValueError, match="inconsistent.*LayerNormalization"):
        onnx_models.check_types(model(np.float16))


def test_transformers_models_export_with_eager_attention_and_get_their_own_back():
    from dml_jax.bench.suites import onnx_models

    class Model:  # transformers' PreTrainedModel: its config and the switch
        def __init__(self, implementation):
            self.config = type("Config", (), {"_attn_implementation": implementation})()
            self.calls = []

        def set_attn_implementation(self, name):
            self.calls.append(name)
            self.config._attn_implementation = name

    sdpa, eager, other = Model("sdpa"), Model("eager"), object()
    wrapper = type("Wrapper", (), {"modules": lambda self: [self, sdpa, eager, other]})()
    restore = onnx_models._eager_attention(wrapper)
    assert sdpa.config._attn_implementation == "eager" and not eager.calls
    restore()
    assert sdpa.calls == ["eager", "sdpa"] and not eager.calls
