"""The generated parts of docs/fast-paths.md and docs/operators.md are current: they equal what
the fast-path registry and the operator registry generate now."""

from __future__ import annotations

import pathlib
import re

import pytest

from dml_jax.catalog import fast_paths_markdown, operator_groups_markdown

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs"
GENERATED = {
    "fast-paths.md": ("fast path table", fast_paths_markdown),
    "operators.md": ("operator table", operator_groups_markdown),
}


def _pattern(marker: str) -> re.Pattern:
    return re.compile(rf"(<!-- {marker}[^\n]*-->\n)(.*?)(\n<!-- end {marker} -->)", re.DOTALL)


@pytest.mark.parametrize("page", sorted(GENERATED))
def test_generated_part_is_current(page):
    marker, generate = GENERATED[page]
    m = _pattern(marker).search((DOCS / page).read_text())
    assert m, f"docs/{page} has no '{marker}' markers"
    assert m.group(2) == generate(), (
        f"docs/{page}'s {marker} is stale: rewrite it with python -c 'import "
        "tests.test_generated_docs as t; t.write()'"
    )


def write() -> None:
    """Rewrites the generated parts of the pages."""
    for page, (marker, generate) in GENERATED.items():
        path = DOCS / page
        text = path.read_text()
        table = generate()
        path.write_text(_pattern(marker).sub(lambda m, t=table: m.group(1) + t + m.group(3), text))
