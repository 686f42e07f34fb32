"""Traces sharded operators, graphs and ONNX sessions for CUDA on 8 simulated CPU devices, for
tests/test_sharded_kernels.py (run in a subprocess: the device count is fixed when JAX starts).

CUDA's fast paths are chosen as on a CUDA machine (``fastpath.cuda_present`` forced true, each
program traced inside ``fastpath.target_platform("cuda")``), so a Pallas kernel shows in the
jaxpr as a ``pallas_call``. XLA's SPMD partitioner cannot split one: a kernel in a program
split over devices would run whole on every device after an all-gather of its inputs. Each case
reports the kernel calls of the same program on one device (the kernel applies there: the check
can fail) and over the mesh, and whether the sharded program's values (run on the CPU) equal
the one-device ones. The last line of stdout is one JSON object, ``{case: {...}}``.
"""

from __future__ import annotations

import json
import os
import re
import sys

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "examples"))

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from dml_jax import fastpath

KERNEL = re.compile(r"\bpallas_call\[")


def kernels(fn, *args) -> int:
    """The Pallas calls of ``fn`` traced for CUDA."""
    with fastpath.target_platform("cuda"):
        return len(KERNEL.findall(str(jax.make_jaxpr(fn)(*args))))


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
        found[label] = kernels(lambda p, x, program=program: program.apply(p, x), params, big)
        values[label] = s.run(None, {s.get_inputs()[0].name: small})[0]
    equal = bool(np.allclose(values["sharded"], values["one_device"], rtol=1e-4, atol=1e-4))
    return {"ONNX transformer on a 2 x 4 mesh": {**found, "equal": equal}}


def main() -> None:
    fastpath.cuda_present = lambda: True  # CUDA's choices traced on this CPU
    result = {}
    for part in (operators, session):
        try:
            result.update(part())
        except Exception as e:  # noqa: BLE001 - reported to the test, which fails on it
            result[part.__name__] = {"error": f"{type(e).__name__}: {e}"}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
