"""The one exception dml_jax raises for bad descriptions, and the field-path checker."""

from __future__ import annotations

import enum
import reprlib
from typing import Any, NoReturn

import numpy as np


class ValidationError(ValueError):
    """A descriptor, tensor description or input that DirectML's rules reject.

    The message starts with the operator type (or ``TensorDesc``/``ScaleBias``), then the path of
    the offending field in DML member names, the rule, and the expected and received values.
    """


class Validator:
    """Raises ``ValidationError`` at the first failed rule, prefixing the operator type.

    ``Validator("DML_OPERATOR_TILE").check("Repeats[1]", r > 0, "must be > 0, got 0")`` raises
    ``DML_OPERATOR_TILE: Repeats[1] must be > 0, got 0``.
    """

    def __init__(self, prefix: str, level: Any = None):
        self.prefix = prefix
        self.level = level  # the target FeatureLevel, for rules that depend on it

    def fail(self, path: str, message: str) -> NoReturn:
        path = f"{self.path_prefix}{path}" if path else self.path_prefix.rstrip(".")
        where = f"{path} " if path else ""
        raise ValidationError(f"{self.prefix}: {where}{message}")

    path_prefix = ""

    def nested(self, path: str) -> Validator:
        """A validator for a nested desc: its paths start with ``path.`` (``FusedActivation.``)."""
        sub = Validator(self.prefix, self.level)
        sub.path_prefix = f"{self.path_prefix}{path}."
        return sub

    def check(self, path: str, condition: bool, message: str) -> None:
        if not condition:
            self.fail(path, message)

    def equal(self, path: str, got: Any, expected: Any, what: str = "") -> None:
        """Fails with ``<path> must equal <what> (<expected>), got <got>`` unless equal."""
        if got != expected:
            label = f"{what} ({show(expected)})" if what else show(expected)
            self.fail(path, f"must equal {label}, got {show(got)}")

    def count(self, path: str, count: int | None, items: tuple, of: str) -> None:
        """A DML count member: when given it must equal the array's length."""
        if count is not None and count != len(items):
            self.fail(path, f"must equal the length of {of} ({len(items)}), got {count}")

    def nonempty(self, path: str, items: tuple, count_name: str) -> None:
        self.check(path, len(items) > 0, f"must not be empty ({count_name} must be > 0)")

    def axis(self, path: str, axis: int, rank: int, tensor: str = "InputTensor") -> None:
        """An axis in [0, rank - 1]."""
        self.check(
            path,
            0 <= axis < rank,
            f"must be in [0, {rank - 1}] ({tensor}.DimensionCount - 1), got {axis}",
        )

    def axes(self, path: str, axes: tuple, rank: int, tensor: str = "InputTensor") -> None:
        """A non-empty set of unique axes, each in range."""
        self.check(path, len(axes) > 0, "must not be empty (AxisCount must be > 0)")
        seen = set()
        for i, axis in enumerate(axes):
            self.axis(f"{path}[{i}]", axis, rank, tensor)
            self.check(
                f"{path}[{i}]", axis not in seen, f"repeats axis {axis}; axes must be unique"
            )
            seen.add(axis)

    def same(self, attribute: str, pairs: list, reference: tuple) -> None:
        """Every (path, tensor) in ``pairs`` has the reference tensor's ``attribute``.

        ``attribute`` is ``"data_type"``, ``"rank"`` or ``"sizes"``.
        """
        ref_path, ref = reference
        member = {"data_type": "DataType", "rank": "DimensionCount", "sizes": "Sizes"}[attribute]
        expected = getattr(ref, attribute)
        for path, tensor in pairs:
            self.equal(
                f"{path}.{member}", getattr(tensor, attribute), expected, f"{ref_path}.{member}"
            )

    def outputs_match(self, outputs: tuple, expected: tuple) -> None:
        """Each output (path, TensorDesc) has the inferred data type, rank and sizes."""
        for (path, got), want in zip(outputs, expected):
            self.equal(f"{path}.DataType", got.data_type, want.data_type)
            self.equal(f"{path}.DimensionCount", got.rank, want.rank)
            for i, (g, w) in enumerate(zip(got.sizes, want.sizes)):
                self.equal(f"{path}.Sizes[{i}]", g, w)


def show(value: Any) -> str:
    """Formats a value for an error message the way DML documents write it (``{1, 2}``, ``SUM``)."""
    if isinstance(value, tuple):
        return "{" + ", ".join(show(v) for v in value) + "}"
    if isinstance(value, enum.Enum):
        return str(value.name)
    return repr(value) if isinstance(value, str) else str(value)


UINT32_MAX = 2**32 - 1
UINT64_MAX = 2**64 - 1


def as_int(value: Any, where: str, *, minimum: int = 0, maximum: int = UINT32_MAX) -> int:
    """Converts a DML UINT field: a Python or NumPy integer (not a bool) in [minimum, maximum].

    ``where`` is the full location for the message, e.g. ``"DML_OPERATOR_TILE: Repeats[1]"``.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValidationError(f"{where} must be an integer, got {brief(value)}")
    value = int(value)
    if value < minimum:
        raise ValidationError(f"{where} must be >= {minimum}, got {brief(value)}")
    if value > maximum:
        raise ValidationError(f"{where} must be <= {maximum}, got {brief(value)}")
    return value


def as_int_tuple(value: Any, where: str, **limits: int) -> tuple[int, ...]:
    """Converts a sequence (list, tuple or 1-D array) of DML UINTs to a tuple of ints."""
    if isinstance(value, np.ndarray) and value.ndim == 1:
        value = value.tolist()
    if not isinstance(value, (list, tuple)):
        raise ValidationError(f"{where} must be a sequence of integers, got {brief(value)}")
    return tuple(as_int(v, f"{where}[{i}]", **limits) for i, v in enumerate(value))


def as_float(value: Any, where: str) -> float:
    """Converts a DML FLOAT field: a real number (not a bool or a string)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(
        value, (int, float, np.integer, np.floating)
    ):
        raise ValidationError(f"{where} must be a number, got {brief(value)}")
    return to_python_float(value, where)


def to_python_float(value: Any, where: str) -> float:
    """float(value), with integers beyond a double's range rejected instead of OverflowError."""
    try:
        return float(value)
    except OverflowError:
        raise ValidationError(
            f"{where} must be a number within a double's range, got {brief(value)}"
        ) from None


class _Brief(reprlib.Repr):
    """reprlib with a cap on integers too: repr() of a huge int is slow, or raises ValueError
    beyond sys.get_int_max_str_digits()."""

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 128:
            return f"<{'-' if x < 0 else ''}{x.bit_length()}-bit integer>"
        return repr(x)


_BRIEF = _Brief()
_BRIEF.maxstring = _BRIEF.maxother = 60
_BRIEF.maxlist = _BRIEF.maxtuple = _BRIEF.maxdict = _BRIEF.maxset = 8


def brief(value: Any) -> str:
    """A short repr for error messages: hostile input (a huge list, a 10**5000 integer) must not
    turn into a huge message or a crash while the message is being built."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return _BRIEF.repr_int(int(value), 0)
    try:
        return _BRIEF.repr(value)
    except Exception:  # noqa: BLE001 - a failing __repr__ must still give a message
        return f"<{type(value).__name__}>"
