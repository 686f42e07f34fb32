"""The progress line of long ``dml-jax run -i/-t`` loops: on a terminal only, erased before the
dispatch line, so the lines DxDispatch prints stay exactly as they are."""

from __future__ import annotations

import io
import sys

import pytest

from dml_jax import cli
from dml_jax.cli import DEFAULT_MODEL
from dml_jax.dxdispatch import run as run_module


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def terminal(monkeypatch):
    """A fake terminal; each test puts it in place itself (pytest's capture resets sys.stdout
    between set-up and the test), with the progress line shown from the first sample on."""
    out = FakeTerminal()
    monkeypatch.setattr(run_module, "PROGRESS_AFTER_S", 0.0)
    monkeypatch.setattr(run_module, "PROGRESS_EVERY_S", 0.0)
    return out


def _final_lines(text: str) -> list[str]:
    """What a terminal shows: each line after its last carriage return, erase codes removed."""
    return [line.split("\r")[-1].replace("\x1b[K", "") for line in text.split("\n")]


def test_iterations_show_progress_then_the_dispatch_line(terminal, monkeypatch):
    monkeypatch.setattr(sys, "stdout", terminal)
    assert cli.main(["run", str(DEFAULT_MODEL), "-i", "4"]) == 0
    text = terminal.getvalue()
    for done in (1, 2, 3):  # after the last sample the loop ends: the report replaces it
        assert "\rDispatch '" in text and f": {done} of 4 iterations\x1b[K" in text
    assert "\r\x1b[KDispatch '" in text  # erased before the real line
    shown = _final_lines(text)
    dispatch = [line for line in shown if line.startswith("Dispatch '")]
    assert len(dispatch) == 3  # the bundled model's three dispatch commands
    assert all(": 4 iterations, " in line and "ms median (CPU)" in line for line in dispatch)


def test_time_limit_progress_counts_seconds(terminal, monkeypatch):
    monkeypatch.setattr(sys, "stdout", terminal)
    assert cli.main(["run", str(DEFAULT_MODEL), "-t", "200"]) == 0
    assert " iterations, 0.0 of 0.2 s\x1b[K" in terminal.getvalue()


def test_one_iteration_and_piped_output_have_no_progress(terminal, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdout", terminal)
    assert cli.main(["run", str(DEFAULT_MODEL)]) == 0
    assert "\r" not in terminal.getvalue() and "\x1b" not in terminal.getvalue()
    monkeypatch.undo()
    assert cli.main(["run", str(DEFAULT_MODEL), "-i", "4"]) == 0
    out = capsys.readouterr().out
    assert "\r" not in out and "\x1b" not in out and ": 4 iterations, " in out
