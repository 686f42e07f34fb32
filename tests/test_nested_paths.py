"""Errors inside a nested operator desc (FusedActivation, the recurrent operators'
ActivationDescs) name the whole path in the owner, from Python and from DxDispatch JSON alike;
a nested desc that is not an activation is said to be one, not reported by members (its tensors)
that the owner does not have."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest

import dml_jax as dml
from dml_jax import registry

T = dml.TensorDesc


def _example(name: str) -> dict:
    return json.loads(json.dumps(registry.lookup(name).example.dispatchable))


def _rnn(acts: list, direction: str = "BIDIRECTIONAL") -> dml.RnnOperatorDesc:
    x = T("FLOAT32", [1, 2, 1, 2])
    w = T("FLOAT32", [1, 2, 2, 2])
    return dml.RnnOperatorDesc(
        x, w, w, None, None, None, T("FLOAT32", [2, 2, 1, 2]), None, acts, direction
    )


def test_json_nested_desc_that_is_no_activation_is_named_by_its_path():
    """The fuzzer's finding: ActivationDescs[2] an ELEMENT_WISE_ADD gave "DML_OPERATOR_RNN:
    ATensor is required", a member RNN does not have."""
    obj = _example("DML_OPERATOR_RNN")
    acts = obj["desc"]["ActivationDescs"]
    obj["desc"]["ActivationDescs"] = acts + acts + [{"Type": "DML_OPERATOR_ELEMENT_WISE_ADD"}]
    with pytest.raises(dml.ValidationError) as e:
        dml.operator_desc_from_json(obj)
    assert str(e.value).startswith(
        "DML_OPERATOR_RNN: desc.ActivationDescs[2] is not an activation: got "
        "DML_OPERATOR_ELEMENT_WISE_ADD"
    )
    assert "ATensor" not in str(e.value)
    add1 = _example("DML_OPERATOR_ELEMENT_WISE_ADD1")
    add1["desc"]["FusedActivation"] = {"Type": "ELEMENT_WISE_ADD", "Desc": {}}
    with pytest.raises(dml.ValidationError, match=r"^DML_OPERATOR_ELEMENT_WISE_ADD1: "
                       r"desc\.FusedActivation is not an activation: got "
                       r"DML_OPERATOR_ELEMENT_WISE_ADD"):  # fmt: skip
        dml.operator_desc_from_json(add1)


def test_json_errors_inside_a_nested_desc_keep_its_path():
    obj = _example("DML_OPERATOR_RNN")
    obj["desc"]["ActivationDescs"] = [{"Type": "ACTIVATION_LINEAR", "Desc": {"Alpha": 1.0}}]
    with pytest.raises(dml.ValidationError, match=r"^DML_OPERATOR_RNN: "
                       r"desc\.ActivationDescs\[0\]\.Desc\.Beta is required"):  # fmt: skip
        dml.operator_desc_from_json(obj)
    add1 = _example("DML_OPERATOR_ELEMENT_WISE_ADD1")
    add1["desc"]["FusedActivation"] = {"Type": "ACTIVATION_ELU", "Alpha": 1.0, "Bogus": 3}
    with pytest.raises(dml.ValidationError, match=r"^DML_OPERATOR_ELEMENT_WISE_ADD1: "
                       r"desc\.FusedActivation has unknown member 'Bogus'"):  # fmt: skip
        dml.operator_desc_from_json(add1)


def test_python_nested_desc_that_is_no_activation_is_named_by_its_path():
    tanh = dml.ActivationTanhOperatorDesc()
    v = T("FLOAT32", [1, 1, 1, 2])
    add = dml.ElementWiseAddOperatorDesc(v, v, v)
    with pytest.raises(dml.ValidationError, match=r"^DML_OPERATOR_RNN: ActivationDescs\[2\] is "
                       r"not an activation: got DML_OPERATOR_ELEMENT_WISE_ADD"):  # fmt: skip
        dml.validate(_rnn([tanh, tanh, add]))
    x = T("FLOAT32", [1, 1, 2, 2])
    gemm = dml.GemmOperatorDesc(x, x, None, x, fused_activation=add)
    with pytest.raises(dml.ValidationError, match=r"^DML_OPERATOR_GEMM: FusedActivation is not "
                       r"an activation: got DML_OPERATOR_ELEMENT_WISE_ADD"):  # fmt: skip
        dml.validate(gemm)


def test_rules_of_a_nested_desc_report_the_owner_and_the_whole_path(monkeypatch):
    """One mechanism (fused.validate_nested) for FusedActivation and ActivationDescs: a rule
    that the activation raises under its own type is re-raised as the owner's, at its path; so
    are its support table's errors."""
    name = "DML_OPERATOR_ACTIVATION_LINEAR"
    spec = registry.lookup(name)

    def strict(d, v):  # an activation rule raised without the validator's path
        raise dml.ValidationError(f"{name}: Beta must be 0 here, got {d.beta}")

    monkeypatch.setitem(registry._REGISTRY, name, dataclasses.replace(spec, validate=strict))
    linear = dml.ActivationLinearOperatorDesc(alpha=1.0, beta=2.0)
    x = T("FLOAT32", [1, 1, 2, 2])
    with pytest.raises(dml.ValidationError, match=r"^DML_OPERATOR_GEMM: FusedActivation\.Beta "
                       r"must be 0 here, got 2\.0$"):  # fmt: skip
        dml.validate(dml.GemmOperatorDesc(x, x, None, x, fused_activation=linear))
    tanh = dml.ActivationTanhOperatorDesc()
    with pytest.raises(dml.ValidationError, match=r"^DML_OPERATOR_RNN: ActivationDescs\[1\]\.Beta "
                       r"must be 0 here, got 2\.0$"):  # fmt: skip
        dml.validate(_rnn([tanh, linear]))
    monkeypatch.undo()
    # The support table at the target level, under the owner's name and the path.
    gelu = dml.ActivationGeluOperatorDesc()
    with pytest.raises(dml.ValidationError, match=r"^DML_OPERATOR_RNN: ActivationDescs\[1\]: "
                       r"DML_OPERATOR_ACTIVATION_GELU requires feature level 5_1"):  # fmt: skip
        dml.validate(_rnn([tanh, gelu]), "5_0")
    softmax = dml.ActivationSoftmax1OperatorDesc(axes=[9])
    with pytest.raises(dml.ValidationError, match=r"^DML_OPERATOR_GEMM: FusedActivation\.Axes\[0\] "
                       r"must be in \[0, 3\]"):  # fmt: skip
        dml.validate(dml.GemmOperatorDesc(x, x, None, x, fused_activation=softmax))
    copy.deepcopy(linear)  # descs stay plain values
