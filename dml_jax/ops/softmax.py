"""DML_OPERATOR_ACTIVATION_SOFTMAX, LOG_SOFTMAX, HARDMAX and their ``1`` versions.

The original operators (FL 1_0) normalize over the last dimension of a tensor whose effective
rank (DimensionCount without the leading size-1 dimensions) is at most 2; the ``1`` versions
(FL 5_1) over any non-empty set of unique ``Axes``, and equal the originals with
``Axes = {DimensionCount - 1}``. They are not fusable and not in place.

Numerics (docs/semantics.md, "Softmax"): FLOAT16 is computed in float32 and rounded once; the
maximum over the normalized elements is subtracted first, so large magnitudes neither overflow
nor lose their differences, and ``-inf`` entries give 0 (log: ``-inf``). A slice that is all
``-inf`` has no normalization: NaN, as is any slice holding a NaN or ``+inf``. Finite input never
gives NaN, however XLA fuses the lowering (``shifted``). HARDMAX gives 1 at
the first maximum in row-major order over the normalized axes (NaN counts as the maximum, as in
ARGMAX) and 0 elsewhere; it is piecewise constant, so its gradient is 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import jax.numpy as jnp
from jax import lax

from ..enums import FeatureLevel as L
from ..errors import Validator
from ..fields import UINT_ARRAY, OperatorDesc, attribute, count_of, input_field, output_field
from ..registry import Example, register
from ..support import DIMS1_8, DIMS4, DIMS4_5, F2, rows
from ..tensor import TensorDesc
from ._common import below_maximum, in_float32, infer_same, same_tensors
from .reduce import arg_reduce

_V0_TABLE = rows((L.FL_1_0, DIMS4, F2), (L.FL_2_0, DIMS4_5, F2), (L.FL_3_0, DIMS1_8, F2))
_V1_TABLE = rows((L.FL_5_1, DIMS1_8, F2))


def shifted(x, axes: tuple[int, ...]):
    """``x - max(x)`` over ``axes``: at most 0, and exactly 0 at each slice's maximum.

    The slice's maximum element must give exactly ``exp(0) = 1``, so that the sum of the
    exponentials is at least 1. That needs the maximum and the differences to be taken from the
    same values, which XLA does not promise: it fuses the producer of ``x`` (a scale, a GEMM's
    bias) into the loop of the maximum and again into the loops of the exponentials, and the
    copies may round differently (one contracted into an FMA, say). Near 1e10 one float32 ulp is
    1024, so the maximum's own difference would be +-1024: ``exp`` overflows (inf / inf) or the
    whole slice underflows (0 / 0), NaN either way. The optimization barrier has ``x`` computed
    once and read by every loop where XLA keeps it; XLA's CPU backend did not, and
    ``below_maximum`` makes the maximum's own difference 0 and caps the others at 0 whatever
    the loops computed.

    An all ``-inf`` slice keeps the maximum ``-inf``, so its differences are NaN: no
    normalization exists. The maximum is held constant for differentiation (the softmax does
    not depend on it)."""
    x = lax.optimization_barrier(x)
    m = lax.stop_gradient(jnp.max(x, axis=axes, keepdims=True))
    return below_maximum(x, m)


def _sum_exp(d, axes: tuple[int, ...]):
    """The sum of ``exp(d)`` over ``axes``, at least 1 unless NaN.

    It is at least 1 by construction (``shifted``); the floor keeps a lowering that broke that
    from dividing by 0 (a finite result rather than NaN). A comparison, not ``maximum``: its
    derivative is the sum's own at 1 (``maximum`` would halve it at a tie)."""
    s = jnp.sum(jnp.exp(d), axis=axes, keepdims=True)
    return jnp.where(s < 1, jnp.ones_like(s), s)


def softmax(x, axes: tuple[int, ...]):
    """exp(x - max) / sum(exp(x - max)) over ``axes`` (float32 or wider)."""
    d = shifted(x, axes)
    return jnp.exp(d) / _sum_exp(d, axes)


def log_softmax(x, axes: tuple[int, ...]):
    """x - max - log(sum(exp(x - max))) over ``axes``."""
    d = shifted(x, axes)
    return d - jnp.log(_sum_exp(d, axes))


def hardmax(x, axes: tuple[int, ...]):
    """1 at the first maximum (row-major over ``axes``; NaN is the maximum), else 0.

    The index comes from REDUCE's ARGMAX lowering (integer order keys: XLA's GPU float argmax
    reports an arbitrary one of several NaNs); each element's row-major position within its
    slice is compared with it."""
    axes = tuple(sorted(axes))
    index = arg_reduce(x, axes, largest=True, last=False, out_dtype=jnp.int32)
    position = jnp.zeros(x.shape, jnp.int32)
    stride = 1
    for axis in reversed(axes):
        position = position + lax.broadcasted_iota(jnp.int32, x.shape, axis) * stride
        stride *= x.shape[axis]
    return (position == index).astype(x.dtype)


FUNCTIONS = {"SOFTMAX": softmax, "LOG_SOFTMAX": log_softmax, "HARDMAX": hardmax}
_SUMMARY = {
    "SOFTMAX": "exp(x) / sum(exp(x))",
    "LOG_SOFTMAX": "x - log(sum(exp(x)))",
    "HARDMAX": "1 at the first maximum, 0 elsewhere",
}


def _axes(d: Any) -> tuple[int, ...]:
    axes = getattr(d, "axes", None)
    return tuple(sorted(axes)) if axes is not None else (d.input_tensor.rank - 1,)


def _lower(function: str):
    fn = FUNCTIONS[function]

    def lower(d: Any, x):
        axes = _axes(d)
        if function == "HARDMAX":
            return (fn(x, axes),)  # exact in any float type: no rounding to do
        return (in_float32(lambda w: fn(w, axes), x),)

    return lower


def _validate_v0(d: Any, v: Validator) -> None:
    same_tensors(d, v)
    sizes = d.input_tensor.sizes
    leading = next((i for i, s in enumerate(sizes) if s != 1), len(sizes))
    effective = len(sizes) - leading
    v.check(
        "InputTensor.Sizes",
        effective <= 2,
        f"must have an effective rank of at most 2 (DimensionCount without the leading size-1 "
        f"dimensions), got {effective}",
    )


def _validate_v1(d: Any, v: Validator) -> None:
    same_tensors(d, v)
    v.axes("Axes", d.axes, d.input_tensor.rank)


def _v0_class(function: str) -> type:
    name = "".join(w.capitalize() for w in function.split("_"))

    @dataclass(frozen=True)
    class Desc(OperatorDesc):
        operator_type: ClassVar[str] = f"DML_OPERATOR_ACTIVATION_{function}"
        activation: ClassVar[bool] = True
        input_tensor: TensorDesc = input_field()
        output_tensor: TensorDesc = output_field()

    Desc.__name__ = Desc.__qualname__ = f"Activation{name}OperatorDesc"
    Desc.__doc__ = (
        f"DML_ACTIVATION_{function}_OPERATOR_DESC: {_SUMMARY[function]} over the last dimension "
        "(FL 1_0).\n\n"
        "    Fields:\n"
        "        input_tensor, output_tensor: same data type and sizes; the input's effective rank\n"
        "            (DimensionCount without leading size-1 dimensions) is at most 2.\n    "
    )
    Desc.__module__ = __name__
    return Desc


def _v1_class(function: str) -> type:
    name = "".join(w.capitalize() for w in function.split("_"))

    @dataclass(frozen=True)
    class Desc(OperatorDesc):
        operator_type: ClassVar[str] = f"DML_OPERATOR_ACTIVATION_{function}1"
        activation: ClassVar[bool] = True
        input_tensor: TensorDesc = input_field()
        output_tensor: TensorDesc = output_field()
        axis_count: int | None = count_of("axes")
        axes: tuple[int, ...] = attribute(UINT_ARRAY)

    Desc.__name__ = Desc.__qualname__ = f"Activation{name}1OperatorDesc"
    Desc.__doc__ = (
        f"DML_ACTIVATION_{function}1_OPERATOR_DESC: {_SUMMARY[function]} over Axes (FL 5_1).\n\n"
        "    Fields:\n"
        "        input_tensor, output_tensor: same data type and sizes.\n"
        "        axis_count: optional; must equal ``len(axes)``.\n"
        "        axes: non-empty, unique, each in [0, DimensionCount - 1]; order is irrelevant.\n"
        "    "
    )
    Desc.__module__ = __name__
    return Desc


def _example(function: str, version: str) -> Example:
    desc = {
        "InputTensor": {"DataType": "FLOAT32", "Sizes": [2, 3]},
        "OutputTensor": {"DataType": "FLOAT32", "Sizes": [2, 3]},
    }
    if version:
        desc["AxisCount"] = 1
        desc["Axes"] = [0]
    where = "over each column" if version else "over each row"
    return Example(
        {"type": f"DML_OPERATOR_ACTIVATION_{function}{version}", "desc": desc},
        {
            "InputTensor": [1.0, 2.0, 3.0, 3.0, 2.0, 1.0]
            if function != "HARDMAX"
            else [1, 3, 3, 2, 2, 0]
        },
        f"{_SUMMARY[function]} {where}",
    )


CLASSES: dict[str, type] = {}
for _function in FUNCTIONS:
    for _version, _make, _validate, _table in (
        ("", _v0_class, _validate_v0, _V0_TABLE),
        ("1", _v1_class, _validate_v1, _V1_TABLE),
    ):
        _cls = _make(_function)
        CLASSES[_function + _version] = _cls
        globals()[_cls.__name__] = _cls
        register(
            _cls,
            infer=infer_same,
            validate=_validate,
            lower=_lower(_function),
            support=_table,
            example=_example(_function, _version),
            differentiable=(lambda d, f=_function: f != "HARDMAX"),
        )
del _function, _version, _make, _validate, _table, _cls
