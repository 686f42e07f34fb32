"""One of the two processes of tests/test_onnx_sharding.py's multi-process check.

``python tests/_distributed_worker.py PORT PROCESS_ID`` joins ``jax.distributed`` on the
loopback address (the test runs it with ``JAX_PLATFORMS=cpu`` and 2 simulated CPU devices per
process; it runs as well with one GPU per process), makes one mesh over the devices of both
processes, and checks, against the same computation on one of its own devices:

- a DML graph (GEMM -> REDUCE over the rows) compiled with ``compile_graph(in_shardings=...,
  out_shardings=...)`` over the global mesh, A's rows split across the processes;
- the tiny transformer (examples/onnx_transformer.py) as an ``InferenceSession`` on a 2 x 2
  (data, model) mesh spanning the processes.

The processes exchange nothing but through JAX (the collectives of the compiled programs).
Prints one JSON object on the last line: ``{"process": id, "cases": {id: {"ok", "detail"}}}``.
"""

from __future__ import annotations

import json
import sys
import time


def main(port: str, process_id: int) -> None:
    import jax

    started = time.perf_counter()
    jax.distributed.initialize(
        coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=process_id
    )
    import numpy as np
    from _worker_cases import recorder
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P
    from onnx_transformer import example_input, tiny_transformer

    import dml_jax as dml
    from dml_jax.onnx import InferenceSession

    local = jax.local_devices()[0]
    results: dict = {}
    record = recorder(results)

    def graph():
        # GEMM -> REDUCE (SUM over the rows): with the rows split across the processes, the sum
        # needs their partial sums (an all-reduce between the processes).
        mesh = jax.make_mesh((jax.device_count(),), ("x",))
        t = dml.TensorDesc
        a_t, b_t, y_t, s_t = (t("FLOAT32", s) for s in ((8, 16), (16, 4), (8, 4), (1, 4)))
        g = dml.GraphDesc(
            input_count=2,
            output_count=2,
            nodes=[
                dml.GemmOperatorDesc(a_t, b_t, None, y_t),
                dml.ReduceOperatorDesc("SUM", y_t, s_t, [0]),
            ],
            input_edges=[dml.InputGraphEdge(0, 0, 0), dml.InputGraphEdge(1, 0, 1)],
            intermediate_edges=[dml.IntermediateGraphEdge(0, 0, 1, 0)],
            output_edges=[dml.OutputGraphEdge(0, 0, 0), dml.OutputGraphEdge(1, 0, 1)],
        )
        rows, whole = NamedSharding(mesh, P("x")), NamedSharding(mesh, P())
        sharded = dml.compile_graph(g, in_shardings=[rows, whole], out_shardings=[whole, whole])
        rng = np.random.default_rng(0)
        a = rng.standard_normal((8, 16)).astype(np.float32)
        b = rng.standard_normal((16, 4)).astype(np.float32)
        got = sharded(a, b)  # every process passes the same host arrays
        want = jax.jit(sharded.fn)(jax.device_put(a, local), jax.device_put(b, local))
        err = max(
            float(np.max(np.abs(np.asarray(x.addressable_data(0)) - np.asarray(y))))
            for x, y in zip(got, want)
        )
        spans = {d.process_index for d in got[1].sharding.device_set} == {0, 1}
        return err <= 1e-5 and spans, f"max abs diff {err:.3g}; {got[1].sharding}"

    def session():
        model = tiny_transformer()
        x = example_input(4)
        (want,) = InferenceSession(model, device=local).run(None, {"x": x})
        # 2 x 2 here; on two single-GPU processes 1 x 2 (tensor parallel across them).
        mesh = jax.make_mesh((jax.device_count() // 2, 2), ("data", "model"))
        s = InferenceSession(model, mesh=mesh)
        (got,) = s.run(None, {"x": x})  # the whole output on every process
        err = float(np.max(np.abs(got - want)))
        return err <= 1e-5, f"max abs diff {err:.3g}; output {got.shape}"

    record("graph/gemm-reduce-rows-split-over-2-processes", graph)
    record("session/tiny-transformer-data2-model2", session)
    seconds = round(time.perf_counter() - started, 2)
    print(json.dumps({"process": process_id, "devices": jax.device_count(),
                      "cases": results, "seconds": seconds}))  # fmt: skip
    jax.distributed.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
