"""``InferenceSession(mesh=..., shardings=...)``: ONNX models sharded with JAX's own
distribution (docs/scaling.md, "ONNX sessions on a mesh").

JAX fixes its device count at start and the suite keeps one device, so the sharded runs happen
in subprocesses: tests/_session_mesh_worker.py (one process, 4 simulated CPU devices: data and
tensor parallelism, explicit shardings, the collectives of a tensor-parallel layer) and
tests/_distributed_worker.py (two processes joined by ``jax.distributed`` on the loopback
address, 2 simulated devices each: a sharded operator and a sharded session over the global
mesh). Each compares with the same model's one-device run. The in-process tests check how
shardings are validated, on the one device.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

pytest.importorskip("onnx")
from _session_mesh_worker import CASES
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import dml_jax as dml
from dml_jax.onnx import InferenceSession

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))
from onnx_transformer import example_input, tiny_transformer

MODEL = tiny_transformer(layers=1)

# One parallel test worker runs this module (pyproject's ``--dist loadgroup``): the 4-device
# report is computed once per worker that needs it, and it should be one.
pytestmark = pytest.mark.xdist_group("onnx-sharding")


def _env(devices: int) -> dict:
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    env["JAX_PLATFORMS"] = "cpu"
    paths = [str(ROOT), str(ROOT / "examples"), env.get("PYTHONPATH")]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, paths))
    return env


@pytest.fixture(scope="module")
def mesh_report() -> dict:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "_session_mesh_worker.py")],
        capture_output=True, text=True, env=_env(4), timeout=300, cwd=ROOT, check=False,
    )  # fmt: skip
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        pytest.fail(f"session mesh worker failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(lines[-1])


@pytest.mark.parametrize("case_id", CASES)
def test_sharded_session_case(mesh_report, case_id):
    assert mesh_report["devices"] == 4
    result = mesh_report["cases"][case_id]
    assert result["ok"], result["detail"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_over_jax_distributed():
    """Two CPU processes, 2 simulated devices each, one global mesh: a sharded operator and a
    sharded session agree with one device in both processes."""
    port = str(_free_port())
    procs = [
        subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "_distributed_worker.py"), port, str(i)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(2),
            cwd=ROOT,
        )
        for i in range(2)
    ]
    reports = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=240)
            # The report is the last JSON line (Gloo may log its connections to stdout).
            lines = [line for line in out.splitlines() if line.startswith('{"process"')]
            assert proc.returncode == 0 and lines, f"rc {proc.returncode}:\n{err[-4000:]}"
            reports.append(json.loads(lines[-1]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    assert sorted(r["process"] for r in reports) == [0, 1]
    for r in reports:
        assert r["devices"] == 4
        assert len(r["cases"]) == 2
        for case_id, result in r["cases"].items():
            assert result["ok"], f"process {r['process']}, {case_id}: {result['detail']}"


# ------------------------------------------------------------------ on the one device

MESH = jax.make_mesh((1,), ("data",))


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        (
            {"shardings": {"nope": P()}},
            (
                r"^ONNX: shardings: 'nope' is neither an input nor an initializer of the model; "
                r"inputs: \['x'\]$"
            ),
        ),
        (
            {"shardings": {"x": P(None, None, None, "data")}},
            (
                r"^ONNX: shardings: input 'x' has rank 3 \(shape \['batch', 'seq', 16\]\), but "
                r"its PartitionSpec"
            ),
        ),
        (
            {"shardings": {"l0.q.w": P("model")}},
            (
                r"^ONNX: shardings: initializer 'l0.q.w': P\('model',\) names mesh axis 'model'; "
                r"the mesh has \('data',\)$"
            ),
        ),
        (
            {"shardings": {"split_heads": P()}},
            r"^ONNX: shardings: initializer 'split_heads' is not a floating-point parameter",
        ),
        ({"shardings": {"x": "data"}}, r"^ONNX: shardings: input 'x' must be a PartitionSpec"),
        ({"mesh": None}, r"^ONNX: shardings of PartitionSpecs need a mesh"),
        ({"mesh": "data"}, r"^ONNX: mesh must be a jax.sharding.Mesh, got str$"),
    ],
)
def test_bad_shardings_raise_validation_error(kwargs, pattern):
    kwargs = {"mesh": MESH, **kwargs}
    if kwargs["mesh"] is None:
        kwargs["shardings"] = {"x": P("data")}
    with pytest.raises(dml.ValidationError, match=pattern):
        InferenceSession(MODEL, **kwargs)


def test_named_shardings_give_the_mesh():
    s = InferenceSession(MODEL, shardings={"x": NamedSharding(MESH, P("data"))})
    assert s.mesh.axis_names == ("data",)
    other = jax.make_mesh((1,), ("x",))
    with pytest.raises(dml.ValidationError, match=r"^ONNX: shardings: input 'x': its Named"):
        InferenceSession(MODEL, mesh=MESH, shardings={"x": NamedSharding(other, P())})


def test_one_device_mesh_matches_the_plain_session():
    x = example_input(2)
    (want,) = InferenceSession(MODEL).run(None, {"x": x})
    (got,) = InferenceSession(MODEL, mesh=MESH).run(None, {"x": x})
    np.testing.assert_array_equal(got, want)


def test_apply_on_a_mesh_runs_inside_a_callers_jit_whatever_the_options():
    """On a mesh ``apply`` runs its own jitted program; inside a caller's jit it is traced into
    the caller's (JAX takes compiler options on the outermost jit only)."""
    x = example_input(2)
    s = InferenceSession(MODEL, mesh=MESH, compiler_options={"xla_cpu_enable_fast_math": False})
    assert s.compiler_options["xla_cpu_enable_fast_math"] is False
    (want,) = s.run(None, {"x": x})
    (got,) = jax.jit(lambda v: s.apply(None, v))(x)
    # The caller's jit compiles with its own options: on a GPU its products may run another
    # algorithm and sum in another order (observed: 2.4e-7 apart on an H100).
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _external_matmul(folder: Path) -> tuple[Path, np.ndarray]:
    """A MatMul model whose weight ``w`` {8, 4} is external data in ``weights.bin``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = np.arange(32, dtype=np.float32).reshape(8, 4) / 8
    model = helper.make_model(
        helper.make_graph(
            [helper.make_node("MatMul", ["x", "w"], ["y"])],
            "external",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
            [numpy_helper.from_array(w, "w")],
        ),
        opset_imports=[helper.make_opsetid("", 20)],
    )
    path = folder / "model.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, location="weights.bin",
                    size_threshold=0)  # fmt: skip
    return path, w


def test_external_weights_are_mapped_not_read(tmp_path):
    import onnx

    path, w = _external_matmul(tmp_path)
    x = np.ones((2, 8), np.float32)
    # On a mesh, the file's top-level initializers keep their references and are mapped.
    s = InferenceSession(str(path), mesh=MESH)
    assert s.model.graph.initializer[0].data_location == onnx.TensorProto.EXTERNAL
    assert isinstance(s.params["w"], np.memmap)
    np.testing.assert_allclose(s.run(None, {"x": x})[0], x @ w, rtol=1e-6)
    # A proto with external references and a base_dir is mapped the same way.
    proto = onnx.load(str(path), load_external_data=False)
    t = InferenceSession(proto, base_dir=str(tmp_path))
    assert isinstance(t.params["w"], np.memmap)
    np.testing.assert_allclose(t.run(None, {"x": x})[0], x @ w, rtol=1e-6)
    # A location outside base_dir is not mapped; onnx's own loader refuses it.
    (entry,) = [e for e in proto.graph.initializer[0].external_data if e.key == "location"]
    entry.value = "../weights.bin"
    with pytest.raises(dml.ValidationError, match=r"^ONNX: initializer 'w': cannot be read"):
        InferenceSession(proto, base_dir=str(tmp_path / "sub")).run(None, {"x": x})
