"""Targeted tests for each limit of the hardening issue: DML's UINT32/UINT64 fields, ranks,
malformed numbers, NaN bounds, empty and duplicate arrays, huge repeat factors, the command
line's memory budget, hostile model files, paths and overwrites, and "nothing is lost".
"""

from __future__ import annotations

import json
import math
import os
import time

import numpy as np
import pytest

import dml_jax as dml
from dml_jax import cli
from dml_jax.dxdispatch import (
    Executor,
    ModelError,
    default_memory_budget,
    load_model,
    select_device,
)

F32 = dml.TensorDesc("FLOAT32", [2, 3])
U32 = 2**32 - 1


def rejects(pattern: str, build, *args, **kwargs) -> str:
    """``build(*args, **kwargs)`` then validate: a ValidationError matching ``pattern``."""
    with pytest.raises(dml.ValidationError, match=pattern) as info:
        desc = build(*args, **kwargs)
        if not isinstance(desc, (dml.TensorDesc, dml.ScaleBias)):
            dml.validate(desc)
    assert len(str(info.value)) < 400, "messages stay short whatever the input"
    return str(info.value)


# --- Sizes, strides and byte sizes against DML's UINT32 / UINT64 fields ------------------------


def test_element_count_limit_is_uint32():
    assert dml.TensorDesc("UINT8", [65535, 65537]).element_count == U32
    rejects(
        r"^TensorDesc\.Sizes describe 4294967296 elements", dml.TensorDesc, "UINT8", [65536, 65536]
    )
    rejects(r"^TensorDesc\.Sizes\[0\] must be <= 4294967295", dml.TensorDesc, "UINT8", [2**32])


def test_strided_extent_limit_is_uint32():
    rejects(
        r"^TensorDesc\.Strides address element", dml.TensorDesc, "UINT8", [2, 2], [2**32 - 1, 1]
    )
    rejects(
        r"^TensorDesc\.Strides\[0\] must be <= 4294967295", dml.TensorDesc, "UINT8", [2], [2**32]
    )


def test_total_tensor_size_limit_is_uint64():
    t = dml.TensorDesc("FLOAT32", [2], total_tensor_size_in_bytes=2**64 - 4)
    assert t.total_tensor_size_in_bytes == 2**64 - 4
    rejects(
        r"^TensorDesc\.TotalTensorSizeInBytes must be <= 18446744073709551615",
        dml.TensorDesc,
        "FLOAT32",
        [2],
        total_tensor_size_in_bytes=2**64,
    )


@pytest.mark.parametrize("sizes", [[1] * 9, [1] * 10**6, []])
def test_absurd_ranks_are_rejected_quickly(sizes):
    start = time.perf_counter()
    rejects(r"^TensorDesc\.DimensionCount must be in \[1, 8\]", dml.TensorDesc, "FLOAT32", sizes)
    assert time.perf_counter() - start < 2


@pytest.mark.parametrize(
    "bad, pattern",
    [
        (-1, r"Sizes\[1\] must be >= 1, got -1"),
        (0, r"Sizes\[1\] must be >= 1, got 0"),
        (1.5, r"Sizes\[1\] must be an integer, got 1\.5"),
        (2.0, r"Sizes\[1\] must be an integer, got 2\.0"),
        ("2", r"Sizes\[1\] must be an integer, got '2'"),
        (None, r"Sizes\[1\] must be an integer, got None"),
        (True, r"Sizes\[1\] must be an integer, got True"),
        (np.bool_(True), r"Sizes\[1\] must be an integer"),
        (10**5000, r"Sizes\[1\] must be <= 4294967295, got <16610-bit integer>"),
    ],
    ids=lambda v: type(v).__name__ if not isinstance(v, str) or len(v) < 8 else "",
)
def test_malformed_sizes(bad, pattern):
    rejects(r"^TensorDesc\." + pattern, dml.TensorDesc, "FLOAT32", [2, bad])


@pytest.mark.parametrize(
    "build, pattern",
    [
        (
            lambda: dml.SplitOperatorDesc(F32, [F32], axis=True),
            r"Axis must be an integer, got True",
        ),
        (
            lambda: dml.DepthToSpaceOperatorDesc(F32, F32, block_size=False),
            r"BlockSize must be an integer, got False",
        ),
        (
            lambda: dml.TileOperatorDesc(F32, F32, repeats=[1, True]),
            r"Repeats\[1\] must be an integer, got True",
        ),
        (
            lambda: dml.ReduceOperatorDesc("SUM", F32, F32, axes=[True]),
            r"Axes\[0\] must be an integer, got True",
        ),
        (
            lambda: dml.ElementWiseClipOperatorDesc(F32, F32, min=True, max=1.0),
            r"Min must be a number, got True",
        ),
        (
            lambda: dml.ElementWiseClip1OperatorDesc(F32, F32, min=0, max=np.bool_(False)),
            r"Max must be a number",
        ),
        (
            lambda: dml.SplitOperatorDesc(F32, [F32], axis=0, output_count=True),
            r"OutputCount must be an integer, got True",
        ),
    ],
)
def test_booleans_where_numbers_belong(build, pattern):
    rejects(r"^DML_OPERATOR_\w+: " + pattern, build)


def test_integers_beyond_a_double_are_rejected_not_crashed():
    for cls in (dml.ElementWiseClipOperatorDesc, dml.ElementWiseClip1OperatorDesc):
        message = rejects(
            r"^DML_OPERATOR_ELEMENT_WISE_CLIP1?: Min ", cls, F32, F32, min=10**400, max=1
        )
        assert "bit integer" in message
    rejects(
        r"^ScaleBias\.Scale must be a number within a double's range", dml.ScaleBias, 10**400, 0
    )


# --- NaN bounds, Min > Max -----------------------------------------------------------------


@pytest.mark.parametrize(
    "cls, extra",
    [
        (dml.ElementWiseClipOperatorDesc, ()),
        (dml.ElementWiseClip1OperatorDesc, ()),
        (dml.ElementWiseClipGradOperatorDesc, (F32,)),
        (dml.ElementWiseClipGrad1OperatorDesc, (F32,)),
    ],
)
@pytest.mark.parametrize("which", ["min", "max"])
def test_nan_bounds_are_rejected(cls, extra, which):
    bounds = {"min": 0.0, "max": 1.0, which: math.nan}
    rejects(
        rf"^{cls.operator_type}: {which.capitalize()} must not be NaN",
        cls,
        F32,
        *extra,
        F32,
        **bounds,
    )


def test_nan_scale_bias_is_rejected():
    rejects(r"^ScaleBias\.Bias must be finite, got nan", dml.ScaleBias, 1.0, math.nan)


def test_clip_min_greater_than_max_is_valid_and_gives_min():
    x = np.array([[-5, 0, 1], [2, 3, 9]], np.float32)
    for cls in (dml.ElementWiseClipOperatorDesc, dml.ElementWiseClip1OperatorDesc):
        op = dml.compile_operator(cls(F32, F32, min=4.0, max=-1.0))
        np.testing.assert_array_equal(np.asarray(op(x)), np.full((2, 3), 4.0, np.float32))


def test_clip_grad_min_not_below_max_gives_zero_gradient():
    x = np.array([[-5, 0, 1], [2, 3, 9]], np.float32)
    g = np.ones((2, 3), np.float32)
    for lo, hi in ((4.0, -1.0), (2.0, 2.0)):
        op = dml.compile_operator(dml.ElementWiseClipGradOperatorDesc(F32, F32, F32, lo, hi))
        np.testing.assert_array_equal(np.asarray(op(x, g)), np.zeros((2, 3), np.float32))


# --- Empty arrays, duplicate axes, huge repeat factors, sums ----------------------------------


@pytest.mark.parametrize(
    "build, pattern",
    [
        (lambda: dml.SplitOperatorDesc(F32, [], axis=0), r"SPLIT: OutputTensors must not be empty"),
        (lambda: dml.JoinOperatorDesc([], F32, axis=0), r"JOIN: InputTensors must not be empty"),
        (
            lambda: dml.ReduceOperatorDesc("SUM", F32, F32, axes=[]),
            r"REDUCE: Axes must not be empty",
        ),
        (lambda: dml.ArgMinOperatorDesc(F32, F32, axes=()), r"ARGMIN: Axes must not be empty"),
        (lambda: dml.TileOperatorDesc(F32, F32, repeats=[]), r"TILE: Repeats must have one entry"),
    ],
)
def test_empty_arrays(build, pattern):
    rejects(r"^DML_OPERATOR_" + pattern, build)


@pytest.mark.parametrize("cls", [dml.ArgMinOperatorDesc, dml.ArgMaxOperatorDesc])
def test_duplicate_axes(cls):
    out = dml.TensorDesc("UINT32", [1, 3])
    rejects(rf"^{cls.operator_type}: Axes\[1\] repeats axis 0", cls, F32, out, axes=[0, 0])
    rejects(
        r"^DML_OPERATOR_REDUCE: Axes\[1\] repeats axis 0",
        dml.ReduceOperatorDesc,
        "SUM",
        F32,
        F32.like(sizes=(1, 3)),
        axes=[0, 0],
    )


def test_huge_repeat_factors_are_rejected_before_allocation():
    start = time.perf_counter()
    rejects(r"^DML_OPERATOR_TILE: ", dml.TileOperatorDesc, F32, F32, repeats=[U32, 2])
    rejects(r"^DML_OPERATOR_TILE: ", dml.TileOperatorDesc, F32, F32, repeats=[2**31, 3])
    rejects(
        r"^DML_OPERATOR_TILE: Repeats\[0\] must be <= 4294967295",
        dml.TileOperatorDesc,
        F32,
        F32,
        repeats=[2**32, 1],
    )
    assert time.perf_counter() - start < 2


def test_huge_but_valid_tile_validates_without_allocating():
    x = dml.TensorDesc("UINT8", [1, 1])
    y = dml.TensorDesc("UINT8", [65535, 65537])
    start = time.perf_counter()
    dml.validate(dml.TileOperatorDesc(x, y, repeats=[65535, 65537]))
    assert time.perf_counter() - start < 1


def test_depth_space_huge_block_size():
    x = dml.TensorDesc("FLOAT32", [1, 4, 2, 2])
    rejects(r"^DML_OPERATOR_DEPTH_TO_SPACE: ", dml.DepthToSpaceOperatorDesc, x, x, U32)
    rejects(r"^DML_OPERATOR_SPACE_TO_DEPTH: ", dml.SpaceToDepthOperatorDesc, x, x, 2**31)


def test_split_join_sums_beyond_uint32():
    half = dml.TensorDesc("UINT8", [2**31])
    whole = dml.TensorDesc("UINT8", [U32])
    rejects(
        r"^DML_OPERATOR_JOIN: InputTensors sizes along Axis 0 must sum to "
        r"OutputTensor\.Sizes\[0\] \(4294967295\), got 4294967296",
        dml.JoinOperatorDesc,
        [half, half],
        whole,
        0,
    )
    rejects(
        r"^DML_OPERATOR_SPLIT: OutputTensors sizes along Axis 0 must sum to "
        r"InputTensor\.Sizes\[0\] \(4294967295\), got 4294967296",
        dml.SplitOperatorDesc,
        whole,
        [half, half],
        0,
    )


def test_messages_stay_short_for_huge_inputs():
    message = rejects(
        r"^TensorDesc\.Sizes must be", dml.TensorDesc, "FLOAT32", {i: i for i in range(10**5)}
    )
    assert len(message) < 200
    rejects(
        r"^DML_OPERATOR_REDUCE: Function must be a ReduceFunction",
        dml.ReduceOperatorDesc,
        ["SUM"] * 10**5,
        F32,
        F32,
        axes=[0],
    )


# --- Command line: memory budget --------------------------------------------------------------


def clip_model(**changes) -> dict:
    model = {
        "resources": {
            "A": {
                "initialValuesDataType": "FLOAT32",
                "initialValues": [-4, -3, -2, -1, 0, 1, 2, 3, 4],
            }
        },
        "dispatchables": {
            "clip": {
                "type": "ELEMENT_WISE_CLIP",
                "desc": {
                    "InputTensor": {"DataType": "FLOAT32", "Sizes": [9]},
                    "OutputTensor": {"DataType": "FLOAT32", "Sizes": [9]},
                    "Min": -2.5,
                    "Max": 2.5,
                },
            }
        },
        "commands": [
            {
                "type": "dispatch",
                "dispatchable": "clip",
                "bindings": {"InputTensor": "A", "OutputTensor": "A"},
            },
            {"type": "print", "resource": "A"},
        ],
    }
    model.update(changes)
    return model


def run(capsys, tmp_path, model, *options, text=None, name="m.json"):
    path = tmp_path / name
    path.write_text(text if text is not None else json.dumps(model))
    code = cli.main(["run", str(path), *options])
    captured = capsys.readouterr()
    if code == 1:
        lines = captured.err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: {path}: "), captured.err
        assert "Traceback" not in captured.err
    return code, captured.out, captured.err


@pytest.mark.parametrize(
    "resource",
    [
        {"initialValuesDataType": "FLOAT32", "initialValues": {"valueCount": 10**12, "value": 1}},
        {
            "initialValuesDataType": "FLOAT32",
            "initialValues": {"valueCount": 2**40, "valueStart": 0, "valueDelta": 1},
        },
        {"initialValuesDataType": "FLOAT32", "initialValues": [1], "sizeInBytes": 2**62},
    ],
)
def test_memory_budget_refuses_before_allocating(capsys, tmp_path, resource):
    model = clip_model(resources={"A": resource}, commands=[])
    start = time.perf_counter()
    code, out, err = run(capsys, tmp_path, model, "--max-memory", "64M")
    assert code == 1 and "memory budget of 67108864 bytes (--max-memory)" in err
    assert "resources.A" in err and out == ""
    assert time.perf_counter() - start < 5


def test_memory_budget_counts_all_resources(capsys, tmp_path):
    resources = {
        n: {"initialValuesDataType": "UINT8", "initialValues": {"valueCount": 600, "value": 1}}
        for n in "ABC"
    }
    model = clip_model(resources=resources, commands=[])
    code, _, err = run(capsys, tmp_path, model, "--max-memory", "1500")
    assert code == 1 and "resources.C" in err and "1800 bytes" in err
    assert run(capsys, tmp_path, model, "--max-memory", "2K")[0] == 0


def test_memory_budget_counts_logical_tensor_sizes(capsys, tmp_path):
    # A broadcast input (stride 0) of 2^30 logical elements over a 16-byte resource.
    model = clip_model()
    model["resources"]["A"] = {"initialValuesDataType": "FLOAT32", "initialValues": [1, 2, 3, 4]}
    model["resources"]["S"] = {"initialValuesDataType": "FLOAT32", "initialValues": [0]}
    model["dispatchables"] = {
        "sum": {
            "type": "REDUCE",
            "desc": {
                "Function": "SUM",
                "AxisCount": 2,
                "Axes": [0, 1],
                "InputTensor": {"DataType": "FLOAT32", "Sizes": [32768, 32768], "Strides": [0, 0]},
                "OutputTensor": {"DataType": "FLOAT32", "Sizes": [1, 1]},
            },
        }
    }
    model["commands"] = [
        {
            "type": "dispatch",
            "dispatchable": "sum",
            "bindings": {"InputTensor": "A", "OutputTensor": "S"},
        }
    ]
    code, _, err = run(capsys, tmp_path, model, "--max-memory", "1G")
    assert code == 1 and "commands[0]: the dispatch works on 4294967300 bytes" in err


def test_default_budget_comes_from_the_device():
    budget = default_memory_budget(select_device(None))
    assert 0 < budget
    pages = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert budget <= pages


@pytest.mark.parametrize("value", ["12x", "-1", "lots", "1e30G"])
def test_bad_max_memory_is_a_usage_error(capsys, tmp_path, value):
    assert run(capsys, tmp_path, clip_model(), "--max-memory", value)[0] == 2


def test_max_memory_zero_means_no_limit(capsys, tmp_path):
    assert run(capsys, tmp_path, clip_model(), "--max-memory", "0")[0] == 0


@pytest.mark.parametrize(
    "resource, path",
    [
        # Larger than any address space (2^47 bytes), so memory runs out whatever the machine.
        (
            {
                "initialValuesDataType": "FLOAT32",
                "initialValues": {"valueCount": 10**14, "value": 1},
            },
            "resources.A.initialValues: cannot allocate 400000000000000 bytes: ",
        ),
        (
            {
                "initialValuesDataType": "FLOAT32",
                "initialValues": {"valueCount": 10**14, "valueStart": 0, "valueDelta": 1},
            },
            "resources.A.initialValues: cannot allocate 400000000000000 bytes: ",
        ),
        (
            {
                "initialValuesDataType": "FLOAT32",
                "initialValues": {"valueCount": 2**70, "value": 1},
            },
            "resources.A.initialValues: cannot allocate 4722366482869645213696 bytes: ",
        ),
        (
            {"initialValuesDataType": "FLOAT32", "initialValues": [1], "sizeInBytes": 2**62},
            "resources.A: cannot allocate 4611686018427387904 bytes: ",
        ),
    ],
)
def test_no_limit_and_memory_runs_out_is_one_error_line(capsys, tmp_path, resource, path):
    model = clip_model(resources={"A": resource}, commands=[])
    start = time.perf_counter()
    code, _, err = run(capsys, tmp_path, model, "--max-memory", "0")  # run() checks: one line
    assert code == 1 and f"m.json: {path}" in err
    assert time.perf_counter() - start < 5


# --- Command line: hostile model files ------------------------------------------------------


@pytest.mark.parametrize(
    "text, pattern",
    [
        ("[" * 100000 + "]" * 100000, "invalid JSON: nested too deeply"),
        ('{"resources": ' + "9" * 5000 + "}", "invalid JSON: Exceeds the limit"),
        ("", "invalid JSON at line 1, column 1"),
        ("\xff\xfe", "invalid JSON"),
        ("[]", "must be a JSON object, got an array"),
    ],
)
def test_hostile_json(capsys, tmp_path, text, pattern):
    code, _, err = run(capsys, tmp_path, None, text=text)
    assert code == 1 and pattern in err


def test_model_file_larger_than_the_budget(capsys, tmp_path):
    text = json.dumps(clip_model()) + " " * 4096
    code, _, err = run(capsys, tmp_path, None, "--max-memory", "1K", text=text)
    assert code == 1 and "the model file is" in err and "--max-memory" in err


@pytest.mark.parametrize(
    "where, value, pattern",
    [
        (("dispatchables", "clip", "desc", "InputTensor", "Sizes"), "abc", r"InputTensor"),
        (("dispatchables", "clip", "desc", "Min"), [1], r"Min"),
        (("resources", "A", "initialValues"), 7, r"resources\.A\.initialValues"),
        (("commands", 0, "bindings"), [], r"commands\[0\]\.bindings"),
        (("commands",), {}, r"commands"),
    ],
)
def test_wrong_types_name_the_field(capsys, tmp_path, where, value, pattern):
    model = clip_model()
    node = model
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = value
    code, _, err = run(capsys, tmp_path, model)
    assert code == 1
    assert __import__("re").search(pattern, err), err


def test_binding_too_small_for_the_tensor_type(capsys, tmp_path):
    # Three UINT8 bytes bound as a FLOAT32 [1] tensor: the bytes are reinterpreted (allowed),
    # but they do not hold TotalTensorSizeInBytes.
    model = clip_model()
    model["resources"]["B"] = {
        "initialValuesDataType": "UINT8",
        "initialValues": [1, 2, 3],
        "sizeInBytes": 3,
    }
    model["commands"][0]["bindings"] = {"InputTensor": "B", "OutputTensor": "A"}
    code, _, err = run(capsys, tmp_path, model)
    assert code == 1 and "commands[0].bindings.InputTensor" in err


@pytest.mark.parametrize("offset", [2**62, 3, -4, 1.5])
def test_out_of_range_or_misaligned_offsets(capsys, tmp_path, offset):
    model = clip_model()
    model["commands"][0]["bindings"]["InputTensor"] = {"name": "A", "elementOffset": offset}
    code, _, err = run(capsys, tmp_path, model)
    assert code == 1 and "commands[0].bindings.InputTensor" in err


def _npy_model(source: str, data_type: str | None = "FLOAT32") -> dict:
    resource = {"initialValues": {"sourcePath": source}}
    if data_type:
        resource["initialValuesDataType"] = data_type
    return clip_model(resources={"A": resource}, commands=[{"type": "print", "resource": "A"}])


def test_npy_files(capsys, tmp_path):
    good = tmp_path / "good.npy"
    np.save(good, np.arange(9, dtype=np.float32))
    payload = good.read_bytes()
    (tmp_path / "truncated.npy").write_bytes(payload[:-5])
    (tmp_path / "header.npy").write_bytes(payload[:30])
    np.save(tmp_path / "pickled.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    np.save(tmp_path / "f64.npy", np.arange(9, dtype=np.float64))
    (tmp_path / "not.npy").write_bytes(b"\x93NUMPY garbage")
    assert run(capsys, tmp_path, _npy_model("good.npy"))[0] == 0
    for source, pattern in [
        ("truncated.npy", "payload is 31 bytes, its header promises 36"),
        ("header.npy", "cannot read .npy file"),
        ("pickled.npy", "is not a plain numeric type"),
        ("f64.npy", "FLOAT32 does not match the data type of 'f64.npy' (FLOAT64)"),
        ("not.npy", ".npy format version (32, 103) is not supported"),
        ("missing.npy", "file 'missing.npy' not found"),
    ]:
        code, _, err = run(capsys, tmp_path, _npy_model(source))
        assert code == 1 and "resources.A.initialValues" in err and pattern in err, err


# --- Paths and overwrites ------------------------------------------------------------------


def test_source_paths_stay_in_the_model_folder(capsys, tmp_path):
    inner = tmp_path / "models"
    inner.mkdir()
    np.save(tmp_path / "outside.npy", np.arange(9, dtype=np.float32))
    (inner / "link.npy").symlink_to(tmp_path / "outside.npy")
    for source in ("../outside.npy", str(tmp_path / "outside.npy"), "link.npy"):
        code, _, err = run(capsys, inner, _npy_model(source))
        assert code == 1 and "is outside the model's folder" in err, err
        assert "--allow-outside-paths" in err
        assert run(capsys, inner, _npy_model(source), "--allow-outside-paths")[0] == 0


def _write_model(target: str, *extra: dict) -> dict:
    return clip_model(
        commands=[*extra, {"type": "writeFile", "resource": "A", "targetPath": target}]
    )


def test_write_targets_stay_in_the_model_folder(capsys, tmp_path, monkeypatch):
    inner = tmp_path / "models"
    inner.mkdir()
    monkeypatch.chdir(inner)
    for target in ("../out.npy", str(tmp_path / "abs.npy")):
        code, out, err = run(capsys, inner, _write_model(target))
        assert code == 1 and "commands[0].targetPath" in err and out == ""
        assert not os.path.exists(tmp_path / "out.npy") and not os.path.exists(tmp_path / "abs.npy")
    assert run(capsys, inner, _write_model("../out.npy"), "--allow-outside-paths")[0] == 0
    assert np.load(tmp_path / "out.npy").shape == (9,)


def test_write_file_does_not_overwrite_without_the_option(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out.bin").write_bytes(b"keep me")
    dispatch = clip_model()["commands"][0]
    code, out, err = run(capsys, tmp_path, _write_model("out.bin", dispatch))
    # Refused before anything runs: no dispatch line, the file is untouched.
    assert code == 1 and "commands[1].targetPath" in err and "--overwrite" in err
    assert out == "" and (tmp_path / "out.bin").read_bytes() == b"keep me"
    assert run(capsys, tmp_path, _write_model("out.bin", dispatch), "--overwrite")[0] == 0
    values = np.frombuffer((tmp_path / "out.bin").read_bytes(), np.float32)
    assert values.tolist() == [-2.5, -2.5, -2, -1, 0, 1, 2, 2.5, 2.5]


def test_two_commands_writing_one_file_need_overwrite(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model = _write_model("twice.npy", _write_model("twice.npy")["commands"][0])
    code, _, err = run(capsys, tmp_path, model)
    assert code == 1 and "commands[1].targetPath" in err
    assert not (tmp_path / "twice.npy").exists()
    assert run(capsys, tmp_path, model, "--overwrite")[0] == 0


# --- Nothing is lost --------------------------------------------------------------------------


def test_failed_dispatch_keeps_resources_and_earlier_outputs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    dispatch = clip_model()["commands"][0]
    model = clip_model(
        commands=[
            dispatch,
            {"type": "writeFile", "resource": "A", "targetPath": "first.npy"},
            dispatch,
            {"type": "print", "resource": "A"},
        ]
    )
    model["dispatchables"]["clip"]["desc"]["ScaleBias"] = {"Scale": 2.0, "Bias": 0.0}
    path = tmp_path / "m.json"
    path.write_text(json.dumps(model))
    loaded = load_model(str(path))
    executor = Executor(loaded, select_device(None), out=lambda line: None)
    real = Executor._dispatch
    calls = []

    def failing_second_dispatch(self, command, plan):
        calls.append(command.path)
        real(self, command, plan)  # updates the resources, then the device "fails"
        if len(calls) == 2:
            raise RuntimeError("device lost")

    monkeypatch.setattr(Executor, "_dispatch", failing_second_dispatch)
    with pytest.raises(ModelError) as info:
        executor.run()
    assert info.value.path == "commands[2]" and "Dispatch failed: device lost" in str(info.value)
    after_first = np.clip(np.arange(-4, 5, dtype=np.float32) * 2, -2.5, 2.5)
    state = np.asarray(executor.state["A"]).view(np.float32)
    np.testing.assert_array_equal(state, after_first)
    np.testing.assert_array_equal(np.load(tmp_path / "first.npy"), after_first)


def test_failed_write_leaves_no_partial_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out.npy").write_bytes(b"old")
    model = clip_model(
        commands=[
            {"type": "writeFile", "resource": "A", "targetPath": "out.npy", "dimensions": [100]}
        ]
    )
    path = tmp_path / "m.json"
    path.write_text(json.dumps(model))
    code = cli.main(["run", str(path), "--overwrite"])
    assert code == 1
    assert (tmp_path / "out.npy").read_bytes() == b"old"
    assert sorted(os.listdir(tmp_path)) == ["m.json", "out.npy"]
