"""Each node checked against its op's ONNX schema before anything reads it: the input and
output counts, required inputs present, attribute names and types; a contrib op
(``com.microsoft``'s) against onnxruntime's schema where onnxruntime is installed: its input
count, required inputs and the types of the attributes it declares. A converter then never
unpacks a list of the wrong length or reads an attribute of the wrong type."""

from __future__ import annotations

import functools
from typing import Any

from ..errors import ValidationError
from .elements import ONNX

_ATTRIBUTE_TYPES = {
    1: "float",
    2: "int",
    3: "string",
    4: "tensor",
    5: "graph",
    6: "floats",
    7: "ints",
    8: "strings",
    9: "tensors",
    10: "graphs",
    11: "sparse_tensor",
    12: "sparse_tensors",
    13: "type_proto",
    14: "type_protos",
}


def get(op_type: str, domain: str, opset: int) -> Any:
    """The schema of ``op_type`` in force at ``opset`` (None if the ``onnx`` package has
    none)."""
    import onnx.defs

    try:
        return onnx.defs.get_schema(op_type, opset, domain)
    except (onnx.defs.SchemaError, TypeError, OverflowError, ValueError):
        return None


@functools.cache
def _contrib_schemas() -> dict[tuple[str, str], list[Any]]:
    """onnxruntime's schemas of the ops it defines beyond the ``onnx`` package
    (``com.microsoft``'s...) by (domain, op type), oldest first; {} without onnxruntime."""
    try:
        from onnxruntime.capi import onnxruntime_pybind11_state as ort
    except ImportError:
        return {}
    out: dict[tuple[str, str], list[Any]] = {}
    for s in sorted(ort.get_all_operator_schema(), key=lambda s: s.since_version):
        if s.domain not in ("", "ai.onnx"):
            out.setdefault((s.domain, s.name), []).append(s)
    return out


def contrib(op_type: str, domain: str, opset: int) -> Any:
    """onnxruntime's schema of a ``com.microsoft`` (or other contrib) op in force at ``opset``,
    or None (no onnxruntime, or an op it does not define)."""
    found = [s for s in _contrib_schemas().get((domain, op_type), ()) if s.since_version <= opset]
    return found[-1] if found else None


def _check_attribute_types(node: Any, schema: Any, where: str) -> None:
    """The attributes a contrib op's schema declares have its types (Attention's num_heads an
    int, not a list), so its converter reads what it expects; attributes it does not declare are
    left to the converter."""
    if schema is None:
        return
    for a in node.attribute:
        spec = schema.attributes.get(a.name)
        if spec is not None and not a.ref_attr_name:
            _check_type(a, spec, where)


def _check_inputs(node: Any, schema: Any, where: str) -> None:
    """At most the schema's inputs, and each of its required ones given a name (an ``onnx``
    schema, or onnxruntime's for a contrib op: their formal parameters read alike)."""
    n_in = len(node.input)
    if n_in > schema.max_input:
        raise ValidationError(
            f"{ONNX}: {where}: {n_in} inputs; {node.op_type}-{schema.since_version} takes at "
            f"most {schema.max_input}"
        )
    for k, param in enumerate(schema.inputs):
        option = param.option.name  # Single, Optional or Variadic
        if option == "Optional":
            continue
        if option == "Variadic":
            homogeneous = getattr(param, "is_homogeneous", True)  # onnxruntime's lack it
            if k >= n_in and homogeneous and schema.min_input > k:
                raise ValidationError(f"{ONNX}: {where}: input '{param.name}' is required")
            # A variadic parameter's inputs are all present (none of them is optional).
            for j in range(k, n_in):
                if not node.input[j]:
                    raise ValidationError(
                        f"{ONNX}: {where}: input {j} ('{param.name}', variadic) has no name"
                    )
            break
        if k >= n_in or not node.input[k]:
            raise ValidationError(f"{ONNX}: {where}: input {k} ('{param.name}') is required")


def _check_type(a: Any, spec: Any, where: str) -> None:
    if int(a.type) != int(spec.type):
        want = _ATTRIBUTE_TYPES.get(int(spec.type), str(int(spec.type)))
        got = _ATTRIBUTE_TYPES.get(int(a.type), str(int(a.type)))
        raise ValidationError(f"{ONNX}: {where}: attribute '{a.name}' must be {want}, got {got}")


def check(node: Any, domain: str, opset: int, where: str, *, known: bool) -> Any:
    """Checks ``node`` against its schema and returns the schema (None where the ``onnx``
    package has no schema and a converter knows the op: the ``com.microsoft`` ops).

    Raises:
        ValidationError: naming the node and the input, output or attribute at fault.
    """
    schema = get(node.op_type, domain, opset)
    if schema is None:
        # A converter stands in for a schema only for ops the ``onnx`` package does not define
        # at all (``com.microsoft``'s); an ONNX op used below the opset that introduced it is
        # not that op (Einsum at opset 9).
        if known and get(node.op_type, domain, 2**31 - 1) is None:
            found = contrib(node.op_type, domain, opset)
            if found is not None:  # onnxruntime's schema: its inputs, then attribute types
                _check_inputs(node, found, where)
            _check_attribute_types(node, found, where)
            return None
        raise ValidationError(
            f"{ONNX}: {where}: op type '{(domain + '.') if domain else ''}{node.op_type}' is not "
            f"an operator of opset {opset}"
        )
    _check_inputs(node, schema, where)
    n_out = len(node.output)
    if n_out > schema.max_output or n_out < 1:
        raise ValidationError(
            f"{ONNX}: {where}: {n_out} outputs; {node.op_type}-{schema.since_version} has "
            f"{schema.min_output} to {schema.max_output}"
        )
    if not any(node.output):
        raise ValidationError(f"{ONNX}: {where}: no output is named")
    attributes = schema.attributes
    seen = set()
    for a in node.attribute:
        if a.name in seen:
            raise ValidationError(f"{ONNX}: {where}: attribute '{a.name}' is given twice")
        seen.add(a.name)
        if a.ref_attr_name:
            continue
        spec = attributes.get(a.name)
        if spec is None:
            raise ValidationError(
                f"{ONNX}: {where}: attribute '{a.name}' is not an attribute of "
                f"{node.op_type}-{schema.since_version}"
            )
        _check_type(a, spec, where)
    for name, spec in attributes.items():
        if spec.required and name not in seen:
            raise ValidationError(f"{ONNX}: {where}: attribute '{name}' is required")
    return schema
