"""``dml-jax run`` after its arguments are parsed: usage checks, the run, errors as exit codes.

Exit codes: 0 success, 1 an error in the model or its data (one line naming the file and the
JSON path; ``debug`` adds the traceback), 2 a usage error (model file, feature level, device).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import traceback
from typing import Any

from ..enums import FeatureLevel
from ..errors import ValidationError
from .context import ModelError
from .onnx_dispatch import is_onnx_file, onnx_explanation, onnx_model_text
from .run import RunOptions, run_model, select_device


def run_command(
    file: str,
    options: RunOptions,
    *,
    bundled: bool = False,
    device: str | None = None,
    feature_level: Any = None,
    debug: bool = False,
    onnx_inputs: dict[str, str] | None = None,
    explain: bool = False,
) -> int:
    """Runs a model file for the command line; prints its output and errors, returns the exit
    code.

    Args:
        file: the model file.
        options: timing and limit options.
        bundled: ``file`` is the bundled example, run because no model was given (said first).
        device: ``--device`` (see ``select_device``).
        feature_level: ``--feature_level`` (a DML feature level name such as ``5_0``).
        debug: print the traceback of a model error.
        onnx_inputs: for an ``.onnx`` file, ``.npy`` files by input name (others random).
        explain: for an ``.onnx`` file, first print how each ONNX node was imported (the DML
            operators it became, ``jax`` for JAX lowerings, folded, view, function body).
    """
    if bundled:
        print(f"No model given: running the bundled example '{file}'")
    elif os.path.isdir(file):
        print(f"error: {file}: is a directory, not a model file", file=sys.stderr)
        return 2
    elif not os.path.isfile(file):
        print(f"error: {file}: no such model file", file=sys.stderr)
        return 2
    if feature_level is not None:
        try:
            FeatureLevel.parse(feature_level, "--feature_level")
        except ValidationError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    try:
        select_device(device)
    except ValueError as e:
        print(f"error: --device: {e}", file=sys.stderr)
        return 2
    if options.progress is None and _is_terminal(sys.stdout):
        options = dataclasses.replace(options, progress=_terminal_progress)
    try:
        text = None
        if is_onnx_file(file):
            budget = options.max_memory
            if budget is None:
                from .run import default_memory_budget

                budget = default_memory_budget(select_device(device))
            text = onnx_model_text(file, onnx_inputs, max_memory=budget or None)
            if explain:
                _print(onnx_explanation(file, onnx_inputs))
        elif onnx_inputs or explain:
            raise ValidationError("--input and --explain apply to .onnx models only")
        run_model(
            file,
            device=device,
            options=options,
            feature_level=feature_level,
            out=_print,
            text=text,
        )
    except ImportError as e:  # an .onnx file without the onnx package
        print(f"error: {file}: {e}", file=sys.stderr)
        return 1
    except (ModelError, ValidationError) as e:
        if debug:
            traceback.print_exc()
        message = str(e) if isinstance(e, ModelError) else f"{file}: {e}"
        print(f"error: {message}", file=sys.stderr)
        return 1
    return 0


def _print(line: str) -> None:
    print(line, flush=True)


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def _terminal_progress(text: str) -> None:
    """Redraws one status line in place (carriage return, erase to the end of the line); an
    empty text erases it, so the next printed line takes its place."""
    sys.stdout.write("\r" + text + "\x1b[K")
    sys.stdout.flush()
