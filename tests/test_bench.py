"""The benchmark harness in --quick mode on CPU: it runs and writes its JSON (timings unchecked)."""

import json

import jax
import numpy as np
import pytest
import strategies

from dml_jax import bench


def test_bench_quick_writes_json(tmp_path, capsys):
    rc = bench.main(
        [
            "--quick",
            "--out",
            str(tmp_path),
            "--dtypes",
            "float32",
            "--only",
            "SUM",
            "--no-torch",
            "--samples",
            "1",
        ]
    )
    assert rc == 0
    report = json.loads((tmp_path / "results.json").read_text())
    env = report["environment"]
    # The backend JAX chose (cpu here, gpu on a CUDA machine) is recorded with its device.

    assert env["backend"] == jax.default_backend() and env["device"] and env["jax"] and env["date"]
    rows = report["results"]
    cases = {r["case"] for r in rows}
    assert {
        "copy",
        "REDUCE SUM axis 3",
        "REDUCE SUM axis 1",
        "graph CLIP -> REDUCE SUM axis 3",
    } <= cases
    for r in rows:
        assert r["error"] is None, r
        assert r["bytes"] > 0 and r["seconds"] > 0 and r["gbps"] > 0
        assert r["ratio_to_copy"] is not None
    assert {r["impl"] for r in rows if r["case"] == "REDUCE SUM axis 1"} == {"dml", "jnp"}
    overhead = report["overhead"]["operators"]
    assert set(overhead) == {"CLIP", "REDUCE SUM axis 1", "SPLIT axis 3"}
    assert all(v["op_call_us"] > 0 and v["compile_warm_us"] > 0 for v in overhead.values())
    out = capsys.readouterr().out
    assert "wrote" in out and "REDUCE SUM axis 1" in out


def test_bench_cases_cover_every_operator_and_function():
    import dml_jax as dml

    cases = bench.build_cases(bench.QUICK_SHAPE, ["float32"], full=True)
    ops = {c.op for c in cases}
    assert {
        "DML_OPERATOR_SPLIT",
        "DML_OPERATOR_JOIN",
        "DML_OPERATOR_TILE",
        "DML_OPERATOR_DEPTH_TO_SPACE1",
        "DML_OPERATOR_SPACE_TO_DEPTH1",
        "DML_OPERATOR_ELEMENT_WISE_CLIP",
        "DML_OPERATOR_ELEMENT_WISE_CLIP1",
        "DML_OPERATOR_ELEMENT_WISE_CLIP_GRAD1",
        "DML_OPERATOR_REDUCE",
        "DML_OPERATOR_ARGMIN",
        "DML_OPERATOR_ARGMAX",
        "copy",
        "graph",
    } <= ops
    # Cases come from the registry: every operator with a bench hook contributes one.
    from dml_jax.registry import operators

    # (uint32 too: the logical and shift operators take unsigned integers only)
    ops |= {c.op for c in bench.build_cases(bench.QUICK_SHAPE, ["uint32"], full=False)}
    assert {s.name for s in operators() if s.bench is not None} <= ops
    functions = {c.name.split()[1] for c in cases if c.op == "DML_OPERATOR_REDUCE"}
    assert functions == {f.name for f in dml.ReduceFunction}


_COMPARED = [
    c
    for c in bench.build_cases(bench.QUICK_SHAPE, ["float32"], full=True)
    if c.make_dml is not None and c.jnp_fn is not None
]


_REPEATS_ANY_WINS = {"SCATTER_ND rows (half the rows updated)"}


@pytest.mark.parametrize("case", _COMPARED, ids=[c.name for c in _COMPARED])
def test_bench_case_is_valid_and_its_jnp_function_agrees(case):
    """Every float32 case's descriptor is valid, and the hand-written jnp equals dml's result
    (one test per case, so parallel workers share them)."""
    op = case.make_dml()
    xs = [np.asarray(bench._jax_input(s, d, 0)) for s, d in zip(case.shapes, case.dtypes)]
    got, want = op(*xs), case.jnp_fn(*xs)
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


def test_bench_usage_error():
    assert bench.main(["--shape", "1,2,3"]) == 2
