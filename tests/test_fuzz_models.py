"""Fuzzing of model files: mutations of the bundled models (fields deleted, replaced, retyped,
huge numbers, deep nesting, enormous arrays, hostile data files and paths).

Every mutated model either runs (exit code 0) or is refused with one ``error: <file>: ...`` line
and exit code 1: never a traceback, never a write outside the model's folder, never a changed
existing file. Most examples only load the model (``load_model``: parsing, checks, operator
validation), where the only exception allowed is ``ModelError``; one in
``DML_JAX_FUZZ_MODEL_RUN_ONE_IN`` (CI: 4) runs it through the command line in-process.
``DML_JAX_FUZZ_EXAMPLES=N`` sets the example count (the long run in ``tests/FUZZING.md``).
"""

from __future__ import annotations

import contextlib
import copy
import glob
import io
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
from fuzz_strategies import EDGE_INTS, ENUM_NAMES
from hypothesis import given, settings
from hypothesis import strategies as st

from dml_jax import cli
from dml_jax.dxdispatch import ModelError, load_model, parse_json_text

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL_FILES = sorted(glob.glob(os.path.join(ROOT, "examples", "models", "*.json")))
MODELS = {
    os.path.basename(f): parse_json_text(Path(f).read_text(encoding="utf-8"), f)
    for f in MODEL_FILES
}
RUN_ONE_IN = int(os.environ.get("DML_JAX_FUZZ_MODEL_RUN_ONE_IN", "4"))
BUDGET = 64 << 20  # --max-memory for the fuzzed runs: refusals must come before allocation
SENTINEL = b"existing file: must survive every run"
DEEP = "__deep__"  # replaced by 5000 nested arrays in the model text


def fuzz_settings():
    count = os.environ.get("DML_JAX_FUZZ_EXAMPLES")
    return settings(max_examples=int(count)) if count else settings()


@pytest.fixture(scope="module")
def sandbox():
    """<tmp>/model holds the data files of examples/models plus hostile ones; <tmp> itself is
    the 'outside' that nothing may write to."""
    top = tempfile.mkdtemp(prefix="dml-jax-fuzz-")
    folder = os.path.join(top, "model")
    os.mkdir(folder)
    for f in glob.glob(os.path.join(ROOT, "examples", "models", "*")):
        if not f.endswith(".json"):
            shutil.copy(f, folder)
    np.save(os.path.join(folder, "f64.npy"), np.arange(6, dtype=np.float64))
    np.save(
        os.path.join(folder, "pickled.npy"), np.array([1, "x"], dtype=object), allow_pickle=True
    )
    np.save(os.path.join(folder, "fortran.npy"), np.asfortranarray(np.ones((2, 3), np.float32)))
    good = io.BytesIO()
    np.save(good, np.arange(100, dtype=np.float32))
    with open(os.path.join(folder, "truncated.npy"), "wb") as f:
        f.write(good.getvalue()[:-37])
    with open(os.path.join(folder, "header_only.npy"), "wb") as f:
        f.write(good.getvalue()[:20])
    with open(os.path.join(folder, "sentinel.bin"), "wb") as f:
        f.write(SENTINEL)
    with open(os.path.join(top, "outside.bin"), "wb") as f:
        f.write(SENTINEL)
    os.symlink(os.path.join(top, "outside.bin"), os.path.join(folder, "link_out.bin"))
    yield top, folder
    shutil.rmtree(top)


DATA_FILES = [
    "values.npy",
    "bytes.dat",
    "f64.npy",
    "pickled.npy",
    "fortran.npy",
    "truncated.npy",
    "header_only.npy",
    "missing.npy",
    "../outside.bin",
    "link_out.bin",
    "/etc/hostname",
    "sentinel.bin",
    "",
    ".",
    "model.json",
]
TARGETS = [
    "out.npy",
    "out.bin",
    "sub/dir/out.npy",
    "../escape.npy",
    "/tmp/../escape.bin",
    "sentinel.bin",
    "link_out.bin",
    ".",
    "out.png",
    "model.json",
    "",
]


def json_values() -> st.SearchStrategy:
    """Hostile JSON values: numbers at the edges, strings, enum names, nesting, big arrays."""
    leaves = st.one_of(
        st.sampled_from(EDGE_INTS[:-1]),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        st.sampled_from(["nan", "inf", "-inf", "NaN", "", "FLOAT32", "UINT4", "UNKNOWN"]),
        st.sampled_from(ENUM_NAMES),
        st.booleans(),
        st.none(),
        st.sampled_from(DATA_FILES),
        st.text(max_size=5),
    )
    nested = st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=5), inner, max_size=3)
        ),
        max_leaves=8,
    )
    special = st.sampled_from(
        [
            [0] * 5000,
            {"valueCount": 10**12, "value": 1},
            {"valueCount": 2**40, "valueStart": 0, "valueDelta": 1},
            {"sourcePath": "../outside.bin"},
            [[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]],
            {"name": "A", "elementOffset": 2**62},
            {"name": "A", "elementOffset": 4, "elementSizeInBytes": 2**40},
            [65535, 65537],
            [2**32 - 1, 2**32 - 1],
            [1, 1, 1, 1, 1, 1, 1, 1, 1],
            2**63,
            -1,
        ]
    )
    return st.one_of(nested, special, st.sampled_from(TARGETS))


def _paths(node, prefix=()):
    """Every JSON path in a document (the root excluded), down to depth 12."""
    if len(prefix) >= 12:
        return
    if isinstance(node, dict):
        for k, v in node.items():
            yield prefix + (k,)
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield prefix + (i,)
            yield from _paths(v, prefix + (i,))


def _get(doc, path):
    for k in path:
        doc = doc[k]
    return doc


@st.composite
def mutated_models(draw) -> tuple[str, object]:
    name = draw(st.sampled_from(sorted(MODELS)))
    doc = copy.deepcopy(MODELS[name])
    for _ in range(draw(st.integers(1, 4))):
        paths = list(_paths(doc))
        if not paths or not isinstance(doc, dict):
            break
        path = draw(st.sampled_from(paths))
        parent, key = _get(doc, path[:-1]), path[-1]
        action = draw(
            st.sampled_from(
                [
                    "delete",
                    "replace",
                    "replace",
                    "retype",
                    "number",
                    "deepen",
                    "writefile",
                    "source",
                    "duplicate",
                ]
            )
        )
        value = parent[key]
        if action == "delete":
            del parent[key]
        elif action == "replace":
            parent[key] = draw(json_values())
        elif action == "retype":
            parent[key] = (
                (str(value) if not isinstance(value, str) else [value])
                if draw(st.booleans())
                else {"v": value}
            )
        elif action == "number":
            parent[key] = draw(st.sampled_from(EDGE_INTS[:-1] + [1.5, -0.0, 1e308]))
        elif action == "deepen":
            # Deeper than json.dumps can write: spliced into the text by the test.
            parent[key] = draw(st.sampled_from([[[[value]]], DEEP]))
        elif action == "writefile" and isinstance(doc.get("commands"), list):
            resources = doc.get("resources")
            resources = sorted(resources) if isinstance(resources, dict) and resources else ["A"]
            doc["commands"].insert(
                draw(st.integers(0, len(doc["commands"]))),
                {
                    "type": "writeFile",
                    "resource": draw(st.sampled_from(resources)),
                    "targetPath": draw(st.sampled_from(TARGETS)),
                },
            )
        elif action == "source" and isinstance(doc.get("resources"), dict) and doc["resources"]:
            res = draw(st.sampled_from(sorted(doc["resources"])))
            if isinstance(doc["resources"][res], dict):
                doc["resources"][res]["initialValues"] = {
                    "sourcePath": draw(st.sampled_from(DATA_FILES))
                }
        elif action == "duplicate" and isinstance(parent, list):
            parent.append(copy.deepcopy(value))
    if draw(st.integers(0, 19)) == 0:
        doc = draw(json_values())
    return name, doc


def _snapshot(top: str) -> dict:
    """Every file under the sandbox with its bytes (outputs under model/out* excluded)."""
    state = {}
    for dirpath, _, files in os.walk(top):
        for f in files:
            full = os.path.join(dirpath, f)
            rel = os.path.relpath(full, top)
            if rel.startswith((os.path.join("model", "out"), os.path.join("model", "sub"))):
                continue
            if not os.path.islink(full):
                with open(full, "rb") as fh:
                    state[rel] = fh.read()
    return state


def _clean_outputs(folder: str) -> None:
    for f in glob.glob(os.path.join(folder, "out*")):
        os.unlink(f) if os.path.isfile(f) else shutil.rmtree(f)
    shutil.rmtree(os.path.join(folder, "sub"), ignore_errors=True)


STATS = {"models": 0, "loaded": 0, "run": 0, "exit 0": 0, "exit 1": 0}


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    path = os.environ.get("DML_JAX_FUZZ_REPORT")
    if path:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(STATS, f, indent=1)


@fuzz_settings()
@given(case=mutated_models(), run=st.integers(0, 10**6))
def test_mutated_model(sandbox, case, run):
    top, folder = sandbox
    _, doc = case
    text = json.dumps(doc).replace(json.dumps(DEEP), "[" * 5000 + "1" + "]" * 5000)
    model = os.path.join(folder, "model.json")
    with open(model, "w", encoding="utf-8") as f:
        f.write(text)
    _clean_outputs(folder)
    before = _snapshot(top)
    STATS["models"] += 1
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        if run % RUN_ONE_IN:
            STATS["loaded"] += 1
            try:
                load_model(model, max_memory=BUDGET)
            except ModelError as e:
                assert str(e).startswith(model + ": ") and e.message.strip(), str(e)
                # Errors about the whole file name what is wrong with it instead of a path.
                assert e.path or any(
                    w in e.message for w in ("JSON", "memory budget", "model", "member '")
                )
        else:
            STATS["run"] += 1
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = cli.main(["run", model, "--max-memory", str(BUDGET)])
            STATS[f"exit {code}"] = STATS.get(f"exit {code}", 0) + 1
            message = err.getvalue()
            assert "Traceback" not in message + out.getvalue()
            assert code in (0, 1), (code, message)
            if code == 1:
                lines = message.strip().splitlines()
                assert len(lines) == 1 and lines[0].startswith(f"error: {model}: "), message
    finally:
        os.chdir(cwd)
    after = _snapshot(top)
    after.pop(os.path.join("model", "model.json"), None)
    before.pop(os.path.join("model", "model.json"), None)
    assert after == before, "a file outside the requested outputs was created or changed"
