"""A DML_GRAPH_DESC pipeline compiled into one XLA program.

An RGB image goes through four DirectML operators, wired as a graph:

    image (1, 3, 8, 8)
      -> SPACE_TO_DEPTH1 (BlockSize 2)          -> (1, 12, 4, 4): each 2x2 patch becomes channels
      -> ELEMENT_WISE_CLIP with ScaleBias        -> x / 255 - 0.5, clipped to [-0.25, 0.25]
      -> REDUCE(AVERAGE) over the spatial axes   -> (1, 12, 1, 1): graph output 0
      -> ARGMAX over the channels                -> (1, 1, 1, 1) UINT32: graph output 1

Run it with ``python examples/graph_pipeline.py``. It prints both graph outputs, checks them
against NumPy, and lists the kernels XLA's optimizer left in the program on this machine.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

try:
    import dml_jax as dml
except ImportError:  # running from a source checkout without installing the package
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import dml_jax as dml

from dml_jax.hlo import entry_instructions, optimized_hlo


def build_graph() -> dml.GraphDesc:
    image = dml.TensorDesc("FLOAT32", (1, 3, 8, 8))
    patches = dml.TensorDesc("FLOAT32", (1, 12, 4, 4))
    means = dml.TensorDesc("FLOAT32", (1, 12, 1, 1))
    best = dml.TensorDesc("UINT32", (1, 1, 1, 1))
    nodes = (
        dml.SpaceToDepth1OperatorDesc(image, patches, block_size=2, order="DEPTH_COLUMN_ROW"),
        dml.ElementWiseClipOperatorDesc(
            patches, patches, min=-0.25, max=0.25, scale_bias=dml.ScaleBias(1 / 255, -0.5)
        ),
        dml.ReduceOperatorDesc("AVERAGE", patches, means, axes=(2, 3)),
        dml.ArgMaxOperatorDesc(means, best, axes=(1,)),
    )
    return dml.GraphDesc(
        input_count=1,
        output_count=2,
        nodes=nodes,
        input_edges=(dml.InputGraphEdge(0, 0, 0),),
        output_edges=(dml.OutputGraphEdge(2, 0, 0), dml.OutputGraphEdge(3, 0, 1)),
        intermediate_edges=(
            dml.IntermediateGraphEdge(0, 0, 1, 0),
            dml.IntermediateGraphEdge(1, 0, 2, 0),
            dml.IntermediateGraphEdge(2, 0, 3, 0),  # the averages feed ARGMAX and Outputs[0]
        ),
    )


def numpy_pipeline(image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The same computation written directly in NumPy, from the operators' definitions."""
    n, c, h, w = image.shape
    # SPACE_TO_DEPTH, DEPTH_COLUMN_ROW: output channel (i * 2 + j) * C + c holds pixel (i, j).
    blocks = image.reshape(n, c, h // 2, 2, w // 2, 2).transpose(0, 3, 5, 1, 2, 4)
    patches = blocks.reshape(n, 4 * c, h // 2, w // 2)
    scaled = patches * np.float32(1 / 255) + np.float32(-0.5)
    clipped = np.maximum(np.float32(-0.25), np.minimum(scaled, np.float32(0.25)))
    means = clipped.mean(axis=(2, 3), keepdims=True, dtype=np.float32)
    best = means.reshape(n, -1).argmax(axis=1).astype(np.uint32).reshape(n, 1, 1, 1)
    return means, best


def main() -> None:
    # A synthetic 8x8 RGB image: a horizontal red ramp, a vertical green ramp, flat blue.
    ys, xs = np.mgrid[0:8, 0:8].astype(np.float32)
    image = np.stack([xs * 36, ys * 30, np.full_like(xs, 120)])[None]

    graph = dml.compile_graph(build_graph())
    means, best = graph(image)

    print(f"graph: {len(graph.desc.nodes)} nodes, evaluated in order {list(graph.order)}")
    print(
        "Outputs[0] (channel averages):", " ".join(f"{v:+.4f}" for v in np.asarray(means).ravel())
    )
    print("Outputs[1] (ARGMAX channel):  ", int(np.asarray(best).ravel()[0]))

    want_means, want_best = numpy_pipeline(image)
    np.testing.assert_allclose(np.asarray(means), want_means, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(np.asarray(best), want_best)
    print("matches the NumPy pipeline")

    work = entry_instructions(optimized_hlo(graph, image))
    readers = [i.name for i in work if "parameter(0)" in i.operands]
    print(
        f"XLA program: {len(work)} kernels for {len(graph.desc.nodes)} operators; "
        f"{len(readers)} of them ({', '.join(readers)}) reads the image"
    )
    for i in work:
        reads = ", ".join("the image" if o == "parameter(0)" else o for o in i.operands)
        print(f"  {i.name}: {i.opcode} {i.kind} -> {i.shape}, reads {reads}")


if __name__ == "__main__":
    main()
