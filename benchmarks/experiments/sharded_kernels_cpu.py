"""Issue 65 (fast paths that shard): the GPU kernels a sharded ONNX session's program holds,
traced for CUDA on simulated CPU devices. The ONNX transformer of examples/onnx_transformer.py
at its default size (d_model 1024, 16 heads, ffn 4096, 2 layers, batch 8 x 512) on one device
and on a 2 x 2 (data, model) mesh: the count of ``pallas_call``s in each program's jaxpr and
of the regions that would run them per shard (``shard_map``, ``custom_partitioning``).

Usage: ``python benchmarks/experiments/sharded_kernels_cpu.py`` (CPU; about a minute).
"""

from __future__ import annotations

import collections
import os
import re
import sys

flag = "--xla_force_host_platform_device_count=4"
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + flag).strip()
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples"))

import jax
from onnx_transformer import example_input, tiny_transformer

from dml_jax import fastpath
from dml_jax.onnx import InferenceSession

PRIMITIVES = re.compile(r"= (pallas_call|shard_map|custom_partitioning)\[")


def main() -> None:
    fastpath.cuda_present = lambda: True  # the CUDA branches traced on this CPU
    model = tiny_transformer(1024, 16, 4096, 2)
    x = example_input(8, 512, 1024)
    for mesh in (None, jax.make_mesh((2, 2), ("data", "model"))):
        s = InferenceSession(model, mesh=mesh)
        s.program([x.shape])
        (program,) = s._programs.values()
        params = s._mesh_params(program) if mesh is not None else s._device_params()

        def traced(params, x, program=program):
            with fastpath.target_platform("cuda"):
                return program.apply(params, x)

        found = collections.Counter(PRIMITIVES.findall(str(jax.make_jaxpr(traced)(params, x))))
        print("2 x 2 mesh" if mesh is not None else "one device", dict(found))


if __name__ == "__main__":
    main()
