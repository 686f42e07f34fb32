"""The README's Python examples, and those of docs/operators.md (the operator examples that moved
there from the README), run as printed and print what their comments claim."""

import contextlib
import io
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
# page -> how many printed claims its examples must check
CLAIMS = {"README.md": 6, "docs/operators.md": 6}


def _python_blocks(page: pathlib.Path = README) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(), re.DOTALL)


def _squash(text: str) -> str:
    return " ".join(text.split())


def test_readme_has_set_up_commands():
    text = README.read_text()
    assert "python -m pip install -e '.[test]'" in text
    assert "python -m pytest" in text
    assert "dml-jax run" in text


@pytest.mark.parametrize("page", sorted(CLAIMS))
def test_python_blocks_run_and_print_what_they_claim(page):
    blocks = _python_blocks(ROOT / page)
    assert blocks, f"{page} has no python examples"
    namespace: dict = {}
    checked = 0
    for block in blocks:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block, str(ROOT / page), "exec"), namespace)  # noqa: S102 (our docs)
        printed = [_squash(line) for line in out.getvalue().splitlines()]
        # A comment that starts like printed output ('[', '(' or 'DML_') states what is printed;
        # for arrays, the text after '": "' is commentary.
        for claim in re.findall(r"#\s*((?:\[|\(|DML_).*)", block):
            expected = _squash(claim.split(": ")[0] if not claim.startswith("DML_") else claim)
            assert any(expected in line for line in printed), (expected, printed)
            checked += 1
    assert checked >= CLAIMS[page], (page, checked)
