"""The Python examples in docs/ run as printed (each page's blocks in order, one namespace)."""

from __future__ import annotations

import pathlib
import re

import pytest

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs"
PAGES = sorted(p.name for p in DOCS.glob("*.md") if "```python" in p.read_text())


def python_blocks(page: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(), re.DOTALL)


@pytest.mark.parametrize("page", PAGES)
def test_doc_python_blocks_run(page, capsys):
    blocks = python_blocks(page)
    assert blocks, f"{page} has no python examples"
    namespace: dict = {"__name__": f"docs/{page}"}
    for block in blocks:
        exec(compile(block, str(DOCS / page), "exec"), namespace)  # noqa: S102 (our docs)


def test_the_pages_with_examples_are_found():
    assert {"graphs.md", "buffers.md"} <= set(PAGES)
