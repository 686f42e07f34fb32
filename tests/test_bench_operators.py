"""The operator suite's rows: its wrapped calls (buffer mode, in place) timed beside the lax
lowering a fast path replaces, and every data type run at the same bytes."""

import dataclasses
import functools
import json
import math
from types import SimpleNamespace

import numpy as np
import pytest

from dml_jax import bench
from dml_jax.bench.harness import Run
from dml_jax.bench.suites import operators

DTYPES = ("float32", "float16", "int8")


def _wrapped(case, call) -> bool:
    return isinstance(case.make_dml, functools.partial) and case.make_dml.func is call


def _quick_cases(dtype: str) -> list:
    shape = operators.shape_for(operators.QUICK_SHAPE, dtype)
    return operators.build_cases(shape, [dtype], full=True)


def _quick_run() -> Run:
    args = SimpleNamespace(quick=True, sample_s=0.0, samples=1, no_torch=True, budget_s=None)
    return Run("operators", args, None, log=lambda *a: None)


def test_wrapped_cases_time_their_lax_lowering_too():
    """The in-place and buffer-mode cases that a fast path covers give a ``dml`` and a
    ``dml-lax`` time, no error: their lax form is wrapped the same way, not recompiled from a
    ``desc`` the wrapper does not have. Float16 in place at the quick shape; buffer mode at a
    shape the quantization kernel takes (4 MiB of float16; it passes the quick shape over)."""
    in_place = [
        c
        for c in _quick_cases("float16")
        if _wrapped(c, operators._in_place_call) and c.make_lax is not None
    ]
    buffers = [
        c
        for c in operators.build_cases((4, 8, 256, 256), ["float16"], full=True)
        if _wrapped(c, operators._buffer_call) and c.make_lax is not None
    ]
    assert len(in_place) >= 10 and len(buffers) >= 2, [c.name for c in in_place + buffers]
    run = _quick_run()
    operators.run_cases(in_place + buffers, run, lax_rows=True)
    assert not [r for r in run.rows if r["error"]], [r for r in run.rows if r["error"]]
    for case in in_place + buffers:
        impls = {r["impl"]: r for r in run.rows if r["case"] == case.name and r["op"] == case.op}
        for impl in ("dml", "dml-lax"):
            assert impls[impl]["seconds"] > 0 and impls[impl]["gbps"] > 0, (case.name, impl)


def test_lax_rows_only_where_asked_and_a_failing_lax_form_is_its_own_row():
    """Off a GPU no ``dml-lax`` row unless asked; where the lax form fails, the error is the
    ``dml-lax`` row's and the ``dml`` time stays."""
    (case,) = [c for c in _quick_cases("float16") if c.name == "ADD in place"]
    run = _quick_run()
    operators.run_cases([case], run, lax_rows=False)
    assert {r["impl"] for r in run.rows} == {"dml"}  # in place: no hand-written form

    def broken():
        raise RuntimeError("no lax form")

    run = _quick_run()
    operators.run_cases([dataclasses.replace(case, make_lax=broken)], run, lax_rows=True)
    rows = {r["impl"]: r for r in run.rows}
    assert rows["dml"]["seconds"] > 0 and not rows["dml"]["error"]
    assert rows["dml-lax"]["error"] == "RuntimeError: no lax form"


@pytest.mark.parametrize("base", [operators.QUICK_SHAPE, operators.GIB_SHAPE_F32, (3, 4, 2, 2)])
def test_every_data_type_gets_the_same_bytes(base):
    nbytes = {d: math.prod(operators.shape_for(base, d)) * np.dtype(d).itemsize for d in DTYPES}
    assert set(nbytes.values()) == {math.prod(base) * 4}, nbytes
    assert operators.shape_for((2, 8, 16, 32), "float64") == (1, 8, 16, 32)
    with pytest.raises(ValueError, match="multiple of 2"):
        operators.shape_for((3, 8, 16, 32), "float64")


def test_a_case_moves_the_same_bytes_in_every_data_type():
    """Each case whose inputs and outputs are all of the run's data type and shape (the copy,
    the element-wise and activation operators, in place or not) moves as many bytes in float32,
    float16 and int8."""
    by_dtype = {}
    for d in DTYPES:
        shape = operators.shape_for(operators.QUICK_SHAPE, d)
        n = math.prod(shape) * np.dtype(d).itemsize
        by_dtype[d] = {
            (c.name, c.op): c
            for c in operators.build_cases(shape, [d], full=True)
            if all(s == shape for s in c.shapes) and set(c.dtypes) == {d}
            and c.out_bytes == n  # outputs: the run's type and shape
        }  # fmt: skip
    common = set.intersection(*(set(cases) for cases in by_dtype.values()))
    assert len(common) >= 20 and ("copy", "copy") in common, sorted(common)
    for key in sorted(common):
        assert len({by_dtype[d][key].bytes for d in DTYPES}) == 1, key


def test_shape_option_scales_the_other_data_types(tmp_path):
    """``--shape`` is float32's: float16 runs twice its batch and int8 four times (so do the
    default and ``--quick`` shapes); a batch with no whole float64 equivalent is a usage error."""
    argv = ["--suite", "operators", "--out", str(tmp_path), "--samples", "1", "--sample-s", "0",
            "--only", "no such case", "--no-overhead", "--no-torch"]  # fmt: skip
    assert bench.main(argv + ["--shape", "1,8,16,32", "--dtypes", ",".join(DTYPES)]) == 0
    report = json.loads((tmp_path / "operators.json").read_text())
    assert report["shapes"] == {"float32": [1, 8, 16, 32], "float16": [2, 8, 16, 32],
                                "int8": [4, 8, 16, 32]}  # fmt: skip
    copies = {r["dtype"]: r["bytes"] for r in report["rows"] if r["op"] == "copy"}
    assert copies == {d: 2 * 8 * 16 * 32 * 4 for d in DTYPES}  # read and written once
    assert bench.main(argv + ["--quick", "--dtypes", "float32,int8"]) == 0
    report = json.loads((tmp_path / "operators.json").read_text())
    assert report["shapes"]["int8"] == [4 * operators.QUICK_SHAPE[0], *operators.QUICK_SHAPE[1:]]
    assert bench.main(argv + ["--shape", "1,8,16,32", "--dtypes", "float64"]) == 2
