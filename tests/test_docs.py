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


ROOT = DOCS.parent
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces as '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: pathlib.Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
    return {_anchor(h) for h in re.findall(r"^#+ (.*)$", text, re.MULTILINE)}


@pytest.mark.parametrize(
    "page", ["README.md"] + [f"docs/{p.name}" for p in sorted(DOCS.glob("*.md"))]
)
def test_relative_links_resolve(page):
    """Every relative link of the README and the docs names a file of the tree, and every
    '#anchor' into a Markdown page names one of its headings."""
    source = ROOT / page
    text = re.sub(r"```.*?```|`[^`\n]*`", "", source.read_text(), flags=re.DOTALL)
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        resolved = (source.parent / path).resolve() if path else source
        assert resolved.exists(), f"{page}: link to {target} names no file"
        if anchor and resolved.suffix == ".md":
            assert anchor in _anchors(resolved), f"{page}: {target}: no such heading"


def test_the_docs_index_lists_every_page():
    index = (DOCS / "README.md").read_text()
    missing = [p.name for p in DOCS.glob("*.md") if p.name != "README.md" and p.name not in index]
    assert not missing, f"docs/README.md does not list {missing}"
