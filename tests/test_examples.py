"""Tests derived from the registry: every registered operator, with no per-operator line here.

For each operator's example (its registry entry): the description round-trips through DxDispatch
JSON; the compiled operator agrees with the independent NumPy reference (tests/reference); the
example run as a DxDispatch model by ``dml-jax run`` prints the reference values; and mutated
JSON of the example gives a ``ValidationError`` or a valid description, never another exception.
"""

from __future__ import annotations

import copy
import json
import re

import numpy as np
import pytest
import reference
from hypothesis import given, settings
from hypothesis import strategies as st

import dml_jax as dml
from dml_jax import catalog, cli, registry

SPECS = registry.operators()
IDS = [s.name.removeprefix("DML_OPERATOR_") for s in SPECS]


def _close(got: np.ndarray, want: np.ndarray) -> None:
    if np.issubdtype(want.dtype, np.floating):
        np.testing.assert_allclose(got, want, rtol=2e-6 if want.dtype != np.float16 else 1e-3)
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_example_round_trips_through_json(spec):
    desc = catalog.example_desc(spec)
    dml.validate(desc)
    text = json.dumps(dml.operator_desc_to_json(desc))
    assert dml.operator_desc_from_json(json.loads(text)) == desc
    # The short type and the inline form read the same description.
    obj = json.loads(text)
    inline = {"type": obj["type"].removeprefix("DML_OPERATOR_"), **obj["desc"]}
    assert dml.operator_desc_from_json(inline) == desc


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_example_matches_reference(spec):
    desc = catalog.example_desc(spec)
    inputs = catalog.example_inputs(spec)
    got = dml.compile_operator(desc)(*inputs)
    got = got if isinstance(got, tuple) else (got,)
    want = reference.reference(desc, *inputs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert np.asarray(g).dtype == w.dtype
        _close(np.asarray(g), w)


_LINE = re.compile(r"^Resource '([^']+)': (.*)$")


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_example_runs_as_a_model(spec, tmp_path, capsys):
    model = tmp_path / "example.json"
    model.write_text(json.dumps(catalog.example_model(spec)))
    assert cli.main(["run", str(model)]) == 0
    printed = {}
    for line in capsys.readouterr().out.splitlines():
        m = _LINE.match(line)
        if m:
            printed[m.group(1)] = np.array([float(v) for v in m.group(2).split(", ")])
    desc = catalog.example_desc(spec)
    want = reference.reference(desc, *catalog.example_inputs(spec))
    names = [c["resource"] for c in catalog.example_model(spec)["commands"][1:]]
    assert list(printed) == names
    for name, w in zip(names, want):
        # Printed with 6 significant digits, as DxDispatch prints.
        np.testing.assert_allclose(printed[name], w.astype(np.float64).ravel(), rtol=1e-5)


def test_example_command_prints_a_model(capsys):
    assert cli.main(["example", "ELEMENT_WISE_IDENTITY"]) == 0
    model = json.loads(capsys.readouterr().out)
    assert model["dispatchables"]["element_wise_identity"]["type"].endswith("IDENTITY")
    assert cli.main(["example", "NO_SUCH_OPERATOR"]) == 2


# --- JSON fuzzing derived from the field declarations ----------------------------------------

_JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
    st.lists(st.integers(-3, 10), max_size=4),
    st.dictionaries(
        st.sampled_from(["Type", "Desc", "Scale", "Width", "x"]), st.integers(), max_size=2
    ),
)


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, prefix + (i,))


@st.composite
def mutated_examples(draw):
    spec = draw(st.sampled_from(SPECS))
    obj = copy.deepcopy(dict(spec.example.dispatchable))
    paths = [p for p in _paths(obj["desc"]) if p]
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(paths))
        parent = obj["desc"]
        try:
            for key in path[:-1]:
                parent = parent[key]
            if draw(st.booleans()) and isinstance(parent, dict):
                parent.pop(path[-1], None)
            else:
                parent[path[-1]] = draw(_JUNK)
        except (KeyError, IndexError, TypeError):
            continue
    return obj


@settings(max_examples=60)
@given(obj=mutated_examples())
def test_mutated_json_gives_validation_errors_only(obj):
    try:
        desc = dml.operator_desc_from_json(obj)
        dml.validate(desc)
    except dml.ValidationError as e:
        assert str(e)
