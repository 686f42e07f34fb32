"""A Megatron MLP block as one DML graph, for tests/test_gemm_shards.py and its worker:
GEMM (bias) -> GELU -> GEMM (bias) -> ADD with the block's input, float16, its inputs (x, the
first weight {ffn, d}, its bias row, the second weight {d, ffn}, its bias row) and a float64
reference."""

from __future__ import annotations

from math import erf

import numpy as np

import dml_jax as dml

T = dml.TensorDesc


def graph(tokens: int = 256, dm: int = 512, ffn: int = 2048) -> dml.GraphDesc:
    x, h = T("FLOAT16", (tokens, dm)), T("FLOAT16", (tokens, ffn))
    bias = {n: T("FLOAT16", (1, n)) for n in (dm, ffn)}
    nodes = [
        dml.ElementWiseIdentityOperatorDesc(bias[ffn], bias[ffn]),
        dml.ElementWiseIdentityOperatorDesc(bias[dm], bias[dm]),
        dml.GemmOperatorDesc(x, T("FLOAT16", (ffn, dm)), T("FLOAT16", (tokens, ffn), strides=(0, 1)),
                             h, trans_b="TRANSPOSE"),
        dml.ActivationGeluOperatorDesc(h, h),
        dml.GemmOperatorDesc(h, T("FLOAT16", (dm, ffn)), T("FLOAT16", (tokens, dm), strides=(0, 1)),
                             x, trans_b="TRANSPOSE"),
        dml.ElementWiseAddOperatorDesc(x, x, x),
    ]  # fmt: skip
    edge, inner = dml.InputGraphEdge, dml.IntermediateGraphEdge
    return dml.GraphDesc(
        input_count=5, output_count=1, nodes=nodes,
        input_edges=[edge(2, 0, 0), edge(4, 1, 0), edge(0, 2, 0), edge(1, 2, 1), edge(3, 4, 1),
                     edge(0, 5, 0)],
        intermediate_edges=[inner(0, 0, 2, 2), inner(2, 0, 3, 0), inner(3, 0, 4, 0),
                            inner(1, 0, 4, 2), inner(4, 0, 5, 1)],
        output_edges=[dml.OutputGraphEdge(5, 0, 0)],
    )  # fmt: skip


def inputs(tokens: int = 256, dm: int = 512, ffn: int = 2048, seed: int = 2) -> list:
    rng = np.random.default_rng(seed)
    return [
        rng.standard_normal((tokens, dm)).astype(np.float16),
        (rng.standard_normal((ffn, dm)) / np.sqrt(dm)).astype(np.float16),
        (rng.standard_normal((1, ffn)) / 10).astype(np.float16),
        (rng.standard_normal((dm, ffn)) / np.sqrt(ffn)).astype(np.float16),
        (rng.standard_normal((1, dm)) / 10).astype(np.float16),
    ]


def reference(values: list) -> np.ndarray:
    """The block in float64, GELU exact."""
    x, w1, b1, w2, b2 = (v.astype(np.float64) for v in values)
    u = x @ w1.T + b1
    g = u * 0.5 * (1 + np.vectorize(erf)(u / np.sqrt(2)))
    return x + g @ w2.T + b2
