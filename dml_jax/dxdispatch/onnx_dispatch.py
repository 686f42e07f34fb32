"""ONNX dispatchables (``"type": "onnx"``): an ONNX model compiled per dispatch command.

As in DxDispatch, bind points are the model's input and output names; a binding may give a
``shape`` (the tensor's shape for this dispatch; ``elementOffset`` must be 0); an input without
one takes the model's shape, its symbolic dimensions from ``freeDimensionNameOverrides`` or 1.
The model is compiled (``dml_jax.onnx``) for each distinct set of input shapes. An output bound
to a ``"deferred"`` resource sizes that resource: its bytes are the output's (known statically
here, after shape inference, where ONNX Runtime learns them after the run).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ..enums import DataType
from ..errors import ValidationError
from ..onnx import load_onnx
from ..onnx.elements import ONNX, check_dml_shape, graph_dtype
from ..onnx.importer import dml_sizes
from ..tensor import TensorDesc
from .context import LoadContext, member
from .dispatchables import BindPoint, Dispatchable
from .resources import Resource, find_file

ONNX_KIND = "onnx"


@dataclass
class OnnxDispatchable:
    """A loaded ONNX model; compiled per set of input shapes when a dispatch binds it."""

    name: str
    path: str
    model: Any
    free_dimensions: dict[str, int]
    session: Any = None
    compile_type: str = ONNX_KIND
    bind_points: tuple = ()
    init_bindings: dict = field(default_factory=dict)
    op: Any = None


def parse_onnx_dispatchable(
    ctx: LoadContext, name: str, obj: dict, path: str, feature_level: Any = None
) -> OnnxDispatchable:
    source = ctx.string(ctx.require(obj, "sourcePath", path), member(path, "sourcePath"))
    file = find_file(ctx, source, ctx.model_dir, member(path, "sourcePath"))
    free: dict[str, int] = {}
    if "freeDimensionNameOverrides" in obj:
        where = member(path, "freeDimensionNameOverrides")
        for key, value in ctx.object(obj["freeDimensionNameOverrides"], where).items():
            free[key] = ctx.uint(value, member(where, key), minimum=1)
    if obj.get("bindings"):
        raise ctx.fail(
            member(path, "bindings"), "ONNX dispatchables take no initialization bindings"
        )
    try:
        model = load_onnx(file)
    except ImportError as e:
        raise ctx.fail(path, str(e)) from None
    except ValidationError as e:
        raise ctx.fail(member(path, "sourcePath"), str(e)) from None
    from ..onnx import InferenceSession

    try:
        session = InferenceSession(
            model,
            free_dimensions=free,
            feature_level=feature_level,
            base_dir=os.path.dirname(file),
            max_memory=ctx.max_memory,
        )
    except ValidationError as e:
        raise ctx.fail(member(path, "sourcePath"), str(e)) from None
    return OnnxDispatchable(name, path, model, free, session)


def _tensor_type(dtype: Any) -> DataType:
    """The DML data type of an ONNX tensor's bound buffer (BOOL: UINT8; INT64 stays INT64:
    the resource holds 64-bit values, the graph computes their low 32 bits)."""
    import numpy as np

    dtype = np.dtype(dtype)
    return DataType.from_dtype(np.uint8 if dtype == np.bool_ else dtype)


def _bound_desc(dtype: Any, shape: tuple[int, ...], where: str) -> TensorDesc:
    """The buffer tensor a model input or output is bound as: DirectML's, so not empty (the
    session itself takes and returns empty tensors), of 1 to 8 dimensions and fewer than 2^32
    elements; else an error naming it."""
    if 0 in shape:
        raise ValidationError(
            f"{ONNX}: {where}: shape {list(shape)} is empty, and a resource of a DxDispatch "
            "model is a DirectML buffer tensor of at least one element"
        )
    check_dml_shape(shape, where, "the tensor")
    return TensorDesc(_tensor_type(dtype), dml_sizes(shape))


class _OnnxOp:
    """An imported ONNX model seen as an operator over packed tensors, for buffer mode."""

    def __init__(self, program: Any):
        imported = program.imported
        self.name = "ONNX"
        self.program = program
        self.input_paths = imported.input_names
        self.output_paths = imported.output_names
        self.input_descs = tuple(
            _bound_desc(t, s, f"input '{name}'")
            for t, s, name in zip(imported.input_dtypes, imported.input_shapes, self.input_paths)
        )
        self.output_descs = tuple(
            _bound_desc(t, s, f"output '{name}'")
            for t, s, name in zip(imported.output_dtypes, imported.output_shapes, self.output_paths)
        )

    def fn(self, *arrays: Any) -> tuple:
        shapes = self.program.imported.input_shapes
        dtypes = self.program.imported.input_dtypes
        args = (x.astype(graph_dtype(t)).reshape(s) for x, s, t in zip(arrays, shapes, dtypes))
        outs = self.program.apply({}, *args)
        return tuple(y.astype(d.dtype).reshape(d.sizes) for y, d in zip(outs, self.output_descs))


def _binding_shape(ctx: LoadContext, value: Any, path: str) -> tuple[int, ...] | None:
    items = value if isinstance(value, list) else [value]
    if len(items) != 1:
        raise ctx.fail(path, "ONNX dispatchables' tensors must map to a single binding source.")
    item = items[0]
    if not isinstance(item, dict):
        return None
    if item.get("elementOffset", 0) != 0:
        raise ctx.fail(
            member(path, "elementOffset"), "ONNX dispatchables do not support binding offsets."
        )
    if "shape" not in item:
        return None
    where = member(path, "shape")
    if not isinstance(item["shape"], list):
        raise ctx.fail(where, "must be an array of integers")
    return tuple(ctx.uint(v, member(where, i), minimum=1) for i, v in enumerate(item["shape"]))


def _model_shape(type_proto: Any, free: dict[str, int]) -> tuple[int, ...]:
    dims = []
    for d in type_proto.tensor_type.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        else:  # DxDispatch sets an input's free dimensions to 1
            dims.append(int(free.get(d.dim_param, 1)))
    return tuple(dims)


def onnx_target(
    ctx: LoadContext,
    d: OnnxDispatchable,
    bindings: Any,
    path: str,
    resources: dict[str, Resource],
) -> Dispatchable:
    """The model compiled for one dispatch command's bindings, as a DML-style dispatchable
    (bind points named after the model's inputs and outputs)."""
    bindings = ctx.object(bindings, path)
    shapes = []
    for inp in d.session._inputs:
        given = None
        if inp.name in bindings:
            given = _binding_shape(ctx, bindings[inp.name], member(path, inp.name))
        shapes.append(given or _model_shape(inp.type, d.free_dimensions))
    try:
        program = d.session.program(shapes)
        op = _OnnxOp(program)
    except ValidationError as e:
        raise ctx.fail(d.path, str(e)) from None
    for name, desc in zip(op.output_paths, op.output_descs):
        if name not in bindings:
            continue
        where = member(path, name)
        given = _binding_shape(ctx, bindings[name], where)
        shape = program.imported.output_shapes[op.output_paths.index(name)]
        if given is not None and tuple(given) != tuple(shape):
            raise ctx.fail(
                member(where, "shape"),
                f"the model's output '{name}' has shape {list(shape)} for these inputs, "
                f"got {list(given)}",
            )
        item = bindings[name][0] if isinstance(bindings[name], list) else bindings[name]
        res = resources.get(item if isinstance(item, str) else item.get("name"))
        if res is not None and res.deferred_bytes is not None:
            _size_deferred(ctx, res, desc, where)
    points = tuple(
        BindPoint(n, "input", (i,), (t,))
        for i, (n, t) in enumerate(zip(op.input_paths, op.input_descs))
    ) + tuple(
        BindPoint(n, "output", (i,), (t,))
        for i, (n, t) in enumerate(zip(op.output_paths, op.output_descs))
    )
    return Dispatchable(d.name, d.path, op, ONNX_KIND, points)


def _size_deferred(ctx: LoadContext, res: Resource, desc: TensorDesc, where: str) -> None:
    nbytes = desc.element_count * desc.data_type.size
    if res.size_in_bytes == 0:
        ctx.reserve((nbytes + 3) // 4 * 4, where)
        res.size_in_bytes = (nbytes + 3) // 4 * 4
        res.deferred_bytes = nbytes
    elif res.deferred_bytes != nbytes:
        raise ctx.fail(
            where,
            f"deferred resource '{res.name}' already holds {res.deferred_bytes} bytes from an "
            f"earlier dispatch; this output has {nbytes}",
        )


def is_onnx_file(file: str) -> bool:
    return os.path.splitext(file)[1].lower() == ".onnx"


def onnx_explanation(file: str, inputs: dict[str, str] | None = None) -> str:
    """What ``dml-jax run --explain`` prints: a line per ONNX node of the model imported for the
    shapes the run uses (given ``.npy`` files, else free dimensions of 1)."""
    import numpy as np

    from ..onnx import InferenceSession

    session = InferenceSession(file)
    inputs = inputs or {}
    shapes = []
    for info in session.get_inputs():
        if info.name in inputs:
            shapes.append(np.load(inputs[info.name], mmap_mode="r").shape)
        else:
            shapes.append([d if isinstance(d, int) else 1 for d in info.shape or []])
    return session.explain(shapes)


def onnx_model_text(
    file: str,
    inputs: dict[str, str] | None = None,
    seed: int = 0,
    max_memory: int | None = None,
) -> str:
    """The DxDispatch model that ``dml-jax run MODEL.onnx`` runs: one dispatch of the ONNX file
    with every input bound (a given ``.npy`` file, else seeded random values: floats in
    [-1, 1), integers in [0, 10)), every output bound to a deferred resource, then printed.

    Random inputs are counted against ``max_memory`` (``--max-memory``) before they are made.

    Raises:
        ValidationError: the file is not an ONNX model, ``inputs`` names no model input, or the
            random inputs would not fit ``max_memory``.
    """
    import json
    import math

    import numpy as np

    from ..onnx import check_model
    from ..onnx.elements import numpy_dtype_of

    def buffer_type(elem: int, where: str) -> DataType:
        # The type of the bound buffer, as the dispatch binds it (INT64 stays INT64).
        dtype = numpy_dtype_of(elem, where)
        try:
            t = _tensor_type(dtype)
        except (ValueError, TypeError, KeyError, ValidationError):
            t = None
        if t is None or t.bits < 8:  # 4-bit resources take packed bytes, not random values
            raise ValidationError(f"ONNX: {where}: 'dml-jax run' cannot bind a tensor of {dtype}")
        return t

    model = load_onnx(file)
    check_model(model)
    total = 0
    inputs = dict(inputs or {})
    rng = np.random.default_rng(seed)
    initializers = {i.name for i in model.graph.initializer}
    resources: dict[str, Any] = {}
    bindings: dict[str, Any] = {}
    for inp in model.graph.input:
        if inp.name in initializers:
            continue
        if inp.type.WhichOneof("value") != "tensor_type":
            raise ValidationError(
                f"ONNX: input '{inp.name}': 'dml-jax run' binds tensor inputs only"
            )
        t = buffer_type(inp.type.tensor_type.elem_type, f"input '{inp.name}'")
        key = f"input:{inp.name}"
        if inp.name in inputs:
            resources[key] = {"initialValues": {"sourcePath": inputs.pop(inp.name)}}
        else:
            shape = _model_shape(inp.type, {})
            count = max(1, math.prod(shape))
            total += count * t.size
            if max_memory and total > max_memory:
                raise ValidationError(
                    f"ONNX: input '{inp.name}': random inputs of the declared shapes need "
                    f"{total} bytes, more than the memory budget of {max_memory} bytes "
                    "(--max-memory)"
                )
            if t.is_float:
                values = rng.uniform(-1, 1, count).astype(np.float32).tolist()
            else:
                values = rng.integers(0, 10, count).tolist()
            resources[key] = {"initialValuesDataType": t.name, "initialValues": values}
        bindings[inp.name] = key
    if inputs:
        raise ValidationError(f"ONNX: the model has no input named {sorted(inputs)}")
    commands: list[dict] = [
        {"type": "dispatch", "dispatchable": os.path.basename(file), "bindings": bindings}
    ]
    for out in model.graph.output:
        if out.type.WhichOneof("value") != "tensor_type":
            raise ValidationError(
                f"ONNX: output '{out.name}': 'dml-jax run' binds tensor outputs only"
            )
        t = buffer_type(out.type.tensor_type.elem_type, f"output '{out.name}'")
        key = f"output:{out.name}"
        resources[key] = {"initialValuesDataType": t.name, "initialValues": "deferred"}
        bindings[out.name] = key
        commands.append({"type": "print", "resource": key})
    dispatchable = {"type": "onnx", "sourcePath": os.path.basename(file)}
    return json.dumps(
        {
            "resources": resources,
            "dispatchables": {os.path.basename(file): dispatchable},
            "commands": commands,
        }
    )
