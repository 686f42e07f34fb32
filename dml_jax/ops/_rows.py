"""One table row per element-wise operator (and activation): the shared class factory.

Element-wise operators differ only in their members and their function, so each is a ``Row``:
its DML name, feature level, members (tensors in struct order, then attributes), the function on
arrays, its support table and example. ``define(row)`` builds the descriptor class (named by
API.md's rule), registers it, and returns it; the group module puts it in its namespace.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp

from ..errors import Validator
from ..fields import (
    SCALE_BIAS,
    OperatorDesc,
    attribute,
    dml_member_name,
    input_field,
    output_field,
)
from ..registry import Example, register
from ..tensor import ScaleBias, TensorDesc
from ._common import apply_scale_bias, scale_bias_rule

# Member layouts of the element-wise schemas.
UNARY = ("input_tensor",)
BINARY = ("a_tensor", "b_tensor")


@dataclasses.dataclass(frozen=True)
class Row:
    """An element-wise operator.

    Attributes:
        name: the operator type without ``DML_OPERATOR_``.
        level: the feature level that introduced it (``"1_0"``).
        summary: the formula, one line, for the docstring.
        fn: ``fn(desc, *arrays)``: the result (one array) from the inputs in struct order, after
            ScaleBias; for float inputs it runs in float32 when ``widen`` (FLOAT16 rounded once).
        support: the support table rows.
        example: ``(attributes, inputs)`` of the example: JSON members besides the tensors, and
            flat input values per input member.
        inputs: the input tensor members in struct order.
        scale_bias: the operator has an optional ScaleBias (applied to the first input).
        attrs: further attributes as (snake_case name, FieldType, default or REQUIRED marker).
        output_type: ``"same"`` (the inputs' type) or ``"own"`` (independent: comparisons...).
        same_type: the members that share one data type when not all do (POW: the input and
            the output; IF: A, B and the output).
        widen: FLOAT16 computed in float32.
        rules: extra ``rules(desc, v)``.
        example_types: the example's data type per tensor member (default FLOAT32).
        differentiable: ``None`` for the default (every tensor a float type), else a bool.
    """

    name: str
    level: str
    summary: str
    fn: Callable
    support: tuple
    example: tuple
    inputs: tuple = UNARY
    scale_bias: bool = False
    attrs: tuple = ()
    output_type: str = "same"
    same_type: tuple = ()
    widen: bool = True
    rules: Callable | None = None
    example_types: dict = dataclasses.field(default_factory=dict)
    differentiable: bool | None = None
    fusable: bool = False  # an activation DirectML can fuse (``FusedActivation``)
    in_place: bool | None = None  # DirectML's in-place support; None: the output has the
    # inputs' type (the schema's flag for every row but IF and IS_INFINITY)


# Every operator type defined from a Row (the element-wise and activation tables), with its row.
DEFINED: dict[str, Row] = {}


def class_name(name: str) -> str:
    """API.md's rule: ELEMENT_WISE_ATAN_YX -> ElementWiseAtanYxOperatorDesc (a word that starts
    with a digit keeps its case: VALUE_SCALE_2D -> ValueScale2DOperatorDesc)."""
    words = name.split("_")
    return "".join(w if w[0].isdigit() else w.capitalize() for w in words) + "OperatorDesc"


def define(row: Row, module: str) -> type:
    """Builds, registers and returns the descriptor class of ``row``."""
    operator_type = f"DML_OPERATOR_{row.name}"
    fields: list = [(n, TensorDesc, input_field()) for n in row.inputs]
    fields.append(("output_tensor", TensorDesc, output_field()))
    if row.scale_bias:
        fields.append(("scale_bias", ScaleBias | None, attribute(SCALE_BIAS, default=None)))
    for name, ftype, *default in row.attrs:
        extra = {"default": default[0]} if default else {}
        fields.append((name, Any, attribute(ftype, **extra)))
    tensors = ", ".join(dml_member_name(n) for n in row.inputs)
    doc = (
        f"DML_{row.name}_OPERATOR_DESC: {row.summary} (FL {row.level}).\n\n"
        "    Fields (DML members in struct order, snake_case):\n"
        f"        {tensors}, OutputTensor: equal sizes"
        + (", one data type" if row.output_type == "same" and not row.same_type else "")
        + ";\n            the output may alias an input where DirectML allows in-place execution.\n"
        + (
            "        scale_bias: optional ScaleBias applied to the first input (floats only).\n"
            if row.scale_bias
            else ""
        )
        + "".join(f"        {n}: a DML {t.dml}.\n" for n, t, *_ in row.attrs)
        + "    "
    )
    cls = dataclasses.make_dataclass(
        class_name(row.name),
        fields,
        bases=(OperatorDesc,),
        frozen=True,
        namespace={
            "operator_type": operator_type,
            "fusable": row.fusable,
            "activation": row.name.startswith("ACTIVATION_"),
            "__doc__": doc,
        },
    )
    cls.__module__ = module

    def validate(d: Any, v: Validator) -> None:
        _validate(row, d, v)

    def lower(d: Any, *arrays):
        return (_lower(row, d, arrays),)

    attrs_json, inputs = row.example
    DEFINED[operator_type] = row
    register(
        cls,
        infer=_infer,
        validate=validate,
        lower=lower,
        support=row.support,
        in_place=row.output_type == "same" if row.in_place is None else row.in_place,
        example=_example(row, operator_type, attrs_json, inputs),
        fusable=row.fusable,
        differentiable=None if row.differentiable is None else (lambda d: row.differentiable),
    )
    return cls


def _infer(d: Any) -> tuple:
    # Sizes and rank follow the first input; the data type is the output's own where the
    # operator's output type is independent (the support table checks it).
    first = d.input_slots()[0][1]
    return (first.like(data_type=d.output_tensor.data_type),)


def _validate(row: Row, d: Any, v: Validator) -> None:
    slots = d.input_slots()
    first = slots[0]
    for path, t in slots[1:] + d.output_slots():
        v.equal(f"{path}.DimensionCount", t.rank, first[1].rank, f"{first[0]}.DimensionCount")
        v.equal(f"{path}.Sizes", t.sizes, first[1].sizes, f"{first[0]}.Sizes")
    if row.same_type:
        typed = [(dml_member_name(n), getattr(d, n)) for n in row.same_type]
    else:
        typed = slots + (d.output_slots() if row.output_type == "same" else ())
    v.same("data_type", list(typed[1:]), typed[0])
    if row.scale_bias:
        scale_bias_rule(v, d.scale_bias, first[1])
    if row.rules is not None:
        row.rules(d, v)


def _lower(row: Row, d: Any, arrays: tuple):
    arrays = list(arrays)
    if row.widen and any(a.dtype == jnp.float16 for a in arrays):
        # FLOAT16: ScaleBias and the function in float32, one rounding at the end (XLA's GPU
        # backend would drop an intermediate float16 rounding anyway: excess precision).
        arrays = [a.astype(jnp.float32) if a.dtype == jnp.float16 else a for a in arrays]
    if row.scale_bias:
        arrays[0] = apply_scale_bias(arrays[0], d.scale_bias)
    return jnp.asarray(row.fn(d, *arrays)).astype(d.output_tensor.dtype)


def _example(row: Row, operator_type: str, attrs: dict, inputs: dict) -> Example:
    desc = {}
    sizes = [len(next(iter(inputs.values())))]
    for name in row.inputs:
        member = dml_member_name(name)
        desc[member] = {"DataType": row.example_types.get(member, "FLOAT32"), "Sizes": sizes}
    desc["OutputTensor"] = {
        "DataType": row.example_types.get("OutputTensor", "FLOAT32"),
        "Sizes": sizes,
    }
    desc.update(attrs)
    return Example({"type": operator_type, "desc": desc}, inputs, row.summary)
