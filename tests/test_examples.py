"""Tests derived from the registry: every registered operator, with no per-operator line here.

For each operator's example (its registry entry): the description round-trips through DxDispatch
JSON; the compiled operator agrees with the independent NumPy reference (tests/reference); the
example run as a DxDispatch model by ``dml-jax run`` prints the reference values; and mutated
JSON of the example gives a ``ValidationError`` or a valid description, never another exception.
"""

from __future__ import annotations

import copy
import dataclasses
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


# --- values drawn by field kind, for every attribute of every operator -----------------------


def field_values(ftype, spec):
    """Values of a field kind: mostly valid, some out of range, derived from the declaration."""
    from dml_jax import fields

    if isinstance(ftype, fields._Enum):
        return st.sampled_from(list(ftype.enum_cls))
    if isinstance(ftype, fields.ScalarUnion):
        return st.one_of(st.integers(-300, 300), st.floats(-1e5, 1e5, width=32))
    if isinstance(ftype, fields._Array):
        return st.lists(field_values(ftype.item, spec), min_size=0, max_size=5)
    if isinstance(ftype, fields._Float):
        return st.floats(-10, 10, width=32)
    if isinstance(ftype, fields._Bool):
        return st.booleans()
    if isinstance(ftype, fields._Int):
        return st.integers(-5, 10)
    if isinstance(ftype, fields._Uint):
        return st.integers(0, 10)
    if ftype is fields.SCALE_BIAS:
        return st.builds(dml.ScaleBias, st.floats(-4, 4), st.floats(-4, 4))
    if ftype is fields.SIZE_2D:
        return st.builds(dml.Size2D, st.integers(0, 5), st.integers(0, 5))
    if ftype is fields.OPERATOR_DESC:  # a fusable activation, its tensors left None
        return st.sampled_from([s for s in SPECS if s.fusable]).map(
            lambda s: dataclasses.replace(
                catalog.example_desc(s), input_tensor=None, output_tensor=None
            )
        )
    if ftype is fields.OPERATOR_DESC_ARRAY:  # RNN's ActivationDescs: lists of those
        return st.lists(field_values(fields.OPERATOR_DESC, spec), max_size=6)
    raise AssertionError(f"no strategy for field kind {ftype!r}")


@st.composite
def redrawn_attributes(draw):
    spec = draw(st.sampled_from([s for s in SPECS if s.desc_class.declared("attribute")]))
    desc = catalog.example_desc(spec)
    f = draw(st.sampled_from(spec.desc_class.declared("attribute")))
    return desc, f.name, draw(field_values(f.metadata["type"], spec))


@settings(max_examples=80)
@given(case=redrawn_attributes())
def test_attribute_values_by_field_kind_validate_or_fail_cleanly(case):
    desc, name, value = case
    try:
        changed = dataclasses.replace(desc, **{name: value})
        dml.validate(changed)
    except dml.ValidationError as e:
        assert str(e).startswith("DML_OPERATOR_")
        return
    # Whatever validates also round-trips through DxDispatch JSON.
    assert (
        dml.operator_desc_from_json(json.loads(json.dumps(dml.operator_desc_to_json(changed))))
        == changed
    )


def test_every_field_kind_has_a_strategy():
    for spec in SPECS:
        for f in spec.desc_class.declared("attribute"):
            assert field_values(f.metadata["type"], spec) is not None


# --- buffer mode and feature levels, from every example --------------------------------------


def _padded(t: dml.TensorDesc) -> dml.TensorDesc:
    """The same logical tensor with two unused elements after each innermost row."""
    strides, step = [], 1
    for i, size in enumerate(reversed(t.sizes)):
        strides.append(step)
        step *= size + 2 if i == 0 else size
    return t.like(sizes=t.sizes, strides=tuple(reversed(strides)))


def _buffer(array: np.ndarray, t: dml.TensorDesc) -> np.ndarray:
    buf = np.zeros(t.addressed_elements, array.dtype)
    index = sum(
        np.arange(n).reshape([-1 if k == d else 1 for k in range(len(t.sizes))]) * s
        for d, (n, s) in enumerate(zip(t.sizes, t.layout_strides))
    )
    buf[index] = array
    return buf


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_example_in_buffer_mode_with_padded_strides(spec):
    desc = catalog.example_desc(spec)
    changes = {}
    for f in desc.declared("input") + desc.declared("output"):
        value = getattr(desc, f.name)
        if value is not None:
            changes[f.name] = (
                tuple(_padded(t) for t in value) if f.metadata["array"] else _padded(value)
            )
    padded = dataclasses.replace(desc, **changes)
    op = dml.compile_operator(padded)
    inputs = catalog.example_inputs(spec)
    want = reference.reference(desc, *inputs)
    in_bufs = [_buffer(x, t) for x, (_, t) in zip(inputs, padded.input_slots())]
    sentinel = [np.full(t.addressed_elements, 7, t.dtype) for _, t in padded.output_slots()]
    got = op.run_buffers(in_bufs, sentinel)
    for buf, w, (_, t) in zip(got, want, padded.output_slots()):
        expected = _buffer(w, t)
        mask = _buffer(np.ones(w.shape, bool), t)
        _close(np.asarray(buf)[mask], expected[mask])
        assert np.all(np.asarray(buf)[~mask] == 7)  # padding elements keep their values


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_example_needs_its_introduction_level(spec):
    desc = catalog.example_desc(spec)
    first = min(support_rows[0].level for support_rows in spec.tables.values())
    earlier = [level for level in dml.FeatureLevel if level < spec.support_rows(desc)[0].level]
    if earlier:
        with pytest.raises(dml.ValidationError, match=r"requires feature level \d_\d or later"):
            dml.validate(desc, earlier[-1])
    assert first <= spec.support_rows(desc)[0].level
