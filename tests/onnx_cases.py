"""Helpers shared by the ONNX node-test modules (test_onnx_*.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest


def passing_op_types(cases: Sequence[tuple], check: Callable[[int], None]) -> set[str]:
    """The ONNX op types with at least one case that ``check(index)`` passes (not skipped).

    ``cases`` holds ``(name, node, inputs, outputs)`` tuples; each op type stops at its first
    passing case."""
    passed: set[str] = set()
    for index, (_, node, *_) in enumerate(cases):
        if node.op_type in passed:
            continue
        try:
            check(index)
        except (pytest.skip.Exception, AssertionError):
            continue
        passed.add(node.op_type)
    return passed
