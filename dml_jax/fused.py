"""FusedActivation: one mechanism for every operator that has the field.

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

import dataclasses
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
    spec = lookup(activation.operator_type)
    if activation.operator_type in also and not spec.fusable:
        v.check(
            path,
            v.level is None or also_from is None or v.level >= also_from,
            f"{activation.operator_type} needs feature level {getattr(also_from, 'label', '')} "
            f"or later here, got {getattr(v.level, 'label', v.level)}",
        )
    else:
        v.check(
            path,
            spec.fusable,
            f"must be an activation DirectML can fuse ({', '.join(fusable_names())}), got "
            f"{activation.operator_type}",
        )
    v.check(
        path,
        out.data_type.is_float,
        f"may be used only when the output data type is FLOAT32 or FLOAT16, got "
        f"{out.data_type.name}",
    )
    spec.validate(filled(activation, out), v.nested(path))


def check_support(desc: OperatorDesc, level: Any) -> None:
    """Each present FusedActivation's support table, for the owner's first output tensor.

    Run after the owner's own support check, so an operator too new for ``level`` says so first.
    """
    for f in desc.declared(ATTRIBUTE):
        activation = getattr(desc, f.name)
        if f.metadata["type"] is not OPERATOR_DESC or activation is None:
            continue
        spec = lookup(activation.operator_type)
        standalone = filled(activation, desc.output_slots()[0][1])
        try:
            support.check_desc(spec, standalone, level)
        except ValidationError as e:
            raise ValidationError(f"{desc.operator_type}: {dml_member_name(f.name)}: {e}") from None


def apply_fused(activation: Any, y, out: TensorDesc):
    """``y`` through the fused activation (``None``: ``y`` itself), traced in the same program."""
    if activation is None:
        return y
    (result,) = lookup(activation.operator_type).lower(filled(activation, out), y)
    return result
