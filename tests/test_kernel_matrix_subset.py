"""The CPU subset of the GPU kernels' correctness matrices (tests/conftest.py), on stand-in items."""

import itertools
from types import SimpleNamespace

import pytest
from conftest import CPU_CASES, kernel_matrix_subset


def _items(name, cases, **marker):
    """One item per case: ``cases`` are (id, params) pairs of one test ``name``."""
    mark = SimpleNamespace(kwargs=marker)
    return [
        SimpleNamespace(
            path="tests/test_x.py",
            originalname=name,
            callspec=SimpleNamespace(id=case_id, params=params),
            get_closest_marker=lambda m, mark=mark: mark if m == "kernel_matrix" else None,
        )
        for case_id, params in cases
    ]


def test_cases_bringing_a_new_value_are_kept_up_to_the_cap():
    grid = [(f"{a}-{b}", {"a": a, "b": b}) for a, b in itertools.product(range(2), range(2))]
    keep, drop = kernel_matrix_subset(_items("t", grid))
    # in order: (0, 0), then (0, 1) brings b = 1 and (1, 0) a = 1; (1, 1) brings nothing new
    assert [i.callspec.id for i in keep] == ["0-0", "0-1", "1-0"]
    assert [i.callspec.id for i in drop] == ["1-1"]
    many = [(str(a), {"a": a}) for a in range(CPU_CASES + 2)]
    keep, _ = kernel_matrix_subset(_items("u", many))
    assert [i.callspec.id for i in keep] == [str(a) for a in range(CPU_CASES)]


def test_named_cases_are_kept_and_unmarked_items_untouched():
    cases = [(n, {"name": n}) for n in ("forward", "backward", "both")]
    plain = SimpleNamespace(get_closest_marker=lambda m: None)
    keep, drop = kernel_matrix_subset(_items("t", cases, cpu=["backward"]) + [plain])
    assert [getattr(i, "callspec", None) and i.callspec.id for i in keep] == ["backward", None]
    assert len(drop) == 2
    with pytest.raises(pytest.UsageError, match="names cases it does not have: \\['sideways'\\]"):
        kernel_matrix_subset(_items("t", cases, cpu=["sideways"]))
