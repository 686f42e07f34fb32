"""GPU-only paths for what XLA's own code runs below memory bandwidth.

``reduce``: Pallas kernels for ARGMIN/ARGMAX, LOG_SUM_EXP and 1-byte integer MAX/MIN;
``movement``: narrow-type data movement as 32-bit words, JOIN and DEPTH_TO_SPACE kernels; ``elementwise``: a Pallas CLIP kernel for narrow types. Each is used
only when lowered for CUDA (``lax.platform_dependent``); benchmarks/RESULTS.md has the figures.

ARGMIN/ARGMAX over a non-minor axis and a numerically stable LOG_SUM_EXP need two passes (or a
variadic reduce) in lax, which XLA's GPU backend runs at roughly a quarter to a half of the copy
bandwidth. The kernels here read the tensor once. They are used only when the computation is
lowered for CUDA and the case is covered (see ``reduce.plan``); every other case, and every other
platform, runs the lax lowering in ``dml_jax.ops.reduce``, which stays the reference.
"""

from .reduce import arg_reduce, log_sum_exp, plan, reduce_extreme

__all__ = ["arg_reduce", "log_sum_exp", "plan", "reduce_extreme"]
