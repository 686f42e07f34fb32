"""docs/onnx.md's op table is the one the converter registry generates."""

from __future__ import annotations

import pathlib
import re

from dml_jax.onnx.converters import markdown_table

DOC = pathlib.Path(__file__).resolve().parent.parent / "docs" / "onnx.md"
TABLE = re.compile(r"(<!-- op table[^\n]*-->\n)(.*?)(\n<!-- end op table -->)", re.DOTALL)


def test_op_table_is_generated_from_the_converters():
    m = TABLE.search(DOC.read_text())
    assert m, "docs/onnx.md has no op table markers"
    assert m.group(2) == markdown_table(), (
        "docs/onnx.md's op table is stale: rewrite it with python -c 'import tests.test_onnx_docs "
        "as t; t.write()'"
    )


def write() -> None:
    """Rewrites the table in docs/onnx.md."""
    text = DOC.read_text()
    DOC.write_text(TABLE.sub(lambda m: m.group(1) + markdown_table() + m.group(3), text))
