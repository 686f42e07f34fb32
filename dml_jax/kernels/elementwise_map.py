"""One Pallas (Triton) kernel for the narrow-type element-wise operators on CUDA GPUs.

XLA's GPU code for element-wise float16 and 1-byte ops runs at about 0.78 and 0.39-0.59 of the copy
on an H200 (benchmarks/RESULTS.md#operators), as for CLIP before its kernel. This kernel reads
blocks of contiguous elements of every input (16-byte vector accesses) and applies the operator's
own lax lowering to the block, so its values are the lowering's by construction; what can differ is
how Triton lowers a primitive, which is why an operator is registered only after the GPU check
(``benchmarks/elementwise_check.py`` (git history)) found it bit-exact against the lax program. Left
to XLA: ERF, ROUND and BIT_COUNT (primitives Pallas cannot lower for Triton), and on float tensors
MIN, MAX and THRESHOLD (Triton's float min/max drop NaN where XLA's propagate it), NEGATE (a zero's
sign), the two MODULUS operators and ELU (last-bit differences in fmod and expm1), and the
activations ``ACTIVATIONS`` leaves out (below); ADD1 only with no fused activation or one the kernel
runs (``ACTIVATIONS`` but ELU).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..fastpath import register_fast_path
from ..registry import lookup
from .pallas_helpers import load_pallas

NARROW = frozenset(np.dtype(t) for t in ("float16", "int8", "uint8", "int16", "uint16"))
BLOCK_BYTES = 4096  # bytes of the widest tensor per program (CLIP's kernel: 0.97-0.98 of copy)
NUM_WARPS = 4
_INDEX_LIMIT = 2**31 - 2**20

# Element-wise activations the kernel runs (checked bit-exact on the GPU). Left to XLA: GELU
# (erf), CELU and SCALED_ELU (expm1, as ELU on floats), HARD_SIGMOID and HARD_SWISH (Alpha * x +
# Beta clamped: whether a compiler contracts it into an FMA moves a float16 result by one ulp,
# which the GPU check found), SHRINK (Triton could not lower its one-element case), SCALED_TANH
# (a float16 result one bit apart from the lax program's among 2^20 random values on an H200,
# 2026-11-30: tests/test_kernels_gpu.py; TANH alone stayed bit-exact).
ACTIVATIONS = (
    "ELU",
    "LINEAR",
    "RELU",
    "SIGMOID",
    "IDENTITY",
    "LEAKY_RELU",
    "PARAMETERIZED_RELU",
    "PARAMETRIC_SOFTPLUS",
    "SOFTPLUS",
    "SOFTSIGN",
    "SWISH",
    "TANH",
    "THRESHOLDED_RELU",
)
# Operators whose lowering is element-wise on arrays of any shape; a float16 NaN through float
# min/max is the one known difference (see the module docstring).
_element_wise = "DML_OPERATOR_ELEMENT_WISE_"
OPERATORS = tuple(
    _element_wise + name
    for name in [
        "IDENTITY",
        "ADD",
        "ADD1",
        "ABS",
        "ACOS",
        "ACOSH",
        "ASIN",
        "ASINH",
        "ATAN",
        "ATANH",
        "CEIL",
        "COS",
        "COSH",
        "EXP",
        "FLOOR",
        "LOG",
        "RECIP",
        "SIN",
        "SINH",
        "SQRT",
        "TAN",
        "TANH",
        "CONSTANT_POW",
        "NEGATE",
        "SIGN",
        "SUBTRACT",
        "MULTIPLY",
        "DIVIDE",
        "MEAN",
        "MODULUS_TRUNCATE",
        "MODULUS_FLOOR",
        "ATAN_YX",
        "DIFFERENCE_SQUARE",
        "POW",
        "LOGICAL_AND",
        "LOGICAL_OR",
        "LOGICAL_XOR",
        "LOGICAL_NOT",
        "LOGICAL_EQUALS",
        "LOGICAL_GREATER_THAN",
        "LOGICAL_GREATER_THAN_OR_EQUAL",
        "LOGICAL_LESS_THAN",
        "LOGICAL_LESS_THAN_OR_EQUAL",
        "IS_NAN",
        "IS_INFINITY",
        "IF",
        "BIT_AND",
        "BIT_OR",
        "BIT_XOR",
        "BIT_NOT",
        "BIT_SHIFT_LEFT",
        "BIT_SHIFT_RIGHT",
        "MAX",
        "MIN",
        "THRESHOLD",
    ]
) + tuple(f"DML_OPERATOR_ACTIVATION_{name}" for name in ACTIVATIONS)
_NOT_ON_FLOATS = frozenset(
    [
        _element_wise + n
        for n in ("MAX", "MIN", "THRESHOLD", "NEGATE", "MODULUS_TRUNCATE", "MODULUS_FLOOR")
    ]
    + ["DML_OPERATOR_ACTIVATION_ELU"]
)
_FUSABLE_IN_KERNEL = frozenset(
    f"DML_OPERATOR_ACTIVATION_{n}" for n in ACTIVATIONS if n not in ("ELU",)
)


def covered(desc) -> bool:
    """Whether the kernel runs ``desc``: every tensor narrow or the output narrow, packed sizes."""
    tensors = [t for _, t in desc.input_slots() + desc.output_slots()]
    if not any(t.dtype in NARROW for t in tensors):
        return False
    if any(not t.is_packed for t in tensors):
        # Buffer mode reads such a tensor (a stride-0 broadcast, padding) outside the kernel,
        # which would then read it materialized: XLA's fused program does better (0.78 against
        # 0.37 of the copy for a float16 per-channel B on an H200).
        return False
    if any(t.dtype.itemsize > 2 for t in tensors):
        return False  # a 4- or 8-byte tensor: XLA's code is at the copy roofline already
    if desc.operator_type in _NOT_ON_FLOATS and tensors[0].data_type.is_float:
        return False
    fused = getattr(desc, "fused_activation", None)
    if fused is not None and fused.operator_type not in _FUSABLE_IN_KERNEL:
        return False
    n = math.prod(tensors[0].sizes)
    return 0 < n < _INDEX_LIMIT


def map_kernel(fn, arrays, out_dtype, interpret: bool = False):
    """``fn(*blocks)`` over equal-size arrays, block by block; the result has ``out_dtype``."""
    pl, pltriton = load_pallas()
    shape = arrays[0].shape
    n = math.prod(shape)
    widest = max([a.dtype.itemsize for a in arrays] + [np.dtype(out_dtype).itemsize])
    block = max(128, BLOCK_BYTES // widest)

    def kernel(*refs):
        *in_refs, o_ref = refs
        pid = pl.program_id(0)
        valid = pid * block + jnp.arange(block, dtype=jnp.int32) < n
        blocks = [pltriton.load(r.at[pl.ds(pid * block, block)], mask=valid) for r in in_refs]
        y = fn(*blocks).astype(out_dtype)
        pltriton.store(o_ref.at[pl.ds(pid * block, block)], y, mask=valid)

    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((n,), out_dtype),
        grid=(-(-n // block),),
        interpret=interpret,
        compiler_params=pltriton.CompilerParams(num_warps=NUM_WARPS, num_stages=1),
    )(*[lax.reshape(a, (n,)) for a in arrays])
    return lax.reshape(out, shape)


def lower_with_kernel(desc, *arrays, interpret: bool = False) -> tuple:
    """The operator's lax lowering applied block by block inside one kernel."""
    spec = lookup(desc.operator_type)

    def fn(*blocks):
        (y,) = spec.lower(desc, *blocks)
        return y

    return (map_kernel(fn, arrays, desc.output_tensor.dtype, interpret),)


for _name in OPERATORS:
    register_fast_path(_name, "map", covered, lower_with_kernel, standalone=True)
