"""``strategies.check_jit`` compares eager with jit on the first case of each operator type a
test node draws, and only there (its docstring says why)."""

import numpy as np
import pytest
import strategies as S

import dml_jax as dml

T = dml.TensorDesc


def _case(op_type: str, values) -> S.Case:
    t = T("FLOAT32", (1, 1, 1, 3))
    desc = getattr(dml, op_type)(t, t)
    return S.Case(desc, (np.asarray(values, np.float32).reshape(1, 1, 1, 3),))


def test_first_case_of_each_type_is_compared_once(monkeypatch):
    calls = []
    original = dml.compile_operator

    def counting(desc, *a, **k):
        calls.append(desc.operator_type)
        return original(desc, *a, **k)

    monkeypatch.setattr(dml, "compile_operator", counting)
    S.check_jit(_case("ActivationReluOperatorDesc", [-1, 0, 2]))
    S.check_jit(_case("ActivationReluOperatorDesc", [3, -4, 5]))  # the same type: skipped
    S.check_jit(_case("ActivationSigmoidOperatorDesc", [-1, 0, 2]))
    assert calls == ["DML_OPERATOR_ACTIVATION_RELU", "DML_OPERATOR_ACTIVATION_SIGMOID"]


def test_a_disagreement_on_the_first_case_fails(monkeypatch):
    """A lowering that computes something else on concrete arrays than under tracing."""
    import types

    import jax

    def fn(x):
        return x + (1.0 if isinstance(x, jax.core.Tracer) else 0.0)

    monkeypatch.setattr(dml, "compile_operator", lambda desc, *a, **k: types.SimpleNamespace(fn=fn))
    with pytest.raises(AssertionError):
        S.check_jit(_case("ActivationReluOperatorDesc", [-1, 0, 2]))
