"""The dml-jax command line: every bundled model against expected text, and every error kind.

Expected outputs in tests/expected/ were derived by hand from each model's initial values (the
derivations are in the models' comments; the five models of NOTES 6.11 reproduce its listings).
Timing numbers and the device name are masked. Most runs call ``dml_jax.cli.main`` in-process;
a few go through ``python -m dml_jax`` in a subprocess to check the real entry point.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dml_jax as dml
from dml_jax.cli import DEFAULT_MODEL, main
from dml_jax.dxdispatch import float_to_half_truncated, parse_json_text

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "examples" / "models"
EXPECTED = ROOT / "tests" / "expected"
EXAMPLES = sorted(p.stem for p in MODELS.glob("*.json"))

_NUMBER = re.compile(r"-?\d+(\.\d+)?(e[-+]?\d+)?|inf")


def mask(text: str) -> str:
    """Masks what varies between runs: timing numbers, the device, the bundled model's path."""
    lines = []
    for line in text.splitlines():
        if line.startswith("Dispatch '"):
            head, _, tail = line.partition(": ")
            count, _, rest = tail.partition(" iterations")
            line = f"{head}: {count} iterations" + _NUMBER.sub("#", rest)
        elif line.startswith("Running on '"):
            line = "Running on '<device>'"
        elif line.startswith("No model given: running the bundled example '"):
            line = "No model given: running the bundled example '<default.json>'"
        lines.append(line)
    return "\n".join(lines) + "\n"


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def expected(name: str) -> str:
    return (EXPECTED / f"{name}.txt").read_text()


# ---------------------------------------------------------------------------------------------
# Bundled models


def models_copy(tmp_path: Path, monkeypatch) -> Path:
    """A copy of examples/models, made the current directory: writeFile targets are relative
    to it and must lie in the model's folder (the documented way to run the examples)."""
    folder = tmp_path / "models"
    shutil.copytree(MODELS, folder)
    monkeypatch.chdir(folder)
    return folder


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_model_output(capsys, tmp_path, monkeypatch, name):
    folder = models_copy(tmp_path, monkeypatch)
    code, out, err = run_cli(capsys, "run", f"{name}.json")
    assert (code, err) == (0, "")
    assert mask(out) == expected(name)
    assert (folder / f"{name}.json").read_bytes() == (MODELS / f"{name}.json").read_bytes()


def test_example_write_file_writes_npy_with_dimensions_and_raw_bytes(capsys, tmp_path, monkeypatch):
    folder = models_copy(tmp_path, monkeypatch)
    code, _, err = run_cli(capsys, "run", "dml_write_file.json")
    assert (code, err) == (0, "")
    tile = np.tile(np.array([[1, 2], [3, 4]], np.float32), (2, 3))
    written = np.load(folder / "written" / "tile.npy", allow_pickle=False)
    assert written.dtype == np.float32 and written.shape == (4, 6)
    np.testing.assert_array_equal(written, tile)
    assert (folder / "written" / "tile.bin").read_bytes() == tile.astype("<f4").tobytes()
    # Run again: the files exist, so nothing runs without --overwrite; with it, both are replaced.
    code, out, err = run_cli(capsys, "run", "dml_write_file.json")
    assert (code, out) == (1, "") and "already exists" in err and "--overwrite" in err
    assert run_cli(capsys, "run", "dml_write_file.json", "--overwrite")[0] == 0


def test_bundled_models_use_registered_operators():
    """Every operator a bundled model names is registered; every registered operator also runs
    as a model from its registry example (test_examples.py)."""
    from dml_jax.registry import operators

    names = {spec.name.removeprefix("DML_OPERATOR_") for spec in operators()}
    for path in MODELS.glob("*.json"):
        for used in re.findall(r'"type": "(?:DML_OPERATOR_)?([A-Z_0-9]+)"', path.read_text()):
            if used not in dml.DataType.__members__:  # a resource's data type
                assert used in names or used in ("GRAPH", "DML_GRAPH"), (path.name, used)


def test_subprocess_default_model_and_example():
    """The real entry point: no argument runs the bundled model and says so; then a file."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    first = subprocess.run(
        [sys.executable, "-m", "dml_jax", "run"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert first.returncode == 0, first.stderr
    assert mask(first.stdout) == expected("default")
    assert DEFAULT_MODEL in first.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "dml_jax", "run", "--warmup_samples", "-3"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert bad.returncode == 2 and "usage:" in bad.stderr


def test_subprocess_model_error_has_no_traceback(tmp_path):
    model = tmp_path / "broken.json"
    model.write_text(
        '{"resources": {}, "dispatchables": {}, "commands": [\n'
        '  {"type": "print", "resource": "nope"}]}'
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    result = subprocess.run(
        [sys.executable, "-m", "dml_jax", "run", str(model)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr == f"error: {model}: commands[0].resource: unknown resource 'nope'\n"
    assert "Traceback" not in result.stderr + result.stdout


# ---------------------------------------------------------------------------------------------
# Errors: one line naming the file and the JSON path, exit code 1


def write_model(tmp_path: Path, model: dict | str, name: str = "model.json") -> str:
    path = tmp_path / name
    path.write_text(model if isinstance(model, str) else json.dumps(model))
    return str(path)


def clip_model(**changes) -> dict:
    """A valid CLIP model; ``changes`` replace top-level parts."""
    model = {
        "resources": {
            "A": {"initialValuesDataType": "FLOAT32", "initialValues": [-4, -3, -2, -1, 0, 1]},
            "B": {
                "initialValuesDataType": "FLOAT32",
                "initialValues": {"valueCount": 6, "value": 0},
            },
        },
        "dispatchables": {
            "clip": {
                "type": "ELEMENT_WISE_CLIP",
                "desc": {
                    "InputTensor": {"DataType": "FLOAT32", "Sizes": [6]},
                    "OutputTensor": {"DataType": "FLOAT32", "Sizes": [6]},
                    "Min": -2.5,
                    "Max": 2.5,
                },
            },
        },
        "commands": [
            {
                "type": "dispatch",
                "dispatchable": "clip",
                "bindings": {"InputTensor": "A", "OutputTensor": "B"},
            },
            {"type": "print", "resource": "B"},
        ],
    }
    model.update(changes)
    return model


def dispatch_bindings(bindings: dict) -> list:
    return [{"type": "dispatch", "dispatchable": "clip", "bindings": bindings}]


BAD_MODELS = [
    (
        "missing_commands",
        {k: v for k, v in clip_model().items() if k != "commands"},
        r": missing required member 'commands'$",
    ),
    (
        "unknown_dispatchable",
        clip_model(commands=[{"type": "dispatch", "dispatchable": "clipp", "bindings": {}}]),
        r": commands\[0\]\.dispatchable: unknown dispatchable 'clipp'$",
    ),
    (
        "unknown_resource",
        clip_model(commands=dispatch_bindings({"InputTensor": "A", "OutputTensor": "C"})),
        r": commands\[0\]\.bindings\.OutputTensor: unknown resource 'C'$",
    ),
    (
        "unknown_resource_object",
        clip_model(commands=dispatch_bindings({"InputTensor": {"name": "Z"}, "OutputTensor": "B"})),
        r": commands\[0\]\.bindings\.InputTensor\.name: unknown resource 'Z'$",
    ),
    (
        "out_of_range",
        clip_model(
            commands=dispatch_bindings(
                {"InputTensor": {"name": "A", "elementOffset": 4}, "OutputTensor": "B"}
            )
        ),
        (
            r": commands\[0\]\.bindings\.InputTensor: binding out of range: the tensor needs 24 "
            r"bytes \(TotalTensorSizeInBytes\) but resource 'A' has 8 bytes from byte offset 16"
        ),
    ),
    (
        "misaligned",
        clip_model(
            commands=dispatch_bindings(
                {"InputTensor": {"name": "A", "elementOffset": 1}, "OutputTensor": "B"}
            )
        ),
        (
            r": commands\[0\]\.bindings\.InputTensor: byte offset 4 \(elementOffset 1 x 4 bytes\) "
            r"into 'A' must be a multiple of 16$"
        ),
    ),
    (
        "bind_count",
        clip_model(commands=dispatch_bindings({"InputTensor": ["A", "A"], "OutputTensor": "B"})),
        (
            r": commands\[0\]\.bindings\.InputTensor: Bind point 'InputTensor' requires 1 "
            r"resources, but 2 were bound\.$"
        ),
    ),
    (
        "nothing_bound",
        clip_model(commands=dispatch_bindings({"InputTensor": "A"})),
        r": commands\[0\]\.bindings: Nothing bound for required tensor 'OutputTensor'\.$",
    ),
    (
        "missing_bindings",
        clip_model(commands=[{"type": "dispatch", "dispatchable": "clip"}]),
        r": commands\[0\]: missing required member 'bindings'$",
    ),
    (
        "unknown_command",
        clip_model(commands=[{"type": "draw"}]),
        r": commands\[0\]\.type: Unrecognized command 'draw'",
    ),
    (
        "temporary_data_type",
        clip_model(commands=[{"type": "printInitTemporary", "dataType": "HALF", "offset": 0}]),
        r": commands\[0\]\.dataType: unknown data type \"HALF\"",
    ),
    (
        "temporary_offset",
        clip_model(commands=[{"type": "printExecTemporary", "offset": -1}]),
        r": commands\[0\]\.offset: ",
    ),
    (
        "missing_initial_values",
        clip_model(resources={"A": {"initialValuesDataType": "FLOAT32"}}),
        r": resources\.A: missing required member 'initialValues'$",
    ),
    (
        "empty_initial_values",
        clip_model(resources={"A": {"initialValuesDataType": "FLOAT32", "initialValues": []}}),
        r": resources\.A\.initialValues: 'initialValues' must be non-empty$",
    ),
    (
        "int_out_of_range",
        clip_model(resources={"A": {"initialValuesDataType": "UINT8", "initialValues": [1, 300]}}),
        r": resources\.A\.initialValues\[1\]: 300 is out of range for UINT8 \[0, 255\]$",
    ),
    (
        "int_not_integer",
        clip_model(resources={"A": {"initialValuesDataType": "INT32", "initialValues": [1.5]}}),
        r": resources\.A\.initialValues\[0\]: must be an integer for INT32, got 1.5$",
    ),
    (
        "bad_data_type",
        clip_model(resources={"A": {"initialValuesDataType": "float32", "initialValues": [1]}}),
        r": resources\.A\.initialValuesDataType: unknown data type \"float32\"",
    ),
    (
        "size_too_small",
        clip_model(
            resources={
                "A": {"initialValuesDataType": "FLOAT32", "initialValues": [1, 2], "sizeInBytes": 4}
            }
        ),
        r": resources\.A\.sizeInBytes: 4 is smaller than the initial values \(8 bytes\)$",
    ),
    (
        "operator_invalid",
        clip_model(
            dispatchables={
                "clip": {
                    "type": "SPLIT",
                    "desc": {
                        "InputTensor": {"DataType": "FLOAT32", "Sizes": [6]},
                        "OutputCount": 2,
                        "OutputTensors": [
                            {"DataType": "FLOAT32", "Sizes": [2]},
                            {"DataType": "FLOAT32", "Sizes": [3]},
                        ],
                        "Axis": 0,
                    },
                }
            }
        ),
        r": dispatchables\.clip: DML_OPERATOR_SPLIT: ",
    ),
    (
        "operator_missing_field",
        clip_model(
            dispatchables={
                "clip": {
                    "type": "ELEMENT_WISE_CLIP",
                    "desc": {"InputTensor": {"DataType": "FLOAT32", "Sizes": [6]}},
                }
            }
        ),
        r": dispatchables\.clip: DML_OPERATOR_ELEMENT_WISE_CLIP: .*OutputTensor",
    ),
    (
        "hlsl_dispatchable",
        clip_model(dispatchables={"clip": {"type": "hlsl", "sourcePath": "m.hlsl"}}),
        r": dispatchables\.clip\.type: 'hlsl' dispatchables are not supported",
    ),
    (
        "onnx_dispatchable_missing_file",
        clip_model(dispatchables={"clip": {"type": "onnx", "sourcePath": "m.onnx"}}),
        r": dispatchables\.clip\.sourcePath: file 'm.onnx' not found",
    ),
]


@pytest.mark.parametrize("name, model, pattern", BAD_MODELS, ids=[b[0] for b in BAD_MODELS])
def test_bad_model(capsys, tmp_path, name, model, pattern):
    file = write_model(tmp_path, model)
    code, _out, err = run_cli(capsys, "run", file)
    assert code == 1
    assert "Traceback" not in err
    assert err.startswith(f"error: {file}") and err.endswith("\n") and err.count("\n") == 1
    assert re.search(pattern, err.rstrip("\n")), err


def test_invalid_json_reports_line_and_column(capsys, tmp_path):
    file = write_model(tmp_path, '{\n  // comment\n  "resources": {},\n  "commands": [1 2]\n}')
    code, _, err = run_cli(capsys, "run", file)
    assert code == 1
    assert err == (f"error: {file}: invalid JSON at line 4, column 18: Expecting ',' delimiter\n")


def test_npy_data_type_mismatch(capsys, tmp_path):
    np.save(tmp_path / "ints.npy", np.arange(6, dtype=np.int32))
    model = clip_model()
    model["resources"]["A"] = {
        "initialValuesDataType": "FLOAT32",
        "initialValues": {"sourcePath": "ints.npy"},
    }
    file = write_model(tmp_path, model)
    code, _, err = run_cli(capsys, "run", file)
    assert code == 1
    assert err == (
        f"error: {file}: resources.A.initialValuesDataType: FLOAT32 does not match "
        "the data type of 'ints.npy' (INT32)\n"
    )


def test_npy_without_pickle(capsys, tmp_path):
    np.save(tmp_path / "objects.npy", np.array([1, "x"], dtype=object), allow_pickle=True)
    model = clip_model()
    model["resources"]["A"] = {"initialValues": {"sourcePath": "objects.npy"}}
    file = write_model(tmp_path, model)
    code, _, err = run_cli(capsys, "run", file)
    assert code == 1 and "resources.A.initialValues.sourcePath" in err
    assert "not a plain numeric type" in err


def test_debug_shows_traceback(capsys, tmp_path):
    file = write_model(tmp_path, clip_model(commands=[{"type": "print", "resource": "X"}]))
    code, _, err = run_cli(capsys, "run", file, "--debug")
    assert code == 1 and "Traceback" in err and "unknown resource 'X'" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "-i", "0"],
        ["run", "--timing_verbosity", "3"],
        ["frobnicate"],
        [],
        ["run", "does_not_exist.json"],
        ["run", "--device", "99"],
        ["run", "--device", "abacus"],
        ["run", "--feature_level", "9_9"],
    ],
)
def test_usage_errors_exit_2(capsys, argv):
    code, out, err = run_cli(capsys, *argv)
    assert code == 2, (out, err)
    assert "Traceback" not in err and err


def test_a_directory_is_not_a_model_file(capsys, tmp_path):
    code, out, err = run_cli(capsys, "run", str(tmp_path))
    assert (code, out, err) == (2, "", f"error: {tmp_path}: is a directory, not a model file\n")


def test_feature_level_errors_list_the_spelling_the_docs_use(capsys):
    code, _, err = run_cli(capsys, "run", str(MODELS / "dml_tile.json"), "--feature_level", "9_9")
    assert code == 2 and "'DML_FEATURE_LEVEL_1_0'" in err and "one of: 1_0, 2_0, 2_1," in err
    assert "FL_" not in err
    for level in ("5_0", "DML_FEATURE_LEVEL_5_0"):
        assert (
            run_cli(capsys, "run", str(MODELS / "dml_tile.json"), "--feature_level", level)[0] == 0
        )


# ---------------------------------------------------------------------------------------------
# Behaviour


def test_json_comments_and_trailing_commas():
    text = '{"a": "// not a comment", /* block\n comment */ "b": [1, 2,],  // tail\n}'
    assert parse_json_text(text, "x.json") == {"a": "// not a comment", "b": [1, 2]}


def test_float16_conversion_truncates():
    # 1 + 2^-11 lies halfway between halves 1 and 1 + 2^-10: nearest-even gives 1, and so does
    # truncation; 1 + 3 * 2^-12 rounds up to 1 + 2^-10 but truncates to 1.
    assert float(float_to_half_truncated(1 + 3 * 2**-12)) == 1.0
    assert float(float_to_half_truncated(-(1 + 3 * 2**-12))) == -1.0
    assert float(float_to_half_truncated(2.5)) == 2.5
    assert np.isinf(float_to_half_truncated(1e6))


def test_resources_size_rounding_and_print_trims_padding(capsys, tmp_path):
    model = {
        "resources": {
            "H": {"initialValuesDataType": "FLOAT16", "initialValues": [1, 2, 3, 4, 5]},
            "P": {"initialValuesDataType": "UINT8", "initialValues": [7], "sizeInBytes": 32},
            "Q": {
                "initialValuesDataType": "INT8",
                "initialValues": {"valueCount": 3, "valueStart": 126, "valueDelta": 1},
            },
        },
        "dispatchables": {},
        "commands": [
            {"type": "print", "resource": "H"},
            {"type": "print", "resource": "P"},
            {"type": "print", "resource": "Q", "verbose": True},
            {"type": "writeFile", "resource": "H", "targetPath": "out/h.npy"},
            {"type": "writeFile", "resource": "P", "targetPath": "out/p.bin"},
            {
                "type": "writeFile",
                "resource": "H",
                "targetPath": "out/h2.npy",
                "dimensions": [1, 5],
            },
        ],
    }
    file = write_model(tmp_path, model)
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        code, out, err = run_cli(capsys, "run", file)
    finally:
        os.chdir(cwd)
    assert (code, err) == (0, "")
    lines = out.splitlines()[1:]
    # INT8 sequences wrap around in the target type: 126, 127, -128.
    assert lines == [
        "Resource 'H': 1, 2, 3, 4, 5",
        "Resource 'P': 7",
        "Resource 'Q':",
        "[0] 126 (0x7E)",
        "[1] 127 (0x7F)",
        "[2] -128 (0x80)",
        "Resource 'H' written to 'out/h.npy'",
        "Resource 'P' written to 'out/p.bin'",
        "Resource 'H' written to 'out/h2.npy'",
    ]
    # writeFile keeps the 4-byte padding when no dimensions are given (12 bytes = 6 halves).
    h = np.load(tmp_path / "out" / "h.npy", allow_pickle=False)
    assert h.dtype == np.float16 and h.tolist() == [1, 2, 3, 4, 5, 0]
    assert np.load(tmp_path / "out" / "h2.npy").tolist() == [[1, 2, 3, 4, 5]]
    assert (tmp_path / "out" / "p.bin").read_bytes() == bytes([7] + [0] * 31)


def test_split_outputs_interleaved_in_one_resource(capsys, tmp_path):
    """Two strided outputs share one buffer: each write keeps the other's elements."""
    model = {
        "resources": {
            "A": {"initialValuesDataType": "FLOAT32", "initialValues": [1, 2, 3, 4]},
            "R": {
                "initialValuesDataType": "FLOAT32",
                "initialValues": {"valueCount": 16, "value": 0},
            },
        },
        "dispatchables": {
            "split": {
                "type": "SPLIT",
                "desc": {
                    "InputTensor": {"DataType": "FLOAT32", "Sizes": [4]},
                    "OutputCount": 2,
                    "OutputTensors": [
                        {"DataType": "FLOAT32", "Sizes": [2], "Strides": [8]},
                        {"DataType": "FLOAT32", "Sizes": [2], "Strides": [8]},
                    ],
                    "Axis": 0,
                },
            }
        },
        "commands": [
            {
                "type": "dispatch",
                "dispatchable": "split",
                "bindings": {
                    "InputTensor": "A",
                    "OutputTensors": ["R", {"name": "R", "elementOffset": 4}],
                },
            },
            {"type": "print", "resource": "R"},
        ],
    }
    code, out, err = run_cli(capsys, "run", write_model(tmp_path, model))
    assert (code, err) == (0, "")
    assert out.splitlines()[-1] == ("Resource 'R': 1, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 4, 0, 0, 0")


def test_repeated_dispatch_updates_state_in_place(capsys, tmp_path):
    """-i 3 -r 2: six dispatches of an in-place ScaleBias clip (x -> x + 1) add 6."""
    model = {
        "resources": {"A": {"initialValuesDataType": "FLOAT32", "initialValues": [0, 10]}},
        "dispatchables": {
            "inc": {
                "type": "ELEMENT_WISE_CLIP",
                "desc": {
                    "InputTensor": {"DataType": "FLOAT32", "Sizes": [2]},
                    "OutputTensor": {"DataType": "FLOAT32", "Sizes": [2]},
                    "ScaleBias": {"Scale": 1, "Bias": 1},
                    "Min": -100,
                    "Max": 100,
                },
            }
        },
        "commands": [
            {
                "type": "dispatch",
                "dispatchable": "inc",
                "bindings": {"InputTensor": "A", "OutputTensor": "A"},
            },
            {"type": "print", "resource": "A"},
        ],
    }
    file = write_model(tmp_path, model)
    code, out, err = run_cli(
        capsys, "run", file, "-i", "3", "-r", "2", "-v", "2", "-w", "1", "--device", "cpu"
    )
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[-1] == "Resource 'A': 6, 16"
    assert "Initialize 'inc': " in out
    assert "Dispatch 'inc': 3 iterations" in lines
    assert re.search(r"^CPU Timings \(Cold\) +: 1 samples, ", out, re.MULTILINE)
    assert re.search(r"^Device Timings \(Hot\) +: 2 samples, [\d.]+ ms average", out, re.MULTILINE)
    assert re.search(r"^Bandwidth \(Hot\) : 16 bytes read \+ written, ", out, re.MULTILINE)
    assert (
        len(
            re.findall(
                r"^iteration \d: [\d.]+ ms \(CPU\), [\d.]+ ms \(device\)$", out, re.MULTILINE
            )
        )
        == 3
    )


def test_milliseconds_to_run_overrides_iterations(capsys):
    code, out, _ = run_cli(
        capsys,
        "run",
        str(MODELS / "dml_element_wise_clip.json"),
        "-t",
        "30",
        "-i",
        "1",
        "--device",
        "0",
    )
    assert code == 0
    count = int(re.search(r"Dispatch 'clip': (\d+) iterations", out).group(1))
    assert count > 1


def test_list_operators(capsys):
    from dml_jax.registry import operators

    code, out, _ = run_cli(capsys, "list-operators")
    assert code == 0
    for spec in operators():
        assert spec.name in out
    assert re.search(r"^DML_OPERATOR_ELEMENT_WISE_CLIP1 +5_0$", out, re.MULTILINE)
    assert re.search(r"^DML_OPERATOR_ARGMAX +3_0$", out, re.MULTILINE)
    assert re.search(r"^DML_OPERATOR_REDUCE \(Function SUM_SQUARE\) +1_0$", out, re.MULTILINE)


def test_list_operators_support_prints_each_table_row(capsys):
    code, out, _ = run_cli(capsys, "list-operators", "--support")
    assert code == 0
    lines = out.splitlines()
    i = lines.index(next(x for x in lines if x.startswith("DML_OPERATOR_ARGMAX ")))
    # ARGMAX's table (DirectML's page): 3_0 with 8 input types, 4_1 adds the 64-bit integers;
    # the outputs are the index types.
    assert lines[i + 1].split() == [
        "3_0+:", "dims", "1-8;", "FLOAT16,", "FLOAT32,", "INT16,", "INT32,", "INT8,", "UINT16,",
        "UINT32,", "UINT8", "->", "INT32,", "INT64,", "UINT32,", "UINT64",
    ]  # fmt: skip
    assert lines[i + 2].startswith("    4_1+: dims 1-8; FLOAT16, FLOAT32, INT16, INT32, INT64,")
    assert lines[i + 3] == (
        "    example: the last index of the extreme of each row "
        "(dml-jax example DML_OPERATOR_ARGMAX)"
    )
    assert not lines[i + 4].startswith("    ")  # two rows and the example, then the next one


def test_list_operators_fast_paths_reads_the_registry(capsys):
    from dml_jax import fastpath

    code, out, _ = run_cli(capsys, "list-operators", "--fast-paths")
    assert code == 0
    lines = out.splitlines()
    for path in fastpath.registered():
        line = next(x for x in lines if x.startswith(path.operator_type + " "))
        assert f"{path.name} (kernels." in line, (path, line)
    # Several fast paths of one operator: in the order ``fastpath.select`` tries them.
    scatter = next(x for x in lines if x.startswith("DML_OPERATOR_SCATTER "))
    assert scatter.split()[1:] == ["smem", "(kernels.scatter);", "kernel", "(kernels.scatter)"]
    assert "DML_OPERATOR_GEMM -> DML_OPERATOR_ACTIVATION_GELU" in out
    assert lines[0].split()[:2] == ["Operator", "Fast"]
    code, _, err = run_cli(capsys, "list-operators", "--fast-paths", "--support")
    assert code == 2 and "exclusive" in err


def test_closed_output_pipe_ends_quietly(monkeypatch, capsys):
    # `dml-jax list-operators | head`: the reader goes away; the command stops with exit 0
    # instead of a BrokenPipeError traceback.
    read_end, write_end = os.pipe()
    os.close(read_end)
    closed = os.fdopen(write_end, "w", buffering=1)
    monkeypatch.setattr(sys, "stdout", closed)
    assert main(["list-operators"]) == 0
    closed.close()
    assert "Traceback" not in capsys.readouterr().err


def _aliasing_model(operator: str, desc: dict) -> dict:
    return {
        "resources": {"A": {"initialValuesDataType": "FLOAT32", "initialValues": [-3, 1, 2, 4]}},
        "dispatchables": {"op": {"type": operator, "desc": desc}},
        "commands": [
            {
                "type": "dispatch",
                "dispatchable": "op",
                "bindings": {"InputTensor": "A", "OutputTensor": "A"},
            },
            {"type": "print", "resource": "A"},
        ],
    }


def test_in_place_binding_only_for_operators_that_allow_it(capsys, tmp_path):
    t2 = {"DataType": "FLOAT32", "Sizes": [2]}
    t4 = {"DataType": "FLOAT32", "Sizes": [4]}
    relu = tmp_path / "relu.json"
    relu.write_text(
        json.dumps(_aliasing_model("ACTIVATION_RELU", {"InputTensor": t4, "OutputTensor": t4}))
    )
    code, out, _ = run_cli(capsys, "run", str(relu))
    assert code == 0 and "Resource 'A': 0, 1, 2, 4" in out
    tile = tmp_path / "tile.json"
    desc = {"InputTensor": t2, "OutputTensor": t4, "Repeats": [2]}
    tile.write_text(json.dumps(_aliasing_model("TILE", desc)))
    code, _, err = run_cli(capsys, "run", str(tile))
    assert code == 1
    assert err.strip().endswith(
        "commands[0].bindings.OutputTensor: binds resource 'A' over bytes that "
        "commands[0].bindings.InputTensor also reads; DML_OPERATOR_TILE does not support "
        "in-place execution"
    )


def test_cache_dir_reuses_compiled_programs(tmp_path):
    """``--cache-dir``: the first process writes its compiled programs there (the ONNX model's
    and the bundled DxDispatch model's), a second one with the same models adds none (every
    program's key the same in a new process) and prints the same results; a directory that
    cannot be made is one error line."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu")
    cache = tmp_path / "cache"
    decoder = ROOT / "tests" / "data" / "decoders" / "tiny_llama_step.onnx"

    def run(*argv):
        return subprocess.run([sys.executable, "-m", "dml_jax", "run", *argv, "--cache-dir",
                               str(cache)], capture_output=True, text=True, env=env, cwd=ROOT,
                              timeout=240, check=False)  # fmt: skip

    def results(out):  # the outputs, not the timing lines
        return [line for line in out.splitlines() if not line.startswith("Dispatch ")]

    firsts = [run(str(decoder)), run()]
    assert all(p.returncode == 0 for p in firsts), [p.stderr[-2000:] for p in firsts]
    entries = sorted(p.name for p in cache.iterdir())
    assert len(entries) >= 2, entries
    seconds = [run(str(decoder)), run()]
    assert all(p.returncode == 0 for p in seconds), [p.stderr[-2000:] for p in seconds]
    assert sorted(p.name for p in cache.iterdir()) == entries
    assert [results(p.stdout) for p in seconds] == [results(p.stdout) for p in firsts]
    blocked = tmp_path / "file"
    blocked.write_text("")
    bad = subprocess.run([sys.executable, "-m", "dml_jax", "run", "--cache-dir",
                          str(blocked / "sub")], capture_output=True, text=True, env=env,
                         cwd=ROOT, timeout=120, check=False)  # fmt: skip
    assert bad.returncode == 2 and bad.stderr.startswith("error: --cache-dir: ")
    assert len(bad.stderr.strip().splitlines()) == 1
