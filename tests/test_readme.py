"""The README's Python examples run as printed and print what their comments claim."""

import contextlib
import io
import pathlib
import re

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.DOTALL)


def _squash(text: str) -> str:
    return " ".join(text.split())


def test_readme_has_set_up_commands():
    text = README.read_text()
    assert "python -m pip install -e '.[test]'" in text
    assert "python -m pytest" in text
    assert "dml-jax run" in text


def test_readme_python_blocks_run_and_print_what_they_claim():
    blocks = _python_blocks()
    assert blocks, "README has no python examples"
    namespace: dict = {}
    checked = 0
    for block in blocks:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block, str(README), "exec"), namespace)  # noqa: S102 (the README)
        printed = [_squash(line) for line in out.getvalue().splitlines()]
        # A comment that starts like printed output ('[', '(' or 'DML_') states what is printed;
        # for arrays, the text after '": "' is commentary.
        for claim in re.findall(r"#\s*((?:\[|\(|DML_).*)", block):
            expected = _squash(claim.split(": ")[0] if not claim.startswith("DML_") else claim)
            assert any(expected in line for line in printed), (expected, printed)
            checked += 1
    assert checked >= 6
