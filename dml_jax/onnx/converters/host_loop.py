"""A Loop run on the host: the form of a Loop whose body needs, at every iteration, sizes read
from that iteration's values (torchvision's Mask R-CNN pastes each detection's mask into the
image through a Resize to the detection's box), which neither one compiled body nor an import
unrolled iteration by iteration can hold: each size would be read by a program of its own over
everything before the Loop.

The body runs as a session of its own on the host's CPU, one iteration at a time, its inputs
the iteration number, the condition, the loop-carried values and the enclosing scope's tensors
it reads; that session reads its sizes from its own inputs' values (one program per distinct
set). In the model's program the Loop is one JAX node calling the host
(``jax.pure_callback``). Its outputs' shapes are read first (``Context.sizes``: the program up
to the Loop computes its inputs, and the host runs the loop once for their shapes), as
onnxruntime's DirectML provider hands such a node to its CPU provider. The loop therefore runs
twice a call, and ``jit``/``apply`` cannot trace the model (docs/onnx.md, "Control flow").
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import ValidationError
from ..elements import BOOL, ONNX, data_type_of, elem_type_of, numpy_dtype_of
from ..importer import Value
from ..resume import free_names

_INT32, _INT64 = 6, 7

# Iterations a host loop may run (a loop that never stops is refused, not waited for).
HOST_LOOP_LIMIT = 10_000


def _onnx_type(v: Value) -> int:
    """The ONNX element type of a runtime value (the graph holds INT64 as INT32: taken as
    INT64, the exporters' integer type)."""
    if v.is_bool:
        return BOOL
    if v.carried:
        return v.carried
    t = elem_type_of(v.data_type.numpy_dtype)
    return _INT64 if t == _INT32 else t


def _body_model(ctx: Any, body: Any, outer: list[tuple[str, Value]]) -> bytes:
    """The body as a model of its own: the enclosing scope's tensors it reads as inputs (or,
    known at import, initializers)."""
    import onnx
    from onnx import helper, numpy_helper

    graph = onnx.GraphProto()
    graph.CopyFrom(body)
    for name, v in outer:
        if v.const is not None and v.param is None:
            graph.initializer.append(numpy_helper.from_array(np.asarray(v.const), name))
        else:
            graph.input.append(helper.make_tensor_value_info(name, _onnx_type(v), list(v.shape)))
    # Every input's sizes free: a loop-carried tensor may grow from one iteration to the next,
    # and the enclosing tensors' sizes change from call to call.
    for k, i in enumerate(graph.input):
        if i.type.HasField("tensor_type") and i.type.tensor_type.HasField("shape"):
            for j, dim in enumerate(i.type.tensor_type.shape.dim):
                dim.Clear()
                dim.dim_param = f"host_loop_{k}_{j}"
    opsets = [helper.make_opsetid(domain, version) for domain, version in ctx.walk.opsets.items()]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=onnx.IR_VERSION)
    return model.SerializeToString()


def host_loop(ctx: Any, body: Any, m: Value | None, cond: Value | None, carried: list,
              n_scan: int, why: str) -> tuple:  # fmt: skip
    """The Loop ``ctx`` imports, as the JAX node that runs ``body`` on the host (the module's
    documentation): its name, function, input values and output specs, for ``jax_node``;
    ``why``: what kept the body from the device program."""
    import jax

    from ..session import InferenceSession

    if any(not isinstance(v, Value) for v in carried):
        raise ctx.fail(f"the Loop must run on the host ({why}), but it carries a sequence")
    names = [i.name for i in body.input]
    outer = [(n, ctx.walk.values[n]) for n in free_names(body) if n in ctx.walk.values]
    if any(not isinstance(v, Value) for _, v in outer):
        raise ctx.fail(f"the Loop must run on the host ({why}), but its body reads a sequence")
    runtime = [(n, v) for n, v in outer if not (v.const is not None and v.param is None)]
    try:
        session = InferenceSession(_body_model(ctx, body, outer), device="cpu")
        session._static_limit = None  # its inputs are one iteration's values: read any of them
    except ValidationError as e:
        raise ctx.fail(f"the Loop must run on the host ({why}), but its body: {e}") from None
    every = [v for v in (m, cond) if v is not None] + list(carried) + [v for _, v in runtime]
    has_m, has_cond, nc = m is not None, cond is not None, len(carried)
    onnx_types = [_onnx_type(v) for v in every]
    # known at import (an empty tensor the loop grows, say; an empty parameter holds nothing to
    # replace): closed over, not program values
    known = {k: np.asarray(v.const) for k, v in enumerate(every) if v.const is not None
             and (v.param is None or v.const.size == 0)}  # fmt: skip
    values = [v for k, v in enumerate(every) if k not in known]

    def run(*arrays: Any) -> list[np.ndarray]:
        """The loop over NumPy arrays of ``values`` (graph dtypes): its outputs, ONNX dtypes."""
        given = iter(arrays)
        full = [known[k] if k in known else next(given) for k in range(len(every))]
        full = [np.asarray(a).astype(numpy_dtype_of(t, ctx.where))
                for a, t in zip(full, onnx_types)]  # fmt: skip
        it = iter(full)
        trip = int(next(it).reshape(-1)[0]) if has_m else None
        going = bool(next(it).reshape(-1)[0]) if has_cond else True
        state = [next(it) for _ in range(nc)]
        scope = {n: next(it) for n, _ in runtime}
        scans: list[list] = [[] for _ in range(n_scan)]
        i = 0
        while going and (trip is None or i < trip):
            if i >= HOST_LOOP_LIMIT:
                raise ValidationError(
                    f"{ONNX}: {ctx.where}: the Loop run on the host passed {HOST_LOOP_LIMIT} "
                    "iterations"
                )
            feed = {names[0]: np.array(i, np.int64), names[1]: np.array(going), **scope}
            feed.update(zip(names[2:], state))
            outs = session.run(None, feed)
            going = bool(np.asarray(outs[0]).reshape(-1)[0])
            state = [np.asarray(x) for x in outs[1 : 1 + nc]]
            for k, x in enumerate(outs[1 + nc :]):
                scans[k].append(np.asarray(x))
            i += 1
        if any(not s for s in scans):
            raise ValidationError(
                f"{ONNX}: {ctx.where}: the Loop run on the host ran no iteration, so its scan "
                "outputs have no shape"
            )
        for k, items in enumerate(scans):
            if len({x.shape for x in items}) > 1:
                raise ValidationError(
                    f"{ONNX}: {ctx.where}: scan output {k} of the Loop run on the host has "
                    f"different shapes in different iterations ({sorted({x.shape for x in items})})"
                )
        return state + [np.stack(items) for items in scans]

    def shapes(*arrays: Any) -> tuple[int, ...]:
        """Each output's rank, sizes and ONNX type, flat."""
        flat: list[int] = []
        for y in run(*arrays):
            flat += [y.ndim, *y.shape, elem_type_of(y.dtype)]
        return tuple(flat)

    flat = iter(ctx.sizes(shapes, values, key=f"{ctx.where}: host loop",
                          what=f"the Loop runs on the host ({why}): its outputs' shapes"))  # fmt: skip
    outputs = []  # (shape, graph data type, is_bool) a JAX node output
    for _ in range(nc + n_scan):
        shape = tuple(next(flat) for _ in range(next(flat)))
        t = next(flat)
        outputs.append((shape, data_type_of(t, ctx.where), t == BOOL))

    def fn(*arrays: Any) -> list:
        structs = [jax.ShapeDtypeStruct(o[0], o[1].numpy_dtype) for o in outputs]

        def host(*xs: Any) -> list:
            return [np.asarray(y).astype(s.dtype).reshape(s.shape) for y, s in
                    zip(run(*xs), structs)]  # fmt: skip

        return jax.pure_callback(host, structs, *arrays)

    return f"Loop(on the host; body: {len(body.node)} nodes)", fn, values, outputs
