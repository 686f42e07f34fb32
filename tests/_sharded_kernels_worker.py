"""Traces sharded operators, graphs and ONNX sessions for CUDA on 8 simulated CPU devices, for
tests/test_sharded_kernels.py (run in a subprocess: the device count is fixed when JAX starts).

CUDA's fast paths are chosen as on a CUDA machine (``fastpath.cuda_present`` forced true, each
program traced inside ``fastpath.target_platform("cuda")``), so a Pallas kernel shows in the
jaxpr as a ``pallas_call``. XLA's SPMD partitioner cannot split one: a kernel in a program
split over devices would run whole on every device after an all-gather of its inputs, unless it
sits in a per-shard region (``custom_partitioning``). Each case reports the kernel calls
outside such regions of the same program on one device (the kernel applies there: the check
can fail) and over the mesh, the regions over the mesh, and whether the sharded program's
values (run on the CPU) equal the one-device ones. The last line of stdout is one JSON object, ``{case: {...}}``.
"""

from __future__ import annotations

import json
import os
import sys

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "examples"))

import jax
import numpy as np
from _workers import CALLS, collective_counts, interpreted, outside, regions  # this folder's
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from dml_jax import fastpath


def kernels(fn, *args) -> int:
    """The Pallas calls of ``fn`` traced for CUDA outside a per-shard region (a
    ``custom_partitioning`` call, inside which XLA's partitioner runs a kernel on each
    device's shards)."""
    with fastpath.target_platform("cuda"):
        return outside(jax.make_jaxpr(fn)(*args).jaxpr)


def in_regions(fn, *args) -> int:
    """The per-shard regions of ``fn`` traced for CUDA."""
    with fastpath.target_platform("cuda"):
        return regions(jax.make_jaxpr(fn)(*args).jaxpr)


def operators() -> dict:
    import dml_jax as dml

    rows, cols = 1024, 1024
    x_desc = dml.TensorDesc("FLOAT16", (rows, cols))
    lse = dml.ReduceOperatorDesc("LOG_SUM_EXP", x_desc, x_desc.like(sizes=(rows, 1)), [1])
    clip = dml.ElementWiseClipOperatorDesc(x_desc, x_desc, min=-1.0, max=1.0)
    graph = dml.GraphDesc(
        input_count=1, output_count=1, nodes=[clip, lse],
        input_edges=[dml.InputGraphEdge(0, 0, 0)],
        intermediate_edges=[dml.IntermediateGraphEdge(0, 0, 1, 0)],
        output_edges=[dml.OutputGraphEdge(1, 0, 0)],
    )  # fmt: skip
    mesh = jax.make_mesh((8,), ("x",))
    rows_sharded = NamedSharding(mesh, P("x"))
    x = np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float16)
    out = {}
    for name, desc, compile_fn in (
        ("REDUCE LOG_SUM_EXP, rows sharded", lse, dml.compile_operator),
        ("graph CLIP -> REDUCE LOG_SUM_EXP, rows sharded", graph, dml.compile_graph),
    ):
        one = compile_fn(desc)
        split = compile_fn(desc, in_shardings=rows_sharded, out_shardings=rows_sharded)
        with jax.set_mesh(mesh):  # a context mesh marks a trace as sharded too
            in_context = kernels(one.fn, x)
        got, want = (np.asarray(f(x), np.float32) for f in (split, one))
        equal = bool(np.allclose(got, want, rtol=2e-3, atol=2e-3))
        out[name] = {"one_device": kernels(one.fn, x), "sharded": kernels(split._jitted, x),
                     "sharded_regions": in_regions(split._jitted, x),
                     "context_mesh": in_context, "equal": equal}  # fmt: skip
    return out


def session() -> dict:
    """The ONNX transformer of examples/onnx_transformer.py: traced at a size where the
    normalization kernels apply (4,096 rows of 1,024), run at a small one."""
    from onnx_transformer import example_input, tiny_transformer

    from dml_jax.onnx import InferenceSession

    model = tiny_transformer(1024, 16, 4096, 2)
    big = jax.ShapeDtypeStruct((8, 512, 1024), np.float32)
    small = example_input(2, 16, 1024)
    found, values = {}, {}
    for label, mesh in (
        ("one_device", None),
        ("sharded", jax.make_mesh((2, 4), ("data", "model"))),
    ):
        s = InferenceSession(model, mesh=mesh)
        s.program([big.shape])
        program = s._programs[next(iter(s._programs))]
        params = s._mesh_params(program) if mesh is not None else s._device_params()
        apply = lambda p, x, program=program: program.apply(p, x)
        found[label] = kernels(apply, params, big)
        found[f"{label}_regions"] = in_regions(apply, params, big)
        values[label] = s.run(None, {s.get_inputs()[0].name: small})[0]
        if mesh is not None:  # what the program traced for CUDA communicates, compiled
            found["collectives"] = collectives(apply, params, big, s.mesh)
    equal = bool(np.allclose(values["sharded"], values["one_device"], rtol=1e-4, atol=1e-4))
    return {"ONNX transformer on a 2 x 4 mesh": {**found, "equal": equal}}


def collectives(fn, params, like, mesh) -> dict:
    """The collectives of ``fn`` traced for CUDA (split over ``mesh``, its first input's batch
    over ``"data"``) and compiled for the CPU, the kernels interpreted."""

    def body(p, x):
        with fastpath.sharded():
            return fn(p, x)

    x = jax.ShapeDtypeStruct(like.shape, like.dtype, sharding=NamedSharding(mesh, P("data")))
    with fastpath.target_platform("cuda"):
        text = jax.jit(body).lower(params, x).compile().as_text()
    return collective_counts(text)


def rows() -> dict:
    """The normalization and softmax kernels run, in interpret mode, on each device's rows
    (``kernels/rows_shards.py``) of programs traced for CUDA and run on this CPU: values
    against the lax lowering, and the rows each kernel call saw. ``MIN_PROGRAMS`` is lowered
    so that the kernels take these small arrays."""
    import dml_jax as dml
    from dml_jax.kernels import mvn, softmax

    mvn.MIN_PROGRAMS = softmax.MIN_PROGRAMS = 1
    x = dml.TensorDesc("FLOAT32", (64, 512))
    row = x.like(sizes=(1, 512))
    cases = {
        "MVN (layer norm), rows sharded": (
            dml.MeanVarianceNormalization1OperatorDesc(x, row, row, x, axes=(1,),
                                                       normalize_variance=True, epsilon=1e-5),
            P("x"),
        ),
        "MVN (layer norm), rows whole on every device": (
            dml.MeanVarianceNormalization1OperatorDesc(x, row, row, x, axes=(1,),
                                                       normalize_variance=True, epsilon=1e-5),
            P(),
        ),
        "SOFTMAX over the minor axis, rows sharded": (
            dml.ActivationSoftmax1OperatorDesc(x, x, axes=(1,)), P("x"),
        ),
        # over the major axis the kernel's slices run down columns: no per-shard form, lax
        "SOFTMAX over the major axis, columns sharded": (
            dml.ActivationSoftmax1OperatorDesc(x, x, axes=(0,)), P(None, "x"),
        ),
    }  # fmt: skip
    mesh = jax.make_mesh((8,), ("x",))
    rng = np.random.default_rng(5)
    out = {}
    for name, (desc, spec) in cases.items():
        arrays = [rng.standard_normal(t.sizes).astype(np.float32) for _, t in desc.input_slots()]
        want = np.asarray(dml.compile_operator(desc, fast_paths=False)(*arrays))
        op = dml.compile_operator(desc)

        def body(*a, op=op):
            with fastpath.sharded():
                return op.fn(*a)

        shardings = [NamedSharding(mesh, spec if i == 0 else P()) for i in range(len(arrays))]
        start = len(CALLS)
        with fastpath.target_platform("cuda"):
            j = jax.jit(body, in_shardings=tuple(shardings),
                        out_shardings=NamedSharding(mesh, spec))  # fmt: skip
            got = np.asarray(j(*arrays))
            loose = kernels(body, *arrays)
            found = in_regions(body, *arrays)
        out[name] = {"max_abs_diff": float(np.abs(got - want).max()), "outside": loose,
                     "regions": found, "calls": CALLS[start:]}  # fmt: skip
    return out


def main() -> None:
    fastpath.cuda_present = lambda: True  # CUDA's choices traced on this CPU
    interpreted()
    result = {}
    for part in (operators, session, rows):
        try:
            result.update(part())
        except Exception as e:  # noqa: BLE001 - reported to the test, which fails on it
            result[part.__name__] = {"error": f"{type(e).__name__}: {e}"}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
