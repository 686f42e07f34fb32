"""ONNX's own backend test suite (``onnx.backend.test.BackendTest``) as the ONNX front end's
conformance test, run through ``dml_jax.onnx.backend``: ``prepare`` builds an
``InferenceSession``, ``run`` runs it, and ONNX's runner compares the outputs with its expected
ones (shape, dtype, values within the case's tolerance).

Cases: every node test ONNX generates (an ``_expanded`` twin, an op's function body written
out as a graph of other ops, where its base case does not run, all twins with
``DML_JAX_ONNX_ALL_CASES=1``) and the model kinds 'simple', 'pytorch-converted' and
'pytorch-operator'; each as ``test_<case>_cpu`` and, where JAX has a GPU, ``test_<case>_cuda``
(run on that GPU; a machine without one does not collect them). ONNX's 'real' kind is left out
by default (``REAL_MODELS``).

``tests/onnx_backend_exclusions.txt`` is the one list of cases that cannot pass, each with its
reason. An excluded case still runs and must fail the way a case here fails (a wrong value, or
a ``ValidationError``: it is reported as xfail); one that passes fails the test, and so does an
entry that names no case, so the list stays true.

``test_backend_*`` check the backend's own calls (``run_node``, ``run_model``, devices,
arguments).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import subprocess
import sys
import unittest

import numpy as np
import pytest

pytest.importorskip("onnx")
import onnx.backend.test
from conftest import LEGACY_EMITTERS
from onnx import TensorProto, helper

import dml_jax as dml
from dml_jax.onnx.backend import DmlJaxBackend, DmlJaxBackendRep

EXCLUSIONS = os.path.join(os.path.dirname(__file__), "onnx_backend_exclusions.txt")

# ONNX's expected float16 values are computed in higher precision and rounded once; a DML graph
# rounds every node's float16 result, as DirectML does, so a chain of ops (an _expanded function
# body, say) can end a unit or two in the last place away (float16 has 11 significant bits: one
# unit is about 5e-4 just below 1). float16 outputs are compared within at least 1e-3, relative
# and absolute (the tolerance the node-test suite this replaced used).
FLOAT16_TOLERANCE = 1e-3

# Cases whose expected values carry the reference's float32 rounding where the exact value is 0:
# the inverse DFT's imaginary parts on its Nyquist row are 1.9e-7 in ONNX's data (terms up to 54),
# beyond ONNX's default atol of 1e-7 from the computed 0.
CASE_TOLERANCES = {
    "test_dft_inverse": {"atol": 1e-6},
    "test_dft_inverse_opset19": {"atol": 1e-6},
}

# ONNX's 'real' kind: nine image classifiers (AlexNet, DenseNet121, Inception v1/v2, ResNet50,
# ShuffleNet, SqueezeNet, VGG19, ZFNet512) in the small 'light' versions that ship with onnx, run
# on generated inputs against the outputs beside them (onnx 1.23 downloads nothing for them). They
# pass, but take about 40 s of one core and write their generated test data into ONNX_HOME
# (~/.onnx); DML_JAX_ONNX_REAL_MODELS=1 runs them.
REAL_MODELS = os.environ.get("DML_JAX_ONNX_REAL_MODELS") == "1"
REAL_MODELS_REASON = (
    "ONNX's 'real' models (light versions) take ~40 s and write into ONNX_HOME; "
    "DML_JAX_ONNX_REAL_MODELS=1 runs them"
)


def _light_models_dir() -> str:
    """Where ONNX's runner writes a light model's generated inputs and outputs (its own rule)."""
    home = os.path.expanduser(os.getenv("ONNX_HOME", os.path.join("~", ".onnx")))
    return os.getenv("ONNX_MODELS", os.path.join(home, "models", "light"))


@contextlib.contextmanager
def _model_lock(model: str):
    """Held by one test process at a time for ``model``: ONNX's runner writes a light model's
    inputs and expected outputs into one folder per model, shared by the model's _cpu and _cuda
    cases, and reads them back. Under parallel workers on a machine with a GPU the two cases
    ran at once, and one read the files while the other was writing them (wrong outputs, a
    missing input)."""
    folder = _light_models_dir()
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f".{model}.dml_jax.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _one_at_a_time(test, model: str):
    """``test`` of a real model, run holding ``_model_lock(model)``."""

    @functools.wraps(test)
    def locked(self):
        with _model_lock(model):
            test(self)

    return locked


def read_exclusions(path: str = EXCLUSIONS) -> dict[str, tuple[str, str]]:
    """Case name (no device suffix) -> (section, reason), from a file of ``[section]`` lines,
    ``name: reason`` lines and ``#`` comment lines. A malformed or repeated entry raises."""
    out: dict[str, tuple[str, str]] = {}
    section = ""
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith("[") and line.endswith("]"):
                section = line[1:-1]
                continue
            name, colon, reason = (s.strip() for s in line.partition(":"))
            if not colon or not reason or not name.startswith("test_") or " " in name:
                raise ValueError(f"{path}:{number}: expected 'test_<case>: reason', got {line!r}")
            if name in out:
                raise ValueError(f"{path}:{number}: {name} is listed twice")
            out[name] = (section, reason)
    return out


class DmlJaxBackendTest(onnx.backend.test.BackendTest):
    """ONNX's runner with float16 outputs compared within ``FLOAT16_TOLERANCE`` at least, and
    sequence and optional outputs compared the way ONNX's data holds them."""

    @classmethod
    def assert_similar_outputs(cls, ref_outputs, outputs, rtol, atol, model_dir=None):
        """Output by output: a sequence (a list) element by element, an empty optional (None)
        only with None, a tensor by ONNX's own comparison. (ONNX's runner recurses into a
        sequence with bare arrays, which its comparison cannot take, and has no case for None.)
        """
        assert len(outputs) == len(ref_outputs), (len(outputs), len(ref_outputs))
        for ref, out in zip(ref_outputs, outputs):
            if ref is None or out is None:
                assert ref is None and out is None, f"expected {type(ref)}, got {type(out)}"
            elif isinstance(ref, list | tuple) or isinstance(out, list | tuple):
                assert isinstance(ref, list | tuple) and isinstance(out, list | tuple), (
                    f"expected {type(ref)}, got {type(out)}"
                )
                cls.assert_similar_outputs(list(ref), list(out), rtol, atol, model_dir)
            else:
                r, a = rtol, atol
                if getattr(ref, "dtype", None) == np.float16:
                    r, a = max(r, FLOAT16_TOLERANCE), max(a, FLOAT16_TOLERANCE)
                super().assert_similar_outputs([ref], [out], r, a, model_dir)


def _expect_failure(test, name: str, reason: str):
    """``test`` of an excluded case: xfail when it fails as a case here fails, a failure when
    it passes. Any other exception is an error (a crash is never an expected failure)."""

    @functools.wraps(test)
    def excluded(self):
        try:
            test(self)
        except (AssertionError, dml.ValidationError):
            pytest.xfail(reason)
        pytest.fail(
            f"{name} passes, but {os.path.basename(EXCLUSIONS)} excludes it ({reason}): "
            "take it off the list",
            pytrace=False,
        )

    return excluded


EXCLUDED = read_exclusions()

# An ``_expanded`` case is its op's function body written out as other ops, each of which has
# node cases of its own, and its base case runs the same body (or the op's converter). By
# default a twin whose base case runs is skipped: together they would cost the suite a third
# more time on two cores for no op not tested already. DML_JAX_ONNX_ALL_CASES=1 runs them (all
# pass: the list above names the twins that cannot).
ALL_CASES = os.environ.get("DML_JAX_ONNX_ALL_CASES") == "1"
TWIN_REASON = "an _expanded twin whose base case runs; DML_JAX_ONNX_ALL_CASES=1 runs it"


def _twin_of(case: str) -> str:
    return case.replace("_expanded", "", 1)


# Casts to FNUZ float8 (no negative zero) under the XLA options conftest.py compiles the suite's
# CPU programs with: XLA's direct LLVM emitters give some of them FNUZ's NaN where the value is
# 0. XLA's default emitters, the ones users get, are right: there these cases run in a process of
# their own (test_fnuz_casts_under_xla_default_emitters).
USES_LEGACY = LEGACY_EMITTERS in os.environ.get("XLA_FLAGS", "")
FNUZ_REASON = "a cast to FNUZ float8: run with XLA's default emitters by another test"
FNUZ_CASTS: list[str] = []  # node ids of those cases


def _casts_to_fnuz(case: str) -> bool:
    return case.startswith("test_cast") and "FNUZ" in case.partition("_to_")[2]


HAS_CUDA = DmlJaxBackend.supports_device("CUDA")
with np.errstate(all="ignore"):  # generating ONNX's cases overflows on purpose (casts)
    backend_test = DmlJaxBackendTest(DmlJaxBackend, __name__, test_kwargs=CASE_TOLERANCES)
TEST_CASES = backend_test.test_cases
BASES = {  # cases that run (not excluded), by name without the device suffix
    a.rpartition("_")[0]
    for c in TEST_CASES.values()
    for a in vars(c)
    if a.startswith("test_") and a.rpartition("_")[0] not in EXCLUDED
}
CASES: set[str] = set()  # every case name, without its device suffix
for _kind, _cls in TEST_CASES.items():
    for _attr in [a for a in vars(_cls) if a.startswith("test_")]:
        _case, _, _device = _attr.rpartition("_")
        CASES.add(_case)
        _test = vars(_cls)[_attr]
        if _device == "cuda" and not HAS_CUDA:
            delattr(_cls, _attr)
        elif _kind == "OnnxBackendRealModelTest" and not REAL_MODELS:
            setattr(_cls, _attr, unittest.skip(REAL_MODELS_REASON)(_test))
        elif _kind == "OnnxBackendRealModelTest":
            setattr(_cls, _attr, _one_at_a_time(_test, _case.removeprefix("test_")))
        elif "_expanded" in _case and not ALL_CASES and _twin_of(_case) in BASES:
            setattr(_cls, _attr, unittest.skip(TWIN_REASON)(_test))
        elif _case in EXCLUDED:
            setattr(_cls, _attr, _expect_failure(_test, _case, EXCLUDED[_case][1]))
        elif _casts_to_fnuz(_case) and _device == "cpu":
            FNUZ_CASTS.append(f"{__file__}::{_kind}::{_attr}")
            if USES_LEGACY:
                setattr(_cls, _attr, unittest.skip(FNUZ_REASON)(_test))
del (
    _kind,
    _cls,
    _attr,
    _case,
    _device,
    _test,
)  # a TestCase class left under another name would run twice
globals().update(TEST_CASES)


@pytest.mark.skipif(not USES_LEGACY, reason="the casts to FNUZ float8 ran in this process")
def test_fnuz_casts_under_xla_default_emitters():
    assert len(FNUZ_CASTS) >= 16, FNUZ_CASTS  # onnx 1.23's, less the _expanded twins
    env = dict(os.environ, DML_JAX_XLA_FUSION_EMITTERS="1")
    env["XLA_FLAGS"] = env["XLA_FLAGS"].replace(LEGACY_EMITTERS, "")
    args = ["-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", *FNUZ_CASTS]
    done = subprocess.run(
        [sys.executable, *args], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0 and f"{len(FNUZ_CASTS)} passed" in done.stdout, done.stdout[-3000:]


def test_a_real_model_is_run_by_one_process_at_a_time(tmp_path, monkeypatch):
    monkeypatch.setenv("ONNX_MODELS", str(tmp_path))
    probe = (
        "import fcntl, sys\n"
        "with open(sys.argv[1], 'w') as f:\n"
        "    try:\n"
        "        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
        "    except BlockingIOError:\n"
        "        sys.exit(3)\n"
    )
    path = str(tmp_path / ".squeezenet.dml_jax.lock")

    def other_process() -> int:
        return subprocess.run([sys.executable, "-c", probe, path], check=False).returncode

    ran = []
    test = _one_at_a_time(lambda self: ran.append(other_process()), "squeezenet")
    test(None)
    assert ran == [3]  # while the case ran, another process could not take the model
    assert other_process() == 0  # and could after it


def test_exclusions_name_cases():
    unknown = sorted(set(EXCLUDED) - CASES)
    assert not unknown, f"{os.path.basename(EXCLUSIONS)} names no ONNX backend test: {unknown}"


# -- the backend's own calls ---------------------------------------------------------------------


def _add_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    s = helper.make_tensor_value_info("s", TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph([helper.make_node("Add", ["x", "y"], ["s"])], "g", [x, y], [s])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_backend_run_model_and_rep():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.full((2, 3), 0.5, np.float32)
    (s,) = DmlJaxBackend.run_model(_add_model(), [x, y])
    np.testing.assert_array_equal(s, x + y)
    rep = DmlJaxBackend.prepare(_add_model().SerializeToString(), "CPU")
    assert isinstance(rep, DmlJaxBackendRep)
    out = rep.run({"x": x, "y": y})
    np.testing.assert_array_equal(out["s"], x + y)  # outputs by name too
    assert rep.session.get_providers() == ["CPUExecutionProvider"]


def test_backend_run_node():
    node = helper.make_node("Gemm", ["a", "b"], ["c"], transB=1)
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.ones((4, 3), np.float32)
    (c,) = DmlJaxBackend.run_node(node, [a, b])
    np.testing.assert_allclose(c, a @ b.T)
    (c,) = DmlJaxBackend.run_node(node, {"a": a, "b": b}, outputs_info=[(np.float32, (2, 4))])
    np.testing.assert_allclose(c, a @ b.T)
    (y,) = DmlJaxBackend.run_node(helper.make_node("Relu", ["x"], ["y"]), [a - 2], opset_version=6)
    np.testing.assert_array_equal(y, np.maximum(a - 2, 0))


def test_backend_devices_and_arguments():
    assert DmlJaxBackend.supports_device("CPU")
    assert not DmlJaxBackend.supports_device("TPU")
    assert not DmlJaxBackend.supports_device("CUDA:99")
    with pytest.raises(dml.ValidationError, match="unknown device"):
        DmlJaxBackend.prepare(_add_model(), "TPU")
    with pytest.raises(TypeError, match="unexpected keyword"):
        DmlJaxBackend.prepare(_add_model(), "CPU", providers=["CPUExecutionProvider"])
    rep = DmlJaxBackend.prepare(_add_model(), "CPU", rtol=1e-3, atol=1e-7)  # ONNX's runner's
    with pytest.raises(dml.ValidationError, match="takes inputs"):
        rep.run([np.zeros((2, 3), np.float32)])


@pytest.mark.skipif(not HAS_CUDA, reason="JAX has no GPU")
def test_backend_cuda_runs_on_the_gpu():
    rep = DmlJaxBackend.prepare(_add_model(), "CUDA")
    assert rep.session.get_providers() == ["CUDAExecutionProvider"]
    x = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(rep.run([x, x])[0], 2 * x)


def test_backend_without_onnx(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx", None)  # import onnx now raises ImportError
    with pytest.raises(ImportError, match=r"pip install 'dml-jax\[onnx\]'"):
        DmlJaxBackend.prepare(b"", "CPU")
    with pytest.raises(ImportError, match=r"pip install 'dml-jax\[onnx\]'"):
        DmlJaxBackend.run_node(None, [])
