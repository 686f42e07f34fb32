"""GPU fast paths: Pallas kernels where XLA's own code runs below memory bandwidth, and cuDNN's
attention where XLA has no fused form.

Each module registers its fast paths with ``dml_jax.fastpath`` (an operator type, a predicate
on the descriptor and a CUDA lowering); importing this package, which ``import dml_jax`` does,
fills that registry. ``dml_jax.fastpath.lowering`` then picks the fast path only when the program
is lowered for CUDA; every other case, and every other platform, runs the lax lowering in
``dml_jax.ops``, which stays the reference. benchmarks/RESULTS.md has the figures.

- ``reduce`` (tiling in ``reduce_plan``, registration in ``reduce_paths``): single-pass Pallas
  kernels for ARGMIN/ARGMAX, LOG_SUM_EXP and 1-byte integer MAX/MIN;
- ``movement``: narrow-type TILE, SPLIT, JOIN and DEPTH_TO_SPACE as 32-bit words, JOIN and
  DEPTH_TO_SPACE kernels, SPACE_TO_DEPTH as strided slices;
- ``elementwise``: a Pallas CLIP kernel for narrow types;
- ``elementwise_map``: one kernel that runs any element-wise operator's lowering block by block,
  for narrow types;
- ``softmax``: one-pass SOFTMAX and LOG_SOFTMAX (both versions);
- ``mvn``: single-pass MEAN_VARIANCE_NORMALIZATION (versions 0, 1 and 2) over the minor axes
  (long rows on a cluster of CTAs on Hopper);
- ``pooling``: overlapping 2-D MAX and AVERAGE pooling, window rows kept in registers;
- ``scan``: one-pass CUMULATIVE_SUMMATION / CUMULATIVE_PRODUCT;
- ``topk``: TOP_K / TOP_K1 for a small K along the minor axis, in registers;
- ``generate``: FILL_VALUE_CONSTANT and minor-axis ONE_HOT, write-only blocks;
- ``padding``: EDGE, REFLECTION, SYMMETRIC and WRAP PADDING / PADDING1 as one gather pass;
- ``resample``: integer-factor bilinear UPSAMPLE_2D / RESAMPLE(1, 2, 3) at pixel centres, and
  their nearest-neighbour repeats of narrow types;
- ``scatter``: minor-axis SCATTER (SCATTER_ELEMENTS), each line's updates stored in order, in
  shared memory on Hopper (Mosaic GPU), into global memory by a Triton kernel elsewhere;
- ``int8_gemm``: the int8 x int8 -> int32 products of MATRIX_MULTIPLY_INTEGER(_TO_FLOAT) and
  QUANTIZED_LINEAR_MATRIX_MULTIPLY, zero-point terms in the epilogue;
- ``quantize``: per-tensor and per-axis ELEMENT_WISE_QUANTIZE_LINEAR and QUANTIZE, correctly
  rounded division;
- ``attention``: MULTIHEAD_ATTENTION(1) on cuDNN's fused attention;
- ``gemm``: float16 GEMM with a C term, and a graph's GEMM node with the GELU, ADD or
  MULTIHEAD_ATTENTION node that reads it, in one Mosaic GPU kernel (Hopper);
- ``lstm``: float16 LSTM as one persistent kernel a direction, the recurrence weights held in
  shared memory across the steps and a grid-wide barrier a step (Hopper);
- ``mosaic``: where the Mosaic GPU kernels run (a Hopper GPU, the jax releases they were
  tested under).
"""

from . import (
    attention,
    elementwise,
    elementwise_map,
    gemm,
    generate,
    int8_gemm,
    lstm,
    movement,
    mvn,
    padding,
    pooling,
    quantize,
    reduce,
    reduce_paths,
    reduce_plan,
    resample,
    scan,
    scatter,
    softmax,
    topk,
)
from .reduce_paths import arg_reduce, log_sum_exp, reduce_extreme
from .reduce_plan import plan

__all__ = [
    "arg_reduce",
    "attention",
    "elementwise",
    "elementwise_map",
    "gemm",
    "generate",
    "int8_gemm",
    "log_sum_exp",
    "lstm",
    "movement",
    "mvn",
    "padding",
    "plan",
    "pooling",
    "quantize",
    "reduce",
    "reduce_extreme",
    "reduce_paths",
    "reduce_plan",
    "resample",
    "scan",
    "scatter",
    "softmax",
    "topk",
]
