"""The registry and per-operator coverage (STYLE.md "Adding an operator").

Every operator class exported by ``dml_jax`` must be registered and come with: ``operator_type``,
a docstring naming its DML struct and introducing feature level, infer / validate / lower,
support rows, a NumPy reference, a seed or example case, invalid rows, and a JSON example that
round-trips. Enum parsing accepts exactly the member, its full DML name and its suffix.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import json
import re

import pytest

import dml_jax as dml
from dml_jax import registry, support
from dml_jax.enums import DataType, ReduceFunction, TensorFlags
from dml_jax.fields import ATTRIBUTE, COUNT, INPUT, OUTPUT, OperatorDesc, dml_member_name
from dml_jax.registry import OperatorSpec

OPERATOR_CLASSES = [
    getattr(dml, name)
    for name in dml.__all__
    if isinstance(getattr(dml, name), type) and issubclass(getattr(dml, name), OperatorDesc)
]
IDS = [cls.__name__ for cls in OPERATOR_CLASSES]


def struct_name(operator_type: str) -> str:
    """DML_OPERATOR_ELEMENT_WISE_CLIP -> DML_ELEMENT_WISE_CLIP_OPERATOR_DESC."""
    return "DML_" + operator_type[len("DML_OPERATOR_") :] + "_OPERATOR_DESC"


def support_keys(operator_type: str) -> list:
    if operator_type == "DML_OPERATOR_REDUCE":
        return [(operator_type, f.name) for f in ReduceFunction]
    return [operator_type]


def test_fourteen_operators_are_exported_and_registered():
    assert len(OPERATOR_CLASSES) == 14
    assert {c.operator_type for c in OPERATOR_CLASSES} == {s.name for s in registry.operators()}
    assert len({c.operator_type for c in OPERATOR_CLASSES}) == 14


@pytest.mark.parametrize("cls", OPERATOR_CLASSES, ids=IDS)
def test_operator_is_complete(cls):
    name = cls.operator_type
    assert re.fullmatch(r"DML_OPERATOR_[A-Z0-9_]+", name)
    spec = registry.lookup(name)
    assert isinstance(spec, OperatorSpec) and spec.desc_class is cls and spec.name == name
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen
    for hook in (spec.infer, spec.validate, spec.lower):
        assert callable(hook)
    # Docstring: DML struct name and the feature level that introduced the operator.
    doc = inspect.getdoc(cls) or ""
    assert struct_name(name) in doc, doc
    first = min(support.introduced(k) for k in support_keys(name))
    assert first.label in doc, f"{cls.__name__} docstring does not name feature level {first.label}"
    # Support rows: every key has rows in increasing level order, non-empty types and ranks.
    for key in support_keys(name):
        rows = support.SUPPORT[key]
        assert rows and [r.level for r in rows] == sorted(r.level for r in rows)
        assert all(r.ranks and r.inputs and r.outputs for r in rows)
    # Fields are declared: tensors in and out, and every field has a declared kind.
    assert cls.declared(INPUT) and cls.declared(OUTPUT)
    kinds = {f.metadata.get("kind") for f in dataclasses.fields(cls)}
    assert kinds <= {INPUT, OUTPUT, ATTRIBUTE, COUNT}
    for f in cls.declared(COUNT):
        assert f.default is None and f.metadata["of"] in {g.name for g in dataclasses.fields(cls)}


def test_support_table_has_no_unregistered_operators():
    names = {k if isinstance(k, str) else k[0] for k in support.SUPPORT}
    assert names == {s.name for s in registry.operators()}


def _import_test_module(name: str):
    if importlib.util.find_spec(name) is None:
        pytest.skip(f"tests/{name}.py does not exist yet; coverage of it is checked once it does")
    return importlib.import_module(name)


@pytest.mark.parametrize("cls", OPERATOR_CLASSES, ids=IDS)
def test_operator_has_reference_seed_case_invalid_rows_and_json_example(cls):
    name = cls.operator_type
    reference = _import_test_module("reference")
    assert name in reference._BY_TYPE, f"tests/reference.py has no reference for {name}"
    seed_cases = _import_test_module("seed_cases")
    seeded = {c.desc.operator_type for c in seed_cases._CASES}
    assert name in seeded, f"tests/seed_cases.py has no seed or example case for {name}"
    validation = importlib.import_module("test_validation")
    assert name in {f().operator_type for f in validation.FACTORIES}
    invalid = {factory().operator_type for factory, _, _ in validation.RULES}
    assert name in invalid, f"tests/test_validation.py has no invalid row for {name}"
    json_desc = importlib.import_module("test_json_desc")
    assert name in {case[3].operator_type for case in json_desc.CASES}


# --- JSON round trip: descriptor -> DxDispatch JSON -> descriptor -------------------------------


def tensor_to_json(t: dml.TensorDesc) -> dict:
    out = {
        "DataType": t.data_type.dml_name,
        "Flags": t.flags.name,
        "DimensionCount": t.rank,
        "Sizes": list(t.sizes),
        "TotalTensorSizeInBytes": t.total_tensor_size_in_bytes,
        "GuaranteedBaseOffsetAlignment": t.guaranteed_base_offset_alignment,
    }
    if t.strides is not None:
        out["Strides"] = list(t.strides)
    return {"Type": "DML_TENSOR_TYPE_BUFFER", "Desc": out}


def value_to_json(value):
    if isinstance(value, dml.TensorDesc):
        return tensor_to_json(value)
    if isinstance(value, dml.ScaleBias):
        return {"Scale": value.scale, "Bias": value.bias}
    if isinstance(value, tuple):
        return [value_to_json(v) for v in value]
    if hasattr(value, "dml_name"):
        return value.dml_name
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return str(value)
    return value


def desc_to_json(desc: OperatorDesc) -> dict:
    members = {
        dml_member_name(f.name): value_to_json(getattr(desc, f.name))
        for f in dataclasses.fields(desc)
        if getattr(desc, f.name) is not None
    }
    return {"type": desc.operator_type, "desc": members}


def _example_descs():
    validation = importlib.import_module("test_validation")
    descs = [f() for f in validation.FACTORIES]
    descs += [
        dml.ElementWiseClipOperatorDesc(
            dml.TensorDesc("FLOAT16", [2, 3], strides=[4, 1], flags="OWNED_BY_DML"),
            dml.TensorDesc("FLOAT16", [2, 3], total_tensor_size_in_bytes=64),
            float("-inf"),
            2.5,
            dml.ScaleBias(0.5, -1),
        ),
        dml.SplitOperatorDesc(dml.TensorDesc("INT8", [4]), [dml.TensorDesc("INT8", [4])], 0, 1),
        dml.ElementWiseClip1OperatorDesc(
            dml.TensorDesc("UINT64", [3], guaranteed_base_offset_alignment=8),
            dml.TensorDesc("UINT64", [3]),
            0,
            2**64 - 1,
            "UINT64",
        ),
    ]
    descs += [validation.reduce(function=f) for f in ("MIN", "L2", "LOG_SUM_EXP")]
    descs += [validation.reduce("ARGMAX", out_dtype="INT64", axes=(3, 2), axis_count=2)]
    descs += [validation.argmin(axis_direction="DECREASING", rank=8)]
    return descs


def test_json_round_trip_of_every_operator():
    descs = _example_descs()
    assert {d.operator_type for d in descs} == {s.name for s in registry.operators()}
    for desc in descs:
        text = json.dumps(desc_to_json(desc))
        back = dml.operator_desc_from_json(json.loads(text))
        assert back == desc, text
        assert hash(back) == hash(desc)


# --- registering and looking up -----------------------------------------------------------------


def test_registering_twice_raises_and_leaves_the_registry_unchanged():
    before = registry.operators()
    spec = registry.lookup("DML_OPERATOR_TILE")
    with pytest.raises(ValueError, match=r"DML_OPERATOR_TILE is already registered"):
        registry.register(
            dml.TileOperatorDesc, infer=spec.infer, validate=spec.validate, lower=spec.lower
        )
    assert registry.operators() == before
    assert registry.lookup("DML_OPERATOR_TILE") is spec


def test_register_rejects_what_is_not_an_operator_desc():
    with pytest.raises(TypeError):
        registry.register(dict, infer=None, validate=None, lower=None)

    @dataclasses.dataclass(frozen=True)
    class Nameless(OperatorDesc):
        operator_type = "TILE"

    with pytest.raises(TypeError, match=r"must be a DML_OPERATOR_\* name"):
        registry.register(Nameless, infer=None, validate=None, lower=None)
    assert "TILE" not in {s.name for s in registry.operators()}


@pytest.mark.parametrize("name", ["DML_OPERATOR_GEMM", "SPLIT", "dml_operator_split", ""])
def test_unknown_names_list_the_known_ones(name):
    with pytest.raises(dml.ValidationError) as info:
        registry.lookup(name)
    message = str(info.value)
    assert message.startswith(f"unknown operator type {name!r}; supported: ")
    for spec in registry.operators():
        assert spec.name in message


def test_parse_operator_type_takes_full_and_short_names_in_exact_case():
    for spec in registry.operators():
        short = spec.name[len("DML_OPERATOR_") :]
        assert registry.parse_operator_type(spec.name) is spec
        assert registry.parse_operator_type(short) is spec
        with pytest.raises(dml.ValidationError, match="unknown operator type"):
            registry.parse_operator_type(short.lower())
    for bad in (62, None, True, ["SPLIT"]):
        with pytest.raises(dml.ValidationError, match="operator type must be a string"):
            registry.parse_operator_type(bad)


# --- enum parsing --------------------------------------------------------------------------------

ENUMS = {
    dml.DataType: "DML_TENSOR_DATA_TYPE_",
    dml.TensorFlags: "DML_TENSOR_FLAG_",
    dml.FeatureLevel: "DML_FEATURE_LEVEL_",
    dml.ReduceFunction: "DML_REDUCE_FUNCTION_",
    dml.DepthSpaceOrder: "DML_DEPTH_SPACE_ORDER_",
    dml.AxisDirection: "DML_AXIS_DIRECTION_",
}


def _suffix(member) -> str:
    return member.name[3:] if isinstance(member, dml.FeatureLevel) else member.name


@pytest.mark.parametrize("enum_cls", list(ENUMS), ids=lambda e: e.__name__)
def test_enum_accepts_member_full_name_and_suffix(enum_cls):
    prefix = ENUMS[enum_cls]
    for member in enum_cls:
        suffix = _suffix(member)
        assert enum_cls.parse(member) is member
        assert enum_cls.parse(prefix + suffix) is member
        assert enum_cls.parse(suffix) is member
        assert member.dml_name == prefix + suffix


@pytest.mark.parametrize("enum_cls", list(ENUMS), ids=lambda e: e.__name__)
def test_enum_rejects_ints_bools_lowercase_and_other_prefixes(enum_cls):
    prefix = ENUMS[enum_cls]
    for member in enum_cls:
        suffix = _suffix(member)
        bad = [member.value, True, False, (prefix + suffix).lower(), f" {suffix}", prefix]
        bad.append("DML_OPERATOR_" + suffix)
        if suffix.lower() != suffix:  # FeatureLevel suffixes such as 5_0 have no case
            bad.append(suffix.lower())
        for value in bad:
            with pytest.raises(dml.ValidationError, match=rf"must be a {enum_cls.__name__}"):
                enum_cls.parse(value)


def test_dml_enum_values_match_the_header():
    """Numeric values from NOTES.md 1.4, 1.5 and 3 (the enums' values are DirectML's)."""
    assert [m.value for m in DataType] == list(range(1, 12))
    assert DataType.parse("INT64").value == 11 and DataType.FLOAT64.size == 8
    assert TensorFlags.OWNED_BY_DML.value == 1
    assert [m.value for m in ReduceFunction] == list(range(12))
    assert ReduceFunction.SUM_SQUARE.value == 11 and ReduceFunction.ARGMAX.value == 0
    assert dml.FeatureLevel.FL_2_1.value == 0x2100 and dml.FeatureLevel.FL_6_4.value == 0x6400
    assert dml.FeatureLevel.parse("FL_5_0") is dml.FeatureLevel.FL_5_0
    assert sorted(dml.FeatureLevel) == list(dml.FeatureLevel)
    assert (
        dml.DepthSpaceOrder.COLUMN_ROW_DEPTH.value == 1 and dml.AxisDirection.DECREASING.value == 1
    )


def test_constructors_accept_every_enum_spelling():
    x = dml.TensorDesc("FLOAT32", [2, 2])
    spellings = [dml.ReduceFunction.SUM, "DML_REDUCE_FUNCTION_SUM", "SUM"]
    descs = {dml.ReduceOperatorDesc(f, x, x.like(sizes=(1, 2)), [0]) for f in spellings}
    assert len(descs) == 1
    types = {dml.TensorDesc(d, [2]) for d in (DataType.INT8, "DML_TENSOR_DATA_TYPE_INT8", "INT8")}
    assert len(types) == 1
