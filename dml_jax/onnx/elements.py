"""ONNX element types in the DML graph: which DML data type (and NumPy dtype) each ONNX
TensorProto element type has, the types no DirectML tensor holds (carried in a wider one), and
the checks and conversions of arrays entering the graph (64-bit integers narrowed to 32 bits,
DirectML's rank and size limits). What ``importer`` and ``protos`` build on."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from ..enums import DataType
from ..errors import ValidationError

ONNX = "ONNX"

# ONNX TensorProto element types -> (DML data type in the graph, NumPy dtype of the ONNX
# tensor). BOOL is stored as UINT8 (as ONNX Runtime's DirectML provider does); INT64 and UINT64
# are narrowed to their 32-bit types (module docstring).
_ONNX_TYPES: dict[int, tuple[DataType, np.dtype]] = {
    1: (DataType.FLOAT32, np.dtype("float32")),
    2: (DataType.UINT8, np.dtype("uint8")),
    3: (DataType.INT8, np.dtype("int8")),
    4: (DataType.UINT16, np.dtype("uint16")),
    5: (DataType.INT16, np.dtype("int16")),
    6: (DataType.INT32, np.dtype("int32")),
    7: (DataType.INT32, np.dtype("int64")),
    9: (DataType.UINT8, np.dtype("bool")),
    10: (DataType.FLOAT16, np.dtype("float16")),
    11: (DataType.FLOAT64, np.dtype("float64")),
    12: (DataType.UINT32, np.dtype("uint32")),
    13: (DataType.UINT32, np.dtype("uint64")),
}
# The element types no DirectML tensor holds (bfloat16, the float8 / float4 types, the 4- and
# 2-bit integers): each is held in the graph in a wider DML type (its carrier) that holds every
# one of its values exactly, and rounded to its own type where a node makes new values
# (``walk``: after each node; ``carried_round``), so a graph computes them as float32 (or 8-bit)
# arithmetic rounded once per node, and the session takes and returns JAX's / ml_dtypes' arrays
# of the type itself (docs/semantics.md, "ONNX: types without a DML data type").
CARRIED: dict[int, tuple[DataType, np.dtype]] = {
    16: (DataType.FLOAT32, np.dtype(jnp.bfloat16)),
    17: (DataType.FLOAT32, np.dtype(jnp.float8_e4m3fn)),
    18: (DataType.FLOAT32, np.dtype(jnp.float8_e4m3fnuz)),
    19: (DataType.FLOAT32, np.dtype(jnp.float8_e5m2)),
    20: (DataType.FLOAT32, np.dtype(jnp.float8_e5m2fnuz)),
    21: (DataType.UINT8, np.dtype(jnp.uint4)),
    22: (DataType.INT8, np.dtype(jnp.int4)),
    23: (DataType.FLOAT32, np.dtype(jnp.float4_e2m1fn)),
    24: (DataType.FLOAT32, np.dtype(jnp.float8_e8m0fnu)),
    25: (DataType.UINT8, np.dtype(jnp.uint2)),
    26: (DataType.INT8, np.dtype(jnp.int2)),
}
_ONNX_TYPES.update(CARRIED)
_CARRIER_DTYPES = {dtype: t.numpy_dtype for t, dtype in CARRIED.values()}
_ELEM_OF_DTYPE = {dtype: k for k, (_, dtype) in _ONNX_TYPES.items()}
BOOL = 9
TYPE_NAMES = {
    1: "float",
    2: "uint8",
    3: "int8",
    4: "uint16",
    5: "int16",
    6: "int32",
    7: "int64",
    8: "string",
    9: "bool",
    10: "float16",
    11: "double",
    12: "uint32",
    13: "uint64",
    14: "complex64",
    15: "complex128",
    16: "bfloat16",
    17: "float8e4m3fn",
    18: "float8e4m3fnuz",
    19: "float8e5m2",
    20: "float8e5m2fnuz",
    21: "uint4",
    22: "int4",
    23: "float4e2m1",
    24: "float8e8m0",
    25: "uint2",
    26: "int2",
}
_NARROW = {np.dtype("int64"): np.dtype("int32"), np.dtype("uint64"): np.dtype("uint32")}


def data_type_of(elem_type: int, where: str) -> DataType:
    """The DML data type an ONNX element type has in the graph; others are a
    ``ValidationError``."""
    entry = _ONNX_TYPES.get(int(elem_type))
    if entry is None:
        name = TYPE_NAMES.get(int(elem_type), str(elem_type))
        raise ValidationError(f"{ONNX}: {where}: element type {name} has no DML data type")
    return entry[0]


def numpy_dtype_of(elem_type: int, where: str) -> np.dtype:
    """The NumPy dtype of an ONNX element type (int64 for INT64, bool for BOOL)."""
    data_type_of(elem_type, where)
    return _ONNX_TYPES[int(elem_type)][1]


def elem_type_of(dtype: Any) -> int:
    """The ONNX element type of a NumPy dtype (0 when ONNX has none of DML's)."""
    return _ELEM_OF_DTYPE.get(np.dtype(dtype), 0)


BFLOAT16 = 16


def round_to_bfloat16(x: Any) -> Any:
    """float32 ``x`` rounded to bfloat16's values (nearest, ties to even; NaN stays NaN), still
    float32: integer arithmetic on the bits, which no compiler can drop as it can a pair of
    conversions where it allows excess precision (XLA on GPUs)."""
    bits = lax.bitcast_convert_type(x.astype(jnp.float32), jnp.uint32)
    rounded = (bits + jnp.uint32(0x7FFF) + ((bits >> 16) & 1)) & jnp.uint32(0xFFFF0000)
    y = lax.bitcast_convert_type(rounded, jnp.float32)
    return jnp.where(jnp.isnan(x), x.astype(jnp.float32), y)


def graph_dtype(dtype: Any) -> np.dtype:
    """The dtype a tensor of NumPy ``dtype`` has in the DML graph (bool -> uint8, 64-bit
    integers -> 32-bit)."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return np.dtype(np.uint8)
    if dtype in _CARRIER_DTYPES:
        return _CARRIER_DTYPES[dtype]
    return _NARROW.get(dtype, dtype)


def to_graph_array(array: np.ndarray, where: str) -> np.ndarray:
    """``array`` in its graph dtype (``graph_dtype``); a 64-bit integer that does not fit in 32
    bits is a ``ValidationError`` naming ``where``."""
    array = np.asarray(array)
    target = graph_dtype(array.dtype)
    if target == array.dtype:
        return array
    if array.dtype in _NARROW and array.size:
        info = np.iinfo(target)
        lo, hi = int(array.min()), int(array.max())
        if lo < info.min or hi > info.max:
            bad = lo if lo < info.min else hi
            raise ValidationError(
                f"{ONNX}: {where}: the {array.dtype} value {bad} does not fit in {target} "
                f"(64-bit integers are computed in 32 bits, as ONNX Runtime's DirectML "
                "provider does; docs/semantics.md)"
            )
    return array.astype(target)


def check_dml_shape(shape: Sequence[int], where: str, what: str) -> None:
    """A tensor of ONNX ``shape`` that must enter the DML graph as itself (a model input, a
    constant operand): DirectML tensors have 1 to 8 dimensions and at most 2^32 - 1 elements.
    The error names ``where`` (the input, node or output) and ``what``."""
    from ..tensor import MAX_DIMENSIONS, UINT32_MAX

    if len(shape) > MAX_DIMENSIONS:
        raise ValidationError(
            f"{ONNX}: {where}: {what} has {len(shape)} dimensions (shape {list(shape)}); a "
            f"DirectML tensor has at most {MAX_DIMENSIONS}"
        )
    count = math.prod(shape)
    if count > UINT32_MAX:
        raise ValidationError(
            f"{ONNX}: {where}: {what} of shape {list(shape)} holds {count} elements; a "
            f"DirectML tensor holds at most {UINT32_MAX}"
        )
