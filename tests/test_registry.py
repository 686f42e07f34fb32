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
import pathlib
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
SCHEMAS = (
    {
        op["type"]: op
        for op in json.loads(
            (pathlib.Path(__file__).parents[2] / "shared/spec/dml_operators.json").read_text()
        )["operators"]
        if (pathlib.Path(__file__).parents[2] / "shared/spec/dml_operators.json").exists()
    }
    if (pathlib.Path(__file__).parents[2] / "shared/spec/dml_operators.json").exists()
    else {}
)


def struct_name(operator_type: str) -> str:
    """DML_OPERATOR_ELEMENT_WISE_CLIP -> DML_ELEMENT_WISE_CLIP_OPERATOR_DESC."""
    return "DML_" + operator_type[len("DML_OPERATOR_") :] + "_OPERATOR_DESC"


def class_name(operator_type: str) -> str:
    """API.md's rule: DML_OPERATOR_ELEMENT_WISE_ADD1 -> ElementWiseAdd1OperatorDesc."""
    fixed = {
        "DML_OPERATOR_ARGMIN": "ArgMinOperatorDesc",
        "DML_OPERATOR_ARGMAX": "ArgMaxOperatorDesc",
    }
    if operator_type in fixed:  # API.md's table spells these two this way
        return fixed[operator_type]
    words = operator_type[len("DML_OPERATOR_") :].split("_")
    # Words are capitalized; one that starts with a digit keeps its case (VALUE_SCALE_2D).
    return "".join(w if w[0].isdigit() else w.capitalize() for w in words) + "OperatorDesc"


def test_exports_are_the_registry():
    assert {c.operator_type for c in OPERATOR_CLASSES} == {s.name for s in registry.operators()}
    assert len(OPERATOR_CLASSES) == len(registry.operators())
    assert dml.registered_operators() == sorted(s.name for s in registry.operators())
    for spec in registry.operators():
        assert getattr(dml, class_name(spec.name)) is spec.desc_class


# NOTES.md: the operators with no input tensor.
NO_INPUT_OPERATORS = {
    "DML_OPERATOR_FILL_VALUE_CONSTANT",
    "DML_OPERATOR_FILL_VALUE_SEQUENCE",
    "DML_OPERATOR_DIAGONAL_MATRIX",
}


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
    first = min(support.introduced(rows) for rows in spec.tables.values())
    assert first.label in doc, f"{cls.__name__} docstring does not name feature level {first.label}"
    for rows in spec.tables.values():
        assert rows and [r.level for r in rows] == sorted(r.level for r in rows)
        assert all(r.ranks and r.inputs and r.outputs for r in rows)
    # Fields are declared: tensors in and out, and every field has a declared kind.
    # Every operator has an output; only DirectML's generators have no input tensor at all.
    assert cls.declared(OUTPUT)
    assert cls.declared(INPUT) or name in NO_INPUT_OPERATORS
    kinds = {f.metadata.get("kind") for f in dataclasses.fields(cls)}
    assert kinds <= {INPUT, OUTPUT, ATTRIBUTE, COUNT}
    for f in cls.declared(COUNT):
        assert f.default is None and f.metadata["of"] in {g.name for g in dataclasses.fields(cls)}
    assert isinstance(spec.example, registry.Example) and spec.example.dispatchable["type"] == name


@pytest.mark.parametrize("cls", OPERATOR_CLASSES, ids=IDS)
def test_fields_follow_the_schema(cls):
    """Member names, order, kinds and optionality equal DirectML's schema."""
    schema = SCHEMAS.get(cls.operator_type)
    if schema is None:
        pytest.skip("the schema file of the reference notes is not beside this checkout")
    members = [
        (dml_member_name(f.name), f.metadata["kind"])
        for f in dataclasses.fields(cls)
        if f.metadata.get("kind") in (INPUT, OUTPUT, ATTRIBUTE)
    ]
    kinds = {"input_tensor": INPUT, "output_tensor": OUTPUT, "attribute": ATTRIBUTE}
    counts = {f.get("count_field") for f in schema["fields"]}
    want = [(f["name"], kinds[f["kind"]]) for f in schema["fields"] if f["name"] not in counts]
    assert sorted(members) == sorted(want)
    # Struct order, ignoring the count members, which dml_jax puts last (API.md); API.md's
    # table fixes another order for the CLIP family's optional members.
    if cls.operator_type.startswith("DML_OPERATOR_ELEMENT_WISE_CLIP"):
        return
    assert [m for m, _ in members] == [m for m, _ in want]


@pytest.mark.parametrize("cls", OPERATOR_CLASSES, ids=IDS)
def test_in_place_follows_the_schema(cls):
    schema = SCHEMAS.get(cls.operator_type)
    if schema is None or schema.get("in_place") is None:
        pytest.skip("no in-place flag in the schema file for this operator")
    assert registry.lookup(cls.operator_type).in_place is schema["in_place"]


def _import_test_module(name: str):
    return importlib.import_module(name)


def _test_modules():
    here = pathlib.Path(__file__).parent
    return [_import_test_module(p.stem) for p in sorted(here.glob("test_*.py"))]


def _operator_of(factory) -> str:
    """The operator a rule row is about (a row may fail already at construction)."""
    try:
        return factory().operator_type
    except dml.ValidationError as e:
        return str(e).split(":")[0]


@pytest.mark.parametrize("cls", OPERATOR_CLASSES, ids=IDS)
def test_operator_has_reference_worked_values_and_invalid_rows(cls):
    """STYLE.md's list: a NumPy reference, a worked example (exact values from the spec or worked
    by hand) and at least one rule row; the example and JSON round trip are derived from the
    registry for every operator by test_examples.py."""
    name = cls.operator_type
    reference = _import_test_module("reference")
    assert name in reference._BY_TYPE, f"tests/reference has no reference for {name}"
    seed_cases = _import_test_module("seed_cases")
    seeded = {c.desc.operator_type for c in seed_cases._CASES}
    invalid = {
        factory().operator_type for factory, _, _ in _import_test_module("test_validation").RULES
    }
    for module in _test_modules():
        seeded |= {desc.operator_type for desc, *_ in getattr(module, "SEEDS", ())}
        invalid |= {_operator_of(factory) for factory, *_ in getattr(module, "INVALID_ROWS", ())}
    assert name in seeded, f"no worked example (seed_cases.py or a test module's SEEDS) for {name}"
    assert name in invalid, f"no invalid row (test_validation.RULES or INVALID_ROWS) for {name}"


def test_support_tables_belong_to_registered_operators():
    names = {k if isinstance(k, str) else k[0] for k in registry.support_tables()}
    assert names == {s.name for s in registry.operators()}


# --- registering and looking up -----------------------------------------------------------------


def test_registering_twice_raises_and_leaves_the_registry_unchanged():
    before = registry.operators()
    spec = registry.lookup("DML_OPERATOR_TILE")
    with pytest.raises(ValueError, match=r"DML_OPERATOR_TILE is already registered"):
        registry.register(
            dml.TileOperatorDesc,
            infer=spec.infer,
            validate=spec.validate,
            lower=spec.lower,
            support=spec.support,
            example=spec.example,
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


@pytest.mark.parametrize(
    "name", ["DML_OPERATOR_NO_SUCH_OPERATOR", "SPLIT", "dml_operator_split", ""]
)
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
    dml.RoundingMode: "DML_ROUNDING_MODE_",
    dml.IsInfinityMode: "DML_IS_INFINITY_MODE_",
    dml.MatrixTransform: "DML_MATRIX_TRANSFORM_",
    dml.ConvolutionMode: "DML_CONVOLUTION_MODE_",
    dml.ConvolutionDirection: "DML_CONVOLUTION_DIRECTION_",
    dml.PaddingMode: "DML_PADDING_MODE_",
    dml.RandomGeneratorType: "DML_RANDOM_GENERATOR_TYPE_",
    dml.InterpolationMode: "DML_INTERPOLATION_MODE_",
    dml.RecurrentNetworkDirection: "DML_RECURRENT_NETWORK_DIRECTION_",
    dml.QuantizationType: "DML_QUANTIZATION_TYPE_",
    dml.MultiheadAttentionMaskType: "DML_MULTIHEAD_ATTENTION_MASK_TYPE_",
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
    assert [m.value for m in DataType] == list(range(1, 14))
    assert DataType.UINT4.value == 12 and DataType.INT4.value == 13 and DataType.INT4.bits == 4
    assert [m.value for m in dml.QuantizationType] == [0, 1, 2]
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


def test_every_dml_enum_is_exported():
    # dml_jax derives its enum exports from dml_jax.enums.ENUMS: every enum class defined there.
    import enum

    from dml_jax import enums

    defined = {
        name
        for name, value in vars(enums).items()
        if isinstance(value, enum.EnumMeta)
        and value.__module__ == enums.__name__
        and not name.startswith("_")
    }
    assert {e.__name__ for e in enums.ENUMS} == defined
    assert defined <= set(dml.__all__)
    assert all(getattr(dml, name) is getattr(enums, name) for name in defined)
