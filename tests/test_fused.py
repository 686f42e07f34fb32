"""FusedActivation rules that no registered pair reaches yet: a fused activation newer than its
owner's feature level, and an activation's own rule failing under the owner's field path."""

from __future__ import annotations

import dataclasses

import pytest

import dml_jax as dml
from dml_jax import registry, support
from dml_jax.enums import FeatureLevel as L

T = dml.TensorDesc("FLOAT32", [1, 1, 2, 3])


def _patched_relu(monkeypatch, **changes):
    """ACTIVATION_RELU's entry with other support rows or validation, for one test."""
    spec = registry.lookup("DML_OPERATOR_ACTIVATION_RELU")
    spec = dataclasses.replace(spec, **changes)
    monkeypatch.setitem(registry._REGISTRY, spec.name, spec)


def test_fused_activation_newer_than_the_level_names_the_owner(monkeypatch):
    _patched_relu(monkeypatch, support=support.rows((L.FL_5_0, support.DIMS1_8, support.F2)))
    desc = dml.ElementWiseAdd1OperatorDesc(T, T, T, dml.ActivationReluOperatorDesc())
    dml.validate(desc, "5_0")
    with pytest.raises(
        dml.ValidationError,
        match=r"^DML_OPERATOR_ELEMENT_WISE_ADD1: FusedActivation: DML_OPERATOR_ACTIVATION_RELU "
        r"requires feature level 5_0 or later; the target is 3_0",
    ):
        dml.validate(desc, "3_0")


def test_fused_activation_rules_run_under_the_owner_path(monkeypatch):
    def rule(d, v):
        v.check("Alpha", False, "is rejected by this test")

    _patched_relu(monkeypatch, validate=rule)
    desc = dml.ElementWiseAdd1OperatorDesc(T, T, T, dml.ActivationReluOperatorDesc())
    with pytest.raises(
        dml.ValidationError,
        match=r"^DML_OPERATOR_ELEMENT_WISE_ADD1: FusedActivation\.Alpha is rejected by this test",
    ):
        dml.validate(desc)
