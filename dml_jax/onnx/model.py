"""Reading an ONNX model (a path, bytes or a ModelProto; external data beside a path) and the
checks every import needs of its top level."""

from __future__ import annotations

import os
from typing import Any

from ..errors import ValidationError

ONNX_MISSING = "ONNX models need the 'onnx' package: pip install 'dml-jax[onnx]'"


def _onnx() -> Any:
    try:
        import onnx
    except ImportError:
        raise ImportError(ONNX_MISSING) from None
    return onnx


def load_onnx(path_or_model: Any, *, base_dir: str | None = None, map_weights: bool = False) -> Any:
    """An ``onnx.ModelProto`` from a path, serialized bytes or a ModelProto. A path's external
    data is read from beside it; bytes or a proto read theirs from ``base_dir``. With
    ``map_weights``, a path's top-level initializers keep their external data references
    (``protos.array_of`` maps them when used: a sharded session then reads each device's
    block only); every other tensor's is read."""
    onnx = _onnx()
    if isinstance(path_or_model, onnx.ModelProto):
        return path_or_model
    if isinstance(path_or_model, bytes | bytearray | memoryview):
        try:
            return onnx.load_from_string(bytes(path_or_model))
        except Exception as e:  # noqa: BLE001 - protobuf's decode errors have no common base
            raise ValidationError(f"ONNX: the bytes given are not an ONNX model: {e}") from None
    if isinstance(path_or_model, str | os.PathLike):
        path = os.fspath(path_or_model)
        try:
            model = onnx.load(path, load_external_data=False)
        except OSError as e:
            raise ValidationError(f"ONNX: cannot read '{path}': {e}") from None
        except Exception as e:  # noqa: BLE001 - protobuf's decode errors have no common base
            raise ValidationError(f"ONNX: '{path}' is not an ONNX model: {e}") from None
        from onnx import external_data_helper

        try:
            if map_weights:
                _load_all_but_initializers(model, os.path.dirname(path))
            else:
                external_data_helper.load_external_data_for_model(model, os.path.dirname(path))
        except Exception as e:  # noqa: BLE001 - onnx's checks and the OS raise many kinds
            reason = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise ValidationError(
                f"ONNX: '{path}': external data cannot be read: {reason}"
            ) from None
        return model
    raise ValidationError(
        f"ONNX: expected a path, bytes or an onnx.ModelProto, got {type(path_or_model).__name__}"
    )


def _load_all_but_initializers(model: Any, base_dir: str) -> None:
    """Reads the external data of every tensor of ``model`` but its graph's initializers (those
    of subgraphs, functions and attributes are read where they are used, without a base dir):
    the initializers' references are set aside while onnx reads the rest, then put back."""
    from onnx import TensorProto, external_data_helper

    kept = []
    for init in model.graph.initializer:
        if external_data_helper.uses_external_data(init):
            kept.append((init, list(init.external_data)))
            init.data_location = TensorProto.DEFAULT
            del init.external_data[:]
    try:
        external_data_helper.load_external_data_for_model(model, base_dir)
    finally:
        for init, entries in kept:
            init.data_location = TensorProto.EXTERNAL
            init.external_data.extend(entries)


def _of_tensors(type_proto: Any) -> bool:
    """A tensor, a sequence of tensors, or an optional of one of those (or no type given)."""
    which = type_proto.WhichOneof("value")
    if which == "sequence_type":
        return type_proto.sequence_type.elem_type.WhichOneof("value") in (None, "tensor_type")
    if which == "optional_type":
        inner = type_proto.optional_type.elem_type
        return inner.WhichOneof("value") != "optional_type" and _of_tensors(inner)
    return which in (None, "tensor_type")


def check_model(model: Any) -> None:
    """What every import needs of a model's top level: a graph with outputs, inputs and outputs
    of tensors (sequences of tensors and optionals are structures of tensors), known opsets.
    Map values are not runnable here and get one line saying so."""
    graph = model.graph
    _check_text(model, "model")
    if not graph.output:
        raise ValidationError("ONNX: the model's graph has no outputs")
    for kind, infos in (("input", graph.input), ("output", graph.output)):
        for info in infos:
            if not _of_tensors(info.type):
                which = info.type.WhichOneof("value")
                raise ValidationError(
                    f"ONNX: {kind} '{info.name}' is a {which.replace('_type', '')} value; "
                    "only tensors, sequences of tensors and optionals of those are supported"
                )
    versions = onnx_domain_versions()
    for o in model.opset_import:
        if o.version < 1:
            raise ValidationError(
                f"ONNX: opset import of domain '{o.domain}' has version {o.version}"
            )
        domain = "" if o.domain == "ai.onnx" else o.domain
        if domain in versions and o.version > versions[domain]:
            raise ValidationError(
                f"ONNX: opset import of domain '{o.domain}' has version {o.version}; the onnx "
                f"package knows versions up to {versions[domain]}"
            )
    for info in graph.input:
        check_dims(info.type, f"input '{info.name}'")


# Text the import never reads: a model's producer and metadata, doc strings.
_UNREAD_TEXT = frozenset({"doc_string", "metadata_props"})
_READ_MODEL = frozenset({"graph", "opset_import", "functions"})


def _check_text(message: Any, path: str) -> None:
    """Every name, op type, domain and other text field the import reads is UTF-8 text
    (protobuf hands out one that is not as bytes, which no name compares with); the bytes
    fields (string attributes, string tensors) hold bytes by design."""
    from google.protobuf.descriptor import FieldDescriptor

    for field, value in message.ListFields():
        if field.name in _UNREAD_TEXT or (path == "model" and field.name not in _READ_MODEL):
            continue
        where = f"{path}.{field.name}"
        if field.type == FieldDescriptor.TYPE_STRING:
            values = [value] if isinstance(value, str | bytes) else list(value)
            for k, v in enumerate(values):
                if isinstance(v, bytes):
                    at = where if len(values) == 1 and value is v else f"{where}[{k}]"
                    raise ValidationError(f"ONNX: {at} is not UTF-8 text: {v[:40]!r}")
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            if hasattr(value, "ListFields"):
                _check_text(value, where)
            else:
                for k, item in enumerate(value):
                    _check_text(item, f"{where}[{k}]")


# DML tensors' sizes are UINT32s (TensorDesc): a declared dimension beyond them cannot be one.
MAX_DIM = 2**32 - 1


def check_dims(type_proto: Any, where: str) -> None:
    """The declared dimensions of a tensor (or of a sequence's or optional's tensors): each
    given size in [0, 2**32 - 1]."""
    which = type_proto.WhichOneof("value")
    if which == "sequence_type":
        return check_dims(type_proto.sequence_type.elem_type, where)
    if which == "optional_type":
        return check_dims(type_proto.optional_type.elem_type, where)
    if which != "tensor_type":
        return None
    for k, d in enumerate(type_proto.tensor_type.shape.dim):
        if d.HasField("dim_value") and not 0 <= d.dim_value <= MAX_DIM:
            raise ValidationError(
                f"ONNX: {where}: dimension {k} is {d.dim_value}; a size must be in [0, {MAX_DIM}]"
            )
    return None


def onnx_domain_versions() -> dict[str, int]:
    """The newest opset version the ``onnx`` package defines, per domain it defines."""
    onnx = _onnx()
    try:
        from onnx.onnx_cpp2py_export.defs import schema_version_map

        return {d: int(v[1]) for d, v in schema_version_map().items()}
    except ImportError:  # pragma: no cover - every onnx release in use has it
        return {"": onnx.defs.onnx_opset_version()}
