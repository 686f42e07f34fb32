"""What an int4 program's compile costs on a GPU: chains of ``n`` MatMulNBits nodes of one
shape (float16, one row, blocks of 32, zero points) through ``InferenceSession``, and the same
chains of float16 MatMuls, each program's ``lower`` and ``compile`` timed apart; then the same
int4 chain with the kernel's fast path off (the DEQUANTIZE + GEMM lowering). A compile that grows
with ``n`` for one kernel configuration says XLA compiles every call of the kernel; one that
does not says the time is elsewhere (XLA's passes, autotuning).

The decode suite found each program of the 1B-class int4 export compiling in 60-65 s against
about 5.6 s for its float16 export (benchmarks/experiments/README.md, ``decode_step_gpu.py``).

Usage: ``PYTHONPATH=. python3 benchmarks/experiments/int4_compile_gpu.py [--shapes 2048x2048
8192x2048] [--counts 1 16 112]``; ``TF_CPP_VMODULE=gpu_compiler=1 TF_CPP_MIN_LOG_LEVEL=0``
adds XLA's own phase times to stderr.
"""

from __future__ import annotations

import argparse
import sys
import time

import jax
import numpy as np

sys.path.insert(0, "tests")


def chain(n: int, count: int, k: int, int4: bool) -> bytes:
    """``count`` products in a chain over one weight ({K, N}, N = K so that they chain; a
    last one of N x K where N != K is left out)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    if int4:
        from test_int4_gemm_kernel import _nbits_model

        model = _nbits_model(rng, 1, n=n, k=k)
        g = model.graph
        nodes, prev = [], "A"
        for i in range(count):
            nodes.append(helper.make_node(
                "MatMulNBits", [prev, "B", "s", "z", "", "bias"], [f"y{i}"],
                domain="com.microsoft", K=k, N=n, bits=4, block_size=32))  # fmt: skip
            prev = f"y{i}"
        del g.node[:]
        g.node.extend(nodes)
        g.output[0].name = prev
        return model.SerializeToString()
    w = numpy_helper.from_array((rng.standard_normal((k, n)) * 0.02).astype(np.float16), "W")
    nodes, prev = [], "A"
    for i in range(count):
        nodes.append(helper.make_node("MatMul", [prev, "W"], [f"y{i}"]))
        prev = f"y{i}"
    graph = helper.make_graph(
        nodes, "chain",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT16, [1, k])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT16, [1, n])], [w],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def timed(model: bytes, k: int, fast_paths: bool = True) -> tuple[float, float]:
    from dml_jax import fastpath
    from dml_jax.onnx import InferenceSession

    s = InferenceSession(model, fast_paths=fast_paths)
    x = np.zeros((1, k), np.float16)
    s.program([x.shape])
    (program,) = s._programs.values()
    params = s._device_params()

    def traced(params, x):
        with fastpath.target_platform(fastpath.platform_of(s._device)):
            return program.apply(params, x)

    t = time.perf_counter()
    lowered = jax.jit(traced).trace(params, x).lower()
    t1 = time.perf_counter()
    lowered.compile()
    return t1 - t, time.perf_counter() - t1


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", nargs="*", default=["2048x2048", "8192x8192"])
    p.add_argument("--counts", nargs="*", type=int, default=[1, 4, 16, 64])
    a = p.parse_args()
    print(jax.devices()[0].device_kind, jax.__version__, flush=True)
    for shape in a.shapes:
        n, k = map(int, shape.split("x"))
        for count in a.counts:
            for name, int4, fast in (("int4", True, True), ("int4 lax", True, False),
                                     ("float16", False, True)):  # fmt: skip
                lower, comp = timed(chain(n, count, k, int4), k, fast)
                print(f"{shape} x{count:<4} {name:9} lower {lower:6.2f} s  compile {comp:6.2f} s",
                      flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
