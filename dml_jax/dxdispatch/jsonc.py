"""DxDispatch's JSON with comments (``//``, ``/* */``) and trailing commas."""

from __future__ import annotations

import json
from typing import Any

from .context import ModelError


def _strip_json_extensions(text: str) -> str:
    """Blanks out ``//`` and ``/* */`` comments and trailing commas, keeping every position.

    Replacing with spaces (and keeping newlines) means ``json`` reports the line and column of
    the original text.
    """
    out = list(text)
    i, n = 0, len(text)
    last_comma = -1  # index of a comma that may turn out to be trailing
    while i < n:
        c = text[i]
        if c == '"':
            last_comma = -1
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
            continue
        if c == "/" and i + 1 < n and text[i + 1] == "/":
            while i < n and text[i] != "\n":
                out[i] = " "
                i += 1
            continue
        if c == "/" and i + 1 < n and text[i + 1] == "*":
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            for k in range(i, end):
                if out[k] != "\n":
                    out[k] = " "
            i = end
            continue
        if c == ",":
            last_comma = i
        elif c in "}]":
            if last_comma >= 0:
                out[last_comma] = " "
            last_comma = -1
        elif not c.isspace():
            last_comma = -1
        i += 1
    return "".join(out)


def parse_json_text(text: str, file: str) -> Any:
    """Parses DxDispatch-flavoured JSON (comments and trailing commas allowed)."""
    try:
        return json.loads(_strip_json_extensions(text))
    except json.JSONDecodeError as e:
        raise ModelError(
            file, "", f"invalid JSON at line {e.lineno}, column {e.colno}: {e.msg}"
        ) from None
    except RecursionError:
        raise ModelError(file, "", "invalid JSON: nested too deeply") from None
    except ValueError as e:  # e.g. an integer literal beyond Python's digit limit
        raise ModelError(file, "", f"invalid JSON: {e}") from None
