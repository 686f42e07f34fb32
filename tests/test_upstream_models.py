"""Microsoft's DxDispatch example models, run unchanged, print what DirectML prints.

The models are third-party data kept outside the project (../shared/conformance); the test runs
them from a temporary copy (they write files next to themselves) and skips when they are absent.
Expected lines are the values DirectML computes from each model's initial values.
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
import shutil

import numpy as np
import pytest

from dml_jax import cli

MODELS = (
    pathlib.Path(__file__).resolve().parents[2]
    / "shared/conformance/dxdispatch_models/DxDispatch/models"
)

EXPECTED = {
    "dml_element_wise_add": ["Resource 'Out': 6, 10, -2"],
    "dml_element_wise_add_npy": ["Resource 'Out': 2, 4, 6, 8, 10, 12"],
    "dml_owned_tensors": ["Resource 'Out': 6, 10, -2"],
    "dml_element_wise_add1": ["Resource 'Out': 6, 10, -0.432332"],
    "dml_element_wise_identity": ["Resource 'Out': 12, 14, 16"],
    "dml_split": ["Resource 'Out1': 1, 2", "Resource 'Out2': 3, 4", "Resource 'Out3': 5, 6"],
    "dml_join": ["Resource 'Out': 1, 2, 3, 100, 115, 5, 6, 7, 8, 9"],
    "dml_reduce": ["Resource 'input': 1, 2, 3, 4, 5, 6, 7, 8, 9", "Resource 'output': 6, 15, 24"],
    "dml_element_wise_clip": ["Resource 'A': -2.5, -2.5, -2, -1, 0, 1, 2, 2.5, 2.5"],
    "dml_scalar_union_fp16": ["Resource 'output': 2, 2, 3, 4, 4"],
    "dml_gemm": ["Resource 'output': 6, 7, 8, 10, 12, 14, 14, 17, 20"],
    # ones x ones over K = 32, compiled as a graph with ALLOW_HALF_PRECISION_COMPUTATION
    "dml_gemm_graph": ["Resource 'output': " + ", ".join(["32"] * 1024)],
    "dml_convolution_2d": ["Resource 'output': 6, 8, 12, 14"],
    # a 3x3x3 input of ones through a 2x2x2 filter of 0.5
    "dml_convolution_3d": ["Resource 'output': " + ", ".join(["4"] * 8)],
    "dml_cumulative_product": ["Resource 'Out': 2, 8, 64, 192"],
    "dml_fill_value_sequence": ["Resource 'Out': 3.2, 4.7, 6.2, 7.7, 9.2"],
    # 1..25 as {1, 1, 5, 5}: rows 1-3, columns 1 and 3
    "dml_slice": ["Resource 'output': 7, 9, 12, 14, 17, 19"],
    # 1..4 as {1, 1, 2, 2} enlarged 2x bilinearly at pixel centres, edges clamped
    "dml_upsample_2d": [
        (
            "Resource 'output': 1, 1.25, 1.75, 2, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25, 3.5, 3, "
            "3.25, 3.75, 4"
        )
    ],
    # A bidirectional RNN, one step: X = 1..32 as {1, 1, 8, 4}, W = 1, 1.4, ... 16.6 as
    # {1, 2, 5, 4}, no hidden init (0), so each output is ELU(X W_d^T) with all-positive
    # arguments (ELU passes them through); values from tests/reference/recurrent.py, direction
    # 0 then 1, each {8 batch, 5 hidden}.
    "dml_rnn": [
        (
            "Resource 'output': 18, 34, 50, 66, 82, 43.6, 85.2, 126.8, 168.4, 210, 69.2, 136.4, "
            "203.6, 270.8, 338, 94.8, 187.6, 280.4, 373.2, 466, 120.4, 238.8, 357.2, 475.6, 594, "
            "146, 290, 434, 578, 722, 171.6, 341.2, 510.8, 680.4, 850, 197.2, 392.4, 587.6, 782.8, "
            "978, 98, 114, 130, 146, 162, 251.6, 293.2, 334.8, 376.4, 418, 405.2, 472.4, 539.6, "
            "606.8, 674, 558.8, 651.6, 744.4, 837.2, 930, 712.4, 830.8, 949.2, 1067.6, 1186, 866, "
            "1010, 1154, 1298, 1442, 1019.6, 1189.2, 1358.8, 1528.4, 1698, 1173.2, 1368.4, 1563.6, "
            "1758.8, 1954"
        )
    ],
    # A serialized DML graph (one GEMM node): model_input = five 1.5s as {1, 1, 1, 5} times
    # matmul_add/matmul_b_tensor.bin (a 5x5 of 1.5) plus add_b_tensor.bin (five 1s):
    # 5 x 1.5 x 1.5 + 1 = 12.25 in each column.
    "dmlSerializedGraph_matmul_add": ["Resource 'model_output': " + ", ".join(["12.25"] * 5)],
}

# ONNX dispatchables (need the onnx package). onnx_gemm: A0 @ B0 + A1 @ B1 with A = 1..6 as
# {3, 2} and B = 1..8 as {2, 4} (NumPy: 2 * A @ B); onnx_dynamic_shapes: Concat on axis 0 of
# a = 1..6 and b = 7..12 viewed as {1, 2} (into the first 4 of c's 12 zeros), then as {3, 2}
# (twice: into c, then into a deferred resource sized by the output).
_A, _B = np.arange(1, 7.0).reshape(3, 2), np.arange(1, 9.0).reshape(2, 4)
ONNX_EXPECTED = {
    "onnx_gemm": ["Resource 'Out': " + ", ".join(f"{v:g}" for v in (2 * _A @ _B).ravel())],
    "onnx_dynamic_shapes": [
        "Resource 'c': 1, 2, 7, 8, 0, 0, 0, 0, 0, 0, 0, 0",
        "Resource 'c': " + ", ".join(str(v) for v in range(1, 13)),
        "Resource 'deferredY': " + ", ".join(str(v) for v in range(1, 13)),
    ],
}
if importlib.util.find_spec("onnx") is not None:
    EXPECTED.update(ONNX_EXPECTED)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    if not MODELS.is_dir():
        pytest.skip("the DxDispatch models are not beside this checkout")
    copy = tmp_path_factory.mktemp("models") / "models"
    shutil.copytree(MODELS, copy)
    return copy


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_upstream_model_prints_directml_values(name, models, capsys, monkeypatch):
    monkeypatch.chdir(models)
    assert cli.main(["run", str(models / f"{name}.json")]) == 0
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("Resource")]
    printed = [line for line in printed if " written to " not in line]
    assert printed == EXPECTED[name]


def test_upstream_npy_model_writes_its_files(models, tmp_path, monkeypatch):
    # A fresh copy: the runner will not overwrite the files an earlier test wrote.
    models = tmp_path / "models"
    shutil.copytree(MODELS, models)
    monkeypatch.chdir(models)
    assert cli.main(["run", str(models / "dml_element_wise_add_npy.json")]) == 0
    out = np.load(models / "dml_element_wise_add_output.npy")
    np.testing.assert_array_equal(out.ravel(), [2, 4, 6, 8, 10, 12])
    raw = (models / "dml_element_wise_add_output.dat").read_bytes()
    np.testing.assert_array_equal(np.frombuffer(raw, out.dtype), out.ravel())


def _history_model(name: str, tmp_path, monkeypatch) -> pathlib.Path:
    """A scratch copy of the folder of ``name`` from an older DxDispatch revision (history/),
    made the current directory; the model's path in it. Skips when it is absent."""
    history = MODELS.parents[1] / "history"
    found = sorted(history.glob(f"*/DxDispatch/models/{name}"))
    if not found:
        pytest.skip(f"{name} is not beside this checkout")
    models = tmp_path / "models"
    shutil.copytree(found[0].parent, models)
    monkeypatch.chdir(models)
    return models / name


def _initial_values(resource: dict, folder: pathlib.Path) -> np.ndarray:
    """A FLOAT16 resource's initial values as its JSON gives them: a constant or a .npy file."""
    assert resource["initialValuesDataType"] == "FLOAT16"
    init = resource["initialValues"]
    if "sourcePath" in init:
        return np.load(folder / init["sourcePath"]).ravel()
    return np.full(init["valueCount"], init["value"], np.float16)


def _tensor(flat: np.ndarray, tensor: dict) -> np.ndarray:
    """The elements a DML tensor description addresses in a buffer (Sizes, Strides)."""
    strides = [s * flat.itemsize for s in tensor["Strides"]]
    return np.lib.stride_tricks.as_strided(flat, tensor["Sizes"], strides)


def _convolution(desc: dict, x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """DML_CONVOLUTION (forward cross-correlation, one group) as its JSON describes it, in
    float64: the input padded with zeros by StartPadding / EndPadding; output element (n, k,
    i, j) is bias[k] plus the sum over channels c and window offsets (p, q) of
    x[n, c, i * stride + p * dilation, j * stride + q * dilation] * w[k, c, p, q]."""
    assert desc["Mode"] == "DML_CONVOLUTION_MODE_CROSS_CORRELATION"
    assert desc["Direction"] == "DML_CONVOLUTION_DIRECTION_FORWARD" and desc["GroupCount"] == 1
    (sh, sw), (dh, dw) = desc["Strides"], desc["Dilations"]
    start, end = desc["StartPadding"], desc["EndPadding"]
    x = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (start[0], end[0]), (start[1], end[1])])
    w = w.astype(np.float64)
    n, _, oh, ow = desc["OutputTensor"]["Sizes"]
    y = np.zeros((n, w.shape[0], oh, ow)) + b.astype(np.float64)
    for p in range(w.shape[2]):
        for q in range(w.shape[3]):
            window = x[:, :, p * dh : p * dh + sh * oh : sh, q * dw : q * dw + sw * ow : sw]
            y += np.einsum("nchw,kc->nkhw", window, w[:, :, p, q])
    return y


@pytest.mark.parametrize("data", ["upstream", "random"])
def test_older_conv_0_model_matches_a_numpy_convolution(data, tmp_path, monkeypatch, rng):
    """``conv_0.json`` from an older DxDispatch revision (history/): a FLOAT16 3x3 convolution
    of a {1, 3, 360, 480} image into 16 channels, padded by 1, with
    ALLOW_HALF_PRECISION_COMPUTATION. The model's own initial values are all zeros (so is its
    output); ``random`` gives its three inputs random values from .npy files instead. A
    ``writeFile`` command added at the end saves the output, which must be the NumPy
    convolution's."""
    path = _history_model("conv_0.json", tmp_path, monkeypatch)
    model = json.loads(path.read_text())
    resources = model["resources"]
    if data == "random":
        for name in ("input", "filter", "bias"):
            count = resources[name]["initialValues"]["valueCount"]
            np.save(path.parent / f"{name}.npy", rng.uniform(-1, 1, count).astype(np.float16))
            resources[name]["initialValues"] = {"sourcePath": f"{name}.npy"}
    model["commands"].append({"type": "writeFile", "resource": "output", "targetPath": "y.npy"})
    path.write_text(json.dumps(model))
    assert cli.main(["run", str(path)]) == 0

    desc = model["dispatchables"]["conv2d"]["desc"]
    x, w, b = (
        _tensor(_initial_values(resources[r], path.parent), desc[t])
        for r, t in (("input", "InputTensor"), ("filter", "FilterTensor"), ("bias", "BiasTensor"))
    )
    want = _convolution(desc, x, w, b)
    got = _tensor(np.load(path.parent / "y.npy"), desc["OutputTensor"]).astype(np.float64)
    # FLOAT16 with half-precision computation allowed: an output element takes at most 56
    # roundings (27 products, 27 additions and the bias's, the result's), each of relative
    # error at most 2**-11, so it is within 56 * 2**-11 of the sum of its terms' magnitudes
    # (a misplaced window or a missing bias errs by whole terms, far beyond this).
    bound = 56 * 2.0**-11 * _convolution(desc, np.abs(x), np.abs(w), np.abs(b)) + 1e-6
    assert got.shape == want.shape
    np.testing.assert_array_less(np.abs(got - want), bound)
    if data == "upstream":
        assert not want.any()


def test_mha_branch_model_matches_the_reference(tmp_path, monkeypatch, capsys):
    """``dml_mha.json`` from DxDispatch's multi-head attention feature branch (history/):
    MULTIHEAD_ATTENTION on a FLOAT16 {2, 2, 1, 3, 32} StackedQueryKeyValue tensor (a sequence
    from 0 in steps of 0.01) with ALLOW_HALF_PRECISION_COMPUTATION. Its printInitTemporary and
    printExecTemporary commands print nothing (a dml-jax dispatchable has no DirectML temporary
    buffer). The printed output is the NumPy reference's on the model's own initial values."""
    import reference

    from dml_jax.dxdispatch import load_model

    path = _history_model("dml_mha.json", tmp_path, monkeypatch)
    assert cli.main(["run", str(path)]) == 0
    out = capsys.readouterr().out
    printed = [line for line in out.splitlines() if line.startswith("Resource")]
    assert len(printed) == 1 and printed[0].startswith("Resource 'output': ")
    assert "Temporary" not in out
    values = np.array([float(v) for v in printed[0].split(": ", 1)[1].split(", ")])

    model = load_model(str(path))
    desc = model.dispatchables["mha"].op.desc
    qkv_desc = desc.stacked_query_key_value_tensor
    raw = model.resources["stackedQueryKeyValue"].initial
    qkv = np.frombuffer(raw, np.float16)[: qkv_desc.element_count].reshape(qkv_desc.sizes)
    (want,) = reference.reference(desc, qkv)
    assert values.shape == (want.size,)
    np.testing.assert_allclose(values, want.astype(np.float64).ravel(), rtol=2e-3, atol=2e-3)
