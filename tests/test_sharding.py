"""Operators and graphs on arrays sharded over 8 simulated CPU devices.

JAX fixes its device count when it starts, and the rest of the suite runs on one device, so
every sharded check runs in ONE subprocess (tests/_sharding_worker.py, started with
``XLA_FLAGS=--xla_force_host_platform_device_count=8``) that reports a JSON verdict per case;
the tests below assert on those verdicts one case at a time, so a failure names its case
(operator, layout, mesh axis type, calling path). The in-process tests check the validation of
``in_shardings`` / ``out_shardings`` on the single device.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import _sharding_worker as worker
import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec

import dml_jax as dml
from dml_jax import hlo

ROOT = Path(__file__).resolve().parent.parent
CASE_IDS = worker.plan()

# One parallel test worker runs this module (pyproject's ``--dist loadgroup``): the worker's
# report takes a core for half a minute, and a second test worker would only wait for it.
pytestmark = pytest.mark.xdist_group("sharding")


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict:
    """The worker's report, computed once per test session: parallel test workers share it
    through a file under their common base temporary folder (one computes, the others wait)."""
    base = tmp_path_factory.getbasetemp()
    # Under xdist each worker's base folder sits in the session's; without it, the base folder
    # is the session's own (its parent holds every earlier session's).
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    path = shared / "sharding_report.json"
    with open(shared / "sharding_report.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.is_file():
            path.write_text(json.dumps(_run_worker()))
    return json.loads(path.read_text())


def _run_worker() -> dict:
    env = dict(os.environ)
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={worker.DEVICES}"
    ).strip()
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "_sharding_worker.py")],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=ROOT,
        check=False,
    )
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        pytest.fail(f"sharding worker failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(lines[-1])


def test_worker_reports_every_planned_case(report):
    assert sorted(report["cases"]) == sorted(CASE_IDS)
    assert len(report["devices"]) == worker.DEVICES


@pytest.mark.parametrize("case_id", CASE_IDS)
def test_sharded_case(report, case_id):
    result = report["cases"][case_id]
    assert result["ok"], result["detail"]


def test_communication_is_recorded_for_the_operator_axis(report):
    # Cutting, joining, tiling or rearranging along the sharded axis must move data between
    # devices somewhere: SPLIT/JOIN/TILE/DEPTH_TO_SPACE1(DCR) report at least one collective
    # when axis 1 is sharded and the outputs keep that sharding (or XLA chooses).
    moving = {
        r["scenario"] for r in report["collectives"] if r["sharded_axis"] == 1 and r["collectives"]
    }
    assert moving == set(worker.COMM_SCENARIOS) - {"DEPTH_TO_SPACE1-CRD-32ch"}


def _run_script(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)  # the scripts ask for their simulated devices themselves
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=ROOT,
        check=False,
    )


def test_scaling_out_example_runs_on_8_cpu_devices():
    proc = _run_script("examples/scaling_out.py")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "8 cpu device(s)" in proc.stdout
    assert "ARGMAX with ties on different devices: [[3, 3, 3, 3]]" in proc.stdout


def test_scaling_suite_quick_runs_and_matches_one_device(tmp_path):
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8")
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    argv = ["--suite", "scaling", "--quick", "--sample-s", "0.005", "--samples", "2"]
    proc = subprocess.run(
        [sys.executable, "-m", "dml_jax.bench", *argv, "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "scaling.json").read_text())
    assert {r["devices"] for r in report["rows"]} == {1, 8} and not report["skipped"]
    assert len({r["case"] for r in report["rows"]}) == 4
    for r in report["rows"]:
        assert r["hot_s"] > 0 and r["max_abs_diff_vs_1_device"] <= 1e-3, r


# ------------------------------------------------------------------ validation (one device)

X = dml.TensorDesc("FLOAT32", (4, 6))
SPLIT = dml.SplitOperatorDesc(X, [X.like(sizes=(4, 2)), X.like(sizes=(4, 4))], axis=1)
MESH = jax.make_mesh((1,), ("x",))
ROW = NamedSharding(MESH, PartitionSpec("x"))


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        (
            {"in_shardings": [ROW, ROW]},
            r"^DML_OPERATOR_SPLIT: in_shardings must have one entry per tensor \(1: InputTensor\)",
        ),
        (
            {"out_shardings": [ROW]},
            (
                r"^DML_OPERATOR_SPLIT: out_shardings must have one entry per tensor \(2: "
                r"OutputTensors\[0\], OutputTensors\[1\]\), got 1"
            ),
        ),
        ({"in_shardings": "x"}, r"^DML_OPERATOR_SPLIT: in_shardings must be None, a jax"),
        (
            {"in_shardings": [PartitionSpec("x")]},
            (
                r"^DML_OPERATOR_SPLIT: in_shardings\[0\] \(InputTensor\) must be a jax\.sharding\."
                r"Sharding or None, got a PartitionSpec"
            ),
        ),
        (
            {"out_shardings": [None, NamedSharding(MESH, PartitionSpec(None, None, "x"))]},
            (
                r"^DML_OPERATOR_SPLIT: out_shardings\[1\] \(OutputTensors\[1\]\) has a "
                r"PartitionSpec of 3 entries"
            ),
        ),
    ],
)
def test_bad_shardings_raise_validation_error(kwargs, pattern):
    with pytest.raises(dml.ValidationError, match=pattern):
        dml.compile_operator(SPLIT, **kwargs)


def test_shardings_keep_fn_and_cache():
    plain = dml.compile_operator(SPLIT)
    assert dml.compile_operator(SPLIT, in_shardings=None, out_shardings=[None, None]) is plain
    sharded = dml.compile_operator(SPLIT, in_shardings=ROW, out_shardings=(ROW, None))
    assert sharded is not plain and sharded.fn is plain.fn
    assert sharded.in_shardings == (ROW,) and sharded.out_shardings == (ROW, None)
    # NamedSharding is hashable and compares by value: an equal request hits the cache.
    again = NamedSharding(MESH, PartitionSpec("x"))
    assert dml.compile_operator(SPLIT, in_shardings=[again], out_shardings=[again, None]) is sharded
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    a, b = sharded(x)
    np.testing.assert_array_equal(a, x[:, :2])
    np.testing.assert_array_equal(b, x[:, 2:])
    assert a.sharding.is_equivalent_to(ROW, 2)


def test_collectives_count_each_once_and_its_results_bytes():
    """``hlo.collectives`` on optimized HLO text of the forms XLA writes: an asynchronous
    all-reduce (its start and done one collective, its bytes the done's result), a combined
    all-gather (a tuple of its parts, each counted), a synchronous reduce-scatter, and an
    instruction that only reads a collective's result (not one)."""
    text = """HloModule m, is_scheduled=true

ENTRY %main (p: f16[8,1024]) -> f16[8,1024] {
  %p = f16[8,1024]{1,0} parameter(0)
  %all-reduce-start.1 = f16[8,1024]{1,0} all-reduce-start(%p), replica_groups={{0,1}}
  %all-reduce-done.1 = f16[8,1024]{1,0} all-reduce-done(%all-reduce-start.1)
  %all-gather.7 = (f16[2048,512]{1,0}, f32[2048]{0}) all-gather(%p, %p), dimensions={0}
  %reduce-scatter.2 = f32[4,16]{1,0} reduce-scatter(%p), dimensions={0}
  ROOT %add = f16[8,1024]{1,0} add(%all-reduce-done.1, %p)
}
"""
    assert hlo.collectives(text) == {
        "all-reduce": {"count": 1, "bytes": 8 * 1024 * 2},
        "all-gather": {"count": 1, "bytes": 2048 * 512 * 2 + 2048 * 4},
        "reduce-scatter": {"count": 1, "bytes": 4 * 16 * 4},
    }
    assert hlo.collectives(text.replace("all-", "no-").replace("reduce-scatter", "add")) == {}
