"""What every part of loading a model shares: ``ModelError``, JSON paths, and the load context.

The context holds the model file's name (for errors), the memory budget and the folder files
may be read from and written to, and checks the JSON shapes every parser needs (object, string,
unsigned integer, required member).
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from ..errors import brief


class ModelError(Exception):
    """A problem in a model file or its data: names the file and the JSON path.

    Attributes:
        file: the model file (as given on the command line).
        path: the JSON path of the offending member, e.g. ``commands[2].bindings.InputTensor``.
        message: what is wrong.
    """

    def __init__(self, file: str, path: str, message: str):
        self.file = file
        self.path = path
        self.message = message
        where = f"{file}: {path}: " if path else f"{file}: "
        super().__init__(where + message)


_IDENTIFIER = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$]*$")


def member(path: str, key: str | int) -> str:
    """``resources`` + ``A`` -> ``resources.A``; indices and odd names use brackets."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    if not _IDENTIFIER.match(key):
        key_text = json.dumps(key)
        return f"{path}[{key_text}]"
    return f"{path}.{key}" if path else key


class LoadContext:
    """The model file name, for errors, and the limits of this load (see ``load_model``)."""

    def __init__(
        self,
        file: str,
        max_memory: int | None = None,
        allow_outside_paths: bool = False,
        model_dir: str = "",
    ):
        self.file = file
        self.max_memory = max_memory
        self.allocated = 0
        self.allow_outside_paths = allow_outside_paths
        self.model_dir = model_dir

    def reserve(self, nbytes: int, path: str, what: str = "resources") -> None:
        """Counts ``nbytes`` against the memory budget before anything that large is allocated."""
        self.allocated += nbytes
        if self.max_memory is not None and self.allocated > self.max_memory:
            raise self.fail(
                path,
                f"the {what} need {self.allocated} bytes, more than the "
                f"memory budget of {self.max_memory} bytes (--max-memory)",
            )

    def inside_model_dir(self, file: str, path: str, what: str) -> str:
        """Refuses a path that resolves (symbolic links included) outside the model's folder."""
        if self.allow_outside_paths:
            return file
        real, root = os.path.realpath(file), os.path.realpath(self.model_dir or ".")
        if os.path.commonpath([real, root]) != root:
            raise self.fail(
                path,
                f"{what} '{file}' is outside the model's folder '{root}' "
                "(allowed with --allow-outside-paths)",
            )
        return file

    def fail(self, path: str, message: str) -> ModelError:
        return ModelError(self.file, path, message)

    def require(self, obj: dict, key: str, path: str) -> Any:
        if key not in obj:
            raise self.fail(path, f"missing required member '{key}'")
        return obj[key]

    def object(self, value: Any, path: str) -> dict:
        if not isinstance(value, dict):
            raise self.fail(path, f"must be a JSON object, got {json_kind(value)}")
        return value

    def string(self, value: Any, path: str) -> str:
        if not isinstance(value, str):
            raise self.fail(path, f"must be a string, got {json_kind(value)}")
        return value

    def uint(self, value: Any, path: str, minimum: int = 0) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(path, f"must be an integer, got {brief(value)}")
        if value < minimum:
            raise self.fail(path, f"must be >= {minimum}, got {value}")
        return value


def json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    return {dict: "an object", list: "an array", str: "a string"}.get(
        type(value), f"the number {value}"
    )


def cannot_allocate(nbytes: int, error: BaseException) -> str:
    """The one-line message for memory that ran out (NumPy's or XLA's reason, first line)."""
    reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return f"cannot allocate {nbytes} bytes: {reason}"
