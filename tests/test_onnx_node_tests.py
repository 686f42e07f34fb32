"""ONNX's backend node tests through ``InferenceSession``, for every case whose op types have a
converter or an ONNX function body (``onnx_node_suite.selected``): the session's outputs must
equal ONNX's expected ones (within the case's tolerance for floats). The cases that cannot pass
are listed, each with its reason, in ``tests/onnx_exclusions/`` and are expected to fail: one that
starts passing fails the test, so the list stays true."""

from __future__ import annotations

import pytest

pytest.importorskip("onnx")

import onnx_node_suite as suite

import dml_jax as dml

CASES = suite.selected()
EXCLUDED = suite.exclusions()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_onnx_node(case):
    reason = EXCLUDED.get(case.name)
    if reason is None:
        suite.check_case(case)
        return
    try:
        suite.check_case(case)
    except (AssertionError, dml.ValidationError):
        return
    pytest.fail(f"excluded ({reason}) but passes: take it off the exclusion list")


def test_exclusions_name_selected_cases():
    names = {c.name for c in suite.all_cases()}
    unknown = sorted(set(EXCLUDED) - names)
    assert not unknown, f"exclusions name no ONNX node test: {unknown}"
