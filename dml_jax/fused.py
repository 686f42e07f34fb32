"""FusedActivation: one mechanism for every operator that has the field; nested operator descs
(FusedActivation, the recurrent operators' ActivationDescs) are checked by ``validate_nested``.

DirectML lets GEMM, CONVOLUTION, ELEMENT_WISE_ADD1, the batch and mean-variance normalizations
apply an activation to their result without a round trip to memory. In dml_jax the activation's
own lowering is applied to the operator's result inside the same traced function, so XLA fuses
it into the operator's kernel (no separate pass over the output).

Rules: the nested desc must be an activation registered as fusable; the output must be FLOAT32 or
FLOAT16; the activation's own rules and support table hold for the output tensor's type and
rank. A fused activation's tensor members are ignored (DirectML requires them null); dml_jax fills
them with the output desc when it validates and lowers the activation.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

from . import support
from .errors import ValidationError, Validator
from .fields import ATTRIBUTE, INPUT, OPERATOR_DESC, OUTPUT, OperatorDesc, dml_member_name
from .registry import lookup, operators
from .tensor import TensorDesc


def fusable_names() -> list[str]:
    """The operator types that may be fused, sorted."""
    return sorted(spec.name for spec in operators() if spec.fusable)


def filled(activation: OperatorDesc, out: TensorDesc) -> OperatorDesc:
    """The activation with every tensor member set to ``out`` (a standalone description)."""
    changes = {
        f.name: out
        for f in activation.declared(INPUT) + activation.declared(OUTPUT)
        if not f.metadata["array"]
    }
    return dataclasses.replace(activation, **changes)


def validate_fused(
    v: Validator,
    activation: Any,
    out: TensorDesc,
    path: str = "FusedActivation",
    also: tuple[str, ...] = (),
    also_from: Any = None,
):
    """Checks a ``FusedActivation`` member (``None`` passes) against ``out``, the output desc.

    ``also``: operator types this owner fuses besides the fusable activations, from feature
    level ``also_from`` (GEMM fuses SOFTMAX and SOFTMAX1 from 6_1)."""
    if activation is None:
        return
    name = activation.operator_type
    if name in also and not lookup(name).fusable:
        v.check(
            path,
            v.level is None or also_from is None or v.level >= also_from,
            f"{name} needs feature level {getattr(also_from, 'label', '')} "
            f"or later here, got {getattr(v.level, 'label', v.level)}",
        )
        allowed = None
    else:
        allowed = ("an activation DirectML can fuse", fusable_names())
    v.check(
        path,
        out.data_type.is_float,
        f"may be used only when the output data type is FLOAT32 or FLOAT16, got "
        f"{out.data_type.name}",
    )
    validate_nested(v, path, activation, out, allowed)


def validate_nested(
    v: Validator,
    path: str,
    nested: Any,
    target: TensorDesc,
    allowed: tuple[str, list[str]] | None,
    level: Any = None,
) -> None:
    """Checks one nested operator desc (``FusedActivation``, ``ActivationDescs[i]``) as the
    activation it must be: every error names its whole path in the owner (``FusedActivation.Alpha``,
    ``ActivationDescs[1].Beta``), never a member of the nested desc as if it were the owner's.

    ``target``: the tensor the activation applies to (its tensors are filled with it).
    ``allowed``: (what, operator types) it must be one of, or None (the caller checked).
    ``level``: a feature level whose support table the activation must meet, or None.
    """
    name = nested.operator_type
    if allowed is not None:
        check_kind(v, path, nested, allowed)
    spec = lookup(name)
    standalone = filled(nested, target)
    with nested_errors(v, path, name):
        spec.validate(standalone, v.nested(path))
        if level is not None:
            support.check_desc(spec, standalone, level)


def check_kind(v: Validator, path: str, nested: Any, allowed: tuple[str, list[str]]) -> None:
    """A nested desc is an activation, and one of ``allowed`` (what, operator types)."""
    what, names = allowed
    name = nested.operator_type
    if not type(nested).activation:
        v.fail(path, f"is not an activation: got {name}; it must be {what} ({', '.join(names)})")
    v.check(path, name in names, f"must be {what} ({', '.join(names)}), got {name}")


@contextlib.contextmanager
def nested_errors(v: Validator, path: str, nested_type: str) -> Iterator[None]:
    """Re-raises a ``ValidationError`` that a nested desc's own rules raise under its own
    operator type (``DML_OPERATOR_ACTIVATION_ELU: Alpha ...``) as the owner's, at ``path``
    (``DML_OPERATOR_GEMM: FusedActivation.Alpha ...``); errors already the owner's pass."""
    try:
        yield
    except ValidationError as e:
        message = str(e)
        where = f"{v.path_prefix}{path}"
        if message.startswith(f"{v.prefix}: "):
            raise
        if message.startswith(f"{nested_type}: "):
            rest = message[len(nested_type) + 2 :]
            raise ValidationError(f"{v.prefix}: {where}.{rest}") from None
        raise ValidationError(f"{v.prefix}: {where}: {message}") from None


def check_support(desc: OperatorDesc, level: Any) -> None:
    """Each present FusedActivation's support table, for the owner's first output tensor.

    Run after the owner's own support check, so an operator too new for ``level`` says so first.
    """
    for f in desc.declared(ATTRIBUTE):
        activation = getattr(desc, f.name)
        if f.metadata["type"] is not OPERATOR_DESC or activation is None:
            continue
        v = Validator(desc.operator_type, level)
        path = dml_member_name(f.name)
        with nested_errors(v, path, activation.operator_type):
            spec = lookup(activation.operator_type)
            support.check_desc(spec, filled(activation, desc.output_slots()[0][1]), level)


def apply_fused(activation: Any, y, out: TensorDesc):
    """``y`` through the fused activation (``None``: ``y`` itself), traced in the same program."""
    if activation is None:
        return y
    (result,) = lookup(activation.operator_type).lower(filled(activation, out), y)
    return result
